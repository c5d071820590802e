/*
 * What the logits checks of test_models and test_backend_cuda share: the
 * greedy token of a row, and sequences side by side in one batch (n_seq
 * prompts decoded together give what each gives alone).
 */
#ifndef KILN_TEST_INTERLEAVE_H
#define KILN_TEST_INTERLEAVE_H

#include <stdint.h>

/* The index of x's largest of n values (the first of equals). */
static int t_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* The prompts of n_seq sequences (sequence s: prompt + s, lens[s] tokens)
 * interleaved token by token: tok, seq and want [sum of lens] get the
 * batch, last[s] the index of s's last token (the one that asks for
 * logits).  Returns the batch's size. */
static int t_interleave(const int32_t *prompt, const int *lens, int n_seq, int32_t *tok, int32_t *seq, int8_t *want,
                        int *last) {
    int np = 0, n = 0;
    for (int s = 0; s < n_seq; s++) np = lens[s] > np ? lens[s] : np;
    for (int i = 0; i < np; i++)
        for (int s = 0; s < n_seq; s++)
            if (i < lens[s]) {
                tok[n] = prompt[s + i];
                seq[n] = s;
                want[n] = i == lens[s] - 1;
                if (want[n]) last[s] = n;
                n++;
            }
    return n;
}

#endif
