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
# (tests/gpu/test_*), the Python package's CUDA test with the machine's
# python3 and torch (tests/python/test_cuda.py), then the benchmarks (bench/alloc_bench,
# bench/swap_bench, bench/release_bench), and writes under $OUT (default
# ./gpu-suite-out):
#   gpu-suite.log    every test's output, the daemon logs, in order
#   gpu-suite.json   {"gpu", "gpus", "tests": [{"name", "result", "rc",
#                    "seconds"}], ...}
#   alloc_bench.json / alloc_bench.txt   the allocation benchmark's results
#   swap_bench.json / swap_bench.txt     the swap benchmark's results
#   release_bench.json / release_bench.txt   copies right after a VRAM
#                                        release (cuMemRelease), ~20 s
#   map_bench.json / map_bench.txt       the driver calls of a client's
#                                        remap per buffer (GMD_BENCH entry
#                                        "map", not in the default list; ~2 s)
#   peer_bench.json / peer_bench.txt     the peer tier: GPU 0's buffers to
#                                        GPU 1's VRAM and back against
#                                        cuMemcpyPeerAsync and host memory
#                                        (GMD_BENCH entry "peer", not in the
#                                        default list; two GPUs; ~1 min)
#   notify_bench.json / notify_bench.txt how soon the host hears a copy is
#                                        over, three ways (GMD_BENCH entry
#                                        "notify", not in the default list)
#   pin_bench.json / pin_bench.txt       pinning the host arena's pieces by
#                                        1, 2, 4 and 8 threads against
#                                        cuMemHostAlloc (GMD_BENCH entry
#                                        "pin", not in the default list;
#                                        pins 8 GiB at a time; ~30 s)
#   torch_bench.json / torch_bench.txt   PyTorch on gpu-memd against the
#                                        default allocator (bench/torch/,
#                                        GMD_BENCH entry "torch", ~3 min),
#                                        with torch_probe.json (the facts
#                                        gpumem.torch's mechanism rests on)
#                                        and torch_bench.log (children's output)
#   offload_bench.json / offload_bench.txt / offload_bench.log
#                                        activation offload and weight
#                                        streaming against plain VRAM,
#                                        save_on_cpu and accelerate
#                                        (bench/torch/bench_offload.py,
#                                        GMD_BENCH entry "offload", not in
#                                        the default list; ~8 min, or
#                                        GMD_OFFLOAD_QUICK=1: under 3 min)
#   cotenancy_bench.json / cotenancy_bench.txt / cotenancy_bench.log
#                                        training at twice the budget
#                                        (gpu-memd against plain and
#                                        save_on_cpu) and three processes
#                                        on one budgeted card, every
#                                        method under the same holder
#                                        process and NVML sampling
#                                        (bench/torch/bench_cotenancy.py,
#                                        GMD_BENCH entry "cotenancy", not
#                                        in the default list; ~8 min, or
#                                        GMD_COTENANCY_QUICK=1: about 6 min;
#                                        alone in one device command:
#                                        GMD_BENCH=cotenancy scripts/gpu-suite.sh
#                                        run BUILD none, "none" naming no
#                                        test so that only the bench runs)
# The Python GPU tests (tests/gpu/test_*.py, run with python3: PyTorch on
# gpu-memd) run with the C ones. `run BUILD TEST...` runs only the named
# tests (test_gpu_swap test_torch.py ...), and GMD_BENCH="alloc swap
# release torch" (the default) picks the benchmarks; "" runs none;
# GMD_TORCH_ROUNDS=N gives the torch bench N rounds (default 2).
# tests/gpu/test_offload.py and test_spill.py run with the other Python GPU
# tests (GMD_OFFLOAD_QUICK=1 passes them --quick too); test_spill.py also
# appends its tokens/s lines to $OUT/spill.jsonl. tests/gpu/test_ddp.py
# (two GPUs or more; skipped on one) trains with DistributedDataParallel
# on two GPUs, plain and under gpumem-run (each run cut at 120 s).
# tests/gpu/test_restart_kills is tests/integration/test_restart's kill loop
# on the cuda backend: 100 SIGKILLs of gpu-memd under three clients that
# check their buffers with CUDA copies at every acquire (1-2 min expected;
# GMD_RESTART_KILLS=N for another number; its "test_restart: PASS" line
# says kills, time and what was checked). It starts BUILD's gpu-memd and
# client by the absolute paths compiled into it (BUILD must be at the path
# it was built at), needs the cmocka `prepare` copies, and does not go
# through GMD_DAEMON (nor GMD_SANDBOX's wrapper).
#   nvidia-smi.txt   the machine (nvidia-smi, and `nvidia-smi topo -m`: how
#                    its GPUs are linked)
#
# Machines of one, two or four GPUs (or more): every gpu-memd a test starts
# serves all the GPUs the suite sees. A test about one device uses CUDA
# device 0, the daemon's device 0, and says which GPU that is in a
# "device:" line; the tests about several (test_gpu_devices, test_torch.py's
# `visible` case, test_gpu_daemon's last section, test_ddp.py) use the
# others and skip those parts on one GPU. CUDA_DEVICE_ORDER is PCI_BUS_ID
# unless set, so that CUDA's device N is nvidia-smi's GPU N (NVML counts in
# PCI order; CUDA's default, fastest first, need not), and the log says how
# many GPUs there are. CUDA_VISIBLE_DEVICES, when set, is left alone: the
# daemons and the tests then see the same GPUs, in the same order.
#
# GMD_SANDBOX=1 runs every gpu-memd the tests and benchmarks start under
# the hardened unit's process-level confinement (systemd/gpu-memd.service.in):
# the suite writes $OUT/gpu-memd-sandboxed, a wrapper that execs
# `BUILD/tests/sandbox/unit_sandbox $GMD_SANDBOX_OPTS -- BUILD/daemon/gpu-memd "$@"`,
# and points GMD_DAEMON at it (gpu_proc.c, the Python tests and benches
# start what GMD_DAEMON names). unit_sandbox applies LimitNOFILE,
# LimitMEMLOCK, UMask=0077, CapabilityBoundingSet=, NoNewPrivileges and a
# seccomp filter of SystemCallFilter=@system-service (EPERM otherwise),
# SystemCallArchitectures=native, RestrictAddressFamilies=AF_UNIX AF_INET
# AF_INET6, RestrictNamespaces, LockPersonality and RestrictRealtime; not
# the unit's mounts (ProtectSystem, PrivateTmp, ProtectProc...), device
# cgroup (DevicePolicy/DeviceAllow), IPAddressDeny or User= (see
# tests/sandbox/unit_sandbox.c). The log gets `unit_sandbox --probe` first
# (a call outside @system-service must get EPERM: the run stops with exit
# 2 if seccomp is unavailable or the probe fails), every daemon's start is
# appended to $OUT/sandbox-starts.log, and gpu-suite.json says
# "sandbox": true with the number of starts. A daemon's refused call shows
# as "Operation not permitted" in its log (the suite log counts them at
# the end). GMD_SANDBOX_OPTS="--deny NAME" refuses one more call.
# Where PID 1 is systemd, the check is the real unit instead: install it
# (make install; systemctl start gpu-memd.socket), run
# `systemd-analyze security gpu-memd.service` and the clients against
# /run/gpu-memd/gpu-memd.sock (GPU_MEMD_SOCKET=... python3 -m unittest
# test_cuda), or start one daemon with the unit's properties:
#   systemd-run --wait --pipe --collect -p LimitNOFILE=524288 \
#     -p LimitMEMLOCK=infinity -p UMask=0077 -p CapabilityBoundingSet= \
#     -p NoNewPrivileges=yes -p SystemCallFilter=@system-service \
#     -p SystemCallErrorNumber=EPERM -p SystemCallArchitectures=native \
#     -p "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6" \
#     -p RestrictNamespaces=yes -p LockPersonality=yes -p RestrictRealtime=yes \
#     -p ProtectSystem=strict -p ProtectHome=yes -p ProtectKernelTunables=yes \
#     -p ProtectKernelModules=yes -p ProtectControlGroups=yes \
#     -p ProtectClock=yes -p ProtectKernelLogs=yes -p ProtectHostname=yes \
#     -p ProtectProc=invisible -p DevicePolicy=closed \
#     -p "DeviceAllow=char-nvidia-frontend rw" -p "DeviceAllow=char-nvidia-uvm rw" \
#     -p "DeviceAllow=char-nvidia-caps rw" -p RuntimeDirectory=gpu-memd-check \
#     BUILD/daemon/gpu-memd --backend cuda --socket /run/gpu-memd-check/sock
# (no PrivateTmp there: the clients must reach the socket), then the
# clients against that socket. The GPU machine's container has no systemd
# as PID 1, hence the launcher.
# Exit status: 0 when no test failed (skips are not failures).
set -u

mode=${1:-run}
build=${2:-build-cuda}
shift 2 2>/dev/null || shift $#
only=("$@")
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
[ "$mode" = run ] || {
        echo "usage: $0 prepare|run [BUILD] [TEST...]" >&2
        echo "  GMD_BENCH=\"alloc swap release\" (default) picks the benchmarks" >&2
        exit 2
}

OUT=${OUT:-$PWD/gpu-suite-out}
mkdir -p "$OUT"
log="$OUT/gpu-suite.log"
json="$OUT/gpu-suite.json"
: >"$log"
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GMD_DAEMON="$build/daemon/gpu-memd"
export GMD_BUILD="$build"
# The GPU machine's python3 is the one with PyTorch; gpumem.torch finds the
# shim of this build.
export GPU_MEMD_TORCH_LIB="$build/client/torch/libgpumem_torch.so.0"
# CUDA's ordinals in nvidia-smi's (PCI) order, for the daemons, the tests
# and the benchmarks alike (see the top).
export CUDA_DEVICE_ORDER=${CUDA_DEVICE_ORDER:-PCI_BUS_ID}

# GMD_SANDBOX=1: every daemon under unit_sandbox (see the top).
sandbox=false
if [ "${GMD_SANDBOX:-0}" = 1 ]; then
        launcher="$build/tests/sandbox/unit_sandbox"
        wrapper="$OUT/gpu-memd-sandboxed"
        [ -x "$launcher" ] || { echo "GMD_SANDBOX=1: no $launcher in the build" | tee -a "$log" >&2; exit 2; }
        echo "=== sandbox: unit_sandbox --probe" | tee -a "$log"
        "$launcher" --probe ${GMD_SANDBOX_OPTS:-} >>"$log" 2>&1
        rc=$?
        if [ $rc -ne 0 ]; then
                echo "=== sandbox: probe failed (rc $rc): not running the suite unconfined" | tee -a "$log" >&2
                exit 2
        fi
        probe_lines=$(wc -l <"$log")
        : >"$OUT/sandbox-starts.log"
        cat >"$wrapper" <<EOF
#!/bin/sh
# gpu-memd under the unit's confinement (scripts/gpu-suite.sh, GMD_SANDBOX=1)
echo "\$(date +%T.%N) pid \$\$: \$*" >>"$OUT/sandbox-starts.log"
exec "$launcher" ${GMD_SANDBOX_OPTS:-} -- "$build/daemon/gpu-memd" "\$@"
EOF
        chmod 755 "$wrapper"
        export GMD_DAEMON="$wrapper"
        sandbox=true
        echo "=== sandbox: GMD_SANDBOX=1: every gpu-memd started through GMD_DAEMON=$wrapper (unit_sandbox ${GMD_SANDBOX_OPTS:-}-- gpu-memd)" | tee -a "$log"
fi

nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed" >>"$OUT/nvidia-smi.txt"
nvidia-smi topo -m >>"$OUT/nvidia-smi.txt" 2>&1
nvidia-smi -L >>"$log" 2>&1
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
echo "=== $gpus GPU(s) on the machine; CUDA_DEVICE_ORDER=$CUDA_DEVICE_ORDER, CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-(unset)}" | tee -a "$log"

src=$(cd "$(dirname "$0")/.." && pwd)
failed=0
entries=()
for t in "$build"/tests/gpu/test_* "$src"/tests/gpu/test_*.py; do
        [ -f "$t" ] || continue
        case $t in
        *test_offload.py | *test_spill.py) cmd=(python3 "$t" ${GMD_OFFLOAD_QUICK:+--quick}) ;;
        *.py) cmd=(python3 "$t") ;;
        *) [ -x "$t" ] || continue; cmd=("$t") ;;
        esac
        name=$(basename "$t")
        if [ ${#only[@]} -gt 0 ] && [[ " ${only[*]} " != *" $name "* ]]; then
                continue
        fi
        echo "=== $name" | tee -a "$log"
        start=$(date +%s.%N)
        timeout 300 "${cmd[@]}" >>"$log" 2>&1
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

# The Python package on the cuda backend (tests/python/test_cuda.py) with
# this machine's python3 and torch, from the source tree beside this script.
# It exits 0 when it skips (no torch, no GPU) and says so in a SKIP: line.
name=python.test_cuda
if [ ${#only[@]} -eq 0 ] || [[ " ${only[*]} " == *" $name "* ]]; then
        root=$(cd "$(dirname "$0")/.." && pwd)
        echo "=== $name" | tee -a "$log"
        start=$(date +%s.%N)
        py_out=$(cd "$root/tests/python" && PYTHONPATH="$root/client/python" \
                GPUMEM_LIBRARY="$build/client/libgpumem.so.0" \
                timeout 300 python3 -m unittest -v test_cuda 2>&1)
        rc=$?
        echo "$py_out" >>"$log"
        secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
        if [ $rc -ne 0 ]; then result=fail; failed=$((failed + 1))
        elif grep -q "^SKIP: $name" <<<"$py_out"; then result=skip
        else result=pass; fi
        echo "=== $name: $result (rc $rc, ${secs}s)" | tee -a "$log"
        entries+=("{\"name\": \"$name\", \"result\": \"$result\", \"rc\": $rc, \"seconds\": $secs}")
fi

benches=${GMD_BENCH-alloc swap release torch}
bench_rc=null
swap_rc=null
release_rc=null
map_rc=null
notify_rc=null
pin_rc=null
torch_rc=null
offload_rc=null
cotenancy_rc=null
peer_rc=null
# bench_py NAME LIMIT [ARGS...]: bench/torch/bench_NAME.py for at most LIMIT
# seconds, its JSON, log and summary under $OUT as NAME_bench.*, the summary
# into the suite's log too; its exit status in $py_rc.
bench_py() {
        local name=$1 limit=$2
        shift 2
        PYTHONUNBUFFERED=1 timeout "$limit" python3 "$src/bench/torch/bench_$name.py" \
                --build "$build" --json "$OUT/${name}_bench.json" \
                --log "$OUT/${name}_bench.log" "$@" \
                >"$OUT/${name}_bench.txt" 2>>"$log"
        py_rc=$?
        cat "$OUT/${name}_bench.txt" >>"$log"
        echo "=== ${name}_bench: rc $py_rc" | tee -a "$log"
}
for b in $benches; do
        case $b in
        cotenancy)
                echo "=== cotenancy_bench" | tee -a "$log"
                bench_py cotenancy 660 ${GMD_COTENANCY_QUICK:+--quick}
                cotenancy_rc=$py_rc
                continue ;;
        offload)
                echo "=== offload_bench" | tee -a "$log"
                bench_py offload 900 ${GMD_OFFLOAD_QUICK:+--quick}
                offload_rc=$py_rc
                continue ;;
        torch)
                echo "=== torch_bench" | tee -a "$log"
                timeout 120 python3 "$src/bench/torch/probe_torch.py" \
                        >"$OUT/torch_probe.json" 2>>"$log"
                bench_py torch 900 ${GMD_TORCH_ROUNDS:+--rounds "$GMD_TORCH_ROUNDS"}
                torch_rc=$py_rc
                continue ;;
        esac
        bench="$build/bench/${b}_bench"
        [ -x "$bench" ] || continue
        echo "=== ${b}_bench" | tee -a "$log"
        timeout 300 "$bench" --json "$OUT/${b}_bench.json" >"$OUT/${b}_bench.txt" 2>>"$log"
        rc=$?
        cat "$OUT/${b}_bench.txt" >>"$log"
        echo "=== ${b}_bench: rc $rc" | tee -a "$log"
        case $b in
        alloc) bench_rc=$rc ;;
        swap) swap_rc=$rc ;;
        release) release_rc=$rc ;;
        map) map_rc=$rc ;;
        notify) notify_rc=$rc ;;
        pin) pin_rc=$rc ;;
        peer) peer_rc=$rc ;;
        esac
done

sandbox_starts=null
if [ "$sandbox" = true ]; then
        sandbox_starts=$(wc -l <"$OUT/sandbox-starts.log")
        # Refused calls in the daemons' logs and the tests' output after
        # the probe (not the launcher's own lines about limits).
        eperm=$(tail -n +$((probe_lines + 1)) "$log" | grep -v 'unit_sandbox: ' | grep -c 'Operation not permitted')
        echo "=== sandbox: $sandbox_starts gpu-memd starts under unit_sandbox ($OUT/sandbox-starts.log); \"Operation not permitted\" lines after the probe: $eperm" | tee -a "$log"
fi

{
        printf '{"gpu": "%s",\n "gpus": %d,\n "sandbox": %s, "sandbox_starts": %s,\n "tests": [' "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | paste -sd, -)" "$gpus" "$sandbox" "$sandbox_starts"
        sep=""
        for e in "${entries[@]}"; do printf '%s\n  %s' "$sep" "$e"; sep=","; done
        printf '],\n "failed": %d,\n "alloc_bench_rc": %s,\n "swap_bench_rc": %s,\n "release_bench_rc": %s,\n "map_bench_rc": %s,\n "notify_bench_rc": %s,\n "pin_bench_rc": %s,\n "torch_bench_rc": %s,\n "offload_bench_rc": %s,\n "cotenancy_bench_rc": %s,\n "peer_bench_rc": %s}\n' \
                "$failed" "$bench_rc" "$swap_rc" "$release_rc" "$map_rc" "$notify_rc" "$pin_rc" "$torch_rc" "$offload_rc" "$cotenancy_rc" "$peer_rc"
} >"$json"
cat "$json"
exit $((failed > 0))
