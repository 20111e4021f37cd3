/* params.h - the opaque parameter object behind cism_params_*. */
#ifndef CISM_PARAMS_H
#define CISM_PARAMS_H

#include "cism.h"

struct cism_params {
    int64_t n_threads;      /* 0 = default */
    int64_t n_ctx;          /* 0 = default */
    int64_t kv_type;
    int64_t use_mmap;
    int64_t n_batch;
    int64_t logits_all;
    int64_t check_weights;
    int64_t kernel_tier;    /* cism_kernel_tier */
    int64_t act_quant;
    int64_t act_outliers;
    int64_t act_stats;
    int64_t verify_checksums;
    int64_t kv_rotate;      /* -1 = the KV type's default */
    int64_t kv_type_v;      /* -1 = kv_type */
};

/* Fills p with the defaults; used when the caller passes NULL. */
void cism__params_defaults(struct cism_params *p);
/* The default worker thread count for this machine. */
int cism__default_threads(void);

#endif
