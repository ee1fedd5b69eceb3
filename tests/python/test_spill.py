"""test_spill — gpumem.torch.spill and the prefetch lead planned from the
link, against the real gpu-memd on the sim backend (CPU tensors over
host-memory buffers, Debian's torch 1.13):
  Spill     outputs bit-identical to the plain model, all in VRAM when
            the pool has room; with a small VRAM pool the first buffers in
            VRAM and the rest (embedding tables last) on the host tier,
            acquired, as the daemon's status shows; with a budget, what is
            beyond it on host though the pool has room; idle() pages out
            and brings back; remove() gives plain tensors back; no room
            anywhere raises the daemon's sentence with what was placed,
            the model put back as it was
  Lead      lead.units_ahead is max(1, ceil(t_copy / t_compute)), bounded;
            the daemon's link (its [sim] copy_rate) read from status; a
            stream()'s lead planned from it and the first pass's block
            times at the start of the second pass and used by its
            prefetches, bounded by the budget beside the resident blocks,
            results unchanged; an explicit lead kept; offload_activations'
            lead planned at the first unpack; without a link, the fixed
            defaults
Skips with one SKIP: line where torch is missing.
"""
import copy
import math
import unittest

import gpumem
from gpumem import lead as glead
from gmd_daemon import MiB, DaemonTest, skip_line
from gmd_torch import (CONFIG, Layers, Spy, gt, layers_with_expected, mlp,
                       mlp_with_reference, stream_every_block, torch)

if torch is None:
    skip_line("test_spill", "torch not installed (Debian: python3-torch): "
              "spill and lead planning not tested")

KiB = 1 << 10
# Layers(): each block two Linear layers of 128 KiB + 1 KiB and 128 KiB +
# 0.5 KiB; with chunk=256K each Linear gets a buffer (192 KiB: whole 64 KiB
# granules), the head (33 KiB) and the embedding table (32 KiB, last)
# joining the last.
CHUNK = 256 * KiB


def status_of(client, bufs):
    """{buffer id: (tier, acquired, flags)} from the daemon's status."""
    ids = {b.id for b in bufs}
    return {b.buffer_id: (b.tier, b.acquired, b.flags)
            for b in client.status("buffers").buffers if b.buffer_id in ids}


@unittest.skipIf(torch is None, "torch not installed")
class Spill(DaemonTest):
    CONFIG = CONFIG

    def setUp(self):
        super().setUp()
        self.tokens, self.ref, self.expected = layers_with_expected()

    def run_model(self, model):
        with torch.no_grad():
            return model(self.tokens)

    def check_held_where_placed(self, s):
        bufs = [p.buf for p in s.parts]
        seen = status_of(self.client, bufs)
        for part in s.parts:
            self.assertEqual(seen[part.buf.id],
                             (part.tier, True, gpumem.SPILLABLE), part)
            self.assertEqual(part.buf.tier, part.tier)

    def test_all_in_vram_bit_identical(self):
        model = copy.deepcopy(self.ref)
        s = gt.spill(model, client=self.client)
        self.assertTrue(all(p.tier == "vram" for p in s.parts))
        self.assertEqual(s.placement()["host"], 0)
        self.assertEqual(s.stats["host_bytes"], 0)
        # every parameter is a view of a buffer
        ptrs = [(p.buf.ptr, p.buf.ptr + p.buf.size) for p in s.parts]
        for name, param in model.named_parameters():
            self.assertTrue(any(lo <= param.data_ptr() < hi
                                for lo, hi in ptrs), name)
        for _ in range(2):
            self.assertTrue(torch.equal(self.run_model(model),
                                        self.expected))
        self.check_held_where_placed(s)
        s.remove()
        self.assertEqual(self.client.buffers, [])
        self.assertTrue(torch.equal(self.run_model(model), self.expected))

    def test_budget_puts_the_rest_on_host(self):
        model = copy.deepcopy(self.ref)
        s = gt.spill(model, budget=600 * KiB, chunk=CHUNK, client=self.client)
        tiers = [p.tier for p in s.parts]
        self.assertIn("vram", tiers)
        self.assertIn("host", tiers)
        # VRAM first, in the model's order: no VRAM part after a host one
        self.assertEqual(tiers, sorted(tiers, key=lambda t: t != "vram"))
        placed = s.placement()
        self.assertLessEqual(placed["vram"], 600 * KiB)
        self.assertEqual(placed, {"vram": s.stats["vram_bytes"],
                                  "host": s.stats["host_bytes"]})
        self.assertEqual(s.stats["host_by_budget_bytes"], placed["host"])
        self.assertTrue(all(p.by_budget for p in s.parts
                            if p.tier == "host"))
        self.check_held_where_placed(s)
        # the pool had room: the daemon's VRAM holds the budget, and the
        # VRAM the parts paged out passed through, kept by the daemon for
        # whoever needs it next
        vram = [p for p in self.client.status("pools").pools
                if p.tier == "vram"][0]
        self.assertEqual(vram.used - vram.kept, placed["vram"])
        for _ in range(2):
            self.assertTrue(torch.equal(self.run_model(model),
                                        self.expected))
        s.remove()
        self.assertEqual(self.client.buffers, [])

    def test_bad_arguments(self):
        model = copy.deepcopy(self.ref)
        with self.assertRaises(gpumem.InvalidArgument):
            gt.spill(model, budget="lots", client=self.client)
        with self.assertRaises(ValueError):
            gt.spill(model, chunk=0, client=self.client)
        self.assertEqual(self.client.buffers, [])


@unittest.skipIf(torch is None, "torch not installed")
class SpillSmallPool(DaemonTest):
    # room for two 256 KiB buffers in VRAM
    CONFIG = "[sim]\nvram = 512K\ngranularity = 64K\n"

    def test_vram_first_then_host(self):
        tokens, ref, expected = layers_with_expected()
        model = copy.deepcopy(ref)
        s = gt.spill(model, chunk=CHUNK, client=self.client)
        tiers = [p.tier for p in s.parts]
        self.assertEqual(tiers[:2], ["vram", "vram"])
        self.assertEqual(set(tiers[2:]), {"host"})
        self.assertEqual(s.stats["host_by_budget_bytes"], 0)
        # the embedding table is placed last: on host memory
        last = s.parts[-1]
        self.assertIs(last.params[-1][0], model.embed.weight)
        self.assertEqual(last.tier, "host")
        status = status_of(self.client, [p.buf for p in s.parts])
        self.assertEqual(sorted(t for t, _, _ in status.values()),
                         sorted(tiers))
        self.assertTrue(all(acquired for _, acquired, _ in status.values()))
        for _ in range(2):
            with torch.no_grad():
                self.assertTrue(torch.equal(model(tokens), expected))
        # idle(): the VRAM ones paged out, back on exit
        vram = [p.buf for p in s.parts if p.tier == "vram"]
        with gt.idle() as members:
            self.assertIn(s, members)
            self.client.wait(timeout=10)
            self.assertEqual([b.tier for b in vram], ["host"] * len(vram))
            self.assertFalse(any(a for _, a, _ in
                                 status_of(self.client, vram).values()))
        self.assertEqual([b.tier for b in vram], ["vram"] * len(vram))
        with torch.no_grad():
            self.assertTrue(torch.equal(model(tokens), expected))
        s.remove()
        self.assertEqual(self.client.buffers, [])


@unittest.skipIf(torch is None, "torch not installed")
class SpillNoRoom(DaemonTest):
    # 512 KiB of VRAM, 2 MiB of host memory; the model is four layers of
    # 1 MiB + 2 KiB, a buffer each (1088 KiB in 64 KiB granules): none in
    # VRAM, one on host, no room for the second anywhere
    CONFIG = ("[sim]\nvram = 512K\ngranularity = 64K\n"
              "[pools]\nhost_limit = 2M\nhost_stock = 0\n")

    def test_error_says_why_and_puts_the_model_back(self):
        torch.manual_seed(3)
        model = torch.nn.Sequential(*[torch.nn.Linear(512, 512)
                                      for _ in range(4)])
        x = torch.randn(8, 512)
        with torch.no_grad():
            expected = model(x)
        names = [n for n, _ in model.named_parameters()]
        with self.assertRaises(gpumem.GpumemError) as e:
            gt.spill(model, chunk="1100K", client=self.client)
        text = str(e.exception)
        self.assertIn("gpumem.torch.spill: no room for 1.0 MiB of weights "
                      "(2 parameters from 1.weight) on device 0's VRAM or "
                      "on host memory: ", text)
        self.assertIn("host_limit", text)       # the daemon's sentence
        self.assertIn("nothing of the model stays spilled (placed so far: "
                      "0 B in VRAM, 1.1 MiB on host memory)", text)
        self.assertEqual(self.client.buffers, [])
        pools = self.client.status("pools").pools
        self.assertEqual([p.used for p in pools], [0, 0])
        # plain tensors again, the same values
        self.assertEqual(names, [n for n, _ in model.named_parameters()])
        for name, p in model.named_parameters():
            self.assertTrue(p.is_contiguous(), name)
        with torch.no_grad():
            self.assertTrue(torch.equal(model(x), expected))


class UnitsAhead(unittest.TestCase):
    @unittest.skipIf(torch is None, "torch not installed")
    def test_formula(self):
        # a 50 MB block over a 25 GB/s link: 2 ms; compute 1 ms: 2 ahead
        self.assertEqual(glead.units_ahead(50e6, 25e9, 1e-3), 2)
        self.assertEqual(glead.units_ahead(50e6, 25e9, 0.7e-3), 3)
        # compute covers the copy: 1
        self.assertEqual(glead.units_ahead(50e6, 25e9, 5e-3), 1)
        # bounded by what the budget leaves
        self.assertEqual(glead.units_ahead(50e6, 25e9, 0.1e-3, most=4), 4)
        # nothing known: no plan
        self.assertIsNone(glead.units_ahead(50e6, 0, 1e-3))
        self.assertIsNone(glead.units_ahead(50e6, 25e9, 0))


def two_passes(model):
    """Two inference passes over a small batch: the first learns the
    blocks' order and times, the second is where a lead is planned."""
    tokens = torch.randint(0, 64, (4, 8))
    with torch.no_grad():
        model(tokens)
        model(tokens)


def fixed_seconds(ops, secs):
    """Make `ops` (HostOps) time every stretch as `secs`."""
    ops.seconds = lambda start, end, wait=False: secs


@unittest.skipIf(torch is None, "torch not installed")
class Lead(DaemonTest):
    # the link: 100 MiB/s each way
    CONFIG = CONFIG + "copy_rate = 100M\n"
    RATE = 100 * MiB

    @staticmethod
    def sizes(model):
        """(the rest's bytes, one block's packed bytes)."""
        rest = sum(p.numel() * 4 for n, p in model.named_parameters()
                   if not n.startswith("layers."))
        block = sum((p.numel() * 4 + 255) // 256 * 256
                    for p in model.layers[0].parameters())
        return rest, block

    def test_link_from_status(self):
        self.assertEqual(glead.link_in(self.client, 0), self.RATE)

    def test_stream_lead_planned(self):
        tokens, ref, expected = layers_with_expected()
        model = copy.deepcopy(ref)
        s = gt.stream(model, client=self.client, pageout=True)
        stream_every_block(s)
        self.assertTrue(s.lead_planned)
        self.assertEqual(s.lead, 1)
        # a block's copy: 257.5 KiB at 100 MiB/s, 2.5 ms; compute 1 ms:
        # 3 ahead
        fixed_seconds(s.ops, 1e-3)
        with torch.no_grad():
            self.assertTrue(torch.equal(model(tokens), expected))
        self.assertIsNone(s.plan)           # planned at the next pass
        self.client.wait(timeout=10)
        spy = Spy(self)
        with torch.no_grad():
            self.assertTrue(torch.equal(model(tokens), expected))
        _, block = self.sizes(model)
        self.assertEqual(math.ceil(block / self.RATE / 1e-3), 3)
        self.assertEqual(s.plan, {
            "link_bytes_per_s_in": self.RATE, "block_bytes": block,
            "compute_s": 1e-3, "copy_s": block / self.RATE, "wanted": 3,
            "lead": 3, "planned": True})
        self.assertEqual(s.lead, 3)
        # the first block's pre-hook prefetched the three after it
        ids = [b.buf.id for b in s.order]
        first = spy.calls.index(("acquire", ids[0]))
        self.assertEqual(spy.calls[first + 1:first + 4],
                         [("prefetch", i) for i in ids[1:4]])
        s.remove()
        self.assertEqual(self.client.buffers, [])

    def test_stream_lead_bounded_by_budget(self):
        tokens, ref, expected = layers_with_expected()
        model = copy.deepcopy(ref)
        rest, block = self.sizes(model)
        # room for the rest, two blocks in flight (lead 1) and one resident
        s = gt.stream(model, budget=rest + 3 * block + block // 2,
                      client=self.client, pageout=True)
        self.assertEqual([b.resident for b in s.blocks],
                         [True, False, False, False])
        fixed_seconds(s.ops, 1e-3)          # 3 ahead wanted
        for _ in range(3):
            with torch.no_grad():
                self.assertTrue(torch.equal(model(tokens), expected))
        # the resident block stays; the budget leaves room for lead 1
        self.assertEqual(s.plan["wanted"], 3)
        self.assertEqual(s.plan["lead"], 1)
        self.assertEqual(s.lead, 1)
        self.assertEqual([b.resident for b in s.blocks],
                         [True, False, False, False])
        s.remove()

    def test_explicit_lead_kept(self):
        model = Layers()
        s = gt.stream(model, lead=2, client=self.client)
        self.assertFalse(s.lead_planned)
        two_passes(model)
        self.assertEqual(s.lead, 2)
        self.assertIsNone(s.plan)
        self.assertIsNone(s.blocks[0].marks)
        with self.assertRaises(ValueError):
            gt.stream(Layers(), lead=0, client=self.client)
        s.remove()

    def test_offload_lead_planned_at_first_unpack(self):
        from gpumem.offload import LEAD
        x, ref, model = mlp_with_reference()
        with gt.offload_activations(min_bytes=MiB, slab_bytes=0,
                                    client=self.client) as o:
            fixed_seconds(o.ops, 4e-3)
            loss = model(x).square().mean()
        n = o.stats["offloaded"]
        self.assertGreaterEqual(n, 3)
        self.assertIsNone(o.plan)
        self.assertEqual(o.lead, LEAD)      # until planned
        loss.backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            self.assertTrue(torch.equal(p.grad, q.grad))
        # the largest tensor: 1 MiB, copied in 10 ms at 100 MiB/s; the
        # forward's 4 ms over n - 1 tensors between
        compute = 4e-3 / (n - 1)
        ahead = math.ceil(MiB / self.RATE / compute)
        self.assertEqual(o.plan["buffer_bytes"], MiB)
        self.assertEqual(o.plan["compute_s"], compute)
        self.assertEqual(o.plan["lead"], ahead * MiB)
        self.assertEqual(o.lead, ahead * MiB)
        # given: kept
        with gt.offload_activations(min_bytes=MiB, lead=3 * MiB,
                                    client=self.client) as o:
            loss = mlp()(x).square().mean()
        loss.backward()
        self.assertEqual(o.lead, 3 * MiB)
        self.assertIsNone(o.plan)


@unittest.skipIf(torch is None, "torch not installed")
class LeadUnknown(DaemonTest):
    CONFIG = CONFIG                     # copies unthrottled: no link

    def test_fixed_defaults_without_a_link(self):
        from gpumem.offload import LEAD
        self.assertEqual(glead.link_in(self.client, 0), 0)
        model = Layers()
        s = gt.stream(model, client=self.client)
        two_passes(model)
        self.assertEqual(s.lead, 1)
        self.assertFalse(s.plan["planned"])
        self.assertIsNone(s.plan["copy_s"])
        s.remove()
        torch.manual_seed(1)
        with gt.offload_activations(min_bytes=MiB, client=self.client) as o:
            loss = mlp()(torch.randn(512, 128)).square().mean()
        loss.backward()
        self.assertEqual(o.lead, LEAD)
        self.assertFalse(o.plan["planned"])


if __name__ == "__main__":
    unittest.main()
