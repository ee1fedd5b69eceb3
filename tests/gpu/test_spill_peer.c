/*
 * test_spill_peer — a SPILLABLE buffer resting in another GPU's VRAM, used
 * there by its owner's kernels at the same pointer, on two GPUs that reach
 * each other (NVLink or PCIe peer-to-peer).
 *
 * gpu-memd on the cuda backend with [pools] peer_tier = on, a 1 GiB VRAM
 * pool per GPU and 64 MiB of peer headroom. Every client is a worker
 * process (gpu_proc.h, GPU_MEMD_CACHE=0) and every byte is checked by a
 * kernel:
 *
 *  1. the owner, which sees both GPUs, allocates a 256 MiB SPILLABLE
 *     buffer on device 0, fills it with a kernel and releases it;
 *  2. a second client takes 896 MiB of device 0: the buffer is evicted to
 *     device 1's VRAM (status: device 1's peer_held, the pair 0 -> 1);
 *  3. the owner acquires it where it rests (tier HOST, "out of its GPU"),
 *     at the same pointer, checks the bytes with a kernel on device 0
 *     (reading device 1's VRAM), writes new ones and releases it;
 *  4. a third client takes all of device 1: the buffer moves on to host
 *     memory (device 1 holds none of it, the host pool does), its owner
 *     remapped again; the owner checks and rewrites it there;
 *  5. the two others gone, the owner acquires it back into device 0's
 *     VRAM and checks it once more;
 *  6. an owner started with CUDA_VISIBLE_DEVICES naming device 0 alone
 *     (as a batch system starts a job) does the same as in 1 and 2: its
 *     buffer goes to host memory, never to device 1, whose pool holds
 *     nothing of it at any sample, and its bytes are whole there; the
 *     daemon never logged a remap it had to take back.
 *
 * Skips (exit 77, one "SKIP:" line) without a GPU, with fewer than two,
 * or where GPU 0 and GPU 1 have no peer access to each other.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_driver.h"
#include "gpu_kernels.h"
#include "gpu_proc.h"
#include "gpumem.h"

#define MiB (1ull << 20)
#define SPILL_SIZE (256 * MiB)
#define FILL_SIZE (896 * MiB)  /* with the buffer, more than the pool */
#define WAIT_MS 60000

enum { W_ALLOC = 1, W_USE, W_FREE, W_QUIT };

typedef struct wcmd {
        int op;
        int ordinal;            /* W_ALLOC: this process's CUDA device */
        uint64_t size;          /* W_ALLOC */
        unsigned flags;         /* W_ALLOC: GMD_ALLOC_* */
        int release;            /* W_ALLOC: release it once filled */
        int64_t timeout_ms;     /* W_ALLOC, W_USE */
        uint32_t check;         /* W_USE: the pattern it must hold */
        uint32_t seed;          /* W_ALLOC, W_USE: the pattern to write,
                                 * 0: none */
} wcmd;

typedef struct wreply {
        int r;
        long long bad;          /* words that differed */
        int tier;               /* GMD_TIER_* when acquired */
        unsigned device;        /* the daemon's device of the buffer */
        uint64_t ptr;           /* where the buffer is mapped */
        char msg[256];
} wreply;

/* ---- worker: one client process ------------------------------------------ */

static int fail_msg(wreply *rep, int r, const char *what)
{
        rep->r = r < 0 ? r : -EIO;
        snprintf(rep->msg, sizeof(rep->msg), "%s: %s%s", what,
                 r < 0 ? gmd_last_error() : "", r < 0 ? "" : gpu_last_error());
        return rep->r;
}

/* Write `seed` over the buffer with a kernel and read it back. */
static void fill_checked(gmd_buffer *b, uint32_t seed, wreply *rep)
{
        long long bad;

        if (gpu_fill(gmd_buffer_ptr(b), gmd_buffer_size(b), 0, seed) < 0) {
                fail_msg(rep, 1, "fill");
                return;
        }
        bad = gpu_check(gmd_buffer_ptr(b), gmd_buffer_size(b), 0, seed);
        if (bad < 0)
                fail_msg(rep, 1, "check after fill");
        else
                rep->bad += bad;
}

static void do_alloc(gmd_client *c, gmd_buffer **ret, const wcmd *cmd,
                     wreply *rep)
{
        int r;

        r = gmd_device_from_cuda(c, cmd->ordinal, &rep->device);
        if (r < 0) {
                fail_msg(rep, r, "device");
                return;
        }
        if (gpu_set_device(cmd->ordinal) < 0) {
                fail_msg(rep, 1, "set device");
                return;
        }
        r = gmd_alloc(c, cmd->size, rep->device, cmd->flags, cmd->timeout_ms,
                      ret);
        if (r < 0) {
                fail_msg(rep, r, "alloc");
                return;
        }
        rep->ptr = (uint64_t)(uintptr_t)gmd_buffer_ptr(*ret);
        rep->tier = gmd_buffer_tier(*ret);
        if (cmd->seed)
                fill_checked(*ret, cmd->seed, rep);
        if (rep->r == 0 && cmd->release) {
                r = gmd_release(c, *ret);
                if (r < 0)
                        fail_msg(rep, r, "release");
        }
}

/* Acquire where it is (or back in VRAM, with a timeout), check `check`,
 * write `seed`, release. */
static void do_use(gmd_client *c, gmd_buffer *b, const wcmd *cmd,
                   wreply *rep)
{
        long long bad;
        int r;

        r = gmd_acquire(c, b, cmd->timeout_ms);
        if (r < 0) {
                fail_msg(rep, r, "acquire");
                return;
        }
        rep->tier = gmd_buffer_tier(b);
        rep->ptr = (uint64_t)(uintptr_t)gmd_buffer_ptr(b);
        bad = gpu_check(gmd_buffer_ptr(b), gmd_buffer_size(b), 0, cmd->check);
        if (bad < 0)
                fail_msg(rep, 1, "check");
        else
                rep->bad += bad;
        if (rep->r == 0 && cmd->seed)
                fill_checked(b, cmd->seed, rep);
        r = gmd_release(c, b);
        if (r < 0 && rep->r == 0)
                fail_msg(rep, r, "release");
}

static int worker(int sock)
{
        int fds[GPU_PROC_MAX_FDS];
        gmd_buffer *b = NULL;
        gmd_client *c;
        wcmd cmd;

        if (gmd_connect(NULL, "spill-peer-worker", &c) < 0) {
                fprintf(stderr, "worker: connect: %s\n", gmd_last_error());
                return 3;
        }
        while (gpu_proc_recv(sock, &cmd, sizeof(cmd), fds) == 0) {
                wreply rep = { 0 };

                switch (cmd.op) {
                case W_ALLOC:
                        do_alloc(c, &b, &cmd, &rep);
                        break;
                case W_USE:
                        if (b)
                                do_use(c, b, &cmd, &rep);
                        else
                                rep.r = -ENOENT;
                        break;
                case W_FREE:
                        if (b && gmd_free(c, b) < 0)
                                fail_msg(&rep, -EIO, "free");
                        b = NULL;
                        break;
                case W_QUIT:
                        gmd_disconnect(c);
                        return 0;
                }
                gpu_proc_send(sock, &rep, sizeof(rep), NULL, 0);
        }
        return 1;
}

/* ---- the test ------------------------------------------------------------ */

/* One command to a worker and its reply; a failure is counted. */
static wreply ask(gpu_proc *w, const wcmd *cmd, const char *what)
{
        int fds[GPU_PROC_MAX_FDS];
        wreply rep = { .r = -EIO };

        if (gpu_proc_send(w->sock, cmd, sizeof(*cmd), NULL, 0) < 0 ||
            gpu_proc_recv(w->sock, &rep, sizeof(rep), fds) < 0)
                snprintf(rep.msg, sizeof(rep.msg), "worker gone");
        CHECK(rep.r == 0, "%s: %s", what, rep.msg);
        CHECK(rep.bad == 0, "%s: %lld words differ", what, rep.bad);
        printf("%s: rc %d, %lld bad words, tier %s\n", what, rep.r, rep.bad,
               gmd_tier_name((gmd_tier)rep.tier));
        return rep;
}

static wreply alloc_on(gpu_proc *w, int ordinal, uint64_t size,
                       unsigned flags, int release, uint32_t seed,
                       const char *what)
{
        wcmd c = { .op = W_ALLOC, .ordinal = ordinal, .size = size,
                   .flags = flags, .release = release, .seed = seed,
                   .timeout_ms = WAIT_MS };

        return ask(w, &c, what);
}

static wreply use(gpu_proc *w, int64_t timeout_ms, uint32_t check,
                  uint32_t seed, const char *what)
{
        wcmd c = { .op = W_USE, .timeout_ms = timeout_ms, .check = check,
                   .seed = seed };

        return ask(w, &c, what);
}

static void quit(gpu_proc *w, const char *who)
{
        wcmd f = { .op = W_FREE }, q = { .op = W_QUIT };

        ask(w, &f, who);
        gpu_proc_send(w->sock, &q, sizeof(q), NULL, 0);
        CHECK(gpu_proc_wait(w) == 0, "%s exits", who);
}

/* Where device 0's buffers are: held in device 1's VRAM (its pool's
 * peer_held and the pair 0 -> 1), and the host pool's bytes; device 1's
 * pool capacity. */
typedef struct where {
        uint64_t on_1, pair, host, capacity_1;
} where;

static where where_now(gmd_client *me)
{
        where w = { UINT64_MAX, UINT64_MAX, UINT64_MAX, 0 };
        gmd_status *st = NULL;

        if (gmd_query_status(me, GMD_STATUS_POOLS, 0, &st) < 0)
                return w;
        w.pair = 0;
        for (size_t i = 0; i < st->n_pools; i++) {
                const gmd_pool_status *p = &st->pools[i];

                if (p->tier == GMD_TIER_HOST)
                        w.host = p->used;
                else if (p->device == 1) {
                        w.on_1 = p->peer_held;
                        w.capacity_1 = p->capacity;
                }
        }
        for (size_t i = 0; i < st->n_peers; i++)
                if (st->peers[i].home == 0 && st->peers[i].holder == 1)
                        w.pair = st->peers[i].held;
        gmd_status_free(st);
        return w;
}

/* Poll (30 s at most) until device 1 holds `on_1` bytes of device 0's
 * buffers and the host pool at least `host`; *ret_max_on_1 (if not NULL)
 * the most device 1 held at any sample. */
static where wait_where(gmd_client *me, uint64_t on_1, uint64_t host,
                        uint64_t *ret_max_on_1, const char *when)
{
        where w = { 0 };

        for (int i = 0; i < 3000; i++) {
                w = where_now(me);
                if (ret_max_on_1 && w.on_1 != UINT64_MAX &&
                    w.on_1 > *ret_max_on_1)
                        *ret_max_on_1 = w.on_1;
                if (w.on_1 == on_1 && w.pair == on_1 && w.host != UINT64_MAX &&
                    w.host >= host)
                        break;
                usleep(10000);
        }
        printf("%s: device 1 holds %llu MiB of device 0's buffers (pair "
               "%llu MiB), host pool %llu MiB\n", when,
               (unsigned long long)(w.on_1 / MiB),
               (unsigned long long)(w.pair / MiB),
               (unsigned long long)(w.host / MiB));
        CHECK(w.on_1 == on_1 && w.pair == on_1, "%s: device 1 holds %llu "
              "bytes of device 0's buffers, want %llu", when,
              (unsigned long long)w.on_1, (unsigned long long)on_1);
        CHECK(w.host != UINT64_MAX && w.host >= host, "%s: host pool %llu "
              "bytes, want at least %llu", when, (unsigned long long)w.host,
              (unsigned long long)host);
        return w;
}

/* Spawn a worker under CUDA_VISIBLE_DEVICES=`visible` (NULL: this
 * process's own setting). */
static int spawn_seeing(const char *name, const char *visible, gpu_proc *w)
{
        const char *outer = getenv("CUDA_VISIBLE_DEVICES");
        char *saved = outer ? strdup(outer) : NULL;
        int r;

        if (visible)
                setenv("CUDA_VISIBLE_DEVICES", visible, 1);
        r = gpu_proc_spawn(name, w);
        if (saved)
                setenv("CUDA_VISIBLE_DEVICES", saved, 1);
        else
                unsetenv("CUDA_VISIBLE_DEVICES");
        free(saved);
        CHECK(r == 0, "spawn %s: %s", name, strerror(-r));
        return r;
}

/* Steps 1 to 5: the owner sees both GPUs. */
static void owner_sees_both(gmd_client *me)
{
        gpu_proc owner, fill0, fill1;
        wreply a, u;
        where w;

        if (spawn_seeing("owner", NULL, &owner) < 0)
                return;
        a = alloc_on(&owner, 0, SPILL_SIZE, GMD_ALLOC_SPILLABLE, 1, 11,
                     "owner: 256 MiB SPILLABLE on device 0, filled");
        if (a.r < 0 || spawn_seeing("fill0", NULL, &fill0) < 0) {
                quit(&owner, "owner");
                return;
        }
        alloc_on(&fill0, 0, FILL_SIZE, GMD_ALLOC_SWAPPABLE, 0, 21,
                 "device 0 filled by another client");
        wait_where(me, SPILL_SIZE, 0, NULL, "device 0 full");

        u = use(&owner, 0, 11, 12, "owner: used on device 1's VRAM");
        CHECK(u.tier == GMD_TIER_HOST, "the buffer is out of its GPU");
        CHECK(u.ptr == a.ptr, "the same pointer: %llx, was %llx",
              (unsigned long long)u.ptr, (unsigned long long)a.ptr);

        w = where_now(me);
        if (spawn_seeing("fill1", NULL, &fill1) == 0) {
                alloc_on(&fill1, 1, w.capacity_1, GMD_ALLOC_SWAPPABLE, 0, 31,
                         "all of device 1 taken by its own client");
                wait_where(me, 0, SPILL_SIZE, NULL, "device 1 full");
                u = use(&owner, 0, 12, 13, "owner: used on host memory");
                CHECK(u.tier == GMD_TIER_HOST, "the buffer is out of its "
                      "GPU");
                CHECK(u.ptr == a.ptr, "the same pointer");
                quit(&fill1, "device 1's client");
        }
        quit(&fill0, "device 0's other client");
        u = use(&owner, WAIT_MS, 13, 0, "owner: back in device 0's VRAM");
        CHECK(u.tier == GMD_TIER_VRAM, "the buffer is back in VRAM");
        quit(&owner, "owner");
}

/* Step 6: the owner sees device 0 alone. */
static void owner_sees_one(gmd_client *me)
{
        const char *outer = getenv("CUDA_VISIBLE_DEVICES");
        char visible[GMD_UUID_SIZE] = "0";
        gpu_proc owner, fill0;
        uint64_t max_on_1 = 0;
        wreply a, u;

        /* Under a CUDA_VISIBLE_DEVICES of the machine's an index would
         * count from another list: the daemon's device 0 by UUID. */
        if (outer && gmd_device_uuid(me, 0, visible, sizeof(visible)) < 0) {
                CHECK(0, "device 0's UUID: %s", gmd_last_error());
                return;
        }
        printf("the second owner runs under CUDA_VISIBLE_DEVICES=%s\n",
               visible);
        if (spawn_seeing("owner-sees-0", visible, &owner) < 0)
                return;
        a = alloc_on(&owner, 0, SPILL_SIZE, GMD_ALLOC_SPILLABLE, 1, 41,
                     "owner seeing device 0 alone: 256 MiB SPILLABLE");
        if (a.r < 0 || spawn_seeing("fill0", NULL, &fill0) < 0) {
                quit(&owner, "owner seeing device 0 alone");
                return;
        }
        alloc_on(&fill0, 0, FILL_SIZE, GMD_ALLOC_SWAPPABLE, 0, 51,
                 "device 0 filled by another client");
        wait_where(me, 0, SPILL_SIZE, &max_on_1, "device 0 full");
        CHECK(max_on_1 == 0, "device 1 held %llu bytes of a buffer its "
              "owner cannot map", (unsigned long long)max_on_1);
        u = use(&owner, 0, 41, 42, "owner seeing device 0 alone: used on "
                "host memory");
        CHECK(u.tier == GMD_TIER_HOST, "the buffer is out of its GPU");
        CHECK(u.ptr == a.ptr, "the same pointer");
        quit(&fill0, "device 0's other client");
        quit(&owner, "owner seeing device 0 alone");
}

/* Lines of the daemon's log holding `needle`. */
static int log_count(const gpu_daemon *d, const char *needle)
{
        FILE *f = fopen(d->log_path, "r");
        char line[1024];
        int n = 0;

        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                n += strstr(line, needle) != NULL;
        fclose(f);
        return n;
}

int main(int argc, char **argv)
{
        static const char config_text[] =
                "[pools]\nvram_limit = 1G\nhost_limit = 4G\n"
                "peer_tier = on\npeer_headroom = 64M\n";
        char config[] = "/tmp/gmd-spill-peer-XXXXXX";
        const char *args[] = { "--config", config, "--log-level", "info",
                               NULL };
        const gmd_cuda_driver *cu;
        gmd_client *me = NULL;
        gpu_daemon d;
        int fd, r;

        cu = gpu_test_begin(argc, argv, worker);
        if (!cu)
                return GPU_TEST_SKIP;
        if (!gpu_need_peers(cu))
                return GPU_TEST_SKIP;
        gpu_say_device(cu, 0, "the owners' GPU, its pool 1 GiB");
        gpu_say_device(cu, 1, "the peer, its pool 1 GiB");

        fd = mkstemp(config);
        CHECK(fd >= 0, "config file: %s", strerror(errno));
        if (fd < 0)
                return 1;
        r = write(fd, config_text, sizeof(config_text) - 1) ==
            (ssize_t)(sizeof(config_text) - 1) ? 0 : -EIO;
        close(fd);
        setenv("GPU_MEMD_CACHE", "0", 1);   /* workers inherit it */
        if (r == 0)
                r = gpu_daemon_start(args, &d);
        unlink(config);
        CHECK(r == 0, "start gpu-memd: %s", strerror(-r));
        if (r < 0)
                return 1;
        r = gmd_connect(NULL, "spill-peer-test", &me);
        CHECK(r == 0, "connect: %s", gmd_last_error());
        if (r == 0) {
                CHECK(log_count(&d, "peer tier: device 0 reaches device 1")
                      > 0, "the daemon uses device 1 as device 0's peer");
                owner_sees_both(me);
                owner_sees_one(me);
                CHECK(log_count(&d, "could not map buffer") == 0,
                      "no remap had to be taken back");
        }
        gmd_disconnect(me);
        CHECK(gpu_daemon_stop(&d, gpu_failures ? stdout : NULL) == 0,
              "gpu-memd stops cleanly");
        printf("%s: %d failure(s)\n", gpu_failures ? "FAIL" : "PASS",
               gpu_failures);
        return gpu_failures ? 1 : 0;
}
