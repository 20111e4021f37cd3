/* forward.c - the Llama-family transformer forward pass.
 *
 * One staged region of the session's pool per evaluated chunk of tokens
 * (threadpool.h). Five stages per layer, each a set of independent units;
 * the thread that completes a stage prepares the next (begin) and publishes it:
 *   begin: shared RMSNorm of the chunk | units: Q/K/V by head, with bias,
 *          q/k-norm, RoPE and the KV-cache write fused in
 *   units: attention by (block of tokens, query heads of one KV head), over
 *          fixed splits of KV positions (split-KV: see attention_unit)
 *   units: output projection + residual, by row chunks
 *   begin: RMSNorm | units: gate/up (the two matrices that share the input) +
 *          SwiGLU, by row chunks
 *   units: down projection + residual, by row chunks
 * (a short-convolution layer, layer_shortconv.c, runs its own first three)
 * then begin: final norm | units: the output head by chunks of vocabulary rows.
 * With CISM_PARAM_ACT_QUANT, each stage's matmul input (the norm output, the
 * attention output, the SwiGLU output) is quantized once into int8 blocks
 * (s->xq) that every unit of the stage reads: in begin for few rows or one
 * thread, else by units of rows in a pool stage of its own before the stage's
 * units (pool_begin: each stage is two pool stages); with CISM_PARAM_ACT_STATS
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
 * A pass may carry several sessions' tokens (cism_batch, batch.c): their rows
 * share every matmul (each weight row is read once for all of them), and
 * attention units and KV writes are per session, over its own cache at its own
 * positions; a row's bits do not depend on the other rows.
 *
 * With one session, the last layer only needs K and V for the cache from the
 * rows whose logits are not wanted, so attention, output projection and FFN
 * run there only for the rows that produce logits (none for a chunk that is
 * not the last). With several, every row runs the whole last layer. */
#include "forward.h"
#include "layer_shortconv.h"
#include "deltanet.h"
#include "../core/error.h"
#include "../kernels/quant.h"
#include "../kernels/kv_quant.h"
#include "../kernels/outlier_runs.h"
#include "att_fold.h"

#include <math.h>
#include <string.h>

/* Rows per kernel call when outlier channels are added (a multiple of 16, the
   interleaved groups; their weights stay in L2 between the two passes). */
#define CISM__OUTLIER_ROWS 256

/* Every matmul goes through here. xq (NULL unless act_quant) holds the same nt
   input rows quantized (rows xq_row_bytes apart): packed weights then take the
   integer-dot kernels. */
void cism__fwd_linear(const cism__work *wk, const cism__weight *w, const float *x, int64_t ldx, const uint8_t *xq,
                        float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {
    const cism__kernels *k = wk->k;
    int64_t a, b;
    if (r1 <= r0 || nt <= 0) return;
    if (xq) {
        cism__matmul_a8_fn mq = k->matmul_a8[w->dtype] ? k->matmul_a8[w->dtype] : cism__kernels_scalar()->matmul_a8[w->dtype];
        if (mq) {
            if (!wk->act_outliers) {
                mq(w->data, w->row_bytes, w->cols, xq, wk->xq_row_bytes, y, ldy, nt, r0, r1);
                return;
            }
            /* with outlier channels: few tokens in the tier's fused entry, or
               their products right after the kernel's pass over the same
               rows, while those weights are still in cache */
            if (k->matmul_a8_outliers[w->dtype]) {
                k->matmul_a8_outliers[w->dtype](w->data, w->row_bytes, w->cols, xq, wk->xq_row_bytes, y, ldy, nt, r0, r1,
                                                wk->oruns);
                return;
            }
            if (nt <= CISM__GEMV_OUTL_TOKENS && k->gemv_a8_outliers[w->dtype]) {
                k->gemv_a8_outliers[w->dtype](w->data, w->row_bytes, w->cols, xq, wk->xq_row_bytes, y, ldy, nt, r0, r1);
                return;
            }
            for (a = r0; a < r1; a = b) {
                b = a + CISM__OUTLIER_ROWS < r1 ? a + CISM__OUTLIER_ROWS : r1;
                mq(w->data, w->row_bytes, w->cols, xq, wk->xq_row_bytes, y, ldy, nt, a, b);
                cism__act8_add_outliers(k, w->dtype, w->data, w->row_bytes, xq, wk->xq_row_bytes, y, ldy, nt, a, b);
            }
            return;
        }
    }
    /* a dtype a tier has no float kernel for (on x86: the packed formats other
       than q6/q5) takes the scalar tier's */
    (k->matmul[w->dtype] ? k->matmul[w->dtype] : cism__kernels_scalar()->matmul[w->dtype])(
        w->data, w->row_bytes, w->cols, x, ldx, y, ldy, nt, r0, r1);
}

/* The quantized copy of input row t (NULL on the float path). */
const uint8_t *cism__fwd_qrow(const cism__work *w, int64_t t) {
    return w->act_quant ? w->xq + t * w->xq_row_bytes : NULL;
}

/* Input row x (cols wide) into quantized row j; flags row `row` when x holds
   NaN/Inf (the int8 blocks would turn them into 0 and hide them). */
static void quantize_row(cism__work *w, const float *x, int64_t cols, int64_t j, int64_t row, int ith) {
    void (*quant)(const float *, int64_t, void *) = w->k->quantize_act ? w->k->quantize_act : cism__kernels_scalar()->quantize_act;
    if (w->act_outliers) { /* its block maxima show a NaN or infinity */
        if (cism__act8_quantize_split(w->k, x, cols, w->xq + j * w->xq_row_bytes, w->xq_row_bytes,
                                       w->xo_tmp + ith * w->xo_floats))
            w->bad[row] = 1;
        return;
    }
    if (!w->bad[row] && !cism__all_finite(x, cols)) w->bad[row] = 1;
    quant(x, cols, w->xq + j * w->xq_row_bytes);
}

/* Rows [t0, t1) of a stage's matmul input into w->xq (run once, in begin). */
void cism__fwd_quantize_rows(cism__work *w, const float *x, int64_t ld, int64_t cols, int64_t t0, int64_t t1) {
    int64_t t;
    if (!w->act_quant) return;
    w->oruns->xq = NULL; /* runs of the rows being rewritten: stale */
    for (t = t0; t < t1; t++) quantize_row(w, x + t * ld, cols, t, t, 0);
}

/* Rows of a matmul input at which begin leaves their quantization to parallel
   units (the pool stage before the matmul's; fewer: serially, in begin). */
#define CISM__QUANT_PAR_ROWS 16

/* begin's quantization of a matmul input (as cism__fwd_quantize_rows): with
   several threads and enough rows, recorded for the quantization stage. Each
   row is quantized alone, so the bits do not depend on the split. */
static void quantize_input(fwd *f, const cism__weight *wt, const float *x, int64_t ld, int64_t cols, int64_t t0,
                           int64_t t1) {
    const int nth = cism__pool_size(f->w->pool);
    if (!f->w->act_quant) return;
    f->q_w = wt;
    f->q_x = x;
    f->q_ld = ld;
    f->q_cols = cols;
    f->q_t0 = t0;
    f->q_t1 = t1;
    if (nth == 1 || t1 - t0 < CISM__QUANT_PAR_ROWS) {
        cism__fwd_quantize_rows(f->w, x, ld, cols, t0, t1);
        return;
    }
    f->q_chunk = (t1 - t0 + 4 * nth - 1) / (4 * nth);
}

/* Rows per work unit of a row-split stage: multiples of 16 (whole register
   tiles), about 8 units per thread so a slow thread's share can be shared;
   one unit with a single thread. */
int64_t cism__fwd_chunk_rows(int64_t rows, int nth) {
    int64_t c = (rows + 8 * nth - 1) / (8 * nth);
    if (nth == 1) return rows;
    c = (c + 15) / 16 * 16;
    return c < 16 ? 16 : c;
}

/* Per-head RMSNorm of Qwen3 (weights of head_dim). */
void cism__fwd_head_norms(const cism__kernels *k, float *v, int64_t n_heads, int64_t hd, const float *w, float eps) {
    int64_t h;
    for (h = 0; h < n_heads; h++) k->rmsnorm(v + h * hd, v + h * hd, w, hd, eps);
}

/* A quantized row goes through the one scalar quantizer (kv_quant.c): the
   cache holds the same bytes whatever the tier. */
static void store_row(const cism__work *w, int32_t type, void *row, const float *src, int64_t n, int is_k,
                      const float *dir) {
    if (type == CISM_DTYPE_F32) memcpy(row, src, (size_t)n * sizeof(float));
    else if (type == CISM_DTYPE_F16) w->k->f32_to_f16(src, (uint16_t *)row, n);
    else cism__kv_quantize_row(type, src, n, (uint8_t *)row, is_k, dir);
}

/* K or V row of (layer, head, pos) into the cache, and into its ring copy.
   With a rotated cache (s->kv_rot) src has been rotated by the caller; a
   rotated key row is rounded along the layer's query direction when the file
   has one (it is stored in the rotated frame). */
static void store_kv(const cism__work *w, const cism_session *s, void *cache, int64_t layer, int64_t head, int64_t pos,
                     const float *src) {
    int64_t hd = s->model->hp.head_dim;
    const int is_k = cache != s->v_cache;
    const int32_t type = is_k ? s->kv_type : s->kv_type_v;
    const float *qdir = s->model->layers[layer].k_qdir;
    const float *dir = is_k && s->kv_rot && qdir ? qdir + head * hd : NULL;
    void *copy = cism__kv_row_copy(s, cache, layer, head, pos);
    store_row(w, type, cism__kv_row(s, cache, layer, head, pos), src, hd, is_k, dir);
    if (copy) store_row(w, type, copy, src, hd, is_k, dir);
}

/* RoPE of row t on the layer's table (none on a NoPE layer): the first
   rope_dim dimensions of the head rotate, the others pass (partial RoPE). */
static void rope_row(const cism__work *w, const cism__hparams *hp, const cism__layer *L, float *v, int64_t t) {
    int64_t half = hp->rope_dim / 2, off;
    if (L->rope_table < 0) return;
    off = (L->rope_table * w->n_rows + t) * half;
    w->k->rope(v, 1, hp->rope_dim, w->rope_cos + off, w->rope_sin + off);
}

/* Q rows of rows [t_lo, nt) (the others are not needed in the last layer),
   K and V rows of every row into its session's cache. */
static void qkv_unit(fwd *f, int64_t l, int64_t u, int ith, const float *xb, int64_t t_lo) {
    cism__work *w = f->w;
    const cism__hparams *hp = &f->m->hp;
    const cism__layer *L = &f->m->layers[l];
    const cism__kernels *k = w->k;
    int64_t hd = hp->head_dim, nt = f->nt, dim = hp->dim;
    int64_t q_rows = hp->n_heads * hd, t, i, q;
    float *tmp = w->tmp + (int64_t)ith * w->n_rows * hd;
    if (u < hp->n_heads) { /* query head u */
        int64_t r0 = u * hd;
        cism__fwd_linear(w, &L->wq, xb + t_lo * dim, dim, cism__fwd_qrow(w, t_lo), w->q + t_lo * q_rows, q_rows, nt - t_lo, r0, r0 + hd);
        if (L->wg.data) /* the output gate's rows of this head (applied in attention_unit) */
            cism__fwd_linear(w, &L->wg, xb + t_lo * dim, dim, cism__fwd_qrow(w, t_lo), w->mix + t_lo * q_rows, q_rows, nt - t_lo, r0, r0 + hd);
        for (q = 0; q < f->n_seqs; q++) {
            const cism__seq *sq = &f->seqs[q];
            const int64_t end = sq->row0 + sq->nt;
            for (t = sq->row0 > t_lo ? sq->row0 : t_lo; t < end; t++) {
                float *v = w->q + t * q_rows + r0;
                if (L->q_bias) for (i = 0; i < hd; i++) v[i] += L->q_bias[r0 + i];
                if (L->q_norm) cism__fwd_head_norms(k, v, 1, hd, L->q_norm, (float)hp->norm_eps);
                rope_row(w, hp, L, v, t);
                cism__act_stats_query(sq->s, l, u, v);
                if (sq->s->kv_rot) cism__kv_hadamard(v, hd); /* as the keys: q.k is unchanged */
            }
        }
    } else { /* key or value head */
        int is_k = u < hp->n_heads + hp->n_kv_heads;
        int64_t h = is_k ? u - hp->n_heads : u - hp->n_heads - hp->n_kv_heads;
        const cism__weight *wt = is_k ? &L->wk : &L->wv;
        const float *bias = is_k ? L->k_bias : L->v_bias;
        cism__weight sub = *wt;
        sub.data = (const uint8_t *)wt->data + (uint64_t)(h * hd) * wt->row_bytes;
        cism__fwd_linear(w, &sub, xb, dim, cism__fwd_qrow(w, 0), tmp, hd, nt, 0, hd);
        for (q = 0; q < f->n_seqs; q++) {
            const cism__seq *sq = &f->seqs[q];
            for (t = sq->row0; t < sq->row0 + sq->nt; t++) {
                float *v = tmp + t * hd;
                if (bias) for (i = 0; i < hd; i++) v[i] += bias[h * hd + i];
                if (is_k) {
                    if (L->k_norm) cism__fwd_head_norms(k, v, 1, hd, L->k_norm, (float)hp->norm_eps);
                    rope_row(w, hp, L, v, t);
                    cism__act_stats_key(sq->s, l, h, v);
                    /* a quantized cache stores k - offset: every score of a query moves by the same
                       q.offset, which the softmax cancels; the quantizer sees a centred row */
                    if (L->k_offset && cism__kv_is_quant(sq->s->kv_type))
                        for (i = 0; i < hd; i++) v[i] -= L->k_offset[h * hd + i];
                }
                if (sq->s->kv_rot) cism__kv_hadamard(v, hd); /* K after RoPE, V: rotated before quantizing */
                store_kv(w, sq->s, is_k ? sq->s->k_cache : sq->s->v_cache, l, h, sq->s->n_past + t - sq->row0, v);
            }
        }
    }
}

/* Attention units (split-KV): the KV positions of a layer are cut into fixed
   splits [j * CISM__ATT_SPLIT, (j + 1) * CISM__ATT_SPLIT) of absolute
   positions; a query's result is the combination, in split order, of the
   partial results (kernels.h cism__attention_split_fn) of the splits that its
   range (causal, or its sliding window) meets, each range intersected with its
   split. Two ways to run that, with the same bits for every row:
   - in-unit (prefill): a unit is a block of up to CISM__ATT_TOKENS of a seq's
     rows x heads_per_unit query heads of one KV head, and folds its splits
     one after the other into the output rows;
   - split units (a seq of up to CISM__ATT_TOKENS rows whose range spans
     several splits, while the partial slots last: decode, short verifies,
     batches): a unit is one split x heads_per_unit heads; the partial results
     go to w->att_part and the begin of the next stage folds them (combine).
   The partial of a (query, split) is the same kernel call either way and the
   fold is one function in one order, so neither the thread count, the chunking
   nor the batch changes a bit. With enough work to go round, a unit takes all
   the query heads of a KV head (the K/V rows are read and widened once for
   them); otherwise one head each, so the threads stay balanced. */
static int64_t att_heads_per_unit(const cism__hparams *hp, int64_t blocks, int nth) {
    return blocks * hp->n_kv_heads >= 4 * (int64_t)nth ? hp->n_heads / hp->n_kv_heads : 1;
}

/* Rows of seq q the current layer's attention and later stages compute. */
int64_t cism__fwd_seq_lo(const fwd *f, const cism__seq *sq) {
    return f->t_lo > sq->row0 ? f->t_lo - sq->row0 : 0;
}

/* A rotated cache holds H v: the attention output (linear in V) comes out
   rotated; H is its own inverse. n_tok rows from row, heads h..h+hpu. */
static void unrotate_rows(fwd *f, const cism_session *s, int64_t row, int64_t n_tok, int64_t h, int64_t hpu) {
    const cism__hparams *hp = &f->m->hp;
    int64_t q_rows = hp->n_heads * hp->head_dim, t, i;
    if (!s->kv_rot) return;
    for (t = row; t < row + n_tok; t++)
        for (i = h; i < h + hpu; i++) cism__kv_hadamard(f->w->att + t * q_rows + i * hp->head_dim, hp->head_dim);
}

/* Output gate (Qwen3.5): att *= sigmoid(gate) on n_tok rows from row, heads h..h+hpu. */
static void gate_rows(fwd *f, int64_t row, int64_t n_tok, int64_t h, int64_t hpu) {
    const cism__hparams *hp = &f->m->hp;
    int64_t q_rows = hp->n_heads * hp->head_dim, t, i;
    for (t = row; t < row + n_tok; t++) {
        float *a = f->w->att + t * q_rows + h * hp->head_dim;
        const float *g = f->w->mix + t * q_rows + h * hp->head_dim;
        for (i = 0; i < hpu * hp->head_dim; i++) a[i] *= 1.0f / (1.0f + expf(-g[i]));
    }
}

/* The splits that the ranges of queries at positions [p0, p1] meet: [*j0, *j1]. */
static void att_split_range(int64_t window, int64_t p0, int64_t p1, int64_t *j0, int64_t *j1) {
    int64_t first = window > 0 && p0 + 1 > window ? p0 + 1 - window : 0;
    *j0 = first / CISM__ATT_SPLIT;
    *j1 = p1 / CISM__ATT_SPLIT;
}

/* The partial results of split j for n_tok queries at positions p0.. (rows of
   q from qrow, heads h..h+hpu of KV head kvh), into out (ldo) and ml (ldm).
   hn, jn: the heads and split this thread is likely to take next (jn < 0:
   none), whose K/V rows the kernel may prefetch meanwhile. */
static void att_split_part(fwd *f, const cism__seq *sq, int64_t l, int64_t qrow, int64_t n_tok, int64_t h, int64_t hpu,
                           int64_t p0, int64_t j, int64_t hn, int64_t jn, float *out, int64_t ldo, float *ml, int64_t ldm,
                           float *scores) {
    cism__work *w = f->w;
    const cism__hparams *hp = &f->m->hp;
    const cism_session *s = sq->s;
    int64_t hd = hp->head_dim, q_rows = hp->n_heads * hd, grp = hp->n_heads / hp->n_kv_heads, kvh = h / grp;
    int64_t window = f->m->layers[l].window, s0 = j * CISM__ATT_SPLIT, s1 = s0 + CISM__ATT_SPLIT, i, e;
    if (window == 0) { /* query a: positions [s0, min(s1, p0 + a + 1)) */
        cism__att_next nx = {NULL, NULL, 0};
        e = p0 + n_tok < s1 ? p0 + n_tok : s1;
        if (jn >= 0) {
            int64_t n0 = jn * CISM__ATT_SPLIT, n1 = n0 + CISM__ATT_SPLIT;
            nx.k = cism__kv_row(s, s->k_cache, l, hn / grp, n0);
            nx.v = cism__kv_row(s, s->v_cache, l, hn / grp, n0);
            nx.n_kv = (p0 + n_tok < n1 ? p0 + n_tok : n1) - n0;
        }
        w->k->attention_split(w->q + qrow * q_rows + h * hd, q_rows, out, ldo, ml, ldm, n_tok, hpu,
                              cism__kv_row(s, s->k_cache, l, kvh, s0), cism__kv_row(s, s->v_cache, l, kvh, s0), s->kv_type,
                              s->kv_type_v, e - s0, p0 + 1 - s0, hd, hp->attn_scale, scores, nx.n_kv > 0 ? &nx : NULL);
        return;
    }
    /* sliding window: each query over its window's part of the split, one per call */
    for (i = 0; i < n_tok; i++) {
        int64_t pos = p0 + i, first = pos + 1 > window ? pos + 1 - window : 0;
        int64_t lo = first > s0 ? first : s0, hi = pos + 1 < s1 ? pos + 1 : s1, g;
        if (hi <= lo) {
            for (g = 0; g < hpu; g++) {
                ml[i * ldm + 2 * g] = -INFINITY;
                ml[i * ldm + 2 * g + 1] = 0.0f;
            }
            continue;
        }
        w->k->attention_split(w->q + (qrow + i) * q_rows + h * hd, q_rows, out + i * ldo, ldo, ml + i * ldm, ldm, 1, hpu,
                              cism__kv_row(s, s->k_cache, l, kvh, lo), cism__kv_row(s, s->v_cache, l, kvh, lo), s->kv_type,
                              s->kv_type_v, hi - lo, hi - lo, hd, hp->attn_scale, scores, NULL);
    }
}

/* Rotation and output gate of rows [row, row + n_tok), heads h..h+hpu, once their attention is complete. */
static void att_epilogue(fwd *f, int64_t l, const cism__seq *sq, int64_t row, int64_t n_tok, int64_t h, int64_t hpu) {
    unrotate_rows(f, sq->s, row, n_tok, h, hpu);
    if (f->m->layers[l].wg.data) gate_rows(f, row, n_tok, h, hpu);
}

static void attention_unit(fwd *f, int64_t l, int64_t unit, int ith, int64_t hpu) {
    cism__work *w = f->w;
    const cism__hparams *hp = &f->m->hp;
    int64_t hd = hp->head_dim, q_rows = hp->n_heads * hd, n_hg = hp->n_heads / hpu;
    int64_t lo = 0, hi = f->n_seqs - 1, t, h, n_tok, row, p0, j, j0, j1, a, g;
    const int64_t window = f->m->layers[l].window;
    const cism__seq *sq;
    float *scores = w->scores + (int64_t)ith * w->scores_per_thread;
    float *part, *pml, *run;
    while (lo < hi) { /* the last seq whose first unit is <= unit */
        int64_t mid = (lo + hi + 1) / 2;
        if (f->seqs[mid].att_u0 <= unit) lo = mid;
        else hi = mid - 1;
    }
    sq = &f->seqs[lo];
    unit -= sq->att_u0;
    if (sq->att_spl) { /* one split of the seq's rows: partials to the slots, combined in the next begin */
        /* head group major: a thread's run of units walks one KV head's splits
           in order, so its K and V reads are two sequential streams */
        int64_t js = unit % sq->att_spl, nr = sq->nt - cism__fwd_seq_lo(f, sq);
        int64_t un = unit + 1 < sq->att_spl * n_hg ? unit + 1 : -1; /* the next unit of this thread's share */
        int64_t slot;
        h = (unit / sq->att_spl) * hpu;
        slot = sq->att_p0 + js * nr * hp->n_heads + h;
        t = cism__fwd_seq_lo(f, sq);
        att_split_part(f, sq, l, sq->row0 + t, nr, h, hpu, sq->s->n_past + t, sq->att_j0 + js, (un / sq->att_spl) * hpu,
                       un < 0 ? -1 : sq->att_j0 + un % sq->att_spl, w->att_part + slot * hd,
                       hp->n_heads * hd, w->att_part + w->att_part_slots * hd + slot * 2, hp->n_heads * 2, scores);
        return;
    }
    h = (unit % n_hg) * hpu;
    t = cism__fwd_seq_lo(f, sq) + (unit / n_hg) * CISM__ATT_TOKENS;
    n_tok = sq->nt - t < CISM__ATT_TOKENS ? sq->nt - t : CISM__ATT_TOKENS;
    row = sq->row0 + t;
    p0 = sq->s->n_past + t;
    /* scratch: scores of one split, then a partial result, its (max, sum) pairs, the running pairs */
    part = scores + CISM__ATT_TOKENS * hpu * CISM__ATT_SPLIT;
    pml = part + CISM__ATT_TOKENS * hpu * hd;
    run = pml + CISM__ATT_TOKENS * hpu * 2;
    for (a = 0; a < n_tok * hpu; a++) run[2 * a] = run[2 * a + 1] = 0.0f;
    att_split_range(window, p0, p0 + n_tok - 1, &j0, &j1);
    for (j = j0; j <= j1; j++) {
        att_split_part(f, sq, l, row, n_tok, h, hpu, p0, j, h, j < j1 ? j + 1 : -1, part, hpu * hd, pml, hpu * 2, scores);
        for (a = 0; a < n_tok; a++)
            for (g = 0; g < hpu; g++)
                cism__att_fold(run + 2 * (a * hpu + g), w->att + (row + a) * q_rows + (h + g) * hd, pml + 2 * (a * hpu + g),
                         part + (a * hpu + g) * hd, hd);
    }
    for (a = 0; a < n_tok; a++)
        for (g = 0; g < hpu; g++) cism__att_finish(run + 2 * (a * hpu + g), w->att + (row + a) * q_rows + (h + g) * hd, hd);
    att_epilogue(f, l, sq, row, n_tok, h, hpu);
}

/* The combine of the seqs with split units (begin of the stage after
   attention): per row and head, the splits' partials in split order. */
static void attention_combine(fwd *f, int64_t l) {
    cism__work *w = f->w;
    const cism__hparams *hp = &f->m->hp;
    int64_t hd = hp->head_dim, q_rows = hp->n_heads * hd, q, t, h, js;
    const float *ml = w->att_part + w->att_part_slots * hd;
    for (q = 0; q < f->n_seqs; q++) {
        const cism__seq *sq = &f->seqs[q];
        int64_t t0 = cism__fwd_seq_lo(f, sq), nr = sq->nt - t0;
        if (!sq->att_spl) continue;
        for (t = 0; t < nr; t++)
            for (h = 0; h < hp->n_heads; h++) {
                float run[2] = {0.0f, 0.0f}, *O = w->att + (sq->row0 + t0 + t) * q_rows + h * hd;
                for (js = 0; js < sq->att_spl; js++) {
                    int64_t slot = sq->att_p0 + (js * nr + t) * hp->n_heads + h;
                    cism__att_fold(run, O, ml + slot * 2, w->att_part + slot * hd, hd);
                }
                cism__att_finish(run, O, hd);
            }
        att_epilogue(f, l, sq, sq->row0 + t0, nr, 0, hp->n_heads);
    }
}

/* rows [r0, r1) of y = W in, then x += y on them, for rows [t_lo, nt); with
   post norms the add waits for the whole row (post_residual) */
void cism__fwd_proj_residual(fwd *f, const cism__weight *wt, const float *in, int64_t ld_in, int64_t r0, int64_t r1, int64_t t_lo) {
    cism__work *w = f->w;
    int64_t dim = f->m->hp.dim, t, r;
    cism__fwd_linear(w, wt, in + t_lo * ld_in, ld_in, cism__fwd_qrow(w, t_lo), w->ob + t_lo * dim, dim, f->nt - t_lo, r0, r1);
    if (f->m->hp.post_norms) return;
    for (t = t_lo; t < f->nt; t++)
        for (r = r0; r < r1; r++) w->x[t * dim + r] += w->ob[t * dim + r];
}

/* Post norms (Gemma 3): x += RMSNorm(ob) on rows [t0, t1), once the stage
   that wrote ob has completed every row. */
static void post_residual(fwd *f, const float *norm, int64_t t0, int64_t t1) {
    cism__work *w = f->w;
    int64_t dim = f->m->hp.dim, t, r;
    for (t = t0; t < t1; t++) {
        float *o = w->ob + t * dim, *x = w->x + t * dim;
        w->k->rmsnorm(o, o, norm, dim, (float)f->m->hp.norm_eps);
        for (r = 0; r < dim; r++) x[r] += o[r];
    }
}

static void ffn_up_rows(fwd *f, const cism__layer *L, const float *xb, int64_t r0, int64_t r1, int64_t t_lo) {
    cism__work *w = f->w;
    int64_t ffn = f->m->hp.ffn_dim, dim = f->m->hp.dim, t;
    cism__fwd_linear(w, &L->gate, xb + t_lo * dim, dim, cism__fwd_qrow(w, t_lo), w->hb + t_lo * ffn, ffn, f->nt - t_lo, r0, r1);
    cism__fwd_linear(w, &L->up, xb + t_lo * dim, dim, cism__fwd_qrow(w, t_lo), w->hb2 + t_lo * ffn, ffn, f->nt - t_lo, r0, r1);
    if (f->m->hp.ffn_act == CISM__FFN_GELU_TANH)
        for (t = t_lo; t < f->nt; t++) w->k->gelu_tanh_mul(w->hb + t * ffn + r0, w->hb2 + t * ffn + r0, r1 - r0);
    else
        for (t = t_lo; t < f->nt; t++) w->k->silu_mul(w->hb + t * ffn + r0, w->hb2 + t * ffn + r0, r1 - r0);
}

static void norm_rows(const cism__kernels *k, float *out, const float *x, const float *w, int64_t t0, int64_t t1,
                      int64_t dim, float eps) {
    int64_t t;
    for (t = t0; t < t1; t++) k->rmsnorm(out + t * dim, x + t * dim, w, dim, eps);
}

int64_t cism__fwd_units(int64_t rows, int64_t chunk) { return (rows + chunk - 1) / chunk; }

/* The final norm of each seq's logits rows, packed into xb (and xq) rows
   out0.. in seq order; the output head's units then take them all at once. */
static void head_inputs(fwd *f) {
    cism__work *w = f->w;
    const cism__hparams *hp = &f->m->hp;
    int64_t dim = hp->dim, q, t;
    for (q = 0; q < f->n_seqs; q++) {
        const cism__seq *sq = &f->seqs[q];
        for (t = 0; t < sq->rows_out; t++) {
            int64_t row = sq->row0 + sq->nt - sq->rows_out + t, j = sq->out0 + t;
            w->k->rmsnorm(w->xb + j * dim, w->x + row * dim, f->m->output_norm, dim, (float)hp->norm_eps);
            if (w->act_quant) quantize_row(w, w->xb + j * dim, dim, j, row, 0);
        }
    }
    cism__act_stats_add(f->seqs[0].s, hp->n_layers, 0, w->xb, dim, 0, f->rows_out);
}

/* Marks the seqs whose cancel flag is set; 1 when none is left running. */
static int check_cancel(fwd *f) {
    int64_t q, running = 0;
    for (q = 0; q < f->n_seqs; q++) {
        cism__seq *sq = &f->seqs[q];
        if (!sq->stop && cism__atomic_load(&sq->s->cancel)) sq->stop = 1;
        running += !sq->stop;
    }
    return running == 0;
}

/* Attention units of layer l's rows needed, per seq from att_u0: split units
   for a seq of up to CISM__ATT_TOKENS rows over several splits while the
   partial slots last, else in-unit blocks. */
static int64_t attention_units(fwd *f, int64_t l) {
    const cism__hparams *hp = &f->m->hp;
    int64_t q, work = 0, units = 0, slots = 0;
    for (q = 0; q < f->n_seqs; q++) {
        cism__seq *sq = &f->seqs[q];
        int64_t t0 = cism__fwd_seq_lo(f, sq), nr = sq->nt - t0, j0, j1;
        att_split_range(f->m->layers[l].window, sq->s->n_past + t0, sq->s->n_past + sq->nt - 1, &j0, &j1);
        sq->att_spl = 0;
        if (nr > 0 && nr <= CISM__ATT_TOKENS && j1 > j0 && slots + nr * hp->n_heads * (j1 - j0 + 1) <= f->w->att_part_slots) {
            sq->att_spl = j1 - j0 + 1;
            sq->att_j0 = j0;
            sq->att_p0 = slots;
            slots += nr * hp->n_heads * sq->att_spl;
            work += sq->att_spl;
        } else work += cism__fwd_units(nr, CISM__ATT_TOKENS);
    }
    f->hpu = att_heads_per_unit(hp, work, cism__pool_size(f->w->pool));
    for (q = 0; q < f->n_seqs; q++) {
        cism__seq *sq = &f->seqs[q];
        sq->att_u0 = units;
        units += (sq->att_spl ? sq->att_spl : cism__fwd_units(sq->nt - cism__fwd_seq_lo(f, sq), CISM__ATT_TOKENS)) *
                 (hp->n_heads / f->hpu);
    }
    return units;
}

/* stage s: layer s / ST_PER_LAYER, kind s % ST_PER_LAYER; then the output head.
   Stage inputs go to act stats of seqs[0]'s session (a batch refuses sessions
   that collect them). */
static int64_t fwd_begin(void *arg, int32_t stage) {
    fwd *f = (fwd *)arg;
    cism__work *w = f->w;
    const cism_model *m = f->m;
    const cism__hparams *hp = &m->hp;
    cism_session *s0 = f->seqs[0].s;
    int64_t l = stage / ST_PER_LAYER, kind = stage % ST_PER_LAYER, nt = f->nt, dim = hp->dim;
    float eps = (float)hp->norm_eps;
    if (hp->post_norms && kind == ST_QKV && l > 0 && l <= hp->n_layers) /* the previous layer's MLP output */
        post_residual(f, m->layers[l - 1].post_ffn_norm, f->t_lo, nt);
    if (l == hp->n_layers && kind == 0 && f->rows_out > 0) { /* final norm, output head */
        head_inputs(f);
        return cism__fwd_units(hp->vocab, f->c_voc);
    }
    if (l >= hp->n_layers) return -1;
    f->t_lo = l + 1 < hp->n_layers || f->n_seqs > 1 ? 0 : nt - f->rows_out;
    if (m->layers[l].kind == CISM__LAYER_DELTANET && kind == ST_ATT) return cism__dn_begin(f, l, ST_ATT); /* every row: the state */
    if (kind != ST_QKV && f->t_lo == nt) return 0;  /* last layer, no logits wanted: K/V were all it had to give */
    if (m->layers[l].kind == CISM__LAYER_SHORTCONV && kind != ST_QKV && kind <= ST_WO) /* layer_shortconv.c */
        return cism__shortconv_begin(f, l, (int)kind);
    switch (kind) {
    case ST_QKV:
        if (l > 0 && !f->replay && check_cancel(f)) {
            f->stop = 1;
            return -1;
        }
        norm_rows(w->k, w->xb, w->x, m->layers[l].attn_norm, 0, nt, dim, eps);
        quantize_input(f, &m->layers[l].wq, w->xb, dim, dim, 0, nt);
        cism__act_stats_add(s0, l, CISM__AS_ATTN, w->xb, dim, 0, nt);
        if (m->layers[l].kind == CISM__LAYER_SHORTCONV) return cism__shortconv_begin(f, l, ST_QKV);
        if (m->layers[l].kind == CISM__LAYER_DELTANET) return cism__dn_begin(f, l, ST_QKV);
        return hp->n_heads + 2 * hp->n_kv_heads;
    case ST_ATT:
        return attention_units(f, l);
    case ST_UP:
        if (hp->post_norms) post_residual(f, m->layers[l].post_attn_norm, f->t_lo, nt);
        norm_rows(w->k, w->xb, w->x, m->layers[l].ffn_norm, f->t_lo, nt, dim, eps);
        quantize_input(f, &m->layers[l].gate, w->xb, dim, dim, f->t_lo, nt);
        cism__act_stats_add(s0, l, CISM__AS_FFN, w->xb, dim, f->t_lo, nt);
        return cism__fwd_units(hp->ffn_dim, f->c_ffn);
    case ST_WO:
        if (m->layers[l].kind == CISM__LAYER_DELTANET) return cism__dn_begin(f, l, ST_WO);
        attention_combine(f, l);
        quantize_input(f, &m->layers[l].wo, w->att, hp->n_heads * hp->head_dim, hp->n_heads * hp->head_dim, f->t_lo, nt);
        cism__act_stats_add(s0, l, CISM__AS_WO, w->att, hp->n_heads * hp->head_dim, f->t_lo, nt);
        return cism__fwd_units(dim, f->c_dim);
    default: /* ST_DOWN */
        quantize_input(f, &m->layers[l].down, w->hb, hp->ffn_dim, hp->ffn_dim, f->t_lo, nt);
        cism__act_stats_add(s0, l, CISM__AS_DOWN, w->hb, hp->ffn_dim, f->t_lo, nt);
        return cism__fwd_units(dim, f->c_dim);
    }
}

void cism__fwd_row_range(int64_t u, int64_t chunk, int64_t rows, int64_t *r0, int64_t *r1) {
    *r0 = u * chunk;
    *r1 = *r0 + chunk < rows ? *r0 + chunk : rows;
}

static void fwd_unit(void *arg, int32_t stage, int64_t u, int ith, int nth) {
    fwd *f = (fwd *)arg;
    cism__work *w = f->w;
    const cism_model *m = f->m;
    const cism__hparams *hp = &m->hp;
    int64_t l = stage / ST_PER_LAYER, r0, r1;
    (void)nth;
    if (l == hp->n_layers) {
        cism__fwd_row_range(u, f->c_voc, hp->vocab, &r0, &r1);
        cism__fwd_linear(w, &m->output, w->xb, hp->dim, cism__fwd_qrow(w, 0), f->logits, hp->vocab, f->rows_out, r0, r1);
        return;
    }
    if (m->layers[l].kind == CISM__LAYER_SHORTCONV && stage % ST_PER_LAYER <= ST_WO) {
        cism__shortconv_unit(f, l, stage % ST_PER_LAYER, u);
        return;
    }
    if (m->layers[l].kind == CISM__LAYER_DELTANET && stage % ST_PER_LAYER <= ST_WO) {
        cism__dn_unit(f, l, stage % ST_PER_LAYER, u, ith);
        return;
    }
    switch (stage % ST_PER_LAYER) {
    case ST_QKV: qkv_unit(f, l, u, ith, w->xb, f->t_lo); break;
    case ST_ATT: attention_unit(f, l, u, ith, f->hpu); break;
    case ST_WO:
        cism__fwd_row_range(u, f->c_dim, hp->dim, &r0, &r1);
        cism__fwd_proj_residual(f, &m->layers[l].wo, w->att, hp->n_heads * hp->head_dim, r0, r1, f->t_lo);
        break;
    case ST_UP:
        cism__fwd_row_range(u, f->c_ffn, hp->ffn_dim, &r0, &r1);
        ffn_up_rows(f, &m->layers[l], w->xb, r0, r1, f->t_lo);
        break;
    default: /* ST_DOWN */
        cism__fwd_row_range(u, f->c_dim, hp->dim, &r0, &r1);
        cism__fwd_proj_residual(f, &m->layers[l].down, w->hb, hp->ffn_dim, r0, r1, f->t_lo);
        break;
    }
}

/* Stage s of the forward pass is two pool stages: 2s runs its begin, then
   the quantization of the matmul input that begin left (quantize_input), in
   units of q_chunk rows; 2s + 1 runs its units. */
static int64_t pool_begin(void *arg, int32_t ps) {
    fwd *f = (fwd *)arg;
    cism__work *w = f->w;
    if (ps % 2) { /* the input is quantized: its outlier runs, listed once for every call (few rows: each call's own),
                     and their places in the stage's first matrix */
        if (w->act_outliers && f->q_t1 - f->q_t0 > CISM__GEMV_OUTL_TOKENS) {
            cism__oruns_build(w->oruns, w->xq + f->q_t0 * w->xq_row_bytes, w->xq_row_bytes, f->q_cols,
                              f->q_t1 - f->q_t0);
            if (w->k->oplaces_build && f->q_w && f->q_w->data)
                w->k->oplaces_build(w->oruns, f->q_w->dtype, f->q_w->data, f->q_w->row_bytes);
        }
        return f->units;
    }
    if (w->act_quant) w->oruns->xq = NULL;
    f->q_t0 = f->q_t1 = f->q_chunk = 0;
    f->q_w = NULL;
    f->units = fwd_begin(arg, ps / 2);
    if (f->units < 0) return -1;
    return f->q_chunk ? cism__fwd_units(f->q_t1 - f->q_t0, f->q_chunk) : 0;
}

static void pool_unit(void *arg, int32_t ps, int64_t u, int ith, int nth) {
    fwd *f = (fwd *)arg;
    int64_t t, t0, t1;
    if (ps % 2) {
        fwd_unit(arg, ps / 2, u, ith, nth);
        return;
    }
    cism__fwd_row_range(u, f->q_chunk, f->q_t1 - f->q_t0, &t0, &t1);
    for (t = f->q_t0 + t0; t < f->q_t0 + t1; t++) quantize_row(f->w, f->q_x + t * f->q_ld, f->q_cols, t, t, ith);
}

static const cism__stages g_forward_stages = {pool_begin, pool_unit};

cism_status cism__forward_seqs(cism__work *w, cism__seq *seqs, int64_t n_seqs, float *out, int replay) {
    const cism_model *m = seqs[0].s->model;
    const cism__hparams *hp = &m->hp;
    int64_t half = hp->rope_dim / 2, t, i, j, q, nt = 0, rows_out = 0;
    int nth = cism__pool_size(w->pool);
    fwd f;
    for (q = 0; q < n_seqs; q++) {
        cism__seq *sq = &seqs[q];
        sq->stop = 0;
        cism__dn_begin_pass(sq->s, sq->nt); /* DeltaNet checkpoints this pass overwrites */
        for (t = 0; t < sq->nt; t++) { /* embeddings, and RoPE angles as Hugging Face computes them:
                                          float32 position * float32 frequency */
            int64_t row = sq->row0 + t;
            int32_t tok = sq->tokens[t];
            const uint8_t *er = (const uint8_t *)m->tok_embd.data + (uint64_t)tok * m->tok_embd.row_bytes;
            float pos = (float)(sq->s->n_past + t);
            if (w->k->row_to_f32[m->tok_embd.dtype]) w->k->row_to_f32[m->tok_embd.dtype](er, w->x + row * hp->dim, hp->dim);
            else if (cism__kernels_scalar()->row_to_f32[m->tok_embd.dtype])
                cism__kernels_scalar()->row_to_f32[m->tok_embd.dtype](er, w->x + row * hp->dim, hp->dim);
            else cism__matrix_row_f32(m->tok_embd.dtype, m->tok_embd.data, m->tok_embd.row_bytes, hp->dim, tok, w->x + row * hp->dim);
            if (hp->embed_scale != 1.0f)
                for (i = 0; i < hp->dim; i++) w->x[row * hp->dim + i] *= hp->embed_scale;
            for (j = 0; j < m->n_rope_tables; j++)
                for (i = 0; i < half; i++) {
                    float angle = pos * m->rope_inv_freq[j][i];
                    w->rope_cos[(j * w->n_rows + row) * half + i] = (float)cos((double)angle);
                    w->rope_sin[(j * w->n_rows + row) * half + i] = (float)sin((double)angle);
                }
        }
        nt += sq->nt;
        rows_out += sq->rows_out;
        if (sq->s->n_past + sq->nt > sq->s->kv_hi) sq->s->kv_hi = (int32_t)(sq->s->n_past + sq->nt); /* written either way */
    }
    memset(w->bad, 0, (size_t)nt);
    f.w = w;
    f.seqs = seqs;
    f.n_seqs = n_seqs;
    f.nt = nt;
    f.rows_out = rows_out;
    f.logits = out;
    f.m = m;
    f.replay = replay;
    f.c_dim = cism__fwd_chunk_rows(hp->dim, nth);
    f.c_ffn = cism__fwd_chunk_rows(hp->ffn_dim, nth);
    f.c_voc = cism__fwd_chunk_rows(hp->vocab, nth);
    f.t_lo = 0;
    f.hpu = 1;
    f.stop = 0;
    cism__pool_run_stages(w->pool, &g_forward_stages, &f);
    return f.stop ? cism__fail(CISM_ERR_CANCELLED, "evaluation cancelled") : CISM_OK;
}

cism_status cism__forward(cism_session *s, const int32_t *tokens, int64_t nt, int rows_out, int64_t out_row0,
                          int *nonfinite) {
    cism__seq sq;
    cism_status st;
    int64_t t;
    memset(&sq, 0, sizeof(sq));
    sq.s = s;
    sq.tokens = tokens;
    sq.nt = nt;
    sq.rows_out = rows_out;
    st = cism__forward_seqs(&s->w, &sq, 1, s->logits + out_row0 * s->model->hp.vocab, s->replay);
    for (t = 0; t < nt; t++) *nonfinite |= s->w.bad[t];
    return st;
}
