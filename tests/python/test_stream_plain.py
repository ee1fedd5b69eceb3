"""test_stream_plain — stream() as a plain script gets it, and the parts of
bench/torch/bench_stream_plain.py and examples/stream_generate.py that need
no GPU:
  LeadReplanned  a stream()'s lead, planned at the second pass while the
            daemon did not know its link yet (a daemon started a moment
            ago: its arena pinned, then the link measured), is planned at
            a later pass's start once the link is known, from the first
            pass's block times, and used by the prefetches; outputs
            bit-identical throughout (sim, Debian's torch 1.13)
  BenchPlain  the link's bound from a `gpu-memctl --json status` (the
            rate of device 0's VRAM pool, the bytes that must move a
            pass, the batch), the summary over canned process results
            (medians, tokens compared, stream's ratio to min(vram, bound)
            and to the peers, the target at batch 16 and above), the
            budget's parsing, the example's copy figures (this
            process's, not the daemon's since it started), and both
            scripts' --help without torch
The torch part skips without torch; the rest needs neither torch nor a
daemon.
"""
import copy
import os
import subprocess
import sys
import unittest
from unittest import mock

from gmd_daemon import DaemonTest, MiB
from gmd_torch import CONFIG, gt, layers_with_expected, stream_every_block, \
    torch

GiB = 1 << 30

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(
    __file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "torch"))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import bench_stream_plain as bench  # noqa: E402
import stream_generate  # noqa: E402


@unittest.skipIf(torch is None, "torch not installed")
class LeadReplanned(DaemonTest):
    CONFIG = CONFIG + "copy_rate = 100M\n"     # the link: 100 MiB/s
    RATE = 100 * MiB

    def test_planned_once_the_link_is_known(self):
        from gpumem import streaming
        tokens, ref, expected = layers_with_expected()
        model = copy.deepcopy(ref)
        s = gt.stream(model, client=self.client, pageout=True)
        stream_every_block(s)
        s.ops.seconds = lambda start, end, wait=False: 1e-3
        real = streaming._lead.link_in
        asked = []

        def unknown(client, device):
            asked.append(device)
            return 0
        with mock.patch.object(streaming._lead, "link_in", unknown):
            for _ in range(2):
                with torch.no_grad():
                    self.assertTrue(torch.equal(model(tokens), expected))
                self.client.wait(timeout=10)
        # planned at the second pass, without a link: the fixed lead
        self.assertTrue(asked)
        self.assertFalse(s.plan["planned"])
        self.assertEqual(s.plan["compute_s"], 1e-3)
        self.assertEqual(s.lead, 1)
        with mock.patch.object(streaming._lead, "link_in", real):
            for _ in range(2):
                with torch.no_grad():
                    self.assertTrue(torch.equal(model(tokens), expected))
                self.client.wait(timeout=10)
        # a block's copy 2.5 ms at 100 MiB/s against 1 ms of compute
        self.assertTrue(s.plan["planned"], s.plan)
        self.assertEqual(s.plan["link_bytes_per_s_in"], self.RATE)
        self.assertEqual(s.plan["wanted"], 3)
        self.assertEqual(s.lead, 3)
        self.assertGreaterEqual(s.stats["prefetches"], 3)
        s.remove()
        self.assertEqual(self.client.buffers, [])

    def test_not_asked_again_once_planned(self):
        from gpumem import streaming
        tokens, ref, expected = layers_with_expected()
        model = copy.deepcopy(ref)
        s = gt.stream(model, client=self.client, pageout=True)
        stream_every_block(s)
        s.ops.seconds = lambda start, end, wait=False: 1e-3
        for _ in range(2):
            with torch.no_grad():
                model(tokens)
        self.assertTrue(s.plan["planned"])
        with mock.patch.object(streaming._lead, "link_in",
                               side_effect=AssertionError("asked")):
            with torch.no_grad():
                self.assertTrue(torch.equal(model(tokens), expected))
        s.remove()


STATUS = {"host_bytes_per_s_in": 100e9, "pools": [
    {"device": 0, "tier": "vram", "capacity": 80 << 30,
     "link_bytes_per_s_in": 50_000_000_000, "arena_size": 4 << 30},
    {"device": 1, "tier": "vram", "capacity": 80 << 30,
     "link_bytes_per_s_in": 52_000_000_000},
    {"device": 0, "tier": "host", "capacity": 64 << 30}]}


def run(method, batch, rate, sha="a", **extra):
    return {"method": method, "batch": batch, "tokens_per_s": rate,
            "cold_tokens_per_s": rate / 2, "tokens_sha256": sha,
            "runs_identical": True, "weight_bytes": 2_000_000_000, **extra}


class BenchPlain(unittest.TestCase):
    def test_link_from_status(self):
        self.assertEqual(bench.link_rate(STATUS), 50e9)
        self.assertEqual(bench.link_rate(STATUS, 1), 52e9)
        self.assertEqual(bench.link_rate(STATUS, 2), 0)
        self.assertEqual(bench.link_rate(None), 0)
        pools = bench.pools_summary(STATUS)["pools"]
        self.assertEqual([p["device"] for p in pools], [0, 1])

    def test_link_bound(self):
        # 1 GB a pass at 50 GB/s: 50 passes a second, batch 16: 800 tok/s
        self.assertEqual(bench.link_bound(16, 50e9, 1e9), 800)
        self.assertEqual(bench.link_bound(1, 50e9, 1e9), 50)
        self.assertIsNone(bench.link_bound(16, 0, 1e9))
        self.assertEqual(bench.link_bound(16, 50e9, 0), float("inf"))

    def test_summary(self):
        budget = 1_000_000_000
        stream = dict(streamed_bytes_per_pass=1_100_000_000,
                      resident_blocks=6, blocks=17, lead=1,
                      pool_bytes_in=10 ** 10, pool_copy_us_in=200_000)
        runs = [run("vram", 16, r) for r in (300, 310, 320)] + \
            [run("stream", 16, r, **stream) for r in (270, 290, 280)] + \
            [run("dispatch", 16, 60), run("cpu_offload", 16, 45),
             run("vram", 1, 40), run("stream", 1, 30, **stream),
             run("dispatch", 1, 4, sha="b"),
             {"method": "cpu_offload", "batch": 1, "error": "boom"}]
        rows = {r["batch"]: r for r in bench.summarize(runs, 50e9, budget)}
        b16 = rows[16]
        self.assertTrue(b16["tokens_identical"])
        self.assertEqual(b16["methods"]["vram"]["tokens_per_s"], 310)
        self.assertEqual(b16["methods"]["stream"]["tokens_per_s"], 280)
        self.assertEqual(b16["methods"]["stream"]["gbps_in"], [50.0] * 3)
        # 1 GB must move a pass: 800 tok/s at batch 16; lower bound vram
        self.assertEqual(b16["must_stream_bytes_per_pass"], 10 ** 9)
        self.assertEqual(b16["link_bound_tokens_per_s"], 800)
        self.assertAlmostEqual(b16["link_bound_streamed_tokens_per_s"],
                               800 / 1.1)
        self.assertEqual(b16["lower_bound_tokens_per_s"], 310)
        self.assertAlmostEqual(b16["stream_of_bound"], 280 / 310)
        self.assertTrue(b16["target_met"])
        self.assertAlmostEqual(b16["stream_over_dispatch"], 280 / 60)
        b1 = rows[1]
        self.assertFalse(b1["tokens_identical"])     # dispatch's differ
        self.assertEqual(b1["lower_bound_tokens_per_s"], 40)
        self.assertNotIn("target_met", b1)           # batch 1: no target
        self.assertEqual(b1["methods"]["cpu_offload"]["failed"], 1)
        self.assertNotIn("stream_over_cpu_offload", b1)
        # the link is the lower bound when it is below the VRAM speed
        slow = bench.summarize(runs, 5e9, budget)
        self.assertEqual(slow[1]["lower_bound_tokens_per_s"], 80)
        self.assertTrue(slow[1]["target_met"])
        bench.print_summary(bench.summarize(runs, 50e9, budget), 50e9, 1.0)

    def test_copies_are_this_process_s(self):
        # The daemon's counters count since it started: the example
        # reports what moved from its first generate() on, not what the
        # processes before it on the same daemon moved.
        from types import SimpleNamespace as NS
        counters = {"bytes_in": 30 * GiB, "copy_us_in": 600_000,
                    "bytes_out": 2 * GiB}

        class Client:
            def status(self, what):
                return NS(pools=[NS(tier="host", device=0, **counters),
                                 NS(tier="vram", device=0, capacity=GiB,
                                    arena_size=GiB,
                                    link_bytes_per_s_in=50 * GiB,
                                    **counters)])
        s = NS(ops=NS(daemon_device=lambda i: 0), device_index=0,
               client=Client(), blocks=[], rest=NS(nbytes=0), lead=1,
               plan=None, stats={})
        placed = {"streamer": s}
        stream_generate.mark_copies(placed)
        counters.update(bytes_in=40 * GiB, copy_us_in=800_000,
                        bytes_out=2 * GiB)
        d = stream_generate.details(None, "stream", placed)
        self.assertEqual(d["pool_bytes_in"], 10 * GiB)
        self.assertEqual(d["pool_copy_us_in"], 200_000)
        self.assertEqual(d["pool_bytes_out"], 0)

    def test_budget(self):
        self.assertEqual(stream_generate.parse_budget("0.95G"),
                         int(0.95 * (1 << 30)))
        self.assertEqual(stream_generate.parse_budget("900M"), 900 << 20)
        self.assertEqual(stream_generate.parse_budget("2GiB"), 2 << 30)
        self.assertEqual(stream_generate.parse_budget("1048576"), 1 << 20)

    def test_help_without_torch(self):
        for script in (os.path.join(ROOT, "examples", "stream_generate.py"),
                       os.path.join(ROOT, "bench", "torch",
                                    "bench_stream_plain.py")):
            p = subprocess.run([sys.executable, script, "--help"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("--batch", p.stdout)


if __name__ == "__main__":
    unittest.main()
