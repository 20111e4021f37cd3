/* test_kernels.c - the scalar reference kernels against straightforward
 * double-precision computations, and every other compiled tier that this CPU
 * runs against the scalar tier (bounds stated per op). */
#include "kernels/kernels.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

static uint32_t rng = 777u;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffffu) / 8388608.0f - 1.0f;
}

static void fill(float *x, int64_t n) { int64_t i; for (i = 0; i < n; i++) x[i] = frand(); }

/* reference matmul in double from f32 weights */
static double ref_dot(const float *w, const float *x, int64_t n) {
    double s = 0;
    int64_t i;
    for (i = 0; i < n; i++) s += (double)w[i] * (double)x[i];
    return s;
}

static void test_matmul(const cism__kernels *k, int dtype, int64_t rows, int64_t cols, int64_t nt) {
    float *w = (float *)malloc((size_t)(rows * cols) * 4), *x = (float *)malloc((size_t)(nt * cols) * 4);
    float *y = (float *)malloc((size_t)(nt * rows) * 4), *wq = (float *)malloc((size_t)(rows * cols) * 4);
    uint16_t *h = (uint16_t *)malloc((size_t)(rows * cols) * 2);
    const void *wdata = w;
    int64_t r, t, i;
    double worst = 0;
    fill(w, rows * cols);
    fill(x, nt * cols);
    for (i = 0; i < rows * cols; i++) {
        if (dtype == CISM_DTYPE_F16) { h[i] = cism__f32_to_f16(w[i]); wq[i] = cism__f16_to_f32(h[i]); }
        else if (dtype == CISM_DTYPE_BF16) { h[i] = cism__f32_to_bf16(w[i]); wq[i] = cism__bf16_to_f32(h[i]); }
        else wq[i] = w[i];
    }
    if (dtype != CISM_DTYPE_F32) wdata = h;
    /* split rows in two calls to check the row range handling */
    k->matmul[dtype](wdata, cism__row_bytes(dtype, cols), cols, x, cols, y, rows, nt, 0, rows / 3);
    k->matmul[dtype](wdata, cism__row_bytes(dtype, cols), cols, x, cols, y, rows, nt, rows / 3, rows);
    for (t = 0; t < nt; t++)
        for (r = 0; r < rows; r++) {
            double ref = ref_dot(wq + r * cols, x + t * cols, cols);
            double e = fabs((double)y[t * rows + r] - ref) / (sqrt((double)cols) + 1.0);
            if (e > worst || e != e) worst = e;
        }
    /* f32 accumulation over cols terms of size <= 1: error well under 1e-5 * sqrt(n) */
    CHECK_MSG(worst < 2e-6, "%s matmul dtype %d %lldx%lld nt %lld: scaled error %g", k->name, dtype,
              (long long)rows, (long long)cols, (long long)nt, worst);
    free(w); free(x); free(y); free(wq); free(h);
}

static void test_elementwise(const cism__kernels *k) {
    float x[300], w[300], out[300], g[300], u[300];
    double ss = 0;
    int i;
    fill(x, 300); fill(w, 300); fill(g, 300); fill(u, 300);
    k->rmsnorm(out, x, w, 300, 1e-5f);
    for (i = 0; i < 300; i++) ss += (double)x[i] * x[i];
    for (i = 0; i < 300; i++) {
        double ref = (double)w[i] * x[i] / sqrt(ss / 300 + 1e-5);
        CHECK_MSG(fabs(out[i] - ref) < 1e-5, "%s rmsnorm %d", k->name, i);
    }
    memcpy(out, g, sizeof(g));
    k->silu_mul(out, u, 300);
    for (i = 0; i < 300; i++) {
        double ref = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        CHECK_MSG(fabs(out[i] - ref) < 1e-6, "%s silu %d", k->name, i);
    }
    {   /* rope: rotate-half pairs (i, i + hd/2) */
        float v[2 * 64], c[32], s[32], orig[2 * 64];
        int h;
        fill(v, 128);
        memcpy(orig, v, sizeof(v));
        for (i = 0; i < 32; i++) { double a = 0.3 * i + 0.1; c[i] = (float)cos(a); s[i] = (float)sin(a); }
        k->rope(v, 2, 64, c, s);
        for (h = 0; h < 2; h++)
            for (i = 0; i < 32; i++) {
                const float *o = orig + h * 64;
                double r0 = (double)o[i] * c[i] - (double)o[i + 32] * s[i];
                double r1 = (double)o[i + 32] * c[i] + (double)o[i] * s[i];
                CHECK(fabs(v[h * 64 + i] - r0) < 1e-6 && fabs(v[h * 64 + i + 32] - r1) < 1e-6);
            }
    }
}

static void test_attention(const cism__kernels *k, int kv_dtype) {
    enum { HD = 64, N = 37 };
    float q[HD], kf[N * HD], vf[N * HD], out[HD], scores[N];
    uint16_t kh[N * HD], vh[N * HD];
    double sc[N], mx = -1e300, sum = 0;
    int t, i;
    fill(q, HD); fill(kf, N * HD); fill(vf, N * HD);
    for (i = 0; i < N * HD; i++) {
        kh[i] = cism__f32_to_f16(kf[i]);
        vh[i] = cism__f32_to_f16(vf[i]);
        if (kv_dtype == CISM_DTYPE_F16) { kf[i] = cism__f16_to_f32(kh[i]); vf[i] = cism__f16_to_f32(vh[i]); }
    }
    k->attention(q, kv_dtype == CISM_DTYPE_F32 ? (const void *)kf : (const void *)kh,
                 kv_dtype == CISM_DTYPE_F32 ? (const void *)vf : (const void *)vh, kv_dtype, N, HD, 0.125f, scores, out);
    for (t = 0; t < N; t++) { sc[t] = ref_dot(q, kf + t * HD, HD) * 0.125; if (sc[t] > mx) mx = sc[t]; }
    for (t = 0; t < N; t++) { sc[t] = exp(sc[t] - mx); sum += sc[t]; }
    for (i = 0; i < HD; i++) {
        double ref = 0;
        for (t = 0; t < N; t++) ref += sc[t] / sum * vf[t * HD + i];
        CHECK_MSG(fabs(out[i] - ref) < 1e-6, "%s attention kv %d: %g vs %g", k->name, kv_dtype, out[i], ref);
    }
}

static void test_tier(const cism__kernels *k) {
    int dt;
    int64_t shapes[][3] = {{1, 1, 1}, {7, 9, 1}, {33, 64, 3}, {16, 300, 5}, {64, 576, 1}, {5, 1000, 9}};
    size_t s;
    for (dt = 0; dt < CISM__DTYPE_COUNT; dt++)
        for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) test_matmul(k, dt, shapes[s][0], shapes[s][1], shapes[s][2]);
    test_elementwise(k);
    test_attention(k, CISM_DTYPE_F32);
    test_attention(k, CISM_DTYPE_F16);
}

int main(void) {
    const char *tiers[] = {"scalar", "avx2", "avx512", "neon", "neon_dotprod", "neon_i8mm"};
    size_t i;
    for (i = 0; i < sizeof(tiers) / sizeof(tiers[0]); i++) {
        const cism__kernels *k = cism__kernels_by_name(tiers[i]);
        if (!k) { printf("tier %s: not available here\n", tiers[i]); continue; }
        printf("tier %s\n", k->name);
        test_tier(k);
    }
    return test_finish("test_kernels");
}
