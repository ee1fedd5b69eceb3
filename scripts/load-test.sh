#!/bin/sh
# load-test.sh — the daemon's load test: a sim gpu-memd with the default
# [limits], CLIENTS ordinary clients allocating and freeing for SECONDS,
# and (unless HOSTILE=0) one hostile user: a connection flood, an fd flood
# of tiny buffers, a flood of unread status replies and a request for the
# whole pool that waits forever. It prints what one more client, the
# probe (root, an administrator), waits for idle, under that load and idle
# again: the summary `gpu-memctl status` asks for, a STATUS_BUFFERS
# listing, an admin verb (priority), a whole `gpu-memctl status` (a new
# connection, its hello, the summary) and its own allocation and free,
# each at p50, p99, p99.9 and max, and whether the targets were met
# (status p99 within 50 ms, allocation and free p99.9 within 5 ms); what the hostile user got, how the CPUs
# were shared (the daemon, the load clients, the hostile user, the probe,
# other processes on the machine), and the daemon's peak memory and log
# size. JSON=FILE writes the probe's figures there too. Not part of
# `make test` (minutes).
#
# The load clients keep a cache of idle mappings as libgpumem ships
# (CACHE=1, $GPU_MEMD_CACHE unset), so most of their allocations and
# frees never reach the daemon and the rest are returns and misses;
# CACHE=0 turns it off, every allocation a round trip. The probe's own
# is always off: it times round trips.
#
# How the CPU is shared: the daemon cannot stop other processes from
# using the CPUs, and on a small machine 64 busy clients and a hostile
# user take them whatever the daemon does. So the loaded run is made twice
# (NICE, one phase per value): first with the load clients and the hostile
# user at nice 19 (the daemon and the probe at nice 0, as a service and an
# interactive user would be), which shows what the daemon does with its
# own time; then with every process at nice 0, the unpinned figure, which
# adds plain CPU contention. Nothing is pinned to a CPU and no cgroup is
# used. Both phases are reported, each against the idle figure, with how
# long the daemon's loop thread and the probe's threads waited for a CPU
# (runnable, not running: the kernel's schedstat run delay) and the CPU
# other processes on the machine took meanwhile.
#
# Who is who: as root, three users, as on a shared machine: the probe is
# root, the load clients uid 65533 (LOAD_UID=0 makes them root too, the
# probe's own user) and the hostile user uid 65534. The daemon bounds what
# each user takes (connections, fds, reply bytes, waiting requests) and
# shares its loop thread between users by turns (daemon/core/users.h), so
# the probe's request waits for at most a turn of each busy user, not for
# everything 64 clients and a hostile user sent. With LOAD_UID=0 the
# probe is one of the 65 clients of one user and waits behind that user's
# own requests as well. Not as root, every process is the caller's user.
#
#   scripts/load-test.sh                       # 64 clients x 60 s, hostile
#   CLIENTS=16 SECONDS=15 scripts/load-test.sh # smaller
#   NICE=0 scripts/load-test.sh                # the unpinned phase only
#   HOSTILE=0 scripts/load-test.sh             # no hostile user
#   HOSTILE=conn,reply scripts/load-test.sh    # some of its attacks only
#   LOAD_UID=0 scripts/load-test.sh            # the probe shares its user
#   CACHE=0 scripts/load-test.sh               # load clients without cache
#   JSON=load.json scripts/load-test.sh        # the figures as JSON too
#
# With the default [limits] (max_clients_per_user 64) at most 64 load
# clients connect as one user. Needs a built tree (make).
set -eu

BUILD=${BUILD:-build}
CLIENTS=${CLIENTS:-64}
SECONDS_=${SECONDS:-60}
IDLE=${IDLE:-10}
HOSTILE=${HOSTILE:-1}
NICE=${NICE:-19,0}
CACHE=${CACHE:-1}
JSON=${JSON:-}

for f in "$BUILD/daemon/gpu-memd" "$BUILD/tests/load/load_bench"; do
        [ -x "$f" ] || { echo "load-test: $f is missing; run make first" >&2; exit 1; }
done
dir=$(mktemp -d /tmp/gmd-load-XXXXXX)
chmod 0711 "$dir"
cat >"$dir/gpu-memd.conf" <<CONF
[daemon]
backend = sim
socket_mode = 0666
[sim]
vram = 1G
granularity = 4K
CONF
"$BUILD/daemon/gpu-memd" --config "$dir/gpu-memd.conf" --socket "$dir/gpu-memd.sock" \
        2>"$dir/gpu-memd.log" &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do [ -S "$dir/gpu-memd.sock" ] && break; sleep 0.1; done

case $HOSTILE in
0) flag="" ;;
1) flag="--hostile" ;;
*) flag="--hostile=$HOSTILE" ;;
esac
echo "load-test: $CLIENTS clients x ${SECONDS_} s${flag:+, a hostile user}, idle ${IDLE} s first;" \
     "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$CACHE" = 0 ]; then
        export GPU_MEMD_CACHE=0
else
        unset GPU_MEMD_CACHE
fi
GPU_MEMD_SOCKET="$dir/gpu-memd.sock" "$BUILD/tests/load/load_bench" \
        --clients "$CLIENTS" --seconds "$SECONDS_" --idle "$IDLE" $flag --nice "$NICE" \
        ${LOAD_UID:+--load-uid "$LOAD_UID"} ${JSON:+--json "$JSON"} --daemon-pid $daemon
echo "daemon: peak RSS $(awk '/VmHWM/ {print $2, $3}' /proc/$daemon/status)," \
     "$(wc -l <"$dir/gpu-memd.log") log lines," \
     "$(grep -c 'refusing a connection' "$dir/gpu-memd.log" || true) refusals logged," \
     "$(grep -c 'not reading replies\|do not read their replies' "$dir/gpu-memd.log" || true) reply floods cut"
kill -0 $daemon && echo "daemon: still running"
