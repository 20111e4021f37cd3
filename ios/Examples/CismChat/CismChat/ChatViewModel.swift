import Cism
import Foundation

struct Message: Identifiable, Equatable {
    let id = UUID()
    let role: ChatMessage.Role
    var text: String
}

/// Owns the model, the session and the sampler; the UI observes it.
@MainActor
final class ChatViewModel: ObservableObject {
    @Published private(set) var modelName: String?
    @Published private(set) var isLoading = false
    @Published private(set) var isGenerating = false
    @Published private(set) var messages: [Message] = []
    @Published var errorText: String?
    @Published var threads = Cism.defaultThreadCount
    let defaultThreads = Cism.defaultThreadCount
    @Published private(set) var memoryText = ""
    @Published private(set) var tokensPerSecond = 0.0

    private var model: Model?
    private var session: Session?
    private var sampler: Sampler?
    private var generation: Task<Void, Never>?

    /// .cism files in the app's Documents folder (filled through Finder or the Files app).
    var availableModels: [URL] {
        let docs = FileManager.default.urls(for: .documentDirectory, in: .userDomainMask)[0]
        let files = (try? FileManager.default.contentsOfDirectory(at: docs, includingPropertiesForKeys: nil)) ?? []
        return files.filter { $0.pathExtension == "cism" }.sorted { $0.lastPathComponent < $1.lastPathComponent }
    }

    /// A model picked with the document picker: a security-scoped URL outside
    /// the app is copied into Documents once (a mapping must outlive the
    /// scoped access), then loaded from there.
    func importAndLoad(_ url: URL) {
        let docs = FileManager.default.urls(for: .documentDirectory, in: .userDomainMask)[0]
        let local = docs.appendingPathComponent(url.lastPathComponent)
        isLoading = true
        Task.detached(priority: .userInitiated) {
            do {
                if url.standardizedFileURL != local.standardizedFileURL {
                    let scoped = url.startAccessingSecurityScopedResource()
                    defer { if scoped { url.stopAccessingSecurityScopedResource() } }
                    if FileManager.default.fileExists(atPath: local.path) { try FileManager.default.removeItem(at: local) }
                    try FileManager.default.copyItem(at: url, to: local)
                }
                await self.load(local)
            } catch {
                await self.fail(error)
            }
        }
    }

    func load(_ url: URL) async {
        generation?.cancel()
        isLoading = true
        errorText = nil
        messages = []
        do {
            let threads = self.threads
            // Loading maps the file and checks it: quick, but off the main thread.
            let (model, session) = try await Task.detached(priority: .userInitiated) { () -> (Model, Session) in
                let model = try Model(path: url.path)
                let context = min(2048, model.contextLength)
                return (model, try Session(model: model, configuration: .init(threads: threads, contextLength: context)))
            }.value
            self.model = model
            self.session = session
            self.sampler = try Sampler(temperature: 0.7, topP: 0.9, minP: 0.05, seed: UInt64.random(in: 0...UInt64.max))
            modelName = url.deletingPathExtension().lastPathComponent
        } catch {
            fail(error)
        }
        isLoading = false
        await refreshMemory()
    }

    private func fail(_ error: Error) {
        isLoading = false
        errorText = (error as? CismError)?.message ?? error.localizedDescription
    }

    func send(_ text: String) {
        guard let model, let session, let sampler, !isGenerating,
              !text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else { return }
        messages.append(Message(role: .user, text: text))
        let history = messages.map { ChatMessage(role: $0.role, content: $0.text) }
        messages.append(Message(role: .assistant, text: ""))
        isGenerating = true
        errorText = nil
        generation = Task {
            let start = Date()
            var pieces = 0
            do {
                let prompt = try await Self.newTokens(for: history, model: model, session: session)
                for try await piece in session.generateText(prompt: prompt, maxTokens: 512, sampler: sampler) {
                    messages[messages.count - 1].text += piece
                    pieces += 1
                }
            } catch is CancellationError {
                // Stop pressed: the reply so far stays
            } catch {
                errorText = (error as? CismError)?.message ?? error.localizedDescription
            }
            tokensPerSecond = Double(pieces) / max(Date().timeIntervalSince(start), 0.001)
            isGenerating = false
            await refreshMemory()
        }
    }

    /// The conversation in the model's chat format, tokenized; only what the
    /// session has not evaluated yet is returned (earlier turns stay in the KV cache).
    private static func newTokens(for history: [ChatMessage], model: Model, session: Session) async throws -> [Int32] {
        let text = try model.formatChat(history, addGenerationPrompt: true)
        let all = try model.tokenize(text, addSpecial: false, parseSpecial: true)
        let inContext = try await session.tokens()
        var keep = 0
        while keep < inContext.count, keep < all.count - 1, inContext[keep] == all[keep] { keep += 1 }
        try await session.rewind(to: keep)
        return Array(all[keep...])
    }

    /// Stop: cancelling the task ends the stream, which cancels the native loop.
    func stop() {
        generation?.cancel()
    }

    func newChat() {
        generation?.cancel()
        messages = []
        Task {
            try? await session?.reset()
            try? sampler?.reset()
        }
    }

    func didReceiveMemoryWarning() {
        Task {
            try? await session?.trim()
            await refreshMemory()
        }
    }

    private func refreshMemory() async {
        guard let model, let session else { memoryText = ""; return }
        let resident = (try? model.residentBytes()) ?? 0
        let sessionBytes = (try? await session.memoryBytes()) ?? 0
        let f = ByteCountFormatter()
        memoryText = "weights \(f.string(fromByteCount: Int64(resident))) resident of \(f.string(fromByteCount: Int64(model.fileBytes))) (mapped) · session \(f.string(fromByteCount: Int64(sessionBytes)))"
    }
}
