/* test_checksum.c - the integrity checks of .cism format version 3
 * (docs/FORMAT.md, "Integrity"): the shared CRC-32, the header checksum on
 * every load (every byte of header, metadata and directory, flipped, is
 * refused), relabelled files, the opt-in data check (CISM_PARAM_VERIFY_CHECKSUMS)
 * and the files of versions 1 and 2, which have no checksums and keep loading.
 * Uses the fuzz corpus's tiny models (tests/fuzz/make_corpus.py), in the
 * folder CISM_CORPUS_DIR (set by tests/c/CMakeLists.txt). */
#include "cism.h"
#include "test_util.h"
#include "../../libcism/src/core/crc32.h"

#include <string.h>

static const char *g_path = "test_checksum_tmp.cism";

static void quiet(void *user, int32_t level, const char *message) { (void)user; (void)level; (void)message; }

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    int i;
    for (i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Loads an image with these options; returns the status (and frees any model). */
static cism_status load(const unsigned char *img, size_t n, int verify, int mmap) {
    cism_params *p = NULL;
    cism_model *m = NULL;
    cism_status st;
    if (write_file(g_path, img, n) != 0) { fprintf(stderr, "cannot write %s\n", g_path); g_failures++; return CISM_ERR_IO; }
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_VERIFY_CHECKSUMS, verify));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_USE_MMAP, mmap));
    st = cism_model_load(g_path, p, &m);
    CHECK(st == CISM_OK ? m != NULL : m == NULL);
    cism_model_free(m);
    cism_params_free(p);
    return st;
}

static void expect_at(int line, cism_status st, cism_status want, const char *needle) {
    if (st != want || (needle && !strstr(cism_last_error(), needle))) {
        fprintf(stderr, "%s:%d: got %s: %s (wanted %s, '%s')\n", __FILE__, line, cism_status_str(st), cism_last_error(),
                cism_status_str(want), needle ? needle : "");
        g_failures++;
    }
}
#define EXPECT(st_, want, needle) expect_at(__LINE__, (st_), (want), (needle))

static void test_crc(void) {
    static const char *s = "123456789";
    unsigned char big[1000];
    size_t i, k;
    CHECK(cism__crc32(0, s, 9) == 0xcbf43926u); /* the CRC-32 check value */
    CHECK(cism__crc32(0, s, 0) == 0);
    for (i = 0; i < sizeof(big); i++) big[i] = (unsigned char)(i * 131u + 7u);
    for (k = 0; k <= 17; k++) /* pieces give the same value whatever the split and alignment */
        CHECK(cism__crc32(cism__crc32(0, big, k), big + k, sizeof(big) - k) == cism__crc32(0, big, sizeof(big)));
}

static void set_header_crc(unsigned char *d) {
    static const unsigned char zero[4] = {0, 0, 0, 0};
    uint64_t end = le64(d + 32) + le64(d + 40);
    uint32_t c = cism__crc32(cism__crc32(cism__crc32(0, d, 64), zero, 4), d + 68, (size_t)(end - 68));
    d[64] = (unsigned char)c; d[65] = (unsigned char)(c >> 8); d[66] = (unsigned char)(c >> 16); d[67] = (unsigned char)(c >> 24);
}

static void test_v3(const char *dir) {
    char path[1024];
    size_t n, i, end, data_off, data_at;
    unsigned char *img, *copy;
    cism_status st;
    snprintf(path, sizeof(path), "%s/notok-q8.cism", dir);
    img = read_file(path, &n);
    if (!img) { fprintf(stderr, "test_checksum: %s is missing\n", path); g_failures++; return; }
    CHECK(n > 128 && img[8] == 3);
    end = (size_t)(le64(img + 32) + le64(img + 40));
    data_off = (size_t)le64(img + 48);
    copy = (unsigned char *)malloc(n);
    EXPECT(load(img, n, 0, 1), CISM_OK, NULL);
    EXPECT(load(img, n, 1, 1), CISM_OK, NULL);
    EXPECT(load(img, n, 1, 0), CISM_OK, NULL);

    /* every byte of header, metadata and directory, one bit flipped: refused on a plain load */
    for (i = 0; i < end; i++) {
        memcpy(copy, img, n);
        copy[i] ^= (unsigned char)(1u << (i % 8));
        st = load(copy, n, 0, i % 2);
        CHECK_MSG(st == CISM_ERR_FORMAT || (i >= 8 && i < 12 && st == CISM_ERR_UNSUPPORTED),
                  "byte %u flipped: %s: %s", (unsigned)i, cism_status_str(st), cism_last_error());
        if (i >= 128) /* metadata and directory: the checksum says it */
            CHECK_MSG(strstr(cism_last_error(), "header checksum does not match") && strstr(cism_last_error(), "convert it again"),
                      "byte %u: %s", (unsigned)i, cism_last_error());
    }
    /* reserved header bytes, with a checksum that matches them */
    memcpy(copy, img, n); copy[100] = 1; set_header_crc(copy);
    EXPECT(load(copy, n, 0, 1), CISM_ERR_FORMAT, "reserved");
    memcpy(copy, img, n); set_header_crc(copy);
    EXPECT(load(copy, n, 0, 1), CISM_OK, NULL);

    /* relabelled as an older version: the layouts differ, refused with a hint */
    memcpy(copy, img, n); copy[8] = 1;
    EXPECT(load(copy, n, 0, 1), CISM_ERR_FORMAT, "looks like a version 3 file whose version field was changed");
    memcpy(copy, img, n); copy[8] = 2;
    EXPECT(load(copy, n, 0, 0), CISM_ERR_FORMAT, "looks like a version 3 file whose version field was changed");

    /* a byte of tensor data: a plain load takes it (as documented), the opt-in check refuses it */
    data_at = data_off + 200;
    memcpy(copy, img, n); copy[data_at] ^= 0x04;
    EXPECT(load(copy, n, 0, 1), CISM_OK, NULL);
    EXPECT(load(copy, n, 1, 1), CISM_ERR_FORMAT, "does not match its checksum");
    EXPECT(load(copy, n, 1, 0), CISM_ERR_FORMAT, "download or convert it again");
    CHECK(strstr(cism_last_error(), "tensor '") != NULL);
    /* the last byte of the data section */
    memcpy(copy, img, n); copy[data_off + (size_t)le64(img + 56) - 1] ^= 0x80;
    EXPECT(load(copy, n, 1, 1), CISM_ERR_FORMAT, "does not match its checksum");
    free(copy);
    free(img);
}

static void test_legacy(const char *dir) {
    char path[1024];
    size_t n, data_off;
    unsigned char *img;
    snprintf(path, sizeof(path), "%s/legacy-v2-q8.cism", dir);
    img = read_file(path, &n);
    if (!img) { fprintf(stderr, "test_checksum: %s is missing\n", path); g_failures++; return; }
    CHECK(img[8] == 2);
    /* no checksums: loads, with and without the opt-in check (nothing to verify) */
    EXPECT(load(img, n, 0, 1), CISM_OK, NULL);
    EXPECT(load(img, n, 1, 1), CISM_OK, NULL);
    data_off = (size_t)le64(img + 48);
    img[data_off + 200] ^= 0x04;  /* and a damaged weight byte cannot be seen */
    EXPECT(load(img, n, 1, 1), CISM_OK, NULL);
    img[data_off + 200] ^= 0x04;
    /* The limit FORMAT.md states: a version 2 file relabelled as version 1 has
       the same structure; its interleaved tensors are rearranged into other
       numbers and no check can tell (neither version has checksums). */
    img[8] = 1;
    EXPECT(load(img, n, 1, 0), CISM_OK, NULL);
    /* a version 2 file relabelled as 3 has no valid header checksum */
    img[8] = 3;
    EXPECT(load(img, n, 0, 1), CISM_ERR_FORMAT, "header checksum");
    free(img);
}

int main(void) {
    const char *dir = getenv("CISM_CORPUS_DIR") ? getenv("CISM_CORPUS_DIR") : "tests/fuzz/corpus_loader";
    cism_set_log_callback(quiet, NULL, 0);
    test_crc();
    test_v3(dir);
    test_legacy(dir);
    remove(g_path);
    return test_finish("test_checksum");
}
