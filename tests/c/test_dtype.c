/* test_dtype.c - f16/bf16 conversions: exhaustive round trips and correct
 * rounding (nearest, ties to even) checked against neighbours in double. */
#include "kernels/dtype.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

static uint32_t rng = 12345u;
static uint32_t next_u32(void) {
    rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5;
    return rng;
}

static float bits_f32(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }

static void check_f16_rounding(float f) {
    uint16_t h = cism__f32_to_f16(f);
    double x = (double)f, got = (double)cism__f16_to_f32(h);
    if (isnan(f)) { CHECK((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0); return; }
    if (fabs(x) >= 65520.0) { CHECK((h & 0x7fffu) == 0x7c00u); return; }
    /* neighbours of h in magnitude */
    {
        uint16_t mag = h & 0x7fffu, sign = h & 0x8000u;
        double err = fabs(got - x);
        if (mag < 0x7bffu) {
            double up = (double)cism__f16_to_f32((uint16_t)(sign | (mag + 1)));
            CHECK_MSG(err < fabs(up - x) || (err == fabs(up - x) && (mag & 1u) == 0), "f=%.9g h=0x%04x", f, h);
        }
        if (mag > 0) {
            double dn = (double)cism__f16_to_f32((uint16_t)(sign | (mag - 1)));
            CHECK_MSG(err < fabs(dn - x) || (err == fabs(dn - x) && (mag & 1u) == 0), "f=%.9g h=0x%04x", f, h);
        }
    }
}

int main(void) {
    uint32_t i;
    /* every f16 survives f16 -> f32 -> f16 (NaNs stay NaN) */
    for (i = 0; i < 65536u; i++) {
        float f = cism__f16_to_f32((uint16_t)i);
        uint16_t back = cism__f32_to_f16(f);
        if ((i & 0x7c00u) == 0x7c00u && (i & 0x3ffu)) CHECK(isnan(f) && (back & 0x7c00u) == 0x7c00u && (back & 0x3ffu));
        else CHECK_MSG(back == i, "0x%04x -> %g -> 0x%04x", i, f, back);
    }
    /* known values */
    CHECK(cism__f16_to_f32(0x3c00u) == 1.0f);
    CHECK(cism__f16_to_f32(0xc000u) == -2.0f);
    CHECK(cism__f16_to_f32(0x0001u) == ldexpf(1.0f, -24));
    CHECK(cism__f16_to_f32(0x7bffu) == 65504.0f);
    CHECK(cism__f32_to_f16(65519.0f) == 0x7bffu);
    CHECK(cism__f32_to_f16(65520.0f) == 0x7c00u);
    CHECK(cism__f32_to_f16(ldexpf(1.0f, -25)) == 0x0000u);            /* tie to even: 0 */
    CHECK(cism__f32_to_f16(ldexpf(1.5f, -25)) == 0x0001u);
    CHECK(cism__f32_to_f16(ldexpf(3.0f, -25)) == 0x0002u);            /* 1.5 subnormal units, tie to even 2 */
    /* rounding of random floats across the whole range, and near f16's range */
    for (i = 0; i < 2000000u; i++) check_f16_rounding(bits_f32(next_u32()));
    for (i = 0; i < 2000000u; i++) {
        float f = ldexpf((float)(next_u32() & 0xffffffu) / 16777216.0f, (int)(next_u32() % 48) - 30);
        check_f16_rounding((next_u32() & 1) ? -f : f);
    }
    /* bf16: exact widening, round-to-nearest-even narrowing */
    for (i = 0; i < 65536u; i++) {
        float f = cism__bf16_to_f32((uint16_t)i);
        if (!isnan(f)) CHECK(cism__f32_to_bf16(f) == i);
    }
    for (i = 0; i < 1000000u; i++) {
        uint32_t b = next_u32();
        float f = bits_f32(b);
        uint16_t h = cism__f32_to_bf16(f);
        if (isnan(f)) { CHECK(isnan(cism__bf16_to_f32(h))); continue; }
        {
            uint32_t lo = b & 0xffffu, hi = b >> 16;
            uint32_t expect = lo > 0x8000u || (lo == 0x8000u && (hi & 1u)) ? hi + 1 : hi;
            CHECK_MSG(h == (uint16_t)expect, "0x%08x -> 0x%04x", b, h);
        }
    }
    CHECK(cism__row_bytes(CISM_DTYPE_F32, 10) == 40);
    CHECK(cism__row_bytes(CISM_DTYPE_F16, 10) == 20);
    CHECK(cism__row_bytes(99, 10) == 0);
    CHECK(cism__row_bytes(CISM_DTYPE_F32, 0) == 0);
    return test_finish("test_dtype");
}
