/* test_speculative.c - cism_generate_spec (issue 13) on the trained stories260K
 * checkpoint (f32, q8 and 4bit), on every kernel tier this CPU runs, with 1
 * and 2 threads:
 *   - the engine's contract it rests on: each row of a batched eval is the
 *     bits of the same token evaluated alone;
 *   - greedy speculative output (prompt lookup, and a 4bit draft model) is
 *     token for token cism_generate_v2's, and the session ends in the same
 *     state (position, tokens, last logits bits);
 *   - sampling with a seed is reproducible;
 *   - the depth falls to 0 when drafts keep failing (few verify steps);
 *   - cancel mid-generation leaves the session holding a prefix of the text,
 *     from which a plain continuation gives the uninterrupted tokens;
 *   - a draft model with another vocabulary is refused. */
#include "cism.h"
#include "test_util.h"

#include <string.h>

#define N_GEN 48
#define MAX_TOK 256

typedef struct { int32_t tok[MAX_TOK]; int n; int cancel_at; cism_session *s; } collect;

static int32_t on_token(void *ud, int32_t t) {
    collect *c = (collect *)ud;
    if (c->n < MAX_TOK) c->tok[c->n] = t;
    c->n++;
    if (c->cancel_at > 0 && c->n == c->cancel_at) cism_session_cancel(c->s);
    return 0;
}

static cism_session *new_session(cism_model *m, int tier, int threads) {
    cism_params *p = NULL;
    cism_session *s = NULL;
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, threads));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KERNEL_TIER, tier));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_CTX, 256));
    CHECK_OK(cism_session_create(m, p, &s));
    cism_params_free(p);
    return s;
}

static cism_sampler *new_sampler(double temperature, int64_t seed) {
    cism_sampler *smp = NULL;
    CHECK_OK(cism_sampler_create(&smp));
    CHECK_OK(cism_sampler_set_float(smp, CISM_SAMPLER_TEMPERATURE, temperature));
    CHECK_OK(cism_sampler_set_int(smp, CISM_SAMPLER_SEED, seed));
    return smp;
}

/* The state a generation leaves: position, tokens and last logits. */
typedef struct { int32_t n_past; int32_t tokens[MAX_TOK + 64]; float logits[512]; int has_logits; } end_state;

static void grab(cism_session *s, end_state *e) {
    const float *lg = NULL;
    int32_t nv = 0, n = 0;
    memset(e, 0, sizeof(*e));
    e->n_past = cism_session_n_past(s);
    CHECK_OK(cism_session_tokens(s, e->tokens, MAX_TOK + 64, &n));
    e->has_logits = cism_session_logits(s, -1, &lg, &nv) == CISM_OK && nv == 512;
    if (e->has_logits) memcpy(e->logits, lg, sizeof(e->logits));
}

static int same_state(const end_state *a, const end_state *b) {
    return a->n_past == b->n_past && memcmp(a->tokens, b->tokens, (size_t)a->n_past * 4) == 0 &&
           a->has_logits == b->has_logits && memcmp(a->logits, b->logits, sizeof(a->logits)) == 0;
}

static void plain(cism_model *m, int tier, int threads, const int32_t *prompt, int n_prompt, int n_gen, uint32_t flags,
                  double temp, collect *out, end_state *e, cism_stop_reason *why) {
    cism_session *s = new_session(m, tier, threads);
    cism_sampler *smp = new_sampler(temp, 7);
    int32_t n = 0;
    memset(out, 0, sizeof(*out));
    CHECK_OK(cism_generate_v2(s, smp, prompt, n_prompt, n_gen, flags, on_token, out, &n, why));
    CHECK(n == out->n);
    grab(s, e);
    cism_sampler_free(smp);
    cism_session_free(s);
}

static void spec(cism_spec *sp, cism_model *m, int tier, int threads, const int32_t *prompt, int n_prompt, int n_gen,
                 uint32_t flags, double temp, collect *out, end_state *e, cism_stop_reason *why) {
    cism_session *s = new_session(m, tier, threads);
    cism_sampler *smp = new_sampler(temp, 7);
    int32_t n = 0;
    memset(out, 0, sizeof(*out));
    CHECK_OK(cism_generate_spec(sp, s, smp, prompt, n_prompt, n_gen, flags, on_token, out, &n, why));
    CHECK(n == out->n);
    grab(s, e);
    cism_sampler_free(smp);
    cism_session_free(s);
}

static int64_t stat(const cism_spec *sp, cism_spec_stat k) {
    int64_t v = -1;
    CHECK_OK(cism_spec_stat_get(sp, k, &v));
    return v;
}

/* Each row of a batched eval has the bits of the token evaluated alone. */
static void check_contract(cism_model *m, int tier, int threads, const int32_t *tokens, int n) {
    cism_params *p = NULL;
    cism_session *batch = NULL, *one = new_session(m, tier, threads);
    int i, bad = -1;
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, threads));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KERNEL_TIER, tier));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_LOGITS_ALL, 1));
    CHECK_OK(cism_session_create(m, p, &batch));
    cism_params_free(p);
    CHECK_OK(cism_session_eval(batch, tokens, 3));
    CHECK_OK(cism_session_eval(batch, tokens + 3, n - 3)); /* rows at positions 3.. of a multi-token eval */
    CHECK_OK(cism_session_eval(one, tokens, 3));
    for (i = 3; i < n; i++) {
        const float *a = NULL, *b = NULL;
        int32_t nv = 0;
        CHECK_OK(cism_session_eval(one, tokens + i, 1));
        CHECK_OK(cism_session_logits(one, -1, &a, &nv));
        CHECK_OK(cism_session_logits(batch, i - 3, &b, &nv));
        if (a && b && memcmp(a, b, (size_t)nv * sizeof(float)) != 0 && bad < 0) bad = i;
    }
    CHECK_MSG(bad < 0, "tier %s, %d threads: the logits of position %d differ between a batched and a one-token eval",
              cism_kernel_tier_name(tier), threads, bad);
    cism_session_free(batch);
    cism_session_free(one);
}

/* CISM_GENERATE_LOOKUP: cism_generate_v2 / cism_generate speculate with the
   session's own lookup speculator: greedy tokens and state as plain; sampled,
   the draws of cism_generate_spec with a lookup speculator (not plain
   sampling's, which shows the flag is not ignored); cism_generate's full
   context stays an error. */
static void check_generate_flag(cism_model *m, const int32_t *prompt, int n_prompt) {
    const uint32_t F = CISM_GENERATE_IGNORE_EOS;
    collect a, b, c;
    end_state ea, eb, ec;
    cism_stop_reason wa, wb, wc;
    cism_spec *sp = NULL;
    int k;
    plain(m, CISM_TIER_AUTO, 1, prompt, n_prompt, 160, F, 0.0, &a, &ea, &wa);
    plain(m, CISM_TIER_AUTO, 1, prompt, n_prompt, 160, F | CISM_GENERATE_LOOKUP, 0.0, &b, &eb, &wb);
    CHECK_MSG(a.n == b.n && memcmp(a.tok, b.tok, (size_t)a.n * 4) == 0 && wa == wb && same_state(&ea, &eb),
              "CISM_GENERATE_LOOKUP: greedy differs from plain greedy");
    CHECK_OK(cism_spec_create_lookup(&sp));
    plain(m, CISM_TIER_AUTO, 1, prompt, n_prompt, 160, F, 1.0, &a, &ea, &wa);
    plain(m, CISM_TIER_AUTO, 1, prompt, n_prompt, 160, F | CISM_GENERATE_LOOKUP, 1.0, &b, &eb, &wb);
    spec(sp, m, CISM_TIER_AUTO, 1, prompt, n_prompt, 160, F, 1.0, &c, &ec, &wc);
    CHECK_MSG(b.n == c.n && memcmp(b.tok, c.tok, (size_t)b.n * 4) == 0 && same_state(&eb, &ec),
              "CISM_GENERATE_LOOKUP: sampled tokens are not cism_generate_spec's");
    CHECK_MSG(stat(sp, CISM_SPEC_STAT_ACCEPTED) > 0 && (a.n != b.n || memcmp(a.tok, b.tok, (size_t)a.n * 4) != 0),
              "CISM_GENERATE_LOOKUP: sampled like plain sampling (%lld drafts accepted)",
              (long long)stat(sp, CISM_SPEC_STAT_ACCEPTED));
    cism_spec_free(sp);
    for (k = 0; k < 2; k++) { /* cism_generate: the context (256) fills before 300 tokens */
        cism_session *s = new_session(m, CISM_TIER_AUTO, 1);
        cism_sampler *smp = new_sampler(0.0, 7);
        int32_t n = 0;
        collect *out = k ? &b : &a;
        memset(out, 0, sizeof(*out));
        CHECK(cism_generate(s, smp, prompt, n_prompt, 300, F | (k ? CISM_GENERATE_LOOKUP : 0), on_token, out, &n) ==
              CISM_ERR_CONTEXT_FULL);
        CHECK(n == out->n);
        cism_sampler_free(smp);
        cism_session_free(s);
    }
    CHECK_MSG(a.n == b.n && a.n > 0 && memcmp(a.tok, b.tok, (size_t)(a.n < MAX_TOK ? a.n : MAX_TOK) * 4) == 0,
              "cism_generate with CISM_GENERATE_LOOKUP: %d tokens to the full context, %d without", b.n, a.n);
}

int main(int argc, char **argv) {
    const char *names[3] = {"stories260K-hf.cism", "stories260K-hf.q8.cism", "stories260K-hf.4bit.cism"};
    cism_model *models[3] = {NULL, NULL, NULL}, *other = NULL;
    /* a prompt with repeats (prompt lookup finds them) */
    int32_t prompt[40];
    int i, mi, tier, threads;
    (void)argc;
    (void)argv;
    for (mi = 0; mi < 3; mi++) CHECK_OK(cism_model_load(fixture_path(names[mi]), NULL, &models[mi]));
    if (g_failures) return test_finish("test_speculative");
    {
        int32_t n = 0;
        const char *text = "Once upon a time, there was a little dog. The little dog liked to play. Once upon a time";
        CHECK_OK(cism_tokenize(models[0], text, strlen(text), CISM_TOKENIZE_ADD_SPECIAL, prompt, 40, &n));
        CHECK(n > 20 && n <= 40);
        i = n;
    }
    {
        const int n_prompt = i;
        check_generate_flag(models[1], prompt, n_prompt);
        for (tier = CISM_TIER_SCALAR; cism_kernel_tier_name(tier); tier++) {
            if (!cism_kernel_tier_supported(tier)) continue;
            for (threads = 1; threads <= 2; threads++) {
                for (mi = 0; mi < 3; mi++) {
                    cism_spec *lk = NULL, *dr = NULL, *lk2 = NULL, *dr2 = NULL;
                    collect a, b;
                    end_state ea, eb;
                    cism_stop_reason wa, wb;
                    uint32_t flags;
                    check_contract(models[mi], tier, threads, prompt, n_prompt);
                    CHECK_OK(cism_spec_create_lookup(&lk));
                    CHECK_OK(cism_spec_create_draft(models[mi], models[2], NULL, &dr));
                    /* adaptive 1 (acceptance alone: the same steps every run, so the counts are checked);
                       lk2, dr2: the default (measured costs too) */
                    CHECK_OK(cism_spec_set_int(lk, CISM_SPEC_ADAPTIVE, 1));
                    CHECK_OK(cism_spec_set_int(dr, CISM_SPEC_ADAPTIVE, 1));
                    CHECK_OK(cism_spec_create_lookup(&lk2));
                    CHECK_OK(cism_spec_create_draft(models[mi], models[2], NULL, &dr2));
                    for (flags = 0; flags <= CISM_GENERATE_IGNORE_EOS; flags++) {
                        int n_gen = flags ? 160 : N_GEN;
                        plain(models[mi], tier, threads, prompt, n_prompt, n_gen, flags, 0.0, &a, &ea, &wa);
                        spec(lk, models[mi], tier, threads, prompt, n_prompt, n_gen, flags, 0.0, &b, &eb, &wb);
                        CHECK_MSG(a.n == b.n && memcmp(a.tok, b.tok, (size_t)a.n * 4) == 0 && wa == wb,
                                  "%s, tier %s, %d threads: lookup greedy differs from plain greedy (%d vs %d tokens)",
                                  names[mi], cism_kernel_tier_name(tier), threads, a.n, b.n);
                        CHECK_MSG(same_state(&ea, &eb), "%s tier %s: lookup leaves another session state", names[mi],
                                  cism_kernel_tier_name(tier));
                        if (flags) CHECK_MSG(stat(lk, CISM_SPEC_STAT_ACCEPTED) > 0, "lookup accepted nothing");
                        CHECK(stat(lk, CISM_SPEC_STAT_GENERATED) == b.n);
                        spec(dr, models[mi], tier, threads, prompt, n_prompt, n_gen, flags, 0.0, &b, &eb, &wb);
                        CHECK_MSG(a.n == b.n && memcmp(a.tok, b.tok, (size_t)a.n * 4) == 0 && wa == wb,
                                  "%s, tier %s, %d threads: draft-model greedy differs from plain greedy", names[mi],
                                  cism_kernel_tier_name(tier), threads);
                        CHECK_MSG(same_state(&ea, &eb), "%s tier %s: the draft leaves another session state", names[mi],
                                  cism_kernel_tier_name(tier));
                        CHECK(stat(dr, CISM_SPEC_STAT_ACCEPTED) > 0 && stat(dr, CISM_SPEC_STAT_DRAFT_EVALS) > 0);
                        spec(lk2, models[mi], tier, threads, prompt, n_prompt, n_gen, flags, 0.0, &b, &eb, &wb);
                        CHECK_MSG(a.n == b.n && memcmp(a.tok, b.tok, (size_t)a.n * 4) == 0 && wa == wb && same_state(&ea, &eb),
                                  "%s tier %s: lookup (measured costs) differs from plain greedy", names[mi],
                                  cism_kernel_tier_name(tier));
                        spec(dr2, models[mi], tier, threads, prompt, n_prompt, n_gen, flags, 0.0, &b, &eb, &wb);
                        CHECK_MSG(a.n == b.n && memcmp(a.tok, b.tok, (size_t)a.n * 4) == 0 && wa == wb && same_state(&ea, &eb),
                                  "%s tier %s: draft model (measured costs) differs from plain greedy", names[mi],
                                  cism_kernel_tier_name(tier));
                        if (flags)
                            printf("%s tier %-12s threads %d: greedy identical; lookup and 4bit draft: %lld/%lld drafts "
                                   "accepted (draft model)\n", names[mi], cism_kernel_tier_name(tier), threads,
                                   (long long)stat(dr, CISM_SPEC_STAT_ACCEPTED), (long long)stat(dr, CISM_SPEC_STAT_DRAFTED));
                    }
                    cism_spec_free(lk);
                    cism_spec_free(dr);
                    cism_spec_free(lk2);
                    cism_spec_free(dr2);
                }
            }
        }

        /* sampling: the same seed gives the same tokens */
        {
            cism_spec *lk = NULL, *dr = NULL;
            collect a, b;
            end_state ea, eb;
            cism_stop_reason wa, wb;
            CHECK_OK(cism_spec_create_lookup(&lk));
            CHECK_OK(cism_spec_create_draft(models[0], models[2], NULL, &dr));
            spec(lk, models[0], CISM_TIER_AUTO, 2, prompt, n_prompt, 100, CISM_GENERATE_IGNORE_EOS, 0.8, &a, &ea, &wa);
            spec(lk, models[0], CISM_TIER_AUTO, 2, prompt, n_prompt, 100, CISM_GENERATE_IGNORE_EOS, 0.8, &b, &eb, &wb);
            CHECK(a.n == 100 && b.n == 100 && memcmp(a.tok, b.tok, sizeof(int32_t) * 100) == 0 && same_state(&ea, &eb));
            spec(dr, models[0], CISM_TIER_AUTO, 2, prompt, n_prompt, 100, CISM_GENERATE_IGNORE_EOS, 0.8, &a, &ea, &wa);
            spec(dr, models[0], CISM_TIER_AUTO, 2, prompt, n_prompt, 100, CISM_GENERATE_IGNORE_EOS, 0.8, &b, &eb, &wb);
            CHECK(a.n == 100 && b.n == 100 && memcmp(a.tok, b.tok, sizeof(int32_t) * 100) == 0 && same_state(&ea, &eb));
            CHECK(stat(dr, CISM_SPEC_STAT_ACCEPTED) > 0);
            cism_spec_free(lk);
            cism_spec_free(dr);
        }

        /* adaptive depth: unigram lookup on random tokens at a high temperature almost never guesses right;
           the depth falls to 0 and only a few probes are made */
        {
            cism_spec *lk = NULL;
            cism_session *s = new_session(models[0], CISM_TIER_AUTO, 2);
            cism_sampler *smp = new_sampler(3.0, 11);
            int32_t rnd[120], n = 0;
            uint64_t x = 12345;
            cism_stop_reason why;
            for (i = 0; i < 120; i++) {
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                rnd[i] = (int32_t)(3 + (x >> 33) % 509);
            }
            CHECK_OK(cism_spec_create_lookup(&lk));
            CHECK_OK(cism_spec_set_int(lk, CISM_SPEC_NGRAM_MIN, 1));
            CHECK_OK(cism_generate_spec(lk, s, smp, rnd, 120, 130, CISM_GENERATE_IGNORE_EOS, NULL, NULL, &n, &why));
            CHECK(n == 130);
            printf("no overlap: %lld of %lld target evals verified drafts, %lld/%lld accepted\n",
                   (long long)stat(lk, CISM_SPEC_STAT_VERIFY), (long long)stat(lk, CISM_SPEC_STAT_STEPS),
                   (long long)stat(lk, CISM_SPEC_STAT_ACCEPTED), (long long)stat(lk, CISM_SPEC_STAT_DRAFTED));
            CHECK_MSG(stat(lk, CISM_SPEC_STAT_VERIFY) <= 12, "%lld verify steps", (long long)stat(lk, CISM_SPEC_STAT_VERIFY));
            CHECK(cism_session_n_past(s) == 120 + 130);
            cism_spec_free(lk);
            cism_sampler_free(smp);
            cism_session_free(s);
        }

        /* cancel from the callback: the session holds a prefix of prompt + tokens; a plain continuation
           from there gives the uninterrupted tokens */
        {
            int k;
            for (k = 0; k < 2; k++) {
                cism_spec *sp = NULL;
                cism_session *s = new_session(models[0], CISM_TIER_AUTO, 2);
                cism_sampler *smp = new_sampler(0.0, 0);
                collect a, c, rest;
                end_state ea;
                cism_stop_reason wa, why;
                int32_t n = 0, held[MAX_TOK + 64], n_held = 0, text[MAX_TOK + 64];
                int n_text;
                plain(models[0], CISM_TIER_AUTO, 2, prompt, n_prompt, 120, CISM_GENERATE_IGNORE_EOS, 0.0, &a, &ea, &wa);
                if (k == 0) CHECK_OK(cism_spec_create_lookup(&sp));
                else CHECK_OK(cism_spec_create_draft(models[0], models[2], NULL, &sp));
                memset(&c, 0, sizeof(c));
                c.cancel_at = 30;
                c.s = s;
                CHECK(cism_generate_spec(sp, s, smp, prompt, n_prompt, 120, CISM_GENERATE_IGNORE_EOS, on_token, &c, &n, &why) ==
                      CISM_ERR_CANCELLED);
                CHECK(why == CISM_STOP_CANCELLED && n == c.n && n >= 30 && n < 120);
                CHECK(memcmp(c.tok, a.tok, (size_t)n * 4) == 0);
                memcpy(text, prompt, (size_t)n_prompt * 4);
                memcpy(text + n_prompt, c.tok, (size_t)n * 4);
                n_text = n_prompt + n;
                CHECK_OK(cism_session_tokens(s, held, MAX_TOK + 64, &n_held));
                CHECK_MSG(n_held == n_text || n_held == n_text - 1, "held %d of %d", (int)n_held, n_text);
                CHECK(memcmp(held, text, (size_t)n_held * 4) == 0);
                /* continue plainly: evaluate what is missing, then generate the rest */
                memset(&rest, 0, sizeof(rest));
                CHECK_OK(cism_generate_v2(s, smp, text + n_held, n_text - n_held, 120 - n, CISM_GENERATE_IGNORE_EOS, on_token,
                                          &rest, NULL, &why));
                CHECK(rest.n == 120 - n && memcmp(rest.tok, a.tok + n, (size_t)rest.n * 4) == 0);
                cism_spec_free(sp);
                cism_sampler_free(smp);
                cism_session_free(s);
            }
        }

        /* a draft model with another vocabulary is refused */
        {
            cism_spec *sp = NULL;
            CHECK_OK(cism_model_load(fixture_path("synthetic.q4s.cism"), NULL, &other));
            if (other) {
                CHECK(cism_spec_create_draft(models[0], other, NULL, &sp) == CISM_ERR_INVALID_ARG && sp == NULL);
                CHECK_MSG(strstr(cism_last_error(), "vocabulary") != NULL, "%s", cism_last_error());
                printf("vocabulary mismatch: %s\n", cism_last_error());
            }
            cism_model_free(other);
        }
    }
    for (mi = 0; mi < 3; mi++) cism_model_free(models[mi]);
    return test_finish("test_speculative");
}
