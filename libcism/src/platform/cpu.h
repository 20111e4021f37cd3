/* cpu.h - what the CPU can do, read once (CPUID/XGETBV on x86, HWCAP or
 * sysctl on ARM64). Built with baseline flags. */
#ifndef CISM_CPU_H
#define CISM_CPU_H

typedef struct cism__cpu {
    char name[64];
    int n_cpus;
    long long llc_bytes; /* the largest cache level's size (x86 CPUID leaf 4 / 0x8000001D); 0: unknown */
    /* x86-64 */
    int sse42, avx, avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, avxvnni;
    int amx_int8; /* AMX-TILE + AMX-INT8, and the OS lets this process use the tiles */
    /* ARM64 */
    int neon, dotprod, i8mm, fp16;
} cism__cpu;

const cism__cpu *cism__cpu_get(void);

#endif
