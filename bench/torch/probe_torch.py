#!/usr/bin/env python3
"""probe_torch.py — the facts the choice of gpumem.torch's mechanism rests on,
read off the installed PyTorch (README "PyTorch" and BENCHMARKS.md quote
them). Prints one JSON object:
  cudart_dynamic   libtorch_cuda.so / libc10_cuda.so import cudaMalloc,
                   cudaFree, cudaMemGetInfo from libcudart.so dynamically
                   (so a library ahead of libcudart receives the calls)
  cudafree_syncs   the real cudaFree waits for a kernel queued on another
                   stream (so the shim's free must synchronize too)
  mempool_routing  torch.cuda.MemPool + use_mem_pool: bytes of a forward and
                   backward pass that landed outside the pool (autograd's
                   thread), and what empty_cache() returned of the pool
"""

import ctypes
import glob
import json
import os
import subprocess
import time


def dynamic_imports():
    import torch
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    out = {}
    for name in ("libtorch_cuda.so", "libc10_cuda.so"):
        path = os.path.join(lib, name)
        if not os.path.exists(path):
            continue
        nm = subprocess.run(["nm", "-D", "--with-symbol-versions", path],
                            capture_output=True, text=True).stdout
        syms = [l.strip() for l in nm.splitlines()
                if any(f" {s}@" in l or l.endswith(" " + s)
                       for s in ("cudaMalloc", "cudaFree", "cudaMemGetInfo"))]
        ldd = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        out[name] = {"symbols": syms,
                     "cudart": [l.strip() for l in ldd.splitlines() if "cudart" in l]}
    return out


def cudafree_syncs():
    import torch
    torch.cuda.init()
    path = None
    with open("/proc/self/maps") as f:
        for line in f:
            if "libcudart.so" in line:
                path = line.split()[-1]
                break
    if not path:
        paths = glob.glob(os.path.join(os.path.dirname(torch.__file__), "..",
                                       "nvidia", "cu*", "lib", "libcudart.so*"))
        path = paths[0] if paths else "libcudart.so.13"
    rt = ctypes.CDLL(path)
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), 1 << 20) == 0
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(int(1.5e9))    # about 0.75-1 s of GPU time
    t0 = time.perf_counter()
    rc = rt.cudaFree(p)
    dt = time.perf_counter() - t0
    torch.cuda.synchronize()
    return {"cudart": path, "rc": rc, "cudaFree_ms_behind_a_long_kernel": dt * 1e3}


def mempool_routing():
    import torch
    if not hasattr(torch.cuda, "MemPool"):
        return None
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4096, 16384), torch.nn.GELU(),
                                torch.nn.Linear(16384, 4096)).cuda()
    torch.cuda.synchronize()
    base = torch.cuda.memory_reserved()
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        x = torch.randn(2048, 4096, device="cuda", requires_grad=True)
        model(x).square().mean().backward()
    torch.cuda.synchronize()
    in_pool = sum(s["total_size"] for s in pool.snapshot())
    total = torch.cuda.memory_reserved() - base
    del x
    model.zero_grad(set_to_none=True)
    for p in model.parameters():
        p.grad = None
    torch.cuda.empty_cache()
    left = sum(s["total_size"] for s in pool.snapshot())
    return {"reserved_during_pass": total, "in_pool": in_pool,
            "outside_pool": total - in_pool,
            "pool_bytes_after_empty_cache": left}


def main():
    out = {}
    for name, fn in (("cudart_dynamic", dynamic_imports),
                     ("cudafree_syncs", cudafree_syncs),
                     ("mempool_routing", mempool_routing)):
        try:
            out[name] = fn()
        except Exception as e:
            out[name] = {"error": f"{type(e).__name__}: {e}"}
    import torch
    out["torch"] = torch.__version__
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
