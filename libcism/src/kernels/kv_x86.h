/* kv_x86.h - AVX2 decoding of quantized KV cache rows (kv_quant.h) for the x86
 * tiers (kernels_avx2.c, kernels_avx512.c; include after <immintrin.h>, in a
 * translation unit built with AVX2 and F16C). Gives the floats of
 * cism__kv_decode: q8 d * code is exact; q4a the exact product d * code, then
 * + m in a separate instruction (one rounding, no FMA). */
#ifndef CISM_KV_X86_H
#define CISM_KV_X86_H

#include "kv_quant.h"

static inline void cism__kv_decode_x86(int32_t kv_type, const uint8_t *row, float *out, int64_t n) {
    int64_t b;
    if (kv_type == CISM_DTYPE_Q8) {
        for (b = 0; b < n; b += 32, row += 34) {
            const __m256 d = _mm256_set1_ps(_cvtsh_ss((unsigned short)(row[0] | (row[1] << 8))));
            int j;
            for (j = 0; j < 4; j++) {
                __m256i c = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(row + 2 + 8 * j)));
                _mm256_storeu_ps(out + b + 8 * j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(c)));
            }
        }
    } else { /* q4a: byte j holds code j (low nibble) and code j + 16 (high) */
        const __m128i mask = _mm_set1_epi8(15);
        for (b = 0; b < n; b += 32, row += 20) {
            const __m256 d = _mm256_set1_ps(_cvtsh_ss((unsigned short)(row[0] | (row[1] << 8))));
            const __m256 m = _mm256_set1_ps(_cvtsh_ss((unsigned short)(row[2] | (row[3] << 8))));
            const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(row + 4));
            const __m128i lo = _mm_and_si128(q, mask), hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
            const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
            int j;
            for (j = 0; j < 4; j++) {
                __m256 p = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part[j])));
                _mm256_storeu_ps(out + b + 8 * j, _mm256_add_ps(p, m));
            }
        }
    }
}

/* Rows [b0, b0 + n) of a quantized cache as f32 into buf (cism__kv_widen_rows). */
static inline const float *cism__kv_widen_rows_x86(const void *kv, int32_t kv_type, int64_t b0, int64_t n, int64_t hd,
                                                   float *buf) {
    const uint64_t rb = cism__kv_row_bytes(kv_type, hd);
    const uint8_t *src = (const uint8_t *)kv + (uint64_t)b0 * rb;
    int64_t r;
    for (r = 0; r < n; r++) cism__kv_decode_x86(kv_type, src + (uint64_t)r * rb, buf + r * hd, hd);
    return buf;
}

#endif
