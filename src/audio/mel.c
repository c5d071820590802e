/* Whisper's log-mel spectrogram over FFTW's real-to-complex transform. */
#include "audio/audio.h"

#include "base/base.h"

#include <fftw3.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* FFTW's planner is not thread-safe; executing a plan on new arrays is. */
static pthread_mutex_t plan_lock = PTHREAD_MUTEX_INITIALIZER;
static fftw_plan plan;
static double hann[AUDIO_N_FFT];

static int plan_once(void) {
    pthread_mutex_lock(&plan_lock);
    if (!plan) {
        double *in = fftw_malloc(AUDIO_N_FFT * sizeof *in);
        fftw_complex *out = fftw_malloc(AUDIO_N_BINS * sizeof *out);
        if (in && out) plan = fftw_plan_dft_r2c_1d(AUDIO_N_FFT, in, out, FFTW_ESTIMATE);
        fftw_free(in);
        fftw_free(out);
        /* periodic Hann window */
        for (int i = 0; i < AUDIO_N_FFT; i++) hann[i] = 0.5 - 0.5 * cos(2.0 * M_PI * i / AUDIO_N_FFT);
    }
    int ok = plan != NULL;
    pthread_mutex_unlock(&plan_lock);
    return ok ? 0 : -1;
}

typedef struct mel_job {
    const float *x;
    int64_t n, total; /* samples of x; x and the zero padding */
    const float *filters;
    int n_mels;
    int64_t n_frames;
    float *mel;
    float *tmax; /* per thread maximum */
    int fail;
} mel_job;

/* Sample i of the centred, reflected signal (i in [0, total + 400)). */
static inline double sample(const mel_job *j, int64_t i) {
    int64_t t = i - AUDIO_N_FFT / 2;
    if (t < 0) t = -t;
    if (t >= j->total) t = 2 * (j->total - 1) - t;
    return t < j->n ? (double)j->x[t] : 0.0;
}

static void mel_run(void *ud, int ith, int nth) {
    mel_job *j = ud;
    long lo, hi;
    thread_pool_range((long)j->n_frames, ith, nth, &lo, &hi);
    double *in = fftw_malloc(AUDIO_N_FFT * sizeof *in);
    fftw_complex *out = fftw_malloc(AUDIO_N_BINS * sizeof *out);
    double *pw = malloc(AUDIO_N_BINS * sizeof *pw);
    float mx = -INFINITY;
    if (!in || !out || !pw) {
        j->fail = 1;
        goto done;
    }
    for (long f = lo; f < hi; f++) {
        int64_t base = (int64_t)f * AUDIO_HOP;
        for (int i = 0; i < AUDIO_N_FFT; i++) in[i] = sample(j, base + i) * hann[i];
        fftw_execute_dft_r2c(plan, in, out);
        for (int k = 0; k < AUDIO_N_BINS; k++) pw[k] = out[k][0] * out[k][0] + out[k][1] * out[k][1];
        for (int m = 0; m < j->n_mels; m++) {
            const float *w = j->filters + (size_t)m * AUDIO_N_BINS;
            double s = 0;
            for (int k = 0; k < AUDIO_N_BINS; k++) s += (double)w[k] * pw[k];
            float v = (float)log10(s > 1e-10 ? s : 1e-10);
            j->mel[(size_t)m * (size_t)j->n_frames + (size_t)f] = v;
            if (v > mx) mx = v;
        }
    }
done:
    j->tmax[ith] = mx;
    fftw_free(in);
    fftw_free(out);
    free(pw);
}

typedef struct clamp_job {
    float *mel;
    size_t n;
    float floor;
} clamp_job;

static void clamp_run(void *ud, int ith, int nth) {
    clamp_job *c = ud;
    long lo, hi;
    thread_pool_range((long)c->n, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        double v = c->mel[i] > c->floor ? c->mel[i] : c->floor;
        c->mel[i] = (float)((v + 4.0) / 4.0);
    }
}

static void run(thread_pool *pool, thread_pool_fn fn, void *ud) {
    if (pool)
        thread_pool_run(pool, fn, ud);
    else
        fn(ud, 0, 1);
}

kiln_status audio_log_mel(const float *x, int64_t n, int64_t pad, const float *filters, int n_mels, thread_pool *pool,
                          float **mel, int64_t *n_frames) {
    *mel = NULL;
    *n_frames = 0;
    int64_t total = n + pad;
    if (n < 0 || pad < 0 || total <= AUDIO_N_FFT / 2) {
        return base_fail(KILN_ERR_INVALID_ARG, "%lld samples are too few for a spectrogram", (long long)total);
    }
    if (plan_once()) { return base_fail(KILN_ERR_NOMEM, "FFTW could not plan a %d-point transform", AUDIO_N_FFT); }
    int nth = pool ? thread_pool_size(pool) : 1;
    mel_job j = {x, n, total, filters, n_mels, total / AUDIO_HOP, NULL, NULL, 0};
    j.mel = malloc((size_t)n_mels * (size_t)j.n_frames * sizeof(float));
    j.tmax = malloc((size_t)nth * sizeof(float));
    if (!j.mel || !j.tmax) {
        free(j.mel);
        free(j.tmax);
        return base_fail(KILN_ERR_NOMEM, "out of memory for %lld mel frames", (long long)j.n_frames);
    }
    run(pool, mel_run, &j);
    float mx = -INFINITY;
    for (int i = 0; i < nth; i++)
        if (j.tmax[i] > mx) mx = j.tmax[i];
    free(j.tmax);
    if (j.fail) {
        free(j.mel);
        return base_fail(KILN_ERR_NOMEM, "out of memory in the spectrogram");
    }
    clamp_job c = {j.mel, (size_t)n_mels * (size_t)j.n_frames, (float)((double)mx - 8.0)};
    run(pool, clamp_run, &c);
    *mel = j.mel;
    *n_frames = j.n_frames;
    return KILN_OK;
}
