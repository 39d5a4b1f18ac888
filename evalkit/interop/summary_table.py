"""Write a per-run summary table (the audit's table input) as a run store (backend ``import``).

Table columns: ``policy``, ``seed``, ``violation_rate`` (required); ``role``, ``draw``,
``regime``, ``n_requests``, ``K``, ``oracle``, ``no_sync_violation_rate``, ``matched_to``,
``draws_per_row`` (optional; a table with a single matched-random row for a seed must say
it is one draw, ``draws_per_row = 1``: a row averaging several draws cannot become one run
and is refused, as in the audit).  Writing runs additionally needs ``n_requests`` (every row) and ``K`` (every row
that is not a no-sync baseline).

Only aggregates exist, so each run gets **synthesised** request rows that reproduce the
row's aggregates exactly: ``n_requests`` requests, evenly spaced, all successful; exactly
``round(V * n)`` of them (spread evenly through the run) take ``2 * slo`` to complete, the
rest ``slo / 2`` (``slo.e2e_s = 1``), so ``evalkit summarize`` gives back V to floating-point
precision; ``K`` merge windows of 1 s are spread evenly inside the span so all K count as
observed.  V × n must be a whole number of requests (within 1e-6) or the import refuses.
Percentiles, exposure and arrival rates of such runs are artefacts of the synthesis, not
measurements: ``run.json`` ``notes`` says "synthesised from summary table".

The table is read by the audit's reader, so it means the same as in ``evalkit audit TABLE``:
a row's ``no_sync_violation_rate`` becomes a ``no_sync`` run for its (regime, seed) unless the
table has a no_sync row there (the two must agree); its request count is that of the seed's
other rows.  A matched-random row without ``matched_to`` is matched to the regime's only
policy (several policies: error); without ``draw``, draws are numbered in table order.  Runs of
one (regime, seed) share ``trace_realisation`` (or the table's own) so pairing is real, as
the table implies.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pandas as pd

from evalkit.errors import InputError
from evalkit.interop._meta import default_run_id, import_meta, publish_imports
from evalkit.limits import MAX_MERGES, MAX_TRACE_REQUESTS
from evalkit.runlog.table import SYNTH_NOTE, read_summary_table

__all__ = ["import_summary_table", "synthesise_requests"]

SLO_S = 1.0
MERGE_S = 1.0
COUNT_TOL = 1e-6


def _violations(v: float, n: int, *, path, row: str, column: str) -> int:
    count = v * n
    k = int(round(count))
    if abs(count - k) > COUNT_TOL:
        raise InputError(f"{row}: {column} {v!r} x n_requests {n} = {count!r} is not a "
                         "whole number of requests", file=str(path), column=column,
                         fix="give the violation rate at full precision (or the exact "
                             "n_requests); runs need integer request counts")
    return k


def _check_size(n: int, k: int, *, path, row: str) -> None:
    """Each request and merge becomes a row of the run: at most a generated trace's requests
    and a run's merges (evalkit.limits), checked before anything is allocated."""
    for value, column, lo, limit in ((n, "n_requests", 1, MAX_TRACE_REQUESTS),
                                     (k, "K", 0, MAX_MERGES)):
        if value > limit:
            raise InputError(f"{row}: {column} = {value:,} is beyond the allowed range "
                             f"[{lo}, {limit:,}]", file=str(path), column=column,
                             fix=f"a synthesised run holds at most {limit:,} "
                                 f"{'requests' if column == 'n_requests' else 'merges'}, one "
                                 "row each; check the table's counts")


def synthesise_requests(n: int, violations: int, k: int) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """``n`` requests of which ``violations`` exceed the 1 s SLO; ``k`` 1 s merge windows.

    Returns ``(requests, merges, horizon_s)``; requests: n rows, merges: k rows, all k
    windows inside the observed span.
    """
    if n < 2 and k > 0:
        raise InputError(f"a run of {n} request cannot hold {k} observed merge windows",
                         column="n_requests", fix="check n_requests and K")
    span = max(0.1 * n, 4.0 * (k + 1) * MERGE_S)
    arrival = 1.0 + span * np.arange(n) / max(n - 1, 1)
    slow = np.zeros(n, dtype=bool)
    if violations:
        slow[np.floor((np.arange(violations) + 0.5) * n / violations).astype(np.int64)] = True
    latency = np.where(slow, 2.0 * SLO_S, 0.5 * SLO_S)
    requests = pd.DataFrame({
        "request_id": np.arange(n, dtype=np.int64), "arrival_s": arrival, "sent_s": arrival,
        "first_token_s": arrival + latency / 4, "end_s": arrival + latency,
        "prompt_tokens": np.full(n, 1, dtype=np.int64),
        "output_tokens": np.full(n, 1, dtype=np.int64),
        "ok": np.ones(n, dtype=bool), "error": pd.array([None] * n, dtype="string")})
    starts = arrival[0] + span * (np.arange(k) + 0.5) / (k + 1)
    merges = pd.DataFrame({"merge_idx": np.arange(k, dtype=np.int64), "start_s": starts,
                           "end_s": starts + MERGE_S})
    horizon = float(arrival[-1] + 2.0 * SLO_S)
    return requests, merges, horizon


def plan_runs(path: str | os.PathLike) -> list[tuple[dict, pd.DataFrame, pd.DataFrame]]:
    """Check the whole table and build every run ``(meta, requests, merges)``; writes nothing.

    The table is read by the audit's own reader (:func:`evalkit.runlog.table.
    read_summary_table`), so roles, implied no-sync baselines and matched-random rows mean
    the same here as in ``evalkit audit TABLE``.
    """
    path = Path(path)
    runs, _ = read_summary_table(path)
    runs = runs.reset_index(drop=True)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    planned, ids, draws = [], {}, {}
    for i, rec in enumerate(runs.to_dict("records")):
        where = rec["run_id"]
        role, regime, seed = rec["role"], rec["regime"], int(rec["seed"])
        n = rec["n_requests"]
        if pd.isna(n) and role == "no_sync":   # implied by no_sync_violation_rate
            same = runs[(runs.regime == regime) & (runs.seed == seed) & runs.n_requests.notna()]
            counts = [int(c) for c in same.n_requests.unique()
                      if abs(rec["violation_rate"] * c - round(rec["violation_rate"] * c))
                      <= COUNT_TOL]
            n = counts[0] if counts else (same.n_requests.iloc[0] if len(same) else np.nan)
        if pd.isna(n):
            raise InputError(f"{where}: writing runs needs the request count", file=str(path),
                             column="n_requests", fix="add n_requests (the V denominator)")
        n = int(n)
        k = rec["k_observed"]
        if pd.isna(k):
            if role != "no_sync":
                raise InputError(f"{where}: K is needed to write merge windows", file=str(path),
                                 column="K", fix="add K (observed merges) for every policy "
                                                 "and matched_random row")
            k = 0
        elif role == "no_sync" and k != 0:
            raise InputError(f"{where}: a no_sync run has K = {int(k)}", file=str(path),
                             column="K", fix="a no-sync baseline places no merges: K = 0")
        _check_size(n, int(k), path=path, row=where)
        notes = []
        matched_to = rec["matched_to"]
        draw = None if pd.isna(rec["draw"]) else int(rec["draw"])
        if role == "matched_random":
            if matched_to is None:
                targets = sorted(set(runs[(runs.role == "policy")
                                          & (runs.regime == regime)].policy))
                if len(targets) != 1:
                    raise InputError(f"{where}: matched-random row without matched_to in a "
                                     f"regime with policies {targets}", file=str(path),
                                     column="matched_to",
                                     fix="name the policy whose K each draw matches")
                matched_to = targets[0]
                notes.append(f"matched_to {matched_to!r}: the only policy of regime {regime!r}")
            if draw is None:
                draw = draws.get((regime, matched_to, seed), 0)
                notes.append(f"draw {draw} assigned in table order (no draw column)")
            draws[(regime, matched_to, seed)] = draw + 1
        viol = _violations(float(rec["violation_rate"]), n, path=path, row=where,
                           column="violation_rate" if not where.endswith(":no_sync")
                           else "no_sync_violation_rate")
        run_id = default_run_id(regime, rec["policy"], role, seed, draw, matched_to)
        if run_id in ids:
            raise InputError(f"{ids[run_id]} and {where} describe the same run ({run_id})",
                             file=str(path), column="seed",
                             fix="one row per (regime, policy, role, seed, draw)")
        ids[run_id] = where
        planned.append(_run(path, sha, run_id, rec, role, regime, seed, draw, matched_to,
                            n, viol, int(k), notes))
    return planned


def _run(path, sha, run_id, rec, role, regime, seed, draw, matched_to, n, violations, k,
         extra_notes):
    requests, merges, horizon = synthesise_requests(n, violations, k)
    v = float(rec["violation_rate"])
    notes = [SYNTH_NOTE,
             f"{rec['run_id']}: n_requests={n}, violation_rate={v!r}, K={k}",
             "request rows are synthetic: only n_requests, violation_rate and K are data; "
             "latency percentiles, exposure and arrival rates are artefacts"] + extra_notes
    realisation = rec.get("trace_realisation") or f"summary-table:{sha[:16]}:{regime}:seed{seed}"
    meta = import_meta(
        run_id=run_id, policy=rec["policy"], role=role, seed=seed, draw=draw,
        matched_to=matched_to, regime=regime,
        trace={"name": f"summary-table:{path.stem}", "sha256": sha},
        slo={"e2e_s": SLO_S, "ttft_s": None, "tpot_s": None}, merge_duration_s=MERGE_S,
        horizon_s=horizon, corridor={"min_gap_s": 0.0, "max_gap_s": horizon},
        oracle=bool(rec["oracle"]),
        settings={"requested": {"source": path.name, "row": rec["run_id"]},
                  "effective": {"n_requests": n, "violation_rate": v, "K": k}},
        rng_seeds={"seed": seed}, notes=notes, trace_realisation=realisation,
        engine=f"summary table ({rec.get('backend') or 'engine not named'})")
    return meta, requests, merges


def import_summary_table(path: str | os.PathLike, runs_dir: str | os.PathLike, *,
                         replace: bool = False) -> list[Path]:
    """Write one run per table row (plus implied no-sync baselines); return the directories.

    The whole table is checked before the first run is written, including that none of its
    runs exists already (unless ``replace``: each is moved aside, never deleted)."""
    planned = plan_runs(path)
    return publish_imports(runs_dir, planned, replace=replace, where=str(path))
