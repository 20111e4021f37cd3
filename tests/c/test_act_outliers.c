/* test_act_outliers.c - int8 activations with outlier channels computed
 * exactly (model/act_outliers.c), for every packed dtype and every tier:
 *   - the table holds the channels above the threshold, largest first, and
 *     their exact values; a row without outliers quantizes as before;
 *   - the epilogue's weight decode: a one-entry table of value 1 on y = 0
 *     gives exactly the dequantized column, for every row;
 *   - a row with strong outlier channels lands much closer to the exact
 *     float product than plain int8 activations;
 *   - every tier gives the scalar tier's bits (same int8 kernel bits, the same
 *     epilogue code), whatever the row range of the call. */
#include "cism.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "model/session.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

static uint32_t rng = 777u;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffffu) / 8388608.0f - 1.0f;
}

enum { ROWS = 48, COLS = 200 };
static const int32_t DT[] = {CISM_DTYPE_Q8, CISM_DTYPE_Q4, CISM_DTYPE_FP4, CISM_DTYPE_NL4, CISM_DTYPE_Q4S,
                             CISM_DTYPE_Q8X16, CISM_DTYPE_Q4SX16, CISM_DTYPE_Q4A};

static int64_t ldq_of(int64_t cols) {
    return (cism__act8_row_bytes(cols) + (int64_t)sizeof(cism__act8_out) + 63) / 64 * 64;
}

/* The table against its definition, computed here the slow way: the channels
   above ratio x RMS by decreasing magnitude (ties: lower index first). */
static void check_table(const cism__kernels *ref, const float *x, uint8_t *q, int64_t ldq, float *tmp, int want_n) {
    const cism__act8_out *o = (const cism__act8_out *)(const void *)(q + ldq - (int64_t)sizeof(cism__act8_out));
    double ss = 0;
    int64_t i, j, n = 0, order[COLS];
    float thr;
    for (i = 0; i < COLS; i++) ss += (double)x[i] * x[i];
    thr = (float)(CISM__A8_OUT_RATIO * sqrt(ss / COLS));
    for (i = 0; i < COLS; i++)
        if (fabsf(x[i]) > thr) order[n++] = i;
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && fabsf(x[order[j]]) > fabsf(x[order[j - 1]]); j--) {
            int64_t t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
        }
    if (n > CISM__A8_MAX_OUT) n = CISM__A8_MAX_OUT;
    cism__act8_quantize_split(ref->quantize_act, x, COLS, q, ldq, tmp);
    CHECK_MSG(o->n == n && n == want_n, "table of %d channels, expected %d (and %d)", o->n, (int)n, want_n);
    for (i = 0; i < n && i < o->n; i++) CHECK(o->idx[i] == order[i] && o->val[i] == x[order[i]]);
    for (i = 0; i < COLS; i++) tmp[i] = x[i];
    for (i = 0; i < o->n; i++) tmp[o->idx[i]] = 0.0f;  /* the int8 blocks are those of the row without them */
    {
        uint8_t *q2 = (uint8_t *)calloc(1, (size_t)ldq);
        ref->quantize_act(tmp, COLS, q2);
        CHECK(memcmp(q, q2, (size_t)cism__act8_row_bytes(COLS)) == 0);
        free(q2);
    }
}

static void test_table(const cism__kernels *ref) {
    float x[COLS], tmp[COLS];
    int64_t ldq = ldq_of(COLS), i;
    uint8_t *q = (uint8_t *)calloc(1, (size_t)ldq), *q2 = (uint8_t *)calloc(1, (size_t)ldq);
    const cism__act8_out *o = (const cism__act8_out *)(const void *)(q + ldq - (int64_t)sizeof(cism__act8_out));
    for (i = 0; i < COLS; i++) x[i] = 0.1f * frand();
    cism__act8_quantize_split(ref->quantize_act, x, COLS, q, ldq, tmp);
    CHECK(o->n == 0);
    ref->quantize_act(x, COLS, q2);
    CHECK(memcmp(q, q2, (size_t)cism__act8_row_bytes(COLS)) == 0);
    x[7] = 9.0f; x[150] = -12.0f; x[33] = 5.0f; x[199] = 7.5f; x[120] = 1.0f;
    check_table(ref, x, q, ldq, tmp, 3);  /* 5.0 and 1.0 stay below 6 x RMS */
    /* at most ratio^-2 x COLS channels can exceed the threshold (5 of 200 at 6 x RMS): five nearly
       equal ones, more than CISM__A8_MAX_OUT, of which the largest are kept */
    for (i = 0; i < COLS; i++) x[i] = 0.1f * frand();
    for (i = 0; i < 5; i++) x[10 + i] = 30.0f + 0.1f * (float)i;
    check_table(ref, x, q, ldq, tmp, CISM__A8_MAX_OUT < 5 ? CISM__A8_MAX_OUT : 5);
    for (i = 0; i < o->n; i++) CHECK(o->idx[i] == 14 - i);
    free(q); free(q2);
}

static void test_dtype(const cism__kernels *k, const cism__kernels *ref, int32_t dt) {
    int64_t rb = cism_dtype_row_bytes(dt, COLS), ldq = ldq_of(COLS), r, c;
    float *w = (float *)malloc(sizeof(float) * ROWS * COLS), *wd = (float *)malloc(sizeof(float) * ROWS * COLS);
    uint8_t *wq = (uint8_t *)malloc((size_t)(rb * ROWS));
    uint8_t *xq = (uint8_t *)calloc(1, (size_t)ldq), *xp = (uint8_t *)calloc(1, (size_t)ldq);
    float x[COLS], tmp[COLS], col[ROWS], ys[ROWS], yk[ROWS], yp[ROWS];
    double err_split = 0, err_plain = 0;
    cism__act8_out *o = (cism__act8_out *)(void *)(xq + ldq - (int64_t)sizeof(cism__act8_out));
    int64_t got = 0;
    for (r = 0; r < ROWS * COLS; r++) w[r] = 0.05f * frand();
    CHECK_OK(cism_quantize(dt, w, ROWS, COLS, NULL, wq, rb * ROWS, &got, 1));
    CHECK_OK(cism_dequantize(dt, wq, ROWS, COLS, wd));
    /* the decode of every column */
    for (c = 0; c < COLS; c++) {
        memset(col, 0, sizeof(col));
        o->n = 1; o->idx[0] = (int32_t)c; o->val[0] = 1.0f;
        cism__act8_add_outliers(dt, wq, (uint64_t)rb, xq, ldq, col, 1, 1, 0, ROWS);
        for (r = 0; r < ROWS; r++)
            if (col[r] != wd[r * COLS + c]) {
                CHECK_MSG(0, "%s: column %d row %d: %g, dequantized %g", cism_dtype_name(dt), (int)c, (int)r,
                          col[r], wd[r * COLS + c]);
                c = COLS;
                break;
            }
    }
    /* accuracy with strong channels */
    for (c = 0; c < COLS; c++) x[c] = 0.5f * frand();
    x[3] = 30.0f; x[64] = -25.0f; x[130] = 20.0f;
    cism__act8_quantize_split(ref->quantize_act, x, COLS, xq, ldq, tmp);
    CHECK(o->n == 3);
    ref->quantize_act(x, COLS, xp);
    ref->matmul_a8[dt](wq, (uint64_t)rb, COLS, xq, ldq, ys, ROWS, 1, 0, ROWS);
    cism__act8_add_outliers(dt, wq, (uint64_t)rb, xq, ldq, ys, ROWS, 1, 0, ROWS);
    ref->matmul_a8[dt](wq, (uint64_t)rb, COLS, xp, ldq, yp, ROWS, 1, 0, ROWS);
    for (r = 0; r < ROWS; r++) {
        double e = 0;
        for (c = 0; c < COLS; c++) e += (double)x[c] * wd[r * COLS + c];
        err_split = fmax(err_split, fabs(ys[r] - e));
        err_plain = fmax(err_plain, fabs(yp[r] - e));
    }
    CHECK_MSG(err_split * 2 < err_plain, "%s: max error %g with outliers, %g without", cism_dtype_name(dt), err_split,
              err_plain);
    /* this tier, in two row ranges (whole groups of 16), gives the scalar tier's bits */
    k->matmul_a8[dt](wq, (uint64_t)rb, COLS, xq, ldq, yk, ROWS, 1, 0, 16);
    cism__act8_add_outliers(dt, wq, (uint64_t)rb, xq, ldq, yk, ROWS, 1, 0, 16);
    k->matmul_a8[dt](wq, (uint64_t)rb, COLS, xq, ldq, yk, ROWS, 1, 16, ROWS);
    cism__act8_add_outliers(dt, wq, (uint64_t)rb, xq, ldq, yk, ROWS, 1, 16, ROWS);
    CHECK_MSG(memcmp(yk, ys, sizeof(ys)) == 0, "%s on %s: not the scalar tier's bits", cism_dtype_name(dt), k->name);
    free(w); free(wd); free(wq); free(xq); free(xp);
}

int main(void) {
    const cism__kernels *ref = cism__kernels_scalar();
    int32_t t;
    size_t d;
    test_table(ref);
    for (t = CISM_TIER_SCALAR; cism_kernel_tier_name(t); t++) {
        const cism__kernels *k = cism__kernels_tier(t);
        if (!k) continue;
        printf("tier %s\n", k->name);
        for (d = 0; d < sizeof(DT) / sizeof(DT[0]); d++) test_dtype(k, ref, DT[d]);
    }
    return test_finish("test_act_outliers");
}
