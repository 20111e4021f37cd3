/* fuzz_tokenizer.c - libFuzzer target: random bytes through tokenize,
 * detokenize, the streaming detokenizer and chat formatting of one model.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Ilibcism/include \
 *       tests/fuzz/fuzz_tokenizer.c libcism/src/(every .c) -lm -lpthread -o fuzz_tokenizer
 *   CISM_FUZZ_MODEL=build/.../tokenizer_fixtures/qwen2-added.cism ./fuzz_tokenizer -max_total_time=300
 *
 * tests/fuzz/run_fuzz.sh builds it and runs it over several tokenizers. */
#include "cism.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cism_model *g_model;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
    static int32_t ids[1 << 16];
    static char text[1 << 18];
    int32_t n = 0, i;
    size_t len = 0;
    uint32_t flags = size ? data[0] & 3 : 0;
    cism_detokenizer *d = NULL;
    const char *p;
    const char *roles[2] = {"system", "user"};
    const char *contents[2];
    size_t rl[2] = {6, 4}, cl[2];
    if (cism_tokenize(g_model, (const char *)data, size, flags, ids, 1 << 16, &n) == CISM_OK) {
        if (cism_detokenize(g_model, ids, n, flags & 1, text, sizeof(text), &len) != CISM_OK) abort();
        if (cism_detokenizer_create(g_model, flags & 1, &d) != CISM_OK) abort();
        for (i = 0; i < n; i++)
            if (cism_detokenizer_push(d, ids[i], &p, &len) != CISM_OK) abort();
        cism_detokenizer_flush(d, &p, &len);
        cism_detokenizer_free(d);
        contents[0] = (const char *)data;
        cl[0] = size / 2;
        contents[1] = (const char *)data + size / 2;
        cl[1] = size - size / 2;
        for (i = 1; i <= 5; i++)
            cism_chat_apply(g_model, i, roles, rl, contents, cl, 2, 1, text, sizeof(text), &len);
    }
    /* arbitrary ids, valid or not */
    n = (int32_t)(size / 4 < 1024 ? size / 4 : 1024);
    memcpy(ids, data, (size_t)n * 4);
    cism_detokenize(g_model, ids, n, 0, text, sizeof(text), &len);
    return 0;
}
