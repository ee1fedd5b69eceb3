/*
 * keptfd — see keptfd.h. The loop thread owns the witnesses; a look is one
 * job on libuv's thread pool holding a copy of what it needs (the fds,
 * uids and owners, in fdholder_items), so the loop may add witnesses
 * while it runs; a witness in the job is closed only when the job is
 * back (its fd is the worker's to compare with until then). One job at a
 * time: frees that come meanwhile wait for the next, which batches them.
 */
#include "keptfd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "fdholder.h"
#include "log.h"
#include "outside.h"
#include "server.h"
#include "session.h"
#include "size.h"
#include "timeutil.h"

typedef struct keptfd_job {
        uv_work_t work;
        gmd_server *server;
        unsigned n;
        gmd_witness **w;
        fdholder_item *items;   /* items[i] looks for w[i]'s file */
        int result;
} keptfd_job;

_Static_assert(sizeof(void *) >= 8, "an owner is packed in a pointer");

/* uid and pid in one map value; bit 31 keeps it from being NULL. */
static void *owner_pack(uid_t uid, pid_t pid)
{
        return (void *)(uintptr_t)(((uint64_t)uid << 32) | (1ull << 31) |
                                   ((uint32_t)pid & 0x7fffffffu));
}

static void owner_unpack(const void *v, uid_t *ret_uid, pid_t *ret_pid)
{
        uint64_t x = (uint64_t)(uintptr_t)v;

        *ret_uid = (uid_t)(x >> 32);
        *ret_pid = (pid_t)(x & 0x7fffffffu);
}

static const char *witness_what(const gmd_witness *w, char *buf, size_t len)
{
        char size[32];

        size_format(w->size, size, sizeof(size));
        if (w->tier == GMD_TIER_VRAM)
                snprintf(buf, len, "%s of device %u VRAM", size, w->device);
        else
                snprintf(buf, len, "%s of pinned host memory", size);
        return buf;
}

/* Close and forget `w`; `why` (may be NULL) ends its charge in the log.
 * Returns whether a charge ended. */
static bool witness_close(gmd_keptfd *k, gmd_witness *w, const char *why)
{
        bool charged = w->state == KEPTFD_CHARGED;
        char what[64];

        if (charged && why)
                log_info("kept fds: uid %u: %s held through the fd of a freed "
                         "buffer (last in pid %d) is no longer charged: %s",
                         (unsigned)w->uid, witness_what(w, what, sizeof(what)),
                         (int)w->holder, why);
        if (charged)
                kepttally_charge(&k->tally, w->uid, w->tier, w->device,
                                 w->size, false);
        kepttally_drop(&k->tally, w->uid, w->state != KEPTFD_NEW);
        list_remove(&w->link);
        k->n--;
        if (w->fd >= 0)
                close(w->fd);
        free(w);
        return charged;
}

/* `w` was found in process `pid`. Returns whether a charge changed. */
static bool witness_seen(gmd_server *server, gmd_witness *w, pid_t pid,
                         uint64_t now)
{
        gmd_keptfd *k = &server->keptfd;
        pid_t was = w->holder;
        char what[64];

        w->holder = pid;
        switch (w->state) {
        case KEPTFD_NEW:
                w->state = KEPTFD_SEEN;
                kepttally_found(&k->tally, w->uid);
                w->due_ms = now + KEPTFD_CONFIRM_MS;
                return false;
        case KEPTFD_SEEN:
                w->state = KEPTFD_CHARGED;
                w->due_ms = now + KEPTFD_RECHECK_MS;
                kepttally_charge(&k->tally, w->uid, w->tier, w->device,
                                 w->size, true);
                log_info("kept fds: uid %u: pid %d keeps an fd of a freed "
                         "buffer (sent to pid %d), so %s stays allocated "
                         "outside gpu-memd: %s as memory held outside "
                         "([limits] outside_vram = %s)", (unsigned)w->uid,
                         (int)pid, (int)w->owner,
                         witness_what(w, what, sizeof(what)),
                         outside_charges(&server->config) ? "charged to its "
                         "user" : "shown, not charged",
                         server->config.outside_vram);
                return true;
        case KEPTFD_CHARGED:
                w->due_ms = now + KEPTFD_RECHECK_MS;
                return was != pid;
        }
        return false;
}

static void on_timer(uv_timer_t *timer);

/* Run the next look at `due_ms` unless one is armed sooner or running. */
static void arm(gmd_server *server, uint64_t due_ms)
{
        gmd_keptfd *k = &server->keptfd;
        uint64_t now = now_ms(), at = due_ms;

        if (k->job || k->stopping || k->off || !k->started)
                return;
        if (at < k->last_start_ms + KEPTFD_MIN_GAP_MS)
                at = k->last_start_ms + KEPTFD_MIN_GAP_MS;
        if (k->timer_due_ms && k->timer_due_ms <= at)
                return;
        k->timer_due_ms = at;
        uv_timer_start(&k->timer, on_timer, at > now ? at - now : 0, 0);
}

static void arm_next(gmd_server *server)
{
        uint64_t next = UINT64_MAX;
        gmd_list *pos;

        list_for_each(pos, &server->keptfd.witnesses) {
                gmd_witness *w = container_of(pos, gmd_witness, link);

                if (!w->scanning && w->due_ms < next)
                        next = w->due_ms;
        }
        if (next != UINT64_MAX)
                arm(server, next);
}

/* Each charged witness's bytes onto the oldest live session of the
 * process found holding it (session kept_outside), for status. */
static void attribute(gmd_server *server)
{
        gmd_keptfd *k = &server->keptfd;
        gmd_idmap by_pid;
        gmd_list *pos;

        idmap_init(&by_pid);
        list_for_each(pos, &server->sessions.all) {
                gmd_session *s = container_of(pos, gmd_session, link);
                uint64_t key = (uint64_t)(uint32_t)s->pid + 1;

                s->kept_outside = 0;
                /* The oldest live session of the process carries it. */
                if (s->pid > 0 && !s->closing && !s->close_pending &&
                    !idmap_get(&by_pid, key))
                        (void)idmap_put(&by_pid, key, s);
        }
        if (k->started)
                list_for_each(pos, &k->witnesses) {
                        gmd_witness *w = container_of(pos, gmd_witness, link);
                        gmd_session *s;

                        if (w->state != KEPTFD_CHARGED)
                                continue;
                        s = idmap_get(&by_pid, (uint64_t)(uint32_t)w->holder + 1);
                        if (s)
                                s->kept_outside += w->size;
                }
        idmap_clear(&by_pid);
}

/* The charges changed: where they lie, then what they cost (outside.h). */
static void charges_changed(gmd_server *server)
{
        attribute(server);
        outside_kept_refresh(server);
}

static void job_run(uv_work_t *work)
{
        keptfd_job *job = container_of(work, keptfd_job, work);

        job->result = fdholder_find(job->items, job->n, KEPTFD_SCAN_BUDGET_US);
        /* What nobody holds is closed here, not on the loop thread: a
         * session of 10,000 buffers closing had them closed in one go
         * there (a 20 ms stall). The loop decides the same way (job_done)
         * and only forgets them. */
        for (unsigned i = 0; i < job->n && job->result == 0; i++) {
                fdholder_item *it = &job->items[i];

                if (!it->found && (it->status == 0 || it->status == -EPERM)) {
                        close(it->fd);
                        it->fd = -1;
                }
        }
}

static void job_done(uv_work_t *work, int status)
{
        keptfd_job *job = container_of(work, keptfd_job, work);
        gmd_server *server = job->server;
        gmd_keptfd *k = &server->keptfd;
        uint64_t now = now_ms();
        bool changed = false;

        k->job = NULL;
        if (job->result == -ENOSYS && !k->off) {
                k->off = true;
                log_warning("kept fds: the kernel has no kcmp(2) (ENOSYS): "
                            "VRAM clients keep through fds of freed buffers "
                            "is not charged, only shown as unaccounted");
        }
        for (unsigned i = 0; i < job->n; i++) {
                gmd_witness *w = job->w[i];
                const fdholder_item *it = &job->items[i];

                w->scanning = false;
                if (it->fd < 0)         /* closed by the job: nobody's */
                        w->fd = -1;
                if (k->stopping || k->off || status < 0 ||
                    job->result < 0)
                        changed |= witness_close(k, w, "gpu-memd stopped "
                                                 "looking");
                else if (it->found)
                        changed |= witness_seen(server, w, it->found, now);
                else if (it->status == -ETIMEDOUT)
                        w->due_ms = now + (w->state == KEPTFD_CHARGED ?
                                           KEPTFD_RECHECK_MS : KEPTFD_CONFIRM_MS);
                else if (it->status == -EPERM) {
                        if (!k->warned_perm)
                                log_warning("kept fds: gpu-memd (uid %u) may "
                                            "not look into a process of uid %u "
                                            "(kcmp and /proc/<pid>/fd need "
                                            "ptrace-read permission: run it "
                                            "as root): fds of freed buffers "
                                            "kept there are not charged, only "
                                            "shown as unaccounted",
                                            (unsigned)geteuid(),
                                            (unsigned)w->uid);
                        k->warned_perm = true;
                        changed |= witness_close(k, w, "its processes cannot "
                                                 "be looked into");
                } else
                        changed |= witness_close(k, w, "no process of the uid "
                                                 "holds it any more: freed");
        }
        free(job->items);
        free(job->w);
        free(job);
        if (changed || k->tally.n_charged)
                charges_changed(server);
        arm_next(server);
}

/* Look for the witnesses due by now (and those due within the gap). */
static void on_timer(uv_timer_t *timer)
{
        gmd_server *server = timer->data;
        gmd_keptfd *k = &server->keptfd;
        uint64_t now = now_ms();
        keptfd_job *job;
        gmd_list *pos;
        unsigned n = 0;

        k->timer_due_ms = 0;
        if (k->job || k->stopping || k->off)
                return;
        list_for_each(pos, &k->witnesses) {
                gmd_witness *w = container_of(pos, gmd_witness, link);

                n += w->due_ms <= now + KEPTFD_MIN_GAP_MS;
        }
        job = n ? calloc(1, sizeof(*job)) : NULL;
        if (job) {
                job->items = calloc(n, sizeof(*job->items));
                job->w = calloc(n, sizeof(*job->w));
        }
        if (!job || !job->items || !job->w) {
                if (job) {
                        free(job->items);
                        free(job->w);
                        free(job);
                }
                if (n)  /* no memory now: later */
                        arm(server, now + KEPTFD_CONFIRM_MS);
                return;
        }
        job->server = server;
        list_for_each(pos, &k->witnesses) {
                gmd_witness *w = container_of(pos, gmd_witness, link);

                if (w->due_ms > now + KEPTFD_MIN_GAP_MS || job->n == n)
                        continue;
                w->scanning = true;
                job->w[job->n] = w;
                job->items[job->n++] = (fdholder_item){
                        .fd = w->fd, .uid = w->uid,
                        .hint = w->holder ? w->holder : w->owner };
        }
        k->job = job;
        k->last_start_ms = now;
        if (uv_queue_work(server->loop, &job->work, job_run, job_done) < 0) {
                job->result = -EAGAIN;
                job_done(&job->work, -EAGAIN);
        }
}

int keptfd_start(gmd_server *server)
{
        gmd_keptfd *k = &server->keptfd;
        int r;

        list_init(&k->witnesses);
        r = uv_timer_init(server->loop, &k->timer);
        if (r < 0)
                return r;
        k->timer.data = server;
        k->started = true;
        return 0;
}

void keptfd_stop(gmd_server *server)
{
        gmd_keptfd *k = &server->keptfd;
        gmd_list *pos, *tmp;
        bool charged = k->tally.n_charged > 0;

        if (!k->started || k->stopping)
                return;
        k->stopping = true;
        uv_close((uv_handle_t *)&k->timer, NULL);
        list_for_each_safe(pos, tmp, &k->witnesses) {
                gmd_witness *w = container_of(pos, gmd_witness, link);

                if (!w->scanning)
                        witness_close(k, w, NULL);
        }
        if (charged)
                charges_changed(server);
}

void keptfd_free(gmd_keptfd *k)
{
        gmd_list *pos, *tmp;

        if (k->started && !k->job)
                list_for_each_safe(pos, tmp, &k->witnesses)
                        witness_close(k, container_of(pos, gmd_witness, link),
                                      NULL);
        idmap_clear(&k->sent);
        kepttally_free(&k->tally);
}

void keptfd_sent(gmd_server *server, gmd_mem *mem, const gmd_session *s)
{
        gmd_keptfd *k = &server->keptfd;
        uint64_t key = (uint64_t)(uintptr_t)mem;

        if (!mem || mem->fd < 0 || !k->started)
                return;
        idmap_remove(&k->sent, key);
        /* No room to remember it: its kept fds go unseen, as before. */
        (void)idmap_put(&k->sent, key, owner_pack(s->uid, s->pid));
}

void keptfd_forget(gmd_server *server, gmd_mem *mem)
{
        if (mem)
                idmap_remove(&server->keptfd.sent, (uint64_t)(uintptr_t)mem);
}

uint64_t keptfd_give_back(gmd_server *server, unsigned device)
{
        gmd_keptfd *k = &server->keptfd;
        gmd_list *pos, *tmp;
        uint64_t bytes = 0;
        unsigned n = 0;

        if (!k->started)
                return 0;
        list_for_each_safe(pos, tmp, &k->witnesses) {
                gmd_witness *w = container_of(pos, gmd_witness, link);

                /* One in the job is the job's to close (in a few ms). */
                if (w->state == KEPTFD_CHARGED || w->tier != GMD_TIER_VRAM ||
                    w->device != device || w->scanning)
                        continue;
                bytes += w->size;
                n++;
                witness_close(k, w, NULL);
        }
        if (n)
                log_info("kept fds: device %u needs the room now: %u freed "
                         "buffers (%llu bytes) not yet found held are not "
                         "looked for any more (their memory goes unless a "
                         "process still holds it, then uncharged)", device, n,
                         (unsigned long long)bytes);
        return bytes;
}

void keptfd_freeing(gmd_server *server, gmd_mem *mem)
{
        gmd_keptfd *k = &server->keptfd;
        unsigned count;
        void *owner;
        gmd_witness *w;
        uid_t uid;
        pid_t pid;
        int fd;

        if (!mem)
                return;
        owner = idmap_get(&k->sent, (uint64_t)(uintptr_t)mem);
        if (!owner || mem->fd < 0 || !mem->shared || !k->started ||
            k->stopping || k->off)
                return;
        owner_unpack(owner, &uid, &pid);
        count = kepttally_count(&k->tally, uid);
        if (count >= kepttally_bound(&server->config)) {
                if (!k->warned_bound)
                        log_warning("kept fds: uid %u has %u freed buffers "
                                    "looked for in its processes, the most "
                                    "[limits] max_buffers_per_user allows: "
                                    "more are not looked for (its further "
                                    "allocations are refused meanwhile)",
                                    (unsigned)uid, count);
                k->warned_bound = true;
                return;
        }
        w = calloc(1, sizeof(*w));
        fd = w ? fcntl(mem->fd, F_DUPFD_CLOEXEC, 3) : -1;
        if (fd < 0) {
                if (!k->warned_fds)
                        log_warning("kept fds: no fd to keep a freed buffer's "
                                    "witness (%s): fds clients keep of freed "
                                    "buffers go unseen until there is",
                                    w ? strerror(errno) : "no memory");
                k->warned_fds = true;
                free(w);
                return;
        }
        /* No room to count it: its kept fds go unseen, as before. */
        if (kepttally_add(&k->tally, uid) < 0) {
                close(fd);
                free(w);
                return;
        }
        *w = (gmd_witness){ .fd = fd, .uid = uid, .owner = pid,
                            .device = mem->device, .tier = mem->tier,
                            .size = mem->size, .state = KEPTFD_NEW,
                            .due_ms = now_ms() };
        list_add_tail(&k->witnesses, &w->link);
        k->n++;
        arm(server, w->due_ms);
}
