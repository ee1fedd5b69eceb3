/*
 * test_gpu_devices — a process that sees other GPUs than the daemon gets
 * its memory on the GPU its kernels run on. On a machine with two or more
 * GPUs, gpu-memd serves them all; a worker process started with
 * CUDA_VISIBLE_DEVICES naming only the last of them (N-1 of N, as Slurm or
 * torchrun would start a job: 1 on two GPUs, 3 on four; the GPU's UUID
 * where CUDA_VISIBLE_DEVICES is set already, since an index would then
 * count from another list than the daemon's) calls that GPU its device 0.
 * Through gmd_device_from_cuda it finds the daemon's device N-1, allocates
 * 256 MiB there, fills and checks it with kernels on its own device 0 and
 * reports. The daemon's status must show the buffer on device N-1 and
 * every other device's pool untouched, and, where NVML answers, the worker
 * among device N-1's processes and no other's. Before the translation the
 * worker's "device 0" was the daemon's GPU 0: its kernels ran on GPU 1
 * against memory on GPU 0 (4.3x slower, no warning). Skips with one SKIP:
 * line without a GPU or with fewer than two.
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

/* The worker: everything through libgpumem, under CUDA_VISIBLE_DEVICES
 * naming one GPU. */
static int worker(int sock)
{
        report rep = { 0 };
        gmd_client *c = NULL;
        gmd_buffer *b = NULL;
        char done;

        rep.r = gmd_connect(NULL, "visible-one", &c);
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

/* Every pool of the daemon's: `target` holds the worker's buffer, every
 * other device nothing; NVML, where it answers, lists the worker on
 * `target` alone. */
static void check_status(gmd_client *probe, const report *rep, pid_t pid,
                         unsigned target)
{
        gmd_status *st = NULL;
        int seen_target = 0, seen_other = -1, nvml = 0;

        CHECK(gmd_query_status(probe, GMD_STATUS_BUFFERS, 0, &st) == 0,
              "status: %s", gmd_last_error());
        if (!st)
                return;
        for (size_t i = 0; i < st->n_pools; i++) {
                const gmd_pool_status *p = &st->pools[i];

                if (p->tier != GMD_TIER_VRAM)
                        continue;
                printf("device %u (%s, %s): %llu MiB used\n", p->device,
                       p->uuid, p->pci_bus_id,
                       (unsigned long long)(p->used / MiB));
                CHECK(p->uuid[0] != '\0', "device %u has a UUID", p->device);
                if (p->device != target)
                        CHECK(p->used == 0, "device %u holds nothing: %llu "
                              "bytes", p->device, (unsigned long long)p->used);
                else
                        CHECK(p->used >= SIZE, "device %u holds the worker's "
                              "256 MiB: %llu bytes", target,
                              (unsigned long long)p->used);
        }
        for (size_t i = 0; i < st->n_buffers; i++)
                if (st->buffers[i].buffer_id == rep->buffer_id)
                        CHECK(st->buffers[i].device == target, "the buffer "
                              "is on device %u, want %u",
                              st->buffers[i].device, target);
        for (size_t i = 0; i < st->n_gpu_processes; i++) {
                const gmd_gpu_process_status *g = &st->gpu_processes[i];

                nvml = 1;
                if (g->pid != (uint32_t)pid)
                        continue;
                if (g->device == target)
                        seen_target = 1;
                else
                        seen_other = (int)g->device;
        }
        if (nvml && !seen_target && seen_other < 0) {
                /* In a container NVML may give the host's pids. */
                printf("NVML: the worker (pid %d) is on no device's list "
                       "(another pid namespace?); status only\n", (int)pid);
        } else if (nvml) {
                printf("NVML: the worker (pid %d) on device %u: %s; on "
                       "another: %s\n", (int)pid, target,
                       seen_target ? "yes" : "no",
                       seen_other < 0 ? "no" : "yes");
                CHECK(seen_other < 0, "the worker has memory on GPU %d",
                      seen_other);
                CHECK(seen_target, "the worker is not among GPU %u's "
                      "processes", target);
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
        const char *outer;
        char visible[GMD_UUID_SIZE] = "", *saved = NULL;
        unsigned count = 0, target = 0;
        report rep;
        char done = 1;
        int n, r, spawned;

        cu = gpu_test_begin(argc, argv, worker);
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

        /* The worker sees the daemon's last GPU alone. By index as a job
         * is started, the daemon's device k being CUDA's k here; by UUID
         * under a CUDA_VISIBLE_DEVICES of the machine's, whose indices
         * count from another list than the one the daemon sees. */
        outer = getenv("CUDA_VISIBLE_DEVICES");
        if (probe)
                count = gmd_client_device_count(probe);
        if (count > 0)
                target = count - 1;
        if (!outer)
                snprintf(visible, sizeof(visible), "%u", target);
        else if (probe && gmd_device_uuid(probe, target, visible,
                                          sizeof(visible)) < 0)
                visible[0] = 0;
        if (outer)
                saved = strdup(outer);
        CHECK(!outer || visible[0], "the UUID of device %u: %s", target,
              gmd_last_error());
        printf("the worker runs under CUDA_VISIBLE_DEVICES=%s: the daemon's "
               "device %u of the %u it serves (this process sees %d)\n",
               visible, target, count, n);
        /* Only the worker's environment: this process's CUDA is set up. */
        setenv("CUDA_VISIBLE_DEVICES", visible, 1);
        r = gpu_proc_spawn("visible-one", &w);
        if (saved)
                setenv("CUDA_VISIBLE_DEVICES", saved, 1);
        else
                unsetenv("CUDA_VISIBLE_DEVICES");
        free(saved);
        CHECK(r == 0, "spawn the worker: %s", strerror(-r));
        spawned = r == 0;
        if (spawned && probe) {
                r = gpu_proc_recv(w.sock, &rep, sizeof(rep), NULL);
                CHECK(r == 0, "the worker's report: %s", strerror(-r));
                if (r == 0) {
                        printf("worker under CUDA_VISIBLE_DEVICES=%s: CUDA "
                               "device 0 is the daemon's device %u; rc %d "
                               "%s; buffer on its CUDA device %d; %lld bad "
                               "words\n", visible, rep.device, rep.r,
                               rep.error, rep.pointer_device, rep.bad);
                        CHECK(rep.r == 0, "worker: %s", rep.error);
                        CHECK(rep.device == target, "CUDA device 0 of the "
                              "worker is the daemon's device %u, want %u",
                              rep.device, target);
                        CHECK(rep.bad == 0, "kernels on the worker's device "
                              "read back %lld bad words (%s)", rep.bad,
                              rep.error);
                        if (rep.r == 0)
                                check_status(probe, &rep, w.pid, target);
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
