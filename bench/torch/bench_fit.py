"""bench_fit.py — training that does not fit: gpumem.torch.fit against what
a PyTorch user already has, on the same model and budget, in one run.

For each model, a plain run without a cap measures the step time and the
peak VRAM PyTorch reserves; then at each budget (a share of that peak)
every method runs in its own process, capped to the budget the same way
(torch.cuda.set_per_process_memory_fraction: PyTorch raises
OutOfMemoryError past it):

  plain         nothing done (fails past its peak: shows the budget bites)
  checkpoint    model.gradient_checkpointing_enable() (every block
                recomputed)
  ckpt+cpu      checkpointing and torch.autograd.graph.save_on_cpu around
                the forward pass: what is still saved (the blocks' inputs)
                goes to pinned host memory: checkpointing plus offload by
                hand
  save_on_cpu   torch.autograd.graph.save_on_cpu(pin_memory=True) alone
  fit-recompute gpumem.torch.fit(model, optimizer, budget=...,
                offload=False): keep or recompute, planned per part of
                each layer (attention, MLP, norms), no daemon
  fit           gpumem.torch.fit(model, optimizer, budget=...) with a
                gpu-memd (cuda backend, a VRAM pool of --fit-daemon-vram,
                256 MiB) whose host pool takes the offloaded activations
                (SPILLABLE buffers on the host tier)
  fit-peer      the same with offload="peer": the activations go to the
                other GPU's VRAM (two GPUs or more; over NVLink where they
                have it)

Every method's losses (float hex) are compared with the plain run's:
bit-identical under torch.use_deterministic_algorithms(True).

    python3 bench/torch/bench_fit.py --build build --json out.json \
        [--models gpt2-124m,train2x] [--shares 0.5,0.25] [--quick]

Output: a line per run and a table; JSON {"models": {name: {"plain":
{...}, "budgets": {share: {method: {...}}}}}}, each run with its step
times (ms), median, peak reserved bytes, losses, the fit plan.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import (Daemon, child_env, run_for_result,  # noqa: E402
                    setup_determinism)

GiB = 1 << 30
METHODS = ("plain", "checkpoint", "ckpt+cpu", "save_on_cpu", "fit-recompute",
           "fit", "fit-peer")


def model_config(name, quick):
    """(GPT2Config keywords, batch, seq) of a named model."""
    if name == "gpt2-124m":
        # GPT-2 small: 12 x 768, batch 8 x 1024
        return (dict(n_layer=4 if quick else 12, n_embd=768, n_head=12,
                     n_positions=1024, vocab_size=50257), 8, 1024)
    if name == "train2x":
        # bench_cotenancy's quick train2x shape (8 x 1024, an 8192-token
        # vocabulary, batch 8 x 512): activations most of the step. At
        # 16 x 2048 the weights, gradients and AdamW state alone took half
        # of the plain peak (12.9 of 25.9 GiB, H200): nothing that moves
        # activations fits it into half
        return (dict(n_layer=4 if quick else 8, n_embd=1024, n_head=16,
                     n_positions=512, vocab_size=8192), 8, 512)
    raise ValueError(f"unknown model {name!r}: gpt2-124m or train2x")


# ---- child ------------------------------------------------------------------

def child(args):
    torch = setup_determinism()
    from transformers import GPT2Config, GPT2LMHeadModel
    kw, batch, seq = model_config(args["model"], args["quick"])
    config = GPT2Config(attn_implementation="eager", **kw)
    model = GPT2LMHeadModel(config).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    steps, warmup = args["steps"], args["warmup"]
    g = torch.Generator(device="cpu").manual_seed(42)
    data = torch.randint(0, config.vocab_size, (steps, batch, seq),
                         generator=g)
    method = args["method"]
    cap = args.get("cap")
    if cap:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total))
    fitter = None
    scope = contextlib.nullcontext
    if method in ("checkpoint", "ckpt+cpu"):
        model.gradient_checkpointing_enable()
    if method in ("ckpt+cpu", "save_on_cpu"):
        def scope():
            return torch.autograd.graph.save_on_cpu(pin_memory=True)
    if method in ("fit", "fit-peer"):
        import gpumem
        import gpumem.torch as gt
        client = gpumem.Client(name="bench_fit")
        fitter = gt.fit(model, opt, budget=cap, client=client,
                        offload="peer" if method == "fit-peer" else True)
    elif method == "fit-recompute":
        import gpumem.torch as gt
        fitter = gt.fit(model, opt, budget=cap, offload=False)
    losses, times = [], []
    error = None
    try:
        for i in range(steps):
            ids = data[i].cuda()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                with scope():
                    out = model(input_ids=ids, labels=ids, use_cache=False)
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
            losses.append(out.loss.item())
    except torch.cuda.OutOfMemoryError as e:
        error = "OutOfMemoryError: " + str(e).splitlines()[0][:200]
    result = {"method": method, "model": args["model"], "cap": cap,
              "batch": [batch, seq],
              "step_ms": [round(t, 2) for t in times],
              "losses": [float(x).hex() for x in losses],
              "max_reserved": torch.cuda.max_memory_reserved(),
              "max_allocated": torch.cuda.max_memory_allocated()}
    if len(times) > warmup:
        result["step_ms_median"] = statistics.median(times[warmup:])
    if error:
        result["error"] = error
    if fitter is not None:
        result["plans"] = [p.summary() for p in fitter.history]
        result["plan"] = fitter.plan.to_dict() if fitter.plan else None
        result["profiles"] = [vars(p) for p in fitter.profiles()]
        if fitter.stash is not None:
            result["stash_stats"] = dict(fitter.stash.stats)
            result["link"] = list(fitter._link())
    return result


# ---- parent -----------------------------------------------------------------

def run(build, log, args, daemon_vram=None, timeout=900):
    daemon = None
    env = child_env(build)
    if daemon_vram:
        try:
            daemon = Daemon(build, log, str(daemon_vram), "64G",
                            "gmd-bench-fit-")
        except (OSError, RuntimeError) as e:
            return {"method": args["method"], "error": f"gpu-memd: {e}"}
        env["GPU_MEMD_SOCKET"] = daemon.socket
    try:
        result, tail, rc = run_for_result(
            [sys.executable, os.path.abspath(__file__), "--child",
             json.dumps(args)], env, log, json.dumps(args), timeout)
    finally:
        if daemon:
            daemon.stop()
    return result if result is not None else \
        {"method": args["method"], "error": tail, "rc": rc}


def describe(r, plain):
    if "step_ms_median" not in r:
        return f"failed: {r.get('error', '?')}"
    same = r["losses"] == plain["losses"][:len(r["losses"])]
    return (f"{r['step_ms_median']:8.1f} ms  x{r['step_ms_median'] / plain['step_ms_median']:.2f}"
            f"  peak {r['max_reserved'] / GiB:6.2f} GiB"
            f"  losses {'bit-identical' if same else 'DIFFER'}"
            + (f"  {r.get('error')}" if r.get("error") else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child")
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..",
                                                    "build"))
    ap.add_argument("--json")
    ap.add_argument("--log", default="/dev/null")
    ap.add_argument("--models", default="gpt2-124m,train2x")
    ap.add_argument("--shares", default="0.5,0.25",
                    help="budgets as shares of the plain run's peak")
    ap.add_argument("--methods", default=",".join(METHODS[1:]))
    ap.add_argument("--fit-daemon-vram", default="256M",
                    help="fit's gpu-memd VRAM pool (its slabs rest on the "
                    "host pool; this is what the daemon may hold on the "
                    "GPU besides)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--quick", action="store_true")
    opts = ap.parse_args()
    if opts.child:
        print("RESULT " + json.dumps(child(json.loads(opts.child))),
              flush=True)
        return 0
    out = {"quick": opts.quick, "models": {}}
    with open(opts.log, "a") as log:
        for name in opts.models.split(","):
            base = dict(model=name, quick=opts.quick, steps=opts.steps,
                        warmup=opts.warmup)
            plain = run(opts.build, log, dict(base, method="plain"))
            entry = out["models"][name] = {"plain": plain, "budgets": {}}
            if "step_ms_median" not in plain:
                print(f"{name}: plain failed: {plain.get('error')}")
                continue
            peak = plain["max_reserved"]
            print(f"{name}: plain {plain['step_ms_median']:.1f} ms, peak "
                  f"{peak / GiB:.2f} GiB", flush=True)
            for share in opts.shares.split(","):
                budget = int(float(share) * peak)
                runs = entry["budgets"][share] = {"budget": budget}
                for method in opts.methods.split(","):
                    args = dict(base, method=method, cap=budget)
                    vram = None
                    if method.startswith("fit") and method != \
                            "fit-recompute":
                        vram = opts.fit_daemon_vram
                    r = runs[method] = run(opts.build, log, args, vram)
                    print(f"  {share} ({budget / GiB:.2f} GiB) "
                          f"{method:12s} {describe(r, plain)}", flush=True)
                    if method.startswith("fit") and r.get("plans"):
                        print(f"      plan: {r['plans'][-1]}", flush=True)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
