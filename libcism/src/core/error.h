/* error.h - thread-local error messages and the log callback. */
#ifndef CISM_ERROR_H
#define CISM_ERROR_H

#include "cism.h"

#if defined(__GNUC__) || defined(__clang__)
#define CISM__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CISM__PRINTF(a, b)
#endif

/* Records a message for cism_last_error() on this thread and returns status. */
cism_status cism__fail(cism_status status, const char *fmt, ...) CISM__PRINTF(2, 3);
/* Empties this thread's message (called at the start of fallible API calls). */
void cism__clear_error(void);
/* Sends a message to the log callback, if one is set and level passes. */
void cism__log(int32_t level, const char *fmt, ...) CISM__PRINTF(2, 3);

#endif
