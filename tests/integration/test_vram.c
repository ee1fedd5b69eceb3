/*
 * test_vram — VRAM held outside gpu-memd (daemon/core/vram.c), on the sim
 * backend with the real daemon.
 *
 * On a GPU, memory other processes hold, and freed buffers whose exported
 * fds a client keeps, are invisible to the pool: before this check an
 * allocation the pool said fits failed inside the driver with an internal
 * error (cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY). The sim backend's test
 * hook stands in for that memory: with GMD_SIM_VRAM_OTHERS naming a file,
 * the size written in it is VRAM "used by others" while the file exists
 * (daemon/backend/backend_sim.c). What must hold: an allocation the pool has
 * room for but the GPU has not is refused at once with GMD_ENOMEM and a
 * sentence naming what is held outside gpu-memd (also one that would wait);
 * what still fits beside it is served; status, gpu-memctl status and the
 * metrics page show the bytes, and status the processes holding them (the
 * hook's "PID SIZE" lines stand for NVML's figures); and once the outside use is gone the same
 * allocation fits again. tests/gpu/test_gpu_vram_outside.c is the same on
 * a GPU, with a real second process.
 *
 * VRAM a client's own process holds beyond its buffers (core/outside.h;
 * the hook's "PID SIZE" line for this process stands for the driver's
 * figure of it): charged to its user's vram_quota, refused in words,
 * shown per client, counted in the pool so what the pool says free is
 * there; [limits] outside_vram = disconnect ends its sessions; the charge
 * goes with the bytes.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "harness.h"
#include "pattern.h"

#define OTHERS_ENV "GMD_SIM_VRAM_OTHERS"
#define OUTSIDE "held outside gpu-memd"

typedef harness_fixture fixture;

/* The hook's file. Not in the fixture's temp dir: the daemon's
 * environment is set before harness_start_small_metrics makes that. */
static const char *others_path(const fixture *f)
{
        static char path[64];

        (void)f;
        snprintf(path, sizeof(path), "/tmp/gmd-vram-others-%d", (int)getpid());
        return path;
}

static int teardown(void **state)
{
        unlink(others_path(*state));
        return harness_teardown(state);
}

/* The small daemon (64 MiB of sim VRAM) with the hook armed and its
 * metrics on a Unix socket; the file not there yet. */
static void start(fixture *f, const char *extra_config)
{
        char *line;

        setenv(OTHERS_ENV, others_path(f), 1);
        harness_start_small_metrics(&f->h, extra_config);
        unsetenv(OTHERS_ENV);
        line = harness_wait_log(&f->h, OTHERS_ENV " is set", 2000);
        if (!line)
                fail_msg("the daemon did not take up " OTHERS_ENV "; log:\n%s",
                         harness_read_log(&f->h));
        free(line);
        f->client = harness_client(&f->h, "vram");
}

static char *ctl_status(fixture *f)
{
        const char *argv[] = { GMD_CTL_PATH, "status", NULL };
        char *out = NULL, *err = NULL;
        int status = harness_run(&f->h, NULL, argv, &out, &err, 5000);

        if (harness_exit_code(status) != 0)
                fail_msg("gpu-memctl status exited %d; stderr:\n%s",
                         harness_exit_code(status), err);
        free(err);
        return out;
}

static void expect_pool(fixture *f, uint64_t unaccounted, uint64_t device_free,
                        const char *when)
{
        gmd_pool_status p = harness_vram_pool(f->client, 0);

        if (p.unaccounted != unaccounted || p.device_free != device_free)
                fail_msg("%s: status says %llu bytes unaccounted and %llu free "
                         "on the GPU, want %llu and %llu", when,
                         (unsigned long long)p.unaccounted,
                         (unsigned long long)p.device_free,
                         (unsigned long long)unaccounted,
                         (unsigned long long)device_free);
}

/* An allocation that must be refused for memory held outside gpu-memd. */
static void expect_refused(fixture *f, uint64_t size, int64_t timeout_ms)
{
        uint64_t t0 = harness_now_ms();
        gmd_buffer *b = NULL;
        int r = gmd_alloc(f->client, size, 0, 0, timeout_ms, &b);
        const char *why = gmd_last_error();

        if (r != GMD_ENOMEM)
                fail_msg("alloc of %llu MiB (timeout %lld ms) = %d (%s), want "
                         "GMD_ENOMEM", (unsigned long long)(size / MiB),
                         (long long)timeout_ms, r, why);
        if (!strstr(why, OUTSIDE) || !strstr(why, "the pool has") ||
            !strstr(why, "gpu-memctl status"))
                fail_msg("the refusal does not say what is held outside "
                         "gpu-memd: \"%s\"", why);
        /* Refused, not queued: waiting would not make it fit. */
        if (harness_now_ms() - t0 > 1000)
                fail_msg("the refusal took %llu ms", (unsigned long long)
                         (harness_now_ms() - t0));
}

/* The attribution: the hook's "PID SIZE" lines stand for NVML's
 * per-process figures. This process (a client) holds 40 MiB, pid 999999
 * (no client) 8 MiB: status lists both, largest first, the first with
 * this process's client id; gpu-memctl shows them under the device. */
static void expect_processes(fixture *f)
{
        gmd_status *s = harness_status(f->client);
        uint64_t mine = 0;
        char *out;

        for (size_t i = 0; i < s->n_clients; i++)
                if (s->clients[i].pid == (uint32_t)getpid())
                        mine = s->clients[i].client_id;
        if (s->n_gpu_processes != 2 ||
            s->gpu_processes[0].pid != (uint32_t)getpid() ||
            s->gpu_processes[0].bytes != 40 * MiB ||
            s->gpu_processes[0].client_id != mine || mine == 0 ||
            s->gpu_processes[1].pid != 999999 ||
            s->gpu_processes[1].bytes != 8 * MiB ||
            s->gpu_processes[1].client_id != 0)
                fail_msg("status lists %zu processes (first pid %u, %llu bytes, "
                         "client %llu), want this process (client %llu) with "
                         "40 MiB, then pid 999999 with 8 MiB",
                         s->n_gpu_processes,
                         s->n_gpu_processes ? s->gpu_processes[0].pid : 0,
                         (unsigned long long)(s->n_gpu_processes ?
                                              s->gpu_processes[0].bytes : 0),
                         (unsigned long long)(s->n_gpu_processes ?
                                              s->gpu_processes[0].client_id : 0),
                         (unsigned long long)mine);
        gmd_status_free(s);
        out = ctl_status(f);
        if (!strstr(out, "pid 999999") || !strstr(out, "not a gpu-memd client") ||
            !strstr(out, "gpu-memd client "))
                fail_msg("gpu-memctl status does not list the processes:\n%s",
                         out);
        free(out);
}

/* 48 MiB outside a 64 MiB device: 32 MiB the pool has room for is
 * refused, with or without a deadline; 16 MiB fits beside it; status,
 * gpu-memctl and metrics show the 48 MiB; gone, the 32 MiB fits. */
static void test_outside_memory_refused_then_fits(void **state)
{
        fixture *f = *state;
        gmd_buffer *small = NULL, *big = NULL;
        char others[64], *out;

        start(f, NULL);
        expect_pool(f, 0, 64 * MiB, "before");
        snprintf(others, sizeof(others), "48M\n%d 40M\n999999 8M\n",
                 (int)getpid());
        harness_write_file(others_path(f), others);

        expect_refused(f, 32 * MiB, 0);
        expect_refused(f, 32 * MiB, 2000);
        if (harness_vram_used(f->client, 0) != 0)
                fail_msg("a refused allocation left pool bytes in use");
        OK(gmd_alloc(f->client, 16 * MiB, 0, 0, 0, &small));
        expect_pool(f, 48 * MiB, 0, "outside use, 16 MiB allocated");
        expect_processes(f);

        out = ctl_status(f);
        if (!strstr(out, "gpu0 VRAM " OUTSIDE ": 48 MiB"))
                fail_msg("gpu-memctl status does not show the 48 MiB:\n%s", out);
        free(out);
        assert_true(harness_metric(&f->h, "gpumemd_vram_unaccounted_bytes"
                                   "{device=\"0\"}") == (double)(48 * MiB));
        assert_true(harness_metric(&f->h, "gpumemd_vram_refused_total") == 2.0);
        if (harness_log_count(&f->h, OUTSIDE) < 2)
                fail_msg("the refusals are not logged; log:\n%s",
                         harness_read_log(&f->h));

        if (unlink(others_path(f)) < 0)
                fail_msg("cannot remove %s", others_path(f));
        OK(gmd_alloc(f->client, 32 * MiB, 0, 0, 0, &big));
        expect_pool(f, 0, 16 * MiB, "outside use gone");
        assert_true(harness_metric(&f->h, "gpumemd_vram_unaccounted_bytes"
                                   "{device=\"0\"}") == 0.0);
        OK(gmd_free(f->client, big));
        OK(gmd_free(f->client, small));
        harness_stop(&f->h);
}

/* Outside memory that nobody allocates through gpu-memd is noticed
 * without an allocation: the daemon reads the driver every few seconds
 * and logs a warning when what is held outside grew (by a GiB, or a
 * sixteenth of a small device). */
static void test_outside_memory_logged(void **state)
{
        fixture *f = *state;
        char *line;

        start(f, NULL);
        harness_write_file(others_path(f), "40M\n");
        line = harness_wait_log(&f->h, OUTSIDE, 8000);
        if (!line)
                fail_msg("no warning about memory " OUTSIDE "; log:\n%s",
                         harness_read_log(&f->h));
        if (!strstr(line, "40 MiB"))
                fail_msg("the warning does not say how much: %s", line);
        free(line);
        expect_pool(f, 40 * MiB, 24 * MiB, "40 MiB outside");
        expect_refused(f, 32 * MiB, 0);
        harness_stop(&f->h);
}

/* A swap-in is an allocation too: a paged-out buffer whose VRAM the pool
 * has room for but the GPU has not (outside use appeared meanwhile) is
 * refused at acquire with the same sentence, stays on host memory with
 * its bytes, and comes back once the outside use is gone. */
static void test_swapin_refused_then_served(void **state)
{
        fixture *f = *state;
        gmd_buffer *b;
        int r;

        /* No VRAM kept from the swap-out: it would serve the swap-in
         * without asking the GPU for more (and does, kept on). */
        start(f, "[swap]\nkeep_vram = no\n");
        b = harness_released_buffer(f->client, 32 * MiB, 77);
        harness_page_out(f->client, b);
        harness_write_file(others_path(f), "48M\n");
        r = gmd_acquire(f->client, b, 2000);
        if (r != GMD_ENOMEM || !strstr(gmd_last_error(), OUTSIDE))
                fail_msg("acquire of a paged-out buffer beside 48 MiB outside = "
                         "%d (%s), want GMD_ENOMEM naming what is " OUTSIDE, r,
                         gmd_last_error());
        if (gmd_buffer_tier(b) != GMD_TIER_HOST)
                fail_msg("the refused buffer left host memory");
        if (harness_vram_used(f->client, 0) != 0)
                fail_msg("the refused swap-in left pool bytes in use");
        if (unlink(others_path(f)) < 0)
                fail_msg("cannot remove %s", others_path(f));
        OK(gmd_acquire(f->client, b, 5000));
        if (gmd_buffer_tier(b) != GMD_TIER_VRAM)
                fail_msg("acquired, but not back in VRAM");
        pattern_check(b, 77, "after the refused swap-in");
        OK(gmd_free(f->client, b));
        harness_stop(&f->h);
}

/* Mappings of this process onto the sim's VRAM memfds. */
static int vram_mappings(void)
{
        FILE *maps = fopen("/proc/self/maps", "re");
        char line[512];
        int n = 0;

        if (!maps)
                fail_msg("cannot read /proc/self/maps");
        while (fgets(line, sizeof(line), maps))
                if (strstr(line, "gmd-vram"))
                        n++;
        fclose(maps);
        return n;
}

/* The admin's disconnect: gpu-memctl drain PID revokes every buffer of
 * the process's connections and closes them; libgpumem unmaps what it
 * held, its cache of idle mappings (buffers the application freed)
 * included, so none of it stays held outside gpu-memd. Root only (drain
 * is an admin verb; CI runs as root). */
static void test_drain_releases_cached_mappings(void **state)
{
        fixture *f = *state;
        const char *argv[] = { GMD_CTL_PATH, "drain", NULL, NULL };
        gmd_buffer *b = NULL;
        char pid[16], *out = NULL, *err = NULL;
        uint64_t t0;
        int status;

        if (geteuid() != 0)
                skip();
        start(f, NULL);
        setenv("GPU_MEMD_CACHE", "1", 1);
        f->other = harness_client(&f->h, "cached");
        setenv("GPU_MEMD_CACHE", "0", 1);
        OK(gmd_alloc(f->other, 8 * MiB, 0, 0, 0, &b));
        OK(gmd_free(f->other, b));
        if (vram_mappings() == 0)
                fail_msg("the freed buffer is not parked in the cache");

        snprintf(pid, sizeof(pid), "%d", (int)getpid());
        argv[2] = pid;
        status = harness_run(&f->h, NULL, argv, &out, &err, 5000);
        if (harness_exit_code(status) != 0)
                fail_msg("gpu-memctl drain exited %d: %s", harness_exit_code(status),
                         err);
        free(out);
        free(err);
        t0 = harness_now_ms();
        while (vram_mappings() > 0 && harness_now_ms() - t0 < 5000)
                harness_sleep_ms(20);
        if (vram_mappings() != 0)
                fail_msg("%d mappings of freed buffers are still there 5 s after "
                         "the drain", vram_mappings());
        harness_stop(&f->h);
}

/* A connection that ends without revokes (the daemon stopped, or died):
 * the daemon's side of every buffer is gone, so the mappings parked in
 * libgpumem's cache would hold VRAM nobody can use, outside any pool,
 * until the program exits. The library's I/O thread unmaps them as the
 * connection ends. */
static void test_daemon_gone_releases_cached_mappings(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;
        uint64_t t0;

        start(f, NULL);
        setenv("GPU_MEMD_CACHE", "1", 1);
        f->other = harness_client(&f->h, "cached");
        setenv("GPU_MEMD_CACHE", "0", 1);
        OK(gmd_alloc(f->other, 8 * MiB, 0, 0, 0, &b));
        OK(gmd_free(f->other, b));
        if (vram_mappings() == 0)
                fail_msg("the freed buffer is not parked in the cache");
        harness_stop(&f->h);
        t0 = harness_now_ms();
        while (vram_mappings() > 0 && harness_now_ms() - t0 < 5000)
                harness_sleep_ms(20);
        if (vram_mappings() != 0)
                fail_msg("%d mappings of freed buffers are still there 5 s after "
                         "the daemon stopped", vram_mappings());
}

/* The config of the outside tests: a CUDA context's allowance of 4 MiB,
 * [limits] outside_vram as `policy`, and a vram_quota for this uid
 * (`quota` NULL: none). */
static const char *outside_config(const char *policy, const char *quota)
{
        static char text[256];

        snprintf(text, sizeof(text), "[limits]\noutside_vram = %s\n"
                 "outside_vram_allowance = 4M\n%s%u%s%s%s", policy,
                 quota ? "[user " : "", quota ? (unsigned)getuid() : 0,
                 quota ? "]\nvram_quota = " : "", quota ? quota : "",
                 quota ? "\n" : "");
        if (!quota)
                snprintf(text, sizeof(text), "[limits]\noutside_vram = %s\n"
                         "outside_vram_allowance = 4M\n", policy);
        return text;
}

/* This process holds `driver` per the hook (its buffers included), and
 * `outside` of the GPU is used beyond what gpu-memd created. */
static void hold(fixture *f, const char *outside, const char *driver)
{
        char text[96];

        snprintf(text, sizeof(text), "%s\n%d %s 0\n", outside, (int)getpid(),
                 driver);
        harness_write_file(others_path(f), text);
}

/* This process's client as status shows it after a refresh. */
static gmd_client_status my_client(fixture *f)
{
        gmd_status *s = harness_status(f->client);
        gmd_client_status c = { 0 };
        uint64_t outside = 0;

        for (size_t i = 0; i < s->n_clients; i++)
                if (s->clients[i].pid == (uint32_t)getpid()) {
                        outside += s->clients[i].outside_bytes;
                        if (!c.client_id)
                                c = s->clients[i];
                }
        gmd_status_free(s);
        c.outside_bytes = outside;
        return c;
}

/* A user with a vram_quota of 32 MiB whose process holds 40 MiB beyond
 * its 8 MiB buffer (48 MiB in the driver's figure: 4 of them its
 * context's allowance, so 36 MiB charged) is refused its next allocation
 * with GMD_EQUOTA and the sentence; status and gpu-memctl show the
 * bytes; the pool counts them; once they are gone it allocates again. */
static void test_outside_charged_to_quota(void **state)
{
        fixture *f = *state;
        gmd_buffer *mine = NULL, *b = NULL;
        gmd_pool_status p;
        char *out;
        int r;

        start(f, outside_config("charge", "32M"));
        OK(gmd_alloc(f->client, 8 * MiB, 0, 0, 0, &mine));
        hold(f, "36M", "48M");
        if (my_client(f).outside_bytes != 36 * MiB)
                fail_msg("status shows %llu bytes outside for this process, "
                         "want 36 MiB", (unsigned long long)
                         my_client(f).outside_bytes);
        p = harness_vram_pool(f->client, 0);
        if (p.used != 44 * MiB || p.free != 20 * MiB)
                fail_msg("the pool shows %llu used, %llu free; want 44 MiB "
                         "(8 of buffers, 36 charged) and 20 MiB",
                         (unsigned long long)p.used, (unsigned long long)p.free);
        r = gmd_alloc(f->client, 2 * MiB, 0, 0, 0, &b);
        if (r != GMD_EQUOTA || !strstr(gmd_last_error(), "36 MiB of VRAM "
                                       "outside gpu-memd through fds its "
                                       "processes kept") ||
            !strstr(gmd_last_error(), "close those fds"))
                fail_msg("alloc over quota by memory held outside = %d (%s), "
                         "want GMD_EQUOTA saying so", r, gmd_last_error());
        out = ctl_status(f);
        if (!strstr(out, "OUTSIDE") || !strstr(out, "holds 36 MiB of VRAM "
                                               "outside gpu-memd"))
                fail_msg("gpu-memctl status does not show the bytes:\n%s", out);
        free(out);
        assert_true(harness_metric(&f->h, "gpumemd_vram_outside_charged_bytes"
                                   "{device=\"0\"}") == (double)(36 * MiB));

        /* Gone: the next refresh (status here) drops the charge. */
        if (unlink(others_path(f)) < 0)
                fail_msg("cannot remove %s", others_path(f));
        if (my_client(f).outside_bytes != 0)
                fail_msg("the charge stayed after the bytes went");
        OK(gmd_alloc(f->client, 16 * MiB, 0, 0, 0, &b));
        OK(gmd_free(f->client, b));
        OK(gmd_free(f->client, mine));
        harness_stop(&f->h);
}

/* No quota: the charge still keeps the pool from offering the room, so
 * what the pool says free is there (another user's allocation of it
 * fits beside the memory held outside). */
static void test_outside_pool_free_fits(void **state)
{
        fixture *f = *state;
        gmd_pool_status p;
        gmd_buffer *b = NULL;

        start(f, outside_config("charge", NULL));
        hold(f, "40M", "44M");
        p = harness_vram_pool(f->client, 0);
        if (p.free != 24 * MiB || p.used != 40 * MiB)
                fail_msg("the pool shows %llu free, %llu used, want 24 MiB "
                         "and 40 MiB", (unsigned long long)p.free,
                         (unsigned long long)p.used);
        OK(gmd_alloc(f->client, p.free, 0, 0, 0, &b));
        OK(gmd_free(f->client, b));
        harness_stop(&f->h);
}

/* outside_vram = ignore: the bytes are shown, nothing is charged. */
static void test_outside_ignored(void **state)
{
        fixture *f = *state;
        gmd_pool_status p;
        gmd_buffer *b = NULL;

        start(f, outside_config("ignore", "32M"));
        hold(f, "36M", "40M");
        if (my_client(f).outside_bytes != 36 * MiB)
                fail_msg("ignore: the bytes are not shown");
        p = harness_vram_pool(f->client, 0);
        if (p.used != 0)
                fail_msg("ignore: the pool counts %llu bytes",
                         (unsigned long long)p.used);
        OK(gmd_alloc(f->client, 16 * MiB, 0, 0, 0, &b));
        OK(gmd_free(f->client, b));
        harness_stop(&f->h);
}

/* outside_vram = disconnect: a process whose user its outside bytes put
 * over quota has its sessions ended, with a logged reason. */
static void test_outside_disconnects(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;
        gmd_status *s = NULL;
        uint64_t t0;
        int r;

        start(f, outside_config("disconnect", "32M"));
        hold(f, "36M", "40M");
        /* The status that refreshes is answered; the close follows. */
        (void)gmd_query_status(f->client, GMD_STATUS_CLIENTS, 0, &s);
        gmd_status_free(s);
        t0 = harness_now_ms();
        do {
                r = gmd_alloc(f->client, 2 * MiB, 0, 0, 0, &b);
                if (r == 0)
                        OK(gmd_free(f->client, b));
                harness_sleep_ms(20);
        } while (r == 0 && harness_now_ms() - t0 < 5000);
        if (r == 0)
                fail_msg("the client was not disconnected");
        {
                char *line = harness_wait_log(&f->h, "disconnected: holds 36 MiB "
                                              "of VRAM outside gpu-memd", 2000);

                if (!line)
                        fail_msg("the disconnect is not logged; log:\n%s",
                                 harness_read_log(&f->h));
                free(line);
        }
        assert_true(harness_metric(&f->h, "gpumemd_outside_disconnects_total")
                    >= 1.0);
        harness_stop(&f->h);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(
                        test_outside_memory_refused_then_fits, harness_setup,
                        teardown),
                cmocka_unit_test_setup_teardown(
                        test_outside_memory_logged, harness_setup, teardown),
                cmocka_unit_test_setup_teardown(
                        test_swapin_refused_then_served, harness_setup, teardown),
                cmocka_unit_test_setup_teardown(
                        test_drain_releases_cached_mappings, harness_setup,
                        teardown),
                cmocka_unit_test_setup_teardown(
                        test_daemon_gone_releases_cached_mappings,
                        harness_setup, teardown),
                cmocka_unit_test_setup_teardown(
                        test_outside_charged_to_quota, harness_setup, teardown),
                cmocka_unit_test_setup_teardown(
                        test_outside_pool_free_fits, harness_setup, teardown),
                cmocka_unit_test_setup_teardown(
                        test_outside_ignored, harness_setup, teardown),
                cmocka_unit_test_setup_teardown(
                        test_outside_disconnects, harness_setup, teardown),
        };

        setenv("GPU_MEMD_CACHE", "0", 1);
        return cmocka_run_group_tests(tests, NULL, NULL);
}
