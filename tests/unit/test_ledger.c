/*
 * test_ledger — daemon/core/ledger.c, the state record that outlives the
 * daemon: what is written reads back from the kept fds in a "new daemon"
 * (ledger_open), a change cut off before its flip reads as the state
 * before it, the buffer file grows past its first slots, freed slots are
 * reused, ids and arena pieces survive, a SPILLABLE buffer on a peer's
 * VRAM is described by version 2 as it is, and a record of another version
 * or with no header is refused with a sentence, losing nothing.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "keep.h"
#include "ledger.h"

/* A keep in memory: a table of names and duplicated fds. */
typedef struct mem_keep {
        gmd_keep base;
        char names[16][GMD_KEEP_NAME_MAX];
        int fds[16];
        unsigned n;
} mem_keep;

static int mk_put(gmd_keep *k, const char *name, int fd)
{
        mem_keep *m = (mem_keep *)k;
        unsigned i;

        for (i = 0; i < m->n && strcmp(m->names[i], name) != 0; i++)
                ;
        if (i == m->n) {
                if (m->n == 16)
                        return -ENOSPC;
                m->n++;
        } else {
                close(m->fds[i]);
        }
        snprintf(m->names[i], GMD_KEEP_NAME_MAX, "%s", name);
        m->fds[i] = dup(fd);
        return m->fds[i] < 0 ? -errno : 0;
}

static int mk_drop(gmd_keep *k, const char *name)
{
        (void)k;
        (void)name;
        return 0;
}

static void mk_close(gmd_keep *k, bool discard)
{
        (void)k;
        (void)discard;
}

static const gmd_keep_ops mk_ops = { "memory", mk_put, mk_drop, mk_close };

static int kept(mem_keep *m, const char *name)
{
        for (unsigned i = 0; i < m->n; i++)
                if (strcmp(m->names[i], name) == 0)
                        return dup(m->fds[i]);
        return -1;
}

static void keep_free(mem_keep *m)
{
        for (unsigned i = 0; i < m->n; i++)
                close(m->fds[i]);
}

static ledger_buffer rec_of(uint64_t id, uint64_t session)
{
        ledger_buffer r;

        memset(&r, 0, sizeof(r));
        r.id = id;
        r.session_id = session;
        r.size = id << 21;
        r.device = (uint32_t)(id % 3);
        r.tier = (uint8_t)(id % 2);
        r.host = r.tier ? LEDGER_HOST_ARENA : LEDGER_HOST_NONE;
        r.n_parts = r.tier ? 2 : 0;
        r.parts[0].offset = id << 21;
        r.parts[0].len = 1 << 21;
        r.parts[1].offset = 0;
        r.parts[1].len = (id - 1) << 21;
        r.vram_mapped = !r.tier;
        r.vram_ino = id * 7;
        return r;
}

/* A new daemon reads the record the old one left. */
static gmd_ledger *reopen(mem_keep *m)
{
        gmd_ledger *l = NULL;
        char why[256];

        assert_int_equal(ledger_open(&m->base, kept(m, "state"),
                                     kept(m, "state.buffers"), &l, why,
                                     sizeof(why)), 0);
        return l;
}

static void test_round_trip(void **state)
{
        mem_keep m = { .base = { .ops = &mk_ops } };
        gmd_ledger *l = NULL, *back;
        uint32_t slots[600] = { 0 }, sslot = 0;
        ledger_session s;
        unsigned found = 0;

        (void)state;
        assert_int_equal(ledger_new(&m.base, &l), 0);
        memset(&s, 0, sizeof(s));
        s.id = 42;
        s.uid = 1000;
        memcpy(s.token, "0123456789abcdef", 16);
        snprintf(s.name, sizeof(s.name), "train.py");
        assert_int_equal(ledger_put_session(l, &sslot, &s), 0);
        /* Past the first 256 slots: the file grows. */
        for (uint64_t id = 1; id <= 600; id++) {
                ledger_buffer r = rec_of(id, 42);

                assert_int_equal(ledger_put_buffer(l, &slots[id - 1], &r), 0);
        }
        /* Every other one freed, then one more: it takes a freed slot. */
        for (uint64_t id = 2; id <= 600; id += 2)
                assert_int_equal(ledger_put_buffer(l, &slots[id - 1], NULL), 0);
        assert_int_equal(ledger_put_piece(l, 1, 0, 1 << 30), 0);
        assert_int_equal(ledger_put_piece(l, 1, 0, 2ull << 30), 0);
        ledger_set_ids(l, 601, 42);

        back = reopen(&m);
        assert_int_equal(ledger_next_buffer_id(back), 601);
        assert_int_equal(ledger_next_client_id(back), 42);
        for (unsigned i = 1; i <= ledger_n_buffers(back); i++) {
                ledger_buffer r, want;

                ledger_buffer_get(back, i, &r);
                if (!r.used)
                        continue;
                found++;
                assert_int_equal(r.id % 2, 1);
                want = rec_of(r.id, 42);
                want.used = 1;
                assert_memory_equal(&r, &want, sizeof(r));
        }
        assert_int_equal(found, 300);
        for (unsigned i = 1, n = 0; i <= ledger_n_sessions(back); i++) {
                ledger_session got;

                ledger_session_get(back, i, &got);
                if (!got.used)
                        continue;
                assert_int_equal(++n, 1);
                assert_int_equal(got.id, 42);
                assert_memory_equal(got.token, s.token, 16);
                assert_string_equal(got.name, "train.py");
        }
        for (unsigned i = 1, n = 0; i <= ledger_n_pieces(back); i++) {
                ledger_piece p;

                ledger_piece_get(back, i, &p);
                if (!p.used)
                        continue;
                assert_int_equal(++n, 1);
                assert_int_equal(p.device, 1);
                assert_int_equal(p.size, 2ull << 30);
        }
        {
                /* The new daemon writes on: a free slot, not a used one. */
                uint32_t slot = 0;
                ledger_buffer r = rec_of(700, 42), old;

                assert_int_equal(ledger_put_buffer(back, &slot, &r), 0);
                ledger_buffer_get(back, slot, &old);
                assert_int_equal(old.id, 700);
                assert_int_equal(slot % 2, 0);   /* a slot freed above */
        }
        ledger_close(back);
        ledger_close(l);
        keep_free(&m);
}

/* A SPILLABLE buffer resting in a peer's VRAM, its owner mapping it
 * there: version 2 says it all (tier HOST, a host copy of kind
 * LEDGER_HOST_PEER on device 1, kept as "h<id>", the identity its owner
 * maps, the flags saying it maps it); it reads back whole. */
static void test_spillable_on_peer(void **state)
{
        mem_keep m = { .base = { .ops = &mk_ops } };
        gmd_ledger *l = NULL, *back;
        ledger_buffer r, got;
        uint32_t slot = 0;

        (void)state;
        assert_int_equal(ledger_new(&m.base, &l), 0);
        memset(&r, 0, sizeof(r));
        r.id = 9;
        r.session_id = 3;
        r.size = 8u << 20;
        r.device = 0;
        r.flags = GMD_ALLOC_SPILLABLE;
        r.tier = GMD_TIER_HOST;
        r.host = LEDGER_HOST_PEER;
        r.host_device = 1;
        r.host_dev = 11;
        r.host_ino = 12;
        assert_int_equal(ledger_put_buffer(l, &slot, &r), 0);
        back = reopen(&m);
        ledger_buffer_get(back, slot, &got);
        r.used = 1;
        assert_memory_equal(&got, &r, sizeof(r));
        ledger_close(back);
        ledger_close(l);
        keep_free(&m);
}

/* A daemon killed between writing a record and flipping to it left the
 * state before: the reader never sees half of each. */
static void test_cut_off_change(void **state)
{
        mem_keep m = { .base = { .ops = &mk_ops } };
        gmd_ledger *l = NULL, *back;
        uint32_t slot = 0;
        ledger_buffer r = rec_of(5, 1), got;
        uint8_t *map;
        int fd;

        (void)state;
        assert_int_equal(ledger_new(&m.base, &l), 0);
        assert_int_equal(ledger_put_buffer(l, &slot, &r), 0);
        assert_int_equal(slot, 1);
        /* Fill the other record of slot 1 with another state, not flipped:
         * what a kill right before the flip leaves. */
        fd = ledger_fd_buffers(l);
        map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        assert_true(map != MAP_FAILED);
        {
                uint32_t cur;
                ledger_buffer other = rec_of(6, 1);

                memcpy(&cur, map, sizeof(cur));
                memcpy(map + 8 + (size_t)(!cur) * sizeof(ledger_buffer), &other,
                       sizeof(other));
        }
        munmap(map, 4096);
        back = reopen(&m);
        ledger_buffer_get(back, 1, &got);
        assert_int_equal(got.id, 5);
        assert_int_equal(got.size, r.size);
        ledger_close(back);
        ledger_close(l);
        keep_free(&m);
}

static void test_refuses_other_versions(void **state)
{
        mem_keep m = { .base = { .ops = &mk_ops } };
        gmd_ledger *l = NULL, *back = NULL;
        char why[256] = "", want[32];
        uint32_t *version;
        uint8_t *map;

        (void)state;
        assert_int_equal(ledger_new(&m.base, &l), 0);
        map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
                   ledger_fd_state(l), 0);
        assert_true(map != MAP_FAILED);
        version = (uint32_t *)(map + 8);
        /* Version 1 lacks only the peer tier's kind of host copy: read. */
        *version = 1;
        assert_int_equal(ledger_open(&m.base, kept(&m, "state"),
                                     kept(&m, "state.buffers"), &back, why,
                                     sizeof(why)), 0);
        ledger_close(back);
        back = NULL;
        *version = LEDGER_VERSION + 1;
        assert_int_equal(ledger_open(&m.base, kept(&m, "state"),
                                     kept(&m, "state.buffers"), &back, why,
                                     sizeof(why)), -EPROTO);
        snprintf(want, sizeof(want), "version %u", LEDGER_VERSION + 1);
        assert_non_null(strstr(why, want));
        memset(map, 0, 8);          /* no magic */
        assert_int_equal(ledger_open(&m.base, kept(&m, "state"),
                                     kept(&m, "state.buffers"), &back, why,
                                     sizeof(why)), -EPROTO);
        assert_non_null(strstr(why, "no valid header"));
        /* Nothing was dropped: the fds are still kept. */
        assert_true(kept(&m, "state") >= 0);
        assert_int_equal(ledger_open(&m.base, -1, -1, &back, why, sizeof(why)),
                         -ENOENT);
        munmap(map, 4096);
        ledger_close(l);
        keep_free(&m);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_round_trip),
                cmocka_unit_test(test_spillable_on_peer),
                cmocka_unit_test(test_cut_off_change),
                cmocka_unit_test(test_refuses_other_versions),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
