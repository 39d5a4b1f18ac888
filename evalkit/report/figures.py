"""Report figures (matplotlib Agg canvas).  Plotting only: every number comes from the audit.

Each function takes already-computed arrays/tables and returns PNG bytes (deterministic:
no timestamps in the PNG metadata).

Cost (``examples/bench/bench_scale.py``): figures are built on ``matplotlib.figure.Figure``
with an Agg canvas (no pyplot state, nothing to close) and fixed margins instead of the
constrained layout, which measured the text extents of every artist and took ~40% of a
figure's ~0.25 s.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

_PNG_META = {"Software": None}
DPI = 80
# left, right, bottom, top in figure fractions: room for the tick and axis labels at
# the default font size on a 6.4 in wide figure
_MARGINS = {"left": 0.10, "right": 0.985, "bottom": 0.15, "top": 0.95}


def _axes(height: float, title: bool = False):
    fig = Figure(figsize=(6.4, height), dpi=DPI)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(**{**_MARGINS, "top": 0.90 if title else _MARGINS["top"]})
    return fig, fig.add_subplot()


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata=_PNG_META)
    return buf.getvalue()


def v_per_seed(per_seed: pd.DataFrame, policy: str) -> bytes:
    """V of the policy per seed against the matched-random band (min..max of draws, mean)."""
    fig, ax = _axes(3.2)
    x = np.arange(len(per_seed))
    lo, hi = per_seed.v_mr_min.to_numpy(float), per_seed.v_mr_max.to_numpy(float)
    has = np.isfinite(lo)
    ax.vlines(x[has], lo[has], hi[has], color="tab:gray", lw=6, alpha=0.35,
              label="matched-random draws (min-max)")
    ax.plot(x, per_seed.v_mr_mean, "_", color="tab:gray", ms=14, mew=2, label="matched-random mean")
    ax.plot(x, per_seed.v_policy, "o", color="tab:blue", label=policy)
    if np.isfinite(per_seed.v_no_sync.to_numpy(float)).any():
        ax.plot(x, per_seed.v_no_sync, "x", color="tab:green", label="no-sync")
    ax.set_xticks(x, [str(s) for s in per_seed.seed])
    ax.set_xlabel("seed")
    ax.set_ylabel("SLO violation rate V")
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    return _png(fig)


def null_distribution(null: np.ndarray, observed: float, p_value: float,
                      alternative: str) -> bytes:
    """Histogram of the sign-flip null of mean(d) with the observed statistic."""
    fig, ax = _axes(3.0)
    null = np.asarray(null, dtype=float)
    bins = min(60, max(10, int(np.sqrt(null.size))))
    counts, edges = np.histogram(null, bins=bins)
    # one filled outline instead of a patch per bar: the same picture, ~40% less drawing
    ax.stairs(counts, edges, fill=True, color="tab:gray", alpha=0.7)
    ax.axvline(observed, color="tab:red", lw=2,
               label=f"observed mean d = {observed:.4g} (p = {p_value:.3g}, {alternative})")
    ax.set_xlabel("mean d under sign flips (d = V_MR - V_policy)")
    ax.set_ylabel("sign patterns")
    ax.legend(fontsize=7)
    return _png(fig)


def exposure_scatter(runs: pd.DataFrame, r2: float | None) -> bytes:
    """V against request-weighted exposure for a regime's merging runs, one colour a policy
    (matched-random draws grey)."""
    fig, ax = _axes(3.2, title=True)
    mr = runs[runs.role == "matched_random"]
    ax.plot(mr.exposure_requests, mr.violation_rate, "s", color="tab:gray", ms=4, alpha=0.6,
            label="matched random")
    for policy, sub in runs[runs.role == "policy"].groupby("policy", sort=True):
        ax.plot(sub.exposure_requests, sub.violation_rate, "o", ms=5, label=str(policy))
    title = "V vs exposure" + (f" (OLS R^2 = {r2:.3f})" if r2 is not None else "")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("request-weighted exposure (share of requests overlapping a merge)")
    ax.set_ylabel("V")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _png(fig)


def psi_fit(phi_table: pd.DataFrame, grid_phi: np.ndarray, grid_psi: np.ndarray,
            eps_cal: float) -> bytes:
    """(Phi, Vex) points of the regime's runs with the isotonic psi and a +-eps_cal band."""
    fig, ax = _axes(3.2)
    for role, marker, color in (("matched_random", "s", "tab:orange"),
                                ("policy", "o", "tab:blue")):
        sub = phi_table[phi_table.role == role]
        ax.plot(sub.phi, sub.vex, marker, color=color, ms=4, alpha=0.7, label=role)
    ax.step(grid_phi, grid_psi, where="post", color="black", lw=1.5, label="psi-hat")
    ax.fill_between(grid_phi, grid_psi - eps_cal, grid_psi + eps_cal, step="post",
                    color="black", alpha=0.1, label=f"+-eps_cal = {eps_cal:.3g}")
    ax.set_xlabel("overlap Phi(S) (requests in flight during merges)")
    ax.set_ylabel("sync-excess Vex")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _png(fig)
