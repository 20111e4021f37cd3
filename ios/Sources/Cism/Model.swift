import CCism

/// A loaded .cism model: immutable and safe to share between threads and
/// sessions. Its weights are used in place from a read-only file mapping
/// (never copied, not counted as dirty memory by iOS).
///
/// The C library reference-counts models: every `Session` keeps the native
/// model alive, so releasing the last `Model` while sessions exist is safe.
public final class Model: @unchecked Sendable {
    let handle: OpaquePointer
    /// End-of-generation token ids.
    public let eosIDs: [Int32]

    /// Loads and validates a .cism file. `useMmap: false` reads it into memory instead.
    public init(path: String, useMmap: Bool = true, checkWeights: Bool = false) throws {
        var params: OpaquePointer?
        try check(cism_params_create(&params))
        defer { cism_params_free(params) }
        try check(cism_params_set_int(params, cism_param(CISM_PARAM_USE_MMAP), useMmap ? 1 : 0))
        try check(cism_params_set_int(params, cism_param(CISM_PARAM_CHECK_WEIGHTS), checkWeights ? 1 : 0))
        var model: OpaquePointer?
        try check(cism_model_load(path, params, &model))
        guard let model else { throw CismError(code: 12, message: "cism_model_load returned no model") }
        var count: Int32 = 0
        var ids: [Int32] = []
        do {
            try check(cism_model_eos_ids(model, nil, 0, &count))
            ids = [Int32](repeating: 0, count: Int(count))
            var total: Int32 = 0
            try check(cism_model_eos_ids(model, &ids, count, &total))
        } catch {
            cism_model_free(model) // self is not initialized yet, so deinit will not run
            throw error
        }
        handle = model
        eosIDs = ids
    }

    deinit {
        cism_model_free(handle) // drops this reference; sessions hold their own
    }

    private func info(_ key: Int) -> Int {
        var value: Int64 = 0
        return cism_model_get_info(handle, cism_model_info(key), &value) == 0 ? Int(value) : -1
    }

    /// "llama", "mistral", "qwen2", "qwen3".
    public var architecture: String { String(cString: cism_model_architecture(handle)) }
    public var vocabularySize: Int { info(Int(CISM_INFO_VOCAB_SIZE)) }
    public var layerCount: Int { info(Int(CISM_INFO_N_LAYERS)) }
    /// Positions the model was trained for; a session's context may be shorter.
    public var contextLength: Int { info(Int(CISM_INFO_CONTEXT_LEN)) }
    /// nil when the model has no BOS token.
    public var bosID: Int32? { let id = info(Int(CISM_INFO_BOS_ID)); return id >= 0 ? Int32(id) : nil }
    public var parameterCount: Int { info(Int(CISM_INFO_N_PARAMS)) }
    public var fileBytes: Int { info(Int(CISM_INFO_FILE_BYTES)) }

    public func isEndOfText(_ token: Int32) -> Bool { eosIDs.contains(token) }

    // MARK: memory

    /// true when the weights are used from a file mapping (no copy).
    public var isMapped: Bool { cism_model_is_mapped(handle) != 0 }

    /// Asks the OS to read the weights in ahead of use; with `wait`, returns
    /// once every page is resident.
    public func prefetch(wait: Bool = false) throws {
        try check(cism_model_prefetch(handle, wait ? 1 : 0))
    }

    /// Pins the weights in RAM. Best effort: iOS usually refuses, with
    /// `CismError.Status.permission`, and then nothing is locked.
    public func lock() throws { try check(cism_model_lock(handle)) }
    public func unlock() throws { try check(cism_model_unlock(handle)) }

    /// Bytes of the weights resident in RAM now (whole pages).
    public func residentBytes() throws -> Int {
        var resident: Int64 = 0
        try check(cism_model_resident_bytes(handle, &resident, nil))
        return Int(resident)
    }

    /// Native memory a session with this configuration would allocate.
    public func estimateSessionBytes(_ configuration: Session.Configuration = .init()) throws -> Int {
        let params = try configuration.makeParams()
        defer { cism_params_free(params) }
        var bytes: Int64 = 0
        try check(cism_session_estimate_bytes(handle, params, &bytes))
        return Int(bytes)
    }
}
