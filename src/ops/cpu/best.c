/* SPDX-License-Identifier: MIT */
/* The k best tokens of a row of logits and its log normaliser; see best.h. */
#include <immintrin.h>
#include <math.h>

#include "ops/cpu/best.h"
#include "ops/cpu/exp16.h"

#define AVX512 __attribute__((target("avx512f,avx512dq")))

static inline int banned_id(uint32_t banned, int id) { return id < 32 && (banned >> id & 1); }

static void list_clear(int *ids, float *vals, int k)
{
    for (int i = 0; i < k; i++) ids[i] = -1, vals[i] = -INFINITY;
}

/* v, which beats the list's last, into its place (after the values equal to it: those have
 * lower ids); returns the new last value, the bar for the next. */
static inline float list_insert(int *ids, float *vals, int k, int id, float v)
{
    int at = k - 1;
    for (; at > 0 && vals[at - 1] < v; at--) vals[at] = vals[at - 1], ids[at] = ids[at - 1];
    vals[at] = v, ids[at] = id;
    return vals[k - 1];
}

void row_best(const float *z, int V, int k, uint32_t banned, int *ids, float *vals)
{
    list_clear(ids, vals, k);
    float bar = -INFINITY;
    for (int v = 0; v < V; v++)
        if (z[v] > bar && !banned_id(banned, v)) bar = list_insert(ids, vals, k, v, z[v]);
}

int all_finite(const float *z, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(z[i])) return 0;
    return 1;
}

double log_normaliser(const float *z, int V)
{
    float mx = z[0];
    for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    double s = 0.0;
    for (int v = 0; v < V; v++) s += exp((double)z[v] - mx);
    return mx + log(s);
}

static inline __mmask16 lanes16(int n)
{
    return n >= 16 ? 0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

AVX512 int chunk_best(const float *y, int n, int first, int k, uint32_t banned, int *ids,
                      float *vals, lse_part *part)
{
    list_clear(ids, vals, k);
    float bar = -INFINITY;
    const __m512 none = _mm512_set1_ps(-INFINITY);
    __m512 mx = none;
    __mmask16 bad = 0;
    for (int j = 0; j < n; j += 16) {
        const __mmask16 m = lanes16(n - j);
        const __m512 v = _mm512_mask_loadu_ps(none, m, y + j);
        /* VFPCLASSPS: QNaN 0x01, +inf 0x08, -inf 0x10, SNaN 0x80 */
        bad |= _mm512_mask_fpclass_ps_mask(m, v, 0x99);
        mx = _mm512_max_ps(mx, v);
        /* most lanes fall below the bar: only those above it are looked at one by one */
        for (__mmask16 hit = _mm512_cmp_ps_mask(v, _mm512_set1_ps(bar), _CMP_GT_OQ); hit;
             hit &= (__mmask16)(hit - 1)) {
            const int lane = __builtin_ctz(hit), id = first + j + lane;
            if (y[j + lane] > bar && !banned_id(banned, id))
                bar = list_insert(ids, vals, k, id, y[j + lane]);
        }
    }
    if (!part) return bad != 0;
    const float m = _mm512_reduce_max_ps(mx);
    part->max = m, part->sum = 0.0;
    if (m == -INFINITY) return bad != 0;
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int j = 0; j < n; j += 16) {
        const __mmask16 lanes = lanes16(n - j);
        const __m512 e = _mm512_maskz_mov_ps(
            lanes, exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(none, lanes, y + j), _mm512_set1_ps(m))));
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    part->sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    return bad != 0;
}

void best_merge(const int *ids, const float *vals, const lse_part *parts, int n_chunks, int k,
                int *out_ids, float *out_vals, double *lse)
{
    list_clear(out_ids, out_vals, k);
    float bar = -INFINITY;
    for (int c = 0; c < n_chunks; c++)
        for (int i = 0; i < k && ids[c * k + i] >= 0; i++)
            if (vals[c * k + i] > bar)
                bar = list_insert(out_ids, out_vals, k, ids[c * k + i], vals[c * k + i]);
    if (!lse) return;
    float M = -INFINITY;
    for (int c = 0; c < n_chunks; c++) M = parts[c].max > M ? parts[c].max : M;
    double s = 0.0;
    for (int c = 0; c < n_chunks; c++)
        if (parts[c].max > -INFINITY) s += parts[c].sum * exp((double)parts[c].max - M);
    *lse = M == -INFINITY ? -INFINITY : M + log(s);
}
