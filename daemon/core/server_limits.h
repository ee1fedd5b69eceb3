/*
 * server_limits — fixed sizes the daemon's tables are built for.
 */
#ifndef GMD_SERVER_LIMITS_H
#define GMD_SERVER_LIMITS_H

/* Devices one daemon serves; per-device tables in sessions and the waitq's
 * device bit mask hold this many. More are left unused, with a warning. */
#define GMD_MAX_DEVICES 64

/* How long a no-wait request (an allocation, an acquire) may wait for
 * room that idle buffers hold (moved to host memory) or clients' caches
 * hold (handed back), or for the one round trip that undoes an early
 * remap. */
#define GMD_RECLAIM_GRACE_MS 1000

#endif
