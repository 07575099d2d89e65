/* Lists of names given on cdl-eval's and cdl-predict's command line:
 * --columns (a table's feature columns) and --classes (the model's class
 * names), as the checkpoint stores such names: one per line. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "evalcommon.h"

#define MAX_CLASSES_FILE ((long)16 << 20)

char *eval_comma_lines(const char *arg, const char *what, char *why, size_t len)
{
    char *out = cdl_malloc(strlen(arg) + 1), *q = out;
    if (!out) {
        snprintf(why, len, "out of memory");
        return NULL;
    }
    int column = !strcmp(what, "column");
    const char *p = arg;
    for (int k = 1;; k++) {
        if (*p == '"') {
            for (p++;; p++) {
                if (!*p) {
                    snprintf(why, len, "%s %d: a quote opened and not closed", what, k);
                    cdl_free(out);
                    return NULL;
                }
                if (*p == '"' && p[1] != '"')
                    break;
                p += *p == '"';   /* "" inside: one quote */
                *q++ = *p == '\n' ? ' ' : *p;
            }
            p++;
            if (*p && *p != ',') {
                snprintf(why, len, "%s %d: text after its closing quote", what, k);
                cdl_free(out);
                return NULL;
            }
        } else {
            size_t n = strcspn(p, ",");
            if (!n) {
                snprintf(why, len, "%s %d is empty (a typing slip?%s)", what, k,
                         column ? " a column without a name is \"\"" : "");
                cdl_free(out);
                return NULL;
            }
            for (size_t i = 0; i < n; i++)
                *q++ = p[i] == '\n' ? ' ' : p[i];
            p += n;
        }
        if (!*p)
            break;
        *q++ = '\n';
        p++;   /* the comma */
    }
    *q = '\0';
    return out;
}

/* A file of one class name per line (a byte order mark, CRLF line ends
 * and a last line without its line break taken as a text editor writes
 * them) -> the names one per line, cdl_malloc'd; NULL with why. */
static char *file_lines(const char *path, char *why, size_t len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        snprintf(why, len, "cannot read the file: %s", strerror(errno));
        return NULL;
    }
    char *out = NULL;
    long size = -1;
    if (fseek(fp, 0, SEEK_END) == 0)
        size = ftell(fp);
    if (size < 0 || size > MAX_CLASSES_FILE || fseek(fp, 0, SEEK_SET) != 0)
        snprintf(why, len, size > MAX_CLASSES_FILE ? "the file is larger than 16 MiB: is it "
                 "a list of class names?" : "cannot read the file");
    else if (!(out = cdl_malloc((size_t)size + 1)))
        snprintf(why, len, "out of memory");
    else if (fread(out, 1, (size_t)size, fp) != (size_t)size) {
        snprintf(why, len, "cannot read the file: %s", strerror(errno));
        cdl_free(out);
        out = NULL;
    }
    fclose(fp);
    if (!out)
        return NULL;
    out[size] = '\0';
    if (strlen(out) != (size_t)size) {
        snprintf(why, len, "the file holds a NUL byte: not a text file of class names");
        cdl_free(out);
        return NULL;
    }
    char *r = out, *w = out;
    if (!strncmp(r, "\xef\xbb\xbf", 3))
        r += 3;
    for (; *r; r++)
        if (!(*r == '\r' && (r[1] == '\n' || !r[1])))
            *w++ = *r;
    if (w > out && w[-1] == '\n')
        w--;   /* the last line's line break */
    *w = '\0';
    return out;
}

char *eval_classes_lines(const char *arg, int *count, char *why, size_t len)
{
    struct stat st;
    char *lines;
    int file = stat(arg, &st) == 0;
    if (file && S_ISDIR(st.st_mode)) {
        snprintf(why, len, "a folder, not a file of class names");
        return NULL;
    }
    if (!file && !strchr(arg, ',')) {
        snprintf(why, len, "no such file, and not a list of names (a list has two or more, "
                 "separated by commas)");
        return NULL;
    }
    if (!(lines = file ? file_lines(arg, why, len) : eval_comma_lines(arg, "class", why, len)))
        return NULL;
    /* Every name, unique: the k-th is the model's output k. */
    int n = 1;
    for (const char *p = lines; *p; p++)
        n += *p == '\n';
    const char *p = lines;
    for (int k = 1; k <= n; k++) {
        size_t l = strcspn(p, "\n");
        if (!l) {
            snprintf(why, len, "%s %d is empty", file ? "line" : "class", k);
            cdl_free(lines);
            return NULL;
        }
        const char *o = lines;
        for (int j = 1; j < k; j++) {
            size_t m = strcspn(o, "\n");
            if (m == l && !memcmp(o, p, l)) {
                snprintf(why, len, "'%.*s' is named twice (%s %d and %d)", (int)(l > 80 ? 80 : l),
                         p, file ? "lines" : "classes", j, k);
                cdl_free(lines);
                return NULL;
            }
            o += m + 1;
        }
        p += l + (p[l] == '\n');
    }
    *count = n;
    return lines;
}
