/* kv_quant.c - the quantized KV cache's row quantizer and the Walsh-Hadamard
 * rotation (kv_quant.h). Built without FMA contraction with the rest of the
 * baseline library, called by the forward pass for every tier. */
#include "kv_quant.h"

#include <math.h>

static void put_half(uint8_t *p, uint16_t h) {
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* round half away from zero, then clamp to [lo, hi]; v is finite */
static int round_clamp(float v, int lo, int hi) {
    float r = v >= 0.0f ? floorf(v + 0.5f) : -floorf(-v + 0.5f);
    if (r < (float)lo) return lo;
    if (r > (float)hi) return hi;
    return (int)r;
}

static int block_finite(const float *x) {
    int i;
    for (i = 0; i < 32; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

#define HALF_NAN 0x7e00u

/* q8: d = max|x| / 127 rounded to fp16, codes round(x / d) in -127..127 */
static void block_q8(const float *x, uint8_t *out) {
    float amax = 0.0f, d, inv;
    uint16_t h;
    int i;
    memset(out, 0, 34);
    if (!block_finite(x)) { put_half(out, HALF_NAN); return; }
    for (i = 0; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    h = cism__f32_to_f16(amax / 127.0f);
    d = cism__f16_to_f32(h);
    if (!isfinite(d)) { put_half(out, HALF_NAN); return; }
    put_half(out, h);
    if (d == 0.0f) return;
    inv = 1.0f / d;
    for (i = 0; i < 32; i++) out[2 + i] = (uint8_t)(int8_t)round_clamp(x[i] * inv, -127, 127);
}

/* q4a's range search: the block's min and max are each scaled toward zero by
   0, 4, ..., 20% (Q4A_SHRINK steps each), one after the other: first the min
   (the max kept), then the max (with the best min), 11 ranges in all; the
   block is stored with the range of least squared error (values outside it
   clamp to code 0 or 15; ties: the earlier range). docs/KV_CACHE.md: it
   lowers the KLD of 4-bit keys by about a fifth. */
enum { Q4A_SHRINK = 6 };

/* The fp16 d and m of range [lo, hi]; 0 when either is not finite */
static int q4a_params(float lo, float hi, uint16_t *hd, uint16_t *hm, float *d, float *m) {
    *hd = cism__f32_to_f16((hi - lo) / 15.0f);
    *hm = cism__f32_to_f16(lo);
    *d = cism__f16_to_f32(*hd);
    *m = cism__f16_to_f32(*hm);
    return isfinite(*d) && isfinite(*m);
}

/* The squared error of the block stored with d and m: codes as block_q4a
   rounds them (v clamped to [0, 15] first, then truncating v + 1/2: the same
   code), decoded as cism__kv_decode does (d c, then + m). Four partial sums
   (element i into sum i % 4), added in a fixed order: the same value on every
   platform, and a loop compilers vectorize. */
static float q4a_error(const float *x, float d, float m) {
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int i, j;
    for (i = 0; i < 32; i += 4)
        for (j = 0; j < 4; j++) {
            float v = (x[i + j] - m) * inv, y, e;
            v = v < 0.0f ? 0.0f : v > 15.0f ? 15.0f : v;
            y = d * (float)(int)(v + 0.5f);
            y = y + m;
            e = y - x[i + j];
            sum[j] += e * e;
        }
    return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

/* The range being searched: the best so far and its error */
typedef struct q4a_fit {
    uint16_t hd, hm;
    float d, m, err;
} q4a_fit;

/* Tries [lo * (1 - 0.04 a), hi * (1 - 0.04 c)]; 1 when it beats the best so far */
static int q4a_try(const float *x, float lo, float hi, int a, int c, q4a_fit *best) {
    const float l2 = lo * (1.0f - 0.04f * (float)a), h2 = hi * (1.0f - 0.04f * (float)c);
    q4a_fit t;
    if (!(h2 > l2) || !q4a_params(l2, h2, &t.hd, &t.hm, &t.d, &t.m)) return 0;
    t.err = q4a_error(x, t.d, t.m);
    if (!(t.err < best->err)) return 0;
    *best = t;
    return 1;
}

/* Of the codes c0 - 1, c0, c0 + 1 (within 0..15), the one that minimises
   e^2 + (r + u e)^2 for element x (kv_quant.h), r the row's error along the
   direction so far (updated); ties: the lower code. A code c decodes to
   d c + m, rounded as cism__kv_decode does. */
static int q4a_directed_code(float x, float u, int c0, float d, float m, double *r) {
    int c, best = c0;
    double best_cost = 0.0, best_e = 0.0;
    for (c = c0 > 0 ? c0 - 1 : c0; c <= c0 + 1 && c <= 15; c++) {
        float y = d * (float)c;
        double e, along, cost;
        y = y + m;
        e = (double)y - (double)x;
        along = *r + (double)u * e;
        cost = e * e + along * along;
        if (c == (c0 > 0 ? c0 - 1 : c0) || cost < best_cost) {
            best = c;
            best_cost = cost;
            best_e = e;
        }
    }
    *r += (double)u * best_e;
    return best;
}

/* q4a: m and d (both fp16) of the chosen range (the block's [min, max] when
   no other range has a smaller error), codes round((x - m) / d) in 0..15, or
   with a direction u (q4a_directed_code, r carried from block to block) the
   best of that code and its neighbours */
static void block_q4a(const float *x, uint8_t *out, int search, const float *u, double *r) {
    float lo = x[0], hi = x[0], inv;
    q4a_fit f;
    int i, a, best_a = 0, code[32];
    memset(out, 0, 20);
    if (!block_finite(x)) { put_half(out, HALF_NAN); return; }
    for (i = 1; i < 32; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    if (!q4a_params(lo, hi, &f.hd, &f.hm, &f.d, &f.m)) { put_half(out, HALF_NAN); return; }
    if (search) {
        f.err = q4a_error(x, f.d, f.m);
        for (a = 1; a < Q4A_SHRINK; a++)
            if (q4a_try(x, lo, hi, a, 0, &f)) best_a = a;
        for (a = 1; a < Q4A_SHRINK; a++) q4a_try(x, lo, hi, best_a, a, &f);
    }
    put_half(out, f.hd);
    put_half(out + 2, f.hm);
    if (f.d == 0.0f) return;
    inv = 1.0f / f.d;
    for (i = 0; i < 32; i++) {
        code[i] = round_clamp((x[i] - f.m) * inv, 0, 15);
        if (u) code[i] = q4a_directed_code(x[i], u[i], code[i], f.d, f.m, r);
    }
    for (i = 0; i < 16; i++) out[4 + i] = (uint8_t)(code[i] | (code[i + 16] << 4));
}

void cism__kv_quantize_row(int32_t kv_type, const float *x, int64_t n, uint8_t *out, int search, const float *dir) {
    double r = 0.0;
    int64_t b;
    for (b = 0; b + 32 <= n; b += 32) {
        if (kv_type == CISM_DTYPE_Q8) block_q8(x + b, out + b / 32 * 34);
        else block_q4a(x + b, out + b / 32 * 20, search, search && dir ? dir + b : NULL, &r);
    }
}

int64_t cism__kv_hadamard_block(int64_t n) {
    int64_t p = 1;
    while (n % (2 * p) == 0 && 2 * p <= n) p *= 2;
    return p;
}

void cism__kv_hadamard(float *x, int64_t n) {
    const int64_t p = cism__kv_hadamard_block(n);
    const float s = (float)(1.0 / sqrt((double)p));
    int64_t b, h, i, j;
    if (p < 2) return;
    for (b = 0; b < n; b += p) {
        float *v = x + b;
        for (h = 1; h < p; h *= 2)      /* butterflies of span h */
            for (i = 0; i < p; i += 2 * h)
                for (j = i; j < i + h; j++) {
                    float a = v[j], c = v[j + h];
                    v[j] = a + c;
                    v[j + h] = a - c;
                }
        for (i = 0; i < p; i++) v[i] *= s;
    }
}
