#!/usr/bin/env python3
"""test_spill.py — gpumem.torch.spill on a real GPU against plain VRAM and
streaming, and the link the daemon measured at start (the GPU suite runs
it).

Starts gpu-memd (cuda backend) with a VRAM pool of about half the model's
weights (--vram-limit: the budget) and its metrics endpoint, then, in this
process, with a Llama config (transformers, random weights, bf16, fixed
seed, deterministic algorithms):
  link        the daemon measured the link each way soon after start:
              status (Pool.link_bytes_per_s_in/_out) above 1 GB/s each
              way, the journal line, the metrics series
              gpumemd_link_bytes_per_second{device="0",direction=...}
              (device 0: the daemon's device that is cuda:0, which every
              case uses; the first line names it)
  plain       greedy generation with the model in plain VRAM (PyTorch's
              allocator): the reference logits, tokens/s
  spill       the same model spilled (gpumem.torch.spill, no budget: the
              pool decides): weights in VRAM up to the pool, the rest on
              host memory, every buffer held where it was placed (status);
              logits of every generated token bit-identical to plain;
              tokens/s
  stream      the same model streamed (gpumem.torch.stream, budget 0.9 of
              the pool, lead planned from the link): logits bit-identical
              to plain; tokens/s, and the plan (link, block time, lead)
Each check prints one line: PASS/FAIL name: detail; each timing one JSON
line ({"test": "spill", "mode": ..., "batch": ..., "tokens_per_s": ...}),
also appended to $OUT/spill.jsonl when $OUT is set. Batch 1 and 16
(--quick: batch 1, a smaller model). Exit status 0 when all pass, 1 on a
failure, 77 when there is no GPU, no PyTorch with CUDA or no transformers.
Needs $GMD_BUILD (the build folder), as gpu-suite.sh sets.

    GMD_BUILD=build-cuda python3 tests/gpu/test_spill.py [--quick]
"""

import copy
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
import gmd_gpu  # noqa: E402

MiB = 1 << 20
NEW_TOKENS = 32
DEVICE = 0      # the daemon's device that is cuda:0, where every case runs


check = gmd_gpu.check


def record(**fields):
    line = json.dumps(dict(test="spill", **fields))
    print(line, flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "spill.jsonl"), "a") as f:
            f.write(line + "\n")


def deterministic():
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


def llama(torch, quick):
    """The 0.95B config of accelerate's published figure (hidden 2048, 16
    layers), or a small one."""
    import transformers
    torch.manual_seed(0)
    if quick:
        # the embedding and head small enough to leave the budget room
        # for blocks in flight
        cfg = transformers.LlamaConfig(
            hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
            num_attention_heads=8, num_key_value_heads=8, vocab_size=8000,
            max_position_embeddings=512, attn_implementation="eager")
    else:
        cfg = transformers.LlamaConfig(
            hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
            num_attention_heads=16, num_key_value_heads=16,
            vocab_size=32000, max_position_embeddings=512,
            attn_implementation="eager")
    return transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()


def weight_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


def generate(torch, model, ids):
    """Greedy generation of NEW_TOKENS: (logits of each step, stacked;
    seconds), after a short warm-up."""
    kwargs = dict(do_sample=False, max_new_tokens=NEW_TOKENS,
                  min_new_tokens=NEW_TOKENS, pad_token_id=0,
                  return_dict_in_generate=True)
    with torch.no_grad():
        model.generate(ids, **dict(kwargs, max_new_tokens=2,
                                   min_new_tokens=2))
        torch.cuda.synchronize()
        t0 = time.monotonic()
        try:
            out = model.generate(ids, output_logits=True, **kwargs)
            steps = out.logits
        except TypeError:           # transformers before output_logits
            out = model.generate(ids, output_scores=True, **kwargs)
            steps = out.scores
        torch.cuda.synchronize()
        secs = time.monotonic() - t0
    return torch.stack([s.float() for s in steps]), secs


def inputs(torch, model, batch):
    return torch.randint(0, model.config.vocab_size, (batch, 16),
                         device="cuda",
                         generator=torch.Generator("cuda").manual_seed(batch))


def vram_pool(client):
    return next(p for p in client.status("pools").pools
                if p.tier == "vram" and p.device == DEVICE)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def case_link(client, log_path, port):
    deadline = time.monotonic() + 30
    pool = vram_pool(client)
    while not pool.link_bytes_per_s_in and time.monotonic() < deadline:
        time.sleep(0.1)
        pool = vram_pool(client)
    rin, rout = pool.link_bytes_per_s_in, pool.link_bytes_per_s_out
    record(mode="link", device=DEVICE, in_GBps=round(rin / 1e9, 2),
           out_GBps=round(rout / 1e9, 2))
    check("link.status", rin > 1e9 and rout > 1e9,
          f"{rin / 1e9:.1f} GB/s in, {rout / 1e9:.1f} GB/s out")
    # one line per device the daemon serves; this case is about cuda:0's
    with open(log_path) as f:
        lines = [x for x in f
                 if f"device {DEVICE}: link to host memory" in x]
    check("link.logged", len(lines) == 1,
          lines[0].strip() if lines else "no line in the daemon's log")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                    timeout=5) as r:
            page = r.read().decode()
    except OSError as e:
        page = f"scrape failed: {e}"
    got = {}
    for d in ("in", "out"):
        m = re.search(r'^gpumemd_link_bytes_per_second\{'
                      f'device="{DEVICE}",direction="{d}"' r'\} (\S+)$',
                      page, re.M)
        got[d] = float(m.group(1)) if m else None
    check("link.metrics", got == {"in": float(rin), "out": float(rout)},
          f"{got}")


def case_plain(torch, base, batches):
    model = copy.deepcopy(base).cuda()
    ref = {}
    for batch in batches:
        logits, secs = generate(torch, model, inputs(torch, model, batch))
        ref[batch] = logits
        record(mode="plain", batch=batch, new_tokens=NEW_TOKENS,
               seconds=round(secs, 3),
               tokens_per_s=round(NEW_TOKENS / secs, 2))
    del model
    torch.cuda.empty_cache()
    return ref


def case_spill(torch, gt, client, base, batches, ref, limit):
    model = copy.deepcopy(base)         # on the CPU: spill copies it in
    s = gt.spill(model, client=client, device=0)
    placed = s.placement()
    check("spill.placed", placed["host"] > 0 and 0 < placed["vram"] <= limit,
          f"{placed['vram'] / MiB:.0f} MiB in VRAM (pool {limit / MiB:.0f} "
          f"MiB), {placed['host'] / MiB:.0f} MiB on host, "
          f"{len(s.parts)} buffers")
    ids = {p.buf.id: p.tier for p in s.parts}
    seen = {b.buffer_id: (b.tier, b.acquired)
            for b in client.status("buffers").buffers if b.buffer_id in ids}
    check("spill.held_where_placed",
          seen == {i: (t, True) for i, t in ids.items()},
          f"{sum(t == 'host' for t in ids.values())} of {len(ids)} buffers "
          "on host, all acquired")
    for batch in batches:
        logits, secs = generate(torch, model, inputs(torch, model, batch))
        check(f"spill.logits_identical.batch{batch}",
              torch.equal(logits, ref[batch]),
              f"{logits.shape[0]} tokens")
        record(mode="spill", batch=batch, new_tokens=NEW_TOKENS,
               seconds=round(secs, 3),
               tokens_per_s=round(NEW_TOKENS / secs, 2),
               vram_bytes=placed["vram"], host_bytes=placed["host"])
    s.remove()
    del model
    torch.cuda.empty_cache()


def case_stream(torch, gt, client, base, batches, ref, limit):
    model = copy.deepcopy(base)
    s = gt.stream(model, budget=int(limit * 0.9), client=client, device=0)
    resident = sum(b.resident for b in s.blocks)
    for batch in batches:
        logits, secs = generate(torch, model, inputs(torch, model, batch))
        check(f"stream.logits_identical.batch{batch}",
              torch.equal(logits, ref[batch]),
              f"{resident} of {len(s.blocks)} blocks resident, lead "
              f"{s.lead}, plan {s.plan}")
        record(mode="stream", batch=batch, new_tokens=NEW_TOKENS,
               seconds=round(secs, 3),
               tokens_per_s=round(NEW_TOKENS / secs, 2),
               resident_blocks=resident, blocks=len(s.blocks), lead=s.lead,
               plan=s.plan)
    check("stream.lead_planned", s.plan is not None and s.plan["planned"],
          f"{s.plan}")
    s.remove()
    del model
    torch.cuda.empty_cache()


def main():
    global DEVICE
    quick = "--quick" in sys.argv
    torch = gmd_gpu.cuda_torch("test_spill.py")
    if torch is None:
        return gmd_gpu.SKIP
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"SKIP: test_spill.py: {e}", flush=True)
        return gmd_gpu.SKIP
    build = gmd_gpu.build_dir("test_spill.py")
    if not build:
        return 2
    os.environ.setdefault("GPUMEM_LIBRARY", os.path.join(
        build, "client", "libgpumem.so.0"))
    torch = deterministic()
    base = llama(torch, quick)
    weights = weight_bytes(base)
    limit = weights // 2 // MiB * MiB           # the budget: half of it
    batches = (1,) if quick else (1, 16)
    print(f"--- model: {weights / MiB:.0f} MiB of bf16 weights, VRAM pool "
          f"{limit / MiB:.0f} MiB", flush=True)

    tmp = tempfile.mkdtemp(prefix="gmd-spill-")
    sock = os.path.join(tmp, "sock")
    log_path = os.path.join(tmp, "log")
    conf = os.path.join(tmp, "gpu-memd.conf")
    port = free_port()
    with open(conf, "w") as f:
        f.write(f"[metrics]\nlisten = 127.0.0.1:{port}\n")
    log = open(log_path, "w")
    daemon = subprocess.Popen(
        [os.environ.get("GMD_DAEMON", os.path.join(build, "daemon",
                                                   "gpu-memd")),
         "--backend", "cuda", "--socket", sock, "--config", conf,
         "--vram-limit", f"{limit // MiB}M", "--host-limit", "16G"],
        stdout=log, stderr=subprocess.STDOUT)
    for _ in range(3000):
        if os.path.exists(sock):
            break
        time.sleep(0.01)
    time.sleep(0.2)
    try:
        import gpumem
        import gpumem.torch as gt
        client = gpumem.Client(sock, name="test_spill")
        DEVICE = gmd_gpu.one_device(client, 0)
        print("--- link", flush=True)
        case_link(client, log_path, port)
        ref = None
        cases = [("plain", lambda: case_plain(torch, base, batches)),
                 ("spill", lambda: case_spill(torch, gt, client, base,
                                              batches, ref, limit)),
                 ("stream", lambda: case_stream(torch, gt, client, base,
                                                batches, ref, limit))]
        for name, fn in cases:
            print(f"--- {name}", flush=True)
            try:
                value = fn()
                if name == "plain":
                    ref = value
            except Exception as e:  # one case's crash must not hide the rest
                import traceback
                traceback.print_exc()
                check(name, False, f"{type(e).__name__}: {e}")
                if name == "plain":
                    break
        client.close()
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        log.close()
        with open(log_path) as f:
            lines = f.readlines()
        print("---- gpu-memd log (last 40 lines)\n" +
              "".join("  | " + line for line in lines[-40:]))
    return gmd_gpu.verdict("test_spill.py")


if __name__ == "__main__":
    sys.exit(main())
