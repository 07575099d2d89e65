/* cdl-plot: loss, accuracy and learning-rate curves of one or several
 * cdl-train --metrics files (the runs of a sweep on one chart, labelled by
 * run; against the optimizer step when they have step or eval records) as
 * PNG and SVG through gnuplot, and a text summary of each run (its
 * best and final epoch), which is all it gives when gnuplot is missing.
 *
 * Exit status: 0 done (also when only the summary could be made: a job
 * that plots at its end must not fail for want of gnuplot), 1 gnuplot or a
 * file failed, 2 a bad option. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "plot_gnuplot.h"
#include "plot_read.h"

static void usage(FILE *f)
{
    fprintf(f,
"Usage: cdl-plot [OPTION]... METRICS-FILE...\n"
"Draw the loss, accuracy and learning rate of cdl-train runs (the JSON lines\n"
"files they wrote; several runs share each chart) with gnuplot, and print a\n"
"summary.\n"
"\n"
"  -o, --output PREFIX     write PREFIX.png and PREFIX.svg [cdl-plot]\n"
"      --format png|svg|both  [both]\n"
"      --width N --height N  image size in pixels [1500 500]\n"
"      --title TEXT        the charts' title [cdl-train runs]\n"
"      --summary           only print the summary, draw nothing\n"
"      --timeout SECONDS   stop gnuplot after this long, all charts together [120]\n"
"  -h, --help    --version\n"
"\n"
"Without gnuplot (Debian: gnuplot-nox) in PATH it prints the summary only.\n"
"Exit status: 0 done; 1 error; 2 bad option.\n");
}

static int parse_size(const char *opt, const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < 100 || v > 10000) {
        fprintf(stderr, "cdl-plot: --%s '%.80s': expected pixels from 100 to 10000\n", opt, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* Each run: epochs, best validation accuracy (and its epoch), final
 * values; then, for runs with step or eval records (language models, whose
 * epochs may be few or none), the last step's values and the lowest
 * validation loss of the evaluations. */
static void summary(const plot_set *set)
{
    for (int i = 0; i < set->n; i++) {
        const plot_run *r = &set->runs[i];
        const plot_series *e = &r->epochs, *s = &r->steps, *v = &r->evals;
        if (e->n + s->n + v->n == 0)
            continue;
        printf("%s%s%.8s%s: ", r->label, r->id[0] ? " (run " : "", r->id, r->id[0] ? ")" : "");
        if (e->n) {
            const plot_point *best = NULL, *last = &e->pts[e->n - 1];
            for (int k = 0; k < e->n; k++)
                if (isfinite(e->pts[k].val_acc) && (!best || e->pts[k].val_acc > best->val_acc))
                    best = &e->pts[k];
            printf("%d epoch%s to step %ld", e->n, e->n > 1 ? "s" : "", last->step);
            if (best)
                printf("; best val_acc %.4f at epoch %d (val_loss %.4f)", best->val_acc,
                       best->epoch, best->val_loss);
            printf("; final epoch %d: train_loss %.4f train_acc %.4f val_loss %.4f val_acc %.4f "
                   "lr %.4g\n", last->epoch, last->train_loss, last->train_acc, last->val_loss,
                   last->val_acc, last->lr);
        } else {
            printf("no epoch ended\n");
        }
        if (s->n) {
            const plot_point *last = &s->pts[s->n - 1];
            printf("  last step %ld: loss %.4f acc %.4f lr %.4g\n", last->step, last->train_loss,
                   last->train_acc, last->lr);
        }
        if (v->n) {
            /* cdl-train keeps best.safetensors at the lowest validation
             * loss of both kinds of validation. */
            const plot_point *best = NULL, *lastv = &v->pts[v->n - 1];
            for (int k = 0; k < v->n + e->n; k++) {
                const plot_point *p = k < v->n ? &v->pts[k] : &e->pts[k - v->n];
                if (isfinite(p->val_loss) && (!best || p->val_loss < best->val_loss))
                    best = p;
                if (k >= v->n && p->step > lastv->step)
                    lastv = p;
            }
            printf("  %d validation%s to step %ld (--eval-every and epoch ends)", v->n + e->n,
                   v->n + e->n > 1 ? "s" : "", lastv->step);
            if (best)
                printf("; lowest val_loss %.4f at step %ld (val_acc %.4f)", best->val_loss,
                       best->step, best->val_acc);
            putchar('\n');
        }
    }
}

int main(int argc, char **argv)
{
    enum { OPT_FORMAT = 256, OPT_WIDTH, OPT_HEIGHT, OPT_TITLE, OPT_SUMMARY, OPT_TIMEOUT,
           OPT_VERSION };
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"width", required_argument, NULL, OPT_WIDTH},
        {"height", required_argument, NULL, OPT_HEIGHT},
        {"title", required_argument, NULL, OPT_TITLE},
        {"summary", no_argument, NULL, OPT_SUMMARY},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    plot_opts o = {.prefix = "cdl-plot", .png = 1, .svg = 1, .width = 1500, .height = 500,
                   .title = "cdl-train runs", .timeout = 120};
    int only_summary = 0, c;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o': o.prefix = optarg; break;
        case OPT_FORMAT:
            o.png = !strcmp(optarg, "png") || !strcmp(optarg, "both");
            o.svg = !strcmp(optarg, "svg") || !strcmp(optarg, "both");
            if (!o.png && !o.svg) {
                fprintf(stderr, "cdl-plot: --format '%.80s': expected png, svg or both\n",
                        optarg);
                return 2;
            }
            break;
        case OPT_WIDTH: if (parse_size("width", optarg, &o.width)) return 2; break;
        case OPT_HEIGHT: if (parse_size("height", optarg, &o.height)) return 2; break;
        case OPT_TITLE: o.title = optarg; break;
        case OPT_SUMMARY: only_summary = 1; break;
        case OPT_TIMEOUT: {
            char *end;
            errno = 0;
            double t = strtod(optarg, &end);
            if (end == optarg || *end || errno || !(t >= 0.1 && t <= 86400)) {
                fprintf(stderr, "cdl-plot: --timeout '%.80s': expected seconds from 0.1 to "
                        "86400\n", optarg);
                return 2;
            }
            o.timeout = t;
            break;
        }
        case 'h': usage(stdout); return 0;
        case OPT_VERSION: printf("cdl-plot (cdl) %s\n", cdl_version()); return 0;
        default: fprintf(stderr, "cdl-plot: see cdl-plot --help\n"); return 2;
        }
    }
    if (optind == argc) {
        fprintf(stderr, "cdl-plot: name at least one metrics file (cdl-train --metrics FILE)\n");
        return 2;
    }
    /* No name reaches gnuplot now (it draws to its standard output), but
     * a prefix that would have been a shell pipe to it stays refused. */
    int ctl = 0;
    for (const char *p = o.prefix; *p; p++)
        ctl |= (unsigned char)*p < 32;
    if (!*o.prefix || o.prefix[0] == '|' || strlen(o.prefix) > 4000 || ctl ||
        strchr(o.prefix, '\'')) {
        fprintf(stderr, "cdl-plot: --output '%.80s': give a file name prefix (not starting "
                "with '|', without quotes or control characters)\n", o.prefix);
        return 2;
    }
    plot_set set = {0};
    int rc = 0;
    for (int i = optind; i < argc; i++)
        if (plot_read_file(&set, argv[i]) != 0)
            rc = 1;
    if (set.bad_lines)
        fprintf(stderr, "cdl-plot: warning: skipped %ld line%s that %s no JSON record\n",
                set.bad_lines, set.bad_lines > 1 ? "s" : "", set.bad_lines > 1 ? "are" : "is");
    int points = 0;
    for (int i = 0; i < set.n; i++)
        points += set.runs[i].epochs.n + set.runs[i].steps.n + set.runs[i].evals.n;
    if (points == 0) {
        fprintf(stderr, "cdl-plot: no epoch, step or eval records in the files given: nothing "
                "to plot\n");
        plot_set_free(&set);
        return 1;
    }
    summary(&set);
    /* cdl-plot --summary > FILE on a full disk: an error, not an empty
     * FILE and exit status 0. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "cdl-plot: writing the summary to standard output failed: %s (a full "
                "disk or quota where it goes?)\n", strerror(errno));
        rc = 1;
    }
    if (!only_summary) {
        char gnuplot[4200];
        if (plot_find_gnuplot(gnuplot, sizeof gnuplot) != 0) {
            fprintf(stderr, "cdl-plot: gnuplot is not in PATH (Debian: apt install "
                    "gnuplot-nox): summary only, no charts\n");
        } else if (plot_run_gnuplot(gnuplot, &set, &o) != 0) {
            rc = 1;   /* said; "wrote PREFIX.EXT" for each chart written */
        }
    }
    plot_set_free(&set);
    return rc;
}
