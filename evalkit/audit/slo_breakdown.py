"""Which SLOs a claim's V counts, and the share of requests missing each one.

V (``violation_rate``) is the share of requests that failed or missed *any* configured SLO
(:class:`evalkit.runlog.metrics.SloFlags`).  The breakdown shows what drives it: per role
(the policy's runs, its matched-random draws), the mean over seeds of each run's share of
requests missing the end-to-end, TTFT and TPOT SLO and of failed requests.  A summary table
carries only V: its breakdown is empty.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["slo_breakdown"]

PARTS = (("e2e", "e2e_violation_rate", "slo_e2e_s", "end-to-end"),
         ("ttft", "ttft_violation_rate", "slo_ttft_s", "TTFT"),
         ("tpot", "tpot_violation_rate", "slo_tpot_s", "TPOT"))


def _mean(values) -> float | None:
    x = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(float)
    x = x[np.isfinite(x)]
    return float(np.mean(x)) if x.size else None


def _role_shares(rows: pd.DataFrame) -> dict:
    """Mean per-run shares over ``rows`` (one row a run): any SLO, each SLO, failed."""
    out = {"any": _mean(rows["violation_rate"])}
    for key, col, _, _ in PARTS:
        out[key] = _mean(rows[col]) if col in rows.columns else None
    if "n_failed" in rows.columns and "n_requests" in rows.columns:
        n = pd.to_numeric(rows["n_requests"], errors="coerce")
        out["failed"] = _mean(pd.to_numeric(rows["n_failed"], errors="coerce") / n)
    else:
        out["failed"] = None
    return out


def _configured(rows: pd.DataFrame) -> dict:
    """SLO name -> seconds (or None: not configured) when every run agrees, else "differs"."""
    out = {}
    for key, _, col, _ in PARTS:
        if col not in rows.columns:
            out[key] = None
            continue
        vals = {None if pd.isna(v) else float(v) for v in rows[col].tolist()}
        out[key] = vals.pop() if len(vals) == 1 else "differs"
    return out


def slo_breakdown(runs: pd.DataFrame, claim) -> dict:
    """``{"configured", "policy", "matched_random", "text"}`` for a claim (ClaimData)."""
    ids_pol = [p.policy_run for p in claim.pairs]
    ids_mr = [r for p in claim.pairs for r in p.draws.run_id.tolist()]
    by_id = runs.set_index("run_id", drop=False)
    pol = by_id.loc[[r for r in ids_pol if r in by_id.index]]
    mr = by_id.loc[[r for r in ids_mr if r in by_id.index]]
    both = pd.concat([pol, mr])
    has_parts = "e2e_violation_rate" in both.columns and both["e2e_violation_rate"].notna().any()
    configured = _configured(both) if has_parts else {}
    out = {"configured": configured,
           "policy": _role_shares(pol) if has_parts else None,
           "matched_random": _role_shares(mr) if has_parts and len(mr) else None}
    out["text"] = breakdown_text(out)
    return out


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.3g}%"


def breakdown_text(b: dict) -> str:
    """One sentence from the numbers of :func:`slo_breakdown`."""
    if not b["configured"]:
        return ("V as given by the input (a summary table carries no per-SLO breakdown); "
                "V counts every configured SLO and failed requests")
    names = []
    for key, _, _, label in PARTS:
        slo = b["configured"].get(key)
        if slo == "differs":
            names.append(f"{label} (differs between runs)")
        elif slo is not None:
            names.append(f"{label} {slo:g} s")
    parts = []
    for role, label in (("policy", "policy"), ("matched_random", "matched random")):
        s = b.get(role)
        if s is None:
            continue
        each = [f"{lab} {_pct(s[key])}" for key, _, _, lab in PARTS
                if b["configured"].get(key) is not None]
        parts.append(f"{label}: V {_pct(s['any'])} missing any of them ("
                     + ", ".join(each) + f"; failed {_pct(s['failed'])}, counted in each)")
    return ("V counts every configured SLO (" + ", ".join(names) + ") and failed requests; "
            "mean over seeds, " + "; ".join(parts))
