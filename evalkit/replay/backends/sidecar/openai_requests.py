"""The OpenAI/vLLM request side of the sidecar's wire format: from a request body to a parsed
request, or to vLLM's error object.

- **types**: :class:`Sampling` (the per-sequence sampling options the engine reads) and
  :class:`GenerationRequest` (one validated completion or chat request: token-id prompts,
  ``n``, streaming options).  Plain data.
- **errors**: an :class:`APIError` carries the HTTP status; ``body()`` is vLLM's error object
  (``{"error": {"message", "type", "param", "code"}}``, ``code`` the status).
  ``schema_error`` / ``value_error`` / ``unsupported`` are the three kinds of 400: a body that
  is not the schema, a value out of range, an option the sidecar does not implement.
- **fields**: typed readers of one JSON field (a boolean is never a number; numbers finite;
  integers in range; token ids inside the vocabulary; the body a JSON object).
- **prompts**: any of the four completion prompt shapes as token-id lists; chat
  ``messages`` (roles, text-only content) for the chat template.
- **sampling**: :func:`parse_sampling` reads temperature, top-p/k, min-p, seed, penalties,
  stop strings and token ids, min tokens and logprobs with vLLM's checks and wording
  (``temperature must be non-negative, got -1.0.``), and refuses a prompt plus ``max_tokens``
  longer than the context and stop strings beyond ``max_stop_strings`` or ``max_stop_bytes``.
  Temperatures below 1e-5 sample greedily and those below 1e-2 are raised to 1e-2, as in
  vLLM.
- **requests**: :func:`parse_completion` / :func:`parse_chat` turn a body into a
  :class:`GenerationRequest` or raise :class:`APIError`; :func:`tokenize_request` /
  :func:`detokenize_request` answer vLLM's ``/tokenize`` and ``/detokenize``.  Options the
  sidecar does not implement (``tools``, ``response_format`` other than text,
  ``logit_bias``, prompt logprobs, structured outputs, ...) are refused unless absent or at
  their no-op value; other unknown fields are ignored, as vLLM does.  404 is an unknown model.

What goes back out (responses, stream chunks, usage) is :mod:`.openai_responses`.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from functools import cached_property

from .tokenizer import ROLES, SidecarTokenizer

__all__ = ["Sampling", "GenerationRequest", "ERROR_TYPES", "APIError", "schema_error",
           "value_error", "unsupported", "typed", "number", "int_in", "check_ids",
           "json_object", "completion_prompts", "too_many_seqs", "chat_messages",
           "MAX_LOGPROBS", "MAX_STOP_STRINGS", "MAX_STOP_BYTES", "parse_sampling",
           "parse_completion", "parse_chat", "tokenize_request", "detokenize_request"]


# ----------------------------------------------------------------------------- types

@dataclass(frozen=True)
class Sampling:
    max_tokens: int
    min_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0                      # 0: off
    min_p: float = 0.0
    seed: int | None = None
    stop: tuple = ()
    stop_token_ids: frozenset = frozenset()
    include_stop_str_in_output: bool = False
    logprobs: int | None = None         # top alternatives per token; None: no logprobs
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0

    @property
    def penalized(self) -> bool:
        return (self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
                or self.repetition_penalty != 1.0)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @cached_property
    def stop_lookup(self) -> tuple:
        """``(set of stop strings, their distinct lengths ascending)``: built once per
        request, so matching a token costs a few set lookups whatever the number of strings."""
        return frozenset(self.stop), tuple(sorted({len(s) for s in self.stop}))


@dataclass
class GenerationRequest:
    kind: str                           # "completion" | "chat"
    model: str
    prompts: list                       # list of token-id lists
    n: int
    sampling: Sampling
    stream: bool
    include_usage: bool
    echo: tuple = ()                    # per prompt: the text echoed before the completion
    continuous_usage: bool = False      # usage so far in every streamed chunk (vLLM)
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))


# ----------------------------------------------------------------------------- errors

# vLLM's error ``type`` per status (its ErrorInfo: message, type, param, code = the status)
ERROR_TYPES = {400: "BadRequestError", 401: "Unauthorized", 404: "NotFoundError",
               405: "MethodNotAllowed", 408: "RequestTimeout", 413: "RequestEntityTooLarge",
               414: "RequestURITooLong", 429: "TooManyRequests",
               431: "RequestHeaderFieldsTooLarge", 500: "InternalServerError",
               501: "NotImplemented", 503: "ServiceUnavailable"}


class APIError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.headers = headers or {}
        self.type = ERROR_TYPES.get(status, "InternalServerError")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.status}}


def schema_error(param: str, what: str) -> APIError:
    return APIError(400, f"{param}: {what}", param=param)


def value_error(param: str, what: str) -> APIError:
    return APIError(400, what, param=param)


def unsupported(param: str, what: str | None = None) -> APIError:
    return APIError(400, f"{what or param} is not currently supported", param=param)


# ----------------------------------------------------------------------------- fields

def typed(body: dict, key: str, types, what: str, default=None):
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise schema_error(key, f"Input should be {what}, got a boolean")
    if not isinstance(v, types):
        raise schema_error(key, f"Input should be {what}, got {type(v).__name__}")
    return v


def number(body: dict, key: str, default: float) -> float:
    """A finite JSON number (an int too large for a float is not one)."""
    v = typed(body, key, (int, float), "a valid number", default)
    try:
        f = float(v)
    except OverflowError:
        f = float("inf")
    if not math.isfinite(f):
        raise value_error(key, f"{key} must be a finite number, got {v}.")
    return f


def int_in(body: dict, key: str, default, lo=None, hi=None, msg=None):
    v = typed(body, key, int, "a valid integer", default)
    if v is not None and ((lo is not None and v < lo) or (hi is not None and v > hi)):
        above = hi is not None and v > hi
        raise value_error(key, msg.format(v=v) if msg else
                          f"{key}: Input should be {'less' if above else 'greater'}"
                          f" than or equal to {hi if above else lo}")
    return v


def check_ids(ids: list, vocab: int, param: str) -> list:
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int):
            raise schema_error(param, "token ids must be integers")
        if not 0 <= t < vocab:
            raise value_error(param, f"token id {t} is out of vocabulary [0, {vocab})")
    return list(ids)


def json_object(body) -> dict:
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    return body


# ----------------------------------------------------------------------------- prompts

def completion_prompts(prompt, tok: SidecarTokenizer) -> list:
    """string | list of strings | token ids | list of token-id lists -> token-id lists."""
    if prompt is None:
        raise schema_error("prompt", "Field required")
    if isinstance(prompt, str):
        return [tok.encode(prompt)]
    if not isinstance(prompt, list) or not prompt:
        raise schema_error("prompt", "must be a string, a list of strings, a list of token ids or "
                                     "a list of token-id lists")
    if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
        return [check_ids(prompt, tok.vocab, "prompt")]
    if all(isinstance(p, str) for p in prompt):
        return [tok.encode(p) for p in prompt]
    if all(isinstance(p, list) for p in prompt):
        return [check_ids(p, tok.vocab, "prompt") for p in prompt]
    raise schema_error("prompt", "mixes types: use one of string, list of strings, token ids, "
                                 "list of token-id lists")


def too_many_seqs(prompts: int, n: int, limit: int) -> APIError:
    return value_error("prompt" if n == 1 else "n",
                       f"this request asks for {prompts * n} sequences ({prompts} prompt(s) x "
                       f"n={n}); the server serves at most {limit} per request "
                       "(max_seqs_per_request): split it into several requests")


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
                raise schema_error(f"messages[{i}].content", "parts must be objects with a type")
            if part["type"] != "text":
                raise unsupported(f"messages[{i}].content",
                                  f"content part type {part['type']!r} (the sidecar serves "
                                  "text only)")
            if not isinstance(part.get("text"), str):
                raise schema_error(f"messages[{i}].content", "text parts need a string 'text'")
            out.append(part["text"])
        return "".join(out)
    raise schema_error(f"messages[{i}].content", "must be a string, a list of parts or null")


def chat_messages(messages) -> list:
    if messages is None:
        raise schema_error("messages", "Field required")
    if not isinstance(messages, list) or not messages:
        raise schema_error("messages", "must be a non-empty list of {role, content} objects")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise schema_error(f"messages[{i}]", "must be an object")
        role = m.get("role")
        if role not in ROLES:
            raise value_error(f"messages[{i}].role",
                              f"unknown role {role!r}; use one of {list(ROLES)}")
        if m.get("tool_calls"):
            raise unsupported(f"messages[{i}].tool_calls", "tool calls")
        out.append({"role": role, "content": _message_text(m, i)})
    return out


# ----------------------------------------------------------------------------- sampling

INT64 = (-2**63, 2**63 - 1)       # vLLM's bounds for seed (torch.long)
SAMPLING_EPS = 1e-5               # below: greedy, as vLLM
MIN_TEMPERATURE = 1e-2            # vLLM raises smaller positive temperatures to this


MAX_LOGPROBS = 20                 # vLLM's default --max-logprobs
MAX_STOP_STRINGS = 64             # stop strings per request (OpenAI takes 4; serve config)
MAX_STOP_BYTES = 4096             # their UTF-8 bytes together (serve config)


def _logprobs(body: dict, kind: str) -> int | None:
    """How many top alternatives to return per token (0: the sampled token's only), or
    None: no logprobs.  Completions: ``logprobs: k``; chat: ``logprobs: true`` and
    ``top_logprobs: k``."""
    if kind == "completion":
        k = typed(body, "logprobs", int, "a valid integer", None)
    else:
        on = typed(body, "logprobs", bool, "a valid boolean", False)
        k = typed(body, "top_logprobs", int, "a valid integer", None)
        if k is not None and not on:
            raise value_error("top_logprobs", "when using `top_logprobs`, `logprobs` must be set "
                                              "to true.")
        k = (k or 0) if on else None
    if k is None:
        return None
    key = "logprobs" if kind == "completion" else "top_logprobs"
    if k < 0:
        raise value_error(key, f"{key} must be non-negative, got {k}.")
    if k > MAX_LOGPROBS:
        raise value_error(key, f"Requested sample logprobs of {k}, which is greater than max "
                               f"allowed: {MAX_LOGPROBS}")
    return k


def _stop_strings(body: dict, max_strings: int, max_bytes: int) -> list:
    """``stop`` as a list of strings, within ``max_strings`` strings of ``max_bytes`` UTF-8
    bytes together: each generated token is matched against them on the engine thread."""
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list):
        raise schema_error("stop", "must be a string or a list of strings")
    if len(stop) > max_strings:
        raise value_error("stop", f"stop has {len(stop)} strings; the server takes at most "
                                  f"{max_strings} per request (max_stop_strings)")
    if not all(isinstance(s, str) for s in stop):
        raise schema_error("stop", "must be a string or a list of strings")
    size = sum(len(s.encode("utf-8", "surrogatepass")) for s in stop)
    if size > max_bytes:
        raise value_error("stop", f"the stop strings are {size} bytes together; the server "
                                  f"takes at most {max_bytes} (max_stop_bytes)")
    return stop


def parse_sampling(body: dict, max_tokens: int, prompts: list, max_model_len: int,
                   kind: str, *, max_stop_strings: int = MAX_STOP_STRINGS,
                   max_stop_bytes: int = MAX_STOP_BYTES) -> Sampling:
    logprobs = _logprobs(body, kind)
    temperature = number(body, "temperature", 1.0)
    if temperature < 0:
        raise value_error("temperature", f"temperature must be non-negative, got {temperature}.")
    if temperature < SAMPLING_EPS:
        temperature = 0.0
    elif temperature < MIN_TEMPERATURE:
        temperature = MIN_TEMPERATURE
    top_p = number(body, "top_p", 1.0)
    if not 0 < top_p <= 1:
        raise value_error("top_p", f"top_p must be in (0, 1], got {top_p}.")
    top_k = int_in(body, "top_k", 0, lo=-1,
                   msg="top_k must be 0 (disable), or at least 1, got {v}.")
    min_p = number(body, "min_p", 0.0)
    if not 0 <= min_p <= 1:
        raise value_error("min_p", f"min_p must be in [0, 1], got {min_p}.")
    seed = int_in(body, "seed", None, lo=INT64[0], hi=INT64[1])
    penalties = {}
    for key in ("presence_penalty", "frequency_penalty"):
        penalties[key] = number(body, key, 0.0)
        if not -2 <= penalties[key] <= 2:
            raise value_error(key, f"{key} must be in [-2, 2], got {penalties[key]}.")
    rep = number(body, "repetition_penalty", 1.0)
    if rep <= 0:
        raise value_error("repetition_penalty",
                          f"repetition_penalty must be greater than zero, got {rep}.")
    stop = _stop_strings(body, max_stop_strings, max_stop_bytes)
    stop_ids = typed(body, "stop_token_ids", list, "a valid list", [])
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
        raise value_error("stop_token_ids",
                          f"stop_token_ids must contain only integers, got {stop_ids}.")
    min_tokens = int_in(body, "min_tokens", 0, lo=0,
                        msg="min_tokens must be greater than or equal to 0, got {v}.")
    if min_tokens > max_tokens:
        raise value_error("min_tokens", f"min_tokens must be less than or equal to "
                                        f"max_tokens={max_tokens}, got {min_tokens}.")
    typed(body, "ignore_eos", bool, "a valid boolean")
    include_stop = bool(typed(body, "include_stop_str_in_output", bool, "a valid boolean",
                              False))
    longest = max(len(p) for p in prompts)
    if longest + max_tokens > max_model_len:
        where = "messages" if kind == "chat" else "prompt"
        raise value_error("max_tokens" if longest < max_model_len else where,
                          f"This model's maximum context length is {max_model_len} tokens. "
                          f"However, you requested {longest + max_tokens} tokens ({longest} in "
                          f"the {where}, {max_tokens} in the completion). Please reduce the "
                          f"length of the {where} or completion.")
    return Sampling(max_tokens=max_tokens, min_tokens=min_tokens, temperature=temperature,
                    top_p=top_p, top_k=0 if top_k == -1 else top_k, min_p=min_p, seed=seed,
                    stop=tuple(s for s in stop if s), stop_token_ids=frozenset(stop_ids),
                    include_stop_str_in_output=include_stop, repetition_penalty=rep,
                    logprobs=logprobs,
                    **penalties)


# ----------------------------------------------------------------------------- requests

# Options the sidecar does not implement: refused unless absent or at their no-op value.
_REFUSED_COMMON = {
    "logit_bias": lambda v: v in (None, {}),
    "allowed_token_ids": lambda v: v is None,
    "bad_words": lambda v: v in (None, []),
    "prompt_logprobs": lambda v: v is None,
    "guided_json": lambda v: v is None, "guided_regex": lambda v: v is None,
    "guided_choice": lambda v: v is None, "guided_grammar": lambda v: v is None,
    "structured_outputs": lambda v: v is None,
    "use_beam_search": lambda v: v in (None, False),
    "response_format": lambda v: v is None or (isinstance(v, dict) and v.get("type") == "text"),
}
_REFUSED_CHAT = {
    "tools": lambda v: v in (None, []),
    "tool_choice": lambda v: v in (None, "none"),
    "functions": lambda v: v in (None, []),
    "function_call": lambda v: v in (None, "none"),
}
_REFUSED_COMPLETION = {
    "suffix": lambda v: v in (None, ""),
}


def _refuse_unsupported(body: dict, table: dict) -> None:
    for key, fine in table.items():
        if key in body and not fine(body[key]):
            what = key
            if key == "response_format" and isinstance(body[key], dict):
                what = f"response_format type {body[key].get('type')!r}"
            raise unsupported(key, what)


def _common(body, kind: str, prompts: list, tok: SidecarTokenizer, *, model_name: str,
            max_model_len: int, max_tokens_key: tuple, default_max_tokens: int | None,
            n: int, echo: tuple = (), max_stop_strings: int = MAX_STOP_STRINGS,
            max_stop_bytes: int = MAX_STOP_BYTES) -> GenerationRequest:
    for p in prompts:
        if not p:
            raise value_error("prompt" if kind == "completion" else "messages",
                              "the prompt is empty: it must have at least one token")
    best_of = typed(body, "best_of", int, "a valid integer", None)
    if best_of is not None and best_of != n:
        raise unsupported("best_of", "best_of other than n")
    max_tokens = None
    for key in max_tokens_key:
        max_tokens = typed(body, key, int, "a valid integer", None)
        if max_tokens is not None:
            if max_tokens < 1:
                raise value_error(key, f"{key} must be at least 1, got {max_tokens}.")
            break
    if max_tokens is None:
        longest = max(len(p) for p in prompts)
        max_tokens = (default_max_tokens if default_max_tokens is not None
                      else max(1, max_model_len - longest))
        max_tokens = max(1, min(max_tokens, max_model_len - longest))
    stream = bool(typed(body, "stream", bool, "a valid boolean", False))
    opts = body.get("stream_options")
    if opts is not None and not stream:
        raise value_error("stream_options",
                          "Stream options can only be defined when `stream=True`.")
    if opts is not None and not isinstance(opts, dict):
        raise schema_error("stream_options", "Input should be a valid dictionary")
    opts = opts or {}
    include_usage = bool(typed(opts, "include_usage", bool, "a valid boolean", False))
    continuous = bool(typed(opts, "continuous_usage_stats", bool, "a valid boolean", False))
    return GenerationRequest(kind=kind, model=model_name, prompts=prompts, n=n,
                             sampling=parse_sampling(body, max_tokens, prompts, max_model_len,
                                                     kind, max_stop_strings=max_stop_strings,
                                                     max_stop_bytes=max_stop_bytes),
                             stream=stream, include_usage=include_usage, echo=echo,
                             continuous_usage=include_usage and continuous)


def _model_and_n(body: dict, model_name: str, max_n: int = 128) -> int:
    model = typed(body, "model", str, "a valid string", None)
    if model is not None and model != model_name:
        raise APIError(404, f"The model `{model}` does not exist.", param="model")
    n = int_in(body, "n", 1, lo=1, msg="n must be at least 1, got {v}.")
    if n > max_n:
        raise value_error("n", f"n must be at most {max_n}, got {n}.")
    return n


def parse_completion(body, tok: SidecarTokenizer, *, model_name: str, max_model_len: int,
                     max_seqs: int | None = None, max_stop_strings: int = MAX_STOP_STRINGS,
                     max_stop_bytes: int = MAX_STOP_BYTES) -> GenerationRequest:
    body = json_object(body)
    _refuse_unsupported(body, _REFUSED_COMMON)
    _refuse_unsupported(body, _REFUSED_COMPLETION)
    n = _model_and_n(body, model_name)
    echo = bool(typed(body, "echo", bool, "a valid boolean", False))
    if echo and body.get("logprobs") is not None:
        raise unsupported("echo", "echo with logprobs (prompt logprobs)")
    raw = body.get("prompt")
    many = isinstance(raw, list) and raw and not isinstance(raw[0], int)
    if max_seqs is not None and many and len(raw) * n > max_seqs:     # before tokenizing
        raise too_many_seqs(len(raw), n, max_seqs)
    prompts = completion_prompts(raw, tok)
    if max_seqs is not None and len(prompts) * n > max_seqs:
        raise too_many_seqs(len(prompts), n, max_seqs)
    texts = ()
    if echo:
        if isinstance(raw, str):
            texts = (raw,)
        elif all(isinstance(p, str) for p in raw):
            texts = tuple(raw)
        else:
            texts = tuple(tok.decode(p) for p in prompts)
    return _common(body, "completion", prompts, tok, model_name=model_name,
                   max_model_len=max_model_len, max_tokens_key=("max_tokens",),
                   default_max_tokens=16, n=n, echo=texts,
                   max_stop_strings=max_stop_strings, max_stop_bytes=max_stop_bytes)


def parse_chat(body, tok: SidecarTokenizer, *, model_name: str, max_model_len: int,
               default_max_tokens: int, max_seqs: int | None = None,
               max_stop_strings: int = MAX_STOP_STRINGS,
               max_stop_bytes: int = MAX_STOP_BYTES) -> GenerationRequest:
    body = json_object(body)
    _refuse_unsupported(body, _REFUSED_COMMON)
    _refuse_unsupported(body, _REFUSED_CHAT)
    if typed(body, "echo", bool, "a valid boolean", False):
        raise unsupported("echo", "echo in chat completions")
    n = _model_and_n(body, model_name)
    if max_seqs is not None and n > max_seqs:
        raise too_many_seqs(1, n, max_seqs)
    messages = chat_messages(body.get("messages"))
    prompts = [tok.encode(tok.chat_prompt(messages))]
    return _common(body, "chat", prompts, tok, model_name=model_name,
                   max_model_len=max_model_len,
                   max_tokens_key=("max_completion_tokens", "max_tokens"),
                   default_max_tokens=default_max_tokens, n=n,
                   max_stop_strings=max_stop_strings, max_stop_bytes=max_stop_bytes)


def tokenize_request(body, tok: SidecarTokenizer, *, model_name: str, max_model_len: int
                     ) -> dict:
    """``POST /tokenize`` (vLLM): ``{prompt}`` or ``{messages}`` -> count, max_model_len,
    tokens (and ``token_strs`` with ``return_token_strs``)."""
    body = json_object(body)
    _model_and_n({"model": body.get("model")}, model_name)
    if "messages" in body:
        if typed(body, "add_generation_prompt", bool, "a valid boolean", True) is False:
            raise unsupported("add_generation_prompt", "add_generation_prompt=false")
        ids = tok.encode(tok.chat_prompt(chat_messages(body.get("messages"))))
    else:
        prompt = typed(body, "prompt", str, "a valid string", None)
        if prompt is None:
            raise schema_error("prompt", "Field required")
        ids = tok.encode(prompt)
    out = {"count": len(ids), "max_model_len": max_model_len, "tokens": ids,
           "token_strs": None}
    if typed(body, "return_token_strs", bool, "a valid boolean", False):
        out["token_strs"] = [tok.piece(i) for i in ids]
    return out


def detokenize_request(body, tok: SidecarTokenizer, *, model_name: str) -> dict:
    """``POST /detokenize`` (vLLM): ``{tokens}`` -> ``{prompt}``."""
    body = json_object(body)
    _model_and_n({"model": body.get("model")}, model_name)
    ids = typed(body, "tokens", list, "a valid list", None)
    if ids is None:
        raise schema_error("tokens", "Field required")
    return {"prompt": tok.decode(check_ids(ids, tok.vocab, "tokens"))}
