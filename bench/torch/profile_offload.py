#!/usr/bin/env python3
"""profile_offload.py — where a training step at twice its budget spends
its time (against train2x's 1.2x target): bench_cotenancy.py's
train2x model (GPT-2 from a transformers config, 8192-token vocabulary;
--quick: 8 x 1024, batch 8 x 512) with PyTorch on gpu-memd (the shim),
stream() and offload_activations() as its "gpumem" method runs them, under
a daemon whose --vram-limit is the budget, with

  - the phases of each step (forward, backward, optimizer: a host
    synchronization after each, so the step is slower than the bench's);
  - the host's time in the offloader's calls (pack, and in it the buffer
    allocation and the copy aside, release_after, pageout; unpack, and in
    it the acquire; prefetch), count, median, p90 and total per step;
  - the daemon's account of every move (its debug log's "moved in/out"
    lines: queue and copy, remap and ack, release), of the allocations
    that waited for room ("served after"), of evictions and of the parked
    mappings it asked back.

  profile_offload.py --build BUILD [--json FILE] [--log FILE] [--quick]
                     [--budget BYTES] [--steps N] [--offload JSON]

A diagnostic, not a bench: bench_cotenancy.py is the figure of record.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

from profile_stream import daemon_moves, spread, timed  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30
SERVED = re.compile(r"of (\d+) bytes served after (\d+) ms")


def child(args):
    import gpumem.torch as gt
    gt.enable(name="profile_offload")
    from common import setup_determinism
    torch = setup_determinism()
    import gpumem
    from gpumem import _torchdev, offload
    from gpumem.buffer import Buffer
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = args["cfg"]
    config = GPT2Config(n_positions=cfg["seq"], n_embd=cfg["width"],
                        n_layer=cfg["layers"], n_head=cfg["heads"],
                        vocab_size=cfg["vocab"], attn_implementation="eager")
    model = GPT2LMHeadModel(config).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    client = gpumem.Client(name="profile_offload")
    blocks = model.transformer.h
    per_block = sum(p.numel() * p.element_size()
                    for p in blocks[0].parameters()) + 4096
    rest = sum(p.numel() * p.element_size()
               for n, p in model.named_parameters() if ".h." not in n)
    k = max(2, (int(0.15 * args["budget"]) - rest) // per_block)
    gt.stream(model, opt, client=client, device=0,
              budget=rest + min(k, len(blocks)) * per_block, timeout=120)

    calls = {}
    cls = offload.Offloader
    for name in ("pack", "unpack", "_alloc"):
        setattr(cls, name, timed(calls, name, getattr(cls, name)))
    for name in ("release_after", "pageout", "prefetch"):
        setattr(Buffer, name, timed(calls, name, getattr(Buffer, name)))
    _torchdev.acquire_making_room = timed(calls, "acquire",
                                          _torchdev.acquire_making_room)
    ops_cls = type(_torchdev.ops_for(client))
    ops_cls.copy_aside = timed(calls, "copy_aside", ops_cls.copy_aside)

    if args.get("tail_keep") is not None:
        learn = cls._learn_tail

        def fixed_tail(self, keep=args["tail_keep"]):
            learn(self)
            with offload._tail_lock:
                per = offload._tails.get(self.client, {})
                for device, (n, _) in per.items():
                    per[device] = (n, min(n - 1, keep))
        cls._learn_tail = fixed_tail

    g = torch.Generator(device="cpu").manual_seed(42)
    steps, warmup = args["steps"], 2
    data = torch.randint(0, config.vocab_size,
                         (steps, cfg["batch"], cfg["seq"]), generator=g)
    phases = {"forward": [], "backward": [], "optimizer": [], "step": []}
    stats = None
    at_end = []     # where the VRAM is as each forward pass ends
    for i in range(steps):
        if i == warmup:
            calls.clear()
            print("MARK steady", flush=True)
        ids = data[i].cuda()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            with gt.offload_activations(client=client,
                                        **args["offload"]) as o:
                out = model(input_ids=ids, labels=ids)
                if args.get("empty_cache"):
                    torch.cuda.empty_cache()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        if i >= warmup:
            at_end.append(forward_end(client, torch))
        out.loss.backward()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        if i >= warmup:
            for name, a, b in (("forward", t0, t1), ("backward", t1, t2),
                               ("optimizer", t2, t3), ("step", t0, t3)):
                phases[name].append((b - a) * 1e3)
        stats = dict(o.stats)
        del out
    n = steps - warmup
    return {"phases_ms": {k: spread(v) for k, v in phases.items()},
            "host_ms": {k: spread(v) for k, v in calls.items()},
            "host_ms_per_step": {k: sum(v) / n for k, v in calls.items()},
            "offload_stats_last_step": stats, "plan": o.plan,
            "tail": getattr(o, "tail", None), "forward_end": at_end,
            "shim": gt.stats(), "steps": n}


def forward_end(client, torch):
    """Where the budget's VRAM is as a forward pass ends (after a host
    synchronization), in MiB: the daemon's pool (free, kept for swap-ins,
    used), what PyTorch's cache of this process has allocated and
    reserved (segments on gpu-memd), and the VRAM buffers by client,
    state and whether acquired or parked. What the pool has free and kept
    is what the offloader's tail could have kept in VRAM."""
    status = client.status()
    pool = next(p for p in status.pools
                if p.tier == "vram" and p.device == 0)
    names = {c.client_id: c.name for c in status.clients}
    held = {}
    for b in status.buffers:
        if b.tier != "vram":
            continue
        key = "%s %s%s%s" % (names.get(b.client_id, b.client_id), b.state,
                             " acquired" if b.acquired else "",
                             " parked" if b.parked else "")
        held[key] = held.get(key, 0) + b.size / MiB
    return {"pool_free": pool.free / MiB, "pool_kept": pool.kept / MiB,
            "pool_used": pool.used / MiB,
            "torch_allocated": torch.cuda.memory_allocated() / MiB,
            "torch_reserved": torch.cuda.memory_reserved() / MiB,
            "vram_buffers": held}


def daemon_waits(path):
    served, evictions, parked_asks = [], 0, 0
    with open(path) as f:
        for line in f:
            m = SERVED.search(line)
            if m:
                served.append(int(m.group(2)))
            elif "evicting buffer" in line:
                evictions += 1
            elif "parked bytes on device" in line:
                parked_asks += 1
    return {"waited_ms": spread(served), "evictions": evictions,
            "parked_asks": parked_asks}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "child":
        result = child(json.loads(sys.argv[2]))
        print("RESULT " + json.dumps(result, default=str), flush=True)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--json")
    ap.add_argument("--log", help="the daemon's debug log (default: in "
                    "the build folder)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--budget", type=int, default=3483369472,
                    help="the daemon's --vram-limit in bytes (default: "
                    "train2x's quick budget on an H200, 3.24 GiB)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--offload", default="{}",
                    help="offload_activations() arguments, JSON")
    ap.add_argument("--empty-cache", action="store_true",
                    help="give PyTorch's unused cache back at the end of "
                    "each forward pass (torch.cuda.empty_cache)")
    ap.add_argument("--tail-keep", type=int,
                    help="keep this many slabs of each forward pass's "
                    "tail in VRAM instead of what the offloader learns")
    opts = ap.parse_args()
    build = os.path.abspath(opts.build)
    from common import Daemon, child_env
    from bench_cotenancy import train2x_config
    cfg = train2x_config(opts.quick, 3 * GiB if opts.quick else 12 * GiB)
    log_path = opts.log or os.path.join(build, "profile_offload_daemon.log")
    with open(log_path, "w") as log:
        daemon = Daemon(build, log, f"{opts.budget // MiB}M", "32G",
                        "gmd-profile-", extra=["--log-level", "debug"])
    try:
        env = dict(child_env(build), GPU_MEMD_SOCKET=daemon.socket)
        arg = {"cfg": cfg, "budget": opts.budget, "steps": opts.steps,
               "offload": json.loads(opts.offload),
               "tail_keep": opts.tail_keep,
               "empty_cache": opts.empty_cache}
        proc = subprocess.run([sys.executable, os.path.abspath(__file__),
                               "child", json.dumps(arg)], env=env,
                              stdout=subprocess.PIPE, text=True,
                              timeout=600)
    finally:
        daemon.stop()
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
    if result is None:
        print(proc.stdout[-4000:], file=sys.stderr)
        return 1
    # the daemon's log from the first steady step on: the child prints
    # MARK then, and the daemon's lines carry no step; its moves of the
    # warm-up steps are cut by count instead (the last `steps` fraction)
    tail = os.path.join(build, "profile_offload_moves.log")
    with open(log_path) as f:
        lines = f.readlines()
    keep = lines[len(lines) * 2 // opts.steps:]
    with open(tail, "w") as t:
        t.writelines(keep)
    result.update(cfg=cfg, budget=opts.budget,
                  daemon_moves=daemon_moves(tail),
                  daemon_waits=daemon_waits(tail),
                  note="daemon figures: the last (steps-2)/steps of its "
                  "log lines, about the steady steps")
    text = json.dumps(result, indent=1, default=str)
    print(text)
    if opts.json:
        with open(opts.json, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
