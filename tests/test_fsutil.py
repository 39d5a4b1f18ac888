"""``map_ordered``: every result in order, and queued work cancelled when the consumer
stops."""

from __future__ import annotations

import threading
import time

import pytest

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


@pytest.mark.parametrize("threads, window", [(1, None), (2, 1), (3, 4), (4, None)])
def test_map_ordered_yields_every_result_in_order(threads, window):
    from evalkit.fsutil import map_ordered

    out = list(map_ordered(lambda x: x * x, range(11), threads=threads, window=window))
    assert out == [x * x for x in range(11)]
    assert list(map_ordered(lambda x: x, [], threads=threads)) == []
