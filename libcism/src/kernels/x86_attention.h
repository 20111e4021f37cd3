/* x86_attention.h - the per-tier pieces of the split attention kernel
 * (attention_split.h) for the x86 tiers, one body for kernels_avx2.c (8 lanes)
 * and kernels_avx512.c (16 lanes). The tier includes it after its vector fvec
 * of FW floats and, besides x86_float_tiles.h's fv_zero, fv_loadu, fv_load,
 * fv_load_part, fv_fma and fv_hsum:
 *   fv_set1(x), fv_add, fv_sub, fv_max    lanewise
 *   fv_exp(v)                             e^v (tier_common.h's polynomial)
 *   fv_hmax(v)                            the largest lane
 *   fv_mul(a, b)                          lanewise
 *   fv_hsum_rows(a)                       lane j = the sum of the lanes of a[j], j < SCORE_ROWS
 *                                         (FW), in one fixed order for every lane
 *   fv_storeu(p, v)                       FW floats
 *   fv_load_tail(p, n, fill)              the n < FW floats at p, the other lanes fill
 *                                         (nothing past them is read)
 *   fv_store_tail(p, n, v)                the first n < FW lanes (nothing else written)
 *   fv_keep(v, n)                         the first n < FW lanes, zeros above
 *   SCORE_ROWS                            FW: the keys a score tile takes
 *   PV_ACCS                               vector accumulators a PV tile may keep
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

/* scores[t] = (q . k_t) * scale for the nk <= SCORE_ROWS f32 rows t0.. of k
   (HD: hd as a constant, so the rows' addresses are one base plus offsets, or 0) */
CISM__INLINE void score_tile(const float *q, const float *k, int64_t t0, const int nk, int64_t hd_arg, float scale,
                             float *dst, const int HD) {
    const int64_t hd = HD ? HD : hd_arg;
    fvec acc[SCORE_ROWS], s;
    const float *kb = k + t0 * hd;
    int64_t c;
    int j;
    for (j = 0; j < SCORE_ROWS; j++) acc[j] = fv_zero();
    for (c = 0; c + FW <= hd; c += FW) {
        fvec qv = fv_loadu(q + c);
        for (j = 0; j < nk; j++) acc[j] = fv_fma(fv_loadu(kb + j * hd + c), qv, acc[j]);
    }
    if (c < hd) {
        fvec qv = fv_load_part(q, c, hd - c, CISM_DTYPE_F32);
        for (j = 0; j < nk; j++) acc[j] = fv_fma(fv_load_part(kb + j * hd, c, hd - c, CISM_DTYPE_F32), qv, acc[j]);
    }
    s = fv_mul(fv_hsum_rows(acc), fv_set1(scale));
    if (nk == SCORE_ROWS) fv_storeu(dst, s);
    else fv_store_tail(dst, nk, s);
}

static void att_scores(const float *q, const float *k, int64_t n, int64_t hd, float scale, float *dst) {
    int64_t t;
    if (hd == 64)
        for (t = 0; t + SCORE_ROWS <= n; t += SCORE_ROWS) score_tile(q, k, t, SCORE_ROWS, hd, scale, dst + t, 64);
    else if (hd == 128)
        for (t = 0; t + SCORE_ROWS <= n; t += SCORE_ROWS) score_tile(q, k, t, SCORE_ROWS, hd, scale, dst + t, 128);
    else
        for (t = 0; t + SCORE_ROWS <= n; t += SCORE_ROWS) score_tile(q, k, t, SCORE_ROWS, hd, scale, dst + t, 0);
    if (t < n) score_tile(q, k, t, (int)(n - t), hd, scale, dst + t, 0);
}

#ifdef FV_HSUM_HALVES
#define ATT_SCORES_PAIR 1
/* score_tile (hd 64, a full tile) of two queries at once: each K vector loaded
   once for both. Per query the same FMA chains (lane j: columns j, j + FW, ...
   in order) and the same reduction, fv_hsum_rows taken as its two halves (the
   tier's fv_hsum_half / fv_hsum_join), so the bits are score_tile's. */
CISM__INLINE void score_tile2(const float *q0, const float *q1, const float *k, int64_t t0, float scale, float *d0, float *d1) {
    fvec qa[4], qb[4], acc[16], lo[2];
    int h, j, c;
    lo[0] = lo[1] = fv_zero(); /* set at h = 0; this only tells the compiler so */
    for (c = 0; c < 4; c++) {
        qa[c] = fv_loadu(q0 + FW * c);
        qb[c] = fv_loadu(q1 + FW * c);
    }
    for (h = 0; h < 2; h++) { /* keys 0-7, then 8-15: acc[j] query 0's, acc[8 + j] query 1's */
        const float *kb = k + (t0 + 8 * h) * 64;
        for (j = 0; j < 16; j++) acc[j] = fv_zero();
        for (c = 0; c < 4; c++)
            for (j = 0; j < 8; j++) {
                fvec kv = fv_loadu(kb + j * 64 + FW * c);
                acc[j] = fv_fma(kv, qa[c], acc[j]);
                acc[8 + j] = fv_fma(kv, qb[c], acc[8 + j]);
            }
        if (h == 0) {
            lo[0] = fv_hsum_half(acc);
            lo[1] = fv_hsum_half(acc + 8);
        } else {
            fv_storeu(d0 + t0, fv_mul(fv_hsum_join(lo[0], fv_hsum_half(acc)), fv_set1(scale)));
            fv_storeu(d1 + t0, fv_mul(fv_hsum_join(lo[1], fv_hsum_half(acc + 8)), fv_set1(scale)));
        }
    }
}

/* att_scores of two queries against the same n rows (dst0, dst1) */
static void att_scores2(const float *q0, const float *q1, const float *k, int64_t n, int64_t hd, float scale, float *dst0,
                        float *dst1) {
    int64_t t = 0;
    if (hd == 64) /* FV_HSUM_HALVES: the 16-lane tier only */
        for (; t + SCORE_ROWS <= n; t += SCORE_ROWS) score_tile2(q0, q1, k, t, scale, dst0, dst1);
    if (t < n) {
        att_scores(q0, k + t * hd, n - t, hd, scale, dst0 + t);
        att_scores(q1, k + t * hd, n - t, hd, scale, dst1 + t);
    }
}
#endif

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

/* pv_rows for nh heads whose weights are p + h * ldp and outputs out + h * ldo:
   when a head's row is one to four full vectors, PV_HEADS heads at a time share
   each V load, and their independent accumulators hide the FMA latency that a
   single head's few chains cannot (hd 64 on AVX-512: four chains, half the FMA
   rate, measured 2x slower). Each output column is still one FMA chain over
   the rows in order, so the bits are pv_rows's. */
CISM__INLINE void pv_heads(const float *p, int64_t ldp, const float *v, int64_t n, float *out, int64_t ldo, const int NV,
                           const int NH) {
    fvec o[16];
    int64_t t;
    int h, j;
    for (h = 0; h < NH; h++)
        for (j = 0; j < NV; j++) o[h * NV + j] = fv_loadu(out + h * ldo + FW * j);
    for (t = 0; t < n; t++) {
        fvec r[4];
        const float *row = v + t * (int64_t)(FW * NV);
        for (j = 0; j < NV; j++) {
            r[j] = fv_loadu(row + FW * j);
            IN_REG(r[j]); /* one load per V vector, not one per head's FMA (x86_float_tiles.h) */
        }
        for (h = 0; h < NH; h++) {
            fvec pt = fv_set1(p[h * ldp + t]);
            for (j = 0; j < NV; j++) o[h * NV + j] = fv_fma(pt, r[j], o[h * NV + j]);
        }
    }
    for (h = 0; h < NH; h++)
        for (j = 0; j < NV; j++) fv_storeu(out + h * ldo + FW * j, o[h * NV + j]);
}

#define PV_HEADS(NV) (PV_ACCS / (NV) > 4 ? 4 : PV_ACCS / (NV))

static void pv_rows_heads(const float *p, int64_t ldp, const float *v, int64_t n, int64_t hd, float *out, int64_t ldo,
                          int64_t nh) {
    int64_t h = 0;
    int nv = (int)(hd / FW), g;
    if (hd % FW == 0 && (nv == 1 || nv == 2 || nv == 4))
        for (; h < nh; h += g) {
            g = nh - h < PV_HEADS(nv) ? (int)(nh - h) : PV_HEADS(nv);
#define PV_CASE(NV, NH)                                                                                                \
    if (nv == NV && g == NH) {                                                                                         \
        pv_heads(p + h * ldp, ldp, v, n, out + h * ldo, ldo, NV, NH);                                                  \
        continue;                                                                                                      \
    }
            PV_CASE(4, 1) PV_CASE(4, 2) PV_CASE(4, 3) PV_CASE(4, 4)
            PV_CASE(2, 1) PV_CASE(2, 2) PV_CASE(2, 3) PV_CASE(2, 4)
            PV_CASE(1, 1) PV_CASE(1, 2) PV_CASE(1, 3) PV_CASE(1, 4)
#undef PV_CASE
        }
    for (; h < nh; h++) pv_rows(p + h * ldp, v, n, hd, out + h * ldo);
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
