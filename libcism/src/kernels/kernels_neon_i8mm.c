/* kernels_neon_i8mm.c - the ARM64 tier for CPUs with the int8 matrix-multiply
 * instructions (SMMLA, i8mm, plus dotprod; built with +dotprod+i8mm).
 *
 * SMMLA multiplies a 2x8 by an 8x2 int8 block into a 2x2 int32 tile: twice
 * the multiply-adds of an SDOT, and no horizontal sums, but it needs two
 * rows (and two tokens) side by side, so it pays in prefill. The
 * int8-activation matmuls of the packed formats run tiles of 4 rows x 4
 * tokens here (two row pairs x two token pairs, each row pair's 8-byte
 * column chunks interleaved by TRN1/TRN2 on 64-bit lanes); a single token
 * (decode) and the remainders take the dotprod tier's SDOT loops. All give the
 * scalar tier's bits (neon_quant.h). The interleaved dtypes (q8x16,
 * q4sx16, q4ax16) keep the dotprod tier's lane-indexed SDOT kernels
 * (neon_x16.h): SMMLA wants 8 bytes of two rows side by side, their chunks
 * hold 4 bytes per row. The float kernels are the NEON tier's.
 * dispatch.c selects this tier only when HWCAP2/sysctl report i8mm, and the
 * qemu runs in CI check that selection per CPU model. */
#include "neon_quant.h"

#if !defined(__ARM_FEATURE_MATMUL_INT8) || !defined(__ARM_FEATURE_DOTPROD)
#error "kernels_neon_i8mm.c must be compiled with dotprod and i8mm enabled (-march=armv8.2-a+dotprod+i8mm)"
#endif

CISM__INLINE float32x4_t combine4(float32x4_t acc, int32x4_t s, float32x4_t dw, float32x4_t da) {
    return vaddq_f32(acc, vmulq_f32(vcvtq_f32_s32(s), vmulq_f32(dw, da)));
}
/* q4a: acc + (dw * s + mw * sum) * da (neon_quant.h), lane by lane */
CISM__INLINE float32x4_t combine4a(float32x4_t acc, int32x4_t s, float32x4_t dw, float32x4_t mw, float32x4_t sa,
                                   float32x4_t da) {
    return vaddq_f32(acc, vmulq_f32(vaddq_f32(vmulq_f32(dw, vcvtq_f32_s32(s)), vmulq_f32(mw, sa)), da));
}

/* Activation block j of 2*RP rows x 2*TP tokens. acc[p][q] is the 2x2 tile of
   rows 2p, 2p+1 and tokens 2q, 2q+1, lanes (r0 t0, r0 t1, r1 t0, r1 t1). */
CISM__INLINE void mm_step(const int dt, const int RP, const int TP, const int has_b, const uint8_t *wp, uint64_t rb,
                          const uint8_t *xq, int64_t ldq, int64_t j, float32x4_t acc[2][2], int8x16_t lut) {
    nq_w w[4];
    int8x16_t W[2][4];
    float32x4_t dA, dB, dAp[2], dBp[2];
    int p, q, r;
    for (r = 0; r < 2 * RP; r++) w[r] = nq_decode(dt, wp + (uint64_t)r * rb, lut, has_b);
    nq_scales(dt, 2 * RP, wp, rb, w, has_b, &dA, &dB);
    for (p = 0; p < RP; p++) { /* 8-column chunks of the row pair; for q4s/fp4: A 0-7, B 0-7, A 8-15, B 8-15 */
        W[p][0] = nq_lo64(w[2 * p].lo, w[2 * p + 1].lo);
        W[p][1] = nq_hi64(w[2 * p].lo, w[2 * p + 1].lo);
        W[p][2] = nq_lo64(w[2 * p].hi, w[2 * p + 1].hi);
        W[p][3] = nq_hi64(w[2 * p].hi, w[2 * p + 1].hi);
        dAp[p] = p ? vzip2q_f32(dA, dA) : vzip1q_f32(dA, dA);   /* (d_2p, d_2p, d_2p+1, d_2p+1) */
        dBp[p] = p ? vzip2q_f32(dB, dB) : vzip1q_f32(dB, dB);
    }
    for (q = 0; q < TP; q++) {
        const cism__act8 *a0 = nq_act(xq, ldq, 2 * q, j), *a1 = nq_act(xq, ldq, 2 * q + 1, j);
        int8x16_t x00 = vld1q_s8(a0->q), x01 = vld1q_s8(a0->q + 16), x10 = vld1q_s8(a1->q), x11 = vld1q_s8(a1->q + 16);
        int8x16_t A0 = nq_lo64(x00, x10), A1 = nq_hi64(x00, x10), A2 = nq_lo64(x01, x11), A3 = nq_hi64(x01, x11);
        float32x2_t d2 = vset_lane_f32(a1->d, vdup_n_f32(a0->d), 1);
        float32x4_t da = vcombine_f32(d2, d2);   /* (da_2q, da_2q+1, da_2q, da_2q+1) */
        float32x2_t s2 = vset_lane_f32((float)a1->sum, vdup_n_f32((float)a0->sum), 1);
        float32x4_t sa = vcombine_f32(s2, s2);   /* q4a: the tokens' activation sums, the same lanes */
        for (p = 0; p < RP; p++) {
            if (nq_block(dt) == 32) {
                int32x4_t s = vmmlaq_s32(vmmlaq_s32(vdupq_n_s32(0), W[p][0], A0), W[p][1], A1);
                s = vmmlaq_s32(vmmlaq_s32(s, W[p][2], A2), W[p][3], A3);
                if (dt == CISM_DTYPE_Q4A) acc[p][q] = combine4a(acc[p][q], s, dAp[p], dBp[p], sa, da);
                else acc[p][q] = combine4(acc[p][q], s, dAp[p], da);
            } else {
                int32x4_t s = vmmlaq_s32(vmmlaq_s32(vdupq_n_s32(0), W[p][0], A0), W[p][2], A1);
                acc[p][q] = combine4(acc[p][q], s, dAp[p], da);
                if (has_b) {
                    s = vmmlaq_s32(vmmlaq_s32(vdupq_n_s32(0), W[p][1], A2), W[p][3], A3);
                    acc[p][q] = combine4(acc[p][q], s, dBp[p], da);
                }
            }
        }
    }
}

CISM__INLINE void mm_tile(const int dt, const int RP, const int TP, const uint8_t *w, uint64_t rb, int64_t nab,
                          int half_last, const uint8_t *xq, int64_t ldq, float *y, int64_t ldy) {
    const int8x16_t lut = nq_levels(dt);
    float32x4_t acc[2][2];
    int64_t j, nfull = nab - (half_last ? 1 : 0);
    int p, q;
    for (p = 0; p < RP; p++)
        for (q = 0; q < TP; q++) acc[p][q] = vdupq_n_f32(0.0f);
    for (j = 0; j < nfull; j++) mm_step(dt, RP, TP, 1, w + j * nq_ab_bytes(dt), rb, xq, ldq, j, acc, lut);
    if (half_last) mm_step(dt, RP, TP, 0, w + j * nq_ab_bytes(dt), rb, xq, ldq, j, acc, lut);
    for (p = 0; p < RP; p++)
        for (q = 0; q < TP; q++) {
            float o[4];
            vst1q_f32(o, acc[p][q]);
            y[(2 * q) * ldy + 2 * p] = o[0];
            y[(2 * q + 1) * ldy + 2 * p] = o[1];
            y[(2 * q) * ldy + 2 * p + 1] = o[2];
            y[(2 * q + 1) * ldy + 2 * p + 1] = o[3];
        }
}

/* Rows r..r+2*RP of every token of [t0, t1): 4-token SMMLA tiles, a token
   pair, a last token by SDOT. */
CISM__INLINE void mm_rows(const int dt, const int RP, const uint8_t *wr, uint64_t rb, int64_t nab, int half_last,
                          const uint8_t *xb, int64_t ldq, float *y, int64_t ldy, int64_t t0, int64_t t1) {
    int64_t t;
    for (t = t0; t + 4 <= t1; t += 4) mm_tile(dt, RP, 2, wr, rb, nab, half_last, xb + t * ldq, ldq, y + t * ldy, ldy);
    if (t + 2 <= t1) {
        mm_tile(dt, RP, 1, wr, rb, nab, half_last, xb + t * ldq, ldq, y + t * ldy, ldy);
        t += 2;
    }
    if (t < t1) nq_tile(dt, NQ_SDOT, 2 * RP, 1, wr, rb, nab, half_last, xb + t * ldq, ldq, y + t * ldy, ldy);
}

CISM__INLINE void mm_matmul(const int dt, const void *w, uint64_t rb, int64_t cols, const void *xq, int64_t ldq, float *y,
                            int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    const uint8_t *wb = (const uint8_t *)w, *xb = (const uint8_t *)xq;
    const int64_t nab = (cols + 31) / 32, nwb = (cols + nq_block(dt) - 1) / nq_block(dt);
    const int half_last = nq_block(dt) == 16 && (nwb & 1);
    int64_t r, t0, tb;
    if (nt == 1) { /* decode: SMMLA would waste half its products */
        nq_matmul_a8(dt, NQ_SDOT, w, rb, cols, xq, ldq, y, ldy, nt, r0, r1);
        return;
    }
    tb = nq_token_block(ldq, 4);
    for (t0 = 0; t0 < nt; t0 += tb) {
        int64_t t1 = nt - t0 < tb ? nt : t0 + tb, t;
        for (r = r0; r + 4 <= r1; r += 4) mm_rows(dt, 2, wb + r * rb, rb, nab, half_last, xb, ldq, y + r, ldy, t0, t1);
        if (r + 2 <= r1) {
            mm_rows(dt, 1, wb + r * rb, rb, nab, half_last, xb, ldq, y + r, ldy, t0, t1);
            r += 2;
        }
        if (r < r1) {
            for (t = t0; t + 4 <= t1; t += 4)
                nq_tile(dt, NQ_SDOT, 1, 4, wb + r * rb, rb, nab, half_last, xb + t * ldq, ldq, y + t * ldy + r, ldy);
            for (; t < t1; t++)
                nq_tile(dt, NQ_SDOT, 1, 1, wb + r * rb, rb, nab, half_last, xb + t * ldq, ldq, y + t * ldy + r, ldy);
        }
    }
}

/* the block formats by SMMLA tiles (decode and remainders SDOT); the probe:
   SMMLA, 32 multiply-adds each; q8x16 / q4sx16 / q4ax16 keep the dotprod tier's */
#define NQ_A8(DT) mm_matmul(DT, w, rb, cols, xq, ldq, y, ldy, nt, r0, r1)
#define NQ_MAC_OP(c, a, b) vmmlaq_s32(c, a, b)
#define NQ_MAC_PER_OP 32
#include "neon_entries.h"

void cism__kernels_fill_neon_i8mm(cism__kernels *k) {
    nq_fill_entries(k);
}
