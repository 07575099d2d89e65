/* The train/validate harness behind cdl-train: model, data, optimizer,
 * schedule, checkpoint-restart and data parallelism wired together. */
#ifndef CDL_TRAIN_H
#define CDL_TRAIN_H

#include <stdint.h>

#include <cdl/backend.h>
#include <cdl/ckpt.h>
#include <cdl/dist.h>
#include <cdl/model.h>
#include <cdl/optim.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exit status after a checkpoint written on SIGUSR1/SIGTERM: the job can be
 * requeued and resumed with --resume auto. */
#define CDL_EXIT_REQUEUE 75
/* Exit status of cdl-train when a peer rank was lost (its process or node
 * died, or it stopped answering; cdl_dist_peer_lost): nothing was written
 * since the last checkpoint, which --resume auto continues from. Distinct
 * from 1 (an error of this run, which a restart repeats) so that job
 * scripts requeue only this. */
#define CDL_EXIT_PEER_LOST 76
/* What cdl_train_run returns when the program's should_stop asked it to
 * stop (cdl_train_config, below): after a checkpoint where ckpt_dir is
 * set, and with nothing saved, not an error, where it is not. Not an exit
 * status of cdl-train, which never asks. */
#define CDL_TRAIN_STOPPED 2

struct cdl_train_record;   /* on_record's argument, below */

typedef struct cdl_train_config {
    size_t size;              /* sizeof(cdl_train_config): set by cdl_train_defaults, so a
                               * libcdl with more fields reads only those a caller knows */
    char model[256];          /* "lenet", "mlp" or a spec file path */
    char dataset[32];         /* "fashion-mnist", "mnist", "cifar10", "synthetic" or a format
                               * of CDL_DATASET_FORMATS (data_dir: its folder or file; text
                               * and tokens: token windows, docs/data.md) */
    char data_dir[1024];      /* "" = the dataset's default */
    int epochs;
    int batch_size;           /* per rank */
    float lr;                 /* base learning rate: 0.05 from cdl_train_defaults(), for
                               * its SGD; set it (e.g. 1e-3) with an Adam in optim */
    cdl_optim_config optim;
    cdl_sched_kind schedule;
    int step_epochs;          /* step schedule: decay every step_epochs (gamma 0.1) */
    int warmup_epochs;        /* linear warm-up (or warmup_steps, below) */
    int threads;              /* 0 = cdl_default_threads(), divided among the
                               * node's ranks when their CPUs overlap */
    int workers;              /* data loader threads */
    uint64_t seed;
    char ckpt_dir[1024];      /* "" = no checkpoints */
    char resume[1024];        /* "auto", "never" or a checkpoint path */
    char resume_allow[256];   /* settings a resume may change, e.g. "epochs,lr" */
    long ckpt_every;          /* also checkpoint every N steps (0 = per epoch only) */
    char metrics[1024];       /* "" = none; else JSON lines (docs/metrics.md) */
    long max_steps;           /* stop after this many steps in total (0 = no limit) */
    int drop_last;
    char device[16];          /* "cpu", "cuda", "auto" (the default: cuda when a GPU is visible) */
    char dist_backend[16];    /* "auto" (the default), a backend of cdl_dist_create, or
                               * "single": this process trains alone, even as one task of
                               * a job whose environment makes it rank K of N (each task of
                               * a simulation training a model of its own) */
    int synthetic_n;          /* synthetic dataset size */
    int progress;             /* -1 auto (terminal), 0 plain lines, 1 bar */
    int quiet;                /* 1: nothing printed but errors and warnings (rank 0's
                               * warnings of likely mistakes: a job of many tasks
                               * training alone, max_steps past the run's end) */
    /* Called after every optimizer step with the number of steps done (for
     * custom logging, or to test signal handling at an exact step). */
    void (*on_step)(void *ctx, long steps);
    void *on_step_ctx;
    /* Whole training steps as CUDA graphs on a GPU: 1 on, -1 off, 0 (the
     * default) on. One rank only: data-parallel steps run eagerly
     * (docs/cuda.md). cdl-train sets it from --cuda-graphs or
     * CDL_CUDA_GRAPHS=on|off. */
    int cuda_graphs;
    /* Gradient bucket size of data-parallel runs in KiB (0 = 25 MiB, like
     * PyTorch's DDP); small buckets are for tuning and tests. cdl-train
     * sets it from CDL_DDP_BUCKET_KB. */
    long ddp_bucket_kb;
    /* TF32 tensor-core math on GPUs (cdl_backend_params): 1 on, 0 off, -1
     * (the default) PyTorch's: on for convolutions, off for linear layers. */
    int tf32_conv, tf32_matmul;
    /* Run on this backend (kept: the caller destroys it) instead of making
     * one from device, threads and tf32; NULL (the default) makes one. */
    cdl_backend *backend;
    /* Settings of the collectives (kept: the caller owns it); NULL (the
     * default) = cdl_dist_config_init's. cdl-train reads them from
     * CDL_TIMEOUT and CDL_SHM_* (cdl_dist_config_from_env). */
    const cdl_dist_config *dist_config;
    /* What the GPU backend logs (cdl_backend_params.log; kept, not
     * copied): cdl-train sets it from CDL_LOG. NULL = nothing. */
    const char *log;
    /* --metrics-every: also a "step" record in the metrics file every N
     * optimizer steps (0, the default: epoch records only). */
    long metrics_every;
    /* Data (docs/data.md): the augmentation (enum cdl_augment; -1, the
     * default, = crop+flip for cifar10, else none), and what
     * cdl_dataset_options says for the formats of CDL_DATASET_FORMATS. */
    int augment;
    int image_size;           /* --image-size (0: the first picture's size) */
    int image_channels;       /* --channels 1|3 (0: from the first picture) */
    int skip_bad_files;       /* --skip-bad-files */
    char label_column[128];   /* --label-column ("" = "label", else the last column) */
    int normalize;            /* enum cdl_normalize (--normalize) */
    int norm_count;           /* CDL_NORMALIZE_GIVEN: values in norm_mean and norm_std */
    float norm_mean[16], norm_std[16];
    /* Validation samples carved from the training set with seed (--val-split;
     * docs/training.md): -1 (the default) the dataset's default (5,000 for
     * MNIST and Fashion-MNIST, 10% otherwise), 0 none (validate on the
     * test set), a fraction in (0,1) or a count >= 1. */
    double val_split;
    /* Start from these weights (--init: a cdl checkpoint or a safetensors
     * file with the model's tensor names and shapes); "" = fresh ones.
     * Tensors whose names match the glob init_ignore keep their fresh
     * initialisation (a replaced head). */
    char init[1024];
    char init_ignore[256];
    float label_smoothing;    /* --label-smoothing: cross-entropy's, PyTorch's (0 = none) */
    /* --stage (docs/training.md): "" or "off" read the data where it is;
     * "auto" copies it once per node to $SLURM_TMPDIR (else $TMPDIR) when
     * it is on a network file system; a directory: copy it there (kept). */
    char stage[1024];
    /* --tensorboard: rank 0 writes TensorBoard event files into this
     * directory ("" = none; docs/metrics.md). */
    char tensorboard[1024];
    /* Large-model training (docs/training.md, "Gradient clipping,
     * accumulation, weight decay groups"). --clip-grad: scale the averaged
     * gradient to at most this global L2 norm, PyTorch's clip_grad_norm_
     * (0 = off). */
    float clip_grad;
    /* --accum-steps: micro-batches of batch_size summed into each optimizer
     * step (0 or 1 = none): one step sees batch_size * accum_steps samples
     * per rank, and ranks exchange gradients at its last micro-batch only. */
    int accum_steps;
    /* --decay-params (enum cdl_decay_params): which parameters get weight
     * decay. */
    int decay_params;
    /* --eval-every: also validate every N optimizer steps (0 = per epoch). */
    long eval_every;
    /* --peak-tflops: the device's peak for MFU (0 = known GPUs by name,
     * else MFU is not reported). */
    double peak_tflops;
    /* --shard-optimizer: ZeRO-1 over the data-parallel ranks, each holding
     * the optimizer state of 1/world of the parameters (docs/data-parallel.md);
     * the numbers are the unsharded run's, bit for bit. */
    int shard_optimizer;
    /* Token data (text:FILE, tokens:DIR; docs/data.md): tokens per sample,
     * T (--block-size; 0 = the model's block size, else 64), and the
     * vocabulary of tokens:DIR (--vocab-size; 0 = 50257, GPT-2's). */
    int block_size;
    int vocab_size;
    /* --precision: cdl_precision of the backend's matrix products
     * (cdl_backend_params.precision): FP32 (0, the default) or BF16 (GPUs). */
    int precision;
    /* --decode auto|memory|stream: how an image folder's pictures are
     * decoded (enum cdl_decode; docs/data.md). */
    int image_decode;
    /* The schedule in optimizer steps, for runs measured in steps rather
     * than epochs (language models: nanoGPT's warmup_iters and
     * lr_decay_iters). warmup_steps: linear warm-up over this many steps
     * instead of warmup_epochs' (0 = warmup_epochs decides; setting both is
     * an error). decay_steps: the cosine reaches 0 at this step and stays
     * there (0 = at the end of the last epoch). max_steps stops a run
     * without changing its schedule, so a run stopped early and resumed is
     * the run that was never stopped. */
    long warmup_steps;
    long decay_steps;
    /* Called on rank 0 with every record --metrics writes (a step record
     * every metrics_every steps, eval, epoch and test records), whether or
     * not `metrics` names a file: a program's own logging or early look at
     * the numbers without parsing JSON. See cdl_train_record. */
    void (*on_record)(void *ctx, const struct cdl_train_record *rec);
    void *on_record_ctx;
    /* --summary: build the model for the data, print its layers (names,
     * output shapes, parameters; cdl_model_print) on rank 0's stdout and
     * return 0 without training or writing anything. */
    int summary;
    /* --min-lr: where the cosine schedule ends and stays (CosineAnnealingLR's
     * eta_min, nanoGPT's min_lr; its configs use a tenth of lr), in
     * [0, lr]; 0 (the default) decays to 0. Cosine only. */
    float min_lr;
    /* Every line the run prints itself goes here instead, one call per line
     * (without its newline), on the thread that called cdl_train_run,
     * with level enum cdl_log_level: the epoch, eval and test lines (else
     * on stdout), notes and warnings (else on stderr), and the lines of
     * what it calls on that thread (rank 0's rank discovery and
     * collectives, the OpenBLAS advice). Nothing is then printed, and
     * there is no progress bar; quiet still silences CDL_LOG_INFO.
     * --summary's table still goes to stdout. The line is libcdl's until
     * the call returns. NULL (the default): printed as described. */
    void (*on_log)(void *ctx, int level, const char *line);
    void *on_log_ctx;
    /* --keep-last N, --keep-every N (docs/checkpoints.md, "Keeping older
     * checkpoints"): each checkpoint of last.safetensors also stays as
     * ckpt_dir/step-NNNNNNNN.safetensors (a hard link: no extra space
     * while it is last's file), those of steps that are multiples of
     * keep_every for good, the keep_last newest of the others; rank 0
     * removes older ones after each checkpoint. 0 and 0 (the defaults):
     * only last and best, as before. */
    long keep_last;
    long keep_every;
    /* Stops this run alone (early stopping, a cancel button, one of several
     * runs in threads), where SIGTERM stops every run of the process.
     * Polled on each rank, on the thread that called cdl_train_run, once
     * per optimizer step and once or twice before the first (during
     * set-up: after staging the data, after loading it); once it returns nonzero
     * the run stops as at a signal: every rank at the same step (any
     * rank's yes stops all), the checkpoint of that step written when
     * ckpt_dir is set (resume "auto" goes on from it), no test pass. The
     * run then returns CDL_TRAIN_STOPPED, with or without ckpt_dir, and
     * res->interrupted is 2. A signal at the same step wins (its stop and
     * status). NULL (the default): never asked. */
    int (*should_stop)(void *ctx);
    void *should_stop_ctx;
    /* --jpeg-decode full: an image folder's JPEGs decoded whole, then
     * resized, as PIL does (cdl_dataset_options.jpeg_full), for weights
     * PyTorch trained, fine-tuned on PyTorch's pixels; 0 (scaled): at the
     * smallest DCT scale covering the sample. Stored in the checkpoint
     * (jpeg_decode), which cdl-eval and cdl-predict then follow. */
    int jpeg_full;
    /* --fast-conv on: the backend's faster convolution algorithms with
     * more rounding error (cdl_backend_params.fast_conv: Winograd F(4x4)
     * on AVX2 CPUs and Zen 4); 0 (the default) or any other value: off. It sits in
     * what was the struct's padding, which cdl_train_defaults zeroes. */
    int fast_conv;
} cdl_train_config;

/* on_log's levels. */
enum cdl_log_level {
    CDL_LOG_INFO = 1,         /* what quiet = 1 silences: epoch lines, notes */
    CDL_LOG_WARNING = 2       /* likely mistakes and failures the run survives */
};

/* The kinds of record (docs/metrics.md's "type"). */
enum cdl_record_type { CDL_RECORD_STEP = 1, CDL_RECORD_EVAL, CDL_RECORD_EPOCH, CDL_RECORD_TEST };

/* One record as on_record receives it. libcdl owns it: read it during the
 * call, and only fields that end within `size` (a later libcdl may add
 * fields at the end; a program built against this header reads these). */
typedef struct cdl_train_record {
    size_t size;              /* sizeof(cdl_train_record) of the libcdl that filled it */
    enum cdl_record_type type;
    int epoch;                /* 1-based; 0 in the test record */
    long step;                /* optimizer steps done */
    double loss, acc;         /* step: training samples since the last step record;
                                 epoch: the epoch's training mean; eval, test: the
                                 validation or test samples */
    double val_loss, val_acc; /* epoch: validation; NAN in the other records */
    double lr;                /* step, epoch: the learning rate; NAN otherwise */
    double samples_per_sec;   /* step, epoch: all ranks; 0 otherwise */
    double tokens_per_sec;    /* sequence models' step and epoch records (else 0) */
    double mfu;               /* model FLOPs utilisation; NAN = n/a */
    double grad_norm;         /* step records: the L2 norm where taken (as in
                                 --metrics' "grad_norm"; also NaN or inf at a step
                                 where training diverged); NAN otherwise: tell the
                                 two NaNs apart by grad_norm_taken */
    double seconds;           /* epoch: its wall time; 0 otherwise */
    long samples;             /* test: samples evaluated; 0 otherwise */
    /* 1 where grad_norm is the step's norm, whatever its value (a NaN or
     * inf then means the gradient overflowed: training diverged), 0 where
     * none was taken (grad_norm NAN: other records, steps with no
     * --clip-grad under data-parallel overlap). Added after the fields
     * above: read it only when size > offsetof(cdl_train_record,
     * grad_norm_taken) (an older libcdl's records end before it). */
    int grad_norm_taken;
} cdl_train_record;

/* --decay-params: AUTO is 2D for models with sequence layers (the gpt
 * built-in, like nanoGPT's groups), ALL otherwise (PyTorch's one group);
 * 2D decays only parameters of 2 or more dimensions (not biases, norms). */
enum cdl_decay_params { CDL_DECAY_AUTO = 0, CDL_DECAY_ALL, CDL_DECAY_2D };

/* The defaults of cdl-train: lenet on fashion-mnist, 10 epochs, batch 64,
 * SGD lr 0.05 momentum 0.9, weight decay 5e-4, cosine schedule. Every
 * config starts here (it sets size). */
void cdl_train_defaults(cdl_train_config *cfg);
/* cdl_train_defaults(cfg) passes the size of the struct this program was
 * compiled with, so that libcdl writes no more than that, and a libcdl
 * older than these headers refuses the config (cdl_train_run: -1) instead
 * of ignoring the fields it lacks. The plain function is for programs
 * built before this macro (docs/api.md, "Programs and libcdl releases"). */
void cdl_train_defaults_sized(cdl_train_config *cfg, size_t size);
#define cdl_train_defaults(cfg) cdl_train_defaults_sized((cfg), sizeof *(cfg))

/* Result of a run. */
typedef struct cdl_train_result {
    int epochs_done;
    long steps;
    double final_val_acc, final_val_loss, best_val_loss;
    int interrupted;          /* 1 when stopped by a signal (or a failed --metrics
                               * record), 2 when should_stop asked */
} cdl_train_result;

/* Runs training. Returns 0, -1 on error (cdl_last_error: cdl-train's
 * message, naming options: --batch-size is batch_size, --optimizer
 * optim.kind, and the comments above name the others), or
 * CDL_EXIT_REQUEUE when interrupted by SIGUSR1/SIGTERM after a checkpoint
 * (with no ckpt_dir such a stop returns -1: nothing could be resumed), or
 * CDL_TRAIN_STOPPED when cfg->should_stop asked (with or without ckpt_dir).
 * After a -1, cdl_dist_peer_lost() is 1 when the cause was a lost peer
 * rank, worth a restart from the last checkpoint (cdl-train then exits
 * CDL_EXIT_PEER_LOST), and 0 for an error a restart would repeat.
 * It handles SIGUSR1 and SIGTERM while it runs and gives the caller's
 * handlers back when it returns. Runs in several threads at once (own
 * configs and directories) each get what they get alone; the caller's
 * handlers are back when the last returns, and a signal stops them all
 * (should_stop stops one). A child fork()ed while a run is in another
 * thread starts with the caller's handlers back, and its own runs
 * install and give them back as in any process.
 * res may be NULL. */
int cdl_train_run(const cdl_train_config *cfg, cdl_train_result *res);

/* Installs cdl_train_run's SIGUSR1/SIGTERM handler now, for a program that
 * may be signalled before it calls cdl_train_run (a Slurm job signalled as
 * it starts: its --signal lead longer than the time it has, an early
 * scancel), where the default action would kill it, or a blocked signal
 * be lost. Call it first in main, then unblock SIGUSR1 and SIGTERM: a
 * signal from then on stops the next cdl_train_run at its set-up, before
 * the first step (CDL_EXIT_REQUEUE with a ckpt_dir, as a signal during its
 * set-up does). That run gives the program's handlers back when it
 * returns. A no-op while a run is in progress or after a first call. */
void cdl_train_signals_early(void);

/* Loads the tensors of the safetensors file path (a cdl checkpoint or one
 * PyTorch wrote) into m's parameters and buffers (batchnorm2d's running
 * statistics), by name: every tensor of the model
 * must be in the file with the same shape, and every tensor of the file in
 * the model (a cdl training checkpoint's optimizer.* tensors are skipped),
 * except those whose names match the glob `ignore` (NULL or ""
 * = none), which keep their values. Errors name the file and the tensor. */
int cdl_model_load_weights(cdl_model *m, const char *path, const char *ignore);

/* Whether this libcdl reads the checkpoint f (from cdl_st_open): 0 for a
 * cdl checkpoint in a format it reads, and for any other safetensors file
 * (PyTorch's weights); -1, with cdl_last_error() naming the file, its
 * format, the cdl release that wrote it and the newest format this one
 * reads, for a checkpoint of a newer cdl, whose metadata and tensors this
 * release cannot interpret. cdl_train_run's resume and --init, and
 * cdl_model_load_weights check it themselves; a program that reads a
 * checkpoint's metadata (model, input_shape, ...) checks it first. */
int cdl_ckpt_check_format(const cdl_st_file *f);

/* Writes m's parameters and buffers to the safetensors file path
 * (atomically, with checksums), under PyTorch's names and layouts: what
 * cdl_model_load_weights reads back, and what the equivalent torch.nn
 * model loads with load_state_dict(strict=True) (num_batches_tracked as
 * I64, a tied weight under both names). No optimizer state: training
 * checkpoints that resume are cdl_train_run's. */
int cdl_model_save_weights(cdl_model *m, const char *path);

#ifdef __cplusplus
}
#endif
#endif
