"""vLLM backend: the torch trainer co-located with an OpenAI-compatible server.

``backend_config``: ``endpoint`` (URL of a running server) and ``model`` (served name), or
``serve_vllm`` (a model to launch with ``vllm serve`` on a free port; ``vllm_args`` adds
arguments).  The open-loop client, metrics scraper and policy loop are the torch backend's;
the scraper reads vLLM's metric names (:data:`SIGNAL_METRICS`), which ``evalkit serve``
also exports, so the sidecar can stand in for vLLM at ``endpoint``.

Servers without those metrics (SGLang, TGI, llama.cpp's server expose other names or none)
still replay: the run records ``settings.effective.signals = {"available": false, ...}``
and a note, and the decision states carry zeros for the engine signals.  A policy whose
``requires_signals`` is not empty is refused before anything starts (an endpoint probed
without the metrics), or its run is marked incomplete (no scrape succeeded during the run).

vLLM returns no per-request ``server_timing``, so the run records the server's own aggregate
view instead: the deltas of its ``vllm:e2e_request_latency_seconds`` (and, when exported,
``vllm:request_queue_time_seconds``) histogram count and sum between a /metrics scrape before
and one after the run, under ``settings.effective.server_view`` with the rig's own
capacity-probe requests named; real_sidecar holds it against the client's requests.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
import urllib.error
import urllib.request

from evalkit.errors import InputError
from evalkit.policies import POLICIES
from evalkit.replay.spec import RunOutput
from evalkit.runlog.server_view import SERVER_VIEW_KEY

from .procs import Managed, free_port
from .torch import coordinator, prepare
from .torch.coordinator import run_replay
from .torch.health import Server, check_model, wait_healthy
from .torch.rig import current_rig, rig_key


SIGNAL_METRICS = ("vllm:num_requests_running", "vllm:num_requests_waiting")
# the histograms whose _count and _sum deltas over a run are the server's own view of it
E2E_HISTOGRAM = "vllm:e2e_request_latency_seconds"
QUEUE_HISTOGRAM = "vllm:request_queue_time_seconds"
# how long a running endpoint may take to answer /health before the replay gives up (before
# any learner starts)
ENDPOINT_HEALTH_WAIT_S = 3.0
_SERIES_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def _base_url(endpoint: str) -> str:
    url = str(endpoint).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise InputError(f"endpoint {endpoint!r} is not an http(s) URL",
                         column="backend_config.endpoint", fix="e.g. http://127.0.0.1:8000")
    return url[:-3] if url.endswith("/v1") else url


def metric_names(text: str) -> set[str]:
    """Metric names in a Prometheus exposition: sample lines and ``# TYPE`` declarations
    (a gauge vLLM has declared but not yet set is still a metric it exports)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 3:
                names.add(parts[2])
        elif line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names


def histogram_totals(text: str, names=(E2E_HISTOGRAM, QUEUE_HISTOGRAM)) -> dict:
    """``{name: {"count", "sum"}}`` of each histogram in a Prometheus exposition, summed over
    its label sets (one per served model); a histogram the page lacks is absent."""
    wanted = {f"{name}_{part}": (name, part) for name in names for part in ("count", "sum")}
    out: dict = {}
    for line in text.splitlines():
        series = _SERIES_NAME.match(line)
        if series is None or series.group(0) not in wanted:
            continue
        rest = line[series.end():]
        if rest.startswith("{"):
            rest = rest[rest.rfind("}") + 1:]
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError):
            continue
        name, part = wanted[series.group(0)]
        out.setdefault(name, {"count": 0.0, "sum": 0.0})[part] += value
    return out


def scrape_histograms(base_url: str, timeout_s: float = 5.0) -> tuple[dict | None, str | None]:
    """``(totals, None)`` from ``GET base_url/metrics``, or ``(None, why not)``."""
    url = base_url.rstrip("/") + "/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            text = resp.read(8 << 20).decode("utf-8", "replace")
    except (OSError, ValueError) as exc:
        return None, f"GET {url} failed: {type(exc).__name__}: {exc}"[:200]
    totals = histogram_totals(text)
    if E2E_HISTOGRAM not in totals:
        return None, f"{url} has no {E2E_HISTOGRAM}"
    return totals, None


def server_view(before: dict | None, after: dict | None, effective: dict,
                reason: str | None = None) -> dict:
    """The server's own view of the run: histogram deltas between two scrapes, and the
    requests the rig itself sent meanwhile (a capacity probe: its warm-up request plus
    ``probe_requests``, each no longer than ``probe_elapsed_s`` / ``single_request_s`` as the
    client saw them).  ``{"available": false, "reason"}`` when a scrape is missing."""
    if before is None or after is None:
        return {"available": False, "source": "vllm /metrics",
                "reason": reason or "no /metrics scrape around the run"}
    e2e = {k: after[E2E_HISTOGRAM][k] - before[E2E_HISTOGRAM][k] for k in ("count", "sum")}
    probed = effective.get("capacity_probe_cached") is False
    view = {"available": True, "source": "vllm /metrics",
            "requests": e2e["count"], "e2e_sum_s": e2e["sum"],
            "rig_requests": int(effective.get("probe_requests") or 0) + 1 if probed else 0,
            "rig_latency_bound_s": (float(effective.get("probe_requests") or 0)
                                    * float(effective.get("probe_elapsed_s") or 0.0)
                                    + float(effective.get("single_request_s") or 0.0))
            if probed else 0.0}
    if QUEUE_HISTOGRAM in before and QUEUE_HISTOGRAM in after:
        view["queue_requests"] = after[QUEUE_HISTOGRAM]["count"] - before[QUEUE_HISTOGRAM]["count"]
        view["queue_sum_s"] = after[QUEUE_HISTOGRAM]["sum"] - before[QUEUE_HISTOGRAM]["sum"]
    if view["requests"] < 0 or view["e2e_sum_s"] < 0:
        return {"available": False, "source": "vllm /metrics",
                "reason": "the histograms went backwards (the server restarted during the run)"}
    return view


def _server_before_run(cfg: dict) -> tuple[dict | None, str | None]:
    """The histograms before the run: the given endpoint's, the warm rig's server's, or zero
    for a server this run starts (a fresh process counts from nothing)."""
    if cfg["endpoint"]:
        return scrape_histograms(_base_url(cfg["endpoint"]))
    rig = current_rig()
    if rig is not None and rig.key == rig_key(cfg, "vllm") and rig.alive():
        return scrape_histograms(rig.server.base_url)
    return {E2E_HISTOGRAM: {"count": 0.0, "sum": 0.0},
            QUEUE_HISTOGRAM: {"count": 0.0, "sum": 0.0}}, None


def probe_signals(base_url: str, timeout_s: float = 5.0) -> dict:
    """Does ``GET base_url/metrics`` expose :data:`SIGNAL_METRICS`?

    ``{"available", "metrics_url", "found", "reason"}``; never raises for the server's
    answer (a 404, a refused connection and a page without the names are all "no").
    """
    url = base_url.rstrip("/") + "/metrics"
    out = {"available": False, "metrics_url": url, "found": [], "reason": None}
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            text = resp.read(8 << 20).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        out["reason"] = f"GET /metrics answered HTTP {exc.code}"
        return out
    except (OSError, ValueError) as exc:
        out["reason"] = f"GET /metrics failed: {type(exc).__name__}: {exc}"[:200]
        return out
    found = sorted(metric_names(text) & set(SIGNAL_METRICS))
    out["found"] = found
    missing = [m for m in SIGNAL_METRICS if m not in found]
    if missing:
        out["reason"] = f"/metrics has no {', '.join(missing)}"
    else:
        out["available"] = True
    return out


def refuse_blind_policy(policy, signals: dict) -> None:
    """InputError when ``policy`` reads engine signals the server does not expose."""
    needs = tuple(getattr(policy, "requires_signals", ()) or ())
    if not needs or signals["available"]:
        return
    blind = [n for n, c in POLICIES.items() if not c.requires_signals]
    where = signals.get("metrics_url") or "the server"
    raise InputError(
        f"policy {policy.name!r} reads {', '.join(needs)}, which come from "
        f"{' and '.join(SIGNAL_METRICS)}, but {where} does not provide them "
        f"({signals['reason']})", column="policy",
        fix=f"replay a policy that reads no engine signals ({', '.join(blind)}), or serve "
            "with vLLM (without --disable-log-stats) or `evalkit serve`, whose /metrics "
            "has them")


def stats_off_reason(vllm_args) -> str | None:
    """Why ``vllm serve`` with these arguments exports no queue gauges (None: it does).

    vLLM feeds its Prometheus gauges from its stats loggers, which ``--disable-log-stats``
    turns off, as recent versions do for more than one API server process."""
    args = [str(a) for a in vllm_args]
    for i, arg in enumerate(args):
        if arg == "--disable-log-stats":
            return "vllm_args has --disable-log-stats"
        key, _, value = arg.partition("=")
        if key == "--api-server-count":
            value = value or (args[i + 1] if i + 1 < len(args) else "1")
            if value.isdigit() and int(value) > 1:
                return f"vllm_args has --api-server-count {value}"
    return None


def _server_factory(cfg: dict):
    def start(cfg: dict, log_dir: str) -> Server:
        if cfg["serve_vllm"]:
            exe = shutil.which("vllm")
            if exe is None:
                try:
                    import vllm  # noqa: F401
                except ImportError as exc:
                    raise InputError("serve_vllm needs vllm, which is not installed",
                                     column="backend_config.serve_vllm",
                                     fix="pip install 'evalkit[vllm]' or pass endpoint/model "
                                         "of a running server") from exc
                argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                        "--model", str(cfg["serve_vllm"])]
            else:
                argv = [exe, "serve", str(cfg["serve_vllm"])]
            port = free_port()
            argv += ["--host", "127.0.0.1", "--port", str(port), *map(str, cfg["vllm_args"])]
            proc = Managed("vllm", argv, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                           log_path=os.path.join(log_dir, "vllm.log"))
            name = cfg["model"] or str(cfg["serve_vllm"])
            return Server(f"http://127.0.0.1:{port}", name, "vllm", proc,
                          {"vllm_argv": argv})
        if not cfg["endpoint"] or not cfg["model"]:
            raise InputError("the vllm backend needs endpoint and model, or serve_vllm",
                             column="backend_config.endpoint",
                             fix="--endpoint http://HOST:PORT --model NAME, or --serve-vllm MODEL")
        url = _base_url(cfg["endpoint"])
        server = Server(url, str(cfg["model"]), "endpoint", None, {})
        asyncio.run(wait_healthy(server, ENDPOINT_HEALTH_WAIT_S))
        asyncio.run(check_model(server))
        return server
    return start


def mark_signals(out: RunOutput, policy, probed: dict | None) -> RunOutput:
    """Record whether the engine signals were observed; a policy that needed them and
    never got one has no valid run."""
    sig = out.signals
    scrapes = int(len(sig)) if sig is not None else 0
    ok = int(sig["scrape_ok"].fillna(False).astype(bool).sum()) if scrapes else 0
    info = dict(probed or {"metrics_url": None, "found": list(SIGNAL_METRICS),
                           "reason": None})
    info.update({"metrics": list(SIGNAL_METRICS), "scrapes": scrapes, "scrapes_ok": ok,
                 "available": bool(ok) and (probed is None or probed["available"])})
    if not info["available"] and info["reason"] is None:
        errors = sig["error"].dropna() if scrapes and "error" in sig else []
        info["reason"] = (str(errors.iloc[0]) if len(errors) else "no scrape succeeded")
    out.effective["signals"] = info
    if not info["available"]:
        out.notes.append(f"engine signals unavailable ({info['reason']}): queue_running, "
                         "queue_waiting and pressure were not observed and reached the "
                         "policy as 0")
        needs = tuple(getattr(policy, "requires_signals", ()) or ())
        if needs and out.error is None:
            out.complete = False
            out.error = (f"policy {policy.name!r} reads {', '.join(needs)} but no metrics "
                         f"scrape succeeded during the run ({info['reason']})")
    elif ok < scrapes:
        out.notes.append(f"{scrapes - ok} of {scrapes} metrics scrapes failed")
    return out


def recorded_probe(meta: dict) -> dict | None:
    """The capacity probe a vLLM run.json carries (the replay client's, as for torch runs):
    a sweep hands it to the seed's later runs."""
    return coordinator.recorded_probe(meta)


def replay(spec, trace, policy, *, progress=None) -> RunOutput:
    cfg = prepare(spec, "vllm")
    if cfg["endpoint"] and cfg["serve_vllm"]:
        raise InputError("give either endpoint or serve_vllm, not both",
                         column="backend_config.serve_vllm", fix="drop one of them")
    probed = None
    if cfg["endpoint"]:                 # a running server: check before learners start
        probed = probe_signals(_base_url(cfg["endpoint"]))
    elif cfg["serve_vllm"] and stats_off_reason(cfg["vllm_args"]):
        probed = {"available": False, "metrics_url": None, "found": [],
                  "reason": stats_off_reason(cfg["vllm_args"])}
    if probed is not None:
        refuse_blind_policy(policy, probed)
    before, why = _server_before_run(cfg)
    out = run_replay(spec, trace, policy, cfg=cfg, start_server=_server_factory(cfg),
                     backend="vllm", progress=progress)
    after = None
    if before is not None and out.effective.get("base_url"):
        after, why = scrape_histograms(str(out.effective["base_url"]))
    out.effective[SERVER_VIEW_KEY] = server_view(before, after, out.effective, why)
    return mark_signals(out, policy, probed)
