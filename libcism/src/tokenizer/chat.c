/* chat.c - chat formats: a list of (role, content) messages rendered as the
 * prompt text a chat model was trained on. The formats reproduce the Jinja
 * templates of the model families (the converter checks a model's template
 * against them by rendering it); the text holds special tokens written out,
 * so tokenize it with CISM_TOKENIZE_PARSE_SPECIAL and without ADD_SPECIAL. */
#include "tokenizer.h"
#include "unicode.h"
#include "../core/error.h"
#include "../model/model.h"

#include <stdlib.h>
#include <string.h>

const char *const cism__chat_format_names[] = {"", "chatml", "llama3", "llama2", "mistral", "zephyr"};
const int cism__n_chat_formats = 6;

const char *cism_chat_format_name(cism_chat_format format) {
    if (format <= 0 || format >= cism__n_chat_formats) return NULL;
    return cism__chat_format_names[format];
}

cism_status cism_model_chat_format(const cism_model *model, cism_chat_format *format) {
    cism__clear_error();
    if (!model || !format) return cism__fail(CISM_ERR_INVALID_ARG, "cism_model_chat_format: NULL argument");
    if (!model->tokenizer || !model->tokenizer->chat_format)
        return cism__fail(CISM_ERR_UNSUPPORTED, "this model file names no chat format (its template was not recognized at conversion)");
    *format = model->tokenizer->chat_format;
    return CISM_OK;
}

typedef struct msg { const char *role, *content; size_t role_len, content_len; } msg;

static int is_role(const msg *m, const char *r) { return m->role_len == strlen(r) && memcmp(m->role, r, m->role_len) == 0; }

/* Python's str.isspace, which Jinja's trim and str.strip use */
static int py_space(uint32_t cp) { return (cism__uni_flags(cp) & CISM__U_WS) || (cp >= 0x1C && cp <= 0x1F); }

/* strips leading and trailing Python whitespace of s[0..n) */
static void strip(const char **s, size_t *n) {
    const uint8_t *p = (const uint8_t *)*s;
    size_t a = 0, b = *n;
    while (a < b) {
        int len = cism__utf8_len(p + a, b - a);
        if (len <= 0 || !py_space(cism__utf8_decode(p + a, len))) break;
        a += (size_t)len;
    }
    while (b > a) {
        size_t k = b;
        int len;
        do k--; while (k > a && (p[k] & 0xC0) == 0x80);
        len = cism__utf8_len(p + k, b - k);
        if (len <= 0 || !py_space(cism__utf8_decode(p + k, len))) break;
        b = k;
    }
    *s += a;
    *n = b - a;
}

static int put(cism__buf *b, const char *s) { return cism__buf_put(b, s, strlen(s)); }

static cism_status render(const cism__tokenizer *t, int fmt, const msg *m, int32_t n, int gen, cism__buf *o) {
    const char *bos = "<s>", *eos = "</s>", *sys = NULL;
    size_t bos_len = 3, eos_len = 4, sys_len = 0;
    int32_t i, first = 0;
    int r = 0;
    if (t && t->bos_id >= 0) { bos = (const char *)t->tok[t->bos_id]; bos_len = t->tok_len[t->bos_id]; }
    if (t && t->eos_id >= 0) { eos = (const char *)t->tok[t->eos_id]; eos_len = t->tok_len[t->eos_id]; }
    switch (fmt) {
    case CISM_CHAT_CHATML:
        if (t && t->chat_system && (n == 0 || !is_role(&m[0], "system")))
            r = put(o, "<|im_start|>system\n") || cism__buf_put(o, t->chat_system, t->chat_system_len) || put(o, "<|im_end|>\n");
        for (i = 0; i < n && !r; i++)
            r = put(o, "<|im_start|>") || cism__buf_put(o, m[i].role, m[i].role_len) || put(o, "\n") ||
                cism__buf_put(o, m[i].content, m[i].content_len) || put(o, "<|im_end|>\n");
        if (gen && !r) r = put(o, "<|im_start|>assistant\n");
        break;
    case CISM_CHAT_LLAMA3:
        if (n > 0) r = cism__buf_put(o, bos, bos_len);
        for (i = 0; i < n && !r; i++) {
            const char *c = m[i].content;
            size_t cn = m[i].content_len;
            strip(&c, &cn);
            r = put(o, "<|start_header_id|>") || cism__buf_put(o, m[i].role, m[i].role_len) || put(o, "<|end_header_id|>\n\n") ||
                cism__buf_put(o, c, cn) || put(o, "<|eot_id|>");
        }
        if (gen && !r) r = put(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case CISM_CHAT_LLAMA2:
    case CISM_CHAT_MISTRAL:
        if (n > 0 && is_role(&m[0], "system")) { sys = m[0].content; sys_len = m[0].content_len; first = 1; }
        if (fmt == CISM_CHAT_MISTRAL) r = cism__buf_put(o, bos, bos_len);
        for (i = first; i < n && !r; i++) {
            int user = is_role(&m[i], "user");
            if (user != ((i - first) % 2 == 0) || (!user && !is_role(&m[i], "assistant")))
                return cism__fail(CISM_ERR_INVALID_ARG, "chat format %s: after an optional system message, roles must alternate "
                                  "user/assistant/user/...", cism__chat_format_names[fmt]);
            if (fmt == CISM_CHAT_LLAMA2) {
                cism__buf tmp = {NULL, 0, 0};
                const char *c;
                size_t cn;
                if (i == first && sys)
                    r = put(&tmp, "<<SYS>>\n") || cism__buf_put(&tmp, sys, sys_len) || put(&tmp, "\n<</SYS>>\n\n");
                r = r || cism__buf_put(&tmp, m[i].content, m[i].content_len);
                c = tmp.p ? (const char *)tmp.p : "";
                cn = tmp.n;
                strip(&c, &cn);
                if (!r && user) r = cism__buf_put(o, bos, bos_len) || put(o, "[INST] ") || cism__buf_put(o, c, cn) || put(o, " [/INST]");
                else if (!r) r = put(o, " ") || cism__buf_put(o, c, cn) || put(o, " ") || cism__buf_put(o, eos, eos_len);
                free(tmp.p);
            } else if (user) {
                r = put(o, "[INST] ") || (i == first && sys && (cism__buf_put(o, sys, sys_len) || put(o, "\n\n"))) ||
                    cism__buf_put(o, m[i].content, m[i].content_len) || put(o, " [/INST]");
            } else {
                r = cism__buf_put(o, m[i].content, m[i].content_len) || cism__buf_put(o, eos, eos_len);
            }
        }
        break;
    case CISM_CHAT_ZEPHYR:
        for (i = 0; i < n && !r; i++)
            r = put(o, "<|") || cism__buf_put(o, m[i].role, m[i].role_len) || put(o, "|>\n") ||
                cism__buf_put(o, m[i].content, m[i].content_len) || cism__buf_put(o, eos, eos_len) || put(o, "\n");
        if (gen && !r) r = put(o, "<|assistant|>\n");
        break;
    default:
        return cism__fail(CISM_ERR_INVALID_ARG, "unknown chat format %d", fmt);
    }
    return r ? cism__fail(CISM_ERR_OUT_OF_MEMORY, "chat: out of memory") : CISM_OK;
}

cism_status cism_chat_apply(const cism_model *model, cism_chat_format format, const char *const *roles,
                            const size_t *role_lens, const char *const *contents, const size_t *content_lens,
                            int32_t n_messages, int32_t add_generation_prompt, char *text, size_t capacity,
                            size_t *text_len) {
    const cism__tokenizer *t = model ? model->tokenizer : NULL;
    cism__buf o = {NULL, 0, 0};
    msg *m;
    int32_t i;
    cism_status st;
    cism__clear_error();
    if (!text_len || (capacity > 0 && !text) || n_messages < 0 ||
        (n_messages > 0 && (!roles || !role_lens || !contents || !content_lens)))
        return cism__fail(CISM_ERR_INVALID_ARG, "cism_chat_apply: bad argument");
    if (format == CISM_CHAT_MODEL) {
        if (!t || !t->chat_format)
            return cism__fail(CISM_ERR_UNSUPPORTED, "cism_chat_apply: the model names no chat format; pass one explicitly");
        format = t->chat_format;
    }
    if (format <= 0 || format >= cism__n_chat_formats) return cism__fail(CISM_ERR_INVALID_ARG, "cism_chat_apply: unknown chat format %d", (int)format);
    m = (msg *)malloc(((size_t)n_messages + 1) * sizeof(msg));
    if (!m) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "out of memory");
    for (i = 0; i < n_messages; i++) {
        m[i].role = roles[i];
        m[i].role_len = role_lens[i];
        m[i].content = contents[i];
        m[i].content_len = content_lens[i];
        if ((!m[i].role && m[i].role_len) || (!m[i].content && m[i].content_len) ||
            cism__utf8_validate((const uint8_t *)m[i].role, m[i].role_len) != m[i].role_len ||
            cism__utf8_validate((const uint8_t *)m[i].content, m[i].content_len) != m[i].content_len) {
            free(m);
            return cism__fail(CISM_ERR_INVALID_ARG, "cism_chat_apply: message %d is not valid UTF-8", (int)i);
        }
        if (!m[i].role) m[i].role = "";
        if (!m[i].content) m[i].content = "";
    }
    st = render(t, format, m, n_messages, add_generation_prompt != 0, &o);
    free(m);
    if (st) { free(o.p); return st; }
    *text_len = o.n;
    if (o.n > capacity) {
        free(o.p);
        return cism__fail(CISM_ERR_BUFFER_SMALL, "cism_chat_apply: %llu bytes do not fit in %llu", (unsigned long long)*text_len, (unsigned long long)capacity);
    }
    if (o.n) memcpy(text, o.p, o.n);
    free(o.p);
    return CISM_OK;
}
