"""stash — where fit() puts the activations of the blocks it offloads, copied
straight out of PyTorch's tensors and straight back, beside the compute.

    stash = Stash(device, slabs)          # slabs: HostSlabs, PeerSlabs, ...
    with saved_tensors_hooks(lambda t: stash.pack(t, block), stash.unpack):
        out = block(x)
    ...                                   # backward: unpack, prefetch

Each saved tensor of a block (contiguous, at least `min_bytes`) is copied
into a slab, a large byte region reused every step, on a stream of its own
that first waits for the work that made the tensor; `record_stream` keeps
PyTorch's allocator from reusing the tensor's memory before that copy is
done, so the VRAM goes back while the forward pass goes on, with no host
synchronization. In the backward pass the copies back run on a second
stream, into tensors allocated there; an unpack waits for its own copy with an event.
The caller asks for a block's bytes ahead (prefetch: fit asks when the
backward pass reaches the block after it, with a hook on that block's
output, so nothing comes back while the loss holds its logits); the
first unpack of a block also asks for the block before it. So at most two
offloaded blocks' activations are in VRAM at once in the backward pass:
the one being differentiated and the one coming back (fit's room keeps
the largest block's bytes free for it).

Slabs, not gpu-memd's moves: the offloader (offload.py) copies each tensor
into a gpu-memd VRAM buffer that the daemon then pages out and back, two
more copies and a VRAM pool to stage them in, which under a budget was
itself the memory that was short (the training step ran out of memory
beside it, BENCHMARKS.md). A slab is where the bytes rest: pinned host
memory the GPU's copy engine writes directly (HostSlabs: a SPILLABLE
gpu-memd buffer placed on host memory, from the daemon's host pool, under
the user's host quota; or pinned memory of the process's own where no
daemon serves the device), or another GPU's VRAM (PeerSlabs: a tensor on
that GPU, over NVLink where the GPUs have it).

The slabs of a pass are filled from the first in order, each tensor at the
next 512-byte offset, a tensor that does not fit going to the next slab
that holds it (a new one, of `slab_bytes` or the tensor's size, when none
does); training steps save the same tensors each time, so after the first
step no slab is made. Before a pass writes into the slabs again its copies
wait for the last pass's copies back (begin_pass).

Copies to and from another GPU's slabs: PyTorch runs a copy between two
GPUs on the current stream of the source GPU and fences it both ways
with the current stream of the other. Left alone, every copy back from
the peer would run on the peer's default stream, in one line with
whatever else runs there, and each copy out would fence it too. So the
stash makes its own stream on the peer current beside its own on this
GPU for each copy (one out, one in): its copies wait only for each other
and for the work that made or will use their tensors.

On the CPU (the sim backend's tensors) every copy is an ordinary
synchronous copy: the same code path, what the tests run without a GPU.
"""
import contextlib
import threading

ALIGN = 512
SLAB_BYTES = 256 << 20
MIN_BYTES = 1 << 20


def _flat_bytes(t):
    """A contiguous tensor's bytes as a 1-D uint8 view."""
    import torch
    return t.reshape(-1).view(torch.uint8)


class HostSlabs:
    """Slabs on host memory: gpu-memd SPILLABLE buffers placed on the host
    tier (the daemon's pinned pool, mapped at device addresses the copy
    engine writes), or, with no client, pinned tensors of the process."""

    where = "host"

    def __init__(self, torch_device, client=None, daemon_device=0):
        self.device = torch_device
        self.client = client
        self.daemon_device = daemon_device
        self.buffers = []          # gpu-memd buffers, kept for the slabs' life

    def make(self, nbytes):
        import torch
        if self.client is None:
            if self.device.type == "cuda":
                return torch.empty(nbytes, dtype=torch.uint8,
                                   pin_memory=True)
            return torch.empty(nbytes, dtype=torch.uint8)
        from .client import SPILLABLE
        buf = self.client.alloc(nbytes, device=self.daemon_device,
                                flags=SPILLABLE, timeout=0)
        if buf.tier != "host":
            # placed in VRAM as the pool had room: move it to host memory
            # and hold it there (an acquire that does not wait leaves a
            # SPILLABLE buffer where it rests, spill.py)
            buf.release()
            buf.pageout()
            buf.wait()
            buf.acquire(0)
        self.buffers.append(buf)
        return buf.as_tensor(torch.uint8, (nbytes,))

    def close(self):
        for buf in self.buffers:
            buf.free()
        self.buffers = []


class PeerSlabs:
    """Slabs in another GPU's VRAM (torch tensors on `peer`: under
    gpumem.torch.enable() they are gpu-memd buffers of that GPU)."""

    where = "peer"

    def __init__(self, peer):
        self.peer = peer

    def make(self, nbytes):
        import torch
        return torch.empty(nbytes, dtype=torch.uint8, device=self.peer)

    def close(self):
        pass


class _Stashed:
    """One saved tensor in a slab."""
    __slots__ = ("stash", "block", "region", "dtype", "shape", "out_event",
                 "tensor", "in_event", "taken")

    def __init__(self, stash, block, region, dtype, shape):
        self.stash = stash
        self.block = block
        self.region = region
        self.dtype = dtype
        self.shape = shape
        self.out_event = None
        self.tensor = None        # the copy back, once started
        self.in_event = None
        self.taken = False        # handed to autograd


class Stash:
    """The saved activations of the offloaded blocks of one model, in
    `slabs` (see the module comment). `stats`: bytes and tensors stashed,
    prefetched and copied back on demand, slabs made."""

    def __init__(self, torch_device, slabs, min_bytes=MIN_BYTES,
                 slab_bytes=SLAB_BYTES):
        import torch
        self._torch = torch
        self.device = torch_device
        self.slabs = slabs
        self.min_bytes = min_bytes
        self.slab_bytes = slab_bytes
        self.cuda = torch_device.type == "cuda"
        self._regions = []         # slab tensors (uint8), in fill order
        self._slab = 0             # the slab being filled
        self._offset = 0
        self._blocks = {}          # block -> [_Stashed], this pass
        self._order = []           # blocks in the order they stashed
        self._entered = set()      # blocks the backward pass reached
        self._lock = threading.Lock()
        self._peer_out = self._peer_in = None
        if self.cuda:
            self._out = torch.cuda.Stream(torch_device)
            self._in = torch.cuda.Stream(torch_device)
            peer = getattr(slabs, "peer", None)
            if peer is not None and torch.device(peer) != torch_device:
                self._peer_out = torch.cuda.Stream(torch.device(peer))
                self._peer_in = torch.cuda.Stream(torch.device(peer))
        self.stats = {"tensors": 0, "bytes": 0, "prefetched": 0,
                      "on_demand": 0, "slabs": 0, "slab_bytes": 0}

    # ---- the forward pass -------------------------------------------------

    def begin_pass(self):
        """A forward pass starts: fill the slabs from the first again,
        once the last pass's copies out of them are done."""
        with self._lock:
            self._slab = 0
            self._offset = 0
            self._blocks = {}
            self._order = []
            self._entered = set()
        if self.cuda:
            self._out.wait_stream(self._in)

    def _streams(self, mine, peer):
        """Make `mine` (a stream of this GPU) current, and `peer` (the
        slabs' GPU's, or None) current there: the streams a copy between
        the two runs on and fences (see the module comment)."""
        stack = contextlib.ExitStack()
        stack.enter_context(self._torch.cuda.stream(mine))
        if peer is not None:
            stack.enter_context(self._torch.cuda.stream(peer))
        return stack

    def _region(self, nbytes):
        """The next slab region of `nbytes` (see the module comment)."""
        size = (nbytes + ALIGN - 1) // ALIGN * ALIGN
        while self._slab < len(self._regions):
            slab = self._regions[self._slab]
            if self._offset + size <= slab.numel():
                region = slab[self._offset:self._offset + nbytes]
                self._offset += size
                return region
            self._slab += 1
            self._offset = 0
        slab = self._new_slab(max(self.slab_bytes, size))
        self._offset = size
        return slab[:nbytes]

    def _new_slab(self, nbytes):
        """A slab of `nbytes` after the others, counted."""
        slab = self.slabs.make(nbytes)
        self._regions.append(slab)
        self.stats["slabs"] += 1
        self.stats["slab_bytes"] += slab.numel()
        return slab

    def wants(self, t):
        return (t.device == self.device and t.is_contiguous()
                and t.numel() * t.element_size() >= self.min_bytes)

    def pack(self, t, block):
        """Stash `t` (a tensor autograd saves in `block`) or return it as
        it is (too small, not contiguous, another device)."""
        if not self.wants(t):
            return t
        torch = self._torch
        nbytes = t.numel() * t.element_size()
        with self._lock:
            region = self._region(nbytes)
            s = _Stashed(self, block, region, t.dtype, tuple(t.shape))
            if block not in self._blocks:
                self._blocks[block] = []
                self._order.append(block)
            self._blocks[block].append(s)
        if self.cuda:
            self._out.wait_stream(torch.cuda.current_stream(self.device))
            with self._streams(self._out, self._peer_out):
                region.copy_(_flat_bytes(t), non_blocking=True)
                s.out_event = torch.cuda.Event()
                s.out_event.record(self._out)
            t.record_stream(self._out)
        else:
            region.copy_(_flat_bytes(t))
        self.stats["tensors"] += 1
        self.stats["bytes"] += nbytes
        return s


    def reserve(self, nbytes):
        """Make slabs until they hold `nbytes` and some spare (the ends a
        slab cannot fill, alignment): before a pass that will stash that
        much, so that making them (host memory pinned by the daemon,
        ~0.2 s a GiB where its arena must grow) is not timed as the pass."""
        have = sum(slab.numel() for slab in self._regions)
        want = nbytes + nbytes // 16 + self.slab_bytes
        while have < want:
            have += self._new_slab(self.slab_bytes).numel()

    def measure(self, nbytes):
        """Bytes per second (out, in) of one `nbytes` copy each way between
        the device and the first slab (made here if there is none yet),
        the second of two tries; what the planner plans the link with."""
        import time
        torch = self._torch
        if not self._regions:
            self._new_slab(max(self.slab_bytes, nbytes))
        region = self._regions[0][:nbytes]
        local = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        rates = (0.0, 0.0)
        for _ in range(2):
            if self.cuda:
                torch.cuda.synchronize(self.device)
                marks = [torch.cuda.Event(enable_timing=True)
                         for _ in range(3)]
                with self._streams(self._out, self._peer_out):
                    marks[0].record(self._out)
                    region.copy_(local, non_blocking=True)
                    marks[1].record(self._out)
                    local.copy_(region, non_blocking=True)
                    marks[2].record(self._out)
                marks[2].synchronize()
                spans = (marks[0].elapsed_time(marks[1]) / 1e3,
                         marks[1].elapsed_time(marks[2]) / 1e3)
            else:
                t0 = time.perf_counter()
                region.copy_(local)
                t1 = time.perf_counter()
                local.copy_(region)
                spans = (t1 - t0, time.perf_counter() - t1)
            rates = tuple(nbytes / max(s, 1e-9) for s in spans)
        return rates

    # ---- the backward pass ------------------------------------------------

    def _start_in(self, s, stream):
        """Allocate `s`'s tensor and copy it back on `stream` (None: the
        current one, synchronous on the CPU)."""
        torch = self._torch
        t = torch.empty(s.shape, dtype=s.dtype, device=self.device)
        if not self.cuda:
            _flat_bytes(t).copy_(s.region)
            s.tensor = t
            return
        stream.wait_event(s.out_event)
        with self._streams(stream, self._peer_in):
            _flat_bytes(t).copy_(s.region, non_blocking=True)
        s.in_event = torch.cuda.Event()
        s.in_event.record(stream)
        s.tensor = t

    def prefetch(self, block):
        """Start bringing back what `block` stashed this pass (nothing if
        it stashed nothing or it is on its way already)."""
        torch = self._torch
        with self._lock:
            todo = [s for s in self._blocks.get(block, ())
                    if s.tensor is None and not s.taken]
        if not todo:
            return
        if not self.cuda:
            return            # the CPU copies back on demand
        self._in.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._in):
            for s in todo:
                self._start_in(s, self._in)
        self.stats["prefetched"] += len(todo)

    def _next_back(self, block):
        """The block the backward pass runs after `block`: the one that
        stashed before it in the forward pass."""
        with self._lock:
            try:
                i = self._order.index(block)
            except ValueError:
                return None
            return self._order[i - 1] if i > 0 else None

    def unpack(self, s):
        if not isinstance(s, _Stashed):
            return s
        torch = self._torch
        if s.block not in self._entered:
            self._entered.add(s.block)
            after = self._next_back(s.block)
            if after is not None:
                self.prefetch(after)
        current = torch.cuda.current_stream(self.device) if self.cuda \
            else None
        if s.tensor is None:
            self.stats["on_demand"] += 1
            self._start_in(s, current)
        elif self.cuda and s.in_event is not None:
            current.wait_event(s.in_event)
            # allocated on the prefetch stream, used on this one
            s.tensor.record_stream(current)
            s.in_event = None
        # The stash lets go of the copy: autograd frees it once the node
        # that wanted it has run. Kept here (the pass's list holds every
        # _Stashed until the next pass), every offloaded byte came back
        # and stayed for the rest of the backward pass (GPT-2 124M on an
        # H200: 13 GiB back, out of memory).
        t, s.tensor, s.taken = s.tensor, None, True
        return t

    def close(self):
        if self.cuda:
            self._out.synchronize()
            self._in.synchronize()
            # A copy back from a peer's slab runs on _peer_in, which the
            # slab's allocator stream never waits for: freed below, the
            # slab could be handed out on the peer while it still reads.
            for peer in (self._peer_out, self._peer_in):
                if peer is not None:
                    peer.synchronize()
        self._regions = []
        self._blocks = {}
        self.slabs.close()
