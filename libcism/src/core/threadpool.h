/* threadpool.h - a persistent pool of worker threads running parallel regions.
 *
 * Two kinds of region:
 *
 * cism__pool_run(pool, fn, arg) calls fn(arg, ith, nth) once on every thread
 * of the pool (the caller is thread 0) and returns when all have returned.
 *
 * cism__pool_run_stages(pool, stages, arg) runs a sequence of stages, each a
 * set of independent units. The thread that completes a stage prepares the
 * next one (stages->begin: serial work such as a shared normalised copy of the
 * activations, and the stage's unit count) and publishes it; every thread that
 * is running takes units of the current stage: its own static share first, in
 * order, then what is left of the others' shares. A stage ends when its units
 * are done, not when every thread has arrived, so a thread the OS has
 * descheduled holds nobody up unless it holds a unit; when it runs again it
 * joins whatever stage is current. The region ends when begin says so, once
 * every thread that joined has left it. Every unit is done exactly once, by
 * whichever thread takes it: results do not depend on the thread count or on
 * scheduling as long as a unit's work depends only on the unit. A thread
 * reads shared data only inside a unit it took or in begin, i.e. only while
 * the stage that data belongs to is current (docs/THREADING.md).
 *
 * Every wait spins briefly with a pause hint, then sleeps on a condition
 * variable until the awaited value changes. */
#ifndef CISM_THREADPOOL_H
#define CISM_THREADPOOL_H

#include <stdint.h>

typedef struct cism__pool cism__pool;
typedef void (*cism__pool_fn)(void *arg, int ith, int nth);

typedef struct cism__stages {
    /* Prepares stage s (s = 0, 1, ... in order) and returns its units: > 0,
       0 to skip it, or -1 to end the region. Run by one thread, after every
       unit of the previous stages is done and before any unit of stage s. */
    int64_t (*begin)(void *arg, int32_t s);
    /* Unit u of stage s, run by thread ith (private scratch may be indexed by
       ith; everything else a unit writes must belong to that unit alone). */
    void (*unit)(void *arg, int32_t s, int64_t u, int ith, int nth);
} cism__stages;

/* n_threads >= 1 counts the caller. NULL on failure. */
cism__pool *cism__pool_create(int n_threads);
void cism__pool_free(cism__pool *pool);
int  cism__pool_size(const cism__pool *pool);
void cism__pool_run(cism__pool *pool, cism__pool_fn fn, void *arg);
void cism__pool_run_stages(cism__pool *pool, const cism__stages *stages, void *arg);

/* The half-open slice [*begin, *end) of n items that thread ith of nth owns,
   in units of `align` items (the last slice takes the remainder). */
void cism__split(int64_t n, int ith, int nth, int64_t align, int64_t *begin, int64_t *end);

#endif
