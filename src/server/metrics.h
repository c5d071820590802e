/* Prometheus metrics (metrics.c). */
#ifndef KILN_SERVER_METRICS_H
#define KILN_SERVER_METRICS_H

#include "server/buf.h"
#include "server/srv.h"

#include <stdint.h>

void ks_metrics_request(int status);
void ks_metrics_tokens(int64_t prompt, int64_t cached, int64_t generated);
void ks_metrics_ttft(double s);
void ks_metrics_itl(double s);
void ks_metrics_render(ks_srv *s, ks_buf *out);

#endif
