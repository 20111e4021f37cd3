/* dtype.h - element types of tensors and KV caches: sizes and conversions. */
#ifndef CISM_DTYPE_H
#define CISM_DTYPE_H

#include <stdint.h>
#include <string.h>
#include "cism.h"

#define CISM__DTYPE_COUNT 20  /* one past the highest known dtype */

/* Row-interleaved dtypes: groups of CISM__X16 rows stored together. */
#define CISM__X16 16
static inline int cism__dtype_is_x16(int32_t dtype) {
    return dtype == CISM_DTYPE_Q8X16 || dtype == CISM_DTYPE_Q4SX16 || dtype == CISM_DTYPE_Q4AX16 ||
           dtype == CISM_DTYPE_Q6X16 || dtype == CISM_DTYPE_Q5X16 || dtype == CISM_DTYPE_Q3X16 ||
           dtype == CISM_DTYPE_Q2X16;
}
/* The dtype whose values (blocks, scales, levels) a dtype stores: itself, or
   the row-layout dtype of an interleaved one. */
static inline int32_t cism__dtype_base(int32_t dtype) {
    return dtype == CISM_DTYPE_Q8X16    ? CISM_DTYPE_Q8
           : dtype == CISM_DTYPE_Q4SX16 ? CISM_DTYPE_Q4S
           : dtype == CISM_DTYPE_Q4AX16 ? CISM_DTYPE_Q4A
           : dtype == CISM_DTYPE_Q6X16  ? CISM_DTYPE_Q6
           : dtype == CISM_DTYPE_Q5X16  ? CISM_DTYPE_Q5
           : dtype == CISM_DTYPE_Q3X16  ? CISM_DTYPE_Q3
           : dtype == CISM_DTYPE_Q2X16  ? CISM_DTYPE_Q2
                                        : dtype;
}

/* Bytes of one row of `cols` elements, or 0 if dtype is unknown or cols is
   not allowed for it. */
uint64_t cism__row_bytes(int32_t dtype, int64_t cols);
/* 1 if the dtype may hold weight matrices. */
int cism__dtype_is_known(int32_t dtype);

static inline float cism__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    float f;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalize */
            int e = -1;
            do { e++; man <<= 1; } while ((man & 0x400u) == 0);
            bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest even, overflow to infinity, NaN kept. */
static inline uint16_t cism__f32_to_f16(float f) {
    uint32_t x;
    uint32_t sign, mag;
    memcpy(&x, &f, 4);
    sign = (x >> 16) & 0x8000u;
    mag = x & 0x7fffffffu;
    if (mag >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u));
    if (mag >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (mag < 0x38800000u) { /* result is subnormal or zero */
        uint32_t shift, m, r, half;
        if (mag < 0x33000000u) return (uint16_t)sign; /* below half the smallest subnormal */
        m = (mag & 0x7fffffu) | 0x800000u;
        shift = 126 - (mag >> 23) ; /* 113 + 13 - exp */
        r = m >> shift;
        half = 1u << (shift - 1);
        if ((m & ((half << 1) - 1)) > half || ((m & ((half << 1) - 1)) == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    {
        uint32_t r = mag - 0x38000000u; /* rebias exponent 127 -> 15 */
        uint32_t rem = r & 0x1fffu;
        r >>= 13;
        if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
}

static inline float cism__bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t cism__f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

#endif
