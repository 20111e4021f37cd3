/* test_memory.c - the device section of cism.h: weights used in place from the
 * file mapping (no copy: the process does not grow by the file's size),
 * prefetch/lock/resident bytes, session size estimate, trim, default threads. */
#include "cism.h"
#include "model/model.h"
#include "platform/platform.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

/* ---- a big synthetic .cism (zero weights), streamed to disk --------------------- */
static void w32(FILE *f, uint32_t v) { unsigned char c[4]; int i; for (i = 0; i < 4; i++) c[i] = (unsigned char)(v >> (8 * i)); fwrite(c, 1, 4, f); }
static void w64(FILE *f, uint64_t v) { unsigned char c[8]; int i; for (i = 0; i < 8; i++) c[i] = (unsigned char)(v >> (8 * i)); fwrite(c, 1, 8, f); }
static void wstr(FILE *f, const char *s) { w32(f, (uint32_t)strlen(s)); fwrite(s, 1, strlen(s), f); }
static void wkey_int(FILE *f, const char *k, int64_t v) { wstr(f, k); w32(f, CISM_META_INT); w64(f, (uint64_t)v); }
static void wkey_f64(FILE *f, const char *k, double v) { uint64_t b; memcpy(&b, &v, 8); wstr(f, k); w32(f, CISM_META_FLOAT); w64(f, b); }
static uint64_t pad64(uint64_t v) { return (v + 63) / 64 * 64; }

enum { VOCAB = 32, DIM = 1024, FFN = 4096, HEADS = 8, HEAD_DIM = 128, CTX = 64 };
typedef struct { const char *name; int64_t r, c; } tens;

/* One layer of dim 1024 / ffn 4096 in f32: 64 MiB of weights. Returns the file size. */
static uint64_t write_big_model(const char *path) {
    tens t[12];
    int nt = 0, i;
    uint64_t meta_size, dir_size, data_size = 0, off = 0, data_off;
    long pos;
    FILE *f = fopen(path, "wb");
    static const unsigned char zeros[65536];
    if (!f) return 0;
    t[nt].name = "token_embd"; t[nt].r = VOCAB; t[nt++].c = DIM;
    t[nt].name = "output_norm"; t[nt].r = DIM; t[nt++].c = 0;
    t[nt].name = "blk.0.attn_norm"; t[nt].r = DIM; t[nt++].c = 0;
    t[nt].name = "blk.0.attn_q"; t[nt].r = HEADS * HEAD_DIM; t[nt++].c = DIM;
    t[nt].name = "blk.0.attn_k"; t[nt].r = HEADS * HEAD_DIM; t[nt++].c = DIM;
    t[nt].name = "blk.0.attn_v"; t[nt].r = HEADS * HEAD_DIM; t[nt++].c = DIM;
    t[nt].name = "blk.0.attn_output"; t[nt].r = DIM; t[nt++].c = HEADS * HEAD_DIM;
    t[nt].name = "blk.0.ffn_norm"; t[nt].r = DIM; t[nt++].c = 0;
    t[nt].name = "blk.0.ffn_gate"; t[nt].r = FFN; t[nt++].c = DIM;
    t[nt].name = "blk.0.ffn_up"; t[nt].r = FFN; t[nt++].c = DIM;
    t[nt].name = "blk.0.ffn_down"; t[nt].r = DIM; t[nt++].c = FFN;
    /* header, patched at the end */
    fwrite("CISM\r\n\x1a\n", 1, 8, f);
    w32(f, 1); w32(f, 0);
    for (i = 0; i < 6; i++) w64(f, 0);
    /* metadata */
    w32(f, 14);
    wstr(f, "general.architecture"); w32(f, CISM_META_STRING); w64(f, 5); fwrite("llama", 1, 5, f);
    wkey_int(f, "model.vocab_size", VOCAB); wkey_int(f, "model.dim", DIM); wkey_int(f, "model.n_layers", 1);
    wkey_int(f, "model.n_heads", HEADS); wkey_int(f, "model.n_kv_heads", HEADS); wkey_int(f, "model.head_dim", HEAD_DIM);
    wkey_int(f, "model.ffn_dim", FFN); wkey_int(f, "model.context_length", CTX); wkey_int(f, "model.tied_embeddings", 1);
    wkey_f64(f, "model.norm_eps", 1e-5); wkey_f64(f, "model.rope_theta", 10000.0);
    wkey_int(f, "tokenizer.bos_id", 1); wkey_int(f, "tokenizer.eos_id", 2);
    meta_size = (uint64_t)ftell(f) - 64;
    /* tensor directory */
    w32(f, (uint32_t)nt);
    for (i = 0; i < nt; i++) {
        uint64_t bytes = (uint64_t)t[i].r * (uint64_t)(t[i].c ? t[i].c : 1) * 4;
        wstr(f, t[i].name);
        w32(f, CISM_DTYPE_F32);
        w32(f, t[i].c ? 2 : 1);
        w64(f, (uint64_t)t[i].r);
        if (t[i].c) w64(f, (uint64_t)t[i].c);
        w64(f, off);
        w64(f, bytes);
        off = pad64(off + bytes);
    }
    data_size = off;
    dir_size = (uint64_t)ftell(f) - 64 - meta_size;
    data_off = pad64(64 + meta_size + dir_size);
    for (pos = ftell(f); (uint64_t)pos < data_off; pos++) fputc(0, f);
    /* all weights zero (valid: finite) */
    for (off = 0; off < data_size; off += sizeof(zeros))
        fwrite(zeros, 1, (size_t)(data_size - off < sizeof(zeros) ? data_size - off : sizeof(zeros)), f);
    fseek(f, 16, SEEK_SET);
    w64(f, 64); w64(f, meta_size); w64(f, 64 + meta_size); w64(f, dir_size); w64(f, data_off); w64(f, data_size);
    if (fclose(f) != 0) return 0;
    return data_off + data_size;
}

static int64_t rss(void) {
    int64_t b = -1;
    CHECK_OK(cism_process_resident_bytes(&b));
    CHECK(b > 0);
    return b;
}

static cism_params *params_mmap(int use_mmap) {
    cism_params *p = NULL;
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_USE_MMAP, use_mmap));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, 1));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_CTX, 32));
    return p;
}

/* Weights used in place: loading maps the file and touches almost nothing;
   reading it instead (USE_MMAP=0) grows the process by the whole file. */
static void mapped_weights(const char *path, uint64_t size) {
    cism_params *p = params_mmap(1);
    cism_model *m = NULL;
    int64_t before, after, resident = -1, total = -1, file_bytes = 0;
    cism_status st;
    before = rss();
    CHECK_OK(cism_model_load(path, p, &m));
    if (!m) { cism_params_free(p); return; }
    after = rss();
    printf("mmap load of %.1f MiB: process grew by %.2f MiB\n", (double)size / 1048576.0, (double)(after - before) / 1048576.0);
    CHECK_MSG(after - before < (int64_t)(size / 8), "loading from a mapping grew the process by %lld bytes", (long long)(after - before));
    CHECK(cism_model_is_mapped(m) == 1);
    /* every weight points into the file mapping: no copy */
    {
        const uint8_t *lo = m->file.view.data, *hi = lo + m->file.view.size;
        const uint8_t *q = (const uint8_t *)m->layers[0].wq.data, *d = (const uint8_t *)m->layers[0].down.data;
        CHECK(m->file.view.mapped == 1);
        CHECK(q >= lo && q < hi && d >= lo && d < hi);
        CHECK((const uint8_t *)m->tok_embd.data >= lo && (const uint8_t *)m->tok_embd.data < hi);
    }
    CHECK_OK(cism_model_get_info(m, CISM_INFO_FILE_BYTES, &file_bytes));
    CHECK_OK(cism_model_resident_bytes(m, &resident, &total));
    CHECK(total == (int64_t)size && file_bytes == total);
    CHECK(resident >= 0 && resident <= total);
    CHECK_OK(cism_model_prefetch(m, 0));
    CHECK_OK(cism_model_prefetch(m, 1));
    CHECK_OK(cism_model_resident_bytes(m, &resident, NULL));
    CHECK_MSG(resident == total, "after a waiting prefetch %lld of %lld bytes are resident", (long long)resident, (long long)total);
    st = cism_model_lock(m);
    if (st == CISM_OK) {
        CHECK_OK(cism_model_resident_bytes(m, &resident, NULL));
        CHECK(resident == total);
        CHECK_OK(cism_model_unlock(m));
        printf("cism_model_lock: locked %.1f MiB\n", (double)total / 1048576.0);
    } else {
        /* best effort: refused with a clear status and the limit in the message */
        CHECK_MSG(st == CISM_ERR_PERMISSION, "cism_model_lock: %s: %s", cism_status_str(st), cism_last_error());
        CHECK(strstr(cism_last_error(), "RLIMIT_MEMLOCK") != NULL || strstr(cism_last_error(), "VirtualLock") != NULL);
        printf("cism_model_lock refused (allowed): %s\n", cism_last_error());
    }
    /* the model runs from the mapping */
    {
        cism_session *s = NULL;
        int32_t tok = 1;
        const float *lg = NULL;
        CHECK_OK(cism_session_create(m, p, &s));
        CHECK_OK(cism_session_eval(s, &tok, 1));
        CHECK_OK(cism_session_logits(s, -1, &lg, NULL));
        CHECK(lg && lg[0] == 0.0f); /* zero weights */
        cism_session_free(s);
    }
    cism_model_free(m);
    cism_params_free(p);

    /* read into memory instead: the process holds the whole file */
    p = params_mmap(0);
    before = rss();
    CHECK_OK(cism_model_load(path, p, &m));
    if (m) {
        after = rss();
        printf("read load of %.1f MiB: process grew by %.2f MiB\n", (double)size / 1048576.0, (double)(after - before) / 1048576.0);
        CHECK(cism_model_is_mapped(m) == 0);
        CHECK(after - before > (int64_t)(size * 9 / 10));
        CHECK_OK(cism_model_resident_bytes(m, &resident, &total));
        CHECK(resident == total && total == (int64_t)size);
        cism_model_free(m);
    }
    cism_params_free(p);
}

/* cism__mem_resident follows page touches and clips partial pages to the range */
static void resident_counts_pages(void) {
    const size_t mib = 1024 * 1024;
    unsigned char *b = (unsigned char *)calloc(4, mib); /* fresh pages: not resident until written */
    int64_t r0, r1;
    if (!b) return;
    r0 = cism__mem_resident(b + mib, mib);
    CHECK(r0 >= 0 && r0 <= (int64_t)mib);
    b[mib + mib / 2] = 1;
    r1 = cism__mem_resident(b + mib, mib);
    CHECK_MSG(r1 > r0 || r0 == (int64_t)mib, "touching a page: resident %lld -> %lld", (long long)r0, (long long)r1);
    memset(b, 1, 4 * mib);
    CHECK(cism__mem_resident(b, 4 * mib) == (int64_t)(4 * mib));
    CHECK(cism__mem_resident(b + 10, 100) == 100);
    CHECK(cism__mem_resident(b + 4000, 200) == 200); /* may straddle a page boundary */
    free(b);
}

/* The big.LITTLE rule on the cluster shapes of real phones */
static void perf_cpus(void) {
    static const long sd8gen2[8] = {1795, 1795, 1795, 2803, 2803, 2803, 2803, 3187}; /* max MHz: 3 little, 4 big, 1 prime */
    static const long tensor_g2[8] = {160, 160, 160, 160, 512, 512, 1024, 1024};     /* cpu_capacity: 4 + 2 + 2 */
    static const long a76x2[8] = {2000, 2000, 2000, 2000, 2000, 2000, 2600, 2600};  /* 6 little + 2 big */
    static const long same[4] = {3000, 3000, 3000, 3000};
    static const long partial[4] = {0, 1000, 0, 2000};                               /* unknown CPUs count as slow */
    static const long unknown[2] = {0, -1};
    CHECK(cism__perf_cpus(sd8gen2, 8) == 5);
    CHECK(cism__perf_cpus(tensor_g2, 8) == 4);
    CHECK(cism__perf_cpus(a76x2, 8) == 2);
    CHECK(cism__perf_cpus(same, 4) == 4);
    CHECK(cism__perf_cpus(partial, 4) == 1);
    CHECK(cism__perf_cpus(unknown, 2) == 0);
}

static void errors(void) {
    int64_t v;
    CHECK(cism_model_prefetch(NULL, 0) == CISM_ERR_INVALID_ARG);
    CHECK(cism_model_lock(NULL) == CISM_ERR_INVALID_ARG);
    CHECK(cism_model_unlock(NULL) == CISM_ERR_INVALID_ARG);
    CHECK(cism_model_resident_bytes(NULL, &v, NULL) == CISM_ERR_INVALID_ARG);
    CHECK(cism_process_resident_bytes(NULL) == CISM_ERR_INVALID_ARG);
    CHECK(cism_session_estimate_bytes(NULL, NULL, &v) == CISM_ERR_INVALID_ARG);
    CHECK(cism_session_trim(NULL) == CISM_ERR_INVALID_ARG);
    CHECK(cism_session_memory_bytes(NULL) == 0);
    CHECK(cism_model_is_mapped(NULL) == 0);
    CHECK(strcmp(cism_status_str(CISM_ERR_PERMISSION), "not permitted") == 0);
}

typedef struct { int32_t tokens[64]; int n; } collected;
static int32_t collect(void *user, int32_t token) {
    collected *c = (collected *)user;
    if (c->n < 64) c->tokens[c->n++] = token;
    return 0;
}

/* estimate == what a session holds; trim frees scratch and the session goes on
   producing exactly the tokens an untrimmed one does */
static void session_sizes(const char *stories) {
    cism_model *m = NULL;
    cism_params *p = NULL;
    cism_session *a = NULL, *b = NULL;
    cism_sampler *sa = NULL, *sb = NULL;
    collected ca, cb;
    int64_t est = 0, est_f32 = 0, full, trimmed;
    int32_t prompt[4] = {1, 403, 407, 261}, n = 0, i;
    const float *lg = NULL;
    float last[512];
    CHECK_OK(cism_model_load(stories, NULL, &m));
    if (!m) return;
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, 2));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_CTX, 128));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_LOGITS_ALL, 1));
    CHECK_OK(cism_session_estimate_bytes(m, p, &est));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KV_TYPE, CISM_DTYPE_F32));
    CHECK_OK(cism_session_estimate_bytes(m, p, &est_f32));
    /* KV cache: 2 (k, v) * 5 layers * 4 kv heads * 8 head_dim * 128 positions * (4 - 2) bytes */
    CHECK_MSG(est_f32 - est == 2 * 5 * 4 * 8 * 128 * 2, "f32 vs f16 KV: %lld", (long long)(est_f32 - est));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KV_TYPE, CISM_DTYPE_F16));
    CHECK_OK(cism_session_create(m, p, &a)); /* two threads: trim stops them, eval starts them again */
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, 1));
    CHECK_OK(cism_session_create(m, p, &b));
    if (!a || !b) goto out;
    CHECK(cism_session_memory_bytes(a) == est);
    CHECK_OK(cism_session_estimate_bytes(m, p, &est_f32)); /* reused: one thread less, less scratch */
    CHECK(cism_session_memory_bytes(b) == est_f32 && est_f32 < est);
    CHECK_OK(cism_session_eval(a, prompt, 4));
    CHECK_OK(cism_session_eval(b, prompt, 4));
    full = cism_session_memory_bytes(a);
    CHECK(full == est + 3 * 512 * 4); /* LOGITS_ALL kept 4 rows */
    CHECK_OK(cism_session_logits(a, -1, &lg, NULL));
    memcpy(last, lg, sizeof(last));
    CHECK_OK(cism_session_trim(a));
    trimmed = cism_session_memory_bytes(a);
    printf("stories260K session: estimate %lld bytes, %lld after 4 rows of logits, %lld trimmed\n", (long long)est,
           (long long)full, (long long)trimmed);
    CHECK(trimmed < est);
    CHECK(cism_session_n_past(a) == 4);
    CHECK_OK(cism_session_logits(a, -1, &lg, NULL));
    CHECK(lg && memcmp(lg, last, sizeof(last)) == 0);
    CHECK_OK(cism_session_logits(a, 3, &lg, NULL)); /* rows keep the numbers of the last eval's tokens */
    CHECK(lg && memcmp(lg, last, sizeof(last)) == 0);
    CHECK(cism_session_logits(a, 0, &lg, NULL) == CISM_ERR_STATE); /* trimmed away */
    CHECK(cism_session_logits(a, 4, &lg, NULL) == CISM_ERR_INVALID_ARG);
    CHECK_OK(cism_session_trim(a)); /* twice is fine */
    /* continue both: same greedy tokens */
    memset(&ca, 0, sizeof(ca));
    memset(&cb, 0, sizeof(cb));
    CHECK_OK(cism_sampler_create(&sa));
    CHECK_OK(cism_sampler_create(&sb));
    CHECK_OK(cism_generate(a, sa, NULL, 0, 24, CISM_GENERATE_IGNORE_EOS, collect, &ca, &n));
    CHECK(cism_session_memory_bytes(a) >= trimmed);
    CHECK_OK(cism_session_trim(a));
    CHECK_OK(cism_generate(a, sa, NULL, 0, 8, CISM_GENERATE_IGNORE_EOS, collect, &ca, &n));
    CHECK_OK(cism_generate(b, sb, NULL, 0, 32, CISM_GENERATE_IGNORE_EOS, collect, &cb, &n));
    CHECK(ca.n == 32 && cb.n == 32);
    for (i = 0; i < 32 && i < ca.n && i < cb.n; i++)
        CHECK_MSG(ca.tokens[i] == cb.tokens[i], "token %d after trim: %d vs %d", (int)i, (int)ca.tokens[i], (int)cb.tokens[i]);
out:
    cism_sampler_free(sa);
    cism_sampler_free(sb);
    cism_session_free(a);
    cism_session_free(b);
    cism_params_free(p);
    cism_model_free(m);
}

/* On packed weights the activations setting changes the scratch (int8 rows, the
   outlier channels' tables): the estimate follows it and equals what a session
   created with the same setting holds (the phone APIs pass it to the estimate). */
static void act_sizes(const char *q8) {
    static const struct {
        int quant, outliers;
        const char *name;
    } modes[3] = {{1, 1, "outliers"}, {1, 0, "int8"}, {0, 0, "float"}};
    int64_t est[3] = {0, 0, 0};
    cism_model *m = NULL;
    int i;
    CHECK_OK(cism_model_load(q8, NULL, &m));
    if (!m) return;
    for (i = 0; i < 3; i++) {
        cism_params *p = NULL;
        cism_session *s = NULL;
        int32_t prompt[4] = {1, 403, 407, 261};
        CHECK_OK(cism_params_create(&p));
        CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, 2));
        CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_CTX, 128));
        CHECK_OK(cism_params_set_int(p, CISM_PARAM_ACT_QUANT, modes[i].quant));
        CHECK_OK(cism_params_set_int(p, CISM_PARAM_ACT_OUTLIERS, modes[i].outliers));
        CHECK_OK(cism_session_estimate_bytes(m, p, &est[i]));
        CHECK_OK(cism_session_create(m, p, &s));
        if (s) {
            CHECK_OK(cism_session_eval(s, prompt, 4));
            CHECK_MSG(cism_session_memory_bytes(s) == est[i], "%s activations: estimate %lld, the session holds %lld",
                      modes[i].name, (long long)est[i], (long long)cism_session_memory_bytes(s));
        }
        cism_session_free(s);
        cism_params_free(p);
    }
    printf("q8 session estimates: outliers %lld, int8 %lld, float %lld bytes\n", (long long)est[0], (long long)est[1],
           (long long)est[2]);
    CHECK_MSG(est[2] < est[1] && est[1] <= est[0], "float activations should need the least scratch");
    cism_model_free(m);
}

int main(int argc, char **argv) {
    const char *path = "test_memory_big.cism";
    uint64_t size;
    int32_t nth = cism_default_n_threads();
    (void)argc;
    (void)argv;
    printf("default threads %d (perf cpus %d of %d)\n", (int)nth, cism__cpu_perf_count(), cism__cpu_count());
    CHECK(nth >= 1 && nth <= 8);
    CHECK(cism__cpu_perf_count() >= 0 && cism__cpu_perf_count() <= 256);
    perf_cpus();
    errors();
    resident_counts_pages();
    size = write_big_model(path);
    CHECK(size > 64u * 1024 * 1024);
    if (size) mapped_weights(path, size);
    remove(path);
    session_sizes(fixture_path("stories260K.cism"));
    act_sizes(fixture_path("stories260K-hf.q8.cism"));
    return test_finish("test_memory");
}
