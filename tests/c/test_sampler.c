/* test_sampler.c - sampling: greedy, determinism per seed, distribution of
 * temperature sampling, top-k/top-p/min-p support, penalties, bad arguments. */
#include "cism.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

#define V 1000

static int32_t sample(cism_sampler *s, const float *logits) {
    int32_t t = -1;
    CHECK_OK(cism_sampler_sample(s, logits, V, &t));
    return t;
}

int main(void) {
    float logits[V];
    cism_sampler *s = NULL, *s2 = NULL;
    int i, counts[V];
    int32_t seq1[200], seq2[200];
    for (i = 0; i < V; i++) logits[i] = (float)sin(i * 0.37) * 3.0f;
    logits[123] = 10.0f;
    CHECK_OK(cism_sampler_create(&s));
    CHECK(sample(s, logits) == 123);  /* greedy by default */

    /* same seed, same sequence; another seed, another sequence */
    CHECK_OK(cism_sampler_set_float(s, CISM_SAMPLER_TEMPERATURE, 1.5));
    CHECK_OK(cism_sampler_set_int(s, CISM_SAMPLER_SEED, 7));
    for (i = 0; i < 200; i++) seq1[i] = sample(s, logits);
    CHECK_OK(cism_sampler_reset(s));
    for (i = 0; i < 200; i++) seq2[i] = sample(s, logits);
    CHECK(memcmp(seq1, seq2, sizeof(seq1)) == 0);
    CHECK_OK(cism_sampler_set_int(s, CISM_SAMPLER_SEED, 8));
    for (i = 0; i < 200; i++) seq2[i] = sample(s, logits);
    CHECK(memcmp(seq1, seq2, sizeof(seq1)) != 0);

    /* temperature 1 follows softmax: frequency of the top token */
    {
        double z = 0, p123;
        float flat[V];
        for (i = 0; i < V; i++) flat[i] = (i < 4) ? (float)log((double)(i + 1)) : -INFINITY;
        for (i = 0; i < 4; i++) z += i + 1;
        CHECK_OK(cism_sampler_set_float(s, CISM_SAMPLER_TEMPERATURE, 1.0));
        memset(counts, 0, sizeof(counts));
        for (i = 0; i < 20000; i++) counts[sample(s, flat)]++;
        for (i = 0; i < 4; i++) {
            double f = counts[i] / 20000.0, want = (i + 1) / z;
            CHECK_MSG(fabs(f - want) < 0.015, "token %d frequency %.3f, softmax %.3f", i, f, want);
        }
        for (i = 4; i < V; i++) CHECK(counts[i] == 0);
        p123 = 0;
        (void)p123;
    }
    /* top-k: only the k best ever appear */
    CHECK_OK(cism_sampler_set_float(s, CISM_SAMPLER_TEMPERATURE, 5.0));
    CHECK_OK(cism_sampler_set_int(s, CISM_SAMPLER_TOP_K, 3));
    {
        int best[3] = {-1, -1, -1}, b, top = 0;
        memset(counts, 0, sizeof(counts));
        for (i = 0; i < 3000; i++) counts[sample(s, logits)]++;
        for (b = 0; b < 3; b++) {  /* the three largest logits */
            int arg = -1;
            for (i = 0; i < V; i++)
                if (i != best[0] && i != best[1] && (arg < 0 || logits[i] > logits[arg])) arg = i;
            best[b] = arg;
        }
        for (i = 0; i < V; i++) if (i != best[0] && i != best[1] && i != best[2]) top += counts[i];
        CHECK_MSG(top == 0, "%d draws outside the top 3", top);
        CHECK(counts[best[0]] > 0 && counts[best[1]] > 0 && counts[best[2]] > 0);
    }
    CHECK_OK(cism_sampler_set_int(s, CISM_SAMPLER_TOP_K, 0));
    /* top-p: with one token holding > p of the mass, only it appears */
    CHECK_OK(cism_sampler_set_float(s, CISM_SAMPLER_TEMPERATURE, 1.0));
    CHECK_OK(cism_sampler_set_float(s, CISM_SAMPLER_TOP_P, 0.5));
    {
        float peaked[V];
        for (i = 0; i < V; i++) peaked[i] = 0.0f;
        peaked[42] = 8.0f;  /* e^8 / (e^8 + 999) = 0.75 */
        for (i = 0; i < 500; i++) CHECK(sample(s, peaked) == 42);
        CHECK_OK(cism_sampler_set_float(s, CISM_SAMPLER_TOP_P, 0.9)); /* now others can appear */
        memset(counts, 0, sizeof(counts));
        for (i = 0; i < 2000; i++) counts[sample(s, peaked)]++;
        CHECK(counts[42] < 2000 && counts[42] > 1000);
        CHECK_OK(cism_sampler_set_float(s, CISM_SAMPLER_TOP_P, 1.0));
        /* min-p 0.5: tokens below half the best probability are dropped */
        CHECK_OK(cism_sampler_set_float(s, CISM_SAMPLER_MIN_P, 0.5));
        peaked[7] = 7.5f;  /* ratio e^-0.5 = 0.61: kept */
        peaked[8] = 7.0f;  /* ratio e^-1 = 0.37: dropped */
        memset(counts, 0, sizeof(counts));
        for (i = 0; i < 2000; i++) counts[sample(s, peaked)]++;
        CHECK(counts[42] + counts[7] == 2000 && counts[7] > 0);
        CHECK_OK(cism_sampler_set_float(s, CISM_SAMPLER_MIN_P, 0.0));
    }
    /* repetition penalty pushes a repeated greedy choice away */
    CHECK_OK(cism_sampler_create(&s2));
    {
        float two[V];
        for (i = 0; i < V; i++) two[i] = -5.0f;
        two[1] = 2.0f; two[2] = 1.9f;
        CHECK(sample(s2, two) == 1);
        CHECK_OK(cism_sampler_set_float(s2, CISM_SAMPLER_REPEAT_PENALTY, 1.3));
        CHECK_OK(cism_sampler_accept(s2, 1));
        CHECK(sample(s2, two) == 2);
        CHECK_OK(cism_sampler_set_float(s2, CISM_SAMPLER_REPEAT_PENALTY, 1.0));
        CHECK_OK(cism_sampler_set_float(s2, CISM_SAMPLER_PRESENCE_PENALTY, 0.2));
        CHECK(sample(s2, two) == 2);
        CHECK_OK(cism_sampler_reset(s2));          /* history cleared */
        CHECK(sample(s2, two) == 1);
        CHECK_OK(cism_sampler_set_float(s2, CISM_SAMPLER_PRESENCE_PENALTY, 0.0));
        CHECK_OK(cism_sampler_set_float(s2, CISM_SAMPLER_FREQUENCY_PENALTY, 0.06));
        CHECK_OK(cism_sampler_accept(s2, 1));
        CHECK(sample(s2, two) == 1);               /* 2.0 - 0.06 > 1.9 */
        CHECK_OK(cism_sampler_accept(s2, 1));
        CHECK(sample(s2, two) == 2);               /* 2.0 - 0.12 < 1.9 */
    }
    /* bad arguments */
    CHECK(cism_sampler_set_float(s, CISM_SAMPLER_TOP_P, 0.0) == CISM_ERR_INVALID_ARG);
    CHECK(cism_sampler_set_float(s, CISM_SAMPLER_TEMPERATURE, -1.0) == CISM_ERR_INVALID_ARG);
    CHECK(cism_sampler_set_float(s, CISM_SAMPLER_TEMPERATURE, NAN) == CISM_ERR_INVALID_ARG);
    /* messages name the option, not the enum value */
    CHECK_MSG(strstr(cism_last_error(), "temperature") != NULL, "%s", cism_last_error());
    CHECK(cism_sampler_set_float(s, CISM_SAMPLER_SEED, 1.5) == CISM_ERR_INVALID_ARG);
    CHECK_MSG(strstr(cism_last_error(), "seed") != NULL, "%s", cism_last_error());
    {
        cism_params *p = NULL;
        CHECK_OK(cism_params_create(&p));
        CHECK(cism_params_set_int(p, CISM_PARAM_N_THREADS, -1) == CISM_ERR_INVALID_ARG);
        CHECK_MSG(strstr(cism_last_error(), "thread count") && !strstr(cism_last_error(), "parameter 0"), "%s",
                  cism_last_error());
        CHECK(cism_params_set_int(p, CISM_PARAM_N_CTX, -1) == CISM_ERR_INVALID_ARG);
        CHECK_MSG(strstr(cism_last_error(), "context length") && !strstr(cism_last_error(), "parameter 1"), "%s",
                  cism_last_error());
        cism_params_free(p);
    }
    CHECK(cism_sampler_set_int(s, CISM_SAMPLER_TOP_K, -1) == CISM_ERR_INVALID_ARG);
    CHECK(cism_sampler_set_int(s, 999, 1) == CISM_ERR_INVALID_ARG);
    CHECK(cism_sampler_sample(s, logits, 0, &seq1[0]) == CISM_ERR_INVALID_ARG);
    CHECK(cism_sampler_sample(NULL, logits, V, &seq1[0]) == CISM_ERR_INVALID_ARG);
    {
        float nan_logits[4] = {NAN, NAN, NAN, NAN};
        int32_t t;
        CHECK(cism_sampler_sample(s, nan_logits, 4, &t) == CISM_ERR_INVALID_ARG);
        CHECK_MSG(!strstr(cism_last_error(), "cism_sampler_sample") && strstr(cism_last_error(), "check_weights"),
                  "%s", cism_last_error());
    }
    cism_sampler_free(s);
    cism_sampler_free(s2);
    cism_sampler_free(NULL);
    return test_finish("test_sampler");
}
