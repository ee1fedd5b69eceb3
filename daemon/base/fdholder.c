/*
 * fdholder — see fdholder.h. One pass: the items are sorted in kcmp's
 * order of their open files, the hinted processes are looked in, then
 * every process /proc lists whose uid some item still waits for. A
 * process is looked in by its fd folder: each entry is stat'ed (through
 * the link, so the file itself) and only one on a device of an item's
 * file is compared, by a binary search of kcmp calls. The clock is read
 * every 64 entries; the pass stops at the budget, the items not found
 * then marked -ETIMEDOUT (unknown, not absent).
 */
#include "fdholder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "timeutil.h"

#define KCMP_FILE_TYPE 0        /* linux/kcmp.h's KCMP_FILE */
#define MAX_DEVS 8              /* distinct st_dev of the items' files */
#define CLOCK_EVERY 64

typedef struct scan {
        fdholder_item **sorted;  /* items not given up, in kcmp's order */
        unsigned n;
        unsigned left;           /* of those, not found yet */
        dev_t devs[MAX_DEVS];
        unsigned n_devs;         /* MAX_DEVS + 1: any device */
        pid_t self;
        uint64_t deadline_us;
        unsigned ticks;
        bool out_of_time;
} scan;

int fdholder_kcmp(pid_t pid1, int fd1, pid_t pid2, int fd2)
{
#ifdef SYS_kcmp
        long r = syscall(SYS_kcmp, pid1, pid2, KCMP_FILE_TYPE, fd1, fd2);

        return r < 0 ? -errno : (int)r;
#else
        (void)pid1; (void)fd1; (void)pid2; (void)fd2;
        return -ENOSYS;
#endif
}

/* A decimal number below 2^30 ("1234", "0"), or -1. */
static long number_of(const char *name)
{
        long v = 0;

        if (!*name)
                return -1;
        for (const char *p = name; *p; p++) {
                if (*p < '0' || *p > '9' || v > 1L << 30)
                        return -1;
                v = v * 10 + (*p - '0');
        }
        return v;
}

pid_t fdholder_pid_of(const char *name)
{
        long pid = number_of(name);

        return pid > 0 ? (pid_t)pid : -1;
}

static int by_file(const void *a, const void *b)
{
        const fdholder_item *x = *(fdholder_item *const *)a;
        const fdholder_item *y = *(fdholder_item *const *)b;
        pid_t self = getpid();
        int r = fdholder_kcmp(self, x->fd, self, y->fd);

        if (r == 1)
                return -1;
        if (r == 2)
                return 1;
        return r == 0 ? 0 : (x->fd > y->fd) - (x->fd < y->fd);
}

static bool time_up(scan *s)
{
        if (++s->ticks % CLOCK_EVERY == 0 && now_us() >= s->deadline_us)
                s->out_of_time = true;
        return s->out_of_time;
}

static bool dev_wanted(const scan *s, dev_t dev)
{
        if (s->n_devs > MAX_DEVS)
                return true;
        for (unsigned i = 0; i < s->n_devs; i++)
                if (s->devs[i] == dev)
                        return true;
        return false;
}

/* Does an item not found yet wait for processes of `uid`? */
static bool uid_wanted(const scan *s, uid_t uid)
{
        for (unsigned i = 0; i < s->n; i++)
                if (!s->sorted[i]->found && s->sorted[i]->uid == uid)
                        return true;
        return false;
}

static void mark_uid(scan *s, uid_t uid, int status)
{
        for (unsigned i = 0; i < s->n; i++)
                if (!s->sorted[i]->found && s->sorted[i]->uid == uid)
                        s->sorted[i]->status = status;
}

/* The item whose open file fd `fd` of `pid` is, or NULL; -EPERM, -ESRCH
 * in *ret_err when the process cannot be compared with. */
static fdholder_item *match(scan *s, pid_t pid, int fd, int *ret_err)
{
        unsigned lo = 0, hi = s->n;

        while (lo < hi) {
                unsigned mid = lo + (hi - lo) / 2;
                int r = fdholder_kcmp(s->self, s->sorted[mid]->fd, pid, fd);

                if (r == 0)
                        return s->sorted[mid];
                if (r == 1)
                        lo = mid + 1;
                else if (r == 2)
                        hi = mid;
                else if (r == 3)
                        break;          /* unordered: compare each below */
                else {
                        if (r != -EBADF)        /* closed meanwhile: next */
                                *ret_err = r;
                        return NULL;
                }
        }
        if (lo >= hi)
                return NULL;
        for (unsigned i = 0; i < s->n; i++)
                if (fdholder_kcmp(s->self, s->sorted[i]->fd, pid, fd) == 0)
                        return s->sorted[i];
        return NULL;
}

/* Look in process `pid` of `uid` for the items of `uid` not found yet. */
static void look_in(scan *s, pid_t pid, uid_t uid)
{
        char path[32];
        struct dirent *e;
        DIR *dir;

        snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
        dir = opendir(path);
        if (!dir) {
                if (errno == EACCES || errno == EPERM)
                        mark_uid(s, uid, -EPERM);
                return;         /* gone: nothing held there */
        }
        while (s->left && (e = readdir(dir)) && !time_up(s)) {
                int fd = (int)number_of(e->d_name), err = 0;
                fdholder_item *it;
                struct stat st;

                if (fd < 0)
                        continue;
                if (fstatat(dirfd(dir), e->d_name, &st, 0) < 0 ||
                    !dev_wanted(s, st.st_dev))
                        continue;
                it = match(s, pid, fd, &err);
                if (err == -EPERM || err == -EACCES) {
                        mark_uid(s, uid, -EPERM);
                        break;
                }
                if (err)
                        break;          /* -ESRCH: it ended */
                if (it && !it->found && it->uid == uid) {
                        it->found = pid;
                        it->status = 0;
                        s->left--;
                }
        }
        closedir(dir);
}

static uid_t uid_of(int proc, const char *name, bool *ret_ok)
{
        struct stat st;

        *ret_ok = fstatat(proc, name, &st, 0) == 0;
        return *ret_ok ? st.st_uid : 0;
}

static bool hinted(const scan *s, pid_t pid)
{
        for (unsigned i = 0; i < s->n; i++)
                if (s->sorted[i]->hint == pid)
                        return true;
        return false;
}

/* The hints first: the owner holds its fds far more often than not. */
static void look_in_hints(scan *s, int proc)
{
        for (unsigned i = 0; i < s->n && s->left && !s->out_of_time; i++) {
                pid_t pid = s->sorted[i]->hint;
                char name[16];
                bool ok, seen = false;
                uid_t uid;

                if (pid <= 0 || pid == s->self || s->sorted[i]->found)
                        continue;
                for (unsigned j = 0; j < i; j++)
                        seen |= s->sorted[j]->hint == pid;
                snprintf(name, sizeof(name), "%d", (int)pid);
                uid = uid_of(proc, name, &ok);
                if (!seen && ok && uid_wanted(s, uid))
                        look_in(s, pid, uid);
        }
}

static void look_in_all(scan *s, int proc)
{
        DIR *dir;
        struct dirent *e;
        int fd = dup(proc);

        if (fd < 0 || !(dir = fdopendir(fd))) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        while (s->left && (e = readdir(dir)) && !time_up(s)) {
                pid_t pid = fdholder_pid_of(e->d_name);
                bool ok;
                uid_t uid;

                if (pid <= 0 || pid == s->self || hinted(s, pid))
                        continue;
                uid = uid_of(proc, e->d_name, &ok);
                if (ok && uid_wanted(s, uid))
                        look_in(s, pid, uid);
        }
        closedir(dir);
}

int fdholder_find(fdholder_item *items, unsigned n, uint64_t budget_us)
{
        scan s = { .self = getpid(), .deadline_us = now_us() + budget_us };
        int proc, r = 0;

        if (n == 0)
                return 0;
        s.sorted = calloc(n, sizeof(*s.sorted));
        if (!s.sorted)
                return -ENOMEM;
        for (unsigned i = 0; i < n; i++) {
                struct stat st;
                bool known = false;

                items[i].found = 0;
                items[i].status = 0;
                if (fstat(items[i].fd, &st) < 0) {
                        items[i].status = -EBADF;
                        continue;
                }
                for (unsigned d = 0; d < s.n_devs && d < MAX_DEVS; d++)
                        known |= s.devs[d] == st.st_dev;
                if (!known && s.n_devs < MAX_DEVS)
                        s.devs[s.n_devs++] = st.st_dev;
                else if (!known)
                        s.n_devs = MAX_DEVS + 1;
                s.sorted[s.n++] = &items[i];
        }
        s.left = s.n;
        if (s.n && fdholder_kcmp(s.self, s.sorted[0]->fd, s.self,
                                 s.sorted[0]->fd) == -ENOSYS) {
                for (unsigned i = 0; i < n; i++)
                        items[i].status = -ENOSYS;
                free(s.sorted);
                return -ENOSYS;
        }
        qsort(s.sorted, s.n, sizeof(*s.sorted), by_file);
        proc = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (proc >= 0) {
                look_in_hints(&s, proc);
                look_in_all(&s, proc);
                close(proc);
        } else {
                s.out_of_time = true;   /* nothing looked at: unknown */
        }
        for (unsigned i = 0; i < s.n; i++)
                if (!s.sorted[i]->found && s.out_of_time &&
                    s.sorted[i]->status == 0)
                        s.sorted[i]->status = -ETIMEDOUT;
        free(s.sorted);
        return r;
}
