/*
 * spawn — see spawn.h.
 */
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

extern char **environ;

int spawn_exit_code(int status)
{
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void spawn_identity_of(const char *name, spawn_identity *ret)
{
        struct passwd *pw = getpwnam(name);

        if (!pw)
                fail_msg("no user %s", name);
        memset(ret, 0, sizeof(*ret));
        ret->name = name;
        ret->uid = pw->pw_uid;
        ret->gid = pw->pw_gid;
        ret->n_groups = 64;
        if (getgrouplist(name, pw->pw_gid, ret->groups, &ret->n_groups) < 0)
                fail_msg("%s is in more than 64 groups", name);
}

/* Is `var` (NAME=VALUE) one of the names we set or must not pass on? */
static bool env_overridden(const char *var, const spawn_opts *o)
{
        static const char *const ours[] = {
                "GPU_MEMD_SOCKET=", "GPU_MEMD_PRIORITY=", "LISTEN_FDS=",
                "LISTEN_PID=", "LISTEN_FDNAMES=", "NOTIFY_SOCKET=",
                "WATCHDOG_USEC=", "WATCHDOG_PID=", "JOURNAL_STREAM=", NULL,
        };

        for (const char *const *p = ours; *p; p++)
                if (strncmp(var, *p, strlen(*p)) == 0)
                        return true;
        for (const char *const *p = o->env; p && *p; p++) {
                size_t n = strcspn(*p, "=");

                if (strncmp(var, *p, n + 1) == 0)
                        return true;
        }
        return false;
}

/* The child's environment: ours minus what o sets or must not leak (a
 * NOTIFY_SOCKET of a CI service manager, say), plus o's. Strings are
 * malloc'd; `*ret_pid_var` is the LISTEN_PID slot the child fills in. */
static char **env_build(const spawn_opts *o, char **ret_pid_var)
{
        size_t n = 0, j = 0;
        char **env;

        while (environ[n])
                n++;
        for (const char *const *p = o->env; p && *p; p++)
                n++;
        env = calloc(n + 4, sizeof(*env));
        assert_non_null(env);
        for (size_t i = 0; environ[i]; i++)
                if (!env_overridden(environ[i], o))
                        env[j++] = strdup(environ[i]);
        for (const char *const *p = o->env; p && *p; p++)
                env[j++] = strdup(*p);
        if (o->socket && asprintf(&env[j++], "GPU_MEMD_SOCKET=%s", o->socket) < 0)
                fail_msg("asprintf");
        *ret_pid_var = NULL;
        if (o->listen_fd >= 0) {
                env[j++] = strdup("LISTEN_FDS=1");
                /* Room for the digits of any pid. */
                env[j] = strdup("LISTEN_PID=00000000000000000000");
                *ret_pid_var = env[j++];
        }
        env[j] = NULL;
        return env;
}

static void env_free(char **env)
{
        for (char **p = env; *p; p++)
                free(*p);
        free(env);
}

/* Async-signal-safe: write the decimal pid after "LISTEN_PID=". */
static void put_pid(char *var, pid_t pid)
{
        char digits[24];
        int n = 0;
        char *out = var + strlen("LISTEN_PID=");

        do {
                digits[n++] = (char)('0' + pid % 10);
                pid /= 10;
        } while (pid > 0);
        while (n > 0)
                *out++ = digits[--n];
        *out = '\0';
}

pid_t spawn_start(const char *const *argv, const spawn_opts *o, int out_fd,
                  int err_fd)
{
        pid_t parent = getpid(), pid;
        int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        /* Another user may not reach argv[0] by its path (harness.h). */
        int program = o->as ? harness_open_program(argv[0]) : -1;
        char *pid_var;
        char **env = env_build(o, &pid_var);

        assert_true(null_fd >= 0);
        pid = fork();
        if (pid < 0)
                fail_msg("fork: %s", strerror(errno));
        if (pid == 0) {
                const spawn_identity *as = o->as;

                /* Credentials first: changing them clears PDEATHSIG. */
                if (as && (setgroups((size_t)as->n_groups, as->groups) < 0 ||
                           setgid(as->gid) < 0 || setuid(as->uid) < 0))
                        _exit(126);
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() != parent)
                        _exit(127);
                if (dup2(null_fd, 0) < 0 || dup2(out_fd, 1) < 0 ||
                    dup2(err_fd, 2) < 0)
                        _exit(127);
                if (o->listen_fd >= 0) {
                        if (o->listen_fd == 3)
                                fcntl(3, F_SETFD, 0);
                        else if (dup2(o->listen_fd, 3) < 0)
                                _exit(127);
                        put_pid(pid_var, getpid());
                }
                if (program >= 0)
                        harness_exec_program(program, argv, env);
                else
                        execve(argv[0], (char *const *)argv, env);
                _exit(127);
        }
        close(null_fd);
        if (program >= 0)
                close(program);
        env_free(env);
        return pid;
}

int spawn_run(const char *const *argv, const spawn_opts *o, char **ret_out,
              char **ret_err, int timeout_ms)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
        int out_pipe[2], err_pipe[2], fds[2], status = 0;
        char *texts[2] = { NULL, NULL };
        size_t sizes[2] = { 0, 0 };
        FILE *outs[2];
        pid_t pid;

        assert_int_equal(pipe2(out_pipe, O_CLOEXEC), 0);
        assert_int_equal(pipe2(err_pipe, O_CLOEXEC), 0);
        pid = spawn_start(argv, o, out_pipe[1], err_pipe[1]);
        close(out_pipe[1]);
        close(err_pipe[1]);
        fds[0] = out_pipe[0];
        fds[1] = err_pipe[0];
        outs[0] = open_memstream(&texts[0], &sizes[0]);
        outs[1] = open_memstream(&texts[1], &sizes[1]);
        assert_true(outs[0] && outs[1]);
        while (fds[0] >= 0 || fds[1] >= 0) {
                struct pollfd pfd[2] = {
                        { .fd = fds[0], .events = POLLIN },
                        { .fd = fds[1], .events = POLLIN },
                };
                uint64_t now = harness_now_ms();

                if (now >= deadline)
                        break;
                if (poll(pfd, 2, (int)(deadline - now)) <= 0)
                        continue;
                for (int i = 0; i < 2; i++) {
                        char buf[4096];
                        ssize_t r;

                        if (fds[i] < 0 || !(pfd[i].revents & (POLLIN | POLLHUP)))
                                continue;
                        r = read(fds[i], buf, sizeof(buf));
                        if (r <= 0) {
                                close(fds[i]);
                                fds[i] = -1;
                        } else {
                                fwrite(buf, 1, (size_t)r, outs[i]);
                        }
                }
        }
        for (int i = 0; i < 2; i++) {
                if (fds[i] >= 0)
                        close(fds[i]);
                fclose(outs[i]);
        }
        while (waitpid(pid, &status, WNOHANG) == 0) {
                if (harness_now_ms() >= deadline) {
                        kill(pid, SIGKILL);
                        waitpid(pid, &status, 0);
                        fail_msg("%s did not finish within %d ms; output:\n%s%s",
                                 argv[0], timeout_ms, texts[0], texts[1]);
                }
                harness_sleep_ms(2);
        }
        if (ret_out)
                *ret_out = texts[0];
        else
                free(texts[0]);
        if (ret_err)
                *ret_err = texts[1];
        else
                free(texts[1]);
        return status;
}

harness_proc *spawn_tracked(harness_fixture *f, const spawn_opts *o,
                            const char *const *argv)
{
        harness_proc *p = harness_track(f);
        char err_path[160];
        int pipefd[2], err_fd;

        snprintf(err_path, sizeof(err_path), "%s/clients.log", f->h.dir);
        err_fd = open(err_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        assert_true(err_fd >= 0);
        assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
        p->pid = spawn_start(argv, o, pipefd[1], err_fd);
        p->out_fd = pipefd[0];
        close(pipefd[1]);
        close(err_fd);
        return p;
}
