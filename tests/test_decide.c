/*
 * test_decide — the decision engine on the pack of tests/gen_encoders.py
 * (modernbert-decide.gguf): probabilities against the float64 PyTorch
 * references within 1e-5 (labels and options heads, temperatures by type
 * and by option-count bucket, truncated states), batch equals solo,
 * Measure's rule on many state lengths (a question truncates exactly when
 * the state has more tokens than its budget; kept = min(state, budget)),
 * measure-only deciders, invalid requests, malformed configurations
 * (KILN_ERR_FORMAT, nothing resident), heads that disagree with the
 * configuration (KILN_ERR_CORRUPT), and the engine's decision family.
 */
#include "kiln.h"
#include "testutil.h"

#include "gguf/gguf.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PACK "data/encoders/modernbert-decide.gguf"
#define MAX_Q 8

static json_t *g_ref;
static kiln_decide_question g_q[MAX_Q];
static const char *g_opts[MAX_Q][8];
static int g_nq;

static void load_questions(void) {
    json_error_t je;
    g_ref = json_load_file("data/encoders/modernbert-decide.json", 0, &je);
    CHECKF(g_ref != NULL, "%s", je.text);
    if (!g_ref) return;
    json_t *qs = json_object_get(g_ref, "questions");
    g_nq = (int)json_array_size(qs);
    CHECK(g_nq > 0 && g_nq <= MAX_Q);
    for (int i = 0; i < g_nq && i < MAX_Q; i++) {
        json_t *q = json_array_get(qs, (size_t)i), *o = json_object_get(q, "options");
        g_q[i].id = json_string_value(json_object_get(q, "id"));
        g_q[i].type = json_string_value(json_object_get(q, "type"));
        g_q[i].text = json_string_value(json_object_get(q, "text"));
        g_q[i].n_options = (int32_t)json_array_size(o);
        for (int k = 0; k < g_q[i].n_options && k < 8; k++)
            g_opts[i][k] = json_string_value(json_array_get(o, (size_t)k));
        g_q[i].options = g_q[i].n_options ? g_opts[i] : NULL;
    }
}

static void test_references(kiln_decider *d) {
    json_t *cases = json_object_get(g_ref, "cases");
    double worst = 0, worst_solo = 0;
    int n_trunc = 0;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c), *res = json_object_get(cs, "results");
        kiln_decide_request r = {json_string_value(json_object_get(cs, "state")), 0, g_nq, g_q};
        kiln_decide_job *j = NULL;
        CHECKF(kiln_decide(d, &r, &j) == KILN_OK, "%s", kiln_last_error());
        if (!j) continue;
        const kiln_decisions *out = kiln_decide_result(j);
        CHECK(out->n == g_nq && out->state_tokens == json_integer_value(json_object_get(cs, "state_tokens")));
        int32_t n_state = -1, budgets[MAX_Q];
        CHECK(kiln_decide_measure(d, &r, &n_state, budgets) == KILN_OK && n_state == out->state_tokens);
        for (int i = 0; i < g_nq; i++) {
            json_t *e = json_array_get(res, (size_t)i), *p = json_object_get(e, "probabilities");
            const kiln_decision *dc = &out->d[i];
            CHECK(!strcmp(dc->id, g_q[i].id) && !strcmp(dc->type, g_q[i].type));
            CHECKF(dc->n == (int32_t)json_array_size(p), "question %d: %d outcomes", i, dc->n);
            double sum = 0;
            for (int k = 0; k < dc->n; k++) {
                worst = fmax(worst, fabs(dc->probs[k] - json_number_value(json_array_get(p, (size_t)k))));
                sum += dc->probs[k];
                CHECK(dc->probs[k] <= dc->probs[dc->best]);
            }
            CHECK(fabs(sum - 1) < 1e-5);
            CHECKF(fabsf(dc->temperature - (float)json_number_value(json_object_get(e, "temperature"))) < 1e-6f,
                   "question %d: temperature %g", i, dc->temperature);
            const int tr = json_is_true(json_object_get(e, "truncated"));
            const int32_t budget = (int32_t)json_integer_value(json_object_get(e, "budget"));
            CHECK(dc->truncated == tr && budgets[i] == budget);
            CHECK(dc->state_tokens_kept == (n_state < budget ? n_state : budget));
            n_trunc += tr;
            if (g_q[i].n_options) CHECK(!strcmp(dc->labels[0], g_q[i].options[0]));
            /* alone */
            kiln_decide_request one = {r.state, 0, 1, &g_q[i]};
            kiln_decide_job *o = NULL;
            CHECK(kiln_decide(d, &one, &o) == KILN_OK);
            for (int k = 0; o && k < dc->n; k++)
                worst_solo = fmax(worst_solo, fabs(kiln_decide_result(o)->d[0].probs[k] - dc->probs[k]));
            kiln_decide_job_free(o);
        }
        kiln_decide_job_free(j);
    }
    CHECK(n_trunc > 0);
    CHECKF(worst <= 1e-5, "probabilities differ from the reference by %g", worst);
    CHECKF(worst_solo <= 1e-6, "batch differs from solo by %g", worst_solo);
    printf("references: worst probability error %.3g, batch vs solo %.3g, %d truncated\n", worst, worst_solo, n_trunc);
}

/* The truncation rule on states of 0 to 80 words (more than the largest
 * budget), against decide's own report, and measure-only deciders. */
static void test_measure_rule(kiln_decider *d, kiln_decider *meter) {
    char state[2048] = "";
    int checked = 0, truncations = 0, bad = 0, prev_tokens = -1;
    for (int w = 0; w <= 80; w++) {
        if (w) strcat(state, w % 3 ? " kiln" : " clay,");
        kiln_decide_request r = {state, 0, g_nq, g_q};
        int32_t n_state, budgets[MAX_Q], n2, b2[MAX_Q];
        if (kiln_decide_measure(d, &r, &n_state, budgets) != KILN_OK ||
            kiln_decide_measure(meter, &r, &n2, b2) != KILN_OK) {
            bad++;
            continue;
        }
        bad += n2 != n_state || memcmp(budgets, b2, sizeof budgets[0] * (size_t)g_nq) != 0;
        bad += n_state < prev_tokens;
        prev_tokens = n_state;
        kiln_decide_job *j = NULL;
        if (w % 4 == 0 || (n_state >= 30 && n_state <= 42)) { /* decide where the budgets are crossed */
            if (kiln_decide(d, &r, &j) != KILN_OK) {
                bad++;
                continue;
            }
            const kiln_decisions *out = kiln_decide_result(j);
            for (int i = 0; i < g_nq; i++) {
                const int tr = n_state > budgets[i];
                bad += out->d[i].truncated != tr;
                bad += out->d[i].state_tokens_kept != (tr ? budgets[i] : n_state);
                truncations += tr;
                checked++;
            }
            kiln_decide_job_free(j);
        }
    }
    CHECKF(bad == 0, "%d disagreements with the truncation rule", bad);
    CHECKF(checked >= 80 && truncations > 20 && truncations < checked, "%d checked, %d truncated", checked,
           truncations);
    kiln_decide_job *j = NULL;
    kiln_decide_request r = {"x", 0, g_nq, g_q};
    CHECK(kiln_decide(meter, &r, &j) == KILN_ERR_STATE && !j);
}

static void expect_invalid(kiln_decider *d, kiln_decide_question q, const char *what) {
    kiln_decide_request r = {"state", 0, 1, &q};
    kiln_decide_job *j = NULL;
    int32_t n, b;
    CHECKF(kiln_decide(d, &r, &j) == KILN_ERR_INVALID_ARG && !j, "%s: %s", what, kiln_last_error());
    CHECKF(kiln_decide_measure(d, &r, &n, &b) == KILN_ERR_INVALID_ARG, "%s", what);
    CHECKF(strstr(kiln_last_error(), what), "'%s' not in '%s'", what, kiln_last_error());
}

static void test_invalid(kiln_decider *d) {
    static const char *five[] = {"a", "b", "c", "d", "e"};
    static const char *two[] = {"a", "b"};
    expect_invalid(d, (kiln_decide_question){"x", "nosuch", "t", 0, NULL}, "unknown question type 'nosuch'");
    expect_invalid(d, (kiln_decide_question){"x", "pick", "t", 5, five}, "5 options, but type 'pick' has 4");
    expect_invalid(d, (kiln_decide_question){"x", "route", "t", 2, two}, "takes no options");
    expect_invalid(d, (kiln_decide_question){"x", "pick", "t", 0, NULL}, "none were given");
    expect_invalid(d,
                   (kiln_decide_question){"x", "route",
                                          "a question text that is much longer than the head "
                                          "budget of this small pack allows, which is sixteen tokens of the "
                                          "question and its options together",
                                          0, NULL},
                   "head_max_len");
    /* no questions: an empty result */
    kiln_decide_request r = {"state", 0, 0, NULL};
    kiln_decide_job *j = NULL;
    CHECK(kiln_decide(d, &r, &j) == KILN_OK && j && kiln_decide_result(j)->n == 0);
    kiln_decide_job_free(j);
}

/* Writes the pack with its configuration replaced (NULL: removed). */
static int rewrite(const char *out, const char *config) {
    char err[256];
    gguf_file *f;
    if (gguf_open(PACK, &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    if (!f) return -1;
    gguf_writer *w = gguf_writer_new();
    for (int i = 0; i < gguf_n_kv(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        if (strcmp(kv->key, "kiln.decision.config")) gguf_w_copy_kv(w, kv);
    }
    if (config) gguf_w_str(w, "kiln.decision.config", config, strlen(config));
    for (int i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        gguf_w_tensor(w, t->name, t->type, (int)t->n_dims, t->ne, t->data);
    }
    int rc = gguf_writer_save(w, out, NULL, NULL);
    gguf_writer_free(w);
    gguf_close(f);
    return rc;
}

static void test_bad_packs(void) {
    char dir[] = "/tmp/kiln-test-decide-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/pack.gguf", dir);
    json_t *good = json_object_get(g_ref, "config");
    /* each case: a change to the configuration, and the status it gives */
    static const struct {
        const char *patch; /* JSON object merged over the good configuration ("" = invalid JSON) */
        kiln_status st;
        const char *msg;
    } cases[] = {
        {"", KILN_ERR_FORMAT, "not JSON"},
        {"{\"format\": \"other/2\"}", KILN_ERR_FORMAT, "format"},
        {"{\"temperature\": {\"route\": 0, \"pick\": 0.8, \"yesno\": 2}}", KILN_ERR_FORMAT, "positive, finite"},
        {"{\"temperature\": {\"route\": -1.5, \"pick\": 0.8, \"yesno\": 2}}", KILN_ERR_FORMAT, "positive, finite"},
        {"{\"temperature\": {\"route\": 1e39, \"pick\": 0.8, \"yesno\": 2}}", KILN_ERR_FORMAT, "positive, finite"},
        {"{\"temperature\": {\"route\": 1.5, \"pick\": 0.8}}", KILN_ERR_FORMAT, "'yesno': temperature"},
        {"{\"temperature\": {\"route\": 1, \"pick\": 1, \"yesno\": 1, \"other\": 1}}", KILN_ERR_FORMAT, "'other'"},
        {"{\"temperature_by_options\": {\"pick\": {\"2-3\": 0.5, \"3-4\": 0.6}}}", KILN_ERR_FORMAT, "overlaps"},
        {"{\"temperature_by_options\": {\"pick\": {\"5\": 0.5}}}", KILN_ERR_FORMAT, "option slots"},
        {"{\"temperature_by_options\": {\"pick\": {\"2\": 0}}}", KILN_ERR_FORMAT, "positive, finite"},
        {"{\"temperature_by_options\": {\"route\": {\"2\": 1}}}", KILN_ERR_FORMAT, "labels type"},
        {"{\"head_max_len\": 46}", KILN_ERR_FORMAT, "head_max_len"},
        {"{\"max_len\": 2}", KILN_ERR_FORMAT, "max_len"},
        {"{\"pooling\": \"max\"}", KILN_ERR_FORMAT, "pooling"},
        {"{\"question_types\": {\"route\": {\"head\": \"route\", \"labels\": [\"a\"], \"option_slots\": 2}}}",
         KILN_ERR_FORMAT, "exactly one"},
        {"{\"question_types\": {\"route\": {\"head\": \"route\", \"labels\": [\"a\", \"b\", \"c\", \"d\"]}, "
         "\"pick\": {\"head\": \"pick\", \"option_slots\": 4}, \"yesno\": {\"head\": \"yesno\", \"labels\": "
         "[\"no\", \"yes\"]}}}",
         KILN_ERR_CORRUPT, "model corrupt"},
        {"{\"question_types\": {\"route\": {\"head\": \"other\", \"labels\": [\"a\", \"b\", \"c\"]}, "
         "\"pick\": {\"head\": \"pick\", \"option_slots\": 4}, \"yesno\": {\"head\": \"yesno\", \"labels\": "
         "[\"no\", \"yes\"]}}}",
         KILN_ERR_CORRUPT, "no decision.other.out.weight"},
        {"{\"max_len\": 300}", KILN_ERR_CORRUPT, "exceeds the encoder's 256 positions"},
        {NULL, KILN_ERR_FORMAT, "not a decision pack"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *cfg = NULL;
        if (cases[i].patch && *cases[i].patch) {
            json_t *c = json_deep_copy(good), *patch = json_loads(cases[i].patch, 0, NULL);
            CHECKF(patch != NULL, "case %zu", i);
            json_object_update(c, patch);
            cfg = json_dumps(c, JSON_COMPACT);
            json_decref(c);
            json_decref(patch);
        } else if (cases[i].patch) {
            cfg = strdup("{\"format\": ");
        }
        CHECK(rewrite(path, cfg) == 0);
        kiln_decider *d = NULL;
        const kiln_status st = kiln_decider_new(path, NULL, &d);
        CHECKF(st == cases[i].st && !d, "case %zu: status %d (%s), want %d", i, st, kiln_last_error(), cases[i].st);
        CHECKF(strstr(kiln_last_error(), cases[i].msg), "case %zu: '%s' not in '%s'", i, cases[i].msg,
               kiln_last_error());
        kiln_decider_free(d);
        free(cfg);
    }
    unlink(path);
    rmdir(dir);
}

static void test_engine(void) {
    const kiln_engine_family *f = kiln_engine_family_find("decision");
    CHECK(f && f->id == KILN_ENGINE_DECISION && f->available);
    kiln_engine *e = NULL;
    CHECK(kiln_engine_create(KILN_ENGINE_DECISION, KILN_ENGINE_BACKEND_AUTO, &e) == KILN_OK);
    if (!e) return;
    CHECK(kiln_engine_start(e) == KILN_OK);
    kiln_decide_request r = {"user asked about the weather in Paris tomorrow", 0, g_nq, g_q};
    kiln_decide_job *j = NULL;
    int32_t n_state, budgets[MAX_Q];
    CHECK(kiln_engine_decide(e, &r, NULL, &j) == KILN_ERR_STATE && !j); /* nothing loaded */
    CHECK(kiln_engine_decide_measure(e, &r, &n_state, budgets) == KILN_ERR_STATE);
    CHECK(kiln_engine_load(e, "data/encoders/modernbert.gguf", NULL) == KILN_ERR_FORMAT); /* no configuration */
    CHECKF(strstr(kiln_last_error(), "not a decision pack"), "%s", kiln_last_error());
    CHECK(kiln_engine_load(e, PACK, NULL) == KILN_OK && kiln_engine_wait_idle(e, 60000) == KILN_OK);
    CHECK(kiln_engine_decide_measure(e, &r, &n_state, budgets) == KILN_OK && n_state > 0);
    CHECKF(kiln_engine_decide(e, &r, NULL, &j) == KILN_OK && j, "%s", kiln_last_error());
    kiln_decider *d = NULL;
    kiln_decide_job *ref = NULL;
    CHECK(kiln_decider_new(PACK, NULL, &d) == KILN_OK && kiln_decide(d, &r, &ref) == KILN_OK);
    double worst = 0;
    for (int i = 0; j && ref && i < g_nq; i++)
        for (int k = 0; k < kiln_decide_result(j)->d[i].n; k++)
            worst = fmax(worst, fabs(kiln_decide_result(j)->d[i].probs[k] - kiln_decide_result(ref)->d[i].probs[k]));
    CHECKF(worst == 0, "engine vs direct differ by %g", worst);
    kiln_decide_job_free(j);
    kiln_decide_job_free(ref);
    kiln_decider_free(d);
    kiln_engine_cancel *c = kiln_engine_cancel_new();
    kiln_engine_cancel_fire(c);
    CHECK(kiln_engine_decide(e, &r, c, &j) == KILN_ERR_CANCELLED && !j);
    kiln_engine_cancel_free(c);
    CHECK(kiln_engine_unload(e, NULL) == KILN_OK && kiln_engine_wait_idle(e, 60000) == KILN_OK);
    CHECK(kiln_engine_destroy(e, NULL) == KILN_OK);
    kiln_engine_free(e);
}

int main(void) {
    load_questions();
    if (!g_ref) return t_done();
    kiln_decider *d = NULL, *meter = NULL;
    CHECKF(kiln_decider_new(PACK, NULL, &d) == KILN_OK, "%s", kiln_last_error());
    kiln_decider_params mp = kiln_decider_default_params();
    mp.measure_only = 1;
    CHECKF(kiln_decider_new(PACK, &mp, &meter) == KILN_OK, "%s", kiln_last_error());
    if (d && meter) {
        kiln_decider_info info;
        kiln_decider_get_info(d, &info);
        CHECK(info.max_len == 48 && info.head_max_len == 16 && info.n_types == 3 && !strcmp(info.arch, "modern-bert"));
        test_references(d);
        test_measure_rule(d, meter);
        test_invalid(d);
    }
    kiln_decider_free(d);
    kiln_decider_free(meter);
    test_bad_packs();
    test_engine();
    json_decref(g_ref);
    return t_done();
}
