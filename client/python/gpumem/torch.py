"""gpumem.torch — PyTorch on gpu-memd, with one line at the top of a script.

    import gpumem.torch; gpumem.torch.enable()
    import torch                                  # before or after: both work

From then on every cudaMalloc of the process — PyTorch's caching allocator,
from every thread, autograd's backward thread included — takes its memory
from gpu-memd, through the shim libgpumem_torch.so (client/torch/cudart.c).
PyTorch's caching stays on top: the daemon sees segments, not tensors, and a
training step that reuses its memory never talks to the daemon.
torch.cuda.empty_cache() gives idle segments back to the daemon, and
torch.cuda.memory_allocated/reserved/stats, torch.cuda.mem_get_info (which
reports the daemon's pool) keep working.

The shim must be ahead of libcudart in the process's symbol scope. enable()
loads it with RTLD_GLOBAL when no CUDA library is loaded yet; when PyTorch
was imported first it re-executes the program (sys.orig_argv) with the shim
in LD_PRELOAD, which costs one interpreter start at the top of the script.
`gpumem-run python train.py` (gpumem.run) preloads it without any edit.

When the pool has no room an allocation waits: up to `timeout_ms` (argument)
or $GPU_MEMD_TORCH_TIMEOUT_MS, else as long as it takes; then PyTorch raises
torch.OutOfMemoryError and, with enable(), its message is the daemon's
sentence (who holds what). This module does not import torch until enable()
has put the shim in place, and needs no other part of the gpumem package
but _unrouted.py (the notice when nothing can go through gpu-memd).

Oversubscription (preview), loaded on first use and independent
of enable(): offload_activations() (offload.py: saved activations to
gpu-memd buffers in the forward pass, prefetched back in the backward),
stream() (streaming.py: a model's weights block by block), spill()
(spill.py: a model's weights placed VRAM first, then on host memory the
GPU reads, never moved) and idle() (idle.py: give their buffers back
between steps).
"""

import ctypes
import os
import sys

TIMEOUT_ENV = "GPU_MEMD_TORCH_TIMEOUT_MS"
NAME_ENV = "GPU_MEMD_TORCH_NAME"
QUIET_ENV = "GPU_MEMD_TORCH_QUIET"
LIB_ENV = "GPU_MEMD_TORCH_LIB"
LIB_NAME = "libgpumem_torch.so.0"

# The counters of gmd_torch_stats, in the order of gpumem_torch.h.
STAT_NAMES = (
    "allocs", "alloc_failures", "frees", "bytes_held", "segments_held",
    "waits", "wait_us", "threads", "foreign_frees", "meminfo_calls",
)

_lib = None
_observer_attached = False


class SetupError(RuntimeError):
    """gpumem.torch could not put PyTorch on gpu-memd; the message says why."""


def parse_timeout(text):
    """Milliseconds from $GPU_MEMD_TORCH_TIMEOUT_MS's text: None or "" is -1
    (no deadline); otherwise a whole number >= -1. ValueError for anything
    else, like the shim (a typo must not mean "wait forever")."""
    if text is None or text == "":
        return -1
    try:
        value = int(text, 10)
    except ValueError:
        value = None
    if value is None or value < -1 or text.strip() != text:
        raise ValueError(f"{TIMEOUT_ENV}={text!r} is not a number of "
                         "milliseconds (-1 or unset: wait as long as it takes)")
    return value


def script_name(argv):
    """The name gpu-memctl shows for a command line: a Python script's file
    name, "-m module" as the module, "-c" as "python -c", else the program's
    file name. Mirrors torch_settings_name_from_cmdline in the shim."""
    if not argv:
        return "python"
    first = os.path.basename(argv[0])
    if not first.startswith("python"):
        return first[:64]
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "-m":
            return argv[i + 1][:64] if i + 1 < len(argv) else first[:64]
        if word == "-c":
            return "python -c"
        if not word.startswith("-") or word == "-":
            return os.path.basename(word)[:64]
        if word in ("-W", "-X", "--check-hash-based-pycs"):
            i += 1
        i += 1
    return first[:64]


def library_path():
    """Where libgpumem_torch.so is: $GPU_MEMD_TORCH_LIB, the build tree
    beside this source tree (build*/client/torch), the library folder of an
    installed tree (PREFIX/lib beside PREFIX/lib/python3.X/...), else the
    bare soname for the dynamic loader to find."""
    env = os.environ.get(LIB_ENV)
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", "..", ".."))
    candidates = []
    if os.path.isfile(os.path.join(root, "CMakeLists.txt")):
        for entry in sorted(os.listdir(root)):
            if entry.startswith("build"):
                candidates.append(os.path.join(root, entry, "client", "torch",
                                               LIB_NAME))
    for up in ("../../..", "../../../.."):
        candidates.append(os.path.normpath(os.path.join(here, up, LIB_NAME)))
    for path in candidates:
        if os.path.isfile(path):
            return path
    return LIB_NAME


def _maps():
    try:
        with open("/proc/self/maps") as f:
            return f.read()
    except OSError:
        return ""


def loaded_path(maps_text):
    """The path of the shim among the mapped files, or None."""
    for line in maps_text.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and "libgpumem_torch.so" in fields[5]:
            return fields[5].strip()
    return None


_shim_seen = False


def _shim_loaded():
    """Whether the shim is in this process (enable(), or gpumem-run's
    preload without an enable()). Once in, it stays: the answer is kept."""
    global _shim_seen
    if not _shim_seen:
        _shim_seen = _lib is not None or loaded_path(_maps()) is not None
    return _shim_seen


def placement(maps_text):
    """What enable() must do, from the text of /proc/self/maps: "present"
    (the shim is loaded already: preloaded or enabled before), "load" (no
    CUDA runtime yet: dlopen the shim RTLD_GLOBAL, ahead of it) or "reexec"
    (libcudart or PyTorch's CUDA library is in: only LD_PRELOAD can put the
    shim ahead of it)."""
    if "libgpumem_torch.so" in maps_text:
        return "present"
    if "libcudart.so" in maps_text or "libtorch_cuda.so" in maps_text:
        return "reexec"
    return "load"


def reexec_command(orig_argv, environ, lib):
    """The environment and argv that re-execute this program with the shim
    preloaded; SetupError when it cannot be re-executed (an interactive
    interpreter, or a re-exec that did not take: a loop)."""
    if environ.get("GPU_MEMD_TORCH_REEXEC") == "1":
        raise SetupError(
            "gpumem.torch: the program was re-executed with "
            f"LD_PRELOAD={environ.get('LD_PRELOAD', '')} but the shim is "
            "still not loaded: check that the path exists "
            f"(set {LIB_ENV} to the full path of {LIB_NAME})")
    if len(orig_argv) < 2 or orig_argv[1] in ("-i",) or sys.flags.interactive:
        raise SetupError(
            "gpumem.torch.enable() must come before `import torch` in an "
            "interactive session (PyTorch has loaded the CUDA runtime already "
            "and this interpreter cannot be restarted); or start it under "
            "gpumem-run")
    env = dict(environ)
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = lib + (" " + preload if preload else "")
    env["GPU_MEMD_TORCH_REEXEC"] = "1"
    return list(orig_argv), env


def _load(timeout_ms, name):
    global _lib
    if name is not None:
        os.environ[NAME_ENV] = name
    elif not os.environ.get(NAME_ENV):
        os.environ[NAME_ENV] = script_name(getattr(sys, "orig_argv", sys.argv))
    if timeout_ms is not None:
        os.environ[TIMEOUT_ENV] = str(int(timeout_ms))
    parse_timeout(os.environ.get(TIMEOUT_ENV))
    maps = _maps()
    how = placement(maps)
    lib = loaded_path(maps) if how == "present" else library_path()
    if how == "reexec":
        argv, env = reexec_command(getattr(sys, "orig_argv", [sys.executable]),
                                   os.environ, lib)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, argv, env)
    try:
        # When preloaded, this opens the same copy (the path from the maps).
        _lib = ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        raise SetupError(f"gpumem.torch: cannot load {lib}: {e} (build it with "
                         f"`make`, or set {LIB_ENV})") from None
    _lib.gmd_torch_connect.restype = ctypes.c_int
    _lib.gmd_torch_last_error.restype = ctypes.c_char_p
    _lib.gmd_torch_stats.restype = ctypes.c_size_t
    _lib.gmd_torch_stats.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                                     ctypes.c_size_t]
    _lib.gmd_torch_set_timeout.argtypes = [ctypes.c_int64]
    _lib.gmd_torch_set_quiet.argtypes = [ctypes.c_int]
    return _lib


def last_error():
    """The shim's last failure in this process ("" if none): for a refused
    allocation, the daemon's sentence."""
    if _lib is None:
        return ""
    return _lib.gmd_torch_last_error().decode("utf-8", "replace")


def stats():
    """The shim's counters as a dict (STAT_NAMES): allocations that reached
    the daemon, frees, bytes and segments held now, waits, threads seen."""
    if _lib is None:
        raise SetupError("gpumem.torch.enable() was not called")
    values = (ctypes.c_uint64 * len(STAT_NAMES))()
    n = _lib.gmd_torch_stats(values, len(STAT_NAMES))
    return {STAT_NAMES[i]: int(values[i]) for i in range(n)}


def set_timeout(timeout_ms):
    """Wait at most `timeout_ms` for room from now on (-1: no deadline)."""
    if _lib is None:
        raise SetupError("gpumem.torch.enable() was not called")
    if _lib.gmd_torch_set_timeout(int(timeout_ms)) != 0:
        raise ValueError(f"timeout_ms={timeout_ms}: -1 or more, please")


def _on_out_of_memory(device, alloc, device_total, device_free):
    # Called by PyTorch's allocator, on the thread that allocated, after it
    # freed its cache and the daemon still refused; PyTorch passes this
    # exception on instead of its own message.
    import torch
    sentence = last_error()
    if not sentence:
        return
    raise torch.OutOfMemoryError(
        f"gpu-memd: {sentence} (PyTorch asked for {_size(alloc)} on "
        f"cuda:{device}, after giving back what it had cached)")


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def enable(timeout_ms=None, name=None):
    """Put this process's CUDA allocations on gpu-memd. Call it at the top
    of the script, before any CUDA work (it may restart the interpreter
    when PyTorch was imported first). `timeout_ms`: how long an allocation
    waits for room (None: $GPU_MEMD_TORCH_TIMEOUT_MS, else no deadline);
    `name`: what gpu-memctl shows (default: the script's file name). The
    socket is $GPU_MEMD_SOCKET, the priority $GPU_MEMD_PRIORITY. Raises
    SetupError when the daemon cannot be reached. When nothing this process
    allocates can go through gpu-memd (a PyTorch built without CUDA, no
    usable GPU, PYTORCH_CUDA_ALLOC_CONF's cudaMallocAsync or expandable
    segments) it says so in one line on stderr, once (_unrouted.py), and
    the program goes on. Returns stats()."""
    global _observer_attached
    lib = _lib or _load(timeout_ms, name)
    if timeout_ms is not None:
        set_timeout(timeout_ms)
    if lib.gmd_torch_connect() != 0:
        raise SetupError(f"gpumem.torch: {last_error()}")
    if not _observer_attached:
        try:
            import torch
        except ImportError:
            torch = None    # a CUDA program without PyTorch: the shim serves it
        from . import _unrouted
        reason = _unrouted.in_process_reason(torch, os.environ)
        if reason:
            _unrouted.say_once("gpumem.torch", reason)
            return stats()
        attach = getattr(torch, "_C", None) and getattr(
            torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is not None and torch.cuda.is_available():
            attach(_on_out_of_memory)
            # The exception carries the sentence; no stderr line as well.
            lib.gmd_torch_set_quiet(1)
            _observer_attached = True
    return stats()


_LAZY = {"offload_activations": "offload", "Offloader": "offload",
         "stream": "streaming", "Streamer": "streaming", "idle": "idle",
         "spill": "spill", "Spiller": "spill", "fit": "fit",
         "Fitter": "fit", "fitted": "fit"}


def __getattr__(name):
    # offload_activations, stream, idle: imported on first use, so that
    # `import gpumem.torch` stays free of the rest of the package.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpumem.torch' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f"gpumem.{module}"), name)
    globals()[name] = value
    return value
