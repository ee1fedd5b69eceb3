/*
 * keep — fds that outlive the daemon. What gpu-memd alone holds (the host
 * arena's pieces, which hold paged-out buffers' bytes; the memfd of its
 * state record) must survive a crash, a SIGKILL or a restart, and the next
 * gpu-memd must get those fds back. A keep is where they wait: the daemon
 * puts a duplicate of each under a name, and the next daemon finds them in
 * `restored` when it opens the keep.
 *
 * Two implementations with one behaviour:
 *   - keeper (keeper.c): a small process of our own, forked at the first
 *     start, serving a SOCK_SEQPACKET socket beside the daemon's
 *     (`<socket>.keep`); it holds what a dead daemon left for [restart]
 *     hold_s seconds;
 *   - systemd (service/fdstore.c): the service manager's fd store
 *     (FDSTORE=1), which keeps the fds through `systemctl restart` and
 *     automatic restarts.
 *
 * Both keep what was restored: an fd handed to the next daemon stays kept
 * until that daemon drops it (or puts another under its name), so a daemon
 * that dies while recovering loses nothing. A restored fd the daemon does
 * not want must therefore be dropped, not only closed.
 *
 * Names are 1 to GMD_KEEP_NAME_MAX - 1 characters of [A-Za-z0-9_.-]: a
 * subset of what systemd accepts as an fd name (printable ASCII but ':',
 * 255 at most), so that a name means the same in both; others are refused
 * with -EINVAL by both.
 *
 * A keep is used from the daemon's loop thread only.
 */
#ifndef GMD_KEEP_H
#define GMD_KEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define GMD_KEEP_NAME_MAX 64

/* An fd the previous daemon left. The caller takes one by copying .fd and
 * setting it to -1; keep_close() closes those not taken. */
typedef struct gmd_kept {
        char name[GMD_KEEP_NAME_MAX];
        int fd;
} gmd_kept;

typedef struct gmd_keep gmd_keep;

typedef struct gmd_keep_ops {
        const char *name;       /* "keeper" or "systemd" */
        /* Keep a duplicate of `fd` under `name`, replacing what was kept
         * under that name; the caller keeps its fd. 0 or -errno (-EINVAL
         * for a bad name, -EPIPE when the keeper is gone, -ETIMEDOUT when
         * it took nothing for 2 s). Returns once the fd is handed on (one
         * packet), without waiting for an answer: the fd is kept from
         * then on, even if the daemon dies the next instant. */
        int (*put)(gmd_keep *k, const char *name, int fd);
        /* Forget what is kept under `name` (its duplicate is closed). An
         * unknown name is 0. */
        int (*drop)(gmd_keep *k, const char *name);
        /* End this daemon's use and free `k` (with the restored fds not
         * taken). discard=false leaves everything kept for the next daemon
         * (a restart, or as a crash would); discard=true drops everything
         * (a stop for good). */
        void (*close)(gmd_keep *k, bool discard);
} gmd_keep_ops;

struct gmd_keep {
        const gmd_keep_ops *ops;
        gmd_kept *restored;     /* what the previous daemon left; none on
                                 * a first start */
        unsigned n_restored;
};

/* Whether `name` may name a kept fd (see above). */
bool keep_name_valid(const char *name);

/* The fd restored under `name`, taken over by the caller (it is no longer
 * in k->restored's care), or -ENOENT. It stays kept: drop it if unwanted. */
int keep_take(gmd_keep *k, const char *name);

static inline int keep_put(gmd_keep *k, const char *name, int fd)
{
        return k->ops->put(k, name, fd);
}

static inline int keep_drop(gmd_keep *k, const char *name)
{
        return k->ops->drop(k, name);
}

/* k->ops->close, accepting NULL; returns NULL. */
static inline gmd_keep *keep_close(gmd_keep *k, bool discard)
{
        if (k)
                k->ops->close(k, discard);
        return NULL;
}

/* For implementations: close the restored fds not taken and free the
 * list. */
void keep_restored_free(gmd_keep *k);

/*
 * The keeper process at `path` (a SOCK_SEQPACKET socket; the daemon uses
 * `<its socket>.keep`). If a keeper answers there (it must run as our uid:
 * another is refused with -EPERM), *ret_keep gets what it holds in
 * `restored`; if none does, one is forked, binding `path` mode 0600,
 * and restored is empty. When this daemon's connection ends without a
 * discard the keeper holds everything for `hold_s` seconds for the next
 * daemon, then closes it all and exits (at once when it holds nothing).
 *
 * Call it before anything starts threads that must not be forked, and
 * before CUDA is initialised: the keeper is forked from the caller. Raise
 * RLIMIT_NOFILE first when many fds may come back.
 *
 * 0, or -errno with a logged line: -EBUSY when another daemon uses the
 * keeper, -EPERM for another uid, -EPROTO for a keeper that answers
 * nonsense or another version, -ENAMETOOLONG for a path that does not
 * fit sun_path, -EEXIST when `path` is something else than a socket,
 * -ECHILD when the forked keeper died starting, -ETIMEDOUT when the keeper
 * does not answer within 2 s.
 */
int keep_keeper_open(const char *path, unsigned hold_s, gmd_keep **ret_keep);

/* The keeper process's pid (as seen when connecting), for logs and tests;
 * -1 for a keep that is not a keeper's. */
pid_t keep_keeper_pid(const gmd_keep *k);

#endif
