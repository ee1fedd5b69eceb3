"""test_turns — of two processes that each need most of the pool, and lend
it while they wait (as gpumem.torch does), neither waits for the whole of
the other's run (waitq.h, "no starvation").

Each process steps like a training job streamed by gpumem.torch: acquire
its two blocks (a short plain wait, then a wait that lends), allocate its
two segments (first without waiting, then with GMD_ALLOC_YIELD, as the
shim repeats PyTorch's refused cudaMalloc), compute, free the segments,
release and page out the blocks. Together they need 400 MiB of a 256 MiB
pool. Before the fix, the process that stepped first took the room its
own idle instant freed before the other's starved allocation could use
it, at every step: the other waited for all of its run (H100, two
training jobs: 10-13 s; here the length of the other's run). Now the
starved one holds back the other's requests that lend once it waited
[limits] wait_hold_ms, and is served within about that long (one request:
in some runs it then steps on for tens of steps, in others the other takes
the device back at once and it steps once each wait_hold_ms).

The check is relative, so that it holds on a loaded machine: no single
step of either waits half as long as the other's whole run.

Also here: SliceTurn (a memory slice's holder is not made to wait for a
process its slice holds back) and StuckLines (the debug lines that say
what holds a device's VRAM when a request cannot be served).
"""
import json
import unittest

from gmd_daemon import (DaemonTest, Stepper, reap, spawn_python,
                        wait_until, waits)

STEPS = 60

JOB = """
import json, sys, time
import gpumem
from gpumem.client import YIELD
from gpumem.errors import OutOfMemory, TimedOut
MiB = 1 << 20
c = gpumem.Client(name=sys.argv[1])
blocks = [c.alloc(48 * MiB) for _ in range(2)]
for b in blocks:
    b.release()
print("ready", flush=True)
sys.stdin.readline()
times = []
for i in range(int(sys.argv[2])):
    t0 = time.monotonic()
    for b in blocks:
        try:
            b.acquire(0.05)
        except TimedOut:
            b.acquire(60, lend=True)
    segs = []
    for size in (64 * MiB, 40 * MiB):
        try:
            segs.append(c.alloc(size, timeout=0))
        except (OutOfMemory, TimedOut):
            segs.append(c.alloc(size, flags=gpumem.SWAPPABLE | YIELD,
                                timeout=60))
    time.sleep(0.02)
    for s in segs:
        s.free()
    for b in blocks:
        b.release()
        b.pageout(wait=False)
    c.flush()
    times.append(time.monotonic() - t0)
t1 = time.monotonic()
print(json.dumps({"steps": times, "t1": t1}), flush=True)
"""


class Turns(DaemonTest):
    CONFIG = ("[sim]\nvram = 256M\ngranularity = 64K\n"
              "[limits]\nwait_hold_ms = 2000\n")

    def test_neither_waits_for_the_others_whole_run(self):
        jobs = [spawn_python(self.daemon, JOB, name, str(STEPS))
                for name in ("a", "b")]
        for j in jobs:
            self.addCleanup(reap, j)
        for j in jobs:
            self.assertEqual(j.stdout.readline().strip(), "ready",
                             j.stderr.read() if j.poll() is not None else "")
        import time
        t0 = time.monotonic()
        for j in jobs:
            j.stdin.write("go\n")
            j.stdin.flush()
        out = []
        for j in jobs:
            line = j.stdout.readline()
            self.assertTrue(line, j.stderr.read())
            out.append(json.loads(line))
        run = [o["t1"] - t0 for o in out]
        longest = [max(o["steps"]) for o in out]
        self.assertEqual([len(o["steps"]) for o in out], [STEPS, STEPS])
        for me, other in ((0, 1), (1, 0)):
            self.assertLess(
                longest[me], 0.5 * run[other],
                f"process {'ab'[me]} waited {longest[me]:.2f} s in one step, "
                f"the other's run took {run[other]:.2f} s "
                f"(runs {run[0]:.2f} / {run[1]:.2f} s)")



OTHER = """
import sys, time
import gpumem
from gpumem.client import YIELD
MiB = 1 << 20
c = gpumem.Client(name="other")
a = c.alloc(24 * MiB)                       # held: lent while it waits
print("holding", flush=True)
sys.stdin.readline()
t0 = time.monotonic()
b = c.alloc(16 * MiB, flags=gpumem.SWAPPABLE | YIELD, timeout=30)
print("served %.3f" % (time.monotonic() - t0), flush=True)
sys.stdin.readline()
"""


class SliceTurn(DaemonTest):
    """While process H's memory slice runs, process O, which waits lending
    and whose lent memory was moved out for H, is served only from free
    room: not from what H freed into its client's mapping cache (parked),
    which O's wait used to have asked back. Served from it during H's
    slice, O took its lent memory back in, and H's next request in its own
    slice waited for O: here until its 10 s timeout (1a0aac1); on the H100
    the slice's holder waited seconds at a time with neither training job
    stepping. O is served when the slice ends."""
    CONFIG = ("[sim]\nvram = 64M\ngranularity = 64K\n"
              "[limits]\nmemory_slice_ms = 3000\n")

    def test_held_back_loan_waits_for_the_slice(self):
        import time
        MiB = 1 << 20
        o = spawn_python(self.daemon, OTHER)
        self.addCleanup(reap, o)
        self.assertEqual(o.stdout.readline().strip(), "holding",
                         o.stderr.read() if o.poll() is not None else "")
        x = self.client.alloc(16 * MiB)
        x.release()
        # H waits for room its own released X holds: the slice is H's
        y = self.client.alloc(32 * MiB, timeout=10)
        t_slice = time.monotonic()
        self.assertIn("slice of its memory to", self.daemon.log())
        # O waits lending its 24 MiB; H's next request takes them out
        o.stdin.write("go\n")
        o.stdin.flush()
        wait_until(lambda: any(c.pid == o.pid and c.waiting
                               for c in self.client.status("clients").clients),
                   what="the other process waiting")
        # status shows what it lends meanwhile
        lent = [c.lent_bytes for c in self.client.status("clients").clients
                if c.pid == o.pid]
        self.assertEqual(lent, [24 * MiB])
        self.assertIn("24 MiB lent while waiting", memctl(self.daemon, "status"))
        self.assertIn("waiting, 24 MiB lent", memctl(self.daemon, "top", "--once"))
        z = self.client.alloc(16 * MiB, timeout=10)
        # H frees all: room enough for O and what it lent
        for b in (y, z):
            b.free()
        time.sleep(0.2)
        # H again, in its own slice: served at once, not after O
        t0 = time.monotonic()
        w = self.client.alloc(40 * MiB, timeout=10)
        took = time.monotonic() - t0
        self.assertLess(time.monotonic() - t_slice, 3.0,
                        "the checks outlasted the slice: they show nothing")
        self.assertLess(took, 0.5, f"H waited {took:.2f} s in its own slice")
        w.free()
        line = o.stdout.readline().strip()
        if not line.startswith("served"):
            o.kill()
            self.fail(f"the other process: {line!r} {o.stderr.read()}")
        o.stdin.write("done\n")
        o.stdin.flush()


STEPPER = """
import os, sys, time
if sys.argv[2] == "nocache":
    os.environ["GPU_MEMD_CACHE"] = "0"      # a free goes to the daemon
import gpumem
MiB = 1 << 20
c = gpumem.Client(name=sys.argv[1])
bufs = {}
print("ready", flush=True)
for line in sys.stdin:
    op, name, *rest = line.split()
    t0 = time.monotonic()
    try:
        if op == "alloc":
            bufs[name] = c.alloc(int(rest[0]) * MiB, timeout=float(rest[1]))
        elif op == "acquire":
            bufs[name].acquire(float(rest[0]))
        else:
            getattr(bufs[name], op)()
        print("ok %.3f" % (time.monotonic() - t0), flush=True)
    except Exception as e:
        print("error %.3f %s" % (time.monotonic() - t0, e), flush=True)
"""


def stepper(test, name, cache=True):
    """A child process that does one buffer operation per line it is sent
    (alloc NAME MIB TIMEOUT_S, acquire NAME TIMEOUT_S, release NAME, free
    NAME) and says "ok SECONDS" or "error SECONDS WHY". With `cache`
    False its frees go to the daemon at once (no mapping cache)."""
    return Stepper(test, STEPPER, name, "cache" if cache else "nocache")


def memctl(daemon, *args):
    """gpu-memctl (beside the daemon's build) against `daemon`: its
    stdout."""
    import os
    import subprocess
    from gmd_daemon import DAEMON
    ctl = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        DAEMON))), "client", "gpu-memctl")
    return subprocess.run([ctl, "--socket", daemon.socket] + list(args),
                          check=True, capture_output=True, text=True,
                          timeout=30).stdout


class SliceKeepsPeak(DaemonTest):
    """While process H's memory slice runs, another process O is served
    from free room only beside what H held at its most there: H frees its
    memory between steps and takes it again in the next. O, served from
    the free room at once, held it in use, and H's next request in its own
    slice waited for O (on the H100 a training job waited 3-4 s in its
    slice while the other held 1.2-1.7 GiB it had taken there: debug run
    of 2026-11-26, stuck lines)."""
    CONFIG = ("[sim]\nvram = 64M\ngranularity = 64K\n"
              "[limits]\nmemory_slice_ms = 3000\n")

    def test_free_room_of_the_holders_peak_stays_its(self):
        o = stepper(self, "other")
        h = stepper(self, "holder", cache=False)
        self.assertEqual(o.do("alloc x 40 5")[0], "ok")
        self.assertEqual(o.do("release x")[0], "ok")
        # H holds K throughout: never idle (SliceEndsIdle); it waits for
        # room O's released X holds: the slice is H's
        self.assertEqual(h.do("alloc k 4 5")[0], "ok")
        self.assertEqual(h.do("alloc y 48 10")[0], "ok")
        self.assertIn("slice of its memory to", self.daemon.log())
        # status and gpu-memctl say whose slice runs
        pool = [p for p in self.client.status("pools").pools
                if p.tier == "vram"][0]
        self.assertEqual(pool.slice_pid, h.pid)
        self.assertTrue(0 < pool.slice_left_ms <= 3000, pool.slice_left_ms)
        for command in (("status",), ("top", "--once")):
            self.assertIn(f"gpu0 memory slice: pid {h.pid} (holder), ",
                          memctl(self.daemon, *command))
        import json
        pools = json.loads(memctl(self.daemon, "--json", "status"))["pools"]
        self.assertEqual([p["slice_pid"] for p in pools if "slice_pid" in p],
                         [h.pid])
        self.assertEqual(h.do("free y")[0], "ok")
        # 60 MiB free, H held 52 and holds 4: O's 32 wait for the slice
        o.send("alloc z 32 20")
        wait_until(lambda: waits(self.client, o.pid),
                   what="the other process waiting")
        answer = h.do("alloc w 48 2")
        self.assertEqual(answer[0], "ok", answer)
        self.assertLess(float(answer[1]), 0.5,
                        f"H waited {answer[1]} s in its own slice")
        self.assertTrue(waits(self.client, o.pid), "O was served in H's slice")
        # H holds nothing: its slice ends once it is idle (SliceEndsIdle)
        self.assertEqual(h.do("free w")[0], "ok")
        self.assertEqual(h.do("free k")[0], "ok")
        answer = o.answer()
        self.assertEqual(answer[0], "ok", answer)


class SliceEndsIdle(DaemonTest):
    """A slice whose holder has used none of its buffers for SLICE_IDLE_MS
    (250 ms) while another process waits ends there: on the H100 a job
    done with its last step kept its slice, and the other job waiting, for
    the 1.3 s it took to exit."""
    CONFIG = ("[sim]\nvram = 64M\ngranularity = 64K\n"
              "[limits]\nmemory_slice_ms = 5000\n")

    def test_idle_holder_lets_the_other_in(self):
        import time
        MiB = 1 << 20
        o = stepper(self, "other")
        self.assertEqual(o.do("alloc x 40 5")[0], "ok")
        self.assertEqual(o.do("release x")[0], "ok")
        y = self.client.alloc(48 * MiB, timeout=10)
        t_slice = time.monotonic()
        y.release()
        # O's X comes back only once H's released Y goes out
        answer = o.do("acquire x 20")
        took = time.monotonic() - t_slice
        self.assertEqual(answer[0], "ok", answer)
        self.assertLess(took, 2.0, f"O waited {took:.2f} s for an idle "
                        "holder's slice (5 s)")
        self.assertRegex(self.daemon.log(),
                         r"the slice of pid \d+ ends: it used none of its "
                         r"buffers there for \d+ ms")
        self.assertEqual(y.tier, "host")


HOLDER = """
import sys, gpumem
c = gpumem.Client(name="holder")
b = c.alloc(48 << 20)
print("held", flush=True)
sys.stdin.read()
"""


class StuckLines(DaemonTest):
    """At debug level, a request that waits while the evictor finds
    nothing to move out has the daemon say what holds the device's VRAM,
    per process (daemon/core/stuck.c): the lines that showed on the H100
    why a training job waited seconds in its slice."""
    ARGS = ("--log-level", "debug")

    def test_what_holds_the_vram(self):
        import os
        import gpumem
        o = spawn_python(self.daemon, HOLDER)
        self.addCleanup(reap, o)
        self.assertEqual(o.stdout.readline().strip(), "held")
        with self.assertRaises(gpumem.errors.TimedOut):
            self.client.alloc(32 << 20, timeout=0.3)
        lines = [line for line in self.daemon.log().splitlines()
                 if "more wanted" in line]
        self.assertTrue(lines, self.daemon.log())
        self.assertIn("device 0: 16 MiB more wanted, 0 B chosen to move out, "
                      "16 MiB free;", lines[0])
        self.assertIn(f"pid {o.pid}: in use 48 MiB;", lines[0])
        self.assertIn(f"pid {os.getpid()}: waits 1 for 32 MiB;", lines[0])

if __name__ == "__main__":
    unittest.main()
