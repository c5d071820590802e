/* The request log line and the server's other lines (log.c). */
#ifndef KILN_SERVER_LOG_H
#define KILN_SERVER_LOG_H

#include "server/srv.h"

#include <stdint.h>

typedef struct server_reqlog server_reqlog;
server_reqlog *server_reqlog_begin(const server_srv *s, const char *method, const char *url);
/* The record of the request this connection thread is handling (or NULL);
 * http.c sets it before each call into a handler. */
void server_reqlog_set_current(server_reqlog *l);
server_reqlog *server_reqlog_current(void);
server_reqlog *server_reqlog_ref(server_reqlog *l);
void server_reqlog_put(server_reqlog *l);
void server_reqlog_status(server_reqlog *l, int status); /* the first one counts */
void server_reqlog_model(server_reqlog *l, const char *model);
void server_reqlog_tokens(server_reqlog *l, int64_t prompt, int64_t gen);
/* the sampling seed the request ran with (given or drawn) */
void server_reqlog_seed(server_reqlog *l, uint64_t seed);
/* Writes the line, once (later calls do nothing). */
void server_reqlog_emit(server_reqlog *l);
/* A generation takes the line over (a reference with it): the
 * connection's end (server_reqlog_done) leaves it to the generation's end. */
server_reqlog *server_reqlog_hold(server_reqlog *l);
void server_reqlog_done(server_reqlog *l);
/* A line about the server ("kiln serve: ..." or a JSON object). */
void server_logf(const server_srv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
