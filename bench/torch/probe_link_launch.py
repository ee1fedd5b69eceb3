#!/usr/bin/env python3
"""probe_link_launch.py — does a busy PCIe link slow a launch-bound model?

Streaming's bound (bench_offload.py's of_bound) is the lower of the model's speed in
VRAM and the link's; it assumes the two overlap freely. At batch 1 and 16
the Llama of bench_offload.py is bound by the host's kernel launches, and
a streamed pass keeps the link busy from host to device the whole time.
This probe runs the same generation in VRAM, no gpu-memd involved, alone
and with the link kept busy by copies on a side stream (pinned host to
device, or device to host), rounds interleaved, and reports tokens/s and
the GPU time of each decoder layer (events around each layer).

  probe_link_launch.py [--quick] [--batch N] [--tokens N] [--rounds N]
                       [--json FILE]

A diagnostic, not a bench. Needs a GPU (torch 2.x with CUDA, transformers).
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

MiB = 1 << 20


def layer_marks(torch, layers, marks):
    def pre(i):
        def hook(module, inputs):
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            marks.append((i, e, None))
        return hook

    def post(i):
        def hook(module, inputs, output):
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            marks.append((i, None, e))
        return hook
    handles = []
    for i, layer in enumerate(layers):
        handles.append(layer.register_forward_pre_hook(pre(i)))
        handles.append(layer.register_forward_hook(post(i)))
    return handles


def layer_ms(torch, marks):
    torch.cuda.synchronize()
    times, start = [], None
    for _, s, e in marks:
        if s is not None:
            start = s
        elif start is not None:
            times.append(start.elapsed_time(e))
            start = None
    return statistics.median(times) if times else None


class Hog:
    """Keeps the link busy one way: `n` copies of 256 MiB queued on a side
    stream."""

    def __init__(self, torch, way):
        self.torch = torch
        self.way = way
        self.host = torch.empty(256 * MiB, dtype=torch.uint8).pin_memory()
        self.dev = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
        self.stream = torch.cuda.Stream()

    def start(self, seconds):
        n = max(1, int(seconds / 0.0049) + 1)       # 256 MiB at ~55 GB/s
        with self.torch.cuda.stream(self.stream):
            for _ in range(n):
                if self.way == "h2d":
                    self.dev.copy_(self.host, non_blocking=True)
                else:
                    self.host.copy_(self.dev, non_blocking=True)

    def stop(self):
        self.stream.synchronize()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    opts = ap.parse_args()
    from common import setup_determinism
    from bench_offload import llama_model
    torch = setup_determinism()

    model, config = llama_model(torch, opts.quick)
    model = model.cuda()
    g = torch.Generator(device="cpu").manual_seed(7)
    prompt = torch.randint(0, config.vocab_size, (opts.batch, 32),
                           generator=g).cuda()
    kwargs = dict(max_new_tokens=opts.tokens, min_new_tokens=opts.tokens,
                  do_sample=False, pad_token_id=0)
    marks = []
    handles = layer_marks(torch, model.model.layers, marks)
    hogs = {"h2d": Hog(torch, "h2d"), "d2h": Hog(torch, "d2h")}
    out = {"batch": opts.batch, "tokens": opts.tokens,
           "cases": {k: {"tok_s": [], "layer_ms": []}
                     for k in ("alone", "h2d", "d2h")}}
    with torch.no_grad():
        model.generate(prompt, **kwargs)                  # warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.generate(prompt, **kwargs)
        torch.cuda.synchronize()
        span = time.perf_counter() - t0
        for _ in range(opts.rounds):
            for case in ("alone", "h2d", "d2h"):
                marks.clear()
                hog = hogs.get(case)
                if hog:
                    hog.start(span * 2 + 0.05)
                    time.sleep(0.01)                      # copies running
                torch.cuda.synchronize() if not hog else None
                t0 = time.perf_counter()
                model.generate(prompt, **kwargs)
                torch.cuda.current_stream().synchronize()
                wall = time.perf_counter() - t0
                if hog:
                    hog.stop()
                c = out["cases"][case]
                c["tok_s"].append(opts.tokens * opts.batch / wall)
                c["layer_ms"].append(layer_ms(torch, marks))
    for h in handles:
        h.remove()
    for c in out["cases"].values():
        c["tok_s_median"] = statistics.median(c["tok_s"])
        c["layer_ms_median"] = statistics.median(c["layer_ms"])
    alone = out["cases"]["alone"]
    for case in ("h2d", "d2h"):
        c = out["cases"][case]
        c["speed_of_alone"] = c["tok_s_median"] / alone["tok_s_median"]
    text = json.dumps(out, indent=1)
    print(text)
    if opts.json:
        with open(opts.json, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
