/* test_act_stats.c - the activation statistics of CISM_PARAM_ACT_STATS on the
 * real stories260K: sums that do not depend on threads or on how the tokens
 * are split into evals, the Gram blocks' diagonal equal to the sums and the
 * blocks symmetric, shared inputs reported once per input, row counts, and
 * refused names and states; the key and query sums (cism_session_key_sums,
 * cism_session_query_sums) alike. (Their values against transformers:
 * tests/python/test_calibrate.py.) */
#include "cism.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

#define NT 40
#define GB 16

static cism_session *stats_session(cism_model *m, int threads, int batch, int64_t stats, int logits_all) {
    cism_params *p = NULL;
    cism_session *s = NULL;
    CHECK_OK(cism_params_create(&p));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_THREADS, threads));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_BATCH, batch));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_N_CTX, 64));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_LOGITS_ALL, logits_all));
    CHECK_OK(cism_params_set_int(p, CISM_PARAM_ACT_STATS, stats));
    CHECK_OK(cism_session_create(m, p, &s));
    cism_params_free(p);
    return s;
}

static const char *NAMES[] = {"blk.0.attn_q", "blk.0.attn_output", "blk.2.ffn_up", "blk.4.ffn_down", "blk.4.attn_v", "output"};
#define N_NAMES (int)(sizeof(NAMES) / sizeof(NAMES[0]))

static double max_rel(const double *a, const double *b, int64_t n) {
    double worst = 0;
    int64_t i;
    for (i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]) / (fabs(b[i]) + 1e-12);
        if (e > worst || e != e) worst = e;
    }
    return worst;
}

int main(int argc, char **argv) {
    cism_model *m = NULL;
    cism_session *one, *split, *plain, *diag_only;
    int32_t toks[NT];
    static double a[256], b[256], ga[11 * GB * GB];
    int64_t cols = 0, rows = 0, nv = 0;
    int i, k;
    (void)shared_path(argc, argv, "models/stories260K-hf/config.json");
    CHECK_OK(cism_model_load(fixture_path("stories260K-hf.cism"), NULL, &m));
    if (!m) return test_finish("test_act_stats");
    for (i = 0; i < NT; i++) toks[i] = i == 0 ? 1 : (i * 37 + 11) % 512;
    /* one eval of 40 tokens on 2 threads, against 6 evals (batches of 7) on 1 thread */
    one = stats_session(m, 2, 64, GB, 1);
    split = stats_session(m, 1, 7, GB, 1);
    CHECK_OK(cism_session_eval(one, toks, NT));
    for (i = 0; i < NT; i += 8) CHECK_OK(cism_session_eval(split, toks + i, NT - i < 8 ? NT - i : 8));
    for (k = 0; k < N_NAMES; k++) {
        int64_t c2 = 0, r2 = 0, g, j;
        CHECK_OK(cism_session_act_stats(one, NAMES[k], a, 256, &cols, &rows));
        CHECK_OK(cism_session_act_stats(split, NAMES[k], b, 256, &c2, &r2));
        CHECK(cols == c2 && rows == NT && r2 == NT);
        CHECK_MSG(max_rel(a, b, cols) < 1e-9, "%s: sums differ by %g between threads/batches", NAMES[k], max_rel(a, b, cols));
        for (j = 0; j < cols; j++) CHECK(a[j] > 0 && isfinite(a[j]));
        CHECK_OK(cism_session_act_gram(one, NAMES[k], ga, (int64_t)(sizeof(ga) / sizeof(ga[0])), &nv, &rows));
        CHECK(nv == (cols + GB - 1) / GB * GB * GB && rows == NT);
        for (g = 0; g < cols; g += GB) {
            const double *blk = ga + (g / GB) * GB * GB;
            int64_t x, y;
            for (x = 0; x < GB; x++)
                for (y = 0; y < GB; y++) {
                    if (g + x >= cols || g + y >= cols) { CHECK(blk[x * GB + y] == 0); continue; }
                    CHECK(blk[x * GB + y] == blk[y * GB + x]);
                    if (x == y) CHECK(blk[x * GB + y] == a[g + x]); /* the same products, in the same order */
                }
        }
    }
    /* the key sums: the same bits whatever the threads and evals, every token of every layer */
    for (k = 0; k < 5; k++) {
        int64_t n2 = 0, r2 = 0, j, nonzero = 0;
        CHECK_OK(cism_session_key_sums(one, k, a, 256, &nv, &rows));
        CHECK_OK(cism_session_key_sums(split, k, b, 256, &n2, &r2));
        CHECK(nv == 32 && n2 == 32 && rows == NT && r2 == NT);
        CHECK_MSG(memcmp(a, b, 32 * sizeof(double)) == 0, "layer %d: key sums differ between threads/batches", k);
        for (j = 0; j < 32; j++) nonzero += a[j] != 0 && isfinite(a[j]);
        CHECK(nonzero == 32);
    }
    /* the query sums alike: 8 heads x (8 sums + 1 sum of squares) */
    for (k = 0; k < 5; k++) {
        int64_t n2 = 0, r2 = 0, j;
        CHECK_OK(cism_session_query_sums(one, k, a, 256, &nv, &rows));
        CHECK_OK(cism_session_query_sums(split, k, b, 256, &n2, &r2));
        CHECK(nv == 72 && n2 == 72 && rows == NT && r2 == NT);
        CHECK_MSG(memcmp(a, b, 72 * sizeof(double)) == 0, "layer %d: query sums differ between threads/batches", k);
        for (j = 0; j < 8; j++) { /* a sum of squares bounds its head's sums (Cauchy-Schwarz over the rows) */
            double s2 = 0;
            int64_t c;
            for (c = 0; c < 8; c++) s2 += a[j * 8 + c] * a[j * 8 + c];
            CHECK(a[64 + j] > 0 && s2 <= a[64 + j] * NT * (1 + 1e-9));
        }
    }
    CHECK(cism_session_query_sums(one, 5, a, 256, &nv, &rows) == CISM_ERR_INVALID_ARG);
    CHECK(cism_session_query_sums(one, 0, a, 71, &nv, &rows) == CISM_ERR_BUFFER_SMALL && nv == 72);
    /* matrices that read the same input report the same statistics */
    CHECK_OK(cism_session_act_stats(one, "blk.3.attn_q", a, 256, &cols, &rows));
    CHECK_OK(cism_session_act_stats(one, "blk.3.attn_k", b, 256, &cols, &rows));
    CHECK(memcmp(a, b, (size_t)cols * sizeof(double)) == 0 && cols == 64);
    CHECK_OK(cism_session_act_stats(one, "blk.1.ffn_gate", a, 256, &cols, &rows));
    CHECK_OK(cism_session_act_stats(one, "blk.1.ffn_up", b, 256, &cols, &rows));
    CHECK(memcmp(a, b, (size_t)cols * sizeof(double)) == 0);
    CHECK_OK(cism_session_act_stats(one, "blk.1.ffn_down", a, 256, &cols, &rows));
    CHECK(cols == 172);
    CHECK_OK(cism_session_act_stats(one, "token_embd", a, 256, &cols, &rows)); /* tied: the head */
    CHECK_OK(cism_session_act_stats(one, "output", b, 256, &cols, &rows));
    CHECK(memcmp(a, b, (size_t)cols * sizeof(double)) == 0);
    /* reset keeps the statistics; more tokens add to them */
    CHECK_OK(cism_session_reset(one));
    CHECK_OK(cism_session_eval(one, toks, 5));
    CHECK_OK(cism_session_act_stats(one, "blk.0.attn_q", a, 256, &cols, &rows));
    CHECK(rows == NT + 5);
    CHECK_OK(cism_session_key_sums(one, 4, a, 256, &nv, &rows));
    CHECK(rows == NT + 5);
    /* without LOGITS_ALL the last layer and the head see only the rows that make logits */
    plain = stats_session(m, 1, 64, 1, 0);
    CHECK_OK(cism_session_eval(plain, toks, NT));
    CHECK_OK(cism_session_act_stats(plain, "blk.0.ffn_down", a, 256, &cols, &rows));
    CHECK(rows == NT);
    CHECK_OK(cism_session_act_stats(plain, "blk.4.ffn_down", a, 256, &cols, &rows));
    CHECK(rows == 1);
    CHECK_OK(cism_session_act_stats(plain, "output", a, 256, &cols, &rows));
    CHECK(rows == 1);
    /* refusals */
    CHECK(cism_session_act_gram(plain, "output", ga, 10000, &nv, &rows) == CISM_ERR_STATE); /* ACT_STATS = 1 */
    CHECK(cism_session_act_stats(one, "blk.0.attn_q", a, 10, &cols, &rows) == CISM_ERR_BUFFER_SMALL && cols == 64);
    CHECK(cism_session_act_stats(one, "blk.0.attn_q", NULL, 0, &cols, NULL) == CISM_ERR_BUFFER_SMALL && cols == 64);
    CHECK(cism_session_act_gram(one, "blk.0.ffn_down", ga, 100, &nv, NULL) == CISM_ERR_BUFFER_SMALL && nv == 11 * GB * GB);
    {
        static const char *bad[] = {"blk.5.attn_q", "blk.01.attn_q", "blk.0.attn_norm", "blk.0.", "blk.", "blk.x.attn_q",
                                    "blk.99999999999999999999.attn_q", "", "token_embd.weight", "blk.0.attn_q.x"};
        for (k = 0; k < (int)(sizeof(bad) / sizeof(bad[0])); k++)
            CHECK_MSG(cism_session_act_stats(one, bad[k], a, 256, &cols, &rows) == CISM_ERR_INVALID_ARG, "%s", bad[k]);
    }
    CHECK(cism_session_act_stats(one, NULL, a, 256, &cols, &rows) == CISM_ERR_INVALID_ARG);
    CHECK(cism_session_key_sums(one, 5, a, 256, &nv, &rows) == CISM_ERR_INVALID_ARG);
    CHECK(cism_session_key_sums(one, -1, a, 256, &nv, &rows) == CISM_ERR_INVALID_ARG);
    CHECK(cism_session_key_sums(NULL, 0, a, 256, &nv, &rows) == CISM_ERR_INVALID_ARG);
    CHECK(cism_session_key_sums(one, 0, a, 31, &nv, &rows) == CISM_ERR_BUFFER_SMALL && nv == 32);
    CHECK(cism_session_key_sums(one, 0, NULL, 0, &nv, NULL) == CISM_ERR_BUFFER_SMALL && nv == 32);
    CHECK(cism_session_act_stats(NULL, "output", a, 256, &cols, &rows) == CISM_ERR_INVALID_ARG);
    diag_only = stats_session(m, 1, 64, 0, 0);
    CHECK(cism_session_act_stats(diag_only, "output", a, 256, &cols, &rows) == CISM_ERR_STATE);
    CHECK(cism_session_key_sums(diag_only, 0, a, 256, &nv, &rows) == CISM_ERR_STATE);
    CHECK(cism_session_query_sums(diag_only, 0, a, 256, &nv, &rows) == CISM_ERR_STATE);
    CHECK_OK(cism_session_query_sums(plain, 4, a, 256, &nv, &rows)); /* the last layer: the logits' rows only */
    CHECK(rows == 1);
    {
        cism_params *p = NULL;
        CHECK_OK(cism_params_create(&p));
        CHECK(cism_params_set_int(p, CISM_PARAM_ACT_STATS, -1) == CISM_ERR_INVALID_ARG);
        CHECK(cism_params_set_int(p, CISM_PARAM_ACT_STATS, 4097) == CISM_ERR_INVALID_ARG);
        cism_params_free(p);
    }
    cism_session_free(one);
    cism_session_free(split);
    cism_session_free(plain);
    cism_session_free(diag_only);
    cism_model_free(m);
    return test_finish("test_act_stats");
}
