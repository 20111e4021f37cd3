/* generate.c - the sample/evaluate loop behind cism_generate. */
#include "session.h"
#include "../core/error.h"

static int is_eos(const cism_model *m, int32_t token) {
    int32_t i;
    for (i = 0; i < m->n_eos; i++)
        if (m->eos_ids[i] == token) return 1;
    return 0;
}

cism_status cism_generate(cism_session *s, cism_sampler *sampler, const int32_t *prompt, int32_t n_prompt,
                          int32_t max_tokens, uint32_t flags, cism_token_callback callback, void *user_data,
                          int32_t *n_generated) {
    int32_t produced = 0, i;
    cism_status st;
    const float *logits;
    int32_t n_vocab;
    cism__clear_error();
    if (n_generated) *n_generated = 0;
    if (!s || !sampler) return cism__fail(CISM_ERR_INVALID_ARG, "cism_generate: session and sampler are required");
    if (n_prompt < 0 || (n_prompt > 0 && !prompt)) return cism__fail(CISM_ERR_INVALID_ARG, "cism_generate: bad prompt");
    if (max_tokens < 0) return cism__fail(CISM_ERR_INVALID_ARG, "cism_generate: max_tokens %d is negative", (int)max_tokens);
    if (flags & ~(uint32_t)CISM_GENERATE_IGNORE_EOS) return cism__fail(CISM_ERR_INVALID_ARG, "cism_generate: unknown flags 0x%x", flags);
    cism__atomic_store(&s->cancel, 0);
    if (n_prompt > 0) {
        if ((st = cism__session_eval(s, prompt, n_prompt)) != CISM_OK) return st;
        for (i = 0; i < n_prompt; i++) cism_sampler_accept(sampler, prompt[i]);
    } else if (s->logit_rows == 0) {
        return cism__fail(CISM_ERR_STATE, "cism_generate: empty prompt and nothing evaluated yet");
    }
    while (produced < max_tokens) {
        int32_t token, stop;
        if (cism__atomic_load(&s->cancel)) { st = cism__fail(CISM_ERR_CANCELLED, "generation cancelled"); goto done; }
        if ((st = cism_session_logits(s, -1, &logits, &n_vocab)) != CISM_OK) goto done;
        if ((st = cism_sampler_sample(sampler, logits, n_vocab, &token)) != CISM_OK) goto done;
        cism_sampler_accept(sampler, token);
        produced++;
        stop = callback ? callback(user_data, token) != 0 : 0;
        if (!(flags & CISM_GENERATE_IGNORE_EOS) && is_eos(s->model, token)) { st = CISM_OK; goto done; }
        /* every other token enters the cache, so the session can continue from it */
        if (s->n_past >= s->n_ctx) {
            st = cism__fail(CISM_ERR_CONTEXT_FULL, "context full after %d generated tokens (%lld positions)", (int)produced, (long long)s->n_ctx);
            goto done;
        }
        if ((st = cism__session_eval(s, &token, 1)) != CISM_OK) goto done;
        if (stop) break;
    }
    st = CISM_OK;
done:
    if (n_generated) *n_generated = produced;
    return st;
}
