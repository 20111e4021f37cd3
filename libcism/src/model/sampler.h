/* sampler.h - the sampler's internals that speculative decoding needs
   (speculative.c): the distribution cism_sampler_sample draws from, its
   random generator, and a copy of its state. */
#ifndef CISM_SAMPLER_H
#define CISM_SAMPLER_H

#include "cism.h"

/* 1 when the sampler picks the argmax (temperature <= 0). */
int cism__sampler_is_greedy(const cism_sampler *s);
/* The next uniform double in [0, 1) of the sampler's generator (the one
   cism_sampler_sample draws with). */
double cism__sampler_uniform(cism_sampler *s);
/* The distribution cism_sampler_sample draws a token from for these logits
   (penalties of the current history, top-k, top-p, min-p, temperature):
   probs[0..n_vocab) sum to 1 (a point mass when greedy). Consumes no random
   numbers. */
cism_status cism__sampler_probs(cism_sampler *s, const float *logits, int32_t n_vocab, double *probs);
/* dst takes src's parameters, generator state and penalty history. */
cism_status cism__sampler_copy(cism_sampler *dst, const cism_sampler *src);

#endif
