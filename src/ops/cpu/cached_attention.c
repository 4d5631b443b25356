/* SPDX-License-Identifier: MIT */
/* Attention of one new query per sequence over a key-value cache (paper, eq. 1, with n = 1):
 *     o = softmax(q K^T / sqrt(d)) V
 * At position t of a decoding step this is O(t) work per head, and it is the only part of a
 * step that grows with t: the projections and the FFN read the same weights at every
 * position. Per head: a dot product per key, a softmax over them, and a sum of the value
 * rows weighted by it. Both loops take 4 keys at a time, so that 4 independent chains of
 * multiply-adds overlap (one key's dot product is a chain of dependent ones), and visit a
 * row's heads together, so that the cache is read as one stream (at batch 32 and t = 256 the
 * step reads 190 MB of keys and values, more than the weights). */
#include <immintrin.h>
#include <math.h>

#include "ops/cpu/cached_attention.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/dot_lanes.h"

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

/* Work (keys x features over every row and head) below which one thread does it all: about
 * 64 keys of a 512-wide model, some 20 us, where waking a second thread costs ~10 us. */
#define PARALLEL_MIN (1L << 15)

/* q . k over d features, in LANES partial sums so that it vectorises. */
static float dot(const float *q, const float *k, int d)
{
    float a[LANES] = {0};
    int i = 0;
    for (; i + LANES <= d; i += LANES)
        for (int l = 0; l < LANES; l++) a[l] = MULADD(q[i + l], k[i + l], a[l]);
    float s = lanes_sum(a);
    for (; i < d; i++) s = MULADD(q[i], k[i], s);
    return s;
}

/* s[c] = q . k[c] for 4 keys, each exactly as dot() computes it. */
static void dot_4keys(float *s, const float *q, const float *const k[4], int d)
{
    float a0[LANES] = {0}, a1[LANES] = {0}, a2[LANES] = {0}, a3[LANES] = {0};
    int i = 0;
    for (; i + LANES <= d; i += LANES)
        for (int l = 0; l < LANES; l++) {
            a0[l] = MULADD(q[i + l], k[0][i + l], a0[l]);
            a1[l] = MULADD(q[i + l], k[1][i + l], a1[l]);
            a2[l] = MULADD(q[i + l], k[2][i + l], a2[l]);
            a3[l] = MULADD(q[i + l], k[3][i + l], a3[l]);
        }
    s[0] = lanes_sum(a0), s[1] = lanes_sum(a1), s[2] = lanes_sum(a2), s[3] = lanes_sum(a3);
    for (; i < d; i++)
        for (int c = 0; c < 4; c++) s[c] = MULADD(q[i], k[c][i], s[c]);
}

/* o += p[0] v[0] + p[1] v[1] + p[2] v[2] + p[3] v[3]: o is loaded and stored once per 4
 * values instead of once per value. */
static void axpy_4values(float *restrict o, const float *p, const float *const v[4], int d)
{
    int i = 0;
    for (; i + LANES <= d; i += LANES)
        for (int l = 0; l < LANES; l++)
            o[i + l] = MULADD(p[3], v[3][i + l], MULADD(p[2], v[2][i + l],
                       MULADD(p[1], v[1][i + l], MULADD(p[0], v[0][i + l], o[i + l]))));
    for (; i < d; i++)
        o[i] = MULADD(p[3], v[3][i], MULADD(p[2], v[2][i], MULADD(p[1], v[1][i],
               MULADD(p[0], v[0][i], o[i]))));
}

/* o += p v over d features. */
static void axpy(float *restrict o, float p, const float *v, int d)
{
    int i = 0;
    for (; i + LANES <= d; i += LANES)
        for (int l = 0; l < LANES; l++) o[i + l] = MULADD(p, v[i + l], o[i + l]);
    for (; i < d; i++) o[i] = MULADD(p, v[i], o[i]);
}

/* Where one query finds its keys: position j at base + j * ld, plus ancestry[j] * stride
 * when ancestry is given (its cache row changes along the sequence). The same offset serves
 * the values. */
typedef struct {
    size_t stride;
    const int *ancestry;
    int ld;
} key_walk;

static inline size_t key_at(const key_walk *w, int j)
{
    return (w->ancestry ? (size_t)w->ancestry[j] * w->stride : 0) + (size_t)j * w->ld;
}

/* p (nh, m): each head's n scores scaled by `scale`, then their softmax, in place. */
static void softmax_scores(float *p, float scale, int nh, int n, int m)
{
    for (int h = 0; h < nh; h++) {
        float *ph = p + (size_t)h * m, mx = -INFINITY, sum = 0.0f;
        for (int j = 0; j < n; j++) {
            ph[j] *= scale;
            mx = ph[j] > mx ? ph[j] : mx;
        }
        for (int j = 0; j < n; j++) {
            ph[j] = expf(ph[j] - mx); /* subtracting the max keeps every exponent <= 0 */
            sum += ph[j];
        }
        const float inv = 1.0f / sum;
        for (int j = 0; j < n; j++) ph[j] *= inv;
    }
}

/* Zero o (nh, d) and the weights of the keys a query does not see (p[h, n..m)); returns whether
 * it sees any key (one that sees none gives 0, as the masked softmax's all-zero row does). */
static int clear_unseen(float *restrict o, float *restrict p, int d, int nh, int n, int m)
{
    for (int i = 0; i < nh * d; i++) o[i] = 0.0f;
    for (int h = 0; h < nh; h++)
        for (int j = n > 0 ? n : 0; j < m; j++) p[(size_t)h * m + j] = 0.0f;
    return n > 0;
}

/* One query, nh heads of it, n visible keys: q, o (nh, d); key j of head h at
 * K + key_at(w, j) + h d, value j at V + the same; p (nh, m) receives the weights (0 from n
 * on). The keys are walked in order, each row's nh heads together: the cache is read as a
 * stream, not once per head with a stride. */
static void attend_heads(float *restrict o, float *restrict p, const float *q, const float *K,
                         const float *V, const key_walk *w, int d, int nh, int n, int m)
{
    if (!clear_unseen(o, p, d, nh, n, m)) return;
    const float scale = 1.0f / sqrtf((float)d);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        const size_t at[4] = {key_at(w, j), key_at(w, j + 1), key_at(w, j + 2), key_at(w, j + 3)};
        for (int h = 0; h < nh; h++) {
            const size_t hd = (size_t)h * d;
            const float *k[4] = {K + at[0] + hd, K + at[1] + hd, K + at[2] + hd, K + at[3] + hd};
            dot_4keys(p + (size_t)h * m + j, q + hd, k, d);
        }
    }
    for (; j < n; j++)
        for (int h = 0; h < nh; h++)
            p[(size_t)h * m + j] = dot(q + (size_t)h * d, K + key_at(w, j) + (size_t)h * d, d);
    softmax_scores(p, scale, nh, n, m);
    for (j = 0; j + 4 <= n; j += 4) {
        const size_t at[4] = {key_at(w, j), key_at(w, j + 1), key_at(w, j + 2), key_at(w, j + 3)};
        for (int h = 0; h < nh; h++) {
            const size_t hd = (size_t)h * d;
            const float *v[4] = {V + at[0] + hd, V + at[1] + hd, V + at[2] + hd, V + at[3] + hd};
            axpy_4values(o + hd, p + (size_t)h * m + j, v, d);
        }
    }
    for (; j < n; j++)
        for (int h = 0; h < nh; h++)
            axpy(o + (size_t)h * d, p[(size_t)h * m + j], V + key_at(w, j) + (size_t)h * d, d);
}

/* ---- a bf16 cache --------------------------------------------------------------------------
 * The keys and values are stored in bf16 (ops/cpu/bf16.h: the top half of a float32, rounded
 * to nearest even when written, relative error <= 2^-8) and widened back to float32 exactly
 * when read, by a 16-bit shift; q, the products, the sums, the softmax and o stay float32. So
 * the only rounding beyond the float32 kernel's is the cache's own, while the bytes read per
 * key, which is what a step at a long position waits for, are halved. (VDPBF16PS would also
 * round q to bf16, a second 2^-8 per product, to save multiply-adds that are not the
 * bottleneck: at position 10,000 the step streams 2 x 10,000 x C cache values per layer and
 * does one multiply-add per value read.) */

static inline __mmask16 first16(int n) { return n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }

/* 16 bf16 values from x (the first n of mask m; the rest 0), widened to float32 */
AVX512 static inline __m512 widen16(const uint16_t *x, __mmask16 m)
{
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x)), 16));
}

/* s[c] = q . k[c] for 4 keys of d bf16 features, 16 float32 lanes each */
AVX512 static void dot_4keys_bf16(float *s, const float *q, const uint16_t *const k[4], int d)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int i = 0; i < d; i += 16) {
        const __mmask16 mk = first16(d - i);
        const __m512 qv = _mm512_maskz_loadu_ps(mk, q + i);
        a0 = _mm512_fmadd_ps(qv, widen16(k[0] + i, mk), a0);
        a1 = _mm512_fmadd_ps(qv, widen16(k[1] + i, mk), a1);
        a2 = _mm512_fmadd_ps(qv, widen16(k[2] + i, mk), a2);
        a3 = _mm512_fmadd_ps(qv, widen16(k[3] + i, mk), a3);
    }
    s[0] = _mm512_reduce_add_ps(a0), s[1] = _mm512_reduce_add_ps(a1);
    s[2] = _mm512_reduce_add_ps(a2), s[3] = _mm512_reduce_add_ps(a3);
}

AVX512 static float dot_bf16(const float *q, const uint16_t *k, int d)
{
    __m512 a = _mm512_setzero_ps();
    for (int i = 0; i < d; i += 16) {
        const __mmask16 mk = first16(d - i);
        a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, q + i), widen16(k + i, mk), a);
    }
    return _mm512_reduce_add_ps(a);
}

/* o += p[0] v[0] + ... + p[nv - 1] v[nv - 1] for nv <= 4 bf16 value rows: o is loaded and
 * stored once per 4 values */
AVX512 static void axpy_values_bf16(float *o, const float *p, const uint16_t *const v[4], int nv,
                                    int d)
{
    for (int i = 0; i < d; i += 16) {
        const __mmask16 mk = first16(d - i);
        __m512 acc = _mm512_maskz_loadu_ps(mk, o + i);
        for (int c = 0; c < nv; c++)
            acc = _mm512_fmadd_ps(_mm512_set1_ps(p[c]), widen16(v[c] + i, mk), acc);
        _mm512_mask_storeu_ps(o + i, mk, acc);
    }
}

/* attend_heads with K, V in bf16 (AVX-512 F, BW and VL) */
AVX512 static void attend_heads_bf16(float *restrict o, float *restrict p, const float *q,
                                     const uint16_t *K, const uint16_t *V, const key_walk *w,
                                     int d, int nh, int n, int m)
{
    if (!clear_unseen(o, p, d, nh, n, m)) return;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        const size_t at[4] = {key_at(w, j), key_at(w, j + 1), key_at(w, j + 2), key_at(w, j + 3)};
        for (int h = 0; h < nh; h++) {
            const size_t hd = (size_t)h * d;
            const uint16_t *k[4] = {K + at[0] + hd, K + at[1] + hd, K + at[2] + hd,
                                    K + at[3] + hd};
            dot_4keys_bf16(p + (size_t)h * m + j, q + hd, k, d);
        }
    }
    for (; j < n; j++)
        for (int h = 0; h < nh; h++)
            p[(size_t)h * m + j] = dot_bf16(q + (size_t)h * d, K + key_at(w, j) + (size_t)h * d, d);
    softmax_scores(p, 1.0f / sqrtf((float)d), nh, n, m);
    for (j = 0; j < n; j += 4) {
        const int nv = n - j < 4 ? n - j : 4;
        size_t at[4] = {0};
        for (int c = 0; c < nv; c++) at[c] = key_at(w, j + c);
        for (int h = 0; h < nh; h++) {
            const size_t hd = (size_t)h * d;
            const uint16_t *v[4] = {V + at[0] + hd, V + at[1] + hd, V + at[2] + hd,
                                    V + at[3] + hd};
            axpy_values_bf16(o + hd, p + (size_t)h * m + j, v, nv, d);
        }
    }
}

/* The same without AVX-512 (any x86-64 or other CPU): one value at a time. */
static void attend_heads_bf16_plain(float *restrict o, float *restrict p, const float *q,
                                    const uint16_t *K, const uint16_t *V, const key_walk *w,
                                    int d, int nh, int n, int m)
{
    if (!clear_unseen(o, p, d, nh, n, m)) return;
    for (int j = 0; j < n; j++)
        for (int h = 0; h < nh; h++) {
            const uint16_t *k = K + key_at(w, j) + (size_t)h * d;
            float s = 0.0f;
            for (int i = 0; i < d; i++) s = MULADD(q[(size_t)h * d + i], bf16_to_float(k[i]), s);
            p[(size_t)h * m + j] = s;
        }
    softmax_scores(p, 1.0f / sqrtf((float)d), nh, n, m);
    for (int j = 0; j < n; j++)
        for (int h = 0; h < nh; h++) {
            const uint16_t *v = V + key_at(w, j) + (size_t)h * d;
            const float ph = p[(size_t)h * m + j];
            for (int i = 0; i < d; i++)
                o[(size_t)h * d + i] = MULADD(ph, bf16_to_float(v[i]), o[(size_t)h * d + i]);
        }
}

int cached_attention_bf16_fast(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

void kv_cache_store(void *cache, kv_dtype kv, size_t at, const float *x, size_t n)
{
    if (kv == KV_BF16) {
        uint16_t *c = (uint16_t *)cache + at;
        for (size_t i = 0; i < n; i++) c[i] = bf16_from_float(x[i]);
    } else {
        float *c = (float *)cache + at;
        for (size_t i = 0; i < n; i++) c[i] = x[i];
    }
}

void cached_attention(float *O, float *S, const float *Q, const kv_view *kv, int B, int H, int d,
                      int m)
{
    const int C = H * d, fast = kv->type == KV_BF16 && cached_attention_bf16_fast();
    const int ancestry = kv->walk == KV_ANCESTRY;
    /* Work items: whole rows when there are rows enough to share among threads, else half
     * rows (one sequence has only its heads to split): each half is a contiguous run of every
     * cache row, read as one stream. An item per head would read 256 bytes of every 2 KB row
     * (d_model 512), which the prefetchers follow poorly: at position 10,000 a token of a
     * 2-layer LM took 8.0 ms that way, 6.7 ms in halves (2 threads). A head's arithmetic is
     * the same in any grouping. */
    const int groups = B >= 4 ? 1 : H % 2 == 0 ? 2 : H, nh = H / groups;
    /* dynamic: a thread that wakes late finds the items taken, not waiting */
    #pragma omp parallel for schedule(dynamic) if ((long)B * H * m * d >= PARALLEL_MIN)
    for (int item = 0; item < B * groups; item++) {
        const int b = item / groups, h0 = (item % groups) * nh;
        const int n = kv->len[b] < m ? kv->len[b] : m;
        const key_walk w = {kv->stride, ancestry ? kv->ancestry + (size_t)b * kv->ld : NULL, C};
        const size_t base = (ancestry ? 0 : (size_t)kv->row[b] * kv->stride) + (size_t)h0 * d;
        const size_t at = (size_t)b * C + (size_t)h0 * d;
        float *o = O + at, *p = S + ((size_t)b * H + h0) * m;
        if (kv->type != KV_BF16)
            attend_heads(o, p, Q + at, (const float *)kv->K + base, (const float *)kv->V + base,
                         &w, d, nh, n, m);
        else if (fast)
            attend_heads_bf16(o, p, Q + at, (const uint16_t *)kv->K + base,
                              (const uint16_t *)kv->V + base, &w, d, nh, n, m);
        else
            attend_heads_bf16_plain(o, p, Q + at, (const uint16_t *)kv->K + base,
                                    (const uint16_t *)kv->V + base, &w, d, nh, n, m);
    }
}
