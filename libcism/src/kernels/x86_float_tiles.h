/* x86_float_tiles.h - the float-weight matmul (f32, f16, bf16 rows against
 * f32 activations) of the x86 tiers, one template for kernels_avx2.c (8
 * lanes) and kernels_avx512.c (16 lanes). The tier includes it after its MR,
 * NR (rows and tokens of a prefill register tile) and, for its vector fvec of
 * FW floats:
 *   fv_zero(), fv_loadu(p)           zeros, FW floats
 *   fv_load(row, c, dt)              FW elements of a row of dtype dt from c, as f32
 *   fv_load_part(row, c, n, dt)      the n < FW elements from c, zero-filled
 *   fv_fma(w, x, acc)                w * x + acc, one rounding
 *   fv_hsum(v)                       the lanes' sum in the scalar tier's tree
 * Each output element is one accumulator: lane j sums columns j, j + FW, ...
 * with FMA, the tail zero-padded, then fv_hsum; every path (decode rows,
 * prefill tiles, remainders) runs that sequence, so results do not depend on
 * tiling or threads. X86_FLOAT_F16 0 leaves out matmul_f16 (a tier that keeps
 * the one below it). */
#ifndef CISM_X86_FLOAT_TILES_H
#define CISM_X86_FLOAT_TILES_H

#ifndef X86_FLOAT_F16
#define X86_FLOAT_F16 1
#endif

typedef char cism__nr_at_most_4[NR >= 1 && NR <= 4 ? 1 : -1];   /* row_tile_tokens handles remainders < 4 */

/* Keeps a loaded vector in a register: otherwise GCC folds an f32 weight load
   into every FMA that uses it and reads L1 once per token of the tile, which
   makes the prefill tile load-bound. */
#if defined(__GNUC__) || defined(__clang__)
#define IN_REG(v) __asm__("" : "+v"(v))
#else
#define IN_REG(v) ((void)0)
#endif

/* Decode: CISM__DECODE_ROWS rows at a time (independent FMA chains, each
   element's chain the same as prefill's), prefetching CISM__FLOAT_PF_DIST ahead
   (tier_common.h). y[t*ldy + r] for R rows (row_bytes rb apart from w) and T tokens. */
CISM__INLINE void tile(const uint8_t *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y,
                       int64_t ldy, const int R, const int T, const int dt, const uint8_t *pf_end) {
    fvec acc[MR > CISM__DECODE_ROWS ? MR : CISM__DECODE_ROWS][NR], xv[NR];
    int64_t c;
    int r, t;
    for (r = 0; r < R; r++)
        for (t = 0; t < T; t++) acc[r][t] = fv_zero();
    for (c = 0; c + FW <= cols; c += FW) {
        if (T == 1 && R == CISM__DECODE_ROWS) { /* decode: fetch the bytes this step's share is, CISM__FLOAT_PF_DIST ahead in the rows */
            const uintptr_t p = (uintptr_t)w + CISM__FLOAT_PF_DIST + (uintptr_t)(R * c) * (dt == CISM_DTYPE_F32 ? 4u : 2u);
            int k;
            for (k = 0; k < R * FW * 4 / 64; k += (dt == CISM_DTYPE_F32 ? 1 : 2))
                if (p + 64u * (uintptr_t)k < (uintptr_t)pf_end) _mm_prefetch((const char *)(p + 64u * (uintptr_t)k), CISM__FLOAT_PF_HINT);
        }
        for (t = 0; t < T; t++) xv[t] = fv_loadu(x + t * ldx + c);
        for (r = 0; r < R; r++) {
            fvec wv = fv_load(w + (uint64_t)r * rb, c, dt);
            if (T > 1) IN_REG(wv);
            for (t = 0; t < T; t++) acc[r][t] = fv_fma(wv, xv[t], acc[r][t]);
        }
    }
    if (c < cols) {
        for (t = 0; t < T; t++) xv[t] = fv_load_part(x + t * ldx, c, cols - c, CISM_DTYPE_F32);
        for (r = 0; r < R; r++) {
            fvec wv = fv_load_part(w + (uint64_t)r * rb, c, cols - c, dt);
            for (t = 0; t < T; t++) acc[r][t] = fv_fma(wv, xv[t], acc[r][t]);
        }
    }
    for (r = 0; r < R; r++)
        for (t = 0; t < T; t++) y[t * ldy + r] = fv_hsum(acc[r][t]);
}

/* R rows against tokens [t0, t1) in NR-token tiles */
CISM__INLINE void row_tile_tokens(const uint8_t *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y,
                                  int64_t ldy, int64_t t0, int64_t t1, const int R, const int dt) {
    int64_t t;
    for (t = t0; t + NR <= t1; t += NR) tile(w, rb, cols, x + t * ldx, ldx, y + t * ldy, ldy, R, NR, dt, NULL);
    switch (t1 - t) { /* the last < NR tokens */
    case 3: tile(w, rb, cols, x + t * ldx, ldx, y + t * ldy, ldy, R, 3 < NR ? 3 : 1, dt, NULL); break;
    case 2: tile(w, rb, cols, x + t * ldx, ldx, y + t * ldy, ldy, R, 2 < NR ? 2 : 1, dt, NULL); break;
    case 1: tile(w, rb, cols, x + t * ldx, ldx, y + t * ldy, ldy, R, 1, dt, NULL); break;
    default: break;
    }
}

/* Rows [r0, r1): one token in CISM__DECODE_ROWS-row tiles; more in token
   blocks whose activations stay in L2, MR-row tiles (then 4, then 1). */
CISM__INLINE void matmul_dt(const void *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y,
                            int64_t ldy, int64_t nt, int64_t r0, int64_t r1, const int dt) {
    const uint8_t *wb = (const uint8_t *)w;
    const uint8_t *end = wb + (uint64_t)r1 * rb; /* no prefetch into another thread's rows */
    int64_t r, t0, tb;
    if (nt == 1) {
        for (r = r0; r + CISM__DECODE_ROWS <= r1; r += CISM__DECODE_ROWS) tile(wb + (uint64_t)r * rb, rb, cols, x, ldx, y + r, ldy, CISM__DECODE_ROWS, 1, dt, end);
        for (; r < r1; r++) tile(wb + (uint64_t)r * rb, rb, cols, x, ldx, y + r, ldy, 1, 1, dt, end);
        return;
    }
    tb = CISM__X_BLOCK_BYTES / (cols * 4);
    tb -= tb % NR;
    if (tb < NR) tb = NR;
    for (t0 = 0; t0 < nt; t0 += tb) {
        int64_t t1 = nt - t0 < tb ? nt : t0 + tb;
        for (r = r0; r + MR <= r1; r += MR)
            row_tile_tokens(wb + (uint64_t)r * rb, rb, cols, x, ldx, y + r, ldy, t0, t1, MR, dt);
        for (; r + 4 <= r1; r += 4) row_tile_tokens(wb + (uint64_t)r * rb, rb, cols, x, ldx, y + r, ldy, t0, t1, 4, dt);
        for (; r < r1; r++) row_tile_tokens(wb + (uint64_t)r * rb, rb, cols, x, ldx, y + r, ldy, t0, t1, 1, dt);
    }
}

static void matmul_f32(const void *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y, int64_t ldy,
                       int64_t nt, int64_t r0, int64_t r1) {
    matmul_dt(w, rb, cols, x, ldx, y, ldy, nt, r0, r1, CISM_DTYPE_F32);
}
#if X86_FLOAT_F16
static void matmul_f16(const void *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y, int64_t ldy,
                       int64_t nt, int64_t r0, int64_t r1) {
    matmul_dt(w, rb, cols, x, ldx, y, ldy, nt, r0, r1, CISM_DTYPE_F16);
}
#endif
static void matmul_bf16(const void *w, uint64_t rb, int64_t cols, const float *x, int64_t ldx, float *y, int64_t ldy,
                        int64_t nt, int64_t r0, int64_t r1) {
    matmul_dt(w, rb, cols, x, ldx, y, ldy, nt, r0, r1, CISM_DTYPE_BF16);
}

#endif
