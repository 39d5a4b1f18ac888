"""inference-perf itself, offline, against `evalkit serve`; its per-request report imported
and validated.

inference-perf is optional (its wheel says Python >= 3.12 and it pins transformers), so it
is not a dependency.  The test runs where `inference_perf` is importable, or where
EVALKIT_INFERENCE_PERF_SITE names a directory it was installed into (`pip install --no-deps
--ignore-requires-python --only-binary=:all: --target DIR -r
tests/requirements-inference-perf.txt`, as `.ci/run` does); elsewhere it is skipped with
that reason.  The tokenizer is a local directory, loaded with the HF_*_OFFLINE variables set.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.e2e.test_guidellm_offline import _write_tokenizer
from tests.support.sidecar_server import start_server, stop_server
from tests.support.optional import installed

SITE = os.environ.get("EVALKIT_INFERENCE_PERF_SITE")
HAVE = importlib.util.find_spec("inference_perf") is not None or (
    SITE is not None and os.path.isdir(os.path.join(SITE, "inference_perf")))

pytestmark = [
    installed("tokenizers", "transformers"),
    pytest.mark.slow, pytest.mark.torch,
    pytest.mark.skipif(not HAVE, reason="inference-perf is not installed (it pins "
                       "transformers and asks for Python >= 3.12); pip install --no-deps "
                       "--ignore-requires-python --only-binary=:all: --target DIR -r "
                       "tests/requirements-inference-perf.txt and set "
                       "EVALKIT_INFERENCE_PERF_SITE=DIR to run this test"),
]

CONFIG = """\
api: {{type: completion, streaming: true}}
data:
  type: random
  input_distribution: {{min: 24, max: 24, mean: 24, std_dev: 0}}
  output_distribution: {{min: 8, max: 8, mean: 8, std_dev: 0}}
load:
  type: constant
  stages: [{{rate: 4, duration: 3}}]
  num_workers: 1
server: {{type: vllm, model_name: {model}, base_url: '{url}', ignore_eos: true}}
tokenizer: {{pretrained_model_name_or_path: '{tok}'}}
report:
  request_lifecycle:
    per_request: true
    per_request_fields: {{computed_metrics: true, response_chunks: false, request: false,
                         response: false}}
storage: {{local_storage: {{path: '{out}'}}}}
"""


@pytest.fixture(scope="module")
def server():
    s = start_server("tiny-inference-perf")
    try:
        yield s
    finally:
        stop_server(s)


def test_inference_perf_drives_the_server_and_its_report_imports(server, tmp_path):
    from click.testing import CliRunner

    from evalkit.cli.main import cli
    from evalkit.runlog.io import iter_run_dirs, read_run
    _write_tokenizer(tmp_path / "tok")
    reports = tmp_path / "reports"
    (tmp_path / "config.yml").write_text(CONFIG.format(
        model=server.model, url=server.base_url, tok=tmp_path / "tok", out=reports))
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    if SITE:
        env["PYTHONPATH"] = SITE + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "inference_perf.main", "-c",
                        str(tmp_path / "config.yml")], env=env, capture_output=True,
                       text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    version = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; "
         "print(m.version('inference-perf'))"], env=env, capture_output=True, text=True,
        check=True).stdout.strip()
    runs = tmp_path / "runs"
    res = CliRunner().invoke(cli, ["import", "inference-perf", str(reports), "--out",
                                   str(runs), "--tool-version", version, "--role", "no_sync",
                                   "--policy", "no_sync", "--seed", "1", "--slo-e2e", "2",
                                   "--merge-duration", "1"])
    assert res.exit_code == 0, res.output
    assert CliRunner().invoke(cli, ["validate", str(runs)]).exit_code == 0
    (run_dir,) = iter_run_dirs(runs)
    req = read_run(run_dir).requests
    assert len(req) >= 8 and req["ok"].all()             # 4/s for 3 s
    assert (req["output_tokens"] == 8).all()
    assert (req["first_token_s"] > req["sent_s"]).all()
