/* work.c - the scratch of a forward pass (cism__work, session.h): a session's
 * for its own evals, a batch's for the rows of several sessions. */
#include "session.h"
#include "deltanet.h"
#include "../core/error.h"
#include "../kernels/quant.h"
#include "../kernels/outlier_runs.h"

#include <stdlib.h>
#include <string.h>

/* Attention scratch of one thread (forward.c works on CISM__ATT_TOKENS tokens
   times the query heads of one KV head, over one split of CISM__ATT_SPLIT
   positions at a time): the split's scores, a partial result and two pairs
   (max, sum) per query. It does not grow with the context. */
static int64_t scores_per_thread(const cism__hparams *hp) {
    return CISM__ATT_TOKENS * (hp->n_heads / hp->n_kv_heads) * (CISM__ATT_SPLIT + hp->head_dim + 4);
}

/* Slots of split-KV partial results (head_dim + 2 floats each): every head
   and every split of the context for up to CISM__ATT_PART_ROWS rows. */
static int64_t att_part_slots(const cism__hparams *hp, int64_t n_rows, int64_t n_ctx) {
    int64_t rows = n_rows < CISM__ATT_PART_ROWS ? n_rows : CISM__ATT_PART_ROWS;
    return rows * hp->n_heads * ((n_ctx + CISM__ATT_SPLIT - 1) / CISM__ATT_SPLIT);
}

static int64_t widest_input(const cism__hparams *hp) {
    int64_t q_rows = hp->n_heads * hp->head_dim, widest = hp->dim > q_rows ? hp->dim : q_rows;
    if (hp->n_dn_layers && hp->dn_v_heads * hp->dn_v_dim > widest) widest = hp->dn_v_heads * hp->dn_v_dim; /* DeltaNet out_proj */
    return hp->ffn_dim > widest ? hp->ffn_dim : widest;
}

/* Bytes of one int8 activation row (act_quant): the widest matmul input, then
   its outlier table (act_outliers.c), in whole 64-byte lines. */
static int64_t xq_row_bytes(const cism__hparams *hp) {
    return (cism__act8_row_bytes(widest_input(hp)) + (int64_t)sizeof(cism__act8_out) + 63) / 64 * 64;
}

/* Floats of the outlier split's scratch (act_outliers.c), per thread: four
   per block of the widest input; whole 64-byte lines. */
static int64_t xo_floats(const cism__hparams *hp) {
    return (4 * ((widest_input(hp) + CISM__A8_BLOCK - 1) / CISM__A8_BLOCK) + 15) / 16 * 16;
}

static int64_t work_floats(const cism__hparams *hp, int64_t n_rows, int64_t n_ctx, int nth, int act_quant) {
    int64_t q_rows = hp->n_heads * hp->head_dim;
    return n_rows * hp->dim * 3 + n_rows * q_rows * 2 + n_rows * hp->ffn_dim * 2 +
           (int64_t)nth * n_rows * hp->head_dim + (int64_t)nth * scores_per_thread(hp) +
           att_part_slots(hp, n_rows, n_ctx) * (hp->head_dim + 2) +
           n_rows * hp->rope_dim * 2 + (hp->n_shortconv ? n_rows * hp->dim * 3 : 0) + n_rows * cism__mix_row_floats(hp) +
           (int64_t)nth * cism__mix_thread_floats(hp) + (act_quant ? (xq_row_bytes(hp) * n_rows + 3) / 4 + (int64_t)nth * xo_floats(hp) : 0);
}

/* Bytes of the outlier runs of a stage's n_rows quantized rows (forward.c):
   the header, then the runs, then their places */
static int64_t oruns_bytes(const cism__hparams *hp, int64_t n_rows) {
    return (int64_t)sizeof(cism__oruns) +
           cism__oruns_max(n_rows, widest_input(hp)) * ((int64_t)sizeof(cism__orun) + CISM__ORUN_PLACE_BYTES);
}

int64_t cism__work_bytes(const cism__hparams *hp, int64_t n_rows, int64_t n_ctx, int nth, int act_quant) {
    return work_floats(hp, n_rows, n_ctx, nth, act_quant) * 4 + n_rows + (act_quant ? oruns_bytes(hp, n_rows) : 0);
}

void *cism__alloc_floats(int64_t n, int *failed) {
    void *p;
    if (n <= 0) n = 1;
    p = calloc((size_t)n, sizeof(float));
    if (!p) *failed = 1;
    return p;
}

void cism__work_free_buffers(cism__work *w) {
    free(w->x); free(w->xb); free(w->q); free(w->att); free(w->ob); free(w->hb); free(w->hb2);
    free(w->tmp); free(w->scores); free(w->rope_cos); free(w->rope_sin); free(w->xq); free(w->oruns); free(w->bad); free(w->conv); free(w->mix);
    w->x = w->xb = w->q = w->att = w->ob = w->hb = w->hb2 = w->conv = w->mix = w->tmp = w->scores = w->rope_cos = w->rope_sin = NULL;
    w->xq = w->bad = NULL;
    w->oruns = NULL;
    w->xo_tmp = w->att_part = NULL;
    w->att_part_slots = 0;
    w->n_rows = w->n_ctx = 0;
}

void cism__work_free(cism__work *w) {
    cism__work_free_buffers(w);
    cism__pool_free(w->pool);
    w->pool = NULL;
}

cism_status cism__work_ensure(cism__work *w, const cism__hparams *hp, int64_t n_rows, int64_t n_ctx) {
    int64_t q_rows = hp->n_heads * hp->head_dim;
    int failed = 0;
    if (w->x && (w->n_rows < n_rows || w->n_ctx < n_ctx)) cism__work_free_buffers(w);
    if (!w->x) {
        w->x = (float *)cism__alloc_floats(n_rows * hp->dim, &failed);
        w->xb = (float *)cism__alloc_floats(n_rows * hp->dim, &failed);
        w->q = (float *)cism__alloc_floats(n_rows * q_rows, &failed);
        w->att = (float *)cism__alloc_floats(n_rows * q_rows, &failed);
        w->ob = (float *)cism__alloc_floats(n_rows * hp->dim, &failed);
        w->hb = (float *)cism__alloc_floats(n_rows * hp->ffn_dim, &failed);
        w->hb2 = (float *)cism__alloc_floats(n_rows * hp->ffn_dim, &failed);
        w->tmp = (float *)cism__alloc_floats((int64_t)w->nth * n_rows * hp->head_dim, &failed);
        w->scores_per_thread = scores_per_thread(hp);
        w->att_part_slots = att_part_slots(hp, n_rows, n_ctx);
        w->scores = (float *)cism__alloc_floats((int64_t)w->nth * w->scores_per_thread +
                                                    w->att_part_slots * (hp->head_dim + 2), &failed);
        w->att_part = w->scores ? w->scores + (int64_t)w->nth * w->scores_per_thread : NULL;
        w->rope_cos = (float *)cism__alloc_floats(n_rows * hp->rope_dim, &failed); /* two tables of rope_dim / 2 */
        w->rope_sin = (float *)cism__alloc_floats(n_rows * hp->rope_dim, &failed);
        if (hp->n_shortconv) w->conv = (float *)cism__alloc_floats(n_rows * hp->dim * 3, &failed);
        w->mix = (float *)cism__alloc_floats(n_rows * cism__mix_row_floats(hp) + (int64_t)w->nth * cism__mix_thread_floats(hp), &failed);
        w->bad = (uint8_t *)calloc((size_t)n_rows, 1);
        if (!w->bad) failed = 1;
        if (w->act_quant) { /* one quantized row per token, for the widest matmul input */
            w->xq_row_bytes = xq_row_bytes(hp);
            w->xo_floats = xo_floats(hp);
            w->xq = (uint8_t *)cism__alloc_floats((w->xq_row_bytes * n_rows + 3) / 4 + (int64_t)w->nth * w->xo_floats, &failed);
            w->xo_tmp = w->xq ? (float *)(void *)(w->xq + w->xq_row_bytes * n_rows) : NULL;
            w->oruns = (cism__oruns *)calloc(1, (size_t)oruns_bytes(hp, n_rows)); /* xq NULL: none yet */
            if (!w->oruns) failed = 1;
            else { /* every run a stage's rows can take (cism__oruns_max), after the header, then their places */
                w->oruns->cap = (int)cism__oruns_max(n_rows, widest_input(hp));
                w->oruns->run = (cism__orun *)(void *)(w->oruns + 1);
                w->oruns->places = w->oruns->run + w->oruns->cap;
                w->oruns->pl_dtype = -1;
            }
        }
        if (failed) {
            cism__work_free_buffers(w);
            return cism__fail(CISM_ERR_OUT_OF_MEMORY, "out of memory for the scratch buffers (%.1f MiB)",
                              (double)cism__work_bytes(hp, n_rows, n_ctx, w->nth, w->act_quant) / 1048576.0);
        }
        w->n_rows = n_rows;
        w->n_ctx = n_ctx;
    }
    if (!w->pool) {
        w->pool = cism__pool_create(w->nth);
        if (!w->pool) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cannot start %d threads", w->nth);
    }
    return CISM_OK;
}
