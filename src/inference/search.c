/* SPDX-License-Identifier: MIT */
/* The rules between logits and choice (search.h), greedy's argmax and a sampled choice. */
#include "inference/search.h"

decoding_rules decoding_rules_of(const decoder_info *info)
{
    decoding_rules r = {info->start, info->suppress_pad, 0, info->forced_eos, NULL, 0};
    return r;
}

void rules_filter(const decoding_rules *r, float *z, int V, int t)
{
    const int forced = rules_forced(r, t);
    if (forced >= 0) {
        for (int v = 0; v < V; v++)
            if (v != forced) z[v] = -INFINITY;
        return;
    }
    if (r->suppress_pad && QKV_PAD < V) z[QKV_PAD] = -INFINITY;
    if (r->text_only)
        for (int v = 0; v < QKV_N_RESERVED && v < V - 1; v++) z[v] = -INFINITY;
}

int argmax(const float *z, int V)
{
    int best = 0;
    for (int v = 1; v < V; v++)
        if (z[v] > z[best]) best = v;
    return best;
}

int choose_token(const decoding_rules *r, const qkv_sampling *s, uint64_t seed, uint64_t draw,
                 float *z, int V, int t, sampler *work)
{
    rules_filter(r, z, V, t);
    if (!(s->temperature > 0.0f)) return argmax(z, V);
    const int kept = qkv_sampling_probs(work->probs, work->order, z, V, s);
    return qkv_sample_token(work->probs, work->order, kept, qkv_random_uniform(seed, draw));
}
