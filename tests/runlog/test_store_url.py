"""Run stores addressed by URL (evalkit/runlog/store_url.py), against a real S3 endpoint:
moto's server on 127.0.0.1.  A run is its manifest: an upload without one is invisible,
the manifest is written last, a file whose bytes differ from it is never read, and every
error names the URL and the fix (exit 2) without a credential in it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.errors import InputError
from evalkit.runlog import store_url
from evalkit.runlog.store_url import (MANIFEST, is_store_url, local_path, local_view,
                                      open_store)
from tests.support.reliability_tools import run_cli
from tests.support.s3_server import SECRET, new_bucket, s3_server


@pytest.fixture(scope="module")
def s3():
    with s3_server() as env:
        yield env


def _run_folder(tmp_path: Path, run_id: str = "r1") -> Path:
    """A run folder as the runner leaves it (three small files are enough here)."""
    run = tmp_path / "stage" / run_id
    run.mkdir(parents=True)
    (run / "run.json").write_text('{"run_id": "%s", "complete": true}\n' % run_id)
    (run / "requests.parquet").write_bytes(b"PAR1" + b"r" * 100)
    (run / "merges.parquet").write_bytes(b"PAR1" + b"m" * 50)
    return run


def _store(s3, prefix: str = "camp/runs"):
    return open_store(f"s3://{new_bucket()}/{prefix}")


def test_plain_paths_and_file_urls_stay_local(tmp_path):
    assert not is_store_url(str(tmp_path)) and not is_store_url(f"file://{tmp_path}")
    assert local_path(f"file://{tmp_path}/runs") == tmp_path / "runs"
    assert local_path("runs") == Path("runs")
    with local_view(str(tmp_path)) as (local, view):
        assert local == tmp_path and view is None
    with pytest.raises(InputError, match="unknown store scheme 'ftp'"):
        local_path("ftp://host/runs")


def test_published_run_reads_back_byte_for_byte(s3, tmp_path):
    store = _store(s3)
    run = _run_folder(tmp_path)
    store.publish_run(run)
    view = store.snapshot(tmp_path / "copy")
    for path in run.iterdir():
        assert (view.root / "r1" / path.name).read_bytes() == path.read_bytes()
    assert not view.notes()


def test_manifest_is_written_last(s3, tmp_path, monkeypatch):
    store = _store(s3)
    written = []
    real = store_url.ObjectStore.put_bytes

    def record(self, rel, data):
        written.append(rel)
        real(self, rel, data)

    monkeypatch.setattr(store_url.ObjectStore, "put_bytes", record)
    store.publish_run(_run_folder(tmp_path))
    assert written[-1] == f"r1/{MANIFEST}"
    assert len(written) == 4 and all("/.attempt-" in key for key in written[:-1])


def test_an_upload_without_its_manifest_is_invisible(s3, tmp_path, monkeypatch):
    """A writer killed mid-upload: the files it sent are never taken for a run."""
    store = _store(s3)
    real = store_url.ObjectStore.put_bytes
    sent = []

    def die_after_two(self, rel, data):
        if len(sent) == 2:
            raise KeyboardInterrupt("killed mid-upload")
        sent.append(rel)
        real(self, rel, data)

    monkeypatch.setattr(store_url.ObjectStore, "put_bytes", die_after_two)
    with pytest.raises(KeyboardInterrupt):
        store.publish_run(_run_folder(tmp_path))
    monkeypatch.undo()
    assert len(store.list()) == 2                      # the partial upload is there ...
    view = store.snapshot(tmp_path / "copy")
    assert not (view.root / "r1").exists()             # ... and no reader sees a run
    entry = store.entries()["r1"]
    assert entry.manifest is None and len(entry.leftover_attempts()) == 1
    assert store.clean_leftovers(["r1"], store.entries()) == [
        "removed 1 unfinished upload(s) left by a killed worker or sweep"]
    assert store.list() == {}


def test_cleaning_leftovers_keeps_the_attempt_a_damaged_manifest_names(s3, tmp_path):
    """A run moved aside as damaged keeps its upload for inspection: no manifest names its
    attempt any more, yet cleaning the leftovers of killed writers never removes it."""
    store = _store(s3)
    published = store.publish_run(_run_folder(tmp_path))
    store.move_aside("r1", published)
    entry = store.entries()["r1"]
    assert entry.manifest is None and len(entry.damaged) == 1
    assert entry.leftover_attempts() == {published["attempt"]}
    assert store.clean_leftovers(["r1"], store.entries()) == []
    assert store.entries()["r1"].attempts == {published["attempt"]}


def test_replacing_a_run_keeps_one_attempt(s3, tmp_path):
    store = _store(s3)
    run = _run_folder(tmp_path)
    first = store.publish_run(run)
    (run / "merges.parquet").write_bytes(b"PAR1" + b"n" * 60)
    second = store.publish_run(run)
    assert second["attempt"] != first["attempt"]
    assert store.entries()["r1"].attempts == {second["attempt"]}
    view = store.snapshot(tmp_path / "copy")
    assert (view.root / "r1" / "merges.parquet").read_bytes() == b"PAR1" + b"n" * 60


def test_a_file_that_differs_from_its_manifest_is_never_read(s3, tmp_path):
    store = _store(s3)
    manifest = store.publish_run(_run_folder(tmp_path))
    key = f"r1/.attempt-{manifest['attempt']}/requests.parquet"
    store.put_bytes(key, b"PAR1" + b"x" * 100)         # same size, other bytes
    view = store.snapshot(tmp_path / "copy")
    assert not (view.root / "r1" / "requests.parquet").exists()
    assert (view.root / "r1" / "run.json").exists()
    assert view.left_out == {"r1": ["requests.parquet: its bytes differ from the manifest"]}
    assert view.notes()[0].startswith(f"{store.url}/r1: requests.parquet")


@pytest.mark.parametrize("broken", ["format", "other run", "path", "json"])
def test_a_broken_manifest_is_reported_not_read(s3, tmp_path, broken):
    store = _store(s3)
    manifest = store.publish_run(_run_folder(tmp_path))
    if broken == "format":
        manifest["format"] = "something else"
    elif broken == "other run":                    # r2's manifest copied under r1
        manifest["run_id"] = "r2"
    elif broken == "path":                         # a name that would leave the copy
        manifest["files"][0]["name"] = "../../outside"
    raw = b"{not json" if broken == "json" else json.dumps(manifest).encode()
    store.put_bytes(f"r1/{MANIFEST}", raw)
    view = store.snapshot(tmp_path / "copy")
    assert not (view.root / "r1").exists() and not (tmp_path / "outside").exists()
    assert view.unusable["r1"]
    assert view.notes() == [f"{store.url}/r1/{MANIFEST}: {view.unusable['r1']}; the run is "
                            "not read"]


def test_errors_inside_a_view_name_the_url_not_the_copy(s3, tmp_path):
    store = _store(s3)
    store.publish_run(_run_folder(tmp_path))
    with pytest.raises(InputError) as err:
        with local_view(store.url) as (local, _):
            raise InputError("broken", file=str(local / "r1" / "run.json"),
                             fix=f"look into {local}")
    assert err.value.file == f"{store.url}/r1/run.json"
    assert err.value.fix == f"look into {store.url}"
    assert "evalkit-store-" not in str(err.value)


def test_url_refuses_credentials_and_options():
    for url in (f"s3://bucket/runs?secret_key={SECRET}", "s3://user:pw@bucket/runs",
                "s3://bucket/a/../b", "s3:///runs"):
        with pytest.raises(InputError) as err:
            open_store(url)
        assert SECRET not in err.value.format() and "pw" not in err.value.format()
        assert err.value.file.startswith("s3://") and "s3://BUCKET/PREFIX" in err.value.fix


def test_store_errors_are_redacted(s3, monkeypatch):
    """A provider message that echoed a secret would print it: every store error passes
    redact, so the secret key becomes ***."""
    store = _store(s3)

    class Leaky:
        def get_file_info(self, _):
            raise OSError(f"signature mismatch for secret {SECRET}")

    store.fs = Leaky()
    with pytest.raises(InputError) as err:
        store.list()
    text = err.value.format()
    assert SECRET not in text and "***" in text
    assert err.value.file == store.url and "AWS_SECRET_ACCESS_KEY" in err.value.fix


def test_cli_errors_name_the_url_and_the_fix_exit_2(s3, tmp_path):
    missing = run_cli(["validate", "s3://no-such-bucket-evalkit/runs"])
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert "s3://no-such-bucket-evalkit/runs" in missing.stderr
    assert "does not exist" in missing.stderr and "fix: create the bucket" in missing.stderr
    query = run_cli(["summarize", f"s3://{new_bucket()}/runs?secret_key={SECRET}"])
    assert query.returncode == 2 and "no query string" in query.stderr
    assert SECRET not in query.stdout + query.stderr
    bad_endpoint = run_cli(["validate", "s3://bucket/runs"],
                           env=_env(AWS_ENDPOINT_URL="ftp://127.0.0.1:1"))
    assert bad_endpoint.returncode == 2 and "AWS_ENDPOINT_URL" in bad_endpoint.stderr
    wrong_key = run_cli(["validate", f"s3://{new_bucket()}/runs"],
                        env=_env(AWS_ACCESS_KEY_ID="unknown-key", AWS_SECRET_ACCESS_KEY=SECRET))
    # moto accepts any key, so this one is answered; the point is no secret in the output
    assert SECRET not in wrong_key.stdout + wrong_key.stderr


def _env(**extra):
    from tests.support.reliability_tools import cli_env

    return cli_env(extra)


def test_validate_of_a_store_with_a_tampered_run_exits_2_naming_the_url(s3, tmp_path):
    store = _store(s3)
    manifest = store.publish_run(_run_folder(tmp_path))
    store.put_bytes(f"r1/.attempt-{manifest['attempt']}/merges.parquet", b"tampered")
    res = run_cli(["validate", store.url])
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"error: {store.url}/r1: merges.parquet: its bytes differ" in res.stdout
    assert "evalkit-store-" not in res.stdout       # the private copy is never named


def test_a_snapshot_carries_the_plan_when_the_store_has_one(s3, tmp_path):
    from evalkit.runlog.store_url import PLAN_KEY

    store = _store(s3)
    store.publish_run(_run_folder(tmp_path))
    assert not (store.snapshot(tmp_path / "before").root / PLAN_KEY).exists()
    store.put_bytes(PLAN_KEY, b'{"plan": 1}\n')
    assert (store.snapshot(tmp_path / "after").root / PLAN_KEY).read_bytes() == b'{"plan": 1}\n'
