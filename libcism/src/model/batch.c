/* batch.c - several sessions' tokens in one forward pass (cism_batch, cism.h).
 *
 * The members' rows are packed one session after another into the batch's own
 * work (session.h) and go through forward.c together: each matmul reads its
 * weights once for every row, attention and KV writes go to each row's own
 * session. forward.c's rows do not depend on one another, so every member
 * ends with the bits cism_session_eval would give it. Logits land in the
 * batch's buffer and are copied to a member only when it succeeded, so a
 * cancelled or failed member keeps its previous logits and position. */
#include "session.h"
#include "deltanet.h"
#include "../core/error.h"
#include "../core/params.h"

#include <stdlib.h>
#include <string.h>

struct cism_batch {
    cism_model *model;
    cism__work w;
    int32_t kv_type, kv_type_v; /* K's and V's (CISM_PARAM_KV_TYPE_V resolved) */
    int kv_rot;               /* CISM_PARAM_KV_ROTATE resolved for kv_type */
    int64_t n_batch;          /* tokens per eval in all */
    int64_t n_ctx_hint;
    int64_t n_members, n_tokens;
    int evaluated;            /* the members are those of the last eval: the next add starts anew */
    cism_session **sessions;  /* [n_batch] */
    int64_t *n;               /* [n_batch] tokens of each member */
    cism_status *status;      /* [n_batch] of the last eval */
    int32_t *tokens;          /* [n_batch] every member's tokens, in order */
    cism__seq *seqs;          /* [n_batch] */
    float *logits;            /* [logits_cap][vocab] */
    int64_t logits_cap;
};

cism_status cism_batch_create(cism_model *model, const cism_params *params, cism_batch **out) {
    struct cism_params defaults;
    cism_batch *b;
    int64_t nb;
    int rot;
    cism_status st;
    cism__clear_error();
    if (!out) return cism__fail(CISM_ERR_INVALID_ARG, "cism_batch_create: out is NULL");
    *out = NULL;
    if (!model) return cism__fail(CISM_ERR_INVALID_ARG, "cism_batch_create: model is NULL");
    if (!params) {
        cism__params_defaults(&defaults);
        params = &defaults;
    }
    if (!cism__kernels_tier((int32_t)params->kernel_tier))
        return cism__fail(CISM_ERR_UNSUPPORTED, "kernel tier %s cannot run on this CPU (or is not compiled into this build)",
                          cism_kernel_tier_name((cism_kernel_tier)params->kernel_tier));
    st = cism__kv_check(&model->hp, (int32_t)params->kv_type, cism__kv_type_v(params), params->kv_rotate, &rot);
    if (st != CISM_OK) return st;
    b = (cism_batch *)calloc(1, sizeof(*b));
    if (!b) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_batch_create: out of memory");
    nb = params->n_batch;
    b->n_batch = nb;
    b->n_ctx_hint = params->n_ctx;
    b->kv_type = (int32_t)params->kv_type;
    b->kv_type_v = cism__kv_type_v(params);
    b->kv_rot = rot;
    b->w.k = cism__kernels_tier((int32_t)params->kernel_tier);
    b->w.nth = params->n_threads > 0 ? (int)params->n_threads : cism__default_threads();
    b->w.act_quant = params->act_quant != 0 && cism__model_has_packed(model);
    b->w.act_outliers = (int)params->act_outliers;
    b->sessions = (cism_session **)calloc((size_t)nb, sizeof(*b->sessions));
    b->n = (int64_t *)calloc((size_t)nb, sizeof(*b->n));
    b->status = (cism_status *)calloc((size_t)nb, sizeof(*b->status));
    b->tokens = (int32_t *)calloc((size_t)nb, sizeof(*b->tokens));
    b->seqs = (cism__seq *)calloc((size_t)nb, sizeof(*b->seqs));
    cism__model_retain(model);
    b->model = model;
    if (!b->sessions || !b->n || !b->status || !b->tokens || !b->seqs) {
        cism_batch_free(b);
        return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_batch_create: out of memory for %lld tokens", (long long)nb);
    }
    *out = b;
    return CISM_OK;
}

void cism_batch_free(cism_batch *b) {
    if (!b) return;
    cism__work_free(&b->w);
    free(b->sessions);
    free(b->n);
    free(b->status);
    free(b->tokens);
    free(b->seqs);
    free(b->logits);
    cism__model_release(b->model);
    free(b);
}

cism_status cism_batch_clear(cism_batch *b) {
    cism__clear_error();
    if (!b) return cism__fail(CISM_ERR_INVALID_ARG, "cism_batch_clear: batch is NULL");
    b->n_members = b->n_tokens = 0;
    b->evaluated = 0;
    return CISM_OK;
}

int32_t cism_batch_size(const cism_batch *b) { return b && !b->evaluated ? (int32_t)b->n_members : 0; }

static const char *kv_name(int32_t kv) {
    const char *n = cism_dtype_name((cism_dtype)kv);
    return n ? n : "unknown";
}

/* Why s cannot join b (CISM_OK if it can). */
static cism_status check_member(const cism_batch *b, const cism_session *s) {
    int64_t i;
    if (s->model != b->model) return cism__fail(CISM_ERR_INVALID_ARG, "this session belongs to another model than the batch");
    if (s->k != b->w.k)
        return cism__fail(CISM_ERR_INVALID_ARG, "the session runs kernel tier %s, the batch %s: create both with the same "
                          "CISM_PARAM_KERNEL_TIER", s->k->name, b->w.k->name);
    if (s->act_quant != b->w.act_quant || (s->act_quant && s->act_outliers != b->w.act_outliers))
        return cism__fail(CISM_ERR_INVALID_ARG, "the session and the batch differ in CISM_PARAM_ACT_QUANT or "
                          "CISM_PARAM_ACT_OUTLIERS (int8 activations %s/%s, outlier channels %s/%s): create both with the same",
                          s->act_quant ? "on" : "off", b->w.act_quant ? "on" : "off", s->act_outliers ? "on" : "off",
                          b->w.act_outliers ? "on" : "off");
    if (s->kv_type != b->kv_type)
        return cism__fail(CISM_ERR_INVALID_ARG, "the session keeps its KV cache in %s, the batch expects %s: create both with the "
                          "same CISM_PARAM_KV_TYPE", kv_name(s->kv_type), kv_name(b->kv_type));
    if (s->kv_type_v != b->kv_type_v)
        return cism__fail(CISM_ERR_INVALID_ARG, "the session keeps its V cache in %s, the batch expects %s: create both with the "
                          "same CISM_PARAM_KV_TYPE_V", kv_name(s->kv_type_v), kv_name(b->kv_type_v));
    if (s->kv_rot != b->kv_rot)
        return cism__fail(CISM_ERR_INVALID_ARG, "the session's %s KV cache is %s, the batch expects it %s: create both with the "
                          "same CISM_PARAM_KV_ROTATE", kv_name(s->kv_type), s->kv_rot ? "rotated" : "not rotated",
                          b->kv_rot ? "rotated" : "not rotated");
    if (s->act_sums)
        return cism__fail(CISM_ERR_UNSUPPORTED, "a session that collects activation statistics (CISM_PARAM_ACT_STATS) cannot "
                          "join a batch: evaluate it with cism_session_eval");
    for (i = 0; i < b->n_members; i++)
        if (b->sessions[i] == s) return cism__fail(CISM_ERR_INVALID_ARG, "this session is already member %lld of the batch", (long long)i);
    return CISM_OK;
}

static int has_ring(const cism_session *s) {
    int64_t l;
    for (l = 0; l < s->model->hp.n_layers; l++)
        if (s->kv[l].ring) return 1;
    return 0;
}

cism_status cism_batch_add(cism_batch *b, cism_session *s, const int32_t *tokens, int32_t n_tokens) {
    cism_status st;
    cism__clear_error();
    if (!b || !s) return cism__fail(CISM_ERR_INVALID_ARG, "cism_batch_add: %s is NULL", b ? "session" : "batch");
    if (b->evaluated) {
        b->n_members = b->n_tokens = 0;
        b->evaluated = 0;
    }
    if ((st = check_member(b, s)) != CISM_OK) return st;
    if ((st = cism__session_check_tokens(s, tokens, n_tokens)) != CISM_OK) return st;
    if (n_tokens > s->n_batch && has_ring(s)) /* its rings keep window + n_batch + slack positions */
        return cism__fail(CISM_ERR_INVALID_ARG, "this session keeps its sliding-window layers' cache for evals of at most %lld "
                          "tokens (its CISM_PARAM_N_BATCH); add at most that many", (long long)s->n_batch);
    if (b->n_tokens + n_tokens > b->n_batch)
        return cism__fail(CISM_ERR_INVALID_ARG, "the batch takes at most %lld tokens per eval (CISM_PARAM_N_BATCH) and holds %lld: "
                          "these %d do not fit; evaluate it first, or add fewer", (long long)b->n_batch,
                          (long long)b->n_tokens, (int)n_tokens);
    memcpy(b->tokens + b->n_tokens, tokens, (size_t)n_tokens * sizeof(int32_t));
    b->sessions[b->n_members] = s;
    b->n[b->n_members] = n_tokens;
    b->n_members += 1;
    b->n_tokens += n_tokens;
    cism__atomic_store(&s->cancel, 0);
    return CISM_OK;
}

cism_status cism_batch_member_status(const cism_batch *b, int32_t index) {
    if (!b) return cism__fail(CISM_ERR_INVALID_ARG, "cism_batch_member_status: batch is NULL");
    if (!b->evaluated || index < 0 || index >= b->n_members)
        return cism__fail(CISM_ERR_INVALID_ARG, "member %d is not in the last evaluated batch (%lld members)", (int)index,
                          (long long)(b->evaluated ? b->n_members : 0));
    return b->status[index];
}

/* Sizes what the eval needs: the work for the batch's rows and the largest
   member's context, the logits rows, each logits_all member's own rows. */
static cism_status prepare(cism_batch *b) {
    const cism__hparams *hp = &b->model->hp;
    int64_t i, n_ctx = b->n_ctx_hint, out = 0;
    cism_status st;
    for (i = 0; i < b->n_members; i++) {
        cism_session *s = b->sessions[i];
        if (s->n_ctx > n_ctx) n_ctx = s->n_ctx;
        if (s->logits_all && (st = cism__session_logits_reserve(s, b->n[i])) != CISM_OK) return st;
        out += s->logits_all ? b->n[i] : 1;
    }
    if (out > b->logits_cap) {
        float *p = (float *)realloc(b->logits, (size_t)out * (size_t)hp->vocab * sizeof(float));
        if (!p) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "out of memory for %lld rows of logits", (long long)out);
        b->logits = p;
        b->logits_cap = out;
    }
    if (n_ctx < b->w.n_ctx) n_ctx = b->w.n_ctx;
    return cism__work_ensure(&b->w, hp, b->n_batch, n_ctx);
}

/* Member i's outcome of the pass: committed to its session, or its status. */
static cism_status finish_member(cism_batch *b, int64_t i) {
    const cism__seq *sq = &b->seqs[i];
    cism_session *s = sq->s;
    int64_t vocab = b->model->hp.vocab, t;
    const float *rows = b->logits + sq->out0 * vocab;
    if (sq->stop) return cism__fail(CISM_ERR_CANCELLED, "member %lld of the batch was cancelled: none of its %lld tokens were kept",
                                    (long long)i, (long long)sq->nt);
    for (t = sq->row0; t < sq->row0 + sq->nt; t++)
        if (b->w.bad[t]) break;
    if (t < sq->row0 + sq->nt || !cism__all_finite(rows, sq->rows_out * vocab))
        return cism__fail(CISM_ERR_FORMAT, "member %lld of the batch: the model produced NaN or infinite values: its weights are "
                          "probably corrupt or overflowing; the tokens were not kept", (long long)i);
    memcpy(s->logits, rows, (size_t)(sq->rows_out * vocab) * sizeof(float));
    memcpy(s->tokens + s->n_past, sq->tokens, (size_t)sq->nt * sizeof(int32_t));
    cism__dn_commit(s, sq->nt);
    s->n_past += (int32_t)sq->nt;
    s->logit_rows = (int32_t)sq->rows_out;
    s->last_n = (int32_t)sq->nt;
    return CISM_OK;
}

cism_status cism_batch_eval(cism_batch *b) {
    int64_t i, row = 0, out = 0;
    cism_status st, first = CISM_OK;
    char first_msg[512];
    cism__clear_error();
    if (!b) return cism__fail(CISM_ERR_INVALID_ARG, "cism_batch_eval: batch is NULL");
    if (b->evaluated || b->n_members == 0)
        return cism__fail(CISM_ERR_STATE, "the batch has no members: cism_batch_add sessions and their tokens first");
    for (i = 0; i < b->n_members; i++) /* a member may have moved since it was added */
        if ((st = cism__session_check_tokens(b->sessions[i], b->tokens + row, (int32_t)b->n[i])) != CISM_OK) return st;
    if ((st = prepare(b)) != CISM_OK) return st;
    for (i = 0; i < b->n_members; i++) {
        cism__seq *sq = &b->seqs[i];
        memset(sq, 0, sizeof(*sq));
        sq->s = b->sessions[i];
        sq->tokens = b->tokens + row;
        sq->nt = b->n[i];
        sq->row0 = row;
        sq->rows_out = sq->s->logits_all ? sq->nt : 1;
        sq->out0 = out;
        row += sq->nt;
        out += sq->rows_out;
    }
    b->evaluated = 1;
    st = cism__forward_seqs(&b->w, b->seqs, b->n_members, b->logits, 0);
    if (st != CISM_OK && st != CISM_ERR_CANCELLED) {
        for (i = 0; i < b->n_members; i++) b->status[i] = st;
        return st;
    }
    first_msg[0] = 0;
    for (i = 0; i < b->n_members; i++) {
        b->status[i] = finish_member(b, i);
        if (b->status[i] != CISM_OK && first == CISM_OK) {
            first = b->status[i];
            strncpy(first_msg, cism_last_error(), sizeof(first_msg) - 1);
            first_msg[sizeof(first_msg) - 1] = 0;
        }
    }
    cism__clear_error();
    return first == CISM_OK ? CISM_OK : cism__fail(first, "%s", first_msg);
}
