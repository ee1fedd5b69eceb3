/*
 * spawn — processes for the integration tests that harness_spawn does not
 * cover: run as another user (supplementary groups, gid and uid set in the
 * child before exec), with extra environment, or with a listening socket
 * handed over at fd 3 the way systemd does (LISTEN_FDS=1, LISTEN_PID).
 *
 * The child does only system calls between fork and exec (the test process
 * may run libgpumem's I/O thread): user and group lookups happen before
 * the fork, the environment is built before it. Helpers fail the running
 * cmocka test on errors, like the harness's.
 */
#ifndef GMD_TEST_SPAWN_H
#define GMD_TEST_SPAWN_H

#include <sys/types.h>

#include "harness.h"

/* Who a process runs as; fill it with spawn_identity_of. */
typedef struct spawn_identity {
        const char *name;
        uid_t uid;
        gid_t gid;
        gid_t groups[64];
        int n_groups;
} spawn_identity;

typedef struct spawn_opts {
        const spawn_identity *as;    /* NULL: the test's own identity */
        const char *socket;          /* GPU_MEMD_SOCKET; NULL: none */
        const char *const *env;      /* more NAME=VALUE (NULL-terminated) */
        int listen_fd;               /* to fd 3 with LISTEN_FDS=1; -1: none */
} spawn_opts;

/* Look up user `name` (uid, primary gid, all its groups); fails the test
 * if there is no such user. */
void spawn_identity_of(const char *name, spawn_identity *ret);

/*
 * fork + exec `argv` (argv[0] a path) with stdin /dev/null, stdout on
 * out_fd, stderr on err_fd. The child gets our environment minus
 * GPU_MEMD_SOCKET, GPU_MEMD_PRIORITY, the LISTEN_*, NOTIFY_SOCKET,
 * WATCHDOG_* and JOURNAL_STREAM variables (a service manager running the
 * tests must not receive the daemon's notifications), plus what `o` sets.
 * It dies with the test process (PR_SET_PDEATHSIG). Returns its pid.
 */
pid_t spawn_start(const char *const *argv, const spawn_opts *o, int out_fd,
                  int err_fd);

/* Run to completion within timeout_ms (killed and the test failed past
 * it), stdout and stderr captured (free() them; either may be NULL to
 * drop it). Returns the wait status. */
int spawn_run(const char *const *argv, const spawn_opts *o, char **ret_out,
              char **ret_err, int timeout_ms);

/* spawn_start `argv` with `o` into a slot of the fixture (harness_track),
 * stdout piped back, stderr appended to the temp dir's clients.log, as
 * harness_spawn does: a long-running client that teardown kills. */
harness_proc *spawn_tracked(harness_fixture *f, const spawn_opts *o,
                            const char *const *argv);

/* Exit status as a shell shows it: 128 + signal when killed. */
int spawn_exit_code(int status);

#endif
