/*
 * harness — see harness.h. Processes are started with fork + execve and an
 * environment built before the fork: the test process may run libgpumem's
 * I/O thread, so the child does nothing but dup2/exec between the two.
 * Children get PR_SET_PDEATHSIG so a test that dies takes its daemon and
 * clients with it instead of leaving them running.
 */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "pattern.h"

extern char **environ;

uint64_t harness_now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void harness_sleep_ms(int ms)
{
        struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

void harness_write_file(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");

        if (!f)
                fail_msg("cannot write %s: %s", path, strerror(errno));
        fputs(text, f);
        if (fclose(f) != 0)
                fail_msg("cannot write %s: %s", path, strerror(errno));
}

void harness_init(harness *h, const char *config)
{
        memset(h, 0, sizeof(*h));
        snprintf(h->dir, sizeof(h->dir), "/tmp/gmd-it-XXXXXX");
        if (!mkdtemp(h->dir))
                fail_msg("mkdtemp: %s", strerror(errno));
        snprintf(h->socket_path, sizeof(h->socket_path), "%s/gpu-memd.sock",
                 h->dir);
        snprintf(h->config_path, sizeof(h->config_path), "%s/gpu-memd.conf",
                 h->dir);
        snprintf(h->log_path, sizeof(h->log_path), "%s/gpu-memd.log", h->dir);
        snprintf(h->metrics_path, sizeof(h->metrics_path), "%s/metrics.sock",
                 h->dir);
        harness_write_file(h->config_path, config ? config : "");
}

static char *small_config(const char *extra_config)
{
        char *config;

        if (asprintf(&config, "%s%s", HARNESS_SMALL_CONFIG,
                     extra_config ? extra_config : "") < 0)
                fail_msg("asprintf");
        return config;
}

void harness_init_small(harness *h, const char *extra_config)
{
        char *config = small_config(extra_config);

        harness_init(h, config);
        free(config);
}

void harness_write_config(const harness *h, const char *extra_config)
{
        char *config = small_config(extra_config);

        harness_write_file(h->config_path, config);
        free(config);
}

void harness_append_config(const harness *h, const char *more_config)
{
        FILE *f = fopen(h->config_path, "a");

        if (!f || fputs(more_config, f) < 0 || fclose(f) != 0)
                fail_msg("cannot append to %s: %s", h->config_path,
                         strerror(errno));
}

char *harness_read_file(const char *path)
{
        FILE *f = fopen(path, "r");
        char *text = NULL;
        size_t size = 0;
        FILE *out;
        char chunk[4096];
        size_t n;

        if (!f)
                return NULL;
        out = open_memstream(&text, &size);
        assert_non_null(out);
        while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
                fwrite(chunk, 1, n, out);
        fclose(out);
        fclose(f);
        return text;
}

char *harness_read_log(const harness *h)
{
        char *text = harness_read_file(h->log_path);

        if (!text)
                text = strdup("");      /* no log yet reads as an empty one */
        assert_non_null(text);
        return text;
}

int harness_log_count(const harness *h, const char *needle)
{
        char *log = harness_read_log(h);
        int n = 0;

        for (char *line = log; line && *line;) {
                char *end = strchr(line, '\n');

                if (end)
                        *end = '\0';
                if (strstr(line, needle))
                        n++;
                line = end ? end + 1 : line + strlen(line);
        }
        free(log);
        return n;
}

char *harness_wait_log(const harness *h, const char *needle, int timeout_ms)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;

        for (;;) {
                char *log = harness_read_log(h);
                char *hit = strstr(log, needle);

                if (hit) {
                        char *start = hit, *end = strchr(hit, '\n');
                        char *line;

                        while (start > log && start[-1] != '\n')
                                start--;
                        line = strndup(start, end ? (size_t)(end - start)
                                                  : strlen(start));
                        free(log);
                        return line;
                }
                free(log);
                if (harness_now_ms() >= deadline)
                        return NULL;
                harness_sleep_ms(10);
        }
}

static int count_dir_entries(const char *path)
{
        DIR *dir = opendir(path);
        struct dirent *entry;
        int n = 0;

        if (!dir)
                return -1;
        while ((entry = readdir(dir)))
                if (entry->d_name[0] != '.')
                        n++;
        closedir(dir);
        return n;
}

int harness_count_fds(pid_t pid)
{
        char path[64];

        snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
        return count_dir_entries(path);
}

int harness_count_own_fds(void)
{
        /* opendir's own fd is counted every time, so counts compare. */
        return count_dir_entries("/proc/self/fd");
}

int harness_connect_raw(const harness *h)
{
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

        if (fd < 0)
                return -1;
        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", h->socket_path);
        if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

/* Build "GPU_MEMD_SOCKET=path" plus the current environment (without any
 * GPU_MEMD_SOCKET of its own). Returns a malloc'd array; the strings other
 * than the first belong to environ. */
static char **make_env(const char *socket_path, char **ret_var)
{
        size_t n = 0, j = 1;
        char **env;

        while (environ[n])
                n++;
        env = calloc(n + 2, sizeof(*env));
        assert_non_null(env);
        if (asprintf(ret_var, "GPU_MEMD_SOCKET=%s", socket_path) < 0)
                fail_msg("asprintf");
        env[0] = *ret_var;
        for (size_t i = 0; i < n; i++)
                if (strncmp(environ[i], "GPU_MEMD_SOCKET=", 16) != 0)
                        env[j++] = environ[i];
        env[j] = NULL;
        return env;
}

/* fork + exec with stdin /dev/null, stdout to out_fd, stderr to err_fd. */
static pid_t spawn(const char *const *argv, char **env, int out_fd,
                   int err_fd)
{
        pid_t parent = getpid();
        int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        pid_t pid;

        assert_true(null_fd >= 0);
        pid = fork();
        if (pid < 0)
                fail_msg("fork: %s", strerror(errno));
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() != parent)
                        _exit(127);
                if (dup2(null_fd, 0) < 0 || dup2(out_fd, 1) < 0 ||
                    dup2(err_fd, 2) < 0)
                        _exit(127);
                execve(argv[0], (char *const *)argv, env);
                _exit(127);
        }
        close(null_fd);
        return pid;
}

static int wait_exit(pid_t pid, int timeout_ms, int *ret_status)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;

        for (;;) {
                pid_t r = waitpid(pid, ret_status, WNOHANG);

                if (r == pid)
                        return 0;
                if (r < 0 && errno != EINTR)
                        return -errno;
                if (harness_now_ms() >= deadline)
                        return -ETIMEDOUT;
                harness_sleep_ms(2);
        }
}

#define HARNESS_READY "ready: serving"

/*
 * Ready is when the daemon logs "ready: serving" (it listens by then;
 * "ready: " alone also matches the cuda backend's "host arena ready: ",
 * logged before). Not a
 * connection to the socket: the daemon accepts and closes such a probe
 * when its loop gets to it, and on a loaded machine that can be after the
 * test has taken the daemon's fd count as its idle baseline, which then
 * holds the probe (test_tiering's oversubscription test failed so, now
 * and then). The log line costs the daemon nothing and cannot be late.
 */
void harness_start(harness *h, const char *const *extra_args)
{
        const char *argv[32] = {
                GMD_DAEMON_PATH, "--backend", "sim",
                "--socket", h->socket_path, "--config", h->config_path,
        };
        size_t n = 7;
        uint64_t deadline;
        char *var;
        char **env;
        int log_fd, status, readies;

        for (; extra_args && *extra_args; extra_args++) {
                assert_true(n + 1 < sizeof(argv) / sizeof(argv[0]));
                argv[n++] = *extra_args;
        }
        argv[n] = NULL;

        /* A daemon started again appends to the same log. */
        readies = harness_log_count(h, HARNESS_READY);
        log_fd = open(h->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                      0644);
        assert_true(log_fd >= 0);
        env = make_env(h->socket_path, &var);
        h->pid = spawn(argv, env, log_fd, log_fd);
        free(env);
        free(var);
        close(log_fd);

        deadline = harness_now_ms() + 10000;
        for (;;) {
                if (harness_log_count(h, HARNESS_READY) > readies)
                        return;
                if (waitpid(h->pid, &status, WNOHANG) == h->pid) {
                        char *log = harness_read_log(h);

                        /* A failing setup gets no teardown: clean up here. */
                        h->pid = 0;
                        harness_cleanup(h);
                        fail_msg("gpu-memd exited during start-up (status "
                                 "%#x); log:\n%s", status, log);
                }
                if (harness_now_ms() >= deadline) {
                        char *log = harness_read_log(h);

                        harness_cleanup(h);
                        fail_msg("gpu-memd did not log \"ready: \" within 10 s "
                                 "(a log_level above info hides it); log:\n%s",
                                 log);
                }
                harness_sleep_ms(2);
        }
}

void harness_start_small(harness *h, const char *extra_config)
{
        harness_init_small(h, extra_config);
        harness_start(h, NULL);
}

void harness_start_small_metrics(harness *h, const char *extra_config)
{
        char *config, *line;

        harness_init(h, NULL);   /* the socket's path names the temp dir */
        if (asprintf(&config, "%s%s[metrics]\nlisten = unix:%s\n",
                     HARNESS_SMALL_CONFIG, extra_config ? extra_config : "",
                     h->metrics_path) < 0)
                fail_msg("asprintf");
        harness_write_file(h->config_path, config);
        free(config);
        harness_start(h, NULL);
        /* The daemon's socket accepts a moment before the endpoint listens. */
        line = harness_wait_log(h, "metrics: serving", 5000);
        if (!line)
                fail_msg("the metrics endpoint did not start; log:\n%s",
                         harness_read_log(h));
        free(line);
}

void harness_reload(harness *h, const char *more_config)
{
        static const char done[] = "reloaded the configuration";
        int before = harness_log_count(h, done);
        uint64_t deadline = harness_now_ms() + 5000;

        harness_append_config(h, more_config);
        assert_int_equal(kill(h->pid, SIGHUP), 0);
        while (harness_log_count(h, done) <= before) {
                if (harness_now_ms() >= deadline)
                        fail_msg("no new '%s' line within 5 s of SIGHUP; log:\n%s",
                                 done, harness_read_log(h));
                harness_sleep_ms(5);
        }
}

void harness_stop(harness *h)
{
        struct stat st;
        int status = 0, r;

        assert_true(h->pid > 0);
        assert_int_equal(kill(h->pid, SIGTERM), 0);
        r = wait_exit(h->pid, 5000, &status);
        if (r < 0) {
                kill(h->pid, SIGKILL);
                waitpid(h->pid, &status, 0);
                h->pid = 0;
                fail_msg("gpu-memd did not exit within 5 s of SIGTERM; log:\n%s",
                         harness_read_log(h));
        }
        h->pid = 0;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fail_msg("gpu-memd did not exit 0 after SIGTERM (%s %d); log:\n%s",
                         WIFEXITED(status) ? "exit" : "signal",
                         WIFEXITED(status) ? WEXITSTATUS(status)
                                           : WTERMSIG(status),
                         harness_read_log(h));
        if (lstat(h->socket_path, &st) == 0)
                fail_msg("gpu-memd left its socket %s behind", h->socket_path);
}

static void remove_dir(const char *path)
{
        DIR *dir = opendir(path);
        struct dirent *entry;

        if (!dir)
                return;
        while ((entry = readdir(dir))) {
                char *p;

                if (!strcmp(entry->d_name, ".") || !strcmp(entry->d_name, ".."))
                        continue;
                if (asprintf(&p, "%s/%s", path, entry->d_name) >= 0) {
                        unlink(p);
                        free(p);
                }
        }
        closedir(dir);
        rmdir(path);
}

/* The first line of a sanitizer's report in `text`, or NULL. Any build can
 * meet one (a client or daemon built with sanitizers elsewhere); the
 * sanitizer build (`make test-sanitize`) relies on it, since a report in a
 * process the test did not wait for would otherwise go unseen. */
static const char *sanitizer_report(const char *text)
{
        static const char *const marks[] = {
                "ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                "runtime error: ", "SUMMARY: UndefinedBehaviorSanitizer",
        };
        const char *first = NULL;

        for (size_t i = 0; text && i < sizeof(marks) / sizeof(marks[0]); i++) {
                const char *at = strstr(text, marks[i]);

                if (at && (!first || at < first))
                        first = at;
        }
        return first;
}

void harness_cleanup(harness *h)
{
        char *logs[2] = { NULL, NULL }, path[160];
        const char *names[2] = { "gpu-memd.log", "clients.log" };

        if (h->pid > 0) {
#ifdef GMD_SANITIZE
                /* A daemon that exits by itself runs LeakSanitizer. */
                int status;

                kill(h->pid, SIGTERM);
                if (wait_exit(h->pid, 10000, &status) < 0) {
                        kill(h->pid, SIGKILL);
                        waitpid(h->pid, NULL, 0);
                }
#else
                kill(h->pid, SIGKILL);
                waitpid(h->pid, NULL, 0);
#endif
                h->pid = 0;
        }
        if (!h->dir[0])
                return;
        for (int i = 0; i < 2; i++) {
                snprintf(path, sizeof(path), "%s/%s", h->dir, names[i]);
                logs[i] = harness_read_file(path);
        }
        if (!getenv("GMD_TEST_KEEP"))
                remove_dir(h->dir);
        h->dir[0] = '\0';
        for (int i = 0; i < 2; i++)
                if (sanitizer_report(logs[i]))
                        fail_msg("a sanitizer reported in %s:\n%s", names[i],
                                 sanitizer_report(logs[i]));
        free(logs[0]);
        free(logs[1]);
}

harness_proc harness_spawn(const harness *h, const char *socket_override,
                           const char *const *argv)
{
        harness_proc p = { .pid = -1, .out_fd = -1 };
        char err_path[160];
        int pipefd[2], err_fd;
        char *var;
        char **env;

        snprintf(err_path, sizeof(err_path), "%s/clients.log", h->dir);
        err_fd = open(err_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                      0644);
        assert_true(err_fd >= 0);
        assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
        env = make_env(socket_override ? socket_override : h->socket_path,
                       &var);
        p.pid = spawn(argv, env, pipefd[1], err_fd);
        free(env);
        free(var);
        close(pipefd[1]);
        close(err_fd);
        p.out_fd = pipefd[0];
        return p;
}

harness_proc harness_spawn_client(const harness *h, const char *const *args)
{
        const char *argv[16] = { GMD_TEST_CLIENT_PATH };
        size_t n = 1;

        for (; args && *args; args++) {
                assert_true(n + 1 < sizeof(argv) / sizeof(argv[0]));
                argv[n++] = *args;
        }
        argv[n] = NULL;
        return harness_spawn(h, NULL, argv);
}

char *harness_read_line(harness_proc *p, const char *prefix, int timeout_ms)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
        char line[1024];
        size_t len = 0;

        for (;;) {
                struct pollfd pfd = { .fd = p->out_fd, .events = POLLIN };
                uint64_t now = harness_now_ms();
                char c;
                ssize_t n;

                if (now >= deadline)
                        return NULL;
                if (poll(&pfd, 1, (int)(deadline - now)) <= 0)
                        continue;
                n = read(p->out_fd, &c, 1);
                if (n <= 0)
                        return NULL;   /* EOF: the process ended */
                if (c != '\n') {
                        if (len + 1 < sizeof(line))
                                line[len++] = c;
                        continue;
                }
                line[len] = '\0';
                if (strncmp(line, prefix, strlen(prefix)) == 0)
                        return strdup(line);
                len = 0;
        }
}

int harness_wait_proc(harness_proc *p, int timeout_ms)
{
        int status = 0;

        if (wait_exit(p->pid, timeout_ms, &status) < 0) {
                kill(p->pid, SIGKILL);
                waitpid(p->pid, &status, 0);
                p->pid = -1;
                fail_msg("client process did not end within %d ms", timeout_ms);
        }
        p->pid = -1;
        if (p->out_fd >= 0)
                close(p->out_fd);
        p->out_fd = -1;
        return status;
}

/* Read fds until EOF on both (or the deadline). */
static void drain(int *fds, FILE **outs, int n, uint64_t deadline)
{
        for (;;) {
                struct pollfd pfd[2];
                int open_fds = 0;
                uint64_t now = harness_now_ms();

                for (int i = 0; i < n; i++) {
                        pfd[i].fd = fds[i];
                        pfd[i].events = POLLIN;
                        if (fds[i] >= 0)
                                open_fds++;
                }
                if (!open_fds || now >= deadline)
                        return;
                if (poll(pfd, (nfds_t)n, (int)(deadline - now)) <= 0)
                        continue;
                for (int i = 0; i < n; i++) {
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
}

int harness_finish(harness_proc *p, char **ret_output, int timeout_ms)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
        char *text = NULL;
        size_t size = 0;
        FILE *out = open_memstream(&text, &size);
        int fds[1] = { p->out_fd };
        uint64_t now;

        assert_non_null(out);
        drain(fds, &out, 1, deadline);
        if (fds[0] >= 0)
                close(fds[0]);
        p->out_fd = -1;
        fclose(out);
        now = harness_now_ms();
        if (ret_output)
                *ret_output = text;
        else
                free(text);
        return harness_wait_proc(p, now < deadline ? (int)(deadline - now) : 1);
}

int harness_run(const harness *h, const char *socket_override,
                const char *const *argv, char **ret_out, char **ret_err,
                int timeout_ms)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
        char *texts[2] = { NULL, NULL };
        size_t sizes[2] = { 0, 0 };
        FILE *outs[2];
        int out_pipe[2], err_pipe[2], fds[2];
        harness_proc p = { .pid = -1, .out_fd = -1 };
        char *var;
        char **env;
        uint64_t now;
        int status;

        assert_int_equal(pipe2(out_pipe, O_CLOEXEC), 0);
        assert_int_equal(pipe2(err_pipe, O_CLOEXEC), 0);
        env = make_env(socket_override ? socket_override : h->socket_path,
                       &var);
        p.pid = spawn(argv, env, out_pipe[1], err_pipe[1]);
        free(env);
        free(var);
        close(out_pipe[1]);
        close(err_pipe[1]);

        outs[0] = open_memstream(&texts[0], &sizes[0]);
        outs[1] = open_memstream(&texts[1], &sizes[1]);
        fds[0] = out_pipe[0];
        fds[1] = err_pipe[0];
        drain(fds, outs, 2, deadline);
        for (int i = 0; i < 2; i++) {
                if (fds[i] >= 0)
                        close(fds[i]);
                fclose(outs[i]);
        }
        now = harness_now_ms();
        status = harness_wait_proc(&p, now < deadline ? (int)(deadline - now) : 1);
        for (int i = 0; i < 2; i++)
                if (sanitizer_report(texts[i]))
                        fail_msg("a sanitizer reported in %s's output:\n%s",
                                 argv[0], sanitizer_report(texts[i]));
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

/* GET /metrics on the Unix endpoint; the whole answer, head and body, to
 * `out`. */
static void scrape(const harness *h, FILE *out)
{
        static const char request[] = "GET /metrics HTTP/1.0\r\n\r\n";
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        int fds[1] = { socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0) };

        assert_true(fds[0] >= 0);
        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", h->metrics_path);
        if (connect(fds[0], (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
            write(fds[0], request, sizeof(request) - 1) !=
            (ssize_t)sizeof(request) - 1) {
                int e = errno;

                close(fds[0]);
                fail_msg("metrics at %s: %s", h->metrics_path, strerror(e));
        }
        drain(fds, &out, 1, harness_now_ms() + 5000);
        if (fds[0] >= 0)
                close(fds[0]);
}

double harness_metric(const harness *h, const char *series)
{
        size_t n = strlen(series), size = 0;
        char *answer = NULL;
        const char *body;
        FILE *out = open_memstream(&answer, &size);

        assert_non_null(out);
        scrape(h, out);
        fclose(out);
        body = strstr(answer, "\r\n\r\n");
        for (const char *line = body ? body + 4 : NULL; line && *line;
             line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
                if (strncmp(line, series, n) == 0 && line[n] == ' ') {
                        double value = strtod(line + n + 1, NULL);

                        free(answer);
                        return value;
                }
        }
        fail_msg("no sample '%s' in the scrape:\n%s", series, answer);
        return 0;
}

gmd_buffer *harness_released_buffer(gmd_client *client, uint64_t size,
                                    uint64_t seed)
{
        gmd_buffer *b = NULL;

        OK(gmd_alloc(client, size, 0, GMD_ALLOC_SWAPPABLE, GMD_NO_WAIT, &b));
        pattern_fill(b, seed);
        OK(gmd_release(client, b));
        return b;
}

void harness_page_out(gmd_client *client, gmd_buffer *buffer)
{
        OK(gmd_pageout(client, buffer));
        OK(gmd_wait(client, buffer, 5000));
        assert_int_equal(gmd_buffer_tier(buffer), GMD_TIER_HOST);
}

void harness_bring_back(gmd_client *client, gmd_buffer *buffer, uint64_t seed,
                        const char *when)
{
        OK(gmd_prefetch(client, buffer));
        OK(gmd_wait(client, buffer, 5000));
        assert_int_equal(gmd_buffer_tier(buffer), GMD_TIER_VRAM);
        OK(gmd_acquire(client, buffer, 0));
        pattern_check(buffer, seed, when);
}

void harness_expect_vram(const harness *h, gmd_client *client, uint64_t used,
                         uint64_t kept, const char *when)
{
        uint64_t deadline = harness_now_ms() + 2000;
        gmd_pool_status p;

        for (;;) {
                p = harness_vram_pool(client, 0);
                if (p.used == used && p.kept == kept)
                        return;
                if (harness_now_ms() >= deadline)
                        fail_msg("%s: VRAM used %llu MiB, kept %llu MiB; want %llu "
                                 "and %llu; log:\n%s", when,
                                 (unsigned long long)(p.used >> 20),
                                 (unsigned long long)(p.kept >> 20),
                                 (unsigned long long)(used >> 20),
                                 (unsigned long long)(kept >> 20),
                                 harness_read_log(h));
                harness_sleep_ms(5);
        }
}

gmd_client *harness_client(const harness *h, const char *name)
{
        gmd_client *client = NULL;
        int r = gmd_connect(h->socket_path, name, &client);

        if (r < 0)
                fail_msg("gmd_connect(%s): %d %s", h->socket_path, r,
                         gmd_last_error());
        return client;
}

gmd_status *harness_status(gmd_client *client)
{
        gmd_status *status = NULL;
        int r = gmd_query_status(client, GMD_STATUS_CLIENTS, 0, &status);

        if (r < 0)
                fail_msg("gmd_query_status: %d %s", r, gmd_last_error());
        return status;
}

gmd_pool_status harness_vram_pool(gmd_client *client, unsigned device)
{
        gmd_status *status = harness_status(client);
        gmd_pool_status pool = { 0 };
        int found = 0;

        for (size_t i = 0; i < status->n_pools; i++) {
                if (status->pools[i].device == device &&
                    status->pools[i].tier == GMD_TIER_VRAM) {
                        pool = status->pools[i];
                        found = 1;
                }
        }
        gmd_status_free(status);
        if (!found)
                fail_msg("status has no VRAM pool for device %u", device);
        return pool;
}

gmd_pool_status harness_host_pool(gmd_client *client)
{
        gmd_status *status = harness_status(client);
        gmd_pool_status pool = { 0 };
        int found = 0;

        for (size_t i = 0; i < status->n_pools; i++) {
                if (status->pools[i].tier == GMD_TIER_HOST) {
                        pool = status->pools[i];
                        found = 1;
                }
        }
        gmd_status_free(status);
        if (!found)
                fail_msg("status has no host pool");
        return pool;
}

gmd_buffer_status harness_buffer_status(gmd_client *client, uint64_t id)
{
        gmd_buffer_status row = { 0 };
        gmd_status *status = NULL;
        int r = gmd_query_status(client, GMD_STATUS_BUFFERS, 0, &status), found = 0;

        if (r < 0)
                fail_msg("gmd_query_status: %d %s", r, gmd_last_error());
        for (size_t i = 0; i < status->n_buffers; i++) {
                if (status->buffers[i].buffer_id == id) {
                        row = status->buffers[i];
                        found = 1;
                }
        }
        gmd_status_free(status);
        if (!found)
                fail_msg("buffer %llu is not in the status list",
                         (unsigned long long)id);
        return row;
}

uint64_t harness_vram_used(gmd_client *client, unsigned device)
{
        return harness_vram_pool(client, device).used;
}

uint64_t harness_wait_vram_used(gmd_client *client, unsigned device,
                                uint64_t want, int timeout_ms)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
        uint64_t used;

        while ((used = harness_vram_used(client, device)) != want &&
               harness_now_ms() < deadline)
                harness_sleep_ms(10);
        return used;
}

unsigned harness_wait_clients(gmd_client *client, unsigned want,
                              int timeout_ms)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;

        for (;;) {
                gmd_status *status = harness_status(client);
                unsigned n = status->total_clients;

                gmd_status_free(status);
                if (n == want || harness_now_ms() >= deadline)
                        return n;
                harness_sleep_ms(10);
        }
}

int harness_wait_fds(pid_t pid, int want, int timeout_ms)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
        int n;

        while ((n = harness_count_fds(pid)) != want &&
               harness_now_ms() < deadline)
                harness_sleep_ms(10);
        return n;
}

int harness_check_own_fds(int before)
{
        int now = harness_count_own_fds();

        if (now != before) {
                print_error("fd leak in the test process: %d fds, %d before\n",
                            now, before);
                return -1;
        }
        return 0;
}

int harness_setup(void **state)
{
        harness_fixture *f = calloc(1, sizeof(*f));

        if (!f)
                return -1;
        f->own_fds = harness_count_own_fds();
        *state = f;
        return 0;
}

int harness_teardown(void **state)
{
        harness_fixture *f = *state;
        int own_fds = f->own_fds;

        for (size_t i = 0; i < f->n_procs; i++) {
                harness_proc *p = &f->procs[i];

                if (p->pid > 0) {
                        kill(p->pid, SIGKILL);
                        waitpid(p->pid, NULL, 0);
                }
                if (p->out_fd >= 0)
                        close(p->out_fd);
        }
        gmd_disconnect(f->client);
        gmd_disconnect(f->other);
        harness_cleanup(&f->h);
        free(f);
        *state = NULL;
        return harness_check_own_fds(own_fds);
}

harness_proc *harness_track(harness_fixture *f)
{
        harness_proc *p;

        if (f->n_procs == HARNESS_PROCS)
                fail_msg("more than %d client processes in one test",
                         HARNESS_PROCS);
        p = &f->procs[f->n_procs++];
        *p = (harness_proc){ .pid = -1, .out_fd = -1 };
        return p;
}

harness_proc *harness_track_client(harness_fixture *f, const char *const *args)
{
        harness_proc *p = harness_track(f);

        *p = harness_spawn_client(&f->h, args);
        return p;
}

harness_proc *harness_track_ready(harness_fixture *f, const char *const *argv,
                                  const char *prefix, const char *what)
{
        harness_proc *p = harness_track(f);
        char *line;

        *p = harness_spawn(&f->h, NULL, argv);
        line = harness_read_line(p, prefix, 10000);
        if (!line)
                fail_msg("the client process did not %s; log:\n%s", what,
                         harness_read_log(&f->h));
        free(line);
        return p;
}

void harness_start_owner(harness_fixture *f, const char *extra_config)
{
        char config[256];

        snprintf(config, sizeof(config), "%s%s", HARNESS_SWAP_CONFIG,
                 extra_config ? extra_config : "");
        harness_start_small_metrics(&f->h, config);
        f->client = harness_client(&f->h, "owner");
}

int harness_exit_code(int status)
{
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int harness_open_program(const char *path)
{
        int fd = open(path, O_PATH | O_CLOEXEC);

        if (fd < 0)
                fail_msg("cannot open %s: %s", path, strerror(errno));
        return fd;
}

int harness_exec_program(int fd, const char *const *argv, char *const *envp)
{
        /* execveat(fd, "", ..., AT_EMPTY_PATH) underneath: no path walk. */
        return fexecve(fd, (char *const *)argv, envp);
}

static void *waiter_run(void *arg)
{
        harness_waiter *w = arg;

        w->r = gmd_alloc(w->client, w->size, 0, 0, w->timeout_ms, &w->buffer);
        if (w->r < 0)
                snprintf(w->error, sizeof(w->error), "%s", gmd_last_error());
        __atomic_store_n(&w->done, true, __ATOMIC_RELEASE);
        return NULL;
}

void harness_waiter_start(harness_waiter *w, gmd_client *client,
                          uint64_t size, int64_t timeout_ms)
{
        memset(w, 0, sizeof(*w));
        w->client = client;
        w->size = size;
        w->timeout_ms = timeout_ms;
        assert_int_equal(pthread_create(&w->thread, NULL, waiter_run, w), 0);
}

void harness_waiter_join(harness_waiter *w)
{
        assert_int_equal(pthread_join(w->thread, NULL), 0);
}

unsigned harness_waiting_of(gmd_client *observer, const char *name)
{
        gmd_status *st = harness_status(observer);
        unsigned n = 0;

        for (size_t i = 0; i < st->n_clients; i++)
                if (strcmp(st->clients[i].name, name) == 0)
                        n += st->clients[i].waiting;
        gmd_status_free(st);
        return n;
}

void harness_wait_waiting(const harness *h, gmd_client *observer,
                          const char *name, unsigned want)
{
        uint64_t deadline = harness_now_ms() + 20000;

        while (harness_waiting_of(observer, name) != want) {
                if (harness_now_ms() > deadline)
                        fail_msg("%s never had %u allocations waiting; log:\n%s",
                                 name, want, harness_read_log(h));
                harness_sleep_ms(10);
        }
}

void harness_kill(harness *h, int sig)
{
        kill(h->pid, sig);
        waitpid(h->pid, NULL, 0);
        h->pid = 0;
}

void harness_suspend(pid_t pid)
{
        int status;

        kill(pid, SIGSTOP);
        if (waitpid(pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status))
                fail_msg("process %d did not stop", (int)pid);
}
