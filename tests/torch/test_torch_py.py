#!/usr/bin/env python3
"""test_torch_py — gpumem.torch and gpumem.run (gpumem-run) without a GPU.

Pure parts: the timeout and name rules, the choice between loading the shim
and re-executing, the launcher's command line and environment. End to end
against the real gpu-memd (sim backend), with the fake libcudart of
fake_cudart.c standing in for the CUDA runtime: gpumem-run runs an
unedited program whose cudaMalloc lands in the daemon under the script's
name; enable() loads the shim ahead of the runtime in a program that
calls nothing else; a refused allocation's sentence reaches stderr. With
Debian's python3-torch (CPU only), enable() is also run after `import
torch`, where there is no CUDA and no re-exec is needed. Notice: with that
CPU-only PyTorch and no GPU, gpumem-run and enable() say once, in one line,
that nothing goes through gpu-memd, and the program runs on; gpumem-run
with a python3 first on PATH that lacks the torch its program imports (a
venv) says which interpreter has it, in one line, instead of a traceback.

ctest passes the paths in the environment (GMD_DAEMON, GPU_MEMD_TORCH_LIB,
GMD_FAKE_CUDART, GMD_LAUNCHER, GMD_MEMCTL).
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.normpath(os.path.join(HERE, "..", "..", "client", "python"))
sys.path.insert(0, PYDIR)

from gpumem import run as grun          # noqa: E402
from gpumem import torch as gtorch      # noqa: E402

MiB = 1 << 20

# A program that knows nothing of gpu-memd: it calls the CUDA runtime.
PROGRAM = textwrap.dedent("""
    import ctypes, os, sys
    fake = ctypes.CDLL(os.environ["GPU_MEMD_TORCH_CUDART"], mode=ctypes.RTLD_GLOBAL)
    rt = ctypes.CDLL(None)
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    p = ctypes.c_void_p()
    rc = rt.cudaMalloc(ctypes.byref(p), int(sys.argv[1]))
    if rc != 0:     # as PyTorch does: (free its cache and) ask again
        rc = rt.cudaMalloc(ctypes.byref(p), int(sys.argv[1]))
    print("RC", rc, flush=True)
    if rc == 0:
        ctypes.memset(p, 1, int(sys.argv[1]))
        print("MALLOC_REACHED_FAKE", fake.fake_cudart_count(3), flush=True)
        sys.stdin.readline()
""")


class PureRules(unittest.TestCase):
    def test_timeout(self):
        self.assertEqual(gtorch.parse_timeout(None), -1)
        self.assertEqual(gtorch.parse_timeout(""), -1)
        self.assertEqual(gtorch.parse_timeout("0"), 0)
        self.assertEqual(gtorch.parse_timeout("2500"), 2500)
        self.assertEqual(gtorch.parse_timeout("-1"), -1)
        for bad in ("-2", "1.5", "10s", " 5", "forever"):
            with self.assertRaises(ValueError) as e:
                gtorch.parse_timeout(bad)
            self.assertIn("GPU_MEMD_TORCH_TIMEOUT_MS", str(e.exception))

    def test_script_name(self):
        self.assertEqual(gtorch.script_name(["python3", "train.py", "--x"]), "train.py")
        self.assertEqual(gtorch.script_name(["/usr/bin/python3", "-u", "/a/b/t.py"]), "t.py")
        self.assertEqual(gtorch.script_name(["python", "-W", "ignore", "r.py"]), "r.py")
        self.assertEqual(gtorch.script_name(["python3", "-m", "pkg.main"]), "pkg.main")
        self.assertEqual(gtorch.script_name(["python3", "-c", "pass"]), "python -c")
        self.assertEqual(gtorch.script_name(["torchrun", "x.py"]), "torchrun")
        self.assertEqual(gtorch.script_name([]), "python")

    def test_placement(self):
        line = "7f00-7f01 r-xp 0 08:01 1 {}\n"
        self.assertEqual(gtorch.placement(line.format("/usr/lib/libc.so.6")), "load")
        self.assertEqual(gtorch.placement(line.format("/x/libcudart.so.13")), "reexec")
        self.assertEqual(gtorch.placement(line.format("/t/lib/libtorch_cuda.so")), "reexec")
        maps = line.format("/x/libcudart.so.13") + line.format("/b/libgpumem_torch.so.0.1.0")
        self.assertEqual(gtorch.placement(maps), "present")
        self.assertEqual(gtorch.loaded_path(maps), "/b/libgpumem_torch.so.0.1.0")

    def test_reexec_command(self):
        argv, env = gtorch.reexec_command(["python3", "train.py", "--lr", "1"],
                                          {"LD_PRELOAD": "/x/other.so"}, "/l/shim.so")
        self.assertEqual(argv, ["python3", "train.py", "--lr", "1"])
        self.assertEqual(env["LD_PRELOAD"], "/l/shim.so /x/other.so")
        self.assertEqual(env["GPU_MEMD_TORCH_REEXEC"], "1")
        with self.assertRaises(gtorch.SetupError) as e:
            gtorch.reexec_command(["python3", "t.py"], env, "/l/shim.so")
        self.assertIn("still not loaded", str(e.exception))
        with self.assertRaises(gtorch.SetupError) as e:
            gtorch.reexec_command(["python3"], {}, "/l/shim.so")
        self.assertIn("interactive", str(e.exception))

    def test_launcher_args(self):
        opts, cmd = grun.parse_args(["--timeout", "500", "--name=job", "python3", "t.py",
                                     "--timeout", "9"])
        self.assertEqual(opts, {"timeout": "500", "name": "job"})
        self.assertEqual(cmd, ["python3", "t.py", "--timeout", "9"])
        opts, cmd = grun.parse_args(["--", "--weird-program"])
        self.assertEqual((opts, cmd), ({}, ["--weird-program"]))
        for bad, words in ((["--timeout", "x", "p"], "--timeout x"),
                           (["--priority", "high", "p"], "--priority high"),
                           (["--bogus", "p"], "unknown option --bogus"),
                           (["--name"], "--name needs a value"),
                           ([], "no program")):
            with self.assertRaises(grun.UsageError) as e:
                grun.parse_args(bad)
            self.assertIn(words, str(e.exception))

    def test_launcher_environment(self):
        env = grun.environment({"timeout": "250", "socket": "/s", "priority": "-5"},
                               ["python3", "-u", "train.py"], {"LD_PRELOAD": "/a.so"},
                               "/l/libgpumem_torch.so.0")
        self.assertEqual(env["LD_PRELOAD"], "/l/libgpumem_torch.so.0 /a.so")
        self.assertEqual(env["GPU_MEMD_TORCH_NAME"], "train.py")
        self.assertEqual(env["GPU_MEMD_TORCH_TIMEOUT_MS"], "250")
        self.assertEqual(env["GPU_MEMD_SOCKET"], "/s")
        self.assertEqual(env["GPU_MEMD_PRIORITY"], "-5")
        again = grun.environment({}, ["x"], env, "/l/libgpumem_torch.so.0")
        self.assertEqual(again["LD_PRELOAD"], env["LD_PRELOAD"])   # not twice
        with self.assertRaises(ValueError):
            grun.environment({}, ["x"], {"GPU_MEMD_TORCH_TIMEOUT_MS": "soon"}, "/l")


class DaemonCase(unittest.TestCase):
    """gpu-memd (sim) on a socket of its own for the class, the fake runtime
    and a program that calls it."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="gmd-torch-py-")
        cls.sock = os.path.join(cls.tmp.name, "sock")
        conf = os.path.join(cls.tmp.name, "conf")
        with open(conf, "w") as f:
            f.write("[daemon]\nbackend = sim\n[sim]\ndevices = 1\nvram = 64M\n"
                    "granularity = 2M\n")
        cls.log = open(os.path.join(cls.tmp.name, "log"), "w")
        cls.daemon = subprocess.Popen([os.environ["GMD_DAEMON"], "--config", conf,
                                       "--socket", cls.sock],
                                      stdout=cls.log, stderr=subprocess.STDOUT)
        for _ in range(500):
            if os.path.exists(cls.sock):
                break
            time.sleep(0.01)
        cls.env = dict(os.environ, GPU_MEMD_SOCKET=cls.sock,
                       GPU_MEMD_TORCH_CUDART=os.environ["GMD_FAKE_CUDART"],
                       PYTHONPATH=PYDIR)
        cls.env.pop("GPU_MEMD_TORCH_TIMEOUT_MS", None)
        cls.program = os.path.join(cls.tmp.name, "train.py")
        with open(cls.program, "w") as f:
            f.write(PROGRAM)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.terminate()
        cls.daemon.wait(timeout=10)
        cls.log.close()
        cls.tmp.cleanup()


@unittest.skipUnless(os.environ.get("GMD_DAEMON"), "GMD_DAEMON not set (run by ctest)")
class WithDaemon(DaemonCase):
    def clients(self):
        out = subprocess.run([os.environ["GMD_MEMCTL"], "--socket", self.sock,
                              "--json", "clients"], capture_output=True, text=True,
                             check=True).stdout
        return json.loads(out)["clients"]

    def launch(self, *args, size=8 * MiB):
        return subprocess.Popen([sys.executable, "-m", "gpumem.run", *args,
                                 sys.executable, self.program, str(size)],
                                env=self.env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def test_launcher_unedited_program(self):
        p = self.launch()
        try:
            self.assertEqual(p.stdout.readline().strip(), "RC 0")
            self.assertEqual(p.stdout.readline().strip(), "MALLOC_REACHED_FAKE 0")
            me = [c for c in self.clients() if c["pid"] == p.pid]
            self.assertEqual(len(me), 1, self.clients())
            self.assertEqual(me[0]["name"], "train.py")
            self.assertEqual(me[0]["bytes"], 8 * MiB)
        finally:
            p.communicate("\n", timeout=30)
        self.assertEqual(p.returncode, 0)

    def test_launcher_deadline_says_why(self):
        holder = self.launch("--name", "holder", size=48 * MiB)
        try:
            self.assertEqual(holder.stdout.readline().strip(), "RC 0")
            t0 = time.time()
            p = self.launch("--timeout", "300", size=32 * MiB)
            out, err = p.communicate("\n", timeout=30)
            took = time.time() - t0
        finally:
            holder.communicate("\n", timeout=30)
        self.assertIn("RC 2", out)                    # cudaErrorMemoryAllocation
        # The repeat waits what is left of the first request's deadline: how
        # much that is depends on how busy the machine was in between.
        m = re.search(r"gpu-memd: waited (\d+) ms for 32 MiB on device 0 VRAM; "
                      r"it has 16 MiB free of 64 MiB", err)
        self.assertIsNotNone(m, err)
        self.assertLessEqual(int(m.group(1)), 300)
        self.assertGreaterEqual(took, 0.3)

    def test_enable_loads_the_shim_first(self):
        code = textwrap.dedent("""
            import ctypes, os
            import gpumem.torch as gt
            assert gt.placement(gt._maps()) == "load"
            try:
                import torch  # Debian's CPU build: no CUDA, nothing to re-exec for
            except ImportError:
                pass
            s = gt.enable(timeout_ms=100, name="enabled")
            assert gt.placement(gt._maps()) == "present", gt._maps()
            fake = ctypes.CDLL(os.environ["GPU_MEMD_TORCH_CUDART"], mode=ctypes.RTLD_GLOBAL)
            rt = ctypes.CDLL(None)
            rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
            p = ctypes.c_void_p()
            assert rt.cudaMalloc(ctypes.byref(p), 4 << 20) == 0
            assert fake.fake_cudart_count(3) == 0
            print("STATS", gt.stats()["bytes_held"], flush=True)
        """)
        p = subprocess.run([sys.executable, "-c", code], env=self.env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"STATS {4 * MiB}", p.stdout)

    def test_enable_without_daemon(self):
        env = dict(self.env, GPU_MEMD_SOCKET=os.path.join(self.tmp.name, "none"))
        p = subprocess.run([sys.executable, "-c",
                            "import gpumem.torch as gt; gt.enable()"],
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("SetupError: gpumem.torch: cannot connect to gpu-memd at", p.stderr)
        self.assertIn("is gpu-memd running?", p.stderr)

    def test_installed_launcher_script(self):
        launcher = os.environ.get("GMD_LAUNCHER")
        if not launcher or not os.path.exists(launcher):
            self.skipTest("no built gpumem-run")
        p = subprocess.run([launcher, "--bogus"], capture_output=True, text=True,
                           env=self.env, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown option --bogus", p.stderr)
        p = subprocess.run([launcher, "/nonexistent/prog"], capture_output=True,
                           text=True, env=self.env, timeout=60)
        self.assertEqual(p.returncode, 127)
        self.assertIn("cannot run /nonexistent/prog", p.stderr)


NOTICE = "no CUDA allocation will go through gpu-memd: "
# A PyTorch program that also starts a child calling enable(): the notice
# is said once for the whole tree.
TORCH_PROGRAM = textwrap.dedent("""
    import subprocess, sys
    import torch
    print("TRAINED", torch.ones(4).sum().item(), flush=True)
    subprocess.run([sys.executable, "-c",
                    "import gpumem.torch as gt; gt.enable(); gt.enable()"],
                   check=True)
""")


def have_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


@unittest.skipUnless(os.environ.get("GMD_DAEMON"), "GMD_DAEMON not set (run by ctest)")
class Notice(DaemonCase):
    """One line on stderr, once, when nothing can go through gpu-memd (here:
    Debian's CPU-only PyTorch, no GPU); the program runs on. And gpumem-run
    with a python3 that lacks the torch its program imports says which
    interpreter has it instead of the program's traceback."""

    def setUp(self):
        # The notices judge the real CUDA runtime, not the fake.
        self.env = {k: v for k, v in self.env.items()
                    if k not in ("GPU_MEMD_TORCH_CUDART", "GPU_MEMD_TORCH_NOTICED",
                                 "GPU_MEMD_TORCH_QUIET", "PYTORCH_CUDA_ALLOC_CONF")}
        self.script = os.path.join(self.tmp.name, "uses_torch.py")
        with open(self.script, "w") as f:
            f.write(TORCH_PROGRAM)

    def assert_once(self, err, who):
        lines = [l for l in err.splitlines() if NOTICE in l]
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith(who + ": "), lines[0])
        return lines[0]

    def launcher(self):
        launcher = os.environ.get("GMD_LAUNCHER")
        if not launcher or not os.path.exists(launcher):
            self.skipTest("no built gpumem-run")
        return launcher

    @unittest.skipUnless(have_torch(), "PyTorch is not installed")
    def test_launcher_cpu_torch(self):
        import torch
        if torch.version.cuda and torch.cuda.is_available():
            self.skipTest("PyTorch uses a GPU here: there is nothing to say")
        p = subprocess.run([self.launcher(), sys.executable, self.script],
                           env=self.env, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("TRAINED 4.0", p.stdout)
        line = self.assert_once(p.stderr, "gpumem-run")
        if torch.version.cuda is None:
            self.assertIn(f"PyTorch {torch.__version__} of", line)
            self.assertIn("is built without CUDA (CPU only)", line)
        # Asked to be quiet, it is.
        p = subprocess.run([self.launcher(), sys.executable, self.script],
                           env=dict(self.env, GPU_MEMD_TORCH_QUIET="1"),
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn(NOTICE, p.stderr)

    @unittest.skipUnless(have_torch(), "PyTorch is not installed")
    def test_enable_cpu_torch(self):
        import torch
        if torch.version.cuda and torch.cuda.is_available():
            self.skipTest("PyTorch uses a GPU here: there is nothing to say")
        code = ("import gpumem.torch as gt, torch\n"
                "gt.enable(); gt.enable()\n"
                "exec(open(%r).read())\n" % self.script)
        p = subprocess.run([sys.executable, "-c", code], env=self.env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("TRAINED 4.0", p.stdout)
        self.assert_once(p.stderr, "gpumem.torch")

    def test_launcher_alloc_conf(self):
        env = dict(self.env, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
        p = subprocess.run([sys.executable, "-m", "gpumem.run", sys.executable,
                            "-c", "import sys"], env=env, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        # No GPU here: that is said first; on a GPU machine, the variable.
        line = self.assert_once(p.stderr, "gpumem-run")
        self.assertTrue("no usable GPU" in line or "cuMemCreate" in line, line)

    def test_launcher_python_without_torch(self):
        venv = os.path.join(self.tmp.name, "venv")
        if not os.path.exists(venv):
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv],
                           check=True, timeout=60)
        env = dict(self.env, PATH=os.path.join(venv, "bin") + os.pathsep +
                   self.env.get("PATH", ""))
        p = subprocess.run([self.launcher(), "--timeout", "100", "python3",
                            self.script, "--lr", "1"], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertNotIn("Traceback", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        line = p.stderr.strip()
        self.assertIn(f"python3 is {venv}/bin/python3, which has no torch "
                      "(uses_torch.py imports it): ", line)
        self.assertIn(f"-m pip install torch", line)
        if have_torch():
            self.assertIn(f"--timeout 100 /usr/bin/python3 {self.script} --lr 1",
                          line)
            self.assertIn("/usr/bin/python3 has torch", line)


if __name__ == "__main__":
    unittest.main()
