"""run.json construction shared by the importers."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from evalkit.errors import InputError
from evalkit.fsutil import fsync_dir
from evalkit.runlog.io import check_run_id, move_run_aside, read_meta, write_run
from evalkit.runlog.schema import Slo, identity_problems, role_problem, run_id
from evalkit.runlog.validate import validate_run

REPLACE_FLAG = "--replace"


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
                rng_seeds: dict, notes: list[str], engine: str,
                trace_realisation: str | None = None) -> dict:
    """run.json of an imported run.  ``engine``: what produced the file (the tool it names),
    recorded as ``settings.effective.engine`` beside the backend label ``import``, so runs
    from different sources never compare alike."""
    settings = {**settings, "effective": {**(settings.get("effective") or {}),
                                          "engine": str(engine)}}
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


def _existing(target: Path) -> str:
    """What is at ``target``, in words, for the error that refuses to replace it."""
    try:
        meta = read_meta(target)
    except InputError:
        return "a directory that is not a readable run"
    backend = meta.get("backend")
    if backend == "import":
        return f"a run imported earlier (policy {meta.get('policy')!r}, seed {meta.get('seed')})"
    return (f"a run written by evalkit sweep/replay (backend {backend!r}, policy "
            f"{meta.get('policy')!r}, seed {meta.get('seed')})")


def check_targets(runs_dir, run_ids: list[str], *, replace: bool, where: str) -> None:
    """Before anything is written: every run id names a directory the store allows
    (reserved names refused), no two are alike, and none exists unless ``replace`` -- an
    import never replaces a run the user did not name with ``--replace``."""
    runs_dir = Path(runs_dir)
    seen = set()
    for rid in run_ids:
        check_run_id(rid)
        if rid in seen:
            raise InputError(f"two imported runs would both be {rid}", file=where,
                             column="run_id", fix="import them under different --regime, "
                                                  "--seed or --run-id")
        seen.add(rid)
        target = runs_dir / rid
        if not os.path.lexists(target):
            continue
        if target.is_symlink() or not target.is_dir():
            raise InputError(f"{rid} already exists in the runs directory and is not a run "
                             "directory (a file or symbolic link): an import never replaces "
                             "it", file=str(target), column="run_id",
                             fix="move it away yourself, or import under another --run-id, "
                                 "--seed or --out")
        if not replace:
            raise InputError(f"run {rid} already exists ({_existing(target)}): an import never "
                             "replaces a run", file=str(target), column=REPLACE_FLAG,
                             fix=f"pass {REPLACE_FLAG} to move the existing run aside (kept as "
                                 f".{rid}.replaced-<time>, never deleted), or import under "
                                 "another --run-id, --seed or --out")


def publish_imports(runs_dir, planned: list[tuple[dict, object, object]], *, replace: bool,
                    where: str) -> list[Path]:
    """Write the imported runs ``planned`` (``(meta, requests, merges)`` each); return their
    directories.

    Nothing is published unless every run passes: its id is allowed and free
    (:func:`check_targets`), and the run as written passes ``evalkit validate`` (each is
    written and checked in a hidden staging directory first).  Then each is renamed into
    place; with ``replace`` an existing run of its id is first moved aside as
    ``.<id>.replaced-*`` (and brought back if the rename fails).  A rename never replaces a
    run that appeared meanwhile: renaming onto a non-empty directory fails.
    """
    runs_dir = Path(runs_dir)
    ids = [str(meta["run_id"]) for meta, _, _ in planned]
    check_targets(runs_dir, ids, replace=replace, where=where)
    runs_dir.mkdir(parents=True, exist_ok=True)
    # named like an unfinished write of the first run: readers skip it, a sweep removes it
    staging = runs_dir / f".{ids[0]}.tmp-import-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        for meta, requests, merges in planned:
            _check_as_validate(write_run(staging, meta, requests, merges), where)
        check_targets(runs_dir, ids, replace=replace, where=where)
        written = []
        for rid in ids:
            target = runs_dir / rid
            kept = (move_run_aside(target, "replaced")
                    if replace and os.path.lexists(target) else None)
            try:
                os.rename(staging / rid, target)
            except BaseException:
                if kept is not None and not os.path.lexists(target):
                    kept.rename(target)         # the new run never landed: the old returns
                raise
            written.append(target)
        fsync_dir(runs_dir)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _check_as_validate(run_dir: Path, where: str) -> None:
    """The first error ``evalkit validate`` finds in the staged run, as an InputError on the
    imported file (an importer writes only what validate accepts)."""
    errors = [p for p in validate_run(run_dir) if p.severity == "error"]
    if errors:
        first = errors[0]
        raise InputError(f"the imported run {run_dir.name} would not pass evalkit validate: "
                         f"{first.message}", file=where, column=first.column,
                         fix=f"{first.fix}; check the imported file (evalkit writes only runs "
                             "that validate accepts)")
