/* crc32.h - CRC-32 (IEEE 802.3, reflected: the one of zlib, PNG and Python's
 * zlib.crc32), shared by the .cism checksums (model/file.c) and session files
 * (model/state.c). */
#ifndef CISM_CRC32_H
#define CISM_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* Continues crc over n bytes at p; start with crc = 0. As zlib's
   crc32(crc, p, n): cism__crc32(cism__crc32(0, a, na), b, nb) is the CRC of a
   followed by b. Thread-safe. */
uint32_t cism__crc32(uint32_t crc, const void *p, size_t n);

#endif
