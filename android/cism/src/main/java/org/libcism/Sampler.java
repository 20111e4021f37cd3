package org.libcism;

/**
 * Chooses tokens from logits: penalties, top-k, top-p, min-p, temperature,
 * then a seeded draw (temperature 0 = greedy). Keeps the penalty history of a
 * conversation, so reuse one sampler across its turns.
 *
 * <pre>{@code
 * Sampler sampler = new Sampler.Builder().temperature(0.7f).topP(0.9f).seed(42).build();
 * }</pre>
 */
public final class Sampler implements AutoCloseable {
    static {
        Cism.ensureLoaded();
    }

    // cism_sampler_param values (pinned).
    private static final int TEMPERATURE = 0, TOP_K = 1, TOP_P = 2, MIN_P = 3, REPEAT_PENALTY = 4,
            FREQUENCY_PENALTY = 5, PRESENCE_PENALTY = 6, PENALTY_LAST_N = 7, SEED = 8;

    public static final class Builder {
        private double temperature = 0, topP = 1, minP = 0, repeatPenalty = 1, frequencyPenalty = 0, presencePenalty = 0;
        private long topK = 0, penaltyLastN = 64, seed = 0;

        public Builder temperature(double v) { temperature = v; return this; }
        public Builder topK(int v) { topK = v; return this; }
        public Builder topP(double v) { topP = v; return this; }
        public Builder minP(double v) { minP = v; return this; }
        public Builder repeatPenalty(double v) { repeatPenalty = v; return this; }
        public Builder frequencyPenalty(double v) { frequencyPenalty = v; return this; }
        public Builder presencePenalty(double v) { presencePenalty = v; return this; }
        public Builder penaltyLastN(int v) { penaltyLastN = v; return this; }
        public Builder seed(long v) { seed = v; return this; }

        /** Throws {@link CismException} (INVALID_ARG) naming the value out of range. */
        public Sampler build() {
            long h = nativeCreate();
            try {
                nativeSetFloat(h, TEMPERATURE, temperature);
                nativeSetInt(h, TOP_K, topK);
                nativeSetFloat(h, TOP_P, topP);
                nativeSetFloat(h, MIN_P, minP);
                nativeSetFloat(h, REPEAT_PENALTY, repeatPenalty);
                nativeSetFloat(h, FREQUENCY_PENALTY, frequencyPenalty);
                nativeSetFloat(h, PRESENCE_PENALTY, presencePenalty);
                nativeSetInt(h, PENALTY_LAST_N, penaltyLastN);
                nativeSetInt(h, SEED, seed);
                nativeReset(h);
            } catch (RuntimeException e) {
                nativeFree(h);
                throw e;
            }
            return new Sampler(h);
        }
    }

    /** Greedy decoding (always the most likely token). */
    public static Sampler greedy() {
        return new Builder().build();
    }

    private long handle;

    private Sampler(long handle) {
        this.handle = handle;
    }

    synchronized long handle() {
        if (handle == 0) throw new IllegalStateException("Sampler is closed");
        return handle;
    }

    /** Clears the penalty history and reseeds the generator. */
    public synchronized void reset() {
        nativeReset(handle());
    }

    /** Adds a token to the penalty history (generate does this itself). */
    public synchronized void accept(int token) {
        nativeAccept(handle(), token);
    }

    @Override
    public synchronized void close() {
        if (handle != 0) {
            nativeFree(handle);
            handle = 0;
        }
    }

    private static native long nativeCreate();
    private static native void nativeFree(long sampler);
    private static native void nativeSetFloat(long sampler, int key, double value);
    private static native void nativeSetInt(long sampler, int key, long value);
    private static native void nativeReset(long sampler);
    private static native void nativeAccept(long sampler, int token);
}
