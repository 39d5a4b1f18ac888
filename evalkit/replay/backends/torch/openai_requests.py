"""Parsers of the sidecar's OpenAI/vLLM request bodies.

``parse_completion`` / ``parse_chat`` turn a request body into a
:class:`~.openai_types.GenerationRequest` or raise :class:`~.openai_errors.APIError`;
``tokenize_request`` / ``detokenize_request`` answer vLLM's ``/tokenize`` and
``/detokenize``.  Options the sidecar does not implement (``tools``, ``response_format``
other than text, ``logit_bias``, prompt logprobs, structured outputs, ...) are refused unless
absent or at their no-op value; other unknown fields are ignored, as vLLM does.  404 is an
unknown model.
"""

from __future__ import annotations

from .openai_errors import APIError, schema_error, unsupported, value_error
from .openai_fields import check_ids, int_in, json_object, typed
from .openai_prompts import chat_messages, completion_prompts, too_many_seqs
from .openai_sampling import MAX_STOP_BYTES, MAX_STOP_STRINGS, parse_sampling
from .openai_types import GenerationRequest
from .tokenizer import SidecarTokenizer


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
