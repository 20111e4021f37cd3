package org.libcism

import java.io.File

/**
 * The Java API as Kotlin code uses it (SAM lambdas, use {}, property syntax,
 * exceptions), compiled with Debian's kotlinc 1.3 and run on the host JVM by
 * tests/platforms/run_platform_checks.sh. Arguments: the stories260K .cism
 * file, its 8-token reference prompt (int32 little-endian) and the Python
 * API's greedy tokens (text).
 */
fun main(args: Array<String>) {
    val (modelPath, promptPath, expectedPath) = args
    val promptBytes = File(promptPath).readBytes()
    val prompt = IntArray(promptBytes.size / 4) { i ->
        (0 until 4).fold(0) { acc, b -> acc or ((promptBytes[4 * i + b].toInt() and 0xff) shl (8 * b)) }
    }
    val expected = File(expectedPath).readText().trim().split(Regex("\\s+")).map { it.toInt() }

    val generated = mutableListOf<Int>()
    Model.load(modelPath).use { model ->
        check(model.vocabSize() == 512) { "vocab ${model.vocabSize()}" }
        Session(model, Session.Options().threads(1)).use { session ->
            Sampler.greedy().use { sampler ->
                val result = session.generate(prompt, 32, sampler, true) { token ->
                    generated += token
                    true
                }
                check(result.stopReason == GenerationResult.StopReason.MAX_TOKENS) { "stop reason ${result.stopReason}" }
                check(result.tokenCount == 32)
            }
            val text = "A café 😀"
            check(model.detokenize(model.tokenize(text), true) == text) { "round trip of $text" }
            val pieces = StringBuilder()
            session.reset()
            Sampler.greedy().use { sampler ->
                session.generateText(model.tokenize("Once upon a time"), 16, sampler, true) { piece -> pieces.append(piece); true }
            }
            check(pieces.isNotEmpty())
            val error = try {
                session.eval(-1)
                null
            } catch (e: CismException) {
                e
            }
            check(error != null && error.status == CismException.TOKEN_RANGE) { "eval(-1) gave $error" }
        }
    }
    check(generated == expected) { "Kotlin got $generated, the Python API $expected" }
    println("kotlin interop: OK (${generated.size} tokens equal the Python API's)")
}
