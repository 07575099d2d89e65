/* Shared by the libFuzzer targets (make fuzz, docs/hacking.md).
 *
 * The readers under test take paths, so each target writes its input into a
 * private directory made once per process (mkdtemp under $TMPDIR) and removed
 * at exit. Errors are expected and silent: cdl_error only records them. A
 * target fails only on a sanitizer report, a crash, a timeout or an
 * allocation beyond libFuzzer's -malloc_limit_mb.
 */
#ifndef CDL_FUZZ_H
#define CDL_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* The directory inputs are written to (made on first use). */
const char *fuzz_dir(void);
/* Writes bytes to fuzz_dir()/name, replacing it; returns the full path (a
 * static buffer, valid until the next call). Aborts on an I/O error, which
 * is the machine's fault, not the input's. */
const char *fuzz_write(const char *name, const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
