/* kernels_neon_quant.c - the packed weight formats on the baseline ARM64
 * tier (part of the `neon` tier, ARMv8-A Advanced SIMD only; built, like
 * kernels_neon.c, with -ffp-contract=off):
 *
 *   - quantize_act: per-32 int8 activation blocks, the scalar tier's bytes
 *     (quantize_act_top2: with the outlier rule's block statistics,
 *     act_block_top2, in the same pass);
 *   - int8 activations: widening multiplies (SMULL/SMLAL2, SADALP) per
 *     activation block, the loops of neon_quant.h; the fallback for CPUs
 *     without dotprod, bit-identical to the scalar tier;
 *   - float activations: each weight block decoded into f32 lanes (exactly
 *     scale * level) and dotted with FMA in the NEON tier's 8 lanes and
 *     reduction tree, so these differ from the scalar tier only as the NEON
 *     f32 matmul does (kernel_bounds.h); the interleaved dtypes (q8x16,
 *     q4sx16, q4ax16) with the same numerics in row lanes, q6x16 and q5x16
 *     through the row kernels with each block gathered; their int8 path
 *     in neon_x16.h.
 *
 * Decoding to f32 without int->float conversions: a level plus an offset
 * is a byte u in 0..255; the f16 with bits 0x6400 | u is exactly 1024 + u,
 * so ZIP with a 0x64 byte vector, FCVTL to f32 and one FMA
 * (1024 + u) * d - (1024 + off) * d give d * level exactly (every term is
 * exact in f32: d has at most 11 significant bits). */
#include "neon_quant.h"
#include "neon_x16.h"

#include <math.h>

/* ---- int8 activation rows ------------------------------------------------------------ */
/* The two largest magnitudes of a block's 32 values v (the multiset's: a
   repeated max is also the second), ordered on their bits with the sign
   cleared as unsigned integers, as the scalar tier's act_block_top2 (a NaN
   above every number): per lane a tournament over its 8 values, then across
   the lanes the largest and the larger of the lanes' seconds and of the
   lanes' largest but one lane holding the top (the top again when two do). */
CISM__INLINE void top2_bits(const float32x4_t v[8], float *m1, float *m2) {
    const uint32x4_t abs = vdupq_n_u32(0x7fffffffu);
    uint32x4_t M[4], S[4], eq;
    uint32_t top, second;
    int i, w;
    for (i = 0; i < 4; i++) {
        const uint32x4_t a = vandq_u32(vreinterpretq_u32_f32(v[2 * i]), abs), b = vandq_u32(vreinterpretq_u32_f32(v[2 * i + 1]), abs);
        M[i] = vmaxq_u32(a, b);
        S[i] = vminq_u32(a, b);
    }
    for (w = 2; w >= 1; w /= 2)
        for (i = 0; i < w; i++) {
            const uint32x4_t hi = vmaxq_u32(M[i], M[i + w]), lo = vminq_u32(M[i], M[i + w]);
            S[i] = vmaxq_u32(lo, vmaxq_u32(S[i], S[i + w]));
            M[i] = hi;
        }
    top = vmaxvq_u32(M[0]);
    eq = vceqq_u32(M[0], vdupq_n_u32(top));
    second = vmaxvq_u32(S[0]);
    if (vaddvq_u32(vshrq_n_u32(eq, 31)) > 1) {
        second = top;
    } else {
        const uint32_t rest = vmaxvq_u32(vbicq_u32(M[0], eq));
        second = rest > second ? rest : second;
    }
    memcpy(m1, &top, 4);
    memcpy(m2, &second, 4);
}

/* The outlier rule's block statistics (kernels.h act_block_top2) */
static void act_block_top2(const float *x, int64_t nb, float *m1, float *m2) {
    int64_t b;
    for (b = 0; b < nb; b++) {
        float32x4_t v[8];
        int i;
        for (i = 0; i < 8; i++) v[i] = vld1q_f32(x + b * CISM__A8_BLOCK + 4 * i);
        top2_bits(v, &m1[b], &m2[b]);
    }
}

/* d = max|x| / 127, q = x * (127 / max|x|) rounded half away from zero (FCVTAS),
   sum = sum of q, and after the row's blocks the sums of each half block: the
   scalar tier's operations, NaN ignored by the max as there. With stats
   (quantize_act_top2) also each block's act_block_top2 statistics and
   whether x holds a NaN. */
CISM__INLINE int quantize_blocks(const float *x, int64_t n, void *out, float *m1, float *m2, const int stats) {
    cism__act8 *a = (cism__act8 *)out;
    int32_t *hs = cism__act8_half_sums(out, n);
    int64_t c0;
    int nan = 0;
    for (c0 = 0; c0 < n; c0 += CISM__A8_BLOCK, a++, hs += 2) {
        float buf[CISM__A8_BLOCK], amax, inv;
        const float *p = x + c0;
        float32x4_t v[8], m = vdupq_n_f32(0.0f);
        int16x8_t h0, h1;
        int8x16_t q0, q1;
        int i;
        if (n - c0 < CISM__A8_BLOCK) {
            memset(buf, 0, sizeof(buf));
            memcpy(buf, p, (size_t)(n - c0) * sizeof(float));
            p = buf;
        }
        for (i = 0; i < 8; i++) {
            v[i] = vld1q_f32(p + 4 * i);
            m = vmaxnmq_f32(m, vabsq_f32(v[i]));   /* FMAXNM: a NaN loses to the number */
        }
        if (stats) {
            uint32x4_t ok = vceqq_f32(v[0], v[0]);
            for (i = 1; i < 8; i++) ok = vandq_u32(ok, vceqq_f32(v[i], v[i]));
            nan |= vminvq_u32(ok) == 0;
            top2_bits(v, &m1[c0 / CISM__A8_BLOCK], &m2[c0 / CISM__A8_BLOCK]);
        }
        amax = vmaxnmvq_f32(m);
        a->d = amax / 127.0f;
        inv = cism__act8_inv(amax);
        h0 = vcombine_s16(vqmovn_s32(vcvtaq_s32_f32(vmulq_n_f32(v[0], inv))), vqmovn_s32(vcvtaq_s32_f32(vmulq_n_f32(v[1], inv))));
        h1 = vcombine_s16(vqmovn_s32(vcvtaq_s32_f32(vmulq_n_f32(v[2], inv))), vqmovn_s32(vcvtaq_s32_f32(vmulq_n_f32(v[3], inv))));
        q0 = vmaxq_s8(vcombine_s8(vqmovn_s16(h0), vqmovn_s16(h1)), vdupq_n_s8(-127));
        h0 = vcombine_s16(vqmovn_s32(vcvtaq_s32_f32(vmulq_n_f32(v[4], inv))), vqmovn_s32(vcvtaq_s32_f32(vmulq_n_f32(v[5], inv))));
        h1 = vcombine_s16(vqmovn_s32(vcvtaq_s32_f32(vmulq_n_f32(v[6], inv))), vqmovn_s32(vcvtaq_s32_f32(vmulq_n_f32(v[7], inv))));
        q1 = vmaxq_s8(vcombine_s8(vqmovn_s16(h0), vqmovn_s16(h1)), vdupq_n_s8(-127));
        vst1q_s8(a->q, q0);
        vst1q_s8(a->q + 16, q1);
        hs[0] = (int32_t)vaddlvq_s8(q0);
        hs[1] = (int32_t)vaddlvq_s8(q1);
        a->sum = hs[0] + hs[1];
    }
    return nan;
}
static void quantize_act(const float *x, int64_t n, void *out) {
    quantize_blocks(x, n, out, NULL, NULL, 0);
}
static int quantize_act_top2(const float *x, int64_t n, void *out, float *m1, float *m2) {
    return quantize_blocks(x, n, out, m1, m2, 1);
}

/* ---- float activations ----------------------------------------------------------------- */
static const int8_t nq_shift_hi[16] = {0, 0, 0, 0, 0, 0, 0, 0, -4, -4, -4, -4, -4, -4, -4, -4};

typedef struct f8 { float32x4_t lo, hi; } f8;

/* ((a0+a4)+(a1+a5)) + ((a2+a6)+(a3+a7)): the tree of kernels_neon.c and the scalar tier */
CISM__INLINE float hsum8(f8 v) {
    float32x4_t s = vaddq_f32(v.lo, v.hi);
    float32x4_t p = vpaddq_f32(s, s);
    return vgetq_lane_f32(p, 0) + vgetq_lane_f32(p, 1);
}

/* A row's weight block as scale and offset vectors: w = (1024 + u) * dv + nb */
typedef struct fdq { float32x4_t dv, nb; } fdq;

CISM__INLINE fdq f_scale(const int dt, const uint8_t *blk) {
    fdq s;
    float d, off = dt == CISM_DTYPE_Q4 || dt == CISM_DTYPE_Q4S ? 1032.0f : cism__dtype_is_qint(dt) ? 1024.0f + (float)cism__qint_half(dt) : 1152.0f;
    if (nq_f16_scale(dt)) d = vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vld1_dup_u16((const uint16_t *)(const void *)blk))), 0);
    else d = cism__e4m3_table[blk[0]] * (1.0f / 256.0f);
    s.dv = vdupq_n_f32(d);
    s.nb = vdupq_n_f32(-off * d);
    if (dt == CISM_DTYPE_Q4A) /* w = code * d + m (f_dec16a) */
        s.nb = vdupq_n_f32(vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vld1_dup_u16((const uint16_t *)(const void *)(blk + 2)))), 0));
    return s;
}

/* 16 weights from their offset bytes u (level = u - 8 for q4/q4s, u - H for q6/q5, u - 128 otherwise) */
CISM__INLINE void f_dec16(uint8x16_t u, fdq s, float32x4_t *wv) {
    const uint8x16_t mg = vdupq_n_u8(0x64);
    uint8x16_t lo = vzip1q_u8(u, mg), hi = vzip2q_u8(u, mg);
    wv[0] = vfmaq_f32(s.nb, vcvt_f32_f16(vreinterpret_f16_u8(vget_low_u8(lo))), s.dv);
    wv[1] = vfmaq_f32(s.nb, vcvt_high_f32_f16(vreinterpretq_f16_u8(lo)), s.dv);
    wv[2] = vfmaq_f32(s.nb, vcvt_f32_f16(vreinterpret_f16_u8(vget_low_u8(hi))), s.dv);
    wv[3] = vfmaq_f32(s.nb, vcvt_high_f32_f16(vreinterpretq_f16_u8(hi)), s.dv);
}

/* q4a: 16 weights from their codes u as fma(m, u, d) = d * u + m rounded once
   (d * u is exact): the scalar tier's value; u = (1024 + u) - 1024 exactly. */
CISM__INLINE void f_dec16a(uint8x16_t u, fdq s, float32x4_t *wv) {
    const uint8x16_t mg = vdupq_n_u8(0x64);
    const float32x4_t k = vdupq_n_f32(1024.0f);
    uint8x16_t lo = vzip1q_u8(u, mg), hi = vzip2q_u8(u, mg);
    wv[0] = vfmaq_f32(s.nb, vsubq_f32(vcvt_f32_f16(vreinterpret_f16_u8(vget_low_u8(lo))), k), s.dv);
    wv[1] = vfmaq_f32(s.nb, vsubq_f32(vcvt_high_f32_f16(vreinterpretq_f16_u8(lo)), k), s.dv);
    wv[2] = vfmaq_f32(s.nb, vsubq_f32(vcvt_f32_f16(vreinterpret_f16_u8(vget_low_u8(hi))), k), s.dv);
    wv[3] = vfmaq_f32(s.nb, vsubq_f32(vcvt_high_f32_f16(vreinterpretq_f16_u8(hi)), k), s.dv);
}

/* The offset bytes of half h (columns 16h..16h+15) of a weight block. */
CISM__INLINE uint8x16_t f_bytes(const int dt, const uint8_t *blk, const int h, uint8x16_t lutu, int8x16_t shift) {
    if (dt == CISM_DTYPE_Q8) return veorq_u8(vld1q_u8(blk + 2 + 16 * h), vdupq_n_u8(0x80));
    if (cism__dtype_is_qint(dt)) return nq_qint_codes(dt, blk, h);
    if (nq_block(dt) == 32) {
        uint8x16_t c = vld1q_u8(blk + nq_code_off(dt));
        c = h ? vshrq_n_u8(c, 4) : vandq_u8(c, vdupq_n_u8(15));
        return dt == CISM_DTYPE_Q4 || dt == CISM_DTYPE_Q4A ? c : vqtbl1q_u8(lutu, c);
    } else {
        uint8x8_t c8 = vld1_u8(blk + 1);
        uint8x16_t c = vandq_u8(vshlq_u8(vcombine_u8(c8, c8), shift), vdupq_n_u8(15));
        return dt == CISM_DTYPE_Q4S ? c : vqtbl1q_u8(lutu, c);
    }
}

/* acc[r][t] += 16 columns of R rows' decoded weights times T tokens' x
   (x + t*ldx: the 16 matching activations of token t) */
CISM__INLINE void f_fma16(const int R, const int T, f8 acc[2][4], float32x4_t wv[2][4], const float *x, int64_t ldx) {
    int r, t;
    for (t = 0; t < T; t++) {
        float32x4_t x0 = vld1q_f32(x + t * ldx), x1 = vld1q_f32(x + t * ldx + 4);
        float32x4_t x2 = vld1q_f32(x + t * ldx + 8), x3 = vld1q_f32(x + t * ldx + 12);
        for (r = 0; r < R; r++) {
            acc[r][t].lo = vfmaq_f32(acc[r][t].lo, wv[r][0], x0);
            acc[r][t].hi = vfmaq_f32(acc[r][t].hi, wv[r][1], x1);
            acc[r][t].lo = vfmaq_f32(acc[r][t].lo, wv[r][2], x2);
            acc[r][t].hi = vfmaq_f32(acc[r][t].hi, wv[r][3], x3);
        }
    }
}

/* Weight block b of R rows against T tokens' x (x + t*ldx: the block's first
   activation of token t); halves = the block's 16-column halves to do. */
CISM__INLINE void f_block(const int dt, const int32_t xd, const int R, const int T, const uint8_t *w, uint64_t rb, int64_t r0,
                          int64_t b, const float *x, int64_t ldx, f8 acc[2][4], int halves, uint8x16_t lutu, int8x16_t shift) {
    float32x4_t wv[2][4];
    fdq s[2];
    uint8_t tmp[2][CISM__Q6_BYTES];
    const uint8_t *blk[2];
    int r, h;
    for (r = 0; r < R; r++) {
        if (xd) { /* q6x16, q5x16: the block gathered into its row layout */
            cism__x16_block(xd, w, rb, r0 + r, b, tmp[r]);
            blk[r] = tmp[r];
        } else {
            blk[r] = w + (uint64_t)(r0 + r) * rb + b * nq_bytes(dt);
        }
        s[r] = f_scale(dt, blk[r]);
    }
    for (h = 0; h < nq_block(dt) / 16; h++) {
        if (h >= halves) break;
        for (r = 0; r < R; r++) {
            uint8x16_t u = f_bytes(dt, blk[r], h, lutu, shift);
            if (dt == CISM_DTYPE_Q4A) f_dec16a(u, s[r], wv[r]);
            else f_dec16(u, s[r], wv[r]);
        }
        f_fma16(R, T, acc, wv, x + 16 * h, ldx);
    }
}

/* Rows r0, r0 + 1 (R <= 2) x T <= 4 tokens: y[t*ldy + r]. A last, partial
   block takes its activations from a zero-padded copy (the padding weights,
   whose codes may be any level, meet zeros). xd: an interleaved dtype of
   base dt (q6x16, q5x16), whose blocks are gathered, or 0. */
CISM__INLINE void f_tile(const int dt, const int32_t xd, const int R, const int T, const uint8_t *w, uint64_t rb, int64_t r0,
                         int64_t cols, const float *x, int64_t ldx, float *y, int64_t ldy) {
    const uint8x16_t lutu = dt == CISM_DTYPE_Q8 ? vdupq_n_u8(0)
                                                 : veorq_u8(vreinterpretq_u8_s8(nq_levels(dt)), vdupq_n_u8(0x80));
    const int8x16_t shift = vld1q_s8(nq_shift_hi);
    const int B = nq_block(dt);
    f8 acc[2][4];
    int64_t b, nfull = cols / B, rem = cols - nfull * B;
    int r, t;
    for (r = 0; r < R; r++)
        for (t = 0; t < T; t++) acc[r][t].lo = acc[r][t].hi = vdupq_n_f32(0.0f);
    for (b = 0; b < nfull; b++) f_block(dt, xd, R, T, w, rb, r0, b, x + b * B, ldx, acc, 2, lutu, shift);
    if (rem) {
        float xt[4][32];
        memset(xt, 0, sizeof(xt));
        for (t = 0; t < T; t++) memcpy(xt[t], x + t * ldx + nfull * B, (size_t)rem * sizeof(float));
        f_block(dt, xd, R, T, w, rb, r0, nfull, xt[0], 32, acc, rem > 16 ? 2 : 1, lutu, shift);
    }
    for (r = 0; r < R; r++)
        for (t = 0; t < T; t++) y[t * ldy + r] = hsum8(acc[r][t]);
}

/* decode: 2 rows per tile; prefill: 1 row x 4 tokens (the decoded block
   feeds 4 tokens), token blocks of 256 KiB of activations */
CISM__INLINE void f_matmul(const int dt, const int32_t xd, const void *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y,
                           int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    const uint8_t *wb = (const uint8_t *)w;
    int64_t r, t, t0, tb;
    if (nt == 1) {
        for (r = r0; r + 2 <= r1; r += 2) f_tile(dt, xd, 2, 1, wb, rb, r, cols, x, ldx, y + r, ldy);
        if (r < r1) f_tile(dt, xd, 1, 1, wb, rb, r, cols, x, ldx, y + r, ldy);
        return;
    }
    tb = CISM__X_BLOCK_BYTES / (cols * 4);
    tb -= tb % 4;
    if (tb < 4) tb = 4;
    for (t0 = 0; t0 < nt; t0 += tb) {
        int64_t t1 = nt - t0 < tb ? nt : t0 + tb;
        for (r = r0; r < r1; r++) {
            for (t = t0; t + 4 <= t1; t += 4) f_tile(dt, xd, 1, 4, wb, rb, r, cols, x + t * ldx, ldx, y + t * ldy + r, ldy);
            for (; t < t1; t++) f_tile(dt, xd, 1, 1, wb, rb, r, cols, x + t * ldx, ldx, y + t * ldy + r, ldy);
        }
    }
}

/* ---- float activations, interleaved dtypes (q8x16, q4sx16, q4ax16) ----------------------- */
/* Row lanes: a row register (4 rows x 4 bytes of a chunk) is transposed by
   one TBL into 4 columns x 4 rows, decoded as above (one FMA per 4 weights,
   with the 4 rows' scales, and q4a's minimums, in the lanes), and each
   column meets its activation by a lane-indexed FMA into the accumulator of
   column c mod 8. Per row that is the row layouts' sequence (8 lanes,
   columns in order, the hsum8 tree), so these give the bits of the NEON q8 /
   q4s / q4a kernels above. */
static const uint8_t fx_tr4[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

/* acc + w * lane l of x (l a constant) */
CISM__INLINE float32x4_t fx_fma(float32x4_t acc, float32x4_t w, float32x4_t x, const int l) {
    switch (l) {
    case 0: return vfmaq_laneq_f32(acc, w, x, 0);
    case 1: return vfmaq_laneq_f32(acc, w, x, 1);
    case 2: return vfmaq_laneq_f32(acc, w, x, 2);
    default: return vfmaq_laneq_f32(acc, w, x, 3);
    }
}

/* acc[t][4h + j] += column j of wv times activation j of x[t] + 4q (the 4
   columns of a transposed row register) */
CISM__INLINE void fx_fma4(const int T, float32x4_t acc[2][8], const float32x4_t *wv, const float *const *xb, const int q,
                          const int h) {
    int t;
    for (t = 0; t < T; t++) {
        float32x4_t xv = vld1q_f32(xb[t] + 4 * q);
        acc[t][4 * h + 0] = fx_fma(acc[t][4 * h + 0], wv[0], xv, 0);
        acc[t][4 * h + 1] = fx_fma(acc[t][4 * h + 1], wv[1], xv, 1);
        acc[t][4 * h + 2] = fx_fma(acc[t][4 * h + 2], wv[2], xv, 2);
        acc[t][4 * h + 3] = fx_fma(acc[t][4 * h + 3], wv[3], xv, 3);
    }
}

/* Weight block b of rows 4k..4k+3 of a group x T <= 2 tokens (xb[t]: the
   block's activations of token t) into acc */
CISM__INLINE void fx_block(const int fm, const int T, const uint8_t *grp, const cism__x16 *g, const int k, int64_t b,
                           const float *const *xb, float32x4_t acc[2][8], uint8x16_t tr) {
    const uint8_t *sc = cism__x16_scales(g, grp, b), *cb = cism__x16_codes(g, grp, b) + k * 16;
    float32x4_t wv[4];
    fdq s;
    if (fm == NX_Q8) {
        int j;
        s.dv = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(sc + k * 8)));
        s.nb = vmulq_n_f32(s.dv, -1152.0f);
        for (j = 0; j < 8; j += 2) { /* chunk j: columns 4j..4j+3 (lanes 0-3), chunk j + 1: lanes 4-7 */
            f_dec16(veorq_u8(vqtbl1q_u8(vld1q_u8(cb + j * 64), tr), vdupq_n_u8(0x80)), s, wv);
            fx_fma4(T, acc, wv, xb, j, 0);
            f_dec16(veorq_u8(vqtbl1q_u8(vld1q_u8(cb + j * 64 + 64), tr), vdupq_n_u8(0x80)), s, wv);
            fx_fma4(T, acc, wv, xb, j + 1, 1);
        }
    } else if (fm == NX_Q4A) { /* chunk j: columns 4j.. (low nibbles) and 16+4j.. (high): all low
                                  ones first, so each accumulator sees its columns in order */
        const uint16x4x2_t h = vld2_u16((const uint16_t *)(const void *)(sc + k * 16)); /* d, m of 4 rows */
        uint8x16_t c[4];
        int j;
        s.dv = vcvt_f32_f16(vreinterpret_f16_u16(h.val[0]));
        s.nb = vcvt_f32_f16(vreinterpret_f16_u16(h.val[1]));
        for (j = 0; j < 4; j++) c[j] = vqtbl1q_u8(vld1q_u8(cb + j * 64), tr);
        for (j = 0; j < 4; j++) {
            f_dec16a(vandq_u8(c[j], vdupq_n_u8(15)), s, wv);
            fx_fma4(T, acc, wv, xb, j, j & 1);
        }
        for (j = 0; j < 4; j++) {
            f_dec16a(vshrq_n_u8(c[j], 4), s, wv);
            fx_fma4(T, acc, wv, xb, 4 + j, j & 1);
        }
    } else { /* chunk j: columns 4j..4j+3 (low nibbles) and 8+4j.. (high), lanes 4j.. */
        uint8x16_t c0 = vqtbl1q_u8(vld1q_u8(cb), tr), c1 = vqtbl1q_u8(vld1q_u8(cb + 64), tr);
        uint32_t e;
        float32x4_t dhi;
        memcpy(&e, sc + k * 4, 4);
        nq_e4m3x8(vreinterpret_u8_u32(vdup_n_u32(e)), &s.dv, &dhi);
        s.nb = vmulq_n_f32(s.dv, -1032.0f);
        f_dec16(vandq_u8(c0, vdupq_n_u8(15)), s, wv);
        fx_fma4(T, acc, wv, xb, 0, 0);
        f_dec16(vshrq_n_u8(c0, 4), s, wv);
        fx_fma4(T, acc, wv, xb, 2, 0);
        f_dec16(vandq_u8(c1, vdupq_n_u8(15)), s, wv);
        fx_fma4(T, acc, wv, xb, 1, 1);
        f_dec16(vshrq_n_u8(c1, 4), s, wv);
        fx_fma4(T, acc, wv, xb, 3, 1);
    }
}

/* Rows 4k..4k+3 of a group x T <= 2 tokens: o[t * 4 + i]. A last, partial
   block takes its activations from a zero-padded copy. */
CISM__INLINE void fx_tile(const int fm, const int T, const uint8_t *grp, const cism__x16 *g, const int k, int64_t cols,
                          const float *x, int64_t ldx, float *o) {
    const uint8x16_t tr = vld1q_u8(fx_tr4);
    const int B = fm == NX_Q4S ? 16 : 32;
    const int64_t nfull = cols / B;
    float32x4_t acc[2][8];
    const float *xb[2];
    int64_t b;
    int t, j;
    for (t = 0; t < T; t++)
        for (j = 0; j < 8; j++) acc[t][j] = vdupq_n_f32(0.0f);
    for (b = 0; b < nfull; b++) {
        for (t = 0; t < T; t++) xb[t] = x + t * ldx + b * B;
        fx_block(fm, T, grp, g, k, b, xb, acc, tr);
    }
    if (nfull < g->nb) {
        float xt[2][32];
        memset(xt, 0, sizeof(xt));
        for (t = 0; t < T; t++) {
            memcpy(xt[t], x + t * ldx + nfull * B, (size_t)(cols - nfull * B) * sizeof(float));
            xb[t] = xt[t];
        }
        fx_block(fm, T, grp, g, k, nfull, xb, acc, tr);
    }
    for (t = 0; t < T; t++) { /* ((a0+a4)+(a1+a5)) + ((a2+a6)+(a3+a7)), the tree of hsum8 */
        float32x4_t s0 = vaddq_f32(acc[t][0], acc[t][4]), s1 = vaddq_f32(acc[t][1], acc[t][5]);
        float32x4_t s2 = vaddq_f32(acc[t][2], acc[t][6]), s3 = vaddq_f32(acc[t][3], acc[t][7]);
        vst1q_f32(o + 4 * t, vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
    }
}

/* Rows [r0, r1) (groups of 16 rows; row registers partly in the range are
   computed and stored in part): 4 rows x 2 tokens, the last token alone,
   tokens blocked as in f_matmul. */
CISM__INLINE void fx_matmul(const int fm, const void *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y,
                            int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    const cism__x16 g = cism__x16_geom(nx_dtype(fm), rb);
    int64_t r, t, t0, tb = CISM__X_BLOCK_BYTES / (cols * 4);
    float o[8];
    tb -= tb % 2;
    if (tb < 2) tb = 2;
    for (t0 = 0; t0 < nt; t0 += tb) {
        int64_t t1 = nt - t0 < tb ? nt : t0 + tb;
        for (r = r0 - r0 % 4; r < r1; r += 4) {
            const uint8_t *grp = (const uint8_t *)w + (uint64_t)(r / CISM__X16) * CISM__X16 * rb;
            const int k = (int)(r % CISM__X16) / 4;
            int64_t lo = r0 > r ? r0 - r : 0, hi = r1 - r < 4 ? r1 - r : 4, i;
            for (t = t0; t + 2 <= t1; t += 2) {
                fx_tile(fm, 2, grp, &g, k, cols, x + t * ldx, ldx, o);
                for (i = lo; i < hi; i++) {
                    y[t * ldy + r + i] = o[i];
                    y[(t + 1) * ldy + r + i] = o[4 + i];
                }
            }
            if (t < t1) {
                fx_tile(fm, 1, grp, &g, k, cols, x + t * ldx, ldx, o);
                for (i = lo; i < hi; i++) y[t * ldy + r + i] = o[i];
            }
        }
    }
}

/* ---- the tier's entries --------------------------------------------------------------------- */
/* XD: q6x16, q5x16 run their base's row kernels with each block gathered
   into its row layout (cism__x16_block): the bits of q6 / q5 */
#define NQ_ENTRIES(nm, DT, XD)                                                                                      \
    static void matmul_##nm(const void *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y,       \
                            int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {                                     \
        f_matmul(DT, XD, w, rb, cols, x, ldx, y, ldy, nt, r0, r1);                                                  \
    }
NQ_ENTRIES(q8, CISM_DTYPE_Q8, 0)
NQ_ENTRIES(q4, CISM_DTYPE_Q4, 0)
NQ_ENTRIES(fp4, CISM_DTYPE_FP4, 0)
NQ_ENTRIES(nl4, CISM_DTYPE_NL4, 0)
NQ_ENTRIES(q4s, CISM_DTYPE_Q4S, 0)
NQ_ENTRIES(q4a, CISM_DTYPE_Q4A, 0)
NQ_ENTRIES(q6, CISM_DTYPE_Q6, 0)
NQ_ENTRIES(q5, CISM_DTYPE_Q5, 0)
NQ_ENTRIES(q3, CISM_DTYPE_Q3, 0)
NQ_ENTRIES(q2, CISM_DTYPE_Q2, 0)
NQ_ENTRIES(q6x16, CISM_DTYPE_Q6, CISM_DTYPE_Q6X16)
NQ_ENTRIES(q5x16, CISM_DTYPE_Q5, CISM_DTYPE_Q5X16)
NQ_ENTRIES(q3x16, CISM_DTYPE_Q3, CISM_DTYPE_Q3X16)
NQ_ENTRIES(q2x16, CISM_DTYPE_Q2, CISM_DTYPE_Q2X16)

/* the interleaved dtypes: float activations above, int8 ones in neon_x16.h */
#define NX_FLOAT_ENTRY(nm, FM)                                                                                   \
    static void matmul_##nm(const void *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y,         \
                            int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {                                      \
        fx_matmul(FM, w, rb, cols, x, ldx, y, ldy, nt, r0, r1);                                                     \
    }
NX_FLOAT_ENTRY(q8x16, NX_Q8)
NX_FLOAT_ENTRY(q4sx16, NX_Q4S)
NX_FLOAT_ENTRY(q4ax16, NX_Q4A)
/* the int8-activation entries (neon_entries.h): smull + sadalp loops */
#define NQ_A8(DT) nq_matmul_a8(DT, NQ_SMULL, w, rb, cols, xq, ldq, y, ldy, nt, r0, r1)
#define NQ_X16_MODE NQ_SMULL
#include "neon_entries.h"

/* 12 chains of smull + sadalp (8 multiply-adds each), their operands
   stepped by a byte add each round (nothing loop-invariant) */
static int64_t int8_mac_loop(int64_t iters, int32_t *sink) {
    const int8x8_t a = vdup_n_s8((int8_t)(*sink | 1)), step = vdup_n_s8(1);
    int32x4_t c[12];
    int8x8_t x[12];
    int64_t i;
    int j;
    for (j = 0; j < 12; j++) {
        c[j] = vdupq_n_s32(0);
        x[j] = vdup_n_s8((int8_t)(j + 1));
    }
    for (i = 0; i < iters; i++)
        for (j = 0; j < 12; j++) {
            c[j] = vpadalq_s16(c[j], vmull_s8(a, x[j]));
            x[j] = vadd_s8(x[j], step);
        }
    for (j = 1; j < 12; j++) c[0] = vaddq_s32(c[0], c[j]);
    *sink += vaddvq_s32(c[0]);
    return iters * 12 * 8;
}

void cism__kernels_fill_neon_quant(cism__kernels *k) {
    k->int8_mac_loop = int8_mac_loop;
    k->matmul[CISM_DTYPE_Q8] = matmul_q8;
    k->matmul[CISM_DTYPE_Q4] = matmul_q4;
    k->matmul[CISM_DTYPE_FP4] = matmul_fp4;
    k->matmul[CISM_DTYPE_NL4] = matmul_nl4;
    k->matmul[CISM_DTYPE_Q4S] = matmul_q4s;
    k->matmul[CISM_DTYPE_Q4A] = matmul_q4a;
    k->matmul[CISM_DTYPE_Q6] = matmul_q6;
    k->matmul[CISM_DTYPE_Q5] = matmul_q5;
    k->matmul[CISM_DTYPE_Q3] = matmul_q3;
    k->matmul[CISM_DTYPE_Q2] = matmul_q2;
    k->matmul[CISM_DTYPE_Q8X16] = matmul_q8x16;
    k->matmul[CISM_DTYPE_Q4SX16] = matmul_q4sx16;
    k->matmul[CISM_DTYPE_Q4AX16] = matmul_q4ax16;
    k->matmul[CISM_DTYPE_Q6X16] = matmul_q6x16;
    k->matmul[CISM_DTYPE_Q5X16] = matmul_q5x16;
    k->matmul[CISM_DTYPE_Q3X16] = matmul_q3x16;
    k->matmul[CISM_DTYPE_Q2X16] = matmul_q2x16;
    nq_fill_entries(k);
    k->quantize_act = quantize_act;
    k->act_block_top2 = act_block_top2;
    k->quantize_act_top2 = quantize_act_top2;
}
