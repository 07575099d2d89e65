/* Where a diverged run can go on from (pipeline.h's diverge_hint): its
 * last.safetensors and the step of its weights, and, for when that step's
 * weights are the ones whose loss overflowed, the newest checkpoint of the
 * directory from before: best.safetensors or a numbered step-N file of
 * --keep-last/--keep-every. Read only on the error path. */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "keep.h"
#include "run.h"

/* The step best.safetensors holds, -1 when it is not there or unreadable. */
static long best_step(const run *r)
{
    if (!r->best_path[0] || access(r->best_path, F_OK) != 0)
        return -1;
    char saved[2048];
    snprintf(saved, sizeof saved, "%s", cdl_last_error());   /* opening may set an error */
    cdl_st_file *f = cdl_st_open(r->best_path);
    const char *s = f ? cdl_st_meta_get(f, "step") : NULL;
    char *end = NULL;
    long step = s ? strtol(s, &end, 10) : -1;
    if (!s || end == s || *end || step < 0)
        step = -1;
    cdl_st_close(f);
    cdl_error("%s", saved);
    return step;
}

const diverge_hint *train_diverge_hint(const run *r, long step, diverge_hint *h, char *earlier,
                                       size_t len)
{
    const cdl_train_config *c = r->cfg;
    *h = (diverge_hint){.last_step = r->saved_step, .clipping = c->clip_grad > 0};
    /* Not an old run's last.safetensors that this one has not rewritten
     * (--resume never, --resume PATH): its weights are of another step. */
    if (!r->saved_path || access(r->saved_path, F_OK) != 0)
        return h;   /* no checkpoint: h->last NULL */
    h->last = r->saved_path;
    if (r->saved_step < step)
        return h;
    /* The newest before `step` (the weights of `step` gave the loss), of
     * this run's history: not a file a resume from an earlier one left
     * behind (its weights diverged the first time). */
    long found = best_step(r);
    if (found >= step || (found > r->start_step && found != r->best_written))
        found = -1;
    else if (found >= 0)
        snprintf(earlier, len, "%s", r->best_path);
    DIR *d = c->ckpt_dir[0] ? opendir(c->ckpt_dir) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long s;
        if (!ckpt_keep_name(e->d_name, &s))
            continue;
        int ours = s <= r->start_step || s == r->kept[0] || s == r->kept[1];
        if (ours && s < step && s > found) {
            found = s;
            snprintf(earlier, len, "%s/%s", c->ckpt_dir, e->d_name);
        }
    }
    if (d)
        closedir(d);
    if (found >= 0) {
        h->earlier = earlier;
        h->earlier_step = found;
    }
    return h;
}
