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
sh scripts/deps.sh --for "make deb" debhelper dh-python dpkg-dev lintian
