/* test_tiers.c - end to end on the trained stories260K checkpoint with every
 * kernel tier this CPU runs (forced through CISM_PARAM_KERNEL_TIER):
 *   - logits of a 32-token prefill within 1e-4 of the scalar tier's with an
 *     f32 KV cache (within 1e-2 with an f16 one: a last-bit difference in a K or
 *     V value can round it to the other neighbouring f16, a 2^-11 relative
 *     step), and the same greedy tokens as the scalar tier and transformers;
 *   - bit-identical logits for 1, 2 and 3 threads;
 *   - one token at a time gives the same bits as the whole prompt at once;
 * for f32 and f16 weights, f32 and f16 KV caches; and for the quantized
 * checkpoints (q8 recipe, the default 4bit recipe: q8 head, q4s layers) with
 * float activations (logits within 1e-4 of the scalar tier) and with int8
 * activations (greedy tokens identical; the packed matmuls give the scalar
 * tier's bits on the ARM tiers, but a tier's float ops around them may move an
 * activation across an int8 rounding boundary, which moved logits by 0.15 on
 * x86's tiers: bound 0.5, wrong kernels miss it by far more). Also: a tier the CPU cannot
 * run is refused, and CISM_ISA is honoured or refused with a warning (the
 * CTest entries test_tiers_isa_* set it and check the printed lines).
 * CISM_TEST_QUICK=1 (the runs under qemu, where floating point is slow) checks
 * only the scalar and the automatic tier, on two of the four float model/KV
 * pairs and the four quantized model/activation pairs (not in the CISM_ISA
 * runs, which check dispatch: the plain run on the same CPU covers them). */
#include "cism.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

#define VOCAB 512

static int g_quick;
static int g_n_greedy = 32;

static char g_warning[512];

static void on_log(void *user, int32_t level, const char *msg) {
    (void)user;
    if (level >= CISM_LOG_WARN && !g_warning[0]) snprintf(g_warning, sizeof(g_warning), "%s", msg);
}

static int g_act_quant; /* CISM_PARAM_ACT_QUANT of every session */

static cism_session *new_session(cism_model *m, int tier, int threads, int kv_type, int logits_all) {
    cism_params *p = NULL;
    cism_session *s = NULL;
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KERNEL_TIER, tier));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, threads));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KV_TYPE, kv_type));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_LOGITS_ALL, logits_all));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_ACT_QUANT, g_act_quant));
    CHECK_OK(cism_session_create(m, p, &s));
    cism_params_free(p);
    return s;
}

/* all rows of a prefill of tokens[0..n) */
static float *prefill(cism_model *m, int tier, int threads, int kv_type, const int32_t *tokens, int n) {
    cism_session *s = new_session(m, tier, threads, kv_type, 1);
    float *out = (float *)calloc((size_t)n * VOCAB, sizeof(float));
    int row;
    if (!s) return out;
    CHECK_OK(cism_session_eval(s, tokens, n));
    for (row = 0; row < n; row++) {
        const float *lg = NULL;
        CHECK_OK(cism_session_logits(s, row, &lg, NULL));
        if (lg) memcpy(out + (size_t)row * VOCAB, lg, VOCAB * sizeof(float));
    }
    cism_session_free(s);
    return out;
}

static int greedy(cism_model *m, int tier, int kv_type, const int32_t *prompt, int n, int32_t *out, int n_out) {
    cism_session *s = new_session(m, tier, 2, kv_type, 0);
    int i, v, got = 0;
    int32_t tok;
    const float *lg = NULL;
    if (!s) return 0;
    CHECK_OK(cism_session_eval(s, prompt, n));
    for (i = 0; i < n_out; i++) {
        CHECK_OK(cism_session_logits(s, -1, &lg, NULL));
        if (!lg) break;
        tok = 0;
        for (v = 1; v < VOCAB; v++)
            if (lg[v] > lg[tok]) tok = v;
        out[got++] = tok;
        CHECK_OK(cism_session_eval(s, &tok, 1));
    }
    cism_session_free(s);
    return got;
}

static void one_model(const char *name, cism_model *m, const int32_t *tokens, int n, const int32_t *ref_greedy, int kv_type) {
    float *ref = prefill(m, CISM_TIER_SCALAR, 1, kv_type, tokens, n);
    int32_t ref_tokens[32], tier_tokens[32];
    int n_ref = greedy(m, CISM_TIER_SCALAR, kv_type, tokens, n, ref_tokens, g_n_greedy), t, i;
    double bound = kv_type == CISM_DTYPE_F32 ? (g_act_quant ? 0.5 : 1e-4) : 1e-2;
    for (i = 0; i < n_ref && ref_greedy; i++)
        CHECK_MSG(ref_tokens[i] == ref_greedy[i], "%s: scalar greedy token %d is %d, transformers %d", name, i, (int)ref_tokens[i],
                  (int)ref_greedy[i]);
    for (t = CISM_TIER_SCALAR; cism_kernel_tier_name(t); t++) {
        float *a, *b, *c;
        double worst = 0;
        size_t k;
        if (!cism_kernel_tier_supported(t)) continue;
        if (g_quick && t != CISM_TIER_SCALAR && strcmp(cism_kernel_tier_name(t), cism_kernel_tier_name(CISM_TIER_AUTO)) != 0) continue;
        a = prefill(m, t, 1, kv_type, tokens, n);
        b = prefill(m, t, 2, kv_type, tokens, n);
        c = prefill(m, t, 3, kv_type, tokens, n);
        CHECK_MSG(memcmp(a, b, (size_t)n * VOCAB * 4) == 0 && memcmp(a, c, (size_t)n * VOCAB * 4) == 0,
                  "%s tier %s: logits differ between 1, 2 and 3 threads", name, cism_kernel_tier_name(t));
        for (k = 0; k < (size_t)n * VOCAB; k++) {
            double e = fabs((double)a[k] - (double)ref[k]);
            if (e > worst || e != e) worst = e;
        }
        CHECK_MSG(worst < bound, "%s tier %s: max |logit - scalar| = %g (bound %g)", name, cism_kernel_tier_name(t), worst, bound);
        {   /* token by token: the same bits as the batch */
            cism_session *s = new_session(m, t, 2, kv_type, 0);
            const float *lg = NULL;
            for (i = 0; i < n && s; i++) CHECK_OK(cism_session_eval(s, &tokens[i], 1));
            if (s) CHECK_OK(cism_session_logits(s, -1, &lg, NULL));
            CHECK_MSG(lg && memcmp(lg, a + (size_t)(n - 1) * VOCAB, VOCAB * 4) == 0,
                      "%s tier %s: token-by-token logits differ from the batch", name, cism_kernel_tier_name(t));
            cism_session_free(s);
        }
        CHECK(greedy(m, t, kv_type, tokens, n, tier_tokens, g_n_greedy) == n_ref);
        CHECK_MSG(memcmp(tier_tokens, ref_tokens, (size_t)n_ref * 4) == 0, "%s tier %s: greedy tokens differ from scalar", name,
                  cism_kernel_tier_name(t));
        printf("%s%s, kv %s, tier %-12s max |logit - scalar| %.3g; threads 1/2/3 identical; greedy identical\n", name,
               g_act_quant ? " + int8 act" : "", kv_type == CISM_DTYPE_F32 ? "f32" : "f16", cism_kernel_tier_name(t), worst);
        free(a); free(b); free(c);
    }
    free(ref);
}

int main(void) {
    cism_model *m = NULL, *mf16 = NULL, *mq8 = NULL, *m4 = NULL;
    int32_t *tokens, *ref_greedy;
    size_t size;
    int n, t, unsupported = 0;
    const char *quick = getenv("CISM_TEST_QUICK");
    g_quick = quick && strcmp(quick, "1") == 0;
    if (g_quick) g_n_greedy = 12;
    cism_set_log_callback(on_log, NULL, CISM_LOG_WARN);
    printf("auto tier: %s\n", cism_kernel_tier_name(CISM_TIER_AUTO));
    if (g_warning[0]) printf("isa warning: %s\n", g_warning);
    /* a tier this CPU or build cannot run is refused */
    for (t = CISM_TIER_SCALAR; cism_kernel_tier_name(t); t++)
        if (!cism_kernel_tier_supported(t)) unsupported = t;
    CHECK(cism_kernel_tier_supported(CISM_TIER_SCALAR) && cism_kernel_tier_supported(CISM_TIER_AUTO));
    CHECK(cism_kernel_tier_name(99) == NULL && !cism_kernel_tier_supported(99));
    tokens = (int32_t *)read_file(fixture_path("stories260K.tokens32.i32"), &size);
    n = (int)(size / 4);
    ref_greedy = (int32_t *)read_file(fixture_path("stories260K.greedy32.i32"), &size);
    CHECK_OK(cism_model_load(fixture_path("stories260K.cism"), NULL, &m));
    CHECK_OK(cism_model_load(fixture_path("stories260K-hf-f16.cism"), NULL, &mf16));
    CHECK_OK(cism_model_load(fixture_path("stories260K-hf.q8.cism"), NULL, &mq8));
    CHECK_OK(cism_model_load(fixture_path("stories260K-hf.4bit.cism"), NULL, &m4));
    if (!m || !mf16 || !mq8 || !m4 || !tokens || !ref_greedy) return test_finish("test_tiers");
    if (unsupported) {
        cism_params *p = NULL;
        cism_session *s = NULL;
        CHECK_OK(cism_params_create(&p));
        CHECK_OK(cism_params_set_int(p, CISM_PARAM_KERNEL_TIER, unsupported));
        CHECK(cism_session_create(m, p, &s) == CISM_ERR_UNSUPPORTED && s == NULL);
        CHECK(strstr(cism_last_error(), cism_kernel_tier_name(unsupported)) != NULL);
        CHECK(cism_params_set_int(p, CISM_PARAM_KERNEL_TIER, CISM_TIER_AVX512_AMX + 1) == CISM_ERR_INVALID_ARG);
        cism_params_free(p);
    }
    one_model("stories260K f32", m, tokens, n, ref_greedy + n, CISM_DTYPE_F32);
    if (!g_quick) one_model("stories260K f32", m, tokens, n, ref_greedy + n, CISM_DTYPE_F16);
    if (!g_quick) one_model("stories260K f16", mf16, tokens, n, NULL, CISM_DTYPE_F32);
    one_model("stories260K f16", mf16, tokens, n, NULL, CISM_DTYPE_F16);
    for (g_act_quant = 0; g_act_quant <= 1 && !(g_quick && getenv("CISM_ISA")); g_act_quant++) {
        one_model("stories260K q8", mq8, tokens, n, NULL, CISM_DTYPE_F32);
        one_model("stories260K 4bit", m4, tokens, n, NULL, CISM_DTYPE_F32);
    }
    cism_model_free(m);
    cism_model_free(mf16);
    cism_model_free(mq8);
    cism_model_free(m4);
    free(tokens);
    free(ref_greedy);
    return test_finish("test_tiers");
}
