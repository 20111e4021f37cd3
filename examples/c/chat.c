/* chat.c - a complete chat program on the public C API only: load a .cism
 * model, format the conversation with the model's chat format, tokenize it,
 * generate, and print the reply as it streams out of the detokenizer.
 *
 *   ./chat model.cism [--format chatml|llama3|llama2|mistral|zephyr]
 *                     [--system "text"] [--max-tokens N] [--temperature T] [--seed S]
 *
 * Reads one user message per line from stdin. Each turn re-renders the whole
 * conversation, keeps the tokens the session already evaluated that are still
 * a prefix of it (cism_session_rewind), and evaluates only the rest. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cism.h"

#define MAX_MESSAGES 256

typedef struct {
    cism_detokenizer *detok;
    char *reply;            /* the assistant's text of this turn */
    size_t reply_len, reply_cap;
    const int32_t *eos;
    int32_t n_eos;
} turn;

/* prints text and keeps it as part of the reply; 0 or -1 (out of memory) */
static int emit(turn *t, const char *text, size_t len) {
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    if (t->reply_len + len + 1 > t->reply_cap) {
        size_t cap = (t->reply_len + len + 1) * 2;
        char *p = (char *)realloc(t->reply, cap);
        if (!p) return -1;
        t->reply = p;
        t->reply_cap = cap;
    }
    memcpy(t->reply + t->reply_len, text, len);
    t->reply_len += len;
    return 0;
}

static int32_t on_token(void *user, int32_t token) {
    turn *t = (turn *)user;
    const char *text;
    size_t len;
    int32_t i;
    for (i = 0; i < t->n_eos; i++)
        if (token == t->eos[i]) return 1;     /* end of the reply: not printed */
    if (cism_detokenizer_push(t->detok, token, &text, &len) != CISM_OK) return 1;
    return emit(t, text, len) ? 1 : 0;
}

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

static int fail(cism_status st) {
    fprintf(stderr, "error: %s: %s\n", cism_status_str(st), cism_last_error());
    return 1;
}

int main(int argc, char **argv) {
    cism_model *model = NULL;
    cism_session *session = NULL;
    cism_sampler *sampler = NULL;
    cism_chat_format format = CISM_CHAT_MODEL;
    const char *roles[MAX_MESSAGES];
    char *contents[MAX_MESSAGES];
    size_t role_lens[MAX_MESSAGES], content_lens[MAX_MESSAGES];
    int32_t n_msgs = 0, eos[16], n_eos = 0, *prompt = NULL, *history = NULL, n_history = 0;
    int max_tokens = 256, i, rc = 1;
    double temperature = 0.7;
    long long seed = 1;
    char line[8192], *text = NULL;
    cism_status st;

    if (argc < 2) {
        fprintf(stderr, "usage: %s model.cism [--format NAME] [--system TEXT] [--max-tokens N] [--temperature T] [--seed S]\n", argv[0]);
        return 2;
    }
    if ((st = cism_model_load(argv[1], NULL, &model))) return fail(st);
    for (i = 2; i < argc; i += 2) {
        long long v;
        if (i + 1 == argc) { fprintf(stderr, "%s needs a value\n", argv[i]); goto out; }
        if (strcmp(argv[i], "--format") == 0) {
            for (format = 1; cism_chat_format_name(format) && strcmp(cism_chat_format_name(format), argv[i + 1]); format++) {}
            if (!cism_chat_format_name(format)) { fprintf(stderr, "unknown format %s\n", argv[i + 1]); goto out; }
        } else if (strcmp(argv[i], "--system") == 0) {
            roles[n_msgs] = "system";
            contents[n_msgs] = strdup(argv[i + 1]);
            role_lens[n_msgs] = 6;
            content_lens[n_msgs] = strlen(argv[i + 1]);
            n_msgs++;
        } else if (strcmp(argv[i], "--max-tokens") == 0) {
            if (!whole_int(argv[i + 1], 1, 1 << 30, &v)) { fprintf(stderr, "--max-tokens: give a count of 1 or more\n"); goto out; }
            max_tokens = (int)v;
        } else if (strcmp(argv[i], "--temperature") == 0) {
            if (!whole_float(argv[i + 1], &temperature)) { fprintf(stderr, "--temperature: give a number\n"); goto out; }
        } else if (strcmp(argv[i], "--seed") == 0) {
            if (!whole_int(argv[i + 1], LLONG_MIN, LLONG_MAX, &seed)) { fprintf(stderr, "--seed: give an integer\n"); goto out; }
        } else {
            fprintf(stderr, "unknown option %s (--format, --system, --max-tokens, --temperature, --seed)\n", argv[i]);
            goto out;
        }
    }
    if (format == CISM_CHAT_MODEL && cism_model_chat_format(model, &format) != CISM_OK) {
        fprintf(stderr, "this model names no chat format; pass --format (chatml, llama3, llama2, mistral, zephyr)\n");
        goto out;
    }
    if ((st = cism_session_create(model, NULL, &session)) || (st = cism_sampler_create(&sampler)) ||
        (st = cism_sampler_set_float(sampler, CISM_SAMPLER_TEMPERATURE, temperature)) ||
        (st = cism_sampler_set_int(sampler, CISM_SAMPLER_SEED, seed)) ||
        (st = cism_model_eos_ids(model, eos, 16, &n_eos))) {
        rc = fail(st);
        goto out;
    }
    if (n_eos > 16) n_eos = 16;
    fprintf(stderr, "chat format: %s. Type a message, end with Ctrl-D.\n", cism_chat_format_name(format));
    while (n_msgs + 2 < MAX_MESSAGES && fgets(line, sizeof(line), stdin)) {
        size_t len = strcspn(line, "\n"), text_len = 0;
        int32_t n_prompt = 0, keep = 0, n_gen = 0;
        turn t;
        line[len] = 0;
        if (len == 0) continue;
        roles[n_msgs] = "user";
        role_lens[n_msgs] = 4;
        contents[n_msgs] = strdup(line);
        content_lens[n_msgs] = len;
        n_msgs++;
        /* render the conversation: ask for the size, then fill */
        st = cism_chat_apply(model, format, roles, role_lens, (const char *const *)contents, content_lens, n_msgs, 1, NULL, 0, &text_len);
        if (st != CISM_ERR_BUFFER_SMALL && st != CISM_OK) { rc = fail(st); goto out; }
        free(text);
        text = (char *)malloc(text_len + 1);
        if (!text || (st = cism_chat_apply(model, format, roles, role_lens, (const char *const *)contents, content_lens, n_msgs, 1,
                                           text, text_len, &text_len))) { rc = fail(st); goto out; }
        /* the text spells special tokens out; BOS is part of the format */
        st = cism_tokenize(model, text, text_len, CISM_TOKENIZE_PARSE_SPECIAL, NULL, 0, &n_prompt);
        if (st != CISM_ERR_BUFFER_SMALL && st != CISM_OK) { rc = fail(st); goto out; }
        free(prompt);
        prompt = (int32_t *)malloc(((size_t)n_prompt + 1) * sizeof(int32_t));
        if (!prompt || (st = cism_tokenize(model, text, text_len, CISM_TOKENIZE_PARSE_SPECIAL, prompt, n_prompt, &n_prompt))) { rc = fail(st); goto out; }
        /* reuse the evaluated prefix */
        while (keep < n_history && keep < n_prompt && keep < cism_session_n_past(session) && history[keep] == prompt[keep]) keep++;
        if (keep == n_prompt) keep--;      /* something must be evaluated to get logits */
        if (keep < 0) keep = 0;
        if ((st = cism_session_rewind(session, keep))) { rc = fail(st); goto out; }
        memset(&t, 0, sizeof(t));
        t.eos = eos;
        t.n_eos = n_eos;
        if ((st = cism_detokenizer_create(model, CISM_DETOKENIZE_SKIP_SPECIAL, &t.detok))) { rc = fail(st); goto out; }
        st = cism_generate(session, sampler, prompt + keep, n_prompt - keep, max_tokens, 0, on_token, &t, &n_gen);
        {
            const char *rest;
            size_t rest_len;
            if (cism_detokenizer_flush(t.detok, &rest, &rest_len) == CISM_OK && rest_len) emit(&t, rest, rest_len);
        }
        cism_detokenizer_free(t.detok);
        printf("\n");
        fflush(stdout);
        if (st && st != CISM_ERR_CONTEXT_FULL) { free(t.reply); rc = fail(st); goto out; }
        roles[n_msgs] = "assistant";
        role_lens[n_msgs] = 9;
        contents[n_msgs] = t.reply ? t.reply : strdup("");
        content_lens[n_msgs] = t.reply_len;
        n_msgs++;
        /* what the session holds now: the prompt and the generated tokens */
        free(history);
        history = prompt;
        n_history = n_prompt;
        prompt = NULL;
        if (st == CISM_ERR_CONTEXT_FULL) { fprintf(stderr, "(context full)\n"); break; }
    }
    rc = 0;
out:
    for (i = 0; i < n_msgs; i++) free(contents[i]);
    free(text);
    free(prompt);
    free(history);
    cism_sampler_free(sampler);
    cism_session_free(session);
    cism_model_free(model);
    return rc;
}
