"""streaming — a model's weights in gpu-memd buffers, one block at a time
in VRAM.

    streamer = gpumem.torch.stream(model, optimizer, budget="8G")
    out = model(x)                     # unchanged code

The model is cut into blocks: the entries of its largest nn.ModuleList
(the transformer layers) unless `blocks` names them, plus one block "rest"
of every other parameter (embeddings, head, norms). Each block's parameters
are copied into one SWAPPABLE buffer, packed at 256-byte offsets, and each
param.data becomes a tensor view of it; module buffers (masks, rotary
tables) move to the buffers' device as ordinary tensors.

Within `budget` (bytes of weights this model may hold at once) the rest and
as many blocks as fit, after room for the block running and the `lead`
blocks prefetched ahead, stay resident: acquired for good (all of them
when the whole model fits). The others
stream: a forward pre-hook acquires the block (waiting for its swap-in only
when its prefetch is not over), prefetches the next `lead` non-resident
blocks and, in a pass that records no gradient, starts the next streamed
block's lease (Buffer.acquire_start: the round trip overlaps this block's
launches; the next pre-hook finishes it), and a forward hook releases it
after the work queued on the current stream (release_after: no host
synchronization), paging it out when
`pageout` says so: by default after a forward that records no gradient
(inference), where the block is not needed again before every other
streamed block has run, and then prefetching `lead` + 1 blocks after it
(no streamed block is held until the next acquire, so one more fits, and
its swap-in starts when this block's VRAM is free); its copy out overlaps
the next blocks' work,
where left for the daemon the next swap-in waits for the eviction that
makes its room in a pool as tight as the budget (sim, a pool holding 3 of
8 blocks of 4 MiB, 400 MB/s each way: 185 ms a pass left for the daemon,
95 ms paged out at once, the link's bound 84 ms). When training, released
blocks stay in VRAM until the daemon needs the room: the backward pass and
the optimizer step want them again soon. The order is
learned on the first forward pass; until then it is the blocks' order in
the model.

The forward and backward passes acquire a streamed block read only
(GMD_ACQUIRE_READ_ONLY): they read its weights, and only the optimizer step
(through stream()'s wrapped step, which acquires read-write) writes them.
So a block swapped in for a pass keeps its host copy in the daemon, and its
pageout after the pass copies nothing: the VRAM is dropped at once for the
next block's swap-in, and the weights cross the link one way. Weights
written by other code between passes must be written with the block
acquired read-write (it is not, unless resident): a write to a streamed
block under a pass's read-only lease may be lost at its next pageout.

The hooks' calls to the daemon (release_after, pageout, prefetch: the
_release, _pageout and _prefetch_from paths) are sent without waiting for
its answers (wait=False: libgpumem's gmd_*_nowait). None of them needs the
answer to go on, and each answer is a round trip (0.11-0.14 ms median on
the H200) on the thread that launches the GPU work: a batch-1 generation,
bound by the host's kernel launches, paid about 3 ms of a 20-26 ms token
for them. The daemon handles one client's requests in the order sent, so
the acquire that follows them finds them done. Their answers are heard by
a flush (Client.flush) at the start of each forward pass, in the pre-hook
of the first block of the learned order, and in remove(): there the
previous pass (its backward and optimizer step too) is over and every
answer long in, so the flush waits for nothing, where one at the end of a
pass would wait for the last block's answers on the launching thread (and
the end of a forward pass is not observable; a backward or a step is not
in every pass). A refused pageout (host pool full, host quota, a copy the
GPU refused a moment ago) is benign, as before: counted there in
stats["pageouts_refused"], once per flush that finds one (a flush tells
the first refusal only), the block left released in VRAM for the daemon to
move when it needs the room. Any other refusal raises there, from the
forward pass after the call. stats["pageouts"] counts the pageouts sent.
The optimizer step's prefetches and idle()'s wait for their answers, as
before.

The lead, unless given, is planned from the link (lead.py): the first
forward pass times each block's compute (events on the current stream, no
host synchronization; the one wait for them comes at the start of the
second pass), and at the start of the second pass

    lead = max(1, ceil(t_copy / t_compute))
    t_copy = the largest streamed block's bytes (its optimizer state's
             too) / the link's host-to-VRAM bytes per second (the daemon's
             status: measured at start)
    t_compute = the median block's forward time in the first pass

so the copy of the block `lead` ahead is covered by the compute of the
blocks before it; at most what `budget` leaves beside the rest and the
resident blocks (1 + lead blocks in flight). Resident blocks are not given
up for a longer lead: the formula asks for more than 1 only when a block
copies slower than it computes, and then each resident block saves a
whole copy per pass where a longer lead saves only the gaps between
copies. Until then, and when the link is not known (sim copies
unthrottled, not measured yet), the lead is 1. A link not known at the
second pass (a daemon started a moment before the script pins its host
arena first, then measures) is asked for again at the start of later
passes, at most every lead.UNKNOWN_RETRY_S, and the lead is planned from
the first pass's times once it is known. `plan` says what was measured,
wanted and decided.

Training: a block's forward hook puts a hook on its output's gradient,
which acquires the block again (and prefetches the blocks before it, in
backward order) before autograd runs the block's backward nodes, which read
the weights they saved (views of the buffer: its address never changes). A
hook on the block's input gradient releases it when its backward is over;
what is still held when the backward pass ends is released then. With
`optimizer`, optimizer.step() is wrapped to step one block at a time
(per-parameter state makes that the same arithmetic), acquiring each block
in turn with the next one prefetched; after a block's first step the state
the optimizer made for it (exp_avg, exp_avg_sq: tensors on the device of
more than one element) moves into a second buffer of the block's own,
streamed, resident or idled with it. `budget` counts weights only: a
resident block's optimizer state is resident too.

Between steps: with `between_steps="state"` the
resident blocks' optimizer state is released after optimizer.step(): the
daemon may then give its VRAM to another process that needs it and move
the state to host memory; the next step acquires it again, prefetched
when the backward pass starts. Nothing is paged out unless the daemon
needs the room, so alone on the card this costs two calls per resident
block and step. With `between_steps="all"` the resident weights are
released too, and the model's next forward pass prefetches them all and
acquires them before its first block runs; code that reads the weights
between steps (a norm logged, an EMA, model.state_dict()) may then find
them on the host tier, where a SWAPPABLE buffer is not mapped: touching
them faults. "none" (the default) keeps both held: with PyTorch's own
allocations on gpu-memd (enable()), the room a released state leaves is
taken by PyTorch's cache in the next forward pass and never given back
while the step waits for it (on the H200, three co-tenant training jobs
under one 4 GiB budget stopped making progress with "state", each
waiting for room the others' caches held; they ran with "none"), so
releasing between steps pays only where PyTorch's cache is not on the
daemon or `idle()` is used, which pages the state out and takes it back
before the next step itself.
optimizer.state_dict() is wrapped to acquire each block's state in turn
and returns the state tensors copied to the CPU (views of the buffers
would be unmapped once released). Not done yet: gradients stay ordinary
PyTorch memory (user code reads them between backward and step: clipping,
logging); step closures; optimizer.load_state_dict() after stream() (load
first); activation checkpointing inside a streamed block.
"""

BETWEEN_STEPS = ("state", "all", "none")
import statistics
import threading

from . import _torchdev, lead as _lead
from ._args import parse_size
from .client import SWAPPABLE
from .errors import Busy, GpumemError

ALIGN = 256


def _aligned_bytes(tensor):
    """A tensor's room in a packed buffer: its bytes rounded up to ALIGN."""
    nbytes = tensor.numel() * tensor.element_size()
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


def _packed(params):
    """`params` packed into one buffer, each at an ALIGN boundary:
    ([(parameter, its offset)], the buffer's size)."""
    placed, offset = [], 0
    for p in params:
        placed.append((p, offset))
        offset += _aligned_bytes(p)
    return placed, offset


def _largest_modulelist(model):
    import torch
    best, best_n = None, 0
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > 1:
            n = sum(p.numel() for p in module.parameters())
            if n > best_n:
                best, best_n = module, n
    if best is None:
        raise ValueError("gpumem.torch.stream: the model has no nn.ModuleList "
                         "of layers; name the blocks (blocks=[...modules])")
    return list(best)


def _first_grad_tensor(value):
    """The first tensor needing a gradient in a module's input or output
    (a tensor, or tuples, lists and dicts of them)."""
    import torch
    if isinstance(value, torch.Tensor):
        return value if value.requires_grad else None
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        for item in value:
            found = _first_grad_tensor(item)
            if found is not None:
                return found
    if hasattr(value, "to_tuple"):          # transformers' ModelOutput
        return _first_grad_tensor(value.to_tuple())
    return None


class Block:
    """One buffer's worth of parameters, and whether it is in use."""

    def __init__(self, name, module, params):
        self.name = name
        self.module = module
        self.params = params            # [(parameter, offset)]
        self.nbytes = 0
        self.buf = None
        self.resident = False
        self.held = False
        self.prefetched = False         # sent, not acquired or paged out since
        self.acquiring = False          # its acquire started, not finished
        self.hooks = []
        self.state = None               # the optimizer state's Block
        self.marks = None               # (start, end) of its first run

    def __repr__(self):
        return (f"<Block {self.name} {self.nbytes} bytes "
                f"{'resident' if self.resident else 'streamed'}>")


class Streamer:
    """What gpumem.torch.stream() returns: the blocks, their order, `stats`,
    the lead (`lead`, and `plan` when it was planned from the link) and
    `remove()` (weights back into ordinary tensors, hooks off)."""

    def __init__(self, model, client, budget, blocks, lead, pageout,
                 timeout, device, between_steps="none"):
        if between_steps not in BETWEEN_STEPS:
            raise ValueError(f"gpumem.torch.stream: between_steps="
                             f"{between_steps!r}: one of {BETWEEN_STEPS}")
        self.between_steps = between_steps
        self.model = model
        self.client = client
        self.ops = _torchdev.ops_for(client)
        if lead is not None and int(lead) < 1:
            raise ValueError(f"gpumem.torch.stream: lead={lead}: 1 or more "
                             "blocks (None: planned from the link)")
        self.lead_planned = lead is None
        self.lead = 1 if lead is None else int(lead)
        # what the planning measured and decided (lead.py), once it ran
        self.plan = None
        self._plan_pending = self.lead_planned
        self._replan = False        # planned, but the link was not known
        self.pageout = pageout
        self.timeout = timeout
        self.device = device
        self._lock = threading.RLock()
        self.order = []             # learned on the first forward pass
        self._learning = True
        self._seen = []
        self._in_backward = False
        self._ahead = True          # _acquire_ahead on (profile_stream's A/B)
        self.stats = {"acquires": 0, "releases": 0, "prefetches": 0,
                      "pageouts": 0, "pageouts_refused": 0,
                      "backward_acquires": 0, "backward_releases": 0,
                      "cache_released": 0, "prefetches_busy": 0,
                      "acquires_ahead": 0}
        self.blocks = self._make_blocks(blocks)
        self._place(None if budget is None else parse_size(budget))
        self._optimizer = None
        self._optimizer_step = None

    # ---- setup -----------------------------------------------------------

    def _make_blocks(self, modules):
        modules = list(modules) if modules is not None else \
            _largest_modulelist(self.model)
        names = {id(m): n for n, m in self.model.named_modules()}
        seen = set()
        blocks = []
        for module in modules:
            params = [p for p in module.parameters() if id(p) not in seen]
            seen.update(id(p) for p in params)
            blocks.append(Block(names.get(id(module), repr(module)), module,
                                [(p, 0) for p in params]))
        rest = [p for p in self.model.parameters() if id(p) not in seen]
        self.rest = Block("rest", self.model, [(p, 0) for p in rest])
        self.rest.resident = True
        return blocks

    def _fill(self, block, resident):
        """Allocate the block's buffer, copy its parameters in and point
        them at it. Leaves it held when resident, else released."""
        block.params, offset = _packed(p for p, _ in block.params)
        block.nbytes = offset
        if offset == 0:
            block.resident = True
            return
        # waits lend what is filled already: a plain wait here held an
        # inference job's 2.3 GiB while a training job waited for it
        # (_torchdev.alloc_making_room)
        block.buf = _torchdev.alloc_making_room(
            self.client, offset, self.device_index, SWAPPABLE,
            self.timeout, self.ops)
        block.held = True
        for p, off in block.params:
            view = block.buf.as_tensor(p.dtype, tuple(p.shape), off)
            view.copy_(p.data)
            p.data = view
        block.resident = resident
        if not resident:
            self._release(block)

    def _residency(self, lead):
        """Which blocks stay resident within the budget when `lead` blocks
        stream ahead of the running one: the first ones that fit, in the
        model's order."""
        if self.budget is None or \
                self.rest_size + sum(self.sizes) <= self.budget:
            return [True] * len(self.blocks)
        room = self.budget - self.rest_size - (1 + lead) * self.max_size
        resident = []
        for size in self.sizes:
            resident.append(size <= room)
            if size <= room:
                room -= size
        return resident

    def _place(self, budget):
        self.device_index = _torchdev.model_device_index(
            self.model, self.ops, self.client, self.device,
            "gpumem.torch.stream")
        self.budget = budget
        self.sizes = [sum(_aligned_bytes(p) for p, _ in b.params)
                      for b in self.blocks]
        self.max_size = max(self.sizes, default=0)
        self.rest_size = sum(p.numel() * p.element_size() for p, _ in
                             self.rest.params)
        if budget is not None and \
                budget < self.rest_size + sum(self.sizes) and \
                budget < self.rest_size + (1 + self.lead) * self.max_size:
            raise ValueError(
                f"gpumem.torch.stream: budget {budget} bytes is below "
                f"what streaming needs at least: the rest of the model "
                f"({self.rest_size} bytes) plus {1 + self.lead} blocks of up "
                f"to {self.max_size} bytes (the one running and "
                f"lead={self.lead} ahead)")
        for module in self.model.modules():      # masks, rotary tables
            for key, value in list(module._buffers.items()):
                if value is not None:
                    module._buffers[key] = value.to(self.torch_device)
        self._fill(self.rest, True)
        for block, resident in zip(self.blocks, self._residency(self.lead)):
            self._fill(block, resident)
        for block in self.blocks:
            block.hooks.append(block.module.register_forward_pre_hook(
                self._pre_hook(block)))
            block.hooks.append(block.module.register_forward_hook(
                self._post_hook(block)))
        self.order = list(self.blocks)
        self.rest.hooks.append(self.model.register_forward_pre_hook(
            self._wake_hook))

    @property
    def torch_device(self):
        return self.ops.torch_device(self.device_index)

    # ---- acquire, release, prefetch --------------------------------------

    def _acquire(self, block, read_only=False):
        """Take `block`'s lease; read_only for the forward and backward
        passes, which read the weights (module comment: clean pageouts)."""
        with self._lock:
            if block.held or block.buf is None:
                return
            # its room may be PyTorch's unused cache (_torchdev.ROOM_WAIT)
            if block.acquiring:
                block.acquiring = False
                released = _torchdev.finish_making_room(
                    block.buf, self.timeout, self.ops, read_only)
            else:
                released = _torchdev.acquire_making_room(
                    block.buf, self.timeout, self.ops, read_only)
            if released:
                self.stats["cache_released"] += 1
            block.held = True
            block.prefetched = False
            self.stats["acquires"] += 1

    def _release(self, block, pageout=None):
        """Release `block` after the work queued on the current stream;
        paged out too when `pageout` (None: as the streamer's pageout
        says)."""
        with self._lock:
            if not block.held or block.buf is None:
                return
            block.buf.release_after(self.ops.current_stream(
                self.torch_device), wait=False)
            block.held = False
            self.stats["releases"] += 1
            if self.pageout if pageout is None else pageout:
                self._pageout(block)

    def _pageout(self, block):
        block.prefetched = False
        try:
            block.buf.pageout(wait=False)
            self.stats["pageouts"] += 1
        except GpumemError:
            # refused before it was sent (the connection is gone, the
            # buffer revoked): it stays where it is, as a refused one
            self.stats["pageouts_refused"] += 1

    def _flush(self):
        """Hear the daemon's answers to what the hooks sent without
        waiting (module comment; _torchdev.flush)."""
        _torchdev.flush(self.client, self.stats)

    def _prefetch_from(self, block, step, lead=None):
        """Prefetch the `lead` (default self.lead) streamed blocks after
        `block` in the learned order (step 1: forward; -1: backward). A
        forward pass that records no gradient (inference: generation runs
        one after another) goes on past the last block to the next pass's
        first ones, whose swap-ins then overlap this pass's end and the
        host's work between passes instead of starting when the next pass
        does (H200: the streamer's acquires waited 2.7 ms a token with
        clean pageouts). A block prefetched is not sent again before it is
        acquired or paged out (Block.prefetched): the post-hook's prefetch
        and the next pre-hook's cover the same blocks but one."""
        with self._lock:
            if block not in self.order:
                return
            i = self.order.index(block)
            if step == 1:
                after = self.order[i + 1:]
                if not _torch_grad_enabled():
                    after += self.order[:i]
            else:
                after = self.order[:i][::-1]
            count = 0
            for other in after:
                if count >= (lead or self.lead):
                    break
                if other.resident or other.buf is None:
                    continue
                count += 1
                if other.held or other.acquiring or other.prefetched:
                    continue
                # sent in order after this thread's releases and
                # acquires: the daemon cannot find it held (GMD_EBUSY)
                other.buf.prefetch(wait=False)
                other.prefetched = True
                self.stats["prefetches"] += 1

    def _acquire_ahead(self, block):
        """Start the lease of the streamed block after `block` in this pass
        (gmd_acquire_start): its round trip, and its swap-in's end, overlap
        `block`'s kernel launches instead of coming between the two blocks
        (H200, batch 1: the acquire took 50-190 us of a block's ~0.19 ms
        of hooks). Its pre-hook finishes it. Read-only passes only: the
        lease is a read-only one; not past the pass's last block."""
        with self._lock:
            if not self._ahead or self._learning or block not in self.order:
                return          # off, or the next block is not known yet
            i = self.order.index(block)
            nxt = next((b for b in self.order[i + 1:]
                        if not b.resident and b.buf is not None), None)
            if nxt is None or nxt.held or nxt.acquiring:
                return
            try:
                nxt.buf.acquire_start(_torchdev.start_wait(self.timeout),
                                      read_only=True)
            except GpumemError:
                return          # its pre-hook acquires it the usual way
            nxt.acquiring = True
            self.stats["acquires_ahead"] += 1

    # ---- the lead, planned from the link (lead.py) ------------------------

    def _plan_lead(self):
        """At the start of the second forward pass: the lead from the
        link and the first pass's block times (module comment)."""
        self._plan_pending = False
        times = [self.ops.seconds(b.marks[0], b.marks[1], wait=True)
                 for b in self.blocks
                 if b.marks is not None and b.marks[1] is not None]
        for b in self.blocks:
            b.marks = None
        streamed = [b.nbytes + (b.state.nbytes if b.state else 0)
                    for b in self.blocks if not b.resident and b.buf]
        compute = statistics.median(times) if times else 0.0
        self._decide_lead(max(streamed, default=self.max_size), compute)
        # The link not known yet (a daemon started a moment ago pins its
        # host arena, then measures): planned again at a later pass's
        # start, from these times, once the daemon has measured it
        # (lead.link_in asks it at most every UNKNOWN_RETRY_S).
        self._replan = not self.plan["planned"] and compute > 0

    def _replan_lead(self):
        """At a pass's start while the link was not known: plan once it
        is, from the first pass's times kept in the plan."""
        rate = _lead.link_in(self.client,
                             self.ops.daemon_device(self.device_index))
        if rate:
            self._replan = False
            self._decide_lead(self.plan["block_bytes"],
                              self.plan["compute_s"])

    def _decide_lead(self, nbytes, compute):
        rate = _lead.link_in(self.client,
                             self.ops.daemon_device(self.device_index))
        wanted = _lead.units_ahead(nbytes, rate, compute)
        ahead = wanted
        if wanted is not None and self.budget is not None and self.max_size:
            resident = sum(size for size, b in zip(self.sizes, self.blocks)
                           if b.resident)
            room = self.budget - self.rest_size - resident
            ahead = max(1, min(wanted, room // self.max_size - 1))
        self.plan = {"link_bytes_per_s_in": rate, "block_bytes": nbytes,
                     "compute_s": compute,
                     "copy_s": nbytes / rate if rate else None,
                     "wanted": wanted,
                     "lead": ahead if ahead is not None else self.lead,
                     "planned": ahead is not None}
        if ahead is not None:
            self.lead = ahead

    # ---- hooks -----------------------------------------------------------

    def _pre_hook(self, block):
        def hook(module, inputs):
            if self._learning:
                self._learn(block)
            elif self._plan_pending:
                self._plan_lead()
            if block is self.order[0]:
                # a pass starts: last pass's answers are in (module comment);
                # what was prefetched may have moved since (idle(), another
                # process's pressure): sent again where due
                self._flush()
                for b in self.blocks:
                    b.prefetched = False
                if self._replan:
                    self._replan_lead()
            if self._plan_pending and block.marks is None:
                block.marks = (self.ops.mark(self.torch_device), None)
            if block.resident:
                if not block.held:
                    self._wake()        # resting between steps
                return None
            self._acquire(block, read_only=True)
            self._prefetch_from(block, 1)
            if _torch_grad_enabled():
                block.input_grad = _first_grad_tensor(inputs)
            else:
                self._acquire_ahead(block)
            return None
        return hook

    def _learn(self, block):
        """Record the first forward pass's order of blocks; it ends when
        every block ran or one runs a second time."""
        with self._lock:
            if block not in self._seen:
                self._seen.append(block)
                if len(self._seen) < len(self.blocks):
                    return
            self.order = self._seen + [b for b in self.blocks
                                       if b not in self._seen]
            self._learning = False

    def _post_hook(self, block):
        def hook(module, inputs, output):
            if block.marks is not None and block.marks[1] is None:
                block.marks = (block.marks[0],
                               self.ops.mark(self.torch_device))
            if block.resident:
                return None
            if _torch_grad_enabled():
                out = _first_grad_tensor(output)
                if out is not None:
                    out.register_hook(self._backward_enter(block))
                    inp = getattr(block, "input_grad", None)
                    if inp is not None:
                        inp.register_hook(self._backward_leave(block))
            block.input_grad = None
            grad = _torch_grad_enabled()
            self._release(block)
            if self.pageout is None and not grad:
                # Inference: not needed again before the other blocks have
                # run. Paged out now, its copy out overlaps the next
                # blocks' work; left for the daemon, the swap-in of a
                # later block waits for its eviction in a pool as tight
                # as the budget (module comment).
                self._pageout(block)
            if not grad and self.pageout is not False:
                # No streamed block is held until the next one's acquire,
                # and none while resident blocks and the work between
                # passes run: one block more of lead fits, and its swap-in
                # starts as soon as this block's VRAM is free, not after
                # the next acquire (H200 timeline, profile_stream.py: the
                # link sat idle ~2.5 ms a pass at the pass's end, a lead
                # of 2 counting the streamed blocks only).
                self._prefetch_from(block, 1, lead=self.lead + 1)
            return None
        return hook

    def _backward_enter(self, block):
        def hook(grad):
            import torch
            with self._lock:
                if not self._in_backward:
                    self._in_backward = True
                    torch.autograd.Variable._execution_engine.queue_callback(
                        self._backward_done)
                    self._prefetch_resting(states=True)
            if not block.held:
                self.stats["backward_acquires"] += 1
            self._acquire(block, read_only=True)
            self._prefetch_from(block, -1)
        return hook

    def _backward_leave(self, block):
        def hook(grad):
            if block.held:
                self.stats["backward_releases"] += 1
            self._release(block)
        return hook

    def _backward_done(self):
        with self._lock:
            self._in_backward = False
            for block in self.blocks:
                if not block.resident:
                    self._release(block)

    # ---- optimizer -------------------------------------------------------

    def attach_optimizer(self, optimizer):
        """Wrap optimizer.step() to step block by block (see the module
        comment)."""
        if "state_dict" in vars(optimizer):
            raise ValueError("gpumem.torch.stream: the optimizer's "
                             "state_dict is replaced already (streamed "
                             "twice?)")
        self._optimizer = optimizer
        self._optimizer_step = optimizer.step
        streamer = self

        def step(closure=None):
            if closure is not None:
                raise NotImplementedError(
                    "gpumem.torch.stream: optimizer.step(closure) is not "
                    "supported; call the closure first, then step()")
            try:
                return streamer._step()
            finally:
                streamer._rest()

        def state_dict():
            return streamer._optimizer_state_dict()
        optimizer.step = step
        self._optimizer_state_dict_fn = optimizer.state_dict
        optimizer.state_dict = state_dict

    def _step(self):
        optimizer = self._optimizer
        groups = [g["params"] for g in optimizer.param_groups]
        resident = [self.rest] + [b for b in self.blocks if b.resident]
        batches = [resident] + [[b] for b in self.order if not b.resident]
        try:
            for i, batch in enumerate(batches):
                ids = {id(p) for b in batch for p, _ in b.params}
                for group, params in zip(optimizer.param_groups, groups):
                    group["params"] = [p for p in params if id(p) in ids]
                if i + 1 < len(batches):
                    for b in batches[i + 1]:
                        for part in (b, b.state):
                            if part is not None and not part.held and \
                                    part.buf is not None:
                                part.buf.prefetch()
                for b in batch:
                    self._acquire(b)
                    if b.state is not None:
                        self._acquire(b.state)
                self._optimizer_step()
                for b in batch:
                    if b.state is None:
                        self._stash_state(b)
                    if not b.resident:
                        self._release(b)
                        if b.state is not None:
                            self._release(b.state)
        finally:
            for group, params in zip(optimizer.param_groups, groups):
                group["params"] = params

    def _optimizer_state_dict(self):
        """optimizer.state_dict() with each block's state acquired in turn
        and copied to the CPU (module comment)."""
        state = self._optimizer.state
        views = []
        with self._lock:
            try:
                for b in [self.rest] + self.blocks:
                    part = b.state
                    if part is None or part.buf is None:
                        continue
                    held = part.held
                    self._acquire(part)
                    for p, key, _ in part.items:
                        views.append((p, key, state[p][key]))
                        state[p][key] = state[p][key].to("cpu",
                                                         copy=True)
                    if not held:
                        self._release(part)
                out = self._optimizer_state_dict_fn()
                # its per-parameter dicts are the optimizer's own: copied,
                # so that the views put back below do not show in them
                out["state"] = {k: dict(v) for k, v in out["state"].items()}
                return out
            finally:
                for p, key, view in views:
                    state[p][key] = view

    # ---- between steps ---------------------------------------------------

    def _resting_parts(self, weights, states):
        parts = []
        for b in [self.rest] + self.blocks:
            if weights:
                parts.append(b)
            if states:
                parts.append(b.state)
        return [x for x in parts if x is not None and x.resident and
                x.buf is not None and not x.buf.freed]

    def _rest(self):
        """After optimizer.step(): release what stays resident and no step
        uses until the next one (module comment)."""
        if self.between_steps == "none":
            return
        for part in self._resting_parts(self.between_steps == "all", True):
            self._release(part)

    def _prefetch_resting(self, weights=False, states=False):
        for part in self._resting_parts(weights, states):
            if not part.held:
                try:
                    part.buf.prefetch()
                    self.stats["prefetches"] += 1
                except Busy:
                    pass

    def _wake_hook(self, module, inputs):
        self._wake()

    def _wake(self):
        """Before a forward pass: the resident weights released between
        steps, all prefetched, then acquired (each waits for its copy)."""
        if self.between_steps != "all":
            return
        parts = [x for x in self._resting_parts(True, False) if not x.held]
        if not parts:
            return
        self._prefetch_resting(weights=True)
        for part in parts:
            self._acquire(part)

    def _stash_state(self, block):
        """After the optimizer's first step of `block`: move the state it
        made for the block's parameters (tensors of more than one element
        on the buffers' device: exp_avg, exp_avg_sq; not the step counts)
        into a buffer of the block's own, streamed with it."""
        state = self._optimizer.state
        items, offset = [], 0
        for p, _ in block.params:
            for key, value in state.get(p, {}).items():
                if _is_state_tensor(value, self.torch_device):
                    items.append((p, key, offset))
                    offset += _aligned_bytes(value)
        if not items:
            return
        part = Block(block.name + ".state", None, [])
        part.nbytes = offset
        # the state is in PyTorch's cache until copied: its room may be
        # that cache's unused part
        part.buf = _torchdev.alloc_making_room(
            self.client, offset, self.device_index, SWAPPABLE,
            self.timeout, self.ops)
        part.held = True
        part.resident = block.resident
        part.items = items
        for p, key, off in items:
            value = state[p][key]
            view = part.buf.as_tensor(value.dtype, tuple(value.shape), off)
            view.copy_(value)
            state[p][key] = view
        block.state = part

    # ---- idle and removal ------------------------------------------------

    def _held_resident(self):
        parts = []
        for b in [self.rest] + self.blocks:
            parts += [x for x in (b, b.state) if x is not None]
        return [x for x in parts if x.resident and x.buf is not None
                and not x.buf.freed]

    def _idle_enter(self, pageout=True):
        for block in self._held_resident():
            block.resident = False      # the hooks would stream it meanwhile
            block.idle_back = True
            self._release(block, pageout)

    def _idle_exit(self):
        back = []
        for b in [self.rest] + self.blocks:
            back += [x for x in (b, b.state) if x is not None
                     and getattr(x, "idle_back", False) and x.buf is not None]
        for block in back:
            try:
                block.buf.prefetch()
                self.stats["prefetches"] += 1
            except Busy:
                pass
        for block in back:
            self._acquire(block)
            block.resident = True
            block.idle_back = False

    def remove(self):
        """Copy the weights back into ordinary tensors on the buffers'
        device, take the hooks off, free the buffers."""
        import torch
        self._flush()
        self._optimizer_state = {}
        if self._optimizer is not None:
            self._optimizer.step = self._optimizer_step
            if "state_dict" in vars(self._optimizer):   # ours
                del self._optimizer.state_dict
            self._optimizer_state = self._optimizer.state
            self._optimizer = None
        for block in [self.rest] + self.blocks:
            for handle in block.hooks:
                handle.remove()
            block.hooks = []
            if block.state is not None:
                part, state = block.state, self._optimizer_state
                self._acquire(part)
                for p, key, _ in part.items:
                    state[p][key] = state[p][key].clone()
                self._free(part)
                block.state = None
            if block.buf is None:
                continue
            self._acquire(block)
            for p, _ in block.params:
                p.data = p.data.clone(memory_format=torch.contiguous_format)
            self._free(block)

    def _free(self, block):
        self.ops.free(block.buf, self.torch_device)
        block.buf = None
        block.held = False


def _is_state_tensor(value, device):
    import torch
    return isinstance(value, torch.Tensor) and value.numel() > 1 and \
        value.device == device


def _torch_grad_enabled():
    import torch
    return torch.is_grad_enabled()


def stream(model, optimizer=None, budget=None, *, blocks=None, lead=None,
           client=None, pageout=None, timeout=None, device=None,
           between_steps="none"):
    """Stream `model`'s weights through gpu-memd (see the module comment).
    `budget`: bytes (or "8G") of weights held at once (None: all resident,
    which still lets idle() page them out); `blocks`: the modules to stream
    one by one (None: the largest nn.ModuleList's entries); `lead`: blocks
    prefetched ahead (None: planned from the link after the first pass,
    1 until then: lead = max(1, ceil(t_copy / t_compute)), the module
    comment says more); `pageout`: page a block out as soon as it is released
    (True), never (False: the daemon moves it when it needs the room), or
    None (default): after its forward when no gradient is recorded
    (inference), never when training; `timeout`: seconds
    an acquire may wait; `device`: the CUDA device (None: the model's, or
    0 for a model on the CPU; sim: the CPU); `between_steps`: what of the
    resident blocks is released after optimizer.step() until the next
    step needs it: "none" (default), "state" (the optimizer state) or "all"
    (the weights too: code reading them between steps may fault).
    The model may sit on the CPU: its blocks are copied to the buffers.
    Returns the Streamer."""
    from . import current_client, idle
    streamer = Streamer(model, client or current_client(), budget, blocks,
                        lead, pageout, timeout, device, between_steps)
    if optimizer is not None:
        streamer.attach_optimizer(optimizer)
    idle.register(streamer)
    return streamer
