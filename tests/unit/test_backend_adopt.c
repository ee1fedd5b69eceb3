/*
 * test_backend_adopt — the sim backend's restart recovery ops (backend.h,
 * "restart recovery"): a forked child plays the daemon that dies. It makes
 * VRAM buffers, host copies in its arena (in several parts) and a whole
 * host allocation, writes known bytes, hands its arena pieces, the host
 * copies' spans and the allocations' fds to the parent over a socketpair
 * (SCM_RIGHTS, as to the keeper) and exits without cleaning anything up.
 * The parent plays the new daemon: a fresh backend adopts the pieces,
 * makes the host copies again from their parts and the allocations from
 * their fds, copies every byte back out and compares; the arena's free
 * bytes are what is built less the adopted copies; mem_destroy and
 * mem_zero work on what was adopted; the arena builds and grows on after
 * the adopted pieces, and arena_pieces names them again. Also the errors
 * (pieces overlapping, leaving a gap, past the range, a memfd too small,
 * adopting after a host copy was taken; parts taken twice, overlapping,
 * unbuilt, not adding up; an fd too small), each leaving the fd to the
 * caller, and mem_identity across a dup and an SCM_RIGHTS pass. Every
 * test checks it leaves no fd open.
 */
#include <errno.h>
#include <dirent.h>
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
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "backend.h"
#include "config.h"

#define MIB (UINT64_C(1) << 20)
/* The arena: 32 MiB in 4 pieces of 8 MiB, in a range of 64 MiB. */
#define STOCK (32 * MIB)
#define LIMIT (64 * MIB)
#define MAX_FDS 16

static int count_open_fds(void)
{
        DIR *dir = opendir("/proc/self/fd");
        struct dirent *entry;
        int n = 0;

        assert_non_null(dir);
        while ((entry = readdir(dir)))
                if (entry->d_name[0] != '.')
                        n++;
        closedir(dir);
        return n;
}

static void sim_config(gmd_config *config)
{
        config_init_defaults(config);
        snprintf(config->backend, sizeof(config->backend), "sim");
        config->sim_devices = 1;
        config->sim_vram = 256 * MIB;
        config->sim_granularity = 2 * MIB;
        config->host_limit = (gmd_size_spec){ .bytes = LIMIT };
        config->host_stock = (gmd_size_spec){ .bytes = STOCK };
}

static gmd_backend *sim_open(void)
{
        gmd_config config;
        gmd_backend *be = NULL;

        sim_config(&config);
        assert_int_equal(backend_sim_open(&config, &be), 0);
        return be;
}

/* The word at `i` of a buffer written with `seed`. */
static uint32_t pattern(uint32_t seed, uint64_t i)
{
        return seed * 2654435761u ^ (uint32_t)i * 40503u;
}

/* Write (check) `seed`'s pattern over the first `size` bytes of `fd`:
 * how many words differ. */
static uint64_t fd_pattern(int fd, uint64_t size, uint32_t seed, bool write)
{
        uint32_t *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        uint64_t bad = 0;

        if (p == MAP_FAILED)
                return UINT64_MAX;
        for (uint64_t i = 0; i < size / 4; i++) {
                if (write)
                        p[i] = pattern(seed, i);
                else if (p[i] != (seed ? pattern(seed, i) : 0))
                        bad++;
        }
        munmap(p, size);
        return bad;
}

static void copy_done(void *ctx, void *cookie, int status)
{
        (void)cookie;
        *(int *)ctx = status == 0 ? 1 : -1;
}

/* Copy `len` bytes from src to dst and wait: 0 or the error. */
static int copy_wait(gmd_backend *be, gmd_copy_dir dir, gmd_mem *dst,
                     gmd_mem *src, uint64_t len)
{
        int done = 0, r;

        r = be->ops->copy_submit(be, 0, dir, dst, 0, src, 0, len, NULL);
        if (r < 0)
                return r;
        while (!done) {
                usleep(1000);
                be->ops->copy_reap(be, copy_done, &done);
        }
        return done == 1 ? 0 : -EIO;
}

/* A whole host allocation, as the core makes one for a host copy the
 * arena has no room for (mem_create_filled where the backend has it). */
static int host_create(gmd_backend *be, uint64_t size, gmd_mem **ret)
{
        if (be->ops->mem_create_filled)
                return be->ops->mem_create_filled(be, GMD_TIER_HOST, 0, size, ret);
        return be->ops->mem_create(be, GMD_TIER_HOST, 0, size, ret);
}

/* Make a VRAM buffer holding seed's pattern (written through its fd, as a
 * client would). */
static gmd_mem *vram_with(gmd_backend *be, uint64_t size, uint32_t seed)
{
        gmd_mem *m = NULL;

        if (be->ops->mem_create(be, GMD_TIER_VRAM, 0, size, &m) < 0 ||
            fd_pattern(m->fd, size, seed, true) != 0)
                return NULL;
        return m;
}

/* Whether `mem` (any kind) holds seed's pattern: copied into a new VRAM
 * buffer (or, for VRAM, out to a new host allocation) and read there. */
static uint64_t mem_check(gmd_backend *be, gmd_mem *mem, uint32_t seed)
{
        bool vram = mem->tier == GMD_TIER_VRAM;
        gmd_mem *to = NULL;
        uint64_t bad;

        if ((vram ? host_create(be, mem->size, &to)
                  : be->ops->mem_create(be, GMD_TIER_VRAM, 0, mem->size, &to)) < 0)
                return UINT64_MAX;
        if (copy_wait(be, vram ? GMD_COPY_OUT : GMD_COPY_IN, to, mem, mem->size) < 0)
                bad = UINT64_MAX;
        else
                bad = fd_pattern(to->fd, to->size, seed, false);
        be->ops->mem_destroy(be, to);
        return bad;
}

/* ---- the old daemon (a child process) ------------------------------------ */

/* What the old daemon hands on, besides fds: [0, n_pieces) are its arena
 * pieces, then the VRAM buffer's fd, then the host allocation's. */
typedef struct handover {
        int status;                     /* 0: all went well, else the step */
        unsigned n_pieces;
        gmd_arena_piece pieces[4];      /* fds in the message's rights */
        uint64_t copy_size[2];          /* the two host copies */
        unsigned n_parts[2];
        gmd_extent parts[2][GMD_ARENA_MAX_PARTS];
        int span_of_vram;               /* mem_span of a VRAM buffer */
        uint64_t vram_size, host_size;
        uint64_t vram_dev, vram_ino;    /* mem_identity of its own fds */
        uint64_t host_dev, host_ino;
} handover;

#define SEED_COPY0 3
#define SEED_COPY1 2
#define SEED_VRAM 5
#define SEED_HOST 4

static int send_fds(int sock, const void *buf, size_t len, const int *fds,
                    unsigned n)
{
        char control[CMSG_SPACE(sizeof(int) * MAX_FDS)];
        struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
        struct cmsghdr *cmsg;

        memset(control, 0, sizeof(control));
        if (n) {
                msg.msg_control = control;
                msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
                cmsg = CMSG_FIRSTHDR(&msg);
                cmsg->cmsg_level = SOL_SOCKET;
                cmsg->cmsg_type = SCM_RIGHTS;
                cmsg->cmsg_len = CMSG_LEN(sizeof(int) * n);
                memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * n);
        }
        return sendmsg(sock, &msg, 0) == (ssize_t)len ? 0 : -1;
}

/* Receive one message of `len` bytes and its fds: how many fds, or -1. */
static int recv_fds(int sock, void *buf, size_t len, int *fds)
{
        char control[CMSG_SPACE(sizeof(int) * MAX_FDS)];
        struct iovec iov = { .iov_base = buf, .iov_len = len };
        struct msghdr msg = {
                .msg_iov = &iov, .msg_iovlen = 1,
                .msg_control = control, .msg_controllen = sizeof(control),
        };
        struct cmsghdr *cmsg;
        int n = 0;

        if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != (ssize_t)len ||
            (msg.msg_flags & MSG_CTRUNC))
                return -1;
        for (cmsg = CMSG_FIRSTHDR(&msg); cmsg; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
                if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS)
                        continue;
                n = (int)((cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                memcpy(fds, CMSG_DATA(cmsg), sizeof(int) * (size_t)n);
        }
        return n;
}

/* The old daemon: never returns, never cleans up (it dies). */
static void old_daemon(int sock)
{
        handover h = { 0 };
        gmd_backend *be = sim_open();
        gmd_mem *src[2], *copy[2], *vram, *host = NULL;
        static const uint64_t sizes[2] = { 20 * MIB, 4 * MIB };
        static const uint32_t seeds[2] = { SEED_COPY0, SEED_COPY1 };
        int fds[MAX_FDS], n_fds = 0, r;

        /* Two host copies in the arena; 20 MiB spans pieces of 8 MiB. */
        for (unsigned i = 0; i < 2 && !h.status; i++) {
                src[i] = vram_with(be, sizes[i], seeds[i]);
                if (!src[i] ||
                    be->ops->mem_create_private(be, 0, sizes[i], &copy[i]) < 0 ||
                    copy_wait(be, GMD_COPY_OUT, copy[i], src[i], sizes[i]) < 0) {
                        h.status = 1;
                        break;
                }
                r = be->ops->mem_span(be, copy[i], h.parts[i], GMD_ARENA_MAX_PARTS);
                if (r <= 0)
                        h.status = 2;
                h.n_parts[i] = r > 0 ? (unsigned)r : 0;
                h.copy_size[i] = sizes[i];
                /* The VRAM it came from is freed, as after a swap-out. */
                be->ops->mem_destroy(be, src[i]);
        }
        vram = vram_with(be, 6 * MIB, SEED_VRAM);
        if (!vram ||
            host_create(be, 8 * MIB, &host) < 0 ||
            fd_pattern(host->fd, host->size, SEED_HOST, true) != 0)
                h.status = 3;
        if (!h.status) {
                gmd_extent scratch[1];

                h.span_of_vram = be->ops->mem_span(be, vram, scratch, 1);
                h.vram_size = vram->size;
                h.host_size = host->size;
                (void)mem_identity(vram->fd, &h.vram_dev, &h.vram_ino);
                (void)mem_identity(host->fd, &h.host_dev, &h.host_ino);
                r = be->ops->arena_pieces(be, 0, h.pieces, 4);
                if (r <= 0)
                        h.status = 4;
                h.n_pieces = r > 0 ? (unsigned)r : 0;
        }
        for (unsigned i = 0; i < h.n_pieces; i++)
                fds[n_fds++] = h.pieces[i].fd;
        if (!h.status) {
                /* The daemon's own fds: SCM_RIGHTS passes duplicates. */
                fds[n_fds++] = vram->fd;
                fds[n_fds++] = host->fd;
        }
        (void)send_fds(sock, &h, sizeof(h), fds, (unsigned)n_fds);
        _exit(0);
}

/* ---- the new daemon ---------------------------------------------------------- */

static void test_restart(void **state)
{
        int fds_at_start = count_open_fds(), sv[2], fds[MAX_FDS], n_fds, st;
        gmd_backend *be;
        gmd_arena_info info;
        gmd_device_info dev;
        gmd_arena_piece again[4];
        gmd_extent bad[2];
        gmd_mem *copy[2], *vram, *host, *m;
        uint64_t dev_id, ino, piece_dev, piece_ino, adopted = 0;
        handover h;
        pid_t pid;
        int vram_fd, host_fd;

        (void)state;
        assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                close(sv[0]);
                old_daemon(sv[1]);
        }
        close(sv[1]);
        n_fds = recv_fds(sv[0], &h, sizeof(h), fds);
        close(sv[0]);
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        assert_int_equal(h.status, 0);
        assert_int_equal(h.span_of_vram, -ENOENT);
        /* The sim arena is one memfd: one piece, all that was built. */
        assert_int_equal(h.n_pieces, 1);
        assert_int_equal(h.pieces[0].offset, 0);
        assert_int_equal(h.pieces[0].size, STOCK);
        assert_int_equal(n_fds, (int)h.n_pieces + 2);
        assert_true(h.n_parts[0] >= 2);   /* 20 MiB in pieces of 8 */
        assert_int_equal(h.n_parts[1], 1);
        for (unsigned i = 0; i < h.n_pieces; i++)
                h.pieces[i].fd = fds[i];
        vram_fd = fds[h.n_pieces];
        host_fd = fds[h.n_pieces + 1];

        /* The fds that came through SCM_RIGHTS are the daemon's files. */
        assert_int_equal(mem_identity(vram_fd, &dev_id, &ino), 0);
        assert_true(dev_id == h.vram_dev && ino == h.vram_ino);
        assert_int_equal(mem_identity(host_fd, &dev_id, &ino), 0);
        assert_true(dev_id == h.host_dev && ino == h.host_ino);

        assert_int_equal(mem_identity(h.pieces[0].fd, &piece_dev, &piece_ino), 0);

        be = sim_open();
        /* The arena is built at open; nothing is taken from it yet. */
        assert_int_equal(be->ops->arena_adopt(be, 0, h.pieces, h.n_pieces), 0);
        be->ops->arena_info(be, 0, &info);
        assert_int_equal(info.built, STOCK);
        assert_int_equal(info.free, STOCK);
        assert_int_equal(info.target, STOCK);

        /* Each host copy again from its parts; then its parts are taken. */
        for (unsigned i = 0; i < 2; i++) {
                assert_int_equal(be->ops->mem_adopt_private(be, 0, h.copy_size[i],
                                                            h.parts[i], h.n_parts[i],
                                                            &copy[i]), 0);
                assert_true(copy[i]->daemon_only && copy[i]->fd == -1);
                assert_int_equal(copy[i]->size, h.copy_size[i]);
                adopted += h.copy_size[i];
        }
        assert_int_equal(be->ops->mem_adopt_private(be, 0, h.copy_size[1],
                                                    h.parts[1], h.n_parts[1], &m),
                         -EINVAL);                        /* taken twice */
        bad[0] = (gmd_extent){ STOCK - 2 * MIB, 2 * MIB };
        bad[1] = (gmd_extent){ STOCK - 2 * MIB, 2 * MIB };
        assert_int_equal(be->ops->mem_adopt_private(be, 0, 4 * MIB, bad, 2, &m),
                         -EINVAL);                        /* overlapping */
        bad[0] = (gmd_extent){ STOCK, 2 * MIB };
        assert_int_equal(be->ops->mem_adopt_private(be, 0, 2 * MIB, bad, 1, &m),
                         -EINVAL);                        /* unbuilt */
        bad[0] = (gmd_extent){ STOCK - 2 * MIB, 2 * MIB };
        assert_int_equal(be->ops->mem_adopt_private(be, 0, 4 * MIB, bad, 1, &m),
                         -EINVAL);                        /* not its size */
        be->ops->arena_info(be, 0, &info);
        assert_int_equal(info.free, info.built - adopted);

        /* The whole allocations, from their fds: too small refused, the
         * fd left to the caller. */
        assert_int_equal(be->ops->mem_adopt_fd(be, GMD_TIER_VRAM, 0,
                                               h.vram_size + 2 * MIB, vram_fd, &m),
                         -EINVAL);
        assert_true(fcntl(vram_fd, F_GETFD) >= 0);
        assert_int_equal(be->ops->mem_adopt_fd(be, GMD_TIER_VRAM, 0, h.vram_size,
                                               vram_fd, &vram), 0);
        assert_true(vram->shared && vram->fd == vram_fd && !vram->daemon_only);
        assert_int_equal(be->ops->device_info(be, 0, &dev), 0);
        assert_int_equal(dev.own, h.vram_size);
        assert_int_equal(be->ops->mem_adopt_fd(be, GMD_TIER_HOST, 0, h.host_size,
                                               host_fd, &host), 0);
        assert_int_equal(be->ops->mem_span(be, vram, bad, 2), -ENOENT);

        /* Every byte as the old daemon wrote it, both ways. */
        assert_int_equal(mem_check(be, copy[0], SEED_COPY0), 0);
        assert_int_equal(mem_check(be, copy[1], SEED_COPY1), 0);
        assert_int_equal(mem_check(be, vram, SEED_VRAM), 0);
        assert_int_equal(mem_check(be, host, SEED_HOST), 0);
        /* A copy into what was adopted, read back through its fd. */
        m = vram_with(be, h.host_size, 9);
        assert_non_null(m);
        assert_int_equal(copy_wait(be, GMD_COPY_OUT, host, m, h.host_size), 0);
        assert_int_equal(fd_pattern(host->fd, h.host_size, 9, false), 0);
        be->ops->mem_destroy(be, m);
        assert_int_equal(be->ops->mem_zero(be, vram), 0);
        assert_int_equal(fd_pattern(vram->fd, vram->size, 0, false), 0);

        /* Given back as created ones are. */
        be->ops->mem_destroy(be, copy[0]);
        be->ops->mem_destroy(be, copy[1]);
        be->ops->mem_destroy(be, vram);
        be->ops->mem_destroy(be, host);
        assert_int_equal(be->ops->device_info(be, 0, &dev), 0);
        assert_int_equal(dev.own, 0);
        be->ops->arena_info(be, 0, &info);
        assert_int_equal(info.free, info.built);

        /* The arena grows after the adopted piece; both are handed on,
         * the adopted one as the same file. */
        assert_int_equal(be->ops->arena_grow(be, 0, 8 * MIB, LIMIT), 8 * MIB);
        assert_int_equal(be->ops->mem_create_private(be, 0, 8 * MIB, &m), 0);
        assert_int_equal(be->ops->arena_pieces(be, 0, again, 1), -ENOBUFS);
        assert_int_equal(be->ops->arena_pieces(be, 0, again, 4), 2);
        assert_int_equal(again[0].offset, 0);
        assert_int_equal(again[0].size, STOCK);
        assert_int_equal(again[1].offset, STOCK);
        assert_int_equal(again[1].size, 8 * MIB);
        assert_int_equal(mem_identity(again[0].fd, &dev_id, &ino), 0);
        assert_true(dev_id == piece_dev && ino == piece_ino);
        close(again[0].fd);
        close(again[1].fd);
        be->ops->mem_destroy(be, m);
        backend_close(be);
        assert_int_equal(count_open_fds(), fds_at_start);
}

/* ---- errors of arena_adopt ---------------------------------------------------- */

static int memfd_of(uint64_t size)
{
        int fd = memfd_create("test-piece", MFD_CLOEXEC);

        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, (off_t)size), 0);
        return fd;
}

static void test_adopt_refused(void **state)
{
        int fds_at_start = count_open_fds();
        int a = memfd_of(16 * MIB), b = memfd_of(16 * MIB), small = memfd_of(4 * MIB);
        gmd_backend *be = sim_open();
        gmd_arena_piece p[2];
        gmd_arena_info info;
        gmd_mem *m;

        (void)state;
        /* Overlapping. */
        p[0] = (gmd_arena_piece){ 0, 16 * MIB, a };
        p[1] = (gmd_arena_piece){ 8 * MIB, 16 * MIB, b };
        assert_int_equal(be->ops->arena_adopt(be, 0, p, 2), -EINVAL);
        /* Out of order. */
        p[0] = (gmd_arena_piece){ 16 * MIB, 16 * MIB, a };
        p[1] = (gmd_arena_piece){ 0, 16 * MIB, b };
        assert_int_equal(be->ops->arena_adopt(be, 0, p, 2), -EINVAL);
        /* A gap, and not from 0. */
        p[0] = (gmd_arena_piece){ 0, 8 * MIB, a };
        p[1] = (gmd_arena_piece){ 16 * MIB, 8 * MIB, b };
        assert_int_equal(be->ops->arena_adopt(be, 0, p, 2), -EINVAL);
        p[0] = (gmd_arena_piece){ 2 * MIB, 8 * MIB, a };
        assert_int_equal(be->ops->arena_adopt(be, 0, p, 1), -EINVAL);
        /* Past the range, off the unit, empty. */
        p[0] = (gmd_arena_piece){ 0, LIMIT + 2 * MIB, a };
        assert_int_equal(be->ops->arena_adopt(be, 0, p, 1), -EINVAL);
        p[0] = (gmd_arena_piece){ 0, 3 * MIB, a };
        assert_int_equal(be->ops->arena_adopt(be, 0, p, 1), -EINVAL);
        p[0] = (gmd_arena_piece){ 0, 0, a };
        assert_int_equal(be->ops->arena_adopt(be, 0, p, 1), -EINVAL);
        /* A memfd smaller than its piece. */
        p[0] = (gmd_arena_piece){ 0, 8 * MIB, small };
        assert_int_equal(be->ops->arena_adopt(be, 0, p, 1), -EINVAL);
        /* Every fd still the caller's. */
        assert_true(fcntl(a, F_GETFD) >= 0 && fcntl(b, F_GETFD) >= 0 &&
                    fcntl(small, F_GETFD) >= 0);

        /* The arena is as it was, and works. */
        be->ops->arena_info(be, 0, &info);
        assert_int_equal(info.built, STOCK);
        assert_int_equal(info.free, STOCK);
        assert_int_equal(be->ops->mem_create_private(be, 0, 4 * MIB, &m), 0);
        /* Too late once a host copy is out. */
        p[0] = (gmd_arena_piece){ 0, 16 * MIB, a };
        assert_int_equal(be->ops->arena_adopt(be, 0, p, 1), -EBUSY);
        be->ops->mem_destroy(be, m);
        /* A fd too small for a whole allocation. */
        assert_int_equal(be->ops->mem_adopt_fd(be, GMD_TIER_VRAM, 0, 8 * MIB,
                                               small, &m), -EINVAL);
        backend_close(be);
        close(a);
        close(b);
        close(small);
        assert_int_equal(count_open_fds(), fds_at_start);
}

/* Adopted pieces larger than [pools] host_stock: the arena is their size,
 * nothing more is built, and a growth comes after them. */
static void test_adopt_larger(void **state)
{
        int fds_at_start = count_open_fds();
        int a = memfd_of(24 * MIB), b = memfd_of(24 * MIB);
        gmd_backend *be = sim_open();
        gmd_arena_piece p[2] = {
                { 0, 24 * MIB, a }, { 24 * MIB, 24 * MIB, b },
        };
        gmd_arena_piece out[4];
        gmd_arena_info info;
        gmd_extent parts[2] = { { 22 * MIB, 2 * MIB }, { 24 * MIB, 2 * MIB } };
        gmd_mem *m, *span2;

        (void)state;
        assert_int_equal(be->ops->arena_adopt(be, 0, p, 2), 0);
        be->ops->arena_info(be, 0, &info);
        assert_int_equal(info.built, 48 * MIB);
        assert_int_equal(info.target, 48 * MIB);
        assert_int_equal(info.largest, 24 * MIB);   /* pieces never merge */
        /* A part may not cross from one piece to the next... */
        {
                gmd_extent across = { 22 * MIB, 4 * MIB };

                assert_int_equal(be->ops->mem_adopt_private(be, 0, 4 * MIB,
                                                            &across, 1, &m),
                                 -EINVAL);
        }
        /* ...two parts, one in each, may. */
        assert_int_equal(be->ops->mem_adopt_private(be, 0, 4 * MIB, parts, 2,
                                                    &span2), 0);
        {
                gmd_extent got[2];

                assert_int_equal(be->ops->mem_span(be, span2, got, 1), -ENOBUFS);
                assert_int_equal(be->ops->mem_span(be, span2, got, 2), 2);
                assert_memory_equal(got, parts, sizeof(parts));
        }
        assert_int_equal(be->ops->arena_adopt(be, 0, p, 2), -EBUSY);
        assert_int_equal(be->ops->arena_pieces(be, 0, out, 4), 2);
        assert_int_equal(out[1].offset, 24 * MIB);
        close(out[0].fd);
        close(out[1].fd);
        be->ops->mem_destroy(be, span2);
        assert_int_equal(be->ops->arena_grow(be, 0, 8 * MIB, LIMIT), 8 * MIB);
        assert_int_equal(be->ops->arena_pieces(be, 0, out, 4), 3);
        assert_int_equal(out[2].offset, 48 * MIB);
        assert_int_equal(out[2].size, 8 * MIB);
        for (unsigned i = 0; i < 3; i++)
                close(out[i].fd);
        backend_close(be);
        assert_int_equal(count_open_fds(), fds_at_start);
}

/* ---- identity ---------------------------------------------------------------- */

static void test_identity(void **state)
{
        int fds_at_start = count_open_fds(), sv[2], passed = -1, copy;
        gmd_backend *be = sim_open();
        uint64_t d0, i0, d1, i1;
        gmd_mem *x, *y;
        char byte = 1;

        (void)state;
        assert_int_equal(be->ops->mem_create(be, GMD_TIER_VRAM, 0, 2 * MIB, &x), 0);
        assert_int_equal(be->ops->mem_create(be, GMD_TIER_VRAM, 0, 2 * MIB, &y), 0);
        assert_int_equal(mem_identity(x->fd, &d0, &i0), 0);
        /* A dup is the same file... */
        copy = fcntl(x->fd, F_DUPFD_CLOEXEC, 0);
        assert_int_equal(mem_identity(copy, &d1, &i1), 0);
        assert_true(d0 == d1 && i0 == i1);
        close(copy);
        /* ...and so is what SCM_RIGHTS hands a client. */
        assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
        assert_int_equal(send_fds(sv[0], &byte, 1, &x->fd, 1), 0);
        assert_int_equal(recv_fds(sv[1], &byte, 1, &passed), 1);
        assert_true(passed >= 0 && passed != x->fd);
        assert_int_equal(mem_identity(passed, &d1, &i1), 0);
        assert_true(d0 == d1 && i0 == i1);
        /* Another buffer is another file. */
        assert_int_equal(mem_identity(y->fd, &d1, &i1), 0);
        assert_false(d0 == d1 && i0 == i1);
        assert_int_equal(mem_identity(-1, &d1, &i1), -EBADF);
        close(passed);
        close(sv[0]);
        close(sv[1]);
        be->ops->mem_destroy(be, x);
        be->ops->mem_destroy(be, y);
        backend_close(be);
        assert_int_equal(count_open_fds(), fds_at_start);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_restart),
                cmocka_unit_test(test_adopt_refused),
                cmocka_unit_test(test_adopt_larger),
                cmocka_unit_test(test_identity),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
