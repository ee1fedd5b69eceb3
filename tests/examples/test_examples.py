#!/usr/bin/env python3
"""test_examples — examples/ as a newcomer runs them, and README.md's copies
of them (tests/examples/CMakeLists.txt says what each part checks and
defines the README marker).

    test_examples.py hello_c|hello_py|train_py|readme

ctest passes GMD_SOURCE_DIR, GMD_BUILD_DIR, GMD_DAEMON, GPUMEM_LIBRARY and
GMD_LAUNCHER. Exit 0 passed, 1 failed (why on stderr), 77 skipped (one
SKIP: line).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SOURCE = os.environ.get("GMD_SOURCE_DIR") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("GMD_BUILD_DIR") or os.path.join(SOURCE, "build")
sys.path.insert(0, os.path.join(SOURCE, "tests", "python"))

from gmd_daemon import Daemon  # noqa: E402

# The documented command, run as written from a folder whose examples/ and
# build/ are the source tree's and this build's.
BUILD_HELLO = ("cc examples/hello.c $(PKG_CONFIG_PATH=build/client pkg-config "
               "--cflags --libs gpumem) -o hello")
RUN_HELLO = BUILD_HELLO + " && ./hello"
FENCES = {".c": "c", ".py": "python"}
MARKER = re.compile(r"^<!-- (examples/[A-Za-z0-9_.-]+) -->\s*$")
# What the newcomer's shell would not have set.
UNSET = ("LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH",
         "CFLAGS", "LDFLAGS", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR",
         "PKG_CONFIG_DISABLE_UNINSTALLED", "GPU_MEMD_SOCKET")


class Failed(Exception):
    pass


def skip(name, reason):
    print(f"SKIP: examples.{name}: {reason}", flush=True)
    sys.exit(77)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env.update(extra)
    return env


def run(argv, what, expect=0, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)
    if p.returncode != expect:
        raise Failed(f"{what}: exit {p.returncode}, wanted {expect}\n"
                     f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def with_daemon(test):
    daemon = Daemon("[sim]\nvram = 256M\n").start()
    try:
        test(daemon)
    finally:
        daemon.cleanup()


def test_hello_c():
    work = tempfile.mkdtemp(prefix="gmd-examples-")
    try:
        os.symlink(os.path.join(SOURCE, "examples"), os.path.join(work, "examples"))
        os.symlink(BUILD, os.path.join(work, "build"))

        def check(daemon):
            env = clean_env(GPU_MEMD_SOCKET=daemon.socket)
            p = run(["sh", "-c", RUN_HELLO], f"`{RUN_HELLO}`", cwd=work, env=env)
            if not re.fullmatch(r"67108864 bytes at 0x[0-9a-f]+ in vram "
                                r"\(sim backend\)\n", p.stdout):
                raise Failed(f"hello printed {p.stdout!r}")
            print(f"ok: `{RUN_HELLO}` printed {p.stdout.strip()!r}")
        with_daemon(check)
        # Its error handling: the library's words, exit 1.
        p = run(["./hello"], "hello without a daemon", expect=1, cwd=work,
                env=clean_env(GPU_MEMD_SOCKET=os.path.join(work, "none.sock")))
        if not p.stderr.startswith("hello: gmd_connect: ") or \
                "is gpu-memd running?" not in p.stderr:
            raise Failed(f"hello without a daemon said {p.stderr!r}")
        print(f"ok: without a daemon: {p.stderr.strip()}")
        # Clean under the warnings the project builds with.
        run(["sh", "-c", BUILD_HELLO.replace("cc ", "cc -std=gnu11 -Wall -Wextra "
                                             "-Wshadow -Werror ", 1)],
            "hello.c with -Wall -Wextra -Werror", cwd=work, env=clean_env())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_hello_py():
    script = os.path.join(SOURCE, "examples", "hello.py")
    pypath = os.path.join(SOURCE, "client", "python")

    def check(daemon):
        env = clean_env(PYTHONPATH=pypath, GPU_MEMD_SOCKET=daemon.socket)
        p = run([sys.executable, script], f"{sys.executable} examples/hello.py",
                env=env)
        if not re.fullmatch(r"67108864 bytes at 0x[0-9a-f]+ in vram "
                            r"\(sim backend\)\n", p.stdout):
            raise Failed(f"hello.py printed {p.stdout!r}")
        print(f"ok: {sys.executable} examples/hello.py printed {p.stdout.strip()!r}")
    with_daemon(check)
    p = run([sys.executable, script], "hello.py without a daemon", expect=1,
            env=clean_env(PYTHONPATH=pypath, GPU_MEMD_SOCKET="/nonexistent.sock"))
    if not p.stderr.startswith("hello.py: ConnectFailed: ") or "Traceback" in p.stderr:
        raise Failed(f"hello.py without a daemon said {p.stderr!r}")
    print(f"ok: without a daemon: {p.stderr.strip()}")


def test_train_py():
    try:
        import torch
    except ImportError:
        skip("train_py", f"{sys.executable} has no PyTorch")
    launcher = os.environ.get("GMD_LAUNCHER", "")
    if not os.path.exists(launcher):
        raise Failed(f"no gpumem-run at {launcher}")

    def check(daemon):
        env = clean_env(GPU_MEMD_SOCKET=daemon.socket)
        for k in ("GPU_MEMD_TORCH_NOTICED", "GPU_MEMD_TORCH_QUIET",
                  "GPU_MEMD_TORCH_CUDART"):
            env.pop(k, None)
        argv = [launcher, sys.executable, "examples/train.py"]
        p = run(argv, " ".join(argv), cwd=SOURCE, env=env)
        losses = [float(x) for x in re.findall(r"loss ([0-9.]+)", p.stdout)]
        if len(losses) < 2 or not losses[-1] < losses[0]:
            raise Failed(f"train.py did not learn:\n{p.stdout}")
        notices = [l for l in p.stderr.splitlines()
                   if "no CUDA allocation will go through gpu-memd" in l]
        gpu = torch.version.cuda and torch.cuda.is_available()
        if len(notices) != (0 if gpu else 1):
            raise Failed(f"wanted {0 if gpu else 1} notice on stderr:\n{p.stderr}")
        print(f"ok: {' '.join(argv)}:\n{p.stdout}{p.stderr}", end="")
    with_daemon(check)


def readme_blocks(lines):
    """(marker line number, file, fence language, block lines or None)."""
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if not m:
            continue
        fence = lines[i + 1].strip() if i + 1 < len(lines) else ""
        lang = fence[3:].strip() if fence.startswith("```") else None
        block = None
        if lang is not None:
            for j in range(i + 2, len(lines)):
                if lines[j].strip() == "```":
                    block = lines[i + 2:j]
                    break
        yield i + 1, m.group(1), lang, block


def test_readme():
    readme = os.path.join(SOURCE, "README.md")
    with open(readme) as f:
        text = f.read()
    lines = text.split("\n")
    found = list(readme_blocks(lines))
    if not found:
        skip("readme", "README.md has no <!-- examples/... --> marker yet "
             "(tests/examples/CMakeLists.txt defines it)")
    problems = []
    for at, name, lang, block in found:
        path = os.path.join(SOURCE, name)
        ext = os.path.splitext(name)[1]
        if not os.path.isfile(path):
            problems.append(f"README.md:{at}: <!-- {name} --> names no file")
            continue
        if lang != FENCES.get(ext):
            problems.append(f"README.md:{at}: <!-- {name} --> is not followed "
                            f"by a ```{FENCES.get(ext, '?')} fence on the next line")
            continue
        if block is None:
            problems.append(f"README.md:{at}: the ```{lang} block after "
                            f"<!-- {name} --> is not closed")
            continue
        with open(path) as f:
            want = f.read().rstrip("\n").split("\n")
        if block != want:
            k = next((k for k in range(max(len(block), len(want)))
                      if k >= len(block) or k >= len(want) or block[k] != want[k]))
            has = block[k] if k < len(block) else "(block ends)"
            wants = want[k] if k < len(want) else "(file ends)"
            problems.append(
                f"README.md:{at}: the block after <!-- {name} --> is not {name} "
                f"verbatim: its line {k + 1} is {has!r}, the file's is "
                f"{wants!r}; paste {name} again")
            continue
        print(f"ok: README.md:{at}: {name} verbatim")
    if any(name == "examples/hello.c" for _, name, _, _ in found) and \
            BUILD_HELLO not in text:
        problems.append("README.md shows examples/hello.c but not the command "
                        f"that builds it: {BUILD_HELLO}")
    if problems:
        raise Failed("\n".join(problems))


def main():
    tests = {"hello_c": test_hello_c, "hello_py": test_hello_py,
             "train_py": test_train_py, "readme": test_readme}
    if len(sys.argv) != 2 or sys.argv[1] not in tests:
        sys.exit("usage: test_examples.py " + "|".join(tests))
    try:
        tests[sys.argv[1]]()
    except Failed as e:
        print(f"FAIL: examples.{sys.argv[1]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
