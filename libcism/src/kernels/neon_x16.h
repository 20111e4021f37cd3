/* neon_x16.h - the int8-activation matmul of the row-interleaved dtypes
 * (q8x16, q4sx16, q4ax16; layout in quant.h and docs/QUANTIZATION.md) on the
 * ARM64 tiers. Included by kernels_neon_quant.c (NQ_SMULL: widening multiplies,
 * every ARM64 CPU) and kernels_neon_dotprod.c (NQ_SDOT: lane-indexed SDOT);
 * the i8mm tier keeps the dotprod tier's entries.
 *
 * One 64-byte chunk of a group's codes holds 4 bytes of each of its 16 rows:
 * four 128-bit registers of 4 rows x 4 bytes (row register k = rows
 * 4k..4k+3). `SDOT s.4s, w.16b, a.4b[l]` adds to lane i of s the dot of row
 * 4k+i's 4 bytes with the 4 activation bytes in 32-bit lane l of a: the
 * activations are loaded once per block and never shuffled, and each int32
 * lane is one row's exact block sum (no horizontal sums). Without dotprod the
 * same lanes come from SMULL/SMLAL on the activation 4 bytes duplicated
 * (DUP), two chunks (q8x16) or the whole block (q4sx16, q4ax16) summed in
 * int16, widened pairwise into int32 and one ADDP per block. (The
 * float-activation path of these dtypes is in kernels_neon_quant.c.)
 *
 * q6x16, q5x16 (blocks of 32 as q4ax16, chunk by chunk the same lanes) enter
 * as their levels (code - H: q6 -32..31, q5 -16..15), the nibbles with the
 * high bits ORed in (nx_split): |level * q| <= 32 * 127, eight fit an int16.
 * The 4-bit codes enter as they are (0..15, signed bytes). q4sx16: the
 * block's int32 starts at -8 * (the sum of its 16 activations), the
 * half-block sums quantize_act writes after each row: exactly
 * sum (code - 8) * q. q4ax16 (one block of 32 per activation block): the
 * plain sum code * q; chunk c's low nibbles meet activations 4c..4c+3, its
 * high ones 16+4c..16+4c+3 (lane c of the first and of the second
 * activation vector).
 *
 * Then the scalar tier's float operations per block, in block order:
 *     acc = acc + (float)s_b * (dw_b * da_b)                       (no FMA)
 *     acc = acc + (dw_b * (float)s_b + mw_b * (float)sum_b) * da_b   (q4ax16)
 * so every output has the scalar tier's bits, for any tile, row range, token
 * count or thread count (test_kernels: KB_A8_EXACT). */
#ifndef CISM_NEON_X16_H
#define CISM_NEON_X16_H

#include "neon_quant.h"

/* 4 rows x T tokens per row register: at most 2 row registers x 4 tokens
   (prefill) or 4 x 1 (decode) per tile */
#define NX_MAXK 4
#define NX_MAXT 4

/* The interleaved format (a constant in every caller; also the
   float-activation path's, kernels_neon_quant.c). */
enum { NX_Q8 = 0, NX_Q4S = 1, NX_Q4A = 2, NX_Q6 = 3, NX_Q5 = 4, NX_Q3 = 5, NX_Q2 = 6 };
CISM__INLINE int32_t nx_dtype(const int fm) {
    return fm == NX_Q8 ? CISM_DTYPE_Q8X16 : fm == NX_Q4S ? CISM_DTYPE_Q4SX16 : fm == NX_Q4A ? CISM_DTYPE_Q4AX16
           : fm == NX_Q6 ? CISM_DTYPE_Q6X16 : fm == NX_Q5 ? CISM_DTYPE_Q5X16 : fm == NX_Q3 ? CISM_DTYPE_Q3X16
                                                                          : CISM_DTYPE_Q2X16;
}

/* The 16 rows' scales of block b: d[k] lane i = row 4k + i; q4a: m[k] the
   minimums (row i's d at byte 4i, m at 4i + 2: LD2 splits them). */
CISM__INLINE void nx_scales(const int fm, const uint8_t *sc, float32x4_t *d, float32x4_t *m) {
    int k;
    for (k = 0; k < 4; k++) m[k] = vdupq_n_f32(0.0f);
    if (fm == NX_Q4A) {
        uint16x8x2_t h0 = vld2q_u16((const uint16_t *)(const void *)sc);
        uint16x8x2_t h1 = vld2q_u16((const uint16_t *)(const void *)(sc + 32));
        d[0] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h0.val[0])));
        d[1] = vcvt_high_f32_f16(vreinterpretq_f16_u16(h0.val[0]));
        d[2] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h1.val[0])));
        d[3] = vcvt_high_f32_f16(vreinterpretq_f16_u16(h1.val[0]));
        m[0] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h0.val[1])));
        m[1] = vcvt_high_f32_f16(vreinterpretq_f16_u16(h0.val[1]));
        m[2] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h1.val[1])));
        m[3] = vcvt_high_f32_f16(vreinterpretq_f16_u16(h1.val[1]));
    } else if (fm != NX_Q4S) { /* q8, q6, q5, q3, q2: fp16 d */
        uint16x8_t h0 = vreinterpretq_u16_u8(vld1q_u8(sc));
        uint16x8_t h1 = vreinterpretq_u16_u8(vld1q_u8(sc + 16));
        d[0] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h0)));
        d[1] = vcvt_high_f32_f16(vreinterpretq_f16_u16(h0));
        d[2] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h1)));
        d[3] = vcvt_high_f32_f16(vreinterpretq_f16_u16(h1));
    } else {
        uint8x16_t s = vld1q_u8(sc);
        nq_e4m3x8(vget_low_u8(s), &d[0], &d[1]);
        nq_e4m3x8(vget_high_u8(s), &d[2], &d[3]);
    }
}

#if defined(__ARM_FEATURE_DOTPROD)
/* s + the dots of w's 4 rows with 32-bit lane l of a (l a constant) */
CISM__INLINE int32x4_t nx_sdot(int32x4_t s, int8x16_t w, int8x16_t a, const int l) {
    switch (l) {
    case 0: return vdotq_laneq_s32(s, w, a, 0);
    case 1: return vdotq_laneq_s32(s, w, a, 1);
    case 2: return vdotq_laneq_s32(s, w, a, 2);
    default: return vdotq_laneq_s32(s, w, a, 3);
    }
}
#endif

/* 32-bit lane l of a in every lane (l a constant) */
CISM__INLINE int8x16_t nx_dup(int8x16_t a, const int l) {
    int32x4_t v = vreinterpretq_s32_s8(a);
    switch (l) {
    case 0: return vreinterpretq_s8_s32(vdupq_laneq_s32(v, 0));
    case 1: return vreinterpretq_s8_s32(vdupq_laneq_s32(v, 1));
    case 2: return vreinterpretq_s8_s32(vdupq_laneq_s32(v, 2));
    default: return vreinterpretq_s8_s32(vdupq_laneq_s32(v, 3));
    }
}

/* int16 products of two (w, a) pairs, rows 0-1 (lo) and rows 2-3 (hi) of
   the row register, added pairwise into the int32 lanes of *lo, *hi
   (|product| <= 127 * 127: two fit an int16) */
CISM__INLINE void nx_mull2(int32x4_t *lo, int32x4_t *hi, int8x16_t w0, int8x16_t a0, int8x16_t w1, int8x16_t a1) {
    int16x8_t p = vmull_s8(vget_low_s8(w0), vget_low_s8(a0));
    int16x8_t q = vmull_high_s8(w0, a0);
    p = vmlal_s8(p, vget_low_s8(w1), vget_low_s8(a1));
    q = vmlal_high_s8(q, w1, a1);
    *lo = vpadalq_s16(*lo, p);
    *hi = vpadalq_s16(*hi, q);
}

#if defined(__ARM_FEATURE_DOTPROD)
/* the row registers k0..k0+K-1 of the chunk at cp (LD1 of 2 or 4 registers
   made GCC 12 spill them in the decode loop: plain loads) */
CISM__INLINE void nx_ldw(const int8_t *cp, const int k0, const int K, int8x16_t *w) {
    int k;
    for (k = 0; k < K; k++) w[k] = vld1q_s8(cp + (k0 + k) * 16);
}

/* q8, chunk at cp (columns 4c..4c+3 of the block: lane l of activation
   vector v, c = 4v + l) */
CISM__INLINE void nx_q8_sdot(const int k0, const int K, const int T, const int8_t *cp, int8x16_t a[NX_MAXT][2], const int v,
                             const int l, int32x4_t s[NX_MAXT][NX_MAXK]) {
    int8x16_t w[NX_MAXK];
    int t, k;
    nx_ldw(cp, k0, K, w);
    for (k = 0; k < K; k++)
        for (t = 0; t < T; t++) s[t][k] = nx_sdot(s[t][k], w[k], a[t][v], l);
}

#endif

/* The uint32 plane of q5 / q3 (bit 4 / bit 2: val 0x10 / 4): val in byte i of
   each row's dword whose bit 4 * odd + i of the dword's byte `byte` is set
   (q: the row register of chunk 0) */
CISM__INLINE uint8x16_t nx_qh_bits(uint8x16_t q, const int byte, const int odd, const uint8_t val) {
    static const uint8_t dw4[16] = {0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12};
    const uint8x16_t bit = vreinterpretq_u8_u32(vdupq_n_u32(odd ? 0x80402010u : 0x08040201u));
    const uint8x16_t v = vqtbl1q_u8(q, vaddq_u8(vld1q_u8(dw4), vdupq_n_u8((uint8_t)byte)));
    return vandq_u8(vtstq_u8(v, bit), vdupq_n_u8(val));
}

/* Chunk c of row register k of a block (codes at cb) of the 4-bit formats,
   q6, q5: lo the low nibbles' values, hi the high ones' (q4s, q4a: codes
   0..15; q6, q5: levels, the plane's bits ORed in, minus H). q4a, q6, q5: lo
   elements 4c.., hi 16 + 4c..; q6's elements 4c + i take plane byte 4 (c & 1)
   + i (chunk 4 + (c & 1)) bits 2 (c / 2), 16 + 4c + i bits 4 + 2 (c / 2); q5's
   element e, bit e of chunk 0's dword, and the nibbles from chunk 1; q3 has
   no nibbles: its elements' bits 0-1 as q6's plane bits from chunk 1 + (c & 1),
   bit 2 as q5's bit 4; q2 only the plane bits, from chunk c & 1. */
CISM__INLINE void nx_split(const int fm, const uint8_t *cb, const int c, const int k, int8x16_t *lo, int8x16_t *hi) {
    uint8x16_t l, h;
    if (fm == NX_Q3 || fm == NX_Q2) {
        const uint8x16_t p = vld1q_u8(cb + ((fm == NX_Q3) + (c & 1)) * 64 + k * 16), m3 = vdupq_n_u8(3);
        l = vandq_u8(c < 2 ? p : vshrq_n_u8(p, 2), m3);
        h = vandq_u8(c < 2 ? vshrq_n_u8(p, 4) : vshrq_n_u8(p, 6), m3);
        if (fm == NX_Q3) {
            const uint8x16_t q = vld1q_u8(cb + k * 16);
            l = vorrq_u8(l, nx_qh_bits(q, c >> 1, c & 1, 4));
            h = vorrq_u8(h, nx_qh_bits(q, 2 + (c >> 1), c & 1, 4));
        }
    } else {
        const uint8x16_t raw = vld1q_u8(cb + (fm == NX_Q5 ? 64 : 0) + c * 64 + k * 16);
        l = vandq_u8(raw, vdupq_n_u8(15));
        h = vshrq_n_u8(raw, 4);
    }
    if (fm == NX_Q6) {
        const uint8x16_t p = vld1q_u8(cb + (4 + (c & 1)) * 64 + k * 16), m3 = vdupq_n_u8(0x30);
        l = vorrq_u8(l, vandq_u8(c < 2 ? vshlq_n_u8(p, 4) : vshlq_n_u8(p, 2), m3));
        h = vorrq_u8(h, vandq_u8(c < 2 ? p : vshrq_n_u8(p, 2), m3));
    } else if (fm == NX_Q5) {
        const uint8x16_t q = vld1q_u8(cb + k * 16);
        l = vorrq_u8(l, nx_qh_bits(q, c >> 1, c & 1, 0x10));
        h = vorrq_u8(h, nx_qh_bits(q, 2 + (c >> 1), c & 1, 0x10));
    }
    if (fm == NX_Q6 || fm == NX_Q5 || fm == NX_Q3 || fm == NX_Q2) {
        const uint8x16_t H = vdupq_n_u8((uint8_t)cism__qint_half(nx_dtype(fm)));
        l = vsubq_u8(l, H);
        h = vsubq_u8(h, H);
    }
    *lo = vreinterpretq_s8_u8(l);
    *hi = vreinterpretq_s8_u8(h);
}

#if defined(__ARM_FEATURE_DOTPROD)
/* 4-bit codes / q6, q5 levels, chunk c of the block at cb: the low nibbles
   meet lane c of activation vector 0 (elements 4c..4c+3); the high ones q4s:
   lane 2 + c of vector 0 (8 + 4c..), q4a, q6, q5: lane c of vector 1 (16 + 4c..) */
CISM__INLINE void nx_nib_sdot(const int fm, const int k0, const int K, const int T, const uint8_t *cb, int8x16_t a[NX_MAXT][2],
                              const int c, int32x4_t s[NX_MAXT][NX_MAXK]) {
    int t, k;
    for (k = 0; k < K; k++) {
        int8x16_t lo, hi;
        nx_split(fm, cb, c, k0 + k, &lo, &hi);
        for (t = 0; t < T; t++) {
            s[t][k] = nx_sdot(s[t][k], lo, a[t][0], c);
            s[t][k] = nx_sdot(s[t][k], hi, a[t][fm != NX_Q4S], fm != NX_Q4S ? c : 2 + c);
        }
    }
}
#endif

/* q8 without SDOT, chunks c, c + 1 at cp (lanes l, l + 1 of activation
   vector v): int16 pairs, SADALP into lo (rows 0-1) and hi (rows 2-3) */
CISM__INLINE void nx_q8_smull(const int k0, const int K, const int T, const int8_t *cp, int8x16_t a[NX_MAXT][2], const int v,
                              const int l, int32x4_t lo[NX_MAXT][NX_MAXK], int32x4_t hi[NX_MAXT][NX_MAXK]) {
    int8x16_t d0[NX_MAXT], d1[NX_MAXT];
    int t, k;
    for (t = 0; t < T; t++) {
        d0[t] = nx_dup(a[t][v], l);
        d1[t] = nx_dup(a[t][v], l + 1);
    }
    for (k = 0; k < K; k++) {
        int8x16_t w0 = vld1q_s8(cp + (k0 + k) * 16), w1 = vld1q_s8(cp + 64 + (k0 + k) * 16);
        for (t = 0; t < T; t++) nx_mull2(&lo[t][k], &hi[t][k], w0, d0[t], w1, d1[t]);
    }
}

/* 4-bit codes / q6, q5 levels without SDOT, chunk c of the block at cb (the
   lanes of nx_nib_sdot), into the int16 products of rows 0-1 (p) and 2-3 (r)
   of each row register: c = 0 starts them. Codes 0..15: |code * q| <= 1905,
   the 4 (q4s) or 8 (q4a) products of a lane over a block fit an int16; q6,
   q5 levels: |level * q| <= 32 * 127, eight fit too. */
CISM__INLINE void nx_nib_smull(const int fm, const int k0, const int K, const int T, const uint8_t *cb, int8x16_t a[NX_MAXT][2],
                               const int c, int16x8_t p[NX_MAXT][NX_MAXK], int16x8_t r[NX_MAXT][NX_MAXK]) {
    int8x16_t dl[NX_MAXT], dh[NX_MAXT];
    int t, k;
    for (t = 0; t < T; t++) {
        dl[t] = nx_dup(a[t][0], c);
        dh[t] = nx_dup(a[t][fm != NX_Q4S], fm != NX_Q4S ? c : 2 + c);
    }
    for (k = 0; k < K; k++) {
        int8x16_t lo, hi;
        nx_split(fm, cb, c, k0 + k, &lo, &hi);
        for (t = 0; t < T; t++) {
            if (c == 0) {
                p[t][k] = vmull_s8(vget_low_s8(lo), vget_low_s8(dl[t]));
                r[t][k] = vmull_high_s8(lo, dl[t]);
            } else {
                p[t][k] = vmlal_s8(p[t][k], vget_low_s8(lo), vget_low_s8(dl[t]));
                r[t][k] = vmlal_high_s8(r[t][k], lo, dl[t]);
            }
            p[t][k] = vmlal_s8(p[t][k], vget_low_s8(hi), vget_low_s8(dh[t]));
            r[t][k] = vmlal_high_s8(r[t][k], hi, dh[t]);
        }
    }
}

/* One weight block of the row registers k0..k0+K-1 of a group (codes at
   cb), T tokens: s[t][k] lane i = the exact int32 block dot of row
   4(k0+k)+i with token t. q: token t's 32 (q8, q4a) or 16 (q4s) activations
   of the block; corr[t]: the int32 the sums start from (q4s: -8 *
   half-block sum; q8, q4a: 0). The chunks are written out (constant lanes,
   and GCC does not unroll an 8-chunk loop of 8 SDOTs each). */
CISM__INLINE void nx_dots(const int fm, const int dot, const int k0, const int K, const int T, const uint8_t *cb,
                          const int8_t *const *q, const int32_t *corr, int32x4_t s[NX_MAXT][NX_MAXK]) {
    const int8_t *cs = (const int8_t *)cb;
    int8x16_t a[NX_MAXT][2];
    int t, k;
#if defined(__ARM_FEATURE_DOTPROD)
    if (dot == NQ_SDOT) {
        for (t = 0; t < T; t++)
            for (k = 0; k < K; k++) s[t][k] = vdupq_n_s32(corr[t]);
        if (fm == NX_Q8) { /* the halves one after the other: 4 activation registers live, not 8 */
            int v;
            for (v = 0; v < 2; v++) {
                for (t = 0; t < T; t++) a[t][0] = vld1q_s8(q[t] + 16 * v);
                nx_q8_sdot(k0, K, T, cs + 256 * v, a, 0, 0, s);
                nx_q8_sdot(k0, K, T, cs + 256 * v + 64, a, 0, 1, s);
                nx_q8_sdot(k0, K, T, cs + 256 * v + 128, a, 0, 2, s);
                nx_q8_sdot(k0, K, T, cs + 256 * v + 192, a, 0, 3, s);
            }
        } else {
            for (t = 0; t < T; t++) {
                a[t][0] = vld1q_s8(q[t]);
                a[t][1] = fm != NX_Q4S ? vld1q_s8(q[t] + 16) : a[t][0];
            }
            nx_nib_sdot(fm, k0, K, T, cb, a, 0, s);
            nx_nib_sdot(fm, k0, K, T, cb, a, 1, s);
            if (fm != NX_Q4S) {
                nx_nib_sdot(fm, k0, K, T, cb, a, 2, s);
                nx_nib_sdot(fm, k0, K, T, cb, a, 3, s);
            }
        }
        return;
    }
#endif
    (void)dot;
    for (t = 0; t < T; t++) {
        a[t][0] = vld1q_s8(q[t]);
        a[t][1] = fm != NX_Q4S ? vld1q_s8(q[t] + 16) : a[t][0];
    }
    {
        int32x4_t lo[NX_MAXT][NX_MAXK], hi[NX_MAXT][NX_MAXK];
        if (fm == NX_Q8) {
            for (t = 0; t < T; t++)
                for (k = 0; k < K; k++) lo[t][k] = hi[t][k] = vdupq_n_s32(0);
            nx_q8_smull(k0, K, T, cs, a, 0, 0, lo, hi);
            nx_q8_smull(k0, K, T, cs + 128, a, 0, 2, lo, hi);
            nx_q8_smull(k0, K, T, cs + 256, a, 1, 0, lo, hi);
            nx_q8_smull(k0, K, T, cs + 384, a, 1, 2, lo, hi);
        } else { /* the block's chunks into int16, widened once */
            int16x8_t p[NX_MAXT][NX_MAXK], r[NX_MAXT][NX_MAXK];
            nx_nib_smull(fm, k0, K, T, cb, a, 0, p, r);
            nx_nib_smull(fm, k0, K, T, cb, a, 1, p, r);
            if (fm != NX_Q4S) {
                nx_nib_smull(fm, k0, K, T, cb, a, 2, p, r);
                nx_nib_smull(fm, k0, K, T, cb, a, 3, p, r);
            }
            for (t = 0; t < T; t++)
                for (k = 0; k < K; k++) {
                    lo[t][k] = vpaddlq_s16(p[t][k]);
                    hi[t][k] = vpaddlq_s16(r[t][k]);
                }
        }
        /* lo: (row 0, row 0, row 1, row 1), hi: rows 2, 3 -> rows 0..3 */
        for (t = 0; t < T; t++)
            for (k = 0; k < K; k++) s[t][k] = vaddq_s32(vpaddq_s32(lo[t][k], hi[t][k]), vdupq_n_s32(corr[t]));
    }
}

/* Row registers k0..k0+K-1 of one group (rows 4k0 .. 4(k0+K)) x T tokens:
   o[t * 16 + 4k + i] = the output of row 4k + i (k counted from 0 of the
   group) and token t. a[t], hs[t]: token t's activation row and its
   half-block sums. */
CISM__INLINE void nx_tile(const int fm, const int dot, const int k0, const int K, const int T, const uint8_t *grp,
                          const cism__x16 *g, const cism__act8 *const *a, const int32_t *const *hs, float *o) {
    float32x4_t acc[NX_MAXT][NX_MAXK];
    int32x4_t s[NX_MAXT][NX_MAXK];
    int64_t b;
    int t, k;
    for (t = 0; t < T; t++)
        for (k = 0; k < K; k++) acc[t][k] = vdupq_n_f32(0.0f);
    for (b = 0; b < g->nb; b++) {
        const int64_t j = fm == NX_Q4S ? b / 2 : b; /* the activation block */
        const int8_t *q[NX_MAXT];
        int32_t corr[NX_MAXT];
        float32x4_t d[4], m[4];
        for (t = 0; t < T; t++) {
            q[t] = a[t][j].q + (fm == NX_Q4S ? (b & 1) * 16 : 0);
            corr[t] = fm == NX_Q4S ? -8 * hs[t][b] : 0;
        }
        nx_dots(fm, dot, k0, K, T, cism__x16_codes(g, grp, b), q, corr, s);
        nx_scales(fm, cism__x16_scales(g, grp, b), d, m);
        for (t = 0; t < T; t++) {
            const float da = a[t][j].d, sa = (float)a[t][j].sum;
            for (k = 0; k < K; k++)
                acc[t][k] = fm == NX_Q4A ? nq_combine_a(acc[t][k], s[t][k], d[k0 + k], m[k0 + k], sa, da)
                                         : nq_combine(acc[t][k], s[t][k], d[k0 + k], da);
        }
    }
    for (t = 0; t < T; t++)
        for (k = 0; k < K; k++) vst1q_f32(o + t * 16 + 4 * (k0 + k), acc[t][k]);
}

/* rows [lo, hi) of a group (0 <= lo < hi <= 16) out of o into y */
CISM__INLINE void nx_store(const float *o, int T, int64_t lo, int64_t hi, float *y, int64_t ldy) {
    int t;
    for (t = 0; t < T; t++) memcpy(y + t * ldy + lo, o + t * 16 + lo, (size_t)(hi - lo) * sizeof(float));
}

/* Rows [r0, r1) of a matrix of whole groups of 16 rows; a group partly in the
   range is computed (the half groups it touches, or all of it for a single
   token) and stored in part. Decode: one group x 1 token per tile. Prefill:
   half groups (2 row registers, 8 rows) x 4 tokens with SDOT, so each weight
   register feeds 4 SDOTs; x 2 tokens for q4sx16, q4ax16 with SMULL; q8x16 with SMULL
   keeps the decode tile (8 rows x 2 tokens spill there). Tokens in blocks
   whose activations stay in L2; the tokens left over one at a time. */
CISM__INLINE void nx_matmul_a8(const int fm, const int dot, const void *w, uint64_t rb, int64_t cols, const void *xq,
                               int64_t ldq, float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    const cism__x16 g = cism__x16_geom(nx_dtype(fm), rb);
    const uint8_t *xb = (const uint8_t *)xq;
    /* tokens per prefill tile: SMULL on q8 spills with 2 tokens x 8 rows, so
       it keeps the decode tile */
    const int TP = dot == NQ_SDOT ? 4 : fm == NX_Q8 ? 1 : 2;
    int64_t tb = nq_token_block(ldq, TP), t0, t, gi;
    float o[NX_MAXT * 16];
    const cism__act8 *a[NX_MAXT];
    const int32_t *hs[NX_MAXT];
    int i, h;
    for (t0 = 0; t0 < nt; t0 += tb) {
        int64_t t1 = nt - t0 < tb ? nt : t0 + tb;
        for (gi = r0 / CISM__X16; gi * CISM__X16 < r1; gi++) {
            const uint8_t *grp = (const uint8_t *)w + (uint64_t)gi * CISM__X16 * rb;
            int64_t lo = r0 > gi * CISM__X16 ? r0 - gi * CISM__X16 : 0;
            int64_t hi = r1 - gi * CISM__X16 < CISM__X16 ? r1 - gi * CISM__X16 : CISM__X16;
            float *yg = y + gi * CISM__X16;
            for (h = 0; h < 2 && TP > 1; h++) { /* prefill: the half groups with rows in range */
                int64_t hl = lo > 8 * h ? lo : 8 * h, hh = hi < 8 * h + 8 ? hi : 8 * h + 8;
                if (hl >= hh) continue;
                for (t = t0; t + TP <= t1; t += TP) {
                    for (i = 0; i < TP; i++) {
                        a[i] = nq_act(xb, ldq, t + i, 0);
                        hs[i] = cism__act8_half_sums((void *)(uintptr_t)a[i], cols);
                    }
                    if (h) nx_tile(fm, dot, 2, 2, TP, grp, &g, a, hs, o); /* k0 a constant */
                    else nx_tile(fm, dot, 0, 2, TP, grp, &g, a, hs, o);
                    nx_store(o, TP, hl, hh, yg + t * ldy, ldy);
                }
            }
            for (t = TP > 1 ? t1 - (t1 - t0) % TP : t0; t < t1; t++) { /* decode, and the tokens left over */
                a[0] = nq_act(xb, ldq, t, 0);
                hs[0] = cism__act8_half_sums((void *)(uintptr_t)a[0], cols);
                nx_tile(fm, dot, 0, 4, 1, grp, &g, a, hs, o);
                nx_store(o, 1, lo, hi, yg + t * ldy, ldy);
            }
        }
    }
}

#endif
