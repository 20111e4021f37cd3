/* x86_attention.h - the per-tier pieces of the split attention kernel
 * (attention_split.h) for the x86 tiers, one body for kernels_avx2.c (8 lanes)
 * and kernels_avx512.c (16 lanes). The tier includes it after its vector fvec
 * of FW floats and, besides x86_float_tiles.h's fv_zero, fv_loadu, fv_load,
 * fv_load_part, fv_fma and fv_hsum:
 *   fv_set1(x), fv_add, fv_sub, fv_max    lanewise
 *   fv_exp(v)                             e^v (tier_common.h's polynomial)
 *   fv_hmax(v)                            the largest lane
 *   fv_hsum8(a)                           __m256 whose lane j is fv_hsum(a[j]), j < 8
 *   fv_storeu(p, v)                       FW floats
 *   fv_load_tail(p, n, fill)              the n < FW floats at p, the other lanes fill
 *                                         (nothing past them is read)
 *   fv_store_tail(p, n, v)                the first n < FW lanes (nothing else written)
 *   fv_keep(v, n)                         the first n < FW lanes, zeros above
 * Each score is one accumulator over the row (lane j sums columns j, j + FW,
 * ... with FMA), each output column one FMA chain over the rows in order:
 * the sequences do not depend on the block or the tile. */
#ifndef CISM_X86_ATTENTION_H
#define CISM_X86_ATTENTION_H

/* Keys and values are processed in blocks of rows; an f16 block is widened
   once into this many floats on the stack, then shared by every query. */
#define KV_BLOCK_FLOATS 8192

static void kv_prefetch(const void *p, uint64_t bytes) {
    uint64_t i;
    for (i = 0; i < bytes; i += 64) _mm_prefetch((const char *)p + i, _MM_HINT_T1);
}

/* scores[t] = (q . k_t) * scale for the nk <= 8 f32 rows t0.. of k */
CISM__INLINE void scores8(const float *q, const float *k, int64_t t0, const int nk, int64_t hd, float scale, float *dst) {
    fvec acc[8];
    const float *kb = k + t0 * hd;
    __m256 s;
    int64_t c;
    int j;
    for (j = 0; j < 8; j++) acc[j] = fv_zero();
    for (c = 0; c + FW <= hd; c += FW) {
        fvec qv = fv_loadu(q + c);
        for (j = 0; j < nk; j++) acc[j] = fv_fma(fv_loadu(kb + j * hd + c), qv, acc[j]);
    }
    if (c < hd) {
        fvec qv = fv_load_part(q, c, hd - c, CISM_DTYPE_F32);
        for (j = 0; j < nk; j++) acc[j] = fv_fma(fv_load_part(kb + j * hd, c, hd - c, CISM_DTYPE_F32), qv, acc[j]);
    }
    s = _mm256_mul_ps(fv_hsum8(acc), _mm256_set1_ps(scale));
    if (nk == 8) _mm256_storeu_ps(dst, s);
    else _mm256_maskstore_ps(dst, _mm256_cmpgt_epi32(_mm256_set1_epi32(nk), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), s);
}

static void att_scores(const float *q, const float *k, int64_t n, int64_t hd, float scale, float *dst) {
    int64_t t;
    for (t = 0; t + 8 <= n; t += 8) scores8(q, k, t, 8, hd, scale, dst + t);
    if (t < n) scores8(q, k, t, (int)(n - t), hd, scale, dst + t);
}

/* s[0..n) -> exp(s - max), in place; the sum (n >= 1) */
static float att_exp_sum(float *s, int64_t n, float *mx) {
    fvec vmax = fv_set1(-INFINITY), sum = fv_zero(), m;
    int64_t t;
    for (t = 0; t + FW <= n; t += FW) vmax = fv_max(vmax, fv_loadu(s + t));
    if (t < n) vmax = fv_max(vmax, fv_load_tail(s + t, n - t, -INFINITY));
    *mx = fv_hmax(vmax);
    m = fv_set1(*mx);
    for (t = 0; t + FW <= n; t += FW) {
        fvec e = fv_exp(fv_sub(fv_loadu(s + t), m));
        fv_storeu(s + t, e);
        sum = fv_add(sum, e);
    }
    if (t < n) {
        fvec e = fv_keep(fv_exp(fv_sub(fv_load_tail(s + t, n - t, 0.0f), m)), n - t);
        fv_store_tail(s + t, n - t, e);
        sum = fv_add(sum, e);
    }
    return fv_hsum(sum);
}

/* out[c0 .. c0 + FW*NV) += sum_{t < n} p[t] * v_t (f32 rows; the last vector
   has n_last <= FW lanes); the accumulators live in out between blocks, which
   changes no rounding */
CISM__INLINE void pv_block(const float *p, const float *v, int64_t n, int64_t hd, int64_t c0, float *out, const int NV,
                           int64_t n_last) {
    fvec o[8];
    const float *ol = out + c0 + FW * (NV - 1);
    int64_t t;
    int j;
    for (j = 0; j + 1 < NV; j++) o[j] = fv_loadu(out + c0 + FW * j);
    o[NV - 1] = n_last == FW ? fv_loadu(ol) : fv_load_tail(ol, n_last, 0.0f);
    for (t = 0; t < n; t++) {
        fvec pt = fv_set1(p[t]);
        const float *row = v + t * hd + c0;
        for (j = 0; j + 1 < NV; j++) o[j] = fv_fma(pt, fv_loadu(row + FW * j), o[j]);
        o[NV - 1] = fv_fma(pt, n_last == FW ? fv_loadu(row + FW * (NV - 1)) : fv_load_tail(row + FW * (NV - 1), n_last, 0.0f),
                           o[NV - 1]);
    }
    for (j = 0; j + 1 < NV; j++) fv_storeu(out + c0 + FW * j, o[j]);
    if (n_last == FW) fv_storeu(out + c0 + FW * (NV - 1), o[NV - 1]);
    else fv_store_tail(out + c0 + FW * (NV - 1), n_last, o[NV - 1]);
}

static void pv_rows(const float *p, const float *v, int64_t n, int64_t hd, float *out) {
    int64_t c;
    for (c = 0; c + 8 * FW <= hd; c += 8 * FW) pv_block(p, v, n, hd, c, out, 8, FW);
    if (c < hd) {
        int64_t rest = hd - c, nv = (rest + FW - 1) / FW, last = rest - FW * (nv - 1);
        switch (nv) {
        case 1: pv_block(p, v, n, hd, c, out, 1, last); break;
        case 2: pv_block(p, v, n, hd, c, out, 2, last); break;
        case 3: pv_block(p, v, n, hd, c, out, 3, last); break;
        case 4: pv_block(p, v, n, hd, c, out, 4, last); break;
        case 5: pv_block(p, v, n, hd, c, out, 5, last); break;
        case 6: pv_block(p, v, n, hd, c, out, 6, last); break;
        case 7: pv_block(p, v, n, hd, c, out, 7, last); break;
        default: break;
        }
    }
}

/* rows [b0, b0 + n) of a cache as f32 rows: f32 in place, f16 widened into buf,
   q8 / q4a decoded into buf (kv_x86.h) */
static const float *widen_rows(const void *kv, int32_t dt, int64_t b0, int64_t n, int64_t hd, float *buf) {
    const uint16_t *src = (const uint16_t *)kv + b0 * hd;
    int64_t i, m = n * hd;
    if (cism__kv_is_quant(dt)) return cism__kv_widen_rows_x86(kv, dt, b0, n, hd, buf);
    if (dt == CISM_DTYPE_F32) return (const float *)kv + b0 * hd;
    for (i = 0; i + FW <= m; i += FW) fv_storeu(buf + i, fv_load(src, i, CISM_DTYPE_F16));
    if (i < m) fv_store_tail(buf + i, m - i, fv_load_part(src, i, m - i, CISM_DTYPE_F16));
    return buf;
}

#include "attention_split.h"

#endif
