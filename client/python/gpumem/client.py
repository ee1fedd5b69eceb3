"""client — a connection to gpu-memd (gmd_client) as a Python object.

A Client is thread-safe like the gmd_client under it, with one addition the
C library leaves to its caller: gmd_disconnect must not overlap any other
call on the client. Every call therefore goes through Client._using(),
which counts calls in flight; close() marks the client closed (new calls
raise Disconnected), waits for those in flight, then disconnects. So a
Buffer freed by the garbage collector on one thread cannot race a close()
on another.

Timeouts are in seconds, as elsewhere in Python: None waits forever, 0 does
not wait. Sizes are bytes or a string the daemon's config would accept
("256M", "2G").
"""
import ctypes
import dataclasses
import os
import threading
import weakref

from . import _lib, errors
from ._args import parse_size, timeout_ms
from .buffer import Buffer
from .status import status_from_c

SWAPPABLE = 0          # default: moves only while released
PIN_VRAM = 1 << 0      # never leaves VRAM
SPILLABLE = 1 << 1     # may live on host memory even while in use
LEGACY_IPC = 1 << 2    # cuda only: plain cudaIpcMemHandle
NO_SELF_WAIT = 1 << 3  # how to wait: fail at once on room only this
                       # process holds (gpumem.h GMD_ALLOC_NO_SELF_WAIT)
YIELD = 1 << 4         # how to wait: what this process holds may move out
                       # meanwhile and is back before the call returns
                       # (gpumem.h GMD_ALLOC_YIELD)

DEFAULT_SOCKET = "/run/gpu-memd/gpu-memd.sock"

_WHAT = {"pools": _lib.GMD_STATUS_POOLS, "clients": _lib.GMD_STATUS_CLIENTS,
         "buffers": _lib.GMD_STATUS_BUFFERS}


class _Using:
    """The guard of one call in flight on a client (see the file comment)."""
    __slots__ = ("client",)

    def __init__(self, client):
        self.client = client

    def __enter__(self):
        c = self.client
        with c._cond:
            if c._handle is None:
                raise errors.Disconnected(
                    _lib.GMD_ECONN, f"this gpumem.Client ({c.name or c.socket})"
                    " is closed: connect a new one")
            c._calls += 1
            return c._handle

    def __exit__(self, *exc):
        c = self.client
        with c._cond:
            c._calls -= 1
            if c._calls == 0:
                c._cond.notify_all()


@dataclasses.dataclass(frozen=True)
class Device:
    """One of the daemon's devices: its number (what alloc's `device`
    takes), its UUID as nvidia-smi prints it and its PCI bus id ("" from a
    daemon older than these). A process's CUDA device N is the daemon's
    device Client.device_from_cuda(N), not necessarily device N."""
    index: int
    uuid: str
    pci_bus_id: str


class Client:
    """A connection to gpu-memd. Its buffers live until freed, until the
    Client is closed, or until the process exits (the daemon frees what a
    dead client held).

    `socket`: the daemon's socket (None: $GPU_MEMD_SOCKET, else
    /run/gpu-memd/gpu-memd.sock). `name`: how gpu-memctl shows this client
    (None: the program's name). Raises ConnectFailed when no daemon answers,
    InvalidArgument for a bad $GPU_MEMD_PRIORITY, $GPU_MEMD_CACHE* or
    $GPU_MEMD_KEEP_MAPPINGS.
    Use it as a context manager to close it at the end of a block.
    """

    def __init__(self, socket=None, name=None):
        self._cond = threading.Condition()
        self._calls = 0
        self._handle = None
        self._buffers = weakref.WeakSet()
        self.socket = socket or os.environ.get("GPU_MEMD_SOCKET") \
            or DEFAULT_SOCKET
        self.name = name
        lib = _lib.lib()
        handle = ctypes.c_void_p()
        rc = lib.gmd_connect(os.fsencode(socket) if socket else None,
                             name.encode() if name else None,
                             ctypes.byref(handle))
        if rc < 0:
            raise errors.connect_error(rc)
        self._handle = handle.value
        self.backend = _lib.text(lib.gmd_client_backend(self._handle))
        self.protocol_version = lib.gmd_client_protocol_version(self._handle)
        self.device_count = lib.gmd_client_device_count(self._handle)
        self.devices = [self._device(i) for i in range(self.device_count)]

    def _device(self, index):
        lib = _lib.lib()
        uuid = ctypes.create_string_buffer(48)          # GMD_UUID_SIZE
        bus = ctypes.create_string_buffer(32)           # GMD_PCI_BUS_ID_SIZE
        if lib.gmd_device_uuid(self._handle, index, uuid, 48) < 0:
            uuid.value = b""
        if lib.gmd_device_pci_bus_id(self._handle, index, bus, 32) < 0:
            bus.value = b""
        return Device(index, _lib.text(uuid.value), _lib.text(bus.value))

    def device_from_cuda(self, ordinal):
        """The daemon's device (a number for alloc's `device`) that is
        this process's CUDA device `ordinal` (torch's "cuda:N"), matched
        by UUID: under CUDA_VISIBLE_DEVICES=1 (Slurm, torchrun) the
        process's device 0 is the daemon's device 1. On the sim backend
        CUDA's CUDA_VISIBLE_DEVICES rule is applied to the daemon's
        devices. Raises NoSuchDevice when the process has no such device
        or its GPU is not one the daemon serves (the message names it and
        the daemon's), NotSupported from a daemon that does not say its
        devices' UUIDs."""
        device = ctypes.c_uint()
        self._call(_lib.lib().gmd_device_from_cuda, int(ordinal),
                   ctypes.byref(device))
        return device.value

    def __repr__(self):
        state = "closed" if self.closed else f"backend={self.backend}"
        return f"<gpumem.Client {self.socket} {state}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass    # interpreter shutdown: the daemon frees on disconnect

    @property
    def closed(self):
        return self._handle is None

    def _using(self):
        return _Using(self)

    def _call(self, fn, *args):
        """fn(client handle, *args), raising the error it returns."""
        with self._using() as handle:
            return errors.check(fn(handle, *args))

    def close(self):
        """Disconnect. The daemon frees every buffer still held; their
        addresses, and every view of them, become invalid. Waits for calls
        in flight on other threads (one waiting with timeout=None holds it
        until it returns). Closing twice does nothing."""
        with self._cond:
            handle = self._handle
            if handle is None:
                return
            self._handle = None
            while self._calls:
                self._cond.wait()
        for buf in list(self._buffers):
            buf._forget("when its Client was closed")
        _lib.lib().gmd_disconnect(handle)

    # ---- buffers ---------------------------------------------------------

    def alloc(self, size, *, device=0, flags=SWAPPABLE, timeout=None):
        """Allocate `size` bytes (int or "256M"; rounded up to the device's
        granularity) on `device` with placement `flags` (SWAPPABLE,
        PIN_VRAM, SPILLABLE, LEGACY_IPC). Waits up to `timeout` seconds for
        room (None: forever, 0: not at all). The Buffer starts acquired.
        Raises TooLarge, OutOfMemory / TimedOut, QuotaExceeded,
        InvalidArgument, NotSupported."""
        nbytes = parse_size(size)
        ms = timeout_ms(timeout)
        handle = ctypes.c_void_p()
        self._call(_lib.lib().gmd_alloc, nbytes, device, flags, ms,
                   ctypes.byref(handle))
        buf = Buffer(self, handle.value)
        self._buffers.add(buf)
        return buf

    def trim_cache(self):
        """Give every mapping parked in this client's cache back to the
        daemon now; returns how many went back."""
        return self._call(_lib.lib().gmd_trim_cache)

    def _each(self, fn, buffers, *args):
        if not buffers:
            self._call(fn, None, *args)
            return
        for buf in buffers:
            if not isinstance(buf, Buffer) or buf._client is not self:
                raise errors.InvalidArgument(
                    _lib.EINVAL, f"{buf!r} is not a Buffer of this Client")
            self._call(fn, buf._live(), *args)

    def pageout(self, *buffers, wait=True):
        """Move released buffers (all of this client's when none are named)
        to host memory; returns once the moves are queued. wait=False:
        once the requests are sent, without waiting for the daemon's
        answers; flush() raises a refusal."""
        lib = _lib.lib()
        self._each(lib.gmd_pageout if wait else lib.gmd_pageout_nowait,
                   buffers)

    def prefetch(self, *buffers, wait=True):
        """Bring buffers (all when none are named) back to VRAM, behind
        every other move; returns at once. wait=False: not even waiting
        for the daemon's answers; flush() raises a refusal."""
        lib = _lib.lib()
        self._each(lib.gmd_prefetch if wait else lib.gmd_prefetch_nowait,
                   buffers)

    def flush(self, timeout=None):
        """Wait until every request sent with wait=False (release_after,
        pageout, prefetch; from any thread) is answered, then raise the
        first refusal among them since the last flush, as the waiting call
        would have raised it, its message naming the call and the buffer
        ("gmd_pageout_nowait of buffer 7: not enough host memory ...");
        later refusals of the same stretch are not kept. Raises TimedOut
        after `timeout` seconds (None: as long as it takes; the refusal, if
        one came, stays for the next flush), Disconnected once the daemon
        is gone. The daemon acts on one client's requests in the order
        sent, so a waiting call after them (acquire, wait) needs no flush
        to see their effect."""
        self._call(_lib.lib().gmd_flush, timeout_ms(timeout))

    def wait(self, *buffers, timeout=None):
        """Wait until the buffers (all when none are named) are not moving.
        Raises TimedOut after `timeout` seconds, CopyFailed when a move of
        one of them failed."""
        self._each(_lib.lib().gmd_wait, buffers, timeout_ms(timeout))

    @property
    def buffers(self):
        """This client's live Buffers (those not freed)."""
        return [b for b in list(self._buffers) if not b.freed]

    # ---- status and administration ---------------------------------------

    def status(self, what="buffers", pid=0):
        """What the daemon holds, as a gpumem.Status: pools, plus clients
        (what="clients"), plus buffers (what="buffers", limited to process
        `pid` unless 0)."""
        if what not in _WHAT:
            raise errors.InvalidArgument(
                _lib.EINVAL, f"what={what!r}: one of {', '.join(_WHAT)}")
        lib = _lib.lib()
        out = ctypes.POINTER(_lib.Status)()
        self._call(lib.gmd_query_status, _WHAT[what], pid, ctypes.byref(out))
        try:
            return status_from_c(out.contents)
        finally:
            lib.gmd_status_free(out)

    def report_plan(self, planner, kept=0, offloaded=0, recomputed=0,
                    streamed=0):
        """Tell the daemon the memory plan `planner` (printable ASCII, at
        most 32 bytes) chose, in bytes kept on the GPU, offloaded to host
        memory, recomputed and streamed, for administrators to see in
        gpu-memctl status. Sent without waiting; each report replaces the
        last. Raises InvalidArgument for a bad name."""
        self._call(_lib.lib().gmd_report_plan, planner.encode(), int(kept),
                   int(offloaded), int(recomputed), int(streamed))

    def admin_drain(self, pid):
        """Revoke and free every buffer of process `pid`'s clients, then
        disconnect them (root or the admin group; else NotAllowed)."""
        self._call(_lib.lib().gmd_admin_drain, pid)

    def admin_set_priority(self, pid, priority):
        """Set the priority of process `pid`'s clients."""
        self._call(_lib.lib().gmd_admin_set_priority, pid, priority)

    def admin_evict(self, pid):
        """Move process `pid`'s released buffers to host memory."""
        self._call(_lib.lib().gmd_admin_evict, pid)
