/* test_amx.c - the avx512_amx tier (kernels_amx.c): every interleaved format
 * on AMX tiles gives the scalar tier's bits, and the avx512 tier's, for every
 * token count (full tiles of 16, a last tile of fewer rows, calls of fewer
 * than 32 tokens that take the avx512 kernels, several token blocks), row ranges off the 16-row
 * grid, and rows of more blocks than the nibble unpacking takes at once (64
 * of q4ax16, 128 of q4sx16); a token alone gives the bits it gives inside a
 * prompt; with outlier channels, the tier's entry gives the scalar kernel
 * followed by the C epilogue.
 * Exits 77 (skipped) where the tier cannot run: a CPU without AMX-INT8, or an
 * OS that does not grant the tiles (platform/cpu.c). */
#include "cism.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "model/session.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static uint32_t rng = 4242u;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffffu) / 8388608.0f - 1.0f;
}

static int64_t ldq_of(int64_t cols) {
    return (cism__act8_row_bytes(cols) + (int64_t)sizeof(cism__act8_out) + 63) / 64 * 64;
}

/* three groups of 16; MAXT tokens of 2,100 columns: four token blocks of
   kernels_amx.c (80 tokens fill CISM__X_BLOCK_BYTES), the last of 10 tokens
   (its tile reaches into the block before) */
enum { ROWS = 48, MAXT = 250 };
/* Wider than this, a call's token blocks fit fewer than AMX_MIN_TB tokens in
   CISM__X_BLOCK_BYTES (kernels_amx.c), so the unpacked formats take blocks of
   AMX_MIN_TB: 5,632 columns (TinyLlama's down projection) give 32 tokens a
   block, raised to 64 (q8x16 keeps 32); 33, 80 and MAXT tokens end in a block
   of 1, 16 and 58. */
enum { WIDE = 4096 };

static void test_dtype(const cism__kernels *amx, const cism__kernels *ref, const cism__kernels *avx, int32_t dt, int64_t cols) {
    static const int64_t counts[] = {1, 8, 16, 31, 32, 33, 47, 48, 80, 100, MAXT};
    static const int64_t ranges[][2] = {{0, ROWS}, {5, 37}, {16, 32}};
    const int64_t rb = cism_dtype_row_bytes(dt, cols), ldq = ldq_of(cols), tmp_n = 4 * ((cols + 31) / 32);
    float *w = (float *)malloc(sizeof(float) * ROWS * (size_t)cols), *x = (float *)malloc(sizeof(float) * (size_t)cols);
    float *tmp = (float *)malloc(sizeof(float) * (size_t)tmp_n);
    float *y1 = (float *)malloc(sizeof(float) * ROWS * MAXT), *y2 = (float *)malloc(sizeof(float) * ROWS * MAXT);
    float *y3 = (float *)malloc(sizeof(float) * ROWS * MAXT), *y4 = (float *)malloc(sizeof(float) * ROWS);
    uint8_t *wq = (uint8_t *)malloc((size_t)(rb * ROWS)), *xq = (uint8_t *)calloc(MAXT, (size_t)ldq);
    int64_t i, t, got = 0;
    size_t ci, ri;
    CHECK(w && x && tmp && y1 && y2 && y3 && y4 && wq && xq);
    for (i = 0; i < ROWS * cols; i++) w[i] = 0.05f * frand();
    CHECK_OK(cism_quantize(dt, w, ROWS, cols, NULL, wq, rb * ROWS, &got, 1));
    for (t = 0; t < MAXT; t++) { /* every third token with large channels (outlier entries) */
        for (i = 0; i < cols; i++) x[i] = 0.5f * frand();
        if (t % 3 == 0) {
            x[(t * 37) % cols] = 40.123457f;
            x[(t * 61 + 5) % cols] = -25.345679f;
        }
        cism__act8_quantize_split(ref, x, cols, xq + t * ldq, ldq, tmp);
    }
    for (ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
        for (ri = 0; ri < sizeof(ranges) / sizeof(ranges[0]); ri++) {
            const int64_t nt = counts[ci], r0 = ranges[ri][0], r1 = ranges[ri][1];
            if (cols > WIDE && !(nt == 33 || nt == 80 || nt == MAXT)) continue; /* wide: a few counts (the scalar tier is slow) */
            memset(y1, 0, sizeof(float) * ROWS * MAXT);
            memset(y2, 0, sizeof(float) * ROWS * MAXT);
            memset(y3, 0, sizeof(float) * ROWS * MAXT);
            ref->matmul_a8[dt](wq, (uint64_t)rb, cols, xq, ldq, y1, ROWS, nt, r0, r1);
            amx->matmul_a8[dt](wq, (uint64_t)rb, cols, xq, ldq, y2, ROWS, nt, r0, r1);
            avx->matmul_a8[dt](wq, (uint64_t)rb, cols, xq, ldq, y3, ROWS, nt, r0, r1);
            CHECK_MSG(memcmp(y1, y2, sizeof(float) * ROWS * MAXT) == 0, "%s, %lld columns, %lld tokens, rows %lld..%lld: "
                      "not the scalar tier's bits", cism_dtype_name(dt), (long long)cols, (long long)nt, (long long)r0,
                      (long long)r1);
            CHECK_MSG(memcmp(y3, y2, sizeof(float) * ROWS * MAXT) == 0, "%s, %lld columns, %lld tokens: not the avx512 "
                      "tier's bits", cism_dtype_name(dt), (long long)cols, (long long)nt);
            if (ri == 0 && nt == MAXT) /* each token alone (the avx512 kernel): the bits it got in the call */
                for (t = 0; t < nt; t++) {
                    amx->matmul_a8[dt](wq, (uint64_t)rb, cols, xq + t * ldq, ldq, y4, ROWS, 1, 0, ROWS);
                    CHECK_MSG(memcmp(y4, y2 + t * ROWS, sizeof(float) * ROWS) == 0, "%s, %lld columns: token %lld alone "
                              "differs from the same token in a call of %lld", cism_dtype_name(dt), (long long)cols,
                              (long long)t, (long long)nt);
                }
            /* with the outlier channels: the scalar kernel, then the C epilogue */
            cism__act8_add_outliers(ref, dt, wq, (uint64_t)rb, xq, ldq, y1, ROWS, nt, r0, r1);
            memset(y2, 0, sizeof(float) * ROWS * MAXT);
            if (amx->matmul_a8_outliers[dt])
                amx->matmul_a8_outliers[dt](wq, (uint64_t)rb, cols, xq, ldq, y2, ROWS, nt, r0, r1, NULL);
            CHECK_MSG(amx->matmul_a8_outliers[dt] && memcmp(y1, y2, sizeof(float) * ROWS * MAXT) == 0,
                      "%s, %lld columns, %lld tokens, rows %lld..%lld, outlier channels: not the scalar tier's bits",
                      cism_dtype_name(dt), (long long)cols, (long long)nt, (long long)r0, (long long)r1);
        }
    free(w); free(x); free(tmp); free(y1); free(y2); free(y3); free(y4); free(wq); free(xq);
}

int main(void) {
    /* 2 blocks of 32 (the last partial), 11, 66 (more than the 64 unpacked at once), 176 (WIDE); q4sx16: 3, 21, 132,
       352 of 16 (128) */
    static const int64_t widths[] = {40, 330, 2100, 5632};
    const cism__kernels *amx = cism__kernels_tier(CISM_TIER_AVX512_AMX), *avx = cism__kernels_tier(CISM_TIER_AVX512);
    const cism__kernels *ref = cism__kernels_scalar();
    static const int32_t dtypes[] = {CISM_DTYPE_Q8X16, CISM_DTYPE_Q4SX16, CISM_DTYPE_Q4AX16, CISM_DTYPE_Q6X16,
                                     CISM_DTYPE_Q5X16,  CISM_DTYPE_Q3X16,  CISM_DTYPE_Q2X16};
    size_t i, j;
    if (!amx || !avx) {
        printf("test_amx: skipped, this build or CPU has no avx512_amx tier\n");
        return 77;
    }
    for (i = 0; i < sizeof(widths) / sizeof(widths[0]); i++) {
        for (j = 0; j < sizeof(dtypes) / sizeof(dtypes[0]); j++) test_dtype(amx, ref, avx, dtypes[j], widths[i]);
    }
    return test_finish("test_amx");
}
