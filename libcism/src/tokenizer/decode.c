/* decode.c - ids back to text: the batch decoder (Hugging Face's decoder
 * pipeline, step by step) and the streaming detokenizer, which emits text
 * as soon as it is complete UTF-8 and never splits a character. */
#include "tokenizer.h"
#include "unicode.h"
#include "../core/error.h"
#include "../model/model.h"

#include <stdlib.h>
#include <string.h>

static const uint8_t METASPACE[3] = {0xE2, 0x96, 0x81};
static const uint8_t REPLACEMENT[3] = {0xEF, 0xBF, 0xBD};

/* "<0xXX>" -> XX, or -1 */
static int byte_token_value(const uint8_t *s, size_t n) {
    int v = 0, k;
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    for (k = 3; k < 5; k++) {
        int c = s[k], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else return -1;
        v = v * 16 + d;
    }
    return v;
}

/* byte-level: the token's characters as bytes; the raw text when one of its
   characters is not a byte character (as HF does for added tokens) */
static int byte_level_bytes(const uint8_t *s, size_t n, cism__buf *out) {
    size_t i = 0, start = out->n;
    if (cism__buf_reserve(out, n)) return -1;
    while (i < n) {
        int len = cism__utf8_len(s + i, n - i), b;
        if (len <= 0) break;
        b = cism__char_byte(cism__utf8_decode(s + i, len));
        if (b < 0) {
            out->n = start;
            return cism__buf_put(out, s, n);
        }
        out->p[out->n++] = (uint8_t)b;
        i += (size_t)len;
    }
    return 0;
}

/* replaces U+2581 with `with` (a space, or nothing) */
static int replace_metaspace(const uint8_t *s, size_t n, int drop, cism__buf *out) {
    size_t i = 0;
    if (cism__buf_reserve(out, n)) return -1;
    while (i < n) {
        if (i + 3 <= n && memcmp(s + i, METASPACE, 3) == 0) {
            if (!drop) out->p[out->n++] = ' ';
            i += 3;
        } else out->p[out->n++] = s[i++];
    }
    return 0;
}

int cism__token_bytes(const cism__tokenizer *t, int32_t id, cism__buf *out, int *is_byte) {
    int k;
    *is_byte = 0;
    for (k = 0; k < t->n_dec; k++) {
        if (t->dec[k] == CISM__DEC_BYTE_LEVEL) return byte_level_bytes(t->tok[id], t->tok_len[id], out);
        if (t->dec[k] == CISM__DEC_BYTE_FALLBACK) {
            int v = byte_token_value(t->tok[id], t->tok_len[id]);
            if (v >= 0) {
                uint8_t b = (uint8_t)v;
                *is_byte = 1;
                return cism__buf_put(out, &b, 1);
            }
        }
    }
    for (k = 0; k < t->n_dec; k++)
        if (t->dec[k] == CISM__DEC_METASPACE_TO_SPACE || t->dec[k] >= CISM__DEC_METASPACE_FIRST)
            return replace_metaspace(t->tok[id], t->tok_len[id], 0, out);
    return cism__buf_put(out, t->tok[id], t->tok_len[id]);
}

/* ---- batch decoding: a list of strings through each step --------------------- */
typedef struct strs { size_t *off, *len, n, cap; cism__buf b; } strs;

static int strs_add(strs *s, size_t off, size_t len) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        size_t *o = (size_t *)realloc(s->off, cap * sizeof(size_t)), *l;
        if (!o) return -1;
        s->off = o;
        l = (size_t *)realloc(s->len, cap * sizeof(size_t));
        if (!l) return -1;
        s->len = l;
        s->cap = cap;
    }
    s->off[s->n] = off;
    s->len[s->n] = len;
    s->n++;
    return 0;
}
static const uint8_t *str_at(const strs *s, size_t i) { return s->b.p ? s->b.p + s->off[i] : (const uint8_t *)""; }

static void strs_free(strs *s) { free(s->off); free(s->len); free(s->b.p); memset(s, 0, sizeof(*s)); }

static int decode_step(int step, const strs *in, strs *out) {
    size_t i, j;
    out->n = 0;
    out->b.n = 0;
    if (step == CISM__DEC_BYTE_LEVEL || step == CISM__DEC_FUSE) {
        cism__buf raw = {NULL, 0, 0};
        for (i = 0; i < in->n; i++) {
            int r = step == CISM__DEC_FUSE ? cism__buf_put(&raw, str_at(in, i), in->len[i])
                                           : byte_level_bytes(str_at(in, i), in->len[i], &raw);
            if (r) { free(raw.p); return -1; }
        }
        if (step == CISM__DEC_FUSE) {
            free(out->b.p);
            out->b = raw;
            return strs_add(out, 0, raw.n);
        }
        if (cism__buf_reserve(&out->b, raw.n * 3 + 1)) { free(raw.p); return -1; }
        out->b.n = cism__utf8_lossy(raw.p, raw.n, 1, out->b.p, NULL);
        free(raw.p);
        return strs_add(out, 0, out->b.n);
    }
    for (i = 0; i < in->n; i++) {
        const uint8_t *s = str_at(in, i);
        size_t n = in->len[i], at = out->b.n;
        switch (step) {
        case CISM__DEC_METASPACE_TO_SPACE:
            if (replace_metaspace(s, n, 0, &out->b)) return -1;
            break;
        case CISM__DEC_METASPACE_FIRST:
        case CISM__DEC_METASPACE_ALWAYS:
        case CISM__DEC_METASPACE_NEVER:
            if (replace_metaspace(s, n, i == 0 && step != CISM__DEC_METASPACE_NEVER, &out->b)) return -1;
            break;
        case CISM__DEC_STRIP_LEADING_SPACE:
            if (n > 0 && s[0] == ' ') { s++; n--; }
            if (cism__buf_put(&out->b, s, n)) return -1;
            break;
        case CISM__DEC_BYTE_FALLBACK:
            if (byte_token_value(s, n) >= 0) {
                /* a run of byte tokens: valid UTF-8 as a whole, or one U+FFFD per byte */
                size_t k = i;
                uint8_t *run;
                while (k < in->n && byte_token_value(str_at(in, k), in->len[k]) >= 0) k++;
                run = (uint8_t *)malloc(k - i);
                if (!run) return -1;
                for (j = i; j < k; j++) run[j - i] = (uint8_t)byte_token_value(str_at(in, j), in->len[j]);
                if (cism__utf8_validate(run, k - i) == k - i) {
                    if (cism__buf_put(&out->b, run, k - i) || strs_add(out, at, k - i)) { free(run); return -1; }
                } else {
                    for (j = i; j < k; j++) {
                        size_t a2 = out->b.n;
                        if (cism__buf_put(&out->b, REPLACEMENT, 3) || strs_add(out, a2, 3)) { free(run); return -1; }
                    }
                }
                free(run);
                i = k - 1;
                continue;
            }
            if (cism__buf_put(&out->b, s, n)) return -1;
            break;
        default:
            return -1;
        }
        if (strs_add(out, at, out->b.n - at)) return -1;
    }
    return 0;
}

static int decode_all(const cism__tokenizer *t, const int32_t *ids, int32_t n, int skip_special, cism__buf *result) {
    strs a, b;
    int32_t i;
    int k, r = 0;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    for (i = 0; i < n && !r; i++) {
        int32_t id = ids[i];
        size_t at = a.b.n;
        if (skip_special && (t->flags[id] & CISM__TOK_SPECIAL)) continue;
        r = cism__buf_put(&a.b, t->tok[id], t->tok_len[id]) || strs_add(&a, at, t->tok_len[id]);
    }
    for (k = 0; k < t->n_dec && !r; k++) {
        strs sw;
        r = decode_step(t->dec[k], &a, &b);
        sw = a; a = b; b = sw;
    }
    result->n = 0;
    for (i = 0; !r && (size_t)i < a.n; i++) {
        if (t->n_dec == 0 && i > 0) r = cism__buf_put(result, " ", 1);   /* no decoder: HF joins with spaces */
        if (!r) r = cism__buf_put(result, str_at(&a, (size_t)i), a.len[i]);
    }
    strs_free(&a);
    strs_free(&b);
    return r;
}

static cism_status check_ids(const cism_model *m, const int32_t *ids, int32_t n, const char *fn) {
    int32_t i;
    if (!m) return cism__fail(CISM_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (!m->tokenizer) return cism__fail(CISM_ERR_UNSUPPORTED, "%s: this model file carries no tokenizer", fn);
    if (n < 0 || (n > 0 && !ids)) return cism__fail(CISM_ERR_INVALID_ARG, "%s: bad token array", fn);
    for (i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->tokenizer->n_tokens || !m->tokenizer->flags[ids[i]])
            return cism__fail(CISM_ERR_TOKEN_RANGE, "%s: token %d (at %d) is not in the tokenizer's vocabulary", fn, (int)ids[i], (int)i);
    return CISM_OK;
}

cism_status cism_detokenize(const cism_model *model, const int32_t *tokens, int32_t n_tokens, uint32_t flags,
                            char *text, size_t capacity, size_t *text_len) {
    cism__buf out = {NULL, 0, 0};
    cism_status st;
    cism__clear_error();
    if ((st = check_ids(model, tokens, n_tokens, "cism_detokenize"))) return st;
    if (!text_len || (capacity > 0 && !text)) return cism__fail(CISM_ERR_INVALID_ARG, "cism_detokenize: bad output buffer");
    if (flags & ~(uint32_t)CISM_DETOKENIZE_SKIP_SPECIAL) return cism__fail(CISM_ERR_INVALID_ARG, "cism_detokenize: unknown flags 0x%x", flags);
    if (decode_all(model->tokenizer, tokens, n_tokens, (flags & CISM_DETOKENIZE_SKIP_SPECIAL) != 0, &out)) {
        free(out.p);
        return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_detokenize: out of memory");
    }
    *text_len = out.n;
    if (out.n > capacity) {
        free(out.p);
        return cism__fail(CISM_ERR_BUFFER_SMALL, "cism_detokenize: %llu bytes do not fit in %llu", (unsigned long long)*text_len,
                          (unsigned long long)capacity);
    }
    if (out.n) memcpy(text, out.p, out.n);
    free(out.p);
    return CISM_OK;
}

/* ---- streaming ------------------------------------------------------------------ */
struct cism_detokenizer {
    cism_model *model;
    int skip_special;
    int started;          /* a non-skipped token was seen (metaspace decoder: first token) */
    int emitted;          /* text was emitted (strip_leading_space) */
    cism__buf pending;    /* bytes not yet emitted: an incomplete UTF-8 tail */
    cism__buf out, tmp;
};

cism_status cism_detokenizer_create(cism_model *model, uint32_t flags, cism_detokenizer **out) {
    cism_detokenizer *d;
    cism__clear_error();
    if (!out) return cism__fail(CISM_ERR_INVALID_ARG, "cism_detokenizer_create: out is NULL");
    *out = NULL;
    if (!model) return cism__fail(CISM_ERR_INVALID_ARG, "cism_detokenizer_create: model is NULL");
    if (!model->tokenizer) return cism__fail(CISM_ERR_UNSUPPORTED, "cism_detokenizer_create: this model file carries no tokenizer");
    if (flags & ~(uint32_t)CISM_DETOKENIZE_SKIP_SPECIAL) return cism__fail(CISM_ERR_INVALID_ARG, "cism_detokenizer_create: unknown flags 0x%x", flags);
    d = (cism_detokenizer *)calloc(1, sizeof(*d));
    if (!d) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "out of memory");
    d->model = model;
    d->skip_special = (flags & CISM_DETOKENIZE_SKIP_SPECIAL) != 0;
    cism__model_retain(model);
    *out = d;
    return CISM_OK;
}

void cism_detokenizer_free(cism_detokenizer *d) {
    if (!d) return;
    free(d->pending.p);
    free(d->out.p);
    free(d->tmp.p);
    cism__model_release(d->model);
    free(d);
}

cism_status cism_detokenizer_reset(cism_detokenizer *d) {
    cism__clear_error();
    if (!d) return cism__fail(CISM_ERR_INVALID_ARG, "cism_detokenizer_reset: NULL");
    d->started = d->emitted = 0;
    d->pending.n = 0;
    return CISM_OK;
}

static int has_step(const cism__tokenizer *t, int step) {
    int k;
    for (k = 0; k < t->n_dec; k++)
        if (t->dec[k] == step) return 1;
    return 0;
}

/* Moves the complete part of pending into out (final: everything, with
   U+FFFD for an incomplete tail). */
static int drain(cism_detokenizer *d, int final) {
    size_t used;
    const cism__tokenizer *t = d->model->tokenizer;
    size_t at = d->out.n;
    if (cism__buf_reserve(&d->out, d->pending.n * 3 + 3)) return -1;
    used = 0;
    if (d->pending.n) d->out.n += cism__utf8_lossy(d->pending.p, d->pending.n, final, d->out.p + d->out.n, &used);
    if (used && used < d->pending.n) memmove(d->pending.p, d->pending.p + used, d->pending.n - used);
    d->pending.n -= used;
    if (!d->emitted && d->out.n > at) {
        /* Strip acts once, on the first character of the whole text */
        d->emitted = 1;
        if (has_step(t, CISM__DEC_STRIP_LEADING_SPACE) && d->out.p[at] == ' ') {
            memmove(d->out.p + at, d->out.p + at + 1, d->out.n - at - 1);
            d->out.n--;
        }
    }
    return 0;
}

cism_status cism_detokenizer_push(cism_detokenizer *d, int32_t token, const char **text, size_t *text_len) {
    const cism__tokenizer *t;
    cism_status st;
    int is_byte = 0, r;
    cism__clear_error();
    if (!d || !text || !text_len) return cism__fail(CISM_ERR_INVALID_ARG, "cism_detokenizer_push: NULL argument");
    if ((st = check_ids(d->model, &token, 1, "cism_detokenizer_push"))) return st;
    t = d->model->tokenizer;
    d->out.n = 0;
    *text = "";
    *text_len = 0;
    if (d->skip_special && (t->flags[token] & CISM__TOK_SPECIAL)) return CISM_OK;
    d->tmp.n = 0;
    if (t->n_dec == 1 && t->dec[0] >= CISM__DEC_METASPACE_FIRST)
        r = replace_metaspace(t->tok[token], t->tok_len[token], !d->started && t->dec[0] != CISM__DEC_METASPACE_NEVER, &d->tmp);
    else if (t->n_dec == 0) {
        r = (d->started && cism__buf_put(&d->tmp, " ", 1)) || cism__buf_put(&d->tmp, t->tok[token], t->tok_len[token]);
    } else
        r = cism__token_bytes(t, token, &d->tmp, &is_byte);
    d->started = 1;
    /* a text token ends a run of byte-fallback tokens: what is left is invalid */
    if (!r && !is_byte && !t->byte_level && d->pending.n) r = drain(d, 1);
    if (!r) r = cism__buf_put(&d->pending, d->tmp.p, d->tmp.n);
    if (!r) r = drain(d, 0);
    if (r) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_detokenizer_push: out of memory");
    *text = (const char *)d->out.p;
    *text_len = d->out.n;
    if (!d->out.p) *text = "";
    return CISM_OK;
}

cism_status cism_detokenizer_flush(cism_detokenizer *d, const char **text, size_t *text_len) {
    cism__clear_error();
    if (!d || !text || !text_len) return cism__fail(CISM_ERR_INVALID_ARG, "cism_detokenizer_flush: NULL argument");
    d->out.n = 0;
    if (drain(d, 1)) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_detokenizer_flush: out of memory");
    *text = d->out.p ? (const char *)d->out.p : "";
    *text_len = d->out.n;
    d->started = d->emitted = 0;
    return CISM_OK;
}
