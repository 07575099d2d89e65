/* Put first on LD_LIBRARY_PATH as libcdl.so.0 by tests/e2e/mixed-libcdl.sh:
 * a libcdl of the programs' own release number but an earlier build,
 * before the symbol versions and the sized entry points
 * (cdl_train_defaults_sized), like the builds of 0.1.0 before them
 * (linked with an anonymous version script, as they were). It defines
 * what cdl's programs call before they check the library. */
#include <stdlib.h>

#include <cdl/version.h>

const char *cdl_version(void);
const char *cdl_blas_core_advice(void);

const char *cdl_version(void)
{
    return CDL_VERSION_STRING;
}

const char *cdl_blas_core_advice(void)
{
    return getenv("CDL_TEST_NO_SUCH_VARIABLE");   /* NULL: and a libc symbol, as a real one has */
}
