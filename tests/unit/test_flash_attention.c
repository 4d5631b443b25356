/* SPDX-License-Identifier: MIT */
/* Flash attention (src/ops/cpu/flash_attention.c): the tiled, O(N)-memory form of scaled
 * dot-product attention must give what the materialised kernel gives.
 *
 *   equals_materialised  O and dQ, dK, dV against qkv_attention_forward/_backward (which
 *                   tests/unit/test_parity_attention.c holds to PyTorch) on many shapes: n != m,
 *                   d != v, H > 1, sizes that are not multiples of the 128 x 128 tiles, valid
 *                   lengths per sequence and per query (0 included), causal with n = m, n < m
 *                   and n > m (whole rows masked), dropout. Every tensor: max |flash - ref|
 *                   <= 1e-5 max |ref|. L against the log-sum-exp of the visible scores in double
 *                   (1e-5 + 1e-5 |L|); a row that sees no key has O = 0, dQ = 0 and L = -inf
 *                   exactly, and a key no row sees gets dK = dV = 0 exactly. Outputs start as
 *                   NaN, scratch is fenced, and backward must give the same bits whichever loop
 *                   order the thread count picks.
 *   accumulates     backward adds to the gradient buffers; NULL gradients are skipped.
 *   gradcheck_*     central differences (TU_FD_STEP, TU_FD_TOL) of L = sum(O * r) against
 *                   backward for dQ, dK, dV, with masks, dropout and tile-crossing sizes.
 *   parity_*        files from tests/parity/make_flash_reference.py: PyTorch's softmax
 *                   attention and torch.logsumexp, forward 1e-5 + 1e-5 |torch|, gradients
 *                   1e-4 max |torch|.
 *   long_sequence   B = 1, H = 2, N = 4096, d = v = 64, causal with a valid length: rows
 *                   spread over the sequence (tile edges, first and last) against the
 *                   materialised kernel run on just those rows; dK, dV by the identities
 *                   sum_j dV_j = sum_i dO_i and sum_j dK_j = 0; backward in exactly
 *                   qkv_flash_attention_scratch_floats = B H N floats. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define FLASH_REL 1e-5f

/* n floats, all NaN: an output that must be written everywhere. */
static float *nans(size_t n)
{
    float *x = tu_zeros(n);
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

/* Scratch of exactly n floats followed by FENCE sentinels, which no call may overwrite. */
enum { FENCE = 64 };
static const float SENTINEL = -12345.678f;
static float *fenced(size_t n)
{
    float *x = tu_zeros(n + FENCE);
    for (size_t i = n; i < n + FENCE; i++) x[i] = SENTINEL;
    return x;
}
static void check_fence(const float *x, size_t n)
{
    for (size_t i = n; i < n + FENCE; i++)
        if (x[i] != SENTINEL) fail_msg("scratch written past its %zu floats (at +%zu)", n, i - n);
}

/* uniform(-a, a) */
static float *rand_scaled(size_t n, uint64_t seed, float a)
{
    float *x = tu_rand(n, seed);
    for (size_t i = 0; i < n; i++) x[i] *= a;
    return x;
}

/* Keys row (b, i) sees under mask: the prefix rule of include/qkv.h. */
static int visible(const qkv_mask *mask, int b, int i, int n, int m)
{
    int len = m;
    if (mask->valid_lens) {
        int l = mask->per_query ? mask->valid_lens[(size_t)b * n + i] : mask->valid_lens[b];
        len = l < len ? l : len;
    }
    if (mask->causal && i + (m - n) + 1 < len) len = i + (m - n) + 1;
    return len < 0 ? 0 : len;
}

/* ----------------------------------------------------------------------------------------
 * Against the materialised kernel
 * ---------------------------------------------------------------------------------------- */

typedef enum { LENS_NONE, LENS_SEQ, LENS_QUERY } lens_kind;

typedef struct {
    const char *name;
    int B, H, n, m, d, v;
    lens_kind lens;
    int causal;
    float p;
} flash_case;

/* Valid lengths for a case: spread over [0, m], with 0 and m always among them. */
static int *make_lens(const flash_case *c)
{
    if (c->lens == LENS_NONE) return NULL;
    size_t count = c->lens == LENS_SEQ ? (size_t)c->B : (size_t)c->B * c->n;
    int *lens = calloc(count, sizeof *lens);
    assert_non_null(lens);
    for (size_t i = 0; i < count; i++)
        lens[i] = (int)(qkv_random_u32(77, i) % (uint32_t)(c->m + 1));
    lens[0] = c->m;
    if (count > 1) lens[count - 1] = 0;
    if (count > 2) lens[1] = c->m / 3;
    return lens;
}

/* log sum_j exp(s_ij) over the keys row (b, h, i) sees, in double; -inf if none. */
static double ref_lse(const float *Q, const float *K, const qkv_mask *mask, int b, int h, int i,
                      int H, int n, int m, int d)
{
    int len = visible(mask, b, i, n, m);
    if (len == 0) return -INFINITY;
    const float *q = Q + (((size_t)b * n + i) * H + h) * d;
    double mx = -INFINITY, sum = 0.0, *s = malloc((size_t)len * sizeof *s);
    assert_non_null(s);
    for (int j = 0; j < len; j++) {
        const float *k = K + (((size_t)b * m + j) * H + h) * d;
        double dot = 0.0;
        for (int e = 0; e < d; e++) dot += (double)q[e] * k[e];
        s[j] = dot / sqrt((double)d);
        mx = s[j] > mx ? s[j] : mx;
    }
    for (int j = 0; j < len; j++) sum += exp(s[j] - mx);
    free(s);
    return mx + log(sum);
}

static void run_case(const flash_case *c)
{
    const int B = c->B, H = c->H, n = c->n, m = c->m, d = c->d, v = c->v;
    const size_t nQ = (size_t)B * n * H * d, nK = (size_t)B * m * H * d;
    const size_t nV = (size_t)B * m * H * v, nO = (size_t)B * n * H * v, nL = (size_t)B * H * n;
    const uint64_t seed = 2024;
    int *lens = make_lens(c);
    qkv_mask mask = {lens, c->lens == LENS_QUERY, c->causal};
    /* Q scaled so that weights range from peaked to flat, not all near 1/m. */
    float *Q = rand_scaled(nQ, 11, 3.0f), *K = tu_rand(nK, 12), *V = tu_rand(nV, 13);
    float *dO = tu_rand(nO, 14);
    const qkv_attention_inputs x = {Q, K, V};
    const qkv_attention_shape shape = {B, H, n, m, d, v};
    const qkv_dropout drop = {c->p, seed, 0};

    /* The reference: materialised weights. */
    size_t nP = (size_t)B * H * n * m;
    float *P = nans(nP), *ref_scratch = tu_zeros(qkv_attention_scratch_floats(&shape));
    float *O_ref = nans(nO), *dQ_ref = tu_zeros(nQ), *dK_ref = tu_zeros(nK), *dV_ref = tu_zeros(nV);
    qkv_attention_forward(O_ref, P, &x, &shape, &mask, drop, ref_scratch);
    qkv_attention_backward(&(qkv_attention_grads){dQ_ref, dK_ref, dV_ref}, dO, P, &x, &shape, drop,
                           ref_scratch);

    float *O = nans(nO), *L = nans(nL);
    size_t ns = qkv_flash_attention_scratch_floats(&shape);
    assert_int_equal(ns, nL);
    float *scratch = fenced(ns);
    float *dQ = tu_zeros(nQ), *dK = tu_zeros(nK), *dV = tu_zeros(nV);
    qkv_flash_attention_forward(O, L, &x, &shape, &mask, drop);
    qkv_flash_attention_backward(&(qkv_attention_grads){dQ, dK, dV}, dO, O, L, &x, &shape, &mask,
                                 drop, scratch);
    check_fence(scratch, ns);

    char name[128];
#define CHECK(t, got, want, count)                                \
    snprintf(name, sizeof name, "%s: %s", c->name, t);            \
    tu_check_grad(name, got, want, count, FLASH_REL)
    CHECK("O", O, O_ref, nO);
    CHECK("dQ", dQ, dQ_ref, nQ);
    CHECK("dK", dK, dK_ref, nK);
    CHECK("dV", dV, dV_ref, nV);
#undef CHECK

    /* L, and rows that see nothing: exactly zero output and query gradient, L = -inf. */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < n; i++) {
                double want = ref_lse(Q, K, &mask, b, h, i, H, n, m, d);
                float got = L[((size_t)b * H + h) * n + i];
                if (isinf(want)) {
                    if (!(isinf(got) && got < 0))
                        fail_msg("%s: L[%d,%d,%d] = %g for a row with no key", c->name, b, h, i,
                                 (double)got);
                    for (int e = 0; e < v; e++)
                        if (O[(((size_t)b * n + i) * H + h) * v + e] != 0.0f)
                            fail_msg("%s: masked row (%d,%d,%d) has O != 0", c->name, b, h, i);
                    for (int e = 0; e < d; e++)
                        if (dQ[(((size_t)b * n + i) * H + h) * d + e] != 0.0f)
                            fail_msg("%s: masked row (%d,%d,%d) has dQ != 0", c->name, b, h, i);
                } else if (fabs(got - want) > 1e-5 + 1e-5 * fabs(want)) {
                    fail_msg("%s: L[%d,%d,%d] = %.9g, want %.9g", c->name, b, h, i, (double)got,
                             want);
                }
            }
    /* Keys no query of the sequence sees: exactly zero gradient. */
    for (int b = 0; b < B; b++) {
        int seen = 0;
        for (int i = 0; i < n; i++) {
            int len = visible(&mask, b, i, n, m);
            seen = len > seen ? len : seen;
        }
        for (size_t e = (size_t)seen * H * d; e < (size_t)m * H * d; e++)
            if (dK[(size_t)b * m * H * d + e] != 0.0f)
                fail_msg("%s: unseen key of sequence %d has dK != 0", c->name, b);
        for (size_t e = (size_t)seen * H * v; e < (size_t)m * H * v; e++)
            if (dV[(size_t)b * m * H * v + e] != 0.0f)
                fail_msg("%s: unseen key of sequence %d has dV != 0", c->name, b);
    }

    /* The other loop order (one thread with B H pairs, or more threads than pairs) must give
     * the same bits. */
    int threads = qkv_get_threads();
    float *dQ2 = tu_zeros(nQ), *dK2 = tu_zeros(nK), *dV2 = tu_zeros(nV);
    qkv_set_threads(threads > B * H ? 1 : B * H + 1);
    qkv_flash_attention_backward(&(qkv_attention_grads){dQ2, dK2, dV2}, dO, O, L, &x, &shape,
                                 &mask, drop, scratch);
    qkv_set_threads(threads);
    if (memcmp(dQ, dQ2, nQ * sizeof *dQ) || memcmp(dK, dK2, nK * sizeof *dK) ||
        memcmp(dV, dV2, nV * sizeof *dV))
        fail_msg("%s: backward differs between thread counts", c->name);

    free(lens), free(Q), free(K), free(V), free(dO), free(P), free(ref_scratch);
    free(O_ref), free(dQ_ref), free(dK_ref), free(dV_ref), free(O), free(L), free(scratch);
    free(dQ), free(dK), free(dV), free(dQ2), free(dK2), free(dV2);
}

static void test_equals_materialised(void **state)
{
    (void)state;
    static const flash_case cases[] = {
        /* name                B  H    n     m   d   v  lens        causal  p */
        {"one query one key",  1, 1,   1,    1,  4,  3, LENS_NONE,  0, 0.0f},
        {"rectangular",        2, 3,   5,    7,  8,  4, LENS_NONE,  0, 0.0f},
        {"odd tiles",          1, 2, 131,  257, 16, 24, LENS_NONE,  0, 0.0f},
        {"per sequence",       3, 2, 130,  259, 32,  8, LENS_SEQ,   0, 0.0f},
        {"per query",          2, 2,  97,  150,  5,  7, LENS_QUERY, 0, 0.0f},
        {"few queries",        1, 1,   3, 1000, 64, 64, LENS_NONE,  0, 0.0f},
        {"head dim 64",        1, 4, 256,  256, 64, 64, LENS_NONE,  0, 0.0f},
        {"causal",             2, 2, 200,  200, 16, 16, LENS_NONE,  1, 0.0f},
        {"causal n < m",       1, 3,  70,  300,  8, 12, LENS_NONE,  1, 0.0f},
        {"causal n > m",       2, 1, 150,   90,  8,  8, LENS_NONE,  1, 0.0f},
        {"causal per seq",     2, 2, 129,  129, 16, 16, LENS_SEQ,   1, 0.0f},
        {"dropout",            2, 3, 131,  129,  8,  8, LENS_NONE,  0, 0.5f},
        {"causal query drop",  2, 2, 160,  300, 16,  8, LENS_QUERY, 1, 0.3f},
        {"seq drop n > m",     3, 1, 140,   70,  6,  5, LENS_SEQ,   1, 0.1f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i]);
}

/* Backward adds into its buffers (twice = double), and NULL gradients are simply skipped. */
static void test_accumulates(void **state)
{
    (void)state;
    enum { B = 2, H = 2, n = 70, m = 140, d = 8, v = 4 };
    const size_t nQ = (size_t)B * n * H * d, nK = (size_t)B * m * H * d;
    const size_t nV = (size_t)B * m * H * v, nO = (size_t)B * n * H * v;
    qkv_mask mask = {NULL, 0, 1};
    float *Q = rand_scaled(nQ, 21, 3.0f), *K = tu_rand(nK, 22), *V = tu_rand(nV, 23);
    float *dO = tu_rand(nO, 24), *O = nans(nO), *L = nans((size_t)B * H * n);
    const qkv_attention_inputs x = {Q, K, V};
    const qkv_attention_shape shape = {B, H, n, m, d, v};
    const qkv_dropout drop = {0.2f, 5, 0};
    float *scratch = tu_zeros(qkv_flash_attention_scratch_floats(&shape));
    float *dQ = tu_zeros(nQ), *dK = tu_zeros(nK), *dV = tu_zeros(nV);
    float *dQ2 = tu_zeros(nQ), *dK2 = tu_zeros(nK), *dV2 = tu_zeros(nV);
    qkv_flash_attention_forward(O, L, &x, &shape, &mask, drop);
    qkv_flash_attention_backward(&(qkv_attention_grads){dQ, dK, dV}, dO, O, L, &x, &shape, &mask,
                                 drop, scratch);
    for (int t = 0; t < 2; t++)
        qkv_flash_attention_backward(&(qkv_attention_grads){dQ2, dK2, dV2}, dO, O, L, &x, &shape,
                                     &mask, drop, scratch);
    for (size_t i = 0; i < nQ; i++) dQ[i] *= 2.0f;
    for (size_t i = 0; i < nK; i++) dK[i] *= 2.0f;
    for (size_t i = 0; i < nV; i++) dV[i] *= 2.0f;
    tu_check_grad("twice dQ", dQ2, dQ, nQ, 1e-6f);
    tu_check_grad("twice dK", dK2, dK, nK, 1e-6f);
    tu_check_grad("twice dV", dV2, dV, nV, 1e-6f);

    /* Each gradient alone equals its value when all three are asked for. */
    float *g[3] = {tu_zeros(nQ), tu_zeros(nK), tu_zeros(nV)};
    qkv_flash_attention_backward(&(qkv_attention_grads){g[0], NULL, NULL}, dO, O, L, &x, &shape,
                                 &mask, drop, scratch);
    qkv_flash_attention_backward(&(qkv_attention_grads){NULL, g[1], NULL}, dO, O, L, &x, &shape,
                                 &mask, drop, scratch);
    qkv_flash_attention_backward(&(qkv_attention_grads){NULL, NULL, g[2]}, dO, O, L, &x, &shape,
                                 &mask, drop, scratch);
    qkv_flash_attention_backward(&(qkv_attention_grads){NULL, NULL, NULL}, dO, O, L, &x, &shape,
                                 &mask, drop, scratch);
    for (size_t i = 0; i < nQ; i++) dQ[i] *= 0.5f;
    for (size_t i = 0; i < nK; i++) dK[i] *= 0.5f;
    for (size_t i = 0; i < nV; i++) dV[i] *= 0.5f;
    assert_memory_equal(g[0], dQ, nQ * sizeof *dQ);
    assert_memory_equal(g[1], dK, nK * sizeof *dK);
    assert_memory_equal(g[2], dV, nV * sizeof *dV);
    free(Q), free(K), free(V), free(dO), free(O), free(L), free(scratch);
    free(dQ), free(dK), free(dV), free(dQ2), free(dK2), free(dV2);
    free(g[0]), free(g[1]), free(g[2]);
}

/* ----------------------------------------------------------------------------------------
 * Finite differences
 * ---------------------------------------------------------------------------------------- */

typedef struct {
    int B, H, n, m, d, v;
    qkv_mask mask;
    float p;
    float *Q, *K, *V, *O, *L, *r;
} fd_ctx;

static double fd_loss(void *p)
{
    fd_ctx *c = p;
    qkv_flash_attention_forward(c->O, c->L, &(qkv_attention_inputs){c->Q, c->K, c->V},
                                &(qkv_attention_shape){c->B, c->H, c->n, c->m, c->d, c->v},
                                &c->mask, (qkv_dropout){c->p, 99, 0});
    return tu_dot(c->O, c->r, (size_t)c->B * c->n * c->H * c->v);
}

static void gradcheck(int B, int H, int n, int m, int d, int v, const int *lens, int per_query,
                      int causal, float p, const char *label)
{
    fd_ctx c = {B, H, n, m, d, v, {lens, per_query, causal}, p, NULL, NULL, NULL, NULL, NULL, NULL};
    const size_t nQ = (size_t)B * n * H * d, nK = (size_t)B * m * H * d;
    const size_t nV = (size_t)B * m * H * v, nO = (size_t)B * n * H * v;
    c.Q = rand_scaled(nQ, 31, 2.0f), c.K = tu_rand(nK, 32), c.V = tu_rand(nV, 33);
    c.O = nans(nO), c.L = nans((size_t)B * H * n), c.r = tu_rand(nO, 34);
    const qkv_attention_shape shape = {B, H, n, m, d, v};
    float *scratch = tu_zeros(qkv_flash_attention_scratch_floats(&shape));
    float *dQ = tu_zeros(nQ), *dK = tu_zeros(nK), *dV = tu_zeros(nV);
    fd_loss(&c);
    qkv_flash_attention_backward(&(qkv_attention_grads){dQ, dK, dV}, c.r, c.O, c.L,
                                 &(qkv_attention_inputs){c.Q, c.K, c.V}, &shape, &c.mask,
                                 (qkv_dropout){p, 99, 0}, scratch);
    char name[96];
    snprintf(name, sizeof name, "%s dQ", label);
    tu_gradcheck(name, c.Q, nQ, dQ, fd_loss, &c, TU_FD_STEP, TU_FD_TOL, 48);
    snprintf(name, sizeof name, "%s dK", label);
    tu_gradcheck(name, c.K, nK, dK, fd_loss, &c, TU_FD_STEP, TU_FD_TOL, 48);
    snprintf(name, sizeof name, "%s dV", label);
    tu_gradcheck(name, c.V, nV, dV, fd_loss, &c, TU_FD_STEP, TU_FD_TOL, 48);
    free(c.Q), free(c.K), free(c.V), free(c.O), free(c.L), free(c.r), free(scratch);
    free(dQ), free(dK), free(dV);
}

static void test_gradcheck_masks(void **state)
{
    (void)state;
    int seq[3] = {7, 0, 3}, query[10] = {6, 2, 0, 4, 5, 1, 6, 6, 3, 0};
    gradcheck(1, 1, 1, 1, 3, 2, NULL, 0, 0, 0.0f, "n1");
    gradcheck(3, 2, 4, 7, 3, 5, seq, 0, 0, 0.0f, "seq lens 7,0,3");
    gradcheck(2, 2, 5, 6, 4, 3, query, 1, 1, 0.0f, "query lens causal");
    gradcheck(2, 1, 6, 4, 3, 3, NULL, 0, 1, 0.0f, "causal n>m");
}

static void test_gradcheck_tiles_dropout(void **state)
{
    (void)state;
    int seq[2] = {150, 97};
    gradcheck(2, 1, 130, 150, 4, 3, seq, 0, 1, 0.0f, "tiles causal prefix");
    gradcheck(2, 2, 4, 6, 3, 4, NULL, 0, 0, 0.4f, "dropout");
    gradcheck(1, 1, 130, 131, 3, 2, NULL, 0, 1, 0.25f, "tiles causal dropout");
}

/* ----------------------------------------------------------------------------------------
 * PyTorch parity
 * ---------------------------------------------------------------------------------------- */

static const float *ref(const qkv_tensor_file *f, const char *name, size_t n)
{
    size_t got = 0;
    const float *x = tu_ref_f32(f, name, &got);
    if (got != n) fail_msg("reference '%s' has %zu values, the test expects %zu", name, got, n);
    return x;
}

static void test_parity(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    const int B = tu_ref_int(&f, "B"), H = tu_ref_int(&f, "H"), n = tu_ref_int(&f, "n");
    const int m = tu_ref_int(&f, "m"), d = tu_ref_int(&f, "d"), v = tu_ref_int(&f, "v");
    const float p = tu_ref_float(&f, "p");
    const uint64_t seed = (uint64_t)tu_ref_int(&f, "seed");
    qkv_mask mask = {NULL, tu_ref_int(&f, "per_query"), tu_ref_int(&f, "causal")};
    if (tu_ref_int(&f, "has_lens")) {
        size_t want = mask.per_query ? (size_t)B * n : (size_t)B, got = 0;
        mask.valid_lens = tu_ref_i32(&f, "valid_lens", &got);
        if (got != want) fail_msg("valid_lens has %zu values, expected %zu", got, want);
    }
    const size_t nQ = (size_t)B * n * H * d, nK = (size_t)B * m * H * d;
    const size_t nV = (size_t)B * m * H * v, nO = (size_t)B * n * H * v, nL = (size_t)B * H * n;
    const float *Q = ref(&f, "Q", nQ), *K = ref(&f, "K", nK), *V = ref(&f, "V", nV);
    const float *dO = ref(&f, "dO", nO), *L_ref = ref(&f, "L", nL);
    float *O = nans(nO), *L = nans(nL);
    const qkv_attention_inputs x = {Q, K, V};
    const qkv_attention_shape shape = {B, H, n, m, d, v};
    const qkv_dropout drop = {p, seed, 0};
    float *scratch = tu_zeros(qkv_flash_attention_scratch_floats(&shape));
    float *dQ = tu_zeros(nQ), *dK = tu_zeros(nK), *dV = tu_zeros(nV);
    qkv_flash_attention_forward(O, L, &x, &shape, &mask, drop);
    tu_check_close("O", O, ref(&f, "O", nO), nO, TU_FWD_ATOL, TU_FWD_RTOL);
    for (size_t i = 0; i < nL; i++) /* rows with no key: -inf in both */
        if (isinf(L_ref[i]) ? L[i] != L_ref[i]
                            : fabsf(L[i] - L_ref[i]) > TU_FWD_ATOL + TU_FWD_RTOL * fabsf(L_ref[i]))
            fail_msg("L[%zu] = %.9g, torch %.9g", i, (double)L[i], (double)L_ref[i]);
    qkv_flash_attention_backward(&(qkv_attention_grads){dQ, dK, dV}, dO, O, L, &x, &shape, &mask,
                                 drop, scratch);
    tu_check_grad("dQ", dQ, ref(&f, "dQ", nQ), nQ, TU_GRAD_REL);
    tu_check_grad("dK", dK, ref(&f, "dK", nK), nK, TU_GRAD_REL);
    tu_check_grad("dV", dV, ref(&f, "dV", nV), nV, TU_GRAD_REL);
    free(O), free(L), free(scratch), free(dQ), free(dK), free(dV);
    qkv_tensor_file_free(&f);
}

/* ----------------------------------------------------------------------------------------
 * A long sequence
 * ---------------------------------------------------------------------------------------- */

static void test_long_sequence(void **state)
{
    (void)state;
    enum { B = 1, H = 2, N = 4096, D = 64, R = 12 };
    const int valid = 4000; /* the last 96 keys are padding */
    const int rows[R] = {0, 1, 127, 128, 255, 256, 1000, 2047, 2048, 3999, 4000, 4095};
    const size_t nX = (size_t)B * N * H * D;
    qkv_mask mask = {&valid, 0, 1};
    float *Q = rand_scaled(nX, 41, 3.0f), *K = tu_rand(nX, 42), *V = tu_rand(nX, 43);
    float *dO = tu_rand(nX, 44), *O = nans(nX), *L = nans((size_t)H * N);
    const qkv_attention_inputs x = {Q, K, V};
    const qkv_attention_shape shape = {B, H, N, N, D, D};
    const qkv_dropout none = {0.0f, 0, 0};
    size_t ns = qkv_flash_attention_scratch_floats(&shape);
    assert_int_equal(ns, (size_t)H * N); /* linear in N: no N x N anything */
    float *scratch = fenced(ns), *dQ = tu_zeros(nX), *dK = tu_zeros(nX), *dV = tu_zeros(nX);
    qkv_flash_attention_forward(O, L, &x, &shape, &mask, none);
    qkv_flash_attention_backward(&(qkv_attention_grads){dQ, dK, dV}, dO, O, L, &x, &shape, &mask,
                                 none, scratch);
    check_fence(scratch, ns);
    tu_check_finite("O", O, nX);
    tu_check_finite("dQ", dQ, nX);
    tu_check_finite("dK", dK, nX);
    tu_check_finite("dV", dV, nX);

    /* The materialised kernel on the chosen rows alone: row i of the causal mask is a
     * per-query valid length of min(i + 1, valid) over all N keys. */
    const size_t nR = (size_t)R * H * D;
    float *Qr = tu_zeros(nR), *dOr = tu_zeros(nR), *Or = nans(nR), *dQr = tu_zeros(nR);
    float *Of = tu_zeros(nR), *dQf = tu_zeros(nR), *Lf = tu_zeros((size_t)H * R);
    float *P = nans((size_t)H * R * N);
    const qkv_attention_shape rows_shape = {1, H, R, N, D, D};
    float *ref_scratch = tu_zeros(qkv_attention_scratch_floats(&rows_shape));
    int lens[R];
    for (int r = 0; r < R; r++) {
        size_t src = (size_t)rows[r] * H * D, dst = (size_t)r * H * D;
        memcpy(Qr + dst, Q + src, (size_t)H * D * sizeof *Q);
        memcpy(dOr + dst, dO + src, (size_t)H * D * sizeof *dO);
        memcpy(Of + dst, O + src, (size_t)H * D * sizeof *O);
        memcpy(dQf + dst, dQ + src, (size_t)H * D * sizeof *dQ);
        lens[r] = rows[r] + 1 < valid ? rows[r] + 1 : valid;
        for (int h = 0; h < H; h++) Lf[h * R + r] = L[(size_t)h * N + rows[r]];
    }
    qkv_mask row_mask = {lens, 1, 0};
    const qkv_attention_inputs xr = {Qr, K, V};
    qkv_attention_forward(Or, P, &xr, &rows_shape, &row_mask, none, ref_scratch);
    qkv_attention_backward(&(qkv_attention_grads){dQr, NULL, NULL}, dOr, P, &xr, &rows_shape,
                           none, ref_scratch);
    tu_check_grad("long O rows", Of, Or, nR, FLASH_REL);
    tu_check_grad("long dQ rows", dQf, dQr, nR, FLASH_REL);
    for (int r = 0; r < R; r++)
        for (int h = 0; h < H; h++) {
            double want = ref_lse(Qr, K, &row_mask, 0, h, r, H, R, N, D);
            float got = Lf[h * R + r];
            if (fabs(got - want) > 1e-5 + 1e-5 * fabs(want))
                fail_msg("long L[%d, %d] = %.9g, want %.9g", h, rows[r], (double)got, want);
        }

    /* Every row sees a key, so its weights sum to 1 and sum_j dV_j = sum_i dO_i; the rows of
     * dS sum to 0, so sum_j dK_j = 0. Padding keys get nothing. */
    for (int h = 0; h < H; h++)
        for (int e = 0; e < D; e++) {
            double sv = 0.0, so = 0.0, sk = 0.0, ak = 0.0;
            for (int t = 0; t < N; t++) {
                size_t at = ((size_t)t * H + h) * D + e;
                sv += dV[at], so += dO[at], sk += dK[at], ak += fabs(dK[at]);
                if (t >= valid && (dK[at] != 0.0f || dV[at] != 0.0f))
                    fail_msg("padding key %d got a gradient", t);
            }
            if (fabs(sv - so) > 1e-4 * (1.0 + fabs(so)))
                fail_msg("head %d, e %d: sum dV = %.9g, sum dO = %.9g", h, e, sv, so);
            if (fabs(sk) > 1e-4 * ak)
                fail_msg("head %d, e %d: sum dK = %.9g (sum |dK| = %.9g)", h, e, sk, ak);
        }
    free(Q), free(K), free(V), free(dO), free(O), free(L), free(scratch), free(dQ), free(dK);
    free(dV), free(Qr), free(dOr), free(Or), free(dQr), free(Of), free(dQf), free(Lf);
    free(P), free(ref_scratch);
}

/* One cmocka test per reference file, named after it. */
#define CASE(name) { "parity_" name, test_parity, NULL, NULL, (void *)name }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equals_materialised),
        cmocka_unit_test(test_accumulates),
        cmocka_unit_test(test_gradcheck_masks),
        cmocka_unit_test(test_gradcheck_tiles_dropout),
        CASE("flash_causal_prefix"),
        CASE("flash_query_dropout"),
        cmocka_unit_test(test_long_sequence),
    };
    return cmocka_run_group_tests_name("flash_attention", tests, NULL, NULL);
}
