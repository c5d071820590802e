/*
 * audio — speech input: decoding, conversion to 16 kHz mono, log-mel.
 *
 * read.c   files through libsndfile (WAV, FLAC, Ogg/Vorbis, Opus, MP3 ...),
 *          interleaved PCM checked (finite samples, whole frames, 8 to
 *          192 kHz, 1 to 8 channels), channels averaged, resampled with
 *          libsamplerate, 64k source frames at a time: a read holds its
 *          16 kHz output (64 KB a second) and one chunk, never the decoded
 *          source.  The caller's buffers are never written.
 * mel.c    Whisper's log-mel spectrogram with FFTW (double precision):
 *          400-sample periodic Hann frames every 160 samples, centred
 *          (reflected 200 samples at both ends), |X|^2 of the 201 bins, the
 *          model's filterbank, log10 floored at 1e-10, everything below the
 *          maximum - 8 raised to it, then (x + 4) / 4.
 *
 * Functions return a kiln_status with the last error set (base_fail): the
 * readers KILN_ERR_UNSUPPORTED for audio longer than their limit, _IO for a
 * file that can't be opened, _FORMAT for one that doesn't decode, _NOMEM,
 * and _INVALID_ARG for PCM out of range.
 */
#ifndef KILN_AUDIO_H
#define KILN_AUDIO_H

#include <stddef.h>
#include <stdint.h>

#include "kiln.h"
#include "thread/pool.h"

#define AUDIO_RATE 16000
#define AUDIO_HOP 160
#define AUDIO_N_FFT 400
#define AUDIO_N_BINS 201
#define AUDIO_MAX_SECONDS (24.0 * 3600.0) /* the most audio any read gives */

typedef struct audio_info {
    int32_t rate; /* of the source */
    int32_t channels;
    int64_t frames;  /* source frames */
    char format[64]; /* "WAV (Microsoft) / Signed 16 bit PCM", ... */
} audio_info;

/* Decodes path to 16 kHz mono floats (*out malloc'ed, *n samples; an empty
 * clip gives n = 0 and out NULL).  Audio longer than max_seconds (<= 0 or
 * above AUDIO_MAX_SECONDS: AUDIO_MAX_SECONDS) fails with KILN_ERR_UNSUPPORTED: at once when the header
 * declares the length, else once that much has been decoded. */
kiln_status audio_read_file(const char *path, double max_seconds, float **out, int64_t *n, audio_info *info);
/* The same from memory (e.g. an upload): data of len bytes in any format
 * libsndfile reads. */
kiln_status audio_read_memory(const void *data, size_t len, double max_seconds, float **out, int64_t *n,
                              audio_info *info);
/* Converts interleaved PCM (n_samples values, frames of channels) at rate
 * to 16 kHz mono. */
kiln_status audio_to_mono16k(const float *pcm, int64_t n_samples, int32_t rate, int32_t channels, float **out,
                             int64_t *n);

/* Log-mel of x[0..n) followed by pad zero samples: *mel is malloc'ed
 * [n_mels][*n_frames] (row stride *n_frames), n_frames = (n + pad) / 160.
 * filters is [n_mels][201].  pool may be NULL (one thread). */
kiln_status audio_log_mel(const float *x, int64_t n, int64_t pad, const float *filters, int n_mels, thread_pool *pool,
                          float **mel, int64_t *n_frames);

#endif
