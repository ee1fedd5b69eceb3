"""views — a Buffer's bytes as a memoryview, numpy array or torch tensor,
without a copy.

On the sim backend a buffer is host memory: a ctypes array over it exports
the bytes (memoryview, numpy.frombuffer, torch.frombuffer). On the cuda
backend it is device memory: an object with __cuda_array_interface__ hands
it to torch.as_tensor as a CUDA tensor. Either way the exporting object
holds a reference to the Buffer, and the view holds the exporter, so the
Buffer (and its memory) lives as long as any view does.

Every view starts as raw bytes and is then reinterpreted (Tensor.view(dtype)
or numpy's dtype), so any dtype works, bfloat16 included, which neither
numpy nor the array interfaces can name. torch and numpy are imported only
here, only when a view of that kind is asked for: `import gpumem` needs
neither.
"""
import ctypes
import math

from . import _lib, errors


def _is_host(buf):
    return buf.client.backend == "sim"


def _range(buf, offset, nbytes, itemsize=1):
    """Check [offset, offset + nbytes) lies in the buffer and offset is
    aligned to the element size."""
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError("offset must be an int (bytes)")
    if offset < 0 or offset > buf.size:
        raise errors.InvalidArgument(
            _lib.EINVAL, f"offset {offset} is outside buffer {buf.id} "
            f"({buf.size} bytes)")
    if offset % itemsize:
        raise errors.InvalidArgument(
            _lib.EINVAL, f"offset {offset} is not a multiple of the element "
            f"size {itemsize}")
    if nbytes is None:
        nbytes = (buf.size - offset) // itemsize * itemsize
    if nbytes < 0 or offset + nbytes > buf.size:
        raise errors.InvalidArgument(
            _lib.EINVAL, f"{nbytes} bytes from offset {offset} do not fit in "
            f"buffer {buf.id} ({buf.size} bytes)")
    return nbytes


def _shape(shape, itemsize, nbytes_free):
    """(shape tuple, bytes it covers); None: 1-D filling what is free."""
    if shape is None:
        n = nbytes_free // itemsize
        return (n,), n * itemsize
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(shape)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
               for d in shape):
        raise errors.InvalidArgument(
            _lib.EINVAL, f"shape {shape}: dimensions must be ints >= 0")
    return shape, math.prod(shape) * itemsize


def _host_bytes(buf, offset, nbytes):
    """A ctypes array over the bytes, holding the Buffer."""
    if not _is_host(buf):
        raise errors.NotSupported(
            _lib.GMD_ENOTSUP, f"buffer {buf.id} is device memory "
            f"({buf.client.backend} backend), not host memory: use "
            "as_tensor() for a CUDA tensor, or __cuda_array_interface__")
    array = (ctypes.c_char * nbytes).from_address(buf.ptr + offset)
    array._gpumem_buffer = buf
    return array


def as_memoryview(buf, offset=0, nbytes=None):
    nbytes = _range(buf, offset, nbytes)
    return memoryview(_host_bytes(buf, offset, nbytes)).cast("B")


def as_numpy(buf, dtype="uint8", shape=None, offset=0):
    import numpy
    dtype = numpy.dtype(dtype)
    _range(buf, offset, 0, dtype.itemsize)
    shape, nbytes = _shape(shape, dtype.itemsize, buf.size - offset)
    _range(buf, offset, nbytes)
    raw = numpy.frombuffer(_host_bytes(buf, offset, nbytes), numpy.uint8)
    return raw.view(dtype).reshape(shape)


class _CudaBytes:
    """Device bytes for torch.as_tensor; holds the Buffer."""

    def __init__(self, buf, ptr, nbytes):
        self.buffer = buf
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
            "strides": None, "version": 2}


def _cuda_device(buf):
    """The torch device of a cuda buffer: the process's CUDA ordinal of
    the daemon's device, which differs under CUDA_VISIBLE_DEVICES."""
    from ._torchdev import cuda_ordinal
    return f"cuda:{cuda_ordinal(buf._client, buf.device)}"


def as_tensor(buf, dtype, shape=None, offset=0):
    import torch
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype (torch.float32, ...), "
                        f"not {dtype!r}")
    itemsize = torch.empty((), dtype=dtype).element_size()
    _range(buf, offset, 0, itemsize)
    shape, nbytes = _shape(shape, itemsize, buf.size - offset)
    _range(buf, offset, nbytes)
    if nbytes == 0:
        raw = torch.empty(0, dtype=torch.uint8,
                          device="cpu" if _is_host(buf) else
                          _cuda_device(buf))
    elif _is_host(buf):
        raw = torch.frombuffer(_host_bytes(buf, offset, nbytes),
                               dtype=torch.uint8)
    else:
        raw = torch.as_tensor(_CudaBytes(buf, buf.ptr + offset, nbytes),
                              device=_cuda_device(buf))
    return raw.view(dtype).view(shape)


def array_interface(buf, host):
    """Buffer.__array_interface__ (host=True, sim) or
    __cuda_array_interface__ (cuda): the whole buffer as bytes. Missing
    (AttributeError) where the memory is of the other kind, so numpy and
    torch see at once which one applies."""
    if _is_host(buf) != host or buf.freed:
        raise AttributeError("__array_interface__" if host
                             else "__cuda_array_interface__")
    return {"shape": (buf.size,), "typestr": "|u1",
            "data": (buf.ptr, False), "strides": None,
            "version": 3 if host else 2}
