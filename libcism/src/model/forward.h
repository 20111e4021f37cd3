/* forward.h - the forward pass's state, for the files that implement a
 * layer kind's stages (forward.c runs the stages; model.h lists the kinds).
 *
 * A layer is five stages (ST_*); a token mixer other than attention takes the
 * first three (its input projections, its mixing, its output projection and
 * residual) and the MLP stages stay the same. Each stage is a begin, run once
 * by one thread, that returns the number of independent units, then the units
 * on any threads (threadpool.h). Each output element must be computed by
 * exactly one unit with arithmetic that does not depend on the unit
 * boundaries, the thread count or the other rows of the pass (determinism,
 * forward.c). */
#ifndef CISM_FORWARD_H
#define CISM_FORWARD_H

#include "session.h"

typedef struct fwd {
    cism__work *w;
    cism__seq *seqs;
    int64_t n_seqs;
    int64_t nt;                   /* rows in all */
    int64_t rows_out;             /* logits rows in all */
    float *logits;
    const cism_model *m;
    int replay;
    int64_t c_dim, c_ffn, c_voc;  /* rows per unit of the row-split stages */
    int64_t t_lo, hpu;            /* set by begin: first row needed, heads per attention unit */
    int stop;                     /* set by begin when every seq was cancelled */
    int64_t units;                /* the current stage's units (begin's answer) */
    const cism__weight *q_w;      /* set by begin: the stage's first matrix (its runs' places), or NULL */
    const float *q_x;             /* set by begin: the matmul input whose rows [q_t0, q_t1) (q_ld apart, q_cols */
    int64_t q_ld, q_cols, q_t0, q_t1, q_chunk; /* wide) it quantized, or (q_chunk > 0) left to the pool stage
                                     before the units, q_chunk rows a unit */
} fwd;

enum { ST_QKV, ST_ATT, ST_WO, ST_UP, ST_DOWN, ST_PER_LAYER };

/* y rows [r0, r1) = W x for nt input rows x (ldx apart) into y (ldy apart);
   xq: the same rows quantized (cism__fwd_qrow), packed weights then take the
   int8 kernels. Every matmul goes through here. */
void cism__fwd_linear(const cism__work *wk, const cism__weight *w, const float *x, int64_t ldx, const uint8_t *xq,
                      float *y, int64_t ldy, int64_t nt, int64_t r0, int64_t r1);
/* The quantized copy of input row t of the current stage (NULL on the float path). */
const uint8_t *cism__fwd_qrow(const cism__work *w, int64_t t);
/* Rows [t0, t1) of a stage's matmul input x into w->xq (in begin, serially). */
void cism__fwd_quantize_rows(cism__work *w, const float *x, int64_t ld, int64_t cols, int64_t t0, int64_t t1);
/* Rows per unit of a row-split stage, and units of such a stage. */
int64_t cism__fwd_chunk_rows(int64_t rows, int nth);
int64_t cism__fwd_units(int64_t rows, int64_t chunk);
void cism__fwd_row_range(int64_t u, int64_t chunk, int64_t rows, int64_t *r0, int64_t *r1);
/* rows [r0, r1) of y = W in, then x += y on them, for rows [t_lo, nt) */
void cism__fwd_proj_residual(fwd *f, const cism__weight *wt, const float *in, int64_t ld_in, int64_t r0, int64_t r1,
                             int64_t t_lo);
/* Per-head RMSNorm (weights of hd) of n_heads heads at v. */
void cism__fwd_head_norms(const cism__kernels *k, float *v, int64_t n_heads, int64_t hd, const float *w, float eps);
/* The first of seq sq's rows the current layer computes past its QKV stage. */
int64_t cism__fwd_seq_lo(const fwd *f, const cism__seq *sq);

/* Gated DeltaNet layers (layer_deltanet.c): the begin and the units of their stages ST_QKV..ST_WO. */
int64_t cism__dn_begin(fwd *f, int64_t l, int stage);
void cism__dn_unit(fwd *f, int64_t l, int stage, int64_t u, int ith);

#endif
