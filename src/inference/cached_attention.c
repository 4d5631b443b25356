/* Attention of one new query per sequence over a key-value cache (paper, eq. 1, with n = 1):
 *     o = softmax(q K^T / sqrt(d)) V
 * At position t of a decoding step this is O(t) work per head, and it is the only part of a
 * step that grows with t: the projections and the FFN read the same weights at every
 * position. Per head: a dot product per key, a softmax over them, and a sum of the value
 * rows weighted by it. Both loops take 4 keys at a time, so that 4 independent chains of
 * multiply-adds overlap (one key's dot product is a chain of dependent ones), and visit a
 * row's heads together, so that the cache is read as one stream (at batch 32 and t = 256 the
 * step reads 190 MB of keys and values, more than the weights). */
#include <math.h>

#include "inference/cached_attention.h"
#include "kernels/dot_lanes.h"

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

/* Where one query finds its keys: position j at base + j * ld, plus slots[j] * stride when
 * slots is given (its cache row changes along the sequence). The same offset serves the
 * values. */
typedef struct {
    size_t stride;
    const int *slots;
    int ld;
} key_walk;

static inline size_t key_at(const key_walk *w, int j)
{
    return (w->slots ? (size_t)w->slots[j] * w->stride : 0) + (size_t)j * w->ld;
}

/* One query, nh heads of it, n visible keys: q, o (nh, d); key j of head h at
 * K + key_at(w, j) + h d, value j at V + the same; p (nh, m) receives the weights (0 from n
 * on). The keys are walked in order, each row's nh heads together: the cache is read as a
 * stream, not once per head with a stride. */
static void attend_heads(float *restrict o, float *restrict p, const float *q, const float *K,
                         const float *V, const key_walk *w, int d, int nh, int n, int m)
{
    for (int i = 0; i < nh * d; i++) o[i] = 0.0f;
    for (int h = 0; h < nh; h++)
        for (int j = n > 0 ? n : 0; j < m; j++) p[(size_t)h * m + j] = 0.0f; /* not seen */
    if (n <= 0) return; /* sees no key: 0, as the masked softmax's all-zero row gives */
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
    for (int h = 0; h < nh; h++) { /* softmax of each head's scores */
        float *ph = p + (size_t)h * m, mx = -INFINITY, sum = 0.0f;
        for (j = 0; j < n; j++) {
            ph[j] *= scale;
            mx = ph[j] > mx ? ph[j] : mx;
        }
        for (j = 0; j < n; j++) {
            ph[j] = expf(ph[j] - mx); /* subtracting the max keeps every exponent <= 0 */
            sum += ph[j];
        }
        const float inv = 1.0f / sum;
        for (j = 0; j < n; j++) ph[j] *= inv;
    }
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

/* Q, O (B, H, d); S (B, H, m); position j of cache row r at K + r * stride + j * H * d */
void cached_attention(float *O, float *S, const float *Q, const float *K, const float *V,
                      size_t stride, int B, int H, int d, int m, const int *row,
                      const int *len, const int *slots, int ld_slots)
{
    const int C = H * d;
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
        const int r = row ? row[b] : b;
        const int n = slots ? m : len && len[r] < m ? len[r] : m;
        const key_walk w = {stride, slots ? slots + (size_t)b * ld_slots : NULL, C};
        const size_t base = (slots ? 0 : r * stride) + (size_t)h0 * d;
        const size_t at = (size_t)b * C + (size_t)h0 * d;
        attend_heads(O + at, S + ((size_t)b * H + h0) * m, Q + at, K + base, V + base, &w, d, nh,
                     n, m);
    }
}
