"""Summary statistics of a trace (``describe``) and a picture of it (``plot_trace``)."""

from __future__ import annotations

import numpy as np

from evalkit.replay.traces.gamma_fit import gamma_shape_mle
from evalkit.replay.traces.model import Trace

DISPERSION_WINDOWS_S = (1.0, 10.0, 60.0)
QUANTILES = (0.5, 0.9, 0.99)


def nice_bin(duration_s: float, target_bins: int = 60) -> float:
    """A 1-2-5 bin width giving about ``target_bins`` bins over ``duration_s``."""
    raw = max(duration_s / target_bins, 1e-3)
    exp = np.floor(np.log10(raw))
    for m in (1, 2, 5, 10):
        if m * 10 ** exp >= raw:
            return float(m * 10 ** exp)
    return float(10 ** (exp + 1))


def binned_rate(arrival_s, duration_s: float, bin_s: float):
    """Requests/s in bins of ``bin_s`` over [0, duration_s]: (edges (k+1,), rates (k,)).

    The last edge is ``duration_s`` itself, so a partial last bin is as wide as the time it
    covers and its rate is its count over that width (not over ``bin_s``, which would draw
    a fake drop at the end of every trace whose length is not a multiple of ``bin_s``).
    """
    k = max(1, int(np.ceil(duration_s / bin_s - 1e-9)))
    edges = np.arange(k + 1) * bin_s
    edges[-1] = min(edges[-1], duration_s) if duration_s > 0 else edges[-1]
    counts, _ = np.histogram(arrival_s, bins=edges)
    return edges, counts / np.diff(edges)


def index_of_dispersion(arrival_s, duration_s: float, window_s: float) -> float | None:
    """Var/mean of counts in consecutive windows (1 for Poisson); None with < 10 windows."""
    k = int(duration_s // window_s)
    if k < 10:
        return None
    counts, _ = np.histogram(arrival_s, bins=np.arange(k + 1) * window_s)
    mean = counts.mean()
    return float(counts.var(ddof=1) / mean) if mean > 0 else None


def interarrival_stats(arrival_s) -> dict:
    """CV² of inter-arrival gaps and gamma-shape fits (moment 1/CV², maximum likelihood).

    The MLE method depends on the gaps (see :func:`gamma_shape_mle`); it is ``None``, with
    a note saying why, where a gamma renewal model cannot be fitted.
    """
    gaps = np.diff(np.asarray(arrival_s, dtype=np.float64))
    out = {"n_gaps": int(len(gaps)), "n_zero_gaps": int(np.sum(gaps == 0)),
           "cv2": None, "gamma_shape_moments": None, "gamma_shape_mle": None,
           "gamma_shape_mle_method": None}
    if len(gaps) < 2 or gaps.mean() <= 0:
        return out
    cv2 = float(gaps.var(ddof=1) / gaps.mean() ** 2)
    out["cv2"] = cv2
    out["gamma_shape_moments"] = 1.0 / cv2 if cv2 > 0 else None
    fit = gamma_shape_mle(gaps)
    out["gamma_shape_mle"] = fit.shape
    out["gamma_shape_mle_method"] = fit.method
    if fit.note:
        out["gamma_shape_mle_note"] = fit.note
    if fit.resolution_s is not None:
        out["timestamp_resolution_s"] = fit.resolution_s
    return out


def _lengths(values) -> dict:
    v = np.asarray(values)
    q = np.quantile(v, QUANTILES)
    return {"mean": float(v.mean()), "min": int(v.min()),
            **{f"p{int(p * 100)}": float(x) for p, x in zip(QUANTILES, q)}, "max": int(v.max())}


def describe(trace: Trace, bin_s: float | None = None) -> dict:
    """JSON-safe summary: size, rate over time, burstiness, token length quantiles."""
    t = trace.arrival_s - float(trace.meta.get("window_start_s", 0.0))
    duration = trace.duration_s
    bin_s = nice_bin(duration) if bin_s is None else float(bin_s)
    edges, rates = binned_rate(t, duration, bin_s) if duration > 0 else (np.zeros(1), np.zeros(0))
    widths = np.diff(edges)
    full = widths >= bin_s * (1 - 1e-9)
    # a short partial last bin is noisy: the peak is taken over full bins where there are any
    peak_rates = rates[full] if full.any() else rates
    mean_rate = trace.rate if np.isfinite(trace.rate) else None
    return {
        "name": trace.name,
        "sha256": trace.sha256,
        "n": trace.n,
        "duration_s": duration,
        "mean_rate": mean_rate,
        "rate_over_time": {"bin_s": bin_s, "edges": edges.tolist(), "rates": rates.tolist(),
                           "last_bin_s": float(widths[-1]) if len(widths) else None,
                           "partial_last_bin": bool(len(widths) and not full[-1]),
                           "peak": float(peak_rates.max()) if len(rates) else None,
                           "peak_to_mean": (float(peak_rates.max() / mean_rate)
                                            if len(rates) and mean_rate else None)},
        "interarrival": interarrival_stats(t),
        "index_of_dispersion": {f"{w:g}s": index_of_dispersion(t, duration, w)
                                for w in DISPERSION_WINDOWS_S},
        "prompt_tokens": _lengths(trace.requests["prompt_tokens"]),
        "output_tokens": _lengths(trace.requests["output_tokens"]),
        "source": {k: trace.meta[k] for k in ("source", "format", "generator", "seed", "dropped",
                                              "jitter", "ops", "repairs") if k in trace.meta},
    }


def format_description(d: dict) -> str:
    """Human-readable lines for ``describe``'s dict."""
    ia = d["interarrival"]
    fmt = lambda x, spec=".3g": "n/a" if x is None else format(x, spec)  # noqa: E731
    lines = [
        f"trace {d['name']}  sha256 {d['sha256']}",
        f"requests {d['n']}  over {d['duration_s']:.1f} s  mean rate {fmt(d['mean_rate'])} req/s",
        f"rate per {d['rate_over_time']['bin_s']:g} s bin: peak {fmt(d['rate_over_time']['peak'])}"
        f" req/s (peak/mean {fmt(d['rate_over_time']['peak_to_mean'])})",
        f"inter-arrival CV² {fmt(ia['cv2'])}  gamma shape: moments {fmt(ia['gamma_shape_moments'])}"
        f", MLE {fmt(ia['gamma_shape_mle'])}"
        + (f" [{ia['gamma_shape_mle_method']}]" if ia.get("gamma_shape_mle_method") not in
           (None, "exact") else "")
        + f"  (zero gaps: {ia['n_zero_gaps']})",
        "index of dispersion: " + "  ".join(f"{w} {fmt(v)}"
                                            for w, v in d["index_of_dispersion"].items()),
    ]
    if ia.get("gamma_shape_mle_note"):
        lines.insert(4, f"  gamma MLE: {ia['gamma_shape_mle_note']}")
    if d["rate_over_time"].get("partial_last_bin"):
        lines.insert(3, f"  last bin covers {d['rate_over_time']['last_bin_s']:.3g} s "
                        "(partial; its rate is over that width, left out of the peak)")
    for col in ("prompt_tokens", "output_tokens"):
        s = d[col]
        lines.append(f"{col}: mean {s['mean']:.1f}  p50 {s['p50']:g}  p90 {s['p90']:g}  "
                     f"p99 {s['p99']:g}  [{s['min']}, {s['max']}]")
    return "\n".join(lines)


def plot_trace(trace: Trace, path, description: dict | None = None) -> None:
    """PNG: rate over time (top) and prompt/output length histograms (bottom)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = describe(trace) if description is None else description
    rot = d["rate_over_time"]
    fig = plt.figure(figsize=(9, 6))
    ax = fig.add_subplot(2, 1, 1)
    rates = np.asarray(rot["rates"])
    edges = np.asarray(rot.get("edges") or np.arange(len(rates) + 1) * rot["bin_s"])
    if rot.get("partial_last_bin") and len(rates) > 1:
        ax.stairs(rates[:-1], edges[:-1], color="C0")
        ax.stairs(rates[-1:], edges[-2:], color="C0", alpha=0.45, hatch="//",
                  label=f"partial bin ({rot['last_bin_s']:.3g} s)")
    else:
        ax.stairs(rates, edges, color="C0")
    if d["mean_rate"] is not None:
        ax.axhline(d["mean_rate"], color="grey", ls="--", lw=0.8, label="mean")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper right")
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"requests/s ({rot['bin_s']:g} s bins)")
    ax.set_title(f"{d['name']}: {d['n']} requests, CV² of gaps "
                 f"{d['interarrival']['cv2'] or float('nan'):.2f}")
    for i, col in enumerate(("prompt_tokens", "output_tokens")):
        ax = fig.add_subplot(2, 2, 3 + i)
        v = trace.requests[col].to_numpy()
        bins = np.unique(np.geomspace(max(v.min(), 1), max(v.max(), 2), 40).round())
        ax.hist(np.maximum(v, 1), bins=bins)
        ax.set_xscale("log")
        ax.set_xlabel(col)
        ax.set_ylabel("requests")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
