/* fuzz_chat.c - libFuzzer target: cism_chat_apply on messages taken from the
 * input, with and without a model (CISM_FUZZ_MODEL, a .cism file with a
 * tokenizer and chat format), and the rendered prompt through the tokenizer.
 *
 * Input layout: byte 0 is a control byte (bits 0-2: the format, 0 = the
 * model's, 6 and 7 unknown; bit 3: add the generation prompt; bit 4: no model;
 * bits 5-7: capacity, 0 = ample, k = (k - 1) * 16 bytes); the rest is messages
 * separated by 0xFF, each a role and its content separated by the first 0xFE
 * (bytes that never occur in UTF-8). Checked: a rendering fits the capacity
 * it reports, BUFFER_SMALL reports the size that then works, and the same
 * messages render to the same bytes.
 *
 *   seeds: tests/fuzz/corpus_chat (tests/fuzz/make_corpus.py); run by
 *   tests/fuzz/run_fuzz.sh, replayed under ctest by tests/fuzz/replay_main.c. */
#include "cism.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MSG 64

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static cism_model *g_model;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *path = getenv("CISM_FUZZ_MODEL");
    (void)argc; (void)argv;
    if (!path || cism_model_load(path, NULL, &g_model) != CISM_OK) {
        fprintf(stderr, "set CISM_FUZZ_MODEL to a .cism file with a tokenizer (%s)\n", cism_last_error());
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char text[1 << 18], again[1 << 18];
    static int32_t ids[1 << 16];
    const char *roles[MAX_MSG], *contents[MAX_MSG];
    size_t rl[MAX_MSG], cl[MAX_MSG], len = 0, len2 = 0, cap, i, start;
    int32_t n = 0, nt = 0;
    uint8_t ctl;
    cism_chat_format fmt;
    const cism_model *m;
    cism_status st, st2;
    if (size == 0) {
        if (cism_chat_apply(g_model, CISM_CHAT_CHATML, NULL, NULL, NULL, NULL, 0, 1, text, sizeof(text), &len) != CISM_OK) abort();
        return 0;
    }
    ctl = data[0];
    fmt = ctl & 7;
    m = ctl & 16 ? NULL : g_model;
    cap = (ctl >> 5) ? (size_t)((ctl >> 5) - 1) * 16 : sizeof(text);
    for (start = 1, i = 1; i <= size && n < MAX_MSG; i++) {
        if (i == size || data[i] == 0xFF) {
            const uint8_t *sep = memchr(data + start, 0xFE, i - start);
            roles[n] = (const char *)data + start;
            rl[n] = sep ? (size_t)(sep - (data + start)) : i - start;
            contents[n] = sep ? (const char *)sep + 1 : NULL;
            cl[n] = sep ? i - start - rl[n] - 1 : 0;
            n++;
            start = i + 1;
        }
    }
    cism_chat_format_name(fmt);
    st = cism_chat_apply(m, fmt, roles, rl, contents, cl, n, (ctl >> 3) & 1, text, cap, &len);
    if (st == CISM_ERR_BUFFER_SMALL) {
        if (len <= cap) abort();
        cap = len;
        st = cism_chat_apply(m, fmt, roles, rl, contents, cl, n, (ctl >> 3) & 1, text, cap, &len);
        if (st != CISM_OK) abort();
    }
    if (st != CISM_OK) return 0;
    if (len > cap) abort();
    st2 = cism_chat_apply(m, fmt, roles, rl, contents, cl, n, (ctl >> 3) & 1, again, len, &len2);
    if (st2 != CISM_OK || len2 != len || memcmp(text, again, len) != 0) abort();
    if (m && cism_tokenize(m, text, len, CISM_TOKENIZE_PARSE_SPECIAL, ids, 1 << 16, &nt) == CISM_OK)
        cism_detokenize(m, ids, nt, 0, again, sizeof(again), &len2);
    return 0;
}
