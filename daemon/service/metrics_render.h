/*
 * metrics_render — builds the Prometheus text-format page that
 * daemon/service/metrics.c serves, from a snapshot of the daemon's state.
 */
#ifndef GMD_METRICS_RENDER_H
#define GMD_METRICS_RENDER_H

#include "promtext.h"
#include "snapshot.h"

/* Append every metric of `snapshot` to `t`. `clients` is [metrics]
 * clients: "users" (series per uid only), "ids" (and per client
 * connection) or "names" (those with the client's name). */
void metrics_render(promtext *t, const gmd_snapshot *snapshot,
                    const char *clients);

#endif
