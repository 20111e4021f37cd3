/* test_loader.c - the .cism loader refuses every malformed file with a clear
 * status and message, and never crashes: hand-made corrupt files by category,
 * every truncation length, and random byte corruption. */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* setenv */
#endif
#include "cism.h"
#include "test_util.h"
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

/* ---- a small .cism writer ------------------------------------------------------ */
typedef struct { unsigned char *p; size_t n, cap; } buf;
static void put(buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) { b->cap = (b->n + n) * 2 + 64; b->p = (unsigned char *)realloc(b->p, b->cap); }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_u32(buf *b, uint32_t v) { unsigned char c[4]; int i; for (i = 0; i < 4; i++) c[i] = (unsigned char)(v >> (8 * i)); put(b, c, 4); }
static void put_u64(buf *b, uint64_t v) { unsigned char c[8]; int i; for (i = 0; i < 8; i++) c[i] = (unsigned char)(v >> (8 * i)); put(b, c, 8); }
static void put_str(buf *b, const char *s) { put_u32(b, (uint32_t)strlen(s)); put(b, s, strlen(s)); }

typedef struct { const char *key; int type; int64_t i; double f; const char *s; } kv;
typedef struct { char name[64]; uint32_t dtype, nd; uint64_t dims[2]; } tdesc;

typedef struct model_desc {
    const char *arch;
    int64_t vocab, dim, layers, heads, kv_heads, head_dim, ffn, ctx, tied, qkv_bias, qk_norm, window;
    int skip_tensor;          /* index of a tensor to leave out, -1 none */
    int extra_tensor;         /* add an unexpected tensor */
    int nan_norm;             /* put a NaN into output_norm */
    int wrong_shape;          /* give attn_q a wrong row count */
    int norm_f16;             /* store a norm as f16 */
    int64_t meta_vocab;       /* if set, the vocab size written to metadata */
} model_desc;

static void default_desc(model_desc *d) {
    memset(d, 0, sizeof(*d));
    d->arch = "llama"; d->vocab = 32; d->dim = 16; d->layers = 2; d->heads = 4; d->kv_heads = 2; d->head_dim = 4;
    d->ffn = 24; d->ctx = 64; d->tied = 1; d->skip_tensor = -1;
}

static int add_t(tdesc *t, int n, const char *name, uint32_t dtype, int64_t r, int64_t c) {
    snprintf(t[n].name, sizeof(t[n].name), "%s", name);
    t[n].dtype = dtype;
    t[n].nd = c ? 2 : 1;
    t[n].dims[0] = (uint64_t)r;
    t[n].dims[1] = (uint64_t)c;
    return n + 1;
}

/* Builds a complete, valid (unless d asks otherwise) file image. */
static unsigned char *build(const model_desc *d, size_t *size) {
    buf meta = {0}, dir = {0}, out = {0};
    tdesc t[128];
    int nt = 0, l, i, n_meta = 0;
    uint64_t off = 0, data_off, offs[128];
    char name[64];
    int64_t q = d->heads * d->head_dim, kvr = d->kv_heads * d->head_dim;
    kv keys[20];
    memset(keys, 0, sizeof(keys));
#define KI(k_, v_) do { keys[n_meta].key = k_; keys[n_meta].type = 1; keys[n_meta].i = v_; n_meta++; } while (0)
    keys[n_meta].key = "general.architecture"; keys[n_meta].type = 3; keys[n_meta].s = d->arch; n_meta++;
    KI("model.vocab_size", d->meta_vocab ? d->meta_vocab : d->vocab); KI("model.dim", d->dim); KI("model.n_layers", d->layers);
    KI("model.n_heads", d->heads); KI("model.n_kv_heads", d->kv_heads); KI("model.head_dim", d->head_dim);
    KI("model.ffn_dim", d->ffn); KI("model.context_length", d->ctx); KI("model.tied_embeddings", d->tied);
    keys[n_meta].key = "model.norm_eps"; keys[n_meta].type = 2; keys[n_meta].f = 1e-5; n_meta++;
    keys[n_meta].key = "model.rope_theta"; keys[n_meta].type = 2; keys[n_meta].f = 10000.0; n_meta++;
    if (d->qkv_bias) KI("model.attn_qkv_bias", 1);
    if (d->qk_norm) KI("model.qk_norm", 1);
    if (d->window) KI("model.sliding_window", d->window);
    KI("tokenizer.bos_id", 1);
#undef KI
    put_u32(&meta, (uint32_t)n_meta);
    for (i = 0; i < n_meta; i++) {
        put_str(&meta, keys[i].key);
        put_u32(&meta, (uint32_t)keys[i].type);
        if (keys[i].type == 1) put_u64(&meta, (uint64_t)keys[i].i);
        else if (keys[i].type == 2) { uint64_t b; memcpy(&b, &keys[i].f, 8); put_u64(&meta, b); }
        else { put_u64(&meta, strlen(keys[i].s)); put(&meta, keys[i].s, strlen(keys[i].s)); }
    }
    nt = add_t(t, nt, "token_embd", 0, d->vocab, d->dim);
    if (!d->tied) nt = add_t(t, nt, "output", 0, d->vocab, d->dim);
    nt = add_t(t, nt, "output_norm", 0, d->dim, 0);
    for (l = 0; l < d->layers; l++) {
#define L(s, r, c) do { snprintf(name, sizeof(name), "blk.%d.%s", l, s); nt = add_t(t, nt, name, 0, r, c); } while (0)
        L("attn_norm", d->dim, 0); L("attn_q", d->wrong_shape ? q + 1 : q, d->dim); L("attn_k", kvr, d->dim);
        L("attn_v", kvr, d->dim); L("attn_output", d->dim, q); L("ffn_norm", d->dim, 0);
        L("ffn_gate", d->ffn, d->dim); L("ffn_up", d->ffn, d->dim); L("ffn_down", d->dim, d->ffn);
        if (d->qkv_bias) { L("attn_q_bias", q, 0); L("attn_k_bias", kvr, 0); L("attn_v_bias", kvr, 0); }
        if (d->qk_norm) { L("attn_q_norm", d->head_dim, 0); L("attn_k_norm", d->head_dim, 0); }
#undef L
    }
    if (d->extra_tensor) nt = add_t(t, nt, "blk.0.mystery", 0, 4, 0);
    if (d->norm_f16) t[nt - 1 - (d->extra_tensor ? 1 : 0)].dtype = t[nt - 1].nd == 1 ? 1 : t[nt - 1].dtype;
    put_u32(&dir, (uint32_t)(nt - (d->skip_tensor >= 0 ? 1 : 0)));
    for (i = 0; i < nt; i++) {
        uint64_t elems = t[i].dims[0] * (t[i].nd == 2 ? t[i].dims[1] : 1), bytes = elems * (t[i].dtype == 0 ? 4 : 2);
        offs[i] = off;
        if (i != d->skip_tensor) {
            put_str(&dir, t[i].name);
            put_u32(&dir, t[i].dtype);
            put_u32(&dir, t[i].nd);
            put_u64(&dir, t[i].dims[0]);
            if (t[i].nd == 2) put_u64(&dir, t[i].dims[1]);
            put_u64(&dir, off);
            put_u64(&dir, bytes);
        }
        off += (bytes + 63) / 64 * 64;
    }
    data_off = (64 + meta.n + dir.n + 63) / 64 * 64;
    put(&out, "CISM\r\n\x1a\n", 8);
    put_u32(&out, 2); put_u32(&out, 0);
    put_u64(&out, 64); put_u64(&out, meta.n);
    put_u64(&out, 64 + meta.n); put_u64(&out, dir.n);
    put_u64(&out, data_off); put_u64(&out, off);
    put(&out, meta.p, meta.n);
    put(&out, dir.p, dir.n);
    while (out.n < data_off + off) { unsigned char z = 0; put(&out, &z, 1); }
    /* weights: small deterministic values; norms 1 */
    for (i = 0; i < nt; i++) {
        uint64_t elems = t[i].dims[0] * (t[i].nd == 2 ? t[i].dims[1] : 1), e;
        if (t[i].dtype != 0) continue;
        for (e = 0; e < elems; e++) {
            float v = t[i].nd == 1 ? 1.0f : (float)(((e * 2654435761u + (uint64_t)i * 97u) % 2001u) / 1000.0 - 1.0) * 0.2f;
            if (d->nan_norm && strcmp(t[i].name, "output_norm") == 0 && e == 3) v = NAN;
            memcpy(out.p + data_off + offs[i] + 4 * e, &v, 4);
        }
    }
    free(meta.p);
    free(dir.p);
    *size = out.n;
    return out.p;
}

static const char *g_path = "test_loader_tmp.cism";

/* Loads an image; returns the status (and frees any model). */
static cism_status try_load(const unsigned char *img, size_t n) {
    cism_model *m = NULL;
    cism_status st;
    if (write_file(g_path, img, n) != 0) { fprintf(stderr, "cannot write %s\n", g_path); g_failures++; return CISM_ERR_IO; }
    st = cism_model_load(g_path, NULL, &m);
    if (st == CISM_OK) {
        /* a loaded model must also run */
        cism_session *s = NULL;
        int32_t tok = 1;
        CHECK(m != NULL);
        if (cism_session_create(m, NULL, &s) == CISM_OK) {
            CHECK_OK(cism_session_eval(s, &tok, 1));
            cism_session_free(s);
        }
        cism_model_free(m);
    } else {
        CHECK(m == NULL);
        CHECK(strlen(cism_last_error()) > 10);
    }
    return st;
}

static void expect(const model_desc *d, cism_status want, const char *needle) {
    size_t n;
    unsigned char *img = build(d, &n);
    cism_status st = try_load(img, n);
    CHECK_MSG(st == want, "expected %s, got %s: %s", cism_status_str(want), cism_status_str(st), cism_last_error());
    if (needle && st != CISM_OK) CHECK_MSG(strstr(cism_last_error(), needle) != NULL, "message '%s' lacks '%s'", cism_last_error(), needle);
    free(img);
}

static void set_u64(unsigned char *p, uint64_t v) { int i; for (i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i)); }

int main(void) {
    model_desc d;
    unsigned char *img, *copy;
    size_t n, cut, i;
    uint32_t rng = 99;
    cism_model *m = NULL;

    default_desc(&d);
    expect(&d, CISM_OK, NULL);
    d.tied = 0; expect(&d, CISM_OK, NULL);
    default_desc(&d); d.arch = "qwen2"; d.qkv_bias = 1; expect(&d, CISM_OK, NULL);
    default_desc(&d); d.arch = "qwen3"; d.qk_norm = 1; expect(&d, CISM_OK, NULL);
    default_desc(&d); d.arch = "gpt2"; expect(&d, CISM_ERR_UNSUPPORTED, "gpt2");
    default_desc(&d); d.qkv_bias = 1; expect(&d, CISM_ERR_UNSUPPORTED, "bias");
    default_desc(&d); d.qk_norm = 1; expect(&d, CISM_ERR_UNSUPPORTED, "normalization");
    default_desc(&d); d.arch = "qwen2"; expect(&d, CISM_ERR_FORMAT, "bias");
    default_desc(&d); d.skip_tensor = 5; expect(&d, CISM_ERR_FORMAT, "missing");
    default_desc(&d); d.extra_tensor = 1; expect(&d, CISM_ERR_FORMAT, "mystery");
    default_desc(&d); d.nan_norm = 1; expect(&d, CISM_ERR_FORMAT, "NaN");
    default_desc(&d); d.wrong_shape = 1; expect(&d, CISM_ERR_FORMAT, "attn_q");
    default_desc(&d); d.heads = 3; d.kv_heads = 2; expect(&d, CISM_ERR_FORMAT, "multiple");
    default_desc(&d); d.head_dim = 3; expect(&d, CISM_ERR_FORMAT, "odd");
    default_desc(&d); d.meta_vocab = (int64_t)1 << 40; expect(&d, CISM_ERR_FORMAT, "vocab");
    default_desc(&d); d.extra_tensor = 1; d.norm_f16 = 1; expect(&d, CISM_ERR_FORMAT, NULL);

    /* sliding window: loads, and sessions longer than the window are computed
       with it (parity: tests/python/test_parity_transformers.py) */
    default_desc(&d); d.arch = "mistral"; d.window = 32;
    img = build(&d, &n);
    CHECK(write_file(g_path, img, n) == 0);
    CHECK(cism__x16_streaming == 0);
    CHECK_OK(cism_model_load(g_path, NULL, &m));
    if (m) {
        cism_session *s = NULL;
        cism_params *p = NULL;
        int64_t wb = 0;
        /* a loaded model counts in the far-prefetch count iff its weights stream (kernels.h) */
        CHECK_OK(cism_model_get_info(m, CISM_INFO_WEIGHT_BYTES, &wb));
        CHECK(wb > 0 && cism__x16_streaming == cism__weights_stream(wb));
        CHECK_OK(cism_session_create(m, NULL, &s));
        cism_session_free(s);
        s = NULL;
        CHECK_OK(cism_params_create(&p));
        CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_CTX, 32));
        CHECK_OK(cism_session_create(m, p, &s));
        if (s) {
            /* logits rows are those of the last eval: without LOGITS_ALL only its last row */
            int32_t toks[3] = {1, 2, 3}, nv = 0;
            const float *lg = NULL, *last = NULL;
            CHECK_OK(cism_session_eval(s, toks, 3));
            CHECK_OK(cism_session_logits(s, -1, &last, &nv));
            CHECK_OK(cism_session_logits(s, 2, &lg, &nv));
            CHECK(lg == last && nv == 32);
            CHECK(cism_session_logits(s, 0, &lg, &nv) == CISM_ERR_STATE && strstr(cism_last_error(), "LOGITS_ALL"));
            CHECK(cism_session_logits(s, 3, &lg, &nv) == CISM_ERR_INVALID_ARG);
            CHECK(cism_session_logits(s, -2, &lg, &nv) == CISM_ERR_INVALID_ARG);
        }
        cism_session_free(s);
        cism_params_free(p);
        cism_model_free(m);
        CHECK(cism__x16_streaming == 0);
    }
#if !defined(_WIN32)
    { /* forced on: the model counts while it is loaded, and not after */
        cism_model *f = NULL;
        CHECK(setenv("CISM_PREFETCH_FAR", "1", 1) == 0);
        CHECK_OK(cism_model_load(g_path, NULL, &f));
        CHECK(cism__x16_streaming == 1);
        cism_model_free(f);
        CHECK(cism__x16_streaming == 0);
        unsetenv("CISM_PREFETCH_FAR");
    }
#endif
    free(img);

    /* header-level corruption */
    default_desc(&d);
    img = build(&d, &n);
    copy = (unsigned char *)malloc(n);
    memcpy(copy, img, n); copy[0] = 'X';
    CHECK(try_load(copy, n) == CISM_ERR_FORMAT && strstr(cism_last_error(), "magic"));
    memcpy(copy, img, n); memcpy(copy, "GGUF", 4);
    CHECK(try_load(copy, n) == CISM_ERR_FORMAT && strstr(cism_last_error(), "GGUF"));
    memcpy(copy, img, n); copy[8] = 4;
    CHECK(try_load(copy, n) == CISM_ERR_UNSUPPORTED && strstr(cism_last_error(), "version"));
    memcpy(copy, img, n); copy[8] = 3;  /* a version 2 file relabelled 3: no valid header checksum (test_checksum.c) */
    CHECK(try_load(copy, n) == CISM_ERR_FORMAT && strstr(cism_last_error(), "header checksum"));
    memcpy(copy, img, n); copy[8] = 0;
    CHECK(try_load(copy, n) == CISM_ERR_UNSUPPORTED && strstr(cism_last_error(), "version"));
    memcpy(copy, img, n); set_u64(copy + 24, (uint64_t)-1);        /* meta_size huge */
    CHECK(try_load(copy, n) == CISM_ERR_FORMAT);
    memcpy(copy, img, n); set_u64(copy + 48, 65);                   /* misaligned data */
    CHECK(try_load(copy, n) == CISM_ERR_FORMAT && strstr(cism_last_error(), "multiple of 64"));
    memcpy(copy, img, n); set_u64(copy + 56, (uint64_t)n * 2);      /* data past the end */
    CHECK(try_load(copy, n) == CISM_ERR_FORMAT && strstr(cism_last_error(), "truncated"));
    CHECK(try_load(img, 10) == CISM_ERR_FORMAT);
    /* every truncation length is refused cleanly */
    for (cut = 0; cut < n; cut += (cut < 2048 ? 1 : 61)) {
        cism_status st;
        if (cut == 0) continue;
        st = try_load(img, cut);
        CHECK_MSG(st == CISM_ERR_FORMAT, "truncated to %zu: %s", cut, cism_status_str(st));
    }
    /* random corruption of header, metadata and directory bytes: any status, no crash */
    for (i = 0; i < 3000; i++) {
        size_t k, flips = 1 + i % 4;
        memcpy(copy, img, n);
        for (k = 0; k < flips; k++) {
            size_t pos;
            rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5;
            pos = rng % 700;
            if (pos < n) copy[pos] ^= (unsigned char)(1u << (rng >> 28 & 7));
        }
        (void)try_load(copy, n);
    }
    free(copy);
    free(img);
    /* missing file and bad arguments */
    CHECK(cism_model_load("/nonexistent/model.cism", NULL, &m) == CISM_ERR_IO && m == NULL);
    CHECK(strstr(cism_last_error(), "/nonexistent/model.cism") != NULL);
    CHECK(cism_model_load(NULL, NULL, &m) == CISM_ERR_INVALID_ARG);
    CHECK(cism_model_load(g_path, NULL, NULL) == CISM_ERR_INVALID_ARG);
    remove(g_path);
    return test_finish("test_loader");
}
