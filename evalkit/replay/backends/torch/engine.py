"""The sidecar's engine: continuous batching over a transformers model, in one thread.

Each iteration admits waiting sequences (one left-padded prefill forward for all of them),
then runs one batched decode step over every active sequence.  The batch's KV cache (a
transformers ``DynamicCache``, left-padded, ``[B, H, T, d]`` per layer) grows in place across
decode steps and is only rebuilt when sequences join or leave.

Scheduling follows vLLM where it is observable from outside:

- **KV capacity** (``kv_capacity`` tokens): a waiting sequence is admitted only when its
  tokens fit next to the running ones; when a decode step would overflow it, the most
  recently admitted sequence is *preempted* (recompute mode: its KV is dropped and it waits
  at the head of the queue; on re-admission its prompt plus the tokens generated so far are
  prefilled again, so its output is unchanged).
- **Prefix reuse**: sequences of one prefill batch with an identical token prefix (the ``n``
  choices of one prompt, or repeated prompts) share one forward row; their prompt tokens
  count as prefix-cache hits.
- **Failure isolation**: an exception while sampling one sequence fails that sequence only;
  an exception in a batched forward fails the sequences in that forward; the loop goes on.
  ``dead()`` says whether the loop runs; ``healthy()`` also whether its last forwards failed.

Tokens are sampled per sequence (greedy at ``temperature`` 0; ``seed`` makes sampling
reproducible; logprobs, when asked, come from the raw distribution); the model has no EOS, so
a sequence ends at ``max_tokens``, a ``stop`` string or a ``stop_token_ids`` token.  Through
its ``emit`` callback a sequence sends ``("token", id, i, text, logprob)`` items, then exactly
one ``("done", reason, i, stop_reason)`` or ``("error", message, i)``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from .models import cache_kwarg
from .openai_api import Sampling
from .tokenizer import SidecarTokenizer

GREEDY = Sampling(max_tokens=1, temperature=0.0)
UNHEALTHY_AFTER = 3         # consecutive failed forwards before healthy() says no


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


class Engine:
    def __init__(self, model, *, device: str, max_batch: int, vocab: int,
                 max_prefill_batch: int | None = None, metrics=None, tokenizer=None,
                 kv_capacity: int | None = None):
        import torch
        self.torch = torch
        self.model = model.eval()
        self.device = device
        self.max_batch = max_batch
        self.max_prefill_batch = max_prefill_batch or max_batch   # 1: one prefill per request
        self.kv_capacity = kv_capacity          # None: unbounded
        self.vocab = vocab
        self.tokenizer = tokenizer or SidecarTokenizer(vocab)
        self.metrics = metrics
        self.cache_arg = cache_kwarg(model)
        self.inbox: queue.Queue = queue.Queue()
        self.waiting: deque = deque()
        self.active: list[Seq] = []
        self.cache = None              # DynamicCache of the active batch, [B, H, T, d]
        self.mask = None               # [B, T] long, 0 = left padding
        self.stop = threading.Event()
        self.reset_requested = threading.Event()
        self.reset_done = threading.Event()
        self.counters = self._zero_counters()
        self.error: str | None = None          # the thread died of this
        self.last_error: str | None = None     # the latest failed step (the loop went on)
        self.failing = 0                       # consecutive failed forwards
        self.thread: threading.Thread | None = None
        self._seed_rng = torch.Generator().manual_seed(int(time.time_ns() % 2**62))

    @staticmethod
    def _zero_counters() -> dict:
        return {"generation_tokens": 0, "prompt_tokens": 0, "success": 0, "iterations": 0,
                "prefill_batches": 0, "resets": 0, "failed": 0, "preemptions": 0}

    def start(self) -> threading.Thread:
        self.thread = threading.Thread(target=self.run, name="engine", daemon=True)
        self.thread.start()
        return self.thread

    def dead(self) -> str | None:
        """None while the engine loop runs, else why it does not."""
        if self.error:
            return f"the engine failed: {self.error}"
        if self.thread is not None and not self.thread.is_alive() and not self.stop.is_set():
            return "the engine thread is not running"
        return None

    def healthy(self) -> str | None:
        """None when the engine serves, else why not: dead, or its last forward passes all
        failed (requests are still tried then, so a passing fault heals)."""
        if self.dead():
            return self.dead()
        if self.failing >= UNHEALTHY_AFTER:
            return (f"the engine's last {self.failing} forward passes failed "
                    f"(latest: {self.last_error})")
        return None

    # -- cache helpers -------------------------------------------------------------------
    @staticmethod
    def _new_cache(kv=None):
        from transformers import DynamicCache
        c = DynamicCache()
        for i, (k, v) in enumerate(kv or ()):
            c.update(k, v, i)
        return c

    @staticmethod
    def _kv_of(cache):
        if hasattr(cache, "layers"):
            return [(layer.keys, layer.values) for layer in cache.layers]
        return list(zip(cache.key_cache, cache.value_cache))

    def _forward(self, cache, **kw):
        kw[self.cache_arg] = cache
        out = self.model(use_cache=True, **kw)
        return out, (getattr(out, "cache", None) or out.past_key_values)

    # -- scheduling ----------------------------------------------------------------------
    def num_waiting(self) -> int:
        return len(self.waiting) + self.inbox.qsize()

    def num_running(self) -> int:
        # a finished sequence leaves `active` only after the step's loop; its client may
        # already hold the response, so it no longer counts as running
        return sum(1 for s in list(self.active) if s.finished is None)

    def kv_tokens(self) -> int:
        return sum(s.n_real for s in list(self.active))

    def request_reset(self, timeout_s: float = 30.0) -> bool:
        """Drain every request (they end with an error) and zero the counters."""
        self.reset_done.clear()
        self.reset_requested.set()
        return self.reset_done.wait(timeout_s)

    def _drain_inbox(self) -> None:
        while True:
            try:
                self.waiting.append(self.inbox.get_nowait())
            except queue.Empty:
                break

    def _do_reset(self) -> None:
        self._drain_inbox()
        for seq in list(self.active) + list(self.waiting):
            if not seq.ended:
                seq.cancelled, seq.ended = True, True
                seq.emit(("error", "engine reset", seq.index))
        self.active, self.waiting = [], deque()
        self.cache, self.mask = None, None
        resets = self.counters["resets"] + 1
        self.counters = self._zero_counters()
        self.counters["resets"] = resets
        self.failing, self.last_error = 0, None
        if self.metrics is not None:
            self.metrics.reset()
        if self.device.startswith("cuda"):
            self.torch.cuda.empty_cache()
        self.reset_requested.clear()
        self.reset_done.set()

    def run(self) -> None:
        try:
            with self.torch.inference_mode():
                while not self.stop.is_set():
                    try:
                        self._iteration()
                    except Exception as exc:        # a bug in scheduling: fail the batch
                        self._fail_all(f"{type(exc).__name__}: {exc}")
        except BaseException as exc:  # surfaces in /health and /metrics
            self.error = f"{type(exc).__name__}: {exc}"
            for seq in list(self.active) + list(self.waiting):
                if not seq.ended:
                    seq.ended = True
                    seq.emit(("error", self.error, seq.index))
            raise

    def _iteration(self) -> None:
        if self.reset_requested.is_set():
            self._do_reset()
        self._drain_inbox()
        admit = self._admissions()
        if admit:
            self._guarded(self._prefill, admit)
        if self.active:
            self._preempt_to_fit()
            self._guarded(self._decode, list(self.active))
        elif not self.waiting:
            try:
                self.waiting.append(self.inbox.get(timeout=0.05))
            except queue.Empty:
                pass

    def _admissions(self) -> list:
        admit: list[Seq] = []
        used = self.kv_tokens()
        while (self.waiting and len(self.active) + len(admit) < self.max_batch
               and len(admit) < self.max_prefill_batch):
            seq = self.waiting[0]
            if seq.cancelled:
                self.waiting.popleft()
                self._finish(seq, "abort")
                continue
            need = len(seq.input_ids()) + 1
            if (self.kv_capacity is not None and (self.active or admit)
                    and used + need > self.kv_capacity):
                break                               # waits for room, as vLLM's scheduler
            admit.append(self.waiting.popleft())
            used += need
        return admit

    def _preempt_to_fit(self) -> None:
        """Recompute-mode preemption: drop the newest sequences' KV until one more token
        per running sequence fits in ``kv_capacity``."""
        if self.kv_capacity is None:
            return
        while len(self.active) > 1 and self.kv_tokens() + len(self.active) > self.kv_capacity:
            victim = len(self.active) - 1
            seq = self.active[victim]
            self._drop_rows([i for i in range(len(self.active)) if i != victim])
            seq.n_real, seq.preemptions = 0, seq.preemptions + 1
            self.waiting.appendleft(seq)
            self.counters["preemptions"] += 1
            if self.metrics is not None:
                self.metrics.preempted()

    def _guarded(self, step, seqs: list) -> None:
        """Run one forward step; on an exception fail ``seqs`` (the others go on)."""
        try:
            step(seqs)
            self.failing = 0
        except Exception as exc:
            msg = f"{type(exc).__name__}: {exc}"
            self.failing += 1
            self.last_error = msg
            gone = set(map(id, seqs))
            keep = [i for i, s in enumerate(self.active) if id(s) not in gone]
            try:
                self._drop_rows(keep)
            except Exception:                      # the cache itself is unusable
                for s in self.active:
                    if id(s) not in gone:
                        seqs.append(s)
                self.active, self.cache, self.mask = [], None, None
            for seq in seqs:
                self._fail(seq, msg)
            if self.device.startswith("cuda"):
                self.torch.cuda.empty_cache()

    def _fail_all(self, msg: str) -> None:
        self.last_error = msg
        seqs = list(self.active) + list(self.waiting)
        self.active, self.waiting, self.cache, self.mask = [], deque(), None, None
        for seq in seqs:
            self._fail(seq, msg)

    # -- sampling --------------------------------------------------------------------------
    def _pick(self, logits, seqs: list) -> list:
        """One token per row of ``logits`` [B, V]; an ``Exception`` in place of the token
        where sampling that row failed."""
        toks: list = logits.argmax(-1).tolist()
        for i, seq in enumerate(seqs):
            sp = seq.sampling
            if sp.greedy and not sp.penalized:
                continue
            try:
                row = logits[i].float()
                if sp.penalized:
                    row = self._penalize(row, seq)
                toks[i] = int(row.argmax()) if sp.greedy else self._sample(row, seq)
            except Exception as exc:
                toks[i] = exc
        return toks

    def _logprobs(self, logits, seqs: list, toks: list) -> list:
        """Per row: (token text, logprob, [(alternative text, logprob)] of the top
        ``sampling.logprobs``) from the model's raw distribution (vLLM's default), or None."""
        torch = self.torch
        out: list = [None] * len(seqs)
        piece = self.tokenizer.piece
        for i, seq in enumerate(seqs):
            k = seq.sampling.logprobs
            if k is None or isinstance(toks[i], Exception):
                continue
            lp = torch.log_softmax(logits[i].float(), -1)
            top = torch.topk(lp, k) if k else None
            alts = [] if top is None else [(piece(int(t)), float(v))
                                           for v, t in zip(top.values, top.indices)]
            out[i] = (piece(toks[i]), float(lp[toks[i]]), alts)
        return out

    def _penalize(self, row, seq: Seq):
        """vLLM's penalties on ``row`` [V]: repetition over prompt and output tokens,
        frequency and presence over output tokens."""
        torch = self.torch
        sp = seq.sampling
        if sp.repetition_penalty != 1.0:
            seen = torch.zeros_like(row, dtype=torch.bool)
            seen[torch.tensor(seq.prompt + seq.out_ids, device=row.device)] = True
            scaled = torch.where(row > 0, row / sp.repetition_penalty,
                                 row * sp.repetition_penalty)
            row = torch.where(seen, scaled, row)
        if seq.out_ids and (sp.frequency_penalty or sp.presence_penalty):
            counts = torch.bincount(torch.tensor(seq.out_ids, device=row.device),
                                    minlength=row.shape[-1]).to(row.dtype)
            row = row - sp.frequency_penalty * counts - sp.presence_penalty * (counts > 0)
        return row

    def _sample(self, row, seq: Seq) -> int:
        """``row`` [V]: one token by the sequence's temperature / top-k / top-p."""
        torch = self.torch
        sp = seq.sampling
        if seq.generator is None:
            gen_dev = row.device if row.device.type == "cuda" else "cpu"
            seed = (sp.seed + seq.index if sp.seed is not None else
                    int(torch.randint(0, 2**62, (1,), generator=self._seed_rng)))
            seq.generator = torch.Generator(device=gen_dev).manual_seed(seed % 2**64)
        row = row / sp.temperature
        if sp.top_k and sp.top_k < row.shape[-1]:
            kth = torch.topk(row, sp.top_k).values[-1]
            row = row.masked_fill(row < kth, float("-inf"))
        probs = torch.softmax(row, -1)
        if sp.min_p > 0.0:
            probs = probs.masked_fill(probs < sp.min_p * probs.max(), 0.0)
        if sp.top_p < 1.0:
            p_sorted, idx = torch.sort(probs, descending=True)
            drop = p_sorted.cumsum(-1) - p_sorted > sp.top_p
            probs = probs.scatter(0, idx, p_sorted.masked_fill(drop, 0.0))
        return int(torch.multinomial(probs, 1, generator=seq.generator))

    # -- steps -----------------------------------------------------------------------------
    def _prefill(self, seqs: list) -> None:
        """One left-padded forward over every newly admitted sequence (identical inputs share
        a row); they join the batch."""
        torch = self.torch
        now = time.monotonic()
        inputs = [tuple(s.input_ids()) for s in seqs]
        unique: dict[tuple, int] = {}
        rows = [unique.setdefault(ids, len(unique)) for ids in inputs]
        for j, s in enumerate(seqs):
            if s.preemptions:
                continue                     # a resumed sequence was counted when it arrived
            s.t_admit = now
            shared = rows.index(rows[j]) < j
            self.counters["prompt_tokens"] += len(s.prompt)
            if self.metrics is not None:
                self.metrics.admitted(now - s.t_arrive, len(s.prompt),
                                      cached=len(s.prompt) if shared else 0)
        order = list(unique)
        n, T = len(order), max(len(ids) for ids in order)
        ids = torch.zeros(n, T, dtype=torch.long)
        mask = torch.zeros(n, T, dtype=torch.long)
        for i, row in enumerate(order):
            ids[i, T - len(row):] = torch.tensor(row, dtype=torch.long)
            mask[i, T - len(row):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        out, cache = self._forward(self._new_cache(), input_ids=ids, attention_mask=mask,
                                   position_ids=pos)
        expand = torch.tensor(rows, device=self.device)
        last = out.logits[:, -1].index_select(0, expand)
        toks = self._pick(last, seqs)
        lps = self._logprobs(last, seqs, toks)
        self.counters["prefill_batches"] += 1
        if self.metrics is not None:
            self.metrics.step(prefill=True)
        keep = []
        for i, (seq, tok) in enumerate(zip(seqs, toks)):
            if seq.cancelled:
                self._finish(seq, "abort")
            elif isinstance(tok, Exception):
                self._fail(seq, f"sampling failed: {type(tok).__name__}: {tok}")
            else:
                seq.n_real, seq.last = len(inputs[i]), tok
                self._accept(seq, tok, lps[i])
                if seq.finished:
                    self._finish(seq, seq.finished)
                else:
                    keep.append(i)
        if not keep:
            return
        sel = torch.tensor([rows[i] for i in keep], device=self.device)
        kv = [(k.index_select(0, sel), v.index_select(0, sel)) for k, v in self._kv_of(cache)]
        mask = mask.index_select(0, sel)
        new = [seqs[i] for i in keep]
        if self.cache is None:
            self.cache, self.mask, self.active = self._new_cache(kv), mask, new
            return
        old = self._kv_of(self.cache)
        T = max(self.mask.shape[1], mask.shape[1])
        pad = lambda t: torch.nn.functional.pad(t, (0, 0, T - t.shape[2], 0))  # noqa: E731
        padm = lambda m: torch.nn.functional.pad(m, (T - m.shape[1], 0))  # noqa: E731
        self.cache = self._new_cache(
            [(torch.cat([pad(k0), pad(k1)]), torch.cat([pad(v0), pad(v1)]))
             for (k0, v0), (k1, v1) in zip(old, kv)])
        self.mask = torch.cat([padm(self.mask), padm(mask)])
        self.active = self.active + new

    def _decode(self, _seqs=None) -> None:
        """One token for every active sequence; the KV cache grows in place across steps."""
        torch = self.torch
        B = len(self.active)
        ids = torch.tensor([[s.last] for s in self.active], device=self.device)
        pos = torch.tensor([[s.n_real] for s in self.active], device=self.device)
        mask = torch.cat([self.mask, torch.ones(B, 1, dtype=torch.long, device=self.device)], 1)
        out, cache = self._forward(self.cache, input_ids=ids, attention_mask=mask,
                                   position_ids=pos)
        toks = self._pick(out.logits[:, -1], self.active)
        lps = self._logprobs(out.logits[:, -1], self.active, toks)
        self.cache, self.mask = cache, mask
        self.counters["iterations"] += 1
        if self.metrics is not None:
            self.metrics.step(prefill=False)
        keep = []
        for i, (seq, tok) in enumerate(zip(self.active, toks)):
            seq.n_real += 1
            if seq.cancelled:
                self._finish(seq, "abort")
            elif isinstance(tok, Exception):
                self._fail(seq, f"sampling failed: {type(tok).__name__}: {tok}")
            else:
                seq.last = tok
                self._accept(seq, tok, lps[i])
                if seq.finished:
                    self._finish(seq, seq.finished)
                else:
                    keep.append(i)
        if len(keep) < B:
            self._drop_rows(keep)

    def _drop_rows(self, keep: list) -> None:
        """Keep only rows ``keep`` of the batch (cache, mask, active), trimming the
        all-padding columns."""
        torch = self.torch
        if len(keep) == len(self.active):
            return
        if not keep:
            self.cache, self.mask, self.active = None, None, []
            return
        idx = torch.tensor(keep, device=self.device)
        mask = self.mask.index_select(0, idx)
        first = int((mask.sum(0) > 0).nonzero()[0])      # drop all-padding columns
        self.mask = mask[:, first:]
        self.cache = self._new_cache(
            [(k.index_select(0, idx)[:, :, first:], v.index_select(0, idx)[:, :, first:])
             for k, v in self._kv_of(self.cache)])
        self.active = [self.active[i] for i in keep]

    def _accept(self, seq: Seq, tok: int, logprob=None) -> None:
        """Count a generated token, apply stop conditions, emit the releasable text.

        With stop strings, the last ``len(longest stop) - 1`` characters are held back until
        no stop string can start in them, so a client never sees text past a stop string.
        """
        now = time.monotonic()
        first = seq.generated == 0
        seq.generated += 1
        seq.out_ids.append(tok)
        self.counters["generation_tokens"] += 1
        if self.metrics is not None:
            self.metrics.token(first, now - (seq.t_arrive if first else seq.t_last))
        if first:
            seq.t_first = now
        seq.t_last = now
        sp = seq.sampling
        checking = seq.generated >= sp.min_tokens
        if checking and tok in sp.stop_token_ids:
            seq.finished, seq.stop_reason = "stop", tok
        else:
            seq.text += self.tokenizer.piece(tok)
            if checking and sp.stop:
                hits = [(i, s) for s in sp.stop if (i := seq.text.find(s, seq.sent)) >= 0]
                if hits:
                    at, which = min(hits)
                    seq.text = seq.text[:at + (len(which) if sp.include_stop_str_in_output
                                               else 0)]
                    seq.finished, seq.stop_reason = "stop", which
        if seq.finished is None and seq.generated >= seq.max_tokens:
            seq.finished = "length"
        hold = 0 if seq.finished or not sp.stop else max(map(len, sp.stop)) - 1
        end = max(seq.sent, len(seq.text) - hold)
        release, seq.sent = seq.text[seq.sent:end], end
        seq.emit(("token", tok, seq.index, release, logprob))

    def _finish(self, seq: Seq, reason: str) -> None:
        if seq.ended:
            return
        seq.finished, seq.ended = reason, True
        if reason != "abort":
            self.counters["success"] += 1
        self._observe_end(seq, reason)
        seq.emit(("done", reason, seq.index, seq.stop_reason))

    def _fail(self, seq: Seq, msg: str) -> None:
        if seq.ended:
            return
        seq.finished, seq.ended = "error", True
        self.counters["failed"] += 1
        self._observe_end(seq, "error")
        seq.emit(("error", msg, seq.index))

    def _observe_end(self, seq: Seq, reason: str) -> None:
        if self.metrics is None:
            return
        now = time.monotonic()
        admitted = seq.t_admit is not None
        self.metrics.finished(
            reason, e2e_s=now - seq.t_arrive,
            prefill_s=None if seq.t_first is None or not admitted else seq.t_first - seq.t_admit,
            decode_s=None if seq.t_first is None else (seq.t_last or now) - seq.t_first,
            inference_s=None if not admitted else (seq.t_last or now) - seq.t_admit,
            prompt_tokens=len(seq.prompt) if admitted else None, generated=seq.generated)
