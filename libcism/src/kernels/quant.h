/* quant.h - the packed weight formats (docs/QUANTIZATION.md): block layouts,
 * scale encodings, codebooks, and the int8 activation blocks of the
 * integer-dot path. Shared by the quantizer (quant.c) and the kernels. */
#ifndef CISM_QUANT_H
#define CISM_QUANT_H

#include <stdint.h>
#include "dtype.h"

#include <float.h>
#include <string.h>

/* q8: 32 int8 (-127..127) after an fp16 scale: 34 bytes per 32 weights. */
#define CISM__Q8_BLOCK 32
#define CISM__Q8_BYTES 34

/* q4a: asymmetric 4-bit, GGUF Q4_1's bytes: fp16 scale d, fp16 minimum m,
 * then 16 code bytes (byte j: code j low nibble, code j + 16 high nibble);
 * weight = d * code + m (d * code is exact in f32: one rounding). 20 bytes per
 * 32 weights. Not a cism__fmt4 (its levels are not scale * level). */
#define CISM__Q4A_BLOCK 32
#define CISM__Q4A_BYTES 20
static inline float cism__q4a_d(const uint8_t *blk) { return cism__f16_to_f32((uint16_t)(blk[0] | (blk[1] << 8))); }
static inline float cism__q4a_m(const uint8_t *blk) { return cism__f16_to_f32((uint16_t)(blk[2] | (blk[3] << 8))); }

/* q6, q5, q3 and q2: symmetric uniform integer levels in blocks of 32 with an fp16
 * scale d: weight = d * (code - H), codes 0..2H-1 (q6: H = 32, q5: H = 16, q3: H = 4,
 * q2: H = 2);
 * d * level is exact in f32 (one rounding nowhere). Both keep each code's low
 * 4 bits as nibbles, byte j of the 16 nibble bytes holding code j (low nibble)
 * and code j + 16 (high nibble), as q4/q4a do, and the high bits in a
 * separate bit plane, so a SIMD tier decodes nibbles as for q4 and ORs in the
 * plane (docs/QUANTIZATION.md).
 *   q6: fp16 d, 16 nibble bytes, 8 plane bytes: byte j (0..7) holds bits 4-5
 *       of code j + 8k at bits 2k..2k+1 (k = 0..3). 26 bytes: 6.5 bits/weight.
 *   q5: GGUF Q5_0's bytes: fp16 d, a little-endian uint32 whose bit i is bit 4
 *       of code i, then 16 nibble bytes. 22 bytes: 5.5 bits/weight.
 * q3 has no nibbles, only the two planes, laid out as q5's and q6's so their
 * decoders serve it:
 *   q3: fp16 d, a little-endian uint32 whose bit i is bit 2 of code i (as q5's),
 *       then 8 plane bytes: byte j holds bits 0-1 of code j + 8k at bits
 *       2k..2k+1 (as q6's). 14 bytes: 3.5 bits/weight.
 *   q2: fp16 d, then 8 plane bytes holding the whole codes as q3's hold their
 *       low 2 bits. 10 bytes: 2.5 bits/weight. */
#define CISM__QI_BLOCK 32
#define CISM__Q6_BYTES 26
#define CISM__Q5_BYTES 22
#define CISM__Q3_BYTES 14
#define CISM__Q2_BYTES 10
/* H, the offset of the codes (levels -H..H-1), of each format: the one place
   it is written (the tiers' tables and decoders take it from here) */
#define CISM__Q6_HALF 32
#define CISM__Q5_HALF 16
#define CISM__Q3_HALF 4
#define CISM__Q2_HALF 2
static inline int cism__dtype_is_qint(int32_t dtype) {
    return dtype == CISM_DTYPE_Q6 || dtype == CISM_DTYPE_Q5 || dtype == CISM_DTYPE_Q3 || dtype == CISM_DTYPE_Q2;
}
/* H of a q6, q5, q3 or q2 dtype, or of its interleaved form */
static inline int cism__qint_half(int32_t dtype) {
    const int32_t b = cism__dtype_base(dtype);
    return b == CISM_DTYPE_Q6 ? CISM__Q6_HALF : b == CISM_DTYPE_Q5 ? CISM__Q5_HALF : b == CISM_DTYPE_Q3 ? CISM__Q3_HALF : CISM__Q2_HALF;
}
static inline int cism__qint_bytes(int32_t dtype) {
    return dtype == CISM_DTYPE_Q6   ? CISM__Q6_BYTES
           : dtype == CISM_DTYPE_Q5 ? CISM__Q5_BYTES
           : dtype == CISM_DTYPE_Q3 ? CISM__Q3_BYTES
                                    : CISM__Q2_BYTES;
}
static inline float cism__qint_d(const uint8_t *blk) { return cism__f16_to_f32((uint16_t)(blk[0] | (blk[1] << 8))); }
/* The level (code - H) of element i (0..31) of a q6, q5, q3 or q2 block. */
static inline int cism__qint_level(int32_t dtype, const uint8_t *blk, int i) {
    int code;
    if (dtype == CISM_DTYPE_Q2) code = (blk[2 + (i & 7)] >> (2 * (i >> 3))) & 3;
    else if (dtype == CISM_DTYPE_Q3)
        code = ((blk[6 + (i & 7)] >> (2 * (i >> 3))) & 3) | (((blk[2 + (i >> 3)] >> (i & 7)) & 1) << 2);
    else if (dtype == CISM_DTYPE_Q6)
        code = (i < 16 ? (blk[2 + i] & 15) : (blk[2 + i - 16] >> 4)) | (((blk[18 + (i & 7)] >> (2 * (i >> 3))) & 3) << 4);
    else
        code = (i < 16 ? (blk[6 + i] & 15) : (blk[6 + i - 16] >> 4)) | (((blk[2 + (i >> 3)] >> (i & 7)) & 1) << 4);
    return code - cism__qint_half(dtype);
}
/* All 32 levels of a block (the same values as cism__qint_level, plane by plane). */
static inline void cism__qint_levels(int32_t dtype, const uint8_t *blk, int32_t *lv) {
    const int H = cism__qint_half(dtype);
    int j;
    if (dtype == CISM_DTYPE_Q2 || dtype == CISM_DTYPE_Q3) { /* the 2-bit plane (q3: bits 0-1, and its bit-2 uint32) */
        const uint8_t *pl = blk + (dtype == CISM_DTYPE_Q2 ? 2 : 6);
        for (j = 0; j < 8; j++) {
            lv[j] = (pl[j] & 3) - H;
            lv[j + 8] = ((pl[j] >> 2) & 3) - H;
            lv[j + 16] = ((pl[j] >> 4) & 3) - H;
            lv[j + 24] = (pl[j] >> 6) - H;
        }
        if (dtype == CISM_DTYPE_Q3) {
            const uint32_t qh = (uint32_t)blk[2] | ((uint32_t)blk[3] << 8) | ((uint32_t)blk[4] << 16) | ((uint32_t)blk[5] << 24);
            for (j = 0; j < 32; j++) lv[j] += (int)(((qh >> j) & 1u) << 2);
        }
    } else if (dtype == CISM_DTYPE_Q6) {
        for (j = 0; j < 16; j++) {
            lv[j] = (blk[2 + j] & 15) - H;
            lv[j + 16] = (blk[2 + j] >> 4) - H;
        }
        for (j = 0; j < 8; j++) {
            const int h = blk[18 + j];
            lv[j] += (h & 3) << 4;
            lv[j + 8] += ((h >> 2) & 3) << 4;
            lv[j + 16] += ((h >> 4) & 3) << 4;
            lv[j + 24] += (h >> 6) << 4;
        }
    } else {
        const uint32_t qh = (uint32_t)blk[2] | ((uint32_t)blk[3] << 8) | ((uint32_t)blk[4] << 16) | ((uint32_t)blk[5] << 24);
        for (j = 0; j < 16; j++) {
            lv[j] = ((blk[6 + j] & 15) | (int)(((qh >> j) & 1u) << 4)) - H;
            lv[j + 16] = ((blk[6 + j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4)) - H;
        }
    }
}

/* The 4-bit formats are one scheme with different parameters: blocks of
 * `block` weights, each a scale followed by block/2 bytes of 4-bit codes.
 * Byte j of a block holds code j (low nibble) and code j + block/2 (high
 * nibble). Weight = scale * levels[code]. */
enum { CISM__SCALE_F16 = 0, CISM__SCALE_E4M3 = 1 };

typedef struct cism__fmt4 {
    int32_t dtype;
    int32_t block;          /* weights per block: 16 or 32 */
    int32_t scale_kind;     /* CISM__SCALE_F16 (2 bytes) or CISM__SCALE_E4M3 (1 byte) */
    float scale_mul;        /* E4M3 scales: value = e4m3(byte) * scale_mul (a power of two) */
    int32_t block_bytes;
    int8_t levels[16];      /* level of each code */
} cism__fmt4;

/* The descriptor of a 4-bit dtype, NULL for other dtypes. */
const cism__fmt4 *cism__fmt4_of(int32_t dtype);

/* FP8 E4M3 (1 sign, 4 exponent bits with bias 7, 3 mantissa bits, no
 * infinities; 0x7F and 0xFF are NaN). */
extern const float cism__e4m3_table[256];

static inline float cism__fmt4_scale(const cism__fmt4 *f, const uint8_t *block) {
    if (f->scale_kind == CISM__SCALE_F16) return cism__f16_to_f32((uint16_t)(block[0] | (block[1] << 8)));
    return cism__e4m3_table[block[0]] * f->scale_mul;
}

/* int8 activation blocks (the integer-dot path): 32 activations as int8
 * times a float32 scale, with the sum of the 32 ints for offset corrections. */
#define CISM__A8_BLOCK 32
typedef struct cism__act8 {
    float d;
    int32_t sum;
    int8_t q[CISM__A8_BLOCK];
} cism__act8;

/* Outlier channels of a quantized activation row (model/act_outliers.c): up
   to CISM__A8_MAX_OUT channels, each the max of its block of 32 taken out
   while that lowers the row's int8 noise (sum over blocks of max^2) by more
   than CISM__A8_OUT_GAIN times a mean block's; kept in float and zeroed in
   the int8 blocks. */
#define CISM__A8_MAX_OUT 10
#define CISM__A8_OUT_GAIN 1.5
typedef struct cism__act8_out {
    int32_t n;
    int32_t idx[CISM__A8_MAX_OUT];
    float val[CISM__A8_MAX_OUT];
} cism__act8_out;

/* A quantized activation row of cols elements: ceil(cols / 32) blocks, then
   two int32 per block, the sums of its elements 0..15 and 16..31 (the
   offset corrections of weight blocks of 16). Every quantize_act writes both. */
static inline int64_t cism__act8_row_bytes(int64_t cols) {
    return (cols + CISM__A8_BLOCK - 1) / CISM__A8_BLOCK * (int64_t)(sizeof(cism__act8) + 2 * sizeof(int32_t));
}
/* Row t of quantized activation rows ldq bytes apart, from xq */
static inline const cism__act8 *cism__act8_row(const void *xq, int64_t ldq, int64_t t) {
    return (const cism__act8 *)(const void *)((const uint8_t *)xq + t * ldq);
}
static inline int32_t *cism__act8_half_sums(void *row, int64_t cols) {
    return (int32_t *)(void *)((uint8_t *)row + (cols + CISM__A8_BLOCK - 1) / CISM__A8_BLOCK * (int64_t)sizeof(cism__act8));
}

/* The float just below 0.5 (0.5 - 2^-25). For |v| < 2^31, truncating
   v + copysign(CISM__HALF_BELOW, v) rounds v half away from zero exactly: a
   fraction below one half stays below the next integer after the addition's
   rounding (it is at least an ulp of v plus 2^-25 short of it), a fraction of
   one half reaches it (2^-25 short: half an ulp or less there, ties to even
   at 1), a larger one passes it. The x86 quantizers use it; the scalar tier
   tests the fraction itself. */
#define CISM__HALF_BELOW 0.49999997f

/* The factor a block of activations with max |x| = amax is quantized by (q =
   round(x * inv)), the same on every tier: 127 / amax, or 0 (every code 0) for
   an all-zero block and for one whose max is so small (below 127 / FLT_MAX,
   about 3.7e-37) that the inverse overflows: x * inf would be +-inf or NaN,
   which no tier converts to an int8 code the same way (found by fuzz_loader). */
static inline float cism__act8_inv(float amax) {
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    return inv <= FLT_MAX ? inv : 0.0f;
}

/* f32 rows of any row-layout dtype (quant.c). */
void cism__dequantize_row(int32_t dtype, const uint8_t *row, float *out, int64_t cols);
/* Row r of a matrix of any dtype (interleaved ones included) as f32. */
void cism__matrix_row_f32(int32_t dtype, const void *w, uint64_t row_bytes, int64_t cols, int64_t r, float *out);

/* ---- row-interleaved layouts (q8x16, q4sx16, q4ax16, q6x16, q5x16, q3x16, q2x16) ---
 * The values of the base dtype (q8, q4s, q4a, q6, q5, q3, q2), in groups of 16 rows (a
 * matrix's rows are whole groups). A group of nb blocks per row takes 16 *
 * row_bytes bytes, a run of superblocks of S consecutive blocks (q8, q6, q5, q3, q2:
 * S = 2, q4s: S = 4, q4a: S = 1; the last one may hold fewer): first the codes
 * of its blocks, then their scales, which fill exactly one 64-byte line in a
 * whole superblock.
 *   codes of block b: its code bytes (q8: 32, q4s: 8, q4a: 16, q6: 24, q5: 20, q3: 12,
 *     q2: 8)
 *     in 4-byte chunks; chunk c of the 16 rows is 64 bytes: row 0's bytes
 *     4c..4c+3, row 1's, ...
 *   scales of block b: the 16 rows' scales (q8, q6, q5, q3, q2: fp16, 2 bytes; q4s:
 *     E4M3, 1; q4a: fp16 scale then fp16 minimum, 4 bytes per row as in the
 *     q4a block)
 * Code bytes mean what they mean in the base format (q8: int8; q4s: byte j
 * holds element j in the low nibble and j + 8 in the high one; q4a: element j
 * low, j + 16 high, codes 0..15; q6: chunks 0-3 the nibble bytes, 4-5 the
 * 2-bit plane, plane byte j (chunk 4 + j / 4) holding elements j + 8k; q5:
 * chunk 0 the uint32 of bit 4, chunks 1-4 the nibble bytes; q3: chunk 0 the
 * uint32 of bit 2, chunks 1-2 the 2-bit plane, plane byte j in chunk 1 + j / 4,
 * holding elements j + 8k; q2: chunks 0-1 the 2-bit plane, as q3's chunks 1-2). One 64-byte
 * load thus feeds 16 rows with 4 bytes each (a 512-bit vpdpbusd, two 256-bit
 * registers of 8 rows, four 128-bit sdot registers of 4 rows). Scales inside
 * the superblocks make a group one sequential stream, which the hardware
 * prefetchers follow better than codes and scales as two (KERNELS.md).
 * Files of format version 1 kept all codes first, then all scales
 * (cism__x16_from_v1). */
typedef struct cism__x16 {
    int32_t code_bytes, scale_bytes;  /* per block and row */
    int32_t sb_shift;                 /* log2(S): blocks per superblock */
    int64_t nb;                       /* blocks per row */
    uint64_t sb_bytes;                /* a whole superblock: S * 16 * (code_bytes + scale_bytes) */
} cism__x16;

static inline cism__x16 cism__x16_geom(int32_t dtype, uint64_t row_bytes) {
    cism__x16 g;
    switch (dtype) { /* S = 2^sb_shift: 16 * S * scale_bytes = 64 */
    case CISM_DTYPE_Q8X16: g.code_bytes = 32; g.scale_bytes = 2; g.sb_shift = 1; break;
    case CISM_DTYPE_Q4AX16: g.code_bytes = 16; g.scale_bytes = 4; g.sb_shift = 0; break;
    case CISM_DTYPE_Q6X16: g.code_bytes = 24; g.scale_bytes = 2; g.sb_shift = 1; break;
    case CISM_DTYPE_Q5X16: g.code_bytes = 20; g.scale_bytes = 2; g.sb_shift = 1; break;
    case CISM_DTYPE_Q3X16: g.code_bytes = 12; g.scale_bytes = 2; g.sb_shift = 1; break;
    case CISM_DTYPE_Q2X16: g.code_bytes = 8; g.scale_bytes = 2; g.sb_shift = 1; break;
    default: g.code_bytes = 8; g.scale_bytes = 1; g.sb_shift = 2; break; /* q4sx16 */
    }
    g.nb = (int64_t)(row_bytes / (uint64_t)(g.code_bytes + g.scale_bytes));
    g.sb_bytes = (uint64_t)CISM__X16 * (uint64_t)(g.code_bytes + g.scale_bytes) << g.sb_shift;
    return g;
}
/* The codes of block b of a group (16 * code_bytes bytes) */
static inline const uint8_t *cism__x16_codes(const cism__x16 *g, const uint8_t *grp, int64_t b) {
    const int64_t s = b >> g->sb_shift, j = b - (s << g->sb_shift);
    return grp + (uint64_t)s * g->sb_bytes + (uint64_t)(j * CISM__X16 * g->code_bytes);
}
/* The 16 rows' scales of block b of a group (16 * scale_bytes bytes) */
static inline const uint8_t *cism__x16_scales(const cism__x16 *g, const uint8_t *grp, int64_t b) {
    const int64_t s = b >> g->sb_shift, j = b - (s << g->sb_shift), first = s << g->sb_shift;
    const int64_t n = g->nb - first < ((int64_t)1 << g->sb_shift) ? g->nb - first : (int64_t)1 << g->sb_shift;
    return grp + (uint64_t)s * g->sb_bytes + (uint64_t)(n * CISM__X16 * g->code_bytes + j * CISM__X16 * g->scale_bytes);
}

/* The rows of group gi (16 rows from 16 gi) inside [r0, r1), one bit each:
   the rows a kernel that computes the whole group stores. */
static inline uint32_t cism__x16_row_mask(int64_t gi, int64_t r0, int64_t r1) {
    const int64_t lo = r0 - gi * CISM__X16, hi = r1 - gi * CISM__X16;
    uint32_t m = 0xffffu;
    if (lo > 0) m &= ~((1u << lo) - 1u);
    if (hi < CISM__X16) m &= (1u << hi) - 1u;
    return m;
}

/* Decode prefetch of the interleaved kernels (the x86 tiers). The groups that
   hold rows [r0, r1): [*lo, *hi). A kernel prefetches the first `dist` bytes of
   that range before its first group, then, at block b of a group, the bytes
   cism__x16_prefetch_step gives: `dist` ahead, a block's share of the group
   with its scales, so the sweep covers every line, never past *hi (the rows of
   another call, e.g. another thread's). */
static inline void cism__x16_rows_span(const void *w, uint64_t row_bytes, int64_t r0, int64_t r1, uintptr_t *lo, uintptr_t *hi) {
    *lo = (uintptr_t)w + (uintptr_t)((uint64_t)(r0 / CISM__X16) * CISM__X16 * row_bytes);
    *hi = (uintptr_t)w + (uintptr_t)((uint64_t)((r1 + CISM__X16 - 1) / CISM__X16) * CISM__X16 * row_bytes);
}
static inline void cism__x16_prefetch_step(const cism__x16 *g, const uint8_t *grp, int64_t b, uintptr_t dist, uintptr_t hi,
                                           uintptr_t *from, uintptr_t *to) {
    const uintptr_t share = (uintptr_t)(CISM__X16 * (g->code_bytes + g->scale_bytes));
    *from = ((uintptr_t)grp + (uintptr_t)b * share + dist) & ~(uintptr_t)63;
    *to = (uintptr_t)grp + (uintptr_t)(b + 1) * share + dist;
    if (*to > hi) *to = hi;
}

/* 16 rows of the base format (row_bytes apart, at plain) -> one interleaved group (quant.c). */
void cism__x16_interleave(int32_t dtype, const uint8_t *plain, uint64_t row_bytes, uint8_t *grp);
/* One group in format version 1's layout (all codes, then all scales) -> this
   layout, in place; tmp holds 16 * row_bytes bytes (quant.c). */
void cism__x16_from_v1(int32_t dtype, uint8_t *grp, uint64_t row_bytes, uint8_t *tmp);

/* Block b of row r as the base format stores it (scale, then codes) into out. */
static inline void cism__x16_block(int32_t dtype, const uint8_t *w, uint64_t row_bytes, int64_t r, int64_t b, uint8_t *out) {
    cism__x16 g = cism__x16_geom(dtype, row_bytes);
    const uint8_t *grp = w + (uint64_t)(r / CISM__X16) * CISM__X16 * row_bytes;
    int64_t i = r % CISM__X16, c;
    const uint8_t *codes = cism__x16_codes(&g, grp, b);
    memcpy(out, cism__x16_scales(&g, grp, b) + i * g.scale_bytes, (size_t)g.scale_bytes);
    for (c = 0; c < g.code_bytes / 4; c++) memcpy(out + g.scale_bytes + 4 * c, codes + c * 64 + i * 4, 4);
}

/* The scalar tier's kernels of the packed formats (kernels_scalar_quant.c). */
#define CISM__SCALAR_QUANT_DECL(nm) \
    void cism__scalar_matmul_##nm(const void *w, uint64_t row_bytes, int64_t cols, const float *x, int64_t ldx, \
                                  float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1); \
    void cism__scalar_matmul_a8_##nm(const void *w, uint64_t row_bytes, int64_t cols, const void *xq, int64_t ldq, \
                                     float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1); \
    void cism__scalar_row_##nm(const void *row, float *out, int64_t n);
CISM__SCALAR_QUANT_DECL(q8)
CISM__SCALAR_QUANT_DECL(q4)
CISM__SCALAR_QUANT_DECL(fp4)
CISM__SCALAR_QUANT_DECL(nl4)
CISM__SCALAR_QUANT_DECL(q4s)
CISM__SCALAR_QUANT_DECL(q4a)
CISM__SCALAR_QUANT_DECL(q6)
CISM__SCALAR_QUANT_DECL(q5)
CISM__SCALAR_QUANT_DECL(q3)
CISM__SCALAR_QUANT_DECL(q2)
/* interleaved dtypes: no row_to_f32 (a row is not contiguous; cism__matrix_row_f32) */
#define CISM__SCALAR_X16_DECL(nm) \
    void cism__scalar_matmul_##nm(const void *w, uint64_t row_bytes, int64_t cols, const float *x, int64_t ldx, \
                                  float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1); \
    void cism__scalar_matmul_a8_##nm(const void *w, uint64_t row_bytes, int64_t cols, const void *xq, int64_t ldq, \
                                     float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1);
CISM__SCALAR_X16_DECL(q8x16)
CISM__SCALAR_X16_DECL(q4sx16)
CISM__SCALAR_X16_DECL(q4ax16)
CISM__SCALAR_X16_DECL(q6x16)
CISM__SCALAR_X16_DECL(q5x16)
CISM__SCALAR_X16_DECL(q3x16)
CISM__SCALAR_X16_DECL(q2x16)
void cism__quantize_act_scalar(const float *x, int64_t n, void *out);
void cism__act_block_top2_scalar(const float *x, int64_t nb, float *m1, float *m2);
int cism__act_block_take_scalar(const float *v, uint32_t *taken, float *m1, float *m2, float *out);

/* The position of the lowest set bit of x (x != 0): a de Bruijn sequence's
   5-bit windows are all distinct, so the product's top 5 bits name the bit. */
static inline int cism__low_bit(uint32_t x) {
    static const uint8_t pos[32] = {0,  1,  28, 2,  29, 14, 24, 3, 30, 22, 20, 15, 25, 17, 4, 8,
                                    31, 27, 13, 23, 21, 19, 16, 7, 26, 12, 18, 6,  11, 5,  10, 9};
    return pos[((x & (0u - x)) * 0x077CB531u) >> 27];
}

#endif
