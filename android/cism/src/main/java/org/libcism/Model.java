package org.libcism;

import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * A loaded .cism model: immutable, safe to share between threads and
 * sessions. The weights are used in place from a read-only file mapping, so
 * they cost no Java or native heap. Close it when done; sessions created from
 * it keep the native model alive until they are closed too.
 *
 * <pre>{@code
 * try (Model model = Model.load(path);
 *      Session session = new Session(model)) { ... }
 * }</pre>
 */
public final class Model implements AutoCloseable {
    static {
        Cism.ensureLoaded();
    }

    /** Load options (read once by {@link #load(String, Options)}). */
    public static final class Options {
        boolean useMmap = true;
        boolean checkWeights = false;

        /** false reads the whole file into memory instead of mapping it (default true). */
        public Options useMmap(boolean value) {
            useMmap = value;
            return this;
        }

        /** true scans every weight for NaN/Inf while loading (default false). */
        public Options checkWeights(boolean value) {
            checkWeights = value;
            return this;
        }
    }

    // Info keys of cism.h (pinned).
    private static final int INFO_VOCAB_SIZE = 0;
    private static final int INFO_DIM = 1;
    private static final int INFO_N_LAYERS = 2;
    private static final int INFO_CONTEXT_LEN = 7;
    private static final int INFO_BOS_ID = 8;
    private static final int INFO_EOS_ID = 9;
    private static final int INFO_N_PARAMS = 12;
    private static final int INFO_FILE_BYTES = 14;

    private long handle;
    private final int[] eosIds;

    private Model(long handle) {
        this.handle = handle;
        this.eosIds = nativeEosIds(handle);
    }

    /** Loads and validates a .cism file; throws {@link CismException} with the reason when it cannot. */
    public static Model load(String path) {
        return load(path, new Options());
    }

    public static Model load(String path, Options options) {
        if (path == null) throw new NullPointerException("path");
        // Bytes, not a jstring: JNI's "modified UTF-8" would mangle emoji and other non-BMP characters.
        long h = nativeLoad(path.getBytes(StandardCharsets.UTF_8), options.useMmap, options.checkWeights);
        return new Model(h);
    }

    synchronized long handle() {
        if (handle == 0) throw new IllegalStateException("Model is closed");
        return handle;
    }

    public synchronized boolean isClosed() {
        return handle == 0;
    }

    public String architecture() {
        return Cism.utf8(nativeArchitecture(handle()));
    }

    public int vocabSize() { return (int) info(INFO_VOCAB_SIZE); }
    public int embeddingSize() { return (int) info(INFO_DIM); }
    public int layerCount() { return (int) info(INFO_N_LAYERS); }
    /** Positions the model was trained for (a session's context may be shorter). */
    public int contextLength() { return (int) info(INFO_CONTEXT_LEN); }
    /** -1 when the model has none. */
    public int bosId() { return (int) info(INFO_BOS_ID); }
    /** The first end-of-generation id, -1 when the model has none. */
    public int eosId() { return (int) info(INFO_EOS_ID); }
    public long parameterCount() { return info(INFO_N_PARAMS); }
    public long fileBytes() { return info(INFO_FILE_BYTES); }

    /** Every end-of-generation token id. */
    public int[] eosIds() {
        return eosIds.clone();
    }

    public boolean isEos(int token) {
        for (int id : eosIds) if (id == token) return true;
        return false;
    }

    private synchronized long info(int key) {
        return nativeInfo(handle(), key);
    }

    // ---- text ----------------------------------------------------------------

    private static final int TOKENIZE_ADD_SPECIAL = 1, TOKENIZE_PARSE_SPECIAL = 2, DETOKENIZE_SKIP_SPECIAL = 1;

    /** true when the file carries a tokenizer (text in and out works). */
    public synchronized boolean hasTokenizer() {
        return nativeHasTokenizer(handle());
    }

    /** Text to token ids as Hugging Face's {@code tokenizer.encode(text)}: BOS etc. added, special tokens parsed. */
    public int[] tokenize(String text) {
        return tokenize(text, true, true);
    }

    /**
     * @param addSpecial   add what the tokenizer adds around a text (e.g. BOS)
     * @param parseSpecial special tokens written in the text become their ids
     *                     (true for text from {@link #formatChat}; false for raw user text)
     */
    public synchronized int[] tokenize(String text, boolean addSpecial, boolean parseSpecial) {
        if (text == null) throw new NullPointerException("text");
        int flags = (addSpecial ? TOKENIZE_ADD_SPECIAL : 0) | (parseSpecial ? TOKENIZE_PARSE_SPECIAL : 0);
        return nativeTokenize(handle(), text.getBytes(StandardCharsets.UTF_8), flags);
    }

    /** Token ids to text, as Hugging Face's decode. */
    public synchronized String detokenize(int[] tokens, boolean skipSpecial) {
        return Cism.utf8(nativeDetokenize(handle(), tokens, skipSpecial ? DETOKENIZE_SKIP_SPECIAL : 0));
    }

    /** The vocabulary string of a token as stored ("Ġthe", "<|im_end|>", ...). */
    public synchronized String tokenPiece(int token) {
        return Cism.utf8(nativeTokenPiece(handle(), token));
    }

    /** The chat format the model file names, or null. */
    public synchronized ChatFormat chatFormat() {
        return ChatFormat.of(nativeChatFormat(handle()));
    }

    /** The conversation in the model's own chat format (tokenize it with parseSpecial, without addSpecial). */
    public String formatChat(List<ChatMessage> messages, boolean addGenerationPrompt) {
        return formatChat(ChatFormat.MODEL, messages, addGenerationPrompt);
    }

    public synchronized String formatChat(ChatFormat format, List<ChatMessage> messages, boolean addGenerationPrompt) {
        byte[][] roles = new byte[messages.size()][];
        byte[][] contents = new byte[messages.size()][];
        for (int i = 0; i < roles.length; i++) {
            roles[i] = messages.get(i).getRole().getBytes(StandardCharsets.UTF_8);
            contents[i] = messages.get(i).getContent().getBytes(StandardCharsets.UTF_8);
        }
        return Cism.utf8(nativeChatApply(handle(), format.value, roles, contents, addGenerationPrompt));
    }

    // ---- memory ------------------------------------------------------------

    /** true when the weights are used from a file mapping (no copy). */
    public synchronized boolean isMapped() {
        return nativeIsMapped(handle());
    }

    /**
     * Asks the OS to read the weights in ahead of use. With wait, returns once
     * every page is resident (a cold file takes as long as reading it).
     */
    public synchronized void prefetch(boolean wait) {
        nativePrefetch(handle(), wait);
    }

    /**
     * Pins the weights in RAM. Best effort: phones usually refuse (a
     * {@link CismException} with status {@link CismException#PERMISSION}
     * naming the limit), and then nothing is locked.
     */
    public synchronized void lock() {
        nativeLock(handle(), true);
    }

    public synchronized void unlock() {
        nativeLock(handle(), false);
    }

    /** Bytes of the weights resident in RAM now (whole pages). */
    public synchronized long residentBytes() {
        return nativeResidentBytes(handle());
    }

    /** Native memory a session with these options would allocate (KV cache, scratch, logits). */
    public synchronized long estimateSessionBytes(Session.Options options) {
        return nativeEstimateSessionBytes(handle(), options.threads, options.contextLength, options.kvF32, options.batchSize,
                options.activationsCode());
    }

    /** Releases this reference; the native model lives on while sessions use it. Idempotent. */
    @Override
    public synchronized void close() {
        if (handle != 0) {
            nativeFree(handle);
            handle = 0;
        }
    }

    private static native long nativeLoad(byte[] pathUtf8, boolean useMmap, boolean checkWeights);
    private static native void nativeFree(long model);
    private static native long nativeInfo(long model, int key);
    private static native byte[] nativeArchitecture(long model);
    private static native int[] nativeEosIds(long model);
    private static native boolean nativeIsMapped(long model);
    private static native void nativePrefetch(long model, boolean wait);
    private static native void nativeLock(long model, boolean lock);
    private static native long nativeResidentBytes(long model);
    private static native boolean nativeHasTokenizer(long model);
    private static native int[] nativeTokenize(long model, byte[] textUtf8, int flags);
    private static native byte[] nativeDetokenize(long model, int[] tokens, int flags);
    private static native byte[] nativeTokenPiece(long model, int token);
    private static native int nativeChatFormat(long model);
    private static native byte[] nativeChatApply(long model, int format, byte[][] roles, byte[][] contents,
                                                 boolean addGenerationPrompt);
    private static native long nativeEstimateSessionBytes(long model, int threads, int contextLength, boolean kvF32, int batchSize,
                                                          int activations);
}
