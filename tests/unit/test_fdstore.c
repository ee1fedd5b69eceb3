/*
 * test_fdstore — daemon/service/fdstore.c (the keep over systemd's fd store)
 * and systemd.c's systemd_listen_fd beside it, with systemd played by the
 * test: the environment a service gets ($LISTEN_PID, $LISTEN_FDS,
 * $LISTEN_FDNAMES, the fds from 3 on) and a datagram socket at
 * $NOTIFY_SOCKET whose messages are read back. Tested: which passed fds
 * are kept ones and which is the socket (either function first), the
 * messages a put, a replacing put, a drop and a discard send (FDPOLL=0,
 * the "keep." prefix, the fd itself), names refused as the keeper refuses
 * them, and the error outside systemd.
 *
 * Not covered: systemd itself — that it stores, keeps through a restart
 * and passes back (needs systemd as PID 1 and the unit's
 * FileDescriptorStoreMax=; CI has neither).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "fdstore.h"
#include "keep.h"
#include "log.h"
#include "systemd.h"

static char notify_path[64];
static int notify_fd = -1;

/* `fd` moved out of the way of the passed fds (3 on). */
static int high(int fd)
{
        int r = fcntl(fd, F_DUPFD_CLOEXEC, 100);

        assert_true(fd >= 0 && r >= 100);
        close(fd);
        return r;
}

static void test_kept_name(void **state)
{
        (void)state;
        assert_string_equal(fdstore_kept_name("keep.arena.0"), "arena.0");
        assert_string_equal(fdstore_kept_name("keep.state"), "state");
        assert_null(fdstore_kept_name("gpu-memd.socket"));
        assert_null(fdstore_kept_name("stored"));       /* systemd's default */
        assert_null(fdstore_kept_name("keep."));
        assert_null(fdstore_kept_name("keep.a b"));
        assert_null(fdstore_kept_name("keepx"));
        assert_null(fdstore_kept_name(NULL));
}

/* One message from the fake service manager's socket, with its fd. */
static void next_message(char *buf, size_t len, int *ret_fd)
{
        union {
                char b[CMSG_SPACE(sizeof(int) * 4) + CMSG_SPACE(sizeof(struct ucred))];
                struct cmsghdr align;
        } control;
        struct iovec iov = { buf, len - 1 };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
                              .msg_control = control.b,
                              .msg_controllen = sizeof(control.b) };
        ssize_t n = recvmsg(notify_fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

        assert_true(n > 0);
        buf[n] = '\0';
        *ret_fd = -1;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                        assert_int_equal(c->cmsg_len, CMSG_LEN(sizeof(int)));
                        memcpy(ret_fd, CMSG_DATA(c), sizeof(int));
                }
}

static void expect_message(const char *text, int fd_of_ino)
{
        char buf[512];
        int fd;

        next_message(buf, sizeof(buf), &fd);
        assert_string_equal(buf, text);
        if (fd_of_ino >= 0) {
                struct stat a, b;

                assert_true(fd >= 0);
                assert_int_equal(fstat(fd, &a), 0);
                assert_int_equal(fstat(fd_of_ino, &b), 0);
                assert_int_equal(a.st_ino, b.st_ino);
                close(fd);
        } else {
                assert_int_equal(fd, -1);
        }
}

static void expect_no_message(void)
{
        char buf[8];

        assert_int_equal(recv(notify_fd, buf, sizeof(buf), MSG_DONTWAIT), -1);
        assert_int_equal(errno, EAGAIN);
}

/* A service started with its socket and two stored fds: each function
 * takes its own, whichever comes first. */
static void test_passed_fds(void **state)
{
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        int listener, arena, st, fd, r;
        char pid[16];
        gmd_keep *k = NULL;

        (void)state;
        for (int i = 3; i <= 5; i++)
                if (fcntl(i, F_GETFD) >= 0) {
                        printf("fdstore: fds 3 to 5 are taken; not run\n");
                        skip();
                }
        listener = high(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
        snprintf(a.sun_path, sizeof(a.sun_path), "%s.listen", notify_path);
        assert_int_equal(bind(listener, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(listen(listener, 1), 0);
        arena = high(memfd_create("arena", MFD_CLOEXEC));
        st = high(memfd_create("state", MFD_CLOEXEC));
        /* systemd's order: the socket, then the store. */
        assert_int_equal(dup2(arena, 4), 4);
        assert_int_equal(dup2(st, 5), 5);
        assert_int_equal(dup2(listener, 3), 3);
        snprintf(pid, sizeof(pid), "%d", (int)getpid());
        setenv("LISTEN_PID", pid, 1);
        setenv("LISTEN_FDS", "3", 1);
        setenv("LISTEN_FDNAMES", "gpu-memd.socket:keep.arena.0:keep.state", 1);

        assert_int_equal(systemd_keep_open(&k), 0);
        assert_string_equal(k->ops->name, "systemd");
        assert_int_equal(k->n_restored, 2);
        assert_string_equal(k->restored[0].name, "arena.0");
        assert_int_equal(k->restored[0].fd, 4);
        assert_string_equal(k->restored[1].name, "state");
        assert_int_equal(k->restored[1].fd, 5);
        /* The list is still there for the socket. */
        r = systemd_listen_fd(&fd);
        assert_int_equal(r, 1);
        assert_int_equal(fd, 3);

        /* A restored name is a stored one: a put replaces it. */
        assert_int_equal(keep_put(k, "state", st), 0);
        expect_message("FDSTOREREMOVE=1\nFDNAME=keep.state", -1);
        expect_message("FDSTORE=1\nFDNAME=keep.state\nFDPOLL=0", st);
        /* A new name: stored. */
        assert_int_equal(keep_put(k, "arena.1", arena), 0);
        expect_message("FDSTORE=1\nFDNAME=keep.arena.1\nFDPOLL=0", arena);
        /* Drop: known names only. */
        assert_int_equal(keep_drop(k, "arena.1"), 0);
        expect_message("FDSTOREREMOVE=1\nFDNAME=keep.arena.1", -1);
        assert_int_equal(keep_drop(k, "never"), 0);
        expect_no_message();
        /* Names as the keeper has them. */
        assert_int_equal(keep_put(k, "a:b", st), -EINVAL);
        assert_int_equal(keep_put(k, "", st), -EINVAL);
        assert_int_equal(keep_drop(k, "a b"), -EINVAL);
        expect_no_message();
        /* Taken or not, the restored fds are the caller's or closed. */
        assert_int_equal(keep_take(k, "arena.0"), 4);
        close(4);
        /* Discard: everything known removed; fd 5 closed (not taken). */
        keep_close(k, true);
        {
                char buf[512];
                int got, removed = 0;

                for (int i = 0; i < 2; i++) {
                        next_message(buf, sizeof(buf), &got);
                        removed += !strcmp(buf, "FDSTOREREMOVE=1\nFDNAME=keep.state") ||
                                   !strcmp(buf, "FDSTOREREMOVE=1\nFDNAME=keep.arena.0");
                }
                assert_int_equal(removed, 2);
        }
        expect_no_message();
        assert_int_equal(fcntl(5, F_GETFD), -1);

        /* The socket first this time, with the socket alone. */
        setenv("LISTEN_FDS", "1", 1);
        setenv("LISTEN_FDNAMES", "gpu-memd.socket", 1);
        assert_int_equal(systemd_listen_fd(&fd), 1);
        assert_int_equal(fd, 3);
        assert_int_equal(systemd_keep_open(&k), 0);
        assert_int_equal(k->n_restored, 0);
        keep_close(k, false);
        expect_no_message();
        /* Stored fds alone (a service started without its socket). */
        setenv("LISTEN_FDNAMES", "keep.state", 1);
        assert_int_equal(systemd_listen_fd(&fd), 0);
        assert_int_equal(fd, -1);

        unsetenv("LISTEN_PID");
        unsetenv("LISTEN_FDS");
        unsetenv("LISTEN_FDNAMES");
        close(3);
        unlink(a.sun_path);
        close(listener);
        close(arena);
        close(st);
}

static void test_outside_systemd(void **state)
{
        char *saved = strdup(getenv("NOTIFY_SOCKET"));
        gmd_keep *k = NULL;

        (void)state;
        unsetenv("NOTIFY_SOCKET");
        assert_int_equal(systemd_keep_open(&k), -ENOTCONN);
        assert_null(k);
        setenv("NOTIFY_SOCKET", saved, 1);
        free(saved);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_kept_name),
                cmocka_unit_test(test_passed_fds),
                cmocka_unit_test(test_outside_systemd),
        };
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        char dir[] = "/tmp/test_fdstore.XXXXXX";
        int r;

        log_setup(GMD_LOG_DEBUG);
        if (!mkdtemp(dir))
                return 1;
        snprintf(notify_path, sizeof(notify_path), "%s/notify", dir);
        notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        strcpy(a.sun_path, notify_path);
        if (notify_fd < 0 || bind(notify_fd, (struct sockaddr *)&a, sizeof(a)) < 0)
                return 1;
        r = notify_fd;
        notify_fd = fcntl(r, F_DUPFD_CLOEXEC, 100);     /* as high() does */
        close(r);
        setenv("NOTIFY_SOCKET", notify_path, 1);
        r = cmocka_run_group_tests(tests, NULL, NULL);
        close(notify_fd);
        unlink(notify_path);
        rmdir(dir);
        return r;
}
