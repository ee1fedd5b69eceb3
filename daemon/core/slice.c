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
        if (s->pid == pid && !s->served_ms)
                s->served_ms = now ? now : 1;
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
