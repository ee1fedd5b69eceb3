/*
 * test_keeper — daemon/base/keeper.c and keep.c: fds that outlive the
 * daemon, kept by a keeper process. Each test plays the daemon: it opens a
 * keep at a socket in a temporary folder (forking a real keeper), puts
 * memfds with known bytes, and "dies" — a child process that opens and puts
 * and then _exit()s, or a close without discard — and a second open finds
 * exactly what was kept, the same files (st_ino) with the same bytes. Also:
 * a replaced and a dropped name, what was restored staying kept, the hold
 * running out (hold_s = 1: the keeper gone, the next open empty), discard,
 * a keeper holding nothing leaving at once, a second daemon refused, more
 * fds than one batch, malformed packets the keeper survives, names refused
 * alike by both implementations, the uid checks (as root only: the test
 * becomes another user), and no fd left open (teardown counts
 * /proc/self/fd). It prints the cost of a put.
 *
 * Not covered here: the systemd implementation (service/fdstore.c) needs
 * systemd as PID 1 and a unit with FileDescriptorStoreMax=; test_fdstore
 * tests what it can without (names, which passed fds are kept ones).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "keep.h"
#include "log.h"

typedef struct fixture {
        char dir[64];
        char path[128];
        unsigned fds_before;
} fixture;

static unsigned count_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        unsigned n = 0;

        assert_non_null(d);
        while ((e = readdir(d)))
                n += e->d_name[0] != '.';
        closedir(d);
        return n - 1;   /* the DIR's own */
}

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));

        strcpy(f->dir, "/tmp/test_keeper.XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        snprintf(f->path, sizeof(f->path), "%s/gpu-memd.sock.keep", f->dir);
        f->fds_before = count_fds();
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fixture *f = *state;
        unsigned after = count_fds();

        unlink(f->path);
        rmdir(f->dir);
        if (after != f->fds_before)
                fail_msg("%u fds open before the test, %u after", f->fds_before, after);
        free(f);
        return 0;
}

static int memfd_with(const char *text)
{
        int fd = memfd_create("test", MFD_CLOEXEC);

        assert_true(fd >= 0);
        assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        return fd;
}

static ino_t ino_of(int fd)
{
        struct stat st;

        assert_int_equal(fstat(fd, &st), 0);
        return st.st_ino;
}

static void assert_bytes(int fd, const char *text)
{
        char buf[64] = { 0 };

        assert_int_equal(pread(fd, buf, sizeof(buf) - 1, 0), (ssize_t)strlen(text));
        assert_string_equal(buf, text);
}

static const gmd_kept *find_kept(const gmd_keep *k, const char *name)
{
        for (unsigned i = 0; i < k->n_restored; i++)
                if (strcmp(k->restored[i].name, name) == 0)
                        return &k->restored[i];
        return NULL;
}

/* Gone: no such process, or a zombie nobody reaped yet. */
static bool process_gone(pid_t pid)
{
        char path[64], buf[256];
        const char *p;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        f = fopen(path, "re");
        if (!f)
                return true;
        p = fgets(buf, sizeof(buf), f);
        fclose(f);
        p = p ? strrchr(buf, ')') : NULL;
        return !p || p[2] == 'Z' || p[2] == 'X';
}

static bool wait_gone(pid_t pid, unsigned ms)
{
        for (unsigned t = 0; t < ms; t += 10) {
                if (process_gone(pid))
                        return true;
                usleep(10000);
        }
        return process_gone(pid);
}

static gmd_keep *open_keep(const fixture *f, unsigned hold_s)
{
        gmd_keep *k = NULL;

        assert_int_equal(keep_keeper_open(f->path, hold_s, &k), 0);
        assert_non_null(k);
        assert_string_equal(k->ops->name, "keeper");
        return k;
}

/* Discard, and the keeper with its socket is gone when close returns. */
static void discard(const fixture *f, gmd_keep *k)
{
        pid_t pid = keep_keeper_pid(k);
        struct stat st;

        keep_close(k, true);
        assert_int_equal(stat(f->path, &st), -1);
        assert_int_equal(errno, ENOENT);
        assert_true(wait_gone(pid, 2000));
}

/* A child opens the keep, puts, replaces, drops and dies; the parent
 * opens it again and finds the kept files, the same ones. */
static void test_survives_daemon_death(void **state)
{
        fixture *f = *state;
        ino_t inos[2];
        int p[2], status;
        struct stat st;
        gmd_keep *k;
        pid_t child, keeper;

        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        child = fork();
        assert_true(child >= 0);
        if (child == 0) {
                gmd_keep *ck = NULL;
                int a = memfd_with("alpha"), b = memfd_with("beta");
                int a2 = memfd_with("alpha, again"), c = memfd_with("gamma");
                int ok = keep_keeper_open(f->path, 30, &ck) == 0 &&
                         ck->n_restored == 0 &&
                         keep_put(ck, "arena.0", a) == 0 &&
                         keep_put(ck, "arena.1", b) == 0 &&
                         keep_put(ck, "state", c) == 0 &&
                         keep_put(ck, "arena.0", a2) == 0 &&    /* replaces */
                         keep_drop(ck, "arena.1") == 0 &&
                         keep_drop(ck, "never-put") == 0;
                ino_t sent[2] = { ino_of(a2), ino_of(c) };

                (void)!write(p[1], sent, sizeof(sent));
                _exit(ok ? 0 : 1);       /* no close: as a crash */
        }
        close(p[1]);
        assert_int_equal(read(p[0], inos, sizeof(inos)), (ssize_t)sizeof(inos));
        close(p[0]);
        assert_int_equal(waitpid(child, &status, 0), child);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

        /* The socket is the owner's alone. */
        assert_int_equal(stat(f->path, &st), 0);
        assert_true(S_ISSOCK(st.st_mode));
        assert_int_equal(st.st_mode & 0777, 0600);

        k = open_keep(f, 30);
        keeper = keep_keeper_pid(k);
        assert_true(keeper > 0);
        /* Out of our session (Ctrl-C does not reach it), its own name. */
        assert_true(getsid(keeper) > 0);
        assert_true(getsid(keeper) != getsid(0));
        {
                char path[64], comm[32] = { 0 };
                FILE *cf;

                snprintf(path, sizeof(path), "/proc/%d/comm", (int)keeper);
                cf = fopen(path, "re");
                assert_non_null(cf);
                assert_non_null(fgets(comm, sizeof(comm), cf));
                fclose(cf);
                assert_string_equal(comm, "gpu-memd-keep\n");
        }
        assert_int_equal(k->n_restored, 2);
        assert_non_null(find_kept(k, "arena.0"));
        assert_non_null(find_kept(k, "state"));
        assert_null(find_kept(k, "arena.1"));
        assert_int_equal(ino_of(find_kept(k, "arena.0")->fd), inos[0]);
        assert_int_equal(ino_of(find_kept(k, "state")->fd), inos[1]);
        assert_bytes(find_kept(k, "arena.0")->fd, "alpha, again");
        assert_bytes(find_kept(k, "state")->fd, "gamma");
        /* Received close-on-exec. */
        assert_true(fcntl(find_kept(k, "state")->fd, F_GETFD) & FD_CLOEXEC);

        /* Taken: the caller's now; the rest is closed by keep_close. */
        {
                int fd = keep_take(k, "state");

                assert_true(fd >= 0);
                assert_int_equal(keep_take(k, "state"), -ENOENT);
                assert_int_equal(keep_take(k, "nothing"), -ENOENT);
                assert_bytes(fd, "gamma");
                close(fd);
        }
        /* What was restored is still kept: a daemon that dies recovering
         * loses nothing. Closed without discard, opened again: the same. */
        keep_close(k, false);
        k = open_keep(f, 30);
        assert_int_equal(keep_keeper_pid(k), keeper);
        assert_int_equal(k->n_restored, 2);
        assert_int_equal(ino_of(find_kept(k, "state")->fd), inos[1]);
        /* Dropped now: gone next time. */
        assert_int_equal(keep_drop(k, "state"), 0);
        keep_close(k, false);
        k = open_keep(f, 30);
        assert_int_equal(k->n_restored, 1);
        assert_non_null(find_kept(k, "arena.0"));
        discard(f, k);
}

/* hold_s = 1: two seconds after its daemon, the keeper is gone with what
 * it held, and the next open starts empty. */
static void test_hold_runs_out(void **state)
{
        fixture *f = *state;
        gmd_keep *k = open_keep(f, 1);
        pid_t keeper = keep_keeper_pid(k);
        int fd = memfd_with("held");

        assert_int_equal(keep_put(k, "piece", fd), 0);
        close(fd);
        keep_close(k, false);
        usleep(300000);
        assert_false(process_gone(keeper));     /* holding */
        sleep(2);
        assert_true(wait_gone(keeper, 1000));
        k = open_keep(f, 1);
        assert_int_equal(k->n_restored, 0);
        assert_true(keep_keeper_pid(k) != keeper);
        discard(f, k);
}

/* A keeper that holds nothing when its daemon goes does not wait. */
static void test_nothing_held_exits(void **state)
{
        fixture *f = *state;
        gmd_keep *k = open_keep(f, 300);
        pid_t keeper = keep_keeper_pid(k);
        int fd = memfd_with("x");

        assert_int_equal(keep_put(k, "x", fd), 0);
        assert_int_equal(keep_drop(k, "x"), 0);
        close(fd);
        keep_close(k, false);
        assert_true(wait_gone(keeper, 2000));
}

/* discard: everything dropped, the keeper and its socket gone. */
static void test_discard(void **state)
{
        fixture *f = *state;
        gmd_keep *k = open_keep(f, 300);
        int fd = memfd_with("bytes");

        assert_int_equal(keep_put(k, "a", fd), 0);
        close(fd);
        discard(f, k);
        k = open_keep(f, 300);
        assert_int_equal(k->n_restored, 0);
        discard(f, k);
}

/* One daemon at a time: a second is refused, the first goes on. */
static void test_second_daemon_refused(void **state)
{
        fixture *f = *state;
        gmd_keep *k = open_keep(f, 300), *k2 = NULL;
        int fd = memfd_with("one");

        assert_int_equal(keep_keeper_open(f->path, 300, &k2), -EBUSY);
        assert_null(k2);
        assert_int_equal(keep_put(k, "one", fd), 0);
        close(fd);
        keep_close(k, false);
        k = open_keep(f, 300);
        assert_int_equal(k->n_restored, 1);
        discard(f, k);
}

/* Names: [A-Za-z0-9_.-], 1 to 63 of them; the same rule for both keeps. */
static void test_names(void **state)
{
        fixture *f = *state;
        static const char *const bad[] = {
                "", "a:b", "with space", "tab\t", "new\nline", "sl/ash", "é",
                "0123456789012345678901234567890123456789012345678901234567890123",
        };
        char longest[GMD_KEEP_NAME_MAX];
        gmd_keep *k = open_keep(f, 300);
        int fd = memfd_with("n");

        memset(longest, 'z', sizeof(longest) - 1);
        longest[sizeof(longest) - 1] = '\0';
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                assert_false(keep_name_valid(bad[i]));
                assert_int_equal(keep_put(k, bad[i], fd), -EINVAL);
                assert_int_equal(keep_drop(k, bad[i]), -EINVAL);
        }
        assert_false(keep_name_valid(NULL));
        assert_true(keep_name_valid("host-arena.0_12"));
        assert_true(keep_name_valid(longest));
        assert_int_equal(keep_put(k, longest, fd), 0);
        assert_int_equal(keep_put(k, "ok", -1), -EBADF);
        close(fd);
        keep_close(k, false);
        k = open_keep(f, 300);
        assert_int_equal(k->n_restored, 1);
        assert_string_equal(k->restored[0].name, longest);
        discard(f, k);
}

/* More than one batch (200 a packet) comes back whole; a put's cost. */
static void test_many_and_cost(void **state)
{
        fixture *f = *state;
        enum { N = 450 };
        gmd_keep *k = open_keep(f, 300);
        int fd = memfd_with("many");
        struct timespec t0, t1;
        char name[32];
        double us;

        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < N; i++) {
                snprintf(name, sizeof(name), "piece.%d", i);
                assert_int_equal(keep_put(k, name, fd), 0);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) /
             1e3 / N;
        printf("keeper: a put costs the daemon %.1f us (mean of %d)\n", us, N);
        /* One packet, no answer: far below a loop turn's budget. */
        assert_true(us < 1000);
        close(fd);
        keep_close(k, false);

        clock_gettime(CLOCK_MONOTONIC, &t0);
        k = open_keep(f, 300);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("keeper: %d fds handed over in %.2f ms\n", N,
               ((double)(t1.tv_sec - t0.tv_sec) * 1e9 +
                (double)(t1.tv_nsec - t0.tv_nsec)) / 1e6);
        assert_int_equal(k->n_restored, N);
        for (int i = 0; i < N; i++) {
                snprintf(name, sizeof(name), "piece.%d", i);
                assert_non_null(find_kept(k, name));
        }
        assert_bytes(k->restored[N - 1].fd, "many");
        discard(f, k);
}

/* The keeper's packet head (keeper.c), to send it nonsense. */
typedef struct raw_head {
        uint32_t magic;
        uint16_t version;
        uint16_t type;
        uint32_t count;
        uint32_t arg;
} raw_head;
#define RAW_MAGIC 0x706b6d67u

static int raw_connect(const char *path)
{
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        struct timeval tv = { 2, 0 };

        assert_true(fd >= 0);
        strcpy(a.sun_path, path);
        assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        return fd;
}

/* Send one packet with `n_fds` copies of `fd` on `s`. */
static void raw_sendmsg(int s, const void *buf, size_t len, int fd,
                        unsigned n_fds)
{
        union {
                char b[CMSG_SPACE(sizeof(int) * 8)];
                struct cmsghdr align;
        } control;
        struct iovec iov = { (void *)buf, len };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
        int fds[8];

        if (n_fds) {
                struct cmsghdr *c;

                for (unsigned i = 0; i < n_fds; i++)
                        fds[i] = fd;
                memset(&control, 0, sizeof(control));
                msg.msg_control = control.b;
                msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
                c = CMSG_FIRSTHDR(&msg);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
        }
        assert_int_equal(sendmsg(s, &msg, MSG_NOSIGNAL), (ssize_t)len);
}

/* After the keeper's WELCOME, send one packet with `n_fds` copies of `fd`,
 * then expect the keeper to hang up (after, for `answer`, a packet of that
 * type). */
static void raw_send(const char *path, const void *buf, size_t len, int fd,
                     unsigned n_fds, int answer)
{
        int s = raw_connect(path);
        char reply[256];
        ssize_t n;

        /* The keeper speaks first. */
        n = recv(s, reply, sizeof(reply), 0);
        assert_int_equal(n, (ssize_t)sizeof(raw_head));
        assert_int_equal(((raw_head *)reply)->type, 20);        /* WELCOME */
        raw_sendmsg(s, buf, len, fd, n_fds);
        n = recv(s, reply, sizeof(reply), 0);
        if (answer) {
                raw_head h;

                assert_true(n >= (ssize_t)sizeof(h));
                memcpy(&h, reply, sizeof(h));
                assert_int_equal(h.type, answer);
                n = recv(s, reply, sizeof(reply), 0);
        }
        assert_int_equal(n, 0);         /* hung up on */
        close(s);
}

/* A daemon that dies with packets of the keeper's unread resets the
 * connection, and the keeper hears of the reset before the packets the
 * daemon sent last: a put just before the death is kept all the same.
 * (The keeper is stopped meanwhile, so that it reads nothing before.) */
static void test_put_then_reset(void **state)
{
        fixture *f = *state;
        gmd_keep *k = open_keep(f, 300);
        pid_t keeper = keep_keeper_pid(k);
        int kept = memfd_with("kept"), late = memfd_with("late"), s, queued = 0;
        struct {
                raw_head h;
                char name[GMD_KEEP_NAME_MAX];
        } put = { { RAW_MAGIC, 1, 2, 1, 0 }, "late" };
        raw_head hello = { RAW_MAGIC, 1, 1, 0, 300 };

        assert_int_equal(keep_put(k, "kept", kept), 0);
        keep_close(k, false);
        close(kept);

        /* WELCOME, then HELLO's answer (BATCH, DONE), all left unread. */
        s = raw_connect(f->path);
        raw_sendmsg(s, &hello, sizeof(hello), -1, 0);
        for (int i = 0; i < 200 && queued < 3 * (int)sizeof(raw_head); i++) {
                usleep(10000);
                assert_int_equal(ioctl(s, FIONREAD, &queued), 0);
        }
        assert_int_equal(kill(keeper, SIGSTOP), 0);
        raw_sendmsg(s, &put, sizeof(put), late, 1);
        close(s);
        close(late);
        assert_int_equal(kill(keeper, SIGCONT), 0);

        k = open_keep(f, 300);
        assert_int_equal(keep_keeper_pid(k), keeper);
        assert_int_equal(k->n_restored, 2);
        assert_non_null(find_kept(k, "kept"));
        assert_non_null(find_kept(k, "late"));
        assert_bytes(find_kept(k, "late")->fd, "late");
        discard(f, k);
}

static void test_malformed(void **state)
{
        fixture *f = *state;
        gmd_keep *k = open_keep(f, 300);
        pid_t keeper = keep_keeper_pid(k);
        int fd = memfd_with("kept");
        struct {
                raw_head h;
                char name[GMD_KEEP_NAME_MAX];
        } put = { { RAW_MAGIC, 1, 2, 1, 0 }, "x" };
        char junk[300];

        assert_int_equal(keep_put(k, "kept", fd), 0);
        keep_close(k, false);

        memset(junk, 0xa5, sizeof(junk));
        raw_send(f->path, junk, 3, -1, 0, 0);                   /* short */
        raw_send(f->path, junk, sizeof(junk), fd, 2, 0);        /* junk, fds */
        put.h.magic = 1;
        raw_send(f->path, &put, sizeof(put), fd, 1, 0);         /* magic */
        put.h.magic = RAW_MAGIC;
        raw_send(f->path, &put, sizeof(put), -1, 0, 0);         /* no fd */
        raw_send(f->path, &put, sizeof(put), fd, 3, 0);         /* 3 fds */
        raw_send(f->path, &put, sizeof(put) - 1, fd, 1, 0);     /* length */
        put.h.count = 7;
        raw_send(f->path, &put, sizeof(put), fd, 1, 0);         /* count */
        put.h.count = 1;
        memset(put.name, 'q', sizeof(put.name));                /* no NUL */
        raw_send(f->path, &put, sizeof(put), fd, 1, 0);
        strcpy(put.name, "a:b");                                /* bad name */
        raw_send(f->path, &put, sizeof(put), fd, 1, 0);
        strcpy(put.name, "x");
        put.h.type = 99;                                        /* type */
        raw_send(f->path, &put, sizeof(put), fd, 1, 0);
        put.h.type = 1;                                         /* HELLO v99 */
        put.h.version = 99;
        put.h.count = 0;
        raw_send(f->path, &put.h, sizeof(put.h), -1, 0, 18);    /* REFUSED */
        close(fd);

        /* Still there, still holding what it held, and nothing more. */
        k = open_keep(f, 300);
        assert_int_equal(keep_keeper_pid(k), keeper);
        assert_int_equal(k->n_restored, 1);
        assert_string_equal(k->restored[0].name, "kept");
        assert_bytes(k->restored[0].fd, "kept");
        discard(f, k);
}

/* The uid checks, both ways, as another user (root only). */
static void test_other_uid(void **state)
{
        fixture *f = *state;
        const uid_t nobody = 65534;
        gmd_keep *k = NULL;
        int p[2], status;
        pid_t child, keeper = 0;

        if (geteuid() != 0) {
                printf("keeper: the uid checks need root to become another user; "
                       "not run\n");
                skip();
        }
        assert_int_equal(chmod(f->dir, 0777), 0);

        /* A keeper of another user's: refused. */
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        child = fork();
        assert_true(child >= 0);
        if (child == 0) {
                gmd_keep *ck = NULL;
                int fd = memfd_with("theirs"), ok;
                pid_t kp;

                if (setgid(nobody) < 0 || setuid(nobody) < 0)
                        _exit(2);
                ok = keep_keeper_open(f->path, 30, &ck) == 0 &&
                     keep_put(ck, "theirs", fd) == 0;
                kp = ok ? keep_keeper_pid(ck) : 0;
                (void)!write(p[1], &kp, sizeof(kp));
                _exit(ok ? 0 : 1);
        }
        close(p[1]);
        assert_int_equal(read(p[0], &keeper, sizeof(keeper)), (ssize_t)sizeof(keeper));
        close(p[0]);
        assert_int_equal(waitpid(child, &status, 0), child);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        assert_int_equal(keep_keeper_open(f->path, 30, &k), -EPERM);
        assert_null(k);
        assert_int_equal(kill(keeper, SIGTERM), 0);     /* ends cleanly */
        assert_true(wait_gone(keeper, 2000));
        assert_int_equal(access(f->path, F_OK), -1);

        /* Another user at our keeper, the socket's mode opened up on
         * purpose: the keeper refuses it. */
        k = open_keep(f, 30);
        {
                int fd = memfd_with("ours");

                assert_int_equal(keep_put(k, "ours", fd), 0);
                close(fd);
        }
        keep_close(k, false);
        assert_int_equal(chmod(f->path, 0666), 0);
        child = fork();
        assert_true(child >= 0);
        if (child == 0) {
                raw_head r;
                struct sockaddr_un a = { .sun_family = AF_UNIX };
                int s;

                if (setgid(nobody) < 0 || setuid(nobody) < 0)
                        _exit(2);
                s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
                strcpy(a.sun_path, f->path);
                if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0)
                        _exit(3);
                if (recv(s, &r, sizeof(r), 0) != (ssize_t)sizeof(r) ||
                    r.type != 18 || r.arg != EPERM)
                        _exit(4);
                _exit(recv(s, &r, sizeof(r), 0) == 0 ? 0 : 5);
        }
        assert_int_equal(waitpid(child, &status, 0), child);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        k = open_keep(f, 30);
        assert_int_equal(k->n_restored, 1);
        discard(f, k);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        const struct CMUnitTest tests[] = {
                T(test_survives_daemon_death),
                T(test_hold_runs_out),
                T(test_nothing_held_exits),
                T(test_discard),
                T(test_second_daemon_refused),
                T(test_names),
                T(test_many_and_cost),
                T(test_malformed),
                T(test_put_then_reset),
                T(test_other_uid),
        };

        /* The keep's own lines (a refusal) are part of what is tested. */
        log_setup(GMD_LOG_DEBUG);
        return cmocka_run_group_tests(tests, NULL, NULL);
}
