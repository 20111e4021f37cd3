/* test_session_state.c - cism_session_save / cism_session_load (issue 16, item 7):
 * a restored session (and sampler) continues bit for bit as the uninterrupted
 * one, for f16 and f32 KV caches, with and without LOGITS_ALL, greedy and
 * sampled; states from another model, of another layout version or KV type,
 * larger than the context, truncated or corrupted are refused and leave the
 * session unchanged; a failed save leaves the existing file untouched. */
#include "cism.h"
#include "test_util.h"

#include <string.h>
#if !defined(_WIN32)
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#endif

#define N_PROMPT 21
#define N_STEPS 24
#define BATCH 8
#define STATE "test_session_state.tmp"

static int32_t g_prompt[N_PROMPT];

static cism_session *new_session(cism_model *m, int kv_type, int logits_all, int n_ctx) {
    cism_params *p = NULL;
    cism_session *s = NULL;
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, 2));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KV_TYPE, kv_type));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_LOGITS_ALL, logits_all));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_BATCH, BATCH));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_CTX, n_ctx));
    CHECK_OK(cism_session_create(m, p, &s));
    cism_params_free(p);
    return s;
}

static cism_sampler *new_sampler(void) {
    cism_sampler *sp = NULL;
    CHECK_OK(cism_sampler_create(&sp));
    CHECK_OK(cism_sampler_set_float(sp, CISM_SAMPLER_TEMPERATURE, 0.9));
    CHECK_OK(cism_sampler_set_int(sp, CISM_SAMPLER_TOP_K, 40));
    CHECK_OK(cism_sampler_set_float(sp, CISM_SAMPLER_TOP_P, 0.95));
    CHECK_OK(cism_sampler_set_float(sp, CISM_SAMPLER_REPEAT_PENALTY, 1.3));
    CHECK_OK(cism_sampler_set_int(sp, CISM_SAMPLER_PENALTY_LAST_N, 16));
    CHECK_OK(cism_sampler_set_int(sp, CISM_SAMPLER_SEED, 1234));
    return sp;
}

/* N_STEPS steps from the session's state: each picks a token (sampler, or the
   argmax when NULL), records it and the logits it came from, evaluates it. */
typedef struct run { int32_t tok[N_STEPS]; float *logits; } run;

static void continue_run(cism_session *s, cism_sampler *sp, run *r, int32_t vocab) {
    int i;
    for (i = 0; i < N_STEPS; i++) {
        const float *lg = NULL;
        int32_t nv = 0, t = 0, j;
        CHECK_OK(cism_session_logits(s, -1, &lg, &nv));
        if (!lg || nv != vocab) return;
        memcpy(r->logits + (size_t)i * (size_t)vocab, lg, (size_t)vocab * sizeof(float));
        if (sp) {
            CHECK_OK(cism_sampler_sample(sp, lg, nv, &t));
            CHECK_OK(cism_sampler_accept(sp, t));
        } else {
            for (j = 1; j < nv; j++) if (lg[j] > lg[t]) t = j;
        }
        r->tok[i] = t;
        CHECK_OK(cism_session_eval(s, &t, 1));
    }
}

static int same_run(const run *a, const run *b, int32_t vocab) {
    return memcmp(a->tok, b->tok, sizeof(a->tok)) == 0 &&
           memcmp(a->logits, b->logits, (size_t)N_STEPS * (size_t)vocab * sizeof(float)) == 0;
}

static void run_init(run *r, int32_t vocab) {
    memset(r->tok, 0, sizeof(r->tok));
    r->logits = (float *)calloc((size_t)N_STEPS * (size_t)vocab, sizeof(float));
}

static void round_trip(cism_model *m, int kv_type, int logits_all, int32_t vocab) {
    cism_session *a = new_session(m, kv_type, logits_all, 0), *b, *g, *c;
    cism_sampler *sa = new_sampler(), *sb = NULL;
    run ra, rb, rg, rc;
    float *rows = (float *)calloc((size_t)3 * (size_t)vocab, sizeof(float));
    int i, sampled_any = 0;
    run_init(&ra, vocab); run_init(&rb, vocab); run_init(&rg, vocab); run_init(&rc, vocab);
    CHECK_OK(cism_session_eval(a, g_prompt, N_PROMPT - 3));
    for (i = 0; i < N_PROMPT - 3; i++) CHECK_OK(cism_sampler_accept(sa, g_prompt[i]));
    for (i = N_PROMPT - 3; i < N_PROMPT; i++) { /* the generator advances before the save */
        const float *lg = NULL;
        int32_t t = 0;
        CHECK_OK(cism_session_logits(a, -1, &lg, NULL));
        if (lg) CHECK_OK(cism_sampler_sample(sa, lg, vocab, &t));
        CHECK_OK(cism_sampler_accept(sa, g_prompt[i]));
    }
    CHECK_OK(cism_session_eval(a, g_prompt + N_PROMPT - 3, 3));
    if (logits_all) /* the last eval's rows */
        for (i = 0; i < 3; i++) {
            const float *lg = NULL;
            CHECK_OK(cism_session_logits(a, i, &lg, NULL));
            if (lg) memcpy(rows + (size_t)i * (size_t)vocab, lg, (size_t)vocab * sizeof(float));
        }
    CHECK_OK(cism_session_save(a, sa, STATE));
    continue_run(a, sa, &ra, vocab);

    /* restored into a new session and a sampler with default parameters */
    b = new_session(m, kv_type, logits_all, 0);
    CHECK_OK(cism_sampler_create(&sb));
    CHECK_OK(cism_session_load(b, sb, STATE));
    CHECK(cism_session_n_past(b) == N_PROMPT);
    {
        int32_t toks[N_PROMPT + 1], n = 0;
        CHECK(cism_session_tokens(b, toks, 2, &n) == CISM_ERR_BUFFER_SMALL && n == N_PROMPT);
        CHECK_OK(cism_session_tokens(b, toks, N_PROMPT + 1, &n));
        CHECK(n == N_PROMPT && memcmp(toks, g_prompt, sizeof(g_prompt)) == 0);
    }
    if (logits_all)
        for (i = 0; i < 3; i++) {
            const float *lg = NULL;
            CHECK_OK(cism_session_logits(b, i, &lg, NULL));
            CHECK_MSG(lg && memcmp(lg, rows + (size_t)i * (size_t)vocab, (size_t)vocab * sizeof(float)) == 0,
                      "kv %d: logits row %d not restored", kv_type, i);
        }
    continue_run(b, sb, &rb, vocab);
    CHECK_MSG(same_run(&ra, &rb, vocab), "kv %d logits_all %d: sampled continuation differs after load", kv_type, logits_all);
    for (i = 1; i < N_STEPS; i++) if (ra.tok[i] != ra.tok[0]) sampled_any = 1;
    CHECK(sampled_any);

    /* greedy: the uninterrupted run from a fresh prefill, against a restore
       into a session with another n_ctx and no LOGITS_ALL */
    g = new_session(m, kv_type, 0, 0);
    CHECK_OK(cism_session_eval(g, g_prompt, N_PROMPT));
    continue_run(g, NULL, &rg, vocab);
    c = new_session(m, kv_type, 0, N_PROMPT + N_STEPS);
    CHECK_OK(cism_session_load(c, NULL, STATE));
    continue_run(c, NULL, &rc, vocab);
    CHECK_MSG(same_run(&rg, &rc, vocab), "kv %d logits_all %d: greedy continuation differs after load", kv_type, logits_all);
    CHECK(!same_run(&ra, &rg, vocab)); /* the sampled run really sampled */

    cism_session_free(a); cism_session_free(b); cism_session_free(g); cism_session_free(c);
    cism_sampler_free(sa); cism_sampler_free(sb);
    free(ra.logits); free(rb.logits); free(rg.logits); free(rc.logits); free(rows);
}

/* CRC-32 as zlib's, to forge a well-formed file of another version */
static uint32_t crc32_test(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    size_t i;
    int k;
    for (i = 0; i < n; i++) {
        c ^= p[i];
        for (k = 0; k < 8; k++) c = (c & 1u) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
}

/* load of `path` into a session holding 3 evaluated tokens fails with `want`
   and changes nothing */
static void refused(cism_model *m, int kv_type, int n_ctx, const char *path, cism_sampler *sp, cism_status want,
                    const char *what, const char *needle) {
    cism_session *s = new_session(m, kv_type, 0, n_ctx);
    const float *lg = NULL;
    float before[8];
    cism_status st;
    CHECK_OK(cism_session_eval(s, g_prompt, 3));
    CHECK_OK(cism_session_logits(s, -1, &lg, NULL));
    if (lg) memcpy(before, lg, sizeof(before));
    st = cism_session_load(s, sp, path);
    CHECK_MSG(st == want, "%s: status %s (%s), want %s", what, cism_status_str(st), cism_last_error(), cism_status_str(want));
    CHECK_MSG(strlen(cism_last_error()) > 10, "%s: no message", what);
    CHECK_MSG(strstr(cism_last_error(), needle) != NULL, "%s: message '%s' does not say '%s'", what, cism_last_error(), needle);
    CHECK(cism_session_n_past(s) == 3);
    CHECK_OK(cism_session_logits(s, -1, &lg, NULL));
    CHECK(lg && memcmp(lg, before, sizeof(before)) == 0);
    cism_session_free(s);
}

static void refusals(cism_model *m, cism_model *other) {
    cism_session *a = new_session(m, CISM_DTYPE_F16, 0, 0);
    cism_sampler *sp = new_sampler();
    unsigned char *bytes, *copy;
    size_t size = 0;
    uint32_t crc;
    CHECK_OK(cism_session_eval(a, g_prompt, N_PROMPT));
    CHECK_OK(cism_session_save(a, NULL, STATE));
    bytes = read_file(STATE, &size);
    CHECK(bytes && size > 200);
    if (!bytes) return;
    copy = (unsigned char *)malloc(size);

    refused(other, CISM_DTYPE_F16, 0, STATE, NULL, CISM_ERR_INVALID_ARG, "other model", "another model");
    refused(m, CISM_DTYPE_F32, 0, STATE, NULL, CISM_ERR_INVALID_ARG, "other KV type", "KV cache");
    refused(m, CISM_DTYPE_F16, N_PROMPT - 1, STATE, NULL, CISM_ERR_CONTEXT_FULL, "n_ctx too small", "n_ctx");
    refused(m, CISM_DTYPE_F16, 0, STATE, sp, CISM_ERR_INVALID_ARG, "sampler asked, none saved", "without a sampler");
    refused(m, CISM_DTYPE_F16, 0, "no-such-state.tmp", NULL, CISM_ERR_IO, "missing file", "no-such-state");

    CHECK(write_file(STATE ".bad", bytes, size - 1) == 0);
    refused(m, CISM_DTYPE_F16, 0, STATE ".bad", NULL, CISM_ERR_FORMAT, "truncated by a byte", "truncated");
    CHECK(write_file(STATE ".bad", bytes, 50) == 0);
    refused(m, CISM_DTYPE_F16, 0, STATE ".bad", NULL, CISM_ERR_FORMAT, "truncated in the header", "truncated");
    memcpy(copy, bytes, size);
    copy[size / 2] ^= 0x10;
    CHECK(write_file(STATE ".bad", copy, size) == 0);
    refused(m, CISM_DTYPE_F16, 0, STATE ".bad", NULL, CISM_ERR_FORMAT, "flipped byte", "checksum");
    memcpy(copy, bytes, size);
    copy[8] = 2; /* layout version 2, with a valid checksum: the version check itself refuses it */
    crc = crc32_test(copy, size - 4);
    copy[size - 4] = (unsigned char)crc; copy[size - 3] = (unsigned char)(crc >> 8);
    copy[size - 2] = (unsigned char)(crc >> 16); copy[size - 1] = (unsigned char)(crc >> 24);
    CHECK(write_file(STATE ".bad", copy, size) == 0);
    refused(m, CISM_DTYPE_F16, 0, STATE ".bad", NULL, CISM_ERR_UNSUPPORTED, "layout version 2", "version 2");
    refused(m, CISM_DTYPE_F16, 0, fixture_path("stories260K.cism"), NULL, CISM_ERR_FORMAT, "a model file", "model file");
    remove(STATE ".bad");

    /* a failed save leaves the existing file untouched */
    CHECK(cism_session_save(a, NULL, "no-such-folder/state.tmp") == CISM_ERR_IO);
#if !defined(_WIN32)
    {
        struct rlimit old, lim;
        unsigned char *after;
        size_t after_size = 0;
        DIR *dir;
        struct dirent *e;
        int leftovers = 0;
        CHECK_OK(cism_session_eval(a, g_prompt, 5)); /* a different state */
        signal(SIGXFSZ, SIG_IGN);
        getrlimit(RLIMIT_FSIZE, &old);
        lim = old;
        lim.rlim_cur = 4096;  /* writes past 4 KiB fail (EFBIG) */
        CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
        CHECK(cism_session_save(a, sp, STATE) == CISM_ERR_IO);
        setrlimit(RLIMIT_FSIZE, &old);
        after = read_file(STATE, &after_size);
        CHECK_MSG(after && after_size == size && memcmp(after, bytes, size) == 0, "a failed save changed the file");
        free(after);
        dir = opendir(".");
        while (dir && (e = readdir(dir)) != NULL)
            if (strncmp(e->d_name, STATE ".tmp-", strlen(STATE ".tmp-")) == 0) leftovers++;
        if (dir) closedir(dir);
        CHECK_MSG(leftovers == 0, "%d temporary files left behind", leftovers);
    }
#endif
    remove(STATE);
    free(bytes);
    free(copy);
    cism_sampler_free(sp);
    cism_session_free(a);
}

int main(int argc, char **argv) {
    cism_model *m = NULL, *other = NULL;
    int64_t vocab = 0;
    int i;
    (void)argc;
    (void)argv;
    CHECK_OK(cism_model_load(fixture_path("stories260K.cism"), NULL, &m));
    CHECK_OK(cism_model_load(fixture_path("stories260K-hf-f16.cism"), NULL, &other));
    if (!m || !other) return test_finish("test_session_state");
    CHECK_OK(cism_model_get_info(m, CISM_INFO_VOCAB_SIZE, &vocab));
    for (i = 0; i < N_PROMPT; i++) g_prompt[i] = (int32_t)((i * 37 + 11) % vocab);
    round_trip(m, CISM_DTYPE_F16, 0, (int32_t)vocab);
    round_trip(m, CISM_DTYPE_F16, 1, (int32_t)vocab);
    round_trip(m, CISM_DTYPE_F32, 0, (int32_t)vocab);
    round_trip(m, CISM_DTYPE_F32, 1, (int32_t)vocab);
    refusals(m, other);
    cism_model_free(m);
    cism_model_free(other);
    return test_finish("test_session_state");
}
