/* tokenizer.c - loading the tokenizer from a model's tokenizer.* metadata
 * (every value is checked: a hostile file gets an error, never a crash), the
 * encode pipeline, and the public tokenize / token query API. */
#include "tokenizer.h"
#include "unicode.h"
#include "../core/error.h"
#include "../model/model.h"

#include <stdlib.h>
#include <string.h>

#define MAX_TOKEN_BYTES 65536u
#define MAX_TEMPLATE 64

static int64_t le_i64(const uint8_t *p) {
    uint64_t v = 0;
    int i;
    for (i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return (int64_t)v;
}

static const cism__meta_entry *meta(const cism__file *f, const char *key, int32_t type, int *bad) {
    const cism__meta_entry *e = cism__file_meta(f, key);
    if (e && e->type != type) *bad = 1;
    return e && e->type == type ? e : NULL;
}

/* A STRING_ARRAY entry of known names -> step codes. */
static cism_status read_steps(const cism__file *f, const char *label, const char *key, const char *const *names,
                              int n_names, int *steps, int *n_steps) {
    int bad = 0;
    const cism__meta_entry *e = meta(f, key, CISM_META_STRING_ARRAY, &bad);
    uint64_t i, pos = 0;
    *n_steps = 0;
    if (bad) return cism__fail(CISM_ERR_FORMAT, "%s: metadata '%s' must be a string array", label, key);
    if (!e) return CISM_OK;
    if (e->count > CISM__MAX_STEPS) return cism__fail(CISM_ERR_FORMAT, "%s: '%s' has %llu steps (at most %d)", label, key, (unsigned long long)e->count, CISM__MAX_STEPS);
    for (i = 0; i < e->count; i++) {
        uint32_t len;
        int k, found = -1;
        if (pos + 4 > e->payload_size) return cism__fail(CISM_ERR_FORMAT, "%s: '%s' is truncated", label, key);
        len = (uint32_t)e->payload[pos] | ((uint32_t)e->payload[pos + 1] << 8) | ((uint32_t)e->payload[pos + 2] << 16) | ((uint32_t)e->payload[pos + 3] << 24);
        pos += 4;
        if (len > e->payload_size - pos) return cism__fail(CISM_ERR_FORMAT, "%s: '%s' is truncated", label, key);
        for (k = 0; k < n_names; k++)
            if (strlen(names[k]) == len && memcmp(names[k], e->payload + pos, len) == 0) found = k;
        if (found < 0)
            return cism__fail(CISM_ERR_UNSUPPORTED, "%s: %s step '%.*s' is not supported by this library", label, key,
                              (int)(len > 64 ? 64 : len), (const char *)e->payload + pos);
        steps[(*n_steps)++] = found;
        pos += len;
    }
    return CISM_OK;
}

static cism_status read_flag(const cism__file *f, const char *label, const char *key, int *out) {
    int bad = 0;
    const cism__meta_entry *e = meta(f, key, CISM_META_INT, &bad);
    int64_t v = e ? le_i64(e->payload) : 0;
    if (bad || v < 0 || v > 1) return cism__fail(CISM_ERR_FORMAT, "%s: metadata '%s' must be 0 or 1", label, key);
    *out = (int)v;
    return CISM_OK;
}

static cism_status read_ids(const cism__file *f, const char *label, const char *key, int32_t n_tokens, int32_t **out, int32_t *n) {
    int bad = 0;
    const cism__meta_entry *e = meta(f, key, CISM_META_INT_ARRAY, &bad);
    uint64_t i;
    *n = 0;
    if (bad) return cism__fail(CISM_ERR_FORMAT, "%s: metadata '%s' must be an integer array", label, key);
    if (!e || e->count == 0) return CISM_OK;
    if (e->count > MAX_TEMPLATE) return cism__fail(CISM_ERR_FORMAT, "%s: '%s' holds %llu ids (at most %d)", label, key, (unsigned long long)e->count, MAX_TEMPLATE);
    *out = (int32_t *)malloc((size_t)e->count * sizeof(int32_t));
    if (!*out) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "out of memory");
    for (i = 0; i < e->count; i++) {
        int64_t v = le_i64(e->payload + 8 * i);
        if (v < 0 || v >= n_tokens) return cism__fail(CISM_ERR_FORMAT, "%s: '%s' holds id %lld, outside the %d tokens", label, key, (long long)v, (int)n_tokens);
        (*out)[i] = (int32_t)v;
    }
    *n = (int32_t)e->count;
    return CISM_OK;
}

static const char *const NORM_NAMES[] = {"nfc", "prepend_metaspace", "space_to_metaspace", "strip_spaces", "collapse_spaces"};
static const char *const PRE_NAMES[] = {"prefix_space", "gpt2_split", "llama3_split", "qwen2_split", "digits",
                                        "digits_individual", "metaspace_first", "metaspace_always", "metaspace_never",
                                        "metaspace_split", "byte_level"};
static const char *const DEC_NAMES[] = {"byte_level", "metaspace_to_space", "byte_fallback", "fuse",
                                        "strip_leading_space", "metaspace_first", "metaspace_always", "metaspace_never"};
extern const char *const cism__chat_format_names[];
extern const int cism__n_chat_formats;

/* decoder sequences decode.c knows how to stream */
static int decoder_supported(const int *d, int n) {
    int i = 0;
    if (n == 0) return 1;
    if (n == 1 && (d[0] == CISM__DEC_BYTE_LEVEL || d[0] >= CISM__DEC_METASPACE_FIRST)) return 1;
    if (d[i] == CISM__DEC_METASPACE_TO_SPACE) i++;
    if (i < n && d[i] == CISM__DEC_BYTE_FALLBACK) i++;
    if (i >= n || d[i] != CISM__DEC_FUSE) return 0;
    i++;
    if (i < n && d[i] == CISM__DEC_STRIP_LEADING_SPACE) i++;
    return i == n;
}

void cism__tokenizer_free(cism__tokenizer *t) {
    if (!t) return;
    free(t->tok);
    free(t->tok_len);
    free(t->owned_text);
    free(t->vhash);
    free(t->mkey);
    free(t->mrank);
    free(t->mnew);
    free(t->prefix);
    free(t->suffix);
    cism__matcher_free(&t->raw);
    cism__matcher_free(&t->normalized);
    free(t);
}

/* HF keeps a normalized added token by its normalized text: it is matched
   in normalized text and decodes to it */
static cism_status normalize_added(cism__tokenizer *t, const char *label) {
    cism__buf all = {NULL, 0, 0}, one = {NULL, 0, 0};
    size_t *at;
    int32_t id;
    at = (size_t *)calloc((size_t)t->n_tokens, sizeof(size_t));
    if (!at) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "%s: out of memory", label);
    for (id = 0; id < t->n_tokens; id++) {
        if ((t->flags[id] & (CISM__TOK_ADDED | CISM__TOK_NORMALIZED)) != (CISM__TOK_ADDED | CISM__TOK_NORMALIZED)) continue;
        if (cism__normalize(t, t->tok[id], t->tok_len[id], &one) || (at[id] = all.n, cism__buf_put(&all, one.p, one.n))) {
            free(at); free(all.p); free(one.p);
            return cism__fail(CISM_ERR_OUT_OF_MEMORY, "%s: out of memory", label);
        }
        t->tok_len[id] = (uint32_t)one.n;
    }
    for (id = 0; id < t->n_tokens; id++)
        if ((t->flags[id] & (CISM__TOK_ADDED | CISM__TOK_NORMALIZED)) == (CISM__TOK_ADDED | CISM__TOK_NORMALIZED))
            t->tok[id] = all.p + at[id];
    t->owned_text = all.p;
    free(at);
    free(one.p);
    return CISM_OK;
}

#define FAIL(...) do { st = cism__fail(__VA_ARGS__); goto fail; } while (0)

cism_status cism__tokenizer_load(const cism__file *f, const char *label, int64_t vocab_size, int32_t bos_id,
                                 int32_t eos_id, cism__tokenizer **out) {
    cism__tokenizer *t = NULL;
    const cism__meta_entry *e, *ef, *em;
    cism_status st;
    int bad = 0, r, k;
    uint64_t i, pos;
    int64_t v;
    *out = NULL;
    e = meta(f, "tokenizer.model", CISM_META_STRING, &bad);
    if (bad) return cism__fail(CISM_ERR_FORMAT, "%s: metadata 'tokenizer.model' must be a string", label);
    if (!e) return CISM_OK;   /* no tokenizer in this file */
    if (e->count != 3 || memcmp(e->payload, "bpe", 3) != 0)
        return cism__fail(CISM_ERR_UNSUPPORTED, "%s: tokenizer model '%.*s' is not supported (only bpe)", label,
                          (int)(e->count > 32 ? 32 : e->count), (const char *)e->payload);
    t = (cism__tokenizer *)calloc(1, sizeof(*t));
    if (!t) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "out of memory");
    t->bos_id = bos_id;
    t->eos_id = eos_id;
    e = meta(f, "tokenizer.tokens", CISM_META_STRING_ARRAY, &bad);
    ef = meta(f, "tokenizer.token_flags", CISM_META_BYTES, &bad);
    if (bad || !e || !ef) FAIL(CISM_ERR_FORMAT, "%s: tokenizer.tokens (string array) and tokenizer.token_flags (bytes) are required", label);
    if (e->count == 0 || (int64_t)e->count > vocab_size)
        FAIL(CISM_ERR_FORMAT, "%s: the tokenizer has %llu tokens but the model %lld embedding rows", label,
             (unsigned long long)e->count, (long long)vocab_size);
    if (ef->count != e->count) FAIL(CISM_ERR_FORMAT, "%s: tokenizer.token_flags has %llu entries for %llu tokens", label, (unsigned long long)ef->count, (unsigned long long)e->count);
    t->n_tokens = (int32_t)e->count;
    t->flags = ef->payload;
    t->tok = (const uint8_t **)malloc((size_t)t->n_tokens * sizeof(*t->tok));
    t->tok_len = (uint32_t *)malloc((size_t)t->n_tokens * sizeof(uint32_t));
    if (!t->tok || !t->tok_len) FAIL(CISM_ERR_OUT_OF_MEMORY, "out of memory");
    for (i = 0, pos = 0; i < e->count; i++) {
        uint32_t len;
        uint8_t fl = t->flags[i];
        if (pos + 4 > e->payload_size) FAIL(CISM_ERR_FORMAT, "%s: tokenizer.tokens is truncated", label);
        len = (uint32_t)e->payload[pos] | ((uint32_t)e->payload[pos + 1] << 8) | ((uint32_t)e->payload[pos + 2] << 16) | ((uint32_t)e->payload[pos + 3] << 24);
        pos += 4;
        if (len > e->payload_size - pos) FAIL(CISM_ERR_FORMAT, "%s: tokenizer.tokens is truncated", label);
        if (len > MAX_TOKEN_BYTES) FAIL(CISM_ERR_FORMAT, "%s: token %llu is %u bytes long", label, (unsigned long long)i, len);
        t->tok[i] = e->payload + pos;
        t->tok_len[i] = len;
        pos += len;
        if (fl & 0x80) FAIL(CISM_ERR_FORMAT, "%s: token %llu has unknown flags 0x%x", label, (unsigned long long)i, fl);
        if ((fl & ~(CISM__TOK_NORMAL | CISM__TOK_ADDED)) && !(fl & CISM__TOK_ADDED))
            FAIL(CISM_ERR_FORMAT, "%s: token %llu has added-token flags but is not an added token", label, (unsigned long long)i);
        if (fl && (len == 0 || cism__utf8_validate(t->tok[i], len) != len))
            FAIL(CISM_ERR_FORMAT, "%s: token %llu is empty or not valid UTF-8", label, (unsigned long long)i);
    }
    if ((r = cism__vocab_build(t)) != 0)
        FAIL(r == -1 ? CISM_ERR_OUT_OF_MEMORY : CISM_ERR_FORMAT, "%s: %s", label, r == -1 ? "out of memory" : "two vocabulary tokens have the same text");
    em = meta(f, "tokenizer.merges", CISM_META_INT_ARRAY, &bad);
    if (bad || (em && em->count % 2)) FAIL(CISM_ERR_FORMAT, "%s: tokenizer.merges must be an integer array of id pairs", label);
    if (em && (r = cism__merges_build(t, em->payload, em->count / 2)) != 0)
        FAIL(r == -1 ? CISM_ERR_OUT_OF_MEMORY : CISM_ERR_FORMAT, "%s: tokenizer.merges: %s", label,
             r == -1 ? "out of memory" : r == -2 ? "a merge uses an id that is not a vocabulary token"
             : r == -3 ? "a merged pair is not in the vocabulary" : "a pair appears twice");
    if ((st = read_steps(f, label, "tokenizer.normalizer", NORM_NAMES, 5, t->norm, &t->n_norm)) ||
        (st = read_steps(f, label, "tokenizer.pre_tokenizer", PRE_NAMES, 11, t->pre, &t->n_pre)) ||
        (st = read_steps(f, label, "tokenizer.decoder", DEC_NAMES, 8, t->dec, &t->n_dec)))
        goto fail;
    for (k = 0; k < t->n_pre; k++)
        if (t->pre[k] == CISM__PRE_BYTE_LEVEL) {
            if (k != t->n_pre - 1) FAIL(CISM_ERR_UNSUPPORTED, "%s: pre-tokenizer steps after byte_level are not supported", label);
            t->byte_level = 1;
        }
    if (!decoder_supported(t->dec, t->n_dec)) FAIL(CISM_ERR_UNSUPPORTED, "%s: this decoder sequence is not supported", label);
    if ((st = read_flag(f, label, "tokenizer.byte_fallback", &t->byte_fallback)) ||
        (st = read_flag(f, label, "tokenizer.fuse_unk", &t->fuse_unk)) ||
        (st = read_flag(f, label, "tokenizer.ignore_merges", &t->ignore_merges)))
        goto fail;
    e = meta(f, "tokenizer.unk_id", CISM_META_INT, &bad);
    v = e ? le_i64(e->payload) : -1;
    if (bad || v < -1 || v >= t->n_tokens || (v >= 0 && !(t->flags[v] & CISM__TOK_NORMAL)))
        FAIL(CISM_ERR_FORMAT, "%s: tokenizer.unk_id must be -1 or a vocabulary token", label);
    t->unk_id = (int32_t)v;
    if ((st = read_ids(f, label, "tokenizer.template_prefix", t->n_tokens, &t->prefix, &t->n_prefix)) ||
        (st = read_ids(f, label, "tokenizer.template_suffix", t->n_tokens, &t->suffix, &t->n_suffix)))
        goto fail;
    for (k = 0; k < 256; k++) {
        uint8_t buf[8];
        int len = cism__utf8_encode(cism__byte_char(k), buf);
        static const char hex[] = "0123456789ABCDEF";
        t->byte_token[k] = cism__vocab_find(t, buf, (size_t)len);
        buf[0] = '<'; buf[1] = '0'; buf[2] = 'x'; buf[3] = (uint8_t)hex[k >> 4]; buf[4] = (uint8_t)hex[k & 15]; buf[5] = '>';
        t->fallback_token[k] = cism__vocab_find(t, buf, 6);
    }
    t->chat_format = 0;
    e = meta(f, "tokenizer.chat_format", CISM_META_STRING, &bad);
    if (bad) FAIL(CISM_ERR_FORMAT, "%s: tokenizer.chat_format must be a string", label);
    if (e) {
        for (k = 1; k < cism__n_chat_formats; k++)
            if (strlen(cism__chat_format_names[k]) == e->count && memcmp(cism__chat_format_names[k], e->payload, e->count) == 0)
                t->chat_format = k;
        if (!t->chat_format) cism__log(CISM_LOG_WARN, "%s: chat format '%.*s' is unknown to this library; ignored", label,
                                       (int)(e->count > 32 ? 32 : e->count), (const char *)e->payload);
    }
    e = meta(f, "tokenizer.chat_default_system", CISM_META_STRING, &bad);
    if (bad || (e && cism__utf8_validate(e->payload, (size_t)e->count) != e->count))
        FAIL(CISM_ERR_FORMAT, "%s: tokenizer.chat_default_system must be a UTF-8 string", label);
    if (e) { t->chat_system = (const char *)e->payload; t->chat_system_len = (size_t)e->count; }
    if ((st = normalize_added(t, label))) goto fail;
    if (cism__matcher_build(&t->raw, t, 0) || cism__matcher_build(&t->normalized, t, 1))
        FAIL(CISM_ERR_OUT_OF_MEMORY, "%s: out of memory building the added-token matcher", label);
    t->has_normalized_added = t->normalized.n_nodes > 0;
    *out = t;
    return CISM_OK;
fail:
    cism__tokenizer_free(t);
    return st;
}

/* ---- encoding ---------------------------------------------------------------- */
typedef struct enc {
    const cism__tokenizer *t;
    const uint8_t *text;
    int parse_special, at_origin;
    cism__ids *out;
    cism__buf norm;
    cism__pieces pieces, tmp;
    cism__bpe_scratch sc;
} enc;

/* a stretch of normalized text between added tokens: pre-tokenize, BPE */
static int model_part(void *user, size_t start, size_t end, int32_t id) {
    enc *e = (enc *)user;
    size_t k;
    if (id >= 0) return cism__ids_push(e->out, id);
    if (end == start) return 0;
    if (cism__pretokenize(e->t, e->norm.p + start, end - start, e->at_origin && start == 0, &e->pieces, &e->tmp)) return -1;
    for (k = 0; k < e->pieces.n; k++)
        if (cism__bpe(e->t, e->pieces.text.p + e->pieces.p[k].start, e->pieces.p[k].len, &e->sc, e->out)) return -1;
    return 0;
}

/* a stretch of the input between raw added tokens: normalize, then look for
   normalized added tokens */
static int raw_part(void *user, size_t start, size_t end, int32_t id) {
    enc *e = (enc *)user;
    if (id >= 0) return cism__ids_push(e->out, id);
    if (cism__normalize(e->t, e->text + start, end - start, &e->norm)) return -1;
    e->at_origin = start == 0;
    if (e->t->has_normalized_added)
        return cism__matcher_split(&e->t->normalized, e->t, e->norm.p, e->norm.n, e->parse_special, model_part, e);
    return model_part(e, 0, e->norm.n, -1);
}

cism_status cism__tokenizer_encode(const cism__tokenizer *t, const uint8_t *text, size_t n, uint32_t flags,
                                   cism__ids *out) {
    enc e;
    int32_t k;
    int r = 0;
    memset(&e, 0, sizeof(e));
    e.t = t;
    e.text = text;
    e.parse_special = (flags & CISM_TOKENIZE_PARSE_SPECIAL) != 0;
    e.out = out;
    if (flags & CISM_TOKENIZE_ADD_SPECIAL)
        for (k = 0; k < t->n_prefix && !r; k++) r = cism__ids_push(out, t->prefix[k]);
    if (!r) r = cism__matcher_split(&t->raw, t, text, n, e.parse_special, raw_part, &e);
    if (flags & CISM_TOKENIZE_ADD_SPECIAL)
        for (k = 0; k < t->n_suffix && !r; k++) r = cism__ids_push(out, t->suffix[k]);
    free(e.norm.p);
    cism__pieces_free(&e.pieces);
    cism__pieces_free(&e.tmp);
    cism__bpe_scratch_free(&e.sc);
    return r ? cism__fail(CISM_ERR_OUT_OF_MEMORY, "tokenize: out of memory") : CISM_OK;
}

/* ---- public API ---------------------------------------------------------------- */
static cism_status need_tokenizer(const cism_model *m, const char *fn) {
    if (!m) return cism__fail(CISM_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (!m->tokenizer)
        return cism__fail(CISM_ERR_UNSUPPORTED, "%s: this model file carries no tokenizer (convert it again with a "
                          "current `cism convert` to embed one)", fn);
    return CISM_OK;
}

int32_t cism_model_has_tokenizer(const cism_model *model) { return model && model->tokenizer ? 1 : 0; }

cism_status cism_tokenize(const cism_model *model, const char *text, size_t text_len, uint32_t flags,
                          int32_t *tokens, int32_t capacity, int32_t *n_tokens) {
    cism__ids ids = {NULL, 0, 0};
    cism_status st;
    size_t bad;
    cism__clear_error();
    if ((st = need_tokenizer(model, "cism_tokenize"))) return st;
    if (!n_tokens || (!text && text_len) || capacity < 0 || (capacity > 0 && !tokens))
        return cism__fail(CISM_ERR_INVALID_ARG, "cism_tokenize: bad argument");
    if (flags & ~(uint32_t)(CISM_TOKENIZE_ADD_SPECIAL | CISM_TOKENIZE_PARSE_SPECIAL))
        return cism__fail(CISM_ERR_INVALID_ARG, "cism_tokenize: unknown flags 0x%x", flags);
    bad = cism__utf8_validate((const uint8_t *)text, text_len);
    if (bad != text_len)
        return cism__fail(CISM_ERR_INVALID_ARG, "cism_tokenize: text is not valid UTF-8 (at byte %llu)", (unsigned long long)bad);
    if ((st = cism__tokenizer_encode(model->tokenizer, (const uint8_t *)text, text_len, flags, &ids))) {
        free(ids.p);
        return st;
    }
    if (ids.n > (size_t)INT32_MAX) {
        free(ids.p);
        return cism__fail(CISM_ERR_INVALID_ARG, "cism_tokenize: more than 2^31 tokens");
    }
    *n_tokens = (int32_t)ids.n;
    if (ids.n > (size_t)capacity) {
        free(ids.p);
        return cism__fail(CISM_ERR_BUFFER_SMALL, "cism_tokenize: %d tokens do not fit in %d", (int)*n_tokens, (int)capacity);
    }
    if (ids.n) memcpy(tokens, ids.p, ids.n * sizeof(int32_t));
    free(ids.p);
    return CISM_OK;
}

static cism_status check_token(const cism_model *m, int32_t token, const char *fn) {
    cism_status st = need_tokenizer(m, fn);
    if (st) return st;
    if (token < 0 || token >= m->tokenizer->n_tokens || !m->tokenizer->flags[token])
        return cism__fail(CISM_ERR_TOKEN_RANGE, "%s: token %d is not in the tokenizer's vocabulary", fn, (int)token);
    return CISM_OK;
}

cism_status cism_token_to_piece(const cism_model *model, int32_t token, const char **piece, size_t *piece_len) {
    cism_status st;
    cism__clear_error();
    if ((st = check_token(model, token, "cism_token_to_piece"))) return st;
    if (!piece || !piece_len) return cism__fail(CISM_ERR_INVALID_ARG, "cism_token_to_piece: NULL output");
    *piece = (const char *)model->tokenizer->tok[token];
    *piece_len = model->tokenizer->tok_len[token];
    return CISM_OK;
}

cism_status cism_token_from_piece(const cism_model *model, const char *piece, size_t piece_len, int32_t *token) {
    const cism__tokenizer *t;
    int32_t id, k;
    cism_status st;
    cism__clear_error();
    if ((st = need_tokenizer(model, "cism_token_from_piece"))) return st;
    if (!token || (!piece && piece_len)) return cism__fail(CISM_ERR_INVALID_ARG, "cism_token_from_piece: bad argument");
    t = model->tokenizer;
    for (k = 0; k < t->n_tokens; k++)   /* added tokens first, as HF looks them up first */
        if ((t->flags[k] & CISM__TOK_ADDED) && t->tok_len[k] == piece_len && memcmp(t->tok[k], piece, piece_len) == 0) {
            *token = k;
            return CISM_OK;
        }
    id = piece_len ? cism__vocab_find(t, (const uint8_t *)piece, piece_len) : -1;
    if (id < 0) return cism__fail(CISM_ERR_INVALID_ARG, "cism_token_from_piece: no token has this text");
    *token = id;
    return CISM_OK;
}

cism_status cism_token_flags(const cism_model *model, int32_t token, uint32_t *flags) {
    const cism__tokenizer *t;
    uint8_t f;
    cism_status st;
    int b;
    cism__clear_error();
    if ((st = check_token(model, token, "cism_token_flags"))) return st;
    if (!flags) return cism__fail(CISM_ERR_INVALID_ARG, "cism_token_flags: flags is NULL");
    t = model->tokenizer;
    f = t->flags[token];
    *flags = (f & CISM__TOK_NORMAL ? CISM_TOKEN_NORMAL : 0u) | (f & CISM__TOK_ADDED ? CISM_TOKEN_ADDED : 0u) |
             (f & CISM__TOK_SPECIAL ? CISM_TOKEN_SPECIAL : 0u);
    for (b = 0; b < 256; b++)
        if (t->fallback_token[b] == token) *flags |= CISM_TOKEN_BYTE;
    return CISM_OK;
}
