/* state.h - saving and restoring session state (state.c, docs/SESSION_STATE.md). */
#ifndef CISM_STATE_H
#define CISM_STATE_H

#include "cism.h"

/* The sampler's part of a state file (sampler.c): its parameters, random
   generator and penalty history, in the layout SESSION_STATE.md describes. */
uint64_t cism__sampler_state_size(const cism_sampler *s);
void cism__sampler_state_write(const cism_sampler *s, uint8_t *dst);
/* Checks size bytes at src; on success replaces the sampler's state with them,
   on failure (message set) leaves it unchanged. */
cism_status cism__sampler_state_read(cism_sampler *s, const uint8_t *src, uint64_t size, const char *label);

/* Little-endian helpers shared by state.c and sampler.c. */
void cism__put_u32(uint8_t *p, uint32_t v);
void cism__put_u64(uint8_t *p, uint64_t v);
uint32_t cism__get_u32(const uint8_t *p);
uint64_t cism__get_u64(const uint8_t *p);

#endif
