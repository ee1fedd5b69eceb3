/*
 * gpu_proc — see gpu_proc.h.
 */
#include "gpu_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

int gpu_proc_spawn(const char *name, gpu_proc *ret_proc)
{
        char fd_arg[16], exe[4096];
        char *argv[4];
        ssize_t n;
        int sv[2], r;
        pid_t pid;

        n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n < 0)
                return -errno;
        exe[n] = 0;
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        /* The worker's end must survive exec. */
        fcntl(sv[1], F_SETFD, 0);
        snprintf(fd_arg, sizeof(fd_arg), "%d", sv[1]);
        argv[0] = (char *)name;
        argv[1] = (char *)"worker";
        argv[2] = fd_arg;
        argv[3] = NULL;
        r = posix_spawn(&pid, exe, NULL, NULL, argv, environ);
        close(sv[1]);
        if (r != 0) {
                close(sv[0]);
                return -r;
        }
        ret_proc->pid = pid;
        ret_proc->sock = sv[0];
        return 0;
}

int gpu_proc_worker_sock(int argc, char **argv)
{
        if (argc == 3 && strcmp(argv[1], "worker") == 0)
                return atoi(argv[2]);
        return -1;
}

int gpu_proc_send(int sock, const void *msg, size_t len, const int *fds,
                  unsigned n_fds)
{
        char control[CMSG_SPACE(sizeof(int) * GPU_PROC_MAX_FDS)];
        struct iovec iov = { (void *)msg, len };
        struct msghdr mh = { 0 };

        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        if (n_fds > 0) {
                struct cmsghdr *c;

                memset(control, 0, sizeof(control));
                mh.msg_control = control;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
                c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
        }
        return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -EIO;
}

int gpu_proc_recv(int sock, void *msg, size_t len, int *fds)
{
        char control[CMSG_SPACE(sizeof(int) * GPU_PROC_MAX_FDS)];
        int unwanted[GPU_PROC_MAX_FDS];
        bool close_them = !fds;
        struct iovec iov = { msg, len };
        struct msghdr mh = { 0 };
        struct cmsghdr *c;
        ssize_t n;
        unsigned i;

        if (close_them)
                fds = unwanted;
        for (i = 0; i < GPU_PROC_MAX_FDS; i++)
                fds[i] = -1;
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = control;
        mh.msg_controllen = sizeof(control);
        do
                n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        if (n == 0)
                return -EPIPE;
        if (n < 0)
                return -errno;
        for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
                        memcpy(fds, CMSG_DATA(c),
                               c->cmsg_len - CMSG_LEN(0));
        }
        for (i = 0; close_them && i < GPU_PROC_MAX_FDS; i++)
                if (fds[i] >= 0)
                        close(fds[i]);
        return n == (ssize_t)len ? 0 : -EPROTO;
}

int gpu_proc_wait(gpu_proc *proc)
{
        int status;

        if (proc->sock >= 0)
                close(proc->sock);
        proc->sock = -1;
        if (waitpid(proc->pid, &status, 0) < 0)
                return -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

double gpu_now_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int daemon_path(char *buf, size_t len)
{
        const char *env = getenv("GMD_DAEMON");
        char exe[4000];
        ssize_t n;

        if (env) {
                snprintf(buf, len, "%s", env);
                return 0;
        }
        n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n < 0)
                return -errno;
        exe[n] = 0;
        *strrchr(exe, '/') = 0;
        snprintf(buf, len, "%s/../../daemon/gpu-memd", exe);
        return 0;
}

static int daemon_accepts(const char *path)
{
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        int fd, ok;

        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return 0;
        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
        ok = connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0;
        close(fd);
        return ok;
}

int gpu_daemon_start(const char *const *extra, gpu_daemon *ret_daemon)
{
        gpu_daemon *d = ret_daemon;
        char exe[4096];
        const char *argv[32];
        posix_spawn_file_actions_t fa;
        int argc = 0, r, status;

        memset(d, 0, sizeof(*d));
        r = daemon_path(exe, sizeof(exe));
        if (r < 0)
                return r;
        snprintf(d->dir, sizeof(d->dir), "/tmp/gmd-gpu-XXXXXX");
        if (!mkdtemp(d->dir))
                return -errno;
        snprintf(d->socket_path, sizeof(d->socket_path), "%s/sock", d->dir);
        snprintf(d->log_path, sizeof(d->log_path), "%s/log", d->dir);
        argv[argc++] = exe;
        argv[argc++] = "--backend";
        argv[argc++] = "cuda";
        argv[argc++] = "--socket";
        argv[argc++] = d->socket_path;
        while (extra && *extra && argc < 30)
                argv[argc++] = *extra++;
        argv[argc] = NULL;

        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, d->log_path,
                                         O_WRONLY | O_CREAT | O_APPEND, 0600);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        /* Not this process's CUDA device fds, sockets or workers' ends. */
        posix_spawn_file_actions_addclosefrom_np(&fa, 3);
        r = posix_spawn(&d->pid, exe, &fa, NULL, (char **)argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (r != 0)
                return -r;
        /* It listens once every GPU is open: longer on more of them. */
        for (int i = 0; i < 3000; i++) {
                if (daemon_accepts(d->socket_path)) {
                        setenv("GPU_MEMD_SOCKET", d->socket_path, 1);
                        return 0;
                }
                if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
                        d->pid = 0;
                        gpu_daemon_stop(d, stdout);
                        return -ECHILD;
                }
                usleep(10000);
        }
        gpu_daemon_stop(d, stdout);
        return -ETIMEDOUT;
}

int gpu_daemon_stop(gpu_daemon *d, FILE *log_out)
{
        char line[512];
        int status = -1;
        FILE *f;

        if (d->pid > 0) {
                kill(d->pid, SIGTERM);
                if (waitpid(d->pid, &status, 0) == d->pid)
                        status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
                d->pid = 0;
        }
        f = log_out ? fopen(d->log_path, "r") : NULL;
        if (f) {
                fprintf(log_out, "---- gpu-memd log (%s)\n", d->socket_path);
                while (fgets(line, sizeof(line), f))
                        fprintf(log_out, "  | %s", line);
                fclose(f);
        }
        unlink(d->log_path);
        unlink(d->socket_path);
        rmdir(d->dir);
        return status;
}

int gpu_failures;

const gmd_cuda_driver *gpu_usable(void)
{
        const gmd_cuda_driver *cu;
        const char *reason;

        if (cuda_driver_load(&cu, &reason) < 0) {
                printf("SKIP: no usable GPU (%s)\n", reason);
                return NULL;
        }
        if (cuda_driver_device_count(cu) <= 0) {
                printf("SKIP: no usable GPU (no CUDA device visible)\n");
                return NULL;
        }
        return cu;
}

void gpu_say_device(const gmd_cuda_driver *cu, int ordinal, const char *what)
{
        char name[128] = "?", bus[32] = "?";
        CUdevice dev;

        if (cu->cuDeviceGet(&dev, ordinal) == CUDA_SUCCESS) {
                cu->cuDeviceGetName(name, sizeof(name), dev);
                cu->cuDeviceGetPCIBusId(bus, sizeof(bus), dev);
        }
        printf("device: CUDA device %d of %d (%s, PCI %s): %s\n", ordinal,
               cuda_driver_device_count(cu), name, bus, what);
}

int gpu_need_peers(const gmd_cuda_driver *cu)
{
        int n = cuda_driver_device_count(cu), a = 0, b = 0;
        CUdevice d0, d1;

        if (n < 2) {
                printf("SKIP: needs 2 GPUs, this process sees %d\n", n);
                return 0;
        }
        if (cu->cuDeviceGet(&d0, 0) != CUDA_SUCCESS ||
            cu->cuDeviceGet(&d1, 1) != CUDA_SUCCESS ||
            cu->cuDeviceCanAccessPeer(&a, d0, d1) != CUDA_SUCCESS ||
            cu->cuDeviceCanAccessPeer(&b, d1, d0) != CUDA_SUCCESS || !a || !b) {
                printf("SKIP: GPUs 0 and 1 have no peer access to each "
                       "other (cuDeviceCanAccessPeer)\n");
                return 0;
        }
        return 1;
}

const gmd_cuda_driver *gpu_test_begin(int argc, char **argv,
                                      int (*worker)(int sock))
{
        int sock = gpu_proc_worker_sock(argc, argv);

        setvbuf(stdout, NULL, _IOLBF, 0);
        if (sock >= 0)
                exit(worker(sock));
        return gpu_usable();
}
