"""test_cuda — the package on the cuda backend, with PyTorch on a GPU (the
GPU machine's torch 2.11; skipped with one line elsewhere, as in CI).

A buffer is a CUDA tensor on its device at the buffer's own address, of any
dtype and shape, through __cuda_array_interface__; what one view writes
another reads. release_after(torch.cuda.current_stream()) releases behind
the kernels queued on the stream without synchronizing, and the bytes the
last kernel wrote are those that come back after a pageout and acquire.
Host views are refused with NotSupported.

Run on the GPU machine from the source tree and a cuda build:
  cd tests/python && PYTHONPATH=../../client/python \\
    GPUMEM_LIBRARY=../../BUILD/client/libgpumem.so.0 \\
    GMD_DAEMON=../../BUILD/daemon/gpu-memd python3 -m unittest -v test_cuda
(scripts/gpu-suite.sh run does this).
"""
import gc
import struct
import unittest

import gpumem
from gmd_daemon import MiB, Daemon, skip_line

try:
    import torch
    REASON = None if torch.cuda.is_available() else \
        f"torch {torch.__version__} sees no CUDA GPU"
except ImportError:
    torch = None
    REASON = "torch not installed"
if REASON:
    skip_line("test_cuda", REASON + ": CUDA tensor views not tested")


@unittest.skipIf(REASON, REASON)
class CudaTensor(unittest.TestCase):
    def setUp(self):
        self.daemon = Daemon("[pools]\nhost_stock = 256M\n", backend="cuda",
                             args=["--vram-limit", "1G"])
        self.addCleanup(self.daemon.cleanup)
        self.daemon.start()
        self.client = gpumem.Client(self.daemon.socket, name="pytest-cuda")
        self.addCleanup(self.client.close)

    def test_views(self):
        self.assertEqual(self.client.backend, "cuda")
        buf = self.client.alloc(4 * MiB)
        x = buf.as_tensor(torch.float32, (1024, 1024))
        self.assertEqual(x.device, torch.device("cuda", buf.device))
        self.assertEqual(x.data_ptr(), buf.ptr)
        x.copy_(torch.arange(1 << 20, dtype=torch.float32,
                             device=x.device).view(1024, 1024))
        ints = buf.as_tensor(torch.int32, (1 << 20,))
        self.assertEqual(ints[3].item(),
                         struct.unpack("<i", struct.pack("<f", 3.0))[0])
        half = buf.as_tensor(torch.bfloat16, (2, 8), offset=4096)
        self.assertEqual(half.data_ptr(), buf.ptr + 4096)
        raw = torch.as_tensor(buf, device=x.device)   # the array interface
        self.assertEqual((raw.dtype, raw.numel()), (torch.uint8, buf.size))
        self.assertFalse(hasattr(buf, "__array_interface__"))
        with self.assertRaises(gpumem.NotSupported):
            buf.as_memoryview()

    def test_release_after_stream_then_move(self):
        buf = self.client.alloc(64 * MiB)
        x = buf.as_tensor(torch.float32)
        x.fill_(1.0)
        stream = torch.cuda.Stream(device=x.device)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(20):
                x.mul_(2.0)                    # queued, not waited for
        buf.release_after(stream)
        buf.pageout()
        buf.wait(timeout=30)
        self.assertEqual(buf.tier, "host")
        buf.acquire(timeout=30)
        self.assertEqual(buf.tier, "vram")
        self.assertTrue(torch.all(x == 2.0 ** 20).item())

    def test_tensor_keeps_buffer_alive(self):
        buf = self.client.alloc(2 * MiB)
        t = buf.as_tensor(torch.int64, (8,))
        t.fill_(42)
        del buf
        gc.collect()
        self.assertEqual(len(self.client.status().buffers), 1)
        self.assertEqual(t.sum().item(), 42 * 8)
        del t
        gc.collect()
        self.assertEqual(self.client.buffers, [])


if __name__ == "__main__":
    unittest.main()
