/* mac_peak.c - the int8 multiply-add peak of one core for a kernel tier: the
 * ceiling prefill's share is reported against (cism-kernel-bench, cism bench,
 * docs/PERFORMANCE.md). Runs the tier's int8_mac_loop (kernels.h) on the
 * calling thread: rounds sized to about 20 ms of its CPU time, the best of 7
 * (CPU time: other load on the machine disturbs it less than wall time). */
#include "cism.h"
#include "kernels.h"
#include "../core/error.h"
#include "../platform/platform.h"

cism_status cism_measure_int8_mac_peak(cism_kernel_tier tier, double *macs_per_second) {
    const cism__kernels *k;
    int64_t iters = 1 << 12;
    int32_t sink = 0;
    double best = 0.0;
    int pass;
    cism__clear_error();
    if (!macs_per_second) return cism__fail(CISM_ERR_INVALID_ARG, "cism_measure_int8_mac_peak: macs_per_second is NULL");
    *macs_per_second = 0.0;
    k = cism__kernels_tier((int32_t)tier);
    if (!k) return cism__fail(CISM_ERR_UNSUPPORTED, "kernel tier %d cannot run on this CPU (or is not compiled into this build)", (int)tier);
    for (;;) { /* rounds of at least 20 ms */
        double t0 = cism__thread_cpu_seconds();
        k->int8_mac_loop(iters, &sink);
        if (cism__thread_cpu_seconds() - t0 >= 0.02 || iters >= ((int64_t)1 << 40)) break;
        iters *= 2;
    }
    for (pass = 0; pass < 7; pass++) {
        double t0 = cism__thread_cpu_seconds(), dt;
        int64_t macs = k->int8_mac_loop(iters, &sink);
        dt = cism__thread_cpu_seconds() - t0;
        if (dt > 0 && (double)macs / dt > best) best = (double)macs / dt;
    }
    *macs_per_second = best;  /* (the loops store into sink: their work cannot be dropped) */
    return CISM_OK;
}
