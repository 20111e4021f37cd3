import CCism

/// A libcism call failed: the C status and the library's message for it.
///
/// Cancellation is not reported as a `CismError`: a cancelled generation
/// ends its stream with `CancellationError`.
public struct CismError: Error, Equatable, CustomStringConvertible, Sendable {
    /// `cism_status` values (pinned in cism.h).
    public enum Status: Int32, Sendable {
        case invalidArgument = 1
        case io = 2
        case format = 3
        case unsupported = 4
        case outOfMemory = 5
        case contextFull = 6
        case tokenRange = 7
        case bufferTooSmall = 8
        case cancelled = 9
        case invalidState = 10
        case exists = 11
        case `internal` = 12
        case permission = 13
        case unknown = -1
    }

    public let status: Status
    /// The raw `cism_status`.
    public let code: Int32
    public let message: String

    public init(code: Int32, message: String) {
        self.code = code
        self.status = Status(rawValue: code) ?? .unknown
        self.message = message
    }

    /// Reads `cism_last_error()`: call it on the thread of the failed call, right after it.
    init(failed code: cism_status) {
        let text = String(cString: cism_last_error())
        self.init(code: code, message: text.isEmpty ? String(cString: cism_status_str(code)) : text)
    }

    public var description: String {
        "\(String(cString: cism_status_str(code))): \(message)"
    }
}

extension CismError: LocalizedError {
    public var errorDescription: String? { message }
}

/// Throws the library's error for a failed status.
@inline(__always)
func check(_ status: cism_status) throws {
    if status != 0 { throw CismError(failed: status) }
}
