/* dispatch.c - picks the kernel tier once, from what the CPU reports.
 * Built with baseline flags only: nothing here may use tier instructions. */
#include "kernels.h"
#include "../platform/platform.h"

#include <stdlib.h>
#include <string.h>

static cism__once g_once = CISM__ONCE_INIT;
static const cism__kernels *g_best;

static void choose(void) {
    const char *forced = getenv("CISM_ISA");
    const cism__kernels *k = NULL;
    if (forced && forced[0]) k = cism__kernels_by_name(forced);
    g_best = k ? k : cism__kernels_scalar();
}

const cism__kernels *cism__kernels_best(void) {
    cism__call_once(&g_once, choose);
    return g_best;
}

const cism__kernels *cism__kernels_by_name(const char *name) {
    if (!name) return NULL;
    if (strcmp(name, "scalar") == 0) return cism__kernels_scalar();
    return NULL;
}
