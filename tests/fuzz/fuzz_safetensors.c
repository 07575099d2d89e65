/* libFuzzer target: a whole safetensors file (8-byte length, JSON header,
 * data) through cdl_st_open and every accessor. */
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "tests/fuzz/fuzz.h"

/* Touches everything an opened file offers, as a checkpoint loader would. */
static void walk(const cdl_st_file *f)
{
    volatile float sink = 0;
    for (int i = 0; i < cdl_st_count(f); i++) {
        int ndim;
        int64_t shape[8];
        size_t numel = 0;
        const char *name = cdl_st_name(f, i);
        if (cdl_st_find(f, name) != i)
            __builtin_trap();   /* names are unique: find must agree */
        cdl_st_shape(f, i, &ndim, shape);
        const float *d = cdl_st_data(f, i, &numel);
        for (size_t k = 0; d && k < numel; k++)
            sink += d[k];
        const char *dtype = cdl_st_dtype(f, i);
        const int64_t *q = cdl_st_data_i64(f, i, &numel);
        if (!dtype || (q != NULL) != !strcmp(dtype, "I64") || (d != NULL) != !strcmp(dtype, "F32"))
            __builtin_trap();   /* each accessor returns exactly its dtype */
        for (size_t k = 0; q && k < numel; k++)
            sink += (float)q[k];
        /* Any floating dtype as float32 (cdl_st_data_float): the count is
         * the shape's product, which the file's bytes bound. */
        size_t count = 1;
        for (int k = 0; k < ndim; k++)
            count *= (size_t)shape[k];
        int fp = !strcmp(dtype, "F32") || !strcmp(dtype, "F16") || !strcmp(dtype, "BF16") ||
                 !strcmp(dtype, "F64");
        float *out = fp ? malloc(count * sizeof *out + 1) : NULL;
        int rc = cdl_st_data_float(f, i, out, count);
        if (!fp && rc == 0)
            __builtin_trap();   /* only floating dtypes convert */
        if (fp && rc != 0 && strcmp(dtype, "F64"))
            __builtin_trap();   /* only a double can be out of float32's range */
        for (size_t k = 0; out && rc == 0 && k < count; k++)
            sink += out[k];
        free(out);
    }
    for (int i = 0; i < cdl_st_meta_count(f); i++) {
        const char *v = cdl_st_meta_get(f, cdl_st_meta_key(f, i));
        if (!v)
            __builtin_trap();
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cdl_st_file *f = cdl_st_open(fuzz_write("in.safetensors", data, size));
    if (f) {
        walk(f);
        cdl_st_close(f);
    }
    return 0;
}
