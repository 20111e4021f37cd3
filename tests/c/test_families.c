/* test_families.c - the families beyond the Llama layout (Gemma 3: sliding
 * windows with their own RoPE base, post norms, GeGLU, scaled embeddings;
 * SmolLM3: NoPE layers; Phi-3: partial RoPE, a window on every layer; LFM2:
 * short convolutions; Qwen3.5: Gated DeltaNet, gated attention) on
 * random fixtures (make_fixtures.py), with every kernel tier this CPU runs:
 *   - an 80-token prefill (past a 64-position DeltaNet block) within 1e-4 of
 *     the scalar tier (f32 weights, f32 KV) or, with q8 weights and int8 activations, within 0.5 (test_tiers.c
 *     says why) with the same argmax on most rows;
 *   - bit-identical rows for 1 and 2 threads and for chunks of 1, 7 and 80;
 *   - Gemma 3's sliding-window ring (n_ctx 1024, n_batch 5: rings of
 *     8 + 5 + 256 positions): 700 tokens give the bits of a session without
 *     rings; rewinding 100 (within the slack) or 600 (past the ring: the kept
 *     tokens are evaluated again) and continuing gives a fresh session's bits.
 * Parity with transformers is tests/python/test_parity_*.py; these
 * run on every build, the ARM tiers under qemu included. */
#include "cism.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

#define VOCAB 256
#define N 80

static int g_quick;

static cism_session *session(cism_model *m, int tier, int threads, int n_batch, int n_ctx, int act_quant) {
    cism_params *p = NULL;
    cism_session *s = NULL;
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KERNEL_TIER, tier));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, threads));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KV_TYPE, CISM_DTYPE_F32));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_LOGITS_ALL, 1));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_ACT_QUANT, act_quant));
    if (n_batch) CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_BATCH, n_batch));
    if (n_ctx) CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_CTX, n_ctx));
    CHECK_OK(cism_session_create(m, p, &s));
    cism_params_free(p);
    return s;
}

/* rows [0, n) of the session's last eval into out */
static void rows(cism_session *s, int n, float *out) {
    int r;
    for (r = 0; r < n; r++) {
        const float *lg = NULL;
        CHECK_OK(cism_session_logits(s, r, &lg, NULL));
        if (lg) memcpy(out + (size_t)r * VOCAB, lg, VOCAB * sizeof(float));
    }
}

static float *prefill(cism_model *m, int tier, int threads, int n_batch, int act_quant, const int32_t *tok) {
    cism_session *s = session(m, tier, threads, n_batch, 0, act_quant);
    float *out = (float *)calloc((size_t)N * VOCAB, sizeof(float));
    if (s && out) {
        CHECK_OK(cism_session_eval(s, tok, N));
        rows(s, N, out);
    }
    cism_session_free(s);
    return out;
}

static int argmax(const float *v) {
    int i, b = 0;
    for (i = 1; i < VOCAB; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static void check_model(const char *name, int act_quant, const int32_t *tok) {
    cism_model *m = NULL;
    float *ref;
    int32_t tiers[8], t, n_tiers = 0;
    CHECK_OK(cism_model_load(fixture_path(name), NULL, &m));
    if (!m) return;
    for (t = CISM_TIER_SCALAR; t <= CISM_TIER_AVX512_AMX; t++)
        if (cism_kernel_tier_supported((cism_kernel_tier)t)) tiers[n_tiers++] = t;
    ref = prefill(m, CISM_TIER_SCALAR, 1, 0, act_quant, tok);
    for (t = 0; t < n_tiers; t++) {
        float *a = prefill(m, tiers[t], 1, 0, act_quant, tok), err = 0;
        int i, same = 0, v;
        for (i = 0; i < N * VOCAB; i++) err = fmaxf(err, fabsf(a[i] - ref[i]));
        for (i = 0; i < N; i++) same += argmax(a + i * VOCAB) == argmax(ref + i * VOCAB);
        CHECK_MSG(err < (act_quant ? 0.5f : 1e-4f), "%s tier %s: max |logit - scalar| %g", name,
                  cism_kernel_tier_name((cism_kernel_tier)tiers[t]), (double)err);
        CHECK_MSG(same >= (act_quant ? N - 2 : N), "%s tier %s: argmax differs on %d rows", name,
                  cism_kernel_tier_name((cism_kernel_tier)tiers[t]), N - same);
        if (!g_quick || t == 0 || t == n_tiers - 1) {
            int variants[3][2] = {{2, 0}, {1, 1}, {2, 7}};
            for (v = 0; v < 3; v++) {
                float *b = prefill(m, tiers[t], variants[v][0], variants[v][1], act_quant, tok);
                CHECK_MSG(memcmp(a, b, (size_t)N * VOCAB * sizeof(float)) == 0, "%s tier %s: %d threads, chunks of %d differ",
                          name, cism_kernel_tier_name((cism_kernel_tier)tiers[t]), variants[v][0], variants[v][1]);
                free(b);
            }
        }
        free(a);
    }
    free(ref);
    cism_model_free(m);
}

#define LONG 700

/* rows [from, n) of a fresh eval of tok[0..n) */
static void fresh_rows(cism_model *m, const int32_t *tok, int n, int from, float *out) {
    cism_session *s = session(m, CISM_TIER_AUTO, 2, 5, 1024, 0);
    float *all = (float *)calloc((size_t)n * VOCAB, sizeof(float));
    if (s && all) {
        CHECK_OK(cism_session_eval(s, tok, n));
        rows(s, n, all);
        memcpy(out, all + (size_t)from * VOCAB, (size_t)(n - from) * VOCAB * sizeof(float));
    }
    free(all);
    cism_session_free(s);
}

static void check_ring(void) {
    cism_model *m = NULL;
    int32_t *tok = (int32_t *)malloc((LONG + 20) * sizeof(int32_t)), *mix = (int32_t *)malloc((LONG + 20) * sizeof(int32_t));
    float *a = (float *)calloc((size_t)LONG * VOCAB, sizeof(float)), *b = (float *)calloc((size_t)LONG * VOCAB, sizeof(float));
    int i, k, backs[2] = {100, 600};
    uint32_t x = 7;
    cism_session *ring, *full;
    CHECK_OK(cism_model_load(fixture_path("family-gemma3.cism"), NULL, &m));
    if (!m || !tok || !mix || !a || !b) goto done;
    for (i = 0; i < LONG + 20; i++) {
        x = x * 1103515245u + 12345u;
        tok[i] = (int32_t)((x >> 16) % (VOCAB - 3)) + 3;
    }
    ring = session(m, CISM_TIER_AUTO, 2, 5, 1024, 0);
    full = session(m, CISM_TIER_AUTO, 2, 512, 1024, 0);
    CHECK(ring && full && cism_session_memory_bytes(ring) < cism_session_memory_bytes(full));
    if (ring && full) {
        CHECK_OK(cism_session_eval(ring, tok, LONG));
        CHECK_OK(cism_session_eval(full, tok, LONG));
        rows(ring, LONG, a);
        rows(full, LONG, b);
        CHECK_MSG(memcmp(a, b, (size_t)LONG * VOCAB * sizeof(float)) == 0, "ring and full caches differ");
        for (k = 0; k < 2; k++) {
            int keep = LONG - backs[k];
            if (k) { /* the ring at LONG again, then back 600 */
                CHECK_OK(cism_session_reset(ring));
                CHECK_OK(cism_session_eval(ring, tok, LONG));
            }
            CHECK_OK(cism_session_rewind(ring, keep));
            CHECK(cism_session_n_past(ring) == keep);
            CHECK_OK(cism_session_eval(ring, tok + LONG, 20));
            rows(ring, 20, a);
            memcpy(mix, tok, (size_t)keep * sizeof(int32_t));
            memcpy(mix + keep, tok + LONG, 20 * sizeof(int32_t));
            fresh_rows(m, mix, keep + 20, keep, b);
            CHECK_MSG(memcmp(a, b, 20 * VOCAB * sizeof(float)) == 0, "rewind by %d then 20 tokens differs from a fresh session",
                      backs[k]);
        }
    }
    cism_session_free(ring);
    cism_session_free(full);
done:
    free(tok);
    free(mix);
    free(a);
    free(b);
    cism_model_free(m);
}

int main(void) {
    const char *names[5] = {"gemma3", "smollm3", "phi3", "lfm2", "qwen35"};
    int32_t tok[N];
    char path[64];
    int i;
    g_quick = getenv("CISM_TEST_QUICK") && strcmp(getenv("CISM_TEST_QUICK"), "1") == 0;
    for (i = 0; i < N; i++) tok[i] = (int32_t)((i * 37 + 11) % (VOCAB - 3)) + 3;
    for (i = 0; i < 5; i++) {
        snprintf(path, sizeof(path), "family-%s.cism", names[i]);
        check_model(path, 0, tok);
        snprintf(path, sizeof(path), "family-%s.q8.cism", names[i]);
        check_model(path, 0, tok);
        check_model(path, 1, tok);
    }
    check_ring();
    return test_finish("test_families");
}
