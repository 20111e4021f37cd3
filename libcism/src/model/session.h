/* session.h - per-conversation state: KV cache, scratch buffers, logits. */
#ifndef CISM_SESSION_H
#define CISM_SESSION_H

#include "cism.h"
#include "model.h"
#include "../core/threadpool.h"
#include "../kernels/kernels.h"

/* Scratch of a forward pass over up to n_rows token rows (forward.c): one
   session's (its own evals) or a batch's (the rows of several sessions), with
   the worker pool that runs it. */
typedef struct cism__work {
    const cism__kernels *k;
    cism__pool *pool;
    int nth;
    int act_quant, act_outliers;
    int64_t n_rows;  /* rows the buffers hold */
    int64_t n_ctx;   /* positions the attention scratch covers */
    float *x;        /* [n_rows][dim] residual stream */
    float *xb;       /* [n_rows][dim] normalized copy of x (the input of Q/K/V, gate/up, the output head) */
    float *q;        /* [n_rows][n_heads*head_dim] */
    float *att;      /* [n_rows][n_heads*head_dim] */
    float *ob;       /* [n_rows][dim] projection outputs before the residual add */
    float *hb, *hb2; /* [n_rows][ffn_dim] */
    float *conv;     /* [n_rows][3*dim] B, C, x of a short-convolution layer (NULL without them) */
    float *tmp;      /* [nth][n_rows*head_dim] k/v head rows before they enter the cache */
    float *scores;   /* [nth][scores_per_thread] attention scratch, then att_part */
    int64_t scores_per_thread;  /* CISM__ATT_TOKENS * (n_heads / n_kv_heads) * (CISM__ATT_SPLIT + head_dim + 4) */
    float *att_part; /* [att_part_slots][head_dim] then [att_part_slots][2]: split-KV partial results (forward.c) */
    int64_t att_part_slots;
    float *rope_cos, *rope_sin; /* [table][n_rows][rope_dim/2]: the model's RoPE tables (model.h) */
    uint8_t *xq;     /* act_quant: [n_rows] quantized rows of the current stage's matmul input,
                        each ending in its cism__act8_out table; then xo_tmp */
    int64_t xq_row_bytes;
    float *xo_tmp;   /* act_quant: per thread (xo_floats apart), the block statistics of a row of the widest
                        matmul input (act_outliers.c) */
    int64_t xo_floats;
    struct cism__oruns *oruns; /* act_quant: the current stage's outlier runs (forward.c), or runs->xq NULL */
    float *mix;      /* [n_rows][cism__mix_row_floats] then [nth][cism__mix_thread_floats] (deltanet.h): the
                        attention output gate's rows, or a DeltaNet layer's planes */
    uint8_t *bad;    /* [n_rows] set by forward.c when a matmul input row held NaN/Inf (int8 activations hide them) */
} cism__work;

/* Allocates w's buffers for n_rows rows and n_ctx positions (w->k, nth,
   act_quant set) and starts its pool if missing; CISM_OK or OUT_OF_MEMORY
   with a message (w's buffers are then freed). */
cism_status cism__work_ensure(cism__work *w, const cism__hparams *hp, int64_t n_rows, int64_t n_ctx);
/* Frees the buffers (keeps the pool) / the pool too. */
void cism__work_free_buffers(cism__work *w);
void cism__work_free(cism__work *w);
/* n zeroed floats (at least one); sets *failed when out of memory. */
void *cism__alloc_floats(int64_t n, int *failed);
/* Bytes of w's buffers for n_rows rows and n_ctx positions. */
int64_t cism__work_bytes(const cism__hparams *hp, int64_t n_rows, int64_t n_ctx, int nth, int act_quant);

/* Where one layer keeps its K and V rows. A sliding-window layer whose window
   plus the slack below is well under the context keeps a ring of `ring`
   positions (position p in slot p % ring), each row written twice, at its slot
   and at slot + ring, so the window of any query is one contiguous run of
   slots; other layers keep every position (ring 0, slot = position). */
typedef struct cism__kv_layer {
    uint64_t off;      /* elements from the start of the cache */
    int64_t slots;     /* slots per KV head */
    int64_t ring;      /* 0 or the ring's period */
} cism__kv_layer;

/* Positions a ring keeps beyond window + n_batch: how far a rewind (chat
   reuse, speculative rollback) may reach back without re-evaluating. */
#define CISM__KV_SLACK 256

/* The layout of the caches for n_ctx positions and evals of n_batch tokens:
   fills kv[n_layers] when kv is not NULL; returns the elements of each cache. */
int64_t cism__kv_layout(const cism__hparams *hp, const cism__layer *layers, int64_t n_ctx, int64_t n_batch, cism__kv_layer *kv);
/* The cache row of (layer, KV head, position), and its second copy in a ring (NULL otherwise). */
void *cism__kv_row(const cism_session *s, void *cache, int64_t layer, int64_t head, int64_t pos);
void *cism__kv_row_copy(const cism_session *s, void *cache, int64_t layer, int64_t head, int64_t pos);
/* Whether K/V types k_type, v_type can hold this model's heads (a quantized type needs head_dim
   a multiple of 32) and the rotation CISM_PARAM_KV_ROTATE `rotate` gives it
   (*rot); CISM_OK or a failure with a message. */
cism_status cism__kv_check(const cism__hparams *hp, int32_t k_type, int32_t v_type, int64_t rotate, int *rot);
/* The V cache's type params ask for (CISM_PARAM_KV_TYPE_V, -1 = CISM_PARAM_KV_TYPE). */
int32_t cism__kv_type_v(const cism_params *params);

struct cism_spec;
struct cism_session {
    struct cism_spec *lookup;  /* CISM_GENERATE_LOOKUP's speculator, made on first use (speculative.c) */
    cism_model *model;
    const cism__kernels *k;
    int nth;
    int64_t n_ctx, n_batch;
    int32_t kv_type;        /* the K cache's (and short-convolution caches') type */
    int32_t kv_type_v;      /* the V cache's type (CISM_PARAM_KV_TYPE_V resolved) */
    int kv_rot;             /* rotated K/V/queries (CISM_PARAM_KV_ROTATE resolved; kv_quant.h) */
    uint64_t kv_row_bytes;  /* bytes of one K cache row (head_dim elements in kv_type) */
    uint64_t kv_row_bytes_v; /* bytes of one V cache row (in kv_type_v) */
    int logits_all;
    int act_quant;   /* CISM_PARAM_ACT_QUANT */
    int act_outliers; /* CISM_PARAM_ACT_OUTLIERS (act_outliers.c) */
    int32_t n_past;
    volatile int32_t cancel;

    /* KV cache: per layer [kv_head][slot] rows of head_dim elements in kv_type, kv_row_bytes each (cism__kv_layer) */
    void *k_cache, *v_cache;
    cism__kv_layer *kv;   /* [n_layers] */
    int64_t kv_elems;     /* elements of each of k_cache and v_cache */
    int32_t kv_hi;        /* one past the highest position written since the last reset */
    int32_t kv_min_keep;  /* a rewind below it re-evaluates the kept tokens (a loaded state without them) */
    /* short-convolution layers (layer_shortconv.c): [conv layer][n_ctx][dim] inputs in kv_type; NULL without them */
    void *conv_cache;

    cism__work w;    /* scratch for n_batch tokens, freed by cism_session_trim */

    /* CISM_PARAM_ACT_STATS (act_stats.c): per matmul input, per-column sums of
       squares, Gram blocks along the diagonal (act_gram_block > 1), rows summed */
    double *act_sums, *act_gram, *act_row;  /* act_row: one input row in double */
    int64_t *act_rows, *act_off;
    int64_t act_gram_block;
    /* and per attention layer, the sum of its keys after RoPE ([layer][kv_head * head_dim],
       cism_session_key_sums) over key_rows[layer] tokens */
    double *key_sums;
    int64_t *key_rows;
    /* and its queries after RoPE: per layer, [head * head_dim] sums then [head] sums of squares
       (cism_session_query_sums) over query_rows[layer] tokens */
    double *query_sums;
    int64_t *query_rows;

    struct cism__dn_state *dn;  /* Gated DeltaNet layers' recurrent state and checkpoints (deltanet.h); NULL without */

    int32_t *tokens; /* [n_ctx] the ids at positions 0..n_past-1 (cism_session_tokens, state.c) */

    float *logits;   /* [logit_rows][vocab] */
    int64_t logits_cap;   /* rows allocated */
    int32_t logit_rows;   /* rows valid after the last eval */
    int32_t last_n;       /* tokens of the last eval (its rows are 0..last_n-1) */

    int replay;           /* set while a cancelled eval recomputes its last kept token: not cancellable */
    cism_progress_callback progress;   /* cism_session_set_progress_callback */
    void *progress_data;
    /* Internal observer (tests): called after each completed chunk of an eval
       with the number of the eval's tokens done so far; NULL = none. */
    void (*chunk_hook)(cism_session *s, int64_t n_done, void *data);
    void *chunk_hook_data;
};

/* Tokens per attention unit in prefill (forward.c): each K/V block a unit
   widens to f32 serves its tokens x query heads (4 -> 32: prefill 2048 +7%,
   512 +3%, 128 unchanged on the real SmolLM2, docs/PEERS.md). */
#define CISM__ATT_TOKENS 32
/* Split-KV attention (forward.c): KV positions per split, the splits at fixed
   absolute positions [j * SPLIT, (j + 1) * SPLIT); rows of a pass whose
   partial results get their own units (decode, short verifies, batches). */
#define CISM__ATT_SPLIT 256
#define CISM__ATT_PART_ROWS 16

/* cism_session_eval without clearing a pending cancel request. */
cism_status cism__session_eval(cism_session *s, const int32_t *tokens, int32_t n_tokens);

/* One session's tokens in a forward pass: rows [row0, row0 + nt) of the
   work, at positions s->n_past.. of s's KV cache; logits of its last rows_out
   rows go to rows [out0, out0 + rows_out) of the pass's output. */
typedef struct cism__seq {
    cism_session *s;
    const int32_t *tokens;
    int64_t nt, row0;
    int64_t rows_out, out0;
    int64_t att_u0;  /* forward.c: its first attention unit */
    int64_t att_spl, att_j0, att_p0; /* forward.c: splits with units of their own (0: in-unit), the first split, first partial slot */
    int stop;        /* set when its cancel request was seen: its rows are meaningless */
} cism__seq;

/* Runs the transformer over the seqs' rows (n_seqs >= 1, their rows packed in
   order from row 0, in all <= w->n_rows) in w's pool, writing logits rows to
   out (rows of vocab floats). Every row gives the same bits as in any other
   pass (forward.c). Each seq's cancel flag is checked before every layer
   but the first unless `replay`; returns CISM_ERR_CANCELLED when every seq
   stopped, else CISM_OK (check each seq's stop and w->bad for its rows). KV
   entries past a seq's n_past are written either way. Does not move n_past. */
cism_status cism__forward_seqs(cism__work *w, cism__seq *seqs, int64_t n_seqs, float *out, int replay);

/* cism__forward_seqs for one session's tokens[0..nt) (nt <= n_batch) with its
   own work: logits for the last row (rows_out = 1), every row (rows_out = nt)
   or none, at s->logits + out_row0 * vocab. Sets *nonfinite. */
cism_status cism__forward(cism_session *s, const int32_t *tokens, int64_t nt, int rows_out, int64_t out_row0,
                          int *nonfinite);

/* The checks cism_session_eval makes of tokens for s (vocabulary, context);
   CISM_OK or a failure with a message. */
cism_status cism__session_check_tokens(const cism_session *s, const int32_t *tokens, int32_t n_tokens);
/* Grows s's logits to hold n rows; CISM_OK or OUT_OF_MEMORY. */
cism_status cism__session_logits_reserve(cism_session *s, int64_t n);
/* 1 if the model has a packed (q8, q4, ...) matrix: int8 activations apply. */
int cism__model_has_packed(const cism_model *m);
/* 1 if the n floats at v are all finite. */
int cism__all_finite(const float *v, int64_t n);

/* Activation statistics (act_stats.c). The inputs of a layer's matmuls, in the
   order of the forward pass's stages: */
enum { CISM__AS_ATTN = 0, CISM__AS_WO = 1, CISM__AS_FFN = 2, CISM__AS_DOWN = 3, CISM__AS_PER_LAYER = 4 };
/* Allocates the sums (CISM_PARAM_ACT_STATS = 1: squares only; G >= 2: also
   G x G Gram blocks); 0 on success. */
int cism__act_stats_init(cism_session *s, int64_t gram_block);
void cism__act_stats_free(cism_session *s);
/* int8 activations with outlier channels computed exactly (act_outliers.c). A
   quantized row is ldq bytes and ends in its cism__act8_out table; tmp:
   scratch of 4 x blocks floats. Returns 1 when x holds a NaN or an
   infinity. */
int cism__act8_quantize_split(const cism__kernels *k, const float *x, int64_t n, uint8_t *qrow, int64_t ldq,
                              float *tmp);
void cism__act8_add_outliers(const cism__kernels *k, int32_t dtype, const void *w, uint64_t row_bytes,
                             const uint8_t *xq, int64_t ldq, float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1);
/* Adds rows [t0, t1) of x (rows ld apart, cols wide) to the sums of input
   `which` of layer l (l = n_layers: the output head, which 0); no-op when the
   session does not collect. */
void cism__act_stats_add(cism_session *s, int64_t l, int which, const float *x, int64_t ld, int64_t t0, int64_t t1);
/* Adds key row k (head_dim values after RoPE) of KV head h of layer l to the
   key sums; no-op when the session does not collect. */
void cism__act_stats_key(cism_session *s, int64_t l, int64_t h, const float *k);
/* Adds query row q of head h of layer l to the query sums (no-op without them). */
void cism__act_stats_query(cism_session *s, int64_t l, int64_t h, const float *q);

#endif
