/* libFuzzer target: a .npy file, parsed and turned into a dataset with
 * zero labels (as x_train.npy would be). */
#include <string.h>

#include <cdl/cdl.h>

#include "lib/data/internal.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    npy_array x;
    if (npy_parse(data, size, "x.npy", &x) != 0 || x.ndim < 1 || x.shape[0] > 4096)
        return 0;
    static const uint8_t zeros[4096];
    npy_array y = {.kind = 'u', .itemsize = 1, .ndim = 1, .count = (size_t)x.shape[0],
                   .data = zeros};
    y.shape[0] = x.shape[0];
    cdl_dataset d;
    memset(&d, 0, sizeof d);
    npy_to_dataset(&x, &y, "x.npy", "y.npy", &d);
    cdl_dataset_free(&d);
    return 0;
}
