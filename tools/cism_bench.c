/* cism_bench.c - prefill and decode speed per kernel tier and thread count.
 *
 *   cism-bench [--model FILE | --preset NAME --dtype f32|f16|bf16] [--tiers scalar,avx2,...]
 *              [--threads 1,2] [--load mmap,copy] [--pp 512] [--tg 64] [--reps 3] [--membw] [--keep]
 *
 * A preset writes a model of that shape with random weights to a temporary
 * .cism file (deleted afterwards unless --keep): float matmul speed does not
 * depend on the values. Configurations (tier x threads) are measured in
 * alternation, rep by rep, so slow drift from other load on the machine hits
 * them alike; the median of the reps is printed with the spread. Decode (tg)
 * starts from an empty context, like llama-bench; bytes per token count every
 * weight matrix (the output head included) plus the KV cache read at the mean
 * position. --membw measures this machine's read bandwidth at each thread
 * count (cism_measure_read_bandwidth) and prints decode's share of it. The
 * last two columns divide by the process's CPU time instead of wall time: for
 * one thread that is the speed while it actually ran (robust to other load on
 * the machine); for more threads it also counts their waiting.
 * Public API only. */
#include "cism.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(_WIN32)
#include <windows.h>
static double now(void) {
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&c);
    return (double)c.QuadPart / (double)f.QuadPart;
}
static double cpu_now(void) {
    FILETIME a, b, k, u;
    GetProcessTimes(GetCurrentProcess(), &a, &b, &k, &u);
    return ((double)k.dwLowDateTime + (double)u.dwLowDateTime + 4294967296.0 * ((double)k.dwHighDateTime + (double)u.dwHighDateTime)) * 1e-7;
}
#else
#include <unistd.h>
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
/* CPU seconds of the whole process: for one thread, the time it actually ran,
   which other load on the machine inflates far less than wall time */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
#endif

/* ---- synthetic models ------------------------------------------------------------ */
typedef struct preset {
    const char *name, *arch;
    int64_t vocab, dim, layers, heads, kv_heads, head_dim, ffn, ctx;
    double eps, theta;
    int qk_norm;
} preset;

static const preset g_presets[] = {
    {"stories260k", "llama", 512, 64, 5, 8, 4, 8, 172, 512, 1e-5, 10000.0, 0},
    {"smollm2-135m", "llama", 49152, 576, 30, 9, 3, 64, 1536, 8192, 1e-5, 100000.0, 0},
    {"qwen3-0.6b", "qwen3", 151936, 1024, 28, 16, 8, 128, 3072, 40960, 1e-6, 1000000.0, 1},
};

typedef struct buf { unsigned char *p; size_t n, cap; } buf;

static void put(buf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = (unsigned char *)realloc(b->p, b->cap);
        if (!b->p) { fprintf(stderr, "out of memory\n"); exit(1); }
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}
static void put_u32(buf *b, uint32_t v) { unsigned char c[4]; int i; for (i = 0; i < 4; i++) c[i] = (unsigned char)(v >> (8 * i)); put(b, c, 4); }
static void put_u64(buf *b, uint64_t v) { unsigned char c[8]; int i; for (i = 0; i < 8; i++) c[i] = (unsigned char)(v >> (8 * i)); put(b, c, 8); }
static void put_key(buf *b, const char *k, uint32_t type) { put_u32(b, (uint32_t)strlen(k)); put(b, k, strlen(k)); put_u32(b, type); }
static void meta_int(buf *b, const char *k, int64_t v) { put_key(b, k, 1); put_u64(b, (uint64_t)v); }
static void meta_float(buf *b, const char *k, double v) { uint64_t u; memcpy(&u, &v, 8); put_key(b, k, 2); put_u64(b, u); }
static void meta_str(buf *b, const char *k, const char *v) { put_key(b, k, 3); put_u64(b, strlen(v)); put(b, v, strlen(v)); }

typedef struct tensor { char name[64]; int dtype; int n_dims; uint64_t dims[2], offset, size; } tensor;

static uint32_t g_rng = 12345u;
static float frand(void) { g_rng = g_rng * 1664525u + 1013904223u; return (float)((g_rng >> 8) & 0xffffffu) / 8388608.0f - 1.0f; }

static uint16_t to_half(float f, int bf16) {
    uint32_t x, sign, mag;
    memcpy(&x, &f, 4);
    if (bf16) return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    sign = (x >> 16) & 0x8000u;
    mag = x & 0x7fffffffu;
    if (mag < 0x38800000u) return (uint16_t)sign;   /* weights here are never that small */
    return (uint16_t)(sign | ((mag - 0x38000000u + 0x1000u) >> 13));
}

static void add_tensor(tensor *ts, int *n, uint64_t *off, const char *name, int dtype, int64_t rows, int64_t cols) {
    tensor *t = &ts[(*n)++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->dtype = dtype;
    t->n_dims = rows > 0 ? 2 : 1;
    t->dims[0] = rows > 0 ? (uint64_t)rows : (uint64_t)cols;
    t->dims[1] = (uint64_t)cols;
    t->size = (rows > 0 ? (uint64_t)rows : 1u) * (uint64_t)cols * (dtype == CISM_DTYPE_F32 ? 4u : 2u);
    t->offset = *off;
    *off += (t->size + 63) / 64 * 64;
}

static int write_model(const char *path, const preset *p, int dtype) {
    tensor *ts = (tensor *)calloc(16 * (size_t)p->layers + 4, sizeof(tensor));
    buf meta = {0, 0, 0}, dir = {0, 0, 0}, hdr = {0, 0, 0};
    uint64_t off = 0, data_off, pos, esz = dtype == CISM_DTYPE_F32 ? 4 : 2;
    int n = 0, i, l;
    FILE *f;
    float *row;
    unsigned char zeros[64] = {0};
    add_tensor(ts, &n, &off, "token_embd", dtype, p->vocab, p->dim);
    add_tensor(ts, &n, &off, "output_norm", CISM_DTYPE_F32, 0, p->dim);
    for (l = 0; l < p->layers; l++) {
        char nm[64];
#define LNAME(s) (snprintf(nm, sizeof(nm), "blk.%d.%s", l, s), nm)
        add_tensor(ts, &n, &off, LNAME("attn_norm"), CISM_DTYPE_F32, 0, p->dim);
        add_tensor(ts, &n, &off, LNAME("attn_q"), dtype, p->heads * p->head_dim, p->dim);
        add_tensor(ts, &n, &off, LNAME("attn_k"), dtype, p->kv_heads * p->head_dim, p->dim);
        add_tensor(ts, &n, &off, LNAME("attn_v"), dtype, p->kv_heads * p->head_dim, p->dim);
        if (p->qk_norm) {
            add_tensor(ts, &n, &off, LNAME("attn_q_norm"), CISM_DTYPE_F32, 0, p->head_dim);
            add_tensor(ts, &n, &off, LNAME("attn_k_norm"), CISM_DTYPE_F32, 0, p->head_dim);
        }
        add_tensor(ts, &n, &off, LNAME("attn_output"), dtype, p->dim, p->heads * p->head_dim);
        add_tensor(ts, &n, &off, LNAME("ffn_norm"), CISM_DTYPE_F32, 0, p->dim);
        add_tensor(ts, &n, &off, LNAME("ffn_gate"), dtype, p->ffn, p->dim);
        add_tensor(ts, &n, &off, LNAME("ffn_up"), dtype, p->ffn, p->dim);
        add_tensor(ts, &n, &off, LNAME("ffn_down"), dtype, p->dim, p->ffn);
#undef LNAME
    }
    put_u32(&meta, p->qk_norm ? 16 : 15);
    meta_str(&meta, "general.architecture", p->arch);
    meta_str(&meta, "general.name", p->name);
    meta_str(&meta, "general.source", "synthetic:cism-bench");
    meta_int(&meta, "model.vocab_size", p->vocab);
    meta_int(&meta, "model.dim", p->dim);
    meta_int(&meta, "model.n_layers", p->layers);
    meta_int(&meta, "model.n_heads", p->heads);
    meta_int(&meta, "model.n_kv_heads", p->kv_heads);
    meta_int(&meta, "model.head_dim", p->head_dim);
    meta_int(&meta, "model.ffn_dim", p->ffn);
    meta_int(&meta, "model.context_length", p->ctx);
    meta_float(&meta, "model.norm_eps", p->eps);
    meta_float(&meta, "model.rope_theta", p->theta);
    meta_int(&meta, "model.tied_embeddings", 1);
    meta_int(&meta, "tokenizer.bos_id", 1);
    if (p->qk_norm) meta_int(&meta, "model.qk_norm", 1);
    put_u32(&dir, (uint32_t)n);
    for (i = 0; i < n; i++) {
        put_u32(&dir, (uint32_t)strlen(ts[i].name));
        put(&dir, ts[i].name, strlen(ts[i].name));
        put_u32(&dir, (uint32_t)ts[i].dtype);
        put_u32(&dir, (uint32_t)ts[i].n_dims);
        put_u64(&dir, ts[i].dims[0]);
        if (ts[i].n_dims == 2) put_u64(&dir, ts[i].dims[1]);
        put_u64(&dir, ts[i].offset);
        put_u64(&dir, ts[i].size);
    }
    data_off = (64 + meta.n + dir.n + 63) / 64 * 64;
    put(&hdr, "CISM\r\n\x1a\n", 8);
    put_u32(&hdr, 1);
    put_u32(&hdr, 0);
    put_u64(&hdr, 64);
    put_u64(&hdr, meta.n);
    put_u64(&hdr, 64 + meta.n);
    put_u64(&hdr, dir.n);
    put_u64(&hdr, data_off);
    put_u64(&hdr, ts[n - 1].offset + ts[n - 1].size);
    f = fopen(path, "wb");
    if (!f) { perror(path); return -1; }
    fwrite(hdr.p, 1, hdr.n, f);
    fwrite(meta.p, 1, meta.n, f);
    fwrite(dir.p, 1, dir.n, f);
    fwrite(zeros, 1, (size_t)(data_off - 64 - meta.n - dir.n), f);
    pos = data_off;
    row = (float *)malloc((size_t)(p->ffn > p->dim ? p->ffn : p->dim) * 4 * 4);
    for (i = 0; i < n; i++) {
        uint64_t rows = ts[i].n_dims == 2 ? ts[i].dims[0] : 1, cols = ts[i].n_dims == 2 ? ts[i].dims[1] : ts[i].dims[0], r, c;
        float a = ts[i].n_dims == 2 ? (float)(1.7 / sqrt((double)cols)) : 0.0f;
        void *out = malloc(cols * esz);
        if (!out) { fclose(f); return -1; }
        if (pos < data_off + ts[i].offset) fwrite(zeros, 1, (size_t)(data_off + ts[i].offset - pos), f);
        pos = data_off + ts[i].offset + ts[i].size;
        for (r = 0; r < rows; r++) {
            for (c = 0; c < cols; c++) row[c] = ts[i].n_dims == 2 ? a * frand() : 1.0f;
            if (ts[i].dtype == CISM_DTYPE_F32) fwrite(row, 4, cols, f);
            else {
                for (c = 0; c < cols; c++) ((uint16_t *)out)[c] = to_half(row[c], ts[i].dtype == CISM_DTYPE_BF16);
                fwrite(out, 2, cols, f);
            }
        }
        free(out);
    }
    free(row);
    fclose(f);
    free(ts); free(meta.p); free(dir.p); free(hdr.p);
    return 0;
}

/* ---- measuring ------------------------------------------------------------------- */
typedef struct config { int tier, threads, load; cism_session *s; double *pp, *tg, *ppc, *tgc; } config;

static int cmp_double(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
static double median(double *v, int n) { qsort(v, (size_t)n, sizeof(double), cmp_double); return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]); }

static void die(const char *what) { fprintf(stderr, "%s: %s\n", what, cism_last_error()); exit(1); }

static int parse_list(const char *s, int *out, int max, int tiers) {
    int n = 0;
    char tmp[256], *tok;
    snprintf(tmp, sizeof(tmp), "%s", s);
    for (tok = strtok(tmp, ","); tok && n < max; tok = strtok(NULL, ",")) {
        if (tiers) {
            int t, found = 0;
            for (t = CISM_TIER_SCALAR; cism_kernel_tier_name(t); t++)
                if (strcmp(tok, cism_kernel_tier_name(t)) == 0) { out[n++] = t; found = 1; }
            if (!found && strcmp(tok, "all") == 0)
                for (t = CISM_TIER_SCALAR; cism_kernel_tier_name(t) && n < max; t++)
                    if (cism_kernel_tier_supported(t)) out[n++] = t;
            if (!found && strcmp(tok, "all") != 0) { fprintf(stderr, "unknown tier %s\n", tok); exit(2); }
        } else {
            out[n++] = atoi(tok);
        }
    }
    return n;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *preset_name = "smollm2-135m", *dtype_name = "f16";
    char tmp_path[512] = "";
    int tiers[8], threads[8], loads[2] = {1, 0}, n_tiers = 0, n_threads, n_loads = 1, pp = 512, tg = 64, reps = 3, membw = 0, keep = 0;
    int li;
    int i, j, r, n_cfg;
    int64_t vocab, dim, layers, heads, kv_heads, hd, ffn, wdtype;
    double weight_bytes, kv_per_pos;
    cism_model *m = NULL, *models[2] = {NULL, NULL};
    cism_params *prm = NULL;
    config cfg[64];
    int32_t *tokens;
    tiers[0] = CISM_TIER_AUTO;
    n_threads = parse_list("1,2", threads, 8, 0);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (strcmp(a, name) == 0 && v && (i++, 1))
        if (ARG("--model")) model_path = v;
        else if (ARG("--preset")) preset_name = v;
        else if (ARG("--dtype")) dtype_name = v;
        else if (ARG("--tiers")) n_tiers = parse_list(v, tiers, 8, 1);
        else if (ARG("--threads")) n_threads = parse_list(v, threads, 8, 0);
        else if (ARG("--load")) { /* mmap: map the file (default); copy: read it into (huge-page) memory */
            n_loads = 0;
            if (strstr(v, "mmap")) loads[n_loads++] = 1;
            if (strstr(v, "copy")) loads[n_loads++] = 0;
            if (!n_loads) { fprintf(stderr, "--load takes mmap, copy or mmap,copy\n"); return 2; }
        }
        else if (ARG("--pp")) pp = atoi(v);
        else if (ARG("--tg")) tg = atoi(v);
        else if (ARG("--reps")) reps = atoi(v);
        else if (strcmp(a, "--membw") == 0) membw = 1;
        else if (strcmp(a, "--keep") == 0) keep = 1;
        else {
            fprintf(stderr, "usage: %s [--model FILE | --preset stories260k|smollm2-135m|qwen3-0.6b --dtype f32|f16|bf16]\n"
                            "          [--tiers all|scalar,avx2,...] [--threads 1,2] [--load mmap,copy] [--pp 512] [--tg 64] [--reps 3]\n"
                            "          [--membw] [--keep]\n", argv[0]);
            return 2;
        }
#undef ARG
    }
    if (n_tiers == 0) n_tiers = 1;
    if (reps < 1 || reps > 64 || pp < 0 || tg < 0) { fprintf(stderr, "bad --reps/--pp/--tg\n"); return 2; }
    printf("%s\n%s\n", cism_build_info(), cism_system_info());
    if (!model_path) {
        const preset *p = NULL;
        int dt = strcmp(dtype_name, "f32") == 0 ? CISM_DTYPE_F32 : strcmp(dtype_name, "bf16") == 0 ? CISM_DTYPE_BF16 : CISM_DTYPE_F16;
        for (i = 0; i < (int)(sizeof(g_presets) / sizeof(g_presets[0])); i++)
            if (strcmp(g_presets[i].name, preset_name) == 0) p = &g_presets[i];
        if (!p) { fprintf(stderr, "unknown preset %s\n", preset_name); return 2; }
#if defined(_WIN32)
        snprintf(tmp_path, sizeof(tmp_path), "cism-bench-%s-%s.cism", p->name, cism_dtype_name(dt));
#else
        snprintf(tmp_path, sizeof(tmp_path), "/tmp/cism-bench-%s-%s-%d.cism", p->name, cism_dtype_name(dt), (int)getpid());
#endif
        printf("writing %s shape with random %s weights to %s\n", p->name, cism_dtype_name(dt), tmp_path);
        if (write_model(tmp_path, p, dt) != 0) return 1;
        model_path = tmp_path;
    }
    if (cism_params_create(&prm) != CISM_OK) die("params");
    for (li = 0; li < n_loads; li++) {
        cism_params_set_int(prm, CISM_PARAM_USE_MMAP, loads[li]);
        if (cism_model_load(model_path, prm, &models[li]) != CISM_OK) die("load");
    }
    m = models[0];
    cism_model_get_info(m, CISM_INFO_VOCAB_SIZE, &vocab);
    cism_model_get_info(m, CISM_INFO_DIM, &dim);
    cism_model_get_info(m, CISM_INFO_N_LAYERS, &layers);
    cism_model_get_info(m, CISM_INFO_N_HEADS, &heads);
    cism_model_get_info(m, CISM_INFO_N_KV_HEADS, &kv_heads);
    cism_model_get_info(m, CISM_INFO_HEAD_DIM, &hd);
    cism_model_get_info(m, CISM_INFO_FFN_DIM, &ffn);
    cism_model_get_info(m, CISM_INFO_WEIGHT_DTYPE, &wdtype);
    {   /* the file's tensor bytes (any dtypes; norms are negligible); an untied model reads one
           row of its embedding table, whose share of the bytes is taken as its share of the weights */
        int64_t all = 0, tied = 1, params = 1;
        cism_model_get_info(m, CISM_INFO_WEIGHT_BYTES, &all);
        cism_model_get_info(m, CISM_INFO_TIED_EMBEDDINGS, &tied);
        cism_model_get_info(m, CISM_INFO_N_PARAMS, &params);
        weight_bytes = (double)all;
        if (!tied) weight_bytes -= (double)all * (double)(vocab * dim) / (double)params;
    }
    kv_per_pos = (double)(2 * layers * kv_heads * hd * 2); /* f16 KV cache (the default) */
    printf("model: %s, %s weights, %.1f MB of matrices read per decoded token\n", model_path,
           cism_dtype_name((cism_dtype)wdtype), weight_bytes / 1e6);

    n_cfg = 0;
    for (li = 0; li < n_loads; li++)
    for (i = 0; i < n_tiers; i++)
        for (j = 0; j < n_threads; j++) {
            config *c = &cfg[n_cfg];
            if (!cism_kernel_tier_supported(tiers[i])) { printf("tier %s: not available here, skipped\n", cism_kernel_tier_name(tiers[i])); break; }
            c->tier = tiers[i];
            c->threads = threads[j];
            c->load = li;
            cism_params_set_int(prm, CISM_PARAM_N_THREADS, threads[j]);
            cism_params_set_int(prm, CISM_PARAM_KERNEL_TIER, tiers[i]);
            cism_params_set_int(prm, CISM_PARAM_N_CTX, pp + tg + 1);
            if (cism_session_create(models[li], prm, &c->s) != CISM_OK) die("session");
            c->pp = (double *)calloc((size_t)reps, sizeof(double));
            c->tg = (double *)calloc((size_t)reps, sizeof(double));
            c->ppc = (double *)calloc((size_t)reps, sizeof(double));
            c->tgc = (double *)calloc((size_t)reps, sizeof(double));
            n_cfg++;
        }
    tokens = (int32_t *)malloc((size_t)(pp + tg + 1) * sizeof(int32_t));
    for (i = 0; i < pp + tg + 1; i++) tokens[i] = (int32_t)((1 + 7919 * (int64_t)i) % vocab);
    /* warm-up: page in the weights and wake each pool */
    for (i = 0; i < n_cfg; i++) {
        cism_session_eval(cfg[i].s, tokens, pp > 0 && pp < 16 ? pp : 16);
        cism_session_reset(cfg[i].s);
    }
    for (r = 0; r < reps; r++)
        for (i = 0; i < n_cfg; i++) {
            double t0, c0;
            int k;
            if (pp > 0) {
                cism_session_reset(cfg[i].s);
                t0 = now();
                c0 = cpu_now();
                if (cism_session_eval(cfg[i].s, tokens, pp) != CISM_OK) die("eval");
                cfg[i].pp[r] = pp / (now() - t0);
                cfg[i].ppc[r] = pp / (cpu_now() - c0);
            }
            if (tg > 0) {
                cism_session_reset(cfg[i].s);
                t0 = now();
                c0 = cpu_now();
                for (k = 0; k < tg; k++)
                    if (cism_session_eval(cfg[i].s, &tokens[k], 1) != CISM_OK) die("eval");
                cfg[i].tg[r] = tg / (now() - t0);
                cfg[i].tgc[r] = tg / (cpu_now() - c0);
            }
        }
    {
        double bw[8] = {0};
        if (membw)
            for (j = 0; j < n_threads; j++) {
                if (cism_measure_read_bandwidth(threads[j], 0, &bw[j]) != CISM_OK) die("bandwidth");
                printf("read bandwidth, %d thread%s: %.1f GB/s\n", threads[j], threads[j] > 1 ? "s" : "", bw[j] / 1e9);
            }
        printf("\n%-4s %-8s %3s | %9s %9s | %9s %8s %8s %7s %6s | %6s | %9s %9s\n", "load", "tier", "thr", "pp t/s", "(min-max)", "tg t/s",
               "(min-max)", "ms/tok", "GB/s", "of BW", "pp/tg", "pp t/cpus", "tg t/cpus");
        for (i = 0; i < n_cfg; i++) {
            double ppmin = 1e300, ppmax = 0, tgmin = 1e300, tgmax = 0, ppm, tgm, bytes, share = 0;
            for (r = 0; r < reps; r++) {
                if (cfg[i].pp[r] < ppmin) ppmin = cfg[i].pp[r];
                if (cfg[i].pp[r] > ppmax) ppmax = cfg[i].pp[r];
                if (cfg[i].tg[r] < tgmin) tgmin = cfg[i].tg[r];
                if (cfg[i].tg[r] > tgmax) tgmax = cfg[i].tg[r];
            }
            ppm = median(cfg[i].pp, reps);
            tgm = median(cfg[i].tg, reps);
            bytes = weight_bytes + kv_per_pos * (tg / 2.0);
            for (j = 0; j < n_threads; j++)
                if (threads[j] == cfg[i].threads && bw[j] > 0) share = bytes * tgm / bw[j];
            printf("%-4s %-8s %3d | %9.1f %4.0f-%-4.0f | %9.1f %3.0f-%-4.0f %8.2f %7.1f %5.0f%% | %6.1f | %9.1f %9.1f\n",
                   loads[cfg[i].load] ? "mmap" : "copy", cism_kernel_tier_name(cfg[i].tier), cfg[i].threads, ppm, ppmin, ppmax, tgm, tgmin, tgmax,
                   tgm > 0 ? 1000.0 / tgm : 0.0, bytes * tgm / 1e9, share * 100.0, tgm > 0 ? ppm / tgm : 0.0,
                   median(cfg[i].ppc, reps), median(cfg[i].tgc, reps));
        }
    }
    for (i = 0; i < n_cfg; i++) { cism_session_free(cfg[i].s); free(cfg[i].pp); free(cfg[i].tg); free(cfg[i].ppc); free(cfg[i].tgc); }
    for (li = 0; li < n_loads; li++) cism_model_free(models[li]);
    cism_params_free(prm);
    free(tokens);
    if (tmp_path[0] && !keep) remove(tmp_path);
    else if (tmp_path[0]) printf("kept %s\n", tmp_path);
    return 0;
}
