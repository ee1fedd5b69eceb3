"""test_errors — every error as its exception, against the real sim
daemon: the class each GMD_E* code maps to (and the built-in it also is),
each raised by a real failure where the sim daemon can produce it (no
memory, too large, timeouts of alloc and wait, quota, bad arguments,
unsupported flags, busy buffers, a freed buffer or closed client used, a
failed copy, a refused connection, an unprivileged admin call), each
carrying the daemon's or the library's sentence rather than a bare code.
"""
import errno
import os
import shutil
import subprocess
import sys
import time
import unittest

import gpumem
from gmd_daemon import (MiB, Daemon, DaemonTest, reap, skip_line,
                        with_pdeathsig)

CODES = {
    -12: (gpumem.OutOfMemory, MemoryError),
    -27: (gpumem.TooLarge, MemoryError),
    -122: (gpumem.QuotaExceeded, MemoryError),
    -110: (gpumem.TimedOut, TimeoutError),
    -2: (gpumem.NoSuchBuffer, LookupError),
    -1: (gpumem.NotAllowed, PermissionError),
    -16: (gpumem.Busy, gpumem.GpumemError),
    -95: (gpumem.NotSupported, gpumem.GpumemError),
    -125: (gpumem.Revoked, gpumem.GpumemError),
    -11: (gpumem.LimitReached, gpumem.GpumemError),
    -22: (gpumem.InvalidArgument, ValueError),
    -5: (gpumem.CopyFailed, gpumem.GpumemError),
    -107: (gpumem.Disconnected, ConnectionError),
    -71: (gpumem.ProtocolError, ConnectionError),
}


class Mapping(unittest.TestCase):
    def test_every_code(self):
        from gpumem.errors import error_for
        for code, (cls, builtin) in CODES.items():
            e = error_for(code, None)
            self.assertIs(type(e), cls, code)
            self.assertIsInstance(e, builtin)
            self.assertIsInstance(e, gpumem.GpumemError)
            self.assertEqual((e.code, e.errno), (code, -code))
            self.assertTrue(str(e))     # last error or gmd_strerror
        self.assertEqual(gpumem.strerror(-110), "deadline passed")
        other = error_for(-errno.EMFILE, "too many files")
        self.assertIs(type(other), gpumem.GpumemError)
        self.assertEqual(str(other), "too many files")


class Memory(DaemonTest):
    def test_no_room_too_large_timeout(self):
        held = self.client.alloc(64 * MiB)
        with self.assertRaises(gpumem.OutOfMemory) as cm:
            self.client.alloc(2 * MiB, timeout=0)
        self.assertIs(type(cm.exception), gpumem.OutOfMemory)
        self.assertIn("MiB", str(cm.exception))
        self.assertNotEqual(str(cm.exception), gpumem.strerror(-12))

        start = time.monotonic()
        with self.assertRaises(gpumem.TimedOut) as cm:
            self.client.alloc(2 * MiB, timeout=0.3)
        self.assertGreaterEqual(time.monotonic() - start, 0.25)
        self.assertTrue(str(cm.exception))

        with self.assertRaises(gpumem.TooLarge) as cm:
            self.client.alloc(128 * MiB, timeout=None)
        self.assertIn("larger than", str(cm.exception))
        held.free()
        self.client.alloc(2 * MiB, timeout=0)


class Quota(DaemonTest):
    CONFIG = "[sim]\nvram = 64M\n[users]\nvram_quota = 8M\n"

    def test_quota(self):
        held = self.client.alloc(8 * MiB)   # held: a dropped one is freed
        self.addCleanup(held.free)
        with self.assertRaises(gpumem.QuotaExceeded) as cm:
            self.client.alloc(2 * MiB, timeout=0)
        self.assertIn("quota", str(cm.exception))
        self.assertIsInstance(cm.exception, MemoryError)


class Arguments(DaemonTest):
    def test_bad_arguments(self):
        c = self.client
        cases = [
            (lambda: c.alloc(0), gpumem.InvalidArgument),
            (lambda: c.alloc(2 * MiB, device=7), gpumem.InvalidArgument),
            (lambda: c.alloc(2 * MiB, flags=1 << 9), gpumem.InvalidArgument),
            (lambda: c.alloc(-1), gpumem.InvalidArgument),
            (lambda: c.alloc("lots"), gpumem.InvalidArgument),
            (lambda: c.alloc(2 * MiB, timeout=-1), gpumem.InvalidArgument),
            (lambda: c.alloc(2 * MiB, timeout="1"), TypeError),
            (lambda: c.alloc(2.5), TypeError),
            (lambda: c.status("everything"), gpumem.InvalidArgument),
            (lambda: c.alloc(2 * MiB, flags=gpumem.LEGACY_IPC),
             gpumem.NotSupported),
        ]
        for i, (call, cls) in enumerate(cases):
            with self.subTest(case=i):
                with self.assertRaises(cls) as cm:
                    call()
                self.assertTrue(str(cm.exception))
        self.assertEqual(c.status().total_buffers, 0)

    def test_bad_switches_from_environment(self):
        for name, value in (("GPU_MEMD_PRIORITY", "high"),
                            ("GPU_MEMD_CACHE", "off"),
                            ("GPU_MEMD_KEEP_MAPPINGS", "no")):
            with self.subTest(name=name):
                os.environ[name] = value
                try:
                    with self.assertRaises(gpumem.InvalidArgument) as cm:
                        gpumem.Client(self.daemon.socket)
                finally:
                    del os.environ[name]
                self.assertIn(name, str(cm.exception))

    def test_buffer_of_another_client(self):
        with gpumem.Client(self.daemon.socket) as other:
            theirs = other.alloc(2 * MiB)
            with self.assertRaises(gpumem.InvalidArgument):
                self.client.pageout(theirs)


class States(DaemonTest):
    def test_busy(self):
        buf = self.client.alloc(2 * MiB)
        with self.assertRaises(gpumem.Busy) as cm:
            buf.acquire(timeout=0)
        self.assertTrue(str(cm.exception))
        with self.assertRaises(gpumem.Busy):
            buf.pageout()

    def test_freed_buffer_used(self):
        buf = self.client.alloc(2 * MiB)
        buf_id = buf.id
        buf.free()
        calls = [buf.acquire, buf.release, buf.release_after, buf.pageout,
                 buf.prefetch, buf.wait, lambda: buf.ptr, lambda: buf.tier,
                 lambda: buf.as_memoryview(),
                 lambda: self.client.pageout(buf)]
        for i, call in enumerate(calls):
            with self.subTest(call=i):
                with self.assertRaises(gpumem.NoSuchBuffer) as cm:
                    call()
                self.assertEqual(str(cm.exception),
                                 f"buffer {buf_id} was freed by free(): "
                                 "allocate a new one")
        self.assertIn("freed", repr(buf))

    def test_closed_client_used(self):
        c = gpumem.Client(self.daemon.socket, name="closing")
        buf = c.alloc(2 * MiB)
        c.close()
        with self.assertRaises(gpumem.Disconnected) as cm:
            c.alloc(2 * MiB)
        self.assertIn("is closed", str(cm.exception))
        with self.assertRaises(gpumem.NoSuchBuffer) as cm:
            buf.acquire()
        self.assertIn("when its Client was closed", str(cm.exception))
        buf.free()                              # nothing left to free

    def test_wait_times_out(self):
        self.daemon.cleanup()
        self.daemon = Daemon("[sim]\nvram = 64M\ncopy_rate = 8M\n").start()
        self.addCleanup(self.daemon.cleanup)
        c = gpumem.Client(self.daemon.socket)
        self.addCleanup(c.close)
        buf = c.alloc(8 * MiB)
        buf.release()
        buf.pageout()                            # 1 s at 8 MiB/s
        with self.assertRaises(gpumem.TimedOut) as cm:
            buf.wait(timeout=0.05)
        self.assertTrue(str(cm.exception))
        buf.wait(timeout=10)
        self.assertEqual(buf.tier, "host")


class CopyFails(unittest.TestCase):
    def test_failed_copy(self):
        d = Daemon()
        self.addCleanup(d.cleanup)
        fail = os.path.join(d.dir, "fail")
        d.env["GMD_SIM_FAIL_COPIES"] = fail
        d.start()
        with gpumem.Client(d.socket) as c:
            buf = c.alloc(4 * MiB)
            buf.as_memoryview()[:4] = b"keep"
            buf.release()
            open(fail, "w").close()
            buf.pageout()
            with self.assertRaises(gpumem.CopyFailed) as cm:
                buf.wait(timeout=10)
            self.assertIn(str(buf.id), str(cm.exception))
            os.unlink(fail)
            buf.acquire(timeout=10)
            self.assertEqual(buf.tier, "vram")
            self.assertEqual(bytes(buf.as_memoryview()[:4]), b"keep")


class Connection(unittest.TestCase):
    def test_no_daemon(self):
        path = "/nonexistent/gpu-memd.sock"
        with self.assertRaises(gpumem.ConnectFailed) as cm:
            gpumem.Client(path)
        self.assertIsInstance(cm.exception, ConnectionError)
        self.assertIn(f"cannot connect to {path}", str(cm.exception))
        self.assertIn("is gpu-memd running?", str(cm.exception))


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("setpriv"),
                     "needs root (and setpriv) to run a client as nobody")
class Unprivileged(unittest.TestCase):
    CHILD = ("import gpumem\n"
             "c = gpumem.Client()\n"
             "try:\n    c.admin_drain(1)\n"
             "except gpumem.NotAllowed as e:\n"
             "    print('NotAllowed', isinstance(e, PermissionError), e)\n")

    @staticmethod
    def readable_copy(folder):
        """The package and libgpumem copied into `folder` (0755), for a
        checkout nobody cannot enter (a clone under /root, 0700); the
        variables that point the child at them."""
        package = os.path.dirname(os.path.abspath(gpumem.__file__))
        shutil.copytree(package, os.path.join(folder, "py", "gpumem"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        env = {"PYTHONPATH": os.path.join(folder, "py")}
        library = os.environ.get("GPUMEM_LIBRARY")
        if library:
            env["GPUMEM_LIBRARY"] = shutil.copy(library, folder)
            os.chmod(env["GPUMEM_LIBRARY"], 0o755)
        for root, dirs, files in os.walk(env["PYTHONPATH"]):
            for name in [root] + [os.path.join(root, f) for f in files]:
                os.chmod(name, 0o755)
        return env

    def test_admin_call_not_allowed(self):
        d = Daemon("[sim]\nvram = 64M\n[daemon]\nsocket_mode = 0666\n")
        self.addCleanup(d.cleanup)
        os.chmod(d.dir, 0o755)
        d.start()
        env = dict(os.environ, GPU_MEMD_SOCKET=d.socket,
                   **self.readable_copy(d.dir))
        child = subprocess.Popen(
            with_pdeathsig(["setpriv", "--reuid=65534", "--regid=65534",
                            "--clear-groups", sys.executable, "-c",
                            self.CHILD]),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        self.addCleanup(reap, child)
        out, err = child.communicate(timeout=30)
        if "ModuleNotFoundError" in err or "LibraryNotFound" in err:
            reason = ("user nobody cannot read the package or library: " +
                      err.strip().splitlines()[-1])
            skip_line("test_errors", reason)
            self.skipTest(reason)
        self.assertEqual(child.returncode, 0, err)
        self.assertTrue(out.startswith("NotAllowed True "), out)
        self.assertIn("need root", out)


if __name__ == "__main__":
    unittest.main()
