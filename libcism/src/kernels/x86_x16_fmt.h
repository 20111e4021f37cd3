/* x86_x16_fmt.h - the interleaved formats (xf) as the x86 int8 kernels name
 * them: the AVX2 and AVX-512 tiers (through x86_quant.h) and the AMX tiles
 * (kernels_amx.c). Included after quant.h and tier_common.h. */
#ifndef CISM_X86_X16_FMT_H
#define CISM_X86_X16_FMT_H

/* The interleaved formats (xf): the 256-bit kernels of x86_x16.h, the drivers, the outlier columns */
enum { X16_Q8, X16_Q4S, X16_Q4A, X16_Q6, X16_Q5, X16_Q3, X16_Q2 };
#define X16_PLANE(xf) ((xf) == X16_Q3 || (xf) == X16_Q2) /* q3x16, q2x16: codes from the 2-bit plane, no nibbles */
#define X16_QINT(xf) ((xf) == X16_Q6 || (xf) == X16_Q5 || X16_PLANE(xf)) /* q6x16, q5x16, q3x16, q2x16: fp16 scales, codes = level + H */
#define X16_HALF(xf) cism__qint_half(x16_dtype(xf)) /* H: level = code - H */
#define X16_BLOCK(xf) ((xf) == X16_Q4S ? 16 : 32) /* weights per block, one scale each */
CISM__INLINE int32_t x16_dtype(const int xf) {
    return xf == X16_Q8 ? CISM_DTYPE_Q8X16 : xf == X16_Q4S ? CISM_DTYPE_Q4SX16 : xf == X16_Q4A ? CISM_DTYPE_Q4AX16
           : xf == X16_Q6 ? CISM_DTYPE_Q6X16 : xf == X16_Q5 ? CISM_DTYPE_Q5X16 : xf == X16_Q3 ? CISM_DTYPE_Q3X16
                                                                                : CISM_DTYPE_Q2X16;
}
/* The xf of an interleaved dtype or of its base (q8, q4s, q4a, q6, q5, q3, q2) */
CISM__INLINE int x16_xf_of(const int32_t dtype) {
    const int32_t b = cism__dtype_base(dtype);
    return b == CISM_DTYPE_Q4S ? X16_Q4S : b == CISM_DTYPE_Q4A ? X16_Q4A : b == CISM_DTYPE_Q6 ? X16_Q6
           : b == CISM_DTYPE_Q5 ? X16_Q5 : b == CISM_DTYPE_Q3 ? X16_Q3 : b == CISM_DTYPE_Q2 ? X16_Q2 : X16_Q8;
}
/* STMT(XF) for the interleaved format xf, XF a constant in each case (so
   that the loops in STMT are compiled once per format) */
#define X16_DISPATCH(xf, STMT)                    \
    switch (xf) {                                 \
    case X16_Q8: STMT(X16_Q8); break;             \
    case X16_Q4S: STMT(X16_Q4S); break;           \
    case X16_Q4A: STMT(X16_Q4A); break;           \
    case X16_Q6: STMT(X16_Q6); break;             \
    case X16_Q5: STMT(X16_Q5); break;             \
    case X16_Q3: STMT(X16_Q3); break;             \
    default: STMT(X16_Q2); break;                 \
    }

#endif
