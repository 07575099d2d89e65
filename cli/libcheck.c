/* cdl's programs and libcdl.so.0 of one soname span several releases: a
 * program runs with a newer libcdl (sized configs keep older callers
 * working), never with an older one. An older library's
 * cdl_train_defaults sets the config's size to its own, so every field a
 * newer program sets past it (options that release lacks) would be
 * ignored without a word. That happens with two installations side by
 * side (module load cdl/2 with LD_LIBRARY_PATH still naming cdl/1's
 * libdir), which the run path cannot prevent: LD_LIBRARY_PATH comes
 * first. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "libcheck.h"

/* "0.2.0" -> CDL_VERSION_ENCODE(0, 2, 0); -1 when it is not one. */
static long encode(const char *v)
{
    int maj, min, pat, n = 0;
    if (sscanf(v, "%d.%d.%d%n", &maj, &min, &pat, &n) != 3 || maj < 0 || min < 0 || pat < 0 ||
        min > 99 || pat > 99)
        return -1;
    return CDL_VERSION_ENCODE(maj, min, pat);
}

int cli_check_libcdl(const char *prog, char **argv)
{
    for (int i = 1; argv[i]; i++)
        if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "--help") ||
            !strcmp(argv[i], "-h"))
            return 0;
    const char *lib = cdl_version();
    long have = encode(lib);
    /* One release number spans builds of several ABIs (0.1.0's did): a
     * libcdl of this number lacking the newest version node's functions
     * (lib/libcdl.map) is older too. Asked of the dynamic symbols only
     * where cdl_version is one (not in a static link). */
    int lacks = dlsym(RTLD_DEFAULT, "cdl_version") &&
                !dlsym(RTLD_DEFAULT, "cdl_train_defaults_sized");
    if (have < 0 || have > CDL_VERSION_NUMBER || (have == CDL_VERSION_NUMBER && !lacks))
        return 0;
    /* The version string lives in the library's own data: its address
     * names the file also in a program built without PIE, where
     * &cdl_version would be the program's PLT entry. */
    Dl_info info;
    const char *file = dladdr(lib, &info) && info.dli_fname
                           ? info.dli_fname
                           : "libcdl.so.0";
    const char *llp = getenv("LD_LIBRARY_PATH");
    fprintf(stderr,
            "%s: error: this %s is of cdl %s but runs with an older libcdl, cdl %s%s (%s), "
            "which would ignore what it does not know; run it with the libcdl of its own "
            "release: ",
            prog, prog, CDL_VERSION_STRING, lib, lacks ? " of an earlier build" : "", file);
    if (llp && *llp)
        fprintf(stderr, "LD_LIBRARY_PATH=%s comes before its run path (unset it, or module load "
                        "the matching cdl)\n", llp);
    else
        fprintf(stderr, "run ldconfig after make install, or install the tools and libcdl of "
                        "one release\n");
    return -1;
}
