"""test_offload — gpumem.torch.offload_activations, stream and idle against
the real gpu-memd on the sim backend, where buffers are host memory and
their tensor views CPU tensors, so all but the CUDA streams and events runs
here:
  Offload   a small MLP and a transformer encoder: loss and every gradient
            bit-identical with and without offload; the saved activations
            sit on the host tier between forward and backward (buffer tier
            and the daemon's status); the backward pass acquires them in
            reverse order, each prefetched before its acquire; small
            tensors and weights stay; buffers are freed after backward;
            release_after, pageout and prefetch sent without waiting,
            one flush as the block ends
  Stream    inference and training (AdamW, several steps) bit-identical to
            the plain model; the budget decides which blocks stay resident
            (acquired in VRAM) and which stream (host tier between passes);
            the order is learned from the first pass, and each block is
            prefetched while the one before it runs, before its acquire; a budget too small is
            refused with what it needs; remove() restores plain tensors
  StreamNoWait  the hooks' release_after, pageout and prefetch sent
            without waiting (wait=False), one flush a pass and one in
            remove(); a refusal other than a pageout's raises at the next
            pass, and the stream goes on
  Idle      idle() pages out every resident block and brings it back
  HostFull  a host pool too small for the activations: pageouts refused,
            counted, the buffers stay in VRAM and the results are the same
            (StreamHostFull: the same for streamed blocks, counted at the
            flush of the next pass)
Skips with one SKIP: line where torch is missing.
"""
import copy
import errno
import time
import unittest
from unittest import mock

from gpumem import _torchdev, offload

import gpumem
from gmd_daemon import (MiB, DaemonTest, reap, skip_line, spawn_python,
                        wait_until)
from gmd_torch import (CONFIG, Layers, Spy, assert_same, grads, gt,
                       layers_with_expected, mlp, mlp_with_reference,
                       stream_every_block, torch)

if torch is None:
    skip_line("test_offload", "torch not installed (Debian: python3-torch): "
              "offload and streaming not tested")


@unittest.skipIf(torch is None, "torch not installed")
class Offload(DaemonTest):
    CONFIG = CONFIG

    def setUp(self):
        super().setUp()
        torch.manual_seed(1)
        self.x = torch.randn(512, 128)      # 512x512 fp32 activations: 1 MiB

    def run_mlp(self, model, offload=None):
        if offload is None:
            loss = model(self.x).square().mean()
        else:
            with gt.offload_activations(client=self.client, **offload) as o:
                loss = model(self.x).square().mean()
            self.offloader = o
            self.after_forward(o)
        loss.backward()
        return loss.detach(), grads(model)

    def after_forward(self, offloader):
        pass

    def test_mlp_bit_identical_and_on_host_between(self):
        ref_loss, ref_grads = self.run_mlp(mlp())
        seen = {}

        def after_forward(o):
            self.client.wait(timeout=10)
            bufs = [r().buf for r in o._saved if r is not None and r()]
            seen["tiers"] = [b.tier for b in bufs]
            status = self.client.status("buffers")
            ids = {b.id for b in bufs}
            seen["status"] = [(b.tier, b.acquired) for b in status.buffers
                              if b.buffer_id in ids]
        self.after_forward = after_forward
        loss, g = self.run_mlp(mlp(), {"min_bytes": MiB, "slab_bytes": 0})
        self.assertTrue(torch.equal(loss, ref_loss), "loss differs")
        assert_same(self, g, ref_grads, "gradient")
        stats = self.offloader.stats
        # the activations of 512x512 (GELU inputs and outputs, the linear
        # layers' inputs): 1 MiB each
        self.assertGreaterEqual(stats["offloaded"], 3, stats)
        self.assertEqual(stats["unpacked"], stats["offloaded"], stats)
        self.assertEqual(seen["tiers"], ["host"] * stats["offloaded"])
        self.assertEqual(seen["status"],
                         [("host", False)] * stats["offloaded"])
        # autograd dropped the saved tensors after backward: buffers freed
        self.assertEqual(self.offloader.pending(), 0)
        self.assertEqual(stats["freed"], stats["offloaded"])
        self.assertEqual(self.client.buffers, [])

    def test_buffers_parked_and_reused_next_step(self):
        ref_loss, ref_grads = self.run_mlp(mlp())
        self.run_mlp(mlp(), {"min_bytes": MiB})
        first = self.offloader.stats["offloaded_bytes"]
        parked = sum(c.parked_bytes for c in self.mine())
        self.assertGreaterEqual(parked, first, "freed acquired: parked")
        loss, g = self.run_mlp(mlp(), {"min_bytes": MiB})
        self.assertTrue(torch.equal(loss, ref_loss))
        assert_same(self, g, ref_grads, "gradient")
        self.assertEqual(sum(c.parked_bytes for c in self.mine()), parked)

    def test_buffers_freed_once_their_copies_end(self):
        # On a GPU a retired buffer's copy may still run: it waits, and is
        # freed by a later call once its event is done (sim's are at once).
        ref_loss, ref_grads = self.run_mlp(mlp())

        class SlowEvents:
            def __init__(self, ops, n):
                self.ops, self.left = ops, n

            def __getattr__(self, name):
                return getattr(self.ops, name)

            def done(self, event):
                if self.left > 0:
                    self.left -= 1
                    return False
                return self.ops.done(event)

        def after_forward(o):
            o.ops = SlowEvents(o.ops, 3)
        self.after_forward = after_forward
        loss, g = self.run_mlp(mlp(), {"min_bytes": MiB, "slab_bytes": 0})
        self.assertTrue(torch.equal(loss, ref_loss))
        assert_same(self, g, ref_grads, "gradient")
        self.assertEqual(self.offloader.ops.left, 0, "no event was pending")
        self.offloader._free_retired()
        stats = self.offloader.stats
        self.assertEqual(stats["freed"], stats["offloaded"], stats)
        self.assertEqual(self.offloader.pending(), 0)

    def test_slabs_in_pack_order_the_last_stays(self):
        """Tensors are packed into slabs in pack order (2 MiB slabs: two
        of the 1 MiB activations each); the full slabs are paged out, the
        one open as the forward pass ends stays in VRAM, released (the
        backward pass wants it first); the backward pass acquires each
        slab once, newest first, and frees them all."""
        ref_loss, ref_grads = self.run_mlp(mlp())
        spy = Spy(self)
        seen = {}

        def after_forward(o):
            self.client.wait(timeout=10)
            slabs = [s for s in o._slabs if s is not None]
            seen["ids"] = [s.buf.id for s in slabs]
            seen["tiers"] = [s.buf.tier for s in slabs]
            seen["fill"] = [s.used for s in slabs]
            status = self.client.status("buffers")
            seen["acquired"] = [b.acquired for b in status.buffers
                                if b.buffer_id in seen["ids"]]
            spy.calls.clear()
        self.after_forward = after_forward
        loss, g = self.run_mlp(mlp(), {"min_bytes": MiB,
                                       "slab_bytes": 2 * MiB})
        self.assertTrue(torch.equal(loss, ref_loss), "loss differs")
        assert_same(self, g, ref_grads, "gradient")
        stats = self.offloader.stats
        self.assertEqual(stats["offloaded"], 4, stats)
        self.assertEqual(stats["buffers"], 2, stats)
        self.assertEqual(seen["fill"], [2 * MiB, 2 * MiB])
        self.assertEqual(seen["tiers"], ["host", "vram"])
        self.assertEqual(seen["acquired"], [False, False])
        self.assertEqual(spy.ids("acquire"), seen["ids"][::-1])
        self.assertEqual(stats["unpacked"], 4, stats)
        self.assertEqual(self.offloader.pending(), 0)
        self.assertEqual(stats["freed"], 2, stats)
        self.assertEqual(self.client.buffers, [])

    def test_tail_learned_kept_next_pass(self):
        """The first pass pages out every full slab; at its end the pool
        has room to spare, so the next pass keeps its last slabs in VRAM
        (here both) and pages out none."""
        ref_loss, ref_grads = self.run_mlp(mlp())
        seen = []

        def after_forward(o):
            self.client.wait(timeout=10)
            seen.append([s.buf.tier for s in o._slabs if s is not None])
        self.after_forward = after_forward
        for _ in range(2):
            loss, g = self.run_mlp(mlp(), {"min_bytes": MiB,
                                           "slab_bytes": 2 * MiB})
            self.assertTrue(torch.equal(loss, ref_loss), "loss differs")
            assert_same(self, g, ref_grads, "gradient")
        self.assertEqual(seen, [["host", "vram"], ["vram", "vram"]])
        o = self.offloader
        self.assertEqual(o.stats["tail_kept"], 1, o.stats)
        self.assertEqual((o.tail["slabs"], o.tail["keep"]), (2, 1), o.tail)
        # paged out again once the pool has no room to spare: the pass
        # after a pass that found less than TAIL_MARGIN slabs free
        hog = self.client.alloc(256 * MiB - 3 * MiB)
        self.run_mlp(mlp(), {"min_bytes": MiB, "slab_bytes": 2 * MiB})
        self.assertEqual(self.offloader.tail["keep"], 0,
                         self.offloader.tail)
        hog.free()
        self.run_mlp(mlp(), {"min_bytes": MiB, "slab_bytes": 2 * MiB})
        self.assertEqual(seen[-1], ["host", "vram"])

    def test_slab_size_bounded_by_the_pool(self):
        """A slab is at most 1/SLAB_SHARE of the VRAM pool (256 MiB here):
        the default 256 MiB slab would never fit a small pool."""
        self.run_mlp(mlp(), {"min_bytes": MiB})
        o = self.offloader
        self.assertEqual(o._slab_size(0), 256 * MiB // offload.SLAB_SHARE)
        self.assertEqual(o.stats["buffers"], 1, o.stats)
        self.assertEqual(self.client.buffers, [])

    def test_forward_that_fails_releases_its_slab(self):
        model = mlp()
        with self.assertRaises(RuntimeError):
            with gt.offload_activations(min_bytes=MiB,
                                        client=self.client) as o:
                model(self.x).square().mean()
                raise RuntimeError("a failing forward")
        self.assertEqual(o._open, {})
        status = self.client.status("buffers")
        self.assertFalse(any(b.acquired for b in status.buffers))
        import gc
        gc.collect()
        o.finish()
        self.assertEqual(self.client.buffers, [])

    def test_retain_graph_backward_twice(self):
        model = mlp()
        ref = mlp()
        (ref(self.x).square().mean() * 2).backward()
        with gt.offload_activations(min_bytes=MiB, client=self.client) as o:
            loss = model(self.x).square().mean()
        loss.backward(retain_graph=True)
        loss.backward()
        assert_same(self, grads(model), grads(ref), "gradient")
        self.assertEqual(o.stats["unpacked"], 2 * o.stats["offloaded"])

    def test_backward_acquires_in_reverse_prefetched_first(self):
        spy = Spy(self)
        packed = {}

        def after_forward(o):
            packed["ids"] = [r().buf.id for r in o._saved]
            spy.calls.clear()
        self.after_forward = after_forward
        self.run_mlp(mlp(), {"min_bytes": MiB, "lead": 2 * MiB,
                             "slab_bytes": 0})
        acquires = spy.ids("acquire")
        self.assertEqual(acquires, packed["ids"][::-1])
        prefetched = spy.ids("prefetch")
        # all but the last packed are prefetched, each before its acquire
        self.assertEqual(sorted(prefetched), sorted(packed["ids"][:-1]))
        for buf_id in prefetched:
            self.assertLess(spy.calls.index(("prefetch", buf_id)),
                            spy.calls.index(("acquire", buf_id)))
        # the lead bounds how far ahead: at most 2 MiB (two tensors) beyond
        # the one being acquired when each acquire is made
        for n, (name, buf_id) in enumerate(spy.calls):
            if name != "acquire":
                continue
            done = set(spy.ids("acquire")[:acquires.index(buf_id) + 1])
            ahead = {i for m, i in spy.calls[:n] if m == "prefetch"} - done
            self.assertLessEqual(len(ahead), 2, spy.calls[:n + 1])

    def test_calls_sent_without_waiting_one_flush(self):
        spy = Spy(self)
        flushes = []
        original = self.client.flush
        self.client.flush = lambda *a: flushes.append(a) or original(*a)
        self.addCleanup(delattr, self.client, "flush")
        ref_loss, ref_grads = self.run_mlp(mlp())
        loss, g = self.run_mlp(mlp(), {"min_bytes": MiB, "slab_bytes": 0})
        self.assertTrue(torch.equal(loss, ref_loss))
        assert_same(self, g, ref_grads, "gradient")
        self.assertEqual(len(flushes), 1)       # as the block ended
        self.assertEqual(set(n for n, _ in spy.calls if n != "acquire"),
                         {"release_after", "pageout", "prefetch"})
        self.assertEqual([c for c in spy.calls if c[0] != "acquire"],
                         spy.nowait)
        self.client.flush()                     # the backward's prefetches

    def test_small_tensors_and_weights_stay(self):
        ref_loss, ref_grads = self.run_mlp(mlp())
        loss, g = self.run_mlp(mlp(), {"min_bytes": 64 * MiB})
        self.assertTrue(torch.equal(loss, ref_loss))
        assert_same(self, g, ref_grads, "gradient")
        stats = self.offloader.stats
        self.assertEqual(stats["offloaded"], 0, stats)
        self.assertEqual(stats["kept"], stats["packed"])
        self.assertEqual(self.client.buffers, [])
        # with a tiny threshold still no weight is copied: the second and
        # third linear layers' weights are saved (as views, for the input
        # gradient; the first's is not: x needs none) and stay
        self.run_mlp(mlp(), {"min_bytes": 1})
        stats = self.offloader.stats
        self.assertGreater(stats["offloaded"], 0)
        self.assertEqual(stats["kept"], 2, stats)

    def test_weights_and_their_copies_are_weights(self):
        from gpumem.offload import _is_weight
        w = torch.nn.Linear(8, 8).weight
        half = w.to(torch.bfloat16)         # what autocast saves
        x = torch.randn(4, 8)
        self.assertTrue(_is_weight(w))
        self.assertTrue(_is_weight(w.t()))
        self.assertTrue(_is_weight(half))
        self.assertTrue(_is_weight(half.t()))
        self.assertFalse(_is_weight(x))
        self.assertFalse(_is_weight(x @ w.t()))
        self.assertFalse(_is_weight((x @ w.t()).to(torch.bfloat16)))

    def test_transformer_bit_identical(self):
        def run(offload):
            torch.manual_seed(0)
            layer = torch.nn.TransformerEncoderLayer(
                64, 4, 256, dropout=0.0, batch_first=True)
            model = torch.nn.TransformerEncoder(layer, 2)
            torch.manual_seed(2)
            x = torch.randn(8, 64, 64)
            if offload:
                with gt.offload_activations(min_bytes=64 << 10,
                                            client=self.client) as o:
                    loss = model(x).square().mean()
                self.assertGreater(o.stats["offloaded"], 4, o.stats)
            else:
                loss = model(x).square().mean()
            loss.backward()
            return loss.detach(), grads(model)
        ref_loss, ref_grads = run(False)
        loss, g = run(True)
        self.assertTrue(torch.equal(loss, ref_loss))
        assert_same(self, g, ref_grads, "gradient")
        self.assertEqual(self.client.buffers, [])

    def test_bad_arguments(self):
        with self.assertRaises(ValueError):
            with gt.offload_activations(min_bytes=0, client=self.client):
                pass


@unittest.skipIf(torch is None, "torch not installed")
class HostFull(DaemonTest):
    # room on host for two of the 1 MiB activations
    CONFIG = CONFIG + "[pools]\nhost_limit = 2M\nhost_stock = 0\n"

    def test_pageout_refused_keeps_going(self):
        x, ref, model = mlp_with_reference()
        with gt.offload_activations(min_bytes=MiB, slab_bytes=0,
                                    client=self.client) as o:
            loss = model(x).square().mean()
        self.assertGreater(o.stats["pageouts_refused"], 0, o.stats)
        loss.backward()
        assert_same(self, grads(model), grads(ref), "gradient")


@unittest.skipIf(torch is None, "torch not installed")
class NoRoom(DaemonTest):
    CONFIG = CONFIG

    def test_kept_when_this_process_holds_the_room(self):
        """The VRAM held by the same process (as PyTorch's cache on
        gpu-memd is): every saved tensor stays where it is, after one
        short wait, instead of waiting for ever (offload._alloc)."""
        x, ref, model = mlp_with_reference()
        hog = self.client.alloc(256 * MiB)          # the whole pool, held
        t0 = time.monotonic()
        with gt.offload_activations(min_bytes=MiB, client=self.client) as o:
            loss = model(x).square().mean()
        took = time.monotonic() - t0
        loss.backward()
        assert_same(self, grads(model), grads(ref), "gradient")
        self.assertEqual(o.stats["offloaded"], 0, o.stats)
        self.assertGreater(o.stats["kept_no_room"], 1, o.stats)
        # one wait of ROOM_WAIT (no cache to give back on sim), short
        # ones for the tensors after it
        self.assertLess(took, _torchdev.ROOM_WAIT + 10 * offload.STARVED_WAIT
                        + 1.0, o.stats)
        hog.free()
        # room again: the next pass offloads
        with gt.offload_activations(min_bytes=MiB, client=self.client) as o:
            model(x).square().mean().backward()
        self.assertGreater(o.stats["offloaded"], 0, o.stats)


    def test_state_buffer_takes_the_room_of_the_cache(self):
        """A buffer that replaces PyTorch tensors (stream()'s optimizer
        state) waits ROOM_WAIT, then, with no other process holding VRAM,
        has PyTorch give back its unused cache (here: an ops whose
        release_cached frees what holds the pool, as empty_cache frees
        this process's segments) and gets the room
        (_torchdev.alloc_making_room); without that room it times out,
        and TooLarge is raised at once."""
        hog = self.client.alloc(256 * MiB)          # the whole pool, held
        released = []

        class Ops(_torchdev.HostOps):
            def release_cached(self):
                released.append(time.monotonic())
                if not hog.freed:
                    hog.free()
                return True

        ops = Ops(self.client)
        t0 = time.monotonic()
        buf = _torchdev.alloc_making_room(self.client, 64 * MiB, 0,
                                          gpumem.SWAPPABLE, 30, ops)
        self.assertEqual(len(released), 1)
        self.assertGreaterEqual(released[0] - t0,
                                _torchdev.ROOM_WAIT - 0.05)
        self.assertLess(time.monotonic() - t0, _torchdev.ROOM_WAIT + 5)
        hog = self.client.alloc(192 * MiB)          # the rest, held again
        with self.assertRaises(gpumem.errors.TimedOut):
            _torchdev.alloc_making_room(self.client, 64 * MiB, 0,
                                        gpumem.SWAPPABLE, 1.5,
                                        _torchdev.HostOps(self.client))
        with self.assertRaises(gpumem.errors.TooLarge):
            _torchdev.alloc_making_room(self.client, 1 << 40, 0,
                                        gpumem.SWAPPABLE, 30, ops)
        self.assertEqual(len(released), 1)
        buf.free()
        hog.free()

    HOLDER = (
        "import sys, gpumem\n"
        "c = gpumem.Client(name='other')\n"
        "b = c.alloc(int(sys.argv[1]))\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n")

    WAITER = (
        "import sys, gpumem\n"
        "c = gpumem.Client(name='waiter')\n"
        "print('asking', flush=True)\n"
        "b = c.alloc(int(sys.argv[1]), timeout=30)\n"
        "print('served', flush=True)\n"
        "sys.stdin.read()\n")

    def test_others_wait(self):
        """_torchdev.others_wait, which idle() asks before it gives
        PyTorch's cache back: no, until another process's allocation
        waits for room this process holds; no again once it is served."""
        self.assertFalse(_torchdev.others_wait(self.client))
        hog = self.client.alloc(192 * MiB)
        child = spawn_python(self.daemon, self.WAITER, str(128 * MiB))
        self.addCleanup(reap, child)
        self.assertEqual(child.stdout.readline().strip(), "asking")
        wait_until(lambda: _torchdev.others_wait(self.client),
                   what="the other process waiting")
        hog.free()
        self.assertEqual(child.stdout.readline().strip(), "served")
        self.assertFalse(_torchdev.others_wait(self.client))

    def test_state_buffer_waits_while_others_hold_vram(self):
        """With another process holding VRAM (another training job on the
        same budget), the cache is kept and the buffer waits for that
        process instead: giving the cache away mid-step let the other job
        take it, and each waited for the other (bench_cotenancy)."""
        child = spawn_python(self.daemon, self.HOLDER, str(64 * MiB))
        self.addCleanup(reap, child)
        self.assertEqual(child.stdout.readline().strip(), "held")
        self.assertTrue(_torchdev.others_hold_vram(self.client))
        hog = self.client.alloc(192 * MiB)          # the rest of the pool
        released = []

        class Ops(_torchdev.HostOps):
            def release_cached(self):
                released.append(True)
                return True

        with self.assertRaises(gpumem.errors.TimedOut):
            _torchdev.alloc_making_room(self.client, 64 * MiB, 0,
                                        gpumem.SWAPPABLE, 1.5,
                                        Ops(self.client))
        self.assertEqual(released, [])
        child.stdin.close()
        child.wait(timeout=10)
        wait_until(lambda: not _torchdev.others_hold_vram(self.client),
                   what="the other process's VRAM freed")
        hog.free()


class LendWait(unittest.TestCase):
    """The thresholds of _torchdev.acquire_making_room, with a buffer that
    scripts the daemon's answers: a plain wait of LEND_WAIT, then a wait
    that lends (after a quiesce) up to ROOM_WAIT, then PyTorch's cache
    given back and the rest lent. bench_cotenancy's first tokens waited
    ~1.1 s when the loan came only after a plain ROOM_WAIT."""

    class Buf:
        def __init__(self, answers):
            self.answers = list(answers)    # True: served, False: timed out
            self.calls = []

        def acquire(self, timeout, read_only=False, lend=False):
            self.calls.append((timeout, lend))
            if not self.answers.pop(0):
                raise gpumem.errors.TimedOut(-errno.ETIMEDOUT,
                                              "gmd_acquire: timed out")

    class Ops:
        def __init__(self, log):
            self.log = log

        @staticmethod
        def daemon_device(index):
            return index

        def quiesce(self):
            self.log.append("quiesce")

        def release_cached(self):
            self.log.append("release_cached")
            return True

    def run_acquire(self, answers, timeout):
        log = []
        buf = self.Buf(answers)
        try:
            released = _torchdev.acquire_making_room(buf, timeout,
                                                     self.Ops(log))
        except gpumem.errors.TimedOut:
            released = "timed out"
        return buf.calls, log, released

    def test_lends_before_the_cache_is_given_back(self):
        lw, rw = _torchdev.LEND_WAIT, _torchdev.ROOM_WAIT
        self.assertLess(lw, rw)
        calls, log, released = self.run_acquire([False, True], 30)
        self.assertEqual([c[1] for c in calls], [False, True])
        self.assertAlmostEqual(calls[0][0], lw)
        self.assertAlmostEqual(calls[1][0], rw - lw)
        self.assertEqual((log, released), (["quiesce"], False))

    def test_cache_given_back_after_room_wait(self):
        lw, rw = _torchdev.LEND_WAIT, _torchdev.ROOM_WAIT
        calls, log, released = self.run_acquire([False, False, True], 30)
        self.assertEqual([c[1] for c in calls], [False, True, True])
        self.assertAlmostEqual(calls[2][0], 30 - rw)
        self.assertEqual(log, ["quiesce", "release_cached", "quiesce"])
        self.assertTrue(released)
        # for ever stays for ever after the first two parts
        calls, _, _ = self.run_acquire([False, False, True], None)
        self.assertEqual([c[0] for c in calls], [lw, rw - lw, None])

    def test_short_timeout(self):
        """A timeout under LEND_WAIT is one plain wait then one lending
        wait of nothing; one under ROOM_WAIT never waits past it."""
        calls, _, released = self.run_acquire([False, False], 0.01)
        self.assertEqual(released, "timed out")
        self.assertEqual([c[1] for c in calls], [False, True])
        self.assertAlmostEqual(calls[0][0], 0.01)
        self.assertAlmostEqual(calls[1][0], 0.0)
        calls, _, _ = self.run_acquire([False, False, False], 0.5)
        self.assertAlmostEqual(sum(c[0] for c in calls), 0.5)


class AllocLends(unittest.TestCase):
    """_torchdev.alloc_or_none (offload's slabs) against a client that
    scripts the daemon's answers: each ask waits LEND_WAIT plainly, then
    lends (YIELD, after a quiesce) for the rest of its wait; the second
    ask comes after PyTorch's cache was given back. A plain wait of the
    forward pass kept 2.7 GiB from the job whose memory slice it was
    (H100, 2026-11-26)."""

    class Client:
        def __init__(self, answers):
            self.answers = list(answers)    # True: served, False: timed out
            self.calls = []

        def alloc(self, nbytes, device=0, flags=0, timeout=None):
            self.calls.append((timeout, bool(flags & gpumem.YIELD)))
            answer = self.answers.pop(0)
            if answer == "too large":
                raise gpumem.errors.TooLarge(-errno.E2BIG, "gmd_alloc: too large")
            if not answer:
                raise gpumem.errors.TimedOut(-errno.ETIMEDOUT,
                                              "gmd_alloc: timed out")
            return "buffer"

    def run_alloc(self, answers, wait, released=True):
        log = []
        ops = LendWait.Ops(log)
        if not released:
            ops.release_cached = lambda: log.append("release_cached")
        client = self.Client(answers)
        buf = _torchdev.alloc_or_none(client, 1 << 20, 0, gpumem.SWAPPABLE,
                                      ops, wait)
        return client.calls, log, buf

    def test_lends_after_lend_wait(self):
        lw = _torchdev.LEND_WAIT
        calls, log, buf = self.run_alloc([False, True], 1.0)
        self.assertEqual(buf, "buffer")
        self.assertEqual([c[1] for c in calls], [False, True])
        self.assertAlmostEqual(calls[0][0], lw)
        self.assertAlmostEqual(calls[1][0], 1.0 - lw)
        self.assertEqual(log, ["quiesce"])

    def test_second_ask_after_the_cache(self):
        calls, log, buf = self.run_alloc([False, False, False, True], 1.0)
        self.assertEqual(buf, "buffer")
        self.assertEqual([c[1] for c in calls], [False, True, False, True])
        self.assertEqual(log, ["quiesce", "release_cached", "quiesce"])
        # nothing given back: no second ask
        calls, log, buf = self.run_alloc([False, False], 1.0, released=False)
        self.assertIsNone(buf)
        self.assertEqual(len(calls), 2)

    def test_short_wait_and_too_large(self):
        """A wait of LEND_WAIT or less never lends; a request larger than
        the pool is None at once."""
        calls, log, buf = self.run_alloc([False, False],
                                         _torchdev.LEND_WAIT)
        self.assertIsNone(buf)
        self.assertEqual([c[1] for c in calls], [False, False])
        self.assertNotIn("quiesce", log)
        calls, log, buf = self.run_alloc(["too large"], 1.0)
        self.assertIsNone(buf)
        self.assertEqual((len(calls), log), (1, []))


class MakingRoomLends(unittest.TestCase):
    """_torchdev.alloc_making_room (stream()'s blocks and optimizer state)
    against a scripted client: a plain LEND_WAIT, then every wait lends,
    also the one after PyTorch's cache went back. A plain wait there held
    a training job's 1.7 GiB while an inference job, waiting plainly in
    stream()'s set-up, held 2.3 GiB: nobody was served for 20 s (H100,
    2026-11-26)."""

    def run_alloc(self, answers, timeout, others):
        log = []
        client = AllocLends.Client(answers)
        with mock.patch.object(_torchdev, "others_hold_vram",
                               lambda c: others):
            try:
                buf = _torchdev.alloc_making_room(
                    client, 1 << 20, 0, gpumem.SWAPPABLE, timeout,
                    LendWait.Ops(log))
            except gpumem.errors.TimedOut:
                buf = "timed out"
        return client.calls, log, buf

    def test_alone_lends_then_gives_the_cache_back(self):
        lw, rw = _torchdev.LEND_WAIT, _torchdev.ROOM_WAIT
        calls, log, buf = self.run_alloc([False, False, True], 30, False)
        self.assertEqual(buf, "buffer")
        self.assertEqual([c[1] for c in calls], [False, True, True])
        self.assertEqual([c[0] for c in calls][:2], [lw, rw - lw])
        self.assertAlmostEqual(calls[2][0], 30 - rw)
        self.assertEqual(log, ["quiesce", "release_cached", "quiesce"])
        calls, log, buf = self.run_alloc([False, False, False], 30, False)
        self.assertEqual(buf, "timed out")

    def test_others_lend_and_keep_the_cache(self):
        lw = _torchdev.LEND_WAIT
        calls, log, buf = self.run_alloc([False, True], 30, True)
        self.assertEqual(buf, "buffer")
        self.assertEqual([c[1] for c in calls], [False, True])
        self.assertAlmostEqual(calls[1][0], 30 - lw)
        self.assertEqual(log, ["quiesce"])


@unittest.skipIf(torch is None, "torch not installed")
class Stream(DaemonTest):
    CONFIG = CONFIG

    def setUp(self):
        super().setUp()
        torch.manual_seed(3)
        self.tokens = torch.randint(0, 64, (16, 32))

    def block_bytes(self):
        # 128x256 + 256 + 256x128 + 128 floats, at 256-byte offsets
        return (128 * 256 + 256 + 256 * 128 + 128) * 4

    def test_inference_bit_identical_and_streamed_on_host(self):
        ref = Layers()
        with torch.no_grad():
            expected = ref(self.tokens)
        model = copy.deepcopy(ref)
        rest = sum(p.numel() * 4 for n, p in model.named_parameters()
                   if not n.startswith("layers."))
        # room for the rest, two running/prefetched blocks and one resident
        s = gt.stream(model, budget=rest + 3 * self.block_bytes(), lead=1,
                      client=self.client, pageout=True)
        self.assertEqual([b.resident for b in s.blocks],
                         [True, False, False, False])
        moved = []
        for _ in range(3):
            with torch.no_grad():
                out = model(self.tokens)
            self.assertTrue(torch.equal(out, expected))
            self.client.wait(timeout=10)
            moved.append(next((p.bytes_out, p.bytes_in) for p in
                              self.client.status("pools").pools
                              if p.tier == "vram"))
            # the streamed blocks paged out after use, but the first two:
            # the last block prefetched them for the next pass (lead 1,
            # and one more: none is held between passes)
            self.assertEqual([b.buf.tier for b in s.blocks],
                             ["vram", "vram", "vram", "host"])
            status = {b.buffer_id: (b.tier, b.acquired) for b in
                      self.client.status("buffers").buffers}
            self.assertEqual([status[b.buf.id] for b in s.blocks],
                             [("vram", True), ("vram", False),
                              ("vram", False), ("host", False)])
            self.assertEqual(status[s.rest.buf.id], ("vram", True))
        # read-only passes: after the first, the pageouts copy nothing
        # (the host copies were kept); the swap-ins still copy in
        self.assertEqual(moved[2][0], moved[1][0], moved)
        self.assertGreater(moved[2][1], moved[1][1], moved)
        self.assertEqual(s.stats["acquires"], 3 * 3)
        self.assertEqual(s.stats["releases"], 3 * 3 + 3)  # + at setup
        self.assertGreater(s.stats["prefetches"], 0)
        s.remove()
        self.assertEqual(self.client.buffers, [])
        with torch.no_grad():
            self.assertTrue(torch.equal(model(self.tokens), expected))

    def test_training_bit_identical(self):
        self.check_training(hf=False)

    def test_training_bit_identical_transformers_style(self):
        self.check_training(hf=True)

    def check_training(self, hf):
        def train(streamed):
            model = Layers(hf=hf)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            if streamed:
                s = gt.stream(model, opt, client=self.client, pageout=True)
                stream_every_block(s)
                self.streamer = s
            losses = []
            for _ in range(3):
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(
                    model(self.tokens).flatten(0, 1), self.tokens.flatten())
                loss.backward()
                opt.step()
                losses.append(loss.detach())
                if streamed:
                    self.client.wait(timeout=10)
                    self.assertEqual([b.buf.tier for b in s.blocks],
                                     ["host"] * 4)
                    # AdamW's exp_avg and exp_avg_sq moved into a buffer
                    # per block, streamed with it
                    self.assertEqual([b.state.buf.tier for b in s.blocks],
                                     ["host"] * 4)
                    for b in s.blocks:
                        lo, hi = b.state.buf.ptr, b.state.buf.ptr + \
                            b.state.buf.size
                        for p, _ in b.params:
                            for key in ("exp_avg", "exp_avg_sq"):
                                ptr = opt.state[p][key].data_ptr()
                                self.assertTrue(lo <= ptr < hi, key)
            if streamed:
                s.remove()      # acquires every block: weights readable
                self.assertEqual(self.client.buffers, [])
            weights = [p.detach().clone() for p in model.parameters()]
            return losses, weights
        ref_losses, ref_weights = train(False)
        losses, weights = train(True)
        assert_same(self, losses, ref_losses, "loss")
        assert_same(self, weights, ref_weights, "weight")
        stats = self.streamer.stats
        self.assertGreaterEqual(stats["backward_acquires"], 3 * 4, stats)
        # each block is released as soon as its backward is over (its
        # input's gradient is there), not only when the pass ends
        self.assertEqual(stats["backward_releases"], 3 * 4, stats)

    def test_default_pageout_inference_only(self):
        # pageout=None: a streamed block is paged out after a forward that
        # records no gradient, and left to the daemon when training.
        ref = Layers()
        model = copy.deepcopy(ref)
        rest = sum(p.numel() * 4 for n, p in model.named_parameters()
                   if not n.startswith("layers."))
        s = gt.stream(model, budget=rest + 3 * self.block_bytes(), lead=1,
                      client=self.client)
        with torch.no_grad():
            expected = ref(self.tokens)
            self.assertTrue(torch.equal(model(self.tokens), expected))
        streamed = sum(not b.resident for b in s.blocks)
        self.assertEqual(s.stats["pageouts"], streamed, s.stats)
        model(self.tokens).sum().backward()
        self.assertEqual(s.stats["pageouts"], streamed,
                         "training pages nothing out by default")
        s.remove()

    def test_order_learned(self):
        model = Layers(order=(2, 0, 3, 1))
        s = gt.stream(model, client=self.client)
        self.assertEqual([b.name for b in s.order],
                         ["layers.0", "layers.1", "layers.2", "layers.3"])
        with torch.no_grad():
            model(self.tokens)
        self.assertEqual([b.name for b in s.order],
                         ["layers.2", "layers.0", "layers.3", "layers.1"])

    def test_forward_prefetches_the_next_block_first(self):
        model = Layers(order=(3, 1, 0, 2))
        s = gt.stream(model, client=self.client, pageout=True, lead=1)
        stream_every_block(s)
        with torch.no_grad():
            model(self.tokens)              # learns the order
        self.client.wait(timeout=10)
        spy = Spy(self)
        with torch.no_grad():
            model(self.tokens)
        ids = [s.blocks[i].buf.id for i in (3, 1, 0, 2)]
        # in inference the first block is acquired; the lease of each next
        # one is asked for (acquire_start) while the block before it runs,
        # before that block's release, and finished at its own pre-hook
        self.assertEqual(spy.ids("acquire"), ids[:1])
        self.assertEqual(spy.ids("acquire_start"), ids[1:])
        self.assertEqual(spy.ids("acquire_finish"), ids[1:])
        for before, buf_id in zip(ids, ids[1:]):
            self.assertLess(spy.calls.index(("acquire_start", buf_id)),
                            spy.calls.index(("release_after", before)))
            self.assertGreater(spy.calls.index(("acquire_finish", buf_id)),
                               spy.calls.index(("release_after", before)))
        self.assertEqual(s.stats["acquires_ahead"], 3)   # none while learning
        # in inference each block, once released and paged out, prefetches
        # the lead + 1 blocks after it (none is held until the next
        # acquire), the last ones the next pass's first; a block is sent
        # once (the pass's first block's pre-hook sends its next again)
        self.assertEqual(spy.ids("prefetch"), ids[1:] + ids[:2])
        for before, buf_id in zip(ids[1:], ids[2:] + ids[:1]):
            # two ahead: sent before the lease of the block before it
            self.assertLess(spy.calls.index(("prefetch", buf_id)),
                            spy.calls.index(("acquire_finish", before)))
        self.assertEqual(spy.ids("release_after"), ids)
        # the next pass: its first block is not acquired before its own
        # prefetch (sent during the last pass) and nothing waits on it
        spy.calls.clear()
        with torch.no_grad():
            model(self.tokens)
        self.assertEqual(spy.ids("acquire"), ids[:1])
        self.assertEqual(spy.ids("acquire_finish"), ids[1:])
        # recording gradients (training): no prefetch past the last block
        spy.calls.clear()
        model(self.tokens).sum().backward()
        self.assertNotIn(("prefetch", ids[0]),
                         spy.calls[:spy.calls.index(("acquire", ids[-1])) + 1])

    def test_budget_too_small(self):
        with self.assertRaises(ValueError) as e:
            gt.stream(Layers(), budget="64K", client=self.client)
        self.assertIn("budget", str(e.exception))
        self.assertIn("lead=1", str(e.exception))


@unittest.skipIf(torch is None, "torch not installed")
class StreamNoWait(DaemonTest):
    """The hooks' release_after, pageout and prefetch go without waiting
    for the daemon's answers; a flush at the start of each pass (the first
    block of the learned order) and in remove() hears them."""
    CONFIG = CONFIG

    def setUp(self):
        super().setUp()
        torch.manual_seed(3)
        self.tokens = torch.randint(0, 64, (16, 32))

    def count_flushes(self):
        calls = []
        original = self.client.flush

        def flush(*args, **kwargs):
            calls.append(args)
            return original(*args, **kwargs)
        self.client.flush = flush
        self.addCleanup(delattr, self.client, "flush")
        return calls

    def test_hooks_do_not_wait_and_flush_once_a_pass(self):
        tokens, ref, expected = layers_with_expected()
        model = Layers(order=(3, 1, 0, 2))
        s = gt.stream(model, client=self.client, pageout=True, lead=1)
        stream_every_block(s)
        flushes = self.count_flushes()
        spy = Spy(self)
        for i in range(3):
            with torch.no_grad():
                model(tokens)
            self.assertEqual(len(flushes), i + 1)
        # every hook call but the acquires went without waiting; the
        # acquires after a pass's first block are started a block ahead
        # (a send) and finished at their block
        leases = ("acquire", "acquire_start", "acquire_finish")
        self.assertEqual(set(n for n, _ in spy.calls if n not in leases),
                         {"release_after", "pageout", "prefetch"})
        self.assertEqual([c for c in spy.calls if c[0] not in leases],
                         spy.nowait)
        self.assertEqual(len(spy.ids("acquire_start")),
                         len(spy.ids("acquire_finish")))
        self.assertGreater(len(spy.ids("acquire_start")), 0)
        self.client.wait(timeout=10)
        # paged out after use; blocks 3 and 1, first of the learned order,
        # are back already: the last pass's last block prefetched them
        self.assertEqual([b.buf.tier for b in s.blocks],
                         ["host", "vram", "host", "vram"])
        s.remove()
        self.assertEqual(len(flushes), 4)
        self.assertEqual(s.stats["pageouts_refused"], 0)

    def test_busy_prefetch_ignored(self):
        """A prefetch refused because its buffer was acquired first (an
        offload sharing the client prefetches its saved tensors without
        waiting while autograd's thread acquires them) is a hint missed,
        not an error: the streamer's flush, which hears the client's every
        answer, counts it."""
        tokens, ref, expected = layers_with_expected()
        model = copy.deepcopy(ref)
        s = gt.stream(model, client=self.client, pageout=False, lead=1)
        stream_every_block(s)
        other = self.client.alloc(MiB)          # acquired
        other.prefetch(wait=False)              # refused: GMD_EBUSY
        with torch.no_grad():
            self.assertTrue(torch.equal(model(tokens), expected))
            self.assertTrue(torch.equal(model(tokens), expected))
        self.assertEqual(s.stats["prefetches_busy"], 1, s.stats)
        other.free()
        s.remove()

    def test_other_refusal_raises_at_the_next_pass(self):
        tokens, ref, expected = layers_with_expected()
        model = copy.deepcopy(ref)
        s = gt.stream(model, client=self.client, pageout=False, lead=1)
        stream_every_block(s)
        # the streamer believes block 1 held; the daemon has it released,
        # so the hook's release of it is refused (GMD_EBUSY)
        s.blocks[1].held = True
        with torch.no_grad():
            self.assertTrue(torch.equal(model(tokens), expected))
            with self.assertRaises(gpumem.Busy) as cm:
                model(tokens)
            self.assertIn("gmd_release_after_nowait", str(cm.exception))
            self.assertIn(f"buffer {s.blocks[1].buf.id}", str(cm.exception))
            self.assertTrue(torch.equal(model(tokens), expected))
        s.remove()


@unittest.skipIf(torch is None, "torch not installed")
class StreamHostFull(DaemonTest):
    # a host pool of 2 MiB, filled by another buffer: every pageout of a
    # block is refused (GMD_ENOMEM)
    CONFIG = CONFIG + "[pools]\nhost_limit = 2M\nhost_stock = 0\n"

    def test_refused_pageouts_counted_at_the_next_pass(self):
        filler = self.client.alloc(2 * MiB)
        filler.release()
        filler.pageout()
        filler.wait(timeout=10)
        self.assertEqual(filler.tier, "host")
        tokens, ref, expected = layers_with_expected()
        model = copy.deepcopy(ref)
        s = gt.stream(model, client=self.client, pageout=True, lead=1)
        stream_every_block(s)           # four pageouts sent, refused
        self.assertEqual(s.stats["pageouts"], 4)
        self.assertEqual(s.stats["pageouts_refused"], 0)   # not heard yet
        with torch.no_grad():
            for i in range(2):
                self.assertTrue(torch.equal(model(tokens), expected))
                # heard at the start of the pass: one per flush
                self.assertEqual(s.stats["pageouts_refused"], i + 1)
                self.assertEqual(s.stats["pageouts"], 4 * (i + 2))
        self.client.wait(timeout=10)
        self.assertEqual([b.buf.tier for b in s.blocks], ["vram"] * 4)
        s.remove()
        self.assertEqual(s.stats["pageouts_refused"], 3)
        filler.free()
        self.assertEqual(self.client.buffers, [])
        with torch.no_grad():
            self.assertTrue(torch.equal(model(tokens), expected))


@unittest.skipIf(torch is None, "torch not installed")
class Idle(DaemonTest):
    CONFIG = CONFIG

    def test_idle_pages_out_and_back(self):
        tokens, model, expected = layers_with_expected()
        s = gt.stream(model, client=self.client)     # all resident
        bufs = [s.rest.buf] + [b.buf for b in s.blocks]
        with gt.idle() as members:
            self.assertIn(s, members)
            self.client.wait(timeout=10)
            self.assertEqual([b.tier for b in bufs], ["host"] * 5)
            status = {b.buffer_id: (b.tier, b.acquired) for b in
                      self.client.status("buffers").buffers}
            self.assertEqual([status[b.id] for b in bufs],
                             [("host", False)] * 5)
        self.assertEqual([b.tier for b in bufs], ["vram"] * 5)
        self.assertTrue(all(b.resident for b in s.blocks))
        with torch.no_grad():
            self.assertTrue(torch.equal(model(tokens), expected))

    def test_idle_without_pageout_releases_only(self):
        tokens, model, expected = layers_with_expected()
        s = gt.stream(model, client=self.client)     # all resident
        bufs = [s.rest.buf] + [b.buf for b in s.blocks]
        pageouts = s.stats["pageouts"]
        with gt.idle(pageout=False):
            self.client.wait(timeout=10)
            status = {b.buffer_id: (b.tier, b.acquired) for b in
                      self.client.status("buffers").buffers}
            self.assertEqual([status[b.id] for b in bufs],
                             [("vram", False)] * 5)
        self.assertEqual(s.stats["pageouts"], pageouts)
        status = {b.buffer_id: (b.tier, b.acquired) for b in
                  self.client.status("buffers").buffers}
        self.assertEqual([status[b.id] for b in bufs], [("vram", True)] * 5)
        with torch.no_grad():
            self.assertTrue(torch.equal(model(tokens), expected))
        # Released only, they go when another client needs the room, and
        # come back on exit, bytes intact.
        other = gpumem.Client(self.daemon.socket, name="other")
        try:
            with gt.idle(pageout=False):
                vram = [p for p in other.status().pools
                        if p.tier == "vram"][0]
                room = other.alloc(vram.capacity, timeout=10)   # all of it
                self.client.wait(timeout=10)
                self.assertEqual([b.tier for b in bufs], ["host"] * 5)
                room.free()
            self.assertEqual([b.tier for b in bufs], ["vram"] * 5)
        finally:
            other.close()
        with torch.no_grad():
            self.assertTrue(torch.equal(model(tokens), expected))

    def test_idle_with_optimizer_state(self):
        torch.manual_seed(3)
        tokens = torch.randint(0, 64, (16, 32))
        ref, model = Layers(), Layers()
        ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        s = gt.stream(model, opt, client=self.client)   # all resident

        def step(m, o):
            o.zero_grad()
            m(tokens).square().mean().backward()
            o.step()
        for _ in range(2):
            step(ref, ref_opt)
            step(model, opt)
            with gt.idle():
                self.client.wait(timeout=10)
                parts = [b.state for b in s.blocks] + [s.rest.state]
                self.assertEqual([p.buf.tier for p in parts], ["host"] * 5)
        step(ref, ref_opt)
        step(model, opt)
        s.remove()
        assert_same(self, list(model.parameters()), list(ref.parameters()),
                    "weight")


    def between_steps_run(self, between_steps, evict):
        """Three AdamW steps of a resident-only stream against the plain
        model; after each step `evict` pages out what was released."""
        torch.manual_seed(3)
        tokens = torch.randint(0, 64, (16, 32))
        ref, model = Layers(), Layers()
        model.load_state_dict(ref.state_dict())
        ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        s = gt.stream(model, opt, client=self.client,
                      between_steps=between_steps)   # all resident

        def step(m, o):
            o.zero_grad()
            m(tokens).square().mean().backward()
            o.step()
        acquired = []
        for _ in range(3):
            step(ref, ref_opt)
            step(model, opt)
            status = {b.buffer_id: b.acquired for b in
                      self.client.status("buffers").buffers}
            weights = [s.rest] + s.blocks
            states = [b.state for b in weights]
            acquired.append(([status[b.buf.id] for b in weights],
                             [status[x.buf.id] for x in states]))
            if evict:
                for x in weights + states:
                    if not status[x.buf.id]:
                        x.buf.pageout()
                self.client.wait(timeout=10)
        # released weights ("all") are not mapped on the host tier: a
        # forward pass acquires them before they are read
        with torch.no_grad():
            assert_same(self, [model(tokens)], [ref(tokens)], "output")
        assert_same(self, list(model.parameters()), list(ref.parameters()),
                    "weight")
        return s, opt, ref_opt, acquired

    def test_between_steps_state_released(self):
        s, opt, ref_opt, acquired = self.between_steps_run("state", True)
        # weights held, the optimizer state released after every step
        self.assertEqual(acquired, [([True] * 5, [False] * 5)] * 3)
        # paged out between steps, it came back for the next one
        self.assertTrue(all(b.state.buf.tier == "host"
                            for b in [s.rest] + s.blocks))
        # state_dict: the state, read with its blocks acquired, as copies
        sd, ref_sd = opt.state_dict(), ref_opt.state_dict()
        for i, ref_state in ref_sd["state"].items():
            for key in ("exp_avg", "exp_avg_sq"):
                self.assertTrue(torch.equal(sd["state"][i][key],
                                            ref_state[key]), (i, key))
        copies = [t.data_ptr() for st in sd["state"].values()
                  for t in st.values() if t.numel() > 1]
        self.assertEqual(len(copies), 2 * len(ref_sd["state"]))
        for b in [s.rest] + s.blocks:
            lo, hi = b.state.buf.ptr, b.state.buf.ptr + b.state.buf.size
            self.assertFalse([c for c in copies if lo <= c < hi])
            for p, key, _ in b.state.items:
                self.assertTrue(lo <= opt.state[p][key].data_ptr() < hi)
        status = {b.buffer_id: b.acquired for b in
                  self.client.status("buffers").buffers}
        self.assertFalse(any(status[b.state.buf.id]
                             for b in [s.rest] + s.blocks))
        s.remove()
        self.assertIs(type(opt).state_dict, type(opt).state_dict)
        self.assertNotIn("state_dict", vars(opt))

    def test_between_steps_all_released(self):
        s, _, _, acquired = self.between_steps_run("all", True)
        self.assertEqual(acquired, [([False] * 5, [False] * 5)] * 3)
        s.remove()

    def test_between_steps_none(self):
        s, _, _, acquired = self.between_steps_run("none", False)
        self.assertEqual(acquired, [([True] * 5, [True] * 5)] * 3)
        s.remove()
        with self.assertRaises(ValueError):
            gt.stream(Layers(), client=self.client, between_steps="some")

if __name__ == "__main__":
    unittest.main()
