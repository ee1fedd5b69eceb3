/*
 * test_overflow — a client that stops reading its replies, at the exact
 * moment the daemon answers something that has side effects: a free, a
 * wait, an acquire granted by a move, a reclaim, an admin drain. Its send
 * queue overflows and it is disconnected — never in the middle of the
 * handler that is answering it (session_close_later), so the daemon must
 * stay up, answer other clients and stop cleanly. Also: a client cannot
 * pile up MSG_WAITs without bound. Raw-protocol clients on wire.h.
 * (Found in review: each case crashed or hung the daemon before.)
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <linux/sockios.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "gpumem.pb-c.h"
#include "harness.h"
#include "wire.h"

static uint8_t rxbuf[GMD_WIRE_MAX_PACKET];
static uint8_t txbuf[GMD_WIRE_MAX_PAYLOAD];
static uint32_t next_id = 100;

static uint32_t rsend(int fd, uint16_t type, const ProtobufCMessage *m)
{
        size_t len = m ? protobuf_c_message_pack(m, txbuf) : 0;
        uint32_t id = next_id++;
        int r = gmd_wire_send(fd, type, id, txbuf, (uint32_t)len, NULL, 0);

        if (r < 0)
                fprintf(stderr, "send type %u: %s\n", type, strerror(-r));
        return id;
}

/* Receive one packet within ms; returns type or -1. Payload in rxbuf. */
static int rrecv(int fd, gmd_wire_packet *p, int ms)
{
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        const char *reason = NULL;

        if (poll(&pfd, 1, ms) != 1)
                return -1;
        if (gmd_wire_recv(fd, rxbuf, p, &reason) != 1)
                return -2;
        gmd_wire_packet_close_fds(p);
        return p->header.type;
}

/* Receive until a packet of `type` (skipping others); returns 0 or -1. */
static int rwait(int fd, int type, gmd_wire_packet *p, int ms)
{
        uint64_t end = harness_now_ms() + ms;

        while (harness_now_ms() < end) {
                int t = rrecv(fd, p, 100);

                if (t == type)
                        return 0;
                if (t >= 0)
                        fprintf(stderr, "  (skipped packet type %d)\n", t);
                if (t == -2)
                        return -1;
        }
        return -1;
}

static int hello(const harness *h, const char *name)
{
        Gmd__Hello m = GMD__HELLO__INIT;
        gmd_wire_packet p;
        int fd = harness_connect_raw(h);

        assert_true(fd >= 0);
        m.min_version = 1;
        m.max_version = 1;
        m.client_name = (char *)name;
        rsend(fd, GMD__MSG_TYPE__MSG_HELLO, &m.base);
        assert_int_equal(rwait(fd, GMD__MSG_TYPE__MSG_HELLO_REPLY, &p, 2000), 0);
        return fd;
}

static uint64_t ralloc(int fd, uint64_t size, unsigned flags)
{
        Gmd__AllocRequest m = GMD__ALLOC_REQUEST__INIT;
        Gmd__AllocReply *r;
        gmd_wire_packet p;
        uint64_t id;

        m.size = size;
        m.flags = flags;
        m.timeout_ms = 0;
        rsend(fd, GMD__MSG_TYPE__MSG_ALLOC, &m.base);
        assert_int_equal(rwait(fd, GMD__MSG_TYPE__MSG_ALLOC_REPLY, &p, 2000), 0);
        r = gmd__alloc_reply__unpack(NULL, p.header.length, p.payload);
        assert_non_null(r);
        id = r->buffer_id;
        gmd__alloc_reply__free_unpacked(r, NULL);
        return id;
}

static void rbuf(int fd, uint16_t type, uint64_t id)
{
        Gmd__BufferRequest m = GMD__BUFFER_REQUEST__INIT;

        m.buffer_id = id;
        rsend(fd, type, &m.base);
}

static void rlist(int fd, uint16_t type, uint64_t id)
{
        Gmd__BufferList m = GMD__BUFFER_LIST__INIT;

        m.n_buffer_ids = 1;
        m.buffer_ids = &id;
        rsend(fd, type, &m.base);
}

static int inq(int fd)
{
        int n = 0;

        ioctl(fd, SIOCINQ, &n);
        return n;
}

/* Leave exactly `max` replies in the daemon's send queue for `fd`: the
 * next reply the daemon sends to it overflows. */
static void fill_queue(int fd, unsigned max)
{
        Gmd__StatusRequest req = GMD__STATUS_REQUEST__INIT;
        int i, prev = inq(fd);

        for (i = 0; i < 100000; i++) {
                uint64_t end;
                bool grown = false;

                rsend(fd, GMD__MSG_TYPE__MSG_STATUS, &req.base);
                end = harness_now_ms() + 300;
                while (harness_now_ms() < end) {
                        int n = inq(fd);

                        if (n > prev) {
                                prev = n;
                                grown = true;
                                break;
                        }
                        usleep(200);
                }
                if (!grown)
                        break;
        }
        fprintf(stderr, "  socket took %d replies (%d bytes); queueing\n", i, prev);
        for (unsigned j = 1; j < max; j++)
                rsend(fd, GMD__MSG_TYPE__MSG_STATUS, &req.base);
        harness_sleep_ms(200);
        assert_int_equal(inq(fd), prev);
}

/* Is the daemon alive and answering a fresh client within 2 s? */
static bool daemon_answers(const harness *h)
{
        Gmd__Hello m = GMD__HELLO__INIT;
        gmd_wire_packet p;
        int fd = harness_connect_raw(h), r;

        if (fd < 0)
                return false;
        m.min_version = 1;
        m.max_version = 1;
        m.client_name = "probe";
        rsend(fd, GMD__MSG_TYPE__MSG_HELLO, &m.base);
        r = rwait(fd, GMD__MSG_TYPE__MSG_HELLO_REPLY, &p, 2000);
        close(fd);
        return r == 0;
}

static void report(harness *h, const char *what)
{
        int st;
        pid_t r = waitpid(h->pid, &st, WNOHANG);
        char *log = harness_read_log(h);
        bool answers = r == 0 && daemon_answers(h);

        if (r != 0 || !answers || (log && strstr(log, "AddressSanitizer")))
                fail_msg("%s: daemon %s, answers %d; log:\n%s", what,
                         r == h->pid ? "exited" : "running", answers,
                         log ? log : "(none)");
        free(log);
}

#define CFG "[limits]\nmax_send_queue = 4\n[daemon]\nlog_level = debug\n"

/* 1. FREE whose OK reply overflows the send queue: double free. */
static void t_free(void **state)
{
        harness h;
        int fd;
        uint64_t id;

        (void)state;
        harness_start_small(&h, CFG);
        fd = hello(&h, "free");
        id = ralloc(fd, 2 * MiB, 0);
        fill_queue(fd, 4);
        rbuf(fd, GMD__MSG_TYPE__MSG_FREE, id);
        harness_sleep_ms(500);
        report(&h, "FREE with full send queue");
        close(fd);
        harness_stop(&h);
        harness_cleanup(&h);
}

/* 2. WAIT met at once whose reply overflows: wait_done twice. */
static void t_wait(void **state)
{
        harness h;
        int fd;
        Gmd__WaitRequest w = GMD__WAIT_REQUEST__INIT;

        (void)state;
        harness_start_small(&h, CFG);
        fd = hello(&h, "wait");
        ralloc(fd, 2 * MiB, 0);
        fill_queue(fd, 4);
        w.timeout_ms = -1;
        rsend(fd, GMD__MSG_TYPE__MSG_WAIT, &w.base);
        harness_sleep_ms(500);
        report(&h, "WAIT with full send queue");
        close(fd);
        harness_cleanup(&h);
}

/* 3. A reclaim to a client whose queue is full: parking_reclaim_user
 * walks a session that session_close unlinked. */
static void t_reclaim(void **state)
{
        harness h;
        int a, b;
        Gmd__AllocRequest m = GMD__ALLOC_REQUEST__INIT;
        uint64_t id;

        (void)state;
        harness_start_small(&h, CFG "[users]\nvram_quota = 8M\n");
        a = hello(&h, "parker");
        id = ralloc(a, 4 * MiB, 0);
        rlist(a, GMD__MSG_TYPE__MSG_PARK, id);
        fill_queue(a, 4);
        b = hello(&h, "asker");
        m.size = 6 * MiB;          /* 4 parked + 6 > 8: over only by parked */
        m.timeout_ms = 1000;
        rsend(b, GMD__MSG_TYPE__MSG_ALLOC, &m.base);
        harness_sleep_ms(1500);
        report(&h, "reclaim to a client with a full queue");
        close(a);
        close(b);
        harness_cleanup(&h);
}

/* 4. Admin drain of a client that does not read. */
static void t_drain(void **state)
{
        harness h;
        int a, adm;
        Gmd__AdminRequest m = GMD__ADMIN_REQUEST__INIT;

        (void)state;
        if (getuid() != 0)
                skip();
        harness_start_small(&h, CFG);
        a = hello(&h, "stuck");
        ralloc(a, 2 * MiB, 0);
        ralloc(a, 2 * MiB, 0);
        fill_queue(a, 4);
        adm = hello(&h, "admin");
        m.op = GMD__ADMIN_OP__ADMIN_DRAIN;
        m.pid = (uint32_t)getpid();
        /* Both raw clients are this process: drain hits `a` and `adm`. */
        rsend(adm, GMD__MSG_TYPE__MSG_ADMIN, &m.base);
        harness_sleep_ms(500);
        report(&h, "admin drain of a non-reading client");
        close(a);
        close(adm);
        harness_cleanup(&h);
}

/* 5. Acquire granted in move_finish while the queue is full. */
static void t_acquire_grant(void **state)
{
        harness h;
        int fd;
        uint64_t id;
        gmd_wire_packet p;
        Gmd__MoveRequest mv = GMD__MOVE_REQUEST__INIT;
        Gmd__AcquireRequest aq = GMD__ACQUIRE_REQUEST__INIT;
        Gmd__RemapAck ack = GMD__REMAP_ACK__INIT;
        Gmd__RemapNotify *note;

        (void)state;
        harness_start_small(&h, CFG);
        fd = hello(&h, "acq");
        id = ralloc(fd, 2 * MiB, 0);
        rbuf(fd, GMD__MSG_TYPE__MSG_RELEASE, id);
        assert_int_equal(rwait(fd, GMD__MSG_TYPE__MSG_OK_REPLY, &p, 2000), 0);
        mv.n_buffer_ids = 1;
        mv.buffer_ids = &id;
        rsend(fd, GMD__MSG_TYPE__MSG_PAGEOUT, &mv.base);
        assert_int_equal(rwait(fd, GMD__MSG_TYPE__MSG_REMAP, &p, 2000), 0);
        note = gmd__remap_notify__unpack(NULL, p.header.length, p.payload);
        ack.buffer_id = id;
        ack.sequence = note->sequence;
        gmd__remap_notify__free_unpacked(note, NULL);
        rsend(fd, GMD__MSG_TYPE__MSG_REMAP_ACK, &ack.base);
        harness_sleep_ms(100);
        aq.buffer_id = id;
        aq.timeout_ms = -1;
        rsend(fd, GMD__MSG_TYPE__MSG_ACQUIRE, &aq.base);
        assert_int_equal(rwait(fd, GMD__MSG_TYPE__MSG_REMAP, &p, 2000), 0);
        note = gmd__remap_notify__unpack(NULL, p.header.length, p.payload);
        ack.sequence = note->sequence;
        gmd__remap_notify__free_unpacked(note, NULL);
        fill_queue(fd, 4);
        rsend(fd, GMD__MSG_TYPE__MSG_REMAP_ACK, &ack.base);
        harness_sleep_ms(500);
        report(&h, "acquire granted by move_finish with a full queue");
        close(fd);
        harness_cleanup(&h);
}


static long rss_kb(pid_t pid)
{
        char path[64], line[256];
        long kb = -1;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", pid);
        f = fopen(path, "r");
        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "VmRSS: %ld", &kb) == 1)
                        break;
        fclose(f);
        return kb;
}

/* harness_start_small for a daemon whose RSS the test measures. Under
 * AddressSanitizer (`make test-sanitize`) freed memory is held in a
 * quarantine of up to 256 MiB to catch uses after free, and would read as
 * growth: that daemon gets a 4 MiB one, so what grows is what it keeps. */
static void start_measured(harness *h, const char *extra_config)
{
#ifdef GMD_SANITIZE
        const char *old = getenv("ASAN_OPTIONS");
        char *saved = old ? strdup(old) : NULL, *opts;

        if (asprintf(&opts, "%s%squarantine_size_mb=4", old ? old : "",
                     old && *old ? ":" : "") < 0)
                fail_msg("asprintf");
        setenv("ASAN_OPTIONS", opts, 1);
        harness_start_small(h, extra_config);
        if (saved)
                setenv("ASAN_OPTIONS", saved, 1);
        else
                unsetenv("ASAN_OPTIONS");
        free(saved);
        free(opts);
#else
        harness_start_small(h, extra_config);
#endif
}

/* MSG_WAITs pending per client are bounded: each keeps its id list. */
static void t_waits(void **state)
{
        harness h;
        int fd;
        uint64_t id, *ids;
        gmd_wire_packet p;
        Gmd__MoveRequest mv = GMD__MOVE_REQUEST__INIT;
        Gmd__WaitRequest w = GMD__WAIT_REQUEST__INIT;
        long before, after;

        (void)state;
        start_measured(&h, "[daemon]\nlog_level = info\n");
        fd = hello(&h, "waits");
        id = ralloc(fd, 2 * MiB, 0);
        rbuf(fd, GMD__MSG_TYPE__MSG_RELEASE, id);
        assert_int_equal(rwait(fd, GMD__MSG_TYPE__MSG_OK_REPLY, &p, 2000), 0);
        mv.n_buffer_ids = 1;
        mv.buffer_ids = &id;
        rsend(fd, GMD__MSG_TYPE__MSG_PAGEOUT, &mv.base);
        assert_int_equal(rwait(fd, GMD__MSG_TYPE__MSG_REMAP, &p, 2000), 0);
        /* never ack: the buffer stays busy */
        ids = calloc(8192, sizeof(*ids));
        for (int i = 0; i < 8192; i++)
                ids[i] = id;
        w.n_buffer_ids = 8192;
        w.buffer_ids = ids;
        w.timeout_ms = -1;
        harness_sleep_ms(200);
        before = rss_kb(h.pid);
        for (int i = 0; i < 3000; i++) {
                while (gmd_wire_send(fd, GMD__MSG_TYPE__MSG_WAIT, next_id++, txbuf,
                                     (uint32_t)protobuf_c_message_pack(&w.base, txbuf),
                                     NULL, 0) == -EAGAIN)
                        usleep(100);
        }
        harness_sleep_ms(1000);
        after = rss_kb(h.pid);
        free(ids);
        report(&h, "waits");
        /* At most [limits] max_waiting_per_client waits are kept; without
         * the bound this grew by ~64 KiB a wait (~190 MiB here). */
        if (after - before > 64 * 1024)
                fail_msg("3000 WAITs of 8192 ids grew the daemon from %ld to %ld kB",
                         before, after);
        close(fd);
        harness_cleanup(&h);
}

int main(int argc, char **argv)
{
        const struct CMUnitTest all[] = {
                cmocka_unit_test(t_free),
                cmocka_unit_test(t_wait),
                cmocka_unit_test(t_reclaim),
                cmocka_unit_test(t_drain),
                cmocka_unit_test(t_acquire_grant),
                cmocka_unit_test(t_waits),
        };

        if (argc > 1)
                cmocka_set_test_filter(argv[1]);
        return cmocka_run_group_tests(all, NULL, NULL);
}
