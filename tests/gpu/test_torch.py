#!/usr/bin/env python3
"""test_torch.py — gpumem.torch on a real GPU (the GPU suite runs it).

Starts gpu-memd (cuda backend, a 4 GiB pool) and runs each case in fresh
Python processes, as a user would:
  threads     enable() at the top; a forward and backward pass; every byte
              PyTorch reserved came from gpu-memd, from more than one thread
              (autograd's backward thread); gpu-memctl shows the script's
              name, pid and bytes; cuda:N allocates on device N
  reexec      `import torch` before enable(): the program restarts with the
              shim preloaded and still allocates from gpu-memd
  launcher    gpumem-run python3 THIS child ...: no edit at all
  empty_cache torch.cuda.empty_cache() gives the segments back to the daemon
  idle_cache  gpumem.torch.idle() keeps PyTorch's unused cached segments
              while no other process waits for room, and gives them back
              to the daemon when one does (which is then served;
              release_cache=False keeps them); a tensor alive across it
              keeps its segment and its bytes
  oom         a deadline (GPU_MEMD_TORCH_TIMEOUT_MS) passes: the user gets
              torch.OutOfMemoryError whose message is the daemon's sentence
  visible     (two GPUs or more) a process under CUDA_VISIBLE_DEVICES
              naming the daemon's last GPU (N-1 of N, as Slurm or torchrun
              start jobs; its UUID where CUDA_VISIBLE_DEVICES is set
              already): its cuda:0 allocates on the daemon's device N-1,
              the GPU its kernels run on, and on no other (gpu-memctl's
              pools, with each device's UUID)
  three_procs the pool cannot hold three processes at once: a holder, then
              two that want more than is left (no deadline; the first with
              GPU_MEMD_PRIORITY=-10): both wait (gpu-memctl shows them
              waiting), none gets an OOM, the higher-priority one starts
              when the holder frees its memory (though it asked second) and
              the other when that one is done
Every case but `visible` and `threads` (64 MiB on each GPU) is about
cuda:0, the daemon's device 0 (the first line says which GPU that is).
Exit status 0 when all pass, 1 on a failure, 77 when there is no GPU or no
PyTorch with CUDA. Needs $GMD_BUILD (the build folder: daemon, gpu-memctl,
the shim), as scripts/gpu-suite.sh sets.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import gmd_gpu

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
GiB = 1 << 30
MiB = 1 << 20


def child_env(extra=None):
    env = dict(os.environ)
    if "GMD_BUILD" in env:
        env.setdefault("GPUMEM_LIBRARY", os.path.join(
            env["GMD_BUILD"], "client", "libgpumem.so.0"))
    env["PYTHONPATH"] = os.path.join(ROOT, "client", "python") + \
        (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def memctl_clients(build):
    out = subprocess.run([os.path.join(build, "client", "gpu-memctl"),
                          "--json", "clients"], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)


# ---- children: each runs in its own process -------------------------------

def child(mode):
    import gpumem.torch as gt
    if mode == "reexec":
        import torch  # noqa: F401  (loads the CUDA runtime first)
    if mode == "launcher" or os.environ.get("CHILD_UNDER_LAUNCHER"):
        gt._load(None, None)   # the preloaded shim, for its counters
    else:
        gt.enable()
    import torch
    result = {"mode": mode, "pid": os.getpid()}
    if mode in ("threads", "reexec", "launcher"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(1024, 4096), torch.nn.GELU(),
            torch.nn.Linear(4096, 1024)).cuda()
        x = torch.randn(256, 1024, device="cuda", requires_grad=True)
        loss = model(x).square().mean()
        loss.backward()
        torch.cuda.synchronize()
        s = gt.stats()
        result.update(stats=s, reserved=torch.cuda.memory_reserved(),
                      allocated=torch.cuda.memory_allocated(),
                      mem_get_info=list(torch.cuda.mem_get_info()),
                      num_alloc_retries=torch.cuda.memory_stats().get(
                          "num_alloc_retries", 0))
        devices = []
        for n in range(torch.cuda.device_count()):
            t = torch.empty(64 * MiB, dtype=torch.uint8, device=f"cuda:{n}")
            devices.append({"device": n, "ptr": t.data_ptr()})
            del t
        result["devices"] = devices
        result["clients"] = memctl_clients(os.environ["GMD_BUILD"])
    elif mode == "empty_cache":
        t = torch.empty(GiB, dtype=torch.uint8, device="cuda")
        t.fill_(1)
        del t
        before = gt.stats()["bytes_held"]
        clients_before = memctl_clients(os.environ["GMD_BUILD"])
        torch.cuda.empty_cache()
        result.update(held_before=before, held_after=gt.stats()["bytes_held"],
                      reserved_after=torch.cuda.memory_reserved(),
                      clients_before=clients_before,
                      clients_after=memctl_clients(os.environ["GMD_BUILD"]))
    elif mode == "idle_cache":
        keep = torch.full((MiB,), 7, dtype=torch.uint8, device="cuda")
        t = torch.empty(GiB, dtype=torch.uint8, device="cuda")
        t.fill_(1)
        del t
        held = [gt.stats()["bytes_held"]]
        with gt.idle():                 # nobody waits: kept
            held.append(gt.stats()["bytes_held"])
        waiter = subprocess.Popen(
            [sys.executable, "-c", WAITER, str(int(3.5 * GiB))],
            env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True)
        try:
            result["waiter_waits"] = wait_until_waiting(waiter.pid)
            with gt.idle(release_cache=False):
                held.append(gt.stats()["bytes_held"])
            with gt.idle():
                held.append(gt.stats()["bytes_held"])
                result["clients_idle"] = memctl_clients(
                    os.environ["GMD_BUILD"])
                result["waiter_served"] = waiter.stdout.readline().strip()
        finally:
            waiter.stdin.close()
            waiter.wait(timeout=30)
        t = torch.ones(GiB, dtype=torch.uint8, device="cuda")
        result.update(held=held, reserved_after=torch.cuda.memory_reserved(),
                      ones_after=bool(t.min().item() == 1),
                      keep_ok=bool((keep == 7).all().item()))
    elif mode == "visible":
        t = torch.empty(512 * MiB, dtype=torch.uint8, device="cuda:0")
        t.fill_(5)
        torch.cuda.synchronize()
        out = subprocess.run([os.path.join(os.environ["GMD_BUILD"], "client",
                                           "gpu-memctl"), "--json", "status"],
                             capture_output=True, text=True, check=True)
        result.update(device_count=torch.cuda.device_count(),
                      fives=bool((t == 5).all().item()),
                      pools=json.loads(out.stdout)["pools"],
                      stats=gt.stats())
    elif mode == "hold":
        size = int(os.environ["HOLD_BYTES"])
        t = torch.empty(size, dtype=torch.uint8, device="cuda")
        t.fill_(2)
        torch.cuda.synchronize()
        print("HOLDING", flush=True)
        sys.stdin.readline()            # until the test says "release"
        del t
        torch.cuda.empty_cache()
        result["released_at"] = time.time()
    elif mode == "want":
        size = int(os.environ["WANT_BYTES"])
        torch.cuda.init()
        print("ASKING", flush=True)
        start = time.time()
        try:
            t = torch.empty(size, dtype=torch.uint8, device="cuda")
            t.fill_(3)
            torch.cuda.synchronize()
            result.update(ok=True, got_at=time.time(), stats=gt.stats())
            time.sleep(float(os.environ.get("WANT_KEEP_SECONDS", "0")))
            del t
            torch.cuda.empty_cache()
            result["released_at"] = time.time()
        except torch.OutOfMemoryError as e:
            result.update(ok=False, error_type=type(e).__name__,
                          message=str(e), last_error=gt.last_error())
        result["seconds"] = time.time() - start
    print("RESULT " + json.dumps(result), flush=True)


def run_child(mode, extra_env=None, launcher=None):
    cmd = [sys.executable, os.path.abspath(__file__), "child", mode]
    if launcher:
        cmd = [launcher] + cmd
    p = subprocess.run(cmd, env=child_env(extra_env), capture_output=True,
                       text=True, timeout=240)
    return parse_child(p.returncode, p.stdout, p.stderr, mode)


def parse_child(rc, out, err, mode):
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:]), out + err
    raise AssertionError(f"child {mode} exited {rc} without a result:\n"
                         f"{out}\n{err}")


# ---- the cases --------------------------------------------------------------

failures = []


def check(name, cond, detail):
    print(f"{'ok' if cond else 'FAIL'} {name}: {detail}", flush=True)
    if not cond:
        failures.append(name)


def case_threads(mode, launcher=None):
    r, log = run_child(mode, launcher=launcher)
    s = r["stats"]
    print(f"  {mode}: stats {s}, reserved {r['reserved']}, "
          f"mem_get_info {r['mem_get_info']}", flush=True)
    check(f"{mode}.all_reserved_from_daemon",
          s["bytes_held"] == r["reserved"] and s["allocs"] > 0,
          f"shim holds {s['bytes_held']} bytes, PyTorch reserved {r['reserved']}")
    if mode == "threads":
        check("threads.backward_thread", s["threads"] >= 2,
              f"{s['threads']} threads called cudaMalloc")
    me = [c for c in r["clients"]["clients"] if c.get("pid") == r["pid"]]
    name = me[0].get("name") if me else None
    check(f"{mode}.memctl_name", name == "test_torch.py",
          f"gpu-memctl shows pid {r['pid']} as {name!r}"
          f" with {me[0].get('bytes') if me else None} bytes")
    check(f"{mode}.mem_get_info_is_pool", r["mem_get_info"][1] == 4 * GiB,
          f"torch.cuda.mem_get_info() = {r['mem_get_info']}")
    if mode == "threads":
        check("threads.devices", len(r["devices"]) >= 1,
              f"allocated on {[d['device'] for d in r['devices']]}")


def case_empty_cache():
    r, log = run_child("empty_cache")
    check("empty_cache.returns_segments",
          r["held_before"] >= GiB and r["held_after"] == r["reserved_after"]
          and r["held_after"] < 64 * MiB,
          f"held {r['held_before']} -> {r['held_after']} bytes "
          f"(reserved after {r['reserved_after']})")
    me = [c for c in r["clients_after"]["clients"] if c.get("pid") == r["pid"]]
    was = [c for c in r["clients_before"]["clients"] if c.get("pid") == r["pid"]]
    check("empty_cache.daemon_sees_it",
          bool(me and was) and was[0]["bytes"] >= GiB and me[0]["bytes"] < 64 * MiB,
          f"gpu-memctl bytes {was[0]['bytes'] if was else None} -> "
          f"{me[0]['bytes'] if me else None}")


# Another process's allocation that waits for room (up to 60 s), then says
# so and holds it until its stdin closes.
WAITER = (
    "import sys, gpumem\n"
    "b = gpumem.Client(name='waiter').alloc(int(sys.argv[1]), timeout=60)\n"
    "print('served', flush=True)\n"
    "sys.stdin.read()\n")


def case_idle_cache():
    r, log = run_child("idle_cache")
    held = r["held"]
    check("idle_cache.kept_while_nobody_waits",
          held[0] >= GiB and held[1] == held[0],
          f"held {held[0]} bytes, {held[1]} in idle() with nobody waiting")
    check("idle_cache.kept_without_release_cache",
          r["waiter_waits"] and held[2] == held[0],
          f"another process waits: {r['waiter_waits']}; held {held[2]} "
          "bytes in idle(release_cache=False)")
    check("idle_cache.given_back_when_another_waits",
          MiB <= held[3] < 64 * MiB and r["waiter_served"] == "served",
          f"held {held[3]} bytes in idle() (a live 1 MiB tensor kept); "
          f"the waiter: {r['waiter_served']!r}")
    me = [c for c in r["clients_idle"]["clients"] if c.get("pid") == r["pid"]]
    check("idle_cache.daemon_sees_it", bool(me) and me[0]["bytes"] < 64 * MiB,
          f"gpu-memctl bytes in idle() {me[0]['bytes'] if me else None}")
    check("idle_cache.allocates_after", r["ones_after"] and
          r["keep_ok"] and r["reserved_after"] >= GiB,
          f"a new 1 GiB tensor filled {r['ones_after']}, the live tensor "
          f"intact {r['keep_ok']}")


def start_child(mode, env):
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "child",
                          mode], env=child_env(env), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    line = p.stdout.readline()
    if "HOLDING" not in line and "ASKING" not in line:
        raise AssertionError(f"{mode} did not start: {line}{p.stderr.read()}")
    return p


def finish_child(p, mode, say=""):
    out, err = p.communicate(say, timeout=120)
    r, _ = parse_child(p.returncode, out, err, mode)
    return r


def wait_until_waiting(pid, timeout=30):
    """Until gpu-memctl shows client `pid` with an allocation waiting."""
    end = time.time() + timeout
    while time.time() < end:
        for c in memctl_clients(os.environ["GMD_BUILD"])["clients"]:
            if c.get("pid") == pid and c.get("waiting", 0) > 0:
                return True
        time.sleep(0.1)
    return False


def case_oom():
    holder = start_child("hold", {"HOLD_BYTES": str(3 * GiB)})
    r, log = run_child("want", {"WANT_BYTES": str(2 * GiB),
                                "GPU_MEMD_TORCH_TIMEOUT_MS": "1500"})
    finish_child(holder, "hold", "release\n")
    print("  the user sees: " + repr(r.get("message")), flush=True)
    check("oom.raised", not r.get("ok") and r.get("error_type") == "OutOfMemoryError",
          f"{r.get('error_type')} after {r['seconds']:.2f} s")
    check("oom.after_deadline", 1.4 <= r["seconds"] < 6,
          f"{r['seconds']:.2f} s for a 1500 ms deadline")
    check("oom.daemon_sentence", "gpu-memd: waited" in (r.get("message") or ""),
          "the message carries the daemon's sentence")


def case_oom_launcher(launcher):
    holder = start_child("hold", {"HOLD_BYTES": str(3 * GiB)})
    cmd = [launcher, "--timeout", "1000", sys.executable,
           os.path.abspath(__file__), "child", "want"]
    p = subprocess.run(cmd, env=child_env({"WANT_BYTES": str(2 * GiB),
                                           "CHILD_UNDER_LAUNCHER": "1"}),
                       capture_output=True, text=True, timeout=240)
    finish_child(holder, "hold", "release\n")
    r, _ = parse_child(p.returncode, p.stdout, p.stderr, "want")
    line = [l for l in p.stderr.splitlines() if l.startswith("gpu-memd: ")]
    print("  under gpumem-run the user sees on stderr: " + repr(line), flush=True)
    print("  and then: torch.OutOfMemoryError: " + repr(r.get("message")), flush=True)
    check("oom_launcher.raised", r.get("error_type") == "OutOfMemoryError",
          f"{r.get('error_type')} after {r['seconds']:.2f} s (deadline 1000 ms)")
    check("oom_launcher.stderr_sentence",
          any("gpu-memd: waited" in l for l in line), "the daemon's sentence on stderr")


def case_three_procs():
    holder = start_child("hold", {"HOLD_BYTES": str(3 * GiB)})
    low = start_child("want", {"WANT_BYTES": str(3 * GiB),
                               "GPU_MEMD_PRIORITY": "-10",
                               "WANT_KEEP_SECONDS": "1"})
    low_waits = wait_until_waiting(low.pid)
    high = start_child("want", {"WANT_BYTES": str(3 * GiB),
                                "WANT_KEEP_SECONDS": "1"})
    high_waits = wait_until_waiting(high.pid)
    time.sleep(0.5)
    released = time.time()
    finish_child(holder, "hold", "release\n")
    h = finish_child(high, "want")
    lo = finish_child(low, "want")
    check("three_procs.both_wait", low_waits and high_waits,
          f"gpu-memctl showed them waiting: low {low_waits}, high {high_waits}")
    check("three_procs.no_oom", h.get("ok") and lo.get("ok"),
          f"high {h.get('ok')} {h.get('message', '')}, low {lo.get('ok')} "
          f"{lo.get('message', '')}")
    if h.get("ok") and lo.get("ok"):
        first, second = (h, lo) if h["got_at"] < lo["got_at"] else (lo, h)
        check("three_procs.start_when_room_appears",
              first["got_at"] >= released - 0.05 and
              second["got_at"] >= first["released_at"] - 0.05 and
              first["stats"]["waits"] >= 1 and second["stats"]["waits"] >= 1,
              f"holder freed at 0; {'high' if first is h else 'low'} priority "
              f"started at {first['got_at'] - released:+.2f} s, freed at "
              f"{first['released_at'] - released:+.2f} s; "
              f"{'low' if first is h else 'high'} started at "
              f"{second['got_at'] - released:+.2f} s (the low one asked first)")
        check("three_procs.priority_first", first is h,
              f"the {'high' if first is h else 'low'}-priority process started "
              f"first (the low one asked first)")


def vram_pools():
    """The daemon's VRAM pools (gpu-memctl status), by device."""
    status = gmd_gpu.memctl(os.environ["GMD_BUILD"], "status")
    return sorted((p for p in status["pools"] if p["tier"] == "vram"),
                  key=lambda p: p["device"])


def case_visible():
    import torch
    if torch.cuda.device_count() < 2:
        print("skip visible: one GPU", flush=True)
        return
    last = vram_pools()[-1]
    target = last["device"]
    # By index, as a job is started: the daemon's device k is CUDA's k here
    # (one environment). Under a CUDA_VISIBLE_DEVICES of the machine's an
    # index would count from another list than the daemon's: the UUID then.
    visible = last.get("uuid") if os.environ.get("CUDA_VISIBLE_DEVICES") \
        else str(target)
    r, log = run_child("visible", {"CUDA_VISIBLE_DEVICES": visible})
    used = {p["device"]: p["used"] for p in r["pools"] if p["tier"] == "vram"}
    uuids = [p.get("uuid", "") for p in r["pools"] if p["tier"] == "vram"]
    check("visible.sees_one", r["device_count"] == 1,
          f"torch.cuda.device_count() {r['device_count']} under "
          f"CUDA_VISIBLE_DEVICES={visible}")
    check("visible.on_its_gpu",
          used.get(target, 0) >= 512 * MiB and
          all(n < 512 * MiB for d, n in used.items() if d != target),
          f"the daemon's VRAM used by device: {used} (cuda:0 of the job is "
          f"the daemon's device {target}, the last of {len(used)})")
    check("visible.kernels", r["fives"], "the tensor reads back what cuda:0 "
          "wrote")
    check("visible.uuids", all(u.startswith("GPU-") for u in uuids),
          f"gpu-memctl status names the devices: {uuids}")


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "child":
        child(sys.argv[2])
        return 0
    if gmd_gpu.cuda_torch("test_torch.py") is None:
        return gmd_gpu.SKIP
    build = gmd_gpu.build_dir("test_torch.py")
    if not build:
        return 2
    os.environ.setdefault("GPU_MEMD_TORCH_LIB", os.path.join(
        build, "client", "torch", "libgpumem_torch.so.0"))
    tmp = tempfile.mkdtemp(prefix="gmd-torch-")
    sock = os.path.join(tmp, "sock")
    log = open(os.path.join(tmp, "log"), "w")
    daemon = subprocess.Popen(
        [os.environ.get("GMD_DAEMON", os.path.join(build, "daemon", "gpu-memd")),
         "--backend", "cuda", "--socket", sock, "--vram-limit", "4G",
         "--host-limit", "2G"], stdout=log, stderr=subprocess.STDOUT)
    os.environ["GPU_MEMD_SOCKET"] = sock
    # up to 30 s: the daemon listens once every GPU is open (more on more)
    for _ in range(3000):
        if os.path.exists(sock):
            break
        time.sleep(0.01)
    time.sleep(0.2)
    try:
        try:
            pools = vram_pools()
            print(f"device: cuda:0, the daemon's device 0 of {len(pools)} "
                  f"({pools[0].get('uuid')}): every case but visible and "
                  "threads is about it", flush=True)
        except (OSError, ValueError, IndexError,
                subprocess.SubprocessError) as e:
            print(f"device: cuda:0 (gpu-memctl status: {e})", flush=True)
        for name, fn in (("threads", lambda: case_threads("threads")),
                         ("reexec", lambda: case_threads("reexec")),
                         ("launcher", lambda: case_threads(
                             "launcher", os.path.join(build, "client", "torch",
                                                      "gpumem-run"))),
                         ("empty_cache", case_empty_cache),
                         ("idle_cache", case_idle_cache),
                         ("oom", case_oom),
                         ("oom_launcher", lambda: case_oom_launcher(
                             os.path.join(build, "client", "torch", "gpumem-run"))),
                         ("visible", case_visible),
                         ("three_procs", case_three_procs)):
            try:
                fn()
            except Exception as e:  # one case's crash must not hide the rest
                check(name, False, f"{type(e).__name__}: {e}")
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        log.close()
        with open(os.path.join(tmp, "log")) as f:
            print("---- gpu-memd log\n" + "".join("  | " + l for l in f))
    print(f"test_torch.py: {len(failures)} failed {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
