import XCTest
@testable import Cism

/// Run on a Mac: CISM_TEST_MODEL=/path/to/stories260K.cism swift test
/// (the .cism comes from `python -m cism convert` of ../shared/models/stories260K).
final class CismTests: XCTestCase {
    private func modelPath() throws -> String {
        guard let path = ProcessInfo.processInfo.environment["CISM_TEST_MODEL"] else {
            throw XCTSkip("set CISM_TEST_MODEL to a stories260K .cism file")
        }
        return path
    }

    func testLibraryInfo() {
        XCTAssertEqual(Cism.version, "0.1.0")
        XCTAssertGreaterThanOrEqual(Cism.defaultThreadCount, 1)
        XCTAssertNotNil(Cism.processResidentBytes)
    }

    func testMissingFileThrowsWithStatusAndMessage() {
        let path = "/nonexistent/é中😀.cism"
        XCTAssertThrowsError(try Model(path: path)) { error in
            let e = error as? CismError
            XCTAssertEqual(e?.status, .io)
            XCTAssertTrue(e?.message.contains(path) ?? false)
        }
    }

    func testGreedyStreamAndPosition() async throws {
        let model = try Model(path: modelPath())
        XCTAssertEqual(model.vocabularySize, 512)
        XCTAssertTrue(model.isMapped)
        let session = try Session(model: model, configuration: .init(threads: 1))
        let sampler = try Sampler.greedy()
        var tokens: [Int32] = []
        for try await token in session.generate(prompt: [1], maxTokens: 16, sampler: sampler, ignoreEndOfText: true) {
            tokens.append(token)
        }
        XCTAssertEqual(tokens.count, 16)
        let position = try await session.position()
        XCTAssertEqual(position, 17)
        let context = try await session.tokens()
        XCTAssertEqual(context, [1] + tokens)
    }

    func testTaskCancellationStopsGeneration() async throws {
        let model = try Model(path: modelPath())
        let session = try Session(model: model, configuration: .init(threads: 1))
        let sampler = try Sampler.greedy()
        let task = Task { () -> Int in
            var count = 0
            for try await _ in session.generate(prompt: [1], maxTokens: 100_000, sampler: sampler, ignoreEndOfText: true) {
                count += 1
                if count == 5 { withUnsafeCurrentTask { $0?.cancel() } }
            }
            return count
        }
        let result = await task.result
        switch result {
        case .success(let n): XCTAssertLessThan(n, 400)
        case .failure(let error): XCTAssertTrue(error is CancellationError)
        }
        // the session goes on
        var more = 0
        for try await _ in session.generate(prompt: [1], maxTokens: 3, sampler: sampler, ignoreEndOfText: true) { more += 1 }
        XCTAssertEqual(more, 3)
    }

    func testModelOutlivesItsLastSwiftReference() async throws {
        var model: Model? = try Model(path: modelPath())
        let session = try Session(model: model!)
        model = nil // the session keeps the native model
        let sampler = try Sampler.greedy()
        var n = 0
        for try await _ in session.generate(prompt: [1], maxTokens: 4, sampler: sampler, ignoreEndOfText: true) { n += 1 }
        XCTAssertEqual(n, 4)
    }

    func testTextRoundTripWithEmoji() throws {
        let model = try Model(path: modelPath())
        XCTAssertTrue(model.hasTokenizer)
        let text = "Once upon a time 😀 a café"
        let ids = try model.tokenize(text)
        XCTAssertEqual(ids.first, model.bosID)
        XCTAssertEqual(try model.detokenize(ids), text)
    }

    func testChatFormat() throws {
        let model = try Model(path: modelPath())
        XCTAssertNil(model.chatFormat) // a story model names none
        let text = try model.formatChat([ChatMessage(role: .user, content: "Hi 😀")], format: .chatml)
        XCTAssertTrue(text.contains("<|im_start|>user\nHi 😀<|im_end|>\n"))
        XCTAssertTrue(text.hasSuffix("<|im_start|>assistant\n"))
    }

    func testStreamedTextJoinsToDecodedTokens() async throws {
        let model = try Model(path: modelPath())
        let session = try Session(model: model, configuration: .init(threads: 1))
        let sampler = try Sampler(temperature: 1.0, seed: 3)
        let prompt = try model.tokenize("Once upon a time, a girl")
        var streamed = ""
        for try await piece in session.generateText(prompt: prompt, maxTokens: 200, sampler: sampler) {
            XCTAssertFalse(piece.isEmpty)
            streamed += piece
        }
        let context = try await session.tokens()
        XCTAssertEqual(try model.detokenize(Array(context[prompt.count...])), streamed)
    }

    func testMemory() async throws {
        let model = try Model(path: modelPath())
        try model.prefetch(wait: true)
        XCTAssertEqual(try model.residentBytes(), model.fileBytes)
        let configuration = Session.Configuration(threads: 1, contextLength: 256)
        let estimate = try model.estimateSessionBytes(configuration)
        let session = try Session(model: model, configuration: configuration)
        let bytes = try await session.memoryBytes()
        XCTAssertEqual(bytes, estimate)
        try await session.trim()
        let trimmed = try await session.memoryBytes()
        XCTAssertLessThan(trimmed, estimate)
    }
}
