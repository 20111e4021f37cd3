package org.libcism;

import java.nio.charset.StandardCharsets;

/** Library-wide queries. Loading any class of this package loads {@code libcism_jni}. */
public final class Cism {
    private Cism() {}

    static {
        System.loadLibrary("cism_jni");
    }

    /** Makes sure the native library is loaded (each class calls it in its static initializer). */
    static void ensureLoaded() {}

    /** "0.1.0": the version of the native library. */
    public static String version() {
        return utf8(nativeVersion());
    }

    /** CPU, its features and the kernel tier chosen at run time. */
    public static String systemInfo() {
        return utf8(nativeSystemInfo());
    }

    /**
     * The thread count sessions use by default: the big cores of a big.LITTLE
     * phone (the slowest cluster left out), all CPUs elsewhere, at most 8.
     */
    public static int defaultThreadCount() {
        return nativeDefaultThreads();
    }

    /** Resident memory of the whole process in bytes (RSS). */
    public static long processResidentBytes() {
        return nativeProcessResidentBytes();
    }

    static String statusName(int status) {
        return utf8(nativeStatusName(status));
    }

    static String utf8(byte[] bytes) {
        return bytes == null ? null : new String(bytes, StandardCharsets.UTF_8);
    }

    private static native byte[] nativeVersion();
    private static native byte[] nativeSystemInfo();
    private static native byte[] nativeStatusName(int status);
    private static native int nativeDefaultThreads();
    private static native long nativeProcessResidentBytes();
}
