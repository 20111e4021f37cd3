/* kernels_avx2.c - the x86-64 AVX2 + FMA + F16C tier (built with -mavx2 -mfma
 * -mf16c; dispatch.c fills it in only when the CPU and OS report all three).
 *
 * Dot products use one 8-lane accumulator per output element: lane j sums
 * columns j, j+8, ... in column order with FMA, the last cols % 8 columns are
 * zero-padded, and the lanes are added in the scalar tier's tree. Every path
 * (decode row tiles, prefill register tiles, remainders) runs that same
 * sequence for each element, so results do not depend on tiling or threads,
 * and differ from the scalar tier only by FMA's single rounding. */
#include "tier_common.h"
#include "dtype.h"

#include <immintrin.h>
#include "kv_x86.h"  /* decoding of q8 / q4a cache rows */
#include <math.h>
#include <string.h>

#ifndef MR
#define MR 4   /* rows per prefill register tile */
#endif
#ifndef NR
#define NR 3   /* tokens per prefill register tile: MR*NR accumulators + NR x vectors + 1 */
#endif

/* ---- loads and reductions ------------------------------------------------------ */
CISM__INLINE __m256i lanes_below(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 8 elements of a row of dtype dt from element c, as f32 */
CISM__INLINE __m256 load8(const void *row, int64_t c, int dt) {
    __m128i h;
    if (dt == CISM_DTYPE_F32) return _mm256_loadu_ps((const float *)row + c);
    h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + c));
    if (dt == CISM_DTYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* the n < 8 elements from c, zero-filled (nothing past them is touched) */
CISM__INLINE __m256 load8_part(const void *row, int64_t c, int64_t n, int dt) {
    uint16_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (dt == CISM_DTYPE_F32) return _mm256_maskload_ps((const float *)row + c, lanes_below(n));
    memcpy(buf, (const uint16_t *)row + c, (size_t)n * 2);
    return load8(buf, 0, dt);
}

/* ((a0+a4)+(a1+a5)) + ((a2+a6)+(a3+a7)): the scalar tier's order */
CISM__INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 p = _mm_add_ps(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehl_ps(p, p)));
}

CISM__INLINE float hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Sums of 8 vectors at once: lane j = sum of a[j]'s lanes as
   ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)). */
CISM__INLINE __m256 hsum8x8(const __m256 a[8]) {
    __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* e^x, see tier_common.h for range and accuracy */
CISM__INLINE __m256 exp8(__m256 x) {
    __m256 n, r, r2, y;
    __m256i e;
    x = _mm256_min_ps(_mm256_set1_ps(CISM__EXP_HI), x);   /* NaN in x is kept: min/max return */
    x = _mm256_max_ps(_mm256_set1_ps(CISM__EXP_LO), x);   /* their second operand then        */
    n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(CISM__LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(CISM__LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(CISM__LN2_LO), r);
    r2 = _mm256_mul_ps(r, r);
    y = _mm256_fmadd_ps(_mm256_set1_ps(CISM__EXP_P0), r, _mm256_set1_ps(CISM__EXP_P1));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(CISM__EXP_P2));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(CISM__EXP_P3));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(CISM__EXP_P4));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(CISM__EXP_P5));
    y = _mm256_add_ps(_mm256_fmadd_ps(y, r2, r), _mm256_set1_ps(1.0f));
    e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* ---- matmul ---------------------------------------------------------------------- */
typedef __m256 fvec;
enum { FW = 8 };
CISM__INLINE fvec fv_zero(void) { return _mm256_setzero_ps(); }
CISM__INLINE fvec fv_loadu(const float *p) { return _mm256_loadu_ps(p); }
CISM__INLINE fvec fv_load(const void *row, int64_t c, int dt) { return load8(row, c, dt); }
CISM__INLINE fvec fv_load_part(const void *row, int64_t c, int64_t n, int dt) { return load8_part(row, c, n, dt); }
CISM__INLINE fvec fv_fma(fvec w, fvec x, fvec acc) { return _mm256_fmadd_ps(w, x, acc); }
CISM__INLINE float fv_hsum(fvec v) { return hsum8(v); }
#include "x86_float_tiles.h"

/* ---- conversions ----------------------------------------------------------------- */
static void row_f32(const void *row, float *out, int64_t n) { memcpy(out, row, (size_t)n * sizeof(float)); }

static void row_f16(const void *row, float *out, int64_t n) {
    const uint16_t *r = (const uint16_t *)row;
    int64_t i;
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load8(r, i, CISM_DTYPE_F16));
    for (; i < n; i++) out[i] = cism__f16_to_f32(r[i]);
}

static void row_bf16(const void *row, float *out, int64_t n) {
    const uint16_t *r = (const uint16_t *)row;
    int64_t i;
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load8(r, i, CISM_DTYPE_BF16));
    for (; i < n; i++) out[i] = cism__bf16_to_f32(r[i]);
}

static void f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
    int64_t i;
    for (i = 0; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = cism__f32_to_f16(src[i]);
}

/* ---- attention ------------------------------------------------------------------- */
/* the split kernel: x86_attention.h on 8 lanes */
CISM__INLINE fvec fv_set1(float x) { return _mm256_set1_ps(x); }
CISM__INLINE fvec fv_add(fvec a, fvec b) { return _mm256_add_ps(a, b); }
CISM__INLINE fvec fv_sub(fvec a, fvec b) { return _mm256_sub_ps(a, b); }
CISM__INLINE fvec fv_max(fvec a, fvec b) { return _mm256_max_ps(a, b); }
CISM__INLINE fvec fv_exp(fvec v) { return exp8(v); }
CISM__INLINE float fv_hmax(fvec v) { return hmax8(v); }
CISM__INLINE fvec fv_mul(fvec a, fvec b) { return _mm256_mul_ps(a, b); }
CISM__INLINE fvec fv_hsum_rows(const fvec a[8]) { return hsum8x8(a); }
CISM__INLINE void fv_storeu(float *p, fvec v) { _mm256_storeu_ps(p, v); }
CISM__INLINE fvec fv_load_tail(const float *p, int64_t n, float fill) {
    __m256i keep = lanes_below(n);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, keep), _mm256_castsi256_ps(keep));
}
CISM__INLINE void fv_store_tail(float *p, int64_t n, fvec v) { _mm256_maskstore_ps(p, lanes_below(n), v); }
CISM__INLINE fvec fv_keep(fvec v, int64_t n) { return _mm256_and_ps(v, _mm256_castsi256_ps(lanes_below(n))); }
#define SCORE_ROWS 8 /* scores per tile: fv_hsum_rows */
#define PV_ACCS 8 /* accumulators of a multi-head PV tile (x86_attention.h) */
#include "x86_attention.h"

/* ---- elementwise ----------------------------------------------------------------- */
/* The sum of squares is accumulated in double like the scalar tier (each x*x is
   exact in double), so the scale usually comes out bit-identical. */
static void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    __m256 s;
    double ss, tail = 0.0;
    float scale;
    int64_t i;
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        a0 = _mm256_fmadd_pd(lo, lo, a0);
        a1 = _mm256_fmadd_pd(hi, hi, a1);
    }
    for (; i < n; i++) tail += (double)x[i] * (double)x[i];
    {
        __m256d a = _mm256_add_pd(a0, a1);
        __m128d h = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
        ss = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h))) + tail;
    }
    scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    s = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_mul_ps(_mm256_loadu_ps(x + i), s)));
    for (; i < n; i++) out[i] = w[i] * (x[i] * scale);
}

static void silu_mul(float *gate, const float *up, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i;
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 d = _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g)));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, d), _mm256_loadu_ps(up + i)));
    }
    if (i < n) {
        __m256i keep = lanes_below(n - i);
        __m256 g = _mm256_maskload_ps(gate + i, keep);
        __m256 d = _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g)));
        _mm256_maskstore_ps(gate + i, keep, _mm256_mul_ps(_mm256_div_ps(g, d), _mm256_maskload_ps(up + i, keep)));
    }
}

/* Same products and sums as the scalar tier (no FMA): bit-identical. */
static void rope(float *x, int64_t n_heads, int64_t head_dim, const float *cos_t, const float *sin_t) {
    int64_t h, i, half = head_dim / 2;
    for (h = 0; h < n_heads; h++) {
        float *v = x + h * head_dim;
        for (i = 0; i + 8 <= half; i += 8) {
            __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + half + i);
            __m256 c = _mm256_loadu_ps(cos_t + i), s = _mm256_loadu_ps(sin_t + i);
            _mm256_storeu_ps(v + i, _mm256_sub_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(b, s)));
            _mm256_storeu_ps(v + half + i, _mm256_add_ps(_mm256_mul_ps(b, c), _mm256_mul_ps(a, s)));
        }
        for (; i < half; i++) {
            float a = v[i], b = v[i + half];
            v[i] = a * cos_t[i] - b * sin_t[i];
            v[i + half] = b * cos_t[i] + a * sin_t[i];
        }
    }
}

/* The read probe's loop: four 256-bit sums */
static uint64_t read_sum(const uint64_t *p, int64_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    uint64_t lanes[4];
    int64_t i;
    for (i = 0; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(const void *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(const void *)(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(const void *)(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(const void *)(p + i + 12)));
    }
    _mm256_storeu_si256((__m256i *)(void *)lanes, _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

void cism__kernels_fill_avx2(cism__kernels *k) {
    k->matmul[CISM_DTYPE_F32] = matmul_f32;
    k->matmul[CISM_DTYPE_F16] = matmul_f16;
    k->matmul[CISM_DTYPE_BF16] = matmul_bf16;
    k->row_to_f32[CISM_DTYPE_F32] = row_f32;
    k->row_to_f32[CISM_DTYPE_F16] = row_f16;
    k->row_to_f32[CISM_DTYPE_BF16] = row_bf16;
    k->attention_split = attention_split;
    k->rmsnorm = rmsnorm;
    k->silu_mul = silu_mul;
    k->rope = rope;
    k->f32_to_f16 = f32_to_f16;
    k->read_sum = read_sum;
    cism__fill_avx2_quant(k);
}
