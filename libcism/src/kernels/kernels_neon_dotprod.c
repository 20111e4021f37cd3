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

/* every packed format's matmul_a8 by SDOT; the interleaved dtypes by
   lane-indexed SDOT on their 4-row registers (neon_x16.h); the probe: SDOT,
   16 multiply-adds each */
#define NQ_A8(DT) nq_matmul_a8(DT, NQ_SDOT, w, rb, cols, xq, ldq, y, ldy, nt, r0, r1)
#define NQ_X16_MODE NQ_SDOT
#define NQ_MAC_OP(c, a, b) vdotq_s32(c, a, b)
#define NQ_MAC_PER_OP 16
#include "neon_entries.h"

void cism__kernels_fill_neon_dotprod(cism__kernels *k) {
    nq_fill_entries(k);
}
