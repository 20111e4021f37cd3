/* test_kv_cache.c - the quantized KV cache (docs/KV_CACHE.md): the row
 * quantizer and the Walsh-Hadamard rotation (kv_quant.h) against their
 * definitions; sessions with q8 and q4a caches, rotated or not, give the same
 * logits bits in one call or chunked, with 1 or 2 threads, after a rewind and
 * re-eval (also past a sliding-window ring, which re-evaluates), and after a
 * save/load round trip; they differ from the f16 cache (the rows really are
 * quantized) but stay close to it; memory estimates count the smaller rows;
 * a model whose head_dim is not a multiple of 32, kv_rotate 1 on an f16
 * cache, a state of another KV type or rotation, a batch of another KV
 * rotation, and KV types that are not accepted are refused with a message.
 * K and V of different types (CISM_PARAM_KV_TYPE_V, e.g. K q8 + V q4a) pass
 * the same session checks; their states refuse sessions of other K/V types,
 * batches refuse members of another V type, and estimates count each cache. */
#include "cism.h"
#include "kernels/kv_quant.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#if defined(_WIN32)
#include <process.h>
#define test_pid() _getpid()
#else
#include <unistd.h>
#define test_pid() getpid()
#endif

/* the state file: one name per process, so that copies run at once (ctest -j, emulators) do not collide */
static const char *state_path(void) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof(path), "test_kv_cache.%ld.tmp", (long)test_pid());
    return path;
}
#define STATE state_path()

static uint32_t g_rng = 12345u;
static float frand(void) { /* [-1, 1) */
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((g_rng >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

/* ---- the row quantizer ------------------------------------------------------------- */
static void test_quantizer(void) {
    float x[128], y[128], yp[128], amax;
    uint8_t q[128 * 2], plain[128 * 2];
    int32_t types[2] = {CISM_DTYPE_Q8, CISM_DTYPE_Q4A};
    int t, i, b, rep, searched = 0;
    for (t = 0; t < 2; t++)
        for (rep = 0; rep < 50; rep++) {
            for (i = 0; i < 128; i++) x[i] = frand() * (rep % 5 == 0 ? 1000.0f : 2.0f) + (t && rep % 3 == 0 ? 5.0f : 0.0f);
            cism__kv_quantize_row(types[t], x, 128, q, 1, NULL);
            cism__kv_decode(types[t], q, y, 128);
            cism__kv_quantize_row(types[t], x, 128, plain, 0, NULL);
            cism__kv_decode(types[t], plain, yp, 128);
            for (b = 0; b < 128; b += 32) {
                float lo = x[b], hi = x[b], err = 0.0f, step;
                for (i = b, amax = 0.0f; i < b + 32; i++) {
                    amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
                    lo = x[i] < lo ? x[i] : lo;
                    hi = x[i] > hi ? x[i] : hi;
                    err = fabsf(y[i] - x[i]) > err ? fabsf(y[i] - x[i]) : err;
                }
                /* half a step, plus the fp16 rounding of the scale (and of q4a's minimum); q4a may store a
                   range whose ends are up to 20% closer to zero (its range search), then clamped values err more */
                step = t == 0 ? amax / 127.0f : (hi - lo) / 15.0f;
                CHECK_MSG(err <= 0.5f * step * 1.01f + (t ? fabsf(lo) * 1e-3f + 0.2f * amax : 0.0f) + 1e-6f,
                          "%s block %d: error %g, step %g", cism_dtype_name(types[t]), b / 32, err, step);
                if (t) { /* the range search never does worse than the block's own [min, max] */
                    const float d = cism__f16_to_f32(cism__f32_to_f16((hi - lo) / 15.0f)), m = cism__f16_to_f32(cism__f32_to_f16(lo));
                    double sse = 0.0, sse_ref = 0.0;
                    for (i = b; i < b + 32; i++) {
                        /* without the search (values): exactly the block's [min, max] */
                        float cp = d > 0.0f ? floorf((x[i] - m) / d + 0.5f) : 0.0f;
                        cp = cp < 0.0f ? 0.0f : cp > 15.0f ? 15.0f : cp;
                        CHECK_MSG(yp[i] == d * cp + m || fabsf(yp[i] - (d * cp + m)) <= 1e-6f * fabsf(d * 16.0f + m),
                                  "q4a without the search, element %d: %g, [min, max] gives %g", i, yp[i], d * cp + m);
                        float c = d > 0.0f ? floorf((x[i] - m) / d + 0.5f) : 0.0f, r;
                        c = c < 0.0f ? 0.0f : c > 15.0f ? 15.0f : c;
                        r = d * c;
                        r = r + m;
                        sse += (double)(y[i] - x[i]) * (y[i] - x[i]);
                        sse_ref += (double)(r - x[i]) * (r - x[i]);
                    }
                    CHECK_MSG(sse <= sse_ref * (1.0 + 1e-6), "q4a block %d: squared error %g, its [min, max] gives %g",
                              b / 32, sse, sse_ref);
                    searched += sse < sse_ref * 0.999;
                }
            }
        }
    CHECK_MSG(searched > 20, "q4a: only %d of 200 blocks took a range other than their [min, max]", searched);
    /* a zero block decodes to zeros; a block with a NaN or an infinity decodes to NaN (the eval then fails as
       with f16), its neighbours are untouched */
    for (t = 0; t < 2; t++) {
        for (i = 0; i < 64; i++) x[i] = i < 32 ? 0.0f : frand();
        x[40] = t ? INFINITY : NAN;
        cism__kv_quantize_row(types[t], x, 64, q, 1, NULL);
        cism__kv_decode(types[t], q, y, 64);
        for (i = 0; i < 32; i++) CHECK(y[i] == 0.0f);
        for (i = 32; i < 64; i++) CHECK_MSG(isnan(y[i]), "%s: element %d of a block with a non-finite value: %g",
                                             cism_dtype_name(types[t]), i, y[i]);
    }
    /* a scale that overflows fp16 (max/127 > 65504) is a NaN block, not an infinity times zero codes */
    for (i = 0; i < 32; i++) x[i] = 1e7f;
    cism__kv_quantize_row(CISM_DTYPE_Q8, x, 32, q, 1, NULL);
    cism__kv_decode(CISM_DTYPE_Q8, q, y, 32);
    CHECK(isnan(y[0]) && isnan(y[31]));
    /* the row sizes */
    CHECK(cism__kv_row_bytes(CISM_DTYPE_Q8, 64) == 68 && cism__kv_row_bytes(CISM_DTYPE_Q4A, 128) == 80 &&
          cism__kv_row_bytes(CISM_DTYPE_F16, 64) == 128 && cism__kv_row_bytes(CISM_DTYPE_F32, 64) == 256);
}

/* Rounding along a direction (the queries' main direction of a key row): the
   row's error along u shrinks several times, no element moves more than a
   step from its value, and the ranges (d, m) are the search's. */
static void test_quantizer_direction(void) {
    float x[64], u[64], y[64], yd[64];
    uint8_t q[40], qd[40];
    double along = 0.0, along_d = 0.0;
    int rep, i;
    for (rep = 0; rep < 200; rep++) {
        double a = 0.0, ad = 0.0;
        for (i = 0; i < 64; i++) {
            x[i] = frand() * 2.0f + (rep % 4 == 0 ? 3.0f : 0.0f);
            u[i] = frand() * 3.0f;
        }
        cism__kv_quantize_row(CISM_DTYPE_Q4A, x, 64, q, 1, NULL);
        cism__kv_quantize_row(CISM_DTYPE_Q4A, x, 64, qd, 1, u);
        CHECK(memcmp(q, qd, 4) == 0 && memcmp(q + 20, qd + 20, 4) == 0); /* the same d and m */
        cism__kv_decode(CISM_DTYPE_Q4A, q, y, 64);
        cism__kv_decode(CISM_DTYPE_Q4A, qd, yd, 64);
        for (i = 0; i < 64; i++) {
            const float step = cism__f16_to_f32((uint16_t)(qd[i / 32 * 20] | (qd[i / 32 * 20 + 1] << 8)));
            a += (double)u[i] * (y[i] - x[i]);
            ad += (double)u[i] * (yd[i] - x[i]);
            CHECK_MSG(fabsf(yd[i] - y[i]) <= step * 1.001f, "element %d moved %g, step %g", i, yd[i] - y[i], step);
        }
        along += fabs(a);
        along_d += fabs(ad);
    }
    CHECK_MSG(along_d < 0.25 * along, "error along the direction: %g with it, %g without", along_d / 200, along / 200);
    /* q8 rows and rows without the search ignore a direction */
    cism__kv_quantize_row(CISM_DTYPE_Q4A, x, 64, q, 0, NULL);
    cism__kv_quantize_row(CISM_DTYPE_Q4A, x, 64, qd, 0, u);
    CHECK(memcmp(q, qd, 40) == 0);
}

/* ---- the rotation ------------------------------------------------------------------ */
/* Sylvester's H_p entry (i, j): (-1)^popcount(i & j) */
static double hadamard_entry(int64_t i, int64_t j) {
    int64_t v = i & j, n = 0;
    while (v) { n += v & 1; v >>= 1; }
    return n % 2 ? -1.0 : 1.0;
}

static void test_hadamard(void) {
    const int64_t ns[] = {32, 64, 96, 128, 160, 256};
    float x[256], y[256], z[256];
    size_t c;
    int64_t i, j;
    CHECK(cism__kv_hadamard_block(64) == 64 && cism__kv_hadamard_block(96) == 32 && cism__kv_hadamard_block(160) == 32 &&
          cism__kv_hadamard_block(80) == 16);
    for (c = 0; c < sizeof(ns) / sizeof(ns[0]); c++) {
        int64_t n = ns[c], p = cism__kv_hadamard_block(n);
        double nx = 0, ny = 0, dot0 = 0, dot1 = 0;
        for (i = 0; i < n; i++) x[i] = y[i] = frand();
        for (i = 0; i < n; i++) z[i] = frand();
        for (i = 0; i < n; i++) dot0 += (double)x[i] * z[i];
        cism__kv_hadamard(y, n);
        for (i = 0; i < n; i++) { /* the definition, block by block, in double */
            int64_t b = i / p * p;
            double r = 0;
            for (j = 0; j < p; j++) r += hadamard_entry(i - b, j) * x[b + j];
            r /= sqrt((double)p);
            CHECK_MSG(fabs(y[i] - r) <= 1e-5 * (1 + fabs(r)), "n %lld: (Hx)[%lld] = %g, expected %g", (long long)n, (long long)i,
                      y[i], r);
            nx += (double)x[i] * x[i];
            ny += (double)y[i] * y[i];
        }
        CHECK(fabs(nx - ny) <= 1e-5 * nx);
        cism__kv_hadamard(z, n); /* (Hq).(Hk) = q.k */
        for (i = 0; i < n; i++) dot1 += (double)y[i] * z[i];
        CHECK_MSG(fabs(dot0 - dot1) <= 1e-5 * sqrt(nx * n), "n %lld: dot %g after rotation, %g before", (long long)n, dot1, dot0);
        cism__kv_hadamard(y, n); /* H H = I */
        for (i = 0; i < n; i++) CHECK(fabs(y[i] - x[i]) <= 1e-6);
    }
}

/* ---- sessions ------------------------------------------------------------------------ */
typedef struct kvcfg { int32_t kv_type; int rotate; int32_t kv_type_v; } kvcfg; /* kv_type_v -1: as kv_type */

static cism_session *kv_session(cism_model *m, kvcfg c, int threads, int n_batch, int n_ctx) {
    cism_params *p = NULL;
    cism_session *s = NULL;
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, threads));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KV_TYPE, c.kv_type));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KV_ROTATE, c.rotate));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KV_TYPE_V, c.kv_type_v));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_LOGITS_ALL, 1));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_BATCH, n_batch));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_CTX, n_ctx));
    CHECK_OK(cism_session_create(m, p, &s));
    cism_params_free(p);
    return s;
}

/* Evaluates toks[0..n) in calls of the sizes in cuts (cycled), copying every row's logits to out[n][vocab]. */
static void eval_rows(cism_session *s, const int32_t *toks, int n, const int *cuts, int n_cuts, float *out, int vocab) {
    int done = 0, c = 0, r;
    while (done < n) {
        int k = cuts[c++ % n_cuts];
        if (k > n - done) k = n - done;
        CHECK_OK(cism_session_eval(s, toks + done, k));
        for (r = 0; r < k; r++) {
            const float *lg = NULL;
            if (cism_session_logits(s, r, &lg, NULL) != CISM_OK || !lg) { g_failures++; return; }
            memcpy(out + (size_t)(done + r) * (size_t)vocab, lg, (size_t)vocab * sizeof(float));
        }
        done += k;
    }
}

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    size_t i;
    for (i = 0; i < n; i++) d = fabs((double)a[i] - b[i]) > d ? fabs((double)a[i] - b[i]) : d;
    return d;
}

/* greedy steps from the session's last logits */
static void greedy(cism_session *s, int steps, int32_t *out, float *last, int vocab) {
    int i, j;
    for (i = 0; i < steps; i++) {
        const float *lg = NULL;
        int32_t t = 0;
        if (cism_session_logits(s, -1, &lg, NULL) != CISM_OK || !lg) { g_failures++; return; }
        for (j = 1; j < vocab; j++) if (lg[j] > lg[t]) t = (int32_t)j;
        out[i] = t;
        CHECK_OK(cism_session_eval(s, &t, 1));
    }
    {
        const float *lg = NULL;
        if (cism_session_logits(s, -1, &lg, NULL) == CISM_OK && lg) memcpy(last, lg, (size_t)vocab * sizeof(float));
    }
}

/* One model, n tokens, n_ctx positions: every KV configuration. rewind_to: a
   position to rewind to and re-evaluate from (past the ring's reach on a
   sliding-window model: a replay). */
/* bound8, bound4: the largest |logit difference| from the f16 cache allowed for q8 and q4a (about 3x what was
   measured) */
static void test_sessions(const char *name, int n, int n_ctx, int rewind_to, double bound8, double bound4) {
    const char *path = fixture_path(name);
    const kvcfg cfgs[] = {{CISM_DTYPE_Q8, 0, -1}, {CISM_DTYPE_Q8, 1, -1}, {CISM_DTYPE_Q4A, 1, -1}, {CISM_DTYPE_Q4A, 0, -1},
                          {CISM_DTYPE_Q8, -1, -1}, {CISM_DTYPE_Q8, 1, CISM_DTYPE_Q4A}, {CISM_DTYPE_Q8, 0, CISM_DTYPE_Q4A},
                          {CISM_DTYPE_F16, -1, CISM_DTYPE_Q8}};
    const int whole[] = {1 << 20}, uneven[] = {5, 1, 13, 2, 31, 7};
    cism_model *m = NULL;
    int32_t *toks;
    float *ref, *f16, *got, *rot_off = NULL, *rot_on = NULL;
    int vocab, c, i;
    size_t rows_bytes;
    if (!path) return;
    CHECK_OK(cism_model_load(path, NULL, &m));
    if (!m) return;
    {
        int64_t v = 0;
        CHECK_OK(cism_model_get_info(m, CISM_INFO_VOCAB_SIZE, &v));
        vocab = (int)v;
    }
    toks = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    for (i = 0; i < n; i++) toks[i] = 1 + (int32_t)((i * 7919u + 13u) % (unsigned)(vocab - 1));
    rows_bytes = (size_t)n * (size_t)vocab * sizeof(float);
    ref = (float *)malloc(rows_bytes);
    f16 = (float *)malloc(rows_bytes);
    got = (float *)malloc(rows_bytes);
    { /* the f16 cache, for comparison */
        cism_session *s = kv_session(m, (kvcfg){CISM_DTYPE_F16, -1, -1}, 2, n, n_ctx);
        if (s) eval_rows(s, toks, n, whole, 1, f16, vocab);
        cism_session_free(s);
    }
    for (c = 0; c < (int)(sizeof(cfgs) / sizeof(cfgs[0])); c++) {
        const kvcfg k = cfgs[c];
        const int32_t vt = k.kv_type_v < 0 ? k.kv_type : k.kv_type_v;
        char kn[48];
        cism_session *a = kv_session(m, k, 1, n, n_ctx), *b = kv_session(m, k, 2, 8, n_ctx), *r = NULL;
        int32_t ga[6], gb[6];
        float *la = (float *)malloc((size_t)vocab * 4), *lb = (float *)malloc((size_t)vocab * 4);
        double d;
        snprintf(kn, sizeof(kn), "%s%s%s", cism_dtype_name(k.kv_type), vt != k.kv_type ? "/" : "",
                 vt != k.kv_type ? cism_dtype_name(vt) : "");
        if (!a || !b) { cism_session_free(a); cism_session_free(b); free(la); free(lb); continue; }
        eval_rows(a, toks, n, whole, 1, ref, vocab);                /* one call, one thread */
        eval_rows(b, toks, n, uneven, 6, got, vocab);               /* uneven calls in chunks of 8, two threads */
        CHECK_MSG(memcmp(ref, got, rows_bytes) == 0, "%s kv %s rotate %d: chunked / 2 threads differ from one call", name, kn,
                  k.rotate);
        double close_bound = k.kv_type == CISM_DTYPE_Q4A || vt == CISM_DTYPE_Q4A ? bound4 : bound8;
        d = max_diff(ref, f16, (size_t)n * (size_t)vocab);
        CHECK_MSG(d > 0, "%s kv %s rotate %d: logits equal the f16 cache's: the cache is not quantized", name, kn, k.rotate);
        CHECK_MSG(d < close_bound, "%s kv %s rotate %d: logits differ from the f16 cache's by %g (bound %g)", name, kn, k.rotate, d,
                  close_bound);
        printf("%s kv %s rotate %d: max |logit - f16 cache's| %.4g\n", name, kn, k.rotate, d);
        if (k.kv_type == CISM_DTYPE_Q8 && vt == CISM_DTYPE_Q8 && k.rotate == 0) rot_off = (float *)memcpy(malloc(rows_bytes), ref, rows_bytes);
        if (k.kv_type == CISM_DTYPE_Q8 && vt == CISM_DTYPE_Q8 && k.rotate == 1) rot_on = (float *)memcpy(malloc(rows_bytes), ref, rows_bytes);
        if (k.kv_type == CISM_DTYPE_Q8 && vt == CISM_DTYPE_Q8 && k.rotate == -1 && rot_off && rot_on) { /* q8's default: rotated (KV_CACHE.md) */
            CHECK_MSG(memcmp(rot_off, rot_on, rows_bytes) != 0, "%s: q8 with and without rotation give the same bits", name);
            CHECK_MSG(memcmp(rot_on, ref, rows_bytes) == 0, "%s: q8's default is not the rotated cache", name);
        }
        /* rewind and evaluate the rest again: the same rows */
        CHECK_OK(cism_session_rewind(b, rewind_to));
        eval_rows(b, toks + rewind_to, n - rewind_to, uneven + 2, 4, got, vocab);
        CHECK_MSG(memcmp(ref + (size_t)rewind_to * (size_t)vocab, got, (size_t)(n - rewind_to) * (size_t)vocab * 4) == 0,
                  "%s kv %s rotate %d: rewind to %d and re-eval differs", name, kn, k.rotate, rewind_to);
        /* save / load: the restored session continues bit for bit */
        CHECK_OK(cism_session_save(a, NULL, STATE));
        r = kv_session(m, k, 2, 8, n_ctx);
        if (r) {
            CHECK_OK(cism_session_load(r, NULL, STATE));
            greedy(a, 6, ga, la, vocab);
            greedy(r, 6, gb, lb, vocab);
            CHECK_MSG(memcmp(ga, gb, sizeof(ga)) == 0 && memcmp(la, lb, (size_t)vocab * 4) == 0,
                      "%s kv %s rotate %d: the loaded session continues differently", name, kn, k.rotate);
            if (k.rotate >= 0) { /* a state of the other rotation is refused, the session unchanged */
                cism_session *o = kv_session(m, (kvcfg){k.kv_type, !k.rotate, k.kv_type_v}, 1, 8, n_ctx);
                cism_status st = o ? cism_session_load(o, NULL, STATE) : CISM_OK;
                CHECK_MSG(st == CISM_ERR_INVALID_ARG && strstr(cism_last_error(), "kv_rotate"), "state of another rotation: %s",
                          cism_last_error());
                if (o) CHECK(cism_session_n_past(o) == 0);
                cism_session_free(o);
            }
            if (vt != k.kv_type) { /* K q8 + V q4a: a session with V of K's type, or K of V's, is refused (both ways) */
                const kvcfg others[] = {{k.kv_type, k.rotate, -1}, {vt, k.rotate, -1}, {vt, k.rotate, k.kv_type}};
                int j;
                for (j = 0; j < 3; j++) {
                    cism_session *o = kv_session(m, others[j], 1, 8, n_ctx);
                    cism_status st = o ? cism_session_load(o, NULL, STATE) : CISM_OK;
                    CHECK_MSG(st == CISM_ERR_INVALID_ARG && strstr(cism_last_error(), "kv_type_v") &&
                              strstr(cism_last_error(), " + V "), "%s: state of K/V %s in another K/V session (%d): %s",
                              name, kn, j, cism_last_error());
                    if (o) CHECK(cism_session_n_past(o) == 0);
                    cism_session_free(o);
                }
                { /* and a single-type state in this session */
                    cism_session *o = kv_session(m, (kvcfg){k.kv_type, k.rotate, -1}, 1, 8, n_ctx);
                    if (o) {
                        CHECK_OK(cism_session_eval(o, toks, 3));
                        CHECK_OK(cism_session_save(o, NULL, STATE));
                        CHECK(cism_session_load(r, NULL, STATE) == CISM_ERR_INVALID_ARG && strstr(cism_last_error(), "kv_type_v"));
                    }
                    cism_session_free(o);
                }
            }
        }
        remove(STATE);
        cism_session_free(a);
        cism_session_free(b);
        cism_session_free(r);
        free(la);
        free(lb);
    }
    free(rot_off);
    free(rot_on);
    free(toks); free(ref); free(f16); free(got);
    cism_model_free(m);
}

/* Speculative verify (prompt lookup, greedy) on a quantized cache: drafts
   evaluated and rolled back give the tokens and final logits of plain decoding. */
static int32_t no_callback(void *data, int32_t token) {
    (void)data;
    (void)token;
    return 0;
}

static void test_speculative(const char *name, int n_ctx) {
    const char *path = fixture_path(name);
    const kvcfg cfgs[] = {{CISM_DTYPE_Q8, 1, -1}, {CISM_DTYPE_Q4A, -1, -1}, {CISM_DTYPE_Q8, -1, CISM_DTYPE_Q4A}};
    cism_model *m = NULL;
    int32_t prompt[120];
    int c, i;
    if (!path) return;
    CHECK_OK(cism_model_load(path, NULL, &m));
    if (!m) return;
    for (i = 0; i < 120; i++) prompt[i] = 1 + (int32_t)((i % 23) * 5 % 200); /* repeats: lookup finds drafts */
    for (c = 0; c < 2; c++) {
        int32_t out[2][64], n[2] = {0, 0}, run;
        int64_t verified = 0;
        cism_stop_reason why;
        float last[2][256];
        for (run = 0; run < 2; run++) {
            cism_session *s = kv_session(m, cfgs[c], 2, 16, n_ctx);
            cism_sampler *smp = NULL;
            cism_spec *sp = NULL;
            const float *lg = NULL;
            int32_t nv = 0;
            CHECK_OK(cism_sampler_create(&smp));
            if (run == 0) {
                CHECK_OK(cism_generate_v2(s, smp, prompt, 120, 64, CISM_GENERATE_IGNORE_EOS, no_callback, NULL, &n[run], &why));
            } else {
                CHECK_OK(cism_spec_create_lookup(&sp));
                CHECK_OK(cism_generate_spec(sp, s, smp, prompt, 120, 64, CISM_GENERATE_IGNORE_EOS, no_callback, NULL, &n[run], &why));
                CHECK_OK(cism_spec_stat_get(sp, CISM_SPEC_STAT_VERIFY, &verified));
            }
            {
                int32_t all[256], na = 0;
                CHECK_OK(cism_session_tokens(s, all, 256, &na));
                memcpy(out[run], all + 120, sizeof(out[run]));
            }
            if (cism_session_logits(s, -1, &lg, &nv) == CISM_OK && nv <= 256) memcpy(last[run], lg, (size_t)nv * 4);
            cism_spec_free(sp);
            cism_sampler_free(smp);
            cism_session_free(s);
        }
        CHECK_MSG(n[0] == 64 && n[1] == 64 && memcmp(out[0], out[1], sizeof(out[0])) == 0 &&
                  memcmp(last[0], last[1], sizeof(last[0])) == 0,
                  "%s kv %s: speculative greedy tokens differ from plain decoding", name, cism_dtype_name(cfgs[c].kv_type));
        CHECK_MSG(verified > 0, "%s: no draft was verified (the test proves nothing)", name);
    }
    cism_model_free(m);
}

static cism_status create_kv(cism_model *m, int32_t kv_type, int32_t kv_type_v, int64_t rotate, int n_ctx,
                             int64_t *estimate) {
    cism_params *p = NULL;
    cism_session *s = NULL;
    cism_status st;
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KV_TYPE, kv_type));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KV_TYPE_V, kv_type_v));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KV_ROTATE, rotate));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_CTX, n_ctx));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, 1));
    if (estimate) {
        st = cism_session_estimate_bytes(m, p, estimate);
    } else {
        st = cism_session_create(m, p, &s);
        cism_session_free(s);
    }
    cism_params_free(p);
    return st;
}

static cism_status create_with(cism_model *m, int32_t kv_type, int64_t rotate, int n_ctx, int64_t *estimate) {
    return create_kv(m, kv_type, -1, rotate, n_ctx, estimate);
}

static void test_refusals(void) {
    const char *small = fixture_path("stories260K.cism"), *syn = fixture_path("synthetic.q4s.cism");
    cism_params *p = NULL;
    cism_model *m = NULL;
    cism_status st;
    CHECK_OK(cism_params_create(&p));
    st = cism_params_set_int(p, CISM_PARAM_KV_TYPE, CISM_DTYPE_Q4);  /* the symmetric 4-bit type is not a KV type */
    CHECK_MSG(st == CISM_ERR_INVALID_ARG && strstr(cism_last_error(), "q4a"), "kv_type q4: %s", cism_last_error());
    CHECK(cism_params_set_int(p, CISM_PARAM_KV_ROTATE, 2) == CISM_ERR_INVALID_ARG && strstr(cism_last_error(), "kv_rotate"));
    st = cism_params_set_int(p, CISM_PARAM_KV_TYPE_V, CISM_DTYPE_Q4);  /* the V type: the same types, or -1 */
    CHECK_MSG(st == CISM_ERR_INVALID_ARG && strstr(cism_last_error(), "kv_type_v") && strstr(cism_last_error(), "q4a"),
              "kv_type_v q4: %s", cism_last_error());
    CHECK(cism_params_set_int(p, CISM_PARAM_KV_TYPE_V, -2) == CISM_ERR_INVALID_ARG && strstr(cism_last_error(), "kv_type_v"));
    {
        int64_t v = 0;
        CHECK_OK(cism_params_get_int(p, CISM_PARAM_KV_TYPE_V, &v));
        CHECK(v == -1); /* the default, unchanged by the refusals */
        CHECK_OK(cism_params_set_int(p, CISM_PARAM_KV_TYPE_V, CISM_DTYPE_Q4A));
        CHECK_OK(cism_params_get_int(p, CISM_PARAM_KV_TYPE_V, &v));
        CHECK(v == CISM_DTYPE_Q4A);
    }
    cism_params_free(p);
    if (small) { /* head_dim 8 */
        CHECK_OK(cism_model_load(small, NULL, &m));
        if (m) {
            st = create_with(m, CISM_DTYPE_Q8, -1, 64, NULL);
            CHECK_MSG(st == CISM_ERR_UNSUPPORTED && strstr(cism_last_error(), "multiple of 32") && strstr(cism_last_error(), "head_dim is 8"),
                      "q8 cache on head_dim 8: %s", cism_last_error());
            st = create_with(m, CISM_DTYPE_Q4A, -1, 64, NULL);
            CHECK(st == CISM_ERR_UNSUPPORTED);
            {
                int64_t e = 0;
                CHECK(create_with(m, CISM_DTYPE_Q4A, -1, 64, &e) == CISM_ERR_UNSUPPORTED); /* the estimate too */
            }
            st = create_with(m, CISM_DTYPE_F16, 1, 64, NULL);
            CHECK_MSG(st == CISM_ERR_INVALID_ARG && strstr(cism_last_error(), "kv_rotate"), "kv_rotate 1 on f16: %s",
                      cism_last_error());
            st = create_kv(m, CISM_DTYPE_F16, CISM_DTYPE_Q4A, -1, 64, NULL); /* a quantized V alone needs head_dim 32k too */
            CHECK_MSG(st == CISM_ERR_UNSUPPORTED && strstr(cism_last_error(), "q4a") && strstr(cism_last_error(), "head_dim is 8"),
                      "f16/q4a cache on head_dim 8: %s", cism_last_error());
            st = create_kv(m, CISM_DTYPE_F32, CISM_DTYPE_F16, 1, 64, NULL);
            CHECK_MSG(st == CISM_ERR_INVALID_ARG && strstr(cism_last_error(), "kv_rotate"), "kv_rotate 1 on f32/f16: %s",
                      cism_last_error());
            CHECK_OK(create_kv(m, CISM_DTYPE_F32, CISM_DTYPE_F16, -1, 64, NULL));
            CHECK_OK(create_with(m, CISM_DTYPE_F16, 0, 64, NULL));
            cism_model_free(m);
            m = NULL;
        }
    }
    if (syn) { /* 2 layers x 8 KV heads x head_dim 64: the estimates differ by exactly the cache rows */
        CHECK_OK(cism_model_load(syn, NULL, &m));
        if (m) {
            int64_t e16 = 0, e8 = 0, e4 = 0, rows = 2 * 8 * 128; /* rows per cache at n_ctx 128 */
            CHECK_OK(create_with(m, CISM_DTYPE_F16, -1, 128, &e16));
            CHECK_OK(create_with(m, CISM_DTYPE_Q8, -1, 128, &e8));
            CHECK_OK(create_with(m, CISM_DTYPE_Q4A, -1, 128, &e4));
            CHECK_MSG(e16 - e8 == 2 * rows * (128 - 68) && e16 - e4 == 2 * rows * (128 - 40),
                      "estimates f16 %lld q8 %lld q4a %lld", (long long)e16, (long long)e8, (long long)e4);
            { /* K q8 + V q4a: each cache counted in its own rows; V f32 under K f16 */
                int64_t e84 = 0, e1632 = 0;
                cism_session *s = kv_session(m, (kvcfg){CISM_DTYPE_Q8, -1, CISM_DTYPE_Q4A}, 1, 256, 128);
                CHECK_OK(create_kv(m, CISM_DTYPE_Q8, CISM_DTYPE_Q4A, -1, 128, &e84));
                CHECK_OK(create_kv(m, CISM_DTYPE_F16, CISM_DTYPE_F32, -1, 128, &e1632));
                CHECK_MSG(e16 - e84 == rows * (128 - 68) + rows * (128 - 40) && e1632 - e16 == rows * (256 - 128),
                          "estimates f16 %lld q8/q4a %lld f16/f32 %lld", (long long)e16, (long long)e84, (long long)e1632);
                if (s) CHECK(cism_session_memory_bytes(s) == e84);
                cism_session_free(s);
            }
            { /* a created session counts the same */
                cism_session *s = kv_session(m, (kvcfg){CISM_DTYPE_Q4A, -1, -1}, 1, 256, 128), *s16 = kv_session(m, (kvcfg){CISM_DTYPE_F16, -1, -1}, 1, 256, 128);
                if (s && s16) CHECK(cism_session_memory_bytes(s16) - cism_session_memory_bytes(s) == 2 * rows * (128 - 40));
                cism_session_free(s);
                cism_session_free(s16);
            }
            { /* a batch holds sessions of one KV type and rotation */
                cism_batch *b = NULL;
                cism_params *bp = NULL;
                cism_session *s = kv_session(m, (kvcfg){CISM_DTYPE_Q8, 0, -1}, 1, 8, 128); /* the batch: q8, rotated */
                int32_t t = 5;
                CHECK_OK(cism_params_create(&bp));
                CHECK_OK(cism_params_set_int(bp, CISM_PARAM_KV_TYPE, CISM_DTYPE_Q8));
                CHECK_OK(cism_batch_create(m, bp, &b));
                if (b && s) {
                    st = cism_batch_add(b, s, &t, 1);
                    CHECK_MSG(st == CISM_ERR_INVALID_ARG && strstr(cism_last_error(), "KV_ROTATE"), "batch: %s", cism_last_error());
                }
                cism_batch_free(b);
                cism_params_free(bp);
                cism_session_free(s);
            }
            { /* ... and one V type: K q8 + V q4a sessions join a K q8 + V q4a batch, not a q8 one, nor q4a ones a q8/q4a batch */
                cism_batch *b = NULL, *b8 = NULL;
                cism_params *bp = NULL;
                cism_session *s = kv_session(m, (kvcfg){CISM_DTYPE_Q8, -1, CISM_DTYPE_Q4A}, 1, 8, 128);
                cism_session *s4 = kv_session(m, (kvcfg){CISM_DTYPE_Q4A, -1, -1}, 1, 8, 128);
                int32_t t = 5;
                CHECK_OK(cism_params_create(&bp));
                CHECK_OK(cism_params_set_int(bp, CISM_PARAM_KV_TYPE, CISM_DTYPE_Q8));
                CHECK_OK(cism_batch_create(m, bp, &b8));
                CHECK_OK(cism_params_set_int(bp, CISM_PARAM_KV_TYPE_V, CISM_DTYPE_Q4A));
                CHECK_OK(cism_batch_create(m, bp, &b));
                if (b && b8 && s && s4) {
                    st = cism_batch_add(b8, s, &t, 1);
                    CHECK_MSG(st == CISM_ERR_INVALID_ARG && strstr(cism_last_error(), "KV_TYPE_V"), "batch V: %s", cism_last_error());
                    st = cism_batch_add(b, s4, &t, 1);
                    CHECK_MSG(st == CISM_ERR_INVALID_ARG && strstr(cism_last_error(), "KV_TYPE"), "batch K: %s", cism_last_error());
                    CHECK_OK(cism_batch_add(b, s, &t, 1));
                }
                cism_batch_free(b);
                cism_batch_free(b8);
                cism_params_free(bp);
                cism_session_free(s);
                cism_session_free(s4);
            }
            cism_model_free(m);
        }
    }
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    test_quantizer();
    test_quantizer_direction();
    test_hadamard();
    test_refusals();
    /* head_dim 64, 2 layers, near-uniform logits (weights 0.02) */
    test_sessions("synthetic.q4s.cism", 100, 128, 37, 0.12, 0.8);
    /* head_dim 32, sliding windows of 8 (rings of 8 + 8 + 256 at n_ctx 1024): 300 positions wrap the rings, the
       rewind to 20 is past what they keep (re-evaluated from position 0) */
    test_sessions("family-gemma3-hd32.cism", 300, 1024, 20, 0.2, 3.0);
    test_speculative("family-gemma3-hd32.cism", 1024);
    return test_finish("test_kv_cache");
}
