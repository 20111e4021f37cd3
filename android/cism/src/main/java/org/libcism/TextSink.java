package org.libcism;

/** What the JNI glue calls during {@link Session#generateText} (package-private). */
interface TextSink {
    /**
     * @param token the generated token, or -1 for text held back until the end
     * @param utf8  the text it completes, or null when it completes none yet
     * @return true to go on
     */
    boolean onPiece(int token, byte[] utf8);
}
