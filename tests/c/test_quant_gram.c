/* test_quant_gram.c - error-compensating rounding from input statistics
 * (cism_quantize_gram, GPTQ): on correlated synthetic inputs it lowers the
 * matrix's output error against plain rounding by more than half (measured
 * 87-89% for every 4-bit format, act order; q6 / q5 / q3 too); a diagonal Gram matrix gives
 * exactly cism_quantize with that importance, an all-zero one or none plain
 * rounding; bytes do not depend on the thread count; the interleaved dtypes
 * hold the same values as their base format; bad statistics are refused. */
#include "cism.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

static uint32_t rng = 777u;
static double urand(void) { /* uniform in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (double)((rng >> 8) & 0xffffffu) / 8388608.0 - 1.0;
}
static double grand(void) { return (urand() + urand() + urand()) * 0.6; }

#define ROWS 24
#define COLS 200   /* not a multiple of the Gram block: a padded last block */
#define NS 600     /* input samples */
#define G 64

/* inputs with correlated columns and uneven scales, like a norm's output */
static void make_inputs(double *x) {
    int t, c, k;
    double mix[8][COLS];
    for (k = 0; k < 8; k++)
        for (c = 0; c < COLS; c++) mix[k][c] = grand();
    for (t = 0; t < NS; t++) {
        double z[8];
        for (k = 0; k < 8; k++) z[k] = grand();
        for (c = 0; c < COLS; c++) {
            double v = 0.5 * grand();
            for (k = 0; k < 8; k++) v += mix[k][c] * z[k];
            x[t * COLS + c] = v * (c % 13 == 0 ? 4.0 : 1.0);
        }
    }
}

static void gram_blocks(const double *x, double *gram) {
    int nb = (COLS + G - 1) / G, k, a, b, t;
    memset(gram, 0, (size_t)nb * G * G * sizeof(double));
    for (k = 0; k < nb; k++)
        for (a = 0; a < G && k * G + a < COLS; a++)
            for (b = 0; b < G && k * G + b < COLS; b++) {
                double s = 0;
                for (t = 0; t < NS; t++) s += x[t * COLS + k * G + a] * x[t * COLS + k * G + b];
                gram[k * G * G + a * G + b] = s / NS;
            }
}

/* mean squared output error of the packed matrix over the inputs */
static double output_error(int32_t dt, const uint8_t *packed, const float *w, const double *x) {
    static float y[ROWS * COLS];
    double e = 0;
    int r, t, c;
    CHECK_OK(cism_dequantize(dt, packed, ROWS, COLS, y));
    for (r = 0; r < ROWS; r++)
        for (t = 0; t < NS; t++) {
            double s = 0;
            for (c = 0; c < COLS; c++) s += ((double)w[r * COLS + c] - y[r * COLS + c]) * x[t * COLS + c];
            e += s * s;
        }
    return e / (ROWS * NS);
}

int main(void) {
    static const int32_t dts[] = {CISM_DTYPE_Q4S, CISM_DTYPE_Q4, CISM_DTYPE_NL4, CISM_DTYPE_FP4, CISM_DTYPE_Q6, CISM_DTYPE_Q5,
                                  CISM_DTYPE_Q3, CISM_DTYPE_Q2};
    static double x[NS * COLS], gram[4 * G * G], diag_gram[4 * G * G];
    static float w[ROWS * COLS], imp[COLS];
    static uint8_t a[ROWS * 256], b[ROWS * 256];
    int64_t size = 0, cap = sizeof(a);
    size_t d;
    int i, k;
    make_inputs(x);
    gram_blocks(x, gram);
    for (i = 0; i < ROWS * COLS; i++) w[i] = (float)(0.05 * grand());
    memset(diag_gram, 0, sizeof(diag_gram));
    for (i = 0; i < COLS; i++) {
        imp[i] = (float)gram[(i / G) * G * G + (i % G) * (G + 1)];
        diag_gram[(i / G) * G * G + (i % G) * (G + 1)] = gram[(i / G) * G * G + (i % G) * (G + 1)];
    }
    for (d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
        int32_t dt = dts[d];
        double e_plain, e_gram;
        CHECK_OK(cism_quantize(dt, w, ROWS, COLS, NULL, a, cap, &size, 1));
        e_plain = output_error(dt, a, w, x);
        CHECK_OK(cism_quantize_gram(dt, w, ROWS, COLS, gram, G, b, cap, &size, 1));
        CHECK(size == ROWS * cism_dtype_row_bytes(dt, COLS));
        e_gram = output_error(dt, b, w, x);
        printf("%s: output error plain %.4g, with Gram blocks of %d %.4g (%.0f%% less)\n", cism_dtype_name(dt), e_plain, G,
               e_gram, 100 * (1 - e_gram / e_plain));
        CHECK_MSG(e_gram < 0.5 * e_plain, "%s: %g vs %g", cism_dtype_name(dt), e_gram, e_plain);
        /* the same bytes with 3 threads */
        CHECK_OK(cism_quantize_gram(dt, w, ROWS, COLS, gram, G, a, cap, &size, 3));
        CHECK(memcmp(a, b, (size_t)size) == 0);
        /* a diagonal Gram matrix compensates nothing: cism_quantize with its diagonal as importance */
        CHECK_OK(cism_quantize_gram(dt, w, ROWS, COLS, diag_gram, G, a, cap, &size, 2));
        CHECK_OK(cism_quantize(dt, w, ROWS, COLS, imp, b, cap, &size, 1));
        CHECK_MSG(memcmp(a, b, (size_t)size) == 0, "%s: diagonal Gram differs from importance", cism_dtype_name(dt));
    }
    /* interleaved dtypes: the rows of the base format, permuted (16 rows) */
    {
        static float fa[16 * COLS], fb[16 * COLS];
        static const int32_t x16[][2] = {{CISM_DTYPE_Q4SX16, CISM_DTYPE_Q4S}, {CISM_DTYPE_Q8X16, CISM_DTYPE_Q8},
                                         {CISM_DTYPE_Q6X16, CISM_DTYPE_Q6}, {CISM_DTYPE_Q5X16, CISM_DTYPE_Q5},
                                         {CISM_DTYPE_Q3X16, CISM_DTYPE_Q3}, {CISM_DTYPE_Q2X16, CISM_DTYPE_Q2}};
        for (d = 0; d < 6; d++) {
            CHECK_OK(cism_quantize_gram(x16[d][0], w, 16, COLS, gram, G, a, cap, &size, 2));
            CHECK(size == 16 * cism_dtype_row_bytes(x16[d][0], COLS));
            CHECK_OK(cism_dequantize(x16[d][0], a, 16, COLS, fa));
            CHECK_OK(cism_quantize_gram(x16[d][1], w, 16, COLS, gram, G, b, cap, &size, 1));
            CHECK_OK(cism_dequantize(x16[d][1], b, 16, COLS, fb));
            CHECK_MSG(memcmp(fa, fb, sizeof(fa)) == 0, "%s", cism_dtype_name(x16[d][0]));
            CHECK(memcmp(a, b, (size_t)size) != 0); /* but not the same bytes: they are permuted */
        }
        CHECK(cism_quantize_gram(CISM_DTYPE_Q4SX16, w, ROWS, COLS, gram, G, a, cap, &size, 1) == CISM_ERR_INVALID_ARG);
    }
    /* no statistics, zero statistics, q8: plain rounding */
    CHECK_OK(cism_quantize(CISM_DTYPE_Q4S, w, ROWS, COLS, NULL, b, cap, &size, 1));
    CHECK_OK(cism_quantize_gram(CISM_DTYPE_Q4S, w, ROWS, COLS, NULL, G, a, cap, &size, 1));
    CHECK(memcmp(a, b, (size_t)size) == 0);
    {
        static double zero[4 * G * G];
        CHECK_OK(cism_quantize_gram(CISM_DTYPE_Q4S, w, ROWS, COLS, zero, G, a, cap, &size, 1));
        CHECK(memcmp(a, b, (size_t)size) == 0);
    }
    CHECK_OK(cism_quantize(CISM_DTYPE_Q8, w, ROWS, COLS, NULL, b, cap, &size, 1));
    CHECK_OK(cism_quantize_gram(CISM_DTYPE_Q8, w, ROWS, COLS, gram, G, a, cap, &size, 1));
    CHECK(memcmp(a, b, (size_t)size) == 0);
    /* refusals */
    CHECK(cism_quantize_gram(CISM_DTYPE_Q4S, w, ROWS, COLS, gram, 24, a, cap, &size, 1) == CISM_ERR_INVALID_ARG);
    CHECK(strstr(cism_last_error(), "multiple") != NULL);
    CHECK(cism_quantize_gram(CISM_DTYPE_Q4, w, ROWS, COLS, gram, 48, a, cap, &size, 1) == CISM_ERR_INVALID_ARG);
    CHECK(cism_quantize_gram(CISM_DTYPE_Q4S, w, ROWS, COLS, gram, 8192, a, cap, &size, 1) == CISM_ERR_INVALID_ARG);
    CHECK(cism_quantize_gram(CISM_DTYPE_Q4S, w, ROWS, COLS, gram, G, a, 10, &size, 1) == CISM_ERR_BUFFER_SMALL);
    CHECK(size == ROWS * cism_dtype_row_bytes(CISM_DTYPE_Q4S, COLS));
    gram[5] = NAN;
    CHECK(cism_quantize_gram(CISM_DTYPE_Q4S, w, ROWS, COLS, gram, G, a, cap, &size, 1) == CISM_ERR_INVALID_ARG);
    gram[5] = 0;
    gram[G * G + 3 * (G + 1)] = -1.0; /* a negative mean square */
    CHECK(cism_quantize_gram(CISM_DTYPE_Q4S, w, ROWS, COLS, gram, G, a, cap, &size, 1) == CISM_ERR_INVALID_ARG);
    CHECK(strstr(cism_last_error(), "negative") != NULL);
    gram_blocks(x, gram);
    for (k = 0; k < G; k++) /* far from positive semi-definite: refused, not silently damped away */
        gram[k * G + (k ^ 1)] = 50.0 * gram[k * (G + 1)];
    CHECK(cism_quantize_gram(CISM_DTYPE_Q4S, w, ROWS, COLS, gram, G, a, cap, &size, 1) == CISM_ERR_INVALID_ARG);
    CHECK(strstr(cism_last_error(), "positive semi-definite") != NULL);
    w[7] = INFINITY;
    CHECK(cism_quantize_gram(CISM_DTYPE_Q4S, w, ROWS, COLS, diag_gram, G, a, cap, &size, 1) == CISM_ERR_INVALID_ARG);
    return test_finish("test_quant_gram");
}
