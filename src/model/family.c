/* The registry of model families.  Each family's file declares its table
 * (kl_family) with the architecture names it serves; this list is the only
 * place that names the families, and it never names an architecture. */
#include "model/model.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static const kl_family *const k_families[] = {&kl_family_dense,      &kl_family_hybrid,      &kl_family_bert,
                                              &kl_family_modernbert, &kl_family_gemma_embed, &kl_family_gemma,
                                              &kl_family_deepseek2,  &kl_family_gptoss};
#define N_FAMILIES (sizeof k_families / sizeof k_families[0])

const kl_arch *kl_arch_find(const char *name) {
    for (size_t f = 0; f < N_FAMILIES; f++)
        for (int i = 0; i < k_families[f]->n_archs; i++)
            if (strcmp(k_families[f]->archs[i].name, name) == 0) return &k_families[f]->archs[i];
    return NULL;
}

static char g_list[512];
static pthread_once_t g_list_once = PTHREAD_ONCE_INIT;

static void build_list(void) {
    size_t o = 0;
    for (size_t f = 0; f < N_FAMILIES; f++)
        for (int i = 0; i < k_families[f]->n_archs; i++) {
            const char *n = k_families[f]->archs[i].name;
            if (o + strlen(n) + 3 >= sizeof g_list) return;
            o += (size_t)snprintf(g_list + o, sizeof g_list - o, "%s%s", o ? ", " : "", n);
        }
}

const char *kl_arch_list(void) {
    pthread_once(&g_list_once, build_list);
    return g_list;
}
