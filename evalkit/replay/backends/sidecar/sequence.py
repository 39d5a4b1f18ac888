"""One generated sequence of the sidecar engine: its state and its stop conditions.

A :class:`Seq` is one choice of one request: its prompt, sampling options, the tokens
generated so far, how much of it the batch's KV cache holds, and its timestamps.
:func:`append_token` applies a newly sampled token's stop conditions (``stop_token_ids``,
``stop`` strings, ``max_tokens``) and says which text may be released to the client;
:func:`end_report` is what the serving metrics record of a sequence that ended, and
:func:`server_timing` what every response returns of each of its choices.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .openai_requests import Sampling

GREEDY = Sampling(max_tokens=1, temperature=0.0)


@dataclass(eq=False)
class Seq:
    rid: str
    prompt: list
    max_tokens: int
    emit: object                      # callable(item) -> None, thread-safe
    index: int = 0                    # choice index within its request
    sampling: Sampling = GREEDY
    out_ids: list = field(default_factory=list)   # generated token ids
    generated: int = 0
    n_real: int = 0                   # tokens of this sequence held in the KV cache
    last: int = 0                     # last sampled token, not yet fed to the model
    cancelled: bool = False
    finished: str | None = None       # finish reason once decided
    stop_reason: object = None        # the stop string or stop token id that ended it
    text: str = ""
    sent: int = 0                     # characters of ``text`` already emitted
    stop_checked: int = 0             # no stop string ends in text[:stop_checked]
    generator: object = None
    preemptions: int = 0
    ended: bool = False               # its one "done"/"error" item is out
    t_arrive: float = field(default_factory=time.monotonic)
    t_admit: float | None = None
    t_first: float | None = None
    t_last: float | None = None

    def input_ids(self) -> list:
        """What a prefill of this sequence feeds: the prompt, then (after a preemption)
        every token generated so far."""
        return self.prompt + self.out_ids


def _first_stop(seq: Seq) -> tuple | None:
    """The earliest stop string in the unreleased text that ends past ``stop_checked``, as
    ``(start, string)``: only the new end positions are tried, each against the distinct stop
    lengths, so a token costs (new characters x distinct lengths) set lookups."""
    stops, lengths = seq.sampling.stop_lookup
    text = seq.text
    hits = [(end - n, text[end - n:end])
            for end in range(max(seq.stop_checked, seq.sent) + 1, len(text) + 1)
            for n in lengths if end - n >= seq.sent and text[end - n:end] in stops]
    seq.stop_checked = len(text)
    return min(hits) if hits else None


def append_token(seq: Seq, tok: int, piece) -> str:
    """Apply the stop conditions of ``tok`` (already counted in ``seq.generated`` and
    ``seq.out_ids``) and return the text now releasable to the client.

    ``piece``: token id -> its text.  With stop strings, the last ``len(longest stop) - 1``
    characters are held back until no stop string can start in them, so a client never
    sees text past a stop string.
    """
    sp = seq.sampling
    checking = seq.generated >= sp.min_tokens
    if checking and tok in sp.stop_token_ids:
        seq.finished, seq.stop_reason = "stop", tok
    else:
        seq.text += piece(tok)
        if checking and sp.stop:
            hit = _first_stop(seq)
            if hit:
                at, which = hit
                seq.text = seq.text[:at + (len(which) if sp.include_stop_str_in_output
                                           else 0)]
                seq.finished, seq.stop_reason = "stop", which
    if seq.finished is None and seq.generated >= seq.max_tokens:
        seq.finished = "length"
    hold = 0 if seq.finished or not sp.stop else sp.stop_lookup[1][-1] - 1
    end = max(seq.sent, len(seq.text) - hold)
    release, seq.sent = seq.text[seq.sent:end], end
    return release


def end_report(seq: Seq, now: float) -> dict:
    """The timings (s) and token counts of a sequence that ended at ``now`` (monotonic):
    e2e, and, where it got that far, prefill, decode, inference and its prompt tokens."""
    admitted = seq.t_admit is not None
    return dict(
        e2e_s=now - seq.t_arrive,
        prefill_s=None if seq.t_first is None or not admitted else seq.t_first - seq.t_admit,
        decode_s=None if seq.t_first is None else (seq.t_last or now) - seq.t_first,
        inference_s=None if not admitted else (seq.t_last or now) - seq.t_admit,
        prompt_tokens=len(seq.prompt) if admitted else None, generated=seq.generated)


def server_timing(seq: Seq, now: float) -> dict:
    """What the server measured of a sequence that ended at ``now``, in seconds of its own
    clock: ``queue_s`` (arrival -> admitted into the batch), ``prefill_s`` (admitted -> first
    token), ``decode_s`` (first -> last token), ``total_s`` (arrival -> end); None where it
    did not get that far.  A client compares ``total_s`` with the latency it measured: only a
    server that really served the request can report its phases."""
    report = end_report(seq, now)
    return {"queue_s": None if seq.t_admit is None else seq.t_admit - seq.t_arrive,
            "prefill_s": report["prefill_s"], "decode_s": report["decode_s"],
            "total_s": report["e2e_s"]}
