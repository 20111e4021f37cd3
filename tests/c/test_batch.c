/* test_batch.c - cism_batch (several sessions' tokens in one forward pass) on
 * the trained stories260K checkpoint in f32, q8 and 4bit, with every kernel
 * tier this CPU runs, one and two threads, f16 and f32 KV:
 *   - every member ends with the bits a lone cism_session_eval of its tokens
 *     gives (logits, every row with LOGITS_ALL, position, session tokens), over
 *     steps that mix decode members with prefill chunks of other lengths, and
 *     members that join, leave and come back;
 *   - a member cancelled before or during the eval keeps nothing of it (its
 *     position and logits as before) while the others complete with their bits;
 *   - refusals: another model's session, another tier / KV type / activation
 *     path, an ACT_STATS session, one session twice, too many tokens, an empty
 *     batch, tokens out of range or past the context; a refused add adds nothing.
 * Also from a second thread: a cancel landing while the batch runs (TSan). */
#include "cism.h"
#include "test_util.h"
#include "platform/platform.h"

#include <string.h>

#define VOCAB 512
#define N_SESS 5
#define STEPS 12

static cism_session *make_session(cism_model *m, int tier, int threads, int kv_type, int logits_all) {
    cism_params *p = NULL;
    cism_session *s = NULL;
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KERNEL_TIER, tier));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, threads));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KV_TYPE, kv_type));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_LOGITS_ALL, logits_all));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_CTX, 256));
    CHECK_OK(cism_session_create(m, p, &s));
    cism_params_free(p);
    return s;
}

static cism_batch *make_batch(cism_model *m, int tier, int threads, int kv_type, int n_batch) {
    cism_params *p = NULL;
    cism_batch *b = NULL;
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KERNEL_TIER, tier));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, threads));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KV_TYPE, kv_type));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_BATCH, n_batch));
    CHECK_OK(cism_batch_create(m, p, &b));
    cism_params_free(p);
    return b;
}

/* Same position, tokens and logits (every row of the last eval). */
static int same_state(cism_session *a, cism_session *b, int rows) {
    int32_t ta[256], tb[256], na = 0, nb = 0, r;
    if (cism_session_n_past(a) != cism_session_n_past(b)) return 0;
    if (cism_session_tokens(a, ta, 256, &na) != CISM_OK || cism_session_tokens(b, tb, 256, &nb) != CISM_OK) return 0;
    if (na != nb || memcmp(ta, tb, (size_t)na * sizeof(int32_t)) != 0) return 0;
    for (r = 0; r < rows; r++) {
        const float *la = NULL, *lb = NULL;
        int32_t va = 0, vb = 0;
        int32_t idx = rows == 1 ? -1 : r;
        if (cism_session_logits(a, idx, &la, &va) != CISM_OK || cism_session_logits(b, idx, &lb, &vb) != CISM_OK) return 0;
        if (va != vb || memcmp(la, lb, (size_t)va * sizeof(float)) != 0) return 0;
    }
    return 1;
}

static uint32_t g_rng = 12345;
static int32_t next_token(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return (int32_t)((g_rng >> 8) % VOCAB);
}

/* Steps of a server-like schedule: each step, every session takes 1 token, a
   chunk of 2..9, or sits out; session 4 has LOGITS_ALL. The references eval
   the same tokens alone. */
static void check_schedule(cism_model *m, int tier, int threads, int kv_type, const char *what) {
    cism_session *s[N_SESS], *ref[N_SESS];
    cism_batch *b = make_batch(m, tier, threads, kv_type, 64);
    int i, step, bad = 0;
    for (i = 0; i < N_SESS; i++) {
        s[i] = make_session(m, tier, i == 0 ? 1 : threads, kv_type, i == 4);
        ref[i] = make_session(m, tier, 1 + (i % 2), kv_type, i == 4);
    }
    for (step = 0; step < STEPS && b; step++) {
        int32_t toks[N_SESS][9];
        int n[N_SESS];
        for (i = 0; i < N_SESS; i++) {
            int k, choice = (int)(next_token() % 4);
            n[i] = step == 0 ? 3 + i : choice == 0 ? 0 : choice == 1 ? 2 + (int)(next_token() % 8) : 1;
            for (k = 0; k < n[i]; k++) toks[i][k] = next_token();
            if (n[i]) CHECK_OK(cism_batch_add(b, s[i], toks[i], n[i]));
        }
        if (cism_batch_size(b) == 0) continue;
        CHECK_OK(cism_batch_eval(b));
        for (i = 0; i < N_SESS; i++) {
            if (!n[i]) continue;
            CHECK_OK(cism_session_eval(ref[i], toks[i], n[i]));
            if (!same_state(s[i], ref[i], i == 4 ? n[i] : 1)) bad++;
        }
    }
    CHECK_MSG(bad == 0, "%s, tier %s, %d threads, kv %d: %d member results differ from lone evals", what,
              cism_kernel_tier_name(tier), threads, kv_type, bad);
    for (i = 0; i < N_SESS; i++) {
        cism_session_free(s[i]);
        cism_session_free(ref[i]);
    }
    cism_batch_free(b);
}

/* cism_session_set_logits_all: a member switched on keeps every row of its
   next eval, in a batch as alone, with the bits of a session created with
   LOGITS_ALL; switched off again, only the last row. */
static void check_logits_switch(cism_model *m) {
    cism_session *s = make_session(m, CISM_TIER_AUTO, 1, CISM_DTYPE_F32, 0);
    cism_session *r = make_session(m, CISM_TIER_AUTO, 1, CISM_DTYPE_F32, 1);
    cism_batch *b = make_batch(m, CISM_TIER_AUTO, 1, CISM_DTYPE_F32, 64);
    int32_t toks[8] = {5, 77, 301, 12, 9, 400, 23, 64};
    const float *ls = NULL, *lr = NULL;
    int32_t nv = 0;
    int i;
    CHECK(cism_session_set_logits_all(NULL, 1) == CISM_ERR_INVALID_ARG);
    if (!s || !r || !b) goto done;
    CHECK_OK(cism_session_set_logits_all(s, 1));
    CHECK_OK(cism_batch_add(b, s, toks, 5));
    CHECK_OK(cism_batch_eval(b));
    CHECK_OK(cism_session_eval(r, toks, 5));
    for (i = 0; i < 5; i++) {
        CHECK_OK(cism_session_logits(s, i, &ls, &nv));
        CHECK_OK(cism_session_logits(r, i, &lr, &nv));
        CHECK_MSG(ls && lr && memcmp(ls, lr, (size_t)nv * 4) == 0, "row %d of a switched-on member differs", i);
    }
    CHECK_OK(cism_session_set_logits_all(s, 0));
    CHECK_OK(cism_batch_add(b, s, toks + 5, 3));
    CHECK_OK(cism_batch_eval(b));
    CHECK_OK(cism_session_eval(r, toks + 5, 3));
    CHECK(cism_session_logits(s, 0, &ls, &nv) == CISM_ERR_STATE);
    CHECK_OK(cism_session_logits(s, -1, &ls, &nv));
    CHECK_OK(cism_session_logits(r, -1, &lr, &nv));
    CHECK(ls && lr && memcmp(ls, lr, (size_t)nv * 4) == 0);
done:
    cism_batch_free(b);
    cism_session_free(s);
    cism_session_free(r);
}

/* A member cancelled before the eval starts (its first layer passes, the next
   check stops it) keeps nothing; the others are unaffected. */
static void check_cancel(cism_model *m, int tier) {
    cism_session *a = make_session(m, tier, 2, CISM_DTYPE_F16, 0), *c = make_session(m, tier, 2, CISM_DTYPE_F16, 0);
    cism_session *ra = make_session(m, tier, 2, CISM_DTYPE_F16, 0), *rc = make_session(m, tier, 2, CISM_DTYPE_F16, 0);
    cism_batch *b = make_batch(m, tier, 2, CISM_DTYPE_F16, 32);
    int32_t pa[6] = {1, 5, 9, 33, 80, 2}, pc[4] = {1, 7, 7, 300}, more[3] = {11, 12, 13};
    CHECK_OK(cism_session_eval(a, pa, 6));
    CHECK_OK(cism_session_eval(ra, pa, 6));
    CHECK_OK(cism_session_eval(c, pc, 4));
    CHECK_OK(cism_session_eval(rc, pc, 4));
    CHECK_OK(cism_batch_add(b, a, more, 1));
    CHECK_OK(cism_batch_add(b, c, more, 3));
    cism_session_cancel(c);
    CHECK(cism_batch_eval(b) == CISM_ERR_CANCELLED);
    CHECK(strstr(cism_last_error(), "member 1") != NULL);
    CHECK(cism_batch_member_status(b, 0) == CISM_OK);
    CHECK(cism_batch_member_status(b, 1) == CISM_ERR_CANCELLED);
    CHECK(cism_batch_member_status(b, 2) == CISM_ERR_INVALID_ARG);
    CHECK_OK(cism_session_eval(ra, more, 1));
    CHECK(same_state(a, ra, 1));
    CHECK_MSG(same_state(c, rc, 1), "the cancelled member moved or lost its logits");
    /* it continues as if the cancelled eval never happened */
    CHECK_OK(cism_batch_add(b, c, more, 3));
    CHECK_OK(cism_batch_eval(b));
    CHECK_OK(cism_session_eval(rc, more, 3));
    CHECK(same_state(c, rc, 1));
    /* every member cancelled */
    CHECK_OK(cism_batch_add(b, a, more, 2));
    CHECK_OK(cism_batch_add(b, c, more, 2));
    cism_session_cancel(a);
    cism_session_cancel(c);
    CHECK(cism_batch_eval(b) == CISM_ERR_CANCELLED);
    CHECK(same_state(a, ra, 1) && same_state(c, rc, 1));
    cism_session_free(a);
    cism_session_free(c);
    cism_session_free(ra);
    cism_session_free(rc);
    cism_batch_free(b);
}

static void check_refusals(cism_model *m, cism_model *other) {
    int32_t t1[1] = {3}, bad_tok[1] = {VOCAB}, many[40];
    cism_batch *b = make_batch(m, CISM_TIER_SCALAR, 1, CISM_DTYPE_F16, 32);
    cism_session *s = make_session(m, CISM_TIER_SCALAR, 1, CISM_DTYPE_F16, 0);
    cism_session *kv32 = make_session(m, CISM_TIER_SCALAR, 1, CISM_DTYPE_F32, 0);
    cism_session *auto_tier = make_session(m, CISM_TIER_AUTO, 1, CISM_DTYPE_F16, 0);
    cism_session *foreign = make_session(other, CISM_TIER_SCALAR, 1, CISM_DTYPE_F16, 0);
    cism_session *stats = NULL, *float_act = NULL;
    cism_params *p = NULL;
    int i;
    for (i = 0; i < 40; i++) many[i] = i;
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KERNEL_TIER, CISM_TIER_SCALAR));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_ACT_STATS, 1));
    CHECK_OK(cism_session_create(m, p, &stats));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_ACT_STATS, 0));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_ACT_QUANT, 0));
    CHECK_OK(cism_session_create(m, p, &float_act));
    cism_params_free(p);
    CHECK(cism_batch_eval(b) == CISM_ERR_STATE);
    CHECK(cism_batch_add(b, foreign, t1, 1) == CISM_ERR_INVALID_ARG);
    CHECK(strstr(cism_last_error(), "another model") != NULL);
    CHECK(cism_batch_add(b, kv32, t1, 1) == CISM_ERR_INVALID_ARG);
    CHECK(strstr(cism_last_error(), "KV") != NULL);
    if (cism_kernel_tier_supported(CISM_TIER_AVX2) || cism_kernel_tier_supported(CISM_TIER_NEON)) {
        CHECK(cism_batch_add(b, auto_tier, t1, 1) == CISM_ERR_INVALID_ARG);
        CHECK(strstr(cism_last_error(), "tier") != NULL);
    }
    CHECK(cism_batch_add(b, float_act, t1, 1) == CISM_ERR_INVALID_ARG);
    CHECK(strstr(cism_last_error(), "ACT_QUANT") != NULL);
    CHECK(cism_batch_add(b, stats, t1, 1) == CISM_ERR_UNSUPPORTED);
    CHECK(cism_batch_add(b, s, bad_tok, 1) == CISM_ERR_TOKEN_RANGE);
    CHECK(cism_batch_add(b, s, many, 33) == CISM_ERR_INVALID_ARG);
    CHECK(strstr(cism_last_error(), "at most 32 tokens") != NULL);
    CHECK(cism_batch_add(b, s, t1, 0) == CISM_ERR_INVALID_ARG);
    CHECK(cism_batch_size(b) == 0);
    CHECK_OK(cism_batch_add(b, s, t1, 1));
    CHECK(cism_batch_add(b, s, t1, 1) == CISM_ERR_INVALID_ARG);
    CHECK(strstr(cism_last_error(), "already") != NULL);
    CHECK(cism_batch_size(b) == 1);
    CHECK_OK(cism_batch_clear(b));
    CHECK(cism_batch_size(b) == 0);
    CHECK(cism_batch_eval(b) == CISM_ERR_STATE);
    /* a session that filled its context after it was added is refused at eval, nothing run */
    for (i = 0; i < 256; i += 32) CHECK_OK(cism_session_eval(s, many, i + 32 <= 256 ? 32 : 256 - i));
    CHECK(cism_batch_add(b, s, t1, 1) == CISM_ERR_CONTEXT_FULL);
    CHECK_OK(cism_session_rewind(s, 255));
    CHECK_OK(cism_batch_add(b, s, t1, 1));
    CHECK_OK(cism_session_eval(s, t1, 1));
    CHECK(cism_batch_eval(b) == CISM_ERR_CONTEXT_FULL);
    CHECK(cism_session_n_past(s) == 256);
    CHECK(cism_batch_add(NULL, s, t1, 1) == CISM_ERR_INVALID_ARG);
    CHECK(cism_batch_create(m, NULL, NULL) == CISM_ERR_INVALID_ARG);
    cism_batch_free(NULL);
    cism_session_free(s);
    cism_session_free(kv32);
    cism_session_free(auto_tier);
    cism_session_free(foreign);
    cism_session_free(stats);
    cism_session_free(float_act);
    cism_batch_free(b);
}

/* A cancel from another thread while the batch runs long prefill chunks: the
   cancelled member keeps nothing or everything (if the eval finished first),
   the other always completes with its lone-eval bits. */
typedef struct { cism_session *s; volatile int32_t go; } canceller;

static void cancel_thread(void *arg) {
    canceller *c = (canceller *)arg;
    while (!cism__atomic_load(&c->go)) cism__thread_yield();
    cism_session_cancel(c->s);
}

static void check_cancel_thread(cism_model *m) {
    cism_session *a = make_session(m, CISM_TIER_AUTO, 2, CISM_DTYPE_F16, 0), *c = make_session(m, CISM_TIER_AUTO, 2, CISM_DTYPE_F16, 0);
    cism_session *ra = make_session(m, CISM_TIER_AUTO, 1, CISM_DTYPE_F16, 0);
    cism_batch *b = make_batch(m, CISM_TIER_AUTO, 2, CISM_DTYPE_F16, 256);
    int32_t toks[120];
    int i, round;
    for (i = 0; i < 120; i++) toks[i] = (int32_t)((i * 37 + 5) % VOCAB);
    for (round = 0; round < 4; round++) {
        canceller cc;
        cism__thread *th;
        cism_status st;
        int32_t before = cism_session_n_past(c);
        cc.s = c;
        cc.go = 0;
        CHECK_OK(cism_batch_add(b, a, toks, 30));
        CHECK_OK(cism_batch_add(b, c, toks, 120));
        th = cism__thread_start(cancel_thread, &cc);
        CHECK(th != NULL);
        cism__atomic_store(&cc.go, 1);
        st = cism_batch_eval(b);
        if (th) cism__thread_join(th);
        CHECK(st == CISM_OK || st == CISM_ERR_CANCELLED);
        CHECK(cism_batch_member_status(b, 0) == CISM_OK);
        CHECK_OK(cism_session_eval(ra, toks, 30));
        CHECK(same_state(a, ra, 1));
        CHECK(cism_session_n_past(c) == before || cism_session_n_past(c) == before + 120);
        CHECK_OK(cism_session_rewind(a, 0));
        CHECK_OK(cism_session_rewind(ra, 0));
        CHECK_OK(cism_session_rewind(c, 0));
    }
    cism_session_free(a);
    cism_session_free(c);
    cism_session_free(ra);
    cism_batch_free(b);
}

int main(int argc, char **argv) {
    static const char *files[3] = {"stories260K-hf.cism", "stories260K-hf.q8.cism", "stories260K-hf.4bit.cism"};
    cism_model *models[3] = {NULL, NULL, NULL};
    int f, t, quick = getenv("CISM_TEST_QUICK") && atoi(getenv("CISM_TEST_QUICK"));
    (void)argc;
    (void)argv;
    for (f = 0; f < 3; f++) {
        const char *path = fixture_path(files[f]);
        CHECK_OK(cism_model_load(path, NULL, &models[f]));
    }
    for (f = 0; f < 3; f++) {
        if (!models[f]) continue;
        for (t = CISM_TIER_SCALAR; cism_kernel_tier_name(t); t++) {
            if (!cism_kernel_tier_supported(t)) continue;
            check_schedule(models[f], t, 2, CISM_DTYPE_F16, files[f]);
            if (!quick) {
                check_schedule(models[f], t, 1, CISM_DTYPE_F32, files[f]);
                check_cancel(models[f], t);
            }
        }
    }
    if (models[1] && models[0]) check_refusals(models[1], models[0]);
    if (models[1]) check_cancel_thread(models[1]);
    if (models[1]) check_logits_switch(models[1]);
    for (f = 0; f < 3; f++) cism_model_free(models[f]);
    return test_finish("test_batch");
}
