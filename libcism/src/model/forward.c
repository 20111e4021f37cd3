/* forward.c - the Llama-family transformer forward pass.
 *
 * One parallel region per evaluated chunk: every pool thread runs
 * forward_worker, splitting each stage by output rows (or by attention heads),
 * with five barriers per layer:
 *   norm (each thread its own copy) + Q/K/V by head, with bias, q/k-norm, RoPE
 *   and the KV-cache write fused in                     | barrier
 *   attention by (token, head)                          | barrier
 *   output projection + residual by rows                | barrier
 *   norm (own copy) + gate/up + SwiGLU by rows          | barrier
 *   down projection + residual by rows                  | barrier
 * Each output element is computed by exactly one thread in a fixed order, so
 * results do not depend on the number of threads. */
#include "session.h"
#include "../core/error.h"

#include <math.h>
#include <string.h>

typedef struct fwd {
    cism_session *s;
    int64_t nt, pos0;
    int rows_out;
    float *logits;
    volatile int32_t stop;
} fwd;

static void linear_rows(const cism__kernels *k, const cism__weight *w, const float *x, int64_t ldx, float *y,
                        int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    if (r1 > r0) k->matmul[w->dtype](w->data, w->row_bytes, w->cols, x, ldx, y, ldy, nt, r0, r1);
}

/* Per-head RMSNorm of Qwen3 (weights of head_dim). */
static void head_norms(const cism__kernels *k, float *v, int64_t n_heads, int64_t hd, const float *w, float eps) {
    int64_t h;
    for (h = 0; h < n_heads; h++) k->rmsnorm(v + h * hd, v + h * hd, w, hd, eps);
}

static void store_kv(cism_session *s, void *cache, const float *src, int64_t n) {
    if (s->kv_type == CISM_DTYPE_F32) memcpy(cache, src, (size_t)n * sizeof(float));
    else s->k->f32_to_f16(src, (uint16_t *)cache, n);
}

static void *kv_ptr(cism_session *s, void *cache, int64_t layer, int64_t head, int64_t pos) {
    uint64_t off = (uint64_t)layer * s->kv_layer_stride + (uint64_t)head * s->kv_head_stride +
                   (uint64_t)pos * (uint64_t)s->model->hp.head_dim;
    return (uint8_t *)cache + off * (s->kv_type == CISM_DTYPE_F32 ? 4u : 2u);
}

static void qkv_stage(fwd *f, int64_t l, int ith, int nth, const float *xb) {
    cism_session *s = f->s;
    const cism_model *m = s->model;
    const cism__hparams *hp = &m->hp;
    const cism__layer *L = &m->layers[l];
    const cism__kernels *k = s->k;
    int64_t hd = hp->head_dim, half = hd / 2, nt = f->nt, dim = hp->dim;
    int64_t q_rows = hp->n_heads * hd;
    int64_t units = hp->n_heads + 2 * hp->n_kv_heads, u0, u1, u, t;
    float *tmp = s->tmp + (int64_t)ith * s->n_batch * hd;
    cism__split(units, ith, nth, 1, &u0, &u1);
    for (u = u0; u < u1; u++) {
        if (u < hp->n_heads) { /* query head u */
            int64_t r0 = u * hd;
            linear_rows(k, &L->wq, xb, dim, s->q, q_rows, nt, r0, r0 + hd);
            for (t = 0; t < nt; t++) {
                float *v = s->q + t * q_rows + r0;
                int64_t i;
                if (L->q_bias) for (i = 0; i < hd; i++) v[i] += L->q_bias[r0 + i];
                if (L->q_norm) head_norms(k, v, 1, hd, L->q_norm, (float)hp->norm_eps);
                k->rope(v, 1, hd, s->rope_cos + t * half, s->rope_sin + t * half);
            }
        } else { /* key or value head */
            int is_k = u < hp->n_heads + hp->n_kv_heads;
            int64_t h = is_k ? u - hp->n_heads : u - hp->n_heads - hp->n_kv_heads;
            const cism__weight *w = is_k ? &L->wk : &L->wv;
            const float *bias = is_k ? L->k_bias : L->v_bias;
            cism__weight sub = *w;
            sub.data = (const uint8_t *)w->data + (uint64_t)(h * hd) * w->row_bytes;
            linear_rows(k, &sub, xb, dim, tmp, hd, nt, 0, hd);
            for (t = 0; t < nt; t++) {
                float *v = tmp + t * hd;
                int64_t i;
                if (bias) for (i = 0; i < hd; i++) v[i] += bias[h * hd + i];
                if (is_k) {
                    if (L->k_norm) head_norms(k, v, 1, hd, L->k_norm, (float)hp->norm_eps);
                    k->rope(v, 1, hd, s->rope_cos + t * half, s->rope_sin + t * half);
                }
                store_kv(s, kv_ptr(s, is_k ? s->k_cache : s->v_cache, l, h, f->pos0 + t), v, hd);
            }
        }
    }
}

static void attention_stage(fwd *f, int64_t l, int ith, int nth) {
    cism_session *s = f->s;
    const cism__hparams *hp = &s->model->hp;
    int64_t hd = hp->head_dim, q_rows = hp->n_heads * hd, group = hp->n_heads / hp->n_kv_heads;
    int64_t tasks = f->nt * hp->n_heads, a0, a1, a;
    float *scores = s->scores + (int64_t)ith * s->n_ctx;
    float scale = (float)(1.0 / sqrt((double)hd));
    cism__split(tasks, ith, nth, 1, &a0, &a1);
    for (a = a0; a < a1; a++) {
        int64_t t = a / hp->n_heads, h = a % hp->n_heads, kvh = h / group;
        int64_t n_kv = f->pos0 + t + 1;
        s->k->attention(s->q + t * q_rows + h * hd, kv_ptr(s, s->k_cache, l, kvh, 0), kv_ptr(s, s->v_cache, l, kvh, 0),
                        s->kv_type, n_kv, hd, scale, scores, s->att + t * q_rows + h * hd);
    }
}

/* y = W x for this thread's rows, then x += y on those rows. */
static void proj_residual(fwd *f, const cism__weight *w, const float *in, int64_t ld_in, int ith, int nth) {
    cism_session *s = f->s;
    int64_t dim = s->model->hp.dim, r0, r1, t, r;
    cism__split(dim, ith, nth, 16, &r0, &r1);
    linear_rows(s->k, w, in, ld_in, s->ob, dim, f->nt, r0, r1);
    for (t = 0; t < f->nt; t++)
        for (r = r0; r < r1; r++) s->x[t * dim + r] += s->ob[t * dim + r];
}

static void ffn_up_stage(fwd *f, const cism__layer *L, int ith, int nth, const float *xb) {
    cism_session *s = f->s;
    int64_t ffn = s->model->hp.ffn_dim, dim = s->model->hp.dim, r0, r1, t;
    cism__split(ffn, ith, nth, 16, &r0, &r1);
    linear_rows(s->k, &L->gate, xb, dim, s->hb, ffn, f->nt, r0, r1);
    linear_rows(s->k, &L->up, xb, dim, s->hb2, ffn, f->nt, r0, r1);
    for (t = 0; t < f->nt; t++) s->k->silu_mul(s->hb + t * ffn + r0, s->hb2 + t * ffn + r0, r1 - r0);
}

static void norm_rows(const cism__kernels *k, float *out, const float *x, const float *w, int64_t t0, int64_t t1,
                      int64_t dim, float eps) {
    int64_t t;
    for (t = t0; t < t1; t++) k->rmsnorm(out + t * dim, x + t * dim, w, dim, eps);
}

static void forward_worker(void *arg, int ith, int nth) {
    fwd *f = (fwd *)arg;
    cism_session *s = f->s;
    const cism_model *m = s->model;
    const cism__hparams *hp = &m->hp;
    const cism__kernels *k = s->k;
    int64_t dim = hp->dim, nt = f->nt, l;
    float eps = (float)hp->norm_eps;
    float *xb = s->xb + (int64_t)ith * s->n_batch * dim;

    for (l = 0; l < hp->n_layers; l++) {
        const cism__layer *L = &m->layers[l];
        norm_rows(k, xb, s->x, L->attn_norm, 0, nt, dim, eps);
        qkv_stage(f, l, ith, nth, xb);
        cism__pool_barrier(s->pool);
        attention_stage(f, l, ith, nth);
        cism__pool_barrier(s->pool);
        proj_residual(f, &L->wo, s->att, hp->n_heads * hp->head_dim, ith, nth);
        cism__pool_barrier(s->pool);
        norm_rows(k, xb, s->x, L->ffn_norm, 0, nt, dim, eps);
        ffn_up_stage(f, L, ith, nth, xb);
        if (ith == 0) f->stop = cism__atomic_load(&s->cancel);
        cism__pool_barrier(s->pool);
        proj_residual(f, &L->down, s->hb, hp->ffn_dim, ith, nth);
        cism__pool_barrier(s->pool);
        if (f->stop) return;
    }
    if (f->rows_out > 0) {
        int64_t t0 = f->rows_out == 1 ? nt - 1 : 0, r0, r1;
        const cism__weight *out = &m->output;
        norm_rows(k, xb, s->x, m->output_norm, t0, nt, dim, eps);
        cism__split(hp->vocab, ith, nth, 16, &r0, &r1);
        linear_rows(k, out, xb + t0 * dim, dim, f->logits, hp->vocab, nt - t0, r0, r1);
    }
}

cism_status cism__forward(cism_session *s, const int32_t *tokens, int64_t nt, int rows_out, int64_t out_row0) {
    const cism_model *m = s->model;
    const cism__hparams *hp = &m->hp;
    int64_t half = hp->head_dim / 2, t, i;
    fwd f;
    /* embeddings */
    for (t = 0; t < nt; t++) {
        const uint8_t *row = (const uint8_t *)m->tok_embd.data + (uint64_t)tokens[t] * m->tok_embd.row_bytes;
        s->k->row_to_f32[m->tok_embd.dtype](row, s->x + t * hp->dim, hp->dim);
    }
    /* RoPE angles as Hugging Face computes them: float32 position * float32 frequency */
    for (t = 0; t < nt; t++) {
        float pos = (float)(s->n_past + t);
        for (i = 0; i < half; i++) {
            float angle = pos * m->rope_inv_freq[i];
            s->rope_cos[t * half + i] = (float)cos((double)angle);
            s->rope_sin[t * half + i] = (float)sin((double)angle);
        }
    }
    f.s = s;
    f.nt = nt;
    f.pos0 = s->n_past;
    f.rows_out = rows_out;
    f.logits = s->logits + out_row0 * hp->vocab;
    f.stop = 0;
    cism__pool_run(s->pool, forward_worker, &f);
    return f.stop ? cism__fail(CISM_ERR_CANCELLED, "evaluation cancelled") : CISM_OK;
}
