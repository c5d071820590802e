/* The public speech-to-text entry points (kiln.h, "speech to text"). */
#include "whisper/whisper.h"

#include "audio/audio.h"
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kiln_stt {
    whisper_model *m;
};

kiln_status kiln_stt_load(const char *path, kiln_stt **out) {
    if (!out) return base_fail(KILN_ERR_INVALID_ARG, "no output handle");
    *out = NULL;
    if (!path) return base_fail(KILN_ERR_INVALID_ARG, "no model path");
    whisper_model *m;
    kiln_status st = whisper_load(path, &m);
    if (st) return st;
    kiln_stt *s = calloc(1, sizeof *s);
    if (!s) {
        whisper_free(m);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    s->m = m;
    *out = s;
    return KILN_OK;
}

int kiln_is_whisper_file(const char *path) { return path && whisper_is_ggml_file(path); }

void kiln_stt_free(kiln_stt *s) {
    if (!s) return;
    whisper_free(s->m);
    free(s);
}

const whisper_model *whisper_of(const kiln_stt *s) { return s ? s->m : NULL; }

void kiln_stt_get_info(const kiln_stt *s, kiln_stt_info *info) {
    memset(info, 0, sizeof *info);
    if (!s) return;
    const whisper_model *m = s->m;
    const whisper_hparams *hp = &m->hp;
    info->size = m->size_name;
    info->ftype = quant_get(m->wtype)->name;
    info->n_vocab = hp->n_vocab;
    info->n_text_tokens = m->vocab.n_text;
    info->n_langs = m->n_langs;
    info->n_audio_ctx = hp->n_audio_ctx;
    info->n_audio_state = hp->n_audio_state;
    info->n_audio_head = hp->n_audio_head;
    info->n_audio_layer = hp->n_audio_layer;
    info->n_text_ctx = hp->n_text_ctx;
    info->n_text_state = hp->n_text_state;
    info->n_text_head = hp->n_text_head;
    info->n_text_layer = hp->n_text_layer;
    info->n_mels = hp->n_mels;
    info->multilingual = m->vocab.multilingual;
    info->can_translate = m->vocab.multilingual && strcmp(m->size_name, "large-v3-turbo") != 0;
    info->window_seconds = whisper_window_seconds(m);
    info->n_params = m->n_params;
    info->n_bytes = m->n_bytes;
    info->copied_bytes = m->copied_bytes;
}

const char *kiln_stt_language(const kiln_stt *s, int i) {
    return s && i >= 0 && i < s->m->n_langs ? whisper_lang_code(i) : NULL;
}

kiln_transcribe_params kiln_transcribe_default_params(void) {
    kiln_transcribe_params p;
    memset(&p, 0, sizeof p);
    p.beam_size = 5;
    p.best_of = 5;
    p.temperature = 0.0f;
    p.temperature_inc = 0.2f;
    p.compression_ratio_threshold = 2.4f;
    p.logprob_threshold = -1.0f;
    p.no_speech_threshold = 0.6f;
    p.timestamps = 1;
    p.condition_on_previous = 1;
    p.suppress_non_speech = 1;
    p.seed = 0;
    return p;
}

kiln_status kiln_transcribe_check(const kiln_stt *s, const kiln_transcribe_params *p) {
    if (!s || !p) return base_fail(KILN_ERR_INVALID_ARG, "no model or parameters");
    int lang;
    return whisper_check_params(s->m, p, &lang);
}

kiln_status kiln_transcribe(kiln_stt *s, const float *pcm, int64_t n, const kiln_transcribe_params *p,
                            kiln_transcript **out) {
    if (!out) return base_fail(KILN_ERR_INVALID_ARG, "no output transcript");
    *out = NULL;
    if (!s) return base_fail(KILN_ERR_INVALID_ARG, "no model");
    kiln_transcribe_params def = kiln_transcribe_default_params();
    return whisper_transcribe(s->m, pcm, n, p ? p : &def, out);
}

/* ------------------------------------------------------------------ audio */

kiln_status kiln_audio_load_max(const char *path, double max_seconds, float **pcm, int64_t *n, char *format) {
    if (!pcm || !n || !path) return base_fail(KILN_ERR_INVALID_ARG, "no path or output");
    audio_info info;
    kiln_status st = audio_read_file(path, max_seconds, pcm, n, &info);
    if (st) return st;
    if (format) snprintf(format, 64, "%s", info.format);
    return KILN_OK;
}

kiln_status kiln_audio_decode_max(const void *data, size_t len, double max_seconds, float **pcm, int64_t *n,
                                  char *format) {
    if (!pcm || !n) return base_fail(KILN_ERR_INVALID_ARG, "no output");
    audio_info info;
    kiln_status st = audio_read_memory(data, len, max_seconds, pcm, n, &info);
    if (st) return st;
    if (format) snprintf(format, 64, "%s", info.format);
    return KILN_OK;
}

kiln_status kiln_audio_load(const char *path, float **pcm, int64_t *n, char *format) {
    return kiln_audio_load_max(path, 0, pcm, n, format);
}

kiln_status kiln_audio_decode(const void *data, size_t len, float **pcm, int64_t *n, char *format) {
    return kiln_audio_decode_max(data, len, 0, pcm, n, format);
}

kiln_status kiln_audio_to_mono16k(const float *pcm, int64_t n_samples, int32_t rate, int32_t channels, float **out,
                                  int64_t *n) {
    if (!out || !n) return base_fail(KILN_ERR_INVALID_ARG, "no output");
    return audio_to_mono16k(pcm, n_samples, rate, channels, out, n);
}

void kiln_audio_free(float *pcm) { free(pcm); }
