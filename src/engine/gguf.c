/* Which engine family a GGUF file is for, and whether kiln runs it: the
 * checks every GGUF family makes before it loads (nothing is mapped). */
#include "engine/engine.h"

#include "base/base.h"
#include "gguf/gguf.h"
#include "model/model.h"

kiln_status engine_gguf_check(const char *path, int generate) {
    gguf_file *f;
    kiln_status gst = gguf_open(path, &f);
    if (gst) return gst;
    char name[64];
    const char *a = gguf_get_cstr(f, "general.architecture", name, sizeof name, NULL);
    const model_arch *arch = a ? model_arch_find(a) : NULL;
    kiln_status st = KILN_OK;
    if (!a)
        st = base_fail(KILN_ERR_FORMAT, "%s: no general.architecture in the metadata", path);
    else if (!arch)
        st = base_fail(KILN_ERR_UNSUPPORTED, "%s: unsupported architecture '%s' (kiln runs: %s)", path, a,
                       model_arch_list());
    else if (generate && arch->encoder)
        st = base_fail(KILN_ERR_UNSUPPORTED, "%s: '%s' is an encoder; it embeds but cannot generate", path, a);
    gguf_close(f);
    return st;
}

kiln_status engine_gguf_family(const char *path, kiln_engine_family_id *out) {
    kiln_status st = engine_gguf_check(path, 0);
    if (st != KILN_OK) return st;
    char name[64];
    gguf_file *f;
    if ((st = gguf_open(path, &f))) return st;
    const char *a = gguf_get_cstr(f, "general.architecture", name, sizeof name, NULL);
    const model_arch *arch = a ? model_arch_find(a) : NULL;
    *out = model_gguf_is_reranker(f) ? KILN_ENGINE_RERANK
           : arch && arch->encoder   ? KILN_ENGINE_EMBEDDING
                                     : KILN_ENGINE_LLM;
    gguf_close(f);
    return KILN_OK;
}
