#!/usr/bin/env python3
"""restart_bench.py — how long a gpu-memd restart keeps its clients waiting.

One client holds BUFFERS buffers (default 1,000 of 64 MiB), most of them
paged out to host memory (default 50 GiB), and keeps acquiring and
releasing one of its VRAM buffers in a loop, noting when each acquire
returns. gpu-memd (its state kept by a keeper process, [restart] keep =
keeper) is killed with SIGKILL and started again at once. Measured:

  ready_ms     kill to the new daemon's "ready:" line (start, CUDA, the
               host arena's pieces mapped again, the record read)
  record_ms    the daemon's "took over the state ... in N ms": the record
               read and every kept allocation adopted (pieces_ms: the
               host arenas' pieces mapped again; buffers_memory_ms: the
               buffers' host copies and kept VRAM)
  restore_ms   the daemon's own "restore done in N ms" (start to the last
               claim in)
  working_ms   kill to the client's first acquire that returns afterwards:
               the client working again (the target: under 2 s)
  back_ms      then one acquire of a buffer that was on host memory (its
               swap-in from the kept arena)
Every buffer must be taken back (the log's "N of N buffer(s) taken back").
Prints one JSON object (also to --json FILE).

  GMD_BUILD=build-gpu python3 bench/restart_bench.py [--buffers N]
      [--size-mib M] [--host-gib G] [--backend cuda|sim] [--json FILE]

On cuda it uses one GPU, $GMD_BENCH_DEVICE (default 0), for the daemon and
the client alike: [pools] host_stock is per device.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))

CHILD = r"""
import os, sys, time
sys.path.insert(0, os.environ["GMD_PY"])
import gpumem
n, size, out_n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
c = gpumem.Client(name="restart-bench")
bufs = [c.alloc(size, timeout=600) for _ in range(n)]
for b in bufs:
    b.release()
c.pageout(*bufs[:out_n], wait=True)
probe = bufs[-1]
print("READY", flush=True)
stamps = open(sys.argv[4], "w", buffering=1)
while not os.path.exists(sys.argv[5]):
    probe.acquire(timeout=120)
    probe.release()
    stamps.write(f"{time.monotonic():.6f}\n")
    time.sleep(0.001)
t = time.monotonic()
bufs[0].acquire(timeout=120)          # was on host: swapped in
bufs[0].release()
print(f"BACK {time.monotonic() - t:.6f}", flush=True)
for b in bufs:
    b.free()
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--buffers", type=int, default=1000)
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--host-gib", type=float, default=50)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--json")
    args = ap.parse_args()
    build = os.environ.get("GMD_BUILD", os.path.join(ROOT, "build"))
    size = args.size_mib << 20
    out_n = min(args.buffers - 1, int(args.host_gib * (1 << 30)) // size)
    vram = (args.buffers + 8) * size       # all allocated in VRAM first
    host = out_n * size + (4 << 30)
    tmp = tempfile.mkdtemp(prefix="gmd-restart-bench-")
    sock, conf = os.path.join(tmp, "sock"), os.path.join(tmp, "conf")
    with open(conf, "w") as f:
        f.write(f"[pools]\nvram_limit = {vram >> 20}M\nhost_limit = {host >> 20}M\n"
                f"host_stock = {(out_n * size) >> 20}M\n"
                "[restart]\nkeep = keeper\nhold_s = 120\nclaim_timeout_s = 60\n")
        if args.backend == "sim":
            f.write(f"[sim]\nvram = {(vram + (1 << 30)) >> 20}M\n")
    logpath = os.path.join(tmp, "log")
    log = open(logpath, "w")
    daemon_bin = os.environ.get("GMD_DAEMON", os.path.join(build, "daemon", "gpu-memd"))

    # One device: [pools] host_stock is per device, and on a machine of
    # several GPUs every device's arena would share host_limit.
    denv = dict(os.environ)
    if args.backend == "cuda":
        denv["CUDA_VISIBLE_DEVICES"] = os.environ.get("GMD_BENCH_DEVICE", "0")

    def start():
        n0 = open(logpath).read().count("ready: ")
        d = subprocess.Popen([daemon_bin, "--backend", args.backend, "--socket", sock,
                              "--config", conf], stdout=log, stderr=subprocess.STDOUT,
                             env=denv)
        while open(logpath).read().count("ready: ") == n0:
            if d.poll() is not None:
                raise SystemExit(f"gpu-memd exited {d.returncode}:\n" +
                                 open(logpath).read()[-3000:])
            time.sleep(0.002)
        return d, time.monotonic()

    daemon, _ = start()
    env = dict(denv, GPU_MEMD_SOCKET=sock, GMD_PY=os.path.join(ROOT, "client", "python"),
               GPUMEM_LIBRARY=os.path.join(build, "client", "libgpumem.so.0"),
               GPU_MEMD_CACHE="0")
    # Libraries the GPU machine lacks, copied by scripts/gpu-suite.sh prepare.
    if os.path.isdir(os.path.join(build, "lib")):
        env["LD_LIBRARY_PATH"] = os.path.join(build, "lib") + \
            (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    stamps, stop = os.path.join(tmp, "stamps"), os.path.join(tmp, "stop")
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(args.buffers), str(size),
                              str(out_n), stamps, stop], env=env, stdout=subprocess.PIPE,
                             text=True)
    line = child.stdout.readline()
    if not line.startswith("READY"):
        raise SystemExit("the client did not get ready: " + line)
    time.sleep(0.5)
    t_kill = time.monotonic()
    daemon.send_signal(signal.SIGKILL)
    daemon.wait()
    daemon, t_ready = start()
    working = None
    deadline = time.monotonic() + 60
    while working is None and time.monotonic() < deadline:
        with open(stamps) as f:
            after = [float(x) for x in f.read().split() if float(x) > t_kill]
        if after:
            working = after[0]
        else:
            time.sleep(0.005)
    open(stop, "w").close()
    back = None
    for line in child.stdout:
        if line.startswith("BACK"):
            back = float(line.split()[1])
    child.wait(timeout=120)
    time.sleep(0.2)
    daemon.send_signal(signal.SIGINT)
    daemon.wait(timeout=60)
    log.close()
    text = open(logpath).read()
    m = re.search(r"restore done in (\d+) ms: (\d+) of (\d+) buffer", text)
    took = re.search(r"took over the state .* in (\d+) ms", text)
    parts = re.search(r"host arena pieces (\d+) ms, buffers' memory (\d+) ms", text)
    result = {
        "backend": args.backend, "buffers": args.buffers, "buffer_bytes": size,
        "host_bytes": out_n * size, "vram_bytes": (args.buffers - out_n) * size,
        "ready_ms": round((t_ready - t_kill) * 1000, 1),
        "record_ms": int(took.group(1)) if took else None,
        "pieces_ms": int(parts.group(1)) if parts else None,
        "buffers_memory_ms": int(parts.group(2)) if parts else None,
        "restore_ms": int(m.group(1)) if m else None,
        "buffers_back": int(m.group(2)) if m else None,
        "working_ms": round((working - t_kill) * 1000, 1) if working else None,
        "back_ms": round(back * 1000, 1) if back is not None else None,
        "client_rc": child.returncode,
        # the backend's own line on the pieces (threads, map and access)
        "pieces_line": (re.search(r"adopted \d+ host arena pieces[^\n]*",
                                  text) or [None])[0],
    }
    result["ok"] = bool(m and int(m.group(2)) == int(m.group(3)) == args.buffers and
                        working and child.returncode == 0)
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if not result["ok"]:
        print(text[-4000:], file=sys.stderr)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
