"""OpenAI request parsing and response shapes for the sidecar (pure: no HTTP, no torch).

``parse_completion`` / ``parse_chat`` turn a request body into a :class:`GenerationRequest`
or raise :class:`APIError`, whose ``body()`` is vLLM's error object (``{"error": {"message",
"type", "param", "code"}}``, ``code`` the HTTP status).  Every request that is not served is
a 400: a body that is not the schema (missing field, wrong JSON type), a value out of range
(vLLM's checks and wording: ``temperature must be non-negative, got -1.0.``), a prompt longer
than the context, or an option the sidecar does not implement (``tools``, ``response_format``
other than text, ``logit_bias``, prompt logprobs, structured outputs, ...: "X is not currently
supported").  404 is an unknown model.  Other unknown fields are ignored, as vLLM does.
Temperatures below 1e-5 sample greedily and those below 1e-2 are raised to 1e-2, and logprobs
come from the model's raw distribution, as in vLLM.

This module is the one import for all of it; the parts live in:

- :mod:`.openai_errors`: :class:`APIError` and vLLM's error types;
- :mod:`.openai_types`: :class:`Sampling` and :class:`GenerationRequest`;
- :mod:`.openai_fields`: typed readers of one JSON field;
- :mod:`.openai_prompts`: completion prompts and chat messages;
- :mod:`.openai_sampling`: the sampling options and their vLLM checks;
- :mod:`.openai_requests`: the completion, chat, tokenize and detokenize parsers;
- :mod:`.openai_responses`: response bodies, stream chunks, usage, logprobs.
"""

from __future__ import annotations

from .openai_errors import ERROR_TYPES, APIError, unsupported
from .openai_prompts import chat_messages, completion_prompts, too_many_seqs
from .openai_requests import detokenize_request, parse_chat, parse_completion, tokenize_request
from .openai_responses import chunk, logprobs_block, response, usage
from .openai_sampling import INT64, MAX_LOGPROBS, MIN_TEMPERATURE, SAMPLING_EPS
from .openai_types import GenerationRequest, Sampling

__all__ = ["ERROR_TYPES", "INT64", "MAX_LOGPROBS", "MIN_TEMPERATURE", "SAMPLING_EPS", "APIError",
           "GenerationRequest", "Sampling", "chat_messages", "chunk", "completion_prompts",
           "detokenize_request", "logprobs_block", "parse_chat", "parse_completion", "response",
           "tokenize_request", "too_many_seqs", "unsupported", "usage"]
