"""One unit in every sentence a person reads: the checks' own texts (expected, found, fix) and
the claim sentences give violation rates, their differences, eps_cal, tolerances and the
smallest effect of interest in percentage points, never as a bare share (``mean d = 0.02478``);
audit.json's numeric fields stay shares."""

from __future__ import annotations

from types import SimpleNamespace

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from evalkit.audit.checks import inference
from evalkit.audit.protocol import load_protocol
from evalkit.audit.sequential import verdict_for
from evalkit.cli.main import cli
from evalkit.report.render import render
from tests.audit.test_context import _c, _sf, _spec
from tests.audit.test_sequential_gate import DESIGN, _claim, _d, _from_d
from tests.conftest import REPO

RECORDED = sorted([*(REPO / "tests" / "golden").glob("*.audit.json"),
                   *(REPO / "tests" / "report_documents").glob("*.audit.json"),
                   *(REPO / "examples" / "cpu_real").glob("audit_*.json")])

# A rate-valued quantity as the texts name it, then the number quoted for it.
_RATE_NUMBER = re.compile(
    r"(?P<name>mean (?:gain )?d|drift-adjusted G|G - G_pred|G_pred|\bG|eps_cal|tolerance \+-|"
    r"within \+-|smallest effect of interest|upper bound|lies (?:above|below))"
    r"\s*(?:=|>=|<=)?\s*(?:\+-)?(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?)(?![\d.])"
    r"(?P<unit> pp\b)?")


def bare_shares(text: str) -> list[str]:
    """Every rate in TEXT printed without "pp" (0 is 0 in every unit: "CI lies below 0")."""
    return [m.group(0) for m in _RATE_NUMBER.finditer(text or "")
            if m.group("unit") is None and float(m.group("num")) != 0]


def sentences(doc: dict):
    """(where, text) for every check text and claim sentence of an audit document."""
    for i, claim in enumerate(doc.get("claims", [])):
        for key in ("verdict", "stop_reason"):
            if isinstance(claim.get(key), str):
                yield f"claims[{i}].{key}", claim[key]
        for check in claim.get("checks", []):
            for key in ("expected", "found", "recommendation"):
                if isinstance(check.get(key), str):
                    yield f"claims[{i}].{check.get('name')}.{key}", check[key]


def _offenders(doc: dict) -> list[str]:
    return [f"{where}: {hit!r}" for where, text in sentences(doc) for hit in bare_shares(text)]


OLD_WORDING = [
    "mean d = 0.06312 [0.02649, 0.09699], policy better in 6/7 seeds, p = 0.003658",
    "Holm-adjusted two-sided p <= 0.05 and mean d >= 0.005 (the smallest effect of interest)",
    "G = 0.06312, G_pred = 0.05678 [0.006821, 0.08902], G - G_pred = 0.006342 [-0.009295, "
    "0.0311] (90% CI; tolerance +-0.01578) over 7 seeds",
    "eps_cal = 0.02274 in-sample, 0.09906 leave-one-seed-out, 35 runs",
    "V on step rate (seed fixed effects): slope -0.513 (p = 0.844), G = 0.0631, "
    "drift-adjusted G = 0.0638",
    "the unexplained part G - G_pred is not shown to be within +-0.01578",
    "the gain exceeds what overlap predicts (G - G_pred's CI lies above +0.005)",
    "negligible: significant but G = 0.003 is below the smallest effect of interest 0.005",
    "mean gain d = -0.0125, 0.95 confidence sequence [-0.05, 0.02]",
    "the confidence sequence's upper bound 0.003 is below the smallest effect of interest 0.005",
]


@pytest.mark.parametrize("text", OLD_WORDING)
def test_the_scan_finds_a_rate_printed_as_a_share(text):
    assert bare_shares(text), text


def test_the_scan_passes_pp_and_numbers_that_are_not_rates():
    assert bare_shares(
        "mean d = +2.48 pp [+1.21, +2.96], policy better in 8/10 seeds, p = 6.294e-05; "
        "G = +6.31 pp, G_pred = +0.00 pp [+0.00, +0.00], G - G_pred = -0.56 pp (90% CI; "
        "tolerance +-1.58 pp); eps_cal = 2.27 pp in-sample; mean d >= 0.50 pp; within "
        "+-1.58 pp; CI lies below 0; inside +-0.25 x |G|; slope -0.513 (p = 0.844); drift "
        "explains none of G (adjusting for it raises G by 1%); KS D = 0.350") == []


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_documents_give_rates_in_pp(path):
    offenders = _offenders(json.loads(path.read_text()))
    assert not offenders, "\n".join(offenders[:10])


def test_recorded_documents_keep_shares_in_their_numbers():
    doc = json.loads((REPO / "tests" / "golden" / "transfer.audit.json").read_text())
    claim = doc["claims"][0]
    gain = next(c for c in claim["checks"] if c["name"] == "gain_significant")
    assert 0 < claim["mean_diff"] < 0.1 and all(0 < x < 0.2 for x in claim["ci"])
    lo, hi = claim["ci"]
    assert gain["found"].startswith(f"mean d = {100 * claim['mean_diff']:+.2f} pp "
                                    f"[{100 * lo:+.2f}, {100 * hi:+.2f}]")


def test_sequential_lines_and_the_not_better_stop_give_rates_in_pp():
    pol, dr = _from_d(_d(12, 0.0, seed=4))
    proto = load_protocol()
    v = verdict_for(_claim(pol, dr), proto, "matched_budget", {**DESIGN, "max_seeds": 12},
                    list(range(12)), 1, 0.05)
    assert v.decision == "stop: not better"
    text = " ".join([v.reason, *v.lines()])
    assert "smallest effect of interest 5.00 pp" in text
    assert "mean gain d = " in text and not bare_shares(text), text
    assert all(np.isfinite(v.ci))


def test_a_negligible_gain_is_quoted_in_pp():
    c = _c(effective_n=6, sign_flip=_sf(statistic=0.003), p_adjusted=0.01,
           test_name="sign-flip test", seeds_needed=6, d=np.array([0.01, 0.0, 0.0, 0, 0, 0.008]),
           paired=SimpleNamespace(reference="t, 5 df; no floor"))
    out = inference.gain_significant(c, _spec(min_effect=0.005))
    assert out.status.value == "negligible"
    assert out.found.startswith("negligible: significant but G = +0.30 pp is below the smallest "
                                "effect of interest 0.50 pp (protocol min_effect); mean d = "
                                "+0.30 pp [+3.12, +12.50]")
    assert not bare_shares(out.found + out.expected)


def test_the_report_no_longer_says_check_texts_quote_shares():
    files = render(json.loads((REPO / "tests" / "report_documents" /
                                "sim_underpowered.audit.json").read_text()))
    for name in ("report.md", "report.html"):
        text = files[name].decode()
        assert "in check texts are shares" not in text and "0.01 = 1 pp" not in text, name
        assert "mean d = +7.71 pp" in text, name


def test_a_fresh_audit_gives_rates_in_pp(tmp_path):
    res = CliRunner().invoke(cli, ["audit", str(REPO / "fixtures" / "campaigns" /
                                                "sim_underpowered"), "--out", str(tmp_path)])
    assert res.exit_code in (0, 1), res.output
    doc = json.loads((tmp_path / "audit.json").read_text())
    assert not _offenders(doc), _offenders(doc)[:10]
    assert any(" pp" in text for _, text in sentences(doc))
