/* kernels_scalar_quant.c - the scalar reference kernels of the packed weight
 * formats (quant.h): dot products from the packed bytes, against float32
 * activations (a row is decoded 256 weights at a time into a stack buffer,
 * never a whole matrix) or against int8 activation blocks (integer products
 * per block, straight from the packed codes). Part of the scalar tier; built with
 * -ffp-contract=off like kernels_scalar.c. */
#include "kernels.h"
#include "quant.h"

#include <math.h>
#include <string.h>

#define LANES 8
#define TOK 8 /* token rows sharing one decoded chunk */

/* Decodes the levels (without the scale) of one block; returns its scale. */
static inline float decode4(const cism__fmt4 *f, const uint8_t *blk, float *lv) {
    const uint8_t *q = blk + (f->scale_kind == CISM__SCALE_F16 ? 2 : 1);
    int half = f->block / 2, i;
    for (i = 0; i < half; i++) {
        lv[i] = (float)f->levels[q[i] & 15];
        lv[i + half] = (float)f->levels[q[i] >> 4];
    }
    return cism__fmt4_scale(f, blk);
}

static inline float decode8(const uint8_t *blk, float *lv) {
    int i;
    for (i = 0; i < CISM__Q8_BLOCK; i++) lv[i] = (float)(int8_t)blk[2 + i];
    return cism__f16_to_f32((uint16_t)(blk[0] | (blk[1] << 8)));
}

/* q4a: the 32 codes of one block (0..15), without scale and minimum */
static inline void codes4a(const uint8_t *blk, int32_t *c) {
    int i;
    for (i = 0; i < 16; i++) {
        c[i] = blk[4 + i] & 15;
        c[i + 16] = blk[4 + i] >> 4;
    }
}

/* Block b of row r in its base format's layout (scale, then codes): in place
   for row-layout dtypes, copied into tmp for the interleaved ones. */
static inline const uint8_t *block_at(int32_t dt, const uint8_t *w, uint64_t rb, int64_t r, int64_t b, int64_t bb,
                                      uint8_t *tmp) {
    if (!cism__dtype_is_x16(dt)) return w + (uint64_t)r * rb + (uint64_t)(b * bb);
    cism__x16_block(dt, w, rb, r, b, tmp);
    return tmp;
}

/* ---- float32 activations -------------------------------------------------------- */
#define CHUNK 256 /* weights decoded at a time: whole blocks of 16 or 32 */

static inline void dot_lanes(float acc[LANES], const float *a, const float *b, int64_t n) {
    int64_t j;
    for (j = 0; j + LANES <= n; j += LANES) {
        int k;
        for (k = 0; k < LANES; k++) acc[k] += a[j + k] * b[j + k];
    }
    for (; j < n; j++) acc[j % LANES] += a[j] * b[j];
}

/* Weights c0 .. c0+n of row r (c0 a multiple of the block) as scale * level. */
static void decode_run(const cism__fmt4 *f, int32_t dt, const uint8_t *w, uint64_t rb, int64_t r, int64_t c0, int64_t n,
                       float *out) {
    int64_t B = f ? f->block : CISM__Q8_BLOCK, bb = f ? f->block_bytes : CISM__Q8_BYTES, c, b = c0 / B;
    float lv[32];
    uint8_t tmp[CISM__Q8_BYTES] = {0};
    if (dt == CISM_DTYPE_Q4A) { /* d * code + m, exactly as cism__dequantize_row */
        cism__dequantize_row(dt, w + (uint64_t)r * rb + (uint64_t)(b * CISM__Q4A_BYTES), out, n);
        return;
    }
    if (cism__dtype_is_x16(dt) && !f && cism__dtype_base(dt) != CISM_DTYPE_Q8) { /* q4ax16, q6x16, q5x16: block by block, the same */
        const int32_t base = cism__dtype_base(dt);
        const int64_t bbx = (int64_t)cism__row_bytes(base, 32);
        for (c = 0; c < n; c += 32, b++)
            cism__dequantize_row(base, block_at(dt, w, rb, r, b, bbx, tmp), out + c, n - c < 32 ? n - c : 32);
        return;
    }
    if (cism__dtype_is_qint(dt)) { /* q6, q5: d * level, exactly as cism__dequantize_row */
        cism__dequantize_row(dt, w + (uint64_t)r * rb + (uint64_t)(b * cism__qint_bytes(dt)), out, n);
        return;
    }
    for (c = 0; c < n; c += B, b++) {
        const uint8_t *blk = block_at(dt, w, rb, r, b, bb, tmp);
        float d = f ? decode4(f, blk, lv) : decode8(blk, lv);
        int64_t m = n - c < B ? n - c : B, i;
        for (i = 0; i < m; i++) out[c + i] = d * lv[i];
    }
}

/* Rows are decoded CHUNK weights at a time into a stack buffer (never more)
   and dotted with up to TOK token rows; partial sums run across chunks. */
static void matmul_blocks(int32_t dt, const void *w, uint64_t row_bytes, int64_t cols, const float *x, int64_t ldx,
                          float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    const cism__fmt4 *f = cism__fmt4_of(cism__dtype_base(dt));
    float buf[CHUNK];
    float acc[TOK][LANES];
    int64_t r, t0;
    for (r = r0; r < r1; r++) {
        for (t0 = 0; t0 < nt; t0 += TOK) {
            int64_t tn = nt - t0 < TOK ? nt - t0 : TOK, c0, t;
            int k;
            for (t = 0; t < tn; t++)
                for (k = 0; k < LANES; k++) acc[t][k] = 0.0f;
            for (c0 = 0; c0 < cols; c0 += CHUNK) {
                int64_t cn = cols - c0 < CHUNK ? cols - c0 : CHUNK;
                decode_run(f, dt, (const uint8_t *)w, row_bytes, r, c0, cn, buf);
                for (t = 0; t < tn; t++) dot_lanes(acc[t], buf, x + (t0 + t) * ldx + c0, cn);
            }
            for (t = 0; t < tn; t++)
                y[(t0 + t) * ldy + r] = ((acc[t][0] + acc[t][4]) + (acc[t][1] + acc[t][5])) +
                                        ((acc[t][2] + acc[t][6]) + (acc[t][3] + acc[t][7]));
        }
    }
}

/* ---- int8 activations ---------------------------------------------------------------- */
/* The two largest |p[i]| of each whole block of 32. On the bits (sign
   cleared) as unsigned integers, whose order is the floats' (a NaN is above
   every number): integer min/max need no assumptions on NaNs. A tournament:
   pairs, then each level keeps the larger max and the larger of the seconds
   and the smaller max. */
void cism__act_block_top2_scalar(const float *x, int64_t nb, float *m1, float *m2) {
    int64_t b;
    for (b = 0; b < nb; b++) {
        uint32_t u[CISM__A8_BLOCK], M[16], S[16];
        int i, w;
        memcpy(u, x + b * CISM__A8_BLOCK, sizeof(u));
        for (i = 0; i < 16; i++) {
            uint32_t a = u[i] & 0x7fffffffu, c = u[i + 16] & 0x7fffffffu;
            M[i] = a > c ? a : c;
            S[i] = a > c ? c : a;
        }
        for (w = 8; w >= 1; w /= 2)
            for (i = 0; i < w; i++) {
                uint32_t a = M[i], c = M[i + w], hi = a > c ? a : c, lo = a > c ? c : a;
                uint32_t s = S[i] > S[i + w] ? S[i] : S[i + w];
                S[i] = s > lo ? s : lo;
                M[i] = hi;
            }
        memcpy(&m1[b], &M[0], 4);
        memcpy(&m2[b], &S[0], 4);
    }
}

/* kernels.h act_block_take: the block with the lanes taken zeroed, the first
   position of magnitude *m1 zeroed and taken, the statistics of what is left */
int cism__act_block_take_scalar(const float *v, uint32_t *taken, float *m1, float *m2, float *out) {
    uint32_t t;
    int i;
    memcpy(out, v, CISM__A8_BLOCK * sizeof(float));
    for (t = *taken; t; t &= t - 1) out[cism__low_bit(t)] = 0.0f;
    for (i = 0; i < CISM__A8_BLOCK - 1 && fabsf(out[i]) != *m1; i++) {}
    out[i] = 0.0f;
    *taken |= 1u << i;
    cism__act_block_top2_scalar(out, 1, m1, m2);
    return i;
}

void cism__quantize_act_scalar(const float *x, int64_t n, void *out) {
    cism__act8 *a = (cism__act8 *)out;
    int32_t *hs = cism__act8_half_sums(out, n);
    int64_t c0;
    for (c0 = 0; c0 < n; c0 += CISM__A8_BLOCK, a++, hs += 2) {
        int m = (int)(n - c0 < CISM__A8_BLOCK ? n - c0 : CISM__A8_BLOCK), i;
        float amax = 0.0f, inv;
        int32_t sum = 0;
        for (i = 0; i < m; i++)
            if (fabsf(x[c0 + i]) > amax) amax = fabsf(x[c0 + i]);
        a->d = amax / 127.0f;
        inv = cism__act8_inv(amax);
        for (i = 0; i < CISM__A8_BLOCK; i++) {
            float v = i < m ? x[c0 + i] * inv : 0.0f, av = fabsf(v);
            long q = av == av ? (long)av : 0; /* round half away from zero; NaN (a NaN input, or inf * 0) -> 0 */
            if (av - (float)q >= 0.5f) q++;
            if (v < 0) q = -q;
            if (q > 127) q = 127;
            if (q < -127) q = -127;
            a->q[i] = (int8_t)q;
            sum += (int32_t)q;
            if (i == CISM__A8_BLOCK / 2 - 1) hs[0] = sum;
        }
        a->sum = sum;
        hs[1] = sum - hs[0];
    }
}

/* Weight blocks of B (16 or 32) against activation blocks of 32: weight block b
   covers activation block (b*B)/32 from offset (b*B)%32. Padding weights meet
   zero activations, so whole blocks are summed. Per block,
       acc += (float)s_b * (d_w * d_a)                       (q8, q6, q5, 4-bit formats)
       acc += (d_w * (float)s_b + m_w * (float)sum_a) * d_a  (q4a; s_b = sum code * q)
   in this order, no FMA: every SIMD tier repeats these operations. */
static void matmul_a8_blocks(int32_t dt, const void *w, uint64_t row_bytes, int64_t cols, const void *xq,
                             int64_t ldq, float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    const cism__fmt4 *f = cism__fmt4_of(cism__dtype_base(dt));
    uint8_t tmp[CISM__Q8_BYTES] = {0};
    const int32_t base = cism__dtype_base(dt);
    const int asym = base == CISM_DTYPE_Q4A, qint = cism__dtype_is_qint(base);
    int64_t B = f ? f->block : CISM__Q8_BLOCK;
    int64_t bb = f ? f->block_bytes : asym ? CISM__Q4A_BYTES : qint ? cism__qint_bytes(base) : CISM__Q8_BYTES;
    int64_t nb = (cols + B - 1) / B;
    int32_t lv[32];
    int64_t r, t0, t, b;
    for (r = r0; r < r1; r++) {
        for (t0 = 0; t0 < nt; t0 += TOK) {
            int64_t tn = nt - t0 < TOK ? nt - t0 : TOK;
            float acc[TOK] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (b = 0; b < nb; b++) {
                const uint8_t *blk = block_at(dt, (const uint8_t *)w, row_bytes, r, b, bb, tmp);
                float d, m = 0.0f;
                int i;
                if (asym) {
                    codes4a(blk, lv);
                    d = cism__q4a_d(blk);
                    m = cism__q4a_m(blk);
                } else if (qint) {
                    cism__qint_levels(base, blk, lv);
                    d = cism__qint_d(blk);
                } else if (f) {
                    const uint8_t *q = blk + (f->scale_kind == CISM__SCALE_F16 ? 2 : 1);
                    int half = f->block / 2;
                    for (i = 0; i < half; i++) {
                        lv[i] = f->levels[q[i] & 15];
                        lv[i + half] = f->levels[q[i] >> 4];
                    }
                    d = cism__fmt4_scale(f, blk);
                } else {
                    for (i = 0; i < CISM__Q8_BLOCK; i++) lv[i] = (int8_t)blk[2 + i];
                    d = cism__f16_to_f32((uint16_t)(blk[0] | (blk[1] << 8)));
                }
                for (t = 0; t < tn; t++) {
                    const cism__act8 *ab = (const cism__act8 *)(const void *)((const uint8_t *)xq + (t0 + t) * ldq) +
                                           (b * B) / CISM__A8_BLOCK;
                    const int8_t *aq = ab->q + (b * B) % CISM__A8_BLOCK;
                    int32_t sum = 0;
                    for (i = 0; i < B; i++) sum += lv[i] * aq[i];
                    if (asym) acc[t] += (d * (float)sum + m * (float)ab->sum) * ab->d;
                    else acc[t] += (float)sum * (d * ab->d);
                }
            }
            for (t = 0; t < tn; t++) y[(t0 + t) * ldy + r] = acc[t];
        }
    }
}

/* ---- the table's entries: one pair of kernels per packed dtype, one row
   decoder per row-layout dtype (an interleaved row is not contiguous:
   cism__matrix_row_f32) --------------------------------------------------------------- */
#define SCALAR_KERNELS(nm, DT)                                                                                        \
    void cism__scalar_matmul_##nm(const void *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y,   \
                                  int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {                                  \
        matmul_blocks(DT, w, rb, cols, x, ldx, y, ldy, nt, r0, r1);                                                   \
    }                                                                                                                 \
    void cism__scalar_matmul_a8_##nm(const void *w, uint64_t rb, int64_t cols, const void *xq, int64_t ldq, float *y, \
                                     int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {                               \
        matmul_a8_blocks(DT, w, rb, cols, xq, ldq, y, ldy, nt, r0, r1);                                               \
    }
#define SCALAR_ROW_KERNELS(nm, DT)                                                                                    \
    SCALAR_KERNELS(nm, DT)                                                                                            \
    void cism__scalar_row_##nm(const void *row, float *out, int64_t n) {                                              \
        cism__dequantize_row(DT, (const uint8_t *)row, out, n);                                                       \
    }
SCALAR_ROW_KERNELS(q8, CISM_DTYPE_Q8)
SCALAR_ROW_KERNELS(q4, CISM_DTYPE_Q4)
SCALAR_ROW_KERNELS(fp4, CISM_DTYPE_FP4)
SCALAR_ROW_KERNELS(nl4, CISM_DTYPE_NL4)
SCALAR_ROW_KERNELS(q4s, CISM_DTYPE_Q4S)
SCALAR_ROW_KERNELS(q4a, CISM_DTYPE_Q4A)
SCALAR_ROW_KERNELS(q6, CISM_DTYPE_Q6)
SCALAR_ROW_KERNELS(q5, CISM_DTYPE_Q5)
SCALAR_ROW_KERNELS(q3, CISM_DTYPE_Q3)
SCALAR_ROW_KERNELS(q2, CISM_DTYPE_Q2)
SCALAR_KERNELS(q8x16, CISM_DTYPE_Q8X16)
SCALAR_KERNELS(q4sx16, CISM_DTYPE_Q4SX16)
SCALAR_KERNELS(q4ax16, CISM_DTYPE_Q4AX16)
SCALAR_KERNELS(q6x16, CISM_DTYPE_Q6X16)
SCALAR_KERNELS(q5x16, CISM_DTYPE_Q5X16)
SCALAR_KERNELS(q3x16, CISM_DTYPE_Q3X16)
SCALAR_KERNELS(q2x16, CISM_DTYPE_Q2X16)
