/*
 * metrics_render — builds the Prometheus text-format page that
 * daemon/metrics.c serves.
 */
#ifndef GMD_METRICS_RENDER_H
#define GMD_METRICS_RENDER_H

#include "promtext.h"

typedef struct gmd_server gmd_server;

/* Append every metric of `server` to `t`. */
void metrics_render(promtext *t, const gmd_server *server);

#endif
