/* platform.h - the thin layer between libcism and the operating system:
 * file mapping, threads, atomics, thread-local storage, time, CPU count.
 * POSIX (Linux, Android, Apple) in platform_posix.c, Windows in platform_win32.c. */
#ifndef CISM_PLATFORM_H
#define CISM_PLATFORM_H

#include <stddef.h>
#include <stdint.h>

/* ---- read-only file view ------------------------------------------------- */
typedef struct cism__file_view {
    const uint8_t *data;
    uint64_t size;
    int mapped;      /* 1: mmap/MapViewOfFile, 0: heap copy, 2: huge-page copy (Linux) */
    void *handle;    /* platform bookkeeping */
} cism__file_view;

/* Returns 0 on success; on failure fills errbuf with the OS reason. */
int  cism__file_view_open(cism__file_view *view, const char *path, int use_mmap, char *errbuf, size_t errlen);
void cism__file_view_close(cism__file_view *view);
/* Called once the loader is done reading the file's own bytes: on Linux, a
   mapping unmaps the pages the checks touched (the data stays in the page
   cache), so loading adds nothing to the resident size and decode can map the
   weights with huge pages (docs/MEMORY.md). Elsewhere, or for a copy, nothing. */
void cism__file_view_settle(cism__file_view *view);
/* 1 if a regular file exists at path. */
int  cism__file_exists(const char *path);

/* Writes size bytes to path atomically: a new uniquely named temporary file in
   path's folder is written, flushed to disk (fsync / FlushFileBuffers) and
   renamed over path (then the folder is synced where the OS allows). On
   failure the temporary file is removed, whatever was at path is untouched,
   -1 is returned and errbuf holds the OS reason; 0 on success. */
int  cism__file_write_atomic(const char *path, const void *data, uint64_t size, char *errbuf, size_t errlen);

/* ---- residency of a memory range (weights) --------------------------------- *
 * The range may start and end anywhere; the calls work on the pages it touches.
 * They return CISM__MEM_OK or another code with the OS reason in errbuf. */
enum { CISM__MEM_OK = 0, CISM__MEM_DENIED = 1, CISM__MEM_UNSUPPORTED = 2, CISM__MEM_FAILED = 3 };
/* Asks the OS to read the pages in ahead of use; wait != 0 also reads one byte
   of every page, so the range is resident when the call returns. */
int cism__mem_prefetch(const void *p, uint64_t n, int wait, char *errbuf, size_t errlen);
/* lock != 0: pins the pages in RAM (mlock / VirtualLock); 0: unpins them. */
int cism__mem_lock(const void *p, uint64_t n, int lock, char *errbuf, size_t errlen);
/* Bytes of the range resident in RAM (whole pages, clipped to n), -1 unknown. */
int64_t cism__mem_resident(const void *p, uint64_t n);

/* ---- threads ------------------------------------------------------------- */
typedef struct cism__thread cism__thread;
typedef void (*cism__thread_fn)(void *arg);
cism__thread *cism__thread_start(cism__thread_fn fn, void *arg);  /* NULL on failure */
void cism__thread_join(cism__thread *t);

typedef struct cism__mutex cism__mutex;
typedef struct cism__cond cism__cond;
cism__mutex *cism__mutex_create(void);
void cism__mutex_destroy(cism__mutex *m);
void cism__mutex_lock(cism__mutex *m);
void cism__mutex_unlock(cism__mutex *m);
cism__cond *cism__cond_create(void);
void cism__cond_destroy(cism__cond *c);
void cism__cond_wait(cism__cond *c, cism__mutex *m);
void cism__cond_broadcast(cism__cond *c);

/* Calls fn exactly once across all threads. */
typedef struct cism__once { volatile int32_t state; } cism__once;
#define CISM__ONCE_INIT {0}
void cism__call_once(cism__once *once, void (*fn)(void));

/* Thread-local pointer slot, created once. A value still set when its thread
   exits is released with free(). */
typedef struct cism__tls cism__tls;
cism__tls *cism__tls_create(void);
void *cism__tls_get(cism__tls *key);
int   cism__tls_set(cism__tls *key, void *value);

void cism__cpu_relax(void);   /* pause/yield hint inside spin loops */
void cism__thread_yield(void);

/* ---- atomics (sequentially consistent) ------------------------------------ */
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#define cism__atomic_load(p)        _InterlockedOr((volatile long *)(p), 0)
#define cism__atomic_store(p, v)    _InterlockedExchange((volatile long *)(p), (long)(v))
#define cism__atomic_add(p, v)      (_InterlockedExchangeAdd((volatile long *)(p), (long)(v)) + (long)(v))
#define cism__atomic_cas(p, e, d)   (_InterlockedCompareExchange((volatile long *)(p), (long)(d), (long)(e)) == (long)(e))
/* 64-bit: load, store, and compare-exchange that returns the value seen */
#define cism__atomic_load64(p)      _InterlockedOr64((volatile __int64 *)(p), 0)
#define cism__atomic_store64(p, v)  ((void)_InterlockedExchange64((volatile __int64 *)(p), (__int64)(v)))
#define cism__atomic_cas64_seen(p, e, d) _InterlockedCompareExchange64((volatile __int64 *)(p), (__int64)(d), (__int64)(e))
#else
#define cism__atomic_load(p)        __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define cism__atomic_store(p, v)    __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define cism__atomic_add(p, v)      __atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)
#define cism__atomic_cas(p, e, d)   cism__atomic_cas_i32((p), (e), (d))
static inline int cism__atomic_cas_i32(volatile int32_t *p, int32_t expected, int32_t desired) {
    return __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}
/* 64-bit: load, store, and compare-exchange that returns the value seen */
#define cism__atomic_load64(p)      __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define cism__atomic_store64(p, v)  __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
static inline int64_t cism__atomic_cas64_seen(volatile int64_t *p, int64_t expected, int64_t desired) {
    __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return expected;
}
#endif

/* ---- system ---------------------------------------------------------------- */
int    cism__cpu_count(void);         /* logical CPUs online, >= 1 */
/* CPUs outside the slowest cluster of a big.LITTLE / P+E design (all CPUs when
   they are all alike), or 0 when the OS does not tell. */
int    cism__cpu_perf_count(void);
/* The rule behind it: of n CPUs with relative speeds (capacity or max
   frequency; <= 0 unknown), the count faster than the slowest; n known CPUs
   all alike count all; nothing known gives 0. */
int    cism__perf_cpus(const long *speed, int n);
double cism__time_seconds(void);      /* monotonic */
double cism__thread_cpu_seconds(void); /* CPU time of the calling thread (wall time where the OS does not tell) */
/* Bytes of this process resident in RAM, or -1 when unknown. */
int64_t cism__resident_bytes(void);
#if defined(_WIN32)
/* Undoes process-wide registrations when cism.dll is unloaded (DllMain). */
void cism__platform_unload(void);
#endif

#endif
