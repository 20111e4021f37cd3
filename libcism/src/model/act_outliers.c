/* act_outliers.c - int8 activations with their outlier channels computed
 * exactly (CISM_PARAM_ACT_OUTLIERS, docs/QUANTIZATION.md "Outlier channels").
 *
 * Real models have a few activation channels far larger than the rest; a block
 * of 32 that holds one quantizes its other 31 values coarsely. Each quantized
 * row therefore keeps, after its int8 blocks, a small table: the channels
 * whose magnitude exceeds CISM__A8_OUT_RATIO times the row's RMS (at most
 * CISM__A8_MAX_OUT of them, the largest; ties by index), with their float
 * values. Those channels are zeroed before the row is quantized, so the int8
 * bulk gets a clean absmax, and after the integer-dot kernel each output
 * element adds value * weight (the weight decoded from its packed block) for
 * every channel of the table, in table order.
 *
 * Determinism: the table depends only on the row, and each output element
 * gets its additions in the same order whatever the row range of the call,
 * so results do not depend on threads, chunking or batching. */
#include "session.h"
#include "../kernels/quant.h"

#include <math.h>
#include <string.h>

static cism__act8_out *table_of(uint8_t *qrow, int64_t ldq) {
    return (cism__act8_out *)(void *)(qrow + ldq - (int64_t)sizeof(cism__act8_out));
}

void cism__act8_quantize_split(void (*quant)(const float *, int64_t, void *), const float *x, int64_t n,
                               uint8_t *qrow, int64_t ldq, float *tmp) {
    cism__act8_out *o = table_of(qrow, ldq);
    float ss[8] = {0, 0, 0, 0, 0, 0, 0, 0}, mx[8] = {0, 0, 0, 0, 0, 0, 0, 0}, thr, amax = 0.0f;
    double sum = 0.0;
    int64_t i;
    int j, k;
    o->n = 0;
    /* eight independent lanes (vectorizable), then a fixed-order reduction */
    for (i = 0; i + 8 <= n; i += 8)
        for (j = 0; j < 8; j++) {
            float v = x[i + j], a = fabsf(v);
            ss[j] += v * v;
            mx[j] = a > mx[j] ? a : mx[j];
        }
    for (j = 0; j < 8; j++) {
        sum += ss[j];
        amax = mx[j] > amax ? mx[j] : amax;
    }
    for (; i < n; i++) {
        sum += (double)x[i] * x[i];
        amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    }
    thr = (float)(CISM__A8_OUT_RATIO * sqrt(sum / (double)(n > 0 ? n : 1)));
    if (!(amax > thr)) { /* no outlier (or NaN: the plain quantizer, the caller flags it) */
        quant(x, n, qrow);
        return;
    }
    for (i = 0; i < n; i++) {
        float a;
        if ((i & 7) == 0 && i + 8 <= n) { /* skip whole groups of 8 below the threshold */
            float g = 0.0f;
            for (j = 0; j < 8; j++) g = fabsf(x[i + j]) > g ? fabsf(x[i + j]) : g;
            if (!(g > thr)) {
                i += 7;
                continue;
            }
        }
        a = fabsf(x[i]);
        if (!(a > thr) || a == 0.0f) continue;
        /* keep the CISM__A8_MAX_OUT largest, sorted by decreasing magnitude (stable: earlier index first) */
        for (j = o->n; j > 0 && fabsf(o->val[j - 1]) < a; j--) {
            if (j < CISM__A8_MAX_OUT) { o->idx[j] = o->idx[j - 1]; o->val[j] = o->val[j - 1]; }
        }
        if (j < CISM__A8_MAX_OUT) {
            o->idx[j] = (int32_t)i;
            o->val[j] = x[i];
            if (o->n < CISM__A8_MAX_OUT) o->n++;
        }
    }
    if (o->n == 0) {
        quant(x, n, qrow);
        return;
    }
    memcpy(tmp, x, (size_t)n * sizeof(float));
    for (k = 0; k < o->n; k++) tmp[o->idx[k]] = 0.0f;
    quant(tmp, n, qrow);
}

/* Column c of rows [r0, r1) of a packed matrix, as f32 into out. */
static void weight_col(int32_t dtype, const uint8_t *w, uint64_t row_bytes, int64_t r0, int64_t r1, int64_t c, float *out) {
    int64_t r;
    if (cism__dtype_is_x16(dtype)) { /* group by group: the 16 rows' scales and codes sit together */
        cism__x16 g = cism__x16_geom(dtype, row_bytes);
        int32_t base = cism__dtype_base(dtype);
        int64_t B = cism_dtype_block_size(base), b = c / B, j = c % B, half = B / 2;
        int64_t byte = base == CISM_DTYPE_Q8 ? j : (j < half ? j : j - half);
        int64_t off = (byte / 4) * 64 + byte % 4;
        const cism__fmt4 *f = cism__fmt4_of(base);
        for (r = r0; r < r1;) {
            const uint8_t *grp = w + (uint64_t)(r / CISM__X16) * CISM__X16 * row_bytes;
            const uint8_t *sc = cism__x16_scales(&g, grp, b), *codes = cism__x16_codes(&g, grp, b) + off;
            int64_t i = r % CISM__X16, end = r - i + CISM__X16 < r1 ? r - i + CISM__X16 : r1;
            for (; r < end; r++, i++) {
                if (base == CISM_DTYPE_Q8) {
                    out[r - r0] = cism__f16_to_f32((uint16_t)(sc[2 * i] | (sc[2 * i + 1] << 8))) * (float)(int8_t)codes[i * 4];
                } else {
                    uint8_t q = codes[i * 4];
                    out[r - r0] = cism__fmt4_scale(f, sc + i) * (float)f->levels[j < half ? (q & 15) : (q >> 4)];
                }
            }
        }
        return;
    }
    if (dtype == CISM_DTYPE_Q8) {
        const uint8_t *p = w + (uint64_t)(c / CISM__Q8_BLOCK) * CISM__Q8_BYTES;
        for (r = r0; r < r1; r++) {
            const uint8_t *blk = p + (uint64_t)r * row_bytes;
            out[r - r0] = cism__f16_to_f32((uint16_t)(blk[0] | (blk[1] << 8))) * (float)(int8_t)blk[2 + c % CISM__Q8_BLOCK];
        }
        return;
    }
    if (dtype == CISM_DTYPE_Q4A) {
        const uint8_t *p = w + (uint64_t)(c / CISM__Q4A_BLOCK) * CISM__Q4A_BYTES;
        int64_t j = c % CISM__Q4A_BLOCK;
        for (r = r0; r < r1; r++) {
            const uint8_t *blk = p + (uint64_t)r * row_bytes;
            int code = j < 16 ? (blk[4 + j] & 15) : (blk[4 + j - 16] >> 4);
            out[r - r0] = cism__q4a_d(blk) * (float)code + cism__q4a_m(blk);
        }
        return;
    }
    {
        const cism__fmt4 *f = cism__fmt4_of(dtype);
        int64_t j = c % f->block, half = f->block / 2, hdr = f->scale_kind == CISM__SCALE_F16 ? 2 : 1;
        const uint8_t *p = w + (uint64_t)(c / f->block) * (uint64_t)f->block_bytes;
        for (r = r0; r < r1; r++) {
            const uint8_t *blk = p + (uint64_t)r * row_bytes;
            uint8_t q = blk[hdr + (j < half ? j : j - half)];
            out[r - r0] = cism__fmt4_scale(f, blk) * (float)f->levels[j < half ? (q & 15) : (q >> 4)];
        }
    }
}

/* A small direct-mapped cache of decoded weight columns (CHUNK rows each):
   the outlier channels are mostly the same few for every token of a chunk. */
enum { CHUNK = 64, SLOTS = 32 };

void cism__act8_add_outliers(int32_t dtype, const void *w, uint64_t row_bytes, const uint8_t *xq, int64_t ldq,
                             float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    float col[SLOTS][CHUNK];
    int64_t tag[SLOTS];
    int64_t t, a, r;
    for (a = r0; a < r1; a += CHUNK) {
        int64_t b = a + CHUNK < r1 ? a + CHUNK : r1;
        int i;
        for (i = 0; i < SLOTS; i++) tag[i] = -1;
        for (t = 0; t < nt; t++) {
            const cism__act8_out *o = table_of((uint8_t *)(uintptr_t)(xq + t * ldq), ldq);
            float *yt = y + t * ldy;
            int k;
            for (k = 0; k < o->n; k++) {
                int64_t c = o->idx[k];
                int slot = (int)(c % SLOTS);
                const float v = o->val[k], *wc = col[slot];
                if (tag[slot] != c) {
                    weight_col(dtype, (const uint8_t *)w, row_bytes, a, b, c, col[slot]);
                    tag[slot] = c;
                }
                for (r = a; r < b; r++) yt[r] += v * wc[r - a];
            }
        }
    }
}
