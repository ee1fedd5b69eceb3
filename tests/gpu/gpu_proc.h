/*
 * gpu_proc — helper processes for the GPU tests. CUDA cannot be used in a
 * child forked after the parent initialized it, so a test re-executes its
 * own binary (/proc/self/exe) as a "worker" that owns its own context and
 * talks with the parent over a SOCK_SEQPACKET socketpair: fixed-size
 * commands with fds attached (SCM_RIGHTS), fixed-size replies.
 */
#ifndef GMD_GPU_PROC_H
#define GMD_GPU_PROC_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "cuda_driver.h"

#define GPU_PROC_MAX_FDS 8
#define GPU_TEST_SKIP 77   /* ctest's SKIP_RETURN_CODE */

typedef struct gpu_proc {
        pid_t pid;
        int sock;
} gpu_proc;

/* Start `argv0 worker <fd>`; the worker finds its socket with
 * gpu_proc_worker_sock(). 0 or -errno. */
int gpu_proc_spawn(const char *name, gpu_proc *ret_proc);

/* In a worker: the socket from argv, or -1 if argv is not a worker's. */
int gpu_proc_worker_sock(int argc, char **argv);

/* One packet: `len` bytes of `msg` and up to GPU_PROC_MAX_FDS fds (kept by
 * the caller). */
int gpu_proc_send(int sock, const void *msg, size_t len, const int *fds,
                  unsigned n_fds);

/* Receive one packet of exactly `len` bytes; received fds into `fds`
 * (-1 where none; NULL: the caller wants none, and any that came are
 * closed). 0, or -errno (-EPIPE at end of stream). */
int gpu_proc_recv(int sock, void *msg, size_t len, int *fds);

/* Close the socket and wait for the worker; its exit status or -1. */
int gpu_proc_wait(gpu_proc *proc);

/* Microseconds on the monotonic clock. */
double gpu_now_us(void);

/* ---- a gpu-memd for one test ------------------------------------------- */

typedef struct gpu_daemon {
        pid_t pid;
        char dir[64];
        char socket_path[96];
        char log_path[96];
} gpu_daemon;

/*
 * Start gpu-memd --backend cuda on a socket in a fresh temporary folder,
 * with `extra` options (NULL-terminated, may be NULL), and wait until it
 * accepts (30 s at most). The binary is $GMD_DAEMON, else
 * ../../daemon/gpu-memd from this program's folder. Sets $GPU_MEMD_SOCKET
 * so workers spawned afterwards connect to it. 0 or -errno.
 */
int gpu_daemon_start(const char *const *extra, gpu_daemon *ret_daemon);

/* SIGTERM, wait, copy the daemon's log to `log_out` (NULL: drop it),
 * remove the folder. The daemon's exit status (0 after a clean stop) or -1. */
int gpu_daemon_stop(gpu_daemon *daemon, FILE *log_out);

/*
 * The whole of a test that is one client of one gpu-memd, for its main():
 * "SKIP" and GPU_TEST_SKIP where no GPU is usable; the line of
 * gpu_say_device for device 0, the one `run` is to use; $GPU_MEMD_CACHE=0 (no
 * cache of idle mappings, also in workers spawned later); gpu-memd started
 * with no extra options; `run` with a client connected as `name`, then
 * disconnected; the daemon stopped (its log on stdout when anything
 * failed) and the "PASS"/"FAIL" line. Returns main's exit status:
 * GPU_TEST_SKIP, 1 when gpu-memd did not start or any CHECK failed, else 0.
 * Defined in gpu_client.c (target gmd_gpu_client, which links libgpumem),
 * so that the programs without a daemon need no libgpumem.
 */
struct gmd_client;
int gpu_client_test(const char *name, void (*run)(struct gmd_client *c));

/*
 * The driver, loaded at run time, when at least one device is visible.
 * Otherwise NULL after printing the one line "SKIP: no usable GPU (why)";
 * the caller then exits GPU_TEST_SKIP (ctest shows the test skipped).
 */
const gmd_cuda_driver *gpu_usable(void);

/*
 * The start of a GPU test's main(): stdout line-buffered (a log cut off
 * mid-run ends at a whole line); in a worker process (argv says so,
 * gpu_proc_spawn) exit with `worker`'s status; else the driver
 * (gpu_usable), or NULL after its "SKIP" line: main then returns
 * GPU_TEST_SKIP.
 */
const gmd_cuda_driver *gpu_test_begin(int argc, char **argv,
                                      int (*worker)(int sock));

/*
 * For a test about one device, on a machine of one GPU or several: one
 * line saying which GPU it is ("device: CUDA device 0 of 4 (NAME, PCI
 * BUS-ID): `what`"), so that a log says what was tested. `ordinal` is
 * this process's CUDA ordinal; the daemon a test starts sees the GPUs in
 * the same order (same environment), so it is the daemon's device of that
 * number too.
 */
void gpu_say_device(const gmd_cuda_driver *cu, int ordinal, const char *what);

/*
 * For a test about two GPUs that reach each other: 1 when this process
 * sees two or more GPUs and its devices 0 and 1 have peer access both
 * ways (cuDeviceCanAccessPeer); else 0 after printing the one line
 * "SKIP: ..." saying which is missing (the caller exits GPU_TEST_SKIP).
 */
int gpu_need_peers(const gmd_cuda_driver *cu);

/* Failures counted by CHECK; a program exits non-zero when any. */
extern int gpu_failures;

#define CHECK(cond, ...) do {                                           \
        if (!(cond)) {                                                  \
                gpu_failures++;                                         \
                printf("FAIL %s:%d: ", __FILE__, __LINE__);             \
                printf(__VA_ARGS__);                                    \
                printf("\n");                                           \
        }                                                               \
} while (0)

#endif
