/* Checked tensor lookups (check.h). */
#include "gguf/check.h"

#include "base/base.h"
#include "quant/quant.h"

#include <stdio.h>

/* "[a, b, c]" of the n extents ne, cut at cap bytes. */
static void shape_str(char *buf, size_t cap, const int64_t *ne, int n) {
    int o = snprintf(buf, cap, "[");
    for (int i = 0; i < n && o < (int)cap; i++)
        o += snprintf(buf + o, cap - (size_t)o, i ? ", %lld" : "%lld", (long long)ne[i]);
    if (o < (int)cap) snprintf(buf + o, cap - (size_t)o, "]");
}

kiln_status gguf_tensor_check(const gguf_file *f, const char *name, int dims, const int64_t *ne, int optional,
                              const gguf_tensor **out) {
    *out = NULL;
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return optional ? KILN_OK : base_fail(KILN_ERR_FORMAT, "missing tensor %s", name);
    int ok = (int)t->n_dims == dims;
    for (int d = 0; d < dims && ok; d++) ok = ne[d] < 0 ? t->ne[d] >= 1 : t->ne[d] == ne[d];
    if (!ok) {
        char a[96], b[96];
        shape_str(a, sizeof a, t->ne, (int)t->n_dims);
        shape_str(b, sizeof b, ne, dims);
        return base_fail(KILN_ERR_FORMAT, "tensor %s has shape %s, expected %s", name, a, b);
    }
    if (!quant_supported((int)t->type)) {
        const quant_traits *tr = quant_get((int)t->type);
        return base_fail(KILN_ERR_UNSUPPORTED, "tensor %s has type %s, which kiln cannot compute", name,
                         tr && tr->name ? tr->name : "?");
    }
    *out = t;
    return KILN_OK;
}
