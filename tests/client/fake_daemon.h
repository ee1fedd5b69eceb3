/*
 * fake_daemon — a scripted stand-in for gpu-memd on one end of a
 * socketpair, so libgpumem's protocol, remap, revoke and failure paths run
 * without the real daemon. It runs in its own thread, answers the hello,
 * serves allocs with real memfds, and behaves badly on request (errors,
 * hang-ups, garbage) according to `mode`. Test code reads what it saw
 * (acks, frees) under its lock.
 *
 * Restart recovery: fake_listen serves a socket path instead, so the
 * library can connect again; fake_drop ends the connection as a daemon's
 * death would, and the next connection is accepted (unless paused). With
 * `recovery` the hello carries a resume token and ResumeRequests are
 * checked (the old session's id and token, each claimed fd the very
 * memory handed out) and answered per the fields below.
 *
 * Nothing here calls cmocka: assertions belong to the test's main thread.
 */
#ifndef GMD_FAKE_DAEMON_H
#define GMD_FAKE_DAEMON_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpumem.h"

typedef enum fake_mode {
        FAKE_NORMAL,
        FAKE_ERROR,             /* alloc -> ErrorReply{error_code} */
        FAKE_HANGUP_ON_ALLOC,   /* alloc -> close the connection */
        FAKE_WRONG_ID,          /* status -> reply with an unknown id */
        FAKE_GARBAGE,           /* status -> payload that does not decode */
        FAKE_SHORT_MEMFD,       /* alloc -> memfd smaller than the segment */
        FAKE_BATCH,             /* allocs held until batch_size, answered
                                 * in reverse order */
        FAKE_IPC,               /* alloc -> a 64-byte ipc_handle, no fds */
        FAKE_IPC_BAD_LENGTH,    /* alloc -> a 63-byte ipc_handle */
        FAKE_IPC_AND_SEGMENTS,  /* alloc -> ipc_handle and a segment */
        FAKE_REFUSE_RELEASE,    /* release -> ErrorReply{error_code} */
        FAKE_REVOKE_ON_RELEASE, /* release -> revoke the buffer, then
                                 * ErrorReply{NOT_FOUND}: a revoke that
                                 * crosses the release on the wire */
        FAKE_WRONG_TYPE,        /* release, pageout, prefetch -> a
                                 * StatusReply, which answers none */
} fake_mode;

#define FAKE_MAX_BUFFERS 64
#define FAKE_MAX_TYPES   32     /* message types counted in n_by_type */
#define FAKE_MAX_RETURNED 256
#define FAKE_MAX_CLAIMS  64

typedef struct fake_claim {
        uint64_t id;
        bool acquired;
        unsigned n_segments;
        unsigned same_memory;   /* segments whose fd is the buffer's memfd */
        int tier;
} fake_claim;

typedef struct fake_buffer {
        uint64_t id;
        int fd;
        uint64_t size;
        bool revoked;
        bool parked;            /* the client said PARK and not UNPARK */
        bool ipc;               /* FAKE_IPC: no fd the client holds */
} fake_buffer;

typedef struct fake_daemon {
        int fd;                         /* daemon end of the socketpair */
        int client_fd;                  /* handed to gmd__connect_fd */
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool stop;

        /* behaviour */
        fake_mode mode;
        uint32_t hello_version;
        const char *backend;
        int error_code;                 /* FAKE_ERROR, FAKE_REFUSE_RELEASE */
        unsigned batch_size;            /* FAKE_BATCH */

        /* state, under lock */
        uint64_t next_buffer_id;
        fake_buffer buffers[FAKE_MAX_BUFFERS];
        unsigned n_acks;
        uint64_t ack_buffer_id, ack_sequence;
        int32_t ack_result;
        unsigned n_frees;
        uint64_t last_freed;
        unsigned n_requests;
        uint32_t held_ids[16];          /* FAKE_BATCH */
        uint64_t held_sizes[16];
        unsigned n_held;
        /* the mapping cache's messages */
        unsigned n_by_type[FAKE_MAX_TYPES];     /* every packet, by type */
        unsigned n_bad_cache;           /* PARK of a parked buffer, UNPARK
                                         * or RETURN of one not parked */
        uint64_t returned[FAKE_MAX_RETURNED];   /* ids, in RETURN order */
        unsigned n_returned;
        unsigned last_return_ids;       /* ids in the last RETURN */

        /* restart recovery (fake_listen) */
        int listen_fd;                  /* -1: the socketpair */
        char path[108];
        bool accept_paused;             /* leave new connections waiting */
        bool deaf;                      /* read nothing from the client */
        bool deaf_seen;                 /* ... and the thread has seen it */
        bool recovery;                  /* hello sends a resume token */
        bool resume_unsupported;        /* MSG_RESUME -> ERR_UNSUPPORTED */
        bool fresh;                     /* the next hello forgets every
                                         * buffer and numbers them anew */
        uint64_t lose_id;               /* claim -> ERR_INTERNAL */
        unsigned drop_on_type;          /* that request -> hang up, once */
        bool drop_after_free;           /* free, then hang up unanswered */
        uint64_t next_client_id;
        uint64_t session_id;            /* the connection's client id */
        uint64_t previous_id;           /* the one before */
        unsigned n_resumes;             /* ResumeRequests */
        unsigned n_resume_bad;          /* ... with a wrong id or token */
        unsigned n_resume_last;         /* ... with last set */
        fake_claim claims[FAKE_MAX_CLAIMS];
        unsigned n_claims;
        /* the last MSG_PLAN: its planner and kept bytes, and the session
         * (connection) it came on */
        char plan_planner[33];
        uint64_t plan_kept;
        uint64_t plan_session;
} fake_daemon;

/* Create the socketpair and start the thread; f->client_fd is the end for
 * the library. Set mode fields before or after: they are read per packet
 * under the lock. */
int fake_start(fake_daemon *f);

/* Serve `path` instead of the socketpair (call after fake_start, before
 * connecting). 0 or -errno. */
int fake_listen(fake_daemon *f, const char *path);

/* End the current connection, as the daemon's death would. */
void fake_drop(fake_daemon *f);

/* Send ShutdownNotify{message}, then end the connection. */
int fake_shutdown(fake_daemon *f, const char *message);

/* Stop reading from the client, and return once the fake's thread has
 * seen it (so nothing the client sends from now on is read). */
void fake_go_deaf(fake_daemon *f);

/* As fake_shutdown, but close the connection as a stopping daemon does:
 * with whatever the client sent last still unread (set `deaf` first), so
 * the kernel resets the connection. */
int fake_shutdown_close(fake_daemon *f, const char *message);

/* Set a field of the restart behaviour under the lock. */
#define fake_set(f, field, value) do {                  \
        pthread_mutex_lock(&(f)->lock);                 \
        (f)->field = (value);                           \
        pthread_mutex_unlock(&(f)->lock);               \
} while (0)

/* Stop the thread, close everything it holds. */
void fake_stop(fake_daemon *f);

/* Set a field under the lock. */
void fake_set_mode(fake_daemon *f, fake_mode mode, int arg);

/* Write `byte` into every byte of buffer `id`'s current backing. */
int fake_fill(fake_daemon *f, uint64_t id, uint8_t byte);

/* Move buffer `id` to a new memfd holding a copy of its bytes and send
 * MSG_REMAP with `sequence` and `tier`. */
int fake_remap(fake_daemon *f, uint64_t id, uint64_t sequence, gmd_tier tier);

/* Send MSG_REMAP to the host tier with no segment, as the daemon does for
 * a SWAPPABLE buffer: the client unmaps and keeps the range. */
int fake_remap_out(fake_daemon *f, uint64_t id, uint64_t sequence);

/* Open fds of this process (tests check they come back to where they
 * were). -1 if /proc cannot be read. */
int fake_count_own_fds(void);

/* How many mappings of the fake's memfds overlap [addr, addr + size)
 * in this process (from /proc/self/maps). */
unsigned fake_maps_at(const void *addr, size_t size);

/* Send MSG_REMAP for a buffer id the client does not have. */
int fake_remap_unknown(fake_daemon *f, uint64_t id, uint64_t sequence);

/* Send MSG_REVOKE for buffer `id`. */
int fake_revoke(fake_daemon *f, uint64_t id, const char *message);

/* Wait (up to 5 s) until `n` remap acks arrived. */
bool fake_wait_acks(fake_daemon *f, unsigned n);

/* Wait (up to 5 s) until `n` packets of `type` arrived. */
bool fake_wait_type(fake_daemon *f, unsigned type, unsigned n);

/* Packets of `type` seen so far. */
unsigned fake_count(fake_daemon *f, unsigned type);

/* Send MSG_RECLAIM {device, bytes}. */
int fake_reclaim(fake_daemon *f, unsigned device, uint64_t bytes);

/* Is buffer `id` parked as the fake sees it? -1 if it does not exist. */
int fake_parked(fake_daemon *f, uint64_t id);

#endif
