/*
 * session — one connected client as the core knows it: its identity
 * (SO_PEERCRED, read when it connected), its limits, the buffers it owns,
 * what it waits for and the answers it is owed. Its socket, the packets
 * the socket could not take yet and the protocol are the dispatch
 * layer's (dispatch/session_io.h), which embeds this record in its own
 * and frees both, from uv_close's callback.
 *
 * The core never closes a session on the spot: it marks one to be closed
 * (session_close_later, session_close_after_answers) and the scheduling
 * pass closes it (session_close, dispatch/session_io.h). From the mark on,
 * nothing more is read from it or sent to it.
 *
 * A close frees the session's buffers, at most SESSION_CLOSE_BATCH of
 * them a loop iteration: a client that left holding 10,000 buffers took
 * 44-50 ms to free in one go, and nobody else was served meanwhile. One
 * with more is *closing in steps*: it stays among the server's sessions,
 * shown in status with what it still holds, reads and sends nothing, and
 * the pass's closes step frees a batch each loop iteration until none is
 * left; then it leaves them and its socket closes.
 */
#ifndef GMD_SESSION_H
#define GMD_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "answers.h"
#include "gpumem.h"
#include "list.h"
#include "parking.h"
#include "quota.h"
#include "reuse.h"
#include "result.h"
#include "users.h"
#include "server_limits.h"
#include "waitq.h"
#include "waits.h"

typedef struct gmd_server gmd_server;
typedef struct gmd_session gmd_session;

/* A buffer's backing changed, or VRAM kept mapped for it is asked back
 * (move.h): what its owner is told to map, outside any request. */
typedef struct gmd_remap_notice {
        uint64_t buffer_id;
        uint64_t sequence;          /* the owner's ack names it */
        gmd_tier tier;
        bool keep_mapping;          /* the VRAM side stays mapped */
        bool falls_back;            /* to a peer's VRAM: a failed ack is
                                     * answered with a remap back (peer.h) */
        int fd;                     /* the backing to map, or -1: none */
        uint64_t size;              /* its bytes, where fd >= 0 */
} gmd_remap_notice;

/*
 * What the core tells a client outside any request. The core decides
 * what is said and when; the layer that speaks the protocol says it
 * (lifecycle.c registers request.c's, server->sessions.ops), so no core
 * file builds a message. Each returns as session_send: 0, or a negative
 * errno (the session is then closing).
 */
typedef struct gmd_session_ops {
        int (*notify_remap)(gmd_session *session,
                            const gmd_remap_notice *notice);
        /* Ask for `bytes` of what it parked on `device` (parking.h). */
        int (*notify_reclaim)(gmd_session *session, unsigned device,
                              uint64_t bytes);
} gmd_session_ops;

/* Who is on the other end of a new connection (SO_PEERCRED and
 * SO_PEERGROUPS, read by the dispatch layer). */
typedef struct gmd_peer {
        pid_t pid;
        uid_t uid;
        gid_t gid;
        gid_t groups[32];           /* primary first, then supplementary */
        unsigned n_groups;
} gmd_peer;

/* The memory plan a client last reported (MSG_PLAN): figures for
 * administrators to see in status, which nothing in the daemon acts on. */
typedef struct gmd_plan {
        char planner[33];           /* "" if it reported none */
        uint64_t kept, offloaded, recomputed, streamed;
} gmd_plan;

typedef struct gmd_session {
        gmd_server *server;
        gmd_list link;              /* in server->sessions.all */
        uint64_t id;

        pid_t pid;
        uid_t uid;
        gid_t gid;
        gmd_user *user;             /* its user's record (users.h) */
        gid_t groups[32];           /* primary first, then supplementary */
        unsigned n_groups;
        bool admin;                 /* root or in [daemon] admin_group */
        gmd_limits limits;          /* from the quota rules; redone on reload */
        int priority;
        bool priority_by_admin;     /* set with gpu-memctl priority */
        char name[65];
        bool hello_done;
        unsigned version;
        bool keeps_mappings;        /* Hello.keeps_mappings (reuse.h) */
        uint8_t token[16];          /* its resume token (restore.h), drawn
                                     * at the hello */
        uint32_t ledger_slot;       /* its slot in the state record, 0 if
                                     * none (persist.h) */
        uint64_t resumed_from;      /* the earlier run's session it took
                                     * buffers back from, or 0 */
        bool lends;                 /* it made a wait that lends (loan.h):
                                     * its process lends when it waits */
        gmd_plan plan;              /* its last MSG_PLAN, zeros if none */
        /* Per device it uses, the other devices whose VRAM its process
         * can map there, a bit each (its last MSG_REACH; none without
         * one): where its SPILLABLE buffers may rest (peer.h). */
        uint64_t maps[GMD_MAX_DEVICES];

        gmd_list buffers;           /* owned buffers */
        unsigned n_buffers;
        uint64_t bytes;
        uint64_t tier_bytes[2];     /* by gmd_tier */
        /* Its buffers on the VRAM tier, per device (buffer_account): how
         * much of a device's pool one process holds, without walking the
         * buffers (alloc_self_bound). */
        uint64_t vram_on[GMD_MAX_DEVICES];
        unsigned vram_n_on[GMD_MAX_DEVICES];
        /* The most it held there at once: the room a memory slice it
         * holds keeps for it (server_slice_keeps). */
        uint64_t vram_peak[GMD_MAX_DEVICES];
        /* VRAM its process holds on each device beyond what gpu-memd
         * accounts to it, as last refreshed (outside.h); on the oldest
         * session of its process only, 0 on the others. */
        uint64_t outside_on[GMD_MAX_DEVICES];
        /* Bytes its process holds through kept fds of freed buffers,
         * charged (keptfd.h), for status; on the oldest live session of the
         * process only. Its user's quota counts them by uid. */
        uint64_t kept_outside;
        /* Its buffers of a device acquired now, on either tier, and when
         * that last fell to none (server_idle). */
        unsigned acquired_on[GMD_MAX_DEVICES];
        uint64_t unused_since_ms[GMD_MAX_DEVICES];
        gmd_reuse_owner reuse;      /* VRAM kept for its swap-ins (reuse.h) */
        gmd_parking_owner parking;  /* of `bytes`, parked in its mapping
                                     * cache (parking.h) */
        gmd_waitq_owner waitq;      /* its allocations waiting (waitq.h) */
        struct gmd_loan *loan;      /* what its process lent while one of
                                     * them waits (loan.h), or NULL */

        gmd_waits waits;            /* MSG_WAITs waiting for moves (waits.h) */

        uint64_t connected_ms;      /* accepted at (hello deadline) */

        gmd_answers answers;        /* replies owed, for the pass to send,
                                     * and packets held behind them
                                     * (answers.h) */
        bool closing;
        /* Closing, its buffers not all freed yet: closing in steps (in
         * server->sessions.closing) or about to be. Neither flag: open;
         * both: closing; `closing` alone: closed. */
        bool releasing;
        /* To be closed by the server's next check pass (session_close_later):
         * sends are dropped, nothing is read, nothing is freed yet. */
        bool close_pending;
        char close_reason[96];
        gmd_list close_link;        /* in server->sessions.close_pending,
                                     * then in .closing while it closes in
                                     * steps */
        /* What it held when its close began, for the log line at its end. */
        unsigned close_buffers;
        uint64_t close_bytes;
} gmd_session;

/* Buffers the closes of one loop iteration free at most (256 took about
 * 1 ms on sim), and how long one session's batch may run. */
#define SESSION_CLOSE_BATCH 256
#define SESSION_CLOSE_STEP_US 2000

/* The server's connected clients (server->sessions). */
typedef struct gmd_sessions {
        gmd_list all;               /* gmd_session.link, oldest first */
        unsigned n;
        uint64_t next_id;           /* the last client id given */
        gmd_list close_pending;     /* to close in the pass
                                     * (session_close_later) */
        gmd_list closing;           /* closing in steps, oldest first */
        unsigned n_closing;
        /* Buffers closes may still free this loop iteration
         * (sessions_next_turn). */
        unsigned release_left;
        gmd_list answers_due;       /* owed answers, for the pass to send
                                     * (answers.h) */
        /* Set by lifecycle.c, the layer above: a session that began to
         * close (what goes at once: its waiters, waits, loans, records),
         * the freeing of its buffers — while `*left` (decremented for
         * each) and the clock (until `until_us`) allow; true once none
         * is left and the rest of what it owned is released too — and
         * what the core tells a client outside any request. */
        void (*on_closed)(gmd_session *session);
        bool (*release)(gmd_session *session, unsigned *left,
                        uint64_t until_us);
        const gmd_session_ops *ops;
} gmd_sessions;

/* No sessions yet; `on_closed`, `release` and `ops` are the caller's to
 * set (without `release` a close frees nothing of the buffers). */
void sessions_init(gmd_sessions *sessions);

/* A new loop iteration: its closes may free SESSION_CLOSE_BATCH buffers
 * again. */
void sessions_next_turn(gmd_sessions *sessions);

/* VRAM on `device` still held by sessions closing in steps: room on its
 * way, freed within a few loop iterations without a copy (move.h,
 * move_leaving_bytes). */
uint64_t sessions_closing_vram(const gmd_sessions *sessions, unsigned device);

/* Fill the record of a new client `peer` of `server` (zeroed by the
 * caller): its id, limits and empty lists. 0, or -ENOMEM (nothing to
 * undo). It is not among the server's sessions until session_link. */
int session_init(gmd_session *session, gmd_server *server,
                 const gmd_peer *peer);

/* Count it among the server's sessions and its user's. */
void session_link(gmd_session *session);

/* Let go of what session_init took (its user's record), as its memory
 * is freed. */
void session_fini(gmd_session *session);

/*
 * The core's half of closing the connection, logging `reason` (NULL for
 * an orderly close): what the session owned is released (the server's
 * on_closed, then its buffers by release), what it was owed dropped, and
 * it leaves the server's sessions. True once that is done; session_close
 * (dispatch/session_io.h) calls it, then closes the socket. False when
 * the close is not over: it was closed already, or it holds more buffers
 * than this loop iteration may free and closes in steps — its socket
 * stays open, neither read nor written, until the pass's closes step has
 * freed the last of them and calls session_close again (scheduler.h).
 * While the server stops, everything is freed at once.
 */
bool session_end(gmd_session *session, const char *reason);

/* Close the connection from the server's next check pass, after the
 * current callback has returned. Until then the session sends and reads
 * nothing. */
void session_close_later(gmd_session *session, const char *reason);

/* A packet lost (`what` failed with `err`): the protocol has no way to
 * say so, and the client would wait for its answer, or for the move its
 * remap notice announced, forever. So the connection is closed later
 * instead, which ends all it held. Returns `err`. */
int session_lost_packet(gmd_session *session, const char *what, int err);

/*
 * Owe the session an answer decided outside the request that asked for it
 * (an acquire granted or failed, a MSG_WAIT met or timed out, a notice):
 * `kind` with `result`'s code and text is queued for the scheduling pass,
 * whose last step has request.c build and send it, in the order queued
 * (answers.h). No reply is built here. Nothing is queued for a session
 * closing: -ECONNRESET; else 0 or -ENOMEM (the session is then closed
 * later: its client would wait for the answer forever).
 */
int session_answer(gmd_session *session, answer_kind kind, uint32_t request_id,
                   const gmd_result *result);

/* Close the connection once the answers owed to it are sent (a notice
 * saying why goes first), logging `reason`. Until then it reads nothing
 * and nothing new is sent to it. */
void session_close_after_answers(gmd_session *session, const char *reason);

/* Resolve the session's limits and admin right from the server's config
 * (at connect and after a reload). Keeps the priority within the new
 * maximum unless an admin set it. */
void session_apply_config(gmd_session *session);

/* What all `sessions` (gmd_session links) of user `uid` hold together. */
void session_user_usage(const gmd_list *sessions, uid_t uid,
                        gmd_usage *ret_usage);

/* Are `a` and `b` connections of one process (the same pid; a session
 * whose pid is unknown is only itself)? A process's connections share
 * what it lends while one of them waits (loan.h). */
static inline bool session_same_process(const gmd_session *a,
                                        const gmd_session *b)
{
        return a == b || (a->pid > 0 && a->pid == b->pid);
}

/* Tell the session's client what `notice` says (gmd_session_ops). */
int session_notify_remap(gmd_session *session, const gmd_remap_notice *notice);

/* Ask the session's client for `bytes` parked on `device`. */
int session_notify_reclaim(gmd_session *session, unsigned device,
                           uint64_t bytes);

/* "client 3 (pid 1234, uid 1000, trainer)" for log lines. */
const char *session_describe(const gmd_session *session, char *buf, size_t len);

#endif
