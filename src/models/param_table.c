/* The parameter-table walk shared by both models; see param_table.h. */
#include <stdio.h>

#include "models/param_table.h"

float *param_take(param_walker *w, const char *name, int rows, int cols)
{
    size_t n = (size_t)rows * (cols ? cols : 1);
    if (w->tensors) {
        qkv_param_info *t = &w->tensors[w->count];
        snprintf(w->names[w->count], sizeof w->names[0], "%s", name);
        t->name = w->names[w->count];
        t->ndim = cols ? 2 : 1;
        t->shape[0] = rows, t->shape[1] = cols;
        t->offset = w->offset, t->numel = n;
    }
    float *p = w->base ? w->base + w->offset : NULL;
    w->offset += n, w->count++;
    return p;
}

norm_w param_take_norm(param_walker *w, const char *prefix, int C)
{
    char name[64];
    norm_w n;
    snprintf(name, sizeof name, "%s.gamma", prefix), n.g = param_take(w, name, C, 0);
    snprintf(name, sizeof name, "%s.beta", prefix), n.b = param_take(w, name, C, 0);
    return n;
}

ffn_w param_take_ffn(param_walker *w, const char *prefix, int C, int F)
{
    char name[64];
    ffn_w f;
    snprintf(name, sizeof name, "%s.W1", prefix), f.W1 = param_take(w, name, F, C);
    snprintf(name, sizeof name, "%s.b1", prefix), f.b1 = param_take(w, name, F, 0);
    snprintf(name, sizeof name, "%s.W2", prefix), f.W2 = param_take(w, name, C, F);
    snprintf(name, sizeof name, "%s.b2", prefix), f.b2 = param_take(w, name, C, 0);
    return f;
}

qkv_mha_weights param_take_mha(param_walker *w, const char *prefix, int C, int bias)
{
    char name[64];
    qkv_mha_weights a = {0};
    float **W[4] = {&a.W_q, &a.W_k, &a.W_v, &a.W_o}, **b[4] = {&a.b_q, &a.b_k, &a.b_v, &a.b_o};
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s.W_%c", prefix, "qkvo"[i]);
        *W[i] = param_take(w, name, C, C);
        if (!bias) continue;
        snprintf(name, sizeof name, "%s.b_%c", prefix, "qkvo"[i]);
        *b[i] = param_take(w, name, C, 0);
    }
    return a;
}
