/* test_quality.c - quantized models judged by perplexity on the real trained
 * stories260K and its evaluation text (llama.cpp's method: windows of 256
 * tokens starting with BOS, second half scored), and their resident memory.
 *
 * Bounds (set from the measurements in docs/QUALITY.md, with margin):
 *   q8 recipe              PPL within +1% of f32
 *   q8 + int8 activations  PPL within +1% of f32
 *   4bit recipe (default)  PPL within +10% of f32 (measured +6.2% on the first
 *                          24 windows, +7.8% on the first 6; +5.1% on the whole
 *                          text, docs/QUALITY.md)
 * Resident memory: loading a q4s model and evaluating through every weight
 * grows the process by about its file size, never by an f32 copy. */
#include "cism.h"
#include "test_util.h"

#include <math.h>
#include <string.h>
#if defined(__linux__)
#include <unistd.h>
#endif

#define CTX 256

static double ppl_half(const char *model_path, const int32_t *toks, int64_t n_toks, int windows, int act_quant) {
    cism_model *m = NULL;
    cism_params *p = NULL;
    cism_session *s = NULL;
    double nll = 0;
    int64_t scored = 0;
    int w;
    int32_t win[CTX];
    CHECK_OK(cism_model_load(model_path, NULL, &m));
    if (!m) return NAN;
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_CTX, CTX));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_LOGITS_ALL, 1));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_KV_TYPE, CISM_DTYPE_F32));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, 2));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_ACT_QUANT, act_quant));
    CHECK_OK(cism_session_create(m, p, &s));
    /* stream = [BOS] + tokens; window i = stream[i*CTX .. (i+1)*CTX) with its first token set to BOS */
    for (w = 0; w < windows && (int64_t)(w + 1) * CTX <= n_toks + 1 && s; w++) {
        int j;
        for (j = 0; j < CTX; j++) {
            int64_t at = (int64_t)w * CTX + j; /* index into the stream */
            win[j] = j == 0 ? 1 : toks[at - 1];
        }
        CHECK_OK(cism_session_reset(s));
        CHECK_OK(cism_session_eval(s, win, CTX));
        for (j = CTX / 2; j < CTX - 1; j++) {
            const float *lg = NULL;
            int32_t nv = 0, v;
            double mx = -1e300, sum = 0;
            CHECK_OK(cism_session_logits(s, j, &lg, &nv));
            if (!lg) return NAN;
            for (v = 0; v < nv; v++) if (lg[v] > mx) mx = lg[v];
            for (v = 0; v < nv; v++) sum += exp((double)lg[v] - mx);
            nll += mx + log(sum) - (double)lg[win[j + 1]];
            scored++;
        }
    }
    cism_session_free(s);
    cism_params_free(p);
    cism_model_free(m);
    return scored ? exp(nll / (double)scored) : NAN;
}

#if defined(__linux__)
static int64_t resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2) res = -1;
    fclose(f);
    return res < 0 ? -1 : (int64_t)res * (int64_t)sysconf(_SC_PAGESIZE);
}

static void test_resident(void) {
    const char *path = fixture_path("synthetic.q4s.cism");
    cism_model *m = NULL;
    cism_params *p = NULL;
    cism_session *s = NULL;
    int64_t before = resident_bytes(), after, file_bytes = 0, n_params = 0, dtype = -1;
    int32_t toks[4] = {1, 100, 2000, 8000};
    CHECK_OK(cism_model_load(path, NULL, &m));
    if (!m) return;
    CHECK_OK(cism_model_get_info(m, CISM_INFO_FILE_BYTES, &file_bytes));
    CHECK_OK(cism_model_get_info(m, CISM_INFO_N_PARAMS, &n_params));
    CHECK_OK(cism_model_get_info(m, CISM_INFO_WEIGHT_DTYPE, &dtype));
    CHECK(dtype == CISM_DTYPE_Q4S || dtype == CISM_DTYPE_Q4SX16);  /* the converter interleaves where shapes allow */
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_CTX, 16));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, 1));
    CHECK_OK(cism_session_create(m, p, &s));
    CHECK_OK(cism_session_eval(s, toks, 4)); /* reads every matrix (the output head included) */
    after = resident_bytes();
    printf("synthetic q4s model: %lld parameters, file %.1f MiB (f32 would be %.1f MiB); resident growth %.1f MiB\n",
           (long long)n_params, file_bytes / 1048576.0, n_params * 4 / 1048576.0, (after - before) / 1048576.0);
    /* the file (mapped) plus session buffers and allocator slack; an f32 copy would add 4x the parameters */
    CHECK_MSG(after - before < file_bytes + 6 * 1048576, "resident memory grew by %lld bytes for a %lld-byte file",
              (long long)(after - before), (long long)file_bytes);
    CHECK(after - before < n_params * 2);
    cism_session_free(s);
    cism_params_free(p);
    cism_model_free(m);
}
#endif

int main(int argc, char **argv) {
    size_t size = 0;
    const char *wenv = getenv("CISM_QUALITY_WINDOWS");
    int windows = wenv ? atoi(wenv) : 48;
    int32_t *toks;
    double f32, q8, q8a, q4;
    char p32[512], p8[512], p4[512];
    (void)shared_path(argc, argv, "models/stories260K-hf/config.json");
    toks = (int32_t *)read_file(fixture_path("tinystories.stories260K.i32"), &size);
    CHECK(toks != NULL && size / 4 > (size_t)windows * CTX);
    if (!toks) return test_finish("test_quality");
    snprintf(p32, sizeof(p32), "%s", fixture_path("stories260K-hf.cism"));
    snprintf(p8, sizeof(p8), "%s", fixture_path("stories260K-hf.q8.cism"));
    snprintf(p4, sizeof(p4), "%s", fixture_path("stories260K-hf.4bit.cism"));
    f32 = ppl_half(p32, toks, (int64_t)(size / 4), windows, 0);
    q8 = ppl_half(p8, toks, (int64_t)(size / 4), windows, 0);
    q8a = ppl_half(p8, toks, (int64_t)(size / 4), windows, 1);
    q4 = ppl_half(p4, toks, (int64_t)(size / 4), windows, 0);
    printf("stories260K, %d windows of %d: PPL f32 %.4f, q8 %.4f (%+.2f%%), q8+int8 act %.4f (%+.2f%%), 4bit %.4f (%+.2f%%)\n",
           windows, CTX, f32, q8, 100 * (q8 / f32 - 1), q8a, 100 * (q8a / f32 - 1), q4, 100 * (q4 / f32 - 1));
    CHECK(f32 > 1.0 && f32 < 10.0); /* a trained model on its own domain */
    CHECK_MSG(q8 <= f32 * 1.01, "q8 PPL %.4f vs f32 %.4f", q8, f32);
    CHECK_MSG(q8a <= f32 * 1.01, "q8 + int8 activations PPL %.4f vs f32 %.4f", q8a, f32);
    CHECK_MSG(q4 <= f32 * 1.10, "4bit PPL %.4f vs f32 %.4f", q4, f32);
    CHECK_MSG(q4 > f32 * 1.001, "4bit PPL %.4f equals f32 %.4f: not quantized?", q4, f32);
    free(toks);
#if defined(__linux__)
    test_resident();
#endif
    return test_finish("test_quality");
}
