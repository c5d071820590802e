/* The store's bookkeeping: names, publication, listing, leases, verify,
 * remove and gc.  Mutations of names/ and packs/ happen under the mutation
 * lock (ROOT/.lock, exclusive); resolve takes it shared just long enough to
 * read a name and take its lease, so rm can never delete a pack between a
 * lookup and its lease. */
#include "store/store.h"

#include "base/base.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/quant.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

struct kiln_store_lease {
    int fd;                /* holds LOCK_SH on leases/<id>.lock */
    char record[PATH_MAX]; /* leases/<id>.<pid>.<n> */
    char path[PATH_MAX];
    char id[STORE_ID_LEN + 1];
    char *defaults; /* JSON text, read with the verified pack */
};

void store_emit(kiln_store_progress_fn progress, void *user, const kiln_store_progress *p) {
    if (progress) progress(p, user);
}

int kiln_store_progress_json(const kiln_store_progress *p, char *buf, size_t cap) {
    json_t *o = json_object();
    json_object_set_new(o, "status", json_string(p->event ? p->event : ""));
    if (p->artifact) json_object_set_new(o, "artifact", json_string(p->artifact));
    json_object_set_new(o, "index", json_integer(p->index));
    json_object_set_new(o, "count", json_integer(p->count));
    json_object_set_new(o, "completed", json_integer((json_int_t)p->done));
    json_object_set_new(o, "total", json_integer((json_int_t)p->total));
    json_object_set_new(o, "all_completed", json_integer((json_int_t)p->all_done));
    json_object_set_new(o, "all_total", json_integer((json_int_t)p->all_total));
    json_object_set_new(o, "rate", json_real(p->rate));
    json_object_set_new(o, "eta", json_real(p->eta));
    if (p->message) json_object_set_new(o, "message", json_string(p->message));
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    int n = s ? (int)strlen(s) : 0;
    if (cap) snprintf(buf, cap, "%s", s ? s : "");
    free(s);
    return n;
}

/* ---- opening ---- */

static const char *const k_subdirs[] = {"packs", "names", "state", "leases", "locks", ".staging", "quarantine"};

kiln_status kiln_store_open(const char *root, kiln_store **out) {
    if (!out) return base_fail(KILN_ERR_INVALID_ARG, "no output handle");
    *out = NULL;
    char dir[PATH_MAX];
    const char *env = getenv("KILN_STORE"), *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    int r;
    if (root && *root)
        r = store_path(dir, "%s", root);
    else if (env && *env)
        r = store_path(dir, "%s", env);
    else if (xdg && *xdg)
        r = store_path(dir, "%s/kiln", xdg);
    else if (home && *home)
        r = store_path(dir, "%s/.local/share/kiln", home);
    else
        return base_fail(KILN_ERR_INVALID_ARG, "no store root: set KILN_STORE, XDG_DATA_HOME or HOME");
    if (r) return KILN_ERR_INVALID_ARG;
    size_t n = strlen(dir);
    /* room for the store's own names below the root */
    if (n > PATH_MAX - 512) return base_fail(KILN_ERR_INVALID_ARG, "store root %.60s... is too long", dir);
    while (n > 1 && dir[n - 1] == '/') dir[--n] = 0;
    for (size_t i = 0; i < sizeof k_subdirs / sizeof k_subdirs[0]; i++) {
        char sub[PATH_MAX];
        if (store_path(sub, "%s/%s", dir, k_subdirs[i])) return KILN_ERR_INVALID_ARG;
        if (store_mkdirs(sub) != 0)
            return base_fail(KILN_ERR_IO, "store %s: cannot create %s: %s", dir, sub, strerror(errno));
    }
    kiln_store *s = calloc(1, sizeof *s);
    if (!s) return base_fail(KILN_ERR_NOMEM, "out of memory");
    memcpy(s->root, dir, n + 1);
    *out = s;
    return KILN_OK;
}

void kiln_store_close(kiln_store *s) { free(s); }
const char *kiln_store_root(const kiln_store *s) { return s ? s->root : ""; }
void kiln_store_free_string(char *str) { free(str); }

static int mut_lock(kiln_store *s, int op) {
    char p[PATH_MAX];
    if (store_path(p, "%s/.lock", s->root)) return -1;
    int fd = store_lock(p, op);
    if (fd < 0) base_fail(KILN_ERR_IO, "store lock %s: %s", p, strerror(errno));
    return fd;
}

/* ---- names ---- */

static int name_char(int c) { return isalnum(c) || c == '.' || c == '_' || c == '-'; }

/* A name is [HOST[:PORT]/]...[SEGMENT/]BASE[:TAG], as the references kiln
 * pulls spell models: "qwen3:0.6b", "registry.example/ns/model:tag",
 * "hf.co/org/repo:Q4_K_M", "hf.co/org/repo/file.gguf@main".  Segments are
 * [A-Za-z0-9._-] and begin with a letter or digit; only the first of
 * several may carry a port, only the last one '@' (a revision); the tag
 * follows the last ':' after the last '/'.  No ".." anywhere, so a name
 * is never a path: on disk each '/' becomes "%2F" (name_file). */
kiln_status store_name_norm(const char *in, char out[STORE_NAME_MAX + 1]) {
    if (!in || !*in) return base_fail(KILN_ERR_INVALID_ARG, "empty model name");
    size_t len = strlen(in);
    const char *last_slash = strrchr(in, '/');
    const char *base = last_slash ? last_slash + 1 : in;
    const char *colon = strchr(base, ':');
    if (len + (colon ? 0 : 7) > STORE_NAME_MAX)
        return base_fail(KILN_ERR_INVALID_ARG, "model name '%.40s...' is longer than %d bytes", in, STORE_NAME_MAX);
    if (!*base || base == colon || (colon && !colon[1]) || (colon && strchr(colon + 1, ':')))
        return base_fail(KILN_ERR_INVALID_ARG, "model name '%s' must be NAME or NAME:TAG", in);
    if (strstr(in, "..")) return base_fail(KILN_ERR_INVALID_ARG, "model name '%s' may not contain '..'", in);
    int n_seg = 0;
    for (const char *seg = in; seg < base; n_seg++) {
        const char *end = strchr(seg, '/');
        const char *port = memchr(seg, ':', (size_t)(end - seg));
        if (end == seg || !isalnum((unsigned char)*seg))
            return base_fail(KILN_ERR_INVALID_ARG,
                             "model name '%s': each part before a '/' must begin with a letter or digit", in);
        if (port && (seg != in || port + 1 == end))
            return base_fail(KILN_ERR_INVALID_ARG, "model name '%s': only a host may carry a ':PORT'", in);
        for (const char *c = seg; c < end; c++) {
            if (port && c > port ? !isdigit((unsigned char)*c) : c != port && !name_char((unsigned char)*c))
                return base_fail(KILN_ERR_INVALID_ARG,
                                 "model name '%s': only letters, digits, '.', '_', '-', '/' and ':' are allowed", in);
        }
        seg = end + 1;
    }
    if (n_seg > 7) return base_fail(KILN_ERR_INVALID_ARG, "model name '%s' has more than 8 parts", in);
    const char *at = strchr(base, '@');
    for (const char *c = base; *c; c++)
        if (c != colon && c != at && !name_char((unsigned char)*c))
            return base_fail(KILN_ERR_INVALID_ARG,
                             "model name '%s': only letters, digits, '.', '_', '-', '/' and ':' are allowed", in);
    if (at && (strchr(at + 1, '@') || at == base || !at[1] || at + 1 == colon || at - 1 == colon || at[1] == '.' ||
               at[1] == '-'))
        return base_fail(KILN_ERR_INVALID_ARG, "model name '%s': '@' may only mark one revision", in);
    if (base[0] == '.' || base[0] == '-' || (colon && (colon[1] == '.' || colon[1] == '-')))
        return base_fail(KILN_ERR_INVALID_ARG, "model name '%s' may not start with '.' or '-'", in);
    char tmp[STORE_NAME_MAX + 1]; /* out may be in */
    snprintf(tmp, sizeof tmp, "%s%s", in, colon ? "" : ":latest");
    memcpy(out, tmp, sizeof tmp);
    return KILN_OK;
}

/* names/<file> of a normalized name: '/' written as "%2F" ('%' is never
 * in a name, so the mapping is one-to-one). */
static int name_file(kiln_store *s, const char *norm, char p[PATH_MAX]) {
    char enc[3 * STORE_NAME_MAX + 1];
    size_t o = 0;
    for (const char *c = norm; *c && o + 4 < sizeof enc; c++) {
        if (*c == '/') {
            memcpy(enc + o, "%2F", 3);
            o += 3;
        } else {
            enc[o++] = *c;
        }
    }
    enc[o] = 0;
    return store_path(p, "%s/names/%s", s->root, enc);
}

/* The name a names/ entry stands for; -1 for anything else. */
static int name_decode(const char *file, char out[STORE_NAME_MAX + 1]) {
    size_t o = 0;
    for (const char *c = file; *c; c++) {
        if (o >= STORE_NAME_MAX) return -1;
        if (*c == '%') {
            if (strncmp(c, "%2F", 3)) return -1;
            out[o++] = '/';
            c += 2;
        } else {
            out[o++] = *c;
        }
    }
    out[o] = 0;
    char norm[STORE_NAME_MAX + 1];
    return store_name_norm(out, norm) == KILN_OK && !strcmp(norm, out) ? 0 : -1;
}

void store_name_from_file(const char *file, char out[STORE_NAME_MAX + 1]) {
    const char *b = strrchr(file, '/');
    b = b ? b + 1 : file;
    char tmp[STORE_NAME_MAX + 1];
    size_t n = 0;
    for (; b[n] && b[n] != '?' && b[n] != '#' && n < 96; n++) {
        unsigned char c = (unsigned char)b[n];
        tmp[n] = name_char(c) ? (char)tolower(c) : '-';
    }
    tmp[n] = 0;
    if (n > 5 && !strcmp(tmp + n - 5, ".gguf")) tmp[n -= 5] = 0;
    if (n > 5 && !strcmp(tmp + n - 5, ".json")) tmp[n -= 5] = 0;
    size_t i = 0; /* drop leading separators and any ".." */
    while (tmp[i] == '.' || tmp[i] == '-') i++;
    for (char *d; (d = strstr(tmp + i, ".."));) d[0] = '-';
    snprintf(out, STORE_NAME_MAX + 1, "%.96s:latest", tmp[i] ? tmp + i : "model"); /* tmp holds <= 96 */
}

int store_file_ok(const char *s) {
    if (!s || !*s || s[0] == '.' || strlen(s) > 200) return 0;
    for (; *s; s++)
        if (!name_char((unsigned char)*s)) return 0;
    return 1;
}

int store_hex_ok(const char *s) {
    if (!s || strlen(s) != STORE_ID_LEN) return 0;
    for (; *s; s++)
        if (!isxdigit((unsigned char)*s) || isupper((unsigned char)*s)) return 0;
    return 1;
}

static int name_lookup(kiln_store *s, const char *norm, char id[STORE_ID_LEN + 1]) {
    char p[PATH_MAX];
    if (name_file(s, norm, p)) return -1;
    char *txt = store_read_text(p, 256, NULL);
    if (!txt) return -1;
    int ok = strlen(txt) >= STORE_ID_LEN && (txt[STORE_ID_LEN] == '\n' || !txt[STORE_ID_LEN]);
    if (ok) {
        memcpy(id, txt, STORE_ID_LEN);
        id[STORE_ID_LEN] = 0;
        ok = store_hex_ok(id);
    }
    free(txt);
    return ok ? 0 : -1;
}

static int pack_exists(kiln_store *s, const char *id) {
    char p[PATH_MAX];
    struct stat st;
    return !store_path(p, "%s/packs/%s/manifest.json", s->root, id) && stat(p, &st) == 0;
}

/* The one pack whose id begins with prefix (lowercase hex, at least
 * STORE_ID_PREFIX_MIN digits): 1 found, 0 none, -1 ambiguous (message set). */
static int find_prefix(kiln_store *s, const char *prefix, char id[STORE_ID_LEN + 1]) {
    size_t n = strlen(prefix);
    if (n < STORE_ID_PREFIX_MIN || n >= STORE_ID_LEN) return 0;
    for (const char *p = prefix; *p; p++)
        if (!isxdigit((unsigned char)*p) || isupper((unsigned char)*p)) return 0;
    char dir[PATH_MAX];
    if (store_path(dir, "%s/packs", s->root)) return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    char other[STORE_ID_LEN + 1] = "";
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!store_hex_ok(e->d_name) || strncmp(e->d_name, prefix, n) || !pack_exists(s, e->d_name)) continue;
        if (found++)
            memcpy(other, e->d_name, STORE_ID_LEN + 1);
        else
            memcpy(id, e->d_name, STORE_ID_LEN + 1);
    }
    closedir(d);
    if (found > 1) {
        base_fail(KILN_ERR_INVALID_ARG,
                  "id prefix '%s' is ambiguous: %d packs begin with it (%.16s..., %.16s...); give more digits", prefix,
                  found, id, other);
        return -1;
    }
    return found;
}

/* Finds the pack of a name, a full id or a unique id prefix (a name wins
 * over a prefix).  norm_out (may be NULL) receives the normalized name, or
 * "" when ref was an id. */
static kiln_status find_ref(kiln_store *s, const char *ref, char id[STORE_ID_LEN + 1], char *norm_out) {
    if (norm_out) norm_out[0] = 0;
    if (store_hex_ok(ref) && pack_exists(s, ref)) {
        memcpy(id, ref, STORE_ID_LEN + 1);
        return KILN_OK;
    }
    char norm[STORE_NAME_MAX + 1];
    kiln_status st = store_name_norm(ref, norm);
    if (!st && name_lookup(s, norm, id) == 0 && pack_exists(s, id)) {
        if (norm_out) snprintf(norm_out, STORE_NAME_MAX + 1, "%s", norm);
        return KILN_OK;
    }
    const int pr = find_prefix(s, ref, id);
    if (pr < 0) return KILN_ERR_INVALID_ARG;
    if (pr > 0) return KILN_OK;
    if (st) return store_name_norm(ref, norm); /* the name's own complaint */
    return base_fail(KILN_ERR_NOT_FOUND, "model '%s' is not in the store %s", ref, s->root);
}

static void drop_if_unnamed(kiln_store *s, const char *id);

kiln_status store_bind_name(kiln_store *s, const char *name, const char *id) {
    char p[PATH_MAX], line[STORE_ID_LEN + 2], old[STORE_ID_LEN + 1];
    if (name_file(s, name, p)) return KILN_ERR_INVALID_ARG;
    const int had = name_lookup(s, name, old) == 0 && strcmp(old, id);
    snprintf(line, sizeof line, "%s\n", id);
    if (store_write_atomic(p, line, strlen(line), 0644) != 0)
        return base_fail(KILN_ERR_IO, "cannot write name %s: %s", p, strerror(errno));
    if (had) drop_if_unnamed(s, old); /* the name moved: its old pack may be nobody's now */
    return KILN_OK;
}

/* Calls fn for every name bound to id (or to any pack when id is NULL). */
static void each_name(kiln_store *s, const char *id, void (*fn)(const char *name, const char *nid, void *ud),
                      void *ud) {
    char dir[PATH_MAX];
    if (store_path(dir, "%s/names", s->root)) return;
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char name[STORE_NAME_MAX + 1], nid[STORE_ID_LEN + 1];
        if (e->d_name[0] == '.' || strstr(e->d_name, ".tmp.") || name_decode(e->d_name, name)) continue;
        if (name_lookup(s, name, nid) == 0 && (!id || !strcmp(nid, id))) fn(name, nid, ud);
    }
    closedir(d);
}

/* ---- manifests and state ---- */

static json_t *load_json(const char *path) {
    char *txt = store_read_text(path, 16u << 20, NULL);
    if (!txt) return NULL;
    json_t *j = json_loads(txt, 0, NULL);
    free(txt);
    return j;
}

static json_t *load_manifest(kiln_store *s, const char *id) {
    char p[PATH_MAX];
    if (store_path(p, "%s/packs/%s/manifest.json", s->root, id)) return NULL;
    json_t *m = load_json(p);
    if (!m) base_fail(KILN_ERR_FORMAT, "pack %.12s: unreadable manifest %s", id, p);
    return m;
}

static json_t *load_state(kiln_store *s, const char *id) {
    char p[PATH_MAX];
    json_t *st = store_path(p, "%s/state/%s.json", s->root, id) ? NULL : load_json(p);
    if (!json_is_object(st)) {
        json_decref(st);
        st = json_object();
    }
    if (!json_is_object(json_object_get(st, "stamps"))) json_object_set_new(st, "stamps", json_object());
    return st;
}

static void save_state(kiln_store *s, const char *id, json_t *st) {
    char p[PATH_MAX];
    char *txt = json_dumps(st, JSON_COMPACT | JSON_SORT_KEYS);
    if (txt && !store_path(p, "%s/state/%s.json", s->root, id) && store_write_atomic(p, txt, strlen(txt), 0644) != 0)
        base_log(BASE_LOG_WARN, "store: cannot write %s: %s", p, strerror(errno));
    free(txt);
}

static const char *jstr(json_t *o, const char *key) {
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

static uint64_t juint(json_t *o, const char *key) {
    json_int_t v = json_integer_value(json_object_get(o, key));
    return v > 0 ? (uint64_t)v : 0;
}

static int64_t ts_ns(struct timespec t) { return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec; }

static json_t *make_stamp(const struct stat *st, const char *sha) {
    return json_pack("{s:I,s:I,s:I,s:I,s:I,s:s}", "dev", (json_int_t)st->st_dev, "ino", (json_int_t)st->st_ino, "size",
                     (json_int_t)st->st_size, "mtime", (json_int_t)ts_ns(st->st_mtim), "ctime",
                     (json_int_t)ts_ns(st->st_ctim), "sha256", sha);
}

static int stamp_matches(json_t *stamp, const struct stat *st, const char *sha) {
    return json_is_object(stamp) && juint(stamp, "dev") == (uint64_t)st->st_dev &&
           juint(stamp, "ino") == (uint64_t)st->st_ino && juint(stamp, "size") == (uint64_t)st->st_size &&
           json_integer_value(json_object_get(stamp, "mtime")) == ts_ns(st->st_mtim) &&
           json_integer_value(json_object_get(stamp, "ctime")) == ts_ns(st->st_ctim) &&
           !strcmp(jstr(stamp, "sha256"), sha);
}

kiln_status store_share_artifact(kiln_store *s, const char *id, const char *file, const char *to) {
    char from[PATH_MAX];
    if (store_path(from, "%s/packs/%s/%s", s->root, id, file)) return KILN_ERR_INVALID_ARG;
    int lk = mut_lock(s, LOCK_EX);
    if (lk < 0) return KILN_ERR_IO;
    json_t *state = load_state(s, id);
    json_t *stamp = json_object_get(json_object_get(state, "stamps"), file);
    struct stat before, after;
    const int was_ok = stat(from, &before) == 0 && stamp_matches(stamp, &before, jstr(stamp, "sha256"));
    kiln_status st = KILN_OK;
    if (link(from, to) != 0) {
        st = base_fail(KILN_ERR_IO, "cannot share %s with the new model: %s", file, strerror(errno));
    } else if (was_ok && stat(from, &after) == 0) {
        /* a new link changes the inode's ctime, not its bytes: the stamp that
         * held before still holds, so the next load does not re-hash */
        json_object_set_new(json_object_get(state, "stamps"), file, make_stamp(&after, jstr(stamp, "sha256")));
        save_state(s, id, state);
    }
    json_decref(state);
    store_unlock(lk);
    return st;
}

/* Checks one artifact of pack id.  Linked artifacts must still be a symlink
 * to the recorded target.  force re-hashes even when the stamp matches.
 * On success the stamp in state is refreshed. */
static kiln_status check_artifact(kiln_store *s, const char *id, json_t *man, json_t *art, json_t *state, int force,
                                  kiln_store_progress_fn progress, void *user) {
    const char *file = jstr(art, "path"), *sha = jstr(art, "sha256"), *src = jstr(art, "source");
    /* a linked pack's artifacts are links to the imported files, but for the
     * texts kiln_store_save_as wrote into it (source "saved", never a path) */
    int linked = !strcmp(jstr(man, "mode"), "linked") && strcmp(src, "saved");
    uint64_t length = juint(art, "length");
    char p[PATH_MAX];
    if (!store_file_ok(file) || store_path(p, "%s/packs/%s/%s", s->root, id, file))
        return base_fail(KILN_ERR_FORMAT, "pack %.12s: bad artifact path '%s'", id, file);
    struct stat st;
    if (lstat(p, &st) != 0)
        return base_fail(KILN_ERR_IO, "artifact %s of pack %.12s is missing: %s", file, id, strerror(errno));
    if (linked) {
        char target[PATH_MAX];
        ssize_t n = S_ISLNK(st.st_mode) ? readlink(p, target, sizeof target - 1) : -1;
        if (n < 0)
            return base_fail(KILN_ERR_FORMAT, "linked artifact %s: the store's link %s is not a symlink", file, p);
        target[n] = 0;
        if (strcmp(target, src))
            return base_fail(KILN_ERR_FORMAT, "linked artifact %s points to %s, not the imported %s", file, target,
                             src);
        if (stat(p, &st) != 0)
            return base_fail(KILN_ERR_IO, "linked target %s of %s is unavailable: %s", src, file, strerror(errno));
    }
    const char *what = linked ? "linked target" : "artifact";
    const char *where = linked ? src : file;
    if (!S_ISREG(st.st_mode)) return base_fail(KILN_ERR_FORMAT, "%s %s is not a regular file", what, where);
    if ((uint64_t)st.st_size != length)
        return base_fail(KILN_ERR_FORMAT, "%s %s changed: size %llu, expected %llu", what, where,
                         (unsigned long long)st.st_size, (unsigned long long)length);
    json_t *stamps = json_object_get(state, "stamps");
    if (!force && stamp_matches(json_object_get(stamps, file), &st, sha)) return KILN_OK;
    char got[STORE_ID_LEN + 1];
    struct stat after;
    if (store_sha256_file(p, got, &after, progress, user, file) != 0)
        return base_fail(KILN_ERR_IO, "cannot read %s %s: %s", what, where, strerror(errno));
    if (strcmp(got, sha))
        return base_fail(KILN_ERR_FORMAT, "%s %s changed: sha256 %s, expected %s", what, where, got, sha);
    if ((uint64_t)after.st_size != length)
        return base_fail(KILN_ERR_FORMAT, "%s %s changed while it was hashed", what, where);
    json_object_set_new(stamps, file, make_stamp(&after, sha));
    return KILN_OK;
}

/* ---- staging, quarantine, format check, publish ---- */

kiln_status store_staging(kiln_store *s, const char *key, char dir[PATH_MAX]) {
    char base[PATH_MAX];
    if (store_path(base, "%s/.staging", s->root)) return KILN_ERR_INVALID_ARG;
    DIR *d = opendir(base);
    double now = store_wall_now();
    struct dirent *e;
    /* a stopped process leaves its staging behind; anything touched within
     * the hour, or whose pull lock is held, may still be in use */
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, key)) continue;
        char p[PATH_MAX], lk[PATH_MAX];
        double newest = 0;
        if (store_path(p, "%s/%s", base, e->d_name)) continue;
        store_tree_size(p, &newest);
        if (now - newest < STORE_STAGING_MAX_AGE) continue;
        int fd = -1;
        if (!store_path(lk, "%s/locks/%s.lock", s->root, e->d_name) && access(lk, F_OK) == 0 &&
            (fd = store_lock(lk, LOCK_EX | LOCK_NB)) < 0)
            continue;
        if (store_rmtree(p) >= 0) base_log(BASE_LOG_INFO, "store: removed stale staging %s", p);
        store_unlock(fd);
    }
    if (d) closedir(d);
    if (store_path(dir, "%s/%s", base, key)) return KILN_ERR_INVALID_ARG;
    if (store_mkdirs(dir) != 0) return base_fail(KILN_ERR_IO, "cannot create staging %s: %s", dir, strerror(errno));
    return KILN_OK;
}

void store_quarantine(kiln_store *s, const char *dir, const char *reason) {
    static atomic_uint seq;
    const char *key = strrchr(dir, '/');
    key = key ? key + 1 : dir;
    char q[PATH_MAX], r[PATH_MAX];
    if (store_path(q, "%s/quarantine/%lld-%ld-%u-%s", s->root, (long long)store_wall_now(), (long)getpid(),
                   atomic_fetch_add(&seq, 1), key))
        return;
    if (rename(dir, q) != 0) {
        base_log(BASE_LOG_WARN, "store: cannot quarantine %s: %s; removing it", dir, strerror(errno));
        store_rmtree(dir);
        return;
    }
    if (!store_path(r, "%s/reason.txt", q)) {
        char line[1024];
        int n = snprintf(line, sizeof line, "%s\n", reason);
        store_write_atomic(r, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1, 0644);
    }
}

const char *store_without_path(const char *msg, const char *path) {
    const size_t n = strlen(path);
    return !strncmp(msg, path, n) && msg[n] == ':' && msg[n + 1] == ' ' ? msg + n + 2 : msg;
}

kiln_status store_check_gguf(const char *path, const char *artifact, char arch[64], char quant[16], char family[16]) {
    family[0] = 0;
    if (kiln_is_whisper_file(path)) return store_check_whisper(path, artifact, arch, quant);
    gguf_file *f;
    /* the reader names the file by its path, here one inside the store's staging */
    if (gguf_open(path, &f))
        return base_fail(KILN_ERR_FORMAT, "artifact %s is not a valid GGUF: %s", artifact,
                         store_without_path(kiln_last_error(), path));
    gguf_get_cstr(f, "general.architecture", arch, 64, "");
    if (!arch[0]) {
        gguf_close(f);
        return base_fail(KILN_ERR_FORMAT, "artifact %s: GGUF has no general.architecture", artifact);
    }
    if (!model_arch_find(arch)) {
        gguf_close(f);
        return base_fail(KILN_ERR_UNSUPPORTED, "artifact %s: architecture '%s' is not supported (kiln runs %s)",
                         artifact, arch, model_arch_list());
    }
    if (gguf_n_tensors(f) == 0) {
        gguf_close(f);
        return base_fail(KILN_ERR_FORMAT, "artifact %s: GGUF has no tensors", artifact);
    }
    snprintf(quant, 16, "%s", store_dominant_type(f));
    /* what the architecture does not tell: a reranker (a cls.output head)
     * and a decision pack (its configuration key) */
    if (model_gguf_is_reranker(f))
        snprintf(family, 16, "rerank");
    else if (gguf_find(f, "kiln.decision.config"))
        snprintf(family, 16, "decision");
    gguf_close(f);
    return KILN_OK;
}

const char *store_dominant_type(const void *gf) {
    const gguf_file *f = gf;
    int counts[QUANT_TYPE_COUNT] = {0};
    for (int i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (t->n_dims == 2 && t->type < QUANT_TYPE_COUNT) counts[t->type]++;
    }
    int best = QUANT_F32;
    for (int t = 0; t < QUANT_TYPE_COUNT; t++)
        if (counts[t] > counts[best]) best = t;
    const char *qn = quant_get(best)->name;
    return qn ? qn : "?";
}

kiln_status store_publish(kiln_store *s, const char *dir, json_t *manifest, const char *name,
                          char id_out[STORE_ID_LEN + 1]) {
    json_t *arts = json_object_get(manifest, "artifacts");
    int linked = !strcmp(jstr(manifest, "mode"), "linked");
    char arch[64] = "", quant[16] = "", family[16] = "", p[PATH_MAX];
    uint64_t size = 0;
    size_t i;
    json_t *a;
    json_array_foreach(arts, i, a) {
        const char *file = jstr(a, "path");
        if (!store_file_ok(file) || store_path(p, "%s/%s", dir, file)) {
            store_quarantine(s, dir, "bad artifact name");
            return base_fail(KILN_ERR_FORMAT, "bad artifact name '%s'", file);
        }
        size += juint(a, "length");
        const char *role = jstr(a, "role");
        if ((!strcmp(role, "model") || !strcmp(role, "image-pack")) && !arch[0]) {
            kiln_status st = !strcmp(role, "model") ? store_check_gguf(p, file, arch, quant, family)
                                                    : store_check_image(p, file, arch, quant);
            if (st) {
                store_quarantine(s, dir, kiln_last_error());
                return st;
            }
        }
        struct stat ps;
        /* no chmod when already read-only: it would change the ctime of a file
         * another pack shares (kiln_store_save_as), invalidating its stamp */
        const int ro = stat(p, &ps) == 0 && (ps.st_mode & 07777) == 0444;
        if (!linked && !ro && chmod(p, 0444) != 0) {
            store_quarantine(s, dir, "chmod failed");
            return base_fail(KILN_ERR_IO, "cannot make %s read-only: %s", p, strerror(errno));
        }
    }
    if (!arch[0]) {
        store_quarantine(s, dir, "no model artifact");
        return base_fail(KILN_ERR_FORMAT, "the pack has no GGUF model artifact (nor an image pack's pack.json)");
    }
    json_object_set_new(manifest, "arch", json_string(arch));
    if (family[0]) json_object_set_new(manifest, "family", json_string(family)); /* only then: other ids stay */
    json_object_set_new(manifest, "quantization", json_string(quant));
    json_object_set_new(manifest, "size", json_integer((json_int_t)size));
    json_object_set_new(manifest, "schema", json_integer(1));
    /* canonical form: sorted keys, no whitespace; the id hashes exactly the
     * bytes written, so anyone can check a manifest against its id */
    char *canon = json_dumps(manifest, JSON_COMPACT | JSON_SORT_KEYS);
    if (!canon) return base_fail(KILN_ERR_NOMEM, "out of memory");
    char id[STORE_ID_LEN + 1];
    store_sha256_hex(canon, strlen(canon), id);
    int w = store_path(p, "%s/manifest.json", dir) ? -1 : store_write_atomic(p, canon, strlen(canon), 0444);
    free(canon);
    if (w != 0) {
        kiln_status st = base_fail(KILN_ERR_IO, "cannot write manifest %s: %s", p, strerror(errno));
        store_quarantine(s, dir, kiln_last_error());
        return st;
    }
    int lk = mut_lock(s, LOCK_EX);
    if (lk < 0) return KILN_ERR_IO;
    char dst[PATH_MAX];
    kiln_status st = store_path(dst, "%s/packs/%s", s->root, id) ? KILN_ERR_INVALID_ARG : KILN_OK;
    json_t *state = st ? NULL : load_state(s, id);
    if (!st && pack_exists(s, id)) {
        if (json_is_string(json_object_get(state, "damaged"))) {
            store_quarantine(s, dst, "replaced by a fresh install");
            json_object_del(state, "damaged");
        } else {
            store_rmtree(dir); /* the same content is already published */
        }
    }
    if (!st && !pack_exists(s, id)) {
        if (rename(dir, dst) != 0) {
            st = base_fail(KILN_ERR_IO, "cannot publish %s: %s", dst, strerror(errno));
            store_quarantine(s, dir, kiln_last_error());
        } else {
            char packs[PATH_MAX];
            store_path(packs, "%s/packs/.", s->root);
            int dfd = open(packs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (dfd >= 0) {
                fsync(dfd);
                close(dfd);
            }
            /* the install time lives in the state, not the manifest: the id
             * hashes the manifest, and the same content installed twice is
             * one pack */
            json_object_set_new(state, "installed", json_integer((json_int_t)store_wall_now()));
            /* stamps of what was hashed during the transfer */
            json_t *stamps = json_object_get(state, "stamps");
            json_array_foreach(arts, i, a) {
                struct stat fst;
                if (!store_path(p, "%s/%s", dst, jstr(a, "path")) && stat(p, &fst) == 0)
                    json_object_set_new(stamps, jstr(a, "path"), make_stamp(&fst, jstr(a, "sha256")));
            }
            save_state(s, id, state);
        }
    }
    if (!st && name) st = store_bind_name(s, name, id);
    json_decref(state);
    store_unlock(lk);
    if (!st && id_out) memcpy(id_out, id, STORE_ID_LEN + 1);
    return st;
}

int store_find_origin(kiln_store *s, const char *origin, const char *sha256, char id_out[STORE_ID_LEN + 1]) {
    char dir[PATH_MAX];
    if (store_path(dir, "%s/packs", s->root)) return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (!store_hex_ok(e->d_name)) continue;
        json_t *m = load_manifest(s, e->d_name);
        json_t *first = json_array_get(json_object_get(m, "artifacts"), 0);
        json_t *state = m ? load_state(s, e->d_name) : NULL;
        if (m && !strcmp(jstr(m, "origin"), origin) && (!sha256 || !strcmp(jstr(first, "sha256"), sha256)) &&
            !json_is_string(json_object_get(state, "damaged"))) {
            memcpy(id_out, e->d_name, STORE_ID_LEN + 1);
            found = 1;
        }
        json_decref(state);
        json_decref(m);
    }
    closedir(d);
    return found;
}

/* ---- list and info ---- */

static void collect_name(const char *name, const char *nid, void *ud) {
    json_t *map = ud;
    json_t *arr = json_object_get(map, nid);
    if (!arr) json_object_set_new(map, nid, arr = json_array());
    json_array_append_new(arr, json_string(name));
}

/* "ok", "changed" (needs a re-hash), "missing" or "damaged", from stat
 * calls only; *missing (may be NULL) names the first absent artifact. */
static const char *pack_state(kiln_store *s, const char *id, json_t *man, json_t *state, const char **missing) {
    if (json_is_string(json_object_get(state, "damaged"))) return "damaged";
    int linked = !strcmp(jstr(man, "mode"), "linked");
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(man, "artifacts"), i, a) {
        char p[PATH_MAX];
        struct stat st;
        if (store_path(p, "%s/packs/%s/%s", s->root, id, jstr(a, "path")) ||
            (linked ? stat(p, &st) : lstat(p, &st)) != 0) {
            if (missing) *missing = jstr(a, "path");
            return "missing";
        }
        if (!stamp_matches(json_object_get(json_object_get(state, "stamps"), jstr(a, "path")), &st, jstr(a, "sha256")))
            return "changed";
    }
    return "ok";
}

/* Seconds since the epoch: when the pack was published (its state's
 * "installed"; a store from before that record: the manifest's mtime, which
 * publishing wrote), and when name was last bound to it (the name file's
 * mtime; cp and a re-pull move it), never before the install. */
static void entry_times(kiln_store *s, const char *name, const char *id, json_t *state, json_int_t *installed,
                        json_int_t *modified) {
    char p[PATH_MAX];
    struct stat st;
    *installed = json_integer_value(json_object_get(state, "installed"));
    if (*installed <= 0 && !store_path(p, "%s/packs/%s/manifest.json", s->root, id) && lstat(p, &st) == 0)
        *installed = (json_int_t)st.st_mtime;
    *modified = *installed;
    if (name && *name && !name_file(s, name, p) && stat(p, &st) == 0 && (json_int_t)st.st_mtime > *modified)
        *modified = (json_int_t)st.st_mtime;
}

static json_t *entry_json(kiln_store *s, const char *name, const char *id, json_t *man) {
    json_t *state = load_state(s, id);
    json_int_t installed, modified;
    entry_times(s, name, id, state, &installed, &modified);
    const char *missing = NULL;
    json_t *o =
        json_pack("{s:s,s:s,s:I,s:s,s:s,s:s,s:s}", "name", name, "id", id, "size", (json_int_t)juint(man, "size"),
                  "arch", jstr(man, "arch"), "quantization", jstr(man, "quantization"), "mode", jstr(man, "mode"),
                  "state", pack_state(s, id, man, state, &missing));
    if (json_is_string(json_object_get(man, "family"))) json_object_set(o, "family", json_object_get(man, "family"));
    json_object_set_new(o, "installed", json_integer(installed));
    json_object_set_new(o, "modified", json_integer(modified));
    if (missing) json_object_set_new(o, "missing", json_string(missing));
    if (json_is_string(json_object_get(state, "damaged")))
        json_object_set(o, "damaged", json_object_get(state, "damaged"));
    json_decref(state);
    return o;
}

static int cmp_entry(const void *a, const void *b) {
    json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    return strcmp(jstr(x, "name"), jstr(y, "name"));
}

kiln_status kiln_store_list(kiln_store *s, char **json_out) {
    if (!s || !json_out) return base_fail(KILN_ERR_INVALID_ARG, "no store or output");
    json_t *names = json_object();
    each_name(s, NULL, collect_name, names);
    char dir[PATH_MAX];
    store_path(dir, "%s/packs", s->root);
    DIR *d = opendir(dir);
    if (!d) {
        json_decref(names);
        return base_fail(KILN_ERR_IO, "cannot read %s: %s", dir, strerror(errno));
    }
    json_t *list = json_array();
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!store_hex_ok(e->d_name)) continue;
        json_t *man = load_manifest(s, e->d_name);
        if (!man) continue;
        json_t *arr = json_object_get(names, e->d_name);
        size_t i;
        json_t *n;
        if (!json_array_size(arr)) json_array_append_new(list, entry_json(s, "", e->d_name, man));
        json_array_foreach(arr, i, n) json_array_append_new(list, entry_json(s, json_string_value(n), e->d_name, man));
        json_decref(man);
    }
    closedir(d);
    json_decref(names);
    size_t n = json_array_size(list);
    json_t **items = malloc((n ? n : 1) * sizeof *items);
    json_t *sorted = json_array();
    for (size_t i = 0; items && i < n; i++) items[i] = json_array_get(list, i);
    if (items) qsort(items, n, sizeof *items, cmp_entry);
    for (size_t i = 0; items && i < n; i++) json_array_append(sorted, items[i]);
    free(items);
    json_decref(list);
    *json_out = json_dumps(sorted, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(sorted);
    return *json_out ? KILN_OK : base_fail(KILN_ERR_NOMEM, "out of memory");
}

static void collect_plain(const char *name, const char *nid, void *ud) {
    (void)nid;
    json_array_append_new((json_t *)ud, json_string(name));
}

kiln_status kiln_store_info(kiln_store *s, const char *name, char **json_out) {
    if (!s || !name || !json_out) return base_fail(KILN_ERR_INVALID_ARG, "no store, name or output");
    char id[STORE_ID_LEN + 1], norm[STORE_NAME_MAX + 1];
    kiln_status st = find_ref(s, name, id, norm);
    if (st) return st;
    json_t *man = load_manifest(s, id);
    if (!man) return KILN_ERR_FORMAT;
    json_t *o = entry_json(s, norm, id, man);
    json_t *names = json_array();
    each_name(s, id, collect_plain, names);
    json_object_set_new(o, "names", names);
    char dir[PATH_MAX];
    json_t *d = store_path(dir, "%s/packs/%s", s->root, id) ? json_object() : store_pack_defaults(dir, man);
    json_object_set_new(o, "defaults", d);
    json_object_set_new(o, "manifest", man);
    /* 15 digits: an option written as 0.3 reads back as 0.3, not 0.29999999999999999 */
    *json_out = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    json_decref(o);
    return *json_out ? KILN_OK : base_fail(KILN_ERR_NOMEM, "out of memory");
}

/* ---- resolve and leases ---- */

/* The file a lease hands out: the GGUF (or whisper.cpp file), or an image
 * pack's pack.json. */
static const char *model_file(json_t *man) {
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(man, "artifacts"), i, a) {
        const char *role = jstr(a, "role");
        if (!strcmp(role, "model") || !strcmp(role, "image-pack")) return jstr(a, "path");
    }
    return NULL;
}

static kiln_status check_pack(kiln_store *s, const char *id, json_t *man, int force, kiln_store_progress_fn progress,
                              void *user) {
    json_t *state = load_state(s, id);
    int linked = !strcmp(jstr(man, "mode"), "linked");
    if (!force && json_is_string(json_object_get(state, "damaged"))) {
        kiln_status st = base_fail(KILN_ERR_FORMAT, "pack %.12s is damaged (%s); run kiln verify, or pull it again", id,
                                   jstr(state, "damaged"));
        json_decref(state);
        return st;
    }
    char *before = json_dumps(state, JSON_COMPACT | JSON_SORT_KEYS);
    kiln_status st = KILN_OK;
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(man, "artifacts"), i, a) {
        st = check_artifact(s, id, man, a, state, force, progress, user);
        if (st) break;
    }
    /* a linked target belongs to its owner and may come back; an owned file
     * that fails its check is damage */
    if (st && !linked && (st == KILN_ERR_FORMAT || force))
        json_object_set_new(state, "damaged", json_string(kiln_last_error()));
    if (!st) json_object_del(state, "damaged");
    char *after = json_dumps(state, JSON_COMPACT | JSON_SORT_KEYS);
    if (before && after && strcmp(before, after)) save_state(s, id, state);
    free(before);
    free(after);
    json_decref(state);
    return st;
}

kiln_status kiln_store_resolve(kiln_store *s, const char *name, kiln_store_lease **out) {
    static atomic_uint seq;
    if (!s || !name || !out) return base_fail(KILN_ERR_INVALID_ARG, "no store, name or output");
    *out = NULL;
    kiln_store_lease *l = calloc(1, sizeof *l);
    if (!l) return base_fail(KILN_ERR_NOMEM, "out of memory");
    l->fd = -1;
    int mk = mut_lock(s, LOCK_SH);
    if (mk < 0) {
        free(l);
        return KILN_ERR_IO;
    }
    char lockp[PATH_MAX];
    kiln_status st = find_ref(s, name, l->id, NULL);
    if (!st && store_path(lockp, "%s/leases/%s.lock", s->root, l->id)) st = KILN_ERR_INVALID_ARG;
    if (!st && (l->fd = store_lock(lockp, LOCK_SH)) < 0)
        st = base_fail(KILN_ERR_IO, "lease %s: %s", lockp, strerror(errno));
    if (!st &&
        !store_path(l->record, "%s/leases/%s.%ld.%u", s->root, l->id, (long)getpid(), atomic_fetch_add(&seq, 1))) {
        char line[32];
        int n = snprintf(line, sizeof line, "%ld\n", (long)getpid());
        if (store_write_atomic(l->record, line, (size_t)n, 0644) != 0) l->record[0] = 0;
    }
    store_unlock(mk);
    json_t *man = st ? NULL : load_manifest(s, l->id);
    if (!st && !man) st = KILN_ERR_FORMAT;
    if (!st) st = check_pack(s, l->id, man, 0, NULL, NULL);
    const char *file = man ? model_file(man) : NULL;
    if (!st && (!file || store_path(l->path, "%s/packs/%s/%s", s->root, l->id, file)))
        st = base_fail(KILN_ERR_FORMAT, "pack %.12s has no model artifact", l->id);
    char dir[PATH_MAX];
    if (!st && !store_path(dir, "%s/packs/%s", s->root, l->id)) {
        json_t *d = store_pack_defaults(dir, man);
        l->defaults = json_dumps(d, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
        json_decref(d);
    }
    json_decref(man);
    if (st) {
        kiln_store_release(l);
        return st;
    }
    *out = l;
    return KILN_OK;
}

const char *kiln_store_lease_path(const kiln_store_lease *l) { return l ? l->path : ""; }
const char *kiln_store_lease_id(const kiln_store_lease *l) { return l ? l->id : ""; }
const char *kiln_store_lease_defaults(const kiln_store_lease *l) { return l && l->defaults ? l->defaults : "{}"; }

void kiln_store_release(kiln_store_lease *l) {
    if (!l) return;
    free(l->defaults);
    if (l->record[0]) unlink(l->record);
    store_unlock(l->fd);
    free(l);
}

/* ---- verify, alias, remove ---- */

kiln_status kiln_store_verify(kiln_store *s, const char *name, kiln_store_progress_fn progress, void *user) {
    if (!s || !name) return base_fail(KILN_ERR_INVALID_ARG, "no store or name");
    char id[STORE_ID_LEN + 1];
    kiln_status st = find_ref(s, name, id, NULL);
    if (st) return st;
    json_t *man = load_manifest(s, id);
    if (!man) return KILN_ERR_FORMAT;
    char canon_path[PATH_MAX], hex[STORE_ID_LEN + 1];
    if (!store_path(canon_path, "%s/packs/%s/manifest.json", s->root, id) &&
        store_sha256_file(canon_path, hex, NULL, NULL, NULL, NULL) == 0 && strcmp(hex, id)) {
        json_t *state = load_state(s, id);
        json_object_set_new(state, "damaged", json_string("manifest does not match the pack id"));
        save_state(s, id, state);
        json_decref(state);
        json_decref(man);
        return base_fail(KILN_ERR_FORMAT, "pack %.12s: manifest.json does not hash to its id", id);
    }
    st = check_pack(s, id, man, 1, progress, user);
    json_decref(man);
    return st;
}

kiln_status kiln_store_copy(kiln_store *s, const char *src, const char *dst, int force) {
    if (!s || !src || !dst) return base_fail(KILN_ERR_INVALID_ARG, "no store or name");
    char norm[STORE_NAME_MAX + 1], id[STORE_ID_LEN + 1], old[STORE_ID_LEN + 1];
    kiln_status st = store_name_norm(dst, norm);
    if (st) return st;
    int lk = mut_lock(s, LOCK_EX);
    if (lk < 0) return KILN_ERR_IO;
    st = find_ref(s, src, id, NULL);
    if (!st && !force && name_lookup(s, norm, old) == 0 && pack_exists(s, old) && strcmp(old, id))
        st = base_fail(KILN_ERR_STATE,
                       "'%s' already names another model (%.12s); remove it first, or copy with --force", norm, old);
    if (!st) st = store_bind_name(s, norm, id);
    store_unlock(lk);
    return st;
}

kiln_status kiln_store_alias(kiln_store *s, const char *src, const char *dst) {
    return kiln_store_copy(s, src, dst, 0);
}

/* Lists the processes holding leases on id into buf ("pid 12 (kiln), ..."),
 * removing records of processes that are gone. */
static void lease_holders(kiln_store *s, const char *id, char *buf, size_t cap) {
    buf[0] = 0;
    char dir[PATH_MAX];
    store_path(dir, "%s/leases", s->root);
    DIR *d = opendir(dir);
    size_t used = 0, idlen = strlen(id);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, id, idlen) || e->d_name[idlen] != '.' || !strcmp(e->d_name + idlen, ".lock")) continue;
        long pid = strtol(e->d_name + idlen + 1, NULL, 10);
        char p[PATH_MAX];
        if (store_path(p, "%s/%s", dir, e->d_name)) continue;
        if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) {
            unlink(p);
            continue;
        }
        char comm[64] = "?", cp[64];
        snprintf(cp, sizeof cp, "/proc/%ld/comm", pid);
        FILE *f = fopen(cp, "r");
        if (f) {
            if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
            fclose(f);
        }
        if (used < cap) used += (size_t)snprintf(buf + used, cap - used, "%spid %ld (%s)", used ? ", " : "", pid, comm);
    }
    if (d) closedir(d);
    if (!buf[0]) snprintf(buf, cap, "another process");
}

static void unlink_name(const char *name, const char *nid, void *ud) {
    (void)nid;
    kiln_store *s = ud;
    char p[PATH_MAX];
    if (!name_file(s, name, p)) unlink(p);
}

static void count_name(const char *name, const char *nid, void *ud) {
    (void)name;
    (void)nid;
    (*(int *)ud)++;
}

/* The exclusive lease lock of id, taken without waiting: the fd, or -1
 * while some process holds a lease. */
static int lease_excl(kiln_store *s, const char *id) {
    char p[PATH_MAX];
    if (store_path(p, "%s/leases/%s.lock", s->root, id)) return -1;
    return store_lock(p, LOCK_EX | LOCK_NB);
}

/* Under the mutation lock and id's exclusive lease lock: deletes pack id
 * with its state and lease files (its names are gone already). */
static void delete_pack(kiln_store *s, const char *id) {
    char p[PATH_MAX], src[PATH_MAX];
    store_path(src, "%s/packs/%s", s->root, id);
    /* the rename makes the removal atomic; deleting the renamed tree
     * never follows a linked pack's symlink into its target */
    store_quarantine(s, src, "removed");
    char q[PATH_MAX];
    store_path(q, "%s/quarantine", s->root);
    DIR *d = opendir(q);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n > STORE_ID_LEN && !strcmp(e->d_name + n - STORE_ID_LEN, id) && !store_path(p, "%s/%s", q, e->d_name))
            store_rmtree(p);
    }
    if (d) closedir(d);
    if (!store_path(p, "%s/state/%s.json", s->root, id)) unlink(p);
    lease_holders(s, id, p, sizeof p); /* sweeps stale lease records */
    if (!store_path(p, "%s/leases/%s.lock", s->root, id)) unlink(p);
}

/* Under the mutation lock: deletes pack id if no name points at it and no
 * lease holds it (a leased one is left for gc).  1 when it went. */
static int drop_unnamed(kiln_store *s, const char *id) {
    int n_names = 0;
    each_name(s, id, count_name, &n_names);
    if (n_names || !pack_exists(s, id)) return 0;
    int lease = lease_excl(s, id);
    if (lease < 0) return 0;
    delete_pack(s, id);
    store_unlock(lease);
    return 1;
}

static void drop_if_unnamed(kiln_store *s, const char *id) {
    if (drop_unnamed(s, id)) base_log(BASE_LOG_INFO, "store: removed pack %.12s, which no name points at any more", id);
}

typedef struct rm_names {
    char (*names)[STORE_NAME_MAX + 1];
    int n, cap, nomem;
} rm_names;

static void gather_name(const char *name, const char *nid, void *ud) {
    (void)nid;
    rm_names *l = ud;
    if (l->nomem) return;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        void *nn = base_realloc(l->names, (size_t)cap * sizeof *l->names);
        if (!nn) {
            l->nomem = 1;
            return;
        }
        l->names = nn;
        l->cap = cap;
    }
    snprintf(l->names[l->n++], STORE_NAME_MAX + 1, "%s", name);
}

static int name_cmp(const void *a, const void *b) { return strcmp(a, b); }

kiln_status kiln_store_remove_names(kiln_store *s, const char *name_or_id, int force, kiln_store_name_fn removed,
                                    void *user) {
    if (!s || !name_or_id) return base_fail(KILN_ERR_INVALID_ARG, "no store or name");
    int lk = mut_lock(s, LOCK_EX);
    if (lk < 0) return KILN_ERR_IO;
    char id[STORE_ID_LEN + 1], norm[STORE_NAME_MAX + 1], p[PATH_MAX];
    kiln_status st = find_ref(s, name_or_id, id, norm);
    rm_names l = {0};
    if (!st) each_name(s, id, gather_name, &l);
    if (!st && l.nomem) st = base_fail(KILN_ERR_NOMEM, "out of memory listing the names of %.12s", id);
    if (!st && l.n > 1) qsort(l.names, (size_t)l.n, sizeof *l.names, name_cmp);
    if (!st && norm[0] && l.n > 1) {
        /* another name keeps the pack: only this alias goes */
        if (!name_file(s, norm, p) && unlink(p) != 0)
            st = base_fail(KILN_ERR_IO, "cannot remove %s: %s", norm, strerror(errno));
        store_unlock(lk);
        if (!st && removed) removed(norm, user);
        free(l.names);
        return st;
    }
    if (!st && !norm[0] && l.n > 1 && !force) {
        char list[1024] = "";
        size_t o = 0;
        for (int i = 0; i < l.n && o + 1 < sizeof list; i++)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", l.names[i]);
        st = base_fail(KILN_ERR_STATE,
                       "%s is the id of %d names (%s): remove the names one by one, or force removing "
                       "them all",
                       name_or_id, l.n, list);
    }
    int lease = -1;
    if (!st && (lease = lease_excl(s, id)) < 0) {
        char who[512];
        lease_holders(s, id, who, sizeof who);
        st = base_fail(KILN_ERR_STATE, "%s is in use by %s; unload it first", name_or_id, who);
    }
    if (!st) {
        each_name(s, id, unlink_name, s);
        delete_pack(s, id);
    }
    store_unlock(lease);
    store_unlock(lk);
    for (int i = 0; !st && removed && i < l.n; i++) removed(l.names[i], user);
    free(l.names);
    return st;
}

kiln_status kiln_store_remove(kiln_store *s, const char *name_or_id) {
    return kiln_store_remove_names(s, name_or_id, 1, NULL, NULL);
}

/* ---- gc ---- */

static void gc_dir(kiln_store *s, const char *sub, int check_lock, kiln_store_gc_fn each, void *user, uint64_t *n,
                   uint64_t *bytes) {
    char dir[PATH_MAX];
    store_path(dir, "%s/%s", s->root, sub);
    DIR *d = opendir(dir);
    double now = store_wall_now();
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[PATH_MAX], lk[PATH_MAX];
        double newest = 0;
        if (store_path(p, "%s/%s", dir, e->d_name)) continue;
        uint64_t size = store_tree_size(p, &newest);
        if (now - newest < STORE_GC_MAX_AGE) continue;
        int fd = -1;
        if (check_lock && !store_path(lk, "%s/locks/%s.lock", s->root, e->d_name) && access(lk, F_OK) == 0 &&
            (fd = store_lock(lk, LOCK_EX | LOCK_NB)) < 0)
            continue;
        if (store_rmtree(p) >= 0) {
            (*n)++;
            *bytes += size;
            if (each) each(p, size, user);
        }
        store_unlock(fd);
    }
    if (d) closedir(d);
}

kiln_status kiln_store_gc(kiln_store *s, kiln_store_gc_fn each, void *user, uint64_t *n_removed,
                          uint64_t *bytes_removed) {
    if (!s) return base_fail(KILN_ERR_INVALID_ARG, "no store");
    int lk = mut_lock(s, LOCK_EX);
    if (lk < 0) return KILN_ERR_IO;
    uint64_t n = 0, bytes = 0;
    gc_dir(s, ".staging", 1, each, user, &n, &bytes);
    gc_dir(s, "quarantine", 0, each, user, &n, &bytes);
    /* packs no name points at (a name moved while the old pack was leased) */
    char dir[PATH_MAX];
    store_path(dir, "%s/packs", s->root);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!store_hex_ok(e->d_name)) continue;
        char id[STORE_ID_LEN + 1], p[PATH_MAX];
        memcpy(id, e->d_name, STORE_ID_LEN + 1);
        uint64_t size = store_path(p, "%s/%s", dir, id) ? 0 : store_tree_size(p, NULL);
        if (drop_unnamed(s, id)) {
            n++;
            bytes += size;
            if (each) each(p, size, user);
        }
    }
    if (d) closedir(d);
    store_unlock(lk);
    if (n_removed) *n_removed = n;
    if (bytes_removed) *bytes_removed = bytes;
    return KILN_OK;
}
