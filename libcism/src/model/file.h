/* file.h - the .cism container: header, metadata, tensor directory (docs/FORMAT.md).
 * This layer checks structure only (bounds, overflow, alignment, types, sizes);
 * model.c checks that the contents describe a model we can run. */
#ifndef CISM_FILE_H
#define CISM_FILE_H

#include <stdint.h>
#include "cism.h"
#include "../platform/platform.h"

#define CISM__FILE_MAGIC "CISM\r\n\x1a\n"
#define CISM__FILE_VERSION 3u  /* 3: checksums; 2: the interleaved dtypes' superblock layout. 1 and 2 are read too */
#define CISM__HEADER_SIZE 64u      /* versions 1 and 2 */
#define CISM__HEADER_SIZE_V3 128u  /* version 3: + header checksum and reserved bytes */
#define CISM__HEADER_CRC_AT 64u    /* version 3: u32 CRC-32 of [0, tensors_offset + tensors_size), this field as 0 */
#define CISM__ALIGN 64u
#define CISM__MAX_ENTRIES 65536u
#define CISM__MAX_NAME 256u
#define CISM__MAX_DIMS 4

typedef struct cism__meta_entry {
    const char *key;           /* NUL-terminated copy */
    int32_t type;              /* CISM_META_* */
    const uint8_t *payload;    /* into the file view: for INT/FLOAT the value, else the element data after the u64 count */
    uint64_t count;            /* STRING/BYTES: bytes; arrays: elements */
    uint64_t payload_size;     /* bytes after the count */
} cism__meta_entry;

typedef struct cism__tensor_entry {
    const char *name;          /* NUL-terminated copy */
    int32_t dtype;
    int32_t n_dims;
    int64_t dims[CISM__MAX_DIMS];
    uint64_t offset;           /* from the data section */
    uint64_t size;
    uint32_t crc;              /* version 3: CRC-32 of the tensor's bytes */
    const uint8_t *data;
    int used;                  /* set by the model binder */
} cism__tensor_entry;

typedef struct cism__file {
    cism__file_view view;
    uint32_t version;
    uint32_t n_meta;
    cism__meta_entry *meta;
    uint32_t n_tensors;
    cism__tensor_entry *tensors;
    char *names;               /* storage for keys and tensor names */
    cism__meta_entry **meta_sorted;      /* by key, for lookups */
    cism__tensor_entry **tensor_sorted;  /* by name */
    uint64_t data_size;
    int has_checksums;         /* version 3: header checked at parse, tensor CRCs known */
} cism__file;

/* Opens and checks path. On failure returns the status (with the message set)
   and leaves f empty. */
cism_status cism__file_open(cism__file *f, const char *path, int use_mmap);
/* Checks an in-memory image (used by tests and by cism__file_open). Takes
   ownership of view on success and on failure. */
cism_status cism__file_parse(cism__file *f, cism__file_view *view, const char *label);
void cism__file_close(cism__file *f);
/* Compares every tensor with its checksum (version 3; a whole read of the data,
   hence opt-in: CISM_PARAM_VERIFY_CHECKSUMS, `cism verify`). Files of versions
   1 and 2 have none: CISM_OK with a warning logged. */
cism_status cism__file_verify_data(const cism__file *f, const char *label);

const cism__meta_entry *cism__file_meta(const cism__file *f, const char *key);
cism__tensor_entry *cism__file_tensor(const cism__file *f, const char *name);

#endif
