"""_lib — libgpumem.so found, loaded and declared, once.

Every C signature the package calls is declared here and nowhere else
(STYLE.md: the Python layer is thin over the C library, signatures declared
once), with the structs of include/gpumem.h mirrored field by field: a field
added there must be added here in the same place.

The library is looked for, in order:
  1. $GPUMEM_LIBRARY, a path to libgpumem.so (overrides everything);
  2. next to the package (a copy shipped inside gpumem/);
  3. where `make install` put it (gpumem/_install.py, written at install);
  4. the build tree this package sits in (client/python/gpumem ->
     build/client/libgpumem.so), for PYTHONPATH=client/python;
  5. the system's loader path (libgpumem.so.0).
It is loaded on first use, not at import, so `import gpumem` works on a
machine without the library and fails later with what to do.
"""
import ctypes
import os
import threading

# Error codes of gpumem.h (negative errno values).
GMD_ENOMEM = -12
GMD_ETOOLARGE = -27
GMD_ETIMEDOUT = -110
GMD_EQUOTA = -122
GMD_ENOENT = -2
GMD_EPERM = -1
GMD_EBUSY = -16
GMD_ENOTSUP = -95
GMD_EPROTO = -71
GMD_ECONN = -107
GMD_EREVOKED = -125
GMD_ELIMIT = -11
EINVAL = -22
EIO = -5
ENODEV = -19

GMD_NO_WAIT = 0
GMD_WAIT_FOREVER = -1

GMD_STATUS_POOLS = 0
GMD_STATUS_CLIENTS = 1
GMD_STATUS_BUFFERS = 2


class PoolStatus(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_uint),
        ("tier", ctypes.c_int),
        ("capacity", ctypes.c_uint64),
        ("used", ctypes.c_uint64),
        ("free", ctypes.c_uint64),
        ("queued_out", ctypes.c_uint32),
        ("queued_in", ctypes.c_uint32),
        ("bytes_out", ctypes.c_uint64),
        ("bytes_in", ctypes.c_uint64),
        ("copy_us_out", ctypes.c_uint64),
        ("copy_us_in", ctypes.c_uint64),
        ("arena_size", ctypes.c_uint64),
        ("arena_free", ctypes.c_uint64),
        ("kept", ctypes.c_uint64),
        ("device_free", ctypes.c_uint64),
        ("unaccounted", ctypes.c_uint64),
        ("link_bytes_per_s_out", ctypes.c_uint64),
        ("link_bytes_per_s_in", ctypes.c_uint64),
        ("link_group", ctypes.c_uint),
        ("slice_pid", ctypes.c_uint32),
        ("slice_left_ms", ctypes.c_uint64),
        ("preempt_step", ctypes.c_uint64),
        ("uuid", ctypes.c_char * 48),           # GMD_UUID_SIZE
        ("pci_bus_id", ctypes.c_char * 32),     # GMD_PCI_BUS_ID_SIZE
        ("peer_held", ctypes.c_uint64),
        ("peer_spare", ctypes.c_uint64),
    ]


class ClientStatus(ctypes.Structure):
    _fields_ = [
        ("client_id", ctypes.c_uint64),
        ("pid", ctypes.c_uint32),
        ("uid", ctypes.c_uint32),
        ("name", ctypes.c_char * 65),
        ("bytes", ctypes.c_uint64),
        ("buffers", ctypes.c_uint32),
        ("waiting", ctypes.c_uint32),
        ("priority", ctypes.c_int32),
        ("gid", ctypes.c_uint32),
        ("details_hidden", ctypes.c_int),
        ("parked_bytes", ctypes.c_uint64),
        ("vram_bytes", ctypes.c_uint64),
        ("host_bytes", ctypes.c_uint64),
        ("lent_bytes", ctypes.c_uint64),
        ("outside_bytes", ctypes.c_uint64),
        ("planner", ctypes.c_char * 33),
        ("plan_kept_bytes", ctypes.c_uint64),
        ("plan_offloaded_bytes", ctypes.c_uint64),
        ("plan_recomputed_bytes", ctypes.c_uint64),
        ("plan_streamed_bytes", ctypes.c_uint64),
    ]


class BufferStatus(ctypes.Structure):
    _fields_ = [
        ("buffer_id", ctypes.c_uint64),
        ("client_id", ctypes.c_uint64),
        ("pid", ctypes.c_uint32),
        ("device", ctypes.c_uint),
        ("size", ctypes.c_uint64),
        ("tier", ctypes.c_int),
        ("state", ctypes.c_int),
        ("flags", ctypes.c_uint),
        ("acquired", ctypes.c_int),
        ("parked", ctypes.c_int),
    ]


class GpuProcessStatus(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_uint),
        ("pid", ctypes.c_uint32),
        ("bytes", ctypes.c_uint64),
        ("client_id", ctypes.c_uint64),
    ]


class PeerStatus(ctypes.Structure):
    _fields_ = [
        ("home", ctypes.c_uint),
        ("holder", ctypes.c_uint),
        ("bytes_per_s", ctypes.c_uint64),
        ("held", ctypes.c_uint64),
    ]


class Status(ctypes.Structure):
    _fields_ = [
        ("daemon_version", ctypes.c_char * 32),
        ("backend", ctypes.c_char * 16),
        ("uptime_ms", ctypes.c_uint64),
        ("total_capacity", ctypes.c_uint64),
        ("total_used", ctypes.c_uint64),
        ("total_clients", ctypes.c_uint32),
        ("total_buffers", ctypes.c_uint32),
        ("n_pools", ctypes.c_size_t),
        ("pools", ctypes.POINTER(PoolStatus)),
        ("n_clients", ctypes.c_size_t),
        ("clients", ctypes.POINTER(ClientStatus)),
        ("n_buffers", ctypes.c_size_t),
        ("buffers", ctypes.POINTER(BufferStatus)),
        ("n_gpu_processes", ctypes.c_size_t),
        ("gpu_processes", ctypes.POINTER(GpuProcessStatus)),
        ("restores", ctypes.c_uint32),
        ("restored_ms", ctypes.c_uint64),
        ("host_bytes_per_s_out", ctypes.c_uint64),
        ("host_bytes_per_s_in", ctypes.c_uint64),
        ("n_peers", ctypes.c_size_t),
        ("peers", ctypes.POINTER(PeerStatus)),
    ]


_client_p = ctypes.c_void_p
_buffer_p = ctypes.c_void_p
_int = ctypes.c_int

# name: (restype, argtypes) — the whole API of gpumem.h.
_SIGNATURES = {
    "gmd_connect": (_int, [ctypes.c_char_p, ctypes.c_char_p,
                           ctypes.POINTER(_client_p)]),
    "gmd_disconnect": (_client_p, [_client_p]),
    "gmd_client_backend": (ctypes.c_char_p, [_client_p]),
    "gmd_client_protocol_version": (ctypes.c_uint, [_client_p]),
    "gmd_client_device_count": (ctypes.c_uint, [_client_p]),
    "gmd_alloc": (_int, [_client_p, ctypes.c_size_t, ctypes.c_uint,
                         ctypes.c_uint, ctypes.c_int64,
                         ctypes.POINTER(_buffer_p)]),
    "gmd_device_from_cuda": (_int, [_client_p, _int,
                                    ctypes.POINTER(ctypes.c_uint)]),
    "gmd_device_uuid": (_int, [_client_p, ctypes.c_uint, ctypes.c_char_p,
                               ctypes.c_size_t]),
    "gmd_device_pci_bus_id": (_int, [_client_p, ctypes.c_uint,
                                     ctypes.c_char_p, ctypes.c_size_t]),
    "gmd_free": (_int, [_client_p, _buffer_p]),
    "gmd_trim_cache": (_int, [_client_p]),
    "gmd_buffer_ptr": (ctypes.c_void_p, [_buffer_p]),
    "gmd_buffer_size": (ctypes.c_size_t, [_buffer_p]),
    "gmd_buffer_id": (ctypes.c_uint64, [_buffer_p]),
    "gmd_buffer_device": (ctypes.c_uint, [_buffer_p]),
    "gmd_buffer_tier": (_int, [_buffer_p]),
    "gmd_acquire": (_int, [_client_p, _buffer_p, ctypes.c_int64]),
    "gmd_acquire_flags": (_int, [_client_p, _buffer_p, ctypes.c_int64,
                                 ctypes.c_uint]),
    "gmd_acquire_start": (_int, [_client_p, _buffer_p, ctypes.c_int64,
                                 ctypes.c_uint]),
    "gmd_acquire_finish": (_int, [_client_p, _buffer_p]),
    "gmd_release": (_int, [_client_p, _buffer_p]),
    "gmd_release_after": (_int, [_client_p, _buffer_p, ctypes.c_void_p]),
    "gmd_pageout": (_int, [_client_p, _buffer_p]),
    "gmd_prefetch": (_int, [_client_p, _buffer_p]),
    "gmd_wait": (_int, [_client_p, _buffer_p, ctypes.c_int64]),
    "gmd_release_after_nowait": (_int, [_client_p, _buffer_p,
                                        ctypes.c_void_p]),
    "gmd_pageout_nowait": (_int, [_client_p, _buffer_p]),
    "gmd_prefetch_nowait": (_int, [_client_p, _buffer_p]),
    "gmd_flush": (_int, [_client_p, ctypes.c_int64]),
    "gmd_query_status": (_int, [_client_p, _int, ctypes.c_uint32,
                                ctypes.POINTER(ctypes.POINTER(Status))]),
    "gmd_status_free": (ctypes.POINTER(Status), [ctypes.POINTER(Status)]),
    "gmd_report_plan": (_int, [_client_p, ctypes.c_char_p, ctypes.c_uint64,
                               ctypes.c_uint64, ctypes.c_uint64,
                               ctypes.c_uint64]),
    "gmd_admin_drain": (_int, [_client_p, ctypes.c_uint32]),
    "gmd_admin_set_priority": (_int, [_client_p, ctypes.c_uint32,
                                      ctypes.c_int32]),
    "gmd_admin_evict": (_int, [_client_p, ctypes.c_uint32]),
    "gmd_last_error": (ctypes.c_char_p, []),
    "gmd_strerror": (ctypes.c_char_p, [_int]),
    "gmd_tier_name": (ctypes.c_char_p, [_int]),
    "gmd_state_name": (ctypes.c_char_p, [_int]),
    "gmd_parse_size": (_int, [ctypes.c_char_p,
                              ctypes.POINTER(ctypes.c_uint64)]),
    "gmd_format_size": (ctypes.c_char_p, [ctypes.c_uint64, ctypes.c_char_p,
                                          ctypes.c_size_t]),
}

_SONAME = "libgpumem.so.0"
_here = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
_lib = None


class LibraryNotFound(ImportError):
    """libgpumem.so could not be loaded; the message lists where it looked
    and what to do."""


def _candidates():
    yield os.path.join(_here, _SONAME)
    try:
        from . import _install  # written by `make install`
        yield _install.LIBRARY
    except ImportError:
        pass
    root = os.path.dirname(os.path.dirname(os.path.dirname(_here)))
    yield os.path.join(root, "build", "client", _SONAME)


def _open():
    override = os.environ.get("GPUMEM_LIBRARY")
    if override:
        try:
            return ctypes.CDLL(override)
        except OSError as e:
            raise LibraryNotFound(
                f"GPUMEM_LIBRARY={override} cannot be loaded: {e}; point it "
                "at a libgpumem.so (build/client/libgpumem.so after `make`)"
            ) from None
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            return ctypes.CDLL(path)
        tried.append(path)
    try:
        return ctypes.CDLL(_SONAME)
    except OSError:
        tried.append(f"{_SONAME} on the loader's path")
    raise LibraryNotFound(
        "libgpumem.so not found (looked at " + ", ".join(tried) + "): "
        "build it with `make` in the gpu-memd tree, install it with "
        "`make install`, or set GPUMEM_LIBRARY=/path/to/libgpumem.so")


def _declare(lib):
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def lib():
    """The loaded, declared libgpumem (loaded on the first call)."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                _lib = _declare(_open())
    return _lib


def text(raw):
    """A C string from the library as str ("" for NULL)."""
    return raw.decode("utf-8", "replace") if raw else ""
