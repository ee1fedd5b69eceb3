"""common.py — what bench_torch.py and bench_offload.py both use in their
child processes: the same deterministic PyTorch set-up, and the readers of
gpu-memd's figures (the shim's counters, the VRAM pool's bytes moved).

Not a script: each bench puts its own folder first on sys.path and imports
it, so it is found whatever the current directory.
"""

import os


def setup_determinism():
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    torch.manual_seed(1234)
    torch.cuda.manual_seed_all(1234)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    return torch


def shim_stats():
    """The shim's counters when it is preloaded, else None."""
    try:
        with open("/proc/self/maps") as f:
            if "libgpumem_torch.so" not in f.read():
                return None
    except OSError:
        return None
    import gpumem.torch as gt
    if gt._lib is None:
        gt._load(None, None)
    return gt.stats()


def pool_moves(client):
    p = next(p for p in client.status("pools").pools
             if p.tier == "vram" and p.device == 0)
    return {"bytes_out": p.bytes_out, "bytes_in": p.bytes_in,
            "copy_us_out": p.copy_us_out, "copy_us_in": p.copy_us_in}
