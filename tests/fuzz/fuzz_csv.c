/* libFuzzer target: a CSV table, with the default label column and a given
 * one; then the same bytes as the test table of itself (its columns and
 * classes), and of a training table whose feature columns come in the
 * reverse order (the test table's columns are matched by name); and as
 * rows to predict on (cdl-predict TABLE.csv) with those columns, with and
 * without a label column, and with a made-up column the table lacks. */
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "lib/data/internal.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int given = 0; given < 2; given++) {
        cdl_dataset d, t;
        memset(&d, 0, sizeof d);
        csv_layout lay = {0};
        if (csv_parse((const char *)data, size, "fuzz.csv", given ? "label" : NULL, NULL, &lay,
                      &d) == 0) {
            lay.class_names = d.class_names;
            lay.classes = d.classes;
            for (int rev = 0; rev < 2; rev++) {
                if (rev)   /* the training table's features the other way round */
                    for (int i = 0, j = lay.nf - 1; i < j; i++, j--) {
                        char *x = lay.features[i];
                        lay.features[i] = lay.features[j];
                        lay.features[j] = x;
                    }
                memset(&t, 0, sizeof t);
                csv_parse((const char *)data, size, "fuzz.csv", NULL, &lay, NULL, &t);
                cdl_dataset_free(&t);
                char ignored[64];
                long *lines = NULL;   /* each row's line: must be t.n of them */
                memset(&t, 0, sizeof t);
                if (csv_parse_rows_lines((const char *)data, size, "fuzz.csv",
                                         (const char *const *)lay.features, lay.nf,
                                         rev ? NULL : lay.label, ignored, sizeof ignored, &t,
                                         &lines) == 0)
                    for (int i = 0; i < t.n; i++)
                        if (lines[i] < 2 || (i > 0 && lines[i] <= lines[i - 1]))
                            abort();   /* after the header, ascending */
                cdl_free(lines);
                cdl_dataset_free(&t);
            }
            if (lay.nf > 0) {   /* a column the table lacks: an error naming it */
                const char *cols[2] = {lay.features[0], "\n no such column"};
                memset(&t, 0, sizeof t);
                csv_parse_rows((const char *)data, size, "fuzz.csv", cols, 2, lay.label, NULL, 0,
                               &t);
                cdl_dataset_free(&t);
            }
        }
        csv_layout_free(&lay);
        cdl_dataset_free(&d);
    }
    return 0;
}
