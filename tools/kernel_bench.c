/* kernel_bench.c - GFLOP/s of each tier's matmul kernels, from cache.
 *
 *   cism-kernel-bench [cols ...]        (default: 576 1536)
 *
 * For every tier this CPU runs and every weight dtype: prefill (64 rows x 96
 * tokens) and decode (256 rows x 1 token), weights and activations small
 * enough for L2, so the numbers show the kernels' compute rate rather than
 * memory bandwidth. Time is the calling thread's CPU time, best of 7 runs of
 * ~10 ms, so other load on the machine disturbs it less than wall time.
 * Links the static library (internal kernel table). */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(_WIN32)
#include <windows.h>
static double cpu_now(void) {
    FILETIME a, b, k, u;
    GetThreadTimes(GetCurrentThread(), &a, &b, &k, &u);
    return ((double)k.dwLowDateTime + (double)u.dwLowDateTime + 4294967296.0 * ((double)k.dwHighDateTime + (double)u.dwHighDateTime)) * 1e-7;
}
#else
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
#endif

static double gflops(const cism__kernels *k, int dt, int64_t rows, int64_t cols, int64_t nt) {
    uint64_t rb = cism__row_bytes(dt, cols);
    uint8_t *w = (uint8_t *)malloc((size_t)(rows * (int64_t)rb));
    float *x = (float *)malloc((size_t)(nt * cols) * 4), *y = (float *)malloc((size_t)(nt * rows) * 4);
    double best = 1e30;
    int64_t i;
    int rep, it, calls = (int)(3e7 / (double)(rows * cols * nt)) + 1;   /* ~10 ms per run */
    for (i = 0; i < rows * (int64_t)rb / 2; i++) ((uint16_t *)w)[i] = (uint16_t)(0x3c00u ^ (uint16_t)(i & 0x3ff));
    for (i = 0; i < nt * cols; i++) x[i] = (float)(i % 13) * 0.01f;
    for (rep = 0; rep < 7; rep++) {
        double t0 = cpu_now(), d;
        for (it = 0; it < calls; it++) k->matmul[dt](w, rb, cols, x, cols, y, rows, nt, 0, rows);
        d = (cpu_now() - t0) / calls;
        if (d < best) best = d;
    }
    free(w); free(x); free(y);
    return 2.0 * (double)(rows * cols * nt) / best / 1e9;
}

int main(int argc, char **argv) {
    int64_t cols_list[8] = {576, 1536};
    int n_cols = 2, i, t, dt;
    if (argc > 1) {
        n_cols = 0;
        for (i = 1; i < argc && n_cols < 8; i++) cols_list[n_cols++] = atoi(argv[i]);
    }
    printf("%s\n%s\n", cism_build_info(), cism_system_info());
    printf("%-8s %-5s %6s | %16s | %16s\n", "tier", "dtype", "cols", "prefill GFLOP/s", "decode GFLOP/s");
    for (t = CISM_TIER_SCALAR; cism_kernel_tier_name(t); t++) {
        const cism__kernels *k = cism__kernels_tier(t);
        if (!k) continue;
        for (dt = 0; dt < CISM__DTYPE_COUNT; dt++)
            for (i = 0; i < n_cols; i++)
                printf("%-8s %-5s %6lld | %16.1f | %16.1f\n", k->name, cism_dtype_name(dt), (long long)cols_list[i],
                       gflops(k, dt, 64, cols_list[i], 96), gflops(k, dt, 256, cols_list[i], 1));
    }
    return 0;
}
