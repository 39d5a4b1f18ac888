"""The sidecar's Prometheus metrics, under vLLM's names and labels (``model_name``).

Written with ``prometheus_client``, so ``/metrics`` has HELP/TYPE lines and the exposition
format any Prometheus parser reads; a dashboard or scraper written for vLLM reads the sidecar
unchanged (and evalkit's scraper reads vLLM unchanged).  Everything is observed in the
engine thread, at the moment the engine produces a token or finishes a request:

======================================== ====================================================
``vllm:num_requests_running`` / waiting  gauges, read at scrape time
``vllm:kv_cache_usage_perc``             share of the notional KV capacity (``kv_cache_tokens``)
                                         held by running requests (also under the older name
                                         ``vllm:gpu_cache_usage_perc``)
``vllm:prompt_tokens_total``             prompt tokens of every admitted sequence (each of
                                         the ``n`` choices of a prompt counts, as in vLLM v1;
                                         equals ``vllm:request_prompt_tokens_sum`` once they
                                         finish)
``vllm:prefix_cache_queries_total``      prompt tokens looked up for reuse (= prompt tokens)
``vllm:prefix_cache_hits_total``         prompt tokens whose KV another sequence of the same
                                         prefill computed (identical prompts, ``n`` > 1)
``vllm:num_preemptions_total``           sequences preempted (KV capacity; recompute mode)
``vllm:generation_tokens_total``         generated tokens
``vllm:request_success_total``           finished requests by ``finished_reason``
                                         (``stop`` | ``length`` | ``abort`` | ``error``)
``vllm:time_to_first_token_seconds``     arrival -> first token
``vllm:inter_token_latency_seconds``     gap between consecutive tokens of a request (also as
                                         ``vllm:time_per_output_token_seconds``, the older name)
``vllm:e2e_request_latency_seconds``     arrival -> last token
``vllm:request_queue_time_seconds``      arrival -> admitted into the batch
``vllm:request_inference_time_seconds``  admitted -> last token (RUNNING: prefill + decode)
``vllm:request_prefill_time_seconds``    admitted -> first token
``vllm:request_decode_time_seconds``     first token -> last token
``vllm:request_time_per_output_token_seconds``  per request: decode time / (tokens - 1)
``vllm:request_prompt_tokens`` / ``vllm:request_generation_tokens``  per-request lengths
======================================== ====================================================

Times are seconds on the sidecar's monotonic clock; "arrival" is when the HTTP handler
queued the request.  ``reset()`` starts every counter and histogram from zero (between
replay runs on a warm rig).
"""

from __future__ import annotations

# vLLM's bucket boundaries, with finer low buckets where a CPU sidecar lives.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
               0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_BUCKETS = (0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                   30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000)

FINISHED_REASONS = ("stop", "length", "abort", "error")


class ServingMetrics:
    def __init__(self, model_name: str, *, running, waiting, kv_used_tokens,
                 kv_cache_tokens: int):
        """``running``/``waiting``/``kv_used_tokens``: callables read at scrape time."""
        import prometheus_client

        prometheus_client.disable_created_metrics()   # vLLM does not export *_created
        self.model_name = model_name
        self._gauges = (running, waiting, kv_used_tokens, int(kv_cache_tokens))
        self._resets = 0
        self.reset(count=False)

    def reset(self, count: bool = True) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self._resets += int(count)

        reg = CollectorRegistry(auto_describe=True)
        lab = ["model_name"]
        name = self.model_name
        running, waiting, kv_used, kv_total = self._gauges

        def gauge(metric, doc, fn):
            g = Gauge(metric, doc, lab, registry=reg)
            g.labels(name).set_function(fn)

        gauge("vllm:num_requests_running", "Number of requests in the model execution batch.",
              lambda: float(running()))
        gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
              lambda: float(waiting()))
        kv = lambda: min(1.0, float(kv_used()) / kv_total)  # noqa: E731
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv)
        gauge("vllm:gpu_cache_usage_perc",
              "KV-cache usage (older name of vllm:kv_cache_usage_perc).", kv)

        def counter(metric, doc, extra=()):
            return Counter(metric, doc, lab + list(extra), registry=reg)

        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens",
                                         "Number of generation tokens processed.")
        self.request_success = counter("vllm:request_success",
                                       "Count of successfully processed requests.",
                                       ["finished_reason"])
        for reason in FINISHED_REASONS:           # present at zero from the start, like vLLM
            self.request_success.labels(name, reason)
        self.prefix_queries = counter("vllm:prefix_cache_queries",
                                      "Prefix cache queries, in terms of number of queried "
                                      "tokens.")
        self.prefix_hits = counter("vllm:prefix_cache_hits",
                                   "Prefix cache hits, in terms of number of cached tokens.")
        self.preemptions = counter("vllm:num_preemptions",
                                   "Cumulative number of preemption from the engine.")
        for c in (self.prompt_tokens, self.generation_tokens, self.prefix_queries,
                  self.prefix_hits, self.preemptions):
            c.labels(name)

        def hist(metric, doc, buckets):
            return Histogram(metric, doc, lab, buckets=buckets, registry=reg).labels(name)

        self.ttft = hist("vllm:time_to_first_token_seconds",
                         "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.itl = hist("vllm:inter_token_latency_seconds",
                        "Histogram of inter-token latency in seconds.", ITL_BUCKETS)
        self.tpot_old = hist("vllm:time_per_output_token_seconds",
                             "Histogram of time per output token in seconds (older name of "
                             "vllm:inter_token_latency_seconds).", ITL_BUCKETS)
        self.e2e = hist("vllm:e2e_request_latency_seconds",
                        "Histogram of end to end request latency in seconds.", REQUEST_BUCKETS)
        self.queue = hist("vllm:request_queue_time_seconds",
                          "Histogram of time spent in WAITING phase for request.",
                          REQUEST_BUCKETS)
        self.inference = hist("vllm:request_inference_time_seconds",
                              "Histogram of time spent in RUNNING phase for request.",
                              REQUEST_BUCKETS)
        self.prefill = hist("vllm:request_prefill_time_seconds",
                            "Histogram of time spent in PREFILL phase for request.",
                            REQUEST_BUCKETS)
        self.decode = hist("vllm:request_decode_time_seconds",
                           "Histogram of time spent in DECODE phase for request.",
                           REQUEST_BUCKETS)
        self.request_tpot = hist("vllm:request_time_per_output_token_seconds",
                                 "Histogram of time_per_output_token_seconds per request.",
                                 ITL_BUCKETS)
        self.request_prompt = hist("vllm:request_prompt_tokens",
                                   "Number of prefill tokens processed.", TOKEN_BUCKETS)
        self.request_generation = hist("vllm:request_generation_tokens",
                                       "Number of generation tokens processed.", TOKEN_BUCKETS)
        self.iterations = counter("evalkit:engine_iterations", "Batched decode steps.")
        self.prefill_batches = counter("evalkit:prefill_batches", "Batched prefill forwards.")
        self.resets = counter("evalkit:engine_resets", "Engine resets (between replay runs).")
        self.iterations.labels(name)
        self.prefill_batches.labels(name)
        self.resets.labels(name).inc(self._resets)
        self.registry = reg

    # -- observations (engine thread) ----------------------------------------------------------
    def admitted(self, queue_s: float, prompt_tokens: int, cached: int = 0) -> None:
        """A sequence's first admission: ``cached`` of its prompt tokens reused KV."""
        name = self.model_name
        self.queue.observe(queue_s)
        self.prompt_tokens.labels(name).inc(prompt_tokens)
        self.prefix_queries.labels(name).inc(prompt_tokens)
        self.prefix_hits.labels(name).inc(cached)

    def preempted(self) -> None:
        self.preemptions.labels(self.model_name).inc()

    def token(self, first: bool, since_s: float) -> None:
        """``since_s``: since arrival for the first token, else since the previous token."""
        self.generation_tokens.labels(self.model_name).inc()
        if first:
            self.ttft.observe(since_s)
        else:
            self.itl.observe(since_s)
            self.tpot_old.observe(since_s)

    def finished(self, reason: str, *, e2e_s: float, prefill_s: float | None,
                 decode_s: float | None, inference_s: float | None = None,
                 prompt_tokens: int | None, generated: int) -> None:
        """``prompt_tokens`` None: never admitted (its prompt was not counted either)."""
        self.request_success.labels(self.model_name, reason).inc()
        self.e2e.observe(e2e_s)
        if inference_s is not None:
            self.inference.observe(inference_s)
        if prefill_s is not None:
            self.prefill.observe(prefill_s)
        if decode_s is not None:
            self.decode.observe(decode_s)
            if generated > 1:
                self.request_tpot.observe(decode_s / (generated - 1))
        if prompt_tokens is not None:
            self.request_prompt.observe(prompt_tokens)
            self.request_generation.observe(generated)

    def step(self, prefill: bool) -> None:
        (self.prefill_batches if prefill else self.iterations).labels(self.model_name).inc()

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest
        return generate_latest(self.registry)
