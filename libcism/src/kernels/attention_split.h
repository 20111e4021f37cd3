/* attention_split.h - the split attention kernel (cism__attention_split_fn,
 * kernels.h) of the SIMD tiers, one body for AVX2, AVX-512 and NEON.
 *
 * Included by a tier's translation unit (compiled with its flags) after it
 * defines, in its own vectors:
 *   KV_BLOCK_FLOATS                      floats of the widened K/V block on the stack
 *   widen_rows(kv, dt, b0, n, hd, buf)   rows [b0, b0 + n) of a cache as f32 rows
 *   att_scores(q, k, n, hd, scale, dst)  dst[t] = (q . k_t) * scale, t < n, each row
 *                                        with its own accumulator
 *   att_exp_sum(s, n, &mx)               s[t] = exp(s[t] - max), returns the sum
 *                                        (lanes in a fixed order given n), max in mx
 *   pv_rows_heads(p, ldp, v, n, hd, out, ldo, nh)
 *                                        out_h += sum_t p_h[t] v_t, in t order, for
 *                                        nh heads (p_h = p + h ldp, out_h = out + h ldo)
 *   kv_prefetch(p, bytes)                a prefetch hint for [p, p + bytes) (into L2)
 * The range's K rows are widened a block (about 16 KiB) at a time and shared by
 * every query of the block; then each query's exponentials and sum; then the
 * V rows a block at a time, each shared by the heads of a query. Scratch is
 * the range's scores only. Each output is the same sequence of operations
 * whatever n_tok, n_grp or the block boundaries (which start at the range's
 * first row).
 *
 * Prefetch: rows streamed from memory would otherwise stall the widening (the
 * hardware prefetchers do not run ahead of a split's short bursts: measured at
 * 8k context, one AVX-512 thread, 51.6 -> 35.0 ns per position and KV head,
 * docs/PERFORMANCE.md), so while it works on this range the kernel fetches the
 * caller's next range (cism__att_next) into L2, its K rows a slice per
 * att_scores call, its V rows n_grp slices per pv_rows_heads call. Hints only: no
 * result depends on them. */
#ifndef CISM_ATTENTION_SPLIT_H
#define CISM_ATTENTION_SPLIT_H

/* The next range's bytes [*done, *done + step) of [0, total) from base. */
static void att_prefetch_step(const uint8_t *base, uint64_t total, uint64_t step, uint64_t *done) {
    uint64_t e = *done + step < total ? *done + step : total;
    if (*done < e) kv_prefetch(base + *done, e - *done);
    *done = e;
}

static void attention_split(const float *q, int64_t ldq, float *out, int64_t ldo, float *ml, int64_t ldm, int64_t n_tok,
                            int64_t n_grp, const void *k, const void *v, int32_t k_dtype, int32_t v_dtype, int64_t n_kv,
                            int64_t n_lim, int64_t hd, float scale, float *scores, const cism__att_next *next) {
    float buf[KV_BLOCK_FLOATS];
    int64_t n_max = n_lim + n_tok - 1 < n_kv ? n_lim + n_tok - 1 : n_kv;
    int64_t kb = KV_BLOCK_FLOATS / hd, b0, a, i;
    const uint8_t *pk = NULL, *pv = NULL;
    uint64_t pk_n = 0, pv_n = 0, pk_done = 0, pv_done = 0, pk_step = 0, pv_step = 0;
    kb = kb > 4096 / hd ? 4096 / hd : kb; /* about 16 KiB of rows: stays in L1 */
    kb = kb > 64 ? 64 : kb < 8 ? 8 : kb;
    if (next && next->n_kv > 0 && n_max > 0) { /* one slice per (block, head) call of each pass */
        const uint64_t calls = (uint64_t)((n_max + kb - 1) / kb) * (uint64_t)n_grp;
        pk = (const uint8_t *)next->k;
        pv = (const uint8_t *)next->v;
        pk_n = (uint64_t)next->n_kv * cism__kv_row_bytes(k_dtype, hd);
        pv_n = (uint64_t)next->n_kv * cism__kv_row_bytes(v_dtype, hd);
        pk_step = (pk_n + calls - 1) / calls;
        pv_step = (pv_n + calls - 1) / calls;
    }
    for (b0 = 0; b0 < n_max; b0 += kb) { /* scores, a block of keys at a time */
        int64_t bn = n_max - b0 < kb ? n_max - b0 : kb;
        const float *kf = widen_rows(k, k_dtype, b0, bn, hd, buf);
        for (a = 0; a < n_tok; a++) {
            int64_t na = n_lim + a < n_kv ? n_lim + a : n_kv, nk = na - b0 < bn ? na - b0 : bn;
            for (i = 0; i < n_grp && nk > 0; i++) {
                if (pk) att_prefetch_step(pk, pk_n, pk_step, &pk_done);
#ifdef ATT_SCORES_PAIR
                if (i + 1 < n_grp) { /* two heads of the token at once: each K row loaded once for both */
                    if (pk) att_prefetch_step(pk, pk_n, pk_step, &pk_done);
                    att_scores2(q + a * ldq + i * hd, q + a * ldq + (i + 1) * hd, kf, nk, hd, scale,
                                scores + (a * n_grp + i) * n_kv + b0, scores + (a * n_grp + i + 1) * n_kv + b0);
                    i++;
                    continue;
                }
#endif
                att_scores(q + a * ldq + i * hd, kf, nk, hd, scale, scores + (a * n_grp + i) * n_kv + b0);
            }
        }
    }
    for (a = 0; a < n_tok; a++) {
        int64_t na = n_lim + a < n_kv ? n_lim + a : n_kv;
        for (i = 0; i < n_grp; i++) {
            float *m = ml + a * ldm + 2 * i;
            if (na > 0) m[1] = att_exp_sum(scores + (a * n_grp + i) * n_kv, na, &m[0]);
            else {
                m[0] = -INFINITY;
                m[1] = 0.0f;
            }
            memset(out + a * ldo + i * hd, 0, (size_t)hd * sizeof(float));
        }
    }
    for (b0 = 0; b0 < n_max; b0 += kb) { /* out = sum_t e_t v_t, a block of values at a time */
        int64_t bn = n_max - b0 < kb ? n_max - b0 : kb;
        const float *vf = widen_rows(v, v_dtype, b0, bn, hd, buf);
        for (a = 0; a < n_tok; a++) {
            int64_t na = n_lim + a < n_kv ? n_lim + a : n_kv, nk = na - b0 < bn ? na - b0 : bn;
            if (nk <= 0) continue;
            if (pv) att_prefetch_step(pv, pv_n, pv_step * (uint64_t)n_grp, &pv_done);
            pv_rows_heads(scores + a * n_grp * n_kv + b0, n_kv, vf, nk, hd, out + a * ldo, hd, n_grp);
        }
    }
}

#endif
