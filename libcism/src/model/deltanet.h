/* deltanet.h - the session state of Gated DeltaNet layers (Qwen3.5's linear
 * attention, layer_deltanet.c) and its checkpoints (docs/SESSION_STATE.md).
 *
 * The delta rule runs in blocks of CISM__DN_CHUNK positions at fixed absolute
 * positions (layer_deltanet.c). Per DeltaNet layer a session holds, all f32:
 * the state at the start of the current block, transposed [v_heads][v_dim][k_dim];
 * the conv tail [conv - 1][channels] (the last conv - 1 projected inputs,
 * oldest first); and the current block's positions so far (n_past mod
 * CISM__DN_CHUNK of them): per value head their normalized keys
 * [CISM__DN_CHUNK][k_dim], deltas [CISM__DN_CHUNK][v_dim] and cumulative log
 * decays [CISM__DN_CHUNK]. One "snapshot" is every layer's, contiguous. The current snapshot is
 * one of two buffers: a pass reads the current one and writes the other, and
 * only a kept pass flips them (cism__dn_commit), so a cancelled or failed pass
 * leaves the state where it was, and the other buffer then holds the state at
 * the start of the last kept pass (a free checkpoint for a short rewind).
 * Besides, each pass copies the snapshot at every absolute position that is a
 * multiple of CISM__DN_CKPT_EVERY into a ring of CISM__DN_CKPT_SLOTS slots.
 * A rewind restores the nearest of these at or before n_keep (or the zero
 * state) and evaluates the session's own tokens from there to n_keep, so the
 * result is bit-identical to a fresh evaluation. */
#ifndef CISM_DELTANET_H
#define CISM_DELTANET_H

#include "session.h"

#define CISM__DN_CHUNK 64
#define CISM__DN_CKPT_EVERY 128  /* a multiple of CISM__DN_CHUNK: the block part is empty at a checkpoint */
#define CISM__DN_CKPT_SLOTS 4

typedef struct cism__dn_state {
    int64_t state_floats;   /* one layer's recurrent state (at the block start) */
    int64_t tail_floats;    /* one layer's conv tail */
    int64_t layer_floats;   /* one layer's state + conv tail + block part */
    int64_t floats;         /* one snapshot: every DeltaNet layer's */
    int64_t slot_floats;    /* one checkpoint: every layer's state + conv tail (no block part) */
    float *buf[2];          /* the current snapshot is buf[cur] */
    int cur;
    int32_t prev_pos;       /* the position buf[1 - cur] holds (the start of the last kept pass); -1: none */
    float *slots;           /* [CISM__DN_CKPT_SLOTS][slot_floats] */
    int32_t slot_pos[CISM__DN_CKPT_SLOTS];  /* the position each slot holds; -1: none */
    int32_t pass_pos;       /* n_past at the start of the pass in flight */
} cism__dn_state;

/* Floats of one snapshot; bytes a session keeps for the state (both buffers and the slots). */
int64_t cism__dn_snapshot_floats(const cism__hparams *hp);
int64_t cism__dn_session_bytes(const cism__hparams *hp);
/* Allocates s->dn when the model has DeltaNet layers (zero state); 0 on success. */
int cism__dn_session_init(cism_session *s);
void cism__dn_session_free(cism_session *s);
/* The zero state at position 0, no checkpoints. */
void cism__dn_reset(cism_session *s);
/* Before a pass of nt tokens at s->n_past: the slots it will write lose their positions. */
void cism__dn_begin_pass(cism_session *s, int64_t nt);
/* After a kept pass of nt tokens that started at s->n_past (called before n_past moves). */
void cism__dn_commit(cism_session *s, int64_t nt);
/* Moves s to n_keep (<= n_past) with the state a fresh evaluation of its first
   n_keep tokens gives: the nearest checkpoint, then the tokens from it. Leaves
   the logits untouched (the caller clears or recomputes them). */
cism_status cism__dn_rewind(cism_session *s, int32_t n_keep);

/* The forward pass's scratch for the output gate and DeltaNet layers (work.c). */
int64_t cism__mix_row_floats(const cism__hparams *hp);
int64_t cism__mix_thread_floats(const cism__hparams *hp);

#endif
