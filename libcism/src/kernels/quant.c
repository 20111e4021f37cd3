/* quant.c - quantizing f32 rows into the packed weight formats, and back.
 *
 * One implementation, used by the converter through cism_quantize() and by the
 * tests. The rounding rules (docs/QUANTIZATION.md):
 *   q8      scale = max|x| / 127 rounded to fp16; q = round(x / scale), ties
 *           away from zero, clamped to -127..127.
 *   4-bit   a scale search per block: candidate scales map the block's
 *           largest-magnitude element onto 0.80..1.10 times either end of the
 *           codebook; each candidate assigns every weight its nearest level,
 *           then takes the least-squares scale of that assignment. The best
 *           (lowest importance-weighted squared error) is encoded in the
 *           block's scale format (E4M3: the nearest code and its two
 *           neighbours are tried) and the codes are re-rounded with the
 *           encoded scale.
 *   q4a     per block a scale d and minimum m (fp16 both): candidates spread
 *           the block's range [min, max] over 0..15 (and a little less), each
 *           refitted by least squares on its codes; the encoded pair with the
 *           lowest weighted squared error wins; codes are the nearest of
 *           d * c + m with the encoded d, m.
 *   q6, q5, q3, q2 symmetric uniform levels -H..H-1 (H = 32, 16, 4, 2), fp16 scale: a scale
 *           search per block like the 4-bit one, finer (the largest-magnitude
 *           element onto 0.80, 0.825, ..., 1.10 times either end, then
 *           +-0.0125 around the best; each candidate's assignment refitted by
 *           importance-weighted least squares); the best scale's fp16 code,
 *           its two fp16 neighbours and the plain rule's scale (max-abs onto
 *           H - 1) are scored with nearest codes (ties away from zero,
 *           clamped) and the lowest weighted error is stored.
 * The last block of a row whose length is not a multiple of the block is
 * padded with zeros (and its padding is counted in the bits per weight). */
#include "quant.h"
#include "../core/error.h"
#include "../core/threadpool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NAN_F (0.0f / 0.0f)

/* clang-format off */
const float cism__e4m3_table[256] = {
    0.0f, 0.001953125f, 0.00390625f, 0.005859375f, 0.0078125f, 0.009765625f, 0.01171875f, 0.013671875f,
    0.015625f, 0.017578125f, 0.01953125f, 0.021484375f, 0.0234375f, 0.025390625f, 0.02734375f, 0.029296875f,
    0.03125f, 0.03515625f, 0.0390625f, 0.04296875f, 0.046875f, 0.05078125f, 0.0546875f, 0.05859375f,
    0.0625f, 0.0703125f, 0.078125f, 0.0859375f, 0.09375f, 0.1015625f, 0.109375f, 0.1171875f,
    0.125f, 0.140625f, 0.15625f, 0.171875f, 0.1875f, 0.203125f, 0.21875f, 0.234375f,
    0.25f, 0.28125f, 0.3125f, 0.34375f, 0.375f, 0.40625f, 0.4375f, 0.46875f,
    0.5f, 0.5625f, 0.625f, 0.6875f, 0.75f, 0.8125f, 0.875f, 0.9375f,
    1.0f, 1.125f, 1.25f, 1.375f, 1.5f, 1.625f, 1.75f, 1.875f,
    2.0f, 2.25f, 2.5f, 2.75f, 3.0f, 3.25f, 3.5f, 3.75f,
    4.0f, 4.5f, 5.0f, 5.5f, 6.0f, 6.5f, 7.0f, 7.5f,
    8.0f, 9.0f, 10.0f, 11.0f, 12.0f, 13.0f, 14.0f, 15.0f,
    16.0f, 18.0f, 20.0f, 22.0f, 24.0f, 26.0f, 28.0f, 30.0f,
    32.0f, 36.0f, 40.0f, 44.0f, 48.0f, 52.0f, 56.0f, 60.0f,
    64.0f, 72.0f, 80.0f, 88.0f, 96.0f, 104.0f, 112.0f, 120.0f,
    128.0f, 144.0f, 160.0f, 176.0f, 192.0f, 208.0f, 224.0f, 240.0f,
    256.0f, 288.0f, 320.0f, 352.0f, 384.0f, 416.0f, 448.0f, NAN_F,
    -0.0f, -0.001953125f, -0.00390625f, -0.005859375f, -0.0078125f, -0.009765625f, -0.01171875f, -0.013671875f,
    -0.015625f, -0.017578125f, -0.01953125f, -0.021484375f, -0.0234375f, -0.025390625f, -0.02734375f, -0.029296875f,
    -0.03125f, -0.03515625f, -0.0390625f, -0.04296875f, -0.046875f, -0.05078125f, -0.0546875f, -0.05859375f,
    -0.0625f, -0.0703125f, -0.078125f, -0.0859375f, -0.09375f, -0.1015625f, -0.109375f, -0.1171875f,
    -0.125f, -0.140625f, -0.15625f, -0.171875f, -0.1875f, -0.203125f, -0.21875f, -0.234375f,
    -0.25f, -0.28125f, -0.3125f, -0.34375f, -0.375f, -0.40625f, -0.4375f, -0.46875f,
    -0.5f, -0.5625f, -0.625f, -0.6875f, -0.75f, -0.8125f, -0.875f, -0.9375f,
    -1.0f, -1.125f, -1.25f, -1.375f, -1.5f, -1.625f, -1.75f, -1.875f,
    -2.0f, -2.25f, -2.5f, -2.75f, -3.0f, -3.25f, -3.5f, -3.75f,
    -4.0f, -4.5f, -5.0f, -5.5f, -6.0f, -6.5f, -7.0f, -7.5f,
    -8.0f, -9.0f, -10.0f, -11.0f, -12.0f, -13.0f, -14.0f, -15.0f,
    -16.0f, -18.0f, -20.0f, -22.0f, -24.0f, -26.0f, -28.0f, -30.0f,
    -32.0f, -36.0f, -40.0f, -44.0f, -48.0f, -52.0f, -56.0f, -60.0f,
    -64.0f, -72.0f, -80.0f, -88.0f, -96.0f, -104.0f, -112.0f, -120.0f,
    -128.0f, -144.0f, -160.0f, -176.0f, -192.0f, -208.0f, -224.0f, -240.0f,
    -256.0f, -288.0f, -320.0f, -352.0f, -384.0f, -416.0f, -448.0f, NAN_F,
};
/* clang-format on */

/* ---- formats -------------------------------------------------------------------- */
static const cism__fmt4 g_q4 = {
    CISM_DTYPE_Q4, 32, CISM__SCALE_F16, 1.0f, 18,
    {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7}};
/* E2M1 codes (bit 3 sign, bits 0-2 magnitude 0, .5, 1, 1.5, 2, 3, 4, 6) as doubled
   integers; the scale's power of two absorbs the halving: e4m3 * 2^-7 * E2M1. */
static const cism__fmt4 g_fp4 = {
    CISM_DTYPE_FP4, 16, CISM__SCALE_E4M3, 1.0f / 256.0f, 9,
    {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}};
/* 16 non-uniform levels: Lloyd-Max levels of Gaussian blocks of 32 normalized so
   the largest-magnitude element is +1, times 127 (tools/quant_explore.py). */
static const cism__fmt4 g_nl4 = {
    CISM_DTYPE_NL4, 32, CISM__SCALE_F16, 1.0f, 18,
    {-112, -90, -71, -55, -41, -27, -15, -3, 9, 21, 34, 48, 63, 81, 101, 127}};

/* int4 in small blocks: the q4 levels with a per-16 E4M3 scale times 2^-8. */
static const cism__fmt4 g_q4s = {
    CISM_DTYPE_Q4S, 16, CISM__SCALE_E4M3, 1.0f / 256.0f, 9,
    {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7}};

const cism__fmt4 *cism__fmt4_of(int32_t dtype) {
    switch (dtype) {
    case CISM_DTYPE_Q4: return &g_q4;
    case CISM_DTYPE_FP4: return &g_fp4;
    case CISM_DTYPE_NL4: return &g_nl4;
    case CISM_DTYPE_Q4S: return &g_q4s;
    default: return NULL;
    }
}

/* ---- rounding helpers --------------------------------------------------------------- */
/* Levels sorted, with their codes, and the midpoints between neighbours. */
#define NB 1024 /* buckets of the nearest-level table */

typedef struct sorted4 {
    float lv[16];
    uint8_t code[16];
    float mid[15];
    float lmax, lmin;
    int symmetric;
    int uniform; /* levels -8..7: the nearest index is computed, not searched */
    /* other codebooks: the answer for y in bucket b = (y - lo) * inv_w is at
       least first[b - 1] (buckets are narrower than any gap between midpoints) */
    float lo, inv_w;
    uint8_t first[NB];
} sorted4;

static void sort_levels(const cism__fmt4 *f, sorted4 *s) {
    int i, j;
    for (i = 0; i < 16; i++) { s->lv[i] = (float)f->levels[i]; s->code[i] = (uint8_t)i; }
    for (i = 1; i < 16; i++) /* insertion sort; duplicate levels (fp4's two zeros) keep the lower code */
        for (j = i; j > 0 && s->lv[j] < s->lv[j - 1]; j--) {
            float t = s->lv[j]; uint8_t c = s->code[j];
            s->lv[j] = s->lv[j - 1]; s->code[j] = s->code[j - 1];
            s->lv[j - 1] = t; s->code[j - 1] = c;
        }
    for (i = 0; i < 15; i++) s->mid[i] = 0.5f * (s->lv[i] + s->lv[i + 1]);
    s->lmin = s->lv[0];
    s->lmax = s->lv[15];
    s->symmetric = s->lmin == -s->lmax;
    s->uniform = 1;
    for (i = 0; i < 16; i++)
        if (s->lv[i] != (float)(i - 8)) s->uniform = 0;
    { /* buckets over [mid[0], mid[14]] */
        float w;
        int b, k = 0;
        s->lo = s->mid[0];
        w = (s->mid[14] - s->mid[0]) / (float)(NB - 1);
        s->inv_w = 1.0f / w;
        for (b = 0; b < NB; b++) { /* first index whose midpoint is >= the bucket's start */
            float start = s->lo + w * (float)b;
            while (k < 15 && s->mid[k] < start) k++;
            s->first[b] = (uint8_t)k;
        }
    }
}

/* Index (into the sorted levels) of the level nearest y. */
static inline int nearest(const sorted4 *s, float y) {
    if (s->uniform) { /* the count of midpoints k - 7.5 below y: ceil(y + 7.5) clamped to 0..15 */
        float t = y + 7.5f;
        int i;
        if (!(t > 0.0f)) return 0;
        if (t > 15.0f) return 15;
        i = (int)t;
        return (float)i < t ? i + 1 : i;
    }
    {   /* the count of midpoints below y, starting one bucket early */
        float t = (y - s->lo) * s->inv_w;
        int b, k;
        if (!(t >= 0.0f)) return y > s->mid[0] ? 1 : 0;
        b = t >= (float)(NB - 1) ? NB - 1 : (int)t;
        k = b > 0 ? s->first[b - 1] : 0;
        while (k < 15 && y > s->mid[k]) k++;
        return k;
    }
}

static uint8_t e4m3_encode_abs(float a) { /* nearest non-negative E4M3 code of a >= 0, saturating */
    int lo = 0, hi = 0x7e;
    if (!(a > 0)) return 0;
    if (a >= cism__e4m3_table[0x7e]) return 0x7e;
    while (hi - lo > 1) { /* table[lo] <= a < table[hi] */
        int m = (lo + hi) >> 1;
        if (cism__e4m3_table[m] <= a) lo = m; else hi = m;
    }
    return (uint8_t)(a - cism__e4m3_table[lo] < cism__e4m3_table[hi] - a ? lo : hi);
}

/* Squared error of x against d * levels with nearest rounding; codes out (sorted indices). */
static double assign_error(const sorted4 *s, const float *x, const float *w, int n, float d, int *idx) {
    float inv = d != 0.0f ? 1.0f / d : 0.0f, e4[4] = {0, 0, 0, 0};
    int i;
    if (s->uniform) {
        for (i = 0; i < n; i++) { /* as nearest(): ceil(y + 7.5) clamped to 0..15 */
            float t = x[i] * inv + 7.5f, kf;
            t = t > 0.0f ? t : 0.0f;
            t = t < 15.0f ? t : 15.0f;
            kf = (float)(int)t;
            idx[i] = (int)(kf + (kf < t ? 1.0f : 0.0f));
        }
    } else {
        for (i = 0; i < n; i++) idx[i] = nearest(s, x[i] * inv);
    }
    for (i = 0; i < n; i++) {
        float e = x[i] - d * s->lv[idx[i]];
        e4[i & 3] += (w ? w[i] : 1.0f) * e * e;
    }
    return (double)((e4[0] + e4[2]) + (e4[1] + e4[3]));
}

#define N_FRACS 5 /* coarse candidates per end of the codebook */

/* Scores one candidate (weights onto levels at y = x * inv): keeps the
   least-squares scale of the assignment if it lowers the weighted error.
   Whole blocks (padding has weight 0) so the loops vectorize; four partial
   sums in a fixed order. */
static inline int try_scale(const sorted4 *s, const float *xs, const float *wx, const float *ww, int B, float inv,
                     double *best, float *best_d) {
    float lv[32], a[4] = {0, 0, 0, 0}, b[4] = {0, 0, 0, 0};
    double sxl, sll;
    int i, j, l;
    if (s->uniform) {
        for (i = 0; i < B; i++) { /* nearest of -8..7, ties down: ceil(y + 7.5) - 8, clamped */
            float t = xs[i] * inv + 7.5f, kf;
            t = t > 0.0f ? t : 0.0f;
            t = t < 15.0f ? t : 15.0f;
            kf = (float)(int)t;
            kf += kf < t ? 1.0f : 0.0f;
            lv[i] = kf - 8.0f;
        }
    } else {
        for (i = 0; i < B; i++) lv[i] = s->lv[nearest(s, xs[i] * inv)];
    }
    for (j = 0; j < B; j += 4)
        for (l = 0; l < 4; l++) {
            a[l] += wx[j + l] * lv[j + l];
            b[l] += ww[j + l] * lv[j + l] * lv[j + l];
        }
    sxl = (double)((a[0] + a[2]) + (a[1] + a[3]));
    sll = (double)((b[0] + b[2]) + (b[1] + b[3]));
    if (sll > 0 && sxl * sxl / sll > *best) {
        *best = sxl * sxl / sll;
        *best_d = (float)(sxl / sll);
        return 1;
    }
    return 0;
}

/* The scale of one 4-bit block of n <= block real weights (the rest is
   padding): searched, encoded into out (1 or 2 bytes); returns the encoded
   value (0 for an all-zero block). */
static float block_scale4(const cism__fmt4 *f, const sorted4 *s, const float *x, const float *w, int n, uint8_t *out) {
    float xm = 0.0f, best_d = 0.0f, d_enc;
    double best = -1.0;
    int idx[32], i, c, B = f->block;
    for (i = 0; i < n; i++)
        if (fabsf(x[i]) > fabsf(xm)) xm = x[i];
    if (xm != 0.0f) {
        /* whole blocks (padding: x = 0 with weight 0), so the loops have a fixed
           length the compiler vectorizes; four partial sums in a fixed order */
        float xs[32], wx[32], ww[32], best_f = 1.0f;
        int best_c = -1;
        for (i = 0; i < B; i++) {
            xs[i] = i < n ? x[i] : 0.0f;
            ww[i] = i < n ? (w ? w[i] : 1.0f) : 0.0f;
            wx[i] = ww[i] * xs[i];
        }
        /* coarse: the max onto 0.80, 0.875, ..., 1.10 of either end; then +-0.0375
           around the best */
        /* the block length as a constant in each branch, so the loops unroll and vectorize */
#define TRY(inv_) (B == 16 ? try_scale(s, xs, wx, ww, 16, (inv_), &best, &best_d) \
                           : try_scale(s, xs, wx, ww, 32, (inv_), &best, &best_d))
        for (c = 0; c < N_FRACS * 2; c++) {
            float frac = 0.80f + 0.075f * (float)(c >> 1);
            float tgt = (c & 1) ? s->lmin : s->lmax;
            if ((c & 1) && s->symmetric) continue;
            if (TRY((tgt * frac) / xm)) { best_c = c; best_f = frac; }
        }
        if (best_c >= 0) {
            float tgt = (best_c & 1) ? s->lmin : s->lmax;
            TRY((tgt * (best_f - 0.0375f)) / xm);
            TRY((tgt * (best_f + 0.0375f)) / xm);
        }
#undef TRY
    }
    /* encode the scale */
    if (f->scale_kind == CISM__SCALE_F16) {
        uint16_t h = cism__f32_to_f16(best_d);
        d_enc = cism__f16_to_f32(h);
        out[0] = (uint8_t)(h & 0xff);
        out[1] = (uint8_t)(h >> 8);
    } else {
        uint8_t sign = best_d < 0 ? 0x80 : 0, code = e4m3_encode_abs(fabsf(best_d) / f->scale_mul), best_code = code;
        double best_err = -1;
        int k;
        for (k = -1; k <= 1; k++) {
            int cc = (int)code + k;
            double e;
            if (cc < 0 || cc > 0x7e) continue;
            e = assign_error(s, x, w, n, (sign ? -1.0f : 1.0f) * cism__e4m3_table[cc] * f->scale_mul, idx);
            if (best_err < 0 || e < best_err) { best_err = e; best_code = (uint8_t)cc; }
        }
        out[0] = (uint8_t)(sign | best_code);
        d_enc = cism__fmt4_scale(f, out);
    }
    return d_enc;
}

/* Codes (sorted-level indices) idx[0..block) into the block's code bytes. */
static void pack_codes4(const cism__fmt4 *f, const sorted4 *s, const int *idx, uint8_t *out) {
    uint8_t *q = out + (f->scale_kind == CISM__SCALE_F16 ? 2 : 1);
    int i, half = f->block / 2;
    for (i = 0; i < half; i++) q[i] = (uint8_t)(s->code[idx[i]] | (s->code[idx[i + half]] << 4));
}

/* One 4-bit block: n <= block real weights (the rest is padding), out gets block_bytes. */
static void quantize_block4(const cism__fmt4 *f, const sorted4 *s, const float *x, const float *w, int n, uint8_t *out) {
    int idx[32], i;
    float d_enc = block_scale4(f, s, x, w, n, out);
    assign_error(s, x, w, n, d_enc, idx);
    if (d_enc == 0.0f) /* all-zero block (or underflow): every code the zero-nearest level */
        for (i = 0; i < n; i++) idx[i] = nearest(s, 0.0f);
    for (i = n; i < f->block; i++) idx[i] = nearest(s, 0.0f);
    pack_codes4(f, s, idx, out);
}

static void quantize_block8(const float *x, int n, uint8_t *out) {
    float amax = 0.0f, d, inv;
    uint16_t h;
    int i;
    for (i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
    h = cism__f32_to_f16(amax / 127.0f);
    d = cism__f16_to_f32(h);
    out[0] = (uint8_t)(h & 0xff);
    out[1] = (uint8_t)(h >> 8);
    inv = d > 0.0f ? 1.0f / d : 0.0f;
    for (i = 0; i < CISM__Q8_BLOCK; i++) {
        float v = i < n ? x[i] * inv : 0.0f, a = fabsf(v);
        long r = (long)a; /* round half away from zero, as lroundf */
        if (a - (float)r >= 0.5f) r++;
        if (v < 0) r = -r;
        if (r > 127) r = 127;
        if (r < -127) r = -127;
        out[2 + i] = (uint8_t)(int8_t)r;
    }
}

/* q4a: the code of x nearest to d * c + m (the encoded d, m; ties to the lower code) */
static inline int q4a_code(float x, float d, float m) {
    float t = d > 0.0f ? (x - m) / d : 0.0f;
    int c = t > 0.0f ? (t < 15.0f ? (int)(t + 0.5f) : 15) : 0, k, best = c;
    float be = fabsf(x - (d * (float)c + m));
    for (k = c - 1; k <= c + 1; k += 2) {
        float e;
        if (k < 0 || k > 15) continue;
        e = fabsf(x - (d * (float)k + m));
        if (e < be || (e == be && k < best)) { be = e; best = k; }
    }
    return best;
}

/* Squared error (weighted) of the block with the encoded pair; codes into c */
static float q4a_assign(const float *x, const float *w, int n, float d, float m, int *c) {
    float e4[4] = {0, 0, 0, 0};
    int i;
    for (i = 0; i < n; i++) {
        float e;
        c[i] = q4a_code(x[i], d, m);
        e = x[i] - (d * (float)c[i] + m);
        e4[i & 3] += (w ? w[i] : 1.0f) * e * e;
    }
    return (e4[0] + e4[2]) + (e4[1] + e4[3]);
}

/* One q4a block: n <= 32 real weights (the rest padding: code 0). Candidates:
   the range [lo, hi] of the block spread over codes 0..15, and narrowed to
   0.95 and 0.9 of it (centred); each is refitted by least squares (d, m) on its
   codes, and both the plain and the refitted pair are scored after fp16
   encoding. */
static void quantize_block4a(const float *x, const float *w, int n, uint8_t *out) {
    float lo = x[0], hi = x[0], best_e = -1.0f, best_d = 0.0f, best_m = 0.0f;
    int i, k, c[32], bc[32];
    uint16_t hd, hm;
    for (i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    for (k = 0; k < 6; k++) {
        float f = 1.0f - 0.05f * (float)(k >> 1), d, m, e;
        d = (hi - lo) * f / 15.0f;
        m = lo + (hi - lo) * (1.0f - f) * 0.5f;
        if (k & 1) { /* least squares of x ~ d c + m over the codes of this candidate */
            double sw = 0, sc = 0, scc = 0, sx = 0, scx = 0, det;
            float dq = cism__f16_to_f32(cism__f32_to_f16(d)), mq = cism__f16_to_f32(cism__f32_to_f16(m));
            q4a_assign(x, w, n, dq, mq, c);
            for (i = 0; i < n; i++) {
                double wi = w ? w[i] : 1.0;
                sw += wi; sc += wi * c[i]; scc += wi * c[i] * c[i]; sx += wi * x[i]; scx += wi * c[i] * x[i];
            }
            det = sw * scc - sc * sc;
            if (!(det > 0)) continue;
            d = (float)((sw * scx - sc * sx) / det);
            m = (float)((scc * sx - sc * scx) / det);
            if (!(d >= 0.0f)) continue;
        }
        hd = cism__f32_to_f16(d);
        hm = cism__f32_to_f16(m);
        d = cism__f16_to_f32(hd);
        m = cism__f16_to_f32(hm);
        if (!isfinite(d) || !isfinite(m)) continue;
        e = q4a_assign(x, w, n, d, m, c);
        if (best_e < 0 || e < best_e) {
            best_e = e; best_d = d; best_m = m;
            memcpy(bc, c, sizeof(int) * (size_t)n);
        }
    }
    if (best_e < 0) { /* (not reached for finite input) */
        best_d = 0.0f;
        best_m = cism__f16_to_f32(cism__f32_to_f16(lo));
        for (i = 0; i < n; i++) bc[i] = 0;
    }
    for (i = n; i < 32; i++) bc[i] = 0;
    hd = cism__f32_to_f16(best_d);
    hm = cism__f32_to_f16(best_m);
    out[0] = (uint8_t)(hd & 0xff); out[1] = (uint8_t)(hd >> 8);
    out[2] = (uint8_t)(hm & 0xff); out[3] = (uint8_t)(hm >> 8);
    for (i = 0; i < 16; i++) out[4 + i] = (uint8_t)(bc[i] | (bc[i + 16] << 4));
}

/* ---- q6, q5, q3, q2: uniform integer levels ------------------------------------------------ */
/* The level of y (x / d) nearest among -H..H-1: round half away from zero, clamped. */
static inline float qint_round(float y, float H) {
    float a = fabsf(y), r = (float)(int)(a < 2.0f * H ? a : 2.0f * H);
    if (a - r >= 0.5f) r += 1.0f;
    r = y < 0 ? -r : r;
    return r < -H ? -H : r > H - 1.0f ? H - 1.0f : r;
}

/* Scores one candidate 1 / d = inv: the least-squares scale of its assignment
   if that lowers the weighted error (whole block, padding weight 0; four
   partial sums in a fixed order). */
static inline int qint_try(const float *xs, const float *wx, const float *ww, float H, float inv, double *best,
                           float *best_d) {
    float a[4] = {0, 0, 0, 0}, b[4] = {0, 0, 0, 0};
    double sxl, sll;
    int j, l;
    for (j = 0; j < CISM__QI_BLOCK; j += 4)
        for (l = 0; l < 4; l++) {
            float lv = qint_round(xs[j + l] * inv, H);
            a[l] += wx[j + l] * lv;
            b[l] += ww[j + l] * lv * lv;
        }
    sxl = (double)((a[0] + a[2]) + (a[1] + a[3]));
    sll = (double)((b[0] + b[2]) + (b[1] + b[3]));
    if (sll > 0 && sxl * sxl / sll > *best) {
        *best = sxl * sxl / sll;
        *best_d = (float)(sxl / sll);
        return 1;
    }
    return 0;
}

/* The level of x nearest with scale d (inv = 1 / d) among -Hi..Hi-1 (d 0: level
   0): x * inv may be off by one ulp, so the neighbours are checked with the
   encoded scale itself. */
static inline int qint_nearest(float x, float d, float inv, int Hi) {
    int lv, k;
    if (d == 0.0f) return 0;
    lv = (int)qint_round(x * inv, (float)Hi);
    for (k = lv - 1; k <= lv + 1; k += 2)
        if (k >= -Hi && k < Hi && fabsf(x - d * (float)k) < fabsf(x - d * (float)lv)) lv = k;
    return lv;
}

/* Codes (level + H) of x[0..n) nearest with scale d (padding: level 0) into
   code; returns the weighted squared error, or -1 for a scale that is not
   finite. */
static float qint_assign(const float *x, const float *w, int n, float d, int Hi, int *code) {
    float e4[4] = {0, 0, 0, 0}, inv = d != 0.0f ? 1.0f / d : 0.0f;
    int i;
    if (!isfinite(d)) return -1.0f;
    for (i = 0; i < CISM__QI_BLOCK; i++) {
        int lv = i < n ? qint_nearest(x[i], d, inv, Hi) : 0;
        if (i < n) {
            float e = x[i] - d * (float)lv;
            e4[i & 3] += (w ? w[i] : 1.0f) * e * e;
        }
        code[i] = lv + Hi;
    }
    return (e4[0] + e4[2]) + (e4[1] + e4[3]);
}

#define QI_FRACS 13 /* coarse candidates per end: 0.80 .. 1.10 in steps of 0.025 */

/* The fp16 scale of one q6 / q5 / q3 / q2 block of n <= 32 real weights x (importance
   w, or NULL; the rest padding: level 0), and its codes (level + H) with it. */
static uint16_t qint_block_scale(int32_t dtype, const float *x, const float *w, int n, int *code) {
    const int Hi = cism__qint_half(dtype);
    const float H = (float)Hi;
    float xm = 0.0f, best_d = 0.0f;
    double best = -1.0;
    int i, c;
    uint16_t h;
    for (i = 0; i < n; i++)
        if (fabsf(x[i]) > fabsf(xm)) xm = x[i];
    if (xm != 0.0f) {
        float xs[CISM__QI_BLOCK], wx[CISM__QI_BLOCK], ww[CISM__QI_BLOCK], best_f = 1.0f, best_t = H - 1.0f;
        int found = 0;
        for (i = 0; i < CISM__QI_BLOCK; i++) {
            xs[i] = i < n ? x[i] : 0.0f;
            ww[i] = i < n ? (w ? w[i] : 1.0f) : 0.0f;
            wx[i] = ww[i] * xs[i];
        }
        for (c = 0; c < QI_FRACS * 2; c++) {
            float frac = 0.80f + 0.025f * (float)(c >> 1), tgt = (c & 1) ? -H : H - 1.0f;
            if (qint_try(xs, wx, ww, H, (tgt * frac) / xm, &best, &best_d)) { found = 1; best_f = frac; best_t = tgt; }
        }
        if (found) {
            qint_try(xs, wx, ww, H, (best_t * (best_f - 0.0125f)) / xm, &best, &best_d);
            qint_try(xs, wx, ww, H, (best_t * (best_f + 0.0125f)) / xm, &best, &best_d);
        }
    }
    { /* encoded: the best scale's fp16 code, its two neighbours and the plain
         rule's scale (max-abs onto H - 1), each with nearest codes; the lowest
         weighted error wins (ties: the first) */
        uint16_t cand[4], hb = cism__f32_to_f16(best_d);
        float best_e = -1.0f;
        int k, cc[CISM__QI_BLOCK];
        cand[0] = hb;
        cand[1] = (uint16_t)(hb & 0x7fffu ? hb - 1u : hb);
        cand[2] = (uint16_t)((hb & 0x7fffu) < 0x7bffu ? hb + 1u : hb);
        cand[3] = cism__f32_to_f16(xm / (H - 1.0f));
        h = 0;
        for (k = 0; k < 4; k++) {
            float e = qint_assign(x, w, n, cism__f16_to_f32(cand[k]), Hi, cc);
            if (e >= 0.0f && (best_e < 0.0f || e < best_e)) {
                best_e = e;
                h = cand[k];
                memcpy(code, cc, sizeof(cc));
            }
        }
        if (best_e < 0.0f) /* (not reached: cism_quantize refuses values this large) */
            for (i = 0; i < CISM__QI_BLOCK; i++) code[i] = Hi;
    }
    return h;
}

/* A q6 / q5 / q3 / q2 block's bytes: its fp16 scale h and 32 codes (level + H). */
static void qint_pack(int32_t dtype, uint16_t h, const int *code, uint8_t *out) {
    int i;
    out[0] = (uint8_t)(h & 0xff);
    out[1] = (uint8_t)(h >> 8);
    if (dtype == CISM_DTYPE_Q2) {
        for (i = 0; i < 8; i++)
            out[2 + i] = (uint8_t)(code[i] | (code[i + 8] << 2) | (code[i + 16] << 4) | (code[i + 24] << 6));
    } else if (dtype == CISM_DTYPE_Q3) {
        uint32_t qh = 0;
        for (i = 0; i < CISM__QI_BLOCK; i++) qh |= (uint32_t)(code[i] >> 2) << i;
        for (i = 0; i < 4; i++) out[2 + i] = (uint8_t)(qh >> (8 * i));
        for (i = 0; i < 8; i++)
            out[6 + i] = (uint8_t)((code[i] & 3) | ((code[i + 8] & 3) << 2) | ((code[i + 16] & 3) << 4) | ((code[i + 24] & 3) << 6));
    } else if (dtype == CISM_DTYPE_Q6) {
        for (i = 0; i < 16; i++) out[2 + i] = (uint8_t)((code[i] & 15) | ((code[i + 16] & 15) << 4));
        for (i = 0; i < 8; i++)
            out[18 + i] = (uint8_t)((code[i] >> 4) | ((code[i + 8] >> 4) << 2) | ((code[i + 16] >> 4) << 4) |
                                    ((code[i + 24] >> 4) << 6));
    } else {
        uint32_t qh = 0;
        for (i = 0; i < CISM__QI_BLOCK; i++) qh |= (uint32_t)(code[i] >> 4) << i;
        for (i = 0; i < 4; i++) out[2 + i] = (uint8_t)(qh >> (8 * i));
        for (i = 0; i < 16; i++) out[6 + i] = (uint8_t)((code[i] & 15) | ((code[i + 16] & 15) << 4));
    }
}

/* One q6 / q5 / q3 / q2 block: n <= 32 real weights (the rest padding: level 0). */
static void quantize_block_qint(int32_t dtype, const float *x, const float *w, int n, uint8_t *out) {
    int code[CISM__QI_BLOCK];
    uint16_t h = qint_block_scale(dtype, x, w, n, code);
    qint_pack(dtype, h, code, out);
}

/* ---- rows ------------------------------------------------------------------------------ */
static void quantize_row(int32_t dtype, const sorted4 *s4, const float *x, const float *imp, int64_t cols, uint8_t *out) {
    const cism__fmt4 *f = cism__fmt4_of(dtype);
    int64_t c;
    if (dtype == CISM_DTYPE_F32) { memcpy(out, x, (size_t)cols * 4); return; }
    if (dtype == CISM_DTYPE_F16 || dtype == CISM_DTYPE_BF16) {
        for (c = 0; c < cols; c++) {
            uint16_t h = dtype == CISM_DTYPE_F16 ? cism__f32_to_f16(x[c]) : cism__f32_to_bf16(x[c]);
            out[2 * c] = (uint8_t)(h & 0xff);
            out[2 * c + 1] = (uint8_t)(h >> 8);
        }
        return;
    }
    if (dtype == CISM_DTYPE_Q8) {
        for (c = 0; c < cols; c += CISM__Q8_BLOCK, out += CISM__Q8_BYTES)
            quantize_block8(x + c, (int)(cols - c < CISM__Q8_BLOCK ? cols - c : CISM__Q8_BLOCK), out);
        return;
    }
    if (cism__dtype_is_qint(dtype)) {
        for (c = 0; c < cols; c += CISM__QI_BLOCK, out += cism__qint_bytes(dtype))
            quantize_block_qint(dtype, x + c, imp ? imp + c : NULL, (int)(cols - c < CISM__QI_BLOCK ? cols - c : CISM__QI_BLOCK), out);
        return;
    }
    if (dtype == CISM_DTYPE_Q4A) {
        for (c = 0; c < cols; c += CISM__Q4A_BLOCK, out += CISM__Q4A_BYTES)
            quantize_block4a(x + c, imp ? imp + c : NULL, (int)(cols - c < CISM__Q4A_BLOCK ? cols - c : CISM__Q4A_BLOCK), out);
        return;
    }
    {
        for (c = 0; c < cols; c += f->block, out += f->block_bytes)
            quantize_block4(f, s4, x + c, imp ? imp + c : NULL, (int)(cols - c < f->block ? cols - c : f->block), out);
    }
}

void cism__dequantize_row(int32_t dtype, const uint8_t *row, float *out, int64_t cols) {
    const cism__fmt4 *f = cism__fmt4_of(dtype);
    int64_t c, i;
    if (dtype == CISM_DTYPE_F32) { memcpy(out, row, (size_t)cols * 4); return; }
    if (dtype == CISM_DTYPE_F16 || dtype == CISM_DTYPE_BF16) {
        for (c = 0; c < cols; c++) {
            uint16_t h = (uint16_t)(row[2 * c] | (row[2 * c + 1] << 8));
            out[c] = dtype == CISM_DTYPE_F16 ? cism__f16_to_f32(h) : cism__bf16_to_f32(h);
        }
        return;
    }
    if (dtype == CISM_DTYPE_Q8) {
        for (c = 0; c < cols; c += CISM__Q8_BLOCK, row += CISM__Q8_BYTES) {
            float d = cism__f16_to_f32((uint16_t)(row[0] | (row[1] << 8)));
            for (i = 0; i < CISM__Q8_BLOCK && c + i < cols; i++) out[c + i] = d * (float)(int8_t)row[2 + i];
        }
        return;
    }
    if (cism__dtype_is_qint(dtype)) { /* d * level: exact */
        int32_t lv[CISM__QI_BLOCK];
        for (c = 0; c < cols; c += CISM__QI_BLOCK, row += cism__qint_bytes(dtype)) {
            float d = cism__qint_d(row);
            cism__qint_levels(dtype, row, lv);
            for (i = 0; i < CISM__QI_BLOCK && c + i < cols; i++) out[c + i] = d * (float)lv[i];
        }
        return;
    }
    if (dtype == CISM_DTYPE_Q4A) { /* d * code + m: the product is exact, one rounding */
        for (c = 0; c < cols; c += CISM__Q4A_BLOCK, row += CISM__Q4A_BYTES) {
            float d = cism__q4a_d(row), m = cism__q4a_m(row);
            for (i = 0; i < CISM__Q4A_BLOCK && c + i < cols; i++)
                out[c + i] = d * (float)(i < 16 ? (row[4 + i] & 15) : (row[4 + i - 16] >> 4)) + m;
        }
        return;
    }
    for (c = 0; c < cols; c += f->block, row += f->block_bytes) {
        float d = cism__fmt4_scale(f, row);
        const uint8_t *q = row + (f->scale_kind == CISM__SCALE_F16 ? 2 : 1);
        int half = f->block / 2;
        for (i = 0; i < f->block && c + i < cols; i++) {
            int code = i < half ? (q[i] & 15) : (q[i - half] >> 4);
            out[c + i] = d * (float)f->levels[code];
        }
    }
}

void cism__matrix_row_f32(int32_t dtype, const void *w, uint64_t row_bytes, int64_t cols, int64_t r, float *out) {
    if (cism__dtype_is_x16(dtype)) {
        int32_t base = cism__dtype_base(dtype);
        int64_t B = cism_dtype_block_size(base), b, c;
        uint8_t blk[CISM__Q8_BYTES];
        float tmp[32];
        for (b = 0, c = 0; c < cols; b++, c += B) {
            cism__x16_block(dtype, (const uint8_t *)w, row_bytes, r, b, blk);
            cism__dequantize_row(base, blk, tmp, B);
            memcpy(out + c, tmp, (size_t)(cols - c < B ? cols - c : B) * sizeof(float));
        }
        return;
    }
    cism__dequantize_row(dtype, (const uint8_t *)w + (uint64_t)r * row_bytes, out, cols);
}

/* 16 rows of the base format (row_bytes apart, at plain) -> one interleaved group */
void cism__x16_interleave(int32_t dtype, const uint8_t *plain, uint64_t row_bytes, uint8_t *grp) {
    cism__x16 g = cism__x16_geom(dtype, row_bytes);
    int64_t i, b, c, bb = g.code_bytes + g.scale_bytes;
    for (b = 0; b < g.nb; b++) {
        uint8_t *codes = (uint8_t *)(uintptr_t)cism__x16_codes(&g, grp, b);
        uint8_t *scales = (uint8_t *)(uintptr_t)cism__x16_scales(&g, grp, b);
        for (i = 0; i < CISM__X16; i++) {
            const uint8_t *blk = plain + (uint64_t)i * row_bytes + (uint64_t)(b * bb);
            memcpy(scales + i * g.scale_bytes, blk, (size_t)g.scale_bytes);
            for (c = 0; c < g.code_bytes / 4; c++) memcpy(codes + c * 64 + i * 4, blk + g.scale_bytes + 4 * c, 4);
        }
    }
}

void cism__x16_from_v1(int32_t dtype, uint8_t *grp, uint64_t row_bytes, uint8_t *tmp) {
    cism__x16 g = cism__x16_geom(dtype, row_bytes);
    const uint64_t codes = (uint64_t)CISM__X16 * (uint64_t)g.code_bytes, scales = (uint64_t)CISM__X16 * (uint64_t)g.scale_bytes;
    int64_t b;
    memcpy(tmp, grp, (size_t)(CISM__X16 * row_bytes));
    for (b = 0; b < g.nb; b++) { /* version 1: block b's codes at b * codes, its scales at nb * codes + b * scales */
        memcpy((uint8_t *)(uintptr_t)cism__x16_codes(&g, grp, b), tmp + (uint64_t)b * codes, (size_t)codes);
        memcpy((uint8_t *)(uintptr_t)cism__x16_scales(&g, grp, b), tmp + (uint64_t)g.nb * codes + (uint64_t)b * scales, (size_t)scales);
    }
}

/* ---- the public API -------------------------------------------------------------------------- */
int32_t cism_dtype_block_size(cism_dtype dtype) {
    const cism__fmt4 *f;
    dtype = cism__dtype_base(dtype);
    f = cism__fmt4_of(dtype);
    if (f) return f->block;
    if (dtype == CISM_DTYPE_Q8) return CISM__Q8_BLOCK;
    if (dtype == CISM_DTYPE_Q4A) return CISM__Q4A_BLOCK;
    if (cism__dtype_is_qint(dtype)) return CISM__QI_BLOCK;
    return cism__dtype_is_known(dtype) ? 1 : 0;
}

int64_t cism_dtype_row_bytes(cism_dtype dtype, int64_t cols) {
    if (cols <= 0 || cols > ((int64_t)1 << 40)) return 0;
    return (int64_t)cism__row_bytes(dtype, cols);
}

typedef struct qjob {
    int32_t dtype;
    const float *src, *imp;
    int64_t n_rows, cols;
    uint8_t *dst;
    uint64_t row_bytes;
    sorted4 s4;
} qjob;

static void quantize_worker(void *arg, int ith, int nth) {
    qjob *j = (qjob *)arg;
    int64_t r0, r1, r;
    cism__split(j->n_rows, ith, nth, 1, &r0, &r1);
    for (r = r0; r < r1; r++) quantize_row(j->dtype, &j->s4, j->src + r * j->cols, j->imp, j->cols, j->dst + (uint64_t)r * j->row_bytes);
}

/* The checks cism_quantize and cism_quantize_gram share: arguments, output
   size (*dst_size) and capacity, finite input, fp16 scale range. */
static cism_status check_quantize_args(const char *fn, cism_dtype dtype, const float *src, int64_t n_rows, int64_t cols,
                                       const void *dst, int64_t dst_capacity, int64_t *dst_size, int32_t n_threads) {
    uint64_t row_bytes;
    int64_t need, i;
    if (!cism__dtype_is_known(dtype)) return cism__fail(CISM_ERR_INVALID_ARG, "%s: unknown dtype %d", fn, (int)dtype);
    if (n_rows < 0 || cols <= 0 || (n_rows > 0 && !src) || !dst_size || n_threads < 0)
        return cism__fail(CISM_ERR_INVALID_ARG, "%s: bad argument (rows %lld, cols %lld)", fn, (long long)n_rows, (long long)cols);
    if (cism__dtype_is_x16(dtype) && n_rows % CISM__X16 != 0)
        return cism__fail(CISM_ERR_INVALID_ARG, "%s: %s needs a multiple of %d rows (got %lld)", fn, cism_dtype_name(dtype),
                          CISM__X16, (long long)n_rows);
    row_bytes = cism__row_bytes(dtype, cols);
    if (row_bytes == 0 || (uint64_t)n_rows > (uint64_t)INT64_MAX / row_bytes)
        return cism__fail(CISM_ERR_INVALID_ARG, "%s: %lld x %lld is too large", fn, (long long)n_rows, (long long)cols);
    need = n_rows * (int64_t)row_bytes;
    *dst_size = need;
    if (dst_capacity < need || (need > 0 && !dst))
        return cism__fail(CISM_ERR_BUFFER_SMALL, "%s: the output needs %lld bytes (capacity %lld)", fn,
                          (long long)need, (long long)dst_capacity);
    for (i = 0; i < n_rows * cols; i++)
        if (!isfinite(src[i]))
            return cism__fail(CISM_ERR_INVALID_ARG, "%s: value at row %lld, column %lld is not finite", fn,
                              (long long)(i / cols), (long long)(i % cols));
    if (cism__dtype_base(dtype) == CISM_DTYPE_Q8 || dtype == CISM_DTYPE_Q4) { /* fp16 scales: refuse what would overflow */
        float amax = 0;
        for (i = 0; i < n_rows * cols; i++) if (fabsf(src[i]) > amax) amax = fabsf(src[i]);
        if (amax / (dtype == CISM_DTYPE_Q4 ? 7.0f : 127.0f) > 60000.0f)
            return cism__fail(CISM_ERR_INVALID_ARG, "%s: |value| up to %g is too large for %s's fp16 scales", fn,
                              (double)amax, cism_dtype_name(dtype));
    }
    if (cism__dtype_is_qint(cism__dtype_base(dtype))) { /* fp16 scales, with room for the search's larger candidates */
        float amax = 0;
        for (i = 0; i < n_rows * cols; i++) if (fabsf(src[i]) > amax) amax = fabsf(src[i]);
        if (amax / (float)(cism__qint_half(dtype) - 1) > 48000.0f)
            return cism__fail(CISM_ERR_INVALID_ARG, "%s: |value| up to %g is too large for %s's fp16 scales", fn,
                              (double)amax, cism_dtype_name(dtype));
    }
    if (cism__dtype_base(dtype) == CISM_DTYPE_Q4A) { /* fp16 minimum and scale */
        float amax = 0;
        for (i = 0; i < n_rows * cols; i++) if (fabsf(src[i]) > amax) amax = fabsf(src[i]);
        if (amax > 30000.0f)
            return cism__fail(CISM_ERR_INVALID_ARG, "%s: |value| up to %g is too large for q4a's fp16 scale and minimum", fn,
                              (double)amax);
    }
    return CISM_OK;
}

/* Rows were written in the base format's plain layout: interleave each group
   of CISM__X16 rows in place (a byte permutation). */
static cism_status interleave_groups(const char *fn, cism_dtype dtype, uint8_t *dst, int64_t n_rows, uint64_t row_bytes) {
    uint8_t *tmp;
    int64_t r;
    if (!cism__dtype_is_x16(dtype) || n_rows == 0) return CISM_OK;
    tmp = (uint8_t *)malloc((size_t)(CISM__X16 * row_bytes));
    if (!tmp) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (r = 0; r < n_rows; r += CISM__X16) {
        uint8_t *grp = dst + (uint64_t)r * row_bytes;
        memcpy(tmp, grp, (size_t)(CISM__X16 * row_bytes));
        cism__x16_interleave(dtype, tmp, row_bytes, grp);
    }
    free(tmp);
    return CISM_OK;
}

cism_status cism_quantize(cism_dtype dtype, const float *src, int64_t n_rows, int64_t cols, const float *importance,
                          void *dst, int64_t dst_capacity, int64_t *dst_size, int32_t n_threads) {
    int64_t i;
    qjob job;
    cism_status st;
    cism__clear_error();
    if ((st = check_quantize_args("cism_quantize", dtype, src, n_rows, cols, dst, dst_capacity, dst_size, n_threads))) return st;
    if (importance)
        for (i = 0; i < cols; i++)
            if (!(importance[i] >= 0.0f) || !isfinite(importance[i]))
                return cism__fail(CISM_ERR_INVALID_ARG, "cism_quantize: importance[%lld] is negative or not finite", (long long)i);
    job.dtype = cism__dtype_base(dtype); job.src = src; job.imp = importance; job.n_rows = n_rows; job.cols = cols;
    job.dst = (uint8_t *)dst; job.row_bytes = cism__row_bytes(dtype, cols);
    if (cism__fmt4_of(job.dtype)) sort_levels(cism__fmt4_of(job.dtype), &job.s4);
    if (n_threads == 0) n_threads = 1;
    if (n_threads > 64) n_threads = 64;
    if (n_threads > 1 && n_rows >= 2 * n_threads && n_rows * cols >= 65536) {
        cism__pool *pool = cism__pool_create(n_threads);
        if (!pool) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_quantize: cannot start %d threads", (int)n_threads);
        cism__pool_run(pool, quantize_worker, &job);
        cism__pool_free(pool);
    } else {
        quantize_worker(&job, 0, 1);
    }
    return interleave_groups("cism_quantize", dtype, (uint8_t *)dst, n_rows, job.row_bytes);
}

/* ---- error-compensating rounding from input statistics (GPTQ) ---------------------- */
/* The quantizer of cism_quantize_gram. A row's output error for inputs x is
   (w - q).x; its mean square over the calibration inputs is (w - q)^T H (w - q),
   H = E[x x^T] (here: the blocks of G columns along H's diagonal, so errors are
   compensated within each block of columns). Within a block the columns are
   visited in "act order", largest H diagonal (largest inputs) first, ties by
   column; each weight is rounded (nearest level of its format block's scale)
   and its error is spread over the block's columns not yet visited,
   e_i * U[i][j] / U[i][i] subtracted from w_j, where U is the upper Cholesky
   factor of (H + damp)^-1 in the visiting order: the least-squares update of
   the remaining weights (Frantar et al., GPTQ). A format block's scale is
   searched, as cism_quantize does, on the updated weights when the first of
   its columns is visited, with H's diagonal as column importance (the 4-bit
   formats with levels, and q6 / q5 / q3 / q2 with their uniform levels). Act order
   measured against natural order (stories260K / BabyLlama, 80 windows):
   +3.96% / +1.22% instead of +4.43% / +1.37% (docs/QUANTIZATION.md). */
#define GPTQ_DAMP 0.01 /* times the mean of H's diagonal, added to the diagonal */

/* The lower triangle of l = the Cholesky factor of the symmetric n x n matrix
   whose lower triangle is in a (a == l: in place). 0, or -1 when a is not
   positive definite. */
static int cholesky(const double *a, double *l, int64_t n) {
    int64_t i, j, k;
    for (j = 0; j < n; j++) {
        double d = a[j * n + j];
        for (k = 0; k < j; k++) d -= l[j * n + k] * l[j * n + k];
        if (!(d > 0)) return -1;
        d = sqrt(d);
        l[j * n + j] = d;
        for (i = j + 1; i < n; i++) {
            double v = a[i * n + j];
            for (k = 0; k < j; k++) v -= l[i * n + k] * l[j * n + k];
            l[i * n + j] = v / d;
        }
    }
    return 0;
}

/* h (n x n SPD, row-major, double) -> u (float, upper) with h^-1 = u^T u; h is
   overwritten. 0 on success, -1 when h is not positive definite. */
static int gptq_factor(double *h, int64_t n, double *t, float *u) {
    int64_t i, j, k;
    if (cholesky(h, h, n)) return -1; /* h = L L^T, L in the lower triangle of h */
    /* t = L^-1 (lower) */
    for (j = 0; j < n; j++) {
        for (i = 0; i < j; i++) t[i * n + j] = 0;
        t[j * n + j] = 1.0 / h[j * n + j];
        for (i = j + 1; i < n; i++) {
            double v = 0;
            for (k = j; k < i; k++) v -= h[i * n + k] * t[k * n + j];
            t[i * n + j] = v / h[i * n + i];
        }
    }
    /* h = L^-T L^-1 = H^-1 (lower triangle) */
    for (i = 0; i < n; i++)
        for (j = 0; j <= i; j++) {
            double v = 0;
            for (k = i; k < n; k++) v += t[k * n + i] * t[k * n + j];
            h[i * n + j] = v;
        }
    if (cholesky(h, t, n)) return -1; /* H^-1 = M M^T (M lower, in t); u = M^T */
    for (i = 0; i < n; i++)
        for (j = 0; j < n; j++) u[i * n + j] = j >= i ? (float)t[j * n + i] : 0.0f;
    return 0;
}

typedef struct gjob {
    const cism__fmt4 *f; /* the 4-bit formats' levels; NULL: q6 / q5 / q3 / q2 (dtype) */
    int32_t dtype;
    sorted4 s4;
    const float *src;
    int64_t n_rows, cols, g;
    const float *u;     /* per block of g columns: g x g upper factor */
    const float *imp;   /* H's diagonal */
    const int32_t *perm; /* per block of g columns: the order its columns are rounded in (offsets) */
    uint8_t *dst;
    uint64_t row_bytes;
    float *work;        /* per thread: cols floats */
} gjob;

static void gptq_row(const gjob *j, const float *x, float *w, uint8_t *out) {
    const cism__fmt4 *f = j->f;
    const sorted4 *s = &j->s4;
    int64_t cols = j->cols, g = j->g, c0, a, k;
    const int B = f ? f->block : CISM__QI_BLOCK, bytes = f ? f->block_bytes : cism__qint_bytes(j->dtype);
    const int Hi = f ? 0 : cism__qint_half(j->dtype);
    int idx[4096], qc[CISM__QI_BLOCK];
    float d[4096 / 4];
    uint16_t h[4096 / CISM__QI_BLOCK];
    memcpy(w, x, (size_t)cols * sizeof(float));
    for (c0 = 0; c0 < cols; c0 += g) {
        int64_t n = c0 + g < cols ? g : cols - c0, nfb = (n + B - 1) / B, fb;
        const float *u = j->u + (c0 / g) * g * g;
        const int32_t *perm = j->perm + c0;
        float *wb = w + c0;
        uint8_t *ob = out + (c0 / B) * bytes;
        for (fb = 0; fb < nfb; fb++) d[fb] = NAN; /* a format block's scale: searched when its first column comes */
        for (a = 0; a < n; a++) {
            int64_t c = perm[a];
            const float *ua = u + a * g;
            float e, lv;
            fb = c / B;
            if (isnan(d[fb])) {
                const float *imp = j->imp + c0 + fb * B;
                const int nb = (int)(n - fb * B < B ? n - fb * B : B);
                if (f) {
                    d[fb] = block_scale4(f, s, wb + fb * B, imp, nb, ob + fb * bytes);
                } else {
                    h[fb] = qint_block_scale(j->dtype, wb + fb * B, imp, nb, qc);
                    d[fb] = cism__f16_to_f32(h[fb]);
                }
            }
            if (f) {
                idx[c] = d[fb] != 0.0f ? nearest(s, wb[c] / d[fb]) : nearest(s, 0.0f);
                lv = s->lv[idx[c]];
            } else {
                int q = qint_nearest(wb[c], d[fb], d[fb] != 0.0f ? 1.0f / d[fb] : 0.0f, Hi);
                idx[c] = q + Hi;
                lv = (float)q;
            }
            e = (wb[c] - d[fb] * lv) / ua[a];
            for (k = a + 1; k < n; k++) wb[perm[k]] -= e * ua[k];
        }
        for (k = n; k < nfb * B; k++) idx[k] = f ? nearest(s, 0.0f) : Hi;
        for (fb = 0; fb < nfb; fb++) {
            if (f) pack_codes4(f, s, idx + fb * B, ob + fb * bytes);
            else qint_pack(j->dtype, h[fb], idx + fb * B, ob + fb * bytes);
        }
    }
}

typedef struct { double d; int32_t i; } diag_col;

static int by_diag_desc(const void *pa, const void *pb) { /* larger first, then the lower column: a total order */
    const diag_col *a = (const diag_col *)pa, *b = (const diag_col *)pb;
    if (a->d != b->d) return a->d > b->d ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

static void gptq_worker(void *arg, int ith, int nth) {
    gjob *j = (gjob *)arg;
    int64_t r0, r1, r;
    cism__split(j->n_rows, ith, nth, 1, &r0, &r1);
    for (r = r0; r < r1; r++)
        gptq_row(j, j->src + r * j->cols, j->work + (int64_t)ith * j->cols, j->dst + (uint64_t)r * j->row_bytes);
}

cism_status cism_quantize_gram(cism_dtype dtype, const float *src, int64_t n_rows, int64_t cols, const double *gram,
                               int64_t gram_block, void *dst, int64_t dst_capacity, int64_t *dst_size, int32_t n_threads) {
    const cism__fmt4 *f = cism__fmt4_of(cism__dtype_base(dtype)); /* interleaved: rows of the base format, then permuted */
    const int qint = cism__dtype_is_qint(cism__dtype_base(dtype)), B = f ? f->block : CISM__QI_BLOCK;
    int64_t g = gram_block, nb, k, i, a;
    double mean = 0, damp;
    float *u = NULL, *imp = NULL;
    double *h = NULL, *t = NULL;
    int32_t *perm = NULL;
    diag_col *order = NULL;
    cism_status st;
    gjob job;
    cism__clear_error();
    job.work = NULL;
    if (gram && (f || qint) && (g < B || g > 4096 || g % B))
        return cism__fail(CISM_ERR_INVALID_ARG, "cism_quantize_gram: gram_block %lld is not a multiple of %s's block of %d "
                          "(at most 4096)", (long long)g, cism_dtype_name(dtype), B);
    if (!gram || (!f && !qint)) /* no statistics, or a format without a scale search (q8, q4a, floats): plain rounding */
        return cism_quantize(dtype, src, n_rows, cols, NULL, dst, dst_capacity, dst_size, n_threads);
    if ((st = check_quantize_args("cism_quantize_gram", dtype, src, n_rows, cols, dst, dst_capacity, dst_size, n_threads)))
        return st;
    nb = (cols + g - 1) / g;
    for (k = 0; k < nb * g * g; k++)
        if (!isfinite(gram[k])) return cism__fail(CISM_ERR_INVALID_ARG, "cism_quantize_gram: gram value %lld is not finite", (long long)k);
    for (i = 0; i < cols; i++) {
        double d = gram[(i / g) * g * g + (i % g) * (g + 1)];
        if (d < 0) return cism__fail(CISM_ERR_INVALID_ARG, "cism_quantize_gram: gram's diagonal is negative at column %lld", (long long)i);
        mean += d;
    }
    mean /= (double)cols;
    if (!(mean > 0)) /* inputs all zero: nothing to weigh by */
        return cism_quantize(dtype, src, n_rows, cols, NULL, dst, dst_capacity, dst_size, n_threads);
    if (n_rows == 0) return CISM_OK;
    u = (float *)malloc((size_t)(nb * g * g) * sizeof(float));
    imp = (float *)malloc((size_t)(nb * g) * sizeof(float));
    h = (double *)malloc((size_t)(g * g) * sizeof(double));
    t = (double *)malloc((size_t)(g * g) * sizeof(double));
    perm = (int32_t *)malloc((size_t)(nb * g) * sizeof(int32_t));
    order = (diag_col *)malloc((size_t)g * sizeof(diag_col));
    if (n_threads == 0) n_threads = 1;
    if (n_threads > 64) n_threads = 64;
    if (n_threads > n_rows) n_threads = (int32_t)n_rows;
    job.work = (float *)malloc((size_t)(n_threads * cols) * sizeof(float));
    if (!u || !imp || !h || !t || !perm || !order || !job.work) {
        st = cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_quantize_gram: out of memory for %lld x %lld statistics", (long long)nb, (long long)g);
        goto done;
    }
    for (k = 0; k < nb; k++) {
        int64_t w = cols - k * g < g ? cols - k * g : g; /* columns of this block; the rest is padding */
        int tries;
        const double *gk = gram + k * g * g;
        int32_t *pk = perm + k * g;
        for (a = 0; a < g; a++) imp[k * g + a] = a < w ? (float)gk[a * (g + 1)] : 0.0f;
        /* act order: the columns with the largest inputs first, the padding last */
        for (a = 0; a < w; a++) { order[a].d = gk[a * (g + 1)]; order[a].i = (int32_t)a; }
        qsort(order, (size_t)w, sizeof(diag_col), by_diag_desc);
        for (a = 0; a < g; a++) pk[a] = a < w ? order[a].i : (int32_t)a;
        for (tries = 0, damp = GPTQ_DAMP * mean;; tries++, damp *= 10) {
            for (a = 0; a < g * g; a++) {
                int64_t r = a / g, c = a % g;
                h[a] = r < w && c < w ? gk[pk[r] * g + pk[c]] : 0.0;
                if (r == c) h[a] += r < w ? damp : 1.0;
            }
            if (!gptq_factor(h, g, t, u + k * g * g)) break;
            if (tries == 2) { /* 0.01, 0.1 and 1 times the mean diagonal */
                st = cism__fail(CISM_ERR_INVALID_ARG, "cism_quantize_gram: gram block %lld is not positive semi-definite", (long long)k);
                goto done;
            }
        }
    }
    job.f = f;
    job.dtype = cism__dtype_base(dtype);
    if (f) sort_levels(f, &job.s4);
    job.src = src; job.n_rows = n_rows; job.cols = cols; job.g = g; job.u = u; job.imp = imp; job.perm = perm;
    job.dst = (uint8_t *)dst; job.row_bytes = cism__row_bytes(dtype, cols);
    if (n_threads > 1 && n_rows * cols >= 16384) {
        cism__pool *pool = cism__pool_create(n_threads);
        if (!pool) {
            st = cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_quantize_gram: cannot start %d threads", (int)n_threads);
            goto done;
        }
        cism__pool_run(pool, gptq_worker, &job);
        cism__pool_free(pool);
    } else {
        gptq_worker(&job, 0, 1);
    }
    st = interleave_groups("cism_quantize_gram", dtype, (uint8_t *)dst, n_rows, job.row_bytes);
done:
    free(perm);
    free(order);
    free(u);
    free(imp);
    free(h);
    free(t);
    free(job.work);
    return st;
}

cism_status cism_dequantize(cism_dtype dtype, const void *src, int64_t n_rows, int64_t cols, float *dst) {
    uint64_t row_bytes;
    int64_t r;
    cism__clear_error();
    if (!cism__dtype_is_known(dtype)) return cism__fail(CISM_ERR_INVALID_ARG, "cism_dequantize: unknown dtype %d", (int)dtype);
    row_bytes = cism__row_bytes(dtype, cols);
    if (n_rows < 0 || row_bytes == 0 || (n_rows > 0 && (!src || !dst)))
        return cism__fail(CISM_ERR_INVALID_ARG, "cism_dequantize: bad argument (rows %lld, cols %lld)", (long long)n_rows, (long long)cols);
    if (cism__dtype_is_x16(dtype) && n_rows % CISM__X16 != 0)
        return cism__fail(CISM_ERR_INVALID_ARG, "cism_dequantize: %s needs a multiple of %d rows (got %lld)", cism_dtype_name(dtype),
                          CISM__X16, (long long)n_rows);
    for (r = 0; r < n_rows; r++) cism__matrix_row_f32(dtype, src, row_bytes, cols, r, dst + r * cols);
    return CISM_OK;
}
