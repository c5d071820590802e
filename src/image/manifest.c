/* Image packs: pack.json, the artifacts' lengths and hashes, the
 * configuration objects. */
#include "image/image.h"

#include "base/base.h"

#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

void image_config_default(image_config *c) {
    memset(c, 0, sizeof *c);
    c->head_dim = 72;
    c->interp = 1.0f;
    c->max_distance = 128;
    c->max_tokens = 120;
    c->vae_scaling = 0.18215f;
    c->vae_groups = 32;
    c->sched = (image_sched){1000, 0.0001f, 0.02f, IMAGE_BETA_LINEAR, IMAGE_PRED_EPSILON, IMAGE_SPACING_LINSPACE, 0};
    c->steps = 20;
    c->cfg = 4.5f;
    snprintf(c->name, sizeof c->name, "files");
}

static int pack_json_path(const char *path, char *out, size_t cap) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    if (S_ISDIR(st.st_mode)) {
        if (snprintf(out, cap, "%s/pack.json", path) >= (int)cap) return -1;
        return stat(out, &st) == 0 && S_ISREG(st.st_mode) ? 0 : -1;
    }
    const size_t n = strlen(path);
    if (n < 9 || strcmp(path + n - 9, "pack.json") || n >= cap) return -1;
    memcpy(out, path, n + 1);
    return 0;
}

int image_is_pack(const char *path) {
    char p[PATH_MAX];
    return pack_json_path(path, p, sizeof p) == 0;
}

static int sha256_file(const char *path, char hex[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int rc = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) ? 0 : -1;
    static _Thread_local unsigned char buf[1 << 16];
    size_t k;
    while (!rc && (k = fread(buf, 1, sizeof buf, f)) > 0)
        if (!EVP_DigestUpdate(ctx, buf, k)) rc = -1;
    if (ferror(f)) rc = -1;
    unsigned char md[32];
    unsigned int ml = 0;
    if (!rc && !EVP_DigestFinal_ex(ctx, md, &ml)) rc = -1;
    EVP_MD_CTX_free(ctx);
    fclose(f);
    for (int i = 0; !rc && i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return rc;
}

int image_tokenizer_pinned(const char *path, const char *sha256, char *err, size_t errlen) {
    struct stat st;
    char got[65];
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return base_errf(err, errlen, "tokenizer %s: not a file", path), -1;
    if (sha256 && (strlen(sha256) != 64 || strspn(sha256, "0123456789abcdefABCDEF") != 64))
        return base_errf(err, errlen, "--tokenizer-sha256: '%s' is not 64 hex digits", sha256), -1;
    if (!sha256 && st.st_size != IMAGE_SPIECE_PIN_BYTES)
        return base_errf(err, errlen,
                         "tokenizer %s is not Flan-T5's spiece.model (%lld bytes, not %d); a pack records its own "
                         "tokenizer, or --tokenizer-sha256 pins this one",
                         path, (long long)st.st_size, IMAGE_SPIECE_PIN_BYTES),
               -1;
    if (sha256_file(path, got)) return base_errf(err, errlen, "tokenizer %s: cannot read it", path), -1;
    const char *want = sha256 ? sha256 : IMAGE_SPIECE_PIN_SHA256;
    if (strcasecmp(got, want))
        return base_errf(err, errlen, "tokenizer %s has sha256 %s, %s %s", path, got,
                         sha256 ? "--tokenizer-sha256 pins" : "not Flan-T5's spiece.model,", want),
               -1;
    return 0;
}

static int enum_of(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

/* Numbers of an optional object; a key of the wrong type is an error. */
static int num(json_t *o, const char *key, double *v, const char **bad) {
    json_t *x = json_object_get(o, key);
    if (!x) return 0;
    if (!json_is_number(x)) {
        *bad = key;
        return -1;
    }
    *v = json_number_value(x);
    return 1;
}

static int read_config(json_t *root, image_config *c, char *err, size_t errlen) {
    const char *bad = NULL;
    double v;
    json_t *o = json_object_get(root, "dit");
    if (num(o, "attention_head_dim", &v, &bad) > 0) c->head_dim = (int)v;
    if (num(o, "interpolation_scale", &v, &bad) > 0) c->interp = (float)v;
    o = json_object_get(root, "text_encoder");
    if (num(o, "relative_attention_max_distance", &v, &bad) > 0) c->max_distance = (int)v;
    if (num(o, "max_tokens", &v, &bad) > 0) c->max_tokens = (int)v;
    o = json_object_get(root, "vae");
    if (num(o, "scaling_factor", &v, &bad) > 0) c->vae_scaling = (float)v;
    if (num(o, "norm_num_groups", &v, &bad) > 0) c->vae_groups = (int)v;
    o = json_object_get(root, "defaults");
    if (num(o, "steps", &v, &bad) > 0) c->steps = (int)v;
    if (num(o, "cfg", &v, &bad) > 0) c->cfg = (float)v;
    o = json_object_get(root, "scheduler");
    if (num(o, "num_train_timesteps", &v, &bad) > 0) c->sched.n_train = (int)v;
    if (num(o, "beta_start", &v, &bad) > 0) c->sched.beta_start = (float)v;
    if (num(o, "beta_end", &v, &bad) > 0) c->sched.beta_end = (float)v;
    if (num(o, "steps_offset", &v, &bad) > 0) c->sched.steps_offset = (int)v;
    if (bad) {
        base_errf(err, errlen, "pack.json: '%s' is not a number", bad);
        return -1;
    }
    static const char *const betas[] = {"linear", "scaled_linear", "squaredcos_cap_v2"};
    static const char *const preds[] = {"epsilon", "v_prediction"};
    static const char *const spacings[] = {"linspace", "leading", "trailing"};
    const struct {
        const char *key;
        const char *const *names;
        int n;
        int *dst;
    } enums[] = {{"beta_schedule", betas, 3, &c->sched.beta_schedule},
                 {"prediction_type", preds, 2, &c->sched.prediction},
                 {"timestep_spacing", spacings, 3, &c->sched.spacing}};
    for (size_t i = 0; i < sizeof enums / sizeof enums[0]; i++) {
        json_t *x = json_object_get(o, enums[i].key);
        if (!x) continue;
        int e = json_is_string(x) ? enum_of(json_string_value(x), enums[i].names, enums[i].n) : -1;
        if (e < 0) {
            base_errf(err, errlen, "pack.json: scheduler %s is not supported", enums[i].key);
            return -1;
        }
        *enums[i].dst = e;
    }
    if (c->head_dim < 1 || c->max_tokens < 2 || c->max_tokens > 4096 || c->vae_groups < 1 || c->steps < 1 ||
        c->max_distance < 1 || !(c->vae_scaling > 0) || !(c->interp > 0)) {
        base_errf(err, errlen, "pack.json: a configuration value is out of range");
        return -1;
    }
    return 0;
}

int image_pack_read(const char *path, int verify, image_files *files, image_config *config, char *err, size_t errlen) {
    char pj[PATH_MAX];
    memset(files, 0, sizeof *files);
    image_config_default(config);
    if (pack_json_path(path, pj, sizeof pj)) {
        base_errf(err, errlen, "%s: not an image pack (no pack.json)", path);
        return -1;
    }
    json_error_t je;
    json_t *root = json_load_file(pj, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        base_errf(err, errlen, "%s: %s", pj, root ? "not a JSON object" : je.text);
        json_decref(root);
        return -1;
    }
    int rc = -1;
    const char *kind = json_string_value(json_object_get(root, "kind"));
    if (!kind || strcmp(kind, "kiln-image-pack") || json_integer_value(json_object_get(root, "schema")) != 1) {
        base_errf(err, errlen, "%s: not a kiln image pack of schema 1", pj);
        goto done;
    }
    const char *name = json_string_value(json_object_get(root, "name"));
    if (read_config(root, config, err, errlen)) goto done;
    snprintf(config->name, sizeof config->name, "%s", name ? name : "image");
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", pj);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[0] = 0;
    else
        snprintf(dir, sizeof dir, ".");
    static const char *const roles[] = {"dit", "text-encoder", "tokenizer", "vae"};
    char *dst[] = {files->dit, files->t5, files->tokenizer, files->vae};
    int seen[4] = {0};
    json_t *arts = json_object_get(root, "artifacts");
    size_t i;
    json_t *a;
    if (!json_is_array(arts)) {
        base_errf(err, errlen, "%s: no artifacts", pj);
        goto done;
    }
    json_array_foreach(arts, i, a) {
        const char *role = json_string_value(json_object_get(a, "role")),
                   *file = json_string_value(json_object_get(a, "path")),
                   *sha = json_string_value(json_object_get(a, "sha256"));
        json_t *len = json_object_get(a, "length");
        int r = role ? enum_of(role, roles, 4) : -1;
        if (r < 0) {
            base_errf(err, errlen, "%s: artifact %zu has an unknown role '%s'", pj, i, role ? role : "");
            goto done;
        }
        if (seen[r]++) {
            base_errf(err, errlen, "%s: two artifacts have the role %s", pj, role);
            goto done;
        }
        if (!file || !*file || strchr(file, '/') || file[0] == '.' || !sha || strlen(sha) != 64 ||
            !json_is_integer(len)) {
            base_errf(err, errlen, "%s: artifact %s needs a plain file name, its length and its sha256", pj, role);
            goto done;
        }
        if (snprintf(dst[r], PATH_MAX, "%s/%s", dir, file) >= PATH_MAX) {
            base_errf(err, errlen, "%s: path too long", pj);
            goto done;
        }
        struct stat st;
        if (stat(dst[r], &st) != 0) {
            base_errf(err, errlen, "pack %s: %s (%s) is missing: %s", config->name, file, role, strerror(errno));
            goto done;
        }
        if ((json_int_t)st.st_size != json_integer_value(len)) {
            base_errf(err, errlen, "pack %s: %s (%s) is %lld bytes, the pack records %lld", config->name, file, role,
                      (long long)st.st_size, (long long)json_integer_value(len));
            goto done;
        }
        char got[65];
        if (verify) {
            if (sha256_file(dst[r], got)) {
                base_errf(err, errlen, "pack %s: cannot read %s", config->name, file);
                goto done;
            }
            if (strcmp(got, sha)) {
                base_errf(err, errlen, "pack %s: %s (%s) has sha256 %s, the pack records %s", config->name, file, role,
                          got, sha);
                goto done;
            }
        }
    }
    for (int r = 0; r < 4; r++)
        if (!seen[r]) {
            base_errf(err, errlen,
                      "%s: the pack has no %s artifact (dit, text-encoder, tokenizer and vae are all "
                      "required)",
                      pj, roles[r]);
            goto done;
        }
    rc = 0;
done:
    json_decref(root);
    return rc;
}
