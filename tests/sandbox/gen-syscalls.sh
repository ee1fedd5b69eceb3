#!/bin/sh
# gen-syscalls.sh — write system_service_syscalls.h: the system calls of
# systemd's @system-service set (SystemCallFilter=@system-service in
# systemd/gpu-memd.service.in), nested @groups expanded, as the allowlist
# of unit_sandbox's seccomp filter. Run on a machine with systemd (the
# checked-in header says which version it came from) and commit the result:
#
#   tests/sandbox/gen-syscalls.sh > tests/sandbox/system_service_syscalls.h
#
# Every name is under #ifdef SYS_name, so a call the build machine's
# <sys/syscall.h> does not know (another architecture's, or one newer than
# the headers) is left out of the filter, as systemd leaves out a call
# unknown to libseccomp on the native architecture.
set -eu
group=${1:-@system-service}
command -v systemd-analyze >/dev/null || { echo "$0: no systemd-analyze" >&2; exit 1; }

# Names of a group: its body lines, less comments and blank lines.
members() {
        systemd-analyze syscall-filter "$1" | sed -n '2,$p' |
                sed -e 's/^[[:space:]]*//' -e '/^#/d' -e '/^$/d'
}

seen=" "
names=$(mktemp)
trap 'rm -f "$names"' EXIT
todo=$group
while [ -n "$todo" ]; do
        set -- $todo
        g=$1; shift; todo=$*
        case $seen in *" $g "*) continue ;; esac
        seen="$seen$g "
        for m in $(members "$g"); do
                case $m in
                @*) todo="$todo $m" ;;
                *) echo "$m" >>"$names" ;;
                esac
        done
done

version=$(systemd-analyze --version | sed -n '1s/^systemd //p')
cat <<HDR
/* Generated from \`systemd-analyze syscall-filter $group\` of systemd
 * $version by tests/sandbox/gen-syscalls.sh; do not edit.
 * Groups expanded:${seen% }
 * $(sort -u "$names" | wc -l | tr -d ' ') names; those <sys/syscall.h> does not define are left out. */
#ifndef GMD_SYSTEM_SERVICE_SYSCALLS_H
#define GMD_SYSTEM_SERVICE_SYSCALLS_H

#include <sys/syscall.h>

#define GMD_SYSCALLS_SOURCE "$group of systemd $version"

struct gmd_syscall_name {
        const char *name;
        long nr;
};

static const struct gmd_syscall_name gmd_system_service_syscalls[] = {
HDR
sort -u "$names" | while read -r n; do
        printf '#ifdef SYS_%s\n        { "%s", SYS_%s },\n#endif\n' "$n" "$n" "$n"
done
cat <<'HDR'
};

#endif
HDR
