"""buffer — one gpu-memd buffer (gmd_buffer) as a Python object.

A Buffer belongs to the Client that allocated it and keeps that Client
alive. Its address (`ptr`) never changes while it lives, even while the
daemon moves it between tiers; touch the memory only while it is acquired
(after alloc or acquire, before release): a released SWAPPABLE buffer may
be out on host memory, its address not mapped, and touching it faults.

free() is idempotent, like file.close(); a Buffer that is garbage-collected
is freed, so a view (views.py) holds its Buffer for as long as it lives.
Any other call on a freed Buffer raises NoSuchBuffer without reaching the
C library, whose handle is gone.
"""
import contextlib

from . import _lib, errors, views
from ._args import timeout_ms

READ_ONLY = 1 << 0      # gpumem.h GMD_ACQUIRE_READ_ONLY
LEND = 1 << 1           # gpumem.h GMD_ACQUIRE_YIELD


def stream_handle(stream):
    """A CUstream from None (the default stream), an int, or an object
    with a `cuda_stream` (torch.cuda.Stream) or `ptr` (cupy) int."""
    if stream is None:
        return None
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream or None
    for attr in ("cuda_stream", "ptr"):
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value or None
    raise TypeError(f"stream must be an int handle, a torch.cuda.Stream or "
                    f"None, not {type(stream).__name__}")



def _acquire_flags(read_only, lend):
    """GMD_ACQUIRE_* bits of acquire()'s arguments."""
    return (READ_ONLY if read_only else 0) | (LEND if lend else 0)

class Buffer:
    """Memory from gpu-memd: `ptr`, `size` (bytes, rounded to the
    granularity), `id` (as gpu-memctl shows it), `device`, `tier`.
    Made by Client.alloc. Use as a context manager to free it at the end of
    a block; `held()` acquires and releases around one."""

    def __init__(self, client, handle):
        lib = _lib.lib()
        self._client = client
        self._handle = handle
        self._gone = None
        self._ptr = lib.gmd_buffer_ptr(handle) or 0
        self.size = lib.gmd_buffer_size(handle)
        self.id = lib.gmd_buffer_id(handle)
        self.device = lib.gmd_buffer_device(handle)

    def __repr__(self):
        state = f"freed ({self._gone})" if self.freed else \
            f"ptr=0x{self._ptr:x} tier={self.tier}"
        return (f"<gpumem.Buffer {self.id} {self.size} bytes "
                f"device {self.device} {state}>")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass    # closed client or interpreter shutdown: nothing to do

    @property
    def client(self):
        return self._client

    @property
    def freed(self):
        return self._handle is None

    def _live(self):
        handle = self._handle
        if handle is None:
            raise errors.NoSuchBuffer(
                _lib.GMD_ENOENT, f"buffer {self.id} was freed {self._gone}: "
                "allocate a new one")
        return handle

    def _forget(self, why):
        """The handle is gone (freed, or freed by gmd_disconnect)."""
        self._handle = None
        self._gone = why

    @property
    def ptr(self):
        """The address: a device pointer (cuda) or host pointer (sim)."""
        self._live()
        return self._ptr

    @property
    def tier(self):
        """"vram" or "host": where the bytes behind the address are."""
        lib = _lib.lib()
        with self._client._using():
            return _lib.text(lib.gmd_tier_name(
                lib.gmd_buffer_tier(self._live())))

    def free(self):
        """Give the buffer back (or park it in the client's cache for the
        next alloc of its shape). Its address and views become invalid.
        Freeing twice does nothing."""
        handle = self._handle
        if handle is None or self._client.closed:
            return
        self._forget("by free()")
        try:
            self._client._call(_lib.lib().gmd_free, handle)
        except (errors.Disconnected, errors.NoSuchBuffer):
            raise   # the library freed the handle with the error
        except errors.GpumemError:
            self._handle, self._gone = handle, None
            raise

    def acquire(self, timeout=None, read_only=False, lend=False):
        """Take the lease: the daemon will not move the buffer away until
        release. Brings it back from host memory first, ahead of other
        moves. Raises TimedOut after `timeout` seconds (None: forever),
        Busy if already acquired, CopyFailed if the swap-in failed.
        read_only: this lease will not write the buffer
        (GMD_ACQUIRE_READ_ONLY): while every lease since its last swap-in
        is read only the daemon keeps the host copy that swap-in came
        from, and the next pageout copies nothing; a write under a
        read-only lease may be lost.
        lend: while it waits, the other buffers this process holds may be
        moved out for another process and are back before it returns, also
        when it fails (GMD_ACQUIRE_YIELD); the caller promises that nothing
        of this process touches them meanwhile (synchronize the device
        first)."""
        self._client._call(_lib.lib().gmd_acquire_flags, self._live(),
                           timeout_ms(timeout), _acquire_flags(read_only, lend))

    def acquire_start(self, timeout=None, read_only=False, lend=False):
        """acquire() in two halves: send the request and return at once;
        acquire_finish() waits for the lease (and raises what acquire
        would have). The buffer is usable only after acquire_finish.
        Until then another acquire or a release of this buffer raises
        Busy; free() hears the answer first."""
        self._client._call(_lib.lib().gmd_acquire_start, self._live(),
                           timeout_ms(timeout), _acquire_flags(read_only, lend))

    def acquire_finish(self):
        """Wait for the lease acquire_start asked for."""
        self._client._call(_lib.lib().gmd_acquire_finish, self._live())

    def release(self):
        """Give the lease back: the buffer is idle and the daemon may move
        it. Synchronize the GPU work that uses it first, or use
        release_after."""
        self._client._call(_lib.lib().gmd_release, self._live())

    def release_after(self, stream=None, wait=True):
        """Release once the work queued so far on `stream` (an int CUstream,
        a torch.cuda.Stream, None for the default stream) is done, without
        waiting for it. On the sim backend it is release().
        wait=False: nor for the daemon's answer (gmd_release_after_nowait):
        the buffer counts as released at once, and a refusal is raised by
        the next Client.flush()."""
        lib = _lib.lib()
        self._client._call(lib.gmd_release_after if wait else
                           lib.gmd_release_after_nowait, self._live(),
                           stream_handle(stream))

    @contextlib.contextmanager
    def held(self, timeout=None, stream=None):
        """Acquire for the block, then release (after the work queued on
        `stream`, when given)."""
        self.acquire(timeout)
        try:
            yield self
        finally:
            if self._handle is not None:
                if stream is None:
                    self.release()
                else:
                    self.release_after(stream)

    def pageout(self, wait=True):
        """Move the (released) buffer to host memory; returns once queued.
        wait=False: once asked (Client.flush raises a refusal)."""
        self._client.pageout(self, wait=wait)

    def prefetch(self, wait=True):
        """Bring the buffer back to VRAM; returns at once. wait=False: not
        even waiting for the daemon's answer (Client.flush raises a
        refusal)."""
        self._client.prefetch(self, wait=wait)

    def wait(self, timeout=None):
        """Wait until the buffer is not moving (TimedOut after `timeout`
        seconds)."""
        self._client.wait(self, timeout=timeout)

    # ---- views without a copy (views.py) ---------------------------------

    def as_tensor(self, dtype, shape=None, offset=0):
        """A torch tensor over the buffer's bytes from `offset`, of any
        dtype and shape (None: 1-D, as many elements as fit): a CPU tensor
        on the sim backend, a CUDA tensor on device `device` on cuda. The
        tensor keeps the Buffer alive."""
        return views.as_tensor(self, dtype, shape, offset)

    def as_memoryview(self, offset=0, nbytes=None):
        """The bytes as a writable memoryview (host memory only: sim)."""
        return views.as_memoryview(self, offset, nbytes)

    def as_numpy(self, dtype="uint8", shape=None, offset=0):
        """A numpy array over the bytes (host memory only: sim)."""
        return views.as_numpy(self, dtype, shape, offset)

    @property
    def __array_interface__(self):
        return views.array_interface(self, host=True)

    @property
    def __cuda_array_interface__(self):
        return views.array_interface(self, host=False)
