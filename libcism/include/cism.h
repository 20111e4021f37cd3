/*
 * cism.h - the public C API of libcism, an embeddable CPU engine for small
 * decoder language models (Llama 2/3, SmolLM2, TinyLlama, Mistral, Qwen2/2.5/3,
 * llama2.c checkpoints).
 *
 * This is the only public header. It is C99, compiles as C++, and includes
 * nothing beyond <stddef.h> and <stdint.h>.
 *
 * Conventions
 *   - Every function that can fail returns a cism_status (0 = CISM_OK) and
 *     writes results through out-parameters. On failure the out-parameters are
 *     left untouched (handles: set to NULL) and cism_last_error() returns a
 *     readable message for the calling thread.
 *   - Handles are opaque. Every create or load function has exactly one free
 *     function; freeing NULL does nothing.
 *   - No struct crosses the ABI: options are set on opaque parameter objects
 *     through setters keyed by pinned enum values. Enum values never change;
 *     new ones are only appended.
 *   - Text is UTF-8, passed as pointer + length. Strings returned by the
 *     library are either static or borrowed from a handle (valid until the
 *     handle is freed), as each function says.
 *   - The library never prints. Install a log callback to see its messages.
 *
 * Thread safety
 *   - cism_model: immutable after load and safe to share between threads.
 *     It is reference counted: sessions keep their model alive, so
 *     cism_model_free may be called while sessions still exist.
 *   - cism_session, cism_sampler, cism_params, cism_batch: one thread at a time
 *     per handle; a batch being evaluated also holds its member sessions.
 *     The only exception is cism_session_cancel, callable from any thread.
 *   - cism_set_log_callback: not thread-safe; call it before other calls.
 */
#ifndef CISM_H
#define CISM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- export macro -------------------------------------------------------- */
#if defined(CISM_STATIC)
#  define CISM_API
#elif defined(_WIN32)
#  if defined(CISM_BUILDING_LIBRARY)
#    define CISM_API __declspec(dllexport)
#  else
#    define CISM_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) || defined(__clang__)
#  define CISM_API __attribute__((visibility("default")))
#else
#  define CISM_API
#endif

/* ---- version ------------------------------------------------------------- */
#define CISM_VERSION_MAJOR 0
#define CISM_VERSION_MINOR 1
#define CISM_VERSION_PATCH 0
#define CISM_VERSION_NUMBER \
    (CISM_VERSION_MAJOR * 10000 + CISM_VERSION_MINOR * 100 + CISM_VERSION_PATCH)
/* Bumped whenever a binary-incompatible change is made; bindings check it. */
#define CISM_ABI_VERSION 1

CISM_API int32_t     cism_version_number(void);   /* CISM_VERSION_NUMBER of the built library */
CISM_API const char *cism_version_string(void);   /* "0.1.0"; static */
CISM_API int32_t     cism_abi_version(void);      /* CISM_ABI_VERSION of the built library */
/* Compiler, build type and compiled-in kernel tiers; static string. */
CISM_API const char *cism_build_info(void);
/* CPU name, features seen, kernel tier chosen, core count; static string. */
CISM_API const char *cism_system_info(void);

/* ---- status and errors --------------------------------------------------- */
typedef int32_t cism_status;
enum {
    CISM_OK                 = 0,
    CISM_ERR_INVALID_ARG    = 1,  /* NULL handle, bad enum value, value out of range */
    CISM_ERR_IO             = 2,  /* file cannot be opened, read, mapped or written  */
    CISM_ERR_FORMAT         = 3,  /* file is not a valid .cism file (corrupt, truncated) */
    CISM_ERR_UNSUPPORTED    = 4,  /* valid but unsupported: architecture, option, version */
    CISM_ERR_OUT_OF_MEMORY  = 5,
    CISM_ERR_CONTEXT_FULL   = 6,  /* evaluating would exceed the session's context length */
    CISM_ERR_TOKEN_RANGE    = 7,  /* token id < 0 or >= vocab size */
    CISM_ERR_BUFFER_SMALL   = 8,  /* caller buffer too small; the needed size was reported */
    CISM_ERR_CANCELLED      = 9,  /* cism_session_cancel was called, or a callback asked to stop */
    CISM_ERR_STATE          = 10, /* call not valid in the handle's current state */
    CISM_ERR_EXISTS         = 11, /* output file exists and overwriting was not allowed */
    CISM_ERR_INTERNAL       = 12, /* a bug in libcism; please report it */
    CISM_ERR_PERMISSION     = 13  /* the OS refused: memory-lock limit, missing privilege */
};
/* Static, never NULL: "ok", "invalid argument", ... */
CISM_API const char *cism_status_str(cism_status status);
/* The message of the last failed call made by this thread ("" if none).
   Valid until the next cism_ call on this thread. */
CISM_API const char *cism_last_error(void);

/* ---- logging ------------------------------------------------------------- */
enum { CISM_LOG_DEBUG = 0, CISM_LOG_INFO = 1, CISM_LOG_WARN = 2, CISM_LOG_ERROR = 3 };
/* Receives a finished, NUL-terminated message (not a format string). May be
   called from any thread, including the library's worker threads. */
typedef void (*cism_log_callback)(void *user_data, int32_t level, const char *message);
/* callback NULL = silent (the default). Not thread-safe. */
CISM_API void cism_set_log_callback(cism_log_callback callback, void *user_data, int32_t min_level);

/* ---- parameters ---------------------------------------------------------- */
/* One parameter object is used both to load a model and to create a session;
   each reads the keys that concern it. */
typedef struct cism_params cism_params;
typedef int32_t cism_param;
enum {
    CISM_PARAM_N_THREADS  = 0,  /* int, >= 1; 0 = default (cism_default_n_threads) */
    CISM_PARAM_N_CTX      = 1,  /* int, session context length in tokens; 0 = min(model, 4096) */
    CISM_PARAM_KV_TYPE    = 2,  /* int, CISM_DTYPE_F32, CISM_DTYPE_F16 (default), or a quantized
                                   cache: CISM_DTYPE_Q8 (8.5 bits/element) or CISM_DTYPE_Q4A (5);
                                   the quantized types need a head_dim that is a multiple of 32
                                   (docs/KV_CACHE.md) */
    CISM_PARAM_USE_MMAP   = 3,  /* int bool, default 1; 0 reads the file into memory */
    CISM_PARAM_N_BATCH    = 4,  /* int, tokens evaluated per internal step; default 256 */
    CISM_PARAM_LOGITS_ALL = 5,  /* int bool, default 0: keep logits of every evaluated position */
    CISM_PARAM_CHECK_WEIGHTS = 6, /* int bool, default 0: scan every weight for NaN/Inf at load */
    CISM_PARAM_ACT_QUANT  = 7,  /* int bool, default 1: quantize the inputs of packed (q8, q4, ...)
                                   weight matrices to int8 blocks and use integer dot products;
                                   0 = float activations (each weight block decoded to f32).
                                   No effect on f32/f16/bf16 weights. */
    CISM_PARAM_KERNEL_TIER = 8, /* int, a cism_kernel_tier; default CISM_TIER_AUTO */
    CISM_PARAM_ACT_STATS  = 9,  /* int 0..4096, default 0. Experimental (quantization calibration):
                                   1 = the session sums the squares of every weight matrix's inputs
                                   per column (cism_session_act_stats); G >= 2 = also the G x G
                                   blocks along the diagonal of their Gram matrix (cism_session_act_gram) */
    CISM_PARAM_ACT_OUTLIERS = 10, /* int bool, default 1: with int8 activations, up to 10 channels of a
                                   row that dominate their blocks of 32 are left out of the int8
                                   blocks and their products computed exactly in float
                                   (docs/QUANTIZATION.md, "Outlier channels") */
    CISM_PARAM_VERIFY_CHECKSUMS = 11, /* int bool, default 0: at load, compare every tensor's data with
                                   its checksum (format version 3; a read of the whole file). The
                                   header, metadata and tensor directory are checked on every load.
                                   Files of versions 1 and 2 have no checksums: they load (a warning
                                   is logged) as without it. docs/FORMAT.md, "Integrity" */
    CISM_PARAM_KV_ROTATE = 12,  /* int -1, 0 or 1, default -1: the Walsh-Hadamard rotation of each
                                   head's K, V and query around a quantized KV cache (docs/KV_CACHE.md).
                                   -1 = the KV type's default (on for q8 and q4a), 0 = off, 1 = on.
                                   f16/f32 caches are never rotated (1 is refused there; with
                                   CISM_PARAM_KV_TYPE_V, "quantized" means K or V is) */
    CISM_PARAM_KV_TYPE_V = 13   /* int, default -1 = the same as CISM_PARAM_KV_TYPE: the V cache's
                                   type (f32, f16, q8 or q4a) when it should differ from K's, e.g.
                                   K q8 + V q4a (docs/KV_CACHE.md). CISM_PARAM_KV_TYPE then sets
                                   the K cache (and short-convolution caches) only */
};
CISM_API cism_status cism_params_create(cism_params **out);
CISM_API void        cism_params_free(cism_params *params);
CISM_API cism_status cism_params_set_int(cism_params *params, cism_param key, int64_t value);
CISM_API cism_status cism_params_get_int(const cism_params *params, cism_param key, int64_t *value);

/* ---- kernel tiers -------------------------------------------------------- */
/* The instruction-set tier the compute kernels use. CISM_TIER_AUTO picks the
   best tier compiled in that this CPU runs, once per process; the environment
   variable CISM_ISA (scalar, avx2, avx512, avx512_amx, neon, neon_dotprod,
   neon_i8mm) forces a lower one (a tier the CPU lacks is refused with a logged warning).
   A session created with an explicit tier the CPU cannot run fails with
   CISM_ERR_UNSUPPORTED. Every tier is tested against the scalar one:
   docs/KERNELS.md states the bounds. */
typedef int32_t cism_kernel_tier;
enum {
    CISM_TIER_AUTO         = 0,
    CISM_TIER_SCALAR       = 1,  /* portable C, the reference */
    CISM_TIER_AVX2         = 2,  /* x86-64 AVX2 + FMA + F16C */
    CISM_TIER_AVX512       = 3,  /* x86-64 AVX-512 F/BW/VL/DQ + VNNI */
    CISM_TIER_NEON         = 4,  /* ARM64 Advanced SIMD */
    CISM_TIER_NEON_DOTPROD = 5,  /* ARM64 + SDOT/UDOT (ARMv8.2 dotprod) */
    CISM_TIER_NEON_I8MM    = 6,  /* ARM64 + dotprod + SMMLA (i8mm) */
    CISM_TIER_AVX512_AMX   = 7   /* avx512 + AMX-INT8 tiles for prefill (Linux) */
};
/* Static name ("scalar", ...) or NULL for an unknown value; CISM_TIER_AUTO
   gives the name of the tier AUTO resolves to. */
CISM_API const char *cism_kernel_tier_name(cism_kernel_tier tier);
/* 1 if the tier is compiled in and this CPU runs it (AUTO: always 1), else 0. */
CISM_API int32_t     cism_kernel_tier_supported(cism_kernel_tier tier);

/* Measures how many bytes per second n_threads threads (1..256) read from
   memory: a buffer of buffer_bytes (0 = 512 MiB; choose several times the
   last-level cache) is written once, then read in parallel slices; the best
   of four timed passes is returned. Takes about a second. The ceiling that
   batch-1 decode speed is compared against (docs/PERFORMANCE.md). */
CISM_API cism_status cism_measure_read_bandwidth(int32_t n_threads, int64_t buffer_bytes, double *bytes_per_second);

/* Measures the int8 multiply-adds per second one core does with the
   dot-product instructions of a kernel tier's int8 kernels (AVX-512 VNNI
   vpdpbusd, AVX2 vpmaddubsw + vpmaddwd, NEON smull + sadalp, SDOT, SMMLA,
   AMX TDPBSSD;
   CISM_TIER_AUTO: the tier in use), on register operands, on the calling
   thread: the ceiling prefill is compared against (docs/PERFORMANCE.md).
   Takes about 0.2 s. CISM_ERR_UNSUPPORTED for a tier this CPU cannot run. */
CISM_API cism_status cism_measure_int8_mac_peak(cism_kernel_tier tier, double *macs_per_second);

/* ---- data types (tensor and KV cache element types) ---------------------- */
typedef int32_t cism_dtype;
enum {
    CISM_DTYPE_F32  = 0,
    CISM_DTYPE_F16  = 1,
    CISM_DTYPE_BF16 = 2,
    /* Packed weight formats (docs/QUANTIZATION.md), for weight matrices only.
       A row is whole blocks; a last partial block is padded with zeros. */
    CISM_DTYPE_Q8   = 3,  /* blocks of 32: fp16 scale + 32 int8 (8.5 bits/weight) */
    CISM_DTYPE_Q4   = 4,  /* blocks of 32: fp16 scale + 32 int4 levels -8..7 (4.5 bits/weight) */
    CISM_DTYPE_FP4  = 5,  /* blocks of 16: FP8 E4M3 scale + 16 FP4 E2M1 (4.5 bits/weight) */
    CISM_DTYPE_NL4  = 6,  /* blocks of 32: fp16 scale + 32 codes of a 16-level non-uniform codebook (4.5) */
    CISM_DTYPE_Q4S  = 7,  /* blocks of 16: FP8 E4M3 scale + 16 int4 levels -8..7 (4.5 bits/weight) */
    /* The same values as q8 / q4s with 16 rows interleaved (docs/QUANTIZATION.md):
       for matrices whose row count is a multiple of 16; same bytes per row. */
    CISM_DTYPE_Q8X16  = 8,
    CISM_DTYPE_Q4SX16 = 9,
    /* blocks of 32: fp16 scale + fp16 minimum + 32 4-bit codes (5.0 bits/weight);
       weight = scale * code + minimum; byte for byte GGUF's Q4_1 */
    CISM_DTYPE_Q4A    = 10,
    /* blocks of 32: fp16 scale + 32 6-bit codes, weight = scale * (code - 32)
       (6.5 bits/weight; low nibbles, then a 2-bit plane) */
    CISM_DTYPE_Q6     = 11,
    /* blocks of 32: fp16 scale + 32 5-bit codes, weight = scale * (code - 16)
       (5.5 bits/weight); byte for byte GGUF's Q5_0 */
    CISM_DTYPE_Q5     = 12,
    /* The values of q4a with 16 rows interleaved (docs/QUANTIZATION.md), like
       q8x16 / q4sx16: for matrices whose row count is a multiple of 16 */
    CISM_DTYPE_Q4AX16 = 13,
    /* The values of q6 / q5 with 16 rows interleaved, likewise */
    CISM_DTYPE_Q6X16  = 14,
    CISM_DTYPE_Q5X16  = 15,
    /* blocks of 32: fp16 scale + 32 3-bit codes, weight = scale * (code - 4)
       (3.5 bits/weight; the high bits' plane, then the low 2 bits' plane) */
    CISM_DTYPE_Q3     = 16,
    /* The values of q3 with 16 rows interleaved, like q6x16 / q5x16 */
    CISM_DTYPE_Q3X16  = 17,
    /* blocks of 32: fp16 scale + 32 2-bit codes, weight = scale * (code - 2)
       (2.5 bits/weight; one 2-bit plane, as q3's) */
    CISM_DTYPE_Q2     = 18,
    /* The values of q2 with 16 rows interleaved, like q3x16 */
    CISM_DTYPE_Q2X16  = 19
};
/* Static name ("f32", "q8", ...) or NULL for an unknown type. */
CISM_API const char *cism_dtype_name(cism_dtype dtype);
/* Elements per block: 1 for f32/f16/bf16, 0 for an unknown dtype. */
CISM_API int32_t     cism_dtype_block_size(cism_dtype dtype);
/* Bytes of one row of `cols` elements (scales and padding included), 0 if the
   dtype is unknown or cols < 1. Bits per weight = 8 * row_bytes / cols. */
CISM_API int64_t     cism_dtype_row_bytes(cism_dtype dtype, int64_t cols);
/* Encodes n_rows rows of cols f32 values (row-major) into dtype's packed rows
   at dst (n_rows * cism_dtype_row_bytes bytes, written to *dst_size; when
   dst_capacity is smaller, nothing is written and CISM_ERR_BUFFER_SMALL is
   returned). importance (may be NULL) holds cols non-negative weights of the
   squared error per column (e.g. mean squared activations) for the scale
   search of the 4-bit formats, q4a, q6 and q5. Non-finite input is refused. n_threads 0 = 1.
   The same input always gives the same bytes, whatever n_threads.
   The interleaved dtypes (q8x16, q4sx16, q4ax16, q6x16, q5x16) need n_rows to be a multiple of 16
   (CISM_ERR_INVALID_ARG otherwise), here and in cism_dequantize. */
CISM_API cism_status cism_quantize(cism_dtype dtype, const float *src, int64_t n_rows, int64_t cols,
                                   const float *importance, void *dst, int64_t dst_capacity,
                                   int64_t *dst_size, int32_t n_threads);
/* Experimental (quantization calibration; docs/QUANTIZATION.md). As
   cism_quantize, with rounding that compensates each weight's rounding error
   on the following columns (GPTQ) from the second moments of the matrix's
   inputs: gram holds the blocks along the diagonal of sum(x x^T) as
   cism_session_act_gram returns them (block k covers columns [kG, kG + G),
   G x G values row-major; padded with zeros past cols; any positive scale),
   G = gram_block a multiple of the format's block, at most 4096. Errors are
   compensated within each block of G columns, visited in decreasing order of
   the Gram diagonal (act order); the scale search weighs each
   column by the Gram diagonal; the 4-bit formats with levels, q6 and q5
   (and their interleaved dtypes) are compensated. Formats without such a
   scale search (q8, q4a, floats)
   and gram NULL or all zero give cism_quantize's plain rounding. Refuses
   non-finite or negative-diagonal statistics. The same input always gives the
   same bytes, whatever n_threads. */
CISM_API cism_status cism_quantize_gram(cism_dtype dtype, const float *src, int64_t n_rows, int64_t cols,
                                        const double *gram, int64_t gram_block, void *dst, int64_t dst_capacity,
                                        int64_t *dst_size, int32_t n_threads);
/* Decodes n_rows packed rows of dtype (cism_dtype_row_bytes(dtype, cols) bytes
   apart) into n_rows * cols f32 values. */
CISM_API cism_status cism_dequantize(cism_dtype dtype, const void *src, int64_t n_rows, int64_t cols, float *dst);

/* ---- models -------------------------------------------------------------- */
typedef struct cism_model cism_model;

/* Loads and validates a .cism file. params may be NULL (defaults). The file is
   memory-mapped read-only unless CISM_PARAM_USE_MMAP is 0; weights are used in
   place, never copied. Reads CISM_PARAM_USE_MMAP, CISM_PARAM_CHECK_WEIGHTS and
   CISM_PARAM_VERIFY_CHECKSUMS. A damaged or edited header, metadata or tensor
   directory of a version 3 file is refused (CISM_ERR_FORMAT) on every load. */
CISM_API cism_status cism_model_load(const char *path, const cism_params *params, cism_model **out);
/* Releases the caller's reference; the model is destroyed once no session uses it. */
CISM_API void        cism_model_free(cism_model *model);

typedef int32_t cism_model_info;
enum {
    CISM_INFO_VOCAB_SIZE    = 0,
    CISM_INFO_DIM           = 1,  /* hidden size */
    CISM_INFO_N_LAYERS      = 2,
    CISM_INFO_N_HEADS       = 3,
    CISM_INFO_N_KV_HEADS    = 4,
    CISM_INFO_HEAD_DIM      = 5,
    CISM_INFO_FFN_DIM       = 6,
    CISM_INFO_CONTEXT_LEN   = 7,  /* maximum positions the model was trained for */
    CISM_INFO_BOS_ID        = 8,  /* -1 if none */
    CISM_INFO_EOS_ID        = 9,  /* first end-of-sequence id, -1 if none */
    CISM_INFO_N_EOS_IDS     = 10, /* number of end-of-generation ids (see cism_model_eos_ids) */
    CISM_INFO_PAD_ID        = 11, /* -1 if none */
    CISM_INFO_N_PARAMS      = 12, /* parameters in weight tensors */
    CISM_INFO_WEIGHT_BYTES  = 13, /* bytes of tensor data */
    CISM_INFO_FILE_BYTES    = 14,
    CISM_INFO_TIED_EMBEDDINGS = 15,
    CISM_INFO_WEIGHT_DTYPE  = 16  /* dtype of the largest matrices */
};
CISM_API cism_status cism_model_get_info(const cism_model *model, cism_model_info key, int64_t *value);
/* "llama", "mistral", "qwen2", "qwen3"; borrowed from the model. */
CISM_API const char *cism_model_architecture(const cism_model *model);
/* Copies up to capacity end-of-generation ids; *n_ids receives the total. */
CISM_API cism_status cism_model_eos_ids(const cism_model *model, int32_t *ids, int32_t capacity, int32_t *n_ids);

/* Metadata key/values stored in the file (docs/FORMAT.md lists the keys). */
typedef int32_t cism_meta_type;
enum {
    CISM_META_NONE   = 0,  /* key not present */
    CISM_META_INT    = 1,  /* int64 */
    CISM_META_FLOAT  = 2,  /* float64 */
    CISM_META_STRING = 3,  /* UTF-8 bytes */
    CISM_META_BYTES  = 4,  /* opaque bytes */
    CISM_META_INT_ARRAY    = 5,  /* int64[] */
    CISM_META_FLOAT_ARRAY  = 6,  /* float32[] */
    CISM_META_STRING_ARRAY = 7   /* (uint32 length, bytes)[] */
};
CISM_API int32_t     cism_model_meta_count(const cism_model *model);
/* Key of entry i (0 <= i < count), borrowed; NULL when out of range. */
CISM_API const char *cism_model_meta_key(const cism_model *model, int32_t index);
CISM_API cism_meta_type cism_model_meta_type(const cism_model *model, const char *key);
CISM_API cism_status cism_model_meta_int(const cism_model *model, const char *key, int64_t *value);
CISM_API cism_status cism_model_meta_float(const cism_model *model, const char *key, double *value);
/* STRING and BYTES values: pointer borrowed from the model (not NUL-terminated). */
CISM_API cism_status cism_model_meta_bytes(const cism_model *model, const char *key,
                                           const void **data, int64_t *size);
/* Array values: *count elements stored at *data (borrowed, *size bytes) in
   the file's little-endian layout: INT_ARRAY int64[], FLOAT_ARRAY float32[],
   STRING_ARRAY (uint32 length, bytes)[] (docs/FORMAT.md). */
CISM_API cism_status cism_model_meta_array(const cism_model *model, const char *key,
                                           const void **data, int64_t *count, int64_t *size);

/* ---- sessions (one conversation: KV cache, scratch, logits) -------------- */
typedef struct cism_session cism_session;

/* params may be NULL. Reads N_THREADS, N_CTX, KV_TYPE, KV_TYPE_V, KV_ROTATE, N_BATCH, LOGITS_ALL. */
CISM_API cism_status cism_session_create(cism_model *model, const cism_params *params, cism_session **out);
CISM_API void        cism_session_free(cism_session *session);
/* Forgets every evaluated token (the KV cache is emptied). */
CISM_API cism_status cism_session_reset(cism_session *session);
/* Keeps the first n_keep evaluated tokens and forgets the rest (0 <= n_keep <= n_past). */
CISM_API cism_status cism_session_rewind(cism_session *session, int32_t n_keep);
/* Evaluates n_tokens tokens after the ones already evaluated (prefill when
   n_tokens > 1, a decode step when 1). On any error nothing is changed:
   the session stays at its previous position; except CISM_ERR_CANCELLED,
   after which the whole internal steps (N_BATCH tokens) completed before the
   stop are kept, with the logits of the last kept token, as if the eval had
   been given only those tokens. */
CISM_API cism_status cism_session_eval(cism_session *session, const int32_t *tokens, int32_t n_tokens);
/* Logits of row `index` of the last cism_session_eval call: index -1 (or the
   last row) is always available; other rows only with CISM_PARAM_LOGITS_ALL.
   The pointer is borrowed until the next eval/reset/rewind/free. */
CISM_API cism_status cism_session_logits(cism_session *session, int32_t index, const float **logits, int32_t *n_vocab);
CISM_API int32_t     cism_session_n_past(const cism_session *session);   /* tokens in the KV cache */
CISM_API int32_t     cism_session_n_ctx(const cism_session *session);    /* its capacity */
/* Asks a running eval/generate on this session to stop soon with
   CISM_ERR_CANCELLED (tokens completed before the stop are kept).
   Thread-safe. The request is cleared when the next eval/generate starts. */
CISM_API void        cism_session_cancel(cism_session *session);
/* Prefill progress: callback (NULL = none) is called by cism_session_eval and
   cism_generate's prompt evaluation after each internal step (N_BATCH tokens)
   that completed, on the evaluating thread, with the tokens of that eval done
   so far and its total (the last call has n_done == n_total); evals of one
   step are reported too. A non-zero return stops the eval before its next
   step, as cism_session_cancel does: CISM_ERR_CANCELLED, the completed steps
   kept with the logits of the last kept token (a stop after the last step
   changes nothing: the eval succeeded). Not called for batches. */
typedef int32_t (*cism_progress_callback)(void *user_data, int32_t n_done, int32_t n_total);
CISM_API cism_status cism_session_set_progress_callback(cism_session *session, cism_progress_callback callback,
                                                        void *user_data);
/* Switches CISM_PARAM_LOGITS_ALL for the session's next evals (also inside
   a cism_batch): on, they keep every row's logits; off, the last row's. For
   callers that need every row of some evals only (a speculative verify in a
   server's batch) without holding a prompt-sized logits buffer for the
   others. The current rows stay readable until the next eval. */
CISM_API cism_status cism_session_set_logits_all(cism_session *session, int32_t on);
/* Experimental (quantization calibration; docs/QUANTIZATION.md). For a session
   created with CISM_PARAM_ACT_STATS: the activation statistics of weight
   matrix `tensor` (a matrix name of the file: "blk.3.ffn_down", "output", or
   "token_embd" of a model whose output head is the tied embedding), summed
   over every input row the matrix has been multiplied with since the session
   was created (reset and rewind keep them): sums[c] = sum of x[c]^2 over those
   rows, c < cols. *n_cols gets cols, *n_rows the number of rows (either may be
   NULL). With capacity < cols nothing is written to sums and the status is
   CISM_ERR_BUFFER_SMALL. Matrices with the same input (Q/K/V, gate/up) report
   the same sums. CISM_ERR_STATE without CISM_PARAM_ACT_STATS. */
CISM_API cism_status cism_session_act_stats(const cism_session *session, const char *tensor, double *sums,
                                            int64_t capacity, int64_t *n_cols, int64_t *n_rows);
/* Experimental. With CISM_PARAM_ACT_STATS = G >= 2: the blocks along the
   diagonal of the Gram matrix of `tensor`'s inputs (sum over the same rows of
   x x^T): block k covers columns [kG, kG + G) and is stored as G x G values,
   row-major (blocks[k*G*G + a*G + b] = sum of x[kG+a] * x[kG+b]); a last
   narrower block is padded with zeros. *n_values gets ceil(cols/G) * G * G;
   otherwise as cism_session_act_stats (CISM_ERR_STATE when G < 2). */
CISM_API cism_status cism_session_act_gram(const cism_session *session, const char *tensor, double *blocks,
                                           int64_t capacity, int64_t *n_values, int64_t *n_rows);
/* Experimental (KV cache calibration; docs/KV_CACHE.md). With
   CISM_PARAM_ACT_STATS: the sum of the keys of attention layer `layer` after
   RoPE (and the k norm), over every token evaluated since the session was
   created: sums[h * head_dim + i], n_kv_heads * head_dim values (*n_values),
   over *n_rows tokens. Their mean, stored in a model file as
   blk.<layer>.attn_k_offset, is subtracted from every key a quantized cache
   stores. CISM_ERR_INVALID_ARG for a layer out of range or without attention;
   otherwise as cism_session_act_stats. */
CISM_API cism_status cism_session_key_sums(const cism_session *session, int64_t layer, double *sums,
                                           int64_t capacity, int64_t *n_values, int64_t *n_rows);
/* Experimental, as cism_session_key_sums, for the queries of attention layer
   `layer` after RoPE (and the q norm): sums[h * head_dim + i], then the sum of
   squares of head h's rows at sums[n_heads * head_dim + h];
   n_heads * (head_dim + 1) values over *n_rows tokens (in the last layer only
   the tokens that make logits). A converter derives the layer's query
   directions from them (blk.<layer>.attn_k_qdir, docs/KV_CACHE.md). */
CISM_API cism_status cism_session_query_sums(const cism_session *session, int64_t layer, double *sums,
                                             int64_t capacity, int64_t *n_values, int64_t *n_rows);

/* ---- batches (several sessions' tokens in one forward pass) ------------- */
/* A batch evaluates tokens of several sessions of one model together: every
   weight matrix is read once for all of their rows (decode of N sessions costs
   about one pass over the weights, not N), attention runs per session over its
   own KV cache. Each session ends exactly as if cism_session_eval had been
   called on it with its tokens: same KV cache, position and logits bits.
   Rules:
   - members share the batch's model and every parameter that changes numbers:
     kernel tier, CISM_PARAM_ACT_QUANT, CISM_PARAM_ACT_OUTLIERS, KV type (the
     batch's params, resolved like a session's); cism_batch_add refuses others,
     sessions created with CISM_PARAM_ACT_STATS, and a session added twice;
   - a batch is one handle: one thread at a time; its own worker pool
     (CISM_PARAM_N_THREADS of its params) runs every eval, the members' pools
     stay idle (cism_session_trim on a member is fine: the batch does not use
     a member's scratch);
   - while cism_batch_eval runs, members must not be used by other threads
     except cism_session_cancel, which ends that member only: its tokens are not
     kept (its position and logits stay as before), the others complete;
   - a member freed before cism_batch_eval is a use after free: clear the
     batch or evaluate it first. */
typedef struct cism_batch cism_batch;
/* Reads N_THREADS, N_BATCH (the most tokens one eval takes in all, default
   256), N_CTX (a hint: the attention scratch grows to the largest member's
   context), KERNEL_TIER, ACT_QUANT, ACT_OUTLIERS, KV_TYPE, KV_TYPE_V, KV_ROTATE. params may be NULL. */
CISM_API cism_status cism_batch_create(cism_model *model, const cism_params *params, cism_batch **out);
CISM_API void        cism_batch_free(cism_batch *batch);
/* Adds n_tokens tokens (copied) to evaluate after session's evaluated ones.
   The first add after an eval starts a new set of members. Refuses (and adds
   nothing) what cism_session_eval would refuse, a mismatched session, tokens
   beyond the batch's N_BATCH in all, and, for a session whose sliding-window
   layers keep a ring (docs/SESSION_STATE.md), more tokens than its own
   N_BATCH. Clears the session's pending cancel
   request, as cism_session_eval does. */
CISM_API cism_status cism_batch_add(cism_batch *batch, cism_session *session, const int32_t *tokens, int32_t n_tokens);
/* Forgets the members added since the last eval. */
CISM_API cism_status cism_batch_clear(cism_batch *batch);
/* Members added since the last eval. */
CISM_API int32_t     cism_batch_size(const cism_batch *batch);
/* Evaluates every member. CISM_OK when each succeeded; otherwise the status of
   the first member that did not (the message says which), and each member's
   own status is read with cism_batch_member_status. A failed member is left as
   a failed cism_session_eval leaves a session (CISM_ERR_CANCELLED: nothing of
   this eval kept). CISM_ERR_STATE when the batch has no members. */
CISM_API cism_status cism_batch_eval(cism_batch *batch);
/* The status of member `index` (in the order of cism_batch_add) of the last
   eval; CISM_ERR_INVALID_ARG for an index outside it. */
CISM_API cism_status cism_batch_member_status(const cism_batch *batch, int32_t index);

/* ---- sampling ------------------------------------------------------------ */
typedef struct cism_sampler cism_sampler;
typedef int32_t cism_sampler_param;
enum {
    CISM_SAMPLER_TEMPERATURE      = 0, /* float, default 0 (0 = greedy) */
    CISM_SAMPLER_TOP_K            = 1, /* int, default 0 (disabled) */
    CISM_SAMPLER_TOP_P            = 2, /* float in (0,1], default 1 (disabled) */
    CISM_SAMPLER_MIN_P            = 3, /* float in [0,1), default 0 (disabled) */
    CISM_SAMPLER_REPEAT_PENALTY   = 4, /* float > 0, default 1 (disabled) */
    CISM_SAMPLER_FREQUENCY_PENALTY= 5, /* float, default 0 */
    CISM_SAMPLER_PRESENCE_PENALTY = 6, /* float, default 0 */
    CISM_SAMPLER_PENALTY_LAST_N   = 7, /* int >= 0, tokens of history penalized, default 64 */
    CISM_SAMPLER_SEED             = 8  /* int, default 0; same seed + same inputs = same tokens */
};
CISM_API cism_status cism_sampler_create(cism_sampler **out);
CISM_API void        cism_sampler_free(cism_sampler *sampler);
CISM_API cism_status cism_sampler_set_float(cism_sampler *sampler, cism_sampler_param key, double value);
CISM_API cism_status cism_sampler_set_int(cism_sampler *sampler, cism_sampler_param key, int64_t value);
/* Clears the penalty history and reseeds the random generator. */
CISM_API cism_status cism_sampler_reset(cism_sampler *sampler);
/* Adds a token to the penalty history (cism_generate does this itself; use it
   for prompt tokens or when driving the loop by hand). */
CISM_API cism_status cism_sampler_accept(cism_sampler *sampler, int32_t token);
/* Picks a token from logits (not modified). Order: penalties, top-k, top-p,
   min-p, temperature, draw. Deterministic for a given seed and history. */
CISM_API cism_status cism_sampler_sample(cism_sampler *sampler, const float *logits, int32_t n_vocab, int32_t *token);

/* ---- generation loop ----------------------------------------------------- */
/* Called once per generated token; return 0 to continue, non-zero to stop. */
typedef int32_t (*cism_token_callback)(void *user_data, int32_t token);
/* flags: IGNORE_EOS: do not stop at end-of-generation tokens. LOOKUP:
   speculative decoding by prompt lookup (cism_generate_spec with a lookup
   speculator the session keeps for its later calls, freed with it): the same
   tokens in greedy decoding, the same distribution when sampling (not the
   same draws for a seed), several tokens per eval where the text repeats its
   input (docs/SPECULATIVE.md). */
enum { CISM_GENERATE_IGNORE_EOS = 1, CISM_GENERATE_LOOKUP = 2 };
/* Evaluates the prompt (may be empty to continue from the current state),
   then samples and evaluates up to max_tokens tokens, calling callback (may
   be NULL) with each. Stops at an end-of-generation token (which is reported
   to the callback but not evaluated) unless CISM_GENERATE_IGNORE_EOS, when the
   callback returns non-zero (status CISM_OK), on cism_session_cancel
   (CISM_ERR_CANCELLED) or when the context is full (CISM_ERR_CONTEXT_FULL).
   *n_generated (may be NULL) receives the tokens passed to the callback. */
CISM_API cism_status cism_generate(cism_session *session, cism_sampler *sampler,
                                   const int32_t *prompt, int32_t n_prompt, int32_t max_tokens,
                                   uint32_t flags, cism_token_callback callback, void *user_data,
                                   int32_t *n_generated);

/* ==== tokenizer: text in, text out (docs/FORMAT.md "Tokenizer") ============
 * Token-for-token identical to Hugging Face `tokenizers` for the tokenizers
 * `cism convert` accepts (byte-level BPE of GPT-2 / SmolLM2 / Qwen2 / Llama-3,
 * SentencePiece-style BPE with byte fallback of Llama-2 / TinyLlama /
 * Mistral, llama2.c vocabularies). Thread safety: the tokenizer belongs to the
 * model and is read-only, so every function taking a const cism_model * may
 * be called from any number of threads at once; a cism_detokenizer is used by
 * one thread at a time. Text is UTF-8 given as pointer + length (no NUL
 * needed); outputs go to caller buffers, and when a buffer is too small the
 * call fails with CISM_ERR_BUFFER_SMALL and reports the needed size. */

/* 1 if the model file carries a tokenizer, else 0. */
CISM_API int32_t cism_model_has_tokenizer(const cism_model *model);

enum {
    CISM_TOKENIZE_ADD_SPECIAL   = 1,  /* add what the tokenizer adds around a text (e.g. BOS), like HF add_special_tokens */
    CISM_TOKENIZE_PARSE_SPECIAL = 2   /* special tokens written in the text become their ids (HF's default); without
                                         it they are tokenized as plain text (HF encode_special_tokens = True) */
};
/* Text -> token ids. Invalid UTF-8 is refused (CISM_ERR_INVALID_ARG naming the
   byte offset). *n_tokens receives the count; with capacity too small (0 and
   tokens NULL to ask) the call fails with CISM_ERR_BUFFER_SMALL. */
CISM_API cism_status cism_tokenize(const cism_model *model, const char *text, size_t text_len, uint32_t flags,
                                   int32_t *tokens, int32_t capacity, int32_t *n_tokens);

enum { CISM_DETOKENIZE_SKIP_SPECIAL = 1 };  /* leave special tokens out (HF skip_special_tokens) */
/* Token ids -> text, as HF decode (invalid byte sequences become U+FFFD).
   *text_len receives the length; CISM_ERR_BUFFER_SMALL when it exceeds capacity. */
CISM_API cism_status cism_detokenize(const cism_model *model, const int32_t *tokens, int32_t n_tokens, uint32_t flags,
                                     char *text, size_t capacity, size_t *text_len);

/* The vocabulary string of a token as stored (e.g. "Ġthe", "▁the", "<0x0A>",
   "<|im_end|>"); borrowed from the model, not NUL-terminated. */
CISM_API cism_status cism_token_to_piece(const cism_model *model, int32_t token, const char **piece, size_t *piece_len);
/* The token whose vocabulary string is piece (added tokens first). */
CISM_API cism_status cism_token_from_piece(const cism_model *model, const char *piece, size_t piece_len, int32_t *token);
enum {
    CISM_TOKEN_NORMAL  = 1,  /* in the BPE vocabulary */
    CISM_TOKEN_ADDED   = 2,  /* an added token (matched whole in text) */
    CISM_TOKEN_SPECIAL = 4,  /* special (control) token: skipped by CISM_DETOKENIZE_SKIP_SPECIAL */
    CISM_TOKEN_BYTE    = 8   /* a byte-fallback token <0xXX> */
};
CISM_API cism_status cism_token_flags(const cism_model *model, int32_t token, uint32_t *flags);

/* Streaming detokenizer: push generated tokens one at a time and get the text
   they complete. Text is emitted as soon as it is complete UTF-8: a character
   split across tokens is held back until its last byte arrives, and nothing
   is lost across token boundaries. The concatenated output equals
   cism_detokenize of the same tokens, except that a byte-fallback run holding
   invalid UTF-8 keeps the valid characters it had already emitted. */
typedef struct cism_detokenizer cism_detokenizer;
/* flags: CISM_DETOKENIZE_SKIP_SPECIAL. Keeps the model alive until freed. */
CISM_API cism_status cism_detokenizer_create(cism_model *model, uint32_t flags, cism_detokenizer **out);
CISM_API void        cism_detokenizer_free(cism_detokenizer *detok);
/* *text (borrowed, valid until the next call on detok) receives the newly
   completed text, possibly empty. */
CISM_API cism_status cism_detokenizer_push(cism_detokenizer *detok, int32_t token, const char **text, size_t *text_len);
/* Ends the stream: returns what is held back (an incomplete character becomes
   U+FFFD) and starts a new stream. */
CISM_API cism_status cism_detokenizer_flush(cism_detokenizer *detok, const char **text, size_t *text_len);
/* Drops what is held back and starts a new stream. */
CISM_API cism_status cism_detokenizer_reset(cism_detokenizer *detok);

/* Chat formats. The converter names the model's format after checking its
   Jinja template against these (docs/FORMAT.md). */
typedef int32_t cism_chat_format;
enum {
    CISM_CHAT_MODEL   = 0,  /* the model's own format (tokenizer.chat_format) */
    CISM_CHAT_CHATML  = 1,  /* <|im_start|>role\n...<|im_end|>\n : Qwen2/2.5, SmolLM2 (with their default system prompt) */
    CISM_CHAT_LLAMA3  = 2,  /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CISM_CHAT_LLAMA2  = 3,  /* <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s> */
    CISM_CHAT_MISTRAL = 4,  /* <s>[INST] ... [/INST]...</s> */
    CISM_CHAT_ZEPHYR  = 5   /* <|user|>\n...</s>\n : Zephyr, TinyLlama-Chat */
};
/* "chatml", "llama3", ...; static; NULL for CISM_CHAT_MODEL or an unknown value. */
CISM_API const char *cism_chat_format_name(cism_chat_format format);
/* The model's chat format; CISM_ERR_UNSUPPORTED when the file names none. */
CISM_API cism_status cism_model_chat_format(const cism_model *model, cism_chat_format *format);
/* Renders n_messages (role, content) pairs (roles "system", "user",
   "assistant") as the prompt text, ending with the assistant's header when
   add_generation_prompt is non-zero. The text writes special tokens out:
   tokenize it with CISM_TOKENIZE_PARSE_SPECIAL and without ADD_SPECIAL (the
   formats include BOS where the model expects it). model may be NULL with an
   explicit format (BOS/EOS then default to <s> and </s>). Llama-2 and Mistral
   need alternating user/assistant turns after an optional system message. */
CISM_API cism_status cism_chat_apply(const cism_model *model, cism_chat_format format,
                                     const char *const *roles, const size_t *role_lens,
                                     const char *const *contents, const size_t *content_lens,
                                     int32_t n_messages, int32_t add_generation_prompt,
                                     char *text, size_t capacity, size_t *text_len);

/* ---- device: threads and memory (phones) -----------------------------------
 * A model's weights are used in place from a read-only file mapping (unless
 * CISM_PARAM_USE_MMAP is 0): they are never copied, cost no heap, and the OS
 * may drop their pages under memory pressure and read them back when used.
 * These calls let an app warm, pin and measure that memory, size a session
 * before creating it, and give memory back when the system asks (Android
 * onTrimMemory, iOS didReceiveMemoryWarning). The model calls are thread-safe. */

/* The thread count used when CISM_PARAM_N_THREADS is 0: the CPUs outside the
   slowest cluster on big.LITTLE / P+E designs (phones: the big cores), all
   logical CPUs otherwise; at most 8. */
CISM_API int32_t     cism_default_n_threads(void);
/* 1 when the model's weights are used from a file mapping, 0 when they were
   read into memory (CISM_PARAM_USE_MMAP = 0, or the file could not be mapped). */
CISM_API int32_t     cism_model_is_mapped(const cism_model *model);
/* Asks the OS to read the weights in ahead of use (madvise WILLNEED,
   PrefetchVirtualMemory). wait != 0 also reads every page, so the weights are
   resident when the call returns (slow on a cold file cache). */
CISM_API cism_status cism_model_prefetch(const cism_model *model, int32_t wait);
/* Pins the weights in RAM (mlock, VirtualLock) so they are never evicted.
   Best effort: CISM_ERR_PERMISSION when the OS refuses (RLIMIT_MEMLOCK,
   working-set quota; the message says which limit); nothing is then locked.
   Unlocked by cism_model_unlock or when the model is destroyed. */
CISM_API cism_status cism_model_lock(const cism_model *model);
CISM_API cism_status cism_model_unlock(const cism_model *model);
/* *resident: bytes of the weight storage (the whole file) resident in RAM now
   (mincore, QueryWorkingSetEx), counted in whole pages. *total (may be NULL):
   its size, CISM_INFO_FILE_BYTES. */
CISM_API cism_status cism_model_resident_bytes(const cism_model *model, int64_t *resident, int64_t *total);
/* Resident memory of the whole process (RSS, working set); CISM_ERR_UNSUPPORTED
   where the OS does not tell. */
CISM_API cism_status cism_process_resident_bytes(int64_t *bytes);
/* Bytes a session created from model with params (may be NULL) would allocate
   (KV cache, scratch, logits), without allocating anything. Fails as
   cism_session_create would for invalid params. */
CISM_API cism_status cism_session_estimate_bytes(const cism_model *model, const cism_params *params, int64_t *bytes);
/* Bytes the session holds now (KV cache, scratch, logits); 0 for NULL. */
CISM_API int64_t     cism_session_memory_bytes(const cism_session *session);
/* Frees what the session can rebuild: scratch buffers, the worker threads and
   all rows of logits but the last. The KV cache and position are kept, so the
   conversation continues; the next eval allocates the scratch again. */
CISM_API cism_status cism_session_trim(cism_session *session);

/* ---- generation with a stop reason ---------------------------------------
 * Why a generation ended. Running out of context is a normal end here (as
 * reaching max_tokens is), not an error. */
typedef int32_t cism_stop_reason;
enum {
    CISM_STOP_ERROR        = 0,  /* the call failed (see its status and cism_last_error) */
    CISM_STOP_EOS          = 1,  /* an end-of-generation token was produced (reported, not evaluated) */
    CISM_STOP_MAX_TOKENS   = 2,  /* max_tokens tokens were produced */
    CISM_STOP_CONTEXT_FULL = 3,  /* the session's context is full (the last token is reported, not evaluated) */
    CISM_STOP_CALLBACK     = 4,  /* the callback returned non-zero */
    CISM_STOP_CANCELLED    = 5   /* cism_session_cancel (status CISM_ERR_CANCELLED, as cism_generate) */
};
/* cism_generate with *stop_reason (may be NULL) set to why it ended. Unlike
   cism_generate, filling the context returns CISM_OK with
   CISM_STOP_CONTEXT_FULL (OpenAI's finish_reason "length", as
   CISM_STOP_MAX_TOKENS). A prompt that does not fit in the room left in the
   context is refused before anything is evaluated (CISM_ERR_CONTEXT_FULL,
   stop reason CISM_STOP_ERROR; the session is unchanged). Cancellation stays
   CISM_ERR_CANCELLED, with CISM_STOP_CANCELLED. Other arguments and results as
   cism_generate. */
CISM_API cism_status cism_generate_v2(cism_session *session, cism_sampler *sampler,
                                      const int32_t *prompt, int32_t n_prompt, int32_t max_tokens,
                                      uint32_t flags, cism_token_callback callback, void *user_data,
                                      int32_t *n_generated, cism_stop_reason *stop_reason);

/* ---- speculative decoding (docs/SPECULATIVE.md) ---------------------------
 * cism_generate_spec generates as cism_generate_v2 does, several tokens per
 * forward pass of the target model: a drafter proposes up to k next tokens,
 * the target evaluates its last token plus the k drafts in one eval (weights
 * read once), keeps the longest prefix the sampler accepts plus one token of
 * its own, and rewinds its KV cache past the rest. Exact:
 *   - greedy (temperature 0): the tokens are bit for bit those of
 *     cism_generate_v2 (a token's logits are the same bits whether it is
 *     evaluated alone or among others), for every tier and thread count;
 *   - sampling: each draft is accepted with probability min(1, p/q), a
 *     rejected one replaced by a draw from norm(max(0, p - q)) (p: the
 *     sampler's distribution over the target's logits, q: the drafter's), so
 *     the tokens follow the target's distribution exactly; reproducible for a
 *     seed, though not the tokens cism_generate_v2 draws with that seed.
 * Drafters: prompt lookup (the tokens that followed the most recent earlier
 * occurrence of the longest n-gram ending the text: prompt, generated tokens
 * and what the session held before; a point mass, q = 1) or a draft model (a
 * smaller or quantized model with the same vocabulary, e.g. a 4-bit copy of
 * the target, run in a session of its own that samples q with a copy of the
 * sampler's settings). The depth k adapts to recent acceptance (and, greedy,
 * to measured costs), down to 0 (plain decode, probing again later) when
 * drafts keep failing or do not pay.
 * A cism_spec is used by one thread at a time, with one target session at a
 * time. */
typedef struct cism_spec cism_spec;
/* Prompt lookup. */
CISM_API cism_status cism_spec_create_lookup(cism_spec **out);
/* A draft model for target: refused (CISM_ERR_INVALID_ARG, naming the first
   token that differs) unless both have the same vocabulary (size and, when
   both carry a tokenizer, every token's string). The spec owns a session on
   draft (created from draft_params, may be NULL) and keeps draft alive. */
CISM_API cism_status cism_spec_create_draft(const cism_model *target, cism_model *draft, const cism_params *draft_params,
                                            cism_spec **out);
CISM_API void        cism_spec_free(cism_spec *spec);
typedef int32_t cism_spec_param;
enum {
    CISM_SPEC_DRAFT_MAX = 0,  /* int 1..64: most tokens drafted per step; default 8 (lookup), 4 (draft model) */
    CISM_SPEC_NGRAM_MIN = 1,  /* int 1..16, default 2: shortest n-gram prompt lookup matches */
    CISM_SPEC_NGRAM_MAX = 2,  /* int 1..16, default 4: longest (tried first) */
    CISM_SPEC_ADAPTIVE  = 3   /* int 0..2, default 2: the depth from recent acceptance and, in greedy
                                 decoding, the measured times of target and draft evals (0 = plain
                                 decode while no depth pays); 1 = from acceptance alone (the same
                                 steps every run); 0 = always DRAFT_MAX when a draft exists */
};
CISM_API cism_status cism_spec_set_int(cism_spec *spec, cism_spec_param key, int64_t value);
typedef int32_t cism_spec_stat;
enum {
    CISM_SPEC_STAT_STEPS       = 0,  /* target evals while generating (after the prompt) */
    CISM_SPEC_STAT_VERIFY      = 1,  /* of them, evals with drafts */
    CISM_SPEC_STAT_DRAFTED     = 2,  /* draft tokens verified */
    CISM_SPEC_STAT_ACCEPTED    = 3,  /* draft tokens accepted */
    CISM_SPEC_STAT_DRAFT_EVALS = 4,  /* evals of the draft model's session */
    CISM_SPEC_STAT_GENERATED   = 5   /* tokens passed to the callback */
};
/* Counts of the last cism_generate_spec call on spec. */
CISM_API cism_status cism_spec_stat_get(const cism_spec *spec, cism_spec_stat key, int64_t *value);
/* cism_generate_v2 with speculation: same arguments, callback, flags, stop
   reasons and final state (the last reported token evaluated unless it ends
   the generation as EOS or the context is full, its logits as row -1). The
   session needs no CISM_PARAM_LOGITS_ALL (verification keeps every row of its
   own evals; the logits buffer then holds DRAFT_MAX + 1 rows). On
   CISM_ERR_CANCELLED (cism_session_cancel on session) the session holds every
   reported token but possibly the last (cism_session_n_past tells) and may
   have no logits: give the missing token as the next prompt. */
CISM_API cism_status cism_generate_spec(cism_spec *spec, cism_session *session, cism_sampler *sampler,
                                        const int32_t *prompt, int32_t n_prompt, int32_t max_tokens,
                                        uint32_t flags, cism_token_callback callback, void *user_data,
                                        int32_t *n_generated, cism_stop_reason *stop_reason);

/* ---- session state that survives the app ----------------------------------
 * Saves a conversation to a file and restores it into a new session (after the
 * app was killed, say), which then continues bit for bit as the original would
 * have (same model file, KV type, kernel tier and ACT_QUANT / ACT_OUTLIERS
 * settings). The file (docs/SESSION_STATE.md: a versioned little-endian layout
 * with a CRC-32 over every byte) holds the KV cache rows in use (every layer
 * and KV head, in the session's KV type), n_past and the token ids at those
 * positions, the logits rows of the last
 * eval (every row with CISM_PARAM_LOGITS_ALL, else the last) and, when a
 * sampler is given, the sampler's whole state: its parameters, random
 * generator and penalty history. The sampler is saved in the same file, not
 * through a separate call, so the two cannot get out of step; sampler may be
 * NULL for a session alone. The whole state is built in memory first (as large
 * as the KV rows used plus the logits), then written to a new temporary file
 * in path's folder, flushed to disk and renamed over path: on any failure
 * whatever was at path is left untouched. */
CISM_API cism_status cism_session_save(const cism_session *session, const cism_sampler *sampler, const char *path);
/* Restores a state saved by cism_session_save into session (and, when
   sampler is not NULL, into sampler; a NULL sampler ignores the file's sampler
   part). Everything is checked before anything changes: on failure session and
   sampler are unchanged and the status says why:
     CISM_ERR_FORMAT       not a state file, truncated, or corrupted (checksum)
     CISM_ERR_UNSUPPORTED  a state layout version this library does not read
     CISM_ERR_INVALID_ARG  saved from another model (its fingerprint: header,
                           metadata, tensor directory and samples of every
                           tensor's bytes), with another KV type than the
                           session's, or a sampler was given but the file has
                           none
     CISM_ERR_CONTEXT_FULL the state holds more positions than session's n_ctx
   The session's n_ctx may differ from the saver's as long as n_past fits.
   With CISM_PARAM_LOGITS_ALL off, only the last saved logits row is restored
   (as cism_session_trim). Pending cancel requests are not part of the state. */
CISM_API cism_status cism_session_load(cism_session *session, cism_sampler *sampler, const char *path);
/* The token ids in the session's context, oldest first (cism_session_n_past of
   them; saved and restored with the state, so an app that resumes a
   conversation knows what it holds and can rewind to the prefix its next
   prompt shares). *n_tokens receives the count; with capacity too small
   (0 and tokens NULL to ask) the call fails with CISM_ERR_BUFFER_SMALL. */
CISM_API cism_status cism_session_tokens(const cism_session *session, int32_t *tokens, int32_t capacity, int32_t *n_tokens);

#ifdef __cplusplus
}
#endif
#endif /* CISM_H */
