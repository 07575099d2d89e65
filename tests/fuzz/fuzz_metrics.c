/* libFuzzer target: the readers of --metrics files, cdl-plot's
 * (cli/plot_read.c) and cdl-train's test-record check on a restart
 * (lib/train/metrics_read.c), the input as a whole file (several lines,
 * runs and repeated epochs). */
#include <stdlib.h>

#include "cli/plot_read.h"
#include "lib/train/metrics.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    plot_set set = {0};
    const char *path = fuzz_write("metrics.jsonl", data, size);
    plot_read_file(&set, path);
    metrics_tested(path, "0123456789abcdef0123456789abcdef");
    plot_set_free(&set);
    return 0;
}
