/* kernels_avx512.c - the x86-64 AVX-512 tier (F, BW, VL, DQ and VNNI, plus the
 * AVX2/FMA/F16C it builds on). Float kernels use 512-bit vectors and mask
 * registers for tails; VNNI is reserved for the int8 kernels of the quantized
 * formats. Entries not set here keep the AVX2 tier's: the f16 matmul among
 * them, because on Zen 4 (512-bit ops split in two halves) 512-bit VCVTPH2PS
 * runs at half the rate of two 256-bit ones, and the AVX2 kernel decodes
 * 25-45% faster from cache with the same prefill speed (docs/KERNELS.md).
 *
 * Dot products use one 16-lane accumulator per output element (lane j sums
 * columns j, j+16, ... with FMA; tails masked to zero), folded to 8 lanes and
 * then added in the scalar tier's tree. Every path (decode row tiles, prefill
 * register tiles, remainders) runs that sequence for each element, so results
 * do not depend on tiling or threads. */
#include "tier_common.h"
#include "dtype.h"

#include <immintrin.h>
#include "kv_x86.h"  /* decoding of q8 / q4a cache rows */
#include <math.h>
#include <string.h>

#ifndef MR
#define MR 4   /* rows per prefill register tile (4x4 measured best on Zen 4: docs/KERNELS.md) */
#endif
#ifndef NR
#define NR 4   /* tokens per prefill register tile: MR*NR accumulators + NR x vectors + 1 */
#endif

/* ---- loads and reductions ------------------------------------------------------ */
CISM__INLINE __mmask16 mask_below(int64_t n) { return (__mmask16)((1u << n) - 1u); }   /* n <= 15 */

CISM__INLINE __m512 load16(const void *row, int64_t c, int dt) {
    __m256i h;
    if (dt == CISM_DTYPE_F32) return _mm512_loadu_ps((const float *)row + c);
    h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + c));
    if (dt == CISM_DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* the n < 16 elements from c, zero-filled (masked: nothing past them is read) */
CISM__INLINE __m512 load16_part(const void *row, int64_t c, int64_t n, int dt) {
    __m256i h;
    if (dt == CISM_DTYPE_F32) return _mm512_maskz_loadu_ps(mask_below(n), (const float *)row + c);
    h = _mm256_maskz_loadu_epi16(mask_below(n), (const uint16_t *)row + c);
    if (dt == CISM_DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

CISM__INLINE __m256 fold16(__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/* lanes j and j+8 first, then ((a0+a4)+(a1+a5)) + ((a2+a6)+(a3+a7)) */
CISM__INLINE float hsum16(__m512 v) {
    __m256 f = fold16(v);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
    __m128 p = _mm_add_ps(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehl_ps(p, p)));
}

/* lane j of the result = the sum of the lanes of a[j], j < 16, for all sixteen
   in 30 shuffles and 15 adds (folding one vector at a time costs about twice
   that). Every lane is summed in hsum16's order: f_i = x_i + x_(i+8), then
   ((f0 + f1) + (f2 + f3)) + ((f4 + f5) + (f6 + f7)). The tree takes a[] in
   the order 0, 4, 1, 5, 2, 6, 3, 7, 8, 12, ... which lands sum j in lane j.
   Rows 0-7 and 8-15 meet only in the last step, so a caller may reduce each
   half apart (hsum16x16_half) and join them (hsum16x16_join): the same
   operations, fewer live registers. */
CISM__INLINE __m512 hsum16x16_half(const __m512 a[8]) {
    static const int order[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    __m512 h[4], p[2];
    int j;
    for (j = 0; j < 4; j++) { /* [f of x: lanes 0-3, 4-7; f of y: 0-3, 4-7] */
        __m512 x = a[order[2 * j]], y = a[order[2 * j + 1]];
        h[j] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
    }
    for (j = 0; j < 2; j++) /* adjacent pairs: f0 + f1, f2 + f3, ... */
        p[j] = _mm512_add_ps(_mm512_shuffle_ps(h[2 * j], h[2 * j + 1], 0x88), _mm512_shuffle_ps(h[2 * j], h[2 * j + 1], 0xDD));
    /* (f0 + f1) + (f2 + f3) and (f4 + f5) + (f6 + f7) */
    return _mm512_add_ps(_mm512_shuffle_ps(p[0], p[1], 0x88), _mm512_shuffle_ps(p[0], p[1], 0xDD));
}
CISM__INLINE __m512 hsum16x16_join(__m512 lo, __m512 hi) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(lo, hi, 0x88), _mm512_shuffle_f32x4(lo, hi, 0xDD));
}
CISM__INLINE __m512 hsum16x16(const __m512 a[16]) { return hsum16x16_join(hsum16x16_half(a), hsum16x16_half(a + 8)); }

CISM__INLINE __m512 exp16(__m512 x) {
    __m512 n, r, r2, y;
    __m512i e;
    x = _mm512_min_ps(_mm512_set1_ps(CISM__EXP_HI), x);   /* NaN in x is kept */
    x = _mm512_max_ps(_mm512_set1_ps(CISM__EXP_LO), x);
    n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(CISM__LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(CISM__LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(CISM__LN2_LO), r);
    r2 = _mm512_mul_ps(r, r);
    y = _mm512_fmadd_ps(_mm512_set1_ps(CISM__EXP_P0), r, _mm512_set1_ps(CISM__EXP_P1));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(CISM__EXP_P2));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(CISM__EXP_P3));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(CISM__EXP_P4));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(CISM__EXP_P5));
    y = _mm512_add_ps(_mm512_fmadd_ps(y, r2, r), _mm512_set1_ps(1.0f));
    e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}

/* ---- matmul ---------------------------------------------------------------------- */
/* the template of x86_float_tiles.h on 16 lanes; no matmul_f16 (the AVX2 tier's is kept, see the top) */
typedef __m512 fvec;
enum { FW = 16 };
CISM__INLINE fvec fv_zero(void) { return _mm512_setzero_ps(); }
CISM__INLINE fvec fv_loadu(const float *p) { return _mm512_loadu_ps(p); }
CISM__INLINE fvec fv_load(const void *row, int64_t c, int dt) { return load16(row, c, dt); }
CISM__INLINE fvec fv_load_part(const void *row, int64_t c, int64_t n, int dt) { return load16_part(row, c, n, dt); }
CISM__INLINE fvec fv_fma(fvec w, fvec x, fvec acc) { return _mm512_fmadd_ps(w, x, acc); }
CISM__INLINE float fv_hsum(fvec v) { return hsum16(v); }
#define X86_FLOAT_F16 0
#include "x86_float_tiles.h"

/* ---- conversions ----------------------------------------------------------------- */
static void row_half(const void *row, float *out, int64_t n, const int dt) {
    int64_t i;
    for (i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, load16(row, i, dt));
    if (i < n) _mm512_mask_storeu_ps(out + i, mask_below(n - i), load16_part(row, i, n - i, dt));
}
static void row_f16(const void *row, float *out, int64_t n) { row_half(row, out, n, CISM_DTYPE_F16); }
static void row_bf16(const void *row, float *out, int64_t n) { row_half(row, out, n, CISM_DTYPE_BF16); }

static void f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
    int64_t i;
    for (i = 0; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) {
        __mmask16 m = mask_below(n - i);
        _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

/* ---- attention ------------------------------------------------------------------- */
/* the split kernel: x86_attention.h on 16 lanes */
CISM__INLINE fvec fv_set1(float x) { return _mm512_set1_ps(x); }
CISM__INLINE fvec fv_add(fvec a, fvec b) { return _mm512_add_ps(a, b); }
CISM__INLINE fvec fv_sub(fvec a, fvec b) { return _mm512_sub_ps(a, b); }
CISM__INLINE fvec fv_max(fvec a, fvec b) { return _mm512_max_ps(a, b); }
CISM__INLINE fvec fv_exp(fvec v) { return exp16(v); }
CISM__INLINE float fv_hmax(fvec v) { return _mm512_reduce_max_ps(v); }
CISM__INLINE fvec fv_mul(fvec a, fvec b) { return _mm512_mul_ps(a, b); }
CISM__INLINE fvec fv_hsum_rows(const fvec a[16]) { return hsum16x16(a); }
CISM__INLINE void fv_storeu(float *p, fvec v) { _mm512_storeu_ps(p, v); }
CISM__INLINE fvec fv_load_tail(const float *p, int64_t n, float fill) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), mask_below(n), p);
}
CISM__INLINE void fv_store_tail(float *p, int64_t n, fvec v) { _mm512_mask_storeu_ps(p, mask_below(n), v); }
CISM__INLINE fvec fv_keep(fvec v, int64_t n) { return _mm512_maskz_mov_ps(mask_below(n), v); }
#define SCORE_ROWS 16 /* scores per tile: fv_hsum_rows */
/* fv_hsum_rows in two halves: two queries' score tiles at once (x86_attention.h score_tile2) */
#define FV_HSUM_HALVES 1
CISM__INLINE fvec fv_hsum_half(const fvec a[8]) { return hsum16x16_half(a); }
CISM__INLINE fvec fv_hsum_join(fvec lo, fvec hi) { return hsum16x16_join(lo, hi); }
#define PV_ACCS 16 /* accumulators of a multi-head PV tile (x86_attention.h) */
#include "x86_attention.h"

/* ---- elementwise ----------------------------------------------------------------- */
static void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    __m512 s;
    double ss;
    float scale;
    int64_t i;
    for (i = 0; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        a0 = _mm512_fmadd_pd(lo, lo, a0);
        a1 = _mm512_fmadd_pd(hi, hi, a1);
    }
    if (i < n) {
        __m512 v = _mm512_maskz_loadu_ps(mask_below(n - i), x + i);
        __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        a0 = _mm512_fmadd_pd(lo, lo, a0);
        a1 = _mm512_fmadd_pd(hi, hi, a1);
    }
    ss = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
    scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    s = _mm512_set1_ps(scale);
    for (i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(w + i), _mm512_mul_ps(_mm512_loadu_ps(x + i), s)));
    if (i < n) {
        __mmask16 m = mask_below(n - i);
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), s)));
    }
}

CISM__INLINE __m512 silu_mul16(__m512 g, __m512 u) {
    __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), g)));
    return _mm512_mul_ps(_mm512_div_ps(g, d), u);
}

static void silu_mul(float *gate, const float *up, int64_t n) {
    int64_t i;
    for (i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(gate + i, silu_mul16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
    if (i < n) {
        __mmask16 m = mask_below(n - i);
        _mm512_mask_storeu_ps(gate + i, m, silu_mul16(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
    }
}

/* Same products and sums as the scalar tier (no FMA): bit-identical. */
static void rope(float *x, int64_t n_heads, int64_t head_dim, const float *cos_t, const float *sin_t) {
    int64_t h, i, half = head_dim / 2;
    for (h = 0; h < n_heads; h++) {
        float *v = x + h * head_dim;
        for (i = 0; i < half; i += 16) {
            __mmask16 m = half - i >= 16 ? (__mmask16)0xffff : mask_below(half - i);
            __m512 a = _mm512_maskz_loadu_ps(m, v + i), b = _mm512_maskz_loadu_ps(m, v + half + i);
            __m512 c = _mm512_maskz_loadu_ps(m, cos_t + i), s = _mm512_maskz_loadu_ps(m, sin_t + i);
            _mm512_mask_storeu_ps(v + i, m, _mm512_sub_ps(_mm512_mul_ps(a, c), _mm512_mul_ps(b, s)));
            _mm512_mask_storeu_ps(v + half + i, m, _mm512_add_ps(_mm512_mul_ps(b, c), _mm512_mul_ps(a, s)));
        }
    }
}

/* The read probe's loop: four 512-bit sums, one cache line per load */
static uint64_t read_sum(const uint64_t *p, int64_t n) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i;
    for (i = 0; i + 32 <= n; i += 32) { /* (vpaddq wraps) */
        a0 = _mm512_add_epi64(a0, _mm512_loadu_si512((const void *)(p + i)));
        a1 = _mm512_add_epi64(a1, _mm512_loadu_si512((const void *)(p + i + 8)));
        a2 = _mm512_add_epi64(a2, _mm512_loadu_si512((const void *)(p + i + 16)));
        a3 = _mm512_add_epi64(a3, _mm512_loadu_si512((const void *)(p + i + 24)));
    }
    uint64_t lanes[8], sum = 0;
    int j;
    _mm512_storeu_si512((void *)lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
    for (j = 0; j < 8; j++) sum += lanes[j]; /* unsigned: the reduce intrinsic adds as signed, which may overflow */
    return sum;
}

void cism__kernels_fill_avx512(cism__kernels *k) {
    k->matmul[CISM_DTYPE_F32] = matmul_f32;
    k->matmul[CISM_DTYPE_BF16] = matmul_bf16;
    k->row_to_f32[CISM_DTYPE_F16] = row_f16;
    k->row_to_f32[CISM_DTYPE_BF16] = row_bf16;
    k->attention_split = attention_split;
    k->rmsnorm = rmsnorm;
    k->silu_mul = silu_mul;
    k->rope = rope;
    k->f32_to_f16 = f32_to_f16;
    k->read_sum = read_sum;
    cism__fill_avx512_quant(k);
}
