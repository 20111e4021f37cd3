/* outlier_runs.c - a call's outlier channels, run by run (outlier_runs.h). */
#include "outlier_runs.h"

enum { OHASH = 512 }; /* open addressing over the run's channels (at most CISM__ORUN_SLOTS) */

int64_t cism__orun_build(cism__orun *r, const uint8_t *xq, int64_t ldq, int64_t t0, int64_t t_max) {
    int32_t key[OHASH];
    uint8_t slot[OHASH];
    int64_t t;
    int k;
    for (k = 0; k < OHASH; k++) key[k] = -1;
    r->t0 = t0;
    r->n = 0;
    for (t = t0; t < t_max && t - t0 < CISM__ORUN_TOKENS; t++) {
        const cism__act8_out *o = cism__out_table(xq, ldq, t);
        if (r->n + o->n > CISM__ORUN_SLOTS) break;
        for (k = 0; k < o->n; k++) {
            const int32_t c = o->idx[k];
            uint32_t h = ((uint32_t)c * 2654435761u) >> 23; /* 9 bits: OHASH */
            while (key[h] != -1 && key[h] != c) h = (h + 1) & (OHASH - 1);
            if (key[h] == -1) {
                key[h] = c;
                slot[h] = (uint8_t)r->n;
                r->ch[r->n++] = c;
            }
            r->ix[t - t0][k] = slot[h];
        }
    }
    r->t1 = t;
    return t;
}

void cism__oruns_build(cism__oruns *rs, const uint8_t *xq, int64_t ldq, int64_t cols, int64_t nt) {
    const int64_t tb = cism__orun_block(cols);
    int64_t t0;
    rs->xq = NULL;
    rs->pl_dtype = -1;
    rs->ldq = ldq;
    rs->nt = nt;
    rs->n = 0;
    for (t0 = 0; t0 < nt; t0 = rs->run[rs->n++].t1) {
        if (rs->n == rs->cap) return;
        cism__orun_build(&rs->run[rs->n], xq, ldq, t0, nt - t0 < tb ? nt : t0 + tb);
    }
    rs->xq = xq;
}
