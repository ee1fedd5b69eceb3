#!/bin/sh
# deb-deps.sh — make sure the Debian packaging tools `make deb` uses are
# present, beside what the build itself needs (deps.sh, run first): dh and
# its cmake and python3 helpers, dpkg-buildpackage and lintian. As root:
# install the missing ones with apt-get. Otherwise: print the exact command
# to run and fail, as deps.sh does. debian/control's Build-Depends is
# checked again by dpkg-buildpackage itself.
set -eu
cd "$(dirname "$0")/.."

sh scripts/deps.sh

PACKAGES="debhelper dh-python dpkg-dev lintian"

missing=""
for p in $PACKAGES; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
                missing="$missing $p"
        fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
        echo "make deb needs these Debian packages:$missing" >&2
        echo "Install them as root, then run make deb again:" >&2
        echo "  apt-get update && apt-get install -y$missing" >&2
        exit 1
fi
echo "Installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $missing
