/*
 * test_shim — libgpumem_torch.so against the real gpu-memd (sim backend)
 * and a fake libcudart (fake_cudart.c), where there is no GPU. This program
 * links the shim ahead of the fake, so its cudaMalloc, cudaFree and
 * cudaMemGetInfo are the shim's, as PyTorch's are when the shim is
 * preloaded; the fake plays the rest of the runtime (current device,
 * synchronize) and counts what reaches it.
 *
 * One daemon (two sim devices of 64 MiB) serves the whole program: the
 * shim keeps one connection per process, as it does under PyTorch. Room
 * another process holds comes from gmd_test_client (`hold`): the shim's
 * repeat fails at once on room only this process holds, and lends what
 * this process holds while it waits for another's (`yield ... plain`).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdbool.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "gpumem_torch.h"
#include "harness.h"

int cudaMalloc(void **ptr, size_t size);
int cudaFree(void *ptr);
int cudaMemGetInfo(size_t *ret_free, size_t *ret_total);
int cudaDeviceEnablePeerAccess(int peer, unsigned int flags);
int fake_cudart_count(int which);
void *fake_cudart_last_free(void);
void fake_cudart_set_device(int device);

#define CUDA_ERROR_MEMORY_ALLOC 2
enum { SYNCS = 0, FREES = 1, SET_DEVICES = 2, MALLOCS = 3, PEER_ENABLES = 4 };

static harness h;
static gmd_client *probe;     /* the test's own view of the daemon */

static uint64_t stat(int which)
{
        uint64_t v[GMD_TORCH_N_STATS];

        assert_int_equal(gmd_torch_stats(v, GMD_TORCH_N_STATS), GMD_TORCH_N_STATS);
        return v[which];
}

/* Bytes the daemon counts for the shim's client (named "shim-test"). */
static uint64_t shim_client_bytes(void)
{
        gmd_status *st = harness_status(probe);
        uint64_t bytes = UINT64_MAX;

        for (size_t i = 0; i < st->n_clients; i++)
                if (strcmp(st->clients[i].name, "shim-test") == 0)
                        bytes = st->clients[i].bytes;
        gmd_status_free(st);
        return bytes;
}

/* The shim's free returns the memory with a RETURN message, which has no
 * reply: the probe's status, on another connection, may be read first.
 * Poll until the daemon counts `want` (2 s at most); the last value. */
static uint64_t shim_client_bytes_become(uint64_t want)
{
        uint64_t bytes = shim_client_bytes();

        for (int i = 0; i < 200 && bytes != want; i++) {
                usleep(10 * 1000);
                bytes = shim_client_bytes();
        }
        return bytes;
}

static int group_setup(void **state)
{
        harness_init(&h, "[daemon]\nbackend = sim\n"
                         "[sim]\ndevices = 2\nvram = 64M\ngranularity = 2M\n");
        harness_start(&h, NULL);
        setenv("GPU_MEMD_SOCKET", h.socket_path, 1);
        setenv("GPU_MEMD_TORCH_NAME", "shim-test", 1);
        setenv("GPU_MEMD_TORCH_QUIET", "1", 1);
        setenv("GPU_MEMD_TORCH_CUDART", FAKE_CUDART_PATH, 1);
        unsetenv("GPU_MEMD_TORCH_TIMEOUT_MS");
        probe = harness_client(&h, "probe");
        return 0;
}

static int group_teardown(void **state)
{
        gmd_disconnect(probe);
        harness_stop(&h);
        harness_cleanup(&h);
        return 0;
}

static void test_alloc_free(void **state)
{
        int syncs = fake_cudart_count(SYNCS);
        void *p = NULL;

        if (cudaMalloc(&p, 5 * MiB) != 0)
                fail_msg("cudaMalloc: %s", gmd_torch_last_error());
        assert_non_null(p);
        memset(p, 0xab, 5 * MiB);               /* sim: host memory */
        /* Rounded to the 2 MiB granularity, as PyTorch's segments are. */
        assert_int_equal(shim_client_bytes(), 6 * MiB);
        assert_int_equal(stat(GMD_TORCH_BYTES_HELD), 6 * MiB);
        assert_int_equal(stat(GMD_TORCH_SEGMENTS_HELD), 1);
        assert_int_equal(cudaFree(p), 0);
        /* Stream-ordered: the device was synchronized before the free. */
        assert_int_equal(fake_cudart_count(SYNCS), syncs + 1);
        /* Given back, not parked in libgpumem's cache. */
        assert_int_equal(shim_client_bytes_become(0), 0);
        assert_int_equal(stat(GMD_TORCH_BYTES_HELD), 0);
        assert_int_equal(fake_cudart_count(MALLOCS), 0);
}

static void test_zero_null_and_foreign(void **state)
{
        int frees = fake_cudart_count(FREES);
        uint64_t foreign = stat(GMD_TORCH_FOREIGN_FREES);
        void *p = (void *)1;

        assert_int_equal(cudaMalloc(&p, 0), 0);
        assert_null(p);
        /* cudaFree(NULL) initializes a context: the runtime's to answer. */
        assert_int_equal(cudaFree(NULL), 0);
        assert_int_equal(fake_cudart_count(FREES), frees + 1);
        assert_int_equal(stat(GMD_TORCH_FOREIGN_FREES), foreign);
        /* A pointer the shim never handed out goes to libcudart. */
        assert_int_equal(cudaFree((void *)0x12345000), 0);
        assert_ptr_equal(fake_cudart_last_free(), (void *)0x12345000);
        assert_int_equal(stat(GMD_TORCH_FOREIGN_FREES), foreign + 1);
}

static void test_mem_get_info_is_the_pool(void **state)
{
        size_t f = 0, t = 0;
        void *p;

        assert_int_equal(cudaMalloc(&p, 8 * MiB), 0);
        assert_int_equal(cudaMemGetInfo(&f, &t), 0);
        assert_int_equal(t, 64 * MiB);
        assert_int_equal(f, 56 * MiB);
        assert_int_equal(cudaFree(p), 0);
}

static void test_device_n(void **state)
{
        gmd_status *st;
        int sets, found = 0;
        void *p;

        fake_cudart_set_device(1);
        assert_int_equal(cudaMalloc(&p, 4 * MiB), 0);
        fake_cudart_set_device(0);
        OK(gmd_query_status(probe, GMD_STATUS_BUFFERS, 0, &st));
        for (size_t i = 0; i < st->n_buffers; i++)
                if (st->buffers[i].size == 4 * MiB && st->buffers[i].device == 1)
                        found = 1;
        gmd_status_free(st);
        assert_true(found);
        /* Freed from device 0: synchronize device 1, then switch back. */
        sets = fake_cudart_count(SET_DEVICES);
        assert_int_equal(cudaFree(p), 0);
        assert_int_equal(fake_cudart_count(SET_DEVICES), sets + 2);
}

/* cudaDeviceEnablePeerAccess reaches the real runtime (its answer is the
 * call's, 704 the second time, as CUDA's) and gives the daemon's buffers
 * the access too: on sim that only checks the pair, so a pair the daemon
 * lacks is the shim's error, never the call's. */
static void test_peer_access(void **state)
{
        int calls = fake_cudart_count(PEER_ENABLES);
        void *p;

        fake_cudart_set_device(1);
        assert_int_equal(cudaMalloc(&p, 4 * MiB), 0);
        fake_cudart_set_device(0);
        assert_int_equal(cudaDeviceEnablePeerAccess(1, 0), 0);
        assert_int_equal(fake_cudart_count(PEER_ENABLES), calls + 1);
        assert_int_equal(cudaDeviceEnablePeerAccess(1, 0), 704);
        assert_int_equal(cudaDeviceEnablePeerAccess(5, 0), 0);
        assert_non_null(strstr(gmd_torch_last_error(), "no CUDA device 5"));
        assert_int_equal(cudaFree(p), 0);
}

/* The current device is the process's CUDA ordinal: under
 * CUDA_VISIBLE_DEVICES=1 (as Slurm or torchrun set it) its device 0 is the
 * daemon's device 1, and that is where the memory goes; cudaMemGetInfo is
 * that device's pool, cudaFree synchronizes ordinal 0. A GPU the daemon
 * does not have fails in words. In children, whose shim starts afresh. */
static int child_visible(const char *visible)
{
        gmd_status *st = NULL;
        gmd_client *own = NULL;
        size_t f = 0, t = 0;
        int found = 0;
        void *p;

        setenv("CUDA_VISIBLE_DEVICES", visible, 1);
        fake_cudart_set_device(0);
        if (strcmp(visible, "5") == 0) {
                if (cudaMalloc(&p, 6 * MiB) != CUDA_ERROR_MEMORY_ALLOC)
                        return 1;
                return strstr(gmd_torch_last_error(), "no CUDA device 0") ? 0 : 2;
        }
        if (cudaMalloc(&p, 6 * MiB) != 0 || cudaMemGetInfo(&f, &t) != 0)
                return 3;
        if (gmd_connect(NULL, "child-probe", &own) < 0 ||
            gmd_query_status(own, GMD_STATUS_BUFFERS, 0, &st) < 0)
                return 4;
        for (size_t i = 0; i < st->n_buffers; i++)
                if (st->buffers[i].size == 6 * MiB)
                        found = st->buffers[i].device == 1 ? 1 : -1;
        for (size_t i = 0; i < st->n_pools; i++)
                if (st->pools[i].device == 1 && st->pools[i].tier == GMD_TIER_VRAM &&
                    st->pools[i].free != f)
                        found = -2;
        gmd_status_free(st);
        gmd_disconnect(own);
        if (found != 1)
                return 5;
        return cudaFree(p) == 0 ? 0 : 6;
}

static void test_visible_devices(void **state)
{
        const char *cases[] = { "1", "GPU-5140dd00-0000-4000-8000-000000000001",
                                "5" };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                pid_t pid = fork();
                int status;

                assert_true(pid >= 0);
                if (pid == 0)
                        _exit(child_visible(cases[i]));
                assert_int_equal(waitpid(pid, &status, 0), pid);
                if (harness_exit_code(status) != 0)
                        fail_msg("CUDA_VISIBLE_DEVICES=%s: child exit %d",
                                 cases[i], harness_exit_code(status));
        }
}

/* Another process holding `size` of device 0 (gmd_test_client hold): a
 * hog this process cannot free, which the shim's repeat may wait for. */
static harness_proc other_hold(const char *size)
{
        const char *args[] = { "hold", size, NULL };
        harness_proc p = harness_spawn_client(&h, args);
        char *line = harness_read_line(&p, "ready", 5000);

        if (!line)
                fail_msg("hold %s did not get ready", size);
        free(line);
        return p;
}

/* Has the daemon let go of every connection of process `pid`? */
static bool daemon_forgot(pid_t pid)
{
        gmd_status *st = NULL;
        bool gone = true;

        if (gmd_query_status(probe, GMD_STATUS_CLIENTS, 0, &st) < 0)
                return false;
        for (size_t i = 0; i < st->n_clients; i++)
                if (st->clients[i].pid == (uint32_t)pid)
                        gone = false;
        gmd_status_free(st);
        return gone;
}

/* Kill it and wait until the daemon has freed what it held: the daemon
 * hears of the exit on its own time, and a test after this one that
 * needs the pool would race it (test_repeat_lends's first cudaMalloc
 * failed so under ctest -j2). */
static void other_stop(harness_proc *p)
{
        uint64_t deadline = harness_now_ms() + 5000;

        kill(p->pid, SIGKILL);
        harness_wait_proc(p, 5000);
        close(p->out_fd);
        p->out_fd = -1;
        while (!daemon_forgot(p->pid) && harness_now_ms() < deadline)
                harness_sleep_ms(5);
}

/* What PyTorch's allocator does when cudaMalloc fails: free its cache and
 * ask again for the same size. The first request does not wait; the
 * repeat waits until the deadline, then fails with the daemon's words.
 * The pool is held by another process: waiting could help. */
static void test_deadline(void **state)
{
        harness_proc hog;
        uint64_t t0, first_ms, repeat_ms;
        void *p = NULL;

        hog = other_hold("48M");
        assert_int_equal(gmd_torch_set_timeout(400), 0);
        t0 = harness_now_ms();
        assert_int_equal(cudaMalloc(&p, 32 * MiB), CUDA_ERROR_MEMORY_ALLOC);
        first_ms = harness_now_ms() - t0;
        t0 = harness_now_ms();
        assert_int_equal(cudaMalloc(&p, 32 * MiB), CUDA_ERROR_MEMORY_ALLOC);
        repeat_ms = harness_now_ms() - t0;
        assert_true(first_ms < 200);
        assert_in_range(repeat_ms, 380, 3000);
        /* The repeat waits what is left of the deadline the first one set. */
        assert_non_null(strstr(gmd_torch_last_error(), " ms for 32 MiB on device 0 VRAM"));
        assert_int_equal(stat(GMD_TORCH_BYTES_HELD), 0);
        /* Too large for the pool: at once, the first time. */
        t0 = harness_now_ms();
        assert_int_equal(cudaMalloc(&p, 128 * MiB), CUDA_ERROR_MEMORY_ALLOC);
        assert_true(harness_now_ms() - t0 < 200);
        assert_non_null(strstr(gmd_torch_last_error(), "larger than"));
        assert_int_equal(gmd_torch_set_timeout(-2), -EINVAL);
        other_stop(&hog);
        assert_int_equal(gmd_torch_set_timeout(-1), 0);
}

/* The other process frees (SIGUSR1 to `hold`) 300 ms later. */
static void *free_later(void *arg)
{
        harness_sleep_ms(300);
        kill(*(pid_t *)arg, SIGUSR1);
        return NULL;
}

static void test_repeat_waits_for_room(void **state)
{
        uint64_t waits = stat(GMD_TORCH_WAITS), t0;
        harness_proc hog;
        pthread_t t;
        void *p = NULL;

        hog = other_hold("48M");
        assert_int_equal(pthread_create(&t, NULL, free_later, &hog.pid), 0);
        t0 = harness_now_ms();
        assert_int_equal(cudaMalloc(&p, 32 * MiB), CUDA_ERROR_MEMORY_ALLOC);
        if (cudaMalloc(&p, 32 * MiB) != 0)
                fail_msg("repeat: %s", gmd_torch_last_error());
        assert_true(harness_now_ms() - t0 >= 250);
        pthread_join(t, NULL);
        assert_int_equal(stat(GMD_TORCH_WAITS), waits + 1);
        assert_int_equal(cudaFree(p), 0);
        other_stop(&hog);
}

/* Every byte in use is this process's own (its gpumem buffers, on another
 * connection): PyTorch's repeat, made under its allocator's mutex, would
 * wait for ever (the default timeout) for room no thread of it can free.
 * It fails at once, with the daemon's sentence. */
static void test_repeat_fails_on_own_memory(void **state)
{
        gmd_buffer *hog;
        uint64_t t0, repeat_ms;
        void *p = NULL;

        OK(gmd_alloc(probe, 48 * MiB, 0, 0, GMD_NO_WAIT, &hog));
        assert_int_equal(gmd_torch_set_timeout(-1), 0);
        assert_int_equal(cudaMalloc(&p, 32 * MiB), CUDA_ERROR_MEMORY_ALLOC);
        t0 = harness_now_ms();
        assert_int_equal(cudaMalloc(&p, 32 * MiB), CUDA_ERROR_MEMORY_ALLOC);
        repeat_ms = harness_now_ms() - t0;
        if (!strstr(gmd_torch_last_error(), "can only come from memory this "
                    "process holds itself") ||
            !strstr(gmd_torch_last_error(), "waiting cannot help"))
                fail_msg("repeat: '%s'", gmd_torch_last_error());
        assert_true(repeat_ms < 1000);
        assert_int_equal(stat(GMD_TORCH_BYTES_HELD), 0);
        OK(gmd_free(probe, hog));
        gmd_trim_cache(probe);
}

/* Two processes each mid-step: this one holds 40 MiB of PyTorch's
 * segments and repeats a 24 MiB request; the other holds 24 and waits
 * plainly for 40. The repeat synchronizes the devices and lends what this
 * process holds (GMD_ALLOC_YIELD): the other is served from this
 * process's segment, which is back, bytes intact, before the repeat
 * returns. Without it both would wait for each other. */
static void test_repeat_lends(void **state)
{
        const char *args[] = { "yield", "24M", "40M", "5000", "plain", NULL };
        uint64_t deadline = harness_now_ms() + 5000;
        int syncs;
        void *seg = NULL, *p = NULL;
        harness_proc other;
        char *line;

        /* The tests before gave memory back on the daemon's time (a cache
         * trimmed, a process killed): this one needs the whole pool. */
        while (harness_vram_pool(probe, 0).used && harness_now_ms() < deadline)
                harness_sleep_ms(5);
        fake_cudart_set_device(0);
        assert_int_equal(gmd_torch_set_timeout(10000), 0);
        assert_int_equal(cudaMalloc(&seg, 40 * MiB), 0);
        memset(seg, 0x5a, 40 * MiB);            /* sim: host memory */
        other = harness_spawn_client(&h, args);
        line = harness_read_line(&other, "ready", 5000);
        assert_non_null(line);
        free(line);
        harness_sleep_ms(100);                  /* its wait has begun */
        syncs = fake_cudart_count(SYNCS);
        assert_int_equal(cudaMalloc(&p, 24 * MiB), CUDA_ERROR_MEMORY_ALLOC);
        if (cudaMalloc(&p, 24 * MiB) != 0)
                fail_msg("repeat: %s", gmd_torch_last_error());
        assert_true(fake_cudart_count(SYNCS) > syncs);
        for (size_t i = 0; i < 40 * MiB; i += 4096)
                if (((unsigned char *)seg)[i] != 0x5a)
                        fail_msg("byte %zu of the lent segment changed", i);
        line = harness_read_line(&other, "rc 0", 5000);
        if (!line)
                fail_msg("the other process was not served; daemon log:\n%s",
                         harness_read_log(&h));
        free(line);
        assert_true(harness_log_count(&h, "lends its") >= 1);
        assert_int_equal(cudaFree(p), 0);
        assert_int_equal(cudaFree(seg), 0);
        harness_wait_proc(&other, 5000);
        close(other.out_fd);
        assert_int_equal(gmd_torch_set_timeout(-1), 0);
}

/* Every thread allocates through the one connection. */
static void *alloc_in_thread(void *arg)
{
        void *p = NULL;

        if (cudaMalloc(&p, 2 * MiB) == 0)
                *(void **)arg = p;
        return NULL;
}

static void test_threads(void **state)
{
        uint64_t threads = stat(GMD_TORCH_THREADS);
        void *got[4] = { 0 };
        pthread_t t[4];

        for (int i = 0; i < 4; i++)
                assert_int_equal(pthread_create(&t[i], NULL, alloc_in_thread, &got[i]), 0);
        for (int i = 0; i < 4; i++)
                pthread_join(t[i], NULL);
        assert_int_equal(stat(GMD_TORCH_THREADS), threads + 4);
        assert_int_equal(shim_client_bytes_become(8 * MiB), 8 * MiB);
        for (int i = 0; i < 4; i++) {
                assert_non_null(got[i]);
                assert_int_equal(cudaFree(got[i]), 0);
        }
}

/* A forked child forgets the parent's connection and makes its own; with
 * no daemon there it says so. */
static void test_fork_and_no_daemon(void **state)
{
        pid_t pid;
        int status;

        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                void *p;

                setenv("GPU_MEMD_SOCKET", "/nonexistent/gpu-memd.sock", 1);
                if (cudaMalloc(&p, 2 * MiB) != CUDA_ERROR_MEMORY_ALLOC)
                        _exit(1);
                if (!strstr(gmd_torch_last_error(), "cannot connect to gpu-memd "
                            "at /nonexistent/gpu-memd.sock") ||
                    !strstr(gmd_torch_last_error(), "is gpu-memd running?"))
                        _exit(2);
                _exit(0);
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_int_equal(harness_exit_code(status), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_alloc_free),
                cmocka_unit_test(test_zero_null_and_foreign),
                cmocka_unit_test(test_mem_get_info_is_the_pool),
                cmocka_unit_test(test_device_n),
                cmocka_unit_test(test_peer_access),
                cmocka_unit_test(test_visible_devices),
                cmocka_unit_test(test_deadline),
                cmocka_unit_test(test_repeat_waits_for_room),
                cmocka_unit_test(test_repeat_fails_on_own_memory),
                cmocka_unit_test(test_repeat_lends),
                cmocka_unit_test(test_threads),
                cmocka_unit_test(test_fork_and_no_daemon),
        };

        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
