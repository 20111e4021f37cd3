package org.libcism;

/** Receives generated text on the thread that called {@link Session#generateText}. */
@FunctionalInterface
public interface TextCallback {
    /**
     * @param text newly completed text: whole characters only (an emoji split
     *             across tokens arrives in one piece), never empty
     * @return true to go on, false to stop
     */
    boolean onText(String text);
}
