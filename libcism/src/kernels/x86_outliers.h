/* x86_outliers.h - the outlier epilogues of the x86 tiers (kernels.h
 * outliers_x16, outliers_q4a; model/act_outliers.c has the C reference), one
 * template for kernels_avx2_quant.c and kernels_avx512_quant.c: where a
 * column's codes and scales sit in an interleaved group, a quantized row's
 * outlier table, the token chunks and the column cache, and the loops. The
 * tier includes it after defining, for 16 rows of one column:
 *   ovec                           16 floats (AVX2: two __m256, AVX-512: __m512)
 *   ov_load, ov_store              16 floats from / to memory
 *   ov_addmul(acc, v, col)         acc + v * col (the product rounded, then the sum)
 *   oconst, oconst_init(&c, q8, f) the constants of a q8x16 / q4sx16 decode
 *   ov_x16_col(grp, code, scale, shift, q8, &c)   a column of a group, decoded exactly
 *   oq4a, oq4a_init(&c, row_bytes), ov_q4a_col(p, row_bytes, &c, j)
 *                                  q4a: column j of the block at p, 16 rows
 * so both tiers run the same operations in the same order (the C code's). */
#ifndef CISM_X86_OUTLIERS_H
#define CISM_X86_OUTLIERS_H

enum { OSLOTS = 64 }; /* decoded columns kept per group (a power of two) */

/* A column's place in a group, the same for every group: where its codes
   and scales are, and the shift that brings its code to the top (q8, then
   sign-extended) or the bottom (4-bit, then masked) of each row's 32-bit lane. */
typedef struct ocol {
    int64_t code, scale;
    int shift;
} ocol;

static ocol x16_place(const uint8_t *grp, const struct cism__x16 *g, int q8, int64_t B, int32_t c) {
    const int64_t b = c / B, j = c % B, half = B / 2, byte = q8 ? j : (j < half ? j : j - half);
    ocol p;
    p.code = (int64_t)(cism__x16_codes(g, grp, b) - grp) + (byte / 4) * 64;
    p.scale = (int64_t)(cism__x16_scales(g, grp, b) - grp);
    p.shift = q8 ? 24 - 8 * (int)(byte % 4) : 8 * (int)(byte % 4) + (j < half ? 0 : 4);
    return p;
}

/* Token t's outlier table: the last bytes of its quantized row (ldq apart). */
CISM__INLINE const cism__act8_out *out_table(const uint8_t *xq, int64_t ldq, int64_t t) {
    return (const cism__act8_out *)(const void *)(xq + t * ldq + ldq - (int64_t)sizeof(cism__act8_out));
}

/* A chunk of up to ODENSE_TOK tokens: the distinct channels of their tables
   and the places of those channels, found once per chunk (a place is the
   same in every group), and each entry's index among them, so a group decodes
   each distinct column once and then only adds, without the cache's tag
   checks or a place's divisions at every miss. */
enum { ODENSE_TOK = 16 };
typedef struct odense {
    int n;
    ocol p[OSLOTS];
    uint8_t ix[ODENSE_TOK][CISM__A8_MAX_OUT];
} odense;

/* 0 when the chunk has more than ODENSE_TOK tokens or OSLOTS distinct channels (the cache path then) */
static int odense_build(odense *d, const uint8_t *w, const struct cism__x16 *g, int q8, int64_t B, const uint8_t *xq,
                        int64_t ldq, int64_t nt) {
    int32_t ch[OSLOTS];
    int64_t t;
    int k, j;
    d->n = 0;
    if (nt > ODENSE_TOK) return 0;
    for (t = 0; t < nt; t++) {
        const cism__act8_out *o = out_table(xq, ldq, t);
        for (k = 0; k < o->n; k++) {
            for (j = 0; j < d->n && ch[j] != o->idx[k]; j++) {}
            if (j == d->n) {
                if (d->n == OSLOTS) return 0;
                ch[j] = o->idx[k];
                d->p[j] = x16_place(w, g, q8, B, o->idx[k]);
                d->n++;
            }
            d->ix[t][k] = (uint8_t)j;
        }
    }
    return 1;
}

/* One token: the columns' places once, then group after group. Several: in
   chunks of ODENSE_TOK tokens, each group decodes the chunk's distinct columns
   once (a direct-mapped cache of them when there are more than OSLOTS). Either
   way one product and one sum per entry, in table order, as the C code. */
static void outliers_x16(const uint8_t *w, uint64_t row_bytes, const struct cism__x16 *g, int32_t base,
                         const uint8_t *xq, int64_t ldq, int64_t nt, float *y, int64_t ldy, int64_t g0, int64_t g1) {
    const int q8 = base == CISM_DTYPE_Q8;
    const cism__fmt4 *f = q8 ? NULL : cism__fmt4_of(base);
    const int64_t B = q8 ? CISM__Q8_BLOCK : f->block;
    ovec col[OSLOTS];
    oconst cc;
    odense d;
    int32_t tag[OSLOTS], k;
    int64_t t, t0, gi;
    oconst_init(&cc, q8, f);
    if (nt == 1) {
        const cism__act8_out *o = out_table(xq, ldq, 0);
        ocol p[CISM__A8_MAX_OUT];
        if (!o->n) return;
        for (k = 0; k < o->n; k++) p[k] = x16_place(w, g, q8, B, o->idx[k]);
        for (gi = g0; gi < g1; gi++) {
            const uint8_t *grp = w + (uint64_t)gi * CISM__X16 * row_bytes;
            float *yg = y + gi * CISM__X16;
            ovec acc = ov_load(yg);
            for (k = 0; k < o->n; k++) acc = ov_addmul(acc, o->val[k], ov_x16_col(grp, p[k].code, p[k].scale, p[k].shift, q8, &cc));
            ov_store(yg, acc);
        }
        return;
    }
    for (t0 = 0; t0 < nt; t0 += ODENSE_TOK) { /* tokens in chunks: a chunk's distinct columns decoded once per group */
        const int64_t tn = nt - t0 < ODENSE_TOK ? nt - t0 : ODENSE_TOK;
        const uint8_t *xc = xq + t0 * ldq;
        float *yc = y + t0 * ldy;
        if (odense_build(&d, w, g, q8, B, xc, ldq, tn)) {
            for (gi = g0; gi < g1; gi++) {
                const uint8_t *grp = w + (uint64_t)gi * CISM__X16 * row_bytes;
                for (k = 0; k < d.n; k++) col[k] = ov_x16_col(grp, d.p[k].code, d.p[k].scale, d.p[k].shift, q8, &cc);
                for (t = 0; t < tn; t++) {
                    const cism__act8_out *o = out_table(xc, ldq, t);
                    float *yt = yc + t * ldy + gi * CISM__X16;
                    ovec acc;
                    if (!o->n) continue;
                    acc = ov_load(yt);
                    for (k = 0; k < o->n; k++) acc = ov_addmul(acc, o->val[k], col[d.ix[t][k]]);
                    ov_store(yt, acc);
                }
            }
            continue;
        }
        for (gi = g0; gi < g1; gi++) { /* more distinct channels than slots: a direct-mapped cache of them */
            const uint8_t *grp = w + (uint64_t)gi * CISM__X16 * row_bytes;
            for (k = 0; k < OSLOTS; k++) tag[k] = -1;
            for (t = 0; t < tn; t++) {
                const cism__act8_out *o = out_table(xc, ldq, t);
                float *yt = yc + t * ldy + gi * CISM__X16;
                ovec acc;
                if (!o->n) continue;
                acc = ov_load(yt);
                for (k = 0; k < o->n; k++) {
                    const int32_t c = o->idx[k], s = c & (OSLOTS - 1);
                    if (tag[s] != c) {
                        const ocol p = x16_place(grp, g, q8, B, c);
                        col[s] = ov_x16_col(grp, p.code, p.scale, p.shift, q8, &cc);
                        tag[s] = c;
                    }
                    acc = ov_addmul(acc, o->val[k], col[s]);
                }
                ov_store(yt, acc);
            }
        }
    }
}

/* q4a, rows [r0, r1) in groups of 16: one token decodes each entry's column
   where it is; several keep a direct-mapped cache of columns per group. */
static void outliers_q4a(const uint8_t *w, uint64_t row_bytes, const uint8_t *xq, int64_t ldq, int64_t nt, float *y,
                         int64_t ldy, int64_t r0, int64_t r1) {
    ovec col[OSLOTS];
    oq4a cq;
    int32_t tag[OSLOTS], k;
    int64_t t, r;
    oq4a_init(&cq, row_bytes);
    if (nt == 1) {
        const cism__act8_out *o = out_table(xq, ldq, 0);
        if (!o->n) return;
        for (r = r0; r < r1; r += 16) {
            const uint8_t *wr = w + (uint64_t)r * row_bytes;
            ovec acc = ov_load(y + r);
            for (k = 0; k < o->n; k++) {
                const int32_t c = o->idx[k];
                acc = ov_addmul(acc, o->val[k],
                                ov_q4a_col(wr + (uint64_t)(c / CISM__Q4A_BLOCK) * CISM__Q4A_BYTES, row_bytes, &cq, c % CISM__Q4A_BLOCK));
            }
            ov_store(y + r, acc);
        }
        return;
    }
    for (r = r0; r < r1; r += 16) {
        const uint8_t *wr = w + (uint64_t)r * row_bytes;
        for (k = 0; k < OSLOTS; k++) tag[k] = -1;
        for (t = 0; t < nt; t++) {
            const cism__act8_out *o = out_table(xq, ldq, t);
            float *yt = y + t * ldy + r;
            ovec acc;
            if (!o->n) continue;
            acc = ov_load(yt);
            for (k = 0; k < o->n; k++) {
                const int32_t c = o->idx[k], s = c & (OSLOTS - 1);
                if (tag[s] != c) {
                    col[s] = ov_q4a_col(wr + (uint64_t)(c / CISM__Q4A_BLOCK) * CISM__Q4A_BYTES, row_bytes, &cq, c % CISM__Q4A_BLOCK);
                    tag[s] = c;
                }
                acc = ov_addmul(acc, o->val[k], col[s]);
            }
            ov_store(yt, acc);
        }
    }
}

#endif
