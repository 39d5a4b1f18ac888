"""Run-log validation rule by rule, on in-memory tables and small run directories.

Every check of :mod:`evalkit.runlog.validate` is called with values at, just inside and just
outside its threshold, and the problems it reports are compared in full (column, message,
severity): a rule that stops firing, fires on a valid neighbour, names the wrong row or
counts wrongly fails here.  The design facts of :mod:`evalkit.runlog.design` are compared
with independent computations (hashlib, brute force).
"""

from __future__ import annotations

import threading
import time

from evalkit.fsutil import map_ordered


def test_map_ordered_cancels_queued_work_when_the_consumer_stops():
    started = []
    lock = threading.Lock()

    def work(item):
        with lock:
            started.append(item)
        if item:
            time.sleep(0.2)
        return item

    gen = map_ordered(work, range(6), threads=2, window=4)
    assert next(gen) == 0
    gen.close()
    # 1..3 were submitted; the two workers can only have started 1 and 2 (each sleeps),
    # so 3 was still queued and is cancelled; 4 and 5 were never submitted
    assert 0 in started and max(started) <= 2
