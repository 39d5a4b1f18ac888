"""Request traces: the data model, generators, readers, transformations and summaries.

>>> from evalkit.replay.traces import generate, read_trace
>>> trace = generate("gamma", rate=8, duration_s=600, burstiness=0.25, seed=1)
>>> digest = trace.write("bursty.parquet")        # doctest: +SKIP
"""

from evalkit.replay.traces.describe import describe, format_description, plot_trace
from evalkit.replay.traces.generate import (
    ARRIVALS, DEFAULT_LENGTHS, Fixed, JointResample, Lengths, LogNormal, Resample, fixed,
    gamma_arrivals, generate, lognormal, mmpp_bursts, parse_length, piecewise_poisson, poisson,
    resample, square_wave,
)
from evalkit.replay.traces.model import COLUMNS, Trace, content_sha256, read_trace
from evalkit.replay.traces.ops import head, rescale_rate, slice_window, time_scale
from evalkit.replay.traces.readers import (
    FORMATS, detect_bucket, grid_fraction, import_trace, read_azure, read_burstgpt, read_mooncake,
    read_vllm_bench,
)

__all__ = [
    "ARRIVALS", "COLUMNS", "DEFAULT_LENGTHS", "FORMATS", "Fixed", "JointResample", "Lengths",
    "LogNormal", "Resample", "Trace", "content_sha256", "describe", "detect_bucket", "fixed",
    "grid_fraction",
    "format_description", "gamma_arrivals", "generate", "head", "import_trace", "lognormal",
    "mmpp_bursts", "parse_length", "piecewise_poisson", "plot_trace", "poisson", "read_azure",
    "read_burstgpt", "read_mooncake", "read_trace", "read_vllm_bench", "resample",
    "rescale_rate", "slice_window", "square_wave", "time_scale",
]
