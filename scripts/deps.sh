#!/bin/sh
# deps.sh — make sure the Debian packages gpu-memd builds with are present.
# As root: install the missing ones with apt-get. Otherwise: print the exact
# command to run and fail. The CUDA toolkit is optional and never installed
# here: when /usr/local/cuda is present the cuda backend is built too.
# systemd is listed for systemd-socket-activate, which the socket
# activation test runs; the build itself needs only libsystemd. python3,
# python3-numpy and python3-torch (CPU) are for the gpumem Python package's
# tests (tests/python), run with Debian's /usr/bin/python3. clang and
# libclang-rt-dev (libFuzzer, the sanitizer runtimes) are for `make fuzz`,
# which CI runs.
#
#   deps.sh                          the build's packages
#   deps.sh --for WHAT PACKAGE...    these packages instead, WHAT naming
#                                    what needs them in the messages
#                                    (scripts/deb-deps.sh: "make deb")
set -eu

WHO="gpu-memd"
AGAIN="make"
PACKAGES="build-essential cmake pkg-config libuv1-dev libprotobuf-c-dev \
protobuf-c-compiler libsystemd-dev libinih-dev libcmocka-dev systemd \
python3 python3-numpy python3-torch clang libclang-rt-dev"
if [ "${1:-}" = --for ] && [ $# -ge 3 ]; then
        WHO=$2
        AGAIN=$2
        shift 2
        PACKAGES="$*"
fi

missing=""
for p in $PACKAGES; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
                missing="$missing $p"
        fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
        echo "$WHO needs these Debian packages:$missing" >&2
        echo "Install them as root, then run $AGAIN again:" >&2
        echo "  apt-get update && apt-get install -y$missing" >&2
        exit 1
fi
echo "Installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $missing
