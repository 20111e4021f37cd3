/* forward.c - the Llama-family transformer forward pass.
 *
 * One staged region of the session's pool per evaluated chunk of tokens
 * (threadpool.h). Five stages per layer, each a set of independent units;
 * the thread that completes a stage prepares the next (begin) and publishes it:
 *   begin: shared RMSNorm of the chunk | units: Q/K/V by head, with bias,
 *          q/k-norm, RoPE and the KV-cache write fused in
 *   units: attention by (block of tokens, query heads of one KV head)
 *   units: output projection + residual, by row chunks
 *   begin: RMSNorm | units: gate/up (the two matrices that share the input) +
 *          SwiGLU, by row chunks
 *   units: down projection + residual, by row chunks
 * then begin: final norm | units: the output head by chunks of vocabulary rows.
 * With CISM_PARAM_ACT_QUANT, each begin also quantizes the stage's matmul input
 * (the norm output, the attention output, the SwiGLU output) once into int8
 * blocks (s->xq) that every unit of the stage reads; with CISM_PARAM_ACT_STATS
 * it adds the input's squares to the session's statistics (act_stats.c).
 * Every matmul in a unit takes all tokens of the chunk for its weight rows (the
 * kernels tile several tokens per weight load), so prefill streams each weight
 * row once per token block rather than once per token.
 *
 * Determinism: each output element is computed by exactly one unit, by a
 * kernel whose arithmetic for that element does not depend on the unit
 * boundaries or the token count (kernels.h), so results do not depend on the
 * number of threads, on which thread took a unit, or on batching.
 *
 * The last layer only needs K and V for the cache from the rows whose logits
 * are not wanted, so attention, output projection and FFN run there only for
 * the rows that produce logits (none for a chunk that is not the last). */
#include "session.h"
#include "../core/error.h"
#include "../kernels/quant.h"

#include <math.h>
#include <string.h>

typedef struct fwd {
    cism_session *s;
    int64_t nt, pos0;
    int rows_out;
    float *logits;
    int64_t c_dim, c_ffn, c_voc;  /* rows per unit of the row-split stages */
    int64_t t_lo, hpu;            /* set by begin: first row needed, heads per attention unit */
    int stop;                     /* set by begin when the eval was cancelled */
} fwd;

enum { ST_QKV, ST_ATT, ST_WO, ST_UP, ST_DOWN, ST_PER_LAYER };

/* Rows per kernel call when outlier channels are added (a multiple of 16, the
   interleaved groups; their weights stay in L2 between the two passes). */
#define CISM__OUTLIER_ROWS 256

/* Every matmul goes through here. xq (NULL unless CISM_PARAM_ACT_QUANT) holds
   the same nt input rows quantized (rows xq_row_bytes apart): packed weights
   then take the integer-dot kernels. */
static void linear_rows(const cism_session *s, const cism__weight *w, const float *x, int64_t ldx, const uint8_t *xq,
                        float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    const cism__kernels *k = s->k;
    int64_t a, b;
    if (r1 <= r0 || nt <= 0) return;
    if (xq) {
        cism__matmul_a8_fn mq = k->matmul_a8[w->dtype] ? k->matmul_a8[w->dtype] : cism__kernels_scalar()->matmul_a8[w->dtype];
        if (mq) {
            if (!s->act_outliers) {
                mq(w->data, w->row_bytes, w->cols, xq, s->xq_row_bytes, y, ldy, nt, r0, r1);
                return;
            }
            /* with outlier channels: their products right after the kernel's
               pass over the same rows, while those weights are still in cache */
            for (a = r0; a < r1; a = b) {
                b = a + CISM__OUTLIER_ROWS < r1 ? a + CISM__OUTLIER_ROWS : r1;
                mq(w->data, w->row_bytes, w->cols, xq, s->xq_row_bytes, y, ldy, nt, a, b);
                cism__act8_add_outliers(w->dtype, w->data, w->row_bytes, xq, s->xq_row_bytes, y, ldy, nt, a, b);
            }
            return;
        }
    }
    k->matmul[w->dtype](w->data, w->row_bytes, w->cols, x, ldx, y, ldy, nt, r0, r1);
}

/* The quantized copy of input row t (NULL on the float path). */
static const uint8_t *qrow(const cism_session *s, int64_t t) {
    return s->act_quant ? s->xq + t * s->xq_row_bytes : NULL;
}

/* Rows [t0, t1) of a stage's matmul input into s->xq (run once, in begin). */
static void quantize_rows(cism_session *s, const float *x, int64_t ld, int64_t cols, int64_t t0, int64_t t1) {
    void (*quant)(const float *, int64_t, void *) = s->k->quantize_act ? s->k->quantize_act : cism__kernels_scalar()->quantize_act;
    int64_t t, i;
    if (!s->act_quant) return;
    for (t = t0; t < t1; t++) {
        const float *r = x + t * ld;
        /* the int8 blocks would turn NaN/Inf into 0 and hide them: flag the
           session instead (cism__session_eval fails the eval) */
        if (!s->nonfinite)
            for (i = 0; i < cols; i++)
                if (!isfinite(r[i])) { s->nonfinite = 1; break; }
        if (s->act_outliers) cism__act8_quantize_split(quant, r, cols, s->xq + t * s->xq_row_bytes, s->xq_row_bytes, s->xo_tmp);
        else quant(r, cols, s->xq + t * s->xq_row_bytes);
    }
}

/* Rows per work unit of a row-split stage: multiples of 16 (whole register
   tiles), about 8 units per thread so a slow thread's share can be shared;
   one unit with a single thread. */
static int64_t chunk_rows(int64_t rows, int nth) {
    int64_t c = (rows + 8 * nth - 1) / (8 * nth);
    if (nth == 1) return rows;
    c = (c + 15) / 16 * 16;
    return c < 16 ? 16 : c;
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

/* Q rows of tokens [t_lo, nt) (the others are not needed in the last layer),
   K and V rows of every token into the cache. */
static void qkv_unit(fwd *f, int64_t l, int64_t u, int ith, const float *xb, int64_t t_lo) {
    cism_session *s = f->s;
    const cism_model *m = s->model;
    const cism__hparams *hp = &m->hp;
    const cism__layer *L = &m->layers[l];
    const cism__kernels *k = s->k;
    int64_t hd = hp->head_dim, half = hd / 2, nt = f->nt, dim = hp->dim;
    int64_t q_rows = hp->n_heads * hd, t;
    float *tmp = s->tmp + (int64_t)ith * s->n_batch * hd;
    if (u < hp->n_heads) { /* query head u */
        int64_t r0 = u * hd;
        linear_rows(s, &L->wq, xb + t_lo * dim, dim, qrow(s, t_lo), s->q + t_lo * q_rows, q_rows, nt - t_lo, r0, r0 + hd);
        for (t = t_lo; t < nt; t++) {
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
        linear_rows(s, &sub, xb, dim, qrow(s, 0), tmp, hd, nt, 0, hd);
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

/* Attention units: blocks of up to CISM__ATT_TOKENS tokens x heads_per_unit
   query heads of one KV head. With enough units to go round, a unit takes all
   the query heads of a KV head (the K/V rows are read and widened once for
   them); otherwise (decode) one head each, so the threads stay balanced. The
   kernel gives the same bits either way. */
static int64_t att_heads_per_unit(const cism__hparams *hp, int64_t rows, int nth) {
    int64_t blocks = (rows + CISM__ATT_TOKENS - 1) / CISM__ATT_TOKENS;
    return blocks * hp->n_kv_heads >= 4 * (int64_t)nth ? hp->n_heads / hp->n_kv_heads : 1;
}

static void attention_unit(fwd *f, int64_t l, int64_t unit, int ith, int64_t t_lo, int64_t hpu) {
    cism_session *s = f->s;
    const cism__hparams *hp = &s->model->hp;
    int64_t hd = hp->head_dim, q_rows = hp->n_heads * hd, group = hp->n_heads / hp->n_kv_heads;
    int64_t units_per_block = hp->n_heads / hpu;
    int64_t t = t_lo + (unit / units_per_block) * CISM__ATT_TOKENS, h = (unit % units_per_block) * hpu, kvh = h / group;
    int64_t n_tok = f->nt - t < CISM__ATT_TOKENS ? f->nt - t : CISM__ATT_TOKENS;
    float scale = (float)(1.0 / sqrt((double)hd));
    s->k->attention(s->q + t * q_rows + h * hd, q_rows, s->att + t * q_rows + h * hd, q_rows, n_tok, hpu,
                    kv_ptr(s, s->k_cache, l, kvh, 0), kv_ptr(s, s->v_cache, l, kvh, 0), s->kv_type, f->pos0 + t + 1, hd,
                    scale, s->scores + (int64_t)ith * s->scores_per_thread);
}

/* rows [r0, r1) of y = W in, then x += y on them, for tokens [t_lo, nt) */
static void proj_residual(fwd *f, const cism__weight *w, const float *in, int64_t ld_in, int64_t r0, int64_t r1, int64_t t_lo) {
    cism_session *s = f->s;
    int64_t dim = s->model->hp.dim, t, r;
    linear_rows(s, w, in + t_lo * ld_in, ld_in, qrow(s, t_lo), s->ob + t_lo * dim, dim, f->nt - t_lo, r0, r1);
    for (t = t_lo; t < f->nt; t++)
        for (r = r0; r < r1; r++) s->x[t * dim + r] += s->ob[t * dim + r];
}

static void ffn_up_rows(fwd *f, const cism__layer *L, const float *xb, int64_t r0, int64_t r1, int64_t t_lo) {
    cism_session *s = f->s;
    int64_t ffn = s->model->hp.ffn_dim, dim = s->model->hp.dim, t;
    linear_rows(s, &L->gate, xb + t_lo * dim, dim, qrow(s, t_lo), s->hb + t_lo * ffn, ffn, f->nt - t_lo, r0, r1);
    linear_rows(s, &L->up, xb + t_lo * dim, dim, qrow(s, t_lo), s->hb2 + t_lo * ffn, ffn, f->nt - t_lo, r0, r1);
    for (t = t_lo; t < f->nt; t++) s->k->silu_mul(s->hb + t * ffn + r0, s->hb2 + t * ffn + r0, r1 - r0);
}

static void norm_rows(const cism__kernels *k, float *out, const float *x, const float *w, int64_t t0, int64_t t1,
                      int64_t dim, float eps) {
    int64_t t;
    for (t = t0; t < t1; t++) k->rmsnorm(out + t * dim, x + t * dim, w, dim, eps);
}

static int64_t units_of(int64_t rows, int64_t chunk) { return (rows + chunk - 1) / chunk; }

/* stage s: layer s / ST_PER_LAYER, kind s % ST_PER_LAYER; then the output head */
static int64_t fwd_begin(void *arg, int32_t stage) {
    fwd *f = (fwd *)arg;
    cism_session *s = f->s;
    const cism_model *m = s->model;
    const cism__hparams *hp = &m->hp;
    int64_t l = stage / ST_PER_LAYER, kind = stage % ST_PER_LAYER, nt = f->nt, dim = hp->dim;
    float eps = (float)hp->norm_eps;
    if (l == hp->n_layers && kind == 0 && f->rows_out > 0) { /* final norm, output head */
        norm_rows(s->k, s->xb, s->x, m->output_norm, nt - f->rows_out, nt, dim, eps);
        quantize_rows(s, s->xb, dim, dim, nt - f->rows_out, nt);
        cism__act_stats_add(s, l, 0, s->xb, dim, nt - f->rows_out, nt);
        return units_of(hp->vocab, f->c_voc);
    }
    if (l >= hp->n_layers) return -1;
    f->t_lo = l + 1 < hp->n_layers ? 0 : nt - f->rows_out;
    if (kind != ST_QKV && f->t_lo == nt) return 0;  /* last layer, no logits wanted: K/V were all it had to give */
    switch (kind) {
    case ST_QKV:
        if (l > 0 && !s->replay && cism__atomic_load(&s->cancel)) {
            f->stop = 1;
            return -1;
        }
        norm_rows(s->k, s->xb, s->x, m->layers[l].attn_norm, 0, nt, dim, eps);
        quantize_rows(s, s->xb, dim, dim, 0, nt);
        cism__act_stats_add(s, l, CISM__AS_ATTN, s->xb, dim, 0, nt);
        return hp->n_heads + 2 * hp->n_kv_heads;
    case ST_ATT:
        f->hpu = att_heads_per_unit(hp, nt - f->t_lo, cism__pool_size(s->pool));
        return units_of(nt - f->t_lo, CISM__ATT_TOKENS) * (hp->n_heads / f->hpu);
    case ST_UP:
        norm_rows(s->k, s->xb, s->x, m->layers[l].ffn_norm, f->t_lo, nt, dim, eps);
        quantize_rows(s, s->xb, dim, dim, f->t_lo, nt);
        cism__act_stats_add(s, l, CISM__AS_FFN, s->xb, dim, f->t_lo, nt);
        return units_of(hp->ffn_dim, f->c_ffn);
    case ST_WO:
        quantize_rows(s, s->att, hp->n_heads * hp->head_dim, hp->n_heads * hp->head_dim, f->t_lo, nt);
        cism__act_stats_add(s, l, CISM__AS_WO, s->att, hp->n_heads * hp->head_dim, f->t_lo, nt);
        return units_of(dim, f->c_dim);
    default: /* ST_DOWN */
        quantize_rows(s, s->hb, hp->ffn_dim, hp->ffn_dim, f->t_lo, nt);
        cism__act_stats_add(s, l, CISM__AS_DOWN, s->hb, hp->ffn_dim, f->t_lo, nt);
        return units_of(dim, f->c_dim);
    }
}

static void row_range(int64_t u, int64_t chunk, int64_t rows, int64_t *r0, int64_t *r1) {
    *r0 = u * chunk;
    *r1 = *r0 + chunk < rows ? *r0 + chunk : rows;
}

static void fwd_unit(void *arg, int32_t stage, int64_t u, int ith, int nth) {
    fwd *f = (fwd *)arg;
    cism_session *s = f->s;
    const cism_model *m = s->model;
    const cism__hparams *hp = &m->hp;
    int64_t l = stage / ST_PER_LAYER, r0, r1;
    (void)nth;
    if (l == hp->n_layers) {
        int64_t t0 = f->nt - f->rows_out;
        row_range(u, f->c_voc, hp->vocab, &r0, &r1);
        linear_rows(s, &m->output, s->xb + t0 * hp->dim, hp->dim, qrow(s, t0), f->logits, hp->vocab, f->nt - t0, r0, r1);
        return;
    }
    switch (stage % ST_PER_LAYER) {
    case ST_QKV: qkv_unit(f, l, u, ith, s->xb, f->t_lo); break;
    case ST_ATT: attention_unit(f, l, u, ith, f->t_lo, f->hpu); break;
    case ST_WO:
        row_range(u, f->c_dim, hp->dim, &r0, &r1);
        proj_residual(f, &m->layers[l].wo, s->att, hp->n_heads * hp->head_dim, r0, r1, f->t_lo);
        break;
    case ST_UP:
        row_range(u, f->c_ffn, hp->ffn_dim, &r0, &r1);
        ffn_up_rows(f, &m->layers[l], s->xb, r0, r1, f->t_lo);
        break;
    default: /* ST_DOWN */
        row_range(u, f->c_dim, hp->dim, &r0, &r1);
        proj_residual(f, &m->layers[l].down, s->hb, hp->ffn_dim, r0, r1, f->t_lo);
        break;
    }
}

static const cism__stages g_forward_stages = {fwd_begin, fwd_unit};

cism_status cism__forward(cism_session *s, const int32_t *tokens, int64_t nt, int rows_out, int64_t out_row0) {
    const cism_model *m = s->model;
    const cism__hparams *hp = &m->hp;
    int64_t half = hp->head_dim / 2, t, i;
    fwd f;
    /* embeddings */
    for (t = 0; t < nt; t++) {
        const uint8_t *row = (const uint8_t *)m->tok_embd.data + (uint64_t)tokens[t] * m->tok_embd.row_bytes;
        if (s->k->row_to_f32[m->tok_embd.dtype]) s->k->row_to_f32[m->tok_embd.dtype](row, s->x + t * hp->dim, hp->dim);
        else cism__matrix_row_f32(m->tok_embd.dtype, m->tok_embd.data, m->tok_embd.row_bytes, hp->dim, tokens[t], s->x + t * hp->dim);
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
    f.c_dim = chunk_rows(hp->dim, cism__pool_size(s->pool));
    f.c_ffn = chunk_rows(hp->ffn_dim, cism__pool_size(s->pool));
    f.c_voc = chunk_rows(hp->vocab, cism__pool_size(s->pool));
    f.t_lo = 0;
    f.hpu = 1;
    f.stop = 0;
    cism__pool_run_stages(s->pool, &g_forward_stages, &f);
    return f.stop ? cism__fail(CISM_ERR_CANCELLED, "evaluation cancelled") : CISM_OK;
}
