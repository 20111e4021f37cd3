/* kernels.h - the table of compute kernels, one table per ISA tier.
 *
 * The scalar tier (kernels_scalar.c) is the reference every other tier is
 * tested against (tests/c/test_kernels.c; bounds in tests/c/kernel_bounds.h,
 * explained in docs/KERNELS.md). Each other tier lives in its own translation
 * unit built with that tier's compiler flags (kernels_avx2.c, kernels_avx512.c,
 * kernels_neon.c with kernels_neon_quant.c, kernels_neon_dotprod.c,
 * kernels_neon_i8mm.c) and exports one
 * cism__kernels_fill_<tier>() that overwrites the entries it accelerates in a
 * table already holding the tier below it (scalar <- avx2 <- avx512,
 * scalar <- neon <- neon_dotprod <- neon_i8mm). dispatch.c, built with baseline
 * flags, calls a fill function only after the CPU reported the tier's
 * features, and picks the table once; CISM_ISA can force a lower tier.
 *
 * Kernels are pure: no allocation, no globals, no threads. Callers split work
 * by rows (matmul) or by heads (attention) in any way; the rule every tier
 * keeps is that the arithmetic producing one output element depends only on
 * that element's inputs, never on the row range, the token count nt or the
 * position of the element inside a register tile. So results do not depend on
 * the thread count or the chunking, and one token evaluated alone gives the
 * same bits as inside a batch.
 */
#ifndef CISM_KERNELS_H
#define CISM_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "dtype.h"

struct cism__x16;   /* quant.h */
struct cism__oruns; /* outlier_runs.h */

/* y[t*ldy + r] = dot(W row r, x[t*ldx .. t*ldx+cols))  for r in [r0, r1), t in [0, nt).
   W rows are row_bytes apart, in the matmul's dtype. */
typedef void (*cism__matmul_fn)(const void *w, uint64_t row_bytes, int64_t cols,
                                const float *x, int64_t ldx, float *y, int64_t ldy,
                                int64_t nt, int64_t r0, int64_t r1);
/* out[0..n) = row (n elements of the dtype) as f32. */
typedef void (*cism__row_to_f32_fn)(const void *row, float *out, int64_t n);

/* The integer-dot path: like cism__matmul_fn, with the activations given as
   quantized rows (quantize_act output, ldq bytes apart) instead of floats.
   NULL for float dtypes. */
typedef void (*cism__matmul_a8_fn)(const void *w, uint64_t row_bytes, int64_t cols,
                                   const void *xq, int64_t ldq, float *y, int64_t ldy,
                                   int64_t nt, int64_t r0, int64_t r1);

/* Split attention (split-KV, flash-style; forward.c) of a block of queries
   that share one KV head: n_tok consecutive tokens x n_grp query heads
   (grouped-query attention), over one range of n_kv cache positions. Query
   (a, i), a < n_tok, i < n_grp, is the head_dim floats at q + a*ldq + i*head_dim.
   k and v point at the range's first row (rows of head_dim elements, K's in
   k_dtype and V's in v_dtype (they may differ): f32 or f16, stride head_dim
   elements, or a quantized type, q8 or q4a, stride cism__kv_row_bytes, read
   through cism__kv_decode of kv_quant.h, the same floats on every tier).
   Query (a, i) attends rows [0, n_a) of the range,
   n_a = min(n_kv, max(0, n_lim + a)), and gets the unnormalised partial
   result: with s_t = (q . k_t) * scale, m = max_t s_t, e_t = exp(s_t - m),
   out + a*ldo + i*head_dim = sum_t e_t v_t, ml[a*ldm + 2i] = m and
   ml[a*ldm + 2i + 1] = sum_t e_t (a query with n_a = 0: m = -inf, sum 0,
   out 0). scores is scratch of n_tok * n_grp * n_kv floats (the range, not the
   context). The caller combines the ranges of a query in a fixed order and
   divides by the combined sum. Sharing lets a tier convert and load each K/V
   block once for all the queries; each output still depends only on its own
   query and rows, never on n_tok, n_grp, n_kv beyond n_a, or its place in the
   block. next (may be NULL) names the range the caller takes after this one
   (its first row of K and of V, same dtypes, and its n_kv): a tier may spread
   prefetches of it over this call's work; it never changes a result. */
typedef struct cism__att_next {
    const void *k, *v;
    int64_t n_kv;
} cism__att_next;
typedef void (*cism__attention_split_fn)(const float *q, int64_t ldq, float *out, int64_t ldo, float *ml, int64_t ldm,
                                         int64_t n_tok, int64_t n_grp, const void *k, const void *v, int32_t k_dtype,
                                         int32_t v_dtype, int64_t n_kv, int64_t n_lim, int64_t head_dim, float scale,
                                         float *scores, const cism__att_next *next);

#define CISM__GEMV_OUTL_TOKENS 8 /* the most tokens of a gemv_a8_outliers call */

typedef struct cism__kernels {
    const char *name;
    int32_t tier;     /* CISM_TIER_* */
    cism__matmul_fn matmul[CISM__DTYPE_COUNT];
    cism__row_to_f32_fn row_to_f32[CISM__DTYPE_COUNT];
    /* out = x / sqrt(mean(x^2) + eps) * w  (out may equal x) */
    void (*rmsnorm)(float *out, const float *x, const float *w, int64_t n, float eps);
    /* gate[i] = silu(gate[i]) * up[i] */
    void (*silu_mul)(float *gate, const float *up, int64_t n);
    /* Rotate-half RoPE on n_heads heads of head_dim: pairs (i, i + head_dim/2) by
       angle with cos[i], sin[i], i < head_dim/2. */
    void (*rope)(float *x, int64_t n_heads, int64_t head_dim, const float *cos_t, const float *sin_t);
    /* dst[i] = (f16) src[i] */
    void (*f32_to_f16)(const float *src, uint16_t *dst, int64_t n);
    /* int8 activations (quant.h cism__act8 blocks): matmul against quantized
       activation rows per weight dtype, and the row quantizer:
       out = cism__act8_row_bytes(n) bytes. Entries a tier leaves NULL are
       taken from the scalar tier by the caller. */
    cism__matmul_a8_fn matmul_a8[CISM__DTYPE_COUNT];
    void (*quantize_act)(const float *x, int64_t n, void *out);
    /* gate[i] = gelu_tanh(gate[i]) * up[i], GELU's tanh approximation
       0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (GeGLU, Gemma 3) */
    void (*gelu_tanh_mul)(float *gate, const float *up, int64_t n);
    /* The int8 multiply-add throughput probe (cism_measure_int8_mac_peak):
       iters rounds of independent dot-product instructions of the kind this
       tier's int8 kernels use (VNNI vpdpbusd; AVX2 vpmaddubsw + vpmaddwd; NEON
       smull + sadalp; SDOT; SMMLA) on register operands. Returns the
       multiply-adds done; folds the result into *sink. */
    int64_t (*int8_mac_loop)(int64_t iters, int32_t *sink);
    /* The outlier epilogue of the interleaved formats (model/act_outliers.c)
       on groups [g0, g1) of a q8x16 (base CISM_DTYPE_Q8) or q4sx16
       (CISM_DTYPE_Q4S) matrix w (geometry g) for nt tokens: the quantized rows
       xq (ldq bytes apart, each ending in its cism__act8_out table) and y (the
       outputs of each token from row 0, ldy apart). For each token and
       k = 0..n-1 of its table in order, y[r] = y[r] + val[k] * w(r, idx[k]),
       the weight decoded exactly (q8: f16 scale x int8 code; q4s: E4M3 scale
       x scale_mul x level), y[r] = fmaf(val[k], w, y[r]) (one rounding), so every
       tier has the C code's bits. NULL: act_outliers.c's C code. */
    void (*outliers_x16)(const uint8_t *w, uint64_t row_bytes, const struct cism__x16 *g, int32_t base,
                         const uint8_t *xq, int64_t ldq, int64_t nt, float *y, int64_t ldy, int64_t g0, int64_t g1);
    /* The same for rows [r0, r1) of q4a (r1 - r0 a multiple of 16); weight =
       d * code + m, the product then the sum, as the C code. */
    void (*outliers_q4a)(const uint8_t *w, uint64_t row_bytes, const uint8_t *xq, int64_t ldq, int64_t nt, float *y,
                         int64_t ldy, int64_t r0, int64_t r1);
    /* The outlier rule's block statistics (model/act_outliers.c): for each of
       nb whole blocks of 32 floats at x, m1[b] the largest and m2[b] the second
       largest |value| (of the multiset: a repeated max is also the second),
       ordered on the bits with the sign cleared as unsigned integers (a NaN
       above every number). Exact, so every tier gives the scalar tier's
       values. NULL: the scalar tier's. */
    void (*act_block_top2)(const float *x, int64_t nb, float *m1, float *m2);
    /* quantize_act and act_block_top2 in one pass (the outlier split): the n
       values at x quantized into out as quantize_act does, and m1, m2 of each
       of its ceil(n / 32) blocks (the last zero-padded) as act_block_top2
       gives them. Returns 1 when x holds a NaN, and then m1, m2 are
       unspecified (out is still quantize_act's). NULL: the two apart. */
    int (*quantize_act_top2)(const float *x, int64_t n, void *out, float *m1, float *m2);
    /* One channel taken out of a block by the outlier split: v, 32 finite
       floats, is the block with the positions of the bits of *taken read as
       0, and *m1 (> 0), *m2 are its act_block_top2 statistics; the first
       position holding magnitude *m1 is added to *taken, *m1 and *m2 become
       the changed block's statistics, out (32 floats) the changed block, and
       the position is returned. */
    int (*act_block_take)(const float *v, uint32_t *taken, float *m1, float *m2, float *out);
    /* Split attention (cism__attention_split_fn; forward.c combines the ranges). */
    cism__attention_split_fn attention_split;
    /* Up to CISM__GEMV_OUTL_TOKENS tokens (decode, batched decode, short
       verifies) of a row-layout dtype with their outlier channels: matmul_a8
       over rows [r0, r1) for the quantized rows xq (ldq bytes apart, each
       with its cism__act8_out table at the end), then for each token and
       k = 0..n-1 of its table y[r] = fmaf(val[k], w(r, idx[k]), y[r]) as
       outliers_q4a (q8: f16 scale x int8 code), each 8 rows' entries added
       right after their dot, while those rows are in L1: the bits of
       matmul_a8 followed by the epilogue. NULL: the two passes. */
    void (*gemv_a8_outliers[CISM__DTYPE_COUNT])(const void *w, uint64_t row_bytes, int64_t cols, const uint8_t *xq,
                                                int64_t ldq, float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1);
    /* Any number of tokens of an interleaved dtype with their outlier
       channels: the bits of matmul_a8 followed by the epilogue (outliers_x16),
       each group of 16 rows' entries added right after its tiles, while the
       group and its outputs are in cache (and the kernel sweeps the rows
       once, not in chunks). runs: the runs of these nt rows (outlier_runs.h,
       built once for every call of a stage), or NULL (or runs of other rows):
       the kernel lists them itself. NULL: the two passes. */
    void (*matmul_a8_outliers[CISM__DTYPE_COUNT])(const void *w, uint64_t row_bytes, int64_t cols, const uint8_t *xq,
                                                  int64_t ldq, float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1,
                                                  const struct cism__oruns *runs);
    /* The places of every run of runs (their channels' columns) in the
       matrix at w of an interleaved dtype with rows of row_bytes, kept in
       runs for the calls of matmul_a8_outliers on matrices of that layout
       (forward.c: once per stage, for the stage's first matrix); another
       dtype clears them. NULL: each call finds its own. */
    void (*oplaces_build)(struct cism__oruns *runs, int32_t dtype, const void *w, uint64_t row_bytes);
    /* The read probe's loop (core/membw.c): the sum, wrapping, of the n
       64-bit words at p (n a multiple of 32), read with the tier's widest
       loads: how wide each load is sets how many cache lines one core keeps
       in flight, so a probe of scalar loads reads well below what the
       tier's kernels stream (half of it on a Xeon VM). */
    uint64_t (*read_sum)(const uint64_t *p, int64_t n);
} cism__kernels;

/* The reference tier; always available. */
const cism__kernels *cism__kernels_scalar(void);
/* The tier chosen for this CPU (honours CISM_ISA); initialised once. */
const cism__kernels *cism__kernels_best(void);
/* A tier by name ("scalar", ...) if compiled in and supported here, else NULL. */
const cism__kernels *cism__kernels_by_name(const char *name);
/* A tier by CISM_TIER_* (AUTO = best) if compiled in and supported here, else NULL. */
const cism__kernels *cism__kernels_tier(int32_t tier);

/* How many loaded models stream their weights from memory: weights larger
   than half the last-level cache, or that cache's size unknown
   (cism__weights_stream). While any does, the x86 interleaved kernels' decode
   prefetch adds a far stage into L2 (tier_common.h CISM__X16_PF_FAR), which
   pays where each token reads the weights from DRAM and costs where they stay
   in the cache. A prefetch hint never changes a result. CISM_PREFETCH_FAR=0 / 1
   in the environment forces the stage off / on (for measuring). */
extern int cism__x16_streaming;
int cism__weights_stream(int64_t weight_bytes);
#if defined(_MSC_VER) && !defined(__clang__)
#define CISM__X16_FAR_ON() (*(volatile int *)&cism__x16_streaming > 0)
#else
#define CISM__X16_FAR_ON() (__atomic_load_n(&cism__x16_streaming, __ATOMIC_RELAXED) > 0)
#endif

/* Tier fill functions (each in its tier's translation unit; call only when
   the CPU has the tier's features). */
void cism__kernels_fill_avx2(cism__kernels *k);
void cism__kernels_fill_avx512(cism__kernels *k);
/* avx512_amx: call on the avx512 tier's table (kernels_amx.c) */
void cism__kernels_fill_avx512_amx(cism__kernels *k);
/* The avx512 tier's run-by-run outlier path of an interleaved dtype (one of
   the x16 formats; anything else is taken as q8x16) around another kernel mq
   of that dtype (the avx512_amx tier's tiles) */
void cism__avx512_outliers_x16(const void *w, uint64_t row_bytes, int64_t cols, const uint8_t *xq, int64_t ldq, float *y,
                               int64_t ldy, int64_t nt, int64_t r0, int64_t r1, const struct cism__oruns *runs,
                               cism__matmul_a8_fn mq, int32_t dtype);
void cism__kernels_fill_neon(cism__kernels *k);
/* the packed formats of the neon tier (kernels_neon_quant.c), called by
   cism__kernels_fill_neon */
void cism__kernels_fill_neon_quant(cism__kernels *k);
void cism__kernels_fill_neon_dotprod(cism__kernels *k);
void cism__kernels_fill_neon_i8mm(cism__kernels *k);

#endif
