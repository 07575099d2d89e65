/* Drawing with gnuplot (plot_gnuplot.h). gnuplot is a program that runs
 * what its script says, shell commands included, so nothing the user or a
 * metrics file supplies reaches the script but as a quoted string: single
 * quotes (nothing is special inside; quotes in labels drawn as U+2019),
 * control characters dropped, and output paths may neither start with '|'
 * (gnuplot's pipe output) nor hold a quote. It is
 * exec'd by path with a fixed argv, its script and data (inline data
 * blocks) go through a pipe, no temporary file, and it gets a deadline.
 * The charts it draws go to temporary names and are renamed into place
 * once checked whole (plot_run_gnuplot), relative to their directory,
 * opened once and refused, as a checkpoint's, when every account may
 * write to it without the sticky bit (lib/ckpt/atomic.c). */
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

#include <cdl/cdl.h>

#include "lib/ckpt/atomic.h"
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

static void charts(FILE *f, const plot_set *set, const plot_opts *o, const char *term,
                   const char *ext)
{
    int steps = by_step(set);
    char out[4300];
    snprintf(out, sizeof out, "%s.%s%s", o->prefix, ext, o->suffix ? o->suffix : "");
    fprintf(f, "set terminal %s size %d,%d noenhanced\nset output ", term, o->width, o->height);
    quoted(f, out);
    fputs("\nset multiplot layout 1,3 title ", f);
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

int plot_script(FILE *f, const plot_set *set, const plot_opts *o)
{
    int steps = by_step(set);
    for (int i = 0; i < set->n; i++)
        blocks(f, &set->runs[i], i, steps);
    if (o->png)
        charts(f, set, o, "pngcairo", "png");
    if (o->svg)
        charts(f, set, o, "svg", "svg");
    return ferror(f) ? -1 : 0;
}

static int plot_draw(const char *gnuplot, const plot_set *set, const plot_opts *o);

/* Whether the file name in dfd ends as a whole PNG (its IEND chunk) or SVG ("</svg>")
 * does: gnuplot exits 0 with a truncated file when the disk is full. */
static int complete(int dfd, const char *name, int png)
{
    static const unsigned char iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};
    unsigned char tail[64];
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    size_t n = st.st_size < (off_t)sizeof tail ? (size_t)st.st_size : sizeof tail;
    ssize_t got = pread(fd, tail, n, st.st_size - (off_t)n);
    close(fd);
    if (got != (ssize_t)n)
        return 0;
    if (png)
        return n >= sizeof iend && !memcmp(tail + n - sizeof iend, iend, sizeof iend);
    while (n > 0 && (tail[n - 1] == '\n' || tail[n - 1] == ' ' || tail[n - 1] == '\r'))
        n--;
    return n >= 6 && !memcmp(tail + n - 6, "</svg>", 6);
}

/* The last component of path: a name in its directory. */
static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The drawn files from their temporary names into place, each only if
 * complete, relative to dfd, the output's directory opened and checked
 * before drawing; the temporary files are gone afterwards either way. */
static int publish(int dfd, const plot_opts *o, int ok)
{
    int rc = ok ? 0 : -1;
    for (int png = 1; png >= 0; png--) {
        if (png ? !o->png : !o->svg)
            continue;
        const char *ext = png ? "png" : "svg";
        char tmp[4300], dst[4300];
        snprintf(tmp, sizeof tmp, "%s.%s%s", o->prefix, ext, o->suffix);
        snprintf(dst, sizeof dst, "%s.%s", o->prefix, ext);
        if (rc == 0 && !complete(dfd, base_name(tmp), png)) {
            struct stat st;
            fprintf(stderr, "cdl-plot: %s came out incomplete (%lld bytes): is its file system "
                    "full or over quota? Free space there or give -o another place; any "
                    "earlier %s is unchanged\n", dst,
                    fstatat(dfd, base_name(tmp), &st, AT_SYMLINK_NOFOLLOW) == 0
                        ? (long long)st.st_size : 0LL, dst);
            rc = -1;
        }
        if (rc == 0 && renameat(dfd, base_name(tmp), dfd, base_name(dst)) != 0) {
            fprintf(stderr, "cdl-plot: cannot rename %s to %s: %s\n", tmp, dst, strerror(errno));
            rc = -1;
        }
        unlinkat(dfd, base_name(tmp), 0);
    }
    return rc;
}

int plot_run_gnuplot(const char *gnuplot, const plot_set *set, const plot_opts *given)
{
    /* gnuplot draws into PREFIX.EXT.tmpPID, renamed once known whole. */
    char suffix[32];
    snprintf(suffix, sizeof suffix, ".tmp%ld", (long)getpid());
    plot_opts opts = *given;
    opts.suffix = suffix;
    const plot_opts *o = &opts;
    /* The output's directory, opened and checked once as a checkpoint's
     * (lib/ckpt/atomic.c): one every account may write to without the
     * sticky bit is refused before drawing, since any of them could swap a
     * chart between its check and its rename; the charts are checked,
     * renamed and removed relative to it. */
    const char *slash = strrchr(o->prefix, '/');
    char dir[4300], first[4300];
    snprintf(dir, sizeof dir, "%.*s", slash ? (slash == o->prefix ? 1 : (int)(slash - o->prefix))
                                            : 1, slash ? o->prefix : ".");
    snprintf(first, sizeof first, "%s.%s", o->prefix, o->png ? "png" : "svg");
    int dfd = afile_dir_open(dir, first);
    if (dfd < 0) {
        fprintf(stderr, "cdl-plot: %s\n", cdl_last_error());
        return -1;
    }
    int drawn = plot_draw(gnuplot, set, o);
    int rc = publish(dfd, o, drawn == 0);
    close(dfd);
    return rc;
}

static int plot_draw(const char *gnuplot, const plot_set *set, const plot_opts *o)
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
