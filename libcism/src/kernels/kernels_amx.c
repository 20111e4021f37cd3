/* kernels_amx.c - the avx512_amx tier: the AVX-512 tier's table, with the
 * prefill of every interleaved int8 format (q8x16, q4sx16, q4ax16, q6x16,
 * q5x16, q3x16, q2x16) on AMX tiles (Intel Sapphire Rapids and later; Linux,
 * which must grant the process the tile state: platform/cpu.c).
 *
 * One block of 32 weights of a group of 16 rows is already an AMX B tile:
 * q8x16 keeps, per block, 8 chunks of 64 bytes, chunk c holding elements
 * 4c..4c+3 of each of the 16 rows (4 bytes per row), which is the layout
 * TDPBSSD reads (B row c, column r: 4 bytes of row r). The other formats are
 * unpacked once per group into such rows (avx512_x16_block.h, the avx512
 * tier's decode): q4ax16's codes 0..15, read unsigned by TDPBSUD; the others'
 * levels (code - 8 for q4sx16, code - H for q6/q5/q3/q2), signed. q4sx16's
 * blocks are 16 weights: 4 rows, a product of K = 16. The A tile is 16
 * tokens' int8 activations of the block (32 or 16 bytes each, the rows ldq
 * apart). Each product is one block's exact int32 sum per (token, row), so
 * the combine after it is the AVX-512 tile's, operation for operation: the
 * same bits as the avx512 tier for every token, whichever path takes it
 * (test_amx.c).
 *
 * Calls of fewer than 32 tokens (decode, batched decode, verifies, short
 * prompts) take the avx512 tier's kernels and entries: there the tiles'
 * fixed costs (a group's A tile loads and the unpacking per call) made the
 * real SmolLM2's prefill of 16 tokens 13% slower; from 32 tokens on, the
 * tiles are faster. A longer call with outlier channels runs the tiles over
 * all its tokens, whatever its runs (outliers_amx). */
#include "kernels.h"
#include "tier_common.h"
#include "quant.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "avx512_x16_block.h"

#define AMX_T 16                   /* tokens per tile */
#define AMX_MIN_NT 32              /* fewer tokens: the avx512 kernels (faster there on the real SmolLM2) */
#define AMX_UNPACK (32 * 1024)     /* all but q8x16: bytes of B tiles unpacked at a time */
#define AMX_MIN_TB 64              /* all but q8x16: tokens per token block at least (each block unpacks again) */
#define AMX_XF 7                   /* the formats on tiles: X16_Q8 .. X16_Q2 */
#define KB(xf) X16_BLOCK(xf) /* bytes of a token's activations per block (K) */

/* The tile configuration (palette 1) for 16 tokens and blocks of kb weights:
   tiles 0-3 the int32 sums of 16 tokens x 16 rows (four blocks in flight);
   4, 5 the activations (16 x kb bytes); 6, 7 a block of weights (kb / 4 x 64
   bytes). */
typedef struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;
typedef char amx_cfg_is_64_bytes[sizeof(amx_cfg) == 64 ? 1 : -1];

static void amx_config(int kb) {
    amx_cfg c;
    int i;
    memset(&c, 0, sizeof(c));
    c.palette = 1;
    for (i = 0; i < 4; i++) {
        c.rows[i] = AMX_T;
        c.colsb[i] = 64;
    }
    for (i = 4; i < 6; i++) {
        c.rows[i] = AMX_T;
        c.colsb[i] = (uint16_t)kb;
        c.rows[i + 2] = (uint8_t)(kb / 4);
        c.colsb[i + 2] = 64;
    }
    _tile_loadconfig(&c);
}

/* The avx512 tier's kernels, for what the tiles do not take (by xf) */
static cism__matmul_a8_fn g_fb[AMX_XF];
typedef void (*outl_fn)(const void *, uint64_t, int64_t, const uint8_t *, int64_t, float *, int64_t, int64_t, int64_t, int64_t,
                        const struct cism__oruns *);
static outl_fn g_fb_outl[AMX_XF];

/* Blocks [b0, b1) of a group as B tiles (not q8x16), block b at
   out + 16 KB(xf) (b - b0): each chunk's two rows (avx512_x16_block.h), q4ax16's
   as codes, the others' as signed levels (code - 8, code - H) */
static void unpack(const uint8_t *grp, const cism__x16 *g, int64_t b0, int64_t b1, uint8_t *out, const int xf) {
    const int nc = x16_nibble_chunks(xf);
    const __m512i off = _mm512_set1_epi8((char)(xf == X16_Q4A ? 0 : xf == X16_Q4S ? 8 : X16_HALF(xf)));
    int64_t b;
    int c;
    for (b = b0; b < b1; b++) {
        const uint8_t *cb = cism__x16_codes(g, grp, b);
        const x16_planes pl = x16_planes_of(cb, xf);
        uint8_t *o = out + (b - b0) * 16 * KB(xf);
        for (c = 0; c < nc; c++) {
            __m512i lo, hi;
            x16_chunk_rows(cb, &pl, c, xf, &lo, &hi);
            _mm512_storeu_si512((void *)(o + c * 64), _mm512_sub_epi8(lo, off));
            _mm512_storeu_si512((void *)(o + (nc + c) * 64), _mm512_sub_epi8(hi, off));
        }
    }
}

/* One block's sums (s: 16 tokens x 16 rows) added to the tokens' outputs, as
   kernels_avx512_quant.c's x16_tile: q4a acc + (d_w * s + m_w * sum) * d_a,
   the others acc + s * (d_w * d_a) */
CISM__INLINE void combine(__m512 *acc, const int32_t *s, const uint8_t *scales, const uint8_t *xq, int64_t ldq, int64_t b,
                          const int xf) {
    __m512 mn = _mm512_setzero_ps();
    const __m512 sc = x16_scales(scales, xf, &mn);
    int t;
    for (t = 0; t < AMX_T; t++) {
        const __m512 s_f = _mm512_cvtepi32_ps(_mm512_loadu_si512((const void *)(s + 16 * t)));
        if (xf == X16_Q4A) {
            const cism__act8 *a = cism__act8_row(xq, ldq, t) + b;
            const __m512 v = _mm512_add_ps(_mm512_mul_ps(sc, s_f), _mm512_mul_ps(mn, _mm512_set1_ps((float)a->sum)));
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(v, _mm512_set1_ps(a->d)));
        } else {
            const float da = cism__act8_row(xq, ldq, t)[xf == X16_Q4S ? b / 2 : b].d;
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(s_f, _mm512_mul_ps(sc, _mm512_set1_ps(da))));
        }
    }
}

/* One block of a group on tiles: C = A (16 tokens' activations of the block,
   at ap) times B (the block's weights, at wp), stored into sb */
#define AMX_BLOCK(C, A, B, ap, wp, sb) \
    do {                               \
        _tile_zero(C);                 \
        _tile_loadd(A, ap, ldq);       \
        _tile_loadd(B, wp, 64);        \
        if (xf == X16_Q4A)             \
            _tile_dpbsud(C, A, B);     \
        else                           \
            _tile_dpbssd(C, A, B);     \
        _tile_stored(C, sb, 64);       \
    } while (0)

/* 16 tokens (xq: the first one's row) against blocks [b0, b1) of one group:
   y[t * ldy + i] for the tokens t >= t_first and the rows i in mask m (the
   tokens before t_first are computed, not stored: another tile has them),
   the blocks' terms added in order to 0 (b0 = 0) or to what y holds (the
   earlier blocks' sum, stored and loaded exactly: the same sequence of
   additions).
   wb: block b0 as a B tile, the next ones 16 KB(xf) bytes apart (unpacked;
   q8x16: NULL, the codes in place). Each block's sums are combined right
   after its tiles; four C tiles (and sum buffers) in turn let the next
   blocks' tiles start before the combine is done. (Running the tiles 2, 4
   or 16 blocks ahead of the combine measured the same for q8x16 and 10-15%
   slower for q4ax16.) */
CISM__INLINE void amx_group(const uint8_t *grp, const cism__x16 *g, const uint8_t *wb, int64_t b0, int64_t b1, const uint8_t *xq,
                            int64_t ldq, float *y, int64_t ldy, __mmask16 m, int t_first, const int xf) {
    int32_t s[4][AMX_T * 16];
    const uint8_t *qa = xq + offsetof(cism__act8, q);
    __m512 acc[AMX_T];
    int64_t b;
    int t;
    for (t = 0; t < AMX_T; t++) acc[t] = b0 ? _mm512_maskz_loadu_ps(m, y + t * ldy) : _mm512_setzero_ps();
    for (b = b0; b < b1; b++) { /* C tile and sums b % 4, A and B tiles b % 2 */
        const uint8_t *wp = wb ? wb + (b - b0) * 16 * KB(xf) : cism__x16_codes(g, grp, b);
        const uint8_t *ap = qa + (xf == X16_Q4S ? (b >> 1) * (int64_t)sizeof(cism__act8) + (b & 1) * 16 /* half a block */
                                                : b * (int64_t)sizeof(cism__act8));
        switch (b & 3) {
        case 0: AMX_BLOCK(0, 4, 6, ap, wp, s[0]); break;
        case 1: AMX_BLOCK(1, 5, 7, ap, wp, s[1]); break;
        case 2: AMX_BLOCK(2, 4, 6, ap, wp, s[2]); break;
        default: AMX_BLOCK(3, 5, 7, ap, wp, s[3]); break;
        }
        combine(acc, s[b & 3], cism__x16_scales(g, grp, b), xq, ldq, b, xf);
    }
    for (t = 0; t < AMX_T; t++)
        if (t >= t_first) _mm512_mask_storeu_ps(y + t * ldy, m, acc[t]);
}

/* Tokens [t0, t1) against groups [g0, g1) of rows [r0, r1) (a group partly
   outside computed whole, stored masked), 16 at a time; the last t1 - t0 mod
   16 by the tile of the 16 tokens that end at t1, storing only those (its
   first rows are tokens of the tile before, or of the token block before:
   the call has 32 tokens or more). Recomputing a token gives its bits again,
   and every token is stored once, so the blocks unpacked for a group serve
   all its tiles and the configuration stays. */
CISM__INLINE void amx_groups(const uint8_t *w, uint64_t rb, const cism__x16 *g, const uint8_t *xq, int64_t ldq, float *y,
                             int64_t ldy, int64_t t0, int64_t t1, int64_t g0, int64_t g1, int64_t r0, int64_t r1,
                             uint8_t *unpacked, const int xf) {
    const int64_t chunk = AMX_UNPACK / (16 * KB(xf)); /* blocks unpacked at a time */
    const uint8_t *wb = xf == X16_Q8 ? NULL : unpacked; /* q8x16: the codes in place */
    int64_t gi, t, b0, b1;
    for (gi = g0; gi < g1; gi++) {
        const uint8_t *grp = w + (uint64_t)gi * CISM__X16 * rb;
        const __mmask16 mm = (__mmask16)cism__x16_row_mask(gi, r0, r1);
        for (b0 = 0; b0 < g->nb; b0 = b1) { /* q8x16: all blocks at once */
            b1 = xf == X16_Q8 || g->nb - b0 <= chunk ? g->nb : b0 + chunk;
            if (wb) unpack(grp, g, b0, b1, unpacked, xf);
            for (t = t0; t + AMX_T <= t1; t += AMX_T)
                amx_group(grp, g, wb, b0, b1, xq + t * ldq, ldq, y + t * ldy + gi * CISM__X16, ldy, mm, 0, xf);
            if (t < t1)
                amx_group(grp, g, wb, b0, b1, xq + (t1 - AMX_T) * ldq, ldq, y + (t1 - AMX_T) * ldy + gi * CISM__X16, ldy, mm,
                          (int)(AMX_T - (t1 - t)), xf);
        }
    }
}

/* Rows [r0, r1) of an interleaved matrix for nt tokens: fewer than
   AMX_MIN_NT by the avx512 tier's kernel; else on tiles, in panels of groups
   whose weights stay in L2 while token blocks whose activations stay in L2
   pass over them (as matmul_a8_x16). A token block unpacks its groups again,
   so the unpacked formats take blocks of AMX_MIN_TB tokens at least: a 1B
   model's down projection (5,632 columns) fits 32 tokens in
   CISM__X_BLOCK_BYTES, and 64 made its prefill 5-16% faster (128 did not:
   docs/PERFORMANCE.md). */
CISM__INLINE void matmul_amx(const void *w, uint64_t rb, int64_t cols, const void *xq, int64_t ldq, float *y, int64_t ldy,
                             int64_t nt, int64_t r0, int64_t r1, const int xf) {
    const cism__x16 g = cism__x16_geom(x16_dtype(xf), rb);
    const int64_t g_end = (r1 + CISM__X16 - 1) / CISM__X16;
    const int64_t tb_min = xf == X16_Q8 ? AMX_T : AMX_MIN_TB;
    int64_t tb = CISM__X_BLOCK_BYTES / ldq / AMX_T * AMX_T, gp, g0, g1, t0, t1;
    uint8_t unpacked[AMX_UNPACK];
    if (nt < AMX_MIN_NT) {
        g_fb[xf](w, rb, cols, xq, ldq, y, ldy, nt, r0, r1);
        return;
    }
    if (tb < tb_min) tb = tb_min;
    gp = cism__w_panel_groups(rb, nt, tb, g_end - r0 / CISM__X16);
    amx_config(KB(xf));
    for (g0 = r0 / CISM__X16; g0 < g_end; g0 = g1) {
        g1 = g_end - g0 < gp ? g_end : g0 + gp;
        for (t0 = 0; t0 < nt; t0 = t1) {
            t1 = nt - t0 < tb ? nt : t0 + tb;
            amx_groups((const uint8_t *)w, rb, &g, (const uint8_t *)xq, ldq, y, ldy, t0, t1, g0, g1, r0, r1, unpacked, xf);
        }
    }
    _tile_release();
}

/* With outlier channels: fewer than AMX_MIN_NT tokens the avx512 tier's
   entry; else its run-by-run path around these tiles, once per panel */
#define AMX_ENTRIES(nm, XF)                                                                                          \
    static void matmul_a8_##nm(const void *w, uint64_t rb, int64_t cols, const void *xq, int64_t ldq, float *y,        \
                               int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {                                     \
        matmul_amx(w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, XF);                                                     \
    }                                                                                                                 \
    static void matmul_outliers_##nm(const void *w, uint64_t rb, int64_t cols, const uint8_t *xq, int64_t ldq,        \
                                     float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1,                      \
                                     const struct cism__oruns *runs) {                                               \
        if (nt < AMX_MIN_NT)                                                                                          \
            g_fb_outl[XF](w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, runs);                                            \
        else                                                                                                          \
            cism__avx512_outliers_x16(w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, runs, matmul_a8_##nm, x16_dtype(XF)); \
    }
AMX_ENTRIES(q8x16, X16_Q8)
AMX_ENTRIES(q4sx16, X16_Q4S)
AMX_ENTRIES(q4ax16, X16_Q4A)
AMX_ENTRIES(q6x16, X16_Q6)
AMX_ENTRIES(q5x16, X16_Q5)
AMX_ENTRIES(q3x16, X16_Q3)
AMX_ENTRIES(q2x16, X16_Q2)

/* The probe (cism_measure_int8_mac_peak): four independent TDPBSSD chains of
   whole tiles (16 x 16 x 64 multiply-adds each); the kernels above use half
   tiles (K = 32, one block per product) */
static int64_t int8_mac_loop(int64_t iters, int32_t *sink) {
    int8_t a[16 * 64], b[16 * 64];
    int32_t c[16 * 16];
    amx_cfg cf;
    int64_t i;
    int j;
    memset(&cf, 0, sizeof(cf));
    cf.palette = 1;
    for (j = 0; j < 6; j++) {
        cf.rows[j] = 16;
        cf.colsb[j] = 64;
    }
    memset(a, (int)(*sink | 1) & 0x7f, sizeof(a));
    memset(b, 3, sizeof(b));
    _tile_loadconfig(&cf);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, b, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (i = 0; i < iters; i++) {
        _tile_dpbssd(0, 4, 5);
        _tile_dpbssd(1, 4, 5);
        _tile_dpbssd(2, 4, 5);
        _tile_dpbssd(3, 4, 5);
    }
    _tile_stored(0, c, 64);
    *sink += c[0];
    _tile_stored(3, c, 64);
    *sink += c[255];
    _tile_release();
    return iters * 4 * 16 * 16 * 64;
}

void cism__kernels_fill_avx512_amx(cism__kernels *k) {
    static const cism__matmul_a8_fn mq[AMX_XF] = {matmul_a8_q8x16, matmul_a8_q4sx16, matmul_a8_q4ax16, matmul_a8_q6x16,
                                                  matmul_a8_q5x16, matmul_a8_q3x16, matmul_a8_q2x16};
    static const outl_fn mo[AMX_XF] = {matmul_outliers_q8x16, matmul_outliers_q4sx16, matmul_outliers_q4ax16,
                                       matmul_outliers_q6x16, matmul_outliers_q5x16,  matmul_outliers_q3x16,
                                       matmul_outliers_q2x16};
    int xf;
    for (xf = 0; xf < AMX_XF; xf++) {
        const int32_t dt = x16_dtype(xf);
        g_fb[xf] = k->matmul_a8[dt];
        g_fb_outl[xf] = k->matmul_a8_outliers[dt];
        k->matmul_a8[dt] = mq[xf];
        k->matmul_a8_outliers[dt] = mo[xf];
    }
    k->int8_mac_loop = int8_mac_loop;
}
