/* outlier_runs.h - the outlier channels of a call's tokens, listed run by run
 * (model/act_outliers.c has the rule; x86_outliers.h adds the entries): a
 * run's distinct channels and each table entry's index among them, so that a
 * group of 16 rows decodes each distinct column once for all the run's
 * tokens. A run ends where CISM__ORUN_SLOTS would overflow, after
 * CISM__ORUN_TOKENS tokens or at the end its builder gives. Runs only group
 * the work: every output element gets its entries in table order whatever
 * the runs, so results never depend on them. The kernels build a call's runs
 * themselves, or take those forward.c built once for a stage's quantized
 * input and hands to every call of the stage (cism__oruns). */
#ifndef CISM_OUTLIER_RUNS_H
#define CISM_OUTLIER_RUNS_H

#include "quant.h"
#include "tier_common.h"

/* SLOTS: 256 since 2026-12-07 (128 before): the down projection's runs of
   the real SmolLM2 held 13-30 tokens at 128, so each column was decoded
   about as often as it was added (docs/OUTLIER_COST.md). A slot is a byte
   (ix). */
enum { CISM__ORUN_SLOTS = 256, CISM__ORUN_TOKENS = 256 };
typedef char cism__orun_slots_fit_a_byte[CISM__ORUN_SLOTS <= 256 ? 1 : -1];

typedef struct cism__orun {
    int64_t t0, t1; /* its tokens */
    int n;          /* distinct channels */
    int32_t ch[CISM__ORUN_SLOTS];
    uint8_t ix[CISM__ORUN_TOKENS][CISM__A8_MAX_OUT]; /* token t0 + i's entry k: channel ch[ix[i][k]] */
} cism__orun;

/* Bytes of a run's places: where its channels sit in a matrix of one layout,
   the tier's own record (x86_outliers.h ocols; plain integers) */
enum { CISM__ORUN_PLACE_BYTES = 10 * 1024 };

/* The runs of nt quantized rows at xq (ldq bytes apart), or xq NULL (none);
   room for cap runs at run (the owner's). places (the owner's, room for cap
   runs, or NULL): the runs' places in matrices of dtype pl_dtype with rows of
   pl_rb bytes, built by the tier's oplaces_build (kernels.h) for every call
   of a stage, or pl_dtype -1 (none; cism__oruns_build clears them). */
typedef struct cism__oruns {
    const uint8_t *xq;
    int64_t ldq, nt;
    int n, cap;
    cism__orun *run;
    void *places;
    int32_t pl_dtype;
    uint64_t pl_rb;
} cism__oruns;

/* Run i's places */
static inline void *cism__orun_places(const cism__oruns *rs, int64_t i) {
    return (uint8_t *)rs->places + i * CISM__ORUN_PLACE_BYTES;
}

/* Token t's outlier table: the last bytes of its quantized row (ldq apart). */
static inline const cism__act8_out *cism__out_table(const uint8_t *xq, int64_t ldq, int64_t t) {
    return (const cism__act8_out *)(const void *)(xq + t * ldq + ldq - (int64_t)sizeof(cism__act8_out));
}

/* Tokens of a matmul input of cols columns whose activations stay in L2 at
   once (the runs end there too): the bytes a token's row takes (its blocks,
   then its outlier table, whatever the stride of the rows: a session's rows
   are as wide as its widest input). Narrower inputs take longer runs, so each
   group decodes a run's columns for more tokens. */
static inline int64_t cism__orun_block(int64_t cols) {
    const int64_t b = cism__act8_row_bytes(cols) + (int64_t)sizeof(cism__act8_out);
    return CISM__X_BLOCK_BYTES / b > 4 ? CISM__X_BLOCK_BYTES / b : 4;
}

/* The run from token t0 (at least one token, at most to t_max) into r; its end. */
int64_t cism__orun_build(cism__orun *r, const uint8_t *xq, int64_t ldq, int64_t t0, int64_t t_max);
/* The most runs that cism__oruns_build makes of nt tokens: every run but the
   last holds at least m tokens (it ends when the next token's entries, at most
   CISM__A8_MAX_OUT, would overflow its slots, after a token block or after
   CISM__ORUN_TOKENS tokens); cols: the widest input's, whose runs are the
   shortest. */
static inline int64_t cism__oruns_max(int64_t nt, int64_t cols) {
    const int64_t tb = cism__orun_block(cols);
    const int64_t m = CISM__ORUN_SLOTS / CISM__A8_MAX_OUT < tb ? CISM__ORUN_SLOTS / CISM__A8_MAX_OUT : tb;
    return nt / m + 1;
}

/* All runs of nt tokens of cols columns, each within cism__orun_block(cols)
   tokens of its start; rs->xq = NULL when they would take more than rs->cap. */
void cism__oruns_build(cism__oruns *rs, const uint8_t *xq, int64_t ldq, int64_t cols, int64_t nt);

#endif
