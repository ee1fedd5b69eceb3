/*
 * systemd — see systemd.h.
 */
#include "systemd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>

#include "fdstore.h"
#include "log.h"

int systemd_listen_fd(int *ret_fd)
{
        char **names = NULL;
        int n, fd = -1, sockets = 0, r;

        *ret_fd = -1;
        /* Not unset: systemd_keep_open() reads the same list for the fds
         * the store passed back (fdstore.h). Each reading checks every
         * fd passed (libsystemd sets FD_CLOEXEC on each): a reading after
         * one of them was closed fails with EBADF, so gpu-memd reads it
         * before its restore closes any. */
        n = sd_listen_fds_with_names(0, &names);
        if (n < 0)
                return n;
        for (int i = 0; i < n; i++) {
                if (fdstore_kept_name(names ? names[i] : NULL))
                        continue;
                sockets++;
                fd = SD_LISTEN_FDS_START + i;
        }
        for (int i = 0; names && names[i]; i++)
                free(names[i]);
        free(names);
        if (sockets == 0)
                return 0;
        if (sockets > 1) {
                log_error("systemd passed %d sockets; gpu-memd takes one", sockets);
                return -EINVAL;
        }
        r = sd_is_socket_unix(fd, SOCK_SEQPACKET, 1, NULL, 0);
        if (r <= 0) {
                log_error("the socket systemd passed is not a listening "
                          "SOCK_SEQPACKET unix socket (set ListenSequentialPacket=)");
                return r < 0 ? r : -EINVAL;
        }
        /* uv_poll needs it non-blocking; accept4 sets the clients'. */
        if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
                return -errno;
        *ret_fd = fd;
        return 1;
}

void systemd_notify_ready(const char *status)
{
        sd_notifyf(0, "READY=1\nSTATUS=%s", status);
}

void systemd_notify_status(const char *status)
{
        sd_notifyf(0, "STATUS=%s", status);
}

uint64_t systemd_watchdog_usec(void)
{
        uint64_t usec = 0;

        return sd_watchdog_enabled(0, &usec) > 0 ? usec : 0;
}

void systemd_notify_watchdog(void)
{
        sd_notify(0, "WATCHDOG=1");
}

void systemd_notify_reloading(void)
{
        sd_notify(0, "RELOADING=1");
}

void systemd_notify_stopping(void)
{
        sd_notify(0, "STOPPING=1\nSTATUS=stopping");
}
