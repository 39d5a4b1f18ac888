"""The audit's input, a run set: one run table, paired per seed into claims.

A run set (a campaign's runs as the audit reads them; the sweep's campaign file is
:class:`evalkit.replay.campaign.Campaign`) comes from a runs directory
(``evalkit.runlog.summary.summarize_runs``; request and merge logs stay on disk and are read
lazily for Phi, psi and effect-size transfer) or from a per-run summary table
(:mod:`evalkit.runlog.table`).  Incomplete runs are listed as excluded and never audited.

A *claim* is a (regime, policy) pair of ``role = policy`` runs.  Per seed it is paired with
that seed's matched-random draws (``matched_to`` the policy, or a generic draw from a summary
table) and the seed's no-sync run.  Nothing is dropped silently: missing baselines become
failed checks naming the runs that are missing.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from evalkit.audit.draws import distinct_draws
from evalkit.errors import InputError
from evalkit.names import normalise_name, refuse_case_twins
from evalkit.runlog.design import DESIGN_COLUMNS
from evalkit.runlog.table import SYNTH_NOTE, is_summary_table, read_summary_table
from evalkit.runlog.io import list_runs, read_columns, read_meta, refused_error
from evalkit.runlog.summary import summarize_runs

__all__ = ["ClaimData", "RunSet", "SeedPair", "assemble_claims", "load_runset"]

RUN_COLUMNS = (
    "run_id", "role", "policy", "seed", "draw", "matched_to", "regime", "backend", "oracle",
    "trace_realisation", "violation_rate", "n_requests", "k_observed", "exposure_requests",
    "exposure_time", "arrival_rate_achieved", "prompt_tokens_total", "output_tokens_total",
    "step_rate", "trainer_active_share", "merge_duration_s", "horizon_s", "span_start_s",
    "span_end_s",
) + DESIGN_COLUMNS


@dataclass
class RunSet:
    source: str                          # "runs" | "summary"
    input_name: str                      # base name of the input (no absolute paths)
    runs: pd.DataFrame                   # RUN_COLUMNS (+ whatever the summary gave), one row a run
    summary: pd.DataFrame | None         # full summarize_runs output (runs dir only)
    runs_dir: Path | None
    excluded: list[dict] = field(default_factory=list)   # {run_id, reason}
    table_word_runs: set = field(default_factory=set)    # imported runs: a file's word
    notes: list[str] = field(default_factory=list)
    _dirs: dict = field(default_factory=dict)
    _cache: dict = field(default_factory=dict)

    @property
    def has_logs(self) -> bool:
        return self.source == "runs"

    def _run_dir(self, run_id: str) -> Path:
        if run_id not in self._dirs:
            raise InputError(f"no run directory for run {run_id}", column="run_id",
                             fix="audit a runs directory to use request/merge logs")
        return Path(self._dirs[run_id])

    def table(self, run_id: str, name: str) -> pd.DataFrame:
        """A run's ``requests`` / ``merges`` table (run sets from a runs directory only), cached."""
        key = (run_id, name)
        if key not in self._cache:
            self._cache[key] = read_columns(self._run_dir(run_id), name).to_pandas()
        return self._cache[key]

    def columns(self, run_id: str, name: str, columns) -> dict[str, np.ndarray]:
        """Some numeric columns of a run's table as float arrays (NaN for nulls), cached.

        Reads only those columns and skips pandas (the psi fit needs two columns of every
        no-sync log and one of every merge log); a table already loaded by :meth:`table`
        is reused.  Errors are those of :func:`evalkit.runlog.io.read_columns`.
        """
        columns = tuple(columns)
        key = (run_id, name, columns)
        if key in self._cache:
            return self._cache[key]
        have = self._cache.setdefault((run_id, name, "columns"), {})
        missing = list(dict.fromkeys(c for c in columns if c not in have))
        if missing:         # each column is read once, whichever check asks for it first
            full = self._cache.get((run_id, name))
            if full is not None:
                for c in missing:
                    have[c] = full[c].to_numpy(dtype=float, na_value=np.nan)
            else:
                table = read_columns(self._run_dir(run_id), name, missing)
                for c in missing:
                    have[c] = np.asarray(table.column(c).to_numpy(zero_copy_only=False),
                                         dtype=float)
        got = self._cache[key] = {c: have[c] for c in columns}
        return got

    def row(self, run_id: str) -> pd.Series:
        """The first row of ``runs`` for ``run_id``, found by position: the checks ask for
        each run's row many times, and a boolean mask scans every row each time."""
        runs = self.runs
        cached = self._cache.get("row_positions")
        if cached is None or cached[0] is not runs or cached[1] != len(runs):
            positions: dict = {}
            for i, r in enumerate(runs.run_id.tolist()):
                positions.setdefault(r, i)
            cached = self._cache["row_positions"] = (runs, len(runs), positions, {})
        if run_id not in cached[2]:
            return runs.loc[runs.run_id == run_id].iloc[0]    # the IndexError callers expect
        rows = cached[3]
        if run_id not in rows:
            rows[run_id] = runs.iloc[cached[2][run_id]]
        return rows[run_id]

    def meta(self, run_id: str) -> dict:
        """A complete run's run.json, as parsed when the run set was loaded."""
        key = ("meta", run_id)
        if key not in self._cache:
            self._cache[key] = read_meta(self._dirs[run_id])
        return self._cache[key]

    @property
    def run_ids(self) -> list[str]:
        """The complete runs read from the runs directory (none for a summary table)."""
        return list(self._dirs)


def load_runset(input_path: str | Path) -> RunSet:
    path = Path(input_path)
    if not path.exists():
        raise InputError("input does not exist", file=str(path),
                         fix="pass a runs directory or a summary table (.csv/.parquet)")
    if path.is_dir():
        return _from_runs_dir(path)
    if is_summary_table(path):
        runs, notes = read_summary_table(path)
        runs = _standardise(runs, path.name)
        return RunSet(source="summary", input_name=path.name, runs=runs, summary=None,
                        runs_dir=None, notes=notes)
    raise InputError("input is neither a runs directory nor a summary table", file=str(path),
                     fix="pass a directory of runs or a .csv/.parquet summary table")


def _standardise(runs: pd.DataFrame, source: str) -> pd.DataFrame:
    runs = runs.copy()
    for col in RUN_COLUMNS:
        if col not in runs.columns:
            runs[col] = np.nan
    runs["seed"] = runs["seed"].astype(int)
    for col in ("draw", "violation_rate", "n_requests", "k_observed"):
        runs[col] = pd.to_numeric(runs[col].astype(object).where(runs[col].notna(), np.nan),
                                  errors="raise").astype(float)
    runs["oracle"] = runs["oracle"].fillna(False).astype(bool)
    runs["regime"] = runs["regime"].fillna("default").astype(str)
    for col in ("matched_to", "backend", "trace_realisation"):
        runs[col] = runs[col].astype(object).where(runs[col].notna(), None)
    # one spelling per name (NFKC); a name that could hide another claim is refused
    for col in ("regime", "policy", "matched_to"):
        runs[col] = [None if v is None else normalise_name(v, file=f"{source}: run {r}",
                                                           key=col)
                     for v, r in zip(runs[col].tolist(), runs["run_id"].tolist())]
    # ... and one name per case-folded key: "Bursty" beside "bursty" is refused, naming both
    for col in ("regime", "policy", "matched_to"):
        refuse_case_twins(runs[col].tolist(), file=source, key=col)
    return runs.sort_values(["regime", "role", "policy", "seed", "draw", "run_id"],
                            na_position="first", kind="mergesort").reset_index(drop=True)


_OWNER_KEYS = ("regime", "seed", "role", "policy", "matched_to", "draw")


def _nfkc(value):
    """Names of excluded runs in the spelling claims use (validation refuses bad ones)."""
    return unicodedata.normalize("NFKC", value) if isinstance(value, str) else value


def _from_runs_dir(path: Path) -> RunSet:
    listing = list_runs(path)
    if listing.refused:                 # never audit a store with runs left out
        raise refused_error(listing.refused)
    dirs = listing.run_dirs
    if not dirs and not listing.unreadable:
        raise InputError("no runs found (no run.json below this directory)", file=path.name,
                         fix="pass the directory that holds the run directories")
    parsed: dict = {}                   # run.json of each run, parsed once by the scan
    summary = summarize_runs(path, metas=parsed)
    excluded, run_dirs, table_word, metas = [], {}, set(), {}
    synthesised = 0
    for run_dir in dirs:
        meta = parsed.get(Path(run_dir))
        if meta is None:                # unreadable: listed with its reason by the summary
            continue
        run_id = str(meta.get("run_id", run_dir.name))
        if meta.get("backend") == "import":       # a file's word, whatever the file
            table_word.add(run_id)
            synthesised += _synthesised(meta)
        if not meta.get("complete", False):
            reason = "incomplete run" + (f": {meta['error']}" if meta.get("error") else "")
            # who the run belonged to: an excluded run is a missing result for its seed
            excluded.append({"run_id": run_id, "reason": reason,
                             **{k: _nfkc(meta.get(k)) for k in _OWNER_KEYS}})
        else:
            run_dirs[run_id] = run_dir
            metas[("meta", run_id)] = meta
    if summary is None or len(summary) == 0:
        raise InputError("no complete runs to audit", file=path.name,
                         fix="rerun the incomplete runs listed by 'evalkit validate'")
    summary = summary[summary["complete"].astype(bool)] if "complete" in summary else summary
    known = {e["run_id"] for e in excluded}
    excluded += [{"run_id": str(r), "reason": "incomplete run"}
                 for r in summary.attrs.get("excluded", []) if str(r) not in known]
    # runs evalkit may not read: excluded with the reason, never dropped silently
    known = {e["run_id"] for e in excluded}
    excluded += [{"run_id": u["run_id"], "reason": u["reason"]}
                 for u in summary.attrs.get("unreadable", []) if u["run_id"] not in known]
    runs = summary.copy()
    if "k_observed" not in runs and "k_total" in runs:
        runs["k_observed"] = runs["k_total"]
    runs = _standardise(runs, path.name)
    # oracle status from the policy registry (the class's code), not the run's own word
    from evalkit.audit.registry import oracle_status

    runs["oracle"] = [bool(oracle_status(metas[("meta", r)])[0]) if r in run_dirs else o
                      for r, o in zip(runs.run_id.tolist(), runs.oracle.tolist())]
    notes = [f"validation warning: {w}" for w in summary.attrs.get("warnings", [])]
    for run_id in runs.run_id:
        if run_id not in run_dirs:
            raise InputError(f"summary lists run {run_id} without a complete run directory",
                             file=path.name, column="run_id", fix="rerun 'evalkit validate'")
    unmatched = runs[(runs.role == "matched_random") & runs.matched_to.notna()]
    policies = set(runs.loc[runs.role == "policy", "policy"])
    orphans = sorted(set(unmatched.matched_to) - policies)
    if orphans:
        notes.append("matched-random draws matched to policies with no policy runs (not "
                      "audited): " + ", ".join(orphans))
    if len(table_word) > synthesised:
        notes.append(f"{len(table_word) - synthesised} run(s) were imported from benchmark "
                     "files (backend import): their request logs and design facts are the "
                     "file's word, checks on them pass only vouched (--accept-vouched)")
    if synthesised:
        notes.append(f"{synthesised} run(s) were synthesised from a summary table (backend "
                     "import): their request logs and design facts are the table's word")
    return RunSet(source="runs", input_name=path.name, runs=runs, summary=summary,
                    runs_dir=path, excluded=sorted(excluded, key=lambda e: e["run_id"]),
                    notes=notes, table_word_runs=table_word, _dirs=run_dirs, _cache=metas)


def _synthesised(meta: dict) -> bool:
    """A run `evalkit import summary-table` wrote: its requests are made up from aggregates."""
    notes = meta.get("notes")
    notes = notes if isinstance(notes, list) else [notes]
    return meta.get("backend") == "import" and any(
        isinstance(n, str) and n.startswith(SYNTH_NOTE) for n in notes)


# ---------------------------------------------------------------------------------- claims

@dataclass
class SeedPair:
    """One seed of a claim: the policy run and its baselines."""

    seed: int
    policy_run: str
    v_policy: float
    k_policy: float
    realisation: str | None
    draws: pd.DataFrame                 # matched-random rows serving this policy and seed
    no_sync: pd.Series | None

    @property
    def v_mr(self) -> float:
        return float(self.draws.violation_rate.mean()) if len(self.draws) else float("nan")

    @property
    def d(self) -> float:
        return self.v_mr - self.v_policy


@dataclass
class ClaimData:
    regime: str
    policy: str
    policy_runs: pd.DataFrame
    pairs: list[SeedPair]
    generic_draws: bool                 # some draws had no matched_to (summary tables)

    @property
    def seeds(self) -> list[int]:
        return [p.seed for p in self.pairs]

    @property
    def paired(self) -> list[SeedPair]:
        """Seeds with a policy run and at least one matched-random draw."""
        return [p for p in self.pairs if len(p.draws)]

    @property
    def oracle(self) -> bool:
        return bool(self.policy_runs.oracle.any())

    def per_seed_table(self) -> pd.DataFrame:
        rows = []
        for p in self.pairs:
            mr = p.draws.violation_rate
            rows.append({
                "seed": p.seed, "policy_run": p.policy_run, "v_policy": p.v_policy,
                "k_policy": p.k_policy, "n_draws": len(p.draws),
                "v_mr_mean": p.v_mr, "v_mr_min": float(mr.min()) if len(mr) else np.nan,
                "v_mr_max": float(mr.max()) if len(mr) else np.nan,
                "v_no_sync": float(p.no_sync.violation_rate) if p.no_sync is not None else np.nan,
                "d": p.d,
            })
        return pd.DataFrame(rows)


def assemble_claims(runset: RunSet, baseline_policies=()) -> list[ClaimData]:
    """One :class:`ClaimData` per (regime, policy) with ``role = policy`` runs, sorted.

    A policy named in ``baseline_policies`` (the protocol's harness baselines: fixed cadence,
    deferral) with no matched-random draws of its own is a baseline, not a claim; the run
    set's notes list it.
    """
    runs = runset.runs
    claims, baselines = [], []
    policy_runs = runs[runs.role == "policy"]
    drawn_for = set(runs.loc[runs.role == "matched_random", "matched_to"].dropna())
    for (regime, policy), group in policy_runs.groupby(["regime", "policy"], sort=True):
        if policy in baseline_policies and policy not in drawn_for:
            baselines.append(f"{policy} (regime {regime}, {len(group)} run"
                             f"{'' if len(group) == 1 else 's'})")
            runset.notes.append(f"regime {regime}: {policy} is a harness baseline with no "
                                  "matched-random draws of its own; audited as a baseline, "
                                  "not as a claim")
            continue
        dupes = group[group.seed.duplicated(keep=False)]
        if len(dupes):
            seed = int(dupes.seed.iloc[0])
            raise InputError(
                f"regime {regime}, policy {policy}: several policy runs for seed {seed} ("
                + ", ".join(sorted(dupes[dupes.seed == seed].run_id)) + ")",
                file=runset.input_name, column="seed",
                fix="one policy run per (regime, policy, seed); put repeats in another regime")
        in_regime = runs[runs.regime == regime]
        generic = in_regime[(in_regime.role == "matched_random") & in_regime.matched_to.isna()]
        claimed = set(policy_runs.loc[policy_runs.regime == regime, "policy"]) - {
            p for p in baseline_policies if p not in drawn_for}
        if len(generic) and len(claimed) > 1:
            raise InputError(
                f"regime {regime}: {len(generic)} matched-random rows without matched_to, but "
                f"the regime has {len(claimed)} policies ({', '.join(sorted(claimed))}): a "
                "draw is K-matched to one policy, so it cannot serve them all",
                file=runset.input_name, column="matched_to",
                fix="add a matched_to column naming the policy each draw was matched to")
        mr = in_regime[(in_regime.role == "matched_random")
                       & ((in_regime.matched_to == policy) | in_regime.matched_to.isna())]
        ns = in_regime[in_regime.role == "no_sync"]
        # each seed's rows, in the table's order, split once (a mask per seed copies every
        # column of the table per seed)
        mr_by_seed = dict(list(mr.groupby("seed", sort=False)))
        ns_by_seed = dict(list(ns.groupby("seed", sort=False)))
        pairs = []
        ordered = group.sort_values("seed")
        for seed_v, run_id, v_pol, k_obs, realisation in zip(
                ordered.seed.tolist(), ordered.run_id.tolist(),
                ordered.violation_rate.tolist(), ordered.k_observed.tolist(),
                ordered.trace_realisation.tolist()):
            seed = int(seed_v)
            ns_seed = ns_by_seed.get(seed, ns.iloc[:0])
            if len(ns_seed) > 1:
                raise InputError(f"regime {regime}: several no-sync runs for seed {seed} ("
                                 + ", ".join(sorted(ns_seed.run_id)) + ")",
                                 file=runset.input_name, column="seed",
                                 fix="one no-sync run per regime and seed")
            draws, dropped = distinct_draws(runset, mr_by_seed.get(seed, mr.iloc[:0]).sort_values(
                ["draw", "run_id"], na_position="first"))
            if dropped:
                runset.notes.append(
                    f"regime {regime}, {policy}, seed {seed}: duplicate draws count once ("
                    + ", ".join(f"{a} = {b}" for a, b in dropped) + ")")
            pairs.append(SeedPair(
                seed=seed, policy_run=run_id, v_policy=float(v_pol),
                k_policy=float(k_obs) if pd.notna(k_obs) else np.nan,
                realisation=realisation,
                draws=draws,
                no_sync=ns_seed.iloc[0] if len(ns_seed) else None))
        claims.append(ClaimData(regime=str(regime), policy=str(policy), policy_runs=group,
                                pairs=pairs, generic_draws=bool(mr.matched_to.isna().any())))
    if not claims and baselines:
        raise InputError(
            "no claim to audit: the policy runs " + ", ".join(baselines) + " have no "
            "matched-random draws (role = matched_random, matched_to = the policy); a "
            "fixed-cadence or deferral policy without draws of its own is only a harness "
            "baseline", file=runset.input_name, column="matched_to",
            fix="add the policy's matched-random draws: evalkit replay --policy "
                "matched_random --reference POLICY_RUN_DIR, or evalkit import ... --role "
                "matched_random --matched-to POLICY --draw N")
    if not claims:
        raise InputError("no policy runs to audit (every run is a baseline)",
                         file=runset.input_name, column="role",
                         fix="include runs with role = policy")
    return claims
