"""Prompts of the sidecar's OpenAI requests: completion prompts and chat messages.

``completion_prompts`` turns any of the four prompt shapes into token-id lists;
``chat_messages`` validates ``messages`` (roles, text-only content) for the chat template.
"""

from __future__ import annotations

from .openai_errors import APIError, schema_error, unsupported, value_error
from .openai_fields import check_ids
from .tokenizer import ROLES, SidecarTokenizer


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
