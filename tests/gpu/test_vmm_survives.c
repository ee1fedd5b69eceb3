/*
 * test_vmm_survives — the driver facts a daemon restart rests on, checked
 * without gpu-memd. A "daemon" worker creates a VRAM and a host-located VMM
 * allocation (POSIX fd handles), fills both and exports their fds; the
 * parent holds the fds only (it never maps them: a keeper of fds, as
 * systemd's fd store or gpu-memd's keeper would be). A "client" worker
 * imports the VRAM one, maps it and closes its fd, as libgpumem does. The
 * daemon worker is then killed with SIGKILL. After that:
 *   1. the client's mapping still reads the bytes (no daemon needed);
 *   2. the client still has the fd it received (libgpumem keeps it to
 *      re-offer the buffer to a restarted daemon: an fd cannot be had
 *      again from the mapping alone, cuMemExportToShareableHandle of a
 *      cuMemRetainAllocationHandle'd import answers CUDA_ERROR_INVALID_VALUE
 *      on driver 580, which this test reports);
 *   3. a fresh process (the restarted daemon) imports the two fds the
 *      parent kept and the client's one, maps them and reads
 *      every byte as written: memory held by nothing but an fd outlived
 *      the process that created it.
 * Also prints how long the fresh process's import + map of each took.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cu_check.h"
#include "gpu_proc.h"

#define MiB (1ull << 20)
#define SIZE (64 * MiB)

enum { OP_CREATE = 1, OP_IMPORT, OP_REEXPORT, OP_VERIFY, OP_QUIT };

typedef struct cmd {
        int op;
        unsigned n_fds;
        int host[GPU_PROC_MAX_FDS];     /* per fd: host-located? */
} cmd;

typedef struct reply {
        int r;
        unsigned n_fds;
        long long bad[GPU_PROC_MAX_FDS];
        double map_us[GPU_PROC_MAX_FDS];
        char text[200];
} reply;

static const gmd_cuda_driver *cu;
static CUcontext ctx;
static uint8_t *pattern;

static void pattern_make(void)
{
        pattern = malloc(SIZE);
        for (size_t i = 0; i < SIZE; i++)
                pattern[i] = (uint8_t)(i * 131u + (i >> 20) * 7u + 1u);
}

static int ctx_up(void)
{
        CUdevice dev;

        CU(cu->cuDeviceGet(&dev, 0));
        CU(cu->cuDevicePrimaryCtxRetain(&ctx, dev));
        CU(cu->cuCtxSetCurrent(ctx));
        return 0;
}

/* Map `h` (SIZE bytes) at a fresh range, device 0 read-write. */
static int map_handle(CUmemGenericAllocationHandle h, CUdeviceptr *ret)
{
        CUmemAccessDesc access = { 0 };
        CUdeviceptr va;

        CU(cu->cuMemAddressReserve(&va, SIZE, 0, 0, 0));
        CU(cu->cuMemMap(va, SIZE, 0, h, 0));
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = 0;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CU(cu->cuMemSetAccess(va, SIZE, &access, 1));
        *ret = va;
        return 0;
}

static int create(int host, CUdeviceptr *ret_va, CUmemGenericAllocationHandle *ret_h)
{
        CUmemAllocationProp prop = { 0 };
        CUmemGenericAllocationHandle h;

        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location.type = host ? CU_MEM_LOCATION_TYPE_HOST_NUMA
                                  : CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        CU(cu->cuMemCreate(&h, SIZE, &prop, 0));
        if (map_handle(h, ret_va) < 0)
                return -EIO;
        CU(cu->cuMemcpyHtoD(*ret_va, pattern, SIZE));
        *ret_h = h;
        return 0;
}

static int export_fd(CUmemGenericAllocationHandle h, int *ret_fd)
{
        int fd = -1;

        CU(cu->cuMemExportToShareableHandle(&fd, h,
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        *ret_fd = fd;
        return 0;
}

static long long count_bad(CUdeviceptr va)
{
        uint8_t *back = malloc(SIZE);
        long long bad = 0;

        if (!back || cu->cuMemcpyDtoH(back, va, SIZE) != CUDA_SUCCESS) {
                free(back);
                return -1;
        }
        for (size_t i = 0; i < SIZE; i++)
                bad += back[i] != pattern[i];
        free(back);
        return bad;
}

/* The worker: one op per command, as the parent says. */
static int worker(int sock)
{
        CUdeviceptr client_va = 0;
        int client_fd = -1;
        cmd c;
        int fds[GPU_PROC_MAX_FDS];

        if (cuda_driver_load(&cu, NULL) < 0 || ctx_up() < 0)
                return 1;
        pattern_make();
        while (gpu_proc_recv(sock, &c, sizeof(c), fds) == 0) {
                reply rep = { 0 };
                int out[GPU_PROC_MAX_FDS];

                if (c.op == OP_CREATE) {
                        CUdeviceptr va[2];
                        CUmemGenericAllocationHandle h[2];

                        /* VRAM for the keeper and the client, host for the keeper. */
                        rep.r = create(0, &va[0], &h[0]);
                        if (rep.r == 0)
                                rep.r = create(1, &va[1], &h[1]);
                        if (rep.r == 0)
                                rep.r = export_fd(h[0], &out[0]);
                        if (rep.r == 0)
                                rep.r = export_fd(h[1], &out[1]);
                        if (rep.r == 0)
                                rep.r = export_fd(h[0], &out[2]);
                        rep.n_fds = rep.r == 0 ? 3 : 0;
                } else if (c.op == OP_IMPORT) {
                        CUmemGenericAllocationHandle h;

                        rep.r = cu->cuMemImportFromShareableHandle(&h,
                                        (void *)(uintptr_t)fds[0],
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ? -EIO : 0;
                        if (rep.r == 0)
                                rep.r = map_handle(h, &client_va);
                        if (rep.r == 0)
                                cu->cuMemRelease(h);   /* the mapping holds it */
                        client_fd = fds[0];     /* kept, as libgpumem does */
                } else if (c.op == OP_REEXPORT) {
                        CUmemGenericAllocationHandle h;

                        int fd = -1;

                        rep.bad[0] = count_bad(client_va);
                        /* For the record only: can the mapping alone give an fd? */
                        snprintf(rep.text, sizeof(rep.text), "no");
                        if (cu->cuMemRetainAllocationHandle(&h, (void *)client_va) == 0) {
                                if (cu->cuMemExportToShareableHandle(&fd, h,
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == 0) {
                                        snprintf(rep.text, sizeof(rep.text), "yes");
                                        close(fd);
                                }
                                cu->cuMemRelease(h);
                        }
                        out[0] = client_fd;
                        client_fd = -1;
                        rep.r = out[0] >= 0 ? 0 : -EBADF;
                        rep.n_fds = rep.r == 0 ? 1 : 0;
                } else if (c.op == OP_VERIFY) {
                        for (unsigned i = 0; i < c.n_fds; i++) {
                                CUmemGenericAllocationHandle h;
                                CUdeviceptr va;
                                double t0 = gpu_now_us();

                                rep.bad[i] = -1;
                                if (cu->cuMemImportFromShareableHandle(&h,
                                                (void *)(uintptr_t)fds[i],
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
                                        continue;
                                if (map_handle(h, &va) == 0) {
                                        rep.map_us[i] = gpu_now_us() - t0;
                                        rep.bad[i] = count_bad(va);
                                }
                                close(fds[i]);
                        }
                        rep.n_fds = 0;
                } else {
                        break;
                }
                gpu_proc_send(sock, &rep, sizeof(rep), out, rep.n_fds);
                for (unsigned i = 0; i < rep.n_fds; i++)
                        close(out[i]);
        }
        return 0;
}

static int ask(gpu_proc *p, int op, const int *fds, unsigned n, reply *rep,
               int *ret_fds)
{
        cmd c = { .op = op, .n_fds = n };
        int got[GPU_PROC_MAX_FDS];
        int r;

        r = gpu_proc_send(p->sock, &c, sizeof(c), fds, n);
        if (r == 0)
                r = gpu_proc_recv(p->sock, rep, sizeof(*rep), ret_fds ? ret_fds : got);
        if (r == 0 && !ret_fds)
                for (unsigned i = 0; i < GPU_PROC_MAX_FDS; i++)
                        if (got[i] >= 0)
                                close(got[i]);
        return r;
}

int main(int argc, char **argv)
{
        const gmd_cuda_driver *driver;
        gpu_proc daemon, client, fresh;
        int kept[GPU_PROC_MAX_FDS], back[GPU_PROC_MAX_FDS], verify[3];
        reply rep;

        driver = gpu_test_begin(argc, argv, worker);
        if (!driver)
                return GPU_TEST_SKIP;
        gpu_say_device(driver, 0, "every process of this test creates, "
                       "maps and checks its memory there");
        CHECK(gpu_proc_spawn("vmm-daemon", &daemon) == 0, "spawn daemon");
        CHECK(gpu_proc_spawn("vmm-client", &client) == 0, "spawn client");
        if (gpu_failures)
                return 1;

        CHECK(ask(&daemon, OP_CREATE, NULL, 0, &rep, kept) == 0 && rep.r == 0,
              "daemon worker: create and export: %d", rep.r);
        if (gpu_failures)
                return 1;
        /* kept[0]: VRAM, kept[1]: host, kept[2]: VRAM for the client. */
        CHECK(ask(&client, OP_IMPORT, &kept[2], 1, &rep, NULL) == 0 && rep.r == 0,
              "client: import and map: %d", rep.r);
        close(kept[2]);

        kill(daemon.pid, SIGKILL);
        gpu_proc_wait(&daemon);
        printf("daemon worker killed; the parent holds 2 fds, the client a mapping\n");

        CHECK(ask(&client, OP_REEXPORT, NULL, 0, &rep, back) == 0 && rep.r == 0,
              "client: give back its kept fd: %d", rep.r);
        printf("an fd from the client's mapping alone (retain + export): %s\n", rep.text);
        CHECK(rep.bad[0] == 0, "client's mapping after the kill: %lld bad bytes",
              rep.bad[0]);

        verify[0] = kept[0];
        verify[1] = kept[1];
        verify[2] = back[0];
        CHECK(gpu_proc_spawn("vmm-fresh", &fresh) == 0, "spawn fresh");
        CHECK(ask(&fresh, OP_VERIFY, verify, 3, &rep, NULL) == 0, "fresh: verify");
        CHECK(rep.bad[0] == 0, "VRAM held by an fd alone: %lld bad bytes (-1: no import)",
              rep.bad[0]);
        CHECK(rep.bad[1] == 0, "host memory held by an fd alone: %lld bad bytes",
              rep.bad[1]);
        CHECK(rep.bad[2] == 0, "VRAM through the fd the client kept: %lld bad bytes",
              rep.bad[2]);
        printf("fresh process: import + map of 64 MiB: VRAM %.0f us, host %.0f us, "
               "client's VRAM %.0f us\n", rep.map_us[0], rep.map_us[1], rep.map_us[2]);
        for (int i = 0; i < 3; i++)
                close(verify[i]);
        {
                cmd q = { .op = OP_QUIT };

                gpu_proc_send(client.sock, &q, sizeof(q), NULL, 0);
                gpu_proc_send(fresh.sock, &q, sizeof(q), NULL, 0);
        }
        gpu_proc_wait(&client);
        gpu_proc_wait(&fresh);
        printf("%s\n", gpu_failures ? "FAIL" : "PASS");
        return gpu_failures ? 1 : 0;
}
