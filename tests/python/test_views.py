"""test_views — a buffer seen as memoryview, numpy array and torch tensor
without a copy, on the sim backend (host memory): what one view writes
another reads, at the buffer's own address; dtypes and shapes are checked
against the buffer's size and the offset's alignment; a view keeps its
Buffer alive after the last other reference goes, and the Buffer is freed
once the view goes too. Tests needing torch or numpy skip with one line
where they are missing.
"""
import gc
import struct
import unittest

import gpumem
from gmd_daemon import MiB, DaemonTest, skip_line

try:
    import torch
except ImportError:
    torch = None
    skip_line("test_views", "torch not installed (Debian: python3-torch): "
              "tensor views not tested")
try:
    import numpy
except ImportError:
    numpy = None
    skip_line("test_views", "numpy not installed (Debian: python3-numpy): "
              "numpy views not tested")


class Memoryview(DaemonTest):
    def test_bytes_at_the_buffer(self):
        buf = self.client.alloc(2 * MiB)
        mv = buf.as_memoryview()
        self.assertEqual((len(mv), mv.format, mv.readonly), (2 * MiB, "B",
                                                              False))
        mv[10:14] = b"abcd"
        part = buf.as_memoryview(8, 8)
        self.assertEqual(bytes(part), b"\0\0abcd\0\0")
        with self.assertRaises(gpumem.InvalidArgument):
            buf.as_memoryview(2 * MiB - 4, 8)
        with self.assertRaises(gpumem.InvalidArgument):
            buf.as_memoryview(-1)

    def test_survives_pageout(self):
        buf = self.client.alloc(2 * MiB)
        buf.as_memoryview()[:5] = b"hello"
        buf.release()
        buf.pageout()
        buf.wait(timeout=5)
        self.assertEqual(buf.tier, "host")
        buf.acquire(timeout=5)
        self.assertEqual(bytes(buf.as_memoryview()[:5]), b"hello")


@unittest.skipIf(numpy is None, "numpy not installed")
class Numpy(DaemonTest):
    def test_views_share_memory(self):
        buf = self.client.alloc(2 * MiB)
        a = buf.as_numpy("float64", (4, 8))
        self.assertEqual(a.__array_interface__["data"][0], buf.ptr)
        a[1, 2] = 6.5
        self.assertEqual(struct.unpack_from("<d", buf.as_memoryview(),
                                            (8 + 2) * 8)[0], 6.5)
        whole = numpy.asarray(buf)              # __array_interface__
        self.assertEqual((whole.dtype, whole.shape), (numpy.uint8,
                                                      (2 * MiB,)))
        self.assertEqual(whole[80:88].view("<f8")[0], 6.5)
        self.assertEqual(buf.as_numpy("int32").shape, (MiB // 2,))
        with self.assertRaises(gpumem.InvalidArgument):
            buf.as_numpy("int32", (MiB,))       # 4 MiB in a 2 MiB buffer
        with self.assertRaises(gpumem.InvalidArgument):
            buf.as_numpy("int32", 4, offset=2)  # not aligned


@unittest.skipIf(torch is None, "torch not installed")
class Tensor(DaemonTest):
    def test_write_via_tensor_read_via_another(self):
        buf = self.client.alloc(4 * MiB)
        x = buf.as_tensor(torch.float32, (16, 32))
        self.assertEqual((x.dtype, tuple(x.shape), x.device.type),
                         (torch.float32, (16, 32), "cpu"))
        self.assertEqual(x.data_ptr(), buf.ptr)
        x.copy_(torch.arange(512, dtype=torch.float32).view(16, 32))
        ints = buf.as_tensor(torch.int32, (512,))
        self.assertEqual(ints[3].item(),
                         struct.unpack("<i", struct.pack("<f", 3.0))[0])
        again = buf.as_tensor(torch.float32, (512,))
        self.assertTrue(torch.equal(again, torch.arange(512.0)))
        self.assertEqual(bytes(buf.as_memoryview(4 * 5, 4)),
                         struct.pack("<f", 5.0))

    def test_any_dtype_shape_offset(self):
        buf = self.client.alloc(2 * MiB)
        for dtype in (torch.uint8, torch.int16, torch.float16,
                      torch.bfloat16, torch.float64, torch.complex64,
                      torch.bool):
            with self.subTest(dtype=dtype):
                t = buf.as_tensor(dtype, (2, 3, 4), offset=64)
                self.assertEqual((t.dtype, tuple(t.shape)),
                                 (dtype, (2, 3, 4)))
                self.assertEqual(t.data_ptr(), buf.ptr + 64)
        whole = buf.as_tensor(torch.float16)
        self.assertEqual(tuple(whole.shape), (MiB,))
        self.assertEqual(buf.as_tensor(torch.float32, ()).dim(), 0)
        self.assertEqual(buf.as_tensor(torch.float32, (0, 5)).numel(), 0)
        h = buf.as_tensor(torch.bfloat16, 4)
        h.fill_(1.5)
        self.assertEqual(bytes(buf.as_memoryview(0, 2)),
                         struct.pack("<f", 1.5)[2:])

    def test_checks(self):
        buf = self.client.alloc(2 * MiB)
        with self.assertRaises(gpumem.InvalidArgument) as cm:
            buf.as_tensor(torch.float32, (MiB,))
        self.assertIn("do not fit", str(cm.exception))
        with self.assertRaises(gpumem.InvalidArgument):
            buf.as_tensor(torch.float32, 1, offset=2 * MiB - 2)
        with self.assertRaises(gpumem.InvalidArgument) as cm:
            buf.as_tensor(torch.float64, 4, offset=4)
        self.assertIn("multiple of the element size 8", str(cm.exception))
        with self.assertRaises(gpumem.InvalidArgument):
            buf.as_tensor(torch.float32, (-1, 4))
        with self.assertRaises(TypeError):
            buf.as_tensor("float32", 4)
        with self.assertRaises(TypeError):
            buf.as_tensor(torch.float32, 4, offset=1.0)

    def test_tensor_keeps_buffer_alive(self):
        buf = self.client.alloc(2 * MiB)
        buf_id = buf.id
        t = buf.as_tensor(torch.int64, (8,))
        t[:] = 42
        del buf
        gc.collect()
        ids = [b.buffer_id for b in self.client.status().buffers]
        self.assertEqual(ids, [buf_id])
        self.assertEqual(t.sum().item(), 42 * 8)
        del t
        gc.collect()
        self.assertEqual(self.mine()[0].parked_bytes, 2 * MiB)
        self.assertEqual(self.client.buffers, [])


if __name__ == "__main__":
    unittest.main()
