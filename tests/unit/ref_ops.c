/* Double-precision reference ops (see ref_ops.h): direct loops straight from
 * the definitions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"

cdl_conv2d_desc ref_conv_desc(int n, int c, int h, int w, int oc, int kh, int kw,
                              int stride, int pad)
{
    return ref_conv_desc_full(n, c, h, w, oc, kh, kw, stride, stride, pad, pad, 1, 1, 1);
}

cdl_conv2d_desc ref_conv_desc_full(int n, int c, int h, int w, int oc, int kh, int kw,
                                   int stride_h, int stride_w, int pad_h, int pad_w,
                                   int dil_h, int dil_w, int groups)
{
    cdl_conv2d_desc d = {.n = n, .c = c, .h = h, .w = w, .oc = oc, .kh = kh, .kw = kw,
                         .stride_h = stride_h, .stride_w = stride_w, .pad_h = pad_h,
                         .pad_w = pad_w, .dil_h = dil_h, .dil_w = dil_w, .groups = groups,
                         .oh = cdl_conv2d_out(h, kh, stride_h, pad_h, dil_h),
                         .ow = cdl_conv2d_out(w, kw, stride_w, pad_w, dil_w)};
    return d;
}

cdl_pool2d_desc ref_pool_desc(int n, int c, int h, int w, int k, int stride, int pad)
{
    cdl_pool2d_desc d = {n, c, h, w, k, stride, pad,
                         (h + 2 * pad - k) / stride + 1, (w + 2 * pad - k) / stride + 1};
    return d;
}

/* Calls back for every (output, input, weight) index triple of a conv2d
 * whose input tap is inside the image: output channel o_ of group
 * o_/(oc/groups) reads that group's cg = c/groups input channels. */
#define CONV_LOOP(d, BODY)                                                          \
    for (int n_ = 0; n_ < (d)->n; n_++)                                             \
        for (int o_ = 0; o_ < (d)->oc; o_++)                                        \
            for (int oy_ = 0; oy_ < (d)->oh; oy_++)                                 \
                for (int ox_ = 0; ox_ < (d)->ow; ox_++) {                           \
                    size_t yi = (((size_t)n_ * (d)->oc + o_) * (d)->oh + oy_) * (d)->ow + ox_; \
                    int cg_ = (d)->c / (d)->groups;                                 \
                    int g_ = o_ / ((d)->oc / (d)->groups);                          \
                    for (int j_ = 0; j_ < cg_; j_++)                                \
                        for (int ky_ = 0; ky_ < (d)->kh; ky_++)                     \
                            for (int kx_ = 0; kx_ < (d)->kw; kx_++) {               \
                                int c_ = g_ * cg_ + j_;                             \
                                int iy_ = oy_ * (d)->stride_h - (d)->pad_h + ky_ * (d)->dil_h; \
                                int ix_ = ox_ * (d)->stride_w - (d)->pad_w + kx_ * (d)->dil_w; \
                                if (iy_ < 0 || iy_ >= (d)->h || ix_ < 0 || ix_ >= (d)->w) \
                                    continue;                                       \
                                size_t xi = (((size_t)n_ * (d)->c + c_) * (d)->h + iy_) * (d)->w + ix_; \
                                size_t wi = (((size_t)o_ * cg_ + j_) * (d)->kh + ky_) * (d)->kw + kx_; \
                                BODY;                                               \
                            }                                                       \
                }

void ref_conv2d_fwd(const cdl_conv2d_desc *d, const double *x, const double *w,
                    const double *b, double *y)
{
    size_t ny = (size_t)d->n * d->oc * d->oh * d->ow, plane = (size_t)d->oh * d->ow;
    for (size_t i = 0; i < ny; i++)
        y[i] = b ? b[(i / plane) % (size_t)d->oc] : 0.0;
    CONV_LOOP(d, y[yi] += x[xi] * w[wi]);
}

void ref_conv2d_bwd(const cdl_conv2d_desc *d, const double *x, const double *w,
                    const double *dy, double *dx, double *dw, double *db)
{
    size_t nx = (size_t)d->n * d->c * d->h * d->w;
    size_t nw = (size_t)d->oc * (d->c / d->groups) * d->kh * d->kw;
    size_t ny = (size_t)d->n * d->oc * d->oh * d->ow, plane = (size_t)d->oh * d->ow;
    if (dx)
        memset(dx, 0, nx * sizeof *dx);
    memset(dw, 0, nw * sizeof *dw);
    if (db) {
        memset(db, 0, (size_t)d->oc * sizeof *db);
        for (size_t i = 0; i < ny; i++)
            db[(i / plane) % (size_t)d->oc] += dy[i];
    }
    CONV_LOOP(d, {
        dw[wi] += dy[yi] * x[xi];
        if (dx)
            dx[xi] += dy[yi] * w[wi];
    });
}

void ref_linear_fwd(int n, int in, int out, const double *x, const double *w,
                    const double *b, double *y)
{
    for (int r = 0; r < n; r++)
        for (int o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < in; i++)
                s += x[(size_t)r * in + i] * w[(size_t)o * in + i];
            y[(size_t)r * out + o] = s;
        }
}

void ref_linear_bwd(int n, int in, int out, const double *x, const double *w,
                    const double *dy, double *dx, double *dw, double *db)
{
    for (int r = 0; r < n && dx; r++)
        for (int i = 0; i < in; i++) {
            double s = 0.0;
            for (int o = 0; o < out; o++)
                s += dy[(size_t)r * out + o] * w[(size_t)o * in + i];
            dx[(size_t)r * in + i] = s;
        }
    for (int o = 0; o < out; o++) {
        for (int i = 0; i < in; i++) {
            double s = 0.0;
            for (int r = 0; r < n; r++)
                s += dy[(size_t)r * out + o] * x[(size_t)r * in + i];
            dw[(size_t)o * in + i] = s;
        }
        if (db) {
            double s = 0.0;
            for (int r = 0; r < n; r++)
                s += dy[(size_t)r * out + o];
            db[o] = s;
        }
    }
}

void ref_maxpool_fwd(const cdl_pool2d_desc *d, const double *x, double *y, int32_t *argmax)
{
    size_t planes = (size_t)d->n * d->c;
    for (size_t pl = 0; pl < planes; pl++)
        for (int oy = 0; oy < d->oh; oy++)
            for (int ox = 0; ox < d->ow; ox++) {
                double best = -INFINITY;
                int32_t bi = -1;
                for (int ky = 0; ky < d->k; ky++)
                    for (int kx = 0; kx < d->k; kx++) {
                        int iy = oy * d->stride - d->pad + ky, ix = ox * d->stride - d->pad + kx;
                        if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w)
                            continue;
                        double v = x[pl * d->h * d->w + (size_t)iy * d->w + ix];
                        if (bi < 0 || v > best) {
                            best = v;
                            bi = iy * d->w + ix;
                        }
                    }
                size_t o = (pl * d->oh + oy) * d->ow + ox;
                y[o] = best;
                argmax[o] = bi;
            }
}

void ref_maxpool_bwd(const cdl_pool2d_desc *d, const double *dy, const int32_t *argmax,
                     double *dx)
{
    size_t planes = (size_t)d->n * d->c, in = (size_t)d->h * d->w, out = (size_t)d->oh * d->ow;
    memset(dx, 0, planes * in * sizeof *dx);
    for (size_t pl = 0; pl < planes; pl++)
        for (size_t o = 0; o < out; o++)
            dx[pl * in + argmax[pl * out + o]] += dy[pl * out + o];
}

/* Divisor with count_include_pad=True: the window clipped to the padded
 * plane (only the bottom/right edge can cut it in floor mode). */
static double avg_count(const cdl_pool2d_desc *d, int oy, int ox)
{
    int y0 = oy * d->stride - d->pad, x0 = ox * d->stride - d->pad;
    int y1 = y0 + d->k, x1 = x0 + d->k;
    if (y1 > d->h + d->pad)
        y1 = d->h + d->pad;
    if (x1 > d->w + d->pad)
        x1 = d->w + d->pad;
    return (double)(y1 - y0) * (x1 - x0);
}

void ref_avgpool_fwd(const cdl_pool2d_desc *d, const double *x, double *y)
{
    size_t planes = (size_t)d->n * d->c;
    for (size_t pl = 0; pl < planes; pl++)
        for (int oy = 0; oy < d->oh; oy++)
            for (int ox = 0; ox < d->ow; ox++) {
                double s = 0.0;
                for (int ky = 0; ky < d->k; ky++)
                    for (int kx = 0; kx < d->k; kx++) {
                        int iy = oy * d->stride - d->pad + ky, ix = ox * d->stride - d->pad + kx;
                        if (iy >= 0 && iy < d->h && ix >= 0 && ix < d->w)
                            s += x[pl * d->h * d->w + (size_t)iy * d->w + ix];
                    }
                y[(pl * d->oh + oy) * d->ow + ox] = s / avg_count(d, oy, ox);
            }
}

void ref_avgpool_bwd(const cdl_pool2d_desc *d, const double *dy, double *dx)
{
    size_t planes = (size_t)d->n * d->c;
    memset(dx, 0, planes * d->h * d->w * sizeof *dx);
    for (size_t pl = 0; pl < planes; pl++)
        for (int oy = 0; oy < d->oh; oy++)
            for (int ox = 0; ox < d->ow; ox++) {
                double g = dy[(pl * d->oh + oy) * d->ow + ox] / avg_count(d, oy, ox);
                for (int ky = 0; ky < d->k; ky++)
                    for (int kx = 0; kx < d->k; kx++) {
                        int iy = oy * d->stride - d->pad + ky, ix = ox * d->stride - d->pad + kx;
                        if (iy >= 0 && iy < d->h && ix >= 0 && ix < d->w)
                            dx[pl * d->h * d->w + (size_t)iy * d->w + ix] += g;
                    }
            }
}

void ref_relu_fwd(size_t n, const double *x, double *y)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0 ? x[i] : 0.0;
}

void ref_relu_bwd(size_t n, const double *y, const double *dy, double *dx)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = y[i] > 0.0 ? dy[i] : 0.0;
}

void ref_dropout_fwd(size_t n, double p, uint64_t seed, const double *x, double *y,
                     uint8_t *mask)
{
    for (size_t i = 0; i < n; i++) {
        mask[i] = p < 1.0 && cdl_dropout_keep(seed, i, (float)p);
        y[i] = mask[i] ? x[i] / (1.0 - p) : 0.0;
    }
}

void ref_xent(int n, int classes, const double *logits, const int32_t *labels,
              double grad_scale, double *dlogits, double *loss, int32_t *pred)
{
    for (int r = 0; r < n; r++) {
        const double *z = logits + (size_t)r * classes;
        double *dz = dlogits + (size_t)r * classes;
        int best = 0;
        for (int j = 1; j < classes; j++)
            if (z[j] > z[best])
                best = j;
        double m = z[best], s = 0.0;
        for (int j = 0; j < classes; j++)
            s += exp(z[j] - m);
        pred[r] = best;
        if (labels[r] < 0) {   /* ignored */
            for (int j = 0; j < classes; j++)
                dz[j] = 0.0;
            loss[r] = 0.0;
            continue;
        }
        for (int j = 0; j < classes; j++)
            dz[j] = (exp(z[j] - m) / s - (j == labels[r])) * grad_scale;
        loss[r] = m + log(s) - z[labels[r]];
    }
}

/* ---- ops of networks with branches (issue 15) ---- */

/* Batch mean and biased variance of channel ch of x (n,c,hw), two-pass. */
static void bn_stats(int n, int c, int hw, const double *x, int ch, double *mean, double *var)
{
    double count = (double)n * hw, s = 0.0, q = 0.0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < hw; j++)
            s += x[((size_t)i * c + ch) * hw + j];
    *mean = s / count;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < hw; j++) {
            double d = x[((size_t)i * c + ch) * hw + j] - *mean;
            q += d * d;
        }
    *var = q / count;
}

void ref_bn_train_fwd(int n, int c, int hw, const double *x, const double *gamma,
                      const double *beta, double eps, int relu, double *y, double *mean,
                      double *var)
{
    for (int ch = 0; ch < c; ch++) {
        double m, v;
        bn_stats(n, c, hw, x, ch, &m, &v);
        double invstd = 1.0 / sqrt(v + eps);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < hw; j++) {
                size_t k = ((size_t)i * c + ch) * hw + j;
                double o = (x[k] - m) * invstd * (gamma ? gamma[ch] : 1.0) + (beta ? beta[ch] : 0.0);
                y[k] = relu && o < 0.0 ? 0.0 : o;
            }
        if (mean)
            mean[ch] = m;
        if (var)
            var[ch] = v;
    }
}

void ref_bn_train_bwd(int n, int c, int hw, const double *x, const double *gamma, double eps,
                      int relu, const double *y, const double *dy, double *dx, double *dgamma,
                      double *dbeta)
{
    double count = (double)n * hw;
    for (int ch = 0; ch < c; ch++) {
        double m, v;
        bn_stats(n, c, hw, x, ch, &m, &v);
        double invstd = 1.0 / sqrt(v + eps), g = gamma ? gamma[ch] : 1.0;
        double sdy = 0.0, sdyx = 0.0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < hw; j++) {
                size_t k = ((size_t)i * c + ch) * hw + j;
                double e = relu && !(y[k] > 0.0) ? 0.0 : dy[k];
                sdy += e;
                sdyx += e * (x[k] - m) * invstd;
            }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < hw; j++) {
                size_t k = ((size_t)i * c + ch) * hw + j;
                double e = relu && !(y[k] > 0.0) ? 0.0 : dy[k];
                double xhat = (x[k] - m) * invstd;
                dx[k] = g * invstd * (e - sdy / count - xhat * sdyx / count);
            }
        if (dgamma)
            dgamma[ch] = sdyx;
        if (dbeta)
            dbeta[ch] = sdy;
    }
}

void ref_bn_eval(int n, int c, int hw, const double *x, const double *rm, const double *rv,
                 double eps, const double *gamma, const double *beta, int relu, double *y)
{
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int j = 0; j < hw; j++) {
                size_t k = ((size_t)i * c + ch) * hw + j;
                double o = (x[k] - rm[ch]) / sqrt(rv[ch] + eps) * (gamma ? gamma[ch] : 1.0) +
                           (beta ? beta[ch] : 0.0);
                y[k] = relu && o < 0.0 ? 0.0 : o;
            }
}

void ref_gap_fwd(int n, int c, int hw, const double *x, double *y)
{
    for (size_t p = 0; p < (size_t)n * c; p++) {
        double s = 0.0;
        for (int j = 0; j < hw; j++)
            s += x[p * hw + j];
        y[p] = s / hw;
    }
}

void ref_gap_bwd(int n, int c, int hw, const double *dy, double *dx)
{
    for (size_t p = 0; p < (size_t)n * c; p++)
        for (int j = 0; j < hw; j++)
            dx[p * hw + j] = dy[p] / hw;
}

static double sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

#define GELU_K0 0.79788456080286535588 /* sqrt(2/pi) */
#define GELU_K1 0.044715

double ref_act(cdl_act act, double alpha, double x)
{
    switch (act) {
    case CDL_ACT_RELU: return x > 0.0 ? x : 0.0;
    case CDL_ACT_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case CDL_ACT_GELU_TANH: return 0.5 * x * (1.0 + tanh(GELU_K0 * (x + GELU_K1 * x * x * x)));
    case CDL_ACT_SILU: return x * sigmoid(x);
    case CDL_ACT_SIGMOID: return sigmoid(x);
    case CDL_ACT_TANH: return tanh(x);
    case CDL_ACT_LEAKYRELU: return x > 0.0 ? x : alpha * x;
    }
    return NAN;
}

double ref_act_grad(cdl_act act, double alpha, double x)
{
    switch (act) {
    case CDL_ACT_RELU: return x > 0.0 ? 1.0 : 0.0;
    case CDL_ACT_GELU:
        return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / 2.5066282746310002 /* sqrt(2 pi) */;
    case CDL_ACT_GELU_TANH: {
        double t = tanh(GELU_K0 * (x + GELU_K1 * x * x * x));
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_K0 * (1.0 + 3.0 * GELU_K1 * x * x);
    }
    case CDL_ACT_SILU: return sigmoid(x) * (1.0 + x * (1.0 - sigmoid(x)));
    case CDL_ACT_SIGMOID: return sigmoid(x) * (1.0 - sigmoid(x));
    case CDL_ACT_TANH: return 1.0 - tanh(x) * tanh(x);
    case CDL_ACT_LEAKYRELU: return x > 0.0 ? 1.0 : alpha;
    }
    return NAN;
}

void ref_xent_ls(int n, int classes, const double *logits, const int32_t *labels, double eps,
                 double grad_scale, double *dlogits, double *loss, int32_t *pred)
{
    ref_xent(n, classes, logits, labels, grad_scale, dlogits, loss, pred);
    for (int r = 0; r < n; r++) {
        if (labels[r] < 0)
            continue;   /* ignored: ref_xent wrote zeros */
        const double *z = logits + (size_t)r * classes;
        double m = z[pred[r]], s = 0.0, zsum = 0.0;
        for (int j = 0; j < classes; j++) {
            s += exp(z[j] - m);
            zsum += z[j];
        }
        double lse = m + log(s);
        loss[r] = (1.0 - eps) * loss[r] + eps * (lse - zsum / classes);
        for (int j = 0; j < classes; j++)
            dlogits[(size_t)r * classes + j] += eps * grad_scale * ((j == labels[r]) - 1.0 / classes);
    }
}

/* Scores of one (sample b, head h) as the definition writes them: row t
 * holds S[t][s] = q_t . k_s / sqrt(hd) for s <= t, then the softmax P and
 * lse[t]. P (T*T) has zeros above the diagonal. */
static void ref_attn_probs(int T, int C, int nh, const double *qkv, int b, int h, double *P,
                           double *lse)
{
    int hd = C / nh;
    const double *base = qkv + (size_t)b * T * 3 * C + (size_t)h * hd;
    for (int t = 0; t < T; t++) {
        double *p = P + (size_t)t * T, m = -INFINITY, sum = 0.0;
        for (int s = 0; s < T; s++) {
            p[s] = 0.0;
            if (s > t)
                continue;
            for (int j = 0; j < hd; j++)
                p[s] += base[(size_t)t * 3 * C + j] * base[(size_t)s * 3 * C + C + j];
            p[s] /= sqrt((double)hd);
            m = p[s] > m ? p[s] : m;
        }
        for (int s = 0; s <= t; s++)
            sum += exp(p[s] - m);
        for (int s = 0; s <= t; s++)
            p[s] = exp(p[s] - m) / sum;
        if (lse)
            lse[t] = m + log(sum);
    }
}

void ref_attn_fwd(int n, int T, int C, int nh, const double *qkv, double *y, double *lse)
{
    int hd = C / nh;
    double *P = malloc((size_t)T * T * sizeof *P);
    for (int b = 0; b < n; b++)
        for (int h = 0; h < nh; h++) {
            ref_attn_probs(T, C, nh, qkv, b, h, P, lse ? lse + ((size_t)b * nh + h) * T : NULL);
            const double *v = qkv + (size_t)b * T * 3 * C + 2 * C + (size_t)h * hd;
            for (int t = 0; t < T; t++)
                for (int j = 0; j < hd; j++) {
                    double acc = 0.0;
                    for (int s = 0; s <= t; s++)
                        acc += P[(size_t)t * T + s] * v[(size_t)s * 3 * C + j];
                    y[((size_t)b * T + t) * C + (size_t)h * hd + j] = acc;
                }
        }
    free(P);
}

void ref_attn_bwd(int n, int T, int C, int nh, const double *qkv, const double *dy,
                  double *dqkv)
{
    int hd = C / nh;
    double scale = 1.0 / sqrt((double)hd);
    double *P = malloc((size_t)T * T * sizeof *P), *dS = malloc((size_t)T * T * sizeof *dS);
    memset(dqkv, 0, (size_t)n * T * 3 * C * sizeof *dqkv);
    for (int b = 0; b < n; b++)
        for (int h = 0; h < nh; h++) {
            ref_attn_probs(T, C, nh, qkv, b, h, P, NULL);
            size_t o3 = (size_t)b * T * 3 * C + (size_t)h * hd;
            const double *q = qkv + o3, *k = q + C, *v = q + 2 * C;
            const double *g = dy + (size_t)b * T * C + (size_t)h * hd;
            double *dq = dqkv + o3, *dk = dq + C, *dv = dq + 2 * C;
            /* dP[t][s] = dy_t . v_s; softmax backward: dS = P (dP - sum_s P dP) */
            for (int t = 0; t < T; t++) {
                double rowsum = 0.0;
                for (int s = 0; s <= t; s++) {
                    double dp = 0.0;
                    for (int j = 0; j < hd; j++)
                        dp += g[(size_t)t * C + j] * v[(size_t)s * 3 * C + j];
                    dS[(size_t)t * T + s] = dp;
                    rowsum += P[(size_t)t * T + s] * dp;
                }
                for (int s = 0; s <= t; s++)
                    dS[(size_t)t * T + s] = P[(size_t)t * T + s] * (dS[(size_t)t * T + s] - rowsum);
            }
            for (int t = 0; t < T; t++)
                for (int s = 0; s <= t; s++)
                    for (int j = 0; j < hd; j++) {
                        double ds = dS[(size_t)t * T + s] * scale;
                        dq[(size_t)t * 3 * C + j] += ds * k[(size_t)s * 3 * C + j];
                        dk[(size_t)s * 3 * C + j] += ds * q[(size_t)t * 3 * C + j];
                        dv[(size_t)s * 3 * C + j] += P[(size_t)t * T + s] * g[(size_t)t * C + j];
                    }
        }
    free(P);
    free(dS);
}

/* ---- ops of transformers (issue 16) ---- */

/* Mean and 1/sqrt(biased variance + eps) of one row of d, two-pass. */
static void ln_stats(int d, const double *xr, double eps, double *mean, double *rstd)
{
    double m = 0.0, var = 0.0;
    for (int j = 0; j < d; j++)
        m += xr[j];
    m /= d;
    for (int j = 0; j < d; j++)
        var += (xr[j] - m) * (xr[j] - m);
    *mean = m;
    *rstd = 1.0 / sqrt(var / d + eps);
}

void ref_layernorm_fwd(int rows, int d, const double *x, const double *gamma,
                       const double *beta, double eps, double *y)
{
    for (int r = 0; r < rows; r++) {
        const double *xr = x + (size_t)r * d;
        double mean, rstd;
        ln_stats(d, xr, eps, &mean, &rstd);
        for (int j = 0; j < d; j++)
            y[(size_t)r * d + j] =
                (xr[j] - mean) * rstd * (gamma ? gamma[j] : 1.0) + (beta ? beta[j] : 0.0);
    }
}

void ref_layernorm_bwd(int rows, int d, const double *x, const double *gamma, double eps,
                       const double *dy, double *dx, double *dgamma, double *dbeta)
{
    for (int j = 0; j < d; j++) {
        if (dgamma)
            dgamma[j] = 0.0;
        if (dbeta)
            dbeta[j] = 0.0;
    }
    for (int r = 0; r < rows; r++) {
        const double *xr = x + (size_t)r * d, *g = dy + (size_t)r * d;
        double mean, rstd, a = 0.0, b = 0.0;
        ln_stats(d, xr, eps, &mean, &rstd);
        /* d/dx of y_j = xhat_j gamma_j: with gy = dy*gamma,
         * dx = rstd (gy - mean(gy) - xhat mean(gy xhat)). */
        for (int j = 0; j < d; j++) {
            double gy = g[j] * (gamma ? gamma[j] : 1.0), xhat = (xr[j] - mean) * rstd;
            a += gy;
            b += gy * xhat;
            if (dgamma)
                dgamma[j] += g[j] * xhat;
            if (dbeta)
                dbeta[j] += g[j];
        }
        a /= d;
        b /= d;
        for (int j = 0; j < d; j++) {
            double gy = g[j] * (gamma ? gamma[j] : 1.0), xhat = (xr[j] - mean) * rstd;
            dx[(size_t)r * d + j] = rstd * (gy - a - xhat * b);
        }
    }
}

void ref_embedding_fwd(int rows, int d, const double *ids, const double *w, double *y)
{
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < d; j++)
            y[(size_t)r * d + j] = w[(size_t)ids[r] * d + j];
}

void ref_embedding_bwd(int rows, int d, const double *ids, const double *dy, double *dw)
{
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < d; j++)
            dw[(size_t)ids[r] * d + j] += dy[(size_t)r * d + j];
}

void ref_bcast_add_fwd(int n, size_t m, const double *x, const double *b, double *y)
{
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < m; j++)
            y[(size_t)i * m + j] = x[(size_t)i * m + j] + b[j];
}

void ref_bcast_add_bwd(int n, size_t m, const double *dy, double *db)
{
    for (size_t j = 0; j < m; j++) {
        db[j] = 0.0;
        for (int i = 0; i < n; i++)
            db[j] += dy[(size_t)i * m + j];
    }
}
