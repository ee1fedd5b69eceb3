#!/usr/bin/env python3
"""bench_cotenancy.py — training at twice the budget and
three processes sharing one budgeted card, every method under the same
budget (scripts/gpu-suite.sh runs it: GMD_BENCH entry "cotenancy", not in
the default list; GMD_COTENANCY_QUICK=1 for --quick).

The budget rule, the same for every method compared:
  - a helper process (holder.py) holds all of the card's free memory but
    `budget + margin`, with cudaMalloc through PyTorch in its own process
    (never managed memory, never gpu-memd), for the whole method's run;
  - margin = 1 GiB (--per-process-margin) x the GPU processes the method
    starts (its children, plus gpu-memd for gpu-memd methods): their CUDA
    contexts and workspaces, which no allocator sees;
  - gpu-memd methods get the same holder and the daemon's --vram-limit =
    budget; their PyTorch allocations go through gpu-memd too
    (gpumem.torch.enable()), so all of their data is inside the budget;
  - NVML (nvml_watch.py: libnvidia-ml through ctypes, else nvidia-smi
    -lms 20) samples device memory every 20 ms: each method's JSON has
    nvml_peak_bytes (its processes' peak: NVML's per-process figures
    where its pids show, else the card's peak minus the baseline taken
    with the holder in place), nvml_peak_used (the card, holder included)
    and under_budget (peak <= budget + margin, and the card's peak <=
    baseline + budget + margin).
A method without a budget ("plain", the reference) runs with no holder.

Cases (--cases, default both):
  train2x    GPT-2 from a transformers config (random weights, an
             8192-token vocabulary: see train2x_config, bf16
             autocast, AdamW, eager attention), its layer count sized so
             that weights + gradients + AdamW state + activations come to
             about twice the target budget (--budget; 3 GiB quick, 12 GiB
             full). Then, one fresh process each:
               plain        in plenty of VRAM, no holder: the reference;
                            its peak reserved VRAM / 2 becomes the budget
                            (the working set is measured, not estimated)
               save_on_cpu  torch.autograd.graph.save_on_cpu(
                            pin_memory=True), under the holder
               gpumem       enable() + stream(model, opt, budget=
                            --stream-frac x budget of weights) +
                            offload_activations() at the defaults, under
                            the holder, the daemon's --vram-limit = budget
             Median step time against plain (target: gpumem at most 1.2x),
             losses bit-identical to plain or not, OOM or not.
  cotenancy  Three processes on one daemon whose --vram-limit is the
             card's budget (--cot-budget; 4 GiB quick, 16 GiB full), the
             holder holding the rest: two training jobs (GPT-2, each
             working set about 0.7 x budget: stream + offload_activations
             + enable(), `with gpumem.torch.idle()` after each step) and
             one inference job at GPU_MEMD_PRIORITY=10 (a Llama config,
             bf16 weights about 0.6 x budget, stream() with all blocks
             resident, requests of greedy decoding with a KV cache, each
             token timed, `idle()` between requests). Working sets add up
             to about 2x the budget (each job reports what it held in
             VRAM and host buffers at its peak: working_set). First each
             job alone, one after another (the sequential makespan: the
             sum of their measured parts, the steps or the requests after
             set-up and warm-up), then all three at once, their measured
             parts started at one go once all three are set up (so the
             inference requests run while training steps: the summary
             counts how many did): makespan against sequential (target
             at most 1.1x; with set-up as a second figure), the inference
             job's p99 token latency against alone (target at most 1.2x;
             also over the requests made while training stepped; a
             request's first token counts from its arrival, before
             idle() gives its memory back), OOMs
             (target none), training
             losses bit-identical alone and together, and the bytes the
             daemon moved each way and their GB/s (gpu-memctl --json
             status before and after each phase: the VRAM pool's
             bytes_out/bytes_in and copy_us_out/copy_us_in). --no-idle
             runs the same jobs without idle(): they never take turns,
             and two mid-step jobs whose working sets do not both fit
             must lend (GMD_ALLOC_YIELD) to finish at all. The daemon
             runs with [limits] priority_grace_ms = 500 and
             memory_slice_ms = 5000 (--priority-grace, --memory-slice):
             the training jobs, which cannot fit together, take the
             budget in turns.
Each case and each child is bounded in time (--deadline, default 360 s
quick, 480 s full, over both cases, 30% / 70%; a child stops its steps past its
share and says so), so one 10-minute device command runs the bench. The
full-size cotenancy case completes only run alone with --deadline 530 (396 s
on the H100): within less, the alone inference job's share runs out (its
set-up, building 106 layers on the CPU, takes a minute of it).

    bench_cotenancy.py --build BUILD [--cases train2x,cotenancy] [--quick]
                       [--json FILE] [--log FILE] [--deadline S]
    bench_cotenancy.py --summarize FILE       # the summary of a JSON again

Output: a summary on stdout and JSON: {"quick", "train2x": {...},
"cotenancy": {...}, "seconds"}, each case with its results and verdicts.
"""

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
MiB = 1 << 20
GiB = 1 << 30
TARGET_TRAIN = 1.2        # gpumem step / plain step
TARGET_MAKESPAN = 1.1     # together / one after another
TARGET_P99 = 1.2          # inference p99 together / alone
INFER_PRIORITY = 10

sys.path.insert(0, HERE)
from common import Daemon, child_env, pool_moves  # noqa: E402


def parse_size(text):
    if isinstance(text, int):
        return text
    text = str(text).strip()
    units = {"K": 1 << 10, "M": MiB, "G": GiB, "T": 1 << 40}
    if text and text[-1].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


# ---- sizes (no torch: the parent plans, the children build) ---------------

def gpt2_params(cfg):
    d, L = cfg["width"], cfg["layers"]
    return L * (12 * d * d + 13 * d) + cfg["vocab"] * d + cfg["seq"] * d + 2 * d


def gpt2_train_bytes(cfg):
    """A rough estimate of a GPT-2 training step's peak: fp32 weights,
    gradients and AdamW's two moments (16 bytes a parameter) and the
    activations autograd saves under bf16 autocast with eager attention
    (per layer and token ~40 bytes a channel and ~9 a head and position;
    the logits ~12 bytes a vocabulary entry). Only sizes the model: the
    budget comes from the measured peak."""
    tokens = cfg["batch"] * cfg["seq"]
    per_layer = tokens * (40 * cfg["width"] + 9 * cfg["heads"] * cfg["seq"])
    return 16 * gpt2_params(cfg) + cfg["layers"] * per_layer + \
        tokens * cfg["vocab"] * 12


def size_gpt2(target, base, min_layers=2, max_layers=96):
    """`base` (width, heads, seq, batch, vocab) with the most layers whose
    estimate stays within `target` bytes (at least min_layers)."""
    layers = min_layers
    for n in range(min_layers, max_layers + 1):
        if gpt2_train_bytes(dict(base, layers=n)) > target:
            break
        layers = n
    return dict(base, layers=layers)


def llama_weight_bytes(cfg):
    d, kv = cfg["hidden"], cfg["hidden"] * cfg["kv_heads"] // cfg["heads"]
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * cfg["inter"] + 2 * d
    return 2 * (cfg["layers"] * per_layer + 2 * cfg["vocab"] * d + d)


def size_llama(target, base, min_layers=2, max_layers=128):
    layers = min_layers
    for n in range(min_layers, max_layers + 1):
        if llama_weight_bytes(dict(base, layers=n)) > target:
            break
        layers = n
    return dict(base, layers=layers)


def percentile(values, q):
    """The q-th percentile (0-100), linear between closest ranks."""
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def moved(before, after):
    """Bytes and GB/s each way between two gpu-memctl --json status
    answers (device 0's VRAM pool), with the link the daemon measured."""
    def pool(s):
        return next((p for p in (s or {}).get("pools", [])
                     if p.get("tier") == "vram" and p.get("device") == 0),
                    None)
    a, b = pool(before), pool(after)
    if a is None or b is None:
        return None
    d = {}
    for way in ("out", "in"):
        nbytes = b[f"bytes_{way}"] - a[f"bytes_{way}"]
        us = b[f"copy_us_{way}"] - a[f"copy_us_{way}"]
        d[f"bytes_{way}"] = nbytes
        d[f"copy_us_{way}"] = us
        d[f"gbps_{way}"] = nbytes / us / 1e3 if us else None
        d[f"link_gbps_{way}"] = b.get(f"link_bytes_per_s_{way}", 0) / 1e9
    return d


# ---- children -------------------------------------------------------------

def _oom_types(torch):
    return tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                             getattr(torch.cuda, "OutOfMemoryError", None))
                 if t is not None)


def _client_bytes(client):
    """What this process holds in gpu-memd (its shim's segments and its
    buffers, VRAM and host): the working set when it peaks."""
    pid = os.getpid()
    return sum(c.bytes for c in client.status("clients").clients
               if c.pid == pid)


def child_train(args):
    gt = None
    if args.get("shim"):
        import gpumem.torch as gt
        gt.enable(name=args["name"])
    from common import setup_determinism
    torch = setup_determinism()
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = args["cfg"]
    config = GPT2Config(n_positions=cfg["seq"], n_embd=cfg["width"],
                        n_layer=cfg["layers"], n_head=cfg["heads"],
                        vocab_size=cfg["vocab"],
                        attn_implementation="eager")
    model = GPT2LMHeadModel(config).train()
    method = args["method"]
    client = streamer = None
    if method != "gpumem":
        model = model.cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    g = torch.Generator(device="cpu").manual_seed(args.get("seed", 42))
    steps, warmup = args["steps"], args["warmup"]
    data = torch.randint(0, config.vocab_size,
                         (steps, cfg["batch"], cfg["seq"]), generator=g)
    info = {}
    if method == "gpumem":
        import gpumem
        import gpumem.torch as gt
        client = gpumem.Client(name=args["name"])
        blocks = model.transformer.h
        per_block = sum(p.numel() * p.element_size()
                        for p in blocks[0].parameters()) + 4096
        rest = sum(p.numel() * p.element_size()
                   for n, p in model.named_parameters() if ".h." not in n)
        k = max(2, (int(args["stream_budget"]) - rest) // per_block)
        budget = rest + min(k, len(blocks)) * per_block
        streamer = gt.stream(model, opt, client=client, device=0,
                             budget=budget, timeout=args.get("timeout", 120))
        info.update(stream_budget=budget, blocks=len(blocks),
                    resident_blocks=sum(b.resident for b in streamer.blocks))

        offload_kw = args.get("offload") or {}

        def scope():
            return gt.offload_activations(client=client, **offload_kw)
    elif method == "save_on_cpu":
        def scope():
            return torch.autograd.graph.save_on_cpu(pin_memory=True)
    else:
        import contextlib

        def scope():
            return contextlib.nullcontext()
    losses, times, fwd, starts = [], [], [], []
    working_set = 0
    offload_stats = moves_before = None
    wait_go(args)
    t_start = time.time()
    end = time.monotonic() + args.get("deadline_s", 1e9)
    error = None
    oom = False
    # GMD_BENCH_STACKS=S (diagnosis): a step that takes over S seconds
    # prints where each thread of this job is, every S seconds, to the
    # bench's log
    stacks = float(os.environ.get("GMD_BENCH_STACKS") or 0)
    if stacks:
        import faulthandler
    try:
        for i in range(steps):
            if i > warmup and time.monotonic() > end:
                break
            if stacks:
                faulthandler.cancel_dump_traceback_later()
                faulthandler.dump_traceback_later(stacks, repeat=True)
            ids = data[i].cuda()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            starts.append(round(time.time() - t_start, 3))
            if client is not None and i == warmup:
                moves_before = pool_moves(client)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                with scope() as o:
                    out = model(input_ids=ids, labels=ids)
            if args.get("phases"):
                # where the step's time goes (a host synchronization more
                # a step: diagnosis runs only)
                torch.cuda.synchronize()
                fwd.append(round((time.perf_counter() - t0) * 1e3, 2))
            if client is not None and i == warmup:
                working_set = max(working_set, _client_bytes(client))
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
            losses.append(out.loss.item())
            if o is not None and hasattr(o, "stats"):
                offload_stats = dict(o.stats)
            del out
            if args.get("idle") and gt is not None:
                with gt.idle(release_cache=not args.get("keep_cache")):
                    pass
    except _oom_types(torch) as e:
        oom, error = True, str(e).splitlines()[0]
    except RuntimeError as e:
        error = str(e).splitlines()[0]
        oom = "out of memory" in error.lower() or "waited" in error
    if stacks:
        faulthandler.cancel_dump_traceback_later()
    t_end = time.time()
    counted = times[warmup:] if len(times) > warmup else times
    result = {"method": method, "name": args["name"],
              "model": f"gpt2 {cfg['layers']}x{cfg['width']}", "cfg": cfg,
              "params": gpt2_params(cfg),
              "steps_done": len(times), "steps": steps, "warmup": warmup,
              "cut": len(times) < steps and error is None,
              "step_ms_median": statistics.median(counted) if counted
              else None,
              "step_ms": [round(t, 2) for t in times],
              # when each step began, seconds from t_start (wall clock:
              # to be read beside the daemon's log)
              "step_start_s": starts,
              "losses": [float(x).hex() for x in losses],
              "max_allocated": torch.cuda.max_memory_allocated(),
              "max_reserved": torch.cuda.max_memory_reserved(),
              "t_start": t_start, "t_end": t_end, "oom": oom, **info}
    result["working_set"] = max(working_set, result["max_reserved"])
    if error:
        result["error"] = error
    if streamer is not None:
        result["stream_stats"] = dict(streamer.stats)
    if offload_stats is not None:
        result["offload_stats_last_step"] = offload_stats
        result["offload"] = args.get("offload") or {}
    if fwd:
        result["forward_ms"] = fwd
    if moves_before is not None and len(times) > warmup:
        d = {k: v - moves_before[k] for k, v in pool_moves(client).items()}
        d["steps"] = len(times) - warmup
        for way in ("out", "in"):
            us = d[f"copy_us_{way}"]
            d[f"gbps_{way}"] = d[f"bytes_{way}"] / us / 1e3 if us else None
        result["daemon_moves_steady"] = d
    if gt is not None and args.get("shim"):
        result["shim_stats"] = gt.stats()
    return result


def child_infer(args):
    gt = None
    if args.get("shim"):
        import gpumem.torch as gt
        gt.enable(name=args["name"])
    from common import setup_determinism
    torch = setup_determinism()
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = args["cfg"]
    config = LlamaConfig(hidden_size=cfg["hidden"],
                         intermediate_size=cfg["inter"],
                         num_hidden_layers=cfg["layers"],
                         num_attention_heads=cfg["heads"],
                         num_key_value_heads=cfg["kv_heads"],
                         vocab_size=cfg["vocab"],
                         max_position_embeddings=2048,
                         attn_implementation="eager")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    client = None
    if args.get("stream"):
        import gpumem
        import gpumem.torch as gt
        client = gpumem.Client(name=args["name"])
        gt.stream(model, client=client, device=0,
                  budget=args.get("stream_budget"),
                  timeout=args.get("timeout", 120))
    else:
        model = model.cuda()
    g = torch.Generator(device="cpu").manual_seed(7)
    prompt = torch.randint(0, config.vocab_size, (1, args["prompt"]),
                           generator=g).cuda()
    oom_types = _oom_types(torch)

    def request(arrived=None):
        """Each token's latency; the first one's from `arrived`, when the
        request came (before idle() gave the memory back: the wait for it
        is the request's, not hidden between requests)."""
        lat, toks = [], []
        torch.cuda.synchronize()
        t0 = arrived if arrived is not None else time.perf_counter()
        out = model(input_ids=prompt, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1:].argmax(-1)
        toks.append(int(nxt.item()))
        lat.append((time.perf_counter() - t0) * 1e3)
        for _ in range(args["tokens"] - 1):
            t0 = time.perf_counter()
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
            toks.append(int(nxt.item()))          # synchronizes
            lat.append((time.perf_counter() - t0) * 1e3)
        return lat, toks

    lat_all, first, tokens, request_t = [], [], None, []
    t_start = time.time()
    error, oom, done = None, False, 0
    working_set = 0
    try:
        with torch.no_grad():
            request()                                     # warm-up
            if client is not None:
                working_set = _client_bytes(client)
            wait_go(args)
            t_start = time.time()
            end = time.monotonic() + args.get("deadline_s", 1e9)
            for r in range(args["requests"]):
                if r and time.monotonic() > end:
                    break
                arrived = None
                if args.get("gap_s"):
                    if gt is not None and args.get("idle"):
                        with gt.idle(pageout=not args.get("idle_keep"),
                                     release_cache=not args.get("keep_cache")):
                            time.sleep(args["gap_s"])
                            arrived = time.perf_counter()
                            request_t.append(time.time())
                    else:
                        time.sleep(args["gap_s"])
                if arrived is None:
                    request_t.append(time.time())
                lat, toks = request(arrived)
                first.append(lat[0])
                lat_all.extend(lat)
                tokens = tokens or toks
                done += 1
    except oom_types as e:
        oom, error = True, str(e).splitlines()[0]
    except RuntimeError as e:
        error = str(e).splitlines()[0]
        oom = "out of memory" in error.lower() or "waited" in error
    decode = [x for i, x in enumerate(lat_all) if i % args["tokens"]]
    result = {"method": "infer", "name": args["name"],
              "model": f"llama {cfg['layers']}x{cfg['hidden']} bf16",
              "cfg": cfg, "weight_bytes": llama_weight_bytes(cfg),
              "requests_done": done, "requests": args["requests"],
              "tokens_per_request": args["tokens"],
              "cut": done < args["requests"] and error is None,
              "token_ms": [round(x, 3) for x in lat_all],
              "request_t": request_t,
              "p50_ms": percentile(lat_all, 50),
              "p99_ms": percentile(lat_all, 99),
              "p99_decode_ms": percentile(decode, 99),
              "first_token_ms_median": statistics.median(first)
              if first else None,
              "tokens": tokens,
              "max_reserved": torch.cuda.max_memory_reserved(),
              "t_start": t_start, "t_end": time.time(), "oom": oom,
              "priority": os.environ.get("GPU_MEMD_PRIORITY")}
    result["working_set"] = max(working_set, result["max_reserved"])
    if error:
        result["error"] = error
    return result


def child(kind, arg_json):
    import faulthandler
    import signal
    # A child past its time says where each thread is (finish_child).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    args = json.loads(arg_json)
    if args.get("lend_wait") is not None:
        from gpumem import _torchdev        # an A/B knob, not an API
        _torchdev.LEND_WAIT = args["lend_wait"]
    fn = child_train if kind == "train" else child_infer
    result = fn(args)
    let_go()
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def let_go():
    """The job is done: what it holds goes back to gpu-memd now, not in
    the process's teardown (1.1-1.4 s on the H100, in which the other
    training job waited for that memory: counted in the together
    makespan, in no alone run). Its model, optimizer and stream() are
    garbage once the job's function returned (cycles through their
    hooks: collected here); the Client that owned their buffers closes
    with them, and PyTorch's cache goes back through the shim."""
    import gc
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        # cuBLAS's workspaces are PyTorch allocations that live as long
        # as the process: where one sits in a large segment, the segment
        # stays (98-428 MiB held in use past the job's end, H100)
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
        torch.cuda.empty_cache()


def wait_go(args):
    """The together phase starts every job's measured part at once: a child
    whose set-up and warm-up are done says so (a file beside the go file)
    and waits for the parent's go. Without it the jobs' set-up (import,
    model build, stream()) decided what overlapped: in --quick the training
    jobs were done before the inference job's first request (2026-11-26,
    H100: train_a 0-4.7 s, the inference requests 11.4-20.4 s)."""
    go = args.get("go_file")
    if not go:
        return
    open(f"{go}.ready.{args['name']}", "w").close()
    limit = time.monotonic() + args.get("go_timeout_s", 600)
    while not os.path.exists(go) and time.monotonic() < limit:
        time.sleep(0.005)


# ---- parent ---------------------------------------------------------------

class Env:
    """The set-up of one method: holder (budget, margin) or none, daemon
    (vram-limit = budget) or none, the NVML watch marked once both are
    in place."""

    def __init__(self, ctx, budget=None, processes=1, daemon=False):
        self.ctx = ctx
        self.budget = budget
        self.margin = None
        self.holder = None
        self.daemon = None
        self.error = None
        try:
            if budget is not None:
                from holder import Holder, margin_for
                self.margin = margin_for(processes + (1 if daemon else 0),
                                         ctx.per_process)
                self.holder = Holder(budget, self.margin, log=ctx.log)
            ctx.watch.mark()
            if daemon:
                self.daemon = Daemon(ctx.build, ctx.log, f"{budget // MiB}M",
                                     "48G", "gmd-bench-cot-",
                                     config=ctx.daemon_config)
                ctx.watch.watch_pids(self.daemon.pid)
        except Exception as e:          # HolderError, OSError, RuntimeError
            self.error = f"{type(e).__name__}: {e}"
            self.stop()

    def env(self, priority=None):
        env = child_env(self.ctx.build)
        env.pop("GPU_MEMD_PRIORITY", None)
        if self.daemon:
            env["GPU_MEMD_SOCKET"] = self.daemon.socket
            env.setdefault("GPU_MEMD_TORCH_TIMEOUT_MS", "120000")
        if priority is not None:
            env["GPU_MEMD_PRIORITY"] = str(priority)
        return env

    def report(self):
        from nvml_watch import verdict
        r = self.ctx.watch.report()
        r["budget"] = self.budget
        r["margin"] = self.margin
        if self.holder is not None:
            r["holder"] = self.holder.info
        r["under_budget"] = None if self.budget is None else verdict(
            r, self.budget, self.margin, self.holder and
            self.holder.info["held"])
        return r

    def stop(self):
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None
        if self.holder is not None:
            self.holder.stop()


class Ctx:
    def __init__(self, build, log, per_process, watch, daemon_config=""):
        self.build = build
        self.log = log
        self.per_process = per_process
        self.watch = watch
        self.daemon_config = daemon_config      # INI text for gpu-memd


def start_child(ctx, env, kind, args):
    label = f"{kind} {args['name']}"
    ctx.log.write(f"==== {label} {json.dumps(args)}\n")
    ctx.log.flush()
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "child",
                          kind, json.dumps(args)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    ctx.watch.watch_pids(p.pid)
    return p, time.monotonic(), label


def finish_child(ctx, started, timeout, daemon=None):
    """The child's RESULT once it exits; past `timeout` its threads' stacks
    (SIGUSR1: faulthandler) and the daemon's status go to the log, then it
    is killed."""
    p, t0, label = started
    try:
        out, err = p.communicate(timeout=max(1, timeout))
        rc = p.returncode
    except subprocess.TimeoutExpired:
        if daemon is not None:
            ctx.log.write(f"==== {label}: past its time; the daemon's status:\n"
                          f"{json.dumps(daemon.status(), indent=1)}\n")
        p.send_signal(signal.SIGUSR1)
        try:
            out, err = p.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        err = (err or "") + "\nTIMEOUT"
        rc = 124
    wall = time.monotonic() - t0
    ctx.log.write(f"==== {label}\n{out}{err}\n==== rc {rc}, {wall:.1f} s\n")
    ctx.log.flush()
    for line in out.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            r["wall_s"] = wall
            r["rc"] = rc
            return r
    tail = (err.strip().splitlines() or ["no output"])[-1]
    print(f"  {label}: failed (rc {rc}): {tail}", flush=True)
    return {"name": label.split()[-1], "error": tail, "rc": rc,
            "wall_s": wall, "oom": "out of memory" in err.lower()}


def release_together(started, go, names, limit_s):
    """Makes the go file once every child is ready or has exited (or after
    `limit_s`): the time it was made."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end and not all(
            os.path.exists(f"{go}.ready.{n}") or p.poll() is not None
            for (p, _, _), n in zip(started, names)):
        time.sleep(0.01)
    open(go, "w").close()
    return time.time()


def run_one(ctx, kind, args, budget=None, daemon=False, timeout=300,
            priority=None):
    env = Env(ctx, budget, processes=1, daemon=daemon)
    if env.error:
        print(f"  {args['name']}: {env.error}", flush=True)
        return {"name": args["name"], "method": args.get("method"),
                "error": env.error, "rc": None}
    try:
        r = finish_child(ctx, start_child(ctx, env.env(priority), kind, args),
                         timeout, env.daemon)
    finally:
        rep = env.report()
        env.stop()
    r.update(rep)
    return r


# ---- case: training at twice the budget -----------------------------------

def train2x_config(quick, budget):
    """A GPT-2 config whose training step is about twice `budget`. The
    vocabulary is 8192, not GPT-2's 50257: with 50257 the loss's fp32
    logits (786 MiB at batch 8 x 512) were a third of the working set, a
    tensor alive inside the loss that no saved-tensor hook sees, and the
    step could not fit at half its peak whatever moved (H200, 2026-11-23:
    an out-of-memory error in the loss); at 8192 the working set is
    layers' activations, weights and optimizer state, what the benchmark's
    "twice the budget" is about."""
    base = dict(width=1024, heads=16, seq=512, batch=8, vocab=8192) \
        if quick else dict(width=2048, heads=16, seq=512, batch=8,
                           vocab=8192)
    return size_gpt2(2 * budget, base)


def case_train2x(ctx, opts, left):
    quick = opts.quick
    target = parse_size(opts.budget) if opts.budget else \
        (3 * GiB if quick else 12 * GiB)
    cfg = train2x_config(quick, target)
    steps, warmup = (6, 2) if quick else (10, 3)
    base = {"cfg": cfg, "steps": steps, "warmup": warmup, "seed": 42}
    out = {"target_budget": target, "cfg": cfg,
           "estimate_bytes": gpt2_train_bytes(cfg), "results": []}
    t0 = time.monotonic()

    def share(n_left):
        return max(30, (left - (time.monotonic() - t0)) / n_left)

    print(f"train2x: gpt2 {cfg['layers']}x{cfg['width']} batch "
          f"{cfg['batch']}x{cfg['seq']}, estimated "
          f"{gpt2_train_bytes(cfg) / GiB:.1f} GiB ...", flush=True)
    plain = run_one(ctx, "train", dict(base, method="plain", name="plain",
                                       deadline_s=share(3) * 0.6),
                    timeout=share(3))
    out["results"].append(plain)
    if "error" not in plain:
        budget = plain["max_reserved"] // 2 // (2 * MiB) * (2 * MiB)
        out["budget_from"] = "plain max_reserved / 2"
    else:
        budget = target
        out["budget_from"] = "target (plain failed)"
    out["budget"] = budget
    print(f"  budget {budget / GiB:.2f} GiB ({out['budget_from']})",
          flush=True)
    # (method, name, with a daemon, offload arguments, daemon binary)
    runs = [("gpumem", "gpumem", True, None, None),
            ("save_on_cpu", "save_on_cpu", False, None, None)]
    # --train2x-daemons: gpumem once per daemon binary, in the order given,
    # instead of gpumem and save_on_cpu (an A/B of daemon builds)
    if opts.daemon_list:
        runs = [("gpumem", f"gpumem {n}", True, None, path)
                for n, path in opts.daemon_list]
    # --train2x-offload: more gpumem runs, offload_activations() with
    # these arguments (where the defaults are measured), timed by phase
    for kw in json.loads(opts.train2x_offload or "[]"):
        runs.append(("gpumem", "gpumem " + ",".join(
            f"{k}={v}" for k, v in kw.items()), True, kw, None))
    for i, (method, name, daemon, kw, binary) in enumerate(runs):
        n = len(runs) - i
        if left - (time.monotonic() - t0) < 40:
            out["results"].append({"method": method, "name": name,
                                   "error": "skipped: deadline", "rc": None})
            continue
        args = dict(base, method=method, name=name,
                    deadline_s=share(n) * 0.6, shim=daemon,
                    stream_budget=int(opts.stream_frac * budget))
        if kw is not None:
            args.update(offload=kw, phases=True)
        saved = os.environ.get("GMD_DAEMON")
        if binary:
            os.environ["GMD_DAEMON"] = binary
        try:
            out["results"].append(run_one(ctx, "train", args, budget=budget,
                                          daemon=daemon, timeout=share(n)))
        finally:
            if saved is None:
                os.environ.pop("GMD_DAEMON", None)
            else:
                os.environ["GMD_DAEMON"] = saved
    out["summary"] = summarize_train2x(out)
    return out


def parse_daemons(text):
    """--train2x-daemons' NAME=PATH,... as [(name, path)]; ValueError
    for an entry with no name or path, a repeated name, or a path that is
    not an executable file (said before the plain run, not after it)."""
    out = []
    for entry in (e for e in text.split(",") if e):
        name, sep, path = entry.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"{entry!r}: want NAME=PATH")
        if name in (n for n, _ in out):
            raise ValueError(f"{name!r} is named twice")
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise ValueError(f"{path}: not an executable file")
        out.append((name, path))
    return out


def summarize_train2x(case, show=True):
    res = {r.get("name", r.get("method")): r for r in case["results"]}
    plain = res.get("plain")
    ok_plain = plain is not None and "error" not in plain
    lines = [f"training at twice the budget: {case['cfg']['layers']} x "
             f"{case['cfg']['width']}, budget {case['budget'] / GiB:.2f} GiB"
             f" ({case.get('budget_from')})"]
    summary = {"budget": case["budget"], "methods": {}}
    for name, r in res.items():
        if "error" in r and not r.get("step_ms_median"):
            lines.append(f"  {name:12} error{' (OOM)' if r.get('oom') else ''}"
                         f": {r['error']}")
            summary["methods"][name] = {"error": r["error"],
                                        "oom": bool(r.get("oom"))}
            continue
        m = {"step_ms": r["step_ms_median"], "oom": bool(r.get("oom")),
             "cut": bool(r.get("cut")),
             "nvml_peak_bytes": r.get("nvml_peak_bytes"),
             "under_budget": r.get("under_budget")}
        line = f"  {name:12} {r['step_ms_median']:9.1f} ms"
        mv = r.get("daemon_moves_steady")
        if mv and mv.get("steps"):
            m["moved_gib_per_step"] = [mv[f"bytes_{w}"] / mv["steps"] / GiB
                                       for w in ("out", "in")]
            line += (f"  moved {m['moved_gib_per_step'][0]:.2f} out/"
                     f"{m['moved_gib_per_step'][1]:.2f} in GiB a step")
        if ok_plain:
            m["ratio"] = r["step_ms_median"] / plain["step_ms_median"]
            n = min(len(r["losses"]), len(plain["losses"]))
            m["losses_identical"] = n > 0 and \
                r["losses"][:n] == plain["losses"][:n]
            line += f"  x{m['ratio']:.2f}"
            line += "  losses bit-identical" if m["losses_identical"] \
                else "  losses DIFFER"
        if r.get("working_set"):
            line += f"  working set {r['working_set'] / GiB:.2f} GiB"
        if r.get("nvml_peak_bytes") is not None:
            line += f"  NVML peak {r['nvml_peak_bytes'] / GiB:.2f} GiB"
        if r.get("under_budget") is not None:
            line += "  under budget" if r["under_budget"] \
                else "  OVER budget"
        if r.get("cut"):
            line += f"  (cut at {r['steps_done']} steps)"
        if r.get("error"):
            line += f"  error: {r['error']}"
        lines.append(line)
        summary["methods"][name] = m
    g = summary["methods"].get("gpumem", {})
    if "ratio" in g:
        summary["target"] = TARGET_TRAIN
        summary["met"] = g["ratio"] <= TARGET_TRAIN and not g["oom"] and \
            g.get("losses_identical", False)
        lines.append(f"  target gpumem <= {TARGET_TRAIN}x plain, losses "
                     f"bit-identical: {'met' if summary['met'] else 'NOT met'}")
    if show:
        print("\n".join(lines), flush=True)
    return summary


# ---- case: three processes ------------------------------------------------

def cotenancy_jobs(quick, budget, stream_frac, idle=True, train_steps=0,
                   infer_idle_keep=False, lend_wait=None, keep_cache=False):
    tbase = dict(width=1024, heads=16, seq=512, batch=4, vocab=50257) \
        if quick else dict(width=2048, heads=16, seq=512, batch=8,
                           vocab=50257)
    tcfg = size_gpt2(0.7 * budget, tbase)
    lbase = dict(hidden=2048, inter=5632, heads=16, kv_heads=8, vocab=32000)
    lcfg = size_llama(0.6 * budget, lbase)
    # Enough steps that the training jobs are still stepping while the
    # inference job serves its requests (about 6 s quick): the overlap the
    # summary reports says whether they were.
    steps, warmup = (100, 2) if quick else (40, 3)
    steps = train_steps or steps
    requests, tokens = (6, 24) if quick else (10, 32)
    train = {"cfg": tcfg, "steps": steps, "warmup": warmup,
             "method": "gpumem", "shim": True, "idle": idle,
             "stream_budget": int(stream_frac * budget),
             "lend_wait": lend_wait, "keep_cache": keep_cache}
    jobs = [("train", dict(train, name="train_a", seed=42), None),
            ("train", dict(train, name="train_b", seed=43), None),
            ("infer", {"cfg": lcfg, "name": "infer", "shim": True,
                       "stream": True, "idle": idle, "gap_s": 0.2,
                       "idle_keep": infer_idle_keep,
                       "lend_wait": lend_wait, "keep_cache": keep_cache,
                       "requests": requests, "tokens": tokens, "prompt": 32},
             INFER_PRIORITY)]
    return jobs


def case_cotenancy(ctx, opts, left):
    quick = opts.quick
    budget = parse_size(opts.cot_budget) if opts.cot_budget else \
        (4 * GiB if quick else 16 * GiB)
    jobs = cotenancy_jobs(quick, budget, opts.stream_frac,
                          idle=not opts.no_idle, train_steps=opts.train_steps,
                          infer_idle_keep=opts.infer_idle_keep,
                          lend_wait=opts.lend_wait,
                          keep_cache=opts.keep_cache)
    out = {"budget": budget, "jobs": [a for _, a, _ in jobs],
           "alone": [], "together": []}
    t0 = time.monotonic()
    print(f"cotenancy: budget {budget / GiB:.2f} GiB, "
          + ", ".join(f"{a['name']} {a['cfg']['layers']} layers"
                      for _, a, _ in jobs) + " ...", flush=True)
    # alone, one after another: half of the time left, a third each (at
    # most 150 s with --rounds, whose together rounds are many)
    phase = min(left * 0.45, 150) if opts.rounds else left * 0.45
    # one daemon and holder per job (1 job + the daemon)
    for i, (kind, args, prio) in enumerate(jobs):
        used = time.monotonic() - t0
        if opts.together_only or used > phase - 20:
            why = "--together-only" if opts.together_only else "deadline"
            out["alone"].append({"name": args["name"],
                                 "error": f"skipped: {why}", "rc": None})
            continue
        each = (phase - used) / (len(jobs) - i)
        env = Env(ctx, budget, processes=1, daemon=True)
        if env.error:
            out["alone"].append({"name": args["name"], "error": env.error})
            continue
        before = env.daemon.status()
        try:
            r = finish_child(ctx, start_child(
                ctx, env.env(prio), kind,
                dict(args, deadline_s=each * 0.6)), each, env.daemon)
            r["moved"] = moved(before, env.daemon.status())
        finally:
            r.update(env.report())
            env.stop()
        out["alone"].append(r)
    # together: one round on a fresh daemon (cold), or --rounds pairs of a
    # cold round and a warm one (the same daemon again)
    rounds = []
    for c in range(max(1, opts.rounds)):
        left_now = left - (time.monotonic() - t0)
        if c and left_now < 60:
            break
        per = left_now / (max(1, opts.rounds) - c)
        env = Env(ctx, budget, processes=len(jobs), daemon=True)
        if env.error:
            rounds.append({"kind": "cold", "together_error": env.error})
            continue
        mine = len(rounds)
        try:
            for kind in (("cold", "warm") if opts.rounds else ("cold",)):
                share = per / 2 if opts.rounds else per
                r = together_round(ctx, env, jobs, share)
                r["kind"] = kind
                rounds.append(r)
                if opts.rounds:
                    print(f"  round {len(rounds)} ({kind}): makespan "
                          + round_line(out, r), flush=True)
        finally:
            nvml = env.report()
            env.stop()
        # The watch spans this daemon's life: its peak is the cold
        # round's and the warm one's together, and both say it (the
        # first round's is the case's own verdict, under budget or not).
        for r in rounds[mine:]:
            r["nvml_together"] = nvml
    # The first round is the case's own figures, as with one round.
    first = rounds[0] if rounds else {}
    for key in ("together", "go_t", "makespan_wall_s", "moved_together",
                "together_error", "nvml_together"):
        if key in first:
            out[key] = first[key]
    if opts.rounds:
        out["rounds"] = rounds
    out["summary"] = summarize_cotenancy(out)
    return out


def together_round(ctx, env, jobs, left_now):
    """The three jobs from one go on `env`'s daemon: their RESULTs, the
    makespan with set-up, what the daemon moved."""
    out = {"together": []}
    before = env.daemon.status()
    start = time.monotonic()
    go = os.path.join(env.daemon.dir, f"go.{time.monotonic_ns()}")
    started = [start_child(ctx, env.env(prio), kind,
                           dict(args, deadline_s=left_now * 0.6, go_file=go))
               for kind, args, prio in jobs]
    names = [a["name"] for _, a, _ in jobs]
    # Long enough for the inference job's set-up (22-34 s on an H200:
    # its model built on the CPU, stream(), a warm-up request): a job
    # that is not ready at the go starts late and the makespan measures
    # its set-up, not co-tenancy.
    out["go_t"] = release_together(started, go, names,
                                   max(left_now * 0.3,
                                       min(120.0, left_now * 0.8)))
    out["late"] = [n for n, (p, _, _) in zip(names, started)
                   if p.poll() is None and
                   not os.path.exists(f"{go}.ready.{n}")]
    for s in started:
        out["together"].append(finish_child(
            ctx, s, left_now - (time.monotonic() - start), env.daemon))
    out["makespan_wall_s"] = time.monotonic() - start
    out["moved_together"] = moved(before, env.daemon.status())
    return out


def round_line(case, r):
    """One round's makespan against the alone runs, in words."""
    s = summarize_cotenancy(dict(case, **r, rounds=None), show=False)
    if "makespan_ratio" not in s:
        return "incomplete: " + "; ".join(s["errors"] + s["cut"] + s["ooms"])
    return (f"{s['makespan_together_s']:.1f} s against "
            f"{s['makespan_sequential_s']:.1f} s: x{s['makespan_ratio']:.2f}"
            + ("" if s["no_oom"] else ", OOM")
            + (f"; not ready at the go: {', '.join(r['late'])}"
               if r.get("late") else ""))


def summarize_rounds(case, show=True):
    """Each round's makespan ratio, cold rounds and warm apart."""
    out = {}
    for kind in ("cold", "warm"):
        ratios = []
        for r in case.get("rounds", []):
            if r.get("kind") != kind:
                continue
            s = summarize_cotenancy(dict(case, **r, rounds=None),
                                    show=False)
            ratios.append(s.get("makespan_ratio"))
        done = [x for x in ratios if x is not None]
        out[kind] = {"makespan_ratios": ratios,
                     "worst": max(done) if done else None,
                     "all_met": bool(done) and len(done) == len(ratios)
                     and max(done) <= TARGET_MAKESPAN}
        if show and ratios:
            print(f"  {kind} rounds: makespan "
                  + ", ".join("x%.2f" % x if x is not None else "failed"
                              for x in ratios)
                  + f" (target <= {TARGET_MAKESPAN} in every one: "
                  + ("met" if out[kind]["all_met"] else "NOT met") + ")",
                  flush=True)
    return out


def summarize_cotenancy(case, show=True):
    budget = case["budget"]
    alone = {r["name"]: r for r in case.get("alone", [])}
    together = {r["name"]: r for r in case.get("together", [])}
    lines = [f"three processes on a {budget / GiB:.2f} GiB budget "
             "(two training jobs, one inference job at priority "
             f"{INFER_PRIORITY}):"]
    s = {"budget": budget}
    ooms = [f"{phase} {r['name']}" for phase, rs in
            (("alone", alone), ("together", together))
            for r in rs.values() if r.get("oom")]
    errors = [f"{phase} {r['name']}: {r['error']}" for phase, rs in
              (("alone", alone), ("together", together))
              for r in rs.values() if r.get("error")]
    cut = [f"{phase} {r['name']}" for phase, rs in
           (("alone", alone), ("together", together))
           for r in rs.values() if r.get("cut")]
    if case.get("together_error"):
        errors.append(f"together: {case['together_error']}")
    s["ooms"] = ooms
    s["errors"] = errors
    s["cut"] = cut
    ws = [r.get("working_set") for r in alone.values()]
    if ws and all(ws):
        s["working_sets"] = sum(ws)
        s["working_sets_x_budget"] = sum(ws) / budget
        lines.append("  working sets (alone): " + ", ".join(
            f"{n} {r['working_set'] / GiB:.2f}" for n, r in alone.items())
            + f" GiB, together x{s['working_sets_x_budget']:.2f} the budget")
    complete = len(alone) == 3 and len(together) == 3 and not errors \
        and not cut
    # The makespan of the work: each job's measured part (after its
    # set-up and warm-up), one after another against all three from one
    # go. With set-up (process start to exit) as a second figure: jobs
    # that start together also build their models together.
    def span(r):
        return r["t_end"] - r["t_start"] if "t_end" in r else None

    if len(alone) == 3 and all(span(r) for r in alone.values()):
        s["makespan_sequential_s"] = sum(span(r) for r in alone.values())
    if len(together) == 3 and all(span(r) for r in together.values()):
        s["makespan_together_s"] = \
            max(r["t_end"] for r in together.values()) - \
            min(r["t_start"] for r in together.values())
    if "makespan_sequential_s" in s and "makespan_together_s" in s:
        s["makespan_ratio"] = s["makespan_together_s"] / \
            s["makespan_sequential_s"]
        lines.append(f"  makespan {s['makespan_together_s']:.1f} s together,"
                     f" {s['makespan_sequential_s']:.1f} s one after another:"
                     f" x{s['makespan_ratio']:.2f} (target <= "
                     f"{TARGET_MAKESPAN}; steps and requests, set-up "
                     "not counted)")
    if len(alone) == 3 and all("wall_s" in r for r in alone.values()) and \
            "makespan_wall_s" in case:
        s["makespan_wall_ratio"] = case["makespan_wall_s"] / \
            sum(r["wall_s"] for r in alone.values())
        lines.append(f"  with set-up: {case['makespan_wall_s']:.1f} s / "
                     f"{sum(r['wall_s'] for r in alone.values()):.1f} s: "
                     f"x{s['makespan_wall_ratio']:.2f}")
    ia, it = alone.get("infer"), together.get("infer")
    trains = [r for n, r in together.items() if n != "infer" and
              "t_end" in r]
    if it and "t_end" in it and trains:
        # How much of the inference job's requests ran while training
        # stepped: the p99 below means co-tenancy only where it did.
        def busy(t):
            return sum(r["t_start"] <= t < r["t_end"] for r in trains)
        n = it["tokens_per_request"]
        starts = it.get("request_t") or []
        during = [x for q, t0 in enumerate(starts) if busy(t0)
                  for x in it["token_ms"][q * n:(q + 1) * n]]
        s["infer_requests_during_training"] = sum(bool(busy(t))
                                                  for t in starts)
        s["infer_requests_during_both"] = sum(busy(t) == 2 for t in starts)
        lines.append(f"  inference requests while training stepped: "
                     f"{s['infer_requests_during_training']} of "
                     f"{len(starts)} ({s['infer_requests_during_both']} "
                     "while both did)")
        if during:
            s["p99_during_training_ms"] = percentile(during, 99)
    if ia and it and ia.get("p99_ms") and it.get("p99_ms"):
        s["p99_alone_ms"] = ia["p99_ms"]
        s["p99_together_ms"] = it["p99_ms"]
        s["p99_ratio"] = it["p99_ms"] / ia["p99_ms"]
        lines.append(f"  inference p99 token latency {it['p99_ms']:.2f} ms "
                     f"together, {ia['p99_ms']:.2f} ms alone: "
                     f"x{s['p99_ratio']:.2f} (target <= {TARGET_P99}); "
                     f"p50 {it['p50_ms']:.2f} / {ia['p50_ms']:.2f} ms"
                     + (f"; p99 of the requests during training "
                        f"{s['p99_during_training_ms']:.2f} ms"
                        if "p99_during_training_ms" in s else ""))
        if ia.get("tokens") and it.get("tokens"):
            s["infer_tokens_identical"] = ia["tokens"] == it["tokens"]
    for name in ("train_a", "train_b"):
        a, t = alone.get(name), together.get(name)
        # The longest single step together: a job starved by the other
        # waits in one step (10-13 s on the H100 before 587370a).
        steps = (t or {}).get("step_ms") or []
        longest = ""
        if steps:
            s[f"{name}_longest_step_ms"] = max(steps)
            longest = (f"; longest step {max(steps):.0f} ms (step "
                       f"{steps.index(max(steps))})")
        if a and t and a.get("losses") and t.get("losses"):
            n = min(len(a["losses"]), len(t["losses"]))
            s[f"{name}_losses_identical"] = a["losses"][:n] == t["losses"][:n]
            lines.append(f"  {name}: step {t['step_ms_median']:.1f} ms "
                         f"together, {a['step_ms_median']:.1f} ms alone; "
                         "losses " + ("bit-identical" if s[
                             f"{name}_losses_identical"] else "DIFFER")
                         + longest)
        elif t and t.get("step_ms_median") is not None:
            lines.append(f"  {name}: step {t['step_ms_median']:.1f} ms "
                         f"together{longest}")
    for key, label in (("moved_together", "together"),):
        d = case.get(key)
        if d:
            s["moved"] = d
            lines.append(f"  daemon moved ({label}): "
                         + ", ".join(
                             f"{way} {d[f'bytes_{way}'] / GiB:.2f} GiB"
                             + (f" at {d[f'gbps_{way}']:.1f} GB/s"
                                if d[f"gbps_{way}"] else "")
                             for way in ("out", "in"))
                         + f" (link {d['link_gbps_out']:.1f} out, "
                         f"{d['link_gbps_in']:.1f} in)")
    nv = case.get("nvml_together")
    if nv and nv.get("nvml_peak_bytes") is not None:
        s["nvml_peak_bytes"] = nv["nvml_peak_bytes"]
        s["under_budget"] = nv.get("under_budget")
        lines.append(f"  NVML peak together {nv['nvml_peak_bytes'] / GiB:.2f}"
                     f" GiB of budget {budget / GiB:.2f} + margin "
                     f"{(nv.get('margin') or 0) / GiB:.2f}: "
                     + ("under" if nv.get("under_budget") else "OVER"))
    s["no_oom"] = not ooms
    lines.append("  OOM: " + (", ".join(ooms) if ooms else "none"))
    if errors:
        lines.append("  errors: " + "; ".join(errors))
    if cut:
        lines.append("  cut by the deadline: " + ", ".join(cut))
    s["complete"] = complete
    if complete and "makespan_ratio" in s and "p99_ratio" in s:
        s["met"] = {"makespan": s["makespan_ratio"] <= TARGET_MAKESPAN,
                    "p99": s["p99_ratio"] <= TARGET_P99,
                    "no_oom": not ooms}
        lines.append("  targets: " + ", ".join(
            f"{k} {'met' if v else 'NOT met'}" for k, v in s["met"].items()))
    if show:
        print("\n".join(lines), flush=True)
    if case.get("rounds"):
        s["rounds"] = summarize_rounds(case, show)
    return s


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "child":
        return child(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build")
    ap.add_argument("--cases", default="train2x,cotenancy")
    ap.add_argument("--json")
    ap.add_argument("--log")
    ap.add_argument("--quick", action="store_true",
                    help="smaller models, fewer steps: about 6 minutes")
    ap.add_argument("--deadline", type=float, default=0,
                    help="seconds for all cases (default 360 quick, 480)")
    ap.add_argument("--budget", help="train2x's target budget (bytes or "
                    "4G; the budget used is plain's peak / 2)")
    ap.add_argument("--cot-budget", help="cotenancy's card budget")
    ap.add_argument("--stream-frac", type=float, default=0.15,
                    help="streamed weights kept resident: this fraction "
                    "of the budget (default 0.15)")
    ap.add_argument("--train2x-offload", metavar="JSON",
                    help="more train2x gpumem runs: a JSON list of "
                    "offload_activations() arguments, e.g. "
                    "'[{\"pageout\": false}, {\"min_bytes\": 4194304}]'")
    ap.add_argument("--train2x-daemons", metavar="NAME=PATH,...",
                    help="train2x: instead of gpumem and save_on_cpu, "
                    "gpumem once with each of these gpu-memd binaries, in "
                    "order (an A/B of daemon builds in one run)")
    ap.add_argument("--no-idle", action="store_true",
                    help="cotenancy without idle() between steps and "
                    "requests: the jobs never take turns, so their in-step "
                    "working sets meet (a robustness run, not the "
                    "co-tenancy benchmark itself)")
    ap.add_argument("--train-steps", type=int, default=0,
                    help="cotenancy's training steps per job (default 100 "
                    "quick, 40 full)")
    # An inference server between requests: release the weights, keep them
    # in VRAM unless another needs the room, and a grace above the 0.2 s
    # gap keeps lower priorities from them. H100, 2026-11-26: p99 0.88-1.13x
    # alone in four runs of five, against 3-3.7x with idle() paging them
    # out and no grace.
    ap.add_argument("--priority-grace", type=int, default=500, metavar="MS",
                    help="the daemon's [limits] priority_grace_ms (default "
                    "500; 0: off, the daemon's default)")
    ap.add_argument("--infer-idle-pageout", dest="infer_idle_keep",
                    action="store_false",
                    help="the inference job's idle() between requests pages "
                    "its weights out (default: idle(pageout=False), which "
                    "releases them only)")
    ap.add_argument("--infer-idle-keep", dest="infer_idle_keep",
                    action="store_true", default=True,
                    help="the default (kept for older command lines)")
    ap.add_argument("--lend-wait", type=float, default=None, metavar="S",
                    help="cotenancy: seconds a streamed block's acquire "
                    "waits before its process lends what it holds "
                    "(gpumem's _torchdev.LEND_WAIT; default: the "
                    "package's)")
    ap.add_argument("--keep-cache", action="store_true",
                    help="cotenancy: idle() keeps PyTorch's unused cached "
                    "segments (release_cache=False) instead of giving them "
                    "back to the daemon")
    ap.add_argument("--together-only", action="store_true",
                    help="cotenancy: skip the alone runs (a diagnosis run: "
                    "no makespan or p99 against alone)")
    ap.add_argument("--rounds", type=int, default=0,
                    help="cotenancy: this many daemons, each running the "
                    "three jobs together twice: a cold round (the "
                    "daemon's first) and a warm one; every round's "
                    "makespan against the one alone run (default 0: one "
                    "cold round)")
    ap.add_argument("--peer-tier", choices=("auto", "on", "off"),
                    help="the daemon's [pools] peer_tier (default: the "
                    "daemon's own, auto), with peer_headroom = 256M: on a "
                    "machine of several GPUs what leaves GPU 0 may go to "
                    "another GPU's free VRAM; --vram-limit applies to every "
                    "GPU, so a peer offers at most the budget less 256M")
    ap.add_argument("--memory-slice", type=int, default=5000, metavar="MS",
                    help="the daemon's [limits] memory_slice_ms (default "
                    "5000: the training jobs, which cannot fit together, "
                    "take the budget in turns; 0: off, the daemon's "
                    "default)")
    ap.add_argument("--per-process-margin", default="1G",
                    help="the holder's margin per GPU process (default 1G)")
    ap.add_argument("--summarize", metavar="FILE",
                    help="print the summary of a JSON this bench wrote")
    opts = ap.parse_args()
    if opts.summarize:
        with open(opts.summarize) as f:
            data = json.load(f)
        if "train2x" in data:
            summarize_train2x(data["train2x"])
        if "cotenancy" in data:
            summarize_cotenancy(data["cotenancy"])
        return 0
    if not opts.build:
        ap.error("--build is required")
    try:
        opts.daemon_list = parse_daemons(opts.train2x_daemons or "")
    except ValueError as e:
        ap.error(f"--train2x-daemons: {e}")
    from nvml_watch import Watch
    cases = [c for c in opts.cases.split(",") if c]
    for c in cases:
        if c not in ("train2x", "cotenancy"):
            ap.error(f"--cases: {c}: train2x or cotenancy")
    # Quick: cotenancy alone needs ~300 s since its jobs overlap (100
    # steps; at 170 s the inference job's alone run was cut), train2x ~60.
    deadline = opts.deadline or (360 if opts.quick else 480)
    log = open(opts.log or os.devnull, "w")
    watch = Watch(device=0).start()
    print(f"NVML source: {watch.source or 'none'}"
          + (f" ({watch.error})" if watch.error else ""), flush=True)
    limits = ""
    if opts.priority_grace:
        limits += f"priority_grace_ms = {opts.priority_grace}\n"
    if opts.memory_slice:
        limits += f"memory_slice_ms = {opts.memory_slice}\n"
    daemon_config = f"[limits]\n{limits}" if limits else ""
    if opts.peer_tier:
        daemon_config += (f"[pools]\npeer_tier = {opts.peer_tier}\n"
                          "peer_headroom = 256M\n")
    ctx = Ctx(os.path.abspath(opts.build), log,
              parse_size(opts.per_process_margin), watch, daemon_config)
    out = {"quick": opts.quick, "deadline": deadline,
           "nvml_source": watch.source,
           "per_process_margin": ctx.per_process,
           "priority_grace_ms": opts.priority_grace,
           "memory_slice_ms": opts.memory_slice,
           "peer_tier": opts.peer_tier,
           "lend_wait": opts.lend_wait,
           "infer_idle_keep": opts.infer_idle_keep,
           "keep_cache": opts.keep_cache}
    t0 = time.monotonic()
    shares = {"train2x": 0.3, "cotenancy": 0.7} if len(cases) == 2 \
        else {cases[0]: 1.0}
    try:
        for c in cases:
            left = deadline - (time.monotonic() - t0)
            share = left if c == cases[-1] else deadline * shares[c]
            fn = case_train2x if c == "train2x" else case_cotenancy
            try:
                out[c] = fn(ctx, opts, share)
            except Exception as e:      # one case's failure, not the run's
                import traceback
                traceback.print_exc()
                out[c] = {"error": f"{type(e).__name__}: {e}"}
    finally:
        watch.close()
    out["seconds"] = time.monotonic() - t0
    print(f"bench_cotenancy: {out['seconds']:.0f} s")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(out, f, indent=1)
    failed = [c for c in cases if "error" in out.get(c, {})]
    # a method or job that failed (not one the deadline skipped) fails
    # the run too
    for c in cases:
        results = out.get(c, {}).get("results", []) + \
            out.get(c, {}).get("alone", []) + out.get(c, {}).get("together", [])
        if out.get(c, {}).get("together_error") or any(
                r.get("error") and not r["error"].startswith("skipped")
                for r in results):
            failed.append(c)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
