/* cpu.c - CPU feature detection: CPUID/XGETBV on x86; on ARM64 getauxval
 * (Linux, Android >= 18; declared without feature macros), sysctl (Apple) or
 * IsProcessorFeaturePresent (Windows). */
#include "cpu.h"
#include "platform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#define CISM__X86 1
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
static void cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
    int v[4];
    __cpuidex(v, (int)leaf, (int)sub);
    r[0] = (unsigned)v[0]; r[1] = (unsigned)v[1]; r[2] = (unsigned)v[2]; r[3] = (unsigned)v[3];
}
static unsigned long long xgetbv0(void) { return _xgetbv(0); }
#else
static void cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
    __asm__ __volatile__("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}
static unsigned long long xgetbv0(void) {
    unsigned lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
#endif

/* The size of the highest cache level that leaf (4 on Intel, 0x8000001D on
   AMD) describes: per subleaf, type (EAX 4:0, 0 ends), level (EAX 7:5), ways,
   partitions and line size (EBX), sets (ECX), each stored minus one. */
static long long cache_bytes(unsigned leaf) {
    long long best = 0;
    unsigned r[4], sub, level = 0;
    for (sub = 0; sub < 16; sub++) {
        cpuid(leaf, sub, r);
        if ((r[0] & 31) == 0) break;
        if ((r[0] & 31) != 2 && ((r[0] >> 5) & 7) >= level) { /* data or unified */
            level = (r[0] >> 5) & 7;
            best = (long long)((r[1] >> 22) + 1) * (((r[1] >> 12) & 0x3ff) + 1) * ((r[1] & 0xfff) + 1) * ((long long)r[2] + 1);
        }
    }
    return best;
}

/* AMX's tile data is off for a Linux process until it asks for it
   (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA; Linux 5.16+, the
   whole process): 1 if granted. Elsewhere the avx512_amx tier stays off.
   The permission enlarges the process's signal frames (Linux then refuses
   a sigaltstack smaller than them), so a host that keeps small alternate
   signal stacks can set CISM_AMX=0 to have the library not ask. */
static int amx_permitted(void) {
#if defined(__linux__) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    const char *env = getenv("CISM_AMX");
    long ret;
    if (env && strcmp(env, "0") == 0) return 0;
    __asm__ __volatile__("syscall" : "=a"(ret) : "a"(158L), "D"(0x1023L), "S"(18L) : "rcx", "r11", "memory");
    return ret == 0;
#else
    return 0;
#endif
}

static void detect(cism__cpu *c) {
    unsigned r[4], max_leaf, ext_max;
    unsigned long long xcr0 = 0;
    int os_avx = 0, os_avx512 = 0;
    cpuid(0, 0, r);
    max_leaf = r[0];
    cpuid(1, 0, r);
    c->sse42 = (r[2] >> 20) & 1;
    c->fma = (r[2] >> 12) & 1;
    c->f16c = (r[2] >> 29) & 1;
    if ((r[2] >> 27) & 1) { /* OSXSAVE: the OS saves the registers we are about to check */
        xcr0 = xgetbv0();
        os_avx = (xcr0 & 0x6) == 0x6;
        os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
    }
    c->avx = os_avx && ((r[2] >> 28) & 1);
    if (!c->avx) c->fma = c->f16c = 0;
    if (max_leaf >= 7) {
        cpuid(7, 0, r);
        c->avx2 = c->avx && ((r[1] >> 5) & 1);
        c->avx512f = os_avx512 && ((r[1] >> 16) & 1);
        c->avx512dq = c->avx512f && ((r[1] >> 17) & 1);
        c->avx512bw = c->avx512f && ((r[1] >> 30) & 1);
        c->avx512vl = c->avx512f && ((r[1] >> 31) & 1);
        c->avx512vnni = c->avx512f && ((r[2] >> 11) & 1);
        /* AMX-TILE (EDX 24), AMX-INT8 (EDX 25), the OS saving XTILECFG and XTILEDATA (XCR0 17, 18) */
        c->amx_int8 = c->avx512f && ((r[3] >> 24) & 1) && ((r[3] >> 25) & 1) && (xcr0 & 0x60000ull) == 0x60000ull &&
                      amx_permitted();
        cpuid(7, 1, r);
        c->avxvnni = c->avx2 && ((r[0] >> 4) & 1);
        c->avx512bf16 = c->avx512f && ((r[0] >> 5) & 1);
    }
    cpuid(0x80000000u, 0, r);
    ext_max = r[0];
    if (ext_max >= 0x80000004u) {
        unsigned i;
        char *p = c->name;
        for (i = 0; i < 3; i++) {
            cpuid(0x80000002u + i, 0, r);
            memcpy(p + 16 * i, r, 16);
        }
        c->name[48] = 0;
    }
    if (max_leaf >= 4) c->llc_bytes = cache_bytes(4);
    if (!c->llc_bytes && ext_max >= 0x8000001du) c->llc_bytes = cache_bytes(0x8000001du);
}
#elif defined(__aarch64__) || defined(_M_ARM64)
#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1 << 1)
#endif
#ifndef HWCAP_FPHP
#define HWCAP_FPHP (1 << 9)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif
static void detect(cism__cpu *c) {
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    c->neon = (hw & HWCAP_ASIMD) != 0;
    c->fp16 = (hw & HWCAP_FPHP) != 0;
    c->dotprod = (hw & HWCAP_ASIMDDP) != 0;
    c->i8mm = (hw2 & HWCAP2_I8MM) != 0;
    snprintf(c->name, sizeof(c->name), "ARM64");
}
#elif defined(__APPLE__)
#include <sys/sysctl.h>
static int sysctl_flag(const char *name) {
    int v = 0;
    size_t n = sizeof(v);
    return sysctlbyname(name, &v, &n, NULL, 0) == 0 && v != 0;
}
static void detect(cism__cpu *c) {
    size_t n = sizeof(c->name) - 1;
    c->neon = 1;
    c->fp16 = sysctl_flag("hw.optional.arm.FEAT_FP16");
    c->dotprod = sysctl_flag("hw.optional.arm.FEAT_DotProd");
    c->i8mm = sysctl_flag("hw.optional.arm.FEAT_I8MM");
    if (sysctlbyname("machdep.cpu.brand_string", c->name, &n, NULL, 0) != 0) snprintf(c->name, sizeof(c->name), "Apple ARM64");
}
#elif defined(_WIN32)
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#ifndef PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE
#define PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE 43
#endif
static void detect(cism__cpu *c) {
    c->neon = 1; /* baseline of ARM64 */
    c->dotprod = IsProcessorFeaturePresent(PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE) != 0;
    snprintf(c->name, sizeof(c->name), "ARM64");
}
#else
static void detect(cism__cpu *c) {
    c->neon = 1; /* baseline of ARM64 */
    snprintf(c->name, sizeof(c->name), "ARM64");
}
#endif
#else
static void detect(cism__cpu *c) { snprintf(c->name, sizeof(c->name), "unknown CPU"); }
#endif

int cism__perf_cpus(const long *speed, int n) {
    long lo = 0, hi = 0;
    int i, known = 0, count = 0;
    for (i = 0; i < n; i++) {
        if (speed[i] <= 0) continue;
        if (!known || speed[i] < lo) lo = speed[i];
        if (!known || speed[i] > hi) hi = speed[i];
        known++;
    }
    if (known == 0) return 0;
    if (lo == hi) return n;
    for (i = 0; i < n; i++) count += speed[i] > lo;
    return count;
}

static cism__cpu g_cpu;
static cism__once g_once = CISM__ONCE_INIT;

static void init(void) {
    char *p, *q;
    detect(&g_cpu);
    g_cpu.n_cpus = cism__cpu_count();
    /* trim the brand string */
    p = g_cpu.name;
    while (*p == ' ') p++;
    memmove(g_cpu.name, p, strlen(p) + 1);
    q = g_cpu.name + strlen(g_cpu.name);
    while (q > g_cpu.name && q[-1] == ' ') *--q = 0;
    if (!g_cpu.name[0]) snprintf(g_cpu.name, sizeof(g_cpu.name), "unknown CPU");
}

const cism__cpu *cism__cpu_get(void) {
    cism__call_once(&g_once, init);
    return &g_cpu;
}
