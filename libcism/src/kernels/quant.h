/* quant.h - the packed weight formats (docs/QUANTIZATION.md): block layouts,
 * scale encodings, codebooks, and the int8 activation blocks of the
 * integer-dot path. Shared by the quantizer (quant.c) and the kernels. */
#ifndef CISM_QUANT_H
#define CISM_QUANT_H

#include <stdint.h>
#include "dtype.h"

/* q8: 32 int8 (-127..127) after an fp16 scale: 34 bytes per 32 weights. */
#define CISM__Q8_BLOCK 32
#define CISM__Q8_BYTES 34

/* The 4-bit formats are one scheme with different parameters: blocks of
 * `block` weights, each a scale followed by block/2 bytes of 4-bit codes.
 * Byte j of a block holds code j (low nibble) and code j + block/2 (high
 * nibble). Weight = scale * levels[code]. */
enum { CISM__SCALE_F16 = 0, CISM__SCALE_E4M3 = 1 };

typedef struct cism__fmt4 {
    int32_t dtype;
    int32_t block;          /* weights per block: 16 or 32 */
    int32_t scale_kind;     /* CISM__SCALE_F16 (2 bytes) or CISM__SCALE_E4M3 (1 byte) */
    float scale_mul;        /* E4M3 scales: value = e4m3(byte) * scale_mul (a power of two) */
    int32_t block_bytes;
    int8_t levels[16];      /* level of each code */
} cism__fmt4;

/* The descriptor of a 4-bit dtype, NULL for other dtypes. */
const cism__fmt4 *cism__fmt4_of(int32_t dtype);

/* FP8 E4M3 (1 sign, 4 exponent bits with bias 7, 3 mantissa bits, no
 * infinities; 0x7F and 0xFF are NaN). */
extern const float cism__e4m3_table[256];

static inline float cism__fmt4_scale(const cism__fmt4 *f, const uint8_t *block) {
    if (f->scale_kind == CISM__SCALE_F16) return cism__f16_to_f32((uint16_t)(block[0] | (block[1] << 8)));
    return cism__e4m3_table[block[0]] * f->scale_mul;
}

/* int8 activation blocks (the integer-dot path): 32 activations as int8
 * times a float32 scale, with the sum of the 32 ints for offset corrections. */
#define CISM__A8_BLOCK 32
typedef struct cism__act8 {
    float d;
    int32_t sum;
    int8_t q[CISM__A8_BLOCK];
} cism__act8;

/* Bytes of one quantized activation row of cols elements. */
static inline int64_t cism__act8_row_bytes(int64_t cols) {
    return (cols + CISM__A8_BLOCK - 1) / CISM__A8_BLOCK * (int64_t)sizeof(cism__act8);
}

/* f32 rows of any dtype (quant.c). */
void cism__dequantize_row(int32_t dtype, const uint8_t *row, float *out, int64_t cols);

/* The scalar tier's kernels of the packed formats (kernels_scalar_quant.c). */
#define CISM__SCALAR_QUANT_DECL(nm) \
    void cism__scalar_matmul_##nm(const void *w, uint64_t row_bytes, int64_t cols, const float *x, int64_t ldx, \
                                  float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1); \
    void cism__scalar_matmul_a8_##nm(const void *w, uint64_t row_bytes, int64_t cols, const void *xq, int64_t ldq, \
                                     float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1); \
    void cism__scalar_row_##nm(const void *row, float *out, int64_t n);
CISM__SCALAR_QUANT_DECL(q8)
CISM__SCALAR_QUANT_DECL(q4)
CISM__SCALAR_QUANT_DECL(fp4)
CISM__SCALAR_QUANT_DECL(nl4)
CISM__SCALAR_QUANT_DECL(q4s)
void cism__quantize_act_scalar(const float *x, int64_t n, void *out);

#endif
