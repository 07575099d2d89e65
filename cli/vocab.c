/* nanoGPT's itos/stoi for cdl-generate (vocab.h). */
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

#include "vocab.h"

int vocab_parse(const char *meta, int vocab, char ***table)
{
    *table = NULL;
    size_t len = strlen(meta);
    /* The pointers, then the unescaped text (never longer than meta). */
    char **t = cdl_malloc((size_t)vocab * sizeof *t + len + 1);
    if (!t)
        return -1;
    char *p = (char *)(t + vocab);
    int k = 0;
    t[0] = p;
    for (const char *q = meta;; q++) {
        if (*q == '\0' || *q == '\n') {
            *p++ = '\0';
            if (t[k][0] == '\0')
                break;                    /* an empty string: k < vocab */
            if (++k == vocab || !*q) {
                k = *q ? -1 : k;          /* more lines than the vocabulary */
                break;
            }
            t[k] = p;
            continue;
        }
        if (*q == '\\' && (q[1] == '\\' || q[1] == 'n'))
            *p++ = *++q == 'n' ? '\n' : '\\';
        else
            *p++ = *q;
    }
    if (k != vocab) {
        cdl_free(t);
        return cdl_error("the checkpoint's itos metadata does not hold the %d non-empty strings "
                         "of its vocabulary: the file is damaged", vocab);
    }
    *table = t;
    return 0;
}

int vocab_encode(const char *s, char *const *table, int vocab, int **ids, int *n)
{
    size_t len = strlen(s);
    int *v = cdl_malloc((len + 1) * sizeof *v);
    if (!v)
        return -1;
    int count = 0;
    for (size_t at = 0; at < len;) {
        int best = -1;
        size_t best_len = 0;
        for (int k = 0; k < vocab; k++) {
            size_t l = strlen(table[k]);
            if (l > best_len && l <= len - at && !memcmp(s + at, table[k], l)) {
                best = k;
                best_len = l;
            }
        }
        if (best < 0) {
            /* The character: its UTF-8 bytes, a control one as \xNN. */
            size_t cl = 1;
            while (cl < 4 && at + cl < len && ((unsigned char)s[at + cl] & 0xc0) == 0x80)
                cl++;
            char shown[16];
            if ((unsigned char)s[at] < 0x20 || s[at] == 0x7f)
                snprintf(shown, sizeof shown, "\\x%02x", (unsigned char)s[at]);
            else
                snprintf(shown, sizeof shown, "%.*s", (int)cl, s + at);
            cdl_free(v);
            return cdl_error("--prompt: '%s' (byte %zu) is not in the model's vocabulary of %d "
                             "symbols (nanoGPT's meta.pkl itos: the characters of its training "
                             "text): leave it out of the prompt", shown, at, vocab);
        }
        v[count++] = best;
        at += best_len;
    }
    *ids = v;
    *n = count;
    return 0;
}
