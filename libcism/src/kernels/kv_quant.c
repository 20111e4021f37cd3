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

/* q4a: m = min x, d = (max - min) / 15, both fp16; codes round((x - m) / d) in 0..15 */
static void block_q4a(const float *x, uint8_t *out) {
    float lo = x[0], hi = x[0], d, m, inv;
    uint16_t hd, hm;
    int i;
    memset(out, 0, 20);
    if (!block_finite(x)) { put_half(out, HALF_NAN); return; }
    for (i = 1; i < 32; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    hd = cism__f32_to_f16((hi - lo) / 15.0f);
    hm = cism__f32_to_f16(lo);
    d = cism__f16_to_f32(hd);
    m = cism__f16_to_f32(hm);
    if (!isfinite(d) || !isfinite(m)) { put_half(out, HALF_NAN); return; }
    put_half(out, hd);
    put_half(out + 2, hm);
    if (d == 0.0f) return;
    inv = 1.0f / d;
    for (i = 0; i < 16; i++) {
        int a = round_clamp((x[i] - m) * inv, 0, 15), b = round_clamp((x[i + 16] - m) * inv, 0, 15);
        out[4 + i] = (uint8_t)(a | (b << 4));
    }
}

void cism__kv_quantize_row(int32_t kv_type, const float *x, int64_t n, uint8_t *out) {
    int64_t b;
    for (b = 0; b + 32 <= n; b += 32) {
        if (kv_type == CISM_DTYPE_Q8) block_q8(x + b, out + b / 32 * 34);
        else block_q4a(x + b, out + b / 32 * 20);
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
