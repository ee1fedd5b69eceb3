"""gpumem.run — run a program with its CUDA allocations on gpu-memd, unedited.

    gpumem-run [--timeout MS] [--name NAME] [--socket PATH] [--priority N]
               [--] PROGRAM [ARGS...]
    python3 -m gpumem.run ... PROGRAM [ARGS...]

It puts the shim libgpumem_torch.so in LD_PRELOAD (see gpumem.torch) and
sets the shim's variables from the options, then executes PROGRAM in place
(same pid, so gpu-memctl's pid is the program's). The name gpu-memctl shows
is the script's file name for `python train.py`, else the program's. When
an allocation finds no room before the deadline, the shim writes the
daemon's sentence on stderr as one line starting "gpu-memd: " and PyTorch
raises torch.OutOfMemoryError.

Before it starts a Python program (`python3 ...`, or a script whose #! line
names a python, as torchrun), it asks that interpreter what it has
(_interp.py): when the program imports torch or gpumem at its top and the
interpreter has not got it (another python3 first on PATH: pyenv, a venv),
it says in one line which interpreter it found, which one has the package
and what to do, and stops: it never picks another interpreter itself.
When nothing the program allocates can go through gpu-memd (a PyTorch
without CUDA, no usable GPU, PYTORCH_CUDA_ALLOC_CONF's cudaMallocAsync or
expandable segments) it says so in one line (_unrouted.py) and runs the
program all the same.

Exit status 2 for a bad command line, 127 when PROGRAM cannot be executed,
1 when its Python lacks a package it imports.
"""

import os
import shlex
import sys

from gpumem import _interp, _unrouted
from gpumem import torch as gtorch

USAGE = ("usage: gpumem-run [--timeout MS] [--name NAME] [--socket PATH] "
         "[--priority N] [--] PROGRAM [ARGS...]")


class UsageError(Exception):
    pass


def parse_args(argv):
    """(options dict, command list) from the launcher's arguments; options
    end at the first word that is not one of ours, or after "--"."""
    opts = {}
    names = {"--timeout": "timeout", "--name": "name", "--socket": "socket",
             "--priority": "priority"}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            break
        if word in ("-h", "--help"):
            raise UsageError(None)
        key, value = word, None
        if word.startswith("--") and "=" in word:
            key, value = word.split("=", 1)
        if key not in names:
            if word.startswith("-"):
                raise UsageError(f"gpumem-run: unknown option {word}")
            break
        if value is None:
            if i + 1 >= len(argv):
                raise UsageError(f"gpumem-run: {key} needs a value")
            value = argv[i + 1]
            i += 1
        opts[names[key]] = value
        i += 1
    command = argv[i:]
    if not command:
        raise UsageError("gpumem-run: no program to run")
    if "timeout" in opts:
        try:
            gtorch.parse_timeout(opts["timeout"])
        except ValueError:
            raise UsageError(f"gpumem-run: --timeout {opts['timeout']}: a number "
                             "of milliseconds, -1 for no deadline") from None
    if "priority" in opts:
        try:
            int(opts["priority"], 10)
        except ValueError:
            raise UsageError(f"gpumem-run: --priority {opts['priority']}: an "
                             "integer") from None
    return opts, command


def environment(opts, command, environ, lib):
    """The environment PROGRAM runs with."""
    env = dict(environ)
    preload = env.get("LD_PRELOAD", "")
    if "libgpumem_torch.so" not in preload:
        env["LD_PRELOAD"] = lib + (" " + preload if preload else "")
    env[gtorch.NAME_ENV] = opts.get("name") or gtorch.script_name(command)
    if "timeout" in opts:
        env[gtorch.TIMEOUT_ENV] = opts["timeout"]
    elif env.get(gtorch.TIMEOUT_ENV):
        gtorch.parse_timeout(env[gtorch.TIMEOUT_ENV])
    if "socket" in opts:
        env["GPU_MEMD_SOCKET"] = opts["socket"]
    if "priority" in opts:
        env["GPU_MEMD_PRIORITY"] = opts["priority"]
    return env


def _has(info, what):
    """What a probed interpreter has of `what`, in words, or None."""
    found = info.get(what) if info else None
    if not found:
        return None
    return f"torch {found['version']}" if what == "torch" else \
        f"the gpumem package in {found}"


def _alternative(missing, known_python, environ):
    """`known_python` (the python3 gpumem was built and tested with) when it
    has all of `missing` (so it is not the interpreter that lacks them):
    (path, its probe)."""
    if not known_python or not os.access(known_python, os.X_OK):
        return None
    other = _interp.probe(known_python, None, environ)
    if other and all(other.get(m) for m in missing):
        return known_python, other
    return None


def check_python(argv, command, environ, known_python=None, package_dir=None,
                 prog="gpumem-run"):
    """Before running a Python `command` (`argv`: the launcher's arguments,
    `prog`: how it was called): (error line or None, notice reason or
    None). The error: the interpreter lacks torch or gpumem that the
    program imports at its top. The reason: its PyTorch cannot put
    anything on gpu-memd (built without CUDA, or PYTORCH_CUDA_ALLOC_CONF)."""
    what = _interp.python_command(command, environ)
    if not what:
        return None, None
    interpreter, script, module, code = what
    imports = _interp.program_imports(script, module, code)
    info = _interp.probe(interpreter, script, environ) if imports else None
    if not info:
        return None, None
    missing = [m for m in ("torch", "gpumem") if m in imports and not info[m]]
    if not missing:
        torch = info["torch"]
        if "torch" not in imports or not torch:
            return None, None
        return None, (_unrouted.torch_build_reason(
            torch["version"], torch["cuda"], torch["hip"],
            where=info["executable"]) or _unrouted.alloc_conf_reason(environ))
    exe = info["executable"]
    names = " and ".join("torch" if m == "torch" else "the gpumem package"
                         for m in missing)
    who = (os.path.basename(script) if script else
           f"-m {module}" if module else "the -c code")
    verb = "is" if _interp.python_command([command[0]], environ) else "runs"
    line = (f"gpumem-run: {command[0]} {verb} {exe}, which has no {names} "
            f"({who} imports {'it' if len(missing) == 1 else 'them'}): ")
    fixes = []
    alt = _alternative(missing, known_python, environ) \
        if verb == "is" else None
    if alt:
        path, other = alt
        words = argv[:len(argv) - len(command)] + [path] + command[1:]
        has = " and ".join(_has(other, m) for m in missing)
        fixes.append(f"run `{prog} {shlex.join(words)}` ({path} has {has})")
    if "torch" in missing:
        fixes.append(f"install torch into it (`{exe} -m pip install torch`)")
    if "gpumem" in missing and package_dir:
        fixes.append(f"set PYTHONPATH={package_dir}")
    return line + ", or ".join(fixes), None


def main(argv=None, python=None):
    """The launcher. `python`: the python3 gpumem was built and tested with
    (gpumem-run's configured one), offered when the command's own lacks a
    package."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts, command = parse_args(argv)
        lib = os.path.abspath(gtorch.library_path()) \
            if os.sep in gtorch.library_path() else gtorch.library_path()
        env = environment(opts, command, os.environ, lib)
    except UsageError as e:
        print(e.args[0] if e.args[0] else USAGE, file=sys.stderr)
        if e.args[0]:
            print(USAGE, file=sys.stderr)
        return 0 if not e.args[0] else 2
    except ValueError as e:
        print(f"gpumem-run: {e}", file=sys.stderr)
        return 2
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    prog = sys.argv[0] if os.path.basename(sys.argv[0]) == "gpumem-run" \
        else "gpumem-run"
    error, reason = check_python(argv, command, os.environ, python,
                                 package_dir, prog)
    if error:
        print(error, file=sys.stderr)
        return 1
    reason = reason or _unrouted.gpu_reason(os.environ)
    if reason and not os.environ.get(_unrouted.CUDART_ENV):
        _unrouted.say_once("gpumem-run", reason, env)
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        print(f"gpumem-run: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
