"""Compare a fresh audit.json with a recorded one: every field the recorded document has must
be present and equal in the fresh one (new fields may be added; none may move or change).
Numbers are equal within a relative 1e-9: builds of numpy and scipy move the last bits of a
quantile or a linspace, which no statement the report makes depends on."""

from __future__ import annotations

import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLOAT_RTOL = 1e-9
# The audited inputs whose documents are recorded here, by golden file stem.
FIXTURE_CAMPAIGNS = ("sim_bursty", "transfer", "real_oracle", "no_transfer", "sim_k_mismatch",
                     "sim_missing_no_sync", "sim_underpowered", "summary_table.csv")


# What a fresh sweep (the demo) measures of the machine and the clock, not of the runs: the
# plan's hash (the plan records when it was frozen), and the checks that quote write times,
# execution order in minutes and host load.
WALL_CLOCK_CHECKS = ("plan_rules", "pre_registered", "execution_drift")


def golden_path(name: str) -> Path:
    return HERE / f"{name}.audit.json"


def without_wall_clock(doc: dict) -> dict:
    """DOC with the fields a fresh sweep takes from the clock and the host set aside."""
    doc = json.loads(json.dumps(doc))
    reg = doc.get("pre_registration") or {}
    for k in ("plan_sha256", "text"):
        reg.pop(k, None)
    for claim in doc.get("claims", []):
        for c in claim.get("checks", []):
            if c.get("name") in WALL_CLOCK_CHECKS:
                for k in ("found", "values"):
                    c.pop(k, None)
    return doc


def changed_fields(old, new, where: str = "$") -> list[str]:
    """Paths at which NEW differs from OLD, where OLD's structure is the reference."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return [f"{where}: was an object, now {type(new).__name__}"]
        out = []
        for k, v in old.items():
            if k not in new:
                out.append(f"{where}.{k}: missing")
            else:
                out += changed_fields(v, new[k], f"{where}.{k}")
        return out
    if isinstance(old, list):
        if not isinstance(new, list) or len(new) != len(old):
            return [f"{where}: list of {len(old)} became "
                    f"{len(new) if isinstance(new, list) else type(new).__name__}"]
        out = []
        for i, (a, b) in enumerate(zip(old, new)):
            out += changed_fields(a, b, f"{where}[{i}]")
        return out
    if _numbers(old, new) and math.isclose(old, new, rel_tol=FLOAT_RTOL, abs_tol=0.0):
        return []
    if json.dumps(old) != json.dumps(new):
        return [f"{where}: {json.dumps(old)[:80]} -> {json.dumps(new)[:80]}"]
    return []


def _numbers(*values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
