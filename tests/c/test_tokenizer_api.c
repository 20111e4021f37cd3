/* test_tokenizer_api.c - the tokenizer API around the parity test: random
 * bytes (invalid UTF-8 refused cleanly, valid text round-trips through
 * decode on byte-level tokenizers), buffer-size reporting, token queries,
 * chat formats against the Jinja templates (tests/tokenizer), and hostile
 * tokenizer metadata (a clear error, never a crash). */
#include "cism.h"
#include "test_util.h"

#include <string.h>

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24); }

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static int valid_utf8(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len, k;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c >= 0xE0 && c <= 0xEF) len = 3;
        else if (c >= 0xF0 && c <= 0xF4) len = 4;
        else return 0;
        if (i + len > n) return 0;
        cp = c & (0xFF >> (len + 1));
        for (k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += len;
    }
    return 1;
}

static void random_bytes(const char *name, int exact_roundtrip) {
    char path[256];
    cism_model *m = NULL;
    static uint8_t text[512];
    static int32_t ids[4096];
    static char dec[8192];
    int iter, refused = 0, accepted = 0;
    snprintf(path, sizeof(path), "%s.cism", name);
    CHECK_OK(cism_model_load(fixture_path(path), NULL, &m));
    if (!m) return;
    for (iter = 0; iter < 20000; iter++) {
        size_t n = rnd() % 64, i;
        int32_t n_ids = 0;
        cism_status st;
        int mode = iter % 4;
        if (mode == 3) {   /* valid UTF-8 from random code points */
            n = 0;
            while (n + 4 < 60) {
                uint32_t cp = rnd() % 4 ? rnd() % 0x3000 : rnd() % 0x110000;
                if (cp >= 0xD800 && cp <= 0xDFFF) continue;
                if (cp < 0x80) text[n++] = (uint8_t)cp;
                else if (cp < 0x800) { text[n++] = (uint8_t)(0xC0 | (cp >> 6)); text[n++] = (uint8_t)(0x80 | (cp & 63)); }
                else if (cp < 0x10000) { text[n++] = (uint8_t)(0xE0 | (cp >> 12)); text[n++] = (uint8_t)(0x80 | ((cp >> 6) & 63)); text[n++] = (uint8_t)(0x80 | (cp & 63)); }
                else { text[n++] = (uint8_t)(0xF0 | (cp >> 18)); text[n++] = (uint8_t)(0x80 | ((cp >> 12) & 63)); text[n++] = (uint8_t)(0x80 | ((cp >> 6) & 63)); text[n++] = (uint8_t)(0x80 | (cp & 63)); }
                if (rnd() % 8 == 0) break;
            }
        }
        for (i = 0; mode != 3 && i < n; i++) {
            if (mode == 0) text[i] = (uint8_t)rnd();                       /* anything */
            else if (mode == 1) text[i] = (uint8_t)(0x80 + rnd() % 0x80);  /* continuation / lead bytes */
            else text[i] = (uint8_t)(rnd() % 3 ? ' ' + rnd() % 95 : 0xC0 + rnd() % 0x40);
        }
        st = cism_tokenize(m, (const char *)text, n, CISM_TOKENIZE_PARSE_SPECIAL, ids, 4096, &n_ids);
        if (!valid_utf8(text, n)) {
            CHECK_MSG(st == CISM_ERR_INVALID_ARG, "%s: invalid UTF-8 gave status %d", name, (int)st);
            refused++;
            continue;
        }
        accepted++;
        CHECK_MSG(st == CISM_OK, "%s: valid text refused: %s", name, cism_last_error());
        if (st == CISM_OK && exact_roundtrip) {
            size_t dl = 0;
            CHECK_OK(cism_detokenize(m, ids, n_ids, 0, dec, sizeof(dec), &dl));
            CHECK_MSG(dl == n && memcmp(dec, text, n) == 0, "%s: decode(encode(x)) != x", name);
        }
    }
    printf("%s: %d random invalid texts refused, %d valid accepted\n", name, refused, accepted);
    cism_model_free(m);
}

static void api_checks(void) {
    cism_model *m = NULL;
    int32_t ids[16], n = -1, tok = -1;
    const char *piece;
    size_t len = 0;
    uint32_t flags = 0;
    char buf[8];
    CHECK_OK(cism_model_load(fixture_path("qwen2.cism"), NULL, &m));
    if (!m) return;
    /* sizes are reported when the buffer is too small */
    CHECK(cism_tokenize(m, "Hello world", 11, 0, NULL, 0, &n) == CISM_ERR_BUFFER_SMALL && n == 2);
    CHECK_OK(cism_tokenize(m, "Hello world", 11, 0, ids, 16, &n));
    CHECK(n == 2 && ids[0] == 9707 && ids[1] == 1879);
    CHECK(cism_detokenize(m, ids, 2, 0, buf, 4, &len) == CISM_ERR_BUFFER_SMALL && len == 11);
    CHECK(cism_tokenize(m, "x", 1, 99, ids, 16, &n) == CISM_ERR_INVALID_ARG);
    CHECK(cism_tokenize(NULL, "x", 1, 0, ids, 16, &n) == CISM_ERR_INVALID_ARG);
    CHECK(cism_tokenize(m, "\xff", 1, 0, ids, 16, &n) == CISM_ERR_INVALID_ARG && strstr(cism_last_error(), "UTF-8"));
    /* special tokens: parsed or text */
    CHECK_OK(cism_tokenize(m, "<|im_end|>", 10, CISM_TOKENIZE_PARSE_SPECIAL, ids, 16, &n));
    CHECK(n == 1 && ids[0] == 151645);
    CHECK_OK(cism_tokenize(m, "<|im_end|>", 10, 0, ids, 16, &n));
    CHECK(n > 1);
    CHECK_OK(cism_token_to_piece(m, 151645, &piece, &len));
    CHECK(len == 10 && memcmp(piece, "<|im_end|>", 10) == 0);
    CHECK_OK(cism_token_from_piece(m, "<|im_end|>", 10, &tok));
    CHECK(tok == 151645);
    CHECK_OK(cism_token_from_piece(m, "\xC4\xA0the", 5, &tok));   /* "Ġthe" */
    CHECK(tok == 279);
    CHECK_OK(cism_token_flags(m, 151645, &flags));
    CHECK(flags == (CISM_TOKEN_ADDED | CISM_TOKEN_SPECIAL));
    CHECK(cism_token_flags(m, 151646, &flags) == CISM_ERR_TOKEN_RANGE);
    CHECK(cism_token_to_piece(m, -1, &piece, &len) == CISM_ERR_TOKEN_RANGE);
    ids[0] = 9707; ids[1] = 999999;
    CHECK(cism_detokenize(m, ids, 2, 0, buf, sizeof(buf), &len) == CISM_ERR_TOKEN_RANGE);
    cism_model_free(m);
    /* llama2: BOS from the template, byte tokens */
    CHECK_OK(cism_model_load(fixture_path("llama2.cism"), NULL, &m));
    if (!m) return;
    CHECK_OK(cism_tokenize(m, "Hello world", 11, CISM_TOKENIZE_ADD_SPECIAL, ids, 16, &n));
    CHECK(n == 3 && ids[0] == 1 && ids[1] == 15043 && ids[2] == 3186);
    CHECK_OK(cism_token_flags(m, 13, &flags));   /* <0x0A> */
    CHECK(flags == (CISM_TOKEN_NORMAL | CISM_TOKEN_BYTE));
    cism_model_free(m);
}

/* a stream splitting a 4-byte character over byte tokens never emits half of it */
static void stream_split_char(void) {
    cism_model *m = NULL;
    cism_detokenizer *d = NULL;
    int32_t ids[64], n = 0, i;
    const char *p;
    size_t len, total = 0;
    char out[64];
    CHECK_OK(cism_model_load(fixture_path("llama2.cism"), NULL, &m));
    if (!m) return;
    CHECK_OK(cism_tokenize(m, "\xF0\x9F\xA4\x96!", 5, 0, ids, 64, &n));  /* robot face: byte fallback */
    CHECK(n >= 5);
    CHECK_OK(cism_detokenizer_create(m, 0, &d));
    cism_model_free(m);   /* the detokenizer keeps the model alive */
    for (i = 0; d && i < n; i++) {
        CHECK_OK(cism_detokenizer_push(d, ids[i], &p, &len));
        CHECK(len == 0 || valid_utf8((const uint8_t *)p, len));
        if (total + len <= sizeof(out)) { memcpy(out + total, p, len); total += len; }
    }
    CHECK(total == 5 && memcmp(out, "\xF0\x9F\xA4\x96!", 5) == 0);
    /* an incomplete character at the end becomes U+FFFD on flush */
    if (d) {
        CHECK_OK(cism_detokenizer_push(d, 3 + 0xF0, &p, &len));
        CHECK(len == 0);
        CHECK_OK(cism_detokenizer_flush(d, &p, &len));
        CHECK(len == 3 && memcmp(p, "\xEF\xBF\xBD", 3) == 0);
    }
    cism_detokenizer_free(d);
}

static void chat_cases(void) {
    size_t size, pos = 4;
    unsigned char *data = read_file(fixture_path("chat.cases"), &size);
    uint32_t n, c;
    int checked = 0;
    CHECK(data != NULL);
    if (!data) return;
    n = rd32(data);
    for (c = 0; c < n; c++) {
        char name[64], fmt[32], path[96];
        const char *roles[8], *contents[8];
        size_t rl[8], cl[8], len;
        uint32_t k, nm, l, gen;
        const uint8_t *want;
        cism_model *m = NULL;
        cism_chat_format f = -1;
        static char out[4096];
        l = rd32(data + pos); memcpy(name, data + pos + 4, l); name[l] = 0; pos += 4 + l;
        l = rd32(data + pos); memcpy(fmt, data + pos + 4, l); fmt[l] = 0; pos += 4 + l;
        nm = rd32(data + pos); pos += 4;
        for (k = 0; k < nm; k++) {
            rl[k] = rd32(data + pos); roles[k] = (const char *)data + pos + 4; pos += 4 + rl[k];
            cl[k] = rd32(data + pos); contents[k] = (const char *)data + pos + 4; pos += 4 + cl[k];
        }
        gen = rd32(data + pos); pos += 4;
        l = rd32(data + pos); want = data + pos + 4; pos += 4 + l;
        snprintf(path, sizeof(path), "%s.cism", name);
        CHECK_OK(cism_model_load(fixture_path(path), NULL, &m));
        if (!m) continue;
        CHECK_MSG(fmt[0] != 0, "%s: the converter did not recognize the chat template", name);
        CHECK_OK(cism_model_chat_format(m, &f));
        CHECK_MSG(cism_chat_format_name(f) && strcmp(cism_chat_format_name(f), fmt) == 0, "%s: chat format %d, want %s", name, (int)f, fmt);
        CHECK_OK(cism_chat_apply(m, CISM_CHAT_MODEL, roles, rl, contents, cl, (int32_t)nm, (int32_t)gen, out, sizeof(out), &len));
        CHECK_MSG(len == l && memcmp(out, want, l) == 0, "%s (%s): chat text differs:\n%.*s\n---- want\n%.*s", name, fmt,
                  (int)len, out, (int)l, (const char *)want);
        checked++;
        cism_model_free(m);
    }
    CHECK(pos == size);
    printf("chat formats: %d renderings identical to the Jinja templates\n", checked);
    free(data);
}

/* Hostile tokenizer metadata written by the fixture script: each must be refused. */
static void hostile(void) {
    static const char *bad[] = {"bad-merge-id", "bad-flags-len", "bad-step", "bad-utf8", "bad-template-id",
                                "bad-merge-pair", "bad-dup-token", "bad-types"};
    size_t k;
    for (k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        char path[96];
        cism_model *m = NULL;
        cism_status st;
        snprintf(path, sizeof(path), "%s.cism", bad[k]);
        st = cism_model_load(fixture_path(path), NULL, &m);
        CHECK_MSG(m == NULL && (st == CISM_ERR_FORMAT || st == CISM_ERR_UNSUPPORTED), "%s: status %d", bad[k], (int)st);
        CHECK(strlen(cism_last_error()) > 10);
        cism_model_free(m);
    }
}

int main(int argc, char **argv) {
    (void)argc; (void)argv;
    api_checks();
    stream_split_char();
    random_bytes("gpt2", 1);
    random_bytes("llama3", 1);
    random_bytes("qwen2", 0);
    random_bytes("llama2", 0);
    random_bytes("stories260K-llama2c", 0);
    chat_cases();
    hostile();
    return test_finish("test_tokenizer_api");
}
