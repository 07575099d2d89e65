/* Force-included into the plugin's sources (spank/local.mk): the plugin runs
 * inside root daemons, so it is built with glibc's FORTIFY checks, next to
 * -fstack-protector-strong and full RELRO. FORTIFY needs optimisation (glibc
 * warns without it, which -Werror would turn into a failure). */
#if defined(__OPTIMIZE__) && !defined(_FORTIFY_SOURCE)
#define _FORTIFY_SOURCE 2
#endif
