/* test_quant_int.c - the q6, q5 and q3 formats (uniform integer levels -H..H-1 in
 * blocks of 32 with an fp16 scale): sizes and names; decoding of hand-built
 * blocks against the layouts written out here independently (q5: GGUF Q5_0's
 * definition); the rounding rule element by element (every code the nearest
 * level with the stored scale), error bounds per block, the scale search
 * against the plain max-abs rule, padding of partial blocks; thread counts;
 * importance weights; the Gram entry point; refused input. */
#include "cism.h"
#include "kernels/quant.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

static uint32_t rng = 4242u;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffffu) / 8388608.0f - 1.0f;
}
static float grand(void) { return (frand() + frand() + frand() + frand()) * 0.05f; }
static uint32_t urand(void) { rng = rng * 1664525u + 1013904223u; return rng >> 8; }

static const int32_t DT[] = {CISM_DTYPE_Q6, CISM_DTYPE_Q5, CISM_DTYPE_Q3, CISM_DTYPE_Q2};
#define N_DT 4

static int half_of(int32_t dt) { return dt == CISM_DTYPE_Q6 ? 32 : dt == CISM_DTYPE_Q5 ? 16 : dt == CISM_DTYPE_Q3 ? 4 : 2; }
static int64_t bytes_of(int32_t dt) { return dt == CISM_DTYPE_Q6 ? 26 : dt == CISM_DTYPE_Q5 ? 22 : dt == CISM_DTYPE_Q3 ? 14 : 10; }

/* The 32 values of a block, from the layout as documented (not quant.h's helpers). */
static void ref_decode(int32_t dt, const uint8_t *b, float *out) {
    float d = cism__f16_to_f32((uint16_t)(b[0] | (b[1] << 8)));
    int j;
    if (dt == CISM_DTYPE_Q5) { /* ggml's dequantize_row_q5_0 */
        uint32_t qh = (uint32_t)b[2] | ((uint32_t)b[3] << 8) | ((uint32_t)b[4] << 16) | ((uint32_t)b[5] << 24);
        for (j = 0; j < 16; j++) {
            int x0 = (int)(((b[6 + j] & 0x0f) | (((qh >> j) << 4) & 0x10))) - 16;
            int x1 = (int)(((b[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10))) - 16;
            out[j] = d * (float)x0;
            out[j + 16] = d * (float)x1;
        }
        return;
    }
    if (dt == CISM_DTYPE_Q3) { /* bit 2 of code j: bit j of the uint32 at 2; bits 0-1: plane byte j % 8, bits 2 (j / 8) */
        uint32_t qh = (uint32_t)b[2] | ((uint32_t)b[3] << 8) | ((uint32_t)b[4] << 16) | ((uint32_t)b[5] << 24);
        for (j = 0; j < 32; j++) {
            int lo = (b[6 + j % 8] >> (2 * (j / 8))) & 3, hi = (int)((qh >> j) & 1u);
            out[j] = d * (float)(lo + 4 * hi - 4);
        }
        return;
    }
    if (dt == CISM_DTYPE_Q2) { /* code j: plane byte 2 + j % 8, bits 2 (j / 8) */
        for (j = 0; j < 32; j++) out[j] = d * (float)(((b[2 + j % 8] >> (2 * (j / 8))) & 3) - 2);
        return;
    }
    for (j = 0; j < 32; j++) { /* q6: nibble bytes 2..17, 2-bit plane bytes 18..25 */
        int lo = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
        int hi = (b[18 + j % 8] >> (2 * (j / 8))) & 3;
        out[j] = d * (float)(lo + 16 * hi - 32);
    }
}

static void test_sizes_and_decode(void) {
    int d;
    CHECK(strcmp(cism_dtype_name(CISM_DTYPE_Q6), "q6") == 0 && strcmp(cism_dtype_name(CISM_DTYPE_Q5), "q5") == 0);
    CHECK(strcmp(cism_dtype_name(CISM_DTYPE_Q4AX16), "q4ax16") == 0 && strcmp(cism_dtype_name(CISM_DTYPE_Q6X16), "q6x16") == 0);
    CHECK(strcmp(cism_dtype_name(CISM_DTYPE_Q5X16), "q5x16") == 0 && strcmp(cism_dtype_name(CISM_DTYPE_Q3), "q3") == 0);
    CHECK(strcmp(cism_dtype_name(CISM_DTYPE_Q3X16), "q3x16") == 0 && strcmp(cism_dtype_name(CISM_DTYPE_Q2), "q2") == 0);
    CHECK(strcmp(cism_dtype_name(CISM_DTYPE_Q2X16), "q2x16") == 0 && cism_dtype_name(CISM_DTYPE_Q2X16 + 1) == NULL);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q2X16, 576) == cism_dtype_row_bytes(CISM_DTYPE_Q2, 576));
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q2, 32) == 10 && cism_dtype_row_bytes(CISM_DTYPE_Q2, 33) == 20);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q2, 4096) * 8 == 4096 * 5 / 2); /* 2.5 bits per weight */
    CHECK(cism_dtype_block_size(CISM_DTYPE_Q2) == 32);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q3X16, 576) == cism_dtype_row_bytes(CISM_DTYPE_Q3, 576));
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q3, 32) == 14 && cism_dtype_row_bytes(CISM_DTYPE_Q3, 33) == 28);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q3, 4096) * 8 == 4096 * 7 / 2); /* 3.5 bits per weight */
    CHECK(cism_dtype_block_size(CISM_DTYPE_Q3) == 32);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q6, 32) == 26 && cism_dtype_row_bytes(CISM_DTYPE_Q6, 33) == 52);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q5, 1) == 22 && cism_dtype_row_bytes(CISM_DTYPE_Q5, 576) == 18 * 22);
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q6, 4096) * 8 == 4096 * 13 / 2); /* 6.5 bits per weight */
    CHECK(cism_dtype_row_bytes(CISM_DTYPE_Q5, 4096) * 8 == 4096 * 11 / 2); /* 5.5 */
    CHECK(cism_dtype_block_size(CISM_DTYPE_Q6) == 32 && cism_dtype_block_size(CISM_DTYPE_Q5) == 32);
    for (d = 0; d < N_DT; d++) { /* random bytes (every code), decoded rows of 3 blocks, the last one partial */
        const int32_t dt = DT[d];
        enum { COLS = 80 };
        uint8_t row[3 * 26];
        float out[COLS], ref[96];
        int t, j, bad = 0;
        for (t = 0; t < 200; t++) {
            int64_t b;
            for (j = 0; j < (int)(3 * bytes_of(dt)); j++) row[j] = (uint8_t)urand();
            for (b = 0; b < 3; b++) { /* finite scales, some zero, some subnormal */
                float s = ldexpf(1.0f + (float)(urand() % 1000) / 1000.0f, -20 + (int)(urand() % 24)) * (urand() & 1 ? -1.0f : 1.0f);
                uint16_t h = t % 17 == 3 ? 0 : cism__f32_to_f16(s);
                row[b * bytes_of(dt)] = (uint8_t)(h & 0xff);
                row[b * bytes_of(dt) + 1] = (uint8_t)(h >> 8);
                ref_decode(dt, row + b * bytes_of(dt), ref + 32 * b);
            }
            CHECK_OK(cism_dequantize(dt, row, 1, COLS, out));
            for (j = 0; j < COLS; j++)
                if (memcmp(&out[j], &ref[j], 4) != 0) bad++;
            for (j = 0; j < 32; j++) /* the header helper the kernels use */
                if (cism__qint_level(dt, row, j) * cism__qint_d(row) != ref[j]) bad++;
        }
        CHECK_MSG(bad == 0, "%s: %d decoded elements differ from the documented layout", cism_dtype_name(dt), bad);
    }
}

/* Every code the nearest level of x with the stored scale; padding level 0;
   per-block error within half a step where nothing is clamped; the searched
   scale no worse than the plain rule (max-abs onto H - 1, fp16) per block
   beyond float noise, and better in total; the same bytes on 3 threads. */
static void test_rounding(int32_t dt, int64_t rows, int64_t cols, int gaussian) {
    const int H = half_of(dt);
    const int64_t rb = cism_dtype_row_bytes(dt, cols), bb = bytes_of(dt);
    float *x = (float *)malloc((size_t)(rows * cols) * 4), *y = (float *)malloc((size_t)(rows * cols) * 4);
    uint8_t *p = (uint8_t *)malloc((size_t)(rows * rb)), *p3 = (uint8_t *)malloc((size_t)(rows * rb));
    int64_t size = 0, r, c0, i;
    double sse = 0, sse_plain = 0;
    int bad_code = 0, bad_pad = 0, worse = 0, bad_bound = 0;
    for (i = 0; i < rows * cols; i++) x[i] = gaussian ? grand() : frand();
    if (rows > 2) for (i = 0; i < cols; i++) x[cols + i] = 0.0f; /* an all-zero row */
    if (rows * cols > 40) x[17] = 0.9f; /* an outlier */
    CHECK_OK(cism_quantize(dt, x, rows, cols, NULL, p, rows * rb, &size, 1));
    CHECK(size == rows * rb);
    CHECK_OK(cism_quantize(dt, x, rows, cols, NULL, p3, rows * rb, &size, 3));
    CHECK(memcmp(p, p3, (size_t)(rows * rb)) == 0);
    CHECK_OK(cism_dequantize(dt, p, rows, cols, y));
    for (r = 0; r < rows; r++)
        for (c0 = 0; c0 < cols; c0 += 32) {
            const uint8_t *blk = p + r * rb + (c0 / 32) * bb;
            const float *xb = x + r * cols + c0, *yb = y + r * cols + c0;
            const int n = (int)(cols - c0 < 32 ? cols - c0 : 32);
            const double d = cism__qint_d(blk);
            float amax = 0;
            double s = 0, sp = 0, dp;
            int j, k, clamped = 0;
            for (j = 0; j < n; j++) if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]);
            for (j = 0; j < n; j++) {
                const int lv = cism__qint_level(dt, blk, j);
                const double got = fabs(xb[j] - d * lv);
                for (k = -H; k < H; k++)
                    if (fabs(xb[j] - d * k) < got - 1e-7 * fabs(xb[j]) - 1e-12) { bad_code++; break; }
                if (lv == -H || lv == H - 1) clamped = 1;
                if (yb[j] != (float)(d * lv)) bad_code++;
                s += ((double)xb[j] - yb[j]) * ((double)xb[j] - yb[j]);
            }
            for (j = n; j < 32; j++) if (cism__qint_level(dt, blk, j) != 0) bad_pad++;
            if (!clamped) {
                for (j = 0; j < n; j++) if (fabs((double)xb[j] - yb[j]) > 0.5 * fabs(d) * 1.0001 + 1e-30) bad_bound++;
            }
            if (sqrt(s / n) > amax / (double)(H - 1) + 1e-12) bad_bound++; /* RMS below a step of the plain rule */
            dp = cism__f16_to_f32(cism__f32_to_f16(amax / (float)(H - 1)));
            for (j = 0; j < n; j++) { /* the plain rule's error: nearest level with dp, clamped */
                double q = dp > 0 ? floor(fabs(xb[j]) / dp + 0.5) : 0, e;
                if (q > H - 1) q = H - 1;
                e = fabs(xb[j]) - dp * q;
                sp += e * e;
            }
            if (s > sp * (1.0 + 1e-6) + 1e-20) worse++;
            sse += s;
            sse_plain += sp;
        }
    CHECK_MSG(bad_code == 0, "%s %lldx%lld: %d codes not the nearest level", cism_dtype_name(dt), (long long)rows, (long long)cols, bad_code);
    CHECK_MSG(bad_pad == 0, "%s %lldx%lld: %d padding codes not level 0", cism_dtype_name(dt), (long long)rows, (long long)cols, bad_pad);
    CHECK_MSG(bad_bound == 0, "%s %lldx%lld: %d errors beyond the bounds", cism_dtype_name(dt), (long long)rows, (long long)cols, bad_bound);
    CHECK_MSG(worse == 0, "%s %lldx%lld: %d blocks worse than the plain rule", cism_dtype_name(dt), (long long)rows, (long long)cols, worse);
    if (rows * cols >= 1000)
        CHECK_MSG(sse < sse_plain, "%s %lldx%lld: search %g vs plain %g", cism_dtype_name(dt), (long long)rows, (long long)cols, sse, sse_plain);
    free(x); free(y); free(p); free(p3);
}

/* Importance: the weighted error is no worse than without; the Gram entry
   point with a diagonal Gram matrix is cism_quantize with that diagonal as
   importance (nothing to compensate; test_quant_gram: its GPTQ). */
static void test_importance_and_gram(int32_t dt) {
    enum { ROWS = 37, COLS = 96, G = 32 };
    const int64_t rb = cism_dtype_row_bytes(dt, COLS);
    float *x = (float *)malloc(ROWS * COLS * 4), imp[COLS], *ya = (float *)malloc(ROWS * COLS * 4), *yb = (float *)malloc(ROWS * COLS * 4);
    uint8_t *a = (uint8_t *)malloc((size_t)(ROWS * rb)), *b = (uint8_t *)malloc((size_t)(ROWS * rb));
    double gram[3 * G * G], ea = 0, eb = 0;
    int64_t size, i;
    for (i = 0; i < ROWS * COLS; i++) x[i] = grand();
    for (i = 0; i < COLS; i++) imp[i] = (float)(i % 7) * (float)(i % 7) + 0.1f;
    CHECK_OK(cism_quantize(dt, x, ROWS, COLS, NULL, a, ROWS * rb, &size, 1));
    CHECK_OK(cism_quantize(dt, x, ROWS, COLS, imp, b, ROWS * rb, &size, 2));
    CHECK(memcmp(a, b, (size_t)(ROWS * rb)) != 0); /* the weights change something */
    CHECK_OK(cism_dequantize(dt, a, ROWS, COLS, ya));
    CHECK_OK(cism_dequantize(dt, b, ROWS, COLS, yb));
    for (i = 0; i < ROWS * COLS; i++) {
        ea += imp[i % COLS] * (x[i] - ya[i]) * (x[i] - ya[i]);
        eb += imp[i % COLS] * (x[i] - yb[i]) * (x[i] - yb[i]);
    }
    CHECK_MSG(eb < ea, "%s: importance-weighted error %g, unweighted %g", cism_dtype_name(dt), eb, ea);
    memset(gram, 0, sizeof(gram));
    for (i = 0; i < COLS; i++) {
        gram[(i / G) * G * G + (i % G) * (G + 1)] = 3.0 * imp[i];
        imp[i] = (float)(3.0 * imp[i]);
    }
    CHECK_OK(cism_quantize(dt, x, ROWS, COLS, imp, b, ROWS * rb, &size, 1));
    CHECK_OK(cism_quantize_gram(dt, x, ROWS, COLS, gram, G, a, ROWS * rb, &size, 2));
    CHECK_MSG(memcmp(a, b, (size_t)(ROWS * rb)) == 0, "%s: quantize_gram differs from importance = its diagonal", cism_dtype_name(dt));
    CHECK(cism_quantize_gram(dt, x, ROWS, COLS, gram, 48, a, ROWS * rb, &size, 1) == CISM_ERR_INVALID_ARG);
    gram[5] = NAN;
    CHECK(cism_quantize_gram(dt, x, ROWS, COLS, gram, G, a, ROWS * rb, &size, 1) == CISM_ERR_INVALID_ARG);
    gram[5] = 0.0;
    gram[0] = -1.0;
    CHECK(cism_quantize_gram(dt, x, ROWS, COLS, gram, G, a, ROWS * rb, &size, 1) == CISM_ERR_INVALID_ARG);
    free(x); free(ya); free(yb); free(a); free(b);
}

static void test_refusals(int32_t dt) {
    float x[64];
    uint8_t out[256];
    int64_t size = -1, i;
    for (i = 0; i < 64; i++) x[i] = frand();
    CHECK(cism_quantize(dt, x, 2, 32, NULL, out, 10, &size, 1) == CISM_ERR_BUFFER_SMALL && size == 2 * bytes_of(dt));
    CHECK(cism_quantize(dt, x, 2, 0, NULL, out, 256, &size, 1) == CISM_ERR_INVALID_ARG);
    CHECK(cism_quantize(dt, x, -1, 32, NULL, out, 256, &size, 1) == CISM_ERR_INVALID_ARG);
    CHECK(cism_dequantize(dt, out, 1, 0, x) == CISM_ERR_INVALID_ARG);
    x[40] = INFINITY;
    CHECK(cism_quantize(dt, x, 2, 32, NULL, out, 256, &size, 1) == CISM_ERR_INVALID_ARG);
    x[40] = 3e6f; /* its scale would overflow fp16 */
    CHECK(cism_quantize(dt, x, 2, 32, NULL, out, 256, &size, 1) == CISM_ERR_INVALID_ARG);
    CHECK(strstr(cism_last_error(), cism_dtype_name(dt)) != NULL);
    x[40] = 20000.0f; /* large but representable: the fp16 scale stays finite */
    CHECK_OK(cism_quantize(dt, x, 2, 32, NULL, out, 256, &size, 1));
    {
        float y[64];
        CHECK_OK(cism_dequantize(dt, out, 2, 32, y));
        CHECK(fabsf(y[40] - 20000.0f) <= 20000.0f / (float)(half_of(dt) - 1));
        for (i = 0; i < 64; i++) CHECK(isfinite(y[i]));
    }
    x[40] = 1e-30f; /* tiny values: the scale underflows, every level 0 */
    for (i = 32; i < 64; i++) x[i] = 1e-30f;
    CHECK_OK(cism_quantize(dt, x, 2, 32, NULL, out, 256, &size, 1));
    CHECK(cism__qint_d(out + bytes_of(dt)) == 0.0f);
    size = 0;
    CHECK_OK(cism_quantize(dt, x, 0, 32, NULL, NULL, 0, &size, 1)); /* no rows */
    CHECK(size == 0);
}

int main(void) {
    int64_t shapes[][2] = {{1, 1}, {3, 7}, {5, 31}, {4, 33}, {64, 172}, {17, 300}, {6, 576}, {8, 1024}};
    size_t s;
    int d;
    test_sizes_and_decode();
    for (d = 0; d < N_DT; d++) {
        for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            test_rounding(DT[d], shapes[s][0], shapes[s][1], 0);
            test_rounding(DT[d], shapes[s][0], shapes[s][1], 1);
        }
        test_importance_and_gram(DT[d]);
        test_refusals(DT[d]);
    }
    return test_finish("test_quant_int");
}
