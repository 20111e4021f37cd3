/* test_cancel.c - cism_session_cancel landing inside an eval (issue 16, item 5):
 * the chunks completed before the stop are kept, the session's position, KV
 * cache and last logits stay consistent (the logits are those of the last kept
 * token, bit for bit), continuing gives the same bits as an uninterrupted run,
 * and cancelling one session never disturbs another on the same model. Cancels
 * land deterministically (from the session's internal chunk observer, or as a
 * request pending before the eval) and from a second thread (run under TSan).
 * The progress callback stops an eval between chunks with the same result.
 * Also: loading a FIFO is refused at once instead of blocking forever. */
#include "cism.h"
#include "test_util.h"
#include "model/session.h"
#include "platform/platform.h"

#include <string.h>
#if !defined(_WIN32)
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#endif

#define N_TOK 40
#define BATCH 8
#define VOCAB 512

static int32_t g_tokens[N_TOK];

static cism_session *new_session(cism_model *m, int threads, int kv_type, int logits_all) {
    return test_session(m, threads, kv_type, logits_all, BATCH);
}

/* ref[k] = the last logits of a fresh session that evaluated tokens[0..k), for
   every k that is a multiple of BATCH, and k = N_TOK */
static float g_ref[N_TOK + 1][VOCAB];

static void make_refs(cism_model *m, int kv_type) {
    int k;
    for (k = BATCH; k <= N_TOK; k += BATCH) {
        cism_session *s = new_session(m, 2, kv_type, 0);
        const float *lg = NULL;
        int32_t nv = 0;
        CHECK_OK(cism_session_eval(s, g_tokens, k));
        CHECK_OK(cism_session_logits(s, -1, &lg, &nv));
        CHECK(nv == VOCAB);
        if (lg) memcpy(g_ref[k], lg, sizeof(g_ref[k]));
        cism_session_free(s);
    }
}

static int same_as_ref(cism_session *s, int32_t row, int k) {
    const float *lg = NULL;
    int32_t nv = 0;
    if (cism_session_logits(s, row, &lg, &nv) != CISM_OK || nv != VOCAB || !lg) return 0;
    return memcmp(lg, g_ref[k], sizeof(g_ref[k])) == 0;
}

typedef struct { int64_t at; int calls; } hook_arg;

static void cancel_at(cism_session *s, int64_t n_done, void *data) {
    hook_arg *h = (hook_arg *)data;
    h->calls++;
    if (n_done == h->at) cism_session_cancel(s);
}

/* Cancel requested once `chunks` chunks are done: the next chunk stops inside
   its layers. Then the session holds exactly those chunks. */
static void cancel_mid_eval(cism_model *m, int kv_type, int logits_all, int chunks) {
    cism_session *s = new_session(m, 2, kv_type, logits_all);
    hook_arg h;
    int k = chunks * BATCH, r;
    h.at = k;
    h.calls = 0;
    s->chunk_hook = cancel_at;
    s->chunk_hook_data = &h;
    CHECK_MSG(cism_session_eval(s, g_tokens, N_TOK) == CISM_ERR_CANCELLED, "kv %d, all %d, chunks %d: %s", kv_type, logits_all,
              chunks, cism_last_error());
    CHECK(strstr(cism_last_error(), "cancelled") != NULL);
    CHECK_MSG(cism_session_n_past(s) == k, "n_past %d, expected %d", (int)cism_session_n_past(s), k);
    CHECK_MSG(same_as_ref(s, -1, k), "kv %d, all %d: the logits after a cancel at %d are not those of token %d", kv_type,
              logits_all, k, k - 1);
    CHECK(same_as_ref(s, k - 1, k));
    if (logits_all) {   /* every kept row is there and right */
        cism_session *full = new_session(m, 2, kv_type, 1);
        CHECK_OK(cism_session_eval(full, g_tokens, N_TOK));
        for (r = 0; r < k; r++) {
            const float *a = NULL, *b = NULL;
            int32_t nv;
            CHECK_OK(cism_session_logits(s, r, &a, &nv));
            CHECK_OK(cism_session_logits(full, r, &b, &nv));
            CHECK_MSG(a && b && memcmp(a, b, VOCAB * sizeof(float)) == 0, "row %d differs", r);
        }
        {
            const float *past = NULL;
            CHECK(cism_session_logits(s, k, &past, NULL) == CISM_ERR_INVALID_ARG);  /* past the kept rows */
        }
        cism_session_free(full);
    } else if (k > 1) {
        const float *a = NULL;
        CHECK(cism_session_logits(s, 0, &a, NULL) == CISM_ERR_STATE);
    }
    /* continuing gives the bits of the uninterrupted run */
    s->chunk_hook = NULL;
    CHECK_OK(cism_session_eval(s, g_tokens + k, N_TOK - k));
    CHECK(cism_session_n_past(s) == N_TOK);
    CHECK_MSG(same_as_ref(s, -1, N_TOK), "kv %d, all %d, cancel at %d: continuing differs from an uninterrupted run",
              kv_type, logits_all, k);
    cism_session_free(s);
}

/* A cancel pending before the eval (cism__session_eval keeps it, as
   cism_generate does) stops the first chunk: nothing changes, not even the
   logits of the previous eval. */
static void cancel_first_chunk(cism_model *m, int logits_all) {
    cism_session *s = new_session(m, 1, CISM_DTYPE_F32, logits_all);
    const float *lg = NULL;
    CHECK_OK(cism_session_eval(s, g_tokens, BATCH));
    cism_session_cancel(s);
    CHECK(cism__session_eval(s, g_tokens + BATCH, N_TOK - BATCH) == CISM_ERR_CANCELLED);
    CHECK(cism_session_n_past(s) == BATCH);
    CHECK(same_as_ref(s, -1, BATCH));
    CHECK(same_as_ref(s, BATCH - 1, BATCH));
    CHECK_OK(cism_session_eval(s, g_tokens + BATCH, N_TOK - BATCH)); /* the request is cleared */
    CHECK(same_as_ref(s, -1, N_TOK));
    /* nothing evaluated yet: still no logits */
    CHECK_OK(cism_session_reset(s));
    cism_session_cancel(s);
    CHECK(cism__session_eval(s, g_tokens, N_TOK) == CISM_ERR_CANCELLED);
    CHECK(cism_session_n_past(s) == 0);
    CHECK(cism_session_logits(s, -1, &lg, NULL) == CISM_ERR_STATE);
    cism_session_free(s);
}

/* The progress callback: called after every chunk with (done, total); a
   non-zero return after chunk k stops the eval there exactly as a cancel
   does (k chunks kept, the logits of token k*BATCH - 1); after the last chunk
   it changes nothing. */
typedef struct { int calls, stop_at; int32_t seen[N_TOK / BATCH + 1], total; } progress_arg;

static int32_t on_progress(void *user, int32_t done, int32_t total) {
    progress_arg *p = (progress_arg *)user;
    if (p->calls <= N_TOK / BATCH) p->seen[p->calls] = done;
    p->calls++;
    p->total = total;
    return p->calls == p->stop_at;
}

static void progress_stop(cism_model *m, int logits_all) {
    int k, c;
    for (c = 1; c <= N_TOK / BATCH; c++) {
        cism_session *s = new_session(m, 2, CISM_DTYPE_F32, logits_all);
        progress_arg p;
        memset(&p, 0, sizeof(p));
        p.stop_at = c;
        CHECK_OK(cism_session_set_progress_callback(s, on_progress, &p));
        k = c * BATCH;
        if (k < N_TOK) {
            CHECK(cism_session_eval(s, g_tokens, N_TOK) == CISM_ERR_CANCELLED);
            CHECK_MSG(cism_session_n_past(s) == k, "stop after chunk %d: n_past %d", c, (int)cism_session_n_past(s));
            CHECK(same_as_ref(s, -1, k));
            CHECK(p.calls == c);
        } else {
            CHECK_OK(cism_session_eval(s, g_tokens, N_TOK)); /* the last chunk was done: nothing to stop */
            CHECK(cism_session_n_past(s) == N_TOK && same_as_ref(s, -1, N_TOK));
        }
        CHECK(p.total == N_TOK && p.seen[0] == BATCH && p.seen[p.calls - 1] == (k < N_TOK ? k : N_TOK));
        CHECK_OK(cism_session_set_progress_callback(s, NULL, NULL));
        if (k < N_TOK) {
            CHECK_OK(cism_session_eval(s, g_tokens + k, N_TOK - k));
            CHECK(same_as_ref(s, -1, N_TOK));
        }
        cism_session_free(s);
    }
    CHECK(cism_session_set_progress_callback(NULL, on_progress, NULL) == CISM_ERR_INVALID_ARG);
}

typedef struct { cism_session *s; int n, cancel_after; } gen_arg;

static int32_t cancel_in_callback(void *user, int32_t token) {
    gen_arg *g = (gen_arg *)user;
    (void)token;
    if (++g->n == g->cancel_after) cism_session_cancel(g->s);
    return 0;
}

/* cism_generate cancelled from its callback: the decode step of that token
   is cancelled, the session holds the prompt and the tokens before it, with
   their logits, and can go on. */
static void cancel_generate(cism_model *m) {
    cism_session *s = new_session(m, 2, CISM_DTYPE_F32, 0), *ref = new_session(m, 2, CISM_DTYPE_F32, 0);
    cism_sampler *smp = NULL;
    gen_arg g;
    int32_t produced = 0, i;
    int32_t seq[N_TOK + 8];
    const float *a = NULL, *b = NULL;
    CHECK_OK(cism_sampler_create(&smp));
    g.s = s;
    g.n = 0;
    g.cancel_after = 3;
    CHECK(cism_generate(s, smp, g_tokens, BATCH, 10, CISM_GENERATE_IGNORE_EOS, cancel_in_callback, &g, &produced) ==
          CISM_ERR_CANCELLED);
    CHECK(produced == 3);
    CHECK_MSG(cism_session_n_past(s) == BATCH + 2, "n_past %d", (int)cism_session_n_past(s));
    /* the reference: prompt + the two evaluated tokens, greedy as the sampler's default */
    memcpy(seq, g_tokens, BATCH * sizeof(int32_t));
    CHECK_OK(cism_session_eval(ref, seq, BATCH));
    for (i = 0; i < 2; i++) {
        const float *lg = NULL;
        int32_t best = 0, v;
        CHECK_OK(cism_session_logits(ref, -1, &lg, NULL));
        if (!lg) break;
        for (v = 1; v < VOCAB; v++) if (lg[v] > lg[best]) best = v;
        seq[BATCH + i] = best;
        CHECK_OK(cism_session_eval(ref, &seq[BATCH + i], 1));
    }
    CHECK_OK(cism_session_logits(s, -1, &a, NULL));
    CHECK_OK(cism_session_logits(ref, -1, &b, NULL));
    CHECK_MSG(a && b && memcmp(a, b, VOCAB * sizeof(float)) == 0, "logits after a cancelled decode step differ");
    /* continuing from the current state works */
    CHECK_OK(cism_generate(s, smp, NULL, 0, 2, CISM_GENERATE_IGNORE_EOS, NULL, NULL, &produced));
    CHECK(produced == 2 && cism_session_n_past(s) == BATCH + 4);
    cism_sampler_free(smp);
    cism_session_free(s);
    cism_session_free(ref);
}

/* ---- from another thread ----------------------------------------------------- */
typedef struct {
    cism_model *m;
    cism_session *s;          /* the session being cancelled (evals in its own thread) */
    volatile int32_t started, finished;
    int rounds, cancelled, mid, completed, bad;
} victim;

static void victim_main(void *arg) {
    victim *v = (victim *)arg;
    int i;
    for (i = 0; i < v->rounds; i++) {
        int32_t k = 0;
        cism_session_reset(v->s);
        cism__atomic_store(&v->started, i + 1);
        /* going on from wherever a cancel stopped it, it ends as the uninterrupted run
           (one cancel per round, which may land in the first eval or a later one) */
        while (k < N_TOK) {
            cism_status st = cism_session_eval(v->s, g_tokens + k, N_TOK - k);
            int32_t k0 = k;
            k = cism_session_n_past(v->s);
            if (st == CISM_OK) {
                v->completed++;
                if (k != N_TOK || !same_as_ref(v->s, -1, N_TOK)) v->bad++;
                k = N_TOK;
            } else if (st == CISM_ERR_CANCELLED) {
                const float *lg;
                v->cancelled++;
                if (k < k0 || k % BATCH != 0 || k >= N_TOK) { v->bad++; break; }
                if (k > k0) v->mid++;
                if (k == 0) { if (cism_session_logits(v->s, -1, &lg, NULL) != CISM_ERR_STATE) v->bad++; }
                else if (!same_as_ref(v->s, -1, k)) v->bad++;
            } else {
                v->bad++;
                break;
            }
        }
    }
    cism__atomic_store(&v->finished, 1);
}

typedef struct { cism_model *m; int rounds, bad; } bystander;

static void bystander_main(void *arg) {
    bystander *b = (bystander *)arg;
    cism_session *s = new_session(b->m, 1, CISM_DTYPE_F32, 0);
    int i;
    for (i = 0; i < b->rounds; i++) {
        cism_session_reset(s);
        if (cism_session_eval(s, g_tokens, N_TOK) != CISM_OK || !same_as_ref(s, -1, N_TOK)) b->bad++;
    }
    cism_session_free(s);
}

static void cancel_from_thread(cism_model *m, int rounds) {
    victim v;
    bystander b;
    cism__thread *tv, *tb;
    int32_t seen = 0;
    memset(&v, 0, sizeof(v));
    v.m = m;
    v.s = new_session(m, 2, CISM_DTYPE_F32, 0);
    v.rounds = rounds;
    b.m = m;
    b.rounds = rounds;
    b.bad = 0;
    tv = cism__thread_start(victim_main, &v);
    tb = cism__thread_start(bystander_main, &b);
    CHECK(tv && tb);
    /* hammer the victim with cancels, a little later into each round every time */
    while (tv && !cism__atomic_load(&v.finished)) {
        int32_t r = cism__atomic_load(&v.started);
        if (r != seen) {
            double t0 = cism__time_seconds(), wait = 1e-6 * (double)(r % 20);
            seen = r;
            while (cism__time_seconds() - t0 < wait) cism__thread_yield();
            cism_session_cancel(v.s);
        } else {
            cism__thread_yield();
        }
    }
    if (tv) cism__thread_join(tv);
    if (tb) cism__thread_join(tb);
    printf("cancel from a thread: %d rounds, %d evals cancelled (%d after keeping some chunks), %d completed\n", rounds,
           v.cancelled, v.mid, v.completed);
    CHECK_MSG(v.bad == 0, "%d rounds of the cancelled session ended inconsistent", v.bad);
    CHECK_MSG(b.bad == 0, "%d rounds of the other session were disturbed", b.bad);
    CHECK(v.cancelled > 0);
    cism_session_free(v.s);
}

static void fifo_refused(void) {
#if !defined(_WIN32)
    char path[256];
    cism_model *m = NULL;
    double t0;
    cism_status st;
    snprintf(path, sizeof(path), "/tmp/cism_test_fifo_%d", (int)getpid());
    unlink(path);
    if (mkfifo(path, 0600) != 0) {
        fprintf(stderr, "mkfifo failed: FIFO check not run\n");
        g_failures++;
        return;
    }
    t0 = cism__time_seconds();
    st = cism_model_load(path, NULL, &m); /* blocked forever before the fix */
    CHECK(st == CISM_ERR_IO);
    CHECK(m == NULL);
    CHECK_MSG(strstr(cism_last_error(), "FIFO") != NULL && strstr(cism_last_error(), "regular file") != NULL, "%s",
              cism_last_error());
    CHECK(cism__time_seconds() - t0 < 5.0);
    {   /* mmap off: the same */
        cism_params *p = NULL;
        CHECK_OK(cism_params_create(&p));
        CHECK_OK(cism_params_set_int(p, CISM_PARAM_USE_MMAP, 0));
        CHECK(cism_model_load(path, p, &m) == CISM_ERR_IO);
        cism_params_free(p);
    }
    /* a directory is refused by name too */
    CHECK(cism_model_load("/tmp", NULL, &m) == CISM_ERR_IO);
    CHECK(strstr(cism_last_error(), "directory") != NULL);
    unlink(path);
#endif
}

int main(int argc, char **argv) {
    cism_model *m = NULL;
    int i, c;
    const char *rounds_env = getenv("CISM_CANCEL_ROUNDS");
    (void)argc;
    (void)argv;
    fifo_refused();
    for (i = 0; i < N_TOK; i++) g_tokens[i] = (int32_t)((i * 37 + 11) % VOCAB);
    CHECK_OK(cism_model_load(fixture_path("stories260K.cism"), NULL, &m));
    if (!m) return test_finish("test_cancel");
    make_refs(m, CISM_DTYPE_F16);
    for (c = 1; c < N_TOK / BATCH; c++) {
        cancel_mid_eval(m, CISM_DTYPE_F16, 0, c);
        cancel_mid_eval(m, CISM_DTYPE_F16, 1, c);
    }
    make_refs(m, CISM_DTYPE_F32);
    for (c = 1; c < N_TOK / BATCH; c++) {
        cancel_mid_eval(m, CISM_DTYPE_F32, 0, c);
        cancel_mid_eval(m, CISM_DTYPE_F32, 1, c);
    }
    cancel_first_chunk(m, 0);
    cancel_first_chunk(m, 1);
    progress_stop(m, 0);
    progress_stop(m, 1);
    cancel_generate(m);
    cancel_from_thread(m, rounds_env ? atoi(rounds_env) : 200);
    cism_model_free(m);
    return test_finish("test_cancel");
}
