/* platform_win32.c - Windows 8 and later (Win32 threads, file mapping).
 * Builds with MSVC, mingw-w64 gcc and clang/zig (windows-gnu). */
#if defined(_WIN32)

#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <process.h>
#include <psapi.h>

#include "platform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void win_message(DWORD code, char *msg, size_t cap) {
    DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, code, 0,
                             msg, (DWORD)cap, NULL);
    while (n > 0 && (msg[n - 1] == '\r' || msg[n - 1] == '\n' || msg[n - 1] == '.' || msg[n - 1] == ' ')) msg[--n] = 0;
    if (n == 0) snprintf(msg, cap, "error %lu", (unsigned long)code);
}

static void win_error(char *errbuf, size_t errlen, const char *what, const char *path) {
    char msg[256];
    win_message(GetLastError(), msg, sizeof(msg));
    snprintf(errbuf, errlen, "%s '%s': %s", what, path, msg);
}

/* Paths are UTF-8; convert to UTF-16 for the W APIs. NULL for invalid UTF-8. */
static wchar_t *utf8_to_wide(const char *s) {
    int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, NULL, 0);
    wchar_t *w;
    if (n <= 0) return NULL;
    w = (wchar_t *)malloc((size_t)n * sizeof(wchar_t));
    if (w && MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, w, n) <= 0) { free(w); w = NULL; }
    return w;
}

int cism__file_view_open(cism__file_view *view, const char *path, int use_mmap, char *errbuf, size_t errlen) {
    HANDLE file, mapping;
    LARGE_INTEGER size;
    DWORD attrs;
    wchar_t *wpath = utf8_to_wide(path);
    memset(view, 0, sizeof(*view));
    if (!wpath) { snprintf(errbuf, errlen, "invalid path '%s' (not UTF-8)", path); return -1; }
    attrs = GetFileAttributesW(wpath);
    if (attrs != INVALID_FILE_ATTRIBUTES && (attrs & FILE_ATTRIBUTE_DIRECTORY)) {
        free(wpath);
        snprintf(errbuf, errlen, "'%s' is a directory, not a regular file (give the path of a file on disk)", path);
        return -1;
    }
    /* FILE_SHARE_READ only: nobody may write to or truncate a file whose pages we map */
    file = CreateFileW(wpath, GENERIC_READ, FILE_SHARE_READ, NULL, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
    free(wpath);
    if (file == INVALID_HANDLE_VALUE) { win_error(errbuf, errlen, "cannot open", path); return -1; }
    if (!GetFileSizeEx(file, &size)) { win_error(errbuf, errlen, "cannot stat", path); CloseHandle(file); return -1; }
    if (size.QuadPart == 0) { snprintf(errbuf, errlen, "'%s' is empty", path); CloseHandle(file); return -1; }
    view->size = (uint64_t)size.QuadPart;
    if ((uint64_t)(size_t)view->size != view->size) {
        snprintf(errbuf, errlen, "'%s' is too large for this address space", path);
        CloseHandle(file);
        return -1;
    }
    if (use_mmap) {
        mapping = CreateFileMappingW(file, NULL, PAGE_READONLY, 0, 0, NULL);
        if (mapping) {
            void *p = MapViewOfFile(mapping, FILE_MAP_READ, 0, 0, 0);
            CloseHandle(mapping); /* the view keeps the mapping alive */
            if (p) {
                view->data = (const uint8_t *)p;
                view->mapped = 1;
                CloseHandle(file);
                return 0;
            }
        }
        /* fall through to reading */
    }
    {
        uint8_t *buf = (uint8_t *)malloc((size_t)view->size);
        uint64_t done = 0;
        if (!buf) {
            snprintf(errbuf, errlen, "out of memory reading '%s' (%llu bytes)", path, (unsigned long long)view->size);
            CloseHandle(file);
            return -1;
        }
        while (done < view->size) {
            DWORD chunk = (DWORD)((view->size - done) > 0x40000000u ? 0x40000000u : (view->size - done));
            DWORD got = 0;
            if (!ReadFile(file, buf + done, chunk, &got, NULL) || got == 0) {
                if (got == 0 && GetLastError() == ERROR_SUCCESS) snprintf(errbuf, errlen, "cannot read '%s': unexpected end of file", path);
                else win_error(errbuf, errlen, "cannot read", path);
                free(buf);
                CloseHandle(file);
                return -1;
            }
            done += got;
        }
        view->data = buf;
        view->mapped = 0;
    }
    CloseHandle(file);
    return 0;
}

void cism__file_view_settle(cism__file_view *view) { (void)view; }

void cism__file_view_close(cism__file_view *view) {
    if (!view || !view->data) return;
    if (view->mapped) UnmapViewOfFile(view->data);
    else free((void *)view->data);
    memset(view, 0, sizeof(*view));
}

int cism__file_exists(const char *path) {
    wchar_t *w = utf8_to_wide(path);
    DWORD a;
    if (!w) return 0;
    a = GetFileAttributesW(w);
    free(w);
    return a != INVALID_FILE_ATTRIBUTES && !(a & FILE_ATTRIBUTE_DIRECTORY);
}

/* ---- atomic file write ------------------------------------------------------ */
int cism__file_write_atomic(const char *path, const void *data, uint64_t size, char *errbuf, size_t errlen) {
    static volatile LONG counter = 0;
    size_t plen = strlen(path);
    char *tmp = (char *)malloc(plen + 48);
    wchar_t *wtmp = NULL, *wpath = NULL;
    HANDLE file = INVALID_HANDLE_VALUE;
    const uint8_t *p = (const uint8_t *)data;
    uint64_t done = 0;
    int ok = 0, attempt;
    if (!tmp) { snprintf(errbuf, errlen, "out of memory"); return -1; }
    wpath = utf8_to_wide(path);
    if (!wpath) { snprintf(errbuf, errlen, "invalid path '%s' (not UTF-8)", path); free(tmp); return -1; }
    {
        const DWORD a = GetFileAttributesW(wpath); /* the rename would fail only after the whole write */
        if (a != INVALID_FILE_ATTRIBUTES && (a & FILE_ATTRIBUTE_DIRECTORY)) {
            snprintf(errbuf, errlen, "'%s' is a directory: give a file name", path);
            free(wpath); free(tmp);
            return -1;
        }
    }
    for (attempt = 0; attempt < 100 && file == INVALID_HANDLE_VALUE; attempt++) {
        snprintf(tmp, plen + 48, "%s.tmp-%lu-%ld", path, (unsigned long)GetCurrentProcessId(),
                 (long)InterlockedIncrement(&counter));
        free(wtmp);
        wtmp = utf8_to_wide(tmp);
        if (!wtmp) break;
        file = CreateFileW(wtmp, GENERIC_WRITE, 0, NULL, CREATE_NEW, FILE_ATTRIBUTE_NORMAL, NULL);
        if (file == INVALID_HANDLE_VALUE && GetLastError() != ERROR_FILE_EXISTS) break;
    }
    if (file == INVALID_HANDLE_VALUE) {
        win_error(errbuf, errlen, "cannot create a temporary file next to", path);
        free(wtmp); free(wpath); free(tmp);
        return -1;
    }
    while (done < size) {
        DWORD chunk = size - done > ((uint64_t)1 << 30) ? (DWORD)1 << 30 : (DWORD)(size - done), n = 0;
        if (!WriteFile(file, p + done, chunk, &n, NULL) || n == 0) { win_error(errbuf, errlen, "cannot write", tmp); goto out; }
        done += n;
    }
    if (!FlushFileBuffers(file)) { win_error(errbuf, errlen, "cannot flush to disk", tmp); goto out; }
    CloseHandle(file);
    file = INVALID_HANDLE_VALUE;
    if (!MoveFileExW(wtmp, wpath, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH)) {
        win_error(errbuf, errlen, "cannot rename the temporary file to", path);
        goto out;
    }
    ok = 1;
out:
    if (file != INVALID_HANDLE_VALUE) CloseHandle(file);
    if (!ok) DeleteFileW(wtmp);
    free(wtmp); free(wpath); free(tmp);
    return ok ? 0 : -1;
}

/* ---- residency ------------------------------------------------------------- */
static uintptr_t page_size(void) {
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwPageSize ? (uintptr_t)si.dwPageSize : 4096u;
}

static void page_span(const void *p, uint64_t n, uintptr_t ps, void **start, size_t *len) {
    uintptr_t a = (uintptr_t)p & ~(ps - 1), e = ((uintptr_t)p + (uintptr_t)n + ps - 1) & ~(ps - 1);
    *start = (void *)a;
    *len = (size_t)(e - a);
}

/* PrefetchVirtualMemory is Windows 8+; looked up so the DLL loads anywhere. */
typedef struct { void *address; SIZE_T bytes; } prefetch_range;
typedef BOOL (WINAPI *prefetch_fn)(HANDLE, ULONG_PTR, prefetch_range *, ULONG);

int cism__mem_prefetch(const void *p, uint64_t n, int wait, char *errbuf, size_t errlen) {
    uintptr_t ps = page_size();
    prefetch_range r;
    prefetch_fn fn;
    HMODULE k32 = GetModuleHandleA("kernel32.dll");
    if (!p || n == 0) return CISM__MEM_OK;
    page_span(p, n, ps, &r.address, &r.bytes);
    fn = k32 ? (prefetch_fn)(void (*)(void))GetProcAddress(k32, "PrefetchVirtualMemory") : NULL;
    if (fn && !fn(GetCurrentProcess(), 1, &r, 0) && !wait) {
        char msg[256];
        win_message(GetLastError(), msg, sizeof(msg));
        snprintf(errbuf, errlen, "PrefetchVirtualMemory failed: %s", msg);
        return CISM__MEM_FAILED;
    }
    if (!fn && !wait) {
        snprintf(errbuf, errlen, "PrefetchVirtualMemory needs Windows 8 or later");
        return CISM__MEM_UNSUPPORTED;
    }
    if (wait) {
        const volatile uint8_t *b = (const volatile uint8_t *)p;
        uint64_t off;
        unsigned sum = 0;
        for (off = 0; off < n; off += ps) sum += b[off];
        sum += b[n - 1];
        (void)sum;
    }
    return CISM__MEM_OK;
}

int cism__mem_lock(const void *p, uint64_t n, int lock, char *errbuf, size_t errlen) {
    uintptr_t ps = page_size();
    void *start;
    size_t len;
    char msg[256];
    if (!p || n == 0) return CISM__MEM_OK;
    page_span(p, n, ps, &start, &len);
    if (!lock) {
        if (VirtualUnlock(start, len) || GetLastError() == ERROR_NOT_LOCKED) return CISM__MEM_OK;
        win_message(GetLastError(), msg, sizeof(msg));
        snprintf(errbuf, errlen, "VirtualUnlock failed: %s", msg);
        return CISM__MEM_FAILED;
    }
    if (VirtualLock(start, len)) return CISM__MEM_OK;
    if (GetLastError() == ERROR_WORKING_SET_QUOTA) {
        /* locked pages count against the minimum working set: grow it and retry */
        SIZE_T lo = 0, hi = 0;
        if (GetProcessWorkingSetSize(GetCurrentProcess(), &lo, &hi) &&
            SetProcessWorkingSetSize(GetCurrentProcess(), lo + len, hi + len) && VirtualLock(start, len))
            return CISM__MEM_OK;
    }
    {
        DWORD code = GetLastError();
        win_message(code, msg, sizeof(msg));
        snprintf(errbuf, errlen, "VirtualLock of %llu KiB refused: %s", (unsigned long long)len / 1024u, msg);
        return (code == ERROR_WORKING_SET_QUOTA || code == ERROR_ACCESS_DENIED || code == ERROR_PRIVILEGE_NOT_HELD ||
                code == ERROR_NOT_ENOUGH_MEMORY || code == ERROR_NO_SYSTEM_RESOURCES) ? CISM__MEM_DENIED : CISM__MEM_FAILED;
    }
}

int64_t cism__mem_resident(const void *p, uint64_t n) {
    enum { CHUNK = 1024 };
    uintptr_t ps = page_size();
    void *start;
    size_t len, pages, done = 0, i;
    uint64_t bytes = 0;
    uintptr_t first, last;
    PSAPI_WORKING_SET_EX_INFORMATION *info;
    if (!p || n == 0) return 0;
    page_span(p, n, ps, &start, &len);
    pages = len / ps;
    first = (uintptr_t)p - (uintptr_t)start;
    last = (uintptr_t)start + len - ((uintptr_t)p + (uintptr_t)n);
    info = (PSAPI_WORKING_SET_EX_INFORMATION *)malloc(CHUNK * sizeof(*info));
    if (!info) return -1;
    while (done < pages) {
        size_t chunk = pages - done < CHUNK ? pages - done : CHUNK;
        for (i = 0; i < chunk; i++) info[i].VirtualAddress = (char *)start + (done + i) * ps;
        if (!QueryWorkingSetEx(GetCurrentProcess(), info, (DWORD)(chunk * sizeof(*info)))) { free(info); return -1; }
        for (i = 0; i < chunk; i++) {
            if (info[i].VirtualAttributes.Flags & 1) { /* Valid: in this process's working set */
                uint64_t b = ps;
                if (done + i == 0) b -= first;
                if (done + i == pages - 1) b -= last;
                bytes += b;
            }
        }
        done += chunk;
    }
    free(info);
    return (int64_t)bytes;
}

/* ---- threads ---------------------------------------------------------------- */
struct cism__thread { HANDLE h; cism__thread_fn fn; void *arg; };

/* _beginthreadex, not CreateThread: the thread uses the C runtime (snprintf, malloc). */
static unsigned __stdcall thread_trampoline(void *p) {
    cism__thread *t = (cism__thread *)p;
    t->fn(t->arg);
    return 0;
}

cism__thread *cism__thread_start(cism__thread_fn fn, void *arg) {
    cism__thread *t = (cism__thread *)calloc(1, sizeof(*t));
    uintptr_t h;
    if (!t) return NULL;
    t->fn = fn;
    t->arg = arg;
    h = _beginthreadex(NULL, 0, thread_trampoline, t, 0, NULL);
    if (h == 0) { free(t); return NULL; }
    t->h = (HANDLE)h;
    return t;
}

void cism__thread_join(cism__thread *t) {
    if (!t) return;
    WaitForSingleObject(t->h, INFINITE);
    CloseHandle(t->h);
    free(t);
}

struct cism__mutex { SRWLOCK lock; };
struct cism__cond { CONDITION_VARIABLE cv; };

cism__mutex *cism__mutex_create(void) {
    cism__mutex *m = (cism__mutex *)malloc(sizeof(*m));
    if (m) InitializeSRWLock(&m->lock);
    return m;
}
void cism__mutex_destroy(cism__mutex *m) { free(m); }
void cism__mutex_lock(cism__mutex *m) { AcquireSRWLockExclusive(&m->lock); }
void cism__mutex_unlock(cism__mutex *m) { ReleaseSRWLockExclusive(&m->lock); }

cism__cond *cism__cond_create(void) {
    cism__cond *c = (cism__cond *)malloc(sizeof(*c));
    if (c) InitializeConditionVariable(&c->cv);
    return c;
}
void cism__cond_destroy(cism__cond *c) { free(c); }
void cism__cond_wait(cism__cond *c, cism__mutex *m) { SleepConditionVariableSRW(&c->cv, &m->lock, INFINITE, 0); }
void cism__cond_broadcast(cism__cond *c) { WakeAllConditionVariable(&c->cv); }

void cism__call_once(cism__once *once, void (*fn)(void)) {
    if (cism__atomic_load(&once->state) == 2) return;
    if (cism__atomic_cas(&once->state, 0, 1)) {
        fn();
        cism__atomic_store(&once->state, 2);
        return;
    }
    while (cism__atomic_load(&once->state) != 2) SwitchToThread();
}

/* Fiber-local storage, not TlsAlloc: only FLS runs a destructor when a thread
   exits, so values are freed like pthread_key_create(.., free) does. */
struct cism__tls { DWORD index; };

static void NTAPI tls_destructor(void *value) { free(value); }

static cism__tls *g_tls_keys[8];
static volatile int32_t g_tls_count;

cism__tls *cism__tls_create(void) {
    cism__tls *k = (cism__tls *)malloc(sizeof(*k));
    int32_t slot;
    if (!k) return NULL;
    k->index = FlsAlloc(tls_destructor);
    if (k->index == FLS_OUT_OF_INDEXES) { free(k); return NULL; }
    slot = cism__atomic_add(&g_tls_count, 1) - 1;
    if (slot < (int32_t)(sizeof(g_tls_keys) / sizeof(g_tls_keys[0]))) g_tls_keys[slot] = k;
    return k;
}
void *cism__tls_get(cism__tls *k) { return k ? FlsGetValue(k->index) : NULL; }
int cism__tls_set(cism__tls *k, void *value) { return k && FlsSetValue(k->index, value) ? 0 : -1; }

/* Called when cism.dll is unloaded (FreeLibrary): a destructor left registered
   would point into unmapped code at the next thread exit. FlsFree runs it for
   the values still set. */
void cism__platform_unload(void) {
    int32_t i, n = cism__atomic_load(&g_tls_count);
    for (i = 0; i < n && i < (int32_t)(sizeof(g_tls_keys) / sizeof(g_tls_keys[0])); i++)
        if (g_tls_keys[i]) FlsFree(g_tls_keys[i]->index);
}

void cism__cpu_relax(void) { YieldProcessor(); }
void cism__thread_yield(void) { SwitchToThread(); }

int cism__cpu_count(void) {
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwNumberOfProcessors < 1 ? 1 : (int)si.dwNumberOfProcessors;
}

static int popcount_ptr(ULONG_PTR v) {
    int n = 0;
    for (; v; v &= v - 1) n++;
    return n;
}

int cism__cpu_perf_count(void) {
    /* Hybrid CPUs (P + E cores) report an efficiency class per core (Windows
       10+; higher = faster). Older SDK headers call the byte Reserved[0]. */
    DWORD len = 0;
    char *buf, *p;
    int lo = 256, hi = -1, count = 0, total = 0;
    GetLogicalProcessorInformationEx(RelationProcessorCore, NULL, &len);
    if (GetLastError() != ERROR_INSUFFICIENT_BUFFER || len == 0) return 0;
    buf = (char *)malloc(len);
    if (!buf) return 0;
    if (!GetLogicalProcessorInformationEx(RelationProcessorCore, (SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX *)buf, &len)) {
        free(buf);
        return 0;
    }
    for (p = buf; p < buf + len; p += ((SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX *)p)->Size) {
        const SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX *e = (const SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX *)p;
        int cls = ((const BYTE *)&e->Processor)[1];
        if (cls < lo) lo = cls;
        if (cls > hi) hi = cls;
    }
    for (p = buf; p < buf + len; p += ((SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX *)p)->Size) {
        const SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX *e = (const SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX *)p;
        int cls = ((const BYTE *)&e->Processor)[1], threads = 0;
        WORD g;
        for (g = 0; g < e->Processor.GroupCount; g++) threads += popcount_ptr(e->Processor.GroupMask[g].Mask);
        total += threads;
        if (cls > lo) count += threads;
    }
    free(buf);
    return hi == lo ? total : count;
}

double cism__time_seconds(void) {
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&c);
    return (double)c.QuadPart / (double)f.QuadPart;
}

double cism__thread_cpu_seconds(void) {
    FILETIME a, b, k, u;
    if (!GetThreadTimes(GetCurrentThread(), &a, &b, &k, &u)) return cism__time_seconds();
    return ((double)k.dwLowDateTime + (double)u.dwLowDateTime +
            4294967296.0 * ((double)k.dwHighDateTime + (double)u.dwHighDateTime)) * 1e-7;
}

int64_t cism__resident_bytes(void) {
    PROCESS_MEMORY_COUNTERS pmc;
    if (GetProcessMemoryInfo(GetCurrentProcess(), &pmc, sizeof(pmc))) return (int64_t)pmc.WorkingSetSize;
    return -1;
}

#else
typedef int cism__platform_win32_unused;
#endif
