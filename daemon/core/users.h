/*
 * users — one record per user (uid) with a connection: what the
 * admission bounds count (its connections, the bytes of replies its
 * connections have not read), kept as counts so no accept, reply or
 * request walks every session, and its turn on the loop thread.
 *
 * Turns: the loop thread is shared between users by deficit round robin.
 * Each loop iteration (a turn, users_next_turn) a user may use
 * a quantum of it ([limits] user_turn_us, 100 µs by default) reading and
 * handling its connections' requests (what taking its new connections
 * cost is charged to it too);
 * what a request costs is charged after it ran, so a user whose request
 * took longer than its credit owes the difference and waits out as many
 * turns as it takes to repay it, while the others are served. A user
 * with no credit left is not read this turn: its sockets stay readable
 * and the loop comes back to them at the next turn. So one user's flood
 * (many connections, many requests in a row, expensive requests) takes at
 * most one quantum per turn, and everyone else's request waits at most
 * about a quantum per busy user before it is read. Credit does not pile
 * up while a user is idle (at most one quantum).
 */
#ifndef GMD_USERS_H
#define GMD_USERS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "list.h"

/* The default quantum, 100 µs, is a few requests of the usual kind (an
 * allocation or a free takes 20-50 µs on sim); a status reply listing a
 * thousand buffers takes more, and is paid back over the next turns. The
 * quantum bounds how long another user's request waits for each busy user
 * before it is read: with 100 µs, the load test's probe waits ~250 µs for
 * a flooding user and a busy one (200 µs: ~480 µs). */
/* What one user can owe: a request that took longer is forgiven the rest. */
#define USERS_MAX_OWED_NS (100ll * 1000 * 1000)

typedef struct gmd_user {
        gmd_list link;              /* in gmd_users.list */
        uid_t uid;
        unsigned refs;              /* sessions holding the record */
        unsigned n_sessions;        /* connections open (admission.h) */
        uint64_t queued_bytes;      /* replies queued for them, unread */
        int64_t credit_ns;          /* loop time left this turn; < 0 owed */
        uint64_t turn;              /* the turn credit was topped up at */
        uint64_t deferred;          /* reads put off to a later turn */
} gmd_user;

typedef struct gmd_users {
        gmd_list list;
        unsigned n;                 /* records */
        uint64_t turn;              /* loop turns so far */
        int64_t quantum_ns;         /* 0: no turns, every user may run */
        uint64_t deferred;          /* reads put off, all users */
        /* The clock the loop's time is charged by (users_now): now_ns,
         * CLOCK_MONOTONIC. A test sets its own, so that a request costs
         * exactly what it says and not what the machine's load adds. */
        uint64_t (*clock_ns)(void);
} gmd_users;

void users_init(gmd_users *users, int64_t quantum_ns);

/* A new quantum (a reload); 0 turns the turns off. */
void users_set_quantum(gmd_users *users, int64_t quantum_ns);

/* The record of `uid`, or NULL when it has none. */
gmd_user *users_find(gmd_users *users, uid_t uid);

/* A session of `uid` holds its record (created on first use). NULL only
 * when out of memory. */
gmd_user *users_hold(gmd_users *users, uid_t uid);

/* A session lets go of its record: freed with the last one. */
void users_release(gmd_users *users, gmd_user *user);

/* The loop begins a new turn: every user's credit is topped up (lazily,
 * when it next asks) by one quantum a turn, up to one quantum. */
void users_next_turn(gmd_users *users);

/* May `user` be served now? It has credit left this turn. A false answer
 * is counted as a deferred read. */
bool users_may_run(gmd_users *users, gmd_user *user);

/* The time to charge by: users->clock_ns(). Read it before and after
 * serving a user and charge the difference. */
uint64_t users_now(const gmd_users *users);

/* `user` used `ns` of the loop. */
void users_charge(gmd_user *user, uint64_t ns);

#endif
