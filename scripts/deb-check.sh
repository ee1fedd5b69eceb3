#!/bin/sh
# deb-check.sh — the Debian packages end to end, as root: build them
# (make deb), install them with dpkg, use what they installed under /usr,
# then purge them and check that nothing is left. CI runs it after the test
# suite (.ci/run).
#
#   1. make deb; dpkg -i the four packages (apt-get -f install if a
#      dependency is missing);
#   2. the installed daemon, /usr/bin/gpu-memd, on the sim backend as a plain
#      process on a socket in a temporary folder (CI containers seldom run
#      systemd); its installed configuration is parsed (--print-config) and
#      the units checked (systemd-analyze verify);
#   3. a C client built against the installed header, library and
#      pkg-config file: connect, allocate, write and read the buffer (the
#      sim backend maps host memory), free;
#   4. a Python client with /usr/bin/python3 from outside the tree: import
#      gpumem from /usr/lib/python3/dist-packages, allocate, status; the
#      PyTorch shim loads by its soname; gpu-memctl status;
#   5. where systemd is PID 1, the installed units: start gpu-memd.socket,
#      gpu-memctl status through it (the daemon starts on that connection),
#      stop both;
#   6. dpkg --purge; no file of the packages left, /etc/gpu-memd gone, no
#      trace in the dpkg database. The gpu-memd system user and group stay,
#      as Debian keeps system users (debian/gpu-memd.postrm says why); the
#      check says so.
#
# Anything already installed of these packages is purged first, so the
# check starts from a machine without them. DEB_REF=HEAD checks packages of
# what is committed (make deb DEB_REF=HEAD) instead of the working tree.
set -eu
cd "$(dirname "$0")/.."

PACKAGES="gpu-memd libgpumem0 libgpumem-dev python3-gpumem"
DEB_DIR=${DEB_DIR:-build-deb}

if [ "$(id -u)" -ne 0 ]; then
        echo "deb-check.sh installs and purges packages: run it as root" >&2
        exit 1
fi

tmp=$(mktemp -d /tmp/gpu-memd-deb-check.XXXXXX)
daemon_pid=""
cleanup() {
        if [ -n "$daemon_pid" ]; then
                kill "$daemon_pid" 2>/dev/null || true
                wait "$daemon_pid" 2>/dev/null || true
        fi
        rm -rf "$tmp"
}
trap cleanup EXIT

step() { echo "deb-check: $*"; }
fail() { echo "deb-check: FAIL: $*" >&2; exit 1; }

installed() {
        dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed
}

purge_all() {
        # shellcheck disable=SC2086
        dpkg --purge $PACKAGES >"$tmp/purge.log" 2>&1 || {
                cat "$tmp/purge.log"; fail "dpkg --purge"; }
}

# 1. Build and install.
for p in $PACKAGES; do
        if installed "$p"; then
                step "$p is installed already: purging it first"
                purge_all
                break
        fi
done
make deb DEB_DIR="$DEB_DIR" DEB_REF="${DEB_REF:-}"
debs=""
for p in $PACKAGES; do
        f=$(ls "$DEB_DIR/${p}_"*.deb 2>/dev/null | head -n 1)
        [ -n "$f" ] || fail "no $p package in $DEB_DIR"
        debs="$debs $f"
done
step "dpkg -i$debs"
# shellcheck disable=SC2086
if ! dpkg -i $debs >"$tmp/install.log" 2>&1; then
        step "dpkg -i wants dependencies: apt-get -f install"
        DEBIAN_FRONTEND=noninteractive apt-get -f install -y -q >>"$tmp/install.log" 2>&1 || {
                cat "$tmp/install.log"; fail "installing the packages"; }
fi
for p in $PACKAGES; do
        installed "$p" || { cat "$tmp/install.log"; fail "$p is not installed"; }
done
# What the packages hold, for the check after the purge.
for p in $PACKAGES; do
        dpkg -L "$p"
done | sort -u >"$tmp/files"
getent passwd gpu-memd >/dev/null || fail "postinst made no gpu-memd user"
getent group gpu-memd >/dev/null || fail "postinst made no gpu-memd group"
[ -d /run/gpu-memd ] || fail "postinst made no /run/gpu-memd (tmpfiles)"
step "installed; user and group gpu-memd, /run/gpu-memd made by postinst"

# 2. The installed daemon, sim backend, as a plain process.
[ -x /usr/bin/gpu-memd ] || fail "no /usr/bin/gpu-memd"
if command -v systemd-analyze >/dev/null; then
        systemd-analyze verify /lib/systemd/system/gpu-memd.socket \
                /lib/systemd/system/gpu-memd.service || fail "systemd-analyze verify"
fi
/usr/bin/gpu-memd --config /etc/gpu-memd/gpu-memd.conf --print-config >/dev/null ||
        fail "the installed /etc/gpu-memd/gpu-memd.conf does not parse"
sock="$tmp/gpu-memd.sock"
/usr/bin/gpu-memd --backend sim --socket "$sock" >"$tmp/daemon.log" 2>&1 &
daemon_pid=$!
i=0
while [ ! -S "$sock" ]; do
        i=$((i + 1))
        if [ "$i" -gt 100 ] || ! kill -0 "$daemon_pid" 2>/dev/null; then
                cat "$tmp/daemon.log"; fail "the daemon did not start"
        fi
        sleep 0.1
done
step "/usr/bin/gpu-memd --backend sim --socket $sock runs (pid $daemon_pid)"
export GPU_MEMD_SOCKET="$sock"

# 3. A C client against the installed development files.
cat >"$tmp/client.c" <<'EOF'
#include <gpumem.h>
#include <stdio.h>
#include <string.h>

static int fail(const char *call, int err)
{
        fprintf(stderr, "client: %s: %s: %s\n", call, gmd_strerror(err), gmd_last_error());
        return 1;
}

int main(void)
{
        gmd_client *c;
        gmd_buffer *b;
        size_t size = 4 << 20;
        int r;

        r = gmd_connect(NULL, "deb-check", &c);
        if (r < 0)
                return fail("gmd_connect", r);
        r = gmd_alloc(c, size, 0, GMD_ALLOC_SWAPPABLE, 5000, &b);
        if (r < 0) {
                fail("gmd_alloc", r);
                gmd_disconnect(c);
                return 1;
        }
        unsigned char *p = gmd_buffer_ptr(b);
        for (size_t i = 0; i < size; i++)
                p[i] = (unsigned char)(i * 7 + 3);
        for (size_t i = 0; i < size; i++)
                if (p[i] != (unsigned char)(i * 7 + 3)) {
                        fprintf(stderr, "client: byte %zu reads back wrong\n", i);
                        return 1;
                }
        printf("%zu bytes written and read back in %s (%s backend)\n",
               gmd_buffer_size(b), gmd_tier_name(gmd_buffer_tier(b)),
               gmd_client_backend(c));
        r = gmd_free(c, b);
        if (r < 0)
                fail("gmd_free", r);
        gmd_disconnect(c);
        return r < 0;
}
EOF
# shellcheck disable=SC2046
cc "$tmp/client.c" $(pkg-config --cflags --libs gpumem) -o "$tmp/client" ||
        fail "the C client does not build against the installed libgpumem-dev"
loaded=$(ldd "$tmp/client" | awk '$1 == "libgpumem.so.0" { print $3 }')
[ -n "$loaded" ] && [ "$(readlink -f "$loaded")" = \
        "$(readlink -f "$(dpkg -L libgpumem0 | grep '/libgpumem.so.0$')")" ] ||
        fail "the C client loads libgpumem.so.0 from ${loaded:-nowhere}, not libgpumem0's"
"$tmp/client" || fail "the C client"
step "C client (pkg-config gpumem: $(pkg-config --cflags --libs gpumem)) ok"

# 4. Python with /usr/bin/python3, from outside the tree, and gpu-memctl.
(cd "$tmp" && env -u PYTHONPATH -u GPUMEM_LIBRARY -u GPU_MEMD_TORCH_LIB \
        /usr/bin/python3 - <<'EOF'
import ctypes

import gpumem
import gpumem.torch as gtorch

assert gpumem.__file__.startswith("/usr/lib/python3/dist-packages/"), gpumem.__file__
with gpumem.Client(name="deb-check-py") as c:
    buf = c.alloc("8M", timeout=5)
    view = buf.as_memoryview()
    view[:5] = b"hello"
    assert bytes(view[:5]) == b"hello"
    st = c.status()
    assert st.total_buffers >= 1 and st.backend == "sim", st
    print(f"python: {buf.size} bytes in {buf.tier}, daemon {st.daemon_version}, "
          f"{st.total_buffers} buffer(s), {st.total_clients} client(s)")
    buf.free()
# The PyTorch shim: found by its soname in the library path.
lib = gtorch.library_path()
ctypes.CDLL(lib)
print(f"python: shim {lib} loads")
EOF
) || fail "the Python client"
/usr/bin/gpu-memctl status >"$tmp/status.txt" || {
        cat "$tmp/status.txt"; fail "gpu-memctl status"; }
grep -q "sim" "$tmp/status.txt" || { cat "$tmp/status.txt"; fail "gpu-memctl status names no sim backend"; }
/usr/bin/gpumem-run --help >/dev/null 2>&1 || fail "gpumem-run --help"
step "Python client, gpumem-run --help and gpu-memctl status ok"

kill "$daemon_pid"
wait "$daemon_pid" || true
daemon_pid=""
unset GPU_MEMD_SOCKET
step "daemon stopped"

# 5. The units, where systemd runs.
if [ -d /run/systemd/system ]; then
        systemctl start gpu-memd.socket || fail "systemctl start gpu-memd.socket"
        /usr/bin/gpu-memctl status >/dev/null ||
                { systemctl status gpu-memd.service || true; fail "gpu-memctl status through gpu-memd.socket"; }
        systemctl stop gpu-memd.socket gpu-memd.service
        step "gpu-memd.socket started the daemon under systemd; stopped"
else
        step "systemd is not PID 1 here: the units are not started"
fi

# 6. Purge, and check that nothing is left.
purge_all
for p in $PACKAGES; do
        if dpkg-query -W "$p" >/dev/null 2>&1 && \
                ! dpkg-query -W -f='${db:Status-Status}' "$p" | grep -qx not-installed; then
                fail "$p still in the dpkg database: $(dpkg-query -W -f='${Status}' "$p")"
        fi
        ls /var/lib/dpkg/info/"$p".* /var/lib/dpkg/info/"$p":*.* >/dev/null 2>&1 &&
                fail "$p's files remain in /var/lib/dpkg/info"
done
left=""
while read -r f; do
        [ -d "$f" ] && continue   # shared folders (/usr/bin, /lib -> usr/lib ...)
        if [ -e "$f" ] || [ -L "$f" ]; then left="$left $f"; fi
done <"$tmp/files"
[ -z "$left" ] || fail "left behind by the purge:$left"
for d in /etc/gpu-memd /usr/lib/python3/dist-packages/gpumem /run/gpu-memd \
        /usr/share/doc/gpu-memd /usr/share/doc/libgpumem0 \
        /usr/share/doc/libgpumem-dev /usr/share/doc/python3-gpumem; do
        [ ! -e "$d" ] || fail "left behind by the purge: $d"
done
ls /var/lib/systemd/deb-systemd-helper-enabled 2>/dev/null | grep -q gpu-memd &&
        fail "deb-systemd-helper state of the units is left"
step "purged: no file of the packages, no /etc/gpu-memd, nothing in the dpkg database"
if getent passwd gpu-memd >/dev/null; then
        step "the gpu-memd system user and group stay, as Debian keeps system users"
fi
step "ok"
