/* dispatch.c - builds the kernel table of every tier this CPU runs, once, and
 * picks the best one (or the one CISM_ISA asks for).
 * Built with baseline flags only: nothing here may use tier instructions, and a
 * tier's fill function (compiled with its flags) runs only after the CPU
 * reported every feature the tier's translation unit was compiled for. */
#include "kernels.h"
#include "../core/error.h"
#include "../platform/cpu.h"
#include "../platform/platform.h"

#include <stdlib.h>
#include <string.h>

#define N_TIERS (CISM_TIER_AVX512_AMX + 1)

static const char *const g_names[N_TIERS] = {NULL, "scalar", "avx2", "avx512", "neon", "neon_dotprod", "neon_i8mm",
                                              "avx512_amx"};

static cism__once g_once = CISM__ONCE_INIT;
static cism__kernels g_tables[N_TIERS];
static int g_ok[N_TIERS];
static int g_best;

/* The CPU features each tier's translation unit is compiled for (see
   libcism/CMakeLists.txt); a tier that is not compiled in reports 0. */
static int tier_runs(const cism__cpu *c, int tier) {
    switch (tier) {
    case CISM_TIER_SCALAR: return 1;
#if defined(CISM__HAVE_AVX2)
    case CISM_TIER_AVX2: return c->avx2 && c->fma && c->f16c;
#endif
#if defined(CISM__HAVE_AVX512)
    case CISM_TIER_AVX512:
        return c->avx2 && c->fma && c->f16c && c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq && c->avx512vnni;
#endif
#if defined(CISM__HAVE_AMX)
    case CISM_TIER_AVX512_AMX: return tier_runs(c, CISM_TIER_AVX512) && c->amx_int8;
#endif
#if defined(CISM__HAVE_NEON)
    case CISM_TIER_NEON: return c->neon;
#endif
#if defined(CISM__HAVE_NEON_DOTPROD)
    case CISM_TIER_NEON_DOTPROD: return c->neon && c->dotprod;
#endif
#if defined(CISM__HAVE_NEON_I8MM)
    case CISM_TIER_NEON_I8MM: return c->neon && c->dotprod && c->i8mm;
#endif
    default: (void)c; return 0;
    }
}

/* Each tier starts from the table of the tier below it. */
static void build(int tier) {
    switch (tier) {
#if defined(CISM__HAVE_AVX2)
    case CISM_TIER_AVX2: g_tables[tier] = g_tables[CISM_TIER_SCALAR]; cism__kernels_fill_avx2(&g_tables[tier]); break;
#endif
#if defined(CISM__HAVE_AVX512)
    case CISM_TIER_AVX512: g_tables[tier] = g_tables[CISM_TIER_AVX2]; cism__kernels_fill_avx512(&g_tables[tier]); break;
#endif
#if defined(CISM__HAVE_AMX)
    case CISM_TIER_AVX512_AMX:
        g_tables[tier] = g_tables[CISM_TIER_AVX512];
        cism__kernels_fill_avx512_amx(&g_tables[tier]);
        break;
#endif
#if defined(CISM__HAVE_NEON)
    case CISM_TIER_NEON: g_tables[tier] = g_tables[CISM_TIER_SCALAR]; cism__kernels_fill_neon(&g_tables[tier]); break;
#endif
#if defined(CISM__HAVE_NEON_DOTPROD)
    case CISM_TIER_NEON_DOTPROD:
        g_tables[tier] = g_tables[CISM_TIER_NEON];
        cism__kernels_fill_neon_dotprod(&g_tables[tier]);
        break;
#endif
#if defined(CISM__HAVE_NEON_I8MM)
    case CISM_TIER_NEON_I8MM:
        g_tables[tier] = g_tables[CISM_TIER_NEON_DOTPROD];
        cism__kernels_fill_neon_i8mm(&g_tables[tier]);
        break;
#endif
    default: g_tables[tier] = *cism__kernels_scalar(); break;
    }
    g_tables[tier].name = g_names[tier];
    g_tables[tier].tier = tier;
}

static int tier_from_name(const char *name) {
    int t;
    if (strcmp(name, "ref") == 0) return CISM_TIER_SCALAR;
    for (t = 1; t < N_TIERS; t++)
        if (strcmp(name, g_names[t]) == 0) return t;
    return 0;
}

static void init(void) {
    const cism__cpu *c = cism__cpu_get();
    const char *forced = getenv("CISM_ISA");
    int t;
    /* tiers are numbered so that each one builds on a lower number */
    for (t = 1; t < N_TIERS; t++) {
        if (!tier_runs(c, t)) continue;
        build(t);
        g_ok[t] = 1;
        g_best = t;
    }
    if (forced && forced[0]) {
        int want = tier_from_name(forced);
        if (!want)
            cism__log(CISM_LOG_WARN, "CISM_ISA=%s is not a kernel tier name; using %s", forced, g_names[g_best]);
        else if (!g_ok[want])
            cism__log(CISM_LOG_WARN, "CISM_ISA=%s: this CPU or build cannot run that tier; using %s", forced,
                      g_names[g_best]);
        else
            g_best = want;
    }
}

const cism__kernels *cism__kernels_best(void) {
    cism__call_once(&g_once, init);
    return &g_tables[g_best];
}

const cism__kernels *cism__kernels_tier(int32_t tier) {
    cism__call_once(&g_once, init);
    if (tier == CISM_TIER_AUTO) return &g_tables[g_best];
    if (tier < 1 || tier >= N_TIERS || !g_ok[tier]) return NULL;
    return &g_tables[tier];
}

const cism__kernels *cism__kernels_by_name(const char *name) {
    return name ? cism__kernels_tier(tier_from_name(name) ? tier_from_name(name) : -1) : NULL;
}

const char *cism_kernel_tier_name(cism_kernel_tier tier) {
    if (tier == CISM_TIER_AUTO) return cism__kernels_best()->name;
    return tier >= 1 && tier < N_TIERS ? g_names[tier] : NULL;
}

int32_t cism_kernel_tier_supported(cism_kernel_tier tier) {
    return cism__kernels_tier(tier) != NULL;
}

int cism__x16_streaming;

int cism__weights_stream(int64_t weight_bytes) {
    const char *e = getenv("CISM_PREFETCH_FAR");
    const long long llc = cism__cpu_get()->llc_bytes;
    if (e && (!strcmp(e, "0") || !strcmp(e, "1"))) return e[0] == '1';
    return llc <= 0 || weight_bytes > llc / 2;
}
