package org.libcism;

/** Receives each generated token on the thread that called {@link Session#generate}. */
@FunctionalInterface
public interface TokenCallback {
    /**
     * @param token the token id just sampled
     * @return true to go on, false to stop after this token
     */
    boolean onToken(int token);
}
