"""run.json construction shared by the importers."""

from __future__ import annotations

from evalkit.errors import InputError
from evalkit.runlog.schema import Slo, identity_problems, role_problem, run_id


def check_identity(role: str, draw, matched_to, *, where: str) -> None:
    """Role/draw/matched_to must agree the way the run-log format defines them
    (:func:`evalkit.runlog.schema.identity_problems`); the first disagreement is raised."""
    unknown = role_problem(role)
    # importers keep matched_to of matched_random runs only (import_meta drops the others)
    kept = (matched_to or None) if role == "matched_random" else None
    problems = [unknown] if unknown else identity_problems(
        {"role": role, "draw": draw, "matched_to": kept})
    if problems:
        raise InputError(problems[0].message, file=where, column=problems[0].key,
                         fix=problems[0].fix)


def check_slo(e2e_s, ttft_s, tpot_s, *, where: str) -> Slo:
    """The SLOs given on the command line as the run-log format's :class:`Slo`; the first
    rule they break is raised, naming the option to fix."""
    if e2e_s is None:
        raise InputError("an end-to-end SLO is required", file=where, column="slo_e2e_s",
                         fix="pass --slo-e2e SECONDS (V is the share of requests over it)")
    value = {"e2e_s": e2e_s, "ttft_s": ttft_s, "tpot_s": tpot_s}
    problems = Slo.check(value)
    if problems:
        key = problems[0].key.split(".")[-1]
        raise InputError(problems[0].message, file=where, column=f"slo_{key}",
                         fix=f"pass --slo-{key.split('_')[0]} SECONDS (a positive number)")
    return Slo.from_dict(value)


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
    """``regime-policy[-role][-matched_to]-sSEED[-dDRAW]`` (:func:`evalkit.runlog.schema.
    run_id`): unique over the campaign matrix."""
    return run_id(regime, policy, seed, draw, sep="-", role=role, matched_to=matched_to)
