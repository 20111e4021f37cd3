// swift-tools-version:5.9
// Cism: Swift API over libcism. The C library comes as CCism.xcframework
// (iOS device, iOS simulator, macOS), built by scripts/build-xcframework.sh
// into build/; its headers carry the module map (CCism/module.modulemap).
import PackageDescription

let package = Package(
    name: "Cism",
    platforms: [.iOS(.v15), .macOS(.v12)],
    products: [
        .library(name: "Cism", targets: ["Cism"]),
    ],
    targets: [
        .binaryTarget(name: "CCism", path: "build/CCism.xcframework"),
        .target(name: "Cism", dependencies: ["CCism"], path: "Sources/Cism"),
        .testTarget(name: "CismTests", dependencies: ["Cism"], path: "Tests/CismTests"),
    ]
)
