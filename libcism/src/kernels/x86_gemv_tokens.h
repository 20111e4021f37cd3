/* x86_gemv_tokens.h - batched decode of the block-32 int8 formats, shared by
 * the x86 tier files (kernels_avx2_quant.c, kernels_avx512_quant.c) through
 * x86_quant_entries.h, after the tier's gemv8_b32_t (T tokens x 8 rows, each
 * token's arithmetic that of the one-token kernel), gemv1_b32 and
 * GEMV_TOKENS_MAX (g_fmt, F_*: x86_quant.h).
 *
 * Up to GEMV_TOKENS(F) tokens, a block-32 format takes gemv8_b32_t rather
 * than the panel GEMM, which pays for packing its panels only with more
 * tokens: through the GEMM 2 tokens of q4a cost 2.9-3.9 single-token passes,
 * through gemv8_b32_t 1.05-1.4 (cism-kernel-bench --stream 32 --tokens
 * 2,3,4,5,8, one core, AVX2 and AVX-512). q4a's asymmetric panels stay slower
 * up to 8 tokens, the other formats' GEMM wins from 5; block-16 formats take
 * the GEMM from 2. Every path gives a row the same bits (test_kernels splits
 * the tokens of a call into groups of 1, 2, 3, 5 and 8). */
#ifndef CISM_X86_GEMV_TOKENS_H
#define CISM_X86_GEMV_TOKENS_H

#define GEMV_TOKENS(F) ((F) == F_Q4A ? 8 : g_fmt[F].block == 32 ? 4 : 1)

/* 8 rows at wr against 1 <= nt <= GEMV_TOKENS_MAX tokens: the tier's tile with
   nt a constant in each call (gemv_tokens, and gemv_outliers of x86_outliers.h) */
CISM__INLINE void gemv8_nt(const uint8_t *wr, uint64_t rb, int64_t nb, const cism__act8 *const *a, float *y, int64_t ldy,
                           int64_t nt, const int f) {
    switch (nt) {
    case 1: gemv8_b32(wr, rb, nb, a[0], y, f); break;
    case 2: gemv8_b32_t(wr, rb, nb, a, y, ldy, f, 2); break;
    case 3: gemv8_b32_t(wr, rb, nb, a, y, ldy, f, 3); break;
    case 4: gemv8_b32_t(wr, rb, nb, a, y, ldy, f, 4); break;
    case 5: gemv8_b32_t(wr, rb, nb, a, y, ldy, f, 5); break;
    case 6: gemv8_b32_t(wr, rb, nb, a, y, ldy, f, 6); break;
    case 7: gemv8_b32_t(wr, rb, nb, a, y, ldy, f, 7); break;
    default: gemv8_b32_t(wr, rb, nb, a, y, ldy, f, 8); break;
    }
}

/* 2 <= nt <= GEMV_TOKENS_MAX tokens of a block-32 format, rows [r0, r1) */
CISM__INLINE void gemv_tokens(const uint8_t *w, uint64_t rb, int64_t cols, const void *xq, int64_t ldq, float *y, int64_t ldy,
                              int64_t nt, int64_t r0, int64_t r1, const int f) {
    const cism__act8 *a[GEMV_TOKENS_MAX];
    int64_t nb = (cols + 31) / 32, r, t;
    const uintptr_t end = rows_prefetch_start(w, rb, r0, r1);
    for (t = 0; t < nt; t++) a[t] = cism__act8_row(xq, ldq, t);
    for (r = r0; r + 8 <= r1; r += 8) {
        const uint8_t *wr = w + (uint64_t)r * rb;
        rows_prefetch8(wr, rb, end);
        gemv8_nt(wr, rb, nb, a, y + r, ldy, nt, f);
    }
    for (; r < r1; r++)
        for (t = 0; t < nt; t++) y[t * ldy + r] = gemv1_b32(w + (uint64_t)r * rb, nb, a[t], f);
}

#endif
