/*
 * admin — administrative requests (gpu-memctl drain, priority, evict):
 * only root and members of [daemon] admin_group may send them; they act on
 * every client of one process.
 */
#ifndef GMD_ADMIN_H
#define GMD_ADMIN_H

#include <stdint.h>

#include "gpumem.pb-c.h"
#include "result.h"

typedef struct gmd_session gmd_session;

/* Handle MSG_ADMIN: its outcome (result.h). */
gmd_outcome admin_handle(gmd_session *session, uint32_t request_id,
                         const Gmd__AdminRequest *request, gmd_result *ret);

#endif
