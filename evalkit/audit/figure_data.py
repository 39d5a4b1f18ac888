"""What the report's figures draw, as plain data in the audit document, and their file names.

The report draws every figure from these values alone (it never sees the runs):

* per claim, ``figure_data.null``: the histogram of the test's null distribution (bin edges
  and counts of at most :data:`NULL_POINTS` label sets, not the label sets themselves), the
  observed statistic and its p-value;
* per claim, ``figure_data.psi``: the claim's policy runs and matched-random draws, drawn over
  the regime's φ/ψ table;
* per regime, ``figure_data.psi``: the φ/Vex table of the regime's runs, the fitted ψ on a
  grid of :data:`PSI_GRID_POINTS` φ values and ε_cal;
* per regime, ``figure_data.exposure``: V and exposure of each merging run, and the R² of
  the regression of one on the other.

The V-per-seed figure draws the claim's ``per_seed`` rows, which the document holds anyway.
"""

from __future__ import annotations

import numpy as np

from evalkit.names import file_part

__all__ = ["claim_figure_data", "figure_paths", "load_match_rows", "null_histogram",
           "regime_figure_data"]

NULL_POINTS = 20_000      # label sets of the null drawn for its histogram (all when fewer)
PSI_GRID_POINTS = 200
CLAIM_FIGURES = ("v_per_seed", "null", "psi")


def null_histogram(null: np.ndarray) -> dict:
    """Histogram of the (m,) null statistics: ``{edges (b+1,), counts (b,), size}``; the
    +-inf values (t with se = 0) are counted in ``size`` but fall in no bin; 10 to 60 bins,
    about sqrt of the finite values."""
    null = np.asarray(null, dtype=float)
    shown = null[np.isfinite(null)]
    bins = min(60, max(10, int(np.sqrt(max(1, shown.size)))))
    counts, edges = np.histogram(shown, bins=bins)
    return {"edges": edges, "counts": counts, "size": int(null.size)}


def null_figure(test, seed: int) -> dict:
    """The null histogram of a randomisation test's result, with what the figure labels."""
    out = null_histogram(test.null_distribution(max_points=NULL_POINTS, seed=seed))
    observed = float(test.null_observed if hasattr(test, "null_observed") else test.statistic)
    out.update(observed=observed, p_value=test.p_value, alternative=test.alternative,
               test=getattr(test, "test", "sign-flip"),
               statistic=getattr(test, "null_statistic", "mean"),
               # JSON has no inf: a t with se = 0 is written null, and named here
               observed_nonfinite=None if np.isfinite(observed) else str(observed))
    return out


def claim_figure_data(claim, seed: int) -> dict:
    """``{"null": ..., "psi": ...}`` of one ClaimResult, each only when its figure is drawn."""
    out = {}
    if claim.sign_flip is not None:      # the claim's test: its own null law of mean(d)
        out["null"] = null_figure(claim.ctx.paired, seed)
    if _has_psi(claim.ctx.regime_evidence):
        out["psi"] = {"policy_runs": [str(p.policy_run) for p in claim.data.pairs],
                      "draw_runs": [r for p in claim.data.pairs
                                    for r in p.draws.run_id.astype(str)]}
    return out


def _has_psi(ev) -> bool:
    return ev.psi is not None and ev.phi_table is not None and len(ev.phi_table) > 0


def regime_figure_data(ev) -> dict:
    """``{"psi": ..., "exposure": ...}`` of one RegimeEvidence, each only when drawn."""
    out = {}
    if _has_psi(ev):
        table = ev.phi_table
        grid = np.linspace(0.0, float(table.phi.max()) * 1.05 + 1e-9, PSI_GRID_POINTS)
        out["psi"] = {"run_id": table.run_id.astype(str).tolist(),
                      "phi": table.phi.to_numpy(float), "vex": table.vex.to_numpy(float),
                      "grid_phi": grid, "grid_psi": np.asarray(ev.psi.predict(grid), dtype=float),
                      "eps_cal": float(ev.psi.eps_cal)}
    runs = ev.runs[ev.runs.role != "no_sync"]
    if len(runs) and np.isfinite(runs.exposure_requests.astype(float)).any():
        reg = ev.exposure[0]
        out["exposure"] = {
            "run_id": runs.run_id.astype(str).tolist(), "role": runs.role.astype(str).tolist(),
            "policy": runs.policy.astype(str).tolist(),
            "exposure_requests": runs.exposure_requests.to_numpy(float),
            "violation_rate": runs.violation_rate.to_numpy(float),
            "r2": None if reg is None else float(reg.r_squared)}
    return out


class FigureNames:
    """Unique, length-capped figure file names (``figures/<parts>.png``), in the order asked."""

    def __init__(self):
        self.used: set[str] = set()

    def __call__(self, *parts: str) -> str:
        base = "__".join(file_part(p) for p in parts)
        name, i = f"{base}.png", 2
        while name in self.used:
            name, i = f"{base}-{i}.png", i + 1
        self.used.add(name)
        return f"figures/{name}"


def figure_paths(claims: list[dict], regimes: dict, transfer: bool) -> tuple[list, dict, str]:
    """File paths of the figures the document's data draws: ``(per claim {kind: path},
    per regime {kind: path}, transfer path or None)``; claims are named first, in order."""
    names = FigureNames()
    per_claim = []
    for c in claims:
        data = c["figure_data"]
        kinds = [k for k in CLAIM_FIGURES if (k == "v_per_seed" and c["per_seed"])
                 or (k == "psi" and "psi" in data
                     and "psi" in regimes[c["regime"]]["figure_data"])
                 or (k == "null" and "null" in data)]
        per_claim.append({k: names(c["regime"], c["policy"], k) for k in kinds})
    per_regime = {}
    for c in claims:
        if c["regime"] not in per_regime:
            data = regimes[c["regime"]]["figure_data"]
            per_regime[c["regime"]] = ({"exposure": names(c["regime"], "exposure")}
                                       if "exposure" in data else {})
    return per_claim, per_regime, (names("transfer") if transfer else None)


def load_match_rows(claim, protocol) -> dict:
    """The claim's no-sync load-match comparisons: ``{"reason", "rows", "summary"}``
    (``reason`` says why there are none; a row per run and quantity, ``passed`` or not)."""
    spec = protocol.checks.get("load_match")
    if spec is None:
        return {"reason": "load matching is not part of this protocol", "rows": []}
    table = claim.ctx.load_match_table(spec)
    if isinstance(table, str):
        return {"reason": table, "rows": []}
    rows = table.to_dict("records")
    bad = [r for r in rows if not r["passed"]]
    runs = table.groupby("run_id", sort=False).passed.all()
    summary = (f"{int(runs.sum())} of {len(runs)} runs load-matched to their seed's no-sync "
               f"run; {len(bad)} quantit{'y' if len(bad) == 1 else 'ies'} outside tolerance")
    return {"reason": "", "rows": rows, "summary": summary}
