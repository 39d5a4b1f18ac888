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
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import urllib.error
import urllib.request

from evalkit.errors import InputError
from evalkit.policies import POLICIES
from evalkit.replay.spec import RunOutput

from .procs import Managed, free_port
from .torch import prepare
from .torch.coordinator import run_replay
from .torch.health import Server, check_model, wait_healthy


SIGNAL_METRICS = ("vllm:num_requests_running", "vllm:num_requests_waiting")


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
        asyncio.run(wait_healthy(server, 3.0))      # fail before learners start
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
    out = run_replay(spec, trace, policy, cfg=cfg, start_server=_server_factory(cfg),
                     backend="vllm", progress=progress)
    return mark_signals(out, policy, probed)
