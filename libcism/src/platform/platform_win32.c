/* platform_win32.c - Windows (Win32 threads, file mapping). */
#if defined(_WIN32)

#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <psapi.h>

#include "platform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void win_error(char *errbuf, size_t errlen, const char *what, const char *path) {
    DWORD code = GetLastError();
    char msg[256];
    DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, code, 0,
                             msg, (DWORD)sizeof(msg), NULL);
    while (n > 0 && (msg[n - 1] == '\r' || msg[n - 1] == '\n' || msg[n - 1] == '.')) msg[--n] = 0;
    if (n == 0) snprintf(msg, sizeof(msg), "error %lu", (unsigned long)code);
    snprintf(errbuf, errlen, "%s '%s': %s", what, path, msg);
}

/* Paths are UTF-8; convert to UTF-16 for the W APIs. */
static wchar_t *utf8_to_wide(const char *s) {
    int n = MultiByteToWideChar(CP_UTF8, 0, s, -1, NULL, 0);
    wchar_t *w;
    if (n <= 0) return NULL;
    w = (wchar_t *)malloc((size_t)n * sizeof(wchar_t));
    if (w && MultiByteToWideChar(CP_UTF8, 0, s, -1, w, n) <= 0) { free(w); w = NULL; }
    return w;
}

int cism__file_view_open(cism__file_view *view, const char *path, int use_mmap, char *errbuf, size_t errlen) {
    HANDLE file, mapping;
    LARGE_INTEGER size;
    wchar_t *wpath = utf8_to_wide(path);
    memset(view, 0, sizeof(*view));
    if (!wpath) { snprintf(errbuf, errlen, "invalid path '%s'", path); return -1; }
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
            CloseHandle(mapping);
            if (p) {
                view->data = (const uint8_t *)p;
                view->mapped = 1;
                CloseHandle(file);
                return 0;
            }
        }
    }
    {
        uint8_t *buf = (uint8_t *)malloc((size_t)view->size);
        uint64_t done = 0;
        if (!buf) { snprintf(errbuf, errlen, "out of memory reading '%s'", path); CloseHandle(file); return -1; }
        while (done < view->size) {
            DWORD chunk = (DWORD)((view->size - done) > 0x40000000u ? 0x40000000u : (view->size - done));
            DWORD got = 0;
            if (!ReadFile(file, buf + done, chunk, &got, NULL) || got == 0) {
                win_error(errbuf, errlen, "cannot read", path);
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

void cism__file_view_close(cism__file_view *view) {
    if (!view || !view->data) return;
    if (view->mapped) UnmapViewOfFile(view->data);
    else free((void *)view->data);
    memset(view, 0, sizeof(*view));
}

void cism__file_view_prefetch(const cism__file_view *view) { (void)view; }

int cism__file_exists(const char *path) {
    wchar_t *w = utf8_to_wide(path);
    DWORD a;
    if (!w) return 0;
    a = GetFileAttributesW(w);
    free(w);
    return a != INVALID_FILE_ATTRIBUTES && !(a & FILE_ATTRIBUTE_DIRECTORY);
}

/* ---- threads ---------------------------------------------------------------- */
struct cism__thread { HANDLE h; cism__thread_fn fn; void *arg; };

static DWORD WINAPI thread_trampoline(LPVOID p) {
    cism__thread *t = (cism__thread *)p;
    t->fn(t->arg);
    return 0;
}

cism__thread *cism__thread_start(cism__thread_fn fn, void *arg) {
    cism__thread *t = (cism__thread *)calloc(1, sizeof(*t));
    if (!t) return NULL;
    t->fn = fn;
    t->arg = arg;
    t->h = CreateThread(NULL, 0, thread_trampoline, t, 0, NULL);
    if (!t->h) { free(t); return NULL; }
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

struct cism__tls { DWORD index; };

cism__tls *cism__tls_create(void) {
    cism__tls *k = (cism__tls *)malloc(sizeof(*k));
    if (!k) return NULL;
    k->index = TlsAlloc();
    if (k->index == TLS_OUT_OF_INDEXES) { free(k); return NULL; }
    return k;
}
void *cism__tls_get(cism__tls *k) { return k ? TlsGetValue(k->index) : NULL; }
int cism__tls_set(cism__tls *k, void *value) { return k && TlsSetValue(k->index, value) ? 0 : -1; }

void cism__cpu_relax(void) { YieldProcessor(); }
void cism__thread_yield(void) { SwitchToThread(); }

int cism__cpu_count(void) {
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwNumberOfProcessors < 1 ? 1 : (int)si.dwNumberOfProcessors;
}

double cism__time_seconds(void) {
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&c);
    return (double)c.QuadPart / (double)f.QuadPart;
}

int64_t cism__resident_bytes(void) {
    PROCESS_MEMORY_COUNTERS pmc;
    if (GetProcessMemoryInfo(GetCurrentProcess(), &pmc, sizeof(pmc))) return (int64_t)pmc.WorkingSetSize;
    return -1;
}

#else
typedef int cism__platform_win32_unused;
#endif
