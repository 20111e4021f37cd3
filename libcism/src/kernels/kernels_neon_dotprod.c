/* kernels_neon_dotprod.c - the ARM64 tier for CPUs with the dot-product
 * instructions (SDOT/UDOT, ARMv8.2-A dotprod; built with +dotprod).
 *
 * The float kernels gain nothing from SDOT, so this tier keeps the NEON
 * tier's (the float-activation path of the packed formats included); the
 * int8-activation matmuls of every packed format use SDOT here, in the loops
 * of neon_quant.h: 4 rows x 1 token for decode, 8 rows x 4 tokens for
 * prefill (docs/KERNELS.md); the interleaved dtypes by lane-indexed SDOT on
 * their 4-row registers (neon_x16.h). Bit-identical to the scalar tier, like every
 * int8-activation kernel of the ARM tiers. dispatch.c selects this tier only
 * when HWCAP/sysctl report dotprod, and the qemu runs in CI check that
 * selection per CPU model. */
#include "neon_quant.h"
#include "neon_x16.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "kernels_neon_dotprod.c must be compiled with dotprod enabled (-march=armv8.2-a+dotprod)"
#endif

#define NQ_ENTRY(nm, DT)                                                                                         \
    static void matmul_a8_##nm(const void *w, uint64_t rb, int64_t cols, const void *xq, int64_t ldq, float *y, \
                               int64_t ldy, int64_t nt, int64_t r0, int64_t r1) {                               \
        nq_matmul_a8(DT, NQ_SDOT, w, rb, cols, xq, ldq, y, ldy, nt, r0, r1);                                    \
    }
NQ_ENTRY(q8, CISM_DTYPE_Q8)
NQ_ENTRY(q4, CISM_DTYPE_Q4)
NQ_ENTRY(fp4, CISM_DTYPE_FP4)
NQ_ENTRY(nl4, CISM_DTYPE_NL4)
NQ_ENTRY(q4s, CISM_DTYPE_Q4S)
NQ_ENTRY(q4a, CISM_DTYPE_Q4A)

/* the interleaved dtypes: lane-indexed SDOT on the 4-row registers (neon_x16.h) */
static void matmul_a8_q8x16(const void *w, uint64_t rb, int64_t cols, const void *xq, int64_t ldq, float *y, int64_t ldy,
                            int64_t nt, int64_t r0, int64_t r1) {
    nx_matmul_a8(1, NQ_SDOT, w, rb, cols, xq, ldq, y, ldy, nt, r0, r1);
}
static void matmul_a8_q4sx16(const void *w, uint64_t rb, int64_t cols, const void *xq, int64_t ldq, float *y, int64_t ldy,
                             int64_t nt, int64_t r0, int64_t r1) {
    nx_matmul_a8(0, NQ_SDOT, w, rb, cols, xq, ldq, y, ldy, nt, r0, r1);
}

/* 12 chains of SDOT (16 multiply-adds each) */
static int64_t int8_mac_loop(int64_t iters, int32_t *sink) {
    const int8x16_t a = vdupq_n_s8((int8_t)(*sink | 1)), b = vdupq_n_s8(3);
    int32x4_t c[12];
    int64_t i;
    int j;
    for (j = 0; j < 12; j++) c[j] = vdupq_n_s32(0);
    for (i = 0; i < iters; i++)
        for (j = 0; j < 12; j++) c[j] = vdotq_s32(c[j], a, b);
    for (j = 1; j < 12; j++) c[0] = vaddq_s32(c[0], c[j]);
    *sink += vaddvq_s32(c[0]);
    return iters * 12 * 16;
}

void cism__kernels_fill_neon_dotprod(cism__kernels *k) {
    k->int8_mac_loop = int8_mac_loop;
    k->matmul_a8[CISM_DTYPE_Q8] = matmul_a8_q8;
    k->matmul_a8[CISM_DTYPE_Q4] = matmul_a8_q4;
    k->matmul_a8[CISM_DTYPE_FP4] = matmul_a8_fp4;
    k->matmul_a8[CISM_DTYPE_NL4] = matmul_a8_nl4;
    k->matmul_a8[CISM_DTYPE_Q4S] = matmul_a8_q4s;
    k->matmul_a8[CISM_DTYPE_Q4A] = matmul_a8_q4a;
    k->matmul_a8[CISM_DTYPE_Q8X16] = matmul_a8_q8x16;
    k->matmul_a8[CISM_DTYPE_Q4SX16] = matmul_a8_q4sx16;
}
