/* x86_x16.h - the interleaved dtypes (q8x16, q4sx16, q4ax16, q6x16, q5x16;
 * quant.h has the layout) in 256-bit registers, a group of 16 rows as two
 * halves of 8: the AVX2 tier's int8-activation path of all five (the AVX-512
 * tier has its own 512-bit x16_tile and takes from here only x16_place,
 * ocol and x16outl), tested natively and under qemu-x86_64 -cpu Haswell-v4.
 * Also the column
 * decoders of those three for the outlier epilogue (x16_q4a_col8,
 * x16_qint_col8, x86_outliers.h).
 * Included after x86_quant.h (dot_u, bcast4y, e4m3_words, combine8, X16_*).
 *
 * Per row and block the exact int32 sum s of code x activation, then block
 * after block, the scalar tier's operations in its order (no FMA):
 *   q8x16, q4sx16, q6x16, q5x16:  acc = acc + (float)s * (d * d_a)
 *   q4ax16:         acc = acc + (d * (float)s + m * (float)sum_a) * d_a
 * The integer dot is vpmaddubsw (pairs summed in int16), then vpmaddwd with
 * ones; nothing saturates:
 *   q8x16:   the sign trick, |w| x a with w's sign: |pair| <= 2 * 128 * 127;
 *   q4sx16:  codes 0..15 unsigned, a block's four products (16 weights)
 *            summed in int16 (|sum| <= 4 * 2 * 15 * 127), 8 x its half-block
 *            activation sum taken off after widening;
 *   q4ax16:  codes 0..15 unsigned, no offset, a block's eight products (32
 *            weights) summed in int16: |sum| <= 8 * 2 * 15 * 128 = 30720;
 *   q5x16:   codes 0..31 (level + 16) unsigned, four products summed in
 *            int16 (|sum| <= 4 * 2 * 31 * 128 = 31744), 16 x the block's
 *            activation sum taken off after widening;
 *   q6x16:   codes 0..63 (level + 32), two products (32256), 32 x the sum.
 * The nibble chunk c (64 bytes, 4 code bytes per row; q4a, q6: chunk c, q5:
 * chunk 1 + c) holds elements 4c..4c+3 in its low nibbles and 16 + 4c..16 +
 * 4c + 3 in its high ones, bit 4 (q5: bit i of chunk 0's dword) and bits 4-5
 * (q6: plane byte e % 8, chunk 4 + (e % 8) / 4, bits 2 (e / 8)) ORed in.
 * q4ax16's scale line holds row i's fp16 d at 4i and m at 4i + 2, the others'
 * row i's fp16 d at 2i. */
#ifndef CISM_X86_X16_H
#define CISM_X86_X16_H

#define XT 4 /* tokens of a register tile (8 ymm accumulators of codes + 4 of sums: 16 registers) */

/* The scales of rows 8h..8h+7 of a block (sp: its scale line) as f32, and
   q4ax16's minimums into *mn (0 for the others). q4ax16: each 128-bit lane's
   four d's shuffled into its low 8 bytes and four m's into its high 8, then
   the 64-bit quarters reordered to [d 0..3, d 4..7 | m 0..3, m 4..7]. */
CISM__INLINE __m256 x16h_scales(const uint8_t *sp, int h, const int xf, __m256 *mn) {
    *mn = _mm256_setzero_ps();
    if (xf == X16_Q8 || X16_QINT(xf)) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(sp + h * 16)));
    if (xf == X16_Q4S) return e4m3_words(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)(sp + h * 8))));
    {
        const __m256i sel = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3,
                                             6, 7, 10, 11, 14, 15);
        const __m256i v = _mm256_permute4x64_epi64(
            _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(const void *)(sp + h * 32)), sel), 0xd8);
        *mn = _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1));
        return _mm256_cvtph_ps(_mm256_castsi256_si128(v));
    }
}

/* q4ax16, q6x16, q5x16 (blocks of 32): the int32 sums of code x activation
   of 8 rows from a block's eight products (codes lo[c], hi[c] of chunk c
   against the activations 4c.. and 16 + 4c.. of ab), a tree of int16 adds as
   deep as the format's bound allows (see above), then widened; q6, q5: H x
   the activation sum taken off, exactly sum level x q */
CISM__INLINE __m256i x16_dot8(const __m256i lo[4], const __m256i hi[4], const cism__act8 *ab, const int xf) {
    const __m256i one = _mm256_set1_epi16(1);
    __m256i p[4];
    int c;
    for (c = 0; c < 4; c++)
        p[c] = _mm256_add_epi16(_mm256_maddubs_epi16(lo[c], bcast4y(ab->q + 4 * c)),
                                _mm256_maddubs_epi16(hi[c], bcast4y(ab->q + 16 + 4 * c)));
    if (xf == X16_Q4A || X16_PLANE(xf)) { /* codes <= 15: one int16 tree; q3, q2 (codes <= 7): H x the activation sum off */
        const __m256i s = _mm256_madd_epi16(_mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3])), one);
        return xf == X16_Q4A ? s : _mm256_sub_epi32(s, _mm256_set1_epi32(X16_HALF(xf) * ab->sum));
    }
    if (xf == X16_Q5)
        return _mm256_sub_epi32(_mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(p[0], p[1]), one),
                                                 _mm256_madd_epi16(_mm256_add_epi16(p[2], p[3]), one)),
                                _mm256_set1_epi32(16 * ab->sum));
    return _mm256_sub_epi32(_mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(p[0], one), _mm256_madd_epi16(p[1], one)),
                                             _mm256_add_epi32(_mm256_madd_epi16(p[2], one), _mm256_madd_epi16(p[3], one))),
                            _mm256_set1_epi32(32 * ab->sum));
}

/* v in the bytes of 8 rows' dwords whose bit is set: byte i of each dword
   takes bit 4 * odd + i of the dword's byte `byte` (hq: chunk 0; q5's bit 4:
   v 0x10, q3's bit 2: v 4) */
CISM__INLINE __m256i qh_bits8(__m256i hq, const int byte, const int odd, const char v) {
    const __m256i sel = _mm256_add_epi8(_mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c, 0, 0x04040404, 0x08080808, 0x0c0c0c0c),
                                        _mm256_set1_epi8((char)byte));
    const __m256i bit = _mm256_set1_epi32(odd ? (int)0x80402010u : 0x08040201);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(hq, sel), bit), bit), _mm256_set1_epi8(v));
}

/* q4ax16, q6x16, q5x16: the codes of rows 8h..8h+7 of a block (cb: its chunk
   0 + 32h): nibble chunk c split, lo[c] elements 4c.., hi[c] 16 + 4c..,
   with q6's plane bits / q5's bit 4 ORed in (codes 0..15, 0..63, 0..31) */
CISM__INLINE void x16_codes8(const uint8_t *cb, __m256i lo[4], __m256i hi[4], const int xf) {
    const __m256i m = _mm256_set1_epi8(0x0f);
    const uint8_t *nc = cb + (xf == X16_Q5 ? 64 : 0);
    int c;
    if (X16_PLANE(xf)) { /* no nibbles: chunk c's elements 4c + i take plane byte 4 (c & 1) + i (q3: chunk 1 + (c & 1),
                            q2: c & 1), bits 2 (c / 2); 16 + 4c + i bits 4 + 2 (c / 2); q3's bit 2 from chunk 0's dword as
                            q5's bit 4 */
        const uint8_t *pc = cb + (xf == X16_Q3 ? 64 : 0);
        const __m256i p1 = _mm256_loadu_si256((const __m256i *)(const void *)pc), m3 = _mm256_set1_epi8(3);
        const __m256i p2 = _mm256_loadu_si256((const __m256i *)(const void *)(pc + 64));
        for (c = 0; c < 4; c++) {
            const __m256i pl = c & 1 ? p2 : p1;
            lo[c] = _mm256_and_si256(c < 2 ? pl : _mm256_srli_epi16(pl, 2), m3);
            hi[c] = _mm256_and_si256(_mm256_srli_epi16(pl, c < 2 ? 4 : 6), m3);
        }
        if (xf == X16_Q3) {
            const __m256i hq = _mm256_loadu_si256((const __m256i *)(const void *)cb);
            for (c = 0; c < 4; c++) {
                lo[c] = _mm256_or_si256(lo[c], qh_bits8(hq, c >> 1, c & 1, 4));
                hi[c] = _mm256_or_si256(hi[c], qh_bits8(hq, 2 + (c >> 1), c & 1, 4));
            }
        }
        return;
    }
    for (c = 0; c < 4; c++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(nc + c * 64));
        lo[c] = _mm256_and_si256(v, m);
        hi[c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
    }
    if (xf == X16_Q6) { /* chunk c's elements 4c + i take plane byte 4 (c & 1) + i, bits 2 (c / 2); 16 + 4c + i bits 4 + 2 (c / 2) */
        const __m256i p4 = _mm256_loadu_si256((const __m256i *)(const void *)(cb + 256));
        const __m256i p5 = _mm256_loadu_si256((const __m256i *)(const void *)(cb + 320)), m3 = _mm256_set1_epi8(0x30);
        for (c = 0; c < 4; c++) {
            const __m256i pl = c & 1 ? p5 : p4;
            lo[c] = _mm256_or_si256(lo[c], _mm256_and_si256(c < 2 ? _mm256_slli_epi16(pl, 4) : _mm256_slli_epi16(pl, 2), m3));
            hi[c] = _mm256_or_si256(hi[c], _mm256_and_si256(c < 2 ? pl : _mm256_srli_epi16(pl, 2), m3));
        }
    } else if (xf == X16_Q5) { /* element e takes bit e of chunk 0's dword */
        const __m256i hq = _mm256_loadu_si256((const __m256i *)(const void *)cb);
        for (c = 0; c < 4; c++) {
            lo[c] = _mm256_or_si256(lo[c], qh_bits8(hq, c >> 1, c & 1, 0x10));
            hi[c] = _mm256_or_si256(hi[c], qh_bits8(hq, 2 + (c >> 1), c & 1, 0x10));
        }
    }
}

/* A column's place in a group, the same for every group (x86_outliers.h):
   where its codes and scales are, and the shift that brings its code to the
   top (q8, then sign-extended) or the bottom (4-bit, then masked) of each
   row's 32-bit lane (q4s: blocks of 16, element j in the low nibble of byte
   j, j + 8 in the high one; q4a, q6, q5: blocks of 32, j and j + 16); q6, q5:
   also where its high bits are (hcode) and their shift in the lane. */
typedef struct ocol {
    int64_t code, scale, hcode;
    int shift, hshift;
} ocol;

CISM__INLINE ocol x16_place(const uint8_t *grp, const struct cism__x16 *g, const int xf, int64_t B, int32_t c) {
    const int q8 = xf == X16_Q8;
    const int64_t b = B == 32 ? c >> 5 : c / B, j = B == 32 ? c & 31 : c % B, half = B / 2; /* most blocks: 32, no division */
    const int64_t byte = q8 ? j : (j < half ? j : j - half);
    const int64_t cb = (int64_t)(cism__x16_codes(g, grp, b) - grp);
    ocol p;
    p.code = X16_PLANE(xf) ? cb + ((xf == X16_Q3) + (j % 8) / 4) * 64 : cb + (xf == X16_Q5 ? 64 : 0) + (byte / 4) * 64;
    p.scale = (int64_t)(cism__x16_scales(g, grp, b) - grp);
    p.shift = q8 ? 24 - 8 * (int)(byte % 4) : X16_PLANE(xf) ? 8 * (int)(j % 4) + 2 * (int)(j / 8) : 8 * (int)(byte % 4) + (j < half ? 0 : 4);
    /* q6: plane byte j % 8 (chunk 4 + (j % 8) / 4), bits 2 (j / 8); q5, q3: bit j of chunk 0 (q3's code: its
       low 2 bits, plane byte j % 8 in chunk 1 + (j % 8) / 4, bits 2 (j / 8); q2's: all of it, from chunk
       (j % 8) / 4; no high bits) */
    p.hcode = cb + (xf == X16_Q6 ? (4 + (j % 8) / 4) * 64 : 0);
    p.hshift = xf == X16_Q6 ? 8 * (int)(j % 4) + 2 * (int)(j / 8) : (int)j;
    return p;
}

/* q6x16, q5x16's outlier column: rows 8h..8h+7 of the column at p, d *
   level exactly as act_outliers.c (one exact product) */
CISM__INLINE __m256 x16_qint_col8(const uint8_t *grp, const ocol *p, int h, const int xf) {
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(grp + p->scale + 16 * h)));
    const __m256i lo = _mm256_and_si256(_mm256_srl_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(grp + p->code + 32 * h)),
                                                         _mm_cvtsi32_si128(p->shift)),
                                        _mm256_set1_epi32(X16_PLANE(xf) ? 3 : 15));
    __m256i lv = lo;
    if (xf != X16_Q2) {
        const __m256i hb = _mm256_and_si256(_mm256_srl_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(grp + p->hcode + 32 * h)),
                                                             _mm_cvtsi32_si128(p->hshift)),
                                            _mm256_set1_epi32(xf == X16_Q6 ? 3 : 1));
        lv = _mm256_or_si256(lo, _mm256_slli_epi32(hb, xf == X16_Q3 ? 2 : 4));
    }
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(lv, _mm256_set1_epi32(X16_HALF(xf)))));
}

/* q4ax16's outlier column (x86_outliers.h): rows 8h..8h+7 of the column
   whose code bytes sit at grp + code (shift: its nibble's place in each
   row's dword), given its block's scales d, m: d * code + m exactly as
   act_outliers.c (the product, then the sum; one rounding each). */
CISM__INLINE __m256 x16_q4a_code8(const uint8_t *grp, int64_t code, int shift, int h, __m256 d, __m256 mn) {
    const __m256i q = _mm256_and_si256(_mm256_srl_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(grp + code + 32 * h)),
                                                        _mm_cvtsi32_si128(shift)),
                                       _mm256_set1_epi32(15));
    return _mm256_add_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(q)), mn);
}
/* ... with the scales read from the scale line at grp + scale */
CISM__INLINE __m256 x16_q4a_col8(const uint8_t *grp, int64_t code, int64_t scale, int shift, int h) {
    __m256 mn;
    const __m256 d = x16h_scales(grp + scale, h, X16_Q4A, &mn);
    return x16_q4a_code8(grp, code, shift, h, d, mn);
}

/* Rows 8h..8h+7 of the column at p of a group, decoded exactly as
   act_outliers.c does: q8x16 f16 d * code; q4sx16 E4M3 d * scale_mul (smul)
   * level (lv: the format's 16 levels, two in-register lookups); q4ax16 d *
   code + m; q6x16, q5x16 d * level. */
CISM__INLINE __m256 x16h_col8(const uint8_t *grp, const ocol *p, int h, const int xf, const float *lv, __m256 smul) {
    __m256i q;
    if (xf == X16_Q4A) return x16_q4a_col8(grp, p->code, p->scale, p->shift, h);
    if (X16_QINT(xf)) return x16_qint_col8(grp, p, h, xf);
    q = _mm256_loadu_si256((const __m256i *)(const void *)(grp + p->code + 32 * h));
    if (xf == X16_Q8) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(grp + p->scale + 16 * h)));
        q = _mm256_sra_epi32(_mm256_sll_epi32(q, _mm_cvtsi32_si128(p->shift)), _mm_cvtsi32_si128(24));
        return _mm256_mul_ps(d, _mm256_cvtepi32_ps(q));
    } else {
        __m256 lo, hi;
        const __m256 d = _mm256_mul_ps(e4m3_8(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(grp + p->scale + 8 * h)))), smul);
        q = _mm256_and_si256(_mm256_srl_epi32(q, _mm_cvtsi32_si128(p->shift)), _mm256_set1_epi32(15));
        lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(lv), q);
        hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(lv + 8), q);
        return _mm256_mul_ps(d, _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_cmpgt_epi32(q, _mm256_set1_epi32(7)))));
    }
}

/* The outlier entries of a call of few tokens (x86_outliers.h
   gemv_outliers_x16): token t's table, the call's distinct channels' places
   in a group (p, nd of them) and which of them each entry is (ix), added by
   the tiles below to the outputs they hold, after the int8 dot and in table
   order, one fused multiply-add each: the operations of the epilogue
   (outliers_one / otab_add) in its order, so the same bits, while the group
   is still in L1. A tile of several tokens may decode each distinct column
   once for all of them (the tokens of a call share most channels). */
typedef struct x16outl {
    const cism__act8_out *o[CISM__GEMV_OUTL_TOKENS];
    int nd;
    ocol p[CISM__GEMV_OUTL_TOKENS * CISM__A8_MAX_OUT];
    uint8_t ix[CISM__GEMV_OUTL_TOKENS][CISM__A8_MAX_OUT];
    float lv[16]; /* q4sx16: the levels */
    __m256 smul;  /* q4sx16: the scale multiplier */
} x16outl;

CISM__INLINE __m256 x16h_outl(__m256 acc, const uint8_t *grp, const x16outl *ol, int64_t t, int h, const int xf) {
    const cism__act8_out *o = ol->o[t];
    int k;
    for (k = 0; k < o->n; k++)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(o->val[k]), x16h_col8(grp, &ol->p[ol->ix[t][k]], h, xf, ol->lv, ol->smul), acc);
    return acc;
}

/* Tokens t < T against rows 8h..8h+7 of a group; NA accumulators per token
   for latency when T is small (q8x16). ol (or NULL): the call's outlier
   entries, these tokens' from ol->o[ot]. */
CISM__INLINE void x16h_tile(const uint8_t *grp, const cism__x16 *g, int h, const cism__act8 *const *a, const int32_t *const *hs,
                            float *y, int64_t ldy, __m256i keep, uintptr_t pf_end, const x16outl *ol, int64_t ot, const int T,
                            const int xf) {
    const int NA = T == 1 && xf == X16_Q8 ? 2 : 1;
    __m256 facc[XT];
    __m256i iacc[XT][2];
    int64_t b;
    int t, c, k;
    for (t = 0; t < T; t++) facc[t] = _mm256_setzero_ps();
    for (b = 0; b < g->nb; b++) {
        const uint8_t *cb = cism__x16_codes(g, grp, b) + h * 32;
        __m256 mn;
        const __m256 sc = x16h_scales(cism__x16_scales(g, grp, b), h, xf, &mn);
        for (t = 0; t < T; t++)
            for (k = 0; k < NA; k++) iacc[t][k] = _mm256_setzero_si256();
        if (pf_end && h == 0) { /* few tokens: fetch CISM__X16_PF_DIST ahead a block's share of the group, scales included */
            x16_prefetch_block(g, grp, b, pf_end);
        }
        if (xf == X16_Q8) {
            for (c = 0; c < 8; c++) {
                __m256i wv = _mm256_loadu_si256((const __m256i *)(const void *)(cb + c * 64)), aw = _mm256_sign_epi8(wv, wv);
                for (t = 0; t < T; t++)
                    iacc[t][c % NA] = _mm256_add_epi32(iacc[t][c % NA], dot_u(aw, _mm256_sign_epi8(bcast4y(a[t][b].q + 4 * c), wv)));
            }
        } else if (xf == X16_Q4S) { /* four unsigned products of codes <= 15 summed in int16: |sum| <= 4 * 2 * 15 * 127 */
            __m256i v0 = _mm256_loadu_si256((const __m256i *)(const void *)cb);
            __m256i v1 = _mm256_loadu_si256((const __m256i *)(const void *)(cb + 64));
            __m256i l0 = _mm256_and_si256(v0, _mm256_set1_epi8(0x0f)), h0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), _mm256_set1_epi8(0x0f));
            __m256i l1 = _mm256_and_si256(v1, _mm256_set1_epi8(0x0f)), h1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), _mm256_set1_epi8(0x0f));
            for (t = 0; t < T; t++) {
                const int8_t *q = a[t][b / 2].q + (b & 1) * 16;
                __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(l0, bcast4y(q)), _mm256_maddubs_epi16(h0, bcast4y(q + 8)));
                p = _mm256_add_epi16(p, _mm256_add_epi16(_mm256_maddubs_epi16(l1, bcast4y(q + 4)), _mm256_maddubs_epi16(h1, bcast4y(q + 12))));
                iacc[t][0] = _mm256_sub_epi32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)), _mm256_set1_epi32(8 * hs[t][b]));
            }
        } else { /* q4ax16, q6x16, q5x16: the block's codes decoded once, eight products per token */
            __m256i lo[4], hi[4];
            x16_codes8(cb, lo, hi, xf);
            for (t = 0; t < T; t++) iacc[t][0] = x16_dot8(lo, hi, &a[t][b], xf);
        }
        for (t = 0; t < T; t++) {
            __m256i s = NA == 2 ? _mm256_add_epi32(iacc[t][0], iacc[t][1]) : iacc[t][0];
            if (xf == X16_Q4A) {
                facc[t] = combine8(facc[t], s, sc, mn, &a[t][b], F_Q4A);
            } else {
                float da = xf == X16_Q4S ? a[t][b / 2].d : a[t][b].d;
                facc[t] = _mm256_add_ps(facc[t], _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(sc, _mm256_set1_ps(da))));
            }
        }
    }
    if (ol)
        for (t = 0; t < T; t++) facc[t] = x16h_outl(facc[t], grp, ol, ot + t, h, xf);
    for (t = 0; t < T; t++) _mm256_maskstore_ps(y + t * ldy, keep, facc[t]);
}

/* Hides from the compiler that p is a pointer it already read through: the
   second half's x16_dot8 then broadcasts the eight activation words from
   memory again (load-port operations) instead of keeping the first half's
   eight registers live, which made GCC spill them and the two float
   accumulators to the stack on AVX2 (decode on the TinyLlama preset, 2
   threads: q3 +3%, q2 +2%; the same bits). */
#if defined(__GNUC__) || defined(__clang__)
#define X16_OPAQUE(p) __asm__("" : "+r"(p))
#else
#define X16_OPAQUE(p) ((void)0)
#endif

/* Decode (one token) against both halves of a group in one pass: each block's
   activations are broadcast once for the 16 rows, and the loop and scale
   overhead is shared (the AVX2 4-bit decode is instruction-bound). Every row's
   arithmetic is x16h_tile's with T = 1, so the results are the same bits. */
CISM__INLINE void x16h_decode(const uint8_t *grp, const cism__x16 *g, const cism__act8 *a, const int32_t *hs, float *y,
                              __m256i keep0, __m256i keep1, uintptr_t pf_end, const x16outl *ol, int64_t ot, const int xf) {
    __m256 f0 = _mm256_setzero_ps(), f1 = _mm256_setzero_ps();
    int64_t b;
    int c;
    for (b = 0; b < g->nb; b++) {
        const uint8_t *cb = cism__x16_codes(g, grp, b), *sp = cism__x16_scales(g, grp, b);
        __m256 m0, m1;
        const __m256 s0 = x16h_scales(sp, 0, xf, &m0), s1 = x16h_scales(sp, 1, xf, &m1);
        __m256i i0, i1;
        float da;
        uintptr_t pf, pe;
        cism__x16_prefetch_step(g, grp, b, CISM__X16_PF_DIST, pf_end, &pf, &pe);
        for (; pf < pe; pf += 64) _mm_prefetch((const char *)pf, CISM__X16_PF_HINT);
        if (xf == X16_Q8) {
            __m256i i0b = _mm256_setzero_si256(), i1b = _mm256_setzero_si256();
            i0 = _mm256_setzero_si256();
            i1 = _mm256_setzero_si256();
            for (c = 0; c < 8; c += 2) {
                const __m256i q0 = bcast4y(a[b].q + 4 * c), q1 = bcast4y(a[b].q + 4 * c + 4);
                __m256i w00 = _mm256_loadu_si256((const __m256i *)(const void *)(cb + c * 64));
                __m256i w01 = _mm256_loadu_si256((const __m256i *)(const void *)(cb + c * 64 + 32));
                __m256i w10 = _mm256_loadu_si256((const __m256i *)(const void *)(cb + c * 64 + 64));
                __m256i w11 = _mm256_loadu_si256((const __m256i *)(const void *)(cb + c * 64 + 96));
                i0 = _mm256_add_epi32(i0, dot_u(_mm256_sign_epi8(w00, w00), _mm256_sign_epi8(q0, w00)));
                i1 = _mm256_add_epi32(i1, dot_u(_mm256_sign_epi8(w01, w01), _mm256_sign_epi8(q0, w01)));
                i0b = _mm256_add_epi32(i0b, dot_u(_mm256_sign_epi8(w10, w10), _mm256_sign_epi8(q1, w10)));
                i1b = _mm256_add_epi32(i1b, dot_u(_mm256_sign_epi8(w11, w11), _mm256_sign_epi8(q1, w11)));
            }
            i0 = _mm256_add_epi32(i0, i0b);
            i1 = _mm256_add_epi32(i1, i1b);
            da = a[b].d;
        } else if (xf == X16_Q4S) { /* as x16h_tile: four unsigned products of codes <= 15 summed in int16 */
            const int8_t *q = a[b / 2].q + (b & 1) * 16;
            const __m256i qa = bcast4y(q), qb = bcast4y(q + 8), qc = bcast4y(q + 4), qd = bcast4y(q + 12), m = _mm256_set1_epi8(0x0f);
            const __m256i corr = _mm256_set1_epi32(8 * hs[b]), one = _mm256_set1_epi16(1);
            int h;
            __m256i r[2];
            for (h = 0; h < 2; h++) {
                __m256i v0 = _mm256_loadu_si256((const __m256i *)(const void *)(cb + h * 32));
                __m256i v1 = _mm256_loadu_si256((const __m256i *)(const void *)(cb + 64 + h * 32));
                __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(v0, m), qa),
                                             _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v0, 4), m), qb));
                p = _mm256_add_epi16(p, _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(v1, m), qc),
                                                         _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v1, 4), m), qd)));
                r[h] = _mm256_sub_epi32(_mm256_madd_epi16(p, one), corr);
            }
            i0 = r[0];
            i1 = r[1];
            da = a[b / 2].d;
        } else { /* q4ax16, q6x16, q5x16, q3x16, q2x16: as x16h_tile, the halves' codes decoded in turn */
            __m256i lo[4], hi[4];
            const cism__act8 *a1 = &a[b];
            x16_codes8(cb, lo, hi, xf);
            i0 = x16_dot8(lo, hi, &a[b], xf);
            X16_OPAQUE(a1);
            x16_codes8(cb + 32, lo, hi, xf);
            i1 = x16_dot8(lo, hi, a1, xf);
            if (xf == X16_Q4A) {
                f0 = combine8(f0, i0, s0, m0, &a[b], F_Q4A);
                f1 = combine8(f1, i1, s1, m1, &a[b], F_Q4A);
                continue;
            }
            da = a[b].d;
        }
        f0 = _mm256_add_ps(f0, _mm256_mul_ps(_mm256_cvtepi32_ps(i0), _mm256_mul_ps(s0, _mm256_set1_ps(da))));
        f1 = _mm256_add_ps(f1, _mm256_mul_ps(_mm256_cvtepi32_ps(i1), _mm256_mul_ps(s1, _mm256_set1_ps(da))));
    }
    if (ol) {
        f0 = x16h_outl(f0, grp, ol, ot, 0, xf);
        f1 = x16h_outl(f1, grp, ol, ot, 1, xf);
    }
    _mm256_maskstore_ps(y, keep0, f0);
    _mm256_maskstore_ps(y + 8, keep1, f1);
}

/* The 8 lanes' store masks of rows 8h..8h+7 of a group's mask (one bit per row) */
CISM__INLINE __m256i x16h_keep(uint32_t mask, int h) {
    const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_set1_epi32((int)((mask >> (8 * h)) & 0xffu)), bits), _mm256_setzero_si256());
}

/* Tokens [t0, t1) against one group of 16 rows (the bits of mask: rows stored):
   one token: x16h_decode; more: per half, tiles of XT tokens, then the rest.
   ol (or NULL): the call's outlier entries, token t's at ol->o[t]. */
CISM__INLINE void x16h_group(const uint8_t *grp, const cism__x16 *g, const void *xq, int64_t ldq, int64_t cols, int64_t t0,
                             int64_t t1, float *y, int64_t ldy, uint32_t mask, uintptr_t pf_end, const x16outl *ol, const int xf) {
    const cism__act8 *a[XT];
    const int32_t *hs[XT];
    int64_t t;
    int i, h;
    if (t1 - t0 == 1) { /* decode: both halves in one pass */
        a[0] = cism__act8_row(xq, ldq, t0);
        x16h_decode(grp, g, a[0], cism__act8_half_sums((void *)(uintptr_t)a[0], cols), y + t0 * ldy, x16h_keep(mask, 0),
                    x16h_keep(mask, 1), pf_end, ol, t0, xf);
        return;
    }
    for (h = 0; h < 2; h++) {
        const __m256i keep = x16h_keep(mask, h);
        float *yh = y + 8 * h;
        if (!((mask >> (8 * h)) & 0xffu)) continue;
        for (t = t0; t < t1; t += XT) {
            const int n = t1 - t < XT ? (int)(t1 - t) : XT;
            for (i = 0; i < n; i++) {
                a[i] = cism__act8_row(xq, ldq, t + i);
                hs[i] = cism__act8_half_sums((void *)(uintptr_t)a[i], cols);
            }
            switch (n) { /* T constant in each call: the tile's loops unroll */
            case XT: x16h_tile(grp, g, h, a, hs, yh + t * ldy, ldy, keep, pf_end, ol, t, XT, xf); break;
            case 3: x16h_tile(grp, g, h, a, hs, yh + t * ldy, ldy, keep, pf_end, ol, t, 3, xf); break;
            case 2: x16h_tile(grp, g, h, a, hs, yh + t * ldy, ldy, keep, pf_end, ol, t, 2, xf); break;
            default: x16h_tile(grp, g, h, a, hs, yh + t * ldy, ldy, keep, pf_end, ol, t, 1, xf); break;
            }
        }
    }
}

#endif
