/* The reader and writer of size-prefixed config structs (see sized.h). */
#include <dlfcn.h>
#include <string.h>

#include <cdl/cdl.h>

#include "sized.h"

int sized_newer(const char *type, size_t size, size_t own)
{
    /* The version string is this library's data: its address names the
     * file (the program itself when libcdl is linked statically). */
    const char *v = cdl_version();
    Dl_info info;
    const char *file = dladdr(v, &info) && info.dli_fname ? info.dli_fname : "libcdl";
    return cdl_error("%s is %zu bytes, more than this libcdl's %zu: the program was built "
                     "against the headers of a newer cdl than this libcdl, cdl %s (%s), which "
                     "would ignore the fields it does not know; run it with the libcdl of the "
                     "release it was built with (check LD_LIBRARY_PATH, or run ldconfig after "
                     "make install), or rebuild it against this libcdl's headers",
                     type, size, own, v, file);
}

int sized_read(const void *in, void *out, size_t out_size, size_t min_size, const char *type,
               const char *init)
{
    size_t n;
    if (!in)
        return cdl_error("%s is NULL: start from %s", type, init);
    memcpy(&n, in, sizeof n);
    if (n > out_size && n < (size_t)1 << 20)
        return sized_newer(type, n, out_size);
    if (n < min_size || n > out_size)
        return cdl_error("%s: size %zu is not that of this libcdl's struct (%zu): start from %s",
                         type, n, out_size, init);
    memcpy(out, in, n);
    memcpy(out, &out_size, sizeof out_size);
    return 0;
}

void sized_write(void *out, size_t size, const void *d, size_t own)
{
    if (size < sizeof size)
        return;   /* not a struct of ours: nothing to write in */
    memcpy(out, d, size < own ? size : own);
    if (size > own)
        memset((char *)out + own, 0, size - own);
    memcpy(out, &size, sizeof size);
}

void sized_zeros(void *out, size_t size)
{
    if (size < sizeof size)
        return;
    memset(out, 0, size);
    memcpy(out, &size, sizeof size);
}
