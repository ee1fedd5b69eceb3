/*
 * systemd — the daemon's whole systemd surface (dbus-broker's habit: one
 * small file): the listening socket from socket activation, and READY,
 * STATUS and STOPPING notifications (the fd store, which shares the list
 * of passed fds with the socket, is fdstore.c's). Outside systemd every
 * call is a harmless no-op.
 */
#ifndef GMD_SYSTEMD_H
#define GMD_SYSTEMD_H

#include <stdint.h>

/* The socket systemd passed (one SOCK_SEQPACKET AF_UNIX listener), -1 when
 * none was passed, or a negative errno when what was passed is unusable.
 * The fds systemd's store passed back are not sockets of ours: they are
 * skipped here and taken by systemd_keep_open() (fdstore.h). Returns 1
 * with *ret_fd set, or 0 with *ret_fd = -1 when no socket was passed. */
int systemd_listen_fd(int *ret_fd);

/* READY=1 with a STATUS= line. */
void systemd_notify_ready(const char *status);

/* STATUS= alone, for the one-line summary `systemctl status` shows. */
void systemd_notify_status(const char *status);

/* The watchdog interval the unit asked for (WatchdogSec=), 0 if none. */
uint64_t systemd_watchdog_usec(void);

/* WATCHDOG=1. */
void systemd_notify_watchdog(void);

/* RELOADING=1 and, once done, READY=1 again. */
void systemd_notify_reloading(void);

/* STOPPING=1. */
void systemd_notify_stopping(void);

#endif
