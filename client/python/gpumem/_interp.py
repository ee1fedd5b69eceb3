"""_interp — which Python a gpumem-run command runs, what that Python has,
and what the program imports, read before it starts.

gpumem-run is often started by one python3 and told to run another: `python`
resolves to whatever is first on PATH (a pyenv shim, a venv), which may lack
the torch that Debian's /usr/bin/python3 has, and then the program dies on
its first line with a bare ModuleNotFoundError. So the launcher asks the
command's interpreter, in a child process that imports nothing (find_spec,
and torch's version.py read as text: no torch import, no CUDA), where its
torch and gpumem are, and reads the script's module-level imports with ast.
The interpreter is never changed: the launcher only says what it found.
"""
import ast
import json
import os
import re
import shutil
import subprocess

# Runs in the command's interpreter: argv[1] is the script's folder (what
# `python script.py` puts first on sys.path), or "".
PROBE = r"""
import importlib.util, json, os, re, sys
if sys.argv[1]:
    sys.path.insert(0, sys.argv[1])
def spec(name):
    try:
        return importlib.util.find_spec(name)
    except Exception:
        return None
out = {"executable": sys.executable, "torch": None,
       "gpumem": None}
s = spec("torch")
if s is not None and s.submodule_search_locations:
    where = list(s.submodule_search_locations)[0]
    t = {"path": where, "version": "?", "cuda": None, "hip": None}
    try:
        with open(os.path.join(where, "version.py")) as f:
            text = f.read()
        for key in ("__version__", "cuda", "hip"):
            m = re.search(r"^%s\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]" % key,
                          text, re.M)
            if m:
                t[key if key != "__version__" else "version"] = m.group(1)
    except OSError:
        pass
    try:
        libs = os.listdir(os.path.join(where, "lib"))
    except OSError:
        libs = []
    if t["cuda"] is None and any(n.startswith(("libtorch_cuda", "libc10_cuda"))
                                 for n in libs):
        t["cuda"] = "?"
    out["torch"] = t
s = spec("gpumem")
if s is not None and s.origin:
    out["gpumem"] = os.path.dirname(os.path.dirname(s.origin))
print(json.dumps(out))
"""

_PYTHON = re.compile(r"python[0-9.]*$")
# Options of python that take the next word as their argument.
_TAKES_ARG = ("-W", "-X", "--check-hash-based-pycs")


def resolve(program, environ):
    """The file `program` runs (looked up on PATH like execvp), or None."""
    if os.sep in program:
        return program if os.path.isfile(program) else None
    return shutil.which(program, path=environ.get("PATH", os.defpath))


def _shebang_python(path, environ):
    """The interpreter of a script whose #! line names a python, or None."""
    try:
        with open(path, "rb") as f:
            first = f.readline(256).decode("utf-8", "replace")
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
    if not words or not _PYTHON.match(os.path.basename(words[0])):
        return None
    return words[0] if os.sep in words[0] else resolve(words[0], environ)


def python_command(command, environ):
    """(interpreter, script path, module, code) when `command` runs Python:
    `python3 [opts] script.py|-m mod|-c code ...`, or a script whose #! line
    names a python (torchrun). None for any other program."""
    if _PYTHON.match(os.path.basename(command[0])):
        i = 1
        while i < len(command):
            word = command[i]
            if word in ("-m", "-c"):
                arg = command[i + 1] if i + 1 < len(command) else ""
                return (command[0], None, arg if word == "-m" else None,
                        arg if word == "-c" else None)
            if not word.startswith("-") or word == "-":
                return command[0], (None if word == "-" else word), None, None
            i += 2 if word in _TAKES_ARG else 1
        return command[0], None, None, None
    path = resolve(command[0], environ)
    interpreter = path and _shebang_python(path, environ)
    return (interpreter, path, None, None) if interpreter else None


def module_imports(source):
    """The top-level packages a module imports unconditionally: the
    import statements of its body, not those inside if/try/def (optional
    or lazy ones). None when it cannot be parsed, or when it changes its
    own import path (sys.path, site.addsitedir): what the interpreter has
    then says nothing of what the program finds."""
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) \
        else source
    if "sys.path" in text or "addsitedir" in text:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def program_imports(script, module, code):
    """What the program imports for sure (module_imports of the script or
    the -c code; a -m module's own package), or None when unknown."""
    if module:
        return {module.split(".")[0]}
    if code is not None:
        return module_imports(code)
    if script:
        try:
            with open(script, "rb") as f:
                return module_imports(f.read())
        except OSError:
            return None
    return None


def probe(interpreter, script, environ, timeout=30):
    """What `interpreter` has (PROBE's dict: executable, torch, gpumem),
    run with `environ`; None when it cannot tell (not a Python 3, gone)."""
    folder = os.path.dirname(os.path.abspath(script)) if script else ""
    try:
        p = subprocess.run([interpreter, "-c", PROBE, folder], env=environ,
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=timeout)
        return json.loads(p.stdout) if p.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
