/* x86_quant_entries.h - the drivers and matmul_a8 entries of the x86 int8
 * tiers (kernels_avx2_quant.c, kernels_avx512_quant.c): token blocking, row
 * panels, the choice between decode, batched decode and the panel GEMM, and
 * the interleaved formats' group loop. Included at the end of a tier file,
 * after its width-dependent kernels:
 *   rowsel, rows_sel(nr)       which rows of a PR-row tile are stored (AVX2: a
 *                              count, AVX-512: a mask register)
 *   pack_panel, tile           the panel repack and the PR rows x T tokens tile
 *   gemv, gemv8_b32_t, gemv1_b32, GEMV_TOKENS_MAX   decode (x86_gemv_tokens.h)
 *   x16mask, x16_group         one group of 16 interleaved rows (mask: rows kept) of
 *                              the format xf (X16_*; x86_x16.h: the 256-bit path)
 * A new block format adds its decode to the tier's kernels and an A8_KERNEL
 * line here; the drivers are the same for every format. */
#ifndef CISM_X86_QUANT_ENTRIES_H
#define CISM_X86_QUANT_ENTRIES_H

/* tokens [t0, t1) against one packed panel: TT-token tiles, then the rest */
CISM__INLINE void tiles(const panel *p, const void *xq, int64_t ldq, int64_t t0, int64_t t1, int64_t jb0, float *y,
                        int64_t ldy, rowsel m, int first, const int B, const int asym) {
    const cism__act8 *a[TT];
    int64_t t;
    int i;
    for (t = t0; t + TT <= t1; t += TT) {
        for (i = 0; i < TT; i++) a[i] = cism__act8_row(xq, ldq, t + i);
        tile(p, a, jb0, y + t * ldy, ldy, m, first, TT, B, asym);
    }
    for (i = 0; t + i < t1; i++) a[i] = cism__act8_row(xq, ldq, t + i);
#define TILE_T(T) tile(p, a, jb0, y + t * ldy, ldy, m, first, T, B, asym)
    X86_TOKEN_TAIL(t1 - t, TILE_T)
#undef TILE_T
}

/* Prefill: tokens in blocks whose activations stay in L2 (CISM__X_BLOCK_BYTES),
   rows in panels of PR x KC columns, each panel packed once per token block. */
static void gemm(const uint8_t *w, uint64_t rb, int64_t cols, const void *xq, int64_t ldq, float *y, int64_t ldy,
                 int64_t nt, int64_t r0, int64_t r1, int f) {
    uint8_t pdata[PANEL_BYTES];
    panel p;
    const int B = g_fmt[f].block;
    int64_t nb = (cols + B - 1) / B, tb = CISM__X_BLOCK_BYTES / ldq, t0, r, j0;
    p.data = pdata;
    if (tb < TT) tb = TT;
    for (t0 = 0; t0 < nt; t0 += tb) {
        int64_t t1 = nt - t0 < tb ? nt : t0 + tb;
        for (r = r0; r < r1; r += PR) {
            int nr = r1 - r < PR ? (int)(r1 - r) : PR;
            const rowsel m = rows_sel(nr);
            for (j0 = 0; j0 < nb; j0 += KC / B) {
                int64_t n = nb - j0 < KC / B ? nb - j0 : KC / B;
                pack_panel(w, rb, r, nr, j0, n, &p, f);
                if (f == F_Q4A) tiles(&p, xq, ldq, t0, t1, j0, y + r, ldy, m, j0 == 0, 32, 1);
                else if (B == 32) tiles(&p, xq, ldq, t0, t1, j0, y + r, ldy, m, j0 == 0, 32, 0);
                else tiles(&p, xq, ldq, t0, t1, j0, y + r, ldy, m, j0 == 0, 16, 0);
            }
        }
    }
}

#include "x86_gemv_tokens.h"

#define A8_KERNEL(nm, F)                                                                                                  \
    static void matmul_a8_##nm(const void *w, uint64_t rb, int64_t cols, const void *xq, int64_t ldq, float *y,       \
                               int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {                                     \
        int64_t t;                                                                                                    \
        if (nt > GEMV_TOKENS(F)) {                                                                                    \
            gemm((const uint8_t *)w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, F);                                       \
            return;                                                                                                   \
        }                                                                                                             \
        if (nt >= 2) {                                                                                                \
            gemv_tokens((const uint8_t *)w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, F);                                \
            return;                                                                                                   \
        }                                                                                                             \
        for (t = 0; t < nt; t++) gemv((const uint8_t *)w, rb, cols, cism__act8_row(xq, ldq, t), y + t * ldy, r0, r1, F);    \
    }
A8_KERNEL(q8, F_Q8)
A8_KERNEL(q4, F_Q4)
A8_KERNEL(nl4, F_NL4)
A8_KERNEL(q4s, F_Q4S)
A8_KERNEL(fp4, F_FP4)
A8_KERNEL(q4a, F_Q4A)
A8_KERNEL(q6, F_Q6)
A8_KERNEL(q5, F_Q5)
A8_KERNEL(q3, F_Q3)
A8_KERNEL(q2, F_Q2)
#undef A8_KERNEL

/* Interleaved dtypes (q8x16, q4sx16, q4ax16, q6x16, q5x16: xf): rows [r0, r1) of a matrix of whole
   groups; a group partly outside is computed whole and stored masked. Tokens
   in blocks whose activations stay in L2 while every group of the range
   passes over them; calls of few tokens prefetch the group stream. ol (or
   NULL; at most CISM__GEMV_OUTL_TOKENS tokens): their outlier entries, added
   in the tiles (x86_x16.h x16outl). */
CISM__INLINE void matmul_a8_x16(const void *w, uint64_t rb, int64_t cols, const void *xq, int64_t ldq, float *y,
                                int64_t ldy, int64_t nt, int64_t r0, int64_t r1, const x16outl *ol, const int xf) {
    cism__x16 g = cism__x16_geom(x16_dtype(xf), rb);
    const int64_t g_end = (r1 + CISM__X16 - 1) / CISM__X16;
    int64_t tb = CISM__X_BLOCK_BYTES / ldq, gp, t0, gi, g0, g1;
    uintptr_t p, end, pf_end;
    cism__x16_rows_span(w, rb, r0, r1, &p, &end);
    pf_end = nt <= CISM__X16_PF_TOKENS ? end : 0; /* 0: no prefetch */
    if (pf_end && CISM__X16_PF_DIST > 0) /* few tokens: the first CISM__X16_PF_DIST bytes of the rows all at once (the tiles' prefetch runs from there) */
        prefetch_range(p, p + CISM__X16_PF_DIST < end ? p + CISM__X16_PF_DIST : end);
    if (tb < TT) tb = TT;
    gp = cism__w_panel_groups(rb, nt, tb, g_end - r0 / CISM__X16);
    for (g0 = r0 / CISM__X16; g0 < g_end; g0 = g1) { /* panels of groups (tier_common.h CISM__W_PANEL_BYTES) */
        g1 = g_end - g0 < gp ? g_end : g0 + gp;
        for (t0 = 0; t0 < nt; t0 += tb) {
            int64_t t1 = nt - t0 < tb ? nt : t0 + tb;
            for (gi = g0; gi < g1; gi++)
                x16_group((const uint8_t *)w + (uint64_t)gi * CISM__X16 * rb, &g, xq, ldq, cols, t0, t1, y + gi * CISM__X16,
                          ldy, (x16mask)cism__x16_row_mask(gi, r0, r1), pf_end, ol, xf);
        }
    }
}

#define X86_X16_ENTRY(nm, XF)                                                                                    \
    static void matmul_a8_##nm(const void *w, uint64_t rb, int64_t cols, const void *xq, int64_t ldq, float *y,      \
                               int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {                                   \
        matmul_a8_x16(w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, NULL, XF);                                                \
    }
X86_X16_ENTRY(q8x16, X16_Q8)
X86_X16_ENTRY(q4sx16, X16_Q4S)
X86_X16_ENTRY(q4ax16, X16_Q4A)
X86_X16_ENTRY(q6x16, X16_Q6)
X86_X16_ENTRY(q5x16, X16_Q5)
X86_X16_ENTRY(q3x16, X16_Q3)
X86_X16_ENTRY(q2x16, X16_Q2)

/* The table entries every x86 int8 tier fills */
CISM__INLINE void fill_a8_entries(cism__kernels *k) {
    k->matmul_a8[CISM_DTYPE_Q8] = matmul_a8_q8;
    k->matmul_a8[CISM_DTYPE_Q4] = matmul_a8_q4;
    k->matmul_a8[CISM_DTYPE_NL4] = matmul_a8_nl4;
    k->matmul_a8[CISM_DTYPE_Q4S] = matmul_a8_q4s;
    k->matmul_a8[CISM_DTYPE_FP4] = matmul_a8_fp4;
    k->matmul_a8[CISM_DTYPE_Q4A] = matmul_a8_q4a;
    k->matmul_a8[CISM_DTYPE_Q6] = matmul_a8_q6;
    k->matmul_a8[CISM_DTYPE_Q5] = matmul_a8_q5;
    k->matmul_a8[CISM_DTYPE_Q3] = matmul_a8_q3;
    k->matmul_a8[CISM_DTYPE_Q2] = matmul_a8_q2;
    k->matmul_a8[CISM_DTYPE_Q8X16] = matmul_a8_q8x16;
    k->matmul_a8[CISM_DTYPE_Q4SX16] = matmul_a8_q4sx16;
    k->matmul_a8[CISM_DTYPE_Q4AX16] = matmul_a8_q4ax16;
    k->matmul_a8[CISM_DTYPE_Q6X16] = matmul_a8_q6x16;
    k->matmul_a8[CISM_DTYPE_Q5X16] = matmul_a8_q5x16;
    k->matmul_a8[CISM_DTYPE_Q3X16] = matmul_a8_q3x16;
    k->matmul_a8[CISM_DTYPE_Q2X16] = matmul_a8_q2x16;
}

#endif
