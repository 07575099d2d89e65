/* Tokens per second and model FLOPs utilisation (mfu.c) for the epoch and
 * step reports of sequence models. */
#ifndef CDL_TRAIN_MFU_H
#define CDL_TRAIN_MFU_H

#include <cdl/cdl.h>

/* Training FLOPs per token (forward and backward), nanoGPT's and PaLM's
 * estimate: 6 per parameter (params: every parameter except learned
 * position embeddings, tied weights once) plus, per attention layer of
 * width C over T positions, 12 * C * T for the score and value products. */
double train_flops_per_token(double params, double attn_ct_sum);

/* Dense bf16 tensor-core peak TFLOP/s (fp16 where a GPU has no bf16) of a
 * GPU by its product name; 0 when the name is not in the table. */
double train_gpu_peak_tflops(const char *name);

/* MFU in [0, 1]: achieved FLOP/s per device over the peak; NAN ("n/a")
 * when the FLOPs or the peak are unknown (0). */
double train_mfu(double flops_per_token, double tokens_per_sec, int devices, double peak_tflops);

/* From rows per second (the labels the metrics count, all ranks: samples,
 * or a sequence model's labelled tokens): samples/s, tokens/s (0 unless
 * r->positions > 1) and MFU (NAN = n/a) over the GPUs (ranks /
 * r->ri.replicas_per_gpu). */
struct run;
/* r->positions, r->flops_per_token and r->peak_tflops of the run's model
 * and device (--peak-tflops, else the GPU table); a note says which peak
 * MFU uses, or why it is n/a. */
void train_speed_setup(struct run *r);
void train_speed(const struct run *r, double rows_per_sec, double *samples_per_sec,
                 double *tokens_per_sec, double *mfu);

#endif
