#!/usr/bin/env python3
"""test_offload.py — gpumem.torch.offload_activations, stream and idle on a
real GPU (the GPU suite runs it).

Starts gpu-memd (cuda backend) and, in this process, compares each mode
with the same model in plain VRAM (transformers configs, random weights,
fixed seed, deterministic algorithms, fp32 training / bf16 inference):
  offload      GPT-2 (4 layers x 256) trained 3 steps with AdamW inside
               offload_activations(min_bytes=256K, slab_bytes=16M): every
               loss and every
               final weight bit-identical; activations were offloaded and
               the daemon copied bytes out and in
  stream_infer a Llama config (8 layers, bf16) streamed with a budget of
               about half its blocks, pageout on: logits bit-identical
  stream_train the same config in fp32 trained 3 steps, weights streamed and
               AdamW stepped block by block: losses and weights identical
  cycles       the streamed model runs forward passes until its blocks made
               at least 300 (--quick: 60) page-out / swap-in cycles (the
               daemon's byte counters confirm the swap-ins; the pageouts
               of blocks only read since their swap-in are clean, copying
               nothing: at most two copies out per block, at set-up and
               after the first pass): the
               logits of every pass equal the first, and the weights'
               checksum (bytes of every parameter, after remove()) equals
               the one taken before streaming
  idle         idle() pages out every resident block (tier host) and brings
               them back: logits unchanged
Every case runs on cuda:0 and the daemon's device that is that GPU (the
first line names it). Each check prints one line: PASS/FAIL name: detail.
Exit status 0 when all
pass, 1 on a failure, 77 when there is no GPU, no PyTorch with CUDA or no
transformers. Needs $GMD_BUILD (the build folder), as gpu-suite.sh sets.

    GMD_BUILD=build-cuda python3 tests/gpu/test_offload.py [--quick]
"""

import hashlib
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
import gmd_gpu  # noqa: E402

MiB = 1 << 20
DEVICE = 0      # the daemon's device that is cuda:0, where every case runs


check = gmd_gpu.check


def deterministic():
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


def gpt2(torch):
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4,
                                  n_positions=256, vocab_size=1024,
                                  resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_pdrop=0.0, attn_implementation="eager")
    return transformers.GPT2LMHeadModel(cfg)


def llama(torch, dtype):
    import transformers
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=512, intermediate_size=1408,
                                   num_hidden_layers=8, num_attention_heads=8,
                                   num_key_value_heads=4, vocab_size=2048,
                                   max_position_embeddings=512,
                                   attn_implementation="eager")
    return transformers.LlamaForCausalLM(cfg).to(dtype)


def weights_hash(model):
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


def train(torch, model, ids, steps, offload=None):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return opt, [step(torch, model, opt, ids, offload) for _ in range(steps)]


def step(torch, model, opt, ids, offload=None):
    opt.zero_grad(set_to_none=True)
    if offload is None:
        loss = model(ids, labels=ids).loss
    else:
        with offload() as o:
            loss = model(ids, labels=ids).loss
        step.last = o
    loss.backward()
    opt.step()
    return loss.item()


def vram_pool(client):
    return next(p for p in client.status("pools").pools
                if p.tier == "vram" and p.device == DEVICE)


def case_offload(torch, gt, client):
    ids = torch.randint(0, 1024, (8, 256), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(1))
    ref = gpt2(torch).cuda()
    _, ref_losses = train(torch, ref, ids, 3)
    ref_hash = weights_hash(ref)
    del ref
    status0 = vram_pool(client)
    model = gpt2(torch).cuda()
    stats = []

    def offload():
        # 16 MiB slabs: ~19 a step, most paged out well before the
        # backward pass wants them, so that bytes go both ways (a 256 MiB
        # slab's pageout is still copying when this small model's backward
        # pass acquires it: cancelled, nothing comes back)
        return gt.offload_activations(min_bytes=256 << 10,
                                      slab_bytes=16 << 20, client=client)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(3):
        losses.append(step(torch, model, opt, ids, offload))
        stats.append(dict(step.last.stats))
    torch.cuda.synchronize()
    status1 = vram_pool(client)
    check("offload.losses_identical", losses == ref_losses,
          f"{losses} vs {ref_losses}")
    check("offload.weights_identical", weights_hash(model) == ref_hash,
          "sha256 of every parameter")
    s = stats[-1]
    check("offload.offloaded", s["offloaded"] > 0 and
          s["unpacked"] == s["offloaded"],
          f"{s['offloaded']} tensors, {s['offloaded_bytes'] / MiB:.1f} MiB "
          f"offloaded a step, {s['kept']} kept, {s['prefetched']} prefetched")
    moved_out = status1.bytes_out - status0.bytes_out
    moved_in = status1.bytes_in - status0.bytes_in
    check("offload.daemon_moved", moved_out > 0 and moved_in > 0,
          f"{moved_out / MiB:.0f} MiB out, {moved_in / MiB:.0f} MiB in")


def stream_model(torch, gt, client, dtype, pageout=True):
    model = llama(torch, dtype)            # on the CPU: stream() moves it
    blocks = model.model.layers
    per_block = sum(p.numel() * p.element_size()
                    for p in blocks[0].parameters())
    rest = sum(p.numel() * p.element_size() for n, p in
               model.named_parameters() if ".layers." not in n)
    budget = rest + (2 + len(blocks) // 2) * (per_block + 4096)
    s = gt.stream(model, budget=budget, client=client, pageout=pageout,
                  device=0)
    return model, s


def case_stream_infer(torch, gt, client):
    ids = torch.randint(0, 2048, (4, 128), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(2))
    ref = llama(torch, torch.bfloat16).cuda()
    with torch.no_grad():
        expected = ref(ids).logits
    del ref
    model, s = stream_model(torch, gt, client, torch.bfloat16)
    resident = sum(b.resident for b in s.blocks)
    with torch.no_grad():
        got = [model(ids).logits for _ in range(2)]
    torch.cuda.synchronize()
    check("stream_infer.logits_identical",
          all(torch.equal(g, expected) for g in got),
          f"{resident} of {len(s.blocks)} blocks resident, "
          f"{s.stats['acquires']} acquires, {s.stats['prefetches']} prefetches")
    client.wait(timeout=30)
    tiers = [b.buf.tier for b in s.blocks]
    # every streamed block paged out after use but the lead + 1 first of
    # the next pass, which the last blocks prefetched (streaming.py)
    check("stream_infer.streamed_on_host",
          len(s.blocks) - resident - s.lead - 1 <= tiers.count("host")
          < len(s.blocks) - resident, f"tiers {tiers}, lead {s.lead}")
    return model, s, ids, expected


def case_stream_train(torch, gt, client):
    ids = torch.randint(0, 2048, (4, 128), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(3))
    ref = llama(torch, torch.float32).cuda()
    _, ref_losses = train(torch, ref, ids, 3)
    ref_hash = weights_hash(ref)
    del ref
    model, s = stream_model(torch, gt, client, torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    s.attach_optimizer(opt)
    losses = [step(torch, model, opt, ids) for _ in range(3)]
    torch.cuda.synchronize()
    check("stream_train.losses_identical", losses == ref_losses,
          f"{losses} vs {ref_losses}; backward acquires "
          f"{s.stats['backward_acquires']}")
    s.remove()
    check("stream_train.weights_identical", weights_hash(model) == ref_hash,
          "sha256 of every parameter")


def case_cycles(torch, gt, client, quick):
    ids = torch.randint(0, 2048, (2, 64), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(4))
    model = llama(torch, torch.bfloat16)
    before = weights_hash(model)
    s = gt.stream(model, budget=None, client=client, pageout=True, device=0)
    for b in s.blocks:                      # stream every block
        b.resident = False
        s._release(b)
    want = 60 if quick else 300
    first, same, passes = None, True, 0
    m0 = vram_pool(client)
    t0 = time.monotonic()
    while s.stats["pageouts"] - len(s.blocks) < want:
        with torch.no_grad():
            logits = model(ids).logits
        if first is None:
            first = logits
        elif not torch.equal(logits, first):
            same = False
        passes += 1
        client.wait(timeout=30)     # every pageout done: each pass swaps in
    torch.cuda.synchronize()
    secs = time.monotonic() - t0
    cycles = s.stats["pageouts"] - len(s.blocks)
    client.wait(timeout=30)
    m1 = vram_pool(client)
    block = s.blocks[0].nbytes
    out_moves = (m1.bytes_out - m0.bytes_out) / block
    in_moves = (m1.bytes_in - m0.bytes_in) / block
    check("cycles.logits_stable", same,
          f"{passes} passes, {cycles} pageouts asked in {secs:.1f} s; the "
          f"daemon moved {out_moves:.0f} blocks out, {in_moves:.0f} in")
    check("cycles.moved", in_moves >= want,
          f"at least {want} swap-ins copied from host memory")
    check("cycles.clean", out_moves <= 2 * len(s.blocks),
          f"{out_moves:.0f} blocks copied out for {len(s.blocks)} blocks: "
          f"the read-only blocks' pageouts were clean (each copies at "
          f"most twice: the pageout at set-up, and the one after the "
          f"first pass, whose swap-in followed set-up's read-write lease)")
    s.remove()
    check("cycles.weights_checksum", weights_hash(model) == before,
          f"sha256 of the weights after {cycles} cycles")


def case_idle(torch, gt, client, model, s, ids, expected):
    bufs = [b.buf for b in [s.rest] + s.blocks if b.resident]
    with gt.idle():
        client.wait(timeout=30)
        tiers = [b.tier for b in bufs]
    check("idle.paged_out", tiers == ["host"] * len(bufs),
          f"{len(bufs)} resident buffers: {tiers}")
    check("idle.back", [b.tier for b in bufs] == ["vram"] * len(bufs), "")
    with torch.no_grad():
        got = model(ids).logits
    check("idle.logits_identical", torch.equal(got, expected), "")
    s.remove()


def main():
    global DEVICE
    quick = "--quick" in sys.argv
    torch = gmd_gpu.cuda_torch("test_offload.py")
    if torch is None:
        return gmd_gpu.SKIP
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"SKIP: test_offload.py: {e}", flush=True)
        return gmd_gpu.SKIP
    build = gmd_gpu.build_dir("test_offload.py")
    if not build:
        return 2
    os.environ.setdefault("GPUMEM_LIBRARY", os.path.join(
        build, "client", "libgpumem.so.0"))
    tmp = tempfile.mkdtemp(prefix="gmd-offload-")
    sock = os.path.join(tmp, "sock")
    log_path = os.path.join(tmp, "log")
    log = open(log_path, "w")
    daemon = subprocess.Popen(
        [os.environ.get("GMD_DAEMON", os.path.join(build, "daemon",
                                                   "gpu-memd")),
         "--backend", "cuda", "--socket", sock, "--vram-limit", "8G",
         "--host-limit", "8G"], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(3000):
        if os.path.exists(sock):
            break
        time.sleep(0.01)
    time.sleep(0.2)
    try:
        torch = deterministic()
        import gpumem
        import gpumem.torch as gt
        client = gpumem.Client(sock, name="test_offload")
        DEVICE = gmd_gpu.one_device(client, 0)
        cases = [("offload", lambda: case_offload(torch, gt, client)),
                 ("stream_train", lambda: case_stream_train(torch, gt,
                                                            client)),
                 ("cycles", lambda: case_cycles(torch, gt, client, quick))]
        for name, fn in cases:
            print(f"--- {name}", flush=True)
            try:
                fn()
            except Exception as e:  # one case's crash must not hide the rest
                import traceback
                traceback.print_exc()
                check(name, False, f"{type(e).__name__}: {e}")
        print("--- stream_infer, idle", flush=True)
        try:
            state = case_stream_infer(torch, gt, client)
            case_idle(torch, gt, client, *state)
        except Exception as e:
            import traceback
            traceback.print_exc()
            check("stream_infer", False, f"{type(e).__name__}: {e}")
        client.close()
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        log.close()
        with open(log_path) as f:
            lines = f.readlines()
        print("---- gpu-memd log (last 40 lines)\n" +
              "".join("  | " + line for line in lines[-40:]))
    return gmd_gpu.verdict("test_offload.py")


if __name__ == "__main__":
    sys.exit(main())
