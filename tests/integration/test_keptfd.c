/*
 * test_keptfd — memory a process still holds through a kept fd of a
 * freed buffer (daemon/core/keptfd.h), on the sim backend with the real
 * daemon: sim exports memfds and sends dups of them, as cuda sends dups
 * of its exports, so the daemon's look (kcmp of its kept fd against the
 * fds of the owner's uid's processes) runs here as on a GPU.
 *
 * A tenant (a child process; as root, uid 65534 "nobody" with a
 * vram_quota of 24 MiB) allocates 8 MiB, dups the memfd libgpumem keeps
 * for it (found in /proc/self/fd), frees, and repeats. What must hold:
 *   - each kept buffer is charged (status: the client's outside bytes,
 *     the pool's outside, what the pool says free), and once they pass
 *     its quota it is refused with GMD_EQUOTA and the sentence naming
 *     kept fds; the log says why the charge started;
 *   - another user (root) allocates what the pool says free;
 *   - the tenant closes its dups: the charge goes within the recheck
 *     period (the log says why) and it allocates again;
 *   - a tenant that exits releases everything;
 *   - [limits] outside_vram = ignore shows the bytes and charges nothing;
 *   - = disconnect ends the sessions of a process its kept fds put over
 *     quota.
 * Not root: the tenant is this uid, and the other user is not checked.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "harness.h"

#define NOBODY ((uid_t)65534)
#define ROUND (8 * MiB)
/* A charge starts on two looks 300 ms apart and ends at the next look,
 * every 5 s (keptfd.h): what a test waits at most for either. */
#define CHARGE_MS 3000
#define RELEASE_MS 8000

typedef harness_fixture fixture;

enum { T_ROUND = 1, T_ALLOC, T_HOLD, T_FREE_HELD, T_CLOSE, T_QUIT };

typedef struct tcmd {
        int op;
        uint64_t size;
} tcmd;

typedef struct trep {
        int r;
        unsigned kept;          /* dups this process holds */
        char msg[400];
} trep;

/* The tenant's state (in the child). */
static gmd_client *tc;
static int dups[64];
static unsigned n_dups;
static gmd_buffer *held[8];
static unsigned n_held;

/* The memfds open in this process, into ret[] (at most max). */
static unsigned memfds(int *ret, unsigned max)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        unsigned n = 0;

        if (!d)
                return 0;
        while ((e = readdir(d)) && n < max) {
                char link[128];
                ssize_t len;

                if (e->d_name[0] == '.')
                        continue;
                len = readlinkat(dirfd(d), e->d_name, link, sizeof(link) - 1);
                if (len > 0) {
                        link[len] = '\0';
                        if (strstr(link, "memfd:"))
                                ret[n++] = atoi(e->d_name);
                }
        }
        closedir(d);
        return n;
}

/* Dup the memfds that are new since `before`. */
static unsigned keep_new(const int *before, unsigned n_before)
{
        int now[256];
        unsigned n = memfds(now, 256), kept = 0;

        for (unsigned i = 0; i < n && n_dups < 64; i++) {
                bool old = false;

                for (unsigned j = 0; j < n_before; j++)
                        old |= before[j] == now[i];
                for (unsigned j = 0; j < n_dups; j++)
                        old |= dups[j] == now[i];
                if (!old && (dups[n_dups] = fcntl(now[i], F_DUPFD_CLOEXEC,
                                                   3)) >= 0) {
                        n_dups++;
                        kept++;
                }
        }
        return kept;
}

static int tenant_op(const tcmd *c, trep *rep)
{
        gmd_buffer *b = NULL;
        int before[256], r = 0;
        unsigned n;

        switch (c->op) {
        case T_ROUND:
                n = memfds(before, 256);
                r = gmd_alloc(tc, c->size, 0, 0, 0, &b);
                if (r == 0 && keep_new(before, n) == 0)
                        r = -ENOENT;    /* no memfd to keep: says so */
                if (b)
                        gmd_free(tc, b);
                break;
        case T_ALLOC:
                r = gmd_alloc(tc, c->size, 0, 0, 0, &b);
                if (b)
                        gmd_free(tc, b);
                break;
        case T_HOLD:
                r = gmd_alloc(tc, c->size, 0, 0, 0, &b);
                if (r == 0)
                        held[n_held++] = b;
                break;
        case T_FREE_HELD:
                while (n_held)
                        gmd_free(tc, held[--n_held]);
                break;
        case T_CLOSE:
                while (n_dups)
                        close(dups[--n_dups]);
                break;
        }
        snprintf(rep->msg, sizeof(rep->msg), "%s", r ? gmd_last_error() : "");
        return r;
}

static void tenant_main(int sock, uid_t uid, const char *socket_path)
{
        tcmd c;
        trep rep = { 0 };

        /* A free frees: no cache of idle mappings keeping the buffer
         * (and its fd) for a next allocation. */
        setenv(GMD_CACHE_ENV, "0", 1);
        if (uid != geteuid() && (setgroups(0, NULL), setgid((gid_t)uid) < 0 ||
                                 setuid(uid) < 0))
                rep.r = -errno;
        else if (gmd_connect(socket_path, "tenant", &tc) < 0) {
                rep.r = -ENOTCONN;
                snprintf(rep.msg, sizeof(rep.msg), "%s", gmd_last_error());
        }
        if (write(sock, &rep, sizeof(rep)) != sizeof(rep) || rep.r)
                _exit(2);
        while (read(sock, &c, sizeof(c)) == sizeof(c) && c.op != T_QUIT) {
                memset(&rep, 0, sizeof(rep));
                rep.r = tenant_op(&c, &rep);
                rep.kept = n_dups;
                if (write(sock, &rep, sizeof(rep)) != sizeof(rep))
                        break;
        }
        _exit(0);
}

/* ---- the test's side ------------------------------------------------------- */

static bool as_root(void)
{
        return geteuid() == 0;
}

static uid_t tenant_uid(void)
{
        return as_root() ? NOBODY : getuid();
}

/* The daemon with `policy` and the tenant's vram_quota (`quota`, may be
 * NULL); then the tenant, forked before this process connects (it has
 * no threads yet), then this process's own client. */
static harness_proc *start(fixture *f, const char *policy, const char *quota)
{
        char config[512];
        harness_proc *t;
        int sv[2];
        trep rep;

        snprintf(config, sizeof(config), "[daemon]\nsocket_mode = 0666\n"
                 "[limits]\noutside_vram = %s\n%s%u%s%s%s", policy,
                 quota ? "[user " : "#", (unsigned)tenant_uid(),
                 quota ? "]\nvram_quota = " : "", quota ? quota : "",
                 quota ? "\n" : "");
        harness_start_small_metrics(&f->h, config);
        assert_int_equal(chmod(f->h.dir, 0711), 0);
        assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0,
                                    sv), 0);
        t = harness_track(f);
        t->pid = fork();
        assert_true(t->pid >= 0);
        if (t->pid == 0) {
                close(sv[0]);
                tenant_main(sv[1], tenant_uid(), f->h.socket_path);
        }
        close(sv[1]);
        t->out_fd = sv[0];
        if (read(t->out_fd, &rep, sizeof(rep)) != sizeof(rep) || rep.r)
                fail_msg("the tenant did not connect: %d %s", rep.r, rep.msg);
        /* Its frees free too: what the pool shows is the charge alone. */
        setenv(GMD_CACHE_ENV, "0", 1);
        f->client = harness_client(&f->h, "root");
        unsetenv(GMD_CACHE_ENV);
        return t;
}

static trep ask(harness_proc *t, int op, uint64_t size)
{
        tcmd c = { .op = op, .size = size };
        trep rep = { .r = -EPIPE };

        if (write(t->out_fd, &c, sizeof(c)) != sizeof(c) ||
            read(t->out_fd, &rep, sizeof(rep)) != sizeof(rep))
                rep.r = -EPIPE;
        return rep;
}

/* The tenant's outside bytes as status shows them (its client's row),
 * and the VRAM pool's. */
static uint64_t tenant_outside(fixture *f, pid_t pid)
{
        gmd_status *s = harness_status(f->client);
        uint64_t out = 0;

        for (size_t i = 0; i < s->n_clients; i++)
                if (s->clients[i].pid == (uint32_t)pid)
                        out += s->clients[i].outside_bytes;
        gmd_status_free(s);
        return out;
}

/* Poll until the tenant's outside bytes are `want` (timeout_ms). */
static uint64_t wait_outside(fixture *f, pid_t pid, uint64_t want,
                             int timeout_ms)
{
        uint64_t t0 = harness_now_ms(), out;

        while ((out = tenant_outside(f, pid)) != want &&
               harness_now_ms() - t0 < (uint64_t)timeout_ms)
                harness_sleep_ms(50);
        return out;
}

/* Poll until the VRAM pool's used bytes (the charge included: no
 * buffer is held when this is asked) are `want`. */
static uint64_t wait_pool_used(fixture *f, uint64_t want, int timeout_ms)
{
        return harness_wait_vram_used(f->client, 0, want, timeout_ms);
}

/* The daemon's log's last lines, for a failure's message. */
static const char *log_tail(fixture *f)
{
        static char tail[2048];
        char *log = harness_read_log(&f->h);
        size_t n = log ? strlen(log) : 0;

        snprintf(tail, sizeof(tail), "%s", log ? log + (n > 2000 ? n - 2000 : 0)
                                              : "");
        free(log);
        fprintf(stderr, "the daemon's log ends:\n%s\n", tail);
        return "(above)";
}

static void expect_log(fixture *f, const char *needle, int ms)
{
        char *line = harness_wait_log(&f->h, needle, ms);

        if (!line)
                fail_msg("the log has no line with \"%s\":\n%s", needle,
                         log_tail(f));
        free(line);
}

/* `rounds` rounds of alloc, dup, free, each charge waited for. */
static void keep_rounds(fixture *f, harness_proc *t, unsigned rounds)
{
        for (unsigned i = 1; i <= rounds; i++) {
                trep rep = ask(t, T_ROUND, ROUND);
                uint64_t out;

                if (rep.r)
                        fail_msg("round %u: %d %s", i, rep.r, rep.msg);
                out = wait_outside(f, t->pid, i * ROUND, CHARGE_MS);
                if (out != i * ROUND)
                        fail_msg("round %u: status shows %llu bytes outside "
                                 "for the tenant, want %llu; log:\n%s", i,
                                 (unsigned long long)out,
                                 (unsigned long long)(i * ROUND),
                                 log_tail(f));
        }
}

/* Charged to the quota, refused in words, shown; the pool's free room is
 * there for another user; closing the dups ends the charge. */
static void test_kept_charged_to_quota(void **state)
{
        fixture *f = *state;
        harness_proc *t = start(f, "charge", "24M");
        gmd_pool_status p;
        gmd_buffer *b = NULL;
        trep rep;

        keep_rounds(f, t, 3);
        expect_log(f, "keeps an fd of a freed buffer", 1000);
        rep = ask(t, T_ROUND, ROUND);
        if (rep.r != GMD_EQUOTA || !strstr(rep.msg, "24 MiB of VRAM outside "
                                           "gpu-memd through fds its "
                                           "processes kept"))
                fail_msg("the tenant over its quota by kept fds: %d (%s), "
                         "want GMD_EQUOTA saying so", rep.r, rep.msg);
        p = harness_vram_pool(f->client, 0);
        if (p.used != 3 * ROUND || p.free != 64 * MiB - 3 * ROUND)
                fail_msg("the pool shows %llu used, %llu free; want 24 MiB "
                         "(charged) and 40 MiB", (unsigned long long)p.used,
                         (unsigned long long)p.free);
        assert_true(harness_metric(&f->h, "gpumemd_vram_outside_charged_bytes"
                                   "{device=\"0\"}") == (double)(3 * ROUND));
        if (as_root()) {
                OK(gmd_alloc(f->client, p.free, 0, 0, 0, &b));
                OK(gmd_free(f->client, b));
        }
        /* The dups closed: the next look ends the charge. */
        rep = ask(t, T_CLOSE, 0);
        if (wait_outside(f, t->pid, 0, RELEASE_MS) != 0 ||
            wait_pool_used(f, 0, 1000) != 0)
                fail_msg("the charge stayed after the dups were closed; "
                         "log:\n%s", log_tail(f));
        expect_log(f, "is no longer charged: no process of the uid holds "
                   "it any more", 1000);
        rep = ask(t, T_ALLOC, 3 * ROUND);
        if (rep.r)
                fail_msg("the tenant allocates again: %d %s", rep.r, rep.msg);
        ask(t, T_QUIT, 0);
        harness_stop(&f->h);
}

/* A tenant that exits takes its kept fds with it: the charge goes. */
static void test_kept_released_on_exit(void **state)
{
        fixture *f = *state;
        harness_proc *t = start(f, "charge", "24M");
        int status;

        keep_rounds(f, t, 2);
        kill(t->pid, SIGKILL);
        waitpid(t->pid, &status, 0);
        t->pid = -1;
        if (wait_pool_used(f, 0, RELEASE_MS) != 0)
                fail_msg("the charge stayed after the tenant exited; log:\n%s",
                         log_tail(f));
        harness_stop(&f->h);
}

/* ignore: shown for the client, not charged to the pool or the quota. */
static void test_kept_ignored(void **state)
{
        fixture *f = *state;
        harness_proc *t = start(f, "ignore", "24M");
        gmd_pool_status p;
        trep rep;

        keep_rounds(f, t, 3);
        p = harness_vram_pool(f->client, 0);
        if (p.used != 0 || p.free != 64 * MiB)
                fail_msg("ignore: the pool counts %llu used (%llu free)",
                         (unsigned long long)p.used,
                         (unsigned long long)p.free);
        rep = ask(t, T_ALLOC, ROUND);
        if (rep.r)
                fail_msg("ignore: the tenant is refused: %d %s", rep.r,
                         rep.msg);
        ask(t, T_QUIT, 0);
        harness_stop(&f->h);
}

/* disconnect: a process its kept fds put over quota loses its sessions.
 * It holds its quota, frees one buffer keeping its fd, and allocates
 * again before the charge starts: the charge puts it over. */
static void test_kept_disconnects(void **state)
{
        fixture *f = *state;
        harness_proc *t = start(f, "disconnect", "16M");
        trep rep;

        rep = ask(t, T_HOLD, ROUND);
        if (rep.r)
                fail_msg("hold: %d %s", rep.r, rep.msg);
        rep = ask(t, T_ROUND, ROUND);
        if (rep.r)
                fail_msg("round: %d %s", rep.r, rep.msg);
        rep = ask(t, T_HOLD, ROUND);
        if (rep.r)
                fail_msg("hold again before the charge: %d %s", rep.r,
                         rep.msg);
        expect_log(f, "disconnected: holds 8 MiB of VRAM outside gpu-memd",
                   CHARGE_MS);
        if (harness_wait_clients(f->client, 1, 2000) != 1)
                fail_msg("the tenant's session was not ended");
        assert_true(harness_metric(&f->h, "gpumemd_outside_disconnects_total")
                    >= 1.0);
        ask(t, T_QUIT, 0);
        harness_stop(&f->h);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                HARNESS_TEST(test_kept_charged_to_quota),
                HARNESS_TEST(test_kept_released_on_exit),
                HARNESS_TEST(test_kept_ignored),
                HARNESS_TEST(test_kept_disconnects),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
