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
raises torch.OutOfMemoryError. Exit status 2 for a bad command line, 127
when PROGRAM cannot be executed.
"""

import os
import sys

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


def main(argv=None):
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
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        print(f"gpumem-run: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
