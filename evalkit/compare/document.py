"""``compare.json``: the comparison of A and B as one document, and the exit code derived
from it.

:func:`compare_sides` loads both sides, pairs them, computes every claimed metric per run,
tests each metric (:mod:`evalkit.compare.verdict`, Holm over the metrics) and applies the
regression gate: a claim fails the pipeline only when B is significantly worse *and* the
whole CI of the difference lies beyond the allowed regression.  With a plan
(:mod:`evalkit.compare.plan`) each look tests at ``alpha / looks``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from evalkit.compare import verdict as vd
from evalkit.compare.metrics import METRICS, metric, metric_value
from evalkit.compare.pairing import Pairing, pair_units
from evalkit.compare.plan import SequentialPlan
from evalkit.compare.protocol import Amount, Claim, CompareProtocol
from evalkit.compare.sources import Unit, load_side
from evalkit.errors import EXIT_CONTINUE, EXIT_NOT_REACHED, EXIT_OK, InputError
from evalkit.stats.bootstrap import holm
from evalkit.version import __version__

__all__ = ["SCHEMA", "CompareOptions", "compare_sides", "compare_units", "exit_code_of",
           "finish_rows", "metric_row"]

SCHEMA = "evalkit-compare/1"


@dataclass
class CompareOptions:
    metrics: list[str] = field(default_factory=list)    # [] -> the protocol's claims
    margin: Amount | None = None                         # overrides every claim's margin
    max_regression: Amount | None = None                 # overrides every claim's
    alpha: float | None = None                           # overrides the protocol's
    slo: dict | None = None                              # overrides runs' and protocol's
    pair_by: str = "auto"
    benchmark: str | None = None
    tool_version: str | None = None                      # inference-perf's version
    plan: SequentialPlan | None = None


def _claims(protocol: CompareProtocol, options: CompareOptions) -> tuple[list[Claim], bool]:
    """The claims to test and whether the user named them (then none is skipped)."""
    if not options.metrics:
        return list(protocol.claims), False
    out = []
    for name in options.metrics:
        spec = metric(name)
        claim = protocol.claim(name) or Claim(name, spec.better, None, None)
        if claim in out:
            raise InputError(f"metric {name} is named twice", column="--metric",
                             fix="name each metric once")
        out.append(claim)
    return out, True


def _slo(units: list[Unit], protocol: CompareProtocol, options: CompareOptions):
    """(slo, source): the SLO every run is judged by, and where it came from."""
    if options.slo is not None:
        return options.slo, "--slo options"
    if protocol.slo is not None:
        return protocol.slo, f"protocol {protocol.name}"
    own = {}
    for u in units:
        if u.slo is not None:
            own.setdefault(tuple(sorted(u.slo.items())), u)
    if len(own) > 1:
        (_, first), (_, second) = list(own.items())[:2]
        raise InputError(f"the runs were recorded with different SLOs ({first.label}: "
                         f"{first.slo}; {second.label}: {second.slo})", file=second.path,
                         column="slo", fix="judge both sides by one SLO: --slo-e2e S "
                                           "(and --slo-ttft / --slo-tpot)")
    if own and all(u.slo is not None for u in units):
        return next(iter(own.values())).slo, "the runs' run.json"
    return None, "none"


def _values(units: list[Unit], name: str, slo) -> np.ndarray:
    return np.array([metric_value(name, u.requests, slo, where=u.path) for u in units])


def _gate(claim: Claim, options: CompareOptions) -> Amount | None:
    return options.max_regression if options.max_regression is not None else \
        claim.max_regression


def _b_minus_a(x: float, better: str) -> float:
    return x if better == "higher" else -x


def _metric_row(claim: Claim, pairing: Pairing, slo, options, alpha_eff: float) -> dict:
    if pairing.paired:
        a = _values([p[0] for p in pairing.pairs], claim.metric, slo)
        b = _values([p[1] for p in pairing.pairs], claim.metric, slo)
    else:
        a = _values(pairing.a, claim.metric, slo)
        b = _values(pairing.b, claim.metric, slo)
    margin = options.margin if options.margin is not None else claim.margin
    return metric_row(claim.metric, a, b, paired=pairing.paired, alpha=alpha_eff,
                      margin=margin, max_regression=_gate(claim, options))


def metric_row(name: str, a: np.ndarray, b: np.ndarray, *, paired: bool, alpha: float,
               margin: Amount | None, max_regression: Amount | None, ci: bool = True) -> dict:
    """One metric's row before the adjustment over metrics: the values of A and B (paired:
    in pair order), the tests at ``alpha`` (``ci=False``: no interval, for simulation)."""
    spec = METRICS[name]
    margin_amount, gate = margin, max_regression
    mean_a = float(a.mean())
    margin = None if margin_amount is None else margin_amount.absolute(mean_a)
    if paired:
        d = (b - a) if spec.better == "higher" else (a - b)
        test = vd.analyse_paired(d, alpha=alpha, margin=margin, ci=ci)
    else:
        test = vd.analyse_unpaired(a, b, better=spec.better, alpha=alpha, margin=margin)
    lo, hi = test.ci
    diff_ci = sorted((_b_minus_a(lo, spec.better), _b_minus_a(hi, spec.better)))
    return {
        "metric": name, "unit": spec.unit, "better": spec.better,
        "meaning": spec.meaning, "paired": test.paired, "n": test.n,
        "mean_a": mean_a, "mean_b": float(b.mean()),
        "difference": float(b.mean() - a.mean()),
        "difference_ci": diff_ci, "improvement": test.mean, "improvement_ci": [lo, hi],
        "confidence": 1.0 - alpha, "sd": test.sd,
        "margin": margin, "margin_given": None if margin_amount is None else margin_amount.text(),
        "max_regression": None if gate is None else gate.absolute(mean_a),
        "max_regression_given": None if gate is None else gate.text(),
        "p_two_sided": test.p_two_sided, "p_equivalence": test.p_equivalence,
        "method": test.method, "exact": test.exact,
        "values_a": a.tolist(), "values_b": b.tolist(),
    }


def finish_rows(rows: list[dict], alpha_eff: float, power: float, *,
                more_pairs: bool = True) -> None:
    """Holm over the metrics, the verdicts, the pairs that would decide (``more_pairs``),
    the gate."""
    if not rows:
        return
    _, p_sup = holm([r["p_two_sided"] for r in rows], alpha_eff)
    eq_raw = [r["p_equivalence"] for r in rows]
    p_eq = np.full(len(rows), np.nan)
    has = [i for i, p in enumerate(eq_raw) if not math.isnan(p)]
    if has:
        p_eq[has] = holm([eq_raw[i] for i in has], alpha_eff)[1]
    k = len(rows)
    for r, ps, pe in zip(rows, p_sup, p_eq):
        r["p_two_sided_holm"] = float(ps)
        r["p_equivalence_holm"] = None if math.isnan(pe) else float(pe)
        r["verdict"] = vd.decide(float(ps), 1.0 if math.isnan(pe) else float(pe),
                                 r["improvement"], alpha_eff)
        r["pairs_to_decide"] = None
        r["more_pairs"] = None
        if r["verdict"] == vd.NOT_YET_KNOWN and more_pairs:
            # Holm's first step is alpha / k: the threshold a metric must pass on its own
            total = vd.pairs_to_decide(r["improvement"], r["sd"], alpha=alpha_eff / k,
                                       power=power, margin=r["margin"])
            r["pairs_to_decide"] = total
            r["more_pairs"] = None if total is None else max(1, total - r["n"])
        limit = r["max_regression"]
        r["gate_fails"] = bool(limit is not None and r["verdict"] == vd.WORSE
                               and r["improvement_ci"][1] < -limit)


def _sentence(r: dict) -> str:
    unpaired = "" if r["paired"] else " (unpaired)"
    if r["verdict"] == vd.EQUIVALENT:
        return f"equivalent within ±{r['margin']:.4g}{unpaired}"
    if r["verdict"] == vd.NOT_YET_KNOWN:
        more = r["more_pairs"]
        unit = (("paired run" if r["paired"] else "run per side") if more == 1 else
                ("paired runs" if r["paired"] else "runs per side"))
        if more is None:
            return (f"not yet known{unpaired}: no decision is in reach at the observed spread "
                    "(mean difference 0 and no margin)")
        if more > vd.MAX_PAIRS:
            return f"not yet known{unpaired}: more than {vd.MAX_PAIRS:,} more {unit} would decide"
        return (f"not yet known{unpaired} — {more} more {unit} would decide at the observed "
                "spread")
    return r["verdict"] + unpaired


def _gate_summary(rows: list[dict], plan: SequentialPlan | None, n: int) -> dict:
    failed = [r["metric"] for r in rows if r["gate_fails"]]
    undecided = [r["metric"] for r in rows if r["verdict"] == vd.NOT_YET_KNOWN]
    if failed:
        return {"exit_code": EXIT_NOT_REACHED, "failed": failed,
                "reason": "B is significantly worse beyond the allowed regression on "
                          + ", ".join(failed)}
    if plan is not None and undecided and n < plan.pairs_max:
        return {"exit_code": EXIT_CONTINUE, "failed": [],
                "reason": f"not decided yet on {', '.join(undecided)}: run block "
                          f"{plan.look_of(n) + 1} of {plan.looks} ({plan.block} more pairs)"}
    gated = [r["metric"] for r in rows if r["max_regression"] is not None]
    return {"exit_code": EXIT_OK, "failed": [],
            "reason": ("no gated metric is significantly worse beyond its allowed regression"
                       if gated else "no metric has an allowed regression: report only")}


def compare_units(a: list[Unit], b: list[Unit], protocol: CompareProtocol,
                  options: CompareOptions, *, inputs: dict | None = None) -> dict:
    """The comparison document of two loaded sides."""
    claims, named = _claims(protocol, options)
    alpha = protocol.alpha if options.alpha is None else options.alpha
    plan = options.plan
    pairing = pair_units(a, b, pair_by=options.pair_by)
    n = len(pairing.pairs) if pairing.paired else min(len(a), len(b))
    if plan is not None:
        plan.check(n=n, alpha=alpha, paired=pairing.paired)
    if n < 2:
        raise InputError(f"{'1 pair' if pairing.paired else 'one run per side'} cannot "
                         "estimate the run-to-run spread", column="runs",
                         fix="repeat each configuration at least twice (interleaved: "
                             "`evalkit compare --plan` prints how many and the order)")
    alpha_eff = alpha if plan is None else plan.alpha_per_look
    slo, slo_source = _slo(a + b, protocol, options)
    skipped, rows = [], []
    for claim in claims:
        if METRICS[claim.metric].needs_slo and slo is None and not named:
            skipped.append({"metric": claim.metric,
                            "reason": "needs an SLO and none is known (give --slo-e2e)"})
            continue
        rows.append(_metric_row(claim, pairing, slo, options, alpha_eff))
    if not rows:
        raise InputError("no claimed metric can be computed: "
                         + "; ".join(f"{s['metric']} {s['reason']}" for s in skipped),
                         column="--slo-e2e", fix="give the SLO with --slo-e2e S, or name "
                                                 "latency metrics with --metric")
    finish_rows(rows, alpha_eff, protocol.power)
    for r in rows:
        r["verdict_text"] = _sentence(r)
    return {
        "schema": SCHEMA, "evalkit_version": __version__,
        "inputs": inputs or {},
        "protocol": {"name": protocol.name, "version": protocol.version,
                     "file": protocol.file, "sha256": protocol.sha256, "alpha": alpha,
                     "power": protocol.power, "multiplicity": "holm"},
        "pairing": {"key": pairing.key, "paired": pairing.paired, "reason": pairing.reason,
                    "n": n, "n_a": len(a), "n_b": len(b),
                    "pairs": [[x.label, y.label, _key_text(x.key(pairing.key))]
                              for x, y in pairing.pairs] if pairing.paired else []},
        "runs": {"A": [_unit_row(u) for u in a], "B": [_unit_row(u) for u in b]},
        "slo": slo, "slo_source": slo_source,
        "alpha_per_test": alpha_eff,
        "sequential": None if plan is None else plan.status(n),
        "metrics": rows, "skipped": skipped,
        "gate": _gate_summary(rows, plan, n),
    }


def _key_text(value) -> str:
    return value[:12] if isinstance(value, str) else str(value)


def _unit_row(u: Unit) -> dict:
    return {"label": u.label, "harness": u.harness, "seed": u.seed,
            "repetition": u.repetition, "trace": u.trace[:12],
            "n_requests": int(len(u.requests)), "provenance": u.provenance}


def compare_sides(a_path, b_path, protocol: CompareProtocol, options: CompareOptions) -> dict:
    """Load both sides (:func:`evalkit.compare.sources.load_side`) and compare them."""
    a = load_side(a_path, side="A", benchmark=options.benchmark,
                  tool_version=options.tool_version)
    b = load_side(b_path, side="B", benchmark=options.benchmark,
                  tool_version=options.tool_version)
    return compare_units(a, b, protocol, options,
                         inputs={"A": str(a_path), "B": str(b_path)})


def exit_code_of(document: dict) -> int:
    """The exit code a comparison document stands for (its ``gate.exit_code``)."""
    return int(document["gate"]["exit_code"])
