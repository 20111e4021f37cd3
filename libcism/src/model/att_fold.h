/* att_fold.h - the combine of split attention (forward.c; kernels.h
 * cism__attention_split_fn): a query's partial results, one per split its
 * range meets, are folded in split order into a running (max, sum, output)
 * and divided by the sum once. One definition for forward.c and the kernel
 * tests (tests/c/test_kernels.c), so the tests fold exactly as decoding does. */
#ifndef CISM_ATT_FOLD_H
#define CISM_ATT_FOLD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Folds a partial result (ml: max, sum; o) into the running one (acc: max,
   sum; O); acc[1] == 0: nothing folded yet. Empty partials (sum 0) are
   skipped, so a query's result depends only on the splits its range meets. */
static inline void cism__att_fold(float *acc, float *O, const float *ml, const float *o, int64_t hd) {
    float mx, a, b;
    int64_t i;
    if (ml[1] == 0.0f) return;
    if (acc[1] == 0.0f) {
        acc[0] = ml[0];
        acc[1] = ml[1];
        if (O != o) memcpy(O, o, (size_t)hd * sizeof(float));
        return;
    }
    mx = ml[0] > acc[0] ? ml[0] : acc[0];
    a = expf(acc[0] - mx);
    b = expf(ml[0] - mx);
    acc[1] = acc[1] * a + ml[1] * b;
    for (i = 0; i < hd; i++) O[i] = O[i] * a + o[i] * b;
    acc[0] = mx;
}

/* O /= the folded sum. */
static inline void cism__att_finish(const float *acc, float *O, int64_t hd) {
    int64_t i;
    for (i = 0; i < hd; i++) O[i] = O[i] / acc[1];
}

#endif
