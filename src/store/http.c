/* Bounded HTTP requests for source metadata (JSON listings, manifests,
 * HEAD probes, header ranges) and the URL and credential rules every
 * transfer of the store follows.
 *
 * Redirects are followed here, never by libcurl: caller headers (the only
 * place credentials travel) go to the one origin they were given for, and
 * once a redirect chain leaves that origin they stay off for the rest of
 * it.  A response body is kept only up to the request's bound and is never
 * quoted in a message; URLs in messages lose their query and user-info. */
#include "store/store.h"

#include "base/base.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }
void store_curl_init(void) { pthread_once(&g_curl_once, curl_init_once); }

/* ---- source results ---- */

static _Thread_local kiln_store_source_result t_source;

kiln_store_source_result kiln_store_last_source_result(void) { return t_source; }

const char *kiln_store_source_result_str(kiln_store_source_result r) {
    switch (r) {
    case KILN_SOURCE_OK: return "ok";
    case KILN_SOURCE_AUTH_REQUIRED: return "authentication required";
    case KILN_SOURCE_GATED: return "gated";
    case KILN_SOURCE_DENIED: return "denied";
    case KILN_SOURCE_NOT_FOUND: return "not found";
    case KILN_SOURCE_TRANSIENT: return "transient failure";
    case KILN_SOURCE_UNVERIFIED: return "unverified";
    case KILN_SOURCE_OTHER: return "failed";
    }
    return "failed";
}

void store_source_set(kiln_store_source_result r) { t_source = r; }

kiln_status store_source_fail(kiln_store_source_result r, kiln_status st, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    t_source = r;
    return base_fail(st, "%s", msg);
}

kiln_status store_http_error(int kind, long code, const char *error_code, const char *what, int have_token) {
    const int hub = kind == STORE_SRC_HUB;
    const char *cred = hub ? "set HF_TOKEN or pass --token" : "pass --token";
    const char *ec = error_code ? error_code : "";
    if (hub && !strcmp(ec, "GatedRepo")) {
        if (!have_token)
            return store_source_fail(KILN_SOURCE_AUTH_REQUIRED, KILN_ERR_STATE,
                                     "%s: authentication required: the repository is gated; %s with the token of an "
                                     "account that accepted its terms",
                                     what, cred);
        return store_source_fail(KILN_SOURCE_GATED, KILN_ERR_STATE,
                                 "%s: gated: this account has not been granted access yet; accept the repository's "
                                 "terms on its page, then pull again",
                                 what);
    }
    if (hub && (!strcmp(ec, "RepoNotFound") || !strcmp(ec, "RevisionNotFound") || !strcmp(ec, "EntryNotFound"))) {
        const char *thing = ec[0] == 'R' && ec[1] == 'e' && ec[2] == 'p' ? "repository"
                            : ec[1] == 'e'                               ? "revision"
                                                                         : "file";
        if (!strcmp(ec, "RepoNotFound") && !have_token)
            return store_source_fail(KILN_SOURCE_NOT_FOUND, KILN_ERR_NOT_FOUND,
                                     "%s: not found (the repository may be private: %s if you have access)", what,
                                     cred);
        return store_source_fail(KILN_SOURCE_NOT_FOUND, KILN_ERR_NOT_FOUND, "%s: %s not found%s", what, thing,
                                 !strcmp(ec, "RepoNotFound") ? " (or private, and this token has no access)" : "");
    }
    if (code == 401) {
        if (!have_token)
            return store_source_fail(KILN_SOURCE_AUTH_REQUIRED, KILN_ERR_STATE,
                                     "%s: authentication required (HTTP 401): %s", what, cred);
        return store_source_fail(KILN_SOURCE_DENIED, KILN_ERR_STATE, "%s: denied: the token was refused (HTTP 401)",
                                 what);
    }
    if (code == 403)
        return store_source_fail(KILN_SOURCE_DENIED, KILN_ERR_STATE, "%s: denied (HTTP 403)%s", what,
                                 have_token ? ": the token lacks access" : "");
    if (code == 404 || code == 410)
        return store_source_fail(KILN_SOURCE_NOT_FOUND, KILN_ERR_NOT_FOUND,
                                 "%s: not found (HTTP %ld; it may be private%s)", what, code,
                                 have_token ? ""
                                 : hub      ? ": set HF_TOKEN if you have access"
                                            : "");
    if (code == 408 || code == 429 || code >= 500)
        return store_source_fail(KILN_SOURCE_TRANSIENT, KILN_ERR_IO,
                                 "%s: the server kept failing (HTTP %ld); try again later", what, code);
    return store_source_fail(KILN_SOURCE_OTHER, KILN_ERR_IO, "%s: HTTP %ld", what, code);
}

/* ---- URLs ---- */

long store_env_long(const char *name, long def, long lo, long hi) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    long n = strtol(v, &end, 10);
    return (*end || n < lo || n > hi) ? def : n;
}

int store_is_loopback(const char *host) {
    return !strcasecmp(host, "localhost") || !strncmp(host, "127.", 4) || !strcmp(host, "[::1]") ||
           !strcmp(host, "::1");
}

kiln_status store_url_origin(const char *url, char *origin, size_t cap) {
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL, *user = NULL;
    kiln_status st = KILN_OK;
    char shown[600];
    store_url_clean(url, shown, sizeof shown);
    if (!u || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK) {
        st = base_fail(KILN_ERR_INVALID_ARG, "'%s' is not a valid URL", shown);
    } else if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK && user) {
        st = base_fail(KILN_ERR_INVALID_ARG, "%s: credentials in a URL are refused (use --header or --token)", shown);
    } else if (strcasecmp(scheme, "https") &&
               !(!strcasecmp(scheme, "http") &&
                 (store_is_loopback(host) || store_env_long("KILN_ALLOW_HTTP", 0, 0, 1)))) {
        st = base_fail(KILN_ERR_INVALID_ARG, "%s: only HTTPS (or HTTP to this machine) is allowed", shown);
    } else {
        snprintf(origin, cap, "%s://%s:%s", scheme, host, port);
        for (char *c = origin; *c; c++) *c = (char)tolower((unsigned char)*c);
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_free(user);
    curl_url_cleanup(u);
    return st;
}

void store_url_clean(const char *url, char *out, size_t cap) {
    if (!cap) return;
    const char *p = url;
    const char *scheme_end = strstr(url, "://");
    size_t o = 0;
    if (scheme_end) {
        size_t n = (size_t)(scheme_end + 3 - url);
        for (size_t i = 0; i < n && o + 1 < cap; i++) out[o++] = url[i];
        p = scheme_end + 3;
        /* user-info ends at the last '@' before the path */
        const char *path = p + strcspn(p, "/?#");
        for (const char *a = p; a < path; a++)
            if (*a == '@') p = a + 1;
    }
    for (; *p && *p != '?' && *p != '#' && o + 1 < cap; p++) out[o++] = *p;
    out[o] = 0;
}

/* ---- requests ---- */

static void copy_value(char *dst, size_t cap, const char *v, size_t n) {
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
    while (n && (*v == ' ' || *v == '\t')) v++, n--;
    if (n >= cap) n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = 0;
}

static int header_is(const char *line, size_t n, const char *name, const char **value, size_t *vlen) {
    size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) || line[k] != ':') return 0;
    *value = line + k + 1;
    *vlen = n - k - 1;
    return 1;
}

/* The URL of Link: <url>; rel="next" (the hub's pagination), or "". */
static void link_next(const char *v, size_t n, char *out, size_t cap) {
    out[0] = 0;
    const char *end = v + n;
    while (v < end) {
        const char *lt = memchr(v, '<', (size_t)(end - v));
        if (!lt) return;
        const char *gt = memchr(lt, '>', (size_t)(end - lt));
        if (!gt) return;
        const char *next = memchr(gt, ',', (size_t)(end - gt));
        const char *seg_end = next ? next : end;
        char params[256];
        copy_value(params, sizeof params, gt + 1, (size_t)(seg_end - gt - 1));
        if (strstr(params, "rel=\"next\"") || strstr(params, "rel=next")) {
            copy_value(out, cap, lt + 1, (size_t)(gt - lt - 1));
            return;
        }
        v = seg_end + (next ? 1 : 0);
    }
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *ud) {
    store_http *h = ud;
    size_t n = size * nmemb;
    const char *v;
    size_t vn;
    if (n >= 5 && !strncmp(line, "HTTP/", 5)) {
        h->content_range[0] = h->etag[0] = h->linked_etag[0] = h->repo_commit[0] = h->error_code[0] = 0;
        h->link_next[0] = h->location[0] = h->www_auth[0] = h->docker_digest[0] = 0;
        h->has_linked_size = 0;
        h->linked_size = 0;
        h->content_length = -1;
    } else if (header_is(line, n, "content-range", &v, &vn)) {
        copy_value(h->content_range, sizeof h->content_range, v, vn);
    } else if (header_is(line, n, "etag", &v, &vn)) {
        copy_value(h->etag, sizeof h->etag, v, vn);
    } else if (header_is(line, n, "x-linked-etag", &v, &vn)) {
        copy_value(h->linked_etag, sizeof h->linked_etag, v, vn);
    } else if (header_is(line, n, "x-linked-size", &v, &vn)) {
        char num[32];
        copy_value(num, sizeof num, v, vn);
        char *e;
        unsigned long long s = strtoull(num, &e, 10);
        if (num[0] && !*e) {
            h->linked_size = s;
            h->has_linked_size = 1;
        }
    } else if (header_is(line, n, "content-length", &v, &vn)) {
        char num[32];
        copy_value(num, sizeof num, v, vn);
        char *e;
        long long s = strtoll(num, &e, 10);
        if (num[0] && !*e && s >= 0) h->content_length = s;
    } else if (header_is(line, n, "x-repo-commit", &v, &vn)) {
        copy_value(h->repo_commit, sizeof h->repo_commit, v, vn);
    } else if (header_is(line, n, "x-error-code", &v, &vn)) {
        copy_value(h->error_code, sizeof h->error_code, v, vn);
    } else if (header_is(line, n, "location", &v, &vn)) {
        copy_value(h->location, sizeof h->location, v, vn);
    } else if (header_is(line, n, "www-authenticate", &v, &vn)) {
        copy_value(h->www_auth, sizeof h->www_auth, v, vn);
    } else if (header_is(line, n, "docker-content-digest", &v, &vn)) {
        copy_value(h->docker_digest, sizeof h->docker_digest, v, vn);
    } else if (header_is(line, n, "link", &v, &vn)) {
        link_next(v, vn, h->link_next, sizeof h->link_next);
    }
    return n;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud) {
    store_http *h = ud;
    size_t n = size * nmemb;
    long code = 0;
    curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &code);
    if (code >= 300 && code < 400) return n; /* a redirect's page */
    if (h->range_len && code == 200) {
        h->range_ignored = 1; /* never read a whole file in place of a range */
        return 0;
    }
    if (code < 200 || code >= 300) return n; /* an error page: not kept, never shown */
    if (h->len + n > h->max_body) {
        h->overflow = 1;
        return 0;
    }
    if (h->len + n + 1 > h->cap) {
        size_t cap = h->cap ? h->cap : 4096;
        while (cap < h->len + n + 1) cap *= 2;
        char *nb = realloc(h->body, cap);
        if (!nb) {
            h->nomem = 1;
            return 0;
        }
        h->body = nb;
        h->cap = cap;
    }
    memcpy(h->body + h->len, ptr, n);
    h->len += n;
    h->body[h->len] = 0;
    return n;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
    (void)a, (void)b, (void)c, (void)d;
    const store_http *h = ud;
    return h->net && h->net->cancel && *h->net->cancel;
}

void store_net_init(store_net *n, const kiln_store_pull_params *pp) {
    memset(n, 0, sizeof *n);
    n->cancel = pp ? pp->cancel : NULL;
    n->progress = pp ? pp->progress : NULL;
    n->user = pp ? pp->user : NULL;
    n->stall_s = store_env_long("KILN_PULL_STALL_SECONDS", 30, 1, 3600);
    n->max_attempts = (int)store_env_long("KILN_PULL_RETRIES", 6, 1, 1000);
    n->backoff_ms = store_env_long("KILN_PULL_BACKOFF_MS", 1000, 1, 60000);
}

int store_net_cancelled(const store_net *n) { return n && n->cancel && *n->cancel; }

void store_net_sleep(const store_net *n, long ms) {
    for (long left = ms; left > 0 && !store_net_cancelled(n); left -= 100) {
        struct timespec ts = {0, (left < 100 ? left : 100) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

long store_net_delay(const store_net *n, int attempt) {
    long d = n->backoff_ms << (attempt - 1 < 5 ? attempt - 1 : 5);
    return d > 30000 ? 30000 : d;
}

int store_curl_transient(void *curl, int rc) {
    switch ((CURLcode)rc) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_FILESIZE_EXCEEDED:
    case CURLE_OUT_OF_MEMORY:
    case CURLE_WRITE_ERROR: return 0;
    case CURLE_COULDNT_CONNECT: {
        /* a refusal is an answer (nothing listens there), not a lost packet */
        long os_errno = 0;
        if (curl) curl_easy_getinfo((CURL *)curl, CURLINFO_OS_ERRNO, &os_errno);
        return os_errno != ECONNREFUSED;
    }
    default: return 1;
    }
}

void store_curl_reason(void *curl, int rc, const char *errbuf, char *out, size_t cap) {
    char eb[CURL_ERROR_SIZE + 8];
    store_url_clean(errbuf && errbuf[0] ? errbuf : curl_easy_strerror((CURLcode)rc), eb, sizeof eb);
    long os_errno = 0;
    if (rc == CURLE_COULDNT_CONNECT && curl) curl_easy_getinfo((CURL *)curl, CURLINFO_OS_ERRNO, &os_errno);
    if (rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY)
        snprintf(out, cap, "the host name does not resolve (%s)", eb);
    else if (os_errno == ECONNREFUSED)
        snprintf(out, cap, "connection refused (%s)", eb);
    else
        snprintf(out, cap, "%s", eb);
}

void store_http_done(store_http *h) {
    free(h->body);
    h->body = NULL;
    h->len = h->cap = 0;
}

kiln_status store_http_get(store_http *h, const store_net *net) {
    store_curl_init();
    char what[600];
    if (h->what)
        snprintf(what, sizeof what, "%s", h->what);
    else
        store_url_clean(h->url, what, sizeof what);
    if (!h->max_body) h->max_body = 1 << 20;
    h->net = net;
    char origin0[512], cur[8192];
    kiln_status st = store_url_origin(h->url, origin0, sizeof origin0);
    if (st) return st;
    CURL *c = curl_easy_init();
    if (!c) return base_fail(KILN_ERR_NOMEM, "cannot create an HTTP handle");
    h->curl = c;
    int attempts = 0, hops = 0, left = 0;
    snprintf(cur, sizeof cur, "%s", h->url);
    char errbuf[CURL_ERROR_SIZE];
    for (;;) {
        if (store_net_cancelled(net)) {
            st = base_fail(KILN_ERR_CANCELLED, "cancelled");
            break;
        }
        char cur_origin[512];
        if ((st = store_url_origin(cur, cur_origin, sizeof cur_origin))) break;
        if (!h->auth_origin || strcmp(cur_origin, h->auth_origin)) left = 1;
        struct curl_slist *hdrs = NULL;
        if (!left)
            for (int i = 0; i < h->n_headers; i++) hdrs = curl_slist_append(hdrs, h->headers[i]);
        char accept[300], range[64];
        if (h->accept) {
            snprintf(accept, sizeof accept, "Accept: %s", h->accept);
            hdrs = curl_slist_append(hdrs, accept);
        }
        h->len = 0;
        h->overflow = h->range_ignored = h->nomem = 0;
        errbuf[0] = 0;
        curl_easy_reset(c);
        curl_easy_setopt(c, CURLOPT_URL, cur);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_USERAGENT, "kiln/" KILN_VERSION);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
        if (h->head) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
        if (h->range_len) {
            snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)h->range_start,
                     (unsigned long long)(h->range_start + h->range_len - 1));
            curl_easy_setopt(c, CURLOPT_RANGE, range);
        }
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, h);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, h);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, h);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, net ? net->stall_s : 30L);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
        CURLcode rc = curl_easy_perform(c);
        curl_slist_free_all(hdrs);
        long code = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        h->code = code;
        char reason[300] = "";
        if (h->nomem) {
            st = base_fail(KILN_ERR_NOMEM, "out of memory");
            break;
        }
        if (h->overflow) {
            st = store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT, "%s: the answer exceeds %zu bytes", what,
                                   h->max_body);
            break;
        }
        if (h->range_ignored) break; /* the caller decides: unverified */
        if (rc == CURLE_ABORTED_BY_CALLBACK || store_net_cancelled(net)) continue;
        if (rc == CURLE_OK && code >= 300 && code < 400 && code != 304) {
            if (h->follow == STORE_FOLLOW_NONE) break; /* the caller reads the 3xx */
            char *loc = NULL;
            curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &loc);
            if (!loc) {
                st = store_source_fail(KILN_SOURCE_OTHER, KILN_ERR_IO, "%s: a redirect without a location", what);
                break;
            }
            char next_origin[512];
            if ((st = store_url_origin(loc, next_origin, sizeof next_origin))) break;
            if (h->follow == STORE_FOLLOW_SAME && strcmp(next_origin, cur_origin)) break;
            if (++hops > STORE_MAX_REDIRECTS) {
                st = store_source_fail(KILN_SOURCE_OTHER, KILN_ERR_IO, "%s: too many redirects", what);
                break;
            }
            snprintf(cur, sizeof cur, "%s", loc);
            continue;
        }
        if (rc == CURLE_OK && code != 408 && code != 429 && code < 500) break; /* an answer */
        if (rc != CURLE_OK && !store_curl_transient(c, rc)) {
            char eb[CURL_ERROR_SIZE + 64];
            store_curl_reason(c, rc, errbuf, eb, sizeof eb);
            st = store_source_fail(KILN_SOURCE_OTHER, KILN_ERR_IO, "%s: %s", what, eb);
            break;
        }
        if (rc == CURLE_OK)
            snprintf(reason, sizeof reason, "HTTP %ld", code);
        else if (rc == CURLE_OPERATION_TIMEDOUT)
            snprintf(reason, sizeof reason, "no answer for %ld s", net ? net->stall_s : 30L);
        else
            store_url_clean(errbuf[0] ? errbuf : curl_easy_strerror(rc), reason, sizeof reason);
        if (++attempts >= (net ? net->max_attempts : 1)) {
            st = store_source_fail(KILN_SOURCE_TRANSIENT, KILN_ERR_IO,
                                   "%s: giving up after %d attempts (%s); try again later", what, attempts, reason);
            break;
        }
        long delay = net ? store_net_delay(net, attempts) : 1000;
        if (net && net->progress) {
            char msg[1000];
            snprintf(msg, sizeof msg, "%s: %s; retrying in %.1f s", what, reason, (double)delay / 1000.0);
            kiln_store_progress p = {.event = "retry", .eta = -1, .message = msg};
            net->progress(&p, net->user);
        }
        store_net_sleep(net, delay);
        hops = 0;
        left = 0;
        snprintf(cur, sizeof cur, "%s", h->url);
    }
    curl_easy_cleanup(c);
    h->curl = NULL;
    store_url_clean(cur, h->final_url, sizeof h->final_url);
    return st;
}

/* ---- small shared parsers ---- */

int store_etag_sha256(const char *etag, char out[STORE_ID_LEN + 1]) {
    const char *p = etag;
    if (!strncmp(p, "W/", 2)) return 0; /* a weak validator names no content */
    if (*p == '"') p++;
    size_t n = strcspn(p, "\"");
    if (n != STORE_ID_LEN) return 0;
    for (size_t i = 0; i < n; i++) out[i] = (char)tolower((unsigned char)p[i]);
    out[n] = 0;
    return store_hex_ok(out);
}

int store_url_escape(const char *in, char *out, size_t cap, int keep_slash) {
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        int plain = isalnum(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~' || (keep_slash && *p == '/');
        if (o + (plain ? 1 : 3) >= cap) return -1;
        if (plain)
            out[o++] = (char)*p;
        else
            o += (size_t)snprintf(out + o, cap - o, "%%%02X", *p);
    }
    out[o] = 0;
    return 0;
}
