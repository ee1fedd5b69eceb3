"""test_fit — gpumem.torch.fit and its planner.
  Planner   (no torch, no daemon) everything that fits is kept; a plan
            frees what the room needs; offloads go to the early blocks
            when the link hides them and not when it does not, nor when
            a block is larger than the daemon's room for it; never
            predicted dearer than checkpointing, over random profiles;
            recompute only when offload is off; a room too short says so;
            the link simulation's waits on hand-checked cases
  Fit       training with dropout and AdamW under fit on the sim backend
            (CPU tensors over sim buffers): losses and every parameter
            bit-identical to plain training for every mode forced on every
            block, and for the planned mix at a budget of half the
            activations, which offloads and recomputes; the profiling pass
            measures what each block saves; remove() restores the model;
            each plan is reported to the daemon (status shows its sums
            and the planner "fit"; remove() takes it back), and a bad
            planner name is refused before it is sent;
            by default a layer is planned by its parts (attention, MLP),
            in the order the forward pass runs them, and a planned mix of
            them trains bit-identically
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
            held = sum(b.saved_bytes if m == KEEP else
                       b.input_bytes if m == RECOMPUTE else 0
                       for b, m in zip(bs, plan.modes))
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
        # 100 MiB at 1 GB/s: 105 ms a block against 10 ms of recompute
        plan = planner.make_plan(blocks(8), 500 * MiB, 1e9, 1e9)
        self.assertEqual(plan.count(RECOMPUTE), 4, plan.summary())
        self.assertEqual(plan.count(OFFLOAD), 0, plan.summary())
        self.assertAlmostEqual(plan.cost_s, 0.04)

    def test_offload_most(self):
        # blocks larger than the daemon's room for one coming back are
        # recomputed instead
        plan = planner.make_plan(blocks(8), 500 * MiB, 50e9, 50e9,
                                 offload_most=50 * MiB)
        self.assertEqual(plan.count(OFFLOAD), 0)
        plan = planner.make_plan(blocks(8), 500 * MiB, 50e9, 50e9,
                                 offload_most=100 * MiB)
        self.assertGreater(plan.count(OFFLOAD), 0)

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
                self.assertGreater(fitter.offloader.stats["offloaded"], 0)
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
        fitter = gt.fit(model, client=self.client)
        self.assertEqual(len(fitter.blocks), 12)
        train(model, steps=3, fitter=fitter)
        names = [p.name for p in fitter.profiles()]
        self.assertEqual(names[:2], ["layers.0.attn", "layers.0.mlp"])
        self.assertEqual(len(fitter.plan.modes), 12)
        fitter.remove()
        self.assertEqual(len(gt.fit(Net(), client=self.client).blocks), 12)

    def test_units_planned_bit_identical(self):
        ref_losses, ref_params = train(Net(Reversed))
        model = Net(Reversed)
        probe = gt.fit(model, client=self.client)
        train(model, steps=2, fitter=probe)
        total = sum(p.saved_bytes for p in probe.profiles())
        probe.remove()
        model = Net(Reversed)
        fitter = gt.fit(model, client=self.client, budget=total // 3)
        losses, params = train(model, fitter=fitter)
        self.assertNotEqual(fitter.plan.count(KEEP), 12,
                            fitter.plan.summary())
        for a, b in zip(losses + params, ref_losses + ref_params):
            self.assertTrue(torch.equal(a, b), fitter.plan.summary())
        fitter.remove()

    def test_no_daemon_means_no_offload(self):
        model = Net()
        fitter = gt.fit(model, client=self.client, offload=False)
        self.assertIsNone(fitter.offloader)
        fitter.remove()

    def test_bad_budget(self):
        with self.assertRaises(ValueError):
            gt.fit(Net(), budget=0, client=self.client)


if torch is not None:
    import gpumem.torch as gt


if __name__ == "__main__":
    unittest.main()
