"""Bring results from other tools into the evalkit run-log format (backend ``import``).

- :mod:`evalkit.interop.vllm_bench`: a ``vllm bench serve --save-result --save-detailed``
  JSON (per-request arrays) plus separately supplied merge windows -> one run.
- :mod:`evalkit.interop.aiperf` / :mod:`evalkit.interop.inference_perf`: AIPerf artifact
  directories (one run per profiling run) and inference-perf per-request reports -> runs;
  ``read_aiperf(path)`` / ``read_inference_perf(path, tool_version=...)`` return
  :class:`evalkit.interop.harness_runs.HarnessRun` lists without writing anything.
- :mod:`evalkit.interop.summary_table`: a per-run summary table (the audit's table input)
  -> one run per row, with synthesised request rows that reproduce each row's aggregates.
"""
