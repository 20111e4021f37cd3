/* layer_shortconv.c - LFM2's gated short-convolution token mixer.
 *
 * On the normed input h of each position (transformers' Lfm2ShortConv):
 *   B, C, x = in_proj h (+ bias)          three blocks of dim rows of one matrix
 *   u = B * x                             the convolution's input, kept in the session
 *   v = conv_bias + sum_k w[k] u[t - (K-1) + k]   depthwise (per channel), causal, K = conv_kernel
 *   y = out_proj (C * v) (+ bias), added to the residual stream.
 * It takes the first three stages of a layer (forward.h):
 *   ST_QKV: by chunks of channels: the rows of B, C and x of those channels
 *           (three row ranges of in_proj, all rows of the pass), u into the
 *           session's conv cache, then v and C * v; the convolution is per
 *           channel, so a unit needs no other unit's channels;
 *   ST_ATT: nothing;
 *   ST_WO:  out_proj + bias + residual by row chunks.
 *
 * The conv cache keeps u of every position (like the KV cache, in the KV type):
 * [conv layer][n_ctx][dim]. The taps of a position are read back from it, both
 * those of earlier evals and those this pass just wrote (f16 caches round
 * every tap the same way), so a position's bits do not depend on how the
 * tokens were split into evals or batched with other sessions, and a rewind
 * to any n_keep <= n_past needs nothing: the inputs before n_keep are intact
 * (docs/SESSION_STATE.md). */
#include "layer_shortconv.h"
#include "../core/error.h"

#include <stdlib.h>
#include <string.h>

/* channels per block of the convolution (its taps are widened from f16 per block) */
#define CONV_BLOCK 64

static int64_t elem_bytes(int32_t kv_type) { return kv_type == CISM_DTYPE_F32 ? 4 : 2; }

int64_t cism__shortconv_cache_bytes(const cism__hparams *hp, int64_t n_ctx, int64_t elem) {
    return hp->n_shortconv * n_ctx * hp->dim * elem;
}

cism_status cism__shortconv_session_init(cism_session *s) {
    const cism__hparams *hp = &s->model->hp;
    int64_t elem = elem_bytes(s->kv_type), bytes;
    if (hp->n_shortconv == 0) return CISM_OK;
    if ((uint64_t)hp->n_shortconv * (uint64_t)s->n_ctx * (uint64_t)hp->dim > (uint64_t)SIZE_MAX / (uint64_t)elem)
        return cism__fail(CISM_ERR_OUT_OF_MEMORY, "the conv cache for %lld positions does not fit in memory", (long long)s->n_ctx);
    bytes = cism__shortconv_cache_bytes(hp, s->n_ctx, elem);
    s->conv_cache = malloc((size_t)bytes);
    if (!s->conv_cache)
        return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cannot allocate the conv cache (%.1f MiB for %lld positions); use a smaller "
                          "context length", (double)bytes / 1048576.0, (long long)s->n_ctx);
    return CISM_OK;
}

/* Position pos of conv slot `slot` (dim elements in the KV type). */
static uint8_t *cache_row(const cism_session *s, int64_t slot, int64_t pos) {
    uint64_t e = ((uint64_t)slot * (uint64_t)s->n_ctx + (uint64_t)pos) * (uint64_t)s->model->hp.dim;
    return (uint8_t *)s->conv_cache + e * (uint64_t)elem_bytes(s->kv_type);
}

uint64_t cism__shortconv_state_bytes(const cism_session *s, int64_t n_past) {
    const cism__hparams *hp = &s->model->hp;
    return (uint64_t)hp->n_shortconv * (uint64_t)n_past * (uint64_t)hp->dim * (uint64_t)elem_bytes(s->kv_type);
}

/* per conv layer in layer order, positions 0..n_past-1 */
void cism__shortconv_state_write(const cism_session *s, int64_t n_past, uint8_t *dst) {
    uint64_t n = (uint64_t)n_past * (uint64_t)s->model->hp.dim * (uint64_t)elem_bytes(s->kv_type);
    int64_t slot;
    if (n == 0) return;
    for (slot = 0; slot < s->model->hp.n_shortconv; slot++, dst += n) memcpy(dst, cache_row(s, slot, 0), (size_t)n);
}

void cism__shortconv_state_read(cism_session *s, int64_t n_past, const uint8_t *src) {
    uint64_t n = (uint64_t)n_past * (uint64_t)s->model->hp.dim * (uint64_t)elem_bytes(s->kv_type);
    int64_t slot;
    if (n == 0) return;
    for (slot = 0; slot < s->model->hp.n_shortconv; slot++, src += n) memcpy(cache_row(s, slot, 0), src, (size_t)n);
}

int64_t cism__shortconv_begin(fwd *f, int64_t l, int kind) {
    cism__work *w = f->w;
    const cism__hparams *hp = &f->m->hp;
    int64_t dim = hp->dim;
    if (kind == ST_QKV) return cism__fwd_units(dim, f->c_dim); /* forward.c normed and quantized the input */
    if (kind == ST_ATT) return 0;
    /* ST_WO: C * v (in the B block of w->conv) is out_proj's input */
    cism__fwd_quantize_rows(w, w->conv, 3 * dim, dim, f->t_lo, f->nt);
    if (hp->n_heads * hp->head_dim == dim) /* the statistics' slot has the attention output's width */
        cism__act_stats_add(f->seqs[0].s, l, CISM__AS_WO, w->conv, 3 * dim, f->t_lo, f->nt);
    return cism__fwd_units(dim, f->c_dim);
}

static void add_bias(float *y, int64_t ld, const float *b, int64_t t0, int64_t t1, int64_t r0, int64_t r1) {
    int64_t t, r;
    for (t = t0; t < t1; t++)
        for (r = r0; r < r1; r++) y[t * ld + r] += b[r];
}

/* Channels [c0, c1) of every seq's rows: B, C, x; u = B * x into the cache;
   C * v into the B block for the rows past their seq's first needed row. */
static void conv_unit(fwd *f, const cism__layer *L, int64_t c0, int64_t c1) {
    cism__work *w = f->w;
    const cism__hparams *hp = &f->m->hp;
    const cism__kernels *k = w->k;
    cism__row_to_f32_fn widen = k->row_to_f32[CISM_DTYPE_F16] ? k->row_to_f32[CISM_DTYPE_F16]
                                                              : cism__kernels_scalar()->row_to_f32[CISM_DTYPE_F16];
    int64_t dim = hp->dim, ld = 3 * dim, K = hp->conv_kernel, nt = f->nt, t_lo = f->t_lo, q, t, c, j, b0;
    float taps[CISM__CONV_MAX_KERNEL][CONV_BLOCK];
    cism__fwd_linear(w, &L->conv_in, w->xb, dim, cism__fwd_qrow(w, 0), w->conv, ld, nt, c0, c1);
    cism__fwd_linear(w, &L->conv_in, w->xb, dim, cism__fwd_qrow(w, 0), w->conv, ld, nt, 2 * dim + c0, 2 * dim + c1);
    cism__fwd_linear(w, &L->conv_in, w->xb + t_lo * dim, dim, cism__fwd_qrow(w, t_lo), w->conv + t_lo * ld, ld, nt - t_lo,
                     dim + c0, dim + c1);
    if (L->conv_in_bias) {
        add_bias(w->conv, ld, L->conv_in_bias, 0, nt, c0, c1);
        add_bias(w->conv, ld, L->conv_in_bias, 0, nt, 2 * dim + c0, 2 * dim + c1);
        add_bias(w->conv, ld, L->conv_in_bias, t_lo, nt, dim + c0, dim + c1);
    }
    for (q = 0; q < f->n_seqs; q++) {
        const cism__seq *sq = &f->seqs[q];
        const cism_session *s = sq->s;
        int64_t lo = cism__fwd_seq_lo(f, sq);
        for (t = 0; t < sq->nt; t++) { /* u = B * x of every row into the cache */
            float *r = w->conv + (sq->row0 + t) * ld;
            uint8_t *dst = cache_row(s, L->conv_slot, s->n_past + t) + c0 * elem_bytes(s->kv_type);
            for (c = c0; c < c1; c++) r[c] *= r[2 * dim + c];
            if (s->kv_type == CISM_DTYPE_F32) memcpy(dst, r + c0, (size_t)(c1 - c0) * sizeof(float));
            else k->f32_to_f16(r + c0, (uint16_t *)(void *)dst, c1 - c0);
        }
        for (t = lo; t < sq->nt; t++) { /* v from the cache's taps, then C * v */
            float *r = w->conv + (sq->row0 + t) * ld;
            int64_t pos = s->n_past + t;
            for (b0 = c0; b0 < c1; b0 += CONV_BLOCK) {
                int64_t n = c1 - b0 < CONV_BLOCK ? c1 - b0 : CONV_BLOCK, first = K - 1 - pos > 0 ? K - 1 - pos : 0;
                for (j = first; j < K; j++) { /* tap j: position pos - (K - 1) + j (before 0: zero, skipped) */
                    const uint8_t *src = cache_row(s, L->conv_slot, pos - (K - 1) + j) + b0 * elem_bytes(s->kv_type);
                    if (s->kv_type == CISM_DTYPE_F32) memcpy(taps[j], src, (size_t)n * sizeof(float));
                    else widen(src, taps[j], n);
                }
                for (c = 0; c < n; c++) {
                    const float *wc = L->conv_w + (b0 + c) * K;
                    float v = L->conv_b ? L->conv_b[b0 + c] : 0.0f;
                    for (j = first; j < K; j++) v += wc[j] * taps[j][c];
                    r[b0 + c] = r[dim + b0 + c] * v;
                }
            }
        }
    }
}

void cism__shortconv_unit(fwd *f, int64_t l, int kind, int64_t u) {
    cism__work *w = f->w;
    const cism__layer *L = &f->m->layers[l];
    int64_t dim = f->m->hp.dim, r0, r1, t;
    cism__fwd_row_range(u, f->c_dim, dim, &r0, &r1);
    if (kind == ST_QKV) {
        conv_unit(f, L, r0, r1);
        return;
    }
    /* ST_WO: x += out_proj (C * v) + bias on rows [t_lo, nt) */
    cism__fwd_linear(w, &L->conv_out, w->conv + f->t_lo * 3 * dim, 3 * dim, cism__fwd_qrow(w, f->t_lo), w->ob + f->t_lo * dim,
                     dim, f->nt - f->t_lo, r0, r1);
    for (t = f->t_lo; t < f->nt; t++) {
        float *o = w->ob + t * dim, *x = w->x + t * dim;
        int64_t r;
        if (L->conv_out_bias)
            for (r = r0; r < r1; r++) o[r] += L->conv_out_bias[r];
        for (r = r0; r < r1; r++) x[r] += o[r];
    }
}
