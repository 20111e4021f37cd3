/* x86_quant_float.h - the float-activation matmul of q6, q5, q3 and q2 on the x86
 * tiers (kernels_avx2_quant.c, kernels_avx512_quant.c), one body for both:
 * 256-bit instructions, which the AVX-512 tier has too. Included after
 * x86_quant.h (qint_codes32, f16_f, g_fmt). The other packed formats keep the
 * scalar tier's float path on x86 (docs/KERNELS.md). q6x16 and q5x16 run the
 * same body, each block gathered into its row layout first (cism__x16_block),
 * so they give their base formats' bits, as an interleaved dtype must.
 *
 * A block decodes exactly to d * level (qint_codes32 - H, widened to f32,
 * times the fp16 scale: exact in f32, as the scalar tier's
 * cism__dequantize_row); each output element is one 8-lane accumulator, lane
 * j summing columns j, j + 8, ... by FMA in column order, a last partial
 * block against zero-padded activations, then the scalar tier's tree
 * ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)). Every path (one token, token tiles,
 * their remainders) runs that sequence per element, so results depend on
 * neither the row range nor the token count; against the scalar tier they
 * differ only by fusing (tests/c/kernel_bounds.h, KB_MATMUL). */
#ifndef CISM_X86_QUANT_FLOAT_H
#define CISM_X86_QUANT_FLOAT_H

#define QF_TOK 4 /* tokens sharing one decoded block */

/* block of a q6/q5/q3/q2 row as 32 floats d * level, columns 8q..8q+7 in w[q] */
CISM__INLINE void qf_decode(const uint8_t *blk, const int f, __m256 w[4]) {
    const __m256i lv = _mm256_sub_epi8(qint_codes32(blk, f), _mm256_set1_epi8((char)g_fmt[f].corr));
    const __m128i lo = _mm256_castsi256_si128(lv), hi = _mm256_extracti128_si256(lv, 1);
    const __m256 d = _mm256_set1_ps(f16_f(blk));
    w[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d);
    w[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d);
    w[2] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d);
    w[3] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d);
}

CISM__INLINE float qf_hsum(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* a_j + a_j+4 */
    const __m128 p = _mm_add_ps(s, _mm_movehdup_ps(s));                                  /* lane 0: s0 + s1, lane 2: s2 + s3 */
    return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehl_ps(p, p)));
}

/* block b of row r: in place, or (xd: an interleaved dtype) gathered into tmp */
CISM__INLINE const uint8_t *qf_block(const uint8_t *wb, uint64_t rb, int64_t r, int64_t b, const int f, const int32_t xd,
                                     uint8_t *tmp) {
    if (!xd) return wb + (uint64_t)r * rb + (uint64_t)(b * g_fmt[f].bytes);
    cism__x16_block(xd, wb, rb, r, b, tmp);
    return tmp;
}

/* row r against T <= QF_TOK tokens (x + t*ldx), y[t*ldy] */
CISM__INLINE void qf_row(const uint8_t *wb, uint64_t rb, int64_t r, int64_t cols, const float *x, int64_t ldx, float *y,
                         int64_t ldy, const int f, const int32_t xd, const int T) {
    __m256 acc[QF_TOK], w[4];
    uint8_t tmp[CISM__Q6_BYTES];
    const int64_t nfull = cols / 32;
    int64_t b;
    int t, q;
    for (t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (b = 0; b < nfull; b++) {
        qf_decode(qf_block(wb, rb, r, b, f, xd, tmp), f, w);
        for (t = 0; t < T; t++)
            for (q = 0; q < 4; q++) acc[t] = _mm256_fmadd_ps(w[q], _mm256_loadu_ps(x + t * ldx + b * 32 + 8 * q), acc[t]);
    }
    if (nfull * 32 < cols) { /* the padded last block: its padding weights meet zeros */
        float xt[32];
        qf_decode(qf_block(wb, rb, r, nfull, f, xd, tmp), f, w);
        for (t = 0; t < T; t++) {
            memset(xt, 0, sizeof(xt));
            memcpy(xt, x + t * ldx + nfull * 32, (size_t)(cols - nfull * 32) * sizeof(float));
            for (q = 0; q < 4; q++) acc[t] = _mm256_fmadd_ps(w[q], _mm256_loadu_ps(xt + 8 * q), acc[t]);
        }
    }
    for (t = 0; t < T; t++) y[t * ldy] = qf_hsum(acc[t]);
}

/* rows [r0, r1) x nt tokens, tokens in blocks whose activations stay in L2 */
CISM__INLINE void qf_matmul(const int f, const int32_t xd, const void *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y,
                            int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    const uint8_t *wb = (const uint8_t *)w;
    int64_t tb = CISM__X_BLOCK_BYTES / (cols * 4), t0, t, r;
    tb -= tb % QF_TOK;
    if (tb < QF_TOK) tb = QF_TOK;
    for (t0 = 0; t0 < nt; t0 += tb) {
        const int64_t t1 = nt - t0 < tb ? nt : t0 + tb;
        for (r = r0; r < r1; r++) {
            for (t = t0; t + QF_TOK <= t1; t += QF_TOK) qf_row(wb, rb, r, cols, x + t * ldx, ldx, y + t * ldy + r, ldy, f, xd, QF_TOK);
            if (t < t1) qf_row(wb, rb, r, cols, x + t * ldx, ldx, y + t * ldy + r, ldy, f, xd, (int)(t1 - t)); /* the last < 4 */
        }
    }
}

#define QF_ENTRY(nm, F, XD)                                                                                         \
    static void matmul_##nm(const void *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y,       \
                            int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {                                     \
        qf_matmul(F, XD, w, rb, cols, x, ldx, y, ldy, nt, r0, r1);                                                 \
    }
QF_ENTRY(q6, F_Q6, 0)
QF_ENTRY(q5, F_Q5, 0)
QF_ENTRY(q3, F_Q3, 0)
QF_ENTRY(q2, F_Q2, 0)
QF_ENTRY(q6x16, F_Q6, CISM_DTYPE_Q6X16)
QF_ENTRY(q5x16, F_Q5, CISM_DTYPE_Q5X16)
QF_ENTRY(q3x16, F_Q3, CISM_DTYPE_Q3X16)
QF_ENTRY(q2x16, F_Q2, CISM_DTYPE_Q2X16)
#undef QF_ENTRY

CISM__INLINE void fill_qint_float_entries(cism__kernels *k) {
    k->matmul[CISM_DTYPE_Q6] = matmul_q6;
    k->matmul[CISM_DTYPE_Q5] = matmul_q5;
    k->matmul[CISM_DTYPE_Q3] = matmul_q3;
    k->matmul[CISM_DTYPE_Q2] = matmul_q2;
    k->matmul[CISM_DTYPE_Q6X16] = matmul_q6x16;
    k->matmul[CISM_DTYPE_Q5X16] = matmul_q5x16;
    k->matmul[CISM_DTYPE_Q3X16] = matmul_q3x16;
    k->matmul[CISM_DTYPE_Q2X16] = matmul_q2x16;
}

#endif
