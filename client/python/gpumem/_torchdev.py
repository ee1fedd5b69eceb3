"""_torchdev — the only CUDA-specific code of gpumem's offload, streaming,
spill and idle modules: which tensors a backend's buffers can stand in
for and the torch device they are on, the side stream the offload copies
run on, the events that say a copy is over, the marks that time compute
(for the prefetch lead, lead.py), and freeing a buffer only once the
kernels that may read it have run.

On the sim backend a buffer is host memory and its tensor views are CPU
tensors, so a copy is synchronous, there are no streams (release_after is
release) and every "event" is already done: HostOps. On the cuda backend
the views are CUDA tensors and copies are queued on streams: CudaOps. The
rest of offload.py and streaming.py is the same code on both, which is
what lets CI test their logic, their calls to the daemon and their results
bit for bit on CPU.
"""
import os
import threading
import time
import weakref

from .client import YIELD
from .errors import (Busy, CopyFailed, GpumemError, InvalidArgument,
                     NotSupported, OutOfMemory, TimedOut, TooLarge)

# Seconds a buffer of ours waits for room before PyTorch is asked for its
# unused cache (acquire_making_room, alloc_or_none): with gpumem.torch.enable() that cache is
# gpu-memd buffers of this process, which PyTorch frees only when one of
# its own allocations fails, never while our call waits.
ROOM_WAIT = 1.0

# Seconds an acquire waits for room before it lends the daemon what this
# process holds in use (the rest of the wait up to ROOM_WAIT, and after
# it, lends). Separate from ROOM_WAIT: lending costs a synchronize and,
# if the daemon takes the loan, moves the lent buffers out and back, but
# room held by processes that are all mid-step frees only through a loan:
# with the loan after a plain ROOM_WAIT the inference job of
# bench_cotenancy waited ~1.1 s, or a multiple, for every first token
# (H100, 2026-11-26).
LEND_WAIT = 0.05


_device_maps = weakref.WeakKeyDictionary()   # client -> {ordinal: device}
_device_maps_lock = threading.Lock()


def daemon_device(client, ordinal):
    """The daemon's device that is this process's CUDA device `ordinal`
    (Client.device_from_cuda, kept per client): they differ under a
    CUDA_VISIBLE_DEVICES that hides or reorders GPUs, as Slurm and
    torchrun set it. From a daemon that does not say its devices' UUIDs,
    the ordinal itself, as before. NoSuchDevice when the GPU is not the
    daemon's."""
    with _device_maps_lock:
        known = _device_maps.setdefault(client, {})
        if ordinal not in known:
            try:
                known[ordinal] = client.device_from_cuda(ordinal)
            except NotSupported:
                known[ordinal] = ordinal
        return known[ordinal]


def cuda_ordinal(client, device):
    """The reverse of daemon_device: this process's CUDA ordinal of the
    daemon's `device`, among the ordinals asked about so far, else of all
    the process's CUDA devices; `device` itself when none is it."""
    with _device_maps_lock:
        for ordinal, d in _device_maps.get(client, {}).items():
            if d == device:
                return ordinal
    import torch
    for ordinal in range(torch.cuda.device_count()):
        try:
            if daemon_device(client, ordinal) == device:
                return ordinal
        except GpumemError:
            continue
    return device


class HostOps:
    """sim: tensors are CPU tensors, copies end when copy_ returns."""
    cuda = False

    def __init__(self, client):
        self.client = client

    @staticmethod
    def accepts(tensor):
        return tensor.device.type == "cpu"

    @staticmethod
    def device_index(tensor):
        return 0

    @staticmethod
    def daemon_device(index):
        """The daemon's device of torch device `index`: CPU tensors have
        no CUDA device, so the number stands as it is."""
        return index

    @staticmethod
    def device_of(buf):
        import torch
        return torch.device("cpu")

    @staticmethod
    def torch_device(index):
        """The torch device of buffers on CUDA device `index`."""
        import torch
        return torch.device("cpu")

    @staticmethod
    def current_stream(device=None):
        return None

    def copy_aside(self, dst, src):
        """Copy src into dst off the compute stream; returns the stream the
        copy is queued on (for release_after) and an event to wait for."""
        dst.copy_(src)
        return None, None

    @staticmethod
    def record(stream=None):
        return None

    @staticmethod
    def wait(event, device=None):
        """Have the compute stream of `device` wait for `event` (None:
        nothing)."""

    @staticmethod
    def synchronize(event):
        """Wait on the host until `event` is done (None: nothing)."""

    @staticmethod
    def done(event):
        return True

    @staticmethod
    def mark(device=None):
        """A point in the compute, to time what runs between two."""
        return time.perf_counter()

    @staticmethod
    def seconds(start, end, wait=False):
        """Seconds from mark `start` to mark `end`; None while the work
        between them is not over (cuda) unless `wait`."""
        return end - start

    @staticmethod
    def free(buf, device):
        """Free `buf`: nothing is queued that may still read it (copies end
        when copy_ returns), so at once."""
        buf.free()

    @staticmethod
    def release_cached():
        """Give back what PyTorch caches unused: nothing on the CPU."""
        return False

    @staticmethod
    def quiesce():
        """Let nothing queued touch this process's memory: on the CPU the
        work is done when each call returns."""


class CudaOps:
    """cuda: the pack copy runs on one side stream per device, after the
    work queued on the compute stream (wait_stream), and the source tensor
    is kept from reuse until it ends (record_stream)."""
    cuda = True

    def __init__(self, client):
        self.client = client
        self._side = {}
        self._lock = threading.Lock()

    @staticmethod
    def accepts(tensor):
        return tensor.device.type == "cuda"

    @staticmethod
    def device_index(tensor):
        return tensor.device.index or 0

    def daemon_device(self, index):
        """The daemon's device that is torch's "cuda:index" (the number
        buffers are allocated and the daemon's pools are read with)."""
        return daemon_device(self.client, index)

    def device_of(self, buf):
        import torch
        return torch.device("cuda", cuda_ordinal(self.client, buf.device))

    @staticmethod
    def torch_device(index):
        import torch
        return torch.device("cuda", index)

    @staticmethod
    def current_stream(device=None):
        import torch
        return torch.cuda.current_stream(device)

    def side_stream(self, device):
        import torch
        with self._lock:
            stream = self._side.get(device)
            if stream is None:
                stream = self._side[device] = torch.cuda.Stream(device)
            return stream

    def copy_aside(self, dst, src):
        import torch
        side = self.side_stream(src.device)
        side.wait_stream(torch.cuda.current_stream(src.device))
        with torch.cuda.stream(side):
            dst.copy_(src, non_blocking=True)
        src.record_stream(side)
        return side, self.record(side)

    @staticmethod
    def record(stream=None):
        import torch
        event = torch.cuda.Event()
        event.record(stream)
        return event

    @staticmethod
    def wait(event, device=None):
        import torch
        if event is not None:
            torch.cuda.current_stream(device).wait_event(event)

    @staticmethod
    def synchronize(event):
        if event is not None:
            event.synchronize()

    @staticmethod
    def done(event):
        return event is None or event.query()

    @staticmethod
    def mark(device=None):
        """An event with timing on the current stream: the marks time the
        GPU's work between them, launch gaps included, with no host
        synchronization."""
        import torch
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(device))
        return event

    @staticmethod
    def seconds(start, end, wait=False):
        if wait:
            end.synchronize()
        elif not end.query():
            return None
        return start.elapsed_time(end) / 1e3

    @staticmethod
    def free(buf, device):
        """Free `buf` once every kernel queued on `device`, which may still
        read its views, has run."""
        import torch
        torch.cuda.synchronize(device)
        buf.free()

    @staticmethod
    def release_cached():
        """Give back the segments PyTorch's caching allocator holds unused
        (torch.cuda.empty_cache). With gpumem.torch.enable() those are
        gpu-memd buffers of this process: a buffer of ours waiting for
        room they hold would wait for ever, as PyTorch frees its cache
        only when its own allocation fails. True when it ran."""
        import torch
        torch.cuda.empty_cache()
        return True

    @staticmethod
    def quiesce():
        """Wait for every kernel and copy queued on this process's devices,
        so that its buffers may move while it waits (GMD_ALLOC_YIELD)."""
        import torch
        for d in range(torch.cuda.device_count()):
            torch.cuda.synchronize(d)


def model_device_index(model, ops, client, device, who):
    """The CUDA device index a model's buffers go on: `device`'s, else
    that of the model's first CUDA parameter, else 0 (a model on the CPU).
    This process's ordinal, torch's "cuda:N": ops.daemon_device turns it
    into the daemon's device where buffers are made and pools read.
    ValueError when the model is on the GPU and the daemon serves host
    memory (sim). `who` names the caller in the message."""
    import torch
    if device is not None:
        return torch.device(device).index or 0
    for p in model.parameters():
        if p.device.type == "cuda":
            if not ops.cuda:
                raise ValueError(
                    f"{who}: the model is on the GPU but gpu-memd runs the "
                    f"{client.backend} backend (host memory): start it "
                    "with --backend cuda")
            return p.device.index or 0
    return 0


def ops_for(client):
    """HostOps on the sim backend, CudaOps otherwise."""
    return HostOps(client) if client.backend == "sim" else CudaOps(client)


def start_wait(timeout):
    """The first part of `timeout` an acquire waits without lending:
    LEND_WAIT, or all of a shorter timeout."""
    return LEND_WAIT if timeout is None else min(timeout, LEND_WAIT)


def room_wait(timeout):
    """The part of `timeout` a wait for room takes before PyTorch is asked
    for its unused cache: ROOM_WAIT, or all of a shorter timeout."""
    return ROOM_WAIT if timeout is None else min(timeout, ROOM_WAIT)


def _left(timeout, spent):
    return None if timeout is None else max(0.0, timeout - spent)


def _acquire_after_room(buf, timeout, ops, read_only):
    """An acquire that waited start_wait(timeout) in vain: the rest of
    `timeout` (None: for ever) waited out lending the daemon what this
    process holds (after ops.quiesce(): GMD_ACQUIRE_YIELD), so that two
    processes that each hold memory in use and wait for more do not wait
    for each other; from ROOM_WAIT on with PyTorch's unused cache given
    back. True when the cache was released."""
    first, second = start_wait(timeout), room_wait(timeout)
    if second > first:
        try:
            _lending(ops, lambda lend: buf.acquire(
                second - first, read_only=read_only, lend=lend))
            return False
        except TimedOut:
            pass
    released = ops.release_cached()
    _lending(ops, lambda lend: buf.acquire(
        _left(timeout, max(first, second)), read_only=read_only, lend=lend))
    return released


def _lending(ops, call):
    """call(True): a wait that lends the daemon what this process holds,
    after ops.quiesce() (nothing of the process touches it meanwhile). A
    daemon older than the flag refuses it: then call(False), a wait that
    does not lend."""
    ops.quiesce()
    try:
        return call(True)
    except InvalidArgument:
        return call(False)


def acquire_making_room(buf, timeout, ops, read_only=False):
    """buf.acquire(timeout, read_only), lending after LEND_WAIT, asking
    PyTorch for its unused cache after ROOM_WAIT and waiting out the rest
    of `timeout` (None: for ever). True when the cache was released on the
    way."""
    try:
        buf.acquire(start_wait(timeout), read_only=read_only)
        return False
    except TimedOut:
        return _acquire_after_room(buf, timeout, ops, read_only)


def finish_making_room(buf, timeout, ops, read_only=False):
    """acquire_making_room for an acquire started with
    buf.acquire_start(start_wait(timeout), read_only): its answer, and
    when that is TimedOut the same cache release and rest of the wait."""
    try:
        buf.acquire_finish()
        return False
    except TimedOut:
        return _acquire_after_room(buf, timeout, ops, read_only)


def alloc_making_room(client, nbytes, device, flags, timeout, ops):
    """client.alloc(nbytes, device, flags) waiting `timeout` seconds (None:
    for ever) for room. For a buffer that takes the place of PyTorch
    tensors (stream()'s optimizer state, made by the first optimizer step
    in PyTorch's cache): when no room is made within ROOM_WAIT and no
    other process holds VRAM through gpu-memd, PyTorch's unused cache is
    given back first, as that cache is then what holds the room
    (H100, GPT-2 17 x 2048 trained alone at half its peak: the state's
    buffer waited 120 s for room its own cache held unused). With other
    processes holding VRAM it waits for them instead, cache kept: two
    training jobs sharing a budget (bench_cotenancy) that gave their
    caches away mid-step each took the other's room and both waited out
    the timeout, where waiting lets the other finish its step and go
    idle. Its waits lend the daemon what this process holds (YIELD, after
    ops.quiesce(), from LEND_WAIT on), so that two processes that are
    both mid-step do not wait for each other for ever (bench_cotenancy,
    H100: two training jobs and an inference job all waited out 120 s,
    the pool all acquired); also those of the branch that gives the cache
    back. Plain there, begun when no other process held VRAM, the wait for
    a training job's first optimizer state held its 1.7 GiB in use while
    an inference job that started later waited, plainly too (stream()'s
    blocks, which come here now), with 2.3 GiB: nobody lent, nobody was
    served for 20 s (H100, bench_cotenancy, 5 s memory slices,
    2026-11-26)."""
    device = ops.daemon_device(device)

    def lending(wait):
        return _lending(ops, lambda lend: client.alloc(
            nbytes, device=device, flags=flags | (YIELD if lend else 0),
            timeout=wait))

    first = start_wait(timeout)
    buf = _alloc_in_time(client, nbytes, device, flags, first)
    if buf is not None:
        return buf
    if others_hold_vram(client):
        return lending(_left(timeout, first))
    second = room_wait(timeout)
    if second > first:
        buf = _alloc_lending_in_time(client, nbytes, device, flags,
                                     second - first, ops)
        if buf is not None:
            return buf
    ops.release_cached()
    return lending(_left(timeout, max(first, second)))


def _alloc_in_time(client, nbytes, device, flags, timeout):
    """client.alloc, or None when no room was made within `timeout`
    (TooLarge is raised: no wait can help)."""
    try:
        return client.alloc(nbytes, device=device, flags=flags,
                            timeout=timeout)
    except (OutOfMemory, TimedOut) as e:
        if isinstance(e, TooLarge):
            raise
    return None


def _alloc_lending_in_time(client, nbytes, device, flags, timeout, ops):
    """_alloc_in_time waiting with YIELD, after ops.quiesce() (_lending)."""
    return _lending(ops, lambda lend: _alloc_in_time(
        client, nbytes, device, flags | (YIELD if lend else 0), timeout))


def _any_other(client, what):
    """Whether what(c) holds for a client c of another process than this
    one (True when the daemon's status cannot be had)."""
    try:
        clients = client.status("clients").clients
    except GpumemError:
        return True
    me = os.getpid()
    return any(c.pid != me and what(c) for c in clients)


def others_hold_vram(client):
    """Whether a process other than this one holds VRAM through gpu-memd
    (the daemon's clients with their vram_bytes; one whose details are
    hidden from this user counts as holding; so does any when the status
    cannot be had)."""
    return _any_other(client, lambda c: c.vram_bytes or c.details_hidden)


def others_wait(client):
    """Whether a process other than this one waits for room in gpu-memd
    (or the status cannot be had)."""
    return _any_other(client, lambda c: c.waiting)


def alloc_or_none(client, nbytes, device, flags, ops, wait):
    """A buffer, or None when no room is made within `wait` seconds, asked
    twice, the second time after PyTorch's unused cache was given back
    (ops.release_cached): for callers that can do without (offload keeps
    the tensor where it is). Each ask waits LEND_WAIT plainly, then lends
    the daemon what this process holds (YIELD, after ops.quiesce()) for
    the rest of `wait`, as acquire_making_room does: the forward pass that
    waits here holds its activations and PyTorch's cache, which a plain
    wait keeps from everybody else. Seen on the H100 (bench_cotenancy,
    two training jobs in 1 s memory slices, 2026-11-26): a job blocked
    here for its ROOM_WAIT and again after its cache went back held 2.7
    GiB in use, and the other job, whose slice it was, waited for that
    memory until its slice ran out; each handover took 4-7 s."""
    def once():
        first = start_wait(wait)
        buf = _alloc_in_time(client, nbytes, device, flags, first)
        if buf is None and wait > first:
            buf = _alloc_lending_in_time(client, nbytes, device, flags,
                                         wait - first, ops)
        return buf

    device = ops.daemon_device(device)
    try:
        buf = once()
        if buf is None and ops.release_cached():
            buf = once()
    except TooLarge:
        return None
    return buf


def flush(client, stats):
    """Hear the daemon's answers to the calls stream() and offload sent
    without waiting (client.flush): a refused pageout (host pool full,
    host quota, a copy the GPU refused a moment ago: the buffer stays
    released in VRAM for the daemon to move when it needs the room) is
    counted in stats["pageouts_refused"]; a prefetch refused because its
    buffer was acquired first (an unpack or a block's acquire on another
    thread, on a client stream() and offload may share) in
    stats["prefetches_busy"]: a prefetch is only a hint. Any other refusal
    raises: a release refused means the caller and the daemon disagree."""
    try:
        client.flush()
    except (OutOfMemory, CopyFailed):
        stats["pageouts_refused"] += 1
    except Busy as e:
        # the sentence names the call (gmd_flush)
        if "gmd_prefetch_nowait" not in str(e):
            raise
        stats["prefetches_busy"] += 1
