/* kv_quant.h - the quantized KV cache (docs/KV_CACHE.md): row sizes, the row
 * quantizer (one scalar rounding rule shared by every tier, so the cache bytes
 * do not depend on the kernel tier), the row decoder the attention kernels of
 * every tier read K/V rows through, and the Walsh-Hadamard rotation of the
 * heads.
 *
 * A cache row is one head's head_dim elements at one position. KV types:
 *   f32, f16   head_dim floats / halves
 *   q8         head_dim / 32 blocks of CISM_DTYPE_Q8 (fp16 scale, 32 int8), 34 bytes
 *   q4a        head_dim / 32 blocks of CISM_DTYPE_Q4A (fp16 scale d, fp16 minimum m, 32 4-bit
 *              codes: d * code + m), 20 bytes (the 4-bit type: it measured better than the
 *              symmetric q4, docs/KV_CACHE.md)
 * Decoding gives the same floats on every tier (q8 d * code is exact; q4a
 * rounds once, the exact product plus m), so a decoded row does not depend on
 * the tier. */
#ifndef CISM_KV_QUANT_H
#define CISM_KV_QUANT_H

#include <stdint.h>
#include "dtype.h"

/* 1 for the block-quantized KV types (rows of head_dim / 32 blocks). */
static inline int cism__kv_is_quant(int32_t kv_type) {
    return kv_type == CISM_DTYPE_Q8 || kv_type == CISM_DTYPE_Q4A;
}

/* Bytes of one cache row of head_dim elements (head_dim a multiple of 32 for
   the quantized types). */
static inline uint64_t cism__kv_row_bytes(int32_t kv_type, int64_t head_dim) {
    switch (kv_type) {
    case CISM_DTYPE_F32: return (uint64_t)head_dim * 4u;
    case CISM_DTYPE_Q8: return (uint64_t)(head_dim / 32) * 34u;
    case CISM_DTYPE_Q4A: return (uint64_t)(head_dim / 32) * 20u;
    default: return (uint64_t)head_dim * 2u;
    }
}

/* A block's fp16 scale as f32. A SIMD tier defines CISM__KV_HALF_TO_F32 as its
   hardware conversion (F16C, NEON) before including this header: the
   conversion is exact, so the values are those of cism__f16_to_f32 (a NaN may
   come out quiet either way), only faster (one call per block of 32). The x86
   tiers decode with kv_x86.h instead, NEON through this header. */
#ifndef CISM__KV_HALF_TO_F32
#define CISM__KV_HALF_TO_F32(h) cism__f16_to_f32(h)
#endif
static inline float cism__kv_half(const uint8_t *p) { return CISM__KV_HALF_TO_F32((uint16_t)(p[0] | (p[1] << 8))); }

/* out[0..n) = the first n elements (n a multiple of 32) of a row of the
   quantized KV type. q8: d * code, exact (an fp16 times an int8); q4a:
   d * code + m, the exact product then one rounding (separate statements, and
   kernel files are built without FMA contraction). */
static inline void cism__kv_decode(int32_t kv_type, const uint8_t *row, float *out, int64_t n) {
    int64_t b, i;
    if (kv_type == CISM_DTYPE_Q8) {
        for (b = 0; b < n; b += 32, row += 34) {
            const float d = cism__kv_half(row);
            const int8_t *c = (const int8_t *)(row + 2);
            for (i = 0; i < 32; i++) out[b + i] = d * (float)c[i];
        }
    } else { /* q4a */
        for (b = 0; b < n; b += 32, row += 20) {
            const float d = cism__kv_half(row), m = cism__kv_half(row + 2);
            for (i = 0; i < 16; i++) {
                float lo = d * (float)(row[4 + i] & 15), hi = d * (float)(row[4 + i] >> 4);
                out[b + i] = lo + m;
                out[b + 16 + i] = hi + m;
            }
        }
    }
}

/* Rows [b0, b0 + n) of a quantized cache (rows of hd elements) as f32 into
   buf: the NEON tier's split attention (attention_split.h) widens a block of
   K or V rows through this (compiled with the tier's flags; the x86 tiers use
   kv_x86.h's decoder of the same floats) and then treats it as an f32 block. */
static inline const float *cism__kv_widen_rows(const void *kv, int32_t kv_type, int64_t b0, int64_t n, int64_t hd,
                                               float *buf) {
    const uint64_t rb = cism__kv_row_bytes(kv_type, hd);
    const uint8_t *src = (const uint8_t *)kv + (uint64_t)b0 * rb;
    int64_t r;
    for (r = 0; r < n; r++) cism__kv_decode(kv_type, src + (uint64_t)r * rb, buf + r * hd, hd);
    return buf;
}

/* A row of n floats (n a multiple of 32) into the quantized KV type (kv_quant.c;
   plain C, the same bytes on every tier). A block holding a NaN or an
   infinity, or whose scale overflows fp16, gets a NaN scale and zero codes: it
   decodes to NaN, which reaches the logits (the eval then fails as with an f16
   cache) instead of hiding. search (q4a only): 1 = the range search of the
   keys (kv_quant.c), 0 = each block's [min, max] (values: their 4-bit error
   costs little, the search would cost prefill time). dir (q4a with search
   only; NULL: none): n weights u of the row's elements; each code is then the
   one of the nearest three (nearest, one below, one above) that minimises
   e^2 + (r + u e)^2, r the sum of u e over the row's earlier elements: the
   error along the queries' main direction u stays small (docs/KV_CACHE.md,
   "Query directions"). */
void cism__kv_quantize_row(int32_t kv_type, const float *x, int64_t n, uint8_t *out, int search, const float *dir);

/* The per-head rotation: x[0..n) <- H x, H the orthonormal Walsh-Hadamard
   matrix (Sylvester order, scaled by 1/sqrt(P)) applied to each block of P
   consecutive elements, P the largest power of two dividing n (n = 64: one
   block of 64; 96: three of 32). H is symmetric and H H = I, so the same call
   undoes it. Plain C in a fixed order, shared by every tier (kv_quant.c). */
void cism__kv_hadamard(float *x, int64_t n);
/* P for a head of n elements. */
int64_t cism__kv_hadamard_block(int64_t n);

#endif
