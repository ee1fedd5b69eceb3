/*
 * session — one connected client: its socket, identity (SO_PEERCRED), the
 * buffers it owns and the replies waiting to be sent to it.
 *
 * A session is closed with session_close(), which may be called from inside
 * its own poll callback: it releases the client's buffers and waiters at
 * once, and the memory of the session itself is freed later, from
 * uv_close's callback.
 */
#ifndef GMD_SESSION_H
#define GMD_SESSION_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
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
        int fd;                     /* the backing to map, or -1: none */
        uint64_t size;              /* its bytes, where fd >= 0 */
} gmd_remap_notice;

/*
 * What the core tells a client outside any request. The core decides
 * what is said and when; the layer that speaks the protocol says it
 * (lifecycle.c registers request.c's, server->session_ops), so no core
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

typedef struct gmd_session {
        gmd_server *server;
        gmd_list link;              /* in server->sessions */
        uint64_t id;
        int fd;
        uv_poll_t poll;
        int poll_events;

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
        bool lends;                 /* it made a wait that lends (loan.h):
                                     * its process lends when it waits */

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
        gmd_list sendq;             /* packets the socket could not take */
        unsigned sendq_len;
        uint64_t sendq_bytes;       /* their payloads (admission.h) */
        bool closing;
        /* To be closed by the server's next check pass (session_close_later):
         * sends are dropped, nothing is read, nothing is freed yet. */
        bool close_pending;
        char close_reason[96];
        gmd_list close_link;        /* in server->close_pending */
} gmd_session;

/* Take over an accepted socket. */
int session_new(gmd_server *server, int fd, gmd_session **ret_session);

/* Close the connection, logging `reason` (NULL for an orderly close). Only
 * for code that owns the moment: the session's own callbacks, the
 * server's stop. Anywhere a caller may still use the session's buffers,
 * waits or acquirers afterwards, use session_close_later. */
void session_close(gmd_session *session, const char *reason);

/* Close the connection from the server's next check pass, after the
 * current callback has returned. Until then the session sends and reads
 * nothing. */
void session_close_later(gmd_session *session, const char *reason);

/*
 * Send one message: encode `msg` (may be NULL for an empty payload) and
 * attach `fds` (duplicated by the kernel; the caller keeps its own). While
 * answers are owed to the session the packet is held behind them
 * (answers.h) and goes out with them, in the same loop iteration. If the
 * socket is full the packet is queued; a client whose queue passes
 * [limits] max_send_queue packets or max_send_queue_bytes, or whose user's
 * connections together pass max_user_send_queue_bytes, is disconnected.
 * So is one whose packet cannot be sent, held or queued for any other
 * reason (no memory, an fd that cannot be kept, a send error, the peer
 * gone): the protocol has no way to tell it a packet went missing. The
 * close comes later (session_close_later), so the caller may go on using
 * the session. Returns 0, -EMSGSIZE for a packet over the protocol's limit
 * (nothing sent, the session stays: the caller answers with an error),
 * or another negative errno (the session is then closing).
 */
int session_send(gmd_session *session, uint16_t type, uint32_t request_id,
                 const ProtobufCMessage *msg, const int *fds, unsigned n_fds);

/* Send a packet held behind the session's answers (answers_take), as it
 * was built. As session_send. */
int session_send_held(gmd_session *session, const gmd_answer *held);

/* Close the session for a protocol error in a message of `type`. */
void session_protocol_error(gmd_session *session, const char *what,
                            uint16_t type);

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
