/* libFuzzer target: a .npz archive (zip of .npy), both splits. */
#include <string.h>

#include <cdl/cdl.h>

#include "lib/data/internal.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int train = 0; train < 2; train++) {
        cdl_dataset d;
        memset(&d, 0, sizeof d);
        npz_read_mem(data, size, "fuzz.npz", train, &d);
        cdl_dataset_free(&d);
    }
    return 0;
}
