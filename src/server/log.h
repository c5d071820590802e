/* The request log line and the server's other lines (log.c). */
#ifndef KILN_SERVER_LOG_H
#define KILN_SERVER_LOG_H

#include "server/srv.h"

#include <stdint.h>

typedef struct ks_reqlog ks_reqlog;
ks_reqlog *ks_reqlog_begin(const ks_srv *s, const char *method, const char *url);
/* The record of the request this connection thread is handling (or NULL);
 * http.c sets it before each call into a handler. */
void ks_reqlog_set_current(ks_reqlog *l);
ks_reqlog *ks_reqlog_current(void);
ks_reqlog *ks_reqlog_ref(ks_reqlog *l);
void ks_reqlog_put(ks_reqlog *l);
void ks_reqlog_status(ks_reqlog *l, int status); /* the first one counts */
void ks_reqlog_model(ks_reqlog *l, const char *model);
void ks_reqlog_tokens(ks_reqlog *l, int64_t prompt, int64_t gen);
/* the sampling seed the request ran with (given or drawn) */
void ks_reqlog_seed(ks_reqlog *l, uint64_t seed);
/* Writes the line, once (later calls do nothing). */
void ks_reqlog_emit(ks_reqlog *l);
/* A generation takes the line over (a reference with it): the
 * connection's end (ks_reqlog_done) leaves it to the generation's end. */
ks_reqlog *ks_reqlog_hold(ks_reqlog *l);
void ks_reqlog_done(ks_reqlog *l);
/* A line about the server ("kiln serve: ..." or a JSON object). */
void ks_logf(const ks_srv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
