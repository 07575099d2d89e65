/* Replica packing for --cdl-mps (see packing.h). */
#include <stdio.h>
#include <string.h>

#include "spank/packing.h"
#include "spank/util.h"

int spk_gpus_parse(const char *cvd, struct spk_gpus *g)
{
    memset(g, 0, sizeof *g);
    if (!cvd || !*cvd)
        return 0;
    if (!spk_charset_ok(cvd, 2048, 1, ":-,"))
        return spk_error("CUDA_VISIBLE_DEVICES='%.64s' holds characters other than "
                         "[A-Za-z0-9:,-]", cvd);
    for (const char *p = cvd;;) {
        size_t n = strcspn(p, ",");
        if (n == 0 || n >= sizeof g->id[0])
            return spk_error("CUDA_VISIBLE_DEVICES='%.64s': empty or overlong entry", cvd);
        if (g->n >= SPK_MAX_GPUS)
            return spk_error("CUDA_VISIBLE_DEVICES='%.64s': more than %d GPUs", cvd,
                             SPK_MAX_GPUS);
        memcpy(g->id[g->n], p, n);
        g->id[g->n][n] = '\0';
        g->n++;
        if (!p[n])
            break;
        p += n + 1;
    }
    return 0;
}

int spk_pack_plan(int tasks, int ngpus, int requested, int max, int pct_conf,
                  struct spk_pack *out)
{
    memset(out, 0, sizeof *out);
    if (tasks < 1)
        return spk_error("--cdl-mps: no local tasks");
    if (ngpus < 1)
        return spk_error("--cdl-mps: the step has no GPUs on this node (CUDA_VISIBLE_DEVICES "
                         "is unset): request them, e.g. --gres=gpu:1 or --gpus-per-node=1");
    int n = requested;
    if (n == 0) {
        n = (tasks + ngpus - 1) / ngpus;
        if (n > max)
            return spk_error("--cdl-mps: %d local tasks on %d GPU%s need %d replicas per GPU, "
                             "more than the administrator's max_replicas_per_gpu=%d: use fewer "
                             "tasks per node or more GPUs", tasks, ngpus, ngpus == 1 ? "" : "s",
                             n, max);
    } else if (n > max) {
        return spk_error("--cdl-mps=%d: more than max_replicas_per_gpu=%d", n, max);
    }
    int used = (tasks + n - 1) / n;
    if (used > ngpus)
        return spk_error("--cdl-mps=%d: %d local tasks in groups of %d need %d GPUs, the step "
                         "has %d on this node: raise N, or request more GPUs", n, tasks, n,
                         used, ngpus);
    out->replicas = n;
    out->gpus_used = used;
    if (tasks % n != 0)
        snprintf(out->note, sizeof out->note, "--cdl-mps: %d local task%s in groups of %d "
                 "leave%s GPU %d with %d replica%s, each held to %d%% of it: part of that GPU "
                 "stays idle; run a multiple of %d tasks per node", tasks, tasks == 1 ? "" : "s",
                 n, tasks == 1 ? "s" : "", used - 1, tasks % n, tasks % n == 1 ? "" : "s",
                 pct_conf ? pct_conf : (100 + n - 1) / n, n);
    out->thread_pct = pct_conf ? pct_conf : (100 + n - 1) / n;
    return 0;
}

/* N of the GPU binding's word "WORD:N" in SLURMD_TRES_BIND, in 1..1024;
 * 0 when it has none or N is not a number. */
static int tres_bind_number(const char *tres_bind, const char *word)
{
    long n;
    char num[16];
    size_t w = strlen(word);
    if (!tres_bind || strncmp(tres_bind, "gpu:", 4))
        return 0;
    /* The binding's words are comma-separated after "gpu:"; another TRES
     * after a '+' is not the GPU's. */
    for (const char *p = tres_bind + 4; *p && *p != '+';) {
        size_t len = strcspn(p, ",+");
        if (len > w + 1 && !strncmp(p, word, w) && p[w] == ':' && len - w - 1 < sizeof num) {
            memcpy(num, p + w + 1, len - w - 1);
            num[len - w - 1] = '\0';
            return spk_parse_uint(num, 1, 1024, &n) == 0 ? (int)n : 0;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return 0;
}

int spk_tres_bind_tasks_per_gpu(const char *tres_bind)
{
    int n = tres_bind_number(tres_bind, "single");
    return n ? n : 1;
}

int spk_tres_bind_per_task(const char *tres_bind)
{
    return tres_bind_number(tres_bind, "per_task");
}

const char *spk_tres_bind_task_gpus(const char *tres_bind)
{
    static const char *const words[] = {"per_task", "map_gpu", "mask_gpu", "single"};
    if (!tres_bind || strncmp(tres_bind, "gpu:", 4))
        return NULL;
    for (const char *p = tres_bind + 4; *p && *p != '+';) {
        for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) {
            size_t n = strlen(words[w]);
            if (!strncmp(p, words[w], n) && p[n] == ':')
                return words[w];
        }
        /* The next word: after a comma that does not separate a list's
         * entries ("map_gpu:0,1" has them); another TRES follows '+'. */
        p += strcspn(p, ",+");
        if (*p == ',')
            p++;
    }
    return NULL;
}

/* One map_gpu entry "ID" or "ID*COUNT" of [p, p + len): 0 when valid. */
static int map_entry(const char *p, size_t len, long *id, long *count)
{
    char buf[24];
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, p, len);
    buf[len] = '\0';
    char *star = strchr(buf, '*');
    *count = 1;
    if (star) {
        *star = '\0';
        if (spk_parse_uint(star + 1, 1, 4096, count) != 0)
            return -1;
    }
    return spk_parse_uint(buf, 0, 4096, id);
}

int spk_tres_bind_map_gpu(const char *tres_bind, int local_id)
{
    const char *list = tres_bind && !strncmp(tres_bind, "gpu:", 4) ? strstr(tres_bind, "map_gpu:")
                                                                  : NULL;
    long id, count, total = 0;
    if (!list || local_id < 0)
        return -1;
    list += 8;
    size_t end = strcspn(list, "+");   /* another TRES follows a '+' */
    /* Twice over the list: its length (with repeats), then the entry of
     * local_id modulo that length. */
    for (int pass = 0; pass < 2; pass++) {
        long want = pass ? local_id % total : 0, at = 0;
        for (size_t i = 0; i < end;) {
            size_t len = strcspn(list + i, ",+");
            if (len > end - i)
                len = end - i;
            if (map_entry(list + i, len, &id, &count) != 0)
                return -1;
            if (pass && want < at + count)
                return (int)id;
            at += count;
            i += len + (list[i + len] == ',');
        }
        total = at;
        if (total == 0)
            return -1;
    }
    return -1;
}

int spk_task_gpu_index(const struct spk_gpus *g, int local_id, int replicas_per_gpu)
{
    long v;
    int i = contract_task_gpu(local_id, replicas_per_gpu, g->n);
    return i >= 0 && spk_parse_uint(g->id[i], 0, 4096, &v) == 0 ? (int)v : -1;
}
