import SwiftUI

@main
struct CismChatApp: App {
    @StateObject private var chat = ChatViewModel()

    var body: some Scene {
        WindowGroup {
            ContentView()
                .environmentObject(chat)
                .onReceive(NotificationCenter.default.publisher(for: UIApplication.didReceiveMemoryWarningNotification)) { _ in
                    chat.didReceiveMemoryWarning()
                }
        }
    }
}
