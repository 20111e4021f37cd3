import CCism
import Foundation

/// One message of a conversation.
public struct ChatMessage: Sendable, Equatable {
    public enum Role: String, Sendable {
        case system, user, assistant
    }

    public var role: Role
    public var content: String

    public init(role: Role, content: String) {
        self.role = role
        self.content = content
    }
}

/// Chat formats (`cism_chat_format`, pinned values); `.model` is the one the model file names.
public enum ChatFormat: Int32, Sendable {
    case model = 0, chatml = 1, llama3 = 2, llama2 = 3, mistral = 4, zephyr = 5
}

/// Calls a C function that fills a caller buffer and reports the size it
/// needs (CISM_ERR_BUFFER_SMALL when too small): once to ask, once to fill.
func twoCalls<T>(_ zero: T, _ fill: (UnsafeMutablePointer<T>?, Int, inout Int) -> cism_status) throws -> [T] {
    var needed = 0
    let first = fill(nil, 0, &needed)
    if first != 0 && first != 8 { throw CismError(failed: first) } // 8 = CISM_ERR_BUFFER_SMALL
    var buffer = [T](repeating: zero, count: needed + 1)
    let status = buffer.withUnsafeMutableBufferPointer { fill($0.baseAddress, $0.count, &needed) }
    try check(status)
    return Array(buffer.prefix(needed))
}

extension Model {
    /// true when the file carries a tokenizer.
    public var hasTokenizer: Bool { cism_model_has_tokenizer(handle) != 0 }

    /// Text to token ids. `addSpecial` adds what the tokenizer adds around a
    /// text (BOS); `parseSpecial` turns special tokens written in the text into
    /// their ids (use it for `formatChat` output, not for raw user text).
    public func tokenize(_ text: String, addSpecial: Bool = true, parseSpecial: Bool = true) throws -> [Int32] {
        let flags = UInt32((addSpecial ? 1 : 0) | (parseSpecial ? 2 : 0))
        let utf8 = text.utf8CString // NUL-terminated, never empty
        return try utf8.withUnsafeBufferPointer { bytes in
            try twoCalls(Int32(0)) { tokens, capacity, needed in
                var n: Int32 = 0
                let status = cism_tokenize(handle, bytes.baseAddress, bytes.count - 1, flags, tokens, Int32(capacity), &n)
                needed = Int(n)
                return status
            }
        }
    }

    /// Token ids to text, as Hugging Face's decode.
    public func detokenize(_ tokens: [Int32], skipSpecial: Bool = true) throws -> String {
        let bytes = try tokens.withUnsafeBufferPointer { ids in
            try twoCalls(CChar(0)) { text, capacity, needed in
                var n = 0
                let status = cism_detokenize(handle, ids.baseAddress, Int32(ids.count), skipSpecial ? 1 : 0, text, capacity, &n)
                needed = n
                return status
            }
        }
        return String(decoding: bytes.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The model's own chat format, nil when the file names none.
    public var chatFormat: ChatFormat? {
        var format: cism_chat_format = 0
        return cism_model_chat_format(handle, &format) == 0 ? ChatFormat(rawValue: format) : nil
    }

    /// The conversation as prompt text (tokenize it with `addSpecial: false, parseSpecial: true`).
    public func formatChat(_ messages: [ChatMessage], format: ChatFormat = .model,
                           addGenerationPrompt: Bool = true) throws -> String {
        // C copies of every string, alive for the whole call
        let roleStrings = messages.map { strdup($0.role.rawValue) }
        let contentStrings = messages.map { strdup($0.content) }
        defer { (roleStrings + contentStrings).forEach { free($0) } }
        if (roleStrings + contentStrings).contains(where: { $0 == nil }) {
            throw CismError(code: 5, message: "out of memory")
        }
        let roles: [UnsafePointer<CChar>?] = roleStrings.map { UnsafePointer($0) }
        let contents: [UnsafePointer<CChar>?] = contentStrings.map { UnsafePointer($0) }
        let roleLengths = roleStrings.map { strlen($0!) }
        let contentLengths = contentStrings.map { strlen($0!) }
        let bytes = try twoCalls(CChar(0)) { text, capacity, needed in
            var n = 0
            let status = cism_chat_apply(handle, format.rawValue, roles, roleLengths, contents, contentLengths,
                                         Int32(messages.count), addGenerationPrompt ? 1 : 0, text, capacity, &n)
            needed = n
            return status
        }
        return String(decoding: bytes.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
