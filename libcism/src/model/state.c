/* state.c - a session's state saved to a file and restored (docs/SESSION_STATE.md):
 * KV cache rows in use, the other layers' states (short-convolution inputs),
 * position, last logits, optionally the sampler. */
#include "state.h"
#include "session.h"
#include "layer_shortconv.h"
#include "deltanet.h"
#include "../core/crc32.h"
#include "../core/error.h"
#include "../platform/platform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATE_MAGIC "CISMSS\r\n"
#define STATE_VERSION 1u
#define STATE_HEADER 96u
#define STATE_FLAG_SAMPLER 1u
#define STATE_FLAG_LAYERS 2u   /* a section of the non-attention layers' states follows the KV cache */
/* sliding-window rows older than the ring kept are zeros: rewinding below
   n_past re-evaluates (session.c) */
#define STATE_FLAG_PARTIAL 4u
#define STATE_FLAG_RECURRENT 8u  /* a Gated DeltaNet model's recurrent state and conv tails follow */

/* Copies the K or V rows of positions [0, n) of (layer, head) to save_to, or
   from load_from; a ring keeps [kv_hi - ring, kv_hi): older rows save as zeros
   (returns 1 when some did) and load only where the ring has room. */
static int copy_rows(const cism_session *s, void *cache, int64_t l, int64_t h, int64_t n, uint8_t *save_to,
                     const uint8_t *load_from) {
    uint64_t rb = cache == s->v_cache ? s->kv_row_bytes_v : s->kv_row_bytes;
    int64_t ring = s->kv[l].ring, p, lo;
    int lost = 0;
    if (!ring) {
        if (save_to) memcpy(save_to, cism__kv_row(s, cache, l, h, 0), (size_t)(rb * (uint64_t)n));
        else memcpy(cism__kv_row(s, cache, l, h, 0), load_from, (size_t)(rb * (uint64_t)n));
        return 0;
    }
    lo = (save_to ? s->kv_hi : n) - ring;
    for (p = 0; p < n; p++) {
        uint64_t at = (uint64_t)p * rb;
        if (p < lo) {
            if (save_to) memset(save_to + at, 0, (size_t)rb);
            lost = 1;
        } else if (save_to) {
            memcpy(save_to + at, cism__kv_row(s, cache, l, h, p), (size_t)rb);
        } else {
            memcpy(cism__kv_row(s, cache, l, h, p), load_from + at, (size_t)rb);
            memcpy(cism__kv_row_copy(s, cache, l, h, p), load_from + at, (size_t)rb);
        }
    }
    return lost;
}

void cism__put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
void cism__put_u64(uint8_t *p, uint64_t v) {
    cism__put_u32(p, (uint32_t)v);
    cism__put_u32(p + 4, (uint32_t)(v >> 32));
}
uint32_t cism__get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
uint64_t cism__get_u64(const uint8_t *p) { return (uint64_t)cism__get_u32(p) | ((uint64_t)cism__get_u32(p + 4) << 32); }

/* FNV-1a, 64 bits: the model fingerprint. */
static uint64_t fnv(uint64_t h, const uint8_t *p, uint64_t n) {
    uint64_t i;
    for (i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* Binds a state to the model it came from: the file's header, metadata and
   tensor directory (hyper-parameters, tokenizer, every tensor's name, dtype,
   shape and place), then 64 bytes at the start, middle and end of every tensor
   (a fine-tune with the same shapes differs there). Reads a few pages per
   tensor, never the whole file. */
static uint64_t model_fingerprint(const cism_model *m) {
    const cism__file *f = &m->file;
    uint64_t h = 0xcbf29ce484222325ULL, head = f->view.size >= 64 ? cism__get_u64(f->view.data + 48) : 0;
    uint32_t i;
    if (head > f->view.size) head = f->view.size;
    h = fnv(h, f->view.data, head);
    for (i = 0; i < f->n_tensors; i++) {
        const cism__tensor_entry *t = &f->tensors[i];
        uint64_t n = t->size < 64 ? t->size : 64;
        h = fnv(h, t->data, n);
        h = fnv(h, t->data + (t->size - n) / 2, n);
        h = fnv(h, t->data + t->size - n, n);
    }
    return h;
}

/* The header's KV type field: the K dtype, plus KV_ROTATED when the rows are
   rotated (kv_quant.h), plus (V dtype + 1) << 16 when V's type differs from
   K's (CISM_PARAM_KV_TYPE_V). States of one type read as before. */
#define KV_ROTATED 0x100u
static uint32_t kv_code(const cism_session *s) {
    return (uint32_t)s->kv_type | (s->kv_rot ? KV_ROTATED : 0u) |
           (s->kv_type_v != s->kv_type ? ((uint32_t)s->kv_type_v + 1u) << 16 : 0u);
}
static void kv_describe(uint32_t code, char *out, size_t n) {
    const uint32_t k = code & 0xffu, v1 = (code >> 16) & 0xffu;
    const int ok = k < CISM__DTYPE_COUNT && v1 <= CISM__DTYPE_COUNT && (code & 0xff00fe00u) == 0;
    const char *kname = ok ? cism_dtype_name((cism_dtype)k) : NULL;
    const char *vname = ok && v1 ? cism_dtype_name((cism_dtype)(v1 - 1u)) : NULL;
    if (!kname || (v1 && !vname)) snprintf(out, n, "unknown (code %#x)", (unsigned)code);
    else if (v1) snprintf(out, n, "K %s + V %s%s", kname, vname, code & KV_ROTATED ? " (rotated, kv_rotate 1)" : "");
    else snprintf(out, n, "%s%s", kname, code & KV_ROTATED ? " (rotated, kv_rotate 1)" : "");
}

/* Bytes of the recurrent section: the current snapshot (deltanet.h), 0 without DeltaNet layers. */
static uint64_t recurrent_bytes(const cism__hparams *hp) { return (uint64_t)cism__dn_snapshot_floats(hp) * 4u; }

cism_status cism_session_save(const cism_session *s, const cism_sampler *sampler, const char *path) {
    const cism__hparams *hp;
    uint64_t row_bytes, row_bytes_v, kv_bytes, logit_bytes, samp_bytes, total, off, layer_bytes, rec_bytes;
    uint8_t *buf;
    int has_layers;
    int64_t l, h;
    char err[600];
    int rc, partial = 0;
    cism__clear_error();
    if (!s || !path) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_save: %s is NULL", s ? "path" : "session");
    hp = &s->model->hp;
    row_bytes = (uint64_t)s->n_past * s->kv_row_bytes;
    row_bytes_v = (uint64_t)s->n_past * s->kv_row_bytes_v;
    kv_bytes = (uint64_t)hp->n_kv_layers * (uint64_t)hp->n_kv_heads * (row_bytes + row_bytes_v); /* attention layers' */
    logit_bytes = (uint64_t)s->logit_rows * (uint64_t)hp->vocab * 4u;
    samp_bytes = sampler ? cism__sampler_state_size(sampler) : 0;
    has_layers = hp->n_shortconv > 0;
    layer_bytes = cism__shortconv_state_bytes(s, s->n_past);
    rec_bytes = recurrent_bytes(hp);
    total = STATE_HEADER + kv_bytes + (has_layers ? 8u + layer_bytes : 0u) + rec_bytes + 4u * (uint64_t)s->n_past +
            logit_bytes + samp_bytes + 4u;
    if ((uint64_t)(size_t)total != total || !(buf = (uint8_t *)malloc((size_t)total)))
        return cism__fail(CISM_ERR_OUT_OF_MEMORY, "out of memory for the session state (%.1f MiB)", (double)total / 1048576.0);
    memset(buf, 0, STATE_HEADER);
    memcpy(buf, STATE_MAGIC, 8);
    cism__put_u32(buf + 8, STATE_VERSION);
    cism__put_u32(buf + 12, (sampler ? STATE_FLAG_SAMPLER : 0u) | (has_layers ? STATE_FLAG_LAYERS : 0u) |
                                (rec_bytes ? STATE_FLAG_RECURRENT : 0u));
    cism__put_u64(buf + 16, model_fingerprint(s->model));
    cism__put_u32(buf + 24, (uint32_t)hp->vocab);
    cism__put_u32(buf + 28, (uint32_t)hp->n_layers);
    cism__put_u32(buf + 32, (uint32_t)hp->n_kv_heads);
    cism__put_u32(buf + 36, (uint32_t)hp->head_dim);
    cism__put_u32(buf + 40, kv_code(s));
    cism__put_u32(buf + 44, (uint32_t)s->n_ctx);
    cism__put_u32(buf + 48, (uint32_t)s->n_past);
    cism__put_u32(buf + 52, s->logit_rows ? (uint32_t)s->last_n : 0u); /* after a rewind: no rows, no last eval */
    cism__put_u32(buf + 56, (uint32_t)s->logit_rows);
    cism__put_u32(buf + 60, (uint32_t)(s->act_quant ? 1 : 0) | (uint32_t)(s->act_outliers ? 2 : 0)); /* informative */
    cism__put_u64(buf + 64, kv_bytes);
    cism__put_u64(buf + 72, logit_bytes);
    cism__put_u64(buf + 80, samp_bytes);
    cism__put_u64(buf + 88, total);
    off = STATE_HEADER;
    for (l = 0; l < hp->n_layers; l++) { /* the attention layers' K and V, in layer order */
        int c;
        if (s->model->layers[l].kind != CISM__LAYER_ATTENTION) continue;
        for (c = 0; c < 2; c++) /* K rows of every head, then V */
            for (h = 0; h < hp->n_kv_heads; h++) {
                if (copy_rows(s, c ? s->v_cache : s->k_cache, l, h, s->n_past, buf + off, NULL) ||
                    s->kv_min_keep > 0)
                    partial = 1;
                off += c ? row_bytes_v : row_bytes;
            }
    }
    if (partial) cism__put_u32(buf + 12, cism__get_u32(buf + 12) | STATE_FLAG_PARTIAL);
    if (has_layers) {
        cism__put_u64(buf + off, layer_bytes);
        cism__shortconv_state_write(s, s->n_past, buf + off + 8);
        off += 8u + layer_bytes;
    }
    if (rec_bytes) memcpy(buf + off, s->dn->buf[s->dn->cur], (size_t)rec_bytes);
    off += rec_bytes;
    for (l = 0; l < s->n_past; l++, off += 4) cism__put_u32(buf + off, (uint32_t)s->tokens[l]);
    if (logit_bytes) memcpy(buf + off, s->logits, (size_t)logit_bytes);
    off += logit_bytes;
    if (sampler) cism__sampler_state_write(sampler, buf + off);
    off += samp_bytes;
    cism__put_u32(buf + off, cism__crc32(0, buf, off));
    rc = cism__file_write_atomic(path, buf, total, err, sizeof(err));
    free(buf);
    if (rc != 0) return cism__fail(CISM_ERR_IO, "cannot save the session state: %s (nothing was overwritten)", err);
    return CISM_OK;
}

static cism_status load_view(cism_session *s, cism_sampler *sampler, const uint8_t *d, uint64_t size, const char *path) {
    const cism__hparams *hp = &s->model->hp;
    uint32_t version, flags, kv_type, n_past, last_n, rows, keep_rows;
    uint64_t row_bytes, row_bytes_v, kv_bytes, logit_bytes, samp_bytes, off, fp, layer_bytes, layer_sec, rec_bytes = recurrent_bytes(hp);
    int64_t l, h;
    int has_layers = hp->n_shortconv > 0;
    if (size < STATE_HEADER + 4u || memcmp(d, STATE_MAGIC, 8) != 0) {
        if (size >= 8 && memcmp(d, "CISM\r\n\x1a\n", 8) == 0)
            return cism__fail(CISM_ERR_FORMAT, "%s: this is a .cism model file, not a session state", path);
        if (size >= 8 && memcmp(d, STATE_MAGIC, 8) == 0)
            return cism__fail(CISM_ERR_FORMAT, "%s: session state truncated (%llu bytes)", path, (unsigned long long)size);
        return cism__fail(CISM_ERR_FORMAT, "%s: not a libcism session state (bad magic bytes)", path);
    }
    version = cism__get_u32(d + 8);
    if (version != STATE_VERSION)
        return cism__fail(CISM_ERR_UNSUPPORTED, "%s: session state layout version %u is not supported (this library reads "
                          "version %u); start the conversation again", path, version, STATE_VERSION);
    if (cism__get_u64(d + 88) != size)
        return cism__fail(CISM_ERR_FORMAT, "%s: session state has %llu bytes but its header says %llu (truncated or extended)",
                          path, (unsigned long long)size, (unsigned long long)cism__get_u64(d + 88));
    if (cism__crc32(0, d, size - 4) != cism__get_u32(d + size - 4))
        return cism__fail(CISM_ERR_FORMAT, "%s: session state is corrupted (checksum mismatch)", path);
    flags = cism__get_u32(d + 12);
    fp = cism__get_u64(d + 16);
    if (flags & ~(STATE_FLAG_SAMPLER | STATE_FLAG_LAYERS | STATE_FLAG_PARTIAL | STATE_FLAG_RECURRENT))
        return cism__fail(CISM_ERR_FORMAT, "%s: unknown flags 0x%x", path, flags);
    if (((flags & STATE_FLAG_RECURRENT) != 0) != (rec_bytes != 0))
        return cism__fail(CISM_ERR_INVALID_ARG, "%s: session state %s the recurrent state of linear-attention layers, which this "
                          "model %s: load it with the model it was saved from", path,
                          (flags & STATE_FLAG_RECURRENT) ? "holds" : "lacks", rec_bytes ? "needs" : "does not have");
    if (cism__get_u32(d + 24) != (uint32_t)hp->vocab || cism__get_u32(d + 28) != (uint32_t)hp->n_layers ||
        cism__get_u32(d + 32) != (uint32_t)hp->n_kv_heads || cism__get_u32(d + 36) != (uint32_t)hp->head_dim)
        return cism__fail(CISM_ERR_INVALID_ARG, "%s: session state comes from another model (vocab %u, %u layers, %u KV heads "
                          "of %u; this model: %lld, %lld, %lld of %lld)", path, cism__get_u32(d + 24), cism__get_u32(d + 28),
                          cism__get_u32(d + 32), cism__get_u32(d + 36), (long long)hp->vocab, (long long)hp->n_layers,
                          (long long)hp->n_kv_heads, (long long)hp->head_dim);
    if (fp != model_fingerprint(s->model))
        return cism__fail(CISM_ERR_INVALID_ARG, "%s: session state comes from another model file (fingerprint %016llx, this "
                          "model %016llx): load it with the model it was saved from", path, (unsigned long long)fp,
                          (unsigned long long)model_fingerprint(s->model));
    kv_type = cism__get_u32(d + 40);
    if (kv_type != kv_code(s)) {
        char saved[64], mine[64];
        kv_describe(kv_type, saved, sizeof(saved));
        kv_describe(kv_code(s), mine, sizeof(mine));
        return cism__fail(CISM_ERR_INVALID_ARG, "%s: session state holds a %s KV cache, this session's is %s: create the "
                          "session with that KV type (kv_type, kv_type_v and kv_rotate)", path, saved, mine);
    }
    n_past = cism__get_u32(d + 48);
    last_n = cism__get_u32(d + 52);
    rows = cism__get_u32(d + 56);
    if ((int64_t)n_past > s->n_ctx)
        return cism__fail(CISM_ERR_CONTEXT_FULL, "%s: session state holds %u positions, more than this session's context "
                          "(n_ctx %lld): create it with n_ctx >= %u", path, n_past, (long long)s->n_ctx, n_past);
    if (rows == 0 ? last_n != 0 : (last_n < 1 || last_n > n_past || (rows != 1 && rows != last_n)))
        return cism__fail(CISM_ERR_FORMAT, "%s: session state's position fields are inconsistent", path);
    row_bytes = (uint64_t)n_past * s->kv_row_bytes;
    row_bytes_v = (uint64_t)n_past * s->kv_row_bytes_v;
    kv_bytes = (uint64_t)hp->n_kv_layers * (uint64_t)hp->n_kv_heads * (row_bytes + row_bytes_v); /* attention layers' */
    logit_bytes = (uint64_t)rows * (uint64_t)hp->vocab * 4u;
    samp_bytes = cism__get_u64(d + 80);
    if (((flags & STATE_FLAG_LAYERS) != 0) != has_layers)
        return cism__fail(CISM_ERR_INVALID_ARG, "%s: session state %s the state of short-convolution layers, this model %s them: it "
                          "comes from another model", path, has_layers ? "lacks" : "holds", has_layers ? "has" : "has none of");
    layer_bytes = cism__shortconv_state_bytes(s, n_past);
    layer_sec = has_layers ? 8u + layer_bytes : 0u;
    if (cism__get_u64(d + 64) != kv_bytes || cism__get_u64(d + 72) != logit_bytes || samp_bytes > size ||
        STATE_HEADER + kv_bytes + layer_sec + rec_bytes + 4u * (uint64_t)n_past + logit_bytes + samp_bytes + 4u != size ||
        ((flags & STATE_FLAG_SAMPLER) != 0) != (samp_bytes != 0) ||
        (has_layers && cism__get_u64(d + STATE_HEADER + kv_bytes) != layer_bytes))
        return cism__fail(CISM_ERR_FORMAT, "%s: session state's section sizes do not match its header", path);
    if (sampler && !(flags & STATE_FLAG_SAMPLER))
        return cism__fail(CISM_ERR_INVALID_ARG, "%s: session state was saved without a sampler: load it with sampler NULL", path);
    for (off = STATE_HEADER + kv_bytes + layer_sec + rec_bytes, l = 0; l < (int64_t)n_past; l++, off += 4)
        if ((int64_t)cism__get_u32(d + off) >= hp->vocab)
            return cism__fail(CISM_ERR_FORMAT, "%s: session state's token %lld is outside the vocabulary", path, (long long)l);
    /* room for the logits rows this session keeps */
    keep_rows = rows > 1 && !s->logits_all ? 1 : rows;
    if (keep_rows > s->logits_cap) {
        float *p = (float *)realloc(s->logits, (size_t)keep_rows * (size_t)hp->vocab * sizeof(float));
        if (!p) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "out of memory for %u rows of logits", keep_rows);
        s->logits = p;
        s->logits_cap = keep_rows;
    }
    off = STATE_HEADER + kv_bytes + layer_sec + rec_bytes + 4u * (uint64_t)n_past + logit_bytes;
    if (sampler) {
        cism_status st = cism__sampler_state_read(sampler, d + off, samp_bytes, path);
        if (st != CISM_OK) return st;
    }
    /* checked: commit */
    off = STATE_HEADER;
    for (l = 0; l < hp->n_layers; l++) { /* the attention layers' K and V, in layer order */
        int c;
        if (s->model->layers[l].kind != CISM__LAYER_ATTENTION) continue;
        for (c = 0; c < 2; c++)
            for (h = 0; h < hp->n_kv_heads; h++) {
                copy_rows(s, c ? s->v_cache : s->k_cache, l, h, n_past, NULL, d + off);
                off += c ? row_bytes_v : row_bytes;
            }
    }
    s->kv_hi = (int32_t)n_past;
    s->kv_min_keep = flags & STATE_FLAG_PARTIAL ? (int32_t)n_past : 0;
    if (has_layers) cism__shortconv_state_read(s, n_past, d + off + 8);
    off += layer_sec;
    if (rec_bytes) { /* the saved position's state; no checkpoints before it (a rewind evaluates again from 0) */
        cism__dn_reset(s);
        memcpy(s->dn->buf[s->dn->cur], d + off, (size_t)rec_bytes);
    }
    off += rec_bytes;
    for (l = 0; l < (int64_t)n_past; l++, off += 4) s->tokens[l] = (int32_t)cism__get_u32(d + off);
    if (keep_rows)
        memcpy(s->logits, d + off + (uint64_t)(rows - keep_rows) * (uint64_t)hp->vocab * 4u,
               (size_t)keep_rows * (size_t)hp->vocab * sizeof(float));
    s->n_past = (int32_t)n_past;
    s->last_n = (int32_t)last_n;
    s->logit_rows = (int32_t)keep_rows;
    return CISM_OK;
}

cism_status cism_session_load(cism_session *s, cism_sampler *sampler, const char *path) {
    cism__file_view view;
    char err[600];
    cism_status st;
    cism__clear_error();
    if (!s || !path) return cism__fail(CISM_ERR_INVALID_ARG, "cism_session_load: %s is NULL", s ? "path" : "session");
    if (cism__file_view_open(&view, path, 1, err, sizeof(err)) != 0) return cism__fail(CISM_ERR_IO, "%s", err);
    st = load_view(s, sampler, view.data, view.size, path);
    cism__file_view_close(&view);
    return st;
}
