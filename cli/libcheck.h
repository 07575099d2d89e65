/* Refusing an older libcdl.so.0 than a program was built with (libcheck.c). */
#ifndef CLI_LIBCHECK_H
#define CLI_LIBCHECK_H

/* Returns 0 when the libcdl this program runs with is of its own release
 * or a newer one (of its own release number: with the functions it
 * needs). Otherwise prints why to stderr, naming both releases,
 * the library's file and LD_LIBRARY_PATH, and returns -1: exit 2. argv's
 * --version and --help skip the check (they name the versions). */
int cli_check_libcdl(const char *prog, char **argv);

#endif
