/* kernel_bench.c - speed of each tier's matmul kernels.
 *
 *   cism-kernel-bench [--dtypes f32,q8,...] [--tiers avx2,avx512] [--a8] [--stream MB] [cols ...]
 *                                                       (default cols: 576 1536)
 *
 * For every tier this CPU runs and every weight dtype: prefill (64 rows x 96
 * tokens) and decode (256 rows x 1 token) with weights and activations small
 * enough for L2, so the numbers show the kernels' compute rate (GFLOP/s: 2 per
 * multiply-add) rather than memory bandwidth. Packed dtypes run both paths:
 * float activations (matmul) and int8 activations (matmul_a8; the activations
 * quantized once before the timing); --a8 keeps the int8 path alone (float
 * activations over a large --stream take minutes). --stream MB adds decode over a matrix
 * of MB megabytes (more than the last-level cache): GB/s of weights read.
 * Time is the calling thread's CPU time, best of 7 runs of ~10 ms, so other
 * load on the machine disturbs it less than wall time. Each tier's line of
 * int8 multiply-add peak (cism_measure_int8_mac_peak) precedes its rows, and int8-activation rows show their
 * prefill as a share of it (2 FLOP per multiply-add).
 * --outliers times instead the outlier-channel epilogue of the int8 path
 * (model/act_outliers.c) for each packed dtype: every token's table holds 5
 * channels out of 95 (as SmolLM2-135M's rows do), the kernel alone against
 * the kernel plus the epilogue, and the fused entry where the tier has one
 * (matmul_a8_outliers for the interleaved dtypes, gemv_a8_outliers for q8 and
 * q4a up to 8 tokens): decode (1 token, 1536 rows) and prefill (256 tokens, 256
 * rows, one model call), L2-resident, CPU time, best of 7.
 * --attention times the split attention kernel as an 8k-context decode of a
 * Qwen2.5-0.5B shape runs it (7 query heads per KV head, head_dim 64), per SIMD
 * tier and KV type (f16, q8): one KV head's cache (compute) and 48 (streamed).
 * Links the static library (internal kernel table). */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "kernels/kernels.h"
#include "kernels/kv_quant.h"
#include "kernels/quant.h"
#include "model/session.h"

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

static int is_packed(int dt) { return dt >= CISM_DTYPE_Q8; }

/* weights: real quantized values of random floats (packed) or patterns (float) */
static uint8_t *make_weights(int dt, int64_t rows, int64_t cols, uint64_t *rb) {
    uint8_t *w;
    int64_t i;
    *rb = cism__row_bytes(dt, cols);
    w = (uint8_t *)malloc((size_t)(rows * (int64_t)*rb));
    if (is_packed(dt)) {
        int64_t r0, step = 256, size;
        float *f = (float *)malloc((size_t)(step * cols) * 4);
        for (i = 0; i < step * cols; i++) f[i] = (float)((i * 7919) % 2001 - 1000) * 1e-3f;
        for (r0 = 0; r0 < rows; r0 += step) {
            int64_t n = rows - r0 < step ? rows - r0 : step;
            cism_quantize(dt, f, n, cols, NULL, w + r0 * (int64_t)*rb, n * (int64_t)*rb, &size, 1);
        }
        free(f);
    } else {
        for (i = 0; i < rows * (int64_t)*rb / 2; i++) ((uint16_t *)(void *)w)[i] = (uint16_t)(0x3c00u ^ (uint16_t)(i & 0x3ff));
    }
    return w;
}

/* seconds per call, best of 7 runs; a8: the int8 kernel on activations quantized beforehand */
static double run(const cism__kernels *k, int dt, int a8, const uint8_t *w, uint64_t rb, int64_t rows, int64_t cols,
                  int64_t nt, int calls) {
    const cism__kernels *sc = cism__kernels_scalar();
    cism__matmul_a8_fn mq = k->matmul_a8[dt] ? k->matmul_a8[dt] : sc->matmul_a8[dt];
    void (*qa)(const float *, int64_t, void *) = k->quantize_act ? k->quantize_act : sc->quantize_act;
    int64_t aq = cism__act8_row_bytes(cols), i, t;
    float *x = (float *)malloc((size_t)(nt * cols) * 4), *y = (float *)malloc((size_t)(nt * rows) * 4);
    uint8_t *xq = (uint8_t *)malloc((size_t)(nt * aq));
    double best = 1e30;
    int rep, it;
    for (i = 0; i < nt * cols; i++) x[i] = (float)(i % 13) * 0.01f - 0.06f;
    /* the activations quantized once, outside the timing: a model quantizes a token's row once for
       every matrix it feeds (hundreds to thousands of rows), so charging it to these 64 rows would
       make it most of the "kernel" time (AVX-512 q8x16 read 23% of the peak that way, 58-65% without) */
    if (a8)
        for (t = 0; t < nt; t++) qa(x + t * cols, cols, xq + t * aq);
    for (rep = 0; rep < 7; rep++) {
        double t0 = cpu_now(), d;
        for (it = 0; it < calls; it++) {
            if (a8) {
                mq(w, rb, cols, xq, aq, y, rows, nt, 0, rows);
            } else {
                k->matmul[dt](w, rb, cols, x, cols, y, rows, nt, 0, rows);
            }
        }
        d = (cpu_now() - t0) / calls;
        if (d < best) best = d;
    }
    free(x); free(y); free(xq);
    return best;
}

static double gflops(const cism__kernels *k, int dt, int a8, int64_t rows, int64_t cols, int64_t nt) {
    uint64_t rb;
    uint8_t *w = make_weights(dt, rows, cols, &rb);
    int calls = (int)(3e7 / (double)(rows * cols * nt)) + 1;   /* ~10 ms per run */
    double s = run(k, dt, a8, w, rb, rows, cols, nt, calls);
    free(w);
    return 2.0 * (double)(rows * cols * nt) / s / 1e9;
}

/* --outliers: token t's activations, cols values with five large channels (as SmolLM2-135M's rows) */
static void outlier_row(float *x, int64_t cols, int64_t t) {
    int64_t i;
    for (i = 0; i < cols; i++) x[i] = (float)((i * 7 + t * 13) % 29) * 0.03f - 0.42f;
    for (i = 0; i < 5; i++) x[((t * 7 + i * 13) % 95) * 6151 % cols] = 30.0f + (float)i;
}

/* --outliers: microseconds per call of the kernel alone, with the epilogue, and fused (0: none;
   interleaved dtypes: matmul_a8_outliers, listing the call's runs itself) */
static void outlier_times(const cism__kernels *k, int dt, int64_t rows, int64_t cols, int64_t nt, double us[3]) {
    const cism__kernels *sc = cism__kernels_scalar();
    cism__matmul_a8_fn mq = k->matmul_a8[dt] ? k->matmul_a8[dt] : sc->matmul_a8[dt];
    int64_t ldq = (cism__act8_row_bytes(cols) + (int64_t)sizeof(cism__act8_out) + 63) / 64 * 64, t;
    uint64_t rb;
    uint8_t *w = make_weights(dt, rows, cols, &rb), *xq = (uint8_t *)calloc((size_t)nt, (size_t)ldq);
    float *x = (float *)malloc((size_t)cols * 4), *tmp = (float *)malloc((size_t)(4 * (cols / 32 + 1)) * 4);
    float *y = (float *)malloc((size_t)(nt * rows) * 4);
    int calls = (int)(1e8 / (double)(rows * cols * nt)) + 1, rep, it, m; /* ~10-20 ms per run */
    for (t = 0; t < nt; t++) {
        outlier_row(x, cols, t);
        cism__act8_quantize_split(sc, x, cols, xq + t * ldq, ldq, tmp);
    }
    for (m = 0; m < 3; m++) {
        us[m] = 1e30;
        if (m == 2 && !(k->gemv_a8_outliers[dt] && nt <= CISM__GEMV_OUTL_TOKENS) && !k->matmul_a8_outliers[dt]) {
            us[m] = 0;
            continue;
        }
        for (rep = 0; rep < 7; rep++) {
            double t0 = cpu_now(), d;
            for (it = 0; it < calls; it++) {
                if (m == 2 && k->matmul_a8_outliers[dt]) {
                    k->matmul_a8_outliers[dt](w, rb, cols, xq, ldq, y, rows, nt, 0, rows, NULL);
                    continue;
                }
                if (m == 2) {
                    k->gemv_a8_outliers[dt](w, rb, cols, xq, ldq, y, rows, nt, 0, rows);
                    continue;
                }
                mq(w, rb, cols, xq, ldq, y, rows, nt, 0, rows);
                if (m == 1) cism__act8_add_outliers(k, dt, w, rb, xq, ldq, y, rows, nt, 0, rows);
            }
            d = (cpu_now() - t0) / calls * 1e6;
            if (d < us[m]) us[m] = d;
        }
    }
    free(w); free(xq); free(x); free(tmp); free(y);
}

/* --outliers, the split itself: nanoseconds per row of the tier's quantize_act
   and of cism__act8_quantize_split (which also picks the row's outlier
   channels) on 256 rows of cols values with five large channels each (as
   above), best of 7; *entries: the table entries per row */
static void split_times(const cism__kernels *k, int64_t cols, double ns[2], double *entries) {
    const int64_t nt = 256, ldq = (cism__act8_row_bytes(cols) + (int64_t)sizeof(cism__act8_out) + 63) / 64 * 64;
    void (*quant)(const float *, int64_t, void *) = k->quantize_act ? k->quantize_act : cism__kernels_scalar()->quantize_act;
    uint8_t *xq = (uint8_t *)calloc((size_t)nt, (size_t)ldq);
    float *x = (float *)malloc((size_t)(nt * cols) * 4), *tmp = (float *)malloc((size_t)(4 * (cols / 32 + 1)) * 4);
    int64_t t;
    int m, rep;
    for (t = 0; t < nt; t++) outlier_row(x + t * cols, cols, t);
    for (m = 0; m < 2; m++) {
        ns[m] = 1e30;
        for (rep = 0; rep < 7; rep++) {
            double t0 = cpu_now(), d;
            int it;
            for (it = 0; it < 20; it++)
                for (t = 0; t < nt; t++) {
                    if (m) cism__act8_quantize_split(k, x + t * cols, cols, xq + t * ldq, ldq, tmp);
                    else quant(x + t * cols, cols, xq + t * ldq);
                }
            d = (cpu_now() - t0) / (20.0 * (double)nt) * 1e9;
            if (d < ns[m]) ns[m] = d;
        }
    }
    for (*entries = 0, t = 0; t < nt; t++)
        *entries += ((const cism__act8_out *)(const void *)(xq + t * ldq + ldq - (int64_t)sizeof(cism__act8_out)))->n;
    *entries /= (double)nt;
    free(xq); free(x); free(tmp);
}

static int in_list(const char *list, const char *name);

static void outlier_table(const char *tiers, const char *dtypes) {
    int t, dt, p;
    printf("%-8s %-8s %-22s | %10s | %10s %8s | %10s %8s\n", "tier", "dtype", "call", "kernel us", "+epilogue", "cost",
           "fused", "cost");
    for (t = CISM_TIER_SCALAR; cism_kernel_tier_name(t); t++) {
        const cism__kernels *k = cism__kernels_tier(t);
        if (!k || !in_list(tiers, k->name)) continue;
        for (dt = CISM_DTYPE_Q8; dt < CISM__DTYPE_COUNT; dt++) {
            if (!in_list(dtypes, cism_dtype_name(dt))) continue;
            for (p = 0; p < 2; p++) {
                double us[3];
                outlier_times(k, dt, p ? 256 : 1536, 576, p ? 256 : 1, us);
                printf("%-8s %-8s %-22s | %10.1f | %10.1f %+7.1f%%", k->name, cism_dtype_name(dt),
                       p ? "prefill 256x576x256" : "decode 1536x576x1", us[0], us[1], 100 * (us[1] - us[0]) / us[0]);
                if (us[2] > 0) printf(" | %10.1f %+7.1f%%\n", us[2], 100 * (us[2] - us[0]) / us[0]);
                else printf(" | %10s %8s\n", "-", "");
                fflush(stdout);
            }
        }
    }
    printf("\n%-8s %-22s | %13s | %13s %8s | %s\n", "tier", "split of a row", "quantize ns", "split ns", "cost", "entries per row");
    for (t = CISM_TIER_SCALAR; cism_kernel_tier_name(t); t++) {
        const cism__kernels *k = cism__kernels_tier(t);
        if (!k || !in_list(tiers, k->name)) continue;
        for (p = 0; p < 2; p++) {
            double ns[2], e;
            split_times(k, p ? 1536 : 576, ns, &e);
            printf("%-8s %-22s | %13.1f | %13.1f %+7.1f%% | %.2f\n", k->name, p ? "1536 values" : "576 values", ns[0], ns[1],
                   100 * (ns[1] - ns[0]) / ns[0], e);
            fflush(stdout);
        }
    }
}

/* --attention: the split kernel as a decode at context n_ctx runs it (splits of
   CISM__ATT_SPLIT positions, the next split named for prefetching), one query
   of n_grp heads per KV head, head_dim 64 (the 0.5B-class presets): CPU
   seconds per pass over n_heads KV heads, best of reps */
static double att_pass(const cism__kernels *k, int dt, const uint8_t *kc, const uint8_t *vc, int64_t n_heads, int64_t n_ctx,
                       int64_t n_grp, int reps) {
    const int64_t hd = 64, rb = (int64_t)cism__kv_row_bytes(dt, hd);
    float q[8 * 64], out[8 * 64], ml[16], *sc = (float *)malloc((size_t)(n_grp * CISM__ATT_SPLIT) * 4);
    double best = 1e30;
    int64_t h, j, i;
    int r;
    for (i = 0; i < n_grp * hd; i++) q[i] = (float)((i * 37) % 29 - 14) * 0.05f;
    for (r = 0; r < reps; r++) {
        double t0 = cpu_now(), dt_s;
        for (h = 0; h < n_heads; h++)
            for (j = 0; j * CISM__ATT_SPLIT < n_ctx; j++) {
                const uint8_t *k0 = kc + (h * n_ctx + j * CISM__ATT_SPLIT) * rb, *v0 = vc + (h * n_ctx + j * CISM__ATT_SPLIT) * rb;
                cism__att_next nx;
                nx.k = k0 + CISM__ATT_SPLIT * rb;
                nx.v = v0 + CISM__ATT_SPLIT * rb;
                nx.n_kv = (j + 2) * CISM__ATT_SPLIT <= n_ctx ? CISM__ATT_SPLIT : 0;
                k->attention_split(q, hd, out, hd, ml, 2, 1, n_grp, k0, v0, dt, dt, CISM__ATT_SPLIT, CISM__ATT_SPLIT, hd,
                                   0.125f, sc, nx.n_kv ? &nx : NULL);
            }
        dt_s = cpu_now() - t0;
        if (dt_s < best) best = dt_s;
    }
    free(sc);
    return best;
}

static void attention_table(const char *tiers) {
    static const int dts[] = {CISM_DTYPE_F16, CISM_DTYPE_Q8};
    const int64_t n_ctx = 8192, hd = 64, grp = 7, streamed = 48; /* 24 layers x 2 KV heads: Qwen2.5-0.5B */
    int t, d;
    printf("split attention, one query of %lld heads per KV head, head_dim %lld, context %lld, splits of %d;\n"
           "ns per position and KV head (CPU time, best of 7 / 3): one KV head (in cache), %lld heads (streamed)\n",
           (long long)grp, (long long)hd, (long long)n_ctx, CISM__ATT_SPLIT, (long long)streamed);
    for (d = 0; d < 2; d++) {
        const int dt = dts[d];
        const uint64_t rb = cism__kv_row_bytes(dt, hd), bytes = (uint64_t)(streamed * n_ctx) * rb;
        uint8_t *kc = (uint8_t *)malloc((size_t)bytes), *vc = (uint8_t *)malloc((size_t)bytes);
        float row[64];
        int64_t r, i;
        for (r = 0; r < streamed * n_ctx; r++) {
            for (i = 0; i < hd; i++) row[i] = (float)(((r * 131 + i * 17) % 97) - 48) * 0.02f;
            if (dt == CISM_DTYPE_F16)
                for (i = 0; i < hd; i++) ((uint16_t *)(void *)(kc + r * rb))[i] = cism__f32_to_f16(row[i]);
            else cism__kv_quantize_row(dt, row, hd, kc + r * rb, 0, NULL);
        }
        memcpy(vc, kc, (size_t)bytes);
        for (t = CISM_TIER_SCALAR + 1; cism_kernel_tier_name(t); t++) {
            const cism__kernels *k = cism__kernels_tier(t);
            double one, all;
            if (!k || !in_list(tiers, k->name)) continue;
            one = att_pass(k, dt, kc, vc, 1, n_ctx, grp, 7);
            all = att_pass(k, dt, kc, vc, streamed, n_ctx, grp, 3);
            printf("%-8s KV %-4s | %6.1f in cache | %6.1f streamed (%5.1f GB/s of K and V)\n", k->name, cism_dtype_name(dt),
                   one * 1e9 / (double)n_ctx, all * 1e9 / (double)(streamed * n_ctx), 2.0 * (double)bytes / all / 1e9);
            fflush(stdout);
        }
        free(kc); free(vc);
    }
}

static int in_list(const char *list, const char *name) {
    const char *p = list;
    size_t n = strlen(name);
    if (!list) return 1;
    while ((p = strstr(p, name)) != NULL) {
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
        p += n;
    }
    return 0;
}

/* --mix: what a float multiply costs beside vpdpbusd on this core. Loops of 8
   independent 512-bit vpdpbusd chains per iteration, alone and with 2 float
   multiplies, adds or fused multiply-adds (independent chains) per iteration;
   the extra time per iteration in vpdpbusd slots. An int8 tile's block
   epilogue is such float work: where it shares the dot product's ports, it
   caps the tile below the peak (PERFORMANCE.md, "What caps the int8 tiles"). */
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MIX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define MIX_DOTS()                                                                                                    \
    do {                                                                                                              \
        a0 = _mm512_dpbusd_epi32(a0, w, x); a1 = _mm512_dpbusd_epi32(a1, w, x);                                       \
        a2 = _mm512_dpbusd_epi32(a2, w, x); a3 = _mm512_dpbusd_epi32(a3, w, x);                                       \
        a4 = _mm512_dpbusd_epi32(a4, w, x); a5 = _mm512_dpbusd_epi32(a5, w, x);                                       \
        a6 = _mm512_dpbusd_epi32(a6, w, x); a7 = _mm512_dpbusd_epi32(a7, w, x);                                       \
    } while (0)
#define MIX_KEEP() __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(f0), "+v"(f1))
/* seconds of CPU time for n iterations of variant v (0: dots alone, 1: + 2 vmulps, 2: + 2 vaddps, 3: + 2
   vfmadd); MIX_KEEP makes every iteration's results live, so no work is dropped */
static MIX_TARGET double mix_loop(int v, long n) {
    const __m512i w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(5);
    const __m512 s = _mm512_set1_ps(1.0000001f), g = _mm512_set1_ps(1e-7f);
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    __m512 f0 = _mm512_set1_ps(1.0f), f1 = f0;
    const double t0 = cpu_now();
    long i;
    for (i = 0; i < n; i++) {
        MIX_DOTS();
        if (v == 1) { f0 = _mm512_mul_ps(f0, s); f1 = _mm512_mul_ps(f1, s); }
        if (v == 2) { f0 = _mm512_add_ps(f0, g); f1 = _mm512_add_ps(f1, g); }
        if (v == 3) { f0 = _mm512_fmadd_ps(f0, s, g); f1 = _mm512_fmadd_ps(f1, s, g); }
        MIX_KEEP();
    }
    return cpu_now() - t0;
}
static void mix_table(void) {
    static const char *const name[4] = {"8 vpdpbusd", "+ 2 vmulps", "+ 2 vaddps", "+ 2 vfmadd231ps"};
    const long n = 4000000;
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    int r, v;
    if (!cism__kernels_tier(CISM_TIER_AVX512)) {
        printf("--mix: this CPU runs no avx512 tier (vpdpbusd)\n");
        return;
    }
    for (r = 0; r < 7; r++) /* the variants alternated, best of 7 */
        for (v = 0; v < 4; v++) {
            const double t = mix_loop(v, n);
            if (t < best[v]) best[v] = t;
        }
    printf("%-18s | %10s | %s\n", "512-bit loop", "ns / iter", "extra, in vpdpbusd slots (of 8)");
    for (v = 0; v < 4; v++)
        printf("%-18s | %10.3f | %+.2f\n", name[v], 1e9 * best[v] / (double)n, 8.0 * (best[v] - best[0]) / best[0]);
}
#else
static void mix_table(void) { printf("--mix: x86-64 with GCC or Clang only\n"); }
#endif

static int usage(FILE *f, int rc) {
    fprintf(f, "usage: cism-kernel-bench [--dtypes f32,q8,...] [--tiers avx2,avx512] [--a8] [--stream MB [--tokens 2,4,8]] [cols ...]\n"
               "       cism-kernel-bench --outliers [--dtypes ...] [--tiers ...]\n"
               "       cism-kernel-bench --attention [--tiers ...]\n"
               "       cism-kernel-bench --mix\n"
               "  speed of each kernel tier's matmul per weight dtype (GFLOP/s), prefill and decode;\n"
               "  cols: matrix widths to time (default 576 1536); --stream MB adds decode over a matrix of\n"
               "  MB megabytes (GB/s of weights read); --tokens adds, per count N, the time of one pass of\n"
               "  N tokens over that matrix as a multiple of one token's (batched decode: N sequences per\n"
               "  weight read); --dtypes / --tiers limit the table, --a8 to the int8-activation path; --outliers: the cost of the int8 path's\n"
               "  outlier-channel epilogue per packed dtype (two passes, and the fused entry where there is one);\n"
               "  --attention: the split attention kernel of a decode at 8k context (f16 and q8 KV), per tier;\n"
               "  --mix: the cost of float multiplies, adds and FMAs beside 512-bit vpdpbusd on this core\n");
    return rc;
}

int main(int argc, char **argv) {
    int64_t cols_list[8] = {576, 1536};
    int n_cols = 0, i, t, dt, a8;
    const char *dtypes = NULL, *tiers = NULL;
    double stream_mb = 0;
    int64_t tok_list[8];
    int n_tok = 0, outliers = 0, attention = 0, only_a8 = 0, mix = 0;
    for (i = 1; i < argc; i++) {
        char *end = NULL;
        long v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(stdout, 0);
        if (!strcmp(argv[i], "--dtypes") && i + 1 < argc) dtypes = argv[++i];
        else if (!strcmp(argv[i], "--tiers") && i + 1 < argc) tiers = argv[++i];
        else if (!strcmp(argv[i], "--outliers")) outliers = 1;
        else if (!strcmp(argv[i], "--a8")) only_a8 = 1;
        else if (!strcmp(argv[i], "--attention")) attention = 1;
        else if (!strcmp(argv[i], "--mix")) mix = 1;
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) {
            char *p = argv[++i];
            for (n_tok = 0; *p && n_tok < 8; n_tok++) {
                v = strtol(p, &end, 10);
                if (end == p || v < 1 || v > 64 || (*end && *end != ',')) {
                    fprintf(stderr, "cism-kernel-bench: --tokens needs counts 1..64 like 2,4,8 (got '%s')\n", argv[i]);
                    return usage(stderr, 2);
                }
                tok_list[n_tok] = v;
                p = *end ? end + 1 : end;
            }
        } else if (!strcmp(argv[i], "--stream") && i + 1 < argc) {
            stream_mb = strtod(argv[++i], &end);
            if (*end || !(stream_mb > 0)) {
                fprintf(stderr, "cism-kernel-bench: --stream needs a size in MB > 0 (got '%s')\n", argv[i]);
                return usage(stderr, 2);
            }
        } else {
            v = strtol(argv[i], &end, 10);
            if (argv[i][0] == '-' || *end || v <= 0 || v > (1L << 20)) {
                fprintf(stderr, "cism-kernel-bench: '%s' is not an option or a column count (1..1048576)\n", argv[i]);
                return usage(stderr, 2);
            }
            if (n_cols == 8) {
                fprintf(stderr, "cism-kernel-bench: at most 8 column counts\n");
                return usage(stderr, 2);
            }
            cols_list[n_cols++] = v;
        }
    }
    if (!n_cols) n_cols = 2;
    if (n_tok && !(stream_mb > 0)) {
        fprintf(stderr, "cism-kernel-bench: --tokens needs --stream MB\n");
        return usage(stderr, 2);
    }
    printf("%s\n%s\n", cism_build_info(), cism_system_info());
    if (outliers) {
        outlier_table(tiers, dtypes);
        return 0;
    }
    if (attention) {
        attention_table(tiers);
        return 0;
    }
    if (mix) {
        mix_table();
        return 0;
    }
    printf("%-8s %-8s %6s | %16s | %16s%s\n", "tier", "dtype", "cols", "prefill GFLOP/s", "decode GFLOP/s",
           stream_mb > 0 ? " | stream GB/s" : "");
    for (t = CISM_TIER_SCALAR; cism_kernel_tier_name(t); t++) {
        const cism__kernels *k = cism__kernels_tier(t);
        double peak = 0;
        if (!k || !in_list(tiers, k->name)) continue;
        if (cism_measure_int8_mac_peak(t, &peak) == CISM_OK)
            printf("%-8s int8 multiply-add peak, one core: %.1f G MAC/s (%.1f GFLOP/s)\n", k->name, peak / 1e9, 2 * peak / 1e9);
        for (dt = 0; dt < CISM__DTYPE_COUNT; dt++) {
            if (!in_list(dtypes, cism_dtype_name(dt))) continue;
            for (a8 = only_a8; a8 <= is_packed(dt); a8++)
                for (i = 0; i < n_cols; i++) {
                    char name[32];
                    snprintf(name, sizeof(name), "%s%s", cism_dtype_name(dt), a8 ? "/a8" : "");
                    double pre = gflops(k, dt, a8, 64, cols_list[i], 96);
                    printf("%-8s %-8s %6lld | %9.1f", k->name, name, (long long)cols_list[i], pre);
                    if (a8 && peak > 0) printf(" (%3.0f%%)", 100.0 * pre * 1e9 / (2 * peak));
                    else printf("       ");
                    printf(" | %16.1f", gflops(k, dt, a8, 256, cols_list[i], 1));
                    if (stream_mb > 0) {
                        uint64_t rb = cism__row_bytes(dt, cols_list[i]);
                        int64_t rows = (int64_t)(stream_mb * 1e6 / (double)rb);
                        uint8_t *w = make_weights(dt, rows, cols_list[i], &rb);
                        double s;
                        int j;
                        cism__x16_streaming = cism__weights_stream(rows * (int64_t)rb); /* as a model of that size */
                        s = run(k, dt, a8, w, rb, rows, cols_list[i], 1, 3);
                        printf(" | %8.1f", (double)rows * (double)rb / s / 1e9);
                        for (j = 0; j < n_tok; j++)
                            printf(" | %lldx: %5.2f", (long long)tok_list[j],
                                   run(k, dt, a8, w, rb, rows, cols_list[i], tok_list[j], 3) / s);
                        cism__x16_streaming = 0;
                        free(w);
                    }
                    printf("\n");
                    fflush(stdout);
                }
        }
    }
    return 0;
}
