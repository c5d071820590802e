/* kiln import: copy, move or link a local GGUF (or whisper.cpp file, or an
 * image pack: a directory with pack.json) into the store.  Copies go
 * through the store's own staging directory (same volume as the packs), so
 * publication is a rename; a move is copy-then-retire, never a rename of the
 * caller's file, and it never rolls back a committed pack. */
#include "store/store.h"

#include "base/base.h"
#include "image/image.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Copies exactly len bytes of src into dst while hashing them. */
static kiln_status copy_hash(const char *src, const char *dst, const char *file, uint64_t len,
                             char hex[STORE_ID_LEN + 1], kiln_store_progress_fn progress, void *user) {
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) return base_fail(KILN_ERR_IO, "cannot open %s: %s", src, strerror(errno));
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) {
        close(in);
        return base_fail(KILN_ERR_IO, "cannot create %s: %s", dst, strerror(errno));
    }
    enum { CHUNK = 1 << 18 };
    unsigned char *buf = malloc(CHUNK);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    kiln_status st =
        buf && ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) ? KILN_OK : base_fail(KILN_ERR_NOMEM, "out of memory");
    uint64_t done = 0;
    double t0 = base_now();
    while (!st && done < len) {
        size_t want = len - done < CHUNK ? (size_t)(len - done) : CHUNK;
        ssize_t r = read(in, buf, want);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            st = base_fail(KILN_ERR_IO, "reading %s: %s", src, r < 0 ? strerror(errno) : "file shrank during the copy");
            break;
        }
        for (ssize_t off = 0; !st && off < r;) {
            ssize_t w = write(out, buf + off, (size_t)(r - off));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0)
                st = base_fail(KILN_ERR_IO, "writing %s: %s (the source is untouched)", dst, strerror(errno));
            else
                off += w;
        }
        EVP_DigestUpdate(ctx, buf, (size_t)r);
        done += (uint64_t)r;
        double dt = base_now() - t0;
        double rate = dt > 0 ? (double)done / dt : 0;
        kiln_store_progress p = {.event = "progress",
                                 .artifact = file,
                                 .count = 1,
                                 .done = done,
                                 .total = len,
                                 .all_done = done,
                                 .all_total = len,
                                 .rate = rate,
                                 .eta = rate > 0 ? (double)(len - done) / rate : -1};
        store_emit(progress, user, &p);
    }
    if (!st && fsync(out) != 0) st = base_fail(KILN_ERR_IO, "writing %s: %s", dst, strerror(errno));
    if (!st) {
        unsigned char d[EVP_MAX_MD_SIZE];
        unsigned n = 0;
        EVP_DigestFinal_ex(ctx, d, &n);
        static const char digits[] = "0123456789abcdef";
        for (unsigned i = 0; i < n; i++) {
            hex[2 * i] = digits[d[i] >> 4];
            hex[2 * i + 1] = digits[d[i] & 15];
        }
        hex[2 * n] = 0;
    }
    EVP_MD_CTX_free(ctx);
    free(buf);
    close(in);
    close(out);
    return st;
}

/* Brings one file of an image pack into the staging directory dir as file
 * (a copy, or a link to it), hashing it; the pack's record must match. */
static kiln_status stage_one(const char *src, const char *dir, const char *file, int mode, const char *want_sha,
                             struct stat *s0, char hex[STORE_ID_LEN + 1], kiln_store_progress_fn progress, void *user) {
    char dst[PATH_MAX];
    if (stat(src, s0) != 0) return base_fail(KILN_ERR_IO, "%s: %s", src, strerror(errno));
    if (!S_ISREG(s0->st_mode)) return base_fail(KILN_ERR_INVALID_ARG, "%s is not a regular file", src);
    if (store_path(dst, "%s/%s", dir, file)) return KILN_ERR_INVALID_ARG;
    kiln_store_progress p0 = {.event = "start",
                              .artifact = file,
                              .count = 1,
                              .total = (uint64_t)s0->st_size,
                              .all_total = (uint64_t)s0->st_size,
                              .eta = -1};
    store_emit(progress, user, &p0);
    struct stat s1;
    kiln_status st = KILN_OK;
    if (mode == KILN_STORE_LINK) {
        if (store_sha256_file(src, hex, &s1, progress, user, file) != 0)
            st = base_fail(KILN_ERR_IO, "cannot read %s: %s", src, strerror(errno));
        else if (symlink(src, dst) != 0)
            st = base_fail(KILN_ERR_IO, "cannot link %s: %s", dst, strerror(errno));
    } else {
        st = copy_hash(src, dst, file, (uint64_t)s0->st_size, hex, progress, user);
        if (!st && stat(src, &s1) != 0) st = base_fail(KILN_ERR_IO, "%s: %s", src, strerror(errno));
    }
    if (!st && !same_file(s0, &s1))
        st = base_fail(KILN_ERR_STATE, "%s changed while it was read; nothing imported", src);
    if (!st && want_sha && strcmp(hex, want_sha))
        st = base_fail(KILN_ERR_FORMAT, "%s has sha256 %s, but pack.json records %s; nothing imported", src, hex,
                       want_sha);
    return st;
}

/* An image pack (image/image.h): pack.json and its four artifacts, each
 * checked against the length and SHA-256 pack.json records, become one
 * store pack whose "image-pack" artifact is pack.json itself. */
static kiln_status import_image_pack(kiln_store *s, const char *canon, const char *name, int mode,
                                     kiln_store_progress_fn progress, void *user, char *id_out) {
    static atomic_uint seq;
    char pj[PATH_MAX], dir[PATH_MAX], srcdir[PATH_MAX], norm[STORE_NAME_MAX + 1], err[1024];
    struct stat sd;
    if (stat(canon, &sd) != 0) return base_fail(KILN_ERR_IO, "%s: %s", canon, strerror(errno));
    if (S_ISDIR(sd.st_mode)) {
        snprintf(srcdir, sizeof srcdir, "%s", canon);
        if (store_path(pj, "%s/pack.json", canon)) return KILN_ERR_INVALID_ARG;
    } else {
        snprintf(pj, sizeof pj, "%s", canon);
        snprintf(srcdir, sizeof srcdir, "%s", canon);
        *strrchr(srcdir, '/') = 0;
    }
    /* the pack's own checks first: roles, plain file names, lengths */
    image_files files;
    image_config cfg;
    if (image_pack_read(pj, 0, &files, &cfg, err, sizeof err)) return base_fail(KILN_ERR_FORMAT, "%s", err);
    kiln_status st;
    if (name)
        st = store_name_norm(name, norm);
    else {
        store_name_from_file(srcdir, norm);
        st = store_name_norm(norm, norm);
    }
    if (st) return st;
    json_error_t je;
    json_t *pack = json_load_file(pj, JSON_REJECT_DUPLICATES, &je);
    if (!pack) return base_fail(KILN_ERR_FORMAT, "%s: %s", pj, je.text);

    char key[96];
    snprintf(key, sizeof key, "import-%ld-%u-%lld", (long)getpid(), atomic_fetch_add(&seq, 1),
             (long long)store_wall_now());
    if ((st = store_staging(s, key, dir))) {
        json_decref(pack);
        return st;
    }
    json_t *arts = json_array();
    struct stat stats[5];
    char srcs[5][PATH_MAX];
    size_t n = 0, i;
    json_t *a;
    uint64_t total = 0;
    /* pack.json first (its role names the pack's kind), then the files */
    json_t *list = json_array();
    json_array_append_new(list, json_pack("{s:s,s:s}", "role", "image-pack", "path", "pack.json"));
    json_array_foreach(json_object_get(pack, "artifacts"), i, a) json_array_append(list, a);
    json_array_foreach(list, i, a) {
        const char *file = json_string_value(json_object_get(a, "path"));
        const char *role = json_string_value(json_object_get(a, "role"));
        const char *sha = i ? json_string_value(json_object_get(a, "sha256")) : NULL;
        if (i >= 5) {
            st = base_fail(KILN_ERR_FORMAT, "%s: more artifacts than an image pack has", pj);
            break;
        }
        if (!store_file_ok(file) || !strcmp(file, "manifest.json") || (i && !strcmp(file, "pack.json"))) {
            st = base_fail(KILN_ERR_FORMAT, "%s: the artifact name '%s' cannot be kept in the store", pj,
                           file ? file : "");
            break;
        }
        char hex[STORE_ID_LEN + 1];
        if (store_path(srcs[i], "%s/%s", srcdir, file)) {
            st = KILN_ERR_INVALID_ARG;
            break;
        }
        if ((st = stage_one(srcs[i], dir, file, mode, sha, &stats[i], hex, progress, user))) break;
        json_array_append_new(arts, json_pack("{s:s,s:s,s:I,s:s,s:s}", "role", role, "path", file, "length",
                                              (json_int_t)stats[i].st_size, "sha256", hex, "source", srcs[i]));
        total += (uint64_t)stats[i].st_size;
        n = i + 1;
    }
    json_decref(list);
    json_decref(pack);
    if (st) {
        json_decref(arts);
        if (st == KILN_ERR_STATE)
            store_quarantine(s, dir, kiln_last_error());
        else
            store_rmtree(dir);
        return st;
    }
    json_t *man = json_pack("{s:s,s:s,s:o}", "mode", mode == KILN_STORE_LINK ? "linked" : "owned", "origin", srcdir,
                            "artifacts", arts);
    char id[STORE_ID_LEN + 1];
    st = man ? store_publish(s, dir, man, norm, id) : base_fail(KILN_ERR_NOMEM, "out of memory");
    json_decref(man);
    if (st) return st;
    kiln_store_progress pub = {.event = "published",
                               .artifact = "pack.json",
                               .count = (int)n,
                               .done = total,
                               .total = total,
                               .all_done = total,
                               .all_total = total,
                               .eta = 0,
                               .message = id};
    store_emit(progress, user, &pub);
    for (size_t k = 0; mode == KILN_STORE_MOVE && k < n; k++) {
        struct stat s2;
        char msg[PATH_MAX + 128];
        msg[0] = 0;
        if (stat(srcs[k], &s2) != 0 || !same_file(&stats[k], &s2))
            snprintf(msg, sizeof msg, "%s changed after the copy; it is kept", srcs[k]);
        else if (unlink(srcs[k]) != 0)
            snprintf(msg, sizeof msg, "cannot remove %s: %s; it is kept", srcs[k], strerror(errno));
        if (msg[0]) {
            base_log(BASE_LOG_WARN, "import: %s", msg);
            kiln_store_progress w = {
                .event = "warning", .artifact = "pack.json", .count = 1, .eta = -1, .message = msg};
            store_emit(progress, user, &w);
        }
    }
    if (id_out) memcpy(id_out, id, STORE_ID_LEN + 1);
    return KILN_OK;
}

kiln_status kiln_store_import(kiln_store *s, const char *path, const char *name, int mode,
                              kiln_store_progress_fn progress, void *user, char *id_out) {
    static atomic_uint seq;
    if (!s || !path) return base_fail(KILN_ERR_INVALID_ARG, "no store or path");
    if (mode != KILN_STORE_COPY && mode != KILN_STORE_MOVE && mode != KILN_STORE_LINK)
        return base_fail(KILN_ERR_INVALID_ARG, "unknown import mode %d", mode);
    char canon[PATH_MAX], norm[STORE_NAME_MAX + 1];
    if (!realpath(path, canon)) return base_fail(KILN_ERR_IO, "%s: %s", path, strerror(errno));
    if (image_is_pack(canon)) return import_image_pack(s, canon, name, mode, progress, user, id_out);
    kiln_status st;
    if (name)
        st = store_name_norm(name, norm);
    else {
        store_name_from_file(canon, norm);
        st = store_name_norm(norm, norm);
    }
    if (st) return st;
    struct stat s0;
    if (stat(canon, &s0) != 0 || !S_ISREG(s0.st_mode))
        return base_fail(KILN_ERR_INVALID_ARG, "%s is not a regular file", path);

    /* the artifact's name inside the pack: the file name, made safe */
    char file[256];
    const char *base = strrchr(canon, '/') + 1;
    size_t n = 0;
    while (*base == '.') base++;
    for (; base[n] && n < sizeof file - 1; n++) {
        char c = base[n];
        file[n] = (c == '.' || c == '_' || c == '-' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                   (c >= 'A' && c <= 'Z'))
                      ? c
                      : '-';
    }
    file[n] = 0;
    if (!store_file_ok(file)) snprintf(file, sizeof file, "model.gguf");

    char key[96], dir[PATH_MAX], dst[PATH_MAX], hex[STORE_ID_LEN + 1];
    snprintf(key, sizeof key, "import-%ld-%u-%lld", (long)getpid(), atomic_fetch_add(&seq, 1),
             (long long)store_wall_now());
    if ((st = store_staging(s, key, dir))) return st;
    if (store_path(dst, "%s/%s", dir, file)) {
        store_rmtree(dir);
        return KILN_ERR_INVALID_ARG;
    }
    kiln_store_progress p0 = {.event = "start",
                              .artifact = file,
                              .count = 1,
                              .total = (uint64_t)s0.st_size,
                              .all_total = (uint64_t)s0.st_size,
                              .eta = -1};
    store_emit(progress, user, &p0);

    struct stat s1;
    if (mode == KILN_STORE_LINK) {
        if (store_sha256_file(canon, hex, &s1, progress, user, file) != 0) {
            st = base_fail(KILN_ERR_IO, "cannot read %s: %s", canon, strerror(errno));
        } else if (!same_file(&s0, &s1)) {
            st = base_fail(KILN_ERR_STATE, "%s changed while it was hashed; nothing imported", canon);
        } else if (symlink(canon, dst) != 0) {
            st = base_fail(KILN_ERR_IO, "cannot link %s: %s", dst, strerror(errno));
        }
    } else {
        st = copy_hash(canon, dst, file, (uint64_t)s0.st_size, hex, progress, user);
        if (!st && (stat(canon, &s1) != 0 || !same_file(&s0, &s1)))
            st =
                base_fail(KILN_ERR_STATE, "%s changed during the copy; nothing imported and the source is kept", canon);
    }
    if (st) {
        if (st == KILN_ERR_STATE)
            store_quarantine(s, dir, kiln_last_error());
        else
            store_rmtree(dir);
        return st;
    }

    json_t *man = json_pack("{s:s,s:s,s:[{s:s,s:s,s:I,s:s,s:s}]}", "mode", mode == KILN_STORE_LINK ? "linked" : "owned",
                            "origin", canon, "artifacts", "role", "model", "path", file, "length",
                            (json_int_t)s0.st_size, "sha256", hex, "source", canon);
    char id[STORE_ID_LEN + 1];
    st = man ? store_publish(s, dir, man, norm, id) : base_fail(KILN_ERR_NOMEM, "out of memory");
    json_decref(man);
    if (st) return st;
    kiln_store_progress pub = {.event = "published",
                               .artifact = file,
                               .count = 1,
                               .done = (uint64_t)s0.st_size,
                               .total = (uint64_t)s0.st_size,
                               .all_done = (uint64_t)s0.st_size,
                               .all_total = (uint64_t)s0.st_size,
                               .eta = 0,
                               .message = id};
    store_emit(progress, user, &pub);

    if (mode == KILN_STORE_MOVE) {
        /* the pack is committed; the source goes only if it is still
         * exactly the file that was copied */
        struct stat s2;
        char msg[PATH_MAX + 128];
        msg[0] = 0;
        if (stat(canon, &s2) != 0 || !same_file(&s0, &s2))
            snprintf(msg, sizeof msg, "%s changed after the copy; it is kept", canon);
        else if (unlink(canon) != 0)
            snprintf(msg, sizeof msg, "cannot remove %s: %s; it is kept", canon, strerror(errno));
        if (msg[0]) {
            base_log(BASE_LOG_WARN, "import: %s", msg);
            kiln_store_progress w = {.event = "warning", .artifact = file, .count = 1, .eta = -1, .message = msg};
            store_emit(progress, user, &w);
        }
    }
    if (id_out) memcpy(id_out, id, STORE_ID_LEN + 1);
    return KILN_OK;
}
