/* model.h - a loaded model: hyper-parameters and weights bound from the file. */
#ifndef CISM_MODEL_H
#define CISM_MODEL_H

#include "cism.h"
#include "file.h"

enum {
    CISM__ARCH_LLAMA = 0, CISM__ARCH_MISTRAL = 1, CISM__ARCH_QWEN2 = 2, CISM__ARCH_QWEN3 = 3, CISM__ARCH_GEMMA3 = 4,
    CISM__ARCH_SMOLLM3 = 5, CISM__ARCH_PHI3 = 6, CISM__ARCH_QWEN35 = 7, CISM__ARCH_LFM2 = 8
};
enum { CISM__ROPE_NONE = 0, CISM__ROPE_LINEAR = 1, CISM__ROPE_LLAMA3 = 2 };
/* the MLP's gate activation: SwiGLU (silu) or GeGLU (GELU, tanh approximation) */
enum { CISM__FFN_SILU = 0, CISM__FFN_GELU_TANH = 1 };
/* what a layer's token mixer is (model.layer_types) */
enum { CISM__LAYER_ATTENTION = 0, CISM__LAYER_SHORTCONV = 1, CISM__LAYER_DELTANET = 2 };
/* the longest short-convolution kernel (model.conv_kernel) */
#define CISM__CONV_MAX_KERNEL 16

typedef struct cism__hparams {
    int arch;
    int64_t vocab, dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, ctx_len, sliding_window;
    double norm_eps, rope_theta;
    int rope_type;
    double rope_factor, rope_low_freq, rope_high_freq;
    int64_t rope_orig_ctx;
    int tied, qkv_bias, qk_norm;
    int64_t rope_dim;           /* rotated dimensions of a head (partial RoPE: < head_dim), even */
    double rope_theta_local;    /* RoPE base of the sliding-window layers (Gemma 3); 0 = rope_theta */
    int ffn_act;                /* CISM__FFN_* */
    int post_norms;             /* RMSNorm of the attention and MLP outputs before their residual add (Gemma 3) */
    float embed_scale;          /* embeddings are multiplied by it (Gemma 3: sqrt(dim)); 1 = none */
    float attn_scale;           /* attention score scale (default 1/sqrt(head_dim)) */
    int64_t conv_kernel;        /* short-convolution layers (LFM2): kernel length over time; 0 without them */
    int conv_bias;              /* their in/out projections and convolution have biases */
    int64_t n_shortconv;        /* layers of kind CISM__LAYER_SHORTCONV */
    int attn_gate;              /* attention output multiplied by sigmoid of a second projection (Qwen3.5) */
    /* Gated DeltaNet layers (Qwen3.5's linear attention, layer_deltanet.c): key heads, value heads (a
       multiple), their dims, the causal conv's kernel; n_dn_layers of the layers are of that kind */
    int64_t dn_k_heads, dn_v_heads, dn_k_dim, dn_v_dim, dn_conv, n_dn_layers;
    int64_t n_kv_layers;        /* layers with a KV cache (attention) */
} cism__hparams;

/* A weight matrix [rows, cols] used in place from the file. */
typedef struct cism__weight {
    const void *data;
    int32_t dtype;
    int64_t rows, cols;
    uint64_t row_bytes;
} cism__weight;

typedef struct cism__layer {
    int kind;                                /* CISM__LAYER_* */
    int64_t window;                          /* sliding window in positions (a query sees the last `window`); 0 = all */
    int rope_table;                          /* -1: no RoPE on this layer (SmolLM3's NoPE layers); else 0 global, 1 local */
    const float *attn_norm, *ffn_norm;
    const float *post_attn_norm, *post_ffn_norm;  /* NULL unless post_norms */
    const float *q_bias, *k_bias, *v_bias;   /* NULL unless qkv_bias */
    const float *q_norm, *k_norm;            /* NULL unless qk_norm */
    const float *k_offset;                   /* blk.N.attn_k_offset: subtracted from the keys a quantized
                                                K cache stores (softmax-exact; docs/KV_CACHE.md); or NULL */
    const float *k_qdir;                     /* blk.N.attn_k_qdir: per KV head, the queries' main direction in
                                                the rotated frame, weighting a q4a key's rounding; or NULL */
    cism__weight wq, wk, wv, wo, gate, up, down;
    /* CISM__LAYER_SHORTCONV (layer_shortconv.c): in_proj [3 dim, dim] (B, C, x), out_proj [dim, dim],
       the depthwise kernel [dim][conv_kernel], biases (NULL unless conv_bias), its slot in the session's conv cache */
    cism__weight conv_in, conv_out;
    const float *conv_w, *conv_b, *conv_in_bias, *conv_out_bias;
    int64_t conv_slot;
    cism__weight wg;                         /* attention output gate (attn_gate) */
    struct {                                 /* a Gated DeltaNet layer's (CISM__LAYER_DELTANET) */
        cism__weight qkv, z, beta, alpha, out;
        const float *conv;                   /* [2 k_heads k_dim + v_heads v_dim][dn_conv] */
        const float *dt_bias, *a_log, *norm; /* [v_heads], [v_heads], [v_dim] */
        int64_t index;                       /* among the model's DeltaNet layers (session state) */
    } dn;
} cism__layer;

struct cism_model {
    volatile int32_t refs;
    cism__file file;
    cism__hparams hp;
    const char *arch_name;
    cism__weight tok_embd, output;   /* output aliases tok_embd when tied */
    const float *output_norm;
    cism__layer *layers;
    float *rope_inv_freq[2];         /* [rope_dim / 2] each: global layers', sliding-window layers' (may alias) */
    int n_rope_tables;
    int32_t bos_id, eos_id, pad_id;
    int32_t n_eos;
    int32_t *eos_ids;
    int64_t n_params, weight_bytes;
    int streams;                     /* counted in cism__x16_streaming (kernels.h) */
    int32_t weight_dtype;
    struct cism__tokenizer *tokenizer;   /* NULL when the file carries none */
};

void cism__model_retain(cism_model *model);
void cism__model_release(cism_model *model);

#endif
