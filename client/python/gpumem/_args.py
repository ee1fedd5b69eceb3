"""_args — the arguments people write, as gpumem.h wants them: timeouts in
seconds (None: forever, 0: no wait) as milliseconds, sizes as bytes or
strings ("256M"), parsed by the library so they read as the daemon's config
does.
"""
import ctypes
import math

from . import _lib, errors


def timeout_ms(timeout):
    """Seconds (None: forever, 0: no wait) as gpumem.h's milliseconds."""
    if timeout is None:
        return _lib.GMD_WAIT_FOREVER
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be seconds (a number) or None, "
                        f"not {type(timeout).__name__}")
    if timeout < 0 or math.isnan(timeout):
        raise errors.InvalidArgument(
            _lib.EINVAL, f"timeout {timeout} s is negative: use None to wait "
            "forever, 0 not to wait")
    return math.ceil(timeout * 1000)


def parse_size(size):
    """Bytes from an int or a string such as "512M", "2G", "1.5T"."""
    if isinstance(size, bool):
        raise TypeError("size must be bytes (int) or a string like '256M'")
    if isinstance(size, int):
        if size < 0:
            raise errors.InvalidArgument(_lib.EINVAL,
                                         f"size {size} is negative")
        return size
    if not isinstance(size, str):
        raise TypeError("size must be bytes (int) or a string like '256M', "
                        f"not {type(size).__name__}")
    out = ctypes.c_uint64()
    if _lib.lib().gmd_parse_size(size.encode(), ctypes.byref(out)) < 0:
        raise errors.InvalidArgument(
            _lib.EINVAL, f"'{size}' is not a size (bytes, or a number with "
            "K/M/G/T: '512M')")
    return out.value


def format_size(nbytes):
    """Bytes for people: "1.5 GiB"."""
    buf = ctypes.create_string_buffer(32)
    return _lib.text(_lib.lib().gmd_format_size(nbytes, buf, len(buf)))
