/* membw.c - a read-bandwidth probe: how many bytes per second n threads can
 * stream from memory, the ceiling of batch-1 decode (docs/PERFORMANCE.md).
 *
 * Each thread of a pool reads its own slice of one buffer much larger than the
 * last-level cache, summing it as 64-bit integers with the best kernel tier's
 * read_sum (kernels.h): its widest loads, as the decode kernels use. Loads of
 * 8 bytes read half as fast (7.8 against 15.8 GB/s on one core of a Xeon VM,
 * 16 against 31 on two): fewer cache lines in flight per core, so a probe of
 * scalar loads sat below what decode streams. The buffer is written once
 * first so every page is backed; the best of several passes is reported. */
#include "cism.h"
#include "error.h"
#include "threadpool.h"
#include "../platform/platform.h"
#include "../kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

typedef struct probe {
    const uint64_t *data;
    int64_t words;
    uint64_t (*read_sum)(const uint64_t *p, int64_t n);
    uint64_t sums[256];
} probe;

static void read_slice(void *arg, int ith, int nth) {
    probe *p = (probe *)arg;
    int64_t b, e;
    cism__split(p->words, ith, nth, 64, &b, &e);
    p->sums[ith % 256] = p->read_sum(p->data + b, (e - b) / 32 * 32);
}

cism_status cism_measure_read_bandwidth(int32_t n_threads, int64_t buffer_bytes, double *bytes_per_second) {
    cism__pool *pool;
    probe p;
    uint64_t *buf;
    double best = 0.0;
    int pass;
    cism__clear_error();
    if (!bytes_per_second) return cism__fail(CISM_ERR_INVALID_ARG, "cism_measure_read_bandwidth: bytes_per_second is NULL");
    if (n_threads < 1 || n_threads > 256)
        return cism__fail(CISM_ERR_INVALID_ARG, "cism_measure_read_bandwidth: n_threads %d is outside 1..256", (int)n_threads);
    if (buffer_bytes == 0) buffer_bytes = (int64_t)512 << 20;
    if (buffer_bytes < (1 << 20) || (uint64_t)buffer_bytes > (uint64_t)SIZE_MAX / 2)
        return cism__fail(CISM_ERR_INVALID_ARG, "cism_measure_read_bandwidth: buffer of %lld bytes is outside 1 MiB..SIZE_MAX/2",
                          (long long)buffer_bytes);
    buf = (uint64_t *)malloc((size_t)buffer_bytes);
    if (!buf) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_measure_read_bandwidth: cannot allocate %lld bytes", (long long)buffer_bytes);
    memset(buf, 1, (size_t)buffer_bytes);
    pool = cism__pool_create(n_threads);
    if (!pool) {
        free(buf);
        return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_measure_read_bandwidth: cannot start %d threads", (int)n_threads);
    }
    memset(&p, 0, sizeof(p));
    p.data = buf;
    p.words = buffer_bytes / 8 / 64 * 64; /* every slice whole multiples of 32 words (cism__split aligns to 64) */
    p.read_sum = cism__kernels_best()->read_sum;
    for (pass = 0; pass < 5; pass++) {
        double t0 = cism__time_seconds(), dt;
        cism__pool_run(pool, read_slice, &p);
        dt = cism__time_seconds() - t0;
        if (pass > 0 && dt > 0 && (double)(p.words * 8) / dt > best) best = (double)(p.words * 8) / dt;
    }
    cism__pool_free(pool);
    free(buf);
    *bytes_per_second = best;
    return CISM_OK;
}
