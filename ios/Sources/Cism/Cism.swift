import CCism

/// Library-wide information.
public enum Cism {
    /// "0.1.0": the version of the linked library.
    public static var version: String { String(cString: cism_version_string()) }

    /// CPU, its features and the kernel tier chosen at run time.
    public static var systemInfo: String { String(cString: cism_system_info()) }

    /// Threads a session uses by default: the performance cores on Apple
    /// silicon (efficiency cores left out), at most 8.
    public static var defaultThreadCount: Int { Int(cism_default_n_threads()) }

    /// Resident memory of the whole process in bytes, nil when unknown.
    public static var processResidentBytes: Int? {
        var bytes: Int64 = 0
        return cism_process_resident_bytes(&bytes) == 0 ? Int(bytes) : nil
    }
}
