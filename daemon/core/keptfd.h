/*
 * keptfd — memory a process still reaches through a kept fd of a freed
 * buffer (ARCHITECTURE.md decision 8).
 *
 * The daemon keeps one fd per allocation and sends its owner duplicates,
 * which share the daemon's open file; an export keeps its memory alive
 * while any fd of it is open. So when the backing of a buffer freed (by
 * its owner, or with its session) had its fd sent to the client, the
 * daemon keeps a duplicate of that fd — a witness: the backend releases
 * its own handle and mapping as always — and a worker
 * thread looks for that open file among the fds of the owner's process
 * and the other processes of its uid (base/fdholder.h: kcmp). Nobody
 * holds it: the witness is closed and the memory is gone. Someone does,
 * on two looks at least KEPTFD_CONFIRM_MS apart (a client's library closes
 * its own copy just after the free's answer, or after its socket when it
 * disconnects): the witness stays, {uid, pid, device, tier, size} is
 * charged like memory held outside (outside.h: the user's vram_quota and
 * the pool), and it is looked for again every KEPTFD_RECHECK_MS, until no
 * process of that uid holds it any more (closed, or the processes ended).
 * The log says why each charge starts and ends.
 *
 * NVML (outside.c's figure on cuda) counts memory held only through a
 * kept fd to no process (measured: H100, H200, driver 580), so the two
 * charges add up without counting anything twice.
 *
 * The cost: a dup per destroyed backing that went to a client, and per
 * look one walk of /proc and of the fd folders of the uid's processes on
 * a worker thread (at most KEPTFD_SCAN_BUDGET_US; one at a time, at most
 * one start per KEPTFD_MIN_GAP_MS), with one kcmp binary search per fd on
 * the device of a witness. The loop thread copies the witnesses into the
 * job and applies its answer, nothing more. Witnesses of a uid are
 * bounded by max_buffers_per_user and count as its buffers (admission.h,
 * kepttally.h: the figures per uid):
 * past that, further allocations of the user are refused rather than
 * the daemon holding unbounded fds. A witness holds its memory until the
 * first look (a few ms): an allocation that finds the GPU short meanwhile
 * has the witnesses not yet found held closed (keptfd_give_back), so a
 * free followed by an allocation on a full GPU still fits. Where kcmp is
 * not there (ENOSYS) or a
 * process cannot be looked into (EPERM: the daemon not root, the client
 * of another uid), the log says so once and the memory stays uncharged
 * (shown as unaccounted, vram.h), as before this; a free never fails.
 */
#ifndef GMD_KEPTFD_H
#define GMD_KEPTFD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "gpumem.h"
#include "idmap.h"
#include "kepttally.h"
#include "list.h"

typedef struct gmd_server gmd_server;
typedef struct gmd_session gmd_session;
typedef struct gmd_mem gmd_mem;

#define KEPTFD_CONFIRM_MS 300
#define KEPTFD_RECHECK_MS 5000
#define KEPTFD_MIN_GAP_MS 10
#define KEPTFD_SCAN_BUDGET_US 200000

typedef enum keptfd_state {
        KEPTFD_NEW,       /* not looked for yet */
        KEPTFD_SEEN,      /* found once: looked for again to confirm */
        KEPTFD_CHARGED,   /* found twice or more: charged */
} keptfd_state;

/* One kept fd of a destroyed backing. */
typedef struct gmd_witness {
        gmd_list link;
        int fd;                 /* our duplicate of the backing's fd */
        uid_t uid;              /* the owner's */
        pid_t owner;            /* the process its fd was sent to */
        pid_t holder;           /* where it was found last; 0: not yet */
        unsigned device;
        gmd_tier tier;
        uint64_t size;
        keptfd_state state;
        uint64_t due_ms;        /* when to look again */
        bool scanning;          /* in the job in flight: closed after it */
} gmd_witness;

typedef struct gmd_keptfd {
        gmd_idmap sent;         /* gmd_mem address -> its owner (packed) */
        gmd_list witnesses;
        unsigned n;
        gmd_kepttally tally;    /* per uid and device (kepttally.h) */
        uv_timer_t timer;
        uint64_t timer_due_ms;  /* 0: not armed */
        struct keptfd_job *job;   /* the look in flight, or NULL */
        uint64_t last_start_ms;
        bool started;           /* keptfd_start ran: witnesses are made */
        bool stopping;
        bool off;               /* no kcmp: today's behaviour */
        bool warned_perm, warned_fds, warned_bound;
} gmd_keptfd;

/* Start making witnesses (the loop runs: server_listen). 0 or -errno. */
int keptfd_start(gmd_server *server);

/* Stop: close the witnesses (those a look holds, when it is back) and
 * the timer; the charges go. */
void keptfd_stop(gmd_server *server);

/* Free what is left (server_free). */
void keptfd_free(gmd_keptfd *kept);

/* `mem`'s fd was sent to session `s` (it is mem->shared now). */
void keptfd_sent(gmd_server *server, gmd_mem *mem, const gmd_session *s);

/* `mem`, a freed buffer's backing, is about to be released (buffer_free,
 * for a free or a session's close): keep a witness of its fd when it went
 * to a client. Never fails the free. Other backings destroyed (a move's
 * old side, VRAM kept for swap-ins) are not looked for: libgpumem closes
 * its copy before it acks the remap, and a look per move would cost a
 * /proc walk per swap. */
void keptfd_freeing(gmd_server *server, gmd_mem *mem);

/* `mem` is destroyed (backing_destroy): forget where its fd went. */
void keptfd_forget(gmd_server *server, gmd_mem *mem);

/* An allocation on `device` finds the GPU short (vram.c): give up the
 * witnesses there not found held yet (not charged) — closing them frees
 * at once what only they hold — and return their bytes. Those buffers'
 * fds go unlooked for, as without this. */
uint64_t keptfd_give_back(gmd_server *server, unsigned device);

#endif
