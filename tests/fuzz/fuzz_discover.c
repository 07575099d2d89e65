/* libFuzzer target: rank discovery from the environment
 * (lib/dist/discover.c), which every rank runs first on variables that
 * launchers, schedulers or the user set: the rank contract, torchrun's,
 * Slurm's SLURM_* (node lists, tasks per node, reserved ports).
 *
 * Input: NAME=VALUE lines, which replace the whole environment. PMIx is
 * out of scope here (its discovery asks the PMIx server): PMIX_* variables
 * are dropped and the PMIx hooks below say "no PMIx". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "lib/dist/boot.h"
#include "tests/fuzz/fuzz.h"

int pmix_present(void)
{
    return 0;
}

int pmix_discover(cdl_rank_info *info)
{
    (void)info;
    return cdl_error("no PMIx in the fuzz target");
}

enum { MAX_VARS = 64 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 16384)
        return 0;
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    clearenv();
    int n = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && n < MAX_VARS;
         line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (!eq || eq == line || !strncmp(line, "PMIX_", 5))
            continue;
        *eq = '\0';
        if (setenv(line, eq + 1, 1) == 0)
            n++;
    }
    cdl_rank_info info;
    cdl_rank_discover(&info);
    free(text);
    return 0;
}
