/* sampler.c - token selection: penalties, top-k, top-p, min-p, temperature.
 *
 * The order follows llama.cpp's default chain: penalties on the raw logits,
 * then top-k, top-p and min-p on the untempered distribution, then the
 * temperature, then a draw from a seeded generator (splitmix64). With
 * temperature <= 0 the choice is the argmax of the penalized logits. */
#include "cism.h"
#include "../core/error.h"
#include "state.h"
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cism_sampler {
    double temperature, top_p, min_p, repeat_penalty, frequency_penalty, presence_penalty;
    int64_t top_k, last_n;
    uint64_t seed, rng;
    int32_t *history;        /* ring buffer of the last last_n accepted tokens */
    int64_t hist_len, hist_pos;
    /* scratch */
    float *work;
    int32_t *ids;
    int64_t cap;
    int32_t *hsort;
};

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double rng_uniform(cism_sampler *s) { return (double)(splitmix64(&s->rng) >> 11) * (1.0 / 9007199254740992.0); }

cism_status cism_sampler_create(cism_sampler **out) {
    cism_sampler *s;
    cism__clear_error();
    if (!out) return cism__fail(CISM_ERR_INVALID_ARG, "cism_sampler_create: out is NULL");
    *out = NULL;
    s = (cism_sampler *)calloc(1, sizeof(*s));
    if (!s) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_sampler_create: out of memory");
    s->temperature = 0.0;
    s->top_p = 1.0;
    s->min_p = 0.0;
    s->repeat_penalty = 1.0;
    s->last_n = 64;
    s->history = (int32_t *)calloc((size_t)s->last_n, sizeof(int32_t));
    s->hsort = (int32_t *)calloc((size_t)s->last_n, sizeof(int32_t));
    if (!s->history || !s->hsort) {
        cism_sampler_free(s);
        return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_sampler_create: out of memory");
    }
    s->rng = s->seed;
    *out = s;
    return CISM_OK;
}

void cism_sampler_free(cism_sampler *s) {
    if (!s) return;
    free(s->history);
    free(s->hsort);
    free(s->work);
    free(s->ids);
    free(s);
}

static const char *param_name(cism_sampler_param key) {
    switch (key) {
    case CISM_SAMPLER_TEMPERATURE: return "temperature";
    case CISM_SAMPLER_TOP_K: return "top_k";
    case CISM_SAMPLER_TOP_P: return "top_p";
    case CISM_SAMPLER_MIN_P: return "min_p";
    case CISM_SAMPLER_REPEAT_PENALTY: return "repeat_penalty";
    case CISM_SAMPLER_FREQUENCY_PENALTY: return "frequency_penalty";
    case CISM_SAMPLER_PRESENCE_PENALTY: return "presence_penalty";
    case CISM_SAMPLER_PENALTY_LAST_N: return "penalty_last_n";
    case CISM_SAMPLER_SEED: return "seed";
    default: return NULL;
    }
}

/* Every logit NaN or -inf: nothing can be sampled. Says what to do about it. */
static cism_status no_usable_logit(void) {
    return cism__fail(CISM_ERR_INVALID_ARG,
                      "cannot pick a token: every logit is NaN or -inf (the model's output is broken, usually corrupt or "
                      "overflowing weights); check the file with check_weights=1 (CISM_PARAM_CHECK_WEIGHTS) or convert "
                      "the checkpoint again, e.g. with --dtype f32");
}

cism_status cism_sampler_set_float(cism_sampler *s, cism_sampler_param key, double v) {
    cism__clear_error();
    if (!s) return cism__fail(CISM_ERR_INVALID_ARG, "cism_sampler_set_float: sampler is NULL");
    if (!isfinite(v)) {
        if (!param_name(key)) return cism__fail(CISM_ERR_INVALID_ARG, "unknown sampler parameter %d", (int)key);
        return cism__fail(CISM_ERR_INVALID_ARG, "%s %g is not a finite number: give a real value", param_name(key), v);
    }
    switch (key) {
    case CISM_SAMPLER_TEMPERATURE:
        if (v < 0) return cism__fail(CISM_ERR_INVALID_ARG, "temperature %g must be >= 0 (0 = greedy)", v);
        s->temperature = v;
        return CISM_OK;
    case CISM_SAMPLER_TOP_P:
        if (!(v > 0 && v <= 1)) return cism__fail(CISM_ERR_INVALID_ARG, "top_p %g must be in (0, 1] (1 = off)", v);
        s->top_p = v;
        return CISM_OK;
    case CISM_SAMPLER_MIN_P:
        if (!(v >= 0 && v < 1)) return cism__fail(CISM_ERR_INVALID_ARG, "min_p %g must be in [0, 1) (0 = off)", v);
        s->min_p = v;
        return CISM_OK;
    case CISM_SAMPLER_REPEAT_PENALTY:
        if (!(v > 0)) return cism__fail(CISM_ERR_INVALID_ARG, "repeat_penalty %g must be > 0 (1 = off)", v);
        s->repeat_penalty = v;
        return CISM_OK;
    case CISM_SAMPLER_FREQUENCY_PENALTY: s->frequency_penalty = v; return CISM_OK;
    case CISM_SAMPLER_PRESENCE_PENALTY: s->presence_penalty = v; return CISM_OK;
    case CISM_SAMPLER_TOP_K:
    case CISM_SAMPLER_PENALTY_LAST_N:
    case CISM_SAMPLER_SEED:
        if (v != floor(v) || fabs(v) > 9.0e15) return cism__fail(CISM_ERR_INVALID_ARG, "%s %g must be a whole number", param_name(key), v);
        return cism_sampler_set_int(s, key, (int64_t)v);
    default: return cism__fail(CISM_ERR_INVALID_ARG, "unknown sampler parameter %d", (int)key);
    }
}

cism_status cism_sampler_set_int(cism_sampler *s, cism_sampler_param key, int64_t v) {
    cism__clear_error();
    if (!s) return cism__fail(CISM_ERR_INVALID_ARG, "cism_sampler_set_int: sampler is NULL");
    switch (key) {
    case CISM_SAMPLER_TOP_K:
        if (v < 0) return cism__fail(CISM_ERR_INVALID_ARG, "top_k %lld must be >= 0 (0 = off)", (long long)v);
        s->top_k = v;
        return CISM_OK;
    case CISM_SAMPLER_PENALTY_LAST_N: {
        int32_t *h, *hs;
        if (v < 0 || v > 1048576) return cism__fail(CISM_ERR_INVALID_ARG, "penalty_last_n %lld must be in 0..1048576", (long long)v);
        h = (int32_t *)calloc((size_t)(v ? v : 1), sizeof(int32_t));
        hs = (int32_t *)calloc((size_t)(v ? v : 1), sizeof(int32_t));
        if (!h || !hs) { free(h); free(hs); return cism__fail(CISM_ERR_OUT_OF_MEMORY, "out of memory"); }
        free(s->history);
        free(s->hsort);
        s->history = h;
        s->hsort = hs;
        s->last_n = v;
        s->hist_len = s->hist_pos = 0;
        return CISM_OK;
    }
    case CISM_SAMPLER_SEED:
        s->seed = (uint64_t)v;
        s->rng = s->seed;
        return CISM_OK;
    case CISM_SAMPLER_TEMPERATURE:
    case CISM_SAMPLER_TOP_P:
    case CISM_SAMPLER_MIN_P:
    case CISM_SAMPLER_REPEAT_PENALTY:
    case CISM_SAMPLER_FREQUENCY_PENALTY:
    case CISM_SAMPLER_PRESENCE_PENALTY:
        return cism_sampler_set_float(s, key, (double)v);
    default: return cism__fail(CISM_ERR_INVALID_ARG, "unknown sampler parameter %d", (int)key);
    }
}

cism_status cism_sampler_reset(cism_sampler *s) {
    cism__clear_error();
    if (!s) return cism__fail(CISM_ERR_INVALID_ARG, "cism_sampler_reset: sampler is NULL");
    s->hist_len = s->hist_pos = 0;
    s->rng = s->seed;
    return CISM_OK;
}

cism_status cism_sampler_accept(cism_sampler *s, int32_t token) {
    cism__clear_error();
    if (!s) return cism__fail(CISM_ERR_INVALID_ARG, "cism_sampler_accept: sampler is NULL");
    if (token < 0) return cism__fail(CISM_ERR_TOKEN_RANGE, "token %d is negative: token ids start at 0", (int)token);
    if (s->last_n == 0) return CISM_OK;
    s->history[s->hist_pos] = token;
    s->hist_pos = (s->hist_pos + 1) % s->last_n;
    if (s->hist_len < s->last_n) s->hist_len++;
    return CISM_OK;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static int better(const float *w, int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); }

/* Moves the k best ids of ids[0..n) to the front (unordered); quickselect. */
static void select_top(const float *w, int32_t *ids, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int32_t pivot = ids[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (better(w, ids[i], pivot)) i++;
            while (better(w, pivot, ids[j])) j--;
            if (i <= j) { int32_t t = ids[i]; ids[i] = ids[j]; ids[j] = t; i++; j--; }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

/* Sorts by descending value, ties by ascending id: insertion sort for short
   lists, bottom-up merge sort (tmp holds n ids) otherwise. */
static void sort_desc(const float *w, int32_t *ids, int64_t n, int32_t *tmp) {
    int64_t width, i;
    if (n < 32) {
        for (i = 1; i < n; i++) {
            int32_t v = ids[i];
            int64_t j = i - 1;
            while (j >= 0 && better(w, v, ids[j])) { ids[j + 1] = ids[j]; j--; }
            ids[j + 1] = v;
        }
        return;
    }
    for (width = 1; width < n; width *= 2) {
        for (i = 0; i < n; i += 2 * width) {
            int64_t a = i, am = i + width < n ? i + width : n, b = am, bm = i + 2 * width < n ? i + 2 * width : n, o = i;
            while (a < am && b < bm) tmp[o++] = better(w, ids[b], ids[a]) ? ids[b++] : ids[a++];
            while (a < am) tmp[o++] = ids[a++];
            while (b < bm) tmp[o++] = ids[b++];
        }
        memcpy(ids, tmp, (size_t)n * sizeof(int32_t));
    }
}

/* What cism_sampler_sample draws from (shared with cism__sampler_probs):
   PICK_GREEDY: *best is the token; PICK_INF: ids[0..*n_cand) are the +inf
   logits, equally likely; PICK_SOFTMAX: ids[0..*n_cand) are the candidates,
   weighted exp((work[id] - *maxv) / temperature). */
enum { PICK_GREEDY = 0, PICK_INF = 1, PICK_SOFTMAX = 2 };
static cism_status prepare(cism_sampler *s, const float *logits, int32_t n_vocab, int *mode, int64_t *n_cand,
                           double *maxv_out, int32_t *best) {
    float *w;
    int32_t *ids;
    int64_t i, n, k;
    double maxv;
    if (!s || !logits) return cism__fail(CISM_ERR_INVALID_ARG, "cism_sampler_sample: NULL argument");
    if (n_vocab <= 0) return cism__fail(CISM_ERR_INVALID_ARG, "cism_sampler_sample: n_vocab %d must be > 0", (int)n_vocab);
    if (s->cap < n_vocab) {
        float *nw = (float *)realloc(s->work, (size_t)n_vocab * sizeof(float));
        int32_t *ni;
        if (nw) s->work = nw;
        ni = (int32_t *)realloc(s->ids, (size_t)n_vocab * 2 * sizeof(int32_t));
        if (ni) s->ids = ni;
        if (!nw || !ni) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "cism_sampler_sample: out of memory");
        s->cap = n_vocab;
    }
    w = s->work;
    ids = s->ids;
    for (i = 0; i < n_vocab; i++) w[i] = isnan(logits[i]) ? -INFINITY : logits[i];

    /* penalties, once per distinct id in the history */
    if (s->hist_len > 0 && (s->repeat_penalty != 1.0 || s->frequency_penalty != 0.0 || s->presence_penalty != 0.0)) {
        int64_t j = 0;
        memcpy(s->hsort, s->history, (size_t)s->hist_len * sizeof(int32_t));
        qsort(s->hsort, (size_t)s->hist_len, sizeof(int32_t), cmp_i32);
        while (j < s->hist_len) {
            int32_t id = s->hsort[j];
            int64_t count = 0;
            while (j < s->hist_len && s->hsort[j] == id) { count++; j++; }
            if (id >= n_vocab) continue;
            if (s->repeat_penalty != 1.0) w[id] = w[id] > 0 ? (float)(w[id] / s->repeat_penalty) : (float)(w[id] * s->repeat_penalty);
            w[id] -= (float)(count * s->frequency_penalty + s->presence_penalty);
        }
    }

    /* greedy */
    if (s->temperature <= 0.0) {
        int32_t top = 0;
        for (i = 1; i < n_vocab; i++)
            if (w[i] > w[top]) top = (int32_t)i;
        if (w[top] == -INFINITY) return no_usable_logit();
        *best = top;
        *mode = PICK_GREEDY;
        return CISM_OK;
    }

    /* candidates: finite logits only */
    n = 0;
    for (i = 0; i < n_vocab; i++)
        if (w[i] > -INFINITY) ids[n++] = (int32_t)i;
    if (n == 0) return no_usable_logit();
    k = (s->top_k > 0 && s->top_k < n) ? s->top_k : n;

    maxv = -INFINITY;
    for (i = 0; i < n; i++) if (w[ids[i]] > maxv) maxv = w[ids[i]];
    if (maxv == INFINITY) {
        /* the limit of the distribution: all its mass on the +inf logits, shared
           equally (exp(inf - inf) would make every weight NaN and pick the last id) */
        int64_t m = 0;
        for (i = 0; i < n; i++)
            if (w[ids[i]] == INFINITY) ids[m++] = ids[i];
        *n_cand = m;
        *mode = PICK_INF;
        return CISM_OK;
    }
    if (k < n || s->top_p < 1.0 || s->min_p > 0.0) {
        /* Sort a growing prefix of the best candidates until the top-p mass
           (of the whole untempered distribution) and the min-p cut are inside it. */
        int64_t sorted = k < 64 ? k : 64, keep;
        double total = 0.0;
        for (i = 0; i < n; i++) total += exp((double)w[ids[i]] - maxv);
        for (;;) {
            int covered = 1;
            select_top(w, ids, n, sorted);
            sort_desc(w, ids, sorted, ids + s->cap);
            if (sorted == k) break;
            if (s->top_p < 1.0) {
                double c = 0.0;
                for (i = 0; i < sorted; i++) c += exp((double)w[ids[i]] - maxv);
                if (c / total < s->top_p) covered = 0;
            }
            if (s->min_p > 0.0 && exp((double)w[ids[sorted - 1]] - maxv) >= s->min_p) covered = 0;
            if (s->top_p >= 1.0 && s->min_p <= 0.0) covered = 0; /* only top-k: keep all k */
            if (covered) break;
            sorted = sorted * 4 < k ? sorted * 4 : k;
        }
        keep = sorted;
        if (s->top_p < 1.0) {
            double c = 0.0;
            for (i = 0; i < keep; i++) {
                c += exp((double)w[ids[i]] - maxv);
                if (c / total >= s->top_p) { keep = i + 1; break; }
            }
        }
        if (s->min_p > 0.0) {
            int64_t m = 1;
            while (m < keep && exp((double)w[ids[m]] - maxv) >= s->min_p) m++;
            keep = m;
        }
        n = keep;
    }

    *n_cand = n;
    *maxv_out = maxv;
    *mode = PICK_SOFTMAX;
    return CISM_OK;
}

cism_status cism_sampler_sample(cism_sampler *s, const float *logits, int32_t n_vocab, int32_t *token) {
    const int32_t *ids;
    int64_t i, n;
    double maxv = 0.0, sum, cum, u, inv_t;
    int mode = PICK_GREEDY;
    int32_t best = 0;
    cism_status st;
    cism__clear_error();
    if (!token) return cism__fail(CISM_ERR_INVALID_ARG, "cism_sampler_sample: NULL argument");
    if ((st = prepare(s, logits, n_vocab, &mode, &n, &maxv, &best)) != CISM_OK) return st;
    if (mode == PICK_GREEDY) {
        *token = best;
        return CISM_OK;
    }
    ids = s->ids;
    if (mode == PICK_INF) {
        i = (int64_t)(rng_uniform(s) * (double)n);
        *token = ids[i < n ? i : n - 1];
        return CISM_OK;
    }
    /* temperature and draw */
    inv_t = 1.0 / s->temperature;
    sum = 0.0;
    for (i = 0; i < n; i++) sum += exp(((double)s->work[ids[i]] - maxv) * inv_t);
    u = rng_uniform(s) * sum;
    cum = 0.0;
    for (i = 0; i < n; i++) {
        cum += exp(((double)s->work[ids[i]] - maxv) * inv_t);
        if (u < cum) break;
    }
    if (i >= n) i = n - 1;
    *token = ids[i];
    return CISM_OK;
}

/* ---- speculative decoding (sampler.h) --------------------------------------- */
int cism__sampler_is_greedy(const cism_sampler *s) { return s->temperature <= 0.0; }

double cism__sampler_uniform(cism_sampler *s) { return rng_uniform(s); }

cism_status cism__sampler_probs(cism_sampler *s, const float *logits, int32_t n_vocab, double *probs) {
    int64_t i, n = 0;
    double maxv = 0.0, sum = 0.0, inv_t;
    int mode = PICK_GREEDY;
    int32_t best = 0;
    cism_status st;
    if ((st = prepare(s, logits, n_vocab, &mode, &n, &maxv, &best)) != CISM_OK) return st;
    memset(probs, 0, (size_t)n_vocab * sizeof(double));
    if (mode == PICK_GREEDY) {
        probs[best] = 1.0;
        return CISM_OK;
    }
    if (mode == PICK_INF) {
        for (i = 0; i < n; i++) probs[s->ids[i]] = 1.0 / (double)n;
        return CISM_OK;
    }
    inv_t = 1.0 / s->temperature;
    for (i = 0; i < n; i++) {
        double e = exp(((double)s->work[s->ids[i]] - maxv) * inv_t);
        probs[s->ids[i]] = e;
        sum += e;
    }
    for (i = 0; i < n; i++) probs[s->ids[i]] /= sum;
    return CISM_OK;
}

cism_status cism__sampler_copy(cism_sampler *dst, const cism_sampler *src) {
    if (dst->last_n != src->last_n) {
        int32_t *h = (int32_t *)calloc((size_t)(src->last_n ? src->last_n : 1), sizeof(int32_t));
        int32_t *hs = (int32_t *)calloc((size_t)(src->last_n ? src->last_n : 1), sizeof(int32_t));
        if (!h || !hs) {
            free(h);
            free(hs);
            return cism__fail(CISM_ERR_OUT_OF_MEMORY, "out of memory for a sampler's history");
        }
        free(dst->history);
        free(dst->hsort);
        dst->history = h;
        dst->hsort = hs;
    }
    dst->temperature = src->temperature;
    dst->top_p = src->top_p;
    dst->min_p = src->min_p;
    dst->repeat_penalty = src->repeat_penalty;
    dst->frequency_penalty = src->frequency_penalty;
    dst->presence_penalty = src->presence_penalty;
    dst->top_k = src->top_k;
    dst->last_n = src->last_n;
    dst->seed = src->seed;
    dst->rng = src->rng;
    if (src->last_n) memcpy(dst->history, src->history, (size_t)src->last_n * sizeof(int32_t));
    dst->hist_len = src->hist_len;
    dst->hist_pos = src->hist_pos;
    return CISM_OK;
}

/* ---- state (state.h; layout in docs/SESSION_STATE.md) ---------------------- */
#define SAMPLER_STATE_FIXED 88u

static void put_f64(uint8_t *p, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    cism__put_u64(p, u);
}
static double get_f64(const uint8_t *p) {
    uint64_t u = cism__get_u64(p);
    double v;
    memcpy(&v, &u, 8);
    return v;
}

uint64_t cism__sampler_state_size(const cism_sampler *s) { return SAMPLER_STATE_FIXED + 4u * (uint64_t)s->hist_len; }

void cism__sampler_state_write(const cism_sampler *s, uint8_t *d) {
    int64_t i, start = s->hist_len < s->last_n ? 0 : s->hist_pos; /* oldest entry of the ring */
    put_f64(d + 0, s->temperature);
    put_f64(d + 8, s->top_p);
    put_f64(d + 16, s->min_p);
    put_f64(d + 24, s->repeat_penalty);
    put_f64(d + 32, s->frequency_penalty);
    put_f64(d + 40, s->presence_penalty);
    cism__put_u64(d + 48, (uint64_t)s->top_k);
    cism__put_u64(d + 56, (uint64_t)s->last_n);
    cism__put_u64(d + 64, s->seed);
    cism__put_u64(d + 72, s->rng);
    cism__put_u64(d + 80, (uint64_t)s->hist_len);
    for (i = 0; i < s->hist_len; i++)
        cism__put_u32(d + SAMPLER_STATE_FIXED + 4 * i, (uint32_t)s->history[(start + i) % s->last_n]);
}

cism_status cism__sampler_state_read(cism_sampler *s, const uint8_t *d, uint64_t size, const char *label) {
    double f[6];
    int64_t top_k, last_n, hist_len, i;
    int32_t *h, *hs;
    if (size < SAMPLER_STATE_FIXED) return cism__fail(CISM_ERR_FORMAT, "%s: the sampler section is too short", label);
    for (i = 0; i < 6; i++) f[i] = get_f64(d + 8 * i);
    top_k = (int64_t)cism__get_u64(d + 48);
    last_n = (int64_t)cism__get_u64(d + 56);
    hist_len = (int64_t)cism__get_u64(d + 80);
    for (i = 0; i < 6; i++)
        if (!isfinite(f[i])) return cism__fail(CISM_ERR_FORMAT, "%s: the sampler section holds a non-finite parameter", label);
    if (f[0] < 0 || !(f[1] > 0 && f[1] <= 1) || !(f[2] >= 0 && f[2] < 1) || !(f[3] > 0) || top_k < 0 || last_n < 0 ||
        last_n > 1048576 || hist_len < 0 || hist_len > last_n)
        return cism__fail(CISM_ERR_FORMAT, "%s: the sampler section holds out-of-range parameters", label);
    if (size != SAMPLER_STATE_FIXED + 4u * (uint64_t)hist_len)
        return cism__fail(CISM_ERR_FORMAT, "%s: the sampler section has %llu bytes, its history needs %llu", label,
                          (unsigned long long)size, (unsigned long long)(SAMPLER_STATE_FIXED + 4u * (uint64_t)hist_len));
    for (i = 0; i < hist_len; i++)
        if ((int32_t)cism__get_u32(d + SAMPLER_STATE_FIXED + 4 * i) < 0)
            return cism__fail(CISM_ERR_FORMAT, "%s: the sampler's history holds a negative token id", label);
    h = (int32_t *)calloc((size_t)(last_n ? last_n : 1), sizeof(int32_t));
    hs = (int32_t *)calloc((size_t)(last_n ? last_n : 1), sizeof(int32_t));
    if (!h || !hs) {
        free(h);
        free(hs);
        return cism__fail(CISM_ERR_OUT_OF_MEMORY, "%s: out of memory for the sampler's history", label);
    }
    for (i = 0; i < hist_len; i++) h[i] = (int32_t)cism__get_u32(d + SAMPLER_STATE_FIXED + 4 * i);
    free(s->history);
    free(s->hsort);
    s->history = h;
    s->hsort = hs;
    s->temperature = f[0];
    s->top_p = f[1];
    s->min_p = f[2];
    s->repeat_penalty = f[3];
    s->frequency_penalty = f[4];
    s->presence_penalty = f[5];
    s->top_k = top_k;
    s->last_n = last_n;
    s->seed = cism__get_u64(d + 64);
    s->rng = cism__get_u64(d + 72);
    s->hist_len = hist_len;
    s->hist_pos = last_n ? hist_len % last_n : 0;
    return CISM_OK;
}
