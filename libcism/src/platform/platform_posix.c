/* platform_posix.c - Linux, Android, macOS/iOS.
 *
 * POSIX.1-2008 plus mincore(), which is not POSIX but exists on every target
 * here (Linux and Android kernels, Darwin); glibc and musl declare it only
 * with _DEFAULT_SOURCE (BSD/SVID, not a GNU extension), Darwin with
 * _DARWIN_C_SOURCE. Nothing here needs _GNU_SOURCE. */
#if !defined(_WIN32)

#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#if !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE 1
#endif
#if defined(__APPLE__) && !defined(_DARWIN_C_SOURCE)
#define _DARWIN_C_SOURCE 1
#endif

#include "platform.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__APPLE__)
#include <mach/mach.h>
#include <sys/sysctl.h>
#endif

/* ---- file view ------------------------------------------------------------- */
/* The buffer of a copied file (use_mmap = 0). On Linux: anonymous memory from a
   2 MiB boundary with MADV_HUGEPAGE, so transparent huge pages back it where the
   system allows them (decode streams every weight once per token; with 4 KiB
   pages the TLB misses and the hardware prefetchers' stops at page boundaries
   cost 12-20% of the bandwidth here: docs/PERFORMANCE.md). Elsewhere: malloc. */
#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(MAP_ANONYMOUS)
#define HUGE_PAGES 1
static const size_t g_huge = (size_t)2 << 20;
static size_t copy_len(size_t size) { return (size + g_huge - 1) / g_huge * g_huge; }

/* len bytes of anonymous memory with protection prot, starting on a 2 MiB
   boundary (a larger reservation, its slack unmapped); MAP_FAILED on failure. */
static uint8_t *aligned_anon(size_t len, int prot) {
    size_t span = len + g_huge;
    uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE), end;
    uint8_t *r = (uint8_t *)mmap(NULL, span, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *a;
    if (r == MAP_FAILED) return r;
    a = (uint8_t *)(((uintptr_t)r + g_huge - 1) & ~(uintptr_t)(g_huge - 1));
    if (a > r) munmap(r, (size_t)(a - r));
    end = ((uintptr_t)(a + len) + ps - 1) & ~(ps - 1);
    if (end < (uintptr_t)(r + span)) munmap((void *)end, (size_t)((uintptr_t)(r + span) - end));
    return a;
}
#endif

static uint8_t *copy_alloc(size_t size, int *how) {
#if defined(HUGE_PAGES)
    uint8_t *a = aligned_anon(copy_len(size), PROT_READ | PROT_WRITE);
    if (a != MAP_FAILED) {
        madvise(a, copy_len(size), MADV_HUGEPAGE);
        *how = 2;
        return a;
    }
#endif
    *how = 0;
    return (uint8_t *)malloc(size);
}

static void copy_free(uint8_t *p, size_t size, int how) {
#if defined(HUGE_PAGES)
    if (how == 2) {
        munmap(p, copy_len(size));
        return;
    }
#endif
    (void)size;
    (void)how;
    free(p);
}

/* A read-only shared mapping of the whole file. On Linux it starts on a 2 MiB
   boundary (mapped over an aligned reservation) and is advised MADV_HUGEPAGE:
   where the file system keeps the file in large page-cache folios (ext4, xfs,
   tmpfs on recent kernels; a file written in large writes, or read first
   through this advised mapping, whose readahead then brings in 2 MiB folios),
   the kernel maps 2 MiB aligned parts of it with huge pages, which decode's
   streaming reads run faster over (docs/MEMORY.md). Elsewhere, or if any step
   fails, a plain mapping. */
static void *map_file(int fd, size_t size) {
#if defined(HUGE_PAGES)
    if (size >= g_huge) {
        uint8_t *a = aligned_anon(size, PROT_NONE);
        if (a != MAP_FAILED) {
            void *p = mmap(a, size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
            if (p != MAP_FAILED) {
                madvise(p, size, MADV_HUGEPAGE);
                return p;
            }
            munmap(a, size);
        }
    }
#endif
    return mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
}

static void not_regular(char *errbuf, size_t errlen, const char *path, const struct stat *st) {
    const char *kind = S_ISDIR(st->st_mode) ? "a directory" : S_ISFIFO(st->st_mode) ? "a FIFO (named pipe)"
                     : S_ISCHR(st->st_mode) ? "a character device" : S_ISBLK(st->st_mode) ? "a block device"
                     : S_ISSOCK(st->st_mode) ? "a socket" : "not a regular file";
    snprintf(errbuf, errlen, "'%s' is %s, not a regular file (give the path of a file on disk)", path, kind);
}

int cism__file_view_open(cism__file_view *view, const char *path, int use_mmap, char *errbuf, size_t errlen) {
    struct stat st;
    int fd;
    memset(view, 0, sizeof(*view));
    /* A FIFO, a character device or a socket would block open() or read()
       forever: look first, and open without blocking (the path may change in
       between, so the descriptor is checked again). */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        not_regular(errbuf, errlen, path, &st);
        return -1;
    }
    fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        snprintf(errbuf, errlen, "cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        snprintf(errbuf, errlen, "cannot stat '%s': %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        not_regular(errbuf, errlen, path, &st);
        close(fd);
        return -1;
    }
    {   /* a regular file: blocking reads again (O_NONBLOCK means nothing for it on most systems) */
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    }
    view->size = (uint64_t)st.st_size;
    if (view->size == 0) {
        snprintf(errbuf, errlen, "'%s' is empty", path);
        close(fd);
        return -1;
    }
    if ((uint64_t)(size_t)view->size != view->size) {
        snprintf(errbuf, errlen, "'%s' is too large for this address space", path);
        close(fd);
        return -1;
    }
    if (use_mmap) {
        void *p = map_file(fd, (size_t)view->size);
        if (p != MAP_FAILED) {
            view->data = (const uint8_t *)p;
            view->mapped = 1;
            close(fd);
            return 0;
        }
        /* fall through to reading */
    }
    {
        int how = 0;
        uint8_t *buf = copy_alloc((size_t)view->size, &how);
        uint64_t done = 0;
        if (!buf) {
            snprintf(errbuf, errlen, "out of memory reading '%s' (%llu bytes)", path,
                     (unsigned long long)view->size);
            close(fd);
            return -1;
        }
        while (done < view->size) {
            ssize_t n = read(fd, buf + done, (size_t)(view->size - done));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                snprintf(errbuf, errlen, "cannot read '%s': %s", path, n < 0 ? strerror(errno) : "unexpected end of file");
                copy_free(buf, (size_t)view->size, how);
                close(fd);
                return -1;
            }
            done += (uint64_t)n;
        }
        view->data = buf;
        view->mapped = how; /* 0: malloc, 2: huge-page copy */
    }
    close(fd);
    return 0;
}

void cism__file_view_settle(cism__file_view *view) {
#if defined(HUGE_PAGES)
    /* The loader's checks touched the header and every norm vector; with the
       advice each touch may have mapped a whole 2 MiB page, which counts in the
       process's resident size although nothing runs yet (and a range where a
       small page got mapped is not mapped huge later). Unmapping them is free
       for a read-only shared mapping: the data stays in the page cache. */
    if (view && view->mapped == 1 && view->size >= g_huge)
        madvise((void *)(uintptr_t)view->data, (size_t)view->size, MADV_DONTNEED);
#else
    (void)view;
#endif
}

void cism__file_view_close(cism__file_view *view) {
    if (!view || !view->data) return;
    if (view->mapped == 1) munmap((void *)view->data, (size_t)view->size);
    else copy_free((uint8_t *)(uintptr_t)view->data, (size_t)view->size, view->mapped);
    memset(view, 0, sizeof(*view));
}

/* ---- residency ------------------------------------------------------------- */
static uintptr_t page_size(void) {
    long n = sysconf(_SC_PAGESIZE);
    return n > 0 ? (uintptr_t)n : 4096u;
}

/* The whole pages covering [p, p + n). */
static void page_span(const void *p, uint64_t n, uintptr_t ps, void **start, size_t *len) {
    uintptr_t a = (uintptr_t)p & ~(ps - 1), e = ((uintptr_t)p + (uintptr_t)n + ps - 1) & ~(ps - 1);
    *start = (void *)a;
    *len = (size_t)(e - a);
}

int cism__mem_prefetch(const void *p, uint64_t n, int wait, char *errbuf, size_t errlen) {
    uintptr_t ps = page_size();
    void *start;
    size_t len;
    int rc;
    if (!p || n == 0) return CISM__MEM_OK;
    page_span(p, n, ps, &start, &len);
    rc = posix_madvise(start, len, POSIX_MADV_WILLNEED);
    if (rc != 0 && !wait) {
        snprintf(errbuf, errlen, "posix_madvise(WILLNEED) failed: %s", strerror(rc));
        return CISM__MEM_FAILED;
    }
    if (wait) {
        /* one read per page faults it in; volatile so the loads stay */
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
    if (!p || n == 0) return CISM__MEM_OK;
    page_span(p, n, ps, &start, &len);
    if (!lock) {
        if (munlock(start, len) == 0) return CISM__MEM_OK;
        snprintf(errbuf, errlen, "munlock failed: %s", strerror(errno));
        return CISM__MEM_FAILED;
    }
    if (mlock(start, len) == 0) return CISM__MEM_OK;
    {
        int e = errno;
        struct rlimit rl;
        char limit[64] = "unknown";
        if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
            if (rl.rlim_cur == RLIM_INFINITY) snprintf(limit, sizeof(limit), "unlimited");
            else snprintf(limit, sizeof(limit), "%llu KiB", (unsigned long long)rl.rlim_cur / 1024u);
        }
        snprintf(errbuf, errlen, "mlock of %llu KiB refused: %s (RLIMIT_MEMLOCK %s)",
                 (unsigned long long)len / 1024u, strerror(e), limit);
        return (e == EPERM || e == ENOMEM || e == EAGAIN) ? CISM__MEM_DENIED : CISM__MEM_FAILED;
    }
}

int64_t cism__mem_resident(const void *p, uint64_t n) {
    uintptr_t ps = page_size();
    void *start;
    size_t len, pages, done = 0, i;
    uint64_t bytes = 0;
    uintptr_t first, last;
#if defined(__APPLE__)
    char vec[1024];
#else
    unsigned char vec[1024];
#endif
    if (!p || n == 0) return 0;
    page_span(p, n, ps, &start, &len);
    pages = len / ps;
    first = (uintptr_t)p - (uintptr_t)start;                 /* bytes of the first page before p */
    last = (uintptr_t)start + len - ((uintptr_t)p + (uintptr_t)n); /* bytes of the last page after the range */
    while (done < pages) {
        size_t chunk = pages - done < sizeof(vec) ? pages - done : sizeof(vec);
        if (mincore((char *)start + done * ps, chunk * ps, vec) != 0) return -1;
        for (i = 0; i < chunk; i++) {
            if (vec[i] & 1) {
                uint64_t b = ps;
                if (done + i == 0) b -= first;
                if (done + i == pages - 1) b -= last;
                bytes += b;
            }
        }
        done += chunk;
    }
    return (int64_t)bytes;
}

int cism__file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* ---- atomic file write ------------------------------------------------------ */
int cism__file_write_atomic(const char *path, const void *data, uint64_t size, char *errbuf, size_t errlen) {
    size_t plen = strlen(path), dlen = plen;
    char *tmp, *dir;
    const uint8_t *p = (const uint8_t *)data;
    uint64_t done = 0;
    int fd, dfd;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) { /* the rename would fail only after the whole write */
        snprintf(errbuf, errlen, "'%s' is a directory: give a file name", path);
        return -1;
    }
    while (dlen > 0 && path[dlen - 1] != '/') dlen--;
    tmp = (char *)malloc(plen + 16);
    dir = (char *)malloc(dlen + 2);
    if (!tmp || !dir) {
        free(tmp);
        free(dir);
        snprintf(errbuf, errlen, "out of memory");
        return -1;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp-XXXXXX", 12);  /* unique (mkstemp), in the same folder: rename stays atomic */
    fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(errbuf, errlen, "cannot create a temporary file next to '%s': %s", path, strerror(errno));
        free(tmp);
        free(dir);
        return -1;
    }
    while (done < size) {
        size_t chunk = size - done > ((uint64_t)1 << 30) ? (size_t)1 << 30 : (size_t)(size - done);
        ssize_t n = write(fd, p + done, chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            snprintf(errbuf, errlen, "cannot write '%s': %s", tmp, n < 0 ? strerror(errno) : "no progress");
            goto fail;
        }
        done += (uint64_t)n;
    }
    if (fsync(fd) != 0) {
        snprintf(errbuf, errlen, "cannot flush '%s' to disk: %s", tmp, strerror(errno));
        goto fail;
    }
    if (close(fd) != 0) {
        fd = -1;
        snprintf(errbuf, errlen, "cannot close '%s': %s", tmp, strerror(errno));
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        snprintf(errbuf, errlen, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        goto fail;
    }
    /* the rename itself reaches the disk once the folder is synced (best effort) */
    if (dlen == 0) memcpy(dir, ".", 2);
    else { memcpy(dir, path, dlen); dir[dlen] = 0; }
    dfd = open(dir, O_RDONLY);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    free(tmp);
    free(dir);
    return 0;
fail:
    if (fd >= 0) close(fd);
    unlink(tmp);
    free(tmp);
    free(dir);
    return -1;
}

/* ---- threads --------------------------------------------------------------- */
struct cism__thread { pthread_t tid; cism__thread_fn fn; void *arg; };

static void *thread_trampoline(void *p) {
    cism__thread *t = (cism__thread *)p;
    t->fn(t->arg);
    return NULL;
}

cism__thread *cism__thread_start(cism__thread_fn fn, void *arg) {
    cism__thread *t = (cism__thread *)calloc(1, sizeof(*t));
    if (!t) return NULL;
    t->fn = fn;
    t->arg = arg;
    if (pthread_create(&t->tid, NULL, thread_trampoline, t) != 0) {
        free(t);
        return NULL;
    }
    return t;
}

void cism__thread_join(cism__thread *t) {
    if (!t) return;
    pthread_join(t->tid, NULL);
    free(t);
}

struct cism__mutex { pthread_mutex_t m; };
struct cism__cond { pthread_cond_t c; };

cism__mutex *cism__mutex_create(void) {
    cism__mutex *m = (cism__mutex *)malloc(sizeof(*m));
    if (m && pthread_mutex_init(&m->m, NULL) != 0) { free(m); m = NULL; }
    return m;
}
void cism__mutex_destroy(cism__mutex *m) { if (m) { pthread_mutex_destroy(&m->m); free(m); } }
void cism__mutex_lock(cism__mutex *m) { pthread_mutex_lock(&m->m); }
void cism__mutex_unlock(cism__mutex *m) { pthread_mutex_unlock(&m->m); }

cism__cond *cism__cond_create(void) {
    cism__cond *c = (cism__cond *)malloc(sizeof(*c));
    if (c && pthread_cond_init(&c->c, NULL) != 0) { free(c); c = NULL; }
    return c;
}
void cism__cond_destroy(cism__cond *c) { if (c) { pthread_cond_destroy(&c->c); free(c); } }
void cism__cond_wait(cism__cond *c, cism__mutex *m) { pthread_cond_wait(&c->c, &m->m); }
void cism__cond_broadcast(cism__cond *c) { pthread_cond_broadcast(&c->c); }

void cism__call_once(cism__once *once, void (*fn)(void)) {
    /* 0 = not started, 1 = running, 2 = done */
    if (cism__atomic_load(&once->state) == 2) return;
    if (cism__atomic_cas(&once->state, 0, 1)) {
        fn();
        cism__atomic_store(&once->state, 2);
        return;
    }
    while (cism__atomic_load(&once->state) != 2) sched_yield();
}

struct cism__tls { pthread_key_t key; };

cism__tls *cism__tls_create(void) {
    cism__tls *k = (cism__tls *)malloc(sizeof(*k));
    if (k && pthread_key_create(&k->key, free) != 0) { free(k); k = NULL; }
    return k;
}
void *cism__tls_get(cism__tls *k) { return k ? pthread_getspecific(k->key) : NULL; }
int cism__tls_set(cism__tls *k, void *value) { return k ? pthread_setspecific(k->key, value) : -1; }

void cism__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__ __volatile__("pause");
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

void cism__thread_yield(void) { sched_yield(); }

/* ---- system ---------------------------------------------------------------- */
int cism__cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

double cism__time_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double cism__thread_cpu_seconds(void) {
#if defined(CLOCK_THREAD_CPUTIME_ID)
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0) return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
#endif
    return cism__time_seconds();
}

#if defined(__linux__)
/* cpu_capacity (EAS, big.LITTLE kernels) or else the maximum frequency of cpu i; 0 unknown. */
static long cpu_speed(int i) {
    static const char *files[2] = {"cpu_capacity", "cpufreq/cpuinfo_max_freq"};
    char path[96];
    int f;
    for (f = 0; f < 2; f++) {
        FILE *fp;
        long v = 0;
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/%s", i, files[f]);
        fp = fopen(path, "r");
        if (!fp) continue;
        if (fscanf(fp, "%ld", &v) != 1) v = 0;
        fclose(fp);
        if (v > 0) return v;
    }
    return 0;
}
#endif

int cism__cpu_perf_count(void) {
#if defined(__linux__)
    /* Phones mix fast and slow clusters (1+3+4, 2+6, 4+4, ...). Threads on the
       slow cluster hold the fast ones back at every barrier, so the slowest
       cluster is left out. All CPUs alike: all of them. */
    enum { MAX_CPUS = 256 };
    long speed[MAX_CPUS];
    int n = (int)sysconf(_SC_NPROCESSORS_CONF), i, perf;
    if (n < 1) return 0;
    if (n > MAX_CPUS) n = MAX_CPUS;
    for (i = 0; i < n; i++) speed[i] = cpu_speed(i);
    perf = cism__perf_cpus(speed, n);
    /* all alike: the online ones (phones take cores offline) */
    return perf == n ? cism__cpu_count() : perf;
#elif defined(__APPLE__)
    /* perflevel0 is the performance cluster on Apple silicon; Intel Macs have one level */
    int v = 0;
    size_t len = sizeof(v);
    if (sysctlbyname("hw.perflevel0.physicalcpu", &v, &len, NULL, 0) == 0 && v > 0) return v;
    len = sizeof(v);
    if (sysctlbyname("hw.physicalcpu", &v, &len, NULL, 0) == 0 && v > 0) return v;
    return 0;
#else
    return 0;
#endif
}

int64_t cism__resident_bytes(void) {
#if defined(__APPLE__)
    mach_task_basic_info_data_t info;
    mach_msg_type_number_t count = MACH_TASK_BASIC_INFO_COUNT;
    if (task_info(mach_task_self(), MACH_TASK_BASIC_INFO, (task_info_t)&info, &count) != KERN_SUCCESS) return -1;
    return (int64_t)info.resident_size;
#elif defined(__linux__)
    FILE *f = fopen("/proc/self/statm", "r");
    long long pages_total = 0, pages_res = 0;
    int ok;
    if (!f) return -1;
    ok = fscanf(f, "%lld %lld", &pages_total, &pages_res) == 2;
    fclose(f);
    if (!ok) return -1;
    return (int64_t)pages_res * (int64_t)sysconf(_SC_PAGESIZE);
#else
    return -1;
#endif
}

#else
typedef int cism__platform_posix_unused;
#endif
