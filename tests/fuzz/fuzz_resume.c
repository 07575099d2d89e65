/* libFuzzer target: what a resume reads of a checkpoint's metadata
 * (lib/train/resume_check.c): the stored configuration (each setting, a
 * built-in's --model options), train_samples, val_samples and val_folder,
 * data_fingerprint and a spec file's text, compared with a fixed run's;
 * and two configurations compared as the ranks compare theirs. The input
 * is a safetensors header as fuzz_st.h makes it a file (the first byte's
 * low bit also says whether the run has a spec file). */
#include "lib/train/checkpoint.h"
#include "tests/fuzz/fuzz_st.h"

/* config.c names the optimizer and schedule; the target links neither. */
cdl_optim_config cdl_optim_defaults(cdl_optim_kind kind)
{
    cdl_optim_config c = {.kind = kind, .momentum = 0.9f};
    return c;
}
const char *cdl_optim_kind_name(cdl_optim_kind kind)
{
    return kind == CDL_OPTIM_SGD ? "sgd" : "adam";
}
const char *cdl_sched_kind_name(cdl_sched_kind kind)
{
    return kind ? "cosine" : "constant";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cdl_st_file *f = fuzz_st_open(data, size, "r.safetensors");
    if (!f)
        return 0;
    cdl_train_config cfg;
    cdl_train_defaults(&cfg);
    strcpy(cfg.model, "gpt:n_layer=2,n_head=2,n_embd=16,dropout=0.1");
    strcpy(cfg.dataset, "tokens");
    train_position pos = {.samples = 1000, .val_samples = 100, .val_folder = 1};
    strcpy(pos.fingerprint, "v1 crc32=0123abcd");
    ckpt_check_config(f, &cfg, &pos, data[0] & 1 ? "input 8x1x1\ngpt n_layer=1\n" : NULL);
    const char *stored = cdl_st_meta_get(f, "config");
    char mine[16384], msg[1024];
    if (stored && train_config_json(&cfg, mine, sizeof mine) == 0)
        train_config_differences(stored, mine, msg, sizeof msg);
    cdl_st_close(f);
    return 0;
}
