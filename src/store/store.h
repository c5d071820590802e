/*
 * store — kiln's model store: installs, imports, verifies and removes packs.
 *
 * Layout under the root (everything the store writes stays below it):
 *   packs/<id>/manifest.json   canonical JSON; id = SHA-256 of these bytes
 *   packs/<id>/<file>          read-only artifacts (symlinks for linked packs)
 *   names/<name:tag>           "<id>\n"; a '/' of the name is "%2F" here
 *   state/<id>.json            mutable facts: damaged reason, verify stamps
 *   leases/<id>.lock           shared flock per loaded pack
 *   leases/<id>.<pid>.<n>      one file per live lease, so rm can name it
 *   locks/<key>.lock           one per pull source; never deleted
 *   .lock                      the mutation lock (publish, remove, gc)
 *   .staging/<key>/            downloads and copies in progress (*.part)
 *   quarantine/<stamp>-<key>/  failed payloads and removals, for gc
 *
 * store.c    names, publish, list/info, resolve and leases, verify, rm, gc
 * fsutil.c   hashing, atomic writes, tree removal, locks
 * import.c   copy / move / link of local files (a model file, or an image
 *            pack's directory)
 * image.c    the check that lets the store hold image packs
 * pull.c     downloads into staging (resume, verify, publish)
 * http.c     bounded metadata requests, URL and credential rules
 * hub.c      Hugging Face references: revision, tree, file choice
 * registry.c Ollama registry references: manifest, layers
 * inspect.c  a remote GGUF header read through Range requests
 * defaults.c a pack's chat template, system prompt, options, license
 */
#ifndef KILN_STORE_H
#define KILN_STORE_H

#include "kiln.h"

#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <sys/stat.h>

#define STORE_NAME_MAX 200                    /* bytes of "name:tag" */
#define STORE_ID_LEN 64                       /* hex digits of a pack id */
#define STORE_ID_PREFIX_MIN 4                 /* hex digits an id prefix needs (kiln ls prints 12) */
#define STORE_STAGING_MAX_AGE (60.0 * 60.0)   /* install-time cleanup, seconds */
#define STORE_GC_MAX_AGE (24.0 * 60.0 * 60.0) /* gc threshold, seconds */

struct kiln_store {
    char root[PATH_MAX];
};

/* ---- http.c ---- */

enum { STORE_SRC_URL = 0, STORE_SRC_HUB = 1, STORE_SRC_REGISTRY = 2 };
enum { STORE_FOLLOW_NONE = 0, STORE_FOLLOW_SAME = 1, STORE_FOLLOW_ALL = 2 };
#define STORE_MAX_REDIRECTS 10

/* Retry and cancel settings shared by metadata requests and downloads
 * (KILN_PULL_STALL_SECONDS, KILN_PULL_RETRIES, KILN_PULL_BACKOFF_MS). */
typedef struct store_net {
    const volatile int *cancel;
    kiln_store_progress_fn progress; /* hears "retry" events */
    void *user;
    long stall_s;
    int max_attempts; /* consecutive attempts without progress */
    long backoff_ms;  /* first retry delay; doubles, capped at 30 s */
} store_net;

void store_net_init(store_net *n, const kiln_store_pull_params *pp);
int store_net_cancelled(const store_net *n);
void store_net_sleep(const store_net *n, long ms);
long store_net_delay(const store_net *n, int attempt);
/* msg without a leading "PATH: " (a reader's message about a file in the
 * store's staging, whose path means nothing to the user). */
const char *store_without_path(const char *msg, const char *path);
/* Whether a failed transfer (curl is the CURL handle it ran on, may be NULL)
 * is worth retrying: timeouts, resets and the like are; a host name that
 * does not resolve and a refused connection are answers, not accidents. */
int store_curl_transient(void *curl, int curl_code);
/* The reason a failed transfer gives, cleaned of queries and user-info. */
void store_curl_reason(void *curl, int curl_code, const char *errbuf, char *out, size_t cap);
void store_curl_init(void);
long store_env_long(const char *name, long def, long lo, long hi);

int store_is_loopback(const char *host);
/* Checks the scheme (HTTPS, or HTTP to loopback), refuses user-info and
 * writes the origin "scheme://host:port". */
kiln_status store_url_origin(const char *url, char *origin, size_t cap);
/* url without user-info, query and fragment: the only form messages and
 * records show. */
void store_url_clean(const char *url, char *out, size_t cap);
/* Percent-encodes in (keeping '/' when keep_slash); -1 when out is small. */
int store_url_escape(const char *in, char *out, size_t cap, int keep_slash);
/* The SHA-256 an ETag names ("\"<64 hex>\""), lowercased; 0 when it is
 * anything else (a Git blob id, a weak validator). */
int store_etag_sha256(const char *etag, char out[STORE_ID_LEN + 1]);

/* One GET (or HEAD) with a bounded body.  Caller headers go only to
 * auth_origin (NULL: nowhere) and never again once a redirect left it.
 * Transient failures (connection, timeout, 408, 429, 5xx) are retried
 * with backoff; KILN_OK means an answer arrived, whatever its code.  With
 * a range, a server that answers 200 sets range_ignored and nothing of
 * the body is kept. */
typedef struct store_http {
    /* request */
    const char *url;
    const char *accept;
    const char *const *headers;
    int n_headers;
    const char *auth_origin;
    const char *what;                /* how messages name it; NULL: the cleaned URL */
    int head;                        /* HEAD instead of GET */
    int follow;                      /* STORE_FOLLOW_* */
    uint64_t range_start, range_len; /* range_len 0: no Range */
    size_t max_body;                 /* 0: 1 MiB */
    /* response (of the last hop) */
    long code;
    char *body; /* NUL-terminated, malloc'd; store_http_done */
    size_t len, cap;
    int overflow, range_ignored, nomem;
    int64_t content_length; /* -1 unknown */
    uint64_t linked_size;
    int has_linked_size;
    char content_range[128], etag[160], linked_etag[160], repo_commit[64], error_code[64];
    char docker_digest[100], www_auth[512];
    char link_next[2048]; /* Link rel="next" */
    char location[4096];  /* of an unfollowed redirect; never persisted */
    char final_url[2048]; /* cleaned */
    /* internal */
    void *curl;
    const store_net *net;
} store_http;

kiln_status store_http_get(store_http *h, const store_net *net);
void store_http_done(store_http *h);

/* Source results (kiln_store_last_source_result): set, and fail with a
 * message. */
void store_source_set(kiln_store_source_result r);
kiln_status store_source_fail(kiln_store_source_result r, kiln_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Maps an error answer of a source (kind STORE_SRC_*; error_code is the
 * hub's X-Error-Code or "") to its source result and one line naming
 * what (a reference, never a URL query or body). */
kiln_status store_http_error(int kind, long code, const char *error_code, const char *what, int have_token);

/* ---- pull plans: what to fetch, made by hub.c / registry.c, run by
 * pull.c ---- */

#define STORE_MAX_ARTIFACTS 64

typedef struct store_artifact {
    char url[4096];             /* the pinned source URL: never a signed one */
    char file[256];             /* name in the pack */
    char role[32];              /* model, shard, mmproj, template, system, params, license */
    char sha[STORE_ID_LEN + 1]; /* expected SHA-256; "" unknown */
    char license[128];
    uint64_t length; /* expected; 0 unknown */
} store_artifact;

typedef struct store_plan {
    int kind;              /* STORE_SRC_* */
    char origin[1400];     /* the manifest's "origin": the pinned source */
    char what[300];        /* how messages name the source */
    char auth_origin[512]; /* the one origin credentials go to */
    store_artifact arts[STORE_MAX_ARTIFACTS];
    int n_arts;
    json_t *source;       /* provenance for the manifest (owned), or NULL */
    int n_unverified;     /* artifacts whose SHA-256 the source did not publish */
    char unverified[200]; /* the first few of them */
    char bearer[1200];    /* a registry's token ("Authorization: Bearer ..."), to use in place of the
                                  caller's Authorization for the artifacts; "" none; wiped after the pull */
} store_plan;

/* hub.c: 1 when ref starts with hf.co/ or huggingface.co/. */
int store_hub_ref(const char *ref);
/* Checks a reference's form (no network). */
kiln_status store_hub_check(const char *ref);
kiln_status store_registry_check(const char *ref);
/* A hub page or file URL as its reference (hf.co/...): 1 with out set,
 * 0 for a URL that is downloaded as it is. */
int store_hub_url_ref(const char *url, char *out, size_t cap);
/* $HF_ENDPOINT without trailing '/', or https://huggingface.co. */
const char *store_hub_endpoint(char *buf, size_t cap);
/* Resolves a hub reference into plan (headers go to the hub's origin). */
kiln_status store_hub_plan(const char *ref, const store_net *net, const char *const *headers, int n_headers,
                           int have_token, store_plan *plan);

/* The hub token as huggingface_hub finds it ($HF_TOKEN, else its token
 * file); 1 when there is one. */
int store_hub_token(char *buf, size_t cap);

/* registry.c: resolves an Ollama registry reference into plan. */
kiln_status store_registry_plan(const char *ref, const store_net *net, const char *const *headers, int n_headers,
                                int have_token, store_plan *plan);

/* pull.c: the caller's headers (or $KILN_AUTH_HEADER) and the bearer token
 * (params->token, else the hub's for a hub reference), checked to be one
 * header line each. */
typedef struct store_creds {
    const char *hdrs[34];
    int n, have_token;
    char tok[1100], bearer[1200];
} store_creds;
kiln_status store_creds_init(store_creds *c, const kiln_store_pull_params *params, const char *ref);
void store_creds_wipe(store_creds *c);

/* store.c: the most common type of the 2-D tensors (the weights), by name. */
const char *store_dominant_type(const void *gguf_file);

/* ---- defaults.c ---- */

/* When model_path is the model of a store pack (its folder holds the pack's
 * manifest.json), the path of the pack's artifact of this role ("mmproj")
 * into out (cap bytes) and 1; 0 when there is none or the path is not in a
 * pack.  Reads the manifest only. */
int store_pack_companion(const char *model_path, const char *role, char *out, size_t cap);

#define STORE_TEXT_MAX (1u << 20) /* bytes of a template, system, params, license */

/* Checks a text artifact (roles template, system, params, license,
 * messages) is what its role needs; other roles pass. */
kiln_status store_check_text(const char *path, const char *role, const char *file);
/* The defaults of the pack in pack_dir: {"template", "template_format",
 * "system", "options", "license": [...], "messages"}, each key only when
 * the pack has it (an empty object for a plain GGUF pack). */
json_t *store_pack_defaults(const char *pack_dir, json_t *man);

/* ---- fsutil.c ---- */

/* snprintf into a PATH_MAX buffer; returns -1 (with the last error set) on
 * truncation. */
int store_path(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int store_mkdirs(const char *path);
/* Writes data to path through path.tmp.<pid>, fsyncs it and the directory,
 * and renames; mode applies to the result. */
int store_write_atomic(const char *path, const void *data, size_t len, mode_t mode);
char *store_read_text(const char *path, size_t max, size_t *len_out);
/* SHA-256 of a file as 64 hex digits; st_out (may be NULL) receives the
 * descriptor's stat, taken after hashing.  progress/user (may be NULL) see
 * "verify" events for artifact (index of count). */
int store_sha256_file(const char *path, char hex[STORE_ID_LEN + 1], struct stat *st_out,
                      kiln_store_progress_fn progress, void *user, const char *artifact);
void store_sha256_hex(const void *data, size_t len, char hex[STORE_ID_LEN + 1]);
/* Removes a tree without following symlinks; returns bytes freed or -1. */
int64_t store_rmtree(const char *path);
/* Bytes under path and the newest mtime of anything in it (seconds). */
uint64_t store_tree_size(const char *path, double *newest_mtime);
/* Opens (creating) a lock file and flocks it with op (LOCK_SH/LOCK_EX,
 * maybe | LOCK_NB).  Returns the fd or -1 (errno set). */
int store_lock(const char *path, int op);
void store_unlock(int fd);
double store_wall_now(void);

/* ---- store.c ---- */

/* Checks and normalizes a name ("x" -> "x:latest") into out. */
kiln_status store_name_norm(const char *in, char out[STORE_NAME_MAX + 1]);
/* Builds the default name from a file name or URL path ("Foo.Q4.gguf" ->
 * "foo.q4:latest"). */
void store_name_from_file(const char *file, char out[STORE_NAME_MAX + 1]);
/* 1 when s is a safe artifact file name (no separators, no leading dot). */
int store_file_ok(const char *s);
int store_hex_ok(const char *s);
/* The staging directory for key, created; cleans stale staging first. */
kiln_status store_staging(kiln_store *s, const char *key, char dir[PATH_MAX]);
/* Moves a staging directory into quarantine with a reason file. */
void store_quarantine(kiln_store *s, const char *dir, const char *reason);
/* Checks the staged GGUF (header, tensors, supported architecture) and
 * reports its architecture, dominant weight type and the family its
 * architecture does not tell ("rerank", "decision", else ""). */
kiln_status store_check_gguf(const char *path, const char *artifact, char arch[64], char quant[16], char family[16]);
/* The same for a whisper.cpp GGML file (builtin.c): arch "whisper". */
kiln_status store_check_whisper(const char *path, const char *artifact, char arch[64], char quant[16]);
/* image.c: the same for an image pack's pack.json (its artifacts beside
 * it): the pack's schemas as opening it checks them, loading nothing; arch
 * "image", quant the DiT's weight type. */
kiln_status store_check_image(const char *path, const char *artifact, char arch[64], char quant[16]);
/* Publishes a staging directory whose artifacts are in place: fills in the
 * manifest's arch/quantization/size, writes it last, renames the directory
 * to packs/<id> and binds name (may be NULL).  The directory is consumed
 * (renamed or quarantined).  manifest is borrowed. */
kiln_status store_publish(kiln_store *s, const char *dir, json_t *manifest, const char *name,
                          char id_out[STORE_ID_LEN + 1]);
/* Looks for a published, healthy pack whose manifest "origin" is origin and,
 * if sha256 is given, whose first artifact has that hash. */
int store_find_origin(kiln_store *s, const char *origin, const char *sha256, char id_out[STORE_ID_LEN + 1]);
/* Points name at id (under the mutation lock).  A pack the name pointed at
 * before goes when no other name is left on it and nothing leases it (gc
 * removes it later otherwise). */
kiln_status store_bind_name(kiln_store *s, const char *name, const char *id);
/* Hard-links artifact file of pack id to the path to (another pack being
 * made), keeping the artifact's stamp valid when it was. */
kiln_status store_share_artifact(kiln_store *s, const char *id, const char *file, const char *to);
/* Emits one event when progress is not NULL. */
void store_emit(kiln_store_progress_fn progress, void *user, const kiln_store_progress *p);

#endif
