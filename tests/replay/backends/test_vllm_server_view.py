"""The vLLM backend's record of the server's own view of a run: the deltas of its /metrics
e2e latency and queue time histograms between a scrape before and one after the run,
with the rig's own capacity-probe requests named (real_sidecar holds them against the
client's requests).  The /metrics pages are recorded text in vLLM's exposition format."""

from __future__ import annotations

import http.server
import threading

import pytest

from evalkit.replay.backends import vllm as vb


def _page(count, total, queue_count=None, queue_sum=None, model="m"):
    lines = ["# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency.",
             "# TYPE vllm:e2e_request_latency_seconds histogram",
             f'vllm:e2e_request_latency_seconds_bucket{{le="1.0",model_name="{model}"}} 3.0',
             f'vllm:e2e_request_latency_seconds_sum{{engine="0",model_name="{model}"}} {total}',
             f'vllm:e2e_request_latency_seconds_count{{engine="0",model_name="{model}"}} {count}',
             'vllm:num_requests_running{engine="0",model_name="m"} 2.0',
             "process_cpu_seconds_total 1.5"]
    if queue_count is not None:
        lines += [f'vllm:request_queue_time_seconds_sum{{engine="0",model_name="{model}"}} '
                  f"{queue_sum}",
                  f'vllm:request_queue_time_seconds_count{{engine="0",model_name="{model}"}} '
                  f"{queue_count}"]
    return "\n".join(lines) + "\n"


def test_histogram_totals_sum_the_label_sets_and_skip_buckets_and_other_metrics():
    text = _page(10, 12.5, 10, 0.5) + _page(2, 1.5, model="other")
    assert vb.histogram_totals(text) == {
        vb.E2E_HISTOGRAM: {"count": 12.0, "sum": 14.0},
        vb.QUEUE_HISTOGRAM: {"count": 10.0, "sum": 0.5}}
    assert vb.histogram_totals("vllm:num_requests_running 1\n") == {}


def _totals(*args):
    return vb.histogram_totals(_page(*args))


def test_the_view_is_the_histograms_delta_over_the_run():
    view = vb.server_view(_totals(10, 12.5, 10, 0.5), _totals(110, 62.5, 110, 2.5),
                          {"capacity_probe_cached": True})
    assert view == {"available": True, "source": "vllm /metrics", "requests": 100.0,
                    "e2e_sum_s": 50.0, "rig_requests": 0, "rig_latency_bound_s": 0.0,
                    "queue_requests": 100.0, "queue_sum_s": 2.0}
    no_queue = vb.server_view(_totals(0, 0.0), _totals(4, 2.0), {"capacity_probe_cached": True})
    assert "queue_requests" not in no_queue and no_queue["requests"] == 4.0


def test_a_capacity_probe_during_the_run_is_named_with_its_client_side_bound():
    """The probe sends one warm-up request and then probe_requests at once: each took no
    longer, as the client saw it, than single_request_s or probe_elapsed_s."""
    view = vb.server_view(_totals(0, 0.0), _totals(105, 60.0),
                          {"capacity_probe_cached": False, "probe_requests": 4,
                           "probe_elapsed_s": 2.0, "single_request_s": 0.5})
    assert view["rig_requests"] == 5 and view["rig_latency_bound_s"] == 8.5


def test_a_missing_scrape_or_a_restarted_server_leaves_the_view_unavailable():
    got = vb.server_view(None, _totals(1, 1.0), {}, "GET /metrics failed: refused")
    assert got == {"available": False, "source": "vllm /metrics",
                   "reason": "GET /metrics failed: refused"}
    got = vb.server_view(_totals(50, 10.0), _totals(3, 1.0), {"capacity_probe_cached": True})
    assert got["available"] is False and "went backwards" in got["reason"]


@pytest.fixture
def metrics_server():
    """A server whose /metrics answers the pages given, one per GET (the last one repeats)."""
    pages: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = (pages.pop(0) if len(pages) > 1 else pages[0]).encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", pages
    httpd.shutdown()
    httpd.server_close()


def test_scrape_reads_the_histograms_or_says_why_not(metrics_server):
    url, pages = metrics_server
    pages.append(_page(7, 3.5))
    assert vb.scrape_histograms(url) == (_totals(7, 3.5), None)
    pages[:] = ['vllm:num_requests_running{model_name="m"} 0\n']
    totals, why = vb.scrape_histograms(url)
    assert totals is None and why == f"{url}/metrics has no vllm:e2e_request_latency_seconds"
    totals, why = vb.scrape_histograms("http://127.0.0.1:9")
    assert totals is None and why.startswith("GET http://127.0.0.1:9/metrics failed")


def test_before_the_run_an_endpoint_is_scraped_a_server_the_run_starts_counts_from_zero(
        metrics_server):
    url, pages = metrics_server
    pages.append(_page(40, 20.0))
    cfg = {"endpoint": url + "/v1", "serve_vllm": None}
    assert vb._server_before_run(cfg) == (_totals(40, 20.0), None)
    fresh, why = vb._server_before_run({"endpoint": None, "serve_vllm": "some/model",
                                        "reuse_rig": True, "n_learners": 1})
    assert why is None and fresh[vb.E2E_HISTOGRAM] == {"count": 0.0, "sum": 0.0}
