/*
 * test_fdholder — daemon/base/fdholder.c: which process holds an open
 * file we hold too, with real processes (children holding dups of
 * memfds, as clients hold dups of the daemon's buffer fds).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "fdholder.h"

#define BUDGET_US 2000000

static int memfd(const char *name)
{
        int fd = memfd_create(name, MFD_CLOEXEC);

        assert_true(fd >= 0);
        return fd;
}

/* A child (fork, no exec) holds every fd this process has, as a client
 * holds the dups it was sent; told (a byte on `tell`), it closes `drop`
 * and says so (a byte on `done`). */
typedef struct child {
        pid_t pid;
        int tell, done;
        int drop;
} child;

static child child_start(int drop)
{
        int go[2], back[2];
        child c = { .drop = drop };
        char x;

        assert_int_equal(pipe(go), 0);
        assert_int_equal(pipe(back), 0);
        c.pid = fork();
        assert_true(c.pid >= 0);
        if (c.pid == 0) {
                close(go[1]);
                close(back[0]);
                if (write(back[1], "r", 1) != 1)
                        _exit(1);
                if (read(go[0], &x, 1) == 1 && drop >= 0)
                        close(drop);
                if (write(back[1], "d", 1) != 1)
                        _exit(1);
                for (;;)
                        pause();
        }
        close(go[0]);
        close(back[1]);
        assert_int_equal(read(back[0], &x, 1), 1);
        c.tell = go[1];
        c.done = back[0];
        return c;
}

static void child_drop(child *c)
{
        char x = 'x';

        assert_int_equal(write(c->tell, &x, 1), 1);
        assert_int_equal(read(c->done, &x, 1), 1);
}

static void child_end(child *c)
{
        int status;

        kill(c->pid, SIGKILL);
        waitpid(c->pid, &status, 0);
        close(c->tell);
        close(c->done);
}

static void test_pid_of(void **state)
{
        (void)state;
        assert_int_equal(fdholder_pid_of("1234"), 1234);
        assert_int_equal(fdholder_pid_of("1"), 1);
        assert_int_equal(fdholder_pid_of("0"), -1);
        assert_int_equal(fdholder_pid_of(""), -1);
        assert_int_equal(fdholder_pid_of("self"), -1);
        assert_int_equal(fdholder_pid_of("12a"), -1);
        assert_int_equal(fdholder_pid_of("99999999999"), -1);
}

/* kcmp tells a dup (same open file) from a second open of one file. */
static void test_kcmp(void **state)
{
        int a = memfd("a"), b = dup(a), c = memfd("c");
        pid_t self = getpid();
        int r;

        (void)state;
        r = fdholder_kcmp(self, a, self, b);
        if (r == -ENOSYS) {
                print_message("skipped: no kcmp in this kernel\n");
                close(a); close(b); close(c);
                skip();
        }
        assert_int_equal(r, 0);
        r = fdholder_kcmp(self, a, self, c);
        assert_true(r == 1 || r == 2);
        assert_int_equal(fdholder_kcmp(self, c, self, a), r == 1 ? 2 : 1);
        assert_int_equal(fdholder_kcmp(self, a, self, 9999), -EBADF);
        close(a);
        close(b);
        close(c);
}

/* Three files, a child holding two of them: each found there, the third
 * in nobody (this process is left out); after the child closes f[2], it
 * is not found any more; after the child is gone, nothing is. */
static void test_find(void **state)
{
        int f[3] = { memfd("f0"), -1, memfd("f2") };
        fdholder_item items[3];
        child c;

        (void)state;
        if (fdholder_kcmp(getpid(), f[0], getpid(), f[0]) == -ENOSYS) {
                close(f[0]); close(f[2]);
                skip();
        }
        c = child_start(f[2]);
        f[1] = memfd("f1");     /* after the fork: only here */
        for (unsigned i = 0; i < 3; i++)
                items[i] = (fdholder_item){ .fd = f[i], .uid = getuid(),
                                            .hint = i == 0 ? c.pid : 0 };
        assert_int_equal(fdholder_find(items, 3, BUDGET_US), 0);
        assert_int_equal(items[0].found, c.pid);
        assert_int_equal(items[0].status, 0);
        assert_int_equal(items[1].found, 0);
        assert_int_equal(items[1].status, 0);
        assert_int_equal(items[2].found, c.pid);

        /* The child closes its copy of f[2]. */
        child_drop(&c);
        assert_int_equal(fdholder_find(&items[2], 1, BUDGET_US), 0);
        assert_int_equal(items[2].found, 0);
        assert_int_equal(items[2].status, 0);

        /* Gone: nothing holds f[0] but us. */
        child_end(&c);
        assert_int_equal(fdholder_find(items, 1, BUDGET_US), 0);
        assert_int_equal(items[0].found, 0);
        for (unsigned i = 0; i < 3; i++)
                close(f[i]);
}

/* Other uids' processes are not looked in; an fd not open is -EBADF; a
 * budget of nothing leaves what was not found unknown. */
static void test_uid_badfd_budget(void **state)
{
        int f = memfd("u");
        fdholder_item it[2];
        child c;

        (void)state;
        if (fdholder_kcmp(getpid(), f, getpid(), f) == -ENOSYS) {
                close(f);
                skip();
        }
        c = child_start(-1);
        it[0] = (fdholder_item){ .fd = f, .uid = getuid() + 1 };
        it[1] = (fdholder_item){ .fd = 9999, .uid = getuid() };
        assert_int_equal(fdholder_find(it, 2, BUDGET_US), 0);
        assert_int_equal(it[0].found, 0);
        assert_int_equal(it[0].status, 0);
        assert_int_equal(it[1].status, -EBADF);

        /* The hint is looked in first: found within the first entries,
         * before the clock is read, even with no budget. */
        it[0] = (fdholder_item){ .fd = f, .uid = getuid(), .hint = c.pid };
        assert_int_equal(fdholder_find(it, 1, 0), 0);
        assert_int_equal(it[0].found, c.pid);
        child_end(&c);
        close(f);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_pid_of),
                cmocka_unit_test(test_kcmp),
                cmocka_unit_test(test_find),
                cmocka_unit_test(test_uid_badfd_budget),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
