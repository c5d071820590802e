/* Built-in model entries (the published Whisper variants) and the check
 * that lets the store hold whisper.cpp GGML files beside GGUF ones.
 *
 * By default a built-in name is pulled from the Hugging Face repository
 * whisper.cpp's own download script uses (ggerganov/whisper.cpp at main,
 * pinned to its commit when the pull starts), so the length and SHA-256
 * come from the hub's LFS metadata as for any hub pull.  A mirror URL
 * (--url) has neither: its pull records the SHA-256 it computes.  Either
 * way the file's SHA-1 is then checked against the one the publisher
 * lists. */
#include "store/store.h"

#include "base/base.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The hub repository and revision the built-in names come from. */
#define BUILTIN_HUB_REPO "ggerganov/whisper.cpp"
#define BUILTIN_HUB_REV "main"

static const kiln_builtin_model builtins[] = {
    {"whisper:tiny", "stt", "ggml-tiny.bin", "75 MiB", "bd577a113a864445d4c299885e0cb97d4ba92b5f", NULL},
    {"whisper:tiny.en", "stt", "ggml-tiny.en.bin", "75 MiB", "c78c86eb1a8faa21b369bcd33207cc90d64ae9df", NULL},
    {"whisper:base", "stt", "ggml-base.bin", "142 MiB", "465707469ff3a37a2b9b8d8f89f2f99de7299dac", NULL},
    {"whisper:base.en", "stt", "ggml-base.en.bin", "142 MiB", "137c40403d78fd54d454da0f9bd998f78703390c", NULL},
    {"whisper:small", "stt", "ggml-small.bin", "466 MiB", "55356645c2b361a969dfd0ef2c5a50d530afd8d5", NULL},
    {"whisper:small.en", "stt", "ggml-small.en.bin", "466 MiB", "db8a495a91d927739e50b3fc1cc4c6b8f6c2d022", NULL},
    {"whisper:medium", "stt", "ggml-medium.bin", "1.5 GiB", "fd9727b6e1217c2f614f9b698455c4ffd82463b4", NULL},
    {"whisper:medium.en", "stt", "ggml-medium.en.bin", "1.5 GiB", "8c30f0e44ce9560643ebd10bbe50cd20eafd3723", NULL},
    {"whisper:large-v1", "stt", "ggml-large-v1.bin", "2.9 GiB", "b1caaf735c4cc1429223d5a74f0f4d0b9b59a299", NULL},
    {"whisper:large-v2", "stt", "ggml-large-v2.bin", "2.9 GiB", "0f4c8e34f21cf1a914c59d8b3ce882345ad349d6", NULL},
    {"whisper:large-v3", "stt", "ggml-large-v3.bin", "2.9 GiB", "ad82bf6a9043ceed055076d0fd39f5f186ff8062", NULL},
    {"whisper:large-v3-turbo", "stt", "ggml-large-v3-turbo.bin", "1.5 GiB", "4af2b29d7ec73d781377bfd1758ca957a807e941",
     NULL},
};

enum { N_BUILTIN = (int)(sizeof builtins / sizeof builtins[0]) };

int kiln_builtin_count(void) { return N_BUILTIN; }
const kiln_builtin_model *kiln_builtin_at(int i) { return i >= 0 && i < N_BUILTIN ? &builtins[i] : NULL; }

const kiln_builtin_model *kiln_builtin_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < N_BUILTIN; i++)
        if (!strcasecmp(builtins[i].name, name)) return &builtins[i];
    return NULL;
}

kiln_status store_check_whisper(const char *path, const char *artifact, char arch[64], char quant[16]) {
    kiln_stt *m = NULL;
    if (kiln_stt_load(path, &m) != KILN_OK)
        return base_fail(KILN_ERR_FORMAT, "artifact %s is not a valid whisper.cpp GGML file: %s", artifact,
                         store_without_path(kiln_last_error(), path));
    kiln_stt_info info;
    kiln_stt_get_info(m, &info);
    snprintf(arch, 64, "whisper");
    snprintf(quant, 16, "%s", info.ftype);
    kiln_stt_free(m);
    return KILN_OK;
}

static int sha1_file(const char *path, char hex[41]) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int ok = c && EVP_DigestInit_ex(c, EVP_sha1(), NULL) == 1;
    unsigned char buf[1 << 16], md[EVP_MAX_MD_SIZE];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, f)) > 0) ok = EVP_DigestUpdate(c, buf, n) == 1;
    unsigned int len = 0;
    ok = ok && !ferror(f) && EVP_DigestFinal_ex(c, md, &len) == 1 && len == 20;
    EVP_MD_CTX_free(c);
    fclose(f);
    if (!ok) return -1;
    for (int i = 0; i < 20; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return 0;
}

kiln_status kiln_builtin_pull(kiln_store *s, const char *name, const char *url, const kiln_store_pull_params *p,
                              char *id_out) {
    const kiln_builtin_model *b = kiln_builtin_find(name);
    if (!b) return base_fail(KILN_ERR_NOT_FOUND, "no built-in model '%s'", name ? name : "");
    char full[4096];
    size_t ul = url ? strlen(url) : 0;
    if (!ul)
        snprintf(full, sizeof full, "hf.co/%s/%s@%s", BUILTIN_HUB_REPO, b->file, BUILTIN_HUB_REV);
    else if (url[ul - 1] == '/')
        snprintf(full, sizeof full, "%s%s", url, b->file);
    else
        snprintf(full, sizeof full, "%s", url);
    char id[STORE_ID_LEN + 1];
    kiln_status st = kiln_store_pull(s, full, b->name, NULL, p, id);
    if (st != KILN_OK) return st;
    if (b->sha1) {
        kiln_store_lease *l = NULL;
        st = kiln_store_resolve(s, id, &l);
        if (st != KILN_OK) return st;
        char hex[41];
        int rc = sha1_file(kiln_store_lease_path(l), hex);
        kiln_store_release(l);
        if (rc) return base_fail(KILN_ERR_IO, "%s: cannot hash the installed file", b->name);
        if (strcmp(hex, b->sha1)) {
            kiln_store_remove(s, id);
            return base_fail(KILN_ERR_FORMAT,
                             "%s: the file from %s has SHA-1 %s, not the published %s; the pack was removed", b->name,
                             full, hex, b->sha1);
        }
    }
    if (id_out) memcpy(id_out, id, sizeof id);
    return KILN_OK;
}
