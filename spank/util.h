/* Small helpers shared by the plugin's modules: the last-error buffer, a log
 * hook, bounded string copies and strict number parsing.
 *
 * The plugin runs inside srun, sbatch, slurmd and slurmstepd, so it links
 * nothing of libcdl: these replace cdl_error() and friends here. Every
 * module but plugin.c, local.c, remote.c and epilog.c is free of Slurm
 * symbols, so the unit tests link them directly. */
#ifndef CDL_SPANK_UTIL_H
#define CDL_SPANK_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Longest option value, path or environment value the plugin accepts. */
#define SPK_PATH_MAX 512
#define SPK_VALUE_MAX 256

/* Records a message for spk_last_error() (printf-style); returns -1 so that
 * callers can write `return spk_error("...")`. */
int spk_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *spk_last_error(void);
void spk_clear_error(void);

/* Informational messages (verbose binding map, MPS notes). The plugin points
 * this at Slurm's logger; the default writes to stderr. */
typedef void (*spk_log_fn)(const char *msg);
void spk_set_log(spk_log_fn fn);
void spk_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Seconds on the monotonic clock, for deadlines of bounded waits. */
double spk_now_s(void);

/* Copies src into dst[len]; returns -1 (without an error message) when src
 * does not fit, leaving dst empty. */
int spk_copy(char *dst, size_t len, const char *src);

/* Strict decimal parse of all of s (no sign, no spaces, at most 9 digits)
 * into [lo, hi]; -1 otherwise. */
int spk_parse_uint(const char *s, long lo, long hi, long *out);

/* 1 when s is non-empty, shorter than maxlen and every byte is in the set of
 * characters `allowed` (plus ASCII letters and digits when alnum is set). */
int spk_charset_ok(const char *s, size_t maxlen, int alnum, const char *allowed);

/* Walks the directories above dir (an absolute path without links; dir
 * itself is not looked at) up to "/": each must be owned by root or by
 * owner and not writable by group or others unless sticky, or whoever may
 * write it could rename what lies below and put something of their own in
 * the place checked. 0 when all are; 1 with the first other one in bad[len];
 * -1 when one cannot be examined (errno, and its path in bad). */
int spk_dirs_above_ok(const char *dir, uid_t owner, char *bad, size_t len);

#endif
