/*
 * peer_bench — how fast gpu-memd's peer tier moves a buffer of GPU 0 to
 * GPU 1's free VRAM and back, against the driver's peer copy measured in
 * the same run, and against the same moves through host memory.
 *
 *   baseline  cuMemcpyPeerAsync between two cuMemAlloc buffers on GPU 0
 *             and GPU 1 (peer access enabled), + cuStreamSynchronize,
 *             each way, timed on the host
 *   peer      a gpu-memd serving both GPUs with [pools] peer_tier = on:
 *             gmd_pageout + gmd_wait of a buffer on GPU 0 (it goes to GPU
 *             1's VRAM: checked in status) and gmd_prefetch + gmd_wait
 *   host      the same with peer_tier = off (host memory, the arena)
 * per size (64 MiB .. 1 GiB), median of --reps (5) after one cold round
 * trip, and a batch of 16 x 64 MiB moved with one gmd_pageout(NULL) and
 * one gmd_prefetch(NULL) (against the 1 GiB baseline); every buffer's
 * pattern is checked by a kernel after its moves.
 * Ratios are ours / baseline.
 *
 * Usage: peer_bench [--json FILE] [--reps N]. Exits 77 without two GPUs
 * that reach each other.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_cli.h"
#include "cuda_driver.h"
#include "gpu_kernels.h"
#include "gpu_proc.h"
#include "gpumem.h"

#define MiB (1ull << 20)
#define MAX_REPS 32
#define N_SIZES 3

static const uint64_t sizes_mib[N_SIZES] = { 64, 256, 1024 };

typedef struct samples {
        double v[MAX_REPS];
        int n;
} samples;

typedef struct row {
        uint64_t size;
        samples base_out, base_in;   /* GB/s, GPU 0 -> 1 and back */
        samples peer_out, peer_in;
        samples host_out, host_in;
        bool on_peer;                /* status saw it on GPU 1 */
        bool checked_ok;
} row;

static row rows[N_SIZES];

/* A batch: BATCH_N buffers of 64 MiB all paged out with one
 * gmd_pageout(NULL) and back with one gmd_prefetch(NULL), so the per-move
 * costs (the remap round trip, a destination) overlap other moves'
 * copies: the tier's throughput, against the 1 GiB baseline. */
#define BATCH_N 16
#define BATCH_SIZE (64 * MiB)
static samples batch_peer_out, batch_peer_in, batch_host_out, batch_host_in;
static bool batch_on_peer, batch_ok = true;
static const gmd_cuda_driver *cu;
static int failures;

/* The samples stay in the order taken. */
static double median(const samples *s)
{
        double v[MAX_REPS];

        memcpy(v, s->v, sizeof(double) * (size_t)s->n);
        return bench_median(v, s->n);
}

static void add(samples *s, uint64_t bytes, double us)
{
        if (us > 0 && s->n < MAX_REPS)
                s->v[s->n++] = (double)bytes / us / 1e3;
}

#define CU(call) do {                                                   \
                CUresult r_ = (call);                                   \
                if (r_ != CUDA_SUCCESS) {                               \
                        fprintf(stderr, "%s: error %d\n", #call, (int)r_); \
                        return -1;                                      \
                }                                                       \
        } while (0)

static int run_baseline(int reps)
{
        CUdevice dev[2];
        CUcontext ctx[2];
        CUdeviceptr a = 0, b = 0;
        CUstream s;
        uint64_t max = sizes_mib[N_SIZES - 1] * MiB;

        for (int i = 0; i < 2; i++) {
                CU(cu->cuDeviceGet(&dev[i], i));
                CU(cu->cuDevicePrimaryCtxRetain(&ctx[i], dev[i]));
        }
        CU(cu->cuCtxSetCurrent(ctx[1]));
        CU(cu->cuMemAlloc(&b, max));
        (void)cu->cuCtxEnablePeerAccess(ctx[0], 0);
        CU(cu->cuCtxSetCurrent(ctx[0]));
        CU(cu->cuMemAlloc(&a, max));
        (void)cu->cuCtxEnablePeerAccess(ctx[1], 0);
        CU(cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        for (int k = 0; k < N_SIZES; k++) {
                uint64_t size = rows[k].size;

                for (int i = 0; i <= reps; i++) {
                        double t0 = gpu_now_us(), t1;

                        CU(cu->cuMemcpyPeerAsync(b, ctx[1], a, ctx[0], size, s));
                        CU(cu->cuStreamSynchronize(s));
                        t1 = gpu_now_us();
                        CU(cu->cuMemcpyPeerAsync(a, ctx[0], b, ctx[1], size, s));
                        CU(cu->cuStreamSynchronize(s));
                        if (i == 0)
                                continue;    /* warm-up */
                        add(&rows[k].base_out, size, t1 - t0);
                        add(&rows[k].base_in, size, gpu_now_us() - t1);
                }
        }
        cu->cuStreamDestroy(s);
        cu->cuMemFree(a);
        CU(cu->cuCtxSetCurrent(ctx[1]));
        cu->cuMemFree(b);
        CU(cu->cuCtxSetCurrent(ctx[0]));
        return 0;
}

static int wait_ok(gmd_client *c, gmd_buffer *b, const char *what)
{
        if (gmd_wait(c, b, 60000) < 0) {
                fprintf(stderr, "%s: %s\n", what, gmd_last_error());
                failures++;
                return -1;
        }
        return 0;
}

/* Bytes of other devices' buffers daemon device `device` holds (the peer
 * tier: its pool's peer_held). */
static uint64_t used_on(gmd_client *c, unsigned device)
{
        gmd_status *st = NULL;
        uint64_t used = 0;

        if (gmd_query_status(c, GMD_STATUS_POOLS, 0, &st) < 0)
                return 0;
        for (size_t i = 0; i < st->n_pools; i++)
                if (st->pools[i].tier == GMD_TIER_VRAM &&
                    st->pools[i].device == device)
                        used = st->pools[i].peer_held;
        gmd_status_free(st);
        return used;
}

/* One size through one daemon: a cold round trip, then `reps` timed. */
static void run_size(gmd_client *c, row *r, bool peer, int reps)
{
        samples *out = peer ? &r->peer_out : &r->host_out;
        samples *in = peer ? &r->peer_in : &r->host_in;
        uint32_t seed = 7000 + (uint32_t)(r->size / MiB) + (peer ? 1 : 0);
        gmd_buffer *b = NULL;
        uint64_t before;
        long long bad;

        if (gmd_alloc(c, r->size, 0, GMD_ALLOC_SWAPPABLE, 10000, &b) < 0) {
                fprintf(stderr, "gmd_alloc: %s\n", gmd_last_error());
                failures++;
                return;
        }
        if (gpu_fill(gmd_buffer_ptr(b), r->size, 0, seed) < 0) {
                fprintf(stderr, "fill: %s\n", gpu_last_error());
                failures++;
                goto out;
        }
        gmd_release(c, b);
        before = used_on(c, 1);
        for (int i = 0; i <= reps; i++) {
                double t0 = gpu_now_us(), t1;

                if (gmd_pageout(c, b) < 0 || wait_ok(c, b, "pageout") < 0)
                        goto out;
                t1 = gpu_now_us();
                if (i == 0 && peer)
                        r->on_peer = used_on(c, 1) >= before + r->size;
                if (gmd_prefetch(c, b) < 0 || wait_ok(c, b, "prefetch") < 0)
                        goto out;
                if (i == 0)
                        continue;    /* cold */
                add(out, r->size, t1 - t0);
                add(in, r->size, gpu_now_us() - t1);
        }
        if (gmd_acquire(c, b, GMD_WAIT_FOREVER) < 0) {
                failures++;
                goto out;
        }
        bad = gpu_check(gmd_buffer_ptr(b), r->size, 0, seed);
        gmd_release(c, b);
        if (bad) {
                fprintf(stderr, "%llu MiB: %lld words differ\n",
                        (unsigned long long)(r->size / MiB), bad);
                r->checked_ok = false;
                failures++;
        }
out:
        gmd_free(c, b);
}

static void run_batch(gmd_client *c, bool peer, int reps)
{
        samples *out = peer ? &batch_peer_out : &batch_host_out;
        samples *in = peer ? &batch_peer_in : &batch_host_in;
        gmd_buffer *b[BATCH_N] = { 0 };
        uint64_t total = (uint64_t)BATCH_N * BATCH_SIZE, before;

        for (int i = 0; i < BATCH_N; i++) {
                if (gmd_alloc(c, BATCH_SIZE, 0, GMD_ALLOC_SWAPPABLE, 10000,
                              &b[i]) < 0 ||
                    gpu_fill(gmd_buffer_ptr(b[i]), BATCH_SIZE, 0,
                             8000 + (uint32_t)i) < 0) {
                        fprintf(stderr, "batch: %s\n", gmd_last_error());
                        failures++;
                        goto out;
                }
                gmd_release(c, b[i]);
        }
        before = used_on(c, 1);
        for (int r = 0; r <= reps; r++) {
                double t0 = gpu_now_us(), t1;

                if (gmd_pageout(c, NULL) < 0 || wait_ok(c, NULL, "batch out") < 0)
                        goto out;
                t1 = gpu_now_us();
                if (r == 0 && peer)
                        batch_on_peer = used_on(c, 1) >= before + total;
                if (gmd_prefetch(c, NULL) < 0 || wait_ok(c, NULL, "batch in") < 0)
                        goto out;
                if (r == 0)
                        continue;
                add(out, total, t1 - t0);
                add(in, total, gpu_now_us() - t1);
        }
        for (int i = 0; i < BATCH_N; i++) {
                long long bad;

                if (gmd_acquire(c, b[i], GMD_WAIT_FOREVER) < 0) {
                        failures++;
                        goto out;
                }
                bad = gpu_check(gmd_buffer_ptr(b[i]), BATCH_SIZE, 0,
                                8000 + (uint32_t)i);
                gmd_release(c, b[i]);
                if (bad) {
                        batch_ok = false;
                        failures++;
                }
        }
out:
        for (int i = 0; i < BATCH_N; i++)
                if (b[i])
                        gmd_free(c, b[i]);
}

static int run_daemon(bool peer, int reps)
{
        char path[] = "/tmp/peer-bench-XXXXXX";
        const char *args[3] = { "--config", path, NULL };
        char text[128];
        gmd_client *c = NULL;
        gpu_daemon d;
        int fd = mkstemp(path), len, r;

        len = snprintf(text, sizeof(text), "[pools]\npeer_tier = %s\n"
                       "peer_headroom = 1G\nhost_stock = 8G\n",
                       peer ? "on" : "off");
        if (fd < 0 || write(fd, text, (size_t)len) != len) {
                fprintf(stderr, "bench config: %s\n", strerror(errno));
                return -1;
        }
        close(fd);
        r = gpu_daemon_start(args, &d);
        unlink(path);
        if (r < 0) {
                fprintf(stderr, "start gpu-memd: %s\n", strerror(-r));
                return -1;
        }
        if (gmd_connect(NULL, "peer-bench", &c) < 0) {
                fprintf(stderr, "connect: %s\n", gmd_last_error());
                failures++;
        } else {
                /* The host arena pins in the background: let it. */
                sleep(peer ? 0 : 3);
                for (int k = 0; k < N_SIZES; k++)
                        run_size(c, &rows[k], peer, reps);
                run_batch(c, peer, reps);
                gmd_disconnect(c);
        }
        if (gpu_daemon_stop(&d, failures ? stderr : NULL) != 0) {
                fprintf(stderr, "gpu-memd did not stop cleanly\n");
                failures++;
        }
        return 0;
}

static double ratio(const samples *a, const samples *b)
{
        double y = median(b);

        return y > 0 ? median(a) / y : 0;
}

static void print(FILE *f, const char *gpu, bool json)
{
        if (!json) {
                fprintf(f, "\n%s, GPU 0 -> GPU 1 (out) and back (in), GB/s "
                        "(median):\n", gpu);
                fprintf(f, "%8s %9s %9s %9s %9s %9s %9s %7s %7s\n", "MiB",
                        "base out", "base in", "peer out", "peer in",
                        "host out", "host in", "ratio o", "ratio i");
                for (int k = 0; k < N_SIZES; k++) {
                        const row *r = &rows[k];

                        fprintf(f, "%8llu %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f "
                                "%7.2f %7.2f%s\n",
                                (unsigned long long)(r->size / MiB),
                                median(&r->base_out), median(&r->base_in),
                                median(&r->peer_out), median(&r->peer_in),
                                median(&r->host_out), median(&r->host_in),
                                ratio(&r->peer_out, &r->base_out),
                                ratio(&r->peer_in, &r->base_in),
                                r->on_peer ? "" : "  (not on the peer!)");
                }
                fprintf(f, "%5dx64 %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f "
                        "%7.2f %7.2f%s  (batch)\n", BATCH_N,
                        median(&rows[N_SIZES - 1].base_out),
                        median(&rows[N_SIZES - 1].base_in),
                        median(&batch_peer_out), median(&batch_peer_in),
                        median(&batch_host_out), median(&batch_host_in),
                        ratio(&batch_peer_out, &rows[N_SIZES - 1].base_out),
                        ratio(&batch_peer_in, &rows[N_SIZES - 1].base_in),
                        batch_on_peer ? "" : "  (not on the peer!)");
                return;
        }
        fprintf(f, "{\"gpu\": \"%s\", \"unit\": \"GB/s, median\", \"sizes\": [\n",
                gpu);
        for (int k = 0; k < N_SIZES; k++) {
                const row *r = &rows[k];

                fprintf(f, "  {\"mib\": %llu, \"baseline_out\": %.2f, "
                        "\"baseline_in\": %.2f, \"peer_out\": %.2f, "
                        "\"peer_in\": %.2f, \"host_out\": %.2f, \"host_in\": %.2f, "
                        "\"ratio_out\": %.3f, \"ratio_in\": %.3f, "
                        "\"on_peer\": %s, \"checked_ok\": %s}%s\n",
                        (unsigned long long)(r->size / MiB),
                        median(&r->base_out), median(&r->base_in),
                        median(&r->peer_out), median(&r->peer_in),
                        median(&r->host_out), median(&r->host_in),
                        ratio(&r->peer_out, &r->base_out),
                        ratio(&r->peer_in, &r->base_in),
                        r->on_peer ? "true" : "false",
                        r->checked_ok ? "true" : "false",
                        k + 1 < N_SIZES ? "," : "");
        }
        fprintf(f, "], \"batch\": {\"buffers\": %d, \"mib\": 64, "
                "\"peer_out\": %.2f, \"peer_in\": %.2f, \"host_out\": %.2f, "
                "\"host_in\": %.2f, \"ratio_out\": %.3f, \"ratio_in\": %.3f, "
                "\"on_peer\": %s, \"checked_ok\": %s},\n \"failures\": %d}\n",
                BATCH_N, median(&batch_peer_out), median(&batch_peer_in),
                median(&batch_host_out), median(&batch_host_in),
                ratio(&batch_peer_out, &rows[N_SIZES - 1].base_out),
                ratio(&batch_peer_in, &rows[N_SIZES - 1].base_in),
                batch_on_peer ? "true" : "false", batch_ok ? "true" : "false",
                failures);
}

int main(int argc, char **argv)
{
        const char *json = NULL;
        char gpu[64] = "?";
        int reps = 5, n_dev = 0, can = 0;
        CUdevice d0, d1;

        setvbuf(stdout, NULL, _IOLBF, 0);
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
                        json = argv[++i];
                else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
                        reps = atoi(argv[++i]);
        }
        if (reps < 1 || reps > MAX_REPS - 1)
                reps = 5;
        cu = gpu_usable();
        if (!cu || cu->cuDeviceGetCount(&n_dev) != CUDA_SUCCESS || n_dev < 2) {
                printf("SKIP: peer_bench needs two GPUs\n");
                return GPU_TEST_SKIP;
        }
        cu->cuDeviceGet(&d0, 0);
        cu->cuDeviceGet(&d1, 1);
        if (cu->cuDeviceCanAccessPeer(&can, d0, d1) != CUDA_SUCCESS || !can) {
                printf("SKIP: GPU 0 cannot reach GPU 1's memory\n");
                return GPU_TEST_SKIP;
        }
        cu->cuDeviceGetName(gpu, sizeof(gpu), d0);
        for (int k = 0; k < N_SIZES; k++) {
                rows[k].size = sizes_mib[k] * MiB;
                rows[k].checked_ok = true;
        }
        printf("baseline (cuMemcpyPeerAsync, GPU 0 <-> GPU 1) ...\n");
        if (run_baseline(reps) < 0)
                failures++;
        setenv("GPU_MEMD_CACHE", "0", 1);
        printf("gpu-memd, peer tier on ...\n");
        if (run_daemon(true, reps) < 0)
                failures++;
        printf("gpu-memd, peer tier off (host memory) ...\n");
        if (run_daemon(false, reps) < 0)
                failures++;
        if (!batch_on_peer) {
                fprintf(stderr, "batch: the pageouts did not go to GPU 1's VRAM\n");
                failures++;
        }
        for (int k = 0; k < N_SIZES; k++)
                if (!rows[k].on_peer) {
                        fprintf(stderr, "%llu MiB: the pageout did not go to "
                                "GPU 1's VRAM\n",
                                (unsigned long long)(rows[k].size / MiB));
                        failures++;
                }
        print(stdout, gpu, false);
        if (json) {
                FILE *f = fopen(json, "w");

                if (f) {
                        print(f, gpu, true);
                        fclose(f);
                }
        }
        return failures ? 1 : 0;
}
