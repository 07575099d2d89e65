/* Model FLOPs utilisation (mfu.h). The peaks are the vendors' dense
 * (no sparsity) bf16 tensor-core figures, the denominator PaLM's MFU and
 * nanoGPT's estimate_mfu use; a run in fp32 therefore shows a low MFU,
 * which is the point: it leaves the tensor cores idle. --peak-tflops
 * overrides the table (a CPU, or a GPU it does not know). */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "mfu.h"
#include "run.h"

double train_flops_per_token(double params, double attn_ct_sum)
{
    return 6.0 * params + 12.0 * attn_ct_sum;
}

/* Most specific names first: "H100 PCIe" before "H100". */
static const struct {
    const char *name;
    double tflops;
} peaks[] = {
    {"GH200", 989.4},   {"H200", 989.4},    {"H100 PCIe", 756.0}, {"H100 NVL", 835.0},
    {"H100", 989.4},    {"H800", 989.4},    {"B200", 2250.0},     {"A100", 312.0},
    {"A800", 312.0},    {"A30", 165.0},     {"A40", 149.7},       {"A10G", 70.0},
    {"A10", 125.0},     {"L40S", 362.0},    {"L40", 181.0},       {"L4", 121.0},
    {"RTX 6000 Ada", 364.2}, {"RTX A6000", 154.8}, {"RTX 4090", 165.2},
    {"RTX 3090", 71.0}, {"V100", 125.0},    {"T4", 65.0},
};

double train_gpu_peak_tflops(const char *name)
{
    if (!name)
        return 0;
    for (size_t i = 0; i < sizeof peaks / sizeof peaks[0]; i++) {
        /* A word of the name: "L4" must not match "L40S". */
        size_t n = strlen(peaks[i].name);
        for (const char *p = name; *p; p++) {
            if (strncasecmp(p, peaks[i].name, n) != 0)
                continue;
            char before = p > name ? p[-1] : ' ', after = p[n];
            int word = (before == ' ' || before == '-') &&
                       (after == '\0' || after == ' ' || after == '-');
            if (word)
                return peaks[i].tflops;
        }
    }
    return 0;
}

/* The FLOPs-per-token inputs of the model: parameters without learned
 * position embeddings, and the sum of C * T over attention layers. */
static void model_flops_inputs(const cdl_model *m, double *params, double *attn_ct)
{
    *params = (double)cdl_model_nparams(m);
    *attn_ct = 0;
    const cdl_model_spec *spec = cdl_model_get_spec(m);
    cdl_shape *shapes = cdl_calloc((size_t)spec->nlayers + 1, sizeof *shapes);
    if (!shapes || cdl_spec_infer(spec, cdl_model_input(m), shapes) != 0) {
        cdl_free(shapes);   /* the model was built from it: not expected */
        return;
    }
    for (int i = 0; i < spec->nlayers; i++) {
        const cdl_shape *out = &shapes[i + 1];   /* shapes[0] is the input */
        if (spec->layers[i].kind == CDL_LAYER_ATTENTION)
            *attn_ct += (double)out->c * out->w;   /* T positions of C features */
        else if (spec->layers[i].kind == CDL_LAYER_POSEMBEDDING)
            *params -= (double)spec->layers[i].block * out->w;
    }
    cdl_free(shapes);
}

void train_speed_setup(run *r)
{
    double params, attn_ct;
    model_flops_inputs(r->model, &params, &attn_ct);
    r->flops_per_token = r->positions > 1 ? train_flops_per_token(params, attn_ct) : 0;
    const char *dev = cdl_backend_device_name(r->be);
    r->peak_tflops = r->cfg->peak_tflops > 0 ? r->cfg->peak_tflops : train_gpu_peak_tflops(dev);
    if (r->positions <= 1) {
        /* Said, not silently ignored: the user asked for an MFU. */
        if (r->cfg->peak_tflops > 0)
            train_report_note(r->rep, "--peak-tflops: no MFU for %s: the FLOPs are counted for "
                              "sequence models (a language model) only", r->cfg->model);
        return;
    }
    if (r->peak_tflops > 0)
        train_report_note(r->rep, "MFU: %.3g GFLOP per token (6 x %.0f parameters + attention) "
                          "against %g TFLOP/s per device (%s)", r->flops_per_token / 1e9, params,
                          r->peak_tflops, r->cfg->peak_tflops > 0 ? "--peak-tflops" : dev);
    else if (dev)
        train_report_note(r->rep, "MFU n/a: %s is not in the table of GPU peaks; give "
                          "--peak-tflops", dev);
    else   /* no table of CPUs: their peaks depend on cores, clock and vector width */
        train_report_note(r->rep, "MFU n/a on the CPU: --peak-tflops X, the CPU's peak "
                          "TFLOP/s, reports one");
}

void train_speed(const run *r, double rows_per_sec, double *samples_per_sec,
                 double *tokens_per_sec, double *mfu)
{
    int t = r->positions > 1 ? r->positions : 1;
    /* Per GPU, not per rank: MPS-packed replicas (CDL_REPLICAS_PER_GPU)
     * share one, and counted as devices they halved (quartered...) it. */
    int per = r->ri.replicas_per_gpu > 1 ? r->ri.replicas_per_gpu : 1;
    int devices = (r->ri.world + per - 1) / per;
    *samples_per_sec = rows_per_sec / t;
    *tokens_per_sec = t > 1 ? rows_per_sec : 0;
    *mfu = t > 1 ? train_mfu(r->flops_per_token, rows_per_sec, devices, r->peak_tflops) : NAN;
}

double train_mfu(double flops_per_token, double tokens_per_sec, int devices, double peak_tflops)
{
    if (!(flops_per_token > 0) || !(peak_tflops > 0) || devices < 1 || !(tokens_per_sec >= 0))
        return NAN;
    return flops_per_token * tokens_per_sec / devices / (peak_tflops * 1e12);
}
