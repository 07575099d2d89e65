/* libFuzzer target: an MNIST-style idx pair (images, labels), raw or gzip'd
 * (zlib tells them apart). The input's first two bytes (little-endian) give
 * the image file's length; the rest, after it, is the label file. */
#include <cdl/cdl.h>

#include "lib/data/internal.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t nimg = (size_t)data[0] | (size_t)data[1] << 8;
    data += 2;
    size -= 2;
    if (nimg > size)
        nimg = size;
    fuzz_write("t10k-images-idx3-ubyte", data, nimg);
    fuzz_write("t10k-labels-idx1-ubyte", data + nimg, size - nimg);
    cdl_dataset d = { 0 };
    idx_read(fuzz_dir(), 0, 10, "(fuzz)", &d);
    cdl_free(d.images);
    cdl_free(d.labels);
    return 0;
}
