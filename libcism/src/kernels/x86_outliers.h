/* x86_outliers.h - what the x86 tiers' outlier epilogues (kernels_avx2_quant.c,
 * kernels_avx512_quant.c; model/act_outliers.c has the C reference) share:
 * where a column's codes and scales sit in an interleaved group, and a
 * quantized row's outlier table. Included after the tier's headers. */
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

#endif
