package org.libcism;

/** How a generation ended. */
public final class GenerationResult {
    /** Why generation stopped. */
    public enum StopReason {
        /** The model produced an end-of-generation token (reported to the callback, not evaluated). */
        END_OF_TEXT,
        /** maxTokens were generated. */
        MAX_TOKENS,
        /** The callback returned false. */
        STOPPED,
        /** {@link Session#cancel()} was called (from any thread). */
        CANCELLED,
        /** The session's context is full; rewind or reset it to go on. */
        CONTEXT_FULL
    }

    private final StopReason stopReason;
    private final int tokenCount;

    GenerationResult(StopReason stopReason, int tokenCount) {
        this.stopReason = stopReason;
        this.tokenCount = tokenCount;
    }

    public StopReason getStopReason() {
        return stopReason;
    }

    /** Tokens passed to the callback. */
    public int getTokenCount() {
        return tokenCount;
    }

    @Override
    public String toString() {
        return "GenerationResult(" + stopReason + ", " + tokenCount + " tokens)";
    }
}
