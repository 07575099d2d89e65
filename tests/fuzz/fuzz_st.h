/* The input of the safetensors-header fuzz targets as a file: the input's
 * first byte is the data section's length (zero bytes), the rest is the
 * header text; the 8-byte length is added here, so every mutation reaches
 * the JSON parser instead of failing the length check. */
#ifndef CDL_FUZZ_ST_H
#define CDL_FUZZ_ST_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "tests/fuzz/fuzz.h"

/* The opened file (cdl_st_close it), or NULL: an input too short or too
 * long, or one the reader refuses. name: the file's name in fuzz_write's
 * directory. */
static inline cdl_st_file *fuzz_st_open(const uint8_t *data, size_t size, const char *name)
{
    if (size < 1 || size > 1u << 20)
        return NULL;
    size_t nhead = size - 1, ndata = data[0];
    uint8_t *file = calloc(1, 8 + nhead + ndata);
    if (!file)
        return NULL;
    for (int i = 0; i < 8; i++)
        file[i] = (uint8_t)((uint64_t)nhead >> (8 * i));
    memcpy(file + 8, data + 1, nhead);
    cdl_st_file *f = cdl_st_open(fuzz_write(name, file, 8 + nhead + ndata));
    free(file);
    return f;
}

#endif
