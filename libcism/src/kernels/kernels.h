/* kernels.h - the table of compute kernels, one table per ISA tier.
 *
 * The scalar tier (kernels_scalar.c) is the reference every other tier is
 * tested against. A tier fills the entries it accelerates and copies the rest
 * from the scalar table. The table is chosen once (dispatch.c) from what the
 * CPU reports; CISM_ISA in the environment can force a lower tier.
 *
 * Kernels are pure: no allocation, no globals, no threads. Callers split work
 * by rows; every row is computed the same way whatever the split, so results
 * do not depend on the thread count.
 */
#ifndef CISM_KERNELS_H
#define CISM_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "dtype.h"

/* y[t*ldy + r] = dot(W row r, x[t*ldx .. t*ldx+cols))  for r in [r0, r1), t in [0, nt).
   W rows are row_bytes apart, in the matmul's dtype. */
typedef void (*cism__matmul_fn)(const void *w, uint64_t row_bytes, int64_t cols,
                                const float *x, int64_t ldx, float *y, int64_t ldy,
                                int64_t nt, int64_t r0, int64_t r1);
/* out[0..n) = row (n elements of the dtype) as f32. */
typedef void (*cism__row_to_f32_fn)(const void *row, float *out, int64_t n);

/* Attention of one query head over n_kv cached positions of one KV head.
   k and v hold n_kv rows of head_dim elements, row stride head_dim, in kv_dtype.
   scores is scratch of n_kv floats. out[0..head_dim) = softmax(q.k * scale) . v */
typedef void (*cism__attention_fn)(const float *q, const void *k, const void *v, int32_t kv_dtype,
                                   int64_t n_kv, int64_t head_dim, float scale,
                                   float *scores, float *out);

typedef struct cism__kernels {
    const char *name;
    cism__matmul_fn matmul[CISM__DTYPE_COUNT];
    cism__row_to_f32_fn row_to_f32[CISM__DTYPE_COUNT];
    cism__attention_fn attention;
    /* out = x / sqrt(mean(x^2) + eps) * w  (out may equal x) */
    void (*rmsnorm)(float *out, const float *x, const float *w, int64_t n, float eps);
    /* gate[i] = silu(gate[i]) * up[i] */
    void (*silu_mul)(float *gate, const float *up, int64_t n);
    /* Rotate-half RoPE on n_heads heads of head_dim: pairs (i, i + head_dim/2) by
       angle with cos[i], sin[i], i < head_dim/2. */
    void (*rope)(float *x, int64_t n_heads, int64_t head_dim, const float *cos_t, const float *sin_t);
    /* dst[i] = (f16) src[i] */
    void (*f32_to_f16)(const float *src, uint16_t *dst, int64_t n);
} cism__kernels;

/* The reference tier; always available. */
const cism__kernels *cism__kernels_scalar(void);
/* The tier chosen for this CPU (honours CISM_ISA); initialised once. */
const cism__kernels *cism__kernels_best(void);
/* A tier by name ("scalar", ...) if compiled in and supported here, else NULL. */
const cism__kernels *cism__kernels_by_name(const char *name);

#endif
