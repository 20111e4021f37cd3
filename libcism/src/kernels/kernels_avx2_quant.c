/* kernels_avx2_quant.c - the AVX2 tier's kernels of the packed weight formats
 * against int8 activation blocks (built with the avx2 tier's flags; filled in
 * by cism__kernels_fill_avx2, and kept by the AVX-512 tier for nothing: that
 * tier has its own, kernels_avx512_quant.c).
 *
 * Same arithmetic per output element as the AVX-512 tier (see there): the
 * exact int32 sum of every weight block, then acc = fma(s_b, d_w * d_a, acc)
 * block after block, so both tiers give the same bits. Without VNNI the
 * integer dot is vpmaddubsw (unsigned x signed bytes, pairs summed into int16)
 * then vpmaddwd with ones (int32); it must never saturate:
 *   - 4-bit codes 0..15 (q4, q4s) enter unsigned: |pair| <= 2 * 15 * 127, and
 *     up to four such products are summed in int16 before widening; the
 *     offset 8 is taken off with the activations' (half-)block sums;
 *   - int8 levels (q8, and nl4/fp4 after their table) use the sign trick:
 *     |w| times a with w's sign, |pair| <= 2 * 128 * 127 < 32767 (a q8 code
 *     of -128, which GGUF Q8_0 files hold, is |w| = 0x80 = 128 unsigned);
 *   - q6/q5 codes (level + H, <= 63) enter unsigned, H * (activation sum)
 *     taken off: |pair| <= 2 * 63 * 127;
 *   - q4a's codes 0..15 enter unsigned; its minimum's term uses the
 *     activation block's sum: (d * s + m * sum) * d_a, the scalar order.
 * Decode reads 8 rows at a time where they are (one dot per row and block,
 * transposed into lanes); prefill repacks 8 rows x KC columns into a panel of
 * int8 levels in 4-byte chunks with f32 scales and runs 8 rows x 4 tokens per
 * register tile. The interleaved dtypes (q8x16, q4sx16, q4ax16, q6x16, q5x16) are read in
 * place as two halves of 8 rows (x86_x16.h, whose q4ax16 path the AVX-512
 * tier runs too). */
#include "tier_common.h"
#include "quant.h"

#include <immintrin.h>
#include <string.h>

#define KC 256        /* columns of a prefill panel */
#define PR 8          /* rows of a panel */
#define TT 4          /* tokens of the prefill register tile (16 ymm registers) */

#include "x86_quant.h"

/* int32 lanes of sum w * a (both signed, |w|, |a| <= 127; dot_u: x86_quant.h) */
CISM__INLINE __m256i dot_s(__m256i w, __m256i a) { return dot_u(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)); }

/* ---- decode: 8 rows x 1 token ------------------------------------------------------------ */
/* block-32 formats whose codes enter unsigned: q4a (its minimum's term), and
   q4, q6, q5, whose offset g_fmt[f].corr times the activation sum is taken
   off the block's sum (codes <= 63: |pair| <= 2 * 63 * 127) */
#define CODES_U(f) ((f) == F_Q4 || (f) == F_Q4A || F_QINT(f))
CISM__INLINE int32_t code_off(const int f, int32_t sum) { return CODES_U(f) && f != F_Q4A ? g_fmt[f].corr * sum : 0; }

/* int32 lanes of one row's block (block-32 formats) against activations av */
CISM__INLINE __m256i dot32(const uint8_t *blk, __m256i av, const int f) {
    if (f == F_Q8) return dot_s(_mm256_loadu_si256((const __m256i *)(blk + 2)), av);
    if (f == F_Q4) return dot_u(nibbles32(blk + 2), av);
    if (f == F_Q4A) return dot_u(nibbles32(blk + 4), av);
    if (F_QINT(f)) return dot_u(qint_codes32(blk, f), av);
    return dot_s(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)g_nl4_l)), nibbles32(blk + 2)), av);
}

/* two blocks of 16 against the reordered activations (see act16x2) */
CISM__INLINE __m256i dot16x2(const uint8_t *blk, __m256i av, const int f) {
    __m256i c = nibbles16x2(blk + 1);
    if (f == F_Q4S) return dot_u(c, av);
    return dot_s(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)g_fp4_l)), c), av);
}

CISM__INLINE __m128i dot16(const uint8_t *blk, __m128i av, const int f) {
    __m128i c = _mm_loadl_epi64((const __m128i *)(blk + 1));
    __m128i u = _mm_and_si128(_mm_unpacklo_epi64(c, _mm_srli_epi16(c, 4)), _mm_set1_epi8(0x0f));
    if (f == F_FP4) {
        __m128i l = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)g_fp4_l), u);
        return _mm_madd_epi16(_mm_maddubs_epi16(_mm_sign_epi8(l, l), _mm_sign_epi8(av, l)), _mm_set1_epi16(1));
    }
    return _mm_madd_epi16(_mm_maddubs_epi16(u, av), _mm_set1_epi16(1));
}

/* E4M3 scales of 8 rows, rows in the lane order 0,1,4,5,2,3,6,7 */
CISM__INLINE __m256 scales8_e4m3(const uint8_t *blk, uint64_t rb) {
    return e4m3_words(_mm_setr_epi16(blk[0], blk[rb], blk[4 * rb], blk[5 * rb], blk[2 * rb], blk[3 * rb], blk[6 * rb], blk[7 * rb]));
}

CISM__INLINE void gemv8_b32(const uint8_t *w, uint64_t rb, int64_t nb, const cism__act8 *a, float *y, const int f) {
    __m256 acc = _mm256_setzero_ps();
    int64_t b;
    int r;
    for (b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * g_fmt[f].bytes;
        __m256i av = _mm256_loadu_si256((const __m256i *)a[b].q), v[8], s;
        for (r = 0; r < 8; r++) v[r] = dot32(blk + (uint64_t)r * rb, av, f);
        s = rowsum8(v);
        if (code_off(f, 1)) s = _mm256_sub_epi32(s, _mm256_set1_epi32(code_off(f, a[b].sum)));
        acc = combine8(acc, s, scales8_f16(blk, rb), f == F_Q4A ? scales8_f16(blk + 2, rb) : _mm256_setzero_ps(), &a[b], f);
    }
    _mm256_storeu_ps(y, acc);
}

/* The codes of one row's block (block-32 formats), as dot32 meets them */
CISM__INLINE __m256i codes32(const uint8_t *blk, const int f) {
    if (f == F_Q8) return _mm256_loadu_si256((const __m256i *)(blk + 2));
    if (f == F_Q4) return nibbles32(blk + 2);
    if (f == F_Q4A) return nibbles32(blk + 4);
    if (F_QINT(f)) return qint_codes32(blk, f);
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)g_nl4_l)), nibbles32(blk + 2));
}

/* T tokens (T <= GEMV_TOKENS_MAX), rows [r, r + 8): each block's codes and
   scales are decoded once for all T tokens (batched decode); per token the
   arithmetic of gemv8_b32 exactly, so the same bits. */
#define GEMV_TOKENS_MAX 8
CISM__INLINE void gemv8_b32_t(const uint8_t *w, uint64_t rb, int64_t nb, const cism__act8 *const *a, float *y, int64_t ldy,
                              const int f, const int T) {
    __m256 acc[GEMV_TOKENS_MAX];
    int64_t b;
    int r, t;
    for (t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * g_fmt[f].bytes;
        __m256i c[8];
        __m256 d = scales8_f16(blk, rb), mn = f == F_Q4A ? scales8_f16(blk + 2, rb) : _mm256_setzero_ps();
        for (r = 0; r < 8; r++) c[r] = codes32(blk + (uint64_t)r * rb, f);
        for (t = 0; t < T; t++) {
            const cism__act8 *ab = &a[t][b];
            __m256i av = _mm256_loadu_si256((const __m256i *)ab->q), v[8], s;
            for (r = 0; r < 8; r++) v[r] = CODES_U(f) ? dot_u(c[r], av) : dot_s(c[r], av);
            s = rowsum8(v);
            if (code_off(f, 1)) s = _mm256_sub_epi32(s, _mm256_set1_epi32(code_off(f, ab->sum)));
            acc[t] = combine8(acc[t], s, d, mn, ab, f);
        }
    }
    for (t = 0; t < T; t++) _mm256_storeu_ps(y + t * ldy, acc[t]);
}

CISM__INLINE int32_t hsum_epi32(__m256i v) {
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    return _mm_cvtsi128_si32(h);
}

CISM__INLINE float gemv1_b32(const uint8_t *w, int64_t nb, const cism__act8 *a, const int f) {
    __m128 acc = _mm_setzero_ps();
    int64_t b;
    for (b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * g_fmt[f].bytes;
        int32_t s = hsum_epi32(dot32(blk, _mm256_loadu_si256((const __m256i *)a[b].q), f));
        s -= code_off(f, a[b].sum);
        acc = combine1(acc, s, blk, &a[b], f);
    }
    return _mm_cvtss_f32(acc);
}

CISM__INLINE void gemv8_b16(const uint8_t *w, uint64_t rb, int64_t nb, const cism__act8 *a, const int32_t *hs, float *y,
                            const int f) {
    const __m256i perm = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    __m256 acc = _mm256_setzero_ps();
    int64_t b;
    int r;
    for (b = 0; b + 2 <= nb; b += 2) {
        const uint8_t *blk = w + b * 9;
        const cism__act8 *ab = a + b / 2;
        __m256i av = act16x2(ab), v[8], s0, s1;
        __m256 da = _mm256_set1_ps(ab->d);
        for (r = 0; r < 8; r++) v[r] = dot16x2(blk + (uint64_t)r * rb, av, f);
        rowsum8x2(v, &s0, &s1);
        if (f == F_Q4S) {
            s0 = _mm256_sub_epi32(s0, _mm256_set1_epi32(8 * hs[b]));
            s1 = _mm256_sub_epi32(s1, _mm256_set1_epi32(8 * hs[b + 1]));
        }
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(scales8_e4m3(blk, rb), da)));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(s1), _mm256_mul_ps(scales8_e4m3(blk + 9, rb), da)));
    }
    if (b < nb) { /* an odd last block: the first half of an activation block */
        const uint8_t *blk = w + b * 9;
        const cism__act8 *ab = a + b / 2;
        __m128i av = _mm_loadu_si128((const __m128i *)ab->q);
        __m256i v[8], s;
        for (r = 0; r < 8; r++) v[r] = _mm256_zextsi128_si256(dot16(blk + (uint64_t)r * rb, av, f));
        s = _mm256_permutevar8x32_epi32(rowsum8(v), perm);
        if (f == F_Q4S) s = _mm256_sub_epi32(s, _mm256_set1_epi32(8 * hs[b]));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(scales8_e4m3(blk, rb), _mm256_set1_ps(ab->d))));
    }
    _mm256_storeu_ps(y, _mm256_permutevar8x32_ps(acc, perm));
}

CISM__INLINE float gemv1_b16(const uint8_t *w, int64_t nb, const cism__act8 *a, const int32_t *hs, const int f) {
    __m128 acc = _mm_setzero_ps();
    int64_t b;
    for (b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * 9;
        const cism__act8 *ab = a + b / 2;
        __m128i h = dot16(blk, _mm_loadu_si128((const __m128i *)(ab->q + (b & 1) * 16)), f);
        int32_t s;
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
        s = _mm_cvtsi128_si32(h);
        if (f == F_Q4S) s -= 8 * hs[b];
        acc = _mm_add_ss(acc, _mm_mul_ss(_mm_set_ss((float)s), _mm_set_ss(e4m3_f(blk[0]) * ab->d)));
    }
    return _mm_cvtss_f32(acc);
}

CISM__INLINE void gemv(const uint8_t *w, uint64_t rb, int64_t cols, const cism__act8 *a, float *y, int64_t r0, int64_t r1,
                       const int f) {
    int64_t nb = (cols + g_fmt[f].block - 1) / g_fmt[f].block, r;
    const int32_t *hs = cism__act8_half_sums((void *)(uintptr_t)a, cols);
    if (g_fmt[f].block == 32) {
        const uintptr_t end = rows_prefetch_start(w, rb, r0, r1);
        for (r = r0; r + 8 <= r1; r += 8) {
            rows_prefetch8(w + (uint64_t)r * rb, rb, end);
            gemv8_b32(w + (uint64_t)r * rb, rb, nb, a, y + r, f);
        }
        for (; r < r1; r++) y[r] = gemv1_b32(w + (uint64_t)r * rb, nb, a, f);
    } else {
        for (r = r0; r + 8 <= r1; r += 8) gemv8_b16(w + (uint64_t)r * rb, rb, nb, a, hs, y + r, f);
        for (; r < r1; r++) y[r] = gemv1_b16(w + (uint64_t)r * rb, nb, a, hs, f);
    }
}

/* ---- prefill: panels of 8 rows x KC columns ------------------------------------------------ */
/* Block j (B = 16 or 32 columns): 8 f32 scales (q4a: then 8 f32 minimums), then B/4 chunks of 8 rows x
   4 bytes (int8 levels; q4a: its codes) */
#define PANEL_HDR(asym) ((asym) ? 64 : 32)
#define PANEL_BYTES (KC / 16 * (32 + 8 * 16))

typedef int rowsel; /* rows of a tile that are stored: a count (8: all) */
CISM__INLINE rowsel rows_sel(int nr) { return nr; }

/* 8 x 8 transposes of 4-byte chunks: lv (8 rows, KC apart) into the panel's
   blocks, one gather per chunk (one call per panel, kept out of the GEMM). */
CISM__INLINE void panel_transpose_b(const int8_t *lv, uint8_t *data, int64_t nb, const int B, const int hdr) {
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(KC));
    const int jb = hdr + 8 * B;
    int64_t j;
    int c;
    for (j = 0; j < nb; j++)
        for (c = 0; c < B / 4; c++)
            _mm256_storeu_si256((__m256i *)(void *)(data + j * jb + hdr + c * 32),
                                _mm256_i32gather_epi32((const int *)(const void *)(lv + j * B + c * 4), idx, 1));
}
/* one body per block size and header (the chunk loop unrolled) */
static CISM__NOINLINE void panel_transpose(const int8_t *lv, uint8_t *data, int64_t nb, int B, int hdr) {
    if (B == 16) panel_transpose_b(lv, data, nb, 16, PANEL_HDR(0));
    else if (hdr == PANEL_HDR(1)) panel_transpose_b(lv, data, nb, 32, PANEL_HDR(1));
    else panel_transpose_b(lv, data, nb, 32, PANEL_HDR(0));
}

/* Rows [r, r + nr) (nr <= 8; the others zero) and blocks [b0, b0 + nb) into p */
static void pack_panel(const uint8_t *w, uint64_t rb, int64_t r, int nr, int64_t b0, int64_t nb, panel *p, int f) {
    int8_t lv[PR][KC];
    const int hdr = PANEL_HDR(f == F_Q4A);
    panel_levels(w, rb, r, nr, b0, nb, p, &lv[0][0], hdr, f);
    panel_transpose(&lv[0][0], p->data, nb, g_fmt[f].block, hdr);
}

/* y[t][0..8) (+)= panel . tokens t < T over the panel's blocks (weight blocks jb0 + j) */
CISM__INLINE void tile(const panel *p, const cism__act8 *const *a, int64_t jb0, float *y, int64_t ldy, rowsel nr,
                       int first, const int T, const int B, const int asym) {
    __m256 facc[TT];
    __m256i iacc[TT];
    const int hdr = PANEL_HDR(asym), jb = hdr + 8 * B;
    int64_t j;
    int t, c;
    for (t = 0; t < T; t++) {
        if (first) facc[t] = _mm256_setzero_ps();
        else if (nr == 8) facc[t] = _mm256_loadu_ps(y + t * ldy);
        else facc[t] = _mm256_maskload_ps(y + t * ldy, _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
    }
    for (j = 0; j < p->nb; j++) {
        const uint8_t *blk = p->data + j * jb;
        int64_t ja = jb0 + j;
        __m256 sc = _mm256_loadu_ps((const float *)(const void *)blk);
        for (t = 0; t < T; t++) iacc[t] = _mm256_setzero_si256();
        for (c = 0; c < B / 4; c++) {
            __m256i wv = _mm256_loadu_si256((const __m256i *)(const void *)(blk + hdr + c * 32)), aw = _mm256_sign_epi8(wv, wv);
            for (t = 0; t < T; t++) {
                __m256i av = bcast4y(a[t][(ja * B) / 32].q + (ja * B) % 32 + c * 4);
                iacc[t] = _mm256_add_epi32(iacc[t], asym ? dot_u(wv, av) : dot_u(aw, _mm256_sign_epi8(av, wv)));
            }
        }
        if (asym) { /* (d * s + m * sum) * d_a: the scalar order */
            __m256 mn = _mm256_loadu_ps((const float *)(const void *)(blk + 32));
            for (t = 0; t < T; t++) {
                const cism__act8 *ab = &a[t][ja];
                __m256 v = _mm256_add_ps(_mm256_mul_ps(sc, _mm256_cvtepi32_ps(iacc[t])), _mm256_mul_ps(mn, _mm256_set1_ps((float)ab->sum)));
                facc[t] = _mm256_add_ps(facc[t], _mm256_mul_ps(v, _mm256_set1_ps(ab->d)));
            }
        } else {
            for (t = 0; t < T; t++)
                facc[t] = _mm256_add_ps(facc[t], _mm256_mul_ps(_mm256_cvtepi32_ps(iacc[t]), _mm256_mul_ps(sc, _mm256_set1_ps(a[t][(ja * B) / 32].d))));
        }
    }
    for (t = 0; t < T; t++) {
        if (nr == 8) _mm256_storeu_ps(y + t * ldy, facc[t]);
        else _mm256_maskstore_ps(y + t * ldy, _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), facc[t]);
    }
}

/* ---- interleaved dtypes: a group of 16 rows as two halves of 8 (x86_x16.h) ------------------------ */
#include "x86_x16.h"

typedef uint32_t x16mask; /* rows of a group that are stored, one bit each */
CISM__INLINE void x16_group(const uint8_t *grp, const cism__x16 *g, const void *xq, int64_t ldq, int64_t cols, int64_t t0,
                            int64_t t1, float *y, int64_t ldy, x16mask mask, uintptr_t pf_end, const x16outl *ol, const int xf) {
    x16h_group(grp, g, xq, ldq, cols, t0, t1, y, ldy, mask, pf_end, ol, xf);
}

#include "x86_quant_entries.h"
#include "x86_quant_float.h"

/* The outlier rule's block statistics (kernels.h act_block_top2) of a block
   whose magnitudes (sign cleared, compared as unsigned integers: the scalar
   tier's order) are u[0..3], elements 8i.. of the block: per lane the largest
   and second largest of its four values (elements i, 8 + i, 16 + i, 24 + i),
   then across the lanes the largest and the second: the larger of the lanes'
   seconds and of the lanes' largest but one lane holding the top (the top
   again when two lanes hold it). */
CISM__INLINE uint32_t hmax8_epu32(__m256i v) {
    v = _mm256_max_epu32(v, _mm256_permute2x128_si256(v, v, 1));
    v = _mm256_max_epu32(v, _mm256_shuffle_epi32(v, 0x4e));
    v = _mm256_max_epu32(v, _mm256_shuffle_epi32(v, 0xb1));
    return (uint32_t)_mm256_cvtsi256_si32(v);
}
CISM__INLINE void top2_quarters(const __m256i u[4], float *m1, float *m2) {
    const __m256i h1 = _mm256_max_epu32(u[0], u[1]), l1 = _mm256_min_epu32(u[0], u[1]);
    const __m256i h2 = _mm256_max_epu32(u[2], u[3]), l2 = _mm256_min_epu32(u[2], u[3]);
    const __m256i hi = _mm256_max_epu32(h1, h2);
    const __m256i lo = _mm256_max_epu32(_mm256_min_epu32(h1, h2), _mm256_max_epu32(l1, l2));
    const uint32_t top = hmax8_epu32(hi);
    const __m256i at = _mm256_cmpeq_epi32(hi, _mm256_set1_epi32((int)top));
    const unsigned held = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(at));
    uint32_t second = hmax8_epu32(lo);
    if (held & (held - 1)) {
        second = top;
    } else {
        const uint32_t rest = hmax8_epu32(_mm256_andnot_si256(at, hi));
        if (rest > second) second = rest;
    }
    memcpy(m1, &top, 4);
    memcpy(m2, &second, 4);
}
static void act_block_top2(const float *x, int64_t nb, float *m1, float *m2) {
    const __m256i abs = _mm256_set1_epi32(0x7fffffff);
    int64_t b;
    int i;
    for (b = 0; b < nb; b++) {
        __m256i u[4];
        for (i = 0; i < 4; i++) u[i] = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(x + b * CISM__A8_BLOCK + 8 * i)), abs);
        top2_quarters(u, &m1[b], &m2[b]);
    }
}

/* kernels.h act_block_take, as the AVX-512 tier's: the block read from v
   (eight lanes per quarter, the lanes taken cleared), the first lane holding
   the largest found by compares, the largest after it is cleared the old
   second, and the second that value again if two lanes hold it, else the
   largest of the others: one reduction. */
CISM__INLINE __m256i lanes_kept(uint32_t taken, int q) { /* all ones in the lanes of quarter q not in taken */
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)((taken >> (8 * q)) & 0xffu)), bit), _mm256_setzero_si256());
}
CISM__INLINE uint32_t lanes_equal(const __m256i u[4], uint32_t x) { /* the lanes holding x, as bits */
    const __m256i s = _mm256_set1_epi32((int)x);
    uint32_t m = 0;
    int q;
    for (q = 0; q < 4; q++) m |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(u[q], s))) << (8 * q);
    return m;
}
static int act_block_take(const float *v, uint32_t *taken, float *m1, float *m2, float *out) {
    const __m256i abs = _mm256_set1_epi32(0x7fffffff);
    __m256i raw[4], u[4];
    uint32_t top, sec, at, eq;
    int i, q;
    memcpy(&top, m1, 4);
    memcpy(&sec, m2, 4);
    for (q = 0; q < 4; q++) {
        raw[q] = _mm256_loadu_si256((const __m256i *)(const void *)(v + 8 * q));
        u[q] = _mm256_and_si256(_mm256_and_si256(raw[q], abs), lanes_kept(*taken, q));
    }
    at = lanes_equal(u, top);
    i = cism__low_bit(at);
    *taken |= at & (0u - at);
    for (q = 0; q < 4; q++) {
        const __m256i keep = lanes_kept(*taken, q);
        _mm256_storeu_si256((__m256i *)(void *)(out + 8 * q), _mm256_and_si256(raw[q], keep)); /* whole vectors: the quantizer's loads forward */
        u[q] = _mm256_and_si256(u[q], keep);
    }
    eq = lanes_equal(u, sec);
    memcpy(m1, &sec, 4);
    if (!(eq & (eq - 1))) { /* one lane (or none: sec is 0) holds it: the largest of the others */
        __m256i r = _mm256_setzero_si256();
        for (q = 0; q < 4; q++)
            r = _mm256_max_epu32(r, _mm256_andnot_si256(_mm256_cmpeq_epi32(u[q], _mm256_set1_epi32((int)sec)), u[q]));
        sec = hmax8_epu32(r);
        memcpy(m2, &sec, 4);
    }
    return i;
}

/* ---- activation quantization (bit-identical to the scalar tier) ---------------------------- */
/* The largest of 8 floats (none NaN) */
CISM__INLINE float hmax8_ps(__m256 v) {
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    return _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
}

/* quantize_act, and with stats quantize_act_top2: each block's two largest
   |x| as act_block_top2 takes them but with NaN lanes cleared (the same
   values when x holds no NaN; a NaN is reported instead). */
CISM__INLINE int quantize_blocks(const float *x, int64_t n, void *out, float *m1, float *m2, const int stats) {
    cism__act8 *a = (cism__act8 *)out;
    int32_t *hs = cism__act8_half_sums(out, n);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    int64_t c0;
    int nan = 0;
    for (c0 = 0; c0 < n; c0 += CISM__A8_BLOCK, a++, hs += 2) {
        float buf[32];
        const float *src = x + c0;
        __m256 v[4];
        __m256i q[4];
        float amax, inv;
        int i;
        if (n - c0 < 32) { /* the last partial block, zero-padded */
            memset(buf, 0, sizeof(buf));
            memcpy(buf, x + c0, (size_t)(n - c0) * sizeof(float));
            src = buf;
        }
        for (i = 0; i < 4; i++) v[i] = _mm256_loadu_ps(src + 8 * i);
        { /* max |x| ignoring NaN (the scalar compare does): NaN lanes count as 0 */
            __m256 ab[4], ord[4];
            for (i = 0; i < 4; i++) {
                ord[i] = _mm256_cmp_ps(v[i], v[i], _CMP_ORD_Q);
                ab[i] = _mm256_and_ps(_mm256_and_ps(v[i], absmask), ord[i]);
            }
            if (stats) { /* ab: magnitudes, NaN cleared (their bits order as the floats): m1 is amax */
                __m256i u[4];
                for (i = 0; i < 4; i++) u[i] = _mm256_castps_si256(ab[i]);
                nan |= _mm256_movemask_ps(_mm256_and_ps(_mm256_and_ps(ord[0], ord[1]), _mm256_and_ps(ord[2], ord[3]))) != 0xff;
                top2_quarters(u, &m1[c0 / CISM__A8_BLOCK], &m2[c0 / CISM__A8_BLOCK]);
                amax = m1[c0 / CISM__A8_BLOCK];
            } else {
                amax = hmax8_ps(_mm256_max_ps(_mm256_max_ps(ab[0], ab[1]), _mm256_max_ps(ab[2], ab[3])));
            }
        }
        inv = cism__act8_inv(amax);
        a->d = amax / 127.0f;
        for (i = 0; i < 4; i++) {
            /* rounded half away from zero (CISM__HALF_BELOW with p's sign added, then truncated), NaN -> 0, clamped */
            const __m256 p = _mm256_mul_ps(v[i], _mm256_set1_ps(inv));
            const __m256 s = _mm256_add_ps(p, _mm256_or_ps(_mm256_andnot_ps(absmask, p), _mm256_set1_ps(CISM__HALF_BELOW)));
            __m256i qi = _mm256_and_si256(_mm256_cvttps_epi32(s), _mm256_castps_si256(_mm256_cmp_ps(p, p, _CMP_ORD_Q)));
            q[i] = _mm256_max_epi32(_mm256_min_epi32(qi, _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
        }
        { /* 32 int32 -> 32 int8 in order */
            __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
            __m256i b = _mm256_packs_epi16(p01, p23);
            b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(void *)a->q, b);
        }
        {
            __m256i s0 = _mm256_add_epi32(q[0], q[1]), s1 = _mm256_add_epi32(q[2], q[3]);
            hs[0] = hsum_epi32(s0);
            hs[1] = hsum_epi32(s1);
            a->sum = hs[0] + hs[1];
        }
    }
    return nan;
}
static void quantize_act(const float *x, int64_t n, void *out) {
    quantize_blocks(x, n, out, NULL, NULL, 0);
}
static int quantize_act_top2(const float *x, int64_t n, void *out, float *m1, float *m2) {
    return quantize_blocks(x, n, out, m1, m2, 1);
}


/* 7 chains of vpmaddubsw (32 multiply-adds each) summed in int16 (as the
   4-bit kernels sum several before widening), their signed operands stepped
   by a byte add each round: nothing loop-invariant, no chain through the
   multiplies, 16 ymm registers */
static int64_t int8_mac_loop(int64_t iters, int32_t *sink) {
    const __m256i a = _mm256_set1_epi8((char)(*sink | 1)), step = _mm256_set1_epi8(1);
    __m256i c[7], x[7];
    int64_t i;
    int j;
    for (j = 0; j < 7; j++) {
        c[j] = _mm256_setzero_si256();
        x[j] = _mm256_set1_epi8((char)(j + 1));
    }
    for (i = 0; i < iters; i++)
        for (j = 0; j < 7; j++) {
            c[j] = _mm256_add_epi16(c[j], _mm256_maddubs_epi16(a, x[j]));
            x[j] = _mm256_add_epi8(x[j], step);
        }
    for (j = 1; j < 7; j++) c[0] = _mm256_add_epi16(c[0], c[j]);
    {
        int16_t v[16];
        _mm256_storeu_si256((__m256i *)(void *)v, c[0]);
        for (j = 0; j < 16; j++) *sink += v[j];
    }
    return iters * 7 * 32;
}

/* The outlier epilogues (kernels.h): the template of x86_outliers.h, 16 rows
   of a column as two registers of 8. */

typedef struct ovec {
    __m256 lo, hi; /* rows 0..7, 8..15 */
} ovec;
CISM__INLINE ovec ov_load(const float *p) {
    ovec v;
    v.lo = _mm256_loadu_ps(p);
    v.hi = _mm256_loadu_ps(p + 8);
    return v;
}
CISM__INLINE void ov_store(float *p, ovec v) {
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
}
CISM__INLINE ovec ov_addmul(ovec acc, float v, ovec col) {
    const __m256 s = _mm256_set1_ps(v);
    acc.lo = _mm256_fmadd_ps(s, col.lo, acc.lo);
    acc.hi = _mm256_fmadd_ps(s, col.hi, acc.hi);
    return acc;
}

typedef struct oconst {
    float lv[16]; /* q4sx16: the levels */
    __m256 smul;
} oconst;
CISM__INLINE void oconst_init(oconst *c, int xf, const cism__fmt4 *f) {
    int k;
    for (k = 0; k < 16; k++) c->lv[k] = xf == X16_Q4S ? (float)f->levels[k] : 0.0f;
    c->smul = _mm256_set1_ps(xf == X16_Q4S ? f->scale_mul : 1.0f);
}
CISM__INLINE ovec ov_x16_col(const uint8_t *grp, const ocol *p, int xf, const oconst *c) {
    ovec v;
    v.lo = x16h_col8(grp, p, 0, xf, c->lv, c->smul);
    v.hi = x16h_col8(grp, p, 1, xf, c->lv, c->smul);
    return v;
}
CISM__INLINE void ov_q4ax_dm(const uint8_t *grp, int64_t scale, ovec *d, ovec *m) {
    d->lo = x16h_scales(grp + scale, 0, X16_Q4A, &m->lo);
    d->hi = x16h_scales(grp + scale, 1, X16_Q4A, &m->hi);
}
CISM__INLINE ovec ov_q4ax_code(const uint8_t *grp, const ocol *p, ovec d, ovec m) {
    ovec v;
    v.lo = x16_q4a_code8(grp, p->code, p->shift, 0, d.lo, m.lo);
    v.hi = x16_q4a_code8(grp, p->code, p->shift, 1, d.hi, m.hi);
    return v;
}

/* q4a: the dwords of 8 rows (row_bytes apart) at the block's start (d, m,
   widened exactly) and the one ending in a code's byte (inside the block),
   one gather each; a column is d * code + m. */
typedef struct oq4a {
    uint64_t half; /* 8 rows' bytes */
    __m256i offs;  /* rows 0..7 of a half, in bytes */
} oq4a;
CISM__INLINE void oq4a_init(oq4a *c, uint64_t row_bytes) {
    c->half = 8 * row_bytes;
    c->offs = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)row_bytes));
}
CISM__INLINE __m256i dwords8(const uint8_t *p, const oq4a *c) {
    return _mm256_i32gather_epi32((const int *)(const void *)p, c->offs, 1);
}
CISM__INLINE void q4a_dm8(const uint8_t *p, const oq4a *c, __m256 *d, __m256 *m) {
    const __m256i dm = dwords8(p, c);
    const __m256i lo = _mm256_and_si256(dm, _mm256_set1_epi32(0xffff)), hi = _mm256_srli_epi32(dm, 16);
    *d = _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1)));
    *m = _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1)));
}
CISM__INLINE __m256 q4a_code8(const uint8_t *p, const oq4a *c, int64_t j, __m256 d, __m256 m) {
    const __m256i cb = dwords8(p + 1 + j % 16, c);
    const __m256i code = _mm256_and_si256(_mm256_srli_epi32(cb, j < 16 ? 24 : 28), _mm256_set1_epi32(15));
    return _mm256_add_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(code)), m);
}
CISM__INLINE void ov_q4a_dm(const uint8_t *p, const oq4a *c, ovec *d, ovec *m) {
    q4a_dm8(p, c, &d->lo, &m->lo);
    q4a_dm8(p + c->half, c, &d->hi, &m->hi);
}
CISM__INLINE ovec ov_q4a_code(const uint8_t *p, const oq4a *c, int64_t j, ovec d, ovec m) {
    ovec v;
    v.lo = q4a_code8(p, c, j, d.lo, m.lo);
    v.hi = q4a_code8(p + c->half, c, j, d.hi, m.hi);
    return v;
}

#include "x86_outliers.h"

void cism__fill_avx2_quant(cism__kernels *k) {
    fill_outlier_entries(k);
    k->int8_mac_loop = int8_mac_loop;
    fill_a8_entries(k);
    fill_qint_float_entries(k);
    k->quantize_act = quantize_act;
    k->act_block_top2 = act_block_top2;
    k->act_block_take = act_block_take;
    k->quantize_act_top2 = quantize_act_top2;
}
