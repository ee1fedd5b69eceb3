"""status — gmd_status as plain Python data (dataclasses), copied out of
the C structs before gmd_status_free. Field names are those of gpumem.h;
tiers and states are the library's names ("vram", "host", "resident", ...).
Status.to_dict() gives dicts and lists, for JSON.
"""
import dataclasses

from . import _lib


@dataclasses.dataclass
class Pool:
    device: int
    tier: str
    capacity: int
    used: int
    free: int
    queued_out: int
    queued_in: int
    bytes_out: int
    bytes_in: int
    copy_us_out: int
    copy_us_in: int
    arena_size: int
    arena_free: int
    kept: int
    device_free: int      # VRAM pools: free on the GPU, the driver's
    unaccounted: int      # VRAM pools: used on the GPU, not by gpu-memd
    # VRAM pools: the link between host memory and the device, bytes per
    # second each way (measured at start on cuda, [sim] copy_rate on sim;
    # 0: not known). What gpumem.torch plans its prefetch lead from.
    link_bytes_per_s_out: int
    link_bytes_per_s_in: int
    # VRAM pools: the lowest-numbered device whose link to host memory this
    # device shares (its own number when none): devices with the same
    # link_group have their copies scheduled together.
    link_group: int
    # VRAM pools: the process whose memory slice of the device runs
    # ([limits] memory_slice_ms), and the ms it has left at most; 0, 0: none
    slice_pid: int
    slice_left_ms: int
    # VRAM pools: copies to VRAM under way pause for an acquire's swap-in
    # every this many bytes ([swap] preempt_step); 0: they do not
    preempt_step: int
    # VRAM pools: the GPU's UUID as nvidia-smi prints it and its PCI bus
    # id; "" on host pools and from an older daemon
    uuid: str
    pci_bus_id: str
    # VRAM pools, the peer tier: of `used`, other GPUs' buffers this GPU's
    # VRAM holds, and VRAM kept here for their next swap-outs (0 from an
    # older daemon)
    peer_held: int = 0
    peer_spare: int = 0


@dataclasses.dataclass
class ClientInfo:
    client_id: int
    pid: int
    uid: int
    gid: int
    name: str
    bytes: int
    buffers: int
    waiting: int
    priority: int
    details_hidden: bool
    parked_bytes: int
    vram_bytes: int
    host_bytes: int
    lent_bytes: int       # of bytes, lent to the daemon while it waits
    outside_bytes: int    # VRAM its process holds outside gpu-memd, charged
    # its memory plan as last reported (Client.report_plan): "" and 0s if
    # none (the name is withheld with details_hidden)
    planner: str = ""
    plan_kept_bytes: int = 0
    plan_offloaded_bytes: int = 0
    plan_recomputed_bytes: int = 0
    plan_streamed_bytes: int = 0


@dataclasses.dataclass
class BufferInfo:
    buffer_id: int
    client_id: int
    pid: int
    device: int
    size: int
    tier: str
    state: str
    flags: int
    acquired: bool
    parked: bool


@dataclasses.dataclass
class PeerLink:
    home: int             # this GPU's buffers ...
    holder: int           # ... may rest in this GPU's free VRAM
    bytes_per_s: int      # home's copies into holder's VRAM
    held: int             # home's buffers held there now


@dataclasses.dataclass
class GpuProcess:
    device: int
    pid: int
    bytes: int            # 0: the driver does not say
    client_id: int        # 0: not a gpu-memd client


@dataclasses.dataclass
class Status:
    daemon_version: str
    backend: str
    uptime_ms: int
    total_capacity: int
    total_used: int
    total_clients: int
    total_buffers: int
    pools: list
    clients: list
    buffers: list
    gpu_processes: list   # who holds VRAM outside gpu-memd, where known
    restores: int = 0     # 1: this daemon took over an earlier one's state
    restored_ms: int = 0  # how long that took
    # The host's own limit across the GPUs' links: bytes per second each
    # way with every GPU copying at once, all together (the pools'
    # link_bytes_per_s_* are each link alone); 0: not known, or one link
    host_bytes_per_s_out: int = 0
    host_bytes_per_s_in: int = 0
    # The peer tier's pairs of GPUs ([pools] peer_tier); [] where no GPU
    # reaches another
    peers: list = dataclasses.field(default_factory=list)

    def to_dict(self):
        return dataclasses.asdict(self)


def _fields(cls, record, **names):
    values = {}
    for field in dataclasses.fields(cls):
        value = getattr(record, field.name)
        if field.name in names:
            value = names[field.name](value)
        elif field.type is bool:
            value = bool(value)
        values[field.name] = value
    return cls(**values)


def status_from_c(s):
    """A Status from a gmd_status (ctypes), copying everything."""
    lib = _lib.lib()
    tier = lambda t: _lib.text(lib.gmd_tier_name(t))  # noqa: E731
    state = lambda t: _lib.text(lib.gmd_state_name(t))  # noqa: E731
    return Status(
        daemon_version=_lib.text(s.daemon_version),
        backend=_lib.text(s.backend),
        uptime_ms=s.uptime_ms,
        total_capacity=s.total_capacity,
        total_used=s.total_used,
        total_clients=s.total_clients,
        total_buffers=s.total_buffers,
        pools=[_fields(Pool, s.pools[i], tier=tier, uuid=_lib.text,
                       pci_bus_id=_lib.text)
               for i in range(s.n_pools)],
        clients=[_fields(ClientInfo, s.clients[i], name=_lib.text,
                         planner=_lib.text)
                 for i in range(s.n_clients)],
        buffers=[_fields(BufferInfo, s.buffers[i], tier=tier, state=state)
                 for i in range(s.n_buffers)],
        gpu_processes=[_fields(GpuProcess, s.gpu_processes[i])
                       for i in range(s.n_gpu_processes)],
        restores=s.restores,
        restored_ms=s.restored_ms,
        host_bytes_per_s_out=s.host_bytes_per_s_out,
        host_bytes_per_s_in=s.host_bytes_per_s_in,
        peers=[_fields(PeerLink, s.peers[i]) for i in range(s.n_peers)])
