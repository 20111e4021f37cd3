/* fuzz_loader.c - libFuzzer target: the input as a .cism file through
 * cism_model_load (mapped and read into memory, with and without the weight
 * scan), and, when it loads, through everything a user does next: info and
 * metadata queries, a session that evaluates the first and last token ids,
 * tokenize/detokenize and the model's chat format. Any input must load or be
 * refused with a status; a crash, hang or sanitizer report is a bug.
 *
 * Version 3 files carry a checksum of header, metadata and tensor directory,
 * which a mutation almost always breaks: the harness recomputes it (for 6 of
 * 7 inputs; the 7th is loaded as mutated, so the refusal path stays fuzzed),
 * so mutations reach the parser and the model behind it. Tensor checksums are
 * left as they are: CISM_PARAM_VERIFY_CHECKSUMS is set for 1 input in 4, which
 * then refuses a mutated data section and loads one whose metadata alone
 * changed (docs/FUZZING.md).
 *
 *   tests/fuzz/run_fuzz.sh builds it with -fsanitize=fuzzer,address,undefined;
 *   seeds: tests/fuzz/corpus_loader (tests/fuzz/make_corpus.py), replayed
 *   under ctest by tests/fuzz/replay_main.c. */
#define _POSIX_C_SOURCE 200809L
#include "cism.h"
#include "../../libcism/src/core/crc32.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_path[1024];
static int g_expect_load;  /* CISM_FUZZ_EXPECT_LOAD=1: every input must load (the replay of the valid seeds) */

static void quiet(void *user, int32_t level, const char *message) { (void)user; (void)level; (void)message; }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *dir = getenv("TMPDIR");
    (void)argc; (void)argv;
    snprintf(g_path, sizeof(g_path), "%s/cism_fuzz_loader_%ld.cism", dir && *dir ? dir : "/tmp", (long)getpid());
    cism_set_log_callback(quiet, NULL, 0);
    g_expect_load = getenv("CISM_FUZZ_EXPECT_LOAD") && strcmp(getenv("CISM_FUZZ_EXPECT_LOAD"), "1") == 0;
    return 0;
}

static void use_model(cism_model *m, const uint8_t *data, size_t size) {
    int64_t v, vocab = 0, n;
    int32_t i, k, ids[16], n_ids = 0, nv = 0;
    const void *p;
    const float *logits;
    const char *piece;
    size_t len;
    char text[4096];
    cism_params *sp = NULL;
    cism_session *s = NULL;
    cism_chat_format fmt;
    for (k = 0; k < 16; k++) cism_model_get_info(m, k, &v);
    cism_model_get_info(m, CISM_INFO_VOCAB_SIZE, &vocab);
    cism_model_architecture(m);
    cism_model_eos_ids(m, ids, 16, &n_ids);
    for (i = 0; i < cism_model_meta_count(m); i++) {
        const char *key = cism_model_meta_key(m, i);
        if (!key) abort();
        cism_model_meta_type(m, key);
        cism_model_meta_int(m, key, &v);
        cism_model_meta_bytes(m, key, &p, &n);
        cism_model_meta_array(m, key, &p, &n, &v);
    }
    if (cism_params_create(&sp) != CISM_OK) abort();
    cism_params_set_int(sp, CISM_PARAM_N_THREADS, 1);
    cism_params_set_int(sp, CISM_PARAM_N_CTX, 8);
    cism_params_set_int(sp, CISM_PARAM_N_BATCH, 2);
    cism_params_set_int(sp, CISM_PARAM_KV_TYPE, size & 2 ? CISM_DTYPE_F32 : CISM_DTYPE_F16);
    if (vocab > 0 && cism_session_create(m, sp, &s) == CISM_OK) {
        int32_t toks[3];
        toks[0] = 0;
        toks[1] = (int32_t)(vocab - 1);
        toks[2] = (int32_t)(size % (size_t)vocab);
        if (cism_session_eval(s, toks, 3) == CISM_OK) {
            if (cism_session_logits(s, -1, &logits, &nv) != CISM_OK || nv != vocab) abort();
        }
        cism_session_free(s);
    }
    cism_params_free(sp);
    if (cism_model_has_tokenizer(m)) {
        int32_t toks[64], nt = 0;
        if (cism_tokenize(m, "Hi <s> there", 12, 3, toks, 64, &nt) == CISM_OK)
            cism_detokenize(m, toks, nt, 0, text, sizeof(text), &len);
        for (i = 0; i < 4 && i < vocab; i++) {
            cism_token_to_piece(m, (int32_t)(data[i % size] % vocab), &piece, &len);
        }
    }
    if (cism_model_chat_format(m, &fmt) == CISM_OK) {
        const char *roles[1] = {"user"}, *contents[1] = {"hi"};
        size_t rl[1] = {4}, cl[1] = {2};
        cism_chat_apply(m, CISM_CHAT_MODEL, roles, rl, contents, cl, 1, 1, text, sizeof(text), &len);
    }
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    int i;
    for (i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* The version 3 header checksum (docs/FORMAT.md), recomputed in place when the
   header says where the tensor directory ends and that is inside the input. */
static void fix_header_crc(uint8_t *d, size_t size) {
    static const uint8_t zero[4] = {0, 0, 0, 0};
    uint64_t tens_off, tens_size;
    uint32_t c;
    if (size < 128 || memcmp(d, "CISM\r\n\x1a\n", 8) != 0 || d[8] != 3 || d[9] || d[10] || d[11]) return;
    tens_off = le64(d + 32);
    tens_size = le64(d + 40);
    if (tens_off < 128 || tens_off > size || tens_size > size - tens_off) return;
    c = cism__crc32(0, d, 64);
    c = cism__crc32(c, zero, 4);
    c = cism__crc32(c, d + 68, (size_t)(tens_off + tens_size - 68));
    d[64] = (uint8_t)c; d[65] = (uint8_t)(c >> 8); d[66] = (uint8_t)(c >> 16); d[67] = (uint8_t)(c >> 24);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cism_params *lp = NULL;
    cism_model *m = NULL;
    uint8_t *copy = (uint8_t *)malloc(size ? size : 1);
    FILE *f;
    if (!copy) abort();
    if (size) memcpy(copy, data, size);
    if (size % 7 != 0) fix_header_crc(copy, size);
    f = fopen(g_path, "wb");
    if (!f || (size && fwrite(copy, 1, size, f) != size) || fclose(f) != 0) {
        fprintf(stderr, "fuzz_loader: cannot write %s\n", g_path);
        abort();
    }
    if (cism_params_create(&lp) != CISM_OK) abort();
    cism_params_set_int(lp, CISM_PARAM_USE_MMAP, size % 3 != 0);
    cism_params_set_int(lp, CISM_PARAM_CHECK_WEIGHTS, size % 2);
    cism_params_set_int(lp, CISM_PARAM_VERIFY_CHECKSUMS, size % 4 == 1);
    if (cism_model_load(g_path, lp, &m) == CISM_OK) {
        if (!m) abort();
        use_model(m, data, size);
        cism_model_free(m);
    } else if (m || !cism_last_error() || !*cism_last_error()) {
        abort();  /* a refusal leaves no model and says why */
    } else if (g_expect_load) {
        fprintf(stderr, "fuzz_loader: a seed does not load: %s\n", cism_last_error());
        abort();
    }
    cism_params_free(lp);
    remove(g_path);
    free(copy);
    return 0;
}
