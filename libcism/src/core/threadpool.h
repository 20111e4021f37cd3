/* threadpool.h - a persistent pool of worker threads running parallel regions.
 *
 * cism__pool_run(pool, fn, arg) calls fn(arg, ith, nth) on every thread of the
 * pool (the caller is thread 0) and returns when all have returned. Inside fn,
 * cism__pool_barrier() waits until every thread reaches it. Workers spin for a
 * short while between regions, then sleep on a condition variable. */
#ifndef CISM_THREADPOOL_H
#define CISM_THREADPOOL_H

#include <stdint.h>

typedef struct cism__pool cism__pool;
typedef void (*cism__pool_fn)(void *arg, int ith, int nth);

/* n_threads >= 1 counts the caller. NULL on failure. */
cism__pool *cism__pool_create(int n_threads);
void cism__pool_free(cism__pool *pool);
int  cism__pool_size(const cism__pool *pool);
void cism__pool_run(cism__pool *pool, cism__pool_fn fn, void *arg);
void cism__pool_barrier(cism__pool *pool);

/* The half-open slice [*begin, *end) of n items that thread ith of nth owns,
   in units of `align` items (the last slice takes the remainder). */
void cism__split(int64_t n, int ith, int nth, int64_t align, int64_t *begin, int64_t *end);

#endif
