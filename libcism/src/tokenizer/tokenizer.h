/* tokenizer.h - the tokenizer of a loaded model (read-only after load, shared
 * by every thread) and the internal interfaces of its parts:
 *   tokenizer.c  load + validation from tokenizer.* metadata, public API
 *   special.c    added/special tokens, matched before anything else
 *   normalize.c  normalizer steps (NFC, SentencePiece-style spaces)
 *   pretokenize.c pre-tokenizer steps (GPT-2 / Llama-3 / Qwen2 splits, digits, metaspace)
 *   bpe.c        vocabulary and merge tables, the BPE merge loop
 *   decode.c     detokenization and the streaming detokenizer
 *   chat.c       chat formats */
#ifndef CISM_TOKENIZER_H
#define CISM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "cism.h"

struct cism__file;

/* token flags (tokenizer.token_flags) */
enum {
    CISM__TOK_NORMAL = 1, CISM__TOK_ADDED = 2, CISM__TOK_SPECIAL = 4, CISM__TOK_LSTRIP = 8,
    CISM__TOK_RSTRIP = 16, CISM__TOK_SINGLE_WORD = 32, CISM__TOK_NORMALIZED = 64
};

enum { /* normalizer steps */
    CISM__NORM_NFC, CISM__NORM_PREPEND_METASPACE, CISM__NORM_SPACE_TO_METASPACE,
    CISM__NORM_STRIP_SPACES, CISM__NORM_COLLAPSE_SPACES
};
enum { /* pre-tokenizer steps */
    CISM__PRE_PREFIX_SPACE, CISM__PRE_GPT2, CISM__PRE_LLAMA3, CISM__PRE_QWEN2, CISM__PRE_DIGITS,
    CISM__PRE_DIGITS_INDIVIDUAL, CISM__PRE_METASPACE_FIRST, CISM__PRE_METASPACE_ALWAYS,
    CISM__PRE_METASPACE_NEVER, CISM__PRE_METASPACE_SPLIT, CISM__PRE_BYTE_LEVEL
};
enum { /* decoder steps */
    CISM__DEC_BYTE_LEVEL, CISM__DEC_METASPACE_TO_SPACE, CISM__DEC_BYTE_FALLBACK, CISM__DEC_FUSE,
    CISM__DEC_STRIP_LEADING_SPACE, CISM__DEC_METASPACE_FIRST, CISM__DEC_METASPACE_ALWAYS,
    CISM__DEC_METASPACE_NEVER
};
#define CISM__MAX_STEPS 16

/* A growable byte buffer and an int32 vector (scratch of one call). */
typedef struct cism__buf { uint8_t *p; size_t n, cap; } cism__buf;
typedef struct cism__ids { int32_t *p; size_t n, cap; } cism__ids;
int cism__buf_reserve(cism__buf *b, size_t extra);
int cism__buf_put(cism__buf *b, const void *data, size_t n);
int cism__ids_push(cism__ids *v, int32_t id);

/* Added-token matcher: a byte trie over token contents. */
typedef struct cism__matcher {
    int32_t n_nodes;
    int32_t *node_token;       /* token id ending at node, -1 */
    uint64_t *edge_key;        /* (node << 8 | byte) + 1, 0 = empty slot */
    int32_t *edge_child;
    uint32_t edge_mask;
    uint8_t first[256];
} cism__matcher;

typedef struct cism__tokenizer {
    int32_t n_tokens;
    const uint8_t **tok;       /* token strings (into the file, or `owned`) */
    uint32_t *tok_len;
    const uint8_t *flags;
    uint8_t *owned_text;       /* normalized contents of normalized added tokens */
    /* vocabulary hash (model vocabulary only): open addressing, ids */
    int32_t *vhash;
    uint32_t vmask;
    /* merges: key (left << 32 | right) + 1 -> rank, new id */
    uint64_t *mkey;
    uint32_t *mrank;
    int32_t *mnew;
    uint32_t mmask;
    int32_t byte_token[256];   /* byte-level: id of the byte's character, -1 */
    int32_t fallback_token[256]; /* "<0xXX>" ids, -1 */
    int32_t unk_id;
    int byte_fallback, fuse_unk, ignore_merges, byte_level;
    int norm[CISM__MAX_STEPS], n_norm;
    int pre[CISM__MAX_STEPS], n_pre;
    int dec[CISM__MAX_STEPS], n_dec;
    int32_t *prefix, n_prefix, *suffix, n_suffix;
    cism__matcher raw, normalized;     /* added tokens matched on raw / normalized text */
    int has_normalized_added;
    int32_t chat_format;
    const char *chat_system;          /* default system prompt or NULL */
    size_t chat_system_len;
    int32_t bos_id, eos_id;
} cism__tokenizer;

/* tokenizer.c */
cism_status cism__tokenizer_load(const struct cism__file *f, const char *label, int64_t vocab_size,
                                 int32_t bos_id, int32_t eos_id, cism__tokenizer **out);
void cism__tokenizer_free(cism__tokenizer *t);
/* Encodes valid UTF-8 text, appending ids. */
cism_status cism__tokenizer_encode(const cism__tokenizer *t, const uint8_t *text, size_t n, uint32_t flags,
                                   cism__ids *out);

/* special.c */
int cism__matcher_build(cism__matcher *m, const cism__tokenizer *t, int normalized);
void cism__matcher_free(cism__matcher *m);
/* Splits s[0..n) around added tokens. For each piece calls emit(user, start,
   end, id) with id -1 for text between tokens. parse_special 0 skips special
   tokens (they stay text). Returns 0 or the first non-zero emit result. */
typedef int (*cism__split_fn)(void *user, size_t start, size_t end, int32_t id);
int cism__matcher_split(const cism__matcher *m, const cism__tokenizer *t, const uint8_t *s, size_t n,
                        int parse_special, cism__split_fn emit, void *user);

/* normalize.c: applies the normalizer to s[0..n) into out (reset first). */
int cism__normalize(const cism__tokenizer *t, const uint8_t *s, size_t n, cism__buf *out);

/* pretokenize.c: a list of pieces (byte ranges of `text`). */
typedef struct cism__piece { size_t start, len; int at_origin; } cism__piece;
typedef struct cism__pieces { cism__piece *p; size_t n, cap; cism__buf text; } cism__pieces;
/* Splits s into pieces by the pre-tokenizer; at_origin: s starts the input. */
int cism__pretokenize(const cism__tokenizer *t, const uint8_t *s, size_t n, int at_origin, cism__pieces *out,
                      cism__pieces *tmp);
void cism__pieces_free(cism__pieces *p);

/* bpe.c */
int cism__vocab_build(cism__tokenizer *t);
int cism__merges_build(cism__tokenizer *t, const uint8_t *pairs, uint64_t n_pairs);
int32_t cism__vocab_find(const cism__tokenizer *t, const uint8_t *s, size_t n);
typedef struct cism__bpe_scratch {
    int32_t *sym, *prev, *next;
    uint32_t *heap_rank, *heap_pos;
    int32_t *heap_new;
    size_t cap, heap_cap;
    cism__buf mapped;
} cism__bpe_scratch;
int cism__bpe(const cism__tokenizer *t, const uint8_t *s, size_t n, cism__bpe_scratch *sc, cism__ids *out);
void cism__bpe_scratch_free(cism__bpe_scratch *sc);

/* decode.c */
/* The raw bytes of token `id` as the decoder sees it alone (byte-level
   characters mapped back, U+2581 as space, <0xXX> as its byte). */
int cism__token_bytes(const cism__tokenizer *t, int32_t id, cism__buf *out, int *is_byte);

/* bytes_to_unicode of GPT-2: the code point standing for byte b. */
uint32_t cism__byte_char(int b);
/* Inverse: the byte of code point cp, or -1. */
int cism__char_byte(uint32_t cp);

#endif
