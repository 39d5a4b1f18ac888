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
one ``("done", reason, i, stop_reason, server_timing)`` or ``("error", message, i)``.

The sequence state and its stop conditions are :mod:`.sequence`, the token choice
:mod:`.token_sampler`, the left-padded KV batch operations :mod:`.kv_batch`; this module is
the scheduler and the forward steps.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque

from evalkit.replay.backends.models import cache_kwarg

from . import kv_batch, token_sampler
from .sequence import Seq, append_token, end_report, server_timing
from .tokenizer import SidecarTokenizer

UNHEALTHY_AFTER = 3         # consecutive failed forwards before healthy() says no


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

    # -- forward ---------------------------------------------------------------------------
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

    # -- sampling (token_sampler; methods, so a test can replace one per engine) ----------
    def _pick(self, logits, seqs: list) -> list:
        return token_sampler.pick(logits, seqs, penalize=self._penalize, sample=self._sample)

    def _logprobs(self, logits, seqs: list, toks: list) -> list:
        return token_sampler.token_logprobs(logits, seqs, toks, self.tokenizer.piece)

    def _penalize(self, row, seq: Seq):
        return token_sampler.penalize(row, seq)

    def _sample(self, row, seq: Seq) -> int:
        return token_sampler.sample(row, seq, self._seed_rng)

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
        ids, mask, pos = kv_batch.left_padded(list(unique), self.device)
        out, cache = self._forward(kv_batch.new_cache(), input_ids=ids, attention_mask=mask,
                                   position_ids=pos)
        expand = torch.tensor(rows, device=self.device)
        last = out.logits[:, -1].index_select(0, expand)
        toks = self._pick(last, seqs)
        lps = self._logprobs(last, seqs, toks)
        self.counters["prefill_batches"] += 1
        if self.metrics is not None:
            self.metrics.step(prefill=True)
        keep = [i for i, (seq, tok) in enumerate(zip(seqs, toks))
                if self._settle(seq, tok, lps[i], n_real=len(inputs[i]))]
        if not keep:
            return
        sel = torch.tensor([rows[i] for i in keep], device=self.device)
        kv, mask = kv_batch.select_rows(cache, mask, sel)
        new = [seqs[i] for i in keep]
        if self.cache is None:
            self.cache, self.mask, self.active = kv_batch.new_cache(kv), mask, new
            return
        self.cache, self.mask = kv_batch.concat(self.cache, self.mask, kv, mask)
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
            if self._settle(seq, tok, lps[i]):
                keep.append(i)
        if len(keep) < B:
            self._drop_rows(keep)

    def _drop_rows(self, keep: list) -> None:
        """Keep only rows ``keep`` of the batch (cache, mask, active), trimming the
        all-padding columns."""
        if len(keep) == len(self.active):
            return
        if not keep:
            self.cache, self.mask, self.active = None, None, []
            return
        self.cache, self.mask = kv_batch.keep_rows(self.cache, self.mask, keep, self.device)
        self.active = [self.active[i] for i in keep]

    def _settle(self, seq: Seq, tok, logprob, n_real: int | None = None) -> bool:
        """End ``seq`` (aborted, its sampling failed, or its token finished it) or take its
        token ``tok`` (``n_real``: the tokens it now holds in the cache, when that changed);
        True while it goes on."""
        if seq.cancelled:
            self._finish(seq, "abort")
        elif isinstance(tok, Exception):
            self._fail(seq, f"sampling failed: {type(tok).__name__}: {tok}")
        else:
            if n_real is not None:
                seq.n_real = n_real
            seq.last = tok
            self._accept(seq, tok, logprob)
            if seq.finished is None:
                return True
            self._finish(seq, seq.finished)
        return False

    def _accept(self, seq: Seq, tok: int, logprob=None) -> None:
        """Count a generated token, apply stop conditions, emit the releasable text
        (held back near a possible stop string: see ``sequence.append_token``)."""
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
        release = append_token(seq, tok, self.tokenizer.piece)
        seq.emit(("token", tok, seq.index, release, logprob))

    def _finish(self, seq: Seq, reason: str) -> None:
        if seq.ended:
            return
        seq.finished, seq.ended = reason, True
        if reason != "abort":
            self.counters["success"] += 1
        self._observe_end(seq, reason)
        seq.emit(("done", reason, seq.index, seq.stop_reason,
                  server_timing(seq, time.monotonic())))

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
        self.metrics.finished(reason, **end_report(seq, time.monotonic()))
