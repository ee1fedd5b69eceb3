/*
 * test_gpu_vram_outside — VRAM held outside gpu-memd on a real GPU
 * (daemon/core/vram.c).
 *
 * A second process that does not use gpu-memd (a worker, gpu_proc.h)
 * cuMemAlloc's most of what the GPU has free, leaving a few GiB. gpu-memd's
 * pool, sized at its start, still says it has room. Then:
 *   - status shows at least the worker's bytes as unaccounted, and the
 *     driver's free memory; where NVML is there, it names the worker's
 *     pid with at least its bytes;
 *   - an allocation the pool has room for but the GPU has not (1 GiB more
 *     than the GPU has free) is refused at once with GMD_ENOMEM and the
 *     sentence naming what is held outside gpu-memd, not ERR_INTERNAL
 *     from cuMemCreate; with a deadline too (waiting would not help);
 *   - an allocation that fits beside the worker's block is served;
 *   - once the worker frees its block, the refused size is served.
 * The worker takes what the GPU has free less 4 GiB, measured in its own
 * context just before, so nothing here asks the driver for more than it
 * has free; the refused allocation is asked of gpu-memd, which must not
 * pass it on. The figures are printed, so the log says what was tried.
 *
 * Then the charge (daemon/core/outside.h), on a second gpu-memd whose
 * config gives the tenant's uid a vram_quota of 8G (uid 65534 when run
 * as root, the worker dropping to it before it connects; else this uid,
 * and the root allocation below is not checked). A tenant worker:
 *   A. cuMemAlloc's 9 GiB beside gpu-memd: status shows them as its
 *      client's outside bytes; its next allocation is refused with
 *      GMD_EQUOTA and the sentence; root's allocation of what the pool
 *      says free succeeds; freed, the charge goes and it allocates again.
 *   B. allocates 1 GiB through gpu-memd, dups the fd libgpumem keeps
 *      for it (fds at or above 1024), frees, and repeats (its mapping
 *      cache off, so a free frees). NVML counts memory held only through
 *      a kept fd to no process (H100, H200, driver 580), so the daemon
 *      finds it itself: kcmp of its own dup of the freed buffer's export
 *      against the fds of the tenant's uid's processes
 *      (daemon/core/keptfd.h). Each round waits until status shows the
 *      kept GiB as the tenant's outside bytes; the tenant is refused
 *      with GMD_EQUOTA naming what is held outside by round 9 (8 GiB
 *      kept: it cannot hold more than its quota plus its context), and
 *      root's allocation of what the pool says free succeeds (the pool
 *      counts the kept bytes). Then the tenant closes its dups: the
 *      charge goes within the daemon's recheck (5 s) and it allocates
 *      again.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda_driver.h"
#include "gpu_kernels.h"
#include "gpu_proc.h"
#include "gpumem.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)
/* What the worker leaves free on the GPU. */
#define LEAVE_FREE (4 * GiB)

enum { H_TAKE = 1, H_FREE, T_INIT, T_CUDA, T_CUDA_FREE, T_ALLOC, T_ROUND,
       T_CLOSE };

typedef struct hcmd {
        int op;
        uint64_t leave;
} hcmd;

typedef struct hreply {
        int r;
        unsigned kept;           /* T_ROUND: fds kept so far */
        uint64_t taken;          /* bytes cuMemAlloc'd */
        uint64_t free_before;    /* the driver's free before it */
        char msg[160];
} hreply;

/* The tenant's side (tenant_op). */
static int tenant_op(const gmd_cuda_driver *cu, const hcmd *c, hreply *rep);

/* The outside user: a plain CUDA process, no gpu-memd; or the tenant of
 * the quota part, which uses both (its first command says which: a
 * tenant drops to its uid before CUDA or gpu-memd see it). */
static int hog(int sock)
{
        const gmd_cuda_driver *cu = NULL;
        const char *why = NULL;
        CUdeviceptr block = 0;
        int fds[GPU_PROC_MAX_FDS];
        CUcontext ctx;
        CUdevice dev;
        hcmd c;

        if (gpu_proc_recv(sock, &c, sizeof(c), fds) < 0)
                return 2;
        if (c.op == T_INIT) {
                hreply rep = { 0 };

                if (c.leave != (uint64_t)getuid() &&
                    (setgid((gid_t)c.leave) < 0 || setuid((uid_t)c.leave) < 0))
                        rep.r = -errno;
                if (gpu_proc_send(sock, &rep, sizeof(rep), NULL, 0) < 0 || rep.r)
                        return 2;
                if (gpu_proc_recv(sock, &c, sizeof(c), fds) < 0)
                        return 2;
        }
        if (cuda_driver_load(&cu, &why) < 0 || cu->cuDeviceGet(&dev, 0) ||
            cu->cuDevicePrimaryCtxRetain(&ctx, dev) || cu->cuCtxSetCurrent(ctx))
                return 2;
        do {
                hreply rep = { 0 };
                size_t f = 0, t = 0;
                char err[128];
                CUresult res;

                if (c.op >= T_CUDA) {
                        rep.r = tenant_op(cu, &c, &rep);
                        if (gpu_proc_send(sock, &rep, sizeof(rep), NULL, 0) < 0)
                                break;
                        continue;
                }
                switch (c.op) {
                case H_TAKE:
                        res = cu->cuMemGetInfo(&f, &t);
                        rep.free_before = f;
                        if (res != CUDA_SUCCESS || f <= c.leave + GiB) {
                                rep.r = -ENOSPC;
                                snprintf(rep.msg, sizeof(rep.msg),
                                         "only %llu MiB free on the GPU",
                                         (unsigned long long)(f / MiB));
                                break;
                        }
                        rep.taken = (f - c.leave) / (2 * MiB) * (2 * MiB);
                        res = cu->cuMemAlloc(&block, rep.taken);
                        if (res != CUDA_SUCCESS) {
                                rep.r = -ENOMEM;
                                rep.taken = 0;
                                snprintf(rep.msg, sizeof(rep.msg), "cuMemAlloc: %s",
                                         cuda_driver_error(cu, res, err,
                                                           sizeof(err)));
                        }
                        break;
                case H_FREE:
                        if (block)
                                rep.r = cu->cuMemFree(block) ? -EIO : 0;
                        block = 0;
                        break;
                }
                if (gpu_proc_send(sock, &rep, sizeof(rep), NULL, 0) < 0)
                        break;
        } while (gpu_proc_recv(sock, &c, sizeof(c), fds) == 0);
        if (block)
                cu->cuMemFree(block);
        return 0;
}

static hreply ask(gpu_proc *p, int op, uint64_t leave)
{
        hcmd c = { .op = op, .leave = leave };
        hreply rep = { .r = -EPIPE };
        int fds[GPU_PROC_MAX_FDS];

        if (gpu_proc_send(p->sock, &c, sizeof(c), NULL, 0) < 0 ||
            gpu_proc_recv(p->sock, &rep, sizeof(rep), fds) < 0)
                rep.r = -EPIPE;
        return rep;
}

static int vram_pool(gmd_client *c, gmd_pool_status *ret)
{
        gmd_status *s = NULL;
        int r = gmd_query_status(c, GMD_STATUS_POOLS, 0, &s);

        if (r < 0)
                return r;
        r = -ENOENT;
        for (size_t i = 0; i < s->n_pools; i++)
                if (s->pools[i].tier == GMD_TIER_VRAM && s->pools[i].device == 0) {
                        *ret = s->pools[i];
                        r = 0;
                }
        gmd_status_free(s);
        return r;
}

/* What status says about the processes on device 0: the bytes listed
 * for `pid` (-1: not listed), the largest figure listed, and how many. */
typedef struct listed {
        long long mine, largest;
        size_t n;
} listed;

static listed processes_listed(gmd_client *c, pid_t pid)
{
        listed l = { .mine = -1 };
        gmd_status *s = NULL;

        if (gmd_query_status(c, GMD_STATUS_POOLS, 0, &s) < 0)
                return l;
        for (size_t i = 0; i < s->n_gpu_processes; i++) {
                const gmd_gpu_process_status *g = &s->gpu_processes[i];

                if (g->device != 0)
                        continue;
                l.n++;
                if ((long long)g->bytes > l.largest)
                        l.largest = (long long)g->bytes;
                if (g->pid == (uint32_t)pid)
                        l.mine = (long long)g->bytes;
        }
        gmd_status_free(s);
        return l;
}

/* Attribution where the daemon has NVML: the outside block is listed,
 * under the outside process's pid — or, where NVML reports pids of
 * another pid namespace (containers), under some pid with at least its
 * bytes. No process listed: no NVML there, nothing to check. */
static void check_attribution(gmd_client *c, pid_t pid, uint64_t taken)
{
        listed l = processes_listed(c, pid);

        if (l.n == 0) {
                printf("NOTE: status lists no processes (no libnvidia-ml.so.1 "
                       "for the daemon, or NVML lists none): attribution not "
                       "checked\n");
                return;
        }
        printf("status lists %zu process(es) on gpu0; the outside process "
               "(pid %d): %lld MiB; the largest figure: %lld MiB\n", l.n,
               (int)pid, l.mine < 0 ? -1 : l.mine / (long long)MiB,
               l.largest / (long long)MiB);
        if (l.mine >= 0 && (uint64_t)l.mine >= taken)
                return;
        if (l.mine < 0 && (uint64_t)l.largest >= taken) {
                printf("NOTE: the outside block is listed under another pid: "
                       "NVML reports pids of another pid namespace here\n");
                return;
        }
        if (l.largest == 0) {
                printf("NOTE: NVML lists processes without their memory "
                       "(not available here): attribution not checked\n");
                return;
        }
        CHECK(0, "status does not attribute the outside block (%llu MiB) to "
              "any process", (unsigned long long)(taken / MiB));
}

/* gmd_alloc that must be refused for memory outside gpu-memd. */
static void expect_refused(gmd_client *c, uint64_t size, int64_t timeout_ms)
{
        gmd_buffer *b = NULL;
        double t0 = gpu_now_us(), ms;
        int r = gmd_alloc(c, size, 0, 0, timeout_ms, &b);
        char why[512];

        ms = (gpu_now_us() - t0) / 1e3;
        snprintf(why, sizeof(why), "%s", r ? gmd_last_error() : "served");
        printf("alloc %llu MiB (timeout %lld ms) beside the outside block: %d "
               "in %.1f ms: %s\n", (unsigned long long)(size / MiB),
               (long long)timeout_ms, r, ms, why);
        CHECK(r == GMD_ENOMEM, "want GMD_ENOMEM, got %d (%s)", r, why);
        CHECK(strstr(why, "held outside gpu-memd") != NULL,
              "the refusal names what is held outside gpu-memd: %s", why);
        CHECK(strstr(why, "cuMemCreate") == NULL && strstr(why, "backend") == NULL,
              "not the driver's failure passed on: %s", why);
        CHECK(ms < 1000, "refused at once, not after waiting (%.1f ms)", ms);
        if (r == 0)
                gmd_free(c, b);
}

static void run(gmd_client *c)
{
        /* Zero where a status query fails (its CHECK counts it). */
        gmd_pool_status before = { 0 }, during = { 0 }, after = { 0 };
        gmd_buffer *fits = NULL, *again = NULL;
        uint64_t refused_size;
        hreply rep;
        gpu_proc h;
        int r;

        CHECK(vram_pool(c, &before) == 0, "status: %s", gmd_last_error());
        printf("before: pool %llu MiB free of %llu; GPU %llu MiB free; "
               "unaccounted %llu MiB (CUDA contexts, other processes)\n",
               (unsigned long long)(before.free / MiB),
               (unsigned long long)(before.capacity / MiB),
               (unsigned long long)(before.device_free / MiB),
               (unsigned long long)(before.unaccounted / MiB));
        CHECK(before.device_free > 0, "status has the driver's free memory");

        CHECK(gpu_proc_spawn("hog", &h) == 0, "spawn the outside process");
        rep = ask(&h, H_TAKE, LEAVE_FREE);
        printf("outside process: %llu MiB free before, took %llu MiB with "
               "cuMemAlloc: %d %s\n", (unsigned long long)(rep.free_before / MiB),
               (unsigned long long)(rep.taken / MiB), rep.r, rep.msg);
        CHECK(rep.r == 0, "the outside process took its block: %s", rep.msg);
        if (rep.r < 0) {
                gpu_proc_wait(&h);
                return;
        }

        CHECK(vram_pool(c, &during) == 0, "status: %s", gmd_last_error());
        printf("during: pool %llu MiB free; GPU %llu MiB free; unaccounted "
               "%llu MiB\n", (unsigned long long)(during.free / MiB),
               (unsigned long long)(during.device_free / MiB),
               (unsigned long long)(during.unaccounted / MiB));
        CHECK(during.unaccounted >= before.unaccounted + rep.taken - 64 * MiB,
              "status shows the outside block as unaccounted (%llu MiB, want "
              "at least %llu)", (unsigned long long)(during.unaccounted / MiB),
              (unsigned long long)((before.unaccounted + rep.taken) / MiB));

        check_attribution(c, h.pid, rep.taken);

        /* Status offers no more than the GPU can hold; an allocation of
         * more, which the pool's own accounting has room for, is refused
         * with the sentence, not passed to the driver. */
        refused_size = (during.device_free + GiB) / (2 * MiB) * (2 * MiB);
        CHECK(during.free < refused_size,
              "status says %llu MiB free where the GPU has %llu MiB",
              (unsigned long long)(during.free / MiB),
              (unsigned long long)(during.device_free / MiB));
        expect_refused(c, refused_size, 0);
        expect_refused(c, refused_size, 2000);

        /* What fits beside it is served. */
        r = gmd_alloc(c, GiB, 0, 0, 0, &fits);
        CHECK(r == 0, "1 GiB beside the outside block: %s", gmd_last_error());
        if (r == 0)
                CHECK(gpu_fill(gmd_buffer_ptr(fits), GiB, 0, 7) == 0 &&
                      gpu_check(gmd_buffer_ptr(fits), GiB, 0, 7) == 0,
                      "the 1 GiB buffer holds its bytes");
        if (fits)
                gmd_free(c, fits);

        rep = ask(&h, H_FREE, 0);
        CHECK(rep.r == 0, "the outside process freed its block");
        CHECK(gpu_proc_wait(&h) == 0, "the outside process ended");

        CHECK(vram_pool(c, &after) == 0, "status: %s", gmd_last_error());
        printf("after: GPU %llu MiB free; unaccounted %llu MiB\n",
               (unsigned long long)(after.device_free / MiB),
               (unsigned long long)(after.unaccounted / MiB));
        CHECK(after.unaccounted + rep.taken / 2 < during.unaccounted,
              "unaccounted went down once the block was freed");
        r = gmd_alloc(c, refused_size, 0, 0, 5000, &again);
        CHECK(r == 0, "the refused %llu MiB is served once the outside block "
              "is gone: %s", (unsigned long long)(refused_size / MiB),
              gmd_last_error());
        if (again)
                gmd_free(c, again);
}

/* ---- the charge: a tenant with a vram_quota of 8G ---------------------- */

#define TENANT_QUOTA (8 * GiB)
#define TENANT_CUDA_GIB 9
#define TENANT_ROUNDS 12

static gmd_client *tenant;              /* in the tenant worker */
static CUdeviceptr tenant_blocks[TENANT_CUDA_GIB];
static unsigned tenant_kept;
static int tenant_dups[TENANT_ROUNDS + 4];

/* The fds at or above 1024 (where libgpumem keeps those of the segments
 * it maps) not in `before` (n of them): dup each below it, kept. */
static unsigned keep_new_fds(const int *before, unsigned n)
{
        DIR *dir = opendir("/proc/self/fd");
        struct dirent *e;
        unsigned kept = 0;

        if (!dir)
                return 0;
        while ((e = readdir(dir))) {
                int fd = atoi(e->d_name);
                bool old = false;

                if (fd < 1024 || fd == dirfd(dir))
                        continue;
                for (unsigned i = 0; i < n; i++)
                        old |= before[i] == fd;
                if (!old && tenant_kept + kept < sizeof(tenant_dups) /
                                                 sizeof(tenant_dups[0]) &&
                    (tenant_dups[tenant_kept + kept] =
                             fcntl(fd, F_DUPFD_CLOEXEC, 3)) >= 0)
                        kept++;
        }
        closedir(dir);
        return kept;
}

static unsigned high_fds(int *ret, unsigned max)
{
        DIR *dir = opendir("/proc/self/fd");
        struct dirent *e;
        unsigned n = 0;

        if (!dir)
                return 0;
        while ((e = readdir(dir)) && n < max) {
                int fd = atoi(e->d_name);

                if (fd >= 1024 && fd != dirfd(dir))
                        ret[n++] = fd;
        }
        closedir(dir);
        return n;
}

static int tenant_op(const gmd_cuda_driver *cu, const hcmd *c, hreply *rep)
{
        gmd_buffer *b = NULL;
        int before[256], r;
        unsigned n;

        /* A free frees: no cache of idle mappings keeping the buffer. */
        if (!tenant)
                setenv(GMD_CACHE_ENV, "0", 1);
        if (!tenant && gmd_connect(NULL, "tenant", &tenant) < 0) {
                snprintf(rep->msg, sizeof(rep->msg), "connect: %s",
                         gmd_last_error());
                return -ENOTCONN;
        }
        switch (c->op) {
        case T_CUDA:
                for (unsigned i = 0; i < TENANT_CUDA_GIB; i++)
                        if (cu->cuMemAlloc(&tenant_blocks[i], GiB))
                                return -ENOMEM;
                return 0;
        case T_CUDA_FREE:
                for (unsigned i = 0; i < TENANT_CUDA_GIB; i++)
                        if (tenant_blocks[i])
                                cu->cuMemFree(tenant_blocks[i]);
                memset(tenant_blocks, 0, sizeof(tenant_blocks));
                return 0;
        case T_ALLOC:
                r = gmd_alloc(tenant, c->leave, 0, 0, 0, &b);
                snprintf(rep->msg, sizeof(rep->msg), "%s",
                         r ? gmd_last_error() : "served");
                if (r == 0)
                        gmd_free(tenant, b);
                return r;
        case T_ROUND:
                n = high_fds(before, 256);
                r = gmd_alloc(tenant, GiB, 0, 0, 0, &b);
                snprintf(rep->msg, sizeof(rep->msg), "%s",
                         r ? gmd_last_error() : "served");
                if (r == 0) {
                        tenant_kept += keep_new_fds(before, n);
                        gmd_free(tenant, b);
                }
                rep->kept = tenant_kept;
                return r;
        case T_CLOSE:
                while (tenant_kept)
                        close(tenant_dups[--tenant_kept]);
                return 0;
        }
        return -EINVAL;
}

/* Status of the tenant's client (by pid): its outside bytes; and what
 * NVML says of the pid. */
static uint64_t tenant_outside(gmd_client *c, pid_t pid, long long *ret_nvml)
{
        gmd_status *s = NULL;
        uint64_t out = 0;

        *ret_nvml = processes_listed(c, pid).mine;
        if (gmd_query_status(c, GMD_STATUS_CLIENTS, 0, &s) < 0)
                return 0;
        for (size_t i = 0; i < s->n_clients; i++)
                if (s->clients[i].pid == (uint32_t)pid)
                        out += s->clients[i].outside_bytes;
        gmd_status_free(s);
        return out;
}

/* Root's allocation of what the pool says free (rounded down to 2 MiB). */
static void root_takes_pool_free(gmd_client *c, bool other_uid, const char *when)
{
        gmd_pool_status p = { 0 };
        gmd_buffer *b = NULL;
        uint64_t size;
        int r;

        if (!other_uid) {
                printf("NOTE: not root: the tenant is this uid, the root "
                       "allocation (%s) not checked\n", when);
                return;
        }
        CHECK(vram_pool(c, &p) == 0, "status: %s", gmd_last_error());
        size = p.free / (2 * MiB) * (2 * MiB);
        if (size == 0)
                return;
        r = gmd_alloc(c, size, 0, 0, 0, &b);
        printf("%s: root allocates what the pool says free, %llu MiB: %d %s\n",
               when, (unsigned long long)(size / MiB), r,
               r ? gmd_last_error() : "served");
        CHECK(r == 0, "%s: root's allocation of the pool's free %llu MiB: %s",
              when, (unsigned long long)(size / MiB), gmd_last_error());
        if (r == 0)
                gmd_free(c, b);
}

static void tenant_test(void)
{
        bool root = geteuid() == 0;
        uid_t uid = root ? 65534 : getuid();
        char conf[96] = "/tmp/gmd-outside-XXXXXX", text[160];
        const char *extra[] = { "--config", conf, NULL };
        gmd_client *c = NULL;
        long long nvml = -1;
        int refused_at = -1, fd, r;
        uint64_t out;
        gpu_daemon d;
        hreply rep;
        gpu_proc t;

        fd = mkstemp(conf);
        CHECK(fd >= 0, "config file");
        if (fd < 0)
                return;
        snprintf(text, sizeof(text), "[daemon]\nsocket_mode = 0666\n"
                 "[limits]\noutside_vram = charge\n"
                 "[user %u]\nvram_quota = 8G\n", (unsigned)uid);
        CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write");
        close(fd);
        r = gpu_daemon_start(extra, &d);
        CHECK(r == 0, "start gpu-memd with %s: %s", conf, strerror(-r));
        if (r < 0)
                goto out;
        if (root)
                chmod(d.dir, 0755);     /* the tenant reaches the socket */
        CHECK(gmd_connect(NULL, "root", &c) == 0, "connect: %s", gmd_last_error());
        CHECK(gpu_proc_spawn("tenant", &t) == 0, "spawn the tenant");
        rep = ask(&t, T_INIT, uid);
        CHECK(rep.r == 0, "the tenant runs as uid %u", (unsigned)uid);

        /* A: memory allocated beside gpu-memd. */
        rep = ask(&t, T_ALLOC, GiB);
        CHECK(rep.r == 0, "A: the tenant allocates 1 GiB first: %s", rep.msg);
        rep = ask(&t, T_CUDA, 0);
        CHECK(rep.r == 0, "A: the tenant cuMemAlloc's %d GiB", TENANT_CUDA_GIB);
        out = tenant_outside(c, t.pid, &nvml);
        printf("A: the tenant holds %d GiB beside gpu-memd: NVML %lld MiB, "
               "outside %llu MiB\n", TENANT_CUDA_GIB,
               nvml < 0 ? -1 : nvml / (long long)MiB,
               (unsigned long long)(out / MiB));
        CHECK(out >= (TENANT_CUDA_GIB - 1) * GiB, "A: status shows the "
              "tenant's %d GiB as outside (%llu MiB)", TENANT_CUDA_GIB,
              (unsigned long long)(out / MiB));
        rep = ask(&t, T_ALLOC, GiB);
        printf("A: the tenant allocates 1 GiB: %d %s\n", rep.r, rep.msg);
        CHECK(rep.r == GMD_EQUOTA && strstr(rep.msg, "outside gpu-memd"),
              "A: refused with GMD_EQUOTA naming what is held outside: %d %s",
              rep.r, rep.msg);
        root_takes_pool_free(c, root, "A");
        rep = ask(&t, T_CUDA_FREE, 0);
        out = tenant_outside(c, t.pid, &nvml);
        CHECK(out == 0, "A: the charge goes with the bytes (%llu MiB left)",
              (unsigned long long)(out / MiB));
        rep = ask(&t, T_ALLOC, GiB);
        CHECK(rep.r == 0, "A: the tenant allocates again: %s", rep.msg);

        /* B: fds kept after freeing. */
        for (int i = 1; i <= TENANT_ROUNDS; i++) {
                double t0 = gpu_now_us();

                rep = ask(&t, T_ROUND, 0);
                /* The charge starts on the daemon's second look, 300 ms
                 * after the first: waited for, so the round it is refused
                 * at is the one its quota says. */
                do {
                        out = tenant_outside(c, t.pid, &nvml);
                        if (rep.r != 0 || out >= (uint64_t)rep.kept * GiB)
                                break;
                        usleep(50 * 1000);
                } while (gpu_now_us() - t0 < 3e6);
                printf("B: round %d: %d (%s); fds kept %u; NVML %lld MiB; "
                       "outside %llu MiB\n", i, rep.r, rep.msg, rep.kept,
                       nvml < 0 ? -1 : nvml / (long long)MiB,
                       (unsigned long long)(out / MiB));
                if (rep.r != 0) {
                        refused_at = i;
                        CHECK(rep.r == GMD_EQUOTA &&
                              strstr(rep.msg, "outside gpu-memd"),
                              "B: refused with GMD_EQUOTA naming what is held "
                              "outside: %d %s", rep.r, rep.msg);
                        break;
                }
        }
        /* 1 GiB a round kept, each charged before the next round: the
         * round that would pass 8 GiB (plus what NVML shows of the
         * tenant beyond its context's allowance) is refused, at 9 at the
         * latest. */
        printf("B: the tenant keeping freed buffers' fds was %s\n",
               refused_at > 0 ? "refused once over its quota" :
               "never refused");
        CHECK(refused_at > 0 && refused_at <= 9, "B: refused by round 9 "
              "(8 GiB kept), not %d", refused_at);
        CHECK(rep.kept <= 8, "B: the tenant kept %u GiB, over its 8 GiB "
              "quota", rep.kept);
        root_takes_pool_free(c, root, "B");
        rep = ask(&t, T_CLOSE, 0);
        {
                double t0 = gpu_now_us();

                while ((out = tenant_outside(c, t.pid, &nvml)) != 0 &&
                       gpu_now_us() - t0 < 8e6)
                        usleep(100 * 1000);
        }
        printf("B: the tenant closed its dups: outside %llu MiB\n",
               (unsigned long long)(out / MiB));
        CHECK(out == 0, "B: the charge goes once the dups are closed (%llu "
              "MiB left)", (unsigned long long)(out / MiB));
        rep = ask(&t, T_ALLOC, GiB);
        CHECK(rep.r == 0, "B: the tenant allocates again: %s", rep.msg);
        gpu_proc_wait(&t);
        gmd_disconnect(c);
        CHECK(gpu_daemon_stop(&d, gpu_failures ? stdout : NULL) == 0,
              "gpu-memd stops cleanly");
out:
        unlink(conf);
}

int main(int argc, char **argv)
{
        int sock = gpu_proc_worker_sock(argc, argv);
        int r;

        if (sock >= 0)
                return hog(sock);
        r = gpu_client_test("vram-outside", run);
        if (r == GPU_TEST_SKIP)
                return r;
        tenant_test();
        printf("%s (the charge): %d failure(s)\n", gpu_failures ? "FAIL" :
               "PASS", gpu_failures);
        return gpu_failures ? 1 : 0;
}
