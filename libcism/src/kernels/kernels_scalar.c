/* kernels_scalar.c - the scalar reference tier: plain C, no intrinsics.
 * Every other tier is tested against these functions. Dot products keep 8
 * partial sums in a fixed order so the compiler may vectorize them without
 * reassociating (this file is built with -ffp-contract=off). */
#include "kernels.h"
#include "quant.h"
#include "kv_quant.h"

#include <math.h>

#define LANES 8
#define CHUNK 256  /* elements of a converted weight row kept on the stack */

static inline void dot_lanes(float acc[LANES], const float *a, const float *b, int64_t n) {
    int64_t j;
    for (j = 0; j + LANES <= n; j += LANES) {
        int k;
        for (k = 0; k < LANES; k++) acc[k] += a[j + k] * b[j + k];
    }
    for (; j < n; j++) acc[j % LANES] += a[j] * b[j];
}

static inline float lanes_sum(const float acc[LANES]) {
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static float dot_f32(const float *a, const float *b, int64_t n) {
    float acc[LANES] = {0, 0, 0, 0, 0, 0, 0, 0};
    dot_lanes(acc, a, b, n);
    return lanes_sum(acc);
}

/* ---- conversions ------------------------------------------------------------- */
static void row_f32(const void *row, float *out, int64_t n) {
    const float *r = (const float *)row;
    int64_t i;
    for (i = 0; i < n; i++) out[i] = r[i];
}
static void row_f16(const void *row, float *out, int64_t n) {
    const uint16_t *r = (const uint16_t *)row;
    int64_t i;
    for (i = 0; i < n; i++) out[i] = cism__f16_to_f32(r[i]);
}
static void row_bf16(const void *row, float *out, int64_t n) {
    const uint16_t *r = (const uint16_t *)row;
    int64_t i;
    for (i = 0; i < n; i++) out[i] = cism__bf16_to_f32(r[i]);
}

static void f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
    int64_t i;
    for (i = 0; i < n; i++) dst[i] = cism__f32_to_f16(src[i]);
}

/* ---- matmul ------------------------------------------------------------------ */
static void matmul_f32(const void *w, uint64_t row_bytes, int64_t cols, const float *x, int64_t ldx,
                       float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    int64_t r, t;
    for (r = r0; r < r1; r++) {
        const float *wr = (const float *)((const uint8_t *)w + (uint64_t)r * row_bytes);
        for (t = 0; t < nt; t++) y[t * ldy + r] = dot_f32(wr, x + t * ldx, cols);
    }
}

/* Half-precision rows are widened CHUNK elements at a time; the partial sums
   continue across chunks so the order matches matmul_f32. */
static void matmul_half(const void *w, uint64_t row_bytes, int64_t cols, const float *x, int64_t ldx,
                        float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1,
                        void (*widen)(const void *, float *, int64_t)) {
    float buf[CHUNK];
    float acc[4][LANES];
    int64_t r, t0;
    for (r = r0; r < r1; r++) {
        const uint16_t *wr = (const uint16_t *)((const uint8_t *)w + (uint64_t)r * row_bytes);
        for (t0 = 0; t0 < nt; t0 += 4) {
            int64_t tn = nt - t0 < 4 ? nt - t0 : 4, c0, t;
            int k;
            for (t = 0; t < tn; t++)
                for (k = 0; k < LANES; k++) acc[t][k] = 0.0f;
            for (c0 = 0; c0 < cols; c0 += CHUNK) {
                int64_t cn = cols - c0 < CHUNK ? cols - c0 : CHUNK;
                widen(wr + c0, buf, cn);
                for (t = 0; t < tn; t++) dot_lanes(acc[t], buf, x + (t0 + t) * ldx + c0, cn);
            }
            for (t = 0; t < tn; t++) y[(t0 + t) * ldy + r] = lanes_sum(acc[t]);
        }
    }
}

static void matmul_f16(const void *w, uint64_t row_bytes, int64_t cols, const float *x, int64_t ldx,
                       float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    matmul_half(w, row_bytes, cols, x, ldx, y, ldy, nt, r0, r1, row_f16);
}
static void matmul_bf16(const void *w, uint64_t row_bytes, int64_t cols, const float *x, int64_t ldx,
                        float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    matmul_half(w, row_bytes, cols, x, ldx, y, ldy, nt, r0, r1, row_bf16);
}

/* ---- attention ----------------------------------------------------------------- */
/* CHUNK elements from c0 of cache row t (rows in kv_dtype, head_dim wide) as f32 */
static const float *kv_chunk(const void *kv, int32_t kv_dtype, int64_t t, int64_t head_dim, int64_t c0, int64_t cn,
                             float *buf) {
    if (kv_dtype == CISM_DTYPE_F32) return (const float *)kv + t * head_dim + c0;
    if (kv_dtype == CISM_DTYPE_F16) {
        row_f16((const uint16_t *)kv + t * head_dim + c0, buf, cn);
        return buf;
    }
    /* quantized rows: c0 and cn are multiples of 32 (CHUNK is; head_dim is) */
    cism__kv_decode(kv_dtype, (const uint8_t *)kv + (uint64_t)t * cism__kv_row_bytes(kv_dtype, head_dim) +
                                  cism__kv_row_bytes(kv_dtype, c0), buf, cn);
    return buf;
}

/* one query over the n rows of a range: the unnormalised partial result
   (kernels.h); every K/V row is widened CHUNK elements at a time into f32
   (exactly, kv_quant.h) and then used as an f32 row */
static void attention_part_one(const float *q, const void *k, const void *v, int32_t k_dtype, int32_t v_dtype, int64_t n,
                               int64_t head_dim, float scale, float *scores, float *out, float *ml) {
    float buf[CHUNK];
    float mx = -INFINITY, sum = 0.0f;
    int64_t t, i, c0;
    for (i = 0; i < head_dim; i++) out[i] = 0.0f;
    for (t = 0; t < n; t++) {
        float s, acc[LANES] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (c0 = 0; c0 < head_dim; c0 += CHUNK) {
            int64_t cn = head_dim - c0 < CHUNK ? head_dim - c0 : CHUNK;
            dot_lanes(acc, q + c0, kv_chunk(k, k_dtype, t, head_dim, c0, cn, buf), cn);
        }
        s = lanes_sum(acc);
        s *= scale;
        scores[t] = s;
        if (s > mx) mx = s;
    }
    for (t = 0; t < n; t++) {
        scores[t] = expf(scores[t] - mx);
        sum += scores[t];
    }
    for (t = 0; t < n; t++) {
        float p = scores[t];
        for (c0 = 0; c0 < head_dim; c0 += CHUNK) {
            int64_t cn = head_dim - c0 < CHUNK ? head_dim - c0 : CHUNK;
            const float *vr = kv_chunk(v, v_dtype, t, head_dim, c0, cn, buf);
            for (i = 0; i < cn; i++) out[c0 + i] += p * vr[i];
        }
    }
    ml[0] = mx;
    ml[1] = sum;
}

static void attention_split(const float *q, int64_t ldq, float *out, int64_t ldo, float *ml, int64_t ldm, int64_t n_tok,
                            int64_t n_grp, const void *k, const void *v, int32_t k_dtype, int32_t v_dtype, int64_t n_kv,
                            int64_t n_lim, int64_t head_dim, float scale, float *scores, const cism__att_next *next) {
    int64_t a, i;
    (void)next; /* no prefetching here */
    for (a = 0; a < n_tok; a++) {
        int64_t n = n_lim + a < 0 ? 0 : n_lim + a > n_kv ? n_kv : n_lim + a;
        for (i = 0; i < n_grp; i++)
            attention_part_one(q + a * ldq + i * head_dim, k, v, k_dtype, v_dtype, n, head_dim, scale, scores,
                               out + a * ldo + i * head_dim, ml + a * ldm + 2 * i);
    }
}

/* ---- elementwise ---------------------------------------------------------------- */
static void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0.0;
    float scale;
    int64_t i;
    for (i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (i = 0; i < n; i++) out[i] = w[i] * (x[i] * scale);
}

static void silu_mul(float *gate, const float *up, int64_t n) {
    int64_t i;
    for (i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

static void gelu_tanh_mul(float *gate, const float *up, int64_t n) {
    const float c = 0.7978845608028654f; /* sqrt(2 / pi) */
    int64_t i;
    for (i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g))) * up[i];
    }
}

static void rope(float *x, int64_t n_heads, int64_t head_dim, const float *cos_t, const float *sin_t) {
    int64_t h, i, half = head_dim / 2;
    for (h = 0; h < n_heads; h++) {
        float *v = x + h * head_dim;
        for (i = 0; i < half; i++) {
            float a = v[i], b = v[i + half];
            v[i] = a * cos_t[i] - b * sin_t[i];
            v[i + half] = b * cos_t[i] + a * sin_t[i];
        }
    }
}

/* 8 chains of int8 multiply-adds in C, the operands stepped each round */
static int64_t int8_mac_loop(int64_t iters, int32_t *sink) {
    int32_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint8_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int32_t a = (int8_t)(*sink | 1);
    int64_t i;
    int j;
    for (i = 0; i < iters; i++)
        for (j = 0; j < 8; j++) {
            acc[j] += a * (int32_t)(int8_t)x[j];
            x[j] = (uint8_t)(x[j] + 1u);
        }
    for (j = 0; j < 8; j++) *sink += acc[j];
    return iters * 8;
}

/* 8 independent sums, 64-bit loads */
static uint64_t read_sum(const uint64_t *p, int64_t n) {
    uint64_t a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i;
    int j;
    for (i = 0; i + 8 <= n; i += 8)
        for (j = 0; j < 8; j++) a[j] += p[i + j];
    for (j = 1; j < 8; j++) a[0] += a[j];
    return a[0];
}

static const cism__kernels g_scalar = {
    "scalar",
    CISM_TIER_SCALAR,
    {matmul_f32, matmul_f16, matmul_bf16, cism__scalar_matmul_q8, cism__scalar_matmul_q4, cism__scalar_matmul_fp4,
     cism__scalar_matmul_nl4, cism__scalar_matmul_q4s, cism__scalar_matmul_q8x16, cism__scalar_matmul_q4sx16,
     cism__scalar_matmul_q4a, cism__scalar_matmul_q6, cism__scalar_matmul_q5, cism__scalar_matmul_q4ax16,
     cism__scalar_matmul_q6x16, cism__scalar_matmul_q5x16, cism__scalar_matmul_q3,
     cism__scalar_matmul_q3x16, cism__scalar_matmul_q2, cism__scalar_matmul_q2x16},
    {row_f32, row_f16, row_bf16, cism__scalar_row_q8, cism__scalar_row_q4, cism__scalar_row_fp4, cism__scalar_row_nl4,
     cism__scalar_row_q4s, NULL, NULL, cism__scalar_row_q4a, cism__scalar_row_q6, cism__scalar_row_q5, NULL, NULL, NULL,
     cism__scalar_row_q3, NULL, cism__scalar_row_q2, NULL},  /* interleaved rows: cism__matrix_row_f32 */
    rmsnorm,
    silu_mul,
    rope,
    f32_to_f16,
    {NULL, NULL, NULL, cism__scalar_matmul_a8_q8, cism__scalar_matmul_a8_q4, cism__scalar_matmul_a8_fp4,
     cism__scalar_matmul_a8_nl4, cism__scalar_matmul_a8_q4s, cism__scalar_matmul_a8_q8x16, cism__scalar_matmul_a8_q4sx16,
     cism__scalar_matmul_a8_q4a, cism__scalar_matmul_a8_q6, cism__scalar_matmul_a8_q5,
     cism__scalar_matmul_a8_q4ax16, cism__scalar_matmul_a8_q6x16, cism__scalar_matmul_a8_q5x16,
     cism__scalar_matmul_a8_q3, cism__scalar_matmul_a8_q3x16, cism__scalar_matmul_a8_q2,
     cism__scalar_matmul_a8_q2x16},
    cism__quantize_act_scalar,
    gelu_tanh_mul,
    int8_mac_loop,
    NULL, /* outliers_x16: act_outliers.c's C code */
    NULL, /* outliers_q4a: the same */
    cism__act_block_top2_scalar,
    NULL, /* quantize_act_top2: quantize_act and act_block_top2 apart */
    cism__act_block_take_scalar,
    attention_split,
    {NULL}, /* gemv_a8_outliers: the two passes */
    {NULL}, /* matmul_a8_outliers: the same */
    NULL,   /* oplaces_build: none kept */
    read_sum,
};

const cism__kernels *cism__kernels_scalar(void) { return &g_scalar; }
