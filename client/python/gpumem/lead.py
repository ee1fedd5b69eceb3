"""lead — how far ahead gpumem.torch prefetches, planned from the link the
daemon measured, for stream() and offload_activations()
when the caller gives no `lead` of their own.

The daemon measures each GPU's link to host memory once at start (the cuda
backend times copies through its copy engine; the sim backend reports its
[sim] copy_rate) and reports it in its status (Pool.link_bytes_per_s_in:
host to VRAM, the direction a prefetch copies). A unit that comes back (a
streamed block, an offloaded tensor) of `nbytes` then takes

    t_copy = nbytes / link_in

to copy, and the prefetch of the unit `lead` places ahead, issued when the
current one starts, has the compute of the `lead` units before it to
finish in. It is covered when lead * t_compute >= t_copy, so

    lead = max(1, ceil(t_copy / t_compute))      units ahead

with t_compute one unit's compute time, measured (streaming: the median
block of the first forward pass; offload: the forward pass's time per
offloaded tensor). More would only hold more memory: the link, not the
lead, bounds a pass whose copies take longer than its compute.

The link is read once per client and device and kept while known (it does
not change while the daemon runs); an unknown one (0: not measured yet,
the measurement skipped, sim copies unthrottled) is asked again after
UNKNOWN_RETRY_S, and the callers keep their fixed defaults meanwhile.
"""
import math
import threading
import time
import weakref

UNKNOWN_RETRY_S = 10.0

_lock = threading.Lock()
_known = weakref.WeakKeyDictionary()     # client -> {device: (rate, when)}


def _vram_pool(client, device):
    """`device`'s VRAM pool in the daemon's status, or None."""
    for pool in client.status("pools").pools:
        if pool.tier == "vram" and pool.device == device:
            return pool
    return None


def link_in(client, device):
    """The host-to-VRAM bytes per second of `device`'s link, as the daemon
    reports it; 0 when it does not know it."""
    now = time.monotonic()
    with _lock:
        rate, when = _known.get(client, {}).get(device, (0, -math.inf))
    if rate or now - when < UNKNOWN_RETRY_S:
        return rate
    pool = _vram_pool(client, device)
    rate = pool.link_bytes_per_s_in if pool is not None else 0
    with _lock:
        _known.setdefault(client, {})[device] = (rate, now)
    return rate


def units_ahead(nbytes, rate, compute_s, most=None):
    """max(1, ceil(t_copy / t_compute)) with t_copy = nbytes / rate, at most
    `most` (None: no bound); None when it cannot be planned (no rate, no
    compute time)."""
    if not rate or not compute_s or compute_s <= 0 or nbytes <= 0:
        return None
    ahead = max(1, math.ceil(nbytes / rate / compute_s))
    if most is not None:
        ahead = max(1, min(ahead, most))
    return ahead


_capacity = weakref.WeakKeyDictionary()  # client -> {device: bytes}


def vram_capacity(client, device):
    """The bytes of `device`'s VRAM pool (the daemon's --vram-limit or the
    GPU's), read once per client and device; 0 when not reported."""
    with _lock:
        known = _capacity.get(client, {}).get(device)
    if known is not None:
        return known
    pool = _vram_pool(client, device)
    size = pool.capacity if pool is not None else 0
    with _lock:
        _capacity.setdefault(client, {})[device] = size
    return size
