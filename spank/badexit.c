/* Whether a task's end stops its step (see badexit.h). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "lib/dist/contract.h"
#include "spank/badexit.h"

enum spk_exit_action spk_exit_action(int status, char *why, size_t len)
{
    if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        snprintf(why, len, "exited with code %d", code);
        return code == 0 || code == CONTRACT_EXIT_REQUEUE ? SPK_EXIT_FINE : SPK_EXIT_STOP;
    }
    if (!WIFSIGNALED(status)) {
        snprintf(why, len, "ended with wait status %d", status);
        return SPK_EXIT_FINE;
    }
    int sig = WTERMSIG(status);
    snprintf(why, len, "was killed by signal %d (%s)", sig, strsignal(sig));
    switch (sig) {
    case SIGKILL:   /* kill -9, the OOM killer, the plugin's own stop (scancel's
                     * SIGKILL comes after its SIGTERM: stopping a stopping
                     * step is harmless) */
        return SPK_EXIT_STOP_QUIET;
    case SIGSEGV: case SIGBUS: case SIGILL: case SIGFPE: case SIGABRT: case SIGSYS:
    case SIGPIPE: case SIGXCPU: case SIGXFSZ:
        return SPK_EXIT_STOP;
    default:
        return SPK_EXIT_LEAVE;
    }
}
