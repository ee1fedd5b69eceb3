/*
 * test_gpu_swap — oversubscription on the GPU: the real gpu-memd on the
 * cuda backend with a 1 GiB VRAM pool, and three client processes whose
 * buffers together are about twice that, all running to completion with
 * bit-exact checks by kernels after every round trip.
 *
 * Each client (a worker process, gpu_proc.h, with GPU_MEMD_CACHE=0 so the
 * daemon's accounting is the whole story) allocates BUFS buffers; each is
 * filled by a kernel with a pattern of its own and released. Allocation
 * pressure makes the daemon evict released buffers of any client to host
 * memory. Then ROUNDS rounds, the three clients at once: for each buffer,
 * acquire (a passive swap-in, evicting others), check the last round's
 * pattern with a kernel, write this round's, check it, release. Then one
 * client pages all of its buffers out with gmd_pageout + gmd_wait, checks
 * they are on the host tier, prefetches them back and checks the data.
 * Finally every buffer is freed and both pools must be empty.
 *
 * Exits 77 with one "SKIP:" line when there is no usable GPU.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_driver.h"
#include "gpu_kernels.h"
#include "gpu_proc.h"
#include "gpumem.h"

#define MiB (1ull << 20)
#define CLIENTS 3
#define BUFS 3
#define BUF_SIZE (224 * MiB)   /* 9 x 224 MiB = 2016 MiB against 1 GiB */
#define ROUNDS 3
#define WAIT_MS 60000

enum { W_ALLOC = 1, W_ROUND, W_PAGEOUT, W_FREE, W_QUIT };

typedef struct wcmd {
        int op, round;
        uint32_t base_seed;
} wcmd;

typedef struct wreply {
        int r;
        long long bad;          /* words that differed */
        int on_host;            /* buffers on the host tier */
        double us;
        char msg[256];
} wreply;


static uint32_t seed_of(uint32_t base, int buf, int round)
{
        return base + (uint32_t)buf * 100u + (uint32_t)round;
}

/* ---- worker: one client process ----------------------------------------- */

static int fail_msg(wreply *rep, int r, const char *what)
{
        rep->r = r < 0 ? r : -EIO;
        snprintf(rep->msg, sizeof(rep->msg), "%s: %s%s", what,
                 gmd_last_error(), r < 0 ? "" : gpu_last_error());
        return rep->r;
}

/* Acquire, check the pattern `check`, write `write` (0: leave), release. */
static int touch(gmd_client *c, gmd_buffer *b, uint32_t check, uint32_t write,
                 wreply *rep)
{
        long long bad;
        int r;

        r = gmd_acquire(c, b, WAIT_MS);
        if (r < 0)
                return fail_msg(rep, r, "acquire");
        if (gmd_buffer_tier(b) != GMD_TIER_VRAM)
                rep->on_host++;   /* not expected for SWAPPABLE: reported */
        bad = gpu_check(gmd_buffer_ptr(b), gmd_buffer_size(b), 0, check);
        if (bad < 0)
                return fail_msg(rep, 1, "check");
        rep->bad += bad;
        if (write) {
                if (gpu_fill(gmd_buffer_ptr(b), gmd_buffer_size(b), 0, write) < 0)
                        return fail_msg(rep, 1, "fill");
                bad = gpu_check(gmd_buffer_ptr(b), gmd_buffer_size(b), 0, write);
                rep->bad += bad < 0 ? 1 : bad;
        }
        r = gmd_release(c, b);
        if (r < 0)
                return fail_msg(rep, r, "release");
        return 0;
}

static int worker(int sock)
{
        gmd_buffer *bufs[BUFS] = { 0 };
        int fds[GPU_PROC_MAX_FDS];
        gmd_client *c;
        uint64_t f, t;
        wcmd cmd;

        if (gpu_mem_info(&f, &t) < 0)
                return 2;
        if (gmd_connect(NULL, "gpu-swap-worker", &c) < 0) {
                fprintf(stderr, "worker: connect: %s\n", gmd_last_error());
                return 3;
        }
        while (gpu_proc_recv(sock, &cmd, sizeof(cmd), fds) == 0) {
                wreply rep = { 0 };
                double t0 = gpu_now_us();
                int r;

                switch (cmd.op) {
                case W_ALLOC:
                        for (int i = 0; i < BUFS && rep.r == 0; i++) {
                                r = gmd_alloc(c, BUF_SIZE, 0, GMD_ALLOC_SWAPPABLE,
                                              WAIT_MS, &bufs[i]);
                                if (r < 0) {
                                        fail_msg(&rep, r, "alloc");
                                        break;
                                }
                                if (gpu_fill(gmd_buffer_ptr(bufs[i]), BUF_SIZE, 0,
                                             seed_of(cmd.base_seed, i, 0)) < 0) {
                                        fail_msg(&rep, 1, "fill");
                                        break;
                                }
                                r = gmd_release(c, bufs[i]);
                                if (r < 0)
                                        fail_msg(&rep, r, "release");
                        }
                        break;
                case W_ROUND:
                        for (int i = 0; i < BUFS && rep.r == 0; i++)
                                touch(c, bufs[i],
                                      seed_of(cmd.base_seed, i, cmd.round - 1),
                                      seed_of(cmd.base_seed, i, cmd.round), &rep);
                        break;
                case W_PAGEOUT:
                        /* All of mine out, wait, count, all back, check. */
                        r = gmd_pageout(c, NULL);
                        if (r == 0)
                                r = gmd_wait(c, NULL, WAIT_MS);
                        if (r < 0) {
                                fail_msg(&rep, r, "pageout");
                                break;
                        }
                        for (int i = 0; i < BUFS; i++)
                                rep.on_host += gmd_buffer_tier(bufs[i]) == GMD_TIER_HOST;
                        r = gmd_prefetch(c, NULL);
                        if (r == 0)
                                r = gmd_wait(c, NULL, WAIT_MS);
                        if (r < 0) {
                                fail_msg(&rep, r, "prefetch");
                                break;
                        }
                        for (int i = 0; i < BUFS && rep.r == 0; i++) {
                                if (gmd_buffer_tier(bufs[i]) != GMD_TIER_VRAM)
                                        rep.on_host += 100;   /* not back */
                                touch(c, bufs[i],
                                      seed_of(cmd.base_seed, i, cmd.round), 0, &rep);
                        }
                        break;
                case W_FREE:
                        for (int i = 0; i < BUFS; i++) {
                                if (bufs[i] && gmd_free(c, bufs[i]) < 0 && rep.r == 0)
                                        fail_msg(&rep, -EIO, "free");
                                bufs[i] = NULL;
                        }
                        break;
                case W_QUIT:
                        gmd_disconnect(c);
                        return 0;
                }
                rep.us = gpu_now_us() - t0;
                gpu_proc_send(sock, &rep, sizeof(rep), NULL, 0);
        }
        return 1;
}

/* ---- the test ------------------------------------------------------------ */

/* Send one command to every worker, then collect every reply: the clients
 * run at the same time. */
static void all_do(gpu_proc *w, int op, int round, const char *what)
{
        int fds[GPU_PROC_MAX_FDS];

        for (int i = 0; i < CLIENTS; i++) {
                wcmd c = { .op = op, .round = round,
                           .base_seed = 1000u * (unsigned)(i + 1) };

                CHECK(gpu_proc_send(w[i].sock, &c, sizeof(c), NULL, 0) == 0,
                      "send to client %d", i);
        }
        for (int i = 0; i < CLIENTS; i++) {
                wreply rep = { .r = -EIO };

                if (gpu_proc_recv(w[i].sock, &rep, sizeof(rep), fds) < 0)
                        snprintf(rep.msg, sizeof(rep.msg), "worker gone");
                CHECK(rep.r == 0, "%s, client %d: %s", what, i, rep.msg);
                CHECK(rep.bad == 0, "%s, client %d: %lld words differ", what, i,
                      rep.bad);
                CHECK(rep.on_host == 0, "%s, client %d: %d acquired buffers "
                      "not in VRAM", what, i, rep.on_host);
                printf("%s, client %d: %.1f ms%s\n", what, i, rep.us / 1e3,
                       rep.r == 0 && rep.bad == 0 ? ", patterns intact" : "");
        }
}

/* Bytes of the pools: VRAM of device 0 and host; how many buffers are on
 * the host tier. */
static void pools(gmd_client *me, uint64_t *vram, uint64_t *host,
                  unsigned *n_host)
{
        gmd_status *st = NULL;

        *vram = *host = UINT64_MAX;
        *n_host = 0;
        if (gmd_query_status(me, GMD_STATUS_BUFFERS, 0, &st) < 0)
                return;
        for (size_t i = 0; i < st->n_pools; i++) {
                if (st->pools[i].tier == GMD_TIER_VRAM && st->pools[i].device == 0)
                        *vram = st->pools[i].used;
                if (st->pools[i].tier == GMD_TIER_HOST)
                        *host = st->pools[i].used;
        }
        for (size_t i = 0; i < st->n_buffers; i++)
                *n_host += st->buffers[i].tier == GMD_TIER_HOST;
        gmd_status_free(st);
}

int main(int argc, char **argv)
{
        static const char *const args[] = { "--vram-limit", "1G",
                                            "--host-limit", "4G",
                                            "--log-level", "info", NULL };
        const gmd_cuda_driver *cu;
        gpu_proc w[CLIENTS];
        gmd_client *me = NULL;
        uint64_t vram, host;
        unsigned n_host;
        gpu_daemon d;
        int r;

        cu = gpu_test_begin(argc, argv, worker);
        if (!cu)
                return GPU_TEST_SKIP;
        gpu_say_device(cu, 0, "the daemon's device 0 and its 1 GiB pool, "
                       "where every client's buffers are (the other GPUs "
                       "get pools of their own, unused here)");

        setenv("GPU_MEMD_CACHE", "0", 1);   /* workers inherit it */
        r = gpu_daemon_start(args, &d);
        CHECK(r == 0, "start gpu-memd: %s", strerror(-r));
        if (r < 0)
                return 1;
        r = gmd_connect(NULL, "gpu-swap-test", &me);
        CHECK(r == 0, "connect: %s", gmd_last_error());
        for (int i = 0; r == 0 && i < CLIENTS; i++) {
                r = gpu_proc_spawn("swap-client", &w[i]);
                CHECK(r == 0, "spawn client %d", i);
        }
        if (r == 0) {
                all_do(w, W_ALLOC, 0, "allocate and fill");
                pools(me, &vram, &host, &n_host);
                printf("after allocation: VRAM pool %llu MiB, host pool %llu MiB, "
                       "%u buffers on the host tier\n", (unsigned long long)(vram / MiB),
                       (unsigned long long)(host / MiB), n_host);
                CHECK(vram <= 1024 * MiB, "VRAM pool within its limit");
                CHECK(n_host >= 4, "eviction moved buffers out: %u on host", n_host);
                for (int round = 1; round <= ROUNDS; round++) {
                        char what[32];

                        snprintf(what, sizeof(what), "round %d", round);
                        all_do(w, W_ROUND, round, what);
                }
                pools(me, &vram, &host, &n_host);
                printf("after %d rounds: VRAM pool %llu MiB, host pool %llu MiB, "
                       "%u buffers on the host tier\n", ROUNDS,
                       (unsigned long long)(vram / MiB),
                       (unsigned long long)(host / MiB), n_host);

                /* One client at a time: its buffers out, and back. */
                for (int i = 0; i < CLIENTS; i++) {
                        wcmd c = { .op = W_PAGEOUT, .round = ROUNDS,
                                   .base_seed = 1000u * (unsigned)(i + 1) };
                        int fds[GPU_PROC_MAX_FDS];
                        wreply rep = { .r = -EIO };

                        gpu_proc_send(w[i].sock, &c, sizeof(c), NULL, 0);
                        gpu_proc_recv(w[i].sock, &rep, sizeof(rep), fds);
                        CHECK(rep.r == 0, "pageout/prefetch, client %d: %s", i,
                              rep.msg);
                        CHECK(rep.on_host == BUFS, "client %d: %d of %d buffers "
                              "on the host after pageout (100s: not back after "
                              "prefetch)", i, rep.on_host, BUFS);
                        CHECK(rep.bad == 0, "client %d: %lld words differ after "
                              "pageout and prefetch", i, rep.bad);
                        printf("pageout + prefetch of all, client %d: %.1f ms, %s\n",
                               i, rep.us / 1e3, rep.bad == 0 && rep.r == 0 ?
                               "patterns intact" : "FAILED");
                }

                all_do(w, W_FREE, 0, "free");
                for (int i = 0; i < 200; i++) {
                        pools(me, &vram, &host, &n_host);
                        if (vram == 0 && host == 0)
                                break;
                        usleep(10000);
                }
                CHECK(vram == 0 && host == 0, "pools empty after free: VRAM %llu, "
                      "host %llu bytes", (unsigned long long)vram,
                      (unsigned long long)host);
                for (int i = 0; i < CLIENTS; i++) {
                        wcmd c = { .op = W_QUIT };

                        gpu_proc_send(w[i].sock, &c, sizeof(c), NULL, 0);
                        CHECK(gpu_proc_wait(&w[i]) == 0, "client %d exits", i);
                }
        }
        gmd_disconnect(me);
        CHECK(gpu_daemon_stop(&d, stdout) == 0, "gpu-memd stops cleanly");
        printf("%s: %d failure(s)\n", gpu_failures ? "FAIL" : "PASS", gpu_failures);
        return gpu_failures ? 1 : 0;
}
