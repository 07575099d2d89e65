/* Reading --metrics files for cdl-plot (plot_read.h). A small scanner of
 * one JSON object per line: top-level keys with number or string values
 * are looked at, nested objects and arrays (the config record's "config")
 * are skipped by bracket depth. Epoch, step and eval records are kept.
 * Nothing here trusts the input: every scan stops at the string's end. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot_read.h"

static const char *ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
        p++;
    return p;
}

/* p at '"': the position after the closing quote, NULL if unterminated. */
static const char *skip_string(const char *p)
{
    for (p++; *p; p++) {
        if (*p == '\\') {
            if (!p[1])
                return NULL;
            p++;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

/* p at a value: the position after it, NULL if malformed. */
static const char *skip_value(const char *p)
{
    if (*p == '"')
        return skip_string(p);
    if (*p == '{' || *p == '[') {
        int depth = 0;
        while (*p) {
            if (*p == '"') {
                if (!(p = skip_string(p)))
                    return NULL;
                continue;
            }
            if (*p == '{' || *p == '[')
                depth++;
            else if (*p == '}' || *p == ']')
                depth--;
            p++;
            if (depth == 0)
                return p;
            if (depth > 64)
                return NULL;
        }
        return NULL;
    }
    const char *s = p;
    while (*p && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' &&
           *p != '\r' && *p != '\n')
        p++;
    return p > s ? p : NULL;
}

/* The number of a value [v, end): 0 and *out, -1 if it is none. */
static int number(const char *v, const char *end, double *out)
{
    char buf[64];
    size_t n = (size_t)(end - v);
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    char *e;
    errno = 0;
    double d = strtod(buf, &e);
    if (*e || errno == ERANGE || !isfinite(d))
        return -1;
    *out = d;
    return 0;
}

/* A string value without escapes into out (len bytes); -1 otherwise. */
static int plain_string(const char *v, const char *end, char *out, size_t len)
{
    size_t n = (size_t)(end - v);
    if (n < 2 || v[0] != '"' || memchr(v, '\\', n) || n - 2 >= len)
        return -1;
    memcpy(out, v + 1, n - 2);
    out[n - 2] = '\0';
    return 0;
}

int plot_parse_line(const char *line, plot_point *pt, char id[40])
{
    const char *p = ws(line);
    if (!*p)
        return 0;
    if (*p != '{')
        return -1;
    p = ws(p + 1);
    char type[16] = "";
    id[0] = '\0';
    memset(pt, 0, sizeof *pt);
    pt->train_loss = pt->train_acc = pt->val_loss = pt->val_acc = pt->lr = NAN;
    int have_epoch = 0, have_step = 0, first = 1;
    while (*p != '}') {
        if (!first) {
            if (*p != ',')
                return -1;
            p = ws(p + 1);
        }
        first = 0;
        if (*p != '"')
            return -1;
        const char *k = p + 1, *kend = skip_string(p);
        if (!kend)
            return -1;
        size_t klen = (size_t)(kend - 1 - k);
        p = ws(kend);
        if (*p != ':')
            return -1;
        const char *v = ws(p + 1), *vend = skip_value(v);
        if (!vend)
            return -1;
        p = ws(vend);
#define KEY(s) (klen == sizeof(s) - 1 && !memcmp(k, s, klen))
        double d;
        if (KEY("type")) {
            if (plain_string(v, vend, type, sizeof type) != 0)
                return -1;
        } else if (KEY("run_id")) {
            if (plain_string(v, vend, id, 40) != 0)
                return -1;
        } else if (KEY("epoch")) {
            if (number(v, vend, &d) != 0 || d < 0 || d > 1e9)
                return -1;
            pt->epoch = (int)d;
            have_epoch = 1;
        } else if (KEY("step")) {
            if (number(v, vend, &d) != 0 || d < 0 || d > 1e15)
                return -1;
            pt->step = (long)d;
            have_step = 1;
        } else {
            double *dst = KEY("train_loss") || KEY("loss") ? &pt->train_loss
                          : KEY("train_acc") || KEY("acc") ? &pt->train_acc
                          : KEY("val_loss")  ? &pt->val_loss
                          : KEY("val_acc")   ? &pt->val_acc
                          : KEY("lr")        ? &pt->lr
                                             : NULL;
            if (dst && number(v, vend, dst) != 0)
                return -1;
        }
#undef KEY
    }
    if (*ws(p + 1))
        return -1;
    /* Files from before record types hold epoch records only. */
    if (!type[0])
        return have_epoch ? PLOT_EPOCH : 0;
    if (!strcmp(type, "epoch"))
        return have_epoch ? PLOT_EPOCH : -1;
    if (!strcmp(type, "step") || !strcmp(type, "eval"))
        return have_step ? (!strcmp(type, "step") ? PLOT_STEP : PLOT_EVAL) : -1;
    return 0;
}

/* The label of file path: "lr-0.01" for runs/lr-0.01/metrics.jsonl,
 * "a" for dir/a.jsonl. Newlines and quotes become '_' (labels go into
 * gnuplot's script). */
static void file_label(const char *path, char *out, size_t len)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strcspn(base, ".");
    const char *from = base;
    if ((n == 7 && !strncmp(base, "metrics", 7)) && base > path) {
        const char *end = base - 1, *start = end;
        while (start > path && start[-1] != '/')
            start--;
        if (end > start) {
            from = start;
            n = (size_t)(end - start);
        }
    }
    if (n == 0)
        n = strlen(from);
    if (n >= len)
        n = len - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = (from[i] == '\n' || from[i] == '\r' || from[i] == '\'' || from[i] == '"' ||
                  (unsigned char)from[i] < 32) ? '_' : from[i];
    out[n] = '\0';
}

static plot_run *run_for(plot_set *set, int first_of_file, const char *id)
{
    for (int i = first_of_file; i < set->n; i++)
        if (!strcmp(set->runs[i].id, id))
            return &set->runs[i];
    if (set->n == set->cap) {
        int cap = set->cap ? 2 * set->cap : 8;
        plot_run *r = realloc(set->runs, (size_t)cap * sizeof *r);
        if (!r)
            return NULL;
        set->runs = r;
        set->cap = cap;
    }
    plot_run *r = &set->runs[set->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "%s", id);
    return r;
}

static long key_of(const plot_point *p, int by_epoch)
{
    return by_epoch ? p->epoch : p->step;
}

/* Puts p into s, replacing a record of the same key, in key order (records
 * come in order: the search starts from the end). */
static int add_point(plot_series *s, const plot_point *p, int by_epoch)
{
    long key = key_of(p, by_epoch);
    int i = s->n;
    while (i > 0 && key_of(&s->pts[i - 1], by_epoch) > key)
        i--;
    if (i > 0 && key_of(&s->pts[i - 1], by_epoch) == key) {
        s->pts[i - 1] = *p;
        return 0;
    }
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        plot_point *q = realloc(s->pts, (size_t)cap * sizeof *q);
        if (!q)
            return -1;
        s->pts = q;
        s->cap = cap;
    }
    memmove(s->pts + i + 1, s->pts + i, (size_t)(s->n - i) * sizeof *p);
    s->pts[i] = *p;
    s->n++;
    return 0;
}

static int add_record(plot_run *r, int kind, const plot_point *p)
{
    return kind == PLOT_EPOCH ? add_point(&r->epochs, p, 1)
           : kind == PLOT_STEP ? add_point(&r->steps, p, 0)
                               : add_point(&r->evals, p, 0);
}

int plot_read_file(plot_set *set, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cdl-plot: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    int first = set->n;
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    while (getline(&line, &cap, f) >= 0) {
        plot_point p;
        char id[40];
        int got = plot_parse_line(line, &p, id);
        if (got < 0)
            set->bad_lines++;
        if (got <= 0)
            continue;
        plot_run *r = run_for(set, first, id);
        if (!r || add_record(r, got, &p) != 0) {
            fprintf(stderr, "cdl-plot: out of memory reading %s\n", path);
            rc = -1;
            break;
        }
    }
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "cdl-plot: reading %s: %s\n", path, strerror(errno));
        rc = -1;
    }
    free(line);
    fclose(f);
    char label[120];
    file_label(path, label, sizeof label);
    for (int i = first; i < set->n; i++) {
        plot_run *r = &set->runs[i];
        if (set->n - first > 1 && r->id[0])
            snprintf(r->label, sizeof r->label, "%s %.8s", label, r->id);
        else
            snprintf(r->label, sizeof r->label, "%s", label);
    }
    return rc;
}

void plot_set_free(plot_set *set)
{
    for (int i = 0; i < set->n; i++) {
        free(set->runs[i].epochs.pts);
        free(set->runs[i].steps.pts);
        free(set->runs[i].evals.pts);
    }
    free(set->runs);
    memset(set, 0, sizeof *set);
}
