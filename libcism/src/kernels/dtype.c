/* dtype.c - the table of element types. */
#include "dtype.h"

static const char *const g_names[CISM__DTYPE_COUNT] = {"f32", "f16", "bf16", "q8", "q4", "fp4", "nl4", "q4s",
                                                            "q8x16", "q4sx16", "q4a", "q6", "q5", "q4ax16", "q6x16",
                                                            "q5x16", "q3", "q3x16", "q2", "q2x16"};

int cism__dtype_is_known(int32_t dtype) { return dtype >= 0 && dtype < CISM__DTYPE_COUNT; }

uint64_t cism__row_bytes(int32_t dtype, int64_t cols) {
    if (cols <= 0) return 0;
    switch (cism__dtype_base(dtype)) { /* an interleaved dtype: the same bytes per row */
    case CISM_DTYPE_F32: return (uint64_t)cols * 4u;
    case CISM_DTYPE_F16:
    case CISM_DTYPE_BF16: return (uint64_t)cols * 2u;
    /* block formats (quant.h, docs/QUANTIZATION.md): whole blocks, the last one padded */
    case CISM_DTYPE_Q8: return (uint64_t)((cols + 31) / 32) * 34u;
    case CISM_DTYPE_Q4: return (uint64_t)((cols + 31) / 32) * 18u;
    case CISM_DTYPE_FP4: return (uint64_t)((cols + 15) / 16) * 9u;
    case CISM_DTYPE_NL4: return (uint64_t)((cols + 31) / 32) * 18u;
    case CISM_DTYPE_Q4S: return (uint64_t)((cols + 15) / 16) * 9u;
    case CISM_DTYPE_Q4A: return (uint64_t)((cols + 31) / 32) * 20u;
    case CISM_DTYPE_Q6: return (uint64_t)((cols + 31) / 32) * 26u;
    case CISM_DTYPE_Q5: return (uint64_t)((cols + 31) / 32) * 22u;
    case CISM_DTYPE_Q3: return (uint64_t)((cols + 31) / 32) * 14u;
    case CISM_DTYPE_Q2: return (uint64_t)((cols + 31) / 32) * 10u;
    default: return 0;
    }
}

const char *cism_dtype_name(cism_dtype dtype) {
    return cism__dtype_is_known(dtype) ? g_names[dtype] : NULL;
}
