/* kernels_avx512_quant.c - the AVX-512 tier's kernels of the packed weight
 * formats (q8, q4, nl4, q4a, q6, q5: blocks of 32; q4s, fp4: blocks of 16) against int8
 * activation blocks, built with the avx512 tier's flags (VNNI: vpdpbusd) and
 * filled in by cism__kernels_fill_avx512.
 *
 * Arithmetic of one output element (the same in every tile shape, in the
 * AVX2 tier, and in the scalar tier up to FMA): per weight block b, the exact
 * int32 sum s_b = sum level * q_act; then, block after block,
 *     acc = fma((float)s_b, d_w,b * d_act,b, acc)        (acc starts at 0)
 * The scalar tier rounds the product before adding (no FMA); nothing else
 * differs. vpdpbusd multiplies unsigned by signed bytes, so the weights enter
 * as unsigned values level + c (q4/q4s: their codes, c = 8; q8, nl4, fp4:
 * c = 128) and the accumulator starts at -c * (sum of the activations of each
 * lane), which makes every int32 lane exact (a q8 code of -128, as GGUF Q8_0
 * files may hold, enters as 0). q4a's codes 0..15 enter as they are
 * (c = 0) and its minimum adds m * (sum of the block's activations):
 *     acc = acc + (d_w,b * (float)s_b + m_w,b * (float)sum_b) * d_act,b
 * the scalar tier's operations in its order.
 *
 * Decode (one token) reads the rows where they are: 8 rows at a time, one
 * 256-bit dot per row and block, the 8 row sums transposed into one register
 * (lane = row), the 8 rows' scales gathered. Prefill (several tokens) repacks
 * 16 rows x KC columns at a time into a panel of level + 128 bytes in 4-byte
 * chunks (16 rows in one 512-bit register) with f32 scales, then runs a
 * register tile of 16 rows x T tokens over it: one weight load per chunk, one
 * vpdpbusd per token with the activations broadcast. The panel is rebuilt
 * once per token block, so each weight byte is read from memory once per block
 * of tokens. The interleaved dtypes are read in place, 16 rows per register
 * (x16_tile, which also adds the outlier entries of few tokens; tested
 * against the scalar tier on AVX-512 hosts only, as qemu runs no AVX-512). */
#include "tier_common.h"
#include "quant.h"

#include <immintrin.h>
#include <string.h>

#define KC 256        /* columns of a prefill panel: 8 blocks of 32, 16 of 16 */
#define PR 16         /* rows of a panel */
#define TT 8          /* tokens of the prefill register tile */

#include "x86_quant.h"
#include "avx512_x16_block.h"

/* level + 128 of each code, for the codebook formats */
static const int8_t g_nl4_u[16] = {16, 38, 57, 73, 87, 101, 113, 125, -119, -107, -94, -80, -65, -47, -27, -1};
static const int8_t g_fp4_u[16] = {-128, -127, -126, -125, -124, -122, -120, -116,
                                   -128, 127, 126, 125, 124, 122, 120, 116};
/* E4M3 byte e in the low byte of each 32-bit lane -> e4m3(e) * 2^-8 as f32:
   the bits s eeee mmm moved to s 0eeee mmm0000000 are the fp16 of exactly
   that value (normal and subnormal alike); the NaN codes 0x7f/0xff become NaN
   (never written by the quantizer; a damaged file's NaN propagates as in the
   scalar tier). */
CISM__INLINE __m256 e4m3_lanes(__m256i v) {
    __m256i h = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi32(v, 8), _mm256_set1_epi32(0x8000)),
                                _mm256_and_si256(_mm256_slli_epi32(v, 7), _mm256_set1_epi32(0x3f80)));
    __m256i nan = _mm256_cmpeq_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7f)), _mm256_set1_epi32(0x7f)); /* 0x7f, 0xff */
    h = _mm256_or_si256(h, _mm256_and_si256(nan, _mm256_set1_epi32(0x7e00)));
    return _mm256_cvtph_ps(_mm256_cvtepi32_epi16(h));
}


/* ---- decode: 8 rows x 1 token ------------------------------------------------------------ */
/* unsigned weight bytes of block b of a row (block-32 formats) */
CISM__INLINE __m256i wu32(const uint8_t *blk, const int f) {
    if (f == F_Q8) return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)), _mm256_set1_epi8((char)0x80));
    if (f == F_Q4) return nibbles32(blk + 2);
    if (f == F_Q4A) return nibbles32(blk + 4);
    if (F_QINT(f)) return qint_codes32(blk, f); /* level + corr (H) */
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)g_nl4_u)), nibbles32(blk + 2));
}

/* unsigned weight bytes of blocks b, b + 1 (block-16 formats; blk = block b) */
CISM__INLINE __m256i wu16x2(const uint8_t *blk, const int f) {
    __m256i c = nibbles16x2(blk + 1);
    if (f == F_Q4S) return c;
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)g_fp4_u)), c);
}

/* One token, rows [r, r + 8): y[0..8) (block-32 formats) */
CISM__INLINE void gemv8_b32(const uint8_t *w, uint64_t rb, int64_t nb, const cism__act8 *a, float *y, const int f) {
    const __m256i corr = _mm256_set1_epi8((char)g_fmt[f].corr);
    __m256 acc = _mm256_setzero_ps();
    int64_t b;
    int r;
    for (b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * g_fmt[f].bytes;
        __m256i av = _mm256_loadu_si256((const __m256i *)a[b].q);
        __m256i neg = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), corr, av));
        __m256i v[8], s;
        for (r = 0; r < 8; r++) v[r] = _mm256_dpbusd_epi32(neg, wu32(blk + (uint64_t)r * rb, f), av);
        s = rowsum8(v);
        acc = combine8(acc, s, scales8_f16(blk, rb), f == F_Q4A ? scales8_f16(blk + 2, rb) : _mm256_setzero_ps(), &a[b], f);
    }
    _mm256_storeu_ps(y, acc);
}

/* T tokens (T <= GEMV_TOKENS_MAX), rows [r, r + 8): each block's weights are
   decoded once for all T tokens (batched decode: several sequences per weight
   read); per token the arithmetic of gemv8_b32 exactly, so the same bits. */
#define GEMV_TOKENS_MAX 8
CISM__INLINE void gemv8_b32_t(const uint8_t *w, uint64_t rb, int64_t nb, const cism__act8 *const *a, float *y, int64_t ldy,
                              const int f, const int T) {
    const __m256i corr = _mm256_set1_epi8((char)g_fmt[f].corr);
    __m256 acc[GEMV_TOKENS_MAX];
    int64_t b;
    int r, t;
    for (t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * g_fmt[f].bytes;
        __m256i wv[8];
        __m256 d, mn = _mm256_setzero_ps();
        for (r = 0; r < 8; r++) wv[r] = wu32(blk + (uint64_t)r * rb, f);
        d = scales8_f16(blk, rb);
        if (f == F_Q4A) mn = scales8_f16(blk + 2, rb);
        for (t = 0; t < T; t++) {
            const cism__act8 *ab = &a[t][b];
            __m256i av = _mm256_loadu_si256((const __m256i *)ab->q);
            __m256i neg = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), corr, av));
            __m256i v[8], s;
            for (r = 0; r < 8; r++) v[r] = _mm256_dpbusd_epi32(neg, wv[r], av);
            s = rowsum8(v);
            acc[t] = combine8(acc[t], s, d, mn, ab, f);
        }
    }
    for (t = 0; t < T; t++) _mm256_storeu_ps(y + t * ldy, acc[t]);
}

/* One token, one row (the remainders; the same arithmetic per row) */
CISM__INLINE float gemv1_b32(const uint8_t *w, int64_t nb, const cism__act8 *a, const int f) {
    const __m256i corr = _mm256_set1_epi8((char)g_fmt[f].corr);
    __m128 acc = _mm_setzero_ps();
    int64_t b;
    for (b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * g_fmt[f].bytes;
        __m256i av = _mm256_loadu_si256((const __m256i *)a[b].q);
        __m256i neg = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), corr, av));
        __m256i v = _mm256_dpbusd_epi32(neg, wu32(blk, f), av);
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        int32_t s;
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
        s = _mm_cvtsi128_si32(h);
        acc = combine1(acc, s, blk, &a[b], f);
    }
    return _mm_cvtss_f32(acc);
}

CISM__INLINE void gemv8_b16(const uint8_t *w, uint64_t rb, int64_t nb, const cism__act8 *a, float *y, const int f) {
    const __m256i corr = _mm256_set1_epi8((char)g_fmt[f].corr);
    /* rows in lane order 0,1,4,5,2,3,6,7 (rowsum8x2) */
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7), _mm256_set1_epi32((int)rb));
    __m256 acc = _mm256_setzero_ps();
    int64_t b;
    int r;
    for (b = 0; b + 2 <= nb; b += 2) {
        const uint8_t *blk = w + b * 9;
        const cism__act8 *ab = a + b / 2;
        __m256i av = act16x2(ab);
        __m256i neg = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), corr, av));
        __m256i v[8], s0, s1;
        __m256 da = _mm256_set1_ps(ab->d);
        for (r = 0; r < 8; r++) v[r] = _mm256_dpbusd_epi32(neg, wu16x2(blk + (uint64_t)r * rb, f), av);
        rowsum8x2(v, &s0, &s1);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(e4m3_lanes(_mm256_i32gather_epi32((const int *)(const void *)blk, idx, 1)), da)));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(s1), _mm256_mul_ps(e4m3_lanes(_mm256_i32gather_epi32((const int *)(const void *)(blk + 9), idx, 1)), da)));
    }
    if (b < nb) { /* an odd last block: the first half of an activation block */
        const uint8_t *blk = w + b * 9;
        const cism__act8 *ab = a + b / 2;
        __m128i av = _mm_loadu_si128((const __m128i *)ab->q);
        __m128i neg = _mm_sub_epi32(_mm_setzero_si128(), _mm_dpbusd_epi32(_mm_setzero_si128(), _mm256_castsi256_si128(corr), av));
        __m256i v[8], s;
        for (r = 0; r < 8; r++) {
            const uint8_t *p = blk + (uint64_t)r * rb;
            __m128i c = _mm_loadl_epi64((const __m128i *)(p + 1));
            __m128i u = _mm_and_si128(_mm_unpacklo_epi64(c, _mm_srli_epi16(c, 4)), _mm_set1_epi8(0x0f));
            if (f == F_FP4) u = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)g_fp4_u), u);
            v[r] = _mm256_zextsi128_si256(_mm_dpbusd_epi32(neg, u, av));
        }
        s = rowsum8(v); /* rows in natural order: permute to the lane order */
        s = _mm256_permutevar8x32_epi32(s, _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(e4m3_lanes(_mm256_i32gather_epi32((const int *)(const void *)blk, idx, 1)),
                                            _mm256_set1_ps(ab->d))));
    }
    /* back to row order */
    _mm256_storeu_ps(y, _mm256_permutevar8x32_ps(acc, _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7)));
}

CISM__INLINE float gemv1_b16(const uint8_t *w, int64_t nb, const cism__act8 *a, const int f) {
    const __m128i corr = _mm_set1_epi8((char)g_fmt[f].corr);
    __m128 acc = _mm_setzero_ps();
    int64_t b;
    for (b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * 9;
        const cism__act8 *ab = a + b / 2;
        __m128i av = _mm_loadu_si128((const __m128i *)(ab->q + (b & 1) * 16));
        __m128i neg = _mm_sub_epi32(_mm_setzero_si128(), _mm_dpbusd_epi32(_mm_setzero_si128(), corr, av));
        __m128i c = _mm_loadl_epi64((const __m128i *)(blk + 1));
        __m128i u = _mm_and_si128(_mm_unpacklo_epi64(c, _mm_srli_epi16(c, 4)), _mm_set1_epi8(0x0f));
        __m128i h;
        if (f == F_FP4) u = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)g_fp4_u), u);
        h = _mm_dpbusd_epi32(neg, u, av);
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
        acc = _mm_add_ss(acc, _mm_mul_ss(_mm_set_ss((float)_mm_cvtsi128_si32(h)), _mm_set_ss(e4m3_f(blk[0]) * ab->d)));
    }
    return _mm_cvtss_f32(acc);
}

CISM__INLINE void gemv(const uint8_t *w, uint64_t rb, int64_t cols, const cism__act8 *a, float *y, int64_t r0, int64_t r1,
                       const int f) {
    int64_t nb = (cols + g_fmt[f].block - 1) / g_fmt[f].block, r;
    if (g_fmt[f].block == 32) {
        const uintptr_t end = rows_prefetch_start(w, rb, r0, r1);
        for (r = r0; r + 8 <= r1; r += 8) {
            rows_prefetch8(w + (uint64_t)r * rb, rb, end);
            gemv8_b32(w + (uint64_t)r * rb, rb, nb, a, y + r, f);
        }
        for (; r < r1; r++) y[r] = gemv1_b32(w + (uint64_t)r * rb, nb, a, f);
    } else {
        for (r = r0; r + 8 <= r1; r += 8) gemv8_b16(w + (uint64_t)r * rb, rb, nb, a, y + r, f);
        for (; r < r1; r++) y[r] = gemv1_b16(w + (uint64_t)r * rb, nb, a, f);
    }
}

/* ---- prefill: panels of 16 rows x KC columns --------------------------------------------- */
/* Block j of a panel (B = 16 or 32 columns): 16 f32 scales (q4a: then 16 f32
   minimums), then B/4 chunks of 16 rows x 4 bytes (level + 128; q4a: code + 128). */
#define PANEL_HDR(asym) ((asym) ? 128 : 64)
#define PANEL_BYTES (KC / 16 * (64 + 16 * 16))   /* the larger of the block-16 and block-32 layouts */
typedef __mmask16 rowsel; /* rows of a tile that are stored */
CISM__INLINE rowsel rows_sel(int nr) { return (__mmask16)(nr == 16 ? 0xffffu : (1u << nr) - 1u); }

/* Rows [r, r + nr) (nr <= 16; the others zero) and blocks [b0, b0 + nb) into p */
static void pack_panel(const uint8_t *w, uint64_t rb, int64_t r, int nr, int64_t b0, int64_t nb, panel *p, int f) {
    const int B = g_fmt[f].block, hdr = PANEL_HDR(f == F_Q4A), jb = hdr + 16 * B;
    int8_t lv[PR][KC];
    int64_t j;
    int c;
    panel_levels(w, rb, r, nr, b0, nb, p, &lv[0][0], hdr, f);
    { /* transpose into 4-byte chunks of 16 rows, biased to unsigned */
        const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32(KC));
        for (j = 0; j < nb; j++)
            for (c = 0; c < B / 4; c++) {
                __m512i v = _mm512_i32gather_epi32(idx, (const void *)(&lv[0][0] + j * B + c * 4), 1);
                _mm512_storeu_si512((void *)(p->data + j * jb + hdr + c * 64), _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80)));
            }
    }
}

/* -128 * (sum of the activations of weight block j's columns), for every lane */
CISM__INLINE __m512i neg_corr(const cism__act8 *a, int64_t j, const int B) {
    if (B == 32) return _mm512_set1_epi32(-128 * a[j].sum);
    {
        __m128i q = _mm_loadu_si128((const __m128i *)(a[j / 2].q + (j & 1) * 16));
        __m128i s = _mm_sad_epu8(_mm_xor_si128(q, _mm_set1_epi8((char)0x80)), _mm_setzero_si128());
        int32_t sum = _mm_cvtsi128_si32(_mm_add_epi64(s, _mm_unpackhi_epi64(s, s))) - 16 * 128;
        return _mm512_set1_epi32(-128 * sum);
    }
}

/* y[t][0..16) (+)= panel . tokens t < T; first: start from 0, else from y.
   Block j of the panel covers activation block (k0 + j*B) / 32. */
CISM__INLINE void tile(const panel *p, const cism__act8 *const *a, int64_t jb0, float *y, int64_t ldy, rowsel m,
                       int first, const int T, const int B, const int asym) {
    __m512 facc[TT];
    __m512i iacc[TT];
    const int hdr = PANEL_HDR(asym), jb = hdr + 16 * B;
    int64_t j;
    int t, c;
    for (t = 0; t < T; t++) facc[t] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, y + t * ldy);
    for (j = 0; j < p->nb; j++) {
        const uint8_t *blk = p->data + j * jb;
        int64_t ja = jb0 + j; /* weight block index in the row */
        __m512 sc = _mm512_loadu_ps((const float *)(const void *)blk);
        for (t = 0; t < T; t++) iacc[t] = neg_corr(a[t], ja, B);
        for (c = 0; c < B / 4; c++) {
            __m512i wv = _mm512_loadu_si512((const void *)(blk + hdr + c * 64));
            for (t = 0; t < T; t++) {
                const int8_t *q = a[t][(ja * B) / 32].q + (ja * B) % 32 + c * 4;
                int32_t q4;
                memcpy(&q4, q, 4);
                iacc[t] = _mm512_dpbusd_epi32(iacc[t], wv, _mm512_set1_epi32(q4));
            }
        }
        if (asym) { /* (d * s + m * sum) * d_a: the scalar order */
            __m512 mn = _mm512_loadu_ps((const float *)(const void *)(blk + 64));
            for (t = 0; t < T; t++) {
                __m512 v = _mm512_add_ps(_mm512_mul_ps(sc, _mm512_cvtepi32_ps(iacc[t])), _mm512_mul_ps(mn, _mm512_set1_ps((float)a[t][ja].sum)));
                facc[t] = _mm512_add_ps(facc[t], _mm512_mul_ps(v, _mm512_set1_ps(a[t][ja].d)));
            }
        } else {
            for (t = 0; t < T; t++)
                facc[t] = _mm512_add_ps(facc[t], _mm512_mul_ps(_mm512_cvtepi32_ps(iacc[t]), _mm512_mul_ps(sc, _mm512_set1_ps(a[t][(ja * B) / 32].d))));
        }
    }
    for (t = 0; t < T; t++) _mm512_mask_storeu_ps(y + t * ldy, m, facc[t]);
}

/* ---- interleaved dtypes: 16 rows per 512-bit register */
CISM__INLINE __m512i bcast4(const int8_t *q) {
    int32_t v;
    memcpy(&v, q, 4);
    return _mm512_set1_epi32(v);
}

/* x86_x16.h: ocol and x16_place (a column's place in a group) and x16outl (a
   call's outlier entries); its 256-bit kernels are the AVX2 tier's */
#include "x86_x16.h"

/* 16 E4M3 bytes (widened to int32 lanes) as the values of cism__e4m3_table:
   x86_quant.h's e4m3_8 on each half */
CISM__INLINE __m512 e4m3_16(__m512i b) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(e4m3_8(_mm512_castsi512_si256(b))), e4m3_8(_mm512_extracti64x4_epi64(b, 1)), 1);
}

/* Column p of a group, decoded exactly: q8x16: the f16 scales widened, the
   codes sign-extended, their product; q4sx16: the E4M3 scales times scale_mul, the nibbles through the levels, their product. */
CISM__INLINE __m512 x16_col(const uint8_t *grp, int64_t code, int64_t scale, int shift, int q8, __m512 levels, __m512 smul) {
    __m512i q = _mm512_loadu_si512((const void *)(grp + code));
    if (q8) {
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(grp + scale)));
        q = _mm512_sra_epi32(_mm512_sll_epi32(q, _mm_cvtsi32_si128(shift)), _mm_cvtsi32_si128(24));
        return _mm512_mul_ps(d, _mm512_cvtepi32_ps(q));
    } else {
        const __m512i si = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(grp + scale)));
        const __m512 d = _mm512_mul_ps(e4m3_16(si), smul);
        q = _mm512_and_si512(_mm512_srl_epi32(q, _mm_cvtsi32_si128(shift)), _mm512_set1_epi32(15));
        return _mm512_mul_ps(d, _mm512_permutexvar_ps(q, levels));
    }
}

/* q4ax16: the scales d, m of 16 rows (row i's at 4i, 4i + 2 of the scale
   line at sp), widened exactly; a column of their block, d * code + m */
CISM__INLINE __m512 x16_q4a_dm(const uint8_t *sp, __m512 *m) {
    const __m512i dm = _mm512_loadu_si512((const void *)sp);
    *m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
}
CISM__INLINE __m512 x16_q4a_code16(const uint8_t *grp, const ocol *p, __m512 d, __m512 m) {
    const __m512i q = _mm512_and_si512(_mm512_srl_epi32(_mm512_loadu_si512((const void *)(grp + p->code)), _mm_cvtsi32_si128(p->shift)),
                                       _mm512_set1_epi32(15));
    return _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(q)), m);
}

/* The 16 rows of a column at p (x16_place) of q4ax16, q6x16, q5x16, decoded
   exactly as act_outliers.c: q4ax16 d * code + m (the product, then the sum),
   q6x16 / q5x16 d * level (one exact product): x86_x16.h's x16_q4a_col8 and
   x16_qint_col8 on 16 rows at once. */
CISM__INLINE __m512 x16_col32(const uint8_t *grp, const ocol *p, const int xf) {
    const __m512i v = _mm512_loadu_si512((const void *)(grp + p->code));
    __m512i q = _mm512_and_si512(_mm512_srl_epi32(v, _mm_cvtsi32_si128(p->shift)), _mm512_set1_epi32(X16_PLANE(xf) ? 3 : 15));
    if (xf == X16_Q4A) {
        __m512 m;
        const __m512 d = x16_q4a_dm(grp + p->scale, &m);
        return x16_q4a_code16(grp, p, d, m);
    } else {
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(grp + p->scale)));
        if (xf != X16_Q2) { /* q2x16: no high bits */
            const __m512i hb = _mm512_and_si512(_mm512_srl_epi32(_mm512_loadu_si512((const void *)(grp + p->hcode)), _mm_cvtsi32_si128(p->hshift)),
                                                _mm512_set1_epi32(xf == X16_Q6 ? 3 : 1));
            q = _mm512_or_si512(q, _mm512_slli_epi32(hb, xf == X16_Q3 ? 2 : 4));
        }
        return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(q, _mm512_set1_epi32(X16_HALF(xf)))));
    }
}

/* Column p of a group of any interleaved dtype (levels, smul: q4sx16's) */
CISM__INLINE __m512 x16_col16(const uint8_t *grp, const ocol *p, const int xf, __m512 levels, __m512 smul) {
    if (xf == X16_Q4A || X16_QINT(xf)) return x16_col32(grp, p, xf);
    return x16_col(grp, p->code, p->scale, p->shift, xf == X16_Q8, levels, smul);
}

/* Tokens t < T against one group of 16 rows: y[t * ldy + i] for the rows i in
   mask m. Each int32 lane sums one row's block exactly (the chunks' order does
   not matter); NA independent accumulators per token keep vpdpbusd's latency
   hidden when T is small. A block's weights are B rows (avx512_x16_block.h:
   row k holds elements 4k..4k+3 of the 16 rows as level + c), each against
   the tokens' activations 4k..; the accumulator starts at -c times their sum
   (q4s: its half block's). */
CISM__INLINE void x16_tile(const uint8_t *grp, const cism__x16 *g, const cism__act8 *const *a, const int32_t *const *hs,
                           float *y, int64_t ldy, __mmask16 m, uintptr_t pf_end, const x16outl *ol, int64_t ot, const int T,
                           const int xf) {
    const int NA = T == 1 ? 4 : T == 2 ? 2 : 1;
    __m512 facc[TT];
    __m512i iacc[TT][4];
    int64_t b;
    int t, c, k;
    for (t = 0; t < T; t++) facc[t] = _mm512_setzero_ps();
    for (b = 0; b < g->nb; b++) {
        const uint8_t *cb = cism__x16_codes(g, grp, b);
        __m512 mn = _mm512_setzero_ps();
        __m512 sc = x16_scales(cism__x16_scales(g, grp, b), xf, &mn);
        for (t = 0; t < T; t++) {
            iacc[t][0] = _mm512_set1_epi32(xf == X16_Q8 ? -128 * a[t][b].sum : xf == X16_Q4S ? -8 * hs[t][b]
                                           : X16_QINT(xf) ? -X16_HALF(xf) * a[t][b].sum : 0);
            for (k = 1; k < NA; k++) iacc[t][k] = _mm512_setzero_si512();
        }
        if (pf_end && CISM__X16_PF_DIST > 0) { /* few tokens: fetch ahead (the hardware prefetcher alone falls behind), not past */
            /* this call's rows (another thread's); a block's share of the group, scales included, so the    */
            /* sweep covers every line of the following groups                                                */
            x16_prefetch_block(g, grp, b, pf_end);
        }
        if (xf == X16_Q8) { /* B row c (16 rows' elements 4c..4c+3, level + 128) against activations 4c.. */
            for (c = 0; c < 8; c++) {
                __m512i wv = _mm512_xor_si512(_mm512_loadu_si512((const void *)(cb + c * 64)), _mm512_set1_epi8((char)0x80));
                for (t = 0; t < T; t++) iacc[t][c % NA] = _mm512_dpbusd_epi32(iacc[t][c % NA], wv, bcast4(a[t][b].q + 4 * c));
            }
        } else { /* chunk c's rows c and nc + c, each against its activations, as they are decoded */
            const x16_planes pl = x16_planes_of(cb, xf);
            const int nc = x16_nibble_chunks(xf);
            const int8_t *q[TT];
            for (t = 0; t < T; t++) q[t] = xf == X16_Q4S ? a[t][b / 2].q + (b & 1) * 16 : a[t][b].q;
            for (c = 0; c < nc; c++) {
                __m512i lo, hi;
                x16_chunk_rows(cb, &pl, c, xf, &lo, &hi);
                for (t = 0; t < T; t++) {
                    iacc[t][(2 * c) % NA] = _mm512_dpbusd_epi32(iacc[t][(2 * c) % NA], lo, bcast4(q[t] + 4 * c));
                    iacc[t][(2 * c + 1) % NA] = _mm512_dpbusd_epi32(iacc[t][(2 * c + 1) % NA], hi, bcast4(q[t] + 4 * (nc + c)));
                }
            }
        }
        for (t = 0; t < T; t++) {
            __m512i s = iacc[t][0];
            for (k = 1; k < NA; k++) s = _mm512_add_epi32(s, iacc[t][k]);
            if (xf == X16_Q4A) { /* (d * s + m * sum) * d_a: the scalar order */
                const __m512 v = _mm512_add_ps(_mm512_mul_ps(sc, _mm512_cvtepi32_ps(s)),
                                               _mm512_mul_ps(mn, _mm512_set1_ps((float)a[t][b].sum)));
                facc[t] = _mm512_add_ps(facc[t], _mm512_mul_ps(v, _mm512_set1_ps(a[t][b].d)));
            } else {
                const float da = xf == X16_Q4S ? a[t][b / 2].d : a[t][b].d;
                facc[t] = _mm512_add_ps(facc[t], _mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(sc, _mm512_set1_ps(da))));
            }
        }
    }
    if (ol) { /* the few tokens' outlier entries, in table order, while the group is in L1 (x86_x16.h x16outl);
                 several tokens: each distinct column decoded once for all */
        const __m512 levels = _mm512_loadu_ps(ol->lv), smul = _mm512_set1_ps(_mm256_cvtss_f32(ol->smul));
        __m512 col[CISM__GEMV_OUTL_TOKENS * CISM__A8_MAX_OUT];
        for (k = 0; T > 1 && k < ol->nd; k++) col[k] = x16_col16(grp, &ol->p[k], xf, levels, smul);
        for (t = 0; t < T; t++) {
            const cism__act8_out *o = ol->o[ot + t];
            const uint8_t *ix = ol->ix[ot + t];
            for (k = 0; k < o->n; k++)
                facc[t] = _mm512_fmadd_ps(_mm512_set1_ps(o->val[k]),
                                          T > 1 ? col[ix[k]] : x16_col16(grp, &ol->p[ix[k]], xf, levels, smul), facc[t]);
        }
    }
    for (t = 0; t < T; t++) _mm512_mask_storeu_ps(y + t * ldy, m, facc[t]);
}

typedef __mmask16 x16mask; /* rows of a group that are stored */
CISM__INLINE void x16_group(const uint8_t *grp, const cism__x16 *g, const void *xq, int64_t ldq, int64_t cols, int64_t t0,
                            int64_t t1, float *y, int64_t ldy, x16mask m, uintptr_t pf_end, const x16outl *ol, const int xf) {
    const cism__act8 *a[TT];
    const int32_t *hs[TT];
    int64_t t;
    int i;
    for (t = t0; t + TT <= t1; t += TT) {
        for (i = 0; i < TT; i++) {
            a[i] = cism__act8_row(xq, ldq, t + i);
            hs[i] = cism__act8_half_sums((void *)(uintptr_t)a[i], cols);
        }
        x16_tile(grp, g, a, hs, y + t * ldy, ldy, m, pf_end, ol, t, TT, xf);
    }
    for (i = 0; t + i < t1; i++) {
        a[i] = cism__act8_row(xq, ldq, t + i);
        hs[i] = cism__act8_half_sums((void *)(uintptr_t)a[i], cols);
    }
#define X16_TILE_T(T) x16_tile(grp, g, a, hs, y + t * ldy, ldy, m, pf_end, ol, t, T, xf)
    X86_TOKEN_TAIL(t1 - t, X16_TILE_T)
#undef X16_TILE_T
}

#include "x86_quant_entries.h"
#include "x86_quant_float.h"

/* The outlier rule's block statistics (kernels.h act_block_top2) of a block
   whose halves' magnitudes (sign cleared, compared as unsigned integers) are
   a, c: the lane-wise max and min; the largest is the max of the maxes and the
   second the max of the mins and of the maxes but the first lane holding the
   largest (the largest again when two lanes hold it): the two largest of the
   32, as the C tournament, in two reductions. */
CISM__INLINE void top2_halves(__m512i a, __m512i c, float *m1, float *m2) {
    const __m512i hi = _mm512_max_epu32(a, c), lo = _mm512_min_epu32(a, c);
    const uint32_t top = _mm512_reduce_max_epu32(hi);
    const uint32_t at = _mm512_cmpeq_epu32_mask(hi, _mm512_set1_epi32((int)top));
    const __mmask16 rest = (__mmask16)~(at & (0u - at)); /* every lane but the first with the largest */
    const uint32_t second = _mm512_reduce_max_epu32(_mm512_mask_max_epu32(lo, rest, lo, hi));
    memcpy(m1, &top, 4);
    memcpy(m2, &second, 4);
}
static void act_block_top2(const float *x, int64_t nb, float *m1, float *m2) {
    const __m512i abs = _mm512_set1_epi32(0x7fffffff);
    int64_t b;
    for (b = 0; b < nb; b++)
        top2_halves(_mm512_and_si512(_mm512_loadu_si512((const void *)(x + b * CISM__A8_BLOCK)), abs),
                    _mm512_and_si512(_mm512_loadu_si512((const void *)(x + b * CISM__A8_BLOCK + 16)), abs), &m1[b], &m2[b]);
}

/* kernels.h act_block_take: the block read from v with the lanes taken
   cleared (x itself: no store just before the load), the first lane holding
   the largest found by two compares, not a search; after it is cleared the largest is the old second
   (the largest of the rest of the multiset), and the second is that value
   again if two lanes still hold it, else the largest of the lanes below it:
   one reduction where act_block_top2 takes two. */
static int act_block_take(const float *v, uint32_t *taken, float *m1, float *m2, float *out) {
    const __m512i abs = _mm512_set1_epi32(0x7fffffff);
    const __m512i v0 = _mm512_loadu_si512((const void *)v), v1 = _mm512_loadu_si512((const void *)(v + 16));
    __m512i a = _mm512_maskz_and_epi32((__mmask16)~*taken, v0, abs);
    __m512i c = _mm512_maskz_and_epi32((__mmask16)~(*taken >> 16), v1, abs);
    uint32_t top, sec, at, eq;
    int i;
    memcpy(&top, m1, 4);
    memcpy(&sec, m2, 4);
    at = (uint32_t)_mm512_cmpeq_epu32_mask(a, _mm512_set1_epi32((int)top)) |
         (uint32_t)_mm512_cmpeq_epu32_mask(c, _mm512_set1_epi32((int)top)) << 16;
    i = cism__low_bit(at);
    at &= 0u - at;
    *taken |= at;
    _mm512_storeu_si512((void *)out, _mm512_maskz_mov_epi32((__mmask16)~*taken, v0)); /* whole vectors: the quantizer's loads forward */
    _mm512_storeu_si512((void *)(out + 16), _mm512_maskz_mov_epi32((__mmask16)~(*taken >> 16), v1));
    a = _mm512_maskz_mov_epi32((__mmask16)~at, a);
    c = _mm512_maskz_mov_epi32((__mmask16)~(at >> 16), c);
    eq = (uint32_t)_mm512_cmpeq_epu32_mask(a, _mm512_set1_epi32((int)sec)) |
         (uint32_t)_mm512_cmpeq_epu32_mask(c, _mm512_set1_epi32((int)sec)) << 16;
    memcpy(m1, &sec, 4);
    if (!(eq & (eq - 1))) { /* one lane (or none: sec is 0) holds it: the largest of the others */
        const uint32_t rest = _mm512_reduce_max_epu32(_mm512_max_epu32(_mm512_maskz_mov_epi32((__mmask16)~eq, a),
                                                                       _mm512_maskz_mov_epi32((__mmask16)~(eq >> 16), c)));
        memcpy(m2, &rest, 4);
    }
    return i;
}

/* ---- activation quantization (bit-identical to the scalar tier) ---------------------------- */
/* 16 values times the block's factor vi, as int32 codes: rounded half away
   from zero (quant.h CISM__HALF_BELOW), NaN (a NaN input, or inf * 0) -> 0,
   clamped to [-127, 127] */
CISM__INLINE __m512i quant16(__m512 x, __m512 vi) {
    const __m512 v = _mm512_mul_ps(x, vi);
    const __m512 s = _mm512_add_ps(v, _mm512_or_ps(_mm512_and_ps(v, _mm512_castsi512_ps(_mm512_set1_epi32(INT32_MIN))),
                                                  _mm512_set1_ps(CISM__HALF_BELOW)));
    const __m512i qi = _mm512_maskz_cvttps_epi32(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), s);
    return _mm512_max_epi32(_mm512_min_epi32(qi, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
}

/* The largest of each of four blocks' 16 lanes (h[b]), in every float of
   128-bit lane b of the result: one shuffle tree for the four (the same
   values as four reductions; max is exact). */
CISM__INLINE __m512 max4_blocks(const __m512 h[4]) {
    const __m512 t01 = _mm512_max_ps(_mm512_shuffle_f32x4(h[0], h[1], 0x44), _mm512_shuffle_f32x4(h[0], h[1], 0xee));
    const __m512 t23 = _mm512_max_ps(_mm512_shuffle_f32x4(h[2], h[3], 0x44), _mm512_shuffle_f32x4(h[2], h[3], 0xee));
    __m512 u = _mm512_max_ps(_mm512_shuffle_f32x4(t01, t23, 0x88), _mm512_shuffle_f32x4(t01, t23, 0xdd));
    u = _mm512_max_ps(u, _mm512_permute_ps(u, 0x4e));
    return _mm512_max_ps(u, _mm512_permute_ps(u, 0xb1));
}

/* Four whole blocks at x into a[0..3] and their half sums hs[0..7] (stats:
   m1, m2 of each, as quantize_blocks below; returns the NaN flag). The same
   operations per value as one block at a time; the block maxima, the codes'
   byte packing and the half sums (bytes + 128 summed by vpsadbw) each in one
   pass over the four blocks instead of a reduction per block. */
CISM__INLINE unsigned quantize4(const float *x, cism__act8 *a, int32_t *hs, float *m1, float *m2, const int stats) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512 v[8], ab[8], hi[4];
    __m512i q[8], sad[2];
    __mmask16 ord[8];
    float mx[16], amax[4];
    unsigned nan = 0;
    int i, b;
    for (i = 0; i < 8; i++) {
        v[i] = _mm512_loadu_ps(x + 16 * i);
        ord[i] = _mm512_cmp_ps_mask(v[i], v[i], _CMP_ORD_Q); /* max |x| ignoring NaN (the scalar compare does) */
        ab[i] = _mm512_maskz_and_ps(ord[i], v[i], absmask);
    }
    for (b = 0; b < 4; b++) hi[b] = _mm512_max_ps(ab[2 * b], ab[2 * b + 1]);
    _mm512_storeu_ps(mx, max4_blocks(hi));
    for (b = 0; b < 4; b++) {
        const __m512 vi = _mm512_set1_ps(cism__act8_inv(amax[b] = mx[4 * b]));
        a[b].d = amax[b] / 127.0f;
        q[2 * b] = quant16(v[2 * b], vi);
        q[2 * b + 1] = quant16(v[2 * b + 1], vi);
    }
    if (stats) { /* the second: the halves' mins and their maxes but the first lane holding amax */
        __m512 sel[4];
        for (b = 0; b < 4; b++) {
            const __mmask16 at = _mm512_cmp_ps_mask(hi[b], _mm512_set1_ps(amax[b]), _CMP_EQ_OQ);
            const __m512 lo = _mm512_min_ps(ab[2 * b], ab[2 * b + 1]);
            sel[b] = _mm512_mask_max_ps(lo, (__mmask16)~(at & (0u - at)), lo, hi[b]);
            nan |= (unsigned)(__mmask16)~(ord[2 * b] & ord[2 * b + 1]);
            m1[b] = amax[b];
        }
        _mm512_storeu_ps(mx, max4_blocks(sel));
        for (b = 0; b < 4; b++) m2[b] = mx[4 * b];
    }
    for (i = 0; i < 2; i++) { /* blocks 2i, 2i + 1: int32 -> int8 (|code| <= 127, no saturation), in order */
        const __m512i r = _mm512_permutexvar_epi32(order, _mm512_packs_epi16(_mm512_packs_epi32(q[4 * i], q[4 * i + 1]),
                                                                              _mm512_packs_epi32(q[4 * i + 2], q[4 * i + 3])));
        _mm256_storeu_si256((__m256i *)(void *)a[2 * i].q, _mm512_castsi512_si256(r));
        _mm256_storeu_si256((__m256i *)(void *)a[2 * i + 1].q, _mm512_extracti64x4_epi64(r, 1));
        /* sums of 8 bytes + 128 each, then of the two per half */
        sad[i] = _mm512_sad_epu8(_mm512_xor_si512(r, _mm512_set1_epi8((char)0x80)), _mm512_setzero_si512());
        sad[i] = _mm512_add_epi64(sad[i], _mm512_shuffle_epi32(sad[i], (_MM_PERM_ENUM)0x4e));
    }
    { /* halves [q0 q0 q1 q1 q2 q2 q3 q3] and [q4 ..]: interleaved, narrowed, in order, less 16 x 128 */
        const __m256i s = _mm512_cvtepi64_epi32(_mm512_mask_blend_epi64(0xaa, sad[0], sad[1]));
        _mm256_storeu_si256((__m256i *)(void *)hs, _mm256_sub_epi32(_mm256_permutevar8x32_epi32(s, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7)),
                                                                    _mm256_set1_epi32(16 * 128)));
    }
    for (b = 0; b < 4; b++) a[b].sum = hs[2 * b] + hs[2 * b + 1];
    return nan;
}

/* quantize_act, and with stats quantize_act_top2: each block's two largest
   |x| as act_block_top2 takes them but with NaN lanes cleared (the same
   values when x holds no NaN; a NaN is reported instead). Four whole blocks
   at a time (quantize4), then block by block. */
CISM__INLINE int quantize_blocks(const float *x, int64_t n, void *out, float *m1, float *m2, const int stats) {
    cism__act8 *a = (cism__act8 *)out;
    int32_t *hs = cism__act8_half_sums(out, n);
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    unsigned nan = 0;
    int64_t c0;
    for (c0 = 0; c0 + 4 * CISM__A8_BLOCK <= n; c0 += 4 * CISM__A8_BLOCK, a += 4, hs += 8)
        nan |= quantize4(x + c0, a, hs, stats ? m1 + c0 / CISM__A8_BLOCK : NULL, stats ? m2 + c0 / CISM__A8_BLOCK : NULL, stats);
    for (; c0 < n; c0 += CISM__A8_BLOCK, a++, hs += 2) {
        int64_t m = n - c0 < 32 ? n - c0 : 32;
        __mmask16 k0 = (__mmask16)(m >= 16 ? 0xffffu : (1u << m) - 1u);
        __mmask16 k1 = (__mmask16)(m >= 32 ? 0xffffu : m > 16 ? (1u << (m - 16)) - 1u : 0u);
        __m512 x0 = _mm512_maskz_loadu_ps(k0, x + c0), x1 = _mm512_maskz_loadu_ps(k1, x + c0 + 16);
        /* max |x| ignoring NaN (the scalar compare does) */
        const __mmask16 o0 = _mm512_cmp_ps_mask(x0, x0, _CMP_ORD_Q), o1 = _mm512_cmp_ps_mask(x1, x1, _CMP_ORD_Q);
        __m512 a0 = _mm512_maskz_and_ps(o0, x0, absmask);
        __m512 a1 = _mm512_maskz_and_ps(o1, x1, absmask);
        float amax;
        __m512 vi;
        __m512i q0, q1;
        if (stats) { /* a0, a1: magnitudes, NaN cleared (their bits order as the floats): m1 is amax */
            nan |= (unsigned)(__mmask16)~(o0 & o1);
            top2_halves(_mm512_castps_si512(a0), _mm512_castps_si512(a1), &m1[c0 / CISM__A8_BLOCK], &m2[c0 / CISM__A8_BLOCK]);
            amax = m1[c0 / CISM__A8_BLOCK];
        } else {
            amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
        }
        vi = _mm512_set1_ps(cism__act8_inv(amax));
        a->d = amax / 127.0f;
        q0 = quant16(x0, vi);
        q1 = quant16(x1, vi);
        _mm_storeu_si128((__m128i *)a->q, _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(a->q + 16), _mm512_cvtsepi32_epi8(q1));
        hs[0] = _mm512_reduce_add_epi32(q0);
        hs[1] = _mm512_reduce_add_epi32(q1);
        a->sum = hs[0] + hs[1];
    }
    return nan != 0;
}
static void quantize_act(const float *x, int64_t n, void *out) {
    quantize_blocks(x, n, out, NULL, NULL, 0);
}
static int quantize_act_top2(const float *x, int64_t n, void *out, float *m1, float *m2) {
    return quantize_blocks(x, n, out, m1, m2, 1);
}

/* 12 chains of vpdpbusd (64 multiply-adds each), enough to cover its latency */
static int64_t int8_mac_loop(int64_t iters, int32_t *sink) {
    const __m512i a = _mm512_set1_epi8((char)(*sink | 1)), b = _mm512_set1_epi8(3);
    __m512i c[12];
    int64_t i;
    int j;
    for (j = 0; j < 12; j++) c[j] = _mm512_setzero_si512();
    for (i = 0; i < iters; i++)
        for (j = 0; j < 12; j++) c[j] = _mm512_dpbusd_epi32(c[j], a, b);
    for (j = 1; j < 12; j++) c[0] = _mm512_add_epi32(c[0], c[j]);
    *sink += _mm512_reduce_add_epi32(c[0]);
    return iters * 12 * 64;
}

/* The outlier epilogues (kernels.h): the template of x86_outliers.h, 16 rows
   of a column in one register. */

typedef __m512 ovec;
CISM__INLINE ovec ov_load(const float *p) { return _mm512_loadu_ps(p); }
CISM__INLINE void ov_store(float *p, ovec v) { _mm512_storeu_ps(p, v); }
CISM__INLINE ovec ov_addmul(ovec acc, float v, ovec col) { return _mm512_fmadd_ps(_mm512_set1_ps(v), col, acc); }

typedef struct oconst {
    __m512 levels, smul; /* q4sx16: the levels, scale_mul */
} oconst;
CISM__INLINE void oconst_init(oconst *c, int xf, const cism__fmt4 *f) {
    c->levels = _mm512_setzero_ps();
    c->smul = _mm512_set1_ps(xf == X16_Q4S ? f->scale_mul : 1.0f);
    if (xf == X16_Q4S) {
        float lv[16];
        int k;
        for (k = 0; k < 16; k++) lv[k] = (float)f->levels[k];
        c->levels = _mm512_loadu_ps(lv);
    }
}
CISM__INLINE ovec ov_x16_col(const uint8_t *grp, const ocol *p, int xf, const oconst *c) {
    return x16_col16(grp, p, xf, c->levels, c->smul);
}
CISM__INLINE void ov_q4ax_dm(const uint8_t *grp, int64_t scale, ovec *d, ovec *m) { *d = x16_q4a_dm(grp + scale, m); }
CISM__INLINE ovec ov_q4ax_code(const uint8_t *grp, const ocol *p, ovec d, ovec m) { return x16_q4a_code16(grp, p, d, m); }

/* q4a: the dwords of 16 rows gathered, at the block's start (d, m, widened
   exactly) and the one ending in a code's byte (inside the block); a column
   is d * code + m. */
typedef struct oq4a {
    __m512i offs; /* the 16 rows' offsets */
} oq4a;
CISM__INLINE void oq4a_init(oq4a *c, uint64_t row_bytes) {
    c->offs = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                 _mm512_set1_epi32((int32_t)row_bytes));
}
CISM__INLINE void ov_q4a_dm(const uint8_t *p, const oq4a *c, ovec *d, ovec *m) {
    const __m512i dm = _mm512_i32gather_epi32(c->offs, (const void *)p, 1);
    *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
    *m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
}
CISM__INLINE ovec ov_q4a_code(const uint8_t *p, const oq4a *c, int64_t j, ovec d, ovec m) {
    const __m512i cb = _mm512_i32gather_epi32(c->offs, (const void *)(p + 1 + j % 16), 1);
    const __m512i code = _mm512_and_si512(_mm512_srli_epi32(cb, j < 16 ? 24 : 28), _mm512_set1_epi32(15));
    return _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(code)), m);
}

#include "x86_outliers.h"

/* The run-by-run outlier path of an interleaved dtype around the kernel mq
   of a tier built on this one (kernels_amx.c), mq called once per panel */
void cism__avx512_outliers_x16(const void *w, uint64_t rb, int64_t cols, const uint8_t *xq, int64_t ldq, float *y,
                               int64_t ldy, int64_t nt, int64_t r0, int64_t r1, const struct cism__oruns *runs,
                               cism__matmul_a8_fn mq, int32_t dtype) {
#define OUTL_WHOLE(XF) matmul_outliers_x16(w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, runs, mq, 1, XF)
    X16_DISPATCH(x16_xf_of(dtype), OUTL_WHOLE)
#undef OUTL_WHOLE
}

void cism__fill_avx512_quant(cism__kernels *k) {
    fill_outlier_entries(k);
    k->int8_mac_loop = int8_mac_loop;
    fill_a8_entries(k);
    fill_qint_float_entries(k);
    k->quantize_act = quantize_act;
    k->act_block_top2 = act_block_top2;
    k->quantize_act_top2 = quantize_act_top2;
    k->act_block_take = act_block_take;
}
