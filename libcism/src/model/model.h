/* model.h - a loaded model: hyper-parameters and weights bound from the file. */
#ifndef CISM_MODEL_H
#define CISM_MODEL_H

#include "cism.h"
#include "file.h"

enum { CISM__ARCH_LLAMA = 0, CISM__ARCH_MISTRAL = 1, CISM__ARCH_QWEN2 = 2, CISM__ARCH_QWEN3 = 3 };
enum { CISM__ROPE_NONE = 0, CISM__ROPE_LINEAR = 1, CISM__ROPE_LLAMA3 = 2 };

typedef struct cism__hparams {
    int arch;
    int64_t vocab, dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, ctx_len, sliding_window;
    double norm_eps, rope_theta;
    int rope_type;
    double rope_factor, rope_low_freq, rope_high_freq;
    int64_t rope_orig_ctx;
    int tied, qkv_bias, qk_norm;
} cism__hparams;

/* A weight matrix [rows, cols] used in place from the file. */
typedef struct cism__weight {
    const void *data;
    int32_t dtype;
    int64_t rows, cols;
    uint64_t row_bytes;
} cism__weight;

typedef struct cism__layer {
    const float *attn_norm, *ffn_norm;
    const float *q_bias, *k_bias, *v_bias;   /* NULL unless qkv_bias */
    const float *q_norm, *k_norm;            /* NULL unless qk_norm */
    cism__weight wq, wk, wv, wo, gate, up, down;
} cism__layer;

struct cism_model {
    volatile int32_t refs;
    cism__file file;
    cism__hparams hp;
    const char *arch_name;
    cism__weight tok_embd, output;   /* output aliases tok_embd when tied */
    const float *output_norm;
    cism__layer *layers;
    float *rope_inv_freq;            /* [head_dim / 2] */
    int32_t bos_id, eos_id, pad_id;
    int32_t n_eos;
    int32_t *eos_ids;
    int64_t n_params, weight_bytes;
    int32_t weight_dtype;
    struct cism__tokenizer *tokenizer;   /* NULL when the file carries none */
};

void cism__model_retain(cism_model *model);
void cism__model_release(cism_model *model);

#endif
