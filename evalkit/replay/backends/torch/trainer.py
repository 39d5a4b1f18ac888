"""One DiLoCo learner process: ``python -m evalkit.replay.backends.torch.trainer rig.json``.

Environment: ``RANK``, ``WORLD_SIZE``, ``MASTER_PORT``, ``EVALKIT_COORD_PORT``,
``EVALKIT_COORD_KEY``.  The process is persistent (part of the coordinator's "rig"): it
builds its model once, connects to the coordinator (every rank has its own connection) and
then serves runs until told to exit.  Per run (``{"type": "run", ...}``) it re-initialises
parameters from the run's seed, builds fresh AdamW and outer-SGD state (momentum 0), reseeds
its data generator, measures a few warm-up steps, re-initialises again (so the run starts
from a state that depends on the seed only), reports ``ready`` with a digest of that
state, and waits for ``go`` with the replay clock ``t0``.  During a run rank 0 talks to the
policy loop and broadcasts every step's action to all ranks, so every learner takes the
same decision.  Actions: 0 continue, 1 merge, 2 stop.

Inner steps: AdamW on synthetic token sequences (an arithmetic progression mod vocab per
sequence, so the loss falls).  Outer merge: pseudo-gradient ``global - local``, one
all-reduce of the flattened buffer, mean, outer SGD with Nesterov momentum on the global
copy, local <- global, optional checkpoint write.  ``merge_min_s`` pads the merge to that
length, with more all-reduces (``merge_load = "allreduce"``) or with repeated outer-SGD
passes over ``merge_bytes`` on ``merge_threads`` threads (``"memory"``, which contends for
the cores and memory bandwidth the sidecar uses).  With ``step_period_s`` the inner steps
are paced on a fixed clock (:mod:`~evalkit.replay.backends.torch.pacing`); rank 0 reports
the clock's ticks, missed ticks and worst lateness with its ``done``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from datetime import timedelta

from evalkit.replay.backends.models import build_model, init_params
from evalkit.replay.backends.procs import die_with_parent
from evalkit.replay.backends.torch.pacing import StepClock, contend_until

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
        h.update(p.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def main(path: str) -> int:
    die_with_parent()
    with open(path) as f:
        rig = json.load(f)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    import torch
    import torch.distributed as dist

    torch.set_num_threads(int(rig.get("threads", 1)))
    device = rig["device"]
    if device.startswith("cuda"):
        ndev = torch.cuda.device_count()
        device = f"cuda:{rank % max(1, ndev)}"
        torch.cuda.set_device(device)
    dist.init_process_group(rig["dist_backend"],
                            init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}",
                            rank=rank, world_size=world,
                            timeout=timedelta(seconds=float(rig.get("dist_timeout_s", 60))))
    model = build_model(rig["model"], seed=0, device=device, dtype=rig.get("dtype", "float32"))
    model.train()
    from multiprocessing.connection import Client
    conn = Client(("127.0.0.1", int(os.environ["EVALKIT_COORD_PORT"])),
                  authkey=bytes.fromhex(os.environ["EVALKIT_COORD_KEY"]))
    conn.send({"type": "hello", "rank": rank,
               "n_params": int(sum(p.numel() for p in model.parameters()))})
    learner = Learner(torch, dist, model, rig, rank, world, device)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            break
        if msg.get("type") != "run":
            break
        learner.run(msg, conn)
    conn.close()
    sys.stdout.flush()
    os._exit(0)     # skip a slow interpreter teardown; everything is reported already


class Learner:
    def __init__(self, torch, dist, model, rig, rank, world, device):
        self.torch, self.dist, self.model = torch, dist, model
        self.rank, self.world, self.device = rank, world, device
        self.params = list(model.parameters())
        self.vocab = int(rig["model"]["vocab_size"])
        self.sync = (torch.cuda.synchronize if device.startswith("cuda") else (lambda: None))
        self.bcast_dev = device if rig["dist_backend"] == "nccl" else "cpu"

    def reset(self, cfg) -> None:
        """Parameters, optimizer state and data stream from the run's seed only."""
        torch = self.torch
        seed = int(cfg["seed"])
        init_params(self.model, seed)
        for p in self.params:
            p.grad = None
        self.global_params = [p.detach().clone() for p in self.params]
        self.inner = torch.optim.AdamW(self.params, lr=float(cfg.get("inner_lr", 1e-3)),
                                       weight_decay=float(cfg.get("weight_decay", 0.0)))
        self.outer = torch.optim.SGD(self.global_params, lr=float(cfg.get("outer_lr", 0.7)),
                                     momentum=float(cfg.get("outer_momentum", 0.9)),
                                     nesterov=True)
        self.gen = torch.Generator().manual_seed(seed * 1009 + self.rank)
        self.sync()

    def inner_step(self, batch, seq) -> float:
        x = synthetic_batch(self.torch, self.gen, batch, seq, self.vocab, self.device)
        loss = self.model(input_ids=x, labels=x).loss
        loss.backward()
        self.inner.step()
        self.inner.zero_grad(set_to_none=True)
        return float(loss.detach())

    def outer_merge(self, t_start, cfg) -> int:
        torch, dist, world, rank = self.torch, self.dist, self.world, self.rank
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
        merge_min_s = float(cfg.get("merge_min_s") or 0.0)
        ckpt_dir = cfg.get("checkpoint_dir")
        with torch.no_grad():
            pg = [g - p.detach() for g, p in zip(self.global_params, self.params)]
            flat = _flatten_dense_tensors(pg)
            del pg
            dist.all_reduce(flat)
            flat /= world
            nbytes = flat.numel() * flat.element_size()
            for g, d in zip(self.global_params,
                            _unflatten_dense_tensors(flat, self.global_params)):
                g.grad = d
            self.outer.step()
            self.outer.zero_grad(set_to_none=True)
            for p, g in zip(self.params, self.global_params):
                p.copy_(g)
            if merge_min_s > 0 and cfg.get("merge_load") == "memory":
                # the outer step's work made heavy: memory traffic and threads that
                # occupy the cores the sidecar serves on
                contend_until(torch, self.contention_buffers(cfg), t_start + merge_min_s,
                              int(cfg["merge_threads"]),
                              lr=float(cfg.get("outer_lr", 0.7)),
                              momentum=float(cfg.get("outer_momentum", 0.9)),
                              sync=self.sync if self.device.startswith("cuda") else None)
            elif merge_min_s > 0:   # emulate a larger merge: more real all-reduce traffic
                scratch = torch.empty(flat.numel() + 1, dtype=flat.dtype, device=flat.device)
                while True:
                    scratch[:-1].copy_(flat)
                    more = rank == 0 and time.monotonic() - t_start < merge_min_s
                    scratch[-1] = 1.0 if more else 0.0
                    dist.all_reduce(scratch)
                    if float(scratch[-1]) == 0.0:
                        break
            if ckpt_dir and rank == 0:
                os.makedirs(ckpt_dir, exist_ok=True)
                torch.save({"global": [g.detach().cpu() for g in self.global_params]},
                           os.path.join(ckpt_dir, "outer.pt"))
            self.sync()
        return nbytes

    def contention_buffers(self, cfg):
        """(params, momentum, grad) of ``merge_bytes`` in all, on the learner's device, kept
        between merges (drawn on the CPU, so the values do not depend on the device)."""
        n = max(1, int(cfg["merge_bytes"]) // (3 * 4))
        bufs = getattr(self, "_contention", None)
        if bufs is None or bufs[0].numel() != n:
            gen = self.torch.Generator().manual_seed(self.rank)
            bufs = tuple(self.torch.rand(n, generator=gen).to(self.device) for _ in range(3))
            self._contention = bufs
        return bufs

    def gather(self, obj):
        out = [None] * self.world
        self.dist.all_gather_object(out, obj)
        return out

    def run(self, cfg, conn) -> None:
        torch, dist, rank = self.torch, self.dist, self.rank
        batch, seq = int(cfg.get("batch", 4)), int(cfg.get("seq_len", 64))
        tokens_per_step = batch * seq * self.world
        digest_kind = cfg.get("digest", "sha1")
        # warm-up steps (off the clock) give the measured inner-step time; then the state
        # is re-initialised so the run starts from the seed's state, whatever ran before
        self.reset(cfg)
        warm = []
        for _ in range(int(cfg.get("warmup_steps", 3))):
            t = time.monotonic()
            self.inner_step(batch, seq)
            self.sync()
            warm.append(time.monotonic() - t)
        self.reset(cfg)
        init = self.gather(digest(torch, self.params, "sha1" if digest_kind == "sha1"
                                  else "sum"))
        conn.send({"type": "ready", "rank": rank,
                   "warmup_step_s": sorted(warm)[len(warm) // 2] if warm else None,
                   "n_params": int(sum(p.numel() for p in self.params)),
                   "tokens_per_step": tokens_per_step, "init_digests": init})
        go = conn.recv()
        if go.get("type") != "go":
            return
        t0 = float(go["t0"])
        time.sleep(max(0.0, t0 - time.monotonic()))     # the replay clock starts at t0
        flag = torch.zeros(1, dtype=torch.long, device=self.bcast_dev)
        step = 0
        clock = None
        if cfg.get("step_period_s"):
            clock = StepClock(t0, float(cfg["step_period_s"]), float(cfg["clock_slack_s"]))
        while True:
            if clock is not None:
                time.sleep(max(0.0, clock.next_tick() - time.monotonic()))
            t_start = time.monotonic()
            if clock is not None:
                clock.step_started(t_start)
            loss = self.inner_step(batch, seq)
            self.sync()
            t_end = time.monotonic()
            step += 1
            if rank == 0:
                conn.send({"type": "step", "step": step, "start_s": t_start - t0,
                           "end_s": t_end - t0, "loss": loss, "tokens": tokens_per_step})
                flag[0] = int(conn.recv()["action"])
            dist.broadcast(flag, 0)
            action = int(flag[0])
            if action == STOP:
                break
            if action == MERGE:
                before = self.gather(digest(torch, self.params, digest_kind))
                self.sync()
                t_start = time.monotonic()
                nbytes = self.outer_merge(t_start, cfg)
                t_end = time.monotonic()
                after = self.gather(digest(torch, self.params, digest_kind))
                if clock is not None:
                    clock.merge_ended(t_end)
                if rank == 0:
                    conn.send({"type": "merge", "start_s": t_start - t0, "end_s": t_end - t0,
                               "inner_step": step, "bytes": int(nbytes),
                               "digests_before": ",".join(before),
                               "digests_after": ",".join(after)})
        self.sync()
        done = {"type": "done", "rank": rank, "steps": step}
        if clock is not None:
            done["pacing"] = clock.record()
        conn.send(done)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
