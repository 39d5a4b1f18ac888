"""A campaign on a two-node Ray cluster whose nodes share no folder, into an S3 run store
(moto's server on 127.0.0.1): a worker killed mid-upload leaves nothing a reader takes for a
run, a new driver resumes the campaign, and the audit of the store equals, number for
number, the audit of the same campaign swept into a local folder."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from tests.support.protocols import BUNDLED
from tests.support.reliability_tools import REPO, cli_env, run_cli, write_campaign
from tests.support.s3_server import new_bucket, s3_server

VICTIM = "tiny__wa__s1"
# measured on the host while each run executed: two executions never agree on them
WALL_CLOCK_CHECKS = {"execution_drift"}


def _killed_mid_upload(camp, job, url):
    """The sweep's worker, except that the victim's worker process is killed (SIGKILL) after
    two of its run's files reached the store."""
    from evalkit.replay.store import execute_job_in_store
    from evalkit.runlog import store_url

    if job.run_id == VICTIM:
        real, sent = store_url.ObjectStore.put_bytes, []

        def put(self, rel, data):
            if "/.attempt-" in rel:
                if len(sent) == 2:
                    os.kill(os.getpid(), signal.SIGKILL)
                sent.append(rel)
            real(self, rel, data)

        store_url.ObjectStore.put_bytes = put
    return execute_job_in_store(camp, job, url)


@contextlib.contextmanager
def _two_nodes(tmp_path):
    """Two Ray nodes on this machine, each with its own temporary folder (TMPDIR), started
    with the S3 endpoint and credentials in their environment."""
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in ("TMPDIR", "PYTHONPATH")}
    os.environ["PYTHONPATH"] = str(REPO)         # the workers import this test's worker
    # short folders: Ray keeps its sockets below them (at most 107 bytes a path)
    nodes = [Path(tempfile.mkdtemp(prefix=f"ek-{name}-")) for name in ("a", "b")]
    cluster = None
    try:
        for node in nodes:
            os.environ["TMPDIR"] = str(node)
            if cluster is None:
                cluster = Cluster(initialize_head=True, head_node_args={
                    "num_cpus": 1, "include_dashboard": False})
            else:
                cluster.add_node(num_cpus=1)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        yield cluster, nodes
    finally:
        if cluster is not None:
            cluster.shutdown()
        for node in nodes:
            shutil.rmtree(node, ignore_errors=True)


def _without_wall_clock(doc: dict) -> dict:
    doc = json.loads(json.dumps(doc))
    for claim in doc["claims"]:
        for check in claim["checks"]:
            if check["name"] in WALL_CLOCK_CHECKS:
                check.pop("found")
    return doc


@pytest.mark.ray
@pytest.mark.slow     # about 30 s on 2 cores: the slow tier's rule (> ~20 s)
def test_two_nodes_no_shared_folder_killed_worker_resume_and_equal_audit(tmp_path,
                                                                         monkeypatch):
    pytest.importorskip("ray", reason="needs the ray extra (pip install -e '.[ray]')")
    from evalkit.audit.result import audit_campaign
    from evalkit.replay.sweep import check_campaign, run_campaign
    from evalkit.replay.campaign import load_campaign
    from evalkit.replay.executors import RayExecutor
    from evalkit.runlog.store_url import local_view, open_store

    (tmp_path / "campaign").mkdir()
    camp = write_campaign(tmp_path / "campaign", seeds=2, draws=1)
    driver = tmp_path / "driver"                       # the driver's working folder
    driver.mkdir()
    monkeypatch.chdir(driver)
    with s3_server(), _two_nodes(tmp_path) as (cluster, nodes):
        # the driver's own temporary folder: its private copies of the store come and go
        driver_tmp = tmp_path / "driver-tmp"
        driver_tmp.mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(driver_tmp))
        url = f"s3://{new_bucket()}/campaign/runs"
        # no retry of the killed task: the sweep fails, and a new driver resumes it
        executor = RayExecutor(load_campaign(camp), address=cluster.address,
                               worker=_killed_mid_upload, max_retries=0)
        first = run_campaign(camp, url, progress=False, executor=executor,
                             job_fn=_killed_mid_upload, protocol=BUNDLED)
        assert [o.run_id for o in first.outcomes if o.status == "failed"] == [VICTIM]
        store = open_store(url)
        assert store.entries()[VICTIM].manifest is None        # never taken for a run ...
        cut = len(store.entries()[VICTIM].attempts)             # ... though files were sent
        assert cut >= 1
        states = {s.run_id: s.state for s in check_campaign(camp, url).states}
        assert states[VICTIM] == "missing"
        # each killed worker's staging folder stayed in its own node's temporary folder
        staged = [p for node in nodes for p in node.glob("evalkit-stage-*")]
        assert len(staged) == cut and not list(tmp_path.rglob("evalkit-stage-*"))

        resumed = run_cli(["sweep", camp, "--out", url, "--executor", "ray", "--address",
                           cluster.address, "--no-progress"], cwd=driver,
                          env=cli_env({"TMPDIR": str(driver_tmp)}))
        out = resumed.stdout + resumed.stderr
        # the victim and its draw run; the runs stamped with the plan are kept
        assert resumed.returncode == 0 and "2 ran, 4 skipped" in out, out
        assert f"removed {cut} unfinished upload(s)" in out, out
        assert check_campaign(camp, url).complete
        with local_view(url) as (copy, _):            # what evalkit audit URL reads
            store_doc = audit_campaign(copy, seed=0).to_dict()
        plan = store.get_bytes("plan.json")
    # nothing written in the driver's folder, nothing left in its temporary folder
    assert list(driver.iterdir()) == [] and list(driver_tmp.iterdir()) == []

    local = tmp_path / "local" / "runs"                # the same plan, swept into a folder
    local.mkdir(parents=True)
    (local / "plan.json").write_bytes(plan)
    assert run_campaign(camp, local, progress=False, protocol=BUNDLED).ok
    local_doc = audit_campaign(local, seed=0).to_dict()
    assert _without_wall_clock(store_doc) == _without_wall_clock(local_doc)
