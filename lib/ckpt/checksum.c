/* CRC-32 (zlib) of a safetensors file's data and header meaning (checksum.h). */
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "lib/ckpt/checksum.h"

uint32_t st_crc_bytes(uint32_t crc, const void *p, size_t n)
{
    return (uint32_t)crc32_z(crc, p, n);
}

uint32_t st_crc_meta(uint32_t crc, const char *key, const char *value)
{
    crc = st_crc_bytes(crc, key, strlen(key) + 1);
    return st_crc_bytes(crc, value, strlen(value) + 1);
}

static uint32_t crc_u64(uint32_t crc, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return st_crc_bytes(crc, b, 8);
}

uint32_t st_crc_tensor(uint32_t crc, const char *name, const char *dtype, int ndim,
                       const int64_t *shape, uint64_t begin, uint64_t end)
{
    crc = st_crc_bytes(crc, name, strlen(name) + 1);
    crc = st_crc_bytes(crc, dtype, strlen(dtype) + 1);
    crc = crc_u64(crc, (uint64_t)ndim);
    for (int d = 0; d < ndim; d++)
        crc = crc_u64(crc, (uint64_t)shape[d]);
    crc = crc_u64(crc, begin);
    return crc_u64(crc, end);
}

void st_checksum_format(char *buf, uint32_t data, uint32_t header)
{
    snprintf(buf, ST_CHECKSUM_LEN, "crc32 data=%08x header=%08x", (unsigned)data,
             (unsigned)header);
}

int st_checksum_parse(const char *s, uint32_t *data, uint32_t *header)
{
    unsigned d, h;
    int end = 0;
    /* Exactly the written form: 8 lower-case hex digits each, nothing after. */
    if (strlen(s) != 35 || sscanf(s, "crc32 data=%8x header=%8x%n", &d, &h, &end) != 2 ||
        end != 35)
        return -1;
    char again[ST_CHECKSUM_LEN];
    st_checksum_format(again, d, h);
    if (strcmp(again, s) != 0)
        return -1;
    *data = d;
    *header = h;
    return 0;
}
