/* dtype.c - the table of element types. */
#include "dtype.h"

static const char *const g_names[CISM__DTYPE_COUNT] = {"f32", "f16", "bf16"};

int cism__dtype_is_known(int32_t dtype) { return dtype >= 0 && dtype < CISM__DTYPE_COUNT; }

uint64_t cism__row_bytes(int32_t dtype, int64_t cols) {
    if (cols <= 0) return 0;
    switch (dtype) {
    case CISM_DTYPE_F32: return (uint64_t)cols * 4u;
    case CISM_DTYPE_F16:
    case CISM_DTYPE_BF16: return (uint64_t)cols * 2u;
    default: return 0;
    }
}

const char *cism_dtype_name(cism_dtype dtype) {
    return cism__dtype_is_known(dtype) ? g_names[dtype] : NULL;
}
