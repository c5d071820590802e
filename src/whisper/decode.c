/* Transcription: the log-mel of the whole clip (padded by one window of
 * silence), then window after window:
 *
 *   prompt   [prev, earlier text (at most n_text_ctx / 2 - 1 tokens)],
 *            sot, [language, transcribe | translate] (multilingual only),
 *            [notimestamps]
 *   decode   at temperature 0 by beam search (or greedy), falling back to
 *            sampling at higher temperatures (best of best_of) while the
 *            text compresses too well or its mean log-probability is too
 *            low, unless the window is silence; when every temperature
 *            fails, the best try is kept (see decode_window)
 *   rules    control tokens, (by default) non-speech symbols and times past
 *            the window are never emitted; no blank or end at the start; with timestamps the
 *            first token is a timestamp of at most 1.00 s, timestamps come
 *            in pairs and never decrease, and text is barred when all
 *            timestamps together are likelier than any one text token
 *   segments each pair of consecutive timestamps closes a segment, and so
 *            does a lone timestamp after the last text; the next window
 *            starts at the last closed segment's end (after this window
 *            when none was closed); segments without words are left out
 *
 * The decode loop allocates nothing: every buffer is sized per call. */
#include "whisper/whisper.h"

#include "audio/audio.h"
#include "base/base.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define MAX_INITIAL_TS 50 /* timestamp index of 1.00 s */

typedef struct hyp {
    int32_t *tok; /* generated tokens (no prompt) */
    int n;
    double sum_lp;
    int slot; /* state beam holding its cache */
    int done;
} hyp;

typedef struct result {
    int32_t *tok;
    int n;
    double sum_lp, avg_lp; /* avg_lp: over the tokens and the end, for the thresholds */
    double score;          /* sum_lp per token, as the hypotheses of a try are ranked */
    float no_speech, cr, temp;
} result;

typedef struct job {
    const whisper_model *m;
    const whisper_vocab *v;
    const kiln_transcribe_params *p;
    whisper_state *s;
    int G;                /* hypotheses at once: max(beam_size, best_of) */
    int n_vocab, max_gen; /* max_gen: stride of token rows */
    int gen_limit;        /* tokens this window may generate */
    float *masked;        /* [2 * G][n_vocab] */
    uint8_t *suppress;    /* [n_vocab] 1 = never */
    hyp *live, *next, *fin;
    int32_t *tokbuf; /* 4 G + 1 rows of max_gen */
    int n_fin;
    struct cand {
        double score;
        int parent;
        int32_t tok;
    } * cand;
    int32_t *prompt; /* [n_text_ctx] */
    int n_prompt, sot_at;
    int32_t *hist; /* tokens of earlier windows, for the prompt */
    int n_hist, hist_cap, hist_from;
    int lang;
    int64_t seek; /* mel frame where the window starts */
    uint64_t rng;
    char *text; /* scratch for a window's text */
    size_t text_cap;
    uint8_t *zbuf;
    size_t zcap;
    int cancelled;
} job;

/* --------------------------------------------------------------- rules */

static void mask_row(const job *j, const float *logits, float *out, const int32_t *gen, int n_gen) {
    const whisper_vocab *v = j->v;
    const int nv = j->n_vocab, tb = v->ts_begin;
    memcpy(out, logits, (size_t)nv * sizeof *out);
    for (int i = 0; i < nv; i++)
        if (j->suppress[i]) out[i] = -INFINITY;
    /* no time past the window (models with windows under 30 s) */
    for (int i = tb + j->m->hp.n_audio_ctx + 1; i < nv; i++) out[i] = -INFINITY;
    if (n_gen == 0) {
        out[v->eot] = -INFINITY;
        if (v->space >= 0) out[v->space] = -INFINITY;
    }
    if (!j->p->timestamps) {
        for (int i = tb; i < nv; i++) out[i] = -INFINITY;
        return;
    }
    int last_ts = n_gen >= 1 && gen[n_gen - 1] >= tb;
    int pen_ts = n_gen < 2 || gen[n_gen - 2] >= tb;
    if (last_ts) {
        if (pen_ts)
            for (int i = tb; i < nv; i++) out[i] = -INFINITY;
        else
            for (int i = 0; i < v->eot; i++) out[i] = -INFINITY;
    }
    int32_t last = -1;
    for (int i = n_gen - 1; i >= 0; i--)
        if (gen[i] >= tb) {
            last = gen[i];
            break;
        }
    if (last >= 0) {
        int floor = (last_ts && !pen_ts) ? last : last + 1;
        for (int i = tb; i < floor && i < nv; i++) out[i] = -INFINITY;
    }
    if (n_gen == 0) {
        for (int i = 0; i < tb; i++) out[i] = -INFINITY;
        for (int i = tb + MAX_INITIAL_TS + 1; i < nv; i++) out[i] = -INFINITY;
    }
    /* all timestamps against the best text token, in log-probabilities */
    float mx = -INFINITY;
    for (int i = 0; i < nv; i++) mx = out[i] > mx ? out[i] : mx;
    if (mx == -INFINITY) return;
    double zt = 0;
    float best_text = -INFINITY;
    for (int i = 0; i < nv; i++) {
        if (out[i] == -INFINITY) continue;
        double e = exp((double)out[i] - mx);
        if (i >= tb)
            zt += e;
        else if (out[i] > best_text)
            best_text = out[i];
    }
    if (zt > 0 && best_text > -INFINITY && log(zt) > (double)best_text - mx)
        for (int i = 0; i < tb; i++) out[i] = -INFINITY;
}

/* log-softmax normalizer of a masked row: log sum exp. */
static double log_z(const float *row, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = row[i] > mx ? row[i] : mx;
    if (mx == -INFINITY) return INFINITY;
    double z = 0;
    for (int i = 0; i < n; i++)
        if (row[i] != -INFINITY) z += exp((double)row[i] - mx);
    return mx + log(z);
}

static uint64_t next_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The sampling state of one try: a function of the seed, the window's place
 * and the temperature alone, so a try of the fallback ladder draws the same
 * tokens as that temperature asked for on its own. */
static uint64_t try_seed(uint64_t seed, int64_t seek, float temp) {
    uint64_t s = seed ^ ((uint64_t)seek * 0x100000001b3ull) ^ ((uint64_t)lrintf(temp * 1000.0f) << 48);
    return next_rand(&s);
}

/* --------------------------------------------------------------- text */

static int window_text(job *j, const int32_t *tok, int n, size_t *len) {
    size_t need = 1;
    for (int i = 0; i < n; i++)
        if (tok[i] < j->v->n_text) need += (size_t)j->v->len[tok[i]];
    if (need > j->text_cap) {
        char *t = realloc(j->text, need);
        if (!t) return -1;
        j->text = t;
        j->text_cap = need;
    }
    size_t o = 0;
    for (int i = 0; i < n; i++)
        if (tok[i] < j->v->n_text) {
            memcpy(j->text + o, j->v->text[tok[i]], (size_t)j->v->len[tok[i]]);
            o += (size_t)j->v->len[tok[i]];
        }
    j->text[o] = 0;
    *len = o;
    return 0;
}

/* Whether tokens hold any text besides blanks. */
static int has_words(job *j, const result *r) {
    size_t len;
    if (window_text(j, r->tok, r->n, &len)) return 1; /* out of memory: as if it had */
    for (size_t i = 0; i < len; i++)
        if (j->text[i] != ' ' && j->text[i] != '\t' && j->text[i] != '\n') return 1;
    return 0;
}

/* Whether a timestamp follows text: a segment was closed. */
static int closes_segment(const job *j, const result *r) {
    int text = 0;
    for (int i = 0; i < r->n; i++) {
        if (r->tok[i] >= j->v->ts_begin && text) return 1;
        if (r->tok[i] < j->v->eot) text = 1;
    }
    return 0;
}

/* len / zlib-compressed len of the text, as Whisper's gzip test measures. */
static float compression_ratio(job *j, const int32_t *tok, int n) {
    size_t len;
    if (window_text(j, tok, n, &len) || len == 0) return 0.0f;
    uLongf cap = compressBound((uLong)len);
    if (cap > j->zcap) {
        uint8_t *z = realloc(j->zbuf, cap);
        if (!z) return 0.0f;
        j->zbuf = z;
        j->zcap = cap;
    }
    if (compress(j->zbuf, &cap, (const Bytef *)j->text, (uLong)len) != Z_OK || cap == 0) return 0.0f;
    return (float)len / (float)cap;
}

/* ------------------------------------------------------------- decoding */

static int aborted(job *j) {
    if (!j->cancelled && j->p->abort && j->p->abort(j->p->abort_user)) j->cancelled = 1;
    return j->cancelled;
}

/* Decodes the window already encoded; prompt is in j->prompt.  Returns 0,
 * or -1 when the text context cannot take the prompt. */
static int run_decode(job *j, float temp, result *res) {
    whisper_state *s = j->s;
    const whisper_vocab *v = j->v;
    const int nv = j->n_vocab;
    const int sampling = temp > 0.0f;
    const int B = sampling ? (j->p->best_of > 0 ? j->p->best_of : 1) : (j->p->beam_size > 0 ? j->p->beam_size : 1);
    j->rng = try_seed(j->p->seed, j->seek, temp);
    /* the prompt up to sot gives the no-speech probability; slot 0 starts
     * empty (an earlier try of this window left its hypotheses there) */
    whisper_beam_truncate(s, 0, 0);
    const float *lg = whisper_decode(s, 0, j->prompt, j->sot_at + 1);
    if (!lg) return -1;
    res->no_speech = 0.0f;
    {
        double lz = log_z(lg, nv);
        res->no_speech = (float)exp((double)lg[v->nosp] - lz);
    }
    if (j->n_prompt > j->sot_at + 1) {
        lg = whisper_decode(s, 0, j->prompt + j->sot_at + 1, j->n_prompt - j->sot_at - 1);
        if (!lg) return -1;
    }
    /* slots 0..G-1 and G..2G-1 alternate as the live set's caches */
    int n_live = sampling ? B : 1;
    for (int i = 0; i < n_live; i++) {
        if (i) whisper_beam_copy(s, i, 0);
        j->live[i].n = 0;
        j->live[i].sum_lp = 0;
        j->live[i].slot = i;
        j->live[i].done = 0;
        j->live[i].tok = j->tokbuf + (size_t)i * j->max_gen;
        memcpy(j->masked + (size_t)i * nv, lg, (size_t)nv * sizeof(float));
    }
    j->n_fin = 0;
    int beams[64];
    int32_t toks[64];
    int side = 0;
    const float *rows = j->masked; /* raw logits of each live hypothesis */
    int first = 1;
    for (int step = 0; step <= j->gen_limit && n_live > 0; step++) {
        if (aborted(j)) return 0;
        if (!first) {
            for (int i = 0; i < n_live; i++) {
                beams[i] = j->live[i].slot;
                toks[i] = j->live[i].tok[j->live[i].n - 1];
            }
            const float *out = whisper_decode_beams(s, beams, toks, n_live);
            if (!out) break;
            rows = out;
        }
        first = 0;
        int n_c = 0;
        for (int i = 0; i < n_live; i++) {
            hyp *h = &j->live[i];
            float *mrow = j->masked + (size_t)(j->G + i) * nv;
            mask_row(j, rows + (size_t)i * nv, mrow, h->tok, h->n);
            double lz = log_z(mrow, nv);
            if (!isfinite(lz)) continue;
            if (step == j->gen_limit) { /* out of room: ends here */
                h->done = 1;
                continue;
            }
            if (sampling) {
                /* draw from softmax(logits / temp) */
                float mx = -INFINITY;
                for (int k = 0; k < nv; k++) mx = mrow[k] > mx ? mrow[k] : mx;
                double z = 0;
                for (int k = 0; k < nv; k++)
                    if (mrow[k] != -INFINITY) z += exp(((double)mrow[k] - mx) / temp);
                double u = (double)(next_rand(&j->rng) >> 11) * (1.0 / 9007199254740992.0) * z, acc = 0;
                int32_t pick = -1;
                for (int k = 0; k < nv; k++) {
                    if (mrow[k] == -INFINITY) continue;
                    acc += exp(((double)mrow[k] - mx) / temp);
                    pick = k;
                    if (acc >= u) break;
                }
                j->cand[n_c++] = (struct cand){h->sum_lp + (double)mrow[pick] - lz, i, pick};
            } else {
                /* the B + 1 best tokens of this hypothesis */
                int kmax = B + 1;
                int base = n_c;
                for (int k = 0; k < nv; k++) {
                    if (mrow[k] == -INFINITY) continue;
                    double sc = h->sum_lp + (double)mrow[k] - lz;
                    int nc = n_c - base;
                    if (nc == kmax && sc <= j->cand[n_c - 1].score) continue;
                    int at = nc < kmax ? n_c++ : n_c - 1;
                    while (at > base && j->cand[at - 1].score < sc) {
                        j->cand[at] = j->cand[at - 1];
                        at--;
                    }
                    j->cand[at] = (struct cand){sc, i, (int32_t)k};
                }
            }
        }
        /* choose the next live set */
        if (sampling) {
            int nn = 0;
            for (int c = 0; c < n_c; c++) {
                hyp *h = &j->live[j->cand[c].parent];
                h->sum_lp = j->cand[c].score;
                if (j->cand[c].tok == v->eot) {
                    h->done = 1;
                    j->fin[j->n_fin++] = *h;
                } else {
                    h->tok[h->n++] = j->cand[c].tok;
                    j->next[nn++] = *h;
                }
            }
            for (int i = 0; i < n_live; i++)
                if (j->live[i].done) j->fin[j->n_fin++] = j->live[i];
            memcpy(j->live, j->next, (size_t)nn * sizeof *j->live);
            n_live = nn;
            continue;
        }
        /* beam search: sort all candidates, keep B live, collect ended ones */
        for (int a = 1; a < n_c; a++) {
            struct cand c = j->cand[a];
            int b = a;
            while (b > 0 && j->cand[b - 1].score < c.score) {
                j->cand[b] = j->cand[b - 1];
                b--;
            }
            j->cand[b] = c;
        }
        int nn = 0;
        side ^= 1;
        for (int c = 0; c < n_c && nn < B; c++) {
            const hyp *par = &j->live[j->cand[c].parent];
            if (j->cand[c].tok == v->eot) {
                if (j->n_fin < B) {
                    hyp f = *par;
                    f.sum_lp = j->cand[c].score;
                    f.tok = j->tokbuf + (size_t)(2 * j->G + j->n_fin) * j->max_gen;
                    memcpy(f.tok, par->tok, (size_t)par->n * sizeof *f.tok);
                    j->fin[j->n_fin++] = f;
                }
                continue;
            }
            hyp *h = &j->next[nn];
            h->slot = side * j->G + nn;
            h->tok = j->tokbuf + (size_t)(side * j->G + nn) * j->max_gen;
            memcpy(h->tok, par->tok, (size_t)par->n * sizeof *h->tok);
            h->n = par->n;
            h->tok[h->n++] = j->cand[c].tok;
            h->sum_lp = j->cand[c].score;
            h->done = 0;
            whisper_beam_copy(s, h->slot, par->slot);
            nn++;
        }
        for (int i = 0; i < n_live; i++)
            if (j->live[i].done && j->n_fin < B) {
                hyp f = j->live[i];
                f.tok = j->tokbuf + (size_t)(2 * j->G + j->n_fin) * j->max_gen;
                memcpy(f.tok, j->live[i].tok, (size_t)j->live[i].n * sizeof *f.tok);
                j->fin[j->n_fin++] = f;
            }
        memcpy(j->live, j->next, (size_t)nn * sizeof *j->live);
        n_live = nn;
        if (j->n_fin >= B) break;
    }
    /* unfinished hypotheses count when too few ended */
    for (int i = 0; i < n_live && j->n_fin < B + 1 && j->n_fin < 2 * j->G; i++) {
        hyp f = j->live[i];
        f.tok = j->tokbuf + (size_t)(2 * j->G + j->n_fin) * j->max_gen;
        memmove(f.tok, j->live[i].tok, (size_t)j->live[i].n * sizeof *f.tok);
        j->fin[j->n_fin++] = f;
    }
    /* the best by mean log-probability per token */
    int best = -1;
    double best_sc = -INFINITY;
    for (int i = 0; i < j->n_fin; i++) {
        double sc = j->fin[i].sum_lp / (j->fin[i].n > 0 ? j->fin[i].n : 1);
        if (best < 0 || sc > best_sc) {
            best = i;
            best_sc = sc;
        }
    }
    if (best < 0) {
        res->n = 0;
        res->sum_lp = 0;
    } else {
        res->n = j->fin[best].n;
        memcpy(res->tok, j->fin[best].tok, (size_t)res->n * sizeof *res->tok);
        res->sum_lp = j->fin[best].sum_lp;
    }
    res->avg_lp = res->sum_lp / (res->n + 1);
    res->score = res->sum_lp / (res->n > 0 ? res->n : 1);
    res->temp = temp;
    res->cr = compression_ratio(j, res->tok, res->n);
    return 0;
}

/* A try falls back to the next temperature when its text compresses too
 * well (a repetition loop) or its mean token log-probability is too low,
 * unless the window is silence (then its text is dropped, see the caller). */
static int try_fails(const kiln_transcribe_params *p, const result *r) {
    if (p->no_speech_threshold > -1e9f && r->no_speech > p->no_speech_threshold) return 0;
    if (p->compression_ratio_threshold > 0 && r->cr > p->compression_ratio_threshold) return 1;
    return p->logprob_threshold > -1e9f && r->avg_lp < p->logprob_threshold;
}

/* Of two failed tries, is a the better?  A text that passes the
 * compression test beats one that does not; then the higher score wins:
 * the one that ranked the hypotheses within each try (log-probabilities of
 * the untempered distribution, so tries at different temperatures compare).
 * Not avg_lp, which also counts the end token: that favours a try that
 * ends at once, with no text. */
static int try_better(const kiln_transcribe_params *p, const result *a, const result *b) {
    const float cr = p->compression_ratio_threshold;
    int a_ok = cr <= 0 || a->cr <= cr, b_ok = cr <= 0 || b->cr <= cr;
    if (a_ok != b_ok) return a_ok;
    return a->score > b->score;
}

/* Decodes with temperature fallback: temperature, then temperature + inc ...
 * up to 1, until a try passes (try_fails).  When every try fails, the best
 * of them is kept (try_better), not the last: the last is the sample at
 * temperature 1, the noisiest, which for a model whose good decodes sit just
 * under the log-probability threshold throws the good text away.  (OpenAI's
 * Whisper and whisper.cpp keep the last try; faster-whisper keeps the best,
 * by the same order.)  spare is a second result of the same capacity; on
 * return res holds the try that was kept (the two may have swapped). */
static int decode_window(job *j, result *res, result *spare, int *n_fallbacks) {
    const kiln_transcribe_params *p = j->p;
    result *cur = res, *best = spare;
    int have_best = 0, rc = 0;
    float t = p->temperature;
    for (;;) {
        if (run_decode(j, t, cur)) {
            rc = -1;
            break;
        }
        if (j->cancelled) break;
        int fails = try_fails(p, cur);
        float nt = t + p->temperature_inc;
        if (!fails || p->temperature_inc <= 0 || nt > 1.0f + 1e-6f) {
            if (fails && have_best && try_better(p, best, cur)) cur = best;
            break;
        }
        if (!have_best || try_better(p, cur, best)) { /* keep cur; decode the next try into the old best */
            result *x = best;
            best = cur;
            cur = x;
            have_best = 1;
        }
        t = nt;
        (*n_fallbacks)++;
    }
    if (cur != res) {
        result x = *res;
        *res = *spare;
        *spare = x;
    }
    return rc;
}

/* The prompt of the next window: previous text, then the sot sequence. */
static void build_prompt(job *j) {
    const whisper_vocab *v = j->v;
    int n = 0;
    int have = j->n_hist - j->hist_from;
    int room = j->m->hp.n_text_ctx / 2 - 1;
    if (have > 0 && j->p->condition_on_previous >= 0) {
        int take = have < room ? have : room;
        j->prompt[n++] = v->prev;
        memcpy(j->prompt + n, j->hist + j->n_hist - take, (size_t)take * sizeof *j->prompt);
        n += take;
    }
    j->sot_at = n;
    j->prompt[n++] = v->sot;
    if (v->multilingual) {
        j->prompt[n++] = v->lang0 + (j->lang >= 0 ? j->lang : 0);
        j->prompt[n++] = j->p->translate ? v->translate : v->transcribe;
    }
    if (!j->p->timestamps) j->prompt[n++] = v->notimestamps;
    j->n_prompt = n;
    int left = j->m->hp.n_text_ctx - n;
    j->gen_limit = j->max_gen < left ? j->max_gen : left;
}

static int hist_push(job *j, const int32_t *tok, int n) {
    if (j->n_hist + n > j->hist_cap) {
        int cap = (j->n_hist + n) * 2;
        int32_t *h = realloc(j->hist, (size_t)cap * sizeof *h);
        if (!h) return -1;
        j->hist = h;
        j->hist_cap = cap;
    }
    memcpy(j->hist + j->n_hist, tok, (size_t)n * sizeof *tok);
    j->n_hist += n;
    return 0;
}

/* ---------------------------------------------------------- transcripts */

typedef struct seg_acc {
    kiln_segment *seg;
    int n, cap;
    int32_t **tok;
    char **text;
} seg_acc;

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid. */
static int utf8_len(const unsigned char *s, size_t n) {
    int k = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (!k || (size_t)k > n) return 0;
    for (int i = 1; i < k; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    uint32_t c = k == 1 ? s[0] : k == 2 ? s[0] & 0x1fu : k == 3 ? s[0] & 0x0fu : s[0] & 0x07u;
    for (int i = 1; i < k; i++) c = (c << 6) | (s[i] & 0x3fu);
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[k] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
    return k;
}

/* A copy of s (len bytes) with each invalid byte replaced by U+FFFD, as
 * text decoded from tokens that split a character is shown. */
static char *utf8_clean(const char *s, size_t len) {
    char *out = malloc(len * 3 + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        int k = utf8_len((const unsigned char *)s + i, len - i);
        if (k) {
            memcpy(out + o, s + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    out[o] = 0;
    return out;
}

static int add_segment(job *j, seg_acc *a, double t0, double t1, const int32_t *tok, int n, const result *r) {
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 16;
        kiln_segment *s = realloc(a->seg, (size_t)cap * sizeof *s);
        if (!s) return -1;
        a->seg = s;
        a->cap = cap;
    }
    size_t len;
    if (window_text(j, tok, n, &len)) return -1;
    /* a segment without words (timestamps alone, blanks) is left out, as
     * whisper.cpp does: subtitles would show an empty entry */
    size_t w = 0;
    while (w < len && (j->text[w] == ' ' || j->text[w] == '\t' || j->text[w] == '\n')) w++;
    if (w == len) return 0;
    kiln_segment *s = &a->seg[a->n];
    memset(s, 0, sizeof *s);
    char *text = utf8_clean(j->text, len);
    int32_t *tk = malloc((size_t)(n ? n : 1) * sizeof *tk);
    if (!text || !tk) {
        free(text);
        free(tk);
        return -1;
    }
    memcpy(tk, tok, (size_t)n * sizeof *tk);
    s->start = t0;
    s->end = t1 > t0 ? t1 : t0;
    s->text = text;
    s->tokens = tk;
    s->n_tokens = n;
    s->avg_logprob = (float)r->avg_lp;
    s->no_speech_prob = r->no_speech;
    s->compression_ratio = r->cr;
    s->temperature = r->temp;
    a->n++;
    return 0;
}

void kiln_transcript_free(kiln_transcript *t) {
    if (!t) return;
    for (int i = 0; i < t->n_segments; i++) {
        free((void *)t->segments[i].text);
        free((void *)t->segments[i].tokens);
    }
    free((void *)t->segments);
    free((void *)t->text);
    free((void *)t->language);
    free(t);
}

static kiln_transcript *finish(seg_acc *a, const char *lang, float lang_prob, double duration) {
    kiln_transcript *t = calloc(1, sizeof *t);
    size_t len = 1;
    for (int i = 0; i < a->n; i++) len += strlen(a->seg[i].text);
    char *text = malloc(len);
    char *lg = strdup(lang ? lang : "");
    if (!t || !text || !lg) {
        free(t);
        free(text);
        free(lg);
        return NULL;
    }
    size_t o = 0;
    for (int i = 0; i < a->n; i++) {
        size_t k = strlen(a->seg[i].text);
        memcpy(text + o, a->seg[i].text, k);
        o += k;
    }
    text[o] = 0;
    t->text = text;
    t->language = lg;
    t->language_prob = lang_prob;
    t->duration = duration;
    t->n_segments = a->n;
    t->segments = a->seg;
    return t;
}

static void seg_acc_free(seg_acc *a) {
    for (int i = 0; i < a->n; i++) {
        free((void *)a->seg[i].text);
        free((void *)a->seg[i].tokens);
    }
    free(a->seg);
}

/* ----------------------------------------------------------------- check */

kiln_status whisper_check_params(const whisper_model *m, const kiln_transcribe_params *p, int *lang) {
    *lang = -1;
    if (p->language && *p->language && strcmp(p->language, "auto")) {
        int l = whisper_lang_find(p->language);
        if (l < 0) return base_fail(KILN_ERR_INVALID_ARG, "unknown language '%s'", p->language);
        if (!m->vocab.multilingual && l != 0)
            return base_fail(KILN_ERR_INVALID_ARG, "this model is English-only; language '%s' is not available",
                             p->language);
        if (l >= m->n_langs)
            return base_fail(KILN_ERR_INVALID_ARG, "language '%s' is not one of this model's %d", p->language,
                             m->n_langs);
        *lang = l;
    }
    if (p->translate) {
        if (!m->vocab.multilingual)
            return base_fail(KILN_ERR_INVALID_ARG, "this model is English-only and cannot translate");
        if (!strcmp(m->size_name, "large-v3-turbo"))
            return base_fail(KILN_ERR_INVALID_ARG, "large-v3-turbo was not trained to translate");
    }
    if (p->beam_size < 0 || p->beam_size > 16 || p->best_of < 0 || p->best_of > 16)
        return base_fail(KILN_ERR_INVALID_ARG, "beam size and best-of must be within 1 to 16");
    if (!(p->temperature >= 0.0f && p->temperature <= 1.0f) || !(p->temperature_inc >= 0.0f))
        return base_fail(KILN_ERR_INVALID_ARG, "temperature must be within 0 to 1 (and its step >= 0)");
    if (p->initial_prompt && whisper_tokenize(&m->vocab, p->initial_prompt, strlen(p->initial_prompt), NULL, 0) < 0)
        return base_fail(KILN_ERR_INVALID_ARG, "the initial prompt has bytes the vocabulary cannot spell");
    return KILN_OK;
}

/* ------------------------------------------------------------ transcribe */

static void job_free(job *j) {
    whisper_state_free(j->s);
    free(j->masked);
    free(j->suppress);
    free(j->live);
    free(j->next);
    free(j->fin);
    free(j->tokbuf);
    free(j->cand);
    free(j->prompt);
    free(j->hist);
    free(j->text);
    free(j->zbuf);
}

static int job_init(job *j, const whisper_model *m, const kiln_transcribe_params *p) {
    memset(j, 0, sizeof *j);
    j->m = m;
    j->v = &m->vocab;
    j->p = p;
    int bs = p->beam_size > 0 ? p->beam_size : 1, bo = p->best_of > 0 ? p->best_of : 1;
    j->G = bs > bo ? bs : bo;
    j->n_vocab = m->hp.n_vocab;
    j->max_gen = m->hp.n_text_ctx / 2;
    const size_t G = (size_t)j->G, nv = (size_t)j->n_vocab, mg = (size_t)j->max_gen;
    j->s = whisper_state_new(m, 2 * j->G, p->n_threads);
    j->masked = malloc(2 * G * nv * sizeof(float));
    j->suppress = calloc(nv, 1);
    j->live = calloc(G + 1, sizeof(hyp));
    j->next = calloc(G + 1, sizeof(hyp));
    j->fin = calloc(4 * G + 2, sizeof(hyp));
    j->tokbuf = malloc((4 * G + 2) * mg * sizeof(int32_t));
    j->cand = malloc(G * (G + 2) * sizeof *j->cand);
    j->prompt = malloc((size_t)m->hp.n_text_ctx * sizeof(int32_t));
    if (!j->s || !j->masked || !j->suppress || !j->live || !j->next || !j->fin || !j->tokbuf || !j->cand || !j->prompt)
        return -1;
    const whisper_vocab *v = j->v;
    int32_t ctl[] = {v->sot, v->solm, v->prev, v->nosp, v->translate, v->transcribe};
    for (size_t i = 0; i < sizeof ctl / sizeof *ctl; i++) j->suppress[ctl[i]] = 1;
    for (int i = 0; i < v->n_langs; i++) j->suppress[v->lang0 + i] = 1;
    if (p->suppress_non_speech)
        for (int i = 0; i < v->n_non_speech; i++) j->suppress[v->non_speech[i]] = 1;
    if (p->timestamps) j->suppress[v->notimestamps] = 1;
    return 0;
}

/* The language of the encoded window: the likeliest language token after
 * sot alone. */
static int detect_language(job *j, float *prob) {
    const whisper_vocab *v = j->v;
    int32_t sot = v->sot;
    whisper_beam_truncate(j->s, 0, 0);
    const float *lg = whisper_decode(j->s, 0, &sot, 1);
    if (!lg) return 0;
    int best = 0;
    float mx = -INFINITY;
    for (int i = 0; i < v->n_langs; i++)
        if (lg[v->lang0 + i] > mx) {
            mx = lg[v->lang0 + i];
            best = i;
        }
    double z = 0;
    for (int i = 0; i < v->n_langs; i++) z += exp((double)lg[v->lang0 + i] - mx);
    *prob = (float)(1.0 / z);
    whisper_beam_truncate(j->s, 0, 0);
    return best;
}

kiln_status whisper_transcribe(const whisper_model *m, const float *pcm, int64_t n, const kiln_transcribe_params *p,
                               kiln_transcript **out) {
    *out = NULL;
    int lang;
    kiln_status st = whisper_check_params(m, p, &lang);
    if (st != KILN_OK) return st;
    if (n < 0 || (n > 0 && !pcm)) return base_fail(KILN_ERR_INVALID_ARG, "no audio given");
    const double duration = (double)n / AUDIO_RATE;
    seg_acc acc = {0};
    if (n == 0) {
        /* nothing said: no segments, and no language to detect */
        *out = finish(&acc, lang >= 0 ? whisper_lang_code(lang) : (m->vocab.multilingual ? "" : "en"), 1.0f, 0.0);
        return *out ? KILN_OK : base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    job j;
    if (job_init(&j, m, p)) {
        job_free(&j);
        return base_fail(KILN_ERR_NOMEM, "out of memory for the decoder state");
    }
    j.lang = lang;
    const int A = m->hp.n_audio_ctx, win = 2 * A;
    const int64_t win_samples = (int64_t)win * AUDIO_HOP;
    float *mel = NULL;
    int64_t n_frames = 0;
    kiln_status mst =
        audio_log_mel(pcm, n, win_samples, m->filters, m->hp.n_mels, whisper_state_pool(j.s), &mel, &n_frames);
    if (mst) {
        job_free(&j);
        return mst;
    }
    const int64_t content = n_frames - win;
    float lang_prob = 1.0f;
    int n_windows = 0, n_fb = 0;
    if (p->initial_prompt && *p->initial_prompt) {
        /* as Whisper does: a space, then the prompt without outer blanks */
        const char *s0 = p->initial_prompt;
        while (*s0 == ' ' || *s0 == '\t' || *s0 == '\n') s0++;
        size_t L = strlen(s0);
        while (L && (s0[L - 1] == ' ' || s0[L - 1] == '\t' || s0[L - 1] == '\n')) L--;
        char *buf = malloc(L + 2);
        int k = -1;
        if (buf) {
            buf[0] = ' ';
            memcpy(buf + 1, s0, L);
            k = whisper_tokenize(j.v, buf, L + 1, NULL, 0);
            int32_t *tmp = k > 0 ? malloc((size_t)k * sizeof *tmp) : NULL;
            if (tmp && whisper_tokenize(j.v, buf, L + 1, tmp, k) == k && hist_push(&j, tmp, k) == 0) k = 0;
            free(tmp);
        }
        free(buf);
    }
    result res = {0}, spare = {0};
    res.tok = malloc((size_t)j.max_gen * sizeof *res.tok);
    spare.tok = malloc((size_t)j.max_gen * sizeof *spare.tok);
    if (!res.tok || !spare.tok) st = base_fail(KILN_ERR_NOMEM, "out of memory");
    int64_t seek = 0;
    while (st == KILN_OK && seek < content) {
        if (aborted(&j)) {
            st = base_fail(KILN_ERR_CANCELLED, "transcription cancelled");
            break;
        }
        const int64_t seg_size = content - seek < win ? content - seek : win;
        const double t_off = (double)seek * AUDIO_HOP / AUDIO_RATE;
        whisper_encode(j.s, mel + seek, (size_t)n_frames);
        n_windows++;
        if (j.lang < 0) {
            if (m->vocab.multilingual)
                j.lang = detect_language(&j, &lang_prob);
            else
                j.lang = 0;
        }
        build_prompt(&j);
        j.seek = seek;
        if (decode_window(&j, &res, &spare, &n_fb)) {
            st = base_fail(KILN_ERR_CONTEXT_FULL, "the prompt does not fit the text context");
            break;
        }
        /* speech (by the no-speech probability) but no words, or words that
         * close no segment, after earlier text in the prompt: decoded again
         * without that text.  A model can take a long previous-text prompt
         * as its cue to end at once (the demo model, trained on short
         * prompts, does so in most windows after the first), and the
         * window's speech would be skipped.  */
        int heard = !(p->no_speech_threshold > -1e9f && res.no_speech > p->no_speech_threshold);
        if (!j.cancelled && heard && j.hist_from < j.n_hist &&
            (!has_words(&j, &res) || (p->timestamps && !closes_segment(&j, &res)))) {
            j.hist_from = j.n_hist;
            build_prompt(&j);
            n_fb++;
            if (decode_window(&j, &res, &spare, &n_fb)) {
                st = base_fail(KILN_ERR_CONTEXT_FULL, "the prompt does not fit the text context");
                break;
            }
        }
        if (j.cancelled) {
            st = base_fail(KILN_ERR_CANCELLED, "transcription cancelled");
            break;
        }
        int64_t adv = seg_size;
        const int silent = p->no_speech_threshold > -1e9f && res.no_speech > p->no_speech_threshold &&
                           (p->logprob_threshold <= -1e9f || res.avg_lp < p->logprob_threshold);
        const int32_t *tk = res.tok;
        const int tb = j.v->ts_begin;
        int nt = res.n;
        /* a segment closed at the window's end (within 0.08 s) while audio
         * follows: its speech most likely runs on (a model that never learnt
         * to leave a segment open closes it there), so, like text after the
         * last pair, it is left to the next window, which starts before it */
        if (!silent && seek + seg_size < content && nt >= 2 && tk[nt - 1] >= tb && tk[nt - 2] < tb &&
            (int64_t)(tk[nt - 1] - tb) * 2 >= seg_size - 8) {
            int open = nt - 2;
            while (open > 0 && tk[open] < tb) open--;
            if (tk[open] > tb) {
                nt = open;
                if (nt == 0) adv = (int64_t)(tk[open] - tb) * 2;
            }
        }
        if (!silent && nt > 0) {
            int single_end = nt >= 2 && tk[nt - 2] < tb && tk[nt - 1] >= tb;
            int last_slice = 0, any_pair = 0;
            const double tmax = duration;
            for (int i = 1; i <= nt && st == KILN_OK; i++) {
                int cut = (i < nt && tk[i] >= tb && tk[i - 1] >= tb) || (i == nt && single_end && any_pair);
                if (!cut) continue;
                any_pair = 1;
                const int32_t *sl = tk + last_slice;
                int sn = i - last_slice;
                double a = t_off + (sl[0] >= tb ? (sl[0] - tb) * 0.02 : 0.0);
                double b = t_off + (sl[sn - 1] >= tb ? (sl[sn - 1] - tb) * 0.02 : seg_size * 0.01);
                if (b > tmax) b = tmax;
                if (a > b) a = b;
                if (add_segment(&j, &acc, a, b, sl, sn, &res)) st = base_fail(KILN_ERR_NOMEM, "out of memory");
                last_slice = i;
            }
            if (st != KILN_OK) break;
            /* the next window starts where the last closed segment ends, also
             * after text that ends with a lone timestamp: a model that stops
             * before speech cut by the window's end (the demo model does)
             * would lose it if the window were skipped whole, as OpenAI's
             * Whisper does there (whisper.cpp seeks to the last timestamp
             * too).  Tokens after the last pair (text that ran past the
             * window's end) are decoded again from there. */
            int32_t closing = any_pair ? tk[last_slice - 1] : single_end ? tk[nt - 1] : -1;
            if (closing > tb) {
                int64_t pos = (int64_t)(closing - tb) * 2;
                adv = pos < seg_size ? pos : seg_size;
            }
            if (!any_pair) {
                double dur = seg_size * 0.01;
                for (int i = nt - 1; i >= 0; i--)
                    if (tk[i] >= tb) {
                        if (tk[i] != tb) dur = (tk[i] - tb) * 0.02;
                        break;
                    }
                double b = t_off + dur > tmax ? tmax : t_off + dur;
                if (add_segment(&j, &acc, t_off, b, tk, nt, &res)) st = base_fail(KILN_ERR_NOMEM, "out of memory");
            }
            if (st == KILN_OK && p->condition_on_previous) {
                int keep = any_pair && !single_end ? last_slice : nt;
                if (hist_push(&j, tk, keep)) st = base_fail(KILN_ERR_NOMEM, "out of memory");
            }
        }
        if (!p->condition_on_previous || res.temp > 0.5f) j.hist_from = j.n_hist;
        seek += adv;
        if (p->progress && st == KILN_OK) {
            double done = (double)seek * AUDIO_HOP / AUDIO_RATE;
            if (p->progress(done < duration ? done : duration, duration, p->user))
                st = base_fail(KILN_ERR_CANCELLED, "transcription cancelled");
        }
    }
    free(res.tok);
    free(spare.tok);
    free(mel);
    if (st == KILN_OK) {
        *out = finish(&acc, whisper_lang_code(j.lang >= 0 ? j.lang : 0), lang_prob, duration);
        if (!*out)
            st = base_fail(KILN_ERR_NOMEM, "out of memory");
        else {
            (*out)->n_windows = n_windows;
            (*out)->n_fallbacks = n_fb;
        }
    }
    if (st != KILN_OK) seg_acc_free(&acc);
    job_free(&j);
    return st;
}

int whisper_decode_first(const whisper_model *m, const float *pcm, int64_t n, const kiln_transcribe_params *p,
                         int32_t *tokens, int cap, whisper_try *info) {
    int lang;
    if (whisper_check_params(m, p, &lang) != KILN_OK) return -1;
    job j;
    int rc = -1;
    float *mel = NULL;
    int64_t n_frames = 0;
    result res = {0}, spare = {0};
    int n_fb = 0;
    if (job_init(&j, m, p)) goto out;
    j.lang = lang >= 0 ? lang : 0;
    const int win = 2 * m->hp.n_audio_ctx;
    if (audio_log_mel(pcm, n, (int64_t)win * AUDIO_HOP, m->filters, m->hp.n_mels, whisper_state_pool(j.s), &mel,
                      &n_frames))
        goto out;
    if (p->initial_prompt) {
        int k = whisper_tokenize(j.v, p->initial_prompt, strlen(p->initial_prompt), NULL, 0);
        int32_t *tmp = k > 0 ? malloc((size_t)k * sizeof *tmp) : NULL;
        if (tmp && whisper_tokenize(j.v, p->initial_prompt, strlen(p->initial_prompt), tmp, k) == k)
            hist_push(&j, tmp, k);
        free(tmp);
    }
    res.tok = malloc((size_t)j.max_gen * sizeof *res.tok);
    spare.tok = malloc((size_t)j.max_gen * sizeof *spare.tok);
    if (!res.tok || !spare.tok) goto out;
    whisper_encode(j.s, mel, (size_t)n_frames);
    build_prompt(&j);
    if (decode_window(&j, &res, &spare, &n_fb)) goto out;
    rc = res.n < cap ? res.n : cap;
    memcpy(tokens, res.tok, (size_t)rc * sizeof *tokens);
    if (info) *info = (whisper_try){res.temp, (float)res.avg_lp, (float)res.score, res.cr, res.no_speech, n_fb};
out:
    free(res.tok);
    free(spare.tok);
    free(mel);
    job_free(&j);
    return rc;
}
