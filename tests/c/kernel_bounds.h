/* kernel_bounds.h - how far a SIMD tier may be from the scalar tier, per op.
 * The single place these bounds are written down (docs/KERNELS.md explains
 * them). u = 2^-24 is the unit roundoff of f32. Each bound is a worst case
 * derived from the order of operations, not a measured margin:
 *
 * matmul (every weight dtype; f16/bf16 widen exactly): both tiers sum the
 *   cols products of one output along a chain of at most cols/8 + 4 roundings
 *   (8 lanes, or 16 on AVX-512, then a fixed reduction tree; a product rounds
 *   once or is fused), so each is within (cols/8 + 4) u sum|w_i x_i| of the
 *   exact dot and they are within twice that of each other.
 * matmul, packed weights with float activations: the weights decode exactly
 *   (scale * level is exact in f32), so the f32 argument above holds with the
 *   dequantized weights.
 * matmul_a8 (int8 activations): each weight block b gives an exact int32 s_b;
 *   the scalar tier forms t_b = s_b * (dw_b * da_b) (2 roundings) and adds
 *   the nb terms in order (nb - 1 roundings), so it is within (nb + 1) u
 *   sum_b |t_b| of the exact sum, as is any tier that adds them in another
 *   order or fuses a product; twice that, with margin: 2 (nb + 2) u. (q4a:
 *   t_b = (dw_b s_b + mw_b sum_b) da_b, 4 roundings, measured against
 *   |dw_b s_b da_b| + |mw_b sum_b da_b|; the same margin holds.) The ARM
 *   and x86 tiers do the scalar tier's operations in its order and are checked
 *   to be bit-identical (KB_A8_EXACT).
 * attention: the scores carry the matmul bound (times the scale); softmax
 *   turns a score error ds into a relative error of at most 2 ds in every
 *   probability; exp itself differs by at most a few ulp (libm expf vs the
 *   tier polynomial) and the subtraction of the max rounds relative to the
 *   score range; the weighted sum of V adds a chain of n_kv roundings. All are
 *   relative to sum_t p_t |v_t,i|.
 * rmsnorm: the sum of squares is exact per term in double; only its order
 *   differs, so the f32 scale may differ by 1 ulp and each output by 2 ulp.
 * silu_mul: exp within a few ulp, then the same division and product: 8 ulp
 *   relative, plus an absolute 1e-30 for gate < -87 where the tiers clamp exp
 *   (the exact result is below 1e-36 there).
 * rope, row_to_f32, f32_to_f16: bit-identical (no FMA in rope; conversions are
 *   exact or correctly rounded to nearest even), NaN stays NaN.
 *
 * Independently of the bounds, every tier computes each output element by a
 * sequence of operations that does not depend on how rows and tokens are
 * split (tests check bitwise equality across splits).
 */
#ifndef CISM_KERNEL_BOUNDS_H
#define CISM_KERNEL_BOUNDS_H

#define KB_U (1.0 / 16777216.0)  /* 2^-24 */

/* |y_tier - y_scalar| <= KB_MATMUL(cols) * sum_i |w_i x_i| */
#define KB_MATMUL(cols) ((2.0 * ((double)(cols) / 8.0 + 4.0)) * KB_U)

/* |y_tier - y_scalar| <= KB_MATMUL_A8(nb) * sum_b |s_b dw_b da_b|, nb weight blocks per row */
#define KB_MATMUL_A8(nb) ((2.0 * ((double)(nb) + 2.0)) * KB_U)
/* tiers whose int8-activation kernels must give the scalar tier's bits */
#define KB_A8_EXACT(tier_name) (strncmp((tier_name), "neon", 4) == 0 || strncmp((tier_name), "avx", 3) == 0)

/* |out_tier - out_scalar| <= KB_ATTENTION(ds, range, n_kv) * sum_t p_t |v_t,i|,
   ds = scale * KB_MATMUL(head_dim) * max_t sum_i |q_i k_t,i|,
   range = max_t |s_t - max s| (scaled scores) */
#define KB_ATTENTION(ds, range, n_kv) (4.0 * (ds) + 4.0 * (range) * KB_U + 16.0 * KB_U + 2.0 * ((double)(n_kv) + 8.0) * KB_U)

/* |out_tier - out_scalar| <= KB_RMSNORM * |out_scalar| */
#define KB_RMSNORM (4.0 * KB_U)

/* |out_tier - out_scalar| <= KB_SILU_REL * |out_scalar| + KB_SILU_ABS */
#define KB_SILU_REL (16.0 * KB_U)
#define KB_SILU_ABS 1e-30

#endif
