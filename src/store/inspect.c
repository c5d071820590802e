/* kiln show --remote: what a model is before it is downloaded.
 *
 * The reference resolves as a pull would (hub.c, registry.c: bounded JSON
 * and HEAD requests only), then the model file's GGUF header is read with
 * Range requests from offset 0, growing 1, 2, 4, 8, 16 MiB per request
 * until the header parses (gguf_open_header), at most 16 MiB per range and
 * 64 MiB for the whole inspection.  Every answer must be a 206 starting at
 * the byte asked for, of the file's length; a server that ignores Range
 * makes the inspection unverified and nothing more is read: never the
 * whole file in place of its header.  Nothing is written anywhere. */
#include "store/store.h"

#include "base/base.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/quant.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define INSPECT_FIRST (1u << 20)
#define INSPECT_RANGE_MAX (16u << 20)
#define INSPECT_BUDGET (64u << 20)

/* "bytes A-B/T": A, B and T (0 when "*"); -1 when malformed. */
static int content_range(const char *cr, uint64_t *a, uint64_t *b, uint64_t *t) {
    unsigned long long x, y;
    const char *slash = strchr(cr, '/');
    if (strncasecmp(cr, "bytes ", 6) || !slash || sscanf(cr + 6, "%llu-%llu", &x, &y) != 2 || y < x) return -1;
    *a = x;
    *b = y;
    *t = slash[1] == '*' ? 0 : strtoull(slash + 1, NULL, 10);
    return 0;
}

static kiln_status read_header(const store_plan *plan, const store_artifact *a, const store_creds *cr,
                               const store_net *net, json_t *out) {
    uint8_t *buf = NULL;
    uint64_t have = 0, size = a->length;
    uint32_t chunk = INSPECT_FIRST;
    int requests = 0;
    kiln_status st = KILN_OK;
    gguf_file *f = NULL;
    char err[512] = "";
    for (;;) {
        uint64_t want = chunk;
        if (size && size - have < want) want = size - have;
        if (have + want > INSPECT_BUDGET) want = INSPECT_BUDGET - have;
        if (!want) {
            st =
                have >= INSPECT_BUDGET
                    ? store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT,
                                        "%s: unverified: the GGUF header is larger than the %u MiB an inspection reads",
                                        plan->what, INSPECT_BUDGET >> 20)
                    : store_source_fail(KILN_SOURCE_OTHER, KILN_ERR_FORMAT, "%s: %s", a->file, err);
            break;
        }
        uint8_t *nb = realloc(buf, have + want);
        if (!nb) {
            st = base_fail(KILN_ERR_NOMEM, "out of memory");
            break;
        }
        buf = nb;
        store_http h = {.url = a->url,
                        .headers = cr->hdrs,
                        .n_headers = cr->n,
                        .auth_origin = plan->auth_origin,
                        .what = plan->what,
                        .follow = STORE_FOLLOW_ALL,
                        .range_start = have,
                        .range_len = want,
                        .max_body = want};
        st = store_http_get(&h, net);
        requests++;
        if (!st && h.range_ignored)
            st = store_source_fail(
                KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT,
                "%s: unverified: the server ignores Range requests; kiln does not read a whole file to "
                "inspect it",
                plan->what);
        if (!st && h.code != 206) st = store_http_error(plan->kind, h.code, h.error_code, plan->what, cr->have_token);
        uint64_t ra = 0, rb = 0, rt = 0;
        if (!st && (content_range(h.content_range, &ra, &rb, &rt) || ra != have || rb - ra + 1 != h.len ||
                    h.len > want || !rt || (size && rt != size) || rt < have + h.len))
            st = store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT,
                                   "%s: unverified: the server's range answer does not match the request", plan->what);
        if (!st) {
            memcpy(buf + have, h.body, h.len);
            have += h.len;
            size = rt;
        }
        store_http_done(&h);
        if (st) break;
        int more = 0;
        if (!gguf_open_header(buf, have, size, &more, &f)) break;
        if (!more) {
            st = store_source_fail(KILN_SOURCE_OTHER, KILN_ERR_FORMAT, "%s is not a valid GGUF: %s", a->file,
                                   kiln_last_error());
            break;
        }
        if (chunk < INSPECT_RANGE_MAX) chunk *= 2;
    }
    if (!st) {
        char arch[64], name[256], key[128];
        gguf_get_cstr(f, "general.architecture", arch, sizeof arch, "");
        gguf_get_cstr(f, "general.name", name, sizeof name, "");
        uint64_t n_params = 0, n_bytes = 0;
        for (int i = 0; i < gguf_n_tensors(f); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
            n_bytes += t->nbytes;
        }
        json_object_set_new(out, "arch", json_string(arch));
        if (name[0]) json_object_set_new(out, "model_name", json_string(name));
        snprintf(key, sizeof key, "%s.context_length", arch);
        json_object_set_new(out, "context_length", json_integer(gguf_get_int(f, key, 0)));
        snprintf(key, sizeof key, "%s.block_count", arch);
        json_object_set_new(out, "layers", json_integer(gguf_get_int(f, key, 0)));
        snprintf(key, sizeof key, "%s.embedding_length", arch);
        json_object_set_new(out, "embedding_length", json_integer(gguf_get_int(f, key, 0)));
        json_object_set_new(out, "quantization", json_string(store_dominant_type(f)));
        json_object_set_new(out, "file_type", json_integer(gguf_get_int(f, "general.file_type", -1)));
        json_object_set_new(out, "tensors", json_integer(gguf_n_tensors(f)));
        json_object_set_new(out, "parameters", json_integer((json_int_t)n_params));
        json_object_set_new(out, "tensor_bytes", json_integer((json_int_t)n_bytes));
        json_object_set_new(out, "split_count", json_integer(gguf_get_int(f, "split.count", 1)));
        json_object_set_new(out, "gguf_version", json_integer(gguf_version(f)));
        json_object_set_new(out, "model_file_size", json_integer((json_int_t)size));
        json_object_set_new(out, "header_bytes_read", json_integer((json_int_t)have));
        json_object_set_new(out, "range_requests", json_integer(requests));
        /* the verdict: what the load would check first, without the weights */
        char why[512] = "";
        gguf_str tok;
        if (!arch[0])
            snprintf(why, sizeof why, "the GGUF names no general.architecture");
        else if (!model_arch_find(arch))
            snprintf(why, sizeof why, "architecture '%s' is not supported (kiln runs %s)", arch, model_arch_list());
        else if (gguf_get_str(f, "tokenizer.ggml.model", &tok) != 0)
            snprintf(why, sizeof why, "the GGUF has no tokenizer (tokenizer.ggml.model)");
        else if (!gguf_n_tensors(f))
            snprintf(why, sizeof why, "the first file holds no tensors");
        json_object_set_new(out, "runnable", json_boolean(!why[0]));
        json_object_set_new(out, "runnable_reason",
                            json_string(why[0] ? why
                                               : "the architecture, tokenizer and tensor types are ones kiln runs; "
                                                 "the tensors' shapes are checked when it loads"));
        gguf_close(f);
    }
    free(buf);
    return st;
}

kiln_status kiln_store_inspect(const char *ref, const kiln_store_pull_params *params, char **json_out) {
    store_source_set(KILN_SOURCE_OK);
    if (!ref || !json_out) return base_fail(KILN_ERR_INVALID_ARG, "no reference or output");
    *json_out = NULL;
    char mapped[2048];
    if (store_hub_url_ref(ref, mapped, sizeof mapped)) ref = mapped; /* a hub page: its reference */
    store_curl_init();
    store_net net;
    store_net_init(&net, params);
    store_creds cr;
    kiln_status st = store_creds_init(&cr, params, ref);
    store_plan *plan = st ? NULL : calloc(1, sizeof *plan);
    if (!st && !plan) st = base_fail(KILN_ERR_NOMEM, "out of memory");
    if (!st && strstr(ref, "://")) {
        size_t n = strcspn(ref, "?#");
        if (n > 5 && !strncasecmp(ref + n - 5, ".json", 5))
            st = base_fail(KILN_ERR_UNSUPPORTED, "inspect the model file's URL, not a pack manifest");
        if (!st) st = store_url_origin(ref, plan->auth_origin, sizeof plan->auth_origin);
        if (!st) {
            plan->kind = STORE_SRC_URL;
            store_url_clean(ref, plan->what, sizeof plan->what);
            snprintf(plan->arts[0].url, sizeof plan->arts[0].url, "%s", ref);
            const char *b = strrchr(plan->what, '/');
            snprintf(plan->arts[0].file, sizeof plan->arts[0].file, "%.200s", b ? b + 1 : plan->what);
            snprintf(plan->arts[0].role, sizeof plan->arts[0].role, "model");
            plan->n_arts = 1;
        }
    } else if (!st) {
        st = store_hub_ref(ref) ? store_hub_plan(ref, &net, cr.hdrs, cr.n, cr.have_token, plan)
                                : store_registry_plan(ref, &net, cr.hdrs, cr.n, cr.have_token, plan);
    }
    json_t *out = NULL;
    if (!st) {
        out = json_object();
        json_object_set_new(out, "reference", json_string(ref));
        if (plan->source) json_object_set(out, "source", plan->source);
        json_t *files = json_array();
        uint64_t total = 0;
        int known = 1, verified = 1;
        for (int i = 0; i < plan->n_arts; i++) {
            const store_artifact *a = &plan->arts[i];
            json_t *fa = json_pack("{s:s,s:s}", "path", a->file, "role", a->role);
            if (a->length) json_object_set_new(fa, "length", json_integer((json_int_t)a->length));
            if (a->sha[0]) json_object_set_new(fa, "sha256", json_string(a->sha));
            json_array_append_new(files, fa);
            total += a->length;
            known = known && a->length;
            verified = verified && a->sha[0] && a->length;
        }
        json_object_set_new(out, "files", files);
        if (known) json_object_set_new(out, "size", json_integer((json_int_t)total));
        /* lengths and hashes the source published; a URL publishes none */
        json_object_set_new(out, "metadata_verified", json_boolean(verified));
        st = read_header(plan, &plan->arts[0], &cr, &net, out);
        if (!st && !known && plan->n_arts == 1) json_object_set(out, "size", json_object_get(out, "model_file_size"));
    }
    if (!st) {
        *json_out = json_dumps(out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (!*json_out) st = base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    json_decref(out);
    if (plan) json_decref(plan->source);
    free(plan);
    store_creds_wipe(&cr);
    if (st && kiln_store_last_source_result() == KILN_SOURCE_OK) store_source_set(KILN_SOURCE_OTHER);
    return st;
}
