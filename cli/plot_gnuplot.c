/* Drawing with gnuplot (plot_gnuplot.h). gnuplot is a program that runs
 * what its script says, shell commands included, so nothing the user or a
 * metrics file supplies reaches the script but as a quoted string: single
 * quotes (nothing is special inside; quotes in labels drawn as U+2019),
 * control characters dropped, and output paths may neither start with '|'
 * (gnuplot's pipe output) nor hold a quote. It is
 * exec'd by path with a fixed argv, its script and data (inline data
 * blocks) go through a pipe, no temporary file, and it gets a deadline. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
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

/* One panel: column `train` (and `val`, 0 if none) of every run. */
static void panel(FILE *f, const plot_set *set, const char *title, const char *ylabel,
                  int train, int val)
{
    fputs("set title ", f);
    quoted(f, title);
    fputs("\nset ylabel ", f);
    quoted(f, ylabel);
    fputs("\nplot", f);
    for (int i = 0; i < set->n; i++) {
        const char *label = set->runs[i].label;
        fprintf(f, "%s $run%d using 1:%d with linespoints lc %d pt 7 ps 0.5 title ", i ? ", \\\n"
                : "", i, train, i + 1);
        char t[200];
        snprintf(t, sizeof t, "%s%s", label, val ? " train" : "");
        quoted(f, t);
        if (val) {
            fprintf(f, ", \\\n $run%d using 1:%d with linespoints lc %d dt 2 pt 6 ps 0.5 title ",
                    i, val, i + 1);
            snprintf(t, sizeof t, "%s val", label);
            quoted(f, t);
        }
    }
    fputc('\n', f);
}

static void charts(FILE *f, const plot_set *set, const plot_opts *o, const char *term,
                   const char *ext)
{
    char out[4200];
    snprintf(out, sizeof out, "%s.%s", o->prefix, ext);
    fprintf(f, "set terminal %s size %d,%d noenhanced\nset output ", term, o->width, o->height);
    quoted(f, out);
    fputs("\nset multiplot layout 1,3 title ", f);
    quoted(f, o->title);
    fputs("\nset key bottom left font ',8'\nset grid\nset xlabel 'epoch'\n", f);
    panel(f, set, "loss", "cross-entropy", 2, 4);
    fputs("set key bottom right\n", f);
    panel(f, set, "accuracy", "fraction correct", 3, 5);
    fputs("set key top right\n", f);
    panel(f, set, "learning rate", "lr", 6, 0);
    fputs("unset multiplot\nset output\n", f);
}

int plot_script(FILE *f, const plot_set *set, const plot_opts *o)
{
    /* Columns: epoch train_loss train_acc val_loss val_acc lr. */
    for (int i = 0; i < set->n; i++) {
        fprintf(f, "$run%d << EOD\n", i);
        for (int k = 0; k < set->runs[i].n; k++) {
            const plot_point *p = &set->runs[i].pts[k];
            fprintf(f, "%d", p->epoch);
            value(f, p->train_loss);
            value(f, p->train_acc);
            value(f, p->val_loss);
            value(f, p->val_acc);
            value(f, p->lr);
            fputc('\n', f);
        }
        fputs("EOD\n", f);
    }
    if (o->png)
        charts(f, set, o, "pngcairo", "png");
    if (o->svg)
        charts(f, set, o, "svg", "svg");
    return ferror(f) ? -1 : 0;
}

int plot_run_gnuplot(const char *gnuplot, const plot_set *set, const plot_opts *o)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        fprintf(stderr, "cdl-plot: pipe: %s\n", strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "cdl-plot: fork: %s\n", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (dup2(fds[0], STDIN_FILENO) < 0 || null < 0 || dup2(null, STDOUT_FILENO) < 0)
            _exit(126);
        char *argv[] = {"gnuplot", NULL};
        execv(gnuplot, argv);
        _exit(127);
    }
    close(fds[0]);
    /* gnuplot may die before reading everything: a write error, not a
     * signal that kills cdl-plot. */
    signal(SIGPIPE, SIG_IGN);
    FILE *f = fdopen(fds[1], "w");
    int wrote = f && plot_script(f, set, o) == 0;
    if (f ? fclose(f) != 0 : close(fds[1]) != 0)
        wrote = 0;
    int status = 0;
    struct timespec tick = {0, 10 * 1000 * 1000};
    double waited = 0;
    pid_t got;
    while ((got = waitpid(pid, &status, WNOHANG)) == 0 && waited < o->timeout) {
        nanosleep(&tick, NULL);
        waited += 0.01;
    }
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        fprintf(stderr, "cdl-plot: %s took longer than %.0f s and was stopped\n", gnuplot,
                o->timeout);
        return -1;
    }
    if (got < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "cdl-plot: %s failed (%s %d; its messages are above)\n", gnuplot,
                got >= 0 && WIFSIGNALED(status) ? "signal" : "exit status",
                got < 0 ? -1 : WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        return -1;
    }
    if (!wrote) {
        fprintf(stderr, "cdl-plot: could not write the script to %s\n", gnuplot);
        return -1;
    }
    return 0;
}
