/*
 * waits — the MSG_WAITs of one session waiting for moves to end: a
 * registry the session embeds (gmd_waits), with each wait's deadline
 * timer. It knows nothing of buffers or moves: whether a wait is met, and
 * what it is answered, is the caller's (tiering.c), given as functions;
 * the registry keeps the waits, their count and their timers, and frees
 * a wait only from its timer's close callback, so a wait answered from
 * inside a callback stays valid until that callback returns.
 */
#ifndef GMD_WAITS_H
#define GMD_WAITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "list.h"

typedef struct gmd_waits gmd_waits;
typedef struct gmd_move_wait gmd_move_wait;

/* The deadline of `wait` passed: answer it (it is dropped after). */
typedef void (*waits_expire_fn)(gmd_move_wait *wait);

struct gmd_move_wait {
        gmd_waits *registry;
        gmd_list link;              /* in registry->list */
        void *owner;                /* the session, for the caller */
        uint32_t request_id;
        uint64_t *ids;              /* NULL: every buffer of the owner */
        size_t n_ids;
        int64_t timeout_ms;
        waits_expire_fn expire;
        bool done;                  /* answered or dropped; freed on close */
        uv_timer_t timer;
};

struct gmd_waits {
        gmd_list list;              /* waits not answered yet */
        unsigned n;
};

void waits_init(gmd_waits *registry);

/* Register a wait for `ids` (n_ids of them; none: every buffer of
 * `owner`). Its deadline timer starts only with waits_arm, and `expire`
 * answers it when the deadline passes. -ENOMEM. */
int waits_add(gmd_waits *registry, uv_loop_t *loop, void *owner,
              uint32_t request_id, const uint64_t *ids, size_t n_ids,
              int64_t timeout_ms, waits_expire_fn expire,
              gmd_move_wait **ret_wait);

/* Start the wait's deadline (timeout_ms > 0; none for < 0). */
void waits_arm(gmd_move_wait *wait);

/* Take a wait out, answered or not. Does nothing twice. */
void waits_done(gmd_move_wait *wait);

/* For each wait `met` says is met: `answer` it, then take it out. */
void waits_answer_met(gmd_waits *registry,
                      bool (*met)(const gmd_move_wait *wait),
                      void (*answer)(gmd_move_wait *wait));

/* Take every wait out without answering (the session is going away). */
void waits_drop_all(gmd_waits *registry);

#endif
