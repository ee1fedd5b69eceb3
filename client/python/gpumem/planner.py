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
copies back run one after another at link_in, each asked for when the
backward pass reaches the block after it, as fit.py asks stash.py.

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
TIMING_REASON = "timing the blocks' forward passes"


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
    held_bytes: int = 0
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
                "held_bytes": self.held_bytes,
                "cost_s": self.cost_s, "checkpoint_s": self.checkpoint_s,
                "reason": self.reason}

    def summary(self):
        """One line: the counts and bytes of each mode and why."""
        mib = 1 << 20
        return (f"{self.count(KEEP)} kept ({self.kept_bytes // mib} MiB), "
                f"{self.count(OFFLOAD)} offloaded "
                f"({self.offloaded_bytes // mib} MiB), "
                f"{self.count(RECOMPUTE)} recomputed "
                f"({self.recomputed_bytes // mib} MiB), holding "
                f"{self.held_bytes // mib} MiB at the peak in "
                f"{self.room_bytes // mib} MiB of room; predicted "
                f"+{self.cost_s * 1e3:.1f} ms a step "
                f"(checkpointing +{self.checkpoint_s * 1e3:.1f}): "
                f"{self.reason}")


def simulate_link(blocks, offloaded, link_out, link_in):
    """Seconds a step waits for offload copies the compute does not hide,
    for the blocks whose indices are in `offloaded`, as stash.py runs
    them. link_out/link_in: bytes per second each way (0: unknown, every
    copy as if at 1 GB/s).

    Forward: a block's copy out starts when its forward ends (its tensors
    go as they are saved: a little earlier in truth) and the copies out run
    one after another; they hold VRAM, not the compute. Backward: the
    blocks run in reverse, each taking BACKWARD_RATIO times its forward;
    an offloaded block's copy back starts when the backward pass reaches
    the block after it (one block ahead; the last block's as the backward
    pass starts), never before its own copy out is over;
    the copies back run one after another, and a block whose bytes are not
    back when its backward starts waits for them."""
    if not offloaded:
        return 0.0
    out = link_out or 1e9
    back = link_in or 1e9
    t = 0.0
    link_free = 0.0
    out_done = {}
    for i, b in enumerate(blocks):
        t += b.forward_s
        if i in offloaded:
            link_free = max(link_free, t) + b.saved_bytes / out
            out_done[i] = link_free
    arrival = {}
    in_free = [0.0]

    def start(i, now):
        begin = max(now, in_free[0], out_done[i])
        in_free[0] = arrival[i] = begin + blocks[i].saved_bytes / back

    waited = 0.0
    for i in range(len(blocks) - 1, -1, -1):
        # the backward pass reaches block i: its bytes were asked for at
        # the block after it, the block before it is asked for now
        if i in offloaded and i not in arrival:
            start(i, t)
        if i - 1 in offloaded:
            start(i - 1, t)
        if i in offloaded and arrival[i] > t:
            waited += arrival[i] - t
            t = arrival[i]
        t += BACKWARD_RATIO * blocks[i].forward_s
    return waited


def out_backlog(blocks, offloaded, link_out):
    """Bytes of the offloaded blocks still in VRAM when the forward pass
    ends: their copies out, one after another at link_out from the end of
    each block's forward, are not over (0: unknown, as if at 1 GB/s).
    They are held at the step's peak (the loss, the start of the backward
    pass) as much as kept activations are."""
    out = link_out or 1e9
    t = 0.0
    link_free = 0.0
    done = []
    for i, b in enumerate(blocks):
        t += b.forward_s
        if i in offloaded:
            link_free = max(link_free, t) + b.saved_bytes / out
            done.append((link_free, b.saved_bytes))
    return int(sum(min(n, max(0.0, end - t) * out) for end, n in done))


def held_bytes(blocks, modes, link_out=0):
    """What the activations hold at the step's peak under `modes`: kept
    blocks' saved bytes, recomputed blocks' inputs, and what of the
    offloaded blocks' bytes has not left yet (out_backlog)."""
    held = 0
    for b, m in zip(blocks, modes):
        if m == KEEP:
            held += b.saved_bytes
        elif m == RECOMPUTE:
            held += b.saved_bytes - b.recompute_frees
    offloaded = {i for i, m in enumerate(modes) if m == OFFLOAD}
    if offloaded:
        held += out_backlog(blocks, offloaded, link_out)
    return held


def _cost(blocks, modes, link_out, link_in):
    recompute = sum(b.forward_s for b, m in zip(blocks, modes)
                    if m == RECOMPUTE)
    offloaded = {i for i, m in enumerate(modes) if m == OFFLOAD}
    return recompute + simulate_link(blocks, offloaded, link_out, link_in)


def _finish(blocks, modes, room, link_out, link_in, reason):
    plan = Plan(modes=list(modes), room_bytes=max(0, int(room)),
                names=[b.name for b in blocks], reason=reason)
    for b, m in zip(blocks, modes):
        if m == KEEP:
            plan.kept_bytes += b.saved_bytes
        elif m == OFFLOAD:
            plan.offloaded_bytes += b.saved_bytes
        else:
            plan.recomputed_bytes += b.saved_bytes
    plan.held_bytes = held_bytes(blocks, modes, link_out)
    plan.cost_s = _cost(blocks, modes, link_out, link_in)
    plan.checkpoint_s = sum(b.forward_s for b in blocks)
    return plan


def timing_plan(blocks, room_bytes, link_out=0, link_in=0):
    """The plan of the step that times the blocks when their forward times
    are not known yet (the profiling pass's include its copies to host):
    every block recomputed, which holds least but for offloading, and
    runs each block's forward pass without saving anything."""
    return _finish(blocks, [RECOMPUTE] * len(blocks), room_bytes, link_out,
                   link_in, TIMING_REASON)


def make_plan(blocks, room_bytes, link_out=0, link_in=0, offload=True):
    """The plan for `blocks` (BlockProfile, forward order) whose saved
    activations must fit `room_bytes` (what the budget leaves once the
    weights, gradients, optimizer state and working memory are counted).
    link_out/link_in: the bytes per second each way of the link offloaded
    activations cross (0: unknown); offload: False where nothing can be
    offloaded. Always returns a plan: where even recomputing every block
    does not fit, the plan recomputes every block (and offloads where that
    frees more) and its reason says the room is short."""
    n = len(blocks)
    modes = [KEEP] * n
    total = sum(b.saved_bytes for b in blocks)
    need = total - room_bytes
    if need <= 0:
        return _finish(blocks, modes, room_bytes, link_out, link_in,
                       "everything fits")
    allowed = (RECOMPUTE, OFFLOAD) if offload else (RECOMPUTE,)
    cost = 0.0
    freed = 0
    while freed < need:
        held = total - freed
        best = None
        for i, b in enumerate(blocks):
            for mode in allowed:
                if mode == modes[i]:
                    continue
                trial = modes[:i] + [mode] + modes[i + 1:]
                gain = held - held_bytes(blocks, trial, link_out)
                if gain <= 0:
                    continue
                added = _cost(blocks, trial, link_out, link_in) - cost
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
    ckpt_freed = total - held_bytes(blocks, checkpoint)
    ckpt_cost = _cost(blocks, checkpoint, link_out, link_in)
    if ckpt_freed >= need and (not fits or ckpt_cost <= cost):
        return _finish(blocks, checkpoint, room_bytes, link_out, link_in,
                       "recomputing every block costs least")
    if not fits:
        return _finish(blocks, modes, room_bytes, link_out, link_in,
                       f"short of room by {(need - freed) >> 20} MiB even "
                       "with every block recomputed or offloaded")
    if OFFLOAD in modes and RECOMPUTE in modes:
        what = "offload what compute hides, recompute the rest"
    elif OFFLOAD in modes:
        what = "offload the earliest blocks, behind compute"
    else:
        what = "recompute the blocks cheapest per byte"
    return _finish(blocks, modes, room_bytes, link_out, link_in, what)
