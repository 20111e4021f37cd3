/* layer_deltanet.c - the Gated DeltaNet token mixer (Qwen3.5's "linear_attention"
 * layers) in the forward pass's first three stages (forward.h), and its session
 * state (deltanet.h).
 *
 * Per layer, with x the normed input rows:
 *   ST_QKV units, by row chunks of the projections: qkv = W_qkv x (the q, k and v
 *          channels, 2 k_heads k_dim + v_heads v_dim), then for the chunk's
 *          channels the causal depthwise conv over the session's positions (its
 *          conv tail gives the conv - 1 inputs before the pass) and SiLU;
 *          z = W_z x; beta = sigmoid(W_b x); g = -exp(A_log) softplus(W_a x + dt_bias)
 *   ST_ATT units, by (session, value head): the gated delta rule with q and k of
 *          the value head's key head (v_heads / k_heads value heads share one)
 *          L2-normalized and q scaled by 1/sqrt(k_dim),
 *            S = exp(g) S;  S += k (beta (v - S^T k))^T;  o = S^T q,
 *          evaluated in blocks of CISM__DN_CHUNK positions at fixed absolute
 *          positions (block_unit: the chunked form), then the gated RMSNorm
 *          o / rms(o) * w * silu(z)
 *   ST_WO  units, by row chunks: out_proj and the residual add.
 * Every row of the pass updates the state (also in the last layer, where only
 * the logits rows go on), and each output element is computed by one unit
 * with arithmetic that depends only on its session's positions: the bits do
 * not depend on threads, chunking or the other sessions of a batch. */
#include "deltanet.h"
#include "forward.h"
#include "../core/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- sizes -------------------------------------------------------------------- */
typedef struct dn_dims {
    int64_t nk, nv, dk, dv, kd, vd, ch, taps, group;
} dn_dims;

static dn_dims dims_of(const cism__hparams *hp) {
    dn_dims d;
    d.nk = hp->dn_k_heads;
    d.nv = hp->dn_v_heads;
    d.dk = hp->dn_k_dim;
    d.dv = hp->dn_v_dim;
    d.kd = d.nk * d.dk;
    d.vd = d.nv * d.dv;
    d.ch = 2 * d.kd + d.vd;
    d.taps = hp->dn_conv;
    d.group = d.nk ? d.nv / d.nk : 1;
    return d;
}

int64_t cism__mix_row_floats(const cism__hparams *hp) {
    dn_dims d = dims_of(hp);
    int64_t gate = hp->attn_gate ? hp->n_heads * hp->head_dim : 0;
    int64_t dn = hp->n_dn_layers ? 2 * d.ch + 2 * d.vd + 2 * d.nv : 0;
    return gate > dn ? gate : dn;
}

/* per thread: the block's queries [C][dk], S^T k and S^T q [C][dv] each, the block-end update's
   operands [dk][C], [dv][C] and result [dv][dk], two rows of dv, k.k and q.k [C][C] each, a
   row of C decays */
int64_t cism__mix_thread_floats(const cism__hparams *hp) {
    int64_t dk = hp->dn_k_dim, dv = hp->dn_v_dim, C = CISM__DN_CHUNK;
    return hp->n_dn_layers ? C * dk + 2 * C * dv + dk * C + dv * C + dv * dk + 2 * dv + 2 * C * C + C : 0;
}

/* The planes of w->mix a DeltaNet layer uses, each [n_rows][width]. */
typedef struct dn_planes {
    float *raw, *conv, *z, *beta, *g, *out, *scratch;
} dn_planes;

static dn_planes planes_of(const cism__work *w, const dn_dims *d) {
    dn_planes p;
    int64_t n = w->n_rows;
    p.raw = w->mix;
    p.conv = p.raw + n * d->ch;
    p.z = p.conv + n * d->ch;
    p.beta = p.z + n * d->vd;
    p.g = p.beta + n * d->nv;
    p.out = p.g + n * d->nv;
    p.scratch = p.out + n * d->vd;
    return p;
}

/* ---- session state -------------------------------------------------------------- */
static int64_t block_floats(const dn_dims *d) { return d->nv * CISM__DN_CHUNK * (d->dk + d->dv + 1); }

int64_t cism__dn_snapshot_floats(const cism__hparams *hp) {
    dn_dims d = dims_of(hp);
    return hp->n_dn_layers * (d.nv * d.dk * d.dv + d.ch * (d.taps - 1) + block_floats(&d));
}

static int64_t slot_floats(const cism__hparams *hp) {
    dn_dims d = dims_of(hp);
    return hp->n_dn_layers * (d.nv * d.dk * d.dv + d.ch * (d.taps - 1));
}

int64_t cism__dn_session_bytes(const cism__hparams *hp) {
    if (!hp->n_dn_layers) return 0;
    return (int64_t)sizeof(cism__dn_state) + (2 * cism__dn_snapshot_floats(hp) + CISM__DN_CKPT_SLOTS * slot_floats(hp)) * 4;
}

int cism__dn_session_init(cism_session *s) {
    const cism__hparams *hp = &s->model->hp;
    cism__dn_state *st;
    dn_dims d = dims_of(hp);
    int failed = 0;
    if (!hp->n_dn_layers) return 0;
    st = (cism__dn_state *)calloc(1, sizeof(*st));
    if (!st) return 1;
    s->dn = st;
    st->state_floats = d.nv * d.dk * d.dv;
    st->tail_floats = d.ch * (d.taps - 1);
    st->layer_floats = st->state_floats + st->tail_floats + block_floats(&d);
    st->floats = cism__dn_snapshot_floats(hp);
    st->slot_floats = slot_floats(hp);
    st->buf[0] = (float *)cism__alloc_floats(st->floats, &failed);
    st->buf[1] = (float *)cism__alloc_floats(st->floats, &failed);
    st->slots = (float *)cism__alloc_floats(st->slot_floats * CISM__DN_CKPT_SLOTS, &failed);
    if (failed) return 1;
    cism__dn_reset(s);
    return 0;
}

void cism__dn_session_free(cism_session *s) {
    if (!s->dn) return;
    free(s->dn->buf[0]);
    free(s->dn->buf[1]);
    free(s->dn->slots);
    free(s->dn);
    s->dn = NULL;
}

void cism__dn_reset(cism_session *s) {
    cism__dn_state *st = s->dn;
    int i;
    if (!st) return;
    memset(st->buf[st->cur], 0, (size_t)st->floats * sizeof(float));
    st->prev_pos = -1;
    for (i = 0; i < CISM__DN_CKPT_SLOTS; i++) st->slot_pos[i] = -1;
}

static int slot_of(int64_t pos) { return (int)((pos / CISM__DN_CKPT_EVERY) % CISM__DN_CKPT_SLOTS); }

void cism__dn_begin_pass(cism_session *s, int64_t nt) {
    cism__dn_state *st = s->dn;
    int64_t p;
    if (!st) return;
    st->pass_pos = s->n_past;
    for (p = (s->n_past / CISM__DN_CKPT_EVERY + 1) * CISM__DN_CKPT_EVERY; p <= s->n_past + nt; p += CISM__DN_CKPT_EVERY)
        st->slot_pos[slot_of(p)] = -1;
}

void cism__dn_commit(cism_session *s, int64_t nt) {
    cism__dn_state *st = s->dn;
    int64_t p;
    if (!st) return;
    for (p = (s->n_past / CISM__DN_CKPT_EVERY + 1) * CISM__DN_CKPT_EVERY; p <= s->n_past + nt; p += CISM__DN_CKPT_EVERY)
        st->slot_pos[slot_of(p)] = (int32_t)p;
    st->cur = 1 - st->cur;
    st->prev_pos = s->n_past;
}

cism_status cism__dn_rewind(cism_session *s, int32_t n_keep) {
    cism__dn_state *st = s->dn;
    int32_t from = 0;
    int src = -2, i; /* -2: zero state, -1: the other buffer, else a slot */
    cism_status rc = CISM_OK;
    if (!st || n_keep == s->n_past) {
        s->n_past = n_keep;
        return CISM_OK;
    }
    if (st->prev_pos >= 0 && st->prev_pos <= n_keep) {
        from = st->prev_pos;
        src = -1;
    }
    for (i = 0; i < CISM__DN_CKPT_SLOTS; i++)
        if (st->slot_pos[i] > from && st->slot_pos[i] <= n_keep) {
            from = st->slot_pos[i];
            src = i;
        }
    for (i = 0; i < CISM__DN_CKPT_SLOTS; i++)
        if (st->slot_pos[i] > n_keep) st->slot_pos[i] = -1;
    if (src == -1) {
        st->cur = 1 - st->cur;
    } else if (src >= 0) { /* each layer's state and tail; its block part is empty at a checkpoint */
        int64_t li, n = st->state_floats + st->tail_floats;
        for (li = 0; li < s->model->hp.n_dn_layers; li++)
            memcpy(st->buf[st->cur] + li * st->layer_floats, st->slots + (int64_t)src * st->slot_floats + li * n,
                   (size_t)n * sizeof(float));
    } else {
        memset(st->buf[st->cur], 0, (size_t)st->floats * sizeof(float));
    }
    st->prev_pos = -1;
    s->n_past = from;
    /* the session's own tokens from the checkpoint to n_keep, as a fresh evaluation takes them */
    if (from < n_keep && (rc = cism__work_ensure(&s->w, &s->model->hp, s->n_batch, s->n_ctx)) != CISM_OK) return rc;
    while (s->n_past < n_keep) {
        int64_t nt = n_keep - s->n_past < s->n_batch ? n_keep - s->n_past : s->n_batch;
        int nonfinite = 0, replay = s->replay;
        s->replay = 1; /* not cancellable */
        rc = cism__forward(s, s->tokens + s->n_past, nt, 0, 0, &nonfinite);
        s->replay = replay;
        if (rc != CISM_OK) { /* cannot happen (not cancellable); leave a consistent state */
            cism__dn_reset(s);
            s->n_past = 0;
            return cism__fail(CISM_ERR_INTERNAL, "re-evaluating the tokens up to position %d failed; the session was reset", (int)n_keep);
        }
        cism__dn_commit(s, nt);
        s->n_past += (int32_t)nt;
    }
    return CISM_OK;
}

/* The session's state pointers for DeltaNet layer li: current (read) and next (written). */
static float *state_cur(const cism_session *s, int64_t li) { return s->dn->buf[s->dn->cur] + li * s->dn->layer_floats; }
static float *state_next(const cism_session *s, int64_t li) { return s->dn->buf[1 - s->dn->cur] + li * s->dn->layer_floats; }
static float *state_slot(const cism_session *s, int64_t li, int64_t pos) {
    return s->dn->slots + (int64_t)slot_of(pos) * s->dn->slot_floats + li * (s->dn->state_floats + s->dn->tail_floats);
}

/* ---- forward stages --------------------------------------------------------------- */
static int nth_of(const fwd *f) { return cism__pool_size(f->w->pool); }

int64_t cism__dn_begin(fwd *f, int64_t l, int stage) {
    cism__work *w = f->w;
    const cism__hparams *hp = &f->m->hp;
    dn_dims d = dims_of(hp);
    int nth = nth_of(f);
    (void)l;
    switch (stage) {
    case ST_QKV: /* the common begin normed (and quantized) the input */
        return cism__fwd_units(d.ch, cism__fwd_chunk_rows(d.ch, nth)) + cism__fwd_units(d.vd, cism__fwd_chunk_rows(d.vd, nth)) + 1;
    case ST_ATT:
        return f->n_seqs * d.nv;
    default: { /* ST_WO */
        dn_planes p = planes_of(w, &d);
        if (f->t_lo == f->nt) return 0;
        cism__fwd_quantize_rows(w, p.out, d.vd, d.vd, f->t_lo, f->nt);
        return cism__fwd_units(hp->dim, f->c_dim);
    }
    }
}

static float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* softplus as torch computes it (threshold 20) */
static float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* The conv inputs (every channel) at absolute position pos of seq sq, pos >= n_past - (conv - 1): a
   row of the pass's projections, or of the session's conv tail (zero before position 0). */
static const float *conv_row(const cism__seq *sq, const float *raw, const float *tail, const dn_dims *d, int64_t pos) {
    int64_t n_past = sq->s->n_past;
    if (pos >= n_past) return raw + (sq->row0 + pos - n_past) * d->ch;
    return tail + (pos - n_past + d->taps - 1) * d->ch;
}

/* Channels [c0, c1): projection for every row, then per seq the causal conv + SiLU,
   the new conv tail and the tails at checkpoint positions. */
static void qkv_channels(fwd *f, const cism__layer *L, const dn_dims *d, const dn_planes *p, int64_t c0, int64_t c1) {
    cism__work *w = f->w;
    int64_t dim = f->m->hp.dim, q, t, c, j, K = d->taps, li = L->dn.index;
    const float *src[64];
    cism__fwd_linear(w, &L->dn.qkv, w->xb, dim, cism__fwd_qrow(w, 0), p->raw, d->ch, f->nt, c0, c1);
    for (q = 0; q < f->n_seqs; q++) {
        const cism__seq *sq = &f->seqs[q];
        const float *tail = state_cur(sq->s, li) + sq->s->dn->state_floats;
        float *tail_new = state_next(sq->s, li) + sq->s->dn->state_floats;
        int64_t n_past = sq->s->n_past, pos;
        for (t = 0; t < sq->nt; t++) {
            float *out = p->conv + (sq->row0 + t) * d->ch;
            for (j = 0; j < K; j++) src[j] = conv_row(sq, p->raw, tail, d, n_past + t - (K - 1) + j);
            for (c = c0; c < c1; c++) {
                const float *wc = L->dn.conv + c * K;
                float acc = 0.0f;
                for (j = 0; j < K; j++) acc += wc[j] * src[j][c];
                out[c] = acc * sigmoidf_(acc);
            }
        }
        if (K < 2) continue;
        for (pos = (n_past / CISM__DN_CKPT_EVERY + 1) * CISM__DN_CKPT_EVERY; pos <= n_past + sq->nt; pos += CISM__DN_CKPT_EVERY) {
            float *slot = state_slot(sq->s, li, pos) + sq->s->dn->state_floats;
            for (j = 0; j < K - 1; j++)
                memcpy(slot + j * d->ch + c0, conv_row(sq, p->raw, tail, d, pos - (K - 1) + j) + c0, (size_t)(c1 - c0) * sizeof(float));
        }
        for (j = 0; j < K - 1; j++) /* after the slots: they read the old tail */
            memcpy(tail_new + j * d->ch + c0, conv_row(sq, p->raw, tail, d, n_past + sq->nt - (K - 1) + j) + c0,
                   (size_t)(c1 - c0) * sizeof(float));
    }
}

static void qkv_unit(fwd *f, int64_t l, int64_t u) {
    cism__work *w = f->w;
    const cism__layer *L = &f->m->layers[l];
    dn_dims d = dims_of(&f->m->hp);
    dn_planes p = planes_of(w, &d);
    int nth = nth_of(f);
    int64_t c_ch = cism__fwd_chunk_rows(d.ch, nth), u_ch = cism__fwd_units(d.ch, c_ch);
    int64_t c_z = cism__fwd_chunk_rows(d.vd, nth), u_z = cism__fwd_units(d.vd, c_z), dim = f->m->hp.dim, r0, r1, t, h;
    if (u < u_ch) {
        cism__fwd_row_range(u, c_ch, d.ch, &r0, &r1);
        qkv_channels(f, L, &d, &p, r0, r1);
    } else if (u < u_ch + u_z) {
        cism__fwd_row_range(u - u_ch, c_z, d.vd, &r0, &r1);
        cism__fwd_linear(w, &L->dn.z, w->xb, dim, cism__fwd_qrow(w, 0), p.z, d.vd, f->nt, r0, r1);
    } else { /* beta and the decay of every value head */
        cism__fwd_linear(w, &L->dn.beta, w->xb, dim, cism__fwd_qrow(w, 0), p.beta, d.nv, f->nt, 0, d.nv);
        cism__fwd_linear(w, &L->dn.alpha, w->xb, dim, cism__fwd_qrow(w, 0), p.g, d.nv, f->nt, 0, d.nv);
        for (t = 0; t < f->nt; t++)
            for (h = 0; h < d.nv; h++) {
                float *b = &p.beta[t * d.nv + h], *g = &p.g[t * d.nv + h];
                *b = sigmoidf_(*b);
                *g = -expf(L->dn.a_log[h]) * softplusf_(*g + L->dn.dt_bias[h]);
            }
    }
}

static void l2norm_scaled(float *out, const float *x, int64_t n, float scale) {
    float ss = 0.0f, r;
    int64_t i;
    for (i = 0; i < n; i++) ss += x[i] * x[i];
    r = scale / sqrtf(ss + 1e-6f);
    for (i = 0; i < n; i++) out[i] = x[i] * r;
}

/* exp of a (non-positive) log decay; 0 below -80, where expf would return a denormal the
   sums cannot feel (and take its slow path) */
static float decay_exp(float x) { return x < -80.0f ? 0.0f : expf(x); }

/* Value head h of seq sq over its rows, block by block (blocks of C = CISM__DN_CHUNK at
   absolute positions b C ..). Within block b, with S0 the state at its start, g_j the decay
   of position j and G_j the sum of g over the block up to j, the delta rule
     S_j = exp(g_j) S_{j-1} + k_j d_j^T,  d_j = beta_j (v_j - exp(g_j) S_{j-1}^T k_j),  o_j = S_j^T q_j
   unrolls to (the WY / UT form of the chunked gated delta rule)
     d_j = beta_j (v_j - exp(G_j) S0^T k_j - sum_{i<j} exp(G_j - G_i) (k_j . k_i) d_i)
     o_j = exp(G_j) S0^T q_j + sum_{i<=j} exp(G_j - G_i) (q_j . k_i) d_i
     S0' = exp(G_last) S0 + sum_i exp(G_last - G_i) k_i d_i^T            (at the block end)
   S0^T k and S0^T q of the pass's rows of a block and the block-end update are matrix
   products through the tier's f32 kernel, whose result for an element does not depend on
   how many rows it is given; every other sum runs in a fixed order. So a position's bits
   depend only on its block's earlier positions and S0, not on how evals were chunked. */
static void block_unit(fwd *f, int64_t l, int64_t u, int ith) {
    cism__work *w = f->w;
    const cism__layer *L = &f->m->layers[l];
    const cism__hparams *hp = &f->m->hp;
    cism__matmul_fn mm = w->k->matmul[CISM_DTYPE_F32];
    dn_dims d = dims_of(hp);
    dn_planes p = planes_of(w, &d);
    const cism__seq *sq = &f->seqs[u / d.nv];
    const cism__dn_state *st = sq->s->dn;
    const int64_t C = CISM__DN_CHUNK, dk = d.dk, dv = d.dv;
    int64_t h = u % d.nv, kh = h / d.group, li = L->dn.index, t, i, j, m, a, r0, n, pos0 = sq->s->n_past;
    float *qs = p.scratch + (int64_t)ith * cism__mix_thread_floats(hp), *as = qs + C * dk, *bs = as + C * dv;
    float *wt = bs + C * dv, *xt = wt + dk * C, *upd = xt + dv * C, *acc = upd + dv * dk, *o = acc + dv;
    float *kk = o + dv, *qk = kk + C * C, *cj = qk + C * C;
    const float *cur = state_cur(sq->s, li);
    float *nxt = state_next(sq->s, li), eps = (float)hp->norm_eps, qscale = 1.0f / sqrtf((float)dk);
    int64_t kb_off = st->state_floats + st->tail_floats, db_off = kb_off + d.nv * C * dk, gb_off = db_off + d.nv * C * dv;
    float *S = nxt + h * dv * dk, *kb = nxt + kb_off + h * C * dk, *db = nxt + db_off + h * C * dv, *gb = nxt + gb_off + h * C;
    int64_t have = pos0 % C;
    memcpy(S, cur + h * dv * dk, (size_t)(dv * dk) * sizeof(float));
    memcpy(kb, cur + kb_off + h * C * dk, (size_t)(have * dk) * sizeof(float));
    memcpy(db, cur + db_off + h * C * dv, (size_t)(have * dv) * sizeof(float));
    memcpy(gb, cur + gb_off + h * C, (size_t)have * sizeof(float));
    for (t = 0; t < sq->nt; t += n) {
        r0 = (pos0 + t) % C;
        n = C - r0 < sq->nt - t ? C - r0 : sq->nt - t;
        for (i = 0; i < n; i++) { /* normalized q and k, cumulative decay */
            int64_t row = sq->row0 + t + i, r = r0 + i;
            const float *cv = p.conv + row * d.ch;
            l2norm_scaled(qs + r * dk, cv + kh * dk, dk, qscale);
            l2norm_scaled(kb + r * dk, cv + d.kd + kh * dk, dk, 1.0f);
            gb[r] = (r == 0 ? 0.0f : gb[r - 1]) + p.g[row * d.nv + h];
        }
        mm(S, (uint64_t)dk * 4u, dk, kb + r0 * dk, dk, as + r0 * dv, dv, n, 0, dv); /* S0^T k */
        mm(S, (uint64_t)dk * 4u, dk, qs + r0 * dk, dk, bs + r0 * dv, dv, n, 0, dv); /* S0^T q */
        mm(kb, (uint64_t)dk * 4u, dk, kb + r0 * dk, dk, kk + r0 * C, C, n, 0, r0 + n); /* k_r . k_j */
        mm(kb, (uint64_t)dk * 4u, dk, qs + r0 * dk, dk, qk + r0 * C, C, n, 0, r0 + n); /* q_r . k_j */
        for (i = 0; i < n; i++) {
            int64_t row = sq->row0 + t + i, r = r0 + i;
            const float *v = p.conv + row * d.ch + 2 * d.kd + h * dv, *z = p.z + row * d.vd + h * dv;
            float e = decay_exp(gb[r]), beta = p.beta[row * d.nv + h], ss = 0.0f, rn, *out = p.out + row * d.vd + h * dv;
            for (j = 0; j <= r; j++) cj[j] = decay_exp(gb[r] - gb[j]);
            for (m = 0; m < dv; m++) acc[m] = e * as[r * dv + m];
            for (j = 0; j < r; j++) {
                float c = cj[j] * kk[r * C + j];
                for (m = 0; m < dv; m++) acc[m] += c * db[j * dv + m];
            }
            for (m = 0; m < dv; m++) db[r * dv + m] = beta * (v[m] - acc[m]);
            for (m = 0; m < dv; m++) o[m] = e * bs[r * dv + m];
            for (j = 0; j <= r; j++) {
                float c = cj[j] * qk[r * C + j];
                for (m = 0; m < dv; m++) o[m] += c * db[j * dv + m];
            }
            for (m = 0; m < dv; m++) ss += o[m] * o[m]; /* gated RMSNorm */
            rn = 1.0f / sqrtf(ss / (float)dv + eps);
            for (m = 0; m < dv; m++) out[m] = o[m] * rn * L->dn.norm[m] * (z[m] * sigmoidf_(z[m]));
        }
        if (r0 + n == C) { /* block end: S0' = exp(G_last) S0 + sum_i exp(G_last - G_i) k_i d_i^T */
            float el = decay_exp(gb[C - 1]);
            for (j = 0; j < C; j++) cj[j] = decay_exp(gb[C - 1] - gb[j]);
            for (a = 0; a < dk; a++)
                for (j = 0; j < C; j++) wt[a * C + j] = cj[j] * kb[j * dk + a];
            for (m = 0; m < dv; m++)
                for (j = 0; j < C; j++) xt[m * C + j] = db[j * dv + m];
            mm(wt, (uint64_t)C * 4u, C, xt, C, upd, dk, dv, 0, dk); /* upd[m][a] = sum_j wt[a][j] xt[m][j] */
            for (i = 0; i < dv * dk; i++) S[i] = el * S[i] + upd[i];
            if ((pos0 + t + n) % CISM__DN_CKPT_EVERY == 0)
                memcpy(state_slot(sq->s, li, pos0 + t + n) + h * dv * dk, S, (size_t)(dv * dk) * sizeof(float));
        }
    }
}

void cism__dn_unit(fwd *f, int64_t l, int stage, int64_t u, int ith) {
    switch (stage) {
    case ST_QKV: qkv_unit(f, l, u); break;
    case ST_ATT: block_unit(f, l, u, ith); break;
    default: { /* ST_WO */
        dn_dims d = dims_of(&f->m->hp);
        dn_planes p = planes_of(f->w, &d);
        int64_t r0, r1;
        cism__fwd_row_range(u, f->c_dim, f->m->hp.dim, &r0, &r1);
        cism__fwd_proj_residual(f, &f->m->layers[l].dn.out, p.out, d.vd, r0, r1, f->t_lo);
        break;
    }
    }
}
