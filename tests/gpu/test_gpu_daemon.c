/*
 * test_gpu_daemon — the real gpu-memd on the cuda backend with real client
 * processes (libgpumem) running kernels through their buffer pointers.
 *
 * Each client is a worker process (gpu_proc.h) that this program drives
 * over a socketpair; this process keeps its own libgpumem connection for
 * status queries and its own CUDA context for cudaMemGetInfo.
 *
 * Sections: two processes write and check patterns at once; the daemon's
 * pool accounting moves with the driver's free memory; a client never
 * reads bytes another client wrote (zero on reuse, large and reserve-sized
 * buffers); a SIGKILLed client's memory returns to the pool and the GPU;
 * legacy IPC buffers; every other GPU where there are several (a buffer
 * on each, written and read by a kernel there); the VRAM limit with
 * its error messages (a second daemon started with --vram-limit 256M).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_driver.h"
#include "gpu_kernels.h"
#include "gpu_proc.h"
#include "gpumem.h"

#define MiB (1ull << 20)
#define SLOTS 8

enum { W_ALLOC = 1, W_FILL, W_CHECK, W_FREE, W_DEVICE, W_SIZE, W_QUIT };

typedef struct wcmd {
        int op, slot;
        unsigned device, flags;
        uint64_t size;
        int64_t timeout_ms;
        uint32_t seed;
} wcmd;

typedef struct wreply {
        int r;
        long long value;
        char msg[256];
} wreply;


static int worker(int sock)
{
        gmd_buffer *slots[SLOTS] = { 0 };
        int fds[GPU_PROC_MAX_FDS];
        gmd_client *client;
        uint64_t f, t;
        wcmd c;
        int r;

        /* Context first, so later driver figures do not include it. */
        if (gpu_mem_info(&f, &t) < 0)
                return 2;
        r = gmd_connect(NULL, "gpu-test-worker", &client);
        if (r < 0) {
                fprintf(stderr, "worker: connect: %s\n", gmd_last_error());
                return 3;
        }
        while (gpu_proc_recv(sock, &c, sizeof(c), fds) == 0) {
                wreply rep = { 0 };
                gmd_buffer *b = slots[c.slot];

                switch (c.op) {
                case W_ALLOC:
                        rep.r = gmd_alloc(client, c.size, c.device, c.flags,
                                          c.timeout_ms, &slots[c.slot]);
                        if (rep.r < 0)
                                snprintf(rep.msg, sizeof(rep.msg), "%s",
                                         gmd_last_error());
                        break;
                case W_FILL:
                        /* A buffer is usable by the device it was asked on. */
                        rep.r = gpu_set_device((int)gmd_buffer_device(b));
                        if (rep.r == 0)
                                rep.r = gpu_fill(gmd_buffer_ptr(b),
                                                 gmd_buffer_size(b), 0,
                                                 c.seed);
                        break;
                case W_CHECK:
                        gpu_set_device((int)gmd_buffer_device(b));
                        rep.value = gpu_check(gmd_buffer_ptr(b),
                                              gmd_buffer_size(b), 0, c.seed);
                        rep.r = rep.value < 0 ? -EIO : 0;
                        break;
                case W_FREE:
                        rep.r = gmd_free(client, b);
                        slots[c.slot] = NULL;
                        break;
                case W_DEVICE:
                        rep.value = gpu_pointer_device(gmd_buffer_ptr(b));
                        break;
                case W_SIZE:
                        rep.value = (long long)gmd_buffer_size(b);
                        break;
                case W_QUIT:
                        gmd_disconnect(client);
                        return 0;
                }
                if (rep.r < 0 && !rep.msg[0])
                        snprintf(rep.msg, sizeof(rep.msg), "%s",
                                 gpu_last_error());
                gpu_proc_send(sock, &rep, sizeof(rep), NULL, 0);
        }
        return 1;
}

static wreply ask(gpu_proc *w, int op, int slot, uint64_t size,
                  uint32_t seed)
{
        wcmd c = { .op = op, .slot = slot, .size = size, .seed = seed,
                   .timeout_ms = GMD_NO_WAIT };
        int fds[GPU_PROC_MAX_FDS];
        wreply rep = { .r = -EIO };

        if (gpu_proc_send(w->sock, &c, sizeof(c), NULL, 0) < 0 ||
            gpu_proc_recv(w->sock, &rep, sizeof(rep), fds) < 0)
                rep.r = -EIO;
        return rep;
}

static wreply ask_alloc(gpu_proc *w, int slot, uint64_t size,
                        unsigned device, unsigned flags)
{
        wcmd c = { .op = W_ALLOC, .slot = slot, .size = size,
                   .device = device, .flags = flags,
                   .timeout_ms = GMD_NO_WAIT };
        int fds[GPU_PROC_MAX_FDS];
        wreply rep = { .r = -EIO };

        if (gpu_proc_send(w->sock, &c, sizeof(c), NULL, 0) < 0 ||
            gpu_proc_recv(w->sock, &rep, sizeof(rep), fds) < 0)
                rep.r = -EIO;
        return rep;
}

static void quit(gpu_proc *w)
{
        wcmd c = { .op = W_QUIT };

        gpu_proc_send(w->sock, &c, sizeof(c), NULL, 0);
        CHECK(gpu_proc_wait(w) == 0, "worker exit");
}

static uint64_t pool_used(gmd_client *me, unsigned device)
{
        gmd_status *st = NULL;
        uint64_t used = UINT64_MAX;

        if (gmd_query_status(me, GMD_STATUS_POOLS, 0, &st) < 0)
                return used;
        for (size_t i = 0; i < st->n_pools; i++)
                if (st->pools[i].device == device &&
                    st->pools[i].tier == GMD_TIER_VRAM)
                        used = st->pools[i].used;
        gmd_status_free(st);
        return used;
}

static uint64_t driver_free(void)
{
        uint64_t f = 0, t;

        gpu_mem_info(&f, &t);
        return f;
}

static long long mib_diff(uint64_t a, uint64_t b)
{
        return ((long long)a - (long long)b) / (long long)MiB;
}

/* Legacy IPC buffers (GMD_ALLOC_LEGACY_IPC): the daemon cuMemAllocs in
 * 2 MiB steps and replies with a cudaIpcMemHandle, no fd; libgpumem opens
 * it with cudaIpcOpenMemHandle and closes it before it sends FREE. */
static void run_legacy_ipc(gmd_client *me, gpu_proc *a)
{
        uint64_t used0 = pool_used(me, 0);
        wreply rep;
        gpu_proc c;

        /* 3 MiB asks for rounding up to the next 2 MiB step. */
        rep = ask_alloc(a, 3, 3 * MiB, 0, GMD_ALLOC_LEGACY_IPC);
        CHECK(rep.r == 0, "legacy IPC alloc: %d %s", rep.r, rep.msg);
        if (rep.r < 0)
                return;
        rep = ask(a, W_SIZE, 3, 0, 0);
        CHECK(rep.value == (long long)(4 * MiB), "ipc size 4 MiB: %lld",
              rep.value);
        CHECK(pool_used(me, 0) - used0 == 4 * MiB, "ipc counted in the pool");
        rep = ask(a, W_DEVICE, 3, 0, 0);
        CHECK(rep.value == 0, "ipc pointer on device 0: %lld", rep.value);
        rep = ask(a, W_CHECK, 3, 0, 0);
        CHECK(rep.r == 0 && rep.value == 0, "ipc buffer starts zeroed: %lld %s",
              rep.value, rep.msg);
        rep = ask(a, W_FILL, 3, 0, 606);
        CHECK(rep.r == 0, "ipc fill: %s", rep.msg);
        rep = ask(a, W_CHECK, 3, 0, 606);
        CHECK(rep.r == 0 && rep.value == 0, "ipc check: %lld %s", rep.value,
              rep.msg);
        rep = ask(a, W_FREE, 3, 0, 0);
        CHECK(rep.r == 0, "ipc free: %d %s", rep.r, rep.msg);
        CHECK(pool_used(me, 0) == used0, "ipc bytes back in the pool");

        /* A client killed while it has the handle open: the daemon frees
         * the buffer without the client's close. */
        CHECK(gpu_proc_spawn("ipc-victim", &c) == 0, "spawn ipc victim");
        rep = ask_alloc(&c, 0, 64 * MiB, 0, GMD_ALLOC_LEGACY_IPC);
        CHECK(rep.r == 0, "ipc victim alloc: %d %s", rep.r, rep.msg);
        CHECK(ask(&c, W_FILL, 0, 0, 616).r == 0, "ipc victim fill");
        kill(c.pid, SIGKILL);
        gpu_proc_wait(&c);
        for (int i = 0; i < 500 && pool_used(me, 0) != used0; i++)
                usleep(10000);
        CHECK(pool_used(me, 0) == used0, "ipc victim's bytes returned");
        printf("legacy IPC: 3 MiB -> 4 MiB, zeroed, written and read, freed; "
               "a killed holder's buffer returned\n");
}

static void run_main_daemon(gmd_client *me, gpu_proc *a, gpu_proc *b)
{
        uint64_t used0, used1, free0, free1;
        unsigned n;
        wreply rep;
        gpu_proc c;

        /* Two processes at once, each through its own pointers. */
        CHECK(ask_alloc(a, 0, 256 * MiB, 0, 0).r == 0, "A alloc");
        CHECK(ask_alloc(b, 0, 256 * MiB, 0, 0).r == 0, "B alloc");
        CHECK(ask(a, W_FILL, 0, 0, 101).r == 0, "A fill");
        CHECK(ask(b, W_FILL, 0, 0, 202).r == 0, "B fill");
        rep = ask(a, W_CHECK, 0, 0, 101);
        CHECK(rep.r == 0 && rep.value == 0, "A reads its pattern: %lld bad",
              rep.value);
        rep = ask(b, W_CHECK, 0, 0, 202);
        CHECK(rep.r == 0 && rep.value == 0, "B reads its pattern: %lld bad",
              rep.value);
        printf("two processes: patterns intact\n");
        CHECK(ask(a, W_FREE, 0, 0, 0).r == 0, "A free");
        CHECK(ask(b, W_FREE, 0, 0, 0).r == 0, "B free");

        /* Accounting: pool used vs the driver's free memory. */
        used0 = pool_used(me, 0);
        free0 = driver_free();
        CHECK(ask_alloc(a, 1, 1024 * MiB, 0, 0).r == 0, "A alloc 1 GiB");
        used1 = pool_used(me, 0);
        free1 = driver_free();
        printf("accounting: pool used +%lld MiB, driver free -%lld MiB\n",
               mib_diff(used1, used0), mib_diff(free0, free1));
        CHECK(used1 - used0 == 1024 * MiB, "pool moved by 1 GiB");
        CHECK(free0 - free1 >= 1020 * MiB && free0 - free1 <= 1028 * MiB,
              "driver free moved by 1 GiB");

        /* Zero on reuse: A writes and frees, B allocates the same size. */
        CHECK(ask(a, W_FILL, 1, 0, 303).r == 0, "A fill 1 GiB");
        CHECK(ask(a, W_FREE, 1, 0, 0).r == 0, "A free 1 GiB");
        CHECK(ask_alloc(b, 1, 1024 * MiB, 0, 0).r == 0, "B alloc 1 GiB");
        rep = ask(b, W_CHECK, 1, 0, 0);
        CHECK(rep.r == 0 && rep.value == 0,
              "B reads zeros where A wrote: %lld nonzero words", rep.value);
        CHECK(ask(b, W_FREE, 1, 0, 0).r == 0, "B free");
        for (int i = 0; i < 4; i++) {   /* reserve-sized chunks */
                CHECK(ask_alloc(a, 2, 2 * MiB, 0, 0).r == 0, "A 2 MiB");
                CHECK(ask(a, W_FILL, 2, 0, 404).r == 0, "A fill 2 MiB");
                CHECK(ask(a, W_FREE, 2, 0, 0).r == 0, "A free 2 MiB");
                CHECK(ask_alloc(b, 2, 2 * MiB, 0, 0).r == 0, "B 2 MiB");
                rep = ask(b, W_CHECK, 2, 0, 0);
                CHECK(rep.value == 0, "B 2 MiB zero: %lld", rep.value);
                CHECK(ask(b, W_FREE, 2, 0, 0).r == 0, "B free 2 MiB");
        }
        printf("zero on reuse: client B read only zeros\n");

        /* A SIGKILLed client's memory returns. */
        used0 = pool_used(me, 0);
        free0 = driver_free();
        CHECK(gpu_proc_spawn("victim", &c) == 0, "spawn victim");
        CHECK(ask_alloc(&c, 0, 2048 * MiB, 0, 0).r == 0, "victim alloc");
        CHECK(ask(&c, W_FILL, 0, 0, 505).r == 0, "victim fill");
        CHECK(pool_used(me, 0) - used0 == 2048 * MiB, "victim counted");
        kill(c.pid, SIGKILL);
        gpu_proc_wait(&c);
        for (int i = 0; i < 500 && (pool_used(me, 0) != used0 ||
                                    driver_free() + 16 * MiB < free0); i++)
                usleep(10000);
        used1 = pool_used(me, 0);
        free1 = driver_free();
        printf("SIGKILL: pool used %+lld MiB, driver free %+lld MiB vs "
               "before the victim\n", mib_diff(used1, used0),
               mib_diff(free1, free0));
        CHECK(used1 == used0, "victim's pool bytes returned");
        CHECK(free1 + 16 * MiB >= free0, "victim's VRAM returned");

        run_legacy_ipc(me, a);

        /* Every other GPU the daemon serves, however many. The worker
         * sees the GPUs in the daemon's order (same environment), so a
         * buffer of the daemon's device d is at its CUDA device d. */
        n = gmd_client_device_count(me);
        if (n < 2) {
                printf("other GPUs: one GPU here, section skipped\n");
                return;
        }
        for (unsigned dev = 1; dev < n; dev++) {
                int before = gpu_failures;

                rep = ask_alloc(a, 4, 64 * MiB, dev, 0);
                CHECK(rep.r == 0, "alloc on device %u: %s", dev, rep.msg);
                if (rep.r < 0)
                        continue;
                rep = ask(a, W_DEVICE, 4, 0, 0);
                CHECK(rep.value == (long long)dev, "pointer on device %u: "
                      "%lld", dev, rep.value);
                rep = ask(a, W_FILL, 4, 0, 707 + dev);
                CHECK(rep.r == 0, "fill device %u: %s", dev, rep.msg);
                rep = ask(a, W_CHECK, 4, 0, 707 + dev);
                CHECK(rep.r == 0 && rep.value == 0, "check device %u: %lld %s",
                      dev, rep.value, rep.msg);
                CHECK(ask(a, W_FREE, 4, 0, 0).r == 0, "free device %u", dev);
                printf("GPU %u of %u: a buffer on the daemon's device %u %s\n",
                       dev + 1, n, dev, gpu_failures > before ? "FAILED" :
                       "written and read by a kernel on that device");
        }
}

static void run_limit(void)
{
        static const char *const args[] = { "--vram-limit", "256M", NULL };
        gpu_daemon d;
        gpu_proc e;
        wreply rep;

        CHECK(gpu_daemon_start(args, &d) == 0, "start limited daemon");
        CHECK(gpu_proc_spawn("limited", &e) == 0, "spawn");
        CHECK(ask_alloc(&e, 0, 200 * MiB, 0, 0).r == 0, "200 MiB fits");
        rep = ask_alloc(&e, 1, 100 * MiB, 0, 0);
        printf("limit: 100 MiB more -> %d: %s\n", rep.r, rep.msg);
        CHECK(rep.r == GMD_ENOMEM && rep.msg[0], "over the limit: ENOMEM");
        rep = ask_alloc(&e, 1, 1024 * MiB, 0, 0);
        printf("limit: 1 GiB -> %d: %s\n", rep.r, rep.msg);
        CHECK(rep.r == GMD_ETOOLARGE && rep.msg[0], "larger than the pool");
        quit(&e);
        CHECK(gpu_daemon_stop(&d, stdout) == 0, "limited daemon stops cleanly");
}

int main(int argc, char **argv)
{
        const gmd_cuda_driver *cu;
        gmd_client *me = NULL;
        gpu_daemon d;
        gpu_proc a, b;
        int r;

        cu = gpu_test_begin(argc, argv, worker);
        if (!cu)
                return GPU_TEST_SKIP;
        gpu_say_device(cu, 0, "the daemon's device 0 for every section but "
                       "the last, which visits each other GPU");

        r = gpu_daemon_start(NULL, &d);
        CHECK(r == 0, "start gpu-memd: %s", strerror(-r));
        if (r < 0)
                return 1;
        r = gmd_connect(NULL, "gpu-test", &me);
        CHECK(r == 0, "connect: %s", gmd_last_error());
        if (r == 0) {
                CHECK(strcmp(gmd_client_backend(me), "cuda") == 0, "backend");
                CHECK(gpu_proc_spawn("A", &a) == 0, "spawn A");
                CHECK(gpu_proc_spawn("B", &b) == 0, "spawn B");
                driver_free();   /* this process's context, before figures */
                run_main_daemon(me, &a, &b);
                quit(&a);
                quit(&b);
                gmd_disconnect(me);
        }
        CHECK(gpu_daemon_stop(&d, stdout) == 0, "gpu-memd stops cleanly");
        run_limit();
        printf("%s: %d failure(s)\n", gpu_failures ? "FAIL" : "PASS", gpu_failures);
        return gpu_failures ? 1 : 0;
}
