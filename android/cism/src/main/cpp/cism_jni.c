/* cism_jni.c - JNI glue between the org.libcism Java API and libcism's public
 * C API (cism.h only; nothing internal).
 *
 * Rules this file keeps:
 *   - Handles cross as jlong; the Java classes own them and never pass 0.
 *   - No global state: classes and method ids are looked up per call, on the
 *     calling thread, so nothing is cached across class loaders or threads.
 *   - Text crosses as UTF-8 byte[] (never NewStringUTF/GetStringUTFChars:
 *     JNI's modified UTF-8 breaks on emoji and other non-BMP characters).
 *   - Every failed C call throws org.libcism.CismException(status, message);
 *     every JNI call that can throw is checked before the next one (clean
 *     under -Xcheck:jni).
 *   - Callbacks into Java run on the thread that called generate; an
 *     exception in a callback stops generation and propagates to the caller. */
#include <jni.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cism.h"

#define TO_HANDLE(p) ((jlong)(intptr_t)(p))
#define FROM_HANDLE(type, h) ((type *)(intptr_t)(h))

/* ---- errors ----------------------------------------------------------------- */
static void throw_java(JNIEnv *env, const char *class_name, const char *ascii_message) {
    jclass cls;
    if ((*env)->ExceptionCheck(env)) return;
    cls = (*env)->FindClass(env, class_name);
    if (!cls) return; /* NoClassDefFoundError pending */
    (*env)->ThrowNew(env, cls, ascii_message);
    (*env)->DeleteLocalRef(env, cls);
}

static jbyteArray new_bytes(JNIEnv *env, const char *data, size_t n) {
    jbyteArray a;
    if (n > 0x7fffffffu) {
        throw_java(env, "java/lang/OutOfMemoryError", "libcism: text longer than a Java array");
        return NULL;
    }
    a = (*env)->NewByteArray(env, (jsize)n);
    if (a && n > 0) (*env)->SetByteArrayRegion(env, a, 0, (jsize)n, (const jbyte *)data);
    return a; /* NULL: OutOfMemoryError pending */
}

/* Throws CismException(status, cism_last_error()). Call it right after the
   failed cism_ call: the message belongs to this thread's last call. */
static void throw_status(JNIEnv *env, cism_status status) {
    const char *message = cism_last_error();
    jclass cls;
    jmethodID ctor;
    jbyteArray bytes;
    jobject ex;
    if ((*env)->ExceptionCheck(env)) return;
    if (!message[0]) message = cism_status_str(status);
    bytes = new_bytes(env, message, strlen(message));
    if (!bytes) return;
    cls = (*env)->FindClass(env, "org/libcism/CismException");
    if (!cls) return;
    ctor = (*env)->GetMethodID(env, cls, "<init>", "(I[B)V");
    if (ctor) {
        ex = (*env)->NewObject(env, cls, ctor, (jint)status, bytes);
        if (ex) {
            (*env)->Throw(env, (jthrowable)ex);
            (*env)->DeleteLocalRef(env, ex);
        }
    }
    (*env)->DeleteLocalRef(env, cls);
    (*env)->DeleteLocalRef(env, bytes);
}

/* ---- arrays ------------------------------------------------------------------ */
/* A NUL-terminated copy of a UTF-8 byte[] (free() it), or NULL with an exception pending. */
static char *utf8_arg(JNIEnv *env, jbyteArray bytes, const char *what) {
    jsize n;
    char *s;
    if (!bytes) {
        throw_java(env, "java/lang/NullPointerException", what);
        return NULL;
    }
    n = (*env)->GetArrayLength(env, bytes);
    s = (char *)malloc((size_t)n + 1);
    if (!s) {
        throw_java(env, "java/lang/OutOfMemoryError", "libcism: out of memory");
        return NULL;
    }
    (*env)->GetByteArrayRegion(env, bytes, 0, n, (jbyte *)s);
    s[n] = 0;
    if (memchr(s, 0, (size_t)n)) {
        free(s);
        throw_java(env, "java/lang/IllegalArgumentException", "libcism: text contains a NUL character");
        return NULL;
    }
    return s;
}

/* An int32_t copy of an int[] (free() it; *n receives the length), or NULL with
   an exception pending. A zero-length array gives a valid 1-element block. */
static int32_t *ints_arg(JNIEnv *env, jintArray a, int32_t *n) {
    jsize len, i;
    jint *tmp;
    int32_t *out;
    if (!a) {
        throw_java(env, "java/lang/NullPointerException", "tokens");
        return NULL;
    }
    len = (*env)->GetArrayLength(env, a);
    tmp = (jint *)malloc(((size_t)len + 1) * sizeof(jint));
    out = (int32_t *)malloc(((size_t)len + 1) * sizeof(int32_t));
    if (!tmp || !out) {
        free(tmp);
        free(out);
        throw_java(env, "java/lang/OutOfMemoryError", "libcism: out of memory");
        return NULL;
    }
    (*env)->GetIntArrayRegion(env, a, 0, len, tmp);
    for (i = 0; i < len; i++) out[i] = (int32_t)tmp[i]; /* jint is long on Windows */
    free(tmp);
    *n = (int32_t)len;
    return out;
}

/* ---- org.libcism.Cism -------------------------------------------------------- */
JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM *vm, void *reserved) {
    (void)vm;
    (void)reserved;
    return JNI_VERSION_1_6;
}

JNIEXPORT jbyteArray JNICALL Java_org_libcism_Cism_nativeVersion(JNIEnv *env, jclass cls) {
    const char *s = cism_version_string();
    (void)cls;
    return new_bytes(env, s, strlen(s));
}

JNIEXPORT jbyteArray JNICALL Java_org_libcism_Cism_nativeSystemInfo(JNIEnv *env, jclass cls) {
    const char *s = cism_system_info();
    (void)cls;
    return new_bytes(env, s, strlen(s));
}

JNIEXPORT jbyteArray JNICALL Java_org_libcism_Cism_nativeStatusName(JNIEnv *env, jclass cls, jint status) {
    const char *s = cism_status_str((cism_status)status);
    (void)cls;
    return new_bytes(env, s, strlen(s));
}

JNIEXPORT jint JNICALL Java_org_libcism_Cism_nativeDefaultThreads(JNIEnv *env, jclass cls) {
    (void)env;
    (void)cls;
    return (jint)cism_default_n_threads();
}

JNIEXPORT jlong JNICALL Java_org_libcism_Cism_nativeProcessResidentBytes(JNIEnv *env, jclass cls) {
    int64_t bytes = -1;
    (void)env;
    (void)cls;
    return cism_process_resident_bytes(&bytes) == CISM_OK ? (jlong)bytes : -1;
}

/* ---- org.libcism.Model -------------------------------------------------------- */
JNIEXPORT jlong JNICALL Java_org_libcism_Model_nativeLoad(JNIEnv *env, jclass cls, jbyteArray path_utf8, jboolean use_mmap,
                                                          jboolean check_weights) {
    cism_params *params = NULL;
    cism_model *model = NULL;
    cism_status st;
    char *path = utf8_arg(env, path_utf8, "path");
    (void)cls;
    if (!path) return 0;
    if ((st = cism_params_create(&params)) == CISM_OK &&
        (st = cism_params_set_int(params, CISM_PARAM_USE_MMAP, use_mmap ? 1 : 0)) == CISM_OK &&
        (st = cism_params_set_int(params, CISM_PARAM_CHECK_WEIGHTS, check_weights ? 1 : 0)) == CISM_OK)
        st = cism_model_load(path, params, &model);
    if (st != CISM_OK) throw_status(env, st);
    cism_params_free(params);
    free(path);
    return TO_HANDLE(model);
}

JNIEXPORT void JNICALL Java_org_libcism_Model_nativeFree(JNIEnv *env, jclass cls, jlong model) {
    (void)env;
    (void)cls;
    cism_model_free(FROM_HANDLE(cism_model, model));
}

JNIEXPORT jlong JNICALL Java_org_libcism_Model_nativeInfo(JNIEnv *env, jclass cls, jlong model, jint key) {
    int64_t value = 0;
    cism_status st = cism_model_get_info(FROM_HANDLE(cism_model, model), (cism_model_info)key, &value);
    (void)cls;
    if (st != CISM_OK) throw_status(env, st);
    return (jlong)value;
}

JNIEXPORT jbyteArray JNICALL Java_org_libcism_Model_nativeArchitecture(JNIEnv *env, jclass cls, jlong model) {
    const char *s = cism_model_architecture(FROM_HANDLE(cism_model, model));
    (void)cls;
    return s ? new_bytes(env, s, strlen(s)) : NULL;
}

JNIEXPORT jintArray JNICALL Java_org_libcism_Model_nativeEosIds(JNIEnv *env, jclass cls, jlong model) {
    const cism_model *m = FROM_HANDLE(cism_model, model);
    int32_t n = 0, i, *ids;
    jint *tmp;
    jintArray out;
    cism_status st = cism_model_eos_ids(m, NULL, 0, &n);
    (void)cls;
    if (st != CISM_OK) {
        throw_status(env, st);
        return NULL;
    }
    ids = (int32_t *)malloc(((size_t)n + 1) * sizeof(int32_t));
    tmp = (jint *)malloc(((size_t)n + 1) * sizeof(jint));
    if (!ids || !tmp) {
        free(ids);
        free(tmp);
        throw_java(env, "java/lang/OutOfMemoryError", "libcism: out of memory");
        return NULL;
    }
    st = cism_model_eos_ids(m, ids, n, &n);
    if (st != CISM_OK) {
        throw_status(env, st);
        free(ids);
        free(tmp);
        return NULL;
    }
    for (i = 0; i < n; i++) tmp[i] = (jint)ids[i];
    out = (*env)->NewIntArray(env, (jsize)n);
    if (out) (*env)->SetIntArrayRegion(env, out, 0, (jsize)n, tmp);
    free(ids);
    free(tmp);
    return out;
}

JNIEXPORT jboolean JNICALL Java_org_libcism_Model_nativeIsMapped(JNIEnv *env, jclass cls, jlong model) {
    (void)env;
    (void)cls;
    return cism_model_is_mapped(FROM_HANDLE(cism_model, model)) ? JNI_TRUE : JNI_FALSE;
}

JNIEXPORT void JNICALL Java_org_libcism_Model_nativePrefetch(JNIEnv *env, jclass cls, jlong model, jboolean wait) {
    cism_status st = cism_model_prefetch(FROM_HANDLE(cism_model, model), wait ? 1 : 0);
    (void)cls;
    if (st != CISM_OK) throw_status(env, st);
}

JNIEXPORT void JNICALL Java_org_libcism_Model_nativeLock(JNIEnv *env, jclass cls, jlong model, jboolean lock) {
    const cism_model *m = FROM_HANDLE(cism_model, model);
    cism_status st = lock ? cism_model_lock(m) : cism_model_unlock(m);
    (void)cls;
    if (st != CISM_OK) throw_status(env, st);
}

JNIEXPORT jlong JNICALL Java_org_libcism_Model_nativeResidentBytes(JNIEnv *env, jclass cls, jlong model) {
    int64_t resident = 0;
    cism_status st = cism_model_resident_bytes(FROM_HANDLE(cism_model, model), &resident, NULL);
    (void)cls;
    if (st != CISM_OK) throw_status(env, st);
    return (jlong)resident;
}

/* The session keys of cism_params (0 = library default). act: Session.Activations'
   code (Options.activationsCode): 0 the library's default, 1 OUTLIERS, 2 INT8, 3 FLOAT. */
static cism_status session_params(cism_params **out, jint threads, jint n_ctx, jboolean kv_f32, jint n_batch, jint act) {
    cism_params *p = NULL;
    cism_status st = cism_params_create(&p);
    if (st == CISM_OK && act != 0) st = cism_params_set_int(p, CISM_PARAM_ACT_QUANT, act != 3);
    if (st == CISM_OK && (act == 1 || act == 2)) st = cism_params_set_int(p, CISM_PARAM_ACT_OUTLIERS, act == 1);
    if (st == CISM_OK && threads != 0) st = cism_params_set_int(p, CISM_PARAM_N_THREADS, threads);
    if (st == CISM_OK && n_ctx != 0) st = cism_params_set_int(p, CISM_PARAM_N_CTX, n_ctx);
    if (st == CISM_OK) st = cism_params_set_int(p, CISM_PARAM_KV_TYPE, kv_f32 ? CISM_DTYPE_F32 : CISM_DTYPE_F16);
    if (st == CISM_OK && n_batch != 0) st = cism_params_set_int(p, CISM_PARAM_N_BATCH, n_batch);
    if (st != CISM_OK) {
        cism_params_free(p);
        p = NULL;
    }
    *out = p;
    return st;
}

JNIEXPORT jlong JNICALL Java_org_libcism_Model_nativeEstimateSessionBytes(JNIEnv *env, jclass cls, jlong model, jint threads,
                                                                          jint n_ctx, jboolean kv_f32, jint n_batch, jint act) {
    cism_params *p = NULL;
    int64_t bytes = 0;
    cism_status st = session_params(&p, threads, n_ctx, kv_f32, n_batch, act);
    (void)cls;
    if (st == CISM_OK) st = cism_session_estimate_bytes(FROM_HANDLE(cism_model, model), p, &bytes);
    if (st != CISM_OK) throw_status(env, st);
    cism_params_free(p);
    return (jlong)bytes;
}

/* ---- org.libcism.Sampler -------------------------------------------------------- */
JNIEXPORT jlong JNICALL Java_org_libcism_Sampler_nativeCreate(JNIEnv *env, jclass cls) {
    cism_sampler *s = NULL;
    cism_status st = cism_sampler_create(&s);
    (void)cls;
    if (st != CISM_OK) throw_status(env, st);
    return TO_HANDLE(s);
}

JNIEXPORT void JNICALL Java_org_libcism_Sampler_nativeFree(JNIEnv *env, jclass cls, jlong sampler) {
    (void)env;
    (void)cls;
    cism_sampler_free(FROM_HANDLE(cism_sampler, sampler));
}

JNIEXPORT void JNICALL Java_org_libcism_Sampler_nativeSetFloat(JNIEnv *env, jclass cls, jlong sampler, jint key, jdouble value) {
    cism_status st = cism_sampler_set_float(FROM_HANDLE(cism_sampler, sampler), (cism_sampler_param)key, value);
    (void)cls;
    if (st != CISM_OK) throw_status(env, st);
}

JNIEXPORT void JNICALL Java_org_libcism_Sampler_nativeSetInt(JNIEnv *env, jclass cls, jlong sampler, jint key, jlong value) {
    cism_status st = cism_sampler_set_int(FROM_HANDLE(cism_sampler, sampler), (cism_sampler_param)key, (int64_t)value);
    (void)cls;
    if (st != CISM_OK) throw_status(env, st);
}

JNIEXPORT void JNICALL Java_org_libcism_Sampler_nativeReset(JNIEnv *env, jclass cls, jlong sampler) {
    cism_status st = cism_sampler_reset(FROM_HANDLE(cism_sampler, sampler));
    (void)cls;
    if (st != CISM_OK) throw_status(env, st);
}

JNIEXPORT void JNICALL Java_org_libcism_Sampler_nativeAccept(JNIEnv *env, jclass cls, jlong sampler, jint token) {
    cism_status st = cism_sampler_accept(FROM_HANDLE(cism_sampler, sampler), (int32_t)token);
    (void)cls;
    if (st != CISM_OK) throw_status(env, st);
}

/* ---- org.libcism.Session --------------------------------------------------------- */
JNIEXPORT jlong JNICALL Java_org_libcism_Session_nativeCreate(JNIEnv *env, jclass cls, jlong model, jint threads, jint n_ctx,
                                                              jboolean kv_f32, jint n_batch, jint act) {
    cism_params *p = NULL;
    cism_session *s = NULL;
    cism_status st = session_params(&p, threads, n_ctx, kv_f32, n_batch, act);
    (void)cls;
    if (st == CISM_OK) st = cism_session_create(FROM_HANDLE(cism_model, model), p, &s);
    if (st != CISM_OK) throw_status(env, st);
    cism_params_free(p);
    return TO_HANDLE(s);
}

JNIEXPORT void JNICALL Java_org_libcism_Session_nativeFree(JNIEnv *env, jclass cls, jlong session) {
    (void)env;
    (void)cls;
    cism_session_free(FROM_HANDLE(cism_session, session));
}

JNIEXPORT void JNICALL Java_org_libcism_Session_nativeEval(JNIEnv *env, jclass cls, jlong session, jintArray tokens) {
    int32_t n = 0;
    int32_t *t = ints_arg(env, tokens, &n);
    cism_status st;
    (void)cls;
    if (!t) return;
    st = cism_session_eval(FROM_HANDLE(cism_session, session), t, n);
    if (st != CISM_OK) throw_status(env, st);
    free(t);
}

JNIEXPORT jfloatArray JNICALL Java_org_libcism_Session_nativeLogits(JNIEnv *env, jclass cls, jlong session) {
    const float *logits = NULL;
    int32_t n = 0;
    jfloatArray out;
    cism_status st = cism_session_logits(FROM_HANDLE(cism_session, session), -1, &logits, &n);
    (void)cls;
    if (st != CISM_OK) {
        throw_status(env, st);
        return NULL;
    }
    out = (*env)->NewFloatArray(env, (jsize)n);
    if (out) (*env)->SetFloatArrayRegion(env, out, 0, (jsize)n, (const jfloat *)logits);
    return out;
}

JNIEXPORT jint JNICALL Java_org_libcism_Session_nativePosition(JNIEnv *env, jclass cls, jlong session) {
    (void)env;
    (void)cls;
    return (jint)cism_session_n_past(FROM_HANDLE(cism_session, session));
}

JNIEXPORT jint JNICALL Java_org_libcism_Session_nativeContextLength(JNIEnv *env, jclass cls, jlong session) {
    (void)env;
    (void)cls;
    return (jint)cism_session_n_ctx(FROM_HANDLE(cism_session, session));
}

JNIEXPORT void JNICALL Java_org_libcism_Session_nativeReset(JNIEnv *env, jclass cls, jlong session) {
    cism_status st = cism_session_reset(FROM_HANDLE(cism_session, session));
    (void)cls;
    if (st != CISM_OK) throw_status(env, st);
}

JNIEXPORT void JNICALL Java_org_libcism_Session_nativeRewind(JNIEnv *env, jclass cls, jlong session, jint n_keep) {
    cism_status st = cism_session_rewind(FROM_HANDLE(cism_session, session), (int32_t)n_keep);
    (void)cls;
    if (st != CISM_OK) throw_status(env, st);
}

JNIEXPORT void JNICALL Java_org_libcism_Session_nativeCancel(JNIEnv *env, jclass cls, jlong session) {
    (void)env;
    (void)cls;
    cism_session_cancel(FROM_HANDLE(cism_session, session)); /* thread-safe in the C API */
}

JNIEXPORT jlong JNICALL Java_org_libcism_Session_nativeMemoryBytes(JNIEnv *env, jclass cls, jlong session) {
    (void)env;
    (void)cls;
    return (jlong)cism_session_memory_bytes(FROM_HANDLE(cism_session, session));
}

JNIEXPORT void JNICALL Java_org_libcism_Session_nativeTrim(JNIEnv *env, jclass cls, jlong session) {
    cism_status st = cism_session_trim(FROM_HANDLE(cism_session, session));
    (void)cls;
    if (st != CISM_OK) throw_status(env, st);
}

/* Session state (cism_session_save / _load); sampler 0 = none. */
JNIEXPORT void JNICALL Java_org_libcism_Session_nativeSave(JNIEnv *env, jclass cls, jlong session, jlong sampler,
                                                           jbyteArray path_utf8) {
    char *path = utf8_arg(env, path_utf8, "path");
    cism_status st;
    (void)cls;
    if (!path) return;
    st = cism_session_save(FROM_HANDLE(cism_session, session), FROM_HANDLE(cism_sampler, sampler), path);
    if (st != CISM_OK) throw_status(env, st);
    free(path);
}

JNIEXPORT void JNICALL Java_org_libcism_Session_nativeLoad(JNIEnv *env, jclass cls, jlong session, jlong sampler,
                                                           jbyteArray path_utf8) {
    char *path = utf8_arg(env, path_utf8, "path");
    cism_status st;
    (void)cls;
    if (!path) return;
    st = cism_session_load(FROM_HANDLE(cism_session, session), FROM_HANDLE(cism_sampler, sampler), path);
    if (st != CISM_OK) throw_status(env, st);
    free(path);
}

/* The token ids in the context (cism_session_tokens). */
JNIEXPORT jintArray JNICALL Java_org_libcism_Session_nativeTokens(JNIEnv *env, jclass cls, jlong session) {
    cism_session *s = FROM_HANDLE(cism_session, session);
    int32_t n = cism_session_n_past(s), got = 0, i;
    int32_t *ids = (int32_t *)malloc(((size_t)n + 1) * sizeof(int32_t));
    jint *tmp = (jint *)malloc(((size_t)n + 1) * sizeof(jint));
    jintArray out;
    cism_status st;
    (void)cls;
    if (!ids || !tmp) {
        free(ids);
        free(tmp);
        throw_java(env, "java/lang/OutOfMemoryError", "libcism: out of memory");
        return NULL;
    }
    if ((st = cism_session_tokens(s, ids, n, &got)) != CISM_OK) {
        throw_status(env, st);
        free(ids);
        free(tmp);
        return NULL;
    }
    for (i = 0; i < got; i++) tmp[i] = (jint)ids[i];
    out = (*env)->NewIntArray(env, (jsize)got);
    if (out) (*env)->SetIntArrayRegion(env, out, 0, (jsize)got, tmp);
    free(ids);
    free(tmp);
    return out;
}

typedef struct token_sink {
    JNIEnv *env;
    jobject callback;
    jmethodID on_token;
    int32_t stopped;   /* the callback returned false or threw */
    int32_t last;
} token_sink;

static int32_t token_to_java(void *user, int32_t token) {
    token_sink *k = (token_sink *)user;
    jboolean go;
    k->last = token;
    go = (*k->env)->CallBooleanMethod(k->env, k->callback, k->on_token, (jint)token);
    if ((*k->env)->ExceptionCheck(k->env) || !go) {
        k->stopped = 1;
        return 1;
    }
    return 0;
}

JNIEXPORT void JNICALL Java_org_libcism_Session_nativeGenerate(JNIEnv *env, jclass cls, jlong session, jlong sampler,
                                                               jintArray prompt, jint max_tokens, jint flags, jobject callback,
                                                               jintArray out) {
    token_sink sink;
    jclass iface;
    int32_t n_prompt = 0, n_generated = 0;
    int32_t *p = ints_arg(env, prompt, &n_prompt);
    cism_status st;
    jint result[4];
    (void)cls;
    if (!p) return;
    iface = (*env)->FindClass(env, "org/libcism/TokenCallback");
    if (!iface) {
        free(p);
        return;
    }
    sink.env = env;
    sink.callback = callback;
    sink.on_token = (*env)->GetMethodID(env, iface, "onToken", "(I)Z");
    sink.stopped = 0;
    sink.last = -1;
    (*env)->DeleteLocalRef(env, iface);
    if (!sink.on_token) {
        free(p);
        return;
    }
    st = cism_generate(FROM_HANDLE(cism_session, session), FROM_HANDLE(cism_sampler, sampler), p, n_prompt,
                       (int32_t)max_tokens, (uint32_t)flags, token_to_java, &sink, &n_generated);
    free(p);
    if ((*env)->ExceptionCheck(env)) return; /* thrown by the callback: rethrown in Java */
    if (st != CISM_OK && st != CISM_ERR_CANCELLED && st != CISM_ERR_CONTEXT_FULL) {
        throw_status(env, st);
        return;
    }
    result[0] = (jint)st;
    result[1] = (jint)n_generated;
    result[2] = (jint)sink.stopped;
    result[3] = (jint)sink.last;
    (*env)->SetIntArrayRegion(env, out, 0, 4, result);
}

/* ---- text: tokenizer, chat formats, streaming detokenizer --------------------------- */
JNIEXPORT jboolean JNICALL Java_org_libcism_Model_nativeHasTokenizer(JNIEnv *env, jclass cls, jlong model) {
    (void)env;
    (void)cls;
    return cism_model_has_tokenizer(FROM_HANDLE(cism_model, model)) ? JNI_TRUE : JNI_FALSE;
}

static jintArray new_ints(JNIEnv *env, const int32_t *v, int32_t n) {
    jint *tmp = (jint *)malloc(((size_t)n + 1) * sizeof(jint));
    jintArray out;
    int32_t i;
    if (!tmp) {
        throw_java(env, "java/lang/OutOfMemoryError", "libcism: out of memory");
        return NULL;
    }
    for (i = 0; i < n; i++) tmp[i] = (jint)v[i];
    out = (*env)->NewIntArray(env, (jsize)n);
    if (out) (*env)->SetIntArrayRegion(env, out, 0, (jsize)n, tmp);
    free(tmp);
    return out;
}

JNIEXPORT jintArray JNICALL Java_org_libcism_Model_nativeTokenize(JNIEnv *env, jclass cls, jlong model, jbyteArray text_utf8,
                                                                  jint flags) {
    const cism_model *m = FROM_HANDLE(cism_model, model);
    jsize len;
    char *text;
    int32_t n = 0, *tokens;
    cism_status st;
    jintArray out;
    (void)cls;
    if (!text_utf8) {
        throw_java(env, "java/lang/NullPointerException", "text");
        return NULL;
    }
    len = (*env)->GetArrayLength(env, text_utf8);
    text = (char *)malloc((size_t)len + 1);
    if (!text) {
        throw_java(env, "java/lang/OutOfMemoryError", "libcism: out of memory");
        return NULL;
    }
    (*env)->GetByteArrayRegion(env, text_utf8, 0, len, (jbyte *)text);
    /* ask for the count, then fill */
    st = cism_tokenize(m, text, (size_t)len, (uint32_t)flags, NULL, 0, &n);
    if (st != CISM_OK && st != CISM_ERR_BUFFER_SMALL) {
        throw_status(env, st);
        free(text);
        return NULL;
    }
    tokens = (int32_t *)malloc(((size_t)n + 1) * sizeof(int32_t));
    if (!tokens) {
        free(text);
        throw_java(env, "java/lang/OutOfMemoryError", "libcism: out of memory");
        return NULL;
    }
    st = cism_tokenize(m, text, (size_t)len, (uint32_t)flags, tokens, n, &n);
    free(text);
    if (st != CISM_OK) {
        throw_status(env, st);
        free(tokens);
        return NULL;
    }
    out = new_ints(env, tokens, n);
    free(tokens);
    return out;
}

JNIEXPORT jbyteArray JNICALL Java_org_libcism_Model_nativeDetokenize(JNIEnv *env, jclass cls, jlong model, jintArray tokens,
                                                                     jint flags) {
    const cism_model *m = FROM_HANDLE(cism_model, model);
    int32_t n = 0;
    int32_t *t = ints_arg(env, tokens, &n);
    size_t need = 0;
    char *text;
    cism_status st;
    jbyteArray out;
    (void)cls;
    if (!t) return NULL;
    st = cism_detokenize(m, t, n, (uint32_t)flags, NULL, 0, &need);
    if (st != CISM_OK && st != CISM_ERR_BUFFER_SMALL) {
        throw_status(env, st);
        free(t);
        return NULL;
    }
    text = (char *)malloc(need + 1);
    if (!text) {
        free(t);
        throw_java(env, "java/lang/OutOfMemoryError", "libcism: out of memory");
        return NULL;
    }
    st = cism_detokenize(m, t, n, (uint32_t)flags, text, need + 1, &need);
    free(t);
    if (st != CISM_OK) {
        throw_status(env, st);
        free(text);
        return NULL;
    }
    out = new_bytes(env, text, need);
    free(text);
    return out;
}

JNIEXPORT jbyteArray JNICALL Java_org_libcism_Model_nativeTokenPiece(JNIEnv *env, jclass cls, jlong model, jint token) {
    const char *piece = NULL;
    size_t len = 0;
    cism_status st = cism_token_to_piece(FROM_HANDLE(cism_model, model), (int32_t)token, &piece, &len);
    (void)cls;
    if (st != CISM_OK) {
        throw_status(env, st);
        return NULL;
    }
    return new_bytes(env, piece, len);
}

/* The model's chat format, or -1 when its file names none. */
JNIEXPORT jint JNICALL Java_org_libcism_Model_nativeChatFormat(JNIEnv *env, jclass cls, jlong model) {
    cism_chat_format format = 0;
    (void)env;
    (void)cls;
    return cism_model_chat_format(FROM_HANDLE(cism_model, model), &format) == CISM_OK ? (jint)format : -1;
}

/* Copies a byte[][] into n malloc'd buffers (lens in *lens); frees and returns 0 with an exception pending on failure. */
static int utf8_list(JNIEnv *env, jobjectArray list, jsize n, char **items, size_t *lens) {
    jsize i;
    for (i = 0; i < n; i++) items[i] = NULL;
    for (i = 0; i < n; i++) {
        jbyteArray a = (jbyteArray)(*env)->GetObjectArrayElement(env, list, i);
        jsize len;
        if (!a) {
            if (!(*env)->ExceptionCheck(env)) throw_java(env, "java/lang/NullPointerException", "chat message text");
            break;
        }
        len = (*env)->GetArrayLength(env, a);
        items[i] = (char *)malloc((size_t)len + 1);
        if (!items[i]) {
            (*env)->DeleteLocalRef(env, a);
            throw_java(env, "java/lang/OutOfMemoryError", "libcism: out of memory");
            break;
        }
        (*env)->GetByteArrayRegion(env, a, 0, len, (jbyte *)items[i]);
        lens[i] = (size_t)len;
        (*env)->DeleteLocalRef(env, a);
    }
    if (i == n) return 1;
    for (i = 0; i < n; i++) free(items[i]);
    return 0;
}

JNIEXPORT jbyteArray JNICALL Java_org_libcism_Model_nativeChatApply(JNIEnv *env, jclass cls, jlong model, jint format,
                                                                    jobjectArray roles, jobjectArray contents,
                                                                    jboolean add_generation_prompt) {
    const cism_model *m = FROM_HANDLE(cism_model, model);
    jsize n, i;
    char **r = NULL, **c = NULL, *text = NULL;
    size_t *rl = NULL, *cl = NULL, need = 0;
    cism_status st;
    jbyteArray out = NULL;
    (void)cls;
    n = (*env)->GetArrayLength(env, roles);
    if ((*env)->GetArrayLength(env, contents) != n) {
        throw_java(env, "java/lang/IllegalArgumentException", "roles and contents differ in length");
        return NULL;
    }
    r = (char **)calloc((size_t)n + 1, sizeof(char *));
    c = (char **)calloc((size_t)n + 1, sizeof(char *));
    rl = (size_t *)calloc((size_t)n + 1, sizeof(size_t));
    cl = (size_t *)calloc((size_t)n + 1, sizeof(size_t));
    if (!r || !c || !rl || !cl) {
        throw_java(env, "java/lang/OutOfMemoryError", "libcism: out of memory");
        goto done;
    }
    if (!utf8_list(env, roles, n, r, rl)) goto done;
    if (!utf8_list(env, contents, n, c, cl)) {
        for (i = 0; i < n; i++) free(r[i]);
        goto done;
    }
    st = cism_chat_apply(m, (cism_chat_format)format, (const char *const *)r, rl, (const char *const *)c, cl, (int32_t)n,
                         add_generation_prompt ? 1 : 0, NULL, 0, &need);
    if (st == CISM_OK || st == CISM_ERR_BUFFER_SMALL) {
        text = (char *)malloc(need + 1);
        if (!text) throw_java(env, "java/lang/OutOfMemoryError", "libcism: out of memory");
        else st = cism_chat_apply(m, (cism_chat_format)format, (const char *const *)r, rl, (const char *const *)c, cl,
                                  (int32_t)n, add_generation_prompt ? 1 : 0, text, need + 1, &need);
    }
    if (text && st == CISM_OK) out = new_bytes(env, text, need);
    else if (text || st != CISM_ERR_BUFFER_SMALL) throw_status(env, st);
    for (i = 0; i < n; i++) {
        free(r[i]);
        free(c[i]);
    }
done:
    free(text);
    free(r);
    free(c);
    free(rl);
    free(cl);
    return out;
}

JNIEXPORT jlong JNICALL Java_org_libcism_Session_nativeDetokenizerCreate(JNIEnv *env, jclass cls, jlong model, jint flags) {
    cism_detokenizer *d = NULL;
    cism_status st = cism_detokenizer_create(FROM_HANDLE(cism_model, model), (uint32_t)flags, &d);
    (void)cls;
    if (st != CISM_OK) throw_status(env, st);
    return TO_HANDLE(d);
}

JNIEXPORT void JNICALL Java_org_libcism_Session_nativeDetokenizerFree(JNIEnv *env, jclass cls, jlong detok) {
    (void)env;
    (void)cls;
    cism_detokenizer_free(FROM_HANDLE(cism_detokenizer, detok));
}

typedef struct text_sink {
    JNIEnv *env;
    jobject sink;
    jmethodID on_piece;
    cism_detokenizer *detok;
    cism_status error;   /* a detokenizer failure, reported after generation */
    int32_t stopped;
    int32_t last;
} text_sink;

/* Passes (token, its newly completed UTF-8 or null) to Java; 0 = go on. */
static int32_t piece_to_java(text_sink *k, int32_t token, const char *text, size_t len) {
    jbyteArray bytes = NULL;
    jboolean go;
    if (len > 0 && !(bytes = new_bytes(k->env, text, len))) return 1;
    go = (*k->env)->CallBooleanMethod(k->env, k->sink, k->on_piece, (jint)token, bytes);
    if (bytes) (*k->env)->DeleteLocalRef(k->env, bytes);
    if ((*k->env)->ExceptionCheck(k->env) || !go) return 1;
    return 0;
}

static int32_t text_to_java(void *user, int32_t token) {
    text_sink *k = (text_sink *)user;
    const char *text = NULL;
    size_t len = 0;
    cism_status st = cism_detokenizer_push(k->detok, token, &text, &len);
    k->last = token;
    if (st != CISM_OK) {
        k->error = st;
        k->stopped = 1;
        return 1;
    }
    if (piece_to_java(k, token, text, len)) {
        k->stopped = 1;
        return 1;
    }
    return 0;
}

JNIEXPORT void JNICALL Java_org_libcism_Session_nativeGenerateText(JNIEnv *env, jclass cls, jlong session, jlong sampler,
                                                                   jlong detok, jintArray prompt, jint max_tokens, jint flags,
                                                                   jobject sink, jintArray out) {
    text_sink k;
    jclass iface;
    int32_t n_prompt = 0, n_generated = 0;
    int32_t *p;
    cism_status st;
    jint result[4];
    (void)cls;
    if (!detok) {
        throw_java(env, "java/lang/IllegalStateException", "this model has no tokenizer");
        return;
    }
    p = ints_arg(env, prompt, &n_prompt);
    if (!p) return;
    iface = (*env)->FindClass(env, "org/libcism/TextSink");
    if (!iface) {
        free(p);
        return;
    }
    k.env = env;
    k.sink = sink;
    k.on_piece = (*env)->GetMethodID(env, iface, "onPiece", "(I[B)Z");
    k.detok = FROM_HANDLE(cism_detokenizer, detok);
    k.error = CISM_OK;
    k.stopped = 0;
    k.last = -1;
    (*env)->DeleteLocalRef(env, iface);
    if (!k.on_piece) {
        free(p);
        return;
    }
    cism_detokenizer_reset(k.detok);
    st = cism_generate(FROM_HANDLE(cism_session, session), FROM_HANDLE(cism_sampler, sampler), p, n_prompt,
                       (int32_t)max_tokens, (uint32_t)flags, text_to_java, &k, &n_generated);
    free(p);
    if ((*env)->ExceptionCheck(env)) return;
    if (k.error != CISM_OK) {
        throw_status(env, k.error);
        return;
    }
    if (st != CISM_OK && st != CISM_ERR_CANCELLED && st != CISM_ERR_CONTEXT_FULL) {
        throw_status(env, st);
        return;
    }
    { /* what the detokenizer held back (an incomplete character) */
        const char *text = NULL;
        size_t len = 0;
        if (cism_detokenizer_flush(k.detok, &text, &len) == CISM_OK && len > 0) {
            piece_to_java(&k, -1, text, len);
            if ((*env)->ExceptionCheck(env)) return;
        }
    }
    result[0] = (jint)st;
    result[1] = (jint)n_generated;
    result[2] = (jint)k.stopped;
    result[3] = (jint)k.last;
    (*env)->SetIntArrayRegion(env, out, 0, 4, result);
}
