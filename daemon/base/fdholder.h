/*
 * fdholder — which process holds an open file the daemon holds too.
 *
 * A VMM export (or a sim memfd) keeps its memory alive while any fd of
 * its open file is open anywhere. The daemon sends clients duplicates of
 * its own fd (SCM_RIGHTS, like dup(), shares the open file description),
 * so "does a process still hold this buffer's memory through an fd" is
 * "does one of its fds name the same open file as ours". Only kcmp(2)
 * answers that: on cuda every export is an open of /dev/nvidiactl with
 * one (st_dev, st_ino) for all of them (measured: H200, driver 580), and
 * KCMP_FILE compares the open files themselves.
 *
 * Shaped for a worker thread: one call looks for many files at once
 * among the processes of their uids, reads /proc and calls kcmp only,
 * keeps no state and stops at a time budget, so the caller runs it off
 * its loop and bounds it. kcmp also orders open files, so the files
 * looked for are sorted once and each fd of a process costs one stat
 * (its st_dev must be one of theirs) and a binary search of kcmp calls,
 * not one call per file looked for. kcmp needs ptrace-read permission on
 * the process (root; or the same uid and a dumpable process): a process
 * that cannot be looked into is reported as such, never guessed.
 */
#ifndef GMD_FDHOLDER_H
#define GMD_FDHOLDER_H

#include <stdint.h>
#include <sys/types.h>

typedef struct fdholder_item {
        int fd;         /* in: ours, naming the open file looked for */
        uid_t uid;      /* in: whose processes are looked in */
        pid_t hint;     /* in: looked in first (its owner); 0: none */
        pid_t found;    /* out: a process of `uid` holding it; 0: none */
        /* out, where not found: 0 every process of `uid` was looked in;
         * -EPERM some could not be (no permission: kcmp or its fd
         * folder); -ETIMEDOUT the budget ran out first; -EBADF `fd` is
         * not open. */
        int status;
} fdholder_item;

/*
 * Look for each item's open file among the fds of the processes of its
 * uid (the hints first, then /proc), this process left out, for at most
 * `budget_us`. Sets each item's `found` and `status`. 0; -ENOSYS when
 * the kernel has no kcmp (every status -ENOSYS, nothing found). Any
 * thread; no global state.
 */
int fdholder_find(fdholder_item *items, unsigned n, uint64_t budget_us);

/* The pid a /proc entry names ("1234"), or -1 ("self", "net", "12a"). */
pid_t fdholder_pid_of(const char *name);

/* kcmp(KCMP_FILE) of fd `fd1` of `pid1` and fd `fd2` of `pid2`: 0 the
 * same open file, 1 or 2 the first orders before or after the second,
 * 3 unordered, or -errno (-ENOSYS, -EPERM, -EBADF, -ESRCH). */
int fdholder_kcmp(pid_t pid1, int fd1, pid_t pid2, int fd2);

#endif
