/* threadpool.h - a persistent pool of worker threads running parallel regions.
 *
 * cism__pool_run(pool, fn, arg) calls fn(arg, ith, nth) on every thread of the
 * pool (the caller is thread 0) and returns when all have returned. Inside fn,
 * cism__pool_barrier() waits until every thread reaches it.
 *
 * Every wait (a worker between regions, a barrier, the caller waiting for the
 * workers to finish) spins briefly with a pause hint, then yields the CPU for a
 * while, then sleeps on a condition variable until woken: cheap while each
 * thread owns a core, and harmless when the cores are shared with other work
 * or the pool has more threads than free cores (docs/THREADING.md).
 *
 * Work sharing inside a region: a stage of n independent units is handed out
 * with cism__work_*: each thread first takes the units of its own static
 * share, in order (so with equal speed every thread keeps the same rows from
 * token to token), then takes what is left of the others' shares. Every unit
 * is taken exactly once; which thread takes it never changes the result as
 * long as a unit's computation depends only on the unit. */
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

/* One thread's cursor over the stages of a region: declare one per thread in
   the region function, zero-initialised ({0}), and use it for every stage. */
typedef struct cism__work {
    int stage;          /* stages started by this thread in this region */
    int ith, nth;
    int64_t n;          /* units in the current stage */
    int victim;         /* shares visited: 0 = own */
} cism__work;

/* Starts a stage of n units. All threads of the region must run the same
   sequence of stages, each ended by cism__work_end and then a barrier. */
void cism__work_start(cism__pool *pool, cism__work *w, int ith, int nth, int64_t n);
/* Next unit for this thread in *unit; 0 when the stage has none left. */
int  cism__work_next(cism__pool *pool, cism__work *w, int64_t *unit);
/* Every thread calls this once it has no more units, before the barrier. */
void cism__work_end(cism__pool *pool, cism__work *w);

/* The half-open slice [*begin, *end) of n items that thread ith of nth owns,
   in units of `align` items (the last slice takes the remainder). */
void cism__split(int64_t n, int ith, int nth, int64_t align, int64_t *begin, int64_t *end);

#endif
