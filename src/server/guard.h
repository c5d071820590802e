/*
 * guard — who may talk to the server, decided before any route runs.
 *
 *   Host    Bound to a loopback address, the server answers only requests
 *           whose Host names a loopback host (localhost, *.localhost,
 *           127.0.0.0/8, ::1) or the bound address.  A page on another
 *           name that DNS-rebinds to 127.0.0.1 is refused (403).  Bound to
 *           any other address the operator has exposed the server, and
 *           every Host is served (as Ollama does).
 *   Origin  Browsers send it on every cross-origin request and on
 *           same-origin POSTs.  Allowed: loopback origins (http or https,
 *           any port), the server's own origin when it was reached through
 *           an IP literal, and the operator's patterns (--cors-origins,
 *           KILN_ORIGINS: comma-separated, '*' globs, a lone '*' for any).
 *           Anything else is refused before the body is read, which is
 *           what stops "simple" cross-site POSTs (a text/plain body needs
 *           no preflight).  Requests without Origin (curl, SDKs) pass.
 *   Key     With --api-key every path needs it but /health and the chat
 *           page's own files, so the page can load and ask for the key.
 *
 * Pure string logic, no HTTP library: http.c applies it, tests call it.
 */
#ifndef KILN_SERVER_GUARD_H
#define KILN_SERVER_GUARD_H

typedef struct server_guard {
    int loopback;   /* the bound address is loopback: Host is checked */
    char bound[64]; /* the bound address, lower case, without brackets */
    char **origins; /* operator patterns, lower case */
    int n_origins;
    int any_origin; /* a lone '*' among them */
} server_guard;

/* bind_host: the address the server listens on ("127.0.0.1", "::1",
 * "0.0.0.0"...).  origins: the operator's comma-separated patterns, or
 * NULL.  Returns 0, or -1 when out of memory. */
int server_guard_init(server_guard *g, const char *bind_host, const char *origins);
void server_guard_free(server_guard *g);

/* host: the Host header (may carry a port; NULL or "" passes). */
int server_guard_host_ok(const server_guard *g, const char *host);
/* origin: the Origin header (NULL passes); host: the request's Host. */
int server_guard_origin_ok(const server_guard *g, const char *origin, const char *host);
/* 1 for the paths served without the API key on GET: the chat page and
 * its assets (/, /index.html, /favicon.ico, /assets/...). */
int server_guard_public_path(const char *url);
/* 1 when a name (no port, no brackets) is a loopback host. */
int server_guard_loopback_name(const char *name);

#endif
