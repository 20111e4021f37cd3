/* alloc_counter.c - host test builds only (CISM_JNI_COUNT_ALLOCATIONS): counts
 * live heap blocks allocated by the JNI glue and the engine, which are linked
 * with -Wl,--wrap=malloc,... so their calls land here. The JVM test reads the
 * count through org.libcism.HostTestHooks.liveAllocations(). */
#include <jni.h>
#include <stddef.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);

static long g_live; /* updated atomically */

void *__wrap_malloc(size_t n) {
    void *p = __real_malloc(n);
    if (p) __atomic_add_fetch(&g_live, 1, __ATOMIC_SEQ_CST);
    return p;
}

void *__wrap_calloc(size_t n, size_t size) {
    void *p = __real_calloc(n, size);
    if (p) __atomic_add_fetch(&g_live, 1, __ATOMIC_SEQ_CST);
    return p;
}

void *__wrap_realloc(void *p, size_t n) {
    void *q = __real_realloc(p, n);
    if (!p && q) __atomic_add_fetch(&g_live, 1, __ATOMIC_SEQ_CST);
    return q;
}

void __wrap_free(void *p) {
    if (p) __atomic_sub_fetch(&g_live, 1, __ATOMIC_SEQ_CST);
    __real_free(p);
}

JNIEXPORT jlong JNICALL Java_org_libcism_HostTestHooks_liveAllocations(JNIEnv *env, jclass cls);

JNIEXPORT jlong JNICALL Java_org_libcism_HostTestHooks_liveAllocations(JNIEnv *env, jclass cls) {
    (void)env;
    (void)cls;
    return (jlong)__atomic_load_n(&g_live, __ATOMIC_SEQ_CST);
}
