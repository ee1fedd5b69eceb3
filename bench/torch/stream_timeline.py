"""stream_timeline.py — one clock for a streamed pass: the client's calls,
the GPU's blocks and the daemon's moves (used by profile_stream.py
--timeline).

All three are put on CLOCK_MONOTONIC, in microseconds:
  - the client's calls on gpumem.Buffer (acquire, release_after,
    pageout, prefetch), timed around each call with time.monotonic_ns();
  - the GPU's events (a block's start and end), through one reference
    event recorded and waited for just before the measured generation:
    an event's time is the reference's host time plus its elapsed_time
    from the reference (the reference's host time is taken after the
    wait returns, so GPU times read late by that wake-up: 50-100 us on
    the H200, where a clean move out's empty copy, which waits on the
    block's last-use event, is seen to end that much before the event
    after the block);
  - the daemon's moves, from its debug lines (daemon/core/move.c: "from
    S us, issued +I": when the move was queued, when its first chunk went
    to the copy engine; its copy ended at S + copy, it was over at S +
    total).

What it answers: how busy the link was each way and the GPU with blocks
over the window; for each block's move in, how long it waited for the
copy engine and for how long it copied; for each clean move out, how
long after the block's last kernel the daemon heard of it (the empty
copy waits on the block's last-use event); and a text timeline of a few
passes for reading by eye.
"""

import re
import statistics
import time


def spread(values):
    """n, median, p90 and sum of `values`; None when there are none."""
    if not values:
        return None
    v = sorted(values)
    return {"n": len(v), "median": statistics.median(v),
            "p90": v[min(len(v) - 1, int(0.9 * len(v)))], "sum": sum(v)}


def _now_us():
    return time.monotonic_ns() / 1000.0


class BufferCalls:
    """Records every gpumem.Buffer call of the kinds named while active."""

    KINDS = ("acquire", "release_after", "pageout", "prefetch")

    def __init__(self, buffer_class):
        self.cls = buffer_class
        self.calls = []             # (kind, buffer id, t0 us, t1 us)
        self.saved = {}
        self.on = False

    def install(self):
        for kind in self.KINDS:
            fn = getattr(self.cls, kind)
            self.saved[kind] = fn

            def wrapper(buf, *a, _fn=fn, _kind=kind, **k):
                t0 = _now_us()
                try:
                    return _fn(buf, *a, **k)
                finally:
                    if self.on:
                        self.calls.append((_kind, buf.id, t0, _now_us()))
            setattr(self.cls, kind, wrapper)

    def remove(self):
        for kind, fn in self.saved.items():
            setattr(self.cls, kind, fn)
        self.saved = {}


class GpuClock:
    """GPU events on the host's monotonic clock."""

    def __init__(self, torch):
        torch.cuda.synchronize()
        self.ref = torch.cuda.Event(enable_timing=True)
        self.ref.record()
        self.ref.synchronize()
        self.t_us = _now_us()

    def at(self, event):
        return self.t_us + self.ref.elapsed_time(event) * 1000.0


# The daemon's debug line for a move (daemon/core/move.c): where its time
# went, and when (CLOCK_MONOTONIC us) it was queued and its first chunk
# issued.
MOVE = re.compile(r"buffer (\d+): moved (in|out) (\d+) bytes in (\d+) us "
                  r"\(copy (\d+), remap and ack (\d+), release (\d+)\) "
                  r"from (\d+) us, issued \+(\d+)( clean)?")


def daemon_moves(lines):
    """The daemon's moves: each part's time (us) and when (us) it was
    queued, issued, copied and done."""
    moves = []
    for line in lines:
        m = MOVE.search(line)
        if not m:
            continue
        bid, way, size, total, copy, remap, release, start, issued, clean = \
            m.groups()
        start = int(start)
        moves.append({"id": int(bid), "way": way, "bytes": int(size),
                      "total_us": int(total), "copy_us": int(copy),
                      "remap_ack_us": int(remap), "release_us": int(release),
                      "queued": start,
                      "issued": start + int(issued) if int(issued) else None,
                      "copied": start + int(copy),
                      "done": start + int(total), "clean": bool(clean)})
    return moves


def _union(intervals, lo, hi):
    total, end = 0.0, lo
    for a, b in sorted(intervals):
        a, b = max(a, end, lo), min(b, hi)
        if b > a:
            total += b - a
            end = b
    return total


def analyze(blocks, marks, clock, calls, moves, window):
    """blocks: [(name, buffer id)] streamed; marks: [(name, 'start'|'end',
    event)]; window: (t0, t1) us of the measured generation."""
    lo, hi = window
    name_of = {bid: name for name, bid in blocks}
    gpu = [(name, kind, clock.at(e)) for name, kind, e in marks]
    spans, start = [], {}
    for name, kind, t in gpu:
        if kind == "start":
            start[name] = t
        elif name in start:
            spans.append((name, start.pop(name), t))
    moves = [m for m in moves if m["id"] in name_of and
             lo <= m["queued"] <= hi]
    ins = [m for m in moves if m["way"] == "in"]
    outs = [m for m in moves if m["way"] == "out"]
    out = {"window_ms": round((hi - lo) / 1000, 2)}
    span = hi - lo
    out["link_in_busy"] = round(_union(
        [(m["issued"], m["copied"]) for m in ins if m["issued"]], lo, hi) /
        span, 3)
    out["link_out_busy"] = round(_union(
        [(m["issued"], m["copied"]) for m in outs
         if m["issued"] and not m["clean"]], lo, hi) / span, 3)
    out["gpu_blocks_busy"] = round(_union([(a, b) for _, a, b in spans],
                                          lo, hi) / span, 3)
    out["in_wait_for_engine_us"] = spread(
        [m["issued"] - m["queued"] for m in ins if m["issued"]])
    out["in_copy_us"] = spread(
        [m["copied"] - m["issued"] for m in ins if m["issued"]])
    out["in_after_copy_us"] = spread([m["done"] - m["copied"] for m in ins])
    # a clean move out: from the block's last kernel to the daemon hearing
    ends = {}
    for name, a, b in spans:
        ends.setdefault(name, []).append(b)
    heard, unmap = [], []
    for m in outs:
        near = ends.get(name_of[m["id"]], [])
        if near:        # signed: the GPU clock reads late (above)
            heard.append(min((m["copied"] - t for t in near), key=abs))
        unmap.append(m["done"] - m["copied"])
    out["out_heard_after_kernels_us"] = spread(heard)
    out["out_unmap_and_ack_us"] = spread(unmap)
    # a prefetch request to its move's queueing: the wait for room
    room = []
    for kind, bid, t0, t1 in calls:
        if kind != "prefetch" or bid not in name_of:
            continue
        later = [m["queued"] for m in ins if m["id"] == bid and
                 m["queued"] >= t0]
        if later:
            room.append(min(later) - t0)
    out["prefetch_to_move_us"] = spread(room)
    acq = [t1 - t0 for kind, bid, t0, t1 in calls
           if kind == "acquire" and bid in name_of]
    out["acquire_host_us"] = spread(acq)
    return out


def text(blocks, marks, clock, calls, moves, window, passes_from, passes_to):
    """A readable timeline between two times (us), one event a line."""
    name_of = {bid: name for name, bid in blocks}
    rows = []
    for name, kind, e in marks:
        rows.append((clock.at(e), f"gpu    {name} {kind}"))
    for kind, bid, t0, t1 in calls:
        if bid in name_of:
            rows.append((t0, f"host   {name_of[bid]} {kind} "
                         f"({t1 - t0:.0f} us)"))
    for m in moves:
        if m["id"] not in name_of:
            continue
        who = f"daemon {name_of[m['id']]} {m['way']}"
        if m["clean"]:
            who += " clean"
        rows.append((m["queued"], who + " queued"))
        if m["issued"]:
            rows.append((m["issued"], who + " issued"))
        rows.append((m["copied"], who + " copied"))
        rows.append((m["done"], who + " done"))
    rows = [r for r in rows if passes_from <= r[0] <= passes_to]
    rows.sort()
    base = window[0]
    return [f"{(t - base) / 1000:9.3f} ms  {what}" for t, what in rows]
