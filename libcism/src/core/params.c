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
    default: return NULL;
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
    case CISM_PARAM_KV_TYPE: ok = value == CISM_DTYPE_F32 || value == CISM_DTYPE_F16; break;
    case CISM_PARAM_N_BATCH: ok = value >= 1 && value <= 65536; break;
    case CISM_PARAM_KERNEL_TIER: ok = value >= CISM_TIER_AUTO && value <= CISM_TIER_NEON_I8MM; break;
    case CISM_PARAM_ACT_STATS: ok = value >= 0 && value <= 4096; break;
    default: ok = value == 0 || value == 1; break;
    }
    if (!ok) return cism__fail(CISM_ERR_INVALID_ARG, "cism_params_set_int: value %lld is out of range for parameter %d",
                               (long long)value, (int)key);
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
