/*
 * test_gpu_links — the links between host memory and every GPU of the
 * machine, as the cuda backend measures them at start
 * (backend_cuda_link.c), without the daemon: this process opens the
 * backend on all visible GPUs and plays the loop thread, calling
 * maintain and copy_reap (as the daemon's timer and wake do) until the
 * measurement's thread is over, timing each call.
 *
 * Prints each GPU's link alone and its part with every GPU copying, the
 * host's figure together, the measurement's wall time and the loop
 * thread's share, then checks: every link measured, both ways, each
 * alone rate positive; with two GPUs or more, the together figures
 * positive and at most 1.1 x the links alone summed; no call on the
 * loop thread above LOOP_CALL_MAX_US. Exits 77 with one "SKIP:" line
 * when there is no usable GPU.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend_cuda.h"
#include "config.h"
#include "cuda_driver.h"
#include "gpu_kernels.h"
#include "gpu_proc.h"
#include "log.h"

#define MiB (1ull << 20)
#define ARENA (256 * MiB)        /* each GPU's host arena */
#define WAIT_US 60000000.0       /* the measurement is over by then */
#define LOOP_CALL_MAX_US 5000.0  /* the longest maintain or reap may take */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int wakes;

static void on_wake(void *ctx)
{
        (void)ctx;
        pthread_mutex_lock(&lock);
        wakes++;
        pthread_mutex_unlock(&lock);
}

static void on_done(void *ctx, void *cookie, int status)
{
        (void)ctx;
        (void)cookie;
        (void)status;
}

static double gbps(uint64_t bytes_per_s)
{
        return (double)bytes_per_s / 1e9;
}

int main(void)
{
        const gmd_cuda_driver *cu;
        gmd_backend *be = NULL;
        cuda_backend *b;
        gmd_config config;
        gmd_link_info host, info;
        double t0, longest = 0, loop = 0;
        uint64_t sum[2] = { 0, 0 };
        unsigned calls = 0, measured = 0;
        int r, n;

        setvbuf(stdout, NULL, _IOLBF, 0);
        cu = gpu_usable();
        if (!cu)
                return GPU_TEST_SKIP;
        n = cuda_driver_device_count(cu);
        printf("%d GPU(s) visible: every link measured alone, then all at "
               "once\n", n);
        log_setup(GMD_LOG_INFO);
        config_init_defaults(&config);
        config.cuda_reserve_chunks = 0;   /* maintain: the links' work only */
        config.host_stock = (gmd_size_spec){ ARENA * (uint64_t)(n > 0 ? n : 1), 0 };
        r = backend_cuda_open(&config, &be);
        CHECK(r == 0, "backend_cuda_open: %s", strerror(-r));
        if (r < 0)
                return 1;
        b = (cuda_backend *)be;
        be->ops->set_wake(be, on_wake, NULL);

        /* The loop: maintain on a timer (here every millisecond), reap
         * when woken; each call timed. */
        t0 = gpu_now_us();
        while (b->links.state == CUDA_LINK_PENDING ||
               b->links.state == CUDA_LINK_COPYING) {
                double c0 = gpu_now_us(), us;
                bool woken;

                pthread_mutex_lock(&lock);
                woken = wakes > 0;
                wakes = 0;
                pthread_mutex_unlock(&lock);
                if (woken)
                        be->ops->copy_reap(be, on_done, NULL);
                else
                        be->ops->maintain(be);
                us = gpu_now_us() - c0;
                loop += us;
                calls++;
                if (us > longest)
                        longest = us;
                if (gpu_now_us() - t0 > WAIT_US)
                        break;
                usleep(1000);
        }
        printf("measured in %.1f ms: %u loop calls, %.2f ms on the loop "
               "thread in all, the longest %.0f us\n",
               (gpu_now_us() - t0) / 1e3, calls, loop / 1e3, longest);
        CHECK(b->links.state == CUDA_LINK_DONE, "the measurement ended "
              "(state %d)", (int)b->links.state);
        CHECK(longest <= LOOP_CALL_MAX_US, "no loop call above %.0f us: "
              "the longest took %.0f us", LOOP_CALL_MAX_US, longest);

        for (unsigned i = 0; i < b->n_devices; i++) {
                cuda_device *d = &b->devices[i];

                be->ops->link_info(be, i, &info);
                printf("gpu%u (%s): alone %.1f GB/s out, %.1f in; with every "
                       "GPU copying %.1f out, %.1f in\n", i, d->name,
                       gbps(info.bytes_per_s[GMD_COPY_OUT]),
                       gbps(info.bytes_per_s[GMD_COPY_IN]),
                       gbps(d->link.together[GMD_COPY_OUT]),
                       gbps(d->link.together[GMD_COPY_IN]));
                CHECK(d->link.state == CUDA_LINK_DONE, "gpu%u measured "
                      "(state %d)", i, (int)d->link.state);
                CHECK(info.bytes_per_s[GMD_COPY_OUT] > 0 &&
                      info.bytes_per_s[GMD_COPY_IN] > 0,
                      "gpu%u: alone rates positive", i);
                measured += d->link.state == CUDA_LINK_DONE;
                sum[GMD_COPY_OUT] += info.bytes_per_s[GMD_COPY_OUT];
                sum[GMD_COPY_IN] += info.bytes_per_s[GMD_COPY_IN];
        }
        be->ops->host_link_info(be, &host);
        printf("host links: %.1f GB/s out, %.1f in together (alone: %.1f "
               "out, %.1f in; %.0f%% and %.0f%%)\n",
               gbps(host.bytes_per_s[GMD_COPY_OUT]),
               gbps(host.bytes_per_s[GMD_COPY_IN]), gbps(sum[GMD_COPY_OUT]),
               gbps(sum[GMD_COPY_IN]),
               sum[GMD_COPY_OUT] ? 100.0 * (double)host.bytes_per_s[GMD_COPY_OUT] /
               (double)sum[GMD_COPY_OUT] : 0.0,
               sum[GMD_COPY_IN] ? 100.0 * (double)host.bytes_per_s[GMD_COPY_IN] /
               (double)sum[GMD_COPY_IN] : 0.0);
        if (measured >= 2) {
                for (int dir = 0; dir < 2; dir++) {
                        CHECK(host.bytes_per_s[dir] > 0, "together %s: "
                              "positive", dir == GMD_COPY_OUT ? "out" : "in");
                        CHECK((double)host.bytes_per_s[dir] <=
                              1.1 * (double)sum[dir], "together %s (%.1f "
                              "GB/s) at most 1.1 x the links alone (%.1f)",
                              dir == GMD_COPY_OUT ? "out" : "in",
                              gbps(host.bytes_per_s[dir]), gbps(sum[dir]));
                }
        } else {
                printf("one GPU: nothing to measure together\n");
                CHECK(!host.bytes_per_s[0] && !host.bytes_per_s[1],
                      "no together figure with one link");
        }
        backend_close(be);
        printf("%s: %d failure(s)\n", gpu_failures ? "FAIL" : "PASS",
               gpu_failures);
        return gpu_failures ? 1 : 0;
}
