/*
 * client — the inside of a gmd_client: one connection to gpu-memd, the
 * library's I/O thread, and the request/reply machinery every public call
 * goes through.
 *
 * Shape: callers send their request under `send_lock`, park a gmd_request
 * (keyed by request id) on `pending`, and sleep on its condition variable.
 * The I/O thread is the only reader of the socket: it decodes each packet,
 * hands replies to their request, and applies notifications (remap, revoke)
 * itself, so pointers stay valid while the application is busy. Everything
 * the daemon sends is checked here before it is trusted; anything malformed
 * closes the connection and fails every waiting call, never the process.
 *
 * A nowait call (gmd_*_nowait) parks a gmd_request of the library's own
 * instead, marked `nowait`, and returns once its packet is sent: the I/O
 * thread takes the answer like any other, keeps the first error in the
 * client (`nowait_error`) for gmd_flush and frees the record. `nowaits`
 * counts those still unanswered; gmd_flush sleeps on `nowait_cond` until it
 * is 0 (a dead connection drops those still pending, so it gets there).
 *
 * Restart recovery (reconnect.c): a connection that ends without the
 * daemon saying it stops for good (ShutdownNotify) or drained this client
 * is not the client's end. The state goes UP -> AWAY: the I/O thread
 * connects again, says hello and claims the buffers back, while every
 * mapping stays and calls wait on the pending list unsent. Then RESENDING:
 * `gen` counts the connection, and the I/O thread sends every pending
 * request not sent on this one (sent_gen), in the list's order, before
 * the state goes UP and callers send their own again. DEAD is for good.
 *
 * Locks: `lock` (pending requests, connection state), `buffers_lock` (the
 * buffer table and the mapping cache, held across a remap so a buffer
 * cannot be freed under the I/O thread), `send_lock` (one writer on the
 * socket). Only two orders nest: buffers_lock is held while send_lock is
 * taken (gmd__client_send_after: the cache's messages leave in the order its
 * changes were made), and `lock` is a leaf taken under either for a moment.
 * Nothing takes buffers_lock while holding send_lock or `lock`. A request
 * is put on the pending list and sent under send_lock, so the I/O thread,
 * which installs a new connection under send_lock, never sends it twice.
 */
#ifndef GMD_CLIENT_H
#define GMD_CLIENT_H

#include <protobuf-c/protobuf-c.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "devices.h"
#include "gpumem.h"
#include "gpumem.pb-c.h"
#include "list.h"
#include "mapcache.h"
#include "mapper.h"
#include "wire.h"

/* The connection's lifecycle; gmd__client_change_state_locked moves it. */
typedef enum gmd_conn_state {
        GMD_CONN_UP,            /* calls are sent as they come */
        GMD_CONN_AWAY,          /* lost: reconnecting, resuming; calls wait */
        GMD_CONN_RESENDING,     /* resumed: the I/O thread sends what waited */
        GMD_CONN_DEAD,          /* no more requests can succeed */
} gmd_conn_state;

#define GMD_RESUME_TOKEN_MAX 64

/* A memory plan as gmd_report_plan reports it (MSG_PLAN). */
typedef struct gmd_plan_report {
        char planner[33];               /* "" for none */
        uint64_t kept, offloaded, recomputed, streamed;
} gmd_plan_report;

struct gmd_client {
        int sock;
        int wake_fd;                    /* eventfd: stops the I/O thread */
        pthread_t io_thread;
        bool io_started;

        gmd_mapper *mapper;
        char *backend;
        char *daemon_version;
        unsigned version;
        unsigned n_devices;
        uint64_t *granularity;          /* per device, from the hello */
        gmd__device_id *ids;            /* per device, from the hello */
        /* Per device, the daemon's devices whose memory this process can
         * map for use there (gmd__client_reach, once the mapper is made);
         * sent as MSG_REACH to a daemon whose hello reply asks for it. */
        uint64_t *reach;
        /* Per device, the devices the application gave access to its
         * buffers (gmd_peer_access; buffers_lock), and a count of the
         * changes, which a buffer mapped outside buffers_lock compares
         * (peer_access.c). */
        uint64_t *peer_access;
        _Atomic unsigned peer_gen;
        uint64_t client_id;
        /* Restart recovery (reconnect.c): where to connect again and for
         * how long ($GPU_MEMD_RECONNECT_S; 0, or no path: never), and the
         * fds of mappings kept at or above keep_fd_base (buffer.h; -1:
         * none kept). */
        char *socket_path;
        uint64_t reconnect_ms;
        int keep_fd_base;
        /* What the hello says again on a new connection, and the session
         * to claim back (HelloReply.resume_token; I/O thread only). */
        char name[65];
        int32_t priority;
        bool keeps_mappings;
        uint8_t resume_token[GMD_RESUME_TOKEN_MAX];
        size_t resume_token_len;

        pthread_mutex_t send_lock;

        pthread_mutex_t lock;
        uint32_t next_request_id;
        gmd_list pending;               /* gmd_request.node */
        gmd_conn_state state;
        uint64_t gen;                   /* connections resumed so far */
        uint64_t away_since_ms;         /* when the state went AWAY */
        bool drained;                   /* an administrator's drain revoked
                                         * a buffer: the end is for good */
        int dead_error;                 /* GMD_ECONN or GMD_EPROTO */
        char dead_reason[256];
        char shutdown_notice[192];      /* ShutdownNotify's words, or "" */
        unsigned nowaits;               /* nowait requests unanswered */
        pthread_cond_t nowait_cond;     /* signalled when nowaits drops to 0 */
        int nowait_error;               /* first error answered to one since
                                         * the last gmd_flush, or 0 */
        char nowait_reason[512];        /* ... its sentence */

        /* The memory plan last reported, sent again on the connection a
         * resume makes (a restarted daemon knows none); `has_plan` false
         * when none was, or the last report was empty (gmd_report_plan
         * with no name and no bytes: taken back). Under `lock`, changed
         * and sent under send_lock, so the last reported is the last
         * sent. */
        bool has_plan;
        gmd_plan_report plan;

        pthread_mutex_t buffers_lock;
        gmd_list buffers;               /* gmd_buffer.node, parked ones too */
        gmd_mapcache cache;             /* idle mappings, buffers_lock */
};

/* One call waiting for its reply. Owned by the calling thread; the I/O
 * thread fills it in and sets `done` under client->lock. */
typedef struct gmd_request {
        gmd_list node;                  /* in client->pending until answered */
        uint32_t id;
        uint16_t expect;                /* reply type that answers it */
        unsigned device;                /* MSG_ALLOC: device of the buffer */
        unsigned flags;                 /* MSG_ALLOC: flags asked for */
        uint64_t size;                  /* MSG_ALLOC: bytes asked for */
        pthread_cond_t cond;
        bool done;
        int error;                      /* 0 or why the call failed */
        char *message;                  /* words for `error`, may be NULL */
        ProtobufCMessage *reply;        /* decoded reply when error == 0 */
        gmd_buffer *buffer;             /* MSG_ALLOC: mapped buffer */
        bool unmapped;                  /* MSG_ALLOC: made, but not mappable */
        uint64_t unmapped_id;           /* ... the daemon's id for it */
        /* A nowait call's record (gmd__client_send_nowait): owned by the
         * pending list, freed by whoever completes it; nobody waits on
         * `cond`. */
        const char *nowait;             /* the public call's name, or NULL */
        uint64_t buffer_id;             /* nowait: the buffer named, 0: all */
        bool releases;                  /* nowait: a release; a refusal that
                                         * leaves it acquired restores the
                                         * buffer's lease mark */
        /* To send it again on a new connection (client->lock): */
        uint16_t type;
        uint8_t *packed;                /* the payload */
        size_t packed_len;
        uint64_t sent_gen;              /* client->gen it went out on, 0:
                                         * never */
        bool resent;                    /* sent again after a resume */
        bool orphan;                    /* about a buffer a restarted
                                         * daemon did not keep: answered
                                         * here, never sent again */
        uint64_t deadline_ms;           /* the call's own deadline (alloc,
                                         * acquire, wait), 0: none */
        int64_t timeout_ms;             /* ... as the caller gave it */
        const struct gmd_buffer *names; /* the buffer the call is about,
                                         * checked as it is queued */
} gmd_request;

/*
 * Connect over an already connected SOCK_SEQPACKET socket `fd` (consumed,
 * closed on failure too): hello, mapper choice, I/O thread. gmd_connect()
 * is this after socket() and connect(); tests call it with one end of a
 * socketpair. Internal: not exported from libgpumem.so.
 */
int gmd__connect_fd(int fd, const char *client_name, gmd_client **ret_client);

/*
 * Send request `type` with payload `msg` and wait for its answer in `req`,
 * which the caller zeroes (setting `device` for MSG_ALLOC) and clears with
 * gmd__request_clear() afterwards. Returns 0 with req->reply (and req->buffer
 * for MSG_ALLOC) set, or the error, which gmd_last_error() explains.
 */
int gmd__client_call(gmd_client *client, gmd_request *req, uint16_t type,
                const ProtobufCMessage *msg);

/* gmd__client_call in two halves: _start sends (a dead connection or an
 * unsendable message answers `req` at once), _finish waits for the answer
 * and returns as gmd__client_call does. Between them `req` belongs to the
 * pending list and must stay where it is. */
void gmd__client_call_start(gmd_client *client, gmd_request *req,
                            uint16_t type, const ProtobufCMessage *msg);
int gmd__client_call_finish(gmd_client *client, gmd_request *req);

/*
 * Send request `type` with payload `msg` without waiting for its answer:
 * the I/O thread takes the answer, and gmd_flush reports the first error
 * one was answered with, as "`call` of buffer N: the daemon's words"
 * (`buffer` NULL: "of all buffers"). When `releases`, `buffer` is given
 * back: its lease mark is cleared before the packet leaves, so the answer
 * cannot overtake it (io.c restores it if the daemon keeps the buffer
 * acquired). Returns 0 once the packet is sent, or an error that
 * gmd_last_error() explains (nothing was sent, or the connection died).
 */
int gmd__client_send_nowait(gmd_client *client, uint16_t type,
                            const ProtobufCMessage *msg, const char *call,
                            gmd_buffer *buffer, bool releases);

/* Under client->lock: a nowait request is over (answered, or dropped with
 * the connection): count it, keep `error` and `message` if it is the
 * first error since the last flush, wake gmd_flush when none is left,
 * free `req`. */
void gmd__nowait_done_locked(gmd_client *client, gmd_request *req, int error,
                             const char *message);

/* Under client->lock: a request taken off the pending list is answered
 * with `error` (0: done) and `message`: its caller is woken, or a nowait
 * record is counted and freed. */
void gmd__request_complete_locked(gmd_client *client, gmd_request *req,
                                  int error, const char *message);

/* Under client->lock: move the connection to `to`; false (and nothing
 * changes) for a move the lifecycle does not have. */
bool gmd__client_change_state_locked(gmd_client *client, gmd_conn_state to);

/* Release what a finished request still holds (reply, message, payload). */
void gmd__request_clear(gmd_request *req);

/* Send a packet that expects no answer (remap acks), from any thread. */
int gmd__client_send(gmd_client *client, uint16_t type,
                const ProtobufCMessage *msg);

/*
 * Send a packet that expects no answer while `held` is locked by the
 * caller: take send_lock, unlock `held`, send, unlock send_lock. Packets of
 * changes made under `held` thus leave in the order the changes were made,
 * and `held` is not kept across a send that may wait for room. `held` is
 * unlocked in every case.
 */
int gmd__client_send_after(gmd_client *client, pthread_mutex_t *held,
                      uint16_t type, const ProtobufCMessage *msg);

/*
 * Report `plan` (MSG_PLAN) and remember it for the connection a resume
 * makes; an empty one (no name, no bytes) forgets it. While the daemon is
 * away it is only remembered: it goes out once the buffers are claimed
 * back (gmd__client_send_plan). 0, or the connection's error.
 */
int gmd__client_report_plan(gmd_client *client, const gmd_plan_report *plan);

/* reconnect.c, once resumed: send the remembered plan again, if any. 0,
 * or the send's error (the reader sees a connection gone again). */
int gmd__client_send_plan(gmd_client *client);

/* The connection's error if it is dead (gmd_last_error explains), else 0. */
int gmd__client_dead_error(gmd_client *client);

/* Remember the daemon's shutdown notice for gmd__client_fail. */
void gmd__client_note_shutdown(gmd_client *client, const char *message);

/* The I/O thread (io.c): reads until the connection dies for good or
 * wake_fd fires, riding through a daemon's restart (reconnect.c). */
void *gmd__client_io_main(void *arg);

/* Apply one packet the daemon sent (io.c): a reply or a notification.
 * Returns -1 when the connection must close (gmd__client_fail done). */
int gmd__io_handle_packet(gmd_client *client, gmd_wire_packet *packet);

/* Hello on `sock` (client->sock at connect, a new connection's later)
 * with what client->name, priority and keeps_mappings say, waiting until
 * `deadline_ms` or until `wake_fd` (-1: none) is readable (-ECANCELED).
 * Returns 0 with the reply, or the error gmd_last_error() explains. */
int gmd__hello(gmd_client *client, int sock, uint64_t deadline_ms,
               int wake_fd, Gmd__HelloReply **ret_reply);

/* MSG_REACH on `sock` (client->sock at connect, a new connection's
 * later) when the hello's reply `asked` for it (HelloReply.asks_reach),
 * before anything else is sent there; nothing otherwise. 0, or the
 * send's error. */
int gmd__send_reach(gmd_client *client, int sock, bool asked);

/* A restarted daemon's hello reply (reconnect.c): refuse one this client's
 * mappings cannot go on with (another backend, other devices), else take
 * its version and device details. GMD_ENOTSUP with the reason. */
int gmd__hello_again(gmd_client *client, const Gmd__HelloReply *reply);

/* reconnect.c: may a connection that just ended be ridden through? */
bool gmd__client_may_ride_through(gmd_client *client);

/* reconnect.c: the connection ended and may be ridden through: connect
 * again, hello, claim the buffers, and return 0 with the state RESENDING;
 * -1 when the client is dead (gmd__client_fail done) or being closed. */
int gmd__client_reconnect(gmd_client *client);

/* reconnect.c, in state RESENDING when the socket is writable: send what
 * waits, in order, until the socket is full or all went (state UP). */
void gmd__client_resend_some(gmd_client *client);

/* reconnect.c: does a buffer the application holds acquired wait to be
 * mapped again? After a restart the daemon brings back the acquired
 * buffers it finds on host memory (lent while the process waited); what
 * waits to go again goes only once they are mapped, so no call returns
 * (a waiting allocation least of all) before its kernels may touch them. */
bool gmd__client_leases_unmapped(gmd_client *client);

/* Mark the connection dead with `error` and `reason`; fail every waiting
 * call. Idempotent: the first reason wins. After a shutdown notice a lost
 * connection (GMD_ECONN) is explained by the notice instead. */
void gmd__client_fail(gmd_client *client, int error, const char *reason);

#endif
