#!/bin/sh
# protobuf-c-source.sh DIR — put the source of the protobuf-c runtime that
# this machine's libprotobuf-c-dev was built from into DIR, for the fuzz
# build (scripts/fuzz.sh). The fuzz target compiles that protobuf-c.c itself
# with coverage and sanitizers: Debian's libprotobuf-c.a carries neither, so
# a target linked against it sees only our header checks and none of the
# payload decoding.
#
# The source comes from the Debian archive the machine already uses
# (`apt-get source`, same version as the installed package, Debian's patches
# applied): deb-src twins of the Debian entries in /etc/apt are written to a
# private apt configuration under DIR, so nothing in /etc/apt changes and no
# other site is reached. Needs root (apt's download sandbox) and dpkg-dev
# (build-essential brings it).
#
# DIR ends up holding protobuf-c.c, protobuf-c.h, LICENSE (BSD-2-Clause,
# kept with the code) and VERSION; a DIR that already holds this version is
# left as it is.
set -eu

if [ $# -ne 1 ]; then
        echo "usage: $0 DIR" >&2
        exit 2
fi
dir=$1
version=$(dpkg-query -W -f='${source:Version}' libprotobuf-c-dev 2>/dev/null) || {
        echo "libprotobuf-c-dev is not installed: run scripts/deps.sh first" >&2
        exit 1
}
if [ -f "$dir/VERSION" ] && [ "$(cat "$dir/VERSION")" = "$version" ] &&
   [ -f "$dir/protobuf-c.c" ]; then
        exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
        echo "fetching the protobuf-c source with apt-get needs root." >&2
        echo "As root: sh $0 $dir   (or unpack protobuf-c $version there by hand:" >&2
        echo "protobuf-c.c, protobuf-c.h, LICENSE, and a VERSION file saying $version)" >&2
        exit 1
fi

mkdir -p "$dir"
apt_dir=$(cd "$dir" && pwd)/apt
rm -rf "$apt_dir"
mkdir -p "$apt_dir/sources.list.d" "$apt_dir/lists/partial" \
         "$apt_dir/cache/archives/partial" "$apt_dir/work"

# deb-src twins of the Debian entries: deb822 stanzas signed with Debian's
# archive key or served from a .../debian* path, and one-line entries of the
# same. Other vendors' repositories rarely publish sources; they are left out.
for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk 'BEGIN { RS = ""; ORS = "\n\n" }
             /debian-archive-keyring|URIs:[^\n]*\/debian/ {
                     sub(/Types:[^\n]*/, "Types: deb-src"); print }' "$f" \
                > "$apt_dir/sources.list.d/$(basename "$f")"
done
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        sed -n 's/^[[:space:]]*deb[[:space:]]\(.*\/debian[^[:space:]]*[[:space:]].*\)/deb-src \1/p' \
                "$f" > "$apt_dir/sources.list.d/$(basename "$f")"
done
if ! grep -qs 'deb-src' "$apt_dir"/sources.list.d/*; then
        echo "no Debian archive found in /etc/apt to fetch protobuf-c $version from" >&2
        exit 1
fi

set -- -q -o Dir::Etc::SourceList=/dev/null \
        -o Dir::Etc::SourceParts="$apt_dir/sources.list.d" \
        -o Dir::State::Lists="$apt_dir/lists" \
        -o Dir::Cache="$apt_dir/cache" -o APT::Sandbox::User=root
echo "Fetching the source of protobuf-c $version (apt-get source) for the fuzz build"
apt-get "$@" update >"$apt_dir/update.log" 2>&1 || {
        cat "$apt_dir/update.log" >&2
        echo "apt-get update of the deb-src entries failed (above)" >&2
        exit 1
}
(cd "$apt_dir/work" && apt-get "$@" source --download-only \
        "protobuf-c=$version") >"$apt_dir/source.log" 2>&1 || {
        cat "$apt_dir/source.log" >&2
        echo "apt-get source protobuf-c=$version failed (above)" >&2
        exit 1
}
(cd "$apt_dir/work" && dpkg-source -x ./*.dsc src) >"$apt_dir/unpack.log" 2>&1 || {
        cat "$apt_dir/unpack.log" >&2
        echo "dpkg-source -x failed (above); it comes with dpkg-dev" >&2
        exit 1
}
src=$apt_dir/work/src
cp "$src/protobuf-c/protobuf-c.c" "$src/protobuf-c/protobuf-c.h" "$dir/"
cp "$src/LICENSE" "$dir/LICENSE"
echo "$version" > "$dir/VERSION"
rm -rf "$apt_dir"
echo "protobuf-c $version source in $dir"
