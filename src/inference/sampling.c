/* SPDX-License-Identifier: MIT */
/* Sampling a token from logits (qkv_sampling_probs, qkv_sample_token): temperature, top-k,
 * then top-p (nucleus; Holtzman et al. 2020) over what is left, drawn with the counter-based
 * generator, so that a seed reproduces a text exactly. */
#include <math.h>
#include <string.h>

#include "qkv.h"

/* Whether token a comes before token b: more probable first, ties to the lower id. */
static int before(const float *p, int a, int b)
{
    return p[a] > p[b] || (p[a] == p[b] && a < b);
}

/* Sorts ids so that before() holds along it: heapsort, O(V log V) in place, no allocation. */
static void sort_by_probability(int *ids, int n, const float *p)
{
    for (int start = n / 2 - 1, end = n;; ) {
        int root;
        if (start >= 0) {
            root = start--; /* heapify: a heap whose root comes last in the order */
        } else {
            if (--end <= 0) return;
            int t = ids[0];
            ids[0] = ids[end], ids[end] = t;
            root = 0;
        }
        for (int child; (child = 2 * root + 1) < end; root = child) {
            if (child + 1 < end && before(p, ids[child], ids[child + 1])) child++;
            if (!before(p, ids[root], ids[child])) break;
            int t = ids[root];
            ids[root] = ids[child], ids[child] = t;
        }
    }
}

int qkv_sampling_probs(float *probs, int *order, const float *logits, int V,
                       const qkv_sampling *s)
{
    for (int i = 0; i < V; i++) order[i] = i;
    if (!(s->temperature > 0.0f)) { /* greedy: the first largest logit */
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        memset(probs, 0, (size_t)V * sizeof *probs);
        probs[best] = 1.0f;
        order[0] = best;
        for (int i = 0, j = 1; i < V; i++) /* the rest in id order */
            if (i != best) order[j++] = i;
        return 1;
    }
    /* softmax(logits / temperature), non-finite logits weighing 0 */
    float mx = -INFINITY;
    for (int i = 0; i < V; i++)
        if (isfinite(logits[i]) && logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        probs[i] = isfinite(logits[i]) ? expf((logits[i] - mx) / s->temperature) : 0.0f;
        sum += probs[i];
    }
    for (int i = 0; i < V; i++) probs[i] = (float)(probs[i] / sum);
    sort_by_probability(order, V, probs);
    int kept = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    if (s->top_p < 1.0f) { /* the smallest prefix whose mass reaches top_p of what is kept */
        double mass = 0.0, cum = 0.0;
        for (int i = 0; i < kept; i++) mass += probs[order[i]];
        int j = 0;
        while (j < kept && (j == 0 || cum < (double)s->top_p * mass)) cum += probs[order[j++]];
        kept = j;
    }
    double total = 0.0;
    for (int i = 0; i < kept; i++) total += probs[order[i]];
    for (int i = kept; i < V; i++) probs[order[i]] = 0.0f;
    if (!(total > 0.0)) { /* no finite logit at all: the first token */
        probs[order[0]] = 1.0f;
        return 1;
    }
    for (int i = 0; i < kept; i++) probs[order[i]] = (float)(probs[order[i]] / total);
    return kept;
}

int qkv_sample_token(const float *probs, const int *order, int kept, float u)
{
    double total = 0.0, cum = 0.0;
    for (int i = 0; i < kept; i++) total += probs[order[i]];
    const double target = (double)u * total; /* total is 1 up to rounding */
    for (int i = 0; i < kept; i++) {
        cum += probs[order[i]];
        if (cum > target) return order[i];
    }
    return order[kept - 1];
}

