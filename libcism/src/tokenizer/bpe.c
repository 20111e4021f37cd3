/* bpe.c - vocabulary and merge tables, and the BPE merge loop, in the order
 * Hugging Face tokenizers applies merges: lowest rank first, leftmost first
 * among equal ranks, with the same handling of stale queue entries. */
#include "tokenizer.h"
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

/* ---- growable scratch ---------------------------------------------------- */
int cism__buf_reserve(cism__buf *b, size_t extra) {
    size_t need = b->n + extra, cap;
    uint8_t *p;
    if (need < b->n) return -1;
    if (need <= b->cap) return 0;
    cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > ((size_t)-1) / 2) return -1;
        cap *= 2;
    }
    p = (uint8_t *)realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int cism__buf_put(cism__buf *b, const void *data, size_t n) {
    if (cism__buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
    return 0;
}

int cism__ids_push(cism__ids *v, int32_t id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = (int32_t *)realloc(v->p, cap * sizeof(int32_t));
        if (!p) return -1;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = id;
    return 0;
}

/* ---- GPT-2 bytes_to_unicode ------------------------------------------------ */
static int printable_byte(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

uint32_t cism__byte_char(int b) {
    int k, n = 0;
    if (printable_byte(b)) return (uint32_t)b;
    for (k = 0; k < b; k++)
        if (!printable_byte(k)) n++;
    return 256u + (uint32_t)n;
}

int cism__char_byte(uint32_t cp) {
    int b, n = 0;
    if (cp < 256) return printable_byte((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    for (b = 0; b < 256; b++)
        if (!printable_byte(b) && n++ == (int)(cp - 256)) return b;
    return -1;
}

/* ---- vocabulary hash ------------------------------------------------------ */
static uint32_t hash_bytes(const uint8_t *s, size_t n) {
    uint32_t h = 2166136261u;
    size_t i;
    for (i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h ^ (h >> 15);
}

int cism__vocab_build(cism__tokenizer *t) {
    uint32_t size = 16, i;
    int32_t id;
    while (size < (uint32_t)t->n_tokens * 2u) size *= 2;
    t->vhash = (int32_t *)malloc(size * sizeof(int32_t));
    if (!t->vhash) return -1;
    for (i = 0; i < size; i++) t->vhash[i] = -1;
    t->vmask = size - 1;
    for (id = 0; id < t->n_tokens; id++) {
        uint32_t h;
        if (!(t->flags[id] & CISM__TOK_NORMAL)) continue;
        h = hash_bytes(t->tok[id], t->tok_len[id]) & t->vmask;
        while (t->vhash[h] >= 0) {
            int32_t o = t->vhash[h];
            if (t->tok_len[o] == t->tok_len[id] && memcmp(t->tok[o], t->tok[id], t->tok_len[id]) == 0) return -2;
            h = (h + 1) & t->vmask;
        }
        t->vhash[h] = id;
    }
    return 0;
}

int32_t cism__vocab_find(const cism__tokenizer *t, const uint8_t *s, size_t n) {
    uint32_t h = hash_bytes(s, n) & t->vmask;
    for (;;) {
        int32_t id = t->vhash[h];
        if (id < 0) return -1;
        if (t->tok_len[id] == n && memcmp(t->tok[id], s, n) == 0) return id;
        h = (h + 1) & t->vmask;
    }
}

/* ---- merges --------------------------------------------------------------- */
static uint32_t hash_pair(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (uint32_t)key;
}

static int merge_find(const cism__tokenizer *t, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id) {
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint32_t h;
    if (!t->mkey) return 0;
    h = hash_pair(key) & t->mmask;
    for (;;) {
        uint64_t k = t->mkey[h];
        if (k == 0) return 0;
        if (k == key) { *rank = t->mrank[h]; *new_id = t->mnew[h]; return 1; }
        h = (h + 1) & t->mmask;
    }
}

/* pairs: n_pairs (left, right) little-endian int64 pairs, rank = index.
   Returns 0, -1 out of memory, -2 bad id, -3 merged piece not in vocabulary,
   -4 duplicate pair. */
static int64_t le_i64(const uint8_t *p) {
    uint64_t v = 0;
    int i;
    for (i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return (int64_t)v;
}

int cism__merges_build(cism__tokenizer *t, const uint8_t *pairs, uint64_t n_pairs) {
    uint32_t size = 16;
    uint64_t r;
    uint8_t *cat = NULL;
    size_t cat_cap = 0;
    if (n_pairs == 0) return 0;
    while (size < n_pairs * 2) size *= 2;
    t->mkey = (uint64_t *)calloc(size, sizeof(uint64_t));
    t->mrank = (uint32_t *)malloc(size * sizeof(uint32_t));
    t->mnew = (int32_t *)malloc(size * sizeof(int32_t));
    if (!t->mkey || !t->mrank || !t->mnew) return -1;
    t->mmask = size - 1;
    for (r = 0; r < n_pairs; r++) {
        int64_t a = le_i64(pairs + 16 * r), b = le_i64(pairs + 16 * r + 8);
        int32_t merged;
        size_t len;
        uint64_t key;
        uint32_t h;
        if (a < 0 || b < 0 || a >= t->n_tokens || b >= t->n_tokens ||
            !(t->flags[a] & CISM__TOK_NORMAL) || !(t->flags[b] & CISM__TOK_NORMAL)) { free(cat); return -2; }
        len = (size_t)t->tok_len[a] + t->tok_len[b];
        if (len > cat_cap) {
            uint8_t *p = (uint8_t *)realloc(cat, len * 2);
            if (!p) { free(cat); return -1; }
            cat = p;
            cat_cap = len * 2;
        }
        memcpy(cat, t->tok[a], t->tok_len[a]);
        memcpy(cat + t->tok_len[a], t->tok[b], t->tok_len[b]);
        merged = cism__vocab_find(t, cat, len);
        if (merged < 0) { free(cat); return -3; }
        key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
        h = hash_pair(key) & t->mmask;
        while (t->mkey[h] != 0) {
            if (t->mkey[h] == key) { free(cat); return -4; }
            h = (h + 1) & t->mmask;
        }
        t->mkey[h] = key;
        t->mrank[h] = (uint32_t)r;
        t->mnew[h] = merged;
    }
    free(cat);
    return 0;
}

/* ---- the merge loop -------------------------------------------------------- */
void cism__bpe_scratch_free(cism__bpe_scratch *sc) {
    free(sc->sym); free(sc->prev); free(sc->next);
    free(sc->heap_rank); free(sc->heap_pos); free(sc->heap_new);
    free(sc->mapped.p);
    memset(sc, 0, sizeof(*sc));
}

static int scratch_reserve(cism__bpe_scratch *sc, size_t n) {
    if (n > sc->cap) {
        size_t cap = n < 64 ? 64 : n * 2;
        int32_t *a = (int32_t *)realloc(sc->sym, cap * sizeof(int32_t));
        if (!a) return -1;
        sc->sym = a;
        a = (int32_t *)realloc(sc->prev, cap * sizeof(int32_t));
        if (!a) return -1;
        sc->prev = a;
        a = (int32_t *)realloc(sc->next, cap * sizeof(int32_t));
        if (!a) return -1;
        sc->next = a;
        sc->cap = cap;
    }
    return 0;
}

/* min-heap on (rank, pos) */
typedef struct heap { cism__bpe_scratch *sc; size_t n; } heap;

static int heap_less(const cism__bpe_scratch *sc, size_t i, size_t j) {
    if (sc->heap_rank[i] != sc->heap_rank[j]) return sc->heap_rank[i] < sc->heap_rank[j];
    return sc->heap_pos[i] < sc->heap_pos[j];
}
static void heap_swap(cism__bpe_scratch *sc, size_t i, size_t j) {
    uint32_t r = sc->heap_rank[i], p = sc->heap_pos[i];
    int32_t w = sc->heap_new[i];
    sc->heap_rank[i] = sc->heap_rank[j]; sc->heap_pos[i] = sc->heap_pos[j]; sc->heap_new[i] = sc->heap_new[j];
    sc->heap_rank[j] = r; sc->heap_pos[j] = p; sc->heap_new[j] = w;
}
static int heap_push(heap *h, uint32_t rank, uint32_t pos, int32_t new_id) {
    cism__bpe_scratch *sc = h->sc;
    size_t i;
    if (h->n == sc->heap_cap) {
        size_t cap = sc->heap_cap ? sc->heap_cap * 2 : 64;
        uint32_t *r = (uint32_t *)realloc(sc->heap_rank, cap * sizeof(uint32_t));
        if (!r) return -1;
        sc->heap_rank = r;
        r = (uint32_t *)realloc(sc->heap_pos, cap * sizeof(uint32_t));
        if (!r) return -1;
        sc->heap_pos = r;
        {
            int32_t *w = (int32_t *)realloc(sc->heap_new, cap * sizeof(int32_t));
            if (!w) return -1;
            sc->heap_new = w;
        }
        sc->heap_cap = cap;
    }
    i = h->n++;
    sc->heap_rank[i] = rank; sc->heap_pos[i] = pos; sc->heap_new[i] = new_id;
    while (i > 0 && heap_less(sc, i, (i - 1) / 2)) {
        heap_swap(sc, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    return 0;
}
static void heap_pop(heap *h, uint32_t *pos, int32_t *new_id) {
    cism__bpe_scratch *sc = h->sc;
    size_t i = 0;
    *pos = sc->heap_pos[0];
    *new_id = sc->heap_new[0];
    h->n--;
    if (h->n == 0) return;
    sc->heap_rank[0] = sc->heap_rank[h->n]; sc->heap_pos[0] = sc->heap_pos[h->n]; sc->heap_new[0] = sc->heap_new[h->n];
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && heap_less(sc, l, m)) m = l;
        if (r < h->n && heap_less(sc, r, m)) m = r;
        if (m == i) break;
        heap_swap(sc, i, m);
        i = m;
    }
}

/* Appends a symbol. */
static void add_sym(cism__bpe_scratch *sc, size_t *n, int32_t id) { sc->sym[(*n)++] = id; }

int cism__bpe(const cism__tokenizer *t, const uint8_t *s, size_t n, cism__bpe_scratch *sc, cism__ids *out) {
    size_t ns = 0, i, pending_unk_len = 0;
    int pending_unk = 0;
    heap h;
    const uint8_t *word = s;
    size_t word_len = n;
    if (n == 0) return 0;
    if (t->byte_level) {
        /* the piece as byte-level characters (what the vocabulary holds) */
        sc->mapped.n = 0;
        if (cism__buf_reserve(&sc->mapped, n * 2)) return -1;
        for (i = 0; i < n; i++) sc->mapped.n += (size_t)cism__utf8_encode(cism__byte_char(s[i]), sc->mapped.p + sc->mapped.n);
        word = sc->mapped.p;
        word_len = sc->mapped.n;
    }
    if (t->ignore_merges) {
        int32_t id = cism__vocab_find(t, word, word_len);
        if (id >= 0) return cism__ids_push(out, id);
    }
    if (scratch_reserve(sc, word_len + 1)) return -1;
    for (i = 0; i < word_len;) {
        int len = cism__utf8_len(word + i, word_len - i);
        int32_t id;
        if (len <= 0) len = 1;
        id = cism__vocab_find(t, word + i, (size_t)len);
        if (id >= 0) {
            if (pending_unk) { add_sym(sc, &ns, t->unk_id); pending_unk = 0; }
            add_sym(sc, &ns, id);
        } else {
            int k, ok = t->byte_fallback;
            for (k = 0; ok && k < len; k++)
                if (t->fallback_token[word[i + (size_t)k]] < 0) ok = 0;
            if (ok) {
                if (scratch_reserve(sc, ns + (size_t)len + 2)) return -1;
                for (k = 0; k < len; k++) add_sym(sc, &ns, t->fallback_token[word[i + (size_t)k]]);
            } else if (t->unk_id >= 0) {
                if (pending_unk && t->fuse_unk) pending_unk_len += (size_t)len;
                else {
                    if (pending_unk) add_sym(sc, &ns, t->unk_id);
                    pending_unk = 1;
                    pending_unk_len = (size_t)len;
                }
            }
        }
        i += (size_t)len;
        if (scratch_reserve(sc, ns + 8)) return -1;
    }
    if (pending_unk) add_sym(sc, &ns, t->unk_id);
    (void)pending_unk_len;
    if (ns == 0) return 0;
    for (i = 0; i < ns; i++) {
        sc->prev[i] = (int32_t)i - 1;
        sc->next[i] = i + 1 < ns ? (int32_t)(i + 1) : -1;
    }
    h.sc = sc;
    h.n = 0;
    for (i = 0; i + 1 < ns; i++) {
        uint32_t rank;
        int32_t nid;
        if (merge_find(t, sc->sym[i], sc->sym[i + 1], &rank, &nid) && heap_push(&h, rank, (uint32_t)i, nid)) return -1;
    }
    while (h.n > 0) {
        uint32_t pos, rank;
        int32_t nid, cur_new, right;
        heap_pop(&h, &pos, &nid);
        if (sc->sym[pos] < 0 || sc->next[pos] < 0) continue;  /* removed, or last symbol */
        right = sc->next[pos];
        if (!merge_find(t, sc->sym[pos], sc->sym[right], &rank, &cur_new) || cur_new != nid) continue; /* stale */
        sc->sym[pos] = nid;
        sc->sym[right] = -1;
        sc->next[pos] = sc->next[right];
        if (sc->next[right] >= 0) sc->prev[sc->next[right]] = (int32_t)pos;
        if (sc->prev[pos] >= 0 && merge_find(t, sc->sym[sc->prev[pos]], nid, &rank, &cur_new) &&
            heap_push(&h, rank, (uint32_t)sc->prev[pos], cur_new)) return -1;
        if (sc->next[pos] >= 0 && merge_find(t, nid, sc->sym[sc->next[pos]], &rank, &cur_new) &&
            heap_push(&h, rank, pos, cur_new)) return -1;
    }
    for (i = 0; i < ns; i++)
        if (sc->sym[i] >= 0 && cism__ids_push(out, sc->sym[i])) return -1;
    return 0;
}
