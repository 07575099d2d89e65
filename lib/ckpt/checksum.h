/* Checksums of a safetensors file, stored in its own __metadata__ so the
 * file stays plain safetensors (readers that do not know the key ignore it):
 *
 *   "cdl_checksum": "crc32 data=XXXXXXXX header=XXXXXXXX"
 *
 * data: zlib's CRC-32 of the data section's bytes. header: CRC-32 of what the
 * header means, not of its text (the entry cannot cover its own digits):
 * each metadata entry but this one as key NUL value NUL, in header order,
 * then each tensor as name NUL dtype NUL and ndim, shape, begin, end as
 * 8-byte little-endian integers, in header order. A bit flip anywhere
 * either breaks the JSON or the layout checks, or changes one of the two
 * sums, or changes the entry itself. */
#ifndef CDL_CKPT_CHECKSUM_H
#define CDL_CKPT_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#define ST_CHECKSUM_KEY "cdl_checksum"

uint32_t st_crc_bytes(uint32_t crc, const void *p, size_t n);
uint32_t st_crc_meta(uint32_t crc, const char *key, const char *value);
uint32_t st_crc_tensor(uint32_t crc, const char *name, const char *dtype, int ndim,
                       const int64_t *shape, uint64_t begin, uint64_t end);
/* The entry's value (buf of at least ST_CHECKSUM_LEN bytes); parsing it
 * back: 0, or -1 if it is not of this form. */
#define ST_CHECKSUM_LEN 48
void st_checksum_format(char *buf, uint32_t data, uint32_t header);
int st_checksum_parse(const char *s, uint32_t *data, uint32_t *header);

#endif
