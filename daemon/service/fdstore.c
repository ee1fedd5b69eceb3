/*
 * fdstore — see fdstore.h. Shaped by what systemd's store does:
 *   - FDSTORE=1 with FDNAME= stores an fd beside any of the same name (it
 *     drops only the very same file twice), so a put of a name stored
 *     before removes it first (FDSTOREREMOVE=1). A crash between the two
 *     loses that name's old fd, which the put was replacing anyway;
 *   - FDPOLL=0 (systemd 246 and later; Debian 12 has 252): systemd
 *     otherwise polls a stored fd and drops it at POLLHUP or POLLERR, which
 *     a GPU driver's fd may report while its memory is whole;
 *   - the fds passed back stay stored (keep.h: a restored fd stays kept
 *     until dropped), so the names of what was restored are known names;
 *   - the store is emptied when the service stops for good, so discard
 *     only needs to remove what this run knows of.
 * The messages go as the main process (NotifyAccess=main), from the loop
 * thread: one datagram each, systemd reads them in order.
 */
#include "fdstore.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "log.h"

typedef struct fdstore {
        gmd_keep keep;
        char (*names)[GMD_KEEP_NAME_MAX];       /* stored, as far as we know */
        size_t n, cap;
} fdstore;

const char *fdstore_kept_name(const char *fdname)
{
        size_t n = strlen(FDSTORE_PREFIX);

        if (!fdname || strncmp(fdname, FDSTORE_PREFIX, n) != 0 ||
            !keep_name_valid(fdname + n))
                return NULL;
        return fdname + n;
}

static ssize_t names_find(const fdstore *s, const char *name)
{
        for (size_t i = 0; i < s->n; i++)
                if (strcmp(s->names[i], name) == 0)
                        return (ssize_t)i;
        return -1;
}

static int names_add(fdstore *s, const char *name)
{
        if (names_find(s, name) >= 0)
                return 0;
        if (s->n == s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 64;
                void *p = realloc(s->names, cap * sizeof(*s->names));

                if (!p)
                        return -ENOMEM;
                s->names = p;
                s->cap = cap;
        }
        snprintf(s->names[s->n++], GMD_KEEP_NAME_MAX, "%s", name);
        return 0;
}

/* sd_pid_notify*'s result as ours: 0 where nobody listens is an error. */
static int notify_result(int r)
{
        return r > 0 ? 0 : r == 0 ? -ENOTCONN : r;
}

static int store_remove(const char *name)
{
        return notify_result(sd_notifyf(0, "FDSTOREREMOVE=1\nFDNAME=" FDSTORE_PREFIX "%s",
                                        name));
}

static int fdstore_put(gmd_keep *k, const char *name, int fd)
{
        fdstore *s = (fdstore *)k;
        char state[128];
        int r;

        if (!keep_name_valid(name))
                return -EINVAL;
        if (fd < 0)
                return -EBADF;
        if (names_find(s, name) >= 0) {
                r = store_remove(name);
                if (r < 0)
                        return r;
        }
        snprintf(state, sizeof(state), "FDSTORE=1\nFDNAME=" FDSTORE_PREFIX "%s\nFDPOLL=0",
                 name);
        r = notify_result(sd_pid_notify_with_fds(0, 0, state, &fd, 1));
        if (r < 0)
                return r;
        return names_add(s, name);
}

static int fdstore_drop(gmd_keep *k, const char *name)
{
        fdstore *s = (fdstore *)k;
        ssize_t i;
        int r;

        if (!keep_name_valid(name))
                return -EINVAL;
        i = names_find(s, name);
        if (i < 0)
                return 0;
        r = store_remove(name);
        if (r < 0)
                return r;
        memcpy(s->names[i], s->names[--s->n], GMD_KEEP_NAME_MAX);
        return 0;
}

static void fdstore_close(gmd_keep *k, bool discard)
{
        fdstore *s = (fdstore *)k;

        for (size_t i = 0; discard && i < s->n; i++) {
                int r = store_remove(s->names[i]);

                if (r < 0)
                        log_warning("systemd fd store: cannot remove '%s': %s",
                                    s->names[i], strerror(-r));
        }
        keep_restored_free(k);
        free(s->names);
        free(s);
}

static const gmd_keep_ops fdstore_ops = {
        .name = "systemd",
        .put = fdstore_put,
        .drop = fdstore_drop,
        .close = fdstore_close,
};

int systemd_keep_open(gmd_keep **ret_keep)
{
        char **names = NULL;
        fdstore *s;
        int n, r = 0;

        if (!getenv("NOTIFY_SOCKET")) {
                log_error("[restart] keep = systemd, but gpu-memd does not run "
                          "under systemd ($NOTIFY_SOCKET is not set)");
                return -ENOTCONN;
        }
        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->keep.ops = &fdstore_ops;
        n = sd_listen_fds_with_names(0, &names);
        if (n < 0) {
                r = n;
                goto out;
        }
        if (n > 0) {
                s->keep.restored = calloc((size_t)n, sizeof(gmd_kept));
                if (!s->keep.restored) {
                        r = -ENOMEM;
                        goto out;
                }
        }
        for (int i = 0; i < n; i++) {
                const char *name = fdstore_kept_name(names ? names[i] : NULL);
                gmd_kept *e;

                if (!name)
                        continue;       /* the socket: systemd_listen_fd's */
                e = &s->keep.restored[s->keep.n_restored++];
                snprintf(e->name, sizeof(e->name), "%s", name);
                e->fd = SD_LISTEN_FDS_START + i;
                r = names_add(s, name);
                if (r < 0)
                        goto out;
        }
out:
        for (int i = 0; names && names[i]; i++)
                free(names[i]);
        free(names);
        if (r < 0) {
                fdstore_close(&s->keep, false);
                return r;
        }
        *ret_keep = &s->keep;
        return 0;
}
