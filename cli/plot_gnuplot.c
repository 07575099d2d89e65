/* gnuplot's script (plot_gnuplot.h). gnuplot is a program that runs
 * what its script says, shell commands included, so nothing the user or a
 * metrics file supplies reaches the script but as a quoted string: single
 * quotes (nothing is special inside; quotes in labels drawn as U+2019) and
 * control characters dropped. No file name reaches it at all: it draws
 * to its standard output, which plot_run.c writes into place. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plot_gnuplot.h"

int plot_find_gnuplot(char *out, size_t len)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        return -1;
    while (*path) {
        size_t n = strcspn(path, ":");
        int w = snprintf(out, len, "%.*s/gnuplot", (int)n, n ? path : ".");
        struct stat st;
        if (w > 0 && (size_t)w < len && stat(out, &st) == 0 && S_ISREG(st.st_mode) &&
            access(out, X_OK) == 0)
            return 0;
        path += n + (path[n] == ':');
    }
    return -1;
}

/* s as a gnuplot single-quoted string: nothing is special inside but
 * the quote, which gnuplot 5.4 has no escape for, so a quote in a label
 * is drawn as U+2019 (output paths with one are refused before). */
static void quoted(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputs("\xe2\x80\x99", f);   /* U+2019 in UTF-8 */
        else if ((unsigned char)*s >= 32)
            fputc(*s, f);
    }
    fputc('\'', f);
}

static void value(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, " %.9g", v);
    else
        fputs(" NaN", f);
}

/* The x axis: optimizer steps when a run has step or eval records (a
 * language model's run may never end an epoch), else epochs. */
static int by_step(const plot_set *set)
{
    for (int i = 0; i < set->n; i++)
        if (set->runs[i].steps.n || set->runs[i].evals.n)
            return 1;
    return 0;
}

/* Run r's training values: its step records when drawn by step and it has
 * any, else its epoch records (the epoch's mean, at the epoch's last step). */
static const plot_series *train_series(const plot_run *r, int steps)
{
    return steps && r->steps.n ? &r->steps : &r->epochs;
}

static int val_rows(const plot_run *r, int steps)
{
    return r->epochs.n + (steps ? r->evals.n : 0);
}

static void row(FILE *f, const plot_point *p, int steps, double a, double b, double c, int three)
{
    if (steps)
        fprintf(f, "%ld", p->step);
    else
        fprintf(f, "%d", p->epoch);
    value(f, a);
    value(f, b);
    if (three)
        value(f, c);
    fputc('\n', f);
}

/* Data blocks of run i: $tI (x train_loss train_acc lr) and $vI (x
 * val_loss val_acc; by step, the evaluations and the epoch ends merged in
 * step order). */
static void blocks(FILE *f, const plot_run *r, int i, int steps)
{
    const plot_series *t = train_series(r, steps);
    fprintf(f, "$t%d << EOD\n", i);
    for (int k = 0; k < t->n; k++) {
        const plot_point *p = &t->pts[k];
        row(f, p, steps, p->train_loss, p->train_acc, p->lr, 1);
    }
    fprintf(f, "EOD\n$v%d << EOD\n", i);
    int e = 0, v = 0, nv = steps ? r->evals.n : 0;
    while (e < r->epochs.n || v < nv) {
        const plot_point *p = v == nv || (e < r->epochs.n &&
                                          r->epochs.pts[e].step <= r->evals.pts[v].step)
                                  ? &r->epochs.pts[e++]
                                  : &r->evals.pts[v++];
        row(f, p, steps, p->val_loss, p->val_acc, NAN, 0);
    }
    fputs("EOD\n", f);
}

/* One panel: column `train` of the $t blocks (and `val` of the $v blocks,
 * 0 for none) of every run that has rows. */
static void panel(FILE *f, const plot_set *set, int steps, const char *title,
                  const char *ylabel, int train, int val)
{
    fputs("set title ", f);
    quoted(f, title);
    fputs("\nset ylabel ", f);
    quoted(f, ylabel);
    int lines = 0;
    char t[200];
    for (int i = 0; i < set->n; i++) {
        const plot_run *r = &set->runs[i];
        if (train_series(r, steps)->n) {
            fprintf(f, "%s $t%d using 1:%d with linespoints lc %d pt 7 ps 0.5 title ",
                    lines++ ? ", \\\n" : "\nplot", i, train, i + 1);
            snprintf(t, sizeof t, "%s%s", r->label, val ? " train" : "");
            quoted(f, t);
        }
        if (val && val_rows(r, steps)) {
            fprintf(f, "%s $v%d using 1:%d with linespoints lc %d dt 2 pt 6 ps 0.5 title ",
                    lines++ ? ", \\\n" : "\nplot", i, val, i + 1);
            snprintf(t, sizeof t, "%s val", r->label);
            quoted(f, t);
        }
    }
    /* gnuplot refuses a plot without points: an empty frame says why. */
    if (!lines)
        fputs("\nset label 1 'no records' at graph 0.5,0.5 center\nset xrange [0:1]\n"
              "set yrange [0:1]\nplot 2 notitle\nunset label 1\nset autoscale", f);
    fputc('\n', f);
}

/* The charts of one image format; gnuplot writes the image to its standard
 * output (`set output` without a name), never to a file of its choosing. */
static void charts(FILE *f, const plot_set *set, const plot_opts *o, const char *term)
{
    int steps = by_step(set);
    fprintf(f, "set terminal %s size %d,%d noenhanced\nset output\n", term, o->width,
            o->height);
    fputs("set multiplot layout 1,3 title ", f);
    quoted(f, o->title);
    fprintf(f, "\nset key bottom left font ',8'\nset grid\nset xlabel '%s'\n",
            steps ? "optimizer step" : "epoch");
    panel(f, set, steps, "loss", "cross-entropy", 2, 2);
    fputs("set key bottom right\n", f);
    panel(f, set, steps, "accuracy", "fraction correct", 3, 3);
    fputs("set key top right\n", f);
    panel(f, set, steps, "learning rate", "lr", 4, 0);
    fputs("unset multiplot\nset output\n", f);
}

int plot_script(FILE *f, const plot_set *set, const plot_opts *o, int png)
{
    int steps = by_step(set);
    for (int i = 0; i < set->n; i++)
        blocks(f, &set->runs[i], i, steps);
    charts(f, set, o, png ? "pngcairo" : "svg");
    return ferror(f) ? -1 : 0;
}
