package org.libcism;

import java.nio.charset.StandardCharsets;

/**
 * A libcism call failed. Carries the C status code (the {@code CISM_ERR_*}
 * values of cism.h, pinned) and the library's message for that call.
 * Cancellation, a full context and a callback asking to stop are not errors:
 * {@link Session#generate} reports them in its {@link GenerationResult}.
 */
public class CismException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public static final int INVALID_ARG = 1;
    public static final int IO = 2;
    public static final int FORMAT = 3;
    public static final int UNSUPPORTED = 4;
    public static final int OUT_OF_MEMORY = 5;
    public static final int CONTEXT_FULL = 6;
    public static final int TOKEN_RANGE = 7;
    public static final int BUFFER_SMALL = 8;
    public static final int CANCELLED = 9;
    public static final int STATE = 10;
    public static final int EXISTS = 11;
    public static final int INTERNAL = 12;
    public static final int PERMISSION = 13;

    private final int status;

    public CismException(int status, String message) {
        super(message);
        this.status = status;
    }

    /** Called from the JNI glue: the message arrives as UTF-8 bytes (any code point, emoji included). */
    CismException(int status, byte[] utf8Message) {
        this(status, new String(utf8Message, StandardCharsets.UTF_8));
    }

    /** The {@code cism_status} of the failed call. */
    public int getStatus() {
        return status;
    }

    /** "invalid argument", "input/output error", ... ({@code cism_status_str}). */
    public String getStatusName() {
        return Cism.statusName(status);
    }

    @Override
    public String toString() {
        return "CismException(" + getStatusName() + "): " + getMessage();
    }
}
