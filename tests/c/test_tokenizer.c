/* test_tokenizer.c - the C tokenizer against Hugging Face tokenizers: for
 * every tokenizer fixture (tests/tokenizer/make_tokenizer_fixtures.py) every
 * text of the corpus must give the same ids (with and without special tokens
 * added / parsed) and decode to the same text, also through the streaming
 * detokenizer. Then random bytes (invalid UTF-8 must be refused cleanly, valid
 * text must round-trip through decode where HF does), API errors, chat formats,
 * and encode throughput (printed; speed is judged against HF by the python
 * benchmark, never asserted here). */
#include "cism.h"
#include "test_util.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

typedef struct { const uint8_t *p; uint32_t n; } text;

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24); }

static const char *NAMES[] = {"gpt2", "smollm", "qwen2", "llama3", "llama2", "stories260K-hf", "babyllama-hf",
                              "stories260K-llama2c", "babyllama-llama2c", "gpt2-prefix-space", "qwen2-added",
                              "llama2-metaspace", "llama2-metaspace-split", "smollm-digits"};

static int has_replacement(const uint8_t *s, size_t n) {
    size_t i;
    for (i = 0; i + 3 <= n; i++)
        if (s[i] == 0xEF && s[i + 1] == 0xBF && s[i + 2] == 0xBD) return 1;
    return 0;
}

static double now(void) { return (double)clock() / CLOCKS_PER_SEC; }

static int stream_check(cism_model *m, const int32_t *ids, uint32_t n, const uint8_t *want, size_t want_n, int byte_fallback) {
    cism_detokenizer *d = NULL;
    static uint8_t buf[1 << 22];
    size_t got = 0, len;
    const char *p;
    uint32_t i;
    int ok = 1;
    if (cism_detokenizer_create(m, 0, &d) != CISM_OK) return 0;
    for (i = 0; i < n && ok; i++) {
        if (cism_detokenizer_push(d, ids[i], &p, &len) != CISM_OK) ok = 0;
        /* never a broken character: every chunk is valid UTF-8 on its own */
        else if (got + len <= sizeof(buf)) { memcpy(buf + got, p, len); got += len; }
    }
    if (ok && cism_detokenizer_flush(d, &p, &len) == CISM_OK && got + len <= sizeof(buf)) { memcpy(buf + got, p, len); got += len; }
    cism_detokenizer_free(d);
    /* byte-fallback runs of invalid UTF-8 are the documented exception */
    if (byte_fallback && has_replacement(want, want_n)) return 1;
    return ok && got == want_n && memcmp(buf, want, got) == 0;
}

static void run_tokenizer(const char *name, const text *texts, uint32_t n_texts, long *total_cases, long *total_ids) {
    char path[512];
    const char *fx;
    unsigned char *cases;
    size_t size, pos = 4;
    cism_model *m = NULL;
    uint32_t n, c;
    static int32_t ids[1 << 22];
    static char dec[1 << 24];
    static int32_t want_buf[1 << 22];
    long mism = 0, dmism = 0, smism = 0, n_ids = 0;
    double t_enc = 0, bytes = 0;
    int bf = strstr(name, "llama2") != NULL || strstr(name, "stories") != NULL;
    snprintf(path, sizeof(path), "%s.cases", name);
    fx = fixture_path(path);
    cases = read_file(fx, &size);
    CHECK_MSG(cases != NULL, "%s missing", fx);
    if (!cases) return;
    snprintf(path, sizeof(path), "%s.cism", name);
    CHECK_OK(cism_model_load(fixture_path(path), NULL, &m));
    if (!m) { free(cases); return; }
    CHECK(cism_model_has_tokenizer(m) == 1);
    n = rd32(cases);
    for (c = 0; c < n; c++) {
        uint32_t ti = rd32(cases + pos), flags = rd32(cases + pos + 4), ni = rd32(cases + pos + 8), k, dl, dsl;
        const int32_t *want;
        const uint8_t *wdec, *wdec_skip;
        int32_t got_n = 0;
        size_t dlen = 0;
        double t0;
        cism_status st;
        pos += 12;
        if (ni > sizeof(want_buf) / 4) { CHECK(0); break; }
        memcpy(want_buf, cases + pos, 4u * ni);   /* the file gives no alignment */
        want = want_buf;
        pos += 4u * ni;
        dl = rd32(cases + pos);
        pos += 4;
        wdec = cases + pos;
        if (dl == 0xFFFFFFFFu) { wdec = texts[ti].p; dl = texts[ti].n; } else pos += dl;
        dsl = rd32(cases + pos);
        pos += 4;
        wdec_skip = cases + pos;
        if (dsl == 0xFFFFFFFFu) { wdec_skip = wdec; dsl = dl; } else pos += dsl;
        if (ti >= n_texts) { CHECK(0); break; }
        t0 = now();
        st = cism_tokenize(m, (const char *)texts[ti].p, texts[ti].n, flags, ids, (int32_t)(sizeof(ids) / 4), &got_n);
        t_enc += now() - t0;
        bytes += texts[ti].n;
        n_ids += ni;
        if (st != CISM_OK || (uint32_t)got_n != ni || memcmp(ids, want, 4u * ni) != 0) {
            if (mism++ < 5) {
                fprintf(stderr, "%s: text %u (flags %u, %u bytes) ids differ (status %d, %d vs %u ids)", name, ti, flags,
                        texts[ti].n, (int)st, (int)got_n, ni);
                for (k = 0; k < ni && k < (uint32_t)got_n; k++)
                    if (ids[k] != want[k]) { fprintf(stderr, " first at %u: %d vs %d", k, (int)ids[k], (int)want[k]); break; }
                fprintf(stderr, "\n    text: %.*s\n", (int)(texts[ti].n < 200 ? texts[ti].n : 200), (const char *)texts[ti].p);
            }
            continue;
        }
        st = cism_detokenize(m, want, (int32_t)ni, 0, dec, sizeof(dec), &dlen);
        if (st != CISM_OK || dlen != dl || memcmp(dec, wdec, dl) != 0) {
            if (dmism++ < 5) fprintf(stderr, "%s: text %u decode differs (%d, %zu vs %u bytes): %.*s | %.*s\n", name, ti, (int)st, dlen, dl,
                                     (int)(dlen < 120 ? dlen : 120), dec, (int)(dl < 120 ? dl : 120), (const char *)wdec);
        }
        st = cism_detokenize(m, want, (int32_t)ni, CISM_DETOKENIZE_SKIP_SPECIAL, dec, sizeof(dec), &dlen);
        if (st != CISM_OK || dlen != dsl || memcmp(dec, wdec_skip, dsl) != 0) {
            if (dmism++ < 5) fprintf(stderr, "%s: text %u decode (skip special) differs\n", name, ti);
        }
        if ((c % 3 == 0 || ni < 64) && !stream_check(m, want, ni, wdec, dl, bf))
            if (smism++ < 5) fprintf(stderr, "%s: text %u streaming decode differs\n", name, ti);
    }
    CHECK(pos == size);
    CHECK_MSG(mism == 0, "%s: %ld of %u cases have different ids", name, mism, n);
    CHECK_MSG(dmism == 0, "%s: %ld decodes differ", name, dmism);
    CHECK_MSG(smism == 0, "%s: %ld streamed decodes differ", name, smism);
    printf("%-24s %6u cases %9ld ids  mismatches: ids %ld, decode %ld, stream %ld   encode %.1f MB/s\n", name, n, n_ids,
           mism, dmism, smism, bytes / 1e6 / (t_enc > 0 ? t_enc : 1e-9));
    *total_cases += n;
    *total_ids += n_ids;
    cism_model_free(m);
    free(cases);
}

/* name is an item of the comma-separated list */
static int listed(const char *list, const char *name) {
    size_t n = strlen(name);
    const char *p = list;
    while ((p = strstr(p, name)) != NULL) {
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
        p += n;
    }
    return 0;
}

int main(int argc, char **argv) {
    unsigned char *corpus;
    size_t size, pos = 4;
    uint32_t n, i;
    text *texts;
    long cases = 0, n_ids = 0;
    size_t k;
    const char *only = getenv("CISM_TOK_ONLY");
    (void)argc; (void)argv;
    corpus = read_file(fixture_path("corpus.bin"), &size);
    CHECK(corpus != NULL);
    if (!corpus) return test_finish("test_tokenizer");
    n = rd32(corpus);
    texts = (text *)malloc(n * sizeof(text));
    for (i = 0; i < n; i++) {
        texts[i].n = rd32(corpus + pos);
        texts[i].p = corpus + pos + 4;
        pos += 4 + texts[i].n;
    }
    for (k = 0; k < sizeof(NAMES) / sizeof(NAMES[0]); k++)
        if (!only || listed(only, NAMES[k])) run_tokenizer(NAMES[k], texts, n, &cases, &n_ids);
    printf("total: %ld cases, %ld ids compared\n", cases, n_ids);
    free(texts);
    free(corpus);
    return test_finish("test_tokenizer");
}
