/* model.c - turning a checked .cism file into a runnable model, and the
 * model query API (info and metadata). */
#include "model.h"
#include "../core/error.h"
#include "../core/params.h"
#include "../kernels/kernels.h"
#include "../kernels/quant.h"
#include "../tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIM 65536
#define MAX_LAYERS 512
#define MAX_HEADS 1024
#define MAX_HEAD_DIM 1024
#define MAX_VOCAB (1 << 24)
#define MAX_CTX (1 << 24)

/* ---- metadata helpers ------------------------------------------------------- */
static int64_t le_i64(const uint8_t *p) {
    uint64_t v = 0;
    int i;
    for (i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return (int64_t)v;
}
static double le_f64(const uint8_t *p) {
    uint64_t v = (uint64_t)le_i64(p);
    double d;
    memcpy(&d, &v, 8);
    return d;
}

typedef struct loadctx {
    const char *label;
    const cism__file *f;
    int check_values;   /* CISM_PARAM_CHECK_WEIGHTS */
} loadctx;

/* With CISM_PARAM_CHECK_WEIGHTS: the largest |value| a norm weight or bias may
   have. Finite but huge ones (FLT_MAX) overflow the activations or, through the
   int8 paths, give finite garbage; trained models stay far below. */
#define CISM__VECTOR_LIMIT 1.0e6f

/* Reads an INT key. Returns 1 found, 0 absent (def used), -1 wrong type (message set). */
static int meta_int(loadctx *c, const char *key, int64_t def, int64_t *out) {
    const cism__meta_entry *e = cism__file_meta(c->f, key);
    *out = def;
    if (!e) return 0;
    if (e->type != CISM_META_INT) {
        cism__fail(CISM_ERR_FORMAT, "%s: metadata '%s' must be an integer", c->label, key);
        return -1;
    }
    *out = le_i64(e->payload);
    return 1;
}
static int meta_float(loadctx *c, const char *key, double def, double *out) {
    const cism__meta_entry *e = cism__file_meta(c->f, key);
    *out = def;
    if (!e) return 0;
    if (e->type == CISM_META_INT) { *out = (double)le_i64(e->payload); return 1; }
    if (e->type != CISM_META_FLOAT) {
        cism__fail(CISM_ERR_FORMAT, "%s: metadata '%s' must be a number", c->label, key);
        return -1;
    }
    *out = le_f64(e->payload);
    if (!isfinite(*out)) {
        cism__fail(CISM_ERR_FORMAT, "%s: metadata '%s' is not a finite number", c->label, key);
        return -1;
    }
    return 1;
}
/* STRING into buf (NUL-terminated). */
static int meta_str(loadctx *c, const char *key, const char *def, char *buf, size_t cap) {
    const cism__meta_entry *e = cism__file_meta(c->f, key);
    size_t n;
    if (!e) {
        snprintf(buf, cap, "%s", def ? def : "");
        return 0;
    }
    if (e->type != CISM_META_STRING) {
        cism__fail(CISM_ERR_FORMAT, "%s: metadata '%s' must be a string", c->label, key);
        return -1;
    }
    n = e->count < cap - 1 ? (size_t)e->count : cap - 1;
    memcpy(buf, e->payload, n);
    buf[n] = 0;
    return 1;
}

static cism_status require_int(loadctx *c, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    int r = meta_int(c, key, 0, out);
    if (r < 0) return CISM_ERR_FORMAT;
    if (r == 0) return cism__fail(CISM_ERR_FORMAT, "%s: required metadata '%s' is missing", c->label, key);
    if (*out < lo || *out > hi)
        return cism__fail(CISM_ERR_FORMAT, "%s: metadata '%s' = %lld is outside %lld..%lld", c->label, key,
                          (long long)*out, (long long)lo, (long long)hi);
    return CISM_OK;
}

/* ---- hyper-parameters ---------------------------------------------------------- */
/* What each family needs and allows: RULE_NO refuses the feature, RULE_YES
   requires it, RULE_MAY leaves it to the file. */
enum { RULE_NO = 0, RULE_YES = 1, RULE_MAY = 2 };
typedef struct family {
    const char *name;
    int arch;
    int qkv_bias, qk_norm, post_norms, gelu;
} family;
static const family g_families[] = {
    {"llama", CISM__ARCH_LLAMA, RULE_NO, RULE_NO, RULE_NO, RULE_NO},
    {"mistral", CISM__ARCH_MISTRAL, RULE_NO, RULE_NO, RULE_NO, RULE_NO},
    {"qwen2", CISM__ARCH_QWEN2, RULE_YES, RULE_NO, RULE_NO, RULE_NO},
    {"qwen3", CISM__ARCH_QWEN3, RULE_NO, RULE_YES, RULE_NO, RULE_NO},
    {"gemma3", CISM__ARCH_GEMMA3, RULE_NO, RULE_YES, RULE_YES, RULE_YES},
    {"smollm3", CISM__ARCH_SMOLLM3, RULE_NO, RULE_NO, RULE_NO, RULE_NO},
    {"phi3", CISM__ARCH_PHI3, RULE_NO, RULE_NO, RULE_NO, RULE_NO},
    {"qwen35", CISM__ARCH_QWEN35, RULE_NO, RULE_YES, RULE_NO, RULE_NO},
    {"lfm2", CISM__ARCH_LFM2, RULE_NO, RULE_YES, RULE_NO, RULE_NO},
};
#define SUPPORTED_NAMES "llama, mistral, qwen2, qwen3, gemma3, smollm3, phi3, qwen35, lfm2"

static cism_status family_rule(loadctx *c, const char *arch, int rule, int has, const char *what, const char *key) {
    if (has && rule == RULE_NO)
        return cism__fail(CISM_ERR_UNSUPPORTED, "%s: %s is not supported for architecture '%s'", c->label, what, arch);
    if (!has && rule == RULE_YES)
        return cism__fail(CISM_ERR_FORMAT, "%s: %s models need %s (%s)", c->label, arch, what, key);
    return CISM_OK;
}

static cism_status read_hparams(loadctx *c, cism__hparams *hp, const char **arch_name) {
    char arch[64], rope[64], act[64];
    int64_t v;
    cism_status st;
    int r;
    const family *fam;
    double scale;
    memset(hp, 0, sizeof(*hp));
    r = meta_str(c, "general.architecture", NULL, arch, sizeof(arch));
    if (r < 0) return CISM_ERR_FORMAT;
    if (r == 0) return cism__fail(CISM_ERR_FORMAT, "%s: required metadata 'general.architecture' is missing", c->label);
    for (r = 0; r < (int)(sizeof(g_families) / sizeof(g_families[0])); r++)
        if (strcmp(arch, g_families[r].name) == 0) break;
    if (r == (int)(sizeof(g_families) / sizeof(g_families[0])))
        return cism__fail(CISM_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (supported: %s)", c->label, arch, SUPPORTED_NAMES);
    fam = &g_families[r];
    hp->arch = fam->arch;
    *arch_name = fam->name;

    if ((st = require_int(c, "model.vocab_size", 1, MAX_VOCAB, &hp->vocab))) return st;
    if ((st = require_int(c, "model.dim", 1, MAX_DIM, &hp->dim))) return st;
    if ((st = require_int(c, "model.n_layers", 1, MAX_LAYERS, &hp->n_layers))) return st;
    if ((st = require_int(c, "model.n_heads", 1, MAX_HEADS, &hp->n_heads))) return st;
    if ((st = require_int(c, "model.n_kv_heads", 1, MAX_HEADS, &hp->n_kv_heads))) return st;
    if ((st = require_int(c, "model.head_dim", 2, MAX_HEAD_DIM, &hp->head_dim))) return st;
    if ((st = require_int(c, "model.ffn_dim", 1, MAX_DIM * 4, &hp->ffn_dim))) return st;
    if ((st = require_int(c, "model.context_length", 1, MAX_CTX, &hp->ctx_len))) return st;
    if ((st = require_int(c, "model.tied_embeddings", 0, 1, &v))) return st;
    hp->tied = (int)v;
    if (hp->n_heads % hp->n_kv_heads != 0)
        return cism__fail(CISM_ERR_FORMAT, "%s: n_heads (%lld) is not a multiple of n_kv_heads (%lld)", c->label,
                          (long long)hp->n_heads, (long long)hp->n_kv_heads);
    if (hp->head_dim % 2 != 0) return cism__fail(CISM_ERR_FORMAT, "%s: head_dim %lld is odd; RoPE needs pairs", c->label, (long long)hp->head_dim);
    r = meta_float(c, "model.norm_eps", 0, &hp->norm_eps);
    if (r < 0) return CISM_ERR_FORMAT;
    if (r == 0) return cism__fail(CISM_ERR_FORMAT, "%s: required metadata 'model.norm_eps' is missing", c->label);
    if (!(hp->norm_eps > 0 && hp->norm_eps < 1)) return cism__fail(CISM_ERR_FORMAT, "%s: model.norm_eps %g is outside (0, 1)", c->label, hp->norm_eps);
    r = meta_float(c, "model.rope_theta", 0, &hp->rope_theta);
    if (r < 0) return CISM_ERR_FORMAT;
    if (r == 0) return cism__fail(CISM_ERR_FORMAT, "%s: required metadata 'model.rope_theta' is missing", c->label);
    if (!(hp->rope_theta > 1)) return cism__fail(CISM_ERR_FORMAT, "%s: model.rope_theta %g must be > 1", c->label, hp->rope_theta);

    if (meta_str(c, "model.rope_scaling.type", "none", rope, sizeof(rope)) < 0) return CISM_ERR_FORMAT;
    if (meta_float(c, "model.rope_scaling.factor", 1.0, &hp->rope_factor) < 0) return CISM_ERR_FORMAT;
    if (meta_float(c, "model.rope_scaling.low_freq_factor", 1.0, &hp->rope_low_freq) < 0) return CISM_ERR_FORMAT;
    if (meta_float(c, "model.rope_scaling.high_freq_factor", 4.0, &hp->rope_high_freq) < 0) return CISM_ERR_FORMAT;
    if (meta_int(c, "model.rope_scaling.original_context_length", 8192, &hp->rope_orig_ctx) < 0) return CISM_ERR_FORMAT;
    if (strcmp(rope, "none") == 0) hp->rope_type = CISM__ROPE_NONE;
    else if (strcmp(rope, "linear") == 0) hp->rope_type = CISM__ROPE_LINEAR;
    else if (strcmp(rope, "llama3") == 0) hp->rope_type = CISM__ROPE_LLAMA3;
    else return cism__fail(CISM_ERR_UNSUPPORTED, "%s: RoPE scaling type '%s' is not supported (supported: none, linear, llama3)", c->label, rope);
    if (hp->rope_type != CISM__ROPE_NONE && !(hp->rope_factor >= 1.0 && hp->rope_factor <= 1024.0))
        return cism__fail(CISM_ERR_FORMAT, "%s: model.rope_scaling.factor %g is outside 1..1024", c->label, hp->rope_factor);
    if (hp->rope_type == CISM__ROPE_LLAMA3 &&
        !(hp->rope_low_freq > 0 && hp->rope_high_freq > hp->rope_low_freq && hp->rope_orig_ctx > 0))
        return cism__fail(CISM_ERR_FORMAT, "%s: llama3 RoPE scaling needs 0 < low_freq_factor < high_freq_factor and original_context_length > 0", c->label);

    if (meta_int(c, "model.attn_qkv_bias", 0, &v) < 0) return CISM_ERR_FORMAT;
    hp->qkv_bias = v != 0;
    if (meta_int(c, "model.qk_norm", 0, &v) < 0) return CISM_ERR_FORMAT;
    hp->qk_norm = v != 0;
    if (meta_int(c, "model.sliding_window", 0, &hp->sliding_window) < 0) return CISM_ERR_FORMAT;
    if (hp->sliding_window < 0) return cism__fail(CISM_ERR_FORMAT, "%s: model.sliding_window is negative", c->label);

    if (meta_int(c, "model.rope_dim", hp->head_dim, &hp->rope_dim) < 0) return CISM_ERR_FORMAT;
    if (hp->rope_dim < 2 || hp->rope_dim > hp->head_dim || hp->rope_dim % 2)
        return cism__fail(CISM_ERR_FORMAT, "%s: model.rope_dim %lld must be even and within 2..head_dim (%lld)", c->label,
                          (long long)hp->rope_dim, (long long)hp->head_dim);
    if (meta_float(c, "model.rope_theta_local", 0.0, &hp->rope_theta_local) < 0) return CISM_ERR_FORMAT;
    if (hp->rope_theta_local != 0 && !(hp->rope_theta_local > 1))
        return cism__fail(CISM_ERR_FORMAT, "%s: model.rope_theta_local %g must be > 1", c->label, hp->rope_theta_local);
    if (meta_str(c, "model.ffn_activation", "silu", act, sizeof(act)) < 0) return CISM_ERR_FORMAT;
    if (strcmp(act, "silu") == 0) hp->ffn_act = CISM__FFN_SILU;
    else if (strcmp(act, "gelu_tanh") == 0) hp->ffn_act = CISM__FFN_GELU_TANH;
    else return cism__fail(CISM_ERR_UNSUPPORTED, "%s: MLP activation '%s' is not supported (supported: silu, gelu_tanh)", c->label, act);
    if (meta_int(c, "model.post_norms", 0, &v) < 0) return CISM_ERR_FORMAT;
    hp->post_norms = v != 0;
    if (meta_float(c, "model.embedding_scale", 1.0, &scale) < 0) return CISM_ERR_FORMAT;
    if (!(scale > 0 && scale < 1e6)) return cism__fail(CISM_ERR_FORMAT, "%s: model.embedding_scale %g is outside (0, 1e6)", c->label, scale);
    hp->embed_scale = (float)scale;
    if (meta_float(c, "model.attention_scale", 1.0 / sqrt((double)hp->head_dim), &scale) < 0) return CISM_ERR_FORMAT;
    if (!(scale > 0 && scale < 1e6)) return cism__fail(CISM_ERR_FORMAT, "%s: model.attention_scale %g is outside (0, 1e6)", c->label, scale);
    hp->attn_scale = (float)scale;
    if (meta_int(c, "model.conv_kernel", 0, &hp->conv_kernel) < 0) return CISM_ERR_FORMAT;
    if (hp->conv_kernel < 0 || hp->conv_kernel > CISM__CONV_MAX_KERNEL)
        return cism__fail(CISM_ERR_FORMAT, "%s: model.conv_kernel %lld is outside 1..%d", c->label, (long long)hp->conv_kernel,
                          CISM__CONV_MAX_KERNEL);
    if (meta_int(c, "model.conv_bias", 0, &v) < 0) return CISM_ERR_FORMAT;
    hp->conv_bias = v != 0;
    if (meta_int(c, "model.attn_output_gate", 0, &v) < 0) return CISM_ERR_FORMAT;
    hp->attn_gate = v != 0;
    if (meta_int(c, "model.linear_n_k_heads", 0, &hp->dn_k_heads) < 0 || meta_int(c, "model.linear_n_v_heads", 0, &hp->dn_v_heads) < 0 ||
        meta_int(c, "model.linear_k_head_dim", 0, &hp->dn_k_dim) < 0 || meta_int(c, "model.linear_v_head_dim", 0, &hp->dn_v_dim) < 0 ||
        meta_int(c, "model.linear_conv_kernel", 0, &hp->dn_conv) < 0)
        return CISM_ERR_FORMAT;

    /* family rules */
    if ((st = family_rule(c, *arch_name, fam->qkv_bias, hp->qkv_bias, "q/k/v projection biases", "model.attn_qkv_bias = 1")) ||
        (st = family_rule(c, *arch_name, fam->qk_norm, hp->qk_norm, "q/k normalization", "model.qk_norm = 1")) ||
        (st = family_rule(c, *arch_name, fam->post_norms, hp->post_norms, "norms after attention and MLP", "model.post_norms = 1")) ||
        (st = family_rule(c, *arch_name, fam->gelu, hp->ffn_act == CISM__FFN_GELU_TANH, "the GELU (tanh) MLP",
                          "model.ffn_activation = gelu_tanh")))
        return st;
    return CISM_OK;
}

/* An INT_ARRAY of n per-layer values each in lo..hi into out; absent: out untouched (0). */
static cism_status layer_ints(loadctx *c, const char *key, int64_t n, int64_t lo, int64_t hi, int64_t *out, int *found) {
    const cism__meta_entry *e = cism__file_meta(c->f, key);
    int64_t i;
    *found = e != NULL;
    if (!e) return CISM_OK;
    if (e->type != CISM_META_INT_ARRAY) return cism__fail(CISM_ERR_FORMAT, "%s: metadata '%s' must be an integer array", c->label, key);
    if ((int64_t)e->count != n)
        return cism__fail(CISM_ERR_FORMAT, "%s: metadata '%s' has %llu entries; the model has %lld layers", c->label, key,
                          (unsigned long long)e->count, (long long)n);
    for (i = 0; i < n; i++) {
        out[i] = le_i64(e->payload + 8 * i);
        if (out[i] < lo || out[i] > hi)
            return cism__fail(CISM_ERR_FORMAT, "%s: metadata '%s'[%lld] = %lld is outside %lld..%lld", c->label, key, (long long)i,
                              (long long)out[i], (long long)lo, (long long)hi);
    }
    return CISM_OK;
}

/* The Gated DeltaNet sizes (model.linear_*), required once a layer is of that kind. */
static cism_status check_deltanet_hparams(loadctx *c, const cism__hparams *hp) {
    if (hp->dn_k_heads < 1 || hp->dn_k_heads > MAX_HEADS || hp->dn_v_heads < 1 || hp->dn_v_heads > MAX_HEADS ||
        hp->dn_k_dim < 1 || hp->dn_k_dim > MAX_HEAD_DIM || hp->dn_v_dim < 1 || hp->dn_v_dim > MAX_HEAD_DIM ||
        hp->dn_conv < 1 || hp->dn_conv > 64)
        return cism__fail(CISM_ERR_FORMAT, "%s: linear_attention layers need model.linear_n_k_heads, linear_n_v_heads (1..%d), "
                          "linear_k_head_dim, linear_v_head_dim (1..%d) and linear_conv_kernel (1..64)", c->label, MAX_HEADS,
                          MAX_HEAD_DIM);
    if (hp->dn_v_heads % hp->dn_k_heads)
        return cism__fail(CISM_ERR_FORMAT, "%s: model.linear_n_v_heads (%lld) is not a multiple of linear_n_k_heads (%lld)", c->label,
                          (long long)hp->dn_v_heads, (long long)hp->dn_k_heads);
    return CISM_OK;
}

/* model.layer_types (STRING_ARRAY, one per layer; absent: all attention):
   each layer's token mixer. */
static const char *const g_layer_kinds[] = {"attention", "shortconv", "linear_attention"};
#define LAYER_KIND_NAMES "attention, shortconv, linear_attention"

static cism_status read_layer_kinds(loadctx *c, cism_model *m) {
    const cism__meta_entry *e = cism__file_meta(c->f, "model.layer_types");
    const uint8_t *p;
    int64_t l;
    if (!e) return CISM_OK;
    if (e->type != CISM_META_STRING_ARRAY)
        return cism__fail(CISM_ERR_FORMAT, "%s: metadata 'model.layer_types' must be a string array", c->label);
    if ((int64_t)e->count != m->hp.n_layers)
        return cism__fail(CISM_ERR_FORMAT, "%s: metadata 'model.layer_types' has %llu entries; the model has %lld layers", c->label,
                          (unsigned long long)e->count, (long long)m->hp.n_layers);
    for (p = e->payload, l = 0; l < m->hp.n_layers; l++) { /* the file layer checked each length against the payload */
        uint32_t n = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        int k, found = -1;
        for (k = 0; k < (int)(sizeof(g_layer_kinds) / sizeof(g_layer_kinds[0])); k++)
            if (g_layer_kinds[k] && strlen(g_layer_kinds[k]) == n && memcmp(p + 4, g_layer_kinds[k], n) == 0) found = k;
        if (found < 0)
            return cism__fail(CISM_ERR_UNSUPPORTED, "%s: layer %lld is of type '%.*s', which is not supported (supported: %s)", c->label,
                              (long long)l, (int)(n < 64 ? n : 64), (const char *)(p + 4), LAYER_KIND_NAMES);
        m->layers[l].kind = found;
        if (found == CISM__LAYER_SHORTCONV) m->layers[l].conv_slot = m->hp.n_shortconv++;
        if (found == CISM__LAYER_DELTANET) m->layers[l].dn.index = m->hp.n_dn_layers++;
        p += 4 + n;
    }
    if (m->hp.n_shortconv > 0 && m->hp.conv_kernel == 0)
        return cism__fail(CISM_ERR_FORMAT, "%s: short-convolution layers need model.conv_kernel", c->label);
    return m->hp.n_dn_layers ? check_deltanet_hparams(c, &m->hp) : CISM_OK;
}

/* Per-layer attributes: the sliding-window layers (model.layer_sliding, 1 =
   the window of model.sliding_window; absent: every layer when a window is
   set) and the layers with RoPE (model.layer_rope; absent: all). */
static cism_status read_layer_attrs(loadctx *c, cism_model *m) {
    const cism__hparams *hp = &m->hp;
    int64_t *v = (int64_t *)malloc((size_t)hp->n_layers * sizeof(int64_t)), l;
    int found;
    cism_status st;
    if (!v) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "%s: out of memory", c->label);
    for (l = 0; l < hp->n_layers; l++) v[l] = 1;
    if ((st = layer_ints(c, "model.layer_sliding", hp->n_layers, 0, 1, v, &found))) goto done;
    if (found && hp->sliding_window == 0) {
        st = cism__fail(CISM_ERR_FORMAT, "%s: metadata 'model.layer_sliding' needs model.sliding_window", c->label);
        goto done;
    }
    for (l = 0; l < hp->n_layers; l++) {
        m->layers[l].window = v[l] ? hp->sliding_window : 0;
        v[l] = 1;
    }
    if ((st = layer_ints(c, "model.layer_rope", hp->n_layers, 0, 1, v, &found))) goto done;
    for (l = 0; l < hp->n_layers; l++)
        m->layers[l].rope_table = !v[l] ? -1 : (hp->rope_theta_local != 0 && m->layers[l].window > 0 ? 1 : 0);
done:
    free(v);
    return st;
}

/* ---- tensor binding --------------------------------------------------------------- */
static cism_status bind_weight(loadctx *c, const char *name, int64_t rows, int64_t cols, cism__weight *w) {
    cism__tensor_entry *t = cism__file_tensor(c->f, name);
    if (!t) return cism__fail(CISM_ERR_FORMAT, "%s: tensor '%s' is missing", c->label, name);
    if (t->n_dims != 2 || t->dims[0] != rows || t->dims[1] != cols)
        return cism__fail(CISM_ERR_FORMAT, "%s: tensor '%s' should have shape [%lld, %lld] for these hyper-parameters", c->label,
                          name, (long long)rows, (long long)cols);
    if (cism__dtype_is_x16(t->dtype) && rows % CISM__X16 != 0)
        return cism__fail(CISM_ERR_FORMAT, "%s: tensor '%s' is %s, which needs a multiple of %d rows (it has %lld)", c->label,
                          name, cism_dtype_name(t->dtype), CISM__X16, (long long)rows);
    t->used = 1;
    w->data = t->data;
    w->dtype = t->dtype;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = cism__row_bytes(t->dtype, cols);
    return CISM_OK;
}

static cism_status bind_vector(loadctx *c, const char *name, int64_t n, const float **out) {
    cism__tensor_entry *t = cism__file_tensor(c->f, name);
    int64_t i;
    const float *v;
    if (!t) return cism__fail(CISM_ERR_FORMAT, "%s: tensor '%s' is missing", c->label, name);
    if (t->n_dims != 1 || t->dims[0] != n)
        return cism__fail(CISM_ERR_FORMAT, "%s: tensor '%s' should have shape [%lld]", c->label, name, (long long)n);
    if (t->dtype != CISM_DTYPE_F32)
        return cism__fail(CISM_ERR_FORMAT, "%s: tensor '%s' must be f32 (norm weights and biases are never compressed)", c->label, name);
    v = (const float *)(const void *)t->data;
    for (i = 0; i < n; i++)
        if (!isfinite(v[i])) return cism__fail(CISM_ERR_FORMAT, "%s: tensor '%s' holds NaN or infinity at %lld", c->label, name, (long long)i);
    if (c->check_values)
        for (i = 0; i < n; i++)
            if (fabsf(v[i]) > CISM__VECTOR_LIMIT)
                return cism__fail(CISM_ERR_FORMAT, "%s: tensor '%s' holds %g at %lld, beyond the +-%g a norm weight or bias can "
                                  "have without overflowing the activations (corrupt weights?)", c->label, name, (double)v[i],
                                  (long long)i, (double)CISM__VECTOR_LIMIT);
    t->used = 1;
    *out = v;
    return CISM_OK;
}

static cism_status check_weight_values(loadctx *c, const char *name, const cism__weight *w) {
    float *buf = (float *)malloc((size_t)w->cols * sizeof(float));
    int64_t r, i;
    if (!buf) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "%s: out of memory", c->label);
    for (r = 0; r < w->rows; r++) { /* packed rows decode through their scales: a NaN/Inf scale shows */
        cism__matrix_row_f32(w->dtype, w->data, w->row_bytes, w->cols, r, buf);
        for (i = 0; i < w->cols; i++)
            if (!isfinite(buf[i])) {
                free(buf);
                return cism__fail(CISM_ERR_FORMAT, "%s: tensor '%s' holds NaN or infinity (row %lld, column %lld)", c->label,
                                  name, (long long)r, (long long)i);
            }
    }
    free(buf);
    return CISM_OK;
}

static void account(cism_model *m, const cism__weight *w) {
    m->n_params += w->rows * w->cols;
}

/* blk.<l>.<suffix> as a [rows, cols] matrix; by_head: split by head rows
   (Q/K/V), where an interleaved group may not straddle two heads. Keeps the
   largest matrix's dtype as the model's. */
static cism_status bind_layer_matrix(loadctx *c, cism_model *m, int64_t l, const char *suffix, int64_t rows, int64_t cols,
                                     int by_head, int check_values, int64_t *largest, cism__weight *w) {
    char name[64];
    cism_status st;
    snprintf(name, sizeof(name), "blk.%lld.%s", (long long)l, suffix);
    if ((st = bind_weight(c, name, rows, cols, w))) return st;
    if (by_head && cism__dtype_is_x16(w->dtype) && m->hp.head_dim % CISM__X16 != 0)
        return cism__fail(CISM_ERR_FORMAT, "%s: tensor '%s' is %s, which needs head_dim to be a multiple of %d (it is %lld)",
                          c->label, name, cism_dtype_name(w->dtype), CISM__X16, (long long)m->hp.head_dim);
    if (check_values && (st = check_weight_values(c, name, w))) return st;
    account(m, w);
    if (w->rows * w->cols > *largest) {
        *largest = w->rows * w->cols;
        m->weight_dtype = w->dtype;
    }
    return CISM_OK;
}

static cism_status bind_layer_vector(loadctx *c, int64_t l, const char *suffix, int64_t n, const float **out) {
    char name[64];
    snprintf(name, sizeof(name), "blk.%lld.%s", (long long)l, suffix);
    return bind_vector(c, name, n, out);
}

/* An attention layer's tensors: Q/K/V/output, biases, q/k norms. */
static cism_status bind_attention(loadctx *c, cism_model *m, int64_t l, int check_values, int64_t *largest) {
    const cism__hparams *hp = &m->hp;
    cism__layer *L = &m->layers[l];
    int64_t q_rows = hp->n_heads * hp->head_dim, kv_rows = hp->n_kv_heads * hp->head_dim;
    cism_status st;
    if ((st = bind_layer_matrix(c, m, l, "attn_q", q_rows, hp->dim, 1, check_values, largest, &L->wq)) ||
        (st = bind_layer_matrix(c, m, l, "attn_k", kv_rows, hp->dim, 1, check_values, largest, &L->wk)) ||
        (st = bind_layer_matrix(c, m, l, "attn_v", kv_rows, hp->dim, 1, check_values, largest, &L->wv)) ||
        (st = bind_layer_matrix(c, m, l, "attn_output", hp->dim, q_rows, 0, check_values, largest, &L->wo)))
        return st;
    if (hp->qkv_bias && ((st = bind_layer_vector(c, l, "attn_q_bias", q_rows, &L->q_bias)) ||
                         (st = bind_layer_vector(c, l, "attn_k_bias", kv_rows, &L->k_bias)) ||
                         (st = bind_layer_vector(c, l, "attn_v_bias", kv_rows, &L->v_bias))))
        return st;
    if (hp->qk_norm && ((st = bind_layer_vector(c, l, "attn_q_norm", hp->head_dim, &L->q_norm)) ||
                        (st = bind_layer_vector(c, l, "attn_k_norm", hp->head_dim, &L->k_norm))))
        return st;
    if (hp->attn_gate && (st = bind_layer_matrix(c, m, l, "attn_gate", q_rows, hp->dim, 1, check_values, largest, &L->wg)))
        return st;
    { /* optional: the key offsets and query directions a calibrated conversion stores */
        char name[64];
        snprintf(name, sizeof(name), "blk.%lld.attn_k_offset", (long long)l);
        if (cism__file_tensor(c->f, name) && (st = bind_vector(c, name, kv_rows, &L->k_offset))) return st;
        snprintf(name, sizeof(name), "blk.%lld.attn_k_qdir", (long long)l);
        if (cism__file_tensor(c->f, name) && (st = bind_vector(c, name, kv_rows, &L->k_qdir))) return st;
    }
    return CISM_OK;
}

/* A Gated DeltaNet layer's tensors (convert.MIXER_TENSORS["linear_attention"]): the conv kernel is
   [channels, 1, width] in f32, as the checkpoint's Conv1d holds it. */
static cism_status bind_deltanet(loadctx *c, cism_model *m, int64_t l, int check_values, int64_t *largest) {
    const cism__hparams *hp = &m->hp;
    cism__layer *L = &m->layers[l];
    int64_t kd = hp->dn_k_heads * hp->dn_k_dim, vd = hp->dn_v_heads * hp->dn_v_dim, ch = 2 * kd + vd, i;
    char name[64];
    cism__tensor_entry *t;
    cism_status st;
    if ((st = bind_layer_matrix(c, m, l, "ssm_qkv", ch, hp->dim, 0, check_values, largest, &L->dn.qkv)) ||
        (st = bind_layer_matrix(c, m, l, "ssm_z", vd, hp->dim, 0, check_values, largest, &L->dn.z)) ||
        (st = bind_layer_matrix(c, m, l, "ssm_beta", hp->dn_v_heads, hp->dim, 0, check_values, largest, &L->dn.beta)) ||
        (st = bind_layer_matrix(c, m, l, "ssm_alpha", hp->dn_v_heads, hp->dim, 0, check_values, largest, &L->dn.alpha)) ||
        (st = bind_layer_matrix(c, m, l, "ssm_out", hp->dim, vd, 0, check_values, largest, &L->dn.out)) ||
        (st = bind_layer_vector(c, l, "ssm_dt_bias", hp->dn_v_heads, &L->dn.dt_bias)) ||
        (st = bind_layer_vector(c, l, "ssm_a_log", hp->dn_v_heads, &L->dn.a_log)) ||
        (st = bind_layer_vector(c, l, "ssm_norm", hp->dn_v_dim, &L->dn.norm)))
        return st;
    snprintf(name, sizeof(name), "blk.%lld.ssm_conv", (long long)l);
    t = cism__file_tensor(c->f, name);
    if (!t) return cism__fail(CISM_ERR_FORMAT, "%s: tensor '%s' is missing", c->label, name);
    if (t->n_dims != 3 || t->dims[0] != ch || t->dims[1] != 1 || t->dims[2] != hp->dn_conv || t->dtype != CISM_DTYPE_F32)
        return cism__fail(CISM_ERR_FORMAT, "%s: tensor '%s' should be f32 of shape [%lld, 1, %lld]", c->label, name, (long long)ch,
                          (long long)hp->dn_conv);
    L->dn.conv = (const float *)(const void *)t->data;
    for (i = 0; i < ch * hp->dn_conv; i++)
        if (!isfinite(L->dn.conv[i])) return cism__fail(CISM_ERR_FORMAT, "%s: tensor '%s' holds NaN or infinity", c->label, name);
    for (i = 0; i < hp->dn_v_heads; i++)
        if (L->dn.a_log[i] > 80.0f)
            return cism__fail(CISM_ERR_FORMAT, "%s: blk.%lld.ssm_a_log holds %g: exp of it overflows", c->label, (long long)l,
                              (double)L->dn.a_log[i]);
    t->used = 1;
    return CISM_OK;
}

/* A short-convolution layer's tensors (LFM2, layer_shortconv.c): in_proj (B, C,
   x), the depthwise kernel (flat, [dim][conv_kernel], f32 like every vector),
   out_proj, and their biases with model.conv_bias. */
static cism_status bind_shortconv(loadctx *c, cism_model *m, int64_t l, int check_values, int64_t *largest) {
    const cism__hparams *hp = &m->hp;
    cism__layer *L = &m->layers[l];
    cism_status st;
    if ((st = bind_layer_matrix(c, m, l, "conv_in", 3 * hp->dim, hp->dim, 0, check_values, largest, &L->conv_in)) ||
        (st = bind_layer_matrix(c, m, l, "conv_out", hp->dim, hp->dim, 0, check_values, largest, &L->conv_out)) ||
        (st = bind_layer_vector(c, l, "conv_kernel", hp->dim * hp->conv_kernel, &L->conv_w)))
        return st;
    if (hp->conv_bias && ((st = bind_layer_vector(c, l, "conv_bias", hp->dim, &L->conv_b)) ||
                          (st = bind_layer_vector(c, l, "conv_in_bias", 3 * hp->dim, &L->conv_in_bias)) ||
                          (st = bind_layer_vector(c, l, "conv_out_bias", hp->dim, &L->conv_out_bias))))
        return st;
    return CISM_OK;
}

static cism_status bind_model(loadctx *c, cism_model *m, int check_values) {
    const cism__hparams *hp = &m->hp;
    int64_t l;
    uint32_t i;
    cism_status st;
    int64_t largest = 0;
    m->layers = (cism__layer *)calloc((size_t)hp->n_layers, sizeof(cism__layer));
    if (!m->layers) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "%s: out of memory", c->label);
    if ((st = read_layer_kinds(c, m)) || (st = read_layer_attrs(c, m))) return st;
    for (l = 0; l < hp->n_layers; l++) /* only attention layers have a KV cache */
        if (m->layers[l].kind == CISM__LAYER_ATTENTION) m->hp.n_kv_layers++;
    if ((st = bind_weight(c, "token_embd", hp->vocab, hp->dim, &m->tok_embd))) return st;
    account(m, &m->tok_embd);
    if (hp->tied) {
        if (cism__file_tensor(c->f, "output"))
            return cism__fail(CISM_ERR_FORMAT, "%s: tensor 'output' present but model.tied_embeddings = 1", c->label);
        m->output = m->tok_embd;
    } else {
        if ((st = bind_weight(c, "output", hp->vocab, hp->dim, &m->output))) return st;
        account(m, &m->output);
    }
    if ((st = bind_vector(c, "output_norm", hp->dim, &m->output_norm))) return st;
    for (l = 0; l < hp->n_layers; l++) {
        cism__layer *L = &m->layers[l];
        if ((st = bind_layer_vector(c, l, "attn_norm", hp->dim, &L->attn_norm))) return st;
        switch (L->kind) {
        case CISM__LAYER_SHORTCONV: st = bind_shortconv(c, m, l, check_values, &largest); break;
        case CISM__LAYER_DELTANET: st = bind_deltanet(c, m, l, check_values, &largest); break;
        default: st = bind_attention(c, m, l, check_values, &largest); break;
        }
        if (st) return st;
        if ((st = bind_layer_matrix(c, m, l, "ffn_gate", hp->ffn_dim, hp->dim, 0, check_values, &largest, &L->gate)) ||
            (st = bind_layer_matrix(c, m, l, "ffn_up", hp->ffn_dim, hp->dim, 0, check_values, &largest, &L->up)) ||
            (st = bind_layer_matrix(c, m, l, "ffn_down", hp->dim, hp->ffn_dim, 0, check_values, &largest, &L->down)) ||
            (st = bind_layer_vector(c, l, "ffn_norm", hp->dim, &L->ffn_norm)))
            return st;
        if (hp->post_norms && ((st = bind_layer_vector(c, l, "post_attn_norm", hp->dim, &L->post_attn_norm)) ||
                               (st = bind_layer_vector(c, l, "post_ffn_norm", hp->dim, &L->post_ffn_norm))))
            return st;
    }
    if (check_values) {
        if ((st = check_weight_values(c, "token_embd", &m->tok_embd))) return st;
        if (!hp->tied && (st = check_weight_values(c, "output", &m->output))) return st;
    }
    for (i = 0; i < c->f->n_tensors; i++) {
        const cism__tensor_entry *t = &c->f->tensors[i];
        if (!t->used)
            return cism__fail(hp->qkv_bias || hp->conv_bias || !strstr(t->name, "bias") ? CISM_ERR_FORMAT : CISM_ERR_UNSUPPORTED,
                              "%s: unexpected tensor '%s' for architecture '%s'%s", c->label, t->name, m->arch_name,
                              strstr(t->name, "bias") ? " (biases are not supported for this family)" : "");
        m->weight_bytes += (int64_t)t->size;
    }
    return CISM_OK;
}

/* ---- RoPE frequencies (as Hugging Face computes them) --------------------------- */
static cism_status rope_table(const cism__hparams *hp, double theta, int scaled, float **out) {
    int64_t half = hp->rope_dim / 2, i;
    float *t = (float *)malloc((size_t)half * sizeof(float));
    if (!t) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "out of memory");
    for (i = 0; i < half; i++) {
        double f = 1.0 / pow(theta, (double)(2 * i) / (double)hp->rope_dim);
        f = (double)(float)f;
        if (scaled && hp->rope_type == CISM__ROPE_LINEAR) {
            f /= hp->rope_factor;
        } else if (scaled && hp->rope_type == CISM__ROPE_LLAMA3) {
            const double pi = 3.14159265358979323846;
            double low_wavelen = (double)hp->rope_orig_ctx / hp->rope_low_freq;
            double high_wavelen = (double)hp->rope_orig_ctx / hp->rope_high_freq;
            double wavelen = 2.0 * pi / f;
            if (wavelen > low_wavelen) {
                f = f / hp->rope_factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = ((double)hp->rope_orig_ctx / wavelen - hp->rope_low_freq) /
                                (hp->rope_high_freq - hp->rope_low_freq);
                f = (1.0 - smooth) * f / hp->rope_factor + smooth * f;
            }
        }
        t[i] = (float)f;
    }
    *out = t;
    return CISM_OK;
}

/* The global table (rope_theta, with the file's scaling) and, when the
   sliding-window layers have their own base (Gemma 3), theirs, unscaled as
   transformers computes it. */
static cism_status rope_setup(cism_model *m) {
    cism_status st = rope_table(&m->hp, m->hp.rope_theta, 1, &m->rope_inv_freq[0]);
    m->n_rope_tables = 1;
    if (st || m->hp.rope_theta_local == 0) return st;
    m->n_rope_tables = 2;
    return rope_table(&m->hp, m->hp.rope_theta_local, 0, &m->rope_inv_freq[1]);
}

static cism_status read_tokens(loadctx *c, cism_model *m) {
    const cism__meta_entry *e;
    int64_t v;
    if (meta_int(c, "tokenizer.bos_id", -1, &v) < 0) return CISM_ERR_FORMAT;
    if (v < -1 || v >= m->hp.vocab) return cism__fail(CISM_ERR_FORMAT, "%s: tokenizer.bos_id %lld is outside the vocabulary", c->label, (long long)v);
    m->bos_id = (int32_t)v;
    if (meta_int(c, "tokenizer.eos_id", -1, &v) < 0) return CISM_ERR_FORMAT;
    if (v < -1 || v >= m->hp.vocab) return cism__fail(CISM_ERR_FORMAT, "%s: tokenizer.eos_id %lld is outside the vocabulary", c->label, (long long)v);
    m->eos_id = (int32_t)v;
    if (meta_int(c, "tokenizer.pad_id", -1, &v) < 0) return CISM_ERR_FORMAT;
    if (v < -1 || v >= m->hp.vocab) return cism__fail(CISM_ERR_FORMAT, "%s: tokenizer.pad_id %lld is outside the vocabulary", c->label, (long long)v);
    m->pad_id = (int32_t)v;
    e = cism__file_meta(c->f, "tokenizer.eos_ids");
    if (e) {
        uint64_t i;
        if (e->type != CISM_META_INT_ARRAY) return cism__fail(CISM_ERR_FORMAT, "%s: tokenizer.eos_ids must be an integer array", c->label);
        if (e->count > 1024) return cism__fail(CISM_ERR_FORMAT, "%s: tokenizer.eos_ids has %llu entries (at most 1024)", c->label, (unsigned long long)e->count);
        m->eos_ids = (int32_t *)malloc((size_t)(e->count ? e->count : 1) * sizeof(int32_t));
        if (!m->eos_ids) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "out of memory");
        for (i = 0; i < e->count; i++) {
            int64_t id = le_i64(e->payload + 8 * i);
            if (id < 0 || id >= m->hp.vocab) return cism__fail(CISM_ERR_FORMAT, "%s: tokenizer.eos_ids holds %lld, outside the vocabulary", c->label, (long long)id);
            m->eos_ids[i] = (int32_t)id;
        }
        m->n_eos = (int32_t)e->count;
    } else if (m->eos_id >= 0) {
        m->eos_ids = (int32_t *)malloc(sizeof(int32_t));
        if (!m->eos_ids) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "out of memory");
        m->eos_ids[0] = m->eos_id;
        m->n_eos = 1;
    }
    return CISM_OK;
}

static void model_destroy(cism_model *m) {
    if (!m) return;
    if (m->streams) cism__atomic_add(&cism__x16_streaming, -1);
    cism__file_close(&m->file);
    free(m->layers);
    free(m->rope_inv_freq[0]);
    free(m->rope_inv_freq[1]);
    free(m->eos_ids);
    cism__tokenizer_free(m->tokenizer);
    free(m);
}

void cism__model_retain(cism_model *model) { cism__atomic_add(&model->refs, 1); }

void cism__model_release(cism_model *model) {
    if (model && cism__atomic_add(&model->refs, -1) == 0) model_destroy(model);
}

cism_status cism_model_load(const char *path, const cism_params *params, cism_model **out) {
    struct cism_params defaults;
    cism_model *m;
    cism_status st;
    loadctx c;
    cism__clear_error();
    if (!out) return cism__fail(CISM_ERR_INVALID_ARG, "cism_model_load: out is NULL");
    *out = NULL;
    if (!path) return cism__fail(CISM_ERR_INVALID_ARG, "cism_model_load: path is NULL");
    if (!params) {
        cism__params_defaults(&defaults);
        params = &defaults;
    }
    m = (cism_model *)calloc(1, sizeof(*m));
    if (!m) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_model_load: out of memory");
    m->refs = 1;
    st = cism__file_open(&m->file, path, (int)params->use_mmap);
    if (!st && params->verify_checksums) st = cism__file_verify_data(&m->file, path);
    if (st) { model_destroy(m); return st; }
    c.label = path;
    c.f = &m->file;
    c.check_values = (int)params->check_weights;
    if ((st = read_hparams(&c, &m->hp, &m->arch_name)) || (st = bind_model(&c, m, (int)params->check_weights)) ||
        (st = read_tokens(&c, m)) || (st = rope_setup(m)) ||
        (st = cism__tokenizer_load(&m->file, path, m->hp.vocab, m->bos_id, m->eos_id, &m->tokenizer))) {
        model_destroy(m);
        return st;
    }
    cism__file_view_settle(&m->file.view);
    m->streams = cism__weights_stream(m->weight_bytes);
    if (m->streams) cism__atomic_add(&cism__x16_streaming, 1);
    cism__log(CISM_LOG_INFO, "loaded %s: %s, %lld layers, dim %lld, vocab %lld, %lld parameters, %s weights", path,
              m->arch_name, (long long)m->hp.n_layers, (long long)m->hp.dim, (long long)m->hp.vocab,
              (long long)m->n_params, cism_dtype_name(m->weight_dtype));
    *out = m;
    return CISM_OK;
}

void cism_model_free(cism_model *model) { cism__model_release(model); }

/* ---- queries ------------------------------------------------------------------------ */
cism_status cism_model_get_info(const cism_model *m, cism_model_info key, int64_t *value) {
    cism__clear_error();
    if (!m || !value) return cism__fail(CISM_ERR_INVALID_ARG, "cism_model_get_info: NULL argument");
    switch (key) {
    case CISM_INFO_VOCAB_SIZE: *value = m->hp.vocab; break;
    case CISM_INFO_DIM: *value = m->hp.dim; break;
    case CISM_INFO_N_LAYERS: *value = m->hp.n_layers; break;
    case CISM_INFO_N_HEADS: *value = m->hp.n_heads; break;
    case CISM_INFO_N_KV_HEADS: *value = m->hp.n_kv_heads; break;
    case CISM_INFO_HEAD_DIM: *value = m->hp.head_dim; break;
    case CISM_INFO_FFN_DIM: *value = m->hp.ffn_dim; break;
    case CISM_INFO_CONTEXT_LEN: *value = m->hp.ctx_len; break;
    case CISM_INFO_BOS_ID: *value = m->bos_id; break;
    case CISM_INFO_EOS_ID: *value = m->eos_id; break;
    case CISM_INFO_N_EOS_IDS: *value = m->n_eos; break;
    case CISM_INFO_PAD_ID: *value = m->pad_id; break;
    case CISM_INFO_N_PARAMS: *value = m->n_params; break;
    case CISM_INFO_WEIGHT_BYTES: *value = m->weight_bytes; break;
    case CISM_INFO_FILE_BYTES: *value = (int64_t)m->file.view.size; break;
    case CISM_INFO_TIED_EMBEDDINGS: *value = m->hp.tied; break;
    case CISM_INFO_WEIGHT_DTYPE: *value = m->weight_dtype; break;
    default: return cism__fail(CISM_ERR_INVALID_ARG, "cism_model_get_info: unknown key %d", (int)key);
    }
    return CISM_OK;
}

const char *cism_model_architecture(const cism_model *model) { return model ? model->arch_name : NULL; }

cism_status cism_model_eos_ids(const cism_model *m, int32_t *ids, int32_t capacity, int32_t *n_ids) {
    int32_t i;
    cism__clear_error();
    if (!m || !n_ids || capacity < 0 || (capacity > 0 && !ids)) return cism__fail(CISM_ERR_INVALID_ARG, "cism_model_eos_ids: bad argument");
    for (i = 0; i < m->n_eos && i < capacity; i++) ids[i] = m->eos_ids[i];
    *n_ids = m->n_eos;
    return CISM_OK;
}

int32_t cism_model_meta_count(const cism_model *m) { return m ? (int32_t)m->file.n_meta : 0; }

const char *cism_model_meta_key(const cism_model *m, int32_t index) {
    if (!m || index < 0 || (uint32_t)index >= m->file.n_meta) return NULL;
    return m->file.meta[index].key;
}

cism_meta_type cism_model_meta_type(const cism_model *m, const char *key) {
    const cism__meta_entry *e;
    if (!m || !key) return CISM_META_NONE;
    e = cism__file_meta(&m->file, key);
    return e ? e->type : CISM_META_NONE;
}

static cism_status find_meta(const cism_model *m, const char *key, int want1, int want2, const cism__meta_entry **out) {
    const cism__meta_entry *e;
    cism__clear_error();
    if (!m || !key) return cism__fail(CISM_ERR_INVALID_ARG, "metadata lookup: NULL argument");
    e = cism__file_meta(&m->file, key);
    if (!e) return cism__fail(CISM_ERR_INVALID_ARG, "metadata key '%s' is not in this model", key);
    if (e->type != want1 && e->type != want2) return cism__fail(CISM_ERR_INVALID_ARG, "metadata '%s' has another type (%d)", key, (int)e->type);
    *out = e;
    return CISM_OK;
}

cism_status cism_model_meta_int(const cism_model *m, const char *key, int64_t *value) {
    const cism__meta_entry *e = NULL;
    cism_status st = find_meta(m, key, CISM_META_INT, CISM_META_INT, &e);
    if (st) return st;
    if (!value) return cism__fail(CISM_ERR_INVALID_ARG, "cism_model_meta_int: value is NULL");
    *value = le_i64(e->payload);
    return CISM_OK;
}

cism_status cism_model_meta_float(const cism_model *m, const char *key, double *value) {
    const cism__meta_entry *e = NULL;
    cism_status st = find_meta(m, key, CISM_META_FLOAT, CISM_META_INT, &e);
    if (st) return st;
    if (!value) return cism__fail(CISM_ERR_INVALID_ARG, "cism_model_meta_float: value is NULL");
    *value = e->type == CISM_META_INT ? (double)le_i64(e->payload) : le_f64(e->payload);
    return CISM_OK;
}

cism_status cism_model_meta_bytes(const cism_model *m, const char *key, const void **data, int64_t *size) {
    const cism__meta_entry *e = NULL;
    cism_status st = find_meta(m, key, CISM_META_STRING, CISM_META_BYTES, &e);
    if (st) return st;
    if (!data || !size) return cism__fail(CISM_ERR_INVALID_ARG, "cism_model_meta_bytes: NULL output");
    *data = e->payload;
    *size = (int64_t)e->count;
    return CISM_OK;
}

cism_status cism_model_meta_array(const cism_model *m, const char *key, const void **data, int64_t *count, int64_t *size) {
    const cism__meta_entry *e;
    cism__clear_error();
    if (!m || !key || !data || !count || !size) return cism__fail(CISM_ERR_INVALID_ARG, "cism_model_meta_array: NULL argument");
    e = cism__file_meta(&m->file, key);
    if (!e) return cism__fail(CISM_ERR_INVALID_ARG, "metadata key '%s' is not in this model", key);
    if (e->type != CISM_META_INT_ARRAY && e->type != CISM_META_FLOAT_ARRAY && e->type != CISM_META_STRING_ARRAY)
        return cism__fail(CISM_ERR_INVALID_ARG, "metadata '%s' is not an array", key);
    *data = e->payload;
    *count = (int64_t)e->count;
    *size = (int64_t)e->payload_size;
    return CISM_OK;
}
