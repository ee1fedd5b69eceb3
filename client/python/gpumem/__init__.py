"""gpumem — Python binding of libgpumem, the client library of gpu-memd.

    import gpumem, torch
    with gpumem.Client(name="trainer") as c:       # $GPU_MEMD_SOCKET
        buf = c.alloc("256M", timeout=5)            # starts acquired
        x = buf.as_tensor(torch.float32, (1024, 1024))
        x.fill_(1.0)                                # no copy: buf's memory
        buf.release()                               # idle: may move to host
        with buf.held():                            # acquire ... release
            print(x.sum())
        print(c.status().pools)

Client (client.py) is a connection, Buffer (buffer.py) one allocation,
views.py turns a buffer into a tensor, numpy array or memoryview without a
copy, status.py gives what the daemon holds as dataclasses, errors.py maps
every error code to an exception carrying the daemon's sentence. The C
signatures are declared once, in _lib.py, which also finds libgpumem.so
($GPUMEM_LIBRARY overrides).

One default client per process, connected on first use by the module-level
functions (gpumem.alloc, gpumem.status); `with gpumem.use_client(c):` makes
them use `c` in a block (per thread and per asyncio task).

torch and numpy are optional and imported only by the views that need them.
gpumem.torch (the PyTorch allocator integration) is a separate module,
imported on its own; its oversubscription preview (offload_activations,
stream, idle) lives in offload.py, streaming.py and idle.py, over the thin
CUDA/sim layer _torchdev.py, and uses this package's Client and Buffer.
"""
import contextlib
import contextvars
import threading

from ._args import format_size, parse_size
from .buffer import Buffer
from .client import (DEFAULT_SOCKET, LEGACY_IPC, NO_SELF_WAIT, PIN_VRAM,
                     SPILLABLE, SWAPPABLE, YIELD, Client, Device)
from .errors import (Busy, ConnectFailed, CopyFailed, Disconnected,
                     GpumemError, InvalidArgument, LibraryNotFound,
                     LimitReached, NoSuchBuffer, NoSuchDevice, NotAllowed,
                     NotSupported,
                     OutOfMemory, ProtocolError, QuotaExceeded, Revoked,
                     TimedOut, TooLarge, strerror)
from .status import BufferInfo, ClientInfo, PeerLink, Pool, Status

__version__ = "0.1.0"

__all__ = [
    "Client", "Device", "Buffer", "Status", "Pool", "ClientInfo", "BufferInfo",
    "PeerLink",
    "default_client", "current_client", "use_client", "alloc", "status",
    "parse_size", "format_size", "strerror",
    "SWAPPABLE", "PIN_VRAM", "SPILLABLE", "LEGACY_IPC", "NO_SELF_WAIT",
    "YIELD",
    "DEFAULT_SOCKET",
    "GpumemError", "OutOfMemory", "TooLarge", "QuotaExceeded", "TimedOut",
    "NoSuchBuffer", "NoSuchDevice", "NotAllowed", "Busy", "NotSupported",
    "Revoked", "LimitReached", "InvalidArgument", "CopyFailed",
    "Disconnected", "ProtocolError", "ConnectFailed", "LibraryNotFound",
]

_default = None
_default_lock = threading.Lock()
_current = contextvars.ContextVar("gpumem_current_client", default=None)


def default_client():
    """The process's default Client, connected on first call
    ($GPU_MEMD_SOCKET, named after the program). A closed one (the daemon
    went away and it was closed) is replaced by a new connection."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = Client()
        return _default


def current_client():
    """The Client of the innermost use_client() block, else the default."""
    return _current.get() or default_client()


@contextlib.contextmanager
def use_client(client):
    """Make `client` the one gpumem.alloc and gpumem.status use in the
    block (this thread or task only)."""
    token = _current.set(client)
    try:
        yield client
    finally:
        _current.reset(token)


def alloc(size, *, device=0, flags=SWAPPABLE, timeout=None):
    """current_client().alloc(...)."""
    return current_client().alloc(size, device=device, flags=flags,
                                  timeout=timeout)


def status(what="buffers", pid=0):
    """current_client().status(...): what the daemon holds."""
    return current_client().status(what, pid)
