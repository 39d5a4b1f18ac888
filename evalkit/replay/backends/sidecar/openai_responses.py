"""Response bodies of the sidecar's OpenAI routes: whole responses, stream chunks, usage.

Completion and chat share one builder each for the non-streaming body (``response``) and
for one streaming event (``chunk``); ``logprobs_block`` is OpenAI's logprobs object in the
completion or the chat shape.
"""

from __future__ import annotations

from .openai_requests import GenerationRequest


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def logprobs_block(req: GenerationRequest, entries: list, offset: int = 0):
    """OpenAI's logprobs object for ``entries`` [(token text, logprob, [(alt text,
    logprob)...])]; ``offset``: characters of the choice's text before the first entry."""
    if req.sampling.logprobs is None:
        return None
    if req.kind == "chat":
        def one(t, lp):
            return {"token": t, "logprob": lp, "bytes": list(t.encode())}
        return {"content": [{**one(t, lp), "top_logprobs": [one(a, b) for a, b in top]}
                            for t, lp, top in entries]}
    offsets = []
    for t, _, _ in entries:
        offsets.append(offset)
        offset += len(t)
    return {"text_offset": offsets, "token_logprobs": [lp for _, lp, _ in entries],
            "tokens": [t for t, _, _ in entries],
            "top_logprobs": [dict(top) for _, _, top in entries]}


def response(req: GenerationRequest, choices: list, use: dict) -> dict:
    """Non-streaming body; ``choices`` are ``(index, text, finish_reason, stop_reason,
    logprobs object or None)``.

    ``stop_reason``, as in vLLM: the stop string or stop token id that ended the choice,
    None when it ended for another reason."""
    if req.kind == "completion":
        return {"id": f"cmpl-{req.request_id}", "object": "text_completion",
                "created": req.created, "model": req.model,
                "choices": [{"index": i, "text": text, "logprobs": lps,
                             "finish_reason": fin, "stop_reason": why}
                            for i, text, fin, why, lps in choices],
                "usage": use}
    return {"id": f"chatcmpl-{req.request_id}", "object": "chat.completion",
            "created": req.created, "model": req.model,
            "choices": [{"index": i, "message": {"role": "assistant", "content": text,
                                                 "tool_calls": []},
                         "logprobs": lps, "finish_reason": fin, "stop_reason": why}
                        for i, text, fin, why, lps in choices],
            "usage": use}


def chunk(req: GenerationRequest, index: int | None, text: str | None,
          finish_reason: str | None = None, *, first: bool = False,
          use: dict | None = None, stop_reason=None, logprobs=None) -> dict:
    """One streaming event: a choice delta, or (``index`` None) the final usage chunk."""
    if req.kind == "completion":
        out = {"id": f"cmpl-{req.request_id}", "object": "text_completion",
               "created": req.created, "model": req.model,
               "choices": [] if index is None else [
                   {"index": index, "text": text or "", "logprobs": logprobs,
                    "finish_reason": finish_reason, "stop_reason": stop_reason}]}
    else:
        delta: dict = {}
        if first:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        out = {"id": f"chatcmpl-{req.request_id}", "object": "chat.completion.chunk",
               "created": req.created, "model": req.model,
               "choices": [] if index is None else [
                   {"index": index, "delta": delta, "logprobs": logprobs,
                    "finish_reason": finish_reason, "stop_reason": stop_reason}]}
    if req.include_usage:
        out["usage"] = use
    return out
