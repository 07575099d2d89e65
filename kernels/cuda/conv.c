/* 2-D convolution with cuDNN: x is (n,c,h,w), w is (oc,c/groups,kh,kw), b is
 * (oc), y is (n,oc,oh,ow), cross-correlation like torch.nn.Conv2d, with
 * per-axis stride, padding and dilation and grouped (depthwise) filters.
 *
 * Each shape gets a plan once (descriptors and an algorithm per direction),
 * kept in a small cache, so a steady-state step creates nothing. Algorithms
 * come from cuDNN's heuristics (cudnnGet*Algorithm_v7, not Find: timing
 * based choices vary run to run); only deterministic ones are taken, as
 * backend.h promises reproducible results, the first in cuDNN's order whose
 * workspace fits. Math: for FP32 data CUDNN_TENSOR_OP_MATH and
 * CUDNN_DEFAULT_MATH mean TF32 tensor cores are allowed (on sm_80 and
 * later), so with TF32 on (PyTorch's default for convolutions) algorithms
 * with either are taken, each run in the math cuDNN listed it with; with
 * TF32 off every algorithm runs in CUDNN_FMA_MATH (strict FP32), and the
 * transform-based ones (FFT, FFT_TILING, WINOGRAD_NONFUSED) are left out:
 * their FP32 error is of TF32's size, not strict FP32's (on an H200, with
 * them allowed, two 5x5 filter gradients were 9e-4 and 2.9e-3 off,
 * normalized, where every other shape was within 1e-6). Only
 * CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION converts to half precision: never
 * taken. CDL_LOG=cudnn prints each plan's choice per direction once.
 *
 * Workspace: conv2d_workspace reports the largest of the three algorithms'
 * needs in floats; the caller passes a buffer at least that large as ws,
 * allocated with this backend's alloc. The real room of ws (to the end of
 * its allocation, memory.c) is what cuDNN is given and what a plan must fit:
 * two models sharing this backend have buffers of different sizes, and a
 * shape first seen mid-run (e.g. a last, partial batch) is planned for the
 * buffer it arrives with, so a plan made for a larger buffer is never used
 * with a smaller one. The bias add and bias gradient are our kernels
 * (bias.cu), the gradient in a fixed order.
 */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/impl.h"

/* The most workspace one convolution may take when it is planned through
 * conv2d_workspace (FFT algorithms can ask for gigabytes). */
#define CONV_WS_CAP ((size_t)256 << 20)

static void plan_release(conv_plan *p)
{
    if (p->x)
        (void)cudnnDestroyTensorDescriptor(p->x);
    if (p->y)
        (void)cudnnDestroyTensorDescriptor(p->y);
    if (p->w)
        (void)cudnnDestroyFilterDescriptor(p->w);
    if (p->fwd_conv)
        (void)cudnnDestroyConvolutionDescriptor(p->fwd_conv);
    if (p->bwd_data_conv)
        (void)cudnnDestroyConvolutionDescriptor(p->bwd_data_conv);
    if (p->bwd_filter_conv)
        (void)cudnnDestroyConvolutionDescriptor(p->bwd_filter_conv);
    memset(p, 0, sizeof *p);
}

void cbe_conv_cache_clear(cbe *ci)
{
    for (int i = 0; i < ci->nplans; i++)
        plan_release(&ci->plans[i]);
    ci->nplans = 0;
}

static void desc_str(const cdl_conv2d_desc *d, char *buf, size_t len)
{
    snprintf(buf, len,
             "conv2d x (%d,%d,%d,%d) w (%d,%d,%d,%d) stride %dx%d pad %dx%d dilation %dx%d "
             "groups %d -> (%d,%d)", d->n, d->c, d->h, d->w, d->oc,
             d->groups > 0 ? d->c / d->groups : d->c, d->kh, d->kw, d->stride_h, d->stride_w,
             d->pad_h, d->pad_w, d->dil_h, d->dil_w, d->groups, d->oh, d->ow);
}

/* Whether an algorithm cuDNN lists with math m may be taken. Strict FP32
 * runs FMA or DEFAULT algorithms in FMA math; TF32 also takes tensor-op
 * ones (TF32 for float data). Half-precision conversion: never. */
static int math_ok(const conv_plan *p, cudnnMathType_t m)
{
    if (m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH)
        return 1;
    return p->tf32 && m == CUDNN_TENSOR_OP_MATH;
}

/* Whether a transform-based algorithm (FFT, Winograd without fusion) may
 * be taken: with TF32 only, its rounding being of TF32's size. */
static int transform_ok(const conv_plan *p, int is_transform)
{
    return p->tf32 || !is_transform;
}

static cudnnMathType_t math_for(const conv_plan *p, cudnnMathType_t chosen)
{
    return p->tf32 ? chosen : CUDNN_FMA_MATH;
}

static const char *math_name(cudnnMathType_t m)
{
    switch (m) {
    case CUDNN_DEFAULT_MATH: return "DEFAULT_MATH";
    case CUDNN_TENSOR_OP_MATH: return "TENSOR_OP_MATH";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "TENSOR_OP_MATH_ALLOW_CONVERSION";
    case CUDNN_FMA_MATH: return "FMA_MATH";
    default: return "unknown math";
    }
}

static const char *fwd_name(cudnnConvolutionFwdAlgo_t a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "unknown";
    }
}

static const char *bwd_data_name(cudnnConvolutionBwdDataAlgo_t a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return "ALGO_0";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return "ALGO_1";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "unknown";
    }
}

static const char *bwd_filter_name(cudnnConvolutionBwdFilterAlgo_t a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0: return "ALGO_0";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: return "ALGO_1";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3: return "ALGO_3";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING: return "FFT_TILING";
    default: return "unknown";
    }
}

/* One line per direction of a new plan (CDL_LOG=cudnn), on stderr: which
 * algorithm and math type run each layer shape, e.g. to see TF32 is used. */
static void plan_log(const cbe *ci, const conv_plan *p, const char *what)
{
    if (!ci->log_cudnn)
        return;
    fprintf(stderr, "cdl: cudnn: GPU %d: %s (TF32 %s, workspace room %zu bytes):\n"
            "cdl: cudnn:   forward         %-22s %-15s %zu bytes\n"
            "cdl: cudnn:   backward-data   %-22s %-15s %zu bytes\n"
            "cdl: cudnn:   backward-filter %-22s %-15s %zu bytes\n",
            ci->device, what, p->tf32 ? "on" : "off", p->room, fwd_name(p->fwd),
            math_name(p->fwd_math), p->fwd_bytes, bwd_data_name(p->bwd_data),
            math_name(p->bwd_data_math), p->bwd_data_bytes, bwd_filter_name(p->bwd_filter),
            math_name(p->bwd_filter_math), p->bwd_filter_bytes);
}

#define MAX_ALGOS 16

static int choose_fwd(cbe *ci, conv_plan *p, size_t limit)
{
    cudnnConvolutionFwdAlgoPerf_t perf[MAX_ALGOS];
    int got = 0;
    if (CUDNN_CHECK(ci, cudnnSetConvolutionMathType(p->fwd_conv, math_for(p, CUDNN_DEFAULT_MATH))) ||
        CUDNN_CHECK(ci, cudnnGetConvolutionForwardAlgorithm_v7(ci->dnn, p->x, p->w, p->fwd_conv,
                                                               p->y, MAX_ALGOS, &got, perf)))
        return -1;
    for (int i = 0; i < got; i++) {
        size_t bytes = 0;
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC ||
            !math_ok(p, perf[i].mathType) ||
            !transform_ok(p, perf[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT ||
                                 perf[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
                                 perf[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED))
            continue;
        if (cudnnSetConvolutionMathType(p->fwd_conv, math_for(p, perf[i].mathType)) !=
                CUDNN_STATUS_SUCCESS ||
            cudnnGetConvolutionForwardWorkspaceSize(ci->dnn, p->x, p->w, p->fwd_conv, p->y,
                                                    perf[i].algo, &bytes) != CUDNN_STATUS_SUCCESS ||
            bytes > limit)
            continue;
        p->fwd = perf[i].algo;
        p->fwd_math = math_for(p, perf[i].mathType);
        p->fwd_bytes = bytes;
        return 0;
    }
    return 1;
}

static int choose_bwd_data(cbe *ci, conv_plan *p, size_t limit)
{
    cudnnConvolutionBwdDataAlgoPerf_t perf[MAX_ALGOS];
    int got = 0;
    if (CUDNN_CHECK(ci, cudnnSetConvolutionMathType(p->bwd_data_conv,
                                                    math_for(p, CUDNN_DEFAULT_MATH))) ||
        CUDNN_CHECK(ci, cudnnGetConvolutionBackwardDataAlgorithm_v7(
                            ci->dnn, p->w, p->y, p->bwd_data_conv, p->x, MAX_ALGOS, &got, perf)))
        return -1;
    for (int i = 0; i < got; i++) {
        size_t bytes = 0;
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC ||
            !math_ok(p, perf[i].mathType) ||
            !transform_ok(p, perf[i].algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
                                 perf[i].algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
                                 perf[i].algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED))
            continue;
        if (cudnnSetConvolutionMathType(p->bwd_data_conv, math_for(p, perf[i].mathType)) !=
                CUDNN_STATUS_SUCCESS ||
            cudnnGetConvolutionBackwardDataWorkspaceSize(ci->dnn, p->w, p->y, p->bwd_data_conv,
                                                         p->x, perf[i].algo, &bytes) !=
                CUDNN_STATUS_SUCCESS ||
            bytes > limit)
            continue;
        p->bwd_data = perf[i].algo;
        p->bwd_data_math = math_for(p, perf[i].mathType);
        p->bwd_data_bytes = bytes;
        return 0;
    }
    return 1;
}

static int choose_bwd_filter(cbe *ci, conv_plan *p, size_t limit)
{
    cudnnConvolutionBwdFilterAlgoPerf_t perf[MAX_ALGOS];
    int got = 0;
    if (CUDNN_CHECK(ci, cudnnSetConvolutionMathType(p->bwd_filter_conv,
                                                    math_for(p, CUDNN_DEFAULT_MATH))) ||
        CUDNN_CHECK(ci, cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                            ci->dnn, p->x, p->y, p->bwd_filter_conv, p->w, MAX_ALGOS, &got, perf)))
        return -1;
    for (int i = 0; i < got; i++) {
        size_t bytes = 0;
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC ||
            !math_ok(p, perf[i].mathType) ||
            !transform_ok(p, perf[i].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
                                 perf[i].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
                                 perf[i].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED))
            continue;
        if (cudnnSetConvolutionMathType(p->bwd_filter_conv, math_for(p, perf[i].mathType)) !=
                CUDNN_STATUS_SUCCESS ||
            cudnnGetConvolutionBackwardFilterWorkspaceSize(ci->dnn, p->x, p->y,
                                                           p->bwd_filter_conv, p->w, perf[i].algo,
                                                           &bytes) != CUDNN_STATUS_SUCCESS ||
            bytes > limit)
            continue;
        p->bwd_filter = perf[i].algo;
        p->bwd_filter_math = math_for(p, perf[i].mathType);
        p->bwd_filter_bytes = bytes;
        return 0;
    }
    return 1;
}

/* Dilation per axis in the descriptor; groups (depthwise when groups = c)
 * through cudnnSetConvolutionGroupCount, the filter then being
 * (oc, c/groups, kh, kw) like PyTorch's weight. */
static int make_conv_desc(cbe *ci, cudnnConvolutionDescriptor_t *c, const cdl_conv2d_desc *d)
{
    return CUDNN_CHECK(ci, cudnnCreateConvolutionDescriptor(c)) ||
           CUDNN_CHECK(ci, cudnnSetConvolution2dDescriptor(*c, d->pad_h, d->pad_w,
                                                           d->stride_h, d->stride_w,
                                                           d->dil_h, d->dil_w,
                                                           CUDNN_CROSS_CORRELATION,
                                                           CUDNN_DATA_FLOAT)) ||
           CUDNN_CHECK(ci, cudnnSetConvolutionGroupCount(*c, d->groups))
               ? -1
               : 0;
}

static int plan_make(cbe *ci, conv_plan *p, const cdl_conv2d_desc *d, size_t limit)
{
    char what[256];
    desc_str(d, what, sizeof what);
    memset(p, 0, sizeof *p);
    p->d = *d;
    p->tf32 = ci->tf32_conv;
    p->room = limit;
    if (d->n <= 0 || d->c <= 0 || d->h <= 0 || d->w <= 0 || d->oc <= 0 || d->kh <= 0 ||
        d->kw <= 0 || d->stride_h <= 0 || d->stride_w <= 0 || d->pad_h < 0 || d->pad_w < 0 ||
        d->dil_h <= 0 || d->dil_w <= 0)
        return cbe_fail(ci, "%s: every size must be positive (padding >= 0)", what);
    if (d->groups <= 0 || d->c % d->groups || d->oc % d->groups)
        return cbe_fail(ci, "%s: %d groups must divide the %d input and %d output channels",
                        what, d->groups, d->c, d->oc);
    if (d->oc > 65535)
        return cbe_fail(ci, "%s: more than 65535 output channels are not supported by the CUDA "
                        "backend's bias kernels", what);
    if (CUDNN_CHECK(ci, cudnnCreateTensorDescriptor(&p->x)) ||
        CUDNN_CHECK(ci, cudnnCreateTensorDescriptor(&p->y)) ||
        CUDNN_CHECK(ci, cudnnCreateFilterDescriptor(&p->w)) ||
        CUDNN_CHECK(ci, cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n,
                                                   d->c, d->h, d->w)) ||
        CUDNN_CHECK(ci, cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n,
                                                   d->oc, d->oh, d->ow)) ||
        CUDNN_CHECK(ci, cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                   d->oc, d->c / d->groups, d->kh, d->kw)) ||
        make_conv_desc(ci, &p->fwd_conv, d) || make_conv_desc(ci, &p->bwd_data_conv, d) ||
        make_conv_desc(ci, &p->bwd_filter_conv, d))
        goto fail;
    int on, oc, oh, ow;
    if (CUDNN_CHECK(ci, cudnnGetConvolution2dForwardOutputDim(p->fwd_conv, p->x, p->w, &on, &oc,
                                                              &oh, &ow)))
        goto fail;
    if (on != d->n || oc != d->oc || oh != d->oh || ow != d->ow) {
        cbe_fail(ci, "%s: the output of this convolution is (%d,%d,%d,%d), not (%d,%d,%d,%d): fix "
                 "oh/ow in the descriptor", what, on, oc, oh, ow, d->n, d->oc, d->oh, d->ow);
        goto fail;
    }
    int r;
    const char *dir = "forward";
    if ((r = choose_fwd(ci, p, limit)) == 0) {
        dir = "backward-data";
        if ((r = choose_bwd_data(ci, p, limit)) == 0) {
            dir = "backward-filter";
            r = choose_bwd_filter(ci, p, limit);
        }
    }
    if (r > 0)
        cbe_fail(ci, "%s: cuDNN offers no deterministic %s algorithm within the %zu bytes of "
                 "workspace given: size ws with conv2d_workspace for this shape (or try "
                 "CDL_TF32=off)", what, dir, limit);
    if (r != 0)
        goto fail;
    size_t bytes = p->fwd_bytes;
    if (p->bwd_data_bytes > bytes)
        bytes = p->bwd_data_bytes;
    if (p->bwd_filter_bytes > bytes)
        bytes = p->bwd_filter_bytes;
    p->ws_floats = (bytes + sizeof(float) - 1) / sizeof(float);
    plan_log(ci, p, what);
    return 0;
fail:
    plan_release(p);
    return -1;
}

/* The plan of d at the current TF32 setting whose workspace fits in room
 * bytes, made if needed (with algorithms chosen to fit room). */
static conv_plan *get_plan(cbe *ci, const cdl_conv2d_desc *d, size_t room)
{
    conv_plan *lru = NULL;
    for (int i = 0; i < ci->nplans; i++) {
        conv_plan *p = &ci->plans[i];
        if (p->tf32 == ci->tf32_conv && !memcmp(&p->d, d, sizeof *d) &&
            p->ws_floats * sizeof(float) <= room) {
            p->last_use = ++ci->plan_clock;
            return p;
        }
        if (!lru || p->last_use < lru->last_use)
            lru = p;
    }
    conv_plan *p;
    if (ci->nplans < CONV_CACHE_SIZE) {
        p = &ci->plans[ci->nplans];
    } else {
        p = lru;
        plan_release(p);
    }
    if (plan_make(ci, p, d, room) != 0)
        return NULL;
    if (p == &ci->plans[ci->nplans])
        ci->nplans++;
    p->last_use = ++ci->plan_clock;
    return p;
}

size_t cbe_conv2d_workspace(cdl_backend *be, const cdl_conv2d_desc *d)
{
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    conv_plan *p = get_plan(ci, d, CONV_WS_CAP);
    return p ? p->ws_floats : 0;
}

/* The plan for d with the workspace ws really has (0 with an error when
 * ws is not memory of this backend). */
static conv_plan *plan_for(cbe *ci, const cdl_conv2d_desc *d, const void *ws, size_t *room)
{
    *room = ws ? cbe_room(ci, ws) : 0;
    if (ws && !*room) {
        char what[256];
        desc_str(d, what, sizeof what);
        cbe_fail(ci, "%s: the workspace %p is not memory of this CUDA backend: allocate ws with "
                 "its alloc(), sized by conv2d_workspace", what, ws);
        return NULL;
    }
    size_t limit = *room < CONV_WS_CAP ? *room : CONV_WS_CAP;
    return get_plan(ci, d, limit);
}

static uint64_t conv_sig(int op, const cdl_conv2d_desc *d, const void *a, const void *b,
                         const void *c, const void *e, const void *f, const void *g, int tf32)
{
    const uint64_t v[] = {(uint64_t)d->n, (uint64_t)d->c, (uint64_t)d->h, (uint64_t)d->w,
                          (uint64_t)d->oc, (uint64_t)d->kh, (uint64_t)d->kw, (uint64_t)d->stride_h,
                          (uint64_t)d->stride_w, (uint64_t)d->pad_h, (uint64_t)d->pad_w,
                          (uint64_t)d->dil_h, (uint64_t)d->dil_w, (uint64_t)d->groups,
                          (uint64_t)d->oh, (uint64_t)d->ow, (uint64_t)tf32,
                          sigp(a), sigp(b), sigp(c), sigp(e), sigp(f), sigp(g)};
    return cbe_sig(op, v, sizeof v / sizeof v[0]);
}

void cbe_conv2d_fwd(cdl_backend *be, const cdl_conv2d_desc *d, const float *x, const float *w,
                    const float *b, float *y, float *ws)
{
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    const void *dyn;
    if (cbe_graph_op(ci, "conv2d_fwd", conv_sig(OPSIG_CONV_FWD, d, x, w, b, y, ws, NULL,
                                                ci->tf32_conv),
                     NULL, 0, &dyn))
        return;
    size_t room;
    conv_plan *p = plan_for(ci, d, ws, &room);
    if (!p)
        return;
    const float one = 1.0f, zero = 0.0f;
    if (CUDNN_CHECK(ci, cudnnConvolutionForward(ci->dnn, &one, p->x, x, p->w, w, p->fwd_conv,
                                                p->fwd, ws, room, &zero, p->y, y)))
        return;
    if (b)
        CU_CHECK(ci, cuk_bias_add_nchw(ci->stream, y, b, d->n, d->oc, d->oh * d->ow));
}

void cbe_conv2d_bwd(cdl_backend *be, const cdl_conv2d_desc *d, const float *x, const float *w,
                    const float *dy, float *dx, float *dw, float *db, float *ws)
{
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    const void *dyn;
    if (cbe_graph_op(ci, "conv2d_bwd", conv_sig(OPSIG_CONV_BWD, d, x, w, dy, dx, dw, db,
                                                ci->tf32_conv),
                     NULL, 0, &dyn))
        return;
    size_t room;
    conv_plan *p = plan_for(ci, d, ws, &room);
    if (!p)
        return;
    const float one = 1.0f, zero = 0.0f;
    if (dx && CUDNN_CHECK(ci, cudnnConvolutionBackwardData(ci->dnn, &one, p->w, w, p->y, dy,
                                                           p->bwd_data_conv, p->bwd_data, ws,
                                                           room, &zero, p->x, dx)))
        return;
    if (CUDNN_CHECK(ci, cudnnConvolutionBackwardFilter(ci->dnn, &one, p->x, x, p->y, dy,
                                                       p->bwd_filter_conv, p->bwd_filter, ws,
                                                       room, &zero, p->w, dw)))
        return;
    if (db)
        CU_CHECK(ci, cuk_bias_grad_nchw(ci->stream, dy, db, d->n, d->oc, d->oh * d->ow,
                                        ci->bias_partials, CBE_BIAS_PARTIALS));
}
