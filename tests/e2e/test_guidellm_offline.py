"""GuideLLM itself, offline, against `evalkit serve`; its report imported and validated.

GuideLLM is optional: it pins click~=8.4 and pulls datasets, sanic and uvloop, which conflict
with evalkit's environment, so it is not a dependency.  The test runs where `guidellm` is
importable, or where EVALKIT_GUIDELLM_SITE names a directory it was installed into
(`pip install --no-deps --target DIR -r tests/requirements-guidellm.txt`, as `.ci/run`
does); elsewhere it is skipped with that reason.  One test runs README's GuideLLM block as
written.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.support.sidecar_server import start_server, stop_server
from tests.support.readme_blocks import readme_block
from tests.support.optional import installed

SITE = os.environ.get("EVALKIT_GUIDELLM_SITE")
HAVE = importlib.util.find_spec("guidellm") is not None or (
    SITE is not None and os.path.isdir(os.path.join(SITE, "guidellm")))

pytestmark = [
    installed("torch", "tokenizers", "transformers"),
    pytest.mark.slow, pytest.mark.torch,
    pytest.mark.skipif(not HAVE, reason="guidellm is not installed (it conflicts with "
                       "evalkit's click and torch pins); pip install --no-deps --target DIR "
                       "-r tests/requirements-guidellm.txt and set EVALKIT_GUIDELLM_SITE=DIR "
                       "to run this test"),
]


def _write_tokenizer(path) -> None:
    """A byte-level BPE trained here on a few sentences: no hub access."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = ["the quick brown fox jumps over the lazy dog " * 20,
            "serving requests overlap a merge window and wait in the queue " * 20]
    tok.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"]))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(
        str(path))


@pytest.fixture(scope="module")
def server():
    s = start_server("tiny-guidellm")
    try:
        yield s
    finally:
        stop_server(s)


@pytest.mark.parametrize("request_format", [None, "/v1/completions"])
def test_guidellm_runs_against_the_sidecar_and_imports(server, tmp_path, request_format):
    from click.testing import CliRunner

    from evalkit.cli.main import cli
    from evalkit.runlog.io import read_table
    _write_tokenizer(tmp_path / "tok")
    backend = {"kind": "openai_http", "target": server.base_url, "model": server.model}
    if request_format:
        backend["request_format"] = request_format
    report = tmp_path / "benchmarks.json"
    scenario = {"spec": {
        "backend": backend,                  # default request format: chat completions
        "profile": {"kind": "poisson", "rate": [3.0]},
        "tokenizer": {"kind": "huggingface_auto", "model": str(tmp_path / "tok")},
        "data": [{"kind": "synthetic_text", "prompt_tokens": 24, "output_tokens": 8}],
        "constraints": [{"kind": "max_duration", "seconds": 6}],
        "outputs": [{"kind": "json", "path": str(report)}]}}
    (tmp_path / "scenario.json").write_text(json.dumps(scenario))
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    if SITE:
        env["PYTHONPATH"] = SITE + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "guidellm", "run", "-c",
                        str(tmp_path / "scenario.json"), "--disable-console-interactive"],
                       env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    raw = json.loads(report.read_text())
    reqs = raw["benchmarks"][0]["requests"]
    assert reqs["errored"] == [], reqs["errored"][:1]
    assert len(reqs["successful"]) >= 8
    runs = tmp_path / "runs"
    res = CliRunner().invoke(cli, ["import", "guidellm", str(report), "--out", str(runs),
                                   "--role", "no_sync", "--policy", "no_sync", "--seed", "1",
                                   "--slo-e2e", "2", "--merge-duration", "1"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, ["validate", str(runs)])
    assert res.exit_code == 0, res.output
    run = next(p for p in runs.iterdir() if p.is_dir())
    req = read_table(run, "requests")
    assert len(req) == len(reqs["successful"]) and req["ok"].all()
    assert (req["output_tokens"] == 8).all()             # the server's usage, max_tokens 8
    assert (req["first_token_s"] > req["sent_s"]).all()


def test_the_readme_command_drives_the_sidecar_and_imports_back(server, tmp_path):
    """README's `guidellm run ...` and `evalkit import guidellm ...` lines, as written: only
    the port, the model name, the tokenizer, the paths and a shorter duration substituted."""
    from click.testing import CliRunner

    from evalkit.cli.main import cli
    from evalkit.runlog.io import read_table
    commands = readme_block("guidellm-command")
    run = next(c for c in commands if c[:2] == ["guidellm", "run"])
    back = next(c for c in commands if c[:3] == ["evalkit", "import", "guidellm"])
    _write_tokenizer(tmp_path / "tok")
    report = tmp_path / "benchmarks.json"
    swap = {"target=http://127.0.0.1:8000": f"target={server.base_url}",
            "model=tiny": f"model={server.model}",
            "model=TOKENIZER_DIR": f"model={tmp_path / 'tok'}",
            "path=benchmarks.json": f"path={report}", "seconds=30": "seconds=6"}
    argv = []
    for arg in run[1:]:
        for old, new in swap.items():
            arg = arg.replace(old, new)
        argv.append(arg)
    assert "--output" in argv and f"kind=json,path={report}" in argv
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    if SITE:
        env["PYTHONPATH"] = SITE + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "guidellm", *argv], env=env, capture_output=True,
                       text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    raw = json.loads(report.read_text())
    assert raw["benchmarks"][0]["config"]["strategy"]["type_"] == "constant"
    reqs = raw["benchmarks"][0]["requests"]
    assert reqs["errored"] == [] and len(reqs["successful"]) >= 6
    runs = tmp_path / "runs"
    args = [str(report) if a == "benchmarks.json" else (str(runs) if a == "runs" else a)
            for a in back[3:]]
    res = CliRunner().invoke(cli, ["import", "guidellm", *args])
    assert res.exit_code == 0, res.output
    assert CliRunner().invoke(cli, ["validate", str(runs)]).exit_code == 0
    run_dir = next(p for p in runs.iterdir() if p.is_dir())
    assert len(read_table(run_dir, "requests")) == len(reqs["successful"])
