/* Learning-rate schedules as pure functions of the step (optim.h), so a
 * resumed run needs only the step count. Computed in double, as PyTorch's
 * schedulers do in Python floats. */
#include <math.h>
#include <string.h>

#include <cdl/cdl.h>

static const char *const sched_names[] = {"constant", "step", "cosine"};

float cdl_schedule_lr(const cdl_schedule *s, long step)
{
    double base = s->base_lr;
    long warm = s->warmup_steps > 0 ? s->warmup_steps : 0;
    if (step < 0)
        step = 0;
    /* Like LinearLR(start_factor=1/warmup, total_iters=warmup-1): base/warm
     * at step 0, base at step warm-1. */
    if (step < warm)
        return (float)(base * (double)(step + 1) / (double)warm);
    long t = step - warm;
    switch (s->kind) {
    case CDL_SCHED_STEP:
        if (s->step_size <= 0)
            return (float)base;
        return (float)(base * pow((double)s->gamma, (double)(t / s->step_size)));
    case CDL_SCHED_COSINE: {
        /* CosineAnnealingLR's closed form; held at min_lr after the end
         * instead of rising again. */
        long T = s->total_steps - warm;
        double min = s->min_lr;
        if (T <= 0 || t >= T)
            return (float)min;
        return (float)(min + (base - min) * (1.0 + cos(M_PI * (double)t / (double)T)) / 2.0);
    }
    case CDL_SCHED_CONSTANT:
    default:
        return (float)base;
    }
}

int cdl_sched_kind_parse(const char *s)
{
    for (int i = 0; s && i < 3; i++)
        if (!strcmp(s, sched_names[i]))
            return i;
    return -1;
}

const char *cdl_sched_kind_name(cdl_sched_kind kind)
{
    return (unsigned)kind < 3 ? sched_names[kind] : "unknown";
}
