/*
 * status — the StatusReply: pools, totals, clients and buffers as the
 * daemon sees them now, cut to one packet with paging for long buffer
 * lists.
 */
#ifndef GMD_STATUS_H
#define GMD_STATUS_H

#include <stdint.h>

typedef struct gmd_session gmd_session;
#include "gpumem.pb-c.h"
#include "result.h"

/* Build and send the StatusReply to `request` (OUTCOME_ANSWERED), or
 * OUTCOME_ERROR with `ret` filled when it could not be built. */
gmd_outcome status_reply(gmd_session *session, uint32_t request_id,
                         const Gmd__StatusRequest *request, gmd_result *ret);

#endif
