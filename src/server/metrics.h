/* Prometheus metrics (metrics.c). */
#ifndef KILN_SERVER_METRICS_H
#define KILN_SERVER_METRICS_H

#include "server/buf.h"
#include "server/srv.h"

#include <stdint.h>

void server_metrics_request(int status);
void server_metrics_tokens(int64_t prompt, int64_t cached, int64_t generated);
void server_metrics_ttft(double s);
void server_metrics_itl(double s);
void server_metrics_render(server_srv *s, server_buf *out);

#endif
