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
    uint8_t *xq;     /* act_quant: [n_batch] quantized rows of the current stage's matmul input */
    int64_t xq_row_bytes;

    float *logits;   /* [logit_rows][vocab] */
    int64_t logits_cap;   /* rows allocated */
    int32_t logit_rows;   /* rows valid after the last eval */
    int32_t last_n;       /* tokens of the last eval (its rows are 0..last_n-1) */
};

/* Tokens per attention unit in prefill (forward.c). */
#define CISM__ATT_TOKENS 4

/* cism_session_eval without clearing a pending cancel request. */
cism_status cism__session_eval(cism_session *s, const int32_t *tokens, int32_t n_tokens);

/* Runs the transformer over tokens[0..nt) at positions n_past.. (nt <= n_batch).
   Writes logits for the last row (rows_out = 1) or every row (rows_out = nt)
   at logits + out_row0 * vocab, or none (rows_out = 0). Returns CISM_OK or
   CISM_ERR_CANCELLED (KV entries past n_past are then meaningless). */
cism_status cism__forward(cism_session *s, const int32_t *tokens, int64_t nt, int rows_out, int64_t out_row0);

#endif
