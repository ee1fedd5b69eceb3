/*
 * test_limits — one local user must not be able to lock the others out of
 * gpu-memd: the daemon's file descriptors (one per
 * buffer on sim) bounded per user and, when they run out anyway, a clear
 * error and a paused accept instead of a busy loop; connection slots per
 * user, a few kept for administrators, a hello deadline, and a refused
 * client told why; the bytes of unread replies bounded per connection and
 * per user; a status listing paged as before now that it copies only the
 * page it shows.
 *
 * Clients of other users are made by connecting with the effective uid set
 * to them for the moment of connect() (the daemon reads SO_PEERCRED, which
 * the kernel takes from the connecting process's credentials then); that
 * needs root, so those cases are skipped without it. The daemon's open-file
 * limit is lowered from here with prlimit(2). Sizes are small (4K
 * granules) and no assertion depends on how fast the machine is.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "gpumem.pb-c.h"
#include "harness.h"
#include "raw_client.h"
#include "wire.h"

#define NOBODY  ((uid_t)65534)
#define OTHER   ((uid_t)65533)     /* a second unprivileged user */
#define GRANULE 4096


/* harness_wait_log, for a yes or no: the line it returns is freed. */
static bool log_seen(const harness *h, const char *needle, int timeout_ms)
{
        char *line = harness_wait_log(h, needle, timeout_ms);
        bool seen = line != NULL;

        free(line);
        return seen;
}

/* Small sim daemon with 4K granules, so many buffers fit; `extra` adds
 * config lines. */
static void start(harness_fixture *f, const char *extra)
{
        char config[1024];

        snprintf(config, sizeof(config), "[sim]\ngranularity = 4K\n"
                 "[daemon]\nsocket_mode = 0666\n%s", extra ? extra : "");
        harness_start_small(&f->h, config);
        /* Let other users reach the socket: the temp dir is 0700. */
        assert_int_equal(chmod(f->h.dir, 0711), 0);
}

static bool skip_unless_root(void)
{
        if (geteuid() == 0)
                return false;
        print_message("skipped: connecting as other users needs root\n");
        skip();
        return true;
}

/* Become `uid` for the next connect()s (NOBODY..): euid only, undone by
 * as_root(). */
static void as_user(uid_t uid)
{
        assert_int_equal(setegid((gid_t)uid), 0);
        assert_int_equal(seteuid(uid), 0);
}

static void as_root(void)
{
        assert_int_equal(seteuid(0), 0);
        assert_int_equal(setegid(0), 0);
}

/* A connection that says nothing. */
static int connect_silent(const harness_fixture *f)
{
        int fd = harness_connect_raw(&f->h);

        if (fd < 0)
                fail_msg("connect %s: %s", f->h.socket_path, strerror(errno));
        return fd;
}

/* What the daemon said on `fd` within ms: the type of the first packet,
 * with an ErrorReply's code and message; 0 when it closed the connection
 * without a word; -1 when it said nothing in time. */
static int read_verdict(int fd, int ms, int *ret_code, char *msg, size_t len)
{
        static uint8_t buf[GMD_WIRE_MAX_PACKET];
        struct pollfd p = { .fd = fd, .events = POLLIN };
        gmd_wire_packet packet;
        const char *reason;
        int r;

        msg[0] = '\0';
        *ret_code = -1;
        if (poll(&p, 1, ms) != 1)
                return -1;
        r = gmd_wire_recv(fd, buf, &packet, &reason);
        if (r <= 0)
                return 0;
        gmd_wire_packet_close_fds(&packet);
        if (packet.header.type == GMD__MSG_TYPE__MSG_ERROR_REPLY) {
                Gmd__ErrorReply *e = gmd__error_reply__unpack(
                        NULL, packet.header.length, packet.payload);

                assert_non_null(e);
                assert_int_equal(packet.header.request_id, 0);
                *ret_code = e->code;
                snprintf(msg, len, "%s", e->message ? e->message : "");
                gmd__error_reply__free_unpacked(e, NULL);
        }
        return packet.header.type;
}

/* The connection on `fd` is refused with ERR_LIMIT and a message that
 * contains `needle`, then closed. */
static void expect_refused(const harness_fixture *f, int fd, const char *needle)
{
        char msg[512];
        int code, t = read_verdict(fd, 5000, &code, msg, sizeof(msg));

        if (t != GMD__MSG_TYPE__MSG_ERROR_REPLY || code != GMD__ERROR_CODE__ERR_LIMIT ||
            !strstr(msg, needle))
                fail_msg("expected a refusal naming '%s'; got packet %d code %d "
                         "'%s'; log:\n%s", needle, t, code, msg,
                         harness_read_log(&f->h));
        assert_int_equal(read_verdict(fd, 5000, &code, msg, sizeof(msg)), 0);
        close(fd);
}

/* gmd_connect as `uid` fails with GMD_ELIMIT and says why. */
static void expect_connect_refused(const harness_fixture *f, uid_t uid, const char *needle)
{
        gmd_client *c = NULL;
        int r;

        as_user(uid);
        r = gmd_connect(f->h.socket_path, "refused", &c);
        as_root();
        if (r != GMD_ELIMIT || !strstr(gmd_last_error(), needle))
                fail_msg("gmd_connect as uid %u: %d '%s', expected GMD_ELIMIT "
                         "naming '%s'", (unsigned)uid, r, gmd_last_error(), needle);
        assert_null(c);
}

static gmd_client *connect_as(const harness_fixture *f, uid_t uid, const char *name)
{
        gmd_client *c = NULL;
        int r;

        as_user(uid);
        r = gmd_connect(f->h.socket_path, name, &c);
        as_root();
        if (r < 0)
                fail_msg("gmd_connect as uid %u: %d %s; log:\n%s", (unsigned)uid, r,
                         gmd_last_error(), harness_read_log(&f->h));
        return c;
}

/* Allocate GRANULE buffers until one fails or `max` are held; returns how
 * many are held, the failure in *ret_err. */
static unsigned alloc_until_refused(gmd_client *c, gmd_buffer **bufs, unsigned max,
                                    int *ret_err)
{
        unsigned n = 0;

        *ret_err = 0;
        while (n < max) {
                int r = gmd_alloc(c, GRANULE, 0, GMD_ALLOC_SWAPPABLE, GMD_NO_WAIT,
                                  &bufs[n]);

                if (r < 0) {
                        *ret_err = r;
                        break;
                }
                n++;
        }
        return n;
}

static void set_daemon_nofile(const harness_fixture *f, rlim_t n)
{
        struct rlimit rl = { n, n };

        if (prlimit(f->h.pid, RLIMIT_NOFILE, &rl, NULL) < 0)
                fail_msg("prlimit(%d, NOFILE, %llu): %s", (int)f->h.pid,
                         (unsigned long long)n, strerror(errno));
}

/* ---- quotas that leak ------------------------------------------------------- */

/* A pageout is held to host_quota like a host allocation: with 32M of host
 * quota, two 16M buffers may be paged out, the third is refused with
 * GMD_EQUOTA saying why, and the user's host bytes stay within it. */
static void test_pageout_host_quota(void **state)
{
        harness_fixture *f = *state;
        gmd_buffer *b[3];
        gmd_client *c;
        gmd_status *st;
        int r;

        start(f, "[users]\nhost_quota = 32M\n");
        c = harness_client(&f->h, "pager");
        for (int i = 0; i < 3; i++) {
                assert_int_equal(gmd_alloc(c, 16 << 20, 0, 0, GMD_NO_WAIT, &b[i]), 0);
                assert_int_equal(gmd_release(c, b[i]), 0);
        }
        assert_int_equal(gmd_pageout(c, b[0]), 0);
        assert_int_equal(gmd_pageout(c, b[1]), 0);    /* in flight: counted */
        r = gmd_pageout(c, b[2]);
        assert_int_equal(r, GMD_EQUOTA);
        if (!strstr(gmd_last_error(), "host quota"))
                fail_msg("the refusal does not say why: %s", gmd_last_error());
        assert_int_equal(gmd_wait(c, NULL, 10000), 0);
        r = gmd_pageout(c, NULL);                     /* all: b[2] is left */
        assert_int_equal(r, GMD_EQUOTA);
        st = harness_status(c);
        assert_true(st->n_clients >= 1);
        for (size_t i = 0; i < st->n_clients; i++)
                if (strcmp(st->clients[i].name, "pager") == 0)
                        assert_true(st->clients[i].host_bytes <= (32u << 20));
        gmd_status_free(st);
        gmd_disconnect(c);
}

/* Parked buffers count in max_buffers_per_client: an unpark (a cache hit
 * in gmd_alloc) can then never take a client past it. Before, a client
 * with a limit of 4 held 12 buffers in use. */
static void test_unpark_within_buffer_limit(void **state)
{
        harness_fixture *f = *state;
        gmd_buffer *small[4], *large[4], *more = NULL;
        gmd_client *c;
        gmd_status *st;
        int r;

        start(f, "[limits]\nmax_buffers_per_client = 4\n");
        c = harness_client(&f->h, "cacher");
        for (int i = 0; i < 4; i++)
                assert_int_equal(gmd_alloc(c, 8192, 0, 0, GMD_NO_WAIT, &small[i]), 0);
        for (int i = 0; i < 4; i++)
                assert_int_equal(gmd_free(c, small[i]), 0);   /* parked */
        /* Another shape: the daemon asks the parked ones back first. */
        for (int i = 0; i < 4; i++) {
                r = gmd_alloc(c, 16384, 0, 0, 5000, &large[i]);
                if (r != 0)
                        fail_msg("allocation %d: %d %s", i, r, gmd_last_error());
        }
        r = gmd_alloc(c, 8192, 0, 0, GMD_NO_WAIT, &more);
        assert_int_equal(r, GMD_ELIMIT);
        if (!strstr(gmd_last_error(), "max_buffers_per_client"))
                fail_msg("the refusal does not name the limit: %s", gmd_last_error());
        st = harness_status(c);
        for (size_t i = 0; i < st->n_clients; i++)
                if (strcmp(st->clients[i].name, "cacher") == 0)
                        assert_true(st->clients[i].buffers <= 4);
        gmd_status_free(st);
        gmd_disconnect(c);
}

/* The protocol itself, as a client that keeps its parked buffers: with a
 * limit of 4, four buffers parked and a fifth allocated, it would hold
 * five in use after UNPARKing them (before: twelve with a limit of 4).
 * Now the fifth allocation waits for the parked ones to come back and,
 * when they do not within reclaim_timeout_ms, is refused naming the
 * limit; the client is asked for them (MSG_RECLAIM). */
static void test_park_unpark_within_buffer_limit(void **state)
{
        harness_fixture *f = *state;
        Gmd__AllocRequest alloc = GMD__ALLOC_REQUEST__INIT;
        Gmd__BufferList park = GMD__BUFFER_LIST__INIT;
        uint64_t ids[4];
        uint32_t next_id = 2;
        bool reclaimed = false;
        raw_client raw;
        raw_msg m;

        start(f, "[limits]\nmax_buffers_per_client = 4\nreclaim_timeout_ms = 300\n");
        raw_init(&raw);
        raw_hello(&raw, &f->h, "raw-parker");
        for (int i = 0; i < 4; i++)
                ids[i] = raw_alloc_release(&raw, &next_id, 8192, (uint64_t)i + 1);
        park.buffer_ids = ids;
        park.n_buffer_ids = 4;
        raw_send(&raw, GMD__MSG_TYPE__MSG_PARK, 0, &park.base);
        alloc.size = 8192;
        alloc.timeout_ms = 5000;
        raw_send(&raw, GMD__MSG_TYPE__MSG_ALLOC, next_id, &alloc.base);
        for (;;) {
                m = raw_recv(&raw, 10000);
                if (m.type == GMD__MSG_TYPE__MSG_RECLAIM) {
                        reclaimed = true;
                        raw_msg_clear(&m);
                        continue;
                }
                break;
        }
        assert_true(reclaimed);
        if (m.type != GMD__MSG_TYPE__MSG_ERROR_REPLY)
                fail_msg("a fifth buffer with four parked: message type %u; log:\n%s",
                         m.type, harness_read_log(&f->h));
        assert_int_equal(m.request_id, next_id);
        {
                Gmd__ErrorReply *e = m.msg;

                if (!strstr(e->message, "max_buffers_per_client"))
                        fail_msg("the refusal does not name the limit: %s", e->message);
        }
        raw_msg_clear(&m);
        raw_close(&raw);
}

/* ---- buffers per user ------------------------------------------------------- */

/* max_buffers_per_user counts the user's clients together. */
static void test_buffers_per_user(void **state)
{
        harness_fixture *f = *state;
        gmd_buffer *a[8], *b[8];
        gmd_client *ca, *cb;
        int err;

        start(f, "[limits]\nmax_buffers_per_user = 6\n");
        ca = harness_client(&f->h, "a");
        cb = harness_client(&f->h, "b");
        assert_int_equal(alloc_until_refused(ca, a, 4, &err), 4);
        assert_int_equal(alloc_until_refused(cb, b, 8, &err), 2);
        assert_int_equal(err, GMD_ELIMIT);
        if (!strstr(gmd_last_error(), "max_buffers_per_user"))
                fail_msg("the refusal does not name the limit: %s", gmd_last_error());
        assert_int_equal(gmd_free(ca, a[0]), 0);
        assert_int_equal(alloc_until_refused(cb, b + 2, 1, &err), 1);
        gmd_disconnect(ca);
        gmd_disconnect(cb);
}

/* By default a user may hold half the daemon's open-file limit: the
 * answer is GMD_ELIMIT with the reason, not -EIO from a failed memfd. */
static void test_buffers_auto_from_nofile(void **state)
{
        harness_fixture *f = *state;
        gmd_buffer *bufs[200];
        gmd_client *c;
        int err;

        start(f, NULL);
        set_daemon_nofile(f, 100);
        c = harness_client(&f->h, "many");
        assert_int_equal(alloc_until_refused(c, bufs, 200, &err), 50);
        assert_int_equal(err, GMD_ELIMIT);
        if (!strstr(gmd_last_error(), "max_buffers_per_user") ||
            !strstr(gmd_last_error(), "open-file limit"))
                fail_msg("the refusal does not say why: %s", gmd_last_error());
        gmd_disconnect(c);
}

/* Out of fds all the same (the limit set above them): an allocation gets
 * GMD_ELIMIT saying so; every connection attempt meanwhile is answered
 * with the reason (before, they waited in the backlog while the daemon
 * spun in accept); once the buffers are freed, clients connect again. */
static void test_out_of_fds(void **state)
{
        harness_fixture *f = *state;
        gmd_buffer *bufs[200];
        int fds[40], refused = 0;
        gmd_client *c, *again;
        gmd_status *st;
        char msg[512];
        int err, code;
        unsigned n;

        start(f, "[limits]\nmax_buffers_per_user = 100000\n");
        set_daemon_nofile(f, 64);
        c = harness_client(&f->h, "hog");
        n = alloc_until_refused(c, bufs, 200, &err);
        if (n == 200 || err != GMD_ELIMIT ||
            !strstr(gmd_last_error(), "no file descriptor"))
                fail_msg("after %u buffers: %d '%s', expected GMD_ELIMIT saying the "
                         "daemon has no fd left", n, err, gmd_last_error());

        for (int i = 0; i < 40; i++)
                fds[i] = connect_silent(f);
        for (int i = 0; i < 40; i++) {
                int t = read_verdict(fds[i], 10000, &code, msg, sizeof(msg));

                if (t == GMD__MSG_TYPE__MSG_ERROR_REPLY &&
                    code == GMD__ERROR_CODE__ERR_LIMIT &&
                    strstr(msg, "no file descriptor left"))
                        refused++;
                else if (t < 0)
                        fail_msg("connection %d got no answer in 10 s (accept "
                                 "stalled?); log:\n%s", i, harness_read_log(&f->h));
                close(fds[i]);
        }
        assert_true(refused >= 1);
        /* Paused, not spinning: a few lines, not one per wake-up. */
        assert_true(harness_log_count(&f->h, "accept: Too many open files") <= 60);

        gmd_disconnect(c);
        harness_sleep_ms(300);    /* one accept pause */
        again = harness_client(&f->h, "after");
        st = harness_status(again);
        gmd_status_free(st);
        gmd_disconnect(again);
}

/* ---- connection slots ------------------------------------------------------- */

static void test_connections_per_user(void **state)
{
        harness_fixture *f = *state;
        gmd_client *other, *root;
        int silent[3], fd;

        if (skip_unless_root())
                return;
        start(f, "[limits]\nmax_clients_per_user = 3\nhello_timeout_ms = 60000\n");
        as_user(NOBODY);
        for (int i = 0; i < 3; i++)
                silent[i] = connect_silent(f);
        fd = connect_silent(f);
        as_root();
        expect_refused(f, fd, "max_clients_per_user");
        expect_connect_refused(f, NOBODY, "max_clients_per_user");
        /* Other users, and root, are not held up by nobody's connections. */
        other = connect_as(f, OTHER, "other");
        root = harness_client(&f->h, "root");
        /* Status lists the clients that said hello. */
        assert_int_equal(harness_wait_clients(root, 2, 5000), 2);
        gmd_disconnect(other);
        gmd_disconnect(root);
        for (int i = 0; i < 3; i++)
                close(silent[i]);
        assert_true(harness_log_count(&f->h, "refusing a connection: uid 65534") >= 2);
}

static void test_admin_slots(void **state)
{
        harness_fixture *f = *state;
        gmd_client *r1, *r2;
        int silent[3], fd;

        if (skip_unless_root())
                return;
        start(f, "[limits]\nmax_clients = 5\nadmin_clients = 2\n"
                 "max_clients_per_user = 0\nhello_timeout_ms = 60000\n");
        as_user(NOBODY);
        for (int i = 0; i < 2; i++)
                silent[i] = connect_silent(f);
        as_root();
        as_user(OTHER);
        silent[2] = connect_silent(f);
        fd = connect_silent(f);
        as_root();
        expect_refused(f, fd, "kept for administrators");
        expect_connect_refused(f, NOBODY, "kept for administrators");
        r1 = harness_client(&f->h, "admin1");     /* the kept slots */
        r2 = harness_client(&f->h, "admin2");
        fd = connect_silent(f);
        expect_refused(f, fd, "max_clients");
        gmd_disconnect(r1);
        gmd_disconnect(r2);
        for (int i = 0; i < 3; i++)
                close(silent[i]);
}

/* A connection that never says hello is closed, told why. */
static void test_hello_deadline(void **state)
{
        harness_fixture *f = *state;
        gmd_client *c;
        char msg[512];
        int fd, code, t;

        start(f, "[limits]\nhello_timeout_ms = 300\n");
        fd = connect_silent(f);
        c = harness_client(&f->h, "talks");      /* says hello: stays */
        t = read_verdict(fd, 10000, &code, msg, sizeof(msg));
        if (t != GMD__MSG_TYPE__MSG_ERROR_REPLY ||
            code != GMD__ERROR_CODE__ERR_TIMED_OUT || !strstr(msg, "no hello"))
                fail_msg("silent connection: packet %d code %d '%s'; log:\n%s", t,
                         code, msg, harness_read_log(&f->h));
        assert_int_equal(read_verdict(fd, 5000, &code, msg, sizeof(msg)), 0);
        close(fd);
        assert_int_equal(harness_wait_clients(c, 1, 5000), 1);
        gmd_disconnect(c);
}

/* A flood of refusals writes a bounded number of log lines: 50 of one
 * form per 5 s, then one line says how many were left out (the daemon
 * once wrote millions of accept errors in seconds). */
static void test_log_rate_limited(void **state)
{
        harness_fixture *f = *state;
        char msg[512];
        int held, code, n;

        start(f, "[limits]\nmax_clients = 1\nadmin_clients = 0\n"
                 "hello_timeout_ms = 60000\n");
        held = connect_silent(f);
        for (int i = 0; i < 120; i++) {
                int fd = connect_silent(f);

                assert_int_equal(read_verdict(fd, 5000, &code, msg, sizeof(msg)),
                                 GMD__MSG_TYPE__MSG_ERROR_REPLY);
                close(fd);
        }
        /* 50 in the first 5 s (more only if this took longer). */
        n = harness_log_count(&f->h, "refusing a connection");
        if (n < 50 || n > 100)
                fail_msg("%d refusal lines for 120 refusals", n);
        /* The count comes with the next line of that form, a window later. */
        harness_sleep_ms(5200);
        expect_refused(f, connect_silent(f), "max_clients");
        if (!log_seen(&f->h, "more lines of the form \"refusing a "
                              "connection", 5000))
                fail_msg("no line counting what was left out; log:\n%s",
                         harness_read_log(&f->h));
        close(held);
}

/* ---- reply bytes ------------------------------------------------------------ */

/* Send `n` status requests (clients and buffers: a few KB each) on `fd`
 * and read nothing; stops early when the daemon closes the connection. */
static void flood_status(int fd, int n)
{
        Gmd__StatusRequest req = GMD__STATUS_REQUEST__INIT;
        uint8_t payload[64];
        size_t len;

        req.what = GMD__STATUS_WHAT__STATUS_BUFFERS;
        len = gmd__status_request__pack(&req, payload);
        for (int i = 0; i < n; i++) {
                int r = gmd_wire_send(fd, GMD__MSG_TYPE__MSG_STATUS, (uint32_t)i + 2,
                                      payload, (uint32_t)len, NULL, 0);

                if (r == -EAGAIN) {
                        struct pollfd p = { .fd = fd, .events = POLLOUT };

                        if (poll(&p, 1, 5000) != 1)
                                return;
                        i--;
                        continue;
                }
                if (r < 0)
                        return;
        }
}

static int hello_raw(const harness_fixture *f, const char *name)
{
        Gmd__Hello hello = GMD__HELLO__INIT;
        uint8_t payload[128];
        char msg[512];
        int fd = connect_silent(f), code;
        size_t len;

        hello.min_version = GMD_WIRE_MIN_VERSION;
        hello.max_version = GMD_WIRE_VERSION;
        hello.client_name = (char *)name;
        len = gmd__hello__pack(&hello, payload);
        assert_int_equal(gmd_wire_send(fd, GMD__MSG_TYPE__MSG_HELLO, 1, payload,
                                       (uint32_t)len, NULL, 0), 0);
        assert_int_equal(read_verdict(fd, 5000, &code, msg, sizeof(msg)),
                         GMD__MSG_TYPE__MSG_HELLO_REPLY);
        return fd;
}

/* Buffers that make each status reply a few KB. */
static gmd_client *fill_status(const harness_fixture *f, gmd_buffer **bufs)
{
        gmd_client *c = harness_client(&f->h, "holder");
        int err;

        assert_int_equal(alloc_until_refused(c, bufs, 64, &err), 64);
        return c;
}

static void test_reply_bytes_per_connection(void **state)
{
        harness_fixture *f = *state;
        gmd_buffer *bufs[64];
        gmd_client *c, *check;
        int fd;

        /* Packets are not the bound here: bytes are. */
        start(f, "[limits]\nmax_send_queue = 1000000\n"
                 "max_send_queue_bytes = 256K\n"
                 "max_user_send_queue_bytes = 64M\n");
        c = fill_status(f, bufs);
        fd = hello_raw(f, "flood");
        flood_status(fd, 2000);
        if (!log_seen(&f->h, "not reading replies", 10000))
                fail_msg("a connection with MBs of unread replies stays; log:\n%s",
                         harness_read_log(&f->h));
        close(fd);
        check = harness_client(&f->h, "check");
        assert_int_equal(harness_wait_clients(check, 2, 5000), 2);
        gmd_disconnect(check);
        gmd_disconnect(c);
}

static void test_reply_bytes_per_user(void **state)
{
        harness_fixture *f = *state;
        gmd_buffer *bufs[64];
        gmd_client *c, *check;
        int fds[4];

        start(f, "[limits]\nmax_send_queue = 1000000\n"
                 "max_send_queue_bytes = 64M\n"
                 "max_user_send_queue_bytes = 256K\n");
        c = fill_status(f, bufs);
        for (int i = 0; i < 4; i++)
                fds[i] = hello_raw(f, "flood");
        for (int i = 0; i < 4; i++)
                flood_status(fds[i], 500);
        if (!log_seen(&f->h, "do not read their replies", 10000))
                fail_msg("one user's connections hold MBs of unread replies; "
                         "log:\n%s", harness_read_log(&f->h));
        assert_int_equal(harness_log_count(&f->h, "not reading replies ("), 0);
        for (int i = 0; i < 4; i++)
                close(fds[i]);
        check = harness_client(&f->h, "check");
        gmd_status_free(harness_status(check));
        gmd_disconnect(check);
        gmd_disconnect(c);
}

/* One STATUS_BUFFERS request on a raw connection (after its hello): the
 * reply, to be freed. */
static Gmd__StatusReply *status_page(int fd, uint64_t after, uint32_t pid)
{
        static uint8_t buf[GMD_WIRE_MAX_PACKET];
        Gmd__StatusRequest req = GMD__STATUS_REQUEST__INIT;
        struct pollfd p = { .fd = fd, .events = POLLIN };
        gmd_wire_packet packet;
        const char *reason;
        uint8_t payload[64];
        size_t len;

        req.what = GMD__STATUS_WHAT__STATUS_BUFFERS;
        req.after_buffer_id = after;
        req.pid = pid;
        len = gmd__status_request__pack(&req, payload);
        assert_int_equal(gmd_wire_send(fd, GMD__MSG_TYPE__MSG_STATUS, 7, payload,
                                       (uint32_t)len, NULL, 0), 0);
        assert_int_equal(poll(&p, 1, 5000), 1);
        assert_int_equal(gmd_wire_recv(fd, buf, &packet, &reason), 1);
        assert_int_equal(packet.header.type, GMD__MSG_TYPE__MSG_STATUS_REPLY);
        return gmd__status_reply__unpack(NULL, packet.header.length, packet.payload);
}

/* Every buffer row of the pages from `after` on, checked increasing;
 * returns how many, with the last page's more_buffers false. */
static size_t status_all_pages(int fd, uint32_t pid, pid_t only_pid)
{
        uint64_t after = 0;
        size_t n = 0;
        unsigned pages = 0;

        for (;;) {
                Gmd__StatusReply *r = status_page(fd, after, pid);

                assert_non_null(r);
                pages++;
                for (size_t i = 0; i < r->n_buffers; i++) {
                        assert_true(r->buffers[i]->buffer_id > after);
                        after = r->buffers[i]->buffer_id;
                        if (only_pid)
                                assert_int_equal(r->buffers[i]->pid, (uint32_t)only_pid);
                }
                n += r->n_buffers;
                if (!r->more_buffers) {
                        gmd__status_reply__free_unpacked(r, NULL);
                        break;
                }
                assert_true(r->n_buffers > 0);
                gmd__status_reply__free_unpacked(r, NULL);
                assert_true(pages < 100);
        }
        return n;
}

/* A status listing shows a page of the buffers its viewer may see: its
 * own user's, everyone's for root; a long list in pages (more_buffers,
 * after_buffer_id), each buffer once; a pid filter. The daemon copies
 * only the page it shows (snapshot.h): this is the reply it must still
 * give. */
static void test_status_pages(void **state)
{
        harness_fixture *f = *state;
        enum { MANY = 1100, FEW = 3 };
        static gmd_buffer *many[MANY];
        gmd_buffer *few[FEW];
        gmd_client *a, *b;
        int err, fd_root, fd_nobody;

        if (skip_unless_root())
                return;
        start(f, NULL);
        a = harness_client(&f->h, "many");
        assert_int_equal(alloc_until_refused(a, many, MANY, &err), MANY);
        b = connect_as(f, NOBODY, "few");
        assert_int_equal(alloc_until_refused(b, few, FEW, &err), FEW);
        fd_root = hello_raw(f, "root-viewer");
        as_user(NOBODY);
        fd_nobody = hello_raw(f, "nobody-viewer");
        as_root();
        /* root: everything, in pages. */
        assert_int_equal(status_all_pages(fd_root, 0, 0), MANY + FEW);
        {
                Gmd__StatusReply *r = status_page(fd_root, 0, 0);

                assert_true(r->more_buffers);
                assert_true(r->n_buffers < MANY + FEW);
                gmd__status_reply__free_unpacked(r, NULL);
        }
        /* nobody: its own three, on one page. */
        assert_int_equal(status_all_pages(fd_nobody, 0, 0), FEW);
        /* By pid: both clients are this process, so every buffer; no
         * buffer of a process that has none. */
        assert_int_equal(status_all_pages(fd_root, (uint32_t)getpid(), getpid()),
                         MANY + FEW);
        assert_int_equal(status_all_pages(fd_root, (uint32_t)getpid() + 1000000, 0), 0);
        close(fd_root);
        close(fd_nobody);
        gmd_disconnect(b);
        gmd_disconnect(a);
}

/* A client that goes away with replies unread is logged as such, not as
 * "bad file descriptor". Whether the daemon sees an
 * error on the socket (replies still queued for it: the usual case with
 * this many) or a plain hang-up (it had written them all) depends on
 * timing; in neither may the log say "bad file descriptor". */
static void test_gone_with_replies_unread(void **state)
{
        harness_fixture *f = *state;
        struct pollfd p;
        gmd_client *check;
        int fd;

        start(f, NULL);
        check = harness_client(&f->h, "check");
        fd = hello_raw(f, "unread");
        flood_status(fd, 512);
        p = (struct pollfd){ .fd = fd, .events = POLLIN };
        assert_int_equal(poll(&p, 1, 10000), 1);        /* a reply is there */
        close(fd);                                      /* unread */
        assert_int_equal(harness_wait_clients(check, 1, 10000), 1);
        assert_int_equal(harness_log_count(&f->h, "bad file descriptor"), 0);
        assert_int_equal(harness_log_count(&f->h, "Bad file descriptor"), 0);
        print_message("the daemon said: %s\n",
                      harness_log_count(&f->h, "without reading its replies") ?
                      "gone without reading its replies" : "nothing (a hang-up)");
        gmd_disconnect(check);
}

#define T(name) HARNESS_TEST(name)

int main(void)
{
        /* gmd_free gives buffers back at once (with the cache, the park
         * message would race the other client's allocation). */
        setenv("GPU_MEMD_CACHE", "0", 1);
        const struct CMUnitTest tests[] = {
                T(test_buffers_per_user),
                T(test_pageout_host_quota),
                T(test_unpark_within_buffer_limit),
                T(test_park_unpark_within_buffer_limit),
                T(test_gone_with_replies_unread),
                T(test_buffers_auto_from_nofile),
                T(test_out_of_fds),
                T(test_connections_per_user),
                T(test_admin_slots),
                T(test_hello_deadline),
                T(test_log_rate_limited),
                T(test_reply_bytes_per_connection),
                T(test_reply_bytes_per_user),
                T(test_status_pages),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
