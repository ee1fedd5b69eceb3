"""spill — a model's weights in SPILLABLE gpu-memd buffers: VRAM first,
then host memory the GPU reads directly.

    spiller = gpumem.torch.spill(model)             # or budget="8G"
    out = model(x)                                  # unchanged code

For inference of a model larger than the VRAM it may have, when moving
weights is not worth it. Nothing moves once placed: the buffers stay
acquired for the model's life, and the daemon never moves a buffer its
owner holds, so for a held buffer SPILLABLE is
placement only: where a buffer is allocated is where it stays. Each is
allocated in VRAM while the daemon's pool has room (waiting up to
`timeout` seconds for room to be made, other clients' idle buffers moved
out; 0, the default: what is free now) and on host memory otherwise, where
kernels read it over the link (zero-copy: about 51 GB/s on an H200's PCIe
Gen5 x16, every time they run, against 4.8 TB/s from VRAM). With `budget`,
at most that many bytes of weights go to VRAM, whatever the pool has:
the rest is placed on host memory explicitly (allocated, filled, released,
paged out, and acquired again where it rests).

Against stream() (streaming.py): streaming copies each block's weights in
before it runs and out after, so every weight crosses the link once per
forward pass and kernels read VRAM; spill copies nothing, and kernels read
host-placed weights across the link as often as they read them (a GEMM may
read a weight tile more than once, a lookup reads a few rows of a table).
Spill has no hooks, no order to learn, no lead to plan and needs no room
for blocks in flight; the GPU suite measures both (tests/gpu/test_spill.py).

The parameters are packed in the model's order, at 256-byte offsets, into
buffers of up to `chunk` bytes (a parameter larger than that gets one of
its own), so placement goes buffer by buffer: the model's first layers go
to VRAM first. nn.Embedding tables come last, since a lookup reads only
the rows it needs and loses least on host memory; not a table shared with
another module (an output head tied to it reads all of it). Module buffers
(masks, rotary tables) move to the buffers' device as ordinary tensors.
Each param.data becomes a view of its buffer; `remove()` copies them back
into ordinary tensors on that device and frees the buffers. A placement
that fails (no room on host memory either) puts back what was moved and
raises with the daemon's sentence.

idle() (idle.py) releases the buffers and pages out those in VRAM; on exit
those are prefetched and acquired again, each back in VRAM if room is made
within IDLE_BACK_S, else where it is, on host memory.
"""
import threading

from . import _torchdev
from ._args import format_size, parse_size
from .client import SPILLABLE
from .errors import GpumemError
from .streaming import _aligned_bytes, _packed

CHUNK = 64 << 20
IDLE_BACK_S = 10.0


class Part:
    """One buffer of packed parameters, and where it was placed."""

    def __init__(self, params):
        self.params = params            # [(parameter, offset)]
        self.nbytes = 0
        self.buf = None
        self.tier = None                # "vram" or "host", once placed
        self.by_budget = False          # on host for the budget, not the pool
        self.was_vram = False           # in VRAM when idle() began

    def __repr__(self):
        return (f"<Part {len(self.params)} params {self.nbytes} bytes "
                f"{self.tier}>")


def _packing_order(model):
    """The model's parameters in its order, nn.Embedding tables that no
    other module uses last."""
    import torch
    tables, others = set(), set()
    for module in model.modules():
        for p in module._parameters.values():
            if p is None:
                continue
            (tables if isinstance(module, torch.nn.Embedding)
             else others).add(id(p))
    params = list(model.parameters())
    last = {i for i in tables if i not in others}
    return [p for p in params if id(p) not in last] + \
        [p for p in params if id(p) in last]


def _chunks(params, chunk):
    """Parameters cut into runs of at most `chunk` packed bytes (a larger
    parameter alone)."""
    runs, run, size = [], [], 0
    for p in params:
        nbytes = _aligned_bytes(p)
        if run and size + nbytes > chunk:
            runs.append(run)
            run, size = [], 0
        run.append(p)
        size += nbytes
    if run:
        runs.append(run)
    return runs


class Spiller:
    """What gpumem.torch.spill() returns: the buffers (`parts`), `stats`
    (bytes placed on each tier, and on host because of the budget),
    placement() (where the bytes are now) and remove()."""

    def __init__(self, model, client, budget, chunk, timeout, device):
        self.model = model
        self.client = client
        self.ops = _torchdev.ops_for(client)
        self.timeout = timeout
        self.budget = None if budget is None else parse_size(budget)
        chunk = parse_size(chunk)
        if chunk < 1:
            raise ValueError("gpumem.torch.spill: chunk must be 1 byte or "
                             "more")
        self.device_index = _torchdev.model_device_index(
            model, self.ops, client, device, "gpumem.torch.spill")
        self._lock = threading.RLock()
        self.stats = {"buffers": 0, "vram_bytes": 0, "host_bytes": 0,
                      "host_by_budget_bytes": 0}
        self.parts = [Part([(p, 0) for p in run]) for run in
                      _chunks(_packing_order(model), chunk)]
        self._place()

    @property
    def torch_device(self):
        return self.ops.torch_device(self.device_index)

    # ---- placement -------------------------------------------------------

    def _place(self):
        moved = []                 # (module, key, the buffer before)
        for module in self.model.modules():      # masks, rotary tables
            for key, value in list(module._buffers.items()):
                if value is not None:
                    moved.append((module, key, value))
                    module._buffers[key] = value.to(self.torch_device)
        homes = []                 # (parameter, its device before)
        try:
            for part in self.parts:
                self._fill(part, homes)
        except BaseException:
            self._undo(homes)
            for module, key, value in moved:
                module._buffers[key] = value
            raise

    def _fill(self, part, homes):
        """Allocate the part's buffer (VRAM first), copy its parameters in,
        point them at it; to host memory when the budget says so."""
        part.params, offset = _packed(p for p, _ in part.params)
        part.nbytes = offset
        if offset == 0:
            return
        try:
            part.buf = self.client.alloc(
                offset, device=self.ops.daemon_device(self.device_index),
                flags=SPILLABLE, timeout=self.timeout)
        except GpumemError as e:
            raise type(e)(e.code, self._no_room(part, str(e))) from None
        for p, off in part.params:
            view = part.buf.as_tensor(p.dtype, tuple(p.shape), off)
            view.copy_(p.data)
            homes.append((p, p.device))
            p.data = view
        self.stats["buffers"] += 1
        part.tier = part.buf.tier
        if part.tier == "vram" and self.budget is not None and \
                self.stats["vram_bytes"] + part.buf.size > self.budget:
            self._to_host(part)
            part.by_budget = True
            self.stats["host_by_budget_bytes"] += part.buf.size
        self.stats[part.tier + "_bytes"] += part.buf.size

    def _to_host(self, part):
        """Move a filled part to host memory and hold it there: released
        after the copy in (current stream), paged out, acquired where it
        rests (an acquire that does not wait keeps a SPILLABLE buffer on
        host memory)."""
        buf = part.buf
        buf.release_after(self.ops.current_stream(self.torch_device))
        try:
            buf.pageout()
            buf.wait()
        except GpumemError as e:
            raise type(e)(e.code, self._no_room(
                part, f"placing it on host memory for the budget "
                f"({format_size(self.budget)}) failed: {e}")) from None
        finally:
            buf.acquire(0)
        part.tier = buf.tier

    def _no_room(self, part, why):
        names = {id(p): n for n, p in self.model.named_parameters()}
        first = names.get(id(part.params[0][0]), "?")
        n = len(part.params)
        return (f"gpumem.torch.spill: no room for {format_size(part.nbytes)} "
                f"of weights ({n} parameter{'s' if n > 1 else ''} from "
                f"{first}) on "
                f"device {self.device_index}'s VRAM or on host memory: {why}; "
                f"nothing of the model stays spilled (placed so far: "
                f"{format_size(self.stats['vram_bytes'])} in VRAM, "
                f"{format_size(self.stats['host_bytes'])} on host memory)")

    def _undo(self, homes):
        """After a failure: parameters moved so far back into ordinary
        tensors on the device they were on, buffers freed."""
        import torch
        for p, device in homes:
            p.data = p.data.to(device, copy=True,
                               memory_format=torch.contiguous_format)
        for part in self._live():
            self._free(part)

    # ---- where the bytes are ---------------------------------------------

    def placement(self):
        """Bytes of buffers on each tier now, as the library sees them:
        {"vram": n, "host": n}."""
        out = {"vram": 0, "host": 0}
        for part in self.parts:
            if part.buf is not None and not part.buf.freed:
                out[part.buf.tier] += part.buf.size
        return out

    # ---- idle and removal ------------------------------------------------

    def _idle_enter(self, pageout=True):
        stream = self.ops.current_stream(self.torch_device)
        for part in self._live():
            part.was_vram = part.buf.tier == "vram"
            part.buf.release_after(stream)
            if part.was_vram and pageout:
                try:
                    part.buf.pageout()
                except GpumemError:
                    pass        # host memory full: it stays, released

    def _idle_exit(self):
        parts = self._live()
        for part in parts:
            if part.was_vram:
                try:
                    part.buf.prefetch()
                except GpumemError:
                    pass
        for part in parts:
            # VRAM if room is made in time, else where it is (on host)
            part.buf.acquire(IDLE_BACK_S if part.was_vram else 0)
            part.tier = part.buf.tier

    def _live(self):
        return [p for p in self.parts if p.buf is not None
                and not p.buf.freed]

    def remove(self):
        """Copy the weights back into ordinary tensors on the buffers'
        device and free the buffers."""
        import torch
        with self._lock:
            for part in self._live():
                for p, _ in part.params:
                    p.data = p.data.clone(
                        memory_format=torch.contiguous_format)
                self._free(part)

    def _free(self, part):
        self.ops.free(part.buf, self.torch_device)
        part.buf = None


def spill(model, budget=None, *, chunk=CHUNK, client=None, timeout=0,
          device=None):
    """Place `model`'s weights in SPILLABLE gpu-memd buffers, VRAM first,
    then host memory the GPU reads directly, held for the model's life (see
    the module comment). `budget`: bytes (or "8G") of weights placed in
    VRAM at most (None: as much as the daemon's pool has room for);
    `chunk`: bytes of parameters per buffer, the unit of placement;
    `timeout`: seconds an allocation may wait for VRAM to be made before
    its buffer goes to host memory (0: only what is free now); `device`:
    the CUDA device (None: the model's, or 0 for a model on the CPU; sim:
    the CPU). The model may sit on the CPU: its weights are copied to the
    buffers. Raises the gpumem error of the allocation that found no room
    anywhere, with what was placed, after putting the model back.
    Returns the Spiller."""
    from . import current_client, idle
    spiller = Spiller(model, client or current_client(), budget, chunk,
                      timeout, device)
    idle.register(spiller)
    return spiller
