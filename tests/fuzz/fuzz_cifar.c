/* libFuzzer target: a CIFAR-10 binary batch (test_batch.bin). */
#include <cdl/cdl.h>

#include "lib/data/internal.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_write("test_batch.bin", data, size);
    cdl_dataset d = { 0 };
    cifar_read(fuzz_dir(), 0, "(fuzz)", &d);
    cdl_free(d.images);
    cdl_free(d.labels);
    return 0;
}
