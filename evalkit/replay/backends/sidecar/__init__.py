"""The serving sidecar: a small OpenAI/vLLM-compatible server over a random-init
transformers model (``evalkit serve``, and the server the torch backend replays against).

- :mod:`.serve` builds the engine and serves it; it is the child process the torch backend
  starts (``python -m evalkit.replay.backends.sidecar.serve``) and what ``evalkit serve`` runs;
  :mod:`.config` resolves and checks its settings;
- :mod:`.server` is the HTTP side (routes, limits, auth), :mod:`.engine` the continuous
  batching loop with :mod:`.sequence`, :mod:`.token_sampler`, :mod:`.kv_batch` and
  :mod:`.tokenizer`; :mod:`.metrics` exports vLLM's Prometheus names;
- the OpenAI wire format is two modules: :mod:`.openai_requests` (request types, field
  readers, prompts, sampling options, request parsers and vLLM's error object: everything
  from a request body to a parsed request or a refusal) and :mod:`.openai_responses` (the
  bodies and stream chunks that go back).

Layering: the sidecar imports the base modules and two modules beside it in
``replay/backends/``, never the torch backend (``replay/backends/torch/``: the DiLoCo
learners, the rig and the replay client), which in turn never imports the sidecar.  What
both wings need lives one level up: :mod:`evalkit.replay.backends.procs` (child processes,
and the environment variable that hands a started sidecar its admin key) and
:mod:`evalkit.replay.backends.models` (the model presets that the learners and the
sidecar's engine build from).  The torch backend talks to the sidecar only across a process
boundary: a JSON settings file, that environment variable, and HTTP.
"""
