"""test_install — the package where `make install` puts it, and in the
build tree: `cmake --install` of the suite's build into a scratch prefix
puts gpumem/ in that prefix's Debian python path, and Debian's python3
imports it from there (not from the source tree) and loads the installed
libgpumem (named by the gpumem/_install.py written at install) without
GPUMEM_LIBRARY or LD_LIBRARY_PATH, then talks to a daemon. From the source
tree, PYTHONPATH=client/python finds build/client/libgpumem.so on its own.
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from gmd_daemon import Daemon

BUILD = os.environ.get("GMD_BUILD_DIR", "")
CMAKE = os.environ.get("GMD_CMAKE") or shutil.which("cmake")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PROBE = ("import gpumem, sys\n"
         "print(gpumem.__file__)\n"
         "print(gpumem._lib.lib()._name)\n"
         "with gpumem.Client(sys.argv[1]) as c:\n"
         "    print(c.alloc('2M').size)\n")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GPUMEM_LIBRARY", "PYTHONPATH", "LD_LIBRARY_PATH")}
    env.update(extra)
    return env


class Install(unittest.TestCase):
    def setUp(self):
        self.daemon = Daemon()
        self.addCleanup(self.daemon.cleanup)
        self.daemon.start()

    def probe(self, cwd, **env):
        r = subprocess.run([sys.executable, "-c", PROBE, self.daemon.socket],
                           cwd=cwd, env=clean_env(**env),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout.split("\n")

    @unittest.skipUnless(BUILD and CMAKE,
                         "needs GMD_BUILD_DIR (set by ctest) and cmake")
    def test_installed_package(self):
        prefix = tempfile.mkdtemp(prefix="gmd-py-install-")
        self.addCleanup(shutil.rmtree, prefix, True)
        r = subprocess.run([CMAKE, "--install", BUILD, "--prefix", prefix],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        found = glob.glob(os.path.join(prefix, "lib/python3*/dist-packages"))
        self.assertEqual(len(found), 1, os.listdir(os.path.join(prefix,
                                                                "lib")))
        site = found[0]
        self.assertTrue(os.path.exists(os.path.join(site, "gpumem",
                                                    "_install.py")))
        module, library, size, _ = self.probe("/", PYTHONPATH=site)
        self.assertEqual(module, os.path.join(site, "gpumem", "__init__.py"))
        self.assertTrue(library.startswith(prefix + "/lib"), library)
        self.assertTrue(library.endswith("/libgpumem.so.0"), library)
        self.assertEqual(size, str(2 << 20))

    def test_build_tree(self):
        built = os.path.join(ROOT, "build", "client", "libgpumem.so.0")
        if not os.path.exists(built):
            self.skipTest(f"no {built} (build/ is not this suite's build)")
        if BUILD and os.path.realpath(BUILD) != os.path.join(ROOT, "build"):
            self.skipTest(f"build/ is not this suite's build ({BUILD}): "
                          "its library may be older than the package")
        module, library, size, _ = self.probe(
            "/", PYTHONPATH=os.path.join(ROOT, "client", "python"))
        self.assertEqual(module, os.path.join(ROOT, "client", "python",
                                              "gpumem", "__init__.py"))
        self.assertEqual(library, built)
        self.assertEqual(size, str(2 << 20))


if __name__ == "__main__":
    unittest.main()
