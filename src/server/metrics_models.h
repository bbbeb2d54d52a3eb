/*
 * /metrics of a server with several models (models.h): the front's
 * server-wide families, then each model's families with a model="ID"
 * label on every sample, then which models are loaded and their bytes.
 */
#ifndef KVLM_SERVER_METRICS_MODELS_H
#define KVLM_SERVER_METRICS_MODELS_H

#include "app/sbuf.h"
#include "server/metrics.h"
#include "server/srv.h"

/* front: s's own metrics (set_state and set_connections done by the caller). */
void metrics_models_render(srv *s, srv_metrics *front, sbuf *o);

#endif
