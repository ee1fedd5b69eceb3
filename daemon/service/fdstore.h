/*
 * fdstore — the keep of base/keep.h over systemd's fd store: for a daemon
 * run by systemd (Type=notify, FileDescriptorStoreMax= in the unit), the
 * service manager holds the kept fds and passes them back, named, to the
 * next run of the service. It keeps them through `systemctl restart` and
 * automatic restarts (Restart=), not through a stop and a start.
 *
 * A kept fd is stored under "keep.<name>" so that it is told apart from
 * the listening socket socket activation passes in the same list (named
 * after its socket unit, or FileDescriptorName=): fdstore_kept_name()
 * is that rule, and systemd_listen_fd() skips what it calls kept.
 */
#ifndef GMD_FDSTORE_H
#define GMD_FDSTORE_H

#include "keep.h"

/* The prefix of a kept fd's name in the store. */
#define FDSTORE_PREFIX "keep."

/*
 * The keep over systemd's fd store; `restored` is what the previous run
 * stored and systemd passed back. Reads $LISTEN_FDS without unsetting it,
 * so systemd_listen_fd() finds the socket after it too, as long as none of
 * the passed fds was closed in between (systemd.c).
 * 0, or -ENOTCONN (with a logged line) outside systemd ($NOTIFY_SOCKET
 * unset), or -errno.
 */
int systemd_keep_open(gmd_keep **ret_keep);

/*
 * The keep's name of a passed fd named `fdname` (what follows
 * FDSTORE_PREFIX), or NULL when that fd is not a kept one (the listening
 * socket, or a name that is not a valid keep name). A pure function.
 */
const char *fdstore_kept_name(const char *fdname);

#endif
