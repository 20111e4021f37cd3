/* session.c - sessions: creation, evaluation in chunks, logits, cancel. */
#include "session.h"
#include "layer_shortconv.h"
#include "deltanet.h"
#include "../core/error.h"
#include "../core/params.h"
#include "../kernels/quant.h"
#include "../kernels/kv_quant.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_CTX 4096

void cism_session_free(cism_session *s) {
    if (!s) return;
    cism_spec_free(s->lookup);
    cism__work_free(&s->w);
    free(s->k_cache);
    free(s->v_cache);
    free(s->kv);
    free(s->conv_cache);
    free(s->logits);
    free(s->tokens);
    cism__dn_session_free(s);
    cism__act_stats_free(s);
    cism__model_release(s->model);
    free(s);
}

static int is_packed(const cism__weight *w) { return w->dtype >= CISM_DTYPE_Q8; }

int cism__model_has_packed(const cism_model *m) {
    int64_t l;
    if (is_packed(&m->tok_embd) || is_packed(&m->output)) return 1;
    for (l = 0; l < m->hp.n_layers; l++) {
        const cism__layer *L = &m->layers[l];
        if (is_packed(&L->wq) || is_packed(&L->wk) || is_packed(&L->wv) || is_packed(&L->wo) || is_packed(&L->gate) ||
            is_packed(&L->up) || is_packed(&L->down) || is_packed(&L->conv_in) || is_packed(&L->conv_out) ||
            is_packed(&L->wg) || is_packed(&L->dn.qkv) || is_packed(&L->dn.out))
            return 1;
    }
    return 0;
}

/* The session shape params ask for, checked against the model. */
/* kv_bytes, kv_bytes_v: of the K and of the V cache; conv_elem: bytes of a short-convolution cache element */
typedef struct shape { int64_t n_ctx, n_batch, kv_bytes, kv_bytes_v, kv_elems, conv_elem; int nth, act_quant, kv_rot; } shape;

/* KV types rotated when CISM_PARAM_KV_ROTATE is -1 (measured: docs/KV_CACHE.md) */
static int kv_rotate_default(int32_t kv_type) { return kv_type == CISM_DTYPE_Q8 || kv_type == CISM_DTYPE_Q4A; }

int32_t cism__kv_type_v(const cism_params *params) {
    return params->kv_type_v < 0 ? (int32_t)params->kv_type : (int32_t)params->kv_type_v;
}

cism_status cism__kv_check(const cism__hparams *hp, int32_t k_type, int32_t v_type, int64_t rotate, int *rot) {
    const char *kname = cism_dtype_name((cism_dtype)k_type), *vname = cism_dtype_name((cism_dtype)v_type);
    const int quant = cism__kv_is_quant(k_type) || cism__kv_is_quant(v_type);
    *rot = 0;
    if (!quant) {
        if (rotate == 1)
            return cism__fail(CISM_ERR_INVALID_ARG, "kv_rotate 1 applies to a quantized KV cache (q8, q4a); this session's KV "
                              "type is %s%s%s: use kv_rotate -1 or 0", kname ? kname : "unknown", k_type != v_type ? " (V " : "",
                              k_type != v_type ? (vname ? vname : "unknown") : "");
        return CISM_OK;
    }
    if (hp->head_dim % 32 != 0)
        return cism__fail(CISM_ERR_UNSUPPORTED, "KV cache type %s stores each head in blocks of 32 elements, but this model's "
                          "head_dim is %lld (not a multiple of 32): use kv_type f16 or f32",
                          cism__kv_is_quant(k_type) ? kname : vname, (long long)hp->head_dim);
    *rot = rotate < 0 ? (kv_rotate_default(k_type) || kv_rotate_default(v_type)) : (int)rotate;
    return CISM_OK;
}

static cism_status resolve_shape(const cism_model *model, const cism_params *params, shape *sh) {
    struct cism_params defaults;
    const cism__hparams *hp = &model->hp;
    memset(sh, 0, sizeof(*sh));
    if (!params) {
        cism__params_defaults(&defaults);
        params = &defaults;
    }
    sh->n_ctx = params->n_ctx > 0 ? params->n_ctx : (hp->ctx_len < DEFAULT_CTX ? hp->ctx_len : DEFAULT_CTX);
    if (sh->n_ctx > hp->ctx_len)
        return cism__fail(CISM_ERR_INVALID_ARG, "context length %lld is larger than the model's %lld positions: use at most %lld (or 0 for "
                          "the default)", (long long)sh->n_ctx, (long long)hp->ctx_len, (long long)hp->ctx_len);
    sh->nth = params->n_threads > 0 ? (int)params->n_threads : cism__default_threads();
    sh->n_batch = params->n_batch < sh->n_ctx ? params->n_batch : sh->n_ctx;
    sh->act_quant = params->act_quant != 0 && cism__model_has_packed(model); /* float weights never use it */
    sh->kv_elems = cism__kv_layout(hp, model->layers, sh->n_ctx, sh->n_batch, NULL);
    sh->kv_bytes = sh->kv_elems / hp->head_dim * (int64_t)cism__kv_row_bytes((int32_t)params->kv_type, hp->head_dim);
    sh->kv_bytes_v = sh->kv_elems / hp->head_dim * (int64_t)cism__kv_row_bytes(cism__kv_type_v(params), hp->head_dim);
    sh->conv_elem = params->kv_type == CISM_DTYPE_F32 ? 4 : 2; /* f16 for every other KV type */
    return cism__kv_check(hp, (int32_t)params->kv_type, cism__kv_type_v(params), params->kv_rotate, &sh->kv_rot);
}

int64_t cism__kv_layout(const cism__hparams *hp, const cism__layer *layers, int64_t n_ctx, int64_t n_batch, cism__kv_layer *kv) {
    int64_t l, total = 0;
    for (l = 0; l < hp->n_layers; l++) {
        int64_t w = layers[l].window, ring = w > 0 ? w + n_batch + CISM__KV_SLACK : 0, slots;
        if (2 * ring >= n_ctx) ring = 0;
        slots = layers[l].kind != CISM__LAYER_ATTENTION ? 0 : ring ? 2 * ring : n_ctx;  /* other mixers: no KV */
        if (kv) {
            kv[l].off = (uint64_t)total;
            kv[l].slots = slots;
            kv[l].ring = ring;
        }
        total += slots * hp->head_dim * hp->n_kv_heads;
    }
    return total;
}

/* The row index of (layer, head, slot) in a cache: rows of s->kv_row_bytes. */
static uint64_t kv_row_index(const cism_session *s, int64_t layer, int64_t head, int64_t slot) {
    const cism__kv_layer *L = &s->kv[layer];
    return L->off / (uint64_t)s->model->hp.head_dim + (uint64_t)head * (uint64_t)L->slots + (uint64_t)slot;
}

/* K and V rows may differ in size (CISM_PARAM_KV_TYPE_V): the cache says which */
static uint64_t row_bytes(const cism_session *s, const void *cache) {
    return cache == s->v_cache ? s->kv_row_bytes_v : s->kv_row_bytes;
}

void *cism__kv_row(const cism_session *s, void *cache, int64_t layer, int64_t head, int64_t pos) {
    int64_t ring = s->kv[layer].ring;
    return (uint8_t *)cache + kv_row_index(s, layer, head, ring ? pos % ring : pos) * row_bytes(s, cache);
}

void *cism__kv_row_copy(const cism_session *s, void *cache, int64_t layer, int64_t head, int64_t pos) {
    int64_t ring = s->kv[layer].ring;
    if (!ring) return NULL;
    return (uint8_t *)cache + kv_row_index(s, layer, head, pos % ring + ring) * row_bytes(s, cache);
}

static int64_t shape_bytes(const cism__hparams *hp, const shape *sh, int64_t logit_rows, int with_scratch) {
    int64_t b = (int64_t)sizeof(cism_session) + sh->kv_bytes + sh->kv_bytes_v + logit_rows * hp->vocab * 4 + sh->n_ctx * 4 +
                cism__shortconv_cache_bytes(hp, sh->n_ctx, sh->conv_elem) + cism__dn_session_bytes(hp);
    if (with_scratch) b += cism__work_bytes(hp, sh->n_batch, sh->n_ctx, sh->nth, sh->act_quant);
    return b;
}

cism_status cism_session_estimate_bytes(const cism_model *model, const cism_params *params, int64_t *bytes) {
    shape sh;
    cism_status st;
    cism__clear_error();
    if (!model || !bytes) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_estimate_bytes: NULL argument");
    if ((st = resolve_shape(model, params, &sh)) != CISM_OK) return st;
    *bytes = shape_bytes(&model->hp, &sh, 1, 1);
    return CISM_OK;
}

int64_t cism_session_memory_bytes(const cism_session *s) {
    shape sh;
    if (!s) return 0;
    sh.n_ctx = s->n_ctx;
    sh.n_batch = s->n_batch;
    sh.nth = s->nth;
    sh.kv_elems = s->kv_elems;
    sh.kv_bytes = s->kv_elems / s->model->hp.head_dim * (int64_t)s->kv_row_bytes;
    sh.kv_bytes_v = s->kv_elems / s->model->hp.head_dim * (int64_t)s->kv_row_bytes_v;
    sh.conv_elem = s->kv_type == CISM_DTYPE_F32 ? 4 : 2;
    sh.act_quant = s->act_quant;
    return shape_bytes(&s->model->hp, &sh, s->logits_cap, s->w.x != NULL);
}

cism_status cism_session_trim(cism_session *s) {
    int64_t vocab;
    cism__clear_error();
    if (!s) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_trim: session is NULL");
    cism__work_free(&s->w);
    vocab = s->model->hp.vocab;
    if (s->logits_cap > 1) {
        float *p;
        if (s->logit_rows > 1)
            memmove(s->logits, s->logits + (int64_t)(s->logit_rows - 1) * vocab, (size_t)vocab * sizeof(float));
        p = (float *)realloc(s->logits, (size_t)vocab * sizeof(float));
        if (p) s->logits = p; /* a failed shrink keeps the larger block */
        s->logits_cap = p ? 1 : s->logits_cap;
        if (s->logit_rows > 1) s->logit_rows = 1;
    }
    return CISM_OK;
}

cism_status cism_session_create(cism_model *model, const cism_params *params, cism_session **out) {
    const cism__hparams *hp;
    cism_session *s;
    struct cism_params defaults;
    shape sh;
    int failed = 0;
    cism_status st;
    cism__clear_error();
    if (!out) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_create: out is NULL");
    *out = NULL;
    if (!model) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_create: model is NULL");
    if (!params) {
        cism__params_defaults(&defaults);
        params = &defaults;
    }
    if ((st = resolve_shape(model, params, &sh)) != CISM_OK) return st;
    hp = &model->hp;
    if (!cism__kernels_tier((int32_t)params->kernel_tier))
        return cism__fail(CISM_ERR_UNSUPPORTED, "kernel tier %s cannot run on this CPU (or is not compiled into this build)",
                          cism_kernel_tier_name((cism_kernel_tier)params->kernel_tier));
    s = (cism_session *)calloc(1, sizeof(*s));
    if (!s) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_session_create: out of memory");
    cism__model_retain(model);
    s->model = model;
    s->k = cism__kernels_tier((int32_t)params->kernel_tier);
    s->nth = sh.nth;
    s->n_ctx = sh.n_ctx;
    s->n_batch = sh.n_batch;
    s->kv_type = (int32_t)params->kv_type;
    s->kv_rot = sh.kv_rot;
    s->kv_type_v = cism__kv_type_v(params);
    s->kv_row_bytes = cism__kv_row_bytes(s->kv_type, hp->head_dim);
    s->kv_row_bytes_v = cism__kv_row_bytes(s->kv_type_v, hp->head_dim);
    s->logits_all = (int)params->logits_all;
    s->act_quant = sh.act_quant;
    s->act_outliers = (int)params->act_outliers;
    s->w.k = s->k;
    s->w.nth = s->nth;
    s->w.act_quant = s->act_quant;
    s->w.act_outliers = s->act_outliers;

    s->kv = (cism__kv_layer *)calloc((size_t)hp->n_layers, sizeof(cism__kv_layer));
    if (!s->kv) failed = 1;
    else s->kv_elems = cism__kv_layout(hp, model->layers, sh.n_ctx, sh.n_batch, s->kv);
    if ((uint64_t)sh.kv_bytes > (uint64_t)SIZE_MAX || (uint64_t)sh.kv_bytes_v > (uint64_t)SIZE_MAX) failed = 1;
    if (!failed) {
        size_t kv = (size_t)sh.kv_bytes, kvv = (size_t)sh.kv_bytes_v;
        s->k_cache = malloc(kv ? kv : 1); /* none without attention layers */
        s->v_cache = malloc(kvv ? kvv : 1);
        if (!s->k_cache || !s->v_cache) failed = 1;
    }
    if (failed) {
        double mb = ((double)sh.kv_bytes + (double)sh.kv_bytes_v) / 1048576.0;
        cism_session_free(s);
        return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cannot allocate the KV cache (%.1f MiB for %lld positions); use a smaller context length",
                          mb, (long long)sh.n_ctx);
    }
    if ((st = cism__shortconv_session_init(s)) != CISM_OK) {
        cism_session_free(s);
        return st;
    }
    s->logits = (float *)cism__alloc_floats(hp->vocab, &failed);
    s->logits_cap = 1;
    s->tokens = (int32_t *)calloc((size_t)sh.n_ctx, sizeof(int32_t));
    if (!s->tokens) failed = 1;
    if (cism__dn_session_init(s)) failed = 1;
    if (params->act_stats && cism__act_stats_init(s, params->act_stats)) failed = 1;
    if (failed) {
        cism_session_free(s);
        return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_session_create: out of memory for logits");
    }
    if ((st = cism__work_ensure(&s->w, hp, s->n_batch, s->n_ctx)) != CISM_OK) {
        cism_session_free(s);
        return st;
    }
    *out = s;
    return CISM_OK;
}

cism_status cism_session_reset(cism_session *s) {
    cism__clear_error();
    if (!s) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_reset: session is NULL");
    cism__dn_reset(s);
    s->n_past = 0;
    s->logit_rows = 0;
    s->kv_hi = 0;
    s->kv_min_keep = 0;
    return CISM_OK;
}

/* 1 when a ring has overwritten a position the window of position n_keep
   needs (or a loaded state lacks them): [n_keep - window + 1, n_keep) must
   still be in the ring, whose intact positions are [kv_hi - ring, kv_hi). */
static int rewind_needs_replay(const cism_session *s, int32_t n_keep) {
    int64_t l;
    if (n_keep == 0) return 0;
    if (n_keep < s->kv_min_keep) return 1;
    for (l = 0; l < s->model->hp.n_layers; l++) {
        int64_t ring = s->kv[l].ring, w = s->model->layers[l].window, lo = n_keep - w + 1 > 0 ? n_keep - w + 1 : 0;
        if (ring && lo < s->kv_hi - ring) return 1;
    }
    return 0;
}

/* A rewind past what the rings keep: the kept tokens are evaluated again from
   position 0 (the same bits: one path per position), not cancellable, without
   progress calls. Costs the prefill of n_keep tokens (docs/SESSION_STATE.md). */
static cism_status replay_prefix(cism_session *s, int32_t n_keep) {
    int32_t *keep = (int32_t *)malloc((size_t)n_keep * sizeof(int32_t));
    cism_progress_callback progress = s->progress;
    void (*hook)(cism_session *, int64_t, void *) = s->chunk_hook;
    int logits_all = s->logits_all;
    cism_status st;
    if (!keep) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "out of memory for the %d tokens to keep", (int)n_keep);
    memcpy(keep, s->tokens, (size_t)n_keep * sizeof(int32_t));
    s->n_past = 0;
    s->kv_hi = 0;
    s->kv_min_keep = 0;
    if (s->dn) cism__dn_reset(s);
    s->progress = NULL;
    s->chunk_hook = NULL;
    s->logits_all = 0;
    s->replay = 1;
    st = cism__session_eval(s, keep, n_keep);
    s->replay = 0;
    s->progress = progress;
    s->chunk_hook = hook;
    s->logits_all = logits_all;
    s->logit_rows = 0;
    free(keep);
    if (st != CISM_OK) {
        s->n_past = 0;
        return st;
    }
    return CISM_OK;
}

cism_status cism_session_rewind(cism_session *s, int32_t n_keep) {
    cism__clear_error();
    if (!s) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_rewind: session is NULL");
    if (n_keep < 0 || n_keep > s->n_past)
        return cism__fail(CISM_ERR_INVALID_ARG, "cannot rewind to n_keep = %d tokens: the session holds %d (use 0..%d)", (int)n_keep,
                          (int)s->n_past, (int)s->n_past);
    if (rewind_needs_replay(s, n_keep)) return replay_prefix(s, n_keep);
    s->logit_rows = 0;
    if (s->dn) return cism__dn_rewind(s, n_keep); /* a checkpoint, then the tokens from it (deltanet.h) */
    s->n_past = n_keep;
    return CISM_OK;
}

cism_status cism_session_eval(cism_session *s, const int32_t *tokens, int32_t n_tokens) {
    cism__clear_error();
    if (s) cism__atomic_store(&s->cancel, 0);
    return cism__session_eval(s, tokens, n_tokens);
}

/* 1 if the n floats at v are all finite (the logits check after each eval: a
   pass over vocab floats per row, small next to the output head that wrote them). */
int cism__all_finite(const float *v, int64_t n) {
    int64_t i;
    uint32_t bad = 0;
    for (i = 0; i < n; i++) { /* exponent all ones: NaN or infinity (integer ops: vectorizes) */
        uint32_t u;
        memcpy(&u, &v[i], 4);
        bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    return !bad;
}

/* An eval cancelled after `done` of its tokens (whole chunks) were evaluated:
   those stay in the cache and the session looks as if the eval had been given
   only them, so continuing gives the same bits as an uninterrupted run. The
   logits are those of the last kept token: the rows the chunks wrote with
   LOGITS_ALL; otherwise the chunks before the last write none, so that token
   is evaluated again alone (same K/V bits, forward.c is batch-independent),
   not cancellable. Nothing kept: the session is as before the eval (a
   cancelled chunk stops before the output head, so the old logits are intact). */
static cism_status keep_completed(cism_session *s, const int32_t *tokens, int32_t n_tokens, int64_t done,
                                  int32_t prev_rows, int32_t prev_last) {
    if (done == 0) {
        s->logit_rows = prev_rows;
        s->last_n = prev_last;
    } else if (s->logits_all) {
        s->logit_rows = (int32_t)done;
        s->last_n = (int32_t)done;
    } else {
        cism_status st;
        int nonfinite = 0;
        /* recurrent state (deltanet.h) is already past that token: back to before it */
        st = s->dn ? cism__dn_rewind(s, s->n_past - 1) : CISM_OK;
        if (st != CISM_OK) { /* out of memory for the scratch, or the session was reset: cism_last_error says */
            s->logit_rows = 0;
            return st;
        }
        if (!s->dn) s->n_past -= 1;
        s->replay = 1;
        if (st == CISM_OK) st = cism__forward(s, tokens + done - 1, 1, 1, 0, &nonfinite);
        s->replay = 0;
        if (st == CISM_OK) cism__dn_commit(s, 1);
        s->n_past += 1;
        if (st != CISM_OK) { /* cannot happen (replay is not cancellable); never leave stale logits */
            s->logit_rows = 0;
            return cism__fail(CISM_ERR_INTERNAL, "evaluation cancelled, and recomputing the last kept token failed");
        }
        s->logit_rows = 1;
        s->last_n = (int32_t)done;
    }
    return cism__fail(CISM_ERR_CANCELLED, "evaluation cancelled: %lld of its %d tokens were evaluated and are kept (n_past is %d)",
                      (long long)done, (int)n_tokens, (int)s->n_past);
}

cism_status cism__session_check_tokens(const cism_session *s, const int32_t *tokens, int32_t n_tokens) {
    int64_t i, vocab = s->model->hp.vocab;
    if (n_tokens <= 0 || !tokens)
        return cism__fail(CISM_ERR_INVALID_ARG, "nothing to evaluate: give at least one token (got %d%s)", (int)n_tokens,
                          tokens ? "" : ", tokens is NULL");
    for (i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= vocab)
            return cism__fail(CISM_ERR_TOKEN_RANGE, "token %d at index %lld is outside the vocabulary (0..%lld)",
                              (int)tokens[i], (long long)i, (long long)(vocab - 1));
    if ((int64_t)n_tokens > s->n_ctx - s->n_past)
        return cism__fail(CISM_ERR_CONTEXT_FULL, "context full: %d tokens evaluated, %d more do not fit in %lld positions; "
                          "use a longer context (n_ctx), fewer tokens, or rewind/reset the session",
                          (int)s->n_past, (int)n_tokens, (long long)s->n_ctx);
    return CISM_OK;
}

cism_status cism__session_logits_reserve(cism_session *s, int64_t n) {
    float *p;
    if (n <= s->logits_cap) return CISM_OK;
    p = (float *)realloc(s->logits, (size_t)n * (size_t)s->model->hp.vocab * sizeof(float));
    if (!p) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "out of memory for %lld rows of logits", (long long)n);
    s->logits = p;
    s->logits_cap = n;
    return CISM_OK;
}

cism_status cism__session_eval(cism_session *s, const int32_t *tokens, int32_t n_tokens) {
    const cism__hparams *hp;
    int64_t done;
    int32_t prev_rows, prev_last, n_past0;
    int nonfinite = 0;
    cism_status st;
    if (!s) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_eval: session is NULL");
    if ((st = cism__session_check_tokens(s, tokens, n_tokens)) != CISM_OK) return st;
    hp = &s->model->hp;
    if (s->logits_all && (st = cism__session_logits_reserve(s, n_tokens)) != CISM_OK) return st;
    if ((st = cism__work_ensure(&s->w, hp, s->n_batch, s->n_ctx)) != CISM_OK) return st;
    prev_rows = s->logit_rows;
    prev_last = s->last_n;
    n_past0 = s->n_past;
    s->logit_rows = 0;
    for (done = 0; done < n_tokens; done += s->n_batch) {
        int64_t nt = n_tokens - done < s->n_batch ? n_tokens - done : s->n_batch;
        int last = done + nt == n_tokens;
        int rows_out = s->logits_all ? (int)nt : (last ? 1 : 0);
        st = cism__forward(s, tokens + done, nt, rows_out, s->logits_all ? done : 0, &nonfinite);
        if (st == CISM_ERR_CANCELLED) return keep_completed(s, tokens, n_tokens, done, prev_rows, prev_last);
        if (st != CISM_OK) return st;
        memcpy(s->tokens + s->n_past, tokens + done, (size_t)nt * sizeof(int32_t));
        cism__dn_commit(s, nt);
        s->n_past += (int32_t)nt;
        if (s->chunk_hook) s->chunk_hook(s, done + nt, s->chunk_hook_data);
        if (s->progress && s->progress(s->progress_data, (int32_t)(done + nt), n_tokens) != 0 && !last)
            return keep_completed(s, tokens, n_tokens, done + nt, prev_rows, prev_last);
    }
    if (nonfinite || !cism__all_finite(s->logits, (int64_t)(s->logits_all ? n_tokens : 1) * hp->vocab)) {
        if (s->dn) cism__dn_rewind(s, n_past0); /* the recurrent state too */
        s->n_past = n_past0; /* as every failed eval: the session stays where it was (its old logits are overwritten) */
        s->last_n = 0;
        return cism__fail(CISM_ERR_FORMAT,
                          "the model produced NaN or infinite %s: its weights are probably corrupt or overflowing; load it "
                          "with check_weights=1 (CISM_PARAM_CHECK_WEIGHTS) to find the tensor, or convert the checkpoint "
                          "again (e.g. with --dtype f32); the tokens were not kept",
                          nonfinite ? "activations" : "logits");
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
    } else if (s->logit_rows < s->last_n) { /* no LOGITS_ALL, or cism_session_trim kept only the last row */
        return cism__fail(CISM_ERR_STATE, "logits of row %d are not kept; set CISM_PARAM_LOGITS_ALL to keep every row"
                          " (cism_session_trim keeps only the last)", (int)index);
    } else {
        *logits = s->logits + (int64_t)index * vocab;
    }
    if (n_vocab) *n_vocab = (int32_t)vocab;
    return CISM_OK;
}

int32_t cism_session_n_past(const cism_session *s) { return s ? s->n_past : 0; }

cism_status cism_session_tokens(const cism_session *s, int32_t *tokens, int32_t capacity, int32_t *n_tokens) {
    cism__clear_error();
    if (!s || !n_tokens) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_tokens: NULL argument");
    *n_tokens = s->n_past;
    if (capacity < s->n_past || (!tokens && s->n_past > 0))
        return cism__fail(CISM_ERR_BUFFER_SMALL, "the session holds %d tokens; the buffer has room for %d", (int)s->n_past,
                          (int)(capacity > 0 ? capacity : 0));
    if (s->n_past > 0) memcpy(tokens, s->tokens, (size_t)s->n_past * sizeof(int32_t));
    return CISM_OK;
}
int32_t cism_session_n_ctx(const cism_session *s) { return s ? (int32_t)s->n_ctx : 0; }

cism_status cism_session_set_progress_callback(cism_session *s, cism_progress_callback callback, void *user_data) {
    cism__clear_error();
    if (!s) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_set_progress_callback: session is NULL");
    s->progress = callback;
    s->progress_data = user_data;
    return CISM_OK;
}

cism_status cism_session_set_logits_all(cism_session *s, int32_t on) {
    cism__clear_error();
    if (!s) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_set_logits_all: session is NULL");
    s->logits_all = on != 0;
    return CISM_OK;
}

void cism_session_cancel(cism_session *s) {
    if (s) cism__atomic_store(&s->cancel, 1);
}
