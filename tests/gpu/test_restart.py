#!/usr/bin/env python3
"""test_restart.py — PyTorch training rides through a gpu-memd kill (GPU suite).

Two unmodified training scripts (an MLP of 0.5 GiB of weights, SGD with
momentum, deterministic algorithms) run under gpumem-run on a gpu-memd
whose pool holds about 1.5 of their working sets, so part of their memory
is lent out to host memory while they take turns. Midway, gpu-memd is
killed with SIGKILL and started again a second later on the same socket,
with its state kept by a keeper process ([restart] keep = keeper). Both
jobs must finish with losses bit-identical to the same script run without
gpu-memd (float.hex of every step's loss and of the weights' checksum).

Prints the host bytes the jobs had at the kill, the time from the kill to
the first step either job finished after it, and the restore's own figures
from the log. Exit 0 on success, 1 on a failure, 77 without a GPU or
PyTorch with CUDA. Needs $GMD_BUILD (the build folder), as
scripts/gpu-suite.sh sets.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import gmd_gpu

STEPS = 40
KILL_AT = 12


def env_for(build, extra=None):
    return gmd_gpu.child_env(build, {"CUBLAS_WORKSPACE_CONFIG": ":4096:8",
                                     **(extra or {})})


def start_daemon(build, sock, conf, log):
    d = subprocess.Popen(
        [os.environ.get("GMD_DAEMON", os.path.join(build, "daemon", "gpu-memd")),
         "--backend", "cuda", "--socket", sock, "--config", conf],
        stdout=log, stderr=subprocess.STDOUT)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30:
        with open(log.name) as f:
            if f.read().count("ready: serving") > start_daemon.readies:
                start_daemon.readies += 1
                return d
        if d.poll() is not None:
            raise RuntimeError(f"gpu-memd exited ({d.returncode}) at start")
        time.sleep(0.02)
    raise RuntimeError("gpu-memd not ready within 30 s")


start_daemon.readies = 0


def parse(out):
    steps, weights = [], None
    for line in out.splitlines():
        m = re.match(r"step (\d+) (\S+) (\S+)", line)
        if m:
            steps.append((int(m.group(1)), m.group(2), float(m.group(3))))
        elif line.startswith("weights "):
            weights = line.split()[1]
    return steps, weights


def main():
    torch = gmd_gpu.cuda_torch("test_restart.py")
    if torch is None:
        return gmd_gpu.SKIP
    build = gmd_gpu.build_dir("test_restart.py")
    if not build:
        return 2
    print(f"device: both jobs train on cuda:0 of the "
          f"{torch.cuda.device_count()} GPUs the daemon serves (its device "
          "0: they see the GPUs alike)", flush=True)
    tmp = tempfile.mkdtemp(prefix="gmd-restart-")
    script = os.path.join(tmp, "train.py")
    with open(script, "w") as f:
        f.write(gmd_gpu.train_script(stamped=True, pause_s=0.05))

    # The plain run: no gpu-memd.
    plain = subprocess.run([sys.executable, script, str(STEPS)], env=env_for(build),
                           capture_output=True, text=True, timeout=600)
    if plain.returncode != 0:
        print("FAIL: the plain run failed:\n" + plain.stderr[-2000:])
        return 1
    want_steps, want_weights = parse(plain.stdout)

    sock = os.path.join(tmp, "sock")
    conf = os.path.join(tmp, "gpu-memd.conf")
    with open(conf, "w") as f:
        f.write("[pools]\nvram_limit = 2560M\nhost_limit = 16G\n"
                "[restart]\nkeep = keeper\nhold_s = 120\nclaim_timeout_s = 60\n")
    log = open(os.path.join(tmp, "log"), "w")
    failures = []
    daemon = start_daemon(build, sock, conf, log)
    env = env_for(build, {"GPU_MEMD_SOCKET": sock})
    run = os.path.join(build, "client", "torch", "gpumem-run")
    jobs = [subprocess.Popen([run, sys.executable, script, str(STEPS)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    outs = ["", ""]
    killed_at = None
    host_at_kill = None
    try:
        # Read both until one reaches KILL_AT steps.
        import selectors
        sel = selectors.DefaultSelector()
        for i, j in enumerate(jobs):
            sel.register(j.stdout, selectors.EVENT_READ, i)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and any(j.poll() is None for j in jobs):
            for key, _ in sel.select(timeout=1):
                line = key.fileobj.readline()
                if not line:
                    sel.unregister(key.fileobj)
                    continue
                outs[key.data] += line
                if killed_at is None and line.startswith(f"step {KILL_AT} "):
                    st = subprocess.run(
                        [os.path.join(build, "client", "gpu-memctl"), "--socket",
                         sock, "--json", "status"], capture_output=True, text=True)
                    try:
                        host_at_kill = sum(c.get("host_bytes", 0) for c in
                                           json.loads(st.stdout).get("clients", []))
                    except ValueError:
                        host_at_kill = None
                    daemon.send_signal(signal.SIGKILL)
                    daemon.wait()
                    killed_at = time.monotonic()
                    print(f"gpu-memd killed at step {KILL_AT}; the jobs had "
                          f"{host_at_kill} bytes on host memory", flush=True)
                    time.sleep(1.0)
                    daemon = start_daemon(build, sock, conf, log)
        for i, j in enumerate(jobs):
            rest, err = j.communicate(timeout=600)
            outs[i] += rest
            if j.returncode != 0:
                failures.append(f"job {i} exited {j.returncode}: {err[-1500:]}")
    finally:
        for j in jobs:
            if j.poll() is None:
                j.kill()
        daemon.send_signal(signal.SIGINT)   # for good: the keeper goes too
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()

    if killed_at is None:
        failures.append("no job reached the step to kill at")
    first_after = None
    for i in range(2):
        steps, weights = parse(outs[i])
        got = [(s, h) for s, h, _ in steps]
        want = [(s, h) for s, h, _ in want_steps]
        if got != want:
            failures.append(f"job {i}: losses differ from the plain run "
                            f"({len(got)} steps against {len(want)})")
        if weights != want_weights:
            failures.append(f"job {i}: weights {weights} against {want_weights}")
        if killed_at is not None:
            after = [t for _, _, t in steps if t > killed_at]
            if after and (first_after is None or after[0] < first_after):
                first_after = after[0]
    with open(os.path.join(tmp, "log")) as f:
        text = f.read()
    for line in text.splitlines():
        if "restart:" in line or "restore" in line:
            print("  | " + line)
    if first_after is not None:
        print(f"first step finished {first_after - killed_at:.3f} s after the kill "
              f"(1 s of it the daemon was down)")
    if host_at_kill is not None and host_at_kill == 0:
        print("note: no bytes were on host memory at the kill")
    if failures:
        print("---- gpu-memd log (last 60 lines)\n" +
              "".join("  | " + l + "\n" for l in text.splitlines()[-60:]))
    print(f"test_restart.py: {len(failures)} failed {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
