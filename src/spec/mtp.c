/* The MTP proposer (spec.h).  No family of this build runs MTP blocks
 * yet, so every model is refused. */
#include "spec/spec.h"

#include "base/base.h"
#include "model/model.h"

spec_mtp *spec_mtp_new(const kiln_spec_params *p, kiln_model *m, kiln_context *c) {
    (void)p;
    (void)c;
    kb_fail(KILN_ERR_UNSUPPORTED, "%s has no MTP (nextn) blocks to propose with", m->arch_name);
    return NULL;
}

void spec_mtp_propose(void *self, gen_ask *asks, int32_t n) {
    (void)self;
    for (int32_t i = 0; i < n; i++) asks[i].n = 0;
}

void spec_mtp_free(spec_mtp *t) { (void)t; }
