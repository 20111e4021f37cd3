"""The low-level binding: loads libcism and declares every function of cism.h.

Every public C function has `argtypes` and `restype` set here, in header
order, with its C prototype as a comment (tests/python/test_lib_decls.py
parses cism.h and fails when one is missing or disagrees). Nothing else in the
package calls `ctypes.CDLL`; everything goes through `lib`.

Library discovery, first hit wins:
  1. the CISM_LIB environment variable (a path to the shared library);
  2. next to this file, and every folder of the package's `__path__` (this
     covers scikit-build-core editable installs, where the library lives in
     site-packages while the sources stay in the checkout).
On failure the error lists every path tried. The library's ABI version is
checked as soon as it is loaded.
"""
from __future__ import annotations

import ctypes
import os
import sys
from ctypes import (CFUNCTYPE, POINTER, c_char_p, c_double, c_float, c_int32, c_int64, c_size_t, c_uint32, c_void_p)
from typing import List

ABI_VERSION = 1  # CISM_ABI_VERSION this binding was written for

# ---- enums of cism.h (pinned values) ----------------------------------------
# status
OK = 0
ERR_INVALID_ARG = 1
ERR_IO = 2
ERR_FORMAT = 3
ERR_UNSUPPORTED = 4
ERR_OUT_OF_MEMORY = 5
ERR_CONTEXT_FULL = 6
ERR_TOKEN_RANGE = 7
ERR_BUFFER_SMALL = 8
ERR_CANCELLED = 9
ERR_STATE = 10
ERR_EXISTS = 11
ERR_INTERNAL = 12
ERR_PERMISSION = 13
# log levels
LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR = 0, 1, 2, 3
# cism_param
PARAM_N_THREADS = 0
PARAM_N_CTX = 1
PARAM_KV_TYPE = 2
PARAM_USE_MMAP = 3
PARAM_N_BATCH = 4
PARAM_LOGITS_ALL = 5
PARAM_CHECK_WEIGHTS = 6
PARAM_ACT_QUANT = 7
PARAM_KERNEL_TIER = 8
PARAM_ACT_STATS = 9
PARAM_ACT_OUTLIERS = 10
PARAM_VERIFY_CHECKSUMS = 11
PARAM_KV_ROTATE = 12
PARAM_KV_TYPE_V = 13
# cism_kernel_tier
TIER_AUTO, TIER_SCALAR, TIER_AVX2, TIER_AVX512, TIER_NEON, TIER_NEON_DOTPROD, TIER_NEON_I8MM, TIER_AVX512_AMX = range(8)
# cism_dtype
DTYPE_F32, DTYPE_F16, DTYPE_BF16 = 0, 1, 2
DTYPE_Q8, DTYPE_Q4, DTYPE_FP4, DTYPE_NL4, DTYPE_Q4S = 3, 4, 5, 6, 7
DTYPE_Q8X16, DTYPE_Q4SX16 = 8, 9
DTYPE_Q4A = 10
DTYPE_Q6, DTYPE_Q5 = 11, 12
DTYPE_Q4AX16, DTYPE_Q6X16, DTYPE_Q5X16 = 13, 14, 15
DTYPE_Q3, DTYPE_Q3X16 = 16, 17
DTYPE_Q2, DTYPE_Q2X16 = 18, 19
# cism_model_info
INFO_VOCAB_SIZE = 0
INFO_DIM = 1
INFO_N_LAYERS = 2
INFO_N_HEADS = 3
INFO_N_KV_HEADS = 4
INFO_HEAD_DIM = 5
INFO_FFN_DIM = 6
INFO_CONTEXT_LEN = 7
INFO_BOS_ID = 8
INFO_EOS_ID = 9
INFO_N_EOS_IDS = 10
INFO_PAD_ID = 11
INFO_N_PARAMS = 12
INFO_WEIGHT_BYTES = 13
INFO_FILE_BYTES = 14
INFO_TIED_EMBEDDINGS = 15
INFO_WEIGHT_DTYPE = 16
# cism_meta_type
META_NONE = 0
META_INT = 1
META_FLOAT = 2
META_STRING = 3
META_BYTES = 4
META_INT_ARRAY = 5
META_FLOAT_ARRAY = 6
META_STRING_ARRAY = 7
# cism_sampler_param
SAMPLER_TEMPERATURE = 0
SAMPLER_TOP_K = 1
SAMPLER_TOP_P = 2
SAMPLER_MIN_P = 3
SAMPLER_REPEAT_PENALTY = 4
SAMPLER_FREQUENCY_PENALTY = 5
SAMPLER_PRESENCE_PENALTY = 6
SAMPLER_PENALTY_LAST_N = 7
SAMPLER_SEED = 8
# cism_generate flags
GENERATE_IGNORE_EOS = 1
# cism_stop_reason (cism_generate_v2)
STOP_ERROR, STOP_EOS, STOP_MAX_TOKENS, STOP_CONTEXT_FULL, STOP_CALLBACK, STOP_CANCELLED = 0, 1, 2, 3, 4, 5
# cism_spec_param, cism_spec_stat (speculative decoding)
SPEC_DRAFT_MAX, SPEC_NGRAM_MIN, SPEC_NGRAM_MAX, SPEC_ADAPTIVE = 0, 1, 2, 3
SPEC_STAT_STEPS, SPEC_STAT_VERIFY, SPEC_STAT_DRAFTED, SPEC_STAT_ACCEPTED, SPEC_STAT_DRAFT_EVALS, SPEC_STAT_GENERATED = range(6)
# tokenizer flags
TOKENIZE_ADD_SPECIAL = 1
TOKENIZE_PARSE_SPECIAL = 2
DETOKENIZE_SKIP_SPECIAL = 1
TOKEN_NORMAL, TOKEN_ADDED, TOKEN_SPECIAL, TOKEN_BYTE = 1, 2, 4, 8
# cism_chat_format
CHAT_MODEL, CHAT_CHATML, CHAT_LLAMA3, CHAT_LLAMA2, CHAT_MISTRAL, CHAT_ZEPHYR = 0, 1, 2, 3, 4, 5

# ---- opaque handles and callback types --------------------------------------
cism_params_p = c_void_p
cism_model_p = c_void_p
cism_session_p = c_void_p
cism_sampler_p = c_void_p
cism_batch_p = c_void_p
cism_detokenizer_p = c_void_p
cism_spec_p = c_void_p
# typedef void (*cism_log_callback)(void *user_data, int32_t level, const char *message);
cism_log_callback = CFUNCTYPE(None, c_void_p, c_int32, c_char_p)
# typedef int32_t (*cism_token_callback)(void *user_data, int32_t token);
cism_token_callback = CFUNCTYPE(c_int32, c_void_p, c_int32)
# int32_t (*cism_progress_callback)(void *user_data, int32_t n_done, int32_t n_total)
cism_progress_callback = CFUNCTYPE(c_int32, c_void_p, c_int32, c_int32)


# ---- loading -----------------------------------------------------------------
def _lib_name() -> str:
    if sys.platform == "win32":
        return "cism.dll"
    if sys.platform == "darwin":
        return "libcism.dylib"
    return "libcism.so"


def _candidates() -> List[str]:
    env = os.environ.get("CISM_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [here]
    pkg = sys.modules.get(__package__ or "cism")
    for d in getattr(pkg, "__path__", []) or []:
        d = os.path.abspath(d)
        if d not in dirs:
            dirs.append(d)
    return [os.path.join(d, _lib_name()) for d in dirs]


def _load() -> ctypes.CDLL:
    tried = []
    for path in _candidates():
        if not os.path.exists(path):
            tried.append(f"{path} (absent)")
            continue
        if sys.platform == "win32":
            os.add_dll_directory(os.path.dirname(path))  # type: ignore[attr-defined]
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
    raise OSError("cannot load the libcism shared library; tried:\n  " + "\n  ".join(tried) +
                  "\nInstall the package with `pip install ./bindings_py`, or set CISM_LIB to the library's path.")


lib = _load()

# name -> (restype, argtypes), in header order; read by the declaration test
DECLARED: "dict[str, tuple]" = {}


def _fn(name: str, restype, *argtypes) -> None:
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    DECLARED[name] = (restype, tuple(argtypes))


# ---- version -------------------------------------------------------------------
# int32_t cism_version_number(void);
_fn("cism_version_number", c_int32)
# const char *cism_version_string(void);
_fn("cism_version_string", c_char_p)
# int32_t cism_abi_version(void);
_fn("cism_abi_version", c_int32)
# const char *cism_build_info(void);
_fn("cism_build_info", c_char_p)
# const char *cism_system_info(void);
_fn("cism_system_info", c_char_p)

# ---- status and errors ---------------------------------------------------------
# const char *cism_status_str(cism_status status);
_fn("cism_status_str", c_char_p, c_int32)
# const char *cism_last_error(void);
_fn("cism_last_error", c_char_p)

# ---- logging -------------------------------------------------------------------
# void cism_set_log_callback(cism_log_callback callback, void *user_data, int32_t min_level);
_fn("cism_set_log_callback", None, cism_log_callback, c_void_p, c_int32)

# ---- parameters ----------------------------------------------------------------
# cism_status cism_params_create(cism_params **out);
_fn("cism_params_create", c_int32, POINTER(cism_params_p))
# void cism_params_free(cism_params *params);
_fn("cism_params_free", None, cism_params_p)
# cism_status cism_params_set_int(cism_params *params, cism_param key, int64_t value);
_fn("cism_params_set_int", c_int32, cism_params_p, c_int32, c_int64)
# cism_status cism_params_get_int(const cism_params *params, cism_param key, int64_t *value);
_fn("cism_params_get_int", c_int32, cism_params_p, c_int32, POINTER(c_int64))

# ---- kernel tiers --------------------------------------------------------------
# const char *cism_kernel_tier_name(cism_kernel_tier tier);
_fn("cism_kernel_tier_name", c_char_p, c_int32)
# int32_t cism_kernel_tier_supported(cism_kernel_tier tier);
_fn("cism_kernel_tier_supported", c_int32, c_int32)
# cism_status cism_measure_read_bandwidth(int32_t n_threads, int64_t buffer_bytes, double *bytes_per_second);
_fn("cism_measure_read_bandwidth", c_int32, c_int32, c_int64, POINTER(c_double))
# cism_status cism_measure_int8_mac_peak(cism_kernel_tier tier, double *macs_per_second);
_fn("cism_measure_int8_mac_peak", c_int32, c_int32, POINTER(c_double))

# ---- data types ----------------------------------------------------------------
# const char *cism_dtype_name(cism_dtype dtype);
_fn("cism_dtype_name", c_char_p, c_int32)
# int32_t cism_dtype_block_size(cism_dtype dtype);
_fn("cism_dtype_block_size", c_int32, c_int32)
# int64_t cism_dtype_row_bytes(cism_dtype dtype, int64_t cols);
_fn("cism_dtype_row_bytes", c_int64, c_int32, c_int64)
# cism_status cism_quantize(cism_dtype dtype, const float *src, int64_t n_rows, int64_t cols,
#                           const float *importance, void *dst, int64_t dst_capacity,
#                           int64_t *dst_size, int32_t n_threads);
_fn("cism_quantize", c_int32, c_int32, POINTER(c_float), c_int64, c_int64, POINTER(c_float), c_void_p, c_int64,
    POINTER(c_int64), c_int32)
# cism_status cism_quantize_gram(cism_dtype dtype, const float *src, int64_t n_rows, int64_t cols,
#                                 const double *gram, int64_t gram_block, void *dst, int64_t dst_capacity,
#                                 int64_t *dst_size, int32_t n_threads);
_fn("cism_quantize_gram", c_int32, c_int32, POINTER(c_float), c_int64, c_int64, POINTER(c_double), c_int64, c_void_p,
    c_int64, POINTER(c_int64), c_int32)
# cism_status cism_dequantize(cism_dtype dtype, const void *src, int64_t n_rows, int64_t cols, float *dst);
_fn("cism_dequantize", c_int32, c_int32, c_void_p, c_int64, c_int64, POINTER(c_float))

# ---- models --------------------------------------------------------------------
# cism_status cism_model_load(const char *path, const cism_params *params, cism_model **out);
_fn("cism_model_load", c_int32, c_char_p, cism_params_p, POINTER(cism_model_p))
# void cism_model_free(cism_model *model);
_fn("cism_model_free", None, cism_model_p)
# cism_status cism_model_get_info(const cism_model *model, cism_model_info key, int64_t *value);
_fn("cism_model_get_info", c_int32, cism_model_p, c_int32, POINTER(c_int64))
# const char *cism_model_architecture(const cism_model *model);
_fn("cism_model_architecture", c_char_p, cism_model_p)
# cism_status cism_model_eos_ids(const cism_model *model, int32_t *ids, int32_t capacity, int32_t *n_ids);
_fn("cism_model_eos_ids", c_int32, cism_model_p, POINTER(c_int32), c_int32, POINTER(c_int32))
# int32_t cism_model_meta_count(const cism_model *model);
_fn("cism_model_meta_count", c_int32, cism_model_p)
# const char *cism_model_meta_key(const cism_model *model, int32_t index);
_fn("cism_model_meta_key", c_char_p, cism_model_p, c_int32)
# cism_meta_type cism_model_meta_type(const cism_model *model, const char *key);
_fn("cism_model_meta_type", c_int32, cism_model_p, c_char_p)
# cism_status cism_model_meta_int(const cism_model *model, const char *key, int64_t *value);
_fn("cism_model_meta_int", c_int32, cism_model_p, c_char_p, POINTER(c_int64))
# cism_status cism_model_meta_float(const cism_model *model, const char *key, double *value);
_fn("cism_model_meta_float", c_int32, cism_model_p, c_char_p, POINTER(c_double))
# cism_status cism_model_meta_bytes(const cism_model *model, const char *key, const void **data, int64_t *size);
_fn("cism_model_meta_bytes", c_int32, cism_model_p, c_char_p, POINTER(c_void_p), POINTER(c_int64))
# cism_status cism_model_meta_array(const cism_model *model, const char *key, const void **data,
#                                   int64_t *count, int64_t *size);
_fn("cism_model_meta_array", c_int32, cism_model_p, c_char_p, POINTER(c_void_p), POINTER(c_int64), POINTER(c_int64))

# ---- sessions ------------------------------------------------------------------
# cism_status cism_session_create(cism_model *model, const cism_params *params, cism_session **out);
_fn("cism_session_create", c_int32, cism_model_p, cism_params_p, POINTER(cism_session_p))
# void cism_session_free(cism_session *session);
_fn("cism_session_free", None, cism_session_p)
# cism_status cism_session_reset(cism_session *session);
_fn("cism_session_reset", c_int32, cism_session_p)
# cism_status cism_session_rewind(cism_session *session, int32_t n_keep);
_fn("cism_session_rewind", c_int32, cism_session_p, c_int32)
# cism_status cism_session_eval(cism_session *session, const int32_t *tokens, int32_t n_tokens);
_fn("cism_session_eval", c_int32, cism_session_p, POINTER(c_int32), c_int32)
# cism_status cism_session_logits(cism_session *session, int32_t index, const float **logits, int32_t *n_vocab);
_fn("cism_session_logits", c_int32, cism_session_p, c_int32, POINTER(POINTER(c_float)), POINTER(c_int32))
# int32_t cism_session_n_past(const cism_session *session);
_fn("cism_session_n_past", c_int32, cism_session_p)
# int32_t cism_session_n_ctx(const cism_session *session);
_fn("cism_session_n_ctx", c_int32, cism_session_p)
# void cism_session_cancel(cism_session *session);
_fn("cism_session_cancel", None, cism_session_p)
# cism_status cism_session_set_progress_callback(cism_session *session, cism_progress_callback callback,
#                                                void *user_data);
_fn("cism_session_set_progress_callback", c_int32, cism_session_p, cism_progress_callback, c_void_p)
# cism_status cism_session_set_logits_all(cism_session *session, int32_t on);
_fn("cism_session_set_logits_all", c_int32, cism_session_p, c_int32)
# cism_status cism_session_act_stats(const cism_session *session, const char *tensor, double *sums,
#                                    int64_t capacity, int64_t *n_cols, int64_t *n_rows);
_fn("cism_session_act_stats", c_int32, cism_session_p, c_char_p, POINTER(c_double), c_int64, POINTER(c_int64),
    POINTER(c_int64))
# cism_status cism_session_act_gram(const cism_session *session, const char *tensor, double *blocks,
#                                   int64_t capacity, int64_t *n_values, int64_t *n_rows);
_fn("cism_session_act_gram", c_int32, cism_session_p, c_char_p, POINTER(c_double), c_int64, POINTER(c_int64),
    POINTER(c_int64))
# cism_status cism_session_key_sums(const cism_session *session, int64_t layer, double *sums,
#                                   int64_t capacity, int64_t *n_values, int64_t *n_rows);
_fn("cism_session_key_sums", c_int32, cism_session_p, c_int64, POINTER(c_double), c_int64, POINTER(c_int64),
    POINTER(c_int64))
# cism_status cism_session_query_sums(const cism_session *session, int64_t layer, double *sums,
#                                     int64_t capacity, int64_t *n_values, int64_t *n_rows);
_fn("cism_session_query_sums", c_int32, cism_session_p, c_int64, POINTER(c_double), c_int64, POINTER(c_int64),
    POINTER(c_int64))

# ---- batches -------------------------------------------------------------------
# cism_status cism_batch_create(cism_model *model, const cism_params *params, cism_batch **out);
_fn("cism_batch_create", c_int32, cism_model_p, cism_params_p, POINTER(cism_batch_p))
# void cism_batch_free(cism_batch *batch);
_fn("cism_batch_free", None, cism_batch_p)
# cism_status cism_batch_add(cism_batch *batch, cism_session *session, const int32_t *tokens, int32_t n_tokens);
_fn("cism_batch_add", c_int32, cism_batch_p, cism_session_p, POINTER(c_int32), c_int32)
# cism_status cism_batch_clear(cism_batch *batch);
_fn("cism_batch_clear", c_int32, cism_batch_p)
# int32_t cism_batch_size(const cism_batch *batch);
_fn("cism_batch_size", c_int32, cism_batch_p)
# cism_status cism_batch_eval(cism_batch *batch);
_fn("cism_batch_eval", c_int32, cism_batch_p)
# cism_status cism_batch_member_status(const cism_batch *batch, int32_t index);
_fn("cism_batch_member_status", c_int32, cism_batch_p, c_int32)

# ---- sampling ------------------------------------------------------------------
# cism_status cism_sampler_create(cism_sampler **out);
_fn("cism_sampler_create", c_int32, POINTER(cism_sampler_p))
# void cism_sampler_free(cism_sampler *sampler);
_fn("cism_sampler_free", None, cism_sampler_p)
# cism_status cism_sampler_set_float(cism_sampler *sampler, cism_sampler_param key, double value);
_fn("cism_sampler_set_float", c_int32, cism_sampler_p, c_int32, c_double)
# cism_status cism_sampler_set_int(cism_sampler *sampler, cism_sampler_param key, int64_t value);
_fn("cism_sampler_set_int", c_int32, cism_sampler_p, c_int32, c_int64)
# cism_status cism_sampler_reset(cism_sampler *sampler);
_fn("cism_sampler_reset", c_int32, cism_sampler_p)
# cism_status cism_sampler_accept(cism_sampler *sampler, int32_t token);
_fn("cism_sampler_accept", c_int32, cism_sampler_p, c_int32)
# cism_status cism_sampler_sample(cism_sampler *sampler, const float *logits, int32_t n_vocab, int32_t *token);
_fn("cism_sampler_sample", c_int32, cism_sampler_p, POINTER(c_float), c_int32, POINTER(c_int32))

# ---- generation loop -----------------------------------------------------------
# cism_status cism_generate(cism_session *session, cism_sampler *sampler,
#                           const int32_t *prompt, int32_t n_prompt, int32_t max_tokens,
#                           uint32_t flags, cism_token_callback callback, void *user_data,
#                           int32_t *n_generated);
_fn("cism_generate", c_int32, cism_session_p, cism_sampler_p, POINTER(c_int32), c_int32, c_int32, c_uint32,
    cism_token_callback, c_void_p, POINTER(c_int32))

# ---- tokenizer -----------------------------------------------------------------
# int32_t cism_model_has_tokenizer(const cism_model *model);
_fn("cism_model_has_tokenizer", c_int32, cism_model_p)
# cism_status cism_tokenize(const cism_model *model, const char *text, size_t text_len, uint32_t flags,
#                           int32_t *tokens, int32_t capacity, int32_t *n_tokens);
_fn("cism_tokenize", c_int32, cism_model_p, c_char_p, c_size_t, c_uint32, POINTER(c_int32), c_int32, POINTER(c_int32))
# cism_status cism_detokenize(const cism_model *model, const int32_t *tokens, int32_t n_tokens, uint32_t flags,
#                             char *text, size_t capacity, size_t *text_len);
_fn("cism_detokenize", c_int32, cism_model_p, POINTER(c_int32), c_int32, c_uint32, c_char_p, c_size_t, POINTER(c_size_t))
# cism_status cism_token_to_piece(const cism_model *model, int32_t token, const char **piece, size_t *piece_len);
_fn("cism_token_to_piece", c_int32, cism_model_p, c_int32, POINTER(c_void_p), POINTER(c_size_t))
# cism_status cism_token_from_piece(const cism_model *model, const char *piece, size_t piece_len, int32_t *token);
_fn("cism_token_from_piece", c_int32, cism_model_p, c_char_p, c_size_t, POINTER(c_int32))
# cism_status cism_token_flags(const cism_model *model, int32_t token, uint32_t *flags);
_fn("cism_token_flags", c_int32, cism_model_p, c_int32, POINTER(c_uint32))
# cism_status cism_detokenizer_create(cism_model *model, uint32_t flags, cism_detokenizer **out);
_fn("cism_detokenizer_create", c_int32, cism_model_p, c_uint32, POINTER(cism_detokenizer_p))
# void cism_detokenizer_free(cism_detokenizer *detok);
_fn("cism_detokenizer_free", None, cism_detokenizer_p)
# cism_status cism_detokenizer_push(cism_detokenizer *detok, int32_t token, const char **text, size_t *text_len);
_fn("cism_detokenizer_push", c_int32, cism_detokenizer_p, c_int32, POINTER(c_void_p), POINTER(c_size_t))
# cism_status cism_detokenizer_flush(cism_detokenizer *detok, const char **text, size_t *text_len);
_fn("cism_detokenizer_flush", c_int32, cism_detokenizer_p, POINTER(c_void_p), POINTER(c_size_t))
# cism_status cism_detokenizer_reset(cism_detokenizer *detok);
_fn("cism_detokenizer_reset", c_int32, cism_detokenizer_p)
# const char *cism_chat_format_name(cism_chat_format format);
_fn("cism_chat_format_name", c_char_p, c_int32)
# cism_status cism_model_chat_format(const cism_model *model, cism_chat_format *format);
_fn("cism_model_chat_format", c_int32, cism_model_p, POINTER(c_int32))
# cism_status cism_chat_apply(const cism_model *model, cism_chat_format format,
#                             const char *const *roles, const size_t *role_lens,
#                             const char *const *contents, const size_t *content_lens,
#                             int32_t n_messages, int32_t add_generation_prompt,
#                             char *text, size_t capacity, size_t *text_len);
_fn("cism_chat_apply", c_int32, cism_model_p, c_int32, POINTER(c_char_p), POINTER(c_size_t), POINTER(c_char_p),
    POINTER(c_size_t), c_int32, c_int32, c_char_p, c_size_t, POINTER(c_size_t))

# ---- device: threads and memory (phones) ---------------------------------------
# int32_t cism_default_n_threads(void);
_fn("cism_default_n_threads", c_int32)
# int32_t cism_model_is_mapped(const cism_model *model);
_fn("cism_model_is_mapped", c_int32, cism_model_p)
# cism_status cism_model_prefetch(const cism_model *model, int32_t wait);
_fn("cism_model_prefetch", c_int32, cism_model_p, c_int32)
# cism_status cism_model_lock(const cism_model *model);
_fn("cism_model_lock", c_int32, cism_model_p)
# cism_status cism_model_unlock(const cism_model *model);
_fn("cism_model_unlock", c_int32, cism_model_p)
# cism_status cism_model_resident_bytes(const cism_model *model, int64_t *resident, int64_t *total);
_fn("cism_model_resident_bytes", c_int32, cism_model_p, POINTER(c_int64), POINTER(c_int64))
# cism_status cism_process_resident_bytes(int64_t *bytes);
_fn("cism_process_resident_bytes", c_int32, POINTER(c_int64))
# cism_status cism_session_estimate_bytes(const cism_model *model, const cism_params *params, int64_t *bytes);
_fn("cism_session_estimate_bytes", c_int32, cism_model_p, cism_params_p, POINTER(c_int64))
# int64_t cism_session_memory_bytes(const cism_session *session);
_fn("cism_session_memory_bytes", c_int64, cism_session_p)
# cism_status cism_session_trim(cism_session *session);
_fn("cism_session_trim", c_int32, cism_session_p)

# ---- generation with a stop reason ---------------------------------------------
# cism_status cism_generate_v2(cism_session *session, cism_sampler *sampler,
#                              const int32_t *prompt, int32_t n_prompt, int32_t max_tokens,
#                              uint32_t flags, cism_token_callback callback, void *user_data,
#                              int32_t *n_generated, cism_stop_reason *stop_reason);
_fn("cism_generate_v2", c_int32, cism_session_p, cism_sampler_p, POINTER(c_int32), c_int32, c_int32, c_uint32,
    cism_token_callback, c_void_p, POINTER(c_int32), POINTER(c_int32))

# ---- speculative decoding ------------------------------------------------------
# cism_status cism_spec_create_lookup(cism_spec **out);
_fn("cism_spec_create_lookup", c_int32, POINTER(cism_spec_p))
# cism_status cism_spec_create_draft(const cism_model *target, cism_model *draft, const cism_params *draft_params,
#                                    cism_spec **out);
_fn("cism_spec_create_draft", c_int32, cism_model_p, cism_model_p, cism_params_p, POINTER(cism_spec_p))
# void cism_spec_free(cism_spec *spec);
_fn("cism_spec_free", None, cism_spec_p)
# cism_status cism_spec_set_int(cism_spec *spec, cism_spec_param key, int64_t value);
_fn("cism_spec_set_int", c_int32, cism_spec_p, c_int32, c_int64)
# cism_status cism_spec_stat_get(const cism_spec *spec, cism_spec_stat key, int64_t *value);
_fn("cism_spec_stat_get", c_int32, cism_spec_p, c_int32, POINTER(c_int64))
# cism_status cism_generate_spec(cism_spec *spec, cism_session *session, cism_sampler *sampler,
#                                const int32_t *prompt, int32_t n_prompt, int32_t max_tokens,
#                                uint32_t flags, cism_token_callback callback, void *user_data,
#                                int32_t *n_generated, cism_stop_reason *stop_reason);
_fn("cism_generate_spec", c_int32, cism_spec_p, cism_session_p, cism_sampler_p, POINTER(c_int32), c_int32, c_int32,
    c_uint32, cism_token_callback, c_void_p, POINTER(c_int32), POINTER(c_int32))


# ---- session state -------------------------------------------------------------
# cism_status cism_session_save(const cism_session *session, const cism_sampler *sampler, const char *path);
_fn("cism_session_save", c_int32, cism_session_p, cism_sampler_p, c_char_p)
# cism_status cism_session_load(cism_session *session, cism_sampler *sampler, const char *path);
_fn("cism_session_load", c_int32, cism_session_p, cism_sampler_p, c_char_p)
# cism_status cism_session_tokens(const cism_session *session, int32_t *tokens, int32_t capacity, int32_t *n_tokens);
_fn("cism_session_tokens", c_int32, cism_session_p, POINTER(c_int32), c_int32, POINTER(c_int32))

def _check_abi() -> None:
    abi = lib.cism_abi_version()
    if abi != ABI_VERSION:
        raise ImportError(f"libcism ABI version {abi} does not match this binding's {ABI_VERSION} "
                          f"({getattr(lib, '_name', '?')}); reinstall the package so both come from one build")


_check_abi()


def last_error() -> str:
    """The calling thread's last libcism error message."""
    return (lib.cism_last_error() or b"").decode("utf-8", "replace")


def status_str(status: int) -> str:
    return (lib.cism_status_str(status) or b"").decode("utf-8", "replace")
