"""Upkeep of a runs directory: the state of each planned run, leftovers, damaged runs.

:func:`run_state` says what a planned run's directory holds (missing, incomplete, stale,
damaged, unreadable, interrupted or complete); :func:`clean_leftovers` undoes what a killed
sweep left behind (``.<id>.tmp-*`` unfinished writes are removed, an ``.<id>.old-*`` whose
replacement never landed is renamed back); :func:`move_aside` renames a damaged run to
``.<id>.damaged-<time>`` -- never deleted.  The lock a sweep holds on the directory while it
does all this is :mod:`evalkit.replay.storelock`.

A run store in an object store (:mod:`evalkit.runlog.store_url`) is judged on a local copy
of its runs (:func:`store_states`); :func:`execute_job_in_store` runs a job in a private
staging folder and publishes it there, and :func:`publish_store_plan` writes its plan.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from evalkit.errors import InputError
from evalkit.fsutil import fsync_dir, map_ordered
from evalkit.limits import MAX_PLAN_BYTES
from evalkit.replay.campaign import Campaign, Job
from evalkit.replay.job import JobOutcome, execute_job, job_fingerprint, marker_name
from evalkit.runlog.execution_order import ATTEMPTS_DIR
from evalkit.runlog.io import (LINK_FIX, EnvironmentFailure, UnreadableRun, leftover_kind,
                                move_run_aside, read_meta, run_link_trouble)
from evalkit.runlog.plan import PLAN_FILE, load_plan, plan_sha256, write_plan
from evalkit.runlog.store_url import MANIFEST, PLAN_KEY, ObjectStore, StoreView, open_store
from evalkit.runlog.validate import validate_run


@dataclass
class RunState:
    run_id: str
    # "complete" | "missing" | "incomplete" | "stale" | "damaged" | "unreadable" | "interrupted"
    state: str
    detail: str = ""


def scan_leftovers(runs_dir: Path) -> dict[str, list[tuple[str, Path]]]:
    """Hidden leftovers directly in ``runs_dir`` by run id: ``[(tag, path)]``, tag in
    ``tmp`` | ``old`` | ``damaged``."""
    out: dict[str, list[tuple[str, Path]]] = {}
    try:
        with os.scandir(runs_dir) as it:
            names = [e.name for e in it if e.name.startswith(".")]
    except FileNotFoundError:
        return out
    for name in sorted(names):
        kind = leftover_kind(name)
        if kind is not None:
            out.setdefault(kind[0], []).append((kind[1], runs_dir / name))
    return out


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def clean_leftovers(runs_dir: Path, run_ids) -> list[str]:
    """Undo what a killed sweep left for ``run_ids`` (call with the store locked).

    ``.<id>.old-*`` without ``<id>``: the run was moved aside and its replacement never
    landed -- renamed back.  ``.<id>.old-*`` beside ``<id>``: the replacement landed; the
    old copy is removed, as the writer would have.  ``.<id>.tmp-*``: an unfinished write,
    never published -- removed.  ``.<id>.damaged-*`` copies are kept.  Returns notes.
    """
    notes = []
    leftovers = scan_leftovers(runs_dir)
    removed = 0
    for run_id in sorted(set(run_ids) & set(leftovers)):
        items = leftovers[run_id]
        olds = sorted((p for tag, p in items if tag == "old"), key=_mtime, reverse=True)
        target = runs_dir / run_id
        if olds and not target.exists():
            olds[0].rename(target)
            fsync_dir(runs_dir)
            notes.append(f"restored {run_id} from {olds[0].name} (a killed sweep had moved it "
                         "aside and its replacement never landed)")
            olds = olds[1:]
        for path in olds + [p for tag, p in items if tag == "tmp"]:
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    if removed:
        notes.append(f"removed {removed} unfinished write(s) left by an interrupted sweep")
    return notes


def move_aside(run_dir: Path) -> Path:
    """Rename a damaged run to ``.<id>.damaged-<UTC time>-<hex>`` (hidden: never read)."""
    return move_run_aside(run_dir, "damaged")


def _first_line(text: str, limit: int = 200) -> str:
    lines = str(text or "").splitlines()
    return lines[0][:limit] if lines else ""


def run_state(camp: Campaign, job: Job, runs_dir: Path, *, deep: bool = True,
              leftovers: dict | None = None, plan_hash: str | None = None) -> RunState:
    """The state of one planned run on disk.  ``deep``: validate a complete run's files too
    (a truncated table makes it ``damaged``); ``leftovers``: :func:`scan_leftovers`;
    ``plan_hash``: a run not stamped with this plan is ``stale``."""
    d = runs_dir / job.run_id
    link = run_link_trouble(runs_dir, d)      # same rule as every listing (runlog.io)
    if link is not None:
        return RunState(job.run_id, "unreadable", f"{link}; {LINK_FIX}")
    try:
        present = d.exists()
    except OSError as exc:
        return RunState(job.run_id, "unreadable", exc.strerror or str(exc))
    if not present:
        olds = [p for tag, p in (leftovers if leftovers is not None
                                 else scan_leftovers(runs_dir)).get(job.run_id, [])
                if tag == "old"]
        if olds:
            return RunState(job.run_id, "interrupted",
                            f"moved aside as {olds[0].name} by a killed sweep; resume "
                            "restores it")
        return RunState(job.run_id, "missing")
    try:
        meta = read_meta(d)
    except EnvironmentFailure:      # not judged: the sweep stops rather than redo a valid run
        raise
    except UnreadableRun as exc:
        return RunState(job.run_id, "unreadable", exc.message)
    except InputError as exc:
        return RunState(job.run_id, "damaged", _first_line(exc.message))
    if not meta.get("complete"):
        return RunState(job.run_id, "incomplete", _first_line(meta.get("error")))
    req = (meta.get("settings") or {}).get("requested") or {}
    if req.get("campaign_fingerprint") != job_fingerprint(camp, job):
        return RunState(job.run_id, "stale", "written under different campaign settings")
    if plan_hash is not None and meta.get("plan_sha256") != plan_hash:
        return RunState(job.run_id, "stale", "not written under this runs directory's plan")
    if deep:
        errors = [p for p in validate_run(d) if p.severity == "error" and p.kind != "scale"]
        unreadable = [p for p in errors if p.kind == "unreadable"]
        if unreadable:
            return RunState(job.run_id, "unreadable",
                            f"{Path(unreadable[0].file or d).name}: {unreadable[0].message}")
        if errors:
            where = Path(errors[0].file).name + ": " if errors[0].file else ""
            return RunState(job.run_id, "damaged", where + _first_line(errors[0].message))
    return RunState(job.run_id, "complete")


def existing_states(camp: Campaign, jobs: list[Job], runs_dir: Path, *,
                    threads: int | None = None,
                    plan_hash: str | None = None) -> dict[str, RunState]:
    """:func:`run_state` of every job (validating existing runs a few threads at a time)."""
    leftovers = scan_leftovers(runs_dir)
    states = map_ordered(lambda j: run_state(camp, j, runs_dir, leftovers=leftovers,
                                             plan_hash=plan_hash), jobs, threads)
    return {st.run_id: st for st in states}


# ----------------------------------------------------------------------------- object stores

def execute_job_in_store(camp: Campaign, job: Job, url: str) -> JobOutcome:
    """Run one job into the object store ``url`` from a private staging folder of this
    process (nothing shared with the driver or other workers): the runs it depends on are
    fetched from the store, the run is written there by the runner, then published
    (:meth:`~evalkit.runlog.store_url.ObjectStore.publish_run`: its files, then its
    manifest).  A worker killed before the manifest leaves an upload no reader takes for a
    run; resume removes it and runs the job again."""
    t0 = time.perf_counter()
    stage = Path(tempfile.mkdtemp(prefix="evalkit-stage-"))
    try:
        store = open_store(url)
        # its own earlier (failed) attempt too, and the start marker a killed worker left:
        # the re-run records them (job.keep_failed_attempts)
        for dep in sorted(set(job.depends_on) | {job.run_id}):
            manifest = store.manifest(dep)
            if manifest is not None:
                store.fetch_run(dep, stage / dep, manifest)
        marker_key = f"{ATTEMPTS_DIR}/{marker_name(job.run_id)}"
        left = store.get_bytes(marker_key)
        if left is not None:
            (stage / ATTEMPTS_DIR).mkdir()
            (stage / marker_key).write_bytes(left)
        outcome = execute_job(camp, job, stage,
                              on_start=lambda marker: store.put_bytes(marker_key,
                                                                      marker.read_bytes()))
        if (stage / job.run_id / "run.json").is_file():
            store.publish_run(stage / job.run_id)
            for kept in sorted((stage / ATTEMPTS_DIR).glob(f"{job.run_id}.*.run.json")):
                store.put_bytes(f"{ATTEMPTS_DIR}/{kept.name}", kept.read_bytes())
            store.delete(marker_key)
        return outcome
    except InputError as exc:
        return JobOutcome(job.run_id, "failed", exc.format(), time.perf_counter() - t0)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def store_states(camp: Campaign, jobs: list[Job], view: StoreView, *,
                 plan_hash: str | None = None) -> dict[str, RunState]:
    """:func:`run_state` of every job, judged on the view's local copy of the store; a run
    whose manifest cannot be used, or whose files differ from it, is ``damaged``."""
    states = existing_states(camp, jobs, view.root, plan_hash=plan_hash)
    for run_id, why in view.unusable.items():
        if run_id in states:
            states[run_id] = RunState(run_id, "damaged", f"{MANIFEST}: {why}")
    for run_id, left_out in view.left_out.items():
        if run_id in states and states[run_id].state != "damaged":
            states[run_id] = RunState(run_id, "damaged", left_out[0])
    return states


def publish_store_plan(store: ObjectStore, plan: dict, fresh: bool, local: Path) -> str:
    """Publish a fresh plan to the object store (call with the store locked): written to
    the local copy ``local`` by the one plan writer, then uploaded.  A plan another sweep
    published meanwhile is an InputError, as in a local runs directory."""
    sha = plan_sha256(plan)
    if not fresh:
        return f"runs follow the existing {PLAN_FILE} (sha256 {sha[:12]})"
    raw = store.get_bytes(PLAN_KEY, MAX_PLAN_BYTES)
    if raw is not None:
        (local / PLAN_FILE).write_bytes(raw)
        if plan_sha256(load_plan(local / PLAN_FILE)) != sha:
            raise InputError("another sweep wrote this run store's plan at the same time",
                             file=store.where(PLAN_KEY),
                             fix="run the sweep again: it follows the plan now there")
        return f"runs follow the existing {PLAN_FILE} (sha256 {sha[:12]})"
    write_plan(plan, local / PLAN_FILE)
    store.put_bytes(PLAN_KEY, (local / PLAN_FILE).read_bytes())
    return f"plan {PLAN_FILE} written to {store.url} (sha256 {sha[:12]})"
