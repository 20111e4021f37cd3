import CCism
import Foundation

/// One conversation with a model: KV cache, scratch memory and logits.
///
/// Native work (evaluation, generation) blocks for as long as it takes, so it
/// runs on the session's own serial dispatch queue, never on Swift's
/// cooperative thread pool; the queue also orders the calls. Generation is an
/// `AsyncThrowingStream`: cancelling the consuming `Task` (or dropping the
/// stream) calls `cism_session_cancel`, which stops the native loop within a
/// token.
///
/// ```swift
/// let session = try Session(model: model)
/// for try await token in session.generate(prompt: prompt, maxTokens: 128, sampler: sampler) {
///     print(token)
/// }
/// ```
public actor Session {
    /// How the inputs of packed (quantized) weight matrices are computed. Float
    /// weight files (f32, f16, bf16) take float activations whatever the setting.
    public enum Activations: Sendable {
        /// int8, with up to 10 outlier channels of each input row computed
        /// exactly: less than half of plain int8's divergence from the float
        /// model on a real model, for a prefill 2-15% slower (the library's default).
        case outliers
        /// Plain int8: the fastest, and the most divergence from the float model.
        case int8
        /// Float: the least divergence, many times slower on packed weights.
        case float
    }

    public struct Configuration: Sendable {
        /// Worker threads; 0 = `Cism.defaultThreadCount` (the performance cores).
        public var threads: Int
        /// Context length in tokens; 0 = min(model, 4096). The KV cache grows with it.
        public var contextLength: Int
        /// Tokens evaluated per step of a prompt; 0 = 256.
        public var batchSize: Int
        /// float32 KV cache instead of float16 (twice the memory).
        public var kvCacheF32: Bool
        /// Speculative decoding by prompt lookup in `generate` / `generateText`
        /// (CISM_GENERATE_LOOKUP): the same tokens when greedy, the same
        /// distribution when sampling, several tokens per step where the reply
        /// repeats its input (rewrites, quotes, code edits).
        public var promptLookup: Bool
        /// The activations of packed weights; nil = the library's default (`.outliers`).
        public var activations: Activations?

        public init(threads: Int = 0, contextLength: Int = 0, batchSize: Int = 0, kvCacheF32: Bool = false,
                    promptLookup: Bool = false, activations: Activations? = nil) {
            self.threads = threads
            self.contextLength = contextLength
            self.batchSize = batchSize
            self.kvCacheF32 = kvCacheF32
            self.promptLookup = promptLookup
            self.activations = activations
        }

        /// A cism_params with the session keys set; the caller frees it.
        func makeParams() throws -> OpaquePointer? {
            var params: OpaquePointer?
            try check(cism_params_create(&params))
            do {
                if threads != 0 { try check(cism_params_set_int(params, cism_param(CISM_PARAM_N_THREADS), Int64(threads))) }
                if contextLength != 0 { try check(cism_params_set_int(params, cism_param(CISM_PARAM_N_CTX), Int64(contextLength))) }
                if batchSize != 0 { try check(cism_params_set_int(params, cism_param(CISM_PARAM_N_BATCH), Int64(batchSize))) }
                let kv = kvCacheF32 ? Int64(CISM_DTYPE_F32) : Int64(CISM_DTYPE_F16)
                try check(cism_params_set_int(params, cism_param(CISM_PARAM_KV_TYPE), kv))
                if let activations {
                    try check(cism_params_set_int(params, cism_param(CISM_PARAM_ACT_QUANT), activations == .float ? 0 : 1))
                    if activations != .float {
                        try check(cism_params_set_int(params, cism_param(CISM_PARAM_ACT_OUTLIERS),
                                                      activations == .outliers ? 1 : 0))
                    }
                }
            } catch {
                cism_params_free(params)
                throw error
            }
            return params
        }
    }

    /// The model this session reads; kept alive by the session.
    public nonisolated let model: Model
    private nonisolated let native: NativeSession
    private nonisolated let queue: DispatchQueue

    public init(model: Model, configuration: Configuration = .init()) throws {
        let params = try configuration.makeParams()
        defer { cism_params_free(params) }
        var session: OpaquePointer?
        try check(cism_session_create(model.handle, params, &session))
        guard let session else { throw CismError(code: 12, message: "cism_session_create returned no session") }
        var detokenizer: OpaquePointer?
        if model.hasTokenizer {
            let status = cism_detokenizer_create(model.handle, 1 /* CISM_DETOKENIZE_SKIP_SPECIAL */, &detokenizer)
            if status != 0 {
                let error = CismError(failed: status)
                cism_session_free(session)
                throw error
            }
        }
        self.model = model
        self.native = NativeSession(pointer: session, detokenizer: detokenizer, model: model,
                                    promptLookup: configuration.promptLookup)
        self.queue = DispatchQueue(label: "org.libcism.session", qos: .userInitiated)
    }

    /// Runs body on the session queue and resumes with its result.
    private func onQueue<T: Sendable>(_ body: @escaping @Sendable (NativeSession) throws -> T) async throws -> T {
        let native = self.native
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, Error>) in
            queue.async { continuation.resume(with: Result { try body(native) }) }
        }
    }

    /// Evaluates tokens after the ones already in the context (on error nothing changes).
    public func eval(_ tokens: [Int32]) async throws {
        try await onQueue { try $0.eval(tokens) }
    }

    /// Tokens in the context, oldest first; rewind to a common prefix to reuse them.
    public func tokens() async throws -> [Int32] {
        try await onQueue { $0.history }
    }

    public func position() async throws -> Int {
        try await onQueue { Int(cism_session_n_past($0.pointer)) }
    }

    public func contextLength() async throws -> Int {
        try await onQueue { Int(cism_session_n_ctx($0.pointer)) }
    }

    /// Forgets every evaluated token.
    public func reset() async throws {
        try await onQueue { try $0.rewind(to: 0, reset: true) }
    }

    /// Keeps the first `count` evaluated tokens and forgets the rest.
    public func rewind(to count: Int) async throws {
        try await onQueue { try $0.rewind(to: count, reset: false) }
    }

    /// Native bytes the session holds (KV cache, scratch, logits).
    public func memoryBytes() async throws -> Int {
        try await onQueue { Int(cism_session_memory_bytes($0.pointer)) }
    }

    /// Frees what the session can rebuild (scratch, worker threads); the
    /// conversation is kept. Call it on a memory warning.
    public func trim() async throws {
        try await onQueue { try check(cism_session_trim($0.pointer)) }
    }

    /// Saves the conversation to `path` (cism_session_save, docs/SESSION_STATE.md):
    /// the KV cache rows in use, the position and tokens, the last logits and,
    /// with a sampler, its parameters, random generator and penalty history.
    /// Written to a temporary file in the same folder, flushed and renamed over
    /// `path`: on failure the file at `path` is untouched. Call it when the app
    /// moves to the background.
    public func save(to path: String, sampler: Sampler? = nil) async throws {
        try await onQueue { try $0.save(to: path, sampler: sampler) }
    }

    /// Restores a state written by `save` (into `sampler` too when given); the
    /// session then continues bit for bit as the saved one would have, and
    /// `tokens()` returns the restored context. A state from another model, of
    /// another layout version or KV type, with more positions than this
    /// context, or a truncated or corrupted file throws, with the session and
    /// sampler unchanged.
    public func load(from path: String, sampler: Sampler? = nil) async throws {
        try await onQueue { try $0.load(from: path, sampler: sampler) }
    }

    /// Stops a running evaluation or generation soon. Callable from anywhere.
    public nonisolated func cancel() {
        native.cancel()
    }

    /// Evaluates `prompt` (may be empty to continue) and streams up to
    /// `maxTokens` sampled token ids. The stream finishes at an
    /// end-of-generation token (reported, not evaluated), after maxTokens or
    /// when the context is full (a normal end, as in cism_generate_v2);
    /// it throws `CancellationError` when cancelled and `CismError` on
    /// failure (`.contextFull` when the prompt does not fit in the room left).
    public nonisolated func generate(prompt: [Int32], maxTokens: Int, sampler: Sampler,
                                     ignoreEndOfText: Bool = false) -> AsyncThrowingStream<Int32, Error> {
        let native = self.native
        let queue = self.queue
        return AsyncThrowingStream { continuation in
            continuation.onTermination = { termination in
                if case .cancelled = termination { native.cancel() } // the consumer went away
            }
            queue.async {
                let error = native.generate(prompt: prompt, maxTokens: maxTokens, sampler: sampler,
                                            ignoreEndOfText: ignoreEndOfText) { token in
                    if case .terminated = continuation.yield(token) { return false }
                    return true
                }
                continuation.finish(throwing: error)
            }
        }
    }
}

extension Session {
    /// Like `generate`, but streams text: tokens pass through the library's
    /// streaming detokenizer (special tokens left out), so every piece is
    /// complete UTF-8 (an emoji split across tokens arrives whole) and the
    /// pieces join to the decoded reply.
    public nonisolated func generateText(prompt: [Int32], maxTokens: Int, sampler: Sampler,
                                         ignoreEndOfText: Bool = false) -> AsyncThrowingStream<String, Error> {
        let native = self.native
        let queue = self.queue
        return AsyncThrowingStream { continuation in
            continuation.onTermination = { termination in
                if case .cancelled = termination { native.cancel() }
            }
            queue.async {
                guard let detokenizer = native.detokenizer else {
                    continuation.finish(throwing: CismError(code: 10, message: "the model has no tokenizer"))
                    return
                }
                cism_detokenizer_reset(detokenizer)
                var pushError: Error?
                func send(_ text: UnsafePointer<CChar>?, _ length: Int) -> Bool {
                    guard let text, length > 0 else { return true }
                    let piece = String(decoding: UnsafeRawBufferPointer(start: text, count: length), as: UTF8.self)
                    if case .terminated = continuation.yield(piece) { return false }
                    return true
                }
                var error = native.generate(prompt: prompt, maxTokens: maxTokens, sampler: sampler,
                                            ignoreEndOfText: ignoreEndOfText) { token in
                    var text: UnsafePointer<CChar>?
                    var length = 0
                    let status = cism_detokenizer_push(detokenizer, token, &text, &length)
                    if status != 0 {
                        pushError = CismError(failed: status)
                        return false
                    }
                    return send(text, length)
                }
                if error == nil, let pushError { error = pushError }
                if error == nil {
                    var text: UnsafePointer<CChar>?
                    var length = 0
                    if cism_detokenizer_flush(detokenizer, &text, &length) == 0 { _ = send(text, length) }
                }
                continuation.finish(throwing: error)
            }
        }
    }
}

/// The native session and the state that must change with it; used only on
/// the session's queue, except `cancel()`, which is thread-safe in the C API.
/// Freed when the last reference goes: the actor's, or a generation still on
/// the queue. The C session keeps its model alive on its own.
final class NativeSession: @unchecked Sendable {
    let pointer: OpaquePointer
    /// Streaming detokenizer of generateText (nil when the model has no tokenizer).
    let detokenizer: OpaquePointer?
    let model: Model
    /// Configuration.promptLookup
    let promptLookup: Bool
    var history: [Int32] = []

    init(pointer: OpaquePointer, detokenizer: OpaquePointer?, model: Model, promptLookup: Bool) {
        self.pointer = pointer
        self.detokenizer = detokenizer
        self.model = model
        self.promptLookup = promptLookup
    }

    deinit {
        cism_detokenizer_free(detokenizer)
        cism_session_free(pointer)
    }

    func cancel() {
        cism_session_cancel(pointer)
    }

    func eval(_ tokens: [Int32]) throws {
        let status = tokens.withUnsafeBufferPointer { cism_session_eval(pointer, $0.baseAddress, Int32($0.count)) }
        if status != 0 {
            let error = CismError(failed: status)
            record(fed: tokens, generated: [])
            throw error
        }
        record(fed: tokens, generated: [])
    }

    func rewind(to count: Int, reset: Bool) throws {
        try check(reset ? cism_session_reset(pointer) : cism_session_rewind(pointer, Int32(count)))
        history.removeSubrange(min(count, history.count)...)
    }

    func save(to path: String, sampler: Sampler?) throws {
        try refuseNul(path)
        guard let sampler = sampler else { return try check(cism_session_save(pointer, nil, path)) }
        sampler.lock.lock()
        defer { sampler.lock.unlock() }
        try check(cism_session_save(pointer, sampler.handle, path))
    }

    func load(from path: String, sampler: Sampler?) throws {
        try refuseNul(path)
        if let sampler = sampler {
            sampler.lock.lock()
            defer { sampler.lock.unlock() }
            try check(cism_session_load(pointer, sampler.handle, path))
        } else {
            try check(cism_session_load(pointer, nil, path))
        }
        let n = Int(cism_session_n_past(pointer))
        var ids = [Int32](repeating: 0, count: max(n, 1))
        var got: Int32 = 0
        let status = ids.withUnsafeMutableBufferPointer { cism_session_tokens(pointer, $0.baseAddress, Int32(n), &got) }
        try check(status)
        history = Array(ids.prefix(Int(got)))
    }

    /// A path with a NUL would name another file in C.
    private func refuseNul(_ path: String) throws {
        if path.utf8.contains(0) {
            throw CismError(code: 1 /* CISM_ERR_INVALID_ARG */, message: "state path contains a NUL character")
        }
    }

    /// Appends what was fed and generated, then trims to what the context holds.
    private func record(fed: [Int32], generated: [Int32]) {
        history += fed
        history += generated
        let position = Int(cism_session_n_past(pointer))
        if history.count > position { history.removeSubrange(position...) }
    }

    /// Runs cism_generate_v2; returns nil on success or the error that ends the stream.
    func generate(prompt: [Int32], maxTokens: Int, sampler: Sampler, ignoreEndOfText: Bool,
                  onToken: @escaping (Int32) -> Bool) -> Error? {
        sampler.lock.lock()
        defer { sampler.lock.unlock() }
        let sink = TokenSink(onToken)
        var produced: Int32 = 0
        let flags: UInt32 = (ignoreEndOfText ? UInt32(CISM_GENERATE_IGNORE_EOS) : 0) |
            (promptLookup ? UInt32(CISM_GENERATE_LOOKUP) : 0)
        let status = withExtendedLifetime(sink) {
            prompt.withUnsafeBufferPointer { p in
                cism_generate_v2(pointer, sampler.handle, p.baseAddress, Int32(p.count), Int32(clamping: maxTokens), flags,
                                 tokenTrampoline, Unmanaged.passUnretained(sink).toOpaque(), &produced, nil)
            }
        }
        var error: Error?
        if status == 9 { // CISM_ERR_CANCELLED
            error = CancellationError()
        } else if status != 0 {
            error = CismError(failed: status)
        }
        record(fed: prompt, generated: sink.tokens)
        return error
    }
}

/// Carries a Swift closure through cism_generate's user_data.
private final class TokenSink {
    let body: (Int32) -> Bool
    var tokens: [Int32] = []

    init(_ body: @escaping (Int32) -> Bool) {
        self.body = body
    }
}

/// The C callback: 0 = go on, non-zero = stop.
private let tokenTrampoline: cism_token_callback = { user, token in
    guard let user else { return 1 }
    let sink = Unmanaged<TokenSink>.fromOpaque(user).takeUnretainedValue()
    sink.tokens.append(token)
    return sink.body(token) ? 0 : 1
}
