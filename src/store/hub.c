/* Hugging Face references, as Ollama and llama.cpp spell them:
 *   hf.co/ORG/REPO[:QUANT][@REVISION]       a quantization of a GGUF repo
 *   hf.co/ORG/REPO/PATH.gguf[@REVISION]     one file (all shards if split)
 *   hf.co/ORG/REPO/PATH.bin[@REVISION]      one whisper.cpp GGML file
 * (huggingface.co/ works too).  The hub's address is $HF_ENDPOINT, as
 * huggingface_hub reads it (default https://huggingface.co).
 *
 * Resolution reads bounded JSON only: the revision is pinned to its commit
 * (/api/models/ORG/REPO/revision/REV), the tree at that commit lists the
 * files with their LFS metadata, the choice follows llama.cpp (the quant
 * named, else Q4_K_M, else Q8_0, else the first model; every shard of a
 * split model; the mmproj nearest the model), and a HEAD of each chosen
 * resolve URL confirms the commit, length and SHA-256 (X-Repo-Commit,
 * X-Linked-Size, X-Linked-Etag) without following the redirect to the CDN.
 * A file hash comes only from LFS metadata: a Git blob id never stands in
 * for a SHA-256. */
#include "store/store.h"

#include "base/base.h"
#include "gguf/gguf.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define HUB_MAX_FILES 100000
#define HUB_MAX_PAGES 100
#define HUB_JSON_MAX (16u << 20)

typedef struct hub_file {
    char *path;
    uint64_t size;
    char sha[STORE_ID_LEN + 1]; /* from lfs.oid; "" when not an LFS file */
    int lfs;
} hub_file;

typedef struct hub_ref {
    char host[32]; /* "hf.co" or "huggingface.co", as typed */
    char org[100], repo[100];
    char quant[65];  /* "" = default choice */
    char path[1024]; /* file form; "" otherwise */
    char rev[129];   /* "" = main */
} hub_ref;

int store_hub_ref(const char *ref) {
    return !strncasecmp(ref, "hf.co/", 6) || !strncasecmp(ref, "huggingface.co/", 15);
}

/* ORG and REPO: [A-Za-z0-9._-], a letter or digit at both ends, no "--"
 * or "..", at most 96 bytes (the hub's own rules). */
static int repo_part_ok(const char *s) {
    size_t n = strlen(s);
    if (!n || n > 96 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1])) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '.' && c != '_' && c != '-') return 0;
        if (i && (c == '.' || c == '-') && s[i - 1] == c) return 0;
    }
    return 1;
}

static int rev_ok(const char *s) {
    size_t n = strlen(s);
    if (!n || n > 128 || strstr(s, "..") || s[0] == '/' || s[n - 1] == '/') return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '.' && c != '_' && c != '-' && c != '/') return 0;
    }
    return 1;
}

static int quant_ok(const char *s) {
    size_t n = strlen(s);
    if (!n || n > 64) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '.' && c != '_' && c != '-') return 0;
    }
    return 1;
}

/* A repository path: relative, no empty, "." or ".." segment, no control
 * characters or backslashes. */
static int repo_path_ok(const char *p) {
    size_t n = strlen(p);
    if (!n || n > 1000 || p[0] == '/' || p[n - 1] == '/') return 0;
    for (const char *seg = p; *seg;) {
        size_t k = strcspn(seg, "/");
        if (!k || (k == 1 && seg[0] == '.') || (k == 2 && seg[0] == '.' && seg[1] == '.')) return 0;
        seg += k + (seg[k] == '/');
    }
    for (const unsigned char *c = (const unsigned char *)p; *c; c++)
        if (*c < 0x20 || *c == 0x7f || *c == '\\') return 0;
    return 1;
}

/* strcasestr without _GNU_SOURCE */
static const char *find_ci(const char *hay, const char *needle) {
    size_t k = strlen(needle);
    for (; *hay; hay++)
        if (!strncasecmp(hay, needle, k)) return hay;
    return NULL;
}

static int ends_with_ci(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcasecmp(s + n - k, suffix);
}

static kiln_status parse_ref(const char *ref, hub_ref *r) {
    memset(r, 0, sizeof *r);
    const char *rest = ref + (ref[1] == 'f' || ref[1] == 'F' ? 6 : 15);
    snprintf(r->host, sizeof r->host, "%.*s", (int)(rest - ref - 1), ref);
    char buf[1400];
    if (strlen(rest) >= sizeof buf) return base_fail(KILN_ERR_INVALID_ARG, "%.60s...: reference too long", ref);
    snprintf(buf, sizeof buf, "%s", rest);
    char *at = strrchr(buf, '@');
    if (at) {
        *at = 0;
        snprintf(r->rev, sizeof r->rev, "%s", at + 1);
        if (!rev_ok(r->rev))
            return base_fail(KILN_ERR_INVALID_ARG, "%s: '%s' is not a revision (a branch, tag or commit)", ref, at + 1);
    }
    char *s1 = strchr(buf, '/');
    if (!s1)
        return base_fail(KILN_ERR_INVALID_ARG, "%s: expected %s/ORG/REPO[:QUANT] or %s/ORG/REPO/FILE.gguf", ref,
                         r->host, r->host);
    *s1 = 0;
    char *repo = s1 + 1, *s2 = strchr(repo, '/');
    if (s2) {
        *s2 = 0;
        snprintf(r->path, sizeof r->path, "%s", s2 + 1);
        if (!repo_path_ok(r->path) || !(ends_with_ci(r->path, ".gguf") || ends_with_ci(r->path, ".bin")))
            return base_fail(KILN_ERR_INVALID_ARG,
                             "%s: the file must be a relative path ending in .gguf (or .bin, a whisper.cpp model)",
                             ref);
    } else {
        char *colon = strchr(repo, ':');
        if (colon) {
            *colon = 0;
            snprintf(r->quant, sizeof r->quant, "%s", colon + 1);
            if (!quant_ok(r->quant))
                return base_fail(KILN_ERR_INVALID_ARG, "%s: '%s' is not a quantization tag", ref, colon + 1);
        }
    }
    if (strlen(buf) >= sizeof r->org || strlen(repo) >= sizeof r->repo || !repo_part_ok(buf) || !repo_part_ok(repo))
        return base_fail(KILN_ERR_INVALID_ARG, "%s: '%.100s/%.100s' is not a valid repository id", ref, buf, repo);
    memcpy(r->org, buf, strlen(buf) + 1);
    memcpy(r->repo, repo, strlen(repo) + 1);
    return KILN_OK;
}

/* ---- split names and quantization tags ---- */

static const char *base_name(const char *p) {
    const char *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

/* A model file: a .gguf that is not a projector, an importance matrix or a
 * speculative-decoding sidecar. */
static int is_model_file(const char *path) {
    if (!ends_with_ci(path, ".gguf")) return 0;
    const char *b = base_name(path);
    static const char *const not_model[] = {"mmproj", "imatrix", "mtp-", "eagle3-", "dflash-"};
    for (size_t i = 0; i < sizeof not_model / sizeof not_model[0]; i++)
        if (find_ci(b, not_model[i])) return 0;
    return 1;
}

/* "TAG" followed by '.' or '-' somewhere in path, case-insensitively. */
static int has_tag(const char *path, const char *tag) {
    size_t k = strlen(tag);
    for (const char *p = path; (p = find_ci(p, tag)); p++)
        if (p[k] == '.' || p[k] == '-') return 1;
    return 0;
}

/* The bit width a quantization tag names: the first number in it ("Q4_K_M"
 * 4, "BF16" 16); 0 when none. */
static int tag_bits(const char *tag) {
    const char *d = tag + strcspn(tag, "0123456789");
    return *d ? atoi(d) : 0;
}

/* The tag of a model file name: its last '-' or '.' separated word before
 * .gguf (and the split suffix). */
static void file_tag(const char *path, char *out, size_t cap) {
    int idx;
    size_t plen;
    gguf_split_name(path, &idx, &plen);
    const char *b = base_name(path);
    size_t off = (size_t)(b - path);
    size_t end = plen > off ? plen : off;
    size_t st = end;
    while (st > off && path[st - 1] != '-' && path[st - 1] != '.') st--;
    snprintf(out, cap, "%.*s", (int)(end - st), path + st);
}

/* ---- the hub's answers ---- */

typedef struct hub_ctx {
    const store_net *net;
    const char *const *headers;
    int n_headers;
    int have_token;
    char endpoint[512], origin[512];
    char what[300];
} hub_ctx;

static kiln_status hub_get(hub_ctx *c, const char *url, store_http *h, int head) {
    memset(h, 0, sizeof *h);
    h->url = url;
    h->accept = head ? NULL : "application/json";
    h->headers = c->headers;
    h->n_headers = c->n_headers;
    h->auth_origin = c->origin;
    h->what = c->what;
    h->head = head;
    h->follow = STORE_FOLLOW_SAME;
    h->max_body = HUB_JSON_MAX;
    return store_http_get(h, c->net);
}

static kiln_status get_commit(hub_ctx *c, const hub_ref *r, char commit[41]) {
    char rev_esc[400], url[1200];
    if (store_url_escape(r->rev[0] ? r->rev : "main", rev_esc, sizeof rev_esc, 0)) return KILN_ERR_INVALID_ARG;
    snprintf(url, sizeof url, "%s/api/models/%s/%s/revision/%s", c->endpoint, r->org, r->repo, rev_esc);
    store_http h;
    kiln_status st = hub_get(c, url, &h, 0);
    if (!st && h.code != 200) st = store_http_error(STORE_SRC_HUB, h.code, h.error_code, c->what, c->have_token);
    json_t *j = st ? NULL : json_loadb(h.body ? h.body : "", h.len, 0, NULL);
    const char *sha = json_string_value(json_object_get(j, "sha"));
    if (!st) {
        size_t n = sha ? strlen(sha) : 0;
        int ok = n == 40;
        for (size_t i = 0; ok && i < n; i++) ok = isxdigit((unsigned char)sha[i]) && !isupper((unsigned char)sha[i]);
        if (!ok)
            st = store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT,
                                   "%s: unverified: the hub named no commit for revision '%s'", c->what,
                                   r->rev[0] ? r->rev : "main");
        else
            memcpy(commit, sha, 41);
    }
    json_decref(j);
    store_http_done(&h);
    return st;
}

static void free_files(hub_file *f, int n) {
    for (int i = 0; i < n; i++) free(f[i].path);
    free(f);
}

/* Lists every file at commit, following the tree API's pages (Link
 * rel="next", on the hub's own origin only). */
static kiln_status list_tree(hub_ctx *c, const hub_ref *r, const char *commit, hub_file **out, int *n_out) {
    char url[2200];
    snprintf(url, sizeof url, "%s/api/models/%s/%s/tree/%s?recursive=true", c->endpoint, r->org, r->repo, commit);
    hub_file *files = NULL;
    int n = 0, cap = 0;
    kiln_status st = KILN_OK;
    for (int page = 0; !st; page++) {
        if (page == HUB_MAX_PAGES) {
            st = store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT,
                                   "%s: the file listing has more than %d pages", c->what, HUB_MAX_PAGES);
            break;
        }
        store_http h;
        st = hub_get(c, url, &h, 0);
        if (!st && h.code != 200) st = store_http_error(STORE_SRC_HUB, h.code, h.error_code, c->what, c->have_token);
        json_t *j = st ? NULL : json_loadb(h.body ? h.body : "", h.len, 0, NULL);
        if (!st && !json_is_array(j))
            st = store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT,
                                   "%s: unverified: the file listing is not a JSON array", c->what);
        size_t i;
        json_t *e;
        json_array_foreach(st ? NULL : j, i, e) {
            const char *type = json_string_value(json_object_get(e, "type"));
            const char *path = json_string_value(json_object_get(e, "path"));
            if (!type || strcmp(type, "file") || !path) continue;
            if (!repo_path_ok(path)) continue; /* never a name that could leave the repository */
            if (n == HUB_MAX_FILES) {
                st = store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT, "%s: more than %d files", c->what,
                                       HUB_MAX_FILES);
                break;
            }
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                hub_file *nf = realloc(files, (size_t)cap * sizeof *nf);
                if (!nf) {
                    st = base_fail(KILN_ERR_NOMEM, "out of memory");
                    break;
                }
                files = nf;
            }
            hub_file *f = &files[n];
            memset(f, 0, sizeof *f);
            f->path = strdup(path);
            if (!f->path) {
                st = base_fail(KILN_ERR_NOMEM, "out of memory");
                break;
            }
            n++;
            json_int_t sz = json_integer_value(json_object_get(e, "size"));
            f->size = sz > 0 ? (uint64_t)sz : 0;
            json_t *lfs = json_object_get(e, "lfs");
            if (json_is_object(lfs)) {
                const char *oid = json_string_value(json_object_get(lfs, "oid"));
                json_int_t lsz = json_integer_value(json_object_get(lfs, "size"));
                char low[STORE_ID_LEN + 1];
                size_t k = oid ? strlen(oid) : 0;
                for (size_t q = 0; q < k && q < STORE_ID_LEN; q++) low[q] = (char)tolower((unsigned char)oid[q]);
                low[k < STORE_ID_LEN ? k : STORE_ID_LEN] = 0;
                if (k == STORE_ID_LEN && store_hex_ok(low)) {
                    memcpy(f->sha, low, sizeof f->sha);
                    f->lfs = 1;
                }
                if (lsz > 0) f->size = (uint64_t)lsz;
            }
        }
        json_decref(j);
        char next[2048];
        snprintf(next, sizeof next, "%s", h.link_next);
        store_http_done(&h);
        if (st || !next[0]) break;
        char next_origin[512];
        if (store_url_origin(next, next_origin, sizeof next_origin) || strcmp(next_origin, c->origin)) {
            st = store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT,
                                   "%s: the listing's next page is on another host", c->what);
            break;
        }
        snprintf(url, sizeof url, "%s", next);
    }
    if (st) {
        free_files(files, n);
        return st;
    }
    *out = files;
    *n_out = n;
    return KILN_OK;
}

/* ---- choosing the files ---- */

static int find_path(const hub_file *f, int n, const char *path) {
    for (int i = 0; i < n; i++)
        if (!strcasecmp(f[i].path, path)) return i;
    return -1;
}

static int first_model(const hub_file *f, int n, const char *tag) {
    for (int i = 0; i < n; i++) {
        int idx;
        size_t pl;
        if (!is_model_file(f[i].path) || (tag && !has_tag(f[i].path, tag))) continue;
        if (gguf_split_name(f[i].path, &idx, &pl) > 1 && idx != 1) continue;
        return i;
    }
    return -1;
}

/* The projector for model: a .gguf with "mmproj" in its name in the
 * model's folder or one above it, the deepest first, then the nearest in
 * bit width. */
static int best_mmproj(const hub_file *f, int n, const char *model, int model_bits) {
    const char *mb = base_name(model);
    size_t mdir = (size_t)(mb - model);
    int best = -1, best_diff = 0;
    size_t best_depth = 0;
    for (int i = 0; i < n; i++) {
        const char *p = f[i].path, *b = base_name(p);
        size_t dir = (size_t)(b - p);
        if (!ends_with_ci(p, ".gguf") || !find_ci(b, "mmproj")) continue;
        if (dir > mdir || strncmp(p, model, dir)) continue; /* not in the model's folder or above */
        char tag[65];
        file_tag(p, tag, sizeof tag);
        int diff = abs(tag_bits(tag) - model_bits);
        if (best < 0 || dir > best_depth || (dir == best_depth && diff < best_diff)) {
            best = i;
            best_depth = dir;
            best_diff = diff;
        }
    }
    return best;
}

/* Lists some model files' tags for a "no such quant" message. */
static void list_quants(const hub_file *f, int n, char *out, size_t cap) {
    size_t o = 0;
    out[0] = 0;
    int shown = 0;
    for (int i = 0; i < n && o + 40 < cap; i++) {
        int idx;
        size_t pl;
        if (!is_model_file(f[i].path) || (gguf_split_name(f[i].path, &idx, &pl) > 1 && idx != 1)) continue;
        char tag[65];
        file_tag(f[i].path, tag, sizeof tag);
        o += (size_t)snprintf(out + o, cap - o, "%s%s", shown++ ? ", " : "", tag);
    }
    if (!shown) snprintf(out, cap, "no GGUF model files");
}

/* ---- the plan ---- */

static void pack_file_name(const char *path, char *out, size_t cap) {
    const char *b = base_name(path);
    size_t n = 0;
    while (*b == '.') b++;
    for (; *b && n + 1 < cap; b++) {
        unsigned char ch = (unsigned char)*b;
        out[n++] = (isalnum(ch) || ch == '.' || ch == '_' || ch == '-') ? (char)ch : '-';
    }
    out[n] = 0;
}

static kiln_status add_artifact(hub_ctx *c, const hub_ref *r, const char *commit, const hub_file *f, const char *role,
                                store_plan *plan) {
    if (plan->n_arts == STORE_MAX_ARTIFACTS)
        return store_source_fail(KILN_SOURCE_OTHER, KILN_ERR_UNSUPPORTED, "%s: more than %d files", c->what,
                                 STORE_MAX_ARTIFACTS);
    store_artifact *a = &plan->arts[plan->n_arts];
    memset(a, 0, sizeof *a);
    char esc[3100];
    if (store_url_escape(f->path, esc, sizeof esc, 1))
        return base_fail(KILN_ERR_INVALID_ARG, "%s: path too long", c->what);
    if ((size_t)snprintf(a->url, sizeof a->url, "%s/%s/%s/resolve/%s/%s", c->endpoint, r->org, r->repo, commit, esc) >=
        sizeof a->url)
        return base_fail(KILN_ERR_INVALID_ARG, "%s: path too long", c->what);
    pack_file_name(f->path, a->file, sizeof a->file);
    if (!store_file_ok(a->file))
        return store_source_fail(KILN_SOURCE_OTHER, KILN_ERR_FORMAT, "%s: '%s' cannot be a file name in the store",
                                 c->what, f->path);
    for (int i = 0; i < plan->n_arts; i++)
        if (!strcmp(plan->arts[i].file, a->file))
            return store_source_fail(KILN_SOURCE_OTHER, KILN_ERR_FORMAT, "%s: two chosen files are both named %s",
                                     c->what, a->file);
    snprintf(a->role, sizeof a->role, "%s", role);

    /* the resolve URL's own metadata, without following it to the CDN */
    store_http h;
    kiln_status st = hub_get(c, a->url, &h, 1);
    char shown[400];
    snprintf(shown, sizeof shown, "%.200s (%.180s)", c->what, f->path);
    if (!st && (h.code < 200 || h.code >= 400))
        st = store_http_error(STORE_SRC_HUB, h.code, h.error_code, shown, c->have_token);
    if (!st && h.repo_commit[0] && strcmp(h.repo_commit, commit))
        st = store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT,
                               "%s: unverified: the file answers for commit %.12s, not %.12s", shown, h.repo_commit,
                               commit);
    char linked[STORE_ID_LEN + 1] = "";
    if (!st && h.linked_etag[0] && !store_etag_sha256(h.linked_etag, linked))
        st = store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT, "%s: unverified: its LFS ETag is not a SHA-256",
                               shown);
    if (!st && linked[0] && f->lfs && strcmp(linked, f->sha))
        st = store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT,
                               "%s: unverified: the listing and the file disagree on its SHA-256", shown);
    if (!st && h.has_linked_size && f->size && h.linked_size != f->size)
        st = store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT,
                               "%s: unverified: the listing says %llu bytes, the file %llu", shown,
                               (unsigned long long)f->size, (unsigned long long)h.linked_size);
    if (!st) {
        snprintf(a->sha, sizeof a->sha, "%s", f->lfs ? f->sha : linked);
        a->length = h.has_linked_size ? h.linked_size : f->size;
        if (!a->length && h.code == 200 && h.content_length > 0) a->length = (uint64_t)h.content_length;
        if (!a->sha[0] && plan->n_unverified < 4) {
            size_t o = strlen(plan->unverified);
            snprintf(plan->unverified + o, sizeof plan->unverified - o, "%s%s", o ? ", " : "", a->file);
        }
        if (!a->sha[0]) plan->n_unverified++;
        plan->n_arts++;
    }
    store_http_done(&h);
    return st;
}

kiln_status store_hub_check(const char *ref) {
    hub_ref r;
    return parse_ref(ref, &r);
}

/* A page or file URL of the hub as the reference it names:
 *   https://huggingface.co/ORG/REPO                    hf.co/ORG/REPO
 *   https://huggingface.co/ORG/REPO/tree/REV           hf.co/ORG/REPO@REV
 *   https://huggingface.co/ORG/REPO/blob/REV/PATH.gguf hf.co/ORG/REPO/PATH.gguf@REV
 *   (and PATH.bin, a whisper.cpp model, the same way)
 * for the hub's own origin ($HF_ENDPOINT, or huggingface.co / hf.co when
 * it is the default), without a query.  1 with out set, else 0: a URL to
 * download as it is (a .../resolve/... file URL among them). */
int store_hub_url_ref(const char *url, char *out, size_t cap) {
    char ep[512];
    store_hub_endpoint(ep, sizeof ep);
    const char *rest = NULL;
    size_t el = strlen(ep);
    if (!strncasecmp(url, ep, el) && url[el] == '/')
        rest = url + el + 1;
    else if (!getenv("HF_ENDPOINT") || !*getenv("HF_ENDPOINT")) {
        static const char *const hosts[] = {"https://huggingface.co/", "https://www.huggingface.co/", "https://hf.co/"};
        for (size_t i = 0; i < sizeof hosts / sizeof hosts[0] && !rest; i++)
            if (!strncasecmp(url, hosts[i], strlen(hosts[i]))) rest = url + strlen(hosts[i]);
    }
    if (!rest || strpbrk(rest, "?#")) return 0;
    char parts[6][1024];
    int n = 0;
    for (const char *p = rest; *p && n < 6;) {
        size_t k = strcspn(p, "/");
        if (k >= sizeof parts[0]) return 0;
        memcpy(parts[n], p, k);
        parts[n++][k] = 0;
        p += k;
        if (*p == '/') p++;
        if (n == 3 && *p && !strcmp(parts[2], "blob")) {
            /* REV, then the file's path (may hold '/') */
            size_t r = strcspn(p, "/");
            if (!r || !p[r] || r >= sizeof parts[0]) return 0;
            memcpy(parts[3], p, r);
            parts[3][r] = 0;
            snprintf(parts[4], sizeof parts[4], "%s", p + r + 1);
            n = 5;
            break;
        }
    }
    int w;
    if (n == 2)
        w = snprintf(out, cap, "hf.co/%s/%s", parts[0], parts[1]);
    else if (n == 4 && !strcmp(parts[2], "tree"))
        w = snprintf(out, cap, "hf.co/%s/%s@%s", parts[0], parts[1], parts[3]);
    else if (n == 5 && (ends_with_ci(parts[4], ".gguf") || ends_with_ci(parts[4], ".bin")))
        w = snprintf(out, cap, "hf.co/%s/%s/%s@%s", parts[0], parts[1], parts[4], parts[3]);
    else
        return 0;
    return w > 0 && (size_t)w < cap && store_hub_check(out) == KILN_OK;
}

const char *store_hub_endpoint(char *buf, size_t cap) {
    const char *e = getenv("HF_ENDPOINT");
    snprintf(buf, cap, "%s", e && *e ? e : "https://huggingface.co");
    size_t n = strlen(buf);
    while (n > 0 && buf[n - 1] == '/') buf[--n] = 0;
    return buf;
}

kiln_status store_hub_plan(const char *ref, const store_net *net, const char *const *headers, int n_headers,
                           int have_token, store_plan *plan) {
    hub_ref r;
    kiln_status st = parse_ref(ref, &r);
    if (st) return st;
    hub_ctx c = {.net = net, .headers = headers, .n_headers = n_headers, .have_token = have_token};
    store_hub_endpoint(c.endpoint, sizeof c.endpoint);
    if ((st = store_url_origin(c.endpoint, c.origin, sizeof c.origin))) return st;
    snprintf(c.what, sizeof c.what, "%.20s/%.96s/%.96s%s%.80s", r.host, r.org, r.repo, r.rev[0] ? "@" : "", r.rev);
    snprintf(plan->what, sizeof plan->what, "%s", c.what);
    snprintf(plan->auth_origin, sizeof plan->auth_origin, "%s", c.origin);
    plan->kind = STORE_SRC_HUB;

    char commit[41];
    if ((st = get_commit(&c, &r, commit))) return st;
    hub_file *files = NULL;
    int n = 0;
    if ((st = list_tree(&c, &r, commit, &files, &n))) return st;

    int primary = -1;
    if (r.path[0]) {
        primary = find_path(files, n, r.path);
        if (primary < 0)
            st = store_source_fail(KILN_SOURCE_NOT_FOUND, KILN_ERR_NOT_FOUND, "%s: no file %s at commit %.12s", c.what,
                                   r.path, commit);
    } else if (r.quant[0]) {
        primary = first_model(files, n, r.quant);
    } else {
        primary = first_model(files, n, "Q4_K_M");
        if (primary < 0) primary = first_model(files, n, "Q8_0");
        if (primary < 0) primary = first_model(files, n, NULL);
    }
    if (!st && primary < 0) {
        char have[300];
        list_quants(files, n, have, sizeof have);
        st = store_source_fail(KILN_SOURCE_NOT_FOUND, KILN_ERR_NOT_FOUND, "%s: no GGUF %s%s (the repository has: %s)",
                               c.what, r.quant[0] ? "for quantization " : "model", r.quant, have);
    }
    /* every shard of a split model, from the first */
    int idx = 1, count = 1;
    size_t plen = 0;
    if (!st) count = gguf_split_name(files[primary].path, &idx, &plen);
    for (int k = 1; !st && k <= count; k++) {
        int found = primary;
        if (count > 1) {
            char want[1100];
            snprintf(want, sizeof want, "%.*s-%05d-of-%05d.gguf", (int)plen, files[primary].path, k, count);
            found = find_path(files, n, want);
            if (found < 0) {
                st = store_source_fail(KILN_SOURCE_NOT_FOUND, KILN_ERR_NOT_FOUND, "%s: shard %d of %d of %s is missing",
                                       c.what, k, count, base_name(files[primary].path));
                break;
            }
            if (k == 1) primary = found;
        }
        st = add_artifact(&c, &r, commit, &files[found], k == 1 ? "model" : "shard", plan);
    }
    if (!st) {
        char tag[65];
        if (r.quant[0])
            snprintf(tag, sizeof tag, "%s", r.quant);
        else
            file_tag(files[primary].path, tag, sizeof tag);
        /* a projector goes with a GGUF model, never with a whisper.cpp file */
        int mm =
            ends_with_ci(files[primary].path, ".gguf") ? best_mmproj(files, n, files[primary].path, tag_bits(tag)) : -1;
        if (mm >= 0) st = add_artifact(&c, &r, commit, &files[mm], "mmproj", plan);
    }
    if (!st) {
        snprintf(plan->origin, sizeof plan->origin, "hf:%s/%s@%s:%s", r.org, r.repo, commit, files[primary].path);
        plan->source = json_pack("{s:s,s:s,s:s,s:s,s:s}", "type", "huggingface", "endpoint", c.endpoint, "repo", "",
                                 "revision", r.rev[0] ? r.rev : "main", "commit", commit);
        char id[200];
        snprintf(id, sizeof id, "%s/%s", r.org, r.repo);
        json_object_set_new(plan->source, "repo", json_string(id));
        json_object_set_new(plan->source, "file", json_string(files[primary].path));
    }
    free_files(files, n);
    return st;
}

/* The token huggingface_hub would use: $HF_TOKEN (or the older
 * $HUGGING_FACE_HUB_TOKEN), else the file `huggingface-cli login` writes
 * ($HF_TOKEN_PATH, else $HF_HOME/token, else ~/.cache/huggingface/token).
 * Returns 1 with the token in buf. */
int store_hub_token(char *buf, size_t cap) {
    const char *e = getenv("HF_TOKEN");
    if (!e || !*e) e = getenv("HUGGING_FACE_HUB_TOKEN");
    char *txt = NULL;
    if (!e || !*e) {
        char path[PATH_MAX];
        const char *tp = getenv("HF_TOKEN_PATH"), *home = getenv("HF_HOME"), *xdg = getenv("XDG_CACHE_HOME"),
                   *h = getenv("HOME");
        int r = -1;
        if (tp && *tp)
            r = store_path(path, "%s", tp);
        else if (home && *home)
            r = store_path(path, "%s/token", home);
        else if (xdg && *xdg)
            r = store_path(path, "%s/huggingface/token", xdg);
        else if (h && *h)
            r = store_path(path, "%s/.cache/huggingface/token", h);
        if (r) return 0;
        txt = store_read_text(path, 4096, NULL);
        if (!txt) return 0;
        e = txt;
    }
    while (*e == ' ' || *e == '\t' || *e == '\n' || *e == '\r') e++;
    size_t n = strcspn(e, " \t\r\n");
    int ok = n > 0 && n < cap;
    if (ok) snprintf(buf, cap, "%.*s", (int)n, e);
    if (txt) {
        memset(txt, 0, strlen(txt));
        free(txt);
    }
    return ok;
}
