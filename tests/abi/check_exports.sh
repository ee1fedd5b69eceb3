#!/bin/sh
# check_exports — libgpumem exports exactly its public API.
#
# The public API is every gmd_ function declared in include/gpumem.h. The
# shared library's dynamic symbol table must hold exactly those (none
# missing, nothing else: internals are hidden by -fvisibility=hidden and
# GMD_EXPORT, the static helper libraries by --exclude-libs). Every global
# symbol the static library defines must be either one of them or an
# internal carrying the gmd__ prefix, so a program linking libgpumem.a
# cannot collide with it. Prints each offending symbol and fails.
#
# usage: check_exports.sh gpumem.h libgpumem.so libgpumem.a
set -eu

header=$1 so=$2 ar=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

grep -oE '\bgmd_[a-z0-9_]+[[:space:]]*\(' "$header" | tr -d ' (\t' |
        grep -v '^gmd__' | sort -u >"$tmp/public"
if [ ! -s "$tmp/public" ]; then
        echo "check_exports: found no gmd_ functions in $header" >&2
        exit 1
fi

nm -D --defined-only "$so" | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/so"
nm -g --defined-only "$ar" | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/ar"

status=0
comm -13 "$tmp/public" "$tmp/so" >"$tmp/so_extra"
comm -23 "$tmp/public" "$tmp/so" >"$tmp/so_missing"
grep -v '^gmd__' "$tmp/ar" | comm -13 "$tmp/public" - >"$tmp/ar_extra" || true

if [ -s "$tmp/so_extra" ]; then
        echo "$so exports symbols outside the API of $header" \
             "(make them static, or gmd__ and not GMD_EXPORT):"
        sed 's/^/  /' "$tmp/so_extra"
        status=1
fi
if [ -s "$tmp/so_missing" ]; then
        echo "$so does not export these functions of $header (mark them GMD_EXPORT):"
        sed 's/^/  /' "$tmp/so_missing"
        status=1
fi
if [ -s "$tmp/ar_extra" ]; then
        echo "$ar defines global symbols that are neither the API of $header" \
             "nor gmd__ internals (make them static or rename them gmd__*):"
        sed 's/^/  /' "$tmp/ar_extra"
        status=1
fi
[ $status -eq 0 ] && echo "ok: $(wc -l <"$tmp/public") API functions;" \
        "$so exports exactly those; $ar defines only them and gmd__ internals"
exit $status
