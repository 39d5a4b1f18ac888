"""``run_check``: when a not-evaluable check counts as vouched."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from evalkit.audit.checks import core as C
from evalkit.errors import NotEstimable

from tests.support.decision_stubs import ctx, spec


# ------------------------------------------------------------------------- run_check / vouch

def test_run_check_vouch_only_when_accepted_and_not_evaluable():
    C.CHECKS["_stub_ne"] = lambda c, s: C.not_evaluable("e", "f", "do x")
    C.CHECKS["_stub_fail"] = lambda c, s: C.Outcome(False, "e", "f")
    C.CHECKS["_stub_raise"] = lambda c, s: 1 / 0
    C.CHECKS["_stub_nest"] = lambda c, s: (_ for _ in ()).throw(NotEstimable("why", fix="fx"))
    try:
        vouch, block = spec(on_not_evaluable="vouch"), spec()
        no, yes = ctx(), ctx(protocol=SimpleNamespace(accept_vouched=True))
        c = C.run_check("_stub_ne", "t", no, vouch)
        assert c.blocking and not c.vouched and "--accept-vouched" in c.recommendation
        c = C.run_check("_stub_ne", "t", yes, vouch)
        assert not c.blocking and c.vouched and c.passed is None
        c = C.run_check("_stub_ne", "t", yes, block)          # vouching needs "vouch"
        assert c.blocking and not c.vouched
        c = C.run_check("_stub_fail", "t", yes, vouch)        # a failure is never vouched
        assert c.blocking and not c.vouched and c.passed is False
        with pytest.raises(ZeroDivisionError):                # a bug is never a failed check
            C.run_check("_stub_raise", "t", yes, vouch)
        c = C.run_check("_stub_nest", "t", no, block)
        assert c.passed is None and not c.evaluable and "why" in c.found
        assert c.recommendation == "fx"
    finally:
        for k in ("_stub_ne", "_stub_fail", "_stub_raise", "_stub_nest"):
            C.CHECKS.pop(k)
