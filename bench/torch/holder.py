#!/usr/bin/env python3
"""holder.py — impose a VRAM budget on any method the same way
(bench_cotenancy.py): a helper process holds all of the card's free memory but the
budget and a stated margin, so the method that runs beside it sees
`budget + margin` free and nothing more.

The rule (bench_cotenancy.py's docstring repeats it):
  hold = free_before - budget - margin, rounded down to 2 MiB
  margin = per_process x the GPU processes the method starts (its
           children and, for gpu-memd methods, the daemon): their CUDA
           contexts, cuBLAS workspaces and what else the driver keeps
           per process outside any allocator (default 1 GiB each)
`free_before` is what the driver reports free once the holder's own
context exists (torch.cuda.mem_get_info()), so the holder's context is
not part of the budget. gpu-memd methods get the same holder and, on top,
the daemon's --vram-limit = budget, so every method compared sees the
same free memory.

The holder allocates with cudaMalloc through PyTorch in its own process
(torch.empty on cuda:0 in chunks of at most 1 GiB; never managed memory,
never gpu-memd: LD_PRELOAD and the gpu-memd variables are dropped from its
environment), prints one line `HOLDING {json}` (what it holds, free
before and after, the card's total) and waits; it frees everything and
exits on SIGTERM/SIGINT or when its stdin closes (the parent died).

    holder.py hold --budget BYTES [--margin BYTES] [--device 0]

In a bench (no torch in the parent):

    with Holder(budget, margin) as h:     # h.info: the HOLDING line
        run the method
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

MiB = 1 << 20
GiB = 1 << 30
ROUND = 2 * MiB
CHUNK = GiB
# What a GPU process costs outside any allocator, per process (context,
# cuBLAS workspaces, the daemon's own context): the margin's unit.
PER_PROCESS_MARGIN = GiB


def margin_for(processes, per_process=PER_PROCESS_MARGIN):
    """The margin for a method that runs `processes` GPU processes."""
    if processes < 1:
        raise ValueError(f"processes={processes}: 1 or more")
    return processes * per_process


def hold_bytes(free, budget, margin, round_to=ROUND):
    """Bytes the holder takes from `free`: all but budget + margin, rounded
    down to `round_to`; 0 when budget + margin is already more than free.
    """
    if budget < 0 or margin < 0 or free < 0:
        raise ValueError("free, budget and margin are bytes, 0 or more")
    hold = free - budget - margin
    if hold <= 0:
        return 0
    return hold // round_to * round_to


def chunks(total, chunk=CHUNK, round_to=ROUND):
    """The sizes the holder allocates: `chunk`-sized pieces, then the rest
    (a multiple of `round_to`); they add up to `total` rounded down."""
    total = total // round_to * round_to
    out = [chunk] * (total // chunk)
    rest = total - sum(out)
    if rest:
        out.append(rest)
    return out


def holder_env(environ):
    """The holder's environment: none of gpu-memd's shim or socket, none
    of PyTorch's allocator settings (plain cudaMalloc segments)."""
    env = {k: v for k, v in environ.items()
           if k not in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF",
                        "PYTORCH_ALLOC_CONF")
           and not k.startswith("GPU_MEMD")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


# ---- the holder process -------------------------------------------------

def hold_main(budget, margin, device=0, out=sys.stdout):
    import torch
    stop = threading.Event()

    def on_signal(*_):
        stop.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    torch.cuda.set_device(device)
    free, total = torch.cuda.mem_get_info(device)
    want = hold_bytes(free, budget, margin)
    held = []
    failed = None
    for size in chunks(want):
        try:
            held.append(torch.empty(size, dtype=torch.uint8,
                                    device=f"cuda:{device}"))
        except RuntimeError as e:      # OutOfMemoryError is one
            failed = str(e).splitlines()[0]
            break
    torch.cuda.synchronize(device)
    free_after, _ = torch.cuda.mem_get_info(device)
    info = {"pid": os.getpid(), "device": device, "total": total,
            "free_before": free, "budget": budget, "margin": margin,
            "want": want, "held": sum(t.numel() for t in held),
            "free_after": free_after, "error": failed}
    print("HOLDING " + json.dumps(info), file=out, flush=True)

    # stdin closing means the parent is gone: free and go
    def watch_stdin():
        try:
            while sys.stdin.read(4096):
                pass
        except (OSError, ValueError):
            pass
        stop.set()
    threading.Thread(target=watch_stdin, daemon=True).start()
    while not stop.wait(0.2):
        pass
    held.clear()
    torch.cuda.empty_cache()
    return 0


# ---- the parent's handle ------------------------------------------------

class HolderError(RuntimeError):
    pass


class Holder:
    """Start holder.py in its own process and wait for its HOLDING line
    (up to `timeout` s). `info` is that line's dict. stop() (or leaving the
    with block) ends it and waits until it is gone, so its memory is free
    again when stop() returns."""

    def __init__(self, budget, margin, device=0, timeout=120,
                 python=sys.executable, log=None):
        self.budget = budget
        self.margin = margin
        self.info = None
        self.proc = subprocess.Popen(
            [python, os.path.abspath(__file__), "hold", "--budget",
             str(int(budget)), "--margin", str(int(margin)), "--device",
             str(device)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=log if log is not None else subprocess.DEVNULL,
            env=holder_env(os.environ), text=True)
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("HOLDING "):
                self.info = json.loads(line[8:])
                break
        if self.info is None:
            self.stop()
            raise HolderError(f"holder.py gave no HOLDING line (rc "
                              f"{self.proc.returncode}; {line.strip()!r})")
        if self.info.get("error"):
            err = self.info["error"]
            self.stop()
            raise HolderError(f"holder.py could not hold "
                              f"{self.info['want']} bytes: {err}")

    @property
    def pid(self):
        return self.proc.pid

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except (OSError, ValueError):
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cmd", choices=["hold"])
    ap.add_argument("--budget", type=int, required=True)
    ap.add_argument("--margin", type=int, default=PER_PROCESS_MARGIN)
    ap.add_argument("--device", type=int, default=0)
    opts = ap.parse_args(argv)
    return hold_main(opts.budget, opts.margin, opts.device)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
