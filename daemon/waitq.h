/*
 * waitq — requests for VRAM that found no room and wait for it (ARCHITECTURE.md
 * decision 5): allocations, each with the deadline its client chose, and
 * buffers waiting to come back from host memory. They are served in rank
 * order — passive swap-ins (an acquire waits), then allocations, then
 * prefetches — and in arrival order within a rank. A waiter that does not
 * fit yet holds back those behind it on the same device, so a large
 * request is not starved by a stream of small ones. Whatever still waits
 * after a pass asks the evictor for room.
 */
#ifndef GMD_WAITQ_H
#define GMD_WAITQ_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "list.h"

typedef struct gmd_server gmd_server;
typedef struct gmd_session gmd_session;
typedef struct gmd_dbuffer gmd_dbuffer;

typedef enum waitq_rank {
        WAITQ_SWAP_IN = 0,      /* an acquire waits for this buffer */
        WAITQ_ALLOC = 1,
        WAITQ_PREFETCH = 2,
} waitq_rank;

typedef struct gmd_waiter {
        gmd_server *server;
        gmd_session *session;
        gmd_list link;              /* in server->waiters */
        waitq_rank rank;
        uint64_t size;              /* VRAM bytes wanted (rounded) */
        unsigned device;
        uint64_t since_us;          /* when the request came */
        bool dropped;               /* left the queue; freed on timer close */
        uv_timer_t timer;

        /* WAITQ_ALLOC */
        uint32_t request_id;
        uint64_t asked;             /* as the client asked */
        unsigned flags;
        int64_t timeout_ms;         /* < 0: no deadline */

        /* WAITQ_SWAP_IN, WAITQ_PREFETCH */
        gmd_dbuffer *buffer;
} gmd_waiter;

/* Queue an allocation; its deadline timer starts now. */
int waitq_add(gmd_server *server, gmd_session *session, uint32_t request_id,
              uint64_t asked, uint64_t size, unsigned device, unsigned flags,
              int64_t timeout_ms, uint64_t since_us);

/* Queue a buffer's return to VRAM; *ret_waiter lets the mover promote or
 * cancel it. */
int waitq_add_move_in(gmd_server *server, gmd_dbuffer *buffer, waitq_rank rank,
                      gmd_waiter **ret_waiter);

/* Serve a waiting swap-in in another rank: ahead when an acquire now
 * waits for it, behind again when that acquire gave up. */
void waitq_set_rank(gmd_server *server, gmd_waiter *waiter, waitq_rank rank);

/* Take a waiter out of the queue without answering. */
void waitq_drop(gmd_waiter *waiter);

/* Serve every waiter that fits now, in order, then ask the evictor for
 * room for those left. Call after memory is freed. */
void waitq_run(gmd_server *server);

/* VRAM bytes waited for on `device`. */
uint64_t waitq_demand(gmd_server *server, unsigned device);

/* Drop a session's waiters without answering (it is going away). */
void waitq_cancel_session(gmd_server *server, gmd_session *session);

/* Answer every allocation waiter with `code` and drop every waiter (the
 * daemon is stopping). */
void waitq_fail_all(gmd_server *server, int code, const char *message);

#endif
