#!/usr/bin/env bash
# swap-ab.sh — the same swap_bench against two gpu-memd builds, interleaved,
# on the GPU machine: tells a daemon change's effect on the swap figures
# from the machine's run-to-run noise (which moves single-move ratios by
# 0.1 between runs).
#
#   here:  build both daemons (e.g. a worktree of the old commit), then
#          mkdir -p build-ab && cp OLD/daemon/gpu-memd build-ab/gpu-memd-old
#          cp NEW/daemon/gpu-memd build-ab/gpu-memd-new
#          cp NEW/bench/swap_bench build-ab/ && cp -r NEW/lib build-ab/
#   there (`device` run, carry ["build-ab"]):  scripts/swap-ab.sh build-ab [ROUNDS]
#
# VARIANTS="old new fix" runs build-ab/gpu-memd-fix too (default "old new").
# Writes $OUT/ab_{old,new}_N.{json,txt} and prints each run's rows of 16,
# 64 and 256 MiB and its batch lines. With GMD_AB_LOG=1 each daemon also
# logs at debug level to $OUT/ab_{old,new}_N.log (GMD_BENCH_DAEMON_LOG):
# every move's "moved in/out ... (copy, remap and ack, release)" line, to
# see where a slower daemon's time goes (debug lines are never rate-limited).
set -u
dir=$(cd "${1:-build-ab}" && pwd) || exit 2
rounds=${2:-3}
OUT=${OUT:-$PWD/swap-ab-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for i in $(seq 1 "$rounds"); do
        for v in ${VARIANTS:-old new}; do
                log=()
                [ "${GMD_AB_LOG:-0}" = 1 ] && log=(env "GMD_BENCH_DAEMON_LOG=$OUT/ab_${v}_$i.log")
                GMD_DAEMON="$dir/gpu-memd-$v" timeout 120 "${log[@]}" "$dir/swap_bench" \
                        --json "$OUT/ab_${v}_$i.json" >"$OUT/ab_${v}_$i.txt" 2>&1
                echo "$v $i rc=$?"
                grep -E '^ +(16|64|256) M \||^batch' "$OUT/ab_${v}_$i.txt"
        done
done
