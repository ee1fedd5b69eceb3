/*
 * test_mapcache — libgpumem's cache of idle mappings against the fake
 * daemon: gmd_free parks (PARK, no FREE), gmd_alloc of the same shape
 * reuses the mapping with one UNPARK and no round trip, other shapes miss,
 * the bound returns the oldest, RECLAIM unmaps and returns the right
 * buffers (the pages really leave the address space), gmd_trim_cache,
 * GPU_MEMD_CACHE=0, parked buffers under remap and revoke, many threads
 * against reclaims without the daemon's view and ours ever disagreeing,
 * and a release sent without waiting (released at once; held again when
 * the daemon refuses it and keeps the buffer acquired).
 * Every test's teardown checks that no fd was left behind.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "buffer.h"
#include "client.h"
#include "fake_daemon.h"
#include "gpumem.h"
#include "gpumem.pb-c.h"

#define MiB (1u << 20)

typedef struct state {
        int fds_before;
        fake_daemon fake;
        gmd_client *client;
} state;

static int setup(void **ctx)
{
        state *st = calloc(1, sizeof(*st));

        unsetenv(GMD_CACHE_ENV);
        unsetenv(GMD_CACHE_LIMIT_ENV);
        if (!st)
                return -1;
        st->fds_before = fake_count_own_fds();
        if (fake_start(&st->fake) < 0) {
                free(st);
                return -1;
        }
        *ctx = st;
        return 0;
}

static int teardown(void **ctx)
{
        state *st = *ctx;
        unsigned bad;

        st->client = gmd_disconnect(st->client);
        if (st->fake.client_fd >= 0)
                close(st->fake.client_fd);
        bad = st->fake.n_bad_cache;
        fake_stop(&st->fake);
        unsetenv(GMD_CACHE_ENV);
        unsetenv(GMD_CACHE_LIMIT_ENV);
        assert_int_equal(fake_count_own_fds(), st->fds_before);
        assert_int_equal(bad, 0);
        free(st);
        return 0;
}

static int connect_fake(state *st)
{
        int fd = st->fake.client_fd;

        st->fake.client_fd = -1;
        return gmd__connect_fd(fd, "test-mapcache", &st->client);
}

/* One round trip: every packet the client sent before has been handled by
 * the fake, and every packet the fake sent before the reply has been
 * handled by the client's I/O thread. */
static void round_trip(state *st)
{
        gmd_status *s = NULL;

        assert_int_equal(gmd_query_status(st->client, GMD_STATUS_POOLS, 0,
                                          &s), 0);
        gmd_status_free(s);
}

static unsigned count(state *st, unsigned type)
{
        return fake_count(&st->fake, type);
}

/* Bytes and buffers parked in the client's cache now. */
static uint64_t cache_bytes(state *st, unsigned *ret_count)
{
        uint64_t bytes;

        pthread_mutex_lock(&st->client->buffers_lock);
        bytes = st->client->cache.bytes;
        if (ret_count)
                *ret_count = st->client->cache.count;
        pthread_mutex_unlock(&st->client->buffers_lock);
        return bytes;
}

static gmd_buffer *alloc_ok(state *st, size_t size, unsigned flags)
{
        gmd_buffer *b = NULL;

        assert_int_equal(gmd_alloc(st->client, size, 0, flags, GMD_NO_WAIT,
                                   &b), 0);
        assert_non_null(b);
        return b;
}

static void test_free_parks_alloc_reuses(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b, *again, *other, *spill;
        unsigned before_all, allocs;
        uint64_t id;
        uint8_t *p;

        assert_int_equal(connect_fake(st), 0);
        b = alloc_ok(st, MiB - 100, 0);
        p = gmd_buffer_ptr(b);
        id = gmd_buffer_id(b);
        memset(p, 0x5a, MiB);

        assert_int_equal(gmd_free(st->client, b), 0);
        assert_true(fake_wait_type(&st->fake, GMD__MSG_TYPE__MSG_PARK, 1));
        assert_int_equal(fake_parked(&st->fake, id), 1);
        assert_int_equal(st->fake.n_frees, 0);
        assert_int_equal(cache_bytes(st, NULL), MiB);
        /* Still mapped: the mapping is what the cache keeps. */
        assert_int_equal(fake_maps_at(p, MiB), 1);

        /* A hit: the same mapping, the bytes it held, and one UNPARK the
         * client does not wait for -- nothing else reaches the daemon. */
        round_trip(st);
        pthread_mutex_lock(&st->fake.lock);
        before_all = st->fake.n_requests;
        pthread_mutex_unlock(&st->fake.lock);
        allocs = count(st, GMD__MSG_TYPE__MSG_ALLOC);
        again = alloc_ok(st, MiB - 4000, 0);    /* rounds to 1 MiB too */
        assert_ptr_equal(gmd_buffer_ptr(again), p);
        assert_int_equal(gmd_buffer_id(again), id);
        assert_int_equal(gmd_buffer_size(again), MiB);
        assert_int_equal(p[0], 0x5a);
        assert_int_equal(p[MiB - 1], 0x5a);
        assert_true(fake_wait_type(&st->fake, GMD__MSG_TYPE__MSG_UNPARK, 1));
        pthread_mutex_lock(&st->fake.lock);
        assert_int_equal(st->fake.n_requests, before_all + 1);
        pthread_mutex_unlock(&st->fake.lock);
        assert_int_equal(count(st, GMD__MSG_TYPE__MSG_ALLOC), allocs);
        assert_int_equal(fake_parked(&st->fake, id), 0);
        assert_int_equal(cache_bytes(st, NULL), 0);

        /* Other sizes and other flags miss. */
        assert_int_equal(gmd_free(st->client, again), 0);
        other = alloc_ok(st, 2 * MiB, 0);
        assert_int_equal(count(st, GMD__MSG_TYPE__MSG_ALLOC), allocs + 1);
        assert_true(gmd_buffer_id(other) != id);
        spill = alloc_ok(st, MiB, GMD_ALLOC_SPILLABLE);
        assert_int_equal(count(st, GMD__MSG_TYPE__MSG_ALLOC), allocs + 2);
        assert_true(gmd_buffer_id(spill) != id);
        assert_int_equal(cache_bytes(st, NULL), MiB);

        /* The most recently parked of a shape comes back first. A
         * SPILLABLE buffer is not parked (mapcache.c says why). */
        assert_int_equal(gmd_free(st->client, spill), 0);
        assert_int_equal(st->fake.n_frees, 1);
        assert_int_equal(gmd_free(st->client, other), 0);
        b = alloc_ok(st, 2 * MiB, 0);
        assert_int_equal(count(st, GMD__MSG_TYPE__MSG_ALLOC), allocs + 2);

        /* Nor is a buffer the application had released: the daemon may be
         * moving it out right now. */
        assert_int_equal(gmd_release(st->client, b), 0);
        assert_int_equal(gmd_free(st->client, b), 0);
        assert_int_equal(st->fake.n_frees, 2);
        assert_int_equal(cache_bytes(st, NULL), MiB);
}

static void test_limit_returns_oldest(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b[4], *big;
        uint64_t ids[4];
        void *ptrs[4];
        unsigned n;

        setenv(GMD_CACHE_LIMIT_ENV, "3M", 1);
        assert_int_equal(connect_fake(st), 0);
        for (int i = 0; i < 4; i++) {
                b[i] = alloc_ok(st, MiB, 0);
                ids[i] = gmd_buffer_id(b[i]);
                ptrs[i] = gmd_buffer_ptr(b[i]);
        }
        for (int i = 0; i < 3; i++)
                assert_int_equal(gmd_free(st->client, b[i]), 0);
        assert_int_equal(cache_bytes(st, &n), 3 * MiB);
        assert_int_equal(n, 3);
        assert_int_equal(count(st, GMD__MSG_TYPE__MSG_RETURN), 0);

        /* The fourth passes 3 MiB: the oldest goes back, unmapped. */
        assert_int_equal(gmd_free(st->client, b[3]), 0);
        assert_true(fake_wait_type(&st->fake, GMD__MSG_TYPE__MSG_RETURN, 1));
        assert_int_equal(st->fake.n_returned, 1);
        assert_int_equal(st->fake.returned[0], ids[0]);
        assert_int_equal(cache_bytes(st, &n), 3 * MiB);
        assert_int_equal(n, 3);
        assert_int_equal(fake_maps_at(ptrs[0], MiB), 0);
        assert_int_equal(fake_maps_at(ptrs[1], MiB), 1);

        /* Larger than the whole bound: freed, not parked. */
        big = alloc_ok(st, 4 * MiB, 0);
        assert_int_equal(gmd_free(st->client, big), 0);
        assert_int_equal(st->fake.n_frees, 1);
        assert_int_equal(count(st, GMD__MSG_TYPE__MSG_PARK), 4);
        assert_int_equal(cache_bytes(st, NULL), 3 * MiB);
}

static void test_reclaim(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b[3], *again;
        uint64_t ids[3];
        void *ptrs[3];

        assert_int_equal(connect_fake(st), 0);
        for (int i = 0; i < 3; i++) {
                b[i] = alloc_ok(st, MiB, 0);
                ids[i] = gmd_buffer_id(b[i]);
                ptrs[i] = gmd_buffer_ptr(b[i]);
        }
        for (int i = 0; i < 3; i++)
                assert_int_equal(gmd_free(st->client, b[i]), 0);
        assert_true(fake_wait_type(&st->fake, GMD__MSG_TYPE__MSG_PARK, 3));

        /* 1.5 MiB: the two oldest cover it, in one RETURN. */
        assert_int_equal(fake_reclaim(&st->fake, 0, MiB + MiB / 2), 0);
        assert_true(fake_wait_type(&st->fake, GMD__MSG_TYPE__MSG_RETURN, 1));
        pthread_mutex_lock(&st->fake.lock);
        assert_int_equal(st->fake.n_returned, 2);
        assert_int_equal(st->fake.last_return_ids, 2);
        assert_int_equal(st->fake.returned[0], ids[0]);
        assert_int_equal(st->fake.returned[1], ids[1]);
        pthread_mutex_unlock(&st->fake.lock);
        assert_int_equal(fake_parked(&st->fake, ids[0]), -1);
        assert_int_equal(fake_parked(&st->fake, ids[2]), 1);
        assert_int_equal(fake_maps_at(ptrs[0], MiB), 0);
        assert_int_equal(fake_maps_at(ptrs[1], MiB), 0);
        assert_int_equal(fake_maps_at(ptrs[2], MiB), 1);
        assert_int_equal(cache_bytes(st, NULL), MiB);

        /* Another device, or nothing parked: nothing is sent. */
        assert_int_equal(fake_reclaim(&st->fake, 3, 0), 0);
        round_trip(st);
        round_trip(st);
        assert_int_equal(count(st, GMD__MSG_TYPE__MSG_RETURN), 1);

        /* The survivor is still a hit. */
        again = alloc_ok(st, MiB, 0);
        assert_ptr_equal(gmd_buffer_ptr(again), ptrs[2]);
        assert_int_equal(fake_reclaim(&st->fake, 0, 0), 0);
        round_trip(st);
        round_trip(st);
        assert_int_equal(count(st, GMD__MSG_TYPE__MSG_RETURN), 1);

        /* bytes 0: everything on the device. */
        assert_int_equal(gmd_free(st->client, again), 0);
        b[0] = alloc_ok(st, 2 * MiB, 0);
        assert_int_equal(gmd_free(st->client, b[0]), 0);
        assert_int_equal(fake_reclaim(&st->fake, 0, 0), 0);
        assert_true(fake_wait_type(&st->fake, GMD__MSG_TYPE__MSG_RETURN, 2));
        assert_int_equal(st->fake.last_return_ids, 2);
        assert_int_equal(cache_bytes(st, NULL), 0);
        assert_int_equal(fake_maps_at(ptrs[2], MiB), 0);
        assert_int_equal(st->fake.n_frees, 0);
}

static void test_cache_off(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b;
        void *p;

        setenv(GMD_CACHE_ENV, "0", 1);
        assert_int_equal(connect_fake(st), 0);
        b = alloc_ok(st, MiB, 0);
        p = gmd_buffer_ptr(b);
        assert_int_equal(gmd_free(st->client, b), 0);
        assert_int_equal(st->fake.n_frees, 1);
        assert_int_equal(fake_maps_at(p, MiB), 0);
        b = alloc_ok(st, MiB, 0);
        assert_int_equal(count(st, GMD__MSG_TYPE__MSG_ALLOC), 2);
        assert_int_equal(gmd_free(st->client, b), 0);
        assert_int_equal(gmd_trim_cache(st->client), 0);
        round_trip(st);
        assert_int_equal(count(st, GMD__MSG_TYPE__MSG_PARK), 0);
        assert_int_equal(count(st, GMD__MSG_TYPE__MSG_UNPARK), 0);
        assert_int_equal(count(st, GMD__MSG_TYPE__MSG_RETURN), 0);
}

static void test_limit_zero_parks_nothing(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b;

        setenv(GMD_CACHE_LIMIT_ENV, "0", 1);
        assert_int_equal(connect_fake(st), 0);
        b = alloc_ok(st, 4096, 0);
        assert_int_equal(gmd_free(st->client, b), 0);
        assert_int_equal(st->fake.n_frees, 1);
}

static void test_bad_environment(void **ctx)
{
        state *st = *ctx;
        gmd_client *c = (gmd_client *)0x1;

        setenv(GMD_CACHE_ENV, "yes", 1);
        assert_int_equal(gmd__connect_fd(st->fake.client_fd, NULL, &c),
                         -EINVAL);
        st->fake.client_fd = -1;
        assert_ptr_equal(c, (gmd_client *)0x1);
        assert_non_null(strstr(gmd_last_error(), "GPU_MEMD_CACHE='yes'"));

        unsetenv(GMD_CACHE_ENV);
        setenv(GMD_CACHE_LIMIT_ENV, "lots", 1);
        {
                fake_daemon f2;

                assert_int_equal(fake_start(&f2), 0);
                assert_int_equal(gmd__connect_fd(f2.client_fd, NULL, &c),
                                 -EINVAL);
                assert_non_null(strstr(gmd_last_error(),
                                       "GPU_MEMD_CACHE_LIMIT='lots'"));
                fake_stop(&f2);
        }
}

static void test_trim(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b[3];
        void *p0;

        assert_int_equal(connect_fake(st), 0);
        for (int i = 0; i < 3; i++)
                b[i] = alloc_ok(st, (size_t)(i + 1) * MiB, 0);
        p0 = gmd_buffer_ptr(b[0]);
        for (int i = 0; i < 3; i++)
                assert_int_equal(gmd_free(st->client, b[i]), 0);
        assert_int_equal(gmd_trim_cache(st->client), 3);
        assert_true(fake_wait_type(&st->fake, GMD__MSG_TYPE__MSG_RETURN, 1));
        assert_int_equal(st->fake.n_returned, 3);
        assert_int_equal(fake_maps_at(p0, MiB), 0);
        assert_int_equal(cache_bytes(st, NULL), 0);
        assert_int_equal(gmd_trim_cache(st->client), 0);
        assert_int_equal(gmd_trim_cache(NULL), -EINVAL);
        assert_int_equal(st->fake.n_frees, 0);
}

static void test_parked_buffer_remapped_and_revoked(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b, *again;
        uint64_t id;
        uint8_t *p;

        assert_int_equal(connect_fake(st), 0);
        b = alloc_ok(st, MiB, 0);
        id = gmd_buffer_id(b);
        p = gmd_buffer_ptr(b);
        assert_int_equal(gmd_free(st->client, b), 0);

        /* A parked buffer still follows its backing. */
        assert_int_equal(fake_remap(&st->fake, id, 7, GMD_TIER_VRAM), 0);
        assert_true(fake_wait_acks(&st->fake, 1));
        assert_int_equal(st->fake.ack_result, 0);
        assert_int_equal(fake_fill(&st->fake, id, 0x77), 0);
        again = alloc_ok(st, MiB, 0);
        assert_ptr_equal(gmd_buffer_ptr(again), p);
        assert_int_equal(gmd_buffer_tier(again), GMD_TIER_VRAM);
        assert_int_equal(p[12345], 0x77);

        /* A revoked parked buffer is dropped: the next alloc misses. */
        assert_int_equal(gmd_free(st->client, again), 0);
        assert_int_equal(fake_revoke(&st->fake, id, "drained"), 0);
        round_trip(st);
        assert_int_equal(cache_bytes(st, NULL), 0);
        assert_int_equal(fake_maps_at(p, MiB), 0);
        b = alloc_ok(st, MiB, 0);
        assert_true(gmd_buffer_id(b) != id);
        assert_int_equal(count(st, GMD__MSG_TYPE__MSG_ALLOC), 2);
        assert_int_equal(gmd_free(st->client, b), 0);
}

static void test_free_after_hangup_is_not_parked(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b;

        assert_int_equal(connect_fake(st), 0);
        b = alloc_ok(st, MiB, 0);
        fake_set_mode(&st->fake, FAKE_HANGUP_ON_ALLOC, 0);
        assert_int_equal(gmd_alloc(st->client, 8 * MiB, 0, 0, 0,
                                   &(gmd_buffer *){ NULL }), GMD_ECONN);
        assert_int_equal(gmd_free(st->client, b), GMD_ECONN);
        assert_int_equal(gmd_trim_cache(st->client), GMD_ECONN);
}

/* ---- many threads against reclaims ------------------------------------ */

typedef struct churn {
        gmd_client *client;
        unsigned seed;
        int failures;
} churn;

static void *churn_main(void *arg)
{
        churn *c = arg;

        for (int i = 0; i < 300; i++) {
                size_t size = (size_t)(1 + (rand_r(&c->seed) % 3)) * 65536;
                gmd_buffer *b = NULL;
                uint8_t *p;

                if (gmd_alloc(c->client, size, 0, 0, GMD_NO_WAIT, &b) < 0) {
                        c->failures++;
                        continue;
                }
                p = gmd_buffer_ptr(b);
                p[0] = (uint8_t)i;
                p[size - 1] = (uint8_t)i;
                if (p[0] != (uint8_t)i || gmd_free(c->client, b) < 0)
                        c->failures++;
        }
        return NULL;
}

static void test_threads_and_reclaims_agree(void **ctx)
{
        state *st = *ctx;
        pthread_t threads[4];
        churn churns[4];
        gmd_list *pos;
        unsigned n_client = 0, n_fake = 0;

        setenv(GMD_CACHE_LIMIT_ENV, "512K", 1);
        assert_int_equal(connect_fake(st), 0);
        for (int i = 0; i < 4; i++) {
                churns[i] = (churn){ .client = st->client,
                                     .seed = (unsigned)i };
                assert_int_equal(pthread_create(&threads[i], NULL, churn_main,
                                                &churns[i]), 0);
        }
        for (int i = 0; i < 200; i++) {
                assert_int_equal(fake_reclaim(&st->fake, 0,
                                              (uint64_t)(i % 3) * 65536), 0);
                usleep(200);
        }
        for (int i = 0; i < 4; i++) {
                pthread_join(threads[i], NULL);
                assert_int_equal(churns[i].failures, 0);
        }
        round_trip(st);
        round_trip(st);

        /* Both sides name the same parked buffers. */
        pthread_mutex_lock(&st->client->buffers_lock);
        list_for_each(pos, &st->client->cache.lru) {
                gmd_buffer *b = container_of(pos, gmd_buffer, cache_node);

                n_client++;
                assert_int_equal(fake_parked(&st->fake, b->id), 1);
        }
        pthread_mutex_unlock(&st->client->buffers_lock);
        pthread_mutex_lock(&st->fake.lock);
        for (unsigned i = 0; i < FAKE_MAX_BUFFERS; i++)
                if (st->fake.buffers[i].fd >= 0 && st->fake.buffers[i].parked)
                        n_fake++;
        assert_int_equal(st->fake.n_bad_cache, 0);
        pthread_mutex_unlock(&st->fake.lock);
        assert_int_equal(n_client, n_fake);
        assert_true(count(st, GMD__MSG_TYPE__MSG_UNPARK) > 0);
        assert_int_equal(st->fake.n_frees, 0);
}

/* On the sim backend there is no GPU work to wait for: gmd_release_after
 * is a plain release (one RELEASE, no event), and the lease is gone. */
static void test_release_after_on_sim(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b;
        unsigned before;

        assert_int_equal(connect_fake(st), 0);
        b = alloc_ok(st, MiB, 0);
        before = count(st, GMD__MSG_TYPE__MSG_RELEASE);
        assert_int_equal(gmd_release_after(st->client, b, NULL), 0);
        assert_int_equal(count(st, GMD__MSG_TYPE__MSG_RELEASE), before + 1);
        assert_int_equal(gmd_acquire(st->client, b, 1000), 0);
        assert_int_equal(gmd_release_after(NULL, b, NULL), -EINVAL);
        assert_int_equal(gmd_free(st->client, b), 0);
}

/* A release sent without waiting marks the buffer released at once, so
 * gmd_free gives it back (FREE) rather than parking it; a refusal that
 * leaves it acquired in the daemon marks it held again before gmd_flush
 * reports it (gmd_free parks it then), one that says it was not acquired
 * does not; a revoke that crossed the release is told as GMD_EREVOKED. */
static void test_release_nowait_and_the_lease(void **ctx)
{
        state *st = *ctx;
        unsigned parks, frees;
        gmd_buffer *b;
        char want[128];

        assert_int_equal(connect_fake(st), 0);

        b = alloc_ok(st, MiB, 0);
        assert_int_equal(gmd_release_after_nowait(st->client, b, NULL), 0);
        frees = st->fake.n_frees;
        assert_int_equal(gmd_free(st->client, b), 0);
        assert_int_equal(st->fake.n_frees, frees + 1);
        assert_int_equal(gmd_flush(st->client, 5000), 0);

        fake_set_mode(&st->fake, FAKE_REFUSE_RELEASE,
                      GMD__ERROR_CODE__ERR_INVALID);
        b = alloc_ok(st, MiB, 0);
        assert_int_equal(gmd_release_after_nowait(st->client, b, NULL), 0);
        assert_int_equal(gmd_flush(st->client, 5000), -EINVAL);
        snprintf(want, sizeof(want), "gmd_release_after_nowait of buffer %"
                 PRIu64 ": fake refuses the release", gmd_buffer_id(b));
        assert_string_equal(gmd_last_error(), want);
        parks = count(st, GMD__MSG_TYPE__MSG_PARK);
        assert_int_equal(gmd_free(st->client, b), 0);  /* held: parked */
        round_trip(st);
        assert_int_equal(count(st, GMD__MSG_TYPE__MSG_PARK), parks + 1);
        assert_int_equal(gmd_trim_cache(st->client), 1);

        fake_set_mode(&st->fake, FAKE_REFUSE_RELEASE, GMD__ERROR_CODE__ERR_BUSY);
        b = alloc_ok(st, MiB, 0);
        assert_int_equal(gmd_release_after_nowait(st->client, b, NULL), 0);
        assert_int_equal(gmd_flush(st->client, 5000), GMD_EBUSY);
        frees = st->fake.n_frees;
        assert_int_equal(gmd_free(st->client, b), 0);  /* released: FREE */
        assert_int_equal(st->fake.n_frees, frees + 1);

        fake_set_mode(&st->fake, FAKE_REVOKE_ON_RELEASE, 0);
        b = alloc_ok(st, MiB, 0);
        assert_int_equal(gmd_release_after_nowait(st->client, b, NULL), 0);
        assert_int_equal(gmd_flush(st->client, 5000), GMD_EREVOKED);
        assert_non_null(strstr(gmd_last_error(), "revoked by the fake"));
        assert_int_equal(gmd_release_after_nowait(st->client, b, NULL),
                         GMD_EREVOKED);
        fake_set_mode(&st->fake, FAKE_NORMAL, 0);
        assert_int_equal(gmd_free(st->client, b), 0);
        assert_int_equal(gmd_flush(st->client, 0), 0);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        const struct CMUnitTest tests[] = {
                T(test_free_parks_alloc_reuses),
                T(test_limit_returns_oldest),
                T(test_reclaim),
                T(test_cache_off),
                T(test_limit_zero_parks_nothing),
                T(test_bad_environment),
                T(test_trim),
                T(test_parked_buffer_remapped_and_revoked),
                T(test_free_after_hangup_is_not_parked),
                T(test_threads_and_reclaims_agree),
                T(test_release_after_on_sim),
                T(test_release_nowait_and_the_lease),
        };
#undef T
        return cmocka_run_group_tests(tests, NULL, NULL);
}
