/* neon_quant.h - the packed weight formats on the ARM64 tiers: decoding a
 * row's blocks into int8 lanes, the weight and activation scales, and the
 * int8-activation matmul loops. Included by kernels_neon_quant.c (baseline
 * ARMv8-A), kernels_neon_dotprod.c and kernels_neon_i8mm.c, each compiled
 * with its own flags; the integer dot product a loop uses is a constant
 * argument (NQ_SMULL: widening multiplies, every ARM64 CPU; NQ_SDOT: ARMv8.2
 * dotprod), and code a TU's flags cannot compile is preprocessed out.
 *
 * Numerics of the int8-activation path (docs/KERNELS.md): every output is
 *     acc = 0;  for each weight block b in column order:
 *         acc = acc + (float)s_b * (dw_b * da_b)      (three roundings, no FMA)
 * where s_b is the exact int32 dot of the block's levels with its int8
 * activations. That is the scalar tier's sequence, so each ARM tier gives the
 * scalar tier's bits whatever instructions produced s_b and however rows and
 * tokens are tiled; only the cost differs. q4a (codes c, scale d, minimum m)
 * adds its minimum through the activation block's sum, in the scalar order:
 *         acc = acc + (dw_b * (float)s_b + mw_b * (float)sum_b) * da_b
 * (q8's code -128, which GGUF Q8_0 files may hold, is exact on every path:
 * |w a| <= 128 * 127, two of them fit an int16 lane.) The loops work on activation
 * blocks (32 columns): one weight block of q8/q4/nl4, two of q4s/fp4.
 */
#ifndef CISM_NEON_QUANT_H
#define CISM_NEON_QUANT_H

#include "tier_common.h"
#include "quant.h"

#include <arm_neon.h>
#include <string.h>

enum { NQ_SMULL = 0, NQ_SDOT = 1 };

/* ---- format constants (dt is a compile-time constant in every caller) ---------- */
CISM__INLINE int nq_block(const int dt) { return dt == CISM_DTYPE_Q4S || dt == CISM_DTYPE_FP4 ? 16 : 32; }
CISM__INLINE int nq_bytes(const int dt) {
    if (cism__dtype_is_qint(dt)) return cism__qint_bytes(dt);
    return dt == CISM_DTYPE_Q8 ? CISM__Q8_BYTES : dt == CISM_DTYPE_Q4A ? CISM__Q4A_BYTES : nq_block(dt) == 32 ? 18 : 9;
}
/* where a block-32 4-bit format's code bytes start: after the scale (q4a: and the minimum) */
CISM__INLINE int nq_code_off(const int dt) { return dt == CISM_DTYPE_Q4A ? 4 : 2; }
CISM__INLINE int nq_f16_scale(const int dt) { return nq_block(dt) == 32; }
/* bytes of one row's weights over one activation block (32 columns) */
CISM__INLINE int nq_ab_bytes(const int dt) { return nq_bytes(dt) * (32 / nq_block(dt)); }

/* The 16 levels of a 4-bit format as a table for TBL (zeros for q8, q6, q5; q4a: its codes). */
static const int8_t nq_codes16[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
CISM__INLINE int8x16_t nq_levels(const int dt) {
    if (dt == CISM_DTYPE_Q4A) return vld1q_s8(nq_codes16);
    return dt == CISM_DTYPE_Q8 || cism__dtype_is_qint(dt) ? vdupq_n_s8(0) : vld1q_s8(cism__fmt4_of(dt)->levels);
}

/* q6 / q5 / q3 / q2 (quant.h): the codes (level + H) of columns 16h..16h+15 of a block,
   the nibbles as for q4 with the plane's high bits ORed in. q6: column i
   takes bits 2(i/8)..2(i/8)+1 of plane byte i%8 (the 8 bytes twice, shifted
   right by 4h and 4h + 2); q5: bit i of the uint32 (its byte i/8 moved to
   lane i by TBL, tested against bit i%8); q3: q6's plane for bits 0-1 and
   q5's bit for bit 2, no nibbles; q2: q6's plane alone. The one decoder of these formats on
   the ARM64 tiers (int8 and float activations). */
static const int8_t nq_q6_shift[2][16] = {{0, 0, 0, 0, 0, 0, 0, 0, -2, -2, -2, -2, -2, -2, -2, -2},
                                          {-4, -4, -4, -4, -4, -4, -4, -4, -6, -6, -6, -6, -6, -6, -6, -6}};
static const uint8_t nq_q5_sel[2][16] = {{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
                                         {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3}};
static const uint8_t nq_bit8[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
/* columns 16h..16h+15's 2 bits from the 8 plane bytes at p (q6's layout) */
CISM__INLINE uint8x16_t nq_plane2(const uint8_t *p, const int h) {
    const uint8x16_t pl = vcombine_u8(vld1_u8(p), vld1_u8(p));
    return vandq_u8(vshlq_u8(pl, vld1q_s8(nq_q6_shift[h])), vdupq_n_u8(3));
}
/* columns 16h..16h+15's bit from the uint32 at p (q5's layout): v where set, else 0 */
CISM__INLINE uint8x16_t nq_bits16(const uint8_t *p, const int h, const uint8_t v) {
    uint32_t b;
    uint8x16_t qh;
    memcpy(&b, p, 4);
    qh = vqtbl1q_u8(vreinterpretq_u8_u32(vdupq_n_u32(b)), vld1q_u8(nq_q5_sel[h]));
    return vandq_u8(vtstq_u8(qh, vld1q_u8(nq_bit8)), vdupq_n_u8(v));
}
CISM__INLINE uint8x16_t nq_qint_codes(const int dt, const uint8_t *p, const int h) {
    uint8x16_t c;
    if (dt == CISM_DTYPE_Q2) return nq_plane2(p + 2, h);
    if (dt == CISM_DTYPE_Q3) return vorrq_u8(nq_plane2(p + 6, h), nq_bits16(p + 2, h, 0x04));
    c = vld1q_u8(p + (dt == CISM_DTYPE_Q6 ? 2 : 6));
    c = h ? vshrq_n_u8(c, 4) : vandq_u8(c, vdupq_n_u8(15));
    if (dt == CISM_DTYPE_Q6) return vorrq_u8(c, vshlq_n_u8(nq_plane2(p + 18, h), 4));
    return vorrq_u8(c, nq_bits16(p + 2, h, 0x10));
}

/* ---- weights as int8 --------------------------------------------------------------- */
/* One row's levels over one activation block (32 columns). q8/q4/nl4: lo =
   columns 0..15, hi = 16..31. q4s/fp4 (weight blocks A = columns 0..15 and
   B = 16..31): lo = A's elements 0..7 then B's 0..7, hi = A's 8..15 then B's
   8..15, i.e. the low and the high nibbles of A's and B's code bytes loaded
   side by side; the activations are permuted to match (nq_actv), so one
   accumulator holds A's products in lanes 0-1 and B's in lanes 2-3. */
typedef struct nq_w {
    int8x16_t lo, hi;
    uint8x16_t raw;   /* q4s/fp4 with both blocks: the pair's first 16 bytes (scales at 0 and 9) */
} nq_w;

static const uint8_t nq_pair_scales[16] = {0, 16, 32, 48, 9, 25, 41, 57, 0, 0, 0, 0, 0, 0, 0, 0};

/* has_b = 0: the row ends after block A (an odd number of blocks of 16): B is
   not read (its lanes hold level(0) and meet zero activations). */
CISM__INLINE nq_w nq_decode(const int dt, const uint8_t *p, int8x16_t lut, const int has_b) {
    nq_w w;
    w.raw = vdupq_n_u8(0);
    if (dt == CISM_DTYPE_Q8) {
        w.lo = vld1q_s8((const int8_t *)p + 2);
        w.hi = vld1q_s8((const int8_t *)p + 18);
    } else if (cism__dtype_is_qint(dt)) { /* level = code - H */
        const uint8x16_t H = vdupq_n_u8((uint8_t)cism__qint_half(dt));
        w.lo = vreinterpretq_s8_u8(vsubq_u8(nq_qint_codes(dt, p, 0), H));
        w.hi = vreinterpretq_s8_u8(vsubq_u8(nq_qint_codes(dt, p, 1), H));
        (void)lut;
    } else if (dt == CISM_DTYPE_Q4A) { /* the codes are the levels */
        uint8x16_t c = vld1q_u8(p + 4);
        w.lo = vreinterpretq_s8_u8(vandq_u8(c, vdupq_n_u8(15)));
        w.hi = vreinterpretq_s8_u8(vshrq_n_u8(c, 4));
        (void)lut;
    } else {
        uint8x16_t c;
        if (nq_block(dt) == 32) {
            c = vld1q_u8(p + 2);
        } else if (has_b) {   /* A's codes at 1..8, B's at 10..17 */
            w.raw = vld1q_u8(p);
            c = vcombine_u8(vld1_u8(p + 1), vld1_u8(p + 10));
        } else {
            c = vcombine_u8(vld1_u8(p + 1), vdup_n_u8(0));
        }
        w.lo = vqtbl1q_s8(lut, vandq_u8(c, vdupq_n_u8(15)));
        w.hi = vqtbl1q_s8(lut, vshrq_n_u8(c, 4));
    }
    return w;
}

/* E4M3 bytes as floats times 2^-8, exactly cism__e4m3_table[b] * 2^-8
   (NaN codes included): the byte's bits moved into an f16 (exponent bias 15
   instead of 7 is the 2^-8; E4M3 subnormals land on f16 subnormals), then
   widened. */
CISM__INLINE void nq_e4m3x8(uint8x8_t b, float32x4_t *lo, float32x4_t *hi) {
    uint16x8_t h = vreinterpretq_u16_s16(vmovl_s8(vreinterpret_s8_u8(b)));
    uint16x8_t nan;
    h = vandq_u16(vshlq_n_u16(h, 7), vdupq_n_u16(0xBF80));
    nan = vceqq_u16(vandq_u16(h, vdupq_n_u16(0x3F80)), vdupq_n_u16(0x3F80));
    h = vorrq_u16(h, vandq_u16(nan, vdupq_n_u16(0x7E00)));
    *lo = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h)));
    *hi = vcvt_high_f32_f16(vreinterpretq_f16_u16(h));
}

/* The weight scales of R <= 4 rows (row r's activation block at p + r*rb,
   decoded into w[r]) in lanes 0..R-1: dA for the first weight block, dB for
   the second (q4s/fp4 only; with has_b = 0 it is not loaded; q4a: dB = the
   minimums). Lanes >= R are copies of row 0's or 0. */
CISM__INLINE void nq_scales(const int dt, const int R, const uint8_t *p, uint64_t rb, const nq_w *w, const int has_b,
                            float32x4_t *dA, float32x4_t *dB) {
    if (nq_f16_scale(dt)) {
        uint16x4_t h = vld1_dup_u16((const uint16_t *)(const void *)p);
        if (R > 1) h = vld1_lane_u16((const uint16_t *)(const void *)(p + rb), h, 1);
        if (R > 2) h = vld1_lane_u16((const uint16_t *)(const void *)(p + 2 * rb), h, 2);
        if (R > 3) h = vld1_lane_u16((const uint16_t *)(const void *)(p + 3 * rb), h, 3);
        *dA = vcvt_f32_f16(vreinterpret_f16_u16(h));
        *dB = *dA;
        if (dt == CISM_DTYPE_Q4A) {
            const uint8_t *q = p + 2;
            h = vld1_dup_u16((const uint16_t *)(const void *)q);
            if (R > 1) h = vld1_lane_u16((const uint16_t *)(const void *)(q + rb), h, 1);
            if (R > 2) h = vld1_lane_u16((const uint16_t *)(const void *)(q + 2 * rb), h, 2);
            if (R > 3) h = vld1_lane_u16((const uint16_t *)(const void *)(q + 3 * rb), h, 3);
            *dB = vcvt_f32_f16(vreinterpret_f16_u16(h));
        }
    } else if (has_b) {   /* both blocks' scale bytes of the R rows by one lookup */
        uint8x16x4_t t;
        t.val[0] = w[0].raw;
        t.val[1] = R > 1 ? w[1].raw : w[0].raw;
        t.val[2] = R > 2 ? w[2].raw : w[0].raw;
        t.val[3] = R > 3 ? w[3].raw : w[0].raw;
        nq_e4m3x8(vget_low_u8(vqtbl4q_u8(t, vld1q_u8(nq_pair_scales))), dA, dB);
    } else {
        uint8x8_t b = vld1_dup_u8(p);
        if (R > 1) b = vld1_lane_u8(p + rb, b, 1);
        if (R > 2) b = vld1_lane_u8(p + 2 * rb, b, 2);
        if (R > 3) b = vld1_lane_u8(p + 3 * rb, b, 3);
        nq_e4m3x8(b, dA, dB);
    }
}

/* ---- activations --------------------------------------------------------------------- */
CISM__INLINE const cism__act8 *nq_act(const uint8_t *xq, int64_t ldq, int64_t t, int64_t j) {
    return cism__act8_row(xq, ldq, t) + j;
}

/* [a.d[0] | b.d[0]] and [a.d[1] | b.d[1]] */
CISM__INLINE int8x16_t nq_lo64(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vtrn1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
CISM__INLINE int8x16_t nq_hi64(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vtrn2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* An activation block as two vectors in the order of nq_w's lo and hi. */
CISM__INLINE void nq_actv(const int dt, const cism__act8 *a, int8x16_t *lo, int8x16_t *hi) {
    int8x16_t a0 = vld1q_s8(a->q), a1 = vld1q_s8(a->q + 16);
    if (nq_block(dt) == 32) {
        *lo = a0;
        *hi = a1;
    } else {   /* columns 0..7 and 16..23; 8..15 and 24..31 */
        *lo = nq_lo64(a0, a1);
        *hi = nq_hi64(a0, a1);
    }
}

/* ---- integer dots ------------------------------------------------------------------------- */
/* int32 lanes of w . a over one activation block (w, a in nq_w's order): for
   q8/q4/nl4 the dot is the sum of the 4 lanes; for q4s/fp4, lanes 0+1 are
   block A's dot and lanes 2+3 block B's. */
CISM__INLINE int32x4_t nq_dot(const int dt, const int dot, nq_w w, int8x16_t alo, int8x16_t ahi) {
#if defined(__ARM_FEATURE_DOTPROD)
    if (dot == NQ_SDOT) return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w.lo, alo), w.hi, ahi);
#endif
    (void)dot;
    {   /* |w a| <= 127 * 127: two products fit an int16 lane */
        int16x8_t p = vmull_s8(vget_low_s8(w.lo), vget_low_s8(alo));
        int16x8_t q = vmull_high_s8(w.lo, alo);
        p = vmlal_s8(p, vget_low_s8(w.hi), vget_low_s8(ahi));
        q = vmlal_high_s8(q, w.hi, ahi);
        if (nq_block(dt) == 32) return vpadalq_s16(vpaddlq_s16(p), q);
        return vpaddq_s32(vpaddlq_s16(p), vpaddlq_s16(q));   /* p: block A, q: block B */
    }
}

/* lane r = the lane sum of s[r], r < R (lanes >= R: anything) */
CISM__INLINE int32x4_t nq_reduce(const int R, const int32x4_t *s) {
    int32x4_t a = vpaddq_s32(s[0], R > 1 ? s[1] : s[0]);
    int32x4_t b = R > 2 ? vpaddq_s32(s[2], R > 3 ? s[3] : s[2]) : a;
    return vpaddq_s32(a, b);
}

/* the same for q4s/fp4: lane r of *A = block A's dot of row r, of *B block B's */
CISM__INLINE void nq_reduce_ab(const int R, const int32x4_t *s, int32x4_t *A, int32x4_t *B) {
    int32x4_t a = vpaddq_s32(s[0], R > 1 ? s[1] : s[0]);   /* A0 B0 A1 B1 */
    int32x4_t b = R > 2 ? vpaddq_s32(s[2], R > 3 ? s[3] : s[2]) : a;
    *A = vuzp1q_s32(a, b);
    *B = vuzp2q_s32(a, b);
}

/* acc + (float)s * (dw * da): the scalar tier's three roundings */
CISM__INLINE float32x4_t nq_combine(float32x4_t acc, int32x4_t s, float32x4_t dw, float da) {
    return vaddq_f32(acc, vmulq_f32(vcvtq_f32_s32(s), vmulq_n_f32(dw, da)));
}
/* q4a: acc + (dw * (float)s + mw * sum) * da, the scalar tier's five roundings */
CISM__INLINE float32x4_t nq_combine_a(float32x4_t acc, int32x4_t s, float32x4_t dw, float32x4_t mw, float sum, float da) {
    return vaddq_f32(acc, vmulq_n_f32(vaddq_f32(vmulq_f32(dw, vcvtq_f32_s32(s)), vmulq_n_f32(mw, sum)), da));
}

/* ---- R rows x T tokens with row lanes (SMULL or SDOT) ---------------------------------------- */
/* Activation block j of R rows (wp: row 0's weights of that block) and T
   tokens; acc[t] holds token t's outputs, lane r = row r. */
CISM__INLINE void nq_step(const int dt, const int dot, const int R, const int T, const int has_b, const uint8_t *wp,
                          uint64_t rb, const uint8_t *xq, int64_t ldq, int64_t j, float32x4_t *acc, int8x16_t lut) {
    nq_w w[4];
    float32x4_t dA, dB;
    int32x4_t s[4], sA, sB;
    int r, t;
    for (r = 0; r < R; r++) w[r] = nq_decode(dt, wp + (uint64_t)r * rb, lut, has_b);
    nq_scales(dt, R, wp, rb, w, has_b, &dA, &dB);
    for (t = 0; t < T; t++) {
        const cism__act8 *a = nq_act(xq, ldq, t, j);
        int8x16_t alo, ahi;
        float da = a->d;
        nq_actv(dt, a, &alo, &ahi);
        for (r = 0; r < R; r++) s[r] = nq_dot(dt, dot, w[r], alo, ahi);
        if (dt == CISM_DTYPE_Q4A) {
            acc[t] = nq_combine_a(acc[t], nq_reduce(R, s), dA, dB, (float)a->sum, da);
        } else if (nq_block(dt) == 32) {
            acc[t] = nq_combine(acc[t], nq_reduce(R, s), dA, da);
        } else {
            nq_reduce_ab(R, s, &sA, &sB);
            acc[t] = nq_combine(acc[t], sA, dA, da);
            if (has_b) acc[t] = nq_combine(acc[t], sB, dB, da);
        }
    }
}

/* y[t*ldy + r] for R rows from w and T tokens from xq, over nab activation
   blocks; half_last: the rows' last activation block holds one block of 16. */
CISM__INLINE void nq_tile(const int dt, const int dot, const int R, const int T, const uint8_t *w, uint64_t rb,
                          int64_t nab, int half_last, const uint8_t *xq, int64_t ldq, float *y, int64_t ldy) {
    const int8x16_t lut = nq_levels(dt);
    float32x4_t acc[4];
    int64_t j, nfull = nab - (half_last ? 1 : 0);
    int r, t;
    for (t = 0; t < T; t++) acc[t] = vdupq_n_f32(0.0f);
    for (j = 0; j < nfull; j++) nq_step(dt, dot, R, T, 1, w + j * nq_ab_bytes(dt), rb, xq, ldq, j, acc, lut);
    if (half_last) nq_step(dt, dot, R, T, 0, w + j * nq_ab_bytes(dt), rb, xq, ldq, j, acc, lut);
    for (t = 0; t < T; t++) {
        float o[4];
        vst1q_f32(o, acc[t]);
        for (r = 0; r < R; r++) y[t * ldy + r] = o[r];
    }
}

#if defined(__ARM_FEATURE_DOTPROD)
/* ---- R rows x 4 tokens with token lanes (lane-indexed SDOT, prefill) ------------------------ */
/* The activation block j of 4 tokens transposed into 4-byte groups: lane i
   of x[k] = token i's columns 4k..4k+3 (a 4x4 transpose of 32-bit lanes per
   16 columns); *da = the 4 tokens' scales. */
CISM__INLINE void nq_act4x(const uint8_t *xq, int64_t ldq, int64_t j, int8x16_t *x, float32x4_t *da) {
    int h;
    float32x4_t d = vld1q_dup_f32(&nq_act(xq, ldq, 0, j)->d);
    d = vld1q_lane_f32(&nq_act(xq, ldq, 1, j)->d, d, 1);
    d = vld1q_lane_f32(&nq_act(xq, ldq, 2, j)->d, d, 2);
    *da = vld1q_lane_f32(&nq_act(xq, ldq, 3, j)->d, d, 3);
    for (h = 0; h < 2; h++) {
        int32x4_t t0 = vreinterpretq_s32_s8(vld1q_s8(nq_act(xq, ldq, 0, j)->q + 16 * h));
        int32x4_t t1 = vreinterpretq_s32_s8(vld1q_s8(nq_act(xq, ldq, 1, j)->q + 16 * h));
        int32x4_t t2 = vreinterpretq_s32_s8(vld1q_s8(nq_act(xq, ldq, 2, j)->q + 16 * h));
        int32x4_t t3 = vreinterpretq_s32_s8(vld1q_s8(nq_act(xq, ldq, 3, j)->q + 16 * h));
        int64x2_t p0 = vreinterpretq_s64_s32(vtrn1q_s32(t0, t1)), p1 = vreinterpretq_s64_s32(vtrn2q_s32(t0, t1));
        int64x2_t p2 = vreinterpretq_s64_s32(vtrn1q_s32(t2, t3)), p3 = vreinterpretq_s64_s32(vtrn2q_s32(t2, t3));
        x[4 * h + 0] = vreinterpretq_s8_s64(vtrn1q_s64(p0, p2));
        x[4 * h + 1] = vreinterpretq_s8_s64(vtrn1q_s64(p1, p3));
        x[4 * h + 2] = vreinterpretq_s8_s64(vtrn2q_s64(p0, p2));
        x[4 * h + 3] = vreinterpretq_s8_s64(vtrn2q_s64(p1, p3));
    }
}

/* da * lane r of dw (r a constant) */
CISM__INLINE float32x4_t nq_mul_lane(float32x4_t da, float32x4_t dw, const int r) {
    switch (r) {
    case 0: return vmulq_laneq_f32(da, dw, 0);
    case 1: return vmulq_laneq_f32(da, dw, 1);
    case 2: return vmulq_laneq_f32(da, dw, 2);
    default: return vmulq_laneq_f32(da, dw, 3);
    }
}

/* Activation block j of R rows (R = 1, 4 or 8) and 4 tokens: acc[r] holds
   row r's outputs, lane t = token t. */
CISM__INLINE void nq_lane_step(const int dt, const int R, const int has_b, const uint8_t *wp, uint64_t rb,
                               const uint8_t *xq, int64_t ldq, int64_t j, float32x4_t *acc, int8x16_t lut) {
    int8x16_t x[8];
    float32x4_t da, sa = vdupq_n_f32(0.0f);
    int g, r;
    nq_act4x(xq, ldq, j, x, &da);
    if (dt == CISM_DTYPE_Q4A) { /* the 4 tokens' activation sums */
        int32x4_t si = vld1q_dup_s32(&nq_act(xq, ldq, 0, j)->sum);
        si = vld1q_lane_s32(&nq_act(xq, ldq, 1, j)->sum, si, 1);
        si = vld1q_lane_s32(&nq_act(xq, ldq, 2, j)->sum, si, 2);
        si = vld1q_lane_s32(&nq_act(xq, ldq, 3, j)->sum, si, 3);
        sa = vcvtq_f32_s32(si);
    }
    for (g = 0; g < R; g += 4) {
        const int G = R - g < 4 ? R - g : 4;
        const uint8_t *gp = wp + (uint64_t)g * rb;
        nq_w w[4];
        float32x4_t dA, dB;
        for (r = 0; r < G; r++) w[r] = nq_decode(dt, gp + (uint64_t)r * rb, lut, has_b);
        nq_scales(dt, G, gp, rb, w, has_b, &dA, &dB);
        for (r = 0; r < G; r++) {
            int32x4_t s = vdupq_n_s32(0);
            if (nq_block(dt) == 32) {
                s = vdotq_laneq_s32(s, x[0], w[r].lo, 0);
                s = vdotq_laneq_s32(s, x[1], w[r].lo, 1);
                s = vdotq_laneq_s32(s, x[2], w[r].lo, 2);
                s = vdotq_laneq_s32(s, x[3], w[r].lo, 3);
                s = vdotq_laneq_s32(s, x[4], w[r].hi, 0);
                s = vdotq_laneq_s32(s, x[5], w[r].hi, 1);
                s = vdotq_laneq_s32(s, x[6], w[r].hi, 2);
                s = vdotq_laneq_s32(s, x[7], w[r].hi, 3);
                if (dt == CISM_DTYPE_Q4A) /* (d * s + m * sum) * da per token lane */
                    acc[g + r] = vaddq_f32(acc[g + r], vmulq_f32(vaddq_f32(nq_mul_lane(vcvtq_f32_s32(s), dA, r), nq_mul_lane(sa, dB, r)), da));
                else
                    acc[g + r] = vaddq_f32(acc[g + r], vmulq_f32(vcvtq_f32_s32(s), nq_mul_lane(da, dA, r)));
            } else { /* lo = A 0-7 | B 0-7, hi = A 8-15 | B 8-15 */
                s = vdotq_laneq_s32(s, x[0], w[r].lo, 0);
                s = vdotq_laneq_s32(s, x[1], w[r].lo, 1);
                s = vdotq_laneq_s32(s, x[2], w[r].hi, 0);
                s = vdotq_laneq_s32(s, x[3], w[r].hi, 1);
                acc[g + r] = vaddq_f32(acc[g + r], vmulq_f32(vcvtq_f32_s32(s), nq_mul_lane(da, dA, r)));
                if (has_b) {
                    s = vdupq_n_s32(0);
                    s = vdotq_laneq_s32(s, x[4], w[r].lo, 2);
                    s = vdotq_laneq_s32(s, x[5], w[r].lo, 3);
                    s = vdotq_laneq_s32(s, x[6], w[r].hi, 2);
                    s = vdotq_laneq_s32(s, x[7], w[r].hi, 3);
                    acc[g + r] = vaddq_f32(acc[g + r], vmulq_f32(vcvtq_f32_s32(s), nq_mul_lane(da, dB, r)));
                }
            }
        }
    }
}

/* y[t*ldy + r] for R rows (1, 4 or 8) and 4 tokens by lane-indexed SDOT */
CISM__INLINE void nq_lane_tile(const int dt, const int R, const uint8_t *w, uint64_t rb, int64_t nab, int half_last,
                               const uint8_t *xq, int64_t ldq, float *y, int64_t ldy) {
    const int8x16_t lut = nq_levels(dt);
    float32x4_t acc[8];
    int64_t j, nfull = nab - (half_last ? 1 : 0);
    int r, t;
    for (r = 0; r < R; r++) acc[r] = vdupq_n_f32(0.0f);
    for (j = 0; j < nfull; j++) nq_lane_step(dt, R, 1, w + j * nq_ab_bytes(dt), rb, xq, ldq, j, acc, lut);
    if (half_last) nq_lane_step(dt, R, 0, w + j * nq_ab_bytes(dt), rb, xq, ldq, j, acc, lut);
    for (r = 0; r < R; r++) {
        float o[4];
        vst1q_f32(o, acc[r]);
        for (t = 0; t < 4; t++) y[t * ldy + r] = o[t];
    }
}
#endif

/* Tokens per cache block: the activation rows of one block stay in L2 while
   the row tiles stream past them. A multiple of `mult`. */
CISM__INLINE int64_t nq_token_block(int64_t ldq, int64_t mult) {
    int64_t tb = CISM__X_BLOCK_BYTES / (ldq > 0 ? ldq : 1);
    tb -= tb % mult;
    return tb < mult ? mult : tb;
}

/* The int8-activation matmul: 4 rows x 1 token for decode (row lanes);
   prefill by 8 rows x 4 tokens with token lanes (SDOT) or 4 rows x 4 tokens
   (SMULL); the remainders by smaller tiles. */
CISM__INLINE void nq_matmul_a8(const int dt, const int dot, const void *w, uint64_t rb, int64_t cols, const void *xq,
                               int64_t ldq, float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    const uint8_t *wb = (const uint8_t *)w, *xb = (const uint8_t *)xq;
    const int64_t nab = (cols + 31) / 32, nwb = (cols + nq_block(dt) - 1) / nq_block(dt);
    const int half_last = nq_block(dt) == 16 && (nwb & 1);
    int64_t r, t, t0, tb;
    if (nt == 1) {
        for (r = r0; r + 4 <= r1; r += 4) nq_tile(dt, dot, 4, 1, wb + r * rb, rb, nab, half_last, xb, ldq, y + r, ldy);
        for (; r < r1; r++) nq_tile(dt, dot, 1, 1, wb + r * rb, rb, nab, half_last, xb, ldq, y + r, ldy);
        return;
    }
    tb = nq_token_block(ldq, 4);
#if defined(__ARM_FEATURE_DOTPROD)
    if (dot == NQ_SDOT) {
        for (t0 = 0; t0 < nt; t0 += tb) {
            int64_t t1 = nt - t0 < tb ? nt : t0 + tb;
            for (t = t0; t + 4 <= t1; t += 4) {
                const uint8_t *xt = xb + t * ldq;
                for (r = r0; r + 8 <= r1; r += 8) nq_lane_tile(dt, 8, wb + r * rb, rb, nab, half_last, xt, ldq, y + t * ldy + r, ldy);
                if (r + 4 <= r1) {
                    nq_lane_tile(dt, 4, wb + r * rb, rb, nab, half_last, xt, ldq, y + t * ldy + r, ldy);
                    r += 4;
                }
                for (; r < r1; r++) nq_lane_tile(dt, 1, wb + r * rb, rb, nab, half_last, xt, ldq, y + t * ldy + r, ldy);
            }
            for (; t < t1; t++) {
                for (r = r0; r + 4 <= r1; r += 4)
                    nq_tile(dt, dot, 4, 1, wb + r * rb, rb, nab, half_last, xb + t * ldq, ldq, y + t * ldy + r, ldy);
                for (; r < r1; r++) nq_tile(dt, dot, 1, 1, wb + r * rb, rb, nab, half_last, xb + t * ldq, ldq, y + t * ldy + r, ldy);
            }
        }
        return;
    }
#endif
    for (t0 = 0; t0 < nt; t0 += tb) {
        int64_t t1 = nt - t0 < tb ? nt : t0 + tb;
        for (r = r0; r + 4 <= r1; r += 4) {
            for (t = t0; t + 4 <= t1; t += 4)
                nq_tile(dt, dot, 4, 4, wb + r * rb, rb, nab, half_last, xb + t * ldq, ldq, y + t * ldy + r, ldy);
            for (; t < t1; t++)
                nq_tile(dt, dot, 4, 1, wb + r * rb, rb, nab, half_last, xb + t * ldq, ldq, y + t * ldy + r, ldy);
        }
        for (; r < r1; r++) {
            for (t = t0; t + 4 <= t1; t += 4)
                nq_tile(dt, dot, 1, 4, wb + r * rb, rb, nab, half_last, xb + t * ldq, ldq, y + t * ldy + r, ldy);
            for (; t < t1; t++)
                nq_tile(dt, dot, 1, 1, wb + r * rb, rb, nab, half_last, xb + t * ldq, ldq, y + t * ldy + r, ldy);
        }
    }
}

#endif
