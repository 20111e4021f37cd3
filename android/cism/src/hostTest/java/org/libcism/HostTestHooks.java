package org.libcism;

/** Test-only natives of a host build with CISM_JNI_COUNT_ALLOCATIONS (alloc_counter.c). */
final class HostTestHooks {
    private HostTestHooks() {}

    static {
        Cism.ensureLoaded();
    }

    /** Heap blocks the JNI glue and the engine hold right now. */
    static native long liveAllocations();
}
