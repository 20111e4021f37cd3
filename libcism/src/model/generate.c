/* generate.c - the sample/evaluate loop behind cism_generate. */
#include "session.h"
#include "../core/error.h"

static int is_eos(const cism_model *m, int32_t token) {
    int32_t i;
    for (i = 0; i < m->n_eos; i++)
        if (m->eos_ids[i] == token) return 1;
    return 0;
}

/* The loop behind both entry points: *reason gets why it ended. Running out
   of context is CISM_ERR_CONTEXT_FULL (cism_generate) or a normal stop
   (cism_generate_v2, context_full_is_stop). */
static cism_status generate(cism_session *s, cism_sampler *sampler, const int32_t *prompt, int32_t n_prompt,
                            int32_t max_tokens, uint32_t flags, cism_token_callback callback, void *user_data,
                            int32_t *n_generated, cism_stop_reason *reason, int context_full_is_stop) {
    int32_t produced = 0, i;
    cism_status st;
    const float *logits;
    int32_t n_vocab;
    *reason = CISM_STOP_ERROR;
    if (n_generated) *n_generated = 0;
    if (!s || !sampler) return cism__fail(CISM_ERR_INVALID_ARG, "cism_generate: session and sampler are required");
    if (n_prompt < 0 || (n_prompt > 0 && !prompt))
        return cism__fail(CISM_ERR_INVALID_ARG, "cism_generate: bad prompt (n_prompt %d%s)", (int)n_prompt,
                          prompt ? "" : ", prompt is NULL");
    if (max_tokens < 0)
        return cism__fail(CISM_ERR_INVALID_ARG, "the number of tokens to generate (max_tokens) is %d; it must be 0 or more",
                          (int)max_tokens);
    if (flags & ~(uint32_t)CISM_GENERATE_IGNORE_EOS) return cism__fail(CISM_ERR_INVALID_ARG, "cism_generate: unknown flags 0x%x", flags);
    cism__atomic_store(&s->cancel, 0);
    if (n_prompt > 0) {
        if ((int64_t)n_prompt > (int64_t)s->n_ctx - s->n_past)
            return cism__fail(CISM_ERR_CONTEXT_FULL,
                              "the prompt is %d tokens but the session has room for %lld (context %lld, %d already used): "
                              "shorten the prompt or use a longer context (CISM_PARAM_N_CTX)",
                              (int)n_prompt, (long long)(s->n_ctx - s->n_past), (long long)s->n_ctx, (int)s->n_past);
        if ((st = cism__session_eval(s, prompt, n_prompt)) != CISM_OK) {
            if (st == CISM_ERR_CANCELLED) *reason = CISM_STOP_CANCELLED;
            return st;
        }
        for (i = 0; i < n_prompt; i++) cism_sampler_accept(sampler, prompt[i]);
    } else if (s->logit_rows == 0) {
        return cism__fail(CISM_ERR_STATE, "nothing to continue from: give a prompt (the session has evaluated no tokens yet)");
    }
    *reason = CISM_STOP_MAX_TOKENS;
    while (produced < max_tokens) {
        int32_t token, stop;
        if (cism__atomic_load(&s->cancel)) {
            *reason = CISM_STOP_CANCELLED;
            st = cism__fail(CISM_ERR_CANCELLED, "generation cancelled");
            goto done;
        }
        if ((st = cism_session_logits(s, -1, &logits, &n_vocab)) != CISM_OK) goto fail;
        if ((st = cism_sampler_sample(sampler, logits, n_vocab, &token)) != CISM_OK) goto fail;
        cism_sampler_accept(sampler, token);
        produced++;
        stop = callback ? callback(user_data, token) != 0 : 0;
        if (!(flags & CISM_GENERATE_IGNORE_EOS) && is_eos(s->model, token)) { *reason = CISM_STOP_EOS; st = CISM_OK; goto done; }
        /* every other token enters the cache, so the session can continue from it */
        if (s->n_past >= s->n_ctx) {
            *reason = CISM_STOP_CONTEXT_FULL;
            st = context_full_is_stop ? CISM_OK
                                      : cism__fail(CISM_ERR_CONTEXT_FULL, "context full after %d generated tokens (%lld positions)",
                                                   (int)produced, (long long)s->n_ctx);
            goto done;
        }
        if ((st = cism__session_eval(s, &token, 1)) != CISM_OK) {
            if (st == CISM_ERR_CANCELLED) { *reason = CISM_STOP_CANCELLED; goto done; }
            goto fail;
        }
        if (stop) { *reason = CISM_STOP_CALLBACK; break; }
    }
    st = CISM_OK;
    goto done;
fail:
    *reason = CISM_STOP_ERROR;
done:
    if (n_generated) *n_generated = produced;
    return st;
}

/* CISM_GENERATE_LOOKUP: cism_generate_spec with the session's own lookup
   speculator (its measured costs carry over to the session's next calls);
   cism_generate's full context is an error, as without the flag. */
static cism_status generate_lookup(cism_session *s, cism_sampler *sampler, const int32_t *prompt, int32_t n_prompt,
                                   int32_t max_tokens, uint32_t flags, cism_token_callback callback, void *user_data,
                                   int32_t *n_generated, cism_stop_reason *reason, int v2) {
    cism_status st;
    *reason = CISM_STOP_ERROR;
    if (!s->lookup && (st = cism_spec_create_lookup(&s->lookup)) != CISM_OK) return st;
    st = cism_generate_spec(s->lookup, s, sampler, prompt, n_prompt, max_tokens, flags & ~(uint32_t)CISM_GENERATE_LOOKUP,
                            callback, user_data, n_generated, reason);
    if (!v2 && st == CISM_OK && *reason == CISM_STOP_CONTEXT_FULL)
        st = cism__fail(CISM_ERR_CONTEXT_FULL, "the context is full (%d tokens)", (int)s->n_ctx);
    return st;
}

cism_status cism_generate(cism_session *s, cism_sampler *sampler, const int32_t *prompt, int32_t n_prompt,
                          int32_t max_tokens, uint32_t flags, cism_token_callback callback, void *user_data,
                          int32_t *n_generated) {
    cism_stop_reason reason;
    cism__clear_error();
    if (s && (flags & CISM_GENERATE_LOOKUP))
        return generate_lookup(s, sampler, prompt, n_prompt, max_tokens, flags, callback, user_data, n_generated, &reason, 0);
    return generate(s, sampler, prompt, n_prompt, max_tokens, flags, callback, user_data, n_generated, &reason, 0);
}

cism_status cism_generate_v2(cism_session *s, cism_sampler *sampler, const int32_t *prompt, int32_t n_prompt,
                             int32_t max_tokens, uint32_t flags, cism_token_callback callback, void *user_data,
                             int32_t *n_generated, cism_stop_reason *stop_reason) {
    cism_stop_reason reason;
    cism_status st;
    cism__clear_error();
    if (s && (flags & CISM_GENERATE_LOOKUP))
        st = generate_lookup(s, sampler, prompt, n_prompt, max_tokens, flags, callback, user_data, n_generated, &reason, 1);
    else
        st = generate(s, sampler, prompt, n_prompt, max_tokens, flags, callback, user_data, n_generated, &reason, 1);
    if (stop_reason) *stop_reason = reason;
    return st;
}
