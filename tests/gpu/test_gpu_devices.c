/*
 * test_gpu_devices — a process that sees other GPUs than the daemon gets
 * its memory on the GPU its kernels run on. On a machine with two or more
 * GPUs, gpu-memd serves them all; a worker process started with
 * CUDA_VISIBLE_DEVICES=1 (as Slurm or torchrun would start a job) calls
 * that GPU its device 0. Through gmd_device_from_cuda it finds the
 * daemon's device 1, allocates 256 MiB there, fills and checks it with
 * kernels on its own device 0 and reports. The daemon's status must show
 * the buffer on device 1 and device 0's pool untouched, and, where NVML
 * answers, the worker among device 1's processes and not device 0's.
 * Before the translation the worker's "device 0" was the daemon's GPU 0:
 * its kernels ran on GPU 1 against memory on GPU 0 (4.3x slower, no
 * warning). Skips with one SKIP: line without a GPU or with fewer than two.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_kernels.h"
#include "gpu_proc.h"
#include "gpumem.h"

#define MiB (1ull << 20)
#define SIZE (256 * MiB)

typedef struct report {
        int r;                  /* 0, or the failing call's error */
        unsigned device;        /* the daemon's device it found */
        int pointer_device;     /* the CUDA device of the buffer, as the
                                 * worker's runtime sees it */
        long long bad;          /* words that did not read back */
        uint64_t buffer_id;
        char error[256];
} report;

/* The worker: everything through libgpumem, under CUDA_VISIBLE_DEVICES=1. */
static int worker(int sock)
{
        report rep = { 0 };
        gmd_client *c = NULL;
        gmd_buffer *b = NULL;
        char done;

        rep.r = gmd_connect(NULL, "visible-1", &c);
        if (rep.r == 0)
                rep.r = gmd_device_from_cuda(c, 0, &rep.device);
        if (rep.r == 0)
                rep.r = gmd_alloc(c, SIZE, rep.device, GMD_ALLOC_SWAPPABLE,
                                  10000, &b);
        if (rep.r < 0) {
                snprintf(rep.error, sizeof(rep.error), "%s", gmd_last_error());
        } else {
                rep.buffer_id = gmd_buffer_id(b);
                rep.pointer_device = gpu_pointer_device(gmd_buffer_ptr(b));
                if (gpu_fill(gmd_buffer_ptr(b), SIZE, 0, 7) < 0)
                        rep.bad = -1;
                else
                        rep.bad = gpu_check(gmd_buffer_ptr(b), SIZE, 0, 7);
                if (rep.bad < 0)
                        snprintf(rep.error, sizeof(rep.error), "%s",
                                 gpu_last_error());
        }
        gpu_proc_send(sock, &rep, sizeof(rep), NULL, 0);
        /* Hold the buffer until the parent has looked. */
        gpu_proc_recv(sock, &done, sizeof(done), NULL);
        if (b)
                gmd_free(c, b);
        gmd_disconnect(c);
        return 0;
}

static void check_status(gmd_client *probe, const report *rep, pid_t pid)
{
        gmd_status *st = NULL;
        int seen[2] = { 0, 0 }, nvml = 0;

        CHECK(gmd_query_status(probe, GMD_STATUS_BUFFERS, 0, &st) == 0,
              "status: %s", gmd_last_error());
        if (!st)
                return;
        for (size_t i = 0; i < st->n_pools; i++) {
                const gmd_pool_status *p = &st->pools[i];

                if (p->tier != GMD_TIER_VRAM || p->device > 1)
                        continue;
                printf("device %u (%s, %s): %llu MiB used\n", p->device,
                       p->uuid, p->pci_bus_id,
                       (unsigned long long)(p->used / MiB));
                CHECK(p->uuid[0] != '\0', "device %u has a UUID", p->device);
                if (p->device == 0)
                        CHECK(p->used == 0, "device 0 holds nothing: %llu "
                              "bytes", (unsigned long long)p->used);
                else
                        CHECK(p->used >= SIZE, "device 1 holds the worker's "
                              "256 MiB: %llu bytes",
                              (unsigned long long)p->used);
        }
        for (size_t i = 0; i < st->n_buffers; i++)
                if (st->buffers[i].buffer_id == rep->buffer_id)
                        CHECK(st->buffers[i].device == 1, "the buffer is on "
                              "device %u, want 1", st->buffers[i].device);
        for (size_t i = 0; i < st->n_gpu_processes; i++) {
                const gmd_gpu_process_status *g = &st->gpu_processes[i];

                nvml = 1;
                if (g->pid == (uint32_t)pid && g->device < 2)
                        seen[g->device] = 1;
        }
        if (nvml && !seen[0] && !seen[1]) {
                /* In a container NVML may give the host's pids. */
                printf("NVML: the worker (pid %d) is on neither device's "
                       "list (another pid namespace?); status only\n",
                       (int)pid);
        } else if (nvml) {
                printf("NVML: the worker (pid %d) on device 0: %s, on "
                       "device 1: %s\n", (int)pid, seen[0] ? "yes" : "no",
                       seen[1] ? "yes" : "no");
                CHECK(!seen[0], "the worker has memory on GPU 0");
                CHECK(seen[1], "the worker is not among GPU 1's processes");
        } else {
                printf("NVML: no per-process figures; status only\n");
        }
        gmd_status_free(st);
}

int main(int argc, char **argv)
{
        const gmd_cuda_driver *cu;
        gmd_client *probe = NULL;
        gpu_daemon d;
        gpu_proc w = { .pid = -1, .sock = -1 };
        report rep;
        char done = 1;
        int sock, n, r, spawned;

        setvbuf(stdout, NULL, _IOLBF, 0);
        sock = gpu_proc_worker_sock(argc, argv);
        if (sock >= 0)
                return worker(sock);
        cu = gpu_usable();
        if (!cu)
                return GPU_TEST_SKIP;
        n = cuda_driver_device_count(cu);
        if (n < 2) {
                printf("SKIP: needs 2 GPUs, this process sees %d\n", n);
                return GPU_TEST_SKIP;
        }
        setenv("GPU_MEMD_CACHE", "0", 1);
        r = gpu_daemon_start(NULL, &d);
        CHECK(r == 0, "start gpu-memd: %s", strerror(-r));
        if (r < 0)
                return 1;
        r = gmd_connect(NULL, "probe", &probe);
        CHECK(r == 0, "connect: %s", gmd_last_error());

        /* Only the worker sees one GPU: this process's CUDA is set up. */
        setenv("CUDA_VISIBLE_DEVICES", "1", 1);
        r = gpu_proc_spawn("visible-1", &w);
        unsetenv("CUDA_VISIBLE_DEVICES");
        CHECK(r == 0, "spawn the worker: %s", strerror(-r));
        spawned = r == 0;
        if (spawned && probe) {
                r = gpu_proc_recv(w.sock, &rep, sizeof(rep), NULL);
                CHECK(r == 0, "the worker's report: %s", strerror(-r));
                if (r == 0) {
                        printf("worker under CUDA_VISIBLE_DEVICES=1: CUDA "
                               "device 0 is the daemon's device %u; rc %d "
                               "%s; buffer on its CUDA device %d; %lld bad "
                               "words\n", rep.device, rep.r, rep.error,
                               rep.pointer_device, rep.bad);
                        CHECK(rep.r == 0, "worker: %s", rep.error);
                        CHECK(rep.device == 1, "CUDA device 0 of the worker "
                              "is the daemon's device %u, want 1", rep.device);
                        CHECK(rep.bad == 0, "kernels on the worker's device "
                              "read back %lld bad words (%s)", rep.bad,
                              rep.error);
                        if (rep.r == 0)
                                check_status(probe, &rep, w.pid);
                }
                gpu_proc_send(w.sock, &done, sizeof(done), NULL, 0);
        }
        if (spawned)
                CHECK(gpu_proc_wait(&w) == 0, "worker exit");
        gmd_disconnect(probe);
        CHECK(gpu_daemon_stop(&d, gpu_failures ? stdout : NULL) == 0,
              "gpu-memd stops cleanly");
        printf("%s: %d failure(s)\n", gpu_failures ? "FAIL" : "PASS", gpu_failures);
        return gpu_failures ? 1 : 0;
}
