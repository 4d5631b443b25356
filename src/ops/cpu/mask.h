/* SPDX-License-Identifier: MIT */
/* qkv_mask's rule in one place, for every kernel that applies it (the masked softmax, flash
 * attention, linear attention's causal scan). Private to the library. */
#ifndef QKV_MASK_H
#define QKV_MASK_H

#include "qkv.h"

/* Of the first len keys, how many query i of n sees under the causal rule: keys
 * j <= i + (m - n), so that the last query sees all m and a chunk of new queries sees a
 * cached prefix. Never negative. */
static inline int mask_causal_keys(int i, int n, int m, int len)
{
    if (i + (m - n) + 1 < len) len = i + (m - n) + 1;
    return len < 0 ? 0 : len;
}

/* Number of keys row (b, i) may see, counting from key 0: both masks are prefixes, so a
 * count is the whole of it. */
static inline int mask_visible_keys(const qkv_mask *mask, int b, int i, int n, int m)
{
    int len = m;
    if (!mask) return len;
    if (mask->valid_lens) {
        int l = mask->per_query ? mask->valid_lens[(size_t)b * n + i] : mask->valid_lens[b];
        if (l < len) len = l;
    }
    if (mask->causal) return mask_causal_keys(i, n, m, len);
    return len < 0 ? 0 : len;
}

#endif
