/* cuDNN of the fake GPU: 2-D convolution through the legacy descriptor
 * API, from cuDNN's documented semantics.
 *
 * - Descriptors: 4-D NCHW float tensors (packed, as cudnnSetTensor4d makes
 *   them), KCRS filters, 2-D convolution descriptors with padding, stride,
 *   dilation (per axis), group count (the filter has C/groups channels),
 *   mode (CUDNN_CONVOLUTION flips the filter, CROSS_CORRELATION does not)
 *   and math type. Other layouts and types answer
 *   CUDNN_STATUS_NOT_SUPPORTED: they are not modelled.
 * - The heuristics (cudnnGet*Algorithm_v7) return a fixed list per
 *   direction that includes what real cuDNN has: algorithms documented as
 *   non-deterministic (BWD_DATA_ALGO_0, BWD_FILTER_ALGO_0 and _3), ones
 *   with tensor-op math (TF32 for float data), ones that convert to half
 *   precision (TENSOR_OP_MATH_ALLOW_CONVERSION), ones that are not
 *   supported for the shape, and ones with large workspaces or one that
 *   grows with the batch, so that the caller's choice is exercised. Each
 *   algorithm has its own workspace size.
 * - Execution checks what cuDNN checks (shapes consistent with the
 *   descriptors, a workspace of at least the algorithm's size) and that
 *   every pointer lies in device memory; then, on the handle's stream, it
 *   overwrites the workspace with NaNs (a caller that keeps data there
 *   loses it, as it could on a GPU) and computes y = alpha * op + beta * y
 *   in double precision (beta == 0: y is not read). With DEFAULT or
 *   TENSOR_OP math on this sm_90 device the operands are rounded to TF32,
 *   as cuDNN may do (for float data TENSOR_OP_MATH is TF32, not half);
 *   ALLOW_CONVERSION rounds them to half precision; FMA math is strict
 *   FP32.
 */
#include "fake.h"

#include <cudnn.h>

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

using namespace fakegpu;
#define LOCKED std::lock_guard<std::recursive_mutex> guard_(fakegpu::lock())

struct cudnnContext {
    bool set = false;
    cudaStream_t stream = nullptr;
};

struct cudnnTensorStruct {
    bool set = false;
    int n = 0, c = 0, h = 0, w = 0;
};

struct cudnnFilterStruct {
    bool set = false;
    int k = 0, c = 0, r = 0, s = 0;
};

struct cudnnConvolutionStruct {
    bool set = false;
    int pad_h = 0, pad_w = 0, u = 1, v = 1, dil_h = 1, dil_w = 1;
    int groups = 1;   /* cudnnSetConvolutionGroupCount */
    cudnnConvolutionMode_t mode = CUDNN_CONVOLUTION;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

static std::set<void *> objects;
static thread_local char last_message[256];

static cudnnStatus_t bad(cudnnStatus_t s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cudnnStatus_t bad(cudnnStatus_t s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message, sizeof last_message, fmt, ap);
    va_end(ap);
    complain("%s", last_message);
    return s;
}

template <typename T> static cudnnStatus_t create(T **p)
{
    LOCKED;
    *p = new T;
    objects.insert(*p);
    return CUDNN_STATUS_SUCCESS;
}

template <typename T> static cudnnStatus_t destroy(T *p)
{
    LOCKED;
    if (!p)
        return CUDNN_STATUS_SUCCESS;
    if (!objects.erase(p))
        return bad(CUDNN_STATUS_BAD_PARAM, "destroy of a cuDNN object that does not exist");
    delete p;
    return CUDNN_STATUS_SUCCESS;
}

template <typename T> static bool live(const T *p)
{
    return p && objects.count((void *)p) && p->set;
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *h)
{
    if (device_count() == 0)
        return CUDNN_STATUS_NOT_INITIALIZED;
    cudnnStatus_t s = create(h);
    (*h)->set = true;
    return s;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t h)
{
    return destroy(h);
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s)
{
    LOCKED;
    if (!live(h))
        return CUDNN_STATUS_NOT_INITIALIZED;
    if (!stream_ok(s))
        return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: stream %p does not exist", (void *)s);
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}

const char *cudnnGetErrorString(cudnnStatus_t s)
{
    switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH: return "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH";
    case CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT: return "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_UNKNOWN";
    }
}

void cudnnGetLastErrorString(char *message, size_t max_size)
{
    if (max_size) {
        snprintf(message, max_size, "%s", last_message);
        last_message[0] = 0;
    }
}

/* ------------------------------------------------------------ descriptors */

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d)
{
    return create(d);
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d)
{
    return destroy(d);
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w)
{
    LOCKED;
    if (!objects.count(d))
        return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensor4dDescriptor: no such descriptor");
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0)
        return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensor4dDescriptor: (%d,%d,%d,%d) has a "
                   "dimension below 1", n, c, h, w);
    if (format != CUDNN_TENSOR_NCHW || type != CUDNN_DATA_FLOAT)
        return bad(CUDNN_STATUS_NOT_SUPPORTED, "fake cuDNN models NCHW float tensors only");
    d->set = true;
    d->n = n, d->c = c, d->h = h, d->w = w;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d)
{
    return create(d);
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d)
{
    return destroy(d);
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w)
{
    LOCKED;
    if (!objects.count(d))
        return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetFilter4dDescriptor: no such descriptor");
    if (k <= 0 || c <= 0 || h <= 0 || w <= 0)
        return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetFilter4dDescriptor: (%d,%d,%d,%d) has a "
                   "dimension below 1", k, c, h, w);
    if (format != CUDNN_TENSOR_NCHW || type != CUDNN_DATA_FLOAT)
        return bad(CUDNN_STATUS_NOT_SUPPORTED, "fake cuDNN models NCHW float filters only");
    d->set = true;
    d->k = k, d->c = c, d->r = h, d->s = w;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d)
{
    return create(d);
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d)
{
    return destroy(d);
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h,
                                              int pad_w, int u, int v, int dil_h, int dil_w,
                                              cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute)
{
    LOCKED;
    if (!objects.count(d))
        return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolution2dDescriptor: no such descriptor");
    if (pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dil_h <= 0 || dil_w <= 0 ||
        (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION))
        return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolution2dDescriptor: pad %d,%d stride "
                   "%d,%d dilation %d,%d mode %d", pad_h, pad_w, u, v, dil_h, dil_w, (int)mode);
    if (compute != CUDNN_DATA_FLOAT)
        return bad(CUDNN_STATUS_NOT_SUPPORTED, "fake cuDNN models float compute only");
    d->set = true;
    d->pad_h = pad_h, d->pad_w = pad_w, d->u = u, d->v = v, d->dil_h = dil_h, d->dil_w = dil_w;
    d->mode = mode;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m)
{
    LOCKED;
    if (!objects.count(d))
        return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionMathType: no such descriptor");
    if (m != CUDNN_DEFAULT_MATH && m != CUDNN_TENSOR_OP_MATH &&
        m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && m != CUDNN_FMA_MATH)
        return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionMathType: math type %d", (int)m);
    d->math = m;
    return CUDNN_STATUS_SUCCESS;
}

/* Grouped convolution (cudnnSetConvolutionGroupCount): the filter is
 * (k, c/groups, r, s) for an input of c channels; output channel o of group
 * o/(k/groups) sees input channels [g*c/groups, (g+1)*c/groups). */
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups)
{
    LOCKED;
    if (!objects.count(d))
        return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionGroupCount: no such descriptor");
    if (groups < 1)
        return bad(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionGroupCount: %d groups", groups);
    d->groups = groups;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int *groups)
{
    LOCKED;
    if (!objects.count(d) || !groups)
        return bad(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolutionGroupCount: no such descriptor");
    *groups = d->groups;
    return CUDNN_STATUS_SUCCESS;
}

/* What cuDNN checks of the channels: the input has filter-channels times
 * groups channels, and the filters split evenly among the groups. */
static bool channels_ok(const char *call, const cudnnTensorStruct *x, const cudnnFilterStruct *w,
                        const cudnnConvolutionStruct *cd)
{
    if (x->c != w->c * cd->groups) {
        bad(CUDNN_STATUS_BAD_PARAM, "%s: input has %d channels, filter %d per group times %d "
            "groups", call, x->c, w->c, cd->groups);
        return false;
    }
    if (w->k % cd->groups) {
        bad(CUDNN_STATUS_BAD_PARAM, "%s: %d filters do not split into %d groups", call, w->k,
            cd->groups);
        return false;
    }
    return true;
}

static int out_dim(int in, int pad, int k, int dil, int stride)
{
    return 1 + (in + 2 * pad - ((k - 1) * dil + 1)) / stride;
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t cd,
                                                    const cudnnTensorDescriptor_t x,
                                                    const cudnnFilterDescriptor_t w, int *n,
                                                    int *c, int *h, int *wo)
{
    LOCKED;
    if (!live(cd) || !live(x) || !live(w))
        return bad(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolution2dForwardOutputDim: a descriptor "
                   "is not set");
    if (!channels_ok("cudnnGetConvolution2dForwardOutputDim", x, w, cd))
        return CUDNN_STATUS_BAD_PARAM;
    int oh = out_dim(x->h, cd->pad_h, w->r, cd->dil_h, cd->u);
    int ow = out_dim(x->w, cd->pad_w, w->s, cd->dil_w, cd->v);
    if (oh <= 0 || ow <= 0)
        return bad(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolution2dForwardOutputDim: the filter "
                   "is larger than the padded input");
    *n = x->n, *c = w->k, *h = oh, *wo = ow;
    return CUDNN_STATUS_SUCCESS;
}

/* ------------------------------------------------------------ problems */

namespace {

struct problem {
    int n, c, h, w, k, r, s, oh, ow;
    int cg;   /* input channels per group (the filter's c) */
    const cudnnConvolutionStruct *cd;
};

cudnnStatus_t make_problem(const char *call, const cudnnTensorDescriptor_t x,
                           const cudnnFilterDescriptor_t w, const cudnnConvolutionDescriptor_t cd,
                           const cudnnTensorDescriptor_t y, problem *p)
{
    if (!live(x) || !live(w) || !live(cd) || !live(y))
        return bad(CUDNN_STATUS_BAD_PARAM, "%s: a descriptor does not exist or is not set", call);
    if (!channels_ok(call, x, w, cd))
        return CUDNN_STATUS_BAD_PARAM;
    int oh = out_dim(x->h, cd->pad_h, w->r, cd->dil_h, cd->u);
    int ow = out_dim(x->w, cd->pad_w, w->s, cd->dil_w, cd->v);
    if (y->n != x->n || y->c != w->k || y->h != oh || y->w != ow)
        return bad(CUDNN_STATUS_BAD_PARAM, "%s: output descriptor (%d,%d,%d,%d) is not the "
                   "convolution's output (%d,%d,%d,%d)", call, y->n, y->c, y->h, y->w, x->n, w->k,
                   oh, ow);
    *p = problem{x->n, x->c, x->h, x->w, w->k, w->r, w->s, oh, ow, w->c, cd};
    return CUDNN_STATUS_SUCCESS;
}

/* The workspace each algorithm wants: a function of the shape only, with
 * distinct sizes so that a caller mixing them up is caught. */
size_t im2col_bytes(const problem &p)
{
    return (size_t)p.c * p.r * p.s * p.oh * p.ow * sizeof(float);
}

size_t fwd_ws(const problem &p, cudnnConvolutionFwdAlgo_t a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return 0;
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return (size_t)p.r * p.s * 8 + 1024;
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return im2col_bytes(p) * p.n;
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return (size_t)1 << 31;
    default: return (size_t)p.n * p.k * p.oh * p.ow * 4;
    }
}

size_t bwd_data_ws(const problem &p, cudnnConvolutionBwdDataAlgo_t a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return 0;
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return (size_t)p.c * p.r * p.s * 4 + 512;
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return (size_t)1 << 31;
    default: return (size_t)p.n * p.c * p.h * p.w * 4;
    }
}

size_t bwd_filter_ws(const problem &p, cudnnConvolutionBwdFilterAlgo_t a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0: return 0;
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: return im2col_bytes(p) + 2048;
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3: return (size_t)p.k * 64;
    default: return (size_t)p.k * p.c * p.r * p.s * 8;
    }
}

template <typename Perf, typename Algo> struct entry {
    Algo algo;
    cudnnStatus_t status;
    cudnnDeterminism_t det;
    cudnnMathType_t math;
};

template <typename Perf, typename Algo, size_t N>
cudnnStatus_t heuristics(const entry<Perf, Algo> (&list)[N], const problem &p,
                         size_t (*ws)(const problem &, Algo), int requested, int *returned,
                         Perf *out)
{
    int got = 0;
    for (size_t i = 0; i < N && got < requested; i++, got++) {
        Perf r;
        memset(&r, 0, sizeof r);
        r.algo = list[i].algo;
        r.status = list[i].status;
        r.time = -1;
        r.memory = list[i].status == CUDNN_STATUS_SUCCESS ? ws(p, list[i].algo) : 0;
        r.determinism = list[i].det;
        r.mathType = list[i].math;
        out[got] = r;
    }
    *returned = got;
    return CUDNN_STATUS_SUCCESS;
}

const entry<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t> fwd_list[] = {
    {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, CUDNN_STATUS_NOT_SUPPORTED, CUDNN_DETERMINISTIC,
     CUDNN_DEFAULT_MATH},
    {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC,
     CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION},
    {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC,
     CUDNN_TENSOR_OP_MATH},
    {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC,
     CUDNN_TENSOR_OP_MATH},
    {CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC, CUDNN_DEFAULT_MATH},
    {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC,
     CUDNN_DEFAULT_MATH},
    {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC,
     CUDNN_FMA_MATH},
};

const entry<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t> bwd_data_list[] = {
    {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC,
     CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION},
    {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, CUDNN_STATUS_SUCCESS, CUDNN_NON_DETERMINISTIC,
     CUDNN_DEFAULT_MATH},
    {CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC,
     CUDNN_DEFAULT_MATH},
    {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC,
     CUDNN_DEFAULT_MATH},
    {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC, CUDNN_FMA_MATH},
};

const entry<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>
    bwd_filter_list[] = {
        {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC,
         CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION},
        {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_STATUS_SUCCESS, CUDNN_NON_DETERMINISTIC,
         CUDNN_DEFAULT_MATH},
        {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC,
         CUDNN_TENSOR_OP_MATH},
        {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, CUDNN_STATUS_SUCCESS, CUDNN_NON_DETERMINISTIC,
         CUDNN_DEFAULT_MATH},
        {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC,
         CUDNN_DEFAULT_MATH},
        {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC,
         CUDNN_FMA_MATH},
};

bool known(cudnnConvolutionFwdAlgo_t a)
{
    for (const auto &e : fwd_list)
        if (e.algo == a && e.status == CUDNN_STATUS_SUCCESS)
            return true;
    return false;
}

bool known(cudnnConvolutionBwdDataAlgo_t a)
{
    for (const auto &e : bwd_data_list)
        if (e.algo == a && e.status == CUDNN_STATUS_SUCCESS)
            return true;
    return false;
}

bool known(cudnnConvolutionBwdFilterAlgo_t a)
{
    for (const auto &e : bwd_filter_list)
        if (e.algo == a && e.status == CUDNN_STATUS_SUCCESS)
            return true;
    return false;
}

cudnnStatus_t check_handle(const char *call, cudnnHandle_t h)
{
    if (!live(h))
        return bad(CUDNN_STATUS_NOT_INITIALIZED, "%s: no such cuDNN handle", call);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t check_dev(const char *call, const char *what, const void *p, size_t bytes)
{
    char why[160];
    if (!p)
        return bad(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s: %s is NULL", call, what);
    if (!device_range(p, bytes, why, sizeof why))
        return bad(CUDNN_STATUS_BAD_PARAM, "%s: %s: %s", call, what, why);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t check_ws(const char *call, void *ws, size_t given, size_t needed)
{
    if (given < needed)
        return bad(CUDNN_STATUS_BAD_PARAM, "%s: workspace of %zu bytes, the algorithm needs %zu",
                   call, given, needed);
    if (needed && !ws)
        return bad(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s: workspace is NULL", call);
    return needed ? check_dev(call, "workspace", ws, given) : CUDNN_STATUS_SUCCESS;
}

/* The filter index that multiplies input row ih of output row oh, for
 * both modes: convolution flips the filter. */
/* x rounded to IEEE half precision (what ALLOW_CONVERSION feeds the tensor
 * cores): TF32's 10-bit mantissa, but a 5-bit exponent, so large values
 * overflow and small ones lose bits (subnormals are multiples of 2^-24). */
float half_round(float x)
{
    float a = std::fabs(x);
    if (a >= 65520.0f)
        return std::copysign(std::numeric_limits<float>::infinity(), x);
    if (a < 6.103515625e-05f)   /* 2^-14: below it, half is fixed point */
        return std::ldexp(std::nearbyint(std::ldexp(x, 24)), -24);
    return tf32_round(x);
}

struct geometry {
    problem p;
    bool flip, tf32, half;
    int tap(int i, int n) const { return flip ? n - 1 - i : i; }
    float op(float x) const { return half ? half_round(x) : tf32 ? tf32_round(x) : x; }
};

/* For float data DEFAULT and TENSOR_OP math both allow TF32 on this device;
 * only ALLOW_CONVERSION converts to half. */
geometry geometry_of(const problem &p)
{
    cudnnMathType_t m = p.cd->math;
    return geometry{p, p.cd->mode == CUDNN_CONVOLUTION,
                    (m == CUDNN_DEFAULT_MATH || m == CUDNN_TENSOR_OP_MATH) && tf32_allowed(),
                    m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION};
}

/* An operand as the math unit sees it: in double, TF32-rounded when the
 * math allows it. Converted once per call, not once per tap. */
std::vector<double> values(const geometry &g, const void *p, size_t bytes)
{
    const float *f = (const float *)p;
    std::vector<double> v(bytes / sizeof(float));
    for (size_t i = 0; i < v.size(); i++)
        v[i] = g.op(f[i]);
    return v;
}

void poison(void *ws, size_t bytes)
{
    float nan = std::numeric_limits<float>::quiet_NaN();
    float *f = (float *)ws;
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        f[i] = nan;
}

float blend(double v, float alpha, float beta, float old)
{
    return beta == 0.0f ? (float)(alpha * v) : (float)(alpha * v + (double)beta * old);
}

/* Visits every (output, input, filter) index triple of the problem. */
template <typename F> void each_tap(const geometry &g, F f)
{
    const problem &p = g.p;
    const cudnnConvolutionStruct &cd = *p.cd;
    int k_per_group = p.k / cd.groups;
    for (int n = 0; n < p.n; n++)
        for (int k = 0; k < p.k; k++)
            for (int oy = 0; oy < p.oh; oy++)
                for (int ox = 0; ox < p.ow; ox++) {
                    size_t yi = (((size_t)n * p.k + k) * p.oh + oy) * p.ow + ox;
                    int c0 = k / k_per_group * p.cg;   /* the group's first input channel */
                    for (int c = 0; c < p.cg; c++)
                        for (int r = 0; r < p.r; r++) {
                            int iy = oy * cd.u - cd.pad_h + r * cd.dil_h;
                            if (iy < 0 || iy >= p.h)
                                continue;
                            for (int s = 0; s < p.s; s++) {
                                int ix = ox * cd.v - cd.pad_w + s * cd.dil_w;
                                if (ix < 0 || ix >= p.w)
                                    continue;
                                size_t xi = (((size_t)n * p.c + c0 + c) * p.h + iy) * p.w + ix;
                                size_t wi = (((size_t)k * p.cg + c) * p.r + g.tap(r, p.r)) * p.s +
                                            g.tap(s, p.s);
                                f(yi, xi, wi);
                            }
                        }
                }
}

size_t x_bytes(const problem &p) { return (size_t)p.n * p.c * p.h * p.w * 4; }
size_t w_bytes(const problem &p) { return (size_t)p.k * p.cg * p.r * p.s * 4; }
size_t y_bytes(const problem &p) { return (size_t)p.n * p.k * p.oh * p.ow * 4; }

} // namespace

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
    const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t y, const int requested,
    int *returned, cudnnConvolutionFwdAlgoPerf_t *perf)
{
    LOCKED;
    problem p;
    cudnnStatus_t s = check_handle("cudnnGetConvolutionForwardAlgorithm_v7", h);
    if (s == CUDNN_STATUS_SUCCESS)
        s = make_problem("cudnnGetConvolutionForwardAlgorithm_v7", x, w, cd, y, &p);
    return s ? s : heuristics(fwd_list, p, fwd_ws, requested, returned, perf);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t dx, const int requested,
    int *returned, cudnnConvolutionBwdDataAlgoPerf_t *perf)
{
    LOCKED;
    problem p;
    cudnnStatus_t s = check_handle("cudnnGetConvolutionBackwardDataAlgorithm_v7", h);
    if (s == CUDNN_STATUS_SUCCESS)
        s = make_problem("cudnnGetConvolutionBackwardDataAlgorithm_v7", dx, w, cd, dy, &p);
    return s ? s : heuristics(bwd_data_list, p, bwd_data_ws, requested, returned, perf);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t cd, const cudnnFilterDescriptor_t dw, const int requested,
    int *returned, cudnnConvolutionBwdFilterAlgoPerf_t *perf)
{
    LOCKED;
    problem p;
    cudnnStatus_t s = check_handle("cudnnGetConvolutionBackwardFilterAlgorithm_v7", h);
    if (s == CUDNN_STATUS_SUCCESS)
        s = make_problem("cudnnGetConvolutionBackwardFilterAlgorithm_v7", x, dw, cd, dy, &p);
    return s ? s : heuristics(bwd_filter_list, p, bwd_filter_ws, requested, returned, perf);
}

namespace {

/* What every workspace query and every execution checks first: the handle,
 * the descriptors' shapes, the algorithm. */
template <typename Algo>
cudnnStatus_t prepare(const char *call, cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                      const cudnnFilterDescriptor_t w, const cudnnConvolutionDescriptor_t cd,
                      const cudnnTensorDescriptor_t y, Algo algo, problem *p)
{
    cudnnStatus_t s = check_handle(call, h);
    if (s == CUDNN_STATUS_SUCCESS)
        s = make_problem(call, x, w, cd, y, p);
    if (s == CUDNN_STATUS_SUCCESS && !known(algo))
        s = bad(CUDNN_STATUS_NOT_SUPPORTED, "%s: algorithm %d is not supported", call, (int)algo);
    return s;
}

struct operand {
    const char *name;
    const void *p;
    size_t bytes;
};

/* The checks of an execution after prepare(), then the work on the
 * handle's stream: the workspace poisoned, out = alpha * acc + beta * out
 * where fill(acc) sums the products into a zeroed double array. */
template <typename Fill>
cudnnStatus_t execute(const char *call, cudnnHandle_t h, void *ws, size_t ws_bytes,
                      size_t ws_needed, const operand (&in)[2], const operand &out,
                      const void *alpha, const void *beta, Fill fill)
{
    cudnnStatus_t s = check_ws(call, ws, ws_bytes, ws_needed);
    for (const operand &o : in)
        if (!s)
            s = check_dev(call, o.name, o.p, o.bytes);
    if (!s)
        s = check_dev(call, out.name, out.p, out.bytes);
    if (s)
        return s;
    float a = *(const float *)alpha, b = *(const float *)beta;
    float *Y = (float *)out.p;
    size_t n = out.bytes / sizeof(float);
    cudaError_t e = enqueue(h->stream, [=]() {
        poison(ws, ws_needed);   /* what the algorithm may use of the buffer */
        std::vector<double> acc(n, 0.0);
        fill(acc);
        for (size_t i = 0; i < n; i++)
            Y[i] = blend(acc[i], a, b, Y[i]);
    });
    return e == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}

} // namespace

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h,
                                                      const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t cd,
                                                      const cudnnTensorDescriptor_t y,
                                                      cudnnConvolutionFwdAlgo_t algo,
                                                      size_t *bytes)
{
    LOCKED;
    problem p;
    cudnnStatus_t s = prepare("cudnnGetConvolutionForwardWorkspaceSize", h, x, w, cd, y, algo, &p);
    if (s == CUDNN_STATUS_SUCCESS)
        *bytes = fwd_ws(p, algo);
    return s;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h,
                                                           const cudnnFilterDescriptor_t w,
                                                           const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t cd,
                                                           const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo,
                                                           size_t *bytes)
{
    LOCKED;
    problem p;
    cudnnStatus_t s = prepare("cudnnGetConvolutionBackwardDataWorkspaceSize", h, dx, w, cd, dy,
                              algo, &p);
    if (s == CUDNN_STATUS_SUCCESS)
        *bytes = bwd_data_ws(p, algo);
    return s;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t cd, const cudnnFilterDescriptor_t dw,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t *bytes)
{
    LOCKED;
    problem p;
    cudnnStatus_t s = prepare("cudnnGetConvolutionBackwardFilterWorkspaceSize", h, x, dw, cd, dy,
                              algo, &p);
    if (s == CUDNN_STATUS_SUCCESS)
        *bytes = bwd_filter_ws(p, algo);
    return s;
}

/* ------------------------------------------------------------ execution */

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha,
                                      const cudnnTensorDescriptor_t xd, const void *x,
                                      const cudnnFilterDescriptor_t wd, const void *w,
                                      const cudnnConvolutionDescriptor_t cd,
                                      cudnnConvolutionFwdAlgo_t algo, void *ws, size_t ws_bytes,
                                      const void *beta, const cudnnTensorDescriptor_t yd, void *y)
{
    LOCKED;
    const char *call = "cudnnConvolutionForward";
    problem p;
    cudnnStatus_t s = prepare(call, h, xd, wd, cd, yd, algo, &p);
    if (s)
        return s;
    geometry g = geometry_of(p);
    return execute(call, h, ws, ws_bytes, fwd_ws(p, algo),
                   {{"x", x, x_bytes(p)}, {"w", w, w_bytes(p)}}, {"y", y, y_bytes(p)}, alpha,
                   beta, [=](std::vector<double> &acc) {
                       std::vector<double> X = values(g, x, x_bytes(p)), W = values(g, w, w_bytes(p));
                       each_tap(g, [&](size_t yi, size_t xi, size_t wi) {
                           acc[yi] += X[xi] * W[wi];
                       });
                   });
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha,
                                           const cudnnFilterDescriptor_t wd, const void *w,
                                           const cudnnTensorDescriptor_t dyd, const void *dy,
                                           const cudnnConvolutionDescriptor_t cd,
                                           cudnnConvolutionBwdDataAlgo_t algo, void *ws,
                                           size_t ws_bytes, const void *beta,
                                           const cudnnTensorDescriptor_t dxd, void *dx)
{
    LOCKED;
    const char *call = "cudnnConvolutionBackwardData";
    problem p;
    cudnnStatus_t s = prepare(call, h, dxd, wd, cd, dyd, algo, &p);
    if (s)
        return s;
    geometry g = geometry_of(p);
    return execute(call, h, ws, ws_bytes, bwd_data_ws(p, algo),
                   {{"w", w, w_bytes(p)}, {"dy", dy, y_bytes(p)}}, {"dx", dx, x_bytes(p)}, alpha,
                   beta, [=](std::vector<double> &acc) {
                       std::vector<double> W = values(g, w, w_bytes(p)), DY = values(g, dy, y_bytes(p));
                       each_tap(g, [&](size_t yi, size_t xi, size_t wi) {
                           acc[xi] += DY[yi] * W[wi];
                       });
                   });
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha,
                                             const cudnnTensorDescriptor_t xd, const void *x,
                                             const cudnnTensorDescriptor_t dyd, const void *dy,
                                             const cudnnConvolutionDescriptor_t cd,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *ws,
                                             size_t ws_bytes, const void *beta,
                                             const cudnnFilterDescriptor_t dwd, void *dw)
{
    LOCKED;
    const char *call = "cudnnConvolutionBackwardFilter";
    problem p;
    cudnnStatus_t s = prepare(call, h, xd, dwd, cd, dyd, algo, &p);
    if (s)
        return s;
    geometry g = geometry_of(p);
    return execute(call, h, ws, ws_bytes, bwd_filter_ws(p, algo),
                   {{"x", x, x_bytes(p)}, {"dy", dy, y_bytes(p)}}, {"dw", dw, w_bytes(p)}, alpha,
                   beta, [=](std::vector<double> &acc) {
                       std::vector<double> X = values(g, x, x_bytes(p)), DY = values(g, dy, y_bytes(p));
                       each_tap(g, [&](size_t yi, size_t xi, size_t wi) {
                           acc[wi] += X[xi] * DY[yi];
                       });
                   });
}
