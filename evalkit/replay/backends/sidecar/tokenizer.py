"""The sidecar's tokenizer: no vocabulary file, deterministic, printable output.

A random-init model has no real tokenizer.  Text is encoded as UTF-8 bytes (id = byte mod
vocab) except for words ``" t<id>"``, which encode to ``<id>``; every generated token decodes
to ``" t<id>"``.  So text the model produced re-encodes to the same token ids, a completion
of ``max_tokens`` tokens has exactly ``max_tokens`` pieces, and clients that count streamed
chunks or re-tokenize the output with :func:`encode` agree with the server's usage.
"""

from __future__ import annotations

import re

_WORD = re.compile(r" t(\d+)")

ROLES = ("system", "user", "assistant", "tool", "developer")


def _utf8(text: str) -> bytes:
    # JSON may carry lone surrogates ("\ud800"): encode them too, never fail on a prompt
    return text.encode(errors="surrogatepass")


class SidecarTokenizer:
    def __init__(self, vocab: int):
        self.vocab = int(vocab)

    def piece(self, token_id: int) -> str:
        return f" t{int(token_id)}"

    def decode(self, ids) -> str:
        return "".join(self.piece(i) for i in ids)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        pos = 0
        for m in _WORD.finditer(text):
            tok = int(m.group(1))
            if tok >= self.vocab:
                continue                      # not one of ours: plain bytes
            ids.extend(b % self.vocab for b in _utf8(text[pos:m.start()]))
            ids.append(tok)
            pos = m.end()
        ids.extend(b % self.vocab for b in _utf8(text[pos:]))
        return ids

    def chat_prompt(self, messages: list[dict]) -> str:
        """A simple chat template: ``<|role|>\\ncontent\\n`` per message, then the
        assistant header (the generation prompt)."""
        parts = [f"<|{m['role']}|>\n{m['content']}\n" for m in messages]
        return "".join(parts) + "<|assistant|>\n"
