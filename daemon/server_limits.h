/*
 * server_limits — fixed sizes the daemon's tables are built for.
 */
#ifndef GMD_SERVER_LIMITS_H
#define GMD_SERVER_LIMITS_H

/* Devices one daemon serves; per-device tables in sessions and the waitq's
 * device bit mask hold this many. More are left unused, with a warning. */
#define GMD_MAX_DEVICES 64

#endif
