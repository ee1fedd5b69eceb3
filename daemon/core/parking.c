/*
 * parking — see parking.h. A client's parked bytes are counted per device
 * with what was asked back and not returned yet, so a reclaim never asks
 * twice for the same bytes.
 */
#include "parking.h"

#include <stdbool.h>

#include "timeutil.h"

void parking_mark(gmd_parking_owner *o, unsigned device, uint64_t size,
                  bool parked)
{
        if (parked) {
                o->bytes += size;
                o->on[device] += size;
                o->n++;
                return;
        }
        o->bytes -= size;
        o->on[device] -= size;
        o->n--;
        /* What was asked back cannot be more than what is parked. */
        if (o->asked[device] > o->on[device])
                o->asked[device] = o->on[device];
}

uint64_t parking_ask(gmd_parking_owner *o, unsigned device, uint64_t bytes)
{
        uint64_t open = o->on[device] - o->asked[device];
        uint64_t ask = bytes && bytes < open ? bytes : open;

        if (ask && o->asked[device] == 0) {
                o->asked_us[device] = now_us();
                o->ignored[device] = false;
        }
        o->asked[device] += ask;
        return ask;
}

void parking_returned(gmd_parking_owner *o, unsigned device, uint64_t size)
{
        o->asked[device] = o->asked[device] > size ? o->asked[device] - size : 0;
        o->asked_us[device] = now_us();     /* it answers: not ignoring */
        o->ignored[device] = false;
}

bool parking_overdue(const gmd_parking_owner *o, unsigned device,
                     uint64_t now, uint64_t timeout_us)
{
        return o->asked[device] && now - o->asked_us[device] >= timeout_us;
}
