package org.libcism

import kotlinx.coroutines.CoroutineDispatcher
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.channels.awaitClose
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.buffer
import kotlinx.coroutines.flow.callbackFlow
import kotlinx.coroutines.launch

/**
 * Generated token ids as a cold [Flow]: collecting it evaluates [prompt] and
 * generates on [dispatcher] (blocking one of its threads; give it a
 * single-thread dispatcher to keep every native call on one thread), emitting
 * each token as soon as it is chosen.
 *
 * Cancelling the collecting coroutine (or its scope, e.g. a ViewModel's)
 * calls [Session.cancel], and the flow completes only once native generation
 * has stopped, so the session is free again when `collect` returns. Errors
 * arrive as [CismException]. The session stays usable afterwards.
 */
fun Session.tokenFlow(
    prompt: IntArray,
    maxTokens: Int,
    sampler: Sampler,
    ignoreEos: Boolean = false,
    dispatcher: CoroutineDispatcher = Dispatchers.IO,
): Flow<Int> = generationFlow(dispatcher) { emit ->
    generate(prompt, maxTokens, sampler, ignoreEos) { token -> emit(token) }
}

/**
 * Generated text as a cold [Flow] of pieces, each complete UTF-8 (a character
 * split across tokens, such as an emoji, arrives whole). Same threading and
 * cancellation as [tokenFlow].
 */
fun Session.textFlow(
    prompt: IntArray,
    maxTokens: Int,
    sampler: Sampler,
    ignoreEos: Boolean = false,
    dispatcher: CoroutineDispatcher = Dispatchers.IO,
): Flow<String> = generationFlow(dispatcher) { emit ->
    generateText(prompt, maxTokens, sampler, ignoreEos) { text -> emit(text) }
}

/**
 * Both flows: [produce] runs one native generation on [dispatcher], handing
 * each item to `emit`, which returns false once the collector is gone (the
 * generation then stops); cancellation calls [Session.cancel].
 */
private fun <T> Session.generationFlow(
    dispatcher: CoroutineDispatcher,
    produce: (emit: (T) -> Boolean) -> Unit,
): Flow<T> = callbackFlow<T> {
    val session = this@generationFlow
    launch(dispatcher) {
        try {
            produce { item -> trySend(item).isSuccess }
            channel.close()
        } catch (e: Throwable) {
            channel.close(e)
        }
    }
    awaitClose { session.cancel() }
}.buffer(Channel.UNLIMITED)
