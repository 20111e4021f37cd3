/* kernels_neon_dotprod.c - the ARM64 tier for CPUs with the dot-product
 * instructions (SDOT/UDOT, ARMv8.2-A dotprod; built with +dotprod).
 *
 * The float kernels gain nothing from SDOT, so this tier keeps the NEON
 * tier's; the int8-activation matmuls of the quantized weight formats go here
 * (docs/KERNELS.md). dispatch.c selects it only when HWCAP/sysctl report
 * dotprod, and the qemu runs in CI check that selection per CPU model. */
#include "kernels.h"

#include <arm_neon.h>

#if !defined(__ARM_FEATURE_DOTPROD)
#error "kernels_neon_dotprod.c must be compiled with dotprod enabled (-march=armv8.2-a+dotprod)"
#endif

void cism__kernels_fill_neon_dotprod(cism__kernels *k) { (void)k; }
