"""An advisory lock on a runs directory, so two sweeps never work on the same runs.

``evalkit sweep`` holds a lock file in ``--out`` for as long as it runs:
``.evalkit-sweep.all.lock`` for a whole campaign, ``.evalkit-sweep.shard-I-of-N.lock`` for
one shard (shards of the same split run side by side -- their runs are disjoint -- while a
whole-campaign sweep excludes every other sweep).  The file holds who owns it (pid, host,
start time, command) so the second sweep can say who is in the way.

The lock itself is ``flock`` on that file: the kernel drops it when the holder dies, so a
lock file left by a killed sweep of this host is recognised as stale (its pid is gone) and
taken over.  Processes forked by the holder (pool workers) do not keep it: the descriptor is
closed in every forked child, so the lock always names the process that really holds it.

A lock file written by another host is never taken over on a guess: ``flock`` may not reach
across machines and the two clocks may disagree, so neither its pid nor its age proves the
holder is gone.  The holder refreshes the file's mtime every :data:`HEARTBEAT_S` seconds;
a second sweep refuses (exit 2) and says whether the lock is fresh (refreshed within
:data:`STALE_AFTER_S`), old, or dated in the future (clock skew).  The operator who knows
the other sweep is gone breaks it with ``evalkit sweep --break-lock`` (:func:`break_locks`),
which still refuses while the kernel reports the lock held or a pid of this host is alive.
A short-lived ``flock`` on the runs directory itself serialises taking and dropping the
per-scope locks.

A run store in an object store has no ``flock``: its lock is a lease (:class:`LeaseLock`),
an object of the same name renewed while the sweep runs and taken over once it expired.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import re
import secrets
import socket
import stat as _stat
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from evalkit.errors import InputError, StoreLocked
from evalkit.fileread import not_regular, read_bounded
from evalkit.jsonio import loads_json
from evalkit.pids import pid_alive
from evalkit.runlog.store_url import redact

try:
    import fcntl
except ImportError:                  # not POSIX: heartbeat and pid checks only
    fcntl = None

SCOPE_RE = re.compile(r"^\.evalkit-sweep\.(all|shard-(\d+)-of-(\d+))\.lock$")
HEARTBEAT_S = 20.0
STALE_AFTER_S = 120.0
CLOCK_SKEW_S = 5.0                   # an mtime this far ahead of our clock: clocks disagree
MAX_LOCK_FILE_BYTES = 64 << 10
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)

# descriptors of the locks this process holds: closed in every forked child, so a pool
# worker that outlives a killed sweep cannot keep the lock (flock belongs to the open file,
# which a fork shares); closing one copy in the child leaves the parent's lock in place
_HELD_FDS: set[int] = set()


def _close_held_in_child() -> None:
    for fd in list(_HELD_FDS):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD_FDS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_held_in_child)


def scope_name(shard=None) -> str:
    return "all" if shard is None else f"shard-{shard.index}-of-{shard.count}"


def lock_path(runs_dir: Path, scope: str) -> Path:
    return Path(runs_dir) / f".evalkit-sweep.{scope}.lock"


def _parse_scope(scope: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"shard-(\d+)-of-(\d+)", scope)
    return (int(m.group(1)), int(m.group(2))) if m else None


def scopes_conflict(a: str, b: str) -> bool:
    """Two sweeps may share a store only as different shards of the same split."""
    sa, sb = _parse_scope(a), _parse_scope(b)
    if sa is None or sb is None:
        return True
    return sa[1] != sb[1] or sa[0] == sb[0]


@dataclass
class Holder:
    path: Path
    pid: int | None = None
    host: str | None = None
    started_at: str | None = None
    command: str | None = None
    scope: str | None = None
    age_s: float | None = None

    @property
    def remote(self) -> bool:
        return self.host not in (None, socket.gethostname())

    @property
    def alive_here(self) -> bool:
        """The file names a process of this host, other than this one, that still runs."""
        return not self.remote and self.pid != os.getpid() and pid_alive(self.pid)

    def freshness(self) -> str:
        """How recently the holder refreshed the file, by this host's clock."""
        if self.age_s is None:
            return ""
        if self.age_s < -CLOCK_SKEW_S:
            return (f"dated {-self.age_s:,.0f} s in the future: the clocks of the two hosts "
                    "disagree, so its age says nothing")
        if self.age_s < STALE_AFTER_S:
            return f"refreshed {max(0.0, self.age_s):,.0f} s ago"
        return f"not refreshed for {self.age_s:,.0f} s"

    def describe(self) -> str:
        who = f"pid {self.pid}" if self.pid is not None else "an unknown process"
        host = f" on host {self.host}" if self.host else ""
        what = ""
        if self.scope:
            shard = _parse_scope(self.scope)
            what = f", shard {shard[0]}/{shard[1]}" if shard else ", whole campaign"
        since = f", started {self.started_at}" if self.started_at else ""
        fresh = f"; lock {self.freshness()}" if self.remote and self.freshness() else ""
        return f"{who}{host}{what}{since}{fresh}"


def read_holder(path: Path) -> Holder:
    holder = Holder(path=path)
    try:
        st = path.stat()
        holder.age_s = time.time() - st.st_mtime     # negative: dated in the future
        data = loads_json(read_bounded(path, MAX_LOCK_FILE_BYTES, "lock file") or b"{}",
                          file=path, what="lock file")
    except (OSError, ValueError, InputError):       # InputError: a FIFO, a device, huge
        return holder
    if isinstance(data, dict):
        holder.pid = data.get("pid") if isinstance(data.get("pid"), int) else None
        for key in ("host", "started_at", "command", "scope"):
            if isinstance(data.get(key), str):
                setattr(holder, key, data[key])
    return holder


def _content_says_held(holder: Holder) -> bool:
    """Without a kernel lock to ask: is the process named in the file still there?

    Of another host nobody can tell from here: its lock counts as held until an operator
    breaks it (:func:`break_locks`); see the module docstring.
    """
    return holder.remote or holder.alive_here


def _try_flock(fd: int, shared: bool = False) -> bool | None:
    """True: locked; False: someone else holds it; None: flock does not work here."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        return None                  # ENOLCK, EOPNOTSUPP, ENOSYS ...


class _Master:
    """The short critical section around taking or dropping a scope lock: ``flock`` on the
    runs directory itself (no file left behind); skipped where directories cannot be locked."""

    def __init__(self, runs_dir: Path):
        self.path = Path(runs_dir)
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        if fcntl is not None:
            with contextlib.suppress(OSError):  # no flock here: the scope files alone decide
                fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)            # closing drops the flock


def held_by(path: Path) -> Holder | None:
    """Who holds the lock file ``path`` now (None: nobody, or a stale file)."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_NONBLOCK)      # a FIFO must not block
    except OSError:
        return None
    try:
        got = _try_flock(fd, shared=True)
        holder = read_holder(path)
        if got is False:
            return holder
        if got is True and not holder.remote:
            return None              # the kernel says nobody holds it
        return holder if _content_says_held(holder) else None
    finally:
        os.close(fd)


def current_holders(runs_dir) -> list[Holder]:
    """Every sweep holding a lock on ``runs_dir`` now (for ``sweep --check``)."""
    out = []
    try:
        names = sorted(os.listdir(runs_dir))
    except OSError:
        return out
    for name in names:
        if SCOPE_RE.match(name):
            holder = held_by(Path(runs_dir) / name)
            if holder is not None:
                out.append(holder)
    return out


@dataclass
class StoreLock:
    """``with StoreLock(runs_dir, shard):`` -- raises :class:`StoreLocked` when in use."""

    runs_dir: Path
    shard: object = None
    notes: list[str] = field(default_factory=list)
    _fd: int | None = None
    _stop: threading.Event | None = None
    _beat: threading.Thread | None = None

    @property
    def scope(self) -> str:
        return scope_name(self.shard)

    @property
    def path(self) -> Path:
        return lock_path(self.runs_dir, self.scope)

    def _refuse(self, holder: Holder) -> StoreLocked:
        if holder.remote:
            return StoreLocked(
                f"runs directory is locked by a sweep of another host ({holder.describe()}); "
                "a lock on shared storage is never taken over on a guess",
                file=str(self.runs_dir),
                fix=f"wait for it to finish; if no sweep is running on host {holder.host}, "
                    f"rerun with --break-lock (it removes {holder.path})")
        return StoreLocked(
            f"runs directory is in use by another sweep ({holder.describe()})",
            file=str(self.runs_dir),
            fix=f"wait for it to finish; if it is not running, delete {holder.path}")

    def acquire(self) -> "StoreLock":
        self.runs_dir = Path(self.runs_dir)
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        with _Master(self.runs_dir):
            for name in sorted(os.listdir(self.runs_dir)):
                m = SCOPE_RE.match(name)
                if not m or name == self.path.name or not scopes_conflict(self.scope, m.group(1)):
                    continue
                holder = held_by(self.runs_dir / name)
                if holder is not None:
                    raise self._refuse(holder)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | _O_NONBLOCK, 0o666)
            try:
                if not _stat.S_ISREG(os.fstat(fd).st_mode):
                    raise not_regular(self.path, os.fstat(fd).st_mode, "the lock file")
                got = _try_flock(fd)
                previous = read_holder(self.path)
                if got is False:
                    raise self._refuse(previous)
                if got is None or previous.remote:
                    if _content_says_held(previous):
                        raise self._refuse(previous)
                if previous.pid is not None and previous.pid != os.getpid():
                    self.notes.append(f"took over a stale lock left by {previous.describe()} "
                                      "(no longer running)")
                self._write_info(fd)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
            _HELD_FDS.add(fd)
        self._start_heartbeat()
        return self

    def _write_info(self, fd: int) -> None:
        info = {"pid": os.getpid(), "host": socket.gethostname(), "scope": self.scope,
                "started_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
                .isoformat(),
                "command": " ".join(sys.argv)[:500]}
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, (json.dumps(info) + "\n").encode())
        os.fsync(fd)

    def _start_heartbeat(self) -> None:
        self._stop = threading.Event()
        path, stop = self.path, self._stop

        def beat():
            while not stop.wait(HEARTBEAT_S):
                with contextlib.suppress(OSError):
                    os.utime(path)

        self._beat = threading.Thread(target=beat, name="evalkit-lock-heartbeat", daemon=True)
        self._beat.start()

    def release(self) -> None:
        if self._fd is None:
            return
        if self._stop is not None:
            self._stop.set()
        fd, self._fd = self._fd, None
        if fd not in _HELD_FDS:      # a forked child: the fd was closed at fork
            return
        _HELD_FDS.discard(fd)
        try:
            with _Master(self.runs_dir):     # nobody may open the file between unlink and close
                if read_holder(self.path).pid == os.getpid():
                    self.path.unlink(missing_ok=True)
                os.close(fd)
                fd = None
        except OSError:
            pass
        finally:
            if fd is not None:
                os.close(fd)

    def __enter__(self) -> "StoreLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def break_locks(runs_dir, shard=None) -> list[str]:
    """Remove the lock files that would stop a sweep of ``shard`` (``sweep --break-lock``).

    For the operator who knows their holders are gone (a crashed sweep of another host).
    Refuses -- :class:`StoreLocked`, nothing removed -- while the kernel reports a lock held,
    or (without ``flock``) while its pid of this host is alive.  Returns one note per lock.
    """
    runs_dir = Path(runs_dir)
    scope = scope_name(shard)
    notes: list[str] = []
    if not runs_dir.is_dir():
        return notes
    with _Master(runs_dir):
        for name in sorted(os.listdir(runs_dir)):
            m = SCOPE_RE.match(name)
            if not m or (m.group(1) != scope and not scopes_conflict(scope, m.group(1))):
                continue
            path = runs_dir / name
            try:
                fd = os.open(path, os.O_RDONLY | _O_NONBLOCK)
            except OSError:
                continue
            try:
                got = _try_flock(fd)
                holder = read_holder(path)
                if got is False or (got is None and holder.alive_here):
                    raise StoreLocked(
                        f"cannot break the lock: {holder.describe()} still holds it",
                        file=str(path), fix="stop that sweep first; --break-lock is only for "
                                            "locks whose holder is gone")
                path.unlink()
                notes.append(f"broke the lock {name} of {holder.describe()} (--break-lock)")
            finally:
                os.close(fd)
    return notes


# ----------------------------------------------------------------------------- object stores

LEASE_S = STALE_AFTER_S              # a lease not renewed for this long has expired
SETTLE_S = 1.0                       # wait after writing a lease before reading it back


def lease_key(scope: str) -> str:
    return f".evalkit-sweep.{scope}.lock"


@dataclass
class Lease:
    """A lock object in an object store: who wrote it and how long ago, by the store's
    clock (its last-modified time against an object written just now)."""

    key: str
    token: str | None = None
    holder: Holder | None = None
    lease_s: float = LEASE_S
    age_s: float = 0.0

    @property
    def expired(self) -> bool:
        return self.age_s > self.lease_s

    def describe(self) -> str:
        return (f"{self.holder.describe() if self.holder else 'an unknown sweep'}; lease "
                f"renewed {max(0.0, self.age_s):,.0f} s ago, expires after {self.lease_s:,.0f} s")


def _read_lease(store, key: str, now) -> Lease | None:
    raw = store.get_bytes(key, MAX_LOCK_FILE_BYTES)
    mtime = store.mtime(key)
    if raw is None or mtime is None:
        return None
    lease = Lease(key, age_s=(now - mtime).total_seconds())
    try:
        data = loads_json(raw or b"{}", file=store.where(key), what="lock object")
    except InputError:
        data = None
    if isinstance(data, dict):
        lease.token = data.get("token") if isinstance(data.get("token"), str) else None
        if isinstance(data.get("lease_s"), (int, float)) and data["lease_s"] > 0:
            lease.lease_s = float(data["lease_s"])
        holder = Holder(path=Path(key))
        holder.pid = data.get("pid") if isinstance(data.get("pid"), int) else None
        for name in ("host", "started_at", "command", "scope"):
            if isinstance(data.get(name), str):
                setattr(holder, name, data[name])
        lease.holder = holder
    return lease


def _conflicting_leases(store, scope: str, *, skip_key: str | None = None) -> list[Lease]:
    now = store.server_now()
    out = []
    for key in sorted(store.list()):
        m = SCOPE_RE.match(key)
        if not m or key == skip_key or not scopes_conflict(scope, m.group(1)):
            continue
        lease = _read_lease(store, key, now)
        if lease is not None:
            out.append(lease)
    return out


@dataclass
class LeaseLock:
    """``with LeaseLock(store, shard):`` -- the lock of a run store in an object store.

    Object stores have no ``flock`` and no atomic create-if-absent in pyarrow, so the lock is
    a lease: an object renewed every ``renew_s`` seconds while the sweep runs.  A lease not
    renewed for ``lease_s`` seconds (a driver killed, or cut off) has expired and the next
    sweep takes it over (noted); ages are measured by the store's own clock, so clocks of the
    hosts may disagree.  Two sweeps starting within ``SETTLE_S`` of each other: both write,
    wait, read back, and the one whose token is not there refuses.  Raises
    :class:`StoreLocked` (exit 2) naming the holder and when its lease expires.
    """

    store: object
    shard: object = None
    lease_s: float = LEASE_S
    renew_s: float = HEARTBEAT_S
    settle_s: float | None = None           # None: SETTLE_S, read when the lock is taken
    notes: list[str] = field(default_factory=list)
    token: str | None = None
    lost: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event | None = None
    _beat: threading.Thread | None = None

    @property
    def scope(self) -> str:
        return scope_name(self.shard)

    @property
    def key(self) -> str:
        return lease_key(self.scope)

    def _refuse(self, lease: Lease, why: str = "") -> StoreLocked:
        left = max(0.0, lease.lease_s - lease.age_s)
        return StoreLocked(
            f"run store is locked by another sweep ({lease.describe()}){why}",
            file=self.store.url,
            fix=f"wait for it to finish; if its driver is gone the lease expires within "
                f"{left:,.0f} s and the next sweep takes it over, or rerun with --break-lock "
                f"(it removes {self.store.where(lease.key)})")

    def _record(self) -> bytes:
        self.token = self.token or secrets.token_hex(8)
        info = {"token": self.token, "pid": os.getpid(), "host": socket.gethostname(),
                "scope": self.scope, "lease_s": self.lease_s,
                "started_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
                .isoformat(),
                "command": redact(" ".join(sys.argv))[:500]}
        return (json.dumps(info) + "\n").encode()

    def acquire(self) -> "LeaseLock":
        for lease in _conflicting_leases(self.store, self.scope):
            if not lease.expired:
                raise self._refuse(lease)
            self.notes.append(f"took over the lock of {lease.describe()}: the lease expired "
                              f"{lease.age_s - lease.lease_s:,.0f} s ago (its driver stopped "
                              "renewing it)")
        record = self._record()
        self.store.put_bytes(self.key, record)
        time.sleep(SETTLE_S if self.settle_s is None else self.settle_s)
        now = self.store.server_now()
        mine = _read_lease(self.store, self.key, now)
        if mine is None or mine.token != self.token:
            raise self._refuse(mine or Lease(self.key), "; it took the lock at the same "
                                                        "moment")
        for lease in _conflicting_leases(self.store, self.scope, skip_key=self.key):
            if not lease.expired:              # a conflicting scope written meanwhile
                self.store.delete(self.key)
                raise self._refuse(lease)
        self._start_renewal(record)
        return self

    def _start_renewal(self, record: bytes) -> None:
        self._stop = threading.Event()
        stop = self._stop

        def renew():
            while not stop.wait(self.renew_s):
                try:
                    raw = self.store.get_bytes(self.key, MAX_LOCK_FILE_BYTES)
                    if raw != record:            # taken over after our lease expired
                        self.lost.set()
                        return
                    self.store.put_bytes(self.key, record)
                except InputError:               # the store unreachable for a while: retry
                    continue

        self._beat = threading.Thread(target=renew, name="evalkit-lease-renewal", daemon=True)
        self._beat.start()

    def release(self) -> None:
        if self._stop is not None:
            self._stop.set()
            self._beat.join(timeout=max(5.0, self.renew_s))
            self._stop = None
        if self.token is None:
            return
        with contextlib.suppress(InputError):
            now = self.store.server_now()
            lease = _read_lease(self.store, self.key, now)
            if lease is not None and lease.token == self.token:
                self.store.delete(self.key)
        self.token = None

    def __enter__(self) -> "LeaseLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def lease_holders(store) -> list[Lease]:
    """Every unexpired lease on ``store`` (for ``sweep --check``)."""
    return [lease for lease in _conflicting_leases(store, "all") if not lease.expired]


def break_leases(store, shard=None) -> list[str]:
    """Remove the lock objects that would stop a sweep of ``shard`` (``--break-lock``)."""
    notes = []
    for lease in _conflicting_leases(store, scope_name(shard)):
        store.delete(lease.key)
        notes.append(f"broke the lock {lease.key} of {lease.describe()} (--break-lock)")
    return notes
