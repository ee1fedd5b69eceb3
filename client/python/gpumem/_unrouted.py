"""_unrouted — why no CUDA allocation of a program would go through gpu-memd,
and the one notice that says so.

gpumem-run (run.py) and gpumem.torch.enable() (torch.py) put the shim in a
program that may never call the cudaMalloc it answers: a PyTorch built
without CUDA, a machine with no usable GPU, or an allocator configuration
the shim does not answer (PYTORCH_CUDA_ALLOC_CONF's cudaMallocAsync backend
and expandable segments). The program then runs exactly as it would
without gpu-memd, which is fine, but the user should hear it once rather
than believe the daemon shares the GPU. The reasons here are plain
functions over what each caller can see without side effects on the
program: the launcher reads an interpreter's torch from its files (_interp),
enable() asks the torch it has imported.

The notice is one line on stderr per process tree: the first to say it
sets GPU_MEMD_TORCH_NOTICED=1, which children (and the program gpumem-run
starts) inherit. GPU_MEMD_TORCH_QUIET=1 silences it, as it silences the
shim. It never stops the program.
"""
import ctypes
import os
import sys

NOTICED_ENV = "GPU_MEMD_TORCH_NOTICED"
QUIET_ENV = "GPU_MEMD_TORCH_QUIET"
CUDART_ENV = "GPU_MEMD_TORCH_CUDART"
ALLOC_CONF_ENV = "PYTORCH_CUDA_ALLOC_CONF"


def quiet(environ):
    value = environ.get(QUIET_ENV, "")
    return value not in ("", "0")


def notice_line(who, reason):
    return (f"{who}: no CUDA allocation will go through gpu-memd: {reason}; "
            "the program runs as it would without it")


def say_once(who, reason, environ=None):
    """Write the notice for `reason` on stderr unless it was said already in
    this process tree or GPU_MEMD_TORCH_QUIET is set; mark `environ`
    (default os.environ) so that it is not said again. True when written."""
    environ = os.environ if environ is None else environ
    if environ.get(NOTICED_ENV) == "1" or quiet(environ):
        return False
    environ[NOTICED_ENV] = "1"
    print(notice_line(who, reason), file=sys.stderr, flush=True)
    return True


def alloc_conf_reason(environ):
    """PyTorch allocates with cudaMallocAsync (backend:cudaMallocAsync) or
    cuMemCreate (expandable_segments:True), which the shim does not answer;
    None for a configuration the shim serves."""
    conf = environ.get(ALLOC_CONF_ENV, "")
    for item in conf.replace(" ", "").split(","):
        key, _, value = item.partition(":")
        if key == "backend" and value == "cudaMallocAsync":
            return (f"{ALLOC_CONF_ENV}={conf} has PyTorch allocate with "
                    "cudaMallocAsync, which gpu-memd's library does not answer")
        if key == "expandable_segments" and value.lower() == "true":
            return (f"{ALLOC_CONF_ENV}={conf} has PyTorch allocate with "
                    "cuMemCreate, which gpu-memd's library does not answer")
    return None


def torch_build_reason(version, cuda, hip=None, where=""):
    """A PyTorch built without CUDA: its allocations never call cudaMalloc.
    `cuda` and `hip` as in torch.version; `where` names the interpreter."""
    if cuda:
        return None
    of = f" of {where}" if where else ""
    if hip:
        return (f"PyTorch {version}{of} is built for ROCm (HIP {hip}), not "
                "CUDA")
    return f"PyTorch {version}{of} is built without CUDA (CPU only)"


def gpu_reason(environ, init=True):
    """No usable GPU for this process: the CUDA driver (libcuda.so.1) cannot
    be loaded, or with `init` it finds no device (cuInit, cuDeviceGetCount,
    which honour CUDA_VISIBLE_DEVICES). None where a GPU is usable, and
    where GPU_MEMD_TORCH_CUDART names a runtime of the user's choosing,
    which this cannot judge. `init` initializes CUDA in this process: for
    a launcher about to exec, not for a program that may fork."""
    if environ.get(CUDART_ENV):
        return None
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no usable GPU (the CUDA driver, libcuda.so.1, is not installed)"
    if not init:
        return None
    rc = cuda.cuInit(0)
    count = ctypes.c_int(0)
    if rc == 0:
        rc = cuda.cuDeviceGetCount(ctypes.byref(count))
    if rc == 0 and count.value > 0:
        return None
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    shown = f"; CUDA_VISIBLE_DEVICES={visible}" if visible is not None else ""
    if rc != 0:
        text = ctypes.c_char_p()
        cuda.cuGetErrorString(rc, ctypes.byref(text))
        why = text.value.decode() if text.value else f"error {rc}"
        return f"no usable GPU (the CUDA driver says: {why}{shown})"
    return f"no usable GPU (the CUDA driver sees no device{shown})"


def in_process_reason(torch, environ):
    """For enable(): why the `torch` this process imported (None: none is
    importable) allocates nothing through the shim, or None. Without torch
    only a missing CUDA driver is told (CUDA is not initialized here).
    None where GPU_MEMD_TORCH_CUDART names the runtime: the user's choice,
    which this cannot judge."""
    if environ.get(CUDART_ENV):
        return None
    if torch is None:
        return gpu_reason(environ, init=False)
    version = getattr(torch, "version", None)
    reason = torch_build_reason(getattr(torch, "__version__", "?"),
                                getattr(version, "cuda", None),
                                getattr(version, "hip", None))
    if reason:
        return reason
    reason = alloc_conf_reason(environ)
    if reason:
        return reason
    if not torch.cuda.is_available():
        return gpu_reason(environ, init=False) or (
            "PyTorch sees no usable GPU (torch.cuda.is_available() is False)")
    return None
