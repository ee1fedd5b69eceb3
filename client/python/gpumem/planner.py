"""planner — what gpumem.torch.fit does with each block's activations, from
measurements, with no torch in it (so it is tested on its own).

A training step that does not fit its budget must give up memory the
activations hold between the forward and the backward pass. Each block
(a transformer layer, say) can:

    keep        hold what autograd saves in VRAM          costs nothing
    recompute   save only its inputs and run its forward  costs its forward
                again in the backward pass (checkpointing) time, F
    offload     copy what it saves to gpu-memd buffers    costs the copy time
                paged out to host memory, and prefetch    the compute around
                them back for the backward pass           it cannot hide

Recomputing everything (gradient checkpointing) costs the whole forward
pass again; offloading everything saturates the link (a step that copies
longer than it computes waits for its copies). Mixing them is cheaper
than either (Capuchin, ASPLOS 2020): offload what the compute can hide,
the earliest blocks first, as their copies out have the rest of the
forward pass to run behind and their copies back the rest of the backward
pass; recompute the blocks whose forward is cheapest per byte freed.

The cost of a set of offloaded blocks comes from a small simulation of
the link next to the compute (simulate_link): copies out start when their
block's forward ends and run one after another at link_out; the backward
pass runs the blocks in reverse, each taking BACKWARD_RATIO times its
forward, and a block whose bytes are not back yet waits for them; the
copies back run one after another at link_in, each starting once the one
before it is in and the room for it is there (at most `lead` bytes on
their way at once). What is left after the forward pass ends counts too.

make_plan picks, greedily, the block and mode that frees the most bytes
per second of added cost until the activations fit the room, then keeps
the plan only if it costs less than recomputing every block that needs
it (so it is never predicted worse than checkpointing) and says which.
"""
from dataclasses import dataclass, field

KEEP = "keep"
RECOMPUTE = "recompute"
OFFLOAD = "offload"
MODES = (KEEP, RECOMPUTE, OFFLOAD)

# The backward pass of a block takes about twice its forward pass (two
# matrix products for one); measured on a GPT-2 block on an H100: 1.9-2.1.
BACKWARD_RATIO = 2.0


@dataclass
class BlockProfile:
    """What one block's forward pass costs and holds, measured.

    name: the module's name; saved_bytes: bytes autograd saved in the
    block (parameters left out: they are held anyway); input_bytes: bytes
    of the block's tensor inputs (what recompute keeps); forward_s: the
    forward pass's time in seconds."""
    name: str
    saved_bytes: int
    input_bytes: int
    forward_s: float

    @property
    def recompute_frees(self):
        return max(0, self.saved_bytes - self.input_bytes)


@dataclass
class Plan:
    """modes[i] is blocks[i]'s mode; the bytes each mode holds, the
    predicted added time a step (cost_s) and that of checkpointing every
    block (checkpoint_s), and one sentence on why (reason)."""
    modes: list
    kept_bytes: int = 0
    offloaded_bytes: int = 0
    recomputed_bytes: int = 0
    room_bytes: int = 0
    cost_s: float = 0.0
    checkpoint_s: float = 0.0
    reason: str = ""
    names: list = field(default_factory=list)

    def count(self, mode):
        return sum(1 for m in self.modes if m == mode)

    def to_dict(self):
        return {"modes": dict(zip(self.names, self.modes)),
                "kept_bytes": self.kept_bytes,
                "offloaded_bytes": self.offloaded_bytes,
                "recomputed_bytes": self.recomputed_bytes,
                "room_bytes": self.room_bytes,
                "cost_s": self.cost_s, "checkpoint_s": self.checkpoint_s,
                "reason": self.reason}

    def summary(self):
        """One line: the counts and bytes of each mode and why."""
        mib = 1 << 20
        return (f"{self.count(KEEP)} kept ({self.kept_bytes // mib} MiB), "
                f"{self.count(OFFLOAD)} offloaded "
                f"({self.offloaded_bytes // mib} MiB), "
                f"{self.count(RECOMPUTE)} recomputed "
                f"({self.recomputed_bytes // mib} MiB) for "
                f"{self.room_bytes // mib} MiB of room; predicted "
                f"+{self.cost_s * 1e3:.1f} ms a step "
                f"(checkpointing +{self.checkpoint_s * 1e3:.1f}): "
                f"{self.reason}")


def simulate_link(blocks, offloaded, link_out, link_in, lead=None):
    """Seconds a step waits for offload copies the compute does not hide,
    for the blocks whose indices are in `offloaded` (see the module
    comment). link_out/link_in: bytes per second (0: unknown, every copy
    exposed as if at 1 GB/s); lead: bytes that may be on their way back at
    once (None: no bound)."""
    if not offloaded:
        return 0.0
    out = link_out or 1e9
    back = link_in or 1e9
    # forward: copies out after their block, one at a time
    t = 0.0
    link_free = 0.0
    for i, b in enumerate(blocks):
        t += b.forward_s
        if i in offloaded:
            link_free = max(link_free, t) + b.saved_bytes / out
    waited = max(0.0, link_free - t)
    # backward: blocks in reverse; copies back in the same order, each
    # started once the one before is in and the lead has room
    order = [i for i in range(len(blocks) - 1, -1, -1) if i in offloaded]
    arrival = {}
    link_free = 0.0
    for i in order:
        arrival[i] = link_free = link_free + blocks[i].saved_bytes / back
    if lead is not None:
        arrival = _with_lead(blocks, order, arrival, back, lead)
    t = 0.0
    for i in range(len(blocks) - 1, -1, -1):
        if i in arrival and arrival[i] > t:
            waited += arrival[i] - t
            t = arrival[i]
        t += BACKWARD_RATIO * blocks[i].forward_s
    return waited


def _with_lead(blocks, order, arrival, back, lead):
    """Arrival times when at most `lead` bytes are on their way at once:
    a copy back starts no earlier than the arrival of the copy that
    brought the bytes on the way down to `lead` (a rough bound: the
    copies' own order already serialises them)."""
    out = {}
    on_way = []             # (arrival, bytes) of copies not yet consumed
    link_free = 0.0
    for i in order:
        nbytes = blocks[i].saved_bytes
        start = link_free
        while on_way and sum(n for _, n in on_way) + nbytes > lead:
            start = max(start, on_way.pop(0)[0])
        link_free = start + nbytes / back
        out[i] = link_free
        on_way.append((link_free, nbytes))
    return out


def _cost(blocks, modes, link_out, link_in, lead):
    recompute = sum(b.forward_s for b, m in zip(blocks, modes)
                    if m == RECOMPUTE)
    offloaded = {i for i, m in enumerate(modes) if m == OFFLOAD}
    return recompute + simulate_link(blocks, offloaded, link_out, link_in,
                                     lead)


def _freed(block, mode):
    if mode == RECOMPUTE:
        return block.recompute_frees
    if mode == OFFLOAD:
        return block.saved_bytes
    return 0


def _finish(blocks, modes, room, link_out, link_in, lead, reason):
    plan = Plan(modes=list(modes), room_bytes=max(0, int(room)),
                names=[b.name for b in blocks], reason=reason)
    for b, m in zip(blocks, modes):
        if m == KEEP:
            plan.kept_bytes += b.saved_bytes
        elif m == OFFLOAD:
            plan.offloaded_bytes += b.saved_bytes
        else:
            plan.recomputed_bytes += b.saved_bytes
    plan.cost_s = _cost(blocks, modes, link_out, link_in, lead)
    plan.checkpoint_s = sum(b.forward_s for b in blocks)
    return plan


def make_plan(blocks, room_bytes, link_out=0, link_in=0, lead=None,
              offload=True, offload_most=None):
    """The plan for `blocks` (BlockProfile, forward order) whose saved
    activations must fit `room_bytes` (what the budget leaves once the
    weights, gradients, optimizer state and working memory are counted).
    link_out/link_in: the link's bytes per second each way (0: unknown);
    lead: bytes that may be prefetched at once; offload: False where
    nothing can be offloaded (no daemon, a backend that does not serve the
    tensors); offload_most: the most bytes one offloaded block may save
    (its saved tensors come back together in the backward pass, into the
    daemon's VRAM: a block larger than the room for them there would
    wait for ever; None: no bound). Always returns a plan: where even recomputing every block
    does not fit, the plan recomputes every block (and offloads where that
    frees more) and its reason says the room is short."""
    n = len(blocks)
    modes = [KEEP] * n
    need = sum(b.saved_bytes for b in blocks) - room_bytes
    if need <= 0:
        return _finish(blocks, modes, room_bytes, link_out, link_in, lead,
                       "everything fits")
    allowed = (RECOMPUTE, OFFLOAD) if offload else (RECOMPUTE,)
    cost = 0.0
    freed = 0
    while freed < need:
        best = None
        for i, b in enumerate(blocks):
            for mode in allowed:
                if (mode == OFFLOAD and offload_most is not None
                        and b.saved_bytes > offload_most):
                    continue
                gain = _freed(b, mode) - _freed(b, modes[i])
                if gain <= 0:
                    continue
                trial = modes[:i] + [mode] + modes[i + 1:]
                added = _cost(blocks, trial, link_out, link_in, lead) - cost
                # the cheapest second per byte; among free ones the most
                # bytes
                key = (max(added, 0.0) / gain, -gain)
                if best is None or key < best[0]:
                    best = (key, i, mode, gain, added)
        if best is None:
            break
        _, i, mode, gain, added = best
        modes[i] = mode
        freed += gain
        cost += added
    fits = freed >= need
    checkpoint = [RECOMPUTE] * n
    ckpt_freed = sum(b.recompute_frees for b in blocks)
    ckpt_cost = _cost(blocks, checkpoint, link_out, link_in, lead)
    if ckpt_freed >= need and (not fits or ckpt_cost <= cost):
        return _finish(blocks, checkpoint, room_bytes, link_out, link_in,
                       lead, "recomputing every block costs least")
    if not fits:
        return _finish(blocks, modes, room_bytes, link_out, link_in, lead,
                       f"short of room by {(need - freed) >> 20} MiB even "
                       "with every block recomputed or offloaded")
    if OFFLOAD in modes and RECOMPUTE in modes:
        what = "offload what compute hides, recompute the rest"
    elif OFFLOAD in modes:
        what = "offload the earliest blocks, behind compute"
    else:
        what = "recompute the blocks cheapest per byte"
    return _finish(blocks, modes, room_bytes, link_out, link_in, lead, what)
