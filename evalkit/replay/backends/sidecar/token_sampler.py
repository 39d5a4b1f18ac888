"""The engine's next-token choice from a row of logits, per sequence, as vLLM samples.

Greedy rows (``temperature`` 0 or ``top_k`` 1) take the argmax; the others apply vLLM's
penalties (repetition over prompt and output, frequency and presence over output), then
temperature, top-k, min-p and top-p, and draw from the sequence's own generator (seeded by
``seed + choice index`` when the request has a seed).  Logprobs come from the model's raw
distribution, before penalties and temperature (vLLM's default).  torch is imported when
first used, as the sidecar's optional extra.
"""

from __future__ import annotations

from .sequence import Seq


def pick(logits, seqs: list, *, penalize, sample) -> list:
    """One token per row of ``logits`` [B, V]; an ``Exception`` in place of the token where
    choosing that row failed.  ``penalize(row, seq)`` and ``sample(row, seq)`` do the
    non-greedy work (the engine passes its own, so a test can replace them)."""
    toks: list = logits.argmax(-1).tolist()
    for i, seq in enumerate(seqs):
        sp = seq.sampling
        if sp.greedy and not sp.penalized:
            continue
        try:
            row = logits[i].float()
            if sp.penalized:
                row = penalize(row, seq)
            toks[i] = int(row.argmax()) if sp.greedy else sample(row, seq)
        except Exception as exc:
            toks[i] = exc
    return toks


def token_logprobs(logits, seqs: list, toks: list, piece) -> list:
    """Per row: (token text, logprob, [(alternative text, logprob)] of the top
    ``sampling.logprobs``) from the model's raw distribution (vLLM's default), or None.
    ``piece``: token id -> its text."""
    import torch
    out: list = [None] * len(seqs)
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


def penalize(row, seq: Seq):
    """vLLM's penalties on ``row`` [V]: repetition over prompt and output tokens,
    frequency and presence over output tokens."""
    import torch
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


def sample(row, seq: Seq, seed_rng) -> int:
    """``row`` [V]: one token by the sequence's temperature / top-k / min-p / top-p.

    The sequence's generator is made on first use, seeded by ``seed + index`` or, without a
    seed, by a draw from ``seed_rng`` (a ``torch.Generator``)."""
    import torch
    sp = seq.sampling
    if seq.generator is None:
        gen_dev = row.device if row.device.type == "cuda" else "cpu"
        seed = (sp.seed + seq.index if sp.seed is not None else
                int(torch.randint(0, 2**62, (1,), generator=seed_rng)))
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
