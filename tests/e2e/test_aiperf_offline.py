"""AIPerf itself, offline, against `evalkit serve`; its exports imported and validated.

AIPerf is optional (it pins pandas, pillow and aiofiles below evalkit's and pulls dash,
kaleido and kubernetes clients), so it is not a dependency.  The test runs where `aiperf` is
importable, or where EVALKIT_AIPERF_SITE names a directory it was installed into
(`pip install --no-deps --target DIR -r tests/requirements-aiperf.txt`, as `.ci/run` does);
elsewhere it is skipped with that reason.  The tokenizer is a local directory: AIPerf loads a
path without the hub (its HF_HUB_OFFLINE mode would look the name up in the hub cache
instead, so those variables are left unset here).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.e2e.test_guidellm_offline import _write_tokenizer
from tests.support.sidecar_server import start_server, stop_server
from tests.support.optional import installed

SITE = os.environ.get("EVALKIT_AIPERF_SITE")
HAVE = importlib.util.find_spec("aiperf") is not None or (
    SITE is not None and os.path.isdir(os.path.join(SITE, "aiperf")))

pytestmark = [
    installed("tokenizers", "transformers"),
    pytest.mark.slow, pytest.mark.torch,
    pytest.mark.skipif(not HAVE, reason="aiperf is not installed (its pins conflict with "
                       "evalkit's pandas and pillow); pip install --no-deps --target DIR -r "
                       "tests/requirements-aiperf.txt and set EVALKIT_AIPERF_SITE=DIR to run "
                       "this test"),
]


@pytest.fixture(scope="module")
def server():
    s = start_server("tiny-aiperf")
    try:
        yield s
    finally:
        stop_server(s)


def test_aiperf_profiles_the_server_and_its_export_imports(server, tmp_path):
    from click.testing import CliRunner

    from evalkit.cli.main import cli
    from evalkit.runlog.io import iter_run_dirs, read_run
    _write_tokenizer(tmp_path / "tok")
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")}
    if SITE:
        env["PYTHONPATH"] = SITE + os.pathsep + env.get("PYTHONPATH", "")
    artifacts = tmp_path / "artifacts"
    r = subprocess.run(
        [sys.executable, "-m", "aiperf", "profile", "--model", server.model, "--url",
         server.base_url, "--endpoint-type", "chat", "--streaming", "--tokenizer",
         str(tmp_path / "tok"), "--concurrency", "2", "--request-count", "8",
         "--prompt-input-tokens-mean", "24", "--prompt-input-tokens-stddev", "0",
         "--prompt-output-tokens-mean", "8", "--prompt-output-tokens-stddev", "0",
         "--random-seed", "1", "--output-artifact-dir", str(artifacts), "--ui-type", "none",
         "--no-auto-plot"], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = json.loads((artifacts / "profile_export_aiperf.json").read_text())
    assert summary["request_count"]["avg"] == 8 and summary["error_summary"] == []
    runs = tmp_path / "runs"
    res = CliRunner().invoke(cli, ["import", "aiperf", str(artifacts), "--out", str(runs),
                                   "--role", "no_sync", "--policy", "no_sync", "--seed", "1",
                                   "--slo-e2e", "2", "--merge-duration", "1"])
    assert res.exit_code == 0, res.output
    assert CliRunner().invoke(cli, ["validate", str(runs)]).exit_code == 0
    (run_dir,) = iter_run_dirs(runs)
    run = read_run(run_dir)
    req = run.requests
    assert len(req) == 8 and req["ok"].all()
    assert (req["output_tokens"] == 8).all()             # the server's usage, max_tokens 8
    assert (req["first_token_s"] > req["sent_s"]).all()
    assert run.meta["settings"]["effective"]["source"]["tool_version"] == \
        summary["aiperf_version"]
