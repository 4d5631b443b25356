/* The residual sublayer connection of both models; see sublayer.h. */
#include <string.h>

#include "models/sublayer.h"

uint64_t dropout_site_seed(uint64_t step_seed, int stack, int layer, int site)
{
    uint64_t id = ((uint64_t)stack << 40) | ((uint64_t)layer << 20) | (uint64_t)site;
    return ((uint64_t)qkv_random_u32(step_seed, 2 * id) << 32) |
           qkv_random_u32(step_seed, 2 * id + 1);
}

const float *sublayer_in(const sublayer_ctx *k, sublayer_acts *a, const float *x,
                         const norm_w *n)
{
    if (!k->sh->pre_norm) return x;
    qkv_layernorm_forward(a->u, a->u_mean, a->u_rstd, x, n->g, n->b, (int)k->N, k->sh->C,
                          k->sh->ln_eps);
    return a->u;
}

void sublayer_out(const sublayer_ctx *k, sublayer_acts *a, const float *x, const norm_w *n)
{
    if (k->sh->pre_norm)
        qkv_residual_forward(a->out, x, a->s, k->N * k->sh->C, k->p, k->seed);
    else
        qkv_addnorm_forward(a->out, a->z, a->mean, a->rstd, x, a->s, n->g, n->b, (int)k->N,
                            k->sh->C, k->sh->ln_eps, k->p, k->seed);
}

void sublayer_out_backward(const sublayer_ctx *k, const sublayer_acts *a, float *dx, float *ds,
                           const float *dout, const norm_w *n, norm_w *dn)
{
    size_t NC = k->N * k->sh->C;
    memset(ds, 0, NC * sizeof *ds);
    if (k->sh->pre_norm)
        qkv_residual_backward(dx, ds, dout, NC, k->p, k->seed);
    else
        qkv_addnorm_backward(dx, ds, dn->g, dn->b, dout, a->z, a->mean, a->rstd, n->g, (int)k->N,
                             k->sh->C, k->p, k->seed, k->scratch);
}

void sublayer_in_backward(const sublayer_ctx *k, const sublayer_acts *a, float *dx,
                          const float *din, const float *x, const norm_w *n, norm_w *dn)
{
    if (!k->sh->pre_norm) {
        const size_t NC = k->N * k->sh->C;
        #pragma omp parallel for simd if (NC > 65536)
        for (size_t i = 0; i < NC; i++) dx[i] += din[i];
        return;
    }
    qkv_layernorm_backward(dx, dn->g, dn->b, din, x, a->u_mean, a->u_rstd, n->g, (int)k->N,
                           k->sh->C);
}
