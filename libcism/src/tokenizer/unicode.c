/* unicode.c - UTF-8 coding, lossy decoding as Rust does it, and NFC. */
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

extern const uint32_t cism__uni_ccc_table[];
extern const size_t cism__uni_ccc_table_count;
extern const uint32_t cism__uni_decomp[];
extern const uint32_t cism__uni_decomp_at[];
extern const size_t cism__uni_decomp_count;
extern const uint32_t cism__uni_decomp_pool[];
extern const uint64_t cism__uni_comp[];
extern const size_t cism__uni_comp_count;

/* Length of the valid prefix of a sequence starting at s (the "maximal
   subpart" of Unicode 3.9 / Rust's error_len), and whether it is complete. */
static int utf8_prefix(const uint8_t *s, size_t n, int *complete) {
    uint8_t c = s[0], lo = 0x80, hi = 0xBF;
    int need, i;
    *complete = 0;
    if (c < 0x80) { *complete = 1; return 1; }
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        else if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        else if (c == 0xF4) hi = 0x8F;
    } else return 1;
    for (i = 1; i < need; i++) {
        if ((size_t)i >= n) return i;   /* truncated: incomplete */
        if (s[i] < lo || s[i] > hi) return i;
        lo = 0x80; hi = 0xBF;
    }
    *complete = 1;
    return need;
}

int cism__utf8_len(const uint8_t *s, size_t n) {
    int complete, len;
    if (n == 0) return 0;
    len = utf8_prefix(s, n, &complete);
    return complete ? len : 0;
}

uint32_t cism__utf8_decode(const uint8_t *s, int len) {
    switch (len) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default: return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
}

int cism__utf8_encode(uint32_t cp, uint8_t *out) {
    if (cp < 0x80) { out[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { out[0] = (uint8_t)(0xC0 | (cp >> 6)); out[1] = (uint8_t)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12)); out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18)); out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

size_t cism__utf8_validate(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int len;
        if (s[i] < 0x80) { i++; continue; }
        len = cism__utf8_len(s + i, n - i);
        if (!len) return i;
        i += (size_t)len;
    }
    return n;
}

size_t cism__utf8_lossy(const uint8_t *s, size_t n, int final, uint8_t *out, size_t *consumed) {
    size_t i = 0, o = 0;
    while (i < n) {
        int complete, len;
        if (s[i] < 0x80) { out[o++] = s[i++]; continue; }
        len = utf8_prefix(s + i, n - i, &complete);
        if (complete) {
            memcpy(out + o, s + i, (size_t)len);
            o += (size_t)len;
        } else {
            if (!final && i + (size_t)len == n) break;  /* may still complete */
            out[o++] = 0xEF; out[o++] = 0xBF; out[o++] = 0xBD;
        }
        i += (size_t)len;
    }
    if (consumed) *consumed = i;
    return o;
}

/* ---- NFC (Unicode 9.0) ---------------------------------------------------- */
#define S_BASE 0xAC00u
#define L_BASE 0x1100u
#define V_BASE 0x1161u
#define T_BASE 0x11A7u
#define L_COUNT 19u
#define V_COUNT 21u
#define T_COUNT 28u
#define N_COUNT (V_COUNT * T_COUNT)
#define S_COUNT (L_COUNT * N_COUNT)

int cism__uni_ccc(uint32_t cp) {
    size_t lo = 0, hi = cism__uni_ccc_table_count;
    if (!(cism__uni_flags(cp) & CISM__U_NFC)) return 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint32_t key = cism__uni_ccc_table[mid] >> 8;
        if (key == cp) return (int)(cism__uni_ccc_table[mid] & 0xFF);
        if (key < cp) lo = mid + 1; else hi = mid;
    }
    return 0;
}

/* Appends the full canonical decomposition of cp to buf (room for 8). */
static int decompose(uint32_t cp, uint32_t *buf) {
    size_t lo = 0, hi = cism__uni_decomp_count;
    if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
        uint32_t s = cp - S_BASE;
        buf[0] = L_BASE + s / N_COUNT;
        buf[1] = V_BASE + (s % N_COUNT) / T_COUNT;
        if (s % T_COUNT) { buf[2] = T_BASE + s % T_COUNT; return 3; }
        return 2;
    }
    if (cism__uni_flags(cp) & CISM__U_NFC) {
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (cism__uni_decomp[mid] == cp) {
                uint32_t at = cism__uni_decomp_at[mid];
                int k, len = (int)(at & 7);
                for (k = 0; k < len; k++) buf[k] = cism__uni_decomp_pool[(at >> 3) + (uint32_t)k];
                return len;
            }
            if (cism__uni_decomp[mid] < cp) lo = mid + 1; else hi = mid;
        }
    }
    buf[0] = cp;
    return 1;
}

/* Primary composite of (a, b), or 0. */
static uint32_t compose(uint32_t a, uint32_t b) {
    uint64_t key = ((uint64_t)a << 42) | ((uint64_t)b << 21);
    size_t lo = 0, hi = cism__uni_comp_count;
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE && b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t k = cism__uni_comp[mid] & ~(uint64_t)0x1FFFFF;
        if (k == key) return (uint32_t)(cism__uni_comp[mid] & 0x1FFFFF);
        if (k < key) lo = mid + 1; else hi = mid;
    }
    return 0;
}

int cism__nfc(const uint8_t *s, size_t n, uint8_t **out, size_t *out_len) {
    uint32_t *cps, tmp[8];
    int *cls;
    size_t i = 0, m = 0, k, starter, r;
    int last, c;
    uint8_t *o;
    *out = NULL;
    *out_len = 0;
    /* every byte yields at most 3 code points after decomposition (a Hangul
       syllable is 3 bytes -> 3 jamo; other expansions are shorter per byte) */
    cps = (uint32_t *)malloc((n + 1) * 3 * sizeof(uint32_t));
    cls = (int *)malloc((n + 1) * 3 * sizeof(int));
    o = (uint8_t *)malloc(n * 4 + 4);
    if (!cps || !cls || !o) { free(cps); free(cls); free(o); return -1; }
    while (i < n) {
        int len = cism__utf8_len(s + i, n - i), d, j;
        uint32_t cp = cism__utf8_decode(s + i, len ? len : 1);
        i += (size_t)(len ? len : 1);
        d = decompose(cp, tmp);
        for (j = 0; j < d; j++) {
            cps[m] = tmp[j];
            cls[m] = cism__uni_ccc(tmp[j]);
            /* canonical ordering: stable insertion among non-starters */
            k = m;
            while (cls[k] != 0 && k > 0 && cls[k - 1] > cls[k]) {
                uint32_t tc = cps[k]; int tl = cls[k];
                cps[k] = cps[k - 1]; cls[k] = cls[k - 1];
                cps[k - 1] = tc; cls[k - 1] = tl;
                k--;
            }
            m++;
        }
    }
    /* canonical composition */
    if (m > 0) {
        starter = (size_t)-1;
        last = -1;
        r = 0;
        for (k = 0; k < m; k++) {
            uint32_t cp = cps[k], comp;
            c = cls[k];
            /* C is not blocked from the starter: nothing in between, or
               everything in between has a smaller non-zero class */
            if (starter != (size_t)-1 && (last < c || (last == 0 && r - 1 == starter))) {
                comp = compose(cps[starter], cp);
                if (comp) {
                    cps[starter] = comp;
                    continue;
                }
            }
            if (c == 0) { starter = r; last = 0; }
            else last = c;
            cps[r] = cp;
            cls[r] = c;
            r++;
        }
        m = r;
    }
    for (k = 0, i = 0; k < m; k++) i += (size_t)cism__utf8_encode(cps[k], o + i);
    free(cps);
    free(cls);
    *out = o;
    *out_len = i;
    return 0;
}
