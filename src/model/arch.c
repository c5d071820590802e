/* The supported architectures.  Adding a decoder that fits the common
 * block (norm, attention with RoPE, gated FFN) means adding a row here;
 * encoder rows are bound and run by bert.c. */
#include "model/model.h"

#include <string.h>

static const kl_arch k_archs[] = {
    /* name     neox  qkv_bias  qk_norm  encoder */
    {"llama",   0,    0,        0,       0},  /* Llama 2/3, Mistral, TinyLlama */
    {"qwen2",   1,    1,        0,       0},
    {"qwen3",   1,    0,        1,       0},
    {"bert",    0,    1,        0,       1},  /* BERT, bge, e5, MiniLM (absolute positions) */
};

const kl_arch *kl_arch_find(const char *name) {
    for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++)
        if (strcmp(k_archs[i].name, name) == 0) return &k_archs[i];
    return NULL;
}

const char *kl_arch_list(void) { return "llama, qwen2, qwen3, bert"; }
