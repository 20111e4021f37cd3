/* pretokenize.c - the pre-tokenizer steps, written out by hand (no regex
 * engine): GPT-2's split, Llama-3's and Qwen2's split (the same pattern with
 * \p{N}{1,3} or \p{N}), Digits, Metaspace, and ByteLevel's prefix space. Each
 * split reproduces the leftmost-first, backtracking behaviour of the regex
 * Hugging Face compiles (Oniguruma), including \s+(?!\S). */
#include "tokenizer.h"
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

static const uint8_t METASPACE[3] = {0xE2, 0x96, 0x81};

/* class of the character at s[i]: flags, and its length */
typedef struct ch { unsigned f; uint32_t cp; int len; } ch;

static ch char_at(const uint8_t *s, size_t n, size_t i) {
    ch c;
    if (s[i] < 0x80) {
        c.cp = s[i];
        c.len = 1;
        c.f = (c.cp >= 'a' && c.cp <= 'z') || (c.cp >= 'A' && c.cp <= 'Z') ? CISM__U_L
            : (c.cp >= '0' && c.cp <= '9') ? CISM__U_N
            : (c.cp == ' ' || (c.cp >= 9 && c.cp <= 13)) ? CISM__U_WS : 0;
        return c;
    }
    c.len = cism__utf8_len(s + i, n - i);
    if (c.len <= 0) c.len = 1;
    c.cp = cism__utf8_decode(s + i, c.len);
    c.f = cism__uni_flags(c.cp);
    return c;
}

#define IS_L(c) ((c).f & CISM__U_L)
#define IS_N(c) ((c).f & CISM__U_N)
#define IS_WS(c) ((c).f & CISM__U_WS)
#define IS_OTHER(c) (!((c).f & (CISM__U_L | CISM__U_N | CISM__U_WS)))
#define IS_CRLF(c) ((c).cp == '\r' || (c).cp == '\n')

/* end of the run of characters of class `mask` (or "other" when mask 0) from i */
static size_t run(const uint8_t *s, size_t n, size_t i, unsigned mask) {
    while (i < n) {
        ch c = char_at(s, n, i);
        if (mask ? !(c.f & mask) : !IS_OTHER(c)) break;
        i += (size_t)c.len;
    }
    return i;
}

/* \s+(?!\S) then \s+ from i (s[i] is whitespace) */
static size_t ws_rule(const uint8_t *s, size_t n, size_t i) {
    size_t j = i, last = i;
    while (j < n) {
        ch c = char_at(s, n, j);
        if (!IS_WS(c)) break;
        last = j;
        j += (size_t)c.len;
    }
    if (j == n || last == i) return j;   /* at the end, or a single character */
    return last;                          /* leave the last whitespace to the next word */
}

static int lower_is(uint32_t cp, char want) {
    if (want == 's' && cp == 0x17F) return 1;   /* (?i) folds LONG S to s */
    return cp == (uint32_t)want || cp == (uint32_t)(want - 'a' + 'A');
}

/* '(s|t|re|ve|m|ll|d) at i: length or 0 */
static size_t contraction(const uint8_t *s, size_t n, size_t i, int icase) {
    ch a, b;
    if (s[i] != '\'' || i + 1 >= n) return 0;
    a = char_at(s, n, i + 1);
    if (icase) {
        if (lower_is(a.cp, 's') || lower_is(a.cp, 't') || lower_is(a.cp, 'm') || lower_is(a.cp, 'd')) return 1 + (size_t)a.len;
        if (i + 2 < n) {
            b = char_at(s, n, i + 2);
            if ((lower_is(a.cp, 'r') && lower_is(b.cp, 'e')) || (lower_is(a.cp, 'v') && lower_is(b.cp, 'e')) ||
                (lower_is(a.cp, 'l') && lower_is(b.cp, 'l')))
                return 3;
        }
        return 0;
    }
    if (a.cp == 's' || a.cp == 't' || a.cp == 'm' || a.cp == 'd') return 2;
    if (i + 2 < n) {
        b = char_at(s, n, i + 2);
        if ((a.cp == 'r' && b.cp == 'e') || (a.cp == 'v' && b.cp == 'e') || (a.cp == 'l' && b.cp == 'l')) return 3;
    }
    return 0;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t match_gpt2(const uint8_t *s, size_t n, size_t i) {
    ch c = char_at(s, n, i);
    size_t k = contraction(s, n, i, 0);
    if (k) return i + k;
    if (c.cp == ' ' && i + 1 < n) {
        ch d = char_at(s, n, i + 1);
        if (IS_L(d)) return run(s, n, i + 1, CISM__U_L);
        if (IS_N(d)) return run(s, n, i + 1, CISM__U_N);
        if (IS_OTHER(d)) return run(s, n, i + 1, 0);
    }
    if (IS_L(c)) return run(s, n, i, CISM__U_L);
    if (IS_N(c)) return run(s, n, i, CISM__U_N);
    if (IS_OTHER(c)) return run(s, n, i, 0);
    return ws_rule(s, n, i);
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}
   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t match_llama3(const uint8_t *s, size_t n, size_t i, int max_digits) {
    ch c = char_at(s, n, i);
    size_t k = contraction(s, n, i, 1), j;
    if (k) return i + k;
    if (IS_L(c)) return run(s, n, i, CISM__U_L);
    if (!IS_N(c) && !IS_CRLF(c) && i + (size_t)c.len < n) {
        ch d = char_at(s, n, i + (size_t)c.len);
        if (IS_L(d)) return run(s, n, i + (size_t)c.len, CISM__U_L);
    }
    if (IS_N(c)) {
        int cnt = 0;
        j = i;
        while (j < n && cnt < max_digits) {
            ch d = char_at(s, n, j);
            if (!IS_N(d)) break;
            j += (size_t)d.len;
            cnt++;
        }
        return j;
    }
    j = 0;
    if (IS_OTHER(c)) j = run(s, n, i, 0);
    else if (c.cp == ' ' && i + 1 < n && IS_OTHER(char_at(s, n, i + 1))) j = run(s, n, i + 1, 0);
    if (j) {
        while (j < n && (s[j] == '\r' || s[j] == '\n')) j++;
        return j;
    }
    /* whitespace: \s*[\r\n]+ ends after the last CR/LF of the run */
    {
        size_t e = i, after_crlf = 0;
        while (e < n) {
            ch d = char_at(s, n, e);
            if (!IS_WS(d)) break;
            e += (size_t)d.len;
            if (IS_CRLF(d)) after_crlf = e;
        }
        if (after_crlf) return after_crlf;
    }
    return ws_rule(s, n, i);
}

/* ---- piece lists ----------------------------------------------------------- */
void cism__pieces_free(cism__pieces *p) {
    free(p->p);
    free(p->text.p);
    memset(p, 0, sizeof(*p));
}

static int add_piece(cism__pieces *p, size_t start, size_t len, int at_origin) {
    if (len == 0) return 0;   /* empty pieces are dropped, as HF does */
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 32;
        cism__piece *np = (cism__piece *)realloc(p->p, cap * sizeof(*np));
        if (!np) return -1;
        p->p = np;
        p->cap = cap;
    }
    p->p[p->n].start = start;
    p->p[p->n].len = len;
    p->p[p->n].at_origin = at_origin;
    p->n++;
    return 0;
}

/* Applies one step from `in` to `out` (out's text is rebuilt when the step
   rewrites text, else shares in's text by copying it). */
static int apply(int step, const cism__pieces *in, cism__pieces *out) {
    size_t k;
    out->n = 0;
    out->text.n = 0;
    if (cism__buf_put(&out->text, in->text.p, in->text.n)) return -1;
    for (k = 0; k < in->n; k++) {
        const cism__piece *pc = &in->p[k];
        const uint8_t *s = in->text.p + pc->start;
        size_t n = pc->len, i = 0, base = pc->start;
        int origin = pc->at_origin;
        switch (step) {
        case CISM__PRE_PREFIX_SPACE:
            if (n == 0 || s[0] != ' ') {
                size_t at = out->text.n;
                if (cism__buf_reserve(&out->text, n + 1)) return -1;
                out->text.p[at] = ' ';
                memcpy(out->text.p + at + 1, out->text.p + base, n);
                out->text.n += n + 1;
                if (add_piece(out, at, n + 1, origin)) return -1;
            } else if (add_piece(out, base, n, origin)) return -1;
            break;
        case CISM__PRE_GPT2:
        case CISM__PRE_LLAMA3:
        case CISM__PRE_QWEN2:
            while (i < n) {
                size_t e = step == CISM__PRE_GPT2 ? match_gpt2(s, n, i) : match_llama3(s, n, i, step == CISM__PRE_LLAMA3 ? 3 : 1);
                if (e <= i) e = i + 1;   /* cannot happen; keeps progress certain */
                if (add_piece(out, base + i, e - i, origin && i == 0)) return -1;
                i = e;
            }
            break;
        case CISM__PRE_DIGITS:
        case CISM__PRE_DIGITS_INDIVIDUAL:
            while (i < n) {
                ch c = char_at(s, n, i);
                size_t e;
                if (IS_N(c)) e = step == CISM__PRE_DIGITS ? run(s, n, i, CISM__U_N) : i + (size_t)c.len;
                else {
                    e = i;
                    while (e < n) {
                        ch d = char_at(s, n, e);
                        if (IS_N(d)) break;
                        e += (size_t)d.len;
                    }
                }
                if (add_piece(out, base + i, e - i, origin && i == 0)) return -1;
                i = e;
            }
            break;
        case CISM__PRE_METASPACE_FIRST:
        case CISM__PRE_METASPACE_ALWAYS:
        case CISM__PRE_METASPACE_NEVER: {
            size_t at = out->text.n, j;
            int prepend = step == CISM__PRE_METASPACE_ALWAYS || (step == CISM__PRE_METASPACE_FIRST && origin);
            /* spaces become U+2581 first; then prepend unless it starts with one */
            if (prepend && !(s[0] == ' ' || (n >= 3 && memcmp(s, METASPACE, 3) == 0)))
                if (cism__buf_put(&out->text, METASPACE, 3)) return -1;
            if (cism__buf_reserve(&out->text, n * 3)) return -1;
            s = out->text.p + base;   /* the buffer may have moved */
            for (j = 0; j < n; j++) {
                if (s[j] == ' ') { memcpy(out->text.p + out->text.n, METASPACE, 3); out->text.n += 3; }
                else out->text.p[out->text.n++] = s[j];
            }
            if (add_piece(out, at, out->text.n - at, origin)) return -1;
            break;
        }
        case CISM__PRE_METASPACE_SPLIT: {
            size_t from = 0, j;
            for (j = 1; j + 3 <= n; j++) {
                if (memcmp(s + j, METASPACE, 3) == 0) {
                    if (add_piece(out, base + from, j - from, origin && from == 0)) return -1;
                    from = j;
                    j += 2;
                }
            }
            if (add_piece(out, base + from, n - from, origin && from == 0)) return -1;
            break;
        }
        default:   /* byte_level: no split here; bpe.c maps bytes */
            if (add_piece(out, base, n, origin)) return -1;
        }
    }
    return 0;
}

int cism__pretokenize(const cism__tokenizer *t, const uint8_t *s, size_t n, int at_origin, cism__pieces *out,
                      cism__pieces *tmp) {
    int k;
    out->n = 0;
    out->text.n = 0;
    if (cism__buf_put(&out->text, s, n)) return -1;
    if (add_piece(out, 0, n, at_origin)) return -1;
    for (k = 0; k < t->n_pre; k++) {
        cism__pieces sw;
        if (t->pre[k] == CISM__PRE_BYTE_LEVEL) continue;
        if (apply(t->pre[k], out, tmp)) return -1;
        sw = *out; *out = *tmp; *tmp = sw;
    }
    return 0;
}
