"""run.json construction shared by the importers."""

from __future__ import annotations

from evalkit.errors import InputError
from evalkit.limits import capped_name
from evalkit.runlog.schema import ROLES


def check_identity(role: str, draw, matched_to, *, where: str) -> None:
    """Role/draw/matched_to must agree the way the run-log format defines them."""
    if role not in ROLES:
        raise InputError(f"unknown role {role!r}", file=where, column="role",
                         fix=f"use one of {', '.join(ROLES)}")
    if role == "matched_random":
        if draw is None or matched_to in (None, ""):
            raise InputError("a matched_random run needs a draw index and matched_to",
                             file=where, column="draw" if draw is None else "matched_to",
                             fix="give the draw number and the policy whose K it matches")
    elif draw is not None:
        raise InputError(f"role {role!r} cannot carry a draw index", file=where, column="draw",
                         fix="only matched_random runs have draws")


def import_meta(*, run_id: str, policy: str, role: str, seed: int, draw, matched_to,
                regime: str, trace: dict, slo: dict, merge_duration_s: float,
                horizon_s: float, corridor: dict, oracle: bool, settings: dict,
                rng_seeds: dict, notes: list[str], trace_realisation: str | None = None) -> dict:
    meta = {
        "run_id": run_id, "policy": policy, "role": role, "seed": int(seed),
        "draw": None if draw is None else int(draw),
        "matched_to": matched_to if role == "matched_random" else None,
        "regime": regime, "trace": trace, "backend": "import", "slo": slo,
        "merge_duration_s": float(merge_duration_s), "horizon_s": float(horizon_s),
        "corridor": corridor, "oracle": bool(oracle), "settings": settings,
        "rng_seeds": rng_seeds, "notes": notes,
    }
    if trace_realisation is not None:
        meta["trace_realisation"] = trace_realisation
    return meta


def default_run_id(regime: str, policy: str, role: str, seed: int, draw,
                   matched_to=None) -> str:
    """``regime-policy[-role][-matched_to]-sSEED[-dDRAW]``: unique over the campaign matrix."""
    parts = [regime, policy]
    if role not in ("policy", policy):
        parts.append(role)
    if role == "matched_random" and matched_to not in (None, "", policy):
        parts.append(str(matched_to))
    parts.append(f"s{int(seed)}")
    if draw is not None:
        parts.append(f"d{int(draw)}")
    name = "-".join(str(p).replace("/", "_").replace(" ", "_") for p in parts)
    return capped_name(name.lstrip(".") or "run")     # it names a directory: <= 200 bytes
