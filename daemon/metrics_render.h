/*
 * metrics_render — builds the Prometheus text-format page that
 * daemon/metrics.c serves, from a snapshot of the daemon's state.
 */
#ifndef GMD_METRICS_RENDER_H
#define GMD_METRICS_RENDER_H

#include "promtext.h"
#include "snapshot.h"

/* Append every metric of `snapshot` to `t`. */
void metrics_render(promtext *t, const gmd_snapshot *snapshot);

#endif
