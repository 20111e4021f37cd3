/* layer_shortconv.h - LFM2's gated short-convolution layers (layer_shortconv.c):
 * their stages of the forward pass and their part of a session (the conv
 * cache, docs/SESSION_STATE.md). */
#ifndef CISM_LAYER_SHORTCONV_H
#define CISM_LAYER_SHORTCONV_H

#include "forward.h"

/* Bytes of a session's conv cache: n_ctx positions of every conv layer's
   inputs, in the KV type (elem bytes each). */
int64_t cism__shortconv_cache_bytes(const cism__hparams *hp, int64_t n_ctx, int64_t elem);
/* Allocates s->conv_cache (s->n_ctx, s->kv_type set); nothing without conv
   layers. CISM_OK or OUT_OF_MEMORY with a message. */
cism_status cism__shortconv_session_init(cism_session *s);

/* The conv layers' part of a state file for positions [0, n_past): its size,
   and the copy out of / into the session (state.c checked the size). */
uint64_t cism__shortconv_state_bytes(const cism_session *s, int64_t n_past);
void cism__shortconv_state_write(const cism_session *s, int64_t n_past, uint8_t *dst);
void cism__shortconv_state_read(cism_session *s, int64_t n_past, const uint8_t *src);

/* Stage `kind` (ST_QKV, ST_ATT or ST_WO) of conv layer l: begin (once,
   returns the units) and one unit (forward.c dispatches them). */
int64_t cism__shortconv_begin(fwd *f, int64_t l, int kind);
void cism__shortconv_unit(fwd *f, int64_t l, int kind, int64_t u);

#endif
