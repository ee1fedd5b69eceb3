/*
 * restore — see restore.h. The restored state is a list of sessions, each
 * with the buffers the record gave it and the memory adopted for them;
 * pools count every restored buffer from the start (its owner's process
 * holds its VRAM; the host copies are the daemon's), and a claim hands the
 * count over to the buffer it becomes.
 */
#include "restore.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backing.h"
#include "buffer.h"
#include "log.h"
#include "move.h"
#include "peer.h"
#include "persist.h"
#include "server.h"
#include "session.h"
#include "timeutil.h"

typedef struct restored_buffer {
        ledger_buffer rec;
        uint32_t slot;
        gmd_mem *host;              /* its whole host copy, adopted, or NULL */
        gmd_mem *vram;              /* VRAM the old daemon alone held
                                     * ("m<id>"), adopted, or NULL */
        bool done;                  /* claimed or given up */
        bool remap;                 /* the claim needs a remap, after the
                                     * reply (restore_after_reply) */
        uint64_t remap_seq;         /* its sequence, where given already */
} restored_buffer;

/* A session of an earlier run, with the sessions that took buffers back
 * from it before that run ended (ledger_session.prior): a client whose
 * claims a restart cut off claims again under the identity it had, and
 * finds the buffers its cut-off claims moved. */
#define MAX_MEMBERS 16

typedef struct restored_member {
        uint64_t id;
        uint32_t uid;
        uint32_t slot;
        uint8_t token[LEDGER_TOKEN_SIZE];
} restored_member;

struct restored_session {
        ledger_session rec;         /* the first member's */
        restored_member members[MAX_MEMBERS];
        unsigned n_members;
        restored_session *into;     /* merged into that one, or NULL */
        restored_buffer *buffers;
        unsigned n;
        bool done;
        gmd_session *claimer;       /* the session that resumed it */
};

static unsigned claim_timeout_s(const gmd_server *server)
{
        return server->config.restart_claim_timeout_s;
}

/* ---- finding what a run left ------------------------------------------- */

/* What was kept but is named by no record (a move's VRAM whose move
 * ended as the daemon died): forgotten, memory and all. */
static void kept_close_rest(gmd_keep *keep)
{
        for (unsigned i = 0; i < keep->n_restored; i++) {
                if (keep->restored[i].fd >= 0) {
                        log_info("restore: dropping kept %s, which the "
                                 "record does not name",
                                 keep->restored[i].name);
                        keep->ops->drop(keep, keep->restored[i].name);
                        close(keep->restored[i].fd);
                        keep->restored[i].fd = -1;
                }
        }
}

/* The pool a buffer's host copy is counted in: the host pool, or the
 * VRAM pool of the peer that holds it (peer.h). */
static gmd_pool *host_pool_of(gmd_server *server, const gmd_mem *copy)
{
        return server_pool(server, copy->tier, copy->device);
}

static uint64_t count_of(gmd_pool *pool, uint64_t bytes, int sign)
{
        if (sign > 0)
                pool_charge(pool, bytes);
        else
                pool_give(pool, bytes);
        return bytes;
}

/* The arena pieces, device by device, before any host copy. */
static void adopt_pieces(gmd_server *server, gmd_ledger *ledger, gmd_keep *keep)
{
        const gmd_backend_ops *ops = server->backend->ops;

        for (unsigned d = 0; d < server->devices.n; d++) {
                gmd_arena_piece pieces[256];
                unsigned n = 0;

                for (unsigned s = 1; s <= ledger_n_pieces(ledger) && n < 256; s++) {
                        ledger_piece p;
                        char name[64];
                        int fd;

                        ledger_piece_get(ledger, s, &p);
                        if (!p.used || p.device != d)
                                continue;
                        ledger_name(name, sizeof(name), 'a', d, p.offset);
                        fd = keep_take(keep, name);
                        if (fd < 0) {
                                log_warning("restore: host arena piece %s was "
                                         "not kept: the host copies in it "
                                         "are lost", name);
                                continue;
                        }
                        /* Kept again for the next run (the keep may have
                         * handed it over for good). */
                        if (keep->ops->put(keep, name, fd) < 0)
                                log_warning("restore: cannot keep %s again", name);
                        pieces[n].offset = p.offset;
                        pieces[n].size = p.size;
                        pieces[n].fd = fd;
                        n++;
                }
                if (n == 0)
                        continue;
                if (!ops->arena_adopt ||
                    ops->arena_adopt(server->backend, d, pieces, n) < 0) {
                        log_error("restore: device %u's host arena could not be "
                                  "taken over: its host copies are lost", d);
                        for (unsigned i = 0; i < n; i++)
                                if (pieces[i].fd >= 0)
                                        close(pieces[i].fd);
                        continue;
                }
                server->persist_built[d] = 0;   /* persist_upkeep sees them */
        }
}

/* Adopt the memory the record names for one buffer. */
static void adopt_buffer(gmd_server *server, gmd_keep *keep, restored_buffer *rb)
{
        const gmd_backend_ops *ops = server->backend->ops;
        const ledger_buffer *rec = &rb->rec;
        char name[64];
        int fd, r = -ENOENT;

        if (rec->host == LEDGER_HOST_ARENA && ops->mem_adopt_private) {
                r = ops->mem_adopt_private(server->backend, rec->device, rec->size,
                                           rec->parts, rec->n_parts, &rb->host);
        } else if ((rec->host == LEDGER_HOST_KEPT ||
                    rec->host == LEDGER_HOST_PEER) && ops->mem_adopt_fd) {
                /* A peer's VRAM (peer.h) is adopted on that device, and
                 * the buffer's own device may copy from it. */
                bool peer = rec->host == LEDGER_HOST_PEER;
                unsigned at = peer ? rec->host_device : rec->device;

                ledger_name(name, sizeof(name), 'h', rec->id, 0);
                fd = peer && (at >= server->devices.n || !ops->mem_grant) ?
                     -1 : keep_take(keep, name);
                if (fd >= 0) {
                        r = ops->mem_adopt_fd(server->backend,
                                              peer ? GMD_TIER_VRAM : GMD_TIER_HOST,
                                              at, rec->size, fd, &rb->host);
                        if (r < 0)
                                close(fd);
                        if (r == 0 && peer) {
                                r = ops->mem_grant(server->backend, rb->host,
                                                   rec->device);
                                if (r < 0) {
                                        ops->mem_destroy(server->backend, rb->host);
                                        rb->host = NULL;
                                }
                        }
                        if (r == 0 && keep->ops->put(keep, name, rb->host->fd) < 0)
                                log_warning("restore: cannot keep %s again", name);
                }
        }
        if (rec->host != LEDGER_HOST_NONE && r < 0) {
                rb->host = NULL;
                log_warning("restore: buffer %llu: its host copy could not be "
                         "taken over (%s)", (unsigned long long)rec->id,
                         strerror(-r));
        }
        if (rec->vram_kept && ops->mem_adopt_fd) {
                ledger_name(name, sizeof(name), 'm', rec->id, 0);
                fd = keep_take(keep, name);
                if (fd >= 0) {
                        r = ops->mem_adopt_fd(server->backend, GMD_TIER_VRAM,
                                              rec->device, rec->size, fd, &rb->vram);
                        if (r < 0) {
                                close(fd);
                                rb->vram = NULL;
                        } else if (keep->ops->put(keep, name, rb->vram->fd) < 0) {
                                log_warning("restore: cannot keep %s again", name);
                        }
                }
        }
        /* Counted where its bytes are, as a live buffer would be. */
        if (rec->tier == GMD_TIER_VRAM)
                count_of(server_vram_pool(server, rec->device), rec->size, 1);
        if (rb->host)
                count_of(host_pool_of(server, rb->host), rec->size, 1);
        server->restore.bytes_found[rec->tier] += rec->size;
}

/* The group that has a member `id`, and that member. */
static restored_session *session_of(gmd_restore *rs, uint64_t id,
                                    const restored_member **ret_member)
{
        for (unsigned i = 0; i < rs->n_sessions; i++) {
                restored_session *r = &rs->sessions[i];

                if (r->into)
                        continue;
                for (unsigned m = 0; m < r->n_members; m++) {
                        if (r->members[m].id == id) {
                                if (ret_member)
                                        *ret_member = &r->members[m];
                                return r;
                        }
                }
        }
        return NULL;
}

/* Sessions that took buffers back from another join its group. */
static void merge_resumed(gmd_restore *rs)
{
        bool merged;

        do {
                merged = false;
                for (unsigned i = 0; i < rs->n_sessions; i++) {
                        restored_session *r = &rs->sessions[i], *to;

                        if (r->into || !r->rec.prior)
                                continue;
                        to = session_of(rs, r->rec.prior, NULL);
                        if (!to || to == r ||
                            to->n_members + r->n_members > MAX_MEMBERS)
                                continue;
                        memcpy(&to->members[to->n_members], r->members,
                               r->n_members * sizeof(r->members[0]));
                        to->n_members += r->n_members;
                        r->into = to;
                        merged = true;
                }
        } while (merged);
}

/* Forget a restored buffer: its pool counts, its memory, its record. */
static void give_up(gmd_server *server, restored_buffer *rb)
{
        const ledger_buffer *rec = &rb->rec;
        gmd_keep *keep = ledger_keep(server->ledger);
        char name[64];

        if (rb->done)
                return;
        rb->done = true;
        if (rec->tier == GMD_TIER_VRAM)
                count_of(server_vram_pool(server, rec->device), rec->size, -1);
        if (rb->host) {
                count_of(host_pool_of(server, rb->host), rec->size, -1);
                server->backend->ops->mem_destroy(server->backend, rb->host);
                rb->host = NULL;
        }
        if (rb->vram) {
                server->backend->ops->mem_destroy(server->backend, rb->vram);
                rb->vram = NULL;
        }
        if (keep) {
                ledger_name(name, sizeof(name), 'h', rec->id, 0);
                keep->ops->drop(keep, name);
                ledger_name(name, sizeof(name), 'm', rec->id, 0);
                keep->ops->drop(keep, name);
        }
        ledger_put_buffer(server->ledger, &rb->slot, NULL);
}

static int load(gmd_server *server, gmd_ledger *ledger, gmd_keep *keep)
{
        gmd_restore *rs = &server->restore;
        unsigned n_sessions = 0;
        uint64_t max_buffer = ledger_next_buffer_id(ledger);
        uint64_t max_client = ledger_next_client_id(ledger);
        uint64_t t0;

        for (unsigned s = 1; s <= ledger_n_sessions(ledger); s++) {
                ledger_session rec;

                ledger_session_get(ledger, s, &rec);
                n_sessions += rec.used;
        }
        rs->sessions = calloc(n_sessions ? n_sessions : 1, sizeof(*rs->sessions));
        if (!rs->sessions)
                return -ENOMEM;
        for (unsigned s = 1; s <= ledger_n_sessions(ledger) &&
                             rs->n_sessions < n_sessions; s++) {
                ledger_session rec;
                restored_session *r;

                ledger_session_get(ledger, s, &rec);
                if (!rec.used)
                        continue;
                r = &rs->sessions[rs->n_sessions++];
                r->rec = rec;
                r->members[0].id = rec.id;
                r->members[0].uid = rec.uid;
                r->members[0].slot = s;
                memcpy(r->members[0].token, rec.token, LEDGER_TOKEN_SIZE);
                r->n_members = 1;
                if (rec.id > max_client)
                        max_client = rec.id;
        }
        merge_resumed(rs);
        t0 = now_us();
        adopt_pieces(server, ledger, keep);
        rs->pieces_us = now_us() - t0;
        t0 = now_us();
        for (unsigned s = 1; s <= ledger_n_buffers(ledger); s++) {
                ledger_buffer rec;
                restored_session *owner;
                restored_buffer *rb;

                ledger_buffer_get(ledger, s, &rec);
                if (!rec.used)
                        continue;
                if (rec.id > max_buffer)
                        max_buffer = rec.id;
                owner = session_of(rs, rec.session_id, NULL);
                if (!owner || rec.device >= server->devices.n ||
                    rec.tier > GMD_TIER_HOST) {
                        uint32_t slot = s;

                        log_warning("restore: buffer %llu names %s: dropped",
                                 (unsigned long long)rec.id,
                                 owner ? "a device or tier this daemon lacks" :
                                         "no recorded session");
                        ledger_put_buffer(ledger, &slot, NULL);
                        continue;
                }
                if (owner->n % 64 == 0) {
                        restored_buffer *grown = realloc(owner->buffers,
                                        (owner->n + 64) * sizeof(*grown));

                        if (!grown)
                                return -ENOMEM;
                        owner->buffers = grown;
                }
                rb = &owner->buffers[owner->n++];
                memset(rb, 0, sizeof(*rb));
                rb->rec = rec;
                rb->slot = s;
                adopt_buffer(server, keep, rb);
                rs->buffers_found++;
        }
        rs->buffers_us = now_us() - t0;
        server->buffers.next_id = max_buffer;
        server->sessions.next_id = max_client;
        return 0;
}

int restore_begin(gmd_server *server, gmd_keep *keep)
{
        gmd_restore *rs = &server->restore;
        gmd_ledger *ledger = NULL;
        char why[256] = "";
        int state, buffers, r;

        rs->started_us = now_us();
        state = keep_take(keep, "state");
        buffers = keep_take(keep, "state.buffers");
        r = ledger_open(keep, state, buffers, &ledger, why, sizeof(why));
        if (r == -EPROTO) {
                log_error("restart: the state an earlier gpu-memd left cannot "
                          "be read: %s. Nothing was dropped: it stays kept "
                          "(a keeper process holds it for [restart] hold_s; "
                          "systemd until the service stops). To start afresh "
                          "and lose it, stop the service (or the keeper) "
                          "first, or set [restart] keep = off.", why);
                return r;
        }
        if (r == -ENOENT) {
                kept_close_rest(keep);
                r = ledger_new(keep, &server->ledger);
                if (r < 0)
                        log_error("restart: cannot make the state record: %s; "
                                  "a restart will lose every client's buffers",
                                  strerror(-r));
                return r;
        }
        if (r < 0)
                return r;
        server->ledger = ledger;
        if (keep->ops->put(keep, "state", ledger_fd_state(ledger)) < 0 ||
            keep->ops->put(keep, "state.buffers", ledger_fd_buffers(ledger)) < 0)
                log_warning("restart: the state record could not be kept again");
        r = load(server, ledger, keep);
        kept_close_rest(keep);
        if (r < 0)
                return r;
        for (unsigned i = 0; i < rs->n_sessions; i++)
                rs->n_left += !rs->sessions[i].into;
        rs->active = rs->n_left > 0;
        rs->restores = 1;
        rs->deadline_ms = now_ms() + claim_timeout_s(server) * 1000ull;
        log_info("restart: took over the state of the gpu-memd before: %u "
                 "client(s), %u buffer(s) (%llu MiB in VRAM, %llu MiB on "
                 "host) in %llu ms (host arena pieces %llu ms, buffers' "
                 "memory %llu ms); waiting up to %u s for the clients to "
                 "claim them", rs->n_left, rs->buffers_found,
                 (unsigned long long)(rs->bytes_found[GMD_TIER_VRAM] >> 20),
                 (unsigned long long)(rs->bytes_found[GMD_TIER_HOST] >> 20),
                 (unsigned long long)((now_us() - rs->started_us) / 1000),
                 (unsigned long long)(rs->pieces_us / 1000),
                 (unsigned long long)(rs->buffers_us / 1000),
                 claim_timeout_s(server));
        restore_tick(server);      /* nobody to wait for: done now */
        return 0;
}

/* ---- claims ------------------------------------------------------------- */

static void verdict(gmd_verdict *v, int code, const char *fmt, uint64_t id,
                    const char *detail)
{
        v->code = code;
        snprintf(v->message, sizeof(v->message), fmt,
                 (unsigned long long)id, detail ? detail : "");
}

/*
 * Is the claim's fd the memory the record names (mem_identity's st_dev,
 * st_ino)? Exact on sim: each memfd is an inode of its own. Not on cuda:
 * every export is an open of /dev/nvidiactl with one (st_dev, st_ino) for
 * all of them (measured: H200, driver 580), so there it accepts any
 * export fd the client sends. What that lets through is bounded by what
 * follows: mem_adopt_fd imports the fd (an fd that is no export is
 * refused there and the buffer's bytes are lost to it, not mixed up) and
 * maps the record's size, which cuMemMap refuses past the allocation's
 * end; so a client can only have another allocation its own process
 * already holds, at least as large, taken back as this buffer: its own
 * memory, never another user's (a client holds only fds it was sent).
 * kcmp(KCMP_FILE), which tells exports apart (keptfd.h), needs the
 * daemon's own open file to compare with, which a restarted daemon no
 * longer has.
 */
static bool same_memory(int fd, uint64_t dev, uint64_t ino)
{
        struct stat st;

        return fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_dev == dev &&
               (uint64_t)st.st_ino == ino;
}

/* A held buffer a restore brought back from host memory. */
static void back_in(void *ctx, gmd_dbuffer *b, int code, const char *why)
{
        (void)ctx;
        if (code != GMD_ERR_NONE)
                log_warning("restart: buffer %llu, held by its owner, did not "
                            "come back to VRAM: %s", (unsigned long long)b->id,
                            why ? why : "");
}

/* Decide where the claimed buffer's bytes are and make it a buffer of `s`. */
static void claim_one(gmd_session *s, restored_buffer *rb, const gmd_claim *c,
                      gmd_verdict *v)
{
        gmd_server *server = s->server;
        const gmd_backend_ops *ops = server->backend->ops;
        const ledger_buffer *rec = &rb->rec;
        gmd_mem *mem = NULL;
        bool from_kept_vram = false;
        gmd_tier tier;
        gmd_dbuffer *b;
        int r;

        if (c->size != rec->size || c->device != rec->device ||
            c->flags != rec->flags) {
                verdict(v, GMD_ERR_INVALID, "buffer %llu: the claim's size, "
                        "device or flags differ from the record%s", rec->id, NULL);
                return;
        }
        tier = (gmd_tier)rec->tier;
        if (tier == GMD_TIER_VRAM && c->fd >= 0 && c->tier == GMD_TIER_VRAM &&
            rec->vram_mapped && same_memory(c->fd, rec->vram_dev, rec->vram_ino)) {
                int fd = dup(c->fd);

                r = fd < 0 ? -errno :
                    ops->mem_adopt_fd(server->backend, GMD_TIER_VRAM, rec->device,
                                      rec->size, fd, &mem);
                if (r < 0 && fd >= 0)
                        close(fd);
                if (r < 0)
                        mem = NULL;
        } else if (tier == GMD_TIER_VRAM && rb->vram) {
                mem = rb->vram;          /* mapped again: remap below */
                rb->vram = NULL;
                rb->remap = true;
                from_kept_vram = true;
        }
        if (!mem && rb->host) {
                /* On host, whole: a cut swap-in, or VRAM that is gone. */
                if (tier == GMD_TIER_VRAM) {
                        count_of(server_vram_pool(server, rec->device), rec->size, -1);
                        tier = GMD_TIER_HOST;
                } else {
                        /* counted on host already */
                }
                mem = rb->host;
                rb->host = NULL;
                /* Whatever the owner maps (VRAM mapped early for a swap-in
                 * the restart cut off) goes. */
                rb->remap = c->fd >= 0;
        } else if (!mem && tier == GMD_TIER_HOST && c->fd >= 0 &&
                   c->tier == GMD_TIER_HOST &&
                   same_memory(c->fd, rec->host_dev, rec->host_ino)) {
                int fd = dup(c->fd);

                r = fd < 0 ? -errno :
                    ops->mem_adopt_fd(server->backend, GMD_TIER_HOST, rec->device,
                                      rec->size, fd, &mem);
                if (r < 0 && fd >= 0)
                        close(fd);
                if (r < 0)
                        mem = NULL;
                else
                        count_of(&server->host.pool, rec->size, 1);
        }
        if (!mem) {
                verdict(v, GMD_ERR_INTERNAL, "buffer %llu: its bytes are lost: "
                        "%s", rec->id, tier == GMD_TIER_VRAM ?
                        "they were in VRAM that nobody kept (the claim sent no "
                        "fd of it)" : "its host copy was not kept");
                log_warning("restart: %s (record: tier %u, host %u, VRAM "
                            "mapped %u kept %u; claim: fd %d tier %u)",
                            v->message, rec->tier, rec->host, rec->vram_mapped,
                            rec->vram_kept, c->fd, c->tier);
                give_up(server, rb);
                server->restore.buffers_lost++;
                return;
        }
        if (rb->host) {         /* a host copy not needed: VRAM is whole */
                count_of(host_pool_of(server, rb->host), rec->size, -1);
                ops->mem_destroy(server->backend, rb->host);
                rb->host = NULL;
        }
        if (rb->vram) {         /* the owner's mapping was the same VRAM */
                ops->mem_destroy(server->backend, rb->vram);
                rb->vram = NULL;
        }
        r = buffer_adopt(server, s, rec->id, rec->device, tier, rec->size,
                         rec->flags, mem, c->acquired, &b);
        if (r < 0) {
                verdict(v, GMD_ERR_INTERNAL, "buffer %llu: cannot be taken "
                        "back: %s", rec->id, strerror(-r));
                count_of(server_pool(server, tier, rec->device), rec->size, -1);
                ops->mem_destroy(server->backend, mem);
                rb->done = true;
                ledger_put_buffer(server->ledger, &rb->slot, NULL);
                server->restore.buffers_lost++;
                return;
        }
        /* Its record and what is kept for it go on in place. */
        b->ledger_slot = rb->slot;
        rb->slot = 0;
        /* Kept under its name still: persist_buffer forgets the "m" one
         * (no move now) and keeps the "h" one while it holds the bytes. */
        if ((rec->host == LEDGER_HOST_KEPT || rec->host == LEDGER_HOST_PEER) &&
            tier == GMD_TIER_HOST)
                b->kept_h = mem;
        /* On a peer: counted there as the peer tier's (peer.h). */
        if (tier == GMD_TIER_HOST && mem->tier == GMD_TIER_VRAM)
                backing_peer_count(server, mem, rec->device, 1);
        if (from_kept_vram || rec->vram_kept)
                b->kept_m = mem;
        /* VRAM only the daemon holds until its owner maps it again: kept
         * as "m<id>" until the remap's ack (move_handle_ack). */
        if (from_kept_vram) {
                rb->remap_seq = ++server->next_remap_seq;
                b->restore_seq = rb->remap_seq;
        }
        rb->done = true;
        /* Its owner holds the fd it sent: looked for if it keeps it
         * after freeing the buffer (keptfd.h). */
        if (c->fd >= 0 && !from_kept_vram && !rb->remap)
                keptfd_sent(server, mem, s);
        persist_buffer(server, b);
        /* Held by its owner but on host memory (lent while its process
         * waited, GMD_ALLOC_YIELD): brought back at once, ahead of other
         * moves; the owner sends nothing more until it is mapped again
         * (libgpumem: gmd__client_leases_unmapped). */
        if (c->acquired && tier == GMD_TIER_HOST &&
            !(rec->flags & GMD_ALLOC_SPILLABLE) &&
            move_acquire_for(server, b, back_in, NULL) < 0)
                log_warning("restart: buffer %llu is held by its owner but "
                            "cannot be brought back to VRAM now",
                            (unsigned long long)b->id);
        /* The client does not hold it if the remap is to map it again. */
        verdict(v, GMD_ERR_NONE, "buffer %llu: taken back%s", rec->id, NULL);
        server->restore.buffers_back++;
        server->restore.bytes_back[tier] += rec->size;
        if (rb->remap)
                rb->rec.tier = (uint8_t)tier;   /* what to tell the owner */
}

/* The session's claims are over: what nobody claimed goes. Its owner
 * claimed every buffer it knows (`claimed`), so those it did not are
 * allocations it never heard of (resent: it gets another) and frees it
 * had finished: freed, not lost. A session whose owner did not come back
 * loses what it had. */
static void session_done(gmd_server *server, restored_session *r,
                         bool claimed)
{
        gmd_restore *rs = &server->restore;

        if (r->done)
                return;
        for (unsigned i = 0; i < r->n; i++)
                if (!r->buffers[i].done) {
                        give_up(server, &r->buffers[i]);
                        if (claimed)
                                rs->buffers_freed++;
                        else
                                rs->buffers_lost++;
                }
        r->done = true;
        for (unsigned m = 0; m < r->n_members; m++)
                ledger_put_session(server->ledger, &r->members[m].slot, NULL);
        if (rs->n_left > 0)
                rs->n_left--;
}

void restore_resume(gmd_session *s, const gmd_resume_ask *ask,
                    gmd_verdict *verdicts)
{
        gmd_server *server = s->server;
        gmd_restore *rs = &server->restore;
        const restored_member *member = NULL;
        restored_session *r = session_of(rs, ask->client_id, &member);
        const char *refuse = NULL;
        int code = GMD_ERR_NONE;

        if (!r || r->done || (r->claimer && r->claimer != s)) {
                code = GMD_ERR_NOT_FOUND;
                refuse = "buffer %llu: gpu-memd kept no such session%s (it "
                         "started afresh, or the time to claim passed: "
                         "[restart] claim_timeout_s)";
        } else if (ask->token_len != LEDGER_TOKEN_SIZE ||
                   memcmp(ask->token, member->token, LEDGER_TOKEN_SIZE) != 0 ||
                   member->uid != (uint32_t)s->uid) {
                code = GMD_ERR_PERMISSION;
                refuse = "buffer %llu: not this client's session%s (token "
                         "or user differ)";
        }
        if (refuse) {
                for (unsigned i = 0; i < ask->n_claims; i++)
                        verdict(&verdicts[i], code, refuse,
                                ask->claims[i].buffer_id, NULL);
                if (code == GMD_ERR_PERMISSION)
                        log_warning("restart: client %llu claimed session %llu "
                                 "with the wrong token or user",
                                 (unsigned long long)s->id,
                                 (unsigned long long)ask->client_id);
                return;
        }
        if (!r->claimer) {
                /* Recorded before any buffer moves to it: a restart now
                 * finds this session in the group it claims from. */
                r->claimer = s;
                s->resumed_from = ask->client_id;
                persist_session(server, s);
        }
        for (unsigned i = 0; i < ask->n_claims; i++) {
                const gmd_claim *c = &ask->claims[i];
                restored_buffer *rb = NULL;

                for (unsigned j = 0; j < r->n && !rb; j++)
                        if (r->buffers[j].rec.id == c->buffer_id)
                                rb = &r->buffers[j];
                if (!rb || rb->done) {
                        verdict(&verdicts[i], GMD_ERR_NOT_FOUND,
                                "buffer %llu: not kept for this session%s "
                                "(freed before the restart, or never "
                                "answered)", c->buffer_id, NULL);
                        continue;
                }
                if (c->freeing) {
                        /* Its free may never have been read: done now. */
                        give_up(server, rb);
                        rs->buffers_freed++;
                        verdict(&verdicts[i], GMD_ERR_NOT_FOUND, "buffer "
                                "%llu: freed, as its owner asked%s",
                                c->buffer_id, NULL);
                        continue;
                }
                claim_one(s, rb, c, &verdicts[i]);
        }
        if (ask->last) {
                log_info("restart: client %llu (pid %d) took back session "
                         "%llu's buffers", (unsigned long long)s->id,
                         (int)s->pid, (unsigned long long)r->rec.id);
                session_done(server, r, true);
                restore_tick(server);
        }
}

void restore_session_gone(gmd_session *s)
{
        gmd_restore *rs = &s->server->restore;

        for (unsigned i = 0; i < rs->n_sessions; i++)
                if (rs->sessions[i].claimer == s)
                        rs->sessions[i].claimer = NULL;
}

void restore_after_reply(gmd_session *s)
{
        gmd_server *server = s->server;
        gmd_restore *rs = &server->restore;

        for (unsigned i = 0; i < rs->n_sessions; i++) {
                restored_session *r = &rs->sessions[i];

                if (r->claimer != s)
                        continue;
                for (unsigned j = 0; j < r->n; j++) {
                        restored_buffer *rb = &r->buffers[j];
                        gmd_dbuffer *b;
                        gmd_remap_notice note = { 0 };

                        if (!rb->remap)
                                continue;
                        rb->remap = false;
                        b = buffer_find(server, s, rb->rec.id);
                        if (!b)
                                continue;
                        note.buffer_id = b->id;
                        note.sequence = rb->remap_seq ? rb->remap_seq :
                                        ++server->next_remap_seq;
                        note.tier = b->tier;
                        /* A SWAPPABLE buffer on host is mapped by nobody:
                         * unmap; else map what holds it now. */
                        if (b->tier == GMD_TIER_HOST &&
                            !(b->flags & GMD_ALLOC_SPILLABLE)) {
                                note.fd = -1;
                        } else {
                                note.fd = b->mem->fd;
                                note.size = b->size;
                        }
                        session_notify_remap(s, &note);
                }
        }
}

void restore_tick(gmd_server *server)
{
        gmd_restore *rs = &server->restore;

        if (!rs->active || (rs->n_left > 0 && now_ms() < rs->deadline_ms))
                return;
        for (unsigned i = 0; i < rs->n_sessions; i++) {
                if (rs->sessions[i].done || rs->sessions[i].into)
                        continue;
                log_warning("restart: session %llu (pid %u) did not come back "
                         "within [restart] claim_timeout_s: its buffers are "
                         "freed", (unsigned long long)rs->sessions[i].rec.id,
                         rs->sessions[i].rec.pid);
                session_done(server, &rs->sessions[i], false);
        }
        rs->active = false;
        rs->restored_ms = (now_us() - rs->started_us) / 1000;
        log_info("restart: restore done in %llu ms: %u of %u buffer(s) taken "
                 "back (%llu MiB in VRAM, %llu MiB on host), %u freed (being "
                 "freed or never answered), %u lost", (unsigned long long)rs->restored_ms,
                 rs->buffers_back, rs->buffers_found,
                 (unsigned long long)(rs->bytes_back[GMD_TIER_VRAM] >> 20),
                 (unsigned long long)(rs->bytes_back[GMD_TIER_HOST] >> 20),
                 rs->buffers_freed, rs->buffers_lost);
        pending_mark(&server->pending, PENDING_ROOM);
}

void restore_clear(gmd_server *server)
{
        gmd_restore *rs = &server->restore;

        for (unsigned i = 0; i < rs->n_sessions; i++) {
                restored_session *r = &rs->sessions[i];

                for (unsigned j = 0; j < r->n; j++) {
                        if (r->buffers[j].host)
                                server->backend->ops->mem_destroy(server->backend,
                                                                  r->buffers[j].host);
                        if (r->buffers[j].vram)
                                server->backend->ops->mem_destroy(server->backend,
                                                                  r->buffers[j].vram);
                }
                free(r->buffers);
        }
        free(rs->sessions);
        rs->sessions = NULL;
        rs->n_sessions = 0;
}
