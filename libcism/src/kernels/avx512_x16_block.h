/* avx512_x16_block.h - one block of an interleaved group (16 rows) in 512-bit
 * registers: its scales as 16 f32 lanes (lane = row) and its weights as
 * rows of 4-byte chunks, for the AVX-512 kernels of the x16 formats
 * (kernels_avx512_quant.c, vpdpbusd) and the AMX tiles that take the same
 * rows as B tiles and end in the same combine (kernels_amx.c). */
#ifndef CISM_AVX512_X16_BLOCK_H
#define CISM_AVX512_X16_BLOCK_H

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


/* q5x16's bit 4 (v 0x10) / q3x16's bit 2 (v 4) of 16 rows: v in the bytes of
   each row's dword whose bit is set, byte i taking bit 4 * odd + i of the
   dword's byte `byte` (hq: the block's chunk 0, bit e of a row's dword element e's) */
CISM__INLINE __m512i qh_bits16(__m512i hq, const int byte, const int odd, const char v) {
    const __m512i sel = _mm512_add_epi8(_mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0), _mm512_set1_epi8((char)byte));
    const __m512i bit = _mm512_set1_epi32(odd ? (int)0x80402010u : 0x08040201);
    return _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(_mm512_shuffle_epi8(hq, sel), bit), _mm512_set1_epi8(v));
}

/* The weights of one block of 16 rows as B rows (x86_x16.h has the layouts):
   row k holds, for each row r in dword r, elements 4k..4k+3 as unsigned bytes,
   level + c. q8x16's chunk c is row c (c = 128: the codes xor 0x80). The
   nibble and plane formats (c: q4s 8, q4a 0, q6, q5, q3, q2 H, their codes)
   have nc = 4 chunks (q4s: 2) of two rows each: chunk c's low nibbles are
   row c, its high ones row nc + c, q6's plane bits 4-5 and q5's bit 4 ORed
   in; q3 and q2 take their codes from the 2-bit plane (q3's bit 2 from chunk
   0, as q5's bit 4). A block's planes are loaded once (x16_planes_of), then
   each chunk gives its two rows (x16_chunk_rows). */
typedef struct x16_planes {
    __m512i p4, p5; /* q6: its plane's two halves; q5: chunk 0 (the bits 4) */
    __m512i hq;     /* q3: chunk 0 (the bits 2) */
    __m512i p1, p2; /* q3, q2: the 2-bit plane's two halves */
} x16_planes;

CISM__INLINE int x16_nibble_chunks(const int xf) { return X16_BLOCK(xf) / 8; }

CISM__INLINE x16_planes x16_planes_of(const uint8_t *cb, const int xf) {
    x16_planes p;
    p.p4 = p.p5 = p.hq = p.p1 = p.p2 = _mm512_setzero_si512();
    if (xf == X16_Q6 || xf == X16_Q5) {
        p.p4 = _mm512_loadu_si512((const void *)(cb + (xf == X16_Q6 ? 256 : 0)));
        p.p5 = xf == X16_Q6 ? _mm512_loadu_si512((const void *)(cb + 320)) : p.p4;
    } else if (X16_PLANE(xf)) {
        const uint8_t *pc = cb + (xf == X16_Q3 ? 64 : 0);
        if (xf == X16_Q3) p.hq = _mm512_loadu_si512((const void *)cb);
        p.p1 = _mm512_loadu_si512((const void *)pc);
        p.p2 = _mm512_loadu_si512((const void *)(pc + 64));
    }
    return p;
}

/* Chunk c's two rows (c < x16_nibble_chunks(xf)): *lo row c, *hi row nc + c */
CISM__INLINE void x16_chunk_rows(const uint8_t *cb, const x16_planes *p, const int c, const int xf, __m512i *lo, __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    if (X16_PLANE(xf)) { /* elements 4c + i take plane byte 4 (c & 1) + i, bits 2 (c / 2), 16 + 4c + i bits 4 + 2 (c / 2) */
        const __m512i m3 = _mm512_set1_epi8(3), pl = c & 1 ? p->p2 : p->p1;
        *lo = _mm512_and_si512(c < 2 ? pl : _mm512_srli_epi16(pl, 2), m3);
        *hi = _mm512_and_si512(_mm512_srli_epi16(pl, c < 2 ? 4 : 6), m3);
        if (xf == X16_Q3) {
            *lo = _mm512_or_si512(*lo, qh_bits16(p->hq, c >> 1, c & 1, 4));
            *hi = _mm512_or_si512(*hi, qh_bits16(p->hq, 2 + (c >> 1), c & 1, 4));
        }
        return;
    }
    {
        const __m512i v = _mm512_loadu_si512((const void *)(cb + (xf == X16_Q5 ? 64 : 0) + c * 64));
        *lo = _mm512_and_si512(v, m4);
        *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
    if (xf == X16_Q6) { /* elements 4c + i: plane byte 4 (c & 1) + i, bits 2 (c / 2); 16 + 4c + i: bits 4 + 2 (c / 2) */
        const __m512i m3 = _mm512_set1_epi8(0x30), pl = c & 1 ? p->p5 : p->p4;
        *lo = _mm512_or_si512(*lo, _mm512_and_si512(c < 2 ? _mm512_slli_epi16(pl, 4) : _mm512_slli_epi16(pl, 2), m3));
        *hi = _mm512_or_si512(*hi, _mm512_and_si512(c < 2 ? pl : _mm512_srli_epi16(pl, 2), m3));
    } else if (xf == X16_Q5) { /* p4: chunk 0, the bits 4 */
        *lo = _mm512_or_si512(*lo, qh_bits16(p->p4, c >> 1, c & 1, 0x10));
        *hi = _mm512_or_si512(*hi, qh_bits16(p->p4, 2 + (c >> 1), c & 1, 0x10));
    }
}

#endif
