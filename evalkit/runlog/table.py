"""Read a per-run summary table (CSV or Parquet) into the audit's run table.

What reviewers often have when a paper releases only per-seed results.  Columns:

required  ``policy``, ``seed``, ``violation_rate``
optional  ``role``, ``draw``, ``regime``, ``n_requests``, ``K`` (or ``k_observed``),
          ``oracle``, ``no_sync_violation_rate``, ``matched_to``, ``backend``,
          ``trace_realisation``, ``run_id``, and the load-match and design columns that
          ``evalkit summarize`` writes (:data:`PASSTHROUGH`).  Those are the table's word
          (:mod:`evalkit.audit.table_word`): the checks reading them pass only when the
          user vouches for the table (``--accept-vouched``), and fail on what they contradict

* ``regime``: a table without it (or with every cell blank) holds one regime, ``default``;
  a table that names regimes names every row's (a blank cell is a missing value).
* ``role`` defaults to ``policy``; rows whose policy is ``matched_random`` / ``no_sync`` take
  those roles.  A ``matched_random`` row whose policy names another policy is a draw matched
  to that policy.
* A matched-random row without ``matched_to`` serves every policy of its regime: the table
  then vouches that K matches (the report says so).
* ``no_sync_violation_rate`` on any row gives the no-sync V of that (regime, seed).
* ``oracle`` accepts true/false (also 1/0, yes/no).
* ``draws_per_row``: how many replayed draws a row stands for.  Papers often publish one
  baseline row per seed that *averages* several draws; its d is skewed and the sign-flip test
  then over-rejects (0.064 against a nominal 0.025 measured).  So a table with a single
  matched-random row for some seed must say what the row is: ``draws_per_row = 1`` (one
  draw: the exact sign-flip test applies); an averaged row (> 1) is refused -- list each draw
  as its own row and the within-seed permutation test applies.  A table written by
  ``evalkit summarize`` (it carries ``arrival_fingerprint``) has one run per row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from evalkit.errors import InputError
from evalkit.fileread import check_regular
from evalkit.runlog.io import environment_failure
from evalkit.names import normalise_name

__all__ = ["SYNTH_NOTE", "is_summary_table", "read_summary_table"]

# the first note of a run that `evalkit import table` synthesised from such a table
SYNTH_NOTE = "synthesised from summary table"

REQUIRED = ("policy", "seed", "violation_rate")
# columns of `evalkit summarize` the audit uses when present: load match, design facts
PASSTHROUGH = ("arrival_rate_achieved", "prompt_tokens_total", "output_tokens_total",
               "step_rate", "trainer_active_share", "merge_duration_s", "horizon_s",
               "exposure_requests", "exposure_time", "span_start_s", "span_end_s", "arrival_fingerprint",
               "merge_duration_median_s", "corridor_violations", "corridor_note",
               "completion_tied_share", "identical_arrival_share", "inner_step_median_s")
TEXT_PASSTHROUGH = ("arrival_fingerprint", "corridor_note")
# passthrough columns that are counts or shares of the row's own requests
COUNT_OR_SHARE = {"corridor_violations": {"integer": True, "lo": 0},
                  "exposure_requests": {"lo": 0, "hi": 1},
                  "trainer_active_share": {"lo": 0, "hi": 1}}
OPTIONAL = ("role", "draw", "regime", "n_requests", "K", "oracle", "no_sync_violation_rate",
            "matched_to", "backend", "trace_realisation", "run_id", "k_observed",
            "draws_per_row")
_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f", ""}


def is_summary_table(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in (".csv", ".parquet", ".pq")


def _read(path: Path) -> tuple[pd.DataFrame, int]:
    """The table and the offset from a 0-based row index to the line/row number users see."""
    check_regular(path, "the summary table")        # a FIFO would block pandas
    try:
        if path.suffix.lower() == ".csv":
            # pandas renames a repeated header ("seed", "seed.1"): read the header as a row
            header = pd.read_csv(path, header=None, nrows=1, dtype=str, keep_default_na=False)
            _refuse_repeated_columns(path, list(header.iloc[0]) if len(header) else [])
            return pd.read_csv(path, dtype=str, keep_default_na=False), 2
        _refuse_repeated_columns(path, pq.read_schema(path).names)
        return pd.read_parquet(path), 1
    except InputError:
        raise
    except (ValueError, OSError, pd.errors.ParserError, MemoryError) as exc:
        env = environment_failure(exc, path, "the table")
        if env is not None:             # the machine, not the table: never "cannot read it"
            raise env from None
        raise InputError(f"cannot read the summary table ({exc})", file=path.name,
                         fix="pass a CSV with a header row or a Parquet file") from exc


def _refuse_repeated_columns(path: Path, names) -> None:
    names = [str(n).strip() for n in names]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(f"the summary table has the column {twice[0]!r} "
                         f"{names.count(twice[0])} times", file=path.name, column=twice[0],
                         fix="keep one column of each name")


def _blank(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value)) or (
        isinstance(value, str) and value.strip() == "")


def _require_draws_per_row(runs: pd.DataFrame, columns, path: Path) -> None:
    """A seed with a single matched-random row needs ``draws_per_row`` (what is the row?)."""
    if "draws_per_row" in columns or "arrival_fingerprint" in columns:
        return
    draws = runs[runs.role == "matched_random"]
    counts = draws.groupby([draws.regime, draws.matched_to.fillna(""), draws.seed]).size()
    single = counts[counts == 1]
    if len(single):
        regime, policy, seed = single.index[0]
        who = f"policy {policy}" if policy else "every policy"
        raise InputError(f"seed {seed} (regime {regime}, {who}) has one matched_random row "
                         f"and the table has no draws_per_row column ({len(single)} such "
                         "seed(s)): a row that averages several draws, as papers often "
                         "publish, makes the sign-flip test over-reject",
                         file=path.name, column="draws_per_row",
                         fix="add a draws_per_row column: 1 where a row is one replayed draw; "
                             "list averaged draws as separate rows instead")


def read_summary_table(path: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """Rows in the audit's run-table layout, and notes on how the table was read."""
    path = Path(path)
    table, offset = _read(path)
    table.columns = [str(c).strip() for c in table.columns]
    for col in REQUIRED:
        if col not in table.columns:
            raise InputError("summary table lacks a required column", file=path.name, column=col,
                             fix="required columns: " + ", ".join(REQUIRED))
    if table.empty:
        raise InputError("summary table has no rows", file=path.name,
                         fix="add one row per run (policy, seed, violation_rate)")
    notes = []
    ignored = [c for c in table.columns if c not in REQUIRED + OPTIONAL + PASSTHROUGH]
    if ignored:
        notes.append("summary table columns not used by the audit: " + ", ".join(ignored))

    def bad(i, col, message, fix):
        raise InputError(f"row {i + offset}: {message}", file=path.name, column=col, fix=fix)

    def number(i, col, value, *, integer=False, lo=None, hi=None, allow_blank=False):
        if _blank(value):
            if allow_blank:
                return np.nan
            bad(i, col, "value is missing", "fill in every required value")
        try:
            x = float(value)
        except (TypeError, ValueError):
            bad(i, col, f"not a number: {value!r}", "write a plain number")
        if not np.isfinite(x):
            bad(i, col, f"not a finite number: {value!r}", "write a finite number")
        if integer and x != int(x):
            bad(i, col, f"not an integer: {value!r}", "write a whole number")
        if (lo is not None and x < lo) or (hi is not None and x > hi):
            bad(i, col, f"{x} is outside [{lo}, {hi}]",
                f"{col} is a share of the row's requests in [0, 1], not a percentage"
                if hi == 1 else f"write a value of at least {lo}")
        return int(x) if integer else x

    def text(value, default=None):
        return default if _blank(value) else str(value).strip()

    def name(i, col, value, default=None):
        """A regime or policy name: NFKC, refused when it could hide another claim."""
        if _blank(value):
            return default
        try:
            return normalise_name(str(value).strip(), file=path.name, key=col)
        except InputError as exc:
            bad(i, col, exc.message, exc.fix)

    rows = []
    first_row: dict[str, int] = {}
    no_sync_given: dict[tuple[str, int], tuple[float, int]] = {}
    # a table that names regimes names every row's: a blank one would join "default"
    regimes_named = "regime" in table.columns and not all(_blank(v) for v in table["regime"])
    for i, rec in enumerate(table.to_dict("records")):
        policy = name(i, "policy", rec["policy"])
        if policy is None:
            bad(i, "policy", "value is missing", "name the policy of every row")
        seed = number(i, "seed", rec["seed"], integer=True)
        regime = name(i, "regime", rec.get("regime"), None if regimes_named else "default")
        if regime is None:
            bad(i, "regime", "value is missing while other rows name their regime",
                "name the regime of every row (or leave the column out: one regime)")
        role = text(rec.get("role"))
        matched_to = name(i, "matched_to", rec.get("matched_to"))
        if policy in ("matched_random", "no_sync"):
            if role not in (None, policy):
                bad(i, "role", f"role {role!r} contradicts policy {policy!r}",
                    f"set role to {policy} or leave it empty")
            role = policy
        role = role or "policy"
        if role not in ("policy", "matched_random", "no_sync"):
            bad(i, "role", f"unknown role {role!r}", "use policy, matched_random or no_sync")
        if role == "matched_random" and policy != "matched_random":
            if matched_to not in (None, policy):
                bad(i, "matched_to", f"draw names policy {policy!r} but matched_to {matched_to!r}",
                    "make them agree")
            matched_to, policy = policy, "matched_random"
        if role == "no_sync":
            policy = "no_sync"
        oracle_text = text(rec.get("oracle"), "false").lower()
        if oracle_text not in _TRUE | _FALSE:
            bad(i, "oracle", f"cannot read {rec.get('oracle')!r} as true/false",
                "write true or false")
        k_col = "K" if not _blank(rec.get("K")) else "k_observed"
        k = number(i, k_col, rec.get(k_col), integer=True, lo=0, allow_blank=True)
        if k_col == "K" and not _blank(rec.get("k_observed")):
            k_said = number(i, "k_observed", rec.get("k_observed"), integer=True, lo=0)
            if k_said != k:
                bad(i, "k_observed", f"k_observed {k_said} contradicts K {k} on the same row",
                    "give one merge count per run (K or k_observed), or make them agree")
        n_req = number(i, "n_requests", rec.get("n_requests"), integer=True, lo=1,
                       allow_blank=True)
        draw = number(i, "draw", rec.get("draw"), integer=True, lo=0, allow_blank=True)
        per_row = number(i, "draws_per_row", rec.get("draws_per_row"), integer=True, lo=1,
                         allow_blank=True)
        if not np.isnan(per_row) and per_row > 1:
            if role != "matched_random":
                bad(i, "draws_per_row", f"draws_per_row = {per_row} on a {role} row",
                    "a policy or no-sync row is one run: write 1 or leave it empty")
            bad(i, "draws_per_row", f"this matched-random row averages {per_row} draws: an "
                "averaged baseline cannot be tested exactly (its d is skewed, the sign-flip "
                "test over-rejects)", f"list each of the {per_row} draws as its own "
                "matched_random row (draw = 0, 1, ...) with draws_per_row = 1; the "
                "within-seed permutation test then applies")
        if role == "policy" and not np.isnan(draw):
            bad(i, "draw", f"a policy row names draw {draw}: a draw is a matched_random row",
                "set role = matched_random on a draw's row, or leave draw empty")
        v = number(i, "violation_rate", rec["violation_rate"], lo=0, hi=1)
        if not np.isnan(n_req) and abs(v * n_req - round(v * n_req)) > 1e-6 * n_req:
            bad(i, "violation_rate", f"violation_rate {v} of {n_req} requests is "
                f"{v * n_req:.6g} violations, not a whole number of requests",
                "write V = violating requests / n_requests, unrounded")
        ns = number(i, "no_sync_violation_rate", rec.get("no_sync_violation_rate"), lo=0, hi=1,
                    allow_blank=True)
        if not np.isnan(ns):
            key = (regime, seed)
            if key in no_sync_given and not np.isclose(no_sync_given[key][0], ns):
                bad(i, "no_sync_violation_rate",
                    f"{ns} contradicts {no_sync_given[key][0]} on row {no_sync_given[key][1]} "
                    f"(regime {regime}, seed {seed})", "one no-sync V per regime and seed")
            no_sync_given.setdefault(key, (ns, i + offset))
        extra = {}
        if "step_rate" in table.columns and "trainer_active_share" not in table.columns:
            extra["trainer_active_share"] = np.nan     # the horizon is not shown: not matched
        for col in PASSTHROUGH:
            if col in table.columns:
                val = rec.get(col)
                if col in TEXT_PASSTHROUGH:
                    extra[col] = text(val) or ("" if col == "corridor_note" else None)
                else:
                    extra[col] = number(i, col, val, allow_blank=True,
                                        **COUNT_OR_SHARE.get(col, {}))
        run_id = text(rec.get("run_id")) or f"{path.name}:row{i + offset}"
        if run_id in first_row:
            bad(i, "run_id", f"run_id {run_id!r} is also row {first_row[run_id]}",
                "give every run its own run_id")
        first_row[run_id] = i + offset
        rows.append({
            **extra,
            "run_id": run_id, "role": role, "policy": policy,
            "seed": seed, "draw": draw, "matched_to": matched_to, "regime": regime,
            "backend": text(rec.get("backend")), "oracle": oracle_text in _TRUE,
            "trace_realisation": text(rec.get("trace_realisation")),
            "violation_rate": v, "n_requests": n_req, "k_observed": k,
        })
    runs = pd.DataFrame(rows)
    _require_draws_per_row(runs, table.columns, path)
    for (regime, seed), (ns, line) in sorted(no_sync_given.items()):
        explicit = runs[(runs.role == "no_sync") & (runs.regime == regime) & (runs.seed == seed)]
        if len(explicit):
            if not np.allclose(explicit.violation_rate, ns):
                raise InputError(f"row {line}: no_sync_violation_rate {ns} contradicts the "
                                 f"no_sync row(s) of regime {regime}, seed {seed}",
                                 file=path.name, column="no_sync_violation_rate",
                                 fix="one no-sync V per regime and seed")
            continue
        runs.loc[len(runs)] = {
            "run_id": f"{path.name}:row{line}:no_sync", "role": "no_sync", "policy": "no_sync",
            "seed": seed, "draw": np.nan, "matched_to": None, "regime": regime, "backend": None,
            "oracle": False, "trace_realisation": None, "violation_rate": ns,
            "n_requests": np.nan, "k_observed": 0}
    if "matched_to" in table.columns or (runs.role == "matched_random").any():
        generic = runs[(runs.role == "matched_random") & runs.matched_to.isna()]
        if len(generic):
            notes.append("matched-random rows without matched_to serve every policy of their "
                         "regime; the table vouches that their K matches each policy's K")
    return runs, notes
