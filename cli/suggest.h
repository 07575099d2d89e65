/* "Did you mean": the hint cdl-train and cdlrun add to "unknown option". */
#ifndef CDL_CLI_SUGGEST_H
#define CDL_CLI_SUGGEST_H

#include <stddef.h>

/* arg: the unknown argument as typed ("--epoch", "--batch_size=64").
 * known: the long option names without dashes, NULL-terminated.
 * aliases: pairs {typed name without dashes, what to use instead}, NULL-
 * terminated, for the spellings of other tools (PyTorch, torchrun).
 * Writes "; did you mean --epochs?" or "; use --batch-size (...)" into
 * hint (size n) and returns 1, or writes "" and returns 0. */
int suggest_option(const char *arg, const char *const *known, const char *const *aliases,
                   char *hint, size_t n);

/* The nearest of known (NULL-terminated) to a mistyped value, within 2
 * edits or as its unique prefix: "; did you mean X?" into hint, 1; else "", 0. */
int suggest_value(const char *arg, const char *const *known, char *hint, size_t n);

#endif
