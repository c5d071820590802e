/* The registry of engine families: static definitions (nothing here opens
 * a file or a store) and the ops each family plugs into the engine. */
#include "engine/engine.h"

#include <string.h>

#define BACKEND_BIT(b) (1u << (b))

static const char *const llm_tasks[] = {"generate", "embed", NULL};
static const char *const embedding_tasks[] = {"embed", NULL};
static const char *const image_tasks[] = {"image", NULL};
static const char *const stt_tasks[] = {"transcribe", NULL};
static const char *const decision_tasks[] = {"decide", "measure", NULL};
static const char *const rerank_tasks[] = {"rerank", NULL};

/* Ordered by display order; the index is the family id. */
static const struct {
    kiln_engine_family def;
    const engine_ops *ops;
} families[] = {
    {{KILN_ENGINE_LLM, "llm", "Text generation", llm_tasks,
      BACKEND_BIT(KILN_ENGINE_BACKEND_AUTO) | BACKEND_BIT(KILN_ENGINE_BACKEND_CPU) |
          BACKEND_BIT(KILN_ENGINE_BACKEND_CUDA),
      1},
     &engine_llm_ops},
    {{KILN_ENGINE_EMBEDDING, "embedding", "Text embeddings", embedding_tasks,
      BACKEND_BIT(KILN_ENGINE_BACKEND_AUTO) | BACKEND_BIT(KILN_ENGINE_BACKEND_CPU), 1},
     &engine_embedding_ops},
    {{KILN_ENGINE_IMAGE, "image", "Text to image", image_tasks,
      BACKEND_BIT(KILN_ENGINE_BACKEND_AUTO) | BACKEND_BIT(KILN_ENGINE_BACKEND_CPU), 1},
     &engine_image_ops},
    {{KILN_ENGINE_STT, "stt", "Speech to text", stt_tasks,
      BACKEND_BIT(KILN_ENGINE_BACKEND_AUTO) | BACKEND_BIT(KILN_ENGINE_BACKEND_CPU), 1},
     &engine_stt_ops},
    {{KILN_ENGINE_DECISION, "decision", "Typed decisions", decision_tasks,
      BACKEND_BIT(KILN_ENGINE_BACKEND_AUTO) | BACKEND_BIT(KILN_ENGINE_BACKEND_CPU), 1},
     &engine_decision_ops},
    {{KILN_ENGINE_RERANK, "rerank", "Document reranking", rerank_tasks,
      BACKEND_BIT(KILN_ENGINE_BACKEND_AUTO) | BACKEND_BIT(KILN_ENGINE_BACKEND_CPU), 1},
     &engine_rerank_ops},
};

enum { N_FAMILIES = (int)(sizeof families / sizeof families[0]) };

int kiln_engine_family_count(void) { return N_FAMILIES; }

const kiln_engine_family *kiln_engine_family_at(int i) { return i >= 0 && i < N_FAMILIES ? &families[i].def : NULL; }

const kiln_engine_family *kiln_engine_family_find(const char *key) {
    if (!key) return NULL;
    for (int i = 0; i < N_FAMILIES; i++)
        if (strcmp(families[i].def.key, key) == 0) return &families[i].def;
    return NULL;
}

const engine_ops *engine_family_ops(kiln_engine_family_id id) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (families[i].def.id == id) return families[i].ops;
    return NULL;
}
