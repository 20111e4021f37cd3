/* speculative.c - exact speculative decoding behind cism_generate_spec
 * (docs/SPECULATIVE.md).
 *
 * Per step a drafter proposes up to k tokens after the text so far (prompt
 * lookup: what followed the most recent earlier occurrence of the longest
 * n-gram ending the text; or a draft model's session sampling them). The
 * target evaluates its pending token (reported, not yet evaluated) plus the k
 * drafts in one eval that keeps every logits row, the sampler accepts a
 * prefix of the drafts and adds one token of its own, and both KV caches are
 * rewound past what was not accepted.
 *
 * Invariant at the top of a step: hist[0..n_hist) is the text (what the
 * session held before, the prompt, every reported token); the target holds
 * hist[0..n_hist - 1) and hist[n_hist - 1] is pending. A KV position is valid
 * exactly when the tokens up to it agree with hist, so after any failure the
 * caches are rewound to their longest common prefix with hist. */
#include "session.h"
#include "sampler.h"
#include "../core/error.h"
#include "../platform/platform.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { KIND_LOOKUP = 1, KIND_DRAFT = 2 };
#define SPEC_K_LIMIT 64
#define BACKOFF_MIN 8     /* plain steps after the depth first falls to 0 */
#define BACKOFF_MAX 256   /* ... doubling each time it falls again, up to this */
#define N_STATS 6

struct cism_spec {
    int kind;
    int32_t draft_max, ngram_min, ngram_max, adaptive;
    cism_model *target;   /* draft model: the target whose vocabulary was checked (retained) */
    cism_session *dsess;  /* draft model: its session */
    cism_sampler *dsamp;  /* draft model: a copy of the sampler, the drafts in its history */
    int64_t dvalid;       /* draft model: dsess holds hist[0..dvalid) (more positions may be stale) */
    int32_t *hist, *tmp;  /* [cap] the text; scratch for cism_session_tokens */
    int64_t cap, n_hist;
    int32_t batch[SPEC_K_LIMIT + 1];  /* pending token + drafts */
    double *p, *q;        /* [vocab] target distribution; [draft_max][vocab] the draft's */
    int64_t p_cap, q_cap; /* doubles allocated */
    int32_t k_cur, cooldown, backoff;
    int mode;             /* this generation's adaptation: 0 fixed, 1 acceptance, 2 acceptance and measured cost */
    /* measured costs (mode 2, kept across generations): seconds of a one-token target eval, of each
       further token of a verify eval, of a one-token draft-model eval; decayed acceptance counts */
    double t_step, t_extra, t_draft, acc_hits, acc_tries;
    /* seconds of a verify eval of k drafts, per k measured so far (0: not yet; the linear t_step +
       k t_extra stands in): the kernels take tokens in register tiles (8 on AVX-512), so the cost
       is not linear in k (SmolLM2-135M q8, one core: 8 tokens 2.4 one-token steps, 9 tokens 3.2) */
    double t_verify[SPEC_K_LIMIT + 1];
    const cism_model *costs_model;  /* the target they were measured on (compared, not dereferenced) */
    int64_t stat[N_STATS];
};

static int is_eos(const cism_model *m, int32_t token) {
    int32_t i;
    for (i = 0; i < m->n_eos; i++)
        if (m->eos_ids[i] == token) return 1;
    return 0;
}

static cism_spec *spec_new(int kind) {
    cism_spec *sp = (cism_spec *)calloc(1, sizeof(*sp));
    if (!sp) return NULL;
    sp->kind = kind;
    sp->draft_max = kind == KIND_LOOKUP ? 8 : 4;
    sp->ngram_min = 2;
    sp->ngram_max = 4;
    sp->adaptive = 2;
    return sp;
}

cism_status cism_spec_create_lookup(cism_spec **out) {
    cism__clear_error();
    if (!out) return cism__fail(CISM_ERR_INVALID_ARG, "cism_spec_create_lookup: out is NULL");
    *out = spec_new(KIND_LOOKUP);
    return *out ? CISM_OK : cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_spec_create_lookup: out of memory");
}

/* Shows a vocabulary string in a message: at most 40 bytes. */
#define PIECE_ARGS(len, s) (int)((len) > 40 ? 40 : (len)), (s)

static cism_status check_vocab(const cism_model *t, const cism_model *d) {
    int64_t i;
    int ht = cism_model_has_tokenizer(t), hd = cism_model_has_tokenizer(d);
    if (t->hp.vocab != d->hp.vocab)
        return cism__fail(CISM_ERR_INVALID_ARG,
                          "the draft model has %lld tokens in its vocabulary and the target %lld: a draft model must use "
                          "the target's vocabulary (a smaller model of the same family, or a quantized copy of the target)",
                          (long long)d->hp.vocab, (long long)t->hp.vocab);
    if (ht != hd)
        return cism__fail(CISM_ERR_INVALID_ARG, "the %s model carries a tokenizer and the %s does not: cannot check that they "
                          "share a vocabulary", ht ? "target" : "draft", ht ? "draft" : "target");
    if (!ht) return CISM_OK;
    for (i = 0; i < t->hp.vocab; i++) {
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        cism_status sa = cism_token_to_piece(t, (int32_t)i, &a, &la), sb = cism_token_to_piece(d, (int32_t)i, &b, &lb);
        if ((sa == CISM_OK) != (sb == CISM_OK) || (sa == CISM_OK && (la != lb || (la && memcmp(a, b, la) != 0)))) {
            cism__clear_error();
            return cism__fail(CISM_ERR_INVALID_ARG,
                              "the draft model's vocabulary differs from the target's: token %lld is \"%.*s\" in the target "
                              "and \"%.*s\" in the draft; a draft model must use the target's tokenizer",
                              (long long)i, PIECE_ARGS(sa == CISM_OK ? la : 6, sa == CISM_OK ? a : "(none)"),
                              PIECE_ARGS(sb == CISM_OK ? lb : 6, sb == CISM_OK ? b : "(none)"));
        }
    }
    cism__clear_error();
    return CISM_OK;
}

cism_status cism_spec_create_draft(const cism_model *target, cism_model *draft, const cism_params *draft_params,
                                   cism_spec **out) {
    cism_spec *sp;
    cism_status st;
    cism__clear_error();
    if (!out) return cism__fail(CISM_ERR_INVALID_ARG, "cism_spec_create_draft: out is NULL");
    *out = NULL;
    if (!target || !draft) return cism__fail(CISM_ERR_INVALID_ARG, "cism_spec_create_draft: target and draft models are required");
    if ((st = check_vocab(target, draft)) != CISM_OK) return st;
    sp = spec_new(KIND_DRAFT);
    if (!sp) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_spec_create_draft: out of memory");
    if ((st = cism_session_create(draft, draft_params, &sp->dsess)) != CISM_OK) {
        free(sp);
        return st;
    }
    if ((st = cism_sampler_create(&sp->dsamp)) != CISM_OK) {
        cism_session_free(sp->dsess);
        free(sp);
        return st;
    }
    sp->target = (cism_model *)(uintptr_t)target; /* the reference count is the library's own state */
    cism__model_retain(sp->target);
    *out = sp;
    return CISM_OK;
}

void cism_spec_free(cism_spec *sp) {
    if (!sp) return;
    cism_session_free(sp->dsess);
    cism_sampler_free(sp->dsamp);
    if (sp->target) cism__model_release(sp->target);
    free(sp->hist);
    free(sp->tmp);
    free(sp->p);
    free(sp->q);
    free(sp);
}

cism_status cism_spec_set_int(cism_spec *sp, cism_spec_param key, int64_t v) {
    cism__clear_error();
    if (!sp) return cism__fail(CISM_ERR_INVALID_ARG, "cism_spec_set_int: spec is NULL");
    switch (key) {
    case CISM_SPEC_DRAFT_MAX:
        if (v < 1 || v > SPEC_K_LIMIT)
            return cism__fail(CISM_ERR_INVALID_ARG, "draft_max %lld must be in 1..%d", (long long)v, SPEC_K_LIMIT);
        sp->draft_max = (int32_t)v;
        return CISM_OK;
    case CISM_SPEC_NGRAM_MIN:
    case CISM_SPEC_NGRAM_MAX:
        if (v < 1 || v > 16)
            return cism__fail(CISM_ERR_INVALID_ARG, "%s %lld must be in 1..16", key == CISM_SPEC_NGRAM_MIN ? "ngram_min" : "ngram_max",
                              (long long)v);
        if (key == CISM_SPEC_NGRAM_MIN) sp->ngram_min = (int32_t)v;
        else sp->ngram_max = (int32_t)v;
        return CISM_OK;
    case CISM_SPEC_ADAPTIVE:
        if (v < 0 || v > 2) return cism__fail(CISM_ERR_INVALID_ARG, "adaptive %lld must be 0, 1 or 2", (long long)v);
        sp->adaptive = (int32_t)v;
        return CISM_OK;
    default: return cism__fail(CISM_ERR_INVALID_ARG, "unknown speculative decoding parameter %d", (int)key);
    }
}

cism_status cism_spec_stat_get(const cism_spec *sp, cism_spec_stat key, int64_t *value) {
    cism__clear_error();
    if (!sp || !value) return cism__fail(CISM_ERR_INVALID_ARG, "cism_spec_stat_get: NULL argument");
    if (key < 0 || key >= N_STATS) return cism__fail(CISM_ERR_INVALID_ARG, "unknown speculative decoding statistic %d", (int)key);
    *value = sp->stat[key];
    return CISM_OK;
}

/* An exponential moving average (the first sample sets it). */
static void ema(double *avg, double x) { *avg = *avg > 0.0 ? 0.8 * *avg + 0.2 * x : x; }

/* ---- drafting ---------------------------------------------------------------- */

/* Prompt lookup: the longest n-gram (ngram_max down to ngram_min) ending hist
   that occurred before, at its most recent occurrence: the k tokens that
   followed it. Past the end of hist they continue with the proposal itself
   (a loop of period P repeats with period P). Returns the count (0 or k). */
static int32_t lookup_propose(const cism_spec *sp, int32_t k, int32_t *out) {
    const int32_t *h = sp->hist;
    int64_t N = sp->n_hist, n, j, t;
    for (n = sp->ngram_max < N - 1 ? sp->ngram_max : N - 1; n >= sp->ngram_min; n--) {
        const int32_t *suf = h + N - n;
        for (j = N - n - 1; j >= 0; j--) {
            if (h[j + n - 1] != suf[n - 1] || memcmp(h + j, suf, (size_t)n * sizeof(int32_t)) != 0) continue;
            for (t = 0; t < k; t++) {
                int64_t src = j + n + t;
                out[t] = src < N ? h[src] : out[src - N];
            }
            return k;
        }
    }
    return 0;
}

/* The longest prefix of a session's tokens that agrees with hist (its valid
   KV positions). */
static cism_status common_prefix(cism_spec *sp, const cism_session *s, int64_t *n_common) {
    int32_t n = 0;
    int64_t i, m;
    cism_status st = cism_session_tokens(s, sp->tmp, (int32_t)sp->cap, &n);
    if (st != CISM_OK) return st;
    m = n < sp->n_hist ? n : sp->n_hist;
    for (i = 0; i < m && sp->tmp[i] == sp->hist[i]; i++) {}
    *n_common = i;
    return CISM_OK;
}

/* Rewinds s to its positions that agree with hist (after a failure). */
static void resync(cism_spec *sp, cism_session *s) {
    int64_t n = 0;
    if (common_prefix(sp, s, &n) == CISM_OK && n < cism_session_n_past(s)) cism_session_rewind(s, (int32_t)n);
}

/* The end of a generation: after a failure (st) the target is rewound to what
   agrees with the text, and the draft session always to what it holds of
   it; the failure's message is kept. */
static cism_status finish(cism_spec *sp, cism_session *s, cism_status st) {
    char msg[512];
    if (st != CISM_OK) {
        const char *m = cism_last_error();
        size_t n = strlen(m);
        if (n >= sizeof(msg)) n = sizeof(msg) - 1;
        memcpy(msg, m, n);
        msg[n] = 0;
        resync(sp, s);
    }
    if (sp->kind == KIND_DRAFT && sp->dvalid < cism_session_n_past(sp->dsess))
        cism_session_rewind(sp->dsess, (int32_t)sp->dvalid);
    return st == CISM_OK ? CISM_OK : cism__fail(st, "%s", msg);
}

/* A draw from the (unnormalized, total mass) distribution pr. */
static int32_t draw(const double *pr, int64_t n, double u, double mass) {
    double c = 0.0, x = u * mass;
    int64_t i, last = 0;
    for (i = 0; i < n; i++) {
        if (pr[i] <= 0.0) continue;
        c += pr[i];
        last = i;
        if (x < c) return (int32_t)i;
    }
    return (int32_t)last; /* rounding left x at the very top */
}

/* Draft model: brings its session to hist[0..n_hist) and samples up to k
   drafts (greedily, or from q with the sampler's settings and the target
   sampler's generator), evaluating all but the last. *n_out gets the count;
   the draft then holds hist plus drafts[0..*n_out - 1). */
static cism_status draft_propose(cism_spec *sp, cism_session *target, cism_sampler *samp, int greedy, int32_t k,
                                 int32_t *out, int32_t *n_out) {
    cism_session *d = sp->dsess;
    int64_t N = sp->n_hist, vocab = d->model->hp.vocab;
    int32_t i, n = 0;
    double t0;
    cism_status st;
    *n_out = 0;
    if (N + k - 1 > d->n_ctx) k = (int32_t)(d->n_ctx - N + 1);
    if (k < 1) return CISM_OK;
    if (sp->dvalid >= N) sp->dvalid = N - 1; /* re-evaluate the last token for its logits */
    if (cism_session_n_past(d) > sp->dvalid && (st = cism_session_rewind(d, (int32_t)sp->dvalid)) != CISM_OK) return st;
    cism__atomic_store(&d->cancel, 0);
    st = cism__session_eval(d, sp->hist + sp->dvalid, (int32_t)(N - sp->dvalid));
    sp->stat[CISM_SPEC_STAT_DRAFT_EVALS]++;
    if (st == CISM_ERR_CANCELLED) { /* whole chunks may have been kept: no draft this time */
        int64_t n_common = 0;
        if (common_prefix(sp, d, &n_common) == CISM_OK) sp->dvalid = n_common < N ? n_common : N - 1;
        return CISM_OK;
    }
    if (st != CISM_OK) return st;
    sp->dvalid = N;
    if ((st = cism__sampler_copy(sp->dsamp, samp)) != CISM_OK) return st;
    for (i = 0; i < k; i++) {
        const float *logits;
        int32_t nv, tok;
        if ((st = cism_session_logits(d, -1, &logits, &nv)) != CISM_OK) return st;
        if (greedy) {
            if ((st = cism_sampler_sample(sp->dsamp, logits, nv, &tok)) != CISM_OK) return st;
        } else {
            double *q = sp->q + (int64_t)i * vocab;
            if ((st = cism__sampler_probs(sp->dsamp, logits, nv, q)) != CISM_OK) return st;
            tok = draw(q, nv, cism__sampler_uniform(samp), 1.0);
        }
        out[n++] = tok;
        cism_sampler_accept(sp->dsamp, tok);
        if (i + 1 == k || is_eos(target->model, tok) || cism__atomic_load(&target->cancel)) break;
        t0 = sp->mode == 2 ? cism__time_seconds() : 0.0;
        st = cism__session_eval(d, &tok, 1);
        if (sp->mode == 2 && st == CISM_OK) ema(&sp->t_draft, cism__time_seconds() - t0);
        sp->stat[CISM_SPEC_STAT_DRAFT_EVALS]++;
        if (st == CISM_ERR_CANCELLED) break; /* the cache still holds hist and out[0..n - 1) */
        if (st != CISM_OK) return st;
    }
    *n_out = n;
    return CISM_OK;
}

/* ---- adaptive depth ------------------------------------------------------------ */

/* Mode 2: the depth in 0..kmax that maximizes the expected tokens per second,
   from the acceptance rate a per draft position (a step of k drafts yields
   (1 - a^(k+1)) / (1 - a) tokens) and the measured costs; 0 when no depth
   beats plain decode by 3%. */
static double acceptance(const cism_spec *sp) { return sp->acc_tries > 0.0 ? sp->acc_hits / sp->acc_tries : 0.5; }

static int32_t cost_k(const cism_spec *sp, int32_t kmax, double a) {
    double best = 1.03 / sp->t_step;
    int32_t k, best_k = 0;
    for (k = 1; k <= kmax; k++) {
        double tokens = a >= 1.0 ? (double)(k + 1) : (1.0 - pow(a, (double)(k + 1))) / (1.0 - a);
        double cost = (sp->t_verify[k] > 0.0 ? sp->t_verify[k] : sp->t_step + (double)k * sp->t_extra) +
                      (sp->kind == KIND_DRAFT ? (double)k * sp->t_draft : 0.0);
        if (tokens / cost > best) {
            best = tokens / cost;
            best_k = k;
        }
    }
    return best_k;
}

static int32_t choose_k(cism_spec *sp) {
    int32_t k;
    if (sp->mode == 0) return sp->draft_max;
    if (sp->mode == 2 && sp->t_step <= 0.0) return 0; /* measure a plain step first */
    if (sp->k_cur == 0 && sp->cooldown == 0) sp->k_cur = 1; /* probe again */
    k = sp->k_cur;
    if (sp->mode == 2 && k > 0 && sp->t_extra > 0.0 && (sp->kind == KIND_LOOKUP || sp->t_draft > 0.0)) {
        int32_t kc = cost_k(sp, sp->draft_max, acceptance(sp));
        if (cost_k(sp, sp->draft_max, 1.0) == 0) { /* drafting cannot pay even if every draft is accepted
                                                      (a draft model as slow as the target): measure again
                                                      only after BACKOFF_MAX plain steps */
            sp->k_cur = 0;
            sp->cooldown = BACKOFF_MAX;
            return 0;
        }
        if (kc == 0 && sp->k_cur > 1) { /* not worth drafting now: plain decode for a while */
            sp->k_cur = 0;
            sp->cooldown = sp->backoff;
            sp->backoff = sp->backoff * 2 < BACKOFF_MAX ? sp->backoff * 2 : BACKOFF_MAX;
            return 0;
        }
        if (kc > 0 && kc < k) k = kc;
    }
    return k;
}

/* After a verify of nd drafts of which j were accepted. */
static void adapt(cism_spec *sp, int32_t j, int32_t nd) {
    sp->acc_hits = 0.9 * sp->acc_hits + (double)j;
    sp->acc_tries = 0.9 * sp->acc_tries + (double)(j < nd ? j + 1 : j);
    if (sp->mode == 0) return;
    if (j == nd) {
        sp->k_cur = sp->k_cur * 2 < sp->draft_max ? sp->k_cur * 2 : sp->draft_max;
        /* a success resets the back-off, unless the costs say drafting does not pay even so */
        if (sp->mode != 2 || sp->t_extra <= 0.0 || cost_k(sp, sp->draft_max, acceptance(sp)) > 0) sp->backoff = BACKOFF_MIN;
    } else if (j == 0) {
        sp->k_cur /= 2;
        if (sp->k_cur == 0) { /* drafts keep failing: plain decode for a while */
            sp->cooldown = sp->backoff;
            sp->backoff = sp->backoff * 2 < BACKOFF_MAX ? sp->backoff * 2 : BACKOFF_MAX;
        }
    } else {
        sp->k_cur = j + 1 < sp->draft_max ? j + 1 : sp->draft_max;
    }
}

/* ---- the loop ---------------------------------------------------------------------- */

typedef struct run {
    cism_spec *sp;
    cism_session *s;
    cism_sampler *samp;
    int32_t max_tokens, produced;
    uint32_t flags;
    cism_token_callback cb;
    void *ud;
    int ended;
    cism_stop_reason reason;
    int64_t settle_len;  /* on ending: the target must hold hist[0..settle_len), logits of the last as row -1 */
    int row_ok;          /* the target's row -1 are the logits of hist[n_past - 1], from a one-token or prompt eval */
} run;

/* Reports token t as cism_generate_v2's loop does: 1 when the generation ends. */
static int emit(run *r, int32_t t) {
    cism_spec *sp = r->sp;
    int64_t L = sp->n_hist;
    int stop;
    sp->hist[sp->n_hist++] = t;
    r->produced++;
    cism_sampler_accept(r->samp, t);
    stop = r->cb ? r->cb(r->ud, t) != 0 : 0;
    if (!(r->flags & CISM_GENERATE_IGNORE_EOS) && is_eos(r->s->model, t)) {
        r->reason = CISM_STOP_EOS; /* reported, not evaluated */
        r->settle_len = L;
    } else if (L >= r->s->n_ctx) {
        r->reason = CISM_STOP_CONTEXT_FULL;
        r->settle_len = L;
    } else if (stop) {
        r->reason = CISM_STOP_CALLBACK;
        r->settle_len = L + 1;
    } else if (r->produced >= r->max_tokens) {
        r->reason = CISM_STOP_MAX_TOKENS;
        r->settle_len = L + 1;
    } else {
        return 0;
    }
    r->ended = 1;
    return 1;
}

/* The final state of cism_generate_v2: hist[0..m) in the cache, the last one
   evaluated alone (so its logits are row -1). */
static cism_status settle(run *r, int64_t m) {
    cism_session *s = r->s;
    cism_status st;
    if (cism_session_n_past(s) == m && r->row_ok) return CISM_OK;
    if ((st = cism_session_rewind(s, (int32_t)(m - 1))) != CISM_OK) return st;
    st = cism__session_eval(s, r->sp->hist + m - 1, 1);
    r->row_ok = st == CISM_OK;
    return st;
}

/* Evaluates tokens keeping every logits row, whatever the session's
   CISM_PARAM_LOGITS_ALL (its later evals keep only the last row again). */
static cism_status eval_rows(cism_session *s, const int32_t *tokens, int32_t n) {
    int saved = s->logits_all;
    cism_status st;
    s->logits_all = 1;
    st = cism__session_eval(s, tokens, n);
    s->logits_all = saved;
    return st;
}

static cism_status ensure_buffers(cism_spec *sp, const cism_session *s) {
    int64_t cap = s->n_ctx + 2;  /* hist; tmp also takes cism_session_tokens of the draft */
    int64_t vocab = s->model->hp.vocab, qn = sp->kind == KIND_DRAFT ? (int64_t)sp->draft_max * vocab : 0;
    if (sp->dsess && sp->dsess->n_ctx + 2 > cap) cap = sp->dsess->n_ctx + 2;
    if (sp->cap < cap) {
        int32_t *h = (int32_t *)realloc(sp->hist, (size_t)cap * sizeof(int32_t)), *t;
        if (!h) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "speculative decoding: out of memory");
        sp->hist = h;
        t = (int32_t *)realloc(sp->tmp, (size_t)cap * sizeof(int32_t));
        if (!t) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "speculative decoding: out of memory");
        sp->tmp = t;
        sp->cap = cap;
    }
    if (sp->p_cap < vocab) {
        double *p = (double *)realloc(sp->p, (size_t)vocab * sizeof(double));
        if (!p) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "speculative decoding: out of memory");
        sp->p = p;
        sp->p_cap = vocab;
    }
    if (sp->q_cap < qn) {
        double *q = (double *)realloc(sp->q, (size_t)qn * sizeof(double));
        if (!q) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "speculative decoding: out of memory");
        sp->q = q;
        sp->q_cap = qn;
    }
    return CISM_OK;
}

/* One verify: the pending token plus drafts[0..nd) in one eval; accepts a
   prefix, reports it and the target's own next token. *n_acc gets the
   number of drafts accepted. */
static cism_status verify(run *r, int greedy, int point, int32_t nd, int32_t *n_acc) {
    cism_spec *sp = r->sp;
    cism_session *s = r->s;
    int64_t N = sp->n_hist, x;
    int32_t i, j = 0, nv = 0;
    double t0;
    const int32_t *drafts = sp->batch + 1;
    cism_status st;
    *n_acc = 0;
    sp->batch[0] = sp->hist[N - 1];
    t0 = sp->mode == 2 ? cism__time_seconds() : 0.0;
    st = eval_rows(s, sp->batch, nd + 1);
    sp->stat[CISM_SPEC_STAT_STEPS]++;
    if (st != CISM_OK) return st;
    if (sp->mode == 2 && sp->t_step > 0.0) {
        double t = cism__time_seconds() - t0, extra = (t - sp->t_step) / (double)nd;
        ema(&sp->t_extra, extra > 1e-3 * sp->t_step ? extra : 1e-3 * sp->t_step);
        ema(&sp->t_verify[nd], t);
    }
    r->row_ok = 0;
    sp->stat[CISM_SPEC_STAT_VERIFY]++;
    sp->stat[CISM_SPEC_STAT_DRAFTED] += nd;
    for (i = 0; i <= nd; i++) {
        const float *logits;
        int32_t t, d;
        if ((st = cism_session_logits(s, i, &logits, &nv)) != CISM_OK) return st;
        if (i == nd) { /* every draft accepted: the target's next token */
            if ((st = cism_sampler_sample(r->samp, logits, nv, &t)) != CISM_OK) return st;
            emit(r, t);
            break;
        }
        d = drafts[i];
        if (greedy) {
            if ((st = cism_sampler_sample(r->samp, logits, nv, &t)) != CISM_OK) return st;
            if (t != d) {
                emit(r, t);
                break;
            }
        } else {
            double *p = sp->p, qd, mass = 0.0;
            const double *q = point ? NULL : sp->q + (int64_t)i * s->model->hp.vocab;
            if ((st = cism__sampler_probs(r->samp, logits, nv, p)) != CISM_OK) return st;
            qd = point ? 1.0 : q[d];
            if (!(cism__sampler_uniform(r->samp) * qd < p[d])) {
                /* rejected: draw from norm(max(0, p - q)) */
                if (point) {
                    p[d] = 0.0;
                } else {
                    for (x = 0; x < nv; x++) p[x] = p[x] > q[x] ? p[x] - q[x] : 0.0;
                }
                for (x = 0; x < nv; x++) mass += p[x];
                if (!(mass > 0.0)) { /* p == q up to rounding: the draft's token is as good as any */
                    if ((st = cism_sampler_sample(r->samp, logits, nv, &t)) != CISM_OK) return st;
                } else {
                    t = draw(p, nv, cism__sampler_uniform(r->samp), mass);
                }
                emit(r, t);
                break;
            }
        }
        j++;
        sp->stat[CISM_SPEC_STAT_ACCEPTED]++;
        if (emit(r, d)) break;
    }
    *n_acc = j;
    /* the cache holds the pending token and drafts[0..j) at positions N - 1 .. N - 1 + j */
    if (!r->ended && j < nd && (st = cism_session_rewind(s, (int32_t)(N + j))) != CISM_OK) return st;
    return CISM_OK;
}

static cism_status spec_generate(cism_spec *sp, cism_session *s, cism_sampler *samp, const int32_t *prompt,
                                 int32_t n_prompt, int32_t max_tokens, uint32_t flags, cism_token_callback cb, void *ud,
                                 int32_t *n_generated, cism_stop_reason *reason) {
    run r;
    cism_status st;
    int32_t i, n_prior = 0;
    int greedy, point;
    memset(&r, 0, sizeof(r));
    *reason = CISM_STOP_ERROR;
    if (n_generated) *n_generated = 0;
    if (!sp || !s || !samp) return cism__fail(CISM_ERR_INVALID_ARG, "cism_generate_spec: spec, session and sampler are required");
    if (n_prompt < 0 || (n_prompt > 0 && !prompt))
        return cism__fail(CISM_ERR_INVALID_ARG, "cism_generate_spec: bad prompt (n_prompt %d%s)", (int)n_prompt,
                          prompt ? "" : ", prompt is NULL");
    if (max_tokens < 0)
        return cism__fail(CISM_ERR_INVALID_ARG, "the number of tokens to generate (max_tokens) is %d; it must be 0 or more",
                          (int)max_tokens);
    if (flags & ~(uint32_t)CISM_GENERATE_IGNORE_EOS)
        return cism__fail(CISM_ERR_INVALID_ARG, "cism_generate_spec: unknown flags 0x%x", flags);
    if (sp->ngram_min > sp->ngram_max)
        return cism__fail(CISM_ERR_INVALID_ARG, "ngram_min %d is larger than ngram_max %d", (int)sp->ngram_min, (int)sp->ngram_max);
    if (sp->kind == KIND_DRAFT && s->model != sp->target) {
        if ((st = check_vocab(s->model, sp->dsess->model)) != CISM_OK) return st;
        cism__model_retain(s->model);
        cism__model_release(sp->target);
        sp->target = s->model;
    }
    if (sp->kind == KIND_DRAFT && sp->dsess == NULL) return cism__fail(CISM_ERR_INTERNAL, "draft spec without a session");
    cism__atomic_store(&s->cancel, 0);
    if ((st = ensure_buffers(sp, s)) != CISM_OK) return st;
    memset(sp->stat, 0, sizeof(sp->stat));
    sp->k_cur = sp->draft_max < 4 ? sp->draft_max : 4;
    /* measured costs decide only in greedy decoding, whose tokens do not depend on the depth; sampled
       tokens do (through the random numbers drawn), so there the depth follows acceptance alone and a
       seed gives the same tokens every run */
    sp->mode = sp->adaptive == 2 && !cism__sampler_is_greedy(samp) ? 1 : sp->adaptive;
    if (s->model != sp->costs_model) { /* costs measured on another model do not apply */
        sp->t_step = sp->t_extra = sp->t_draft = sp->acc_hits = sp->acc_tries = 0.0;
        memset(sp->t_verify, 0, sizeof(sp->t_verify));
        sp->costs_model = s->model;
    }
    sp->cooldown = 0;
    sp->backoff = BACKOFF_MIN;

    if (n_prompt > 0) {
        if ((int64_t)n_prompt > (int64_t)s->n_ctx - s->n_past)
            return cism__fail(CISM_ERR_CONTEXT_FULL,
                              "the prompt is %d tokens but the session has room for %lld (context %lld, %d already used): "
                              "shorten the prompt or use a longer context (CISM_PARAM_N_CTX)",
                              (int)n_prompt, (long long)(s->n_ctx - s->n_past), (long long)s->n_ctx, (int)s->n_past);
    } else if (s->logit_rows == 0) {
        return cism__fail(CISM_ERR_STATE, "nothing to continue from: give a prompt (the session has evaluated no tokens yet)");
    }
    if ((st = cism_session_tokens(s, sp->hist, (int32_t)sp->cap, &n_prior)) != CISM_OK) return st;
    if (n_prompt > 0) {
        if ((st = cism__session_eval(s, prompt, n_prompt)) != CISM_OK) {
            if (st == CISM_ERR_CANCELLED) *reason = CISM_STOP_CANCELLED;
            return st;
        }
        for (i = 0; i < n_prompt; i++) cism_sampler_accept(samp, prompt[i]);
        memcpy(sp->hist + n_prior, prompt, (size_t)n_prompt * sizeof(int32_t));
    }
    sp->n_hist = (int64_t)n_prior + n_prompt;
    if (sp->kind == KIND_DRAFT) { /* what the draft session already holds of this text */
        int64_t n_common = 0;
        if ((st = common_prefix(sp, sp->dsess, &n_common)) != CISM_OK) return st;
        sp->dvalid = n_common;
    }
    r.sp = sp;
    r.s = s;
    r.samp = samp;
    r.max_tokens = max_tokens;
    r.flags = flags;
    r.cb = cb;
    r.ud = ud;
    r.row_ok = 1;
    r.reason = CISM_STOP_MAX_TOKENS;
    greedy = cism__sampler_is_greedy(samp);
    point = sp->kind == KIND_LOOKUP;

    if (max_tokens > 0) { /* the first token, from the prompt's logits */
        const float *logits;
        int32_t nv, t;
        if ((st = cism_session_logits(s, -1, &logits, &nv)) != CISM_OK) goto fail;
        if ((st = cism_sampler_sample(samp, logits, nv, &t)) != CISM_OK) goto fail;
        emit(&r, t);
    } else {
        r.ended = 1;
        r.settle_len = sp->n_hist;
    }
    while (!r.ended) {
        int64_t N = sp->n_hist;
        int32_t k, nd = 0, j;
        if (cism__atomic_load(&s->cancel)) {
            r.reason = CISM_STOP_CANCELLED;
            st = cism__fail(CISM_ERR_CANCELLED, "generation cancelled");
            goto out;
        }
        k = choose_k(sp);
        if (k > s->n_ctx - N) k = (int32_t)(s->n_ctx - N);
        if (k > max_tokens - r.produced - 1) k = max_tokens - r.produced - 1;
        if (k > s->n_batch - 1) k = (int32_t)(s->n_batch - 1);
        if (k > 0) {
            if (sp->kind == KIND_LOOKUP) {
                nd = lookup_propose(sp, k, sp->batch + 1);
            } else if ((st = draft_propose(sp, s, samp, greedy, k, sp->batch + 1, &nd)) != CISM_OK) {
                goto fail;
            }
        }
        if (nd == 0) { /* a plain decode step */
            const float *logits;
            int32_t nv, t;
            double t0 = sp->mode == 2 ? cism__time_seconds() : 0.0;
            st = cism__session_eval(s, sp->hist + N - 1, 1);
            if (sp->mode == 2 && st == CISM_OK) ema(&sp->t_step, cism__time_seconds() - t0);
            sp->stat[CISM_SPEC_STAT_STEPS]++;
            if (st != CISM_OK) {
                if (st == CISM_ERR_CANCELLED) { r.reason = CISM_STOP_CANCELLED; goto out; }
                goto fail;
            }
            r.row_ok = 1;
            if (sp->cooldown > 0) sp->cooldown--;
            if ((st = cism_session_logits(s, -1, &logits, &nv)) != CISM_OK) goto fail;
            if ((st = cism_sampler_sample(samp, logits, nv, &t)) != CISM_OK) goto fail;
            emit(&r, t);
            continue;
        }
        st = verify(&r, greedy, point, nd, &j);
        if (st != CISM_OK) {
            if (st == CISM_ERR_CANCELLED) { r.reason = CISM_STOP_CANCELLED; goto out; }
            goto fail;
        }
        if (sp->kind == KIND_DRAFT) { /* the draft holds hist[0..N) and drafts[0..nd - 1) */
            int64_t v = N + (j < nd - 1 ? j : nd - 1);
            sp->dvalid = v;
        }
        adapt(sp, j, nd);
    }
    st = settle(&r, r.settle_len);
    if (st == CISM_ERR_CANCELLED) r.reason = CISM_STOP_CANCELLED;
    else if (st != CISM_OK) goto fail;
    goto out;
fail:
    r.reason = CISM_STOP_ERROR;
out:
    st = finish(sp, s, st);
    sp->stat[CISM_SPEC_STAT_GENERATED] = r.produced;
    if (n_generated) *n_generated = r.produced;
    *reason = r.reason;
    return st;
}

cism_status cism_generate_spec(cism_spec *spec, cism_session *session, cism_sampler *sampler, const int32_t *prompt,
                               int32_t n_prompt, int32_t max_tokens, uint32_t flags, cism_token_callback callback,
                               void *user_data, int32_t *n_generated, cism_stop_reason *stop_reason) {
    cism_stop_reason reason;
    cism_status st;
    cism__clear_error();
    st = spec_generate(spec, session, sampler, prompt, n_prompt, max_tokens, flags, callback, user_data, n_generated, &reason);
    if (stop_reason) *stop_reason = reason;
    return st;
}
