"""hello.py: connect to gpu-memd, allocate 64 MiB, use it, free it."""
import sys

import gpumem

try:
    with gpumem.Client(name="hello") as c:      # $GPU_MEMD_SOCKET, else the default
        buf = c.alloc("64M", timeout=5)          # wait up to 5 s for room
        if c.backend == "sim":                   # host memory: touch it here
            buf.as_memoryview()[:5] = b"hello"
        # on the cuda backend: buf.as_tensor(torch.float32) is a CUDA tensor
        print(f"{buf.size} bytes at {buf.ptr:#x} in {buf.tier} ({c.backend} backend)")
        buf.free()
except (gpumem.GpumemError, gpumem.LibraryNotFound) as e:  # says what to do
    sys.exit(f"hello.py: {type(e).__name__}: {e}")
