/* test_stories.c - end to end through the public C API on the real trained
 * stories260K checkpoint: logits against Hugging Face transformers (eager,
 * fp32), greedy generation, both imports, thread-count determinism, errors. */
#include "cism.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

typedef struct { int32_t *tokens, *greedy; float *logits; int n, n_greedy; } reference;

static void load_ref(reference *r, int L) {
    char name[128];
    size_t size;
    snprintf(name, sizeof(name), "stories260K.tokens%d.i32", L);
    r->tokens = (int32_t *)read_file(fixture_path(name), &size);
    r->n = (int)(size / 4);
    snprintf(name, sizeof(name), "stories260K.logits%d.f32", L);
    r->logits = (float *)read_file(fixture_path(name), &size);
    snprintf(name, sizeof(name), "stories260K.greedy%d.i32", L);
    r->greedy = (int32_t *)read_file(fixture_path(name), &size);
    r->n_greedy = (int)(size / 4);
}

static cism_session *new_session(cism_model *m, int threads, int kv_type, int logits_all) {
    return test_session(m, threads, kv_type, logits_all, 0);
}

/* max |logit error| of every row of one prefill against the reference */
static double prefill_error(cism_model *m, const reference *r, int threads) {
    cism_session *s = new_session(m, threads, CISM_DTYPE_F32, 1);
    double worst = 0;
    int row, v;
    CHECK_OK(cism_session_eval(s, r->tokens, r->n));
    for (row = 0; row < r->n; row++) {
        const float *lg = NULL;
        int32_t nv = 0;
        CHECK_OK(cism_session_logits(s, row, &lg, &nv));
        CHECK(nv == 512);
        if (!lg) break;
        for (v = 0; v < nv; v++) {
            double e = fabs((double)lg[v] - (double)r->logits[row * 512 + v]);
            if (e > worst || e != e) worst = e;
        }
    }
    cism_session_free(s);
    return worst;
}

typedef struct { int32_t tokens[256]; int n; int stop_after; } collected;

static int32_t collect(void *user, int32_t token) {
    collected *c = (collected *)user;
    if (c->n < 256) c->tokens[c->n++] = token;
    return c->stop_after > 0 && c->n >= c->stop_after;
}

static void greedy_check(cism_model *m, const reference *r, int threads, int kv_type) {
    cism_session *s = new_session(m, threads, kv_type, 0);
    cism_sampler *smp = NULL;
    collected c;
    int32_t n_gen = 0;
    int i;
    memset(&c, 0, sizeof(c));
    CHECK_OK(cism_sampler_create(&smp));
    CHECK_OK(cism_generate(s, smp, r->tokens, r->n, 32, CISM_GENERATE_IGNORE_EOS, collect, &c, &n_gen));
    CHECK(n_gen == 32 && c.n == 32);
    for (i = 0; i < 32 && i < c.n; i++)
        CHECK_MSG(c.tokens[i] == r->greedy[r->n + i], "prompt %d, threads %d, kv %d: token %d is %d, expected %d",
                  r->n, threads, kv_type, i, (int)c.tokens[i], (int)r->greedy[r->n + i]);
    /* the last generated token was evaluated: the session holds prompt + 32 */
    CHECK(cism_session_n_past(s) == r->n + 32);
    cism_sampler_free(smp);
    cism_session_free(s);
}

static void determinism(cism_model *m, const reference *r) {
    cism_session *a = new_session(m, 1, CISM_DTYPE_F32, 1), *b = new_session(m, 2, CISM_DTYPE_F32, 1),
                 *c = new_session(m, 3, CISM_DTYPE_F32, 1);
    const float *la, *lb, *lc;
    int32_t nv;
    int row;
    CHECK_OK(cism_session_eval(a, r->tokens, r->n));
    CHECK_OK(cism_session_eval(b, r->tokens, r->n));
    CHECK_OK(cism_session_eval(c, r->tokens, r->n));
    for (row = 0; row < r->n; row++) {
        CHECK_OK(cism_session_logits(a, row, &la, &nv));
        CHECK_OK(cism_session_logits(b, row, &lb, &nv));
        CHECK_OK(cism_session_logits(c, row, &lc, &nv));
        CHECK_MSG(memcmp(la, lb, 512 * sizeof(float)) == 0 && memcmp(la, lc, 512 * sizeof(float)) == 0,
                  "row %d differs between thread counts", row);
    }
    /* token by token equals one batch (same kernels, same order per row) */
    {
        cism_session *d = new_session(m, 2, CISM_DTYPE_F32, 0);
        double worst = 0;
        int i, v;
        for (i = 0; i < r->n; i++) CHECK_OK(cism_session_eval(d, &r->tokens[i], 1));
        CHECK_OK(cism_session_logits(d, -1, &la, &nv));
        CHECK_OK(cism_session_logits(a, r->n - 1, &lb, &nv));
        for (v = 0; v < 512; v++) if (fabs(la[v] - lb[v]) > worst) worst = fabs(la[v] - lb[v]);
        CHECK_MSG(worst < 1e-5, "one-by-one vs batch: %g", worst);
        cism_session_free(d);
    }
    cism_session_free(a);
    cism_session_free(b);
    cism_session_free(c);
}

static void errors(cism_model *m) {
    cism_params *p = NULL;
    cism_session *s = NULL;
    int32_t bad[2] = {5, 512}, neg = -1, toks[16];
    const float *lg;
    int i;
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_CTX, 16));
    CHECK_OK(cism_session_create(m, p, &s));
    CHECK(cism_session_logits(s, -1, &lg, NULL) == CISM_ERR_STATE);
    CHECK(cism_session_eval(s, bad, 2) == CISM_ERR_TOKEN_RANGE);
    CHECK(strstr(cism_last_error(), "512") != NULL);
    CHECK(cism_session_eval(s, &neg, 1) == CISM_ERR_TOKEN_RANGE);
    CHECK(cism_session_n_past(s) == 0);
    for (i = 0; i < 16; i++) toks[i] = 1 + i;
    CHECK_OK(cism_session_eval(s, toks, 10));
    CHECK(cism_session_eval(s, toks, 7) == CISM_ERR_CONTEXT_FULL);
    CHECK(cism_session_n_past(s) == 10);  /* nothing changed */
    CHECK_OK(cism_session_eval(s, toks, 6));
    CHECK(cism_session_eval(s, toks, 1) == CISM_ERR_CONTEXT_FULL);
    CHECK_OK(cism_session_rewind(s, 4));
    CHECK(cism_session_n_past(s) == 4);
    CHECK(cism_session_rewind(s, 5) == CISM_ERR_INVALID_ARG);
    CHECK(cism_session_eval(s, NULL, 1) == CISM_ERR_INVALID_ARG);
    CHECK(cism_session_eval(s, toks, 0) == CISM_ERR_INVALID_ARG);
    cism_session_free(s);
    /* context larger than the model's */
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_CTX, 513));
    CHECK(cism_session_create(m, p, &s) == CISM_ERR_INVALID_ARG && s == NULL);
    cism_params_free(p);
    /* generation that fills the context reports it */
    {
        cism_session *t = NULL;
        cism_sampler *smp = NULL;
        collected c;
        int32_t n_gen = 0, bos = 1;
        memset(&c, 0, sizeof(c));
        CHECK_OK(cism_params_create(&p));
        CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_CTX, 8));
        CHECK_OK(cism_session_create(m, p, &t));
        CHECK_OK(cism_sampler_create(&smp));
        CHECK(cism_generate(t, smp, &bos, 1, 100, CISM_GENERATE_IGNORE_EOS, collect, &c, &n_gen) == CISM_ERR_CONTEXT_FULL);
        CHECK(n_gen == 8 && c.n == 8 && cism_session_n_past(t) == 8);
        /* cism_generate_v2: a full context is a stop reason, not an error */
        {
            cism_stop_reason why = CISM_STOP_ERROR;
            int32_t two[2] = {1, 2}, many[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
            CHECK_OK(cism_session_reset(t));
            memset(&c, 0, sizeof(c));
            CHECK_OK(cism_generate_v2(t, smp, &bos, 1, 100, CISM_GENERATE_IGNORE_EOS, collect, &c, &n_gen, &why));
            CHECK(why == CISM_STOP_CONTEXT_FULL && n_gen == 8 && c.n == 8 && cism_session_n_past(t) == 8);
            CHECK_OK(cism_session_reset(t));
            memset(&c, 0, sizeof(c));
            CHECK_OK(cism_generate_v2(t, smp, &bos, 1, 3, CISM_GENERATE_IGNORE_EOS, collect, &c, &n_gen, &why));
            CHECK(why == CISM_STOP_MAX_TOKENS && n_gen == 3);
            /* 1 + 3 evaluated, 2 more prompt tokens, 2 generated tokens fill it, a third is reported */
            CHECK_OK(cism_generate_v2(t, smp, two, 2, 100, CISM_GENERATE_IGNORE_EOS, NULL, NULL, &n_gen, &why));
            CHECK(why == CISM_STOP_CONTEXT_FULL && n_gen == 3 && cism_session_n_past(t) == 8);
            CHECK_OK(cism_generate_v2(t, smp, NULL, 0, 100, CISM_GENERATE_IGNORE_EOS, NULL, NULL, &n_gen, NULL));
            CHECK(n_gen == 1);                                    /* nothing fits: one token, reported */
            /* a prompt that does not fit is refused before anything is evaluated */
            CHECK_OK(cism_session_reset(t));
            CHECK(cism_generate_v2(t, smp, many, 9, 4, 0, collect, &c, &n_gen, &why) == CISM_ERR_CONTEXT_FULL);
            CHECK(why == CISM_STOP_ERROR && n_gen == 0 && cism_session_n_past(t) == 0);
            CHECK_MSG(strstr(cism_last_error(), "prompt is 9 tokens") != NULL, "%s", cism_last_error());
            memset(&c, 0, sizeof(c));
            c.stop_after = 2;
            CHECK_OK(cism_generate_v2(t, smp, &bos, 1, 100, CISM_GENERATE_IGNORE_EOS, collect, &c, &n_gen, &why));
            CHECK(why == CISM_STOP_CALLBACK && n_gen == 2);
        }
        /* a callback that asks to stop */
        CHECK_OK(cism_session_reset(t));
        memset(&c, 0, sizeof(c));
        c.stop_after = 3;
        CHECK_OK(cism_generate(t, smp, &bos, 1, 100, CISM_GENERATE_IGNORE_EOS, collect, &c, &n_gen));
        CHECK(n_gen == 3 && c.n == 3);
        cism_sampler_free(smp);
        cism_session_free(t);
        cism_params_free(p);
    }
}

static void two_imports_agree(cism_model *a, cism_model *b, const reference *r) {
    cism_session *sa = new_session(a, 1, CISM_DTYPE_F32, 0), *sb = new_session(b, 1, CISM_DTYPE_F32, 0);
    const float *la, *lb;
    int32_t nv;
    CHECK_OK(cism_session_eval(sa, r->tokens, r->n));
    CHECK_OK(cism_session_eval(sb, r->tokens, r->n));
    CHECK_OK(cism_session_logits(sa, -1, &la, &nv));
    CHECK_OK(cism_session_logits(sb, -1, &lb, &nv));
    /* same weights, same order of operations: identical */
    CHECK(memcmp(la, lb, 512 * sizeof(float)) == 0);
    cism_session_free(sa);
    cism_session_free(sb);
}

int main(int argc, char **argv) {
    reference refs[3];
    cism_model *m = NULL, *mhf = NULL, *mf16 = NULL;
    int Ls[3] = {1, 8, 32}, i;
    int64_t v;
    (void)argc;
    (void)argv;
    for (i = 0; i < 3; i++) load_ref(&refs[i], Ls[i]);
    CHECK_OK(cism_model_load(fixture_path("stories260K.cism"), NULL, &m));
    CHECK_OK(cism_model_load(fixture_path("stories260K-hf.cism"), NULL, &mhf));
    CHECK_OK(cism_model_load(fixture_path("stories260K-hf-f16.cism"), NULL, &mf16));
    if (!m || !mhf || !mf16) return test_finish("test_stories");
    CHECK(strcmp(cism_model_architecture(m), "llama") == 0);
    CHECK_OK(cism_model_get_info(m, CISM_INFO_VOCAB_SIZE, &v));
    CHECK(v == 512);
    CHECK_OK(cism_model_get_info(m, CISM_INFO_N_PARAMS, &v));
    CHECK(v == 259328);
    for (i = 0; i < 3; i++) {
        double e1 = prefill_error(m, &refs[i], 1), e2 = prefill_error(mhf, &refs[i], 2), e3 = prefill_error(mf16, &refs[i], 2);
        printf("stories260K prompt %2d: max |logit error| vs transformers: llama2.c import %.3g, HF import %.3g, f16 weights %.3g\n",
               refs[i].n, e1, e2, e3);
        CHECK(e1 < 1e-4);
        CHECK(e2 < 1e-4);
        CHECK(e3 < 2e-2); /* weights rounded to f16; compute stays f32 */
        greedy_check(m, &refs[i], 1, CISM_DTYPE_F32);
        greedy_check(mhf, &refs[i], 2, CISM_DTYPE_F32);
        greedy_check(m, &refs[i], 2, CISM_DTYPE_F16);
    }
    determinism(m, &refs[2]);
    two_imports_agree(m, mhf, &refs[2]);
    errors(m);
    /* the model outlives its handle while a session uses it */
    {
        cism_session *s = new_session(mhf, 1, CISM_DTYPE_F32, 0);
        int32_t tok = 1;
        cism_model_free(mhf);
        CHECK_OK(cism_session_eval(s, &tok, 1));
        cism_session_free(s);
    }
    cism_model_free(m);
    cism_model_free(mf16);
    for (i = 0; i < 3; i++) { free(refs[i].tokens); free(refs[i].logits); free(refs[i].greedy); }
    return test_finish("test_stories");
}
