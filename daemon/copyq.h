/*
 * copyq — the copy engine of one device: a queue per direction (VRAM to
 * host, host to VRAM), each holding moves in three classes served in order
 * — urgent (an acquire waits), eviction (an allocation waits), bulk
 * (pageout, prefetch). Moves are cut into chunks ([swap] chunk_size) and at
 * most [swap] copies_in_flight chunks per direction are with the backend at
 * once, so an urgent move overtakes a bulk one within a chunk or two, and
 * both directions run at the same time.
 */
#ifndef GMD_COPYQ_H
#define GMD_COPYQ_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "list.h"

typedef struct gmd_server gmd_server;
typedef struct gmd_move gmd_move;

typedef enum move_class {
        MOVE_URGENT = 0,
        MOVE_EVICT = 1,
        MOVE_BULK = 2,
} move_class;

typedef struct gmd_copyq {
        unsigned device;
        gmd_list queued[2][3];      /* [dir][class]: moves with bytes to issue */
        unsigned inflight[2];       /* chunks with the backend */
        unsigned moves[2];          /* moves not finished, queued or copying */
        uint64_t bytes[2];          /* copied since start */
        uint64_t busy_us[2];        /* time with at least one chunk in flight */
        uint64_t busy_since[2];
        uint64_t broken_until_us[2];   /* a copy was refused: no new moves */
        uint64_t arena_warned_ms;      /* last "host arena full" warning */
        gmd_list failed;            /* moves refused at submit, to finish */
} gmd_copyq;

void copyq_init(gmd_copyq *q, unsigned device);

/* Queue a move's bytes and start what the limits allow. */
void copyq_push(gmd_server *server, gmd_move *move);

/* Serve a queued move in another class (an acquire now waits for it). */
void copyq_reclass(gmd_server *server, gmd_move *move, move_class cls);

/* Issue no more of the move's bytes. What is in flight still finishes;
 * the move is handed back (move_copied) once nothing is. */
void copyq_cancel(gmd_server *server, gmd_move *move);

/* May new moves start in `dir` on `device`? Not for a second after the
 * backend refused a copy, so a broken queue is not retried in a loop. */
bool copyq_usable(gmd_server *server, unsigned device, gmd_copy_dir dir);

/* Finish the moves whose copies the backend refused (move_copied), from a
 * callback of their own: never inside the call that queued them. */
void copyq_finish_failed(gmd_server *server);

/* The reap callback: one chunk finished. */
void copyq_on_done(void *ctx, void *cookie, int status);

#endif
