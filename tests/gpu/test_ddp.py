#!/usr/bin/env python3
"""test_ddp.py — DistributedDataParallel training on two GPUs, plain and on
gpu-memd, bit for bit (the GPU suite runs it).

The same job runs twice with `python3 -m torch.distributed.run --standalone
--nproc_per_node=2 test_ddp.py rank ...`: first plain (PyTorch's own
allocator, no daemon), then under gpumem-run, the shim preloaded in the
launcher and so in both ranks, on a gpu-memd (cuda backend, a 4 GiB pool on
each GPU it serves: every GPU of the machine). Rank r trains on cuda:r with
the NCCL backend: an MLP of 25M parameters (fixed seed), SGD with
momentum, STEPS steps of fixed data (a CPU generator per rank),
deterministic algorithms (CUBLAS_WORKSPACE_CONFIG, no TF32). Checks:
  losses     every step's loss of each rank (float.hex) is the same in both
             runs
  weights    each rank's final parameters (sha256 of their bytes, and their
             float64 sum) are the same in both runs, and the same on both
             ranks (DDP keeps them in step)
  devices    after the last step, with both ranks still holding their
             memory, gpu-memctl's buffers list: rank r's buffers are all
             on the daemon's device whose UUID is that of the rank's cuda:r,
             at least the model's weights in bytes; the two ranks on two
             devices; and each rank's shim holds every byte PyTorch
             reserved (all of it went through gpu-memd)
Then a note on NCCL: its own buffers (allocated by libnccl, with the CUDA
driver's cuMem* calls or the runtime linked into it, not through the
cudaMalloc that the shim answers) may bypass gpu-memd; the daemon's
status shows them, with the CUDA contexts, as VRAM used outside it
("unaccounted"), which is printed per device.

Exit status 0 when all pass, 1 on a failure, 77 (skipped) with fewer than
two GPUs, no PyTorch with CUDA or no NCCL. Needs $GMD_BUILD (the build
folder), as scripts/gpu-suite.sh sets. Each run is cut at JOB_TIMEOUT
(a minute or so in all is expected on two H100s).

    GMD_BUILD=build-cuda python3 tests/gpu/test_ddp.py
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import gmd_gpu
from gmd_gpu import MiB, check

STEPS = 20
BATCH = 256
WIDTH = 1024
HIDDEN = 4096
RANKS = 2
JOB_TIMEOUT = 120        # seconds one run may take


# ---- one rank: run by torch.distributed.run -------------------------------

def nccl_version(torch):
    v = torch.cuda.nccl.version()       # (2, 27, 5); an int before torch 2.0
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def rank_main(outdir, mode):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = int(os.environ["RANK"])
    local = int(os.environ["LOCAL_RANK"])
    with open(os.path.join(outdir, f"rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))       # for stop_job
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:                        # bound to its device: NCCL set up at once
        dist.init_process_group("nccl", device_id=dev)
    except TypeError:           # a torch before 2.3
        dist.init_process_group("nccl")

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(WIDTH, HIDDEN), torch.nn.GELU(),
        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.GELU(),
        torch.nn.Linear(HIDDEN, WIDTH)).to(dev)
    ddp = DDP(model, device_ids=[local])
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-2, momentum=0.9)
    g = torch.Generator(device="cpu").manual_seed(1000 + rank)
    losses = []
    for _ in range(STEPS):
        x = torch.randn(BATCH, WIDTH, generator=g).to(dev)
        y = torch.randn(BATCH, WIDTH, generator=g).to(dev)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item().hex())
    torch.cuda.synchronize(dev)

    h = hashlib.sha256()
    total = 0.0
    for name, p in model.named_parameters():
        cpu = p.detach().cpu()
        h.update(name.encode())
        h.update(cpu.numpy().tobytes())
        total += cpu.double().sum().item()
    props = torch.cuda.get_device_properties(dev)
    result = {
        "rank": rank, "pid": os.getpid(), "cuda": local,
        "uuid": str(getattr(props, "uuid", "")),
        "losses": losses, "weights_sha256": h.hexdigest(),
        "weights_sum": total.hex(),
        "weight_bytes": sum(p.numel() * p.element_size()
                            for p in model.parameters()),
        "reserved": torch.cuda.memory_reserved(dev),
        "nccl": nccl_version(torch),
    }
    if mode == "gpumem":
        import gpumem.torch as gt
        gt._load(None, None)            # the preloaded shim, for its counters
        result["shim"] = gt.stats()
    # Both ranks hold their memory until rank 0 has read the daemon's
    # buffers list.
    dist.barrier(device_ids=[local])
    if mode == "gpumem" and rank == 0:
        try:
            status = gmd_gpu.memctl(os.environ["GMD_BUILD"], "buffers")
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            status = {"error": f"gpu-memctl --json buffers: {e}"}
        with open(os.path.join(outdir, "status.json"), "w") as f:
            json.dump(status, f)
    dist.barrier(device_ids=[local])
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


# ---- the test --------------------------------------------------------------

def run_job(build, mode, launcher=None):
    """Both ranks of one run; their results by rank (None after a failure,
    with the job's output printed)."""
    outdir = tempfile.mkdtemp(prefix=f"gmd-ddp-{mode}-")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={RANKS}", os.path.abspath(__file__), "rank",
           outdir, mode]
    if launcher:
        cmd = [launcher] + cmd
    env = gmd_gpu.child_env(build, {"CUBLAS_WORKSPACE_CONFIG": ":4096:8",
                                    "OMP_NUM_THREADS": "1",
                                    "GMD_BUILD": build})
    # NVLink multicast (NVLS) stays off, as on the machines the suite runs
    # on: it is not needed for two ranks, and its memory is the driver's.
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    if mode == "plain":
        env.pop("LD_PRELOAD", None)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=JOB_TIMEOUT)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        stop_job(p, outdir)
        out, _ = p.communicate()
        rc = f"killed after {JOB_TIMEOUT} s"
    secs = time.monotonic() - t0
    results = {}
    for r in range(RANKS):
        try:
            with open(os.path.join(outdir, f"rank{r}.json")) as f:
                results[r] = json.load(f)
        except (OSError, ValueError):
            pass
    status = None
    if os.path.exists(os.path.join(outdir, "status.json")):
        with open(os.path.join(outdir, "status.json")) as f:
            status = json.load(f)
    ok = rc == 0 and len(results) == RANKS
    check(f"{mode}.ran", ok, f"{RANKS} ranks, exit status {rc}, {secs:.1f} s")
    if not ok:
        print("---- the job's output (last 4000 characters)\n" + out[-4000:],
              flush=True)
        return None, None
    return results, status


def stop_job(p, outdir):
    """A job past its time: the launcher is asked to stop its ranks
    (SIGTERM), then it, its session and every rank that wrote its pid are
    killed, so that none holds a GPU for the tests after this one."""
    p.terminate()
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    pids = [p.pid]
    for r in range(RANKS):
        try:
            with open(os.path.join(outdir, f"rank{r}.pid")) as f:
                pid = int(f.read())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"test_ddp.py" in f.read():      # still that rank
                    pids.append(pid)
        except (OSError, ValueError):
            pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass


def norm_uuid(u):
    u = u.lower()
    return "".join(c for c in (u[4:] if u.startswith("gpu-") else u)
                   if c in "0123456789abcdef")


def check_same(plain, gpumem):
    for r in range(RANKS):
        a, b = plain[r], gpumem[r]
        same = a["losses"] == b["losses"]
        first = next((i for i, (x, y) in enumerate(zip(a["losses"],
                      b["losses"])) if x != y), None)
        last = float.fromhex(b["losses"][-1])
        if same:
            detail = f"{len(b['losses'])} steps, the last {last!r}"
        elif first is None:
            detail = (f"{len(a['losses'])} steps plain, "
                      f"{len(b['losses'])} on gpu-memd")
        else:
            detail = (f"first difference at step {first}: "
                      f"{a['losses'][first]} plain, {b['losses'][first]} "
                      "on gpu-memd")
        check(f"losses.rank{r}", same, detail)
        check(f"weights.rank{r}",
              (a["weights_sha256"], a["weights_sum"]) ==
              (b["weights_sha256"], b["weights_sum"]),
              f"sha256 {b['weights_sha256'][:16]}..., sum "
              f"{float.fromhex(b['weights_sum'])!r} (plain: "
              f"{a['weights_sha256'][:16]}..., "
              f"{float.fromhex(a['weights_sum'])!r})")
    for name, run in (("plain", plain), ("gpumem", gpumem)):
        check(f"weights.{name}.ranks_agree",
              len({run[r]["weights_sha256"] for r in range(RANKS)}) == 1,
              "every rank ends with the same parameters")


def check_devices(results, status):
    if status is None:
        status = {"error": "rank 0 wrote no buffers list"}
    if not check("devices.status", "error" not in status,
                 status.get("error", "rank 0 read gpu-memctl's buffers "
                            "list")):
        return
    vram = {p["device"]: p for p in status["pools"] if p["tier"] == "vram"}
    by_uuid = {norm_uuid(p.get("uuid", "")): d for d, p in vram.items()}
    print(f"  the daemon serves {len(vram)} GPUs: " + ", ".join(
        f"device {d} {p.get('uuid', '?')}" for d, p in sorted(vram.items())),
        flush=True)
    used = []
    for r in range(RANKS):
        res = results[r]
        want = by_uuid.get(norm_uuid(res["uuid"])) if res["uuid"] else None
        how = "by UUID"
        if want is None:
            # The daemon and the ranks see the same GPUs in the same order
            # here (one environment), so the ordinal says it as well.
            want = res["cuda"]
            how = ("by ordinal (its UUID matched none of the daemon's)"
                   if res["uuid"] else "by ordinal (torch gave no UUID)")
        on = {}
        for b in status.get("buffers", []):
            if b["pid"] == res["pid"]:
                on[b["device"]] = on.get(b["device"], 0) + b["size"]
        mine = on.pop(want, 0)
        if mine:
            used.append(want)
        check(f"devices.rank{r}",
              mine >= res["weight_bytes"] and not on,
              f"rank {r} (pid {res['pid']}) on cuda:{res['cuda']} "
              f"({res['uuid'] or '?'}), the daemon's device {want} {how}: "
              f"{mine / MiB:.0f} MiB of buffers there (weights "
              f"{res['weight_bytes'] / MiB:.0f} MiB); elsewhere: "
              f"{ {d: f'{n / MiB:.0f} MiB' for d, n in on.items()} or 'none'}")
        s = res.get("shim") or {}
        check(f"devices.rank{r}.through_daemon",
              s.get("allocs", 0) > 0 and
              s.get("bytes_held") == res["reserved"],
              f"the shim holds {s.get('bytes_held')} bytes in "
              f"{s.get('allocs')} allocations, PyTorch reserved "
              f"{res['reserved']}")
    check("devices.two_gpus", len(set(used)) == RANKS,
          f"the ranks' memory on the daemon's devices {used}, one each")
    # NCCL's own buffers do not go through the shim (see the top).
    print(f"note: NCCL {results[0]['nccl']}: its own buffers are allocated "
          "by libnccl (cuMem* or its own copy of the CUDA runtime), not "
          "through the cudaMalloc the shim answers, so they may bypass "
          "gpu-memd; the daemon counts them, with each process's CUDA "
          "context, as VRAM used outside it: " + ", ".join(
              f"device {d} {vram[d].get('unaccounted', 0) / MiB:.0f} MiB"
              for d in sorted(set(used)) if d in vram), flush=True)


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "rank":
        rank_main(sys.argv[2], sys.argv[3])
        return 0
    torch = gmd_gpu.cuda_torch("test_ddp.py", gpus=RANKS)
    if torch is None:
        return gmd_gpu.SKIP
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_nccl_available()):
        print("SKIP: test_ddp.py: this PyTorch has no NCCL", flush=True)
        return gmd_gpu.SKIP
    build = gmd_gpu.build_dir("test_ddp.py")
    if not build:
        return 2
    print(f"--- {RANKS} ranks of {torch.cuda.device_count()} GPUs, "
          f"{STEPS} steps", flush=True)
    print("--- plain", flush=True)
    plain, _ = run_job(build, "plain")
    daemon = gmd_gpu.Daemon(build, "--vram-limit", "4G", "--host-limit", "2G",
                            prefix="gmd-ddp-")
    try:
        print("--- gpu-memd (gpumem-run)", flush=True)
        gpumem, status = run_job(build, "gpumem", os.path.join(
            build, "client", "torch", "gpumem-run"))
        if plain and gpumem:
            check_same(plain, gpumem)
        if gpumem:
            check_devices(gpumem, status)
    finally:
        rc = daemon.stop(lines=30 if not gmd_gpu.failures else 80)
    check("daemon.stopped", rc == 0, f"gpu-memd exit status {rc}")
    return gmd_gpu.verdict("test_ddp.py")


if __name__ == "__main__":
    sys.exit(main())
