/* generate.c - the smallest complete libcism program: load a .cism model,
 * evaluate a prompt of token ids and stream greedy (or sampled) token ids.
 *
 *   ./generate model.cism [n_tokens] [temperature] [seed]
 *
 * Tokens are printed as ids; a prompt of just the BOS token is used. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "cism.h"

/* 1 if the whole of s is a number (an argument like "abc" or "3x" is refused, not read as 0 or 3) */
static int whole_int(const char *s, long long lo, long long hi, long long *v) {
    char *end;
    *v = strtoll(s, &end, 10);
    return end != s && *end == 0 && *v >= lo && *v <= hi;
}
static int whole_float(const char *s, double *v) {
    char *end;
    *v = strtod(s, &end);
    return end != s && *end == 0;
}

static int32_t on_token(void *user_data, int32_t token) {
    (void)user_data;
    printf("%d ", (int)token);
    fflush(stdout);
    return 0; /* non-zero would stop generation */
}

int main(int argc, char **argv) {
    cism_model *model = NULL;
    cism_session *session = NULL;
    cism_sampler *sampler = NULL;
    cism_params *params = NULL;
    int64_t bos = -1;
    int32_t prompt[1], n_out = 0;
    cism_stop_reason why = CISM_STOP_ERROR;
    static const char *const reasons[] = {"error", "end of text", "n_tokens reached", "context full", "callback",
                                          "cancelled"};
    long long n = 32, seed = 42;
    double temperature = 0.0;
    cism_status st;

    if (argc < 2 || argc > 5 || (argc > 2 && !whole_int(argv[2], 0, 1 << 30, &n)) ||
        (argc > 3 && !whole_float(argv[3], &temperature)) || (argc > 4 && !whole_int(argv[4], LLONG_MIN, LLONG_MAX, &seed))) {
        fprintf(stderr, "usage: %s model.cism [n_tokens] [temperature] [seed]\n"
                        "  n_tokens: 0 or more (default 32); temperature: a number, 0 = greedy (default); seed: an integer\n",
                argv[0]);
        return 2;
    }
    if ((st = cism_params_create(&params)) ||
        (st = cism_params_set_int(params, CISM_PARAM_N_THREADS, 1)) ||
        (st = cism_model_load(argv[1], params, &model)) ||
        (st = cism_session_create(model, params, &session)) ||
        (st = cism_sampler_create(&sampler)) ||
        (st = cism_sampler_set_float(sampler, CISM_SAMPLER_TEMPERATURE, temperature)) ||
        (st = cism_sampler_set_int(sampler, CISM_SAMPLER_SEED, seed)) ||
        (st = cism_model_get_info(model, CISM_INFO_BOS_ID, &bos))) {
        fprintf(stderr, "error: %s: %s\n", cism_status_str(st), cism_last_error());
        goto out;
    }
    prompt[0] = bos >= 0 ? (int32_t)bos : 0;
    /* a full context is a normal end here (stop reason CISM_STOP_CONTEXT_FULL), not an error */
    st = cism_generate_v2(session, sampler, prompt, 1, (int32_t)n, 0, on_token, NULL, &n_out, &why);
    printf("\n");
    if (st) fprintf(stderr, "error: %s: %s\n", cism_status_str(st), cism_last_error());
    else fprintf(stderr, "%d tokens (stop: %s)\n", (int)n_out, reasons[why >= 0 && why <= 5 ? why : 0]);
out:
    cism_sampler_free(sampler);
    cism_session_free(session);
    cism_model_free(model);
    cism_params_free(params);
    return st ? 1 : 0;
}
