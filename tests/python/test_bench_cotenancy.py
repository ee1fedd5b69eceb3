"""The parts of bench/torch/bench_cotenancy.py, holder.py and nvml_watch.py
that need no GPU: the holder's arithmetic, NVML through a fake library,
nvidia-smi's lines, the peaks and verdicts, the model sizing, and the
summaries (makespan, p99, ratios, targets) on canned results, and the
rounds of case_cotenancy --rounds over fake daemons. No torch, no
daemon."""
import ctypes
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.normpath(os.path.join(HERE, "..", "..", "bench", "torch"))
sys.path.insert(0, BENCH)

import bench_cotenancy as bc  # noqa: E402
import holder  # noqa: E402
import nvml_watch as nw  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30


class HolderArithmetic(unittest.TestCase):
    def test_hold_all_but_budget_and_margin(self):
        free = 79 * GiB + 300 * MiB
        got = holder.hold_bytes(free, 12 * GiB, 2 * GiB)
        self.assertEqual(got, 65 * GiB + 300 * MiB)
        self.assertEqual(got % (2 * MiB), 0)

    def test_rounds_down_to_2_mib(self):
        got = holder.hold_bytes(10 * GiB + 3 * MiB + 5, 1 * GiB, 0)
        self.assertEqual(got, 9 * GiB + 2 * MiB)

    def test_nothing_when_budget_is_more_than_free(self):
        self.assertEqual(holder.hold_bytes(4 * GiB, 4 * GiB, 1), 0)
        self.assertEqual(holder.hold_bytes(4 * GiB, 8 * GiB, 0), 0)

    def test_negative_is_refused(self):
        with self.assertRaises(ValueError):
            holder.hold_bytes(GiB, -1, 0)

    def test_chunks_add_up(self):
        total = 5 * GiB + 6 * MiB + 1
        c = holder.chunks(total)
        self.assertEqual(c, [GiB] * 5 + [6 * MiB])
        self.assertEqual(holder.chunks(0), [])
        self.assertEqual(sum(holder.chunks(3 * GiB)), 3 * GiB)

    def test_margin_per_process(self):
        self.assertEqual(holder.margin_for(1), GiB)
        self.assertEqual(holder.margin_for(4, 512 * MiB), 2 * GiB)
        with self.assertRaises(ValueError):
            holder.margin_for(0)

    def test_env_is_plain_cuda(self):
        env = holder.holder_env({"LD_PRELOAD": "x.so", "PATH": "/bin",
                                 "GPU_MEMD_SOCKET": "/s",
                                 "PYTORCH_CUDA_ALLOC_CONF": "expandable"})
        self.assertEqual(env, {"PATH": "/bin", "PYTHONUNBUFFERED": "1"})

    @unittest.skipIf(os.path.exists("/dev/nvidia0"), "a GPU is here")
    def test_holder_without_a_gpu_fails_with_a_sentence(self):
        # No HOLDING line here (no GPU, or no torch): a HolderError, and
        # no process left behind.
        with self.assertRaises(holder.HolderError):
            holder.Holder(GiB, GiB, timeout=60)


class FakeNvml:
    """libnvidia-ml's functions as ctypes would call them."""

    def __init__(self, used, total, procs, v3=True):
        self.used, self.total, self.procs = used, total, procs
        if not v3:
            self.nvmlDeviceGetComputeRunningProcesses_v2 = self._procs
        else:
            self.nvmlDeviceGetComputeRunningProcesses_v3 = self._procs

    def nvmlInit_v2(self):
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index, ref):
        ref._obj.value = 1234
        return 0

    def nvmlDeviceGetMemoryInfo(self, handle, ref):
        m = ref._obj
        m.total, m.used, m.free = self.total, self.used, self.total - self.used
        return 0

    def _procs(self, handle, count_ref, infos):
        if self.procs is None:
            return 3                    # NVML_ERROR_NOT_SUPPORTED
        if len(self.procs) > count_ref._obj.value:
            count_ref._obj.value = len(self.procs)
            return nw.NVML_ERROR_INSUFFICIENT_SIZE
        for i, (pid, used) in enumerate(self.procs):
            infos[i].pid = pid
            infos[i].usedGpuMemory = used
        count_ref._obj.value = len(self.procs)
        return 0


class NvmlParsing(unittest.TestCase):
    def test_struct_layout_is_nvml_abi(self):
        self.assertEqual(ctypes.sizeof(nw.ProcessInfo), 24)
        self.assertEqual(ctypes.sizeof(nw.Memory), 24)

    def test_memory_and_processes(self):
        na = nw.NVML_VALUE_NOT_AVAILABLE
        n = nw.Nvml(FakeNvml(5 * GiB, 80 * GiB,
                             [(10, GiB), (11, na), (10, MiB)]))
        self.assertEqual(n.memory(), (5 * GiB, 80 * GiB))
        self.assertEqual(n.processes(), {10: GiB + MiB})

    def test_v2_and_unsupported(self):
        n = nw.Nvml(FakeNvml(1, 2, [(7, 3)], v3=False))
        self.assertEqual(n.processes(), {7: 3})
        self.assertIsNone(nw.Nvml(FakeNvml(1, 2, None)).processes())

    def test_smi_lines(self):
        self.assertEqual(nw.parse_smi_line("1024, 81559\n"),
                         (1024 * MiB, 81559 * MiB))
        self.assertEqual(nw.parse_smi_line("17"), (17 * MiB, None))
        for bad in ("", "[N/A], [N/A]", "memory.used [MiB]",
                    "Failed to initialize NVML"):
            self.assertIsNone(nw.parse_smi_line(bad), bad)
        cmd = nw.smi_command(0)
        self.assertIn("-lms", cmd)
        self.assertEqual(cmd[cmd.index("-lms") + 1], "20")


class DaemonList(unittest.TestCase):
    """--train2x-daemons is checked before the minutes of the plain run."""

    def test_names_and_paths_in_order(self):
        self.assertEqual(bc.parse_daemons("new=/bin/true,old=/bin/sh"),
                         [("new", "/bin/true"), ("old", "/bin/sh")])
        self.assertEqual(bc.parse_daemons(""), [])

    def test_bad_entries_say_which(self):
        for text, words in (("new", "want NAME=PATH"),
                            ("=/bin/true", "want NAME=PATH"),
                            ("a=/bin/true,a=/bin/sh", "named twice"),
                            ("a=/nonexistent/gpu-memd", "not an executable")):
            with self.assertRaises(ValueError) as cm:
                bc.parse_daemons(text)
            self.assertIn(words, str(cm.exception))


class PeaksAndVerdicts(unittest.TestCase):
    def test_per_pid_peak_when_pids_match(self):
        p = nw.Peaks()
        p.add(70 * GiB, 80 * GiB, {1: 70 * GiB})          # the holder
        p.mark(pids=[2])
        p.add(73 * GiB, None, {1: 70 * GiB, 2: 3 * GiB})
        p.watch_pids(3)
        p.add(76 * GiB, None, {1: 70 * GiB, 2: 4 * GiB, 3: 2 * GiB})
        p.add(72 * GiB, None, {1: 70 * GiB, 2: 2 * GiB})
        r = p.report("nvml")
        self.assertEqual(r["nvml_baseline_used"], 70 * GiB)
        self.assertEqual(r["nvml_peak_used"], 76 * GiB)
        self.assertEqual(r["nvml_peak_pids_bytes"], 6 * GiB)
        self.assertEqual(r["nvml_peak_bytes"], 6 * GiB)
        self.assertEqual(r["nvml_total"], 80 * GiB)
        self.assertTrue(nw.verdict(r, 5 * GiB, GiB, 70 * GiB))
        self.assertFalse(nw.verdict(r, 4 * GiB, GiB, 70 * GiB))

    def test_card_minus_baseline_when_pids_do_not_show(self):
        # in a container NVML may give the host's pids: no match
        p = nw.Peaks()
        p.add(70 * GiB, 80 * GiB, {9001: 70 * GiB})
        p.mark(pids=[2])
        p.add(75 * GiB, None, {9001: 70 * GiB, 9002: 5 * GiB})
        r = p.report("nvml")
        self.assertIsNone(r["nvml_peak_pids_bytes"])
        self.assertEqual(r["nvml_peak_bytes"], 5 * GiB)
        # nvidia-smi: no processes at all
        p = nw.Peaks()
        p.add(GiB)
        p.mark()
        p.add(3 * GiB)
        self.assertEqual(p.report("nvidia-smi")["nvml_peak_bytes"], 2 * GiB)

    def test_nothing_sampled(self):
        r = nw.Peaks().report(None)
        self.assertIsNone(r["nvml_peak_bytes"])
        self.assertIsNone(nw.verdict(r, GiB, GiB))

    def test_watch_over_fake_nvml(self):
        fake = FakeNvml(10 * GiB, 80 * GiB, [(1, 10 * GiB)])
        w = nw.Watch(nvml=nw.Nvml(fake), period=0.005).start()
        try:
            self.assertEqual(w.source, "nvml")
            w.mark(pids=[2])
            fake.used, fake.procs = 14 * GiB, [(1, 10 * GiB), (2, 4 * GiB)]
            time.sleep(0.1)
            fake.used, fake.procs = 11 * GiB, [(1, 10 * GiB), (2, GiB)]
            time.sleep(0.05)
        finally:
            w.close()
        r = w.report()
        self.assertEqual(r["nvml_peak_bytes"], 4 * GiB)
        self.assertEqual(r["nvml_peak_used"], 14 * GiB)
        self.assertGreater(r["nvml_samples"], 3)

    def test_watch_with_no_source(self):
        w = nw.Watch(smi=False)
        w.nvml = None
        # Nvml.load of a library that is not there
        orig = nw.Nvml.load
        nw.Nvml.load = classmethod(lambda cls, d=0: (_ for _ in ()).throw(
            OSError("libnvidia-ml.so.1: cannot open")))
        try:
            w.start()
        finally:
            nw.Nvml.load = orig
        w.mark()
        w.close()
        r = w.report()
        self.assertIsNone(w.source)
        self.assertIsNone(r["nvml_peak_bytes"])
        self.assertIn("libnvidia-ml", r["nvml_error"])


class Sizing(unittest.TestCase):
    def test_gpt2_params_of_gpt2_small(self):
        cfg = dict(layers=12, width=768, heads=12, seq=1024, batch=1,
                   vocab=50257)
        self.assertAlmostEqual(bc.gpt2_params(cfg) / 1e6, 124.4, delta=0.5)

    def test_size_gpt2_within_target(self):
        base = dict(width=1024, heads=16, seq=512, batch=8, vocab=50257)
        for target in (6 * GiB, 12 * GiB, 24 * GiB):
            cfg = bc.size_gpt2(target, base)
            self.assertLessEqual(bc.gpt2_train_bytes(cfg), target)
            more = dict(cfg, layers=cfg["layers"] + 1)
            self.assertGreater(bc.gpt2_train_bytes(more), target)
        self.assertEqual(bc.size_gpt2(1, base)["layers"], 2)

    def test_llama_weights(self):
        # bench_offload's Llama config: hidden 2048, 16 layers, 886M
        # parameters (q, o 2048^2; k, v 2048 x 1024; MLP 3 x 2048 x 5632;
        # embedding and head 32000 x 2048 each)
        cfg = dict(hidden=2048, inter=5632, heads=16, kv_heads=8,
                   vocab=32000, layers=16)
        self.assertAlmostEqual(bc.llama_weight_bytes(cfg) / 2 / 1e9, 0.886,
                               delta=0.001)
        got = bc.size_llama(2 * GiB, dict(cfg))
        self.assertLessEqual(bc.llama_weight_bytes(got), 2 * GiB)

    def test_parse_size_and_percentile(self):
        self.assertEqual(bc.parse_size("4G"), 4 * GiB)
        self.assertEqual(bc.parse_size("512M"), 512 * MiB)
        self.assertEqual(bc.parse_size("1000"), 1000)
        self.assertEqual(bc.percentile(list(range(1, 101)), 99), 99.01)
        self.assertEqual(bc.percentile([5.0], 99), 5.0)
        self.assertIsNone(bc.percentile([], 99))

    def test_moved_from_memctl_json(self):
        def st(o, i, uo, ui):
            return {"pools": [
                {"device": 0, "tier": "host", "bytes_out": 0, "bytes_in": 0},
                {"device": 0, "tier": "vram", "bytes_out": o, "bytes_in": i,
                 "copy_us_out": uo, "copy_us_in": ui,
                 "link_bytes_per_s_out": 55_100_000_000,
                 "link_bytes_per_s_in": 55_200_000_000}]}
        d = bc.moved(st(GiB, 0, 100, 0), st(GiB + 50_000_000_000,
                                             25_000_000_000, 1_000_100,
                                             500_000))
        self.assertEqual(d["bytes_out"], 50_000_000_000)
        self.assertAlmostEqual(d["gbps_out"], 50.0)
        self.assertAlmostEqual(d["gbps_in"], 50.0)
        self.assertAlmostEqual(d["link_gbps_in"], 55.2)
        self.assertIsNone(bc.moved(None, st(0, 0, 0, 0)))
        self.assertIsNone(bc.moved(st(0, 0, 0, 0), st(0, 0, 0, 0))["gbps_in"])


def train_result(method, ms, losses, **kw):
    r = {"method": method, "name": method, "step_ms_median": ms,
         "losses": losses, "steps_done": 6, "oom": False, "cut": False,
         "working_set": 6 * GiB, "nvml_peak_bytes": 4 * GiB,
         "under_budget": True}
    r.update(kw)
    return r


TRAIN2X = {"cfg": {"layers": 20, "width": 1024}, "budget": 3 * GiB,
           "budget_from": "plain max_reserved / 2", "results": [
               train_result("plain", 100.0, ["0x1.8p+3", "0x1.7p+3"],
                            under_budget=None),
               train_result("gpumem", 115.0, ["0x1.8p+3", "0x1.7p+3"]),
               train_result("save_on_cpu", 320.0, ["0x1.8p+3", "0x1.6p+3"])]}


def infer_result(name, lat, **kw):
    r = {"name": name, "method": "infer", "token_ms": lat,
         "p50_ms": bc.percentile(lat, 50), "p99_ms": bc.percentile(lat, 99),
         "tokens": [1, 2, 3], "oom": False, "cut": False, "wall_s": 20.0,
         "working_set": 2 * GiB}
    r.update(kw)
    return r


def cot_case(together_infer_lat, makespan, oom=False, train_end=None):
    """Alone: measured parts of 30 + 30 + 20 s, 40 + 40 + 20 s with set-up.
    Together, from one go at t=1000: the inference job's four requests of
    25 tokens at 1000, 1010, 1020, 1030 and its end at 1000 + makespan;
    the training jobs step until `train_end` (default: the end)."""
    end = 1000.0 + makespan
    train_end = train_end or end
    alone = [train_result("gpumem", 200.0, ["0x1p+3"], name="train_a",
                          wall_s=40.0, working_set=3 * GiB,
                          t_start=0.0, t_end=30.0),
             train_result("gpumem", 200.0, ["0x1p+3"], name="train_b",
                          wall_s=40.0, working_set=3 * GiB,
                          t_start=100.0, t_end=130.0),
             infer_result("infer", [10.0] * 98 + [20.0] * 2,
                          t_start=200.0, t_end=220.0)]
    together = [train_result("gpumem", 260.0, ["0x1p+3"], name="train_a",
                             t_start=1000.0, t_end=train_end),
                train_result("gpumem", 250.0, ["0x1p+2"], name="train_b",
                             t_start=1000.0, t_end=min(train_end, 1015.0),
                             oom=oom, **({"error": "gpu-memd: waited"}
                                         if oom else {})),
                infer_result("infer", together_infer_lat, t_start=1000.0,
                             t_end=end, tokens_per_request=25,
                             request_t=[1000.0, 1010.0, 1020.0, 1030.0])]
    return {"budget": 4 * GiB, "alone": alone, "together": together,
            "makespan_wall_s": makespan + 12.0,
            "moved_together": {"bytes_out": 8 * GiB, "bytes_in": 9 * GiB,
                               "gbps_out": 45.0, "gbps_in": None,
                               "link_gbps_out": 55.0, "link_gbps_in": 55.1},
            "nvml_together": {"nvml_peak_bytes": 7 * GiB, "margin": 4 * GiB,
                              "under_budget": True}}


class Summaries(unittest.TestCase):
    def quiet(self, fn, case):
        out = io.StringIO()
        old = sys.stdout
        sys.stdout = out
        try:
            return fn(case), out.getvalue()
        finally:
            sys.stdout = old

    def test_train2x_ratios_and_target(self):
        s, text = self.quiet(bc.summarize_train2x, TRAIN2X)
        self.assertAlmostEqual(s["methods"]["gpumem"]["ratio"], 1.15)
        self.assertTrue(s["methods"]["gpumem"]["losses_identical"])
        self.assertFalse(s["methods"]["save_on_cpu"]["losses_identical"])
        self.assertAlmostEqual(s["methods"]["save_on_cpu"]["ratio"], 3.2)
        self.assertTrue(s["met"])
        self.assertIn("x1.15", text)
        self.assertIn("losses DIFFER", text)

    def test_train2x_slow_or_oom_is_not_met(self):
        case = json.loads(json.dumps(TRAIN2X))
        case["results"][1]["step_ms_median"] = 130.0
        s, _ = self.quiet(bc.summarize_train2x, case)
        self.assertFalse(s["met"])
        case["results"][1] = {"method": "gpumem", "name": "gpumem",
                              "error": "CUDA out of memory", "oom": True}
        s, text = self.quiet(bc.summarize_train2x, case)
        self.assertTrue(s["methods"]["gpumem"]["oom"])
        self.assertNotIn("met", s)
        self.assertIn("(OOM)", text)

    def test_cotenancy_makespan_p99_and_targets(self):
        lat = [11.0] * 98 + [22.0] * 2
        s, text = self.quiet(bc.summarize_cotenancy, cot_case(lat, 85.0))
        self.assertEqual(s["makespan_sequential_s"], 80.0)
        self.assertAlmostEqual(s["makespan_ratio"], 85.0 / 80.0)
        self.assertAlmostEqual(s["makespan_wall_ratio"], 97.0 / 100.0)
        self.assertEqual(s["infer_requests_during_training"], 4)
        self.assertEqual(s["infer_requests_during_both"], 2)
        self.assertIn("requests while training stepped: 4 of 4 (2 while "
                      "both did)", text)
        self.assertAlmostEqual(s["p99_alone_ms"], 20.0)
        self.assertAlmostEqual(s["p99_together_ms"], 22.0)
        self.assertAlmostEqual(s["p99_ratio"], 1.1)
        self.assertAlmostEqual(s["working_sets_x_budget"], 2.0)
        self.assertTrue(s["train_a_losses_identical"])
        self.assertFalse(s["train_b_losses_identical"])
        self.assertEqual(s["met"], {"makespan": True, "p99": True,
                                    "no_oom": True})
        self.assertIn("out 8.00 GiB at 45.0 GB/s", text)
        self.assertIn("OOM: none", text)

    def test_cotenancy_longest_step(self):
        """The longest single step together (a starved job waits in one),
        also without alone runs (--together-only)."""
        case = cot_case([11.0] * 100, 85.0)
        case["together"][0]["step_ms"] = [250.0, 12500.0, 260.0]
        s, text = self.quiet(bc.summarize_cotenancy, case)
        self.assertEqual(s["train_a_longest_step_ms"], 12500.0)
        self.assertNotIn("train_b_longest_step_ms", s)
        self.assertIn("longest step 12500 ms (step 1)", text)
        case["alone"] = []
        s, text = self.quiet(bc.summarize_cotenancy, case)
        self.assertIn("train_a: step 260.0 ms together; longest step "
                      "12500 ms (step 1)", text)

    def test_cotenancy_misses_and_ooms(self):
        lat = [10.0] * 90 + [40.0] * 10
        s, text = self.quiet(bc.summarize_cotenancy, cot_case(lat, 95.0))
        self.assertEqual(s["met"], {"makespan": False, "p99": False,
                                    "no_oom": True})
        s, text = self.quiet(bc.summarize_cotenancy,
                             cot_case(lat, 95.0, oom=True))
        self.assertEqual(s["ooms"], ["together train_b"])
        self.assertFalse(s["no_oom"])
        self.assertFalse(s["complete"])
        self.assertNotIn("met", s)
        self.assertIn("OOM: together train_b", text)

    def test_cotenancy_p99_of_the_requests_during_training(self):
        # the slow tokens are the last request's, after training ended
        lat = [10.0] * 75 + [40.0] * 25
        s, text = self.quiet(bc.summarize_cotenancy,
                             cot_case(lat, 40.0, train_end=1025.0))
        self.assertEqual(s["infer_requests_during_training"], 3)
        self.assertAlmostEqual(s["p99_during_training_ms"], 10.0)
        self.assertGreater(s["p99_together_ms"], 39.0)
        self.assertIn("p99 of the requests during training 10.00 ms", text)

    def test_go_releases_when_all_are_ready_or_gone(self):
        with tempfile.TemporaryDirectory() as d:
            go = os.path.join(d, "go")
            ready = subprocess.Popen(
                [sys.executable, "-c",
                 "import sys; sys.path.insert(0, %r); "
                 "import bench_cotenancy as bc, os; "
                 "bc.wait_go({'go_file': %r, 'name': 'a'}); "
                 "print(os.path.exists(%r))" % (BENCH, go, go)],
                stdout=subprocess.PIPE, text=True)
            gone = subprocess.Popen([sys.executable, "-c", "pass"])
            t = bc.release_together([(ready, 0, "a"), (gone, 0, "b")], go,
                                    ["a", "b"], 60)
            out, _ = ready.communicate(timeout=60)
            gone.wait()
            self.assertTrue(os.path.exists(go + ".ready.a"))
            self.assertEqual(out.strip(), "True")
            self.assertLessEqual(t, time.time())

    def test_summarize_a_file(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "cot.json")
            with open(path, "w") as f:
                json.dump({"train2x": TRAIN2X,
                           "cotenancy": cot_case([11.0] * 100, 80.0)}, f)
            p = subprocess.run([sys.executable,
                                os.path.join(BENCH, "bench_cotenancy.py"),
                                "--summarize", path],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("training at twice the budget", p.stdout)
        self.assertIn("makespan 80.0 s together", p.stdout)


class Rounds(unittest.TestCase):
    """case_cotenancy --rounds over fake daemons (Env) and rounds."""

    def test_every_round_has_its_daemons_nvml_peak(self):
        from types import SimpleNamespace
        from unittest import mock
        envs = []

        class FakeEnv:
            def __init__(self, ctx, budget, processes, daemon):
                self.error = None
                self.n = len(envs) + 1
                envs.append(self)

            def report(self):
                return {"nvml_peak_bytes": self.n * GiB, "margin": GiB,
                        "under_budget": self.n == 1}

            def stop(self):
                pass

        def fake_round(ctx, env, jobs, left_now):
            return {"together": cot_case([10.0] * 100, 80.0)["together"],
                    "makespan_wall_s": 92.0, "go_t": 0.0, "late": []}

        opts = SimpleNamespace(quick=True, cot_budget=None, stream_frac=0.15,
                               no_idle=False, train_steps=0,
                               infer_idle_keep=False, lend_wait=None,
                               keep_cache=False, together_only=True,
                               rounds=2)
        with mock.patch.object(bc, "Env", FakeEnv), \
                mock.patch.object(bc, "together_round", fake_round), \
                mock.patch("sys.stdout", io.StringIO()):
            out = bc.case_cotenancy(None, opts, 10000)
        self.assertEqual(len(envs), 2)
        self.assertEqual([r["kind"] for r in out["rounds"]],
                         ["cold", "warm", "cold", "warm"])
        # each daemon's watch covers both its rounds
        self.assertEqual([r["nvml_together"]["nvml_peak_bytes"]
                          for r in out["rounds"]],
                         [GiB, GiB, 2 * GiB, 2 * GiB])
        # the first round's is the case's own verdict
        self.assertEqual(out["nvml_together"]["nvml_peak_bytes"], GiB)
        self.assertTrue(out["summary"]["under_budget"])


if __name__ == "__main__":
    unittest.main()
