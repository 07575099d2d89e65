/* big_adam: a 25M-parameter model with Adam through a training checkpoint
 * (lib/train/checkpoint.c), for tests/ckpt/big_adam.sh.
 *
 *   big_adam OUT.safetensors
 *
 * The model is one linear layer 5000 -> 5000 (fc1.weight [5000,5000],
 * fc1.bias [5000]: 25,005,000 parameters); Adam's exp_avg and exp_avg_sq
 * hold seeded values (no training: the point is the file). It saves, drops
 * the model, loads the file into a fresh model and optimizer and checks that
 * parameters, both state buffers and the step count came back bit for bit
 * (CRC-32 of every tensor's bytes before and after). Then it prints
 *   crc NAME XXXXXXXX
 * for every tensor of the file, which big_adam.py compares with what
 * PyTorch reads. Peak memory about 1 GB; the format-2 writer refused this
 * model (its header would have exceeded 100 MB). Exit 0 or 1. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <cdl/cdl.h>

#include "lib/train/checkpoint.h"

enum { WIDTH = 5000 };
static const char *SPEC = "input 5000x1x1\nlinear 5000\n";
static const long STEPS = 7;

static int die(const char *what)
{
    fprintf(stderr, "big_adam: %s: %s\n", what, cdl_last_error());
    return 1;
}

/* splitmix64, for reproducible state values. */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

typedef struct setup {
    cdl_backend *be;
    cdl_model *m;
    cdl_optim *o;
} setup;

static int make(setup *s, const cdl_model_spec *spec)
{
    cdl_optim_config oc = cdl_optim_defaults(CDL_OPTIM_ADAM);
    if (!(s->be = cdl_backend_create("cpu", 1)) ||
        !(s->m = cdl_model_create(spec, spec->input, 1, s->be)) ||
        !(s->o = cdl_optim_create(&oc, cdl_model_nparams(s->m), s->be)))
        return -1;
    return 0;
}

static void drop(setup *s)
{
    cdl_optim_destroy(s->o);
    cdl_model_destroy(s->m);
    cdl_backend_destroy(s->be);
    memset(s, 0, sizeof *s);
}

/* CRC-32 of each parameter view of buf (device = host on the CPU), and of
 * the whole buffer in sums[nviews]. */
static void crcs(const setup *s, const float *buf, uint32_t *sums)
{
    int nv = cdl_model_nviews(s->m);
    for (int i = 0; i < nv; i++) {
        const cdl_param_view *v = cdl_model_view(s->m, i);
        sums[i] = (uint32_t)crc32(0, (const unsigned char *)(buf + v->offset),
                                  (uInt)(v->numel * sizeof(float)));
    }
    sums[nv] = (uint32_t)crc32(0, (const unsigned char *)buf,
                               (uInt)(cdl_model_nparams(s->m) * sizeof(float)));
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return fprintf(stderr, "usage: big_adam OUT.safetensors\n"), 2;
    const char *path = argv[1];
    cdl_model_spec spec;
    if (cdl_spec_parse(SPEC, "big_adam", &spec))
        return die("spec");
    setup a = {0}, b = {0};
    if (make(&a, &spec))
        return die("model");
    size_t np = cdl_model_nparams(a.m);
    int nv = cdl_model_nviews(a.m);
    cdl_model_init(a.m, 11);
    uint64_t seed = 5;
    for (int k = 0; k < 2; k++) {
        float *st = cdl_optim_state(a.o, k);
        for (int i = 0; i < nv; i++) {
            const cdl_param_view *v = cdl_model_view(a.m, i);
            for (size_t j = 0; j < v->numel; j++) {
                float u = (float)(mix(&seed) >> 40) / (float)(1u << 24);   /* [0, 1) */
                st[v->offset + j] = k ? u * 1e-3f : u - 0.5f;
            }
        }
    }
    cdl_optim_set_steps(a.o, STEPS);

    cdl_train_config cfg;
    cdl_train_defaults(&cfg);
    cfg.optim = cdl_optim_defaults(CDL_OPTIM_ADAM);
    train_position pos = {.epoch = 1, .batch = 3, .step = STEPS, .world = 1, .samples = 100};
    uint32_t before[3][2], after[3][2];   /* [buffer][view], nv == 2 */
    if (nv != 2)
        return fprintf(stderr, "big_adam: expected 2 tensors, the model has %d\n", nv), 1;
    uint32_t tmp[3];
    crcs(&a, cdl_model_params(a.m), tmp);
    memcpy(before[0], tmp, sizeof before[0]);
    for (int k = 0; k < 2; k++) {
        crcs(&a, cdl_optim_state(a.o, k), tmp);
        memcpy(before[1 + k], tmp, sizeof before[0]);
    }
    if (train_ckpt_save(path, a.m, a.o, &cfg, &pos))
        return die("save");
    drop(&a);

    if (make(&b, &spec))
        return die("model");
    train_position back = {.samples = 100};
    if (train_ckpt_load(path, b.m, b.o, &cfg, &back))
        return die("load");
    crcs(&b, cdl_model_params(b.m), tmp);
    memcpy(after[0], tmp, sizeof after[0]);
    for (int k = 0; k < 2; k++) {
        crcs(&b, cdl_optim_state(b.o, k), tmp);
        memcpy(after[1 + k], tmp, sizeof after[0]);
    }
    int bad = memcmp(before, after, sizeof before) != 0 || cdl_optim_steps(b.o) != STEPS ||
              back.epoch != 1 || back.batch != 3 || back.step != STEPS;
    printf("%zu parameters, Adam: round trip %s\n", np, bad ? "DIFFERS" : "bitwise identical");
    static const char *prefix[] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < nv; i++)
            printf("crc %s%s %08" PRIx32 "\n", prefix[k], cdl_model_view(b.m, i)->name,
                   after[k][i]);
    drop(&b);
    return bad;
}
