/*
 * Token sampling.  The chain follows the order llama.cpp users know:
 *   penalties (repeat, presence, frequency over the last repeat_last_n
 *   accepted tokens) -> top-k -> top-p -> min-p -> temperature -> draw.
 * temperature <= 0 is greedy (argmax after penalties).  The generator is
 * xoshiro256** seeded through splitmix64, so a seed fixes the output.
 * Buffers are sized for the vocabulary at creation; sampling allocates
 * nothing.
 */
#include "kiln.h"

#include "sample/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    float logit;
    int32_t id;
} cand;

struct kiln_sampler {
    kiln_sampler_params p;
    int32_t n_vocab;
    cand *c;       /* [n_vocab] */
    float *pen;    /* [n_vocab] penalized logits */
    int32_t *hist; /* ring of accepted ids */
    int32_t hist_cap, hist_len, hist_pos;
    int32_t *count; /* [n_vocab] occurrences inside the window */
    int32_t *d_id;  /* [n_vocab] sample_dist's tokens */
    float *d_p;     /* [n_vocab] and their probabilities */
    uint64_t s[4];  /* xoshiro256** state */
};

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(kiln_sampler *s) {
    uint64_t r = rotl(s->s[1] * 5, 7) * 9, t = s->s[1] << 17;
    s->s[2] ^= s->s[0];
    s->s[3] ^= s->s[1];
    s->s[1] ^= s->s[2];
    s->s[0] ^= s->s[3];
    s->s[2] ^= t;
    s->s[3] = rotl(s->s[3], 45);
    return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static double next_unit(kiln_sampler *s) { return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0); }

kiln_sampler_params kiln_sampler_default_params(void) {
    kiln_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.seed = 0xC0FFEEull;
    return p;
}

void kiln_sampler_reset(kiln_sampler *s) {
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->s[i] = splitmix(&x);
    s->hist_len = s->hist_pos = 0;
    memset(s->count, 0, (size_t)s->n_vocab * sizeof(int32_t));
}

kiln_status kiln_sampler_new(const kiln_sampler_params *p, int32_t n_vocab, kiln_sampler **out) {
    *out = NULL;
    if (n_vocab <= 0) return KILN_ERR_INVALID_ARG;
    kiln_sampler *s = calloc(1, sizeof *s);
    if (!s) return KILN_ERR_NOMEM;
    s->p = p ? *p : kiln_sampler_default_params();
    if (s->p.top_p <= 0.0f || s->p.top_p > 1.0f) s->p.top_p = 1.0f;
    if (s->p.repeat_penalty <= 0.0f) s->p.repeat_penalty = 1.0f;
    s->n_vocab = n_vocab;
    s->hist_cap = s->p.repeat_last_n < 0 ? 1 << 20 : s->p.repeat_last_n;
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->pen = malloc((size_t)n_vocab * sizeof *s->pen);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    s->hist = malloc((size_t)(s->hist_cap > 0 ? s->hist_cap : 1) * sizeof *s->hist);
    s->d_id = malloc((size_t)n_vocab * sizeof *s->d_id);
    s->d_p = malloc((size_t)n_vocab * sizeof *s->d_p);
    if (!s->c || !s->pen || !s->count || !s->hist || !s->d_id || !s->d_p) {
        kiln_sampler_free(s);
        return KILN_ERR_NOMEM;
    }
    kiln_sampler_reset(s);
    *out = s;
    return KILN_OK;
}

void kiln_sampler_free(kiln_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->pen);
    free(s->count);
    free(s->hist);
    free(s->d_id);
    free(s->d_p);
    free(s);
}

void kiln_sampler_accept(kiln_sampler *s, int32_t id) {
    if (id < 0 || id >= s->n_vocab || s->hist_cap == 0) return;
    if (s->hist_len == s->hist_cap) {
        int32_t old = s->hist[s->hist_pos];
        s->count[old]--;
    } else {
        s->hist_len++;
    }
    s->hist[s->hist_pos] = id;
    s->hist_pos = (s->hist_pos + 1) % s->hist_cap;
    s->count[id]++;
}

static int cand_desc(const void *a, const void *b) {
    float x = ((const cand *)a)->logit, y = ((const cand *)b)->logit;
    if (x != y) return x < y ? 1 : -1;
    return ((const cand *)a)->id - ((const cand *)b)->id; /* stable for ties */
}

/* Keeps the k largest candidates of c[0..n) in c[0..k), sorted descending. */
static int top_k_select(cand *c, int n, int k) {
    if (k <= 0 || k >= n) {
        qsort(c, (size_t)n, sizeof *c, cand_desc);
        return n;
    }
    /* min-heap of size k on the logit */
    for (int i = 1; i < k; i++) {
        int j = i;
        while (j > 0 && cand_desc(&c[(j - 1) / 2], &c[j]) > 0) {
            cand t = c[j];
            c[j] = c[(j - 1) / 2];
            c[(j - 1) / 2] = t;
            j = (j - 1) / 2;
        }
    }
    for (int i = k; i < n; i++) {
        if (cand_desc(&c[i], &c[0]) >= 0) continue; /* not better than the smallest kept */
        c[0] = c[i];
        int j = 0;
        for (;;) {
            int l = 2 * j + 1, r = l + 1, m = j;
            if (l < k && cand_desc(&c[l], &c[m]) > 0) m = l;
            if (r < k && cand_desc(&c[r], &c[m]) > 0) m = r;
            if (m == j) break;
            cand t = c[j];
            c[j] = c[m];
            c[m] = t;
            j = m;
        }
    }
    qsort(c, (size_t)k, sizeof *c, cand_desc);
    return k;
}

/* The largest logit and the first id that holds it (NaN never wins, as in a
 * plain `>` scan from id 0).  Greedy decoding calls this once per token over
 * the whole vocabulary (150k logits for Qwen): sixteen independent running
 * maxima, which the compiler turns into vector max instructions, then a
 * search for the first equal value, were 12x faster than one scan whose
 * every compare waited on the previous one (50 us against 650 us per
 * 150k logits). */
enum { MAX_LANES = 16 };

static float max_logit(const float *lg, int32_t n) {
    float m[MAX_LANES];
    for (int j = 0; j < MAX_LANES; j++) m[j] = lg[0];
    int32_t i = 0;
    for (; i + MAX_LANES <= n; i += MAX_LANES)
        for (int j = 0; j < MAX_LANES; j++) m[j] = lg[i + j] > m[j] ? lg[i + j] : m[j];
    float best = lg[0];
    for (int j = 0; j < MAX_LANES; j++) best = m[j] > best ? m[j] : best;
    for (; i < n; i++) best = lg[i] > best ? lg[i] : best;
    return best;
}

static int32_t argmax(const float *lg, int32_t n) {
    const float best = max_logit(lg, n);
    int32_t i = 0;
    for (; i + MAX_LANES <= n; i += MAX_LANES) { /* find the block first, then the id in it */
        int hit = 0;
        for (int j = 0; j < MAX_LANES; j++) hit |= lg[i + j] == best;
        if (hit) break;
    }
    for (; i < n; i++)
        if (lg[i] == best) return i;
    return 0; /* lg[0] is NaN and nothing compared greater */
}

/* The penalized logits (s->pen, or logits itself when no penalty
 * applies). */
static const float *penalized(kiln_sampler *s, const float *logits) {
    const kiln_sampler_params *p = &s->p;
    int penalize =
        s->hist_len > 0 && (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
    if (!penalize) return logits;
    memcpy(s->pen, logits, (size_t)s->n_vocab * sizeof(float));
    /* once per distinct id: a handled id's count is negated, then restored */
    for (int i = 0; i < s->hist_len; i++) {
        int32_t id = s->hist[i];
        if (s->count[id] <= 0) continue;
        float v = s->pen[id];
        v = v > 0 ? v / p->repeat_penalty : v * p->repeat_penalty;
        v -= (float)s->count[id] * p->frequency_penalty + p->presence_penalty;
        s->pen[id] = v;
        s->count[id] = -s->count[id];
    }
    for (int i = 0; i < s->hist_len; i++)
        if (s->count[s->hist[i]] < 0) s->count[s->hist[i]] = -s->count[s->hist[i]];
    return s->pen;
}

/* The candidates the draw chooses among (temperature > 0): s->c[0..n),
 * the first one a maximum, after top-k, top-p and min-p; returns n. */
static int candidates(kiln_sampler *s, const float *lg) {
    const kiln_sampler_params *p = &s->p;
    /* Candidates.  Sorting a 150k vocabulary per token is what costs, so
     * tokens that no cut could keep are dropped first, in one pass:
     *   top-p at temperature 1 never reaches tokens 30 nats below the top
     *   (each weighs < 1e-13 of it) unless top_p is within 1e-7 of 1;
     *   without top-p, min-p keeps only logits >= max + ln(min_p) (with
     *   top-p, min-p waits: top-p normalizes over the top-k survivors).
     * With no cut at all, nothing needs sorting. */
    const float top = max_logit(lg, s->n_vocab);
    float floor_l = -INFINITY;
    if (p->top_p < 1.0f - 1e-7f)
        floor_l = top - 30.0f;
    else if (p->min_p > 0.0f)
        floor_l = top + logf(p->min_p);
    int n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (lg[i] < floor_l) continue;
        s->c[n].logit = lg[i];
        s->c[n].id = i;
        n++;
    }
    int need_sort = p->top_k > 0 || p->top_p < 1.0f || p->min_p > 0.0f;
    if (need_sort) {
        n = top_k_select(s->c, n, p->top_k);
    } else {
        /* no cut: the first candidate must be a maximum for mx below */
        for (int i = 1; i < n; i++)
            if (s->c[i].logit > s->c[0].logit) {
                cand t = s->c[0];
                s->c[0] = s->c[i];
                s->c[i] = t;
            }
    }
    /* probabilities at temperature 1 for the top-p / min-p cuts */
    float mx = s->c[0].logit;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)(s->c[i].logit - mx));
    if (p->top_p < 1.0f) {
        double acc = 0.0;
        for (int i = 0; i < n; i++) {
            acc += exp((double)(s->c[i].logit - mx)) / sum;
            if (acc >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        /* keep tokens with prob >= min_p * max prob, i.e. logit >= mx + ln(min_p) */
        float cut = mx + logf(p->min_p);
        int k = 1;
        while (k < n && s->c[k].logit >= cut) k++;
        n = k;
    }
    return n;
}

int32_t kiln_sampler_sample(kiln_sampler *s, const float *logits) {
    const kiln_sampler_params *p = &s->p;
    const float *lg = penalized(s, logits);
    if (p->temperature <= 0.0f) return argmax(lg, s->n_vocab);
    const int n = candidates(s, lg);
    const float mx = s->c[0].logit;
    double tot = 0.0;
    for (int i = 0; i < n; i++) tot += exp((double)(s->c[i].logit - mx) / p->temperature);
    double r = next_unit(s) * tot, acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += exp((double)(s->c[i].logit - mx) / p->temperature);
        if (r < acc) return s->c[i].id;
    }
    return s->c[n - 1].id;
}

/* ---- the distribution itself (sample.h) ---- */

int32_t sample_dist(kiln_sampler *s, const float *logits, const int32_t **ids, const float **probs) {
    const kiln_sampler_params *p = &s->p;
    const float *lg = penalized(s, logits);
    if (p->temperature <= 0.0f) {
        s->d_id[0] = argmax(lg, s->n_vocab);
        s->d_p[0] = 1.0f;
        *ids = s->d_id;
        *probs = s->d_p;
        return 1;
    }
    const int n = candidates(s, lg);
    const float mx = s->c[0].logit;
    double tot = 0.0;
    for (int i = 0; i < n; i++) tot += exp((double)(s->c[i].logit - mx) / p->temperature);
    for (int i = 0; i < n; i++) {
        s->d_id[i] = s->c[i].id;
        s->d_p[i] = (float)(exp((double)(s->c[i].logit - mx) / p->temperature) / tot);
    }
    *ids = s->d_id;
    *probs = s->d_p;
    return n;
}

double sample_uniform(kiln_sampler *s) { return next_unit(s); }

int32_t sample_pick(kiln_sampler *s, const float *w, int32_t n) {
    double tot = 0.0;
    for (int32_t i = 0; i < n; i++) tot += w[i] > 0 ? w[i] : 0;
    double r = next_unit(s) * tot, acc = 0.0;
    int32_t last = -1;
    for (int32_t i = 0; i < n; i++) {
        if (!(w[i] > 0)) continue;
        acc += w[i];
        last = i;
        if (r < acc) return i;
    }
    return last;
}

const kiln_sampler_params *sample_params(const kiln_sampler *s) { return &s->p; }
