/* Loading a command's model: a store pack's defaults under the command
 * line's options, then the model and a context. */
#include "cli/model.h"

#include "cli/common.h"
#include "store/store.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- a pack's defaults under the command line's options ---- */

/* unset until cli_pack_apply: values no option parser writes */
#define UNSET_F NAN
#define UNSET_I INT_MIN
#define UNSET_SEED UINT64_MAX

void cli_pack_mark(cli_opts *o) {
    o->sp.temperature = o->sp.top_p = o->sp.min_p = o->sp.repeat_penalty = UNSET_F;
    o->sp.presence_penalty = o->sp.frequency_penalty = UNSET_F;
    o->sp.top_k = o->sp.repeat_last_n = o->n_predict = o->n_ctx = o->n_threads = o->n_batch = UNSET_I;
    o->sp.seed = UNSET_SEED;
}

static void take_f(float *v, float base, json_t *opts, const char *key) {
    if (!isnan(*v)) return;
    json_t *j = json_object_get(opts, key);
    double d = json_number_value(j);
    *v = json_is_number(j) && isfinite(d) && fabs(d) < 1e6 ? (float)d : base;
}

static void take_i(int32_t *v, int32_t base, json_t *opts, const char *key, int32_t lo) {
    if (*v != UNSET_I) return;
    json_t *j = json_object_get(opts, key);
    double d = json_number_value(j);
    *v = json_is_number(j) && d >= lo && d <= 1 << 30 && d == (double)(int32_t)d ? (int32_t)d : base;
}

void cli_pack_apply(cli_opts *o, const cli_opts *base, cli_pack *pk) {
    memset(pk, 0, sizeof *pk);
    json_t *info = NULL;
    struct stat st;
    kiln_store *s = NULL;
    char *txt = NULL;
    /* a file path has no pack; a store name may */
    if (o->model && stat(o->model, &st) != 0 && kiln_store_open(NULL, &s) == KILN_OK &&
        kiln_store_info(s, o->model, &txt) == KILN_OK)
        info = json_loads(txt, 0, NULL);
    kiln_store_free_string(txt);
    kiln_store_close(s);
    json_t *d = json_object_get(info, "defaults");
    json_t *opts = json_object_get(d, "options");
    kiln_sampler_params *p = &o->sp;
    const kiln_sampler_params *b = &base->sp;
    take_f(&p->temperature, b->temperature, opts, "temperature");
    take_f(&p->top_p, b->top_p, opts, "top_p");
    take_f(&p->min_p, b->min_p, opts, "min_p");
    take_f(&p->repeat_penalty, b->repeat_penalty, opts, "repeat_penalty");
    take_f(&p->presence_penalty, b->presence_penalty, opts, "presence_penalty");
    take_f(&p->frequency_penalty, b->frequency_penalty, opts, "frequency_penalty");
    take_i(&p->top_k, b->top_k, opts, "top_k", 0);
    take_i(&p->repeat_last_n, b->repeat_last_n, opts, "repeat_last_n", -1);
    take_i(&o->n_predict, base->n_predict, opts, "num_predict", -1);
    take_i(&o->n_ctx, base->n_ctx, opts, "num_ctx", 0);
    take_i(&o->n_threads, base->n_threads, opts, "num_thread", 0);
    take_i(&o->n_batch, base->n_batch, opts, "num_batch", 1);
    if (p->seed == UNSET_SEED) {
        json_t *j = json_object_get(opts, "seed");
        /* Ollama's -1 is a random seed: the default here */
        p->seed = json_is_integer(j) && json_integer_value(j) >= 0 ? (uint64_t)json_integer_value(j) : b->seed;
    }
    /* the pack's stop strings when the command line gave none (longer
     * ones than the options hold are dropped with a warning) */
    json_t *stop = json_object_get(opts, "stop");
    if (o->n_stop == 0 && (json_is_string(stop) || json_is_array(stop))) {
        size_t n = json_is_string(stop) ? 1 : json_array_size(stop);
        for (size_t i = 0; i < n; i++) {
            const char *t = json_string_value(json_is_string(stop) ? stop : json_array_get(stop, i));
            if (!t || !*t) continue;
            if (o->n_stop == 8 || strlen(t) >= sizeof o->stop[0]) {
                fprintf(stderr, "kiln: the pack's stop string '%.40s' is left out (at most 8 of up to %zu bytes)\n", t,
                        sizeof o->stop[0] - 1);
                continue;
            }
            snprintf(o->stop[o->n_stop++], sizeof o->stop[0], "%s", t);
        }
    }
    const char *sys = json_string_value(json_object_get(d, "system"));
    const char *tmpl = json_string_value(json_object_get(d, "template"));
    if (sys) pk->system = strdup(sys);
    if (tmpl) pk->template_go = strdup(tmpl);
    json_decref(info);
}

void cli_pack_free(cli_pack *pk) {
    free(pk->system);
    free(pk->template_go);
    memset(pk, 0, sizeof *pk);
}

int cli_load(const cli_opts *o, kiln_model **m, kiln_context **c, int n_seq) {
    *m = NULL;
    *c = NULL;
    if (!o->model) {
        fprintf(stderr, "kiln: no model given (use -m MODEL.gguf)\n");
        return 1;
    }
    const char *path;
    if (cli_model_path(o->model, 0, &path)) return 1;
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = o->n_ctx;
    cp.n_threads = o->n_threads;
    cp.n_batch = o->n_batch > 0 ? o->n_batch : 512;
    cp.n_seq_max = n_seq;
    cp.kv_type = o->kv_type;
    cp.mtp = o->spec.type == KILN_SPEC_MTP;
    kiln_model_params mp = kiln_model_default_params();
    mp.backend = o->device;
    mp.gpu_layers = o->gpu_layers;
    mp.ctx = &cp;
    char companion[4096];
    int found = 0;
    if (o->mmproj)
        mp.mmproj = o->mmproj;
    else if ((found =
                  store_pack_companion(path, "mmproj", companion, sizeof companion))) /* a pulled model's projector */
        mp.mmproj = companion;
    kiln_status st = kiln_model_load(path, &mp, m);
    if (st != KILN_OK && found) { /* a pack's projector kiln cannot read: the model still runs text */
        fprintf(stderr, "kiln: warning: not loading the projector %s (%s): images are refused\n", companion,
                kiln_last_error());
        mp.mmproj = NULL;
        st = kiln_model_load(path, &mp, m);
    }
    if (st != KILN_OK) return cli_fail(NULL);
    if (o->n_image > 0 && !kiln_model_has_vision(*m)) {
        fprintf(stderr, "kiln: %s does not take images (it has no projector; give one with --mmproj FILE)\n", o->model);
        kiln_model_free(*m);
        *m = NULL;
        return 1;
    }
    if (kiln_context_new(*m, &cp, c) != KILN_OK) {
        cli_fail(o->model);
        kiln_model_free(*m);
        *m = NULL;
        return 1;
    }
    if (o->verbose) { /* the load line: what runs, and on which kernel path */
        kiln_model_info info;
        kiln_model_get_info(*m, &info);
        char where[160];
        if (!strcmp(info.backend, "cuda") && info.gpu_layers < info.n_layer)
            snprintf(where, sizeof where, "CUDA (%d of %d layers, %.0f MiB of weights on the GPU; the rest on the CPU)",
                     info.gpu_layers, info.n_layer, (double)info.device_bytes / 1048576.0);
        else if (!strcmp(info.backend, "cuda"))
            snprintf(where, sizeof where, "CUDA (%.0f MiB of weights on the GPU)",
                     (double)info.device_bytes / 1048576.0);
        else
            snprintf(where, sizeof where, "CPU (%s%s)", kiln_cpu_path(), info.repacked_bytes ? ", repack" : "");
        fprintf(stderr, "kiln: loaded %s: %s %s, %.2f M params, %d-token context, %s\n", o->model, info.arch,
                info.ftype, (double)info.n_params / 1e6, kiln_context_n_ctx(*c), where);
    }
    return 0;
}
