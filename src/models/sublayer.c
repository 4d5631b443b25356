/* SPDX-License-Identifier: MIT */
/* The residual connection and LayerNorm around every sublayer (paper, section 3.1):
 *   post-norm: out = LayerNorm(x + dropout(Sublayer(x)))
 *   pre-norm:  out = x + dropout(Sublayer(LayerNorm(x)))
 * in its three uses: forward over every position, backward, and one decoding step. */
#include "models/sublayer.h"

uint64_t dropout_site_seed(uint64_t step_seed, int stack, int layer, int site)
{
    uint64_t id = ((uint64_t)stack << 40) | ((uint64_t)layer << 20) | (uint64_t)site;
    return ((uint64_t)qkv_random_u32(step_seed, 2 * id) << 32) |
           qkv_random_u32(step_seed, 2 * id + 1);
}

const float *sublayer_in(const backend *be, const sublayer_ctx *k, sublayer_acts *a,
                         const float *x, const qkv_layernorm_weights *n)
{
    const stack_dims *d = k->d;
    if (!d->pre_norm) return x;
    be->ops->layernorm_forward(a->u, a->u_mean, a->u_rstd, x, n, (int)k->N, d->C, d->ln_eps);
    return a->u;
}

void sublayer_out(const backend *be, const sublayer_ctx *k, sublayer_acts *a, const float *x,
                  const qkv_layernorm_weights *n)
{
    const stack_dims *d = k->d;
    if (d->pre_norm)
        be->ops->residual_forward(a->out, x, a->s, k->N * d->C, k->drop);
    else
        be->ops->addnorm_forward(a->out, &a->post, x, a->s, n, (int)k->N, d->C, d->ln_eps,
                                 k->drop);
}

/* dh: d(out) on entry; on return the residual path's share of d(x), and ds = d(sublayer
 * output). din is work space, zeroed for the sublayer's backward to accumulate into. */
void sublayer_out_backward(const backend *be, const sublayer_ctx *k, const sublayer_acts *a,
                           float *dh, float *ds, float *din, const qkv_layernorm_weights *n,
                           qkv_layernorm_weights *dn)
{
    const stack_dims *d = k->d;
    const size_t NC = k->N * d->C;
    be->ops->copy(din, dh, NC);
    be->ops->zero(dh, NC);
    be->ops->zero(ds, NC);
    if (d->pre_norm)
        be->ops->residual_backward(dh, ds, din, NC, k->drop);
    else
        be->ops->addnorm_backward(dh, ds, dn, din, &a->post, n, (int)k->N, d->C, k->drop,
                                  k->scratch);
    be->ops->zero(din, NC);
}

void sublayer_in_backward(const backend *be, const sublayer_ctx *k, const sublayer_acts *a,
                          float *dh, const float *din, const float *x,
                          const qkv_layernorm_weights *n, qkv_layernorm_weights *dn)
{
    const stack_dims *d = k->d;
    if (!d->pre_norm)
        be->ops->add(dh, din, k->N * d->C);
    else
        be->ops->layernorm_backward(dh, dn, din, x, a->u_mean, a->u_rstd, n, (int)k->N, d->C);
}

const float *sublayer_step_in(const backend *be, const stack_dims *d, decode_state *st, int B,
                              const qkv_layernorm_weights *n)
{
    if (!d->pre_norm) return st->x;
    be->ops->layernorm_forward(st->u, st->mean, st->rstd, st->x, n, B, d->C, d->ln_eps);
    return st->u;
}

void sublayer_step_out(const backend *be, const stack_dims *d, decode_state *st, int B,
                       const qkv_layernorm_weights *n)
{
    be->ops->add(st->x, st->s, (size_t)B * d->C);
    if (!d->pre_norm)
        be->ops->layernorm_forward(st->x, st->mean, st->rstd, st->x, n, B, d->C, d->ln_eps);
}
