/* The harness configuration: defaults and its JSON form. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../ckpt/json.h"
#include "checkpoint.h"
#include "lib/core/sized.h"

void cdl_train_defaults_sized(cdl_train_config *out, size_t size)
{
    cdl_train_config c, *cfg = &c;
    memset(cfg, 0, sizeof *cfg);
    cfg->size = sizeof *cfg;
    snprintf(cfg->model, sizeof cfg->model, "lenet");
    snprintf(cfg->dataset, sizeof cfg->dataset, "fashion-mnist");
    cfg->epochs = 10;
    cfg->batch_size = 64;
    cfg->lr = 0.05f;
    cfg->optim = cdl_optim_defaults(CDL_OPTIM_SGD);
    cfg->optim.momentum = 0.9f;
    cfg->optim.weight_decay = 5e-4f;
    cfg->schedule = CDL_SCHED_COSINE;
    cfg->step_epochs = 3;
    cfg->warmup_epochs = 0;
    cfg->threads = 0;
    cfg->workers = 1;
    cfg->seed = 1;
    snprintf(cfg->resume, sizeof cfg->resume, "auto");
    snprintf(cfg->device, sizeof cfg->device, "auto");
    snprintf(cfg->dist_backend, sizeof cfg->dist_backend, "auto");
    cfg->synthetic_n = 10000;
    cfg->progress = -1;
    cfg->tf32_conv = cfg->tf32_matmul = -1;
    cfg->augment = -1;
    cfg->val_split = -1;
    sized_write(out, size, cfg, sizeof *cfg);
}

/* Programs built before the cdl_train_defaults macro: their struct ended
 * with should_stop_ctx at the latest. */
void (cdl_train_defaults)(cdl_train_config *cfg)
{
    cdl_train_defaults_sized(cfg, SIZED_UPTO(cdl_train_config, should_stop_ctx));
}

double train_token_val_split(const cdl_train_config *c)
{
    return c->val_split < 0 ? 0 : c->val_split == 0 ? -1 : c->val_split;
}

const char *train_decay_name(int decay_params)
{
    return decay_params == CDL_DECAY_2D ? "2d" : decay_params == CDL_DECAY_ALL ? "all" : "auto";
}

/* Quotes s as a JSON string into out (len bytes); -1 if it does not fit. */
static int quoted(const char *s, char *out, size_t len)
{
    json_buf b = {0};
    json_buf_string(&b, s);
    json_buf_put(&b, "", 1);
    int ok = !b.failed && b.len <= len;
    if (ok)
        memcpy(out, b.data, b.len);
    json_buf_free(&b);
    return ok ? 0 : -1;
}

int train_config_json(const cdl_train_config *c, char *buf, size_t len)
{
    char model[1600], dataset[200], data_dir[6200], label_column[800];
    if (quoted(c->model, model, sizeof model) < 0 ||
        quoted(c->dataset, dataset, sizeof dataset) < 0 ||
        quoted(c->data_dir, data_dir, sizeof data_dir) < 0 ||
        quoted(c->label_column, label_column, sizeof label_column) < 0)
        return cdl_error("configuration strings too long for the checkpoint metadata");
    int n = snprintf(buf, len,
                     "{\"model\":%s,\"dataset\":%s,\"data_dir\":%s,\"epochs\":%d,"
                     "\"batch_size\":%d,\"lr\":%.9g,\"optimizer\":\"%s\",\"momentum\":%.9g,"
                     "\"dampening\":%.9g,\"nesterov\":%d,\"weight_decay\":%.9g,\"beta1\":%.9g,"
                     "\"beta2\":%.9g,\"eps\":%.9g,\"schedule\":\"%s\",\"step_epochs\":%d,"
                     "\"warmup_epochs\":%d,\"threads\":%d,\"workers\":%d,\"seed\":%" PRIu64 ","
                     "\"drop_last\":%d,\"device\":\"%s\",\"max_steps\":%ld,\"ckpt_every\":%ld,"
                     "\"val_split\":%.9g,\"clip_grad\":%.9g,\"accum_steps\":%d,"
                     "\"decay_params\":\"%s\",\"warmup_steps\":%ld,\"decay_steps\":%ld,"
                     "\"augment\":%d,\"image_size\":%d,\"normalize\":%d,"
                     "\"label_smoothing\":%.9g,\"label_column\":%s,\"min_lr\":%.9g,"
                     "\"jpeg_decode\":\"%s\"}",
                     model, dataset, data_dir, c->epochs, c->batch_size, c->lr,
                     cdl_optim_kind_name(c->optim.kind), c->optim.momentum, c->optim.dampening,
                     c->optim.nesterov, c->optim.weight_decay, c->optim.beta1, c->optim.beta2,
                     c->optim.eps, cdl_sched_kind_name(c->schedule), c->step_epochs,
                     c->warmup_epochs, c->threads, c->workers, c->seed, c->drop_last, c->device,
                     c->max_steps, c->ckpt_every, c->val_split, c->clip_grad,
                     c->accum_steps > 1 ? c->accum_steps : 1, train_decay_name(c->decay_params),
                     c->warmup_steps, c->decay_steps, c->augment, c->image_size, c->normalize,
                     c->label_smoothing, label_column, c->min_lr,
                     c->jpeg_full ? "full" : "scaled");
    if (n < 0 || (size_t)n >= len)
        return cdl_error("configuration too long for the checkpoint metadata");
    return 0;
}
