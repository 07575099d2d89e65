/* Public config structs start with `size_t size` (sizeof the struct the
 * caller was built with), so a libcdl with more fields can read an older
 * caller's smaller struct. One reader and one writer for all of them.
 *
 * The caller's size comes from its own compiler: cdl_X_defaults(p) is a
 * macro of the headers passing sizeof *p to cdl_X_defaults_sized, which
 * writes no more than that (a newer libcdl's larger struct would overrun
 * an older program's). Programs built before those macros call the plain
 * cdl_X_defaults, which writes the size the struct had then
 * (SIZED_UPTO its last field of that release: never change those). */
#ifndef CDL_CORE_SIZED_H
#define CDL_CORE_SIZED_H

#include <stddef.h>

/* sizeof(type) as it was when field was its last. */
#define SIZED_UPTO(type, field)                                                      \
    ((offsetof(type, field) + sizeof(((type *)0)->field) + _Alignof(type) - 1) /   \
     _Alignof(type) * _Alignof(type))

/* Copies the caller's struct in over out (already holding this libcdl's
 * defaults, out_size bytes) and sets out's size to out_size. in's size
 * must be in [min_size, out_size], and in not NULL: else -1 with cdl_error naming type and
 * the function (init) that sets the size. */
int sized_read(const void *in, void *out, size_t out_size, size_t min_size, const char *type,
               const char *init);

/* Writes defaults d (this libcdl's struct, own bytes) into the caller's
 * struct out of size bytes and sets out's size to size: the first size
 * bytes of d when the caller's struct is this libcdl's or an older one;
 * all of d and zeros after it when it is a newer one (headers of a newer
 * cdl than this libcdl), whose size then makes sized_read refuse it. */
void sized_write(void *out, size_t size, const void *d, size_t own);

/* sized_write of defaults that are all zeros. */
void sized_zeros(void *out, size_t size);

/* -1 with cdl_error saying that type (size bytes, this libcdl's own) comes
 * from a newer cdl's headers than this libcdl: naming this libcdl's
 * release and file and what to do. */
int sized_newer(const char *type, size_t size, size_t own);

#endif
