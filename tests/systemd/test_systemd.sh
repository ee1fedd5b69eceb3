#!/bin/bash
# test_systemd — gpu-memd's restart recovery under a real systemd: the
# project's own units (gpu-memd.service as the build generates it from
# systemd/gpu-memd.service.in, gpu-memd.socket, the sysusers and tmpfiles
# entries), socket activation as shipped, `[restart] keep = auto` picking
# systemd's fd store, and live clients holding checksummed buffers, some
# of them paged out to host memory, through
#   1. `systemctl restart gpu-memd`: the store is handed to the next run,
#      every buffer is claimed back, every byte checks, the accounting
#      equals what the clients hold;
#   2. `kill -9` of the main process: Restart=on-failure starts it again
#      with the store: the same checks;
#   3. `systemctl stop` then `start`: systemd 252 empties the store when
#      the service stops, so the next run starts afresh and each client
#      is told, at its next call, "gpu-memd restarted without keeping this
#      client's buffers (it kept none of them: a fresh start); buffer N is
#      lost" (GMD_EREVOKED), as docs/operators.md says.
#
# Where it runs: as root on a machine without systemd as PID 1 (CI's
# Firecracker VMs), with systemd 252 at /lib/systemd/systemd (Debian 12).
# systemd boots as PID 1 of new PID, mount and cgroup namespaces, into a
# target of this test's own (the socket and nothing else: never the
# default target, never sysinit.target, so no tmpfiles, udev or other
# services run). In that mount namespace every mount of the host is
# read-only; /run, /tmp, /var/tmp and /var/log/journal are private tmpfs;
# /etc is an overlay whose changes (the gpu-memd user, when the host has
# none) stay in the namespace; /dev/console is a file. The whole namespace
# is killed at the end, failed or not, and by a timeout if this script is
# killed first. Exit 77 (skipped, one line) where systemd cannot be booted
# so: not root, no unshare/nsenter, no /lib/systemd/systemd, no cgroup2.
# The rest of restart recovery is covered without systemd in CI by
# tests/integration/test_restart (100 SIGKILLs under live clients, with
# the keeper) and the fd store's protocol by tests/unit/test_fdstore.
#
# ctest runs it (tests/systemd/CMakeLists.txt) as
#   test_systemd.sh --daemon GPU-MEMD --client GMD_RESTART_CLIENT
#                   --probe GMD_SD_PROBE --service GENERATED_UNIT
#                   --units SOURCE/systemd
# GMD_SD_KEEP=1 keeps the namespace's console and journal in a folder
# named at the end. The script runs itself three ways: as above (outside),
# `boot` (PID 1 of the namespace, before it becomes systemd) and `drive`
# (inside, the test proper, through nsenter).
set -u

SELF=$(readlink -f "$0")
STAGE=/run/gmd-test              # inside the namespace only
LIMIT_S=${GMD_SD_LIMIT_S:-150}    # the namespace dies after this, whatever happens

log() { echo "test_systemd: $*"; }
skip() { echo "test_systemd: SKIPPED: $*"; exit 77; }
die() { echo "test_systemd: FAIL: $*"; exit 1; }

# ---- inside: PID 1 of the namespace, before exec'ing systemd -----------
boot() {
        local m
        set -e
        # What the host shares with this namespace is made read-only
        # (per mount, in this namespace only), so nothing run here can
        # write to the host's files: the build tree, /tmp, /etc, /var.
        mount -t tmpfs -o mode=0755 tmpfs /run
        mkdir -p $STAGE/bin $STAGE/units $STAGE/etc.upper $STAGE/etc.work
        install -m 0755 "$GMD_SD_DAEMON" $STAGE/bin/gpu-memd
        install -m 0755 "$GMD_SD_CLIENT" $STAGE/bin/gmd_restart_client
        install -m 0755 "$GMD_SD_PROBE" $STAGE/bin/gmd_sd_probe
        install -m 0755 "$SELF" $STAGE/bin/test_systemd.sh
        install -m 0644 "$GMD_SD_SERVICE" "$GMD_SD_UNITS/gpu-memd.socket" \
                "$GMD_SD_UNITS/gpu-memd.sysusers" \
                "$GMD_SD_UNITS/gpu-memd.tmpfiles" $STAGE/units/
        set +e
        findmnt -rn -o TARGET | while read -r m; do
                m=$(printf '%b' "$m")
                case "$m" in
                /proc|/proc/*|/run|/run/*|/dev/shm|/dev/shm/*|/dev/pts|/dev/mqueue) continue ;;
                esac
                mount -o remount,bind,ro "$m" 2>/dev/null ||
                        echo "test_systemd: cannot make $m read-only here" >&2
        done
        # Nothing is booted over a writable host root.
        findmnt -n -o OPTIONS / | grep -qE '(^|,)ro(,|$)' ||
                { echo "test_systemd: / is still writable here: not booting" >&2; exit 1; }
        # /proc/sys as systemd-nspawn leaves it: read-only.
        mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys
        [ ! -e /proc/sysrq-trigger ] ||
                { mount --bind /proc/sysrq-trigger /proc/sysrq-trigger &&
                  mount -o remount,bind,ro /proc/sysrq-trigger; }
        set -e
        mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
        mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /var/tmp
        [ ! -d /var/log/journal ] || mount -t tmpfs tmpfs /var/log/journal
        mount -t overlay overlay \
                -o lowerdir=/etc,upperdir=$STAGE/etc.upper,workdir=$STAGE/etc.work /etc
        # The journal: in memory, the namespace's own lines only (not the
        # host's kernel log), none dropped for their rate.
        mkdir -p /etc/systemd/journald.conf.d
        printf '[Journal]\nStorage=volatile\nReadKMsg=no\nRateLimitBurst=0\nRuntimeMaxUse=64M\n' \
                > /etc/systemd/journald.conf.d/50-gmd-test.conf
        : > $STAGE/console
        mount --bind $STAGE/console /dev/console
        # The cgroup namespace's root, as cgroup2, is what this systemd
        # manages; it runs in a child of it (so the root holds no process
        # of its own once unshare's is gone).
        umount -R -l /sys/fs/cgroup 2>/dev/null || true
        mount -t cgroup2 cgroup2 /sys/fs/cgroup
        mkdir /sys/fs/cgroup/payload
        echo $$ > /sys/fs/cgroup/payload/cgroup.procs
        # The user and the runtime folder, from the project's own entries.
        systemd-sysusers $STAGE/units/gpu-memd.sysusers
        systemd-tmpfiles --create $STAGE/units/gpu-memd.tmpfiles
        units
        exec >> $STAGE/console 2>&1
        exec env -i container=gmd-test PATH=/usr/sbin:/usr/bin:/sbin:/bin \
                /lib/systemd/systemd --system --unit=gmd-test.target \
                --log-target=journal --log-level=info --show-status=no
}

# The units: the project's, unchanged, plus drop-ins that change only what
# this namespace needs (each says why), and a target of the test's own.
units() {
        local d=/run/systemd/system
        mkdir -p $d/gpu-memd.service.d $d/gpu-memd.socket.d
        cp $STAGE/units/gpu-memd.service $STAGE/units/gpu-memd.socket $d/
        cat > $d/gmd-test.target <<EOF
[Unit]
Description=gpu-memd under systemd: the test's target (its socket, the journal)
DefaultDependencies=no
Wants=gpu-memd.socket systemd-journald.service
EOF
        cat > $d/gpu-memd.socket.d/50-test.conf <<EOF
# Default dependencies pull sysinit.target, which here would run udev's
# coldplug, tmpfiles and the rest of a boot against the host.
[Unit]
DefaultDependencies=no
EOF
        cat > $d/gpu-memd.service.d/50-test.conf <<EOF
# As the socket's: no sysinit.target.
[Unit]
DefaultDependencies=no

# The build's daemon on the sim backend, with the test's configuration.
[Service]
ExecStart=
ExecStart=$STAGE/bin/gpu-memd --backend sim --config $STAGE/gpu-memd.conf
EOF
        # Small pools: three clients of 8 buffers of 2-6 MiB (about 96 MiB)
        # on 64 MiB of VRAM keep about a third of them on host memory.
        cat > $STAGE/gpu-memd.conf <<EOF
[daemon]
backend = sim
[sim]
devices = 1
vram = 64M
granularity = 2M
copy_rate = 2G
[pools]
host_limit = 512M
host_stock = 64M
[swap]
chunk_size = 2M
[restart]
keep = auto
claim_timeout_s = 30
EOF
        chmod 0644 $STAGE/gpu-memd.conf
}

# ---- inside: the test proper, run through nsenter ----------------------
N_CLIENTS=3
N_BUFFERS=8
CLIENT_PIDS=()

sctl() { systemctl --no-pager "$@"; }

# The journal of the run with main pid $1.
journal_of() { journalctl --no-pager -o cat _SYSTEMD_UNIT=gpu-memd.service _PID="$1"; }

# wait_for SECONDS COMMAND...: until COMMAND succeeds.
wait_for() {
        local until=$((SECONDS + $1))
        shift
        while ! "$@" >/dev/null 2>&1; do
                [ $SECONDS -lt $until ] || return 1
                sleep 0.1
        done
}

main_pid() { sctl show -P MainPID gpu-memd.service; }
store_n() { sctl show -P NFileDescriptorStore gpu-memd.service; }

# A main pid other than $1, up and READY (Type=notify: active only then).
new_pid_ready() {
        local pid
        [ "$(sctl show -P ActiveState gpu-memd.service)" = active ] || return 1
        pid=$(main_pid)
        [ "$pid" != 0 ] && [ "$pid" != "$1" ]
}

journal_has() { journal_of "$1" | grep -qF -- "$2"; }

fail_dump() {
        log "FAIL: $*"
        log "--- systemctl status gpu-memd.service"
        sctl status gpu-memd.service gpu-memd.socket 2>&1 | tail -n 25
        log "--- journal (gpu-memd)"
        journalctl --no-pager -u gpu-memd.service -o short-monotonic | tail -n 60
        for f in $STAGE/client.*; do
                [ -e "$f" ] && { log "--- $f"; tail -n 5 "$f"; }
        done
        exit 1
}

start_clients() {          # $1: a seed base
        CLIENT_PIDS=()
        for i in $(seq 0 $((N_CLIENTS - 1))); do
                $STAGE/bin/gmd_restart_client $(($1 + i)) $N_BUFFERS \
                        > $STAGE/client.$i 2>&1 &
                CLIENT_PIDS+=($!)
        done
        for i in $(seq 0 $((N_CLIENTS - 1))); do
                wait_for 30 grep -q '^READY' $STAGE/client.$i ||
                        fail_dump "client $i did not get its buffers"
        done
}

clients_alive() {
        for i in "${!CLIENT_PIDS[@]}"; do
                kill -0 "${CLIENT_PIDS[$i]}" 2>/dev/null ||
                        fail_dump "client $i ended: $(tail -n 1 $STAGE/client.$i)"
                ! grep -q '^FAIL' $STAGE/client.$i ||
                        fail_dump "client $i: $(grep '^FAIL' $STAGE/client.$i)"
        done
}

# Some of the clients' bytes are on host memory: what the store must keep.
expect_paged_out() {
        local line host
        line=$($STAGE/bin/gmd_sd_probe) || fail_dump "no status: $line"
        host=$(echo "$line" | awk '{ print $6 }')
        [ "$host" -gt 0 ] || fail_dump "nothing is paged out ($line)"
        log "before: $line; $(store_n) fd(s) in systemd's store"
}

# The run with main pid $1 took over the state: the journal says so, and
# that every client took its buffers back. One buffer a client may not
# claim: the one whose alloc the restart cut off after the record named
# it (the client sends the alloc again and gets a new one; the old one is
# freed when the claims end, as after any kill), so "lost" is at most one
# per client, each having at most one call in flight. Its bytes and the
# accounting are checked at the clients' end (finish_clients).
expect_restored() {
        local pid=$1 line lost
        wait_for 30 journal_has "$pid" "restart: restore done" ||
                fail_dump "run $pid: no \"restore done\" in the journal"
        journal_has "$pid" "restart: state is kept across restarts by systemd; an earlier gpu-memd left some" ||
                fail_dump "run $pid was not passed the fd store"
        line=$(journal_of "$pid" | grep -F "restart: took over the state")
        [ -n "$line" ] || fail_dump "run $pid: no \"took over\" line"
        log "run $pid: ${line#restart: }"
        line=$(journal_of "$pid" | grep -F "restart: restore done")
        log "run $pid: ${line#restart: }"
        [ "$(journal_of "$pid" | grep -cE "restart: client [0-9]+ \(pid [0-9]+\) took back session")" = $N_CLIENTS ] ||
                fail_dump "run $pid: not every client took its buffers back"
        lost=$(echo "$line" | sed -nE 's/.*buffer\(s\) taken back .*, ([0-9]+) lost$/\1/p')
        [ "$lost" = 0 ] ||
                fail_dump "run $pid did not give everything back: $line"
}

# Stop the clients: each checks every byte once more and says what it
# holds; the daemon's accounting must be the same.
finish_clients() {
        local want_buffers=0 want_bytes=0 line probe
        for i in "${!CLIENT_PIDS[@]}"; do kill -TERM "${CLIENT_PIDS[$i]}"; done
        for i in "${!CLIENT_PIDS[@]}"; do
                wait_for 60 grep -qE '^(DONE|FAIL)' $STAGE/client.$i ||
                        fail_dump "client $i did not finish"
                line=$(grep -E '^(DONE|FAIL)' $STAGE/client.$i | head -n 1)
                case "$line" in DONE*) ;; *) fail_dump "client $i: $line" ;; esac
                set -- $line
                want_buffers=$((want_buffers + $3))
                want_bytes=$((want_bytes + $4))
                log "client $i: $2 operations, every byte checked, $3 buffers, $4 bytes"
        done
        probe=$($STAGE/bin/gmd_sd_probe) || fail_dump "no status: $probe"
        set -- $probe
        [ "$2" = "$want_buffers" ] && [ "$4" = "$want_bytes" ] ||
                fail_dump "the daemon counts $2 buffers, $4 bytes; the clients hold $want_buffers, $want_bytes"
        [ "$8" = 1 ] || fail_dump "the daemon says it restored nothing ($probe)"
        log "accounting: the daemon counts $2 buffers, $4 bytes: what the clients hold"
        for i in "${!CLIENT_PIDS[@]}"; do kill -USR1 "${CLIENT_PIDS[$i]}"; done
        for i in "${!CLIENT_PIDS[@]}"; do
                wait "${CLIENT_PIDS[$i]}" || fail_dump "client $i exited $?"
        done
}

drive() {
        local t0=$SECONDS pid old n_restarts line lost
        wait_for 30 sctl is-active gmd-test.target ||
                { cat $STAGE/console; die "systemd did not reach gmd-test.target"; }
        log "systemd $(sctl --version | head -n 1 | cut -d' ' -f2) is PID 1 of the namespace; up in $((SECONDS - t0)) s"
        [ "$(sctl is-active gpu-memd.socket)" = active ] || fail_dump "the socket is not listening"
        [ "$(sctl is-active gpu-memd.service)" = inactive ] ||
                fail_dump "gpu-memd started before any client came"
        getent passwd gpu-memd >/dev/null || fail_dump "no gpu-memd user"

        # 1. systemctl restart under live clients.
        start_clients 100
        pid=$(main_pid)
        [ "$pid" != 0 ] || fail_dump "socket activation did not start gpu-memd"
        [ "$(ps -o user= -p "$pid")" = gpu-memd ] || fail_dump "gpu-memd does not run as gpu-memd"
        # The unit's confinement took: no capabilities, no_new_privs, the
        # seccomp filter, a mount namespace of its own (PrivateTmp= and the
        # Protect*= options). Its open-file limit is the host's hard limit
        # where root lacks CAP_SYS_RESOURCE (CI's VMs): systemd sets the
        # closest it can to LimitNOFILE=.
        grep -q '^CapEff:[[:space:]]*0*$' /proc/$pid/status || fail_dump "gpu-memd has capabilities"
        grep -q '^NoNewPrivs:[[:space:]]*1$' /proc/$pid/status || fail_dump "no NoNewPrivileges="
        grep -q '^Seccomp:[[:space:]]*2$' /proc/$pid/status || fail_dump "no SystemCallFilter="
        [ "$(readlink /proc/$pid/ns/mnt)" != "$(readlink /proc/1/ns/mnt)" ] ||
                fail_dump "no mount namespace of its own"
        log "run $pid: user gpu-memd, no capabilities, seccomp, own mounts; $(journal_of "$pid" | grep -F "open-file limit")"
        journal_has "$pid" "restart: state is kept across restarts by systemd" ||
                fail_dump "keep = auto did not pick systemd's fd store"
        sleep 1
        expect_paged_out
        sctl restart gpu-memd.service || fail_dump "systemctl restart failed"
        wait_for 20 new_pid_ready "$pid" || fail_dump "no new run after systemctl restart"
        old=$pid
        pid=$(main_pid)
        log "systemctl restart: run $old -> $pid"
        journal_has "$old" "restart: the state is left for the next gpu-memd" ||
                fail_dump "run $old did not stop for a restart"
        expect_restored "$pid"
        sleep 0.5
        clients_alive
        finish_clients

        # 2. kill -9: Restart=on-failure, with the store.
        start_clients 200
        sleep 1
        expect_paged_out
        n_restarts=$(sctl show -P NRestarts gpu-memd.service)
        old=$pid
        kill -KILL "$pid"
        wait_for 20 new_pid_ready "$old" || fail_dump "Restart=on-failure did not start it again"
        pid=$(main_pid)
        [ "$(sctl show -P NRestarts gpu-memd.service)" -gt "$n_restarts" ] ||
                fail_dump "the new run was not an automatic restart"
        log "kill -9: run $old -> $pid (Restart=on-failure)"
        expect_restored "$pid"
        sleep 0.5
        clients_alive
        finish_clients

        # 3. stop, then start: the store goes with the stop.
        start_clients 300
        sleep 0.5
        expect_paged_out
        old=$pid
        sctl stop gpu-memd.service 2>/dev/null || fail_dump "systemctl stop failed"
        # The clients, reconnecting, may start it again at once through the
        # socket; either way this start finds it running afresh.
        sctl start gpu-memd.service || fail_dump "systemctl start failed"
        wait_for 20 new_pid_ready "$old" || fail_dump "no run after stop and start"
        pid=$(main_pid)
        log "systemctl stop, start: run $old -> $pid"
        journal_has "$pid" "restart: state is kept across restarts by systemd" ||
                fail_dump "run $pid does not keep its state"
        ! journal_has "$pid" "an earlier gpu-memd left some" ||
                fail_dump "run $pid was passed a store after a stop"
        ! journal_has "$pid" "took over the state" ||
                fail_dump "run $pid took over state after a stop"
        for i in "${!CLIENT_PIDS[@]}"; do
                wait "${CLIENT_PIDS[$i]}" 2>/dev/null
                line=$(grep '^FAIL' $STAGE/client.$i | head -n 1)
                case "$line" in
                *"gpu-memd restarted without keeping this client's buffers (it kept none of them: a fresh start); buffer "*" is lost")
                        ;;
                *) fail_dump "client $i after a stop and a start: ${line:-no error}" ;;
                esac
        done
        log "clients after a stop and a start: ${line#FAIL }"
        line=$($STAGE/bin/gmd_sd_probe) || fail_dump "no status: $line"
        set -- $line
        [ "$2" = 0 ] && [ "$8" = 0 ] || fail_dump "after the clients left: $line"
        log "after they left: $line"
        log "PASS in $((SECONDS - t0)) s"
}

# ---- outside ---------------------------------------------------------------
TIMEOUT_PID=
UNSHARE_PID=
NS_PID=
CG=

wait_gone() {
        local i
        for i in $(seq 100); do
                kill -0 "$1" 2>/dev/null || return 0
                sleep 0.05
        done
        log "process $1 is still there"
}

cleanup() {
        local i
        if [ -n "$TIMEOUT_PID" ]; then
                # Every process of the namespace dies with its PID 1, which
                # dies with unshare (--kill-child).
                [ -z "$NS_PID" ] || kill -KILL "$NS_PID" 2>/dev/null
                [ -z "$UNSHARE_PID" ] || kill -KILL "$UNSHARE_PID" 2>/dev/null
                kill -KILL "$TIMEOUT_PID" 2>/dev/null
                wait "$TIMEOUT_PID" 2>/dev/null
                [ -z "$UNSHARE_PID" ] || wait_gone "$UNSHARE_PID"
                [ -z "$NS_PID" ] || wait_gone "$NS_PID"
        fi
        [ -n "$CG" ] && [ -d "$CG" ] || return 0
        for i in $(seq 50); do
                find "$CG" -depth -type d -exec rmdir {} + 2>/dev/null
                [ -d "$CG" ] || return 0
                sleep 0.1
        done
        log "could not remove $CG"
}

outside() {
        local cg2 rc child t0=$SECONDS
        while [ $# -gt 0 ]; do
                case "$1" in
                --daemon) GMD_SD_DAEMON=$2 ;;
                --client) GMD_SD_CLIENT=$2 ;;
                --probe) GMD_SD_PROBE=$2 ;;
                --service) GMD_SD_SERVICE=$2 ;;
                --units) GMD_SD_UNITS=$2 ;;
                *) echo "usage: $0 --daemon P --client P --probe P --service P --units DIR"; exit 2 ;;
                esac
                shift 2
        done
        [ "$(id -u)" = 0 ] || skip "needs root (boots systemd in namespaces)"
        [ -x /lib/systemd/systemd ] || skip "no /lib/systemd/systemd"
        for t in unshare nsenter findmnt pgrep systemctl journalctl systemd-sysusers systemd-tmpfiles timeout; do
                command -v $t >/dev/null || skip "no $t"
        done
        cg2=$(findmnt -rn -t cgroup2 -o TARGET | head -n 1)
        [ -n "$cg2" ] || skip "no cgroup2 hierarchy mounted"
        unshare -pfm --mount-proc true 2>/dev/null ||
                skip "cannot make PID and mount namespaces here"
        grep -qw overlay /proc/filesystems || skip "no overlayfs (the namespace's /etc)"
        export GMD_SD_DAEMON GMD_SD_CLIENT GMD_SD_PROBE GMD_SD_SERVICE GMD_SD_UNITS

        CG=$cg2/gmd-test-systemd.$$
        mkdir "$CG" || skip "cannot make a cgroup under $cg2"
        trap cleanup EXIT
        trap 'exit 1' INT TERM
        # In the new cgroup, so the namespace's cgroup root is a folder of
        # its own. timeout kills unshare (and so the namespace) even if
        # this script is killed first.
        ( echo $BASHPID > "$CG/cgroup.procs" &&
          exec timeout -s KILL $LIMIT_S unshare -C -p -m -f --mount-proc \
                --kill-child=SIGKILL "$SELF" boot ) &
        TIMEOUT_PID=$!
        # timeout's child is unshare, unshare's is PID 1 of the namespace.
        for i in $(seq 100); do
                [ -n "$UNSHARE_PID" ] || UNSHARE_PID=$(pgrep -P "$TIMEOUT_PID")
                [ -z "$UNSHARE_PID" ] || NS_PID=$(pgrep -P "$UNSHARE_PID")
                [ -n "$NS_PID" ] && break
                sleep 0.05
        done
        [ -n "$NS_PID" ] || die "the namespace did not start"
        # systemd: its own command name once it has exec'd.
        for i in $(seq 200); do
                [ "$(cat /proc/$NS_PID/comm 2>/dev/null)" = systemd ] && break
                kill -0 "$NS_PID" 2>/dev/null || die "could not boot systemd in the namespace"
                sleep 0.05
        done
        nsenter -t "$NS_PID" -m -p -C -- "$STAGE/bin/test_systemd.sh" drive
        rc=$?
        if [ -n "${GMD_SD_KEEP:-}" ]; then
                local keep
                keep=$(mktemp -d /tmp/gmd-sd-XXXXXX)
                nsenter -t "$NS_PID" -m -p -- cat $STAGE/console > "$keep/console"
                nsenter -t "$NS_PID" -m -p -- journalctl --no-pager -o short-monotonic > "$keep/journal"
                log "console and journal kept in $keep"
        fi
        log "$( [ $rc = 0 ] && echo passed || echo failed ) in $((SECONDS - t0)) s"
        exit $rc
}

case "${1:-}" in
boot) boot ;;
drive) drive ;;
*) outside "$@" ;;
esac
