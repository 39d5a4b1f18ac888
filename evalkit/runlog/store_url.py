"""Run stores addressed by URL: a local folder, or a prefix in an object store.

``s3://bucket/prefix``, ``gs://bucket/prefix`` and ``az://container/prefix`` name a run store
in an object store; ``file:///path`` and plain paths name a local runs directory, which keeps
its own rules (:mod:`evalkit.runlog.io`: atomic rename).  One abstraction,
:class:`ObjectStore` over ``pyarrow.fs`` (already a dependency, with S3, GCS and Azure built
in), stands behind the sweep's writer, its lock and plan, and every reader.

Object stores have no atomic rename, so a run is published in two steps::

    <prefix>/<run_id>/.attempt-<token>/run.json, requests.parquet, ...   (uploaded first)
    <prefix>/<run_id>/manifest.json                                      (written last)

The manifest names the attempt and each file's size and sha256; one PUT of one object is
atomic in S3, GCS and Azure, so a run is either named by a complete manifest or invisible.
Readers require the manifest: an attempt no manifest names (a worker killed mid-upload) is
never read and is removed when a sweep resumes; a file whose bytes differ from its manifest
is not materialised, so the validator reports the run.  Replacing a run writes a new
attempt and then a new manifest (the old attempt is removed after).  Readers
(:func:`local_view`) materialise the complete runs in a private temporary folder and read
it with the local code, so an audit of a store equals the audit of the same runs on disk.

Credentials are never taken from the URL (a query string or ``user:password@`` is refused)
and never written: pyarrow reads them from the provider's standard places (``AWS_*``
variables, ``~/.aws/credentials`` and ``config``, instance roles; Google application default
credentials; ``AZURE_STORAGE_*``).  An S3-compatible server is named by ``AWS_ENDPOINT_URL_S3``
or ``AWS_ENDPOINT_URL``.  Every message from the store passes :func:`redact`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

from evalkit.errors import InputError
from evalkit.fsutil import map_ordered
from evalkit.jsonio import dumps, loads_json
from evalkit.runlog.execution_order import ATTEMPTS_DIR, kept_attempt_run

__all__ = ["OBJECT_SCHEMES", "MANIFEST", "PLAN_KEY", "ObjectStore", "StoreView", "is_store_url",
           "local_path", "open_store", "local_view", "redact"]

OBJECT_SCHEMES = {"s3": "S3", "gs": "Google Cloud Storage", "gcs": "Google Cloud Storage",
                  "az": "Azure Blob Storage"}
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "evalkit-run-manifest"
ATTEMPT_PREFIX = ".attempt-"
DAMAGED_PREFIX = "manifest.damaged-"
PLAN_KEY = "plan.json"
MAX_MANIFEST_BYTES = 1 << 20
MAX_OBJECT_BYTES = 1 << 30          # a run file larger than this is refused, not read
# environment variables whose values are secrets: never printed, never written
SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                    "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN",
                    "AZURE_STORAGE_CONNECTION_STRING", "AZURE_CLIENT_SECRET",
                    "GOOGLE_OAUTH_ACCESS_TOKEN")
URL_FIX = ("write the store as s3://BUCKET/PREFIX (or gs://, az://CONTAINER/PREFIX); "
           "credentials come from the environment (AWS_ACCESS_KEY_ID, ...) or the provider's "
           "config files, an S3-compatible endpoint from AWS_ENDPOINT_URL")


def redact(text) -> str:
    """``text`` with the value of every secret environment variable replaced by ``***``."""
    out = str(text)
    for name in SECRET_VARIABLES:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            out = out.replace(value, "***")
    return out


def is_store_url(target) -> bool:
    """True when ``target`` names an object store (``s3://``, ``gs://``, ``az://``)."""
    if not isinstance(target, str):
        return False
    scheme, sep, _ = target.partition("://")
    return bool(sep) and scheme.lower() in OBJECT_SCHEMES


def local_path(target) -> Path:
    """A local runs directory from a plain path or a ``file://`` URL."""
    text = os.fspath(target)
    if isinstance(text, str) and text.lower().startswith("file://"):
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise InputError(f"file:// URL names host {parts.netloc!r}", file=text,
                             fix="write file:///ABSOLUTE/PATH or a plain path")
        return Path(unquote(parts.path))
    scheme, sep, _ = str(text).partition("://")
    if sep and scheme.isalnum():
        raise InputError(f"unknown store scheme {scheme!r}://", file=text,
                         fix=URL_FIX + "; file:// or a plain path for a local folder")
    return Path(text)


def _split(url: str) -> tuple[str, str, str]:
    """(scheme, bucket, prefix) of a store URL; refuses credentials and options in it."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if parts.query or parts.fragment:
        raise InputError("a store URL takes no query string or fragment (options and "
                         "credentials are never read from the URL, so they are never "
                         "written with it)", file=_shown(url), fix=URL_FIX)
    if "@" in parts.netloc or ":" in parts.netloc:
        raise InputError("a store URL names no user, password or port", file=_shown(url),
                         fix=URL_FIX)
    bucket, prefix = parts.netloc, parts.path.strip("/")
    if not bucket:
        raise InputError("the store URL names no bucket", file=_shown(url),
                         fix=URL_FIX)
    if any(p in (".", "..") for p in prefix.split("/")) or "//" in parts.path.strip("/"):
        raise InputError("the store prefix has an empty, '.' or '..' part", file=_shown(url),
                         fix=URL_FIX)
    return scheme, bucket, prefix


def _shown(url: str) -> str:
    """The URL as messages show it: nothing after '?' or '#', nothing before '@'."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return redact(f"{parts.scheme}://{host}{parts.path}")


def _endpoint() -> tuple[str | None, str]:
    """(endpoint_override, scheme) for S3 from AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL."""
    raw = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not raw:
        return None, "https"
    parts = urlsplit(raw if "://" in raw else "https://" + raw)
    if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
        name = "AWS_ENDPOINT_URL_S3" if os.environ.get("AWS_ENDPOINT_URL_S3") else \
            "AWS_ENDPOINT_URL"
        raise InputError(f"{name} is not an http(s)://HOST[:PORT] endpoint", column=name,
                         fix=f"set {name}=http://127.0.0.1:9000 (or unset it for AWS)")
    return parts.netloc, parts.scheme


def _filesystem(scheme: str, bucket: str):
    import pyarrow.fs as pafs

    if scheme == "s3":
        endpoint, http = _endpoint()
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        # delayed open: a small object is one PUT (multipart only past the part size)
        return pafs.S3FileSystem(endpoint_override=endpoint, scheme=http, region=region,
                                 allow_delayed_open=True)
    if scheme in ("gs", "gcs"):
        return pafs.GcsFileSystem()
    account = os.environ.get("AZURE_STORAGE_ACCOUNT") or os.environ.get(
        "AZURE_STORAGE_ACCOUNT_NAME")
    if not account:
        raise InputError("az:// stores need the storage account's name",
                         column="AZURE_STORAGE_ACCOUNT",
                         fix="export AZURE_STORAGE_ACCOUNT=NAME (the key or a token from "
                             "AZURE_STORAGE_KEY or the Azure default credential)")
    return pafs.AzureFileSystem(account_name=account,
                                account_key=os.environ.get("AZURE_STORAGE_KEY"))


@dataclass
class RunEntry:
    """What one run's keys in the store hold."""

    run_id: str
    manifest: dict | None = None         # the complete run's manifest, None without one
    problem: str = ""                    # why a manifest present is not usable
    attempts: set[str] = field(default_factory=set)
    damaged: list[str] = field(default_factory=list)   # manifest.damaged-* names

    def leftover_attempts(self) -> set[str]:
        """Attempts no manifest names: uploads a killed worker never finished."""
        keep = {self.manifest.get("attempt")} if self.manifest else set()
        return self.attempts - keep


class ObjectStore:
    """A run store under ``<scheme>://<bucket>/<prefix>`` through one ``pyarrow.fs``
    file system.  Every failure is an :class:`InputError` (exit 2) naming the URL (never a
    credential) and the fix."""

    def __init__(self, url: str, fs=None):
        self.scheme, self.bucket, self.prefix = _split(url)
        self.url = _shown(url).rstrip("/")
        self.fs = fs if fs is not None else self._guard("connect to", self.url,
                                                        lambda: _filesystem(self.scheme,
                                                                            self.bucket))
        self.root = "/".join(p for p in (self.bucket, self.prefix) if p)

    @property
    def name(self) -> str:
        """The store's last path part: the name its local copy gets."""
        return PurePosixPath(self.prefix).name or self.bucket

    def where(self, rel: str = "") -> str:
        return f"{self.url}/{rel}" if rel else self.url

    def _key(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def _guard(self, action: str, where: str, call):
        try:
            return call()
        except InputError:
            raise
        except (OSError, ValueError, RuntimeError) as exc:
            raise self.error(action, where, exc) from None

    def error(self, action: str, where: str, exc: BaseException) -> InputError:
        text = redact(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        low = text.lower()
        if any(w in low for w in ("accessdenied", "access denied", "forbidden", "403",
                                  "signature", "invalidaccesskeyid", "credential")):
            fix = ("check the credentials the provider's standard places hold (AWS_ACCESS_KEY_ID "
                   "and AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws/credentials; gcloud "
                   "application default credentials; AZURE_STORAGE_*) and the bucket's policy")
        elif "bucket" in low and ("not found" in low or "nosuchbucket" in low
                                  or "does not exist" in low):
            fix = f"create the bucket {self.bucket!r} or correct the URL"
        else:
            fix = ("check the URL, the network and the endpoint (AWS_ENDPOINT_URL for an "
                   "S3-compatible server)")
        return InputError(f"could not {action} the run store: {text}", file=where, fix=fix)

    # ------------------------------------------------------------------ objects

    def list(self) -> dict[str, object]:
        """Every object below the prefix: relative key -> pyarrow FileInfo (one listing)."""
        import pyarrow.fs as pafs

        sel = pafs.FileSelector(self.root, recursive=True, allow_not_found=True)
        infos = self._guard("list", self.url, lambda: self.fs.get_file_info(sel))
        if not infos and self._guard("list", self.url, lambda: self.fs.get_file_info(
                self.bucket)).type == pafs.FileType.NotFound:
            raise InputError(f"the bucket {self.bucket!r} does not exist", file=self.url,
                             fix=f"create the bucket {self.bucket!r} or correct the URL "
                                 "(and the endpoint, AWS_ENDPOINT_URL, for an S3-compatible "
                                 "server)")
        start = len(self.root) + 1
        return {i.path[start:]: i for i in infos if i.type == pafs.FileType.File}

    def get_bytes(self, rel: str, limit: int = MAX_OBJECT_BYTES) -> bytes | None:
        """The object's bytes, or None when there is none."""
        def read():
            try:
                with self.fs.open_input_stream(self._key(rel)) as f:
                    data = f.read(limit + 1)
            except FileNotFoundError:
                return None
            if len(data) > limit:
                raise InputError(f"object larger than {limit:,} bytes", file=self.where(rel),
                                 fix="this is not a file evalkit wrote; remove it")
            return data

        return self._guard("read", self.where(rel), read)

    def put_bytes(self, rel: str, data: bytes) -> None:
        def write():
            with self.fs.open_output_stream(self._key(rel)) as f:
                f.write(data)

        self._guard("write", self.where(rel), write)

    def mtime(self, rel: str):
        """The object's last-modified time by the store's clock (None: no such object)."""
        import pyarrow.fs as pafs

        info = self._guard("read", self.where(rel), lambda: self.fs.get_file_info(self._key(rel)))
        return info.mtime if info.type == pafs.FileType.File else None

    def delete(self, rel: str) -> None:
        def remove():
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(self._key(rel))

        self._guard("delete", self.where(rel), remove)

    def delete_prefix(self, rel: str) -> None:
        for key in sorted(k for k in self.list() if k.startswith(rel.rstrip("/") + "/")):
            self.delete(key)

    def server_now(self) -> _dt.datetime:
        """The store's clock: the last-modified time of an object written just now."""
        probe = f".evalkit-clock-{secrets.token_hex(8)}"
        self.put_bytes(probe, b"")
        try:
            now = self.mtime(probe)
        finally:
            self.delete(probe)
        if now is None:
            raise InputError("the store did not keep an object just written", file=self.url,
                             fix="check the store's consistency settings")
        return now

    # ------------------------------------------------------------------ runs

    def entries(self, listing: dict | None = None) -> dict[str, RunEntry]:
        """Every run id with keys in the store: its manifest, attempts and damaged copies."""
        listing = self.list() if listing is None else listing
        out: dict[str, RunEntry] = {}
        manifests = []
        for key in sorted(listing):
            parts = key.split("/")
            if len(parts) < 2 or parts[0].startswith("."):
                continue
            entry = out.setdefault(parts[0], RunEntry(parts[0]))
            if len(parts) == 2 and parts[1] == MANIFEST:
                manifests.append(entry)
            elif len(parts) == 2 and parts[1].startswith(DAMAGED_PREFIX):
                entry.damaged.append(parts[1])
            elif len(parts) >= 3 and parts[1].startswith(ATTEMPT_PREFIX):
                entry.attempts.add(parts[1][len(ATTEMPT_PREFIX):])
        for entry, manifest in zip(manifests, map_ordered(self._read_manifest, manifests)):
            entry.manifest, entry.problem = manifest
        return {k: v for k, v in out.items() if v.manifest or v.problem or v.attempts
                or v.damaged}

    def manifest(self, run_id: str) -> dict | None:
        """The usable manifest of ``run_id``, or None (no complete run of that id)."""
        return self._read_manifest(RunEntry(run_id))[0]

    def _read_manifest(self, entry: RunEntry) -> tuple[dict | None, str]:
        rel = f"{entry.run_id}/{MANIFEST}"
        raw = self.get_bytes(rel, MAX_MANIFEST_BYTES)
        if raw is None:
            return None, ""
        try:
            doc = loads_json(raw, file=self.where(rel), what="run manifest")
        except InputError as exc:
            return None, exc.message
        files = doc.get("files") if isinstance(doc, dict) else None
        if (not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT
                or doc.get("run_id") != entry.run_id or not isinstance(doc.get("attempt"), str)
                or not isinstance(files, list)
                or not all(isinstance(f, dict) and isinstance(f.get("name"), str)
                           and "/" not in f["name"] and f["name"] not in ("", ".", "..")
                           and isinstance(f.get("size"), int)
                           and isinstance(f.get("sha256"), str) for f in files)):
            return None, "the manifest is not an evalkit run manifest of this run"
        return doc, ""

    def publish_run(self, run_dir: Path) -> dict:
        """Upload the local run ``run_dir`` as a new attempt, then its manifest (last).

        The attempt of the manifest it replaces is removed once the new manifest is in
        place.  Returns the new manifest.
        """
        run_dir = Path(run_dir)
        run_id = run_dir.name
        previous = self._read_manifest(RunEntry(run_id))[0]
        attempt = (_dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
                   + "-" + secrets.token_hex(6))
        files = []
        for path in sorted(run_dir.iterdir()):
            if not path.is_file():
                raise InputError("a run holds a folder; runs are flat", file=str(path),
                                 fix="this is a bug in the run's writer")
            data = path.read_bytes()
            self.put_bytes(f"{run_id}/{ATTEMPT_PREFIX}{attempt}/{path.name}", data)
            files.append({"name": path.name, "size": len(data),
                          "sha256": hashlib.sha256(data).hexdigest()})
        manifest = {"format": MANIFEST_FORMAT, "version": 1, "run_id": run_id,
                    "attempt": attempt, "files": files}
        self.put_bytes(f"{run_id}/{MANIFEST}", dumps(manifest).encode())
        if previous and previous.get("attempt") != attempt:
            self.delete_prefix(f"{run_id}/{ATTEMPT_PREFIX}{previous['attempt']}")
        return manifest

    def fetch_run(self, run_id: str, dest: Path, manifest: dict) -> list[str]:
        """Download the files ``manifest`` names into ``dest``; a file missing or whose bytes
        differ from the manifest is left out (the validator then reports the run).  Returns
        what was left out."""
        dest = Path(dest)
        dest.mkdir(parents=True)
        left_out = []
        for item in manifest["files"]:
            rel = f"{run_id}/{ATTEMPT_PREFIX}{manifest['attempt']}/{item['name']}"
            data = self.get_bytes(rel)
            if data is None:
                left_out.append(f"{item['name']}: missing from the store")
            elif len(data) != item["size"] or hashlib.sha256(data).hexdigest() != item["sha256"]:
                left_out.append(f"{item['name']}: its bytes differ from the manifest")
            else:
                (dest / item["name"]).write_bytes(data)
        return left_out

    def move_aside(self, run_id: str, manifest: dict | None) -> str:
        """Hide a damaged run: its manifest becomes ``manifest.damaged-<time>-<hex>.json``
        (the attempt it names is kept, never deleted).  Returns the new name."""
        stamp = (_dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
                 + "-" + secrets.token_hex(3))
        name = f"{DAMAGED_PREFIX}{stamp}.json"
        raw = self.get_bytes(f"{run_id}/{MANIFEST}", MAX_MANIFEST_BYTES)
        if raw is not None:
            self.put_bytes(f"{run_id}/{name}", raw)
        self.delete(f"{run_id}/{MANIFEST}")
        return f"{self.where(run_id)}/{name}"

    def clean_leftovers(self, run_ids, entries: dict[str, RunEntry]) -> list[str]:
        """Remove uploads of ``run_ids`` that no manifest names (killed mid-upload), keeping
        the attempts a damaged manifest names.  Call with the store locked."""
        removed = 0
        for run_id in sorted(set(run_ids) & set(entries)):
            entry = entries[run_id]
            keep = set()
            for name in entry.damaged:
                raw = self.get_bytes(f"{run_id}/{name}", MAX_MANIFEST_BYTES)
                with contextlib.suppress(InputError, AttributeError):
                    keep.add(loads_json(raw or b"{}", what="run manifest").get("attempt"))
            for attempt in sorted(entry.leftover_attempts() - keep):
                self.delete_prefix(f"{run_id}/{ATTEMPT_PREFIX}{attempt}")
                removed += 1
            entry.attempts -= entry.leftover_attempts() - keep
        return ([f"removed {removed} unfinished upload(s) left by a killed worker or sweep"]
                if removed else [])

    def snapshot(self, dest: Path, run_ids=None,
                 entries: dict[str, RunEntry] | None = None) -> "StoreView":
        """Materialise the plan and every complete run (or only ``run_ids``) in ``dest``."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        listing = self.list()
        entries = self.entries(listing) if entries is None else entries
        if PLAN_KEY in listing:
            plan = self.get_bytes(PLAN_KEY)
            if plan is not None:
                (dest / PLAN_KEY).write_bytes(plan)
        wanted = [e for rid, e in sorted(entries.items())
                  if e.manifest is not None and (run_ids is None or rid in run_ids)]
        view = StoreView(self, dest, entries)
        for entry, left_out in zip(wanted, map_ordered(
                lambda e: self.fetch_run(e.run_id, dest / e.run_id, e.manifest), wanted)):
            if left_out:
                view.left_out[entry.run_id] = left_out
        self._fetch_kept_attempts(listing, {e.run_id for e in wanted}, dest)
        for rid, entry in sorted(entries.items()):
            if entry.problem and (run_ids is None or rid in run_ids):
                view.unusable[rid] = entry.problem
        return view

    def _fetch_kept_attempts(self, listing, run_ids: set, dest: Path) -> None:
        """The failed attempts' run.json a sweep kept for the re-runs among ``run_ids``
        (``.attempts/<run>.<n>.run.json``): the audit holds each re-run's record to them."""
        for key in sorted(listing):
            folder, _, name = key.partition("/")
            if folder != ATTEMPTS_DIR or kept_attempt_run(name) not in run_ids:
                continue
            raw = self.get_bytes(key)
            if raw is not None:
                (dest / ATTEMPTS_DIR).mkdir(exist_ok=True)
                (dest / ATTEMPTS_DIR / name).write_bytes(raw)


@dataclass
class StoreView:
    """A store's runs materialised in a local folder, and what could not be."""

    store: ObjectStore
    root: Path
    entries: dict[str, RunEntry]
    left_out: dict[str, list[str]] = field(default_factory=dict)  # run -> files left out
    unusable: dict[str, str] = field(default_factory=dict)        # run -> manifest problem

    def show(self, text) -> str:
        """``text`` with the local copy's folder written as the store's URL."""
        return str(text).replace(str(self.root), self.store.url)

    def notes(self) -> list[str]:
        out = [f"{self.store.where(rid)}: {'; '.join(items)}"
               for rid, items in sorted(self.left_out.items())]
        out += [f"{self.store.where(rid)}/{MANIFEST}: {why}; the run is not read"
                for rid, why in sorted(self.unusable.items())]
        return out


def open_store(url: str, fs=None) -> ObjectStore:
    """The object store ``url`` names (see :func:`is_store_url`)."""
    if not is_store_url(url):
        raise InputError("not an object-store URL", file=str(url), fix=URL_FIX)
    return ObjectStore(url, fs)


@contextlib.contextmanager
def local_view(target):
    """A local folder to read ``target`` from: the folder itself, or for a store URL a
    private temporary copy of its complete runs (removed afterwards).  Errors raised inside
    name the URL, not the copy."""
    if not is_store_url(target):
        yield local_path(target), None
        return
    store = open_store(target)
    tmp = tempfile.mkdtemp(prefix="evalkit-store-")
    try:
        view = store.snapshot(Path(tmp) / store.name)
        try:
            yield view.root, view
        except InputError as exc:
            exc.message = view.show(exc.message)
            exc.file = None if exc.file is None else view.show(exc.file)
            exc.fix = None if exc.fix is None else view.show(exc.fix)
            exc.args = (exc.format(),)
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
