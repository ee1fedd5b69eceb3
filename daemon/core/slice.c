/*
 * slice — see slice.h.
 */
#include "slice.h"

#include <string.h>

void slices_init(gmd_slices *t, uint64_t length_ms)
{
        memset(t, 0, sizeof(*t));
        t->length_ms = length_ms;
}

/* `now` on the clock of slice `s`: its pauses left out (at most
 * SLICE_PAUSE_LENGTHS lengths of them). Never goes back. */
static uint64_t slice_clock(const gmd_slices *t, const gmd_slice *s,
                            uint64_t now)
{
        uint64_t paused = s->paused_ms;
        uint64_t cap = SLICE_PAUSE_LENGTHS * t->length_ms;

        if (s->paused_since_ms && now > s->paused_since_ms)
                paused += now - s->paused_since_ms;
        if (paused > cap)
                paused = cap;
        return now > paused ? now - paused : 0;
}

pid_t slice_holder(const gmd_slices *t, unsigned device, uint64_t now,
                   uint64_t *ret_left_ms)
{
        const gmd_slice *s;
        uint64_t age, length;

        if (device >= GMD_MAX_DEVICES || !t->length_ms)
                return 0;
        s = &t->on[device];
        if (s->pid <= 0)
                return 0;
        /* Both times are on the slice's clock: since_ms was given with no
         * pause yet, served_ms is stored so (slice_served). */
        now = slice_clock(t, s, now);
        if (s->served_ms) {
                age = now > s->served_ms ? now - s->served_ms : 0;
                length = t->length_ms;
        } else {
                age = now > s->since_ms ? now - s->since_ms : 0;
                length = SLICE_WAIT_LENGTHS * t->length_ms;
        }
        if (age >= length)
                return 0;
        if (ret_left_ms)
                *ret_left_ms = length - age;
        return s->pid;
}

pid_t slice_over(const gmd_slices *t, unsigned device, pid_t pid, int priority,
                 uint64_t now, uint64_t *ret_left_ms)
{
        pid_t holder = slice_holder(t, device, now, ret_left_ms);

        if (!holder || holder == pid || priority > t->on[device].priority)
                return 0;
        return holder;
}

static void slice_give(gmd_slices *t, gmd_slice *s, pid_t pid, int priority,
                       uint64_t now)
{
        s->pid = pid;
        s->priority = priority;
        s->since_ms = now;
        s->served_ms = 0;
        s->paused_since_ms = 0;
        s->paused_ms = 0;
        s->stalled = false;
        t->passed++;
}

bool slice_update(gmd_slices *t, unsigned device, pid_t first, int first_priority,
                  pid_t other, int other_priority, uint64_t now)
{
        gmd_slice *s;

        if (device >= GMD_MAX_DEVICES || !t->length_ms)
                return false;
        s = &t->on[device];
        if (s->pid <= 0) {
                if (first <= 0)
                        return false;
                slice_give(t, s, first, first_priority, now);
                return true;
        }
        if (other <= 0 || other == s->pid ||
            slice_holder(t, device, now, NULL) == s->pid)
                return false;
        slice_give(t, s, other, other_priority, now);
        return true;
}

void slice_served(gmd_slices *t, unsigned device, pid_t pid, uint64_t now)
{
        gmd_slice *s;

        if (device >= GMD_MAX_DEVICES || pid <= 0)
                return;
        s = &t->on[device];
        if (s->pid == pid && !s->served_ms) {
                now = slice_clock(t, s, now);
                s->served_ms = now ? now : 1;
        }
}

bool slice_pause(gmd_slices *t, unsigned device, bool blocked, uint64_t now)
{
        gmd_slice *s;

        if (device >= GMD_MAX_DEVICES || !t->length_ms)
                return false;
        s = &t->on[device];
        if (s->pid <= 0)
                return false;
        if (blocked && !s->paused_since_ms) {
                s->paused_since_ms = now ? now : 1;
                return true;
        }
        if (!blocked && s->paused_since_ms) {
                if (now > s->paused_since_ms)
                        s->paused_ms += now - s->paused_since_ms;
                s->paused_since_ms = 0;
                return true;
        }
        return false;
}

bool slice_paused(const gmd_slices *t, unsigned device)
{
        return device < GMD_MAX_DEVICES && t->on[device].pid > 0 &&
               t->on[device].paused_since_ms != 0;
}

bool slice_stall(gmd_slices *t, unsigned device, bool stalled)
{
        gmd_slice *s;

        if (device >= GMD_MAX_DEVICES)
                return false;
        s = &t->on[device];
        if (s->pid <= 0 || s->stalled == stalled)
                return false;
        s->stalled = stalled;
        return true;
}

bool slice_stalled(const gmd_slices *t, unsigned device)
{
        return device < GMD_MAX_DEVICES && t->on[device].pid > 0 &&
               t->on[device].stalled;
}

void slice_end(gmd_slices *t, unsigned device)
{
        if (device < GMD_MAX_DEVICES)
                memset(&t->on[device], 0, sizeof(t->on[device]));
}

void slice_forget(gmd_slices *t, pid_t pid)
{
        if (pid <= 0)
                return;
        for (unsigned d = 0; d < GMD_MAX_DEVICES; d++)
                if (t->on[d].pid == pid)
                        memset(&t->on[d], 0, sizeof(t->on[d]));
}
