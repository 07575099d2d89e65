/* libFuzzer target: the safetensors JSON header grammar (the input as
 * fuzz_st.h makes it a file). */
#include "tests/fuzz/fuzz_st.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cdl_st_file *f = fuzz_st_open(data, size, "h.safetensors");
    if (f) {
        for (int i = 0; i < cdl_st_meta_count(f); i++)
            (void)cdl_st_meta_get(f, cdl_st_meta_key(f, i));
        cdl_st_close(f);
    }
    return 0;
}
