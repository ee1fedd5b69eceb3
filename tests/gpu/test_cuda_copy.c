/*
 * test_cuda_copy — the cuda backend's copy engine and host tier, without
 * the daemon: this process opens the backend and drives copy_submit /
 * copy_reap the way copyq does, with kernels writing and checking the
 * bytes through the backend's own mappings (the backend and the CUDA
 * runtime share the device's primary context).
 *
 * Checks: HOST-tier memory is created zero-filled and mapped for the
 * device; a buffer goes out to host memory in chunks and comes back
 * bit-exact; completions of one direction arrive in submission order; both
 * directions run at once; an urgent copy (copy_submit_urgent) submitted
 * behind a bulk one finishes first, its steps gated ([swap] preempt_step),
 * both exact; bad arguments are -EINVAL; the host arena is
 * pinned in the background, hands out fd-less pieces, in two parts when
 * no free range holds one, that one copy crosses both ways bit-exact,
 * and takes them back whole. Everything runs on device 0, whatever
 * the machine has (the arena asked for is device 0's share of
 * host_stock). Exits 77 with one "SKIP:" line when there is no usable
 * GPU.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_cuda.h"
#include "config.h"
#include "cuda_driver.h"
#include "gpu_kernels.h"
#include "gpu_proc.h"
#include "log.h"

#define MiB (1ull << 20)
#define SIZE (256 * MiB)
#define CHUNK (32 * MiB)
#define MAX_DONE 64
#define ARENA (2048 * MiB)   /* two pieces of CUDA_ARENA_PIECE */


static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int wakes;

/* Cookies are small integers: 100 * direction + chunk index. */
static long done_order[MAX_DONE];
static int done_status[MAX_DONE];
static double done_us[MAX_DONE];        /* when reaped (gpu_now_us) */
static int n_done;

static void on_wake(void *ctx)
{
        (void)ctx;
        pthread_mutex_lock(&lock);
        wakes++;
        pthread_cond_signal(&cond);
        pthread_mutex_unlock(&lock);
}

static void on_done(void *ctx, void *cookie, int status)
{
        (void)ctx;
        if (n_done < MAX_DONE) {
                done_order[n_done] = (long)(intptr_t)cookie;
                done_status[n_done] = status;
                done_us[n_done] = gpu_now_us();
        }
        n_done++;
}

/* Reap until `n` copies finished (10 s at most). */
static int reap_until(gmd_backend *be, int n)
{
        for (int i = 0; i < 1000 && n_done < n; i++) {
                pthread_mutex_lock(&lock);
                if (!wakes) {
                        struct timespec ts;

                        clock_gettime(CLOCK_REALTIME, &ts);
                        ts.tv_nsec += 10 * 1000000;
                        if (ts.tv_nsec >= 1000000000) {
                                ts.tv_sec++;
                                ts.tv_nsec -= 1000000000;
                        }
                        pthread_cond_timedwait(&cond, &lock, &ts);
                }
                wakes = 0;
                pthread_mutex_unlock(&lock);
                be->ops->copy_reap(be, on_done, NULL);
        }
        return n_done >= n ? 0 : -ETIMEDOUT;
}

/* What a client pays to map an allocation (import, reserve, map, one
 * access call), timed here in-process; -1 when a step fails. */
static double import_map_us(const gmd_cuda_driver *cu, int fd, uint64_t size)
{
        CUmemGenericAllocationHandle h;
        CUmemAccessDesc access = { 0 };
        CUdeviceptr va = 0;
        CUresult res;
        double t0 = gpu_now_us(), us;

        res = cu->cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (res != CUDA_SUCCESS)
                return -1;
        res = cu->cuMemAddressReserve(&va, size, 0, 0, 0);
        if (res == CUDA_SUCCESS)
                res = cu->cuMemMap(va, size, 0, h, 0);
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = 0;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        if (res == CUDA_SUCCESS)
                res = cu->cuMemSetAccess(va, size, &access, 1);
        us = gpu_now_us() - t0;
        if (va) {
                cu->cuMemUnmap(va, size);
                cu->cuMemAddressFree(va, size);
        }
        cu->cuMemRelease(h);
        return res == CUDA_SUCCESS ? us : -1;
}

static void *va_of(gmd_mem *m)
{
        return (void *)(uintptr_t)cuda_mem_of(m)->va;
}

/* Copy all of `src` to `dst` in CHUNK pieces on `dir`; cookies start at
 * 100 * dir. Returns submit's first error. */
static int submit_all(gmd_backend *be, gmd_copy_dir dir, gmd_mem *dst,
                      gmd_mem *src, int *count)
{
        for (uint64_t off = 0; off < SIZE; off += CHUNK) {
                int r = be->ops->copy_submit(be, 0, dir, dst, off, src, off, CHUNK,
                                             (void *)(intptr_t)(100 * dir + (*count)++));

                if (r < 0)
                        return r;
        }
        return 0;
}

static void check_order(int first, int n, int base, const char *what)
{
        int next = base;

        for (int i = first; i < first + n && i < MAX_DONE; i++) {
                if (done_order[i] / 100 != base / 100)
                        continue;
                CHECK(done_order[i] == next, "%s: completion %d is chunk %ld, "
                      "expected %d", what, i, done_order[i], next);
                CHECK(done_status[i] == 0, "%s: chunk %ld status %d", what,
                      done_order[i], done_status[i]);
                next++;
        }
}

/* The CUDA devices this process sees (at least 1: the caller checked
 * that a GPU is usable), after the line saying which one this test is
 * about. */
static unsigned devices_visible(void)
{
        const gmd_cuda_driver *cu;
        const char *why;
        int n;

        if (cuda_driver_load(&cu, &why) < 0)
                return 1;
        gpu_say_device(cu, 0, "the backend opens every GPU; every copy "
                       "and arena checked here is device 0's");
        n = cuda_driver_device_count(cu);
        return n > 0 ? (unsigned)n : 1;
}

int main(void)
{
        gmd_mem *vram = NULL, *vram2 = NULL, *host = NULL, *host2 = NULL, *m;
        const gmd_backend_ops *ops;
        gmd_backend *be = NULL;
        gmd_config config;
        char reason[160];
        unsigned n_devices;
        double t0;
        int r, count;

        setvbuf(stdout, NULL, _IOLBF, 0);
        if (gpu_probe(reason, sizeof(reason)) < 0) {
                printf("SKIP: no usable GPU (%s)\n", reason);
                return GPU_TEST_SKIP;
        }
        log_setup(GMD_LOG_INFO);
        config_init_defaults(&config);
        config.cuda_reserve_chunks = 0;
        /* [pools] host_stock is the machine's, shared evenly by the
         * devices; the arena checks below are about device 0's share:
         * ask for ARENA per device, however many the machine has. */
        n_devices = devices_visible();
        config.host_stock = (gmd_size_spec){ ARENA * n_devices, 0 };
        r = backend_cuda_open(&config, &be);
        CHECK(r == 0, "backend_cuda_open: %s", strerror(-r));
        if (r < 0)
                return 1;
        ops = be->ops;
        CHECK(ops->copy_submit && ops->copy_reap && ops->set_wake,
              "the cuda backend has a copy engine");
        ops->set_wake(be, on_wake, NULL);

        CHECK(ops->mem_create(be, GMD_TIER_VRAM, 0, SIZE, &vram) == 0, "vram");
        CHECK(ops->mem_create(be, GMD_TIER_VRAM, 0, SIZE, &vram2) == 0, "vram2");
        t0 = gpu_now_us();
        r = ops->mem_create(be, GMD_TIER_HOST, 0, SIZE, &host);
        printf("host tier: %llu MiB allocation of its own created in %.1f ms\n",
               (unsigned long long)(SIZE / MiB), (gpu_now_us() - t0) / 1e3);
        CHECK(r == 0, "host mem_create: %s", strerror(-r));
        CHECK(ops->mem_create(be, GMD_TIER_HOST, 0, SIZE, &host2) == 0, "host2");
        if (!vram || !vram2 || !host || !host2)
                goto out;
        CHECK(host->fd >= 0 && host->tier == GMD_TIER_HOST, "host: fd and tier");
        CHECK(gpu_check(va_of(host), SIZE, 0, 0) == 0, "host memory starts zeroed");

        /* The client's side of a remap, VRAM vs host backing. */
        {
                const gmd_cuda_driver *cu = ((cuda_backend *)be)->cu;
                double v = import_map_us(cu, vram->fd, SIZE);
                double h = import_map_us(cu, host->fd, SIZE);

                printf("import+map+access of %llu MiB (what a remap costs the "
                       "client): VRAM %.0f us, host %.0f us\n",
                       (unsigned long long)(SIZE / MiB), v, h);
                CHECK(v >= 0 && h >= 0, "import and map both kinds");
        }

        /* Out in chunks, in order. */
        CHECK(gpu_fill(va_of(vram), SIZE, 0, 4711) == 0, "fill: %s", gpu_last_error());
        count = 0;
        n_done = 0;
        t0 = gpu_now_us();
        CHECK(submit_all(be, GMD_COPY_OUT, host, vram, &count) == 0, "submit out");
        CHECK(reap_until(be, count) == 0, "copies out finish");
        printf("out: %d chunks, %.2f GB/s (all submitted at once)\n", count,
               SIZE / (gpu_now_us() - t0) / 1e3);
        check_order(0, count, 0, "out");
        CHECK(gpu_check(va_of(host), SIZE, 0, 4711) == 0, "host copy exact");

        /* Back into the other VRAM allocation. */
        n_done = 0;
        count = 0;
        CHECK(submit_all(be, GMD_COPY_IN, vram2, host, &count) == 0, "submit in");
        CHECK(reap_until(be, count) == 0, "copies in finish");
        check_order(0, count, 100, "in");
        CHECK(gpu_check(va_of(vram2), SIZE, 0, 4711) == 0, "round trip exact");

        /* Both directions at once: vram2 -> host2 while host -> vram. */
        CHECK(gpu_fill(va_of(vram2), SIZE, 0, 815) == 0, "fill 2");
        CHECK(gpu_fill(va_of(vram), SIZE, 0, 1) == 0, "scribble");
        n_done = 0;
        count = 0;
        {
                int out_n = 0;

                CHECK(submit_all(be, GMD_COPY_OUT, host2, vram2, &out_n) == 0,
                      "submit both: out");
                count = 0;
                CHECK(submit_all(be, GMD_COPY_IN, vram, host, &count) == 0,
                      "submit both: in");
                CHECK(reap_until(be, out_n + count) == 0, "both finish");
                check_order(0, out_n + count, 0, "both, out");
                check_order(0, out_n + count, 100, "both, in");
        }
        CHECK(gpu_check(va_of(host2), SIZE, 0, 815) == 0, "both: out exact");
        CHECK(gpu_check(va_of(vram), SIZE, 0, 4711) == 0, "both: in exact");

        /* The urgent lane: one CHUNK alone, then the same behind SIZE of
         * bulk copies in (host2 -> vram2) submitted just before it. The
         * bulk lane's steps not begun pause while it runs, so it is the
         * first to finish; both land exact. */
        {
                cuda_device *d = &((cuda_backend *)be)->devices[0];
                const uint64_t closed = d->gates[GMD_COPY_IN].closed;
                double alone, behind;
                int urgent_at = -1;

                CHECK(ops->copy_submit_urgent != NULL, "an urgent lane");
                CHECK(d->gates[GMD_COPY_IN].word != NULL &&
                      d->gates[GMD_COPY_IN].step == config.swap_preempt_step,
                      "the bulk lane in is gated in steps of %llu MiB (see the "
                      "log if not)",
                      (unsigned long long)(config.swap_preempt_step / MiB));
                CHECK(gpu_fill(va_of(vram), SIZE, 0, 5) == 0, "scribble 3");
                n_done = 0;
                t0 = gpu_now_us();
                CHECK(ops->copy_submit_urgent(be, 0, GMD_COPY_IN, vram, 0, host,
                                              0, CHUNK, (void *)(intptr_t)999) == 0,
                      "urgent copy alone");
                CHECK(reap_until(be, 1) == 0, "it finishes");
                alone = done_us[0] - t0;
                CHECK(gpu_fill(va_of(vram), SIZE, 0, 5) == 0, "scribble 4");
                n_done = 0;
                count = 0;
                CHECK(submit_all(be, GMD_COPY_IN, vram2, host2, &count) == 0,
                      "bulk in");
                t0 = gpu_now_us();
                CHECK(ops->copy_submit_urgent(be, 0, GMD_COPY_IN, vram, 0, host,
                                              0, CHUNK, (void *)(intptr_t)999) == 0,
                      "urgent copy behind it");
                CHECK(reap_until(be, count + 1) == 0, "all finish");
                for (int i = 0; i < n_done && i < MAX_DONE; i++)
                        if (done_order[i] == 999)
                                urgent_at = i;
                behind = urgent_at >= 0 ? done_us[urgent_at] - t0 : -1;
                printf("urgent %llu MiB copy: %.0f us alone, %.0f us behind %llu "
                       "MiB of bulk copies (finished %d of %d; gate closed %llu "
                       "time(s))\n", (unsigned long long)(CHUNK / MiB), alone,
                       behind, (unsigned long long)(SIZE / MiB), urgent_at + 1,
                       n_done, (unsigned long long)
                       (d->gates[GMD_COPY_IN].closed - closed));
                CHECK(urgent_at == 0, "the urgent copy finishes first (it was "
                      "number %d)", urgent_at + 1);
                CHECK(d->gates[GMD_COPY_IN].closed - closed == 2,
                      "each urgent copy closed the gate once");
                CHECK(d->gates[GMD_COPY_IN].urgent == 0, "no urgent copy "
                      "counted in flight after all were heard");
                check_order(0, n_done, 100, "bulk, around the urgent one");
                CHECK(gpu_check(va_of(vram), CHUNK, 0, 4711) == 0,
                      "urgent copy exact");
                CHECK(gpu_check(va_of(vram2), SIZE, 0, 815) == 0,
                      "bulk copies exact around it");
        }

        /* Bad arguments. */
        CHECK(ops->copy_submit(be, 0, GMD_COPY_OUT, host, SIZE - MiB, vram, 0,
                               2 * MiB, NULL) == -EINVAL, "past dst end");
        CHECK(ops->copy_submit(be, 0, GMD_COPY_OUT, host, 0, vram, SIZE, 1,
                               NULL) == -EINVAL, "past src end");
        /* The first device number past the machine's (7 is a GPU of an
         * 8-GPU machine). */
        CHECK(ops->copy_submit(be, n_devices, GMD_COPY_OUT, host, 0, vram, 0,
                               MiB, NULL) == -EINVAL, "no such device %u",
              n_devices);
        /* An empty copy (a clean pageout's: backend.h) is accepted and
         * finishes behind a real one submitted before it. */
        n_done = 0;
        CHECK(ops->copy_submit(be, 0, GMD_COPY_OUT, host, 0, vram, 0, SIZE,
                               (void *)(intptr_t)1) == 0, "a copy before");
        CHECK(ops->copy_submit(be, 0, GMD_COPY_OUT, host, 0, vram, 0, 0,
                               (void *)(intptr_t)2) == 0, "empty copy");
        CHECK(reap_until(be, 2) == 0, "the empty copy finishes");
        CHECK(done_order[0] == 1 && done_order[1] == 2 &&
              done_status[0] == 0 && done_status[1] == 0,
              "the empty copy finishes after the one before it, fine");

        /* The host arena: pinned in the background, carved into swap-out
         * copies with no fd, in parts when no free range holds one. */
        {
                gmd_arena_info info = { 0 };
                gmd_mem *a1 = NULL, *a2 = NULL, *c = NULL, *all = NULL;

                CHECK(ops->mem_create_private && ops->arena_info,
                      "the cuda backend has a host arena");
                t0 = gpu_now_us();
                for (int i = 0; i < 3000; i++) {
                        ops->arena_info(be, 0, &info);
                        if (info.target && info.built == info.target)
                                break;
                        usleep(10000);
                }
                printf("host arena: %llu of %llu MiB pinned after %.0f ms\n",
                       (unsigned long long)(info.built / MiB),
                       (unsigned long long)(info.target / MiB),
                       (gpu_now_us() - t0) / 1e3);
                CHECK(info.target == ARENA && info.built == ARENA &&
                      info.free == ARENA, "arena of %llu MiB built and free",
                      (unsigned long long)(ARENA / MiB));
                /* Two pieces of 1 GiB: leave 128 MiB in each. */
                CHECK(ops->mem_create_private(be, 0, ARENA / 2 - SIZE / 2, &a1) == 0 &&
                      ops->mem_create_private(be, 0, ARENA / 2 - SIZE / 2, &a2) == 0,
                      "two arena copies");
                t0 = gpu_now_us();
                r = ops->mem_create_private(be, 0, SIZE, &c);
                printf("host arena: %llu MiB in %.1f us\n",
                       (unsigned long long)(SIZE / MiB), gpu_now_us() - t0);
                CHECK(r == 0, "an arena copy in parts: %s", strerror(-r));
                if (r == 0) {
                        CHECK(cuda_mem_of(c)->span.n_parts == 2, "in 2 parts (%u)",
                              cuda_mem_of(c)->span.n_parts);
                        CHECK(c->fd == -1 && c->daemon_only &&
                              c->tier == GMD_TIER_HOST, "no fd, the daemon's only");
                        CHECK(ops->mem_zero(be, c) == -EINVAL, "not zeroed by mem_zero");
                        /* One copy across the parts each way. */
                        CHECK(gpu_fill(va_of(vram), SIZE, 0, 99) == 0, "fill 3");
                        n_done = 0;
                        CHECK(ops->copy_submit(be, 0, GMD_COPY_OUT, c, 0, vram, 0,
                                               SIZE, (void *)(intptr_t)1) == 0,
                              "one copy out over two parts");
                        CHECK(reap_until(be, 1) == 0, "it finishes");
                        CHECK(gpu_fill(va_of(vram2), SIZE, 0, 3) == 0, "scribble 2");
                        n_done = 0;
                        CHECK(ops->copy_submit(be, 0, GMD_COPY_IN, vram2, 0, c, 0,
                                               SIZE, (void *)(intptr_t)101) == 0,
                              "one copy in over two parts");
                        CHECK(reap_until(be, 1) == 0, "it finishes");
                        CHECK(gpu_check(va_of(vram2), SIZE, 0, 99) == 0,
                              "round trip through two parts exact");
                }
                ops->arena_info(be, 0, &info);
                CHECK(info.free == 0, "arena used up (%llu MiB free)",
                      (unsigned long long)(info.free / MiB));
                CHECK(ops->mem_create_private(be, 0, 2 * MiB, &m) == -ENOSPC,
                      "a full arena says -ENOSPC");
                ops->mem_destroy(be, a1);
                ops->mem_destroy(be, a2);
                ops->mem_destroy(be, c);
                CHECK(ops->mem_create_private(be, 0, ARENA, &all) == 0,
                      "freed parts merge: the whole arena again");
                ops->mem_destroy(be, all);
                ops->arena_info(be, 0, &info);
                CHECK(info.free == ARENA && info.largest == ARENA / 2 &&
                      info.refused == 1 && info.served == 4,
                      "arena accounting: free %llu MiB, largest %llu MiB, "
                      "served %llu, refused %llu",
                      (unsigned long long)(info.free / MiB),
                      (unsigned long long)(info.largest / MiB),
                      (unsigned long long)info.served,
                      (unsigned long long)info.refused);
        }
out:
        ops->mem_destroy(be, vram);
        ops->mem_destroy(be, vram2);
        ops->mem_destroy(be, host);
        ops->mem_destroy(be, host2);
        backend_close(be);
        printf("%s: %d failure(s)\n", gpu_failures ? "FAIL" : "PASS", gpu_failures);
        return gpu_failures ? 1 : 0;
}
