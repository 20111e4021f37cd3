/* error.c - status strings, thread-local error messages, logging. */
#include "error.h"
#include "../platform/platform.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CISM__ERRMSG_SIZE 1024

static cism__once g_tls_once = CISM__ONCE_INIT;
static cism__tls *g_tls;
/* Used when thread-local storage could not be set up (out of memory). */
static char g_fallback_msg[CISM__ERRMSG_SIZE];

static void tls_init(void) { g_tls = cism__tls_create(); }

static char *thread_buffer(void) {
    char *buf;
    cism__call_once(&g_tls_once, tls_init);
    buf = (char *)cism__tls_get(g_tls);
    if (!buf) {
        buf = (char *)calloc(1, CISM__ERRMSG_SIZE);
        if (!buf || cism__tls_set(g_tls, buf) != 0) {
            free(buf);
            return g_fallback_msg;
        }
    }
    return buf;
}

const char *cism_status_str(cism_status status) {
    switch (status) {
    case CISM_OK: return "ok";
    case CISM_ERR_INVALID_ARG: return "invalid argument";
    case CISM_ERR_IO: return "input/output error";
    case CISM_ERR_FORMAT: return "invalid model file";
    case CISM_ERR_UNSUPPORTED: return "unsupported";
    case CISM_ERR_OUT_OF_MEMORY: return "out of memory";
    case CISM_ERR_CONTEXT_FULL: return "context full";
    case CISM_ERR_TOKEN_RANGE: return "token id out of range";
    case CISM_ERR_BUFFER_SMALL: return "buffer too small";
    case CISM_ERR_CANCELLED: return "cancelled";
    case CISM_ERR_STATE: return "invalid state";
    case CISM_ERR_EXISTS: return "file exists";
    case CISM_ERR_INTERNAL: return "internal error";
    case CISM_ERR_PERMISSION: return "not permitted";
    default: return "unknown status";
    }
}

const char *cism_last_error(void) { return thread_buffer(); }

void cism__clear_error(void) { thread_buffer()[0] = 0; }

cism_status cism__fail(cism_status status, const char *fmt, ...) {
    char *buf = thread_buffer();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, CISM__ERRMSG_SIZE, fmt, ap);
    va_end(ap);
    cism__log(CISM_LOG_DEBUG, "%s: %s", cism_status_str(status), buf);
    return status;
}

static cism_log_callback g_log_cb;
static void *g_log_user;
static int32_t g_log_level = CISM_LOG_INFO;

void cism_set_log_callback(cism_log_callback callback, void *user_data, int32_t min_level) {
    g_log_cb = callback;
    g_log_user = user_data;
    g_log_level = min_level;
}

void cism__log(int32_t level, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    cism_log_callback cb = g_log_cb;
    if (!cb || level < g_log_level) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cb(g_log_user, level, msg);
}
