#!/usr/bin/env bash
# gpu-suite.sh — run the GPU suite on the GPU machine from a build made on
# the build machine, and leave logs and JSON results under $OUT.
#
#   here (build machine, with the CUDA toolkit):
#     cmake -S . -B build-cuda -DGMD_WERROR=ON && cmake --build build-cuda -j
#     scripts/gpu-suite.sh prepare build-cuda
#   there (the `device` tool's run, with carry: ["build-cuda"]):
#     scripts/gpu-suite.sh run build-cuda
#
# `prepare` copies the shared libraries the GPU machine lacks (cmocka for
# the unit tests, protobuf-c for libgpumem.so users) into BUILD/lib; gpu-memd
# and the test programs link libuv, protobuf-c and inih statically already.
# `run` needs neither cmake nor ctest: it runs the test binaries directly
# (tests/gpu/test_*), then the allocation benchmark (bench/alloc_bench), and
# writes under $OUT (default ./gpu-suite-out):
#   gpu-suite.log    every test's output, the daemon logs, in order
#   gpu-suite.json   {"tests": [{"name", "result", "rc", "seconds"}], ...}
#   alloc_bench.json / alloc_bench.txt   the benchmark's results
#   nvidia-smi.txt   the machine
# Exit status: 0 when no test failed (skips are not failures).
set -u

mode=${1:-run}
build=${2:-build-cuda}
build=$(cd "$build" 2>/dev/null && pwd) || { echo "no build folder ${2:-build-cuda}" >&2; exit 2; }

if [ "$mode" = prepare ]; then
        mkdir -p "$build/lib"
        for lib in libcmocka.so.0 libprotobuf-c.so.1; do
                path=$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')
                [ -n "$path" ] && cp -L "$path" "$build/lib/$lib"
        done
        ls -l "$build/lib"
        exit 0
fi
[ "$mode" = run ] || { echo "usage: $0 prepare|run [BUILD]" >&2; exit 2; }

OUT=${OUT:-$PWD/gpu-suite-out}
mkdir -p "$OUT"
log="$OUT/gpu-suite.log"
json="$OUT/gpu-suite.json"
: >"$log"
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GMD_DAEMON="$build/daemon/gpu-memd"
export GMD_BUILD="$build"

nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed" >>"$OUT/nvidia-smi.txt"
nvidia-smi -L >>"$log" 2>&1

failed=0
entries=()
for t in "$build"/tests/gpu/test_*; do
        [ -x "$t" ] && [ -f "$t" ] || continue
        name=$(basename "$t")
        echo "=== $name" | tee -a "$log"
        start=$(date +%s.%N)
        timeout 300 "$t" >>"$log" 2>&1
        rc=$?
        secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
        case $rc in
        0) result=pass ;;
        77) result=skip ;;
        *) result=fail; failed=$((failed + 1)) ;;
        esac
        echo "=== $name: $result (rc $rc, ${secs}s)" | tee -a "$log"
        entries+=("{\"name\": \"$name\", \"result\": \"$result\", \"rc\": $rc, \"seconds\": $secs}")
done

bench="$build/bench/alloc_bench"
bench_rc=null
if [ -x "$bench" ]; then
        echo "=== alloc_bench" | tee -a "$log"
        timeout 300 "$bench" --json "$OUT/alloc_bench.json" >"$OUT/alloc_bench.txt" 2>>"$log"
        bench_rc=$?
        cat "$OUT/alloc_bench.txt" >>"$log"
        echo "=== alloc_bench: rc $bench_rc" | tee -a "$log"
fi

{
        printf '{"gpu": "%s",\n "tests": [' "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | paste -sd, -)"
        sep=""
        for e in "${entries[@]}"; do printf '%s\n  %s' "$sep" "$e"; sep=","; done
        printf '],\n "failed": %d,\n "alloc_bench_rc": %s}\n' "$failed" "$bench_rc"
} >"$json"
cat "$json"
exit $((failed > 0))
