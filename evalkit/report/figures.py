"""Report figures (matplotlib Agg canvas).  Plotting only: every number comes from the audit.

Each function takes already-computed arrays/tables and returns a :class:`Figure`: PNG bytes
(deterministic: no timestamps in the metadata) at :data:`DPI`, its size in inches (the page
shows it at that physical size, so fonts read at their point size at 100% zoom), a title and
alt text.  Legends sit below the axes, never over the data.  V and its differences are shares
of requests; axes show them in percent / percentage points.

Every string reaches matplotlib as plain text: :func:`_png`, the one point where a figure is
drawn, turns mathtext and TeX off on every text artist (and for artists the drawing itself
creates, such as tick labels), so a policy named ``$\\foo$`` is drawn as those characters and
never parsed.  The page shows a figure at its native pixel width (:attr:`Figure.css_width`).

Cost (``tools/bench/bench_scale.py``): figures are built on ``matplotlib.figure.Figure``
with an Agg canvas (no pyplot state, nothing to close) and margins fixed in inches instead of
the constrained layout, which measured the text extents of every artist.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as MplFigure
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter

from evalkit.report.text import shorten

__all__ = ["LABEL_LIMIT", "Figure", "drain_curve_notes", "drain_curves", "exposure_scatter",
           "null_distribution", "psi_claim", "transfer", "v_per_seed"]

DPI = 150
WIDTH_IN = 4.4              # three figures side by side on a 1,400 px wide screen
HEIGHT_IN = 3.5
LABEL_LIMIT = 28            # characters of a policy name in a legend or title
_PNG_META = {"Software": None}
_PLAIN_TEXT = {"text.usetex": False, "text.parse_math": False}
_TITLE_PAD_IN = 0.08        # free space beside a title, each side
_FONT = {"title": 10.5, "label": 9.5, "tick": 8.5, "legend": 8.5}
# margins in inches: left (tick + axis labels), right, top (title), bottom (ticks, axis label,
# legend rows below the axes)
_LEFT, _RIGHT, _TOP, _BOTTOM_AXIS, _LEGEND_ROW = 0.72, 0.15, 0.38, 0.52, 0.19

POLICY_COLOR, DRAWS_COLOR, NO_SYNC_COLOR, OTHER_COLOR, OBSERVED_COLOR = (
    "#1f5fa8", "#7f7f7f", "#2e8b3a", "#c8c8c8", "#c0392b")


@dataclass(frozen=True)
class Figure:
    png: bytes
    title: str
    alt: str
    width_in: float
    height_in: float
    dpi: int = DPI

    @property
    def css_width(self) -> int:
        """Width on the page in CSS pixels: the PNG's own width (one image pixel per CSS
        pixel), so its text reads at the report's width; narrower screens scale it down."""
        return int(round(self.width_in * self.dpi))

    @property
    def css_height(self) -> int:
        return int(round(self.height_in * self.dpi))


def _canvas(title: str, legend_rows: int, width: float = WIDTH_IN, height: float = HEIGHT_IN,
            ncols: int = 1):
    fig = MplFigure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    bottom = _BOTTOM_AXIS + legend_rows * _LEGEND_ROW + (0.06 if legend_rows else 0.0)
    fig.subplots_adjust(left=_LEFT / width, right=1 - _RIGHT / width,
                        top=1 - _TOP / height, bottom=bottom / height,
                        wspace=0.45 if ncols > 1 else 0.2)
    _fitted_title(fig, title, width, height)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    for ax in axes:
        ax.tick_params(labelsize=_FONT["tick"])
        ax.grid(alpha=0.3)
    return fig, axes if ncols > 1 else axes[0]


def _fitted_title(fig, title: str, width: float, height: float) -> None:
    """The figure's title, on one line where it fits inside the figure with
    ``_TITLE_PAD_IN`` beside it, else broken at the space nearest its middle (the top margin
    grows by the second line), else in a smaller font: never cut at the figure's edges."""
    room = (width - 2 * _TITLE_PAD_IN) * DPI
    text = fig.suptitle(title, fontsize=_FONT["title"], x=0.5, y=1 - 0.08 / height, va="top")
    renderer = fig.canvas.get_renderer()
    if _plain_width(text, renderer) <= room:
        return
    spaces = [i for i, ch in enumerate(title) if ch == " "]
    if spaces:
        cut = min(spaces, key=lambda i: abs(i - len(title) / 2))
        text.set_text(title[:cut] + "\n" + title[cut + 1:])
        grow = _FONT["title"] * 1.25 / 72
        fig.subplots_adjust(top=fig.subplotpars.top - grow / height)
    size = _FONT["title"]
    while _plain_width(text, renderer) > room and size > 6:
        size -= 0.5
        text.set_fontsize(size)


def _as_plain_text(artist) -> None:
    """Every text in ``artist`` drawn as its characters: no mathtext, no TeX."""
    for text in artist.findobj(Text):
        text.set_parse_math(False)
        text.set_usetex(False)


def _plain_width(artist, renderer) -> float:
    """The drawn width of a title or legend in pixels, its texts measured as plain text."""
    _as_plain_text(artist)
    return artist.get_window_extent(renderer).width


def _legend_below(fig, handles_from, ncol: int = 2) -> None:
    handles, labels = [], []
    for ax in np.atleast_1d(handles_from):
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    if not handles:
        return
    renderer = fig.canvas.get_renderer()
    room = fig.get_figwidth() * DPI
    while True:
        legend = fig.legend(handles, labels, loc="lower center", ncol=ncol, frameon=False,
                            fontsize=_FONT["legend"],
                            bbox_to_anchor=(0.5, 0.02 / fig.get_figheight()),
                            handlelength=1.6, columnspacing=1.2)
        if ncol == 1 or _plain_width(legend, renderer) <= room:
            return
        # too wide for the figure: fewer columns, the axes give up the extra rows' height
        legend.remove()
        extra = _rows(len(handles), ncol - 1) - _rows(len(handles), ncol)
        fig.subplots_adjust(bottom=fig.subplotpars.bottom
                            + extra * _LEGEND_ROW / fig.get_figheight())
        ncol -= 1


def _rows(n_entries: int, ncol: int = 2) -> int:
    return -(-n_entries // ncol)


def _png(fig) -> bytes:
    """The figure drawn as PNG bytes, every text in it as plain characters (no mathtext, no
    TeX): labels, titles and legends carry policy names and other input strings."""
    buf = io.BytesIO()
    with mpl.rc_context(_PLAIN_TEXT):          # also for tick labels created while drawing
        _as_plain_text(fig)
        fig.savefig(buf, format="png", dpi=DPI, metadata=_PNG_META)
    return buf.getvalue()


def _finish(fig, title: str, alt: str) -> Figure:
    w, h = fig.get_size_inches()
    return Figure(png=_png(fig), title=title, alt=alt, width_in=float(w), height_in=float(h))


_PERCENT = FuncFormatter(lambda y, _: f"{100 * y:.3g}%")
_PP = FuncFormatter(lambda y, _: f"{100 * y:+.3g}" if y else "0")


def v_per_seed(per_seed: pd.DataFrame, policy: str) -> Figure:
    """V of the policy per seed against its matched-random draws (min..max bar, mean) and the
    seed's no-sync run."""
    name = shorten(policy, LABEL_LIMIT)
    has_ns = np.isfinite(per_seed.v_no_sync.to_numpy(float)).any()
    entries = 3 + int(has_ns)
    title = f"V per seed: {name} vs matched random"
    fig, ax = _canvas(title, _rows(entries))
    x = np.arange(len(per_seed))
    lo, hi = per_seed.v_mr_min.to_numpy(float), per_seed.v_mr_max.to_numpy(float)
    has = np.isfinite(lo)
    ax.vlines(x[has], lo[has], hi[has], color=DRAWS_COLOR, lw=7, alpha=0.35,
              label="matched-random draws (min-max)")
    ax.plot(x, per_seed.v_mr_mean, "_", color=DRAWS_COLOR, ms=14, mew=2,
            label="matched-random mean")
    if has_ns:
        ax.plot(x, per_seed.v_no_sync, "x", color=NO_SYNC_COLOR, ms=6, mew=1.6,
                label="no-sync (same seed)")
    ax.plot(x, per_seed.v_policy, "o", color=POLICY_COLOR, ms=5.5, label=name)
    step = max(1, -(-len(x) // 12))          # at most 12 seed labels
    ax.set_xticks(x[::step], [str(s) for s in per_seed.seed.iloc[::step]])
    ax.set_xlabel("seed", fontsize=_FONT["label"])
    ax.set_ylabel("V (% of requests violating the SLO)", fontsize=_FONT["label"])
    ax.yaxis.set_major_formatter(_PERCENT)
    _legend_below(fig, ax)
    wins = int((per_seed.d.to_numpy(float) > 0).sum()) if "d" in per_seed else 0
    alt = (f"{title}. For each of {len(per_seed)} seeds: the policy's SLO violation rate V "
           f"(dot), the spread and mean of its matched-random draws (grey bar and tick)"
           + (" and the no-sync run (cross)" if has_ns else "")
           + f". The policy is below its draws' mean in {wins} of {len(per_seed)} seeds.")
    return _finish(fig, title, alt)


def null_distribution(hist: dict) -> Figure:
    """The histogram of the test's null distribution (``hist``: the document's
    ``figure_data.null``: ``edges`` (b+1,), ``counts`` (b,), ``size`` label sets in all,
    ``observed``, ``p_value``, ``alternative``, ``test``, ``statistic``) with the observed
    value: of G = mean d (``statistic="mean"``) or of t = G / se(G) (``"studentized"``), the
    one the p used."""
    edges = np.asarray(hist["edges"], dtype=float)
    counts = np.asarray(hist["counts"], dtype=float)
    size = int(hist["size"])
    observed = float(hist.get("observed_nonfinite") or "nan") if hist["observed"] is None \
        else float(hist["observed"])
    p_value = np.nan if hist["p_value"] is None else float(hist["p_value"])
    alternative, test = hist["alternative"], hist.get("test") or "sign-flip"
    student = hist.get("statistic") == "studentized"
    name = "t = G / se(G)" if student else "G"
    title = (f"Null distribution of {name} ({test})" if test.endswith("-test")
             else f"Null distribution of {name} ({test} test)")
    fig, ax = _canvas(title, 2)
    share = counts / max(1, size)
    # one filled outline instead of a patch per bar: the same picture, less drawing
    law = (f"null (the t law of the floored se, its worse side carrying the draws' skew; "
           f"{size:,} quantiles)" if test.endswith("t-test")
           else f"null ({size:,} label sets)")
    ax.stairs(share, edges, fill=True, color=DRAWS_COLOR, alpha=0.6, label=law)
    value = f"{observed:+.3g}" if student else f"{100 * observed:+.3g} pp"
    if np.isfinite(observed):
        ax.axvline(observed, color=OBSERVED_COLOR, lw=2,
                   label=f"observed {name.split(' ')[0]} = {value} "
                         f"(unadjusted {alternative} p = {p_value:.2g})")
    if student:
        ax.set_xlabel("t = G / se(G), studentized (the statistic the p-value uses)",
                      fontsize=_FONT["label"])
    else:
        ax.set_xlabel("G = mean over seeds of V(random) - V(policy), pp",
                      fontsize=_FONT["label"])
        ax.xaxis.set_major_formatter(_PP)
    ax.set_ylabel("share of the null", fontsize=_FONT["label"])
    _legend_below(fig, ax, ncol=1)
    infinite = size - int(counts.sum())
    over = (f"{size} evenly spaced quantiles of its t law (the worse side carries the draws' "
            f"skew)" if test.endswith("t-test")
            else f"{size} label sets")
    alt = (f"{title}: histogram of {name} under the null hypothesis over {over}, with the observed {name.split(' ')[0]} = "
           f"{value.replace('pp', 'percentage points')} marked (unadjusted {alternative} p = "
           f"{p_value:.3g}, before any multiplicity adjustment)"
           + (f"; {infinite} label sets with se = 0 (t infinite) are not drawn" if infinite
              else "") + ".")
    return _finish(fig, title, alt)


def psi_claim(phi_table: pd.DataFrame, grid_phi: np.ndarray, grid_psi: np.ndarray,
              eps_cal: float, policy: str, policy_runs, draw_runs) -> Figure:
    """The regime's isotonic psi (+- eps_cal) with this claim's policy runs and its matched-
    random draws highlighted over the regime's other runs (grey)."""
    name = shorten(policy, LABEL_LIMIT)
    title = f"\u03c8 calibration: {name} and its draws"
    fig, ax = _canvas(title, _rows(5))
    pol, drw = set(policy_runs), set(draw_runs)
    run_ids = phi_table.run_id.astype(str)
    is_pol, is_drw = run_ids.isin(pol).to_numpy(), run_ids.isin(drw).to_numpy()
    rest = ~(is_pol | is_drw)
    phi, vex = phi_table.phi.to_numpy(float), phi_table.vex.to_numpy(float)
    ax.plot(phi[rest], vex[rest], ".", color=OTHER_COLOR, ms=4, label="other runs of the regime")
    ax.fill_between(grid_phi, grid_psi - eps_cal, grid_psi + eps_cal, step="post",
                    color="black", alpha=0.08, label=f"\u00b1 \u03b5_cal = {100 * eps_cal:.2g} pp")
    ax.step(grid_phi, grid_psi, where="post", color="black", lw=1.4,
            label="\u03c8\u0302 (isotonic)")
    ax.plot(phi[is_drw], vex[is_drw], "s", color=DRAWS_COLOR, ms=4, alpha=0.85,
            label="its matched-random draws")
    ax.plot(phi[is_pol], vex[is_pol], "o", color=POLICY_COLOR, ms=5, label=name)
    ax.set_xlabel("\u03a6: requests in flight during merges", fontsize=_FONT["label"])
    ax.set_ylabel("Vex = V - V(no-sync), pp", fontsize=_FONT["label"])
    ax.yaxis.set_major_formatter(_PP)
    _legend_below(fig, ax)
    phi_pol = float(np.mean(phi[is_pol])) if is_pol.any() else float("nan")
    phi_drw = float(np.mean(phi[is_drw])) if is_drw.any() else float("nan")
    alt = (f"{title}: sync-excess violation rate Vex against overlap \u03a6 for the regime's "
           f"runs, with the fitted monotone \u03c8 and a band of \u00b1 \u03b5_cal "
           f"({100 * eps_cal:.2g} pp). Mean \u03a6 of the policy's runs {phi_pol:.4g}, of its "
           f"draws {phi_drw:.4g}.")
    return _finish(fig, title, alt)


def exposure_scatter(runs: pd.DataFrame, r2: float | None) -> Figure:
    """V against request-weighted exposure for a regime's merging runs, one colour a policy
    (matched-random draws grey)."""
    title = "V against exposure" + (f" (OLS R\u00b2 = {r2:.2f})" if r2 is not None else "")
    policies = sorted(runs.loc[runs.role == "policy", "policy"].astype(str).unique())
    entries = 1 + min(len(policies), 9)
    fig, ax = _canvas(title, _rows(entries, 3), width=WIDTH_IN * 1.4)
    mr = runs[runs.role == "matched_random"]
    ax.plot(mr.exposure_requests, mr.violation_rate, "s", color=DRAWS_COLOR, ms=3.5,
            alpha=0.5, label="matched random")
    for i, policy in enumerate(policies):
        sub = runs[(runs.role == "policy") & (runs.policy.astype(str) == policy)]
        ax.plot(sub.exposure_requests, sub.violation_rate, "o", ms=4.5,
                label=shorten(policy, LABEL_LIMIT) if i < 9 else None)
    ax.set_xlabel("exposure (% of requests overlapping a merge)", fontsize=_FONT["label"])
    ax.set_ylabel("V (% of requests violating the SLO)", fontsize=_FONT["label"])
    ax.xaxis.set_major_formatter(_PERCENT)
    ax.yaxis.set_major_formatter(_PERCENT)
    _legend_below(fig, ax, ncol=3)
    alt = (f"{title}: each merging run's SLO violation rate against the share of its "
           f"requests that overlapped a merge; {len(policies)} policies and their "
           f"matched-random draws.")
    return _finish(fig, title, alt)


TRANSFER_SERIES = (("rho_harness", "harness \u03c1", DRAWS_COLOR, "s"),
                   ("rho_real", "real \u03c1", POLICY_COLOR, "o"),
                   ("gm_ratio_harness", "harness paired ratio", "#9e9e9e", "D"),
                   ("gm_ratio_real", "real paired ratio", OBSERVED_COLOR, "D"),
                   ("paired_ratio", "paired ratio", OBSERVED_COLOR, "^"))


MIN_DRAIN_BINS = 3          # usable bins a drain curve needs before it is drawn


def _drain_groups(mechanisms: dict):
    """``(label, bins, min_n)`` per mechanism and condition (harness/real) that has a bin
    list; ``min_n`` is the document's ``drain_min_requests`` (paired requests a bin needs)."""
    for mech, t in mechanisms.items():
        curve = t.get("drain_curve")
        groups = curve.items() if isinstance(curve, dict) else [("", curve)]
        for cond, bins in groups:
            if isinstance(bins, list):
                yield f"{shorten(mech, 16)} {cond}".strip(), bins, t["drain_min_requests"]


def _usable_points(bins: list, min_n: int) -> list[tuple]:
    """(lag_mid, ratio, ci_low, ci_high) of the bins with a finite lag range, ratio and CI
    and at least ``min_n`` requests (a bin without its request count is not used)."""
    pts = []
    for b in bins:
        if not isinstance(b, dict):
            continue
        lo, hi, ratio, c_lo, c_hi = (_finite(b.get(k)) for k in
                                     ("lag_lo", "lag_hi", "ratio", "ci_low", "ci_high"))
        n = _finite(b.get("n"))
        if None in (lo, hi, ratio, c_lo, c_hi, n) or n < min_n:
            continue
        pts.append(((lo + hi) / 2, ratio, c_lo, c_hi))
    return pts


def drain_curves(mechanisms: dict) -> dict[str, list[tuple]]:
    """``{label: [(lag_mid, ratio, ci_low, ci_high)]}`` from each mechanism's
    ``drain_curve`` (a list of bins, or a dict of such lists per condition), only for curves
    with at least MIN_DRAIN_BINS usable bins (:func:`_usable_points`); the others are named
    by :func:`drain_curve_notes`."""
    out = {}
    for label, bins, min_n in _drain_groups(mechanisms):
        pts = _usable_points(bins, min_n)
        if len(pts) >= MIN_DRAIN_BINS:
            out[label] = pts
    return out


def drain_curve_notes(mechanisms: dict) -> list[str]:
    """One sentence per drain curve too thin to draw, with its bin counts."""
    notes = []
    for label, bins, min_n in _drain_groups(mechanisms):
        usable = len(_usable_points(bins, min_n))
        if bins and usable < MIN_DRAIN_BINS:
            notes.append(f"Drain curve {label} not drawn: {usable} of {len(bins)} lag bins hold "
                         f">= {min_n} paired requests with a CI, and a curve needs "
                         f">= {MIN_DRAIN_BINS} such bins")
    return notes


def transfer(mechanisms: dict) -> Figure:
    """Latency ratios (mechanism active / inactive, or paired against the same requests in
    no-sync) of the harness and the real sidecar with CIs per mechanism, and the drain curves
    (ratio against the lag after a window) when the audit has them."""
    curves = drain_curves(mechanisms)
    ncols = 2 if curves else 1
    title = "Effect-size transfer: harness \u2192 real sidecar"
    names = list(mechanisms)
    present = [row for row in TRANSFER_SERIES
               if any(_finite(mechanisms[m].get(row[0])) is not None for m in names)]
    fig, axes = _canvas(title, _rows(len(present) + 1 + len(curves), 3),
                        width=WIDTH_IN * (1.6 if curves else 1.1), ncols=ncols)
    ax = axes[0] if curves else axes
    width = 0.7 / max(1, len(present))
    for j, (key, label, color, marker) in enumerate(present):
        xs, ys, lo, hi = [], [], [], []
        for i, m in enumerate(names):
            t = mechanisms[m]
            val = _finite(t.get(key))
            if val is None:
                continue
            ci = t.get(f"{key}_ci") or [None, None]
            low, high = _finite(ci[0]), _finite(ci[1])
            xs.append(i + (j - (len(present) - 1) / 2) * width)
            ys.append(val)
            lo.append(max(0.0, val - low) if low is not None else 0.0)
            hi.append(max(0.0, high - val) if high is not None else 0.0)
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt=marker, color=color, capsize=3, ms=5,
                    label=label)
    ax.axhline(1.0, color="black", lw=1, ls="--", label="no effect (ratio 1)")
    ax.set_xticks(range(len(names)), [shorten(m, 16) for m in names])
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_xlabel("mechanism", fontsize=_FONT["label"])
    ax.set_ylabel("latency ratio (95% CI)", fontsize=_FONT["label"])
    if curves:
        cax = axes[1]
        for label, pts in curves.items():
            mid, ratio, lo, hi = (np.array(col, dtype=float) for col in zip(*pts))
            line, = cax.plot(mid, ratio, "o-", ms=3.5, label=f"drain: {label}")
            cax.fill_between(mid, lo, hi, color=line.get_color(), alpha=0.2)
        cax.axhline(1.0, color="black", lw=1, ls="--")
        cax.set_xlabel("lag after the window (s)", fontsize=_FONT["label"])
        cax.set_ylabel("latency ratio vs no-sync", fontsize=_FONT["label"])
        cax.set_title("drain curve", fontsize=_FONT["label"])
    _legend_below(fig, axes, ncol=3)
    alt = (f"{title}: for each mechanism ({', '.join(names)}) the harness and real-sidecar "
           "latency ratios with 95% confidence intervals and a dashed line at 1 (no effect)"
           + ("; right: the drain curve, the latency ratio against the lag after a window "
              "(" + ", ".join(curves) + ")" if curves else "") + ".")
    return _finish(fig, title, alt)


def _finite(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if np.isfinite(v) else None
