/* session.h - per-conversation state: KV cache, scratch buffers, logits. */
#ifndef CISM_SESSION_H
#define CISM_SESSION_H

#include "cism.h"
#include "model.h"
#include "../core/threadpool.h"
#include "../kernels/kernels.h"

struct cism_session {
    cism_model *model;
    const cism__kernels *k;
    cism__pool *pool;
    int nth;
    int64_t n_ctx, n_batch;
    int32_t kv_type;
    int logits_all;
    int act_quant;   /* CISM_PARAM_ACT_QUANT */
    int act_outliers; /* CISM_PARAM_ACT_OUTLIERS (act_outliers.c) */
    int32_t n_past;
    volatile int32_t cancel;

    /* KV cache: [layer][kv_head][position][head_dim] in kv_type */
    void *k_cache, *v_cache;
    uint64_t kv_head_stride, kv_layer_stride;   /* elements */

    /* scratch, sized for n_batch tokens */
    float *x;        /* [n_batch][dim] residual stream */
    float *xb;       /* [n_batch][dim] normalized copy of x (the input of Q/K/V, gate/up, the output head) */
    float *q;        /* [n_batch][n_heads*head_dim] */
    float *att;      /* [n_batch][n_heads*head_dim] */
    float *ob;       /* [n_batch][dim] projection outputs before the residual add */
    float *hb, *hb2; /* [n_batch][ffn_dim] */
    float *tmp;      /* [nth][n_batch*head_dim] k/v head rows before they enter the cache */
    float *scores;   /* [nth][scores_per_thread] attention scratch */
    int64_t scores_per_thread;  /* CISM__ATT_TOKENS * (n_heads / n_kv_heads) * n_ctx */
    float *rope_cos, *rope_sin; /* [n_batch][head_dim/2] */
    uint8_t *xq;     /* act_quant: [n_batch] quantized rows of the current stage's matmul input,
                        each ending in its cism__act8_out table; then xo_tmp */
    int64_t xq_row_bytes;
    float *xo_tmp;   /* act_quant: a row of the widest matmul input (act_outliers.c) */
    /* CISM_PARAM_ACT_STATS (act_stats.c): per matmul input, per-column sums of
       squares, Gram blocks along the diagonal (act_gram_block > 1), rows summed */
    double *act_sums, *act_gram, *act_row;  /* act_row: one input row in double */
    int64_t *act_rows, *act_off;
    int64_t act_gram_block;

    int32_t *tokens; /* [n_ctx] the ids at positions 0..n_past-1 (cism_session_tokens, state.c) */

    float *logits;   /* [logit_rows][vocab] */
    int64_t logits_cap;   /* rows allocated */
    int32_t logit_rows;   /* rows valid after the last eval */
    int32_t last_n;       /* tokens of the last eval (its rows are 0..last_n-1) */

    int replay;           /* set while a cancelled eval recomputes its last kept token: not cancellable */
    int nonfinite;        /* set by forward.c when a matmul input held NaN/Inf (int8 activations hide them) */
    /* Internal observer (tests): called after each completed chunk of an eval
       with the number of the eval's tokens done so far; NULL = none. */
    void (*chunk_hook)(cism_session *s, int64_t n_done, void *data);
    void *chunk_hook_data;
};

/* Tokens per attention unit in prefill (forward.c). */
#define CISM__ATT_TOKENS 4

/* cism_session_eval without clearing a pending cancel request. */
cism_status cism__session_eval(cism_session *s, const int32_t *tokens, int32_t n_tokens);

/* Runs the transformer over tokens[0..nt) at positions n_past.. (nt <= n_batch).
   Writes logits for the last row (rows_out = 1) or every row (rows_out = nt)
   at logits + out_row0 * vocab, or none (rows_out = 0). Returns CISM_OK or
   CISM_ERR_CANCELLED (KV entries past n_past are then meaningless; never while
   s->replay is set). */
cism_status cism__forward(cism_session *s, const int32_t *tokens, int64_t nt, int rows_out, int64_t out_row0);

/* Activation statistics (act_stats.c). The inputs of a layer's matmuls, in the
   order of the forward pass's stages: */
enum { CISM__AS_ATTN = 0, CISM__AS_WO = 1, CISM__AS_FFN = 2, CISM__AS_DOWN = 3, CISM__AS_PER_LAYER = 4 };
/* Allocates the sums (CISM_PARAM_ACT_STATS = 1: squares only; G >= 2: also
   G x G Gram blocks); 0 on success. */
int cism__act_stats_init(cism_session *s, int64_t gram_block);
void cism__act_stats_free(cism_session *s);
/* int8 activations with outlier channels computed exactly (act_outliers.c). A
   quantized row is ldq bytes and ends in its cism__act8_out table. */
void cism__act8_quantize_split(void (*quant)(const float *, int64_t, void *), const float *x, int64_t n,
                               uint8_t *qrow, int64_t ldq, float *tmp);
void cism__act8_add_outliers(int32_t dtype, const void *w, uint64_t row_bytes, const uint8_t *xq, int64_t ldq,
                             float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1);
/* Adds rows [t0, t1) of x (rows ld apart, cols wide) to the sums of input
   `which` of layer l (l = n_layers: the output head, which 0); no-op when the
   session does not collect. */
void cism__act_stats_add(cism_session *s, int64_t l, int which, const float *x, int64_t ld, int64_t t0, int64_t t1);

#endif
