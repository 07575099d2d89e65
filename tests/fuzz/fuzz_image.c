/* libFuzzer target: a PNG or JPEG picture of an image folder, decoded and
 * fitted (resized, cropped, converted) to 7x5 gray and 4x4 RGB. */
#include <cdl/cdl.h>

#include "lib/data/internal.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int h, w, c;
    image_probe(data, size, "fuzz.png", &h, &w, &c);
    image_buf im;
    if (image_decode(data, size, "fuzz.png", &im) != 0)
        return 0;
    /* Only small pictures are fitted: a large one is a valid (slow) input. */
    if ((long)im.h * im.w <= 1 << 16) {
        uint8_t gray[7 * 5], rgb[3 * 4 * 4];
        image_fit(&im, 7, 5, 1, gray);
        image_fit(&im, 4, 4, 3, rgb);
    }
    cdl_free(im.px);
    if (image_decode_for(data, size, "fuzz.jpg", 3, 2, &im) == 0)
        cdl_free(im.px);
    return 0;
}
