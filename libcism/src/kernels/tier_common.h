/* tier_common.h - constants and helpers shared by the SIMD tier translation
 * units (no intrinsics here: each tier includes its own ISA header). */
#ifndef CISM_TIER_COMMON_H
#define CISM_TIER_COMMON_H

#include "kernels.h"

#if defined(_MSC_VER) && !defined(__clang__)
#define CISM__INLINE static __forceinline
#else
#define CISM__INLINE static inline __attribute__((always_inline))
#endif
#if defined(_MSC_VER) && !defined(__clang__)
#define CISM__NOINLINE __declspec(noinline)
#else
#define CISM__NOINLINE __attribute__((noinline))
#endif

/* Matmul token blocking: the activations of one token block (tokens x cols
   floats) should stay in L2 while every row tile of the thread's rows streams
   past them, so each weight row is read from memory once per block. */
#define CISM__X_BLOCK_BYTES (256 * 1024)
/* ... and the rows in panels of about this many weight bytes, each panel's
   token blocks one after the other, so that a panel stays in L2 while the
   token blocks pass (a call over a whole matrix, as one thread makes, would
   otherwise read every weight from memory or L3 once per token block). A
   call of one token block is one pass over its rows either way. */
#ifndef CISM__W_PANEL_BYTES
#define CISM__W_PANEL_BYTES (512 * 1024)
#endif
/* Groups of 16 rows (row_bytes each) per panel of a call of nt tokens in
   blocks of tb: all n_groups when one block holds every token. */
static inline int64_t cism__w_panel_groups(uint64_t row_bytes, int64_t nt, int64_t tb, int64_t n_groups) {
    const int64_t gp = CISM__W_PANEL_BYTES / (int64_t)(16 * row_bytes);
    return nt <= tb || n_groups <= gp ? n_groups : gp > 1 ? gp : 1;
}
/* Outputs (nt tokens x rows floats) a pass that comes back to them should
   find in L2: the AMX tier's outlier path runs the tiles over a panel for all
   its tokens, then adds the entries to those outputs. */
#ifndef CISM__Y_PANEL_BYTES
#define CISM__Y_PANEL_BYTES (256 * 1024)
#endif

/* Decode prefetch of the x86 tiers (measurements: KERNELS.md). The interleaved
   kernels fetch their group stream CISM__X16_PF_DIST bytes ahead into L1; the
   float decode tiles read CISM__DECODE_ROWS rows at a time (each row is a
   stream, and fewer streams is what the hardware prefetchers keep up with) and
   fetch their share CISM__FLOAT_PF_DIST ahead into L2. The hints name
   <xmmintrin.h> constants, so only x86 translation units use them; -D
   overrides are for measuring. */
#ifndef CISM__X16_PF_DIST
#define CISM__X16_PF_DIST 4096
#endif
/* Calls of up to this many tokens prefetch the group stream (decode,
   speculative verifies, batched decode: each group is read once per call);
   prefill, which reuses each group across its token tiles, leaves it to the
   hardware (measured, 32 MB of q8x16 at 1536 columns, one AVX-512 core: 8
   tokens cost 3.9 one-token passes without the prefetch, 1.7 with it). */
#ifndef CISM__X16_PF_TOKENS
#define CISM__X16_PF_TOKENS 16
#endif
/* While a loaded model's weights stream from memory (kernels.h
   cism__x16_streaming), the group stream is also fetched this far ahead into
   L2, so the L1 prefetch above finds its lines there rather than in DRAM
   (PERFORMANCE.md, "A far prefetch stage"). */
#ifndef CISM__X16_PF_FAR
#define CISM__X16_PF_FAR 8192
#endif
#ifndef CISM__X16_PF_HINT
#define CISM__X16_PF_HINT _MM_HINT_T0
#endif
#ifndef CISM__DECODE_ROWS
#define CISM__DECODE_ROWS 2
#endif
#ifndef CISM__FLOAT_PF_DIST
#define CISM__FLOAT_PF_DIST 16384
#endif
#ifndef CISM__FLOAT_PF_HINT
#define CISM__FLOAT_PF_HINT _MM_HINT_T1
#endif

/* expf on [-87.3, 88.4]: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-7
   polynomial (Cephes' expf coefficients, relative error ~1e-7), times 2^n
   built in the exponent field. Inputs are clamped to the range first, so
   exp(x < -87.3) gives ~1.2e-38 instead of a subnormal or 0 and exp(x > 88.4)
   gives ~2.7e38 instead of inf; softmax (arguments <= 0) and SiLU (where the
   result is then ~0 either way) never notice. NaN stays NaN. */
#define CISM__EXP_HI 88.3762626647949f
#define CISM__EXP_LO (-87.3365447505531f)
#define CISM__LOG2E 1.44269504088896341f
#define CISM__LN2_HI 0.693359375f
#define CISM__LN2_LO (-2.12194440e-4f)
#define CISM__EXP_P0 1.9875691500e-4f
#define CISM__EXP_P1 1.3981999507e-3f
#define CISM__EXP_P2 8.3334519073e-3f
#define CISM__EXP_P3 4.1665795894e-2f
#define CISM__EXP_P4 1.6666665459e-1f
#define CISM__EXP_P5 5.0000001201e-1f

/* The packed-format kernels of a tier live in their own translation unit
   (kernels_<tier>_quant.c, built with the tier's flags); the tier's fill
   function calls these. */
void cism__fill_avx2_quant(cism__kernels *k);
void cism__fill_avx512_quant(cism__kernels *k);

#endif
