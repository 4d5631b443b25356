/* SPDX-License-Identifier: MIT */
/* Flash attention (Dao et al. 2022, "FlashAttention"; Dao 2023, "FlashAttention-2"): exact
 * scaled dot-product attention, O = dropout(softmax(Q K^T / sqrt d)) V, computed one tile of
 * BR queries x BC keys at a time, so the n x m weights never exist.
 *
 * Forward (FA-2, algorithm 1), per query tile, over key tiles j with running row max mx and
 * row sum l:
 *     S = Q_i K_j^T / sqrt d,   mx' = max(mx, rowmax S),   P~ = exp(S - mx'),
 *     l' = e^(mx - mx') l + rowsum P~,   O_i <- e^(mx - mx') O_i + dropout(P~) V_j,
 * and at the end O_i /= l, L_i = mx + log l (the row log-sum-exp, all backward keeps).
 * Backward (FA-2, algorithm 2) recomputes each tile's weights from L:
 *     P = exp(S - L),   dV_j += dropout(P)^T dO_i,   dP = dropout'(dO_i V_j^T),
 *     dS = P (dP - D),  D_i = rowsum(dO_i O_i) (= rowsum(P dP), precomputed once),
 *     dQ_i += dS K_j / sqrt d,   dK_j += dS^T Q_i / sqrt d.
 * The masks are prefixes (row i sees keys j < len_i), so a tile no row sees is skipped: a
 * causal mask halves the work. Tiles are GEMMs through OpenBLAS, which runs single-threaded
 * inside our parallel regions; the row loops run over the fixed tile width BC so that GCC
 * vectorises them at -O2, exp included (exp_poly: libm's expf would not vectorise). */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/internal.h"
#include "ops/cpu/dropout_mask.h"
#include "ops/cpu/fast_exp.h"
#include "ops/cpu/mask.h"
#include "ops/cpu/attention_parts.h"

/* BR x BC tiles: a tile of scores and one of their gradients sit on each thread's stack
 * (2 BR BC floats = 128 KiB) and in L2 with the rows of Q, K, V they come from. Measured on
 * this AMD EPYC: 128 x 128 is 5% faster than 64 x 128, and larger tiles gain nothing more. */
enum { BR = 128, BC = 128, LANES = 8 };
/* Key tiles one sweep of backward over the query tiles handles (see backward_key_tiles). */
enum { KEY_RUN = 4 };

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* max_j s[j] over one row of BC scores, in LANES running maxima so that it vectorises. */
static float row_max(const float *s)
{
    float m[LANES];
    for (int l = 0; l < LANES; l++) m[l] = s[l];
    for (int j = LANES; j < BC; j += LANES)
        for (int l = 0; l < LANES; l++) m[l] = s[j + l] > m[l] ? s[j + l] : m[l];
    float mx = m[0];
    for (int l = 1; l < LANES; l++) mx = m[l] > mx ? m[l] : mx;
    return mx;
}

/* s[j] <- e^(s[j] - shift) over one row of BC entries (-INFINITY gives exactly 0). The clamp
 * has a loop of its own: fused with exp_poly, GCC turns it into a branch. */
static void row_exp(float *s, float shift)
{
    for (int j = 0; j < BC; j++) {
        float x = s[j] - shift;
        s[j] = x > -88.0f ? x : -88.0f;
    }
    for (int j = 0; j < BC; j++) s[j] = exp_poly(s[j]);
}

/* sum_j s[j] over one row of BC entries, in LANES partial sums so that it vectorises. */
static float row_sum(const float *s)
{
    float part[LANES] = {0};
    for (int j = 0; j < BC; j += LANES)
        for (int l = 0; l < LANES; l++) part[l] += s[j + l];
    float sum = 0.0f;
    for (int l = 0; l < LANES; l++) sum += part[l];
    return sum;
}

/* y[j] *= x[j] over one row of BC entries. */
static void row_mul(float *restrict y, const float *restrict x)
{
    for (int j = 0; j < BC; j++) y[j] *= x[j];
}

/* tile[r, :] = -c[r] (c NULL: 0) for r < rows: the C of a GEMM with beta = 1, which thus
 * subtracts c from its product for free (and OpenBLAS's beta = 0 pass is slower than this). */
static void fill_rows(float *tile, const float *c, int rows)
{
    for (int r = 0; r < rows; r++) {
        const float x = c ? -c[r] : 0.0f;
        for (int j = 0; j < BC; j++) tile[(size_t)r * BC + j] = x;
    }
}

/* Row r of a tile that starts at key j0 sees cnt = clamp(len_r - j0, 0, cols) of its keys:
 * mask the rest of the row (up to BC) with -INFINITY. */
static int mask_row(float *s, int len, int j0, int cols)
{
    int cnt = imax(0, imin(len - j0, cols));
    for (int j = cnt; j < BC; j++) s[j] = -INFINITY;
    return cnt;
}

/* Everything one call shares: tensors, sizes, mask and dropout. */
typedef struct {
    const float *Q, *K, *V, *dO, *L, *D;
    float *dQ, *dK, *dV;
    int H, n, m, d, v;
    const qkv_mask *mask;
    float p, scale;
    uint64_t seed, offset; /* the dropout's stream and first counter (qkv_dropout) */
} flash_args;

/* Query rows [i0, i0 + rows) of head (b, h) and the number of keys each sees. */
typedef struct {
    int b, h, i0, rows, kmax; /* kmax: the most keys any of the rows sees */
    int len[BR];
} query_tile;

static query_tile query_tile_at(const flash_args *a, int b, int h, int i0)
{
    query_tile t = {b, h, i0, imin(BR, a->n - i0), 0, {0}};
    for (int r = 0; r < t.rows; r++) {
        t.len[r] = mask_visible_keys(a->mask, b, i0 + r, a->n, a->m);
        t.kmax = imax(t.kmax, t.len[r]);
    }
    return t;
}

/* Dropout counter of weight (b, h, i, j): its flat index into (B, H, n, m), as qkv_attention. */
static inline uint64_t weight_index(const flash_args *a, const query_tile *t, int r, int j)
{
    return a->offset + (((uint64_t)t->b * a->H + t->h) * a->n + t->i0 + r) * a->m + j;
}

/* ----------------------------------------------------------------------------------------
 * Forward
 * ---------------------------------------------------------------------------------------- */

/* O and L of the rows of one query tile. */
static void forward_tile(float *O, float *L, const flash_args *a, const query_tile *t)
{
    const int H = a->H, d = a->d, v = a->v, rows = t->rows;
    const dropout_rule drop = dropout_rule_of(a->p, a->seed); /* the weights' dropout */
    const float *q = a->Q + head_row(t->b, a->n, t->i0, H, t->h, d); /* (rows, d) */
    float *o = O + head_row(t->b, a->n, t->i0, H, t->h, v);         /* (rows, v) */
    float *lse = L + ((size_t)t->b * H + t->h) * a->n + t->i0;              /* (rows) */
    float S[BR * BC], mx[BR], l[BR], alpha[BR];
    memset(S, 0, sizeof S);
    for (int r = 0; r < rows; r++) {
        mx[r] = -INFINITY, l[r] = 0.0f;
        memset(o + (size_t)r * H * v, 0, (size_t)v * sizeof *o);
    }
    for (int j0 = 0; j0 < t->kmax; j0 += BC) {
        const int cols = imin(BC, t->kmax - j0);
        const float *k = a->K + head_row(t->b, a->m, j0, H, t->h, d); /* (cols, d) */
        const float *vv = a->V + head_row(t->b, a->m, j0, H, t->h, v); /* (cols, v) */
        fill_rows(S, NULL, rows); /* S = Q K^T / sqrt d */
        gemm(0, 1, rows, cols, d, a->scale, q, H * d, k, H * d, 1.0f, S, BC);
        for (int r = 0; r < rows; r++) {
            float *s = S + (size_t)r * BC;
            int cnt = mask_row(s, t->len[r], j0, cols);
            if (cnt == 0) { /* this row's keys ended in an earlier tile */
                memset(s, 0, BC * sizeof *s);
                alpha[r] = 1.0f;
                continue;
            }
            float m_new = fmaxf(mx[r], row_max(s));
            alpha[r] = expf(mx[r] - m_new); /* rescales what was summed under the old max */
            row_exp(s, m_new);
            l[r] = alpha[r] * l[r] + row_sum(s);
            mx[r] = m_new;
            if (a->p > 0.0f)
                for (int j = 0; j < cnt; j++)
                    s[j] = dropout_apply(&drop, weight_index(a, t, r, j0 + j), s[j]);
        }
        for (int r = 0; r < rows; r++)
            if (alpha[r] != 1.0f)
                for (int c = 0; c < v; c++) o[(size_t)r * H * v + c] *= alpha[r];
        gemm(0, 0, rows, v, cols, 1.0f, S, BC, vv, H * v, 1.0f, o, H * v); /* O += P V */
    }
    for (int r = 0; r < rows; r++) {
        if (l[r] > 0.0f) {
            const float inv = 1.0f / l[r];
            for (int c = 0; c < v; c++) o[(size_t)r * H * v + c] *= inv;
            lse[r] = mx[r] + logf(l[r]);
        } else {
            lse[r] = -INFINITY; /* no visible key: O row stays 0 */
        }
    }
}

/* Q (B, n, H, d), K (B, m, H, d), V (B, m, H, v) -> O (B, n, H, v), L (B, H, n) */
void qkv_flash_attention_forward(float *O, float *L, const qkv_attention_inputs *x,
                                 const qkv_attention_shape *s, const qkv_mask *mask,
                                 qkv_dropout drop)
{
    const int B = s->B, H = s->H, n = s->n, d = s->d;
    const flash_args a = {x->Q, x->K, x->V, NULL, NULL, NULL, NULL, NULL, NULL, H, n, s->m, d,
                          s->v, mask, drop.p, 1.0f / sqrtf((float)d), drop.seed, drop.offset};
    const int tiles = (n + BR - 1) / BR;
    const long tasks = (long)B * H * tiles;
    #pragma omp parallel for schedule(dynamic) if (tasks > 1)
    for (long task = 0; task < tasks; task++) {
        int bh = (int)(task / tiles), i0 = (int)(task % tiles) * BR;
        query_tile t = query_tile_at(&a, bh / H, bh % H, i0);
        forward_tile(O, L, &a, &t);
    }
}

/* ----------------------------------------------------------------------------------------
 * Backward
 * ---------------------------------------------------------------------------------------- */

size_t qkv_flash_attention_scratch_floats(const qkv_attention_shape *s)
{
    return (size_t)s->B * s->H * s->n;
}

/* Weights and score gradients of the tile (query tile t, keys [j0, j0 + cols)):
 * P (rows, BC) <- dropout(P), and, if want_dS, dS (rows, BC) <- P (dP - D). The GEMMs start
 * from -L and -D, so they give S - L and dP - D. Both loop orders of backward go through
 * here, so they see the same numbers. */
static void backward_tile(float *P, float *dS, const flash_args *a, const query_tile *t,
                          int j0, int cols, int want_dS)
{
    const int H = a->H, d = a->d, v = a->v, rows = t->rows;
    const dropout_rule drop = dropout_rule_of(a->p, a->seed); /* the weights' dropout */
    const float *q = a->Q + head_row(t->b, a->n, t->i0, H, t->h, d);
    const float *dout = a->dO + head_row(t->b, a->n, t->i0, H, t->h, v);
    const float *k = a->K + head_row(t->b, a->m, j0, H, t->h, d);
    const float *vv = a->V + head_row(t->b, a->m, j0, H, t->h, v);
    const float *lse = a->L + ((size_t)t->b * H + t->h) * a->n + t->i0;
    const float *D = a->D + ((size_t)t->b * H + t->h) * a->n + t->i0;
    fill_rows(P, lse, rows);
    gemm(0, 1, rows, cols, d, a->scale, q, H * d, k, H * d, 1.0f, P, BC); /* S - L */
    if (want_dS) { /* dP - D; with dropout, D comes off below, after dropout' of dO V^T */
        fill_rows(dS, a->p > 0.0f ? NULL : D, rows);
        gemm(0, 1, rows, cols, v, 1.0f, dout, H * v, vv, H * v, 1.0f, dS, BC);
    }
    for (int r = 0; r < rows; r++) {
        float *pr = P + (size_t)r * BC, *ds = dS + (size_t)r * BC;
        int cnt = mask_row(pr, t->len[r], j0, cols);
        if (cnt == 0) {
            memset(pr, 0, BC * sizeof *pr);
            if (want_dS) memset(ds, 0, BC * sizeof *ds);
            continue;
        }
        row_exp(pr, 0.0f); /* P = exp(S - L), 0 where masked */
        if (a->p > 0.0f) {
            for (int j = 0; j < cnt; j++) {
                const uint32_t keep = dropout_mask(&drop, weight_index(a, t, r, j0 + j));
                if (want_dS) ds[j] = pr[j] * (dropout_select(ds[j] * drop.scale, keep) - D[r]);
                pr[j] = dropout_select(pr[j] * drop.scale, keep);
            }
            if (want_dS)
                for (int j = cnt; j < BC; j++) ds[j] = 0.0f;
        } else if (want_dS) {
            row_mul(ds, pr);
        }
    }
}

/* dK_j, dV_j (and, when with_dQ, dQ) for the key tiles j0 in [j_begin, j_end) of head
 * (b, h), from every query tile that sees them: query tiles in order, and for each the key
 * tiles in order. A run of several key tiles reads each query tile (Q_i, dO_i, dQ_i) from
 * memory once for all of them. */
static void backward_key_tiles(const flash_args *a, int b, int h, int j_begin, int j_end,
                               int with_dQ, float *P, float *dS)
{
    const int H = a->H, d = a->d, v = a->v;
    const int want_dS = a->dK || (with_dQ && a->dQ);
    for (int i0 = 0; i0 < a->n; i0 += BR) {
        query_tile t = query_tile_at(a, b, h, i0);
        const float *q = a->Q + head_row(b, a->n, i0, H, h, d);
        const float *dout = a->dO + head_row(b, a->n, i0, H, h, v);
        for (int j0 = j_begin; j0 < j_end && j0 < t.kmax; j0 += BC) { /* keys the tile sees */
            const int cols = imin(BC, a->m - j0);
            const float *k = a->K + head_row(b, a->m, j0, H, h, d);
            backward_tile(P, dS, a, &t, j0, cols, want_dS);
            if (a->dV)
                gemm(1, 0, cols, v, t.rows, 1.0f, P, BC, dout, H * v, 1.0f,
                     a->dV + head_row(b, a->m, j0, H, h, v), H * v);
            if (a->dK)
                gemm(1, 0, cols, d, t.rows, a->scale, dS, BC, q, H * d, 1.0f,
                     a->dK + head_row(b, a->m, j0, H, h, d), H * d);
            if (with_dQ && a->dQ)
                gemm(0, 0, t.rows, d, cols, a->scale, dS, BC, k, H * d, 1.0f,
                     a->dQ + head_row(b, a->n, i0, H, h, d), H * d);
        }
    }
}

/* dQ of one query tile from every key tile it sees, in key order. */
static void backward_query_tile(const flash_args *a, int b, int h, int i0, float *P, float *dS)
{
    const int H = a->H, d = a->d;
    query_tile t = query_tile_at(a, b, h, i0);
    for (int j0 = 0; j0 < t.kmax; j0 += BC) {
        const int cols = imin(BC, a->m - j0);
        const float *k = a->K + head_row(b, a->m, j0, H, h, d);
        backward_tile(P, dS, a, &t, j0, cols, 1);
        gemm(0, 0, t.rows, d, cols, a->scale, dS, BC, k, H * d, 1.0f,
             a->dQ + head_row(b, a->n, i0, H, h, d), H * d);
    }
}

/* With every (batch, head) on one thread, dQ, dK and dV come from one pass over the tiles
 * (five GEMMs a tile). With fewer (batch, head) pairs than threads that would leave threads
 * idle, so dK, dV are taken over (batch, head, key tile) and dQ over (batch, head, query tile)
 * instead, recomputing the weights once more. Either way each gradient element receives the
 * same tile products in the same order, so the result does not depend on the choice. */
void qkv_flash_attention_backward(qkv_attention_grads *dx, const float *dO, const float *O,
                                  const float *L, const qkv_attention_inputs *x,
                                  const qkv_attention_shape *s, const qkv_mask *mask,
                                  qkv_dropout drop, float *scratch)
{
    float *dQ = dx->dQ, *dK = dx->dK, *dV = dx->dV;
    const int B = s->B, H = s->H, n = s->n, m = s->m, d = s->d, v = s->v;
    if (!dQ && !dK && !dV) return;
    float *D = scratch; /* (B, H, n): D_i = rowsum(dO_i * O_i) */
    #pragma omp parallel for collapse(2) if ((long)B * H * n * v > 32768)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < n; i++) {
                const float *o = O + head_row(b, n, i, H, h, v);
                const float *g = dO + head_row(b, n, i, H, h, v);
                float s = 0.0f;
                for (int c = 0; c < v; c++) s += g[c] * o[c];
                D[((size_t)b * H + h) * n + i] = s;
            }
    const flash_args a = {x->Q, x->K, x->V, dO, L, D, dQ, dK, dV, H, n, m, d, v,
                          mask, drop.p, 1.0f / sqrtf((float)d), drop.seed, drop.offset};
    const int key_tiles = (m + BC - 1) / BC, query_tiles = (n + BR - 1) / BR;
    const int BH = B * H;
    if (dQ && (dK || dV) && BH >= omp_get_max_threads()) {
        #pragma omp parallel
        {
            float P[BR * BC] = {0}, dS[BR * BC] = {0};
            #pragma omp for schedule(dynamic)
            for (int bh = 0; bh < BH; bh++)
                for (int j0 = 0; j0 < m; j0 += KEY_RUN * BC)
                    backward_key_tiles(&a, bh / H, bh % H, j0, imin(m, j0 + KEY_RUN * BC), 1,
                                       P, dS);
        }
        return;
    }
    if (dK || dV) {
        const long tasks = (long)BH * key_tiles;
        #pragma omp parallel if (tasks > 1)
        {
            float P[BR * BC] = {0}, dS[BR * BC] = {0};
            #pragma omp for schedule(dynamic)
            for (long task = 0; task < tasks; task++) {
                int bh = (int)(task / key_tiles), j0 = (int)(task % key_tiles) * BC;
                backward_key_tiles(&a, bh / H, bh % H, j0, imin(m, j0 + BC), 0, P, dS);
            }
        }
    }
    if (dQ) {
        const long tasks = (long)BH * query_tiles;
        #pragma omp parallel if (tasks > 1)
        {
            float P[BR * BC] = {0}, dS[BR * BC] = {0};
            #pragma omp for schedule(dynamic)
            for (long task = 0; task < tasks; task++) {
                int bh = (int)(task / query_tiles), i0 = (int)(task % query_tiles) * BR;
                backward_query_tile(&a, bh / H, bh % H, i0, P, dS);
            }
        }
    }
}
