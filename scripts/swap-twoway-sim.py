#!/usr/bin/env python3
"""swap-twoway-sim.py — the swap bench's "batch 64 x 16 MiB (all moving at
once)" two-way pattern against a sim daemon, to compare two daemon builds
without a GPU: N buffers in VRAM are paged out one by one while N others
come back (gmd_pageout of one, gmd_prefetch of the other, interleaved as in
bench/swap_bench.c batch_both), then one gmd_wait; prints each round's
GB/s and the time spent issuing the requests and waiting.

  scripts/swap-twoway-sim.py DAEMON [COPY_RATE [SIZE_MIB [N [ROUNDS]]]]

DAEMON is a gpu-memd binary (e.g. build/daemon/gpu-memd, or one built from
a worktree of an older commit); COPY_RATE is [sim] copy_rate (default 4G:
the sim copies at that many bytes per second per direction). The client is
this tree's Python binding over build/client/libgpumem.so ($GPUMEM_LIBRARY
overrides). With GMD_SIM_LOG=FILE the daemon logs at debug level there.
Figures on a shared machine swing by 20%: interleave builds, many rounds.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
os.environ.setdefault("GPUMEM_LIBRARY",
                      os.path.join(ROOT, "build", "client", "libgpumem.so"))
import gpumem  # noqa: E402


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    daemon = sys.argv[1]
    rate = sys.argv[2] if len(sys.argv) > 2 else "4G"
    size = int(sys.argv[3] if len(sys.argv) > 3 else 16) << 20
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 6
    log_path = os.environ.get("GMD_SIM_LOG")
    with tempfile.TemporaryDirectory(prefix="swap-twoway-") as d:
        sock, cfg = os.path.join(d, "s.sock"), os.path.join(d, "c.conf")
        vram = (2 * n * size * 3 // 2 >> 20) + 1024
        with open(cfg, "w") as f:
            f.write(f"[daemon]\nlog_level = {'debug' if log_path else 'info'}\n"
                    f"[pools]\nhost_stock = {vram}M\n"
                    f"[sim]\nvram = {vram}M\ncopy_rate = {rate}\n")
        log = open(log_path or os.devnull, "w")
        p = subprocess.Popen([daemon, "--backend", "sim", "--socket", sock,
                              "--config", cfg], stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(200):
                if os.path.exists(sock):
                    break
                time.sleep(0.05)
            c = gpumem.Client(sock, "swap-twoway-sim")
            a = [c.alloc(size) for _ in range(n)]
            b = [c.alloc(size) for _ in range(n)]
            for x in a + b:
                x.release()
            c.pageout(*b)
            c.wait()
            c.pageout(*a)           # one round each way first (warm-up)
            c.wait()
            c.prefetch(*a)
            c.wait()
            rates = []
            for r in range(rounds):
                out, into = (a, b) if r % 2 == 0 else (b, a)
                t0 = time.monotonic()
                for k in range(n):
                    c.pageout(out[k])
                    c.prefetch(into[k])
                t1 = time.monotonic()
                c.wait()
                t2 = time.monotonic()
                rates.append(2 * n * size / (t2 - t0) / 1e9)
                print(f"round {r}: {rates[-1]:.3f} GB/s (issue {1e3 * (t1 - t0):.1f} ms, "
                      f"wait {1e3 * (t2 - t1):.1f} ms)")
            print(f"median {statistics.median(rates):.3f} GB/s over {rounds} rounds")
            c.close()
        finally:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
