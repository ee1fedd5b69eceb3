"""gmd_gpu — what the Python GPU tests (tests/gpu/test_*.py) share: the
skip rule, the build's paths, a child process's environment, a gpu-memd
of the test's own, gpu-memctl's JSON, the line that says which GPU a test
about one device uses, and the PASS/FAIL lines.

scripts/gpu-suite.sh runs each test with the GPU machine's python3 from
the source tree (so this folder is first on sys.path) and sets GMD_BUILD
(the build folder) and GMD_DAEMON (gpu-memd, or the sandbox's wrapper of
it). A test exits SKIP (77) to be shown skipped, after one "SKIP:" line.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
MiB = 1 << 20
GiB = 1 << 30
SKIP = 77

failures = []


def check(name, ok, detail=""):
    """One "PASS name: detail" or "FAIL name: detail" line; a failure is
    counted for verdict()."""
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        failures.append(name)
    return ok


def verdict(test):
    """The last line, and the exit status: 1 when any check failed."""
    print(f"{test}: {len(failures)} failed {failures}", flush=True)
    return 1 if failures else 0


def cuda_torch(test, gpus=1):
    """torch, when it sees at least `gpus` CUDA devices; else None after
    the one SKIP line (the caller exits SKIP)."""
    try:
        import torch
    except ImportError as e:
        print(f"SKIP: {test}: {e}", flush=True)
        return None
    if not torch.cuda.is_available():
        print(f"SKIP: {test}: no PyTorch with a usable GPU", flush=True)
        return None
    n = torch.cuda.device_count()
    if n < gpus:
        print(f"SKIP: {test}: needs {gpus} GPUs, this process sees {n}",
              flush=True)
        return None
    return torch


_TRAIN = r"""
import sys, time, torch
torch.use_deterministic_algorithms(True)
torch.manual_seed(0)
dev = "cuda:0"
model = torch.nn.Sequential(
    torch.nn.Linear(8192, 8192), torch.nn.ReLU(),
    torch.nn.Linear(8192, 8192)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
gen = torch.Generator(device="cpu").manual_seed(1)
for step in range(int(sys.argv[1])):
    x = torch.randn(2048, 8192, generator=gen).to(dev)
    loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step} {loss.item().hex()}" + STAMP, flush=True)
    time.sleep(PAUSE_S)
total = sum(p.double().sum().item() for p in model.parameters())
print(f"weights {total.hex()}", flush=True)
"""


def train_script(stamped=False, pause_s=0.0):
    """The training job of the tests that run several (deterministic: a
    two-layer MLP of 8192 on cuda:0, SGD with momentum, about 1.3 GiB with
    its activations): ARGV[1] steps, each printing "step N LOSS" (the loss
    in hex; with `stamped`, then the monotonic time), `pause_s` between
    steps, and "weights SUM" at the end. Bit-identical runs print the
    same lines (but for the stamps)."""
    stamp = ' + f" {time.monotonic():.6f}"' if stamped else ' + ""'
    return _TRAIN.replace(" + STAMP", stamp).replace(
        "PAUSE_S", repr(float(pause_s)))


def build_dir(test):
    """$GMD_BUILD as an absolute path, or None after saying it is needed."""
    build = os.environ.get("GMD_BUILD")
    if not build:
        print(f"{test}: set GMD_BUILD to the build folder", file=sys.stderr)
        return None
    return os.path.abspath(build)


def child_env(build, extra=None):
    """The environment of a child Python process: the tree's package
    first on its path, the build's libgpumem and shim, unbuffered output,
    then `extra`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "client", "python") + \
        (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("GPUMEM_LIBRARY", os.path.join(build, "client",
                                                  "libgpumem.so.0"))
    env.setdefault("GPU_MEMD_TORCH_LIB", os.path.join(
        build, "client", "torch", "libgpumem_torch.so.0"))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def memctl(build, *args, sock=None):
    """`gpu-memctl --json ARGS` (on `sock`, else $GPU_MEMD_SOCKET) as a
    dict. Without LD_PRELOAD: a caller under gpumem-run passes the shim
    on to children, and gpu-memctl needs none of it."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    cmd = [os.path.join(build, "client", "gpu-memctl")]
    if sock:
        cmd += ["--socket", sock]
    out = subprocess.run(cmd + ["--json", *args], env=env,
                         capture_output=True, text=True, check=True,
                         timeout=60).stdout
    return json.loads(out)


class Daemon:
    """gpu-memd --backend cuda with `args` on a socket in a fresh temporary
    folder, its output in a log file there; started by the constructor,
    which returns once it accepts connections (RuntimeError, with the
    log's end, when it exits or does not accept within `timeout` s).
    It serves every GPU this process sees. Sets $GPU_MEMD_SOCKET, so
    children started afterwards find it."""

    def __init__(self, build, *args, prefix="gmd-gpu-", timeout=30):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.socket = os.path.join(self.dir, "sock")
        self.log_path = os.path.join(self.dir, "log")
        daemon = os.environ.get("GMD_DAEMON",
                                os.path.join(build, "daemon", "gpu-memd"))
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [daemon, "--backend", "cuda", "--socket", self.socket, *args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self._accepts():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop(lines=40)
                raise RuntimeError("gpu-memd did not start (its log is above)")
            time.sleep(0.02)
        os.environ["GPU_MEMD_SOCKET"] = self.socket

    def _accepts(self):
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
                s.connect(self.socket)
            return True
        except OSError:
            return False

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self, lines=40):
        """SIGTERM (SIGKILL after 30 s), then the log's last `lines` lines
        on stdout. The daemon's exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        tail = self.log().splitlines()[-lines:]
        print(f"---- gpu-memd log (last {len(tail)} lines)\n" +
              "".join("  | " + line + "\n" for line in tail), flush=True)
        return self.proc.returncode


def one_device(client, ordinal=0):
    """For a test about one device: the daemon's device that is this
    process's cuda:`ordinal` (by UUID), after one line saying which it is
    and how many the daemon serves, so that a log from a machine of
    several GPUs tells which one was tested."""
    d = client.device_from_cuda(ordinal)
    dev = client.devices[d]
    print(f"device: cuda:{ordinal}, the daemon's device {d} of "
          f"{client.device_count} ({dev.uuid}, PCI {dev.pci_bus_id}); this "
          "test uses no other", flush=True)
    return d
