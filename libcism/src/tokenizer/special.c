/* special.c - added and special tokens: found before normalization and
 * pre-tokenization, leftmost-longest, with the single_word / lstrip / rstrip
 * rules and the "special tokens are text" switch of Hugging Face tokenizers. */
#include "tokenizer.h"
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

static uint32_t edge_hash(uint64_t key) {
    key ^= key >> 29;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 32;
    return (uint32_t)key;
}

static int32_t child(const cism__matcher *m, int32_t node, uint8_t byte) {
    uint64_t key = (((uint64_t)(uint32_t)node << 8) | byte) + 1;
    uint32_t h = edge_hash(key) & m->edge_mask;
    for (;;) {
        if (m->edge_key[h] == 0) return -1;
        if (m->edge_key[h] == key) return m->edge_child[h];
        h = (h + 1) & m->edge_mask;
    }
}

void cism__matcher_free(cism__matcher *m) {
    free(m->node_token);
    free(m->edge_key);
    free(m->edge_child);
    memset(m, 0, sizeof(*m));
}

/* Adds pattern p (id) to the trie. Returns 0, -1 out of memory. */
static int insert(cism__matcher *m, const uint8_t *p, size_t n, int32_t id, int32_t max_nodes) {
    int32_t node = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        int32_t c = child(m, node, p[i]);
        if (c < 0) {
            uint64_t key = (((uint64_t)(uint32_t)node << 8) | p[i]) + 1;
            uint32_t h = edge_hash(key) & m->edge_mask;
            if (m->n_nodes >= max_nodes) return -1;
            c = m->n_nodes++;
            m->node_token[c] = -1;
            while (m->edge_key[h] != 0) h = (h + 1) & m->edge_mask;
            m->edge_key[h] = key;
            m->edge_child[h] = c;
        }
        node = c;
    }
    /* the first token with a given content wins, as HF keeps one id per content */
    if (m->node_token[node] < 0) m->node_token[node] = id;
    return 0;
}

int cism__matcher_build(cism__matcher *m, const cism__tokenizer *t, int normalized) {
    int32_t id, max_nodes = 1;
    uint32_t size = 16;
    size_t total = 0;
    memset(m, 0, sizeof(*m));
    for (id = 0; id < t->n_tokens; id++)
        if ((t->flags[id] & CISM__TOK_ADDED) && !!(t->flags[id] & CISM__TOK_NORMALIZED) == normalized)
            total += (size_t)t->tok_len[id];
    if (total == 0) return 0;
    if (total > (1u << 26)) return -1;
    max_nodes = (int32_t)total + 1;
    while (size < (uint32_t)max_nodes * 2u) size *= 2;
    m->node_token = (int32_t *)malloc((size_t)max_nodes * sizeof(int32_t));
    m->edge_key = (uint64_t *)calloc(size, sizeof(uint64_t));
    m->edge_child = (int32_t *)malloc(size * sizeof(int32_t));
    if (!m->node_token || !m->edge_key || !m->edge_child) return -1;
    m->edge_mask = size - 1;
    m->n_nodes = 1;
    m->node_token[0] = -1;
    for (id = 0; id < t->n_tokens; id++) {
        const uint8_t *p = t->tok[id];
        size_t n = t->tok_len[id];
        if (!(t->flags[id] & CISM__TOK_ADDED) || !!(t->flags[id] & CISM__TOK_NORMALIZED) != normalized) continue;
        /* normalized tokens: their text was normalized at load */
        if (n == 0) continue;  /* would match everywhere; HF never matches it */
        m->first[p[0]] = 1;
        if (insert(m, p, n, id, max_nodes)) return -1;
    }
    return 0;
}

static int is_word_before(const uint8_t *s, size_t pos) {
    size_t k = pos;
    int len;
    if (pos == 0) return 0;
    do k--; while (k > 0 && (s[k] & 0xC0) == 0x80);
    len = cism__utf8_len(s + k, pos - k);
    return len > 0 && (cism__uni_flags(cism__utf8_decode(s + k, len)) & CISM__U_WORD);
}

static int is_word_after(const uint8_t *s, size_t n, size_t pos) {
    int len;
    if (pos >= n) return 0;
    len = cism__utf8_len(s + pos, n - pos);
    return len > 0 && (cism__uni_flags(cism__utf8_decode(s + pos, len)) & CISM__U_WORD);
}

/* Whitespace run ending at pos (returns its start) / starting at pos (its end). */
static size_t ws_back(const uint8_t *s, size_t pos) {
    while (pos > 0) {
        size_t k = pos;
        int len;
        do k--; while (k > 0 && (s[k] & 0xC0) == 0x80);
        len = cism__utf8_len(s + k, pos - k);
        if (len <= 0 || !(cism__uni_flags(cism__utf8_decode(s + k, len)) & CISM__U_WS)) break;
        pos = k;
    }
    return pos;
}
static size_t ws_fwd(const uint8_t *s, size_t n, size_t pos) {
    while (pos < n) {
        int len = cism__utf8_len(s + pos, n - pos);
        if (len <= 0 || !(cism__uni_flags(cism__utf8_decode(s + pos, len)) & CISM__U_WS)) break;
        pos += (size_t)len;
    }
    return pos;
}

int cism__matcher_split(const cism__matcher *m, const cism__tokenizer *t, const uint8_t *s, size_t n,
                        int parse_special, cism__split_fn emit, void *user) {
    size_t i = 0, done = 0;
    int r;
    if (m->n_nodes == 0) return n ? emit(user, 0, n, -1) : 0;
    while (i < n) {
        int32_t node = 0, best = -1;
        size_t j, best_end = 0, start, stop;
        uint8_t f;
        if (!m->first[s[i]]) { i++; continue; }
        for (j = i; j < n; j++) {
            node = child(m, node, s[j]);
            if (node < 0) break;
            if (m->node_token[node] >= 0) { best = m->node_token[node]; best_end = j + 1; }
        }
        if (best < 0) { i++; continue; }
        /* a match: like the HF iterator, a discarded match is still consumed */
        start = i;
        stop = best_end;
        i = best_end;
        f = t->flags[best];
        if ((f & CISM__TOK_SPECIAL) && !parse_special) continue;
        if ((f & CISM__TOK_SINGLE_WORD) && (is_word_before(s, start) || is_word_after(s, n, stop))) continue;
        if (f & CISM__TOK_LSTRIP) {
            size_t ns = ws_back(s, start);
            start = ns > done ? ns : done;
        }
        if (f & CISM__TOK_RSTRIP) stop = ws_fwd(s, n, stop);
        if (done < start && (r = emit(user, done, start, -1)) != 0) return r;
        if ((r = emit(user, start, stop, best)) != 0) return r;
        done = stop;
    }
    if (done < n) return emit(user, done, n, -1);
    return 0;
}
