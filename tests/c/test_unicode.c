/* test_unicode.c - the tokenizer's Unicode layer: UTF-8 validation and
 * decoding of every scalar value, lossy decoding by maximal subparts (the
 * Unicode Standard's table 3-8 example, as Rust's from_utf8_lossy does),
 * character classes and NFC on known cases. The tables as a whole are
 * checked against Hugging Face over every code point by test_tokenizer, and
 * against their generator by tests/python/test_unicode_tables.py. */
#include "test_util.h"
#include "tokenizer/unicode.h"

#include <string.h>

static void nfc_is(const char *in, const char *want) {
    uint8_t *out = NULL;
    size_t n = 0;
    CHECK(cism__nfc((const uint8_t *)in, strlen(in), &out, &n) == 0);
    CHECK_MSG(out && n == strlen(want) && memcmp(out, want, n) == 0, "NFC(%s) gave %.*s", in, (int)n, out ? (const char *)out : "");
    free(out);
}

int main(void) {
    uint32_t cp;
    uint8_t buf[16], out[64];
    size_t n, used;
    static const uint8_t t38[] = {0x61, 0xF1, 0x80, 0x80, 0xE1, 0x80, 0xC2, 0x62, 0x80, 0x63, 0x80, 0xBF, 0x64};
    static const char t38_want[] = "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD" "d";
    for (cp = 0; cp < 0x110000; cp++) {
        int len;
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        len = cism__utf8_encode(cp, buf);
        if (cism__utf8_len(buf, (size_t)len) != len || cism__utf8_decode(buf, len) != cp) { CHECK_MSG(0, "U+%04X", cp); break; }
    }
    /* surrogates, overlongs, past U+10FFFF, truncated */
    CHECK(cism__utf8_validate((const uint8_t *)"\xED\xA0\x80", 3) == 0);
    CHECK(cism__utf8_validate((const uint8_t *)"\xC0\xAF", 2) == 0);
    CHECK(cism__utf8_validate((const uint8_t *)"\xE0\x80\xAF", 3) == 0);
    CHECK(cism__utf8_validate((const uint8_t *)"\xF4\x90\x80\x80", 4) == 0);
    CHECK(cism__utf8_validate((const uint8_t *)"ab\xF0\x9F\x98", 5) == 2);
    n = cism__utf8_lossy(t38, sizeof(t38), 1, out, NULL);
    CHECK(n == sizeof(t38_want) - 1 && memcmp(out, t38_want, n) == 0);
    /* not final: an incomplete tail waits */
    n = cism__utf8_lossy((const uint8_t *)"x\xF0\x9F\x98", 4, 0, out, &used);
    CHECK(n == 1 && used == 1);
    n = cism__utf8_lossy((const uint8_t *)"x\xF0\x9F\x98", 4, 1, out, &used);
    CHECK(n == 4 && used == 4 && memcmp(out, "x\xEF\xBF\xBD", 4) == 0);
    /* classes */
    CHECK(cism__uni_flags('a') & CISM__U_L);
    CHECK(cism__uni_flags(0x0663) & CISM__U_N);          /* ARABIC-INDIC DIGIT THREE */
    CHECK(cism__uni_flags(0x2167) & CISM__U_N);          /* ROMAN NUMERAL EIGHT (Nl) */
    CHECK(cism__uni_flags(0x3000) & CISM__U_WS);
    CHECK(!(cism__uni_flags(0x1C) & CISM__U_WS));        /* not White_Space, though Python's isspace says so */
    CHECK(!(cism__uni_flags(0x200B) & CISM__U_WS));      /* ZERO WIDTH SPACE is Cf */
    CHECK(cism__uni_flags(0x1C89) & CISM__U_L);          /* Unicode 16.0 letter, as HF's regex sees it */
    CHECK(cism__uni_flags('_') & CISM__U_WORD);
    CHECK(cism__uni_flags(0x24B6) & CISM__U_WORD);       /* CIRCLED LATIN CAPITAL A: Other_Alphabetic */
    CHECK(cism__uni_ccc(0x0301) == 230 && cism__uni_ccc(0x0323) == 220 && cism__uni_ccc('a') == 0);
    /* NFC of Unicode 9.0 */
    nfc_is("e\xCC\x81", "\xC3\xA9");                                      /* e + acute -> é */
    nfc_is("a\xCC\x88\xCC\xA3", "\xE1\xBA\xA1\xCC\x88");                  /* reordered: ạ + diaeresis */
    nfc_is("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81");       /* jamo -> 각 */
    nfc_is("\xEA\xB0\x80\xE1\x86\xA8", "\xEA\xB0\x81");                   /* 가 + jamo T -> 각 */
    nfc_is("\xE2\x84\xAB", "\xC3\x85");                                   /* ANGSTROM SIGN -> Å (singleton) */
    nfc_is("\xF0\x91\x8F\x82\xF0\x91\x8F\x82", "\xF0\x91\x8F\x82\xF0\x91\x8F\x82"); /* Unicode 16 pair: not composed in 9.0 */
    return test_finish("test_unicode");
}
