#!/usr/bin/env python3
"""test_peer.py — the peer tier under PyTorch (GPU suite, two GPUs).

Two unmodified training scripts (an MLP of 0.5 GiB of weights, SGD with
momentum, deterministic algorithms) run under gpumem-run on cuda:0 of a
gpu-memd that serves every GPU, whose pools (2.5 GiB each) hold about 1.5
of their working sets, so part of their memory is lent out while they take
turns. GPU 1 runs nothing: with [pools] peer_tier = on, what leaves GPU 0
goes to GPU 1's free VRAM. Checked:

  - both jobs finish with losses and weights bit-identical to the same
    script run without gpu-memd;
  - GPU 1's pool held the jobs' bytes while they ran (status, sampled),
    and nothing once they are done;
  - the daemon logged the peer link it measured.

A second run with peer_tier = off is the reference for where the bytes
went (host memory) and how long the jobs took; both times are printed.
Exit 0 on success, 1 on a failure, 77 with fewer than two GPUs. Needs
$GMD_BUILD (the build folder), as scripts/gpu-suite.sh sets.
"""

import os
import subprocess
import sys
import tempfile
import threading
import time

import gmd_gpu as g

STEPS = 30


def results(out):
    return [line for line in out.splitlines()
            if line.startswith("step ") or line.startswith("weights ")]


def run_jobs(build, script, mode):
    """Both jobs under a daemon with peer_tier = `mode`: (outputs, seconds,
    the most bytes seen on GPU 1's pool, GPU 1's bytes at the end, log)."""
    d = g.Daemon(build, "--vram-limit", "2560M", "--host-limit", "16G",
                 "--config", conf_file(mode), prefix="gmd-peer-")
    env = g.child_env(build, {"GPU_MEMD_SOCKET": d.socket,
                              "CUBLAS_WORKSPACE_CONFIG": ":4096:8"})
    run = os.path.join(build, "client", "torch", "gpumem-run")
    most, stop = [0], threading.Event()

    def sample():
        while not stop.is_set():
            try:
                st = g.memctl(build, "status", sock=d.socket)
                for p in st.get("pools", []):
                    if p.get("tier") == "vram" and p.get("device") == 1:
                        most[0] = max(most[0], p.get("peer_held", 0))
            except Exception:
                pass
            stop.wait(0.2)

    t = threading.Thread(target=sample, daemon=True)
    t0 = time.monotonic()
    jobs = [subprocess.Popen([run, sys.executable, script, str(STEPS)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    t.start()
    outs = []
    for j in jobs:
        try:
            out, err = j.communicate(timeout=400)
        except subprocess.TimeoutExpired:
            j.kill()
            out, err = j.communicate()
        if j.returncode != 0:
            print(f"job exited {j.returncode}: {err[-1500:]}", flush=True)
        outs.append(out)
    seconds = time.monotonic() - t0
    stop.set()
    t.join()
    end = 0
    for p in g.memctl(build, "status", sock=d.socket).get("pools", []):
        if p.get("tier") == "vram" and p.get("device") == 1:
            # What it keeps for the next swap-outs is no buffer's.
            end = p.get("peer_held", 0)
    log = d.log()
    d.stop(lines=25)
    return outs, seconds, most[0], end, log


CONF_DIR = tempfile.mkdtemp(prefix="gmd-peer-conf-")


def conf_file(mode):
    path = os.path.join(CONF_DIR, f"peer-{mode}.conf")
    with open(path, "w") as f:
        f.write(f"[pools]\npeer_tier = {mode}\npeer_headroom = 256M\n")
    return path


def main():
    torch = g.cuda_torch("test_peer.py", gpus=2)
    if torch is None:
        return g.SKIP
    build = g.build_dir("test_peer.py")
    if build is None:
        return 2
    print(f"device: both jobs train on cuda:0 of {torch.cuda.device_count()} "
          "GPUs; GPU 1 (cuda:1) holds only what the peer tier puts there",
          flush=True)
    script = os.path.join(CONF_DIR, "train.py")
    with open(script, "w") as f:
        f.write(g.train_script())
    plain = subprocess.run([sys.executable, script, str(STEPS)],
                           env=g.child_env(build, {"CUBLAS_WORKSPACE_CONFIG":
                                                   ":4096:8"}),
                           capture_output=True, text=True, timeout=600)
    if not g.check("plain.ran", plain.returncode == 0, plain.stderr[-500:]):
        return g.verdict("test_peer.py")
    want = results(plain.stdout)

    outs, secs, most, end, log = run_jobs(build, script, "on")
    for i, out in enumerate(outs):
        g.check(f"peer.job{i}.bit_identical", results(out) == want,
                f"{len(results(out))} result lines against {len(want)}")
    g.check("peer.link_measured", "peer tier: device 0 reaches device 1" in log,
            next((l for l in log.splitlines() if "copies into device 1" in l),
                 "no peer link line"))
    g.check("peer.used", most >= 256 * g.MiB,
            f"GPU 1's pool held up to {most / g.MiB:.0f} MiB of the jobs' "
            "buffers while they ran")
    g.check("peer.empty_after", end == 0,
            f"{end / g.MiB:.0f} MiB of the jobs' buffers on GPU 1 once both "
            "jobs ended")

    outs_off, secs_off, most_off, _, _ = run_jobs(build, script, "off")
    for i, out in enumerate(outs_off):
        g.check(f"host.job{i}.bit_identical", results(out) == want,
                f"{len(results(out))} result lines against {len(want)}")
    g.check("host.no_peer", most_off == 0,
            f"GPU 1's pool held up to {most_off / g.MiB:.0f} MiB with the "
            "peer tier off")
    print(f"both jobs, {STEPS} steps: {secs:.1f} s with the peer tier, "
          f"{secs_off:.1f} s through host memory", flush=True)
    return g.verdict("test_peer.py")


if __name__ == "__main__":
    sys.exit(main())
