"""Power planning by simulation: how many seeds, with how many draws each, a claim needs.

The model comes from pilot runs: matched-random draws carry no claim effect, so the spread of
a seed's draws around their mean is the within-seed variability both tests see (a seed's
level cancels in every label value).  A simulated seed picks a pilot seed at random and
draws its m + 1 runs from that seed's centred draws (resampled with replacement, rescaled by
``sqrt(k / (k - 1))`` for k pilot draws, so skew and heavy tails are kept) around the pilot
seed's mean; the policy run is shifted by ``-gain`` (it violates the SLO less), and its own
noise may be scaled by ``policy_sd_ratio`` (a fixed-schedule policy often varies less than a
draw).  Pilot seeds with fewer than two draws cannot give a within-seed spread; with none
that can, a Gaussian with the spread of the paired differences is used instead
(``var(d) / (1 + 1/m)``, which also holds any real effect's variation: conservative).

For each simulated campaign the audit's fixed-n test, the studentized within-seed
permutation test (exact when few label sets, else Monte Carlo with the same label sets for
every campaign), is run on its first n seeds for every n on the grid, and the
anytime-valid e-process (:mod:`evalkit.stats.sequential`) is followed seed by seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from evalkit.errors import InputError
from evalkit.stats._result import DEFAULT_RTOL, ResultMixin, as_generator, check_alternative
from evalkit.stats.sequential import anytime_e_process, label_values_equal_m
from evalkit.stats.studentized import t_from_sums

__all__ = ["EXACT_LABEL_SETS", "permutation_p_batch", "pilot_model", "power_plan"]


@dataclass(frozen=True)
class PilotModel:
    """Within-seed variability of a pilot: per pilot seed its draw mean and centred draws."""

    means: tuple                     # (S,) pilot seeds' mean V of their draws
    residuals: tuple                 # S arrays of rescaled centred draws (empty: none)
    sd_within: float                 # pooled within-seed sd of a draw
    gaussian: bool                   # no seed had >= 2 draws: Gaussian with sd_within
    n_pilot_seeds: int
    source: str

    def sample(self, rng: np.random.Generator, reps: int, n: int, m: int, gain: float,
               policy_sd_ratio: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """Policy V (reps, n) and draws (reps, n, m) of simulated campaigns."""
        pick = rng.integers(0, len(self.means), size=(reps, n))
        level = np.asarray(self.means)[pick]
        if self.gaussian:
            noise = rng.normal(0.0, self.sd_within, size=(reps, n, m + 1))
        else:
            noise = np.empty((reps, n, m + 1))
            for k, res in enumerate(self.residuals):
                where = pick == k
                count = int(where.sum())
                if count:
                    noise[where] = rng.choice(res, size=(count, m + 1), replace=True)
        policy = level + policy_sd_ratio * noise[..., 0] - gain
        draws = level[..., None] + noise[..., 1:]
        return policy, draws


def pilot_model(policy, draws, source: str = "pilot") -> PilotModel:
    """A :class:`PilotModel` from a pilot's policy V (n,) and draws (n lists of V)."""
    pol = np.asarray(policy, dtype=float).reshape(-1)
    if pol.size != len(draws) or pol.size < 2:
        raise InputError(f"a pilot needs >= 2 seeds with a policy run and draws, got "
                         f"{pol.size} policy values and {len(draws)} draw lists",
                         column="seed", fix="run a pilot of >= 2 seeds (>= 3 better)")
    means, residuals = [], []
    pooled, dof = 0.0, 0
    for d in draws:
        d = np.asarray(d, dtype=float).reshape(-1)
        if d.size == 0 or not np.all(np.isfinite(d)):
            raise InputError("every pilot seed needs finite draws", column="violation_rate",
                             fix="rerun or drop the seed's failed draws")
        means.append(float(d.mean()))
        if d.size >= 2:
            c = d - d.mean()
            residuals.append(c * math.sqrt(d.size / (d.size - 1)))
            pooled += float(c @ c)
            dof += d.size - 1
        else:
            residuals.append(np.array([]))
    if dof > 0:
        keep = [i for i, r in enumerate(residuals) if r.size]
        return PilotModel(tuple(means[i] for i in keep), tuple(residuals[i] for i in keep),
                          math.sqrt(pooled / dof), False, pol.size, source)
    m = np.array([len(d) for d in draws], dtype=float)
    diff = np.array(means) - pol
    sd = math.sqrt(float(np.var(diff, ddof=1)) / float(np.mean(1.0 + 1.0 / m)))
    return PilotModel(tuple(means), tuple(np.array([]) for _ in means), sd, True, pol.size,
                      source)


EXACT_LABEL_SETS = 4096      # enumerate every label set up to here, Monte Carlo beyond
_CHUNK_ELEMENTS = 1 << 20    # bound on (R, b, n) temporaries


def permutation_p_batch(vals: np.ndarray, n_resamples: int, rng: np.random.Generator,
                        alternative: str = "two-sided") -> np.ndarray:
    """The audit's within-seed permutation p of many campaigns at once: studentized.

    vals: (R, n, m + 1) label values (index 0 observed).  Returns (R,).  The statistic is
    the audit's default, ``t = mean(d) / se(d)`` recomputed for every label set, with its
    tie tolerance (:func:`evalkit.stats.studentized.t_from_sums`); with one draw per seed
    every relabelling is a sign flip and the raw mean orders label sets as t does, so the
    raw sum is used there, as the audit does.  Up to :data:`EXACT_LABEL_SETS` label sets the
    p-value is exact (every label set; p = k / L, the identity included, so it never goes
    below the smallest attainable p); beyond, the same ``n_resamples`` random label sets
    serve every campaign, p = (k + 1) / (B + 1) -- the audit's Monte Carlo rule (it
    enumerates further, up to 2^22 label sets; B random ones estimate that p within Monte
    Carlo error, at a cost a simulation of many campaigns can carry).  Two-sided = 2 min.
    """
    reps, n, size = vals.shape
    exact = float(size) ** n <= EXACT_LABEL_SETS
    if exact:
        grids = np.meshgrid(*[np.arange(size)] * n, indexing="ij")
        labels = np.column_stack([g.reshape(-1) for g in grids])
    else:
        labels = rng.integers(0, size, size=(n_resamples, n))
    # one seed has no se: t is undefined, and the raw sum orders its m + 1 label sets
    ge, le = _label_counts(vals, labels, studentized=size > 2 and n >= 2)
    if exact:
        pg, pl = ge / labels.shape[0], le / labels.shape[0]
    else:
        pg, pl = (ge + 1) / (n_resamples + 1), (le + 1) / (n_resamples + 1)
    return {"greater": pg, "less": pl,
            "two-sided": np.minimum(1.0, 2 * np.minimum(pg, pl))}[alternative]


def _label_counts(vals: np.ndarray, labels: np.ndarray,
                  studentized: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per campaign, label sets whose statistic reaches the observed one from above / below.

    vals: (R, n, m + 1); labels: (L, n).  Returns two (R,) counts.  Raw sum: tolerance
    ``1e-9 x mean |d(j)| x n`` (the raw engine's); studentized: ``1e-9 x max(1, |t|)``,
    none for an infinite t (the studentized engine's).
    """
    reps, n, _ = vals.shape
    if studentized:
        obs = t_from_sums(vals[:, :, 0].sum(axis=1), (vals[:, :, 0] ** 2).sum(axis=1), n)
        finite = np.isfinite(obs)
        tol = np.where(finite, DEFAULT_RTOL * np.maximum(1.0, np.abs(np.where(finite, obs, 0))),
                       0.0)
    else:
        obs = vals[:, :, 0].sum(axis=1)
        tol = DEFAULT_RTOL * np.maximum(1e-300, np.abs(vals).mean(axis=(1, 2))) * n
    lo_bound, hi_bound = (obs - tol)[:, None], (obs + tol)[:, None]
    ge = np.zeros(reps)
    le = np.zeros(reps)
    seeds = np.arange(n)
    step = max(1, _CHUNK_ELEMENTS // max(1, reps * n))
    for lo in range(0, labels.shape[0], step):
        x = vals[:, seeds[None, :], labels[lo:lo + step]]           # (R, b, n)
        stat = (t_from_sums(x.sum(axis=2), np.einsum("rbn,rbn->rb", x, x), n)
                if studentized else x.sum(axis=2))                  # (R, b)
        ge += (stat >= lo_bound).sum(axis=1)
        le += (stat <= hi_bound).sum(axis=1)
    return ge, le


@dataclass(frozen=True)
class PowerRow(ResultMixin):
    """Power of one draws-per-seed setting."""

    m: int
    seeds: tuple                     # the grid of seed counts
    fixed_power: tuple               # power of the fixed-n test at each seed count
    sequential_power: tuple          # P(e-process crossed by that seed count)
    fixed_seeds_needed: int | None   # fewest seeds on the grid reaching the target
    sequential_seeds_needed: int | None
    mean_seeds_to_decision: float    # min(crossing, max seeds), averaged
    p90_seeds_to_decision: float
    decided_share: float             # crossed within the largest seed count


@dataclass(frozen=True)
class PowerPlan(ResultMixin):
    gain: float
    alpha: float
    alternative: str
    target: float
    policy_sd_ratio: float
    reps: int
    n_resamples: int
    rows: tuple
    sd_within: float
    model: str
    method: str

    def best(self, kind: str) -> PowerRow | None:
        """The draws-per-seed setting that reaches the target with the fewest runs
        (seeds x (m + 2): policy, m draws, no-sync)."""
        key = "fixed_seeds_needed" if kind == "fixed" else "sequential_seeds_needed"
        ok = [r for r in self.rows if getattr(r, key) is not None]
        return min(ok, key=lambda r: getattr(r, key) * (r.m + 2)) if ok else None


def power_plan(model: PilotModel, gain: float, *, alpha: float = 0.05,
               alternative: str = "two-sided", target: float = 0.8, draws=(1, 2, 3, 5),
               max_seeds: int = 40, seeds_grid=None, reps: int = 400,
               n_resamples: int = 400, policy_sd_ratio: float = 1.0, rng=None) -> PowerPlan:
    """Power of the fixed-n permutation test and of the sequential gate for ``gain``."""
    check_alternative(alternative)
    for name, value, lo, hi in (("alpha", alpha, 0.0, 1.0), ("target", target, 0.0, 1.0)):
        if not lo < float(value) < hi:
            raise InputError(f"{name} must lie in (0, 1), got {value}", column=name,
                             fix="e.g. 0.05 for alpha, 0.8 for the target power")
    if not math.isfinite(gain):
        raise InputError(f"gain must be a finite number, got {gain}", column="gain",
                         fix="the V reduction to detect as a share, e.g. 0.0145 (1.45 pp: "
                             "6.54% -> 5.09%)")
    if int(max_seeds) < 2:
        raise InputError(f"max_seeds must be >= 2, got {max_seeds}", column="max_seeds",
                         fix="e.g. max_seeds = 40")
    if int(reps) < 10:
        raise InputError(f"reps must be >= 10, got {reps}", column="reps", fix="e.g. reps = 400")
    gen = as_generator(rng)
    grid = sorted({int(n) for n in (seeds_grid or range(2, int(max_seeds) + 1))
                   if 2 <= int(n) <= int(max_seeds)})
    rows = []
    for m in draws:
        policy, dr = model.sample(gen, int(reps), int(max_seeds), int(m), float(gain),
                                  policy_sd_ratio)
        vals = label_values_equal_m(policy, dr)
        fixed = [float(np.mean(permutation_p_batch(vals[:, :n], int(n_resamples), gen,
                                                   alternative) <= alpha)) for n in grid]
        e = anytime_e_process(policy, dr, alternative)
        hit = e >= 1.0 / alpha
        crossed = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, int(max_seeds) + 1)
        seq = [float(np.mean(crossed <= n)) for n in grid]
        stop = np.minimum(crossed, int(max_seeds))

        def first(power):
            return next((n for n, p in zip(grid, power) if p >= target), None)

        rows.append(PowerRow(m=int(m), seeds=tuple(grid), fixed_power=tuple(fixed),
                             sequential_power=tuple(seq), fixed_seeds_needed=first(fixed),
                             sequential_seeds_needed=first(seq),
                             mean_seeds_to_decision=float(stop.mean()),
                             p90_seeds_to_decision=float(np.percentile(stop, 90)),
                             decided_share=float(np.mean(crossed <= int(max_seeds)))))
    return PowerPlan(gain=float(gain), alpha=float(alpha), alternative=alternative,
                     target=float(target), policy_sd_ratio=float(policy_sd_ratio),
                     reps=int(reps), n_resamples=int(n_resamples), rows=tuple(rows),
                     sd_within=model.sd_within,
                     model=("Gaussian, sd from the paired differences" if model.gaussian else
                            f"resampled centred draws of {len(model.means)} pilot seeds"),
                     method=(f"{reps} simulated campaigns per setting; fixed-n: studentized "
                             f"within-seed permutation test at each seed count (exact up to "
                             f"{EXACT_LABEL_SETS} label sets, else Monte Carlo with B = "
                             f"{n_resamples}); sequential: anytime-valid e-process, first "
                             "crossing of 1/alpha, decisions counted at min(crossing, max "
                             "seeds)"))
