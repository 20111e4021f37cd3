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
): Flow<Int> = callbackFlow {
    val session = this@tokenFlow
    launch(dispatcher) {
        try {
            session.generate(prompt, maxTokens, sampler, ignoreEos) { token ->
                trySend(token).isSuccess // false once the collector is gone: stop
            }
            channel.close()
        } catch (e: Throwable) {
            channel.close(e)
        }
    }
    awaitClose { session.cancel() }
}.buffer(Channel.UNLIMITED)

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
): Flow<String> = callbackFlow {
    val session = this@textFlow
    launch(dispatcher) {
        try {
            session.generateText(prompt, maxTokens, sampler, ignoreEos) { text ->
                trySend(text).isSuccess
            }
            channel.close()
        } catch (e: Throwable) {
            channel.close(e)
        }
    }
    awaitClose { session.cancel() }
}.buffer(Channel.UNLIMITED)
