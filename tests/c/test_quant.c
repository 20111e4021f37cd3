/* test_quant.c - the quantizer (cism_quantize/cism_dequantize): sizes, the
 * rounding rule of every packed format checked element by element, error
 * bounds per block, the scale search against the plain max-abs rule, padding
 * of partial blocks, determinism over thread counts, and refused input. */
#include "cism.h"
#include "kernels/quant.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

static uint32_t rng = 12345u;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffffu) / 8388608.0f - 1.0f;
}
static float grand(void) { /* roughly Gaussian, like trained weights */
    return (frand() + frand() + frand() + frand()) * 0.05f;
}

static const int32_t QDT[] = {CISM_DTYPE_Q8, CISM_DTYPE_Q4, CISM_DTYPE_FP4, CISM_DTYPE_NL4, CISM_DTYPE_Q4S};
#define N_QDT (int)(sizeof(QDT) / sizeof(QDT[0]))

static void test_sizes(void) {
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q8, 32) == 34);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q8, 172) == 6 * 34);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q4, 64) == 36);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_FP4, 172) == 11 * 9);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_NL4, 1) == 18);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q4S, 16) == 9);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_F16, 10) == 20);
    CHECK(cism_dtype_row_bytes(99, 10) == 0 && cism_dtype_row_bytes(CISM_DTYPE_Q8, 0) == 0);
    CHECK(cism_dtype_block_size(CISM_DTYPE_Q8) == 32 && cism_dtype_block_size(CISM_DTYPE_FP4) == 16);
    CHECK(cism_dtype_block_size(CISM_DTYPE_Q4S) == 16 && cism_dtype_block_size(CISM_DTYPE_F32) == 1);
    CHECK(cism_dtype_block_size(99) == 0);
    CHECK(strcmp(cism_dtype_name(CISM_DTYPE_Q4S), "q4s") == 0 && strcmp(cism_dtype_name(CISM_DTYPE_NL4), "nl4") == 0);
    /* bits per weight of full blocks: 8.5 and 4.5 */
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q8, 4096) * 8 == 4096 * 17 / 2);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q4, 4096) * 8 == 4096 * 9 / 2);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_FP4, 4096) * 8 == 4096 * 9 / 2);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q4S, 4096) * 8 == 4096 * 9 / 2);
}

/* The decoded code of element i of a 4-bit block. */
static int code_at(const cism__fmt4 *f, const uint8_t *blk, int i) {
    const uint8_t *q = blk + (f->scale_kind == CISM__SCALE_F16 ? 2 : 1);
    int half = f->block / 2;
    return i < half ? (q[i] & 15) : (q[i - half] >> 4);
}

/* Squared error of one block with a given scale and nearest-level rounding. */
static double sse_at(const cism__fmt4 *f, const float *x, int n, double d) {
    double sse = 0;
    int i, k;
    for (i = 0; i < n; i++) {
        double best = 1e300;
        for (k = 0; k < 16; k++) {
            double e = x[i] - d * f->levels[k];
            if (e * e < best) best = e * e;
        }
        sse += best;
    }
    return sse;
}

static void test_rounding(int32_t dt, int64_t rows, int64_t cols, int gaussian) {
    const cism__fmt4 *f = cism__fmt4_of(dt);
    int64_t rb = cism_dtype_row_bytes(dt, cols), size = 0, r, c0, i;
    int64_t B = cism_dtype_block_size(dt), bb = f ? f->block_bytes : CISM__Q8_BYTES;
    float *x = (float *)malloc((size_t)(rows * cols) * 4), *y = (float *)malloc((size_t)(rows * cols) * 4);
    uint8_t *p = (uint8_t *)malloc((size_t)(rows * rb));
    double sse = 0, sse_naive = 0;
    int bad_code = 0, bad_bound = 0;
    for (i = 0; i < rows * cols; i++) x[i] = gaussian ? grand() : frand();
    if (rows > 2) for (i = 0; i < cols; i++) x[cols + i] = 0.0f; /* an all-zero row */
    CHECK_OK(cism_quantize(dt, x, rows, cols, NULL, p, rows * rb, &size, 1));
    CHECK(size == rows * rb);
    CHECK_OK(cism_dequantize(dt, p, rows, cols, y));
    for (r = 0; r < rows; r++) {
        const uint8_t *row = p + r * rb;
        for (c0 = 0; c0 < cols; c0 += B) {
            const uint8_t *blk = row + (c0 / B) * bb;
            const float *xb = x + r * cols + c0;
            const float *yb = y + r * cols + c0;
            int n = (int)(cols - c0 < B ? cols - c0 : B), j;
            float amax = 0;
            for (j = 0; j < n; j++) if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]);
            if (!f) { /* q8: |error| <= half a step of the stored scale */
                double d = cism__f16_to_f32((uint16_t)(blk[0] | (blk[1] << 8)));
                if (fabs(d - amax / 127.0) > amax / 127.0 * 1e-3 + 1e-30) bad_bound++;
                for (j = 0; j < n; j++) {
                    if (fabs((double)xb[j] - yb[j]) > 0.5 * d * 1.002 + 1e-30) bad_bound++;
                    sse += ((double)xb[j] - yb[j]) * ((double)xb[j] - yb[j]);
                }
                for (j = n; j < B; j++) if (blk[2 + j] != 0) bad_code++; /* padding is zero */
                continue;
            }
            {
                double d = cism__fmt4_scale(f, blk), naive_d, s = 0;
                float xm = 0;
                int lmax = -128, lmin = 127, k;
                /* every code is the nearest level to x / d (ties may go either way) */
                for (j = 0; j < n; j++) {
                    double got = fabs(xb[j] - d * f->levels[code_at(f, blk, j)]);
                    for (k = 0; k < 16; k++)
                        if (fabs(xb[j] - d * f->levels[k]) < got - 1e-7 * fabs(xb[j]) - 1e-12) { bad_code++; break; }
                    s += ((double)xb[j] - yb[j]) * ((double)xb[j] - yb[j]);
                    if (fabsf(xb[j]) > fabsf(xm)) xm = xb[j];
                }
                /* bound: RMS error per block below a fifth of the block's max-abs */
                if (sqrt(s / n) > 0.2 * amax + 1e-12) bad_bound++;
                sse += s;
                /* the plain rule: the max-abs element onto the largest level, scale rounded like the format's */
                for (k = 0; k < 16; k++) { if (f->levels[k] > lmax) lmax = f->levels[k]; if (f->levels[k] < lmin) lmin = f->levels[k]; }
                /* Q4_0's rule for asymmetric codebooks: the signed max onto the longer end */
                naive_d = -lmin > lmax ? xm / (double)lmin : xm / (double)lmax;
                if (f->scale_kind == CISM__SCALE_F16) {
                    naive_d = cism__f16_to_f32(cism__f32_to_f16((float)naive_d));
                } else { /* nearest E4M3 scale */
                    double a = fabs(naive_d) / f->scale_mul, bestv = 0;
                    for (k = 0; k < 0x7f; k++)
                        if (fabs(cism__e4m3_table[k] - a) < fabs(bestv - a)) bestv = cism__e4m3_table[k];
                    naive_d = (naive_d < 0 ? -1 : 1) * bestv * f->scale_mul;
                }
                sse_naive += sse_at(f, xb, n, naive_d);
            }
        }
    }
    CHECK_MSG(bad_code == 0, "%s %lldx%lld: %d elements not rounded to the nearest level", cism_dtype_name(dt),
              (long long)rows, (long long)cols, bad_code);
    CHECK_MSG(bad_bound == 0, "%s %lldx%lld: %d bound violations", cism_dtype_name(dt), (long long)rows, (long long)cols, bad_bound);
    if (f && rows * cols >= 1024) /* the scale search must beat the plain max-abs rule overall */
        CHECK_MSG(sse < sse_naive, "%s: search %g vs plain rule %g", cism_dtype_name(dt), sse, sse_naive);
    free(x); free(y); free(p);
}

static void test_threads_and_importance(int32_t dt) {
    int64_t rows = 67, cols = 200, rb = cism_dtype_row_bytes(dt, cols), size, i;
    float *x = (float *)malloc((size_t)(rows * cols) * 4), imp[200];
    uint8_t *a = (uint8_t *)malloc((size_t)(rows * rb)), *b = (uint8_t *)malloc((size_t)(rows * rb));
    for (i = 0; i < rows * cols; i++) x[i] = grand();
    for (i = 0; i < cols; i++) imp[i] = (float)(i % 7) + 0.5f;
    CHECK_OK(cism_quantize(dt, x, rows, cols, NULL, a, rows * rb, &size, 1));
    CHECK_OK(cism_quantize(dt, x, rows, cols, NULL, b, rows * rb, &size, 3));
    CHECK(memcmp(a, b, (size_t)(rows * rb)) == 0);
    if (dt != CISM_DTYPE_Q8) { /* weighted error: the importance-aware result is no worse under its own weights */
        float *ya = (float *)malloc((size_t)(rows * cols) * 4), *yb = (float *)malloc((size_t)(rows * cols) * 4);
        double ea = 0, eb = 0;
        CHECK_OK(cism_quantize(dt, x, rows, cols, imp, b, rows * rb, &size, 2));
        CHECK_OK(cism_dequantize(dt, a, rows, cols, ya));
        CHECK_OK(cism_dequantize(dt, b, rows, cols, yb));
        for (i = 0; i < rows * cols; i++) {
            double w = imp[i % cols];
            ea += w * (x[i] - ya[i]) * (x[i] - ya[i]);
            eb += w * (x[i] - yb[i]) * (x[i] - yb[i]);
        }
        CHECK_MSG(eb <= ea, "%s: importance-weighted error %g > unweighted %g", cism_dtype_name(dt), eb, ea);
        free(ya); free(yb);
    }
    free(x); free(a); free(b);
}

/* q4a: sizes; every code the nearest of d * c + m with the stored d, m;
   padding codes 0; per block no worse than the plain rule (d = (max - min) / 15,
   m = min, both fp16) and better overall; thread counts give the same bytes. */
static int q4a_code_at(const uint8_t *blk, int i) { return i < 16 ? (blk[4 + i] & 15) : (blk[4 + i - 16] >> 4); }

static void test_q4a_rounding(int64_t rows, int64_t cols, int gaussian) {
    const int64_t rb = cism_dtype_row_bytes(CISM_DTYPE_Q4A, cols);
    float *x = (float *)malloc((size_t)(rows * cols) * 4), *y = (float *)malloc((size_t)(rows * cols) * 4);
    uint8_t *p = (uint8_t *)malloc((size_t)(rows * rb)), *p3 = (uint8_t *)malloc((size_t)(rows * rb));
    int64_t size = 0, r, c0, i;
    double sse = 0, sse_plain = 0;
    int bad_code = 0, bad_pad = 0, worse = 0;
    for (i = 0; i < rows * cols; i++) x[i] = gaussian ? grand() + 0.02f : frand();
    if (rows > 2) for (i = 0; i < cols; i++) x[cols + i] = 0.25f; /* a constant row */
    CHECK_OK(cism_quantize(CISM_DTYPE_Q4A, x, rows, cols, NULL, p, rows * rb, &size, 1));
    CHECK(size == rows * rb);
    CHECK_OK(cism_quantize(CISM_DTYPE_Q4A, x, rows, cols, NULL, p3, rows * rb, &size, 3));
    CHECK(memcmp(p, p3, (size_t)(rows * rb)) == 0);
    CHECK_OK(cism_dequantize(CISM_DTYPE_Q4A, p, rows, cols, y));
    for (r = 0; r < rows; r++)
        for (c0 = 0; c0 < cols; c0 += 32) {
            const uint8_t *blk = p + r * rb + (c0 / 32) * 20;
            const float *xb = x + r * cols + c0, *yb = y + r * cols + c0;
            const float d = cism__q4a_d(blk), m = cism__q4a_m(blk);
            int n = (int)(cols - c0 < 32 ? cols - c0 : 32), j, k;
            float lo = xb[0], hi = xb[0], d0, m0;
            double s = 0, s0 = 0;
            for (j = 0; j < n; j++) {
                double got = fabs((double)xb[j] - (double)(d * (float)q4a_code_at(blk, j) + m));
                for (k = 0; k < 16; k++)
                    if (fabs((double)xb[j] - (double)(d * (float)k + m)) < got) { bad_code++; break; }
                if (yb[j] != d * (float)q4a_code_at(blk, j) + m) bad_code++;
                s += ((double)xb[j] - yb[j]) * ((double)xb[j] - yb[j]);
                if (xb[j] < lo) lo = xb[j];
                if (xb[j] > hi) hi = xb[j];
            }
            for (j = n; j < 32; j++) if (q4a_code_at(blk, j) != 0) bad_pad++;
            d0 = cism__f16_to_f32(cism__f32_to_f16((hi - lo) / 15.0f));
            m0 = cism__f16_to_f32(cism__f32_to_f16(lo));
            for (j = 0; j < n; j++) {
                double best = 1e300;
                for (k = 0; k < 16; k++) {
                    double e = (double)xb[j] - (double)(d0 * (float)k + m0);
                    if (e * e < best) best = e * e;
                }
                s0 += best;
            }
            if (s > s0 * (1 + 1e-5) + 1e-20) worse++;
            sse += s;
            sse_plain += s0;
        }
    CHECK_MSG(bad_code == 0, "q4a %lldx%lld: %d elements not the nearest of d * c + m", (long long)rows, (long long)cols, bad_code);
    CHECK_MSG(bad_pad == 0, "q4a %lldx%lld: %d padding codes not 0", (long long)rows, (long long)cols, bad_pad);
    CHECK_MSG(worse == 0, "q4a %lldx%lld: %d blocks worse than the plain min/max rule", (long long)rows, (long long)cols, worse);
    if (rows * cols >= 1024)
        CHECK_MSG(sse < sse_plain, "q4a %lldx%lld: search %g vs plain rule %g", (long long)rows, (long long)cols, sse, sse_plain);
    if (rows > 2 && cols >= 1) CHECK(y[cols] == 0.25f); /* a constant block is exact (0.25 is an fp16) */
    free(x); free(y); free(p); free(p3);
}

/* Hand-built q4a blocks (GGUF Q4_1's bytes): every element decodes to
   f32(d) * code + f32(m), bit for bit, for scales and minimums of either
   sign, zero, subnormal and large, every code, rows with a padded last block. */
static void test_q4a_decode(void) {
    static const uint16_t hs[] = {0x3c00, 0xbc00, 0x0000, 0x8000, 0x0001, 0x03ff, 0x7bff, 0xfbff, 0x2e66, 0xb4cd, 0x1400, 0x5640};
    enum { COLS = 77, NB = 3 };
    uint8_t row[NB * 20];
    float out[COLS];
    int a, b, i, bad = 0;
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q4A, 32) == 20 && cism_dtype_row_bytes(CISM_DTYPE_Q4A, 33) == 40);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q4A, 4096) * 8 == 4096 * 5); /* 5.0 bits per weight */
    CHECK(cism_dtype_block_size(CISM_DTYPE_Q4A) == 32 && strcmp(cism_dtype_name(CISM_DTYPE_Q4A), "q4a") == 0);
    for (a = 0; a < (int)(sizeof(hs) / sizeof(hs[0])); a++)
        for (b = 0; b < (int)(sizeof(hs) / sizeof(hs[0])); b++) {
            int k;
            for (k = 0; k < NB; k++) {
                uint8_t *blk = row + 20 * k;
                uint16_t hd = hs[(a + k) % 12], hm = hs[(b + 2 * k) % 12];
                blk[0] = (uint8_t)(hd & 0xff); blk[1] = (uint8_t)(hd >> 8);
                blk[2] = (uint8_t)(hm & 0xff); blk[3] = (uint8_t)(hm >> 8);
                for (i = 0; i < 16; i++) blk[4 + i] = (uint8_t)(((i + a + k) & 15) | (((i * 7 + b) & 15) << 4));
            }
            CHECK_OK(cism_dequantize(CISM_DTYPE_Q4A, row, 1, COLS, out));
            for (i = 0; i < COLS; i++) {
                const uint8_t *blk = row + 20 * (i / 32);
                int j = i % 32, code = j < 16 ? (blk[4 + j] & 15) : (blk[4 + j - 16] >> 4);
                float want = cism__f16_to_f32((uint16_t)(blk[0] | (blk[1] << 8))) * (float)code +
                             cism__f16_to_f32((uint16_t)(blk[2] | (blk[3] << 8)));
                if (memcmp(&want, &out[i], 4) != 0) bad++;
            }
        }
    CHECK_MSG(bad == 0, "q4a: %d decoded elements differ from d * code + m", bad);
}

static void test_refusals(void) {
    float x[64];
    uint8_t out[256];
    int64_t size = -1;
    int i;
    for (i = 0; i < 64; i++) x[i] = frand();
    CHECK(cism_quantize(CISM_DTYPE_Q4, x, 2, 32, NULL, out, 10, &size, 1) == CISM_ERR_BUFFER_SMALL && size == 36);
    CHECK(cism_quantize(CISM_DTYPE_Q4, x, 2, 32, NULL, NULL, 0, &size, 1) == CISM_ERR_BUFFER_SMALL && size == 36);
    CHECK(strstr(cism_last_error(), "36") != NULL);
    CHECK(cism_quantize(42, x, 2, 32, NULL, out, 256, &size, 1) == CISM_ERR_INVALID_ARG);
    CHECK(cism_quantize(CISM_DTYPE_Q8, x, 2, 0, NULL, out, 256, &size, 1) == CISM_ERR_INVALID_ARG);
    x[40] = NAN;
    CHECK(cism_quantize(CISM_DTYPE_Q8, x, 2, 32, NULL, out, 256, &size, 1) == CISM_ERR_INVALID_ARG);
    CHECK(strstr(cism_last_error(), "row 1, column 8") != NULL);
    x[40] = 1e30f;
    CHECK(cism_quantize(CISM_DTYPE_Q8, x, 2, 32, NULL, out, 256, &size, 1) == CISM_ERR_INVALID_ARG);
    x[40] = 40000.0f; /* beyond q4a's fp16 minimum */
    CHECK(cism_quantize(CISM_DTYPE_Q4A, x, 2, 32, NULL, out, 256, &size, 1) == CISM_ERR_INVALID_ARG);
    x[40] = 0.5f;
    {
        float imp[32];
        for (i = 0; i < 32; i++) imp[i] = 1.0f;
        imp[3] = -1.0f;
        CHECK(cism_quantize(CISM_DTYPE_Q4S, x, 2, 32, imp, out, 256, &size, 1) == CISM_ERR_INVALID_ARG);
    }
    CHECK(cism_dequantize(42, out, 1, 32, x) == CISM_ERR_INVALID_ARG);
    /* fp16/bf16/f32 through the same entry point */
    CHECK_OK(cism_quantize(CISM_DTYPE_F16, x, 2, 32, NULL, out, 256, &size, 1));
    CHECK(size == 128);
}

int main(void) {
    int64_t shapes[][2] = {{1, 1}, {3, 7}, {5, 16}, {4, 33}, {64, 172}, {17, 300}, {8, 1024}};
    int d;
    size_t s;
    test_sizes();
    for (d = 0; d < N_QDT; d++) {
        for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            test_rounding(QDT[d], shapes[s][0], shapes[s][1], 0);
            test_rounding(QDT[d], shapes[s][0], shapes[s][1], 1);
        }
        test_threads_and_importance(QDT[d]);
    }
    for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        test_q4a_rounding(shapes[s][0], shapes[s][1], 0);
        test_q4a_rounding(shapes[s][0], shapes[s][1], 1);
    }
    test_threads_and_importance(CISM_DTYPE_Q4A);
    test_q4a_decode();
    test_refusals();
    return test_finish("test_quant");
}
