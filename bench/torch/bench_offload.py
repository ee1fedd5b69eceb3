#!/usr/bin/env python3
"""bench_offload.py — activation offload and weight streaming through
gpu-memd against its peers, in the same run on the same GPU
(scripts/gpu-suite.sh runs it: GMD_BENCH entry "offload", not default).

Training (GPT-2 from a transformers config, random weights, bf16 autocast,
AdamW; full: 12 layers x 1024, batch 8 x 1024, as the peers' published figure;
--quick: 6 x 768, batch 4 x 512), median step time of the steps after the
warm-up, one fresh process per method:
  plain            no offload
  offload M L      `with gpumem.torch.offload_activations(min_bytes=M,
                   lead=L)` around the forward pass; a sweep of M (1, 4, 16,
                   64 MiB; --quick: 4, 16) at the default lead, and of L
                   (128 MiB, 2 GiB) at the default M (full only): this is
                   where the defaults get measured. The sweep runs last,
                   and methods that would start past --deadline (170 s
                   quick, 540 s full) are skipped and marked so
  save_on_cpu      torch.autograd.graph.save_on_cpu(pin_memory=True)
  stream           gpumem.torch.stream(model, opt, budget=half the blocks)
                   (weights and AdamW state streamed) with activations
                   offloaded at the defaults
Each reports losses (bit-identical to plain or not), peak VRAM PyTorch's
allocator held (gpu-memd's buffers are not in that figure), and for offload what it moved and the daemon's bytes and time
copying each way (GB/s).

Inference (a Llama config in bf16, batch 1 or --batch N, greedy generate; full: hidden
2048 x 16 layers, 0.95B, 32 tokens, as accelerate's published figure;
--quick: 8 layers, 16 tokens), tokens/s, one fresh process per method:
  vram             the model in VRAM
  stream           gpumem.torch.stream(model, budget=B) with B about half
                   the weights; the daemon's --vram-limit is B (+256 MiB for
                   2 MiB rounding and the daemon's reserve chunks): blocks
                   past the budget are evicted on demand; a copy of the
                   model in VRAM in the same process generates in turn
                   with the streamed one (vram_beside_tokens_per_s): the
                   launch-bound generation's speed moves by up to 2x
                   between processes; link_bound_tokens_per_s is the
                   streamed bytes of a pass at the link's host-to-VRAM
                   rate the daemon measured at start, and of_bound the
                   streamed speed over the lower of the two bounds
  accelerate       accelerate.cpu_offload(model, execution_device=cuda:0)
                   (skipped when accelerate is missing)
Generated tokens are compared with the vram run's.

Not done here: no helper process holds the rest of the card, so the
budget binds gpu-memd's buffers only (PyTorch's own allocations are
outside it) and NVML is not sampled; peak VRAM is what PyTorch reports.
bench_cotenancy.py has the rest of the benchmarks (training at twice
the budget, three processes on one card) with the budget imposed the same
way on every method (holder.py) and NVML sampling (nvml_watch.py).

    bench_offload.py --build BUILD [--json FILE] [--log FILE] [--quick]
                     [--batch N] [--cpus LIST] [--skip train,infer]

Output: a summary on stdout and JSON (--json): {"train": [...],
"infer": [...], "defaults": {...}, "quick": bool}.
"""

import argparse
import copy
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
MiB = 1 << 20
GiB = 1 << 30

sys.path.insert(0, HERE)
from common import (Daemon, child_env, pool_moves, run_for_result,  # noqa: E402
                    setup_determinism)


def moved(before, after):
    d = {k: after[k] - before[k] for k in before}
    for way in ("out", "in"):
        us = d[f"copy_us_{way}"]
        d[f"gbps_{way}"] = d[f"bytes_{way}"] / us / 1e3 if us else None
    return d


# ---- children ---------------------------------------------------------------

def child_train(args):
    torch = setup_determinism()
    from transformers import GPT2Config, GPT2LMHeadModel
    quick = args["quick"]
    layers, width, batch, seq = (6, 768, 4, 512) if quick else \
        (12, 1024, 8, 1024)
    steps, warmup = (8, 3) if quick else (14, 4)
    config = GPT2Config(n_positions=seq, n_embd=width, n_layer=layers,
                        n_head=width // 64, vocab_size=50257,
                        attn_implementation="eager")
    model = GPT2LMHeadModel(config).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    g = torch.Generator(device="cpu").manual_seed(42)
    data = torch.randint(0, config.vocab_size, (steps, batch, seq),
                         generator=g)
    method = args["method"]
    client = None
    streamer = None
    if method == "stream":
        # weights and AdamW state streamed, half the blocks resident, and
        # the activations offloaded at the default threshold
        import gpumem
        import gpumem.torch as gt
        client = gpumem.Client(name="bench_offload")
        blocks = model.transformer.h
        per_block = sum(p.numel() * p.element_size()
                        for p in blocks[0].parameters()) + 4096
        rest = sum(p.numel() * p.element_size() for n, p in
                   model.named_parameters() if ".h." not in n)
        streamer = gt.stream(model, opt, client=client, device=0,
                             budget=rest + (2 + len(blocks) // 2) * per_block)

        def scope():
            return gt.offload_activations(client=client)
    elif method == "offload":
        import gpumem
        import gpumem.torch as gt
        client = gpumem.Client(name="bench_offload")

        def scope():
            return gt.offload_activations(min_bytes=args["min_bytes"],
                                          lead=args["lead"], client=client)
    elif method == "save_on_cpu":
        def scope():
            return torch.autograd.graph.save_on_cpu(pin_memory=True)
    else:
        import contextlib

        def scope():
            return contextlib.nullcontext()
    losses, times, last = [], [], None
    m0 = None
    for i in range(steps):
        ids = data[i].cuda()
        if i == warmup and client is not None:
            m0 = pool_moves(client)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            with scope() as o:
                out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(out.loss.item())
        if method in ("offload", "stream"):
            last = dict(o.stats)
    result = {"method": method, "min_bytes": args.get("min_bytes"),
              "lead": args.get("lead"), "model": f"gpt2 {layers}x{width}",
              "batch": [batch, seq],
              "step_ms_median": statistics.median(times[warmup:]),
              "step_ms": [round(t, 2) for t in times],
              "losses": [float(x).hex() for x in losses],
              "max_allocated": torch.cuda.max_memory_allocated()}
    if client is not None:
        result["offload_stats_last_step"] = last
    if streamer is not None:
        result["stream_stats"] = dict(streamer.stats)
        result["resident_blocks"] = sum(b.resident for b in streamer.blocks)
        result["daemon_moves_steady"] = moved(m0, pool_moves(client))
        result["daemon_moves_steady"]["steps"] = steps - warmup
    return result


def llama_model(torch, quick):
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(hidden_size=2048, intermediate_size=5632,
                         num_hidden_layers=8 if quick else 16,
                         num_attention_heads=16, num_key_value_heads=8,
                         vocab_size=32000, max_position_embeddings=2048,
                         attn_implementation="eager")
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(torch.bfloat16).eval(), config


def child_infer(args):
    torch = setup_determinism()
    quick = args["quick"]
    model, config = llama_model(torch, quick)
    new = 16 if quick else 32
    method = args["method"]
    client = None
    weight_bytes = sum(p.numel() * p.element_size()
                       for p in model.parameters())
    info = {}
    beside = None
    if method == "vram":
        model = model.cuda()
    elif method == "stream":
        # The same model in VRAM in this process, its rounds between the
        # streamed ones: a launch-bound generation's speed moves by up to
        # 2x from one process to the next (BENCHMARKS.md), so the ratio
        # to the bound is taken here, not against the vram child.
        beside = copy.deepcopy(model).cuda()
        import gpumem
        import gpumem.torch as gt
        client = gpumem.Client(name="bench_offload")
        s = gt.stream(model, budget=args["budget"], client=client,
                      lead=args["lead"], device=0)
        info["resident_blocks"] = sum(b.resident for b in s.blocks)
        info["blocks"] = len(s.blocks)
        info["streamed_bytes_per_pass"] = sum(
            b.nbytes for b in s.blocks if not b.resident)
        # the link's bound: the streamed bytes of a pass at the link's
        # host-to-VRAM rate the daemon measured at start
        from gpumem import lead
        info["link_bytes_per_s_in"] = lead.link_in(client, 0)
    elif method == "accelerate":
        import accelerate
        accelerate.cpu_offload(model, execution_device=torch.device("cuda:0"))
    g = torch.Generator(device="cpu").manual_seed(7)
    batch = args.get("batch", 1)
    prompt = torch.randint(0, config.vocab_size, (batch, 32),
                           generator=g).cuda()
    kwargs = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False,
                  pad_token_id=0)
    rates, beside_rates = [], []

    def timed(m):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = m.generate(prompt, **kwargs)
        torch.cuda.synchronize()
        # tokens generated a second, all sequences of the batch
        return out, new * batch / (time.perf_counter() - t0)
    with torch.no_grad():
        tokens = model.generate(prompt, **kwargs)        # warm-up
        if beside is not None:
            beside_tokens = beside.generate(prompt, **kwargs)
        m0 = pool_moves(client) if client else None
        for _ in range(2 if quick else 3):
            if beside is not None:
                beside_tokens, rate = timed(beside)
                beside_rates.append(rate)
            tokens, rate = timed(model)
            rates.append(rate)
        m1 = pool_moves(client) if client else None
    result = {"method": method, "model": f"llama {config.num_hidden_layers}"
              f"x{config.hidden_size} bf16", "weight_bytes": weight_bytes,
              "new_tokens": new, "batch": batch,
              "tokens_per_s": statistics.median(rates),
              "rates": rates, "tokens": tokens.tolist(),
              "max_allocated": torch.cuda.max_memory_allocated(), **info}
    if client is not None:
        result["budget"] = args["budget"]
        result["daemon_moves"] = moved(m0, m1)
    if info.get("link_bytes_per_s_in") and info["streamed_bytes_per_pass"]:
        result["link_bound_tokens_per_s"] = (
            batch * info["link_bytes_per_s_in"] /
            info["streamed_bytes_per_pass"])
    if beside is not None:
        result["vram_beside_tokens_per_s"] = statistics.median(beside_rates)
        bound = min(result["vram_beside_tokens_per_s"],
                    result.get("link_bound_tokens_per_s", float("inf")))
        result["of_bound"] = result["tokens_per_s"] / bound
        result["vram_beside_rates"] = beside_rates
        result["vram_beside_tokens_identical"] = \
            beside_tokens.tolist() == result["tokens"]
    return result


def child(kind, arg_json):
    args = json.loads(arg_json)
    fn = child_train if kind == "train" else child_infer
    print("RESULT " + json.dumps(fn(args)), flush=True)
    return 0


# ---- parent -----------------------------------------------------------------

def run_child(build, log, kind, args, vram_limit=None, timeout=300,
              cpus=None):
    try:
        daemon = Daemon(build, log, str(vram_limit), "32G",
                        "gmd-bench-offload-") if vram_limit else None
    except (OSError, RuntimeError) as e:
        print(f"  {kind} {args['method']}: gpu-memd: {e}", flush=True)
        return {"method": args["method"], "error": f"gpu-memd: {e}",
                "rc": None, **args}
    env = child_env(build)
    if daemon:
        env["GPU_MEMD_SOCKET"] = daemon.socket
    label = f"{kind} {json.dumps(args)}"
    try:
        result, tail, rc = run_for_result(
            [sys.executable, os.path.abspath(__file__), "child", kind,
             json.dumps(args)], env, log, label, timeout,
            (lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    finally:
        if daemon:
            daemon.stop()
    if result is not None:
        return result
    print(f"  {label}: failed (rc {rc}): {tail}", flush=True)
    return {"method": args["method"], "error": tail, "rc": rc, **args}


def summarize_train(results):
    base = next((r for r in results if r["method"] == "plain"
                 and "error" not in r), None)
    print("training step (median ms), against plain:")
    for r in results:
        name = r["method"] if r["method"] != "offload" else \
            f"offload min {r['min_bytes'] // MiB}M lead {r['lead'] // MiB}M"
        if "error" in r:
            print(f"  {name:32} error: {r['error']}")
            continue
        same = base is not None and r["losses"] == base["losses"]
        line = f"  {name:32} {r['step_ms_median']:8.1f} ms"
        if base:
            line += f"  x{r['step_ms_median'] / base['step_ms_median']:.2f}"
        line += f"  peak {r['max_allocated'] / GiB:.2f} GiB"
        line += "  losses bit-identical" if same else "  losses DIFFER"
        d = r.get("daemon_moves_steady")
        if d:
            per = max(d["steps"], 1)
            gout = f"{d['gbps_out']:.1f}" if d["gbps_out"] else "-"
            gin = f"{d['gbps_in']:.1f}" if d["gbps_in"] else "-"
            line += (f"  moved/step {d['bytes_out'] / per / MiB:.0f} MiB out"
                     f" ({gout} GB/s) {d['bytes_in'] / per / MiB:.0f} MiB in"
                     f" ({gin} GB/s)")
        print(line)
    offl = [r for r in results if r["method"] == "offload" and "error" not in r]
    if offl:
        best = min(offl, key=lambda r: r["step_ms_median"])
        print(f"  fastest offload: min_bytes {best['min_bytes'] // MiB} MiB, "
              f"lead {best['lead'] // MiB} MiB")
        return {"min_bytes": best["min_bytes"], "lead": best["lead"]}
    return None


def summarize_infer(results):
    base = next((r for r in results if r["method"] == "vram"
                 and "error" not in r), None)
    batch = next((r.get("batch", 1) for r in results if "error" not in r), 1)
    print(f"inference (tokens/s, batch {batch}, greedy):")
    for r in results:
        if "error" in r:
            print(f"  {r['method']:12} error: {r['error']}")
            continue
        line = f"  {r['method']:12} {r['tokens_per_s']:8.2f} tok/s"
        if base:
            line += f"  x{r['tokens_per_s'] / base['tokens_per_s']:.2f} of vram"
            line += "  tokens identical" if r["tokens"] == base["tokens"] \
                else "  tokens DIFFER"
        if r["method"] == "stream":
            d = r["daemon_moves"]
            gin = f"{d['gbps_in']:.1f}" if d["gbps_in"] else "-"
            vb = r.get("vram_beside_tokens_per_s")
            if vb:
                line += (f"  x{r['tokens_per_s'] / vb:.2f} of vram in its "
                         f"own process ({vb:.1f})")
            lb = r.get("link_bound_tokens_per_s")
            if lb:
                line += f", link bound {lb:.1f}"
            if r.get("of_bound"):
                line += f": x{r['of_bound']:.2f} of the lower bound"
            line += (f"  {r['resident_blocks']}/{r['blocks']} blocks resident,"
                     f" budget {r['budget'] / GiB:.2f} GiB, in "
                     f"{d['bytes_in'] / GiB:.2f} GiB at {gin} GB/s")
        print(line)
    acc = next((r for r in results if r["method"] == "accelerate"
                and "error" not in r), None)
    st = next((r for r in results if r["method"] == "stream"
               and "error" not in r), None)
    if acc and st:
        print(f"  stream / accelerate: x{st['tokens_per_s'] / acc['tokens_per_s']:.2f}")


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "child":
        return child(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--json")
    ap.add_argument("--log")
    ap.add_argument("--batch", type=int, default=1,
                    help="inference batch (default 1; BENCHMARKS.md has 1 "
                    "and 16): tokens/s count every sequence")
    ap.add_argument("--quick", action="store_true",
                    help="smaller models and sweeps: under 3 minutes")
    ap.add_argument("--cpus", default="",
                    help="comma list of CPUs the method's process runs on "
                    "(not the daemon), e.g. 4,5: unpinned, the launch-bound "
                    "generation's speed moved by up to 2x between processes "
                    "on the H200 machine, pinned by under 10%%")
    ap.add_argument("--skip", default="",
                    help="comma list: train, infer")
    ap.add_argument("--deadline", type=float, default=0,
                    help="seconds for the whole run, after which the "
                    "methods left are skipped (default 170 with --quick, "
                    "else 540)")
    opts = ap.parse_args()
    build = os.path.abspath(opts.build)
    cpus = {int(c) for c in opts.cpus.split(",") if c.strip()}
    log = open(opts.log or os.devnull, "w")
    quick = opts.quick
    sys.path.insert(0, os.path.join(ROOT, "client", "python"))
    from gpumem.offload import LEAD, MIN_BYTES
    out = {"quick": quick, "defaults": {"min_bytes": MIN_BYTES,
                                        "lead": LEAD}}
    t0 = time.monotonic()

    # Most telling first; the rest of the sweep last, so that a deadline
    # cuts the sweep, not the comparison.
    deadline = opts.deadline or (170 if quick else 540)
    layers = 8 if quick else 16
    # the Llama config's bytes, without building it here
    per_block = 2 * (4 * 2048 * 2048 // 2 * 3 // 2 + 3 * 2048 * 5632
                     + 2 * 2048)
    rest = 2 * (2 * 32000 * 2048 + 2048)
    budget = rest + (layers // 2) * per_block
    sweep = (4,) if quick else (1, 4, 64)
    jobs = []
    if "train" not in opts.skip:
        jobs += [("train", {"method": "plain"}),
                 ("train", {"method": "offload", "min_bytes": MIN_BYTES,
                            "lead": LEAD}),
                 ("train", {"method": "save_on_cpu"}),
                 ("train", {"method": "stream"})]
    if "infer" not in opts.skip:
        jobs += [("infer", {"method": "vram"}),
                 ("infer", {"method": "stream", "budget": budget,
                            "lead": 2}),
                 ("infer", {"method": "accelerate"})]
    if "train" not in opts.skip:
        jobs += [("train", {"method": "offload", "min_bytes": m * MiB,
                            "lead": LEAD}) for m in sweep]
        if not quick:
            jobs += [("train", {"method": "offload", "min_bytes": MIN_BYTES,
                                "lead": lead})
                     for lead in (128 * MiB, 2 * GiB)]
    results = {"train": [], "infer": []}
    for kind, args in jobs:
        args["quick"] = quick
        if kind == "infer":
            args["batch"] = opts.batch
        left = deadline - (time.monotonic() - t0)
        if left < 30:
            print(f"{kind} {args['method']}: skipped (deadline {deadline} s)",
                  flush=True)
            results[kind].append({"error": f"skipped: deadline {deadline} s",
                                  "rc": None, **args})
            continue
        print(f"{kind} {args['method']} ...", flush=True)
        if args["method"] in ("offload", "stream") and kind == "train":
            limit = "16G"
        elif args["method"] == "stream":
            limit = f"{(budget + 256 * MiB) // MiB}M"
        else:
            limit = None
        results[kind].append(run_child(build, log, kind, args,
                                       vram_limit=limit,
                                       timeout=int(min(300, left)),
                                       cpus=cpus))
    if results["train"]:
        out["train"] = results["train"]
        out["measured_defaults"] = summarize_train(results["train"])
    if results["infer"]:
        out["infer"] = results["infer"]
        summarize_infer(results["infer"])
    out["seconds"] = time.monotonic() - t0
    print(f"bench_offload: {out['seconds']:.0f} s")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(out, f, indent=1)
    failed = [r for k in ("train", "infer") for r in out.get(k, [])
              if "error" in r and not r["error"].startswith("skipped")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
