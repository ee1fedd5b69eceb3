"""offload — activation offload through gpu-memd.

    with gpumem.torch.offload_activations(min_bytes=16 << 20):
        loss = model(batch).loss
    loss.backward()

Inside the block, every tensor autograd saves for the backward pass
(torch.autograd.graph.saved_tensors_hooks) that is at least `min_bytes`
large is copied into a slab, a SWAPPABLE gpu-memd buffer of `slab_bytes`
(64 MiB, at most 1/16 of the VRAM pool) holding the saved tensors in the
order they were packed, on a side stream after the work that made it
(cuda). A full slab is released with release_after(side stream), so the
daemon moves it only once the copies into it are done, with no host
synchronization, and paged out at once: the saved activations leave VRAM
while the forward pass goes on. The slab still open when the forward pass
ends is released but not paged out: it holds the tensors the backward
pass wants first. The original tensor goes back to PyTorch's allocator
when autograd drops it. A tensor of a slab's size or more gets a buffer
of its own, and so does every tensor with slab_bytes=0.

The tail: slabs are paged out only as far as the budget needs. At the
end of each forward pass the offloader asks the daemon how much of the
VRAM pool is free, and the next pass keeps that much more of its last
slabs in VRAM (released, not paged out), beyond TAIL_MARGIN slabs left
for the backward pass's own memory, or that much fewer when the pool was
short (stats "tail_kept", `tail` says what was decided). They are the
first the backward pass wants, and what never leaves crosses the link in
neither direction. The count is kept per client and device from one pass
to the next (a training loop's passes are alike); if it was too many,
the daemon evicts the oldest released slabs when it needs the room.

The default slab, 64 MiB, from bench_cotenancy's train2x on the H200 (GPT-2
8 x 1024, batch 8 x 512, at half its peak memory; step time, same run):
64 MiB 259.6 ms against 281.8 with a buffer per tensor (one run) and 303.3
against 300.9 (another); slabs of 208 MiB (256 MiB capped to 1/16 of that
pool) 455-507 ms, and they copy their unfilled ends: 5.08 GiB a step each
way for 4.27 GiB of tensors.

Slabs rather than a buffer per tensor, from a measurement (H200, GPT-2
8 x 1024 at batch 8 x 512 trained at half its peak memory,
bench/torch/profile_offload.py): with a buffer per tensor, 83 tensors a
step, the forward pass spent 103 ms of its 180 in allocations (1.1 ms
each: the daemon makes new VRAM, the process maps it, since the budget
leaves no freed buffer parked to reuse) and the backward pass 33 ms in
acquires.

The release_after, pageout and prefetch calls are sent without waiting
for the daemon's answers (wait=False: libgpumem's gmd_*_nowait; the
daemon handles them in the order sent, so an acquire after them finds them
done), saving a round trip of ~0.1 ms each on the thread that launches the
GPU work. Their answers are heard once a forward pass, by a flush as the
offload_activations block ends (when it ends without an exception): a
refused pageout is counted in stats["pageouts_refused"] there (once per
flush that finds one: a flush tells the first refusal only), a prefetch
of the backward pass before it that crossed an unpack's acquire on another
thread (GMD_EBUSY) is counted in stats["prefetches_busy"] and otherwise
ignored, as before, and any other refusal raises (_torchdev.flush).

In the backward pass autograd unpacks saved tensors roughly in the reverse
order it packed them. Each unpack prefetches the slabs before its own,
until `lead` bytes are on their way back, then acquires its slab if it is
the first of it (at once when its prefetch is over; a passive swap-in at
the head of the daemon's queue when not), copies the tensor into a fresh
one on the compute stream and keeps the slab acquired. autograd drops a
saved tensor once the node that used it has run (unless retain_graph); a
slab is freed once all its tensors were dropped and the copies out of it
are over (an event; at once on sim). Freed while acquired, it is parked
in libgpumem's cache of mappings, so the next step's slab is a cache hit
instead of a fresh allocation and mapping when the room allows.

Left where they are: tensors under `min_bytes` (a move of a small tensor
costs a round trip and mapping work that its copy time does not pay for),
parameters and views of them (the weights: they stay, or gpumem.torch.stream
moves them), non-contiguous tensors, tensors on a device the daemon's
backend does not serve (CPU tensors on cuda), and tensors for whose
buffer no room is made within ROOM_WAIT (1 s), asked twice, the
second time after PyTorch's unused cache was given back
(torch.cuda.empty_cache; stats "kept_no_room"): keeping one takes no
memory it does not hold already, where waiting longer could wait for
ever on room this process holds itself (PyTorch's cache on gpu-memd).

The lead, unless given, is planned from the link (lead.py), the unit
being the largest buffer:

    lead = x * max(1, ceil(t_copy / t_compute))      bytes
    x = the largest buffer (a slab, or a tensor of its own) of the pass
    t_copy = x / the link's host-to-VRAM bytes per second (the daemon's
             status: measured at start)
    t_compute = the forward pass's compute per x bytes offloaded: the time
                from the first offloaded pack to the last (events on the
                compute stream) over the bytes packed after the first,
                times x

so a buffer's copy is covered by the compute of the buffers before it in
the backward pass, whose compute per byte is about twice the forward's
(the margin). It is planned at the first unpack whose forward timing is
over (no host synchronization; until then, and when the link is not
known, LEAD); `plan` says what was measured and decided.

The defaults are provisional: MIN_BYTES (16 MiB) because single moves of
PyTorch-sized segments reach 0.35 of the link at 2 MiB, 0.69 at 16 MiB and
0.86 at 64 MiB (the figures the defaults were set from), and LEAD (512 MiB, about 10 ms of an
x16 Gen5 link), the lead while none is planned, to cover a few
transformer blocks of backward compute. bench/torch/bench_offload.py
measures step time over a sweep of both on the GPU machine; the defaults
change to what it finds.
"""
import contextlib
import threading
import weakref

from . import _torchdev, lead as _lead
from .client import SWAPPABLE
from .errors import GpumemError

MIN_BYTES = 16 << 20
SLAB_BYTES = 64 << 20
SLAB_SHARE = 16         # a slab is at most this share of the VRAM pool
TAIL_MARGIN = 2         # slabs of free VRAM left for the backward pass
ALIGN = 512             # bytes: each tensor's offset in a slab
STARVED_WAIT = 0.05     # seconds a buffer waits after a refusal (_alloc)
LEAD = 512 << 20


def _is_weight(tensor):
    """A parameter, a view of one (autograd saves weight.t()), or autocast's
    copy of one in another dtype (and views of that)."""
    t = tensor
    while t is not None:
        if t.is_leaf and t.requires_grad:
            return True
        fn = t.grad_fn
        if fn is not None and type(fn).__name__ == "ToCopyBackward0":
            nxt = fn.next_functions
            if nxt and nxt[0][0] is not None and \
                    type(nxt[0][0]).__name__ == "AccumulateGrad":
                return True
        t = t._base
    return False


# The tail of a forward pass kept in VRAM (module comment): client ->
# {device: [slabs of the last pass, slabs at its end not paged out]}
_tail_lock = threading.Lock()
_tails = weakref.WeakKeyDictionary()


def _align(nbytes):
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


class _Slab:
    """One gpu-memd buffer holding the saved tensors packed into it, in
    pack order: one tensor (slab_bytes=0, or a tensor of slab_bytes or
    more) or as many as fit. Open while tensors are copied into it; sealed
    (released after the copies, and paged out) once full or when the
    forward pass ends; freed once autograd dropped all of them and the
    last copy that touches it is over."""
    __slots__ = ("index", "buf", "size", "used", "live", "device",
                 "sealed", "prefetched", "acquired", "stream", "filled",
                 "read")

    def __init__(self, index, buf, size, device):
        self.index = index
        self.buf = buf
        self.size = size
        self.used = 0
        self.live = 0               # its saved tensors autograd holds
        self.device = device
        self.sealed = False
        self.prefetched = False
        self.acquired = False
        self.stream = None          # the side stream copying into it
        self.filled = None          # an event after the last copy in
        self.read = None            # an event after the last copy out


class _Saved:
    """One offloaded tensor: its slab and the view of it there."""
    __slots__ = ("offloader", "index", "slab", "view", "nbytes",
                 "__weakref__")

    def __init__(self, offloader, index, slab, view, nbytes):
        self.offloader = offloader
        self.index = index
        self.slab = slab
        self.view = view
        self.nbytes = nbytes

    @property
    def buf(self):
        return self.slab.buf

    def __del__(self):
        offloader = self.offloader
        if offloader is not None:
            offloader._retire(self)


class Offloader:
    """The state of one offload_activations() block (and of the backward
    passes of what it saved). `stats` counts what it did."""

    def __init__(self, client, min_bytes=MIN_BYTES, lead=None, pageout=True,
                 timeout=None, slab_bytes=SLAB_BYTES):
        if min_bytes < 1:
            raise ValueError(f"min_bytes={min_bytes}: 1 or more")
        if lead is not None and lead < 0:
            raise ValueError(f"lead={lead}: 0 or more bytes (None: planned "
                             "from the link)")
        if slab_bytes < 0:
            raise ValueError(f"slab_bytes={slab_bytes}: 0 (a buffer per "
                             "tensor) or more")
        self.client = client
        self.ops = _torchdev.ops_for(client)
        self.min_bytes = int(min_bytes)
        self.slab_bytes = _align(int(slab_bytes))
        self.lead = LEAD if lead is None else int(lead)
        # planning (module comment): marks of the first and last offloaded
        # pack, the bytes packed from the first, the largest buffer;
        # `plan` once it ran
        self._plan_pending = lead is None
        self._marks = [None, None]
        self._first_bytes = 0
        self._largest = 0
        self.plan = None
        self.tail = None            # what _learn_tail decided last
        self.pageout = pageout
        self.timeout = timeout
        self._starved = False
        self._lock = threading.RLock()
        # weak references in pack order (autograd holds the _Saved; when it
        # drops one, _Saved.__del__ retires it), None once retired
        self._saved = []
        self._slabs = []            # in open order, None once retired
        self._open = {}             # device index -> its open slab
        self._slab_sizes = {}       # device index -> _slab_size
        self._retired = []          # (buffer, events) waiting for them
        self.stats = {"packed": 0, "offloaded": 0, "offloaded_bytes": 0,
                      "kept": 0, "kept_bytes": 0, "kept_no_room": 0,
                      "cache_released": 0, "buffers": 0, "tail_kept": 0,
                      "unpacked": 0,
                      "prefetched": 0, "freed": 0, "pageouts_refused": 0,
                      "prefetches_busy": 0}

    # ---- pack: forward pass ----------------------------------------------

    def _alloc(self, nbytes, device):
        """A buffer for saved tensors, or None when no room is made
        (_torchdev.alloc_or_none: ROOM_WAIT, lending what the process
        holds from LEND_WAIT on, then again after PyTorch gave back its
        unused cache): the tensor then stays where it is, which
        takes no memory it does not hold already. Waiting longer could
        wait for ever: the room may be held by this process itself
        (PyTorch's cache on gpu-memd, this process's acquired buffers),
        which frees nothing while the forward pass waits here (seen on
        the H200: a training step at twice its budget stuck in pack).
        After one refusal the pass's next tensors wait STARVED_WAIT only
        (cleared by the next buffer that fits)."""
        wait = STARVED_WAIT if self._starved else _torchdev.ROOM_WAIT
        if self.timeout is not None:
            wait = min(wait, self.timeout)
        buf = _torchdev.alloc_or_none(self.client, nbytes, device,
                                      SWAPPABLE, self.ops, wait)
        self._starved = buf is None
        return buf

    def _new_slab(self, size, device):
        buf = self._alloc(size, device)
        if buf is None:
            return None
        with self._lock:
            slab = _Slab(len(self._slabs), buf, size, device)
            self._slabs.append(slab)
        self.stats["buffers"] += 1
        self._largest = max(self._largest, size)
        return slab

    def _slab_size(self, device):
        """slab_bytes, at most 1/SLAB_SHARE of the device's VRAM pool: a
        slab is allocated whole, and one of a large share of a small pool
        would find no room where single tensors would."""
        size = self._slab_sizes.get(device)
        if size is None:
            size = self.slab_bytes
            pool = _lead.vram_capacity(self.client,
                                          self.ops.daemon_device(device))
            if pool:
                size = min(size, pool // SLAB_SHARE // ALIGN * ALIGN)
            self._slab_sizes[device] = size
        return size

    def _place(self, nbytes, device):
        """The slab a tensor of `nbytes` goes into and its offset there
        (None: no room): the open slab of its device while it has room,
        else a new one (the open one is sealed); a slab of its own for a
        tensor of a slab's size or more."""
        size = _align(nbytes)
        slab_size = self._slab_size(device) if self.slab_bytes else 0
        if size >= slab_size:
            slab = self._new_slab(nbytes, device)
            return (slab, 0) if slab is not None else None
        slab = self._open.get(device)
        if slab is not None and slab.used + size <= slab.size:
            offset, slab.used = slab.used, slab.used + size
            return slab, offset
        if slab is not None:
            del self._open[device]
            self._seal(slab, self.pageout)
        slab = self._new_slab(slab_size, device)
        if slab is None:
            return None
        self._open[device] = slab
        slab.used = size
        return slab, 0

    def _in_tail(self, slab):
        """Whether `slab` is one of the last of the pass that the last
        pass learned to keep in VRAM (module comment: the tail)."""
        with _tail_lock:
            tail = _tails.get(self.client, {}).get(slab.device)
        return tail is not None and tail[1] > 0 and \
            slab.index >= tail[0] - 1 - tail[1]

    def _seal(self, slab, pageout):
        """No more tensors go into `slab`: released once the copies into
        it are over (the side stream's event, on the GPU), and paged out
        when `pageout`, sent without waiting (flush() hears the answers),
        unless it is in the tail kept in VRAM."""
        if pageout and self.slab_bytes and self._in_tail(slab):
            pageout = False
            self.stats["tail_kept"] += 1
        slab.sealed = True
        slab.buf.release_after(slab.stream, wait=False)
        if pageout:
            try:
                slab.buf.pageout(wait=False)
            except GpumemError:
                # not sent (the connection is gone, the buffer revoked):
                # counted as a refusal (flush() hears the daemon's)
                self.stats["pageouts_refused"] += 1
        if slab.live == 0:
            self._retire_slab(slab)

    def pack(self, tensor):
        self.stats["packed"] += 1
        nbytes = tensor.numel() * tensor.element_size()
        if (nbytes < self.min_bytes or not self.ops.accepts(tensor)
                or not tensor.is_contiguous() or _is_weight(tensor)):
            self.stats["kept"] += 1
            self.stats["kept_bytes"] += nbytes
            return tensor
        self._free_retired()
        placed = self._place(nbytes, self.ops.device_index(tensor))
        if placed is None:
            self.stats["kept"] += 1
            self.stats["kept_bytes"] += nbytes
            self.stats["kept_no_room"] += 1
            return tensor
        slab, offset = placed
        view = slab.buf.as_tensor(tensor.dtype, tuple(tensor.shape), offset)
        slab.stream, slab.filled = self.ops.copy_aside(view, tensor)
        with self._lock:
            slab.live += 1
            saved = _Saved(self, len(self._saved), slab, view, nbytes)
            self._saved.append(weakref.ref(saved))
            if self._plan_pending:
                mark = self.ops.mark(tensor.device)
                if self._marks[0] is None:
                    self._marks[0] = mark
                    self._first_bytes = nbytes
                self._marks[1] = mark
        if self._open.get(slab.device) is not slab:    # its own: full
            self._seal(slab, self.pageout)
        self.stats["offloaded"] += 1
        self.stats["offloaded_bytes"] += nbytes
        return saved

    def end_pass(self):
        """The forward pass is over: its open slabs are sealed but not
        paged out. They hold the last tensors packed, the first the
        backward pass unpacks: paging them out would have it wait for
        their way back (the daemon still moves them out if it needs the
        room)."""
        for device in list(self._open):
            self._seal(self._open.pop(device), False)
        if self.pageout and self.slab_bytes:
            self._learn_tail()

    def _learn_tail(self):
        """How many slabs before the last (the open one, never paged out)
        the next pass keeps in VRAM: those kept this time, plus (or
        minus) what the VRAM pool has free now, beyond TAIL_MARGIN slabs
        for the backward pass's own memory, in slabs (module comment: the
        tail). Only the slabs alive at the end count (those autograd
        dropped already left _slabs)."""
        counts, sizes = {}, {}
        with self._lock:
            for slab in self._slabs:
                if slab is not None:
                    d = slab.device
                    counts[d] = max(counts.get(d, 0), slab.index + 1)
                    sizes[d] = max(sizes.get(d, 0), slab.size)
        if not counts:
            return
        try:
            pools = {p.device: p for p in self.client.status("pools").pools
                     if p.tier == "vram"}
        except GpumemError:
            return
        for device, n in counts.items():
            pool = pools.get(device)
            size = sizes[device]
            if pool is None or not size:
                continue
            with _tail_lock:
                per = _tails.setdefault(self.client, {})
                keep = per.get(device, (0, 0))[1]
                spare = pool.free // size - TAIL_MARGIN
                keep = max(0, min(n - 1, keep + spare))
                per[device] = (n, keep)
            self.tail = {"device": device, "slabs": n, "keep": keep,
                         "pool_free": pool.free}

    # ---- unpack: backward pass -------------------------------------------

    def unpack(self, packed):
        if not isinstance(packed, _Saved):
            return packed
        self._free_retired()
        slab = packed.slab
        if not slab.sealed:             # unpacked inside the forward pass
            self._open.pop(slab.device, None)
            self._seal(slab, False)
        if self._plan_pending:
            self._plan_lead(slab.device)
        self._prefetch_before(slab.index)
        if not slab.acquired:           # the first of its tensors
            # its room may be PyTorch's unused cache (_torchdev.ROOM_WAIT)
            if _torchdev.acquire_making_room(slab.buf, self.timeout,
                                             self.ops):
                self.stats["cache_released"] += 1
            slab.acquired = True
        # a slab that never left VRAM: its copies in may still run
        self.ops.wait(slab.filled, slab.device)
        out = packed.view.clone()   # on the compute stream
        slab.read = self.ops.record(self.ops.current_stream(slab.device))
        self.stats["unpacked"] += 1
        return out

    def _plan_lead(self, device):
        """The lead from the link and the forward pass's timing (module
        comment), once that timing is over; LEAD until then."""
        with self._lock:
            first, last = self._marks
            after_first = self.stats["offloaded_bytes"] - self._first_bytes
            if first is None or after_first <= 0:
                self._plan_pending = False      # nothing to time: LEAD
                return
            secs = self.ops.seconds(first, last)
            if secs is None:
                return                          # the GPU is not there yet
            self._plan_pending = False
            x = self._largest
        compute = secs * x / after_first
        rate = _lead.link_in(self.client, self.ops.daemon_device(device))
        ahead = _lead.units_ahead(x, rate, compute)
        if ahead is not None:
            # slabs: one more ahead, the margin the backward pass's compute
            # per byte did not give (H200, GPT-2 8 x 1024: with one 208
            # MiB slab ahead its acquires waited 89 ms a step)
            if self.slab_bytes:
                ahead += 1
            self.lead = ahead * x
        self.plan = {"link_bytes_per_s_in": rate, "buffer_bytes": x,
                     "compute_s": compute,
                     "copy_s": x / rate if rate else None,
                     "lead": self.lead, "planned": ahead is not None}

    def _prefetch_before(self, index):
        """Prefetch the slabs opened before slab `index` (the next ones
        backward will want), newest first, until `lead` bytes are on their
        way; each at most once."""
        ahead = 0
        with self._lock:
            j = index - 1
            while j >= 0 and ahead < self.lead:
                slab = self._slabs[j]
                j -= 1
                if slab is None or not slab.sealed:
                    continue
                ahead += slab.size
                if slab.prefetched or slab.acquired:
                    continue
                slab.prefetched = True
                slab.buf.prefetch(wait=False)
                self.stats["prefetched"] += 1

    def flush(self):
        """Hear the daemon's answers to the calls sent without waiting
        (module comment; _torchdev.flush)."""
        _torchdev.flush(self.client, self.stats)

    # ---- freeing ---------------------------------------------------------

    def _retire(self, saved):
        """autograd dropped `saved`: its slab is freed once it held the
        last of its tensors, is sealed and the copies that use it are
        over (at once on sim)."""
        with self._lock:
            i = saved.index
            if i < len(self._saved) and self._saved[i] is not None and \
                    self._saved[i]() in (saved, None):
                self._saved[i] = None
            saved.offloader = None
            slab = saved.slab
            slab.live -= 1
            if slab.live == 0 and slab.sealed:
                self._retire_slab(slab)
        self._free_retired()

    def _retire_slab(self, slab):
        with self._lock:
            if slab.index < len(self._slabs) and \
                    self._slabs[slab.index] is slab:
                self._slabs[slab.index] = None
            self._retired.append((slab.buf, (slab.filled, slab.read)))
            drain = not self._open and not any(
                r is not None and r() for r in self._saved)
            events = [e for _, evs in self._retired for e in evs] \
                if drain else []
        if drain:
            # the pass's last buffer: nothing else would free the retired
            # ones (the next pass is another Offloader), and they hold
            # their VRAM (acquired) meanwhile (H200: the optimizer step's
            # allocation waited for ever on them); free them once the
            # copies in and out of them are over
            for event in events:
                self.ops.synchronize(event)
            self._free_retired()

    def _free_retired(self):
        with self._lock:
            keep, free = [], []
            for buf, events in self._retired:
                if all(self.ops.done(e) for e in events):
                    free.append(buf)
                else:
                    keep.append((buf, events))
            self._retired = keep
            if all(s is None for s in self._saved) and not self._open:
                self._saved = []    # indices restart with the next forward
                if all(s is None for s in self._slabs):
                    self._slabs = []
        for buf in free:
            try:
                buf.free()
                self.stats["freed"] += 1
            except Exception:
                pass    # the client closed: the daemon freed it already

    def pending(self):
        """Saved tensors still held in gpu-memd buffers."""
        with self._lock:
            return sum(1 for r in self._saved if r is not None and r())

    def finish(self, synchronize=True):
        """Free what autograd already dropped (waiting for their copies
        when `synchronize`)."""
        if synchronize and self.ops.cuda:
            import torch
            torch.cuda.synchronize()
        self._free_retired()

    # idle(): offloaded buffers are released between uses already
    def _idle_enter(self, pageout=True):
        self._free_retired()

    def _idle_exit(self):
        pass


@contextlib.contextmanager
def offload_activations(min_bytes=MIN_BYTES, lead=None, client=None,
                        pageout=True, timeout=None, slab_bytes=SLAB_BYTES):
    """Offload what autograd saves in the block to gpu-memd buffers (see the
    module comment). `min_bytes`: smaller tensors stay; `lead`: bytes
    prefetched ahead in the backward pass (None: planned from the link,
    x * max(1, ceil(t_copy / t_compute)) for the largest buffer x, LEAD
    while it cannot be); `client`: a gpumem.Client (None:
    the process's default); `pageout`: page each buffer out once full
    (False: only when the daemon needs the room); `timeout`: seconds an
    alloc or acquire may wait for room (None: as long as it takes);
    `slab_bytes`: the size of the buffers the saved tensors are packed
    into, in pack order (0: a buffer per tensor; a tensor this large or
    larger gets its own). Yields the Offloader (its `stats`)."""
    import torch
    from . import current_client, idle
    offloader = Offloader(client or current_client(), min_bytes, lead,
                          pageout, timeout, slab_bytes)
    idle.register(offloader)
    try:
        with torch.autograd.graph.saved_tensors_hooks(offloader.pack,
                                                      offloader.unpack):
            yield offloader
    finally:
        offloader.end_pass()
    offloader.flush()
