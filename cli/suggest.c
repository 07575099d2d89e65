/* The closest known long option to a misspelled one: an alias from another
 * tool, the same name with dashes for underscores, a unique prefix, or the
 * nearest name within 2 edits (Damerau: a swap of neighbours is one). */
#include "suggest.h"

#include <stdio.h>
#include <string.h>

#define NAME_MAX_LEN 64   /* longer arguments get no hint */

/* Optimal string alignment distance of a (la) and b (lb), both < NAME_MAX_LEN. */
static int distance(const char *a, size_t la, const char *b, size_t lb)
{
    int d[NAME_MAX_LEN + 1][NAME_MAX_LEN + 1];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int cost = a[i - 1] != b[j - 1];
            int v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v)
                v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

int suggest_option(const char *arg, const char *const *known, const char *const *aliases,
                   char *hint, size_t n)
{
    hint[0] = '\0';
    if (strncmp(arg, "--", 2) != 0)
        return 0;
    const char *s = arg + 2;
    size_t len = strcspn(s, "=");
    if (len == 0 || len >= NAME_MAX_LEN)
        return 0;
    char name[NAME_MAX_LEN], dashed[NAME_MAX_LEN];
    memcpy(name, s, len);
    name[len] = '\0';
    for (size_t i = 0; i <= len; i++)
        dashed[i] = name[i] == '_' ? '-' : name[i];

    for (size_t i = 0; aliases && aliases[i]; i += 2)
        if (!strcmp(name, aliases[i]) || !strcmp(dashed, aliases[i])) {
            snprintf(hint, n, "; use %s", aliases[i + 1]);
            return 1;
        }
    if (strcmp(name, dashed))
        for (size_t i = 0; known[i]; i++)
            if (!strcmp(dashed, known[i])) {
                snprintf(hint, n, "; use --%s (cdl's options use dashes)", known[i]);
                return 1;
            }
    const char *best = NULL;
    int best_d = 3, prefixes = 0;
    const char *prefix_of = NULL;
    for (size_t i = 0; known[i]; i++) {
        size_t kl = strlen(known[i]);
        if (kl >= NAME_MAX_LEN)
            continue;
        if (!strncmp(known[i], dashed, len)) {
            prefixes++;
            prefix_of = known[i];
        }
        int d = distance(dashed, len, known[i], kl);
        if (d < best_d) {
            best_d = d;
            best = known[i];
        }
    }
    if (!best && prefixes == 1)
        best = prefix_of;
    if (!best)
        return 0;
    snprintf(hint, n, "; did you mean --%s?", best);
    return 1;
}

int suggest_value(const char *arg, const char *const *known, char *hint, size_t n)
{
    char opt[NAME_MAX_LEN + 2], h[NAME_MAX_LEN + 32];
    hint[0] = '\0';
    if (!*arg || strlen(arg) >= NAME_MAX_LEN - 1 || strchr(arg, '='))
        return 0;
    snprintf(opt, sizeof opt, "--%s", arg);
    /* The same rules as for option names; the hint names a value, not --X. */
    if (!suggest_option(opt, known, NULL, h, sizeof h))
        return 0;
    const char *name = strstr(h, "--");
    size_t len = name ? strcspn(name + 2, "? (") : 0;
    if (!name || !len)
        return 0;
    snprintf(hint, n, "; did you mean %.*s?", (int)len, name + 2);
    return 1;
}
