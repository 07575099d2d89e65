/* libFuzzer target: cdl-plot's reader of --metrics files (cli/plot_read.c),
 * the input as a whole file (several lines, runs and repeated epochs). */
#include <stdlib.h>

#include "cli/plot_read.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    plot_set set = {0};
    plot_read_file(&set, fuzz_write("metrics.jsonl", data, size));
    plot_set_free(&set);
    return 0;
}
