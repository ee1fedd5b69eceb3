/*
 * move — see move.h for the states and their legal changes. Pool bytes
 * follow the memory: the destination's tier
 * pays when its backing is created, the source's tier is paid back when
 * its backing is destroyed (after the ack, or when an orphaned copy ends),
 * so a pool never hands out memory that is still allocated. VRAM kept for
 * swap-ins (reuse.h) stays paid for while kept, and a swap-in into it
 * takes that payment over.
 */
#include "move.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "persist.h"
#include "backing.h"
#include "buffer.h"
#include "destination.h"
#include "hostcopy.h"
#include "log.h"
#include "peer.h"
#include "pending.h"
#include "placement.h"
#include "reuse.h"
#include "server.h"
#include "server_limits.h"
#include "session.h"
#include "slice.h"
#include "timeutil.h"
#include "vram.h"

/* ---- states ------------------------------------------------------------ */

static const char *const state_names[] = {
        [MOVE_COPYING] = "copying",
        [MOVE_COPYING_ACKED] = "copying-acked",
        [MOVE_CANCELLING] = "cancelling",
        [MOVE_AWAITING_ACK] = "awaiting-ack",
        [MOVE_ROLLING_BACK] = "rolling-back",
        [MOVE_ORPHANED] = "orphaned",
        [MOVE_FINISHED] = "finished",
        [MOVE_ABANDONED] = "abandoned",
        [MOVE_DROPPED] = "dropped",
};

#define TO(s) (1u << (s))

/* The table of move.h: the states each state may change to. */
static const unsigned legal_next[] = {
        [MOVE_COPYING] = TO(MOVE_COPYING_ACKED) | TO(MOVE_AWAITING_ACK) |
                         TO(MOVE_CANCELLING) | TO(MOVE_ORPHANED) | TO(MOVE_DROPPED),
        [MOVE_COPYING_ACKED] = TO(MOVE_FINISHED) | TO(MOVE_CANCELLING) |
                               TO(MOVE_ORPHANED) | TO(MOVE_DROPPED),
        [MOVE_CANCELLING] = TO(MOVE_ROLLING_BACK) | TO(MOVE_ABANDONED) |
                            TO(MOVE_ORPHANED) | TO(MOVE_DROPPED),
        [MOVE_AWAITING_ACK] = TO(MOVE_FINISHED) | TO(MOVE_ROLLING_BACK) |
                              TO(MOVE_DROPPED),
        [MOVE_ROLLING_BACK] = TO(MOVE_ABANDONED) | TO(MOVE_DROPPED),
        [MOVE_ORPHANED] = TO(MOVE_DROPPED),
        [MOVE_FINISHED] = 0,
        [MOVE_ABANDONED] = 0,
        [MOVE_DROPPED] = 0,
};

const char *move_state_name(move_state state)
{
        return state <= MOVE_DROPPED ? state_names[state] : "?";
}

bool move_change_state(gmd_move *m, move_state next)
{
        if (!(legal_next[m->state] & TO(next))) {
                log_error("buffer %llu: move %s refused to go from %s to %s "
                          "(a bug: please report it)",
                          (unsigned long long)m->buffer_id,
                          m->copy.dir == GMD_COPY_OUT ? "out" : "in",
                          move_state_name(m->state), move_state_name(next));
                return false;
        }
        log_debug("buffer %llu: move %s %s -> %s", (unsigned long long)m->buffer_id,
                  m->copy.dir == GMD_COPY_OUT ? "out" : "in",
                  move_state_name(m->state), move_state_name(next));
        m->state = next;
        return true;
}

/* Make the copy streams wait for the owner's last use of the buffer (the
 * event it released with). The event is forgotten only when a move that
 * waited for it is over (move_finish): the work before it is then done,
 * which a move cancelled before its copy ran does not show. */
static int wait_last_use(gmd_server *server, gmd_dbuffer *b, gmd_move *m)
{
        m->waited_gen = b->last_use_gen;
        if (!b->last_use)
                return 0;
        return server->backend->ops->event_wait(server->backend, b->last_use);
}

static void move_send_remap(gmd_server *server, gmd_move *m, gmd_mem *mem,
                            gmd_tier tier);

bool move_busy(const gmd_dbuffer *b)
{
        return b->move || b->move_waiter;
}

/* Something about the owner's moves changed: its MSG_WAITs may be met. */
static void moves_changed(gmd_server *server)
{
        pending_mark(&server->pending, PENDING_WAITS);
}

/* An acquire's deadline passed before its buffer was usable (acquirer.h):
 * a SPILLABLE buffer is granted where it is; otherwise the acquire fails
 * and its swap-in goes on as a prefetch. */
static void acquirer_on_deadline(uv_timer_t *timer)
{
        gmd_acquirer *a = timer->data;
        gmd_dbuffer *b = a->buffer;
        gmd_server *server = b->owner->server;
        char why[160];

        /* VRAM first, then host: a SPILLABLE buffer is used where it is.
         * Its swap-in stops, since a buffer in use must not move. */
        if (placement_usable_on_host(b) && b->tier == GMD_TIER_HOST &&
            !(b->move && b->move->copy.dir == GMD_COPY_OUT)) {
                move_cancel(server, b);
                acquirer_grant(a);
                return;
        }
        snprintf(why, sizeof(why), "not back in VRAM after %lld ms; its swap-in "
                 "goes on as a prefetch (see gpu-memctl status)",
                 (long long)a->timeout_ms);
        if (b->move && b->move->copy.dir == GMD_COPY_IN && move_copying(b->move))
                copyq_reclass(&server->copyqs, &b->move->copy, MOVE_BULK);
        if (b->move_waiter)
                waitq_set_rank(b->move_waiter, WAITQ_PREFETCH);
        acquirer_fail(a, GMD_ERR_TIMED_OUT, why);
}

/* ---- moving out -------------------------------------------------------- */

static gmd_move *move_new(gmd_dbuffer *b, gmd_copy_dir dir, move_class cls,
                          gmd_mem *dst)
{
        gmd_move *m = calloc(1, sizeof(*m));

        if (!m)
                return NULL;
        m->buffer = b;
        m->buffer_id = b->id;
        m->state = MOVE_COPYING;
        m->copy.device = b->device;
        m->copy.dir = dir;
        m->copy.cls = cls;
        m->copy.src = b->mem;
        m->copy.dst = dst;
        m->copy.size = b->size;
        list_init(&m->copy.qlink);
        m->src_tier = b->tier;
        m->dst_tier = dir == GMD_COPY_OUT ? GMD_TIER_HOST : GMD_TIER_VRAM;
        m->start_us = now_us();
        return m;
}

int move_out_start(gmd_server *server, gmd_dbuffer *b, move_class cls)
{
        gmd_mem *dst;
        gmd_move *m;
        bool early, clean;
        int r;

        if (!server_can_move(server))
                return -EOPNOTSUPP;
        /* Never a buffer its owner holds, SPILLABLE or not: the owner may
         * write it at any moment (its threads, its kernels), and what it
         * writes after a chunk was copied would stay behind in the VRAM
         * the remap drops (placement.h). Callers skip or refuse such
         * buffers; this is the last guard. */
        if (!placement_may_move(b))
                return -EBUSY;
        if (!copyq_usable(&server->copyqs, b->device, GMD_COPY_OUT))
                return -EIO;
        r = destination_out(server, b, &dst, &clean);
        if (r < 0)
                return r;
        b->move_error = 0;
        m = move_new(b, GMD_COPY_OUT, cls, dst);
        if (!m) {
                destination_out_undo(server, b, dst, clean);
                return -ENOMEM;
        }
        /* Clean: the host copy holds the bytes already. The empty copy
         * still goes through the copy queue after the owner's last use
         * (below), so the owner unmaps, and its VRAM is reused, only once
         * its kernels are done with it. */
        m->clean = clean;
        if (clean)
                m->copy.size = 0;
        /* The owner keeps mapping VRAM kept for the buffer's way back
         * (reuse.h): its remap changes nothing the GPU could be using, so
         * it goes early, even with GPU work pending on the buffer. */
        m->keep_mapping = destination_keeps_mapping(server, b, cls);
        /* The owner's last use, recorded on its stream when it released:
         * the copy streams wait for it on the GPU, not the owner on the
         * host. */
        early = m->keep_mapping || placement_early_out(b);
        r = wait_last_use(server, b, m);
        if (r < 0) {
                free(m);
                destination_out_undo(server, b, dst, clean);
                return r;
        }
        b->move = m;
        buffer_index(b);
        b->state = GMD_STATE_MOVING_OUT;
        /* Released with no GPU work pending on it, a SWAPPABLE buffer is
         * touched by nobody: its owner can unmap while the copy runs
         * (move.h). Work that a last-use event waits for may still run on
         * the GPU, so then the owner unmaps only after the copy, which
         * waited for it. */
        if (early)
                m->remap = MOVE_REMAP_EARLY;
        /* Its VRAM is kept by name before the owner lets go of it. */
        persist_buffer(server, b);
        if (early)
                move_send_remap(server, m, dst, GMD_TIER_HOST);
        log_debug("buffer %llu: move out starts (%s remap%s%s)",
                  (unsigned long long)b->id, early ? "early" : "late",
                  m->keep_mapping ? ", mapping kept" : "",
                  clean ? ", clean: nothing to copy" : "");
        copyq_push(&server->copyqs, &m->copy);
        return 0;
}

int move_relocate_start(gmd_server *server, gmd_dbuffer *b)
{
        unsigned holder = b->mem->device;
        /* A SPILLABLE buffer's owner maps it on the peer (peer.h). */
        bool mapped = placement_usable_on_host(b);
        unsigned queue = mapped ? b->device : holder;
        gmd_mem *dst;
        gmd_move *m;
        int r;

        /* A swap-in may wait for it (peer_relocatable): it then starts
         * once this move ends, from host memory (move_in_begin). */
        if (!b->mem->peer || b->move)
                return -EINVAL;
        /* One its owner uses there moves only once released. */
        if (mapped && !placement_may_move(b))
                return -EBUSY;
        if (!copyq_usable(&server->copyqs, queue, GMD_COPY_OUT))
                return -EIO;
        r = destination_host(server, b, &dst);
        if (r < 0)
                return r;
        m = move_new(b, GMD_COPY_OUT, MOVE_EVICT, dst);
        if (!m) {
                backing_release(server, dst);
                return -ENOMEM;
        }
        /* The bytes leave the peer. A SWAPPABLE buffer's: the peer's
         * queue copies them, and nothing of the owner's touches either
         * side (it maps neither). A SPILLABLE buffer's: its owner may have
         * used it there up to its release, so the home device's queue
         * copies them, after the owner's last use (its event is the home
         * device's, and both sides are accessible from there: the peer's
         * VRAM was granted to it, the host memory is made for it); its
         * owner is remapped to the host memory at the copy's end. */
        m->relocate = true;
        m->copy.device = queue;
        m->src_tier = GMD_TIER_HOST;
        m->dst_tier = GMD_TIER_HOST;
        r = mapped ? wait_last_use(server, b, m) : 0;
        if (r < 0) {
                free(m);
                backing_release(server, dst);
                return r;
        }
        b->move_error = 0;
        b->move = m;
        buffer_index(b);
        persist_buffer(server, b);
        log_debug("buffer %llu: moves from device %u's VRAM to host memory",
                  (unsigned long long)b->id, holder);
        copyq_push(&server->copyqs, &m->copy);
        return 0;
}

/* ---- moving in --------------------------------------------------------- */

int move_in_request(gmd_server *server, gmd_dbuffer *b, waitq_rank rank)
{
        gmd_waitq_who who;
        bool first;
        int r;

        if (!server_can_move(server))
                return -EOPNOTSUPP;
        who = (gmd_waitq_who){ b->owner, b->owner->priority,
                               (uint32_t)b->owner->uid };
        first = waitq_oldest(&server->waitq, b->device) == NULL;
        r = waitq_add_move_in(&server->waitq, &who, b, b->size, b->device, rank,
                              &b->move_waiter);
        if (r < 0)
                return r;
        b->state = GMD_STATE_MOVING_IN;
        /* Nothing waits ahead of it on its device: start it now, inside the
         * request that asked, as the queue would serve it anyway. Its copy
         * then starts before the request is answered and its early remap
         * reaches the owner ahead of the reply. Left to the pass, which runs
         * after the reply, a client issuing prefetch and pageout requests
         * one after another ran 64 x 16 MiB both ways at 0.64-0.70 of the
         * baseline instead of 0.83 (H200, ARCHITECTURE.md "Request path").
         * What cannot start yet stays queued for the pass, as does one
         * that another process's memory slice keeps waiting (slice.h:
         * started here, it would take the VRAM kept for the holder). */
        if (first && !server_slice_keeps(server, b->device, b->owner->pid,
                                         b->owner->priority, b->size, NULL)) {
                gmd_waiter *w = b->move_waiter;

                if (move_in_begin(server, b) == 0 && !b->move_waiter)
                        waitq_drop(w);
        }
        return 0;
}

/* A swap-in that could not start: the buffer stays on host memory. */
static void move_in_refused(gmd_server *server, gmd_dbuffer *b, int code,
                            const char *why)
{
        b->state = GMD_STATE_RESIDENT;
        if (b->acquirer)
                acquirer_fail(b->acquirer, code, why);
        moves_changed(server);
}

int move_in_begin(gmd_server *server, gmd_dbuffer *b)
{
        gmd_pool *pool = server_vram_pool(server, b->device);
        move_class cls;
        gmd_mem *dst;
        gmd_move *m;
        bool kept, mapped;
        int r;

        if (!b->move_waiter)
                return 0;       /* served already: the waitq drops it */
        /* On its way from a peer to host memory (peer.h): it comes from
         * there once that move ends, which serves the queue again. It
         * holds nobody back meanwhile (waitq.h). */
        if (b->move && b->move->relocate)
                return -EINPROGRESS;
        if (b->move)
                return 0;
        cls = b->move_waiter->rank == WAITQ_SWAP_IN ? MOVE_URGENT : MOVE_BULK;
        if (!copyq_usable(&server->copyqs, b->device, GMD_COPY_IN))
                return -EAGAIN; /* a copy just failed: wait, do not spin */
        /* The VRAM its own last move out left, if kept: no scrub of
         * released memory competing with the copy, nothing to create; and
         * if its owner still maps it there, nothing for the owner to
         * import or map either. */
        dst = reuse_take_mapped(&server->reuse, b);
        mapped = dst != NULL;
        if (!dst)
                dst = reuse_take(&server->reuse, &b->owner->reuse, b->device,
                                 b->size, pool_free(pool) < b->size);
        kept = dst != NULL;
        if (!dst) {
                r = reuse_pool_take(&server->reuse, pool, b->size);
                if (r < 0)
                        return r;
        }
        b->move_waiter = NULL;   /* the waitq drops it once we return */
        /* The pool has room; the GPU may not, for memory held outside
         * gpu-memd (vram.h): said in words, as for an allocation. */
        if (!dst) {
                gmd_result why;

                result_ok(&why);
                r = vram_check(server, b->device, b->size, &why);
                if (r < 0) {
                        pool_give(pool, b->size);
                        move_in_refused(server, b, why.code, why.text);
                        return 0;
                }
        }
        r = dst ? 0 : backing_create(server, GMD_TIER_VRAM, b->device, b->size,
                                     true, &dst);
        if (r == 0 && !kept)
                backing_vram_taken(server, b->device);
        b->move_error = 0;
        m = r < 0 ? NULL : move_new(b, GMD_COPY_IN, cls, dst);
        if (!m) {
                gmd_result why;

                log_error("buffer %llu: cannot create VRAM to bring it back: %s",
                          (unsigned long long)b->id, strerror(r < 0 ? -r : ENOMEM));
                if (r < 0)
                        pool_give(pool, b->size);
                else
                        destination_in_undo(server, b, dst, mapped, kept);
                if (r == -ENOMEM) {
                        /* The driver's out of memory: who holds it. */
                        vram_explain(server, b->device, b->size, &why);
                        move_in_refused(server, b, why.code, why.text);
                } else {
                        move_in_refused(server, b, GMD_ERR_INTERNAL,
                                        "the backend could not create VRAM "
                                        "for it");
                }
                return 0;
        }
        /* A SPILLABLE buffer used on host memory and released with an
         * event: the copy back waits for that use too. */
        r = wait_last_use(server, b, m);
        if (r < 0) {
                log_error("buffer %llu: cannot wait for its last use: %s",
                          (unsigned long long)b->id, strerror(-r));
                free(m);
                destination_in_undo(server, b, dst, mapped, kept);
                move_in_refused(server, b, GMD_ERR_INTERNAL,
                                "cannot order the copy after its last use");
                return 0;
        }
        b->move = m;
        buffer_index(b);
        m->dst_from = mapped ? MOVE_DST_MAPPED :
                      kept ? MOVE_DST_KEPT : MOVE_DST_NEW;
        m->keep_mapping = mapped;
        /* Its owner maps no other memory while a SWAPPABLE buffer is out
         * (at most the VRAM it left, when kept mapped for it), so it
         * can map the new VRAM while the copy runs (move.h) — if that VRAM
         * holds nothing but the owner's own bytes: new VRAM is not zeroed
         * (the copy fills it), and the owner could read it before. */
        if (placement_early_in(b, kept)) {
                m->remap = MOVE_REMAP_EARLY;
                move_send_remap(server, m, dst, GMD_TIER_VRAM);
        }
        log_debug("buffer %llu: move in starts (%s remap, %s VRAM)",
                  (unsigned long long)b->id,
                  m->remap == MOVE_REMAP_EARLY ? "early" : "late",
                  mapped ? "kept, still mapped" : kept ? "kept" : "new");
        copyq_push(&server->copyqs, &m->copy);
        return 0;
}

void move_in_cancelled(gmd_dbuffer *b)
{
        b->move_waiter = NULL;
        b->state = GMD_STATE_RESIDENT;
}

static void move_copy_over(gmd_server *server, gmd_move *m);

void move_cancel(gmd_server *server, gmd_dbuffer *b)
{
        gmd_move *m = b->move;

        if (b->move_waiter) {
                waitq_drop(b->move_waiter);
                move_in_cancelled(b);
                moves_changed(server);
                return;
        }
        if (!m || !move_copying(m))
                return;
        if (m->state == MOVE_COPYING || m->state == MOVE_COPYING_ACKED)
                move_change_state(m, MOVE_CANCELLING);
        if (copyq_stop(&server->copyqs, &m->copy))
                move_copy_over(server, m);
}

/* ---- end of the copy, the remap, the ack ------------------------------- */

/* A move out of a SPILLABLE buffer to a peer's VRAM, its remap late: its
 * owner may fail to map that memory (its process cannot see or reach the
 * peer) and keep the buffer, which then goes back to the VRAM it left,
 * still whole (peer.h). */
static bool move_falls_back(const gmd_move *m)
{
        return m->copy.dir == GMD_COPY_OUT && !m->relocate &&
               m->remap == MOVE_REMAP_LATE && m->copy.dst && m->copy.dst->peer &&
               m->buffer && placement_usable_on_host(m->buffer);
}

/* Tell the owner to put `mem` (on `tier`) behind the buffer's address:
 * the move's destination, or its source again after an early remap or a
 * destination its owner could not map (move_fall_back). */
static void move_send_remap(gmd_server *server, gmd_move *m, gmd_mem *mem,
                            gmd_tier tier)
{
        gmd_remap_notice note = { .fd = -1 };
        bool maps = !m->keep_mapping &&
                    placement_owner_maps(m->buffer, mem, tier);

        m->seq = ++server->next_remap_seq;
        note.buffer_id = m->buffer->id;
        note.sequence = m->seq;
        note.tier = tier;
        /* Either way, the owner's mapping of the VRAM side stays. */
        note.keep_mapping = m->keep_mapping;
        note.falls_back = mem == m->copy.dst && move_falls_back(m);
        if (maps) {
                note.fd = mem->fd;
                note.size = mem->size;
                mem->shared = true;
                keptfd_sent(server, mem, m->buffer->owner);
        }
        session_notify_remap(m->buffer->owner, &note);
}

/* A move that ends without moving (cancelled, failed, or rolled back after
 * an early remap): the buffer stays on its old backing. VRAM it took from
 * what was kept for the owner is kept again. */
static void move_abandon(gmd_server *server, gmd_dbuffer *b, gmd_move *m)
{
        move_change_state(m, MOVE_ABANDONED);
        /* A pageout or prefetch the owner asked for that failed: its next
         * wait says so (an acquire hears of its own swap-in below). */
        if (m->copy.status < 0 && m->copy.cls == MOVE_BULK)
                b->move_error = m->copy.status;
        /* Kept again only if it held nothing but the owner's bytes before:
         * new VRAM is not zeroed, and a cancelled copy filled part of it. */
        if (m->dst_from == MOVE_DST_KEPT)
                reuse_keep(&server->reuse, &b->owner->reuse, m->copy.dst);
        else if (m->dst_from == MOVE_DST_MAPPED)
                reuse_keep_mapped(&server->reuse, &b->owner->reuse,
                                  m->copy.dst, b, false);
        else
                destination_out_undo(server, b, m->copy.dst, m->clean);
        b->move = NULL;
        buffer_index(b);
        /* A relocation off a peer of a buffer whose swap-in waits: that
         * swap-in is still queued, and answers its acquire. */
        b->state = b->move_waiter ? GMD_STATE_MOVING_IN : GMD_STATE_RESIDENT;
        persist_buffer(server, b);
        if (b->acquirer && !b->move_waiter) {
                /* A move out that failed leaves the buffer where the
                 * acquire wants it. */
                if (b->tier == GMD_TIER_VRAM)
                        acquirer_grant(b->acquirer);
                else if (m->copy.status < 0)
                        acquirer_fail(b->acquirer, GMD_ERR_INTERNAL,
                                      "copying it back to VRAM failed");
                else if (move_in_request(server, b, WAITQ_SWAP_IN) < 0)
                        acquirer_fail(b->acquirer, GMD_ERR_INTERNAL,
                                      "cannot queue its swap-in");
        }
        free(m);
        pending_mark(&server->pending, PENDING_WAITS | PENDING_ROOM);
}

static void move_finish(gmd_server *server, gmd_dbuffer *b, gmd_move *m)
{
        uint64_t acked_us = now_us(), released_us;
        gmd_mem *old = m->copy.src;
        gmd_tier old_tier = m->src_tier;
        gmd_session *owner = b->owner;

        move_change_state(m, MOVE_FINISHED);
        b->mem = m->copy.dst;
        /* Relocated off a peer while its swap-in waits: still queued, it
         * starts from host memory now (move_in_begin). */
        b->state = b->move_waiter ? GMD_STATE_MOVING_IN : GMD_STATE_RESIDENT;
        b->move = NULL;
        buffer_set_tier(b, m->dst_tier);     /* indexes it too */
        /* The record follows before the old backing can go. */
        persist_buffer(server, b);
        /* Its copy waited for the last use, unless the owner released
         * with a newer one meanwhile (a SPILLABLE buffer may be in use). */
        if (b->last_use_gen == m->waited_gen)
                buffer_set_last_use(server, b, NULL);
        /* VRAM it left is kept before anything else, so that the swap-in
         * an acquirer starts below copies into it. */
        if (old_tier == GMD_TIER_VRAM) {
                /* Requests that came to wait while it moved out want the
                 * room: asked back at once, unless its own acquire is
                 * about to bring it back into it. */
                if (m->keep_mapping)
                        reuse_keep_mapped(&server->reuse, &owner->reuse, old,
                                          b, !b->acquirer &&
                                          destination_room_wanted(server, b));
                else
                        reuse_keep(&server->reuse, &owner->reuse, old);
                old = NULL;
        }
        /* Answer whoever waits for this move first: releasing the old
         * backing is the driver's slow part, and nobody waits for it but
         * the pool. */
        /* Brought in ahead of use and not taken yet: eviction leaves it
         * to the last, and a prefetch never takes its room (evict.h). */
        if (m->copy.dir == GMD_COPY_IN && b->tier == GMD_TIER_VRAM &&
            !b->acquirer && !b->acquired)
                b->prefetched_us = now_us();
        if (b->acquirer && !b->move_waiter) {
                if (b->tier == GMD_TIER_VRAM)
                        acquirer_grant(b->acquirer);
                else if (move_in_request(server, b, WAITQ_SWAP_IN) < 0)
                        acquirer_fail(b->acquirer, GMD_ERR_INTERNAL,
                                      "cannot queue its swap-in");
        }
        /* The host copy a swap-in came from is kept while the buffer is
         * only read (hostcopy.h): its next move out copies nothing. A
         * peer's VRAM is kept for the next swap-out of its size (peer.h),
         * but not when the peer asked for its room back (a relocation),
         * nor memory a SPILLABLE buffer's owner mapped. */
        if (old && old->peer) {
                if (m->relocate || placement_usable_on_host(b) ||
                    !peer_keep(server, old))
                        backing_release(server, old);
        } else if (old && !hostcopy_keep(server, b, old)) {
                backing_release(server, old);
        }
        if (m->clean) {
                server->stats.clean_outs++;
                server->stats.clean_bytes += b->size;
        }
        /* Back in VRAM, into kept memory or not: what its size keeps
         * beyond the buffers still out is of no use now. */
        if (b->tier == GMD_TIER_VRAM)
                reuse_trim(&server->reuse, &owner->reuse, b->device, b->size,
                           buffer_count_out(owner, b->device, b->size));
        released_us = now_us();
        /* Where a move's time goes: queue and copy, the owner's remap, and
         * releasing the old backing. */
        log_debug("buffer %llu: %s %llu bytes in %llu us (copy %llu, remap and "
                  "ack %llu, release %llu) from %llu us, issued +%llu%s",
                  (unsigned long long)b->id,
                  m->copy.dir == GMD_COPY_OUT ? "moved out" : "moved in",
                  (unsigned long long)m->copy.size,
                  (unsigned long long)(released_us - m->start_us),
                  (unsigned long long)(m->copied_us - m->start_us),
                  (unsigned long long)(acked_us - m->copied_us),
                  (unsigned long long)(released_us - acked_us),
                  (unsigned long long)m->start_us,
                  (unsigned long long)(m->copy.issued_us ?
                                       m->copy.issued_us - m->start_us : 0),
                  m->clean ? " clean" : "");
        free(m);
        pending_mark(&server->pending, PENDING_WAITS | PENDING_ROOM);
}

/* Nothing of the copy is in flight any more: every byte copied, or it
 * stopped short (cancelled, failed, refused). */
static void move_copy_over(gmd_server *server, gmd_move *m)
{
        gmd_dbuffer *b = m->buffer;

        m->copied_us = now_us();
        if (m->state == MOVE_ORPHANED) {
                move_change_state(m, MOVE_DROPPED);
                peer_orphan(server, m->copy.src, m->copy.dst, -1);
                backing_release(server, m->copy.dst);
                backing_release(server, m->copy.src);
                free(m);
                pending_mark(&server->pending, PENDING_ROOM);
                return;
        }
        if (m->copy.status < 0 && m->state != MOVE_CANCELLING)
                move_change_state(m, MOVE_CANCELLING);
        switch (m->state) {
        case MOVE_COPYING:
                move_change_state(m, MOVE_AWAITING_ACK);
                /* From a peer to host memory: nobody to tell, but the
                 * owner of a SPILLABLE buffer, which maps it there: it
                 * is remapped like any move out (move_relocate_start). */
                if (m->relocate && !placement_usable_on_host(b)) {
                        move_finish(server, b, m);
                        return;
                }
                /* A copy out is whole now: recorded before the owner is
                 * told to leave its VRAM. */
                persist_buffer(server, b);
                if (m->remap == MOVE_REMAP_LATE)
                        move_send_remap(server, m, m->copy.dst, m->dst_tier);
                /* else the remap is out already: the ack ends it */
                return;
        case MOVE_COPYING_ACKED:
                move_finish(server, b, m);
                return;
        case MOVE_CANCELLING:
                if (m->remap == MOVE_REMAP_EARLY) {
                        /* The owner maps the new backing, or is about to:
                         * back to the old one first, then abandon
                         * (move_handle_ack). */
                        move_change_state(m, MOVE_ROLLING_BACK);
                        move_send_remap(server, m, m->copy.src, m->src_tier);
                        return;
                }
                move_abandon(server, b, m);
                return;
        default:
                log_error("buffer %llu: copy ended in move state %s (a bug: "
                          "please report it)", (unsigned long long)m->buffer_id,
                          move_state_name(m->state));
                return;
        }
}

static void move_ack(gmd_server *server, gmd_session *s, gmd_dbuffer *b,
                     gmd_move *m, const gmd_remap_ack *ack);

/* ---- VRAM kept mapped, asked back (reuse.h) ----------------------------- */

int move_ask_unmap(gmd_server *server, gmd_dbuffer *b)
{
        gmd_remap_notice note = { .fd = -1 };

        b->unmap_seq = ++server->next_remap_seq;
        note.buffer_id = b->id;
        note.sequence = b->unmap_seq;
        note.tier = GMD_TIER_HOST;
        log_debug("buffer %llu: its owner is asked to unmap the VRAM kept "
                  "for it", (unsigned long long)b->id);
        return session_notify_remap(b->owner, &note);
}

/* A remap the client could not carry out: it gave the buffer up (its
 * library marks it revoked), so do we. `what` it could not do. */
static void ack_failed(gmd_server *server, gmd_session *s, gmd_dbuffer *b,
                       const gmd_remap_ack *ack, const char *what)
{
        char who[128];

        log_warning("%s could not %s buffer %llu (%s); freeing it",
                    session_describe(s, who, sizeof(who)), what,
                    (unsigned long long)b->id, strerror(-ack->result));
        move_free_buffer(server, b);
}

/* The owner of a SPILLABLE buffer could not map the peer VRAM it was
 * moved to (move_falls_back): it kept the buffer, unmapped. Back to the
 * VRAM it left, which still holds every byte (released, nobody wrote it):
 * a remap there, whose ack abandons the move and releases the peer's VRAM;
 * that peer is struck from what the owner maps, so its next move out of
 * that device goes to host memory or another peer it maps. */
static void move_fall_back(gmd_server *server, gmd_session *s, gmd_dbuffer *b,
                           gmd_move *m, const gmd_remap_ack *ack)
{
        unsigned holder = m->copy.dst->device;
        char who[128];

        log_warning("%s could not map buffer %llu in device %u's VRAM (%s): "
                    "it stays on device %u, and this client's SPILLABLE "
                    "buffers of device %u no longer go to device %u's VRAM "
                    "(to host memory or another peer it maps)",
                    session_describe(s, who, sizeof(who)),
                    (unsigned long long)b->id, holder, strerror(-ack->result),
                    b->device, b->device, holder);
        peer_owner_cannot_map(s, b->device, holder);
        move_change_state(m, MOVE_ROLLING_BACK);
        move_send_remap(server, m, m->copy.src, m->src_tier);
}

/* The owner unmapped the kept VRAM it was asked back (or could not, and
 * gave the buffer up, as after a failed move). */
static void unmap_acked(gmd_server *server, gmd_session *s, gmd_dbuffer *b,
                        const gmd_remap_ack *ack)
{
        b->unmap_seq = 0;
        reuse_unmapped(&server->reuse, b);
        pending_mark(&server->pending, PENDING_WAITS | PENDING_ROOM);
        if (ack->result < 0)
                ack_failed(server, s, b, ack, "unmap the kept VRAM of");
}

void move_copy_ended(gmd_server *server, gmd_copy *copy)
{
        move_copy_over(server, container_of(copy, gmd_move, copy));
}

gmd_outcome move_handle_ack(gmd_session *s, uint32_t id, const gmd_remap_ack *ack,
                            gmd_result *ret)
{
        gmd_server *server = s->server;
        gmd_dbuffer *b = buffer_find(server, s, ack->buffer_id);
        gmd_move *m = b ? b->move : NULL;

        (void)id;
        (void)ret;
        move_ack(server, s, b, m, ack);
        return OUTCOME_NONE;
}

static void move_ack(gmd_server *server, gmd_session *s, gmd_dbuffer *b,
                     gmd_move *m, const gmd_remap_ack *ack)
{
        /* The owner maps the VRAM a restore gave back: it holds it now. */
        if (b && b->restore_seq && b->restore_seq == ack->sequence) {
                b->restore_seq = 0;
                /* It gave the buffer up (its library marks it revoked,
                 * naming it): so do we, saying why. */
                if (ack->result < 0) {
                        ack_failed(server, s, b, ack, "take up the restored "
                                   "memory of");
                        return;
                }
                persist_buffer(server, b);
                return;
        }
        if (b && b->unmap_seq && b->unmap_seq == ack->sequence) {
                unmap_acked(server, s, b, ack);
                return;
        }
        if (!m || !m->seq || m->seq != ack->sequence) {
                log_debug("client %llu: stale remap ack for buffer %llu ignored",
                          (unsigned long long)s->id,
                          (unsigned long long)ack->buffer_id);
                return;
        }
        if (ack->result < 0 && m->state == MOVE_AWAITING_ACK &&
            move_falls_back(m)) {
                move_fall_back(server, s, b, m, ack);
                return;
        }
        if (ack->result < 0) {
                ack_failed(server, s, b, ack, "map the new backing of");
                return;
        }
        m->seq = 0;
        switch (m->state) {
        case MOVE_COPYING:
                /* Early: the copy's end finishes it. */
                move_change_state(m, MOVE_COPYING_ACKED);
                return;
        case MOVE_AWAITING_ACK:
                move_finish(server, b, m);
                return;
        case MOVE_ROLLING_BACK:
                move_abandon(server, b, m);
                return;
        default:
                /* Cancelled or failed after an early remap: the copy's end
                 * rolls it back whatever the owner answered. */
                return;
        }
}

static void move_buffer_freed(gmd_server *server, gmd_dbuffer *b)
{
        gmd_move *m = b->move;

        if (b->acquirer)
                acquirer_fail(b->acquirer, GMD_ERR_NOT_FOUND,
                              "freed while an acquire waited for it");
        if (b->move_waiter) {
                waitq_drop(b->move_waiter);
                b->move_waiter = NULL;
        }
        if (!m)
                return;
        b->move = NULL;
        buffer_index(b);
        if (!move_copying(m)) {
                /* Remap sent or not, no copy touches the memory any more.
                 * A copy over that the pass has not taken yet is still on
                 * its queue's ended list: out of it first. */
                list_remove(&m->copy.qlink);
                move_change_state(m, MOVE_DROPPED);
                backing_release(server, m->copy.dst);
                free(m);
                return;
        }
        /* Copies still run on both backings: the move frees them after. */
        m->buffer = NULL;
        b->mem = NULL;
        move_change_state(m, MOVE_ORPHANED);
        /* Peer VRAM it frees once over is room on its way there. */
        peer_orphan(server, m->copy.src, m->copy.dst, 1);
        if (copyq_stop(&server->copyqs, &m->copy))
                move_copy_over(server, m);
}

void move_free_buffer(gmd_server *server, gmd_dbuffer *b)
{
        /* A move under way may keep the backing alive until its copies
         * end; it then frees it (and sets b->mem to NULL). */
        move_buffer_freed(server, b);
        persist_buffer_gone(server, b);
        buffer_free(server, b);
}

uint64_t move_leaving_bytes(gmd_server *server, unsigned device)
{
        /* Sessions closing in steps free theirs within a few loop
         * iterations, moving or not (counted there, not here). */
        uint64_t bytes = sessions_closing_vram(&server->sessions, device);
        gmd_list *pos;

        /* Peer VRAM that orphaned moves release at their copy's end: no
         * buffer's any more, so not among the moving ones (peer.h). */
        if (device < GMD_MAX_DEVICES)
                bytes += server->peers.orphaned_on[device];

        list_for_each(pos, &server->buffers.moving) {
                gmd_dbuffer *b = container_of(pos, gmd_dbuffer, moving_link);

                /* A relocation's bytes leave the peer (peer.h), whichever
                 * queue copies them. */
                unsigned from = b->move && b->move->relocate ?
                                b->move->copy.src->device : b->device;

                if (from == device && b->move && !b->owner->closing &&
                    b->move->copy.dir == GMD_COPY_OUT && !move_stopping(b->move))
                        bytes += b->size;
        }
        return bytes;
}

bool move_any_on(gmd_server *server, unsigned device)
{
        gmd_list *pos;

        list_for_each(pos, &server->buffers.moving) {
                gmd_dbuffer *b = container_of(pos, gmd_dbuffer, moving_link);

                if (b->device == device)
                        return true;
        }
        return false;
}

/* ---- acquire ------------------------------------------------------------ */

/* Is `b` being evicted while another process's slice of its device runs
 * (slice.h)? Then the eviction makes that process's room: it goes on. */
static bool evicted_for_slice(gmd_server *server, const gmd_dbuffer *b)
{
        return b->move->copy.cls == MOVE_EVICT &&
               slice_over(&server->slices, b->device, b->owner->pid,
                          b->owner->priority, now_ms(), NULL);
}

/* Set `b` on its way back to VRAM for `a`, which is granted or failed when
 * it is there or cannot come — possibly before this returns. */
static void acquire_start(gmd_server *server, gmd_dbuffer *b, gmd_acquirer *a)
{
        b->acquirer = a;
        if (b->move_waiter) {
                /* Its swap-in is queued: ahead now. If it is being moved
                 * from a peer to host memory meanwhile (peer.h), that move
                 * goes on and the swap-in follows it, from there. */
                waitq_set_rank(b->move_waiter, WAITQ_SWAP_IN);
        } else if (b->move && b->move->copy.dir == GMD_COPY_OUT &&
                   move_copying(b->move)) {
                /* Still copying out: stop, it never left — unless another
                 * process's slice needs the room; then it comes back once
                 * out (move_finish). */
                if (!evicted_for_slice(server, b))
                        move_cancel(server, b);
        } else if (b->move && b->move->copy.dir == GMD_COPY_IN) {
                if (move_copying(b->move))
                        copyq_reclass(&server->copyqs, &b->move->copy, MOVE_URGENT);
        } else if (!b->move && b->tier == GMD_TIER_HOST) {
                if (move_in_request(server, b, WAITQ_SWAP_IN) < 0)
                        acquirer_fail(a, GMD_ERR_INTERNAL,
                                      "cannot queue its swap-in");
        }
        /* else: a move out awaits its ack; move_finish swaps it back in. */
}

gmd_outcome move_acquire(gmd_session *s, uint32_t id, gmd_dbuffer *b,
                         int64_t timeout_ms, bool read_only, gmd_result *ret)
{
        gmd_server *server = s->server;
        gmd_acquirer *a;

        if (b->acquired || b->acquirer)
                return result_error(ret, GMD_ERR_BUSY,
                                    "buffer %llu is already acquired%s",
                                    (unsigned long long)b->id,
                                    b->acquirer ? " (an acquire waits for it)" : "");
        /* A lease that may write: the kept host copy goes before it can
         * be stale (a clean move out under way keeps it until it ends, and
         * gives it up then: hostcopy_put_back, hostcopy_keep). */
        b->lease_ro = read_only;
        if (!read_only)
                hostcopy_drop(server, b);
        /* Usable now: in VRAM and staying, or SPILLABLE anywhere it rests. */
        if ((b->tier == GMD_TIER_VRAM && !b->move) ||
            (placement_usable_on_host(b) && !b->move && !b->move_waiter &&
             (timeout_ms == 0 || !server_can_move(server)))) {
                buffer_set_acquired(b, true);
                return OUTCOME_OK;
        }
        a = acquirer_new(server->loop, s, b);
        if (!a)
                return result_error(ret, GMD_ERR_INTERNAL,
                                    "out of memory");
        a->request_id = id;
        a->timeout_ms = timeout_ms;
        acquire_start(server, b, a);
        if (b->acquirer != a)
                return OUTCOME_ANSWERED;   /* granted or failed already */
        /* A move out that had its owner unmap early is undone by one more
         * remap: it is in VRAM, usable after that round trip. */
        if (timeout_ms == 0 && b->move && b->move->copy.dir == GMD_COPY_OUT &&
            b->move->remap == MOVE_REMAP_EARLY && move_stopping(b->move))
                timeout_ms = GMD_RECLAIM_GRACE_MS;
        if (timeout_ms == 0)
                acquirer_on_deadline(&a->timer);
        else if (timeout_ms > 0)
                uv_timer_start(&a->timer, acquirer_on_deadline, (uint64_t)timeout_ms, 0);
        /* Granted or failed by now, or when the move ends or the deadline
         * passes: either way through acquirer_grant / acquirer_fail. */
        return OUTCOME_LATER;
}

void move_acquire_divert(gmd_dbuffer *b, move_acquired_fn done, void *ctx)
{
        if (!b->acquirer)
                return;
        b->acquirer->on_done = done;
        b->acquirer->ctx = ctx;
}

int move_acquire_for(gmd_server *server, gmd_dbuffer *b,
                     move_acquired_fn done, void *ctx)
{
        gmd_acquirer *a;

        if (b->acquirer)
                return -EBUSY;
        if (b->tier == GMD_TIER_VRAM && !b->move) {
                buffer_set_acquired(b, true);
                return 1;
        }
        buffer_set_acquired(b, false);
        a = acquirer_new(server->loop, b->owner, b);
        if (!a)
                return -ENOMEM;
        a->on_done = done;
        a->ctx = ctx;
        a->timeout_ms = -1;
        acquire_start(server, b, a);
        return 0;
}
