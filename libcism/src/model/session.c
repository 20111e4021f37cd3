/* session.c - sessions: creation, evaluation in chunks, logits, cancel. */
#include "session.h"
#include "../core/error.h"
#include "../core/params.h"
#include "../kernels/quant.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_CTX 4096

static void *alloc_floats(int64_t n, int *failed) {
    void *p;
    if (n <= 0) n = 1;
    p = calloc((size_t)n, sizeof(float));
    if (!p) *failed = 1;
    return p;
}

void cism_session_free(cism_session *s) {
    if (!s) return;
    cism__pool_free(s->pool);
    free(s->k_cache);
    free(s->v_cache);
    free(s->x);
    free(s->xb);
    free(s->q);
    free(s->att);
    free(s->ob);
    free(s->hb);
    free(s->hb2);
    free(s->tmp);
    free(s->scores);
    free(s->rope_cos);
    free(s->rope_sin);
    free(s->xq);
    free(s->logits);
    cism__model_release(s->model);
    free(s);
}

cism_status cism_session_create(cism_model *model, const cism_params *params, cism_session **out) {
    struct cism_params defaults;
    const cism__hparams *hp;
    cism_session *s;
    int failed = 0;
    int64_t n_ctx, q_rows, kv_elems, elem;
    cism__clear_error();
    if (!out) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_create: out is NULL");
    *out = NULL;
    if (!model) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_create: model is NULL");
    if (!params) {
        cism__params_defaults(&defaults);
        params = &defaults;
    }
    hp = &model->hp;
    if (!cism__kernels_tier((int32_t)params->kernel_tier))
        return cism__fail(CISM_ERR_UNSUPPORTED, "kernel tier %s cannot run on this CPU (or is not compiled into this build)",
                          cism_kernel_tier_name((cism_kernel_tier)params->kernel_tier));
    n_ctx = params->n_ctx > 0 ? params->n_ctx : (hp->ctx_len < DEFAULT_CTX ? hp->ctx_len : DEFAULT_CTX);
    if (n_ctx > hp->ctx_len)
        return cism__fail(CISM_ERR_INVALID_ARG, "context length %lld is larger than the model's %lld positions",
                          (long long)n_ctx, (long long)hp->ctx_len);
    if (hp->sliding_window > 0 && n_ctx > hp->sliding_window)
        return cism__fail(CISM_ERR_UNSUPPORTED,
                          "this model uses sliding-window attention (window %lld), which is not implemented; "
                          "use a context length of at most %lld", (long long)hp->sliding_window, (long long)hp->sliding_window);
    s = (cism_session *)calloc(1, sizeof(*s));
    if (!s) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_session_create: out of memory");
    cism__model_retain(model);
    s->model = model;
    s->k = cism__kernels_tier((int32_t)params->kernel_tier);
    s->nth = params->n_threads > 0 ? (int)params->n_threads : cism__default_threads();
    s->n_ctx = n_ctx;
    s->n_batch = params->n_batch < n_ctx ? params->n_batch : n_ctx;
    s->kv_type = (int32_t)params->kv_type;
    s->logits_all = (int)params->logits_all;
    s->act_quant = (int)params->act_quant;

    q_rows = hp->n_heads * hp->head_dim;
    elem = s->kv_type == CISM_DTYPE_F32 ? 4 : 2;
    s->kv_head_stride = (uint64_t)n_ctx * (uint64_t)hp->head_dim;
    s->kv_layer_stride = s->kv_head_stride * (uint64_t)hp->n_kv_heads;
    kv_elems = (int64_t)s->kv_layer_stride * hp->n_layers;
    if ((uint64_t)kv_elems > (uint64_t)SIZE_MAX / (uint64_t)elem) failed = 1;
    if (!failed) {
        s->k_cache = malloc((size_t)(kv_elems * elem));
        s->v_cache = malloc((size_t)(kv_elems * elem));
        if (!s->k_cache || !s->v_cache) failed = 1;
    }
    if (failed) {
        double mb = 2.0 * (double)kv_elems * (double)elem / 1048576.0;
        cism_session_free(s);
        return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cannot allocate the KV cache (%.1f MiB for %lld positions); use a smaller context length",
                          mb, (long long)n_ctx);
    }
    s->x = (float *)alloc_floats(s->n_batch * hp->dim, &failed);
    s->xb = (float *)alloc_floats(s->n_batch * hp->dim, &failed);
    s->q = (float *)alloc_floats(s->n_batch * q_rows, &failed);
    s->att = (float *)alloc_floats(s->n_batch * q_rows, &failed);
    s->ob = (float *)alloc_floats(s->n_batch * hp->dim, &failed);
    s->hb = (float *)alloc_floats(s->n_batch * hp->ffn_dim, &failed);
    s->hb2 = (float *)alloc_floats(s->n_batch * hp->ffn_dim, &failed);
    s->tmp = (float *)alloc_floats((int64_t)s->nth * s->n_batch * hp->head_dim, &failed);
    s->scores_per_thread = CISM__ATT_TOKENS * (hp->n_heads / hp->n_kv_heads) * n_ctx;
    s->scores = (float *)alloc_floats((int64_t)s->nth * s->scores_per_thread, &failed);
    s->rope_cos = (float *)alloc_floats(s->n_batch * hp->head_dim / 2, &failed);
    s->rope_sin = (float *)alloc_floats(s->n_batch * hp->head_dim / 2, &failed);
    s->logits = (float *)alloc_floats(hp->vocab, &failed);
    if (s->act_quant) { /* one quantized row per token, for the widest matmul input */
        int64_t widest = hp->dim > q_rows ? hp->dim : q_rows;
        if (hp->ffn_dim > widest) widest = hp->ffn_dim;
        s->xq_row_bytes = cism__act8_row_bytes(widest);
        s->xq = (uint8_t *)alloc_floats((s->xq_row_bytes * s->n_batch + 3) / 4, &failed);
    }
    s->logits_cap = 1;
    if (failed) {
        cism_session_free(s);
        return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_session_create: out of memory for scratch buffers");
    }
    s->pool = cism__pool_create(s->nth);
    if (!s->pool) {
        cism_session_free(s);
        return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_session_create: cannot start %d threads", s->nth);
    }
    *out = s;
    return CISM_OK;
}

cism_status cism_session_reset(cism_session *s) {
    cism__clear_error();
    if (!s) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_reset: session is NULL");
    s->n_past = 0;
    s->logit_rows = 0;
    return CISM_OK;
}

cism_status cism_session_rewind(cism_session *s, int32_t n_keep) {
    cism__clear_error();
    if (!s) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_rewind: session is NULL");
    if (n_keep < 0 || n_keep > s->n_past)
        return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_rewind: n_keep %d is outside 0..%d", (int)n_keep, (int)s->n_past);
    s->n_past = n_keep;
    s->logit_rows = 0;
    return CISM_OK;
}

cism_status cism_session_eval(cism_session *s, const int32_t *tokens, int32_t n_tokens) {
    cism__clear_error();
    if (s) cism__atomic_store(&s->cancel, 0);
    return cism__session_eval(s, tokens, n_tokens);
}

cism_status cism__session_eval(cism_session *s, const int32_t *tokens, int32_t n_tokens) {
    const cism__hparams *hp;
    int64_t i, done;
    if (!s) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_eval: session is NULL");
    if (n_tokens <= 0 || !tokens)
        return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_eval: need at least one token (got %d%s)", (int)n_tokens,
                          tokens ? "" : ", tokens is NULL");
    hp = &s->model->hp;
    for (i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->vocab)
            return cism__fail(CISM_ERR_TOKEN_RANGE, "token %d at index %lld is outside the vocabulary (0..%lld)",
                              (int)tokens[i], (long long)i, (long long)(hp->vocab - 1));
    if ((int64_t)n_tokens > s->n_ctx - s->n_past)
        return cism__fail(CISM_ERR_CONTEXT_FULL, "context full: %d tokens evaluated, %d more do not fit in %lld positions",
                          (int)s->n_past, (int)n_tokens, (long long)s->n_ctx);
    if (s->logits_all && n_tokens > s->logits_cap) {
        float *p = (float *)realloc(s->logits, (size_t)n_tokens * (size_t)hp->vocab * sizeof(float));
        if (!p) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "out of memory for %d rows of logits", (int)n_tokens);
        s->logits = p;
        s->logits_cap = n_tokens;
    }
    s->logit_rows = 0;
    for (done = 0; done < n_tokens; done += s->n_batch) {
        int64_t nt = n_tokens - done < s->n_batch ? n_tokens - done : s->n_batch;
        int last = done + nt == n_tokens;
        int rows_out = s->logits_all ? (int)nt : (last ? 1 : 0);
        cism_status st = cism__forward(s, tokens + done, nt, rows_out, s->logits_all ? done : 0);
        if (st != CISM_OK) return st; /* chunks completed before the stop are kept */
        s->n_past += (int32_t)nt;
    }
    s->logit_rows = s->logits_all ? n_tokens : 1;
    s->last_n = n_tokens;
    return CISM_OK;
}

cism_status cism_session_logits(cism_session *s, int32_t index, const float **logits, int32_t *n_vocab) {
    int64_t vocab;
    cism__clear_error();
    if (!s || !logits) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_logits: NULL argument");
    if (s->logit_rows == 0) return cism__fail(CISM_ERR_STATE, "no logits: nothing has been evaluated since the last reset");
    vocab = s->model->hp.vocab;
    /* rows are numbered by the tokens of the last eval; without LOGITS_ALL only
       the last one (stored as the single row) is kept */
    if (index == -1 || index == s->last_n - 1) {
        *logits = s->logits + (int64_t)(s->logit_rows - 1) * vocab;
    } else if (index < 0 || index >= s->last_n) {
        return cism__fail(CISM_ERR_INVALID_ARG, "logits row %d is outside 0..%d", (int)index, (int)s->last_n - 1);
    } else if (!s->logits_all) {
        return cism__fail(CISM_ERR_STATE, "logits of row %d are not kept; set CISM_PARAM_LOGITS_ALL to keep every row", (int)index);
    } else {
        *logits = s->logits + (int64_t)index * vocab;
    }
    if (n_vocab) *n_vocab = (int32_t)vocab;
    return CISM_OK;
}

int32_t cism_session_n_past(const cism_session *s) { return s ? s->n_past : 0; }
int32_t cism_session_n_ctx(const cism_session *s) { return s ? (int32_t)s->n_ctx : 0; }

void cism_session_cancel(cism_session *s) {
    if (s) cism__atomic_store(&s->cancel, 1);
}
