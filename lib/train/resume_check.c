/* Resuming with another configuration than the checkpoint's: the position
 * (epoch, batch, sample order, schedule) would be reinterpreted and the run
 * would diverge silently, so every change is refused unless the user allows
 * it by name (--resume-allow epochs,lr). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ckpt/json.h"
#include "checkpoint.h"

/* The settings compared, by their key in the stored configuration (see
 * train_config_json) and the cdl-train option that sets them. Left out:
 * model and optimizer (their tensors and state are checked on load), where
 * the data lives, threads, workers, device, max_steps and ckpt_every, which
 * change neither the position nor the numbers' meaning. The data options
 * and the loss's label smoothing change what the model is trained on and
 * for (absent from checkpoints of cdl before them: not compared then). */
static const struct {
    const char *key, *option;
} compared[] = {
    {"dataset", "dataset"}, {"epochs", "epochs"}, {"batch_size", "batch-size"}, {"lr", "lr"},
    {"momentum", "momentum"}, {"dampening", "dampening"}, {"nesterov", "nesterov"},
    {"weight_decay", "weight-decay"}, {"beta1", "beta1"}, {"beta2", "beta2"}, {"eps", "eps"},
    {"schedule", "schedule"}, {"step_epochs", "step-epochs"},
    {"warmup_epochs", "warmup-epochs"}, {"seed", "seed"}, {"drop_last", "drop-last"},
    {"val_split", "val-split"}, {"clip_grad", "clip-grad"}, {"accum_steps", "accum-steps"},
    {"decay_params", "decay-params"}, {"warmup_steps", "warmup-steps"},
    {"decay_steps", "decay-steps"}, {"augment", "augment"}, {"image_size", "image-size"},
    {"normalize", "normalize"}, {"label_smoothing", "label-smoothing"},
    {"label_column", "label-column"}, {"min_lr", "min-lr"}, {"jpeg_decode", "jpeg-decode"},
};
enum { NCOMPARED = sizeof compared / sizeof compared[0], CONFIG_MAX = 16384 };
#define DATASET_SIZE "dataset-size"   /* the training samples, stored apart */
#define MODEL_SPEC "model-spec"       /* a spec file's text, stored apart */
#define DATASET_CONTENT "dataset-content" /* the data's fingerprint, stored apart */
#define MODEL "model"                 /* a built-in's options (--model NAME:OPTIONS) */

typedef struct flat {
    const char *key[64], *value[64];
    int n;
} flat;

/* A flat object of string and number values: string values decoded, others
 * as their text (both sides come from train_config_json). pool holds len+1. */
static int parse_flat(const char *text, size_t len, char *pool, flat *out)
{
    json_cur c;
    json_init(&c, text, len, pool, len + 1);
    out->n = 0;
    if (json_expect(&c, '{'))
        return -1;
    int first = 1, r;
    while ((r = json_next(&c, '}', &first)) == 1) {
        const char *k, *v;
        if (out->n == 64 || json_string(&c, &k) || json_expect(&c, ':'))
            return -1;
        if (json_peek(&c) == '"') {
            if (json_string(&c, &v))
                return -1;
        } else {
            const char *p = c.p;
            while (c.p < c.end && *c.p != ',' && *c.p != '}' && *c.p != ' ')
                c.p++;
            size_t n = (size_t)(c.p - p);
            if (n == 0 || c.pool_used + n + 1 > c.pool_cap)
                return -1;
            char *dst = c.pool + c.pool_used;
            memcpy(dst, p, n);
            dst[n] = '\0';
            c.pool_used += n + 1;
            v = dst;
        }
        out->key[out->n] = k;
        out->value[out->n++] = v;
    }
    return r < 0 ? -1 : json_finish(&c);
}

static const char *lookup(const flat *f, const char *key)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->key[i], key))
            return f->value[i];
    return NULL;
}

/* Whether option is in the comma-separated list (with '-' or '_'). */
static int allowed(const char *list, const char *option)
{
    size_t n = strlen(option);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        int same = len == n;
        for (size_t i = 0; same && i < n; i++)
            same = p[i] == option[i] || (p[i] == '_' && option[i] == '-');
        if (same)
            return 1;
        p += len + (p[len] == ',');
    }
    return 0;
}

int train_resume_allow_check(const char *list)
{
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        char one[32];
        snprintf(one, sizeof one, "%.*s", (int)(len < 31 ? len : 31), p);
        int known = len > 0 && len < 31 &&
                    (allowed(one, DATASET_SIZE) || allowed(one, MODEL_SPEC) ||
                     allowed(one, DATASET_CONTENT) || allowed(one, MODEL));
        for (int i = 0; i < NCOMPARED && !known; i++)
            known = len > 0 && len < 31 && allowed(one, compared[i].option);
        if (!known) {
            char names[400] = "";
            for (int i = 0; i < NCOMPARED; i++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s,",
                         compared[i].option);
            return cdl_error("--resume-allow: '%.*s%s' is not a setting a resume compares: use "
                             "a comma-separated list of " MODEL ",%s" DATASET_SIZE ","
                             DATASET_CONTENT "," MODEL_SPEC,
                             (int)(len < 40 ? len : 40), p, len > 40 ? "..." : "", names);
        }
        p += len + (p[len] == ',');
    }
    return 0;
}

/* A fraction of the stored configuration (floats are written with %.9g, so
 * --lr 0.05 shows as 0.0500000007) as the user typed it: the fewest digits
 * that read back as the same float. Anything else is copied as it is. */
static void shortest(const char *in, char *out, size_t len)
{
    char *end;
    double v = strtod(in, &end);
    snprintf(out, len, "%s", in);
    if (end == in || *end || !isfinite(v) || !strpbrk(in, ".eE"))
        return;   /* not a number, or an integer (a seed): exact as it is */
    for (int p = 1; p <= 9; p++) {
        char buf[40];
        snprintf(buf, sizeof buf, "%.*g", p, v);
        if ((float)strtod(buf, NULL) == (float)v) {
            snprintf(out, len, "%s", buf);
            return;
        }
    }
}

/* Appends "option OLD -> NEW, " to msg (values cut at 40 characters).
 * Numbers are shown short unless that would make them look equal. */
static void add_change(char *msg, size_t len, const char *option, const char *was,
                       const char *now)
{
    char was_s[48], now_s[48];
    shortest(was, was_s, sizeof was_s);
    shortest(now, now_s, sizeof now_s);
    if (strcmp(was_s, now_s) != 0) {
        was = was_s;
        now = now_s;
    }
    /* Stored as numbers: --val-split's default as -1 (the dataset's own
     * split), --augment and --normalize as their enums. */
    if (!strcmp(option, "val-split")) {
        if (!strcmp(was, "-1"))
            was = "default";
        if (!strcmp(now, "-1"))
            now = "default";
    }
    static const char *const augment[] = {"default", "none", "crop+flip", "crop", "flip"};
    static const char *const normalize[] = {"default", "auto", "MEAN,STD", "none"};
    int aug = !strcmp(option, "augment"), norm = !strcmp(option, "normalize");
    if (aug || norm) {
        const char *const *names = aug ? augment : normalize;
        int lo = aug ? -1 : 0, n = aug ? 5 : 4, a = atoi(was), b = atoi(now);
        if (a >= lo && a < lo + n)
            was = names[a - lo];
        if (b >= lo && b < lo + n)
            now = names[b - lo];
    }
    /* Options are named as typed; the dataset's size is no option, only
     * a --resume-allow name. */
    size_t used = strlen(msg);
    snprintf(msg + used, len - used, "%s%s%s %.40s%s -> %.40s%s", used ? ", " : "",
             strcmp(option, DATASET_SIZE) && strcmp(option, MODEL_SPEC) &&
                     strcmp(option, DATASET_CONTENT) ? "--" : "", option,
             was, strlen(was) > 40 ? "..." : "", now, strlen(now) > 40 ? "..." : "");
}

/* A built-in model's options that differ, as "NAME:...,KEY=V" for each
 * side (the options both have left out): gpt:n_layer=12,...,dropout=0.1
 * would not fit the 40 characters a change shows. */
static void model_change(const char *was, const char *now, char *a, char *b, size_t len)
{
    const char *sides[2] = {was, now};
    char *out[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        const char *me = sides[k], *other = sides[1 - k];
        size_t name = strcspn(me, ":");
        int same_name = !strncmp(me, other, name) && other[strcspn(other, ":")] == me[name] &&
                        strcspn(other, ":") == name;
        snprintf(out[k], len, "%s", same_name ? "" : me);
        if (!same_name)
            continue;
        snprintf(out[k], len, "%.*s:", (int)name, me);
        int left = 0, shown = 0;
        for (const char *p = me[name] ? me + name + 1 : me + name; *p;) {
            size_t n = strcspn(p, ",");
            int common = 0;
            const char *q = other[name] ? other + name + 1 : other + name;
            while (*q && !common) {
                size_t m = strcspn(q, ",");
                common = m == n && !strncmp(p, q, n);
                q += m + (q[m] == ',');
            }
            size_t used = strlen(out[k]);
            if (common)
                left = 1;
            else
                snprintf(out[k] + used, len - used, "%s%s%.*s", shown ? "," : "",
                         left && !shown ? "...," : "", (int)n, p), shown = 1;
            p += n + (p[n] == ',');
        }
        if (!shown)
            snprintf(out[k] + strlen(out[k]), len - strlen(out[k]), "%s", left ? "..." : "");
    }
}

/* The first line where the spec file's text now differs from the one the
 * checkpoint holds, as "line N 'WAS'" and "'NOW'" (cut to fit). */
static void spec_change(const char *was, const char *now, char *a, char *b, size_t len)
{
    int line = 1;
    const char *wl = was, *nl = now;
    for (; *was && *was == *now; was++, now++)
        if (*was == '\n') {
            line++;
            wl = was + 1;
            nl = now + 1;
        }
    snprintf(a, len, "line %d '%.*s'", line, (int)strcspn(wl, "\n"), wl);
    snprintf(b, len, "'%.*s'", (int)strcspn(nl, "\n"), nl);
}

int train_config_differences(const char *ref, const char *mine, char *msg, size_t len)
{
    /* What the ranks must also share beyond what a resume compares: the
     * optimizer and where the run ends. (The model is compared by its size:
     * a spec file's path may differ between nodes.) */
    static const char *const also[][2] = {
        {"optimizer", "optimizer"}, {"max_steps", "max-steps"},
    };
    size_t rl = strlen(ref), ml = strlen(mine);
    char *pool = cdl_malloc(rl + ml + 2);
    flat *f = cdl_malloc(2 * sizeof *f);
    int rc = -1;
    msg[0] = '\0';
    if (!pool || !f)
        goto out;
    if (parse_flat(ref, rl, pool, &f[0]) || parse_flat(mine, ml, pool + rl + 1, &f[1])) {
        cdl_error("internal error: a configuration's JSON does not parse");
        goto out;
    }
    for (int i = 0; i < NCOMPARED + 2; i++) {
        const char *key = i < NCOMPARED ? compared[i].key : also[i - NCOMPARED][0];
        const char *opt = i < NCOMPARED ? compared[i].option : also[i - NCOMPARED][1];
        const char *a = lookup(&f[0], key), *b = lookup(&f[1], key);
        /* --dataset KIND:PATH: the path may be node-local, the sizes of
         * what it holds are compared by the caller. */
        size_t ka = a ? strcspn(a, ":") : 0;
        if (!strcmp(key, "dataset") && a && b && a[ka] && !strncmp(a, b, ka + 1))
            continue;
        if (a && b && strcmp(a, b) != 0)
            add_change(msg, len, opt, a, b);
    }
    rc = 0;
out:
    cdl_free(f);
    cdl_free(pool);
    return rc;
}

/* A whole number 1..max stored under key (0 when absent); -1 if it is
 * something else. */
static int stored_int(const flat *f, const char *key, long max, int *out)
{
    const char *s = lookup(f, key);
    char *end;
    *out = 0;
    if (!s)
        return 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 1 || v > max)
        return -1;
    *out = (int)v;
    return 0;
}

int ckpt_check_config(const cdl_st_file *f, const cdl_train_config *cfg, train_position *pos,
                      const char *spec_text)
{
    const char *path = cdl_st_path(f), *allow = cfg->resume_allow;
    if (train_resume_allow_check(allow))
        return -1;
    const char *stored = cdl_st_meta_get(f, "config");
    if (!stored)
        return cdl_error("%s: not a cdl checkpoint: metadata 'config' is missing (use --resume "
                         "never to start afresh, or name another file)", path);
    size_t slen = strlen(stored);
    char *now = cdl_malloc(CONFIG_MAX), *pool = cdl_malloc(slen + 1 + CONFIG_MAX + 1);
    flat *was = cdl_malloc(2 * sizeof *was);
    char msg[1024] = "";
    int rc = -1;
    if (!now || !pool || !was || train_config_json(cfg, now, CONFIG_MAX))
        goto out;
    if (parse_flat(stored, slen, pool, &was[0])) {
        cdl_error("%s: metadata 'config' is damaged: the file is corrupt or not from cdl-train "
                  "(use --resume never to start afresh)", path);
        goto out;
    }
    if (parse_flat(now, strlen(now), pool + slen + 1, &was[1])) {
        cdl_error("internal error: the configuration's JSON does not parse");
        goto out;
    }
    /* The batch geometry it was written with (realign.c converts the
     * position when --resume-allow lets it change). */
    if (stored_int(&was[0], "batch_size", 65536, &pos->batch_size) ||
        stored_int(&was[0], "accum_steps", 1 << 20, &pos->accum)) {
        cdl_error("%s: metadata 'config' is damaged: its batch_size or accum_steps is no "
                  "whole number in range (use --resume never to start afresh)", path);
        goto out;
    }
    int reread = 0;   /* an allowed change of how the samples are made from the files */
    for (int i = 0; i < NCOMPARED; i++) {
        const char *a = lookup(&was[0], compared[i].key), *b = lookup(&was[1], compared[i].key);
        if (a && b && strcmp(a, b) != 0 && !allowed(allow, compared[i].option))
            add_change(msg, sizeof msg, compared[i].option, a, b);
        else if (a && b && strcmp(a, b) != 0)
            reread |= !strcmp(compared[i].key, "image_size") ||
                      !strcmp(compared[i].key, "label_column") ||
                      !strcmp(compared[i].key, "jpeg_decode");
    }
    /* The dataset's size: a different file or --synthetic-size reorders
     * every epoch (absent in checkpoints of older cdl). */
    const char *samples = cdl_st_meta_get(f, "train_samples");
    char cur[32];
    snprintf(cur, sizeof cur, "%ld", pos->samples);
    int val_moved = 0;
    if (samples && strcmp(samples, cur) != 0 && !allowed(allow, DATASET_SIZE)) {
        add_change(msg, sizeof msg, DATASET_SIZE, samples, cur);
        /* An image folder with train/, val/ and test/ resumed from a
         * checkpoint of cdl before val/ was read (or of a run before val/
         * was added): that run carved its validation from train/. */
        const char *vs = cdl_st_meta_get(f, "val_samples");
        val_moved = pos->val_folder && !cdl_st_meta_get(f, "val_folder") && vs &&
                    strcmp(vs, "0") != 0;
    }
    /* The data's contents (checkpoints of cdl before the fingerprint have
     * none; a scheme other than this one's is not comparable): other data
     * of the same size, a regenerated dataset or a corpus grown by less
     * than a window, would be trained on as if it were the run's. A size
     * that differs says so already; an allowed --image-size or
     * --label-column (progressive resizing) makes other samples of the
     * same files, as the user asked. */
    const char *fp = cdl_st_meta_get(f, "data_fingerprint");
    int content = 0;
    size_t before = strlen(msg);
    if (fp && pos->fingerprint[0] && !reread && !strncmp(fp, pos->fingerprint, 3) &&
        strcmp(fp, pos->fingerprint) && !allowed(allow, DATASET_CONTENT) &&
        (!samples || !strcmp(samples, cur))) {
        add_change(msg, sizeof msg, DATASET_CONTENT, fp + 3, pos->fingerprint + 3);
        content = 1;
    }
    size_t after = strlen(msg);
    /* The spec file edited since (checkpoints that hold its text): a change
     * that keeps every tensor (relu -> gelu) would resume another model. */
    const char *spec_was = cdl_st_meta_get(f, "model_spec");
    if (spec_was && spec_text && strcmp(spec_was, spec_text) && !allowed(allow, MODEL_SPEC)) {
        char a[48], b[48];
        spec_change(spec_was, spec_text, a, b, sizeof a);
        add_change(msg, sizeof msg, MODEL_SPEC, a, b);
    }
    /* A built-in's options that keep every tensor (gpt's dropout) change
     * the run as an edited spec file does; the tensors catch the others. */
    const char *mw = lookup(&was[0], "model"), *mn = lookup(&was[1], "model");
    if (!spec_was && !spec_text && mw && mn && strcmp(mw, mn) && !allowed(allow, MODEL)) {
        char a[48], b[48];
        if (strlen(mw) < 512 && strlen(mn) < 512) {   /* options x options: a crafted */
            model_change(mw, mn, a, b, sizeof a);     /* file's megabytes, hours */
            add_change(msg, sizeof msg, MODEL, a, b);
        } else {
            add_change(msg, sizeof msg, MODEL, mw, mn);
        }
    }
    if (content && before == 0 && strlen(msg) == after) {   /* the only change */
        cdl_error("%s was trained on other data: %s. The training data has the run's size but "
                  "other contents (replaced, regenerated, or appended to by less than a "
                  "sample; does --data-dir name other data?): to go on training from the "
                  "checkpoint on this data, --resume-allow dataset-content; to start afresh on "
                  "it, --resume never", path, msg);
        goto out;
    }
    if (msg[0]) {
        cdl_error("%s was written with another configuration: %s. Resuming would reinterpret its "
                  "position in the run: pass the same options, allow the changes you mean with "
                  "--resume-allow (e.g. --resume-allow epochs,lr to extend a run), or start afresh "
                  "with --resume never%s%s%s%s", path, msg,
                  content ? " (dataset-content: the training data has the run's size but other "
                            "contents)" : "",
                  val_moved ? ". The image folder's val/ is the validation split now, where the "
                              "checkpoint's run carved its validation split (" : "",
                  val_moved ? cdl_st_meta_get(f, "val_samples") : "",
                  val_moved ? " of its samples) out of train/ (an earlier cdl did not read "
                              "val/ beside train/ and test/, or val/ was added since): this run "
                              "trains on all of train/; to go on from the checkpoint so, "
                              "--resume-allow dataset-size" : "");
        goto out;
    }
    rc = 0;
out:
    cdl_free(was);
    cdl_free(pool);
    cdl_free(now);
    return rc;
}
