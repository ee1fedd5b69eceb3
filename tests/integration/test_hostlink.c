/*
 * test_hostlink — the host's own limit across the devices' links, on two
 * sim devices whose links ([sim] copy_rate 8M each) the host feeds only
 * 8 MiB/s together (GMD_SIM_HOST_RATE, the sim's stand-in for what cuda
 * measures with every device copying at once): status reports it beside
 * the links alone; pageouts on both devices at once take the host's time,
 * not one link's (and without the limit they do not); and an acquire on
 * one device, whose copy is urgent, still overtakes a long prefetch on
 * the other while the copy engine holds bulk copies to the host budget
 * (the budget's own arithmetic is test_copyq's, the gpu-memctl line
 * test_cli's).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "harness.h"

typedef harness_fixture fixture;

#define TWO_LINKS "[sim]\ndevices = 2\ncopy_rate = 8M\n" \
                  "[pools]\nhost_limit = 64M\n"

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* gpu-memd with TWO_LINKS and `extra`, the host limit `host_rate` ("8M",
 * or NULL for none); f->client connected. */
static void start(fixture *f, const char *host_rate, const char *extra)
{
        char config[256];

        snprintf(config, sizeof(config), "%s%s", TWO_LINKS, extra ? extra : "");
        if (host_rate)
                setenv("GMD_SIM_HOST_RATE", host_rate, 1);
        harness_start_small(&f->h, config);
        unsetenv("GMD_SIM_HOST_RATE");
        f->client = harness_client(&f->h, "hostlink");
}

/* A released SWAPPABLE buffer of `size` on `device`. */
static gmd_buffer *released(fixture *f, uint64_t size, unsigned device)
{
        gmd_buffer *b = NULL;

        OK(gmd_alloc(f->client, size, device, GMD_ALLOC_SWAPPABLE, GMD_NO_WAIT,
                     &b));
        OK(gmd_release(f->client, b));
        return b;
}

/* Seconds to page out 4 MiB from each device at once. */
static double both_out(fixture *f)
{
        gmd_buffer *a = released(f, 4 * MiB, 0), *b = released(f, 4 * MiB, 1);
        double t0 = now_s(), dt;

        OK(gmd_pageout(f->client, a));
        OK(gmd_pageout(f->client, b));
        OK(gmd_wait(f->client, a, 20000));
        OK(gmd_wait(f->client, b, 20000));
        dt = now_s() - t0;
        OK(gmd_free(f->client, a));
        OK(gmd_free(f->client, b));
        return dt;
}

static void test_host_limit_shared(void **state)
{
        fixture *f = *state;
        gmd_status *st;
        double limited, free_run;

        start(f, "8M", NULL);
        st = harness_status(f->client);
        assert_int_equal(st->host_bytes_per_s_out, 8 * MiB);
        assert_int_equal(st->host_bytes_per_s_in, 8 * MiB);
        assert_int_equal(st->pools[0].link_bytes_per_s_out, 8 * MiB);
        assert_int_equal(st->pools[1].link_bytes_per_s_out, 8 * MiB);
        gmd_status_free(st);
        /* 8 MiB at 8 MiB/s in all: a second, where each link alone would
         * take half of it. */
        limited = both_out(f);
        print_message("both devices out at once: %.2f s under the host's "
                      "limit\n", limited);
        assert_true(limited >= 0.9);
        f->client = gmd_disconnect(f->client);
        harness_stop(&f->h);
        harness_cleanup(&f->h);

        start(f, NULL, NULL);
        st = harness_status(f->client);
        assert_int_equal(st->host_bytes_per_s_out, 0);
        gmd_status_free(st);
        free_run = both_out(f);
        print_message("both devices out at once: %.2f s, no host limit\n",
                      free_run);
        assert_true(free_run < 0.8 * limited);
        harness_stop(&f->h);
}

/* Small chunks, two in flight a link: the host budget is one link's 2 MiB
 * (2M x 8 / (16 / 2)); an acquire of a paged-out buffer on device 1 goes
 * while device 0 prefetches 16 MiB, and is back long before it. */
static void test_urgent_overtakes(void **state)
{
        fixture *f = *state;
        gmd_buffer *big, *small;
        gmd_status *st;
        double t0, dt;
        char *line;

        start(f, "8M", "[swap]\nchunk_size = 1M\ncopies_in_flight = 2\n"
              "bytes_in_flight = 1M\n");
        line = harness_wait_log(&f->h, "at most 2 MiB out and 2 MiB in in "
                                "flight", 2000);
        assert_non_null(line);
        free(line);
        big = released(f, 16 * MiB, 0);
        small = released(f, 2 * MiB, 1);
        OK(gmd_pageout(f->client, big));
        OK(gmd_pageout(f->client, small));
        OK(gmd_wait(f->client, big, 20000));
        OK(gmd_wait(f->client, small, 20000));

        OK(gmd_prefetch(f->client, big));      /* ~2 s at the host's rate */
        usleep(200000);
        t0 = now_s();
        OK(gmd_acquire(f->client, small, 10000));
        dt = now_s() - t0;
        print_message("acquire on device 1 during device 0's prefetch: "
                      "%.2f s\n", dt);
        /* 2 MiB sharing the host with the prefetch: about half a second. */
        assert_true(dt < 1.2);
        st = harness_status(f->client);
        assert_int_equal(st->pools[0].queued_in, 1);   /* still prefetching */
        gmd_status_free(st);
        OK(gmd_wait(f->client, big, 20000));
        OK(gmd_free(f->client, big));
        OK(gmd_free(f->client, small));
        harness_stop(&f->h);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                HARNESS_TEST(test_host_limit_shared),
                HARNESS_TEST(test_urgent_overtakes),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
