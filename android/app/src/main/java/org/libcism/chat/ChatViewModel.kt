package org.libcism.chat

import android.app.Application
import android.content.ComponentCallbacks2
import android.net.Uri
import android.provider.OpenableColumns
import androidx.lifecycle.AndroidViewModel
import androidx.lifecycle.viewModelScope
import kotlinx.coroutines.Job
import kotlinx.coroutines.asCoroutineDispatcher
import kotlinx.coroutines.flow.MutableStateFlow
import kotlinx.coroutines.flow.StateFlow
import kotlinx.coroutines.flow.asStateFlow
import kotlinx.coroutines.flow.update
import kotlinx.coroutines.launch
import kotlinx.coroutines.withContext
import org.libcism.ChatMessage
import org.libcism.Cism
import org.libcism.CismException
import org.libcism.Model
import org.libcism.Sampler
import org.libcism.Session
import org.libcism.textFlow
import java.util.concurrent.Executors

data class Message(val role: String, val text: String)

data class ChatUiState(
    val modelName: String? = null,
    val loading: Boolean = false,
    val generating: Boolean = false,
    val messages: List<Message> = emptyList(),
    val error: String? = null,
    val threads: Int = Cism.defaultThreadCount(),
    val defaultThreads: Int = Cism.defaultThreadCount(),
    val maxThreads: Int = Runtime.getRuntime().availableProcessors(),
    val tokensPerSecond: Double = 0.0,
    val weightsResident: Long = 0,
    val weightsTotal: Long = 0,
    val sessionBytes: Long = 0,
)

/**
 * Owns the model, the session and the sampler. Every native call runs on one
 * dedicated thread ([engine]), so they are never used concurrently; the only
 * call made from elsewhere is Session.cancel(), which is thread-safe (it is
 * what cancelling a generation's coroutine does).
 */
class ChatViewModel(application: Application) : AndroidViewModel(application) {
    private val engineExecutor = Executors.newSingleThreadExecutor { r -> Thread(r, "cism-engine") }
    private val engine = engineExecutor.asCoroutineDispatcher()

    private var model: Model? = null
    private var session: Session? = null
    private var sampler: Sampler? = null
    private var generation: Job? = null

    private val _state = MutableStateFlow(ChatUiState())
    val state: StateFlow<ChatUiState> = _state.asStateFlow()

    /** A model picked with the system file picker (ACTION_OPEN_DOCUMENT). */
    fun openModel(uri: Uri) {
        generation?.cancel()
        val app = getApplication<Application>()
        val name = displayName(uri) ?: "model"
        _state.update { it.copy(loading = true, error = null, modelName = name, messages = emptyList()) }
        viewModelScope.launch {
            try {
                withContext(engine) {
                    closeAll()
                    // The picker hands out a content:// Uri. Its file descriptor is a plain
                    // file that the engine maps through /proc/self/fd: no copy into app
                    // storage, and the weights stay out of the Java and native heaps.
                    val loaded = app.contentResolver.openFileDescriptor(uri, "r")!!.use { pfd ->
                        Model.load("/proc/self/fd/${pfd.fd}")
                    } // the mapping outlives the descriptor
                    model = loaded
                    newSession(_state.value.threads)
                }
                _state.update { it.copy(loading = false) }
                refreshMemory()
            } catch (e: CismException) {
                _state.update { it.copy(loading = false, modelName = null, error = e.message) }
            } catch (e: Exception) {
                _state.update { it.copy(loading = false, modelName = null, error = e.toString()) }
            }
        }
    }

    private fun newSession(threads: Int) { // on engine
        val m = model ?: return
        session?.close()
        sampler?.close()
        session = Session(m, Session.Options().threads(threads).contextLength(minOf(2048, m.contextLength())))
        sampler = Sampler.Builder().temperature(0.7).topP(0.9).minP(0.05).seed(System.nanoTime()).build()
    }

    fun send(text: String) {
        if (text.isBlank() || _state.value.generating || model == null) return
        val history = _state.value.messages + Message("user", text.trim())
        _state.update { it.copy(messages = history + Message("assistant", ""), generating = true, error = null) }
        generation = viewModelScope.launch {
            val s = session ?: return@launch
            val smp = sampler ?: return@launch
            var pieces = 0
            val start = System.nanoTime()
            try {
                val prompt = withContext(engine) { promptTokens(history) }
                s.textFlow(prompt, maxTokens = 512, sampler = smp, dispatcher = engine).collect { piece ->
                    pieces++
                    _state.update { st ->
                        val msgs = st.messages.toMutableList()
                        val last = msgs.last()
                        msgs[msgs.size - 1] = last.copy(text = last.text + piece)
                        st.copy(messages = msgs)
                    }
                }
            } catch (e: CismException) {
                _state.update { it.copy(error = e.message) }
            } finally {
                val seconds = (System.nanoTime() - start) / 1e9
                _state.update { it.copy(generating = false, tokensPerSecond = if (seconds > 0) pieces / seconds else 0.0) }
                refreshMemory()
            }
        }
    }

    /**
     * The conversation as the model's chat format, tokenized; only what the
     * session has not evaluated yet is returned (the KV cache is reused across
     * turns). Old turns are dropped when the context would overflow.
     */
    private fun promptTokens(history: List<Message>): IntArray { // on engine
        val m = model!!
        val s = session!!
        var turns = history
        var all: IntArray
        while (true) {
            val text = m.formatChat(turns.map { ChatMessage(it.role, it.text) }, true)
            all = m.tokenize(text, false, true) // the format writes BOS and its special tokens itself
            if (all.size + 512 <= s.contextLength() || turns.size <= 1) break
            turns = turns.drop(2) // forget the oldest exchange
        }
        val inContext = s.tokens()
        var keep = 0
        while (keep < inContext.size && keep < all.size - 1 && inContext[keep] == all[keep]) keep++
        s.rewind(keep)
        return all.copyOfRange(keep, all.size)
    }

    /** Stops the reply: cancelling the flow calls Session.cancel(). */
    fun stop() {
        generation?.cancel()
    }

    fun newChat() {
        generation?.cancel()
        _state.update { it.copy(messages = emptyList(), error = null) }
        viewModelScope.launch(engine) {
            session?.reset()
            sampler?.reset()
        }
    }

    fun setThreads(threads: Int) {
        if (threads == _state.value.threads) return
        generation?.cancel()
        _state.update { it.copy(threads = threads, messages = emptyList()) }
        viewModelScope.launch(engine) { newSession(threads) }
    }

    /** From Activity.onTrimMemory: give back what the session can rebuild. */
    fun onTrimMemory(level: Int) {
        if (level >= ComponentCallbacks2.TRIM_MEMORY_BACKGROUND || level == ComponentCallbacks2.TRIM_MEMORY_RUNNING_LOW) {
            viewModelScope.launch(engine) { session?.trim() }
            refreshMemory()
        }
    }

    private fun refreshMemory() {
        viewModelScope.launch {
            val (resident, total, sessionBytes) = withContext(engine) {
                val m = model
                Triple(m?.residentBytes() ?: 0L, m?.fileBytes() ?: 0L, session?.memoryBytes() ?: 0L)
            }
            _state.update { it.copy(weightsResident = resident, weightsTotal = total, sessionBytes = sessionBytes) }
        }
    }

    private fun closeAll() { // on engine
        session?.close()
        sampler?.close()
        model?.close()
        session = null
        sampler = null
        model = null
    }

    private fun displayName(uri: Uri): String? =
        getApplication<Application>().contentResolver.query(uri, arrayOf(OpenableColumns.DISPLAY_NAME), null, null, null)
            ?.use { c -> if (c.moveToFirst()) c.getString(0) else null }

    override fun onCleared() {
        session?.cancel() // thread-safe: ends a running generation quickly
        engineExecutor.execute { closeAll() }
        engineExecutor.shutdown()
    }
}
