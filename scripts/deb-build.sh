#!/bin/sh
# deb-build.sh [DIR] — build the Debian packages (debian/) into DIR
# (default build-deb) and check them with lintian. `make deb` runs it after
# deb-deps.sh.
#
# The packages are built from a copy of the working tree in
# DIR/gpu-memd-VERSION (the files git tracks or would track: no build
# folders, nothing .gitignore leaves out), so the build's leftovers
# (debian/tmp, the package folders, CMake's folder) stay out of the tree
# others work in, and dpkg-buildpackage's results (written beside the
# folder it builds in) land in DIR: the .deb files, .changes and
# .buildinfo. Binary packages only (-b): the native source tarball is not
# needed to install them. DEB_REF=REF (make deb DEB_REF=HEAD) builds from
# what a commit holds instead, leaving out uncommitted changes.
#
# lintian checks all four packages through the .changes file and fails on
# any error; warnings are printed, and those the packages keep on purpose
# are overridden in debian/*.lintian-overrides, each with its reason.
set -eu
cd "$(dirname "$0")/.."

out=${1:-build-deb}
version=$(dpkg-parsechangelog -S Version)
arch=$(dpkg-architecture -q DEB_HOST_ARCH)
stage="$out/gpu-memd-$version"

rm -rf "$stage"
rm -f "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo
mkdir -p "$stage"

if [ -n "${DEB_REF:-}" ]; then
        git archive --format=tar "$DEB_REF" | tar -xf - -C "$stage"
elif git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        list=$(mktemp)
        deleted=$(mktemp)
        trap 'rm -f "$list" "$deleted"' EXIT
        git ls-files -co --exclude-standard >"$list"
        git ls-files -d >"$deleted"
        grep -vxF -f "$deleted" "$list" | tar -cf - -T - | tar -xf - -C "$stage"
else
        tar -cf - --exclude='./build' --exclude='./build-*' --exclude='./run' \
                --exclude='./.git' . | tar -xf - -C "$stage"
fi

echo "make deb: building the packages in $stage (log: $out/build.log)"
jobs=$(nproc 2>/dev/null || echo 2)
if ! (cd "$stage" && DEB_BUILD_OPTIONS="parallel=$jobs ${DEB_BUILD_OPTIONS:-}" \
        dpkg-buildpackage -b -us -uc) >"$out/build.log" 2>&1; then
        tail -n 40 "$out/build.log"
        echo "make deb: the package build failed; the whole log is $out/build.log" >&2
        exit 1
fi
ls -1 "$out"/*.deb

changes="$out/gpu-memd_${version}_${arch}.changes"
echo "make deb: lintian $changes"
lintian --fail-on error "$changes"
echo "make deb: lintian reports no errors"
