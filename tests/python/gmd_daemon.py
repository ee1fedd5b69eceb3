"""gmd_daemon — the real gpu-memd for the Python tests, as
tests/integration/harness.c starts it: the sim backend on a socket in a
fresh temporary directory, with a config of the test's own and its log in a
file. Daemon and child clients get PR_SET_PDEATHSIG (through setpriv), so a
test process that dies takes them with it. stop() wants exit status 0 from
SIGTERM, as the C harness does.

The paths of what is tested come from ctest (tests/python/CMakeLists.txt):
GMD_DAEMON (gpu-memd), GPUMEM_LIBRARY (libgpumem.so), PYTHONPATH (the
package in client/python).
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

MiB = 1 << 20
DAEMON = os.environ.get("GMD_DAEMON", "build/daemon/gpu-memd")
SETPRIV = shutil.which("setpriv")


def with_pdeathsig(argv):
    return [SETPRIV, "--pdeathsig", "KILL", "--"] + argv if SETPRIV else argv


class Daemon:
    """gpu-memd --backend sim (or `backend`) on DIR/gpu-memd.sock."""

    def __init__(self, config="[sim]\nvram = 64M\n", args=(), env=None,
                 backend="sim"):
        self.dir = tempfile.mkdtemp(prefix="gmd-py-")
        self.socket = os.path.join(self.dir, "gpu-memd.sock")
        self.config = os.path.join(self.dir, "gpu-memd.conf")
        self.log_path = os.path.join(self.dir, "gpu-memd.log")
        with open(self.config, "w") as f:
            f.write(config)
        self.args = list(args)
        self.backend = backend
        self.env = dict(os.environ, **(env or {}))
        self.proc = None

    def start(self):
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                with_pdeathsig([DAEMON, "--backend", self.backend, "--socket",
                                self.socket, "--config", self.config]
                               + self.args),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                env=self.env)
        deadline = time.monotonic() + 5
        while True:
            if self.proc.poll() is not None:
                raise AssertionError("gpu-memd exited during start-up "
                                     f"({self.proc.returncode}):\n"
                                     f"{self.log()}")
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
                    s.connect(self.socket)
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError("gpu-memd did not accept within 5 s:"
                                         f"\n{self.log()}")
                time.sleep(0.01)

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def wait_log(self, needle, timeout=5):
        deadline = time.monotonic() + timeout
        while needle not in self.log():
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} not in the log within "
                                     f"{timeout} s:\n{self.log()}")
            time.sleep(0.01)

    def kill(self, sig=signal.SIGKILL):
        self.proc.send_signal(sig)
        return self.proc.wait(5)

    def stop(self):
        """SIGTERM; expects exit 0 within 5 s, as harness_stop does."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                rc = self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("gpu-memd did not exit within 5 s of "
                                     f"SIGTERM:\n{self.log()}")
            if rc != 0:
                raise AssertionError(f"gpu-memd exited {rc} after SIGTERM:"
                                     f"\n{self.log()}")

    def cleanup(self):
        try:
            self.stop()
        finally:
            if self.proc and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            shutil.rmtree(self.dir, ignore_errors=True)


def spawn_python(daemon, code, *args, env=None):
    """A child Python process running `code` against `daemon`, stdout
    piped (one line per step it reports), stdin piped (to hold it);
    `env` adds variables to this process's environment."""
    env = dict(os.environ, **(env or {}), GPU_MEMD_SOCKET=daemon.socket)
    return subprocess.Popen(
        with_pdeathsig([sys.executable, "-c", code] + list(args)),
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


class Stepper:
    """A child process of `test` running `code` (with `args`, `env`) that
    prints "ready", then answers each line it is sent with one line (the
    tests' steppers: "ok SECONDS" or "error SECONDS WHY")."""

    def __init__(self, test, code, *args, env=None):
        self.proc = spawn_python(test.daemon, code, *args, env=env)
        test.addCleanup(reap, self.proc)
        test.assertEqual(self.proc.stdout.readline().strip(), "ready",
                         self.proc.stderr.read()
                         if self.proc.poll() is not None else "")
        self.pid = self.proc.pid

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def answer(self):
        return self.proc.stdout.readline().split(None, 2)

    def do(self, line):
        self.send(line)
        return self.answer()


def waits(client, pid):
    """Whether process `pid` has a request waiting, as status says."""
    return any(c.pid == pid and c.waiting
               for c in client.status("clients").clients)


def reap(proc):
    """Kill a child if it still runs, wait for it, close its pipes."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe:
            pipe.close()


def count_fds():
    return len(os.listdir("/proc/self/fd"))


def wait_until(predicate, timeout=5, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        time.sleep(0.01)


class DaemonTest(unittest.TestCase):
    """A test case with its own daemon (CONFIG) and a Client on it."""
    CONFIG = "[sim]\nvram = 64M\n"
    ARGS = ()           # more gpu-memd arguments
    ENV = None

    def setUp(self):
        import gpumem
        fds = count_fds()
        self.addCleanup(self.check_fds, fds)     # runs last
        self.daemon = Daemon(self.CONFIG, args=self.ARGS, env=self.ENV)
        self.addCleanup(self.daemon.cleanup)
        self.daemon.start()
        self.client = gpumem.Client(self.daemon.socket, name="pytest")
        self.addCleanup(self.client.close)

    def check_fds(self, before):
        self.assertEqual(count_fds(), before, "file descriptors leaked")

    def mine(self, status=None):
        """This process's ClientInfo entries in the daemon's status."""
        status = status or self.client.status("clients")
        return [c for c in status.clients if c.pid == os.getpid()]


def skip_line(test, reason):
    """The one line `make test` shows for a skipped test."""
    print(f"SKIP: python.{test}: {reason}", flush=True)
