/* crc32c.h - CRC-32C (Castagnoli), as TFRecord framing and checkpoints use it. */
#ifndef TT_CRC32C_H
#define TT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues crc over data; start with crc = 0. */
uint32_t crc32c_update(uint32_t crc, const void *data, size_t len);

/* TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
static inline uint32_t crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
