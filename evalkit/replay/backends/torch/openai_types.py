"""What the sidecar's request parsers produce: the sampling options and one parsed request.

:class:`Sampling` is the per-sequence sampling configuration the engine reads;
:class:`GenerationRequest` is one validated completion or chat request (token-id prompts,
``n``, streaming options).  Plain data: no parsing here.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from functools import cached_property


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
