/* test_act_outliers.c - int8 activations with outlier channels computed
 * exactly (model/act_outliers.c), for every packed dtype and every tier:
 *   - the table holds the channels of the greedy rule (quant.h, computed here
 *     the slow way), in its order, and their exact values; a row without
 *     outliers quantizes as before, Gaussian-like rows get few;
 *   - the epilogue's weight decode: a one-entry table of value 1 on y = 0
 *     gives exactly the dequantized column, for every row;
 *   - a row with strong outlier channels lands much closer to the exact
 *     float product than plain int8 activations;
 *   - every tier gives the scalar tier's bits (same int8 kernel bits, the
 *     tier epilogues the same operations as the C code), whatever the row
 *     range of the call and the number of tokens; every E4M3 scale byte. */
#include "cism.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/outlier_runs.h"
#include "model/session.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

static uint32_t rng = 777u;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffffu) / 8388608.0f - 1.0f;
}

/* COLS: 8 whole blocks of 32 and a partial one (the search for the largest
   drop keeps four running maxima, blocks b % 4: two whole blocks each) */
enum { ROWS = 48, COLS = 264, TMP = 4 * ((COLS + 31) / 32) };
static const int32_t DT[] = {CISM_DTYPE_Q8, CISM_DTYPE_Q4, CISM_DTYPE_FP4, CISM_DTYPE_NL4, CISM_DTYPE_Q4S,
                             CISM_DTYPE_Q8X16, CISM_DTYPE_Q4SX16, CISM_DTYPE_Q4A, CISM_DTYPE_Q6, CISM_DTYPE_Q5,
                             CISM_DTYPE_Q4AX16, CISM_DTYPE_Q6X16, CISM_DTYPE_Q5X16, CISM_DTYPE_Q3, CISM_DTYPE_Q3X16,
                             CISM_DTYPE_Q2, CISM_DTYPE_Q2X16};

/* Whether the tier has a fused entry for nt tokens of dt (kernels.h
   matmul_a8_outliers, gemv_a8_outliers) */
static int has_fused(const cism__kernels *k, int32_t dt, int64_t nt) {
    return k->matmul_a8_outliers[dt] || (nt <= CISM__GEMV_OUTL_TOKENS && k->gemv_a8_outliers[dt]);
}

/* That entry on nt tokens (runs: prebuilt outlier runs, or NULL) */
static void fused(const cism__kernels *k, int32_t dt, const void *w, int64_t rb, int64_t cols, const uint8_t *xq,
                  int64_t ldq, float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1, const cism__oruns *runs) {
    if (k->matmul_a8_outliers[dt]) k->matmul_a8_outliers[dt](w, (uint64_t)rb, cols, xq, ldq, y, ldy, nt, r0, r1, runs);
    else k->gemv_a8_outliers[dt](w, (uint64_t)rb, cols, xq, ldq, y, ldy, nt, r0, r1);
}

static int64_t ldq_of(int64_t cols) {
    return (cism__act8_row_bytes(cols) + (int64_t)sizeof(cism__act8_out) + 63) / 64 * 64;
}

/* The table against its definition, computed here the slow way: repeatedly,
   over the blocks of 32 of the row with the channels taken so far set to 0,
   the block whose max squared minus its second largest squared (the drop of
   the noise sum N = sum of block max^2 when its max is taken out) is largest
   (ties: the first block; the first index of its max), taken while that drop
   exceeds CISM__A8_OUT_GAIN x N / blocks, at most CISM__A8_MAX_OUT. */
static void check_table(const cism__kernels *ref, const float *x, uint8_t *q, int64_t ldq, float *tmp, int want_n) {
    const cism__act8_out *o = (const cism__act8_out *)(const void *)(q + ldq - (int64_t)sizeof(cism__act8_out));
    enum { NB = (COLS + 31) / 32 };
    float t[COLS];
    int64_t i, b, n = 0, order[CISM__A8_MAX_OUT];
    memcpy(t, x, sizeof(t));
    while (n < CISM__A8_MAX_OUT) {
        double N = 0, g[NB], best;
        int64_t at[NB], pick = -1;
        for (b = 0; b < NB; b++) {
            float m1 = 0, m2 = 0;
            at[b] = b * 32;
            for (i = b * 32; i < (b + 1) * 32 && i < COLS; i++) {
                if (fabsf(t[i]) > m1) { m2 = m1; m1 = fabsf(t[i]); at[b] = i; }
                else if (fabsf(t[i]) > m2) m2 = fabsf(t[i]);
            }
            N += (double)m1 * m1;
            g[b] = (double)m1 * m1 - (double)m2 * m2;
        }
        best = CISM__A8_OUT_GAIN * N / NB;
        for (b = 0; b < NB; b++)
            if (g[b] > best) { best = g[b]; pick = b; }
        if (pick < 0) break;
        order[n++] = at[pick];
        t[at[pick]] = 0.0f;
    }
    cism__act8_quantize_split(ref, x, COLS, q, ldq, tmp);
    CHECK_MSG(o->n == n && (want_n < 0 || n == want_n), "table of %d channels, expected %d (and %d)", o->n, (int)n, want_n);
    for (i = 0; i < n && i < o->n; i++) CHECK(o->idx[i] == order[i] && o->val[i] == x[order[i]]);
    for (i = 0; i < COLS; i++) t[i] = x[i];
    for (i = 0; i < o->n; i++) t[o->idx[i]] = 0.0f;  /* the int8 blocks are those of the row without them */
    {
        uint8_t *q2 = (uint8_t *)calloc(1, (size_t)ldq);
        ref->quantize_act(t, COLS, q2);
        CHECK(memcmp(q, q2, (size_t)cism__act8_row_bytes(COLS)) == 0);
        free(q2);
    }
}

static void test_table(const cism__kernels *ref) {
    float x[COLS], tmp[TMP];
    int64_t ldq = ldq_of(COLS), i, r;
    uint8_t *q = (uint8_t *)calloc(1, (size_t)ldq), *q2 = (uint8_t *)calloc(1, (size_t)ldq);
    const cism__act8_out *o = (const cism__act8_out *)(const void *)(q + ldq - (int64_t)sizeof(cism__act8_out));
    for (i = 0; i < COLS; i++) x[i] = 0.1f * frand();
    cism__act8_quantize_split(ref, x, COLS, q, ldq, tmp);
    CHECK(o->n == 0);
    ref->quantize_act(x, COLS, q2);
    CHECK(memcmp(q, q2, (size_t)cism__act8_row_bytes(COLS)) == 0);
    /* 9 and -40 share a block (the drop of taking -40 is 40^2 - 9^2, later 9's 9^2 - 0.1^2): the largest
       drop first; once the others are out, 1.0 stands out of the 0.1 around it too */
    x[7] = 9.0f; x[20] = -40.0f; x[33] = 5.0f; x[199] = 20.0f; x[120] = 1.0f;
    check_table(ref, x, q, ldq, tmp, 5);
    CHECK(o->idx[0] == 20 && o->idx[1] == 199 && o->idx[2] == 7 && o->idx[3] == 33 && o->idx[4] == 120);
    /* two equal maxima in a block: taking one lowers nothing */
    for (i = 0; i < COLS; i++) x[i] = 0.1f * frand();
    x[40] = 30.0f; x[41] = -30.0f;
    check_table(ref, x, q, ldq, tmp, 0);
    /* more strong channels than CISM__A8_MAX_OUT: the largest drops are taken, two in one block */
    for (i = 0; i < COLS; i++) x[i] = 0.1f * frand();
    for (i = 0; i < 12; i++) x[3 + 2 * i] = 1000.0f / (float)(1 << i); /* one block */
    x[150] = -700.0f;
    check_table(ref, x, q, ldq, tmp, CISM__A8_MAX_OUT);
    /* equal drops in blocks 1, 4 and 5: the first block first (1 before 4, the maximum of
       another chain, and before 5, later in its own chain) */
    for (i = 0; i < COLS; i++) x[i] = 0.1f * frand();
    for (r = 1; r < 6; r += r == 1 ? 3 : 1) {
        for (i = r * 32; i < r * 32 + 32; i++) x[i] = 0.0f;
        x[r * 32 + r] = 50.0f;
        x[r * 32 + 20] = 0.5f;
    }
    check_table(ref, x, q, ldq, tmp, -1);
    CHECK(o->n >= 3 && o->idx[0] == 33 && o->idx[1] == 132 && o->idx[2] == 165);
    /* random rows, plain and heavy-tailed */
    for (r = 0; r < 200; r++) {
        for (i = 0; i < COLS; i++) {
            float u = frand();
            x[i] = r % 2 ? u * u * u * u * u * 8.0f : u;
        }
        check_table(ref, x, q, ldq, tmp, -1);
    }
    /* a Gaussian-like row (sum of uniforms) rarely has one */
    {
        int n = 0;
        for (r = 0; r < 100; r++) {
            for (i = 0; i < COLS; i++) x[i] = frand() + frand() + frand() + frand();
            cism__act8_quantize_split(ref, x, COLS, q, ldq, tmp);
            n += o->n;
        }
        CHECK_MSG(n < 20, "%d outlier channels in 100 rows without outliers", n);
    }
    free(q); free(q2);
}

static void test_dtype(const cism__kernels *k, const cism__kernels *ref, int32_t dt) {
    int64_t rb = cism_dtype_row_bytes(dt, COLS), ldq = ldq_of(COLS), r, c;
    float *w = (float *)malloc(sizeof(float) * ROWS * COLS), *wd = (float *)malloc(sizeof(float) * ROWS * COLS);
    uint8_t *wq = (uint8_t *)malloc((size_t)(rb * ROWS));
    uint8_t *xq = (uint8_t *)calloc(1, (size_t)ldq), *xp = (uint8_t *)calloc(1, (size_t)ldq);
    float x[COLS], tmp[TMP], col[ROWS], ys[ROWS], yk[ROWS], yp[ROWS];
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
        cism__act8_add_outliers(k, dt, wq, (uint64_t)rb, xq, ldq, col, 1, 1, 0, ROWS);
        if (has_fused(k, dt, 1)) /* the fused entry: its dot of the zero row is 0 */
            fused(k, dt, wq, rb, COLS, xq, ldq, yk, ROWS, 1, 0, ROWS, NULL);
        for (r = 0; r < ROWS; r++)
            if (col[r] != wd[r * COLS + c] || (has_fused(k, dt, 1) && yk[r] != wd[r * COLS + c])) {
                CHECK_MSG(0, "%s on %s: column %d row %d: %g (fused entry %g), dequantized %g", cism_dtype_name(dt), k->name,
                          (int)c, (int)r, col[r], yk[r], wd[r * COLS + c]);
                c = COLS;
                break;
            }
    }
    /* accuracy with strong channels */
    for (c = 0; c < COLS; c++) x[c] = 0.5f * frand();
    /* values of full mantissas: their products with the weights round, so a
       fused multiply-add and a product then a sum give different bits */
    x[3] = 30.123457f; x[64] = -25.345679f; x[130] = 20.456789f;
    cism__act8_quantize_split(ref, x, COLS, xq, ldq, tmp);
    CHECK(o->n == 3);
    ref->quantize_act(x, COLS, xp);
    ref->matmul_a8[dt](wq, (uint64_t)rb, COLS, xq, ldq, ys, ROWS, 1, 0, ROWS);
    cism__act8_add_outliers(ref, dt, wq, (uint64_t)rb, xq, ldq, ys, ROWS, 1, 0, ROWS);
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
    cism__act8_add_outliers(k, dt, wq, (uint64_t)rb, xq, ldq, yk, ROWS, 1, 0, 16);
    k->matmul_a8[dt](wq, (uint64_t)rb, COLS, xq, ldq, yk, ROWS, 1, 16, ROWS);
    cism__act8_add_outliers(k, dt, wq, (uint64_t)rb, xq, ldq, yk, ROWS, 1, 16, ROWS);
    CHECK_MSG(memcmp(yk, ys, sizeof(ys)) == 0, "%s on %s: not the scalar tier's bits", cism_dtype_name(dt), k->name);
    /* one token through the tier's fused entry: the bits of the two passes, also
       from a row range whose ends are not multiples of 8; the x86 tiers fuse q4a,
       q8 (few tokens) and the interleaved formats (any number) */
    if (!strcmp(k->name, "avx2") || !strcmp(k->name, "avx512"))
        CHECK_MSG((dt != CISM_DTYPE_Q4A && dt != CISM_DTYPE_Q8 && !cism__dtype_is_x16(dt)) || has_fused(k, dt, 1),
                  "%s: no fused entry for %s", k->name, cism_dtype_name(dt));
    if (has_fused(k, dt, 1)) {
        float yf[ROWS];
        fused(k, dt, wq, rb, COLS, xq, ldq, yf, ROWS, 1, 0, ROWS, NULL);
        CHECK_MSG(memcmp(yf, ys, sizeof(ys)) == 0, "%s on %s, fused one-token entry: not the scalar tier's bits",
                  cism_dtype_name(dt), k->name);
        memset(yf, 0, sizeof(yf));
        fused(k, dt, wq, rb, COLS, xq, ldq, yf, ROWS, 1, 3, ROWS - 2, NULL);
        CHECK_MSG(yf[2] == 0 && yf[ROWS - 2] == 0 && memcmp(yf + 3, ys + 3, (ROWS - 5) * sizeof(float)) == 0,
                  "%s on %s, fused one-token entry on rows 3..%d: not the scalar tier's bits", cism_dtype_name(dt), k->name,
                  ROWS - 3);
    }
    /* several tokens with different tables (the column cache across tokens), in three row ranges */
    {
        enum { NT = 4 };
        uint8_t *xs = (uint8_t *)calloc(NT, (size_t)ldq);
        float *y1 = (float *)calloc(NT * ROWS, sizeof(float)), *y2 = (float *)calloc(NT * ROWS, sizeof(float));
        int64_t t;
        for (t = 0; t < NT; t++) {
            for (c = 0; c < COLS; c++) x[c] = 0.5f * frand();
            x[3 + 32 * t] = 30.123457f; x[64] = -25.345679f + (float)t; x[130 + t] = 20.456789f; x[199 - 16 * t] = 12.345679f;
            cism__act8_quantize_split(ref, x, COLS, xs + t * ldq, ldq, tmp);
        }
        ref->matmul_a8[dt](wq, (uint64_t)rb, COLS, xs, ldq, y1, ROWS, NT, 0, ROWS);
        cism__act8_add_outliers(ref, dt, wq, (uint64_t)rb, xs, ldq, y1, ROWS, NT, 0, ROWS);
        for (r = 0; r < ROWS; r += 16) {
            k->matmul_a8[dt](wq, (uint64_t)rb, COLS, xs, ldq, y2, ROWS, NT, r, r + 16);
            cism__act8_add_outliers(k, dt, wq, (uint64_t)rb, xs, ldq, y2, ROWS, NT, r, r + 16);
        }
        CHECK_MSG(memcmp(y1, y2, NT * ROWS * sizeof(float)) == 0, "%s on %s, %d tokens: not the scalar tier's bits",
                  cism_dtype_name(dt), k->name, (int)NT);
        free(xs); free(y1); free(y2);
    }
    /* q4sx16: every E4M3 scale byte (subnormals, NaNs) decodes as the C code does (last: it edits wq) */
    if (dt == CISM_DTYPE_Q4SX16) {
        cism__x16 g = cism__x16_geom(dt, (uint64_t)rb);
        uint8_t *sc = (uint8_t *)(uintptr_t)cism__x16_scales(&g, wq, 0);
        float c1[16], c2[16];
        int v, i;
        for (v = 0; v < 16; v++) {
            for (i = 0; i < 16; i++) sc[i] = (uint8_t)(16 * v + i);
            memset(c1, 0, sizeof(c1));
            memset(c2, 0, sizeof(c2));
            o->n = 1; o->idx[0] = 5; o->val[0] = 1.0f;
            cism__act8_add_outliers(ref, dt, wq, (uint64_t)rb, xq, ldq, c1, 16, 1, 0, 16);
            cism__act8_add_outliers(k, dt, wq, (uint64_t)rb, xq, ldq, c2, 16, 1, 0, 16);
            CHECK_MSG(memcmp(c1, c2, sizeof(c1)) == 0, "q4sx16 on %s: E4M3 scales %d..%d decode differently", k->name,
                      16 * v, 16 * v + 15);
        }
    }
    free(w); free(wd); free(wq); free(xq); free(xp);
}

/* A long call: 600 tokens (the x86 epilogues take runs of at most 256), the
   middle ones with five strong channels each spread over a 330-wide row, so
   that the first run meets more distinct channels (> 128) than a run holds and
   ends early; the others share two channels. The tier's bits are the scalar
   tier's, in one call over every row and in calls of 16 rows. 80 rows: the
   x86 epilogue's passes of 4 groups and the 1 group after them. */
static void test_long_call(const cism__kernels *k, const cism__kernels *ref, int32_t dt) {
    enum { NT = 600, C2 = 330, T2 = 4 * ((C2 + 31) / 32), LR = 80 };
    /* full mantissas: a product then a sum would differ from a fused multiply-add */
    static const float big[5] = {60.123457f, -30.345679f, 15.456789f, -8.567891f, 4.678912f};
    int64_t rb = cism_dtype_row_bytes(dt, C2), ldq = ldq_of(C2), r, c, t, got = 0;
    float *w = (float *)malloc(sizeof(float) * LR * C2), x[C2], tmp[T2];
    uint8_t *wq = (uint8_t *)malloc((size_t)(rb * LR)), *xs = (uint8_t *)calloc(NT, (size_t)ldq);
    float *y1 = (float *)calloc(NT * LR, sizeof(float)), *y2 = (float *)calloc(NT * LR, sizeof(float));
    float *y3 = (float *)calloc(NT * LR, sizeof(float));
    int seen[C2] = {0}, distinct = 0, j;
    for (r = 0; r < LR * C2; r++) w[r] = 0.05f * frand();
    CHECK_OK(cism_quantize(dt, w, LR, C2, NULL, wq, rb * LR, &got, 1));
    for (t = 0; t < NT; t++) {
        const cism__act8_out *ot = (const cism__act8_out *)(const void *)(xs + (t + 1) * ldq - (int64_t)sizeof(cism__act8_out));
        for (c = 0; c < C2; c++) x[c] = 0.5f * frand();
        if (t >= 100 && t < 400)
            for (j = 0; j < 5; j++) x[(t * 37 + j * 61 + 5) % C2] = big[j];
        else {
            x[3] = 30.123457f; x[64 + t % 3] = -25.345679f;
        }
        cism__act8_quantize_split(ref, x, C2, xs + t * ldq, ldq, tmp);
        for (j = 0; t < 256 && j < ot->n; j++) distinct += !seen[ot->idx[j]]++;
    }
    CHECK_MSG(distinct > 128, "the first 256 tokens have %d distinct outlier channels, meant to exceed 128", distinct);
    ref->matmul_a8[dt](wq, (uint64_t)rb, C2, xs, ldq, y1, LR, NT, 0, LR);
    cism__act8_add_outliers(ref, dt, wq, (uint64_t)rb, xs, ldq, y1, LR, NT, 0, LR);
    k->matmul_a8[dt](wq, (uint64_t)rb, C2, xs, ldq, y2, LR, NT, 0, LR);
    cism__act8_add_outliers(k, dt, wq, (uint64_t)rb, xs, ldq, y2, LR, NT, 0, LR);
    for (r = 0; r < LR; r += 16) {
        k->matmul_a8[dt](wq, (uint64_t)rb, C2, xs, ldq, y3, LR, NT, r, r + 16);
        cism__act8_add_outliers(k, dt, wq, (uint64_t)rb, xs, ldq, y3, LR, NT, r, r + 16);
    }
    CHECK_MSG(memcmp(y1, y2, NT * LR * sizeof(float)) == 0, "%s on %s, %d tokens: not the scalar tier's bits",
              cism_dtype_name(dt), k->name, (int)NT);
    CHECK_MSG(memcmp(y1, y3, NT * LR * sizeof(float)) == 0, "%s on %s, %d tokens in calls of 16 rows: not the scalar "
              "tier's bits", cism_dtype_name(dt), k->name, (int)NT);
    if (has_fused(k, dt, NT)) { /* the fused entry of many tokens, in one call and in row ranges off the 16-row grid */
        memset(y2, 0, NT * LR * sizeof(float));
        fused(k, dt, wq, rb, C2, xs, ldq, y2, LR, NT, 0, LR, NULL);
        memset(y3, 0, NT * LR * sizeof(float));
        fused(k, dt, wq, rb, C2, xs, ldq, y3, LR, NT, 0, 5, NULL);
        fused(k, dt, wq, rb, C2, xs, ldq, y3, LR, NT, 5, 37, NULL);
        fused(k, dt, wq, rb, C2, xs, ldq, y3, LR, NT, 37, LR, NULL);
        CHECK_MSG(memcmp(y1, y2, NT * LR * sizeof(float)) == 0 && memcmp(y1, y3, NT * LR * sizeof(float)) == 0,
                  "%s on %s, %d tokens, fused entry: not the scalar tier's bits", cism_dtype_name(dt), k->name, (int)NT);
    }
    if (k->matmul_a8_outliers[dt]) { /* with runs listed beforehand (forward.c's, once per stage) */
        cism__oruns rs, bad;
        rs.cap = (int)cism__oruns_max(NT, C2);
        rs.run = (cism__orun *)malloc(sizeof(cism__orun) * (size_t)rs.cap);
        rs.places = malloc((size_t)CISM__ORUN_PLACE_BYTES * (size_t)rs.cap);
        bad.run = (cism__orun *)malloc(sizeof(cism__orun));
        bad.places = NULL;
        CHECK(rs.run && rs.places && bad.run);
        cism__oruns_build(&rs, xs, ldq, C2, NT); /* the room cism__oruns_max gives is enough */
        CHECK_MSG(rs.xq == xs && rs.n > 2 && rs.n <= rs.cap && rs.run[rs.n - 1].t1 == NT, "%d tokens: %d runs in room for %d",
                  (int)NT, rs.n, rs.cap);
        memset(y2, 0, NT * LR * sizeof(float)); /* all of them, in row ranges off the 16-row grid */
        fused(k, dt, wq, rb, C2, xs, ldq, y2, LR, NT, 0, 5, &rs);
        fused(k, dt, wq, rb, C2, xs, ldq, y2, LR, NT, 5, 37, &rs);
        fused(k, dt, wq, rb, C2, xs, ldq, y2, LR, NT, 37, LR, &rs);
        CHECK_MSG(memcmp(y1, y2, NT * LR * sizeof(float)) == 0, "%s on %s, %d tokens in %d runs listed beforehand: "
                  "not the scalar tier's bits", cism_dtype_name(dt), k->name, (int)NT, rs.n);
        if (k->oplaces_build) { /* with the runs' places too (forward.c's, once per stage) */
            const int32_t ch0 = rs.run[1].ch[0];
            k->oplaces_build(&rs, dt, wq, (uint64_t)rb);
            CHECK_MSG(rs.pl_dtype == dt && rs.pl_rb == (uint64_t)rb, "%s on %s: no places built", cism_dtype_name(dt),
                      k->name);
            memset(y2, 0, NT * LR * sizeof(float));
            fused(k, dt, wq, rb, C2, xs, ldq, y2, LR, NT, 0, 5, &rs);
            fused(k, dt, wq, rb, C2, xs, ldq, y2, LR, NT, 5, 37, &rs);
            fused(k, dt, wq, rb, C2, xs, ldq, y2, LR, NT, 37, LR, &rs);
            CHECK_MSG(memcmp(y1, y2, NT * LR * sizeof(float)) == 0, "%s on %s, %d tokens with their places listed "
                      "beforehand: not the scalar tier's bits", cism_dtype_name(dt), k->name, (int)NT);
            rs.run[1].ch[0] = (ch0 + 1) % C2; /* places of other channels are used: a wrong result */
            k->oplaces_build(&rs, dt, wq, (uint64_t)rb);
            rs.run[1].ch[0] = ch0;
            fused(k, dt, wq, rb, C2, xs, ldq, y2, LR, NT, 0, LR, &rs);
            CHECK_MSG(memcmp(y1, y2, NT * LR * sizeof(float)) != 0, "%s on %s: the listed places were not used",
                      cism_dtype_name(dt), k->name);
            rs.pl_rb = (uint64_t)rb + 1; /* places of another row size: not used */
            fused(k, dt, wq, rb, C2, xs, ldq, y2, LR, NT, 0, LR, &rs);
            CHECK_MSG(memcmp(y1, y2, NT * LR * sizeof(float)) == 0, "%s on %s: places of another layout were used",
                      cism_dtype_name(dt), k->name);
            k->oplaces_build(&rs, CISM_DTYPE_Q8, wq, (uint64_t)rb); /* a row layout: none */
            CHECK(rs.pl_dtype == -1);
            cism__oruns_build(&rs, xs, ldq, C2, NT);
            CHECK_MSG(rs.pl_dtype == -1, "new runs keep the places of the old ones");
        }
        rs.cap = 2; /* the middle tokens' channels take more runs than it holds */
        cism__oruns_build(&rs, xs, ldq, C2, NT);
        CHECK_MSG(rs.xq == NULL, "%d tokens: %d runs, expected more than 2", (int)NT, rs.n);
        rs.cap = (int)cism__oruns_max(NT, C2);
        cism__oruns_build(&rs, xs, ldq, C2, 100); /* the first 100 share two channels: one run */
        CHECK(rs.xq == xs && rs.n == 1 && rs.run[0].t1 == 100 && rs.run[0].n >= 2);
        memset(y2, 0, NT * LR * sizeof(float));
        fused(k, dt, wq, rb, C2, xs, ldq, y2, LR, 100, 0, 5, &rs);
        fused(k, dt, wq, rb, C2, xs, ldq, y2, LR, 100, 5, LR, &rs);
        fused(k, dt, wq, rb, C2, xs + 100 * ldq, ldq, y2 + 100 * LR, LR, NT - 100, 0, LR, &rs); /* other rows: not used */
        CHECK_MSG(memcmp(y1, y2, NT * LR * sizeof(float)) == 0, "%s on %s, fused entry with listed runs: not the scalar "
                  "tier's bits", cism_dtype_name(dt), k->name);
        bad.xq = rs.xq; /* the runs are used: a wrong channel in them changes the result */
        bad.ldq = rs.ldq;
        bad.nt = rs.nt;
        bad.n = bad.cap = 1;
        bad.run[0] = rs.run[0];
        bad.run[0].ch[0] = (bad.run[0].ch[0] + 1) % C2;
        fused(k, dt, wq, rb, C2, xs, ldq, y2, LR, 100, 0, LR, &bad);
        CHECK_MSG(memcmp(y1, y2, 100 * LR * sizeof(float)) != 0, "%s on %s: the listed runs were not used",
                  cism_dtype_name(dt), k->name);
        free(rs.run);
        free(rs.places);
        free(bad.run);
    }
    { /* few tokens (the token kernels), from the middle of the call (each token its own channels) and from the
         end (tokens sharing channels, several of them: x86's fused entry decodes each distinct column once) */
        static const int64_t few[] = {1, 2, 3, 5, 8, 9, 17}, from[] = {200, 450};
        size_t i;
        for (i = 0; i < 2 * sizeof(few) / sizeof(few[0]); i++) {
            const uint8_t *x0 = xs + from[i % 2] * ldq;
            const int64_t n = few[i / 2];
            ref->matmul_a8[dt](wq, (uint64_t)rb, C2, x0, ldq, y1, LR, n, 0, LR);
            cism__act8_add_outliers(ref, dt, wq, (uint64_t)rb, x0, ldq, y1, LR, n, 0, LR);
            k->matmul_a8[dt](wq, (uint64_t)rb, C2, x0, ldq, y2, LR, n, 0, LR);
            cism__act8_add_outliers(k, dt, wq, (uint64_t)rb, x0, ldq, y2, LR, n, 0, LR);
            CHECK_MSG(memcmp(y1, y2, (size_t)(n * LR) * sizeof(float)) == 0, "%s on %s, %d tokens: not the "
                      "scalar tier's bits", cism_dtype_name(dt), k->name, (int)n);
            if (has_fused(k, dt, n)) { /* the fused entry, rows off the 8-row grid */
                memset(y2, 0, (size_t)(n * LR) * sizeof(float));
                fused(k, dt, wq, rb, C2, x0, ldq, y2, LR, n, 0, 5, NULL);
                fused(k, dt, wq, rb, C2, x0, ldq, y2, LR, n, 5, LR, NULL);
                CHECK_MSG(memcmp(y1, y2, (size_t)(n * LR) * sizeof(float)) == 0, "%s on %s, %d tokens, fused entry: "
                          "not the scalar tier's bits", cism_dtype_name(dt), k->name, (int)n);
            }
        }
    }
    free(w); free(wq); free(xs); free(y1); free(y2); free(y3);
}

/* A row of 32,864 channels: outlier channels in blocks beyond the 1,024
   that the x86 epilogue finds by a map (x86_outliers.h OBLK_MAP; past it, a
   search), several in one block (their scales widened once), and two in
   block 0. 40 tokens: the run-by-run path (and the AMX tiles). */
static void test_wide_call(const cism__kernels *k, const cism__kernels *ref, int32_t dt) {
    enum { NT = 40, CW = 32 * 1024 + 96, LR = 16, NCH = 6 };
    static const int32_t ch[NCH] = {5, 7, 32770, 32771, 32790, 32853};
    static const float big[NCH] = {41.123457f, -30.345679f, 35.456789f, -28.567891f, 33.678912f, -39.789123f};
    const int64_t rb = cism_dtype_row_bytes(dt, CW), ldq = ldq_of(CW);
    int64_t r, c, t, got = 0;
    float *w = (float *)malloc(sizeof(float) * LR * CW), *x = (float *)malloc(sizeof(float) * CW);
    float *tmp = (float *)malloc(sizeof(float) * 4 * ((CW + 31) / 32));
    uint8_t *wq = (uint8_t *)malloc((size_t)(rb * LR)), *xs = (uint8_t *)calloc(NT, (size_t)ldq);
    float *y1 = (float *)calloc(NT * LR, sizeof(float)), *y2 = (float *)calloc(NT * LR, sizeof(float));
    int j, far = 0;
    CHECK(w && x && tmp && wq && xs && y1 && y2);
    for (r = 0; r < LR * CW; r++) w[r] = 0.05f * frand();
    CHECK_OK(cism_quantize(dt, w, LR, CW, NULL, wq, rb * LR, &got, 1));
    for (t = 0; t < NT; t++) {
        const cism__act8_out *ot = (const cism__act8_out *)(const void *)(xs + (t + 1) * ldq - (int64_t)sizeof(cism__act8_out));
        for (c = 0; c < CW; c++) x[c] = 0.5f * frand();
        for (j = 0; j < 2 + t % (NCH - 1); j++) x[ch[j]] = big[j] * (1.0f + (float)t / 64.0f);
        cism__act8_quantize_split(ref, x, CW, xs + t * ldq, ldq, tmp);
        for (j = 0; j < ot->n; j++) far += ot->idx[j] >= 32 * 1024;
    }
    CHECK_MSG(far > NT, "%d entries beyond channel 32768, meant to be more than %d", far, (int)NT);
    ref->matmul_a8[dt](wq, (uint64_t)rb, CW, xs, ldq, y1, LR, NT, 0, LR);
    cism__act8_add_outliers(ref, dt, wq, (uint64_t)rb, xs, ldq, y1, LR, NT, 0, LR);
    k->matmul_a8[dt](wq, (uint64_t)rb, CW, xs, ldq, y2, LR, NT, 0, LR);
    cism__act8_add_outliers(k, dt, wq, (uint64_t)rb, xs, ldq, y2, LR, NT, 0, LR);
    CHECK_MSG(memcmp(y1, y2, NT * LR * sizeof(float)) == 0, "%s on %s, %d columns: not the scalar tier's bits",
              cism_dtype_name(dt), k->name, (int)CW);
    if (has_fused(k, dt, NT)) {
        memset(y2, 0, NT * LR * sizeof(float));
        fused(k, dt, wq, rb, CW, xs, ldq, y2, LR, NT, 0, LR, NULL);
        CHECK_MSG(memcmp(y1, y2, NT * LR * sizeof(float)) == 0, "%s on %s, %d columns, fused entry: not the scalar "
                  "tier's bits", cism_dtype_name(dt), k->name, (int)CW);
    }
    free(w); free(x); free(tmp); free(wq); free(xs); free(y1); free(y2);
}

/* Whether the first n values at x hold a NaN */
static int memchr_nan(const float *x, int64_t n) {
    int64_t i;
    for (i = 0; i < n; i++)
        if (x[i] != x[i]) return 1;
    return 0;
}

/* The tier's block statistics are the scalar tier's, bit for bit, on blocks
   with ties, signed zeros, subnormals, infinities and NaNs; its fused
   quantize_act_top2 gives quantize_act's bytes and those statistics (or
   reports the NaN); and the split of a row gives the scalar tier's table. */
static void test_top2(const cism__kernels *k, const cism__kernels *ref) {
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x7f800000u, 0xff800000u,
                                       0x7fc00000u, 0xffc00001u, 0x3f800000u, 0xbf800000u};
    enum { NBLK = 64 };
    float x[NBLK * 32], a1[NBLK], a2[NBLK], b1[NBLK], b2[NBLK], tmp[TMP];
    int b, i;
    for (b = 0; b < NBLK; b++)
        for (i = 0; i < 32; i++) {
            float v = frand();
            uint32_t u;
            if (b % 4 == 1 && i % 7 == 0) v = 0.75f;                /* a repeated max */
            if (b % 4 == 2) v = (i == b % 32) ? -2.0f : 0.5f;        /* one max, many equal seconds */
            if (b % 8 == 4 && (i == 5 || i == 13)) v = i == 5 ? 3.0f : -3.0f; /* a max twice, 8 apart */
            if (b % 8 == 0 && (i == 6 || i == 22)) v = i == 6 ? 3.0f : 2.5f;  /* the top two, 16 apart */
            memcpy(&u, &v, 4);
            if (b % 4 == 3 && i % 5 == b % 5) u = special[(b + i) % 10];
            if (b == 0) u = 0x80000000u;                             /* all -0 */
            memcpy(&x[b * 32 + i], &u, 4);
        }
    ref->act_block_top2(x, NBLK, a1, a2);
    (k->act_block_top2 ? k->act_block_top2 : ref->act_block_top2)(x, NBLK, b1, b2);
    CHECK_MSG(memcmp(a1, b1, sizeof(a1)) == 0 && memcmp(a2, b2, sizeof(a2)) == 0,
              "%s: block statistics differ from the scalar tier's", k->name);
    if (k->quantize_act_top2) { /* the fused pass: quantize_act's bytes and the statistics, tails zero-padded; */
        static const int64_t ns[] = {1, 17, 31, 32, 33, 100, 250, NBLK * 32};
        static float clean[NBLK * 32]; /* x with its NaNs as 7 (the infinities, zeros and ties stay) */
        const float *src = x;
        size_t c;
        for (i = 0; i < NBLK * 32; i++) clean[i] = x[i] == x[i] ? x[i] : 7.0f;
        for (c = 0; c < 2 * sizeof(ns) / sizeof(ns[0]); c++) {
            const int64_t n = ns[c % (sizeof(ns) / sizeof(ns[0]))], nb = (n + 31) / 32, bytes = cism__act8_row_bytes(n);
            const float *x = c < sizeof(ns) / sizeof(ns[0]) ? src : clean;
            const int has_nan = memchr_nan(x, n);
            float pad[32];
            uint8_t *qa = (uint8_t *)malloc((size_t)bytes), *qb = (uint8_t *)malloc((size_t)bytes);
            ref->quantize_act(x, n, qa);
            ref->act_block_top2(x, n / 32, a1, a2);
            if (n % 32) {
                memset(pad, 0, sizeof(pad));
                memcpy(pad, x + n / 32 * 32, (size_t)(n % 32) * sizeof(float));
                ref->act_block_top2(pad, 1, &a1[n / 32], &a2[n / 32]);
            }
            CHECK_MSG(k->quantize_act_top2(x, n, qb, b1, b2) == has_nan, "%s: quantize_act_top2 n %lld: NaN flag", k->name,
                      (long long)n);
            CHECK_MSG(memcmp(qa, qb, (size_t)bytes) == 0, "%s: quantize_act_top2 n %lld: not quantize_act's bytes", k->name,
                      (long long)n);
            if (!has_nan)
                CHECK_MSG(memcmp(a1, b1, (size_t)nb * 4) == 0 && memcmp(a2, b2, (size_t)nb * 4) == 0,
                          "%s: quantize_act_top2 n %lld: block statistics differ from the scalar tier's", k->name, (long long)n);
            free(qa); free(qb);
        }
        CHECK(memchr_nan(x, NBLK * 32) && !memchr_nan(clean, NBLK * 32));
    }
    for (b = 0; b < 8; b++) {
        uint8_t q1[1024], q2[1024];
        int64_t ldq = ldq_of(COLS);
        const cism__act8_out *o1 = (const cism__act8_out *)(const void *)(q1 + ldq - (int64_t)sizeof(cism__act8_out));
        const cism__act8_out *o2 = (const cism__act8_out *)(const void *)(q2 + ldq - (int64_t)sizeof(cism__act8_out));
        float row[COLS];
        for (i = 0; i < COLS; i++) row[i] = 0.3f * frand();
        for (i = 0; i <= b; i++) row[(37 * i + 11 * b) % COLS] = 9.0f * (float)(i + 1);
        CHECK(ldq <= 1024);
        cism__act8_quantize_split(ref, row, COLS, q1, ldq, tmp);
        cism__act8_quantize_split(k, row, COLS, q2, ldq, tmp);
        CHECK_MSG(o1->n == o2->n && o1->n > 0 && memcmp(o1->idx, o2->idx, (size_t)o1->n * sizeof(o1->idx[0])) == 0 &&
                  memcmp(o1->val, o2->val, (size_t)o1->n * sizeof(o1->val[0])) == 0,
                  "%s: the outlier table differs from the scalar tier's (%d and %d channels)", k->name, o1->n, o2->n);
        CHECK_MSG(memcmp(q1, q2, (size_t)cism__act8_row_bytes(COLS)) == 0, "%s: the int8 blocks of a split row differ from the "
                  "scalar tier's", k->name);
    }
}

/* The tier's act_block_take (every tier has one; the scalar tier's is the C
   code of the rule) against its rule written out: on finite blocks with
   repeated maxima and seconds, signed zeros and subnormals, channels taken
   one after another until the block is all zero, the same positions,
   statistics and changed blocks as a search and the scalar tier's
   act_block_top2. */
static void test_take(const cism__kernels *k, const cism__kernels *ref) {
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x3f800000u, 0xbf800000u};
    int b, i, s, takes = 0;
    CHECK_MSG(k->act_block_take != NULL, "%s: no act_block_take", k->name);
    if (!k->act_block_take) return;
    for (b = 0; b < 200; b++) {
        float v[32], c[32], out[32], m1, m2, r1, r2;
        uint32_t taken = 0, rtaken = 0;
        for (i = 0; i < 32; i++) {
            uint32_t u;
            v[i] = frand() * (b % 3 ? 1.0f : 4.0f);
            if (b % 4 == 1 && i % 6 == 2) v[i] = i % 12 == 2 ? 5.0f : -5.0f; /* the max repeated, both signs */
            if (b % 5 == 2 && i % 9 == 4) v[i] = -0.5f;                        /* a repeated value below it */
            memcpy(&u, &v[i], 4);
            if (b % 7 == 3 && i % 4 == 1) u = special[(b + i) % 6];
            memcpy(&v[i], &u, 4);
        }
        ref->act_block_top2(v, 1, &m1, &m2);
        r1 = m1;
        r2 = m2;
        for (s = 0; s < 32 && r1 > 0.0f; s++, takes++) {
            int at, want;
            for (i = 0; i < 32; i++) c[i] = (rtaken >> i) & 1u ? 0.0f : v[i];
            for (want = 0; fabsf(c[want]) != r1; want++) {}
            c[want] = 0.0f;
            rtaken |= 1u << want;
            ref->act_block_top2(c, 1, &r1, &r2);
            at = k->act_block_take(v, &taken, &m1, &m2, out);
            CHECK_MSG(at == want && taken == rtaken && memcmp(&m1, &r1, 4) == 0 && memcmp(&m2, &r2, 4) == 0 &&
                      memcmp(out, c, sizeof(c)) == 0,
                      "%s: act_block_take, block %d, take %d: position %d (want %d), statistics %g %g (want %g %g)", k->name, b,
                      s, at, want, (double)m1, (double)m2, (double)r1, (double)r2);
        }
    }
    CHECK(takes > 1000);
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
        test_top2(k, ref);
        test_take(k, ref);
        for (d = 0; d < sizeof(DT) / sizeof(DT[0]); d++) {
            test_dtype(k, ref, DT[d]);
            test_long_call(k, ref, DT[d]);
        }
        test_wide_call(k, ref, CISM_DTYPE_Q4A);
        test_wide_call(k, ref, CISM_DTYPE_Q4AX16);
    }
    return test_finish("test_act_outliers");
}
