/*
 * waitq — allocations that found no room and wait for it, each with the
 * deadline its client chose (DESIGN.md decision 5). They are served in
 * arrival order per pool: a waiter that does not fit yet holds back those
 * behind it on the same device, so a large request is not starved by a
 * stream of small ones.
 */
#ifndef GMD_WAITQ_H
#define GMD_WAITQ_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "list.h"

typedef struct gmd_server gmd_server;
typedef struct gmd_session gmd_session;

typedef struct gmd_waiter {
        gmd_server *server;
        gmd_session *session;
        gmd_list link;              /* in server->waiters */
        uint32_t request_id;
        uint64_t size;              /* rounded */
        uint64_t asked;             /* as the client asked */
        unsigned device;
        unsigned flags;
        uint64_t since_us;          /* when the request came */
        int64_t timeout_ms;         /* < 0: no deadline */
        bool dropped;               /* left the queue; freed on timer close */
        uv_timer_t timer;
} gmd_waiter;

/* Queue an allocation; its deadline timer starts now. */
int waitq_add(gmd_server *server, gmd_session *session, uint32_t request_id,
              uint64_t asked, uint64_t size, unsigned device, unsigned flags,
              int64_t timeout_ms, uint64_t since_us);

/* Serve every waiter that fits now, in order. Call after memory is freed. */
void waitq_run(gmd_server *server);

/* Drop a session's waiters without answering (it is going away). */
void waitq_cancel_session(gmd_server *server, gmd_session *session);

/* Answer every waiter with `code` and drop it (the daemon is stopping). */
void waitq_fail_all(gmd_server *server, int code, const char *message);

#endif
