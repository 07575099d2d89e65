/* libFuzzer target: a CSV table, with the default label column and with
 * the test split's rule (labels among given class names). */
#include <string.h>

#include <cdl/cdl.h>

#include "lib/data/internal.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char *const names[] = {"a", "cat", "d, og"};
    for (int given = 0; given < 2; given++) {
        cdl_dataset d;
        memset(&d, 0, sizeof d);
        csv_parse((const char *)data, size, "fuzz.csv", given ? "label" : NULL,
                  given ? names : NULL, given ? 3 : 0, &d);
        cdl_dataset_free(&d);
    }
    return 0;
}
