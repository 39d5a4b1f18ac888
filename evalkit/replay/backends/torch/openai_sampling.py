"""The sampling options of a request, validated as vLLM validates them.

``parse_sampling`` reads temperature, top-p/k, min-p, seed, penalties, stop strings and
token ids, min tokens and logprobs into a :class:`~.openai_types.Sampling`, with vLLM's
checks and wording (``temperature must be non-negative, got -1.0.``), and refuses a prompt
plus ``max_tokens`` longer than the context, and stop strings beyond ``max_stop_strings`` or
``max_stop_bytes``.  Temperatures below 1e-5 sample greedily and
those below 1e-2 are raised to 1e-2, as in vLLM.
"""

from __future__ import annotations

from .openai_errors import schema_error, value_error
from .openai_fields import int_in, number, typed
from .openai_types import Sampling


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
