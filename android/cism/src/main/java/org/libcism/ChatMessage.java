package org.libcism;

/** One message of a conversation: a role ("system", "user", "assistant") and its text. */
public final class ChatMessage {
    private final String role;
    private final String content;

    public ChatMessage(String role, String content) {
        if (role == null) throw new NullPointerException("role");
        if (content == null) throw new NullPointerException("content");
        this.role = role;
        this.content = content;
    }

    public static ChatMessage system(String content) { return new ChatMessage("system", content); }
    public static ChatMessage user(String content) { return new ChatMessage("user", content); }
    public static ChatMessage assistant(String content) { return new ChatMessage("assistant", content); }

    public String getRole() { return role; }
    public String getContent() { return content; }

    @Override
    public String toString() {
        return role + ": " + content;
    }
}
