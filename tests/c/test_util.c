#include "test_util.h"

#include <string.h>

int g_failures = 0;

static void missing(const char *path) {
    const char *req = getenv("CISM_REQUIRE_SHARED");
    if (req && strcmp(req, "1") == 0) {
        fprintf(stderr, "required test data is missing: %s (CISM_REQUIRE_SHARED=1)\n", path);
        exit(1);
    }
    fprintf(stderr, "skipping: %s is missing\n", path);
    exit(TEST_SKIP);
}

static int exists(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

const char *shared_path(int argc, char **argv, const char *rel) {
    static char buf[4][4096];
    static int slot = 0;
    char *out = buf[slot++ % 4];
    const char *root = argc > 1 ? argv[1] : "../shared";
    snprintf(out, 4096, "%s/%s", root, rel);
    if (!exists(out)) missing(out);
    return out;
}

const char *fixture_path(const char *rel) {
    static char buf[4][4096];
    static int slot = 0;
    char *out = buf[slot++ % 4];
    const char *root = getenv("CISM_FIXTURE_DIR");
    snprintf(out, 4096, "%s/%s", root ? root : ".", rel);
    if (!exists(out)) missing(out);
    return out;
}

unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf;
    long n;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = (unsigned char *)malloc(n > 0 ? (size_t)n : 1);
    if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf && size) *size = (size_t)n;
    return buf;
}

int write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    int ok;
    if (!f) return -1;
    ok = fwrite(data, 1, size, f) == size;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

int test_finish(const char *name) {
    if (g_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, g_failures);
        return 1;
    }
    printf("%s: OK\n", name);
    return 0;
}

cism_session *test_session(cism_model *m, int threads, int kv_type, int logits_all, int n_batch) {
    cism_params *p = NULL;
    cism_session *s = NULL;
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, threads));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KV_TYPE, kv_type));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_LOGITS_ALL, logits_all));
    if (n_batch > 0) CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_BATCH, n_batch));
    CHECK_OK(cism_session_create(m, p, &s));
    cism_params_free(p);
    return s;
}
