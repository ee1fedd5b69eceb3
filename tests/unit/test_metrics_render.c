/*
 * test_metrics_render — daemon/service/metrics_render.c from a snapshot made by
 * hand, no daemon: every figure of the snapshot lands in its series
 * (pools, clients by tier, queues, kept VRAM, VRAM held outside gpu-memd,
 * each device's link and the host's across them, pinned host memory, the
 * latency histogram, errors), client names are escaped, the host arena
 * family appears only where the backend has arenas, and each family is
 * declared once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend.h"
#include "gpumem.h"
#include "metrics_render.h"
#include "snapshot.h"

#define MiB (UINT64_C(1) << 20)

static gmd_pool_snapshot pools[2];
static gmd_client_snapshot clients[2];

/* One device of 64 MiB and the host pool; two clients. */
static gmd_snapshot example(bool arena)
{
        gmd_snapshot s = { 0 };

        memset(pools, 0, sizeof(pools));
        memset(clients, 0, sizeof(clients));
        pools[0] = (gmd_pool_snapshot){
                .device = 0, .tier = GMD_TIER_VRAM, .capacity = 64 * MiB,
                .used = 24 * MiB, .free = 40 * MiB,
                .queued = { [GMD_COPY_OUT] = 2, [GMD_COPY_IN] = 1 },
                .bytes = { [GMD_COPY_OUT] = 8 * MiB, [GMD_COPY_IN] = 4 * MiB },
                .busy_us = { [GMD_COPY_OUT] = 2500, [GMD_COPY_IN] = 10000000 },
                .kept = 4 * MiB, .has_arena = arena,
                .arena_built = 16 * MiB, .arena_free = 12 * MiB,
                .has_driver_view = true, .device_free = 30 * MiB,
                .unaccounted = 10 * MiB,
                .link = { [GMD_COPY_OUT] = 55000000000ull,
                          [GMD_COPY_IN] = 54000000000ull },
        };
        pools[1] = (gmd_pool_snapshot){
                .device = 0, .tier = GMD_TIER_HOST, .capacity = 256 * MiB,
                .used = 8 * MiB, .free = 248 * MiB,
        };
        clients[0] = (gmd_client_snapshot){
                .id = 7, .pid = 123, .uid = 1000, .name = "train",
                .n_buffers = 3, .bytes = 20 * MiB,
                .tier_bytes = { 12 * MiB, 8 * MiB },
        };
        clients[1] = (gmd_client_snapshot){
                .id = 9, .pid = 456, .uid = 0, .name = "we\"ird\\name",
                .n_buffers = 1, .bytes = 4 * MiB, .tier_bytes = { 4 * MiB, 0 },
        };
        s.n_pools = 2;
        s.pools = pools;
        s.n_clients = 2;
        s.clients = clients;
        s.total_capacity = 320 * MiB;
        s.total_used = 32 * MiB;
        s.total_buffers = 4;
        s.waiting_allocations = 5;
        s.host_pinned = 40 * MiB;
        s.host_limit = 256 * MiB;
        s.stats.allocations = 11;
        s.stats.frees = 6;
        s.stats.latency_count[0] = 3;
        s.stats.latency_count[GMD_STATS_LATENCY_BUCKETS] = 1;
        s.stats.latency_sum_us = 1500;
        s.stats.vram_reused = 2;
        s.stats.vram_kept_released = 1;
        s.stats.vram_refused = 3;
        s.uptime_ms = 1500;
        s.version = GMD_VERSION_STRING;
        s.backend = "sim";
        return s;
}

static char *render_as(const gmd_snapshot *s, const char *mode)
{
        promtext t;
        char *text;

        promtext_init(&t);
        metrics_render(&t, s, mode);
        assert_false(t.failed);
        assert_non_null(t.data);
        text = strdup(t.data);
        promtext_clear(&t);
        return text;
}

/* With [metrics] clients = names: every series, names included. */
static char *render(const gmd_snapshot *s)
{
        return render_as(s, "names");
}

/* The page has this line, whole. */
static void expect_line(const char *page, const char *line)
{
        size_t len = strlen(line);

        for (const char *p = page; (p = strstr(p, line)); p += len)
                if ((p == page || p[-1] == '\n') && p[len] == '\n')
                        return;
        fail_msg("no line \"%s\" in:\n%s", line, page);
}

static int count(const char *page, const char *needle)
{
        int n = 0;

        for (const char *p = page; (p = strstr(p, needle)); p += strlen(needle))
                n++;
        return n;
}

static void test_pools_and_clients(void **state)
{
        gmd_snapshot s = example(false);
        char *page = render(&s);

        (void)state;
        expect_line(page, "gpumemd_pool_capacity_bytes{device=\"0\",tier=\"vram\"} 67108864");
        expect_line(page, "gpumemd_pool_used_bytes{device=\"0\",tier=\"vram\"} 25165824");
        expect_line(page, "gpumemd_pool_capacity_bytes{device=\"0\",tier=\"host\"} 268435456");
        expect_line(page, "gpumemd_client_bytes{client=\"7\",pid=\"123\",uid=\"1000\","
                    "name=\"train\"} 20971520");
        expect_line(page, "gpumemd_client_tier_bytes{client=\"7\",pid=\"123\","
                    "uid=\"1000\",name=\"train\",tier=\"host\"} 8388608");
        expect_line(page, "gpumemd_client_bytes{client=\"9\",pid=\"456\",uid=\"0\","
                    "name=\"we\\\"ird\\\\name\"} 4194304");
        expect_line(page, "gpumemd_clients 2");
        expect_line(page, "gpumemd_buffers 4");
        expect_line(page, "gpumemd_waiting_allocations 5");
        free(page);
}

/* [metrics] clients: users (the default) has series per uid and none per
 * client, so no names and no pids; ids has per-client series without
 * names. */
static void test_clients_modes(void **state)
{
        gmd_snapshot s = example(false);
        char *page = render_as(&s, "users");

        (void)state;
        expect_line(page, "gpumemd_user_clients{uid=\"1000\"} 1");
        expect_line(page, "gpumemd_user_bytes{uid=\"1000\",tier=\"host\"} 8388608");
        expect_line(page, "gpumemd_user_clients{uid=\"0\"} 1");
        assert_int_equal(count(page, "train"), 0);
        assert_int_equal(count(page, "pid=\""), 0);
        assert_int_equal(count(page, "gpumemd_client_bytes"), 0);
        free(page);
        page = render_as(&s, "ids");
        expect_line(page, "gpumemd_client_bytes{client=\"7\",pid=\"123\",uid=\"1000\"} "
                    "20971520");
        assert_int_equal(count(page, "train"), 0);
        free(page);
}

static void test_copies_and_host(void **state)
{
        gmd_snapshot s = example(false);
        char *page = render(&s);

        (void)state;
        expect_line(page, "gpumemd_copy_queue_depth{device=\"0\",direction=\"out\"} 2");
        expect_line(page, "gpumemd_copy_queue_depth{device=\"0\",direction=\"in\"} 1");
        expect_line(page, "gpumemd_device_bytes_moved_total{device=\"0\","
                    "direction=\"out\"} 8388608");
        expect_line(page, "gpumemd_device_copy_seconds_total{device=\"0\","
                    "direction=\"out\"} 0.0025");
        expect_line(page, "gpumemd_device_copy_seconds_total{device=\"0\","
                    "direction=\"in\"} 10");
        expect_line(page, "gpumemd_vram_kept_bytes{device=\"0\"} 4194304");
        expect_line(page, "gpumemd_vram_kept_total{outcome=\"reused\"} 2");
        expect_line(page, "gpumemd_vram_kept_total{outcome=\"released\"} 1");
        expect_line(page, "gpumemd_vram_unaccounted_bytes{device=\"0\"} 10485760");
        expect_line(page, "gpumemd_vram_device_free_bytes{device=\"0\"} 31457280");
        expect_line(page, "gpumemd_vram_refused_total 3");
        expect_line(page, "gpumemd_host_pinned_bytes{state=\"pinned\"} 41943040");
        expect_line(page, "gpumemd_host_pinned_bytes{state=\"limit\"} 268435456");
        /* No arena, no arena family. */
        assert_int_equal(count(page, "gpumemd_host_arena_bytes"), 0);
        expect_line(page, "gpumemd_link_bytes_per_second{device=\"0\","
                    "direction=\"out\"} 55000000000");
        expect_line(page, "gpumemd_link_bytes_per_second{device=\"0\","
                    "direction=\"in\"} 54000000000");
        /* The host's figure across links is not known in the example:
         * declared, no sample. */
        assert_int_equal(count(page, "gpumemd_host_link_bytes_per_second{"), 0);
        assert_int_equal(count(page, "# TYPE gpumemd_host_link_bytes_per_second "
                               "gauge\n"), 1);
        free(page);

        /* Known: one sample each way. */
        s = example(false);
        s.host_link[GMD_COPY_OUT] = 150000000000ull;
        s.host_link[GMD_COPY_IN] = 160000000000ull;
        page = render(&s);
        expect_line(page, "gpumemd_host_link_bytes_per_second{direction=\"out\"} "
                    "150000000000");
        expect_line(page, "gpumemd_host_link_bytes_per_second{direction=\"in\"} "
                    "160000000000");
        free(page);

        /* A link not known (yet) has no sample: a 0 would read as a dead
         * link; the family is still declared. */
        s = example(false);
        pools[0].link[GMD_COPY_OUT] = 0;
        pools[0].link[GMD_COPY_IN] = 0;
        page = render(&s);
        assert_int_equal(count(page, "gpumemd_link_bytes_per_second{"), 0);
        assert_int_equal(count(page, "# TYPE gpumemd_link_bytes_per_second gauge\n"), 1);
        free(page);

        s = example(true);
        page = render(&s);
        expect_line(page, "gpumemd_host_arena_bytes{device=\"0\",state=\"pinned\"} 16777216");
        expect_line(page, "gpumemd_host_arena_bytes{device=\"0\",state=\"free\"} 12582912");
        free(page);
}

static void test_counters_and_info(void **state)
{
        gmd_snapshot s = example(false);
        char *page = render(&s);

        (void)state;
        expect_line(page, "gpumemd_allocations_total 11");
        expect_line(page, "gpumemd_frees_total 6");
        expect_line(page, "gpumemd_allocation_latency_seconds_bucket{le=\"+Inf\"} 4");
        expect_line(page, "gpumemd_allocation_latency_seconds_count 4");
        expect_line(page, "gpumemd_allocation_latency_seconds_sum 0.0015");
        expect_line(page, "gpumemd_uptime_seconds 1.5");
        expect_line(page, "gpumemd_info{version=\"" GMD_VERSION_STRING
                    "\",backend=\"sim\"} 1");
        free(page);
}

/* Every family is declared once, before its samples. */
static void test_families_once(void **state)
{
        gmd_snapshot s = example(true);
        char *page = render(&s);

        (void)state;
        for (const char *p = page; (p = strstr(p, "# TYPE ")); p++) {
                char name[96], needle[128];

                assert_int_equal(sscanf(p, "# TYPE %95s", name), 1);
                snprintf(needle, sizeof(needle), "# TYPE %s ", name);
                assert_int_equal(count(page, needle), 1);
        }
        free(page);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_pools_and_clients),
                cmocka_unit_test(test_clients_modes),
                cmocka_unit_test(test_copies_and_host),
                cmocka_unit_test(test_counters_and_info),
                cmocka_unit_test(test_families_once),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
