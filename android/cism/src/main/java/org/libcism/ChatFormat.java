package org.libcism;

/** Chat formats (cism_chat_format, pinned values). MODEL = the format the model file names. */
public enum ChatFormat {
    MODEL(0), CHATML(1), LLAMA3(2), LLAMA2(3), MISTRAL(4), ZEPHYR(5);

    final int value;

    ChatFormat(int value) {
        this.value = value;
    }

    static ChatFormat of(int value) {
        for (ChatFormat f : values()) if (f.value == value) return f;
        return null;
    }
}
