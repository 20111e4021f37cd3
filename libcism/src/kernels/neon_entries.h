/* neon_entries.h - the int8-activation table entries the ARM64 tiers
 * (kernels_neon_quant.c, kernels_neon_dotprod.c, kernels_neon_i8mm.c) have in
 * common: one matmul_a8 per block format, the interleaved formats' entries,
 * the multiply-add probe, and the fill of those entries. Included once by each
 * tier after its kernels, with:
 *   NQ_A8(DT)         (required) the call computing matmul_a8 of block format
 *                     DT, the entry's parameters (w, rb, cols, xq, ldq, y, ldy,
 *                     nt, r0, r1) in scope
 *   NQ_X16_MODE       (optional) the neon_x16.h mode of the q8x16 / q4sx16 /
 *                     q4ax16 / q6x16 / q5x16 entries (NQ_SMULL, NQ_SDOT); a tier without it
 *                     keeps the tier below's
 *   NQ_MAC_OP(c, a, b), NQ_MAC_PER_OP   (optional) the int8_mac_loop probe:
 *                     12 chains of this 128-bit int8 instruction, multiply-adds
 *                     per instruction
 * A new block format adds one NQ_A8_ENTRY line and one table line here. */
#ifndef CISM_NEON_ENTRIES_H
#define CISM_NEON_ENTRIES_H

#define NQ_A8_ENTRY(nm, CALL)                                                                                      \
    static void matmul_a8_##nm(const void *w, uint64_t rb, int64_t cols, const void *xq, int64_t ldq, float *y,    \
                               int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {                                  \
        CALL;                                                                                                       \
    }
NQ_A8_ENTRY(q8, NQ_A8(CISM_DTYPE_Q8))
NQ_A8_ENTRY(q4, NQ_A8(CISM_DTYPE_Q4))
NQ_A8_ENTRY(fp4, NQ_A8(CISM_DTYPE_FP4))
NQ_A8_ENTRY(nl4, NQ_A8(CISM_DTYPE_NL4))
NQ_A8_ENTRY(q4s, NQ_A8(CISM_DTYPE_Q4S))
NQ_A8_ENTRY(q4a, NQ_A8(CISM_DTYPE_Q4A))
NQ_A8_ENTRY(q6, NQ_A8(CISM_DTYPE_Q6))
NQ_A8_ENTRY(q5, NQ_A8(CISM_DTYPE_Q5))
NQ_A8_ENTRY(q3, NQ_A8(CISM_DTYPE_Q3))
NQ_A8_ENTRY(q2, NQ_A8(CISM_DTYPE_Q2))
#ifdef NQ_X16_MODE
NQ_A8_ENTRY(q8x16, nx_matmul_a8(NX_Q8, NQ_X16_MODE, w, rb, cols, xq, ldq, y, ldy, nt, r0, r1))
NQ_A8_ENTRY(q4sx16, nx_matmul_a8(NX_Q4S, NQ_X16_MODE, w, rb, cols, xq, ldq, y, ldy, nt, r0, r1))
NQ_A8_ENTRY(q4ax16, nx_matmul_a8(NX_Q4A, NQ_X16_MODE, w, rb, cols, xq, ldq, y, ldy, nt, r0, r1))
NQ_A8_ENTRY(q6x16, nx_matmul_a8(NX_Q6, NQ_X16_MODE, w, rb, cols, xq, ldq, y, ldy, nt, r0, r1))
NQ_A8_ENTRY(q5x16, nx_matmul_a8(NX_Q5, NQ_X16_MODE, w, rb, cols, xq, ldq, y, ldy, nt, r0, r1))
NQ_A8_ENTRY(q3x16, nx_matmul_a8(NX_Q3, NQ_X16_MODE, w, rb, cols, xq, ldq, y, ldy, nt, r0, r1))
NQ_A8_ENTRY(q2x16, nx_matmul_a8(NX_Q2, NQ_X16_MODE, w, rb, cols, xq, ldq, y, ldy, nt, r0, r1))
#endif
#undef NQ_A8_ENTRY

#ifdef NQ_MAC_OP
/* 12 chains of NQ_MAC_OP on register operands, enough to cover its latency */
static int64_t int8_mac_loop(int64_t iters, int32_t *sink) {
    const int8x16_t a = vdupq_n_s8((int8_t)(*sink | 1)), b = vdupq_n_s8(3);
    int32x4_t c[12];
    int64_t i;
    int j;
    for (j = 0; j < 12; j++) c[j] = vdupq_n_s32(0);
    for (i = 0; i < iters; i++)
        for (j = 0; j < 12; j++) c[j] = NQ_MAC_OP(c[j], a, b);
    for (j = 1; j < 12; j++) c[0] = vaddq_s32(c[0], c[j]);
    *sink += vaddvq_s32(c[0]);
    return iters * 12 * NQ_MAC_PER_OP;
}
#endif

CISM__INLINE void nq_fill_entries(cism__kernels *k) {
    k->matmul_a8[CISM_DTYPE_Q8] = matmul_a8_q8;
    k->matmul_a8[CISM_DTYPE_Q4] = matmul_a8_q4;
    k->matmul_a8[CISM_DTYPE_FP4] = matmul_a8_fp4;
    k->matmul_a8[CISM_DTYPE_NL4] = matmul_a8_nl4;
    k->matmul_a8[CISM_DTYPE_Q4S] = matmul_a8_q4s;
    k->matmul_a8[CISM_DTYPE_Q4A] = matmul_a8_q4a;
    k->matmul_a8[CISM_DTYPE_Q6] = matmul_a8_q6;
    k->matmul_a8[CISM_DTYPE_Q5] = matmul_a8_q5;
    k->matmul_a8[CISM_DTYPE_Q3] = matmul_a8_q3;
    k->matmul_a8[CISM_DTYPE_Q2] = matmul_a8_q2;
#ifdef NQ_X16_MODE
    k->matmul_a8[CISM_DTYPE_Q8X16] = matmul_a8_q8x16;
    k->matmul_a8[CISM_DTYPE_Q4SX16] = matmul_a8_q4sx16;
    k->matmul_a8[CISM_DTYPE_Q4AX16] = matmul_a8_q4ax16;
    k->matmul_a8[CISM_DTYPE_Q6X16] = matmul_a8_q6x16;
    k->matmul_a8[CISM_DTYPE_Q5X16] = matmul_a8_q5x16;
    k->matmul_a8[CISM_DTYPE_Q3X16] = matmul_a8_q3x16;
    k->matmul_a8[CISM_DTYPE_Q2X16] = matmul_a8_q2x16;
#endif
#ifdef NQ_MAC_OP
    k->int8_mac_loop = int8_mac_loop;
#endif
}

#endif
