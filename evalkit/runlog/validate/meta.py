"""The run.json rules: required keys, value types and ranges, names, SLO, identity."""

from __future__ import annotations

import unicodedata
from pathlib import Path

from evalkit.limits import INT64_MAX, MAX_HORIZON_S
from evalkit.names import name_problem
from evalkit.runlog.schema import (BACKENDS, REQUIRED_META, Slo, identity_problems,
                                   role_problem)
from evalkit.runlog.schema import is_number as _is_number, short_repr as _short
from evalkit.runlog.validate.problem import Problem, _is_int, _nonempty_str

__all__ = []


def _check_meta(meta: dict, run_dir: Path, run: str) -> list[Problem]:
    """Every rule of run.json ``meta`` broken (errors and warnings, in rule order)."""
    path = str(run_dir / "run.json")
    out: list[Problem] = []

    def bad(key, message, fix, severity="error"):
        out.append(Problem(run, path, key, message, fix, severity))

    for key in REQUIRED_META:
        if key not in meta:
            bad(key, "required key is missing",
                f"add '{key}' to run.json (see evalkit.runlog.schema)")
    has = meta.__contains__

    if has("run_id") and not _nonempty_str(meta["run_id"]):
        bad("run_id", f"must be a non-empty string, got {_short(meta['run_id'])}",
            "set run_id to the directory name")
    elif has("run_id") and meta["run_id"] != run_dir.name:
        bad("run_id", f"run_id {_short(meta['run_id'])} differs from the directory name {run_dir.name!r}",
            "rename the directory or fix run_id; they must be equal")
    for key in ("policy", "regime", "matched_to"):
        if has(key) and key != "matched_to" and not _nonempty_str(meta[key]):
            bad(key, f"must be a non-empty string, got {_short(meta[key])}", f"set {key} to its name")
        elif _nonempty_str(meta.get(key)):
            why = name_problem(unicodedata.normalize("NFKC", meta[key]))
            if why is not None:
                bad(key, f"{key} {meta[key]!r} is refused: {why}",
                    "use a name of visible characters of one script; a name that looks like "
                    "another is another claim in disguise")
    unknown_role = role_problem(meta["role"]) if has("role") else None
    if unknown_role:
        bad(unknown_role.key, unknown_role.message, unknown_role.fix)
    if has("backend") and meta["backend"] not in BACKENDS:
        bad("backend", f"unknown backend {_short(meta['backend'])}", f"use one of {', '.join(BACKENDS)}")
    if has("seed") and not _is_int(meta["seed"]):
        bad("seed", f"must be an integer, got {_short(meta['seed'])}",
            "write the replication seed as an integer")
    elif has("seed") and not 0 <= meta["seed"] <= INT64_MAX:
        bad("seed", f"{_short(meta['seed'])} is outside [0, 2**63)",
            "write the replication seed as a non-negative 64-bit integer")
    draw = meta.get("draw")
    if draw is not None and not (_is_int(draw) and 0 <= draw <= INT64_MAX):
        bad("draw", f"must be null or an integer in [0, 2**63), got {_short(meta['draw'])}",
            "write the draw index as an integer")
    matched_to = meta.get("matched_to")
    if matched_to is not None and not _nonempty_str(matched_to):
        bad("matched_to", f"must be null or a policy name, got {_short(meta['matched_to'])}",
            "name the policy whose K this draw matches")
    for key in ("oracle", "complete"):
        if has(key) and not isinstance(meta[key], bool):
            bad(key, f"must be true or false, got {_short(meta[key])}", f"write {key} as a JSON boolean")
    for key in ("merge_duration_s", "horizon_s"):
        if has(key) and not (_is_number(meta[key]) and meta[key] > 0):
            bad(key, f"must be a positive number of seconds, got {_short(meta[key])}",
                f"write {key} in seconds")
        elif has(key) and meta[key] > MAX_HORIZON_S:
            bad(key, f"{meta[key]:g} s is beyond the {MAX_HORIZON_S:,.0f} s (30-day) limit",
                f"write {key} in seconds (evalkit.limits.MAX_HORIZON_S)")
    for key in ("evalkit_version", "created_at"):
        if has(key) and not _nonempty_str(meta[key]):
            bad(key, f"must be a string, got {_short(meta[key])}", f"write {key} as a string")
    for key in ("settings", "host", "rng_seeds"):
        if has(key) and not isinstance(meta[key], dict):
            bad(key, f"must be a JSON object, got {type(meta[key]).__name__}",
                f"write {key} as an object")
    for part in ("requested", "effective"):        # read by the audit's policy registry
        value = meta.get("settings", {}).get(part) if isinstance(meta.get("settings"),
                                                                  dict) else None
        if value is not None and not isinstance(value, dict):
            bad(f"settings.{part}", f"must be a JSON object, got {type(value).__name__}",
                f"write settings.{part} as an object")
    if "trace_realisation" in meta and not _nonempty_str(meta["trace_realisation"]):
        bad("trace_realisation", f"must be a non-empty string, got {_short(meta['trace_realisation'])}",
            "remove it (defaults to trace.sha256) or name the request sequence")

    trace = meta.get("trace")
    if has("trace"):
        if not isinstance(trace, dict):
            bad("trace", "must be an object {name, sha256}",
                'write trace as {"name": ..., "sha256": ...}')
        else:
            for sub in ("name", "sha256"):
                if not _nonempty_str(trace.get(sub)):
                    bad(f"trace.{sub}", f"missing or not a string ({_short(trace.get(sub))})",
                        f"record the trace's {sub}")
    if has("slo"):
        for found in Slo.check(meta["slo"]):
            bad(found.key, found.message, found.fix)
    corridor = meta.get("corridor")
    if has("corridor"):
        if not isinstance(corridor, dict):
            bad("corridor", "must be an object {min_gap_s, max_gap_s}",
                "write the corridor in seconds")
        else:
            gaps = [corridor.get("min_gap_s"), corridor.get("max_gap_s")]
            for sub, val in zip(("min_gap_s", "max_gap_s"), gaps):
                if not (_is_number(val) and val >= 0):
                    bad(f"corridor.{sub}", f"must be a number of seconds >= 0, got {_short(val)}",
                        "write the corridor gaps between merge starts in seconds")
            if all(_is_number(g) for g in gaps) and gaps[0] > gaps[1]:
                bad("corridor", f"min_gap_s {gaps[0]} > max_gap_s {gaps[1]}",
                    "swap or fix the corridor gaps")

    for found in identity_problems(meta):
        bad(found.key, found.message, found.fix)
    return out


