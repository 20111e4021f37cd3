// The libcism Android library (AAR): the Java/Kotlin API in org.libcism and
// libcism_jni.so (JNI glue + engine) built by CMake through the NDK.
plugins {
    id("com.android.library")
    id("org.jetbrains.kotlin.android")
}

android {
    namespace = "org.libcism"
    compileSdk = 35
    ndkVersion = "27.2.12479018"

    defaultConfig {
        minSdk = 24
        consumerProguardFiles("consumer-rules.pro")
        ndk {
            // 64-bit ARM phones, and the x86_64 emulator
            abiFilters += listOf("arm64-v8a", "x86_64")
        }
        externalNativeBuild {
            cmake {
                arguments += listOf("-DANDROID_STL=none", "-DCISM_BUILD_TESTS=OFF", "-DCISM_BUILD_EXAMPLES=OFF")
            }
        }
    }

    buildTypes {
        // The engine is always built optimized: a debug build of the app still gets usable speed.
        debug {
            externalNativeBuild { cmake { arguments += "-DCMAKE_BUILD_TYPE=Release" } }
        }
        release {
            externalNativeBuild { cmake { arguments += "-DCMAKE_BUILD_TYPE=Release" } }
        }
    }

    externalNativeBuild {
        cmake {
            path = file("src/main/cpp/CMakeLists.txt")
            version = "3.22.1"
        }
    }

    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_1_8
        targetCompatibility = JavaVersion.VERSION_1_8
    }
    kotlinOptions {
        jvmTarget = "1.8"
    }
}

dependencies {
    // Flow extensions (SessionFlows.kt) are part of the API
    api("org.jetbrains.kotlinx:kotlinx-coroutines-core:1.9.0")
}
