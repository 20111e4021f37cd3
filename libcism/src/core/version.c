/* version.c - version, build and system information. */
#include "cism.h"
#include "../kernels/kernels.h"
#include "../platform/cpu.h"
#include "../platform/platform.h"

#include <stdio.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)

int32_t cism_version_number(void) { return CISM_VERSION_NUMBER; }
const char *cism_version_string(void) {
    return STR(CISM_VERSION_MAJOR) "." STR(CISM_VERSION_MINOR) "." STR(CISM_VERSION_PATCH);
}
int32_t cism_abi_version(void) { return CISM_ABI_VERSION; }

#if defined(__clang__)
#define COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define COMPILER "gcc " __VERSION__
#elif defined(_MSC_VER)
#define COMPILER "msvc " STR(_MSC_VER)
#else
#define COMPILER "unknown compiler"
#endif

#ifndef CISM_BUILD_TYPE
#define CISM_BUILD_TYPE "unspecified"
#endif
#ifndef CISM_TIERS
#define CISM_TIERS "scalar"
#endif

const char *cism_build_info(void) {
    return "libcism " STR(CISM_VERSION_MAJOR) "." STR(CISM_VERSION_MINOR) "." STR(CISM_VERSION_PATCH)
           "; " COMPILER "; build " CISM_BUILD_TYPE "; tiers " CISM_TIERS;
}

static char g_sysinfo[1024]; /* room for every field at its longest (cpu name 63, features 255, tiers 127) */
static cism__once g_once = CISM__ONCE_INIT;

static void make_sysinfo(void) {
    const cism__cpu *c = cism__cpu_get();
    char feats[256] = "";
    size_t n = 0;
#define FEAT(flag, label) if (c->flag && n < sizeof(feats) - 16) n += (size_t)snprintf(feats + n, sizeof(feats) - n, "%s%s", n ? " " : "", label)
    FEAT(avx2, "avx2"); FEAT(fma, "fma"); FEAT(f16c, "f16c"); FEAT(avx512f, "avx512f"); FEAT(avx512bw, "avx512bw");
    FEAT(avx512vl, "avx512vl"); FEAT(avx512vnni, "avx512vnni"); FEAT(avx512bf16, "avx512bf16"); FEAT(avxvnni, "avxvnni");
    FEAT(amx_int8, "amx_int8");
    FEAT(neon, "neon"); FEAT(dotprod, "dotprod"); FEAT(i8mm, "i8mm"); FEAT(fp16, "fp16");
#undef FEAT
    {
        char tiers[128] = "";
        size_t m = 0;
        int32_t t;
        for (t = CISM_TIER_SCALAR; cism_kernel_tier_name(t); t++)
            if (cism_kernel_tier_supported(t) && m < sizeof(tiers) - 16)
                m += (size_t)snprintf(tiers + m, sizeof(tiers) - m, "%s%s", m ? " " : "", cism_kernel_tier_name(t));
        char llc[48] = "unknown";
        if (c->llc_bytes > 0) snprintf(llc, sizeof(llc), "%lld KiB", c->llc_bytes / 1024);
        snprintf(g_sysinfo, sizeof(g_sysinfo), "cpu: %s; logical cpus: %d; last-level cache: %s; features: %s; kernel tier: %s (runs: %s)",
                 c->name, c->n_cpus, llc, feats[0] ? feats : "none", cism__kernels_best()->name, tiers);
    }
}

const char *cism_system_info(void) {
    cism__call_once(&g_once, make_sysinfo);
    return g_sysinfo;
}
