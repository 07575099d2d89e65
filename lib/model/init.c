/* PyTorch's default initialisation of conv2d and linear layers.
 *
 * Weights: kaiming_uniform_(a=sqrt(5)), i.e. U(-b, b) with
 * b = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)), so b = 1/sqrt(fan_in).
 * Biases: U(-1/sqrt(fan_in), 1/sqrt(fan_in)). Both with fan_in = in*kh*kw.
 * Each view draws from its own stream (seed, view index), so adding a layer
 * at the end does not change the others' initial values. Batch norms start
 * like PyTorch's: weight 1, bias 0, running mean 0 and variance 1; layer
 * norms at weight 1, bias 0. Views with init_std > 0 (GPT-2's init, set by
 * the spec's init_std=) start as N(0, init_std) with their biases at 0;
 * embeddings without it as N(0, 1), PyTorch's nn.Embedding. Normal values
 * come from the Box-Muller transform of the view's stream. Values are made on
 * the host in small chunks and copied to the device: no allocation. */
#include <math.h>

#include <cdl/cdl.h>

#include "core/rng.h"
#include "graph.h"

#define CHUNK 1024

/* One N(0, 1) value (Box-Muller's cosine half: one value per two uniforms,
 * so a view's values do not depend on how it is chunked). */
static double normal(rng_state *r)
{
    double u1 = 1.0 - rng_uniform(r);   /* (0, 1]: log is finite */
    double u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void cdl_model_init(cdl_model *m, uint64_t seed)
{
    cdl_backend *be = cdl_model_backend(m);
    float *params = cdl_model_params(m);
    float chunk[CHUNK];
    for (int v = 0; v < cdl_model_nviews(m); v++) {
        const cdl_param_view *pv = cdl_model_view(m, v);
        if (pv->is_bn || pv->is_norm) {   /* PyTorch: weight 1, bias 0 */
            be->ops->fill(be, params + pv->offset, pv->is_bias ? 0.0f : 1.0f, pv->numel);
            continue;
        }
        if (pv->init_std > 0 && pv->is_bias) {
            be->ops->fill(be, params + pv->offset, 0.0f, pv->numel);
            continue;
        }
        double std = pv->init_std > 0 ? pv->init_std : pv->init_std < 0 ? 1.0 : 0.0;
        double bound = pv->fan_in > 0 ? 1.0 / sqrt((double)pv->fan_in) : 0.0;
        rng_state r;
        rng_seed2(&r, seed, (uint64_t)v);
        for (size_t done = 0; done < pv->numel; done += CHUNK) {
            size_t n = pv->numel - done < CHUNK ? pv->numel - done : CHUNK;
            for (size_t i = 0; i < n; i++)
                chunk[i] = (float)(std > 0 ? std * normal(&r)
                                           : (2.0 * rng_uniform(&r) - 1.0) * bound);
            be->ops->to_device(be, params + pv->offset + done, chunk, n * sizeof(float));
        }
    }
    model_reset_buffers(m);
}
