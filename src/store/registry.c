/* Ollama registry references: [HOST[:PORT]/][NAMESPACE/]MODEL[:TAG], read
 * as Ollama reads them (one part: library/MODEL; two: NAMESPACE/MODEL;
 * three: HOST/NAMESPACE/MODEL; the tag defaults to latest).  Names
 * without a host go to $KILN_REGISTRY (a base URL, default
 * https://registry.ollama.ai).
 *
 * The registry speaks the OCI distribution API: the manifest
 * (GET /v2/NS/MODEL/manifests/TAG, schema 2) lists layers by media type
 * and sha256 digest, and each layer is a blob (GET /v2/NS/MODEL/blobs/
 * sha256:HEX, usually a redirect to a CDN), checked against its digest
 * as it is downloaded.  The model layer is the GGUF; the template, system,
 * params and license layers become the pack's chat template override,
 * default system prompt, default options and license (defaults.c).
 *
 * A registry that answers 401 with a challenge "WWW-Authenticate: Bearer
 * realm=...,service=...,scope=..." gets the token exchange of the
 * distribution spec: GET realm?service=...&scope=... (the scope the
 * challenge names, else repository:NS/MODEL:pull), whose JSON gives
 * "token" (or "access_token"), then the manifest again with that token,
 * which the blobs use too.  The caller's credentials go to the realm only
 * when it is on the registry's own origin; another origin is asked
 * anonymously.  A failed exchange reports the registry's 401. */
#include "store/store.h"

#include "base/base.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define REG_MANIFEST_MAX (1u << 20)
#define REG_ACCEPT "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"

typedef struct reg_ref {
    char host[256]; /* "" = the default registry */
    char ns[128], model[128], tag[128];
} reg_ref;

static int part_ok(const char *s, size_t max) {
    size_t n = strlen(s);
    if (!n || n > max || !isalnum((unsigned char)s[0])) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '.' && c != '_' && c != '-') return 0;
    }
    return !strstr(s, "..");
}

static int host_ok(const char *s) {
    size_t n = strlen(s);
    if (!n || n > 253 || !isalnum((unsigned char)s[0])) return 0;
    const char *colon = strchr(s, ':');
    for (const char *c = s; *c; c++) {
        if (colon && c > colon) {
            if (!isdigit((unsigned char)*c)) return 0;
        } else if (c != colon && !isalnum((unsigned char)*c) && *c != '.' && *c != '-') {
            return 0;
        }
    }
    return !(colon && !colon[1]);
}

static kiln_status parse_ref(const char *ref, reg_ref *r) {
    memset(r, 0, sizeof *r);
    char buf[600];
    if (strlen(ref) >= sizeof buf) return base_fail(KILN_ERR_INVALID_ARG, "%.60s...: reference too long", ref);
    snprintf(buf, sizeof buf, "%s", ref);
    char *parts[4];
    int n = 0;
    for (char *p = buf, *slash;; p = slash + 1) {
        if (n == 3) return base_fail(KILN_ERR_INVALID_ARG, "%s: expected [HOST/][NAMESPACE/]MODEL[:TAG]", ref);
        parts[n++] = p;
        if (!(slash = strchr(p, '/'))) break;
        *slash = 0;
    }
    char *model = parts[n - 1];
    char *colon = strchr(model, ':');
    if (colon) *colon = 0;
    snprintf(r->model, sizeof r->model, "%.127s", model);
    snprintf(r->tag, sizeof r->tag, "%.127s", colon ? colon + 1 : "latest");
    snprintf(r->ns, sizeof r->ns, "%.127s", n >= 2 ? parts[n - 2] : "library");
    if (n == 3) snprintf(r->host, sizeof r->host, "%.255s", parts[0]);
    if ((n == 3 && !host_ok(r->host)) || !part_ok(r->ns, 80) || !part_ok(r->model, 80) || !part_ok(r->tag, 80))
        return base_fail(
            KILN_ERR_INVALID_ARG,
            "%s: not a model reference: [HOST/][NAMESPACE/]MODEL[:TAG] of letters, digits, '.', '_' and '-'", ref);
    return KILN_OK;
}

/* A parameter of a Bearer challenge (key="value", comma-separated; a
 * quoted value may hold commas) into out; 0 when it is absent. */
static int challenge_param(const char *www, const char *key, char *out, size_t cap) {
    const char *c = www + 7; /* after "Bearer " */
    const size_t kl = strlen(key);
    while (*c) {
        while (*c == ' ' || *c == ',') c++;
        const char *k = c;
        while (*c && *c != '=' && *c != ',') c++;
        size_t n = (size_t)(c - k);
        while (n && k[n - 1] == ' ') n--;
        if (*c != '=') continue;
        c++;
        while (*c == ' ') c++;
        char val[1024];
        size_t o = 0;
        if (*c == '"') {
            for (c++; *c && *c != '"'; c++) {
                if (*c == '\\' && c[1]) c++;
                if (o + 1 < sizeof val) val[o++] = *c;
            }
            if (*c == '"') c++;
        } else {
            for (; *c && *c != ','; c++)
                if (o + 1 < sizeof val) val[o++] = *c;
        }
        val[o] = 0;
        if (n == kl && !strncasecmp(k, key, kl)) {
            if (o >= cap) return 0;
            memcpy(out, val, o + 1);
            return 1;
        }
    }
    return 0;
}

/* The token exchange for a 401 challenge www: bearer receives
 * "Authorization: Bearer TOKEN".  headers go to the realm only when it is
 * on origin. */
static kiln_status exchange_token(const char *www, const reg_ref *r, const char *origin, const store_net *net,
                                  const char *const *headers, int n_headers, const char *what, char *bearer,
                                  size_t cap) {
    char realm[1024], service[256] = "", scope[512], rorigin[512];
    if (!challenge_param(www, "realm", realm, sizeof realm))
        return base_fail(KILN_ERR_FORMAT, "%s: the registry's challenge names no realm", what);
    kiln_status st = store_url_origin(realm, rorigin, sizeof rorigin);
    if (st) return st;
    challenge_param(www, "service", service, sizeof service);
    if (!challenge_param(www, "scope", scope, sizeof scope))
        snprintf(scope, sizeof scope, "repository:%s/%s:pull", r->ns, r->model);
    char esvc[800], escope[1600], url[4096];
    if (store_url_escape(service, esvc, sizeof esvc, 0) < 0 || store_url_escape(scope, escope, sizeof escope, 0) < 0)
        return base_fail(KILN_ERR_FORMAT, "%s: the registry's challenge is too long", what);
    int n = snprintf(url, sizeof url, "%s%s%s%s%sscope=%s", realm, strchr(realm, '?') ? "&" : "?",
                     esvc[0] ? "service=" : "", esvc, esvc[0] ? "&" : "", escope);
    if (n < 0 || (size_t)n >= sizeof url) return base_fail(KILN_ERR_FORMAT, "%s: the token URL is too long", what);
    const int same = !strcmp(rorigin, origin);
    char twhat[340];
    snprintf(twhat, sizeof twhat, "%s (its token)", what);
    store_http h = {.url = url,
                    .accept = "application/json",
                    .headers = same ? headers : NULL,
                    .n_headers = same ? n_headers : 0,
                    .auth_origin = same ? origin : NULL,
                    .what = twhat,
                    .follow = STORE_FOLLOW_SAME,
                    .max_body = 64 * 1024};
    st = store_http_get(&h, net);
    json_t *j = !st && h.code == 200 ? json_loadb(h.body, h.len, 0, NULL) : NULL;
    const char *tok = json_string_value(json_object_get(j, "token"));
    if (!tok || !*tok) tok = json_string_value(json_object_get(j, "access_token"));
    int ok = tok && *tok && strlen(tok) + 24 < cap;
    for (const char *c = tok; ok && *c; c++) ok = (unsigned char)*c > 0x20 && (unsigned char)*c < 0x7f;
    if (ok) snprintf(bearer, cap, "Authorization: Bearer %s", tok);
    if (!st && !ok) st = base_fail(KILN_ERR_STATE, "%s: the token service gave no token (HTTP %ld)", what, h.code);
    json_decref(j);
    if (h.body) memset(h.body, 0, h.len);
    store_http_done(&h);
    return st;
}

/* The base URL for r: $KILN_REGISTRY for names without a host (or whose
 * host is that registry's), else https://HOST (http for this machine). */
static kiln_status base_url(const reg_ref *r, char *out, size_t cap) {
    const char *env = getenv("KILN_REGISTRY");
    char def[512];
    snprintf(def, sizeof def, "%s", env && *env ? env : "https://registry.ollama.ai");
    size_t n = strlen(def);
    while (n > 0 && def[n - 1] == '/') def[--n] = 0;
    if (r->host[0]) {
        const char *h = strstr(def, "://");
        h = h ? h + 3 : def;
        if (strcasecmp(h, r->host)) {
            char host[256];
            snprintf(host, sizeof host, "%s", r->host);
            host[strcspn(host, ":")] = 0;
            snprintf(out, cap, "%s://%s", store_is_loopback(host) ? "http" : "https", r->host);
            return KILN_OK;
        }
    }
    snprintf(out, cap, "%s", def);
    return KILN_OK;
}

static const char *role_of(const char *media) {
    static const struct {
        const char *media, *role;
    } k[] = {
        {"application/vnd.ollama.image.model", "model"},
        {"application/vnd.ollama.image.projector", "mmproj"},
        {"application/vnd.ollama.image.template", "template"},
        {"application/vnd.ollama.image.prompt", "template"}, /* the template's older name */
        {"application/vnd.ollama.image.system", "system"},
        {"application/vnd.ollama.image.params", "params"},
        {"application/vnd.ollama.image.license", "license"},
        {"application/vnd.ollama.image.messages", "messages"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(media, k[i].media)) return k[i].role;
    return NULL;
}

static const char *file_of(const char *role) {
    if (!strcmp(role, "model")) return "model.gguf";
    if (!strcmp(role, "mmproj")) return "projector.gguf";
    if (!strcmp(role, "template")) return "template.gotmpl";
    if (!strcmp(role, "system")) return "system.txt";
    if (!strcmp(role, "params")) return "params.json";
    if (!strcmp(role, "messages")) return "messages.json";
    return "license.txt";
}

kiln_status store_registry_check(const char *ref) {
    reg_ref r;
    return parse_ref(ref, &r);
}

kiln_status store_registry_plan(const char *ref, const store_net *net, const char *const *headers, int n_headers,
                                int have_token, store_plan *plan) {
    reg_ref r;
    kiln_status st = parse_ref(ref, &r);
    if (st) return st;
    char base[600], origin[512], url[1400];
    if ((st = base_url(&r, base, sizeof base)) || (st = store_url_origin(base, origin, sizeof origin))) return st;
    plan->kind = STORE_SRC_REGISTRY;
    snprintf(plan->what, sizeof plan->what, "%s", ref);
    snprintf(plan->auth_origin, sizeof plan->auth_origin, "%s", origin);
    snprintf(url, sizeof url, "%s/v2/%s/%s/manifests/%s", base, r.ns, r.model, r.tag);

    store_http h = {.url = url,
                    .accept = REG_ACCEPT,
                    .headers = headers,
                    .n_headers = n_headers,
                    .auth_origin = origin,
                    .what = plan->what,
                    .follow = STORE_FOLLOW_ALL,
                    .max_body = REG_MANIFEST_MAX};
    st = store_http_get(&h, net);
    if (!st && h.code == 401 && !strncasecmp(h.www_auth, "Bearer ", 7)) {
        /* the token exchange, then the manifest again with the token in
         * place of the caller's Authorization */
        char www[sizeof h.www_auth];
        snprintf(www, sizeof www, "%s", h.www_auth);
        kiln_status xs =
            exchange_token(www, &r, origin, net, headers, n_headers, plan->what, plan->bearer, sizeof plan->bearer);
        if (!xs) {
            const char *hdrs[36];
            int nh = 0;
            for (int i = 0; i < n_headers && nh < 34; i++)
                if (strncasecmp(headers[i], "authorization:", 14)) hdrs[nh++] = headers[i];
            hdrs[nh++] = plan->bearer;
            store_http_done(&h);
            store_http h2 = {.url = url,
                             .accept = REG_ACCEPT,
                             .headers = hdrs,
                             .n_headers = nh,
                             .auth_origin = origin,
                             .what = plan->what,
                             .follow = STORE_FOLLOW_ALL,
                             .max_body = REG_MANIFEST_MAX};
            h = h2;
            st = store_http_get(&h, net);
            have_token = 1;
        } else if (xs == KILN_ERR_CANCELLED) {
            st = xs;
        } else {
            memset(plan->bearer, 0, sizeof plan->bearer); /* the registry's 401 stands */
        }
    }
    if (!st && h.code != 200) st = store_http_error(STORE_SRC_REGISTRY, h.code, "", plan->what, have_token);
    char digest[STORE_ID_LEN + 1] = "";
    if (!st) {
        store_sha256_hex(h.body ? h.body : "", h.len, digest);
        char want[STORE_ID_LEN + 1];
        /* a registry that names the manifest's digest must name these bytes */
        if (h.docker_digest[0] && (strncmp(h.docker_digest, "sha256:", 7) ||
                                   !store_etag_sha256(h.docker_digest + 7, want) || strcmp(want, digest)))
            st = store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT,
                                   "%s: unverified: the manifest does not match the digest the registry gives for it",
                                   plan->what);
    }
    json_t *m = st ? NULL : json_loadb(h.body, h.len, 0, NULL);
    store_http_done(&h);
    json_t *layers = json_object_get(m, "layers");
    if (!st && (json_integer_value(json_object_get(m, "schemaVersion")) != 2 || !json_is_array(layers) ||
                !json_array_size(layers) || json_array_size(layers) > STORE_MAX_ARTIFACTS))
        st = store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT,
                               "%s: unverified: the manifest is not a schema 2 manifest with 1 to %d layers",
                               plan->what, STORE_MAX_ARTIFACTS);
    int n_model = 0, n_license = 0;
    size_t i;
    json_t *l;
    json_array_foreach(st ? NULL : layers, i, l) {
        const char *media = json_string_value(json_object_get(l, "mediaType"));
        const char *dg = json_string_value(json_object_get(l, "digest"));
        json_t *jsize = json_object_get(l, "size");
        char hex[STORE_ID_LEN + 1];
        if (!media || !dg || strncmp(dg, "sha256:", 7) || !store_etag_sha256(dg + 7, hex) || strcmp(hex, dg + 7) ||
            !json_is_integer(jsize) || json_integer_value(jsize) < 0) {
            st = store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT,
                                   "%s: unverified: layer %zu has no sha256 digest and size", plan->what, i + 1);
            break;
        }
        const char *role = role_of(media);
        if (!role) {
            st = store_source_fail(KILN_SOURCE_OTHER, KILN_ERR_UNSUPPORTED,
                                   "%s: layer %zu is %s, which kiln does not run", plan->what, i + 1, media);
            break;
        }
        uint64_t size = (uint64_t)json_integer_value(jsize);
        if (strcmp(role, "model") && strcmp(role, "mmproj") && size > STORE_TEXT_MAX) {
            st = store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT,
                                   "%s: the %s layer is %llu bytes (at most %u)", plan->what, role,
                                   (unsigned long long)size, STORE_TEXT_MAX);
            break;
        }
        store_artifact *a = &plan->arts[plan->n_arts];
        memset(a, 0, sizeof *a);
        snprintf(a->role, sizeof a->role, "%s", role);
        if (!strcmp(role, "license"))
            snprintf(a->file, sizeof a->file, "license-%d.txt", ++n_license);
        else
            snprintf(a->file, sizeof a->file, "%s", file_of(role));
        if (!strcmp(role, "model")) n_model++;
        for (int k = 0; k < plan->n_arts; k++)
            if (!strcmp(plan->arts[k].file, a->file))
                st = store_source_fail(KILN_SOURCE_OTHER, KILN_ERR_UNSUPPORTED, "%s: more than one %s layer",
                                       plan->what, role);
        if (st) break;
        memcpy(a->sha, hex, sizeof a->sha);
        a->length = size;
        snprintf(a->url, sizeof a->url, "%s/v2/%s/%s/blobs/sha256:%s", base, r.ns, r.model, hex);
        plan->n_arts++;
    }
    if (!st && n_model != 1)
        st = store_source_fail(KILN_SOURCE_UNVERIFIED, KILN_ERR_FORMAT, "%s: the manifest has no model layer",
                               plan->what);
    if (!st) {
        /* the model first: pull.c and the store take the first artifact
         * as the pack's model */
        for (int k = 0; k < plan->n_arts; k++) {
            if (strcmp(plan->arts[k].role, "model")) continue;
            store_artifact tmp = plan->arts[0];
            plan->arts[0] = plan->arts[k];
            plan->arts[k] = tmp;
            break;
        }
        char name[300];
        snprintf(name, sizeof name, "%s/%s", r.ns, r.model);
        snprintf(plan->origin, sizeof plan->origin, "ollama:%s/%s/%s@sha256:%s", origin, r.ns, r.model, digest);
        char mdigest[80];
        snprintf(mdigest, sizeof mdigest, "sha256:%s", digest);
        plan->source = json_pack("{s:s,s:s,s:s,s:s,s:s}", "type", "ollama", "registry", base, "name", name, "tag",
                                 r.tag, "manifest", mdigest);
    }
    json_decref(m);
    return st;
}
