/* kernels_neon.c - the ARM64 Advanced SIMD tier (baseline ARMv8-A: every
 * ARM64 CPU has it; f16 <-> f32 conversion is part of it).
 *
 * Dot products keep 8 lanes per output element in two 4-lane registers (lane
 * j sums columns j, j+8, ... with FMA; tails zero-padded) and add them in the
 * scalar tier's tree, so they differ from the scalar tier only by FMA's single
 * rounding. Every path (decode row tiles, prefill register tiles, remainders)
 * runs that sequence for each element, so results do not depend on tiling or
 * threads. */
#include "tier_common.h"
#include "dtype.h"

#include <arm_neon.h>
/* kv_quant.h's decoder of q8 / q4a cache rows, with the hardware fp16 conversion of the block scales */
#define CISM__KV_HALF_TO_F32(h) vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0)
#include "kv_quant.h"
#include <math.h>
#include <string.h>

#define MR 4   /* rows per prefill register tile */
#define NR 2   /* tokens per prefill register tile: 2*MR*NR accumulators + 2*NR x registers + 2 */

typedef struct f8 { float32x4_t lo, hi; } f8;   /* 8 lanes */

/* 8 elements of a row of dtype dt from element c, as f32 */
CISM__INLINE f8 load8(const void *row, int64_t c, int dt) {
    f8 r;
    if (dt == CISM_DTYPE_F32) {
        r.lo = vld1q_f32((const float *)row + c);
        r.hi = vld1q_f32((const float *)row + c + 4);
    } else {
        uint16x8_t h = vld1q_u16((const uint16_t *)row + c);
        if (dt == CISM_DTYPE_F16) {
            r.lo = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h)));
            r.hi = vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h)));
        } else {
            r.lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
            r.hi = vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(h), 16));
        }
    }
    return r;
}

/* the n < 8 elements from c, zero-filled */
CISM__INLINE f8 load8_part(const void *row, int64_t c, int64_t n, int dt) {
    if (dt == CISM_DTYPE_F32) {
        float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        memcpy(buf, (const float *)row + c, (size_t)n * 4);
        return load8(buf, 0, dt);
    } else {
        uint16_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        memcpy(buf, (const uint16_t *)row + c, (size_t)n * 2);
        return load8(buf, 0, dt);
    }
}

CISM__INLINE f8 fma8(f8 acc, f8 a, f8 b) {
    acc.lo = vfmaq_f32(acc.lo, a.lo, b.lo);
    acc.hi = vfmaq_f32(acc.hi, a.hi, b.hi);
    return acc;
}

CISM__INLINE f8 zero8(void) {
    f8 z;
    z.lo = vdupq_n_f32(0.0f);
    z.hi = z.lo;
    return z;
}

/* ((a0+a4)+(a1+a5)) + ((a2+a6)+(a3+a7)): the scalar tier's order */
CISM__INLINE float hsum8(f8 v) {
    float32x4_t s = vaddq_f32(v.lo, v.hi);
    float32x4_t p = vpaddq_f32(s, s);   /* s0+s1, s2+s3, ... */
    return vgetq_lane_f32(p, 0) + vgetq_lane_f32(p, 1);
}

CISM__INLINE float32x4_t exp4(float32x4_t x) {
    float32x4_t n, r, r2, y;
    int32x4_t e;
    x = vminq_f32(x, vdupq_n_f32(CISM__EXP_HI));   /* FMIN/FMAX propagate NaN */
    x = vmaxq_f32(x, vdupq_n_f32(CISM__EXP_LO));
    n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(CISM__LOG2E)));
    r = vfmsq_f32(x, n, vdupq_n_f32(CISM__LN2_HI));
    r = vfmsq_f32(r, n, vdupq_n_f32(CISM__LN2_LO));
    r2 = vmulq_f32(r, r);
    y = vfmaq_f32(vdupq_n_f32(CISM__EXP_P1), vdupq_n_f32(CISM__EXP_P0), r);
    y = vfmaq_f32(vdupq_n_f32(CISM__EXP_P2), y, r);
    y = vfmaq_f32(vdupq_n_f32(CISM__EXP_P3), y, r);
    y = vfmaq_f32(vdupq_n_f32(CISM__EXP_P4), y, r);
    y = vfmaq_f32(vdupq_n_f32(CISM__EXP_P5), y, r);
    y = vaddq_f32(vfmaq_f32(r, y, r2), vdupq_n_f32(1.0f));
    e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(y, vreinterpretq_f32_s32(e));
}

/* ---- matmul ---------------------------------------------------------------------- */
CISM__INLINE void tile(const uint8_t *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y,
                       int64_t ldy, const int R, const int T, const int dt) {
    f8 acc[MR][NR], xv[NR];
    int64_t c;
    int r, t;
    for (r = 0; r < R; r++)
        for (t = 0; t < T; t++) acc[r][t] = zero8();
    for (c = 0; c + 8 <= cols; c += 8) {
        for (t = 0; t < T; t++) xv[t] = load8(x + t * ldx, c, CISM_DTYPE_F32);
        for (r = 0; r < R; r++) {
            f8 wv = load8(w + (uint64_t)r * rb, c, dt);
            for (t = 0; t < T; t++) acc[r][t] = fma8(acc[r][t], wv, xv[t]);
        }
    }
    if (c < cols) {
        for (t = 0; t < T; t++) xv[t] = load8_part(x + t * ldx, c, cols - c, CISM_DTYPE_F32);
        for (r = 0; r < R; r++) {
            f8 wv = load8_part(w + (uint64_t)r * rb, c, cols - c, dt);
            for (t = 0; t < T; t++) acc[r][t] = fma8(acc[r][t], wv, xv[t]);
        }
    }
    for (r = 0; r < R; r++)
        for (t = 0; t < T; t++) y[t * ldy + r] = hsum8(acc[r][t]);
}

CISM__INLINE void matmul_dt(const void *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y,
                            int64_t ldy, int64_t nt, int64_t r0, int64_t r1, const int dt) {
    const uint8_t *wb = (const uint8_t *)w;
    int64_t r, t, t0, tb;
    if (nt == 1) { /* decode: 4 rows (8 FMA chains) at a time */
        for (r = r0; r + 4 <= r1; r += 4) tile(wb + (uint64_t)r * rb, rb, cols, x, ldx, y + r, ldy, 4, 1, dt);
        for (; r < r1; r++) tile(wb + (uint64_t)r * rb, rb, cols, x, ldx, y + r, ldy, 1, 1, dt);
        return;
    }
    tb = CISM__X_BLOCK_BYTES / (cols * 4);
    tb -= tb % NR;
    if (tb < NR) tb = NR;
    for (t0 = 0; t0 < nt; t0 += tb) {
        int64_t t1 = nt - t0 < tb ? nt : t0 + tb;
        for (r = r0; r + MR <= r1; r += MR) {
            for (t = t0; t + NR <= t1; t += NR) tile(wb + (uint64_t)r * rb, rb, cols, x + t * ldx, ldx, y + t * ldy + r, ldy, MR, NR, dt);
            if (t < t1) tile(wb + (uint64_t)r * rb, rb, cols, x + t * ldx, ldx, y + t * ldy + r, ldy, MR, 1, dt);
        }
        for (; r < r1; r++) {
            for (t = t0; t + NR <= t1; t += NR) tile(wb + (uint64_t)r * rb, rb, cols, x + t * ldx, ldx, y + t * ldy + r, ldy, 1, NR, dt);
            if (t < t1) tile(wb + (uint64_t)r * rb, rb, cols, x + t * ldx, ldx, y + t * ldy + r, ldy, 1, 1, dt);
        }
    }
}

static void matmul_f32(const void *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y, int64_t ldy,
                       int64_t nt, int64_t r0, int64_t r1) {
    matmul_dt(w, rb, cols, x, ldx, y, ldy, nt, r0, r1, CISM_DTYPE_F32);
}
static void matmul_f16(const void *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y, int64_t ldy,
                       int64_t nt, int64_t r0, int64_t r1) {
    matmul_dt(w, rb, cols, x, ldx, y, ldy, nt, r0, r1, CISM_DTYPE_F16);
}
static void matmul_bf16(const void *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y, int64_t ldy,
                        int64_t nt, int64_t r0, int64_t r1) {
    matmul_dt(w, rb, cols, x, ldx, y, ldy, nt, r0, r1, CISM_DTYPE_BF16);
}

/* ---- conversions ----------------------------------------------------------------- */
static void row_f16(const void *row, float *out, int64_t n) {
    const uint16_t *r = (const uint16_t *)row;
    int64_t i;
    for (i = 0; i + 8 <= n; i += 8) {
        f8 v = load8(r, i, CISM_DTYPE_F16);
        vst1q_f32(out + i, v.lo);
        vst1q_f32(out + i + 4, v.hi);
    }
    for (; i < n; i++) out[i] = cism__f16_to_f32(r[i]);
}

static void row_bf16(const void *row, float *out, int64_t n) {
    const uint16_t *r = (const uint16_t *)row;
    int64_t i;
    for (i = 0; i + 8 <= n; i += 8) {
        f8 v = load8(r, i, CISM_DTYPE_BF16);
        vst1q_f32(out + i, v.lo);
        vst1q_f32(out + i + 4, v.hi);
    }
    for (; i < n; i++) out[i] = cism__bf16_to_f32(r[i]);
}

/* FCVTN rounds to nearest even under the default FPCR, like the scalar tier */
static void f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
    int64_t i;
    for (i = 0; i + 4 <= n; i += 4) vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
    for (; i < n; i++) dst[i] = cism__f32_to_f16(src[i]);
}

/* ---- attention ------------------------------------------------------------------- */
/* Keys and values are processed in blocks of rows; an f16 block is widened
   once into this many floats on the stack, then shared by every query. */
#define KV_BLOCK_FLOATS 8192

/* scores[t] = (q . k_t) * scale for the nk <= 4 f32 rows t0.. of k */
CISM__INLINE void scores4(const float *q, const float *k, int64_t t0, const int nk, int64_t hd, float scale, float *dst) {
    f8 acc[4];
    const float *kb = k + t0 * hd;
    int64_t c;
    int j;
    for (j = 0; j < nk; j++) acc[j] = zero8();
    for (c = 0; c + 8 <= hd; c += 8) {
        f8 qv = load8(q, c, CISM_DTYPE_F32);
        for (j = 0; j < nk; j++) acc[j] = fma8(acc[j], load8(kb + j * hd, c, CISM_DTYPE_F32), qv);
    }
    if (c < hd) {
        f8 qv = load8_part(q, c, hd - c, CISM_DTYPE_F32);
        for (j = 0; j < nk; j++) acc[j] = fma8(acc[j], load8_part(kb + j * hd, c, hd - c, CISM_DTYPE_F32), qv);
    }
    for (j = 0; j < nk; j++) dst[j] = hsum8(acc[j]) * scale;
}

/* out[c0 .. c0 + 4*NV) += sum_{t < n} p[t] * v_t (f32 rows); the accumulators
   live in out between blocks, which changes no rounding */
CISM__INLINE void pv_block(const float *p, const float *v, int64_t n, int64_t hd, int64_t c0, float *out, const int NV) {
    float32x4_t o[8];
    int64_t t;
    int j;
    for (j = 0; j < NV; j++) o[j] = vld1q_f32(out + c0 + 4 * j);
    for (t = 0; t < n; t++) {
        float32x4_t pt = vdupq_n_f32(p[t]);
        for (j = 0; j < NV; j++) o[j] = vfmaq_f32(o[j], pt, vld1q_f32(v + t * hd + c0 + 4 * j));
    }
    for (j = 0; j < NV; j++) vst1q_f32(out + c0 + 4 * j, o[j]);
}

static void pv_rows(const float *p, const float *v, int64_t n, int64_t hd, float *out) {
    int64_t c, t;
    for (c = 0; c + 32 <= hd; c += 32) pv_block(p, v, n, hd, c, out, 8);
    switch ((hd - c) / 4) {
    case 7: pv_block(p, v, n, hd, c, out, 7); break;
    case 6: pv_block(p, v, n, hd, c, out, 6); break;
    case 5: pv_block(p, v, n, hd, c, out, 5); break;
    case 4: pv_block(p, v, n, hd, c, out, 4); break;
    case 3: pv_block(p, v, n, hd, c, out, 3); break;
    case 2: pv_block(p, v, n, hd, c, out, 2); break;
    case 1: pv_block(p, v, n, hd, c, out, 1); break;
    default: break;
    }
    for (c += (hd - c) / 4 * 4; c < hd; c++) { /* head_dim % 4 == 2 */
        float o = out[c];
        for (t = 0; t < n; t++) o = fmaf(p[t], v[t * hd + c], o);
        out[c] = o;
    }
}

/* pv_rows for nh heads (attention_split.h): a head of 64 already keeps 16
   chains, so one head at a time */
static void pv_rows_heads(const float *p, int64_t ldp, const float *v, int64_t n, int64_t hd, float *out, int64_t ldo,
                          int64_t nh) {
    int64_t h;
    for (h = 0; h < nh; h++) pv_rows(p + h * ldp, v, n, hd, out + h * ldo);
}

/* rows [b0, b0 + n) of an f16 cache as f32 into buf */
static const float *widen_rows(const void *kv, int32_t dt, int64_t b0, int64_t n, int64_t hd, float *buf) {
    const uint16_t *src = (const uint16_t *)kv + b0 * hd;
    int64_t i;
    if (cism__kv_is_quant(dt)) return cism__kv_widen_rows(kv, dt, b0, n, hd, buf); /* q8, q4a: kv_quant.h */
    if (dt == CISM_DTYPE_F32) return (const float *)kv + b0 * hd;
    for (i = 0; i + 8 <= n * hd; i += 8) {
        f8 w = load8(src, i, CISM_DTYPE_F16);
        vst1q_f32(buf + i, w.lo);
        vst1q_f32(buf + i + 4, w.hi);
    }
    for (; i < n * hd; i++) buf[i] = cism__f16_to_f32(src[i]);
    return buf;
}

/* the split kernel (attention_split.h); prefetch into L2 (PRFM PLDL2KEEP) */
static void kv_prefetch(const void *p, uint64_t bytes) {
#if defined(__GNUC__) || defined(__clang__)
    uint64_t i;
    for (i = 0; i < bytes; i += 64) __builtin_prefetch((const char *)p + i, 0, 2);
#else
    (void)p;
    (void)bytes;
#endif
}
static void att_scores(const float *q, const float *k, int64_t n, int64_t hd, float scale, float *dst) {
    int64_t t;
    for (t = 0; t + 4 <= n; t += 4) scores4(q, k, t, 4, hd, scale, dst + t);
    if (t < n) scores4(q, k, t, (int)(n - t), hd, scale, dst + t);
}

/* s[0..n) -> exp(s - max), in place; the sum (n >= 1) */
static float att_exp_sum(float *s, int64_t n, float *mxo) {
    float32x4_t mx4 = vdupq_n_f32(-INFINITY), sum4 = vdupq_n_f32(0.0f), m;
    float mx;
    int64_t t, i;
    for (t = 0; t + 4 <= n; t += 4) mx4 = vmaxq_f32(mx4, vld1q_f32(s + t));
    mx = vmaxvq_f32(mx4);
    for (i = t; i < n; i++) mx = s[i] > mx ? s[i] : mx;
    m = vdupq_n_f32(mx);
    for (t = 0; t + 4 <= n; t += 4) {
        float32x4_t e = exp4(vsubq_f32(vld1q_f32(s + t), m));
        vst1q_f32(s + t, e);
        sum4 = vaddq_f32(sum4, e);
    }
    if (t < n) {
        float tmp[4] = {0, 0, 0, 0};
        for (i = 0; t + i < n; i++) tmp[i] = s[t + i] - mx;
        vst1q_f32(tmp, exp4(vld1q_f32(tmp)));
        for (i = 0; t + i < n; i++) s[t + i] = tmp[i];
        for (; i < 4; i++) tmp[i] = 0.0f;
        sum4 = vaddq_f32(sum4, vld1q_f32(tmp));
    }
    *mxo = mx;
    return vaddvq_f32(sum4);
}
#include "attention_split.h"

/* ---- elementwise ----------------------------------------------------------------- */
static void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    float64x2_t a0 = vdupq_n_f64(0.0), a1 = vdupq_n_f64(0.0);
    float32x4_t s;
    double ss, tail = 0.0;
    float scale;
    int64_t i;
    for (i = 0; i + 4 <= n; i += 4) {
        float32x4_t v = vld1q_f32(x + i);
        float64x2_t lo = vcvt_f64_f32(vget_low_f32(v)), hi = vcvt_high_f64_f32(v);
        a0 = vfmaq_f64(a0, lo, lo);
        a1 = vfmaq_f64(a1, hi, hi);
    }
    for (; i < n; i++) tail += (double)x[i] * (double)x[i];
    ss = vaddvq_f64(vaddq_f64(a0, a1)) + tail;
    scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    s = vdupq_n_f32(scale);
    for (i = 0; i + 4 <= n; i += 4) vst1q_f32(out + i, vmulq_f32(vld1q_f32(w + i), vmulq_f32(vld1q_f32(x + i), s)));
    for (; i < n; i++) out[i] = w[i] * (x[i] * scale);
}

static void silu_mul(float *gate, const float *up, int64_t n) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    int64_t i;
    for (i = 0; i + 4 <= n; i += 4) {
        float32x4_t g = vld1q_f32(gate + i);
        float32x4_t d = vaddq_f32(one, exp4(vnegq_f32(g)));
        vst1q_f32(gate + i, vmulq_f32(vdivq_f32(g, d), vld1q_f32(up + i)));
    }
    if (i < n) {
        float g4[4] = {0, 0, 0, 0}, u4[4] = {0, 0, 0, 0};
        int64_t j;
        float32x4_t g, d;
        for (j = 0; i + j < n; j++) { g4[j] = gate[i + j]; u4[j] = up[i + j]; }
        g = vld1q_f32(g4);
        d = vaddq_f32(one, exp4(vnegq_f32(g)));
        vst1q_f32(g4, vmulq_f32(vdivq_f32(g, d), vld1q_f32(u4)));
        for (j = 0; i + j < n; j++) gate[i + j] = g4[j];
    }
}

/* Same products and sums as the scalar tier (no FMA): bit-identical. */
static void rope(float *x, int64_t n_heads, int64_t head_dim, const float *cos_t, const float *sin_t) {
    int64_t h, i, half = head_dim / 2;
    for (h = 0; h < n_heads; h++) {
        float *v = x + h * head_dim;
        for (i = 0; i + 4 <= half; i += 4) {
            float32x4_t a = vld1q_f32(v + i), b = vld1q_f32(v + half + i);
            float32x4_t c = vld1q_f32(cos_t + i), s = vld1q_f32(sin_t + i);
            vst1q_f32(v + i, vsubq_f32(vmulq_f32(a, c), vmulq_f32(b, s)));
            vst1q_f32(v + half + i, vaddq_f32(vmulq_f32(b, c), vmulq_f32(a, s)));
        }
        for (; i < half; i++) {
            float a = v[i], b = v[i + half];
            v[i] = a * cos_t[i] - b * sin_t[i];
            v[i + half] = b * cos_t[i] + a * sin_t[i];
        }
    }
}

/* The read probe's loop: four 128-bit sums, 64 bytes per step */
static uint64_t read_sum(const uint64_t *p, int64_t n) {
    uint64x2_t a0 = vdupq_n_u64(0), a1 = a0, a2 = a0, a3 = a0;
    int64_t i;
    for (i = 0; i + 8 <= n; i += 8) {
        a0 = vaddq_u64(a0, vld1q_u64(p + i));
        a1 = vaddq_u64(a1, vld1q_u64(p + i + 2));
        a2 = vaddq_u64(a2, vld1q_u64(p + i + 4));
        a3 = vaddq_u64(a3, vld1q_u64(p + i + 6));
    }
    a0 = vaddq_u64(vaddq_u64(a0, a1), vaddq_u64(a2, a3));
    return vgetq_lane_u64(a0, 0) + vgetq_lane_u64(a0, 1);
}

void cism__kernels_fill_neon(cism__kernels *k) {
    k->matmul[CISM_DTYPE_F32] = matmul_f32;
    k->matmul[CISM_DTYPE_F16] = matmul_f16;
    k->matmul[CISM_DTYPE_BF16] = matmul_bf16;
    k->row_to_f32[CISM_DTYPE_F16] = row_f16;
    k->row_to_f32[CISM_DTYPE_BF16] = row_bf16;
    k->attention_split = attention_split;
    k->rmsnorm = rmsnorm;
    k->silu_mul = silu_mul;
    k->rope = rope;
    k->f32_to_f16 = f32_to_f16;
    k->read_sum = read_sum;
    cism__kernels_fill_neon_quant(k);
}
