#!/usr/bin/env python3
"""bench_stream_plain.py — streamed inference as a plain script gets it:
examples/stream_generate.py, one fresh process per method and measurement,
against a gpu-memd started with its default configuration (only --socket,
as `make run` or an administrator starts it: no --vram-limit, no config
file), on every GPU the machine has.

What bench_offload.py's streamed case sets up and a plain script does not
(a named client, device=0, lead=2, a daemon whose VRAM pool is the budget
plus 256 MiB, a copy of the model in VRAM in the same process, the
documented OMP_NUM_THREADS=1) is left out here; the streamed speed is
judged against the other methods' processes, as a user would compare them.

Methods (examples/stream_generate.py --method M --batch B --result):
  vram         the model in VRAM: the speed to match
  stream       gpumem.torch.stream(model, budget=B)
  dispatch     accelerate infer_auto_device_map + dispatch_model,
               max_memory={0: B, "cpu": ...}: the fair peer
  cpu_offload  accelerate.cpu_offload
Each (method, batch) runs --rounds times, the rounds interleaved (every
method and batch once, then again), so that a drift of the machine falls on
every method alike; each process times its first generate() (cold) and the
median of --runs more (warm). The figures are the medians over the
processes.

The link's bound: the bytes of weights that must cross the link each pass
(the weights less the budget: at most the budget stays on the GPU) at the
host-to-VRAM rate the daemon measured (`gpu-memctl --json status`,
pools[].link_bytes_per_s_in of device 0), times the batch: tokens a second.
Also with the bytes stream() actually streamed a pass (the budget leaves
room for blocks in flight). The target: stream at least 0.9 of
min(vram, link bound) at batch 16 and above, process against process.

Before the first method the daemon is given time to pin its host arena and
measure its links (an administrator's daemon has long done both; the wait
is reported), unless --no-settle.

    bench_stream_plain.py --build BUILD [--json FILE] [--log FILE]
        [--batches 1,16,32] [--methods vram,stream,dispatch,cpu_offload]
        [--rounds 3] [--runs 3] [--budget 0.95G] [--layers 17]
        [--cpus LIST] [--env K=V,...] [--no-settle] [--deadline S]
    bench_stream_plain.py --summarize FILE     # print an earlier --json

Output: a summary on stdout, JSON (--json): {"daemon": {...}, "runs":
[each process's result], "summary": [per batch], ...}; the log (--log):
the daemon's output and every process's.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "stream_generate.py")
GiB = 1 << 30
METHODS = ("vram", "stream", "dispatch", "cpu_offload")
TARGET = 0.9            # of min(vram, link bound), batch 16 and above

sys.path.insert(0, HERE)
from common import Daemon, child_env, run_for_result  # noqa: E402


class PlainDaemon(Daemon):
    """Daemon (common.py) as an administrator starts it: `gpu-memd --socket
    PATH` and nothing else (its default backend, pools, arena and config)."""

    def __init__(self, build, log, prefix="gmd-bench-plain-"):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.socket = os.path.join(self.dir, "sock")
        self.build = build
        self._start(log, "--socket", self.socket)


# ---- the daemon's figures ----------------------------------------------------

def vram_pool(status, device=0):
    """`device`'s VRAM pool in a `gpu-memctl --json status` dict, or None."""
    for pool in (status or {}).get("pools", []):
        if pool.get("tier") == "vram" and pool.get("device") == device:
            return pool
    return None


def link_rate(status, device=0):
    """The host-to-VRAM bytes a second the daemon measured for `device`'s
    link; 0 when not known (not measured yet, no arena)."""
    pool = vram_pool(status, device)
    return (pool or {}).get("link_bytes_per_s_in", 0) or 0


def settle(daemon, timeout):
    """Wait until the daemon knows device 0's link (its arena is pinned
    and the link measured). (seconds waited, the last status)."""
    t0 = time.monotonic()
    status = None
    while time.monotonic() - t0 < timeout:
        status = daemon.status()
        if link_rate(status):
            break
        time.sleep(0.25)
    return time.monotonic() - t0, status


def pools_summary(status):
    """What of the daemon's status says how it runs: each VRAM pool's
    capacity, arena and link, the host links together."""
    out = {"host_bytes_per_s_in": (status or {}).get("host_bytes_per_s_in"),
           "host_bytes_per_s_out": (status or {}).get("host_bytes_per_s_out"),
           "pools": []}
    for p in (status or {}).get("pools", []):
        if p.get("tier") == "vram":
            out["pools"].append({k: p.get(k) for k in (
                "device", "capacity", "arena_size", "arena_free",
                "link_bytes_per_s_in", "link_bytes_per_s_out", "link_group",
                "preempt_step", "uuid", "pci_bus_id")})
    return out


# ---- bounds and the summary --------------------------------------------------

def link_bound(batch, rate, bytes_per_pass):
    """Tokens a second when every pass moves `bytes_per_pass` at `rate`:
    one pass a token for each of `batch` sequences; None when unknown,
    inf when nothing must move."""
    if not rate:
        return None
    if bytes_per_pass <= 0:
        return float("inf")
    return batch * rate / bytes_per_pass


def _median(results, key):
    values = [r[key] for r in results if r.get(key) is not None]
    return statistics.median(values) if values else None


def summarize(runs, rate, budget):
    """Per batch: each method's median tokens/s (warm and cold) over its
    processes, the spread, whether all tokens were the same, the link's
    bounds, stream's ratio to min(vram, bound) and to the peers."""
    out = []
    for batch in sorted({r["batch"] for r in runs}):
        row = {"batch": batch, "methods": {}}
        ok = [r for r in runs if r["batch"] == batch and "error" not in r]
        hashes = {r["tokens_sha256"] for r in ok}
        row["tokens_identical"] = len(hashes) == 1 and \
            all(r.get("runs_identical", True) for r in ok)
        for method in METHODS:
            mine = [r for r in ok if r["method"] == method]
            failed = [r for r in runs if r["batch"] == batch and
                      r["method"] == method and "error" in r]
            if not mine and not failed:
                continue
            m = {"processes": len(mine), "failed": len(failed),
                 "tokens_per_s": _median(mine, "tokens_per_s"),
                 "cold_tokens_per_s": _median(mine, "cold_tokens_per_s"),
                 "all": [round(r["tokens_per_s"], 2) for r in mine]}
            if failed:
                m["error"] = failed[-1]["error"]
            if method == "stream" and mine:
                m["streamed_bytes_per_pass"] = mine[0].get(
                    "streamed_bytes_per_pass")
                m["resident_blocks"] = mine[0].get("resident_blocks")
                m["blocks"] = mine[0].get("blocks")
                m["lead"] = [r.get("lead") for r in mine]
                m["gbps_in"] = [
                    round(r["pool_bytes_in"] / r["pool_copy_us_in"] / 1e3, 1)
                    for r in mine if r.get("pool_copy_us_in")]
            if method == "dispatch" and mine:
                m["gpu_modules"] = mine[0].get("gpu_modules")
                m["cpu_modules"] = mine[0].get("cpu_modules")
            row["methods"][method] = m
        weights = next((r["weight_bytes"] for r in ok), None)
        st = row["methods"].get("stream", {})
        if weights is not None:
            row["must_stream_bytes_per_pass"] = max(0, weights - budget)
            row["link_bound_tokens_per_s"] = link_bound(
                batch, rate, row["must_stream_bytes_per_pass"])
        if st.get("streamed_bytes_per_pass"):
            row["link_bound_streamed_tokens_per_s"] = link_bound(
                batch, rate, st["streamed_bytes_per_pass"])
        vram = row["methods"].get("vram", {}).get("tokens_per_s")
        bound = row.get("link_bound_tokens_per_s")
        lower = min(x for x in (vram, bound, float("inf")) if x is not None)
        row["lower_bound_tokens_per_s"] = \
            lower if lower != float("inf") else None
        s = st.get("tokens_per_s")
        if s and row["lower_bound_tokens_per_s"]:
            row["stream_of_bound"] = s / row["lower_bound_tokens_per_s"]
            if batch >= 16:
                row["target_met"] = row["stream_of_bound"] >= TARGET
        for peer in ("dispatch", "cpu_offload"):
            p = row["methods"].get(peer, {}).get("tokens_per_s")
            if s and p:
                row[f"stream_over_{peer}"] = s / p
        out.append(row)
    return out


def _num(x, fmt="{:.1f}"):
    return "-" if x is None else fmt.format(x)


def print_summary(summary, rate, settle_s=None):
    print(f"link (device 0, host to VRAM): "
          f"{_num(rate / 1e9 if rate else None, '{:.1f}')} GB/s"
          + ("" if settle_s is None else
             f"; the daemon settled in {settle_s:.1f} s"))
    for row in summary:
        print(f"batch {row['batch']}: tokens "
              f"{'identical' if row['tokens_identical'] else 'DIFFER'}")
        for method, m in row["methods"].items():
            line = (f"  {method:12} {_num(m['tokens_per_s'], '{:8.2f}')} tok/s"
                    f" (first generate {_num(m['cold_tokens_per_s'])}; "
                    f"{m['processes']} processes: {m['all']})")
            if m.get("failed"):
                line += f"  {m['failed']} failed: {m.get('error')}"
            if method == "stream" and m.get("blocks"):
                line += (f"  {m['resident_blocks']}/{m['blocks']} resident, "
                         f"lead {m['lead']}, in at {m['gbps_in']} GB/s")
            if method == "dispatch" and m.get("gpu_modules") is not None:
                line += (f"  {m['gpu_modules']} modules on the GPU, "
                         f"{m['cpu_modules']} on the CPU")
            print(line)
        print(f"  link bound {_num(row.get('link_bound_tokens_per_s'))} tok/s"
              f" ({_num(row.get('must_stream_bytes_per_pass', 0) / 1e9, '{:.2f}')}"
              f" GB a pass must move; "
              f"{_num(row.get('link_bound_streamed_tokens_per_s'))} with what "
              f"stream moves); lower bound "
              f"{_num(row.get('lower_bound_tokens_per_s'))}")
        if row.get("stream_of_bound") is not None:
            line = f"  stream: x{row['stream_of_bound']:.2f} of the lower bound"
            if "target_met" in row:
                line += (f" (target {TARGET}: "
                         f"{'met' if row['target_met'] else 'NOT met'})")
            for peer in ("dispatch", "cpu_offload"):
                if row.get(f"stream_over_{peer}"):
                    line += f", x{row[f'stream_over_{peer}']:.2f} {peer}"
            print(line)


# ---- the run -----------------------------------------------------------------

def run_one(build, log, socket, method, batch, opts, timeout):
    env = child_env(build)
    env["GPU_MEMD_SOCKET"] = socket
    for item in filter(None, opts.env.split(",")):
        key, _, value = item.partition("=")
        env[key] = value
    argv = [sys.executable, EXAMPLE, "--method", method, "--batch",
            str(batch), "--budget", str(opts.budget_bytes), "--layers",
            str(opts.layers), "--new-tokens", str(opts.new_tokens),
            "--runs", str(opts.runs), "--result"]
    cpus = {int(c) for c in opts.cpus.split(",") if c.strip()}
    label = f"{method} batch {batch}"
    result, tail, rc = run_for_result(
        argv, env, log, label, timeout,
        (lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    if result is None:
        print(f"  {label}: failed (rc {rc}): {tail}", flush=True)
        return {"method": method, "batch": batch, "error": tail, "rc": rc}
    print(f"  {label}: {result['tokens_per_s']:.2f} tok/s "
          f"(first {result['cold_tokens_per_s']:.2f})", flush=True)
    return result


def parse_budget(text):
    sys.path.insert(0, os.path.dirname(EXAMPLE))
    from stream_generate import parse_budget as parse
    return parse(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", help="the build tree (its daemon/gpu-memd, "
                    "client/gpu-memctl, client/libgpumem.so.0)")
    ap.add_argument("--json")
    ap.add_argument("--log")
    ap.add_argument("--batches", default="1,16,32")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--rounds", type=int, default=3,
                    help="processes per method and batch (default 3)")
    ap.add_argument("--runs", type=int, default=3,
                    help="timed generate() calls per process after the "
                    "first (default 3)")
    ap.add_argument("--budget", default="0.95G")
    ap.add_argument("--layers", type=int, default=17)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--cpus", default="",
                    help="comma list of CPUs every method's process runs "
                    "on (default: unpinned, as a plain script)")
    ap.add_argument("--env", default="",
                    help="K=V,... set in every method's process (e.g. "
                    "OMP_NUM_THREADS=1; default none)")
    ap.add_argument("--no-settle", action="store_true",
                    help="start the first method as soon as the socket is "
                    "there, not once the daemon has measured its links")
    ap.add_argument("--timeout", type=int, default=420,
                    help="seconds one process may take (default 420)")
    ap.add_argument("--deadline", type=float, default=0,
                    help="seconds for the whole run; processes that would "
                    "start later are skipped (default none)")
    ap.add_argument("--summarize", metavar="FILE",
                    help="print the summary of an earlier --json and stop")
    opts = ap.parse_args()
    if opts.summarize:
        with open(opts.summarize) as f:
            out = json.load(f)
        print_summary(out["summary"], out["daemon"].get("link_bytes_per_s_in"),
                      out["daemon"].get("settle_s"))
        return 0
    if not opts.build:
        ap.error("--build is required")
    build = os.path.abspath(opts.build)
    opts.budget_bytes = parse_budget(opts.budget)
    batches = [int(b) for b in opts.batches.split(",") if b.strip()]
    methods = [m for m in opts.methods.split(",") if m.strip()]
    for m in methods:
        if m not in METHODS:
            ap.error(f"--methods: {m!r} is not one of {', '.join(METHODS)}")
    log = open(opts.log or os.devnull, "w")
    t0 = time.monotonic()
    daemon = PlainDaemon(build, log)
    runs = []
    rate, settle_s = 0, None
    out = {"budget": opts.budget_bytes, "layers": opts.layers,
           "new_tokens": opts.new_tokens, "rounds": opts.rounds,
           "runs_per_process": opts.runs, "cpus": opts.cpus,
           "env": opts.env, "batches": batches, "methods": methods}
    try:
        settle_s, status = (0.0, daemon.status()) if opts.no_settle else \
            settle(daemon, 120)
        rate = link_rate(status)
        out["daemon"] = {"settle_s": settle_s, "link_bytes_per_s_in": rate,
                         "settled": bool(rate), **pools_summary(status)}
        print(f"gpu-memd (default configuration): link "
              f"{rate / 1e9 if rate else 0:.1f} GB/s in, after {settle_s:.1f}"
              f" s; {len(out['daemon']['pools'])} GPU(s)", flush=True)
        for r in range(opts.rounds):
            for batch in batches:
                for method in methods:
                    left = (opts.deadline - (time.monotonic() - t0)
                            if opts.deadline else opts.timeout)
                    if left < 30:
                        runs.append({"method": method, "batch": batch,
                                     "error": "skipped: deadline"})
                        continue
                    print(f"round {r + 1}: {method} batch {batch} ...",
                          flush=True)
                    result = run_one(build, log, daemon.socket, method,
                                     batch, opts,
                                     int(min(opts.timeout, left)))
                    result["round"] = r
                    runs.append(result)
        out["daemon"]["status_after"] = pools_summary(daemon.status())
    finally:
        daemon.stop()
    out["runs"] = runs
    out["summary"] = summarize(runs, rate, opts.budget_bytes)
    out["seconds"] = time.monotonic() - t0
    print_summary(out["summary"], rate, settle_s)
    print(f"bench_stream_plain: {out['seconds']:.0f} s")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(out, f, indent=1)
    failed = [r for r in runs if "error" in r and
              not r["error"].startswith("skipped")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
