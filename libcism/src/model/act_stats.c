/* act_stats.c - activation statistics for quantization calibration
 * (CISM_PARAM_ACT_STATS, cism_session_act_stats, cism_session_act_gram;
 * docs/QUANTIZATION.md).
 *
 * For every matmul input of the forward pass (per layer: the attention norm's
 * output, read by Q/K/V; the attention output, read by the output projection;
 * the FFN norm's output, read by gate/up; the SwiGLU output, read by down; and
 * the final norm's output, read by the head) the session keeps, in double:
 *   - per column, the sum of the squares of every row the stage evaluated;
 *   - with CISM_PARAM_ACT_STATS = G >= 2, also the blocks of G x G along the
 *     diagonal of the Gram matrix sum(x x^T) (columns [kG, kG + G); the last
 *     block may be narrower and is stored padded to G x G with zeros); only
 *     their lower triangles are summed, and mirrored when read.
 * The forward pass adds each stage's rows once, in the stage's begin (one
 * thread), in token order: the sums do not depend on the number of threads.
 * Besides, per attention layer, the sum of the keys after RoPE (the mean a
 * converter stores as the layer's key offsets, docs/KV_CACHE.md) and the sums
 * and sums of squares of the queries after RoPE (its query directions): each
 * head's rows are added by the one unit that computes them, in token order. */
#include "session.h"
#include "../core/error.h"

#include <stdlib.h>
#include <string.h>

#define N_INPUTS(hp) ((hp)->n_layers * CISM__AS_PER_LAYER + 1)

/* Columns of input i (i = l * CISM__AS_PER_LAYER + which; the last one is the head's). */
#define AS_TILE 16 /* rows per tile of the Gram update */

static int64_t input_cols(const cism__hparams *hp, int64_t i) {
    if (i == N_INPUTS(hp) - 1) return hp->dim;
    switch (i % CISM__AS_PER_LAYER) {
    case CISM__AS_WO: return hp->n_heads * hp->head_dim;
    case CISM__AS_DOWN: return hp->ffn_dim;
    default: return hp->dim;
    }
}

static int64_t gram_values(int64_t cols, int64_t g) { return g > 1 ? (cols + g - 1) / g * g * g : 0; }

int cism__act_stats_init(cism_session *s, int64_t gram_block) {
    const cism__hparams *hp = &s->model->hp;
    int64_t n = N_INPUTS(hp), i, sums = 0, grams = 0;
    s->act_gram_block = gram_block > 1 ? gram_block : 0;
    s->act_off = (int64_t *)calloc((size_t)(2 * n + 1), sizeof(int64_t));
    s->act_rows = (int64_t *)calloc((size_t)n, sizeof(int64_t));
    if (!s->act_off || !s->act_rows) return -1;
    for (i = 0; i < n; i++) { /* act_off[i]: sums of input i; act_off[n + i]: its Gram blocks */
        s->act_off[i] = sums;
        sums += input_cols(hp, i);
    }
    for (i = 0; i < n; i++) {
        s->act_off[n + i] = grams;
        grams += gram_values(input_cols(hp, i), s->act_gram_block);
    }
    s->act_off[2 * n] = grams;
    if ((uint64_t)(sums + grams) > (uint64_t)SIZE_MAX / sizeof(double) / 2) return -1;
    s->act_sums = (double *)calloc((size_t)sums, sizeof(double));
    s->key_sums = (double *)calloc((size_t)(hp->n_layers * hp->n_kv_heads * hp->head_dim), sizeof(double));
    s->key_rows = (int64_t *)calloc((size_t)hp->n_layers, sizeof(int64_t));
    s->query_sums = (double *)calloc((size_t)(hp->n_layers * hp->n_heads * (hp->head_dim + 1)), sizeof(double));
    s->query_rows = (int64_t *)calloc((size_t)hp->n_layers, sizeof(int64_t));
    if (!s->key_sums || !s->key_rows || !s->query_sums || !s->query_rows) return -1;
    s->act_gram = grams ? (double *)calloc((size_t)grams, sizeof(double)) : NULL;
    s->act_row = grams ? (double *)calloc(((size_t)(hp->ffn_dim > hp->n_heads * hp->head_dim ? hp->ffn_dim : hp->n_heads * hp->head_dim) + (size_t)hp->dim) * AS_TILE, sizeof(double)) : NULL;
    return s->act_sums && (s->act_gram || !grams) && (s->act_row || !grams) ? 0 : -1;
}

void cism__act_stats_free(cism_session *s) {
    free(s->act_sums);
    free(s->act_gram);
    free(s->act_row);
    free(s->act_rows);
    free(s->act_off);
    free(s->key_sums);
    free(s->key_rows);
    free(s->query_sums);
    free(s->query_rows);
}

void cism__act_stats_query(cism_session *s, int64_t l, int64_t h, const float *q) {
    const cism__hparams *hp = &s->model->hp;
    const int64_t hd = hp->head_dim, per = hp->n_heads * (hd + 1);
    double *acc, sq = 0.0;
    int64_t i;
    if (!s->query_sums || s->replay) return;
    acc = s->query_sums + l * per;
    for (i = 0; i < hd; i++) {
        acc[h * hd + i] += (double)q[i];
        sq += (double)q[i] * (double)q[i];
    }
    acc[hp->n_heads * hd + h] += sq;
    if (h == 0) s->query_rows[l]++;
}

void cism__act_stats_key(cism_session *s, int64_t l, int64_t h, const float *k) {
    const cism__hparams *hp = &s->model->hp;
    double *acc;
    int64_t i;
    if (!s->key_sums || s->replay) return;
    acc = s->key_sums + (l * hp->n_kv_heads + h) * hp->head_dim;
    for (i = 0; i < hp->head_dim; i++) acc[i] += (double)k[i];
    if (h == 0) s->key_rows[l]++;
}

void cism__act_stats_add(cism_session *s, int64_t l, int which, const float *x, int64_t ld, int64_t t0, int64_t t1) {
    const cism__hparams *hp = &s->model->hp;
    int64_t i = l < hp->n_layers ? l * CISM__AS_PER_LAYER + which : N_INPUTS(hp) - 1;
    int64_t cols = input_cols(hp, i), g = s->act_gram_block, t, c;
    double *acc;
    if (!s->act_sums || t1 <= t0 || s->replay) return; /* a replayed row was counted once already */
    acc = s->act_sums + s->act_off[i];
    for (t = t0; t < t1; t++) {
        const float *r = x + t * ld;
        for (c = 0; c < cols; c++) acc[c] += (double)r[c] * (double)r[c];
    }
    if (g > 1) { /* each block: sum over rows of the outer product of the row's slice (lower triangle) */
        double *gram = s->act_gram + s->act_off[N_INPUTS(hp) + i], *xd = s->act_row;
        int64_t c0, k, nt;
        /* tiles of AS_TILE rows: a row of a block takes the tile's rows one after the other while it
           is in cache; every value still receives its rows in row order (the same sums, bit for bit) */
        for (t = t0; t < t1; t += nt) {
            nt = t1 - t < AS_TILE ? t1 - t : AS_TILE;
            for (k = 0; k < nt; k++) {
                const float *r = x + (t + k) * ld;
                for (c = 0; c < cols; c++) xd[k * cols + c] = (double)r[c];
            }
            for (c0 = 0; c0 < cols; c0 += g) {
                int64_t w = cols - c0 < g ? cols - c0 : g, a, b;
                double *blk = gram + (c0 / g) * g * g;
                for (a = 0; a < w; a++) {
                    double *row = blk + a * g;
                    for (k = 0; k < nt; k++) {
                        const double *xs = xd + k * cols + c0;
                        double xa = xs[a];
                        for (b = 0; b <= a; b++) row[b] += xa * xs[b];
                    }
                }
            }
        }
    }
    s->act_rows[i] += t1 - t0;
}

/* The input a matrix name reads; -1 if the name is not such a matrix. */
static int64_t input_of(const cism_model *m, const char *name) {
    static const struct { const char *suffix; int which; } mats[] = {
        {"attn_q", CISM__AS_ATTN}, {"attn_k", CISM__AS_ATTN}, {"attn_v", CISM__AS_ATTN},
        {"attn_output", CISM__AS_WO}, {"ffn_gate", CISM__AS_FFN}, {"ffn_up", CISM__AS_FFN},
        {"ffn_down", CISM__AS_DOWN}, {"conv_in", CISM__AS_ATTN}, {"conv_out", CISM__AS_WO}, /* conv: layer_shortconv.c */
        {"attn_gate", CISM__AS_ATTN}, /* the DeltaNet input projections read the attention norm's output */
        {"ssm_qkv", CISM__AS_ATTN}, {"ssm_z", CISM__AS_ATTN}, {"ssm_beta", CISM__AS_ATTN}, {"ssm_alpha", CISM__AS_ATTN}};
    const cism__hparams *hp = &m->hp;
    if (!strcmp(name, "output") || (hp->tied && !strcmp(name, "token_embd"))) return N_INPUTS(hp) - 1;
    if (!strncmp(name, "blk.", 4) && name[4] >= '0' && name[4] <= '9') {
        const char *p = name + 4;
        int64_t l = 0;
        size_t k;
        while (*p >= '0' && *p <= '9' && l <= hp->n_layers) l = l * 10 + (*p++ - '0');
        if (*p != '.' || l >= hp->n_layers || (name[4] == '0' && p != name + 5)) return -1;
        for (k = 0; k < sizeof(mats) / sizeof(mats[0]); k++)
            if (!strcmp(p + 1, mats[k].suffix)) return l * CISM__AS_PER_LAYER + mats[k].which;
    }
    return -1;
}

static cism_status find_input(const cism_session *s, const char *fn, const char *tensor, int64_t *input) {
    if (!s || !tensor) return cism__fail(CISM_ERR_INVALID_ARG, "%s: NULL argument", fn);
    if (!s->act_sums) return cism__fail(CISM_ERR_STATE, "%s: the session was created without CISM_PARAM_ACT_STATS", fn);
    *input = input_of(s->model, tensor);
    if (*input < 0)
        return cism__fail(CISM_ERR_INVALID_ARG, "%s: %.64s is not a weight matrix that multiplies activations%s", fn,
                          tensor, !strcmp(tensor, "token_embd") ? " (the embedding of an untied model is only looked up)" : "");
    return CISM_OK;
}

cism_status cism_session_act_stats(const cism_session *s, const char *tensor, double *sums, int64_t capacity,
                                   int64_t *n_cols, int64_t *n_rows) {
    int64_t i = 0, cols;
    cism_status st;
    cism__clear_error();
    if ((st = find_input(s, "cism_session_act_stats", tensor, &i))) return st;
    cols = input_cols(&s->model->hp, i);
    if (n_cols) *n_cols = cols;
    if (n_rows) *n_rows = s->act_rows[i];
    if (capacity < cols || !sums)
        return cism__fail(CISM_ERR_BUFFER_SMALL, "cism_session_act_stats: %s has %lld columns (capacity %lld)", tensor,
                          (long long)cols, (long long)capacity);
    memcpy(sums, s->act_sums + s->act_off[i], (size_t)cols * sizeof(double));
    return CISM_OK;
}

cism_status cism_session_act_gram(const cism_session *s, const char *tensor, double *blocks, int64_t capacity,
                                  int64_t *n_values, int64_t *n_rows) {
    const cism__hparams *hp;
    int64_t i = 0, n;
    cism_status st;
    cism__clear_error();
    if ((st = find_input(s, "cism_session_act_gram", tensor, &i))) return st;
    if (!s->act_gram)
        return cism__fail(CISM_ERR_STATE, "cism_session_act_gram: the session collects no Gram blocks (CISM_PARAM_ACT_STATS is 1)");
    hp = &s->model->hp;
    n = gram_values(input_cols(hp, i), s->act_gram_block);
    if (n_values) *n_values = n;
    if (n_rows) *n_rows = s->act_rows[i];
    if (capacity < n || !blocks)
        return cism__fail(CISM_ERR_BUFFER_SMALL, "cism_session_act_gram: %s has %lld values (capacity %lld)", tensor,
                          (long long)n, (long long)capacity);
    { /* the lower triangles, mirrored */
        const double *src = s->act_gram + s->act_off[N_INPUTS(hp) + i];
        int64_t g = s->act_gram_block, k, a, b;
        for (k = 0; k < n; k += g * g)
            for (a = 0; a < g; a++)
                for (b = 0; b < g; b++) blocks[k + a * g + b] = b <= a ? src[k + a * g + b] : src[k + b * g + a];
    }
    return CISM_OK;
}

/* The sums of attention layer `layer`: its keys' (which 0) or its queries'
   (which 1), copied out of the session's per-layer arrays. */
static cism_status layer_sums(const cism_session *s, const char *fn, const char *what, int64_t layer, int which,
                              double *sums, int64_t capacity, int64_t *n_values, int64_t *n_rows) {
    const cism__hparams *hp;
    const double *base;
    int64_t per;
    cism__clear_error();
    if (!s) return cism__fail(CISM_ERR_INVALID_ARG, "%s: NULL session", fn);
    if (!s->key_sums) return cism__fail(CISM_ERR_STATE, "%s: the session was created without CISM_PARAM_ACT_STATS", fn);
    hp = &s->model->hp;
    if (layer < 0 || layer >= hp->n_layers)
        return cism__fail(CISM_ERR_INVALID_ARG, "%s: layer %lld out of range (the model has %lld)", fn, (long long)layer,
                          (long long)hp->n_layers);
    if (s->model->layers[layer].kind != CISM__LAYER_ATTENTION)
        return cism__fail(CISM_ERR_INVALID_ARG, "%s: layer %lld is not an attention layer (it has no %s)", fn,
                          (long long)layer, what);
    per = which ? hp->n_heads * (hp->head_dim + 1) : hp->n_kv_heads * hp->head_dim;
    base = which ? s->query_sums : s->key_sums;
    if (n_values) *n_values = per;
    if (n_rows) *n_rows = which ? s->query_rows[layer] : s->key_rows[layer];
    if (capacity < per || !sums)
        return cism__fail(CISM_ERR_BUFFER_SMALL, "%s: layer %lld has %lld values (capacity %lld)", fn, (long long)layer,
                          (long long)per, (long long)capacity);
    memcpy(sums, base + layer * per, (size_t)per * sizeof(double));
    return CISM_OK;
}

cism_status cism_session_key_sums(const cism_session *s, int64_t layer, double *sums, int64_t capacity, int64_t *n_values,
                                  int64_t *n_rows) {
    return layer_sums(s, "cism_session_key_sums", "keys", layer, 0, sums, capacity, n_values, n_rows);
}

cism_status cism_session_query_sums(const cism_session *s, int64_t layer, double *sums, int64_t capacity,
                                    int64_t *n_values, int64_t *n_rows) {
    return layer_sums(s, "cism_session_query_sums", "queries", layer, 1, sums, capacity, n_values, n_rows);
}
