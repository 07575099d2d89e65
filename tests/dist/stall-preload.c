/* Loaded through LD_PRELOAD by tests/dist/mpi_stall.sh: the rank named by
 * CDL_TEST_STALL_RANK (OMPI_COMM_WORLD_RANK) stops itself (SIGSTOP) on
 * entering MPI_Init_thread, as a rank whose node hangs there would, after
 * the PMIx bootstrap that comes before it; the others wait in MPI_Init's
 * fence for it. Its pid goes to CDL_TEST_STALL_PID for the script's
 * cleanup; rank 0's, as it enters, to CDL_TEST_INIT_PID (where set), for
 * the script to signal it there. Every other call goes to the real MPI. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided);

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    const char *me = getenv("OMPI_COMM_WORLD_RANK"), *stall = getenv("CDL_TEST_STALL_RANK");
    const char *pidf = getenv("CDL_TEST_STALL_PID");
    const char *initf = getenv("CDL_TEST_INIT_PID");
    if (me && !strcmp(me, "0") && initf) {
        FILE *f = fopen(initf, "w");
        if (f) {
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
        }
    }
    if (me && stall && !strcmp(me, stall)) {
        FILE *f = pidf ? fopen(pidf, "w") : NULL;
        if (f) {
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
        }
        raise(SIGSTOP);
    }
    int (*real)(int *, char ***, int, int *) =
        (int (*)(int *, char ***, int, int *))dlsym(RTLD_NEXT, "MPI_Init_thread");
    return real ? real(argc, argv, required, provided) : 1;
}
