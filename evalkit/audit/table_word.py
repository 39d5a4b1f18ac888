"""A summary table's design columns are the table's word, never a verification.

A table can say anything: ``arrival_fingerprint = "seed-3"`` on every row of a seed makes the
pairing look real, ``corridor_violations = 0`` makes every schedule look feasible.  The
checks that read a table's design columns (fingerprints, corridor, merge durations, sending
timings, load) therefore never *pass* on a table: a result they would pass becomes "not
evaluable: the table's word", which counts only when the user vouches for it
(``--accept-vouched``; the report marks the claim vouched).  What the columns contradict
still fails: a table is checked for internal consistency.  Every imported run (backend
``import``: a benchmark tool's results, or request logs ``evalkit import summary-table``
synthesised from a table) carries the same word: the file's, not a measurement the audit saw.
"""

from __future__ import annotations

__all__ = ["FIX", "TABLE_WORD_CHECKS", "table_says"]

# checks whose evidence, from a table, is the table's own design columns
TABLE_WORD_CHECKS = frozenset({"pairing_real", "schedules_in_corridor", "merge_durations_match",
                               "open_loop_sending", "load_match"})
FIX = ("audit the runs directory (the design is then read from the request and merge logs), "
       "or vouch for the table with --accept-vouched (the report marks the claim vouched)")


def claim_run_ids(claim) -> list[str]:
    """The run ids of a claim's policy runs, draws and no-sync runs."""
    out = []
    for p in claim.pairs:
        out.append(p.policy_run)
        out += p.draws.run_id.tolist()
        if p.no_sync is not None:
            out.append(p.no_sync.run_id)
    return out


def table_says(ctx) -> str | None:
    """Where the claim's design evidence is a file's word ("the summary table", request logs
    imported from a file), or None when it comes from logs a replay wrote."""
    runset = getattr(ctx, "runset", None)
    if runset is None:
        return None
    if runset.source == "summary":
        return "the summary table's own columns"
    synthetic = getattr(runset, "table_word_runs", set())
    if synthetic and any(r in synthetic for r in claim_run_ids(ctx.claim)):
        return ("request logs imported from a file (backend import: a benchmark's results "
                "or synthesised from a summary table)")
    return None
