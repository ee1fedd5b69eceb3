"""fit — one call that makes a model's training fit a VRAM budget.

    fitter = gpumem.torch.fit(model, optimizer)      # budget: what is free
    for batch in data:
        loss = model(batch).loss                       # unchanged loop
        loss.backward(); optimizer.step(); optimizer.zero_grad()

fit() finds the model's blocks (each layer of its largest nn.ModuleList,
units_of; or `blocks`) and decides, for each, what happens to the activations autograd saves in
it between the forward and the backward pass: kept in VRAM, recomputed in
the backward pass (checkpointing) or offloaded: copied on a stream of its
own into pinned host memory of gpu-memd's pool (or another GPU's VRAM,
offload="peer") and brought back one block ahead of the backward pass
(stash.py; planner.py says how it chooses). The results are those of plain training: recomputing runs the
same kernels on the same inputs with the random state restored
(torch.utils.checkpoint), offloading copies bytes; under
torch.use_deterministic_algorithms(True) losses and gradients are
bit-identical.

Measured, not guessed. The first forward pass after fit() is a profiling
pass: every block's saved tensors go to host memory as they are saved
(the pass fits any budget that holds the weights and one block's working
memory) and are counted; the link the offloads cross is timed once with
a 64 MiB copy each way; the step's peak VRAM (torch.cuda) then tells the
memory the step needs besides the activations. The next two steps
recompute every block (planner.timing_plan), which times each block's
forward pass alone (the profiling pass's times include its copies) and
the step that any plan with offloads must beat. Each
later step times its blocks' forward passes (CUDA events, no host synchronization: read at the
next step) and re-plans when the times or the budget moved by more than
REPLAN_CHANGE; the budget is read each step (torch.cuda.mem_get_info, which
under gpumem.torch.enable() reports the daemon's pool, plus what PyTorch
holds already), so when other jobs on the card take or give back memory
the plan follows at the next step. `fitter.plan` is the plan in force,
`fitter.plan.summary()` says it in a line, `fitter.history` every plan.

Where no gpu-memd is reachable (or its backend does not serve the model's
tensors), host offloads go to pinned memory of the process's own.
"""
import contextlib
import math
import threading
import time

from . import planner as _planner
from .planner import OFFLOAD, RECOMPUTE

UNBOUNDED = 10 ** 18     # room where no budget applies (the CPU)
PLANNER_NAME = "fit"     # the planner's name in gpu-memctl status
REPLAN_CHANGE = 0.1      # a plan is redone when room or times move by this
MARGIN = 0.05            # of the budget, left for fragmentation
# A plan that offloads is given up when its steps take longer than this
# times the step that recomputed every block
GIVE_UP_RATIO = 1.02
# Steps that recompute every block to time them: the first after the
# profiling pass also makes PyTorch's cached blocks for the new pattern
# (GPT-2 8 x 1024 on an H200: 186-271 ms against 75 ms a step after)
TIMING_STEPS = 2
OFFLOAD_MIN_BYTES = 1 << 20
LINK_PROBE_BYTES = 64 << 20  # the copy each way that times the link


def _tensors(value):
    import torch
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _nbytes(t):
    return t.numel() * t.element_size()


class Fitter:
    """The state of one fit(): the blocks, their measurements, the plan.
    remove() puts the model back as it was."""

    def __init__(self, model, optimizer=None, budget=None, blocks=None,
                 client=None, offload=True):
        import torch
        import torch.utils.checkpoint
        if budget is not None and budget <= 0:
            raise ValueError(f"budget={budget}: a number of bytes above 0 "
                             "(None: what the device has free)")
        self._torch = torch
        self.model = model
        self.optimizer = optimizer
        self.budget = budget
        self.blocks = list(blocks) if blocks is not None \
            else units_of(model)
        named = {id(m): n for n, m in model.named_modules()}
        self.names = [named.get(id(m), type(m).__name__)
                      for m in self.blocks]
        self.device = self._device(model)
        self.cuda = self.device.type == "cuda"
        self.client = self._client(client)
        self.stash = self._stash(offload) if offload else None
        self._link_rates = None     # (out, in) bytes/s, timed once
        # where each plan is reported for gpu-memctl status
        self._report_to = self.client
        self.plan = None
        self.history = []
        self.modes = [None] * len(self.blocks)   # None: profiling
        self._profiling = True
        self._profile_read = False  # the profiling step's peak is read
        self._saved = [0] * len(self.blocks)
        self._inputs = [0] * len(self.blocks)
        self._times = [0.0] * len(self.blocks)
        self._marks = [None] * len(self.blocks)
        self._order = []            # block indices in first-call order
        self._base = None           # VRAM the step needs besides activations
        self._room = None
        self._started = None        # perf_counter when the step began
        self._steps = []            # seconds of each step of the plan
        self._recompute_s = None    # the timing step's (every block
                                    # recomputed)
        self._offload_off_room = None   # offloading lost at this room
        self._given_up = None       # (its step, recomputing's) seconds
        self._lock = threading.Lock()
        self._params = {p.data_ptr() for p in model.parameters()}
        self._originals = []
        for i, module in enumerate(self.blocks):
            # (the forward to call, the instance's own forward if it had
            # one: remove() puts back exactly what was there)
            self._originals.append((module.forward,
                                    vars(module).get("forward")))
            module.forward = self._wrap(i, self._originals[i][0])
        self._handles = [model.register_forward_pre_hook(self._step_start),
                         model.register_forward_hook(self._step_end)]

    # ---- set-up ----------------------------------------------------------

    @staticmethod
    def _device(model):
        import torch
        for p in model.parameters():
            return p.device
        return torch.device("cpu")

    def _client(self, client):
        """The gpu-memd client offloads and reports go to, or None where
        none serves the model's tensors (no daemon, a cuda model on the
        sim backend, a CPU model on cuda)."""
        from . import current_client
        from .errors import GpumemError
        try:
            client = client or current_client()
        except GpumemError:
            return None
        if (client.backend != "sim") != (self.device.type == "cuda"):
            return None
        return client

    def _stash(self, offload):
        """Where offloaded activations go: offload=True or "host": host
        memory (gpu-memd's pool, else pinned memory of this process);
        "peer" or a torch.device: another GPU's VRAM."""
        from . import stash as _st
        if offload is True or offload == "host":
            daemon_device = 0
            if self.client is not None and self.cuda:
                from ._torchdev import daemon_device as _dd
                daemon_device = _dd(self.client, self.device.index or 0)
            slabs = _st.HostSlabs(self.device, self.client, daemon_device)
        else:
            peer = self._peer(offload)
            slabs = _st.PeerSlabs(peer)
        return _st.Stash(self.device, slabs, min_bytes=OFFLOAD_MIN_BYTES)

    def _peer(self, offload):
        torch = self._torch
        if offload == "peer":
            if not self.cuda:
                raise ValueError("offload='peer': the model is not on a GPU")
            mine = self.device.index or 0
            for i in range(torch.cuda.device_count()):
                if i != mine and torch.cuda.can_device_access_peer(mine, i):
                    return torch.device("cuda", i)
            raise ValueError(
                f"offload='peer': no other GPU that cuda:{mine} reaches "
                f"directly among the {torch.cuda.device_count()} this "
                "process sees (CUDA_VISIBLE_DEVICES); use offload='host'")
        try:
            peer = torch.device(offload)
        except (RuntimeError, TypeError):
            peer = None
        if peer is None or peer.type != "cuda" or peer == self.device:
            raise ValueError(f"offload={offload!r}: True, False, 'host', "
                             "'peer' or another GPU (e.g. 'cuda:1')")
        return peer

    # ---- the blocks' forward ----------------------------------------------

    def _wrap(self, i, forward):
        def run(*args, **kwargs):
            mode = self.modes[i]
            if not self._torch.is_grad_enabled():
                return forward(*args, **kwargs)
            self._inputs[i] = sum(_nbytes(t) for t in
                                  _tensors((args, kwargs)))
            start = self._mark()
            if mode is None:
                out = self._profiled(i, forward, args, kwargs)
            elif mode == RECOMPUTE:
                out = self._torch.utils.checkpoint.checkpoint(
                    forward, *args, use_reentrant=False, **kwargs)
            elif mode == OFFLOAD:
                hooks = self._torch.autograd.graph.saved_tensors_hooks(
                    lambda t: t if t.data_ptr() in self._params
                    else self.stash.pack(t, i), self.stash.unpack)
                with hooks:
                    out = forward(*args, **kwargs)
            else:
                out = forward(*args, **kwargs)
            self._marks[i] = (start, self._mark())
            if self.stash is not None and OFFLOAD in self.modes:
                self._hook_entry(i, out)
            return out
        return run

    def _hook_entry(self, i, out):
        """Ask for the offloaded bytes of block i and of the block before
        it when the backward pass reaches block i (the gradient of its
        output arrives): one block ahead, as planner.simulate_link counts,
        and not while the loss's logits are held."""
        for t in _tensors(out):
            if t.requires_grad:
                t.register_hook(lambda grad, i=i: self._entering(i))
                return

    def _entering(self, i):
        self.stash.prefetch(i)
        try:
            k = self._order.index(i)
        except ValueError:
            return
        if k > 0:
            self.stash.prefetch(self._order[k - 1])

    def _mark(self):
        if self.cuda:
            event = self._torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        import time
        return time.perf_counter()

    def _profiled(self, i, forward, args, kwargs):
        """The profiling pass: count what autograd saves (parameters left
        out) and keep it in host memory until the backward pass."""
        torch = self._torch

        def pack(t):
            if t.data_ptr() in self._params:
                return t
            self._saved[i] += _nbytes(t)
            if t.device.type == "cpu":
                return t
            return (t.device, t.to("cpu", non_blocking=False))

        def unpack(packed):
            if isinstance(packed, tuple):
                device, t = packed
                return t.to(device, non_blocking=False)
            return packed
        self._saved[i] = 0
        if i not in self._order:
            self._order.append(i)
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            return forward(*args, **kwargs)

    # ---- steps -----------------------------------------------------------

    def _step_start(self, module, inputs):
        if not self._torch.is_grad_enabled():
            return
        if self._profiling:
            if self.cuda:
                self._torch.cuda.reset_peak_memory_stats(self.device)
            return
        self._read_times()          # synchronizes: the last step is over
        if self._started is not None:
            self._step_over(time.perf_counter() - self._started)
        self._replan()
        if self.stash is not None and OFFLOAD in self.modes:
            self.stash.begin_pass()
        if self.cuda:
            self._torch.cuda.reset_peak_memory_stats(self.device)
        self._started = time.perf_counter()

    def _step_over(self, seconds):
        """The step under self.plan took `seconds`: the timing step gives
        the time of recomputing every block and, from its peak, what the
        step holds besides the activations (fragmentation included); a
        plan that offloads and measures slower than that is given up."""
        plan = self.plan
        self._steps.append(seconds)
        if plan is None:
            return
        if plan.reason == _planner.TIMING_REASON:
            if len(self._steps) < TIMING_STEPS:
                return      # the first makes the allocator's blocks anew
            self._recompute_s = seconds
            if self.cuda:
                peak = self._torch.cuda.max_memory_reserved(self.device)
                largest = max(self._saved, default=0)
                measured = peak - plan.held_bytes - largest
                if measured > (self._base or 0):
                    self._base = measured
            return
        if (plan.count(OFFLOAD) and self._recompute_s is not None
                and len(self._steps) >= 3):
            # the plan's first step may have made its slabs
            typical = sorted(self._steps[1:])[(len(self._steps) - 1) // 2]
            if typical > GIVE_UP_RATIO * self._recompute_s:
                self._offload_off_room = self._room
                self._given_up = (typical, self._recompute_s)
                self.plan = None          # plan again, without offloads

    def _step_end(self, module, inputs, output):
        if not self._torch.is_grad_enabled():
            return
        self._profiling = False

    def _read_times(self):
        if self.cuda:
            self._torch.cuda.synchronize(self.device)
        for i, mark in enumerate(self._marks):
            if mark is None:
                continue
            start, end = mark
            if self.cuda:
                seconds = start.elapsed_time(end) / 1e3
            else:
                seconds = end - start
            # a recomputed block's forward saves nothing: its time is the
            # recompute's; a profiled one waited for its copies to host,
            # so its time is not the block's (timing_plan measures it)
            if self.modes[i] is not None:
                self._times[i] = seconds
            self._marks[i] = None
        if not self._profile_read:
            self._profile_read = True
            self._base = self._measure_base()

    def _measure_base(self):
        """VRAM the step holds besides the activations of its blocks:
        the profiling step's peak (activations were on the host) plus the
        optimizer state made by its first step."""
        if not self.cuda:
            return 0
        torch = self._torch
        peak = torch.cuda.max_memory_allocated(self.device)
        state = 0
        if self.optimizer is not None:
            for s in self.optimizer.state.values():
                state += sum(_nbytes(t) for t in _tensors(s)
                             if t.device == self.device)
        return peak + state

    def _budget(self):
        if not self.cuda:
            return self.budget if self.budget is not None else math.inf
        torch = self._torch
        free, _ = torch.cuda.mem_get_info(self.device)
        have = free + torch.cuda.memory_reserved(self.device)
        return have if self.budget is None else min(self.budget, have)

    def _link(self):
        """The offload link's bytes per second (out, in), timed once."""
        if self.stash is None:
            return 0, 0
        if self._link_rates is None:
            self._link_rates = self.stash.measure(LINK_PROBE_BYTES)
        return self._link_rates

    def profiles(self):
        """The measurements the plan rests on, one BlockProfile a block,
        in the order the forward pass runs them (blocks it did not run
        last)."""
        order = self._order + [i for i in range(len(self.blocks))
                               if i not in self._order]
        return [_planner.BlockProfile(self.names[i], self._saved[i],
                                      self._inputs[i], self._times[i])
                for i in order]

    def _replan(self):
        budget = self._budget()
        profiles = self.profiles()
        if budget == math.inf:
            room = UNBOUNDED
        else:
            # a recomputed block's activations come back for its backward
            # pass, and an offloaded block's all at once: the largest is
            # working memory the step needs besides what the plan keeps
            largest = max((p.saved_bytes for p in profiles), default=0)
            room = max(0, int(budget * (1 - MARGIN)) - (self._base or 0)
                       - largest)
        if self.plan is not None and not self._moved(room, profiles):
            return
        if self.plan is not None and self._recompute_s is None and \
                self.plan.reason == _planner.TIMING_REASON:
            return          # still timing
        link_out, link_in = self._link()
        offload = self.stash is not None
        if self._offload_off_room is not None:
            if abs(room - self._offload_off_room) <= \
                    REPLAN_CHANGE * max(self._offload_off_room, 1):
                offload = False
            else:
                self._offload_off_room = None
        if not all(p.forward_s for p in profiles):
            plan = _planner.timing_plan(profiles, room, link_out, link_in)
        else:
            plan = _planner.make_plan(profiles, room, link_out, link_in,
                                      offload=offload)
            if not offload and self.stash is not None and \
                    self._given_up is not None:
                slow, ckpt = self._given_up
                plan.reason += (f" (offloading measured {slow * 1e3:.1f} ms a "
                                f"step against {ckpt * 1e3:.1f} recomputing "
                                "every block)")
        if plan.count(OFFLOAD):
            # the slabs, made now rather than in the forward pass
            self.stash.reserve(plan.offloaded_bytes)
        self._steps = []
        with self._lock:
            self.plan = plan
            by_name = dict(zip(plan.names, plan.modes))
            self.modes = [by_name[n] for n in self.names]
            self._room = room
            self._planned_times = [p.forward_s for p in profiles]
            self.history.append(plan)
        self._report(plan)

    def _report(self, plan):
        """Tell the daemon the plan in force (None: none any more), for
        administrators to see in gpu-memctl status. The bytes are the
        planner's sums of each mode's saved bytes; fit streams nothing
        (streamed 0). Reporting is for show: a daemon that is gone or
        refuses does not stop training."""
        if self._report_to is None:
            return
        from .errors import GpumemError
        try:
            if plan is None:
                self._report_to.report_plan("")
            else:
                self._report_to.report_plan(
                    PLANNER_NAME, kept=plan.kept_bytes,
                    offloaded=plan.offloaded_bytes,
                    recomputed=plan.recomputed_bytes, streamed=0)
        except GpumemError:
            pass

    def _moved(self, room, profiles):
        old = self._room or 1
        if abs(room - old) > REPLAN_CHANGE * old:
            return True
        before = sum(self._planned_times) or 1e-9
        now = sum(p.forward_s for p in profiles)
        return abs(now - before) > REPLAN_CHANGE * before

    def remove(self):
        """Put the model back: its blocks' own forward, no hooks."""
        for module, (_, own) in zip(self.blocks, self._originals):
            if own is None:
                del module.forward
            else:
                module.forward = own
        for h in self._handles:
            h.remove()
        self._handles = []
        if self.plan is not None:
            self._report(None)
        if self.stash is not None:
            self.stash.close()


def units_of(model, parts=False):
    """The modules fit plans: each layer of the model's largest
    nn.ModuleList (the default), or, with parts=True, each layer split
    into its children that hold parameters where it has two or more (a
    transformer layer's attention and MLP, and its norms), in the order
    the forward pass runs them. Parts would let a plan recompute what is
    cheap per byte and keep the rest, but measured on GPT-2 124M (eager
    attention, bf16, H100 and H200) an attention and an MLP cost about the
    same time per byte saved, and recomputing the 48 parts one by one
    took 154 ms a step where checkpointing the 12 layers took 134 (H200):
    so whole layers by default."""
    from .streaming import _largest_modulelist
    units = []
    for layer in _largest_modulelist(model):
        kids = [c for c in layer.children()
                if next(c.parameters(), None) is not None] if parts else []
        units.extend(kids if len(kids) >= 2 else [layer])
    return units


def fit(model, optimizer=None, budget=None, blocks=None, client=None,
        offload=True):
    """Make `model`'s training fit `budget` bytes of VRAM (None: what its
    device has free, read again each step) by keeping, recomputing or
    offloading each block's activations (see the module comment).
    `optimizer`: counted in the memory the step needs; `blocks`: the
    modules to plan (None: units_of(model), each layer of its largest
    nn.ModuleList; units_of(model, parts=True) for their parts);
    `client`: the gpumem.Client whose host
    pool takes the offloads and which reports the plan (None: the
    process's default, if a daemon is there); `offload`: True or "host"
    (host memory), "peer" (another GPU this one reaches directly, its
    VRAM: over NVLink where there is one) or a torch device, False to plan
    with keep and recompute only. Returns the Fitter: `plan`, `history`,
    `profiles()`, `stash`, `remove()`."""
    return Fitter(model, optimizer, budget, blocks, client, offload)


@contextlib.contextmanager
def fitted(model, **kwargs):
    """fit() for the length of a with-block, removed after."""
    fitter = fit(model, **kwargs)
    try:
        yield fitter
    finally:
        fitter.remove()
