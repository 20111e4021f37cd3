import CCism
import Foundation

/// Chooses tokens from logits: penalties, top-k, top-p, min-p, temperature,
/// then a seeded draw (temperature 0 = greedy). Keeps a conversation's
/// penalty history, so reuse one sampler across its turns. A sampler serves
/// one generation at a time (a second one waits).
public final class Sampler: @unchecked Sendable {
    let handle: OpaquePointer
    let lock = NSLock()

    public init(temperature: Double = 0, topK: Int = 0, topP: Double = 1, minP: Double = 0,
                repeatPenalty: Double = 1, frequencyPenalty: Double = 0, presencePenalty: Double = 0,
                penaltyLastN: Int = 64, seed: UInt64 = 0) throws {
        var sampler: OpaquePointer?
        try check(cism_sampler_create(&sampler))
        guard let sampler else { throw CismError(code: 12, message: "cism_sampler_create returned no sampler") }
        func float(_ key: Int, _ value: Double) throws { try check(cism_sampler_set_float(sampler, cism_sampler_param(key), value)) }
        func int(_ key: Int, _ value: Int64) throws { try check(cism_sampler_set_int(sampler, cism_sampler_param(key), value)) }
        do {
            try float(Int(CISM_SAMPLER_TEMPERATURE), temperature)
            try int(Int(CISM_SAMPLER_TOP_K), Int64(topK))
            try float(Int(CISM_SAMPLER_TOP_P), topP)
            try float(Int(CISM_SAMPLER_MIN_P), minP)
            try float(Int(CISM_SAMPLER_REPEAT_PENALTY), repeatPenalty)
            try float(Int(CISM_SAMPLER_FREQUENCY_PENALTY), frequencyPenalty)
            try float(Int(CISM_SAMPLER_PRESENCE_PENALTY), presencePenalty)
            try int(Int(CISM_SAMPLER_PENALTY_LAST_N), Int64(penaltyLastN))
            try int(Int(CISM_SAMPLER_SEED), Int64(bitPattern: seed))
        } catch {
            cism_sampler_free(sampler) // self is not initialized yet, so deinit will not run
            throw error
        }
        handle = sampler
    }

    /// Always the most likely token.
    public static func greedy() throws -> Sampler { try Sampler() }

    deinit {
        cism_sampler_free(handle)
    }

    /// Clears the penalty history and reseeds the generator.
    public func reset() throws {
        lock.lock()
        defer { lock.unlock() }
        try check(cism_sampler_reset(handle))
    }
}
