/* replay_main.c - a plain main() for the libFuzzer targets (fuzz_*.c): runs
 * every file of the folders (or the files) given through the target's
 * LLVMFuzzerTestOneInput, each in a buffer of exactly its size, so the seed
 * corpora and past crashes are replayed under ctest in every build (ASan +
 * UBSan included) without libFuzzer. Exit 0 when at least one input ran; 77
 * (skipped) when CISM_FUZZ_MODEL names a file that is absent, unless
 * CISM_REQUIRE_SHARED=1 (the fixture comes from ../shared/models). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    long n;
    uint8_t *buf;
    if (!f || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        if (f) fclose(f);
        return -1;
    }
    buf = (uint8_t *)malloc(n > 0 ? (size_t)n : 1);
    if (!buf || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        fclose(f);
        free(buf);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 1;
}

int main(int argc, char **argv) {
    const char *model = getenv("CISM_FUZZ_MODEL");
    const char *require = getenv("CISM_REQUIRE_SHARED");
    struct stat st;
    int i, total = 0;
    if (model && stat(model, &st) != 0) {
        if (require && strcmp(require, "1") == 0) {
            fprintf(stderr, "replay: %s is absent (CISM_REQUIRE_SHARED=1)\n", model);
            return 1;
        }
        printf("replay: skipped, %s is absent\n", model);
        return 77;
    }
    LLVMFuzzerInitialize(&argc, &argv);
    for (i = 1; i < argc; i++) {
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            return 1;
        }
        if (S_ISDIR(st.st_mode)) {
            DIR *d = opendir(argv[i]);
            struct dirent *e;
            if (!d) { fprintf(stderr, "replay: cannot open %s\n", argv[i]); return 1; }
            while ((e = readdir(d)) != NULL) {
                char path[4096];
                if (e->d_name[0] == '.') continue;
                snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
                if (replay_file(path) < 0) { closedir(d); return 1; }
                total++;
            }
            closedir(d);
        } else {
            if (replay_file(argv[i]) < 0) return 1;
            total++;
        }
    }
    printf("replay: %d inputs, no crash\n", total);
    return total > 0 ? 0 : 1;
}
