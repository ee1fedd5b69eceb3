"""idle — give the daemon what this process's streamed and offloaded
buffers hold while no step runs.

    for batch in loader:
        train_step(batch)
        with gpumem.torch.idle():      # evaluation elsewhere, data loading
            batch = next_batch()

On entry every gpumem.torch.stream() of the process releases the blocks it
keeps resident (after the work queued on the current stream) and pages them
out, and every offload_activations() frees what autograd already dropped;
other processes can then take the VRAM. On exit the resident blocks are
prefetched together and acquired again (the acquire waits for each), so the
next step finds them in VRAM. Every gpumem.torch.spill() releases its
buffers and pages out those in VRAM, and on exit acquires them again,
back in VRAM when room is made in time (spill.py). Offloaded activations
are released between uses already: nothing more to give.

With idle(pageout=False) nothing is paged out on entry: what was resident
is released only, moved out by the daemon if another process needs the
room, and still in VRAM on exit otherwise. Paging out 2.4 GB of an
inference job's weights at every 0.2 s gap between its requests is what
made each request's first token wait for them under co-tenancy (H100,
bench_cotenancy, 2026-11-26), and what kept [limits] priority_grace_ms
from keeping them.

With gpumem.torch.enable() (PyTorch's allocations on gpu-memd, the shim)
idle() also gives back PyTorch's cached segments that no tensor uses
(torch.cuda.empty_cache()) when another process waits for room: between
steps of a training job they are most of what it holds, and the next step
allocates them again as it needs them. Kept, they are room no other
process can have. Only when another waits, as allocating them again costs:
a 2-block GPT-2 step went from 37.5 to 50 ms alone with the cache given
back at every step; two of them and an inference job on a 4 GiB budget
took x1.23 the time of one after another with it and x1.52 without
(bench_cotenancy, H100, 2026-11-26). release_cache=False keeps them.

What registers here (streaming.Streamer, spill.Spiller, offload.Offloader)
is held weakly: a model or offload block that goes away drops out.
"""
import contextlib
import sys
import threading
import weakref

_members = weakref.WeakSet()
_lock = threading.Lock()


def register(member):
    """Take part in idle(): `member` has `client`, _idle_enter() and
    _idle_exit()."""
    with _lock:
        _members.add(member)


def members():
    """What takes part now: those whose Client is still open."""
    with _lock:
        return [m for m in _members if not m.client.closed]


def _cache_wanted(entered):
    """Whether PyTorch's cache is VRAM of the daemon's (its caching
    allocator takes its segments from gpu-memd in this process:
    gpumem.torch.enable() or gpumem-run loaded the shim, and CUDA is up)
    that another process waits for."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return False
    from . import torch as gt
    if not gt._shim_loaded():
        return False
    from . import _torchdev, current_client
    client = entered[0].client if entered else current_client()
    return _torchdev.others_wait(client)


@contextlib.contextmanager
def idle(pageout=True, release_cache=True):
    """Release and page out this process's streamed weights for the block;
    bring them back on exit (see the module comment). pageout=False only
    releases them: the daemon moves them out if another process needs the
    room, and they are still in VRAM on exit otherwise (an inference server
    between requests; `[limits] priority_grace_ms` keeps a higher
    priority's from lower ones meanwhile). release_cache: on the shim,
    PyTorch's unused cached segments go back to the daemon on entry
    (torch.cuda.empty_cache()) when another process waits for room.
    Yields the list of what took part."""
    entered = []
    try:
        for member in members():
            member._idle_enter(pageout)
            entered.append(member)
        if release_cache and _cache_wanted(entered):
            sys.modules["torch"].cuda.empty_cache()
        yield entered
    finally:
        for member in entered:
            member._idle_exit()
