/* kernels_amx.c - the avx512_amx tier: the AVX-512 tier's table, with the
 * prefill of the interleaved int8 formats q8x16 and q4ax16 on AMX tiles
 * (Intel Sapphire Rapids and later; Linux, which must grant the process the
 * tile state: platform/cpu.c).
 *
 * One block of 32 weights of a group of 16 rows is already an AMX B tile:
 * q8x16 keeps, per block, 8 chunks of 64 bytes, chunk c holding elements
 * 4c..4c+3 of each of the 16 rows (4 bytes per row), which is the layout
 * TDPBSSD reads (B row c, column r: 4 bytes of row r). q4ax16's 4 chunks hold
 * elements 4c..4c+3 in the low nibbles and 16 + 4c.. in the high ones: they
 * are unpacked once per group into 8 chunks of bytes (codes 0..15, read
 * unsigned by TDPBSUD). The A tile is 16 tokens' int8 activations of the
 * block (32 bytes each, the rows ldq apart). Each product is one block's
 * exact int32 sum per (token, row), so the combine after it is the AVX-512
 * tile's, operation for operation: the same bits as the avx512 tier for
 * every token, whichever path takes it (test_amx.c).
 *
 * Calls of fewer than 32 tokens (decode, batched decode, verifies, short
 * prompts) take the avx512 tier's kernels and entries: there the tiles'
 * fixed costs (a group's A tile loads and q4ax16 unpacking per call) made
 * the real SmolLM2's prefill of 16 tokens 13% slower; from 32 tokens on, the
 * tiles are faster. A longer call with outlier channels runs the tiles over
 * all its tokens, whatever its runs (outliers_amx). */
#include "kernels.h"
#include "tier_common.h"
#include "quant.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "avx512_x16_scales.h"

#define AMX_T 16     /* tokens per tile */
#define AMX_MIN_NT 32 /* fewer tokens: the avx512 kernels (faster there on the real SmolLM2) */
#define AMX_CHUNK 64 /* q4ax16: blocks unpacked at a time (32 KiB) */

/* The tile configuration (palette 1) for nr <= 16 tokens: tiles 0-3 the
   int32 sums of nr tokens x 16 rows (four blocks in flight); 4, 5 the
   activations (nr x 32 bytes); 6, 7 a block of weights (8 x 64 bytes). */
typedef struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;
typedef char amx_cfg_is_64_bytes[sizeof(amx_cfg) == 64 ? 1 : -1];

static void amx_config(int nr) {
    amx_cfg c;
    int i;
    memset(&c, 0, sizeof(c));
    c.palette = 1;
    for (i = 0; i < 4; i++) {
        c.rows[i] = (uint8_t)nr;
        c.colsb[i] = 64;
    }
    for (i = 4; i < 6; i++) {
        c.rows[i] = (uint8_t)nr;
        c.colsb[i] = 32;
        c.rows[i + 2] = 8;
        c.colsb[i + 2] = 64;
    }
    _tile_loadconfig(&c);
}

/* The avx512 tier's kernels, for what the tiles do not take */
static cism__matmul_a8_fn g_fb_q8, g_fb_q4a;
typedef void (*outl_fn)(const void *, uint64_t, int64_t, const uint8_t *, int64_t, float *, int64_t, int64_t, int64_t, int64_t,
                        const struct cism__oruns *);
static outl_fn g_fb_outl_q8, g_fb_outl_q4a;

/* q4ax16: blocks [b0, b1) of a group, their nibbles as bytes, block b at
   out + 512 (b - b0) (B tiles) */
static void unpack_q4a(const uint8_t *grp, const cism__x16 *g, int64_t b0, int64_t b1, uint8_t *out) {
    const __m512i m = _mm512_set1_epi8(0x0f);
    int64_t b;
    int c;
    for (b = b0; b < b1; b++) {
        const uint8_t *cb = cism__x16_codes(g, grp, b);
        uint8_t *o = out + (b - b0) * 512;
        for (c = 0; c < 4; c++) {
            const __m512i v = _mm512_loadu_si512((const void *)(cb + c * 64));
            _mm512_storeu_si512((void *)(o + c * 64), _mm512_and_si512(v, m));
            _mm512_storeu_si512((void *)(o + 256 + c * 64), _mm512_and_si512(_mm512_srli_epi16(v, 4), m));
        }
    }
}

/* One block's sums (s: 16 tokens x 16 rows) added to the tokens' outputs, as
   kernels_avx512_quant.c's x16_tile: q8 acc + s * (d_w * d_a); q4a
   acc + (d_w * s + m_w * sum) * d_a */
CISM__INLINE void combine(__m512 *acc, const int32_t *s, const uint8_t *scales, const uint8_t *xq, int64_t ldq, int64_t b,
                          const int nr, const int q4a) {
    __m512 mn = _mm512_setzero_ps();
    const __m512 sc = x16_scales(scales, q4a ? X16_Q4A : X16_Q8, &mn);
    int t;
    if (q4a) {
        for (t = 0; t < nr; t++) {
            const cism__act8 *a = cism__act8_row(xq, ldq, t) + b;
            const __m512 v = _mm512_add_ps(_mm512_mul_ps(sc, _mm512_cvtepi32_ps(_mm512_loadu_si512((const void *)(s + 16 * t)))),
                                           _mm512_mul_ps(mn, _mm512_set1_ps((float)a->sum)));
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(v, _mm512_set1_ps(a->d)));
        }
    } else {
        for (t = 0; t < nr; t++) {
            const __m512 s_f = _mm512_cvtepi32_ps(_mm512_loadu_si512((const void *)(s + 16 * t)));
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(s_f, _mm512_mul_ps(sc, _mm512_set1_ps(cism__act8_row(xq, ldq, t)[b].d))));
        }
    }
}

/* One block b of a group on tiles: C = A (nr tokens' activations of block b)
   times B (the block's weights, 512 bytes at wp), stored into sb */
#define AMX_BLOCK(C, A, B, wp, sb)                                  \
    do {                                                            \
        _tile_zero(C);                                              \
        _tile_loadd(A, qa + b * (int64_t)sizeof(cism__act8), ldq);   \
        _tile_loadd(B, wp, 64);                                     \
        if (q4a)                                                    \
            _tile_dpbsud(C, A, B);                                  \
        else                                                        \
            _tile_dpbssd(C, A, B);                                  \
        _tile_stored(C, sb, 64);                                    \
    } while (0)

/* nr tokens (as configured; xq: the first one's row) against blocks
   [b0, b1) of one group: y[t * ldy + i] for the rows i in mask m, the
   blocks' terms added in order to 0 (b0 = 0) or to what y holds (the earlier
   blocks' sum, stored and loaded exactly: the same sequence of additions).
   wb: block b0 as a B tile, the next ones 512 bytes apart (q4ax16: unpacked;
   q8x16: NULL, the codes in place). Each block's sums are combined right
   after its tiles; four C tiles (and sum buffers) in turn let the next
   blocks' tiles start before the combine is done. (Running the tiles 2, 4
   or 16 blocks ahead of the combine measured the same for q8x16 and 10-15%
   slower for q4ax16.) */
CISM__INLINE void amx_group(const uint8_t *grp, const cism__x16 *g, const uint8_t *wb, int64_t b0, int64_t b1, const uint8_t *xq,
                            int64_t ldq, float *y, int64_t ldy, __mmask16 m, const int nr, const int q4a) {
    int32_t s[4][AMX_T * 16];
    const uint8_t *qa = xq + offsetof(cism__act8, q);
    __m512 acc[AMX_T];
    int64_t b;
    int t;
    for (t = 0; t < nr; t++) acc[t] = b0 ? _mm512_maskz_loadu_ps(m, y + t * ldy) : _mm512_setzero_ps();
    for (b = b0; b < b1; b++) { /* C tile and sums b % 4, A and B tiles b % 2 */
        const uint8_t *wp = q4a ? wb + (b - b0) * 512 : cism__x16_codes(g, grp, b);
        switch (b & 3) {
        case 0: AMX_BLOCK(0, 4, 6, wp, s[0]); break;
        case 1: AMX_BLOCK(1, 5, 7, wp, s[1]); break;
        case 2: AMX_BLOCK(2, 4, 6, wp, s[2]); break;
        default: AMX_BLOCK(3, 5, 7, wp, s[3]); break;
        }
        combine(acc, s[b & 3], cism__x16_scales(g, grp, b), xq, ldq, b, nr, q4a);
    }
    for (t = 0; t < nr; t++) _mm512_mask_storeu_ps(y + t * ldy, m, acc[t]);
}

/* Tokens [t0, t1) (nr at a time, as configured) against groups [g0, g1)
   of rows [r0, r1) (a group partly outside computed whole, stored masked) */
CISM__INLINE void amx_groups(const uint8_t *w, uint64_t rb, const cism__x16 *g, const uint8_t *xq, int64_t ldq, float *y,
                             int64_t ldy, int64_t t0, int64_t t1, int64_t g0, int64_t g1, int64_t r0, int64_t r1,
                             uint8_t *unpacked, const int nr, const int q4a) {
    int64_t gi, t, b0, b1;
    for (gi = g0; gi < g1; gi++) {
        const uint8_t *grp = w + (uint64_t)gi * CISM__X16 * rb;
        const __mmask16 mm = (__mmask16)cism__x16_row_mask(gi, r0, r1);
        for (b0 = 0; b0 < g->nb; b0 = b1) { /* q8x16: all blocks at once */
            b1 = !q4a || g->nb - b0 <= AMX_CHUNK ? g->nb : b0 + AMX_CHUNK;
            if (q4a) unpack_q4a(grp, g, b0, b1, unpacked);
            for (t = t0; t < t1; t += nr)
                amx_group(grp, g, q4a ? unpacked : NULL, b0, b1, xq + t * ldq, ldq, y + t * ldy + gi * CISM__X16, ldy, mm, nr,
                          q4a);
        }
    }
}

/* Rows [r0, r1) of a q8x16 / q4ax16 matrix for nt tokens: fewer than
   AMX_MIN_NT by the avx512 tier's kernel; else on tiles, in panels of
   groups whose weights stay in L2 while token blocks whose activations stay
   in L2 pass over them (as matmul_a8_x16), the last nt % 16 tokens of a
   block on tiles of that many rows (the tile configuration loaded again). */
static void matmul_amx(const void *w, uint64_t rb, int64_t cols, const void *xq, int64_t ldq, float *y, int64_t ldy,
                       int64_t nt, int64_t r0, int64_t r1, const int q4a) {
    const cism__x16 g = cism__x16_geom(q4a ? CISM_DTYPE_Q4AX16 : CISM_DTYPE_Q8X16, rb);
    const int64_t g_end = (r1 + CISM__X16 - 1) / CISM__X16;
    int64_t tb = CISM__X_BLOCK_BYTES / ldq / AMX_T * AMX_T, gp, g0, g1, t0, t1, full;
    uint8_t unpacked[AMX_CHUNK * 512];
    if (nt < AMX_MIN_NT) {
        (q4a ? g_fb_q4a : g_fb_q8)(w, rb, cols, xq, ldq, y, ldy, nt, r0, r1);
        return;
    }
    if (tb < AMX_T) tb = AMX_T;
    gp = cism__w_panel_groups(rb, nt, tb, g_end - r0 / CISM__X16);
    amx_config(AMX_T);
    for (g0 = r0 / CISM__X16; g0 < g_end; g0 = g1) {
        g1 = g_end - g0 < gp ? g_end : g0 + gp;
        for (t0 = 0; t0 < nt; t0 = t1) {
            t1 = nt - t0 < tb ? nt : t0 + tb;
            full = t0 + (t1 - t0) / AMX_T * AMX_T;
            amx_groups((const uint8_t *)w, rb, &g, (const uint8_t *)xq, ldq, y, ldy, t0, full, g0, g1, r0, r1, unpacked,
                       AMX_T, q4a);
            if (full < t1) {
                amx_config((int)(t1 - full));
                amx_groups((const uint8_t *)w, rb, &g, (const uint8_t *)xq, ldq, y, ldy, full, t1, g0, g1, r0, r1, unpacked,
                           (int)(t1 - full), q4a);
                amx_config(AMX_T);
            }
        }
    }
    _tile_release();
}

static void matmul_a8_q8x16(const void *w, uint64_t rb, int64_t cols, const void *xq, int64_t ldq, float *y, int64_t ldy,
                            int64_t nt, int64_t r0, int64_t r1) {
    matmul_amx(w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, 0);
}

static void matmul_a8_q4ax16(const void *w, uint64_t rb, int64_t cols, const void *xq, int64_t ldq, float *y,
                             int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    matmul_amx(w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, 1);
}

/* With outlier channels: fewer than AMX_MIN_NT tokens the avx512 tier's
   entry; else its run-by-run path around these tiles, once per panel */
static void outliers_amx(const void *w, uint64_t rb, int64_t cols, const uint8_t *xq, int64_t ldq, float *y, int64_t ldy,
                         int64_t nt, int64_t r0, int64_t r1, const struct cism__oruns *runs, const int q4a) {
    if (nt < AMX_MIN_NT)
        (q4a ? g_fb_outl_q4a : g_fb_outl_q8)(w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, runs);
    else
        cism__avx512_outliers_x16(w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, runs, q4a ? matmul_a8_q4ax16 : matmul_a8_q8x16,
                                  q4a ? CISM_DTYPE_Q4AX16 : CISM_DTYPE_Q8X16);
}

static void matmul_outliers_q8x16(const void *w, uint64_t rb, int64_t cols, const uint8_t *xq, int64_t ldq, float *y,
                                  int64_t ldy, int64_t nt, int64_t r0, int64_t r1, const struct cism__oruns *runs) {
    outliers_amx(w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, runs, 0);
}

static void matmul_outliers_q4ax16(const void *w, uint64_t rb, int64_t cols, const uint8_t *xq, int64_t ldq, float *y,
                                   int64_t ldy, int64_t nt, int64_t r0, int64_t r1, const struct cism__oruns *runs) {
    outliers_amx(w, rb, cols, xq, ldq, y, ldy, nt, r0, r1, runs, 1);
}

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
    g_fb_q8 = k->matmul_a8[CISM_DTYPE_Q8X16];
    g_fb_q4a = k->matmul_a8[CISM_DTYPE_Q4AX16];
    g_fb_outl_q8 = k->matmul_a8_outliers[CISM_DTYPE_Q8X16];
    g_fb_outl_q4a = k->matmul_a8_outliers[CISM_DTYPE_Q4AX16];
    k->matmul_a8[CISM_DTYPE_Q8X16] = matmul_a8_q8x16;
    k->matmul_a8[CISM_DTYPE_Q4AX16] = matmul_a8_q4ax16;
    k->matmul_a8_outliers[CISM_DTYPE_Q8X16] = matmul_outliers_q8x16;
    k->matmul_a8_outliers[CISM_DTYPE_Q4AX16] = matmul_outliers_q4ax16;
    k->int8_mac_loop = int8_mac_loop;
}
