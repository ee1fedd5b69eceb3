/*
 * evict — see evict.h. Victims are chosen fresh on every call from the
 * list of buffers released on the VRAM tier (server->buffers.vram_idle, which
 * buffer_index keeps in step with leases and tiers): every victim is
 * there, and buffers held in use are not, so a pass with a waiter that
 * nothing can make room for costs what the idle buffers number, not what
 * every client holds.
 */
#include "evict.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "buffer.h"
#include "loan.h"
#include "log.h"
#include "move.h"
#include "parking.h"
#include "peer.h"
#include "pending.h"
#include "placement.h"
#include "reuse.h"
#include "server.h"
#include "session.h"
#include "size.h"
#include "slice.h"
#include "stuck.h"
#include "timeutil.h"
#include "waitq.h"

/* May `b` be moved out for room? Not the buffer of a session closing in
 * steps: it is freed within a few loop iterations, room without a copy
 * (counted by move_leaving_bytes). */
static bool evict_may(const gmd_dbuffer *b)
{
        return placement_evictable(b) && !b->owner->closing;
}

uint64_t evict_idle_bytes(gmd_server *server, unsigned device)
{
        /* What the peer tier holds here goes first (peer.h), but for
         * SPILLABLE buffers their owners hold there. */
        const gmd_peers *peers = &server->peers;
        uint64_t bytes = device < GMD_MAX_DEVICES &&
                         peers->held_on[device] > peers->busy_on[device] ?
                         peers->held_on[device] - peers->busy_on[device] : 0;
        gmd_list *pos;

        if (device < GMD_MAX_DEVICES)
                bytes += peers->spare_on[device];
        if (!server_can_move(server))
                return 0;
        list_for_each(pos, &server->buffers.vram_idle) {
                gmd_dbuffer *b = container_of(pos, gmd_dbuffer, idle_link);

                if (b->device == device && evict_may(b))
                        bytes += b->size;
        }
        return bytes;
}

uint64_t evict_lent_bytes(gmd_server *server, unsigned device, pid_t pid,
                          int priority)
{
        uint64_t bytes = 0;
        gmd_list *pos;

        /* What waited_for_by_other lets go for such a request: not its
         * own process's loans, nor those of a priority above it. */
        list_for_each(pos, &server->buffers.vram_idle) {
                gmd_dbuffer *b = container_of(pos, gmd_dbuffer, idle_link);

                if (b->device == device && b->loan &&
                    (b->owner->pid == pid || b->owner->priority > priority) &&
                    evict_may(b))
                        bytes += b->size;
        }
        return bytes;
}

/* Of what the peer tier holds on `device`, the bytes already on their way
 * to host memory: relocations under way (move_relocate_start; the source
 * is on `device`, whichever queue copies), which move_leaving_bytes
 * counts as a move out of `device` — the same test. */
static uint64_t peer_relocating_bytes(gmd_server *server, unsigned device)
{
        uint64_t bytes = 0;
        gmd_list *pos;

        list_for_each(pos, &server->buffers.moving) {
                gmd_dbuffer *b = container_of(pos, gmd_dbuffer, moving_link);
                const gmd_move *m = b->move;

                if (m && m->relocate && m->copy.src->device == device &&
                    !b->owner->closing && m->copy.dir == GMD_COPY_OUT &&
                    !move_stopping(m))
                        bytes += b->size;
        }
        return bytes;
}

uint64_t evict_evictable(gmd_server *server, unsigned device)
{
        uint64_t bytes = evict_idle_bytes(server, device);
        /* VRAM kept for other devices' swap-outs (peer.h) is released
         * without a copy: no host room needed for it. */
        uint64_t spare = device < GMD_MAX_DEVICES && bytes ?
                         server->peers.spare_on[device] : 0;
        /* Kept host copies give their room to a swap-out (hostcopy.h). */
        uint64_t host = pool_free(&server->host.pool) + server->host.copy_bytes;
        /* Peer bytes being moved on are still held there until their copy
         * ends, but they are room on its way already (move_leaving_bytes,
         * which every caller adds): counted there only. Counted here too,
         * a waiter there was taken for one room could be made for, held
         * its device, and what did fit waited for the relocation's end. */
        uint64_t leaving = peer_relocating_bytes(server, device);

        bytes -= spare;
        bytes = bytes > leaving ? bytes - leaving : 0;
        return (bytes < host ? bytes : host) + spare;
}

/* ---- parked buffers ---------------------------------------------------- */

uint64_t evict_reclaimable(const gmd_list *sessions, unsigned device,
                           uint64_t timeout_ms)
{
        uint64_t bytes = 0, now = now_us();
        const gmd_list *pos;

        list_for_each(pos, sessions) {
                const gmd_session *s = container_of(pos, gmd_session, link);

                if (!parking_overdue(&s->parking, device, now, timeout_ms * 1000))
                        bytes += s->parking.on[device];
        }
        return bytes;
}

bool evict_room_reachable(gmd_server *server, unsigned device, uint64_t size)
{
        return pool_free(server_vram_pool(server, device)) +
               move_leaving_bytes(server, device) +
               reuse_reachable_bytes(&server->reuse, device) +
               evict_reclaimable(&server->sessions.all, device,
                                 server->config.reclaim_timeout_ms) +
               evict_evictable(server, device) >= size;
}

bool evict_user_reclaim_overdue(const gmd_list *sessions, unsigned n_devices,
                                uid_t uid, uint64_t timeout_ms,
                                uint64_t *ret_bytes)
{
        uint64_t now = now_us(), bytes = 0;
        const gmd_list *pos;

        list_for_each(pos, sessions) {
                const gmd_session *s = container_of(pos, gmd_session, link);

                if (s->uid != uid)
                        continue;
                for (unsigned d = 0; d < n_devices; d++)
                        if (parking_overdue(&s->parking, d, now, timeout_ms * 1000))
                                bytes += s->parking.asked[d];
        }
        *ret_bytes = bytes;
        return bytes != 0;
}

/* Say once per ask which clients let one pass its deadline. */
static void reclaim_log_ignored(gmd_list *sessions, unsigned device,
                                uint64_t timeout_ms)
{
        uint64_t now = now_us();
        gmd_list *pos;

        list_for_each(pos, sessions) {
                gmd_session *s = container_of(pos, gmd_session, link);
                char who[128];

                if (s->parking.ignored[device] ||
                    !parking_overdue(&s->parking, device, now, timeout_ms * 1000))
                        continue;
                s->parking.ignored[device] = true;
                log_warning("%s was asked to return %llu parked bytes on device %u "
                            "and returned none in %llu ms ([limits] "
                            "reclaim_timeout_ms): not counting on them; room is "
                            "made elsewhere", session_describe(s, who, sizeof(who)),
                            (unsigned long long)s->parking.asked[device], device,
                            (unsigned long long)timeout_ms);
        }
}

/* Ask one session for up to `bytes` of what it has parked on `device` and
 * was not asked for yet. Returns what was asked. */
static uint64_t reclaim_from(gmd_session *s, unsigned device, uint64_t bytes)
{
        uint64_t asked;

        if (s->closing || s->parking.on[device] == s->parking.asked[device])
                return 0;
        asked = parking_ask(&s->parking, device, bytes);
        log_debug("asking client %llu for %llu parked bytes on device %u",
                  (unsigned long long)s->id, (unsigned long long)asked, device);
        session_notify_reclaim(s, device, asked);
        return asked;
}

void evict_reclaim_user(gmd_list *sessions, unsigned n_devices, uid_t uid)
{
        gmd_list *pos;

        list_for_each(pos, sessions) {
                gmd_session *s = container_of(pos, gmd_session, link);

                if (s->uid != uid || !s->parking.bytes)
                        continue;
                for (unsigned d = 0; d < n_devices; d++)
                        reclaim_from(s, d, 0);
        }
}

void evict_reclaim_session(gmd_session *s, unsigned n_devices)
{
        for (unsigned d = 0; d < n_devices; d++)
                reclaim_from(s, d, 0);
}

static int by_priority(const void *a, const void *b)
{
        const gmd_session *x = *(gmd_session *const *)a, *y = *(gmd_session *const *)b;

        return (x->priority > y->priority) - (x->priority < y->priority);
}

void evict_reclaim(gmd_list *sessions, unsigned n_sessions, unsigned device,
                     uint64_t bytes)
{
        gmd_session **order;
        unsigned n = 0;
        gmd_list *pos;

        order = calloc(n_sessions ? n_sessions : 1, sizeof(*order));
        if (!order)
                return;
        list_for_each(pos, sessions) {
                gmd_session *s = container_of(pos, gmd_session, link);

                if (s->parking.on[device] > s->parking.asked[device] &&
                    n < n_sessions)
                        order[n++] = s;
        }
        qsort(order, n, sizeof(*order), by_priority);
        for (unsigned i = 0; i < n && bytes > 0; i++) {
                uint64_t asked = reclaim_from(order[i], device, bytes);

                bytes = bytes > asked ? bytes - asked : 0;
        }
        free(order);
}

/* ---- moving idle buffers out ------------------------------------------- */

/* Buffers released first, those lent by a waiting process (loan.h) last:
 * each of those is a round trip its owner waits for. Then lowest client
 * priority first; within it, buffers nobody announced a
 * use of (least recently released first) before those a prefetch brought
 * in or kept, latest prefetch first: a client prefetches in the order it
 * will use, so the latest is needed last. Oldest-released first would
 * pick the buffer needed next (a training step's backward pass paged in
 * and out again ~1.3 GiB a step that way, H200, BENCHMARKS.md). */
static int by_victim_order(const void *x, const void *y)
{
        const gmd_dbuffer *a = *(gmd_dbuffer *const *)x, *b = *(gmd_dbuffer *const *)y;
        bool pa = a->prefetched_us != 0, pb = b->prefetched_us != 0;

        if (!a->loan != !b->loan)
                return a->loan ? 1 : -1;
        if (a->owner->priority != b->owner->priority)
                return a->owner->priority < b->owner->priority ? -1 : 1;
        if (pa != pb)
                return pa ? 1 : -1;
        if (pa)
                return (a->prefetched_us < b->prefetched_us) -
                       (a->prefetched_us > b->prefetched_us);
        return (a->released_ms > b->released_ms) - (a->released_ms < b->released_ms);
}

/* How long a lower priority's request waits before a loan it inherits
 * (lent_inherits) may go for it: [limits] priority_grace_ms, else
 * INHERIT_MIN_MS, never more than INHERIT_MAX_MS, so a lock-up lasts at
 * most that long whatever the grace. */
#define INHERIT_MIN_MS 1000
#define INHERIT_MAX_MS 5000

static uint64_t inherit_after_ms(const gmd_server *server)
{
        uint64_t grace = server->config.priority_grace_ms;

        if (grace < INHERIT_MIN_MS)
                return INHERIT_MIN_MS;
        return grace < INHERIT_MAX_MS ? grace : INHERIT_MAX_MS;
}

/* Does `w`'s process hold VRAM in use on `w`'s device while it waits
 * without lending it (no GMD_ALLOC_YIELD: no connection of it lends)? */
static bool holds_unlent(gmd_server *server, const gmd_waiter *w)
{
        bool holds = false;
        gmd_list *pos;

        if (w->loan)
                return false;
        list_for_each(pos, &server->sessions.all) {
                const gmd_session *s = container_of(pos, gmd_session, link);

                if (!session_same_process(s, w->session) || s->closing)
                        continue;
                if (s->loan)
                        return false;
                if (s->acquired_on[w->device])
                        holds = true;
        }
        return holds;
}

/* Can the request that made `loan` not be served from free, kept, parked
 * and released VRAM, its own loan left out (what scheduler.c's
 * waiter_reachable calls reachable now)? Then it waits for memory some
 * process holds in use. */
static bool lender_blocked(gmd_server *server, const gmd_loan *loan,
                           unsigned device)
{
        const gmd_session *s = loan->session;
        gmd_list *pos;

        if (!s)
                return false;
        list_for_each(pos, &server->waitq.waiters) {
                const gmd_waiter *w = container_of(pos, gmd_waiter, link);

                if (w->loan != loan)
                        continue;
                return !evict_room_reachable(server, device,
                        w->size + loan_out_bytes(loan, device) +
                        evict_lent_bytes(server, device, s->pid, s->priority));
        }
        return false;
}

/* May `b`, lent by a process of a priority above `w`'s, go for `w` (its
 * request of a lower priority)? Only to break a lock-up: `w`'s process
 * holds VRAM in use there and does not lend it; the lender's own request
 * cannot be served without memory held in use (`w`'s, which comes free
 * only once `w` is served, or another's); only such loans could serve
 * `w`; and `w` waited inherit_after_ms. Else *ret_wait_ms is when `w`
 * will have waited so long. */
static bool lent_inherits(gmd_server *server, const gmd_dbuffer *b,
                          const gmd_waiter *w, uint64_t now,
                          int *blocked, uint64_t *ret_wait_ms)
{
        uint64_t after_ms = inherit_after_ms(server);
        uint64_t waited_ms = now > w->since_us ?
                             (now - w->since_us) / 1000 : 0;

        if (!holds_unlent(server, w))
                return false;
        /* Looked up once per buffer: `blocked` is 0 unknown, else 1 + it. */
        if (!*blocked)
                *blocked = 1 + lender_blocked(server, b->loan, b->device);
        if (*blocked != 2 ||
            !evict_room_reachable(server, w->device, w->size) ||
            evict_room_reachable(server, w->device, w->size +
                                 evict_lent_bytes(server, w->device,
                                                  w->session->pid,
                                                  w->priority)))
                return false;
        if (waited_ms < after_ms) {
                if (after_ms - waited_ms < *ret_wait_ms)
                        *ret_wait_ms = after_ms - waited_ms;
                return false;
        }
        return true;
}

/* `b`, lent by a higher priority, goes out for `w` (lent_inherits). */
static void inherit_log(gmd_server *server, const gmd_dbuffer *b,
                        const gmd_waiter *w)
{
        char lender[128], to[128];

        log_info("device %u: buffer %llu lent by %s, priority %d, goes for "
                 "%s, priority %d, which waited %llu ms holding memory in use "
                 "that the lender's request waits for (a loan goes to a lower "
                 "priority only so, after %llu ms)", b->device,
                 (unsigned long long)b->id,
                 session_describe(b->owner, lender, sizeof(lender)),
                 b->owner->priority,
                 session_describe(w->session, to, sizeof(to)), w->priority,
                 (unsigned long long)((now_us() - w->since_us) / 1000),
                 (unsigned long long)inherit_after_ms(server));
}

/* Does an acquire or allocation of another process than `b`'s owner, of
 * its owner's priority or above, wait for VRAM on its device? What a
 * process lent goes for those only: a lower priority's request that took
 * it made the lender wait for its return. Measured on the H200
 * (bench_cotenancy --quick, 2026-11-28, a77fe9f): the priority-10
 * inference job's weights, lent while its request waited, went out for a
 * training job's step. But a lower priority's request inherits the loan
 * where the two would otherwise wait for each other (lent_inherits): it
 * holds memory in use it does not lend, which the lender's own request
 * needs, and only the loan could serve it; both waited until the lower
 * one's request timed out. Returns the waiter the loan goes for, NULL
 * when none; *ret_wait_ms is when a lower one may inherit it. */
static const gmd_waiter *waited_for_by_other(gmd_server *server,
                                             const gmd_dbuffer *b,
                                             uint64_t *ret_wait_ms)
{
        const gmd_session *owner = b->owner;
        const gmd_waiter *lower = NULL;
        uint64_t now = now_us();
        int blocked = 0;
        gmd_list *pos;

        list_for_each(pos, &server->waitq.waiters) {
                const gmd_waiter *w = container_of(pos, gmd_waiter, link);

                if (w->device != b->device || w->rank == WAITQ_PREFETCH ||
                    session_same_process(owner, w->session))
                        continue;
                if (w->priority >= owner->priority)
                        return w;
                if (!lower && lent_inherits(server, b, w, now, &blocked,
                                            ret_wait_ms))
                        lower = w;
        }
        return lower;
}

/* [limits] priority_grace_ms: is `b`, of a client above every waiter,
 * released too recently to go? Then *ret_wait_ms is when it may. */
static bool in_grace(gmd_server *server, const gmd_dbuffer *b, int top,
                     uint64_t now, uint64_t *ret_wait_ms)
{
        uint64_t grace = server->config.priority_grace_ms;
        uint64_t since = now > b->released_ms ? now - b->released_ms : 0;

        if (!grace || b->owner->priority <= top || since >= grace)
                return false;
        if (grace - since < *ret_wait_ms)
                *ret_wait_ms = grace - since;
        return true;
}

/* What of the memory of the process whose slice runs (slice.h) may go:
 * released buffers for its own requests (it pages for itself) and for
 * those of processes above its priority, lent ones for the latter only. */
typedef struct slice_room {
        pid_t holder;           /* 0: no slice runs */
        uint64_t left_ms;
        uint64_t released;      /* bytes of its released buffers that may go */
        uint64_t lent;          /* of its lent ones */
} slice_room;

static void slice_room_of(gmd_server *server, unsigned device, uint64_t now,
                          slice_room *r)
{
        gmd_list *pos;

        memset(r, 0, sizeof(*r));
        r->holder = slice_holder(&server->slices, device, now, &r->left_ms);
        if (!r->holder)
                return;
        list_for_each(pos, &server->waitq.waiters) {
                const gmd_waiter *w = container_of(pos, gmd_waiter, link);

                if (w->device != device)
                        continue;
                if (w->session->pid == r->holder) {
                        r->released += w->size;
                } else if (w->priority > server->slices.on[device].priority) {
                        r->released += w->size;
                        r->lent += w->size;
                }
        }
}

/* May `b` go, as far as the slice that runs on its device goes? Else
 * *ret_wait_ms is when the slice ends. */
static bool slice_allows(slice_room *r, const gmd_dbuffer *b, uint64_t *ret_wait_ms)
{
        uint64_t *room = b->loan ? &r->lent : &r->released;

        if (!r->holder || b->owner->pid != r->holder)
                return true;
        if (!*room) {
                if (r->left_ms < *ret_wait_ms)
                        *ret_wait_ms = r->left_ms;
                return false;
        }
        *room = *room > b->size ? *room - b->size : 0;
        return true;
}

unsigned evict_choose(gmd_server *server, unsigned device, uint64_t need,
                      uint64_t urgent, uint64_t now, gmd_dbuffer ***ret_victims,
                      uint64_t *ret_wait_ms)
{
        gmd_dbuffer **victims;
        unsigned n = 0, cap = 0, chosen = 0;
        uint64_t wait_ms = UINT64_MAX;
        int top = server->config.priority_grace_ms ?
                  waitq_top_priority(&server->waitq, device) : INT_MIN;
        slice_room slice;
        gmd_list *pos;

        *ret_victims = NULL;
        *ret_wait_ms = UINT64_MAX;
        list_for_each(pos, &server->buffers.vram_idle)
                cap++;
        if (!cap || !need)
                return 0;
        victims = calloc(cap, sizeof(*victims));
        if (!victims)
                return 0;
        list_for_each(pos, &server->buffers.vram_idle) {
                gmd_dbuffer *b = container_of(pos, gmd_dbuffer, idle_link);

                if (b->device == device && evict_may(b))
                        victims[n++] = b;
        }
        qsort(victims, n, sizeof(*victims), by_victim_order);
        slice_room_of(server, device, now, &slice);
        for (unsigned i = 0; i < n && need > 0; i++) {
                gmd_dbuffer *b = victims[i];

                /* A prefetch does not push out what is about to be used. */
                if (b->prefetched_us && !urgent)
                        continue;
                /* What a process lent goes for another's acquire or
                 * allocation only: its own would have to wait for it to
                 * come back, and a prefetch can wait. */
                if (b->loan) {
                        uint64_t inherit_ms = UINT64_MAX;
                        const gmd_waiter *w = urgent ?
                                waited_for_by_other(server, b, &inherit_ms) :
                                NULL;

                        if (inherit_ms < wait_ms)
                                wait_ms = inherit_ms;
                        if (!w)
                                continue;
                        if (w->priority < b->owner->priority)
                                inherit_log(server, b, w);
                }
                /* A higher-priority client's memory waits out its grace. */
                if (in_grace(server, b, top, now, &wait_ms))
                        continue;
                /* The memory of a process whose slice runs stays its own. */
                if (!slice_allows(&slice, b, &wait_ms))
                        continue;
                victims[chosen++] = b;
                need = need > b->size ? need - b->size : 0;
                urgent = urgent > b->size ? urgent - b->size : 0;
        }
        *ret_wait_ms = wait_ms;
        if (!chosen) {
                free(victims);
                return 0;
        }
        *ret_victims = victims;
        return chosen;
}

/* `device` is short of room: the slice of its memory goes to the first
 * process waiting for it when nobody's runs, and passes to another once
 * it is over (slice.h). */
static void slice_pass(gmd_server *server, unsigned device, uint64_t now)
{
        const gmd_slice *cur = &server->slices.on[device];
        const gmd_session *first = NULL, *other = NULL;
        gmd_list *pos;
        char who[128];

        if (!server->slices.length_ms)
                return;
        list_for_each(pos, &server->waitq.waiters) {
                const gmd_waiter *w = container_of(pos, gmd_waiter, link);

                if (w->device != device || w->rank == WAITQ_PREFETCH ||
                    w->session->pid <= 0)
                        continue;
                if (!first)
                        first = w->session;
                if (!other && w->session->pid != cur->pid)
                        other = w->session;
                if (other)
                        break;
        }
        if (!first || !slice_update(&server->slices, device, first->pid,
                                    first->priority, other ? other->pid : 0,
                                    other ? other->priority : 0, now))
                return;
        log_info("device %u: a %u ms slice of its memory to %s, priority %d: what "
                 "it holds stays while it runs ([limits] memory_slice_ms)", device,
                 server->config.memory_slice_ms,
                 session_describe(cur->pid == first->pid ? first : other, who,
                                  sizeof(who)),
                 cur->priority);
}

/* `device` needs `need` bytes of room: what the peer tier holds there goes
 * first (peer.h): its spares released, then other devices' buffers moved
 * on to host memory, the oldest first — those whose swap-in waits for
 * room at home after the others, since they may be wanted back soonest —
 * until `need` bytes are on their way. Returns the bytes freed or on
 * their way. */
static uint64_t peer_make_room(gmd_server *server, unsigned device,
                               uint64_t need)
{
        uint64_t started = peer_drop_spares_on(server, device);
        gmd_list *pos, *next;
        int r = 0;

        if (started >= need || device >= GMD_MAX_DEVICES ||
            !server->peers.held_on[device])
                return started;
        for (int waited = 0; waited < 2 && r == 0; waited++) {
                list_for_each_safe(pos, next, &server->buffers.all) {
                        gmd_dbuffer *b = container_of(pos, gmd_dbuffer,
                                                      server_link);

                        if (started >= need)
                                break;
                        if (!peer_relocatable(b, device) ||
                            (b->move_waiter != NULL) != waited)
                                continue;
                        r = move_relocate_start(server, b);
                        if (r < 0) {
                                log_info("peer tier: cannot move buffer %llu "
                                         "off device %u to host memory: %s",
                                         (unsigned long long)b->id, device,
                                         r == -ENOSPC ? "host memory is full "
                                         "([pools] host_limit)" :
                                         strerror(-r));
                                break;
                        }
                        started += b->size;
                        server->peers.relocated++;
                }
        }
        if (started) {
                char s[32];

                size_format(started, s, sizeof(s));
                log_info("peer tier: device %u needs room: moving %s of "
                         "other devices' buffers on to host memory", device,
                         s);
        }
        return started;
}

static void evict_device(gmd_server *server, unsigned device, uint64_t need,
                         uint64_t urgent)
{
        gmd_dbuffer **victims;
        uint64_t wait_ms, chosen = 0;
        unsigned n = evict_choose(server, device, need, urgent, now_ms(),
                                  &victims, &wait_ms);

        for (unsigned i = 0; i < n; i++)
                chosen += victims[i]->size;
        stuck_log(server, device, need, chosen);

        /* Look again when what a priority's grace or a slice held back
         * may go. */
        if (wait_ms != UINT64_MAX)
                pending_mark_after(&server->pending, PENDING_ROOM | PENDING_EVICT,
                                   wait_ms + 1);

        for (unsigned i = 0; i < n; i++) {
                gmd_dbuffer *b = victims[i];
                char who[128];
                int r;

                r = move_out_start(server, b, MOVE_EVICT);
                if (r < 0) {
                        log_info("cannot evict buffer %llu of %s: %s",
                                 (unsigned long long)b->id,
                                 session_describe(b->owner, who, sizeof(who)),
                                 r == -ENOSPC ? "host memory is full ([pools] host_limit)" :
                                 strerror(-r));
                        break;
                }
                log_info("evicting buffer %llu (%llu bytes, released %llu ms ago%s) "
                         "of %s, priority %d, to host memory",
                         (unsigned long long)b->id, (unsigned long long)b->size,
                         (unsigned long long)(now_ms() - b->released_ms),
                         b->prefetched_us ? ", prefetched" : "",
                         session_describe(b->owner, who, sizeof(who)),
                         b->owner->priority);
        }
        free(victims);
}

/* The waiters a running slice holds back (slice.h) want no room now:
 * room made for them would be the holder's (the VRAM kept for its
 * swap-ins, its parked buffers) or taken back by it, and they are served
 * after the slice. Counted, they made the holder give up both at every
 * pass: on the H100 (bench_cotenancy, 1 s slices) the holder created and
 * destroyed 17 VRAM allocations a step and stepped at 53 ms against 35
 * alone. */
typedef struct held_back {
        gmd_server *server;
        uint64_t now;
        uint64_t left_ms;       /* of the slice, when `any` */
        bool any;
} held_back;

static bool held_by_slice(void *ctx, const gmd_waiter *w)
{
        held_back *h = ctx;

        if (!server_slice_over(h->server, w->device, w->session->pid,
                               w->priority, h->now, &h->left_ms))
                return false;
        h->any = true;
        return true;
}

/* What the requests waiting on `device` that rank before `before` want
 * (waitq_demand_before), but for those a running slice holds back. */
static uint64_t demand_now(gmd_server *server, unsigned device,
                           waitq_rank before, uint64_t now)
{
        held_back h = { server, now, 0, false };
        uint64_t bytes = waitq_demand_before(&server->waitq, device, before,
                                             held_by_slice, &h);

        /* Look again when the slice ends, whatever its holder does. */
        if (h.any)
                pending_mark_after(&server->pending, PENDING_ROOM | PENDING_EVICT,
                                   h.left_ms + 1);
        return bytes;
}

/* The slice of `device` ends once its holder has left it idle for
 * SLICE_IDLE_MS while others wait (slice.h). On the H100 a training job
 * done with its last step kept its slice, and the other job waiting,
 * for the 1.3 s it took to exit (bench_cotenancy --quick, 2026-11-26). */
static void slice_end_idle(gmd_server *server, unsigned device, uint64_t now)
{
        uint64_t idle_ms;
        pid_t holder = slice_holder(&server->slices, device, now, NULL);

        if (!holder || !waitq_oldest(&server->waitq, device) ||
            !server_idle(server, device, holder, now, &idle_ms))
                return;
        if (idle_ms < SLICE_IDLE_MS) {
                pending_mark_after(&server->pending, PENDING_ROOM | PENDING_EVICT,
                                   SLICE_IDLE_MS - idle_ms + 1);
                return;
        }
        slice_end(&server->slices, device);
        log_info("device %u: the slice of pid %d ends: it used none of its "
                 "buffers there for %llu ms", device, (int)holder,
                 (unsigned long long)idle_ms);
}

/* The slice of `device` stops its clock while its holder waits and a
 * process above the slice's priority uses the device (slice.h,
 * SLICE_PAUSE_LENGTHS): on the H200 (bench_cotenancy --quick,
 * 2026-11-28) a training job's 5 s slice ran out while the priority-10
 * inference job held the memory, passed to the other training job, and
 * the first one's step waited 16.5 s. */
static void slice_pause_check(gmd_server *server, unsigned device, uint64_t now)
{
        gmd_slices *slices = &server->slices;
        uint64_t again_ms = UINT64_MAX;
        pid_t holder = slice_holder(slices, device, now, NULL);
        bool blocked;

        if (!holder) {
                slice_pause(slices, device, false, now);
                return;
        }
        blocked = server_waits(server, device, holder) &&
                  server_busy_above(server, device, holder,
                                    slices->on[device].priority, now,
                                    &again_ms);
        /* Look again when a grace that keeps it paused ends. */
        if (blocked && again_ms != UINT64_MAX)
                pending_mark_after(&server->pending,
                                   PENDING_ROOM | PENDING_EVICT, again_ms + 1);
        if (!slice_pause(slices, device, blocked, now))
                return;
        if (blocked)
                log_info("device %u: the slice of pid %d stops while a process "
                         "of a higher priority uses the device and pid %d "
                         "waits", device, (int)holder, (int)holder);
        else
                log_info("device %u: the slice of pid %d goes on", device,
                         (int)holder);
}

/* Is the holder of the slice of `device` stalled (slice.h, slice_stall):
 * does a request of it there wait for room that free, leaving, kept,
 * parked and evictable VRAM cannot make (scheduler.c's waiter_reachable:
 * what it lent, and loans above its priority, no room for it)? Then it
 * waits for memory held in use, and the processes holding some are not
 * held back: the one it waits for may be among them. When that changes
 * to stalled, what the slice held back is served again. */
static void slice_stall_check(gmd_server *server, unsigned device, uint64_t now)
{
        pid_t holder = slice_holder(&server->slices, device, now, NULL);
        bool stalled = false;
        gmd_list *pos;

        list_for_each(pos, &server->waitq.waiters) {
                const gmd_waiter *w = container_of(pos, gmd_waiter, link);

                if (!holder || w->device != device ||
                    w->rank == WAITQ_PREFETCH || w->session->pid != holder)
                        continue;
                if (!evict_room_reachable(server, device, w->size +
                                loan_out_bytes(w->loan, device) +
                                evict_lent_bytes(server, device, holder,
                                                 w->priority))) {
                        stalled = true;
                        break;
                }
        }
        if (!slice_stall(&server->slices, device, stalled))
                return;
        if (stalled) {
                log_info("device %u: the slice of pid %d waits for memory "
                         "in use: it holds back no process holding memory "
                         "in use there meanwhile", device, (int)holder);
                pending_mark(&server->pending, PENDING_ROOM);
        } else {
                log_debug("device %u: the slice's holder waits for nothing "
                          "held in use any more", device);
        }
}

/* Kept VRAM on `device` its owners were asked to unmap, and may still:
 * counted on for [limits] reclaim_timeout_ms, as parked memory asked back
 * is, and looked at again when that ends. */
static uint64_t unmapping_bytes(gmd_server *server, unsigned device,
                                uint64_t now)
{
        uint64_t next, bytes = reuse_unmapping_bytes(&server->reuse, device,
                                                     &next);

        if (bytes)
                pending_mark_after(&server->pending,
                                   PENDING_ROOM | PENDING_EVICT,
                                   next > now ? next - now + 1 : 1);
        return bytes;
}

bool evict_balance(gmd_server *server)
{
        bool released = false;
        uint64_t now = now_ms();

        for (unsigned d = 0; d < server->devices.n; d++) {
                uint64_t demand, room, parked, moving, leaving;
                gmd_pool *pool = server_vram_pool(server, d);

                slice_end_idle(server, d, now);
                slice_pause_check(server, d, now);
                slice_stall_check(server, d, now);
                demand = demand_now(server, d, WAITQ_RANKS, now);
                if (!demand)
                        continue;
                /* Moves out under way; releasing kept VRAM starts none. */
                moving = move_leaving_bytes(server, d);
                leaving = moving + unmapping_bytes(server, d, now);
                room = pool_free(pool) + leaving;
                if (room >= demand)
                        continue;
                /* VRAM kept for swap-ins is the cheapest room: no copy;
                 * where its owner still maps it, one message (make_room
                 * counts what is asked back already). The waiters are
                 * served again below. */
                if (reuse_make_room(&server->reuse, pool, demand - moving,
                                    false)) {
                        released = true;
                        leaving = moving + unmapping_bytes(server, d, now);
                        room = pool_free(pool) + leaving;
                        if (room >= demand)
                                continue;
                }
                reclaim_log_ignored(&server->sessions.all, d,
                                    server->config.reclaim_timeout_ms);
                parked = evict_reclaimable(&server->sessions.all, d,
                                           server->config.reclaim_timeout_ms);
                if (parked) {
                        evict_reclaim(&server->sessions.all, server->sessions.n, d,
                                        demand - room);
                        room += parked;
                        /* Look again once an ask may have gone unanswered. */
                        pending_mark_after(&server->pending,
                                           PENDING_ROOM | PENDING_EVICT,
                                           server->config.reclaim_timeout_ms);
                }
                /* Other devices' buffers resting here (the peer tier)
                 * are the first to go: this device's clients come first. */
                if (room < demand && server_can_move(server))
                        room += peer_make_room(server, d, demand - room);
                if (room < demand && server_can_move(server)) {
                        uint64_t urgent = demand_now(server, d, WAITQ_PREFETCH,
                                                     now);

                        slice_pass(server, d, now);
                        evict_device(server, d, demand - room,
                                     urgent > room ? urgent - room : 0);
                }
        }
        return released;
}
