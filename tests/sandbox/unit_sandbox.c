/*
 * unit_sandbox — run a program under the process-level confinement of
 * systemd/gpu-memd.service.in, for machines where systemd cannot start the
 * unit (a container without systemd as PID 1, such as the GPU machine):
 *
 *   unit_sandbox [--deny NAME[,NAME...]]... [--] PROGRAM [ARGS...]
 *   unit_sandbox --probe [--deny ...]
 *
 * In this order, then execvp(PROGRAM):
 *   LimitNOFILE=524288     RLIMIT_NOFILE 524288 (soft and hard; the hard
 *                          limit, if it is lower and cannot be raised)
 *   LimitMEMLOCK=infinity  RLIMIT_MEMLOCK unlimited when allowed, else the
 *                          limit stays as it is (said on stderr)
 *   UMask=0077             umask(0077)
 *   CapabilityBoundingSet= every capability dropped from the bounding set
 *   AmbientCapabilities=   ambient and inheritable sets cleared: after the
 *                          exec the program has no capability, root or not
 *   NoNewPrivileges=yes    PR_SET_NO_NEW_PRIVS
 *   a seccomp-BPF filter (written here, no libseccomp):
 *   SystemCallArchitectures=native
 *                          a call of another ABI (on x86_64 also x32)
 *                          kills the process (systemd's, through
 *                          libseccomp, kills the calling thread)
 *   SystemCallFilter=@system-service, SystemCallErrorNumber=EPERM
 *                          the calls of system_service_syscalls.h (made
 *                          by gen-syscalls.sh from systemd-analyze) are
 *                          allowed, every other fails with EPERM
 *   RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
 *                          socket() of another family: EAFNOSUPPORT
 *   RestrictNamespaces=yes unshare() and clone() with a CLONE_NEW* flag:
 *                          EPERM; setns(): EPERM; clone3(): ENOSYS (its
 *                          flags are in memory a filter cannot read; libc
 *                          falls back to clone(), as under systemd)
 *   LockPersonality=yes    personality() other than a query or the current
 *                          persona: EPERM (systemd's seccomp rule; there is
 *                          no kernel lock to set instead)
 *   RestrictRealtime=yes   sched_setscheduler() to SCHED_FIFO, SCHED_RR,
 *                          SCHED_DEADLINE (any policy but OTHER, BATCH,
 *                          IDLE): EPERM
 * and one line on stderr saying what was applied.
 *
 * NOT emulated (they need PID 1's mounts, cgroups or users): User=/Group=
 * (the program runs as the caller; as root it is root without
 * capabilities), DevicePolicy=closed/DeviceAllow= (cgroup device rules:
 * every device node the caller may open stays open to it),
 * ProtectSystem=, ProtectHome=, PrivateTmp=, ProtectKernelTunables=,
 * ProtectControlGroups=, ProtectProc=, PrivateMounts=, RuntimeDirectory=
 * (mount namespaces), IPAddressDeny=/IPAddressAllow= (cgroup BPF),
 * RestrictSUIDSGID=, RemoveIPC=, the socket unit, Type=notify. The parts of
 * ProtectClock=, ProtectKernelModules=, ProtectKernelLogs= and
 * ProtectHostname= that are system call filters are covered by the
 * allowlist: @clock, @module, syslog and sethostname are not in
 * @system-service.
 *
 * --deny NAME refuses (EPERM) one more call of the allowlist: a test's way
 * to see how the program meets a call it needs failing (a driver needing
 * one more call than @system-service). --probe applies everything to
 * itself, then checks that the filter answers as the unit's would, and
 * prints "key value" lines; exit 0 when every check held, 1 when one did
 * not, 77 when this kernel or container cannot install a seccomp filter.
 * Without --probe a failure to apply any part that can be applied is an
 * error (exit 1): the program never runs less confined than said.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "system_service_syscalls.h"

#define NOFILE_WANTED 524288

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#endif

#ifndef SECCOMP_RET_KILL_PROCESS
#define SECCOMP_RET_KILL_PROCESS SECCOMP_RET_KILL
#endif
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif
/* The namespace flags of systemd 252's RestrictNamespaces= (CLONE_NEWTIME
 * is not among them; in clone()'s flags its bit is the exit signal's). */
#define NAMESPACE_FLAGS (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | \
                         CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | \
                         CLONE_NEWNET)

#define MAX_DENY 32

static const char *prog = "unit_sandbox";
static long deny[MAX_DENY];
static size_t n_deny;

/* ---- the filter ---------------------------------------------------------- */

#if BYTE_ORDER == LITTLE_ENDIAN
#define ARG_LO(i) (offsetof(struct seccomp_data, args[i]))
#else
#define ARG_LO(i) (offsetof(struct seccomp_data, args[i]) + 4)
#endif

#define MAX_INSNS 1200

typedef struct bpf {
        struct sock_filter insn[MAX_INSNS];
        unsigned short n;
} bpf;

static void emit(bpf *b, unsigned short code, unsigned k, unsigned char jt,
                 unsigned char jf)
{
        if (b->n >= MAX_INSNS) {
                fprintf(stderr, "%s: filter too long\n", prog);
                exit(1);
        }
        b->insn[b->n++] = (struct sock_filter){ code, jt, jf, k };
}

static void ret(bpf *b, unsigned action)
{
        emit(b, BPF_RET | BPF_K, action, 0, 0);
}

static void load(bpf *b, unsigned offset)
{
        emit(b, BPF_LD | BPF_W | BPF_ABS, offset, 0, 0);
}

#define ALLOW SECCOMP_RET_ALLOW
#define ERRNO(e) (SECCOMP_RET_ERRNO | ((e) & SECCOMP_RET_DATA))

static int allowed(long nr)
{
        for (size_t i = 0; i < sizeof(gmd_system_service_syscalls) /
                               sizeof(gmd_system_service_syscalls[0]); i++)
                if (gmd_system_service_syscalls[i].nr == nr)
                        return 1;
        return 0;
}

/* The call number is in A. A block for call `nr` that reads its arguments
 * starts with a jump over itself when A is not `nr`; every path through
 * the block ends in a return, so A still holds the number after it. */
static void block_start(bpf *b, long nr, unsigned char len)
{
        emit(b, BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, len);
}

/* Allow when the argument's low 32 bits are one of `values`, else return
 * `otherwise`. Length: n + 3. */
static void block_values(bpf *b, long nr, unsigned arg, const unsigned *values,
                         unsigned char n, unsigned otherwise)
{
        block_start(b, nr, n + 3);
        load(b, ARG_LO(arg));
        for (unsigned char i = 0; i < n; i++)
                emit(b, BPF_JMP | BPF_JEQ | BPF_K, values[i], n - i, 0);
        ret(b, otherwise);
        ret(b, ALLOW);
}

/* Allow when none of `mask`'s bits is set in the argument's low 32 bits,
 * else EPERM. Length: 5. */
static void block_no_flags(bpf *b, long nr, unsigned arg, unsigned mask)
{
        block_start(b, nr, 5);
        load(b, ARG_LO(arg));
        emit(b, BPF_ALU | BPF_AND | BPF_K, mask, 0, 0);
        emit(b, BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0);
        ret(b, ERRNO(EPERM));
        ret(b, ALLOW);
}

static void block_ret(bpf *b, long nr, unsigned action)
{
        block_start(b, nr, 1);
        ret(b, action);
}

static size_t build_filter(bpf *b, unsigned persona)
{
        size_t n_allowed = 0;

        b->n = 0;
#ifdef NATIVE_ARCH
        load(b, offsetof(struct seccomp_data, arch));
        emit(b, BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0);
        ret(b, SECCOMP_RET_KILL_PROCESS);
#endif
        load(b, offsetof(struct seccomp_data, nr));
#if defined(__x86_64__)
        /* x32 calls come with the x86_64 arch and this bit in the number. */
        emit(b, BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1);
        ret(b, SECCOMP_RET_KILL_PROCESS);
#endif
        for (size_t i = 0; i < n_deny; i++)
                block_ret(b, deny[i], ERRNO(EPERM));

        /* RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 */
        if (allowed(SYS_socket)) {
                static const unsigned families[] = { AF_UNIX, AF_INET, AF_INET6 };

                block_values(b, SYS_socket, 0, families, 3, ERRNO(EAFNOSUPPORT));
        }
        /* RestrictNamespaces=yes */
        if (allowed(SYS_unshare))
                block_no_flags(b, SYS_unshare, 0, NAMESPACE_FLAGS);
#if !defined(__s390__) && !defined(__s390x__)   /* there flags are arg 1 */
        if (allowed(SYS_clone))
                block_no_flags(b, SYS_clone, 0, NAMESPACE_FLAGS);
#endif
#ifdef SYS_clone3
        if (allowed(SYS_clone3))
                block_ret(b, SYS_clone3, ERRNO(ENOSYS));
#endif
        if (allowed(SYS_setns))
                block_ret(b, SYS_setns, ERRNO(EPERM));
        /* LockPersonality=yes: the current persona, or the query. */
        if (allowed(SYS_personality)) {
                const unsigned personas[] = { persona, 0xffffffffu };

                block_values(b, SYS_personality, 0, personas, 2, ERRNO(EPERM));
        }
        /* RestrictRealtime=yes */
        if (allowed(SYS_sched_setscheduler)) {
                static const unsigned policies[] = { SCHED_OTHER, SCHED_BATCH,
                                                     SCHED_IDLE };

                block_values(b, SYS_sched_setscheduler, 1, policies, 3,
                             ERRNO(EPERM));
        }

        /* SystemCallFilter=@system-service. Two instructions a call, so no
         * jump is longer than one: the kernel's action cache then knows
         * each of these as always allowed and skips the filter for it. */
        for (size_t i = 0; i < sizeof(gmd_system_service_syscalls) /
                               sizeof(gmd_system_service_syscalls[0]); i++) {
                emit(b, BPF_JMP | BPF_JEQ | BPF_K,
                     (unsigned)gmd_system_service_syscalls[i].nr, 0, 1);
                ret(b, ALLOW);
                n_allowed++;
        }
        /* SystemCallErrorNumber=EPERM */
        ret(b, ERRNO(EPERM));
        return n_allowed;
}

/* 0, or -errno when this kernel or container does not take the filter. */
static int install_filter(bpf *b)
{
#ifndef NATIVE_ARCH
        (void)b;
        return -ENOTSUP;
#else
        struct sock_fprog fprog = { .len = b->n, .filter = b->insn };

        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0, 0) < 0)
                return -errno;
        return 0;
#endif
}

/* ---- the rest ------------------------------------------------------------ */

static char summary[2048];

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
        size_t len = strlen(summary);
        va_list ap;

        if (len && len + 2 < sizeof(summary))
                strcpy(summary + len, ", "), len += 2;
        va_start(ap, fmt);
        vsnprintf(summary + len, sizeof(summary) - len, fmt, ap);
        va_end(ap);
}

static const char *limit_text(rlim_t v, char *buf, size_t len)
{
        if (v == RLIM_INFINITY)
                return "unlimited";
        snprintf(buf, len, "%llu", (unsigned long long)v);
        return buf;
}

/* LimitNOFILE=524288: soft and hard; the hard limit where it is lower and
 * this process may not raise it (or fs.nr_open is lower). */
static void set_nofile(void)
{
        struct rlimit rl = { NOFILE_WANTED, NOFILE_WANTED }, old;
        char a[32];
        int e;

        getrlimit(RLIMIT_NOFILE, &old);
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0) {
                note("nofile %d", NOFILE_WANTED);
                return;
        }
        e = errno;
        rl.rlim_cur = rl.rlim_max = old.rlim_max;
        if (old.rlim_max > NOFILE_WANTED && old.rlim_max != RLIM_INFINITY)
                rl.rlim_cur = NOFILE_WANTED;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
        fprintf(stderr, "%s: RLIMIT_NOFILE %d not allowed (%s): soft limit %s\n",
                prog, NOFILE_WANTED, strerror(e),
                limit_text(rl.rlim_cur, a, sizeof(a)));
        note("nofile %s (not %d)", limit_text(rl.rlim_cur, a, sizeof(a)),
             NOFILE_WANTED);
}

/* LimitMEMLOCK=infinity when allowed; else left as it is. */
static void set_memlock(void)
{
        struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };
        char a[32];
        int e;

        if (setrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
                note("memlock unlimited");
                return;
        }
        e = errno;
        getrlimit(RLIMIT_MEMLOCK, &rl);
        fprintf(stderr, "%s: RLIMIT_MEMLOCK unlimited not allowed (%s): left "
                "at %s\n", prog, strerror(e),
                limit_text(rl.rlim_cur, a, sizeof(a)));
        note("memlock %s (left)", limit_text(rl.rlim_cur, a, sizeof(a)));
}

static int last_cap(void)
{
        FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "re");
        int n = CAP_LAST_CAP;

        if (f) {
                if (fscanf(f, "%d", &n) != 1)
                        n = CAP_LAST_CAP;
                fclose(f);
        }
        return n;
}

/* CapabilityBoundingSet= and AmbientCapabilities=. 0, or -1 after a
 * message. Without CAP_SETPCAP the bounding set cannot shrink; that is
 * said, and is harmless here: with no_new_privs an exec gains no
 * capability (file capabilities and set-uid bits are ignored). */
static int drop_capabilities(void)
{
        struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
        struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
        int last = last_cap(), kept = 0;

        for (int c = 0; c <= last; c++) {
                if (prctl(PR_CAPBSET_READ, c, 0, 0, 0) <= 0)
                        continue;
                if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) == 0)
                        continue;
                if (errno == EPERM)
                        kept++;
                else if (errno != EINVAL) {
                        fprintf(stderr, "%s: PR_CAPBSET_DROP %d: %s\n", prog, c,
                                strerror(errno));
                        return -1;
                }
        }
        if (kept) {
                fprintf(stderr, "%s: no CAP_SETPCAP: %d capabilities stay in the "
                        "bounding set (no_new_privs keeps an exec from "
                        "gaining them)\n", prog, kept);
                note("bounding set kept (%d, no CAP_SETPCAP)", kept);
        } else
                note("bounding set empty");
        /* Kernels before 4.3 have no ambient set: nothing to clear. */
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 &&
            errno != EINVAL) {
                fprintf(stderr, "%s: clearing the ambient set: %s\n", prog,
                        strerror(errno));
                return -1;
        }
        if (syscall(SYS_capget, &hdr, data) < 0) {
                fprintf(stderr, "%s: capget: %s\n", prog, strerror(errno));
                return -1;
        }
        for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
                data[i].inheritable = 0;
        if (syscall(SYS_capset, &hdr, data) < 0) {
                fprintf(stderr, "%s: capset: %s\n", prog, strerror(errno));
                return -1;
        }
        note("ambient+inheritable cleared");
        return 0;
}

static long syscall_number(const char *name)
{
        for (size_t i = 0; i < sizeof(gmd_system_service_syscalls) /
                               sizeof(gmd_system_service_syscalls[0]); i++)
                if (strcmp(gmd_system_service_syscalls[i].name, name) == 0)
                        return gmd_system_service_syscalls[i].nr;
        return -1;
}

static int add_deny(char *list)
{
        for (char *save = NULL, *name = strtok_r(list, ",", &save); name;
             name = strtok_r(NULL, ",", &save)) {
                long nr = syscall_number(name);

                if (nr < 0) {
                        fprintf(stderr, "%s: --deny %s: not a call of %s (calls "
                                "outside it are refused anyway)\n", prog, name,
                                GMD_SYSCALLS_SOURCE);
                        return -1;
                }
                if (n_deny == MAX_DENY) {
                        fprintf(stderr, "%s: at most %d --deny calls\n", prog,
                                MAX_DENY);
                        return -1;
                }
                deny[n_deny++] = nr;
                note("%s denied", name);
        }
        return 0;
}

/* ---- --probe --------------------------------------------------------------- */

static int probe_failed;

static void check(const char *what, int ok, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void check(const char *what, int ok, const char *fmt, ...)
{
        va_list ap;

        printf("%s %s", what, ok ? "ok" : "FAILED");
        if (fmt) {
                fputs(" (", stdout);
                va_start(ap, fmt);
                vprintf(fmt, ap);
                va_end(ap);
                fputs(")", stdout);
        }
        fputs("\n", stdout);
        if (!ok)
                probe_failed = 1;
}

/* A call's result: 0, or its errno. */
static int result(long r)
{
        return r < 0 ? errno : 0;
}

static int try_socket(int family, int type)
{
        int fd = socket(family, type | SOCK_CLOEXEC, 0);

        if (fd < 0)
                return errno;
        close(fd);
        return 0;
}

static void *thread_main(void *arg)
{
        return arg;
}

static const char *status_field(const char *key, char *buf, size_t len)
{
        FILE *f = fopen("/proc/self/status", "re");
        char line[256];
        size_t klen = strlen(key);

        snprintf(buf, len, "?");
        if (!f)
                return buf;
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
                        char *v = line + klen + 1;

                        v += strspn(v, " \t");
                        v[strcspn(v, "\n")] = 0;
                        snprintf(buf, len, "%s", v);
                }
        fclose(f);
        return buf;
}

/* Calls with a harmless answer before the filter, whose answer under it
 * tells the filter is there. */
typedef struct before {
        int ptrace_err, swapon_err, netlink_err, inet6_err;
} before;

static void probe_before(before *b)
{
        b->ptrace_err = result(ptrace(PTRACE_PEEKDATA, getppid(), NULL, NULL));
        b->swapon_err = result(syscall(SYS_swapon, NULL, 0));
        b->netlink_err = try_socket(AF_NETLINK, SOCK_RAW);
        b->inet6_err = try_socket(AF_INET6, SOCK_STREAM);
}

static int probe_after(const before *b, unsigned persona)
{
        char buf[128];
        struct rlimit rl;
        pthread_t t;
        int e, changed = 0;
        mode_t mask;

        printf("summary %s\n", summary);
        printf("filter %s\n", GMD_SYSCALLS_SOURCE);
        check("seccomp", strcmp(status_field("Seccomp", buf, sizeof(buf)), "2") == 0,
              "Seccomp: %s", buf);
        check("no_new_privs", strcmp(status_field("NoNewPrivs", buf, sizeof(buf)),
                                     "1") == 0, "NoNewPrivs: %s", buf);
        printf("capbnd %s\n", status_field("CapBnd", buf, sizeof(buf)));
        check("capinh", strcmp(status_field("CapInh", buf, sizeof(buf)),
                               "0000000000000000") == 0, "CapInh: %s", buf);
        getrlimit(RLIMIT_NOFILE, &rl);
        printf("nofile %llu\n", (unsigned long long)rl.rlim_cur);
        getrlimit(RLIMIT_MEMLOCK, &rl);
        printf("memlock %s\n", limit_text(rl.rlim_cur, buf, sizeof(buf)));
        mask = umask(0077);
        check("umask", mask == 0077, "%04o", (unsigned)mask);

        /* Outside @system-service: EPERM where it answered otherwise. */
        e = result(ptrace(PTRACE_PEEKDATA, getppid(), NULL, NULL));
        check("ptrace", e == EPERM, "%s; %s without the filter", strerror(e),
              b->ptrace_err ? strerror(b->ptrace_err) : "allowed");
        changed += e == EPERM && b->ptrace_err != EPERM;
        e = result(syscall(SYS_swapon, NULL, 0));
        check("swapon", e == EPERM, "%s; %s without the filter", strerror(e),
              b->swapon_err ? strerror(b->swapon_err) : "allowed");
        changed += e == EPERM && b->swapon_err != EPERM;
        /* Inside it: allowed. */
        check("getpid", getpid() > 0, NULL);
        e = pthread_create(&t, NULL, thread_main, NULL);
        if (e == 0)
                pthread_join(t, NULL);
        check("pthread_create", e == 0, "%s", e ? strerror(e) : "clone3 refused, "
              "libc fell back to clone");
        /* RestrictAddressFamilies */
        e = try_socket(AF_UNIX, SOCK_SEQPACKET);
        check("socket_unix", e == 0, "%s", e ? strerror(e) : "allowed");
        e = try_socket(AF_INET, SOCK_STREAM);
        check("socket_inet", e == 0, "%s", e ? strerror(e) : "allowed");
        e = try_socket(AF_INET6, SOCK_STREAM);
        check("socket_inet6", e == b->inet6_err, "%s", e ? strerror(e) : "allowed");
        e = try_socket(AF_NETLINK, SOCK_RAW);
        check("socket_netlink", e == EAFNOSUPPORT, "%s; %s without the filter",
              strerror(e), b->netlink_err ? strerror(b->netlink_err) : "allowed");
        changed += e == EAFNOSUPPORT && b->netlink_err != EAFNOSUPPORT;
        /* Refused now, answered otherwise before: this filter, not the
         * container's or the lack of a privilege, refused them. */
        check("filter_active", changed > 0, "%d of ptrace, swapon, "
              "socket(AF_NETLINK) refused only under the filter", changed);
        /* RestrictNamespaces */
        e = result(unshare(CLONE_NEWUSER));
        check("unshare_user", e == EPERM, "%s", e ? strerror(e) : "allowed");
        e = result(syscall(SYS_setns, -1, 0));
        check("setns", e == EPERM, "%s", e ? strerror(e) : "allowed");
#ifdef SYS_clone3
        e = result(syscall(SYS_clone3, NULL, 0));
        check("clone3", e == ENOSYS, "%s", e ? strerror(e) : "allowed");
#endif
        /* LockPersonality */
        e = result(personality(PER_LINUX32));
        check("personality_change", e == EPERM, "%s", e ? strerror(e) : "allowed");
        check("personality_query", personality(0xffffffff) == (int)persona, NULL);
        /* RestrictRealtime */
        {
                struct sched_param sp = { .sched_priority = 1 };

                e = result(sched_setscheduler(0, SCHED_FIFO, &sp));
                check("sched_fifo", e == EPERM, "%s", e ? strerror(e) : "allowed");
                sp.sched_priority = 0;
                e = result(sched_setscheduler(0, SCHED_BATCH, &sp));
                check("sched_batch", e == 0, "%s", e ? strerror(e) : "allowed");
        }
        printf("probe %s\n", probe_failed ? "FAILED" : "ok");
        return probe_failed ? 1 : 0;
}

/* ---- main ------------------------------------------------------------------ */

static void usage(FILE *out)
{
        fprintf(out,
                "usage: %s [--deny NAME[,NAME...]]... [--] PROGRAM [ARGS...]\n"
                "       %s --probe [--deny NAME...]\n"
                "Run PROGRAM under the process-level confinement of "
                "gpu-memd.service\n(limits, umask, no capabilities, "
                "no_new_privs, seccomp: %s).\n", prog, prog,
                GMD_SYSCALLS_SOURCE);
}

int main(int argc, char **argv)
{
        static bpf filter;
        int probe = 0, i, r;
        unsigned persona;
        size_t n_allowed;
        before b = { 0 };

        for (i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--") == 0) {
                        i++;
                        break;
                } else if (strcmp(argv[i], "--probe") == 0)
                        probe = 1;
                else if (strcmp(argv[i], "--deny") == 0 && i + 1 < argc) {
                        if (add_deny(argv[++i]) < 0)
                                return 2;
                } else if (strcmp(argv[i], "--help") == 0) {
                        usage(stdout);
                        return 0;
                } else if (argv[i][0] == '-') {
                        usage(stderr);
                        return 2;
                } else
                        break;
        }
        if (!probe && i >= argc) {
                usage(stderr);
                return 2;
        }
        if (probe)
                probe_before(&b);

        set_nofile();
        set_memlock();
        umask(0077);
        note("umask 0077");
        if (drop_capabilities() < 0)
                return 1;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
                fprintf(stderr, "%s: PR_SET_NO_NEW_PRIVS: %s\n", prog,
                        strerror(errno));
                return 1;
        }
        note("no_new_privs");
        persona = (unsigned)personality(0xffffffff);
        n_allowed = build_filter(&filter, persona);
        r = install_filter(&filter);
        if (r < 0) {
                fprintf(stderr, "%s: cannot install a seccomp filter here: %s\n",
                        prog, strerror(-r));
                if (probe) {
                        printf("SKIP: seccomp filters unavailable (%s)\n",
                               strerror(-r));
                        return 77;
                }
                return 1;
        }
        note("seccomp %zu calls of %s else EPERM (%u insns), other arches "
             "killed, socket unix/inet/inet6 only, namespaces refused, "
             "personality locked, realtime refused", n_allowed,
             GMD_SYSCALLS_SOURCE, filter.n);
        note("not emulated: User=, DevicePolicy/DeviceAllow, Protect*/Private* "
             "mounts, IPAddressDeny, RestrictSUIDSGID, RemoveIPC");
        if (probe)
                return probe_after(&b, persona);

        fprintf(stderr, "%s: %s; exec %s\n", prog, summary, argv[i]);
        execvp(argv[i], argv + i);
        fprintf(stderr, "%s: exec %s: %s\n", prog, argv[i], strerror(errno));
        return 127;
}
