#!/usr/bin/env python3
"""profile_stream.py — where a streamed generation's time goes (against
streaming's 0.9-of-the-bound target): the same Llama and budget as
bench_offload.py's inference, generated in VRAM and streamed, in one
process, with

  - the host's time in each of the streamer's calls to the daemon
    (acquire, prefetch, release, pageout, and the flush that hears the
    answers of those sent without waiting: count, median, p90, total per
    token), timed around the streamer's own methods;
  - the GPU's time of each block (events after its acquire and after its
    forward), and the GPU's idle time between blocks (a block's start
    event minus the previous block's end);
  - the daemon's own account of every move (its debug log's "moved in/out
    N bytes in T us (copy C, remap and ack R, release L)" lines): median
    and p90 of each part, each way;
  - with --timeline, one clock for all three (CLOCK_MONOTONIC: the
    daemon's move lines say when each move was queued, when its first
    chunk went to the copy engine, when its copy ended and when it was
    over; the GPU's events are put on the host's clock through one
    reference event): how busy the link and the GPU were over the
    measured generation, how long after a block's kernels the daemon
    heard of them (its clean pageout's empty copy), how long a prefetch
    waited for room, and a text timeline of two passes in the middle.

  profile_stream.py --build BUILD [--json FILE] [--log FILE] [--quick]
                    [--lead N] [--tokens N] [--batch N] [--timeline FILE]
                    [--cpus LIST] [--swap KEY=VALUE,...]

A diagnostic, not a bench: bench_offload.py is the figure of record.
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

import stream_timeline                                  # noqa: E402
from stream_timeline import spread                      # noqa: E402

MiB = 1 << 20
def timed(calls, name, fn):
    def wrapper(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            calls.setdefault(name, []).append(
                (time.perf_counter() - t0) * 1e3)
    return wrapper


def generate(torch, model, prompt, new, rounds):
    kwargs = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False,
                  pad_token_id=0)
    model.generate(prompt, **kwargs)                     # warm-up
    rates = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.generate(prompt, **kwargs)
        torch.cuda.synchronize()
        rates.append(new / (time.perf_counter() - t0))
    return rates


def gpu_marks(torch, streamer, marks):
    """Events after each block's acquire (its pre-hook runs first) and
    after its forward."""
    def pre(block):
        def hook(module, inputs):
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            marks.append((block.name, "start", e))
        return hook

    def post(block):
        def hook(module, inputs, output):
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            marks.append((block.name, "end", e))
        return hook
    handles = []
    for b in streamer.blocks:
        if b.module is None or b.name == "rest":
            continue
        handles.append(b.module.register_forward_pre_hook(pre(b)))
        handles.append(b.module.register_forward_hook(post(b)))
    return handles


def gpu_summary(torch, marks):
    torch.cuda.synchronize()
    busy, gaps = [], []
    last_end = None
    for name, kind, e in marks:
        if kind == "start":
            start = e
            if last_end is not None:
                gaps.append(last_end.elapsed_time(e))
        else:
            busy.append(start.elapsed_time(e))
            last_end = e
    return {"block_ms": spread(busy), "gap_ms": spread(gaps)}


def moves_summary(moves):
    """Each way's moves (stream_timeline.daemon_moves): count, median
    bytes, and the spread of each part of their time."""
    summary = {}
    for way in ("in", "out"):
        rows = [m for m in moves if m["way"] == way]
        if not rows:
            continue
        summary[way] = {
            "moves": len(rows),
            "bytes_median": statistics.median(r["bytes"] for r in rows),
            **{part: spread([r[part] for r in rows]) for part in
               ("total_us", "copy_us", "remap_ack_us", "release_us")}}
    return summary


def daemon_moves(path):
    """moves_summary of the daemon's debug log at `path`."""
    with open(path) as f:
        return moves_summary(stream_timeline.daemon_moves(f))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--json")
    ap.add_argument("--log", help="the daemon's debug log (default: a "
                    "temporary file)")
    ap.add_argument("--quick", action="store_true",
                    help="8 layers as bench_offload --quick (default 16)")
    ap.add_argument("--lead", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--cpus", default="",
                    help="comma list of CPUs for this process's thread and "
                    "the client's I/O thread, set after the daemon starts "
                    "(which keeps every CPU)")
    ap.add_argument("--swap", default="",
                    help="[swap] keys for the daemon, e.g. "
                    "chunk_size=32M,copies_in_flight=4")
    ap.add_argument("--ab-ahead", action="store_true",
                    help="after the measured generation, 3 rounds each with "
                    "the next block's lease asked for ahead (acquire_start) "
                    "and without, interleaved, in this process")
    ap.add_argument("--batch", type=int, default=1,
                    help="sequences generated at once (default 1)")
    ap.add_argument("--timeline", metavar="FILE",
                    help="put the client's calls, the GPU's blocks and the "
                    "daemon's moves on one clock: a summary in the JSON, two "
                    "passes in the middle as text in FILE")
    ap.add_argument("--pageout", choices=("auto", "on", "off"),
                    default="auto")
    opts = ap.parse_args()
    build = os.path.abspath(opts.build)
    os.environ.setdefault("GPUMEM_LIBRARY", os.path.join(
        build, "client", "libgpumem.so.0"))
    from common import Daemon, setup_determinism
    from bench_offload import llama_model
    torch = setup_determinism()
    import gpumem
    import gpumem.torch as gt

    layers = 8 if opts.quick else 16
    per_block = 2 * (4 * 2048 * 2048 // 2 * 3 // 2 + 3 * 2048 * 5632
                     + 2 * 2048)
    rest = 2 * (2 * 32000 * 2048 + 2048)
    budget = rest + (layers // 2) * per_block
    log_path = opts.log or os.path.join(build, "profile_stream_daemon.log")
    out = {"lead": opts.lead, "tokens": opts.tokens, "batch": opts.batch,
           "budget": budget}
    g = torch.Generator(device="cpu").manual_seed(7)

    model, config = llama_model(torch, opts.quick)
    prompt = torch.randint(0, config.vocab_size, (opts.batch, 32),
                           generator=g).cuda()
    with torch.no_grad():
        vram = model.cuda()
        out["vram_tok_s"] = [r * opts.batch for r in
                             generate(torch, vram, prompt, opts.tokens, 3)]
        model = vram.cpu()
    torch.cuda.empty_cache()

    extra = ["--log-level", "debug"]
    if opts.swap:
        conf = os.path.join(build, "profile_stream.conf")
        with open(conf, "w") as f:
            f.write("[swap]\n" + "\n".join(
                kv.replace("=", " = ") for kv in opts.swap.split(",")) + "\n")
        extra += ["--config", conf]
        out["swap"] = opts.swap
    with open(log_path, "w") as log:
        daemon = Daemon(build, log, f"{(budget + 256 * MiB) // MiB}M", "16G",
                        "gmd-profile-", extra=extra)
    try:
        if opts.cpus:
            os.sched_setaffinity(0, {int(c) for c in opts.cpus.split(",")})
        client = gpumem.Client(daemon.socket, name="profile_stream")
        pageout = {"auto": None, "on": True, "off": False}[opts.pageout]
        s = gt.stream(model, budget=budget, client=client, lead=opts.lead,
                      device=0, pageout=pageout)
        calls = {}
        for name in ("_acquire", "_release", "_pageout", "_prefetch_from",
                     "_flush"):
            setattr(s, name, timed(calls, name, getattr(s, name)))
        marks = []
        handles = gpu_marks(torch, s, marks)
        buffer_calls = stream_timeline.BufferCalls(gpumem.Buffer)
        buffer_calls.install()
        with torch.no_grad():
            kwargs = dict(max_new_tokens=opts.tokens,
                          min_new_tokens=opts.tokens, do_sample=False,
                          pad_token_id=0)
            model.generate(prompt, **kwargs)             # warm-up, learns
            calls.clear()
            marks.clear()
            with open(log_path) as f:
                f.seek(0, 2)
                log_from = f.tell()
            clock = stream_timeline.GpuClock(torch)
            buffer_calls.on = True
            t0 = time.perf_counter()
            model.generate(prompt, **kwargs)
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
            buffer_calls.on = False
            window = (clock.t_us, clock.t_us + wall * 1e6)
        buffer_calls.remove()
        streamed = [(b.name, b.buf.id) for b in s.blocks
                    if b.buf is not None]
        out["stream_tok_s"] = opts.tokens * opts.batch / wall
        out["resident_blocks"] = sum(b.resident for b in s.blocks)
        out["blocks"] = len(s.blocks)
        out["plan"] = s.plan
        out["stats"] = dict(s.stats)
        passes = opts.tokens        # one forward pass per token
        out["host_ms"] = {k: spread(v) for k, v in calls.items()}
        out["host_ms_per_token"] = {k: sum(v) / passes
                                    for k, v in calls.items()}
        out["gpu"] = gpu_summary(torch, marks)
        timeline_marks = list(marks)
        if opts.ab_ahead:
            ab = {"ahead": [], "not_ahead": []}
            with torch.no_grad():
                for _ in range(3):
                    for key, on in (("ahead", True), ("not_ahead", False)):
                        s._ahead = on
                        torch.cuda.synchronize()
                        t0 = time.perf_counter()
                        model.generate(prompt, **kwargs)
                        torch.cuda.synchronize()
                        ab[key].append(opts.tokens * opts.batch /
                                       (time.perf_counter() - t0))
            s._ahead = True
            out["ab_ahead_tok_s"] = ab
        for h in handles:
            h.remove()
        s.remove()
        client.close()
    finally:
        daemon.stop()
    tail = os.path.join(build, "profile_stream_moves.log")
    with open(log_path) as f, open(tail, "w") as t:
        f.seek(log_from)
        t.write(f.read())
    with open(tail) as f:
        moves = stream_timeline.daemon_moves(f)
    out["daemon_moves"] = moves_summary(moves)
    if opts.timeline:
        out["timeline"] = stream_timeline.analyze(
            streamed, timeline_marks, clock, buffer_calls.calls, moves, window)
        mid = (window[0] + window[1]) / 2
        pass_us = (window[1] - window[0]) / opts.tokens
        with open(opts.timeline, "w") as f:
            f.write("\n".join(stream_timeline.text(
                streamed, timeline_marks, clock, buffer_calls.calls, moves,
                window, mid - pass_us, mid + pass_us)) + "\n")
    text = json.dumps(out, indent=1, default=str)
    print(text)
    if opts.json:
        with open(opts.json, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
