/*
 * swap_bench — how fast gpu-memd moves buffers between VRAM and host
 * memory, against the PCIe line rate measured in the same run.
 *
 * Three layers, each per buffer size (2 MiB .. 4 GiB, sizes that do not
 * fit the card's free memory skipped):
 *   baseline  cuMemcpyAsync between pinned host memory (cuMemHostAlloc)
 *             and device memory: D2H, H2D, and both at once on two streams
 *   backend   the cuda backend's copy engine alone, driven in this process
 *             the way copyq drives it ([swap] defaults: 64 MiB chunks, 2 in
 *             flight per direction, the next chunk submitted from the
 *             completion): VRAM <-> host-located VMM, each way and both
 *   daemon    a real gpu-memd and this process as its client: gmd_pageout
 *             + gmd_wait (swap-out), gmd_prefetch + gmd_wait (swap-in), and
 *             one buffer out while another comes in. The bench waits for
 *             the daemon to pin its host arena first. The first round trip
 *             of a size is reported apart ("cold"). Every buffer's pattern
 *             is checked by a kernel after its round trips.
 *   batches   buffers of one size moving at once: 256 x 2 MiB, 64 x 16 MiB,
 *             32 x 64 MiB, 8 x 256 MiB:
 *             all out with one gmd_pageout(NULL), all in with one
 *             gmd_prefetch(NULL), and one such set going out while another
 *             comes in ("2way"), compared with the largest size's baseline.
 * Ratios are ours / baseline (medians). Also: creating host-tier memory
 * pinned on the spot against carving it from the arena, and the latency
 * of acquires of paged-out 2, 16 and 64 MiB buffers (a passive swap-in),
 * 15 of each, against a pinned copy of the same size timed the same way,
 * and of one while a multi-GB prefetch is in flight.
 *
 * Usage: swap_bench [--json FILE] [--max-mib N] [--reps N]. Exits 77 when
 * there is no usable GPU.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_cuda.h"
#include "bench_cli.h"
#include "config.h"
#include "cu_check.h"
#include "cuda_driver.h"
#include "gpu_kernels.h"
#include "gpu_proc.h"
#include "gpumem.h"
#include "log.h"

#define MiB (1ull << 20)
#define MAX_REPS 32
#define CHUNK (64 * MiB)      /* [swap] chunk_size default */
#define IN_FLIGHT 2           /* [swap] copies_in_flight default */

static const uint64_t sizes_mib[] = { 2, 16, 64, 256, 1024, 4096 };
#define N_SIZES (sizeof(sizes_mib) / sizeof(sizes_mib[0]))

typedef struct samples {
        int n;
        double v[MAX_REPS];
} samples;

/* The samples stay in the order taken. */
static double median(const samples *s)
{
        double tmp[MAX_REPS];

        memcpy(tmp, s->v, sizeof(double) * (size_t)s->n);
        return bench_median(tmp, s->n);
}

static double min_of(const samples *s)
{
        double m = s->n ? s->v[0] : 0;

        for (int i = 1; i < s->n; i++)
                if (s->v[i] < m)
                        m = s->v[i];
        return m;
}

static void add(samples *s, double v)
{
        if (s->n < MAX_REPS)
                s->v[s->n++] = v;
}

static double gbs(uint64_t bytes, double us)
{
        return us > 0 ? bytes / us / 1e3 : 0;
}

/* CPU seconds the daemon's threads used: all of them, and its copy
 * watcher's (the thread that polls copies near their end). */
typedef struct cpu_use {
        double total_s, watch_s, wall_us;
} cpu_use;

static cpu_use daemon_cpu(pid_t pid)
{
        cpu_use u = { .wall_us = gpu_now_us() };
        char path[320];
        struct dirent *e;
        DIR *dir;

        snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
        dir = opendir(path);
        if (!dir)
                return u;
        while ((e = readdir(dir))) {
                char buf[1024], *p;
                unsigned long utime, stime;
                FILE *f;
                size_t n;

                if (e->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid, e->d_name);
                f = fopen(path, "re");
                if (!f)
                        continue;
                n = fread(buf, 1, sizeof(buf) - 1, f);
                fclose(f);
                buf[n] = 0;
                /* pid (comm) state ... field 14 utime, 15 stime */
                p = strrchr(buf, ')');
                if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                                 &utime, &stime) != 2)
                        continue;
                u.total_s += (double)(utime + stime) / sysconf(_SC_CLK_TCK);
                if (strstr(buf, "(gmd-copywatch)"))
                        u.watch_s += (double)(utime + stime) / sysconf(_SC_CLK_TCK);
        }
        closedir(dir);
        return u;
}

static cpu_use cpu_since(pid_t pid, cpu_use before)
{
        cpu_use now = daemon_cpu(pid);

        return (cpu_use){ now.total_s - before.total_s, now.watch_s - before.watch_s,
                          now.wall_us - before.wall_us };
}

static cpu_use cpu_batches, cpu_latency;

typedef struct result {
        uint64_t size;
        bool done;
        samples base_d2h, base_h2d, base_both;     /* GB/s */
        samples be_out, be_in, be_both;
        samples be_in_fresh;        /* in, into VRAM created just before,
                                     * after the last one was released */
        samples d_out, d_in, d_both;
        samples d_out_call;                         /* ms in gmd_pageout */
        double d_out_cold, d_in_cold;
        double host_create_ms, host_hit_us;
        bool checked_ok;
} result;

static result results[N_SIZES];
static uint64_t arena_bytes;   /* the daemon's host arena on device 0 */
static int failures;
static const gmd_cuda_driver *cu;

/* ---- baseline: pinned cuMemHostAlloc <-> cuMemAlloc ---------------------- */

static int run_baseline(uint64_t max, int reps)
{
        CUdeviceptr dev[2] = { 0 };
        void *host[2] = { 0 };
        CUstream s[2];

        for (int i = 0; i < 2; i++) {
                CU(cu->cuMemAlloc(&dev[i], max));
                CU(cu->cuMemHostAlloc(&host[i], max, 0));
                CU(cu->cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
                memset(host[i], 0x5a, max);   /* touched, like real data */
        }
        for (size_t k = 0; k < N_SIZES; k++) {
                result *r = &results[k];
                double t0;

                if (r->size == 0)
                        continue;
                /* One warm-up each way. */
                CU(cu->cuMemcpyDtoHAsync(host[0], dev[0], r->size, s[0]));
                CU(cu->cuMemcpyHtoDAsync(dev[1], host[1], r->size, s[1]));
                CU(cu->cuStreamSynchronize(s[0]));
                CU(cu->cuStreamSynchronize(s[1]));
                for (int i = 0; i < reps; i++) {
                        t0 = gpu_now_us();
                        CU(cu->cuMemcpyDtoHAsync(host[0], dev[0], r->size, s[0]));
                        CU(cu->cuStreamSynchronize(s[0]));
                        add(&r->base_d2h, gbs(r->size, gpu_now_us() - t0));
                        t0 = gpu_now_us();
                        CU(cu->cuMemcpyHtoDAsync(dev[1], host[1], r->size, s[1]));
                        CU(cu->cuStreamSynchronize(s[1]));
                        add(&r->base_h2d, gbs(r->size, gpu_now_us() - t0));
                        t0 = gpu_now_us();
                        CU(cu->cuMemcpyDtoHAsync(host[0], dev[0], r->size, s[0]));
                        CU(cu->cuMemcpyHtoDAsync(dev[1], host[1], r->size, s[1]));
                        CU(cu->cuStreamSynchronize(s[0]));
                        CU(cu->cuStreamSynchronize(s[1]));
                        add(&r->base_both, gbs(2 * r->size, gpu_now_us() - t0));
                }
        }
        for (int i = 0; i < 2; i++) {
                cu->cuStreamDestroy(s[i]);
                cu->cuMemFree(dev[i]);
                cu->cuMemFreeHost(host[i]);
        }
        return 0;
}

/* ---- backend: the copy engine alone, driven as copyq drives it ----------- */

typedef struct lane {
        gmd_backend *be;
        gmd_copy_dir dir;
        gmd_mem *dst, *src;
        uint64_t size, issued, done;
        unsigned inflight;
        int status;
} lane;

typedef struct harness {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool woken;
} harness;

static void harness_wake(void *ctx)
{
        harness *h = ctx;

        pthread_mutex_lock(&h->lock);
        h->woken = true;
        pthread_cond_signal(&h->cond);
        pthread_mutex_unlock(&h->lock);
}

static void lane_issue(lane *l)
{
        while (l->inflight < IN_FLIGHT && l->issued < l->size && !l->status) {
                uint64_t len = l->size - l->issued < CHUNK ? l->size - l->issued : CHUNK;
                int r = l->be->ops->copy_submit(l->be, 0, l->dir, l->dst, l->issued,
                                                l->src, l->issued, len, l);

                if (r < 0) {
                        l->status = r;
                        return;
                }
                l->issued += len;
                l->inflight++;
        }
}

static void lane_done(void *ctx, void *cookie, int status)
{
        lane *l = cookie;
        uint64_t len = l->size - l->done < CHUNK ? l->size - l->done : CHUNK;

        (void)ctx;
        l->inflight--;
        l->done += len;
        if (status < 0 && !l->status)
                l->status = status;
        lane_issue(l);
}

/* Run the lanes to the end; microseconds, or -1 on a failed copy. */
static double lanes_run(harness *h, lane *lanes, int n)
{
        double t0 = gpu_now_us();
        bool busy;

        for (int i = 0; i < n; i++) {
                lanes[i].issued = lanes[i].done = 0;
                lanes[i].inflight = 0;
                lanes[i].status = 0;
                lane_issue(&lanes[i]);
        }
        do {
                pthread_mutex_lock(&h->lock);
                while (!h->woken)
                        pthread_cond_wait(&h->cond, &h->lock);
                h->woken = false;
                pthread_mutex_unlock(&h->lock);
                lanes[0].be->ops->copy_reap(lanes[0].be, lane_done, NULL);
                busy = false;
                for (int i = 0; i < n; i++)
                        if (lanes[i].inflight || (lanes[i].done < lanes[i].size &&
                                                  !lanes[i].status))
                                busy = true;
        } while (busy);
        for (int i = 0; i < n; i++)
                if (lanes[i].status < 0)
                        return -1;
        return gpu_now_us() - t0;
}

#define LANE(d, to, from) \
        { .be = be, .dir = (d), .dst = (to), .src = (from), .size = res->size }

static int run_backend(uint64_t max, int reps)
{
        harness h = { .lock = PTHREAD_MUTEX_INITIALIZER,
                      .cond = PTHREAD_COND_INITIALIZER };
        gmd_mem *vram[2] = { 0 }, *hostm[2] = { 0 };
        gmd_backend *be = NULL;
        const gmd_backend_ops *ops;
        gmd_config config;
        int r, n_devices;

        config_init_defaults(&config);
        config.cuda_reserve_chunks = 0;
        /* An arena for the two host buffers of the largest size, on
         * device 0: host_stock is shared evenly by the devices, so ask
         * for that much per device. */
        n_devices = cuda_driver_device_count(cu);
        config.host_stock = (gmd_size_spec){
                2 * max * (uint64_t)(n_devices > 0 ? n_devices : 1), 0 };
        r = backend_cuda_open(&config, &be);
        if (r < 0) {
                fprintf(stderr, "backend_cuda_open: %s\n", strerror(-r));
                return r;
        }
        ops = be->ops;
        ops->set_wake(be, harness_wake, &h);
        /* Let the worker pin it before anything is timed: pinning stalls
         * the driver. */
        for (int i = 0; i < 6000; i++) {
                gmd_arena_info a;

                ops->arena_info(be, 0, &a);
                if (a.target && a.built == a.target)
                        break;
                usleep(10000);
        }

        /* Host-tier creation: an allocation of its own, pinned on the
         * spot (what a swap-out did before the arena, and what a SPILLABLE
         * buffer's host copy still costs), and a piece of the arena. */
        for (size_t k = 0; k < N_SIZES; k++) {
                result *res = &results[k];
                gmd_mem *m = NULL;
                double t0;

                if (res->size == 0 || res->size > 1024 * MiB)
                        continue;
                t0 = gpu_now_us();
                r = ops->mem_create(be, GMD_TIER_HOST, 0, res->size, &m);
                res->host_create_ms = (gpu_now_us() - t0) / 1e3;
                if (r < 0) {
                        fprintf(stderr, "host mem_create %llu MiB: %s\n",
                                (unsigned long long)(res->size / MiB), strerror(-r));
                        failures++;
                        continue;
                }
                ops->mem_destroy(be, m);
                usleep(200000);   /* the worker unpins it */
                t0 = gpu_now_us();
                r = ops->mem_create_private(be, 0, res->size, &m);
                res->host_hit_us = gpu_now_us() - t0;
                if (r == 0)
                        ops->mem_destroy(be, m);
        }

        r = 0;
        for (int i = 0; i < 2 && r >= 0; i++) {
                r = ops->mem_create(be, GMD_TIER_VRAM, 0, max, &vram[i]);
                if (r == 0)
                        r = ops->mem_create_private(be, 0, max, &hostm[i]);
        }
        if (r < 0) {
                fprintf(stderr, "backend buffers of %llu MiB: %s\n",
                        (unsigned long long)(max / MiB), strerror(-r));
                goto out;
        }
        /* A pattern out and back, checked: the harness moves real bytes. */
        if (gpu_fill((void *)(uintptr_t)cuda_mem_of(vram[0])->va, max, 0, 77) < 0) {
                fprintf(stderr, "fill: %s\n", gpu_last_error());
                r = -EIO;
                goto out;
        }
        for (size_t k = 0; k < N_SIZES; k++) {
                result *res = &results[k];
                lane out = LANE(GMD_COPY_OUT, hostm[0], vram[0]);
                lane in = LANE(GMD_COPY_IN, vram[1], hostm[0]);
                lane both[2] = { LANE(GMD_COPY_OUT, hostm[1], vram[0]),
                                 LANE(GMD_COPY_IN, vram[1], hostm[0]) };
                double us;

                if (res->size == 0)
                        continue;
                for (int i = 0; i < reps + 1; i++) {   /* first: warm-up */
                        us = lanes_run(&h, &out, 1);
                        if (us < 0)
                                goto copy_failed;
                        if (i)
                                add(&res->be_out, gbs(res->size, us));
                        us = lanes_run(&h, &in, 1);
                        if (us < 0)
                                goto copy_failed;
                        if (i)
                                add(&res->be_in, gbs(res->size, us));
                        us = lanes_run(&h, both, 2);
                        if (us < 0)
                                goto copy_failed;
                        if (i)
                                add(&res->be_both, gbs(2 * res->size, us));
                }
                /* In, into VRAM created just before the copy, each sample
                 * right after the previous sample's VRAM was released: what
                 * a swap-in without kept VRAM ([swap] keep_vram) meets. The
                 * release, not the creation, is what slows it (the driver
                 * scrubs released VRAM on the GPU; bench/release_bench.c). */
                for (int i = 0; i < reps; i++) {
                        gmd_mem *fresh = NULL;
                        lane in_fresh;

                        if (ops->mem_create_filled(be, GMD_TIER_VRAM, 0, res->size,
                                                   &fresh) < 0)
                                goto copy_failed;
                        in_fresh = (lane)LANE(GMD_COPY_IN, fresh, hostm[0]);
                        us = lanes_run(&h, &in_fresh, 1);
                        ops->mem_destroy(be, fresh);
                        if (us < 0)
                                goto copy_failed;
                        add(&res->be_in_fresh, gbs(res->size, us));
                }
                if (gpu_check((void *)(uintptr_t)cuda_mem_of(vram[1])->va,
                              res->size, 0, 77) != 0) {
                        fprintf(stderr, "backend: %llu MiB came back different\n",
                                (unsigned long long)(res->size / MiB));
                        failures++;
                }
                continue;
copy_failed:
                fprintf(stderr, "backend: a copy failed at %llu MiB\n",
                        (unsigned long long)(res->size / MiB));
                failures++;
        }
out:
        for (int i = 0; i < 2; i++) {
                ops->mem_destroy(be, vram[i]);
                ops->mem_destroy(be, hostm[i]);
        }
        backend_close(be);
        return r;
}

/* ---- daemon: gpu-memd and this process as its client --------------------- */

static int wait_ok(gmd_client *c, gmd_buffer *b, const char *what)
{
        int r = gmd_wait(c, b, 120000);

        if (r < 0) {
                fprintf(stderr, "%s: gmd_wait: %s\n", what, gmd_last_error());
                failures++;
        }
        return r;
}

/* The daemon pins its host arena in the background after it starts
 * (~4.5 GB/s, stalling the driver meanwhile): wait until device 0's has
 * not grown for a second, so nothing is timed during the pinning. Returns
 * the arena's size. */
static uint64_t wait_arena_built(gmd_client *c)
{
        uint64_t last = 0, stable_since = 0;

        for (int i = 0; i < 1200; i++) {
                gmd_status *st = NULL;
                uint64_t size = 0;

                if (gmd_query_status(c, GMD_STATUS_POOLS, 0, &st) == 0) {
                        for (size_t k = 0; k < st->n_pools; k++)
                                if (st->pools[k].tier == GMD_TIER_VRAM &&
                                    st->pools[k].device == 0)
                                        size = st->pools[k].arena_size;
                        gmd_status_free(st);
                }
                if (size != last || !stable_since) {
                        last = size;
                        stable_since = (uint64_t)gpu_now_us();
                } else if (gpu_now_us() - (double)stable_since > 1e6) {
                        break;
                }
                usleep(100000);
        }
        return last;
}

static samples *out_calls;   /* where timed_out notes gmd_pageout's time */

static double timed_out(gmd_client *c, gmd_buffer *b)
{
        double t0 = gpu_now_us();

        if (gmd_pageout(c, b) < 0) {
                fprintf(stderr, "gmd_pageout: %s\n", gmd_last_error());
                failures++;
                return -1;
        }
        if (out_calls)
                add(out_calls, (gpu_now_us() - t0) / 1e3);
        if (wait_ok(c, b, "pageout") < 0)
                return -1;
        return gpu_now_us() - t0;
}

static double timed_in(gmd_client *c, gmd_buffer *b)
{
        double t0 = gpu_now_us();

        if (gmd_prefetch(c, b) < 0) {
                fprintf(stderr, "gmd_prefetch: %s\n", gmd_last_error());
                failures++;
                return -1;
        }
        if (wait_ok(c, b, "prefetch") < 0)
                return -1;
        return gpu_now_us() - t0;
}

static bool check_pattern(gmd_client *c, gmd_buffer *b, uint32_t seed)
{
        long long bad;

        if (gmd_acquire(c, b, GMD_WAIT_FOREVER) < 0) {
                fprintf(stderr, "gmd_acquire: %s\n", gmd_last_error());
                return false;
        }
        bad = gpu_check(gmd_buffer_ptr(b), gmd_buffer_size(b), 0, seed);
        gmd_release(c, b);
        if (bad != 0)
                fprintf(stderr, "buffer of %zu bytes: %lld words differ\n",
                        gmd_buffer_size(b), bad);
        return bad == 0;
}

static int new_filled(gmd_client *c, uint64_t size, uint32_t seed,
                      gmd_buffer **ret)
{
        if (gmd_alloc(c, size, 0, GMD_ALLOC_SWAPPABLE, 10000, ret) < 0) {
                fprintf(stderr, "gmd_alloc %llu MiB: %s\n",
                        (unsigned long long)(size / MiB), gmd_last_error());
                return -1;
        }
        if (gpu_fill(gmd_buffer_ptr(*ret), size, 0, seed) < 0) {
                fprintf(stderr, "fill: %s\n", gpu_last_error());
                return -1;
        }
        gmd_release(c, *ret);
        return 0;
}

static void run_daemon_size(gmd_client *c, result *res, int reps)
{
        gmd_buffer *a = NULL, *b = NULL;
        uint32_t seed_a = 1000 + (uint32_t)(res->size / MiB), seed_b = seed_a + 1;
        bool ok = true;
        double us;

        if (new_filled(c, res->size, seed_a, &a) < 0 ||
            new_filled(c, res->size, seed_b, &b) < 0) {
                failures++;
                goto out;
        }
        /* Cold: the host backing is created on the request path. */
        res->d_out_cold = gbs(res->size, timed_out(c, a));
        if (gmd_buffer_tier(a) != GMD_TIER_HOST) {
                fprintf(stderr, "pageout: buffer not on the host tier\n");
                failures++;
                goto out;
        }
        res->d_in_cold = gbs(res->size, timed_in(c, a));
        ok &= check_pattern(c, a, seed_a);
        for (int i = 0; i < reps; i++) {
                out_calls = &res->d_out_call;
                us = timed_out(c, a);
                out_calls = NULL;
                if (us < 0)
                        goto out;
                add(&res->d_out, gbs(res->size, us));
                us = timed_in(c, a);
                if (us < 0)
                        goto out;
                add(&res->d_in, gbs(res->size, us));
        }
        /* Both directions: b goes out first, then a out while b comes in,
         * and the other way round. */
        if (timed_out(c, b) < 0)
                goto out;
        for (int i = 0; i < reps; i++) {
                gmd_buffer *out = i % 2 ? b : a, *in = i % 2 ? a : b;
                double t0;

                t0 = gpu_now_us();
                if (gmd_pageout(c, out) < 0 || gmd_prefetch(c, in) < 0) {
                        fprintf(stderr, "both: %s\n", gmd_last_error());
                        failures++;
                        goto out;
                }
                if (wait_ok(c, NULL, "both") < 0)
                        goto out;
                add(&res->d_both, gbs(2 * res->size, gpu_now_us() - t0));
        }
        ok &= check_pattern(c, a, seed_a);
        ok &= check_pattern(c, b, seed_b);
        res->checked_ok = ok;
        if (!ok)
                failures++;
out:
        if (a)
                gmd_free(c, a);
        if (b)
                gmd_free(c, b);
}

/* Many buffers moving at once, as when the daemon evicts a client's
 * working set: `n` buffers of `size`, all paged out with one
 * gmd_pageout(NULL) and back with one gmd_prefetch(NULL). Per-move costs
 * (creating the destination, the remap round trip) then overlap other
 * moves' copies, so this is the engine's throughput; the single-buffer
 * figures above are bounded by those costs. */
typedef struct batch {
        uint64_t size;
        unsigned n;
        samples out, in;            /* GB/s of all n buffers */
        samples both;               /* n out while n others come in */
        bool ran, checked_ok;
} batch;

#define N_BATCH 4
#define BATCH_MAX 256             /* buffers of one batch at most */
static batch batches[N_BATCH];

/* All of `out` paged out while all of `in` come back, the calls
 * interleaved so both directions start at once; GB/s of both. */
static double batch_both(gmd_client *c, gmd_buffer **out, gmd_buffer **in,
                         unsigned n, uint64_t size)
{
        double t0 = gpu_now_us();

        /* Sent without waiting for each answer, as gpumem.torch does: 256
         * round trips would take longer than 2 MiB buffers' copies. */
        for (unsigned i = 0; i < n; i++)
                if (gmd_pageout_nowait(c, out[i]) < 0 ||
                    gmd_prefetch_nowait(c, in[i]) < 0)
                        return -1;
        if (gmd_flush(c, -1) < 0 || wait_ok(c, NULL, "batch both") < 0)
                return -1;
        return gbs(2 * (uint64_t)n * size, gpu_now_us() - t0);
}

static bool batch_check(gmd_client *c, gmd_buffer **bufs, unsigned n,
                        uint64_t size, uint32_t seed)
{
        bool ok = true;

        for (unsigned i = 0; i < n; i++) {
                long long bad;

                if (gmd_acquire(c, bufs[i], GMD_WAIT_FOREVER) < 0)
                        return false;
                bad = gpu_check(gmd_buffer_ptr(bufs[i]), size, 0, seed + i);
                gmd_release(c, bufs[i]);
                ok &= bad == 0;
        }
        return ok;
}

static void run_batch(gmd_client *c, batch *bt, int reps)
{
        gmd_buffer *a[BATCH_MAX] = { 0 }, *b[BATCH_MAX] = { 0 };
        uint64_t total;
        double gb;

        total = (uint64_t)bt->n * bt->size;
        for (unsigned i = 0; i < bt->n; i++)
                if (new_filled(c, bt->size, 7000 + i, &a[i]) < 0) {
                        failures++;
                        goto out;
                }
        /* One round first (warm-up). */
        if (gmd_pageout(c, NULL) < 0 || wait_ok(c, NULL, "batch out") < 0 ||
            gmd_prefetch(c, NULL) < 0 || wait_ok(c, NULL, "batch in") < 0)
                goto fail;
        for (int r = 0; r < reps; r++) {
                double t0 = gpu_now_us();

                if (gmd_pageout(c, NULL) < 0 || wait_ok(c, NULL, "batch out") < 0)
                        goto fail;
                add(&bt->out, gbs(total, gpu_now_us() - t0));
                t0 = gpu_now_us();
                if (gmd_prefetch(c, NULL) < 0 || wait_ok(c, NULL, "batch in") < 0)
                        goto fail;
                add(&bt->in, gbs(total, gpu_now_us() - t0));
        }
        /* Both ways: a second set, paged out; then one set goes out while
         * the other comes in, and back the other way. */
        for (unsigned i = 0; i < bt->n; i++)
                if (new_filled(c, bt->size, 9000 + i, &b[i]) < 0) {
                        failures++;
                        goto out;
                }
        for (unsigned i = 0; i < bt->n; i++)
                if (gmd_pageout(c, b[i]) < 0)
                        goto fail;
        if (wait_ok(c, NULL, "batch b out") < 0)
                goto fail;
        for (int r = 0; r < reps; r++) {
                gb = r % 2 ? batch_both(c, b, a, bt->n, bt->size) :
                             batch_both(c, a, b, bt->n, bt->size);
                if (gb < 0)
                        goto fail;
                add(&bt->both, gb);
        }
        bt->checked_ok = batch_check(c, a, bt->n, bt->size, 7000) &&
                         batch_check(c, b, bt->n, bt->size, 9000);
        bt->ran = true;
        if (!bt->checked_ok)
                failures++;
        goto out;
fail:
        fprintf(stderr, "batch of %u x %llu MiB: %s\n", bt->n,
                (unsigned long long)(bt->size / MiB), gmd_last_error());
        failures++;
out:
        for (unsigned i = 0; i < bt->n; i++) {
                if (a[i])
                        gmd_free(c, a[i]);
                if (b[i])
                        gmd_free(c, b[i]);
        }
}

/* Acquires of a paged-out buffer, each against its copy: the target is
 * the copy's time plus 0.3 ms. Several of each size, since one acquire
 * is noise (a single 64 MiB sample said 1747 us one run and 1.6-2.0 ms
 * the next, H100, 2026-11-26). */
#define LAT_SIZES 3
#define LAT_REPS 15
static const uint64_t lat_mib[LAT_SIZES] = { 2, 16, 64 };

typedef struct latency {
        samples acquire[LAT_SIZES];     /* us: gmd_acquire of a paged-out buffer */
        samples copy[LAT_SIZES];        /* us: a pinned cuMemcpyHtoDAsync + sync */
        double busy_us, big_prefetch_ms;
        uint64_t big;
        bool ran;
} latency;

/* The copy the target counts: one pinned host-to-VRAM copy of `size`,
 * from a pause as long as the acquire's, to its stream's synchronize. */
static int time_copies(latency *lat)
{
        CUdeviceptr dev;
        CUstream st;
        void *host;
        uint64_t max = lat_mib[LAT_SIZES - 1] * MiB;

        CU(cu->cuMemAlloc(&dev, max));
        CU(cu->cuMemHostAlloc(&host, max, 0));
        CU(cu->cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
        memset(host, 0x5a, max);
        CU(cu->cuMemcpyHtoDAsync(dev, host, max, st));       /* warm-up */
        CU(cu->cuStreamSynchronize(st));
        for (int k = 0; k < LAT_SIZES; k++)
                for (int i = 0; i < LAT_REPS; i++) {
                        double t0;

                        usleep(2000);
                        t0 = gpu_now_us();
                        CU(cu->cuMemcpyHtoDAsync(dev, host, lat_mib[k] * MiB, st));
                        CU(cu->cuStreamSynchronize(st));
                        add(&lat->copy[k], gpu_now_us() - t0);
                }
        cu->cuStreamDestroy(st);
        cu->cuMemFreeHost(host);
        cu->cuMemFree(dev);
        return 0;
}

/* Acquires of paged-out buffers of each size, idle; then one of 64 MiB
 * while `big` bytes are being prefetched. */
static void run_latency(gmd_client *c, uint64_t big, latency *lat)
{
        gmd_buffer *p = NULL, *s[LAT_SIZES] = { NULL };
        double t0, t1;

        lat->big = big;
        if (time_copies(lat) < 0) {
                failures++;
                return;
        }
        if (new_filled(c, big, 4242, &p) < 0) {
                failures++;
                goto out;
        }
        for (int k = 0; k < LAT_SIZES; k++)
                if (new_filled(c, lat_mib[k] * MiB, 4343 + k, &s[k]) < 0) {
                        failures++;
                        goto out;
                }
        /* Idle means idle: the driver scrubs VRAM for a while after it is
         * released (the cases before freed GiBs), and copies to the GPU
         * run slower meanwhile (release_bench: 2-10 ms). */
        usleep(50 * 1000);
        for (int k = 0; k < LAT_SIZES; k++)
                for (int i = 0; i < LAT_REPS; i++) {
                        if (timed_out(c, s[k]) < 0)
                                goto out;
                        usleep(2000);
                        t0 = gpu_now_us();
                        if (gmd_acquire(c, s[k], GMD_WAIT_FOREVER) < 0)
                                goto fail;
                        add(&lat->acquire[k], gpu_now_us() - t0);
                        gmd_release(c, s[k]);
                }
        if (timed_out(c, s[LAT_SIZES - 1]) < 0 || timed_out(c, p) < 0)
                goto out;
        t0 = gpu_now_us();
        if (gmd_prefetch(c, p) < 0)
                goto fail;
        usleep(2000);   /* the prefetch is under way */
        t1 = gpu_now_us();
        if (gmd_acquire(c, s[LAT_SIZES - 1], GMD_WAIT_FOREVER) < 0)
                goto fail;
        lat->busy_us = gpu_now_us() - t1;
        gmd_release(c, s[LAT_SIZES - 1]);
        if (wait_ok(c, p, "big prefetch") < 0)
                goto out;
        lat->big_prefetch_ms = (gpu_now_us() - t0) / 1e3;
        lat->ran = true;
        for (int k = 0; k < LAT_SIZES; k++)
                if (!check_pattern(c, s[k], 4343 + k))
                        failures++;
        if (!check_pattern(c, p, 4242))
                failures++;
        goto out;
fail:
        fprintf(stderr, "latency: %s\n", gmd_last_error());
        failures++;
out:
        if (p)
                gmd_free(c, p);
        for (int k = 0; k < LAT_SIZES; k++)
                if (s[k])
                        gmd_free(c, s[k]);
}

/* ---- output --------------------------------------------------------------- */

static double ratio(const samples *a, const samples *b)
{
        return median(b) > 0 ? median(a) / median(b) : 0;
}

/* The baseline of the largest size measured: the link's rate out (0),
 * in (1) and both ways at once (2), what batches compare against. */
static double big_base(int dir)
{
        for (size_t k = N_SIZES; k-- > 0;)
                if (results[k].done)
                        return median(dir == 2 ? &results[k].base_both :
                                      dir == 1 ? &results[k].base_h2d :
                                                 &results[k].base_d2h);
        return 0;
}

static void print_human(FILE *f, const char *gpu, const latency *lat)
{
        fprintf(f, "swap_bench on %s: GB/s, medians; ratio = ours / pinned "
                "cuMemcpyAsync baseline\n", gpu);
        fprintf(f, "%8s | %19s | %19s | %19s | %27s | %17s | %s\n", "size",
                "baseline out/in/2way", "backend out/in/2way", "daemon out/in/2way",
                "ratio daemon out/in/2way", "daemon cold out/in", "host pinned/arena");
        for (size_t k = 0; k < N_SIZES; k++) {
                const result *r = &results[k];

                if (!r->done)
                        continue;
                fprintf(f, "%6llu M | %5.1f %5.1f %6.1f | %5.1f %5.1f %6.1f | "
                        "%5.1f %5.1f %6.1f | %7.2f %7.2f %7.2f %s| %7.1f %7.1f | "
                        "%.1f ms / %.0f us\n",
                        (unsigned long long)(r->size / MiB),
                        median(&r->base_d2h), median(&r->base_h2d), median(&r->base_both),
                        median(&r->be_out), median(&r->be_in), median(&r->be_both),
                        median(&r->d_out), median(&r->d_in), median(&r->d_both),
                        ratio(&r->d_out, &r->base_d2h), ratio(&r->d_in, &r->base_h2d),
                        ratio(&r->d_both, &r->base_both), r->checked_ok ? "  " : "! ",
                        r->d_out_cold, r->d_in_cold, r->host_create_ms, r->host_hit_us);
        }
        fprintf(f, "backend/baseline: ");
        for (size_t k = 0; k < N_SIZES; k++)
                if (results[k].done)
                        fprintf(f, "%llu M %.2f/%.2f/%.2f  ",
                                (unsigned long long)(results[k].size / MiB),
                                ratio(&results[k].be_out, &results[k].base_d2h),
                                ratio(&results[k].be_in, &results[k].base_h2d),
                                ratio(&results[k].be_both, &results[k].base_both));
        fprintf(f, "\nbackend in, into new VRAM just after a release / baseline: ");
        for (size_t k = 0; k < N_SIZES; k++)
                if (results[k].done)
                        fprintf(f, "%llu M %.2f  ",
                                (unsigned long long)(results[k].size / MiB),
                                ratio(&results[k].be_in_fresh, &results[k].base_h2d));
        fprintf(f, "\n");
        fprintf(f, "daemon CPU: batches %.2f s of %.2f s (copy watcher %.2f s), "
                "acquires %.2f s of %.2f s (copy watcher %.2f s)\n",
                cpu_batches.total_s, cpu_batches.wall_us / 1e6, cpu_batches.watch_s,
                cpu_latency.total_s, cpu_latency.wall_us / 1e6, cpu_latency.watch_s);
        fprintf(f, "time in gmd_pageout (the request; host copy carved from the "
                "arena or pinned), ms: ");
        for (size_t k = 0; k < N_SIZES; k++)
                if (results[k].done)
                        fprintf(f, "%llu M %.2f  ", (unsigned long long)(results[k].size / MiB),
                                median(&results[k].d_out_call));
        fprintf(f, "\n%s: %d failure(s)\n", failures ? "FAIL" : "OK", failures);
        if (!lat->ran)
                return;
        for (int k = 0; k < LAT_SIZES; k++)
                fprintf(f, "acquire of a paged-out %llu MiB buffer, idle: %.0f us "
                        "median (min %.0f) of %d; its copy %.0f us: %+.0f us over "
                        "(target +300)\n", (unsigned long long)lat_mib[k],
                        median(&lat->acquire[k]), min_of(&lat->acquire[k]),
                        lat->acquire[k].n, median(&lat->copy[k]),
                        median(&lat->acquire[k]) - median(&lat->copy[k]));
        fprintf(f, "acquire of a paged-out %llu MiB buffer while %llu MiB are "
                "prefetched: %.0f us (that prefetch took %.1f ms)\n",
                (unsigned long long)lat_mib[LAT_SIZES - 1],
                (unsigned long long)(lat->big / MiB), lat->busy_us,
                lat->big_prefetch_ms);
}

static void json_samples(FILE *f, const char *name, const samples *s, bool last)
{
        fprintf(f, "\"%s\": {\"median\": %.2f, \"n\": %d, \"all\": [", name,
                median(s), s->n);
        for (int i = 0; i < s->n; i++)
                fprintf(f, "%s%.2f", i ? ", " : "", s->v[i]);
        fprintf(f, "]}%s", last ? "" : ", ");
}

static void print_json(FILE *f, const char *gpu, const latency *lat)
{
        bool first = true;

        fprintf(f, "{\"gpu\": \"%s\", \"unit\": \"GB/s\", \"chunk_size\": %llu, "
                "\"copies_in_flight\": %d, \"host_arena\": %llu,\n \"sizes\": [",
                gpu, (unsigned long long)CHUNK, IN_FLIGHT,
                (unsigned long long)arena_bytes);
        for (size_t k = 0; k < N_SIZES; k++) {
                const result *r = &results[k];

                if (!r->done)
                        continue;
                fprintf(f, "%s\n  {\"size\": %llu, ", first ? "" : ",",
                        (unsigned long long)r->size);
                first = false;
                fprintf(f, "\"baseline\": {");
                json_samples(f, "d2h", &r->base_d2h, false);
                json_samples(f, "h2d", &r->base_h2d, false);
                json_samples(f, "both", &r->base_both, true);
                fprintf(f, "},\n   \"backend\": {");
                json_samples(f, "out", &r->be_out, false);
                json_samples(f, "in", &r->be_in, false);
                json_samples(f, "both", &r->be_both, false);
                json_samples(f, "in_fresh_vram", &r->be_in_fresh, true);
                fprintf(f, "},\n   \"daemon\": {");
                json_samples(f, "out", &r->d_out, false);
                json_samples(f, "in", &r->d_in, false);
                json_samples(f, "both", &r->d_both, false);
                json_samples(f, "pageout_call_ms", &r->d_out_call, false);
                fprintf(f, "\"out_cold\": %.2f, \"in_cold\": %.2f, \"checked\": %s},\n",
                        r->d_out_cold, r->d_in_cold, r->checked_ok ? "true" : "false");
                fprintf(f, "   \"ratio\": {\"out\": %.3f, \"in\": %.3f, \"both\": %.3f, "
                        "\"backend_out\": %.3f, \"backend_in\": %.3f, \"backend_both\": %.3f},\n",
                        ratio(&r->d_out, &r->base_d2h), ratio(&r->d_in, &r->base_h2d),
                        ratio(&r->d_both, &r->base_both), ratio(&r->be_out, &r->base_d2h),
                        ratio(&r->be_in, &r->base_h2d), ratio(&r->be_both, &r->base_both));
                fprintf(f, "   \"host_create_miss_ms\": %.2f, \"host_create_hit_us\": %.1f}",
                        r->host_create_ms, r->host_hit_us);
        }
        fprintf(f, "],\n \"batches\": [");
        first = true;
        for (int k = 0; k < N_BATCH; k++) {
                const batch *bt = &batches[k];

                if (!bt->ran)
                        continue;
                fprintf(f, "%s\n  {\"size\": %llu, \"count\": %u, ", first ? "" : ",",
                        (unsigned long long)bt->size, bt->n);
                first = false;
                json_samples(f, "out", &bt->out, false);
                json_samples(f, "in", &bt->in, false);
                json_samples(f, "both", &bt->both, false);
                fprintf(f, "\"ratio_out\": %.3f, \"ratio_in\": %.3f, "
                        "\"ratio_both\": %.3f, \"checked\": %s}",
                        median(&bt->out) / big_base(0), median(&bt->in) / big_base(1),
                        median(&bt->both) / big_base(2),
                        bt->checked_ok ? "true" : "false");
        }
        fprintf(f, "],\n \"acquire_latency\": {\"ran\": %s, \"unit\": \"us\", "
                "\"big\": %llu, \"during_prefetch_us\": %.1f, \"big_prefetch_ms\": %.2f, "
                "\"sizes\": [", lat->ran ? "true" : "false",
                (unsigned long long)lat->big, lat->busy_us, lat->big_prefetch_ms);
        for (int k = 0; k < LAT_SIZES; k++) {
                fprintf(f, "%s\n  {\"size\": %llu, ", k ? "," : "",
                        (unsigned long long)(lat_mib[k] * MiB));
                json_samples(f, "acquire", &lat->acquire[k], false);
                json_samples(f, "copy", &lat->copy[k], false);
                fprintf(f, "\"over_copy_us\": %.1f}",
                        median(&lat->acquire[k]) - median(&lat->copy[k]));
        }
        fprintf(f, "]},\n \"daemon_cpu_s\": {\"batches\": {\"wall\": %.3f, "
                "\"total\": %.3f, \"copy_watcher\": %.3f}, \"acquires\": {\"wall\": %.3f, "
                "\"total\": %.3f, \"copy_watcher\": %.3f}},\n \"failures\": %d}\n",
                cpu_batches.wall_us / 1e6, cpu_batches.total_s, cpu_batches.watch_s,
                cpu_latency.wall_us / 1e6, cpu_latency.total_s, cpu_latency.watch_s,
                failures);
}

int main(int argc, char **argv)
{
        const char *json = NULL;
        uint64_t free_b = 0, total_b = 0, max = 0, max_mib = 4096;
        char gpu[64] = "?";
        latency lat = { 0 };
        gmd_client *c = NULL;
        const char *args[5] = { NULL };
        char config_path[] = "/tmp/swap-bench-XXXXXX";
        int n_args = 0;
        FILE *daemon_log = NULL;
        gpu_daemon d;
        int reps = 5, r;
        CUdevice dev;

        setvbuf(stdout, NULL, _IOLBF, 0);
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
                        json = argv[++i];
                else if (strcmp(argv[i], "--max-mib") == 0 && i + 1 < argc)
                        max_mib = strtoull(argv[++i], NULL, 10);
                else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
                        reps = atoi(argv[++i]);
        }
        if (reps < 1 || reps > MAX_REPS - 1)
                reps = 5;
        cu = gpu_usable();
        if (!cu)
                return GPU_TEST_SKIP;
        log_setup(GMD_LOG_NOTICE);
        /* The runtime's primary context is the driver's: one context. */
        if (gpu_mem_info(&free_b, &total_b) < 0) {
                fprintf(stderr, "%s\n", gpu_last_error());
                return 1;
        }
        cu->cuDeviceGet(&dev, 0);
        cu->cuDeviceGetName(gpu, sizeof(gpu), dev);
        {
                CUcontext ctx;

                cu->cuDevicePrimaryCtxRetain(&ctx, dev);
                cu->cuCtxSetCurrent(ctx);
        }
        /* Both-way cases hold two buffers of a size in VRAM at once, the
         * baseline two more: 4x the size plus room for everything else. */
        for (size_t k = 0; k < N_SIZES; k++) {
                uint64_t size = sizes_mib[k] * MiB;

                if (sizes_mib[k] > max_mib || 4 * size + (4096 * MiB) > free_b) {
                        printf("size %llu MiB skipped: %llu MiB free\n",
                               (unsigned long long)sizes_mib[k],
                               (unsigned long long)(free_b / MiB));
                        continue;
                }
                results[k].size = size;
                max = size;
        }
        if (!max) {
                printf("no size fits\n");
                return 1;
        }
        printf("baseline (pinned cuMemHostAlloc <-> cuMemAlloc) ...\n");
        if (run_baseline(max, reps) < 0)
                failures++;
        printf("backend copy engine ...\n");
        if (run_backend(max, reps) < 0)
                failures++;

        printf("daemon ...\n");
        setenv("GPU_MEMD_CACHE", "0", 1);
        /* GMD_BENCH_DAEMON_LOG=FILE: the daemon logs at debug level (each
         * move's copy, remap and release times) and its log goes there. */
        if (getenv("GMD_BENCH_DAEMON_LOG")) {
                args[n_args++] = "--log-level";
                args[n_args++] = "debug";
        }
        /* GMD_BENCH_DAEMON_CONFIG=FILE: the daemon's config. Else one that
         * differs from the defaults in two keys: the 4 GiB both-ways case
         * holds two 4 GiB host copies at once, more than the default arena
         * (25% of host_limit, at most 8G) on a machine with < 128 GiB, and
         * host_stock is shared by the devices, 10G for device 0 each;
         * and this is the host link's bench: no peer tier (peer_bench is
         * the peer tier's). */
        args[n_args++] = "--config";
        if (getenv("GMD_BENCH_DAEMON_CONFIG")) {
                args[n_args++] = getenv("GMD_BENCH_DAEMON_CONFIG");
        } else {
                int fd = mkstemp(config_path), n_dev = 1, len;
                char text[96];

                if (cu->cuDeviceGetCount(&n_dev) != CUDA_SUCCESS || n_dev < 1)
                        n_dev = 1;
                len = snprintf(text, sizeof(text), "[pools]\nhost_stock = %dG\n"
                               "peer_tier = off\n", 10 * n_dev);
                if (fd < 0 || write(fd, text, (size_t)len) != len) {
                        fprintf(stderr, "bench config: %s\n", strerror(errno));
                        return 1;
                }
                close(fd);
                args[n_args++] = config_path;
        }
        r = gpu_daemon_start(args, &d);
        if (!getenv("GMD_BENCH_DAEMON_CONFIG"))
                unlink(config_path);
        if (r < 0) {
                fprintf(stderr, "start gpu-memd: %s\n", strerror(-r));
                return 1;
        }
        if (gmd_connect(NULL, "swap-bench", &c) < 0) {
                fprintf(stderr, "connect: %s\n", gmd_last_error());
                failures++;
        } else {
                arena_bytes = wait_arena_built(c);
                printf("  host arena: %llu MiB pinned\n",
                       (unsigned long long)(arena_bytes / MiB));
                for (size_t k = 0; k < N_SIZES; k++) {
                        if (!results[k].size)
                                continue;
                        printf("  %llu MiB\n", (unsigned long long)(results[k].size / MiB));
                        run_daemon_size(c, &results[k], reps);
                        results[k].done = true;
                }
                cpu_use t = daemon_cpu(d.pid);

                run_latency(c, max >= 1024 * MiB ? max : 1024 * MiB, &lat);
                cpu_latency = cpu_since(d.pid, t);
                t = daemon_cpu(d.pid);
                /* Up to 2 GiB in flight at once, in buffers of 16, 64,
                 * 256 MiB (at most 64 of them), and 256 of 2 MiB: a
                 * step's worth of PyTorch's small segments. */
                for (int k = 0; k < N_BATCH; k++) {
                        batches[k].size = k == 0 ? 2 * MiB :
                                          (16 * MiB) << (2 * (k - 1));
                        batches[k].n = (unsigned)((2048 * MiB) / batches[k].size);
                        if (batches[k].n > (k == 0 ? BATCH_MAX : 64))
                                batches[k].n = k == 0 ? BATCH_MAX : 64;
                        if ((uint64_t)batches[k].n * batches[k].size > max)
                                continue;   /* the card is too small for it */
                        printf("  batch %u x %llu MiB\n", batches[k].n,
                               (unsigned long long)(batches[k].size / MiB));
                        run_batch(c, &batches[k], reps);
                }
                cpu_batches = cpu_since(d.pid, t);
                gmd_disconnect(c);
        }
        if (getenv("GMD_BENCH_DAEMON_LOG"))
                daemon_log = fopen(getenv("GMD_BENCH_DAEMON_LOG"), "we");
        if (gpu_daemon_stop(&d, daemon_log ? daemon_log : failures ? stderr : NULL) != 0) {
                fprintf(stderr, "gpu-memd did not stop cleanly\n");
                failures++;
        }
        if (daemon_log)
                fclose(daemon_log);
        print_human(stdout, gpu, &lat);
        if (json) {
                FILE *f = fopen(json, "w");

                if (f) {
                        print_json(f, gpu, &lat);
                        fclose(f);
                }
        }
        return failures ? 1 : 0;
}
