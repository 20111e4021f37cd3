package org.libcism;

import java.nio.charset.StandardCharsets;

/**
 * One conversation with a model: its KV cache, scratch memory and logits.
 * Calls are serialized (one at a time); {@link #cancel()} may be called from
 * any thread, and {@link #close()} from any thread too: it cancels a running
 * generation and frees the native memory once that has stopped.
 *
 * <pre>{@code
 * try (Session session = new Session(model, new Session.Options().contextLength(2048));
 *      Sampler sampler = Sampler.greedy()) {
 *     GenerationResult r = session.generate(prompt, 128, sampler, token -> { show(token); return true; });
 * }
 * }</pre>
 */
public final class Session implements AutoCloseable {
    static {
        Cism.ensureLoaded();
    }

    /**
     * How the inputs of packed (quantized) weight matrices are computed. Float
     * weight files (f32, f16, bf16) take float activations whatever the setting.
     */
    public enum Activations {
        /**
         * int8, with up to 10 outlier channels of each input row computed
         * exactly: less than half of plain int8's divergence from the float
         * model on a real model, for a prefill 2-15% slower (the library's default).
         */
        OUTLIERS,
        /** Plain int8: the fastest, and the most divergence from the float model. */
        INT8,
        /** Float: the least divergence, many times slower on packed weights. */
        FLOAT
    }

    /** Session options; 0 (and null) means "the library's default" everywhere. */
    public static final class Options {
        int threads = 0;
        int contextLength = 0;
        int batchSize = 0;
        boolean kvF32 = false;
        Activations activations = null;

        /** Worker threads (default {@link Cism#defaultThreadCount()}: the big cores on a phone). */
        public Options threads(int value) {
            threads = value;
            return this;
        }

        /** Context length in tokens (default min(model, 4096)); the KV cache grows with it. */
        public Options contextLength(int value) {
            contextLength = value;
            return this;
        }

        /** Tokens evaluated per step of a prompt (default 256). */
        public Options batchSize(int value) {
            batchSize = value;
            return this;
        }

        /** Keeps the KV cache in float32 instead of float16 (twice the memory). */
        public Options kvCacheF32(boolean value) {
            kvF32 = value;
            return this;
        }

        /** The activations of packed weights (null, the default: the library's, {@link Activations#OUTLIERS}). */
        public Options activations(Activations value) {
            activations = value;
            return this;
        }

        /** The native code of the activations: 0 the library's default, else the enum's ordinal + 1. */
        int activationsCode() {
            return activations == null ? 0 : activations.ordinal() + 1;
        }
    }

    private static final int GENERATE_IGNORE_EOS = 1;
    private static final int GENERATE_LOOKUP = 2;

    private final Model model;
    private final Object cancelLock = new Object();
    private long handle;            // guarded by this; read under cancelLock by cancel()
    private boolean generating;     // guarded by this
    private boolean promptLookup;   // guarded by this
    private boolean closeRequested; // guarded by this
    private int[] history = new int[256]; // the tokens in the context; guarded by this
    private int historyLength;
    private long detokenizer;       // streaming detokenizer for generateText, 0 without a tokenizer; guarded by this

    public Session(Model model) {
        this(model, new Options());
    }

    public Session(Model model, Options options) {
        this.model = model;
        long m = model.handle();
        this.handle = nativeCreate(m, options.threads, options.contextLength, options.kvF32, options.batchSize,
                options.activationsCode());
        try {
            if (model.hasTokenizer()) detokenizer = nativeDetokenizerCreate(m, DETOKENIZE_SKIP_SPECIAL);
        } catch (RuntimeException e) {
            nativeFree(handle);
            throw e;
        }
    }

    private static final int DETOKENIZE_SKIP_SPECIAL = 1;

    private long handle() {
        if (handle == 0) throw new IllegalStateException("Session is closed");
        return handle;
    }

    public Model getModel() {
        return model;
    }

    /** Evaluates tokens after the ones already in the context (on error nothing changes). */
    public synchronized void eval(int... tokens) {
        if (tokens == null) throw new NullPointerException("tokens");
        long h = handle();
        try {
            nativeEval(h, tokens);
        } finally {
            record(h, tokens, tokens.length, null, 0);
        }
    }

    /**
     * The tokens in the context, oldest first (what {@link #rewind} keeps a
     * prefix of). A chat app compares them with its next prompt and rewinds
     * to the common prefix, so earlier turns are not evaluated again.
     */
    public synchronized int[] tokens() {
        handle();
        int[] out = new int[historyLength];
        System.arraycopy(history, 0, out, 0, historyLength);
        return out;
    }

    /** Appends what an eval or generate fed, then trims to what the context really holds. */
    private void record(long h, int[] fed, int nFed, int[] generated, int nGenerated) {
        int need = historyLength + nFed + nGenerated;
        if (need > history.length) {
            int[] bigger = new int[Math.max(need, history.length * 2)];
            System.arraycopy(history, 0, bigger, 0, historyLength);
            history = bigger;
        }
        System.arraycopy(fed, 0, history, historyLength, nFed);
        if (nGenerated > 0) System.arraycopy(generated, 0, history, historyLength + nFed, nGenerated);
        historyLength = Math.min(need, nativePosition(h));
    }

    /** A copy of the logits of the last evaluated position. */
    public synchronized float[] logits() {
        return nativeLogits(handle());
    }

    /** Tokens in the context (the KV cache). */
    public synchronized int position() {
        return nativePosition(handle());
    }

    public synchronized int contextLength() {
        return nativeContextLength(handle());
    }

    /** Forgets every evaluated token. */
    public synchronized void reset() {
        nativeReset(handle());
        historyLength = 0;
    }

    /** Keeps the first nKeep evaluated tokens and forgets the rest. */
    public synchronized void rewind(int nKeep) {
        nativeRewind(handle(), nKeep);
        historyLength = nKeep;
    }

    /**
     * Saves the conversation to path (cism_session_save, docs/SESSION_STATE.md):
     * the KV cache rows in use, the position and tokens, the last logits and,
     * when sampler is not null, the sampler's parameters, random generator and
     * penalty history. Written to a temporary file in the same folder, flushed
     * and renamed over path: on failure (CismException) the file at path is
     * untouched. Call it when the app goes to the background.
     */
    public synchronized void save(String path, Sampler sampler) {
        if (path == null) throw new NullPointerException("path");
        nativeSave(handle(), sampler == null ? 0 : sampler.handle(), path.getBytes(StandardCharsets.UTF_8));
    }

    /**
     * Restores a state written by {@link #save} (into sampler too when not
     * null) into this session, which then continues bit for bit as the saved
     * one would have; {@link #tokens} returns the restored context. A state
     * from another model, of another layout version or KV type, with more
     * positions than this context, or a truncated or corrupted file is refused
     * with a CismException and this session (and sampler) unchanged.
     */
    public synchronized void load(String path, Sampler sampler) {
        if (path == null) throw new NullPointerException("path");
        long h = handle();
        nativeLoad(h, sampler == null ? 0 : sampler.handle(), path.getBytes(StandardCharsets.UTF_8));
        int[] restored = nativeTokens(h);
        if (restored.length > history.length) history = new int[restored.length];
        System.arraycopy(restored, 0, history, 0, restored.length);
        historyLength = restored.length;
    }

    /**
     * Speculative decoding by prompt lookup in this session's generate and
     * generateText calls (CISM_GENERATE_LOOKUP): the same tokens when greedy,
     * the same distribution when sampling, several tokens per step where the
     * reply repeats its input (rewrites, quotes, code edits). Off by default.
     */
    public synchronized void setPromptLookup(boolean on) {
        promptLookup = on;
    }

    public synchronized boolean promptLookup() {
        return promptLookup;
    }

    private int flags(boolean ignoreEos) {
        return (ignoreEos ? GENERATE_IGNORE_EOS : 0) | (promptLookup ? GENERATE_LOOKUP : 0);
    }

    public GenerationResult generate(int[] prompt, int maxTokens, Sampler sampler, TokenCallback callback) {
        return generate(prompt, maxTokens, sampler, false, callback);
    }

    /**
     * Evaluates prompt (may be empty to continue), then samples up to
     * maxTokens tokens, each passed to callback on this thread as soon as it
     * is chosen. Blocks: call it from a background thread. Errors throw
     * {@link CismException}; an exception thrown by the callback stops
     * generation and is rethrown here.
     */
    public GenerationResult generate(int[] prompt, int maxTokens, Sampler sampler, boolean ignoreEos,
                                     TokenCallback callback) {
        if (prompt == null) prompt = new int[0];
        if (sampler == null) throw new NullPointerException("sampler");
        if (callback == null) throw new NullPointerException("callback");
        int[] out = new int[4];
        synchronized (this) {
            long h = handle();
            TokenRecorder recorder = new TokenRecorder(callback);
            generating = true;
            try {
                synchronized (sampler) {
                    nativeGenerate(h, sampler.handle(), prompt, maxTokens, flags(ignoreEos), recorder, out);
                }
            } finally {
                generating = false;
                record(h, prompt, prompt.length, recorder.tokens, recorder.count);
                if (closeRequested) free();
            }
        }
        return result(out, maxTokens, ignoreEos);
    }

    private GenerationResult result(int[] out, int maxTokens, boolean ignoreEos) {
        int status = out[0], count = out[1], last = out[3];
        boolean stoppedByCallback = out[2] != 0;
        GenerationResult.StopReason reason;
        if (status == CismException.CANCELLED) reason = GenerationResult.StopReason.CANCELLED;
        else if (status == CismException.CONTEXT_FULL) reason = GenerationResult.StopReason.CONTEXT_FULL;
        else if (count > 0 && !ignoreEos && model.isEos(last)) reason = GenerationResult.StopReason.END_OF_TEXT;
        else if (stoppedByCallback) reason = GenerationResult.StopReason.STOPPED;
        else reason = GenerationResult.StopReason.MAX_TOKENS;
        return new GenerationResult(reason, count);
    }

    public GenerationResult generateText(int[] prompt, int maxTokens, Sampler sampler, TextCallback callback) {
        return generateText(prompt, maxTokens, sampler, false, callback);
    }

    /**
     * Like {@link #generate}, but streams text: the tokens pass through the
     * library's streaming detokenizer (special tokens left out), so each
     * piece is complete UTF-8 and the pieces join to the decoded reply.
     */
    public GenerationResult generateText(int[] prompt, int maxTokens, Sampler sampler, boolean ignoreEos,
                                         final TextCallback callback) {
        if (prompt == null) prompt = new int[0];
        if (sampler == null) throw new NullPointerException("sampler");
        if (callback == null) throw new NullPointerException("callback");
        int[] out = new int[4];
        synchronized (this) {
            long h = handle();
            if (detokenizer == 0) throw new IllegalStateException("the model has no tokenizer");
            final TokenRecorder recorder = new TokenRecorder(token -> true);
            TextSink sink = (token, utf8) -> {
                if (token >= 0) recorder.onToken(token);
                return utf8 == null || callback.onText(new String(utf8, StandardCharsets.UTF_8));
            };
            generating = true;
            try {
                synchronized (sampler) {
                    nativeGenerateText(h, sampler.handle(), detokenizer, prompt, maxTokens, flags(ignoreEos), sink,
                                       out);
                }
            } finally {
                generating = false;
                record(h, prompt, prompt.length, recorder.tokens, recorder.count);
                if (closeRequested) free();
            }
        }
        return result(out, maxTokens, ignoreEos);
    }

    /** Passes tokens on and keeps them for {@link #tokens()}. */
    private static final class TokenRecorder implements TokenCallback {
        final TokenCallback callback;
        int[] tokens = new int[64];
        int count;

        TokenRecorder(TokenCallback callback) {
            this.callback = callback;
        }

        @Override
        public boolean onToken(int token) {
            if (count == tokens.length) {
                int[] bigger = new int[count * 2];
                System.arraycopy(tokens, 0, bigger, 0, count);
                tokens = bigger;
            }
            tokens[count++] = token;
            return callback.onToken(token);
        }
    }

    /** Stops a running {@link #generate} or {@link #eval} soon. Any thread; no-op when idle or closed. */
    public void cancel() {
        synchronized (cancelLock) {
            if (handle != 0) nativeCancel(handle);
        }
    }

    // ---- memory ------------------------------------------------------------

    /** Native bytes this session holds (KV cache, scratch, logits). */
    public synchronized long memoryBytes() {
        return nativeMemoryBytes(handle());
    }

    /**
     * Frees what the session can rebuild (scratch, worker threads); the
     * conversation is kept. Call it from onTrimMemory.
     */
    public synchronized void trim() {
        nativeTrim(handle());
    }

    /**
     * Frees the native session. Safe from any thread and more than once: a
     * running generation is cancelled first; called from inside a callback,
     * the session is freed when generate returns.
     */
    @Override
    public void close() {
        cancel();
        synchronized (this) {
            if (generating) {
                closeRequested = true;
                return;
            }
            free();
        }
    }

    private void free() { // holds this
        long h;
        synchronized (cancelLock) {
            h = handle;
            handle = 0;
        }
        if (h != 0) nativeFree(h);
        if (detokenizer != 0) {
            nativeDetokenizerFree(detokenizer);
            detokenizer = 0;
        }
    }

    private static native long nativeCreate(long model, int threads, int contextLength, boolean kvF32, int batchSize,
                                            int activations);
    private static native void nativeFree(long session);
    private static native void nativeEval(long session, int[] tokens);
    private static native float[] nativeLogits(long session);
    private static native int nativePosition(long session);
    private static native int nativeContextLength(long session);
    private static native void nativeReset(long session);
    private static native void nativeRewind(long session, int nKeep);
    private static native void nativeCancel(long session);
    private static native long nativeMemoryBytes(long session);
    private static native void nativeTrim(long session);
    private static native void nativeSave(long session, long sampler, byte[] pathUtf8);
    private static native void nativeLoad(long session, long sampler, byte[] pathUtf8);
    private static native int[] nativeTokens(long session);
    /**
     * out[0] = status (0, CANCELLED or CONTEXT_FULL; other errors throw), out[1] = tokens generated,
     * out[2] = 1 when the callback asked to stop, out[3] = the last token.
     */
    private static native long nativeDetokenizerCreate(long model, int flags);
    private static native void nativeDetokenizerFree(long detokenizer);
    private static native void nativeGenerateText(long session, long sampler, long detokenizer, int[] prompt,
                                                  int maxTokens, int flags, TextSink sink, int[] out);
    private static native void nativeGenerate(long session, long sampler, int[] prompt, int maxTokens, int flags,
                                              TokenCallback callback, int[] out);
}
