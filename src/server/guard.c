/* The Host, Origin and public-path rules of guard.h. */
#define _GNU_SOURCE
#include "server/guard.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void lower(char *s) {
    for (; *s; s++) *s = (char)tolower((unsigned char)*s);
}

/* Splits an authority ("host", "host:port", "[v6]", "[v6]:port") into its
 * host (no brackets, lower case, no trailing dot) and port ("" if none).
 * Returns 0, or -1 when it is malformed or too long. */
static int split_authority(const char *a, char *host, size_t hcap, char *port, size_t pcap) {
    const char *h = a, *he, *p = NULL;
    if (*a == '[') {
        h = a + 1;
        he = strchr(h, ']');
        if (!he) return -1;
        if (he[1] == ':')
            p = he + 2;
        else if (he[1])
            return -1;
    } else {
        he = strchr(a, ':');
        if (he)
            p = he + 1;
        else
            he = a + strlen(a);
        if (p && strchr(p, ':')) return -1; /* an unbracketed v6 literal */
    }
    size_t hl = (size_t)(he - h);
    if (hl == 0 || hl >= hcap) return -1;
    memcpy(host, h, hl);
    host[hl] = 0;
    lower(host);
    if (hl > 1 && host[hl - 1] == '.') host[hl - 1] = 0;
    size_t pl = p ? strlen(p) : 0;
    if (pl >= pcap) return -1;
    for (size_t i = 0; i < pl; i++)
        if (!isdigit((unsigned char)p[i])) return -1;
    memcpy(port, p ? p : "", pl + 1);
    return 0;
}

static int ip_literal(const char *name) {
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, name, buf) == 1 || inet_pton(AF_INET6, name, buf) == 1;
}

int server_guard_loopback_name(const char *name) {
    size_t n = strlen(name);
    if (!strcmp(name, "localhost") || (n > 10 && !strcmp(name + n - 10, ".localhost"))) return 1;
    struct in_addr a4;
    if (inet_pton(AF_INET, name, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, name, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}

int server_guard_init(server_guard *g, const char *bind_host, const char *origins) {
    memset(g, 0, sizeof *g);
    const char *b = bind_host ? bind_host : "127.0.0.1";
    size_t bl = strlen(b);
    if (b[0] == '[' && bl > 2 && b[bl - 1] == ']') {
        b++;
        bl -= 2;
    }
    if (bl >= sizeof g->bound) bl = sizeof g->bound - 1;
    memcpy(g->bound, b, bl);
    g->bound[bl] = 0;
    lower(g->bound);
    g->loopback = server_guard_loopback_name(g->bound);
    for (const char *p = origins ? origins : ""; *p;) {
        size_t n = strcspn(p, ",");
        const char *s = p, *e = p + n;
        while (s < e && isspace((unsigned char)*s)) s++;
        while (e > s && isspace((unsigned char)e[-1])) e--;
        if (e - s == 1 && *s == '*') {
            g->any_origin = 1;
        } else if (e > s) {
            char **no = realloc(g->origins, (size_t)(g->n_origins + 1) * sizeof *no);
            char *pat = strndup(s, (size_t)(e - s));
            if (!no || !pat) {
                free(pat);
                if (no) g->origins = no;
                server_guard_free(g);
                return -1;
            }
            g->origins = no;
            lower(pat);
            size_t pl = strlen(pat);
            if (pl > 1 && pat[pl - 1] == '/') pat[pl - 1] = 0; /* "http://x/" is "http://x" */
            g->origins[g->n_origins++] = pat;
        }
        p += n + (p[n] == ',');
    }
    return 0;
}

void server_guard_free(server_guard *g) {
    for (int i = 0; i < g->n_origins; i++) free(g->origins[i]);
    free(g->origins);
    g->origins = NULL;
    g->n_origins = 0;
}

int server_guard_host_ok(const server_guard *g, const char *host) {
    if (!g->loopback || !host || !*host) return 1;
    char name[256], port[16];
    if (split_authority(host, name, sizeof name, port, sizeof port)) return 0;
    return server_guard_loopback_name(name) || !strcmp(name, g->bound);
}

/* "80" for http, "443" for https: an origin leaves out its default port,
 * a Host header may carry it. */
static int same_port(const char *a, const char *b, int https) {
    const char *def = https ? "443" : "80";
    if (!*a) a = def;
    if (!*b) b = def;
    return !strcmp(a, b);
}

int server_guard_origin_ok(const server_guard *g, const char *origin, const char *host) {
    if (!origin) return 1;
    if (g->any_origin) return 1;
    char o[512];
    if (strlen(origin) >= sizeof o) return 0;
    strcpy(o, origin);
    lower(o);
    for (int i = 0; i < g->n_origins; i++)
        if (fnmatch(g->origins[i], o, 0) == 0) return 1;
    int https = !strncmp(o, "https://", 8);
    if (!https && strncmp(o, "http://", 7)) return 0; /* "null", file:, extensions: only by pattern */
    const char *auth = o + (https ? 8 : 7);
    char name[256], port[16];
    if (strchr(auth, '/') || split_authority(auth, name, sizeof name, port, sizeof port)) return 0;
    if (server_guard_loopback_name(name)) return 1;
    /* The page the server itself served, reached through an IP literal
     * (not a name, which DNS could point anywhere). */
    char hname[256], hport[16];
    if (!host || split_authority(host, hname, sizeof hname, hport, sizeof hport)) return 0;
    return ip_literal(name) && !strcmp(name, hname) && same_port(port, hport, https);
}

int server_guard_public_path(const char *url) {
    if (!strcmp(url, "/") || !strcmp(url, "/index.html") || !strcmp(url, "/favicon.ico")) return 1;
    return !strncmp(url, "/assets/", 8) && !strstr(url, "..");
}
