/* test_threadpool.c - the pool's two kinds of region under stress: every unit
 * of a staged region runs exactly once, after every unit of the stages before
 * it; skipped stages and early ends; simple regions mixed in; pools with more
 * threads than cores (so threads are descheduled mid-region and must catch up).
 * Run it under ThreadSanitizer too (-DCISM_SANITIZE=thread). */
#include "core/threadpool.h"
#include "platform/platform.h"
#include "test_util.h"

#include <string.h>

#define MAX_STAGES 40
#define MAX_UNITS 97

typedef struct job {
    int n_stages;
    int64_t units[MAX_STAGES];       /* 0 = skipped */
    int end_at;                      /* begin(end_at) returns -1 (or n_stages) */
    volatile int32_t runs[MAX_STAGES][MAX_UNITS];
    int64_t value[MAX_STAGES][MAX_UNITS];
    int32_t begun[MAX_STAGES];
    volatile int32_t order_errors;
} job;

static int64_t job_begin(void *arg, int32_t s) {
    job *j = (job *)arg;
    if (s >= j->end_at || s >= j->n_stages) return -1;
    j->begun[s]++;
    return j->units[s];
}

/* Unit u of stage s sums the values of the last stage with units before it:
   wrong if any of them had not finished. */
static void job_unit(void *arg, int32_t s, int64_t u, int ith, int nth) {
    job *j = (job *)arg;
    int64_t sum = 0, want = 0, i;
    int p = s - 1, spin;
    (void)ith;
    (void)nth;
    while (p >= 0 && j->units[p] == 0) p--;
    if (p >= 0)
        for (i = 0; i < j->units[p]; i++) {
            sum += j->value[p][i];
            want += (int64_t)p * 1000 + i + 1;
        }
    if (sum != want) cism__atomic_add(&j->order_errors, 1);
    for (spin = 0; spin < (int)((u * 7 + s) % 13) * 20; spin++) cism__cpu_relax();   /* uneven units */
    j->value[s][u] = (int64_t)s * 1000 + u + 1;
    cism__atomic_add(&j->runs[s][u], 1);
}

static const cism__stages g_job = {job_begin, job_unit};

static uint32_t rng = 12345u;
static uint32_t rnd(uint32_t n) { rng = rng * 1664525u + 1013904223u; return (rng >> 8) % n; }

static volatile int32_t g_simple[8];
static void simple_fn(void *arg, int ith, int nth) {
    (void)arg;
    if (ith < 8 && nth <= 8) cism__atomic_add(&g_simple[ith], 1);
}

static void stress(int nth, int regions) {
    cism__pool *pool = cism__pool_create(nth);
    job *j = (job *)calloc(1, sizeof(job));
    int r, s, u, i, simple_runs = 0;
    CHECK(pool != NULL && cism__pool_size(pool) == nth);
    if (!pool || !j) return;
    memset((void *)g_simple, 0, sizeof(g_simple));
    for (r = 0; r < regions; r++) {
        memset(j, 0, sizeof(*j));
        j->n_stages = 1 + (int)rnd(MAX_STAGES);
        for (s = 0; s < j->n_stages; s++) j->units[s] = rnd(4) == 0 ? 0 : 1 + (int64_t)rnd(MAX_UNITS);
        j->end_at = rnd(5) == 0 ? (int)rnd((uint32_t)j->n_stages + 1) : j->n_stages;
        cism__pool_run_stages(pool, &g_job, j);
        for (s = 0; s < j->n_stages; s++) {
            int expect = s < j->end_at ? 1 : 0;
            CHECK_MSG(j->begun[s] == expect, "threads %d region %d stage %d begun %d times", nth, r, s, j->begun[s]);
            for (u = 0; u < MAX_UNITS; u++) {
                int want = s < j->end_at && u < j->units[s] ? 1 : 0;
                if (j->runs[s][u] != want) {
                    CHECK_MSG(0, "threads %d region %d stage %d unit %d ran %d times", nth, r, s, u, (int)j->runs[s][u]);
                    break;
                }
            }
        }
        CHECK_MSG(j->order_errors == 0, "threads %d region %d: %d units ran before the previous stage was done", nth, r,
                  (int)j->order_errors);
        /* a simple region right after a staged one: a worker that woke late for
           the staged region must not join this one as if it were that one */
        if (rnd(2) == 0) {
            cism__pool_run(pool, simple_fn, NULL);
            simple_runs++;
            for (i = 0; i < nth && i < 8; i++)
                if (g_simple[i] != simple_runs) {
                    CHECK_MSG(0, "threads %d region %d: thread %d ran %d simple regions of %d", nth, r, i,
                              (int)g_simple[i], simple_runs);
                    g_simple[i] = simple_runs;
                }
        }
    }
    cism__pool_free(pool);
    free(j);
}

/* Every other stage skipped, counts alternating small and large: the stage
   after a skip has the parity of the one before it, and is prepared while that
   one is still the published stage (a thread sizing its claims on it then must
   not read the larger count of its successor). */
static void skips(int nth, int regions) {
    cism__pool *pool = cism__pool_create(nth);
    job *j = (job *)calloc(1, sizeof(job));
    int r, s, u;
    CHECK(pool != NULL);
    if (!pool || !j) return;
    for (r = 0; r < regions; r++) {
        memset(j, 0, sizeof(*j));
        j->n_stages = MAX_STAGES;
        for (s = 0; s < j->n_stages; s++) j->units[s] = s % 2 ? 0 : s % 4 ? MAX_UNITS : 1 + (int64_t)rnd(nth + 1);
        j->end_at = j->n_stages;
        cism__pool_run_stages(pool, &g_job, j);
        for (s = 0; s < j->n_stages; s++)
            for (u = 0; u < MAX_UNITS; u++)
                if (j->runs[s][u] != (u < j->units[s] ? 1 : 0)) {
                    CHECK_MSG(0, "skips: threads %d region %d stage %d unit %d ran %d times", nth, r, s, u,
                              (int)j->runs[s][u]);
                    s = j->n_stages;
                    break;
                }
        CHECK_MSG(j->order_errors == 0, "skips: threads %d region %d: units ran early", nth, r);
    }
    cism__pool_free(pool);
    free(j);
}

int main(void) {
    int nth;
    for (nth = 1; nth <= 5; nth++) stress(nth, nth == 1 ? 30 : 120);
    for (nth = 2; nth <= 5; nth++) skips(nth, 60);
    /* an empty region: the first begin ends it */
    {
        cism__pool *pool = cism__pool_create(3);
        job *j = (job *)calloc(1, sizeof(job));
        if (pool && j) {
            j->n_stages = 0;
            cism__pool_run_stages(pool, &g_job, j);
            CHECK(j->order_errors == 0);
        }
        cism__pool_free(pool);
        free(j);
    }
    printf("logical cpus: %d\n", cism__cpu_count());
    return test_finish("test_threadpool");
}
