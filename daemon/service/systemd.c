/*
 * systemd — see systemd.h.
 */
#include "systemd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>

#include "log.h"

int systemd_listen_fd(int *ret_fd)
{
        int n = sd_listen_fds(1), fd = SD_LISTEN_FDS_START, r;

        *ret_fd = -1;
        if (n < 0)
                return n;
        if (n == 0)
                return 0;
        if (n > 1) {
                log_error("systemd passed %d sockets; gpu-memd takes one", n);
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
