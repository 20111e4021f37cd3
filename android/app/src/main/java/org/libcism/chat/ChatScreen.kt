package org.libcism.chat

import android.text.format.Formatter
import androidx.compose.foundation.background
import androidx.compose.foundation.layout.Arrangement
import androidx.compose.foundation.layout.Box
import androidx.compose.foundation.layout.Column
import androidx.compose.foundation.layout.Row
import androidx.compose.foundation.layout.fillMaxSize
import androidx.compose.foundation.layout.fillMaxWidth
import androidx.compose.foundation.layout.imePadding
import androidx.compose.foundation.layout.padding
import androidx.compose.foundation.layout.widthIn
import androidx.compose.foundation.lazy.LazyColumn
import androidx.compose.foundation.lazy.items
import androidx.compose.foundation.lazy.rememberLazyListState
import androidx.compose.foundation.shape.RoundedCornerShape
import androidx.compose.material3.Button
import androidx.compose.material3.ExperimentalMaterial3Api
import androidx.compose.material3.MaterialTheme
import androidx.compose.material3.OutlinedButton
import androidx.compose.material3.OutlinedTextField
import androidx.compose.material3.Scaffold
import androidx.compose.material3.Slider
import androidx.compose.material3.Text
import androidx.compose.material3.TextButton
import androidx.compose.material3.TopAppBar
import androidx.compose.runtime.Composable
import androidx.compose.runtime.LaunchedEffect
import androidx.compose.runtime.getValue
import androidx.compose.runtime.mutableStateOf
import androidx.compose.runtime.saveable.rememberSaveable
import androidx.compose.runtime.setValue
import androidx.compose.ui.Alignment
import androidx.compose.ui.Modifier
import androidx.compose.ui.platform.LocalContext
import androidx.compose.ui.res.stringResource
import androidx.compose.ui.unit.dp
import kotlin.math.roundToInt

@OptIn(ExperimentalMaterial3Api::class)
@Composable
fun ChatScreen(
    state: ChatUiState,
    onOpenModel: () -> Unit,
    onSend: (String) -> Unit,
    onStop: () -> Unit,
    onNewChat: () -> Unit,
    onThreads: (Int) -> Unit,
) {
    Scaffold(
        topBar = {
            TopAppBar(
                title = { Text(state.modelName ?: stringResource(R.string.app_name)) },
                actions = {
                    if (state.modelName != null) TextButton(onClick = onNewChat) { Text(stringResource(R.string.new_chat)) }
                    TextButton(onClick = onOpenModel, enabled = !state.loading) { Text(stringResource(R.string.open_model)) }
                },
            )
        },
    ) { padding ->
        Column(
            Modifier
                .padding(padding)
                .imePadding()
                .fillMaxSize(),
        ) {
            StatusPanel(state, onThreads)
            Box(Modifier.weight(1f)) {
                when {
                    state.loading -> Centered(stringResource(R.string.loading_model, state.modelName ?: ""))
                    state.modelName == null -> Centered(state.error ?: stringResource(R.string.no_model))
                    else -> Messages(state.messages)
                }
            }
            if (state.error != null && state.modelName != null) {
                Text(state.error, color = MaterialTheme.colorScheme.error, modifier = Modifier.padding(horizontal = 16.dp))
            }
            InputRow(
                enabled = state.modelName != null && !state.loading,
                generating = state.generating,
                onSend = onSend,
                onStop = onStop,
            )
        }
    }
}

@Composable
private fun StatusPanel(state: ChatUiState, onThreads: (Int) -> Unit) {
    val context = LocalContext.current
    Column(Modifier.padding(horizontal = 16.dp, vertical = 4.dp)) {
        Text(stringResource(R.string.threads, state.threads, state.defaultThreads), style = MaterialTheme.typography.labelMedium)
        Slider(
            value = state.threads.toFloat(),
            onValueChange = { onThreads(it.roundToInt()) },
            valueRange = 1f..state.maxThreads.coerceAtLeast(1).toFloat(),
            steps = (state.maxThreads - 2).coerceAtLeast(0),
            enabled = !state.generating,
        )
        if (state.weightsTotal > 0) {
            Text(
                stringResource(
                    R.string.memory,
                    Formatter.formatShortFileSize(context, state.weightsResident),
                    Formatter.formatShortFileSize(context, state.weightsTotal),
                    Formatter.formatShortFileSize(context, state.sessionBytes),
                ) + "  ·  " + stringResource(R.string.speed, state.tokensPerSecond),
                style = MaterialTheme.typography.labelSmall,
            )
        }
    }
}

@Composable
private fun Centered(text: String) {
    Box(Modifier.fillMaxSize().padding(32.dp), contentAlignment = Alignment.Center) {
        Text(text, style = MaterialTheme.typography.bodyLarge)
    }
}

@Composable
private fun Messages(messages: List<Message>) {
    val listState = rememberLazyListState()
    LaunchedEffect(messages.size, messages.lastOrNull()?.text?.length) {
        if (messages.isNotEmpty()) listState.animateScrollToItem(messages.size - 1)
    }
    LazyColumn(
        state = listState,
        modifier = Modifier.fillMaxSize().padding(horizontal = 12.dp),
        verticalArrangement = Arrangement.spacedBy(8.dp),
    ) {
        items(messages) { message -> Bubble(message) }
    }
}

@Composable
private fun Bubble(message: Message) {
    val mine = message.role == "user"
    Row(Modifier.fillMaxWidth(), horizontalArrangement = if (mine) Arrangement.End else Arrangement.Start) {
        Text(
            text = message.text.ifEmpty { "…" },
            modifier = Modifier
                .widthIn(max = 320.dp)
                .background(
                    if (mine) MaterialTheme.colorScheme.primaryContainer else MaterialTheme.colorScheme.surfaceVariant,
                    RoundedCornerShape(16.dp),
                )
                .padding(12.dp),
        )
    }
}

@Composable
private fun InputRow(enabled: Boolean, generating: Boolean, onSend: (String) -> Unit, onStop: () -> Unit) {
    var text by rememberSaveable { mutableStateOf("") }
    Row(Modifier.fillMaxWidth().padding(12.dp), verticalAlignment = Alignment.CenterVertically) {
        OutlinedTextField(
            value = text,
            onValueChange = { text = it },
            modifier = Modifier.weight(1f),
            placeholder = { Text(stringResource(R.string.message_hint)) },
            enabled = enabled,
            maxLines = 4,
        )
        if (generating) {
            OutlinedButton(onClick = onStop, modifier = Modifier.padding(start = 8.dp)) { Text(stringResource(R.string.stop)) }
        } else {
            Button(
                onClick = { onSend(text); text = "" },
                enabled = enabled && text.isNotBlank(),
                modifier = Modifier.padding(start = 8.dp),
            ) { Text(stringResource(R.string.send)) }
        }
    }
}
