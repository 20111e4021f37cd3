import SwiftUI
import UniformTypeIdentifiers

struct ContentView: View {
    @EnvironmentObject private var chat: ChatViewModel
    @State private var draft = ""
    @State private var showingImporter = false

    var body: some View {
        NavigationView {
            VStack(spacing: 0) {
                if chat.modelName == nil {
                    ModelPicker(showingImporter: $showingImporter)
                } else {
                    MessageList(messages: chat.messages)
                    if !chat.memoryText.isEmpty {
                        Text("\(chat.memoryText) · \(chat.tokensPerSecond, specifier: "%.1f") tok/s")
                            .font(.caption2)
                            .foregroundColor(.secondary)
                            .padding(.horizontal)
                    }
                    InputBar(draft: $draft)
                }
                if let error = chat.errorText {
                    Text(error).font(.footnote).foregroundColor(.red).padding(.horizontal)
                }
            }
            .navigationTitle(chat.modelName ?? "CismChat")
            .navigationBarTitleDisplayMode(.inline)
            .toolbar {
                ToolbarItemGroup(placement: .navigationBarTrailing) {
                    if chat.modelName != nil {
                        Button("New chat") { chat.newChat() }
                    }
                    Button("Open") { showingImporter = true }
                }
            }
            .fileImporter(isPresented: $showingImporter, allowedContentTypes: [.data]) { result in
                if case .success(let url) = result { chat.importAndLoad(url) }
            }
            .overlay { if chat.isLoading { ProgressView("Loading model…") } }
        }
        .navigationViewStyle(.stack)
    }
}

private struct ModelPicker: View {
    @EnvironmentObject private var chat: ChatViewModel
    @Binding var showingImporter: Bool

    var body: some View {
        List {
            Section {
                Stepper("Threads: \(chat.threads) (default \(chat.defaultThreads))",
                        value: $chat.threads, in: 1...ProcessInfo.processInfo.activeProcessorCount)
            } footer: {
                Text("The default uses the performance cores; efficiency cores slow every step down.")
            }
            Section("Models in Documents") {
                ForEach(chat.availableModels, id: \.self) { url in
                    Button(url.lastPathComponent) { Task { await chat.load(url) } }
                }
                Button("Choose a file…") { showingImporter = true }
            }
        }
    }
}

private struct MessageList: View {
    let messages: [Message]

    var body: some View {
        ScrollViewReader { proxy in
            ScrollView {
                LazyVStack(alignment: .leading, spacing: 8) {
                    ForEach(messages) { message in
                        Bubble(message: message).id(message.id)
                    }
                }
                .padding()
            }
            .onChange(of: messages.last?.text) { _ in
                if let last = messages.last { proxy.scrollTo(last.id, anchor: .bottom) }
            }
        }
    }
}

private struct Bubble: View {
    let message: Message

    var body: some View {
        let mine = message.role == .user
        HStack {
            if mine { Spacer(minLength: 40) }
            Text(message.text.isEmpty ? "…" : message.text)
                .padding(10)
                .background(mine ? Color.accentColor.opacity(0.2) : Color(.secondarySystemBackground))
                .cornerRadius(14)
            if !mine { Spacer(minLength: 40) }
        }
    }
}

private struct InputBar: View {
    @EnvironmentObject private var chat: ChatViewModel
    @Binding var draft: String

    var body: some View {
        HStack {
            TextField("Message", text: $draft)
                .textFieldStyle(.roundedBorder)
                .onSubmit(send)
            if chat.isGenerating {
                Button("Stop", role: .destructive) { chat.stop() }
            } else {
                Button("Send", action: send)
                    .disabled(draft.trimmingCharacters(in: .whitespaces).isEmpty)
            }
        }
        .padding()
    }

    private func send() {
        chat.send(draft)
        draft = ""
    }
}
