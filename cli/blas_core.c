/* OpenBLAS chooses its kernels once, when it loads, from the CPU model or
 * OPENBLAS_CORETYPE: a program that finds the SSE3 fallback on a CPU newer
 * than the library (Debian 12's OpenBLAS on Emerald Rapids Xeons, say) can
 * only set the variable and start again. cdl's programs do so themselves
 * so that `srun ./cdl-train` runs at full speed without an export in every
 * job script; an OPENBLAS_CORETYPE the user set is left alone (the advice
 * is NULL then), which also ends the loop after one new start. */
#include <stdlib.h>
#include <unistd.h>

#include <cdl/backend.h>

#include "blas_core.h"

void cli_fix_blas_core(char **argv)
{
    const char *core = cdl_blas_core_advice();
    if (!core || setenv("OPENBLAS_CORETYPE", core, 1) != 0)
        return;
    /* /proc/self/exe: this very binary, whatever argv[0] or PATH says;
     * where /proc is not mounted (a chroot), the name it was started by,
     * found as the shell found it. */
    execv("/proc/self/exe", argv);
    if (argv[0] && *argv[0])
        execvp(argv[0], argv);
    unsetenv("OPENBLAS_CORETYPE");   /* no new start: warn as before */
}
