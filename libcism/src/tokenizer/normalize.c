/* normalize.c - the normalizer steps of the supported tokenizers, applied in
 * order to one piece of text (Hugging Face normalizes each stretch of text
 * between added tokens on its own). */
#include "tokenizer.h"
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

static const uint8_t METASPACE[3] = {0xE2, 0x96, 0x81};  /* U+2581 */

static int needs_nfc(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int len;
        if (s[i] < 0x80) { i++; continue; }
        len = cism__utf8_len(s + i, n - i);
        if (len <= 0) return 1;
        if (cism__uni_flags(cism__utf8_decode(s + i, len)) & CISM__U_NFC) return 1;
        i += (size_t)len;
    }
    return 0;
}

/* One step from `in` to `out` (reset). Returns 0 or -1. */
static int step(int kind, const uint8_t *s, size_t n, cism__buf *out) {
    size_t i, a, b;
    out->n = 0;
    switch (kind) {
    case CISM__NORM_NFC: {
        uint8_t *r;
        size_t rn;
        if (!needs_nfc(s, n)) return cism__buf_put(out, s, n);
        if (cism__nfc(s, n, &r, &rn)) return -1;
        i = (size_t)cism__buf_put(out, r, rn);
        free(r);
        return (int)i;
    }
    case CISM__NORM_PREPEND_METASPACE:
        if (n == 0) return 0;
        return cism__buf_put(out, METASPACE, 3) || cism__buf_put(out, s, n) ? -1 : 0;
    case CISM__NORM_SPACE_TO_METASPACE:
        if (cism__buf_reserve(out, n * 3)) return -1;
        for (i = 0; i < n; i++) {
            if (s[i] == ' ') { memcpy(out->p + out->n, METASPACE, 3); out->n += 3; }
            else out->p[out->n++] = s[i];
        }
        return 0;
    case CISM__NORM_STRIP_SPACES:
        a = 0;
        b = n;
        while (a < b && s[a] == ' ') a++;
        while (b > a && s[b - 1] == ' ') b--;
        return cism__buf_put(out, s + a, b - a);
    case CISM__NORM_COLLAPSE_SPACES:
        if (cism__buf_reserve(out, n)) return -1;
        for (i = 0; i < n; i++) {
            if (s[i] == ' ' && i + 1 < n && s[i + 1] == ' ') {
                while (i + 1 < n && s[i + 1] == ' ') i++;
            }
            out->p[out->n++] = s[i];
        }
        return 0;
    default:
        return -1;
    }
}

int cism__normalize(const cism__tokenizer *t, const uint8_t *s, size_t n, cism__buf *out) {
    cism__buf tmp;
    int k, r = 0;
    out->n = 0;
    if (n == 0) return 0;   /* every step maps empty text to empty text */
    if (t->n_norm == 0) return cism__buf_put(out, s, n);
    memset(&tmp, 0, sizeof(tmp));
    if (cism__buf_put(&tmp, s, n)) return -1;
    for (k = 0; k < t->n_norm && r == 0; k++) {
        cism__buf sw;
        r = step(t->norm[k], tmp.p, tmp.n, out);
        sw = tmp; tmp = *out; *out = sw;   /* result now in tmp */
    }
    /* the last result is in tmp: hand it over */
    free(out->p);
    *out = tmp;
    return r;
}
