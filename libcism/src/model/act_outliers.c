/* act_outliers.c - int8 activations with their outlier channels computed
 * exactly (CISM_PARAM_ACT_OUTLIERS, docs/QUANTIZATION.md "Outlier channels").
 *
 * Real models have a few activation channels far larger than the rest; a block
 * of 32 that holds one quantizes its other 31 values coarsely: the int8 step
 * of a block is its max / 127, so the row's int8 noise is proportional to
 * N = sum over blocks of max^2. Each quantized row therefore keeps, after its
 * int8 blocks, a small table of channels taken out greedily: the max of the
 * block whose removal lowers N the most (max^2 - second largest^2; ties: the
 * first block, the first index of its max), while that drop exceeds
 * CISM__A8_OUT_GAIN x N / blocks (1.5 mean blocks' noise), at most
 * CISM__A8_MAX_OUT of them, with their float values. Those channels are
 * zeroed before the row is quantized, and after the integer-dot kernel each
 * output element adds value * weight (the weight decoded exactly from its
 * packed block; one fused multiply-add, fmaf, a single rounding) for every
 * channel of the table, in table order: in the C
 * code here, or for q8x16, q4sx16 and q4a in the tier's kernels (kernels.h
 * outliers_x16, outliers_q4a), which do the same operations in the same
 * order, so every tier has the same bits.
 *
 * Determinism: the table depends only on the row, and each output element
 * gets its additions in the same order whatever the row range of the call,
 * so results do not depend on threads, chunking or batching. */
#include "session.h"
#include "../kernels/quant.h"

#include <float.h>
#include <math.h>
#include <string.h>

static cism__act8_out *table_of(uint8_t *qrow, int64_t ldq) {
    return (cism__act8_out *)(void *)(qrow + ldq - (int64_t)sizeof(cism__act8_out));
}

typedef void (*top2_fn)(const float *x, int64_t nb, float *m1, float *m2);

/* Block b of a row of n values at x: x itself for a whole block, else its
   elements copied into pad (32 floats) and padded with zeros */
static const float *block_of(const float *x, int64_t n, int64_t b, float *pad) {
    const int64_t m = n - b * CISM__A8_BLOCK;
    int64_t i;
    if (m >= CISM__A8_BLOCK) return x + b * CISM__A8_BLOCK;
    for (i = 0; i < CISM__A8_BLOCK; i++) pad[i] = i < m ? x[b * CISM__A8_BLOCK + i] : 0.0f;
    return pad;
}

static void set_gain(float *gain, int64_t b, float m1, float m2) {
    const double g = (double)m1 * m1 - (double)m2 * m2;
    memcpy(gain + 2 * b, &g, sizeof(g));
}

/* The search for the block whose gain is the largest. The gains are finite
   and >= 0 (the loop runs only on a finite row), so their bits order as
   int64. Four chains (blocks b with b % 4 = i) keep each its largest gain
   and the first block holding it; the largest of the four, ties to the
   smaller block, is the block a scan keeping the first strictly larger gain
   picks. A pick changes one block's gain, so only its chain is scanned
   again. */
typedef struct chains {
    int64_t mx[4], at[4];
} chains;

/* block b (of chain i) seen: kept if its gain is strictly larger */
static void chain_see(chains *c, int i, const float *gain, int64_t b) {
    int64_t g;
    memcpy(&g, gain + 2 * b, sizeof(g));
    c->at[i] = g > c->mx[i] ? b : c->at[i];
    c->mx[i] = g > c->mx[i] ? g : c->mx[i];
}

/* chain i, before it has seen any block */
static void chain_clear(chains *c, int i) {
    c->mx[i] = -1;
    c->at[i] = 0;
}

/* chain i again, after a change of one of its gains */
static void chain_rescan(chains *c, const float *gain, int64_t nb, int i) {
    int64_t b;
    chain_clear(c, i);
    for (b = i; b < nb; b += 4) chain_see(c, i, gain, b);
}

/* The first block whose gain is the largest, if that exceeds thr (-1: none);
   its gain at *best */
static int64_t best_gain(const chains *c, double thr, double *best) {
    int64_t mx = c->mx[0], at = c->at[0];
    int i;
    for (i = 1; i < 4; i++)
        if (c->mx[i] > mx || (c->mx[i] == mx && c->at[i] < at)) {
            mx = c->mx[i];
            at = c->at[i];
        }
    memcpy(best, &mx, sizeof(mx));
    return *best > thr ? at : -1;
}

int cism__act8_quantize_split(const cism__kernels *k, const float *x, int64_t n, uint8_t *qrow, int64_t ldq,
                              float *tmp) {
    const cism__kernels *sc = cism__kernels_scalar();
    void (*quant)(const float *, int64_t, void *) = k->quantize_act ? k->quantize_act : sc->quantize_act;
    const top2_fn top2 = k->act_block_top2 ? k->act_block_top2 : sc->act_block_top2;
    int (*const take)(const float *, uint32_t *, float *, float *, float *) =
        k->act_block_take ? k->act_block_take : sc->act_block_take;
    cism__act8_out *o = table_of(qrow, ldq);
    const int64_t nb = (n + CISM__A8_BLOCK - 1) / CISM__A8_BLOCK, full = n / CISM__A8_BLOCK;
    float *m1 = tmp, *m2 = m1 + nb; /* per block: the largest |x| and the second largest */
    float *gain = m2 + nb; /* per block a double (2 floats, memcpy: tmp may be 4-byte aligned), m1^2 - m2^2: the drop of N */
    /* the blocks that gave up channels, those channels (bits) and the blocks
       with them zeroed; a partial last block zero-padded in pad */
    float pad[CISM__A8_BLOCK], mod[CISM__A8_MAX_OUT][CISM__A8_BLOCK];
    int64_t modb[CISM__A8_MAX_OUT];
    uint32_t taken[CISM__A8_MAX_OUT];
    double N = 0.0;
    chains ch;
    int64_t b;
    int j, i, nmod = 0;
    o->n = 0;
    /* the int8 noise of a block is proportional to its max squared; N is the row's.
       The row as it is quantized, and its block statistics, in one pass where
       the tier has it (a NaN: the plain quantizer's row, flagged) */
    if (k->quantize_act_top2) {
        if (k->quantize_act_top2(x, n, qrow, m1, m2)) return 1;
    } else {
        top2(x, full, m1, m2);
        if (full < nb) top2(block_of(x, n, full, pad), 1, &m1[full], &m2[full]);
        quant(x, n, qrow);
    }
    for (i = 0; i < 4; i++) chain_clear(&ch, i);
    for (b = 0; b < nb; b++) { /* N, the blocks' gains and the chains, in one pass */
        N += (double)m1[b] * m1[b];
        set_gain(gain, b, m1[b], m2[b]);
        chain_see(&ch, (int)(b & 3), gain, b);
    }
    while (o->n < CISM__A8_MAX_OUT && N <= DBL_MAX) { /* an infinite row: the plain quantizer (the caller flags it) */
        /* the block whose max, taken out, lowers N the most, if by more than
           CISM__A8_OUT_GAIN mean blocks; ties: the first block */
        double best;
        const int64_t pick = best_gain(&ch, CISM__A8_OUT_GAIN * N / (double)nb, &best);
        if (pick < 0) break;
        for (j = 0; j < nmod && modb[j] != pick; j++) {}
        if (j == nmod) {
            modb[nmod] = pick;
            taken[nmod++] = 0;
        }
        /* the first index of its max among the channels not yet taken, taken
           out (read from x: no store to wait for) */
        i = take(block_of(x, n, pick, pad), &taken[j], &m1[pick], &m2[pick], mod[j]);
        o->idx[o->n] = (int32_t)(pick * CISM__A8_BLOCK + i);
        o->val[o->n] = x[pick * CISM__A8_BLOCK + i];
        o->n++;
        N -= best;
        set_gain(gain, pick, m1[pick], m2[pick]);
        chain_rescan(&ch, gain, nb, (int)(pick & 3));
    }
    /* the blocks that gave up channels again, with those channels zeroed, in
       one call (blocks are quantized independently and a partial block as if
       zero-padded: the bits of quantizing the row with those channels zeroed) */
    if (nmod) {
        cism__act8 blk[2 * CISM__A8_MAX_OUT]; /* the blocks, then their half sums */
        const int64_t mn = (int64_t)nmod * CISM__A8_BLOCK;
        quant(mod[0], mn, blk);
        for (j = 0; j < nmod; j++) {
            memcpy((cism__act8 *)(void *)qrow + modb[j], &blk[j], sizeof(cism__act8));
            memcpy(cism__act8_half_sums(qrow, n) + 2 * modb[j], cism__act8_half_sums(blk, mn) + 2 * j, 2 * sizeof(int32_t));
        }
    }
    return !(N <= DBL_MAX); /* a block max is NaN or infinite (the squares of finite floats cannot overflow a double) */
}

/* f16 -> f32: branch-free for normal numbers and zero (most scales), the
   exact conversion for the others; the same value either way. */
static float f16(const uint8_t *p) {
    uint32_t h = (uint32_t)p[0] | ((uint32_t)p[1] << 8), m = (h & 0x7fffu) << 13, e = h & 0x7c00u, bits;
    float f;
    if (e == 0x7c00u || (e == 0 && m != 0)) return cism__f16_to_f32((uint16_t)h);
    bits = ((h & 0x8000u) << 16) | (m ? m + 0x38000000u : 0u);
    memcpy(&f, &bits, 4);
    return f;
}

/* Column c of rows [r0, r1) of a packed matrix of a row layout, as f32 into out. */
static void weight_col(int32_t dtype, const uint8_t *w, uint64_t row_bytes, int64_t r0, int64_t r1, int64_t c, float *out) {
    int64_t r;
    if (dtype == CISM_DTYPE_Q8) {
        const uint8_t *p = w + (uint64_t)(c / CISM__Q8_BLOCK) * CISM__Q8_BYTES;
        for (r = r0; r < r1; r++) {
            const uint8_t *blk = p + (uint64_t)r * row_bytes;
            out[r - r0] = f16(blk) * (float)(int8_t)blk[2 + c % CISM__Q8_BLOCK];
        }
        return;
    }
    if (cism__dtype_is_qint(dtype)) { /* q6, q5: d * level, exact as cism__dequantize_row */
        const uint8_t *p = w + (uint64_t)(c / CISM__QI_BLOCK) * (uint64_t)cism__qint_bytes(dtype);
        int j = (int)(c % CISM__QI_BLOCK);
        for (r = r0; r < r1; r++) {
            const uint8_t *blk = p + (uint64_t)r * row_bytes;
            out[r - r0] = f16(blk) * (float)cism__qint_level(dtype, blk, j);
        }
        return;
    }
    if (dtype == CISM_DTYPE_Q4A) {
        const uint8_t *p = w + (uint64_t)(c / CISM__Q4A_BLOCK) * CISM__Q4A_BYTES;
        int64_t j = c % CISM__Q4A_BLOCK;
        for (r = r0; r < r1; r++) {
            const uint8_t *blk = p + (uint64_t)r * row_bytes;
            int code = j < 16 ? (blk[4 + j] & 15) : (blk[4 + j - 16] >> 4);
            out[r - r0] = f16(blk) * (float)code + f16(blk + 2); /* cism__q4a_d, cism__q4a_m */
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

/* Column c of the 16 rows of an interleaved group as f32 (q8x16: f16 scale x
   int8 code, exact in f32; q4sx16: E4M3 scale x level, exact; q4ax16: f16
   scale x code + f16 minimum, one rounding; q6x16, q5x16: f16 scale x level,
   exact). The f16 scales
   take a branch-free conversion that is exact for normal numbers and zero,
   and the exact one when a group holds another kind. */
static void group_col(const cism__x16 *g, int32_t base, const cism__fmt4 *f, const uint8_t *grp, int64_t c, float *out) {
    int64_t B = f ? f->block : 32, b = c / B, j = c % B, half = B / 2; /* q8, q4a: blocks of 32 */
    int64_t byte = base == CISM_DTYPE_Q8 ? j : (j < half ? j : j - half);
    const uint8_t *sc = cism__x16_scales(g, grp, b), *codes = cism__x16_codes(g, grp, b) + (byte / 4) * 64 + byte % 4;
    int i;
    if (cism__dtype_is_qint(base)) { /* d * level, exact, as weight_col: each row's block gathered */
        const uint8_t *cb = cism__x16_codes(g, grp, b);
        uint8_t blk[CISM__Q6_BYTES];
        int k;
        for (i = 0; i < CISM__X16; i++) {
            memcpy(blk, sc + 2 * i, 2);
            for (k = 0; k < g->code_bytes; k++) blk[2 + k] = cb[(k / 4) * 64 + 4 * i + k % 4];
            out[i] = f16(blk) * (float)cism__qint_level(base, blk, (int)j);
        }
        return;
    }
    if (base == CISM_DTYPE_Q4A) { /* d * code + m, as weight_col */
        for (i = 0; i < CISM__X16; i++) {
            int code = j < half ? (codes[4 * i] & 15) : (codes[4 * i] >> 4);
            out[i] = f16(sc + 4 * i) * (float)code + f16(sc + 4 * i + 2);
        }
        return;
    }
    if (base == CISM_DTYPE_Q8) {
        uint32_t odd = 0;
        for (i = 0; i < CISM__X16; i++) {
            uint32_t h = (uint32_t)sc[2 * i] | ((uint32_t)sc[2 * i + 1] << 8), m = (h & 0x7fffu) << 13, e = h & 0x7c00u;
            uint32_t bits = ((h & 0x8000u) << 16) | (m ? m + 0x38000000u : 0u);
            float d;
            odd |= (uint32_t)(e == 0x7c00u) | (uint32_t)(e == 0 && m != 0);
            memcpy(&d, &bits, 4);
            out[i] = d * (float)(int8_t)codes[4 * i];
        }
        if (odd)
            for (i = 0; i < CISM__X16; i++)
                out[i] = cism__f16_to_f32((uint16_t)(sc[2 * i] | (sc[2 * i + 1] << 8))) * (float)(int8_t)codes[4 * i];
        return;
    }
    for (i = 0; i < CISM__X16; i++) {
        uint8_t q = codes[4 * i];
        out[i] = cism__fmt4_scale(f, sc + i) * (float)f->levels[j < half ? (q & 15) : (q >> 4)];
    }
}

/* A small direct-mapped cache of decoded weight columns per group of 16 rows
   (row layouts: per CHUNK rows): the outlier channels are mostly the same few
   for every token of a call. */
enum { CHUNK = 64, SLOTS = 64, GSLOTS = 16 };

static void add_outliers_x16(const cism__kernels *kt, int32_t dtype, const uint8_t *w, uint64_t row_bytes,
                             const uint8_t *xq, int64_t ldq, float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    cism__x16 g = cism__x16_geom(dtype, row_bytes);
    int32_t base = cism__dtype_base(dtype);
    const cism__fmt4 *f = cism__fmt4_of(base);
    float col[GSLOTS][CISM__X16];
    int64_t tag[GSLOTS], gi, t;
    int64_t g0 = (r0 + CISM__X16 - 1) / CISM__X16, g1 = r1 / CISM__X16;
    if (kt->outliers_x16 && g0 < g1) { /* whole groups in the tier, any partial ones below */
        kt->outliers_x16(w, row_bytes, &g, base, xq, ldq, nt, y, ldy, g0, g1);
        if (r0 % CISM__X16 == 0 && r1 % CISM__X16 == 0) return;
    } else {
        g0 = g1 = -1;
    }
    for (gi = r0 / CISM__X16; gi * CISM__X16 < r1; gi++) {
        const uint8_t *grp = w + (uint64_t)gi * CISM__X16 * row_bytes;
        int64_t lo = gi * CISM__X16 < r0 ? r0 - gi * CISM__X16 : 0;
        int64_t hi = (gi + 1) * CISM__X16 > r1 ? r1 - gi * CISM__X16 : CISM__X16;
        int s;
        if (gi >= g0 && gi < g1) continue;
        for (s = 0; s < GSLOTS; s++) tag[s] = -1;
        for (t = 0; t < nt; t++) {
            const cism__act8_out *o = table_of((uint8_t *)(uintptr_t)(xq + t * ldq), ldq);
            float *yt = y + t * ldy + gi * CISM__X16;
            int k;
            for (k = 0; k < o->n; k++) {
                int64_t c = o->idx[k], i;
                const float v = o->val[k];
                const float *wc;
                s = (int)(c % GSLOTS);
                if (tag[s] != c) {
                    group_col(&g, base, f, grp, c, col[s]);
                    tag[s] = c;
                }
                wc = col[s];
                if (lo == 0 && hi == CISM__X16)
                    for (i = 0; i < CISM__X16; i++) yt[i] = fmaf(v, wc[i], yt[i]);
                else
                    for (i = lo; i < hi; i++) yt[i] = fmaf(v, wc[i], yt[i]);
            }
        }
    }
}

void cism__act8_add_outliers(const cism__kernels *kt, int32_t dtype, const void *w, uint64_t row_bytes,
                             const uint8_t *xq, int64_t ldq, float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    float col[SLOTS][CHUNK];
    int64_t tag[SLOTS];
    int64_t t, a, r;
    if (cism__dtype_is_x16(dtype)) {
        add_outliers_x16(kt, dtype, (const uint8_t *)w, row_bytes, xq, ldq, y, ldy, nt, r0, r1);
        return;
    }
    if (dtype == CISM_DTYPE_Q4A && kt->outliers_q4a && r1 - r0 >= CISM__X16) { /* whole groups of 16 rows in the tier */
        int64_t e = r0 + (r1 - r0) / CISM__X16 * CISM__X16;
        kt->outliers_q4a((const uint8_t *)w, row_bytes, xq, ldq, nt, y, ldy, r0, e);
        r0 = e;
    }
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
                for (r = a; r < b; r++) yt[r] = fmaf(v, wc[r - a], yt[r]);
            }
        }
    }
}
