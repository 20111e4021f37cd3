/* test_kernels.c - every compiled tier this CPU runs: against straightforward
 * double-precision computations, against the scalar tier (bounds stated per op
 * in kernel_bounds.h), and for bitwise independence from how rows and tokens
 * are split (the rule that keeps results independent of the thread count). */
#include "kernels/kernels.h"
#include "kernel_bounds.h"
#include "kernels/quant.h"
#include "kernels/kv_quant.h"
#include "platform/cpu.h"
#include "model/att_fold.h" /* forward.c's combine of the ranges */
#include "cism.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
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

static void to_dtype(int dtype, const float *w, int64_t n, void *out, float *exact);

/* Full softmax attention of one query over N rows, as the split kernel's
   ranges folded in order and divided by the sum (one range, then three of
   16, 1 and 20 rows), against the same in double from the decoded rows. */
static void test_attention(const cism__kernels *k, int kv_dtype, int v_dtype) {
    enum { HD = 64, N = 37 };
    static const int64_t cuts[2][5] = {{0, N, -1}, {0, 16, 17, N, -1}};
    static uint8_t kq[N * HD * 4], vq[N * HD * 4]; /* room for f32 rows */
    float q[HD], kf[N * HD], vf[N * HD], kx[N * HD], vx[N * HD], out[HD], part[HD], ml[2], scores[N];
    double sc[N], mx = -1e300, sum = 0;
    const uint64_t rbk = cism__kv_is_quant(kv_dtype) ? cism__kv_row_bytes(kv_dtype, HD) : (uint64_t)cism__row_bytes(kv_dtype, HD);
    const uint64_t rbv = cism__kv_is_quant(v_dtype) ? cism__kv_row_bytes(v_dtype, HD) : (uint64_t)cism__row_bytes(v_dtype, HD);
    int t, i, c, j;
    fill(q, HD); fill(kf, N * HD); fill(vf, N * HD);
    to_dtype(kv_dtype, kf, N * HD, kq, kx);
    to_dtype(v_dtype, vf, N * HD, vq, vx);
    for (t = 0; t < N; t++) { sc[t] = ref_dot(q, kx + t * HD, HD) * 0.125; if (sc[t] > mx) mx = sc[t]; }
    for (t = 0; t < N; t++) { sc[t] = exp(sc[t] - mx); sum += sc[t]; }
    for (c = 0; c < 2; c++) {
        float acc[2] = {0.0f, 0.0f};
        for (j = 0; cuts[c][j + 1] >= 0; j++) {
            const int64_t r0 = cuts[c][j], n = cuts[c][j + 1] - r0;
            k->attention_split(q, HD, part, HD, ml, 2, 1, 1, kq + (uint64_t)r0 * rbk, vq + (uint64_t)r0 * rbv, kv_dtype,
                               v_dtype, n, n, HD, 0.125f, scores, NULL);
            cism__att_fold(acc, out, ml, part, HD);
        }
        cism__att_finish(acc, out, HD);
        for (i = 0; i < HD; i++) {
            double ref = 0;
            for (t = 0; t < N; t++) ref += sc[t] / sum * vx[t * HD + i];
            CHECK_MSG(fabs(out[i] - ref) < 1e-6, "%s attention K %s V %s in %d range(s): %g vs %g", k->name,
                      cism_dtype_name(kv_dtype), cism_dtype_name(v_dtype), j, out[i], ref);
        }
    }
}


/* ---- every tier against the scalar tier ------------------------------------------ */
enum { OP_MATMUL, OP_MATMUL_PACKED, OP_MATMUL_A8, OP_ATTENTION, OP_RMSNORM, OP_SILU, N_OPS };
static double g_worst[N_OPS]; /* worst observed error / bound per op, for the log */
static const char *const g_op_names[N_OPS] = {"matmul", "matmul_packed", "matmul_a8", "attention", "rmsnorm", "silu_mul"};

static void note(int op, double err, double bound) {
    double r = bound > 0 ? err / bound : (err > 0 ? 1e300 : 0);
    if (r > g_worst[op] || r != r) g_worst[op] = r;
}

static void to_dtype(int dtype, const float *w, int64_t n, void *out, float *exact) {
    int64_t i;
    if (cism__kv_is_quant(dtype)) { /* KV cache rows of 32 (n a multiple of 32): the decoded values are exact */
        uint64_t rb = cism__kv_row_bytes(dtype, 32);
        for (i = 0; i < n; i += 32) {
            cism__kv_quantize_row(dtype, w + i, 32, (uint8_t *)out + (uint64_t)(i / 32) * rb, 1, NULL);
            cism__kv_decode(dtype, (const uint8_t *)out + (uint64_t)(i / 32) * rb, exact + i, 32);
        }
        return;
    }
    for (i = 0; i < n; i++) {
        if (dtype == CISM_DTYPE_F16) { ((uint16_t *)out)[i] = cism__f32_to_f16(w[i]); exact[i] = cism__f16_to_f32(((uint16_t *)out)[i]); }
        else if (dtype == CISM_DTYPE_BF16) { ((uint16_t *)out)[i] = cism__f32_to_bf16(w[i]); exact[i] = cism__bf16_to_f32(((uint16_t *)out)[i]); }
        else { ((float *)out)[i] = w[i]; exact[i] = w[i]; }
    }
}

/* One matmul: against scalar within KB_MATMUL, and bitwise equal however rows
   and tokens are split into calls (the split points are deliberately odd). */
static void matmul_vs_scalar(const cism__kernels *k, const cism__kernels *ref, int dtype, int64_t rows, int64_t cols,
                             int64_t nt) {
    int64_t ldx = cols + 3, ldy = rows + 5, r, t, i;
    uint64_t rb = cism__row_bytes(dtype, cols);
    float *w = (float *)malloc((size_t)(rows * cols) * 4), *wq = (float *)malloc((size_t)(rows * cols) * 4);
    void *wd = malloc((size_t)(rows * cols) * 4);
    float *x = (float *)malloc((size_t)(nt * ldx) * 4);
    float *ys = (float *)calloc((size_t)(nt * ldy), 4), *yk = (float *)calloc((size_t)(nt * ldy), 4);
    float *ysplit = (float *)calloc((size_t)(nt * ldy), 4);
    fill(w, rows * cols);
    fill(x, nt * ldx);
    for (i = 0; i < rows * cols; i += 7) w[i] *= 64.0f;  /* some larger terms */
    to_dtype(dtype, w, rows * cols, wd, wq);
    ref->matmul[dtype](wd, rb, cols, x, ldx, ys, ldy, nt, 0, rows);
    k->matmul[dtype](wd, rb, cols, x, ldx, yk, ldy, nt, 0, rows);
    for (t = 0; t < nt; t++)
        for (r = 0; r < rows; r++) {
            double mag = 0, e = fabs((double)yk[t * ldy + r] - (double)ys[t * ldy + r]);
            for (i = 0; i < cols; i++) mag += fabs((double)wq[r * cols + i] * (double)x[t * ldx + i]);
            note(OP_MATMUL, e, KB_MATMUL(cols) * mag);
            CHECK_MSG(e <= KB_MATMUL(cols) * mag, "%s matmul %s %lldx%lld nt %lld: row %lld token %lld: %.9g vs scalar %.9g",
                      k->name, cism_dtype_name(dtype), (long long)rows, (long long)cols, (long long)nt, (long long)r,
                      (long long)t, yk[t * ldy + r], ys[t * ldy + r]);
        }
    /* rows split at odd points, tokens one call each then in odd groups */
    {
        int64_t cuts[6] = {0, 1, 6, 7, 19, 0}, c;
        cuts[5] = rows;
        for (c = 0; c < 5; c++) {
            int64_t a = cuts[c] < rows ? cuts[c] : rows, b = cuts[c + 1] < rows ? cuts[c + 1] : rows;
            if (c == 4) b = rows;
            if (b <= a) continue;
            if (c % 2 == 0) {
                for (t = 0; t < nt; t++) k->matmul[dtype](wd, rb, cols, x + t * ldx, ldx, ysplit + t * ldy, ldy, 1, a, b);
            } else {
                for (t = 0; t < nt; t += 5) {
                    int64_t n = nt - t < 5 ? nt - t : 5;
                    k->matmul[dtype](wd, rb, cols, x + t * ldx, ldx, ysplit + t * ldy, ldy, n, a, b);
                }
            }
        }
        for (t = 0; t < nt; t++)
            CHECK_MSG(memcmp(ysplit + t * ldy, yk + t * ldy, (size_t)rows * 4) == 0,
                      "%s matmul %s %lldx%lld nt %lld: token %lld differs when rows/tokens are split differently",
                      k->name, cism_dtype_name(dtype), (long long)rows, (long long)cols, (long long)nt, (long long)t);
    }
    free(w); free(wq); free(wd); free(x); free(ys); free(yk); free(ysplit);
}

/* The split kernel (kernels.h cism__attention_split_fn), one query over a range
   of n_kv rows: its partial (max, sum, unnormalised output) against the same in
   double from the decoded rows, and the normalised output against the scalar
   tier's within the attention bound. */
static void split_vs_ref(const cism__kernels *k, const cism__kernels *ref, int kv_dtype, int v_dtype, int64_t hd,
                         int64_t n_kv, float qscale) {
    float *q = (float *)malloc((size_t)hd * 4), *kf = (float *)malloc((size_t)(n_kv * hd) * 4);
    float *vf = (float *)malloc((size_t)(n_kv * hd) * 4), *kx = (float *)malloc((size_t)(n_kv * hd) * 4);
    float *vx = (float *)malloc((size_t)(n_kv * hd) * 4);
    void *kd = malloc((size_t)(n_kv * hd) * 4), *vd = malloc((size_t)(n_kv * hd) * 4);
    float *sc = (float *)malloc((size_t)n_kv * 4), *os = (float *)malloc((size_t)hd * 4), *ok = (float *)malloc((size_t)hd * 4);
    double *s = (double *)malloc((size_t)n_kv * 8), mx = -1e300, sum = 0, dsmax = 0, range = 0;
    float mls[2], mlk[2], scale = (float)(1.0 / sqrt((double)hd));
    int64_t t, i;
    fill(q, hd); fill(kf, n_kv * hd); fill(vf, n_kv * hd);
    for (i = 0; i < hd; i++) q[i] *= qscale;
    to_dtype(kv_dtype, kf, n_kv * hd, kd, kx);
    to_dtype(v_dtype, vf, n_kv * hd, vd, vx);
    ref->attention_split(q, hd, os, hd, mls, 2, 1, 1, kd, vd, kv_dtype, v_dtype, n_kv, n_kv, hd, scale, sc, NULL);
    k->attention_split(q, hd, ok, hd, mlk, 2, 1, 1, kd, vd, kv_dtype, v_dtype, n_kv, n_kv, hd, scale, sc, NULL);
    for (t = 0; t < n_kv; t++) {
        double mag = 0;
        s[t] = ref_dot(q, kx + t * hd, hd) * scale;
        for (i = 0; i < hd; i++) mag += fabs((double)q[i] * kx[t * hd + i]);
        if (scale * KB_MATMUL(hd) * mag > dsmax) dsmax = scale * KB_MATMUL(hd) * mag;
        if (s[t] > mx) mx = s[t];
    }
    for (t = 0; t < n_kv; t++) {
        if (mx - s[t] > range) range = mx - s[t];
        s[t] = exp(s[t] - mx);
        sum += s[t];
    }
    CHECK_MSG(fabs(mlk[0] - mx) <= 2.0 * dsmax + 1e-6 * (1.0 + fabs(mx)) &&
                  fabs(mlk[1] - sum) <= KB_ATTENTION(dsmax, range, n_kv) * sum,
              "%s split attention K %s V %s hd %lld n_kv %lld: max %.9g sum %.9g vs %.9g %.9g in double", k->name,
              cism_dtype_name(kv_dtype), cism_dtype_name(v_dtype), (long long)hd, (long long)n_kv, mlk[0], mlk[1], mx, sum);
    for (i = 0; i < hd; i++) {
        double mag = 0, r = 0, e, b;
        for (t = 0; t < n_kv; t++) {
            mag += s[t] * fabs((double)vx[t * hd + i]);
            r += s[t] * vx[t * hd + i];
        }
        b = KB_ATTENTION(dsmax, range, n_kv) * mag;
        CHECK_MSG(fabs((double)ok[i] - r) <= 2.0 * b + 1e-6 * mag,
                  "%s split attention K %s V %s hd %lld n_kv %lld: out[%lld] %.9g vs %.9g in double", k->name,
                  cism_dtype_name(kv_dtype), cism_dtype_name(v_dtype), (long long)hd, (long long)n_kv, (long long)i, ok[i], r);
        e = fabs((double)ok[i] / mlk[1] - (double)os[i] / mls[1]);
        b = (KB_ATTENTION(dsmax, range, n_kv) + 4.0 * KB_U) * mag / sum;
        note(OP_ATTENTION, e, b);
        CHECK_MSG(e <= b, "%s split attention K %s V %s hd %lld n_kv %lld: out[%lld] / sum %.9g vs scalar %.9g (bound %.3g)",
                  k->name, cism_dtype_name(kv_dtype), cism_dtype_name(v_dtype), (long long)hd, (long long)n_kv, (long long)i,
                  ok[i] / mlk[1], os[i] / mls[1], b);
    }
    free(q); free(kf); free(vf); free(kx); free(vx); free(kd); free(vd); free(sc); free(os); free(ok); free(s);
}

/* A split call for a block of n_tok tokens x n_grp heads (query (a, i) sees
   n_lim + a rows of the n_kv, clamped to [0, n_kv]) gives the same bits as each
   query alone, over the same range and over a range cut to its own rows; a
   query that sees no row gets max -inf, sum 0 and zeros. */
static void split_block(const cism__kernels *k, int kv_dtype, int v_dtype, int64_t hd, int64_t n_kv, int64_t n_lim,
                        int64_t n_tok, int64_t n_grp) {
    int64_t ldq = n_grp * hd + 3, ldo = n_grp * hd + 5, ldm = 2 * n_grp + 1, a, i, c;
    float *q = (float *)malloc((size_t)(n_tok * ldq) * 4), *kf = (float *)malloc((size_t)(n_kv * hd) * 4);
    float *vf = (float *)malloc((size_t)(n_kv * hd) * 4), *kx = (float *)malloc((size_t)(n_kv * hd) * 4);
    float *vx = (float *)malloc((size_t)(n_kv * hd) * 4), *ob = (float *)malloc((size_t)(n_tok * ldo) * 4);
    float *mb = (float *)malloc((size_t)(n_tok * ldm) * 4);
    float *o1 = (float *)malloc((size_t)hd * 4), *sc = (float *)malloc((size_t)(n_tok * n_grp * n_kv) * 4);
    void *kd = malloc((size_t)(n_kv * hd) * 4), *vd = malloc((size_t)(n_kv * hd) * 4);
    float scale = (float)(1.0 / sqrt((double)hd)), m1[2];
    fill(q, n_tok * ldq); fill(kf, n_kv * hd); fill(vf, n_kv * hd);
    for (i = 0; i < n_tok * ldo; i++) ob[i] = 7.0f; /* every output is written */
    to_dtype(kv_dtype, kf, n_kv * hd, kd, kx);
    to_dtype(v_dtype, vf, n_kv * hd, vd, vx);
    k->attention_split(q, ldq, ob, ldo, mb, ldm, n_tok, n_grp, kd, vd, kv_dtype, v_dtype, n_kv, n_lim, hd, scale, sc, NULL);
    for (a = 0; a < n_tok; a++) {
        int64_t na = n_lim + a < 0 ? 0 : n_lim + a > n_kv ? n_kv : n_lim + a;
        for (i = 0; i < n_grp; i++) {
            const float *obi = ob + a * ldo + i * hd, *mbi = mb + a * ldm + 2 * i;
            for (c = 0; c < 2; c++) {
                k->attention_split(q + a * ldq + i * hd, hd, o1, hd, m1, 2, 1, 1, kd, vd, kv_dtype, v_dtype,
                                   c ? (na > 0 ? na : 1) : n_kv, c ? na : n_lim + a, hd, scale, sc, NULL);
                CHECK_MSG(memcmp(o1, obi, (size_t)hd * 4) == 0 && memcmp(m1, mbi, 8) == 0,
                          "%s split attention K %s V %s hd %lld n_kv %lld n_lim %lld: block of %lld tokens x %lld heads "
                          "differs from query (%lld, %lld) alone over %s", k->name, cism_dtype_name(kv_dtype),
                          cism_dtype_name(v_dtype), (long long)hd, (long long)n_kv, (long long)n_lim, (long long)n_tok,
                          (long long)n_grp, (long long)a, (long long)i, c ? "its own rows" : "the same range");
            }
            if (na == 0) {
                int zero = 1;
                for (c = 0; c < hd; c++) zero &= obi[c] == 0.0f;
                CHECK_MSG(zero && isinf(mbi[0]) && mbi[0] < 0 && mbi[1] == 0.0f,
                          "%s split attention: a query without rows gives max %g sum %g", k->name, mbi[0], mbi[1]);
            }
        }
    }
    free(q); free(kf); free(vf); free(kx); free(vx); free(ob); free(mb); free(o1); free(sc); free(kd); free(vd);
}

static void split_vs_scalar(const cism__kernels *k, const cism__kernels *ref, const int64_t *hds, size_t n_hd) {
    static const int64_t nkv[] = {1, 7, 8, 9, 33, 100, 256};
    size_t h, n;
    for (h = 0; h < n_hd; h++) {
        for (n = 0; n < sizeof(nkv) / sizeof(nkv[0]); n++) {
            split_vs_ref(k, ref, CISM_DTYPE_F32, CISM_DTYPE_F32, hds[h], nkv[n], 1.0f);
            split_vs_ref(k, ref, CISM_DTYPE_F16, CISM_DTYPE_F16, hds[h], nkv[n], n % 2 ? 8.0f : 1.0f);
            if (hds[h] % 32 == 0) {
                split_vs_ref(k, ref, CISM_DTYPE_Q8, CISM_DTYPE_Q8, hds[h], nkv[n], n % 2 ? 1.0f : 8.0f);
                split_vs_ref(k, ref, CISM_DTYPE_Q4A, CISM_DTYPE_Q4A, hds[h], nkv[n], n % 2 ? 8.0f : 1.0f);
                split_vs_ref(k, ref, CISM_DTYPE_Q8, CISM_DTYPE_Q4A, hds[h], nkv[n], n % 2 ? 8.0f : 1.0f);
                split_vs_ref(k, ref, CISM_DTYPE_F16, CISM_DTYPE_Q8, hds[h], nkv[n], n % 2 ? 1.0f : 8.0f);
                split_vs_ref(k, ref, CISM_DTYPE_F16, CISM_DTYPE_Q4A, hds[h], nkv[n], n % 2 ? 8.0f : 1.0f);
                split_vs_ref(k, ref, CISM_DTYPE_Q4A, CISM_DTYPE_F32, hds[h], nkv[n], 1.0f);
            }
        }
        /* blocks crossing the range's start (n_lim <= 0 for the first queries) and its end (n_lim + a > n_kv) */
        split_block(k, CISM_DTYPE_F32, CISM_DTYPE_F32, hds[h], 9, -2, 4, 3);
        split_block(k, CISM_DTYPE_F16, CISM_DTYPE_F16, hds[h], 70, 68, 5, 2);
        split_block(k, CISM_DTYPE_F16, CISM_DTYPE_F16, hds[h], 256, 256, 3, 1);
        if (hds[h] % 32 == 0) {
            split_block(k, CISM_DTYPE_Q8, CISM_DTYPE_Q8, hds[h], 130, 127, 4, 2);
            split_block(k, CISM_DTYPE_Q4A, CISM_DTYPE_Q4A, hds[h], 3, -1, 4, 3);
            split_block(k, CISM_DTYPE_Q4A, CISM_DTYPE_Q4A, hds[h], 130, 128, 3, 3); /* q4a over three K/V blocks */
            split_block(k, CISM_DTYPE_Q8, CISM_DTYPE_Q4A, hds[h], 200, 1, 4, 7);
            split_block(k, CISM_DTYPE_F16, CISM_DTYPE_Q8, hds[h], 65, 64, 4, 3);
        }
    }
}

static float special(int i) {
    static const float v[] = {0.0f, -0.0f, 1.0f, -1.0f, 100.0f, -100.0f, 88.5f, -88.5f, 87.0f, -87.0f, 1e-3f, -1e-3f,
                              1e-30f, -1e-30f, 15.0f, -15.0f, 3.0e4f, -3.0e4f, 65519.0f, 65520.0f, 6.0e-8f, 3.0e-8f, 2.9e-8f,
                              6.1e-5f, 1.0009765625f, 1.00048828125f, 1.00146484375f};
    return v[i % (int)(sizeof(v) / sizeof(v[0]))];
}

static void elementwise_vs_scalar(const cism__kernels *k, const cism__kernels *ref) {
    enum { N = 613 };
    float x[N], w[N], a[N], b[N], g[N], u[N];
    uint16_t ha[N], hb[N];
    int64_t ns[] = {1, 7, 8, 15, 64, 300, 577, N};
    size_t c;
    int i;
    fill(x, N); fill(w, N); fill(g, N); fill(u, N);
    for (i = 0; i < N; i += 5) g[i] = special(i / 5) * 0.5f;
    for (i = 0; i < N; i += 3) g[i] *= 40.0f;
    for (c = 0; c < sizeof(ns) / sizeof(ns[0]); c++) {
        int64_t n = ns[c];
        ref->rmsnorm(a, x, w, n, 1e-5f);
        k->rmsnorm(b, x, w, n, 1e-5f);
        for (i = 0; i < n; i++) {
            double e = fabs((double)a[i] - b[i]);
            note(OP_RMSNORM, e, KB_RMSNORM * fabs(a[i]));
            CHECK_MSG(e <= KB_RMSNORM * fabs(a[i]), "%s rmsnorm n %lld [%d]: %.9g vs %.9g", k->name, (long long)n, i, b[i], a[i]);
        }
        memcpy(a, g, sizeof(g)); memcpy(b, g, sizeof(g));
        ref->silu_mul(a, u, n);
        k->silu_mul(b, u, n);
        for (i = 0; i < n; i++) {
            double e = fabs((double)a[i] - b[i]), bound = KB_SILU_REL * fabs(a[i]) + KB_SILU_ABS;
            note(OP_SILU, e, bound);
            CHECK_MSG(e <= bound, "%s silu_mul n %lld gate %.9g: %.9g vs %.9g", k->name, (long long)n, g[i], b[i], a[i]);
        }
        CHECK_MSG(b[n < N ? n : N - 1] == g[n < N ? n : N - 1] || n == N, "%s silu_mul wrote past n", k->name);
    }
    { /* rope on several head sizes: bit-identical */
        int64_t hds[] = {2, 8, 16, 20, 64, 128};
        float cs[64], sn[64];
        for (i = 0; i < 64; i++) { cs[i] = (float)cos(0.37 * i + 0.2); sn[i] = (float)sin(0.37 * i + 0.2); }
        for (c = 0; c < sizeof(hds) / sizeof(hds[0]); c++) {
            memcpy(a, x, sizeof(x)); memcpy(b, x, sizeof(x));
            ref->rope(a, 3, hds[c], cs, sn);
            k->rope(b, 3, hds[c], cs, sn);
            CHECK_MSG(memcmp(a, b, sizeof(a)) == 0, "%s rope head_dim %lld differs from scalar", k->name, (long long)hds[c]);
        }
    }
    { /* f32 -> f16: identical bits for every special value; NaN stays NaN */
        float src[N];
        uint32_t nanbits = 0x7fc00001u;
        for (i = 0; i < N; i++) src[i] = i % 3 == 0 ? special(i / 3) * (i % 2 ? -1.0f : 1.0f) : x[i] * (float)(1 << (i % 17));
        src[5] = INFINITY; src[11] = -INFINITY;
        memcpy(&src[17], &nanbits, 4);
        for (c = 0; c < sizeof(ns) / sizeof(ns[0]); c++) {
            memset(ha, 0, sizeof(ha)); memset(hb, 0, sizeof(hb));
            ref->f32_to_f16(src, ha, ns[c]);
            k->f32_to_f16(src, hb, ns[c]);
            for (i = 0; i < N; i++) {
                int nan_a = (ha[i] & 0x7c00u) == 0x7c00u && (ha[i] & 0x3ffu), nan_b = (hb[i] & 0x7c00u) == 0x7c00u && (hb[i] & 0x3ffu);
                CHECK_MSG(nan_a ? nan_b : ha[i] == hb[i], "%s f32_to_f16 n %lld [%d] %.9g: %04x vs %04x", k->name,
                          (long long)ns[c], i, src[i], hb[i], ha[i]);
            }
        }
    }
    { /* f16/bf16 -> f32 for all 65536 patterns */
        uint16_t *all = (uint16_t *)malloc(65536 * 2);
        float *fa = (float *)malloc(65536 * 4), *fb = (float *)malloc(65536 * 4);
        int dt;
        for (i = 0; i < 65536; i++) all[i] = (uint16_t)i;
        for (dt = 0; dt <= CISM_DTYPE_BF16; dt++) { /* float types; packed ones: test_quant_matmul */
            int64_t n = dt == CISM_DTYPE_F32 ? 32768 : 65535; /* odd length: exercises the tail */
            ref->row_to_f32[dt](all, fa, n);
            k->row_to_f32[dt](all, fb, n);
            for (i = 0; i < n; i++)
                if (!(fa[i] != fa[i] && fb[i] != fb[i]) && memcmp(&fa[i], &fb[i], 4) != 0) {
                    CHECK_MSG(0, "%s row_to_f32 %s element %d: %.9g vs %.9g", k->name, cism_dtype_name(dt), i, fb[i], fa[i]);
                    break;
                }
        }
        free(all); free(fa); free(fb);
    }
}

/* ---- packed weights against the scalar tier --------------------------------------------- */
static uint32_t rnd(void) { rng = rng * 1664525u + 1013904223u; return rng >> 8; }

/* rows x cols weights of a packed dtype as random bytes: every code (q8's
   -128 included: GGUF Q8_0 files hold it), scales over a wide range (fp16:
   either sign, 2^-10 .. 4, some zero; q4a's minimum likewise; E4M3: every code
   but the two NaNs, or when all_scales every code in turn, NaNs included),
   random padding codes (which no kernel may let into a result). q6/q5 with
   all_scales == 2: blocks in turn of every code at its top (level H - 1), at
   0 (level -H), and random, the extreme levels of their decoders. */
static void random_packed(int32_t dt, int64_t rows, int64_t cols, uint8_t *p, int all_scales) {
    const cism__fmt4 *f = cism__fmt4_of(cism__dtype_base(dt));
    if (cism__dtype_is_x16(dt)) { /* random rows of the base format, interleaved 16 at a time */
        int64_t rb = cism_dtype_row_bytes(dt, cols), g;
        uint8_t *plain = (uint8_t *)malloc((size_t)(rows * rb));
        random_packed(cism__dtype_base(dt), rows, cols, plain, all_scales);
        for (g = 0; g < rows; g += CISM__X16) cism__x16_interleave(dt, plain + g * rb, (uint64_t)rb, p + g * rb);
        free(plain);
        return;
    }
    int64_t B = f ? f->block : CISM__Q8_BLOCK, nb = (cols + B - 1) / B, i, j, k;
    int64_t bb = f ? f->block_bytes : dt == CISM_DTYPE_Q4A ? CISM__Q4A_BYTES : cism__dtype_is_qint(dt) ? cism__qint_bytes(dt) : CISM__Q8_BYTES;
    for (i = 0; i < rows * nb; i++) {
        uint8_t *blk = p + i * bb;
        for (j = 0; j < bb; j++) blk[j] = (uint8_t)rnd();
        if (all_scales == 2 && cism__dtype_is_qint(dt) && i % 3 < 2)
            for (j = 2; j < bb; j++) blk[j] = i % 3 ? 0 : 0xff;
        if (!f || f->scale_kind == CISM__SCALE_F16) {
            for (k = 0; k < (dt == CISM_DTYPE_Q4A ? 2 : 1); k++) { /* q4a: the scale, then the minimum */
                float d = ldexpf(1.0f + (float)(rnd() % 1000) / 1000.0f, -10 + (int)(rnd() % 12)) * (rnd() & 1 ? -1.0f : 1.0f);
                uint16_t h = i % (13 - 2 * k) == 5 ? 0 : cism__f32_to_f16(d);
                blk[2 * k] = (uint8_t)(h & 0xff);
                blk[2 * k + 1] = (uint8_t)(h >> 8);
            }
        } else {
            blk[0] = all_scales ? (uint8_t)i : (uint8_t)((rnd() % 0x7f) | (rnd() & 0x80));
        }
    }
}

static int same_bits(float a, float b) { return (a != a && b != b) || memcmp(&a, &b, 4) == 0; }

/* One matmul of a packed dtype, float or int8 activations, called with rows
   split at odd points, tokens one call each and in groups of 5: the bits of
   the whole call (rows and tokens tiled differently, one token alone). */
static void packed_split(const cism__kernels *k, int32_t dt, int a8, const uint8_t *p, uint64_t rb, int64_t rows, int64_t cols,
                         const float *x, int64_t ldx, const uint8_t *xq, int64_t aq, float *y, int64_t ldy, int64_t nt,
                         const float *whole) {
    /* token groups of 1..8: the kernels switch paths by token count (decode,
       batched decode, GEMM tiles) and every path must give the same bits */
    int64_t cuts[6] = {0, 1, 6, 7, 19, 0}, steps[5] = {1, 3, 8, 2, 5}, c, t;
    cuts[5] = rows;
    for (c = 0; c < 5; c++) {
        int64_t a = cuts[c] < rows ? cuts[c] : rows, b = c == 4 ? rows : (cuts[c + 1] < rows ? cuts[c + 1] : rows);
        int64_t step = steps[c];
        if (b <= a) continue;
        for (t = 0; t < nt; t += step) {
            int64_t n = nt - t < step ? nt - t : step;
            if (a8) k->matmul_a8[dt](p, rb, cols, xq + t * aq, aq, y + t * ldy, ldy, n, a, b);
            else k->matmul[dt](p, rb, cols, x + t * ldx, ldx, y + t * ldy, ldy, n, a, b);
        }
    }
    for (t = 0; t < nt; t++)
        CHECK_MSG(memcmp(y + t * ldy, whole + t * ldy, (size_t)rows * 4) == 0,
                  "%s %s %s %lldx%lld nt %lld: token %lld differs when rows/tokens are split differently", k->name,
                  a8 ? "matmul_a8" : "matmul", cism_dtype_name(dt), (long long)rows, (long long)cols, (long long)nt, (long long)t);
}

/* quantize_act, the float-activation and the int8-activation matmul of a packed
   dtype against the scalar tier: quantize_act bit-identical; float activations
   within KB_MATMUL; int8 activations within KB_MATMUL_A8 and, for the tiers
   that promise it, bit-identical; all bit-identical however the work is split. */
static void packed_vs_scalar(const cism__kernels *k, const cism__kernels *ref, int32_t dt, int64_t rows, int64_t cols,
                             int64_t nt, int all_scales) {
    const cism__fmt4 *f = cism__fmt4_of(cism__dtype_base(dt));
    const int64_t B = f ? f->block : CISM__Q8_BLOCK, nb = (cols + B - 1) / B, ldx = cols + 3, ldy = rows + 5;
    const int64_t aq = cism__act8_row_bytes(cols);
    const uint64_t rb = (uint64_t)cism_dtype_row_bytes(dt, cols);
    void (*qa)(const float *, int64_t, void *) = k->quantize_act ? k->quantize_act : ref->quantize_act;
    cism__kernels kk = *k;
    uint8_t *p = (uint8_t *)malloc((size_t)(rows * (int64_t)rb)), *xq = (uint8_t *)malloc((size_t)(nt * aq));
    uint8_t *xq_ref = (uint8_t *)malloc((size_t)(nt * aq));
    float *wq = (float *)malloc((size_t)(rows * cols) * 4), *x = (float *)malloc((size_t)(nt * ldx) * 4);
    float *ys = (float *)calloc((size_t)(nt * ldy), 4), *yk = (float *)calloc((size_t)(nt * ldy), 4);
    float *ysplit = (float *)calloc((size_t)(nt * ldy), 4);
    int64_t r, t, i, b;
    int exact = KB_A8_EXACT(k->name);
    if (!kk.matmul_a8[dt]) kk.matmul_a8[dt] = ref->matmul_a8[dt];
    random_packed(dt, rows, cols, p, all_scales);
    for (r = 0; r < rows; r++) cism__matrix_row_f32(dt, p, rb, cols, r, wq + r * cols);
    fill(x, nt * ldx);
    for (i = 0; i < nt * ldx; i += 11) x[i] *= 16.0f;
    for (t = 0; t < nt; t++) {
        ref->quantize_act(x + t * ldx, cols, xq_ref + t * aq);
        qa(x + t * ldx, cols, xq + t * aq);
    }
    CHECK_MSG(memcmp(xq, xq_ref, (size_t)(nt * aq)) == 0, "%s quantize_act cols %lld differs from scalar", k->name, (long long)cols);

    /* float activations */
    ref->matmul[dt](p, rb, cols, x, ldx, ys, ldy, nt, 0, rows);
    kk.matmul[dt](p, rb, cols, x, ldx, yk, ldy, nt, 0, rows);
    for (t = 0; t < nt; t++)
        for (r = 0; r < rows; r++) {
            double mag = 0, e = fabs((double)yk[t * ldy + r] - (double)ys[t * ldy + r]);
            if (ys[t * ldy + r] != ys[t * ldy + r]) { /* a NaN scale (all_scales) */
                CHECK_MSG(yk[t * ldy + r] != yk[t * ldy + r], "%s matmul %s: NaN lost", k->name, cism_dtype_name(dt));
                continue;
            }
            for (i = 0; i < cols; i++) mag += fabs((double)wq[r * cols + i] * (double)x[t * ldx + i]);
            note(OP_MATMUL_PACKED, e, KB_MATMUL(cols) * mag);
            CHECK_MSG(e <= KB_MATMUL(cols) * mag, "%s matmul %s %lldx%lld nt %lld: row %lld token %lld: %.9g vs scalar %.9g",
                      k->name, cism_dtype_name(dt), (long long)rows, (long long)cols, (long long)nt, (long long)r,
                      (long long)t, yk[t * ldy + r], ys[t * ldy + r]);
        }
    packed_split(&kk, dt, 0, p, rb, rows, cols, x, ldx, xq, aq, ysplit, ldy, nt, yk);

    /* int8 activations */
    ref->matmul_a8[dt](p, rb, cols, xq_ref, aq, ys, ldy, nt, 0, rows);
    kk.matmul_a8[dt](p, rb, cols, xq_ref, aq, yk, ldy, nt, 0, rows);
    for (t = 0; t < nt; t++) {
        const cism__act8 *ab = (const cism__act8 *)(const void *)(xq_ref + t * aq);
        for (r = 0; r < rows; r++) {
            double mag = 0, e = fabs((double)yk[t * ldy + r] - (double)ys[t * ldy + r]);
            float a = yk[t * ldy + r], s = ys[t * ldy + r];
            if (exact)
                CHECK_MSG(same_bits(a, s), "%s matmul_a8 %s %lldx%lld nt %lld: row %lld token %lld: %.9g, scalar %.9g (must be identical)",
                          k->name, cism_dtype_name(dt), (long long)rows, (long long)cols, (long long)nt, (long long)r,
                          (long long)t, a, s);
            if (s != s) {
                CHECK_MSG(a != a, "%s matmul_a8 %s: NaN lost", k->name, cism_dtype_name(dt));
                continue;
            }
            for (b = 0; b < nb; b++) { /* |s_b dw_b da_b| = |sum over the block of w_i q_i| da */
                double sb = 0;
                if (dt == CISM_DTYPE_Q4A) { /* its two terms, |d sum c_i q_i| + |m sum q_i| */
                    const uint8_t *blk = p + r * (int64_t)rb + b * CISM__Q4A_BYTES;
                    double s1 = 0;
                    for (i = 0; i < 32; i++) s1 += (double)(i < 16 ? blk[4 + i] & 15 : blk[4 + i - 16] >> 4) * ab[b].q[i];
                    sb = fabs((double)cism__q4a_d(blk) * s1) + fabs((double)cism__q4a_m(blk) * ab[b].sum);
                }
                for (i = b * B; i < (b + 1) * B && i < cols && dt != CISM_DTYPE_Q4A; i++) sb += (double)wq[r * cols + i] * ab[i / 32].q[i % 32];
                mag += fabs(sb) * ab[(b * B) / 32].d;
            }
            note(OP_MATMUL_A8, e, KB_MATMUL_A8(nb) * mag);
            CHECK_MSG(e <= KB_MATMUL_A8(nb) * mag, "%s matmul_a8 %s %lldx%lld nt %lld: row %lld token %lld: %.9g vs scalar %.9g",
                      k->name, cism_dtype_name(dt), (long long)rows, (long long)cols, (long long)nt, (long long)r,
                      (long long)t, a, s);
        }
    }
    packed_split(&kk, dt, 1, p, rb, rows, cols, x, ldx, xq_ref, aq, ysplit, ldy, nt, yk);
    free(p); free(xq); free(xq_ref); free(wq); free(x); free(ys); free(yk); free(ysplit);
}

/* An interleaved dtype gives the bits of its base dtype on the same rows, on
   every tier, for float and int8 activations (QUANTIZATION.md: the layout
   never changes a result). */
static void x16_same_as_rows(const cism__kernels *k, const cism__kernels *ref, int32_t dt, int64_t rows, int64_t cols,
                             int64_t nt) {
    const int32_t base = cism__dtype_base(dt);
    const uint64_t rb = (uint64_t)cism_dtype_row_bytes(dt, cols);
    const int64_t aq = cism__act8_row_bytes(cols), ldy = rows + 1;
    cism__matmul_fn mx = k->matmul[dt] ? k->matmul[dt] : ref->matmul[dt];
    cism__matmul_fn mb = k->matmul[base] ? k->matmul[base] : ref->matmul[base];
    cism__matmul_a8_fn qx = k->matmul_a8[dt] ? k->matmul_a8[dt] : ref->matmul_a8[dt];
    cism__matmul_a8_fn qb = k->matmul_a8[base] ? k->matmul_a8[base] : ref->matmul_a8[base];
    uint8_t *plain = (uint8_t *)malloc((size_t)rows * rb), *grp = (uint8_t *)malloc((size_t)rows * rb);
    uint8_t *xq = (uint8_t *)malloc((size_t)(nt * aq));
    float *x = (float *)malloc((size_t)(nt * cols) * 4), *y0 = (float *)calloc((size_t)(nt * ldy), 4);
    float *y1 = (float *)calloc((size_t)(nt * ldy), 4);
    int64_t g, t;
    random_packed(base, rows, cols, plain, 0);
    for (g = 0; g < rows; g += CISM__X16) cism__x16_interleave(dt, plain + g * rb, rb, grp + g * rb);
    fill(x, nt * cols);
    for (t = 0; t < nt; t++) ref->quantize_act(x + t * cols, cols, xq + t * aq);
    mb(plain, rb, cols, x, cols, y0, ldy, nt, 0, rows);
    mx(grp, rb, cols, x, cols, y1, ldy, nt, 0, rows);
    CHECK_MSG(memcmp(y0, y1, (size_t)(nt * ldy) * 4) == 0, "%s matmul %s %lldx%lld nt %lld: not the bits of the row layout",
              k->name, cism_dtype_name(dt), (long long)rows, (long long)cols, (long long)nt);
    qb(plain, rb, cols, xq, aq, y0, ldy, nt, 0, rows);
    qx(grp, rb, cols, xq, aq, y1, ldy, nt, 0, rows);
    CHECK_MSG(memcmp(y0, y1, (size_t)(nt * ldy) * 4) == 0, "%s matmul_a8 %s %lldx%lld nt %lld: not the bits of the row layout",
              k->name, cism_dtype_name(dt), (long long)rows, (long long)cols, (long long)nt);
    free(plain); free(grp); free(xq); free(x); free(y0); free(y1);
}

/* q8's code -128 (GGUF Q8_0 blocks may hold it; our quantizer writes
   -127..127): every code -128 (pattern 0), -128 and 127 alternating (1), or
   -128 at random among random codes (2), padding codes -128 too, against
   activations of +-1 (int8 +-127 with the signs that make the pair sums of
   vpmaddubsw's sign trick largest: 2 * 128 * 127), on the float and int8
   paths of q8 and q8x16, decode and prefill. Scales are powers of two and
   x = +-1, so the float path's result is an exact integer times the scale;
   the int8 path is within 1e-6 of its exact value and, on the tiers that
   promise it, the scalar tier's bits. */
static void q8_min_code(const cism__kernels *k, const cism__kernels *ref, int32_t dt, int64_t rows, int64_t cols, int64_t nt,
                        int pattern) {
    const int64_t rb = cism_dtype_row_bytes(dt, cols), nb = (cols + 31) / 32, aq = cism__act8_row_bytes(cols);
    uint8_t *plain = (uint8_t *)malloc((size_t)(rows * rb)), *w = (uint8_t *)malloc((size_t)(rows * rb));
    uint8_t *xq = (uint8_t *)malloc((size_t)(nt * aq));
    float *x = (float *)malloc((size_t)(nt * cols) * 4), *y = (float *)malloc((size_t)(nt * rows) * 4);
    float *ys = (float *)malloc((size_t)(nt * rows) * 4);
    cism__matmul_fn mm = k->matmul[dt] ? k->matmul[dt] : ref->matmul[dt];
    cism__matmul_a8_fn mq = k->matmul_a8[dt] ? k->matmul_a8[dt] : ref->matmul_a8[dt];
    int64_t r, t, i, b;
    for (r = 0; r < rows; r++)
        for (b = 0; b < nb; b++) {
            uint8_t *blk = plain + r * rb + b * CISM__Q8_BYTES;
            uint16_t h = cism__f32_to_f16(ldexpf(1.0f, (int)((r + b) % 7) - 3));
            blk[0] = (uint8_t)(h & 0xff);
            blk[1] = (uint8_t)(h >> 8);
            for (i = 0; i < 32; i++) {
                int8_t c = -128;
                if (pattern == 1 && (i & 1)) c = 127;
                if (pattern == 2 && (rnd() & 1)) c = (int8_t)(rnd() & 0xff);
                blk[2 + i] = (uint8_t)c;
            }
        }
    if (cism__dtype_is_x16(dt))
        for (r = 0; r < rows; r += CISM__X16) cism__x16_interleave(dt, plain + r * rb, (uint64_t)rb, w + r * rb);
    else
        memcpy(w, plain, (size_t)(rows * rb));
    for (t = 0; t < nt; t++)
        for (i = 0; i < cols; i++) x[t * cols + i] = pattern == 1 ? ((i & 1) ? 1.0f : -1.0f) : ((t & 1) ? -1.0f : 1.0f);
    for (t = 0; t < nt; t++) ref->quantize_act(x + t * cols, cols, xq + t * aq);
    mm(w, (uint64_t)rb, cols, x, cols, y, rows, nt, 0, rows);
    for (t = 0; t < nt; t++)
        for (r = 0; r < rows; r++) {
            double e = 0;
            for (i = 0; i < cols; i++) {
                const uint8_t *blk = plain + r * rb + (i / 32) * CISM__Q8_BYTES;
                e += (double)cism__f16_to_f32((uint16_t)(blk[0] | (blk[1] << 8))) * (int8_t)blk[2 + i % 32] * x[t * cols + i];
            }
            CHECK_MSG(y[t * rows + r] == e, "%s matmul %s code -128 (pattern %d) %lldx%lld nt %lld: row %lld token %lld: %.9g, exact %.9g",
                      k->name, cism_dtype_name(dt), pattern, (long long)rows, (long long)cols, (long long)nt, (long long)r,
                      (long long)t, y[t * rows + r], e);
        }
    mq(w, (uint64_t)rb, cols, xq, aq, y, rows, nt, 0, rows);
    ref->matmul_a8[dt](w, (uint64_t)rb, cols, xq, aq, ys, rows, nt, 0, rows);
    for (t = 0; t < nt; t++) {
        const cism__act8 *ab = (const cism__act8 *)(const void *)(xq + t * aq);
        for (r = 0; r < rows; r++) {
            double e = 0, mag = 0;
            for (i = 0; i < cols; i++) {
                const uint8_t *blk = plain + r * rb + (i / 32) * CISM__Q8_BYTES;
                double v = (double)cism__f16_to_f32((uint16_t)(blk[0] | (blk[1] << 8))) * (int8_t)blk[2 + i % 32] * ab[i / 32].q[i % 32] *
                           ab[i / 32].d;
                e += v;
                mag += fabs(v);
            }
            CHECK_MSG(fabs(y[t * rows + r] - e) <= 1e-6 * mag && (!KB_A8_EXACT(k->name) || same_bits(y[t * rows + r], ys[t * rows + r])),
                      "%s matmul_a8 %s code -128 (pattern %d) %lldx%lld nt %lld: row %lld token %lld: %.9g, scalar %.9g, exact %.9g",
                      k->name, cism_dtype_name(dt), pattern, (long long)rows, (long long)cols, (long long)nt, (long long)r,
                      (long long)t, y[t * rows + r], ys[t * rows + r], e);
        }
    }
    free(plain); free(w); free(xq); free(x); free(y); free(ys);
}

/* quantize_act on values that hit its corners: exact halves (ties round away
   from zero), a block max of exactly 127 (scale 1), zeros, -0, subnormals,
   huge values, infinities and NaN (ignored by the max), tails of every length. */
static void quantize_act_vs_scalar(const cism__kernels *k, const cism__kernels *ref) {
    enum { N = 200 };
    float x[N];
    uint8_t a[7 * 48], b[7 * 48];   /* 7 blocks of 40 bytes and their two half sums */
    uint32_t nan_bits = 0x7fc00000u;
    int64_t ns[] = {1, 5, 31, 32, 33, 64, 100, 161, N};
    size_t c;
    int i;
    if (!k->quantize_act) return;
    { /* the floats either side of every half below 127 (and 0.5's), both signs, in blocks of scale 1 */
        enum { NB = 12 };
        float h[NB * 32];
        uint8_t qa[NB * 48], qb[NB * 48];
        for (i = 0; i < NB * 32; i++) {
            const int j = i / 32 * 31 + i % 32 - 1, side = (i / 32 + i) % 3; /* side: the half, the float below, above */
            const float half = (float)(j % 127) + 0.5f, v = side == 0 ? half : side == 1 ? nextafterf(half, 0.0f) : nextafterf(half, 200.0f);
            h[i] = i % 32 == 0 ? 127.0f : (i % 2 ? -v : v);
        }
        ref->quantize_act(h, NB * 32, qa);
        k->quantize_act(h, NB * 32, qb);
        CHECK_MSG(memcmp(qa, qb, (size_t)cism__act8_row_bytes(NB * 32)) == 0, "%s quantize_act: a value next to a half rounds "
                  "unlike the scalar tier", k->name);
    }
    for (i = 0; i < N; i++) x[i] = (float)((i * 37) % 255 - 127) * 0.5f; /* halves; each block of 32 holds +-127 or less */
    x[0] = 127.0f; x[40] = -127.0f; x[70] = 127.0f;
    for (i = 96; i < 128; i++) x[i] = 0.0f;        /* an all-zero block */
    x[100] = -0.0f;
    x[130] = 1e-40f; x[131] = -3e-39f;                /* subnormals */
    x[140] = 1e30f; x[150] = INFINITY;                /* huge; infinite (scale inf, inverse 0) */
    memcpy(&x[145], &nan_bits, 4);                    /* NaN: ignored by the max */
    memcpy(&x[170], &nan_bits, 4);
    x[180] = 3.0e-3f; x[181] = 1.5e-3f; x[182] = 4.5e-3f; x[183] = 3.81e-1f;
    /* a block whose max is tiny (normal 1e-37 .. subnormal): 127 / max overflows
       to inf, so every code is 0 (not x * inf, which tiers turned into -128 or
       INT_MIN sums; fuzz_loader found it) */
    for (i = 64; i < 96; i++) x[i] = (float)((i % 5) - 2) * (i < 80 ? 5e-38f : 1e-39f);
    /* from x, and from x + 64 (so the huge, infinite and NaN values fall in the first four blocks too,
       which tiers may take together) */
    for (c = 0; c < 2 * sizeof(ns) / sizeof(ns[0]); c++) {
        const int off = c < sizeof(ns) / sizeof(ns[0]) ? 0 : 64;
        const int64_t n = ns[c % (sizeof(ns) / sizeof(ns[0]))] - off, bytes = cism__act8_row_bytes(n);
        if (n <= 0) continue;
        memset(a, 0x5a, sizeof(a)); memset(b, 0x5a, sizeof(b));
        ref->quantize_act(x + off, n, a);
        k->quantize_act(x + off, n, b);
        CHECK_MSG(memcmp(a, b, (size_t)bytes) == 0 && memcmp(a + bytes, b + bytes, sizeof(a) - (size_t)bytes) == 0,
                  "%s quantize_act n %lld differs from scalar (or wrote past the row)", k->name, (long long)n);
        { /* the half-block sums after the blocks */
            const cism__act8 *blk = (const cism__act8 *)(const void *)b;
            const int32_t *hs = cism__act8_half_sums(b, n);
            int64_t j;
            for (j = 0; j < (n + 31) / 32; j++) {
                int32_t s0 = 0, s1 = 0;
                for (i = 0; i < 16; i++) { s0 += blk[j].q[i]; s1 += blk[j].q[16 + i]; }
                CHECK_MSG(hs[2 * j] == s0 && hs[2 * j + 1] == s1 && blk[j].sum == s0 + s1,
                          "%s quantize_act n %lld: sums of block %lld", k->name, (long long)n, (long long)j);
                for (i = 0; i < 32; i++)
                    CHECK_MSG(blk[j].q[i] >= -127 && blk[j].q[i] <= 127 && (j != (64 - off) / 32 || blk[j].q[i] == 0),
                              "%s quantize_act n %lld: code %d of block %lld", k->name, (long long)n,
                              (int)blk[j].q[i], (long long)j);
            }
        }
    }
}

static const int32_t QINT[4] = {CISM_DTYPE_Q6, CISM_DTYPE_Q5, CISM_DTYPE_Q3, CISM_DTYPE_Q2}; /* one SIMD decoder: qint_codes32, nq_qint_codes */

/* The read probe's loop: the scalar tier's wrapping sum, with words that carry
   into the top bit, over lengths of whole and partial 32-word steps and
   misaligned starts; the SIMD tiers have their own loop. */
static void read_sum_vs_scalar(const cism__kernels *k, const cism__kernels *ref) {
    static uint64_t words[1024 + 8];
    int64_t i, n, off;
    for (i = 0; i < 1024 + 8; i++) {
        rng = rng * 1664525u + 1013904223u;
        words[i] = (uint64_t)i * 0x9e3779b97f4a7c15ull + ((uint64_t)rng << 32);
    }
    CHECK_MSG(k->read_sum != NULL, "%s: no read_sum", k->name);
    if (k->tier != CISM_TIER_SCALAR) CHECK_MSG(k->read_sum != ref->read_sum, "%s: read_sum is the scalar loop", k->name);
    for (off = 0; off < 8; off += 3)
        for (n = 0; n <= 1024; n += 32) {
            uint64_t want = 0;
            for (i = 0; i < n; i++) want += words[off + i];
            CHECK_MSG(k->read_sum(words + off, n) == want && ref->read_sum(words + off, n) == want,
                      "%s: read_sum of %lld words at +%lld", k->name, (long long)n, (long long)off);
        }
}

static void vs_scalar(const cism__kernels *k) {
    const cism__kernels *ref = cism__kernels_scalar();
    int64_t shapes[][3] = {{1, 1, 1}, {9, 7, 2}, {8, 16, 3}, {33, 64, 4}, {17, 300, 7}, {67, 576, 5}, {12, 100, 13},
                           {5, 1000, 2}, {40, 129, 1}, {31, 33, 6}};
    int64_t hds[] = {8, 16, 20, 32, 64, 72, 128};
    size_t s;
    int dt, op;
    for (op = 0; op < N_OPS; op++) g_worst[op] = 0;
    read_sum_vs_scalar(k, ref);
    for (dt = 0; dt < 4; dt++)
        CHECK_MSG(k->matmul[QINT[dt]] && k->matmul_a8[QINT[dt]] && k->row_to_f32[QINT[dt]], "%s: no kernel for %s", k->name,
                  cism_dtype_name(QINT[dt]));
    if (k->tier != CISM_TIER_SCALAR) /* every SIMD tier has its own int8-activation kernel of every packed dtype: */
        for (dt = CISM_DTYPE_Q8; dt < CISM__DTYPE_COUNT; dt++) /* none is silently the scalar tier's (q6, q5 included) */
            CHECK_MSG(k->matmul_a8[dt] && k->matmul_a8[dt] != ref->matmul_a8[dt], "%s: matmul_a8 %s is the scalar tier's",
                      k->name, cism_dtype_name(dt));
    if (k->tier != CISM_TIER_SCALAR) /* every SIMD tier has the float-activation path of q6, q5, q3 and q2 */
        for (dt = 0; dt < 4; dt++)
            CHECK_MSG(k->matmul[QINT[dt]] != ref->matmul[QINT[dt]], "%s: matmul %s is the scalar tier's", k->name,
                      cism_dtype_name(QINT[dt]));
    if (strncmp(k->name, "neon", 4) == 0) /* the ARM64 tiers also have the float-activation path of every packed dtype */
        for (dt = CISM_DTYPE_Q8; dt < CISM__DTYPE_COUNT; dt++)
            CHECK_MSG(k->matmul[dt] && k->matmul[dt] != ref->matmul[dt], "%s: matmul %s is the scalar tier's", k->name,
                      cism_dtype_name(dt));
    for (dt = 0; dt <= CISM_DTYPE_BF16; dt++)
        for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
            matmul_vs_scalar(k, ref, dt, shapes[s][0], shapes[s][1], shapes[s][2]);
    { /* packed weights: odd row counts, rows % 4 and tokens % 4 of every class, padded
         last blocks, odd counts of blocks of 16, nt from 1 to beyond every tile */
        const int32_t qdt[] = {CISM_DTYPE_Q8, CISM_DTYPE_Q4, CISM_DTYPE_FP4, CISM_DTYPE_NL4, CISM_DTYPE_Q4S, CISM_DTYPE_Q4A,
                                CISM_DTYPE_Q6, CISM_DTYPE_Q5, CISM_DTYPE_Q3, CISM_DTYPE_Q2};
        int64_t qs[][3] = {{1, 1, 1}, {3, 16, 2}, {5, 20, 5}, {7, 32, 1}, {8, 48, 4}, {9, 172, 9}, {17, 300, 13},
                           {4, 576, 3}, {6, 1000, 6}, {33, 64, 8}, {2, 100, 2}, {11, 33, 7}, {10, 96, 11}};
        size_t d;
        for (d = 0; d < sizeof(qdt) / sizeof(qdt[0]); d++)
            for (s = 0; s < sizeof(qs) / sizeof(qs[0]); s++) packed_vs_scalar(k, ref, qdt[d], qs[s][0], qs[s][1], qs[s][2], 0);
        { /* q6, q5, q3 and q2 (their SIMD decoders): every token count class of the
             decode, batched-decode and GEMM paths (1, 2, 3, 5, 9, 17, 33),
             row counts off every tile (4, 8, 16 rows), cols off 256 (a
             prefill panel) and off 32 (a padded last block) */
            const int64_t nts[] = {1, 2, 3, 5, 9, 17, 33};
            const int64_t rc[][2] = {{13, 300}, {21, 33}, {7, 520}, {37, 100}, {19, 1000}, {9, 64}, {25, 289}};
            size_t n;
            int32_t qd;
            for (qd = 0; qd < 4; qd++)
                for (n = 0; n < sizeof(nts) / sizeof(nts[0]); n++) {
                    packed_vs_scalar(k, ref, QINT[qd], rc[n][0], rc[n][1], nts[n], 0);
                    packed_vs_scalar(k, ref, QINT[qd], rc[n][1] % 17 + 2, rc[n][1], nts[n], 2); /* extreme levels */
                }
        }
        /* the interleaved dtypes: whole groups of 16 rows, any row range (the splits) */
        const int32_t xdt[] = {CISM_DTYPE_Q8X16, CISM_DTYPE_Q4SX16, CISM_DTYPE_Q4AX16, CISM_DTYPE_Q6X16,
                               CISM_DTYPE_Q5X16, CISM_DTYPE_Q3X16, CISM_DTYPE_Q2X16};
        int64_t xs[][3] = {{16, 16, 1}, {16, 32, 3}, {32, 48, 2}, {16, 172, 9}, {48, 300, 13}, {16, 576, 1},
                           {32, 1000, 6}, {64, 64, 8}, {16, 33, 17}, {80, 96, 5}};
        for (d = 0; d < sizeof(xdt) / sizeof(xdt[0]); d++)
            for (s = 0; s < sizeof(xs) / sizeof(xs[0]); s++) {
                packed_vs_scalar(k, ref, xdt[d], xs[s][0], xs[s][1], xs[s][2], 0);
                x16_same_as_rows(k, ref, xdt[d], xs[s][0], xs[s][1], xs[s][2]);
            }
        /* the decode prefetch's far stage (kernels.h cism__x16_streaming) keeps the bits */
        cism__x16_streaming = 1;
        for (d = 0; d < sizeof(xdt) / sizeof(xdt[0]); d++) {
            packed_vs_scalar(k, ref, xdt[d], 80, 1000, 1, 0);
            x16_same_as_rows(k, ref, xdt[d], 96, 1000, 2);
        }
        cism__x16_streaming = 0;
        /* every E4M3 scale code, NaNs included */
        packed_vs_scalar(k, ref, CISM_DTYPE_Q4S, 2, 16 * 128, 3, 1);
        packed_vs_scalar(k, ref, CISM_DTYPE_FP4, 5, 16 * 52, 5, 1);
        packed_vs_scalar(k, ref, CISM_DTYPE_Q4SX16, 16, 16 * 16, 3, 1);
        quantize_act_vs_scalar(k, ref);
        { /* q8 code -128 on every path: decode and prefill, padded last blocks, whole and short panels */
            int64_t ms[][3] = {{16, 32, 1}, {16, 100, 2}, {32, 64, 5}, {16, 300, 9}, {48, 544, 1}, {32, 1024, 4}, {16, 33, 13}};
            int pat;
            for (pat = 0; pat < 3; pat++)
                for (s = 0; s < sizeof(ms) / sizeof(ms[0]); s++) {
                    q8_min_code(k, ref, CISM_DTYPE_Q8, ms[s][0] + (s % 3), ms[s][1], ms[s][2], pat);
                    q8_min_code(k, ref, CISM_DTYPE_Q8X16, ms[s][0], ms[s][1], ms[s][2], pat);
                }
        }
    }
    split_vs_scalar(k, ref, hds, sizeof(hds) / sizeof(hds[0]));
    elementwise_vs_scalar(k, ref);
    printf("  vs scalar, worst error / bound:");
    for (op = 0; op < N_OPS; op++) printf(" %s %.3f", g_op_names[op], g_worst[op]);
    printf("\n");
}

/* Packed weights: the kernels against dequantize-then-dot in double, for float
   activations and for int8 activation blocks (whose reference uses the
   dequantized activations, and which must stay within the activation
   rounding bound of the float result). */
static void test_quant_matmul(const cism__kernels *k, int32_t dt, int64_t rows, int64_t cols, int64_t nt) {
    const cism__kernels *sc = cism__kernels_scalar();
    cism__matmul_fn mm = k->matmul[dt] ? k->matmul[dt] : sc->matmul[dt];
    cism__matmul_a8_fn mq = k->matmul_a8[dt] ? k->matmul_a8[dt] : sc->matmul_a8[dt];
    void (*qa)(const float *, int64_t, void *) = k->quantize_act ? k->quantize_act : sc->quantize_act;
    int64_t rb = cism_dtype_row_bytes(dt, cols), size, r, t, i, aq = cism__act8_row_bytes(cols);
    float *w = (float *)malloc((size_t)(rows * cols) * 4), *wq = (float *)malloc((size_t)(rows * cols) * 4);
    float *x = (float *)malloc((size_t)(nt * cols) * 4), *xa = (float *)malloc((size_t)(nt * cols) * 4);
    float *y = (float *)malloc((size_t)(nt * rows) * 4), *y8 = (float *)malloc((size_t)(nt * rows) * 4);
    uint8_t *p = (uint8_t *)malloc((size_t)(rows * rb)), *xq = (uint8_t *)malloc((size_t)(nt * aq));
    double worst = 0, worst8 = 0, worst_act = 0, worst_q = 0;
    fill(w, rows * cols);
    fill(x, nt * cols);
    for (i = 0; i < nt * cols; i++) x[i] *= 3.0f;
    CHECK_OK(cism_quantize(dt, w, rows, cols, NULL, p, rows * rb, &size, 1));
    CHECK_OK(cism_dequantize(dt, p, rows, cols, wq));
    for (t = 0; t < nt; t++) qa(x + t * cols, cols, xq + t * aq);
    for (t = 0; t < nt; t++) { /* activation blocks: nearest int8 of x / d, d = max-abs / 127, sums */
        const cism__act8 *a = (const cism__act8 *)(const void *)(xq + t * aq);
        int64_t b;
        for (b = 0; b * 32 < cols; b++) {
            int32_t sum = 0;
            float amax = 0;
            int j;
            for (j = 0; j < 32 && b * 32 + j < cols; j++) if (fabsf(x[t * cols + b * 32 + j]) > amax) amax = fabsf(x[t * cols + b * 32 + j]);
            if (fabs(a[b].d - amax / 127.0) > 1e-6 * amax) worst_act = 1;
            for (j = 0; j < 32; j++) {
                sum += a[b].q[j];
                if (b * 32 + j < cols) {
                    double e = fabs((double)x[t * cols + b * 32 + j] - (double)a[b].d * a[b].q[j]);
                    xa[t * cols + b * 32 + j] = a[b].d * a[b].q[j];
                    if (e > 0.5 * a[b].d * 1.001 + 1e-30 && e > worst_act) worst_act = e;
                } else if (a[b].q[j] != 0) {
                    worst_act = 1;
                }
            }
            if (sum != a[b].sum) worst_act = 1;
        }
    }
    CHECK_MSG(worst_act == 0, "%s quantize_act: %g", k->name, worst_act);
    mm(p, (uint64_t)rb, cols, x, cols, y, rows, nt, 0, rows / 3);
    mm(p, (uint64_t)rb, cols, x, cols, y, rows, nt, rows / 3, rows);
    mq(p, (uint64_t)rb, cols, xq, aq, y8, rows, nt, 0, rows / 2);
    mq(p, (uint64_t)rb, cols, xq, aq, y8, rows, nt, rows / 2, rows);
    for (t = 0; t < nt; t++)
        for (r = 0; r < rows; r++) {
            double ref = 0, ref8 = 0, mag = 0, mag8 = 0, actb = 0;
            for (i = 0; i < cols; i++) {
                double wv = wq[r * cols + i], blk_d = ((const cism__act8 *)(const void *)(xq + t * aq))[i / 32].d;
                ref += wv * x[t * cols + i];
                ref8 += wv * xa[t * cols + i];
                mag += fabs(wv * x[t * cols + i]);
                mag8 += fabs(wv * xa[t * cols + i]);
                actb += fabs(wv) * 0.5 * blk_d;
            }
            {
                double e = fabs(y[t * rows + r] - ref) / (mag * sqrt((double)cols) + 1e-30);
                double e8 = fabs(y8[t * rows + r] - ref8) / (mag8 * sqrt((double)cols) + 1e-30);
                double eq = fabs(y8[t * rows + r] - ref) - actb * 1.001 - 1e-6 * mag;
                if (e > worst || e != e) worst = e;
                if (e8 > worst8 || e8 != e8) worst8 = e8;
                if (eq > worst_q || eq != eq) worst_q = eq;
            }
        }
    /* float accumulation: relative to sum |terms|, well under 1e-6 * sqrt(n) */
    CHECK_MSG(worst < 1e-6, "%s matmul %s %lldx%lld nt %lld: scaled error %g", k->name, cism_dtype_name(dt),
              (long long)rows, (long long)cols, (long long)nt, worst);
    CHECK_MSG(worst8 < 1e-6, "%s matmul_a8 %s %lldx%lld nt %lld: scaled error %g", k->name, cism_dtype_name(dt),
              (long long)rows, (long long)cols, (long long)nt, worst8);
    CHECK_MSG(worst_q <= 0, "%s matmul_a8 %s: beyond the activation rounding bound by %g", k->name, cism_dtype_name(dt), worst_q);
    free(w); free(wq); free(x); free(xa); free(y); free(y8); free(p); free(xq);
}


static void test_tier(const cism__kernels *k) {
    int dt;
    int64_t shapes[][3] = {{1, 1, 1}, {7, 9, 1}, {33, 64, 3}, {16, 300, 5}, {64, 576, 1}, {5, 1000, 9}};
    size_t s;
    for (dt = 0; dt <= CISM_DTYPE_BF16; dt++)
        for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) test_matmul(k, dt, shapes[s][0], shapes[s][1], shapes[s][2]);
    {
        const int32_t qdt[] = {CISM_DTYPE_Q8, CISM_DTYPE_Q4, CISM_DTYPE_FP4, CISM_DTYPE_NL4, CISM_DTYPE_Q4S,
                               CISM_DTYPE_Q8X16, CISM_DTYPE_Q4SX16, CISM_DTYPE_Q4A, CISM_DTYPE_Q6, CISM_DTYPE_Q5,
                               CISM_DTYPE_Q4AX16, CISM_DTYPE_Q6X16, CISM_DTYPE_Q5X16, CISM_DTYPE_Q3,
                               CISM_DTYPE_Q3X16, CISM_DTYPE_Q2, CISM_DTYPE_Q2X16};
        int64_t qs[][3] = {{1, 1, 1}, {7, 9, 1}, {33, 64, 3}, {16, 172, 5}, {64, 576, 1}, {5, 1000, 9}};
        size_t d;
        for (d = 0; d < sizeof(qdt) / sizeof(qdt[0]); d++)
            for (s = 0; s < sizeof(qs) / sizeof(qs[0]); s++) {
                int64_t rows = qs[s][0];
                if (cism__dtype_is_x16(qdt[d])) rows = (rows + 15) / 16 * 16;  /* whole groups of 16 rows */
                test_quant_matmul(k, qdt[d], rows, qs[s][1], qs[s][2]);
            }
    }
    test_elementwise(k);
    test_attention(k, CISM_DTYPE_F32, CISM_DTYPE_F32);
    test_attention(k, CISM_DTYPE_F16, CISM_DTYPE_F16);
    test_attention(k, CISM_DTYPE_Q8, CISM_DTYPE_Q8);
    test_attention(k, CISM_DTYPE_Q4A, CISM_DTYPE_Q4A);
    test_attention(k, CISM_DTYPE_Q8, CISM_DTYPE_Q4A);
    test_attention(k, CISM_DTYPE_F16, CISM_DTYPE_Q8);
    vs_scalar(k);
}

/* Format version 1's interleaved layout (a group's codes of every block, then
   the scales of every block), written here from the base rows by its own rule,
   becomes this version's layout under cism__x16_from_v1; cols cover whole and
   short last superblocks. */
static void test_x16_from_v1(void) {
    static const int64_t cols_list[] = {64, 96, 160, 48};
    int d, ci;
    for (d = 0; d < 2; d++) {
        const int32_t dt = d ? CISM_DTYPE_Q4SX16 : CISM_DTYPE_Q8X16;
        const int64_t sb = d ? 1 : 2, cb = d ? 8 : 32;
        for (ci = 0; ci < 4; ci++) {
            const int64_t cols = cols_list[ci], rb = cism_dtype_row_bytes(dt, cols), nb = rb / (sb + cb);
            uint8_t *plain = (uint8_t *)malloc((size_t)(16 * rb)), *v1 = (uint8_t *)malloc((size_t)(16 * rb));
            uint8_t *v2 = (uint8_t *)malloc((size_t)(16 * rb)), *tmp = (uint8_t *)malloc((size_t)(16 * rb));
            int64_t i, b, c;
            random_packed(cism__dtype_base(dt), 16, cols, plain, 0);
            for (i = 0; i < 16; i++)
                for (b = 0; b < nb; b++) {
                    const uint8_t *blk = plain + i * rb + b * (sb + cb);
                    memcpy(v1 + nb * 16 * cb + (b * 16 + i) * sb, blk, (size_t)sb);
                    for (c = 0; c < cb / 4; c++) memcpy(v1 + b * 16 * cb + c * 64 + i * 4, blk + sb + 4 * c, 4);
                }
            cism__x16_interleave(dt, plain, (uint64_t)rb, v2);
            cism__x16_from_v1(dt, v1, (uint64_t)rb, tmp);
            CHECK_MSG(memcmp(v1, v2, (size_t)(16 * rb)) == 0, "%s %lld cols: version 1 group rearranged differs",
                      cism_dtype_name(dt), (long long)cols);
            free(plain); free(v1); free(v2); free(tmp);
        }
    }
}

int main(void) {
    int32_t t;
    int n_run = 0;
    printf("best tier: %s\n", cism__kernels_best()->name);
    for (t = CISM_TIER_SCALAR; cism_kernel_tier_name(t); t++) {
        const cism__kernels *k = cism__kernels_tier(t);
        if (!k) { printf("tier %s: not available here\n", cism_kernel_tier_name(t)); continue; }
        CHECK(k->tier == t && strcmp(k->name, cism_kernel_tier_name(t)) == 0);
        CHECK(cism__kernels_by_name(k->name) == k);
        printf("tier %s\n", k->name);
        test_tier(k);
        n_run++;
    }
    test_x16_from_v1();
    /* the rule: weights larger than half the last-level cache (or that cache unknown) stream */
    if (!getenv("CISM_PREFETCH_FAR")) {
        CHECK(cism__weights_stream((int64_t)1 << 60) == 1);
        CHECK(cism__weights_stream(0) == (cism__cpu_get()->llc_bytes <= 0));
    }
    CHECK(cism__kernels_by_name("no-such-tier") == NULL);
    CHECK(cism__kernels_tier(CISM_TIER_AUTO) == cism__kernels_best());
    printf("%d tiers tested\n", n_run);
    return test_finish("test_kernels");
}
