/* params.c - parameter objects: setters keyed by pinned enum values. */
#include "params.h"
#include "error.h"
#include "../platform/platform.h"

#include <stdlib.h>

#define CISM__MAX_THREADS 256
#define CISM__MAX_CTX (1 << 24)

void cism__params_defaults(struct cism_params *p) {
    p->n_threads = 0;
    p->n_ctx = 0;
    p->kv_type = CISM_DTYPE_F16;
    p->use_mmap = 1;
    p->n_batch = 256;
    p->logits_all = 0;
    p->check_weights = 0;
    p->kernel_tier = CISM_TIER_AUTO;
    p->act_quant = 1;
    p->act_stats = 0;
    p->act_outliers = 1;
    p->verify_checksums = 0;
    p->kv_rotate = -1;
    p->kv_type_v = -1;
}

int cism__default_threads(void) {
    int n = cism__cpu_perf_count();
    if (n < 1) n = cism__cpu_count();
    return n > 8 ? 8 : n;
}

int32_t cism_default_n_threads(void) { return cism__default_threads(); }

cism_status cism_params_create(cism_params **out) {
    cism_params *p;
    cism__clear_error();
    if (!out) return cism__fail(CISM_ERR_INVALID_ARG, "cism_params_create: out is NULL");
    *out = NULL;
    p = (cism_params *)malloc(sizeof(*p));
    if (!p) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_params_create: out of memory");
    cism__params_defaults(p);
    *out = p;
    return CISM_OK;
}

void cism_params_free(cism_params *params) { free(params); }

static int64_t *param_slot(cism_params *p, cism_param key) {
    switch (key) {
    case CISM_PARAM_N_THREADS: return &p->n_threads;
    case CISM_PARAM_N_CTX: return &p->n_ctx;
    case CISM_PARAM_KV_TYPE: return &p->kv_type;
    case CISM_PARAM_USE_MMAP: return &p->use_mmap;
    case CISM_PARAM_N_BATCH: return &p->n_batch;
    case CISM_PARAM_LOGITS_ALL: return &p->logits_all;
    case CISM_PARAM_CHECK_WEIGHTS: return &p->check_weights;
    case CISM_PARAM_KERNEL_TIER: return &p->kernel_tier;
    case CISM_PARAM_ACT_QUANT: return &p->act_quant;
    case CISM_PARAM_ACT_STATS: return &p->act_stats;
    case CISM_PARAM_ACT_OUTLIERS: return &p->act_outliers;
    case CISM_PARAM_VERIFY_CHECKSUMS: return &p->verify_checksums;
    case CISM_PARAM_KV_ROTATE: return &p->kv_rotate;
    case CISM_PARAM_KV_TYPE_V: return &p->kv_type_v;
    default: return NULL;
    }
}

/* What the user asked for and what would be accepted, in the words of the
   options (n_threads, n_ctx, ...) rather than of the enum. */
static cism_status range_error(cism_param key, int64_t value) {
    const long long v = (long long)value;
    switch (key) {
    case CISM_PARAM_N_THREADS:
        return cism__fail(CISM_ERR_INVALID_ARG, "thread count (n_threads) %lld is out of range: use 1..%d, or 0 for the "
                          "library's default", v, CISM__MAX_THREADS);
    case CISM_PARAM_N_CTX:
        return cism__fail(CISM_ERR_INVALID_ARG, "context length (n_ctx) %lld is out of range: use 1..%d tokens, or 0 for "
                          "the default (the model's, at most 4096)", v, CISM__MAX_CTX);
    case CISM_PARAM_KV_TYPE: {
        const char *name = value >= 0 && value <= INT32_MAX ? cism_dtype_name((cism_dtype)value) : NULL;
        if (name)
            return cism__fail(CISM_ERR_INVALID_ARG, "KV cache type (kv_type) %s is not supported: use f16, f32, q8 or q4a", name);
        return cism__fail(CISM_ERR_INVALID_ARG, "KV cache type (kv_type) %lld is not supported: use f16 (CISM_DTYPE_F16), "
                          "f32 (CISM_DTYPE_F32), q8 (CISM_DTYPE_Q8) or q4a (CISM_DTYPE_Q4A)", v);
    }
    case CISM_PARAM_KV_TYPE_V: {
        const char *name = value >= 0 && value <= INT32_MAX ? cism_dtype_name((cism_dtype)value) : NULL;
        if (name)
            return cism__fail(CISM_ERR_INVALID_ARG, "V cache type (kv_type_v) %s is not supported: use f16, f32, q8, q4a, "
                              "or -1 for the same type as kv_type", name);
        return cism__fail(CISM_ERR_INVALID_ARG, "V cache type (kv_type_v) %lld is not supported: use -1 (the same as kv_type), "
                          "f16 (CISM_DTYPE_F16), f32 (CISM_DTYPE_F32), q8 (CISM_DTYPE_Q8) or q4a (CISM_DTYPE_Q4A)", v);
    }
    case CISM_PARAM_N_BATCH:
        return cism__fail(CISM_ERR_INVALID_ARG, "batch size (n_batch) %lld is out of range: use 1..65536 tokens", v);
    case CISM_PARAM_KERNEL_TIER:
        return cism__fail(CISM_ERR_INVALID_ARG, "kernel tier %lld is not a cism_kernel_tier value (%d..%d)", v,
                          (int)CISM_TIER_AUTO, (int)CISM_TIER_NEON_I8MM);
    case CISM_PARAM_ACT_STATS:
        return cism__fail(CISM_ERR_INVALID_ARG, "act_stats %lld is out of range: use 0 (off), 1 or a block size 2..4096", v);
    case CISM_PARAM_USE_MMAP: return cism__fail(CISM_ERR_INVALID_ARG, "use_mmap %lld must be 0 or 1", v);
    case CISM_PARAM_LOGITS_ALL: return cism__fail(CISM_ERR_INVALID_ARG, "logits_all %lld must be 0 or 1", v);
    case CISM_PARAM_CHECK_WEIGHTS: return cism__fail(CISM_ERR_INVALID_ARG, "check_weights %lld must be 0 or 1", v);
    case CISM_PARAM_ACT_QUANT: return cism__fail(CISM_ERR_INVALID_ARG, "act_quant %lld must be 0 or 1", v);
    case CISM_PARAM_ACT_OUTLIERS: return cism__fail(CISM_ERR_INVALID_ARG, "act_outliers %lld must be 0 or 1", v);
    case CISM_PARAM_VERIFY_CHECKSUMS: return cism__fail(CISM_ERR_INVALID_ARG, "verify_checksums %lld must be 0 or 1", v);
    case CISM_PARAM_KV_ROTATE:
        return cism__fail(CISM_ERR_INVALID_ARG, "kv_rotate %lld must be -1 (the KV type's default), 0 (off) or 1 (on)", v);
    default: return cism__fail(CISM_ERR_INVALID_ARG, "value %lld is out of range for parameter %d", v, (int)key);
    }
}

cism_status cism_params_set_int(cism_params *params, cism_param key, int64_t value) {
    int64_t *slot;
    int ok = 1;
    cism__clear_error();
    if (!params) return cism__fail(CISM_ERR_INVALID_ARG, "cism_params_set_int: params is NULL");
    slot = param_slot(params, key);
    if (!slot) return cism__fail(CISM_ERR_INVALID_ARG, "cism_params_set_int: unknown parameter %d", (int)key);
    switch (key) {
    case CISM_PARAM_N_THREADS: ok = value >= 0 && value <= CISM__MAX_THREADS; break;
    case CISM_PARAM_N_CTX: ok = value >= 0 && value <= CISM__MAX_CTX; break;
    case CISM_PARAM_KV_TYPE:
        ok = value == CISM_DTYPE_F32 || value == CISM_DTYPE_F16 || value == CISM_DTYPE_Q8 || value == CISM_DTYPE_Q4A;
        break;
    case CISM_PARAM_KV_ROTATE: ok = value >= -1 && value <= 1; break;
    case CISM_PARAM_KV_TYPE_V:
        ok = value == -1 || value == CISM_DTYPE_F32 || value == CISM_DTYPE_F16 || value == CISM_DTYPE_Q8 ||
             value == CISM_DTYPE_Q4A;
        break;
    case CISM_PARAM_N_BATCH: ok = value >= 1 && value <= 65536; break;
    case CISM_PARAM_KERNEL_TIER: ok = value >= CISM_TIER_AUTO && value <= CISM_TIER_AVX512_AMX; break;
    case CISM_PARAM_ACT_STATS: ok = value >= 0 && value <= 4096; break;
    default: ok = value == 0 || value == 1; break;
    }
    if (!ok) return range_error(key, value);
    *slot = value;
    return CISM_OK;
}

cism_status cism_params_get_int(const cism_params *params, cism_param key, int64_t *value) {
    int64_t *slot;
    cism__clear_error();
    if (!params || !value) return cism__fail(CISM_ERR_INVALID_ARG, "cism_params_get_int: NULL argument");
    slot = param_slot((cism_params *)params, key);
    if (!slot) return cism__fail(CISM_ERR_INVALID_ARG, "cism_params_get_int: unknown parameter %d", (int)key);
    *value = *slot;
    return CISM_OK;
}
