"""test_slice_priority — memory slices and a process of higher priority
(slice.h, evict.c): the higher priority runs first, and the slice it
interrupted is not spent meanwhile.

Measured on the H200 (bench_cotenancy --quick, 2026-11-28): two training
jobs in 5 s memory slices and a priority-10 inference job. A training job's
slice ran out while the inference job held the memory, the slice passed to
the other training job, and the first one's step waited 16.5 s; the
inference job's weights, lent while its own request waited, went out for a
training job's step.

SlicePause: the slice's clock stops while its holder waits behind a
process of a higher priority, so the holder goes on once that one is done
(before: it waited for the other process's whole slice too).
LentKeepsPriority: what a priority-10 process lends while it waits does
not go out for a priority-0 process's request — but for one that holds the
memory the lender waits for and does not lend it, after a bound (evict.c,
lent_inherits): the two no longer wait for each other until a timeout.
"""
import time
import unittest

from gmd_daemon import DaemonTest, Stepper, wait_until, waits

MiB = 1 << 20

STEPPER = """
import sys, time
import gpumem
from gpumem.client import YIELD
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
        elif op == "lend":
            bufs[name] = c.alloc(int(rest[0]) * MiB, timeout=float(rest[1]),
                                 flags=gpumem.SWAPPABLE | YIELD)
        elif op == "acquire":
            bufs[name].acquire(float(rest[0]))
        else:
            getattr(bufs[name], op)()
        print("ok %.3f" % (time.monotonic() - t0), flush=True)
    except Exception as e:
        print("error %.3f %s" % (time.monotonic() - t0, e), flush=True)
"""


def stepper(test, name, priority=0):
    """A child process that does one buffer operation per line (alloc NAME
    MIB TIMEOUT_S, lend NAME MIB TIMEOUT_S: an allocation with
    GMD_ALLOC_YIELD, acquire NAME TIMEOUT_S, release NAME, free NAME) and
    says "ok SECONDS" or "error SECONDS WHY"; at `priority`
    (GPU_MEMD_PRIORITY)."""
    return Stepper(test, STEPPER, name,
                   env={"GPU_MEMD_PRIORITY": str(priority)})


def client_of(client, pid):
    return [c for c in client.status("clients").clients if c.pid == pid][0]


class SlicePause(DaemonTest):
    """H's slice runs; the priority-10 process P takes H's memory and holds
    it past the slice's length while H waits, and O waits too. Once P is
    done, H is served at once, in its own slice, and O after it. Before,
    H's slice ran out while P held the memory and passed to O: H waited
    for O's whole slice too (here 3 s)."""
    CONFIG = ("[users]\nmax_priority = 100\n"
              "[sim]\nvram = 64M\ngranularity = 64K\n"
              "[limits]\nmemory_slice_ms = 3000\n")

    def test_slice_stops_while_a_higher_priority_runs(self):
        o = stepper(self, "other")
        h = stepper(self, "holder")
        p = stepper(self, "priority", priority=10)
        self.assertEqual(o.do("alloc x 40 5")[0], "ok")
        self.assertEqual(o.do("release x")[0], "ok")
        # H holds K throughout (never idle); it waits for room O's
        # released X holds: the slice is H's
        self.assertEqual(h.do("alloc k 4 5")[0], "ok")
        self.assertEqual(h.do("alloc y 48 10")[0], "ok")
        self.assertIn("slice of its memory to", self.daemon.log())
        # P, above the slice, waits for H's Y and takes it once released
        p.send("alloc q 40 10")
        wait_until(lambda: waits(self.client, p.pid), what="P waiting")
        self.assertEqual(h.do("release y")[0], "ok")
        answer = p.answer()
        self.assertEqual(answer[0], "ok", answer)
        # H wants Y back and O wants room: both wait while P runs, for
        # longer than H's slice
        h.send("acquire y 20")
        o.send("alloc z 32 20")
        wait_until(lambda: waits(self.client, o.pid), what="O waiting")
        time.sleep(3.5)
        # (an acquire's wait shows in no status field: H's answer is
        # read below)
        # P is done: H goes on in its slice
        t0 = time.monotonic()
        self.assertEqual(p.do("free q")[0], "ok")
        answer = h.answer()
        took = time.monotonic() - t0
        self.assertEqual(answer[0], "ok", answer)
        self.assertLess(took, 1.0, f"H waited {took:.2f} s once P was done "
                        "(its slice was spent while P ran)")
        self.assertTrue(waits(self.client, o.pid), "O was served in H's slice")
        # H is done: O is served
        self.assertEqual(h.do("free y")[0], "ok")
        self.assertEqual(h.do("free k")[0], "ok")
        answer = o.answer()
        self.assertEqual(answer[0], "ok", answer)


class LentKeepsPriority(DaemonTest):
    """P (priority 10) holds W in use and waits lending it; Q (priority 0)
    then waits for room only W's eviction would make. W stays in VRAM:
    lent memory goes out for requests of the lender's priority or above.
    Before, W went to host memory for Q, and P's own request, once room
    came, waited for W to come back as well. But Q holds H in use, which
    P's request needs, and does not lend it: the two would wait for each
    other until Q's request timed out. Once Q waited 1 s (priority_grace_ms
    unset), W goes for Q; Q is served, and P once Q is done."""
    CONFIG = ("[users]\nmax_priority = 100\n"
              "[sim]\nvram = 64M\ngranularity = 64K\n")

    def test_lent_memory_stays_for_a_lower_priority(self):
        p = stepper(self, "priority", priority=10)
        q = stepper(self, "low")
        self.assertEqual(q.do("alloc h 20 5")[0], "ok")    # in use
        self.assertEqual(p.do("alloc w 40 5")[0], "ok")    # in use
        p.send("lend v 16 20")
        wait_until(lambda: client_of(self.client, p.pid).lent_bytes ==
                   40 * MiB, what="P lending W")
        q.send("alloc z 24 10")
        wait_until(lambda: waits(self.client, q.pid), what="Q waiting")
        time.sleep(0.5)
        info = client_of(self.client, p.pid)
        self.assertEqual(info.vram_bytes, 40 * MiB,
                         "P's lent W went out for a lower priority within "
                         "the bound")
        self.assertNotIn("evicting buffer", self.daemon.log())
        # past the bound, W goes for Q instead of both waiting for Q's
        # timeout (10 s)
        answer = q.answer()
        self.assertEqual(answer[0], "ok", answer)
        self.assertGreater(float(answer[1]), 0.9, answer)
        self.assertLess(float(answer[1]), 3.0, answer)
        self.assertIn("which waited", self.daemon.log())
        self.assertTrue(waits(self.client, p.pid), "P was served beside Q")
        # Q is done: P is served, W back in VRAM
        self.assertEqual(q.do("free z")[0], "ok")
        self.assertEqual(q.do("free h")[0], "ok")
        answer = p.answer()
        self.assertEqual(answer[0], "ok", answer)
        self.assertEqual(client_of(self.client, p.pid).vram_bytes,
                         56 * MiB)


if __name__ == "__main__":
    unittest.main()
