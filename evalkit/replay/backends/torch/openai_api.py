"""OpenAI request parsing and response shapes for the sidecar (pure: no HTTP, no torch).

``parse_completion`` / ``parse_chat`` turn a request body into a :class:`GenerationRequest`
or raise :class:`APIError`, whose ``body()`` is OpenAI's error object.  Status codes:
400 for values the server cannot serve (a negative ``max_tokens``, a prompt longer than the
context, an unsupported option), 404 for an unknown model or route, 422 for a body that is
not the documented schema (missing field, wrong JSON type), 503 when the engine cannot
serve (see the sidecar).  Unknown extra fields are ignored, as vLLM does.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from .tokenizer import ROLES, SidecarTokenizer


class APIError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None,
                 type: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or {400: "invalid_request_error", 404: "not_found_error",
                             405: "invalid_request_error", 422: "invalid_request_error",
                             503: "service_unavailable_error"}.get(status, "server_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def _schema(param: str, what: str) -> APIError:
    return APIError(422, f"'{param}' {what}", param=param, code="invalid_type")


def _bad(param: str, what: str, code: str = "invalid_value") -> APIError:
    return APIError(400, what, param=param, code=code)


@dataclass(frozen=True)
class Sampling:
    max_tokens: int
    min_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0                      # 0: off
    seed: int | None = None
    stop: tuple = ()
    stop_token_ids: tuple = ()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1


@dataclass
class GenerationRequest:
    kind: str                           # "completion" | "chat"
    model: str
    prompts: list                       # list of token-id lists
    n: int
    sampling: Sampling
    stream: bool
    include_usage: bool
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))


def _typed(body: dict, key: str, types, what: str, default=None):
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise _schema(key, f"must be {what}, got a boolean")
    if not isinstance(v, types):
        raise _schema(key, f"must be {what}, got {type(v).__name__}")
    return v


def _check_ids(ids: list, vocab: int, param: str) -> list:
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int):
            raise _schema(param, "token ids must be integers")
        if not 0 <= t < vocab:
            raise _bad(param, f"token id {t} is out of vocabulary [0, {vocab})")
    return list(ids)


def completion_prompts(prompt, tok: SidecarTokenizer) -> list:
    """string | list of strings | token ids | list of token-id lists -> token-id lists."""
    if prompt is None:
        raise _schema("prompt", "is required")
    if isinstance(prompt, str):
        return [tok.encode(prompt)]
    if not isinstance(prompt, list) or not prompt:
        raise _schema("prompt", "must be a string, a list of strings, a list of token ids or "
                                "a list of token-id lists")
    if all(isinstance(p, str) for p in prompt):
        return [tok.encode(p) for p in prompt]
    if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
        return [_check_ids(prompt, tok.vocab, "prompt")]
    if all(isinstance(p, list) for p in prompt):
        return [_check_ids(p, tok.vocab, "prompt") for p in prompt]
    raise _schema("prompt", "mixes types: use one of string, list of strings, token ids, "
                            "list of token-id lists")


def _message_text(m, i: int) -> str:
    content = m.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if not isinstance(part, dict) or "type" not in part:
                raise _schema(f"messages[{i}].content", "parts must be objects with a type")
            if part["type"] != "text":
                raise _bad(f"messages[{i}].content",
                           f"content part type {part['type']!r} is not supported: the sidecar "
                           "serves text only", code="unsupported_content")
            if not isinstance(part.get("text"), str):
                raise _schema(f"messages[{i}].content", "text parts need a string 'text'")
            out.append(part["text"])
        return "".join(out)
    raise _schema(f"messages[{i}].content", "must be a string, a list of parts or null")


def chat_messages(messages) -> list:
    if messages is None:
        raise _schema("messages", "is required")
    if not isinstance(messages, list) or not messages:
        raise _schema("messages", "must be a non-empty list of {role, content} objects")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise _schema(f"messages[{i}]", "must be an object")
        role = m.get("role")
        if role not in ROLES:
            raise _bad(f"messages[{i}].role", f"unknown role {role!r}; use one of {list(ROLES)}")
        out.append({"role": role, "content": _message_text(m, i)})
    return out


def _sampling(body: dict, max_tokens: int, prompts: list, max_model_len: int) -> Sampling:
    temperature = float(_typed(body, "temperature", (int, float), "a number", 1.0))
    if temperature < 0:
        raise _bad("temperature", f"temperature must be >= 0, got {temperature}")
    top_p = float(_typed(body, "top_p", (int, float), "a number", 1.0))
    if not 0 < top_p <= 1:
        raise _bad("top_p", f"top_p must be in (0, 1], got {top_p}")
    top_k = _typed(body, "top_k", int, "an integer", 0)
    if top_k < -1:
        raise _bad("top_k", f"top_k must be -1, 0 (off) or >= 1, got {top_k}")
    seed = _typed(body, "seed", int, "an integer", None)
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise _schema("stop", "must be a string or a list of strings")
    stop_ids = _typed(body, "stop_token_ids", list, "a list of integers", [])
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
        raise _schema("stop_token_ids", "must be a list of integers")
    min_tokens = _typed(body, "min_tokens", int, "an integer", 0)
    if not 0 <= min_tokens <= max_tokens:
        raise _bad("min_tokens", f"min_tokens must be in [0, max_tokens={max_tokens}], "
                                 f"got {min_tokens}")
    _typed(body, "ignore_eos", bool, "a boolean")
    longest = max(len(p) for p in prompts)
    if longest + max_tokens > max_model_len:
        raise _bad("max_tokens" if longest < max_model_len else "prompt",
                   f"This model's maximum context length is {max_model_len} tokens. However, "
                   f"you requested {longest + max_tokens} tokens ({longest} in the prompt, "
                   f"{max_tokens} in the completion). Please reduce the length of the prompt "
                   "or completion.", code="context_length_exceeded")
    return Sampling(max_tokens=max_tokens, min_tokens=min_tokens, temperature=temperature,
                    top_p=top_p, top_k=0 if top_k == -1 else top_k, seed=seed,
                    stop=tuple(s for s in stop if s), stop_token_ids=tuple(stop_ids))


def _common(body, kind: str, prompts: list, tok: SidecarTokenizer, *, model_name: str,
            max_model_len: int, max_tokens_key: tuple, default_max_tokens: int | None
            ) -> GenerationRequest:
    model = _typed(body, "model", str, "a string", None)
    if model is not None and model != model_name:
        raise APIError(404, f"The model `{model}` does not exist.", param="model",
                       code="model_not_found")
    for p in prompts:
        if not p:
            raise _bad("prompt" if kind == "completion" else "messages",
                       "the prompt is empty: it must have at least one token")
    n = _typed(body, "n", int, "an integer", 1)
    if not 1 <= n <= 128:
        raise _bad("n", f"n must be in [1, 128], got {n}")
    best_of = _typed(body, "best_of", int, "an integer", None)
    if best_of is not None and best_of != n:
        raise _bad("best_of", "best_of other than n is not supported", code="unsupported")
    max_tokens = None
    for key in max_tokens_key:
        max_tokens = _typed(body, key, int, "an integer", None)
        if max_tokens is not None:
            if max_tokens < 1:
                raise _bad(key, f"{key} must be at least 1, got {max_tokens}")
            break
    if max_tokens is None:
        longest = max(len(p) for p in prompts)
        max_tokens = (default_max_tokens if default_max_tokens is not None
                      else max(1, max_model_len - longest))
        max_tokens = max(1, min(max_tokens, max_model_len - longest))
    stream = bool(_typed(body, "stream", bool, "a boolean", False))
    opts = body.get("stream_options")
    if opts is not None and not stream:
        raise _bad("stream_options", "stream_options is only allowed when stream is true")
    if opts is not None and not isinstance(opts, dict):
        raise _schema("stream_options", "must be an object")
    include_usage = bool((opts or {}).get("include_usage", False))
    return GenerationRequest(kind=kind, model=model_name, prompts=prompts, n=n,
                             sampling=_sampling(body, max_tokens, prompts, max_model_len),
                             stream=stream, include_usage=include_usage)


def _body(body) -> dict:
    if not isinstance(body, dict):
        raise APIError(422, "the request body must be a JSON object", code="invalid_type")
    return body


def parse_completion(body, tok: SidecarTokenizer, *, model_name: str, max_model_len: int
                     ) -> GenerationRequest:
    body = _body(body)
    if body.get("echo"):
        raise _bad("echo", "echo is not supported by the sidecar", code="unsupported")
    if body.get("logprobs") is not None:
        raise _bad("logprobs", "logprobs are not supported by the sidecar", code="unsupported")
    if body.get("suffix"):
        raise _bad("suffix", "suffix is not supported by the sidecar", code="unsupported")
    prompts = completion_prompts(body.get("prompt"), tok)
    return _common(body, "completion", prompts, tok, model_name=model_name,
                   max_model_len=max_model_len, max_tokens_key=("max_tokens",),
                   default_max_tokens=16)


def parse_chat(body, tok: SidecarTokenizer, *, model_name: str, max_model_len: int,
               default_max_tokens: int) -> GenerationRequest:
    body = _body(body)
    if body.get("logprobs") or body.get("top_logprobs"):
        raise _bad("logprobs", "logprobs are not supported by the sidecar", code="unsupported")
    messages = chat_messages(body.get("messages"))
    prompts = [tok.encode(tok.chat_prompt(messages))]
    return _common(body, "chat", prompts, tok, model_name=model_name,
                   max_model_len=max_model_len,
                   max_tokens_key=("max_completion_tokens", "max_tokens"),
                   default_max_tokens=default_max_tokens)


# -- response shapes ---------------------------------------------------------------------------

def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def response(req: GenerationRequest, choices: list, use: dict) -> dict:
    """Non-streaming body; ``choices`` are ``(index, text, finish_reason)``."""
    if req.kind == "completion":
        return {"id": f"cmpl-{req.request_id}", "object": "text_completion",
                "created": req.created, "model": req.model,
                "choices": [{"index": i, "text": text, "logprobs": None,
                             "finish_reason": fin, "stop_reason": None}
                            for i, text, fin in choices],
                "usage": use}
    return {"id": f"chatcmpl-{req.request_id}", "object": "chat.completion",
            "created": req.created, "model": req.model,
            "choices": [{"index": i, "message": {"role": "assistant", "content": text,
                                                 "tool_calls": []},
                         "logprobs": None, "finish_reason": fin, "stop_reason": None}
                        for i, text, fin in choices],
            "usage": use}


def chunk(req: GenerationRequest, index: int | None, text: str | None,
          finish_reason: str | None = None, *, first: bool = False,
          use: dict | None = None) -> dict:
    """One streaming event: a choice delta, or (``index`` None) the final usage chunk."""
    if req.kind == "completion":
        out = {"id": f"cmpl-{req.request_id}", "object": "text_completion",
               "created": req.created, "model": req.model,
               "choices": [] if index is None else [
                   {"index": index, "text": text or "", "logprobs": None,
                    "finish_reason": finish_reason, "stop_reason": None}]}
    else:
        delta: dict = {}
        if first:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        out = {"id": f"chatcmpl-{req.request_id}", "object": "chat.completion.chunk",
               "created": req.created, "model": req.model,
               "choices": [] if index is None else [
                   {"index": index, "delta": delta, "logprobs": None,
                    "finish_reason": finish_reason}]}
    if req.include_usage:
        out["usage"] = use
    return out
