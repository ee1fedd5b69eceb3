"""offload — activation offload through gpu-memd (issue 13, item 1).

    with gpumem.torch.offload_activations(min_bytes=16 << 20):
        loss = model(batch).loss
    loss.backward()

Inside the block, every tensor autograd saves for the backward pass
(torch.autograd.graph.saved_tensors_hooks) that is at least `min_bytes`
large is copied into a SWAPPABLE gpu-memd buffer of its own, on a side
stream after the work that made it (cuda), then the buffer is released with
release_after(side stream), so the daemon moves it only once that copy is
done, with no host synchronization, and paged out at once: the saved
activations leave VRAM while the forward pass goes on. The original tensor
goes back to PyTorch's allocator when autograd drops it.

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
order it packed them. Each unpack prefetches the ones before it, until
`lead` bytes are on their way back, then acquires its own buffer (at once
when its prefetch is over; a passive swap-in at the head of the daemon's
queue when not), copies it into a fresh tensor on the compute stream and
keeps it acquired. autograd drops a saved tensor once the node that used
it has run (unless retain_graph); the buffer is then freed as soon as the
copy out of it is over (an event; at once on sim). Freed while acquired, it
is parked in libgpumem's cache of mappings, so the next step's pack of the
same size is a cache hit instead of a fresh allocation and mapping.

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
being the largest offloaded tensor:

    lead = x * max(1, ceil(t_copy / t_compute))      bytes
    x = the largest tensor offloaded in the forward pass
    t_copy = x / the link's host-to-VRAM bytes per second (the daemon's
             status: measured at start)
    t_compute = the forward pass's compute per offloaded tensor: the time
                from the first offloaded pack to the last (events on the
                compute stream) over the tensors between

so a tensor's copy is covered by the compute of the tensors before it in
the backward pass, whose compute per tensor is about twice the forward's
(the margin). It is planned at the first unpack whose forward timing is
over (no host synchronization; until then, and when the link is not
known, LEAD); `plan` says what was measured and decided.

The defaults are provisional: MIN_BYTES (16 MiB) because single moves of
PyTorch-sized segments reach 0.35 of the link at 2 MiB, 0.69 at 16 MiB and
0.86 at 64 MiB (issue 13's figures), and LEAD (512 MiB, about 10 ms of an
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


class _Saved:
    """One offloaded tensor: its buffer, the view of it, and where it is."""
    __slots__ = ("offloader", "index", "buf", "view", "nbytes", "device",
                 "event", "prefetched", "acquired", "__weakref__")

    def __init__(self, offloader, index, buf, view, nbytes, device, event):
        self.offloader = offloader
        self.index = index
        self.buf = buf
        self.view = view
        self.nbytes = nbytes
        self.device = device
        self.event = event          # the last copy that touches the buffer
        self.prefetched = False
        self.acquired = False

    def __del__(self):
        offloader = self.offloader
        if offloader is not None:
            offloader._retire(self)


class Offloader:
    """The state of one offload_activations() block (and of the backward
    passes of what it saved). `stats` counts what it did."""

    def __init__(self, client, min_bytes=MIN_BYTES, lead=None, pageout=True,
                 timeout=None):
        if min_bytes < 1:
            raise ValueError(f"min_bytes={min_bytes}: 1 or more")
        if lead is not None and lead < 0:
            raise ValueError(f"lead={lead}: 0 or more bytes (None: planned "
                             "from the link)")
        self.client = client
        self.ops = _torchdev.ops_for(client)
        self.min_bytes = int(min_bytes)
        self.lead = LEAD if lead is None else int(lead)
        # planning (module comment): marks of the first and last offloaded
        # pack, their count, the largest; `plan` once it ran
        self._plan_pending = lead is None
        self._marks = [None, None]
        self._largest = 0
        self.plan = None
        self.pageout = pageout
        self.timeout = timeout
        self._starved = False
        self._lock = threading.RLock()
        # weak references in pack order (autograd holds the _Saved; when it
        # drops one, _Saved.__del__ retires it), None once retired
        self._saved = []
        self._retired = []          # (_Saved fields) waiting for their event
        self.stats = {"packed": 0, "offloaded": 0, "offloaded_bytes": 0,
                      "kept": 0, "kept_bytes": 0, "kept_no_room": 0,
                      "cache_released": 0,
                      "unpacked": 0,
                      "prefetched": 0, "freed": 0, "pageouts_refused": 0,
                      "prefetches_busy": 0}

    # ---- pack: forward pass ----------------------------------------------

    def _alloc(self, nbytes, device):
        """A buffer for a saved tensor, or None when no room is made
        (_torchdev.alloc_or_none: ROOM_WAIT, then again after PyTorch gave
        back its unused cache): the tensor then stays where it is, which
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

    def pack(self, tensor):
        self.stats["packed"] += 1
        nbytes = tensor.numel() * tensor.element_size()
        if (nbytes < self.min_bytes or not self.ops.accepts(tensor)
                or not tensor.is_contiguous() or _is_weight(tensor)):
            self.stats["kept"] += 1
            self.stats["kept_bytes"] += nbytes
            return tensor
        self._free_retired()
        buf = self._alloc(nbytes, self.ops.device_index(tensor))
        if buf is None:
            self.stats["kept"] += 1
            self.stats["kept_bytes"] += nbytes
            self.stats["kept_no_room"] += 1
            return tensor
        view = buf.as_tensor(tensor.dtype, tuple(tensor.shape))
        stream, event = self.ops.copy_aside(view, tensor)
        buf.release_after(stream, wait=False)
        if self.pageout:
            try:
                buf.pageout(wait=False)
            except GpumemError:
                # not sent (the connection is gone, the buffer revoked):
                # counted as a refusal (flush() hears the daemon's)
                self.stats["pageouts_refused"] += 1
        with self._lock:
            saved = _Saved(self, len(self._saved), buf, view, nbytes,
                           tensor.device, event)
            self._saved.append(weakref.ref(saved))
            if self._plan_pending:
                mark = self.ops.mark(tensor.device)
                if self._marks[0] is None:
                    self._marks[0] = mark
                self._marks[1] = mark
                self._largest = max(self._largest, nbytes)
        self.stats["offloaded"] += 1
        self.stats["offloaded_bytes"] += nbytes
        return saved

    # ---- unpack: backward pass -------------------------------------------

    def unpack(self, packed):
        if not isinstance(packed, _Saved):
            return packed
        self._free_retired()
        if self._plan_pending:
            self._plan_lead(packed.buf.device)
        self._prefetch_before(packed.index)
        if not packed.acquired:         # a second unpack (retain_graph)
            # its room may be PyTorch's unused cache (_torchdev.ROOM_WAIT)
            if _torchdev.acquire_making_room(packed.buf, self.timeout,
                                             self.ops):
                self.stats["cache_released"] += 1
            packed.acquired = True
        out = packed.view.clone()   # on the compute stream
        packed.event = self.ops.record(self.ops.current_stream(packed.device))
        self.stats["unpacked"] += 1
        return out

    def _plan_lead(self, device):
        """The lead from the link and the forward pass's timing (module
        comment), once that timing is over; LEAD until then."""
        with self._lock:
            first, last = self._marks
            n = self.stats["offloaded"]
            if first is None or n < 2:
                self._plan_pending = False      # nothing to time: LEAD
                return
            secs = self.ops.seconds(first, last)
            if secs is None:
                return                          # the GPU is not there yet
            self._plan_pending = False
            x = self._largest
        compute = secs / (n - 1)
        rate = _lead.link_in(self.client, device)
        ahead = _lead.units_ahead(x, rate, compute)
        if ahead is not None:
            self.lead = ahead * x
        self.plan = {"link_bytes_per_s_in": rate, "tensor_bytes": x,
                     "compute_s": compute,
                     "copy_s": x / rate if rate else None,
                     "lead": self.lead, "planned": ahead is not None}

    def _prefetch_before(self, index):
        """Prefetch the saved tensors packed before `index` (the next ones
        backward will want), newest first, until `lead` bytes are on their
        way; each at most once."""
        ahead = 0
        with self._lock:
            j = index - 1
            while j >= 0 and ahead < self.lead:
                ref = self._saved[j]
                j -= 1
                saved = ref() if ref is not None else None
                if saved is None:
                    continue
                ahead += saved.nbytes
                if saved.prefetched:
                    continue
                saved.prefetched = True
                saved.buf.prefetch(wait=False)
                self.stats["prefetched"] += 1

    def flush(self):
        """Hear the daemon's answers to the calls sent without waiting
        (module comment; _torchdev.flush)."""
        _torchdev.flush(self.client, self.stats)

    # ---- freeing ---------------------------------------------------------

    def _retire(self, saved):
        """autograd dropped `saved`: free its buffer once the last copy
        that uses it is over (at once on sim)."""
        with self._lock:
            i = saved.index
            if i < len(self._saved) and self._saved[i] is not None and \
                    self._saved[i]() in (saved, None):
                self._saved[i] = None
            self._retired.append((saved.buf, saved.event))
            saved.offloader = None
        self._free_retired()

    def _free_retired(self):
        with self._lock:
            keep, free = [], []
            for buf, event in self._retired:
                if self.ops.done(event):
                    free.append(buf)
                else:
                    keep.append((buf, event))
            self._retired = keep
            if all(s is None for s in self._saved):
                self._saved = []    # indices restart with the next forward
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
    def _idle_enter(self):
        self._free_retired()

    def _idle_exit(self):
        pass


@contextlib.contextmanager
def offload_activations(min_bytes=MIN_BYTES, lead=None, client=None,
                        pageout=True, timeout=None):
    """Offload what autograd saves in the block to gpu-memd buffers (see the
    module comment). `min_bytes`: smaller tensors stay; `lead`: bytes
    prefetched ahead in the backward pass (None: planned from the link,
    x * max(1, ceil(t_copy / t_compute)) for the largest tensor x, LEAD
    while it cannot be); `client`: a gpumem.Client (None:
    the process's default); `pageout`: page each buffer out at once (False:
    only when the daemon needs the room); `timeout`: seconds an alloc or
    acquire may wait for room (None: as long as it takes). Yields the
    Offloader (its `stats`)."""
    import torch
    from . import current_client, idle
    offloader = Offloader(client or current_client(), min_bytes, lead,
                          pageout, timeout)
    idle.register(offloader)
    with torch.autograd.graph.saved_tensors_hooks(offloader.pack,
                                                  offloader.unpack):
        yield offloader
    offloader.flush()
