/*
 * test_client — libgpumem against the fake daemon (fake_daemon.c) on a
 * socketpair: hello, alloc with a real memfd, remap at the same address
 * with the data intact, revoke, error codes and words, a daemon that hangs
 * up or talks nonsense, concurrent callers, legacy IPC buffers (through a
 * stand-in for the cuda mapper's ipc_open/ipc_close), requests sent without
 * waiting (many threads, one flush; a wrong answer), and no fd left behind
 * (every test's teardown counts /proc/self/fd). Tests that count FREEs run
 * with the mapping cache off (GPU_MEMD_CACHE=0), as the library did before
 * it had one; test_mapcache.c covers the cache.
 *
 * Restart recovery runs against the fake on a socket path (fake_listen),
 * which hangs up as a dying daemon would and takes the next connection:
 * the buffers' bytes stay through the gap, calls made meanwhile complete
 * after it, the claims name the very memory, a buffer not taken back is
 * revoked with a sentence naming it, a daemon without recovery loses them
 * all so, and the old behaviour stays where it should (a shutdown notice,
 * $GPU_MEMD_RECONNECT_S=0, the window passing).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "client.h"
#include "fake_daemon.h"
#include "gpumem.h"
#include "gpumem.pb-c.h"

typedef struct state {
        int fds_before;
        fake_daemon fake;
        gmd_client *client;
        char path[108];                 /* fake_listen's, or "" */
} state;

static int setup(void **ctx)
{
        state *st = calloc(1, sizeof(*st));

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

/* The same with the mapping cache off: gmd_free sends FREE. */
static int setup_nocache(void **ctx)
{
        setenv(GMD_CACHE_ENV, "0", 1);
        return setup(ctx);
}

static int teardown(void **ctx)
{
        state *st = *ctx;
        int fds_after;

        unsetenv(GMD_CACHE_ENV);
        unsetenv(GMD_RECONNECT_ENV);
        st->client = gmd_disconnect(st->client);
        if (st->fake.client_fd >= 0)
                close(st->fake.client_fd);
        fake_stop(&st->fake);
        fds_after = fake_count_own_fds();
        assert_int_equal(fds_after, st->fds_before);
        free(st);
        return 0;
}

/* Hand the library its end of the socketpair. */
static int connect_fake(state *st)
{
        int fd = st->fake.client_fd;

        st->fake.client_fd = -1;        /* gmd__connect_fd owns it now */
        return gmd__connect_fd(fd, "test-client", &st->client);
}

static void test_hello(void **ctx)
{
        state *st = *ctx;

        assert_int_equal(connect_fake(st), 0);
        assert_string_equal(gmd_client_backend(st->client), "sim");
        assert_int_equal(gmd_client_protocol_version(st->client), 1);
        assert_int_equal(gmd_client_device_count(st->client), 1);
}

static void test_hello_version_mismatch(void **ctx)
{
        state *st = *ctx;
        gmd_client *sentinel = (gmd_client *)0x1;

        st->fake.hello_version = 9;
        assert_int_equal(gmd__connect_fd(st->fake.client_fd, NULL, &sentinel),
                         GMD_EPROTO);
        st->fake.client_fd = -1;
        assert_ptr_equal(sentinel, (gmd_client *)0x1);
        assert_non_null(strstr(gmd_last_error(), "protocol version 9"));
}

static void test_hello_unknown_backend(void **ctx)
{
        state *st = *ctx;

        st->fake.backend = "tpu";
        assert_int_equal(connect_fake(st), GMD_ENOTSUP);
        assert_null(st->client);
        assert_non_null(strstr(gmd_last_error(), "'tpu'"));
}

static void test_hello_cuda_without_cuda(void **ctx)
{
#ifdef GMD_HAVE_CUDA
        skip();
#else
        state *st = *ctx;

        st->fake.backend = "cuda";
        assert_int_equal(connect_fake(st), GMD_ENOTSUP);
        assert_non_null(strstr(gmd_last_error(), "built without CUDA"));
#endif
}

static void test_connect_errors(void **ctx)
{
        char long_path[200];
        gmd_client *c = NULL;

        /* Not -ENOENT: that is GMD_ENOENT, "no such buffer". */
        assert_int_equal(gmd_connect("/nonexistent/gpu-memd.sock", NULL, &c),
                         GMD_ECONN);
        assert_string_equal(gmd_strerror(GMD_ECONN), "not connected to gpu-memd");
        assert_null(c);
        assert_string_equal(gmd_last_error(),
                            "cannot connect to /nonexistent/gpu-memd.sock: "
                            "No such file or directory — is gpu-memd running?");

        memset(long_path, 'x', sizeof(long_path) - 1);
        long_path[0] = '/';
        long_path[sizeof(long_path) - 1] = '\0';
        assert_int_equal(gmd_connect(long_path, NULL, &c), -ENAMETOOLONG);

        setenv(GMD_SOCKET_ENV, "/nonexistent/from-env.sock", 1);
        assert_int_equal(gmd_connect(NULL, NULL, &c), GMD_ECONN);
        assert_non_null(strstr(gmd_last_error(), "/nonexistent/from-env.sock"));
        unsetenv(GMD_SOCKET_ENV);
        assert_null(c);
}

/* A SPILLABLE buffer moved to host memory stays mapped there: kernels
 * read it in place. */
static void test_alloc_write_remap(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b = NULL;
        const size_t size = 1 << 20;
        uint8_t *p;

        assert_int_equal(connect_fake(st), 0);
        assert_int_equal(gmd_alloc(st->client, size - 100, 0, GMD_ALLOC_SPILLABLE,
                                   GMD_WAIT_FOREVER, &b), 0);
        assert_non_null(b);
        assert_int_equal(gmd_buffer_size(b), size);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        p = gmd_buffer_ptr(b);
        for (size_t i = 0; i < size; i++)
                p[i] = (uint8_t)(i * 7 + 3);

        assert_int_equal(fake_remap(&st->fake, gmd_buffer_id(b), 41,
                                    GMD_TIER_HOST), 0);
        assert_true(fake_wait_acks(&st->fake, 1));
        assert_int_equal(st->fake.ack_buffer_id, gmd_buffer_id(b));
        assert_int_equal(st->fake.ack_sequence, 41);
        assert_int_equal(st->fake.ack_result, 0);

        assert_ptr_equal(gmd_buffer_ptr(b), p);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        for (size_t i = 0; i < size; i++)
                if (p[i] != (uint8_t)(i * 7 + 3))
                        fail_msg("byte %zu differs after the remap", i);

        /* The pointer now shows the new backing, not a private copy. */
        assert_int_equal(fake_fill(&st->fake, gmd_buffer_id(b), 0xab), 0);
        assert_int_equal(p[0], 0xab);
        assert_int_equal(p[size - 1], 0xab);

        assert_int_equal(gmd_release(st->client, b), 0);
        assert_int_equal(gmd_acquire(st->client, b, 1000), 0);
        assert_int_equal(gmd_free(st->client, b), 0);
        assert_int_equal(st->fake.n_frees, 1);
}

/* A SWAPPABLE buffer moved to host memory is not mapped while it is out
 * (nobody may touch it before an acquire brings it back; the daemon sends
 * no segment); its address stays reserved, and the way back maps the new
 * VRAM backing there. */
static void test_swappable_out_unmapped_then_back(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b = NULL;
        const size_t size = 1 << 20;
        uint8_t *p;
        unsigned char vec;

        assert_int_equal(connect_fake(st), 0);
        assert_int_equal(gmd_alloc(st->client, size, 0, 0, GMD_WAIT_FOREVER, &b), 0);
        p = gmd_buffer_ptr(b);
        memset(p, 0x5a, size);
        assert_int_equal(gmd_release(st->client, b), 0);

        assert_int_equal(fake_remap_out(&st->fake, gmd_buffer_id(b), 51), 0);
        assert_true(fake_wait_acks(&st->fake, 1));
        assert_int_equal(st->fake.ack_result, 0);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        /* Reserved but not backed: mincore finds no mapping of a file. */
        assert_int_equal(mincore(p, 4096, &vec), 0);
        assert_int_equal(fake_maps_at(p, size), 0);

        /* Back to VRAM: a fresh backing holding the bytes, same address. */
        assert_int_equal(fake_remap(&st->fake, gmd_buffer_id(b), 52,
                                    GMD_TIER_VRAM), 0);
        assert_true(fake_wait_acks(&st->fake, 2));
        assert_int_equal(st->fake.ack_result, 0);
        assert_int_equal(fake_fill(&st->fake, gmd_buffer_id(b), 0x5a), 0);
        assert_ptr_equal(gmd_buffer_ptr(b), p);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        assert_int_equal(p[0], 0x5a);
        assert_int_equal(p[size - 1], 0x5a);
        assert_int_equal(fake_maps_at(p, size), 1);
        assert_int_equal(gmd_free(st->client, b), 0);
}

static void test_remap_unknown_buffer(void **ctx)
{
        state *st = *ctx;

        assert_int_equal(connect_fake(st), 0);
        assert_int_equal(fake_remap_unknown(&st->fake, 5555, 3), 0);
        assert_true(fake_wait_acks(&st->fake, 1));
        assert_int_equal(st->fake.ack_buffer_id, 5555);
        assert_int_equal(st->fake.ack_result, -ENOENT);
}

static void test_revoke(void **ctx)
{
        state *st = *ctx;
        gmd_status *status = NULL;
        gmd_buffer *b = NULL;

        assert_int_equal(connect_fake(st), 0);
        assert_int_equal(gmd_alloc(st->client, 8192, 0, 0, GMD_NO_WAIT, &b), 0);
        assert_int_equal(fake_revoke(&st->fake, gmd_buffer_id(b),
                                     "the daemon is stopping"), 0);
        /* The I/O thread handles packets in order: once the status reply
         * is back, the revoke before it has been applied. */
        assert_int_equal(gmd_query_status(st->client, GMD_STATUS_POOLS, 0,
                                          &status), 0);
        gmd_status_free(status);

        assert_int_equal(gmd_acquire(st->client, b, 0), GMD_EREVOKED);
        assert_non_null(strstr(gmd_last_error(), "the daemon is stopping"));
        assert_int_equal(gmd_release(st->client, b), GMD_EREVOKED);
        assert_non_null(gmd_buffer_ptr(b));
        /* The daemon answers NOT_FOUND; for a revoked buffer that is done. */
        assert_int_equal(gmd_free(st->client, b), 0);
        assert_int_equal(st->fake.n_frees, 1);
}

static void test_error_replies(void **ctx)
{
        static const struct {
                int wire;
                int expected;
        } table[] = {
                { GMD__ERROR_CODE__ERR_INVALID,       -EINVAL },
                { GMD__ERROR_CODE__ERR_NO_MEMORY,     GMD_ENOMEM },
                { GMD__ERROR_CODE__ERR_TOO_LARGE,     GMD_ETOOLARGE },
                { GMD__ERROR_CODE__ERR_NOT_FOUND,     GMD_ENOENT },
                { GMD__ERROR_CODE__ERR_PERMISSION,    GMD_EPERM },
                { GMD__ERROR_CODE__ERR_QUOTA,         GMD_EQUOTA },
                { GMD__ERROR_CODE__ERR_BUSY,          GMD_EBUSY },
                { GMD__ERROR_CODE__ERR_UNSUPPORTED,   GMD_ENOTSUP },
                { GMD__ERROR_CODE__ERR_VERSION,       GMD_EPROTO },
                { GMD__ERROR_CODE__ERR_INTERNAL,      -EIO },
                { GMD__ERROR_CODE__ERR_TIMED_OUT,     GMD_ETIMEDOUT },
                { GMD__ERROR_CODE__ERR_SHUTTING_DOWN, GMD_ECONN },
                { GMD__ERROR_CODE__ERR_LIMIT,         GMD_ELIMIT },
                { 999,                                -EIO },
        };
        state *st = *ctx;

        assert_int_equal(connect_fake(st), 0);
        for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
                gmd_buffer *b = (gmd_buffer *)0x1;

                fake_set_mode(&st->fake, FAKE_ERROR, table[i].wire);
                assert_int_equal(gmd_alloc(st->client, 4096, 0, 0, 0, &b),
                                 table[i].expected);
                assert_string_equal(gmd_last_error(), "fake says no");
                assert_ptr_equal(b, (gmd_buffer *)0x1);
        }
        /* The connection is still fine after error replies. */
        fake_set_mode(&st->fake, FAKE_NORMAL, 0);
        {
                gmd_buffer *b = NULL;

                assert_int_equal(gmd_alloc(st->client, 4096, 0, 0, 0, &b), 0);
                assert_int_equal(gmd_free(st->client, b), 0);
        }
        assert_int_equal(gmd_alloc(st->client, 0, 0, 0, 0,
                                   &(gmd_buffer *){ NULL }), -EINVAL);
}

static void test_daemon_hangup(void **ctx)
{
        state *st = *ctx;
        gmd_status *status = NULL;
        gmd_buffer *kept = NULL, *b = NULL;

        assert_int_equal(connect_fake(st), 0);
        assert_int_equal(gmd_alloc(st->client, 4096, 0, 0, 0, &kept), 0);
        fake_set_mode(&st->fake, FAKE_HANGUP_ON_ALLOC, 0);
        assert_int_equal(gmd_alloc(st->client, 4096, 0, 0, GMD_WAIT_FOREVER,
                                   &b), GMD_ECONN);
        assert_null(b);
        assert_string_equal(gmd_last_error(), "gpu-memd closed the connection");
        assert_int_equal(gmd_query_status(st->client, GMD_STATUS_POOLS, 0,
                                          &status), GMD_ECONN);
        assert_null(status);
        /* The handle of a buffer is still freed (the daemon dropped it). */
        assert_int_equal(gmd_free(st->client, kept), GMD_ECONN);
}

static void test_reply_to_unknown_request(void **ctx)
{
        state *st = *ctx;
        gmd_status *status = NULL;

        assert_int_equal(connect_fake(st), 0);
        fake_set_mode(&st->fake, FAKE_WRONG_ID, 0);
        assert_int_equal(gmd_query_status(st->client, GMD_STATUS_POOLS, 0,
                                          &status), GMD_EPROTO);
        assert_non_null(strstr(gmd_last_error(), "no request is waiting"));
        /* Later calls fail the same way; nothing crashed. */
        assert_int_equal(gmd_query_status(st->client, GMD_STATUS_POOLS, 0,
                                          &status), GMD_EPROTO);
        assert_null(status);
}

static void test_garbage_reply(void **ctx)
{
        state *st = *ctx;
        gmd_status *status = NULL;

        assert_int_equal(connect_fake(st), 0);
        fake_set_mode(&st->fake, FAKE_GARBAGE, 0);
        assert_int_equal(gmd_query_status(st->client, GMD_STATUS_POOLS, 0,
                                          &status), GMD_EPROTO);
        assert_non_null(strstr(gmd_last_error(), "does not decode"));
}

static void test_map_failure_frees(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b = NULL;

        assert_int_equal(connect_fake(st), 0);
        fake_set_mode(&st->fake, FAKE_SHORT_MEMFD, 0);
        assert_int_equal(gmd_alloc(st->client, 1 << 20, 0, 0, 0, &b), -EINVAL);
        assert_null(b);
        assert_non_null(strstr(gmd_last_error(), "cannot map buffer 100"));
        /* The library gave the daemon's buffer back. */
        assert_int_equal(st->fake.n_frees, 1);
        assert_int_equal(st->fake.last_freed, 100);
}

static void test_status(void **ctx)
{
        state *st = *ctx;
        gmd_status *s = NULL;

        assert_int_equal(connect_fake(st), 0);
        assert_int_equal(gmd_query_status(st->client, GMD_STATUS_BUFFERS, 0,
                                          &s), 0);
        assert_string_equal(s->daemon_version, "9.9.9-fake");
        assert_string_equal(s->backend, "sim");
        assert_int_equal(s->uptime_ms, 123456);
        assert_int_equal(s->n_pools, 1);
        assert_int_equal(s->pools[0].tier, GMD_TIER_HOST);
        assert_int_equal(s->pools[0].capacity, 1 << 30);
        assert_int_equal(s->pools[0].queued_out, 3);
        assert_int_equal(s->pools[0].queued_in, 4);
        assert_int_equal(s->pools[0].bytes_out, UINT64_C(5) << 32);
        assert_int_equal(s->pools[0].bytes_in, 6);
        assert_int_equal(s->pools[0].copy_us_out, 7);
        assert_int_equal(s->pools[0].copy_us_in, UINT64_C(8) << 32);
        assert_int_equal(s->pools[0].link_bytes_per_s_out, UINT64_C(55000000000));
        assert_int_equal(s->pools[0].link_bytes_per_s_in, 3);
        assert_int_equal(s->n_clients, 1);
        assert_int_equal(s->clients[0].pid, 4242);
        assert_int_equal(s->clients[0].waiting, 2);
        assert_int_equal(strlen(s->clients[0].name), 64);
        assert_int_equal(s->n_buffers, 1);
        assert_int_equal(s->buffers[0].buffer_id, 99);
        assert_int_equal(s->buffers[0].state, GMD_STATE_MOVING_IN);
        assert_int_equal(s->buffers[0].flags, GMD_ALLOC_SPILLABLE);
        assert_true(s->buffers[0].acquired);
        assert_true(s->buffers[0].parked);
        assert_int_equal(s->clients[0].parked_bytes, 1 << 19);
        assert_int_equal(s->clients[0].vram_bytes, 1 << 19);
        assert_int_equal(s->clients[0].host_bytes, UINT64_C(9) << 32);
        assert_int_equal(s->total_clients, 1);
        assert_null(gmd_status_free(s));
        assert_null(gmd_status_free(NULL));
        assert_int_equal(gmd_query_status(st->client, (gmd_status_what)7, 0,
                                          &s), -EINVAL);
}

typedef struct worker {
        gmd_client *client;
        size_t size;
        int result;
        size_t got_size;
        bool data_ok;
} worker;

static void *worker_main(void *arg)
{
        worker *w = arg;
        gmd_buffer *b = NULL;
        uint8_t *p;

        w->result = gmd_alloc(w->client, w->size, 0, 0, GMD_WAIT_FOREVER, &b);
        if (w->result < 0)
                return NULL;
        w->got_size = gmd_buffer_size(b);
        p = gmd_buffer_ptr(b);
        memset(p, (int)(w->size >> 12), w->got_size);
        w->data_ok = p[0] == (uint8_t)(w->size >> 12) &&
                     p[w->got_size - 1] == (uint8_t)(w->size >> 12);
        w->result = gmd_free(w->client, b);
        return NULL;
}

static void test_concurrent_allocs(void **ctx)
{
        state *st = *ctx;
        pthread_t threads[4];
        worker workers[4];

        assert_int_equal(connect_fake(st), 0);
        /* The fake holds all four and answers the last one first. */
        fake_set_mode(&st->fake, FAKE_BATCH, 4);
        for (int i = 0; i < 4; i++) {
                workers[i] = (worker){ .client = st->client,
                                       .size = (size_t)(i + 1) * 4096 * 3 };
                assert_int_equal(pthread_create(&threads[i], NULL, worker_main,
                                                &workers[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
                pthread_join(threads[i], NULL);
                assert_int_equal(workers[i].result, 0);
                assert_int_equal(workers[i].got_size, workers[i].size);
                assert_true(workers[i].data_ok);
        }
        assert_int_equal(st->fake.n_frees, 4);
}

/* ---- legacy IPC buffers ------------------------------------------------ */

/* A stand-in for the cuda mapper's IPC calls on top of the sim mapper:
 * opening maps 2 MiB of anonymous memory, and each call notes how many
 * FREEs the fake had seen, to show the close comes first. */
static struct {
        fake_daemon *fake;
        gmd_mapper_ops ops;
        unsigned opens, closes;
        uint8_t handle[64];
        unsigned open_device;
        void *addr;
        unsigned frees_at_close;
} ipc_mock;

static int mock_ipc_open(gmd_mapper *mapper, unsigned device,
                         const uint8_t handle[64], void **ret_addr)
{
        void *p = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

        if (p == MAP_FAILED)
                return -errno;
        ipc_mock.opens++;
        memcpy(ipc_mock.handle, handle, 64);
        ipc_mock.open_device = device;
        ipc_mock.addr = p;
        *ret_addr = p;
        return 0;
}

static int mock_ipc_close(gmd_mapper *mapper, unsigned device, void *addr)
{
        pthread_mutex_lock(&ipc_mock.fake->lock);
        ipc_mock.frees_at_close = ipc_mock.fake->n_frees;
        pthread_mutex_unlock(&ipc_mock.fake->lock);
        ipc_mock.closes++;
        return munmap(addr, 2 << 20) < 0 ? -errno : 0;
}

/* Connect and give the client's sim mapper the mock IPC calls. */
static void connect_with_ipc(state *st)
{
        assert_int_equal(connect_fake(st), 0);
        memset(&ipc_mock, 0, sizeof(ipc_mock));
        ipc_mock.fake = &st->fake;
        ipc_mock.ops = *st->client->mapper->ops;
        ipc_mock.ops.ipc_open = mock_ipc_open;
        ipc_mock.ops.ipc_close = mock_ipc_close;
        st->client->mapper->ops = &ipc_mock.ops;
}

static void test_ipc_alloc_free(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b = NULL;

        connect_with_ipc(st);
        fake_set_mode(&st->fake, FAKE_IPC, 0);
        assert_int_equal(gmd_alloc(st->client, 2 << 20, 0, GMD_ALLOC_LEGACY_IPC,
                                   0, &b), 0);
        assert_int_equal(ipc_mock.opens, 1);
        assert_int_equal(ipc_mock.handle[0], 1);
        assert_int_equal(ipc_mock.handle[63], 64);
        assert_ptr_equal(gmd_buffer_ptr(b), ipc_mock.addr);
        memset(gmd_buffer_ptr(b), 1, 2 << 20);
        /* Freed, not parked, and closed before the FREE left. */
        assert_int_equal(gmd_free(st->client, b), 0);
        assert_int_equal(ipc_mock.closes, 1);
        assert_int_equal(ipc_mock.frees_at_close, 0);
        assert_int_equal(st->fake.n_frees, 1);
        assert_int_equal(fake_count(&st->fake, GMD__MSG_TYPE__MSG_PARK), 0);
}

static void test_ipc_revoke(void **ctx)
{
        state *st = *ctx;
        gmd_status *status = NULL;
        gmd_buffer *b = NULL;

        connect_with_ipc(st);
        fake_set_mode(&st->fake, FAKE_IPC, 0);
        assert_int_equal(gmd_alloc(st->client, 2 << 20, 0, GMD_ALLOC_LEGACY_IPC,
                                   0, &b), 0);
        /* The daemon cannot move it: a remap is refused, not applied. */
        assert_int_equal(fake_remap(&st->fake, gmd_buffer_id(b), 1,
                                    GMD_TIER_HOST), 0);
        assert_true(fake_wait_acks(&st->fake, 1));
        assert_int_equal(st->fake.ack_result, -EOPNOTSUPP);
        assert_int_equal(fake_revoke(&st->fake, gmd_buffer_id(b), "gone"), 0);
        /* Packets are handled in order: the revoke is applied. */
        assert_int_equal(gmd_query_status(st->client, GMD_STATUS_POOLS, 0,
                                          &status), 0);
        gmd_status_free(status);
        assert_int_equal(ipc_mock.closes, 1);
        assert_int_equal(gmd_acquire(st->client, b, 0), GMD_EREVOKED);
        assert_int_equal(gmd_free(st->client, b), 0);
        assert_int_equal(ipc_mock.closes, 1);
}

static void test_ipc_malformed(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b = NULL;

        connect_with_ipc(st);
        fake_set_mode(&st->fake, FAKE_IPC_BAD_LENGTH, 0);
        assert_int_equal(gmd_alloc(st->client, 2 << 20, 0, GMD_ALLOC_LEGACY_IPC,
                                   0, &b), GMD_EPROTO);
        assert_non_null(strstr(gmd_last_error(), "not 64 bytes"));
        assert_null(b);
        assert_int_equal(ipc_mock.opens, 0);
}

static void test_ipc_and_segments(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b = NULL;

        connect_with_ipc(st);
        fake_set_mode(&st->fake, FAKE_IPC_AND_SEGMENTS, 0);
        assert_int_equal(gmd_alloc(st->client, 2 << 20, 0, GMD_ALLOC_LEGACY_IPC,
                                   0, &b), GMD_EPROTO);
        assert_non_null(strstr(gmd_last_error(),
                               "both an ipc_handle and segments"));
        assert_int_equal(ipc_mock.opens, 0);
}

static void test_ipc_without_ipc_mapper(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b = NULL;

        assert_int_equal(connect_fake(st), 0);
        /* Asked for: refused before anything is sent. */
        assert_int_equal(gmd_alloc(st->client, 2 << 20, 0, GMD_ALLOC_LEGACY_IPC,
                                   0, &b), GMD_ENOTSUP);
        assert_non_null(strstr(gmd_last_error(), "cuda backend"));
        assert_int_equal(fake_count(&st->fake, GMD__MSG_TYPE__MSG_ALLOC), 0);
        /* Sent anyway by the daemon: the buffer goes back with FREE. */
        fake_set_mode(&st->fake, FAKE_IPC, 0);
        assert_int_equal(gmd_alloc(st->client, 2 << 20, 0, 0, 0, &b),
                         GMD_ENOTSUP);
        assert_null(b);
        assert_int_equal(st->fake.n_frees, 1);
}

/* Many threads sending without waiting: every answer is counted, one
 * flush sees them all answered, and nothing is owed after it. */
#define NOWAIT_THREADS 4
#define NOWAIT_EACH 500

typedef struct nowait_arg {
        gmd_client *client;
        gmd_buffer *buffer;
        int failures;
} nowait_arg;

static void *nowait_thread(void *p)
{
        nowait_arg *a = p;

        for (int i = 0; i < NOWAIT_EACH; i++) {
                if (gmd_pageout_nowait(a->client, a->buffer) != 0)
                        a->failures++;
                if (gmd_prefetch_nowait(a->client, i % 2 ? a->buffer : NULL) != 0)
                        a->failures++;
        }
        return NULL;
}

static void test_nowait_threads(void **ctx)
{
        state *st = *ctx;
        pthread_t threads[NOWAIT_THREADS];
        nowait_arg args[NOWAIT_THREADS];
        gmd_buffer *b = NULL;
        unsigned owed;

        assert_int_equal(connect_fake(st), 0);
        assert_int_equal(gmd_alloc(st->client, 4096, 0, 0, 0, &b), 0);
        for (int i = 0; i < NOWAIT_THREADS; i++) {
                args[i] = (nowait_arg){ .client = st->client, .buffer = b };
                assert_int_equal(pthread_create(&threads[i], NULL,
                                                nowait_thread, &args[i]), 0);
        }
        for (int i = 0; i < NOWAIT_THREADS; i++) {
                pthread_join(threads[i], NULL);
                assert_int_equal(args[i].failures, 0);
        }
        assert_int_equal(gmd_flush(st->client, 5000), 0);
        pthread_mutex_lock(&st->client->lock);
        owed = st->client->nowaits;
        pthread_mutex_unlock(&st->client->lock);
        assert_int_equal(owed, 0);
        assert_true(fake_wait_type(&st->fake, GMD__MSG_TYPE__MSG_PREFETCH,
                                   NOWAIT_THREADS * NOWAIT_EACH));
        assert_int_equal(gmd_free(st->client, b), 0);
}

/* An answer of the wrong type to a request nobody waits for is a protocol
 * error like any other: the connection closes, the flush reports it, and
 * the record of the request is not leaked (sanitizer build). */
static void test_nowait_wrong_reply(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b = NULL;

        assert_int_equal(connect_fake(st), 0);
        assert_int_equal(gmd_alloc(st->client, 4096, 0, 0, 0, &b), 0);
        fake_set_mode(&st->fake, FAKE_WRONG_TYPE, 0);
        assert_int_equal(gmd_pageout_nowait(st->client, b), 0);
        assert_int_equal(gmd_flush(st->client, -1), GMD_EPROTO);
        assert_non_null(strstr(gmd_last_error(), "wrong reply type"));
        assert_non_null(strstr(gmd_last_error(), "gmd_pageout_nowait"));
        assert_int_equal(gmd_flush(st->client, 0), GMD_EPROTO);
        assert_int_equal(gmd_prefetch_nowait(st->client, b), GMD_EPROTO);
        assert_int_equal(gmd_free(st->client, b), GMD_EPROTO);
}

/* ---- restart recovery ---------------------------------------------- */

/* The fake serves a path with recovery on; the cache is off, so every
 * gmd_free is a FREE the fake counts. */
static int setup_listen(void **ctx)
{
        state *st;

        setenv(GMD_CACHE_ENV, "0", 1);
        if (setup(ctx) < 0)
                return -1;
        st = *ctx;
        snprintf(st->path, sizeof(st->path), "/tmp/gmd-fake-%d-%p.sock",
                 (int)getpid(), (void *)st);
        if (fake_listen(&st->fake, st->path) < 0)
                return -1;
        st->fake.recovery = true;
        return 0;
}

static void connect_path(state *st)
{
        assert_int_equal(gmd_connect(st->path, "test-client", &st->client), 0);
}

/* Wait (5 s at most) until the client resumed `n` times and is up. */
static void wait_resumed(state *st, uint64_t n)
{
        for (int i = 0; i < 500; i++) {
                bool up;

                pthread_mutex_lock(&st->client->lock);
                up = st->client->state == GMD_CONN_UP &&
                     st->client->gen == 1 + n;
                pthread_mutex_unlock(&st->client->lock);
                if (up)
                        return;
                usleep(10000);
        }
        fail_msg("the client did not resume");
}

static bool bytes_are(const gmd_buffer *b, uint8_t v)
{
        const uint8_t *p = gmd_buffer_ptr(b);

        for (size_t i = 0; i < gmd_buffer_size(b); i++)
                if (p[i] != v)
                        return false;
        return true;
}

/* The daemon dies and comes back with the buffers: pointers work through
 * the gap, the claims carry the very memory and the leases, and the
 * buffers go on as before. */
static void test_restart_resumes(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *held = NULL, *spilled = NULL;
        gmd_status *status = NULL;

        connect_path(st);
        assert_int_equal(gmd_alloc(st->client, 64 << 10, 0, 0, 0, &held), 0);
        assert_int_equal(gmd_alloc(st->client, 64 << 10, 0, GMD_ALLOC_SPILLABLE,
                                   0, &spilled), 0);
        memset(gmd_buffer_ptr(held), 0x11, 64 << 10);
        memset(gmd_buffer_ptr(spilled), 0x22, 64 << 10);
        assert_int_equal(fake_remap(&st->fake, gmd_buffer_id(spilled), 1,
                                    GMD_TIER_HOST), 0);
        assert_true(fake_wait_acks(&st->fake, 1));
        assert_int_equal(gmd_release(st->client, spilled), 0);

        fake_set(&st->fake, accept_paused, true);
        fake_drop(&st->fake);
        /* No daemon: the bytes are there, and writable. */
        usleep(50000);
        assert_true(bytes_are(held, 0x11));
        assert_true(bytes_are(spilled, 0x22));
        memset(gmd_buffer_ptr(held), 0x33, 64 << 10);
        fake_set(&st->fake, accept_paused, false);
        wait_resumed(st, 1);

        pthread_mutex_lock(&st->fake.lock);
        assert_int_equal(st->fake.n_resumes, 1);
        assert_int_equal(st->fake.n_resume_bad, 0);
        assert_int_equal(st->fake.n_resume_last, 1);
        assert_int_equal(st->fake.n_claims, 2);
        assert_int_equal(st->fake.claims[0].id, gmd_buffer_id(held));
        assert_true(st->fake.claims[0].acquired);
        assert_int_equal(st->fake.claims[0].n_segments, 1);
        assert_int_equal(st->fake.claims[0].same_memory, 1);
        assert_int_equal(st->fake.claims[0].tier, GMD_TIER_VRAM);
        assert_int_equal(st->fake.claims[1].id, gmd_buffer_id(spilled));
        assert_false(st->fake.claims[1].acquired);
        assert_int_equal(st->fake.claims[1].same_memory, 1);
        assert_int_equal(st->fake.claims[1].tier, GMD_TIER_HOST);
        pthread_mutex_unlock(&st->fake.lock);
        assert_int_equal(st->client->client_id, 2);

        assert_true(bytes_are(held, 0x33));
        assert_int_equal(gmd_acquire(st->client, spilled, 1000), 0);
        assert_true(bytes_are(spilled, 0x22));
        assert_int_equal(gmd_query_status(st->client, GMD_STATUS_POOLS, 0,
                                          &status), 0);
        gmd_status_free(status);
        /* And a second restart claims with the second session. */
        fake_drop(&st->fake);
        wait_resumed(st, 2);
        assert_int_equal(st->fake.n_resume_bad, 0);
        assert_int_equal(gmd_free(st->client, held), 0);
        assert_int_equal(gmd_free(st->client, spilled), 0);
        assert_int_equal(st->fake.n_frees, 2);
}

/* Wait (5 s at most) until the client saw its connection end. */
static void wait_away(state *st)
{
        for (int i = 0; i < 500; i++) {
                bool away;

                pthread_mutex_lock(&st->client->lock);
                away = st->client->state == GMD_CONN_AWAY;
                pthread_mutex_unlock(&st->client->lock);
                if (away)
                        return;
                usleep(10000);
        }
        fail_msg("the client did not see the daemon go");
}

/* The plan the fake heard last: `planner` and `kept`, on the connection
 * it serves now. */
static void assert_plan(state *st, const char *planner, uint64_t kept)
{
        pthread_mutex_lock(&st->fake.lock);
        assert_string_equal(st->fake.plan_planner, planner);
        assert_int_equal(st->fake.plan_kept, kept);
        assert_int_equal(st->fake.plan_session, st->fake.session_id);
        pthread_mutex_unlock(&st->fake.lock);
}

/* A restarted daemon knows no plan: the job's last one (gmd_report_plan)
 * is reported again on the resumed connection; one reported while the
 * daemon is away goes once it is back; none, or one taken back (an empty
 * report), is not sent. */
static void test_restart_sends_plan(void **ctx)
{
        state *st = *ctx;
        gmd_status *status = NULL;

        connect_path(st);
        fake_drop(&st->fake);
        wait_resumed(st, 1);
        assert_int_equal(fake_count(&st->fake, GMD__MSG_TYPE__MSG_PLAN), 0);

        assert_int_equal(gmd_report_plan(st->client, "fit", 1000, 2, 3, 4), 0);
        assert_true(fake_wait_type(&st->fake, GMD__MSG_TYPE__MSG_PLAN, 1));
        fake_drop(&st->fake);
        wait_resumed(st, 2);
        assert_true(fake_wait_type(&st->fake, GMD__MSG_TYPE__MSG_PLAN, 2));
        assert_plan(st, "fit", 1000);

        /* Reported with no daemon: kept for the one that comes. */
        fake_set(&st->fake, accept_paused, true);
        fake_drop(&st->fake);
        wait_away(st);
        assert_int_equal(gmd_report_plan(st->client, "fit", 2000, 0, 0, 0), 0);
        assert_int_equal(fake_count(&st->fake, GMD__MSG_TYPE__MSG_PLAN), 2);
        fake_set(&st->fake, accept_paused, false);
        wait_resumed(st, 3);
        assert_true(fake_wait_type(&st->fake, GMD__MSG_TYPE__MSG_PLAN, 3));
        assert_plan(st, "fit", 2000);
        assert_int_equal(fake_count(&st->fake, GMD__MSG_TYPE__MSG_PLAN), 3);

        /* Taken back: nothing to say to the next daemon. */
        assert_int_equal(gmd_report_plan(st->client, NULL, 0, 0, 0, 0), 0);
        assert_true(fake_wait_type(&st->fake, GMD__MSG_TYPE__MSG_PLAN, 4));
        assert_plan(st, "", 0);
        fake_drop(&st->fake);
        wait_resumed(st, 4);
        /* Answered on the new connection: what the resume sent is in. */
        assert_int_equal(gmd_query_status(st->client, GMD_STATUS_POOLS, 0,
                                          &status), 0);
        gmd_status_free(status);
        assert_int_equal(fake_count(&st->fake, GMD__MSG_TYPE__MSG_PLAN), 4);
}

typedef struct gap_call {
        gmd_client *client;
        int alloc_r, status_r, acquire_r;
        gmd_buffer *b, *acquired;
} gap_call;

static void *gap_main(void *arg)
{
        gap_call *g = arg;
        gmd_status *status = NULL;

        g->alloc_r = gmd_alloc(g->client, 8192, 0, 0, GMD_WAIT_FOREVER, &g->b);
        g->acquire_r = gmd_acquire(g->client, g->acquired, 5000);
        g->status_r = gmd_query_status(g->client, GMD_STATUS_POOLS, 0, &status);
        gmd_status_free(status);
        return NULL;
}

/* Calls made while the daemon is away wait and complete once it is back;
 * one in flight when it died (the daemon read it and did nothing) goes
 * again; a call whose own deadline passes in the gap times out. */
static void test_restart_calls_wait(void **ctx)
{
        state *st = *ctx;
        gap_call g = { 0 };
        gmd_buffer *b = NULL, *c = NULL;
        pthread_t t;

        connect_path(st);
        assert_int_equal(gmd_alloc(st->client, 8192, 0, 0, 0, &c), 0);
        assert_int_equal(gmd_release(st->client, c), 0);
        g.client = st->client;
        g.acquired = c;

        fake_set(&st->fake, drop_on_type, GMD__MSG_TYPE__MSG_ALLOC);
        assert_int_equal(gmd_alloc(st->client, 8192, 0, 0, GMD_WAIT_FOREVER, &b), 0);
        /* c's, the one the daemon dropped, and that one again */
        assert_int_equal(fake_count(&st->fake, GMD__MSG_TYPE__MSG_ALLOC), 3);
        wait_resumed(st, 1);

        fake_set(&st->fake, accept_paused, true);
        fake_drop(&st->fake);
        usleep(50000);
        assert_int_equal(pthread_create(&t, NULL, gap_main, &g), 0);
        usleep(100000);
        assert_null(g.b);
        /* Its own deadline passes while the daemon is away. */
        assert_int_equal(gmd_acquire(st->client, c, 50), GMD_ETIMEDOUT);
        assert_non_null(strstr(gmd_last_error(), "not back within"));
        fake_set(&st->fake, accept_paused, false);
        pthread_join(t, NULL);
        assert_int_equal(g.alloc_r, 0);
        assert_int_equal(g.acquire_r, 0);
        assert_int_equal(g.status_r, 0);
        assert_non_null(g.b);
        assert_int_equal(gmd_free(st->client, g.b), 0);
        assert_int_equal(gmd_free(st->client, b), 0);
        assert_int_equal(gmd_free(st->client, c), 0);
}

/* A buffer the restarted daemon could not keep is revoked with a
 * sentence naming it and why; no FREE names it; the rest go on. */
static void test_restart_lost_buffer(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *lost = NULL, *kept = NULL;
        gmd_status *status = NULL;
        char name[32];

        connect_path(st);
        assert_int_equal(gmd_alloc(st->client, 8192, 0, 0, 0, &lost), 0);
        assert_int_equal(gmd_alloc(st->client, 8192, 0, 0, 0, &kept), 0);
        memset(gmd_buffer_ptr(kept), 7, 8192);
        fake_set(&st->fake, lose_id, gmd_buffer_id(lost));
        fake_drop(&st->fake);
        wait_resumed(st, 1);
        assert_int_equal(gmd_query_status(st->client, GMD_STATUS_POOLS, 0,
                                          &status), 0);
        gmd_status_free(status);

        assert_int_equal(gmd_release(st->client, lost), GMD_EREVOKED);
        snprintf(name, sizeof(name), "buffer %llu",
                 (unsigned long long)gmd_buffer_id(lost));
        assert_non_null(strstr(gmd_last_error(), name));
        assert_non_null(strstr(gmd_last_error(), "the fake lost its bytes"));
        assert_int_equal(fake_maps_at(gmd_buffer_ptr(lost), 8192), 0);
        assert_true(bytes_are(kept, 7));
        assert_int_equal(gmd_free(st->client, lost), 0);
        assert_int_equal(st->fake.n_frees, 0);
        assert_int_equal(gmd_free(st->client, kept), 0);
        assert_int_equal(st->fake.n_frees, 1);
}

/* The lost sentence, on a buffer's calls. */
static void expect_lost(state *st, gmd_buffer *b, const char *why)
{
        char name[48];

        assert_int_equal(gmd_acquire(st->client, b, 0), GMD_EREVOKED);
        snprintf(name, sizeof(name), "buffer %llu is lost",
                 (unsigned long long)gmd_buffer_id(b));
        assert_non_null(strstr(gmd_last_error(), "gpu-memd restarted without "
                               "keeping this client's buffers"));
        assert_non_null(strstr(gmd_last_error(), name));
        assert_non_null(strstr(gmd_last_error(), why));
}

/* A daemon that answers the resume with ERR_UNSUPPORTED keeps nothing. */
static void test_restart_unsupported(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b = NULL, *again = NULL;

        connect_path(st);
        assert_int_equal(gmd_alloc(st->client, 8192, 0, 0, 0, &b), 0);
        fake_set(&st->fake, resume_unsupported, true);
        fake_drop(&st->fake);
        wait_resumed(st, 1);
        expect_lost(st, b, "this fake has no restart recovery");
        assert_int_equal(gmd_free(st->client, b), 0);
        assert_int_equal(gmd_alloc(st->client, 8192, 0, 0, 0, &again), 0);
        assert_int_equal(gmd_free(st->client, again), 0);
}

/* A daemon that gave no token is not asked: everything is lost. */
static void test_restart_without_recovery(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b = NULL;

        st->fake.recovery = false;
        connect_path(st);
        assert_int_equal(gmd_alloc(st->client, 8192, 0, 0, 0, &b), 0);
        fake_drop(&st->fake);
        wait_resumed(st, 1);
        expect_lost(st, b, "had no restart recovery");
        assert_int_equal(fake_count(&st->fake, GMD__MSG_TYPE__MSG_RESUME), 0);
        assert_int_equal(gmd_free(st->client, b), 0);
}

/* A fresh daemon (it kept nothing) numbers buffers anew: a call on an old
 * buffer made in the gap must not reach the new buffer of that number. */
static void test_restart_fresh_numbers(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *old = NULL, *fresh = NULL;

        connect_path(st);
        assert_int_equal(gmd_alloc(st->client, 8192, 0, 0, 0, &old), 0);
        assert_int_equal(gmd_release(st->client, old), 0);
        assert_int_equal(gmd_buffer_id(old), 100);
        fake_set(&st->fake, fresh, true);
        fake_set(&st->fake, accept_paused, true);
        fake_drop(&st->fake);
        usleep(50000);
        assert_int_equal(gmd_pageout_nowait(st->client, old), 0);
        fake_set(&st->fake, accept_paused, false);
        wait_resumed(st, 1);
        assert_int_equal(gmd_flush(st->client, 5000), GMD_EREVOKED);
        assert_non_null(strstr(gmd_last_error(), "a fresh start"));
        assert_int_equal(fake_count(&st->fake, GMD__MSG_TYPE__MSG_PAGEOUT), 0);
        assert_int_equal(gmd_alloc(st->client, 8192, 0, 0, 0, &fresh), 0);
        assert_int_equal(gmd_buffer_id(fresh), 100);
        expect_lost(st, old, "a fresh start");
        assert_int_equal(gmd_free(st->client, old), 0);
        assert_int_equal(st->fake.n_frees, 0);
        assert_int_equal(gmd_free(st->client, fresh), 0);
}

/* A free the daemon carried out before it died unanswered is done. */
static void test_restart_free_in_flight(void **ctx)
{
        state *st = *ctx;
        gmd_buffer *b = NULL;

        connect_path(st);
        assert_int_equal(gmd_alloc(st->client, 8192, 0, 0, 0, &b), 0);
        fake_set(&st->fake, drop_after_free, true);
        assert_int_equal(gmd_free(st->client, b), 0);
        assert_int_equal(st->fake.n_frees, 1);
        assert_int_equal(st->fake.claims[0].id, 100);
}

/* A daemon that says it stops for good is not waited for. */
static void test_shutdown_is_final(void **ctx)
{
        state *st = *ctx;
        gmd_status *status = NULL;
        gmd_buffer *b = NULL;

        connect_path(st);
        assert_int_equal(gmd_alloc(st->client, 8192, 0, 0, 0, &b), 0);
        assert_int_equal(fake_shutdown(&st->fake, "told to stop"), 0);
        assert_int_equal(gmd_query_status(st->client, GMD_STATUS_POOLS, 0,
                                          &status), GMD_ECONN);
        assert_string_equal(gmd_last_error(), "gpu-memd is stopping: told to stop");
        usleep(100000);
        assert_int_equal(fake_count(&st->fake, GMD__MSG_TYPE__MSG_HELLO), 1);
        assert_int_equal(gmd_free(st->client, b), GMD_ECONN);
}

/* A daemon that stops with packets of the client's unread resets the
 * connection; its notice, sent before, still says it stops for good. */
static void test_shutdown_with_unread(void **ctx)
{
        state *st = *ctx;
        gmd_status *status = NULL;
        gmd_buffer *b = NULL;

        connect_path(st);
        assert_int_equal(gmd_alloc(st->client, 8192, 0, 0, 0, &b), 0);
        fake_go_deaf(&st->fake);
        assert_int_equal(gmd_pageout_nowait(st->client, b), 0);
        assert_int_equal(fake_shutdown_close(&st->fake, "told to stop"), 0);
        fake_set(&st->fake, deaf, false);
        /* The I/O thread, not a send of ours, meets the reset first. */
        for (gmd_conn_state s = GMD_CONN_UP; s == GMD_CONN_UP; usleep(1000)) {
                pthread_mutex_lock(&st->client->lock);
                s = st->client->state;
                pthread_mutex_unlock(&st->client->lock);
        }
        assert_int_equal(gmd_query_status(st->client, GMD_STATUS_POOLS, 0,
                                          &status), GMD_ECONN);
        assert_string_equal(gmd_last_error(), "gpu-memd is stopping: told to stop");
        usleep(100000);
        assert_int_equal(fake_count(&st->fake, GMD__MSG_TYPE__MSG_HELLO), 1);
}

/* $GPU_MEMD_RECONNECT_S=0: a lost connection fails at once, as before. */
static void test_reconnect_off(void **ctx)
{
        state *st = *ctx;
        gmd_status *status = NULL;
        gmd_buffer *b = NULL;

        setenv(GMD_RECONNECT_ENV, "0", 1);
        connect_path(st);
        assert_int_equal(gmd_alloc(st->client, 8192, 0, 0, 0, &b), 0);
        fake_drop(&st->fake);
        assert_int_equal(gmd_query_status(st->client, GMD_STATUS_POOLS, 0,
                                          &status), GMD_ECONN);
        assert_string_equal(gmd_last_error(), "gpu-memd closed the connection");
        assert_int_equal(fake_count(&st->fake, GMD__MSG_TYPE__MSG_HELLO), 1);
        assert_int_equal(gmd_free(st->client, b), GMD_ECONN);

        setenv(GMD_RECONNECT_ENV, "soon", 1);
        assert_int_equal(gmd_connect(st->path, NULL, &(gmd_client *){ NULL }),
                         -EINVAL);
        assert_non_null(strstr(gmd_last_error(), GMD_RECONNECT_ENV));
}

/* The window passes with no daemon back: the documented error. */
static void test_reconnect_window(void **ctx)
{
        state *st = *ctx;
        gmd_status *status = NULL;
        gmd_buffer *b = NULL;
        struct timespec t0, t1;
        double waited;

        setenv(GMD_RECONNECT_ENV, "0.3", 1);
        connect_path(st);
        assert_int_equal(gmd_alloc(st->client, 8192, 0, 0, 0, &b), 0);
        fake_set(&st->fake, accept_paused, true);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        fake_drop(&st->fake);
        assert_int_equal(gmd_query_status(st->client, GMD_STATUS_POOLS, 0,
                                          &status), GMD_ECONN);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        waited = (double)(t1.tv_sec - t0.tv_sec) +
                 (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        assert_true(waited >= 0.25 && waited < 3);
        assert_non_null(strstr(gmd_last_error(), "gpu-memd went away and did "
                               "not come back within 0.3 s"));
        /* Its mapping stays, as after any lost connection. */
        assert_int_equal(fake_maps_at(gmd_buffer_ptr(b), 8192), 1);
        assert_int_equal(gmd_free(st->client, b), GMD_ECONN);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
#define T_NOCACHE(f) cmocka_unit_test_setup_teardown(f, setup_nocache, teardown)
#define T_LISTEN(f) cmocka_unit_test_setup_teardown(f, setup_listen, teardown)
        const struct CMUnitTest tests[] = {
                T(test_hello),
                T(test_hello_version_mismatch),
                T(test_hello_unknown_backend),
                T(test_hello_cuda_without_cuda),
                T(test_connect_errors),
                T_NOCACHE(test_alloc_write_remap),
                T(test_swappable_out_unmapped_then_back),
                T(test_remap_unknown_buffer),
                T(test_revoke),
                T(test_error_replies),
                T(test_daemon_hangup),
                T(test_reply_to_unknown_request),
                T(test_garbage_reply),
                T(test_map_failure_frees),
                T(test_status),
                T_NOCACHE(test_concurrent_allocs),
                T(test_ipc_alloc_free),
                T(test_ipc_revoke),
                T(test_ipc_malformed),
                T(test_ipc_and_segments),
                T(test_ipc_without_ipc_mapper),
                T(test_nowait_threads),
                T(test_nowait_wrong_reply),
                T_LISTEN(test_restart_resumes),
                T_LISTEN(test_restart_calls_wait),
                T_LISTEN(test_restart_sends_plan),
                T_LISTEN(test_restart_lost_buffer),
                T_LISTEN(test_restart_unsupported),
                T_LISTEN(test_restart_without_recovery),
                T_LISTEN(test_restart_fresh_numbers),
                T_LISTEN(test_restart_free_in_flight),
                T_LISTEN(test_shutdown_is_final),
                T_LISTEN(test_shutdown_with_unread),
                T_LISTEN(test_reconnect_off),
                T_LISTEN(test_reconnect_window),
        };
#undef T
#undef T_NOCACHE
#undef T_LISTEN
        return cmocka_run_group_tests(tests, NULL, NULL);
}
