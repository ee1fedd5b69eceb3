#!/usr/bin/env python3
"""profile_llama.py — where the Llama generation's time goes, with PyTorch's
default allocator and on gpu-memd (under gpumem-run), in the same run.

bench_torch.py measures the generation's tokens/s; this tells why two
allocators differ. Each allocator runs in a fresh process that measures:
  - tokens/s of 3 generations (the bench's model and settings);
  - one generation under torch.profiler: the GPU's summed kernel and copy
    time against the wall time, and the 12 kernels that took longest;
  - microbenchmarks on memory of that allocator: a 512 MiB device copy
    (bandwidth), a bf16 4096^2 matmul, and 4000 launches of a tiny kernel
    (host-side launch cost, no synchronization between them).
If the GPU's time differs, the memory is slower; if only the wall time or
the launch cost differs, the host side is.

  profile_llama.py --build BUILD [--json FILE] [--rounds N]
                   [--allocs default,gpumem,pass,vmm]
pass and vmm preload BUILD/bench/diag_preload.so (a CUDA build makes it):
interposing alone, and in-process VMM memory with no daemon.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)


def cuda_time(torch, fn, n):
    """Median GPU milliseconds of fn() over n runs, timed with events."""
    times = []
    for _ in range(n):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def micro(torch):
    out = {}
    x = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    x.fill_(1)
    out["copy_512MiB_ms"] = cuda_time(torch, lambda: y.copy_(x), 20)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    out["matmul_4096_bf16_ms"] = cuda_time(torch, lambda: a @ b, 20)
    t = torch.zeros(1, device="cuda")
    for _ in range(100):
        t.add_(1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(4000):
        t.add_(1)
    launch = time.perf_counter() - t0
    torch.cuda.synchronize()
    out["tiny_launch_us"] = launch / 4000 * 1e6
    # Many small tensors, as a model's weights and KV cache are.
    small = [torch.ones(1 << 18, device="cuda") for _ in range(256)]   # 1 MiB each
    out["foreach_add_256x1MiB_ms"] = cuda_time(
        torch, lambda: torch._foreach_add_(small, 1.0), 20)
    return out


def child():
    import common
    torch = common.setup_determinism()
    from torch.profiler import ProfilerActivity, profile
    model, prompt, kwargs = common.llama_generation()
    res = {}
    with torch.no_grad():
        model.generate(prompt, **kwargs)
        model.generate(prompt, **kwargs)
        rates = []
        for _ in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.generate(prompt, **kwargs)
            torch.cuda.synchronize()
            rates.append(32 * 128 / (time.perf_counter() - t0))
        res["tokens_per_s"] = rates
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            model.generate(prompt, **kwargs)
            torch.cuda.synchronize()
            res["profiled_wall_ms"] = (time.perf_counter() - t0) * 1e3
    top = [(k.self_device_time_total, k.count, k.key[:80])
           for k in prof.key_averages()]
    top.sort(reverse=True)
    # Each kernel is some op's self device time: the sum is the GPU's.
    gpu_us = sum(t for t, _, _ in top)
    kernels = sum(c for t, c, _ in top if t > 0)
    res["gpu_ms"] = gpu_us / 1e3
    res["gpu_events"] = kernels
    res["top"] = [{"name": n, "count": c, "ms": round(t / 1e3, 3)} for t, c, n in top[:12]]
    cpu = sorted(((k.self_cpu_time_total, k.count, k.key[:80])
                  for k in prof.key_averages()), reverse=True)
    res["cpu_ms"] = sum(t for t, _, _ in cpu) / 1e3
    res["top_cpu"] = [{"name": n, "count": c, "ms": round(t / 1e3, 3)}
                      for t, c, n in cpu[:25]]
    res["micro"] = micro(torch)
    print("RESULT " + json.dumps(res), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--build", default="build")
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--allocs", default="default,gpumem",
                    help="default, gpumem, and the diagnostic preloads pass "
                         "and vmm (BUILD/bench/diag_preload.so)")
    a = ap.parse_args()
    if a.child:
        child()
        return 0
    build = os.path.abspath(a.build)
    tmp = tempfile.mkdtemp(prefix="gmd-prof-")
    sock = os.path.join(tmp, "sock")
    dlog = open(os.path.join(tmp, "daemon.log"), "w")
    daemon = subprocess.Popen([os.path.join(build, "daemon", "gpu-memd"), "--backend",
                               "cuda", "--socket", sock, "--host-limit", "2G"],
                              stdout=dlog, stderr=subprocess.STDOUT)
    env = dict(os.environ, GPU_MEMD_SOCKET=sock,
               PYTHONPATH=os.path.join(ROOT, "client", "python"))
    for _ in range(1000):
        if os.path.exists(sock):
            break
        time.sleep(0.01)
    results = []
    try:
        for n in range(a.rounds):
            order = a.allocs.split(",")
            order = order if n % 2 == 0 else order[::-1]
            for alloc in order:
                cmd = [sys.executable, os.path.abspath(__file__), "--child"]
                cenv = dict(env)
                if alloc == "gpumem":
                    cmd = [os.path.join(build, "client", "torch", "gpumem-run")] + cmd
                elif alloc in ("pass", "vmm"):
                    cenv["LD_PRELOAD"] = os.path.join(build, "bench", "diag_preload.so")
                    cenv["DIAG_MODE"] = alloc
                p = subprocess.run(cmd, env=cenv, capture_output=True, text=True,
                                   timeout=600)
                r = None
                for line in p.stdout.splitlines():
                    if line.startswith("RESULT "):
                        r = json.loads(line[7:])
                if r is None:
                    print(f"{alloc} failed rc {p.returncode}:\n{p.stderr[-3000:]}")
                    continue
                r["alloc"] = alloc
                results.append(r)
                m = r["micro"]
                print(f"{alloc:8s} tok/s {statistics.median(r['tokens_per_s']):7.0f}  "
                      f"profiled wall {r['profiled_wall_ms']:7.1f} ms cpu {r['cpu_ms']:7.1f} ms gpu {r['gpu_ms']:7.1f} ms "
                      f"({r['gpu_events']} events)  copy {m['copy_512MiB_ms']:.3f} ms "
                      f"matmul {m['matmul_4096_bf16_ms']:.3f} ms launch "
                      f"{m['tiny_launch_us']:.2f} us foreach {m['foreach_add_256x1MiB_ms']:.3f} ms",
                      flush=True)
                for t in r["top"][:6]:
                    print(f"    {t['ms']:9.3f} ms {t['count']:6d}  {t['name']}")
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
