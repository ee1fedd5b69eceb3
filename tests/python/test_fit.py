"""test_fit — gpumem.torch.fit and its planner.
  Planner   (no torch, no daemon) everything that fits is kept; a plan
            frees what the room needs; offloads go to the early blocks
            when the link hides them and not when it does not; never
            predicted dearer than checkpointing, over random profiles;
            recompute only when offload is off; a room too short says so;
            the link simulation's waits on hand-checked cases (the
            stash's order: one block ahead, after its own copy out)
  Stash     (torch, CPU) saved tensors into slabs and back, byte for byte;
            small, non-contiguous and other-device tensors left as they
            are; a second pass reuses the first pass's slabs; a tensor
            larger than a slab gets one of its own; host slabs from the
            daemon's pool (SPILLABLE buffers on the host tier) and, with
            no daemon, of the process's own
  Fit       training with dropout and AdamW under fit on the sim backend
            (CPU tensors over sim buffers): losses and every parameter
            bit-identical to plain training for every mode forced on every
            block, and for the planned mix at a budget of half the
            activations, which offloads and recomputes; the profiling pass
            measures what each block saves; remove() restores the model;
            each plan is reported to the daemon (status shows its sums
            and the planner "fit"; remove() takes it back), and a bad
            planner name is refused before it is sent;
            by default a layer is one block; units_of(parts=True) plans
            its parts (attention, MLP) in the order the forward pass runs
            them, and a planned mix of them trains bit-identically; offload=False plans keep and
            recompute only; a bad offload= is refused with what to pass
Skips the Fit cases with one SKIP: line where torch is missing.
"""
import os
import random
import unittest

import gpumem
from gpumem import planner
from gpumem.planner import KEEP, OFFLOAD, RECOMPUTE, BlockProfile

from gmd_daemon import MiB, DaemonTest, skip_line
from gmd_torch import CONFIG, torch

if torch is None:
    skip_line("test_fit", "torch not installed (Debian: python3-torch): "
              "fit's runtime not tested")


def blocks(n, saved=100 * MiB, inputs=10 * MiB, forward_s=0.01):
    return [BlockProfile(f"b{i}", saved, inputs, forward_s)
            for i in range(n)]


class Planner(unittest.TestCase):
    def test_everything_fits(self):
        plan = planner.make_plan(blocks(4), 400 * MiB, 10e9, 10e9)
        self.assertEqual(plan.modes, [KEEP] * 4)
        self.assertEqual(plan.cost_s, 0)
        self.assertEqual(plan.kept_bytes, 400 * MiB)

    def test_frees_what_is_needed(self):
        bs = blocks(8)
        for room in (700 * MiB, 400 * MiB, 100 * MiB):
            plan = planner.make_plan(bs, room, 5e9, 5e9)
            held = planner.held_bytes(bs, plan.modes, 5e9)
            self.assertEqual(held, plan.held_bytes)
            self.assertLessEqual(held, room, plan.summary())

    def test_fast_link_offloads_early_blocks(self):
        # 100 MiB at 50 GB/s: 2 ms a block against 10 ms of compute
        plan = planner.make_plan(blocks(8), 500 * MiB, 50e9, 50e9)
        self.assertIn(OFFLOAD, plan.modes)
        self.assertNotIn(RECOMPUTE, plan.modes)
        first = plan.modes.index(OFFLOAD)
        self.assertLess(first, 3, plan.modes)
        self.assertEqual(plan.modes[-1], KEEP, "the last block's bytes are "
                         "wanted first in the backward pass")
        self.assertLess(plan.cost_s, 0.001)

    def test_slow_link_recomputes(self):
        # 100 MiB at 1 GB/s: 105 ms a block each way against 10 ms of
        # recompute; a copy back asked for one block ahead (20 ms of
        # backward) is not hidden
        plan = planner.make_plan(blocks(8), 500 * MiB, 1e9, 1e9)
        self.assertEqual(plan.count(RECOMPUTE), 4, plan.summary())
        self.assertEqual(plan.count(OFFLOAD), 0, plan.summary())
        self.assertAlmostEqual(plan.cost_s, 0.04)

    def test_copies_out_not_over_are_held(self):
        # 100 MiB a block at 5 GB/s: 21 ms a copy against 10 ms of forward;
        # when the forward pass ends the copies of the later offloaded
        # blocks are still going and their bytes still in VRAM
        bs = blocks(4, inputs=0)
        everything = planner.held_bytes(bs, [OFFLOAD] * 4, 5e9)
        self.assertGreater(everything, 200 * MiB)
        self.assertLess(everything, 400 * MiB)
        # however fast the link, the last block's copy starts as the
        # forward pass ends: its bytes are there at the peak all the same
        fast = planner.held_bytes(bs, [OFFLOAD] * 3 + [KEEP], 1e15)
        self.assertEqual(fast, 100 * MiB)
        self.assertAlmostEqual(planner.held_bytes(bs, [OFFLOAD] * 4, 1e15),
                               100 * MiB, delta=1)
        for room in (0, 100 * MiB, 200 * MiB):
            plan = planner.make_plan(bs, room, 5e9, 5e9)
            self.assertLessEqual(plan.held_bytes, room, plan.summary())
            self.assertEqual(plan.held_bytes,
                             planner.held_bytes(bs, plan.modes, 5e9))
        self.assertIn(RECOMPUTE, planner.make_plan(bs, 0, 5e9, 5e9).modes)

    def test_timing_plan(self):
        plan = planner.timing_plan(blocks(3), 0)
        self.assertEqual(plan.modes, [RECOMPUTE] * 3)
        self.assertIn("timing", plan.reason)

    def test_offload_off(self):
        plan = planner.make_plan(blocks(8), 500 * MiB, 50e9, 50e9,
                                 offload=False)
        self.assertEqual(plan.count(OFFLOAD), 0)
        self.assertEqual(plan.count(RECOMPUTE), 4)

    def test_never_dearer_than_checkpointing(self):
        rng = random.Random(7)
        for _ in range(200):
            n = rng.randint(1, 12)
            bs = [BlockProfile(f"b{i}", rng.randint(1, 400) * MiB,
                               rng.randint(0, 20) * MiB,
                               rng.uniform(0.001, 0.05)) for i in range(n)]
            total = sum(b.saved_bytes for b in bs)
            inputs = sum(b.input_bytes for b in bs)
            room = rng.randint(inputs, total)
            rate = rng.choice((0, 1e9, 10e9, 50e9))
            plan = planner.make_plan(bs, room, rate, rate)
            self.assertLessEqual(plan.cost_s, plan.checkpoint_s + 1e-12,
                                 plan.summary())
            held = sum(b.saved_bytes if m == KEEP else
                       b.input_bytes if m == RECOMPUTE else 0
                       for b, m in zip(bs, plan.modes))
            self.assertLessEqual(held, room, plan.summary())

    def test_short_room(self):
        plan = planner.make_plan(blocks(4), 0, 0, 0, offload=False)
        self.assertEqual(plan.modes, [RECOMPUTE] * 4)
        self.assertIn("short", plan.reason)

    def test_link_simulation(self):
        bs = blocks(2, saved=1000, forward_s=1.0)
        # 1000 bytes at 1000 B/s: block 0's copy out (1 s) runs behind
        # block 1's forward; back, it runs behind block 1's backward (2 s)
        self.assertEqual(planner.simulate_link(bs, {0}, 1000, 1000), 0.0)
        # block 1's copy out is left when the forward ends (1 s), and back
        # it is wanted first (1 s)
        self.assertEqual(planner.simulate_link(bs, {1}, 1000, 1000), 2.0)
        # at 250 B/s block 0 takes 4 s each way: 3 s past the forward,
        # 2 s past block 1's backward
        self.assertEqual(planner.simulate_link(bs, {0}, 250, 250), 5.0)
        # three blocks, the first two offloaded at 1000 B/s: block 1 is
        # asked for as block 2's backward starts (3 s; its copy out is
        # over at 3 s) and is in at 4 s, within block 2's backward (3-5 s);
        # block 0 is asked for as block 1's starts (5 s), in at 6 s,
        # within block 1's (5-7 s): nothing waits
        bs = blocks(3, saved=1000, forward_s=1.0)
        self.assertEqual(planner.simulate_link(bs, {0, 1}, 1000, 1000), 0.0)
        # at 500 B/s: block 0 out 1-3 s, block 1 out 3-5 s; block 1 back
        # 5-7 s: block 1 waits 2 s after block 2's backward (3-5); block
        # 0, asked for at 5 s, back 7-9 s, block 1's backward 7-9 s: no
        # more waiting
        self.assertEqual(planner.simulate_link(bs, {0, 1}, 500, 500), 2.0)

    def test_summary_and_dict(self):
        plan = planner.make_plan(blocks(4), 200 * MiB, 50e9, 50e9)
        self.assertIn("offloaded", plan.summary())
        d = plan.to_dict()
        self.assertEqual(set(d["modes"]), {"b0", "b1", "b2", "b3"})
        self.assertEqual(d["kept_bytes"] + d["offloaded_bytes"] +
                         d["recomputed_bytes"], 400 * MiB)


class Block(torch.nn.Module if torch else object):
    """A transformer-like block: keyword arguments, dropout, a tuple out."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(128, 512)
        self.down = torch.nn.Linear(512, 128)
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, hidden, scale=1.0):
        inner = self.drop(torch.nn.functional.gelu(self.up(hidden)))
        return (hidden + self.down(inner) * scale,)


class Mlp(torch.nn.Module if torch else object):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(128, 512)
        self.down = torch.nn.Linear(512, 128)
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, hidden):
        return self.down(self.drop(torch.nn.functional.gelu(self.up(hidden))))


class Attn(torch.nn.Module if torch else object):
    """Self-attention's shape of memory: scores of seq x seq per head."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(128, 3 * 128)
        self.out = torch.nn.Linear(128, 128)
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, hidden):
        b, t, _ = hidden.shape
        q, k, v = self.qkv(hidden).view(b, t, 3, 4, 32).unbind(2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / 32 ** 0.5
        probs = self.drop(scores.softmax(-1))
        return self.out(torch.einsum("bhqk,bkhd->bqhd", probs, v)
                        .reshape(b, t, 128))


class Reversed(torch.nn.Module if torch else object):
    """A transformer layer that registers its MLP before its attention
    but runs the attention first."""

    def __init__(self):
        super().__init__()
        self.mlp = Mlp()
        self.attn = Attn()

    def forward(self, hidden, scale=1.0):
        hidden = hidden + self.attn(hidden)
        return (hidden + self.mlp(hidden) * scale,)


class Net(torch.nn.Module if torch else object):
    def __init__(self, layer=None):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(64, 128)
        self.layers = torch.nn.ModuleList((layer or Block)()
                                          for _ in range(6))
        self.head = torch.nn.Linear(128, 64)

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h, scale=0.5)[0]
        return self.head(h)


def train(model, steps=4, fitter_modes=None, fitter=None):
    """Losses and final parameters of `steps` AdamW steps; the fitter's
    modes forced to `fitter_modes` from the second step when given."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.manual_seed(5)
    data = [torch.randint(0, 64, (16, 32)) for _ in range(steps)]
    losses = []
    torch.manual_seed(11)
    for step, tokens in enumerate(data):
        if fitter is not None and fitter_modes is not None and step == 1:
            fitter._replan = lambda: None     # keep the forced modes
            fitter.modes = list(fitter_modes)
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), tokens.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().clone())
    return losses, [p.detach().clone() for p in model.parameters()]


@unittest.skipIf(torch is None, "torch not installed")
class Stash(DaemonTest):
    CONFIG = CONFIG

    def make(self, client, slab_bytes=4 * MiB):
        from gpumem import stash
        cpu = torch.device("cpu")
        return stash.Stash(cpu, stash.HostSlabs(cpu, client),
                           min_bytes=64 << 10, slab_bytes=slab_bytes)

    def round_trip(self, st, tensors):
        st.begin_pass()
        packed = [st.pack(t, b) for b, t in enumerate(tensors)]
        st.prefetch(len(tensors) - 1)
        back = [st.unpack(p) for p in reversed(packed)][::-1]
        return packed, back

    def check(self, client):
        st = self.make(client)
        g = torch.Generator().manual_seed(3)
        tensors = [torch.randn(256, 256, generator=g),          # 256 KiB
                   torch.randint(0, 9, (1 << 20,), dtype=torch.uint8,
                                 generator=g),                   # 1 MiB
                   torch.randn(3 << 20, generator=g).to(torch.bfloat16),
                   torch.randn(2, 3, generator=g),               # small
                   torch.randn(512, 512, generator=g).t(),       # strided
                   torch.randn(5 << 20, generator=g)]            # > slab
        packed, back = self.round_trip(st, tensors)
        # what came back is autograd's alone: the stash keeps no copy
        self.assertTrue(all(p.tensor is None for p in packed
                            if p is not None and hasattr(p, "taken")))
        for i, (t, p, b) in enumerate(zip(tensors, packed, back)):
            stashed = i not in (3, 4)
            self.assertEqual(p is not t, stashed, i)
            self.assertTrue(torch.equal(t, b), i)
            self.assertEqual((t.dtype, t.shape), (b.dtype, b.shape))
            if stashed:     # a copy, not the tensor kept
                self.assertNotEqual(b.data_ptr(), t.data_ptr())
        self.assertEqual(st.stats["tensors"], 4)
        slabs = st.stats["slabs"]
        self.assertGreaterEqual(slabs, 2)       # the 20 MiB one its own
        # a second pass, other values, same shapes: no new slab
        tensors = [t.clone().fill_(7) if t.is_floating_point() else t
                   for t in tensors]
        _, back = self.round_trip(st, tensors)
        for t, b in zip(tensors, back):
            self.assertTrue(torch.equal(t, b))
        self.assertEqual(st.stats["slabs"], slabs)
        st.reserve(20 * MiB)
        self.assertGreaterEqual(st.stats["slab_bytes"], 20 * MiB)
        made = st.stats["slabs"]
        st.reserve(20 * MiB)
        self.assertEqual(st.stats["slabs"], made)
        out, into = st.measure(1 << 20)
        self.assertGreater(out, 0)
        self.assertGreater(into, 0)
        return st

    def test_daemon_host_slabs(self):
        st = self.check(self.client)
        tiers = {b.tier for b in st.slabs.buffers}
        self.assertEqual(tiers, {"host"}, "slabs rest on host memory")
        mine = [b for b in self.client.status("buffers").buffers
                if b.tier == "host"]
        self.assertGreaterEqual(len(mine), len(st.slabs.buffers))
        st.close()
        self.assertEqual(st.slabs.buffers, [])

    def test_own_slabs(self):
        self.check(None).close()


@unittest.skipIf(torch is None, "torch not installed")
class Fit(DaemonTest):
    CONFIG = CONFIG

    @classmethod
    def setUpClass(cls):
        torch.use_deterministic_algorithms(True)
        cls.ref_losses, cls.ref_params = train(Net())

    def check_same(self, losses, params, what):
        for i, (a, b) in enumerate(zip(losses, self.ref_losses)):
            self.assertTrue(torch.equal(a, b), f"{what}: loss {i} differs")
        for i, (a, b) in enumerate(zip(params, self.ref_params)):
            self.assertTrue(torch.equal(a, b), f"{what}: parameter {i}")

    def test_every_mode_bit_identical(self):
        for mode in (KEEP, RECOMPUTE, OFFLOAD):
            model = Net()
            fitter = gt.fit(model, client=self.client,
                            blocks=list(model.layers))
            losses, params = train(model, fitter_modes=[mode] * 6,
                                   fitter=fitter)
            self.check_same(losses, params, mode)
            if mode == OFFLOAD:
                self.assertGreater(fitter.stash.stats["tensors"], 0)
                self.assertEqual(fitter.stash.stats["on_demand"] +
                                 fitter.stash.stats["prefetched"],
                                 fitter.stash.stats["tensors"])
            fitter.remove()

    def test_profile_and_planned_mix(self):
        model = Net()
        probe = gt.fit(model, client=self.client, blocks=list(model.layers))
        train(model, steps=2, fitter=probe)
        saved = [p.saved_bytes for p in probe.profiles()]
        probe.remove()
        # each block saves up's output (for gelu), gelu's (for dropout)
        # and dropout's (for down), 16 x 32 x 512 floats each, besides
        # its input and dropout's mask
        for s in saved:
            self.assertGreaterEqual(s, 3 * 16 * 32 * 512 * 4)
        model = Net()
        fitter = gt.fit(model, client=self.client, budget=sum(saved) // 2,
                        blocks=list(model.layers))
        losses, params = train(model, fitter=fitter)
        self.check_same(losses, params, "planned")
        plan = fitter.plan
        self.assertIsNotNone(plan)
        self.assertNotEqual(plan.count(KEEP), 6, plan.summary())
        held = sum(p.saved_bytes if m == KEEP else 0
                   for p, m in zip(fitter.profiles(), plan.modes))
        self.assertLessEqual(held, sum(saved) // 2)
        fitter.remove()
        self.assertNotIn("forward", vars(model.layers[0]))

    def test_plan_in_status(self):
        # each plan fit makes is reported: status shows this client's
        # kept, offloaded and recomputed bytes (the plan's sums) and the
        # planner's name; remove() takes the plan back
        model = Net()
        probe = gt.fit(model, client=self.client, blocks=list(model.layers))
        train(model, steps=2, fitter=probe)
        total = sum(p.saved_bytes for p in probe.profiles())
        probe.remove()
        model = Net()
        fitter = gt.fit(model, client=self.client, budget=total // 2,
                        blocks=list(model.layers))
        train(model, steps=3, fitter=fitter)
        plan = fitter.plan
        self.assertNotEqual(plan.count(KEEP), 6, plan.summary())
        modes = list(zip(fitter.profiles(), plan.modes))
        sums = {m: sum(p.saved_bytes for p, mode in modes if mode == m)
                for m in (KEEP, OFFLOAD, RECOMPUTE)}
        self.assertEqual(sums[KEEP], plan.kept_bytes)
        self.assertEqual(sums[OFFLOAD], plan.offloaded_bytes)
        self.assertEqual(sums[RECOMPUTE], plan.recomputed_bytes)

        def mine():
            found = [c for c in self.client.status("clients").clients
                     if c.pid == os.getpid() and c.planner]
            self.assertLessEqual(len(found), 1)
            return found[0] if found else None

        info = mine()
        self.assertIsNotNone(info, "no client of this process has a plan")
        self.assertEqual(info.planner, "fit")
        self.assertEqual(info.plan_kept_bytes, plan.kept_bytes)
        self.assertEqual(info.plan_offloaded_bytes, plan.offloaded_bytes)
        self.assertEqual(info.plan_recomputed_bytes, plan.recomputed_bytes)
        self.assertEqual(info.plan_streamed_bytes, 0)
        self.assertGreater(info.plan_offloaded_bytes +
                           info.plan_recomputed_bytes, 0)
        fitter.remove()
        self.assertIsNone(mine())

    def test_report_plan_refuses_bad_names(self):
        for name in ("x" * 33, "tab\there"):
            with self.assertRaises(gpumem.InvalidArgument):
                self.client.report_plan(name, kept=1)
        # refused before sending: the connection stays up
        self.client.report_plan("x" * 32, kept=1)
        self.client.report_plan("")
        self.client.status("clients")

    def test_units(self):
        # by default a layer with two or more children holding parameters
        # is planned child by child, in the order the forward pass runs
        # them (Reversed registers its MLP before its attention)
        model = Net(Reversed)
        self.assertEqual(len(gt.fit(Net(Reversed), client=self.client)
                             .blocks), 6)      # whole layers by default
        fitter = gt.fit(model, client=self.client,
                        blocks=units_of(model, parts=True))
        self.assertEqual(len(fitter.blocks), 12)
        train(model, steps=3, fitter=fitter)
        names = [p.name for p in fitter.profiles()]
        self.assertEqual(names[:2], ["layers.0.attn", "layers.0.mlp"])
        self.assertEqual(len(fitter.plan.modes), 12)
        fitter.remove()
        net = Net()
        self.assertEqual(len(gt.fit(net, client=self.client,
                                    blocks=units_of(net, parts=True))
                             .blocks), 12)

    def test_units_planned_bit_identical(self):
        ref_losses, ref_params = train(Net(Reversed))
        model = Net(Reversed)
        probe = gt.fit(model, client=self.client,
                       blocks=units_of(model, parts=True))
        train(model, steps=2, fitter=probe)
        total = sum(p.saved_bytes for p in probe.profiles())
        probe.remove()
        model = Net(Reversed)
        fitter = gt.fit(model, client=self.client, budget=total // 3,
                        blocks=units_of(model, parts=True))
        losses, params = train(model, fitter=fitter)
        self.assertNotEqual(fitter.plan.count(KEEP), 12,
                            fitter.plan.summary())
        for a, b in zip(losses + params, ref_losses + ref_params):
            self.assertTrue(torch.equal(a, b), fitter.plan.summary())
        fitter.remove()

    def test_gives_up_offloading_slower_than_recomputing(self):
        model = Net()
        fitter = gt.fit(model, client=self.client, blocks=list(model.layers))
        train(model, steps=3, fitter=fitter)
        fitter.stash.measure = lambda n: (1e15, 1e15)   # offloads look free
        fitter._link_rates = None
        total = sum(p.saved_bytes for p in fitter.profiles())
        fitter.budget = total // 2
        fitter._base = 0
        fitter.plan = None
        fitter._replan()
        self.assertGreater(fitter.plan.count(OFFLOAD), 0,
                           fitter.plan.summary())
        # its steps measured twice as long as recomputing every block
        fitter._recompute_s = 0.1
        for _ in range(3):
            fitter._step_over(0.2)
        self.assertIsNone(fitter.plan)
        fitter._replan()
        self.assertEqual(fitter.plan.count(OFFLOAD), 0, fitter.plan.summary())
        self.assertIn("offloading measured 200.0 ms", fitter.plan.reason)
        losses, params = train(model, steps=2, fitter=fitter)
        self.assertEqual(fitter.plan.count(OFFLOAD), 0)
        fitter.remove()

    def test_offload_off(self):
        model = Net()
        fitter = gt.fit(model, client=self.client, offload=False)
        self.assertIsNone(fitter.stash)
        fitter.remove()

    def test_bad_offload(self):
        for bad in ("peer", "cpu", "disk"):
            with self.assertRaises(ValueError) as e:
                gt.fit(Net(), client=self.client, offload=bad)
            self.assertIn("offload=", str(e.exception))

    def test_bad_budget(self):
        with self.assertRaises(ValueError):
            gt.fit(Net(), budget=0, client=self.client)


if torch is not None:
    import gpumem.torch as gt
    from gpumem.fit import units_of


if __name__ == "__main__":
    unittest.main()
