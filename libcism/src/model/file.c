/* file.c - parsing and structural validation of .cism files. */
#include "file.h"
#include "../core/crc32.h"
#include "../core/error.h"
#include "../kernels/dtype.h"
#include "../kernels/quant.h"

#include <stdlib.h>
#include <string.h>

/* A bounds-checked little-endian reader over [pos, end). */
typedef struct reader {
    const uint8_t *base;
    uint64_t pos, end;
    int failed;
} reader;

static uint64_t rd_u64_at(const uint8_t *p) {
    uint64_t v = 0;
    int i;
    for (i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint32_t rd_u32_at(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static int rd_need(reader *r, uint64_t n) {
    if (r->failed || n > r->end - r->pos) { r->failed = 1; return 0; }
    return 1;
}
static uint32_t rd_u32(reader *r) {
    uint32_t v;
    if (!rd_need(r, 4)) return 0;
    v = rd_u32_at(r->base + r->pos);
    r->pos += 4;
    return v;
}
static uint64_t rd_u64(reader *r) {
    uint64_t v;
    if (!rd_need(r, 8)) return 0;
    v = rd_u64_at(r->base + r->pos);
    r->pos += 8;
    return v;
}
static const uint8_t *rd_bytes(reader *r, uint64_t n) {
    const uint8_t *p;
    if (!rd_need(r, n)) return NULL;
    p = r->base + r->pos;
    r->pos += n;
    return p;
}

static int valid_key(const uint8_t *s, uint32_t n) {
    uint32_t i;
    for (i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.')) return 0;
    }
    return 1;
}
static int valid_name(const uint8_t *s, uint32_t n) {
    uint32_t i;
    for (i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e) return 0;
    return 1;
}

void cism__file_close(cism__file *f) {
    if (!f) return;
    cism__file_view_close(&f->view);
    free(f->meta);
    free(f->tensors);
    free(f->names);
    free(f->meta_sorted);
    free(f->tensor_sorted);
    memset(f, 0, sizeof(*f));
}

static int has_x16(const cism__file *f) {
    uint32_t i;
    for (i = 0; i < f->n_tensors; i++)
        if (cism__dtype_is_x16(f->tensors[i].dtype)) return 1;
    return 0;
}

/* Version 1 stored each group of an interleaved matrix as all codes, then all
   scales: rearrange those tensors of a private copy of the file in place. */
static cism_status upgrade_v1(cism__file *f, const char *path) {
    uint8_t *tmp = NULL;
    uint64_t tmp_size = 0;
    uint32_t i;
    cism__log(CISM_LOG_WARN, "%s: format version 1 with interleaved weights: rearranged at load, in a private copy "
                             "(`cism upgrade` rewrites it as a version 2 file, which is mapped as is)", path);
    for (i = 0; i < f->n_tensors; i++) {
        const cism__tensor_entry *t = &f->tensors[i];
        uint64_t rb, gb, g;
        if (!cism__dtype_is_x16(t->dtype)) continue;
        rb = cism__row_bytes(t->dtype, t->dims[t->n_dims - 1]);
        gb = rb * CISM__X16;
        if (gb > tmp_size) {
            free(tmp);
            tmp = (uint8_t *)malloc((size_t)gb);
            tmp_size = gb;
            if (!tmp) return cism__fail(CISM_ERR_OUT_OF_MEMORY, "%s: out of memory rearranging version 1 weights", path);
        }
        for (g = 0; g + gb <= t->size; g += gb) cism__x16_from_v1(t->dtype, (uint8_t *)(uintptr_t)t->data + g, rb, tmp);
    }
    free(tmp);
    return CISM_OK;
}

cism_status cism__file_open(cism__file *f, const char *path, int use_mmap) {
    char err[512];
    cism__file_view view;
    cism_status st;
    memset(f, 0, sizeof(*f));
    if (cism__file_view_open(&view, path, use_mmap, err, sizeof(err)) != 0)
        return cism__fail(CISM_ERR_IO, "%s", err);
    if ((st = cism__file_parse(f, &view, path)) != CISM_OK || f->version != 1 || !has_x16(f)) return st;
    if (f->view.mapped == 1) { /* a mapping is read-only: reopen as a copy */
        cism__file_close(f);
        if (cism__file_view_open(&view, path, 0, err, sizeof(err)) != 0) return cism__fail(CISM_ERR_IO, "%s", err);
        if ((st = cism__file_parse(f, &view, path)) != CISM_OK) return st;
    }
    if ((st = upgrade_v1(f, path)) != CISM_OK) cism__file_close(f);
    return st;
}

static int cmp_offset(const void *a, const void *b) {
    const cism__tensor_entry *x = *(const cism__tensor_entry *const *)a;
    const cism__tensor_entry *y = *(const cism__tensor_entry *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : 0;
}

static int cmp_meta(const void *a, const void *b) {
    return strcmp((*(const cism__meta_entry *const *)a)->key, (*(const cism__meta_entry *const *)b)->key);
}
static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp((*(const cism__tensor_entry *const *)a)->name, (*(const cism__tensor_entry *const *)b)->name);
}

#define BAD(...) do { st = cism__fail(CISM_ERR_FORMAT, __VA_ARGS__); goto fail; } while (0)

/* Version 3: the CRC-32 of [0, end) with the checksum field taken as zero. */
static uint32_t header_crc(const uint8_t *d, uint64_t end) {
    static const uint8_t zero[4] = {0, 0, 0, 0};
    uint32_t c = cism__crc32(0, d, CISM__HEADER_CRC_AT);
    c = cism__crc32(c, zero, 4);
    return cism__crc32(c, d + CISM__HEADER_CRC_AT + 4, (size_t)(end - CISM__HEADER_CRC_AT - 4));
}

cism_status cism__file_verify_data(const cism__file *f, const char *label) {
    uint32_t i;
    if (!f->has_checksums) {
        cism__log(CISM_LOG_WARN, "%s: format version %u has no checksums: its data cannot be verified "
                                 "(`cism upgrade` rewrites it as version %u, with checksums)", label, f->version, CISM__FILE_VERSION);
        return CISM_OK;
    }
    for (i = 0; i < f->n_tensors; i++) {
        const cism__tensor_entry *t = &f->tensors[i];
        const uint8_t *p = t->data;
        uint64_t left = t->size;
        uint32_t c = 0;
        while (left > 0) { /* pieces: a size_t may be 32 bits */
            size_t n = left > ((uint64_t)1 << 30) ? (size_t)1 << 30 : (size_t)left;
            c = cism__crc32(c, p, n);
            p += n;
            left -= n;
        }
        if (c != t->crc)
            return cism__fail(CISM_ERR_FORMAT, "%s: the data of tensor '%s' does not match its checksum: the file is corrupt "
                              "(damaged on disk or in transfer, or edited); download or convert it again", label, t->name);
    }
    return CISM_OK;
}

cism_status cism__file_parse(cism__file *f, cism__file_view *view, const char *label) {
    cism_status st;
    const uint8_t *d = view->data;
    uint64_t size = view->size;
    uint64_t meta_off, meta_size, tens_off, tens_size, data_off, data_size;
    uint64_t names_total = 0, names_used = 0;
    uint32_t flags, i, hdr_size;
    int crc_checked = 0;
    reader r;
    cism__tensor_entry **order = NULL;

    memset(f, 0, sizeof(*f));
    f->view = *view;
    memset(view, 0, sizeof(*view));

    if (size < CISM__HEADER_SIZE) BAD("%s: file too short (%llu bytes) for a .cism header", label, (unsigned long long)size);
    if (memcmp(d, CISM__FILE_MAGIC, 8) != 0) {
        if (memcmp(d, "GGUF", 4) == 0) BAD("%s: this is a GGUF file, not a .cism file (convert the original checkpoint with `cism convert`)", label);
        BAD("%s: not a .cism file (bad magic bytes)", label);
    }
    f->version = rd_u32_at(d + 8);
    if (f->version < 1 || f->version > CISM__FILE_VERSION) {
        st = cism__fail(CISM_ERR_UNSUPPORTED, "%s: .cism format version %u is not supported (this library reads versions 1 to %u)",
                        label, f->version, CISM__FILE_VERSION);
        goto fail;
    }
    hdr_size = f->version >= 3 ? CISM__HEADER_SIZE_V3 : CISM__HEADER_SIZE;
    if (size < hdr_size)
        BAD("%s: file too short (%llu bytes) for a version %u .cism header (%u bytes)", label, (unsigned long long)size,
            f->version, hdr_size);
    f->has_checksums = f->version >= 3;
    /* Version 3: the checksum of header, metadata and directory comes first, so
       an edited or damaged byte anywhere in them is reported as what it is.
       (When the directory's end is not inside the file, the structural checks
       below refuse the file, and the checksum is checked after them otherwise.) */
    tens_off = rd_u64_at(d + 32);
    tens_size = rd_u64_at(d + 40);
    if (f->has_checksums && tens_off >= hdr_size && tens_off <= size && tens_size <= size - tens_off) {
        uint32_t want = rd_u32_at(d + CISM__HEADER_CRC_AT), got = header_crc(d, tens_off + tens_size);
        if (want != got)
            BAD("%s: the header checksum does not match (stored %08x, computed %08x): the header, metadata or tensor "
                "directory changed after the file was written; the file is corrupt or was edited; convert it again",
                label, want, got);
        crc_checked = 1;
    }
    flags = rd_u32_at(d + 12);
    if (flags != 0) BAD("%s: header flags 0x%x are not defined in version %u", label, flags, f->version);
    meta_off = rd_u64_at(d + 16);
    meta_size = rd_u64_at(d + 24);
    tens_off = rd_u64_at(d + 32);
    tens_size = rd_u64_at(d + 40);
    data_off = rd_u64_at(d + 48);
    data_size = rd_u64_at(d + 56);
    if (meta_off != hdr_size) {
        if (f->version < 3 && meta_off == CISM__HEADER_SIZE_V3)
            BAD("%s: metadata offset %llu must be %u in format version %u: this looks like a version 3 file whose version "
                "field was changed; the file is corrupt or was edited; convert it again", label,
                (unsigned long long)meta_off, hdr_size, f->version);
        BAD("%s: metadata offset %llu must be %u", label, (unsigned long long)meta_off, hdr_size);
    }
    if (meta_size > size - meta_off) BAD("%s: metadata section (%llu bytes) runs past the end of the file (truncated?)", label, (unsigned long long)meta_size);
    if (tens_off != meta_off + meta_size) BAD("%s: tensor directory must follow the metadata", label);
    if (tens_size > size - tens_off) BAD("%s: tensor directory runs past the end of the file (truncated?)", label);
    if (data_off % CISM__ALIGN != 0) BAD("%s: data offset %llu is not a multiple of %u", label, (unsigned long long)data_off, CISM__ALIGN);
    if (data_off < tens_off + tens_size) BAD("%s: data section overlaps the tensor directory", label);
    if (data_off > size || data_size > size - data_off)
        BAD("%s: data section (%llu bytes at %llu) runs past the end of the file (%llu bytes; truncated?)", label,
            (unsigned long long)data_size, (unsigned long long)data_off, (unsigned long long)size);
    f->data_size = data_size;
    if (f->has_checksums) {
        if (!crc_checked && rd_u32_at(d + CISM__HEADER_CRC_AT) != header_crc(d, tens_off + tens_size))
            BAD("%s: the header checksum does not match: the file is corrupt or was edited; convert it again", label);
        for (i = CISM__HEADER_CRC_AT + 4; i < CISM__HEADER_SIZE_V3; i++)
            if (d[i] != 0) BAD("%s: header byte %u is reserved in format version %u and must be 0", label, i, f->version);
    }

    /* ---- metadata ---- */
    r.base = d; r.pos = meta_off; r.end = meta_off + meta_size; r.failed = 0;
    f->n_meta = rd_u32(&r);
    if (r.failed) BAD("%s: metadata section is truncated", label);
    if (f->n_meta > CISM__MAX_ENTRIES) BAD("%s: %u metadata entries is over the limit of %u", label, f->n_meta, CISM__MAX_ENTRIES);
    /* names: every key/name is at most CISM__MAX_NAME+1 bytes; bound by section sizes */
    names_total = meta_size + tens_size + 2u * CISM__MAX_ENTRIES;
    f->names = (char *)malloc((size_t)names_total);
    f->meta = (cism__meta_entry *)calloc(f->n_meta ? f->n_meta : 1, sizeof(cism__meta_entry));
    if (!f->names || !f->meta) { st = cism__fail(CISM_ERR_OUT_OF_MEMORY, "%s: out of memory reading metadata", label); goto fail; }
    for (i = 0; i < f->n_meta; i++) {
        cism__meta_entry *e = &f->meta[i];
        uint32_t klen = rd_u32(&r), type;
        const uint8_t *key;
        if (r.failed) BAD("%s: metadata entry %u is truncated", label, i);
        if (klen == 0 || klen > CISM__MAX_NAME) BAD("%s: metadata entry %u has a key of %u bytes (1..%u allowed)", label, i, klen, CISM__MAX_NAME);
        key = rd_bytes(&r, klen);
        if (!key) BAD("%s: metadata entry %u is truncated", label, i);
        if (!valid_key(key, klen)) BAD("%s: metadata entry %u has a key with characters outside [a-z0-9_.]", label, i);
        memcpy(f->names + names_used, key, klen);
        f->names[names_used + klen] = 0;
        e->key = f->names + names_used;
        names_used += klen + 1;
        type = rd_u32(&r);
        e->type = (int32_t)type;
        switch (type) {
        case CISM_META_INT:
        case CISM_META_FLOAT:
            e->count = 1;
            e->payload_size = 8;
            e->payload = rd_bytes(&r, 8);
            break;
        case CISM_META_STRING:
        case CISM_META_BYTES:
        case CISM_META_INT_ARRAY:
        case CISM_META_FLOAT_ARRAY:
        case CISM_META_STRING_ARRAY: {
            uint64_t n = rd_u64(&r), elem = 1;
            if (r.failed) break;
            if (type == CISM_META_INT_ARRAY) elem = 8;
            else if (type == CISM_META_FLOAT_ARRAY) elem = 4;
            if (n > (r.end - r.pos) / elem) { r.failed = 1; break; }
            e->count = n;
            if (type == CISM_META_STRING_ARRAY) {
                uint64_t k, start = r.pos;
                for (k = 0; k < n && !r.failed; k++) {
                    uint32_t slen = rd_u32(&r);
                    rd_bytes(&r, slen);
                }
                e->payload = d + start;
                e->payload_size = r.pos - start;
            } else {
                e->payload_size = n * elem;
                e->payload = rd_bytes(&r, e->payload_size);
            }
            break;
        }
        default:
            BAD("%s: metadata '%s' has unknown type %u", label, e->key, type);
        }
        if (r.failed || !e->payload) BAD("%s: metadata '%s' runs past the end of its section (truncated?)", label, e->key);
    }
    if (r.pos != r.end) BAD("%s: %llu stray bytes after the metadata entries", label, (unsigned long long)(r.end - r.pos));

    /* ---- tensor directory ---- */
    r.pos = tens_off; r.end = tens_off + tens_size; r.failed = 0;
    f->n_tensors = rd_u32(&r);
    if (r.failed) BAD("%s: tensor directory is truncated", label);
    if (f->n_tensors > CISM__MAX_ENTRIES) BAD("%s: %u tensors is over the limit of %u", label, f->n_tensors, CISM__MAX_ENTRIES);
    f->tensors = (cism__tensor_entry *)calloc(f->n_tensors ? f->n_tensors : 1, sizeof(cism__tensor_entry));
    order = (cism__tensor_entry **)calloc(f->n_tensors ? f->n_tensors : 1, sizeof(*order));
    if (!f->tensors || !order) { st = cism__fail(CISM_ERR_OUT_OF_MEMORY, "%s: out of memory reading the tensor directory", label); goto fail; }
    for (i = 0; i < f->n_tensors; i++) {
        cism__tensor_entry *t = &f->tensors[i];
        uint32_t nlen = rd_u32(&r), nd, k;
        const uint8_t *name;
        uint64_t rows = 1, expect;
        if (r.failed) BAD("%s: tensor entry %u is truncated", label, i);
        if (nlen == 0 || nlen > CISM__MAX_NAME) BAD("%s: tensor entry %u has a name of %u bytes (1..%u allowed)", label, i, nlen, CISM__MAX_NAME);
        name = rd_bytes(&r, nlen);
        if (!name) BAD("%s: tensor entry %u is truncated", label, i);
        if (!valid_name(name, nlen)) BAD("%s: tensor entry %u has a name with non-printable characters", label, i);
        if (names_used + nlen + 1 > names_total) BAD("%s: tensor names overflow", label);
        memcpy(f->names + names_used, name, nlen);
        f->names[names_used + nlen] = 0;
        t->name = f->names + names_used;
        names_used += nlen + 1;
        t->dtype = (int32_t)rd_u32(&r);
        nd = rd_u32(&r);
        if (r.failed) BAD("%s: tensor '%s' entry is truncated", label, t->name);
        if (!cism__dtype_is_known(t->dtype)) {
            st = cism__fail(CISM_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %d, unknown to this library version", label, t->name, (int)t->dtype);
            goto fail;
        }
        if (nd < 1 || nd > CISM__MAX_DIMS) BAD("%s: tensor '%s' has %u dimensions (1..%d allowed)", label, t->name, nd, CISM__MAX_DIMS);
        t->n_dims = (int32_t)nd;
        for (k = 0; k < nd; k++) {
            uint64_t dim = rd_u64(&r);
            if (dim == 0 || dim > ((uint64_t)1 << 32)) BAD("%s: tensor '%s' dimension %u is %llu (1..2^32 allowed)", label, t->name, k, (unsigned long long)dim);
            t->dims[k] = (int64_t)dim;
        }
        t->offset = rd_u64(&r);
        t->size = rd_u64(&r);
        if (f->version >= 3) t->crc = rd_u32(&r);
        if (r.failed) BAD("%s: tensor '%s' entry is truncated", label, t->name);
        for (k = 0; k + 1 < nd; k++) {
            if ((uint64_t)t->dims[k] > UINT64_MAX / rows) BAD("%s: tensor '%s' shape overflows", label, t->name);
            rows *= (uint64_t)t->dims[k];
        }
        expect = cism__row_bytes(t->dtype, t->dims[nd - 1]);
        if (expect == 0)
            BAD("%s: tensor '%s': %lld columns cannot be stored as %s", label, t->name,
                (long long)t->dims[nd - 1], cism_dtype_name(t->dtype));
        if (rows > UINT64_MAX / expect) BAD("%s: tensor '%s' shape overflows", label, t->name);
        expect *= rows;
        if (t->size != expect)
            BAD("%s: tensor '%s' has %llu bytes but its shape and dtype need %llu", label, t->name,
                (unsigned long long)t->size, (unsigned long long)expect);
        if (t->offset % CISM__ALIGN != 0) BAD("%s: tensor '%s' offset %llu is not a multiple of %u", label, t->name, (unsigned long long)t->offset, CISM__ALIGN);
        if (t->offset > data_size || t->size > data_size - t->offset)
            BAD("%s: tensor '%s' (%llu bytes at %llu) lies outside the data section (%llu bytes; truncated?)", label, t->name,
                (unsigned long long)t->size, (unsigned long long)t->offset, (unsigned long long)data_size);
        t->data = d + data_off + t->offset;
        order[i] = t;
    }
    if (r.pos != r.end) BAD("%s: %llu stray bytes after the tensor directory", label, (unsigned long long)(r.end - r.pos));
    /* unique names, no overlaps */
    qsort(order, f->n_tensors, sizeof(*order), cmp_offset);
    for (i = 1; i < f->n_tensors; i++)
        if (order[i - 1]->offset + order[i - 1]->size > order[i]->offset)
            BAD("%s: tensors '%s' and '%s' overlap", label, order[i - 1]->name, order[i]->name);
    free(order);
    order = NULL;
    /* sorted indexes for lookups; adjacent equal names are duplicates */
    f->meta_sorted = (cism__meta_entry **)malloc((f->n_meta ? f->n_meta : 1) * sizeof(*f->meta_sorted));
    f->tensor_sorted = (cism__tensor_entry **)malloc((f->n_tensors ? f->n_tensors : 1) * sizeof(*f->tensor_sorted));
    if (!f->meta_sorted || !f->tensor_sorted) { st = cism__fail(CISM_ERR_OUT_OF_MEMORY, "%s: out of memory", label); goto fail; }
    for (i = 0; i < f->n_meta; i++) f->meta_sorted[i] = &f->meta[i];
    for (i = 0; i < f->n_tensors; i++) f->tensor_sorted[i] = &f->tensors[i];
    qsort(f->meta_sorted, f->n_meta, sizeof(*f->meta_sorted), cmp_meta);
    qsort(f->tensor_sorted, f->n_tensors, sizeof(*f->tensor_sorted), cmp_tensor_name);
    for (i = 1; i < f->n_meta; i++)
        if (strcmp(f->meta_sorted[i - 1]->key, f->meta_sorted[i]->key) == 0)
            BAD("%s: metadata key '%s' appears twice", label, f->meta_sorted[i]->key);
    for (i = 1; i < f->n_tensors; i++)
        if (strcmp(f->tensor_sorted[i - 1]->name, f->tensor_sorted[i]->name) == 0)
            BAD("%s: tensor '%s' appears twice", label, f->tensor_sorted[i]->name);
    return CISM_OK;
fail:
    free(order);
    cism__file_close(f);
    return st;
}

const cism__meta_entry *cism__file_meta(const cism__file *f, const char *key) {
    uint32_t lo = 0, hi = f->n_meta;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->meta_sorted[mid]->key, key);
        if (c == 0) return f->meta_sorted[mid];
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return NULL;
}

cism__tensor_entry *cism__file_tensor(const cism__file *f, const char *name) {
    uint32_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->tensor_sorted[mid]->name, name);
        if (c == 0) return f->tensor_sorted[mid];
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return NULL;
}
