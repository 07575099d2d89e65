/* cdl-train: train a model from the command line.
 *
 * Exit status: 0 done, 1 a runtime error (message on stderr), 2 a bad
 * option or value, 75 (CDL_EXIT_REQUEUE) stopped by SIGUSR1/SIGTERM after
 * writing a checkpoint: requeue the job and it resumes with --resume auto. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cdl/cdl.h>

#include "blas_core.h"
#include "libcheck.h"
#include "lib/dist/contract.h"
#include "normalize.h"
#include "suggest.h"

enum {
    OPT_DATA_DIR = 256, OPT_BATCH, OPT_MOMENTUM, OPT_WD, OPT_SCHEDULE, OPT_WARMUP, OPT_WORKERS,
    OPT_CKPT_DIR, OPT_RESUME, OPT_RESUME_ALLOW, OPT_METRICS, OPT_MAX_STEPS, OPT_CKPT_EVERY, OPT_KEEP_LAST, OPT_KEEP_EVERY, OPT_DROP_LAST,
    OPT_DEVICE, OPT_NESTEROV, OPT_DAMPENING, OPT_STEP_EPOCHS, OPT_SYNTH_N, OPT_PROGRESS,
    OPT_NO_PROGRESS, OPT_DIST, OPT_BETA1, OPT_BETA2, OPT_EPS, OPT_VERSION, OPT_TF32, OPT_FAST_CONV, OPT_GRAPHS,
    OPT_METRICS_EVERY,
    OPT_TENSORBOARD,
    OPT_IMAGE_SIZE, OPT_CHANNELS, OPT_LABEL_COLUMN, OPT_SKIP_BAD, OPT_DECODE, OPT_JPEG_DECODE, OPT_NORMALIZE, OPT_AUGMENT,
    OPT_VAL_SPLIT, OPT_INIT, OPT_INIT_IGNORE,
    OPT_LABEL_SMOOTHING,
    OPT_STAGE,
    OPT_WARMUP_STEPS, OPT_DECAY_STEPS, OPT_MIN_LR,
    OPT_CLIP_GRAD, OPT_ACCUM_STEPS, OPT_DECAY_PARAMS, OPT_EVAL_EVERY, OPT_PEAK_TFLOPS,
    OPT_SHARD_OPTIMIZER,
    OPT_BLOCK_SIZE, OPT_VOCAB_SIZE,
    OPT_PRECISION,
    OPT_SUMMARY,
};

static const struct option long_opts[] = {
    {"model", required_argument, NULL, 'm'},
    {"dataset", required_argument, NULL, 'd'},
    {"data-dir", required_argument, NULL, OPT_DATA_DIR},
    {"epochs", required_argument, NULL, 'e'},
    {"batch-size", required_argument, NULL, OPT_BATCH},
    {"lr", required_argument, NULL, 'l'},
    {"optimizer", required_argument, NULL, 'o'},
    {"momentum", required_argument, NULL, OPT_MOMENTUM},
    {"dampening", required_argument, NULL, OPT_DAMPENING},
    {"nesterov", no_argument, NULL, OPT_NESTEROV},
    {"weight-decay", required_argument, NULL, OPT_WD},
    {"label-smoothing", required_argument, NULL, OPT_LABEL_SMOOTHING},
    {"beta1", required_argument, NULL, OPT_BETA1},
    {"beta2", required_argument, NULL, OPT_BETA2},
    {"eps", required_argument, NULL, OPT_EPS},
    {"schedule", required_argument, NULL, OPT_SCHEDULE},
    {"step-epochs", required_argument, NULL, OPT_STEP_EPOCHS},
    {"warmup-epochs", required_argument, NULL, OPT_WARMUP},
    {"warmup-steps", required_argument, NULL, OPT_WARMUP_STEPS},
    {"decay-steps", required_argument, NULL, OPT_DECAY_STEPS},
    {"min-lr", required_argument, NULL, OPT_MIN_LR},
    {"threads", required_argument, NULL, 't'},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"seed", required_argument, NULL, 's'},
    {"ckpt-dir", required_argument, NULL, OPT_CKPT_DIR},
    {"ckpt-every", required_argument, NULL, OPT_CKPT_EVERY},
    {"keep-last", required_argument, NULL, OPT_KEEP_LAST},
    {"keep-every", required_argument, NULL, OPT_KEEP_EVERY},
    {"resume", required_argument, NULL, OPT_RESUME},
    {"resume-allow", required_argument, NULL, OPT_RESUME_ALLOW},
    {"metrics", required_argument, NULL, OPT_METRICS},
    {"metrics-every", required_argument, NULL, OPT_METRICS_EVERY},
    {"tensorboard", required_argument, NULL, OPT_TENSORBOARD},
    {"max-steps", required_argument, NULL, OPT_MAX_STEPS},
    {"drop-last", no_argument, NULL, OPT_DROP_LAST},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"tf32", required_argument, NULL, OPT_TF32},
    {"fast-conv", required_argument, NULL, OPT_FAST_CONV},
    {"precision", required_argument, NULL, OPT_PRECISION},
    {"cuda-graphs", required_argument, NULL, OPT_GRAPHS},
    {"dist-backend", required_argument, NULL, OPT_DIST},
    {"shard-optimizer", no_argument, NULL, OPT_SHARD_OPTIMIZER},
    {"synthetic-size", required_argument, NULL, OPT_SYNTH_N},
    {"image-size", required_argument, NULL, OPT_IMAGE_SIZE},
    {"channels", required_argument, NULL, OPT_CHANNELS},
    {"label-column", required_argument, NULL, OPT_LABEL_COLUMN},
    {"skip-bad-files", no_argument, NULL, OPT_SKIP_BAD},
    {"decode", required_argument, NULL, OPT_DECODE},
    {"jpeg-decode", required_argument, NULL, OPT_JPEG_DECODE},
    {"normalize", required_argument, NULL, OPT_NORMALIZE},
    {"augment", required_argument, NULL, OPT_AUGMENT},
    {"val-split", required_argument, NULL, OPT_VAL_SPLIT},
    {"init", required_argument, NULL, OPT_INIT},
    {"init-ignore", required_argument, NULL, OPT_INIT_IGNORE},
    {"stage", required_argument, NULL, OPT_STAGE},
    {"clip-grad", required_argument, NULL, OPT_CLIP_GRAD},
    {"accum-steps", required_argument, NULL, OPT_ACCUM_STEPS},
    {"decay-params", required_argument, NULL, OPT_DECAY_PARAMS},
    {"eval-every", required_argument, NULL, OPT_EVAL_EVERY},
    {"peak-tflops", required_argument, NULL, OPT_PEAK_TFLOPS},
    {"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
    {"vocab-size", required_argument, NULL, OPT_VOCAB_SIZE},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
    {"quiet", no_argument, NULL, 'q'},
    {"summary", no_argument, NULL, OPT_SUMMARY},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

static void usage(FILE *f)
{
    fprintf(f,
"Usage: cdl-train [OPTION]...\n"
"Train a model on CPU or GPU, alone or as one rank of a data-parallel job\n"
"(srun --cdl-ddp, cdlrun, mpirun).\n"
"\n"
"Model and data:\n"
"  -m, --model NAME|FILE        built-in model or a model spec file [lenet]: lenet, mlp,\n"
"                               resnet20 (CIFAR), torchvision's resnet18, resnet34,\n"
"                               resnet50, resnet101 (NAME:stem=cifar|imagenet; auto:\n"
"                               imagenet above 64 pixels a side), gpt[:KEY=VALUE,...]\n"
"                               (nanoGPT's; keys n_layer, n_head, n_embd, block_size,\n"
"                               vocab_size, bias, dropout; docs/model-spec.md)\n"
"      --summary                print the model's layers (names, output shapes,\n"
"                               parameters) for this data and exit; trains nothing\n"
"  -d, --dataset NAME           fashion-mnist, mnist, cifar10, synthetic, or your data:\n"
"                               imagefolder, npy, npz, csv (NAME:PATH = --data-dir PATH)\n"
"                               [fashion-mnist]; language models: text:FILE (bytes),\n"
"                               tokens:DIR (nanoGPT's train.bin, val.bin: uint16)\n"
"      --block-size N           text, tokens: tokens per sample [the model's, else 64]\n"
"      --vocab-size N           tokens: ids must be below N, 1..65536 [DIR/meta.pkl's\n"
"                               vocab_size, else 50257]\n"
"      --data-dir PATH          dataset folder or file [fashion-mnist: " CDL_FASHION_MNIST_DIR "]\n"
"      --synthetic-size N       samples of the synthetic dataset [10000]\n"
"      --image-size N           imagefolder: shorter side to N, centre N x N crop\n"
"                               [0: the first picture's size]\n"
"      --channels 1|3           imagefolder: grayscale or RGB [the first picture's]\n"
"      --skip-bad-files         imagefolder: leave out unreadable pictures (counted)\n"
"      --decode auto|memory|stream  imagefolder: decode once into memory, or in the loader's\n"
"                               workers as batches need them (auto: memory if it fits) [auto]\n"
"      --jpeg-decode scaled|full  imagefolder: full decodes JPEGs whole, then resizes, as PIL\n"
"                               (PyTorch's pixels, to fine-tune its weights) [scaled]\n"
"      --label-column NAME      csv: the label column [label, else the last]\n"
"      --normalize auto|none|MEAN,STD|M1,..,Mc,S1,..,Sc\n"
"                               per-channel (x-mean)/std [named datasets: their\n"
"                               published values; others: auto = computed]\n"
"      --augment none|crop|flip|crop+flip  pictures [cifar10: crop+flip, else none]\n"
"      --val-split F            validation samples taken from the training set: a\n"
"                               fraction or a count; 0 = none, validate on test\n"
"                               [5000 for (fashion-)mnist, else 0.1]\n"
"      --init FILE              start from the weights in FILE (.safetensors)\n"
"      --init-ignore GLOB       tensors of the model --init leaves fresh (a new head)\n"
"      --stage auto|off|DIR     copy the data once per node to $SLURM_TMPDIR/$TMPDIR\n"
"                               (auto: from network file systems) or DIR (kept) [off]\n"
"Training:\n"
"  -e, --epochs N               [10]\n"
"      --batch-size N           samples per step and rank [64]\n"
"  -l, --lr X                   base learning rate [sgd 0.05, adam(w) 1e-3]\n"
"  -o, --optimizer sgd|adam|adamw  [sgd]\n"
"      --momentum X  --dampening X  --nesterov   SGD [momentum 0.9]\n"
"      --weight-decay X         [sgd 5e-4, adam 0, adamw 0.01; adamw decouples it]\n"
"      --label-smoothing X      cross-entropy label smoothing, 0..1 (PyTorch's) [0]\n"
"      --beta1 X --beta2 X --eps X               Adam/AdamW [0.9 0.999 1e-8]\n"
"      --schedule constant|step|cosine           [cosine]\n"
"      --step-epochs N          step schedule: lr x0.1 every N epochs [3]\n"
"      --warmup-epochs N        linear warmup [0]\n"
"      --warmup-steps N         linear warmup over N optimizer steps instead\n"
"      --decay-steps N          cosine: reach --min-lr at step N [the end of the last epoch]\n"
"      --min-lr X               cosine: end at X, e.g. lr/10 as nanoGPT [0]\n"
"      --max-steps N            stop after N steps in total; the schedule is kept\n"
"                               (a resume goes on as if never stopped) [0: none]\n"
"      --clip-grad NORM         clip the gradient's global L2 norm to NORM [0: off]\n"
"      --accum-steps K          K micro-batches of --batch-size per optimizer step [1]\n"
"      --decay-params 2d|all    weight decay on >= 2-D parameters only, or on all\n"
"                               [2d for sequence models (gpt), else all]\n"
"      --eval-every N           also validate (and keep best) every N steps\n"
"                               [0: per epoch only]\n"
"      --drop-last              drop each epoch's last partial batch\n"
"  -s, --seed N                 seeds init, shuffling, augmentation, dropout [1]\n"
"Checkpoints:\n"
"      --ckpt-dir DIR           write DIR/last.safetensors each epoch, keep DIR/best.safetensors\n"
"      --ckpt-every N           write last every N steps, not every epoch [0: epochs]\n"
"      --keep-last N            also keep the N newest checkpoints as DIR/step-S.safetensors\n"
"                               [0: only last and best]\n"
"      --keep-every N           ... and for good those of steps that are multiples of N [0]\n"
"      --resume auto|never|PATH [auto: continue from DIR/last.safetensors if present]\n"
"      --resume-allow LIST      settings a resume may change, e.g. epochs,lr [none]\n"
"Resources and output:\n"
"      --device cpu|cuda|auto   [auto: cuda when a GPU is visible, else cpu]\n"
"      --tf32 on|off|default    TF32 on GPUs [default: like PyTorch, on for\n"
"                               convolutions, off for matrix products; env CDL_TF32]\n"
"      --fast-conv on|off       faster 3x3 convolutions with more rounding error (on\n"
"                               CPUs with AVX2: Winograd F(4x4))\n"
"                               [off; env CDL_FAST_CONV]\n"
"      --precision fp32|bf16    matrix products of linear layers on GPUs in bf16 with\n"
"                               fp32 accumulation, fp32 weights and optimizer [fp32]\n"
"      --cuda-graphs on|off     run each full training batch as one CUDA graph [on\n"
"                               on a GPU with one rank; env CDL_CUDA_GRAPHS]\n"
"  -t, --threads N              compute threads on the CPU (a GPU run uses one)\n"
"                               [SLURM_CPUS_PER_TASK, OMP_NUM_THREADS or all]\n"
"      --workers N              data loader threads [1]\n"
"      --dist-backend NAME      auto, shm, mpi, hier, hier:mpi|nccl|store, nccl, single\n"
"                               (this process alone, whatever its environment) [auto]\n"
"      --shard-optimizer        ZeRO-1: each rank keeps 1/world of the optimizer state\n"
"                               (same results as unsharded)\n"
"      --metrics FILE           append JSON lines: the run's configuration, then one\n"
"                               record per epoch (docs/metrics.md)\n"
"      --metrics-every N        also a record every N steps [0: never]\n"
"      --tensorboard DIR        TensorBoard event files: scalars per epoch (and every\n"
"                               --metrics-every steps), hyper-parameters\n"
"      --peak-tflops X          the GPU's or CPU's peak TFLOP/s for MFU [known GPUs by name]\n"
"      --progress | --no-progress  live bar with ETA (default: when stderr is a terminal)\n"
"  -q, --quiet                  no output but errors and warnings\n"
"  -h, --help    --version\n"
"\n"
"Exit status: 0 done; 1 error; 2 bad option; %d stopped by SIGUSR1/SIGTERM after\n"
"writing a checkpoint (requeue the job; it resumes with --resume auto).\n",
            CDL_EXIT_REQUEUE);
}

/* Values are echoed cut at 80 characters ('%.80s%s', s, ell(s)): a 100 KB
 * argument must not make a 100 KB error line. */
static const char *ell(const char *s)
{
    return strlen(s) > 80 ? "..." : "";
}

static int bad(const char *opt, const char *val, const char *why)
{
    fprintf(stderr, "cdl-train: --%s '%.80s%s': %s (see cdl-train --help)\n", opt, val, ell(val),
            why);
    return -1;
}

static int parse_long(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    char why[96];
    if (end == s || *end || errno == ERANGE || v < lo || v > hi) {
        snprintf(why, sizeof why, "expected an integer from %ld to %ld", lo, hi);
        return bad(opt, s, why);
    }
    *out = v;
    return 0;
}

static int parse_int(const char *opt, const char *s, int lo, int hi, int *out)
{
    long v;
    if (parse_long(opt, s, lo, hi, &v) != 0)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_float(const char *opt, const char *s, double lo, double hi, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    char why[96];
    if (end == s || *end || errno == ERANGE || !isfinite(v) || v < lo || v > hi) {
        snprintf(why, sizeof why, "expected a number from %g to %g", lo, hi);
        return bad(opt, s, why);
    }
    *out = (float)v;
    return 0;
}

/* A number in [lo, hi): Adam's betas, as torch.optim.Adam checks them
 * (0 <= beta < 1; beta = 1 would never forget and divides by 1 - beta^t = 0). */
static int parse_float_below(const char *opt, const char *s, double lo, double hi, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    char why[96];
    if (end == s || *end || errno == ERANGE || !isfinite(v) || v < lo || !((float)v < hi)) {
        snprintf(why, sizeof why, "expected a number from %g up to, not including, %g (as in "
                 "PyTorch)", lo, hi);
        return bad(opt, s, why);
    }
    *out = (float)v;
    return 0;
}

static int copy_str(const char *opt, const char *s, char *dst, size_t len)
{
    if (!*s)
        return bad(opt, s, "must not be empty");
    if (strlen(s) >= len)
        return bad(opt, s, "too long");
    memcpy(dst, s, strlen(s) + 1);
    return 0;
}

static int one_of(const char *opt, const char *s, const char *const *choices, char *dst, size_t len)
{
    for (int i = 0; choices[i]; i++)
        if (!strcmp(s, choices[i]))
            return copy_str(opt, s, dst, len);
    char why[128] = "expected one of:";
    for (int i = 0; choices[i]; i++) {
        strncat(why, " ", sizeof why - strlen(why) - 1);
        strncat(why, choices[i], sizeof why - strlen(why) - 1);
    }
    return bad(opt, s, why);
}

/* s's index in choices (an option whose values follow an enum's order),
 * or an error listing them. */
static int index_of(const char *opt, const char *s, const char *const *choices, int *out)
{
    char v[32];
    int rc = one_of(opt, s, choices, v, sizeof v);
    for (int k = 0; rc == 0 && choices[k]; k++)
        if (!strcmp(v, choices[k]))
            *out = k;
    return rc;
}

/* --dataset NAME or NAME:PATH (= --data-dir PATH); a typo gets the
 * nearest name. */
static int parse_dataset(const char *opt, const char *a, cdl_train_config *cfg)
{
    static const char *const datasets[] = {"fashion-mnist", "mnist", "cifar10", "synthetic",
                                           "imagefolder", "npy", "npz", "csv", "text",
                                           "tokens", NULL};
    static const char *const aliases[] = {"folder", "imagefolder", "image-folder", "imagefolder",
                                          "ImageFolder", "imagefolder", "fashion_mnist",
                                          "fashion-mnist", "fmnist", "fashion-mnist", NULL};
    char kind[32];
    const char *colon = strchr(a, ':');
    size_t len = colon ? (size_t)(colon - a) : strlen(a);
    if (len >= sizeof kind)
        len = sizeof kind - 1;
    memcpy(kind, a, len);
    kind[len] = 0;
    for (int i = 0; datasets[i]; i++)
        if (!strcmp(kind, datasets[i])) {
            if (colon && i < 4)
                return bad(opt, a, "NAME:PATH is for imagefolder, npy, npz, csv, text and "
                           "tokens; the named datasets take --data-dir");
            if (colon && copy_str("data-dir", colon + 1, cfg->data_dir, sizeof cfg->data_dir))
                return -1;
            return copy_str(opt, kind, cfg->dataset, sizeof cfg->dataset);
        }
    char why[200], hint[64] = "";
    for (int i = 0; aliases[i]; i += 2)
        if (!strcmp(kind, aliases[i]))
            snprintf(hint, sizeof hint, "; use %s", aliases[i + 1]);
    if (!hint[0])
        suggest_value(kind, datasets, hint, sizeof hint);
    snprintf(why, sizeof why, "expected fashion-mnist, mnist, cifar10, synthetic, imagefolder, "
             "npy, npz, csv, text or tokens%s", hint);
    return bad(opt, a, why);
}

/* A reader option given for a dataset whose reader does not take it: an
 * error, as it would be ignored without a word (--image-size on arrays
 * does not resize them). 1 when it said so. */
static int misfit_reader_option(const cdl_train_config *cfg)
{
    const char *d = cfg->dataset;
    int folder = !strcmp(d, "imagefolder"), tokens = !strcmp(d, "text") || !strcmp(d, "tokens");
    const char *opt = NULL, *only = NULL;
    if (!folder && (cfg->image_size || cfg->image_channels || cfg->skip_bad_files ||
                    cfg->image_decode != CDL_DECODE_AUTO || cfg->jpeg_full)) {
        opt = cfg->image_size ? "--image-size" : cfg->image_channels ? "--channels"
              : cfg->skip_bad_files ? "--skip-bad-files"
              : cfg->jpeg_full ? "--jpeg-decode" : "--decode";
        only = "--dataset imagefolder";
    } else if (strcmp(d, "csv") && cfg->label_column[0]) {
        opt = "--label-column";
        only = "--dataset csv";
    } else if (!tokens && (cfg->block_size || cfg->vocab_size)) {
        opt = cfg->block_size ? "--block-size" : "--vocab-size";
        only = "--dataset text and tokens";
    } else if (tokens && cfg->normalize != CDL_NORMALIZE_DEFAULT) {
        fprintf(stderr, "cdl-train: --normalize does not apply to token ids (--dataset %s): drop "
                "it (docs/data.md)\n", d);
        return 1;
    }
    if (!opt)
        return 0;
    fprintf(stderr, "cdl-train: %s applies to %s only, and this run reads --dataset %s: drop it "
            "(docs/data.md)\n", opt, only, d);
    return 1;
}

/* --normalize auto|none|MEAN,STD|M1,...,Mc,S1,...,Sc */
static int parse_normalize(const char *opt, const char *a, cdl_train_config *cfg)
{
    cli_normalize n;
    const char *why;
    if (cli_parse_normalize(a, &n, &why) != 0)
        return bad(opt, a, why);
    cfg->normalize = n.kind;
    cfg->norm_count = n.count;
    memcpy(cfg->norm_mean, n.mean, sizeof n.mean);
    memcpy(cfg->norm_std, n.std, sizeof n.std);
    return 0;
}

/* This process's rank as its launcher gave it, in discovery's order (the
 * contract, PMIx, a Slurm step; docs/rank-contract.md), or NULL: under
 * mpirun and srun --mpi=pmix there is no RANK, and the ranks' errors and
 * the lost-peer advice must still say whose they are, and come once. */
static const char *own_rank(void)
{
    const char *rank = getenv("RANK"), *world = getenv("WORLD_SIZE");
    const char *slurm = getenv("SLURM_STEP_NUM_TASKS");
    if (!slurm || !*slurm)
        slurm = getenv("SLURM_NTASKS");
    if (!rank || !*rank) {
        rank = getenv("PMIX_RANK");
        world = getenv("OMPI_COMM_WORLD_SIZE");
        if (!world || !*world)
            world = slurm;
    }
    if ((!rank || !*rank) && (getenv("SLURM_STEP_ID") || getenv("SLURM_STEPID"))) {
        rank = getenv("SLURM_PROCID");   /* an srun step, not the batch script */
        world = slurm;
    }
    return rank && *rank && (!world || strcmp(world, "1") != 0) ? rank : NULL;
}

/* "cdl-train" or, for one rank of several (cdlrun, srun --cdl-ddp, mpirun),
 * "cdl-train: rank N": every rank prints its own warnings and errors, and
 * a log holding all ranks' lines must say whose each is. */
static const char *who(char *buf, size_t len)
{
    const char *rank = own_rank();
    if (rank)
        snprintf(buf, len, "cdl-train: rank %.16s", rank);
    else
        snprintf(buf, len, "cdl-train");
    return buf;
}

/* msg without a leading "rank R: " naming this rank, which who() already
 * says: libcdl's errors name the rank for programs that do not. */
static const char *without_own_rank(const char *msg)
{
    const char *r = own_rank();
    size_t n = r ? strlen(r) : 0;
    if (n && !strncmp(msg, "rank ", 5) && !strncmp(msg + 5, r, n) && !strncmp(msg + 5 + n, ": ", 2))
        return msg + 7 + n;
    return msg;
}

/* More threads than this process may run on (a cgroup or a launcher's
 * binding smaller than --cpus-per-task, a cgroup CPU quota) only
 * time-slice. Without --threads, libcdl takes the smaller of
 * SLURM_CPUS_PER_TASK (else OMP_NUM_THREADS) and the CPUs
 * (cdl_default_threads); with it, the user's count stands. Say which,
 * once, in one line. On a GPU the count does not matter: the CUDA
 * backend computes on one thread (--workers decode the data), so
 * --device cuda is not warned, and auto says what the count is for. */
static void warn_cpus(int threads, const char *device)
{
    if (!strcmp(device, "cuda"))
        return;
    const char *gpu = strcmp(device, "auto") ? ""
                      : " (on a CPU: a run on a GPU computes on one thread whatever the count)";
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return;
    int ncpu = CPU_COUNT(&set);
    char me[48];
    if (threads > 0) {
        if (threads > ncpu)
            fprintf(stderr, "%s: warning: --threads %d but this process may run on %d "
                    "CPU%s: the threads beyond %d share them and slow each other down%s\n",
                    who(me, sizeof me), threads, ncpu, ncpu > 1 ? "s" : "", ncpu, gpu);
        return;
    }
    const char *var = "SLURM_CPUS_PER_TASK", *s = getenv(var);
    if (!s || !*s)
        s = getenv(var = "OMP_NUM_THREADS");
    long want = s && *s ? strtol(s, NULL, 10) : 0;
    int used = cdl_default_threads();   /* the mask's CPUs or the quota */
    if (want > used && want <= 4096)
        fprintf(stderr, "%s: warning: %s is %ld but this process may run on %d CPU%s%s; "
                "cdl uses the smaller, %d%s\n", who(me, sizeof me), var, want, used,
                used == 1 ? "" : "s", used < ncpu ? " (its cgroup's CPU quota)" : "", used, gpu);
}

/* The environment's settings (options given later override them): read
 * here, at the edge, so libcdl takes its configuration by value. */
static int read_env(cdl_train_config *cfg)
{
    const char *tf32 = getenv("CDL_TF32");
    if (tf32 && *tf32 &&
        cdl_backend_parse_tf32(tf32, "CDL_TF32", &cfg->tf32_conv, &cfg->tf32_matmul) != 0) {
        fprintf(stderr, "cdl-train: %s\n", cdl_last_error());
        return -1;
    }
    const char *fc = getenv("CDL_FAST_CONV");   /* a site's or a module's default */
    if (fc && *fc) {
        if (strcasecmp(fc, "on") && strcasecmp(fc, "off")) {
            fprintf(stderr, "cdl-train: CDL_FAST_CONV '%.80s%s': use on or off (or unset it: "
                    "off)\n", fc, ell(fc));
            return -1;
        }
        cfg->fast_conv = !strcasecmp(fc, "on");
    }
    const char *kb = getenv("CDL_DDP_BUCKET_KB");   /* tuning and tests */
    if (kb && *kb) {
        char *end;
        long v = strtol(kb, &end, 10);
        if (*end || v < 1 || v > (1L << 22)) {
            fprintf(stderr, "cdl-train: CDL_DDP_BUCKET_KB '%.80s%s': give a bucket size in KiB "
                    "(1..4194304) or unset it (25 MiB)\n", kb, ell(kb));
            return -1;
        }
        cfg->ddp_bucket_kb = v;
    }
    const char *graphs = getenv("CDL_CUDA_GRAPHS");
    if (graphs && *graphs) {
        if (strcasecmp(graphs, "on") && strcasecmp(graphs, "off")) {
            fprintf(stderr, "cdl-train: CDL_CUDA_GRAPHS '%.80s%s': use on or off (or unset it: on "
                    "for CUDA)\n", graphs, ell(graphs));
            return -1;
        }
        cfg->cuda_graphs = strcasecmp(graphs, "on") ? -1 : 1;
    }
    static cdl_dist_config dist;   /* CDL_TIMEOUT, CDL_SHM_*: docs/data-parallel.md */
    if (cdl_dist_config_from_env(&dist) != 0) {
        fprintf(stderr, "cdl-train: %s\n", cdl_last_error());
        return -1;
    }
    cfg->dist_config = &dist;
    cfg->log = getenv("CDL_LOG");   /* docs/cuda.md */
    return 0;
}

/* Fills cfg from argv; returns 0, 1 for --help/--version (exit 0) or -1. */
static int parse_args(int argc, char **argv, cdl_train_config *cfg)
{
    static const char *const devices[] = {"cpu", "cuda", "auto", NULL};
    static const char *const dists[] = {"auto", "shm", "mpi", "hier", "hier:mpi", "hier:nccl",
                                        "hier:store", "nccl", "single", NULL};
    int c, wd_given = 0, mom_given = 0, lr_given = 0;
    const char *sgd_only = NULL, *adam_only = NULL, *step_epochs = NULL;   /* given as */
    long l;
    int rc = 0;
    opterr = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, ":m:d:e:l:o:t:s:qh", long_opts, NULL)) != -1) {
        const char *a = optarg;
        const char *name = "";
        for (int i = 0; long_opts[i].name; i++)
            if (long_opts[i].val == c)
                name = long_opts[i].name;
        switch (c) {
        case 'm': rc = copy_str(name, a, cfg->model, sizeof cfg->model); break;
        case 'd': rc = parse_dataset(name, a, cfg); break;
        case OPT_DATA_DIR: rc = copy_str(name, a, cfg->data_dir, sizeof cfg->data_dir); break;
        case OPT_BLOCK_SIZE: rc = parse_int(name, a, 1, 1 << 20, &cfg->block_size); break;
        case OPT_VOCAB_SIZE: rc = parse_int(name, a, 1, 65536, &cfg->vocab_size); break;
        case 'e': rc = parse_int(name, a, 1, 100000, &cfg->epochs); break;
        case OPT_BATCH: rc = parse_int(name, a, 1, 65536, &cfg->batch_size); break;
        case 'l': rc = parse_float(name, a, 1e-12, 1e3, &cfg->lr); lr_given = 1; break;
        case 'o': {
            int k = cdl_optim_kind_parse(a);
            if (k < 0) {
                rc = bad(name, a, "expected sgd, adam or adamw");
                break;
            }
            cdl_optim_config d = cdl_optim_defaults((cdl_optim_kind)k);
            if (mom_given)
                d.momentum = cfg->optim.momentum;
            if (wd_given)
                d.weight_decay = cfg->optim.weight_decay;
            else if (k == CDL_OPTIM_SGD)
                d.weight_decay = cfg->optim.weight_decay;
            if (k == CDL_OPTIM_SGD && !mom_given)
                d.momentum = 0.9f;
            cfg->optim = d;
            break;
        }
        case OPT_MOMENTUM:
            rc = parse_float(name, a, 0, 1, &cfg->optim.momentum);
            mom_given = 1;
            sgd_only = name;
            break;
        case OPT_DAMPENING:
            rc = parse_float(name, a, 0, 1, &cfg->optim.dampening);
            sgd_only = name;
            break;
        case OPT_NESTEROV: cfg->optim.nesterov = 1; sgd_only = name; break;
        case OPT_WD: rc = parse_float(name, a, 0, 10, &cfg->optim.weight_decay); wd_given = 1; break;
        case OPT_LABEL_SMOOTHING: rc = parse_float(name, a, 0, 1, &cfg->label_smoothing); break;
        case OPT_BETA1:
            rc = parse_float_below(name, a, 0, 1, &cfg->optim.beta1);
            adam_only = name;
            break;
        case OPT_BETA2:
            rc = parse_float_below(name, a, 0, 1, &cfg->optim.beta2);
            adam_only = name;
            break;
        case OPT_EPS: rc = parse_float(name, a, 1e-20, 1, &cfg->optim.eps); adam_only = name; break;
        case OPT_SCHEDULE: {
            int k = cdl_sched_kind_parse(a);
            if (k < 0)
                rc = bad(name, a, "expected constant, step or cosine");
            else
                cfg->schedule = (cdl_sched_kind)k;
            break;
        }
        case OPT_STEP_EPOCHS:
            rc = parse_int(name, a, 1, 100000, &cfg->step_epochs);
            step_epochs = a;
            break;
        case OPT_WARMUP: rc = parse_int(name, a, 0, 100000, &cfg->warmup_epochs); break;
        case OPT_WARMUP_STEPS: rc = parse_long(name, a, 0, LONG_MAX, &cfg->warmup_steps); break;
        case OPT_DECAY_STEPS: rc = parse_long(name, a, 0, LONG_MAX, &cfg->decay_steps); break;
        case OPT_MIN_LR: rc = parse_float(name, a, 0, 1e3, &cfg->min_lr); break;
        case 't': rc = parse_int(name, a, 1, 1024, &cfg->threads); break;
        case OPT_WORKERS: rc = parse_int(name, a, 0, 64, &cfg->workers); break;
        case 's':
            rc = parse_long(name, a, 0, LONG_MAX, &l);
            cfg->seed = (uint64_t)l;
            break;
        case OPT_CKPT_DIR: rc = copy_str(name, a, cfg->ckpt_dir, sizeof cfg->ckpt_dir); break;
        case OPT_CKPT_EVERY: rc = parse_long(name, a, 0, LONG_MAX, &cfg->ckpt_every); break;
        case OPT_KEEP_LAST: rc = parse_long(name, a, 0, LONG_MAX, &cfg->keep_last); break;
        case OPT_KEEP_EVERY: rc = parse_long(name, a, 0, LONG_MAX, &cfg->keep_every); break;
        case OPT_RESUME: rc = copy_str(name, a, cfg->resume, sizeof cfg->resume); break;
        case OPT_RESUME_ALLOW:
            rc = copy_str(name, a, cfg->resume_allow, sizeof cfg->resume_allow);
            break;
        case OPT_METRICS: rc = copy_str(name, a, cfg->metrics, sizeof cfg->metrics); break;
        case OPT_METRICS_EVERY: rc = parse_long(name, a, 0, LONG_MAX, &cfg->metrics_every); break;
        case OPT_TENSORBOARD:
            rc = copy_str(name, a, cfg->tensorboard, sizeof cfg->tensorboard);
            break;
        case OPT_CLIP_GRAD: rc = parse_float(name, a, 0, 1e30, &cfg->clip_grad); break;
        case OPT_ACCUM_STEPS: rc = parse_int(name, a, 1, 1 << 20, &cfg->accum_steps); break;
        case OPT_DECAY_PARAMS: {
            static const char *const groups[] = {"2d", "all", NULL};
            char v[8];
            rc = one_of(name, a, groups, v, sizeof v);
            if (rc == 0)
                cfg->decay_params = !strcmp(v, "2d") ? CDL_DECAY_2D : CDL_DECAY_ALL;
            break;
        }
        case OPT_EVAL_EVERY: rc = parse_long(name, a, 0, LONG_MAX, &cfg->eval_every); break;
        case OPT_PEAK_TFLOPS: {
            float v = 0;
            rc = parse_float(name, a, 0, 1e9, &v);
            cfg->peak_tflops = v;
            break;
        }
        case OPT_MAX_STEPS: rc = parse_long(name, a, 0, LONG_MAX, &cfg->max_steps); break;
        case OPT_DROP_LAST: cfg->drop_last = 1; break;
        case OPT_DEVICE:
            if (!strcmp(a, "gpu")) {   /* PyTorch's word */
                fprintf(stderr, "cdl-train: --device 'gpu': use --device cuda\n");
                return -1;
            }
            rc = one_of(name, a, devices, cfg->device, sizeof cfg->device);
            break;
        case OPT_TF32: {
            static const char *const tf32[] = {"on", "off", "default", NULL};
            char v[16];
            rc = one_of(name, a, tf32, v, sizeof v);
            if (rc == 0)
                cdl_backend_parse_tf32(v, "--tf32", &cfg->tf32_conv, &cfg->tf32_matmul);
            break;
        }
        case OPT_FAST_CONV: {
            static const char *const onoff[] = {"on", "off", NULL};
            char v[8];
            rc = one_of(name, a, onoff, v, sizeof v);
            if (rc == 0)
                cfg->fast_conv = !strcmp(v, "on");
            break;
        }
        case OPT_PRECISION: {
            static const char *const prec[] = {"fp32", "bf16", NULL};
            char v[8];
            rc = one_of(name, a, prec, v, sizeof v);
            if (rc == 0)
                cdl_backend_parse_precision(v, "--precision", &cfg->precision);
            break;
        }
        case OPT_GRAPHS: {
            static const char *const onoff[] = {"on", "off", NULL};
            char v[8];
            rc = one_of(name, a, onoff, v, sizeof v);
            if (rc == 0)
                cfg->cuda_graphs = !strcmp(v, "on") ? 1 : -1;
            break;
        }
        case OPT_SHARD_OPTIMIZER: cfg->shard_optimizer = 1; break;
        case OPT_DIST: rc = one_of(name, a, dists, cfg->dist_backend, sizeof cfg->dist_backend); break;
        case OPT_SYNTH_N: rc = parse_int(name, a, 1, 10000000, &cfg->synthetic_n); break;
        case OPT_IMAGE_SIZE: rc = parse_int(name, a, 1, 4096, &cfg->image_size); break;
        case OPT_CHANNELS: {
            static const char *const ch[] = {"1", "3", NULL};
            char v[4];
            if ((rc = one_of(name, a, ch, v, sizeof v)) == 0)
                cfg->image_channels = atoi(v);
            break;
        }
        case OPT_LABEL_COLUMN:
            rc = copy_str(name, a, cfg->label_column, sizeof cfg->label_column);
            break;
        case OPT_SKIP_BAD: cfg->skip_bad_files = 1; break;
        case OPT_DECODE: {   /* the order of enum cdl_decode */
            static const char *const dec[] = {"auto", "memory", "stream", NULL};
            rc = index_of(name, a, dec, &cfg->image_decode);
            break;
        }
        case OPT_JPEG_DECODE: {
            static const char *const jd[] = {"scaled", "full", NULL};
            rc = index_of(name, a, jd, &cfg->jpeg_full);
            break;
        }
        case OPT_NORMALIZE: rc = parse_normalize(name, a, cfg); break;
        case OPT_AUGMENT: {
            static const char *const aug[] = {"none", "crop+flip", "crop", "flip", NULL};
            rc = index_of(name, a, aug, &cfg->augment);   /* the order of enum cdl_augment */
            break;
        }
        case OPT_VAL_SPLIT: {
            float f;
            rc = parse_float(name, a, 0, 1e9, &f);
            if (rc == 0 && f >= 1 && f != (float)(long)f)
                rc = bad(name, a, "expected a fraction below 1 or a whole number of samples");
            cfg->val_split = f;
            break;
        }
        case OPT_INIT: rc = copy_str(name, a, cfg->init, sizeof cfg->init); break;
        case OPT_STAGE: rc = copy_str(name, a, cfg->stage, sizeof cfg->stage); break;
        case OPT_INIT_IGNORE:
            rc = copy_str(name, a, cfg->init_ignore, sizeof cfg->init_ignore);
            break;
        case OPT_PROGRESS: cfg->progress = 1; break;
        case OPT_NO_PROGRESS: cfg->progress = 0; break;
        case 'q': cfg->quiet = 1; break;
        case OPT_SUMMARY: cfg->summary = 1; break;
        case 'h': usage(stdout); return 1;
        case OPT_VERSION:
            /* The contract version is what must match the site's plugin
             * (docs/admin.md); a libcdl.so other than the one this
             * program was built with (LD_LIBRARY_PATH) is named. */
            printf("cdl-train (cdl) %s (rank contract %d)\n", CDL_VERSION_STRING,
                   CDL_CONTRACT_VERSION);
            if (strcmp(cdl_version(), CDL_VERSION_STRING) != 0)
                printf("libcdl %s (this cdl-train was built with %s)\n", cdl_version(),
                       CDL_VERSION_STRING);
            if (*cdl_build_id())   /* two builds of one version differ here */
                printf("libcdl build %s\n", cdl_build_id());
            printf("OpenBLAS kernels: %s\n", cdl_blas_core());
            return 1;
        case ':':
            fprintf(stderr, "cdl-train: option '%.80s%s' needs a value (see cdl-train --help)\n",
                    argv[optind - 1], ell(argv[optind - 1]));
            return -1;
        default: {
            /* PyTorch's spellings, and the nearest option to a typo. */
            static const char *const aliases[] = {
                "lr-scheduler", "--schedule", "scheduler", "--schedule",
                "num-workers", "--workers", "num-epochs", "--epochs", "max-epochs", "--epochs",
                NULL};
            const char *known[sizeof long_opts / sizeof *long_opts];
            for (size_t i = 0; i < sizeof long_opts / sizeof *long_opts; i++)
                known[i] = long_opts[i].name;
            char hint[96];
            suggest_option(argv[optind - 1], known, aliases, hint, sizeof hint);
            fprintf(stderr, "cdl-train: unknown option '%.80s%s'%s (see cdl-train --help)\n",
                    argv[optind - 1], ell(argv[optind - 1]), hint);
            return -1;
        }
        }
    }
    if (rc == 0 && optind < argc) {
        fprintf(stderr, "cdl-train: unexpected argument '%.80s%s' (see cdl-train --help)\n",
                argv[optind], ell(argv[optind]));
        return -1;
    }
    if (rc == 0 && misfit_reader_option(cfg))
        return -1;
    /* An option the run would not use is refused, not ignored: Adam with
     * --momentum 0.95 (its beta1 stays 0.9), a --step-epochs without
     * --schedule step (the default cosine runs). */
    if (rc == 0 && cfg->optim.kind != CDL_OPTIM_SGD && sgd_only) {
        fprintf(stderr, "cdl-train: --%s applies to --optimizer sgd only (it is %s%s)\n",
                sgd_only, cdl_optim_kind_name(cfg->optim.kind),
                mom_given ? ": Adam's momentum is --beta1" : "");
        return -1;
    }
    if (rc == 0 && cfg->optim.kind == CDL_OPTIM_SGD && adam_only) {
        fprintf(stderr, "cdl-train: --%s applies to --optimizer adam and adamw only (it is "
                "sgd: add --optimizer adam or adamw, or drop --%s)\n", adam_only, adam_only);
        return -1;
    }
    if (rc == 0 && cfg->schedule != CDL_SCHED_STEP && step_epochs) {
        fprintf(stderr, "cdl-train: --step-epochs %s applies to --schedule step only (it is "
                "--schedule %s): add --schedule step, or drop --step-epochs\n", step_epochs,
                cdl_sched_kind_name(cfg->schedule));
        return -1;
    }
    /* Adam's step is lr itself whatever the gradient's scale, so SGD's 0.05
     * diverges it; PyTorch's default for both Adams is 1e-3. */
    if (rc == 0 && !lr_given && cfg->optim.kind != CDL_OPTIM_SGD)
        cfg->lr = 1e-3f;
    return rc;
}

/* A peer rank was lost (its process or node died, or it stopped
 * answering): not this run's own error, so a restart from the last
 * checkpoint can go on. Its own status, so that job scripts requeue this
 * and not a bad option or input, which a restart would only repeat. */
static int lost_peer(const cdl_train_config *cfg)
{
    const char *r = own_rank();
    if (!r || !strcmp(r, "0")) {   /* once, not from every surviving rank */
        char me[48];
        fprintf(stderr, "%s: a rank of this run was lost (its process or node died, or it "
                "stopped answering): exit status %d; ", who(me, sizeof me), CDL_EXIT_PEER_LOST);
        if (cfg->ckpt_dir[0])
            fprintf(stderr, "start the run again with --resume auto to continue from the last "
                    "checkpoint in %.900s (the requeue templates do)\n", cfg->ckpt_dir);
        else
            fprintf(stderr, "without --ckpt-dir it has no checkpoint to continue from\n");
    }
    return CDL_EXIT_PEER_LOST;
}

/* SIGUSR1/SIGTERM blocked (stay pending) or unblocked in this thread. */
static void hold_stop_signals(int how)
{
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    sigaddset(&s, SIGTERM);
    sigprocmask(how, &s, NULL);
}

int main(int argc, char **argv)
{
    /* A job signalled as it starts (its --signal=B:USR1@T lead longer than
     * its time, scancel at once): the default action killed this process
     * (status 138, no requeue), and a signal its launcher kept blocked was
     * never seen. Held pending across the re-exec for the BLAS core, then
     * taken by cdl_train_run's handler from here on: the run stops at its
     * set-up with status 75, as a signal during set-up does. */
    hold_stop_signals(SIG_BLOCK);
    cli_fix_blas_core(argv);
    if (cli_check_libcdl("cdl-train", argv) != 0)
        return 2;
    cdl_train_signals_early();
    hold_stop_signals(SIG_UNBLOCK);
    cdl_train_config cfg;
    cdl_train_defaults(&cfg);
    if (read_env(&cfg) != 0)
        return 2;
    int p = parse_args(argc, argv, &cfg);
    if (p <= 0)
        warn_cpus(cfg.threads, cfg.device);
    if (p != 0)
        return p > 0 ? 0 : 2;
    cdl_train_result res;
    int rc = cdl_train_run(&cfg, &res);
    if (rc == CDL_EXIT_REQUEUE)
        return CDL_EXIT_REQUEUE;
    if (rc != 0) {
        char me[48];
        fprintf(stderr, "%s: error: %s\n", who(me, sizeof me), without_own_rank(cdl_last_error()));
        return cdl_dist_peer_lost() ? lost_peer(&cfg) : 1;
    }
    return 0;
}
