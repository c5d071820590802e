/*
 * store — kiln's model store: installs, imports, verifies and removes packs.
 *
 * Layout under the root (everything the store writes stays below it):
 *   packs/<id>/manifest.json   canonical JSON; id = SHA-256 of these bytes
 *   packs/<id>/<file>          read-only artifacts (symlinks for linked packs)
 *   names/<name:tag>           "<id>\n"
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
 * import.c   copy / move / link of local files
 * pull.c     HTTP(S) transfers through libcurl
 */
#ifndef KILN_STORE_H
#define KILN_STORE_H

#include "kiln.h"

#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <sys/stat.h>

#define KST_NAME_MAX 128     /* bytes of "name:tag" */
#define KST_ID_LEN 64        /* hex digits of a pack id */
#define KST_ID_PREFIX_MIN 4  /* hex digits an id prefix needs (kiln ls prints 12) */
#define KST_STAGING_MAX_AGE (60.0 * 60.0)      /* install-time cleanup, seconds */
#define KST_GC_MAX_AGE (24.0 * 60.0 * 60.0)    /* gc threshold, seconds */

struct kiln_store {
    char root[PATH_MAX];
};

/* ---- fsutil.c ---- */

/* snprintf into a PATH_MAX buffer; returns -1 (with the last error set) on
 * truncation. */
int kst_path(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int kst_mkdirs(const char *path);
/* Writes data to path through path.tmp.<pid>, fsyncs it and the directory,
 * and renames; mode applies to the result. */
int kst_write_atomic(const char *path, const void *data, size_t len, mode_t mode);
char *kst_read_text(const char *path, size_t max, size_t *len_out);
/* SHA-256 of a file as 64 hex digits; st_out (may be NULL) receives the
 * descriptor's stat, taken after hashing.  progress/user (may be NULL) see
 * "verify" events for artifact (index of count). */
int kst_sha256_file(const char *path, char hex[KST_ID_LEN + 1], struct stat *st_out,
                   kiln_store_progress_fn progress, void *user, const char *artifact);
void kst_sha256_hex(const void *data, size_t len, char hex[KST_ID_LEN + 1]);
/* Removes a tree without following symlinks; returns bytes freed or -1. */
int64_t kst_rmtree(const char *path);
/* Bytes under path and the newest mtime of anything in it (seconds). */
uint64_t kst_tree_size(const char *path, double *newest_mtime);
/* Opens (creating) a lock file and flocks it with op (LOCK_SH/LOCK_EX,
 * maybe | LOCK_NB).  Returns the fd or -1 (errno set). */
int kst_lock(const char *path, int op);
void kst_unlock(int fd);
double kst_wall_now(void);

/* ---- store.c ---- */

/* Checks and normalizes a name ("x" -> "x:latest") into out. */
kiln_status kst_name_norm(const char *in, char out[KST_NAME_MAX + 1]);
/* Builds the default name from a file name or URL path ("Foo.Q4.gguf" ->
 * "foo.q4:latest"). */
void kst_name_from_file(const char *file, char out[KST_NAME_MAX + 1]);
/* 1 when s is a safe artifact file name (no separators, no leading dot). */
int kst_file_ok(const char *s);
int kst_hex_ok(const char *s);
/* The staging directory for key, created; cleans stale staging first. */
kiln_status kst_staging(kiln_store *s, const char *key, char dir[PATH_MAX]);
/* Moves a staging directory into quarantine with a reason file. */
void kst_quarantine(kiln_store *s, const char *dir, const char *reason);
/* Checks the staged GGUF (header, tensors, supported architecture) and
 * reports its architecture and dominant weight type. */
kiln_status kst_check_gguf(const char *path, const char *artifact, char arch[64], char quant[16]);
/* Publishes a staging directory whose artifacts are in place: fills in the
 * manifest's arch/quantization/size, writes it last, renames the directory
 * to packs/<id> and binds name (may be NULL).  The directory is consumed
 * (renamed or quarantined).  manifest is borrowed. */
kiln_status kst_publish(kiln_store *s, const char *dir, json_t *manifest, const char *name, char id_out[KST_ID_LEN + 1]);
/* Looks for a published, healthy pack whose manifest "origin" is origin and,
 * if sha256 is given, whose first artifact has that hash. */
int kst_find_origin(kiln_store *s, const char *origin, const char *sha256, char id_out[KST_ID_LEN + 1]);
/* Points name at id (under the mutation lock).  A pack the name pointed at
 * before goes when no other name is left on it and nothing leases it (gc
 * removes it later otherwise). */
kiln_status kst_bind_name(kiln_store *s, const char *name, const char *id);
/* Emits one event when progress is not NULL. */
void kst_emit(kiln_store_progress_fn progress, void *user, const kiln_store_progress *p);

#endif
