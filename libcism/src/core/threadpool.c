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
   2-core machine). */
#define SPIN_ROUNDS 2000

#define STAGE_END INT32_MAX
#define CLOSED 1   /* odd: never a generation */
#define NO_STAGE (-1)

/* Fields written by different threads live on different cache lines. */
#define LINE 64
typedef struct padded { volatile int32_t v; char pad[LINE - sizeof(int32_t)]; } padded;
typedef struct padded64 { volatile int64_t v; char pad[LINE - sizeof(int64_t)]; } padded64;

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
    /* the current region (written by thread 0 before it opens the region) */
    cism__pool_fn fn;
    const cism__stages *stages;
    void *arg;
    char pad0[LINE];
    padded generation;     /* bumped by 2 by thread 0 for every region (always even) */
    padded open;           /* the generation of the region that may be joined, or CLOSED */
    padded active;         /* workers inside the current region */
    padded n_done;         /* workers finished with a cism__pool_run region */
    padded n_sleeping;     /* threads asleep (or about to sleep) on cond */
    padded stop;
    padded stage;          /* the stage in progress, or STAGE_END */
    padded done[2];        /* units done in the stages of each parity */
    padded64 n_units[2];   /* units of the stages of each parity */
    padded n_owner[2];     /* the stage whose count n_units[p] holds, or NO_STAGE while it is rewritten */
    padded64 *shares;      /* [2][nth]: (stage << 32) | units of share j taken */
};

/* Wakes every sleeper after a value they may wait on changed. */
static void wake_sleepers(cism__pool *pool) {
    if (cism__atomic_load(&pool->n_sleeping.v) > 0) {
        cism__mutex_lock(pool->mutex);
        cism__cond_broadcast(pool->cond);
        cism__mutex_unlock(pool->mutex);
    }
}

/* Waits until *p != old (or stop) and returns the new value. The writer of *p
   calls wake_sleepers after writing it; the sleeper counts itself before its
   last check under the mutex, so a wake-up cannot be missed. */
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

/* ---- staged regions ------------------------------------------------------------------ */
/* Thread j's share of a stage of n units is [n*j/nth, n*(j+1)/nth). Its counter
   holds the stage number in the high half, so a thread that fell behind can
   never take a unit of a later stage that reuses the counter. */
static int take(cism__pool *pool, int32_t s, int j, int64_t n, int64_t *unit) {
    volatile int64_t *c = &pool->shares[(size_t)(s & 1) * (size_t)pool->nth + (size_t)j].v;
    int64_t begin = n * j / pool->nth, size = n * (j + 1) / pool->nth - begin;
    int64_t v = cism__atomic_load64(c);
    if (pool->nth == 1) { /* nobody to share with: no read-modify-write needed */
        if ((int32_t)(v >> 32) != s || (v & 0xffffffff) >= size) return 0;
        cism__atomic_store64(c, v + 1);
        *unit = begin + (v & 0xffffffff);
        return 1;
    }
    for (;;) {
        int64_t seen;
        if ((int32_t)(v >> 32) != s || (v & 0xffffffff) >= size) return 0;
        seen = cism__atomic_cas64_seen(c, v, v + 1);
        if (seen == v) {
            *unit = begin + (v & 0xffffffff);
            return 1;
        }
        v = seen;
    }
}

/* After stage `after` (-1 before the first): finds the next stage with units,
   prepares its counters and publishes it (or STAGE_END). */
static void next_stage(cism__pool *pool, int32_t after) {
    int32_t s = after;
    int64_t n = 0;
    int j;
    do {
        s++;
        n = pool->stages->begin(pool->arg, s);
    } while (n == 0);
    if (n < 0) {
        cism__atomic_store(&pool->stage.v, STAGE_END);
    } else {
        /* a skipped stage makes two published stages of one parity follow each
           other: readers of stage `after` may still be sizing their claims with
           this slot, so it is marked as being rewritten first (run_stages) */
        cism__atomic_store(&pool->n_owner[s & 1].v, NO_STAGE);
        cism__atomic_store64(&pool->n_units[s & 1].v, n);
        cism__atomic_store(&pool->n_owner[s & 1].v, s);
        cism__atomic_store(&pool->done[s & 1].v, 0);
        for (j = 0; j < pool->nth; j++)
            cism__atomic_store64(&pool->shares[(size_t)(s & 1) * (size_t)pool->nth + (size_t)j].v, (int64_t)s << 32);
        cism__atomic_store(&pool->stage.v, s);
    }
    wake_sleepers(pool);
}

static void run_stages(cism__pool *pool, int ith) {
    const cism__stages *st = pool->stages;
    int nth = pool->nth;
    int32_t s = -1, cur;
    for (;;) {
        int64_t n, u;
        int32_t taken = 0;
        int k;
        cur = cism__atomic_load(&pool->stage.v);
        while (cur == s) cur = wait_change(pool, &pool->stage.v, s);
        if (cur == STAGE_END) return;
        s = cur;   /* the current stage (later than ours if we fell behind) */
        n = cism__atomic_load64(&pool->n_units[s & 1].v);
        /* n may already be that of a later stage of the same parity (s + 2, or
           s + 2k when the stages between are skipped: then stage s is still the
           published one while its successor is being prepared) while the claim
           counters still say s: with a larger n, take would hand out units
           stage s never had. The slot still owned by s after the read means n
           is s's (the writer marks it NO_STAGE before it rewrites n). */
        if (cism__atomic_load(&pool->n_owner[s & 1].v) != s) continue;
        for (k = 0; k < nth; k++)
            while (take(pool, s, (ith + k) % nth, n, &u)) {
                st->unit(pool->arg, s, u, ith, nth);
                taken++;
            }
        /* the thread that reports the last units decides the next stage */
        if (taken > 0 && cism__atomic_add(&pool->done[s & 1].v, taken) == n) next_stage(pool, s);
    }
}

static void worker_main(void *p) {
    worker *w = (worker *)p;
    cism__pool *pool = w->pool;
    int32_t seen = 0;
    for (;;) {
        int32_t g = wait_change(pool, &pool->generation.v, seen);
        if (cism__atomic_load(&pool->stop.v)) break;
        /* Count ourselves in before looking: thread 0 closes a region and then
           waits for `active` to drain, so region g cannot end while we are in.
           `open` names the region, not just "a region": a worker that woke for
           region g late, after g closed and while g + 2 is opening, must not join
           g + 2 as if it were g (it would join g + 2 again on its next wake-up and
           run a simple region's function twice). */
        cism__atomic_add(&pool->active.v, 1);
        if (cism__atomic_load(&pool->open.v) == g) {
            if (pool->stages) {
                run_stages(pool, w->ith);
            } else {
                pool->fn(pool->arg, w->ith, pool->nth);
                cism__atomic_add(&pool->n_done.v, 1);
            }
        }
        seen = g;
        if (cism__atomic_add(&pool->active.v, -1) == 0) wake_sleepers(pool);
    }
}

/* ---- the pool ------------------------------------------------------------------------ */
cism__pool *cism__pool_create(int n_threads) {
    cism__pool *pool;
    int i;
    if (n_threads < 1) n_threads = 1;
    pool = (cism__pool *)calloc(1, sizeof(*pool));
    if (!pool) return NULL;
    pool->nth = n_threads;
    pool->open.v = CLOSED;
    pool->workers = (worker *)calloc((size_t)n_threads, sizeof(worker));
    pool->shares = (padded64 *)calloc(2 * (size_t)n_threads, sizeof(padded64));
    pool->mutex = cism__mutex_create();
    pool->cond = cism__cond_create();
    if (!pool->workers || !pool->shares || !pool->mutex || !pool->cond) {
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
        cism__atomic_add(&pool->generation.v, 2);
        cism__cond_broadcast(pool->cond);
        cism__mutex_unlock(pool->mutex);
        for (i = 1; i < pool->nth; i++) cism__thread_join(pool->workers[i].thread);
    }
    free(pool->workers);
    free(pool->shares);
    cism__cond_destroy(pool->cond);
    cism__mutex_destroy(pool->mutex);
    free(pool);
}

int cism__pool_size(const cism__pool *pool) { return pool ? pool->nth : 1; }

/* `open` before `generation`: a worker that sees the new generation also sees
   the region open (unsigned arithmetic: the generation wraps around). */
static void open_region(cism__pool *pool) {
    int32_t g = (int32_t)((uint32_t)cism__atomic_load(&pool->generation.v) + 2u);
    cism__atomic_store(&pool->n_done.v, 0);
    cism__atomic_store(&pool->open.v, g);
    cism__atomic_store(&pool->generation.v, g);
    wake_sleepers(pool);
}

/* No worker may touch the region once this returns. */
static void close_region(cism__pool *pool) {
    int32_t a;
    cism__atomic_store(&pool->open.v, CLOSED);
    a = cism__atomic_load(&pool->active.v);
    while (a != 0) a = wait_change(pool, &pool->active.v, a);
}

void cism__pool_run(cism__pool *pool, cism__pool_fn fn, void *arg) {
    int32_t done;
    if (pool->nth == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->stages = NULL;
    pool->arg = arg;
    open_region(pool);
    fn(arg, 0, pool->nth);
    done = cism__atomic_load(&pool->n_done.v);
    while (done < pool->nth - 1) done = wait_change(pool, &pool->n_done.v, done);
    close_region(pool);
}

void cism__pool_run_stages(cism__pool *pool, const cism__stages *stages, void *arg) {
    pool->fn = NULL;
    pool->stages = stages;
    pool->arg = arg;
    next_stage(pool, -1);
    if (pool->nth > 1 && cism__atomic_load(&pool->stage.v) != STAGE_END) open_region(pool);
    run_stages(pool, 0);
    if (pool->nth > 1) close_region(pool);
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
