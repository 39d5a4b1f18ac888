"""Corridor violations at their edges: gaps of exactly min_gap / max_gap / D, no merges,
windows past the run's end."""

from __future__ import annotations

from evalkit.runlog.design import corridor_violations


def test_corridor_violation_edges():
    span, d = (0.0, 300.0), 8.0
    ok = [64.0, 128.0, 192.0, 256.0]
    ends = [x + d for x in ok]
    assert corridor_violations(ok, ends, span, d, 64.0, 64.0) == []
    # first merge one ulp-ish early / late
    early = [63.99] + ok[1:]
    assert any("< min_gap" in v for v in corridor_violations(early, ends, span, d, 64, 70))
    assert corridor_violations(early, ends, span, d, 64, 70, tol=0.01) == []
    late = [70.01, 134.01, 198.01, 262.01]
    assert any("> max_gap" in v for v in corridor_violations(late, ends, span, d, 0, 70))
    # gaps: exactly D is allowed when min_gap < D; below D is not
    tight = [64.0, 72.0, 136.0, 200.0, 264.0]
    assert corridor_violations(tight, [x + d for x in tight], span, d, 4.0, 70.0) == []
    tighter = [64.0, 71.9, 136.0, 200.0, 264.0]
    out = corridor_violations(tighter, [x + d for x in tighter], span, d, 4.0, 70.0)
    assert len(out) == 1 and "< D" in out[0]
    # the trailing edge: last start 292 - 70 = 222 s before the last feasible start is forced
    trail_ok = [64.0, 128.0, 192.0, 222.01]
    assert corridor_violations(trail_ok, [x + d for x in trail_ok], span, d, 0, 70) == []
    trail_bad = [64.0, 128.0, 192.0, 222.0]
    out = corridor_violations(trail_bad, [x + d for x in trail_bad], span, d, 0, 70)
    assert len(out) == 1 and "forced merge" in out[0]


def test_corridor_no_merges_edge():
    # 292 s of training without a merge: forced at max_gap >= 292, allowed when max_gap > 292
    assert corridor_violations([], [], (0, 300), 8.0, 0, 292.0) != []
    assert corridor_violations([], [], (0, 300), 8.0, 0, 292.01) == []


def test_corridor_window_past_end():
    assert corridor_violations([200.0], [300.0], (0, 300), 8.0, 0, 300) == []
    out = corridor_violations([200.0], [300.5], (0, 300), 8.0, 0, 300)
    assert out == ["a merge window runs past the end of the run"]
    out = corridor_violations([292.5], [300.0], (0, 300), 8.0, 0, 300)
    assert out and "past the end" in out[-1]


def test_corridor_window_end_within_tolerance_of_the_run_end():
    kw = dict(train_start=0.0, tol=0.05)
    assert corridor_violations([200.0], [300.0], (0, 300), 8.0, 0, 300, **kw) == []
    assert corridor_violations([200.0], [300.04], (0, 300), 8.0, 0, 300, **kw) == []
    out = corridor_violations([200.0], [300.06], (0, 300), 8.0, 0, 300, **kw)
    assert out and "past the end" in out[-1]


def test_corridor_gap_within_tolerance_of_max_gap_is_allowed_from_both_sides():
    span, d, tol = (0.0, 300.0), 8.0, 0.5
    def gaps_of(g):
        s = [64.0 + i * g for i in range(4)]
        return corridor_violations(s, [x + d for x in s], span, d, 0.0, 70.0, tol=tol)
    assert gaps_of(69.8) == []                     # just below max_gap: never a violation
    assert gaps_of(70.4) == []                     # above it, but within the tolerance
    out = gaps_of(70.6)
    assert len(out) == 3 and all("> max_gap" in v for v in out)
