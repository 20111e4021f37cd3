/* threadpool.c - see threadpool.h. */
#include "threadpool.h"
#include "../platform/platform.h"

#include <stdlib.h>

#define SPIN_ROUNDS 20000   /* relax iterations before a worker goes to sleep */

typedef struct worker {
    cism__pool *pool;
    int ith;
    cism__thread *thread;
} worker;

struct cism__pool {
    int nth;
    worker *workers;
    cism__mutex *mutex;
    cism__cond *cond;
    cism__pool_fn fn;
    void *arg;
    volatile int32_t generation;  /* bumped for every region */
    volatile int32_t n_done;      /* workers finished with the current region */
    volatile int32_t n_sleeping;
    volatile int32_t stop;
    volatile int32_t barrier_count;
    volatile int32_t barrier_phase;
};

static void worker_main(void *p) {
    worker *w = (worker *)p;
    cism__pool *pool = w->pool;
    int32_t seen = 0;
    for (;;) {
        int i;
        int32_t gen = cism__atomic_load(&pool->generation);
        for (i = 0; gen == seen && i < SPIN_ROUNDS; i++) {
            cism__cpu_relax();
            gen = cism__atomic_load(&pool->generation);
        }
        if (gen == seen) {
            cism__mutex_lock(pool->mutex);
            cism__atomic_add(&pool->n_sleeping, 1);
            while ((gen = cism__atomic_load(&pool->generation)) == seen && !cism__atomic_load(&pool->stop))
                cism__cond_wait(pool->cond, pool->mutex);
            cism__atomic_add(&pool->n_sleeping, -1);
            cism__mutex_unlock(pool->mutex);
        }
        if (cism__atomic_load(&pool->stop)) break;
        seen = gen;
        pool->fn(pool->arg, w->ith, pool->nth);
        cism__atomic_add(&pool->n_done, 1);
    }
}

cism__pool *cism__pool_create(int n_threads) {
    cism__pool *pool;
    int i;
    if (n_threads < 1) n_threads = 1;
    pool = (cism__pool *)calloc(1, sizeof(*pool));
    if (!pool) return NULL;
    pool->nth = n_threads;
    pool->workers = (worker *)calloc((size_t)n_threads, sizeof(worker));
    pool->mutex = cism__mutex_create();
    pool->cond = cism__cond_create();
    if (!pool->workers || !pool->mutex || !pool->cond) {
        cism__pool_free(pool);
        return NULL;
    }
    for (i = 1; i < n_threads; i++) {
        pool->workers[i].pool = pool;
        pool->workers[i].ith = i;
        pool->workers[i].thread = cism__thread_start(worker_main, &pool->workers[i]);
        if (!pool->workers[i].thread) {
            cism__pool_free(pool);
            return NULL;
        }
    }
    return pool;
}

void cism__pool_free(cism__pool *pool) {
    int i;
    if (!pool) return;
    if (pool->workers && pool->mutex && pool->cond) {
        cism__mutex_lock(pool->mutex);
        cism__atomic_store(&pool->stop, 1);
        cism__cond_broadcast(pool->cond);
        cism__mutex_unlock(pool->mutex);
        for (i = 1; i < pool->nth; i++) cism__thread_join(pool->workers[i].thread);
    }
    free(pool->workers);
    cism__cond_destroy(pool->cond);
    cism__mutex_destroy(pool->mutex);
    free(pool);
}

int cism__pool_size(const cism__pool *pool) { return pool ? pool->nth : 1; }

void cism__pool_run(cism__pool *pool, cism__pool_fn fn, void *arg) {
    if (pool->nth == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    cism__atomic_store(&pool->n_done, 0);
    cism__atomic_add(&pool->generation, 1);
    if (cism__atomic_load(&pool->n_sleeping) > 0) {
        cism__mutex_lock(pool->mutex);
        cism__cond_broadcast(pool->cond);
        cism__mutex_unlock(pool->mutex);
    }
    fn(arg, 0, pool->nth);
    while (cism__atomic_load(&pool->n_done) < pool->nth - 1) cism__cpu_relax();
}

void cism__pool_barrier(cism__pool *pool) {
    int32_t phase;
    if (pool->nth == 1) return;
    phase = cism__atomic_load(&pool->barrier_phase);
    if (cism__atomic_add(&pool->barrier_count, 1) == pool->nth) {
        cism__atomic_store(&pool->barrier_count, 0);
        cism__atomic_add(&pool->barrier_phase, 1);
    } else {
        unsigned spins = 0;
        while (cism__atomic_load(&pool->barrier_phase) == phase) {
            cism__cpu_relax();
            if (++spins > 100000u) { cism__thread_yield(); spins = 0; }
        }
    }
}

void cism__split(int64_t n, int ith, int nth, int64_t align, int64_t *begin, int64_t *end) {
    int64_t units = (n + align - 1) / align;
    int64_t per = units / nth, extra = units % nth;
    int64_t u0 = ith * per + (ith < extra ? ith : extra);
    int64_t u1 = u0 + per + (ith < extra ? 1 : 0);
    int64_t b = u0 * align, e = u1 * align;
    *begin = b < n ? b : n;
    *end = e < n ? e : n;
}
