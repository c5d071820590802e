/* kiln engines on a store of this test's own: every family in registry
 * order (kiln_engine_family_at) with its built-ins; a built-in that is installed (a Whisper fixture
 * imported under a built-in name) and the others not downloaded; imported
 * models under the family that serves them (a reranker, a decision pack and
 * an image pack under their own); a linked pack whose file went
 * away is "files missing" naming it; a pack whose manifest names an
 * architecture kiln does not run (written here as a store would write it)
 * is "not supported" with the reason.  Listing takes no lease. */
#include "testutil.h"

#include "kiln.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *bin;
static char g_dir[] = "/tmp/kiln-engines-XXXXXX";

static int sh(const char *fmt, const char *a, const char *b) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int kiln(const char *args, char **out, char **err) {
    char cmd[4096], o[512], e[512];
    snprintf(o, sizeof o, "%s/out.txt", g_dir);
    snprintf(e, sizeof e, "%s/err.txt", g_dir);
    snprintf(cmd, sizeof cmd, "KILN_STORE='%s/store' '%s' %s >'%s' 2>'%s'", g_dir, bin, args, o, e);
    int rc = system(cmd);
    *out = t_read_file(o, NULL);
    *err = t_read_file(e, NULL);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static json_t *family(json_t *arr, const char *key) {
    size_t i;
    json_t *f;
    json_array_foreach(arr, i, f) if (!strcmp(json_string_value(json_object_get(f, "key")), key)) return f;
    return NULL;
}

static json_t *model(json_t *fam, const char *name) {
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(fam, "models"), i,
                       m) if (!strcmp(json_string_value(json_object_get(m, "name")), name)) return m;
    return NULL;
}

static const char *str(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

int main(void) {
    bin = getenv("KILN_BIN");
    if (!bin || !mkdtemp(g_dir)) {
        fprintf(stderr, "KILN_BIN is not set or no scratch directory\n");
        return 1;
    }
    char *o, *e, path[1024];
    /* an empty store: the four families, built-ins not downloaded */
    CHECK(kiln("engines --json", &o, &e) == 0);
    json_t *arr = o ? json_loads(o, 0, NULL) : NULL;
    /* the registry's families, in its order */
    CHECK((int)json_array_size(arr) == kiln_engine_family_count() && json_array_size(arr) >= 4);
    for (int i = 0; i < kiln_engine_family_count(); i++)
        CHECK(!strcmp(str(json_array_get(arr, (size_t)i), "key"), kiln_engine_family_at(i)->key));
    const char *order[] = {"llm", "embedding", "image", "stt"};
    for (int i = 0; i < 4; i++) CHECK(!strcmp(str(json_array_get(arr, (size_t)i), "key"), order[i]));
    json_t *stt = family(arr, "stt");
    CHECK(json_integer_value(json_object_get(stt, "builtin_count")) == 12);
    CHECK(json_array_size(json_object_get(stt, "models")) == 12);
    CHECK(!strcmp(str(model(stt, "whisper:base.en"), "state"), "not-downloaded"));
    CHECK(!strcmp(str(model(stt, "whisper:base.en"), "published_size"), "142 MiB"));
    CHECK(json_array_size(json_object_get(family(arr, "llm"), "models")) == 0);
    json_decref(arr);
    free(o);
    free(e);

    /* models of three families, one linked to a copy that then goes away */
    snprintf(path, sizeof path, "%s/linked.gguf", g_dir);
    CHECK(sh("cp ../models/stories260K.gguf '%s'%s", path, "") == 0);
    char args[2048];
    CHECK(kiln("import data/whisper/tiny-en-q8_0.bin --name whisper:tiny.en", &o, &e) == 0);
    free(o), free(e);
    CHECK(kiln("import data/fixtures/bert-embed.gguf --name bert", &o, &e) == 0);
    free(o), free(e);
    CHECK(kiln("import ../models/stories260K.gguf --name stories", &o, &e) == 0);
    free(o), free(e);
    /* a reranker and a decision pack (encoders both: their manifests
     * record the family) and an image pack */
    CHECK(kiln("import data/encoders/bert-rerank.gguf --name rr", &o, &e) == 0);
    free(o), free(e);
    CHECK(kiln("import data/encoders/modernbert-decide.gguf --name dd", &o, &e) == 0);
    free(o), free(e);
    CHECKF(kiln("import data/image/tiny --name shapes", &o, &e) == 0, "%s", e ? e : "");
    free(o), free(e);
    snprintf(args, sizeof args, "import '%s' --name gone --link", path);
    CHECK(kiln(args, &o, &e) == 0);
    free(o), free(e);
    CHECK(unlink(path) == 0);
    /* a pack as the store writes one, whose architecture kiln does not run:
     * the bert pack's file under a manifest naming "mamba", its id the
     * manifest's SHA-256 */
    char store[600];
    snprintf(store, sizeof store, "%s/store", g_dir);
    CHECK(sh("cd '%s' && id=$(cat names/bert:latest) && "
             "sed 's/\"arch\":\"bert\"/\"arch\":\"mamba\"/' packs/$id/manifest.json > m.json && "
             "nid=$(sha256sum m.json | cut -c1-64) && mkdir packs/$nid && mv m.json packs/$nid/manifest.json && "
             "cp packs/$id/bert-embed.gguf packs/$nid/ && printf %%s $nid > names/ssm:latest%s",
             store, "") == 0);

    CHECK(kiln("engines --json", &o, &e) == 0);
    arr = o ? json_loads(o, 0, NULL) : NULL;
    free(o);
    free(e);
    stt = family(arr, "stt");
    json_t *w = model(stt, "whisper:tiny.en");
    CHECK(w && json_is_true(json_object_get(w, "builtin")) && !strcmp(str(w, "state"), "installed"));
    CHECK(w && !strcmp(str(w, "arch"), "whisper") && !strcmp(str(w, "quantization"), "Q8_0"));
    CHECK(json_array_size(json_object_get(stt, "models")) == 12);
    CHECK(!strcmp(str(json_array_get(json_object_get(stt, "models"), 0), "name"), "whisper:tiny"));
    json_t *emb = family(arr, "embedding");
    CHECK(json_array_size(json_object_get(emb, "models")) == 1); /* not the reranker nor the decision pack */
    CHECK(!strcmp(str(model(emb, "bert:latest"), "state"), "installed"));
    json_t *llm = family(arr, "llm");
    /* by name: gone, ssm, stories */
    json_t *ms = json_object_get(llm, "models");
    CHECK(json_array_size(ms) == 3);
    CHECK(!strcmp(str(json_array_get(ms, 0), "name"), "gone:latest"));
    CHECK(!strcmp(str(json_array_get(ms, 1), "name"), "ssm:latest"));
    CHECK(!strcmp(str(json_array_get(ms, 2), "name"), "stories:latest"));
    json_t *gone = model(llm, "gone:latest");
    CHECK(!strcmp(str(gone, "state"), "files-missing") && !strcmp(str(gone, "file"), "linked.gguf"));
    json_t *ssm = model(llm, "ssm:latest");
    CHECK(!strcmp(str(ssm, "state"), "not-supported") && strstr(str(ssm, "reason"), "'mamba'"));
    CHECK(!strcmp(str(model(llm, "stories:latest"), "state"), "installed"));
    json_t *img = family(arr, "image");
    CHECK(json_array_size(json_object_get(img, "models")) == 1 &&
          !strcmp(str(model(img, "shapes:latest"), "state"), "installed") &&
          !strcmp(str(model(img, "shapes:latest"), "arch"), "image"));
    json_t *rr = family(arr, "rerank"), *dd = family(arr, "decision");
    CHECK(json_array_size(json_object_get(rr, "models")) == 1 &&
          !strcmp(str(model(rr, "rr:latest"), "state"), "installed"));
    CHECK(json_array_size(json_object_get(dd, "models")) == 1 &&
          !strcmp(str(model(dd, "dd:latest"), "state"), "installed"));
    json_decref(arr);
    /* kiln ls --json says the family the architecture does not */
    CHECK(kiln("ls --json", &o, &e) == 0);
    CHECK(o && strstr(o, "\"family\": \"rerank\"") && strstr(o, "\"family\": \"decision\""));
    free(o);
    free(e);

    /* the table says the same in words */
    CHECK(kiln("engines", &o, &e) == 0);
    CHECKF(o && strstr(o, "files missing (linked.gguf)") && strstr(o, "not supported (architecture 'mamba'") &&
               strstr(o, "whisper:tiny.en              built-in, installed") &&
               strstr(o, "whisper:base                 built-in, not downloaded (142 MiB)") &&
               strstr(o, "stt        Speech to text  (tasks: transcribe; backends: auto,cpu; 12 built-ins)"),
           "%s", o ? o : "");
    free(o);
    free(e);
    /* nothing was leased; an unknown option is a usage error */
    snprintf(path, sizeof path, "%s/store/leases", g_dir);
    CHECK(sh("test -z \"$(ls -A '%s')\"%s", path, "") == 0);
    CHECK(kiln("engines --bogus", &o, &e) == 2 && e && strstr(e, "unknown option '--bogus'"));
    free(o);
    free(e);
    sh("rm -rf '%s'%s", g_dir, "");
    return t_done();
}
