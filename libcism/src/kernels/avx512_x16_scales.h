/* avx512_x16_scales.h - the scales of a block of an interleaved group as
 * 16 f32 lanes (lane = row), for the AVX-512 kernels of the x16 formats
 * (kernels_avx512_quant.c) and the AMX tiles that end in the same combine
 * (kernels_amx.c). */
#ifndef CISM_AVX512_X16_SCALES_H
#define CISM_AVX512_X16_SCALES_H

#include "x86_x16_fmt.h"

/* The 16 rows' scales of block b as f32 (xf: X16_Q8, X16_Q6, X16_Q5, X16_Q3, X16_Q2: f16;
   X16_Q4S: E4M3; X16_Q4A: the scale line's d, and its minimums m into *mn) */
CISM__INLINE __m512 x16_scales(const uint8_t *scales, const int xf, __m512 *mn) {
    __m256i h, nan;
    if (xf == X16_Q8 || X16_QINT(xf)) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)scales));
    if (xf == X16_Q4A) { /* row i's d at 4i, m at 4i + 2 */
        const __m512i dm = _mm512_loadu_si512((const void *)scales);
        *mn = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
        return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
    }
    h = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)scales));
    nan = _mm256_cmpeq_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7f)); /* 0x7f, 0xff: NaN */
    h = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(h, 8), _mm256_set1_epi16((short)0x8000)),
                        _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16(0x3f80)));
    return _mm512_cvtph_ps(_mm256_or_si256(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x7e00))));
}

#endif
