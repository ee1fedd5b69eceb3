#!/bin/sh
# fuzz.sh [SECONDS] — fuzz the wire decoder (tests/fuzz/fuzz_wire.c) with
# libFuzzer, ASan and UBSan for SECONDS (default 60), starting from the seed
# corpus in tests/fuzz/corpus. `make fuzz` runs it for CI's minute;
# `make fuzz FUZZ_SECONDS=3600` for an hour.
#
# It builds in its own folder (FUZZ_BUILD, default build-fuzz) with clang,
# only the fuzz target, against protobuf-c compiled from the source of the
# installed version (scripts/protobuf-c-source.sh), so the payload decoders
# are covered. Inputs that add coverage go to FUZZ_BUILD/fuzz/corpus (never
# into the tree); a crash leaves its input in FUZZ_BUILD/fuzz/artifacts and
# the run fails, saying how to replay it.
#
# The run fails too when the decoders are not covered: fewer than
# FUZZ_MIN_EDGES edges (default 400). The seeds reach about 490 of the
# target's 2,150 instrumented edges (the rest of protobuf-c decodes types
# gpumem.proto does not use); a target linked against an uninstrumented
# protobuf-c sees only the header checks, about 180.
#
# Adding new finds to the seeds (keeps only inputs that add coverage):
#   build-fuzz/tests/fuzz/fuzz_wire -merge=1 tests/fuzz/corpus build-fuzz/fuzz/corpus
set -eu
cd "$(dirname "$0")/.."

seconds=${1:-60}
build=${FUZZ_BUILD:-build-fuzz}
min_edges=${FUZZ_MIN_EDGES:-400}
werror=${GMD_WERROR:-OFF}

sh scripts/deps.sh
sh scripts/protobuf-c-source.sh "$build/protobuf-c-src"
CC=clang cmake -S . -B "$build" -DGMD_FUZZ=ON -DGMD_WITH_CUDA=OFF \
        -DGMD_WERROR="$werror" \
        -DGMD_PROTOBUFC_SOURCE="$(pwd)/$build/protobuf-c-src" >/dev/null
cmake --build "$build" --target fuzz_wire -j "$(nproc 2>/dev/null || echo 2)"

out=$build/fuzz
mkdir -p "$out/corpus" "$out/artifacts"
log=$out/last-run.log
echo "fuzz_wire: ${seconds}s, ASan+UBSan, seeds from tests/fuzz/corpus (log: $log)"
status=0
"$build/tests/fuzz/fuzz_wire" -max_total_time="$seconds" -max_len=4096 \
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$out/artifacts/" \
        "$out/corpus" tests/fuzz/corpus >"$log" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
        tail -n 60 "$log"
        echo "fuzz_wire FAILED (exit $status). The input is in $out/artifacts/;" \
             "replay it with: $build/tests/fuzz/fuzz_wire FILE" \
             "(or build/tests/fuzz/fuzz_wire_driver FILE under gcc)" >&2
        exit 1
fi
done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1)
edges=$(echo "$done_line" | sed -n 's/.* cov: \([0-9]*\) .*/\1/p')
runs=$(sed -n 's/^stat::number_of_executed_units:[[:space:]]*//p' "$log")
echo "fuzz_wire: $runs inputs in ${seconds}s, $edges edges covered, no finding"
if [ -z "$edges" ] || [ "$edges" -lt "$min_edges" ]; then
        echo "fuzz_wire covered ${edges:-no} edges, fewer than $min_edges:" \
             "the protobuf-c decoders are not instrumented (is the target" \
             "linked against the system's libprotobuf-c.a?)" >&2
        exit 1
fi
