/* threadpool.c - see threadpool.h. */
#include "threadpool.h"
#include "../platform/platform.h"

#include <stdlib.h>

/* The wait policy: SPIN_ROUNDS pause hints (~25-100 ns each, so tens of
   microseconds: longer than a typical gap between stages, far shorter than a
   scheduler time slice), then sleep on the condition variable, woken by the
   thread that changes the value. No sched_yield step: when other processes
   share the cores, a yield hands the core to one of them for a whole time
   slice (measured: 3 ms per stories260K token at 2 threads on a loaded
   2-core machine, against 0.1 ms with spin-then-sleep). */
#define SPIN_ROUNDS 2000

/* Fields written by different threads live on different cache lines. */
#define LINE 64
typedef struct padded { volatile int32_t v; char pad[LINE - sizeof(int32_t)]; } padded;

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
    char pad0[LINE];
    padded generation;     /* bumped by thread 0 for every region */
    padded n_done;         /* workers finished with the current region */
    padded barrier_count;  /* arrivals at the current barrier */
    padded barrier_phase;  /* bumped by the last arrival */
    padded n_sleeping;     /* threads asleep (or about to sleep) on cond */
    padded stop;
    padded *counters;      /* [2][nth] work-sharing cursors, alternating by stage */
};

/* Wakes every sleeper after a value they may wait on changed. */
static void wake_sleepers(cism__pool *pool) {
    if (cism__atomic_load(&pool->n_sleeping.v) > 0) {
        cism__mutex_lock(pool->mutex);
        cism__cond_broadcast(pool->cond);
        cism__mutex_unlock(pool->mutex);
    }
}

/* Waits until *p != old (or stop). The writer of *p calls wake_sleepers after
   writing it; the sleeper counts itself before its last check under the
   mutex, so a wake-up cannot be missed. */
static int32_t wait_change(cism__pool *pool, volatile int32_t *p, int32_t old) {
    int32_t v;
    int i;
    for (i = 0; i < SPIN_ROUNDS; i++) {
        if ((v = cism__atomic_load(p)) != old) return v;
        cism__cpu_relax();
    }
    cism__mutex_lock(pool->mutex);
    cism__atomic_add(&pool->n_sleeping.v, 1);
    while ((v = cism__atomic_load(p)) == old && !cism__atomic_load(&pool->stop.v)) cism__cond_wait(pool->cond, pool->mutex);
    cism__atomic_add(&pool->n_sleeping.v, -1);
    cism__mutex_unlock(pool->mutex);
    return v;
}

static void worker_main(void *p) {
    worker *w = (worker *)p;
    cism__pool *pool = w->pool;
    int32_t seen = 0;
    for (;;) {
        seen = wait_change(pool, &pool->generation.v, seen);
        if (cism__atomic_load(&pool->stop.v)) break;
        pool->fn(pool->arg, w->ith, pool->nth);
        if (cism__atomic_add(&pool->n_done.v, 1) == pool->nth - 1) wake_sleepers(pool);
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
    pool->counters = (padded *)calloc(2 * (size_t)n_threads, sizeof(padded));
    pool->mutex = cism__mutex_create();
    pool->cond = cism__cond_create();
    if (!pool->workers || !pool->counters || !pool->mutex || !pool->cond) {
        cism__pool_free(pool);
        return NULL;
    }
    for (i = 1; i < n_threads; i++) {
        pool->workers[i].pool = pool;
        pool->workers[i].ith = i;
        pool->workers[i].thread = cism__thread_start(worker_main, &pool->workers[i]);
        if (!pool->workers[i].thread) {
            pool->nth = i; /* join only the threads that started */
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
        cism__atomic_store(&pool->stop.v, 1);
        cism__atomic_add(&pool->generation.v, 1);
        cism__cond_broadcast(pool->cond);
        cism__mutex_unlock(pool->mutex);
        for (i = 1; i < pool->nth; i++) cism__thread_join(pool->workers[i].thread);
    }
    free(pool->workers);
    free(pool->counters);
    cism__cond_destroy(pool->cond);
    cism__mutex_destroy(pool->mutex);
    free(pool);
}

int cism__pool_size(const cism__pool *pool) { return pool ? pool->nth : 1; }

void cism__pool_run(cism__pool *pool, cism__pool_fn fn, void *arg) {
    int i;
    int32_t done;
    for (i = 0; i < pool->nth; i++) pool->counters[i].v = 0;   /* stage 0's cursors */
    if (pool->nth == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    cism__atomic_store(&pool->n_done.v, 0);
    cism__atomic_add(&pool->generation.v, 1);
    wake_sleepers(pool);
    fn(arg, 0, pool->nth);
    done = cism__atomic_load(&pool->n_done.v);
    while (done < pool->nth - 1) done = wait_change(pool, &pool->n_done.v, done);
}

void cism__pool_barrier(cism__pool *pool) {
    int32_t phase;
    if (pool->nth == 1) return;
    phase = cism__atomic_load(&pool->barrier_phase.v);
    if (cism__atomic_add(&pool->barrier_count.v, 1) == pool->nth) {
        cism__atomic_store(&pool->barrier_count.v, 0);
        cism__atomic_add(&pool->barrier_phase.v, 1);
        wake_sleepers(pool);
    } else {
        wait_change(pool, &pool->barrier_phase.v, phase);
    }
}

/* ---- work sharing ------------------------------------------------------------------ */
/* Thread j's share of a stage is units [n*j/nth, n*(j+1)/nth); counters[set][j]
   counts the units of it handed out so far. Stage s uses set s % 2; thread 0
   clears the other set before the barrier that ends stage s, when no thread
   can still be using it (it was stage s-1's). */
static void share_of(int64_t n, int j, int nth, int64_t *begin, int64_t *size) {
    int64_t b = n * j / nth, e = n * (j + 1) / nth;
    *begin = b;
    *size = e - b;
}

void cism__work_start(cism__pool *pool, cism__work *w, int ith, int nth, int64_t n) {
    (void)pool;
    w->ith = ith;
    w->nth = nth;
    w->n = n;
    w->victim = 0;
}

int cism__work_next(cism__pool *pool, cism__work *w, int64_t *unit) {
    padded *set = pool->counters + (size_t)(w->stage & 1) * (size_t)w->nth;
    if (w->nth == 1) { /* no sharing: a plain loop */
        if (set[0].v >= w->n) return 0;
        *unit = set[0].v++;
        return 1;
    }
    while (w->victim < w->nth) {
        int j = (w->ith + w->victim) % w->nth;
        int64_t begin, size, k;
        share_of(w->n, j, w->nth, &begin, &size);
        if (cism__atomic_load(&set[j].v) < size) {
            k = cism__atomic_add(&set[j].v, 1) - 1;
            if (k < size) {
                *unit = begin + k;
                return 1;
            }
        }
        w->victim++;
    }
    return 0;
}

void cism__work_end(cism__pool *pool, cism__work *w) {
    padded *next = pool->counters + (size_t)((w->stage + 1) & 1) * (size_t)w->nth;
    int j;
    if (w->ith == 0)
        for (j = 0; j < w->nth; j++) next[j].v = 0;
    if (w->nth == 1) pool->counters[w->stage & 1].v = 0;
    w->stage++;
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
