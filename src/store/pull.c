/* kiln pull: HTTP(S) transfers into the store through libcurl.
 *
 * Each artifact downloads to .staging/<key>/<file>.part beside a small
 * <file>.part.json (source URL, total length, validator; never headers).
 * A later pull, in any process, continues the part with a Range request
 * (If-Range guards against a file that changed on the server).  A response
 * that is not a 206 starting exactly at the part's end restarts the file
 * from zero: bytes are never appended to a part they don't continue.
 * Redirects are followed here, not by libcurl, so caller headers (which may
 * hold credentials) go only to the source's origin, and never again once
 * a redirect chain left it (the hub's CDN never sees a token).  What is
 * recorded of a URL (part metadata, manifest) has no query: a signed
 * redirect target is used once and forgotten.
 *
 * A pull runs a plan: the artifacts, their expected lengths and hashes and
 * the pinned origin.  For a URL the plan is the URL (or the pack manifest
 * it names); hub.c and registry.c make it from a reference. */
#include "store/store.h"

#include "base/base.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define MAX_ARTIFACTS STORE_MAX_ARTIFACTS

typedef struct pull_ctx {
    const kiln_store_pull_params *pp;
    store_net net;
    const char *const *headers;
    int n_headers;
    int kind; /* STORE_SRC_* */
    int have_token;
    const char *what;      /* the source as messages name it */
    char auth_origin[512]; /* where headers may go */
    int index, count;
    uint64_t all_before; /* bytes of the artifacts already complete */
    uint64_t all_total;  /* 0 when some length is unknown */
} pull_ctx;

typedef struct xfer {
    pull_ctx *pc;
    CURL *h;
    const char *file;
    const char *meta_path;
    const char *url; /* the URL the pull was asked for (recorded) */
    int fd;
    uint64_t have;       /* bytes in the part */
    uint64_t expect;     /* length the pack manifest declares, 0 unknown */
    uint64_t total;      /* length of the file per this response, 0 unknown */
    uint64_t meta_total; /* length recorded when the part began */
    int decided, discard, restart, integrity, werr, nospace;
    char why[512];
    char content_range[128], validator[256], etag[256], last_mod[128], error_code[64];
    double t_last_emit, t_rate, rate;
    uint64_t rate_bytes;
} xfer;

static int cancelled(const pull_ctx *pc) { return store_net_cancelled(&pc->net); }

static void emit(xfer *x, const char *event, const char *message) {
    pull_ctx *pc = x->pc;
    if (!pc->pp || !pc->pp->progress) return;
    uint64_t total = x->expect ? x->expect : x->total;
    kiln_store_progress p = {.event = event,
                             .artifact = x->file,
                             .index = pc->index,
                             .count = pc->count,
                             .done = x->have,
                             .total = total,
                             .all_done = pc->all_before + x->have,
                             .all_total = pc->all_total,
                             .rate = x->rate,
                             .eta = (x->rate > 0 && total >= x->have) ? (double)(total - x->have) / x->rate : -1,
                             .message = message};
    pc->pp->progress(&p, pc->pp->user);
}

/* ---- part metadata ---- */

static void write_meta(xfer *x) {
    json_t *m = json_pack("{s:s,s:I,s:s}", "url", x->url, "total", (json_int_t)x->total, "validator", x->validator);
    char *txt = m ? json_dumps(m, JSON_COMPACT) : NULL;
    if (txt && store_write_atomic(x->meta_path, txt, strlen(txt), 0644) != 0)
        base_log(BASE_LOG_WARN, "pull: cannot write %s: %s", x->meta_path, strerror(errno));
    free(txt);
    json_decref(m);
}

static int truncate_part(xfer *x) {
    x->have = 0;
    x->meta_total = 0;
    x->validator[0] = 0;
    unlink(x->meta_path);
    if (ftruncate(x->fd, 0) != 0 || lseek(x->fd, 0, SEEK_SET) != 0) {
        x->werr = errno;
        return -1;
    }
    return 0;
}

/* ---- libcurl callbacks ---- */

static void copy_header(char *dst, size_t cap, const char *v, size_t n) {
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ')) n--;
    while (n && *v == ' ') v++, n--;
    if (n >= cap) n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = 0;
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *ud) {
    xfer *x = ud;
    size_t n = size * nmemb;
    if (n >= 5 && !strncmp(line, "HTTP/", 5)) {
        x->content_range[0] = x->etag[0] = x->last_mod[0] = x->error_code[0] = 0;
    } else if (n > 14 && !strncasecmp(line, "content-range:", 14)) {
        copy_header(x->content_range, sizeof x->content_range, line + 14, n - 14);
    } else if (n > 5 && !strncasecmp(line, "etag:", 5)) {
        copy_header(x->etag, sizeof x->etag, line + 5, n - 5);
    } else if (n > 14 && !strncasecmp(line, "last-modified:", 14)) {
        copy_header(x->last_mod, sizeof x->last_mod, line + 14, n - 14);
    } else if (n > 13 && !strncasecmp(line, "x-error-code:", 13)) {
        copy_header(x->error_code, sizeof x->error_code, line + 13, n - 13);
    }
    return n;
}

/* Parses "bytes A-B/T" (or "bytes * /T" on 416); T is 0 when "*". */
static int parse_range(const char *cr, uint64_t *start, uint64_t *total) {
    unsigned long long a = 0, b = 0;
    const char *slash = strchr(cr, '/');
    if (strncasecmp(cr, "bytes ", 6) || !slash) return -1;
    *total = slash[1] == '*' ? 0 : strtoull(slash + 1, NULL, 10);
    if (cr[6] == '*') {
        *start = 0;
        return 1;
    }
    if (sscanf(cr + 6, "%llu-%llu", &a, &b) != 2 || b < a) return -1;
    *start = a;
    return 0;
}

/* Looks at the response once, before its first body byte is stored. */
static void decide(xfer *x) {
    x->decided = 1;
    long code = 0;
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
    if (code == 206) {
        uint64_t start = 0, total = 0;
        if (parse_range(x->content_range, &start, &total) != 0 || start != x->have) {
            snprintf(x->why, sizeof x->why, "server answered the range at '%s', not at byte %llu; restarting from zero",
                     x->content_range, (unsigned long long)x->have);
            x->restart = 1;
            return;
        }
        if (x->meta_total && total && total != x->meta_total) {
            snprintf(x->why, sizeof x->why,
                     "the file on the server changed size (%llu, was %llu); restarting from zero",
                     (unsigned long long)total, (unsigned long long)x->meta_total);
            x->restart = 1;
            return;
        }
        x->total = total;
    } else if (code == 200) {
        if (x->have > 0) {
            emit(x, "restart", "the server ignored the range request; restarting from zero");
            if (truncate_part(x) != 0) return;
        }
        curl_off_t cl = -1;
        curl_easy_getinfo(x->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        x->total = cl >= 0 ? (uint64_t)cl : 0;
    } else {
        x->discard = 1; /* a redirect or error page */
        return;
    }
    if (x->expect && x->total && x->total != x->expect) {
        snprintf(x->why, sizeof x->why,
                 "artifact %s: wrong length: the server sends %llu bytes, the manifest says %llu", x->file,
                 (unsigned long long)x->total, (unsigned long long)x->expect);
        x->integrity = 1;
        return;
    }
    /* a strong validator lets a later resume ask "only if unchanged" */
    if (x->etag[0] && strncmp(x->etag, "W/", 2))
        snprintf(x->validator, sizeof x->validator, "%s", x->etag);
    else
        snprintf(x->validator, sizeof x->validator, "%s", x->last_mod);
    if (x->total) x->meta_total = x->total;
    write_meta(x);
    uint64_t want = x->total > x->have ? x->total - x->have : 0;
    struct statvfs vfs;
    if (want && fstatvfs(x->fd, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < want) {
        snprintf(x->why, sizeof x->why, "not enough space for %s: %llu more bytes needed, %llu free", x->file,
                 (unsigned long long)want, (unsigned long long)vfs.f_bavail * vfs.f_frsize);
        x->nospace = 1;
    }
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud) {
    xfer *x = ud;
    size_t n = size * nmemb;
    if (!x->decided) decide(x);
    if (x->discard) return n;
    if (x->restart || x->integrity || x->nospace || x->werr) return 0;
    if (x->expect && x->have + n > x->expect) {
        snprintf(x->why, sizeof x->why, "artifact %s: wrong length: the server sends more than the %llu bytes declared",
                 x->file, (unsigned long long)x->expect);
        x->integrity = 1;
        return 0;
    }
    for (size_t off = 0; off < n;) {
        ssize_t w = write(x->fd, ptr + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            x->werr = errno;
            return 0;
        }
        off += (size_t)w;
        x->have += (uint64_t)w;
    }
    return n;
}

static int on_xferinfo(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    xfer *x = ud;
    if (cancelled(x->pc)) return 1;
    double now = base_now();
    if (now - x->t_rate >= 0.5) {
        double inst = (double)(x->have - x->rate_bytes) / (now - x->t_rate);
        x->rate = x->rate > 0 ? 0.7 * x->rate + 0.3 * inst : inst;
        x->t_rate = now;
        x->rate_bytes = x->have;
    }
    if (now - x->t_last_emit >= 0.25 && x->decided && !x->discard) {
        x->t_last_emit = now;
        emit(x, "progress", NULL);
    }
    return 0;
}

/* ---- one artifact ---- */

/* Downloads url into dir/file.  On an integrity failure (*quarantine set)
 * the caller quarantines the staging directory. */
static kiln_status pull_artifact(pull_ctx *pc, const char *dir, const char *url, const char *file, uint64_t expect,
                                 const char *want_sha, char sha_out[STORE_ID_LEN + 1], uint64_t *len_out,
                                 int *quarantine) {
    char final_p[PATH_MAX], part_p[PATH_MAX], meta_p[PATH_MAX];
    *quarantine = 0;
    if (store_path(final_p, "%s/%s", dir, file) || store_path(part_p, "%s.part", final_p) ||
        store_path(meta_p, "%s.part.json", final_p))
        return KILN_ERR_INVALID_ARG;
    char rec_url[4096]; /* what the part's record and messages hold of url */
    store_url_clean(url, rec_url, sizeof rec_url);
    xfer x = {.pc = pc, .file = file, .meta_path = meta_p, .url = rec_url, .fd = -1, .expect = expect};
    struct stat st;
    /* completed by an earlier run whose pack was not published yet */
    if (stat(final_p, &st) == 0) {
        x.have = (uint64_t)st.st_size;
        if (store_sha256_file(final_p, sha_out, NULL, NULL, NULL, file) == 0 && (!expect || x.have == expect) &&
            (!want_sha || !strcmp(sha_out, want_sha))) {
            *len_out = x.have;
            emit(&x, "done", "already downloaded");
            return KILN_OK;
        }
        unlink(final_p);
        x.have = 0;
    }
    x.fd = open(part_p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (x.fd < 0) return base_fail(KILN_ERR_IO, "cannot create %s: %s", part_p, strerror(errno));
    if (fstat(x.fd, &st) == 0) x.have = (uint64_t)st.st_size;
    {
        char *txt = x.have ? store_read_text(meta_p, 1 << 16, NULL) : NULL;
        json_t *m = txt ? json_loads(txt, 0, NULL) : NULL;
        free(txt);
        const char *murl = json_string_value(json_object_get(m, "url"));
        const char *mval = json_string_value(json_object_get(m, "validator"));
        json_int_t mtotal = json_integer_value(json_object_get(m, "total"));
        /* a part is only continued when it is known to come from this URL */
        if (x.have && (!murl || strcmp(murl, rec_url) || (expect && x.have > expect) ||
                       (mtotal > 0 && x.have > (uint64_t)mtotal)))
            truncate_part(&x);
        else if (x.have) {
            x.meta_total = mtotal > 0 ? (uint64_t)mtotal : 0;
            snprintf(x.validator, sizeof x.validator, "%s", mval ? mval : "");
        }
        json_decref(m);
    }
    if (lseek(x.fd, 0, SEEK_END) < 0) x.werr = errno;

    CURL *h = curl_easy_init();
    if (!h) {
        close(x.fd);
        return base_fail(KILN_ERR_NOMEM, "cannot create an HTTP handle");
    }
    x.h = h;
    char cur[8192], errbuf[CURL_ERROR_SIZE];
    kiln_status st_ret = KILN_OK;
    int attempts = 0, hops = 0, left_origin = 0, done = 0;
    snprintf(cur, sizeof cur, "%s", url);
    if (x.have)
        emit(&x, "resume", NULL);
    else
        emit(&x, "start", NULL);
    while (!st_ret && !done) {
        if (cancelled(pc)) {
            st_ret = base_fail(KILN_ERR_CANCELLED, "pull cancelled; %llu bytes of %s kept for the next pull",
                               (unsigned long long)x.have, file);
            break;
        }
        uint64_t have0 = x.have;
        x.decided = x.discard = x.restart = 0;
        x.why[0] = errbuf[0] = 0;
        char cur_origin[512];
        if ((st_ret = store_url_origin(cur, cur_origin, sizeof cur_origin))) break;
        /* credentials only on the source's origin, and never again once
         * the chain left it */
        if (strcmp(cur_origin, pc->auth_origin)) left_origin = 1;
        struct curl_slist *hdrs = NULL;
        if (!left_origin)
            for (int i = 0; i < pc->n_headers; i++) hdrs = curl_slist_append(hdrs, pc->headers[i]);
        char range[64], ifr[300];
        if (x.have) {
            snprintf(range, sizeof range, "%llu-", (unsigned long long)x.have);
            if (x.validator[0]) {
                snprintf(ifr, sizeof ifr, "If-Range: %s", x.validator);
                hdrs = curl_slist_append(hdrs, ifr);
            }
        }
        curl_easy_reset(h);
        curl_easy_setopt(h, CURLOPT_URL, cur);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(h, CURLOPT_UNRESTRICTED_AUTH, 0L);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_USERAGENT, "kiln/" KILN_VERSION);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_RANGE, x.have ? range : NULL);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_xferinfo);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, pc->net.stall_s);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
        x.t_rate = x.t_last_emit = base_now();
        x.rate_bytes = x.have;
        CURLcode rc = curl_easy_perform(h);
        curl_slist_free_all(hdrs);
        long code = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        char reason[600] = "";
        if (x.werr) {
            st_ret = base_fail(KILN_ERR_IO, "writing %s: %s; %llu bytes kept in %s", file, strerror(x.werr),
                               (unsigned long long)x.have, part_p);
        } else if (x.nospace) {
            st_ret = base_fail(KILN_ERR_IO, "%s; %llu bytes kept in %s", x.why, (unsigned long long)x.have, part_p);
        } else if (x.integrity) {
            *quarantine = 1;
            st_ret = store_source_fail(KILN_SOURCE_OTHER, KILN_ERR_FORMAT, "%s", x.why);
        } else if (rc == CURLE_ABORTED_BY_CALLBACK || cancelled(pc)) {
            continue; /* reported at the top of the loop */
        } else if (x.restart) {
            emit(&x, "restart", x.why);
            if (truncate_part(&x) != 0) continue;
            snprintf(reason, sizeof reason, "%s", x.why);
        } else if (rc == CURLE_OK && code >= 300 && code < 400 && code != 304) {
            char *loc = NULL;
            curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &loc);
            char next_origin[512];
            if (!loc || ++hops > STORE_MAX_REDIRECTS) {
                st_ret = store_source_fail(KILN_SOURCE_OTHER, KILN_ERR_IO, "%s: %s", rec_url,
                                           loc ? "too many redirects" : "redirect without a location");
            } else if (!(st_ret = store_url_origin(loc, next_origin, sizeof next_origin))) {
                snprintf(cur, sizeof cur, "%s", loc); /* used for this transfer only, never recorded */
            }
            continue;
        } else if (rc == CURLE_OK && (code == 200 || code == 206)) {
            if (x.total && x.have != x.total)
                snprintf(reason, sizeof reason, "short body: %llu of %llu bytes", (unsigned long long)x.have,
                         (unsigned long long)x.total);
            else
                done = 1;
        } else if (rc == CURLE_OK && code == 416) {
            uint64_t start = 0, total = 0;
            if (parse_range(x.content_range, &start, &total) >= 0 && total && total == x.have) {
                x.total = total; /* the part was already complete */
                done = 1;
            } else {
                emit(&x, "restart", "the server rejected the range; restarting from zero");
                if (truncate_part(&x) != 0) continue;
                snprintf(reason, sizeof reason, "HTTP 416");
            }
        } else if (rc == CURLE_OK && code != 408 && code != 429 && code < 500) {
            char what[600];
            if (pc->kind == STORE_SRC_URL)
                snprintf(what, sizeof what, "%.590s", rec_url);
            else
                snprintf(what, sizeof what, "%s (%s)", pc->what, file);
            st_ret = store_http_error(pc->kind, code, x.error_code, what, pc->have_token);
        } else if (rc == CURLE_OK) {
            snprintf(reason, sizeof reason, "HTTP %ld", code);
        } else if (!store_curl_transient(h, rc)) {
            char eb[CURL_ERROR_SIZE + 64];
            store_curl_reason(h, rc, errbuf, eb, sizeof eb);
            st_ret = store_source_fail(KILN_SOURCE_OTHER, KILN_ERR_IO, "%s: %s", rec_url, eb);
        } else if (rc == CURLE_OPERATION_TIMEDOUT) {
            snprintf(reason, sizeof reason, "stalled: no data for %ld s", pc->net.stall_s);
        } else {
            store_url_clean(errbuf[0] ? errbuf : curl_easy_strerror(rc), reason, sizeof reason);
        }
        if (st_ret || done) break;
        /* a transient failure: start over from the original URL, resuming;
         * attempts that moved bytes don't count against the limit */
        attempts = x.have > have0 ? 1 : attempts + 1;
        hops = 0;
        left_origin = 0;
        snprintf(cur, sizeof cur, "%s", url);
        if (attempts >= pc->net.max_attempts) {
            st_ret = store_source_fail(KILN_SOURCE_TRANSIENT, KILN_ERR_IO,
                                       "%s: giving up after %d attempts (%s); %llu bytes kept, pull again to resume",
                                       file, attempts, reason, (unsigned long long)x.have);
            break;
        }
        long delay = store_net_delay(&pc->net, attempts);
        char msg[700];
        snprintf(msg, sizeof msg, "%s; retrying in %.1f s", reason, (double)delay / 1000.0);
        emit(&x, "retry", msg);
        store_net_sleep(&pc->net, delay);
    }
    curl_easy_cleanup(h);
    if (!st_ret && fsync(x.fd) != 0) st_ret = base_fail(KILN_ERR_IO, "writing %s: %s", part_p, strerror(errno));
    close(x.fd);
    if (st_ret) return st_ret;

    if (expect && x.have != expect) {
        *quarantine = 1;
        return base_fail(KILN_ERR_FORMAT, "artifact %s: wrong length: got %llu bytes, the manifest says %llu", file,
                         (unsigned long long)x.have, (unsigned long long)expect);
    }
    emit(&x, "verify", NULL);
    if (store_sha256_file(part_p, sha_out, NULL, pc->pp ? pc->pp->progress : NULL, pc->pp ? pc->pp->user : NULL,
                          file) != 0)
        return base_fail(KILN_ERR_IO, "cannot read %s: %s", part_p, strerror(errno));
    if (want_sha && strcmp(sha_out, want_sha)) {
        *quarantine = 1;
        return base_fail(KILN_ERR_FORMAT, "artifact %s: sha256 mismatch: got %s, expected %s", file, sha_out, want_sha);
    }
    if (rename(part_p, final_p) != 0) return base_fail(KILN_ERR_IO, "cannot rename %s: %s", part_p, strerror(errno));
    unlink(meta_p);
    *len_out = x.have;
    emit(&x, "done", NULL);
    return KILN_OK;
}

/* ---- the pack ---- */

typedef store_artifact artifact;

/* The file name of a URL's last path segment, made safe. */
static void file_from_url(const char *url, char *out, size_t cap) {
    const char *end = url + strcspn(url, "?#");
    const char *b = end;
    while (b > url && b[-1] != '/') b--;
    size_t n = 0;
    while (b < end && *b == '.') b++;
    for (; b < end && n + 1 < cap; b++) {
        char c = *b;
        out[n++] = (isalnum((unsigned char)c) || c == '.' || c == '_' || c == '-') ? c : '-';
    }
    out[n] = 0;
    if (!store_file_ok(out)) snprintf(out, cap, "model.gguf");
}

static int resolve_url(const char *base, const char *rel, char *out, size_t cap) {
    CURLU *u = curl_url();
    char *s = NULL;
    int ok = u && curl_url_set(u, CURLUPART_URL, base, 0) == CURLUE_OK &&
             curl_url_set(u, CURLUPART_URL, rel, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_URL, &s, 0) == CURLUE_OK && strlen(s) < cap;
    if (ok) snprintf(out, cap, "%s", s);
    curl_free(s);
    curl_url_cleanup(u);
    return ok ? 0 : -1;
}

/* Reads a pack manifest fetched from url: {"name"?, "artifacts": [{"url",
 * "path"?, "role"?, "sha256"?, "length"?, "license"?}]}. */
static kiln_status parse_remote(const char *path, const char *url, artifact *arts, int *n_out, char *name,
                                size_t name_cap) {
    char shown[600];
    store_url_clean(url, shown, sizeof shown);
    char *txt = store_read_text(path, 1 << 20, NULL);
    json_error_t je;
    json_t *m = txt ? json_loads(txt, 0, &je) : NULL;
    free(txt);
    json_t *list = json_object_get(m, "artifacts");
    if (!json_is_array(list) || !json_array_size(list) || json_array_size(list) > MAX_ARTIFACTS) {
        json_decref(m);
        return base_fail(KILN_ERR_FORMAT, "%s is not a pack manifest (an object with 1..%d \"artifacts\")", shown,
                         MAX_ARTIFACTS);
    }
    snprintf(name, name_cap, "%s",
             json_string_value(json_object_get(m, "name")) ? json_string_value(json_object_get(m, "name")) : "");
    kiln_status st = KILN_OK;
    size_t i;
    json_t *a;
    json_array_foreach(list, i, a) {
        artifact *t = &arts[i];
        memset(t, 0, sizeof *t);
        const char *u = json_string_value(json_object_get(a, "url"));
        const char *p = json_string_value(json_object_get(a, "path"));
        const char *r = json_string_value(json_object_get(a, "role"));
        const char *h = json_string_value(json_object_get(a, "sha256"));
        const char *l = json_string_value(json_object_get(a, "license"));
        json_int_t len = json_integer_value(json_object_get(a, "length"));
        if (!u || resolve_url(url, u, t->url, sizeof t->url) != 0) {
            st = base_fail(KILN_ERR_FORMAT, "%s: artifact %zu has no valid \"url\"", shown, i);
            break;
        }
        if (p)
            snprintf(t->file, sizeof t->file, "%s", p);
        else
            file_from_url(t->url, t->file, sizeof t->file);
        if (!store_file_ok(t->file)) {
            st = base_fail(KILN_ERR_FORMAT, "%s: artifact path '%s' is not a plain file name", shown, t->file);
            break;
        }
        for (size_t k = 0; k < i; k++)
            if (!strcmp(arts[k].file, t->file))
                st = base_fail(KILN_ERR_FORMAT, "%s: artifact '%s' listed twice", shown, t->file);
        if (h && !store_hex_ok(h))
            st = base_fail(KILN_ERR_FORMAT, "%s: artifact %s: sha256 is not 64 lowercase hex digits", shown, t->file);
        if (st) break;
        snprintf(t->role, sizeof t->role, "%s", r ? r : i == 0 ? "model" : "companion");
        if (h) snprintf(t->sha, sizeof t->sha, "%s", h);
        if (l) snprintf(t->license, sizeof t->license, "%s", l);
        t->length = len > 0 ? (uint64_t)len : 0;
    }
    if (!st) *n_out = (int)json_array_size(list);
    json_decref(m);
    return st;
}

static int url_is_manifest(const char *url) {
    size_t n = strcspn(url, "?#");
    return n > 5 && !strncasecmp(url + n - 5, ".json", 5);
}

/* Takes the pull lock of key into *fd, waiting (cancellably) while
 * another process holds it: one transfer per pinned source, and the one
 * that waited finds the pack installed. */
static kiln_status lock_source(kiln_store *s, pull_ctx *pc, const char *key, int *fd) {
    char lockp[PATH_MAX];
    *fd = -1;
    if (store_path(lockp, "%s/locks/%s.lock", s->root, key)) return KILN_ERR_INVALID_ARG;
    int waited = 0;
    while ((*fd = store_lock(lockp, LOCK_EX | LOCK_NB)) < 0) {
        if (errno != EWOULDBLOCK) return base_fail(KILN_ERR_IO, "lock %s: %s", lockp, strerror(errno));
        if (!waited++ && pc->pp && pc->pp->progress) {
            kiln_store_progress p = {.event = "waiting", .eta = -1, .message = "another process is pulling this model"};
            pc->pp->progress(&p, pc->pp->user);
        }
        if (cancelled(pc)) return base_fail(KILN_ERR_CANCELLED, "pull cancelled while waiting for another pull");
        store_net_sleep(&pc->net, 100);
    }
    return KILN_OK;
}

static void source_key(const char *origin, char key[40]) {
    char hex[STORE_ID_LEN + 1], keysrc[4200];
    snprintf(keysrc, sizeof keysrc, "kiln-pull\n%s", origin);
    store_sha256_hex(keysrc, strlen(keysrc), hex);
    snprintf(key, 40, "%.32s", hex);
}

/* An installed healthy pack of origin (and sha256 for its first artifact)
 * gets the name (moving it when move is set, as a pull of a reference
 * updates its name); 1 when there was one. */
static int reuse(kiln_store *s, pull_ctx *pc, const char *origin, const char *sha, const char *norm, int move,
                 char *id_out, kiln_status *st) {
    char id[STORE_ID_LEN + 1];
    if (!store_find_origin(s, origin, sha && *sha ? sha : NULL, id)) return 0;
    *st = norm[0] ? kiln_store_copy(s, id, norm, move) : KILN_OK;
    if (!*st && pc->pp && pc->pp->progress) {
        kiln_store_progress p = {.event = "published", .eta = 0, .message = id};
        pc->pp->progress(&p, pc->pp->user);
    }
    if (!*st && id_out) memcpy(id_out, id, STORE_ID_LEN + 1);
    return 1;
}

/* Downloads every artifact into dir and publishes the pack under norm.
 * dir is consumed on integrity failures (quarantined) and on success. */
static kiln_status fetch_publish(kiln_store *s, pull_ctx *pc, const char *dir, const artifact *arts, int n_arts,
                                 const char *origin, json_t *source, const char *norm, char *id_out) {
    kiln_status st = KILN_OK;
    int quarantine = 0;
    pc->count = n_arts;
    pc->all_total = 0;
    for (int i = 0; i < n_arts; i++) {
        if (!arts[i].length) {
            pc->all_total = 0;
            break;
        }
        pc->all_total += arts[i].length;
    }
    json_t *man = json_pack("{s:s,s:s,s:[]}", "mode", "owned", "origin", origin, "artifacts");
    if (source) json_object_set(man, "source", source);
    for (int i = 0; !st && i < n_arts; i++) {
        const artifact *a = &arts[i];
        char got[STORE_ID_LEN + 1], src[4096];
        uint64_t len = 0;
        pc->index = i;
        st = pull_artifact(pc, dir, a->url, a->file, a->length, a->sha[0] ? a->sha : NULL, got, &len, &quarantine);
        if (st) break;
        pc->all_before += len;
        store_url_clean(a->url, src, sizeof src);
        json_t *ja = json_pack("{s:s,s:s,s:I,s:s,s:s}", "role", a->role, "path", a->file, "length", (json_int_t)len,
                               "sha256", got, "source", src);
        if (a->license[0]) json_object_set_new(ja, "license", json_string(a->license));
        json_array_append_new(json_object_get(man, "artifacts"), ja);
    }
    for (int i = 0; !st && i < n_arts; i++) {
        char p[PATH_MAX];
        if (store_path(p, "%s/%s", dir, arts[i].file))
            st = KILN_ERR_INVALID_ARG;
        else if ((st = store_check_text(p, arts[i].role, arts[i].file)))
            quarantine = 1;
    }
    /* the last point where a cancel wins; after it, publication commits */
    if (!st && cancelled(pc))
        st = base_fail(KILN_ERR_CANCELLED, "pull cancelled before publication; the download is kept");
    if (st && quarantine) store_quarantine(s, dir, kiln_last_error());
    if (!st) {
        char id[STORE_ID_LEN + 1];
        st = store_publish(s, dir, man, norm[0] ? norm : NULL, id);
        if (st) store_source_set(KILN_SOURCE_OTHER);
        if (!st && pc->pp && pc->pp->progress) {
            kiln_store_progress p = {.event = "published",
                                     .index = n_arts - 1,
                                     .count = n_arts,
                                     .all_done = pc->all_before,
                                     .all_total = pc->all_before,
                                     .eta = 0,
                                     .message = id};
            pc->pp->progress(&p, pc->pp->user);
        }
        if (!st && id_out) memcpy(id_out, id, STORE_ID_LEN + 1);
    }
    json_decref(man);
    return st;
}

/* A URL: the file, or the pack manifest it names (fetched fresh every
 * time, inside the source's staging). */
static kiln_status pull_url(kiln_store *s, pull_ctx *pc, const char *url, const char *name, const char *want,
                            char *norm, char *id_out) {
    char rec[4096], key[40], dir[PATH_MAX];
    store_url_clean(url, rec, sizeof rec);
    kiln_status st = store_url_origin(url, pc->auth_origin, sizeof pc->auth_origin);
    if (st) return st;
    pc->kind = STORE_SRC_URL;
    pc->what = rec;
    source_key(rec, key);
    int lk;
    if ((st = lock_source(s, pc, key, &lk))) return st;
    if (reuse(s, pc, rec, want, norm, 0, id_out, &st)) {
        store_unlock(lk);
        return st;
    }
    if ((st = store_staging(s, key, dir))) {
        store_unlock(lk);
        return st;
    }
    artifact *arts = calloc(MAX_ARTIFACTS, sizeof *arts);
    int n_arts = 1, quarantine = 0;
    char remote_name[STORE_NAME_MAX + 1] = "";
    if (!arts)
        st = base_fail(KILN_ERR_NOMEM, "out of memory");
    else if (url_is_manifest(url)) {
        char rp[PATH_MAX], sha_m[STORE_ID_LEN + 1];
        uint64_t len_m;
        const char *mf = ".remote.json";
        if (!store_path(rp, "%s/%s.part", dir, mf)) unlink(rp);
        if (!store_path(rp, "%s/%s", dir, mf)) unlink(rp);
        st = pull_artifact(pc, dir, url, mf, 0, NULL, sha_m, &len_m, &quarantine);
        if (!st) st = parse_remote(rp, url, arts, &n_arts, remote_name, sizeof remote_name);
        if (!st) unlink(rp);
        if (!st && want[0] && arts[0].sha[0] && strcmp(arts[0].sha, want))
            st = base_fail(KILN_ERR_INVALID_ARG, "--sha256 differs from the manifest's hash of %s", arts[0].file);
        if (!st && want[0]) snprintf(arts[0].sha, sizeof arts[0].sha, "%s", want);
    } else {
        snprintf(arts[0].url, sizeof arts[0].url, "%s", url);
        file_from_url(url, arts[0].file, sizeof arts[0].file);
        snprintf(arts[0].role, sizeof arts[0].role, "model");
        snprintf(arts[0].sha, sizeof arts[0].sha, "%s", want);
    }
    if (!st && !name && !(remote_name[0] && store_name_norm(remote_name, norm) == KILN_OK)) {
        store_name_from_file(url, norm);
        st = store_name_norm(norm, norm);
    }
    if (!st) st = fetch_publish(s, pc, dir, arts, n_arts, rec, NULL, norm, id_out);
    free(arts);
    store_unlock(lk);
    return st;
}

/* A hub or registry reference: resolved to a pinned plan before the lock
 * (the lock and the staging belong to the exact revision). */
static kiln_status pull_ref(kiln_store *s, pull_ctx *pc, const char *ref, const char *want, char *norm, char *id_out) {
    store_plan *plan = calloc(1, sizeof *plan);
    if (!plan) return base_fail(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = store_hub_ref(ref)
                         ? store_hub_plan(ref, &pc->net, pc->headers, pc->n_headers, pc->have_token, plan)
                         : store_registry_plan(ref, &pc->net, pc->headers, pc->n_headers, pc->have_token, plan);
    if (!st && want[0] && strcmp(plan->arts[0].sha[0] ? plan->arts[0].sha : want, want))
        st = base_fail(KILN_ERR_INVALID_ARG, "--sha256 differs from the source's hash of %s", plan->arts[0].file);
    if (!st && want[0]) snprintf(plan->arts[0].sha, sizeof plan->arts[0].sha, "%s", want);
    if (st) {
        json_decref(plan->source);
        memset(plan->bearer, 0, sizeof plan->bearer);
        free(plan);
        return st;
    }
    pc->kind = plan->kind;
    pc->what = plan->what;
    snprintf(pc->auth_origin, sizeof pc->auth_origin, "%s", plan->auth_origin);
    /* a registry's token replaces the caller's Authorization for the blobs */
    const char *hdrs[36];
    int n_hdrs = 0;
    if (plan->bearer[0]) {
        for (int i = 0; i < pc->n_headers && n_hdrs < 34; i++)
            if (strncasecmp(pc->headers[i], "authorization:", 14)) hdrs[n_hdrs++] = pc->headers[i];
        hdrs[n_hdrs++] = plan->bearer;
        pc->headers = hdrs;
        pc->n_headers = n_hdrs;
        pc->have_token = 1;
    }
    if (plan->n_unverified && pc->pp && pc->pp->progress) {
        char msg[800];
        snprintf(msg, sizeof msg,
                 "unverified: %s publishes no SHA-256 for %s%s; the hash is computed from the download", plan->what,
                 plan->unverified, plan->n_unverified > 4 ? ", ..." : "");
        kiln_store_progress p = {.event = "warning", .eta = -1, .message = msg};
        pc->pp->progress(&p, pc->pp->user);
    }
    char key[40], dir[PATH_MAX];
    source_key(plan->origin, key);
    int lk;
    st = lock_source(s, pc, key, &lk);
    if (!st && !reuse(s, pc, plan->origin, plan->arts[0].sha, norm, 1, id_out, &st)) {
        if (!(st = store_staging(s, key, dir)))
            st = fetch_publish(s, pc, dir, plan->arts, plan->n_arts, plan->origin, plan->source, norm, id_out);
    }
    if (lk >= 0) store_unlock(lk);
    json_decref(plan->source);
    memset(plan->bearer, 0, sizeof plan->bearer);
    free(plan);
    return st;
}

static kiln_status pull_any(kiln_store *s, const char *ref, const char *name, const char *sha256,
                            const kiln_store_pull_params *params, char *id_out) {
    if (!s || !ref) return base_fail(KILN_ERR_INVALID_ARG, "no store or model reference");
    store_curl_init();
    char want[STORE_ID_LEN + 1] = "", norm[STORE_NAME_MAX + 1] = "";
    kiln_status st = KILN_OK;
    if (sha256) {
        for (size_t i = 0; i < STORE_ID_LEN && sha256[i]; i++) want[i] = (char)tolower((unsigned char)sha256[i]);
        want[STORE_ID_LEN] = 0;
        if (strlen(sha256) != STORE_ID_LEN || !store_hex_ok(want))
            return base_fail(KILN_ERR_INVALID_ARG, "--sha256 needs 64 hex digits");
    }
    const int is_url = strstr(ref, "://") != NULL;
    if (name && (st = store_name_norm(name, norm))) return st;
    /* a reference is the model's name afterwards; its own rules first */
    if (!is_url && (st = store_hub_ref(ref) ? store_hub_check(ref) : store_registry_check(ref))) return st;
    if (!name && !is_url && (st = store_name_norm(ref, norm))) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", kiln_last_error());
        return base_fail(KILN_ERR_INVALID_ARG, "%s; give the model a name with --name", msg);
    }
    pull_ctx pc = {.pp = params, .count = 1};
    store_net_init(&pc.net, params);
    store_creds cr;
    if ((st = store_creds_init(&cr, params, ref))) return st;
    pc.headers = cr.hdrs;
    pc.n_headers = cr.n;
    pc.have_token = cr.have_token;
    st = is_url ? pull_url(s, &pc, ref, name, want, norm, id_out) : pull_ref(s, &pc, ref, want, norm, id_out);
    store_creds_wipe(&cr);
    return st;
}

kiln_status store_creds_init(store_creds *c, const kiln_store_pull_params *params, const char *ref) {
    memset(c, 0, sizeof *c);
    const char *env_hdr = getenv("KILN_AUTH_HEADER");
    if (params && params->headers) {
        for (int i = 0; i < params->n_headers; i++) {
            if (c->n == 32) return base_fail(KILN_ERR_INVALID_ARG, "more than 32 headers");
            c->hdrs[c->n++] = params->headers[i];
        }
    } else if (env_hdr && *env_hdr) {
        c->hdrs[c->n++] = env_hdr;
    }
    for (int i = 0; i < c->n; i++) {
        if (!c->hdrs[i] || strpbrk(c->hdrs[i], "\r\n") || !strchr(c->hdrs[i], ':'))
            return base_fail(KILN_ERR_INVALID_ARG, "header %d is not one 'Name: value' line", i + 1);
        if (!strncasecmp(c->hdrs[i], "authorization:", 14)) c->have_token = 1;
    }
    const char *token = params && params->token ? params->token : NULL;
    if (!token && !strstr(ref, "://") && store_hub_ref(ref) && store_hub_token(c->tok, sizeof c->tok)) token = c->tok;
    if (token && *token) {
        for (const char *p = token; *p; p++)
            if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
                return base_fail(KILN_ERR_INVALID_ARG, "the token holds a character a header cannot carry");
        if (strlen(token) > 1024) return base_fail(KILN_ERR_INVALID_ARG, "the token is longer than 1024 bytes");
        snprintf(c->bearer, sizeof c->bearer, "Authorization: Bearer %s", token);
        c->hdrs[c->n++] = c->bearer;
        c->have_token = 1;
    }
    return KILN_OK;
}

void store_creds_wipe(store_creds *c) {
    memset(c->tok, 0, sizeof c->tok);
    memset(c->bearer, 0, sizeof c->bearer);
}

kiln_status kiln_store_pull(kiln_store *s, const char *ref, const char *name, const char *sha256,
                            const kiln_store_pull_params *params, char *id_out) {
    store_source_set(KILN_SOURCE_OK);
    char mapped[2048];
    if (ref && store_hub_url_ref(ref, mapped, sizeof mapped)) ref = mapped; /* a hub page: its reference */
    kiln_status st = pull_any(s, ref, name, sha256, params, id_out);
    if (st && kiln_store_last_source_result() == KILN_SOURCE_OK) store_source_set(KILN_SOURCE_OTHER);
    return st;
}
