package org.libcism;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.BeforeClass;
import org.junit.Test;

/**
 * The Java API and its JNI glue on a desktop JVM (run with -Xcheck:jni), on
 * the real stories260K checkpoint. Properties (set by
 * tests/platforms/run_platform_checks.sh):
 *   cism.fixtures  folder with stories260K.cism and the transformers reference
 *   cism.expected  folder with the Python API's tokens (greedy.txt, sampled.txt)
 */
public class HostJvmTest {
    /** Most tests use one worker thread: CI machines are small and shared. */
    private static final Session.Options ONE_THREAD = new Session.Options().threads(1);

    private static Path fixtures;
    private static Path expected;
    private static String modelPath;

    @BeforeClass
    public static void setUp() {
        fixtures = Paths.get(System.getProperty("cism.fixtures", "missing"));
        expected = Paths.get(System.getProperty("cism.expected", "missing"));
        modelPath = fixtures.resolve("stories260K.cism").toString();
        assertTrue("no model at " + modelPath, Files.exists(Paths.get(modelPath)));
    }

    private static int[] readI32(String name) throws IOException {
        byte[] b = Files.readAllBytes(fixtures.resolve(name));
        int[] out = new int[b.length / 4];
        ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN).asIntBuffer().get(out);
        return out;
    }

    private static int[] readTokens(String name) throws IOException {
        String text = new String(Files.readAllBytes(expected.resolve(name)), StandardCharsets.UTF_8).trim();
        String[] parts = text.split("\\s+");
        int[] out = new int[parts.length];
        for (int i = 0; i < parts.length; i++) out[i] = Integer.parseInt(parts[i]);
        return out;
    }

    private static int[] toArray(List<Integer> list) {
        int[] out = new int[list.size()];
        for (int i = 0; i < out.length; i++) out[i] = list.get(i);
        return out;
    }

    private static int[] slice(int[] a, int from, int to) {
        int[] out = new int[to - from];
        System.arraycopy(a, from, out, 0, out.length);
        return out;
    }

    /** Lines of /proc/self/maps that map the model file. */
    private static int mappingsOfModel() throws IOException {
        int n = 0;
        for (String line : Files.readAllLines(Paths.get("/proc/self/maps"))) if (line.endsWith(modelPath)) n++;
        return n;
    }

    @Test
    public void libraryInfo() {
        assertEquals("0.1.0", Cism.version());
        assertTrue(Cism.systemInfo().contains("kernel tier"));
        int threads = Cism.defaultThreadCount();
        assertTrue(threads >= 1 && threads <= 8);
        assertTrue(Cism.processResidentBytes() > 0);
    }

    @Test
    public void modelInfo() {
        try (Model model = Model.load(modelPath)) {
            assertEquals("llama", model.architecture());
            assertEquals(512, model.vocabSize());
            assertEquals(5, model.layerCount());
            assertEquals(512, model.contextLength());
            assertEquals(259328, model.parameterCount());
            assertTrue(model.isMapped());
            assertTrue(model.eosIds().length >= 1);
            assertTrue(model.isEos(model.eosId()));
        }
    }

    /** python_tokens.py's ACT_TOKENS */
    private static final int[] ACT_TOKENS = {1, 7, 3, 22, 9, 41, 5, 17, 33, 2, 60, 11};

    private static float[] readF32(Path file) throws IOException {
        byte[] b = Files.readAllBytes(file);
        float[] out = new float[b.length / 4];
        ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out);
        return out;
    }

    private static double maxAbsDiff(float[] a, float[] b) {
        assertEquals(a.length, b.length);
        double m = 0;
        for (int i = 0; i < a.length; i++) m = Math.max(m, Math.abs((double) a[i] - b[i]));
        return m;
    }

    /**
     * Options.activations reaches the library: on a q8 model each setting gives
     * the Python API's logits under the same setting, the default is OUTLIERS,
     * and the three settings differ from each other (by far more than the tolerance).
     */
    @Test
    public void activationsMatchPython() throws IOException {
        String[] names = {"default", "outliers", "int8", "float"};
        Session.Activations[] modes = {null, Session.Activations.OUTLIERS, Session.Activations.INT8,
                                       Session.Activations.FLOAT};
        float[][] got = new float[names.length][];
        try (Model model = Model.load(expected.resolve("act_q8.cism").toString())) {
            for (int i = 0; i < names.length; i++) {
                Session.Options o = new Session.Options().threads(1).contextLength(64).activations(modes[i]);
                assertTrue(model.estimateSessionBytes(o) > 0);
                try (Session session = new Session(model, o)) {
                    session.eval(ACT_TOKENS);
                    got[i] = session.logits();
                }
                double d = maxAbsDiff(got[i], readF32(expected.resolve("act_" + names[i] + ".f32")));
                assertTrue(names[i] + ": " + d + " from the Python API's logits", d < 1e-5);
            }
        }
        assertEquals(0.0, maxAbsDiff(got[0], got[1]), 0.0);
        for (int i = 1; i < names.length; i++)
            for (int j = i + 1; j < names.length; j++)
                assertTrue(names[i] + " and " + names[j] + " give the same logits", maxAbsDiff(got[i], got[j]) > 1e-3);
    }

    /** Greedy tokens equal the Python API's and the transformers reference. */
    @Test
    public void greedyMatchesPythonAndTransformers() throws IOException {
        int[] prompt = readI32("stories260K.tokens8.i32");
        int[] reference = readI32("stories260K.greedy8.i32");
        int[] python = readTokens("greedy.txt");
        List<Integer> got = new ArrayList<>();
        try (Model model = Model.load(modelPath);
             Session session = new Session(model, new Session.Options().threads(2));
             Sampler sampler = Sampler.greedy()) {
            GenerationResult r = session.generate(prompt, 32, sampler, true, token -> got.add(token));
            assertEquals(GenerationResult.StopReason.MAX_TOKENS, r.getStopReason());
            assertEquals(32, r.getTokenCount());
            assertEquals(prompt.length + 32, session.position());
        }
        assertArrayEquals("vs transformers", slice(reference, prompt.length, prompt.length + 32), toArray(got));
        assertArrayEquals("vs the Python API", python, toArray(got));
    }

    /** Prompt lookup (CISM_GENERATE_LOOKUP through the same generate call): greedy tokens and
        position as without it, on a generation long enough to repeat itself. */
    @Test
    public void promptLookupKeepsGreedyTokens() {
        int[][] runs = new int[2][];
        int[] positions = new int[2];
        for (int k = 0; k < 2; k++) {
            List<Integer> got = new ArrayList<>();
            try (Model model = Model.load(modelPath);
                 Session session = new Session(model, new Session.Options().threads(2));
                 Sampler sampler = Sampler.greedy()) {
                session.setPromptLookup(k == 1);
                assertEquals(k == 1, session.promptLookup());
                GenerationResult r = session.generate(new int[] {1}, 160, sampler, true, token -> got.add(token));
                assertEquals(GenerationResult.StopReason.MAX_TOKENS, r.getStopReason());
                positions[k] = session.position();
            }
            runs[k] = toArray(got);
        }
        assertArrayEquals("with prompt lookup", runs[0], runs[1]);
        assertEquals(positions[0], positions[1]);
    }

    /** Seeded sampling is reproducible and equals the Python API's. */
    @Test
    public void sampledMatchesPython() throws IOException {
        int[] python = readTokens("sampled.txt");
        for (int run = 0; run < 2; run++) {
            List<Integer> got = new ArrayList<>();
            try (Model model = Model.load(modelPath);
                 Session session = new Session(model, ONE_THREAD);
                 Sampler sampler = new Sampler.Builder().temperature(0.8).topP(0.95).seed(42).build()) {
                session.generate(new int[] {model.bosId()}, 48, sampler, true, got::add);
            }
            assertArrayEquals("run " + run, python, toArray(got));
        }
    }

    @Test
    public void callbackStopsEarlyAndEosEnds() {
        try (Model model = Model.load(modelPath);
             Session session = new Session(model, ONE_THREAD);
             Sampler sampler = Sampler.greedy()) {
            List<Integer> got = new ArrayList<>();
            GenerationResult r = session.generate(new int[] {1}, 100, sampler, token -> got.add(token) && got.size() < 5);
            assertEquals(GenerationResult.StopReason.STOPPED, r.getStopReason());
            assertEquals(5, r.getTokenCount());
            assertEquals(5, got.size());
            // tokens() mirrors the context: the prompt, then every generated token that was evaluated
            int[] expectedContext = {1, got.get(0), got.get(1), got.get(2), got.get(3), got.get(4)};
            assertArrayEquals(expectedContext, session.tokens());
            assertEquals(6, session.position());
            session.rewind(3);
            assertArrayEquals(slice(expectedContext, 0, 3), session.tokens());
            session.eval(7, 8);
            assertArrayEquals(new int[] {1, got.get(0), got.get(1), 7, 8}, session.tokens());
            try {
                session.eval(9, 600);
            } catch (CismException e) {
                assertEquals(5, session.tokens().length); // a failed eval changes nothing
            }
            // continue the same conversation until the model ends its story
            session.reset();
            List<Integer> story = new ArrayList<>();
            r = session.generate(new int[] {1}, 400, sampler, story::add);
            assertEquals(GenerationResult.StopReason.END_OF_TEXT, r.getStopReason());
            assertTrue(model.isEos(story.get(story.size() - 1)));
            // the end-of-text token is reported, not evaluated
            assertEquals(1 + story.size() - 1, session.position());
            assertEquals(session.position(), session.tokens().length);
        }
    }

    @Test
    public void contextFullIsAStopReason() {
        try (Model model = Model.load(modelPath);
             Session session = new Session(model, new Session.Options().contextLength(16).threads(1));
             Sampler sampler = Sampler.greedy()) {
            GenerationResult r = session.generate(new int[] {1}, 100, sampler, true, t -> true);
            assertEquals(GenerationResult.StopReason.CONTEXT_FULL, r.getStopReason());
            assertEquals(16, session.position());
        }
    }

    @Test
    public void cancelFromAnotherThread() throws Exception {
        try (Model model = Model.load(modelPath);
             Session session = new Session(model, ONE_THREAD);
             Sampler sampler = Sampler.greedy()) {
            CountDownLatch started = new CountDownLatch(1);
            CountDownLatch cancelled = new CountDownLatch(1);
            Thread canceller = new Thread(() -> {
                try {
                    started.await();
                } catch (InterruptedException e) {
                    return;
                }
                session.cancel(); // while generate runs on the test thread
                cancelled.countDown();
            });
            canceller.start();
            int[] count = {0};
            GenerationResult r = session.generate(new int[] {1}, 100000, sampler, true, token -> {
                if (++count[0] == 3) {
                    started.countDown();
                    try {
                        assertTrue(cancelled.await(30, TimeUnit.SECONDS)); // the cancel lands mid-generation
                    } catch (InterruptedException e) {
                        return false;
                    }
                }
                return true;
            });
            canceller.join();
            assertEquals(GenerationResult.StopReason.CANCELLED, r.getStopReason());
            assertTrue("cancelled after " + r.getTokenCount(), r.getTokenCount() >= 3 && r.getTokenCount() <= 4);
            // the tokens before the cancel stay in the context, and the session goes on
            int kept = session.position();
            assertTrue(kept >= r.getTokenCount() && kept <= r.getTokenCount() + 1);
            assertEquals(3, session.generate(new int[] {1}, 3, sampler, true, t -> true).getTokenCount());
            assertEquals(kept + 1 + 3, session.position());
        }
    }

    @Test
    public void callbackExceptionPropagates() {
        RuntimeException boom = new IllegalStateException("boom from the callback");
        try (Model model = Model.load(modelPath);
             Session session = new Session(model, ONE_THREAD);
             Sampler sampler = Sampler.greedy()) {
            try {
                session.generate(new int[] {1}, 50, sampler, token -> { throw boom; });
                fail("no exception");
            } catch (IllegalStateException e) {
                assertSame(boom, e);
            }
            assertEquals(2, session.position()); // prompt + the first token; nothing after the throw
            session.generate(new int[0], 2, sampler, t -> true); // still usable
        }
    }

    @Test
    public void errorsCarryStatusAndUtf8Message() {
        String path = fixtures.resolve("no-such-model-\u00e9\u4e2d\uD83D\uDE00.cism").toString(); // é 中 😀
        try {
            Model.load(path);
            fail("loaded a missing file");
        } catch (CismException e) {
            assertEquals(CismException.IO, e.getStatus());
            assertEquals("input/output error", e.getStatusName());
            assertTrue(e.getMessage(), e.getMessage().contains(path)); // the emoji survived the round trip
        }
        try (Model model = Model.load(modelPath);
             Session session = new Session(model)) {
            try {
                session.eval(5, 512);
                fail("token 512 accepted");
            } catch (CismException e) {
                assertEquals(CismException.TOKEN_RANGE, e.getStatus());
                assertTrue(e.getMessage().contains("512"));
            }
            assertEquals(0, session.position());
            try {
                new Session(model, new Session.Options().contextLength(100000)).close();
                fail("context longer than the model accepted");
            } catch (CismException e) {
                assertEquals(CismException.INVALID_ARG, e.getStatus());
            }
            try {
                new Sampler.Builder().topP(2.0).build().close();
                fail("top_p 2 accepted");
            } catch (CismException e) {
                assertEquals(CismException.INVALID_ARG, e.getStatus());
            }
        }
    }

    @Test
    public void closeOrderAndReuse() throws IOException {
        Model model = Model.load(modelPath);
        Session session = new Session(model, ONE_THREAD);
        Sampler sampler = Sampler.greedy();
        assertTrue(mappingsOfModel() > 0);
        model.close();
        model.close(); // idempotent
        assertTrue(model.isClosed());
        // the session keeps the native model (and its mapping) alive
        assertEquals(4, session.generate(new int[] {1}, 4, sampler, true, t -> true).getTokenCount());
        assertTrue(mappingsOfModel() > 0);
        session.close();
        session.close();
        sampler.close();
        assertEquals("the model file is still mapped", 0, mappingsOfModel());
        try {
            session.eval(1);
            fail("closed session used");
        } catch (IllegalStateException expectedException) {
            // expected
        }
        try {
            new Session(model);
            fail("closed model used");
        } catch (IllegalStateException expectedException) {
            // expected
        }
    }

    @Test
    public void closeFromInsideTheCallbackIsDeferred() {
        try (Model model = Model.load(modelPath);
             Sampler sampler = Sampler.greedy()) {
            Session session = new Session(model, ONE_THREAD);
            GenerationResult r = session.generate(new int[] {1}, 50, sampler, true, token -> {
                session.close(); // cancels; freed once generate returns
                return true;
            });
            assertEquals(GenerationResult.StopReason.CANCELLED, r.getStopReason());
            try {
                session.position();
                fail("session not closed");
            } catch (IllegalStateException expectedException) {
                // expected
            }
        }
    }

    @Test
    public void closeFromAnotherThreadWaitsForGeneration() throws Exception {
        try (Model model = Model.load(modelPath);
             Sampler sampler = Sampler.greedy()) {
            Session session = new Session(model, ONE_THREAD);
            CountDownLatch started = new CountDownLatch(1);
            AtomicReference<GenerationResult> result = new AtomicReference<>();
            Thread worker = new Thread(() -> result.set(session.generate(new int[] {1}, 100000, sampler, true, t -> {
                started.countDown();
                return true;
            })));
            worker.start();
            assertTrue(started.await(10, TimeUnit.SECONDS));
            session.close(); // cancels, then frees after the worker is out of native code
            worker.join();
            assertNotNull(result.get());
            assertTrue(result.get().getStopReason() == GenerationResult.StopReason.CANCELLED
                       || result.get().getStopReason() == GenerationResult.StopReason.CONTEXT_FULL);
        }
    }

    /** One model, sessions on several threads at once: the same greedy tokens. */
    @Test
    public void sessionsOnThreadsShareOneModel() throws Exception {
        try (Model model = Model.load(modelPath)) {
            int[][] outputs = new int[3][];
            Thread[] threads = new Thread[3];
            for (int i = 0; i < 3; i++) {
                final int k = i;
                threads[i] = new Thread(() -> {
                    List<Integer> got = new ArrayList<>();
                    try (Session s = new Session(model, new Session.Options().threads(1));
                         Sampler sampler = Sampler.greedy()) {
                        s.generate(new int[] {1}, 24, sampler, true, got::add);
                    }
                    outputs[k] = toArray(got);
                });
                threads[i].start();
            }
            for (Thread t : threads) t.join();
            assertEquals(24, outputs[0].length);
            assertArrayEquals(outputs[0], outputs[1]);
            assertArrayEquals(outputs[0], outputs[2]);
        }
    }

    @Test
    public void memoryApi() {
        try (Model model = Model.load(modelPath)) {
            assertTrue(model.isMapped());
            model.prefetch(false);
            model.prefetch(true);
            assertEquals(model.fileBytes(), model.residentBytes());
            try {
                model.lock();
                model.unlock();
            } catch (CismException e) {
                assertEquals(CismException.PERMISSION, e.getStatus()); // allowed: best effort
            }
            Session.Options options = new Session.Options().contextLength(256).threads(2);
            long estimate = model.estimateSessionBytes(options);
            try (Session session = new Session(model, options);
                 Sampler sampler = Sampler.greedy()) {
                assertEquals(estimate, session.memoryBytes());
                session.generate(new int[] {1}, 8, sampler, true, t -> true);
                session.trim();
                assertTrue(session.memoryBytes() < estimate);
                assertEquals(9, session.position());
                session.generate(new int[0], 8, sampler, true, t -> true); // scratch comes back
                assertEquals(17, session.position());
            }
        }
        try (Model model = Model.load(modelPath, new Model.Options().useMmap(false))) {
            assertFalse(model.isMapped());
        }
    }

    /** A saved conversation restored into a new session and sampler continues identically (cism_session_save / _load). */
    @Test
    public void savedSessionResumesIdentically() throws IOException {
        Path dir = Files.createTempDirectory("cism-state");
        String path = dir.resolve("conv.state").toString();
        int[] prompt = {1, 403, 407, 100, 29, 7};
        try (Model model = Model.load(modelPath)) {
            Session.Options options = new Session.Options().contextLength(128).threads(2);
            List<Integer> ref = new ArrayList<>(), got = new ArrayList<>();
            try (Session a = new Session(model, options);
                 Sampler sa = new Sampler.Builder().temperature(0.9).topK(40).repeatPenalty(1.2).seed(5).build()) {
                a.generate(prompt, 4, sa, true, t -> true);
                a.save(path, sa);
                a.generate(new int[0], 16, sa, true, t -> ref.add(t));
            }
            try (Session b = new Session(model, options); Sampler sb = Sampler.greedy()) {
                b.load(path, sb);
                assertEquals(10, b.position());
                assertArrayEquals(prompt, slice(b.tokens(), 0, prompt.length));
                b.generate(new int[0], 16, sb, true, t -> got.add(t));
            }
            assertEquals(ref, got);
            try (Session small = new Session(model, new Session.Options().contextLength(8))) {
                small.load(path, null);
                fail("a state of 10 positions loaded into a context of 8");
            } catch (CismException e) {
                assertEquals(CismException.CONTEXT_FULL, e.getStatus());
            }
            Files.write(Paths.get(path), Arrays.copyOf(Files.readAllBytes(Paths.get(path)), 100));
            try (Session c = new Session(model, options)) {
                c.load(path, null);
                fail("a truncated state loaded");
            } catch (CismException e) {
                assertEquals(CismException.FORMAT, e.getStatus());
            }
        } finally {
            Files.deleteIfExists(Paths.get(path));
            Files.deleteIfExists(dir);
        }
    }

    /** Text in and out crosses JNI as UTF-8: emoji and other non-BMP characters survive. */
    @Test
    public void tokenizeMatchesHuggingFaceAndRoundTrips() throws IOException {
        String text = new String(Files.readAllBytes(expected.resolve("text.txt")), StandardCharsets.UTF_8);
        assertTrue(text.contains("\uD83D\uDE00")); // 😀, four bytes of UTF-8
        try (Model model = Model.load(fixtures.resolve("stories260K-hf.cism").toString())) {
            assertTrue(model.hasTokenizer());
            int[] ids = model.tokenize(text);
            assertArrayEquals("vs Hugging Face tokenizers", readTokens("text_ids.txt"), ids);
            assertEquals(text, model.detokenize(ids, true));
            assertEquals("<s>", model.tokenPiece(model.bosId()));
            int[] noBos = model.tokenize(text, false, true);
            assertArrayEquals(Arrays.copyOfRange(ids, 1, ids.length), noBos);
        }
    }

    @Test
    public void streamedTextJoinsToTheDecodedTokens() {
        try (Model model = Model.load(modelPath);
             Session session = new Session(model, ONE_THREAD);
             Sampler sampler = new Sampler.Builder().temperature(1.0).seed(3).build()) {
            int[] prompt = model.tokenize("Once upon a time, a girl");
            StringBuilder streamed = new StringBuilder();
            List<String> pieces = new ArrayList<>();
            GenerationResult r = session.generateText(prompt, 200, sampler, text -> {
                assertFalse(text.isEmpty());
                pieces.add(text);
                streamed.append(text);
                return true;
            });
            assertTrue(r.getTokenCount() > 10);
            int[] context = session.tokens();
            int[] generated = Arrays.copyOfRange(context, prompt.length, context.length);
            String decoded = model.detokenize(generated, true);
            // the end-of-text token, if any, was reported but not evaluated, and is special: no text
            assertEquals(decoded, streamed.toString());
            assertTrue(pieces.size() > 1);
            // a callback returning false stops text generation too
            session.reset();
            GenerationResult stopped = session.generateText(prompt, 200, sampler, text -> false);
            assertEquals(GenerationResult.StopReason.STOPPED, stopped.getStopReason());
        }
    }

    @Test
    public void chatFormats() {
        try (Model model = Model.load(modelPath)) {
            assertEquals(null, model.chatFormat()); // a story model names none
            List<ChatMessage> chat = Arrays.asList(ChatMessage.user("Hi \uD83D\uDE00"));
            try {
                model.formatChat(chat, true);
                fail("formatted without a format");
            } catch (CismException e) {
                assertEquals(CismException.UNSUPPORTED, e.getStatus());
            }
            String text = model.formatChat(ChatFormat.CHATML, chat, true);
            assertTrue(text, text.contains("<|im_start|>user\nHi \uD83D\uDE00<|im_end|>\n"));
            assertTrue(text, text.endsWith("<|im_start|>assistant\n"));
        }
    }

    /** Everything native is freed by close(): heap blocks and the file mapping. */
    @Test
    public void closeFreesNativeMemory() throws IOException {
        // warm up: this thread's error buffer is allocated once and kept until the thread exits
        try {
            Model.load("/nonexistent.cism");
        } catch (CismException expectedException) {
            // expected
        }
        long baseline = HostTestHooks.liveAllocations();
        for (int i = 0; i < 5; i++) {
            try (Model model = Model.load(modelPath);
                 Session session = new Session(model, new Session.Options().threads(2));
                 Sampler sampler = new Sampler.Builder().temperature(0.7).seed(i).build()) {
                session.generate(new int[] {1}, 6, sampler, true, t -> true);
                session.generateText(model.tokenize("Once"), 6, sampler, true, t -> true);
                model.formatChat(ChatFormat.CHATML, Arrays.asList(ChatMessage.user("hi")), true);
                session.trim();
                session.generate(new int[0], 4, sampler, true, t -> true);
                assertTrue(HostTestHooks.liveAllocations() > baseline);
            }
            assertEquals("live native heap blocks after round " + i, baseline, HostTestHooks.liveAllocations());
        }
        assertEquals(0, mappingsOfModel());
    }
}
