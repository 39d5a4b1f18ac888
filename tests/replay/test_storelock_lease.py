"""The lock of a run store in an object store (evalkit/replay/storelock.py, LeaseLock): a
lease renewed while the sweep runs, refused to a second sweep while it is fresh, taken over
once its driver stopped renewing it; ages by the store's clock.  Against moto's S3 server."""

from __future__ import annotations

import time

import pytest

from evalkit.errors import StoreLocked
from evalkit.replay import storelock
from evalkit.replay.campaign import Shard
from evalkit.replay.storelock import LeaseLock, break_leases, lease_holders, lease_key
from evalkit.runlog.store_url import open_store
from tests.support.protocols import BUNDLED
from tests.support.s3_server import new_bucket, s3_server


@pytest.fixture(scope="module")
def s3():
    with s3_server() as env:
        yield env


@pytest.fixture
def store(s3):
    return open_store(f"s3://{new_bucket()}/runs")


def _dead_driver(store, lease_s: float) -> LeaseLock:
    """A lease whose driver died: taken, then never renewed nor released."""
    lock = LeaseLock(store, lease_s=lease_s, renew_s=3600, settle_s=0.05).acquire()
    lock._stop.set()
    return lock


def test_a_fresh_lease_refuses_a_second_sweep(store):
    with LeaseLock(store, lease_s=60, settle_s=0.05):
        with pytest.raises(StoreLocked) as err:
            LeaseLock(store, settle_s=0.05).acquire()
    text = err.value.format()
    assert err.value.file == store.url and "lease renewed" in text
    assert "expires within" in err.value.fix and "--break-lock" in err.value.fix
    assert store.list() == {}                              # released: the object is gone


def test_an_expired_lease_is_taken_over(store):
    _dead_driver(store, lease_s=1)
    time.sleep(2.2)                                         # S3 times have 1 s resolution
    with LeaseLock(store, settle_s=0.05) as lock:
        assert len(lock.notes) == 1 and "the lease expired" in lock.notes[0]
        assert [lease.token for lease in lease_holders(store)] == [lock.token]


def test_renewal_keeps_a_lease_alive(store):
    with LeaseLock(store, lease_s=2, renew_s=0.3, settle_s=0.05):
        time.sleep(3.2)                                     # longer than the lease
        with pytest.raises(StoreLocked):
            LeaseLock(store, settle_s=0.05).acquire()


def test_two_sweeps_at_the_same_moment_one_refuses(store, monkeypatch):
    """Both write their lease; the one whose token is not there after the wait refuses."""
    other = LeaseLock(store, settle_s=0.05)
    real_sleep = time.sleep

    def other_writes_meanwhile(seconds):
        store.put_bytes(other.key, other._record())
        real_sleep(seconds)

    monkeypatch.setattr(storelock.time, "sleep", other_writes_meanwhile)
    with pytest.raises(StoreLocked, match="at the same moment"):
        LeaseLock(store, settle_s=0.05).acquire()


def test_shards_of_one_split_share_a_store_the_whole_campaign_does_not(store):
    with LeaseLock(store, Shard(0, 2), settle_s=0.05), LeaseLock(store, Shard(1, 2),
                                                                   settle_s=0.05):
        with pytest.raises(StoreLocked):
            LeaseLock(store, settle_s=0.05).acquire()


def test_break_lock_removes_the_lease(store):
    _dead_driver(store, lease_s=600)
    notes = break_leases(store)
    assert len(notes) == 1 and lease_key("all") in notes[0]
    assert store.list() == {}
    LeaseLock(store, settle_s=0.05).acquire().release()


def test_a_lease_taken_over_is_noticed_and_stops_the_sweep(store, tmp_path):
    """A driver stalled past its lease: the next renewal finds another sweep's lease, and
    the sweep starts no further run (exit 2)."""
    from evalkit.replay.sweep import run_campaign
    from tests.support.reliability_tools import write_campaign

    lock = LeaseLock(store, renew_s=0.2, settle_s=0.05).acquire()
    store.put_bytes(lock.key, LeaseLock(store)._record())       # another sweep's lease
    assert lock.lost.wait(5)
    lock.release()
    assert store.list()                                          # its lease is left alone

    camp = write_campaign(tmp_path, draws=1)
    lost = LeaseLock(store)                   # the sweep's lock, already lost when it runs
    lost.lost.set()
    lost.acquire = lambda: lost
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("evalkit.replay.sweep.LeaseLock", lambda *a, **k: lost)
        with pytest.raises(StoreLocked, match="lost its lease") as err:
            run_campaign(camp, store.url, progress=False, protocol=BUNDLED)
    assert err.value.file == store.url
    assert [k for k in store.list() if "/.attempt-" in k] == []  # no run was started
