"""idle — give the daemon what this process's streamed and offloaded
buffers hold while no step runs (issue 13, item 4).

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

What registers here (streaming.Streamer, spill.Spiller, offload.Offloader)
is held weakly: a model or offload block that goes away drops out.
"""
import contextlib
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


@contextlib.contextmanager
def idle(pageout=True):
    """Release and page out this process's streamed weights for the block;
    bring them back on exit (see the module comment). pageout=False only
    releases them: the daemon moves them out if another process needs the
    room, and they are still in VRAM on exit otherwise (an inference server
    between requests; `[limits] priority_grace_ms` keeps a higher
    priority's from lower ones meanwhile). Yields the list of what took
    part."""
    entered = []
    try:
        for member in members():
            member._idle_enter(pageout)
            entered.append(member)
        yield entered
    finally:
        for member in entered:
            member._idle_exit()
