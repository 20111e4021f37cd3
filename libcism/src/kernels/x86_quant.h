/* x86_quant.h - what the x86 int8-activation tiers (kernels_avx2_quant.c,
 * kernels_avx512_quant.c) share below the vector width of their tiles: the
 * block formats, their level tables, and the 128/256-bit helpers both tiers
 * decode blocks with (AVX2 instructions, which the AVX-512 tier has too).
 * Included after <immintrin.h>, tier_common.h and quant.h, with the tier's
 * TT (tokens of a prefill register tile, 4 or 8) defined. The width-dependent
 * kernels (tile, pack_panel, gemv, x16_group, ...) stay in the tier file; the
 * drivers around them are x86_quant_entries.h. */
#ifndef CISM_X86_QUANT_H
#define CISM_X86_QUANT_H

#include <string.h>

/* ---- formats ------------------------------------------------------------------------- */
enum { F_Q8, F_Q4, F_NL4, F_Q4S, F_FP4, F_Q4A, F_Q6, F_Q5, F_Q3, F_Q2 };
#define F_QINT(f) ((f) == F_Q6 || (f) == F_Q5 || (f) == F_Q3 || (f) == F_Q2) /* q6, q5, q3, q2: codes = level + H, one decoder (qint_codes32) */

typedef struct fmt {
    int block, bytes;   /* weights and bytes per block */
    int scale_e4m3;     /* 1: one E4M3 byte (x 2^-8), 0: fp16 */
    int corr;           /* AVX-512 (vpdpbusd, unsigned x signed): weights enter as level + corr; q4, q6,
                           q5, q3, q2 enter as their codes (level + corr) on AVX2 too, corr * (activation sum) taken off */
} fmt;

static const fmt g_fmt[10] = {
    {32, 34, 0, 128}, {32, 18, 0, 8}, {32, 18, 0, 128}, {16, 9, 1, 8}, {16, 9, 1, 128}, {32, 20, 0, 0},
    {32, CISM__Q6_BYTES, 0, CISM__Q6_HALF}, {32, CISM__Q5_BYTES, 0, CISM__Q5_HALF},
    {32, CISM__Q3_BYTES, 0, CISM__Q3_HALF}, {32, CISM__Q2_BYTES, 0, CISM__Q2_HALF},
};

/* levels (signed) of the 4-bit codes, for the panel repack and the AVX2 sign trick */
static const int8_t g_q4_l[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
static const int8_t g_nl4_l[16] = {-112, -90, -71, -55, -41, -27, -15, -3, 9, 21, 34, 48, 63, 81, 101, 127};
static const int8_t g_fp4_l[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

#if TT != 4 && TT != 8
#error "x86_quant.h: TT must be 4 or 8"
#endif
/* The last n < TT tokens of a token loop: CALL(T) with T a constant, so each
   remainder gets its own register tile. */
#if TT == 8
#define X86_TOKEN_TAIL(n, CALL)                                                                                        \
    switch (n) {                                                                                                       \
    case 7: CALL(7); break;                                                                                            \
    case 6: CALL(6); break;                                                                                            \
    case 5: CALL(5); break;                                                                                            \
    case 4: CALL(4); break;                                                                                            \
    case 3: CALL(3); break;                                                                                            \
    case 2: CALL(2); break;                                                                                            \
    case 1: CALL(1); break;                                                                                            \
    default: break;                                                                                                    \
    }
#else
#define X86_TOKEN_TAIL(n, CALL)                                                                                        \
    switch (n) {                                                                                                       \
    case 3: CALL(3); break;                                                                                            \
    case 2: CALL(2); break;                                                                                            \
    case 1: CALL(1); break;                                                                                            \
    default: break;                                                                                                    \
    }
#endif

CISM__INLINE short ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return (short)v;
}

/* one E4M3 byte -> e4m3 * 2^-8 (its bits moved into an fp16: exact; the NaN codes 0x7f/0xff -> NaN) */
CISM__INLINE float e4m3_f(uint8_t e) {
    int nan = (e & 0x7f) == 0x7f ? 0x7e00 : 0;
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(((e & 0x80) << 8) | ((e & 0x7f) << 7) | nan)));
}
CISM__INLINE float f16_f(const uint8_t *p) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128((uint16_t)ld16(p)))); }

CISM__INLINE float scale_of(const uint8_t *blk, const int f) {
    return g_fmt[f].scale_e4m3 ? e4m3_f(blk[0]) : f16_f(blk);
}

/* E4M3 bytes (low byte of each 16-bit lane) -> e4m3 * 2^-8 as f32 (the NaN codes 0x7f/0xff -> NaN) */
CISM__INLINE __m256 e4m3_words(__m128i h) {
    __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7f)), _mm_set1_epi16(0x7f)); /* 0x7f, 0xff: NaN */
    h = _mm_or_si128(_mm_and_si128(_mm_slli_epi16(h, 8), _mm_set1_epi16((short)0x8000)),
                     _mm_and_si128(_mm_slli_epi16(h, 7), _mm_set1_epi16(0x3f80)));
    return _mm256_cvtph_ps(_mm_or_si128(h, _mm_and_si128(nan, _mm_set1_epi16(0x7e00))));
}

/* 8 E4M3 bytes (widened to int32 lanes) as the values of cism__e4m3_table:
   normal codes by their bits (exponent rebiased 7 -> 127), subnormal ones as
   m x 2^-9 (exact), the NaN codes as the table's. */
CISM__INLINE __m256 e4m3_8(__m256i b) {
    const __m256i e = _mm256_and_si256(_mm256_srli_epi32(b, 3), _mm256_set1_epi32(15)), m = _mm256_and_si256(b, _mm256_set1_epi32(7));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
    const __m256i nrm = _mm256_or_si256(sign, _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(120)), 23),
                                                              _mm256_slli_epi32(m, 20)));
    const __m256i sub = _mm256_or_si256(sign, _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(0.001953125f))));
    const __m256i nan = _mm256_cmpeq_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7f)), _mm256_set1_epi32(0x7f));
    __m256i v = _mm256_blendv_epi8(nrm, sub, _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
    if (!_mm256_testz_si256(nan, nan)) {
        const __m256i pn = _mm256_castps_si256(_mm256_set1_ps(cism__e4m3_table[0x7f]));
        const __m256i nn = _mm256_castps_si256(_mm256_set1_ps(cism__e4m3_table[0xff]));
        const __m256i neg = _mm256_cmpeq_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), _mm256_set1_epi32(0x80));
        v = _mm256_blendv_epi8(v, _mm256_blendv_epi8(pn, nn, neg), nan);
    }
    return _mm256_castsi256_ps(v);
}

/* int32 lanes of sum u * s over 4-byte groups (vpmaddubsw, vpmaddwd; u unsigned, no saturation by the callers' bounds) */
CISM__INLINE __m256i dot_u(__m256i u, __m256i s) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)); }

/* 4 activation bytes in every 32-bit lane of a 256-bit register */
CISM__INLINE __m256i bcast4y(const int8_t *q) {
    int32_t v;
    memcpy(&v, q, 4);
    return _mm256_set1_epi32(v);
}

#include "x86_x16_fmt.h"

/* ---- block decode (256-bit) ------------------------------------------------------------- */
/* 16 code bytes (low nibble: element j, high: j + 16) -> the 32 codes in order */
CISM__INLINE __m256i nibbles32(const uint8_t *p) {
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    v = _mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* The bit planes of q6 / q5 / q3 / q2 (quant.h). plane2: 8 bytes at p whose byte
   j holds element j + 8k's 2 bits at bits 2k..2k+1: element i's 2 bits in
   lane i (the bytes in each 64-bit lane k, shifted right by 2k, masked).
   bits32: the uint32 at p, bit i for element i: v in lane i where it is set,
   else 0 (AVX2: byte i/8 shuffled to lane i and tested against bit i%8;
   AVX-512: the uint32 is the byte mask). */
CISM__INLINE __m256i qint_plane2(const uint8_t *p) {
    int64_t pl;
    memcpy(&pl, p, 8);
    return _mm256_and_si256(_mm256_srlv_epi64(_mm256_set1_epi64x(pl), _mm256_setr_epi64x(0, 2, 4, 6)), _mm256_set1_epi8(3));
}
CISM__INLINE __m256i qint_bits32(const uint8_t *p, const char v) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    uint32_t qh;
    memcpy(&qh, p, 4);
    return _mm256_maskz_mov_epi8((__mmask32)qh, _mm256_set1_epi8(v));
#else
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3,
                                         3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201ull);
    int32_t qh;
    __m256i h;
    memcpy(&qh, p, 4);
    h = _mm256_shuffle_epi8(_mm256_set1_epi32(qh), sel);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit), _mm256_set1_epi8(v));
#endif
}

/* q6 / q5 / q3 / q2: a block's 32 codes (level + H: q6 0..63, q5 0..31, q3 0..7,
   q2 0..3) in order: q6 the nibbles as for q4 with plane2's bits 4-5 ORed in, q5
   the nibbles with bits32's bit 4, q3 plane2's bits 0-1 with bits32's bit 2, q2
   plane2 alone. The
   one decoder of these formats on both x86 tiers (decode and panel repack). */
CISM__INLINE __m256i qint_codes32(const uint8_t *blk, const int f) {
    if (f == F_Q2) return qint_plane2(blk + 2);
    if (f == F_Q3) return _mm256_or_si256(qint_plane2(blk + 6), qint_bits32(blk + 2, 4));
    if (f == F_Q6) return _mm256_or_si256(nibbles32(blk + 2), _mm256_slli_epi16(qint_plane2(blk + 18), 4));
    return _mm256_or_si256(nibbles32(blk + 6), qint_bits32(blk + 2, 0x10));
}

/* two blocks of 16 (8 code bytes each at p and p + 9) -> [b0 0..7, b1 0..7 | b0 8..15, b1 8..15] */
CISM__INLINE __m256i nibbles16x2(const uint8_t *p) {
    __m128i c = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)p), _mm_loadl_epi64((const __m128i *)(p + 9)));
    __m256i v = _mm256_broadcastsi128_si256(c);
    v = _mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* lane r = the sum of v[r]'s 8 lanes (r < 8), exact */
CISM__INLINE __m256i rowsum8(const __m256i v[8]) {
    __m256i t0 = _mm256_hadd_epi32(v[0], v[1]), t1 = _mm256_hadd_epi32(v[2], v[3]);
    __m256i t2 = _mm256_hadd_epi32(v[4], v[5]), t3 = _mm256_hadd_epi32(v[6], v[7]);
    __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* v[r] holds block b0 in lanes 0,1,4,5 and b1 in 2,3,6,7: s0 / s1 get the
   per-row sums of each, rows in lane order 0,1,4,5,2,3,6,7 */
CISM__INLINE void rowsum8x2(const __m256i v[8], __m256i *s0, __m256i *s1) {
    __m256i t0 = _mm256_hadd_epi32(v[0], v[1]), t1 = _mm256_hadd_epi32(v[2], v[3]);
    __m256i t2 = _mm256_hadd_epi32(v[4], v[5]), t3 = _mm256_hadd_epi32(v[6], v[7]);
    __m256i a = _mm256_add_epi32(_mm256_permute2x128_si256(t0, t1, 0x20), _mm256_permute2x128_si256(t0, t1, 0x31));
    __m256i b = _mm256_add_epi32(_mm256_permute2x128_si256(t2, t3, 0x20), _mm256_permute2x128_si256(t2, t3, 0x31));
    *s0 = _mm256_castps_si256(_mm256_shuffle_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), 0x88));
    *s1 = _mm256_castps_si256(_mm256_shuffle_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), 0xdd));
}

/* Block-16 formats: weight blocks 2i, 2i + 1 against activation block i. The
   activations are reordered to [0..7, 16..23 | 8..15, 24..31] to meet the
   codes as nibbles16x2 unpacks them. */
CISM__INLINE __m256i act16x2(const cism__act8 *a) {
    return _mm256_permute4x64_epi64(_mm256_loadu_si256((const __m256i *)a->q), 0xd8);
}

/* Every cache line of the bytes [p, e), hinted CISM__X16_PF_HINT (no result depends on it) */
CISM__INLINE void prefetch_range(uintptr_t p, uintptr_t e) {
    for (p &= ~(uintptr_t)63; p < e; p += 64) _mm_prefetch((const char *)p, CISM__X16_PF_HINT);
}

/* The interleaved kernels' prefetch at block b of a group (few tokens; none
   past pf_end): a block's share of the group CISM__X16_PF_DIST ahead, hinted
   CISM__X16_PF_HINT, and, while a loaded model streams its weights from
   memory (kernels.h cism__x16_streaming), that share again CISM__X16_PF_FAR
   ahead into L2. */
CISM__INLINE void x16_prefetch_block(const cism__x16 *g, const uint8_t *grp, int64_t b, uintptr_t pf_end) {
    uintptr_t pf, pe;
    cism__x16_prefetch_step(g, grp, b, CISM__X16_PF_DIST, pf_end, &pf, &pe);
    prefetch_range(pf, pe);
    if (CISM__X16_PF_FAR > 0 && CISM__X16_FAR_ON()) {
        cism__x16_prefetch_step(g, grp, b, CISM__X16_PF_FAR, pf_end, &pf, &pe);
        for (; pf < pe; pf += 64) _mm_prefetch((const char *)pf, _MM_HINT_T1);
    }
}

/* Row-layout calls of few tokens (decode, short verifies, batched decode)
   read the rows [r0, r1) once, 8 rows at a time, each of the 8 a stream: the
   hardware prefetchers fall behind (the real SmolLM2's q4a decode read ~6 GB/s
   here). rows_prefetch_start fetches the first CISM__X16_PF_DIST bytes of the
   range and returns its end; rows_prefetch8, before the 8 rows at wr, the next
   8 rows' bytes that distance ahead, never past end. */
CISM__INLINE uintptr_t rows_prefetch_start(const uint8_t *w, uint64_t rb, int64_t r0, int64_t r1) {
    const uintptr_t p = (uintptr_t)w + (uint64_t)r0 * rb, end = (uintptr_t)w + (uint64_t)r1 * rb;
    prefetch_range(p, p + CISM__X16_PF_DIST < end ? p + CISM__X16_PF_DIST : end);
    return end;
}
CISM__INLINE void rows_prefetch8(const uint8_t *wr, uint64_t rb, uintptr_t end) {
    const uintptr_t p = (uintptr_t)wr + CISM__X16_PF_DIST, e = p + 8 * rb;
    prefetch_range(p, e < end ? e : end);
}

/* fp16 scales of 8 rows (rb bytes apart) */
CISM__INLINE __m256 scales8_f16(const uint8_t *blk, uint64_t rb) {
    return _mm256_cvtph_ps(_mm_setr_epi16(ld16(blk), ld16(blk + rb), ld16(blk + 2 * rb), ld16(blk + 3 * rb), ld16(blk + 4 * rb),
                                          ld16(blk + 5 * rb), ld16(blk + 6 * rb), ld16(blk + 7 * rb)));
}

/* Block-32 decode, 8 rows: acc plus the block's terms from the rows' exact
   int32 sums s, their scales d (q4a: and minimums mn) and the activation
   block ab: s * (d * d_a), or for q4a (d * s + mn * sum) * d_a (the scalar
   order). */
CISM__INLINE __m256 combine8(__m256 acc, __m256i s, __m256 d, __m256 mn, const cism__act8 *ab, const int f) {
    if (f == F_Q4A) {
        __m256 dm = _mm256_add_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(s)), _mm256_mul_ps(mn, _mm256_set1_ps((float)ab->sum)));
        return _mm256_add_ps(acc, _mm256_mul_ps(dm, _mm256_set1_ps(ab->d)));
    }
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(ab->d))));
}
/* the same for one row (the remainders), the block's scales read at blk */
CISM__INLINE __m128 combine1(__m128 acc, int32_t s, const uint8_t *blk, const cism__act8 *ab, const int f) {
    if (f == F_Q4A) return _mm_add_ss(acc, _mm_set_ss((f16_f(blk) * (float)s + f16_f(blk + 2) * (float)ab->sum) * ab->d));
    return _mm_add_ss(acc, _mm_mul_ss(_mm_set_ss((float)s), _mm_set_ss(f16_f(blk) * ab->d)));
}

/* ---- prefill panels ------------------------------------------------------------------- */
/* A panel of PR rows x up to KC columns (the tier's layout: per block, PR f32
   scales (q4a: then PR f32 minimums), then B/4 chunks of PR rows x 4 bytes). */
typedef struct panel {
    int64_t nb;        /* blocks in this panel */
    int B;
    uint8_t *data;
} panel;

/* the levels of block b of a row as int8, B of them (q4a: its codes 0..15; q6, q5, q3, q2: code - H) */
CISM__INLINE void levels_of(const uint8_t *blk, int8_t *out, const int f) {
    if (f == F_Q8) {
        memcpy(out, blk + 2, 32);
    } else if (F_QINT(f)) {
        _mm256_storeu_si256((__m256i *)(void *)out, _mm256_sub_epi8(qint_codes32(blk, f), _mm256_set1_epi8((char)g_fmt[f].corr)));
    } else if (f == F_Q4A) {
        __m128i c = _mm_loadu_si128((const __m128i *)(blk + 4));
        _mm_storeu_si128((__m128i *)out, _mm_and_si128(c, _mm_set1_epi8(0x0f)));
        _mm_storeu_si128((__m128i *)(out + 16), _mm_and_si128(_mm_srli_epi16(c, 4), _mm_set1_epi8(0x0f)));
    } else if (g_fmt[f].block == 32) {
        __m128i c = _mm_loadu_si128((const __m128i *)(blk + 2));
        __m128i t = _mm_loadu_si128((const __m128i *)(f == F_Q4 ? g_q4_l : g_nl4_l));
        _mm_storeu_si128((__m128i *)out, _mm_shuffle_epi8(t, _mm_and_si128(c, _mm_set1_epi8(0x0f))));
        _mm_storeu_si128((__m128i *)(out + 16), _mm_shuffle_epi8(t, _mm_and_si128(_mm_srli_epi16(c, 4), _mm_set1_epi8(0x0f))));
    } else {
        __m128i c = _mm_loadl_epi64((const __m128i *)(blk + 1));
        __m128i u = _mm_and_si128(_mm_unpacklo_epi64(c, _mm_srli_epi16(c, 4)), _mm_set1_epi8(0x0f));
        _mm_storeu_si128((__m128i *)out, _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(f == F_Q4S ? g_q4_l : g_fp4_l)), u));
    }
}

/* Rows [r, r + nr) of a PR-row panel (the others zero), blocks [b0, b0 + nb):
   their levels into lv (row i at lv + i * KC) and their scales (q4a: and
   minimums) into the panel's block headers, PR floats each; the tier then
   transposes lv into its chunks. */
CISM__INLINE void panel_levels(const uint8_t *w, uint64_t rb, int64_t r, int nr, int64_t b0, int64_t nb, panel *p,
                               int8_t *lv, const int hdr, int f) {
    const int B = g_fmt[f].block, bb = g_fmt[f].bytes, jb = hdr + PR * B;
    float *sc = (float *)(void *)p->data;
    int64_t j;
    int i;
    p->nb = nb;
    p->B = B;
    for (i = 0; i < PR; i++) {
        const uint8_t *row = w + (uint64_t)(r + (i < nr ? i : 0)) * rb + b0 * bb;
        int8_t *li = lv + i * KC;
        for (j = 0; j < nb; j++) {
            if (i < nr) {
                switch (f) { /* constant per call: lets levels_of inline per format */
                case F_Q8: levels_of(row + j * bb, li + j * B, F_Q8); break;
                case F_Q4: levels_of(row + j * bb, li + j * B, F_Q4); break;
                case F_NL4: levels_of(row + j * bb, li + j * B, F_NL4); break;
                case F_Q4S: levels_of(row + j * bb, li + j * B, F_Q4S); break;
                case F_Q4A: levels_of(row + j * bb, li + j * B, F_Q4A); break;
                case F_Q6: levels_of(row + j * bb, li + j * B, F_Q6); break;
                case F_Q5: levels_of(row + j * bb, li + j * B, F_Q5); break;
                case F_Q3: levels_of(row + j * bb, li + j * B, F_Q3); break;
                case F_Q2: levels_of(row + j * bb, li + j * B, F_Q2); break;
                default: levels_of(row + j * bb, li + j * B, F_FP4); break;
                }
                sc[(j * jb) / 4 + i] = scale_of(row + j * bb, f);
                if (f == F_Q4A) sc[(j * jb) / 4 + PR + i] = f16_f(row + j * bb + 2);
            } else {
                memset(li + j * B, 0, (size_t)B);
                sc[(j * jb) / 4 + i] = 0.0f;
                if (f == F_Q4A) sc[(j * jb) / 4 + PR + i] = 0.0f;
            }
        }
    }
}

#endif
