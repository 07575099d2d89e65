/* CSV tables (RFC 4180): a header row naming the columns, then one sample
 * per row; every column but the label column is a number (a feature). The
 * label column holds integers >= 0 (the class index) or any text (the
 * classes are then the distinct strings sorted by byte value, as
 * sklearn's LabelEncoder orders them). Fields may be quoted ("a ""b"", c"),
 * quoted fields may hold commas and line breaks; lines end in LF or CRLF. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "lib/data/internal.h"

#define MAX_FILE_BYTES ((size_t)1 << 34)
#define MAX_CLASSES 100000
#define MAX_COLUMNS 100000

typedef struct reader {
    const char *p, *end;
    const char *name;
    long line;         /* the line r->p is on, from 1 */
    long fline, eline; /* the lines the last field started and ended on */
    char *field;       /* the current field, unquoted, NUL-terminated */
    size_t flen, fcap;
} reader;

/* Reads one field; *eol = 1 when it ended its record (or the input). */
static int next_field(reader *r, int *eol)
{
    r->flen = 0;
    int quoted = r->p < r->end && *r->p == '"';
    long start_line = r->fline = r->line;
    if (quoted)
        r->p++;
    for (;;) {
        if (r->p >= r->end) {
            if (quoted)
                return cdl_error("%s:%ld: a quoted field is not closed before the end of the "
                                 "file: add its closing quote (\"), and double the quotes "
                                 "inside it (\"\")", r->name, start_line);
            r->eline = r->line;
            *eol = 1;
            break;
        }
        char ch = *r->p;
        if (quoted && ch == '"') {
            if (r->p + 1 < r->end && r->p[1] == '"') {
                r->p += 2;
            } else {
                r->p++;
                quoted = 0;
                if (r->p < r->end && *r->p != ',' && *r->p != '\n' && *r->p != '\r')
                    return cdl_error("%s:%ld: text after a closing quote: quote the whole field "
                                     "and double the quotes inside it (\"\")", r->name, r->line);
                continue;
            }
        } else if (!quoted && ch == ',') {
            r->eline = r->line;
            r->p++;
            *eol = 0;
            break;
        } else if (!quoted && (ch == '\n' || ch == '\r')) {
            r->eline = r->line;
            r->p += ch == '\r' && r->p + 1 < r->end && r->p[1] == '\n' ? 2 : 1;
            r->line++;
            *eol = 1;
            break;
        } else {
            /* A line break in a quoted field: LF, CRLF (counted at its
             * LF) or a CR alone, as they end records. */
            if (ch == '\n' || (ch == '\r' && (r->p + 1 >= r->end || r->p[1] != '\n')))
                r->line++;
            if (ch == '\0')
                return cdl_error("%s:%ld: a NUL byte: not a text file", r->name, r->line);
            r->p++;
        }
        if (r->flen + 2 > r->fcap) {
            size_t cap = r->fcap ? 2 * r->fcap : 64;
            char *f = realloc(r->field, cap);
            if (!f)
                return cdl_error("out of memory reading %s", r->name);
            r->field = f;
            r->fcap = cap;
        }
        r->field[r->flen++] = ch;
    }
    if (!r->field) {
        r->field = malloc(64);
        if (!r->field)
            return cdl_error("out of memory reading %s", r->name);
        r->fcap = 64;
    }
    r->field[r->flen] = 0;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A whole integer >= 0 that fits the class limit, or -1. */
static long class_index(const char *s)
{
    if (!*s)
        return -1;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9')
            return -1;
    if (strlen(s) > 9)
        return -1;
    long v = atol(s);
    return v < MAX_CLASSES ? v : -1;
}

void csv_layout_free(csv_layout *l)
{
    for (int j = 0; l->features && j < l->nf; j++)
        free(l->features[j]);
    free(l->features);
    free(l->label);
    memset(l, 0, sizeof *l);
}

typedef struct named {
    const char *name;
    int index;
} named;

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* slot[k]: the feature index column k of a test table's header fills in
 * the training table's order (the label column's slot is unused): matched
 * by name, so a table written with its columns in another order reads the
 * same; a column the training table lacks, or lacking one of it, is an
 * error. */
static int match_columns(char *const *header, int ncol, int label_col, const csv_layout *train,
                         const char *name, int *slot)
{
    char hn[128];
    int same = ncol - 1 == train->nf;
    for (int k = 0, j = 0; same && k < ncol; k++)
        if (k != label_col)
            same = !strcmp(header[k], train->features[j++]);
    if (same) {   /* the training table's order: nothing to look up */
        for (int k = 0, j = 0; k < ncol; k++)
            slot[k] = k == label_col ? -1 : j++;
        return 0;
    }
    named *idx = malloc((size_t)(train->nf ? train->nf : 1) * sizeof *idx);
    char *used = calloc((size_t)train->nf + 1, 1);
    int rc = 0;
    if (!idx || !used)
        rc = cdl_error("out of memory reading %s", name);
    for (int j = 0; !rc && j < train->nf; j++)
        idx[j] = (named){train->features[j], j};
    if (!rc)
        qsort(idx, (size_t)train->nf, sizeof *idx, cmp_name);
    for (int j = 1; !rc && j < train->nf; j++)
        if (!strcmp(idx[j - 1].name, idx[j].name))
            rc = cdl_error("%s:1: its columns are in another order than the training table's, "
                           "which has two columns named '%s': write the test table with the "
                           "training table's header", name,
                           data_printable(idx[j].name, hn, sizeof hn));
    for (int k = 0; !rc && k < ncol; k++) {
        slot[k] = -1;
        if (k == label_col)
            continue;
        /* Names are unique (checked above), so the match is the name's. */
        named key = {header[k], -1};
        const named *lo = bsearch(&key, idx, (size_t)train->nf, sizeof *idx, cmp_name);
        if (!lo)
            rc = cdl_error("%s:1: column '%s' is not a column of the training table: the "
                           "test table must have the training table's feature columns (in any "
                           "order): remove it, or name it as the training table does", name, data_printable(header[k], hn, sizeof hn));
        else if (used[lo->index]++)
            rc = cdl_error("%s:1: two columns are named '%s': rename or remove one", name,
                           data_printable(header[k], hn, sizeof hn));
        else
            slot[k] = lo->index;
    }
    for (int j = 0; !rc && j < train->nf; j++)
        if (!used[j])
            rc = cdl_error("%s:1: the header lacks the training table's column '%s': the test "
                           "table must have the training table's feature columns (in any "
                           "order)", name,
                           data_printable(train->features[j], hn, sizeof hn));
    free(idx);
    free(used);
    return rc;
}

/* The header: the fields of the first record (after a UTF-8 byte order
 * mark, which spreadsheets write), strdup'd into *header. */
static int read_header(reader *r, const char *name, char ***header, int *ncol)
{
    int eol = 0;
    if (r->end - r->p >= 3 && !memcmp(r->p, "\xef\xbb\xbf", 3))
        r->p += 3;
    if (r->p >= r->end)
        return cdl_error("%s is empty: a CSV table needs a header row and samples", name);
    do {
        if (next_field(r, &eol))
            return -1;
        if (*ncol == MAX_COLUMNS)
            return cdl_error("%s:1: the header has more than %d columns", name, MAX_COLUMNS);
        char **h = realloc(*header, (size_t)(*ncol + 1) * sizeof *h);
        if (!h)
            return cdl_error("out of memory reading %s", name);
        *header = h;
        if (!(h[*ncol] = strdup(r->field)))
            return cdl_error("out of memory reading %s", name);
        (*ncol)++;
    } while (!eol);
    return 0;
}

/* A header of one column: spreadsheets in many locales save ';' (or tab)
 * separated "CSV"; hint says so ("" otherwise). */
static void sep_hint(char *const *header, int ncol, char *hint, size_t len)
{
    const char *sep = ncol != 1 ? NULL : strchr(header[0], ';') ? "';'"
                      : strchr(header[0], '\t') ? "tabs" : NULL;
    snprintf(hint, len, "%s%s%s", sep ? ": its fields are separated by " : "", sep ? sep : "",
             sep ? ", cdl reads commas (save the table as comma-separated CSV)" : "");
}

/* Column k for messages: 'name', or its number when the header leaves
 * it without one. */
static const char *column_name(char *const *header, int k, char *buf, size_t len)
{
    char pn[128];
    if (header[k][0])
        snprintf(buf, len, "'%s'", data_printable(header[k], pn, sizeof pn));
    else
        snprintf(buf, len, "%d (no name in the header)", k + 1);
    return buf;
}

/* Appends 'name' to the list in buf (", " between), "..." once full. */
static void list_add(char *buf, size_t len, const char *name)
{
    size_t at = strlen(buf);
    char pn[128];
    if (!len || at + 5 >= len)
        return;
    if (at + strlen(name) + 8 >= len || at > 400) {
        if (!strstr(buf, "..."))
            snprintf(buf + at, len - at, ", ...");
        return;
    }
    snprintf(buf + at, len - at, "%s'%s'", at ? ", " : "", data_printable(name, pn, sizeof pn));
}

/* For a message naming line at of a record that starts on line first and
 * ends on line last: where they differ, the other end, and that its quoted
 * fields hold line breaks, which a missing quote makes of the lines after
 * it. */
static const char *row_span(long at, long first, long last, char *buf, size_t len)
{
    if (last == first)
        snprintf(buf, len, "%s", "");
    else if (at == first)
        snprintf(buf, len, " (the row runs to line %ld: a quoted field holds line breaks; is "
                 "a quote missing?)", last);
    else
        snprintf(buf, len, " (the row starts on line %ld: a quoted field holds line breaks; "
                 "is a quote missing?)", first);
    return buf;
}

/* The records after the header, each with the header's ncol fields: the
 * field of column k is feature slot[k] (>= 0) of (rows, nf) *feat, the
 * label (-1: its text in (*labels)[row], an empty one an error when
 * need_label) or not read (-2: a column the caller does not use). lines
 * (NULL: not kept): each row's line in the file, that of its label cell
 * (of its first field without a label column), for messages about its
 * label: a multi-line header, blank lines and line breaks in quoted fields
 * make it other than the row's number + 1. Messages about a cell name the
 * line it starts on. */
static int read_rows(reader *r, const char *name, char *const *header, int ncol, const int *slot,
                     int nf, int need_label, float **feat, char ***labels, long **lines,
                     long *rows)
{
    long cap = 0;
    int eol = 0;
    while (r->p < r->end) {
        if (*r->p == '\n' || *r->p == '\r') {   /* blank line */
            r->p += *r->p == '\r' && r->p + 1 < r->end && r->p[1] == '\n' ? 2 : 1;
            r->line++;
            continue;
        }
        if (*rows == cap) {
            cap = cap ? 2 * cap : 1024;
            if ((size_t)cap > SIZE_MAX / sizeof(float) / (size_t)(nf ? nf : 1) || cap > INT_MAX)
                return cdl_error("%s: too many rows", name);
            float *f = realloc(*feat, (size_t)cap * (size_t)(nf ? nf : 1) * sizeof *f);
            if (f)
                *feat = f;
            char **l = realloc(*labels, (size_t)cap * sizeof *l);
            if (l)
                *labels = l;
            long *ln = lines ? realloc(*lines, (size_t)cap * sizeof *ln) : NULL;
            if (ln)
                *lines = ln;
            if (!f || !l || (lines && !ln))
                return cdl_error("out of memory reading %s", name);
        }
        long line = r->line, i = (*rows)++;   /* counted now: freed on an error */
        (*labels)[i] = NULL;
        if (lines)
            (*lines)[i] = line;
        int k = 0;
        char hn[128];
        do {
            if (next_field(r, &eol))
                return -1;
            if (k >= ncol)
                return cdl_error("%s:%ld: more fields than the %d columns of the header%s: "
                                 "quote a field that holds a comma (\"a, b\"), or drop the "
                                 "extra ones", name, r->fline, ncol,
                                 row_span(r->fline, line, r->eline, hn, sizeof hn));
            if (slot[k] == -1) {
                /* A missing label would become a class named "" (and turn
                 * integer labels into text ones). */
                if (!r->field[0] && need_label)
                    return cdl_error("%s:%ld: the label column '%s' is empty: every row needs a "
                                     "label: fill it in or drop the row", name, r->fline,
                                     data_printable(header[k], hn, sizeof hn));
                if (lines)
                    (*lines)[i] = r->fline;
                free((*labels)[i]);
                if (!((*labels)[i] = strdup(r->field)))
                    return cdl_error("out of memory reading %s", name);
            } else if (slot[k] >= 0) {
                char *end;
                double v = strtod(r->field, &end);
                while (*end == ' ' || *end == '\t')
                    end++;
                char pn[128];
                if (!r->field[strspn(r->field, " \t")])
                    return cdl_error("%s:%ld: column %s is empty (a missing value): every "
                                     "feature needs a number: fill it in or drop the row%s",
                                     name, r->fline, column_name(header, k, hn, sizeof hn),
                                     header[k][0] ? "" : " (a spreadsheet's empty column past "
                                     "the table: delete it)");
                if (*end || !isfinite(v) || fabs(v) > 3.4e38)
                    return cdl_error("%s:%ld: column %s holds '%s', not a finite number: every "
                                     "column but the label (--label-column) must be numeric",
                                     name, r->fline, column_name(header, k, hn, sizeof hn),
                                     data_printable(r->field, pn, sizeof pn));
                (*feat)[(size_t)i * nf + slot[k]] = (float)v;
            }
            k++;
        } while (!eol);
        if (k != ncol)
            return cdl_error("%s:%ld: %d fields but the header has %d columns%s: give the row "
                             "a field per column (an empty one between two commas)", name, line,
                             k, ncol, row_span(line, line, r->eline, hn, sizeof hn));
    }
    return 0;
}

/* A parse's header (ncol names) and row labels (rows texts). */
static void free_table(char **header, int ncol, char **labels, long rows)
{
    for (int k = 0; k < ncol; k++)
        free(header[k]);
    free(header);
    for (long i = 0; labels && i < rows; i++)
        free(labels[i]);
    free(labels);
}

int csv_parse(const char *buf, size_t len, const char *name, const char *label_column,
              const csv_layout *train, csv_layout *layout, cdl_dataset *out)
{
    reader r = {.p = buf, .end = buf + len, .name = name, .line = 1};
    char **header = NULL, **labels = NULL;
    float *feat = NULL;
    int *slot = NULL;
    long *lines = NULL;
    int ncol = 0, label_col = -1, rc = 0;
    long rows = 0;
    if ((rc = read_header(&r, name, &header, &ncol)))
        goto done;
    if (ncol < 2) {
        char hint[160];
        sep_hint(header, ncol, hint, sizeof hint);
        rc = cdl_error("%s:1: the header has %d column: a table needs features and a label "
                       "column%s", name, ncol, hint);
        goto done;
    }
    /* A test table's label column is the training table's, by name. */
    if (train)
        label_column = train->label;
    for (int k = 0; k < ncol; k++)
        if (label_column ? !strcmp(header[k], label_column) : !strcmp(header[k], "label"))
            label_col = k;
    if (label_col < 0 && train) {
        char pn[256];
        rc = cdl_error("%s:1: the header has no column '%s', the training table's label "
                       "column: name the test table's label column as the training table does",
                       name, data_printable(train->label, pn, sizeof pn));
        goto done;
    }
    if (label_col < 0 && label_column) {
        /* The names quoted, so that a space after a comma ("a, label")
         * shows: it is part of the name. */
        char names[512] = "", pn[128];
        for (int k = 0; k < ncol && strlen(names) < 400; k++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'",
                     k ? ", " : "", data_printable(header[k], pn, sizeof pn));
        rc = cdl_error("%s:1: no column named '%s' in the header (%s%s): pass --label-column "
                       "with one of its names", name, label_column, names,
                       strlen(names) >= 400 ? ", ..." : "");
        goto done;
    }
    if (label_col < 0)
        label_col = ncol - 1;
    const int nf = ncol - 1;
    if (!(slot = malloc((size_t)ncol * sizeof *slot))) {
        rc = cdl_error("out of memory reading %s", name);
        goto done;
    }
    if (train) {
        if ((rc = match_columns(header, ncol, label_col, train, name, slot)))
            goto done;
    } else {
        for (int k = 0, j = 0; k < ncol; k++)
            slot[k] = k == label_col ? -1 : j++;
    }
    if ((rc = read_rows(&r, name, header, ncol, slot, nf, 1, &feat, &labels, &lines, &rows)))
        goto done;
    if (rows == 0) {
        rc = cdl_error("%s has a header but no rows", name);
        goto done;
    }

    /* Labels: all class indices, or class names. */
    out->labels = cdl_malloc((size_t)rows * sizeof *out->labels);
    if (!out->labels) {
        rc = -1;
        goto done;
    }
    char *const *names = train ? train->class_names : NULL;
    const int nnames = train ? train->classes : 0;
    /* Training labels that were class indices: so must the test table's
     * be (its own text labels would number classes of their own). */
    int numeric = !names;
    for (long i = 0; numeric && i < rows; i++)
        if (!(numeric = class_index(labels[i]) >= 0) && train) {
            char pn[128], tn[256];
            rc = cdl_error("%s:%ld: label '%s' is not a class index: the training "
                           "table%s%s's labels are integers from 0 (its class indices): "
                           "correct the label or drop the row", name, lines[i],
                           data_printable(labels[i], pn, sizeof pn),
                           train->name ? " " : "",
                           train->name ? data_printable(train->name, tn, sizeof tn) : "");
            goto done;
        }
    if (numeric) {
        long maxl = 0;
        for (long i = 0; i < rows; i++) {
            out->labels[i] = (int32_t)class_index(labels[i]);
            if (out->labels[i] > maxl)
                maxl = out->labels[i];
        }
        out->classes = (int)maxl + 1;
    } else {
        char **sorted = NULL;
        int ns = nnames;
        if (!names) {
            /* Distinct label strings, sorted. */
            sorted = malloc((size_t)rows * sizeof *sorted);
            if (!sorted) {
                rc = cdl_error("out of memory reading %s", name);
                goto done;
            }
            memcpy(sorted, labels, (size_t)rows * sizeof *sorted);
            qsort(sorted, (size_t)rows, sizeof *sorted, cmp_str);
            ns = 0;
            for (long i = 0; i < rows; i++)
                if (ns == 0 || strcmp(sorted[ns - 1], sorted[i]))
                    sorted[ns++] = sorted[i];
            if (ns > MAX_CLASSES) {
                free(sorted);
                rc = cdl_error("%s: %d distinct labels, more than %d classes", name, ns,
                               MAX_CLASSES);
                goto done;
            }
        }
        char *const *list = names ? names : sorted;
        out->classes = ns;
        out->class_names = cdl_calloc((size_t)ns, sizeof *out->class_names);
        for (int c = 0; !rc && out->class_names && c < ns; c++) {
            if (!data_utf8_ok(list[c])) {
                /* The first row holding it, for its line (the training
                 * table's names were checked as it was read). */
                long at = 0;
                while (at < rows && strcmp(labels[at], list[c]))
                    at++;
                char pn[128], ln[32] = "";
                if (at < rows)
                    snprintf(ln, sizeof ln, ":%ld", lines[at]);
                rc = cdl_error("%s%s: the label '%s' is not UTF-8 text: save the table as UTF-8",
                               name, ln, data_printable(list[c], pn, sizeof pn));
                break;
            }
            size_t l = strlen(list[c]) + 1;
            if (!(out->class_names[c] = cdl_malloc(l)))
                rc = -1;
            else
                memcpy(out->class_names[c], list[c], l);
        }
        if (!out->class_names)
            rc = -1;
        for (long i = 0; !rc && i < rows; i++) {
            char *const *hit = bsearch(&labels[i], list, (size_t)ns, sizeof *list, cmp_str);
            if (!hit) {
                /* The classes are the training table's, numbered as it
                 * numbers them: a label it lacks has no index (a class
                 * of the test table's own would renumber the others). */
                char pn[128], tn[256], some[256] = "";
                for (int c = 0; c < ns && c < 8; c++)
                    list_add(some, sizeof some, list[c]);
                if (ns > 8 && !strstr(some, "..."))
                    snprintf(some + strlen(some), sizeof some - strlen(some), ", ...");
                rc = cdl_error("%s:%ld: label '%s' is not a class of the training "
                               "table%s%s, whose %d classes (%s) number the model's outputs: "
                               "a test table's labels must be among them: correct the label "
                               "or drop the row", name, lines[i],
                               data_printable(labels[i], pn, sizeof pn),
                               train->name ? " " : "",
                               train->name ? data_printable(train->name, tn, sizeof tn) : "",
                               ns, some);
                break;
            }
            out->labels[i] = (int32_t)(hit - list);
        }
        free(sorted);
        if (rc)
            goto done;
    }
    out->n = (int)rows;
    out->shape = (cdl_shape){nf, 1, 1};
    out->features = cdl_malloc((size_t)rows * nf * sizeof(float));
    if (!out->features) {
        rc = -1;
        goto done;
    }
    memcpy(out->features, feat, (size_t)rows * nf * sizeof(float));
    if (layout) {   /* the header moves into the layout: features, then the label */
        memset(layout, 0, sizeof *layout);
        layout->features = malloc((size_t)(nf ? nf : 1) * sizeof *layout->features);
        if (!layout->features) {
            rc = cdl_error("out of memory reading %s", name);
            goto done;
        }
        for (int k = 0; k < ncol; k++)
            if (k == label_col)
                layout->label = header[k];
            else
                layout->features[layout->nf++] = header[k];
        ncol = 0;   /* freed with the layout */
    }
done:
    free_table(header, ncol, labels, rows);
    free(feat);
    free(slot);
    free(lines);
    free(r.field);
    return rc ? -1 : 0;
}

static int exists(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

/* One table file; train and layout as csv_parse takes them. */
static int read_table(const char *file, const char *label_column, const csv_layout *train,
                      csv_layout *layout, cdl_dataset *out)
{
    char pn[512];
    uint8_t *buf;
    size_t len;
    int rc = data_read_file(file, MAX_FILE_BYTES, "pass the CSV file (or a folder with train.csv "
                            "and test.csv) as --data-dir", &buf, &len);
    if (!rc) {
        rc = csv_parse((const char *)buf, len, data_printable(file, pn, sizeof pn), label_column,
                       train, layout, out);
        cdl_free(buf);
    }
    return rc;
}

int csv_read(const char *path, int train, const char *label_column, cdl_dataset *out)
{
    char file[4096];
    snprintf(file, sizeof file, "%s/train.csv", path);
    int dir = exists(file);
    if (train)
        return read_table(dir ? file : path, label_column, NULL, NULL, out);
    char test[4096];
    snprintf(test, sizeof test, "%s/test.csv", path);
    if (!dir || !exists(test))
        return 1;   /* a single table: the training split alone */

    /* The test table follows the training table: its columns, its label
     * column and its classes. */
    cdl_dataset tr = {0};
    csv_layout lay = {0};
    int rc = read_table(file, label_column, NULL, &lay, &tr);
    if (!rc) {
        char pn[512];
        lay.class_names = tr.class_names;
        lay.classes = tr.classes;
        lay.name = data_printable(file, pn, sizeof pn);
        rc = read_table(test, label_column, &lay, NULL, out);
    }
    csv_layout_free(&lay);
    cdl_dataset_free(&tr);
    return rc;
}

/* A header name as a checkpoint stores it: a line break is a space (the
 * names are stored one per line). */
static void one_line(char *s)
{
    for (; *s; s++)
        if (*s == '\n' || *s == '\r')
            *s = ' ';
}

/* a and b are the same name but for spaces around it. */
static int same_trimmed(const char *a, const char *b)
{
    a += strspn(a, " \t");
    b += strspn(b, " \t");
    size_t la = strlen(a), lb = strlen(b);
    while (la && (a[la - 1] == ' ' || a[la - 1] == '\t'))
        la--;
    while (lb && (b[lb - 1] == ' ' || b[lb - 1] == '\t'))
        lb--;
    return la == lb && !memcmp(a, b, la);
}

int csv_parse_rows(const char *buf, size_t len, const char *name, const char *const *features,
                   int nf, const char *label, char *ignored, size_t ignored_len, cdl_dataset *out)
{
    return csv_parse_rows_lines(buf, len, name, features, nf, label, ignored, ignored_len, out,
                                NULL);
}

int csv_parse_rows_lines(const char *buf, size_t len, const char *name,
                         const char *const *features, int nf, const char *label, char *ignored,
                         size_t ignored_len, cdl_dataset *out, long **row_lines)
{
    reader r = {.p = buf, .end = buf + len, .name = name, .line = 1};
    char **header = NULL, **labels = NULL, hn[128];
    float *feat = NULL;
    int *slot = NULL;
    named *idx = NULL;
    char *used = NULL, missing[512] = "";
    int ncol = 0, rc = 0, has_label = 0, nmissing = 0;
    long rows = 0, *lines = NULL;
    if (row_lines)
        *row_lines = NULL;
    if (ignored && ignored_len)
        ignored[0] = '\0';
    if (nf < 1 || nf > MAX_COLUMNS)
        return cdl_error("%s: %d feature columns asked for", name, nf);
    if ((rc = read_header(&r, name, &header, &ncol)))
        goto done;
    slot = malloc((size_t)ncol * sizeof *slot);
    idx = malloc((size_t)nf * sizeof *idx);
    used = calloc((size_t)nf, 1);
    if (!slot || !idx || !used) {
        rc = cdl_error("out of memory reading %s", name);
        goto done;
    }
    /* The wanted names sorted, for a lookup per header column. */
    for (int j = 0; j < nf; j++)
        idx[j] = (named){features[j], j};
    qsort(idx, (size_t)nf, sizeof *idx, cmp_name);
    for (int k = 0; k < ncol; k++)
        one_line(header[k]);
    for (int j = 1; j < nf; j++)
        if (!strcmp(idx[j - 1].name, idx[j].name)) {
            /* A training table with two columns of one name: only its own
             * header, in its order (the label column anywhere), says which
             * is which. */
            int same = 1, f = 0;
            for (int k = 0; same && k < ncol; k++)
                if (label && !strcmp(header[k], label))
                    slot[k] = -1;
                else if ((same = f < nf && !strcmp(header[k], features[f])))
                    slot[k] = f++;
            if (same && f == nf)
                goto rows;
            rc = cdl_error("%s: the model's feature columns include two named '%s': its columns "
                           "cannot be matched by name; give the training table's header, in "
                           "its order", name, data_printable(idx[j].name, hn, sizeof hn));
            goto done;
        }
    for (int k = 0; k < ncol; k++) {
        named key = {header[k], -1};
        const named *hit = bsearch(&key, idx, (size_t)nf, sizeof *idx, cmp_name);
        slot[k] = -2;
        if (label && !strcmp(header[k], label) && !has_label) {
            slot[k] = -1;
            has_label = 1;
        } else if (hit && used[hit->index]++) {
            rc = cdl_error("%s:1: two columns are named '%s': which one is the feature is not "
                           "known: rename or remove one", name,
                           data_printable(header[k], hn, sizeof hn));
            goto done;
        } else if (hit) {
            slot[k] = hit->index;
        } else if (ignored) {
            list_add(ignored, ignored_len, header[k]);
        }
    }
    /* Near misses said: a name spaced otherwise ("a, b"), and a column
     * without a name (pandas' row index, trained on). */
    char near[160] = "";
    int unnamed = 0;
    for (int j = 0; j < nf; j++) {
        if (used[j])
            continue;
        list_add(missing, sizeof missing, features[j]);
        nmissing++;
        unnamed |= !features[j][0];
        for (int k = 0; k < ncol && !near[0]; k++)
            if (slot[k] == -2 && same_trimmed(header[k], features[j]))
                snprintf(near, sizeof near, "; the table's '%s' differs from '%s' in spaces "
                         "only: names must match exactly", data_printable(header[k], hn, 48),
                         data_printable(features[j], hn + 64, 48));
    }
    if (nmissing) {
        char hint[160];
        sep_hint(header, ncol, hint, sizeof hint);
        rc = cdl_error("%s:1: the header lacks %d of the %d feature columns the model was "
                       "trained on: %s (columns are matched by their header names: give the "
                       "table those columns)%s%s%s", name, nmissing,
                       nf, missing, near, unnamed ? "; the column without a name is most often "
                       "pandas' row index, which the model was trained on: write the table with "
                       "to_csv() as the training table was" : "", hint);
        goto done;
    }
rows:
    if ((rc = read_rows(&r, name, header, ncol, slot, nf, 0, &feat, &labels,
                        row_lines ? &lines : NULL, &rows)))
        goto done;
    if (rows == 0) {
        rc = cdl_error("%s has a header but no rows", name);
        goto done;
    }
    has_label = 0;
    for (int k = 0; k < ncol; k++)
        has_label |= slot[k] == -1;
    out->n = (int)rows;
    out->shape = (cdl_shape){nf, 1, 1};
    out->classes = (int)rows;
    out->labels = cdl_malloc((size_t)rows * sizeof *out->labels);
    out->features = cdl_malloc((size_t)rows * nf * sizeof(float));
    if (!out->labels || !out->features) {
        rc = -1;
        goto done;
    }
    for (long i = 0; i < rows; i++)
        out->labels[i] = (int32_t)i;
    memcpy(out->features, feat, (size_t)rows * nf * sizeof(float));
    if (has_label) {
        if (!(out->class_names = cdl_calloc((size_t)rows, sizeof *out->class_names))) {
            rc = -1;
            goto done;
        }
        for (long i = 0; i < rows; i++) {
            size_t l = strlen(labels[i]) + 1;
            if (!(out->class_names[i] = cdl_malloc(l))) {
                rc = -1;
                goto done;
            }
            memcpy(out->class_names[i], labels[i], l);
        }
    }
    if (row_lines) {
        if (!(*row_lines = cdl_malloc((size_t)rows * sizeof **row_lines))) {
            rc = -1;
            goto done;
        }
        memcpy(*row_lines, lines, (size_t)rows * sizeof *lines);
    }
done:
    free_table(header, ncol, labels, rows);
    free(feat);
    free(slot);
    free(idx);
    free(used);
    free(lines);
    free(r.field);
    return rc ? -1 : 0;
}

/* The training table's file of path (a file, or a folder's train.csv). */
static void train_file(const char *path, char *file, size_t len)
{
    snprintf(file, len, "%s/train.csv", path);
    if (!exists(file))
        snprintf(file, len, "%s", path);
}

int cdl_dataset_from_csv_rows(const char *path, const char *const *features, int nf,
                              const char *label_column, char *ignored, size_t ignored_len,
                              cdl_dataset *out)
{
    if (!path || !out || (nf > 0 && !features))
        return cdl_error("cdl_dataset_from_csv_rows: path, features or out is NULL");
    return cdl_dataset_from_csv_rows_lines(path, features, nf, label_column, ignored,
                                           ignored_len, out, NULL);
}

int cdl_dataset_from_csv_rows_lines(const char *path, const char *const *features, int nf,
                                    const char *label_column, char *ignored, size_t ignored_len,
                                    cdl_dataset *out, long **lines)
{
    if (lines)
        *lines = NULL;
    if (!path || !out || (nf > 0 && !features))
        return cdl_error("cdl_dataset_from_csv_rows_lines: path, features or out is NULL");
    memset(out, 0, sizeof *out);
    char pn[512];
    uint8_t *buf;
    size_t len;
    if (data_read_file(path, MAX_FILE_BYTES, "give a CSV table with a header row", &buf, &len))
        return -1;
    int rc = csv_parse_rows_lines((const char *)buf, len, data_printable(path, pn, sizeof pn),
                                  features, nf, label_column, ignored, ignored_len, out, lines);
    cdl_free(buf);
    if (rc == 0 && nf > 3) {
        out->channel_mean = cdl_calloc((size_t)nf, sizeof(float));
        out->channel_std = cdl_calloc((size_t)nf, sizeof(float));
        rc = out->channel_mean && out->channel_std ? 0 : -1;
        for (int k = 0; rc == 0 && k < nf; k++)
            out->channel_std[k] = 1;
    }
    for (int k = 0; k < 3; k++)
        out->std[k] = 1;
    snprintf(out->name, sizeof out->name, "csv");
    if (rc) {
        cdl_dataset_free(out);
        if (lines) {
            cdl_free(*lines);
            *lines = NULL;
        }
    }
    return rc;
}

int csv_columns(const char *path, const char *label_column, char **features, char **label)
{
    char file[4096], pn[512];
    train_file(path, file, sizeof file);
    *features = *label = NULL;
    uint8_t *buf;
    size_t len;
    if (data_read_file(file, MAX_FILE_BYTES, "pass the CSV file (or a folder with train.csv) "
                       "as --data-dir", &buf, &len))
        return -1;
    reader r = {.p = (const char *)buf, .end = (const char *)buf + len,
                .name = data_printable(file, pn, sizeof pn), .line = 1};
    char **header = NULL;
    int ncol = 0, label_col = -1;
    int rc = read_header(&r, r.name, &header, &ncol);
    for (int k = 0; !rc && k < ncol; k++) {
        one_line(header[k]);
        if (label_column ? !strcmp(header[k], label_column) : !strcmp(header[k], "label"))
            label_col = k;
    }
    if (!rc && label_col < 0)
        label_col = ncol - 1;   /* csv_parse's rule (a given name is there: it read the table) */
    size_t total = 1;
    for (int k = 0; !rc && k < ncol; k++)
        total += strlen(header[k]) + 1;
    if (!rc && (!(*features = cdl_malloc(total)) || !(*label = cdl_malloc(total))))
        rc = -1;
    if (!rc) {
        /* One per line; a name may be empty (pandas' unnamed index column). */
        char *p = *features;
        for (int k = 0, j = 0; k < ncol; k++)
            if (k != label_col)
                p += sprintf(p, "%s%s", j++ ? "\n" : "", header[k]);
        *p = '\0';
        strcpy(*label, header[label_col]);
    }
    for (int k = 0; k < ncol; k++)
        free(header[k]);
    free(header);
    free(r.field);
    cdl_free(buf);
    if (rc) {
        cdl_free(*features);
        cdl_free(*label);
        *features = *label = NULL;
    }
    return rc ? -1 : 0;
}
