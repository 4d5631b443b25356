/* SPDX-License-Identifier: MIT */
/* Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"). With the feature map
 * phi(x) = elu(x) + 1 in place of the softmax kernel, eq. 4 of the paper
 *     O_i = phi(Q_i)^T S / (phi(Q_i)^T z + eps),   S = sum_j phi(K_j) V_j^T,   z = sum_j phi(K_j)
 * takes the sums over keys once for all queries: O(N) instead of O(N^2). Causal masking
 * (eq. 8-9) makes S_i, z_i prefix sums over j <= i, i.e. the state of an RNN (eq. 16-20),
 * which both the causal scan and the generation step below update.
 *
 * Gradients, with g_i = dO_i, den_i = phi(Q_i)^T z_i + eps and u_i = S_i^T phi(Q_i) (the
 * numerator, so O_i = u_i / den_i):
 *     a_i = g_i / den_i                                    dL/du_i               (v)
 *     c_i = -(g_i . O_i) / den_i = -(phi(Q_i) . S_i g_i) / den_i^2    dL/dden_i  (scalar)
 *     dphi(Q_i) = S_i a_i + c_i z_i
 *     dphi(K_j) = sum_{i sees j} (phi(Q_i) a_i^T) V_j + c_i phi(Q_i)
 *     dV_j      = sum_{i sees j} (a_i phi(Q_i)^T) phi(K_j)
 * Non-causal, "i sees j" is every i and these are GEMMs. Causal, it is i >= j, and the paper's
 * algorithm 1 evaluates them without an N x N matrix: a forward sweep rebuilds S_i, z_i for
 * dQ, a reverse sweep accumulates R_j = sum_{i >= j} phi(Q_i) a_i^T, r_j = sum c_i phi(Q_i)
 * for dK, dV. dx = dphi(x) * phi'(x) with phi'(x) = min(phi(x), 1): 1 for x > 0, e^x else.
 *
 * Each (batch, head) is independent; heads stay interleaved in memory, so one head's rows are
 * strided by H*d (or H*v) and nothing is transposed. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "ops/cpu/fast_exp.h"
#include "ops/cpu/mask.h"
#include "ops/cpu/attention_parts.h"

/* phi(x) = elu(x) + 1: x + 1 for x > 0, e^x otherwise; always > 0, so den_i > 0 (e^x is
 * exp_poly's, clamped at -88 where it is 0 in float32 anyway). */
static inline float phi(float x)
{
    return x > 0.0f ? x + 1.0f : exp_poly(x < -88.0f ? -88.0f : x);
}

/* y = phi(x) over n values. The exponentials are most of linear attention's work outside its
 * GEMMs (one per element of Q and K, against d v multiply-adds per key that vectorise): taken
 * VEC_LANES at a time in local arrays, the pattern GCC vectorises (fast_exp.h), they cost a
 * sixteenth of libm's expf. */
static void phi_block(float *y, const float *x, int n)
{
    int i = 0;
    float e[CDF_LANES];
    for (; i + CDF_LANES <= n; i += CDF_LANES) {
        /* e^min(x, 0) + max(x, 0): exp_poly(0) is exactly 1, so x > 0 gives x + 1 exactly,
         * and a NaN x goes through the exponential and stays NaN. A select between x + 1
         * and e^x instead compiles to a branch per value (mispredicted on real data); x is
         * read in place (a copy into a local array stalls its loads on the narrower
         * stores, measured). */
        for (int l = 0; l < CDF_LANES; l++) e[l] = x[i + l] > 0.0f ? 0.0f : x[i + l];
        for (int l = 0; l < CDF_LANES; l++) e[l] = e[l] < -88.0f ? -88.0f : e[l];
        for (int l = 0; l < CDF_LANES; l++) e[l] = exp_poly(e[l]);
        for (int l = 0; l < CDF_LANES; l++) e[l] += x[i + l] > 0.0f ? x[i + l] : 0.0f;
        for (int l = 0; l < CDF_LANES; l++) y[i + l] = e[l];
    }
    for (; i < n; i++) y[i] = phi(x[i]);
}

/* phi'(x) from phi(x) itself: 1 where x > 0 (phi > 1), e^x = phi(x) elsewhere. */
static inline float phi_grad(float f)
{
    return f < 1.0f ? f : 1.0f;
}

static inline float dot(const float *x, const float *y, int n)
{
    float s = 0.0f;
    #pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

/* y += alpha x */
static inline void axpy(float *y, float alpha, const float *x, int n)
{
    #pragma omp simd
    for (int i = 0; i < n; i++) y[i] += alpha * x[i];
}

/* The RNN update (eq. 18-19) for one key: S += phi(k) v^T, z += phi(k).
 * S (d, v), z (d), fk = phi(k) (d), vv (v). */
static void absorb_key(float *S, float *z, const float *fk, const float *vv, int d, int v)
{
    for (int a = 0; a < d; a++) {
        z[a] += fk[a];
        axpy(S + (size_t)a * v, fk[a], vv, v);
    }
}

/* The output (eq. 20) for one query: o = S^T phi(q) / (phi(q)^T z + eps), fq = phi(q) (d),
 * o (v). */
static void read_out(float *o, const float *S, const float *z, const float *fq, int d, int v)
{
    float den = QKV_LINEAR_ATTENTION_EPS;
    for (int a = 0; a < d; a++) den += fq[a] * z[a];
    memset(o, 0, (size_t)v * sizeof *o);
    for (int a = 0; a < d; a++) axpy(o, fq[a], S + (size_t)a * v, v);
    const float inv = 1.0f / den;
    for (int c = 0; c < v; c++) o[c] *= inv;
}

/* Per (batch, head) scratch, in floats. Non-causal: phi(K) and dphi(K) (m, d); phi(Q) and
 * W = A S^T (n, d); A (n, v); den and c (n); S and dS (d, v); z and dz (d). Causal: phi(Q)
 * (n, d), phi(K) (m, d), A (n, v), c (n), S (d, v), z (d), w = S g (d). */
static size_t scratch_per_head(int n, int m, int d, int v, int causal)
{
    size_t N = (size_t)n, M = (size_t)m, D = (size_t)d, Vd = (size_t)v;
    if (causal) return (N + M) * D + N * (Vd + 1) + D * Vd + 2 * D;
    return 2 * M * D + 2 * N * D + N * Vd + 2 * N + 2 * D * Vd + 2 * D;
}

size_t qkv_linear_attention_scratch_floats(const qkv_attention_shape *s, int causal)
{
    return (size_t)s->B * s->H * scratch_per_head(s->n, s->m, s->d, s->v, causal);
}

/* ---------------------------------------------------------------------------------------
 * Non-causal: S and z once per (batch, head), then every query in one GEMM.
 * ------------------------------------------------------------------------------------- */

/* The buffers of one (batch, head) inside its slice of scratch. */
typedef struct {
    float *phiK, *dphiK; /* (m, d) */
    float *phiQ, *W;     /* (n, d) */
    float *A;            /* (n, v) */
    float *den, *c;      /* (n)    */
    float *S, *dS;       /* (d, v) */
    float *z, *dz;       /* (d)    */
} full_buffers;

static full_buffers full_buffers_at(float *base, int n, int m, int d, int v)
{
    full_buffers f;
    f.phiK = base, base += (size_t)m * d;
    f.dphiK = base, base += (size_t)m * d;
    f.phiQ = base, base += (size_t)n * d;
    f.W = base, base += (size_t)n * d;
    f.A = base, base += (size_t)n * v;
    f.den = base, base += n;
    f.c = base, base += n;
    f.S = base, base += (size_t)d * v;
    f.dS = base, base += (size_t)d * v;
    f.z = base, base += d;
    f.dz = base;
    return f;
}

/* phi(X) of L rows of one head (row stride ld) into a contiguous (L, d) matrix. */
static void phi_rows(float *out, const float *x, int L, int d, int ld)
{
    for (int j = 0; j < L; j++) phi_block(out + (size_t)j * d, x + (size_t)j * ld, d);
}

/* S = phi(K)^T V (d, v), z = sum_j phi(K_j) (d) over the L valid keys; phi(Q) (n, d) and
 * den_i = phi(Q_i)^T z + eps (n). */
static void full_sums(full_buffers *f, const float *q, const float *k, const float *vv, int n,
                      int L, int d, int v, int H)
{
    phi_rows(f->phiK, k, L, d, H * d);
    if (L > 0)
        gemm(1, 0, d, v, L, 1.0f, f->phiK, d, vv, H * v, 0.0f, f->S, v);
    else
        memset(f->S, 0, (size_t)d * v * sizeof *f->S);
    memset(f->z, 0, (size_t)d * sizeof *f->z);
    for (int j = 0; j < L; j++) axpy(f->z, 1.0f, f->phiK + (size_t)j * d, d);
    phi_rows(f->phiQ, q, n, d, H * d);
    for (int i = 0; i < n; i++)
        f->den[i] = dot(f->phiQ + (size_t)i * d, f->z, d) + QKV_LINEAR_ATTENTION_EPS;
}

static void full_forward(float *o, const float *q, const float *k, const float *vv, int n,
                         int m, int L, int d, int v, int H, float *scratch)
{
    full_buffers f = full_buffers_at(scratch, n, m, d, v);
    full_sums(&f, q, k, vv, n, L, d, v, H);
    gemm(0, 0, n, v, d, 1.0f, f.phiQ, d, f.S, v, 0.0f, o, H * v); /* U = phi(Q) S */
    for (int i = 0; i < n; i++) {
        const float inv = 1.0f / f.den[i];
        for (int c = 0; c < v; c++) o[(size_t)i * H * v + c] *= inv;
    }
}

static void full_backward(float *dq, float *dk, float *dv, const float *g, const float *q,
                          const float *k, const float *vv, int n, int m, int L, int d, int v,
                          int H, float *scratch)
{
    full_buffers f = full_buffers_at(scratch, n, m, d, v);
    full_sums(&f, q, k, vv, n, L, d, v, H);
    for (int i = 0; i < n; i++) { /* A = G / den */
        const float inv = 1.0f / f.den[i];
        for (int c = 0; c < v; c++) f.A[(size_t)i * v + c] = g[(size_t)i * H * v + c] * inv;
    }
    gemm(0, 1, n, d, v, 1.0f, f.A, v, f.S, v, 0.0f, f.W, d); /* W_i = S a_i */
    for (int i = 0; i < n; i++)
        f.c[i] = -dot(f.W + (size_t)i * d, f.phiQ + (size_t)i * d, d) / f.den[i];
    if (dq)
        for (int i = 0; i < n; i++) {
            const float *w = f.W + (size_t)i * d, *pq = f.phiQ + (size_t)i * d;
            float *dqi = dq + (size_t)i * H * d;
            #pragma omp simd
            for (int a = 0; a < d; a++) dqi[a] += (w[a] + f.c[i] * f.z[a]) * phi_grad(pq[a]);
        }
    if ((!dk && !dv) || L == 0) return;
    gemm(1, 0, d, v, n, 1.0f, f.phiQ, d, f.A, v, 0.0f, f.dS, v); /* dS = phi(Q)^T A */
    memset(f.dz, 0, (size_t)d * sizeof *f.dz);
    for (int i = 0; i < n; i++) axpy(f.dz, f.c[i], f.phiQ + (size_t)i * d, d); /* dz */
    if (dv) gemm(0, 0, L, v, d, 1.0f, f.phiK, d, f.dS, v, 1.0f, dv, H * v); /* dV += phi(K) dS */
    if (dk) {
        gemm(0, 1, L, d, v, 1.0f, vv, H * v, f.dS, v, 0.0f, f.dphiK, d); /* V dS^T */
        for (int j = 0; j < L; j++) {
            const float *e = f.dphiK + (size_t)j * d, *pk = f.phiK + (size_t)j * d;
            float *dkj = dk + (size_t)j * H * d;
            #pragma omp simd
            for (int a = 0; a < d; a++) dkj[a] += (e[a] + f.dz[a]) * phi_grad(pk[a]);
        }
    }
}

/* ---------------------------------------------------------------------------------------
 * Causal: query i sees keys j < hi(i) = min(i + (m - n) + 1, L). A prefix scan forward; the
 * backward is algorithm 1 of the paper.
 * ------------------------------------------------------------------------------------- */

/* Where the scans of forward and backward start: phi(Q) (n, d) and phi(K) of the L valid keys
 * (L, d) of one head, and an empty state S (d, v), z (d) (z follows S). */
static void causal_start(float *phiQ, float *phiK, float *S, const float *q, const float *k,
                         int n, int L, int d, int v, int H)
{
    phi_rows(phiQ, q, n, d, H * d);
    phi_rows(phiK, k, L, d, H * d);
    memset(S, 0, ((size_t)d * v + d) * sizeof *S);
}

/* One step of the scan: keys *j .. hi - 1 (those the next query sees and its predecessor did
 * not) into S, z; then *j = hi. */
static void absorb_keys(float *S, float *z, const float *phiK, const float *vv, int *j, int hi,
                        int d, int v, int H)
{
    for (; *j < hi; (*j)++)
        absorb_key(S, z, phiK + (size_t)*j * d, vv + (size_t)*j * H * v, d, v);
}

static void causal_forward(float *o, const float *q, const float *k, const float *vv, int n,
                           int m, int L, int d, int v, int H, float *scratch)
{
    float *phiQ = scratch, *phiK = phiQ + (size_t)n * d;        /* (n, d), (m, d) */
    float *S = phiK + (size_t)m * d, *z = S + (size_t)d * v; /* (d, v), (d)    */
    causal_start(phiQ, phiK, S, q, k, n, L, d, v, H);
    for (int i = 0, j = 0; i < n; i++) {
        absorb_keys(S, z, phiK, vv, &j, mask_causal_keys(i, n, m, L), d, v, H);
        read_out(o + (size_t)i * H * v, S, z, phiQ + (size_t)i * d, d, v);
    }
}

static void causal_backward(float *dq, float *dk, float *dv, const float *g, const float *q,
                            const float *k, const float *vv, int n, int m, int L, int d, int v,
                            int H, float *scratch)
{
    float *phiQ = scratch, *phiK = phiQ + (size_t)n * d; /* (n, d), (m, d) phi(Q), phi(K) */
    float *A = phiK + (size_t)m * d;          /* (n, v)  a_i = g_i / den_i        */
    float *c = A + (size_t)n * v;             /* (n)     c_i                      */
    float *S = c + n, *z = S + (size_t)d * v; /* (d, v), (d): S_i, z_i; then R, r */
    float *w = z + d;                         /* (d)     S_i g_i                  */

    /* Forward sweep: rebuild S_i, z_i; dphi(Q_i) = (S_i g_i) / den_i + c_i z_i. */
    causal_start(phiQ, phiK, S, q, k, n, L, d, v, H);
    for (int i = 0, j = 0; i < n; i++) {
        absorb_keys(S, z, phiK, vv, &j, mask_causal_keys(i, n, m, L), d, v, H);
        const float *fq = phiQ + (size_t)i * d, *gi = g + (size_t)i * H * v;
        float den = QKV_LINEAR_ATTENTION_EPS, wq = 0.0f;
        for (int a = 0; a < d; a++) {
            w[a] = dot(S + (size_t)a * v, gi, v);
            den += fq[a] * z[a];
            wq += fq[a] * w[a];
        }
        const float inv = 1.0f / den;
        c[i] = -wq * inv * inv;
        for (int e = 0; e < v; e++) A[(size_t)i * v + e] = gi[e] * inv;
        if (dq) {
            float *dqi = dq + (size_t)i * H * d;
            #pragma omp simd
            for (int a = 0; a < d; a++)
                dqi[a] += (w[a] * inv + c[i] * z[a]) * phi_grad(fq[a]);
        }
    }
    if (!dk && !dv) return;

    /* Reverse sweep: key j is seen by queries i >= j - (m - n); R = sum phi(Q_i) a_i^T and
     * r = sum c_i phi(Q_i) over them. dphi(K_j) = R V_j + r, dV_j = R^T phi(K_j). */
    float *R = S, *r = z;
    memset(R, 0, ((size_t)d * v + d) * sizeof *R);
    int i = n - 1;
    for (int j = L - 1; j >= 0; j--) {
        for (; i >= 0 && (long)i >= (long)j - (m - n); i--) {
            const float *fq = phiQ + (size_t)i * d;
            for (int a = 0; a < d; a++) {
                r[a] += c[i] * fq[a];
                axpy(R + (size_t)a * v, fq[a], A + (size_t)i * v, v);
            }
        }
        const float *fk = phiK + (size_t)j * d, *vj = vv + (size_t)j * H * v;
        for (int a = 0; a < d; a++) {
            if (dk)
                dk[(size_t)j * H * d + a] +=
                    (dot(R + (size_t)a * v, vj, v) + r[a]) * phi_grad(fk[a]);
            if (dv) axpy(dv + (size_t)j * H * v, fk[a], R + (size_t)a * v, v);
        }
    }
}

/* ---------------------------------------------------------------------------------------
 * Public entry points: one (batch, head) per iteration.
 * ------------------------------------------------------------------------------------- */

/* Q (B, n, H, d), K (B, m, H, d), V (B, m, H, v) -> O (B, n, H, v) */
void qkv_linear_attention_forward(float *O, const qkv_attention_inputs *x,
                                  const qkv_attention_shape *shape, const int *valid_lens,
                                  int causal, float *scratch)
{
    const float *Q = x->Q, *K = x->K, *V = x->V;
    const int B = shape->B, H = shape->H, n = shape->n, m = shape->m, d = shape->d,
              v = shape->v;
    const size_t per = scratch_per_head(n, m, d, v, causal);
    const qkv_mask keys = {valid_lens, 0, 0}; /* j < valid_lens[b]; the scan adds causality */
    #pragma omp parallel for collapse(2) if (B * H > 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const head_offsets at = head_offsets_of(b, h, H, n, m, d, v);
            const float *q = Q + at.q, *k = K + at.k, *vv = V + at.v;
            float *o = O + at.o, *s = scratch + ((size_t)b * H + h) * per;
            int L = mask_visible_keys(&keys, b, 0, n, m);
            if (causal)
                causal_forward(o, q, k, vv, n, m, L, d, v, H, s);
            else
                full_forward(o, q, k, vv, n, m, L, d, v, H, s);
        }
}

void qkv_linear_attention_backward(qkv_attention_grads *dx, const float *dO,
                                   const qkv_attention_inputs *x,
                                   const qkv_attention_shape *shape, const int *valid_lens,
                                   int causal, float *scratch)
{
    float *dQ = dx->dQ, *dK = dx->dK, *dV = dx->dV;
    const float *Q = x->Q, *K = x->K, *V = x->V;
    const int B = shape->B, H = shape->H, n = shape->n, m = shape->m, d = shape->d,
              v = shape->v;
    if (!dQ && !dK && !dV) return;
    const size_t per = scratch_per_head(n, m, d, v, causal);
    const qkv_mask keys = {valid_lens, 0, 0}; /* j < valid_lens[b]; the scan adds causality */
    #pragma omp parallel for collapse(2) if (B * H > 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const head_offsets at = head_offsets_of(b, h, H, n, m, d, v);
            float *dq = dQ ? dQ + at.q : NULL, *dk = dK ? dK + at.k : NULL;
            float *dv = dV ? dV + at.v : NULL;
            float *s = scratch + ((size_t)b * H + h) * per;
            int L = mask_visible_keys(&keys, b, 0, n, m);
            const float *g = dO + at.o, *q = Q + at.q, *k = K + at.k, *vv = V + at.v;
            if (causal)
                causal_backward(dq, dk, dv, g, q, k, vv, n, m, L, d, v, H, s);
            else
                full_backward(dq, dk, dv, g, q, k, vv, n, m, L, d, v, H, s);
        }
}

/* ---------------------------------------------------------------------------------------
 * The recurrent form (eq. 16-20): one token per call, O(H d v) at any position.
 * ------------------------------------------------------------------------------------- */

qkv_status qkv_linear_attention_state_init(qkv_linear_attention_state *s, int H, int d, int v,
                                           qkv_error *err)
{
    *s = (qkv_linear_attention_state){0};
    if (H <= 0 || d <= 0 || v <= 0)
        return qkv_fail(err, QKV_ERR_ARG,
                        "linear attention state: heads %d, key dim %d, value dim %d must be > 0",
                        H, d, v);
    s->S = calloc((size_t)H * d * v, sizeof *s->S);
    s->z = calloc((size_t)H * d, sizeof *s->z);
    s->phi = malloc(2 * (size_t)d * sizeof *s->phi);
    if (!s->S || !s->z || !s->phi) {
        qkv_linear_attention_state_free(s);
        return qkv_fail(err, QKV_ERR_NOMEM,
                        "out of memory for a linear attention state (%d heads, %d x %d)", H, d,
                        v);
    }
    s->H = H, s->d = d, s->v = v;
    return QKV_OK;
}

void qkv_linear_attention_state_reset(qkv_linear_attention_state *s)
{
    if (s->S) memset(s->S, 0, (size_t)s->H * s->d * s->v * sizeof *s->S);
    if (s->z) memset(s->z, 0, (size_t)s->H * s->d * sizeof *s->z);
    s->t = 0;
}

void qkv_linear_attention_state_free(qkv_linear_attention_state *s)
{
    free(s->S), free(s->z), free(s->phi);
    *s = (qkv_linear_attention_state){0};
}

/* q, k (H, d), v (H, v) -> o (H, v) */
void qkv_linear_attention_step(float *o, qkv_linear_attention_state *s, const float *q,
                               const float *k, const float *v)
{
    const int d = s->d, dv = s->v;
    for (int h = 0; h < s->H; h++) {
        float *S = s->S + (size_t)h * d * dv, *z = s->z + (size_t)h * d;
        float *fk = s->phi, *fq = s->phi + d;
        phi_block(fk, k + (size_t)h * d, d);
        phi_block(fq, q + (size_t)h * d, d);
        absorb_key(S, z, fk, v + (size_t)h * dv, d, dv);
        read_out(o + (size_t)h * dv, S, z, fq, d, dv);
    }
    s->t++;
}
