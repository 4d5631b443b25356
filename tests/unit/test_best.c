/* SPDX-License-Identifier: MIT */
/* The choice after the output layer (ops/cpu/best.h):
 *   row_best       the k best of a row against a brute force: ties to the lower id, banned
 *                  ids never, nothing at -inf, a list longer than the row;
 *   the tables     every CPU table's linear_best gives the k best of the logits its own
 *                  products write (the same ids and values, bit for bit) and, where it writes
 *                  them out (fp32, bf16), log_normaliser of them exactly;
 *   fused int8     gemm_int8_best's lists equal row_best of gemm_int8's logits, bit for bit,
 *                  its normaliser is within ops/cpu/best.h's bound of log_normaliser of them,
 *                  on the VNNI and the AMX kernel, a chunk or many, and it gives the same bits
 *                  on 1 thread as on 2;
 *   non-finite     every table reports a logit that is infinite or NaN (and only then);
 *   SiLU           the int8 table's (a polynomial exponential) within 3e-7 relative of
 *                  qkv_silu_forward's (libm's expf) over [-100, 100] (1e-36 absolute below -88,
 *                  where it gives 0), and the table's entry. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "ops/cpu/best.h"
#include "ops/cpu/fused.h"
#include "test_util.h"

static uint64_t rng = 1;
static float frand(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) * 0x1p-24) * 2.0f - 1.0f;
}

/* The k best by brute force: repeatedly the first largest not taken, not banned, above -inf. */
static void brute_best(const float *z, int V, int k, uint32_t banned, int *ids, float *vals)
{
    char *taken = calloc((size_t)V, 1);
    assert_non_null(taken);
    for (int i = 0; i < k; i++) {
        int best = -1;
        for (int v = 0; v < V; v++)
            if (!taken[v] && !(v < 32 && (banned >> v & 1)) && z[v] > -INFINITY &&
                (best < 0 || z[v] > z[best]))
                best = v;
        ids[i] = best, vals[i] = best < 0 ? -INFINITY : z[best];
        if (best >= 0) taken[best] = 1;
    }
    free(taken);
}

static void test_row_best(void **state)
{
    (void)state;
    enum { V = 300 };
    float z[V];
    int ids[40], want_ids[40];
    float vals[40], want_vals[40];
    for (int trial = 0; trial < 200; trial++) {
        const int n = trial % 7 == 0 ? 5 : V, k = 1 + trial % 12 + (trial % 7 == 0 ? 4 : 0);
        for (int v = 0; v < n; v++) z[v] = (float)((int)(frand() * 8)) / 4; /* many ties */
        if (trial % 3 == 0) z[trial % n] = -INFINITY;
        const uint32_t banned = trial % 4 == 0 ? 0 : (uint32_t)(trial * 2654435761u) & 0xf;
        row_best(z, n, k, banned, ids, vals);
        brute_best(z, n, k, banned, want_ids, want_vals);
        assert_memory_equal(ids, want_ids, sizeof *ids * k);
        assert_memory_equal(vals, want_vals, sizeof *vals * k);
    }
}

/* A model's output layer: x (N, C), W (V, C) typed as table's precision wants, b (V). */
typedef struct {
    int N, C, V, k;
    uint32_t banned;
} shape;

static const shape shapes[] = {
    {1, 64, 1, 1, 0},     {3, 64, 100, 2, 0x4},  {1, 512, 3000, 8, 0x6}, {16, 64, 1024, 1, 0},
    {33, 128, 1025, 8, 0x4}, {40, 64, 2500, 4, 0xf}, {7, 20, 1500, 3, 0x4}, {100, 192, 700, 8, 0},
};

/* Bound of ops/cpu/best.h between the fused normaliser and log_normaliser of the same logits. */
static double lse_bound(int V) { return 0x1p-24 * (log((double)V) + 2) + 3e-7; }

static void check_table(const backend_ops *ops, const shape *s, uint64_t seed)
{
    rng = seed;
    const int N = s->N, C = s->C, V = s->V, k = s->k;
    float *x = tu_zeros((size_t)N * C), *W = tu_zeros((size_t)V * C), *b = tu_zeros((size_t)V);
    float *y = tu_zeros((size_t)N * V), *scratch = tu_zeros((size_t)N * V);
    for (size_t i = 0; i < (size_t)N * C; i++) x[i] = frand() * (1 + i % 5);
    for (size_t i = 0; i < (size_t)V * C; i++) W[i] = 0.05f * frand();
    for (int v = 0; v < V; v++) b[v] = v % 97 == 3 ? 1.0f : 0.1f * frand();
    /* the precision's typed weight, as models/precision.c makes it */
    weight w = weight_f32(W);
    int8_matrix q = {0};
    uint16_t *w16 = NULL;
    backend be = {.ops = ops, .typed_current = 1};
    gemm_int8_workspace ws8 = {0};
    gemm_bf16_workspace ws16 = {0};
    if (ops == &backend_cpu_int8) {
        assert_int_equal(int8_matrix_quantise(&q, W, V, C, NULL), QKV_OK);
        w.type = WEIGHT_INT8, w.int8 = &q, be.ws8 = &ws8;
    } else if (ops == &backend_cpu_bf16) {
        w16 = malloc(sizeof *w16 * (size_t)V * C);
        assert_non_null(w16);
        bf16_convert(w16, W, (size_t)V * C);
        w.type = WEIGHT_BF16, w.bf16 = w16, be.ws = &ws16;
        assert_int_equal(gemm_bf16_reserve(&ws16, omp_get_max_threads(), NULL), QKV_OK);
    }
    op_linear_forward(&be, y, x, &w, b, N, C, V); /* the logits as the table writes them */
    int *ids = calloc((size_t)N * k, sizeof *ids), *want_ids = calloc((size_t)k, sizeof *ids);
    float *vals = tu_zeros((size_t)N * k), *want_vals = tu_zeros((size_t)k);
    double *lse = calloc((size_t)N, sizeof *lse);
    assert_non_null(ids), assert_non_null(want_ids), assert_non_null(lse);
    const best_request rq = {k, s->banned, ids, vals, lse, NULL};
    ops->linear_best(&be, &rq, x, &w, b, N, C, V, scratch);
    for (int r = 0; r < N; r++) {
        row_best(y + (size_t)r * V, V, k, s->banned, want_ids, want_vals);
        if (memcmp(ids + (size_t)r * k, want_ids, sizeof *ids * k) ||
            memcmp(vals + (size_t)r * k, want_vals, sizeof *vals * k))
            fail_msg("%s N %d C %d V %d k %d: row %d's best differ from its logits'", ops->name,
                     N, C, V, k, r);
        const double want = log_normaliser(y + (size_t)r * V, V);
        const double tol = ops == &backend_cpu_int8 ? lse_bound(V) : 0;
        if (!(fabs(lse[r] - want) <= tol))
            fail_msg("%s N %d V %d: row %d's normaliser %.9g, of the logits %.9g (allowed %g)",
                     ops->name, N, V, r, lse[r], want, tol);
    }
    if (ops == &backend_cpu_int8) { /* the same bits on one thread as on two, and no lse */
        int *ids1 = calloc((size_t)N * k, sizeof *ids1);
        float *vals1 = tu_zeros((size_t)N * k);
        double *lse1 = calloc((size_t)N, sizeof *lse1);
        const best_request r1 = {k, s->banned, ids1, vals1, lse1, NULL};
        const int threads = omp_get_max_threads();
        omp_set_num_threads(threads > 1 ? 1 : 2);
        ops->linear_best(&be, &r1, x, &w, b, N, C, V, scratch);
        omp_set_num_threads(threads);
        assert_memory_equal(ids1, ids, sizeof *ids * N * k);
        assert_memory_equal(vals1, vals, sizeof *vals * N * k);
        assert_memory_equal(lse1, lse, sizeof *lse * N);
        const best_request r2 = {k, s->banned, ids1, vals1, NULL, NULL};
        ops->linear_best(&be, &r2, x, &w, b, N, C, V, scratch);
        assert_memory_equal(ids1, ids, sizeof *ids * N * k);
        free(ids1), free(vals1), free(lse1);
    }
    /* a logit that is infinite or NaN is reported, with the normaliser or without, wherever
     * its chunk; finite ones are not */
    int nonfinite = -1;
    const best_request rf[2] = {{k, s->banned, ids, vals, lse, &nonfinite},
                                {k, s->banned, ids, vals, NULL, &nonfinite}};
    ops->linear_best(&be, &rf[0], x, &w, b, N, C, V, scratch);
    assert_int_equal(nonfinite, 0);
    const float bad[3] = {INFINITY, -INFINITY, NAN};
    for (int i = 0; i < 6; i++) {
        const int v = i % 2 ? V - 1 : V / 2;
        const float keep = b[v];
        b[v] = bad[i % 3], nonfinite = -1;
        ops->linear_best(&be, &rf[i / 3], x, &w, b, N, C, V, scratch);
        b[v] = keep;
        if (nonfinite != 1)
            fail_msg("%s N %d V %d: a logit %g at %d not reported (%d)", ops->name, N, V,
                     (double)bad[i % 3], v, nonfinite);
    }
    free(x), free(W), free(b), free(y), free(scratch), free(ids), free(want_ids), free(vals);
    free(want_vals), free(lse), free(w16);
    int8_matrix_free(&q);
    gemm_int8_workspace_free(&ws8);
    gemm_bf16_workspace_free(&ws16);
}

static void test_tables(void **state)
{
    (void)state;
    const backend_ops *tables[] = {&backend_cpu_fp32, &backend_cpu_bf16, &backend_cpu_int8};
    for (size_t t = 0; t < 3; t++) {
        if ((tables[t] == &backend_cpu_bf16 && !gemm_bf16_supported()) ||
            (tables[t] == &backend_cpu_int8 && !gemm_int8_supported())) {
            printf("%s: this CPU cannot run it, skipped\n", tables[t]->name);
            continue;
        }
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
            check_table(tables[t], &shapes[i], 10 + i);
    }
}

/* The fused normaliser against log_normaliser where the bound is tight: logits spread over
 * a wide range (large |y - m| for most terms) and nearly equal ones (many terms near 1). */
static void test_fused_normaliser_bound(void **state)
{
    (void)state;
    if (!gemm_int8_supported()) return;
    const shape wide = {4, 64, 5000, 2, 0};
    check_table(&backend_cpu_int8, &wide, 99);
    const int V = 3000;
    float *y = tu_zeros(V);
    int ids[2];
    float vals[2];
    for (int spread = 0; spread < 3; spread++) {
        for (int v = 0; v < V; v++) y[v] = spread == 0 ? 1e-3f * frand() : spread == 1 ? 40 * frand() : 200 * frand();
        lse_part parts[3];
        int cids[3 * 2];
        float cvals[3 * 2];
        for (int c = 0; c < 3; c++) {
            const int first = c * BEST_CHUNK, n = V - first < BEST_CHUNK ? V - first : BEST_CHUNK;
            chunk_best(y + first, n, first, 2, 0, cids + 2 * c, cvals + 2 * c, &parts[c]);
        }
        double lse;
        best_merge(cids, cvals, parts, 3, 2, ids, vals, &lse);
        const double want = log_normaliser(y, V);
        print_message("  spread %d: fused %.12g, double %.12g, |diff| %.3g (bound %.3g)\n", spread,
                      lse, want, fabs(lse - want), lse_bound(V));
        assert_true(fabs(lse - want) <= lse_bound(V));
    }
    free(y);
}

static void test_silu_fast(void **state)
{
    (void)state;
    if (!gemm_int8_supported()) return; /* the int8 table's: AVX-512 */
    enum { N = 200003 }; /* not a multiple of 16 */
    float *x = tu_zeros(N), *want = tu_zeros(N), *got = tu_zeros(N + 16);
    for (int i = 0; i < N; i++) x[i] = -100.0f + 200.0f * (float)i / N + (i % 7) * 1e-3f;
    for (int i = 0; i < 16; i++) got[N + i] = 7.0f;
    qkv_silu_forward(want, x, N);
    silu_forward_fast(got, x, N);
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        const double e = fabs((double)got[i] - want[i]);
        if (!(e <= 3e-7 * fabs(want[i]) + 1e-36)) /* below -88: 0, for at most 88 e^-88 */
            fail_msg("silu(%g): %.9g, libm's %.9g", (double)x[i], (double)got[i], (double)want[i]);
        worst = fmax(worst, e / fmax(fabs(want[i]), 1e-30));
    }
    for (int i = 0; i < 16; i++) assert_true(got[N + i] == 7.0f);
    print_message("  largest relative difference %.3g\n", worst);
    /* the table's entry is the polynomial one: over these values it differs from libm's
     * somewhere, so the entry cannot be libm's and pass */
    assert_true(memcmp(got, want, N * sizeof(float)) != 0);
    float *h = tu_zeros(N);
    backend_cpu_int8.activation_forward(QKV_ACT_SILU, h, x, N);
    assert_memory_equal(h, got, N * sizeof(float));
    free(x), free(want), free(got), free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_best),
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_fused_normaliser_bound),
        cmocka_unit_test(test_silu_fast),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
