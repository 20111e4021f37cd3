/* x86_outliers.h - the outlier epilogues of the x86 tiers (kernels.h
 * outliers_x16, outliers_q4a; model/act_outliers.c has the C reference), one
 * template for kernels_avx2_quant.c and kernels_avx512_quant.c: where a
 * column's codes and scales sit in an interleaved group, a quantized row's
 * outlier table, the token chunks and the column cache, and the loops. The
 * tier includes it after defining, for 16 rows of one column:
 *   ovec                           16 floats (AVX2: two __m256, AVX-512: __m512)
 *   ov_load, ov_store              16 floats from / to memory
 *   ov_addmul(acc, v, col)         acc + v * col, fused (one rounding, as fmaf)
 *   oconst, oconst_init(&c, xf, f) the constants of a group's decode (xf: X16_Q8, X16_Q4S, X16_Q4A,
 *                                  X16_Q6, X16_Q5; f: q4sx16's format, else NULL)
 *   ov_x16_col(grp, &ocol, xf, &c) a column of a group (its place: x16_place), decoded exactly
 *                                  (q4ax16, q6x16, q5x16: x16_q4a_col8 / x16_qint_col8 of
 *                                  x86_x16.h, 256-bit on both tiers)
 *   ov_q4ax_dm(grp, scale, &d, &m) q4ax16: the scales of a block (its scale line at grp + scale)
 *   ov_q4ax_code(grp, &ocol, d, m) q4ax16: d * code + m, a column of that block (ov_x16_col's bits)
 *   oq4a, oq4a_init(&c, row_bytes) q4a: the 16 rows' offsets
 *   ov_q4a_dm(p, &c, &d, &m)       q4a: the scales d, m of the block at p, 16 rows, widened exactly
 *   ov_q4a_code(p, &c, j, d, m)    q4a: d * code + m, column j of the block at p
 * so both tiers run the same operations in the same order (the C code's).
 * The one-token entries of the row formats (gemv_a8_outliers) use the tier's
 * gemv8_b32 / gemv1_b32 and 256-bit gathers, the same on both tiers. */
#ifndef CISM_X86_OUTLIERS_H
#define CISM_X86_OUTLIERS_H

#include "outlier_runs.h"

/* ocol, x16_place: a column's place in a group (x86_x16.h) */

/* A call's channels run by run (outlier_runs.h); OGROUPS groups of 16 rows per
   pass over a run's tables. */
enum { OSLOTS = CISM__ORUN_SLOTS, OGROUPS = 4, OBLK_MAP = 1024 };

/* The nt tokens of a run whose first token's quantized row is xq and first
   output row y: each entry's product with its decoded column, in table
   order (the C code's order), for G groups of 16 outputs at once (channel k's
   column of group i at col[k * G + i], its outputs 16 i on): a token's table
   is read once for all G. */
CISM__INLINE void otab_add(const cism__orun *d, const ovec *col, const uint8_t *xq, int64_t ldq, int64_t nt, float *y,
                           int64_t ldy, const int G) {
    int64_t t;
    int k, i;
    for (t = 0; t < nt; t++) {
        const cism__act8_out *o = cism__out_table(xq, ldq, t);
        const uint8_t *ix = d->ix[t];
        float *yt = y + t * ldy;
        ovec acc[OGROUPS];
        if (!o->n) continue;
        for (i = 0; i < G; i++) acc[i] = ov_load(yt + 16 * i);
        for (k = 0; k < o->n; k++)
            for (i = 0; i < G; i++) acc[i] = ov_addmul(acc[i], o->val[k], col[ix[k] * G + i]);
        for (i = 0; i < G; i++) ov_store(yt + 16 * i, acc[i]);
    }
}

/* otab_add for G = 1..OGROUPS groups, G a constant in each call (the loops over groups unroll) */
static void otab_add_groups(const cism__orun *d, const ovec *col, const uint8_t *xq, int64_t ldq, int64_t nt, float *y,
                            int64_t ldy, int G) {
    switch (G) {
    case 4: otab_add(d, col, xq, ldq, nt, y, ldy, 4); break;
    case 3: otab_add(d, col, xq, ldq, nt, y, ldy, 3); break;
    case 2: otab_add(d, col, xq, ldq, nt, y, ldy, 2); break;
    default: otab_add(d, col, xq, ldq, nt, y, ldy, 1); break;
    }
}

/* A run's columns where they sit in a matrix of one layout, found once per
   run: x16, each distinct channel's place in a group (the same in every
   group); q4a and q4ax16, the distinct blocks of the channels, so that a group
   widens each block's scales (d, m) once. Plain integers: forward.c keeps a
   stage's (oplaces_build, in the runs' CISM__ORUN_PLACE_BYTES each) for all
   its calls and threads. */
typedef struct ocols {
    int nb;                    /* blocks */
    ocol p[OSLOTS];
    int32_t blk[OSLOTS];       /* q4a, q4ax16: the distinct blocks, */
    int16_t first[OSLOTS + 1]; /* block i's channels: ord[first[i] .. first[i + 1]) */
    uint8_t ord[OSLOTS];
} ocols;
typedef char ocols_fit_a_place[sizeof(ocols) <= CISM__ORUN_PLACE_BYTES ? 1 : -1];

/* A matrix's layout and its decode's constants, for the columns of any run */
typedef struct oplace {
    int q4a, xf;       /* q4a: the row layout (outliers_q4a); xf: an interleaved group's format */
    const cism__x16 *g;
    oconst cc;
    oq4a cq;
    int16_t bslot[OBLK_MAP]; /* block b < OBLK_MAP: its index in blk, or -1 (all -1 between builds) */
} oplace;

/* Whether a run's channels are grouped by block (q4a, q4ax16: their scales
   widened once per block) */
CISM__INLINE int oplace_by_block(const oplace *pl) {
    return pl->q4a || pl->xf == X16_Q4A;
}

static void oplace_init(oplace *pl, const cism__x16 *g, int32_t base, uint64_t row_bytes) {
    pl->q4a = g == NULL;
    pl->xf = x16_xf_of(base);
    pl->g = g;
    if (oplace_by_block(pl)) memset(pl->bslot, 0xff, sizeof(pl->bslot));
    if (pl->q4a) oq4a_init(&pl->cq, row_bytes);
    else oconst_init(&pl->cc, pl->xf, pl->xf == X16_Q4S ? cism__fmt4_of(base) : NULL);
}

/* Run d's columns in a matrix at w of pl's layout, into cs */
static void oplace_build(oplace *pl, ocols *cs, const cism__orun *d, const uint8_t *w) {
    uint8_t bix[OSLOTS];
    int16_t at[OSLOTS];
    int k, i;
    if (!pl->q4a) { /* the loop per format (x16_place's arithmetic for a constant format) */
#define OPLACE_ALL(XF) for (k = 0; k < d->n; k++) cs->p[k] = x16_place(w, pl->g, XF, X16_BLOCK(XF), d->ch[k])
        X16_DISPATCH(pl->xf, OPLACE_ALL)
#undef OPLACE_ALL
        if (!oplace_by_block(pl)) return;
    }
    for (k = cs->nb = 0; k < d->n; k++) { /* a block's index: the map, or beyond it a linear search */
        const int32_t b = d->ch[k] / CISM__Q4A_BLOCK;
        if (b < OBLK_MAP) i = pl->bslot[b] >= 0 ? pl->bslot[b] : cs->nb;
        else
            for (i = 0; i < cs->nb && cs->blk[i] != b; i++) {}
        if (i == cs->nb) {
            if (b < OBLK_MAP) pl->bslot[b] = (int16_t)i;
            cs->blk[cs->nb] = b;
            cs->first[++cs->nb] = 0;
        }
        cs->first[i + 1]++;
        bix[k] = (uint8_t)i;
    }
    cs->first[0] = 0;
    for (i = 0; i < cs->nb; i++) {
        cs->first[i + 1] = (int16_t)(cs->first[i + 1] + cs->first[i]);
        at[i] = cs->first[i];
        if (cs->blk[i] < OBLK_MAP) pl->bslot[cs->blk[i]] = -1;
    }
    for (k = 0; k < d->n; k++) cs->ord[at[bix[k]]++] = (uint8_t)k;
}

/* The run's distinct columns of the 16 rows at grp (x16: a group; q4a: its
   first row), decoded exactly, channel k's at col[k * stride]; q4a and
   q4ax16: block by block, its scales once. */
static void oplace_cols(const oplace *pl, const ocols *cs, const cism__orun *d, const uint8_t *grp, ovec *col,
                        const int stride) {
    int k, i;
    if (!oplace_by_block(pl)) { /* the loop per format (ov_x16_col's decode for a constant format) */
#define OCOLS_ALL(XF) for (k = 0; k < d->n; k++) col[k * stride] = ov_x16_col(grp, &cs->p[k], XF, &pl->cc)
        X16_DISPATCH(pl->xf, OCOLS_ALL)
#undef OCOLS_ALL
        return;
    }
    for (i = 0; i < cs->nb; i++) {
        const uint8_t *p = grp + (uint64_t)cs->blk[i] * CISM__Q4A_BYTES; /* q4a: the block in the first row */
        ovec dv, mv;
        if (pl->q4a) ov_q4a_dm(p, &pl->cq, &dv, &mv);
        else ov_q4ax_dm(grp, cs->p[cs->ord[cs->first[i]]].scale, &dv, &mv);
        for (k = cs->first[i]; k < cs->first[i + 1]; k++) {
            const int c = cs->ord[k];
            col[c * stride] = pl->q4a ? ov_q4a_code(p, &pl->cq, d->ch[c] % CISM__Q4A_BLOCK, dv, mv)
                                      : ov_q4ax_code(grp, &cs->p[c], dv, mv);
        }
    }
}

/* One token: each entry's column decoded where it is and added at once,
   group after group (no tables: fewer stores and loads per entry). */
static void outliers_one(const oplace *pl, const uint8_t *w, uint64_t row_bytes, const cism__act8_out *o, float *y,
                         int64_t r0, int64_t r1) {
    ocol p[CISM__A8_MAX_OUT];
    int64_t r;
    int k;
    if (!o->n) return;
    if (!pl->q4a)
        for (k = 0; k < o->n; k++) p[k] = x16_place(w, pl->g, pl->xf, X16_BLOCK(pl->xf), o->idx[k]);
    for (r = r0; r < r1; r += 16) {
        const uint8_t *grp = w + (uint64_t)r * row_bytes;
        ovec acc = ov_load(y + r);
        for (k = 0; k < o->n; k++) {
            ovec col;
            if (pl->q4a) {
                const uint8_t *b = grp + (uint64_t)(o->idx[k] / CISM__Q4A_BLOCK) * CISM__Q4A_BYTES;
                ovec dv, mv;
                ov_q4a_dm(b, &pl->cq, &dv, &mv);
                col = ov_q4a_code(b, &pl->cq, o->idx[k] % CISM__Q4A_BLOCK, dv, mv);
            } else {
                col = ov_x16_col(grp, &p[k], pl->xf, &pl->cc);
            }
            acc = ov_addmul(acc, o->val[k], col);
        }
        ov_store(y + r, acc);
    }
}

/* Groups of 16 rows from r (x16: group indices from r / 16) for the tokens of
   one call: run after run, each group's columns decoded once, then added. */
static void outliers_runs(oplace *pl, const uint8_t *w, uint64_t row_bytes, const uint8_t *xq, int64_t ldq,
                          int64_t nt, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    ovec col[OGROUPS * OSLOTS];
    cism__orun d;
    ocols cs;
    int64_t t0, t1, r;
    if (nt == 1) {
        outliers_one(pl, w, row_bytes, cism__out_table(xq, ldq, 0), y, r0, r1);
        return;
    }
    for (t0 = 0; t0 < nt; t0 = t1) {
        t1 = cism__orun_build(&d, xq, ldq, t0, nt);
        if (!d.n) continue;
        oplace_build(pl, &cs, &d, w);
        for (r = r0; r < r1; r += 16 * OGROUPS) { /* OGROUPS groups per pass over the tokens' tables */
            const int G = r1 - r >= 16 * OGROUPS ? OGROUPS : (int)((r1 - r) / 16);
            const uint8_t *xt = xq + t0 * ldq;
            float *yt = y + t0 * ldy + r;
            int i;
            for (i = 0; i < G; i++) oplace_cols(pl, &cs, &d, w + (uint64_t)(r + 16 * i) * row_bytes, col + i, G);
            otab_add_groups(&d, col, xt, ldq, t1 - t0, yt, ldy, G);
        }
    }
}

static void outliers_x16(const uint8_t *w, uint64_t row_bytes, const struct cism__x16 *g, int32_t base,
                         const uint8_t *xq, int64_t ldq, int64_t nt, float *y, int64_t ldy, int64_t g0, int64_t g1) {
    oplace pl;
    oplace_init(&pl, g, base, row_bytes);
    outliers_runs(&pl, w, row_bytes, xq, ldq, nt, y, ldy, g0 * CISM__X16, g1 * CISM__X16);
}

static void outliers_q4a(const uint8_t *w, uint64_t row_bytes, const uint8_t *xq, int64_t ldq, int64_t nt, float *y,
                         int64_t ldy, int64_t r0, int64_t r1) {
    oplace pl;
    oplace_init(&pl, NULL, CISM_DTYPE_Q4A, row_bytes);
    outliers_runs(&pl, w, row_bytes, xq, ldq, nt, y, ldy, r0, r1);
}

/* ---- decode: the int8 dot of a row-layout format with its token's entries ---- */
/* 8 f16 in the low (hi = 0) or high (hi = 1) 16 bits of the lanes of v, widened exactly */
CISM__INLINE __m256 f16_lanes8(__m256i v, const int hi) {
    const __m256i h = hi ? _mm256_srli_epi32(v, 16) : _mm256_and_si256(v, _mm256_set1_epi32(0xffff));
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08); /* lanes 0..7 in the low half */
    return _mm256_cvtph_ps(_mm256_castsi256_si128(p));
}

/* Column c of the 8 rows at w (offs: their offsets), exact: q4a d * code + m
   (the product, then the sum), q8 d * code. The dwords read end inside the
   column's block. */
CISM__INLINE __m256 col8(const uint8_t *w, __m256i offs, int32_t c, const int f) {
    const int j = c % 32;
    if (f == F_Q4A) {
        const uint8_t *p = w + (uint64_t)(c / 32) * CISM__Q4A_BYTES;
        const __m256i dm = _mm256_i32gather_epi32((const int *)(const void *)p, offs, 1);
        const __m256i cb = _mm256_i32gather_epi32((const int *)(const void *)(p + 1 + j % 16), offs, 1);
        const __m256i code = _mm256_and_si256(_mm256_srli_epi32(cb, j < 16 ? 24 : 28), _mm256_set1_epi32(15));
        return _mm256_add_ps(_mm256_mul_ps(f16_lanes8(dm, 0), _mm256_cvtepi32_ps(code)), f16_lanes8(dm, 1));
    } else {
        const uint8_t *p = w + (uint64_t)(c / 32) * CISM__Q8_BYTES;
        const __m256i dv = _mm256_i32gather_epi32((const int *)(const void *)p, offs, 1);
        __m256i code;
        if (j >= 3) { /* the code in the top byte */
            code = _mm256_srai_epi32(_mm256_i32gather_epi32((const int *)(const void *)(p + j - 1), offs, 1), 24);
        } else {
            code = _mm256_i32gather_epi32((const int *)(const void *)(p + 2 + j), offs, 1);
            code = _mm256_srai_epi32(_mm256_slli_epi32(code, 24), 24);
        }
        return _mm256_mul_ps(f16_lanes8(dv, 0), _mm256_cvtepi32_ps(code));
    }
}

/* the same for one row */
CISM__INLINE float col1(const uint8_t *row, int32_t c, const int f) {
    const int j = c % 32;
    if (f == F_Q4A) {
        const uint8_t *p = row + (uint64_t)(c / 32) * CISM__Q4A_BYTES;
        const int code = j < 16 ? (p[4 + j] & 15) : (p[4 + j - 16] >> 4);
        return f16_f(p) * (float)code + f16_f(p + 2);
    }
    return f16_f(row + (uint64_t)(c / 32) * CISM__Q8_BYTES) * (float)(int8_t)row[(uint64_t)(c / 32) * CISM__Q8_BYTES + 2 + j];
}

/* 8 outputs of one token at yt: its entries' columns of the 8 rows at wr */
CISM__INLINE void add8(const uint8_t *wr, __m256i offs, const cism__act8_out *o, float *yt, const int f) {
    __m256 acc;
    int k;
    if (!o->n) return;
    acc = _mm256_loadu_ps(yt);
    for (k = 0; k < o->n; k++) acc = _mm256_fmadd_ps(_mm256_set1_ps(o->val[k]), col8(wr, offs, o->idx[k], f), acc);
    _mm256_storeu_ps(yt, acc);
}

CISM__INLINE void gemv_outliers(const uint8_t *w, uint64_t rb, int64_t cols, const uint8_t *xq, int64_t ldq, float *y,
                                int64_t ldy, int64_t nt, int64_t r0, int64_t r1, const int f) {
    const cism__act8 *a[CISM__GEMV_OUTL_TOKENS];
    const cism__act8_out *o[CISM__GEMV_OUTL_TOKENS];
    const __m256i offs = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int32_t)rb));
    const int64_t nb = (cols + 31) / 32;
    int64_t r, t;
    int k;
    for (t = 0; t < nt; t++) {
        a[t] = cism__act8_row(xq, ldq, t);
        o[t] = cism__out_table(xq, ldq, t);
    }
    const uintptr_t end = rows_prefetch_start(w, rb, r0, r1);
    for (r = r0; r + 8 <= r1; r += 8) {
        const uint8_t *wr = w + (uint64_t)r * rb;
        rows_prefetch8(wr, rb, end);
        gemv8_nt(wr, rb, nb, a, y + r, ldy, nt, f); /* the kernels of gemv and gemv_tokens: the same bits */
        for (t = 0; t < nt; t++) add8(wr, offs, o[t], y + t * ldy + r, f);
    }
    for (; r < r1; r++) {
        const uint8_t *wr = w + (uint64_t)r * rb;
        for (t = 0; t < nt; t++) {
            float v = gemv1_b32(wr, nb, a[t], f);
            for (k = 0; k < o[t]->n; k++) /* fused, one rounding (fmaf) */
                v = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(o[t]->val[k]), _mm_set_ss(col1(wr, o[t]->idx[k], f)), _mm_set_ss(v)));
            y[t * ldy + r] = v;
        }
    }
}

static void gemv_outliers_q4a(const void *w, uint64_t rb, int64_t cols, const uint8_t *xq, int64_t ldq, float *y,
                              int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    gemv_outliers((const uint8_t *)w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, F_Q4A);
}
static void gemv_outliers_q8(const void *w, uint64_t rb, int64_t cols, const uint8_t *xq, int64_t ldq, float *y,
                             int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    gemv_outliers((const uint8_t *)w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, F_Q8);
}

/* ---- few tokens of an interleaved dtype: the entries added in the tiles (x86_x16.h x16outl) ---- */
CISM__INLINE void gemv_outliers_x16(const void *w, uint64_t rb, int64_t cols, const uint8_t *xq, int64_t ldq, float *y,
                                    int64_t ldy, int64_t nt, int64_t r0, int64_t r1, const int xf) {
    const cism__x16 g = cism__x16_geom(x16_dtype(xf), rb);
    const cism__fmt4 *f = xf == X16_Q4S ? cism__fmt4_of(cism__dtype_base(x16_dtype(xf))) : NULL;
    const int64_t B = f ? f->block : 32; /* q8, q4a, q6, q5: blocks of 32 */
    int32_t ch[CISM__GEMV_OUTL_TOKENS * CISM__A8_MAX_OUT]; /* the distinct channels, in order of first use */
    x16outl ol;
    int64_t t;
    int k, d;
    for (k = 0; k < 16; k++) ol.lv[k] = f ? (float)f->levels[k] : 0.0f;
    ol.smul = _mm256_set1_ps(f ? f->scale_mul : 1.0f);
    ol.nd = 0;
    for (t = 0; t < nt; t++) {
        const cism__act8_out *o = ol.o[t] = cism__out_table(xq, ldq, t);
        const int seen = ol.nd; /* a token's own channels are distinct: only earlier tokens' are searched */
        for (k = 0; k < o->n; k++) {
            for (d = 0; d < seen && ch[d] != o->idx[k]; d++) {}
            if (d == seen) {
                d = ol.nd++;
                ch[d] = o->idx[k];
                ol.p[d] = x16_place((const uint8_t *)w, &g, xf, B, o->idx[k]);
            }
            ol.ix[t][k] = (uint8_t)d;
        }
    }
    matmul_a8_x16(w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, &ol, xf);
}

/* rows [lo, hi) of a group only (a call's first or last group, partly its):
   otab_add element by element, the same fused multiply-adds in the same order */
static void otab_add_rows(const cism__orun *d, const ovec *col, const uint8_t *xq, int64_t ldq, int64_t nt, float *y, int64_t ldy,
                          int lo, int hi) {
    float c[OSLOTS][16];
    int64_t t;
    int k, r;
    for (k = 0; k < d->n; k++) ov_store(c[k], col[k]);
    for (t = 0; t < nt; t++) {
        const cism__act8_out *o = cism__out_table(xq, ldq, t);
        for (r = lo; r < hi; r++) {
            __m128 v = _mm_set_ss(y[t * ldy + r]);
            for (k = 0; k < o->n; k++) v = _mm_fmadd_ss(_mm_set_ss(o->val[k]), _mm_set_ss(c[d->ix[t][k]][r]), v);
            y[t * ldy + r] = _mm_cvtss_f32(v);
        }
    }
}

/* Any number of tokens of an interleaved dtype (kernels.h matmul_a8_outliers):
   few, where the tier's tiles take the entries, as
   gemv_outliers_x16; else run by run (cism__orun_build, within a token block whose
   activations stay in L2; runs: the call's, built by forward.c, or NULL),
   OGROUPS groups at a time: the kernel mq (the
   tier's matmul_a8 of the dtype, called, not inlined, so that its tiles keep
   their registers) for the run's tokens, then at once those groups' distinct
   columns decoded and the run's entries added. whole: mq once over each
   panel's rows for all nt tokens first, then the runs' entries (for a kernel
   that pays per call, as the AMX tiles do for runs of few tokens; the same
   bits: each output still gets its run's entries after the kernel's sum). */
CISM__INLINE void matmul_outliers_x16(const void *w, uint64_t rb, int64_t cols, const uint8_t *xq, int64_t ldq, float *y,
                                      int64_t ldy, int64_t nt, int64_t r0, int64_t r1, const cism__oruns *runs,
                                      cism__matmul_a8_fn mq, const int whole, const int xf) {
    const cism__x16 g = cism__x16_geom(x16_dtype(xf), rb);
    const int64_t tb = cism__orun_block(cols);
    const int64_t gy = CISM__Y_PANEL_BYTES / ((nt > 1 ? nt : 1) * CISM__X16 * (int64_t)sizeof(float)); /* whole: the panel's outputs */
    const int64_t gw = cism__w_panel_groups(rb, nt, tb, (r1 + CISM__X16 - 1) / CISM__X16 - r0 / CISM__X16);
    const int64_t gp = whole && gy < gw ? (gy > 1 ? gy : 1) : gw;
    const int own = !(runs && runs->xq == xq && runs->ldq == ldq && runs->nt == nt);
    const int kept = !own && runs->places && runs->pl_dtype == x16_dtype(xf) && runs->pl_rb == rb; /* the stage's places */
    oplace pl;
    cism__orun mine;
    ocols built; /* else the places of one run, */
    const cism__orun *placed = NULL; /* that one (forward.c's runs: the same in every panel) */
    ovec col[OGROUPS * OSLOTS];
    int64_t t0, t1, gi, a, b, p0, p1, ri;
    if (nt <= CISM__GEMV_OUTL_TOKENS) {
        gemv_outliers_x16(w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, xf);
        return;
    }
    oplace_init(&pl, &g, cism__dtype_base(x16_dtype(xf)), rb);
    for (p0 = r0; p0 < r1; p0 = p1) { /* panels of whole groups when there are several token blocks (CISM__W_PANEL_BYTES) */
        p1 = (p0 / CISM__X16 + gp) * CISM__X16 < r1 ? (p0 / CISM__X16 + gp) * CISM__X16 : r1;
        ri = 0;
        if (whole) mq(w, rb, cols, xq, ldq, y, ldy, nt, p0, p1);
        for (t0 = 0; t0 < nt; t0 = t1) {
            const cism__orun *dp = own ? &mine : &runs->run[ri];
            const ocols *cs = kept ? (const ocols *)cism__orun_places(runs, ri) : &built;
            const uint8_t *xt;
            ri++;
            if (own) cism__orun_build(&mine, xq, ldq, t0, nt - t0 < tb ? nt : t0 + tb);
            t1 = dp->t1;
            xt = xq + t0 * ldq;
            if (dp->n && !kept && (own || dp != placed)) {
                oplace_build(&pl, &built, dp, (const uint8_t *)w);
                placed = dp;
            }
            for (a = p0; a < p1; a = b) {
                const uint8_t *grp;
                float *yt;
                int G = 1, i;
                gi = a / CISM__X16;
                grp = (const uint8_t *)w + (uint64_t)gi * CISM__X16 * rb;
                yt = y + t0 * ldy + gi * CISM__X16;
                b = (gi + 1) * CISM__X16 < p1 ? (gi + 1) * CISM__X16 : p1;
                if (a > gi * CISM__X16 || b < (gi + 1) * CISM__X16) { /* a group partly in the range */
                    if (!whole) mq(w, rb, cols, xt, ldq, y + t0 * ldy, ldy, t1 - t0, a, b);
                    if (!dp->n) continue;
                    oplace_cols(&pl, cs, dp, grp, col, 1);
                    otab_add_rows(dp, col, xt, ldq, t1 - t0, yt, ldy, (int)(a - gi * CISM__X16), (int)(b - gi * CISM__X16));
                    continue;
                }
                while (G < OGROUPS && (gi + G + 1) * CISM__X16 <= p1) G++; /* whole groups, up to OGROUPS at once */
                b = (gi + G) * CISM__X16;
                if (!whole) mq(w, rb, cols, xt, ldq, y + t0 * ldy, ldy, t1 - t0, a, b);
                if (!dp->n) continue;
                for (i = 0; i < G; i++) oplace_cols(&pl, cs, dp, grp + (uint64_t)i * CISM__X16 * rb, col + i, G);
                otab_add_groups(dp, col, xt, ldq, t1 - t0, yt, ldy, G);
            }
        }
    }
}
#define X16_OUTL_ENTRY(nm, XF)                                                                                  \
    static void matmul_outliers_##nm(const void *w, uint64_t rb, int64_t cols, const uint8_t *xq, int64_t ldq, \
                                     float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1,               \
                                     const cism__oruns *runs) {                                               \
        matmul_outliers_x16(w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, runs, matmul_a8_##nm, 0, XF);           \
    }

/* kernels.h oplaces_build: the places of every run of rs in the matrix at w
   (dtype, rb bytes a row), for all the calls of a stage; an interleaved dtype
   only (else none) */
static void oplaces_build(cism__oruns *rs, int32_t dtype, const void *w, uint64_t rb) {
    cism__x16 g;
    oplace pl;
    int i;
    rs->pl_dtype = -1;
    if (!rs->xq || !rs->places || !cism__dtype_is_x16(dtype)) return;
    g = cism__x16_geom(dtype, rb);
    oplace_init(&pl, &g, cism__dtype_base(dtype), rb);
    for (i = 0; i < rs->n; i++)
        if (rs->run[i].n) oplace_build(&pl, (ocols *)cism__orun_places(rs, i), &rs->run[i], (const uint8_t *)w);
    rs->pl_dtype = dtype;
    rs->pl_rb = rb;
}

X16_OUTL_ENTRY(q8x16, X16_Q8)
X16_OUTL_ENTRY(q4sx16, X16_Q4S)
X16_OUTL_ENTRY(q4ax16, X16_Q4A)
X16_OUTL_ENTRY(q6x16, X16_Q6)
X16_OUTL_ENTRY(q5x16, X16_Q5)
X16_OUTL_ENTRY(q3x16, X16_Q3)
X16_OUTL_ENTRY(q2x16, X16_Q2)
#undef X16_OUTL_ENTRY

/* The tier's fused entries */
CISM__INLINE void fill_outlier_entries(cism__kernels *k) {
    k->outliers_x16 = outliers_x16;
    k->outliers_q4a = outliers_q4a;
    k->gemv_a8_outliers[CISM_DTYPE_Q4A] = gemv_outliers_q4a;
    k->gemv_a8_outliers[CISM_DTYPE_Q8] = gemv_outliers_q8;
    k->oplaces_build = oplaces_build;
    k->matmul_a8_outliers[CISM_DTYPE_Q8X16] = matmul_outliers_q8x16;
    k->matmul_a8_outliers[CISM_DTYPE_Q4SX16] = matmul_outliers_q4sx16;
    k->matmul_a8_outliers[CISM_DTYPE_Q4AX16] = matmul_outliers_q4ax16;
    k->matmul_a8_outliers[CISM_DTYPE_Q6X16] = matmul_outliers_q6x16;
    k->matmul_a8_outliers[CISM_DTYPE_Q5X16] = matmul_outliers_q5x16;
    k->matmul_a8_outliers[CISM_DTYPE_Q3X16] = matmul_outliers_q3x16;
    k->matmul_a8_outliers[CISM_DTYPE_Q2X16] = matmul_outliers_q2x16;
}

#endif
