/*
 * test_identity — devices by identity with the real gpu-memd (sim, two
 * devices): a client process whose CUDA_VISIBLE_DEVICES shows it only the
 * daemon's second device calls it device 0, finds it with
 * gmd_device_from_cuda and allocates there — the buffer is on the daemon's
 * device 1, in status and in gpu-memctl. gpu-memctl status names each
 * device's UUID and PCI bus id (and its JSON); a CUDA device the daemon
 * does not have is refused in words. gmd_peer_access takes two devices
 * the process sees and refuses any other pair in words.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpumem.h"
#include "harness.h"

#define UUID0 "GPU-5140dd00-0000-4000-8000-000000000000"
#define UUID1 "GPU-5140dd00-0000-4000-8000-000000000001"

typedef harness_fixture fixture;

static void start_two(fixture *f)
{
        harness_init(&f->h, "[daemon]\nbackend = sim\n"
                            "[sim]\ndevices = 2\nvram = 64M\ngranularity = 2M\n");
        harness_start(&f->h, NULL);
        f->client = harness_client(&f->h, "probe");
}

/* gpu-memctl's stdout for `args`; fails the test unless it exits 0. */
static char *ctl_output(fixture *f, const char *a, const char *b)
{
        const char *argv[] = { GMD_CTL_PATH, a, b, NULL };
        char *out = NULL, *err = NULL;
        int status = harness_run(&f->h, NULL, argv, &out, &err, 5000);

        if (harness_exit_code(status) != 0)
                fail_msg("gpu-memctl %s exited %d: %s", a,
                         harness_exit_code(status), err);
        free(err);
        return out;
}

/* A client under CUDA_VISIBLE_DEVICES=`visible` asking for its CUDA
 * device `ordinal` and 6 MiB there: its first line of output. */
static char *cuda_client(fixture *f, const char *visible, const char *ordinal,
                         harness_proc **ret_proc)
{
        const char *args[] = { "cuda", ordinal, "6M", NULL };
        harness_proc *p;
        char *line;

        setenv("CUDA_VISIBLE_DEVICES", visible, 1);
        p = harness_track_client(f, args);
        unsetenv("CUDA_VISIBLE_DEVICES");
        line = harness_read_line(p, "", 5000);
        if (!line)
                fail_msg("the client under CUDA_VISIBLE_DEVICES=%s said "
                         "nothing", visible);
        *ret_proc = p;
        return line;
}

static void test_visible_second_device(void **state)
{
        fixture *f = *state;
        gmd_status *st;
        harness_proc *p;
        char *line, *out;
        int found = 0;

        start_two(f);
        line = cuda_client(f, "1", "0", &p);
        assert_string_equal(line, "device 1");
        free(line);
        line = harness_read_line(p, "ready", 5000);
        assert_non_null(line);
        free(line);

        /* On the daemon's device 1, nothing on device 0. */
        assert_int_equal(harness_vram_used(f->client, 1), 6 * MiB);
        assert_int_equal(harness_vram_used(f->client, 0), 0);
        assert_int_equal(gmd_query_status(f->client, GMD_STATUS_BUFFERS, 0, &st), 0);
        for (size_t i = 0; i < st->n_buffers; i++)
                if (st->buffers[i].size == 6 * MiB)
                        found = st->buffers[i].device == 1 ? 1 : -1;
        gmd_status_free(st);
        assert_int_equal(found, 1);

        /* The same by UUID, and ordinal 1 of "1,0" is the daemon's 0. */
        line = cuda_client(f, UUID1, "0", &p);
        assert_string_equal(line, "device 1");
        free(line);
        line = cuda_client(f, "1,0", "1", &p);
        assert_string_equal(line, "device 0");
        free(line);

        out = ctl_output(f, "status", NULL);
        if (!strstr(out, "device 0 is " UUID0 " at PCI 0000:80:00.0\n") ||
            !strstr(out, "device 1 is " UUID1 " at PCI 0000:81:00.0\n"))
                fail_msg("gpu-memctl status names no UUIDs:\n%s", out);
        free(out);
        out = ctl_output(f, "status", "--json");
        assert_non_null(strstr(out, "\"uuid\": \"" UUID1 "\""));
        assert_non_null(strstr(out, "\"pci_bus_id\": \"0000:81:00.0\""));
        free(out);
}

static void test_device_the_daemon_lacks(void **state)
{
        fixture *f = *state;
        harness_proc *p;
        char *line;

        start_two(f);
        line = cuda_client(f, "5", "0", &p);
        assert_string_equal(line, "rc -19");
        free(line);
        line = harness_read_line(p, "error", 5000);
        assert_non_null(line);
        if (!strstr(line, "no CUDA device 0") ||
            !strstr(line, "CUDA_VISIBLE_DEVICES=5") ||
            !strstr(line, "gpu-memctl status"))
                fail_msg("unclear refusal: '%s'", line);
        free(line);
        assert_int_equal(harness_vram_used(f->client, 0), 0);
        assert_int_equal(harness_vram_used(f->client, 1), 0);
}

/* On sim every device reaches all memory: gmd_peer_access checks the
 * pair. A process that sees one GPU cannot reach the other's memory. */
static void test_peer_access_pairs(void **state)
{
        fixture *f = *state;
        gmd_client *one = NULL;

        unsetenv("CUDA_VISIBLE_DEVICES");
        start_two(f);
        assert_int_equal(gmd_peer_access(f->client, 0, 1), 0);
        assert_int_equal(gmd_peer_access(f->client, 0, 1), 0);
        assert_int_equal(gmd_peer_access(f->client, 1, 0), 0);
        assert_int_equal(gmd_peer_access(f->client, 0, 0), -EINVAL);
        assert_int_equal(gmd_peer_access(f->client, 0, 2), -EINVAL);
        assert_non_null(strstr(gmd_last_error(), "it has 2"));
        assert_int_equal(gmd_peer_access(NULL, 0, 1), -EINVAL);

        setenv("CUDA_VISIBLE_DEVICES", "0", 1);
        assert_int_equal(gmd_connect(f->h.socket_path, "sees-one", &one), 0);
        unsetenv("CUDA_VISIBLE_DEVICES");
        assert_int_equal(gmd_peer_access(one, 0, 1), GMD_ENOTSUP);
        assert_non_null(strstr(gmd_last_error(), "CUDA_VISIBLE_DEVICES"));
        gmd_disconnect(one);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                HARNESS_TEST(test_visible_second_device),
                HARNESS_TEST(test_device_the_daemon_lacks),
                HARNESS_TEST(test_peer_access_pairs),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
