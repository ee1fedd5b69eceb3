/*
 * ledger — see ledger.h. Two memfds: "state" holds the header (one page)
 * then the session slots and, after them, a fixed table of arena pieces;
 * "state.buffers" holds the buffer slots. A slot is { index, record[2] }:
 * a writer fills record[!index] and then stores !index with release order;
 * a reader takes record[index]. Growing a file is ftruncate then mremap;
 * its slot count is read from its size, so nothing else needs updating.
 */
#include "ledger.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

#define HEAD_SIZE 4096u
#define MAX_PIECES 4096u        /* per record, all devices: host_limit in
                                 * pieces of at least 64 MiB */
#define FIRST_SESSIONS 64u
#define FIRST_BUFFERS 256u

typedef struct ledger_head {
        char magic[8];
        uint32_t version;
        uint32_t head_size;
        uint32_t session_slot_size;
        uint32_t buffer_slot_size;
        uint32_t piece_size;
        uint32_t max_pieces;
        uint64_t sessions_off;  /* in "state": the session slots, then */
        uint64_t pieces_off;    /* ... the pieces, at the end of the file */
        uint64_t next_buffer_id;
        uint64_t next_client_id;
} ledger_head;

typedef struct session_slot {
        uint32_t cur;
        uint32_t pad;
        ledger_session rec[2];
} session_slot;

typedef struct buffer_slot {
        uint32_t cur;
        uint32_t pad;
        ledger_buffer rec[2];
} buffer_slot;

/* A file of slots, mapped, with the free ones on a stack. */
typedef struct slot_file {
        int fd;
        uint8_t *map;
        size_t len;             /* mapped and file size */
        size_t off;             /* the first slot's offset */
        size_t slot_size;
        unsigned n;             /* slots */
        uint32_t *free;         /* free slot numbers (from 1) */
        unsigned n_free;
} slot_file;

struct gmd_ledger {
        gmd_keep *keep;
        slot_file sessions;     /* "state": head, session slots, pieces */
        slot_file buffers;      /* "state.buffers" */
        ledger_piece *pieces;   /* in the sessions file */
};

/* The record layout this daemon writes and reads: LEDGER_VERSION, or, for
 * the tests of a record from another version only, $GMD_TEST_LEDGER_VERSION
 * (tests/integration/test_restart.c: a daemon that finds a record it cannot
 * read refuses to start and drops nothing). */
static uint32_t ledger_version(void)
{
        const char *v = getenv("GMD_TEST_LEDGER_VERSION");

        return v && *v ? (uint32_t)strtoul(v, NULL, 10) : LEDGER_VERSION;
}

static ledger_head *head(const gmd_ledger *l)
{
        return (ledger_head *)l->sessions.map;
}

void ledger_name(char *buf, size_t len, char kind, uint64_t a, uint64_t b)
{
        if (kind == 'a')
                snprintf(buf, len, "a%llu.%llu", (unsigned long long)a,
                         (unsigned long long)b);
        else
                snprintf(buf, len, "%c%llu", kind, (unsigned long long)a);
}

/* The slots' offset is fixed; the pieces table sits after the session
 * slots in "state", so the sessions file cannot grow: it is sized for
 * MAX sessions at once ([limits] bounds connections far below). */
#define MAX_SESSIONS 65536u

static size_t sessions_file_len(void)
{
        return HEAD_SIZE + (size_t)MAX_SESSIONS * sizeof(session_slot) +
               (size_t)MAX_PIECES * sizeof(ledger_piece);
}

static int file_map(slot_file *f, int fd, size_t off, size_t slot_size,
                    unsigned n_slots)
{
        struct stat st;
        void *map;

        if (fstat(fd, &st) < 0)
                return -errno;
        f->fd = fd;
        f->len = (size_t)st.st_size;
        f->off = off;
        f->slot_size = slot_size;
        f->n = n_slots ? n_slots :
               (unsigned)((f->len > off ? f->len - off : 0) / slot_size);
        map = mmap(NULL, f->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED)
                return -errno;
        f->map = map;
        return 0;
}

static void *slot_at(const slot_file *f, uint32_t slot)
{
        return f->map + f->off + (size_t)(slot - 1) * f->slot_size;
}

static int free_push(slot_file *f, uint32_t slot)
{
        if (f->n_free % 256 == 0) {
                uint32_t *grown = realloc(f->free, (f->n_free + 256) * sizeof(*grown));

                if (!grown)
                        return -ENOMEM;
                f->free = grown;
        }
        f->free[f->n_free++] = slot;
        return 0;
}

/* Double the buffer file (it alone grows). */
static int file_grow(slot_file *f)
{
        unsigned n = f->n ? f->n * 2 : FIRST_BUFFERS;
        size_t len = f->off + (size_t)n * f->slot_size;
        void *map;

        if (ftruncate(f->fd, (off_t)len) < 0)
                return -errno;
        map = mremap(f->map, f->len, len, MREMAP_MAYMOVE);
        if (map == MAP_FAILED)
                return -errno;
        f->map = map;
        f->len = len;
        /* Highest last, so slots are handed out lowest first. */
        for (unsigned s = n; s > f->n; s--)
                if (free_push(f, s) < 0)
                        return -ENOMEM;
        f->n = n;
        return 0;
}

static int memfd_of(const char *name, size_t len, int *ret_fd)
{
        int fd = memfd_create(name, MFD_CLOEXEC);

        if (fd < 0)
                return -errno;
        if (ftruncate(fd, (off_t)len) < 0) {
                int r = -errno;

                close(fd);
                return r;
        }
        *ret_fd = fd;
        return 0;
}

static int ledger_alloc(gmd_keep *keep, gmd_ledger **ret)
{
        gmd_ledger *l = calloc(1, sizeof(*l));

        if (!l)
                return -ENOMEM;
        l->keep = keep;
        l->sessions.fd = -1;
        l->buffers.fd = -1;
        *ret = l;
        return 0;
}

static int ledger_keep_fds(gmd_ledger *l)
{
        int r;

        if (!l->keep)
                return 0;
        r = l->keep->ops->put(l->keep, "state", l->sessions.fd);
        if (r == 0)
                r = l->keep->ops->put(l->keep, "state.buffers", l->buffers.fd);
        return r;
}

int ledger_new(gmd_keep *keep, gmd_ledger **ret_ledger)
{
        gmd_ledger *l;
        ledger_head *h;
        int fd = -1, r;

        r = ledger_alloc(keep, &l);
        if (r < 0)
                return r;
        r = memfd_of("gpu-memd-state", sessions_file_len(), &fd);
        if (r == 0)
                r = file_map(&l->sessions, fd, HEAD_SIZE, sizeof(session_slot),
                             MAX_SESSIONS);
        if (r == 0)
                r = memfd_of("gpu-memd-state-buffers", 0, &fd);
        if (r == 0) {
                l->buffers.fd = fd;
                l->buffers.map = MAP_FAILED;
                /* mremap needs a mapping to grow from: map a page. */
                if (ftruncate(fd, 4096) < 0)
                        r = -errno;
        }
        if (r == 0)
                r = file_map(&l->buffers, fd, 0, sizeof(buffer_slot), 0);
        if (r == 0) {
                l->buffers.n = 0;
                r = file_grow(&l->buffers);
        }
        for (unsigned s = MAX_SESSIONS; r == 0 && s >= 1; s--)
                r = free_push(&l->sessions, s);
        if (r < 0) {
                ledger_close(l);
                return r;
        }
        h = head(l);
        l->pieces = (ledger_piece *)(l->sessions.map + HEAD_SIZE +
                                     (size_t)MAX_SESSIONS * sizeof(session_slot));
        h->version = ledger_version();
        h->head_size = HEAD_SIZE;
        h->session_slot_size = sizeof(session_slot);
        h->buffer_slot_size = sizeof(buffer_slot);
        h->piece_size = sizeof(ledger_piece);
        h->max_pieces = MAX_PIECES;
        h->sessions_off = HEAD_SIZE;
        h->pieces_off = (uint64_t)((uint8_t *)l->pieces - l->sessions.map);
        /* The magic last: a record without it is not one. */
        __atomic_thread_fence(__ATOMIC_RELEASE);
        memcpy(h->magic, LEDGER_MAGIC, 8);
        r = ledger_keep_fds(l);
        if (r < 0) {
                ledger_close(l);
                return r;
        }
        *ret_ledger = l;
        return 0;
}

int ledger_open(gmd_keep *keep, int state_fd, int buffers_fd,
                gmd_ledger **ret_ledger, char *why, size_t why_len)
{
        gmd_ledger *l;
        ledger_head *h;
        struct stat st;
        int r;

        if (state_fd < 0 || buffers_fd < 0) {
                if (state_fd >= 0)
                        close(state_fd);
                if (buffers_fd >= 0)
                        close(buffers_fd);
                return -ENOENT;
        }
        r = ledger_alloc(keep, &l);
        if (r < 0) {
                close(state_fd);
                close(buffers_fd);
                return r;
        }
        if (fstat(state_fd, &st) < 0 || (size_t)st.st_size < HEAD_SIZE) {
                snprintf(why, why_len, "the state record is %s",
                         "shorter than its header");
                close(state_fd);
                close(buffers_fd);
                ledger_close(l);
                return -EPROTO;
        }
        r = file_map(&l->sessions, state_fd, HEAD_SIZE, sizeof(session_slot),
                     MAX_SESSIONS);
        if (r == 0)
                r = file_map(&l->buffers, buffers_fd, 0, sizeof(buffer_slot), 0);
        else
                close(buffers_fd);
        if (r < 0) {
                snprintf(why, why_len, "the state record cannot be mapped: %s",
                         strerror(-r));
                ledger_close(l);
                return -EPROTO;
        }
        h = head(l);
        if (memcmp(h->magic, LEDGER_MAGIC, 8) != 0) {
                snprintf(why, why_len, "the state record has no valid header");
                ledger_close(l);
                return -EPROTO;
        }
        /* Version 1 is version 2 without the peer tier's host kind
         * (LEDGER_HOST_PEER): the same layout, read as it is. */
        if ((h->version != ledger_version() &&
             !(h->version == 1 && ledger_version() == 2)) ||
            h->head_size != HEAD_SIZE ||
            h->session_slot_size != sizeof(session_slot) ||
            h->buffer_slot_size != sizeof(buffer_slot) ||
            h->piece_size != sizeof(ledger_piece) ||
            h->max_pieces != MAX_PIECES ||
            (size_t)st.st_size != sessions_file_len()) {
                snprintf(why, why_len, "the state record is version %u "
                         "(this gpu-memd reads versions 1 to %u): downgrade to "
                         "the gpu-memd that wrote it, or stop every client "
                         "and start afresh", h->version, ledger_version());
                ledger_close(l);
                return -EPROTO;
        }
        l->pieces = (ledger_piece *)(l->sessions.map + h->pieces_off);
        for (unsigned s = l->sessions.n; s >= 1; s--) {
                ledger_session rec;

                ledger_session_get(l, s, &rec);
                if (!rec.used && free_push(&l->sessions, s) < 0)
                        r = -ENOMEM;
        }
        for (unsigned s = l->buffers.n; s >= 1; s--) {
                ledger_buffer rec;

                ledger_buffer_get(l, s, &rec);
                if (!rec.used && free_push(&l->buffers, s) < 0)
                        r = -ENOMEM;
        }
        if (r < 0) {
                ledger_close(l);
                return r;
        }
        *ret_ledger = l;
        return 0;
}

static void file_close(slot_file *f)
{
        if (f->map && f->map != MAP_FAILED)
                munmap(f->map, f->len);
        if (f->fd >= 0)
                close(f->fd);
        free(f->free);
}

gmd_ledger *ledger_close(gmd_ledger *ledger)
{
        if (!ledger)
                return NULL;
        file_close(&ledger->sessions);
        file_close(&ledger->buffers);
        free(ledger);
        return NULL;
}

gmd_keep *ledger_keep(gmd_ledger *ledger)
{
        return ledger->keep;
}

int ledger_fd_state(const gmd_ledger *ledger)
{
        return ledger->sessions.fd;
}

int ledger_fd_buffers(const gmd_ledger *ledger)
{
        return ledger->buffers.fd;
}

unsigned ledger_n_sessions(const gmd_ledger *ledger)
{
        return ledger->sessions.n;
}

unsigned ledger_n_buffers(const gmd_ledger *ledger)
{
        return ledger->buffers.n;
}

unsigned ledger_n_pieces(const gmd_ledger *ledger)
{
        (void)ledger;
        return MAX_PIECES;
}

void ledger_session_get(const gmd_ledger *ledger, unsigned slot,
                        ledger_session *ret)
{
        const session_slot *s = slot_at(&ledger->sessions, slot);
        uint32_t cur = __atomic_load_n(&s->cur, __ATOMIC_ACQUIRE) & 1;

        *ret = s->rec[cur];
}

void ledger_buffer_get(const gmd_ledger *ledger, unsigned slot,
                       ledger_buffer *ret)
{
        const buffer_slot *s = slot_at(&ledger->buffers, slot);
        uint32_t cur = __atomic_load_n(&s->cur, __ATOMIC_ACQUIRE) & 1;

        *ret = s->rec[cur];
}

void ledger_piece_get(const gmd_ledger *ledger, unsigned slot,
                      ledger_piece *ret)
{
        *ret = ledger->pieces[slot - 1];
}

uint64_t ledger_next_buffer_id(const gmd_ledger *ledger)
{
        return __atomic_load_n(&head(ledger)->next_buffer_id, __ATOMIC_ACQUIRE);
}

uint64_t ledger_next_client_id(const gmd_ledger *ledger)
{
        return __atomic_load_n(&head(ledger)->next_client_id, __ATOMIC_ACQUIRE);
}

void ledger_set_ids(gmd_ledger *ledger, uint64_t next_buffer_id,
                    uint64_t next_client_id)
{
        __atomic_store_n(&head(ledger)->next_buffer_id, next_buffer_id,
                         __ATOMIC_RELEASE);
        __atomic_store_n(&head(ledger)->next_client_id, next_client_id,
                         __ATOMIC_RELEASE);
}

/* Take a free slot of `f` (growing `grow` files), or -ENOMEM. */
static int slot_take(slot_file *f, bool grow, uint32_t *ret)
{
        if (f->n_free == 0 && (!grow || file_grow(f) < 0))
                return -ENOMEM;
        *ret = f->free[--f->n_free];
        return 0;
}

/*
 * Write `rec` (`rec_size` bytes, its `used` mark set by the caller) into
 * slot `*slot` of `f` — a free one when `*slot` is 0 — or clear the slot
 * when rec is NULL: the slot's other record is filled, then the index
 * flipped with one store. Both slot types are { cur, pad, rec[2] }.
 */
static int slot_put(slot_file *f, bool grow, uint32_t *slot, const void *rec,
                    size_t rec_size)
{
        uint8_t *s, *next_rec;
        uint32_t next;
        int r;

        if (*slot == 0) {
                if (!rec)
                        return 0;
                r = slot_take(f, grow, slot);
                if (r < 0)
                        return r;
        }
        s = slot_at(f, *slot);
        next = !(*(uint32_t *)s & 1);
        next_rec = s + 8 + next * rec_size;
        if (rec)
                memcpy(next_rec, rec, rec_size);
        else
                memset(next_rec, 0, rec_size);
        __atomic_store_n((uint32_t *)s, next, __ATOMIC_RELEASE);
        if (!rec) {
                r = free_push(f, *slot);
                *slot = 0;
                return r;
        }
        return 0;
}

_Static_assert(offsetof(buffer_slot, rec) == 8 &&
               offsetof(session_slot, rec) == 8, "slot_put's layout");

int ledger_put_buffer(gmd_ledger *ledger, uint32_t *slot,
                      const ledger_buffer *rec)
{
        ledger_buffer copy;

        if (rec) {
                copy = *rec;
                copy.used = 1;
        }
        return slot_put(&ledger->buffers, true, slot, rec ? &copy : NULL,
                        sizeof(copy));
}

int ledger_put_session(gmd_ledger *ledger, uint32_t *slot,
                       const ledger_session *rec)
{
        ledger_session copy;

        if (rec) {
                copy = *rec;
                copy.used = 1;
        }
        return slot_put(&ledger->sessions, false, slot, rec ? &copy : NULL,
                        sizeof(copy));
}

bool ledger_has_piece(const gmd_ledger *ledger, unsigned device,
                      uint64_t offset)
{
        for (unsigned i = 0; i < MAX_PIECES; i++) {
                const ledger_piece *p = &ledger->pieces[i];

                if (p->used && p->device == device && p->offset == offset)
                        return true;
        }
        return false;
}

int ledger_put_piece(gmd_ledger *ledger, unsigned device, uint64_t offset,
                     uint64_t size)
{
        for (unsigned i = 0; i < MAX_PIECES; i++) {
                ledger_piece *p = &ledger->pieces[i];

                if (p->used && p->device == device && p->offset == offset) {
                        __atomic_store_n(&p->size, size, __ATOMIC_RELEASE);
                        return 0;
                }
        }
        for (unsigned i = 0; i < MAX_PIECES; i++) {
                ledger_piece *p = &ledger->pieces[i];

                if (p->used)
                        continue;
                p->offset = offset;
                p->size = size;
                p->device = device;
                /* A piece is only ever added: `used` last is enough. */
                __atomic_store_n(&p->used, 1, __ATOMIC_RELEASE);
                return 0;
        }
        return -ENOSPC;
}
