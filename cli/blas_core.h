/* OpenBLAS's kernels for cdl's programs (blas_core.c). */
#ifndef CLI_BLAS_CORE_H
#define CLI_BLAS_CORE_H

/* When OpenBLAS fell back to its slow SSE3 kernels on a CPU it does not
 * know (cdl_blas_core_advice), starts this program again, argv unchanged,
 * with OPENBLAS_CORETYPE set to the kernels the CPU supports. Call first in
 * main, before anything that a new start would repeat. Returns only when
 * there is nothing to do or the new start failed (then the library's
 * warning tells the user what to export). */
void cli_fix_blas_core(char **argv);

#endif
