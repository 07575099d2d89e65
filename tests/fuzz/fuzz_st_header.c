/* libFuzzer target: the safetensors JSON header grammar. The input's first
 * byte is the data section's length (zero bytes), the rest is the header
 * text; the harness adds the 8-byte length, so every mutation reaches the
 * JSON parser instead of failing the length check. */
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1u << 20)
        return 0;
    size_t nhead = size - 1, ndata = data[0];
    uint8_t *file = calloc(1, 8 + nhead + ndata);
    if (!file)
        return 0;
    for (int i = 0; i < 8; i++)
        file[i] = (uint8_t)((uint64_t)nhead >> (8 * i));
    memcpy(file + 8, data + 1, nhead);
    cdl_st_file *f = cdl_st_open(fuzz_write("h.safetensors", file, 8 + nhead + ndata));
    free(file);
    if (f) {
        for (int i = 0; i < cdl_st_meta_count(f); i++)
            (void)cdl_st_meta_get(f, cdl_st_meta_key(f, i));
        cdl_st_close(f);
    }
    return 0;
}
