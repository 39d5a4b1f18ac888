"""One DiLoCo learner process: ``python -m evalkit.replay.backends.torch.trainer cfg.json``.

Environment: ``RANK``, ``WORLD_SIZE``, ``MASTER_PORT``, ``EVALKIT_COORD_PORT``,
``EVALKIT_COORD_KEY``.  Rank 0 talks to the coordinator (which runs the policy) over a
``multiprocessing.connection`` socket and broadcasts every step's action to all ranks, so
every learner takes the same decision.  Actions: 0 continue, 1 merge, 2 stop.

Inner steps: AdamW on synthetic token sequences (an arithmetic progression mod vocab per
sequence, so the loss falls).  Outer merge: pseudo-gradient ``global - local``, one
all-reduce of the flattened buffer, mean, outer SGD with Nesterov momentum on the global
copy, local <- global, optional checkpoint write.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from datetime import timedelta

CONTINUE, MERGE, STOP = 0, 1, 2


def synthetic_batch(torch, gen, batch: int, seq: int, vocab: int, device):
    start = torch.randint(0, vocab, (batch, 1), generator=gen)
    stride = torch.randint(1, 4, (batch, 1), generator=gen)
    x = (start + stride * torch.arange(seq).unsqueeze(0)) % vocab
    return x.to(device)


def digest(torch, params, kind: str) -> str:
    if kind == "none":
        return ""
    if kind == "sum":
        s = sum(p.detach().double().sum() for p in params)
        q = sum((p.detach().double() ** 2).sum() for p in params)
        return f"{float(s):.17g}/{float(q):.17g}"
    h = hashlib.sha1()
    for p in params:
        h.update(p.detach().cpu().contiguous().view(-1).numpy().tobytes())
    return h.hexdigest()[:16]


def main(path: str) -> int:
    from evalkit.replay.backends.torch.procs import die_with_parent
    die_with_parent()
    with open(path) as f:
        cfg = json.load(f)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    import torch
    import torch.distributed as dist
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
    from evalkit.replay.backends.torch.models import build_model

    torch.set_num_threads(int(cfg.get("threads", 1)))
    device = cfg["device"]
    if device.startswith("cuda"):
        ndev = torch.cuda.device_count()
        device = f"cuda:{rank % max(1, ndev)}"
        torch.cuda.set_device(device)
    dist.init_process_group(cfg["dist_backend"], init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}",
                            rank=rank, world_size=world,
                            timeout=timedelta(seconds=float(cfg.get("dist_timeout_s", 60))))
    sync = (lambda: torch.cuda.synchronize()) if device.startswith("cuda") else (lambda: None)
    model = build_model(cfg["model"], seed=int(cfg["seed"]), device=device,
                        dtype=cfg.get("dtype", "float32"))
    model.train()
    params = [p for p in model.parameters()]
    global_params = [p.detach().clone() for p in params]
    inner = torch.optim.AdamW(params, lr=float(cfg.get("inner_lr", 1e-3)),
                              weight_decay=float(cfg.get("weight_decay", 0.0)))
    outer = torch.optim.SGD(global_params, lr=float(cfg.get("outer_lr", 0.7)),
                            momentum=float(cfg.get("outer_momentum", 0.9)), nesterov=True)
    gen = torch.Generator().manual_seed(int(cfg["seed"]) * 1009 + rank)
    batch, seq = int(cfg.get("batch", 4)), int(cfg.get("seq_len", 64))
    vocab = int(cfg["model"]["vocab_size"])
    tokens_per_step = batch * seq
    cpu_flag = torch.zeros(1, dtype=torch.long, device=device)
    digest_kind = cfg.get("digest", "sha1")
    merge_min_s = float(cfg.get("merge_min_s") or 0.0)
    ckpt_dir = cfg.get("checkpoint_dir")
    bcast_dev = device if cfg["dist_backend"] == "nccl" else "cpu"

    def inner_step():
        x = synthetic_batch(torch, gen, batch, seq, vocab, device)
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        inner.step()
        inner.zero_grad(set_to_none=True)
        return float(loss.detach())

    def outer_merge(t_start):
        with torch.no_grad():
            pg = [g - p.detach() for g, p in zip(global_params, params)]
            flat = _flatten_dense_tensors(pg)
            del pg
            dist.all_reduce(flat)
            flat /= world
            nbytes = flat.numel() * flat.element_size()
            for g, d in zip(global_params, _unflatten_dense_tensors(flat, global_params)):
                g.grad = d
            outer.step()
            outer.zero_grad(set_to_none=True)
            for p, g in zip(params, global_params):
                p.copy_(g)
            if merge_min_s > 0:   # emulate a larger merge: more real all-reduce traffic
                scratch = torch.empty(flat.numel() + 1, dtype=flat.dtype, device=flat.device)
                while True:
                    scratch[:-1].copy_(flat)
                    scratch[-1] = 1.0 if (rank == 0 and time.monotonic() - t_start < merge_min_s) else 0.0
                    dist.all_reduce(scratch)
                    if float(scratch[-1]) == 0.0:
                        break
            if ckpt_dir and rank == 0:
                os.makedirs(ckpt_dir, exist_ok=True)
                torch.save({"global": [g.detach().cpu() for g in global_params]},
                           os.path.join(ckpt_dir, "outer.pt"))
            sync()
        return nbytes

    def gather(obj):
        out = [None] * world
        dist.all_gather_object(out, obj)
        return out

    # warm-up steps (off the clock) give the measured inner-step time
    warm = []
    for _ in range(int(cfg.get("warmup_steps", 3))):
        t = time.monotonic()
        inner_step()
        sync()
        warm.append(time.monotonic() - t)
    conn = None
    t0 = torch.zeros(1, dtype=torch.float64)
    if rank == 0:
        from multiprocessing.connection import Client
        conn = Client(("127.0.0.1", int(os.environ["EVALKIT_COORD_PORT"])),
                      authkey=bytes.fromhex(os.environ["EVALKIT_COORD_KEY"]))
        conn.send({"type": "ready", "warmup_step_s": sorted(warm)[len(warm) // 2],
                   "n_params": int(sum(p.numel() for p in params)),
                   "tokens_per_step": tokens_per_step * world})
        go = conn.recv()
        if go.get("type") != "go":
            return 0
        t0[0] = go["t0"]
    dist.broadcast(t0, 0)
    t0 = float(t0[0])
    time.sleep(max(0.0, t0 - time.monotonic()))     # the replay clock starts at t0
    step = 0
    while True:
        t_start = time.monotonic()
        loss = inner_step()
        sync()
        t_end = time.monotonic()
        step += 1
        if rank == 0:
            conn.send({"type": "step", "step": step, "start_s": t_start - t0,
                       "end_s": t_end - t0, "loss": loss, "tokens": tokens_per_step * world})
            cpu_flag[0] = int(conn.recv()["action"])
        flag = cpu_flag.to(bcast_dev)
        dist.broadcast(flag, 0)
        action = int(flag[0])
        if action == STOP:
            break
        if action == MERGE:
            before = gather(digest(torch, params, digest_kind))
            sync()
            t_start = time.monotonic()
            nbytes = outer_merge(t_start)
            t_end = time.monotonic()
            after = gather(digest(torch, params, digest_kind))
            if rank == 0:
                conn.send({"type": "merge", "start_s": t_start - t0, "end_s": t_end - t0,
                           "inner_step": step, "bytes": int(nbytes),
                           "digests_before": ",".join(before),
                           "digests_after": ",".join(after)})
    if rank == 0:
        conn.send({"type": "done", "steps": step})
        conn.close()
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)     # skip a slow interpreter teardown; everything is reported already


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
