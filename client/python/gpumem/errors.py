"""errors — libgpumem's negative return codes as Python exceptions.

Every failing call raises a GpumemError subclass chosen by the code (the
GMD_E* of gpumem.h), whose message is gmd_last_error(): the daemon's own
sentence ("pool on device 0 has 12 MiB free of ..."), or gmd_strerror()
when the library left none. Each class also derives from the nearest
built-in exception, so code that knows nothing of gpumem still catches them
sensibly (`except MemoryError`, `except TimeoutError`, ...):

  GpumemError                       .code (negative int), .errno, .message
    OutOfMemory(MemoryError)        GMD_ENOMEM: no room before the deadline
      TooLarge                      GMD_ETOOLARGE: the pool can never hold it
      QuotaExceeded                 GMD_EQUOTA: beyond this user's quota
    TimedOut(TimeoutError)          GMD_ETIMEDOUT: the deadline passed
    NoSuchBuffer(LookupError)       GMD_ENOENT; also a freed Buffer used
    NoSuchDevice(LookupError)       -ENODEV: no such CUDA device in this
                                    process, or its GPU is not the daemon's
    NotAllowed(PermissionError)     GMD_EPERM
    Busy                            GMD_EBUSY: the buffer's state forbids it
    NotSupported                    GMD_ENOTSUP: this daemon/backend cannot
    Revoked                         GMD_EREVOKED: the daemon took it back
    LimitReached                    GMD_ELIMIT: too many requests; retry
    InvalidArgument(ValueError)     -EINVAL
    CopyFailed                      -EIO: the GPU refused a copy, or the
                                    daemon failed in a way it cannot name
    Disconnected(ConnectionError)   GMD_ECONN: the daemon went away; also a
                                    closed Client used
      ProtocolError                 GMD_EPROTO: connection closed
    ConnectFailed(ConnectionError)  Client() could not reach the daemon

Any other code raises GpumemError itself. LibraryNotFound (an ImportError)
is raised on first use when libgpumem.so cannot be loaded.
"""

from . import _lib
from ._lib import LibraryNotFound

__all__ = [
    "GpumemError", "OutOfMemory", "TooLarge", "QuotaExceeded", "TimedOut",
    "NoSuchBuffer", "NoSuchDevice", "NotAllowed", "Busy", "NotSupported", "Revoked",
    "LimitReached", "InvalidArgument", "CopyFailed", "Disconnected",
    "ProtocolError", "ConnectFailed", "LibraryNotFound",
    "strerror", "error_for", "check", "connect_error",
]


class GpumemError(Exception):
    """A libgpumem call failed. `code` is its negative return value,
    `errno` the positive errno, `message` the sentence it left."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.errno = -code if code is not None else None
        self.message = message


class OutOfMemory(GpumemError, MemoryError):
    """No room in the pool before the deadline (GMD_ENOMEM)."""


class TooLarge(OutOfMemory):
    """Larger than the pool can ever hold (GMD_ETOOLARGE): waiting cannot
    help."""


class QuotaExceeded(OutOfMemory):
    """Beyond this client's quota (GMD_EQUOTA); the message names the quota
    and the config section that set it."""


class TimedOut(GpumemError, TimeoutError):
    """The request's deadline passed (GMD_ETIMEDOUT)."""


class NoSuchBuffer(GpumemError, LookupError):
    """No such buffer (GMD_ENOENT), or a Buffer used after free()."""


class NoSuchDevice(GpumemError, LookupError):
    """This process has no such CUDA device, or its GPU is not one the
    daemon serves (-ENODEV; the message names the GPU and the daemon's)."""


class NotAllowed(GpumemError, PermissionError):
    """Not allowed (GMD_EPERM): admin calls need root or the admin group."""


class Busy(GpumemError):
    """The buffer's state forbids it (GMD_EBUSY): acquire of an acquired
    buffer, pageout of one in use."""


class NotSupported(GpumemError):
    """This daemon or backend cannot do it (GMD_ENOTSUP)."""


class Revoked(GpumemError):
    """The daemon revoked the buffer (GMD_EREVOKED), e.g. an admin drain."""


class LimitReached(GpumemError):
    """Too many outstanding requests or buffers (GMD_ELIMIT): retry later."""


class InvalidArgument(GpumemError, ValueError):
    """A bad argument (-EINVAL): size 0, unknown device or flags, ..."""


class CopyFailed(GpumemError):
    """-EIO: the GPU refused a copy (the buffer stays where it was, intact),
    or the daemon failed in a way it cannot name."""


class Disconnected(GpumemError, ConnectionError):
    """The daemon went away (GMD_ECONN), or the Client was closed."""


class ProtocolError(Disconnected):
    """The daemon and the library disagree (GMD_EPROTO); the connection is
    closed."""


class ConnectFailed(GpumemError, ConnectionError):
    """Client() could not connect (no daemon on the socket, no permission,
    refused hello)."""


_BY_CODE = {
    _lib.GMD_ENOMEM: OutOfMemory,
    _lib.GMD_ETOOLARGE: TooLarge,
    _lib.GMD_EQUOTA: QuotaExceeded,
    _lib.GMD_ETIMEDOUT: TimedOut,
    _lib.GMD_ENOENT: NoSuchBuffer,
    _lib.GMD_EPERM: NotAllowed,
    _lib.GMD_EBUSY: Busy,
    _lib.GMD_ENOTSUP: NotSupported,
    _lib.GMD_EREVOKED: Revoked,
    _lib.GMD_ELIMIT: LimitReached,
    _lib.EINVAL: InvalidArgument,
    _lib.EIO: CopyFailed,
    _lib.ENODEV: NoSuchDevice,
    _lib.GMD_ECONN: Disconnected,
    _lib.GMD_EPROTO: ProtocolError,
}


def strerror(code):
    """gmd_strerror(code): a short description of a return code."""
    return _lib.text(_lib.lib().gmd_strerror(code))


def error_for(code, message=None):
    """The exception for return code `code` (negative), carrying `message`
    or else this thread's gmd_last_error(), or else gmd_strerror(code)."""
    if message is None:
        message = _lib.text(_lib.lib().gmd_last_error()) or strerror(code)
    return _BY_CODE.get(code, GpumemError)(code, message)


def check(code):
    """Raise the exception for a negative return code; return it otherwise.
    Call right after the C call, on the same thread: the last error is kept
    per thread."""
    if code < 0:
        raise error_for(code)
    return code


def connect_error(code):
    """The exception for a failed gmd_connect: a bad setting is an
    InvalidArgument, anything else a ConnectFailed."""
    if code == _lib.EINVAL:
        return error_for(code)
    message = _lib.text(_lib.lib().gmd_last_error()) or strerror(code)
    # No daemon at the socket: libgpumem's sentence asks whether it runs.
    if code == _lib.GMD_ECONN:
        message += " (the socket is $GPU_MEMD_SOCKET)"
    return ConnectFailed(code, message)
