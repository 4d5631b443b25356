/* SPDX-License-Identifier: MIT */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tu_check_finite(const char *name, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            print_error("%s[%zu] = %g is not finite\n", name, i, (double)x[i]);
            fail();
        }
}

void tu_check_close(const char *name, const float *got, const float *want, size_t n,
                    float atol, float rtol)
{
    size_t worst = 0;
    double worst_excess = -1.0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i]) || isnan(want[i])) {
            print_error("%s[%zu]: got %g, want %g\n", name, i, (double)got[i], (double)want[i]);
            fail();
        }
        double diff = fabs((double)got[i] - (double)want[i]);
        double excess = diff - (atol + rtol * fabs((double)want[i]));
        if (excess > worst_excess) worst_excess = excess, worst = i;
    }
    if (n && worst_excess > 0) {
        print_error("%s: |got - want| exceeds %g + %g|want| at [%zu]: got %.9g, want %.9g\n",
                    name, (double)atol, (double)rtol, worst, (double)got[worst],
                    (double)want[worst]);
        fail();
    }
}

void tu_check_grad(const char *name, const float *got, const float *want, size_t n, float rel)
{
    double max_want = 0.0, max_diff = 0.0;
    size_t worst = 0;
    tu_check_finite(name, got, n);
    for (size_t i = 0; i < n; i++) {
        double a = fabs((double)want[i]), d = fabs((double)got[i] - (double)want[i]);
        if (a > max_want) max_want = a;
        if (d > max_diff) max_diff = d, worst = i;
    }
    if (max_diff > rel * max_want) {
        print_error("%s: max |got - want| = %g > %g * max|want| (%g), worst at [%zu]: got %.9g, "
                    "want %.9g\n", name, max_diff, (double)rel, max_want, worst,
                    (double)got[worst], (double)want[worst]);
        fail();
    }
}

double tu_dot(const float *out, const float *r, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)out[i] * (double)r[i];
    return s;
}

void tu_gradcheck(const char *name, float *x, size_t n, const float *analytic, tu_loss_fn loss,
                  void *ctx, float h, float tol, int max_checks)
{
    double max_ana = 1e-2;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)analytic[i]) > max_ana) max_ana = fabs((double)analytic[i]);
    size_t stride = (max_checks > 0 && n > (size_t)max_checks) ? n / (size_t)max_checks : 1;
    for (size_t i = 0; i < n; i += stride) {
        float saved = x[i];
        x[i] = saved + h;
        double lp = loss(ctx);
        x[i] = saved - h;
        double lm = loss(ctx);
        x[i] = saved;
        double num = (lp - lm) / (2.0 * (double)h);
        if (!isfinite(num) || fabs(num - (double)analytic[i]) > tol * max_ana) {
            print_error("gradcheck %s[%zu]: numeric %.6g, analytic %.6g (tolerance %.3g)\n", name,
                        i, num, (double)analytic[i], tol * max_ana);
            fail();
        }
    }
}

void tu_reference_load(qkv_tensor_file *f, const char *name)
{
    const char *dir = getenv("QKV_PARITY_DIR");
    char path[1024];
    qkv_error err = {0};
    snprintf(path, sizeof path, "%s/%s.safetensors", dir ? dir : "build/parity", name);
    if (qkv_tensor_file_load(f, path, &err) != QKV_OK) {
        print_error("cannot load PyTorch reference %s: %s\n", path, err.msg);
        fail();
    }
}

static const qkv_tensor *ref_get(const qkv_tensor_file *f, const char *name, qkv_dtype dt)
{
    const qkv_tensor *t = qkv_tensor_file_get(f, name);
    if (!t || t->dtype != dt) {
        print_error("reference tensor '%s' missing or of the wrong dtype\n", name);
        fail();
    }
    return t;
}

const float *tu_ref_f32(const qkv_tensor_file *f, const char *name, size_t *numel)
{
    const qkv_tensor *t = ref_get(f, name, QKV_F32);
    if (numel) *numel = (size_t)t->numel;
    return (const float *)t->data;
}

const int *tu_ref_i32(const qkv_tensor_file *f, const char *name, size_t *numel)
{
    const qkv_tensor *t = ref_get(f, name, QKV_I32);
    if (numel) *numel = (size_t)t->numel;
    return (const int *)t->data;
}

int tu_ref_int(const qkv_tensor_file *f, const char *key)
{
    const char *s = qkv_tensor_file_meta(f, key);
    if (!s) {
        print_error("reference metadata '%s' missing\n", key);
        fail();
    }
    return atoi(s);
}

float tu_ref_float(const qkv_tensor_file *f, const char *key)
{
    const char *s = qkv_tensor_file_meta(f, key);
    if (!s) {
        print_error("reference metadata '%s' missing\n", key);
        fail();
    }
    return strtof(s, NULL);
}

float *tu_zeros(size_t n)
{
    float *x = calloc(n ? n : 1, sizeof *x);
    if (!x) fail_msg("out of memory (%zu floats)", n);
    return x;
}

float *tu_rand(size_t n, uint64_t seed)
{
    float *x = tu_zeros(n);
    qkv_fill_uniform(x, n, -1.0f, 1.0f, seed);
    return x;
}

float *tu_copy(const float *x, size_t n)
{
    float *y = tu_zeros(n);
    memcpy(y, x, n * sizeof *y);
    return y;
}

/* ---- training tests' fixtures ---- */

void tu_copy_task(tu_copy_data *x, int n, int V, uint64_t seed)
{
    enum { T = TU_COPY_T };
    assert_in_range(n, 1, TU_COPY_MAX);
    for (int e = 0; e < n; e++) {
        int len = 1 + (int)(qkv_random_u32(seed, (uint64_t)e * 97) % 8);
        for (int t = 0; t < T; t++) x->src[e * T + t] = x->tgt[e * T + t] = QKV_PAD;
        for (int t = 0; t < len; t++)
            x->src[e * T + t] = x->tgt[e * T + t] =
                QKV_N_RESERVED + (int)(qkv_random_u32(seed, (uint64_t)e * 97 + 1 + t) % (V - 4));
        x->src[e * T + len] = x->tgt[e * T + len] = QKV_EOS;
        x->src_valid[e] = x->tgt_valid[e] = len + 1;
    }
    x->d = (qkv_dataset){n, T, x->src, x->src_valid, x->tgt, x->tgt_valid};
}

qkv_transformer *tu_small_transformer(int V, float dropout, uint64_t seed)
{
    qkv_transformer_config cfg = qkv_transformer_default_config();
    cfg.src_vocab = cfg.tgt_vocab = V, cfg.d_model = 16, cfg.heads = 2, cfg.ffn = 32;
    cfg.enc_layers = cfg.dec_layers = 1, cfg.max_len = 16, cfg.dropout = dropout;
    qkv_transformer *m;
    assert_int_equal(qkv_transformer_create(&m, &cfg, seed, NULL), QKV_OK);
    return m;
}

void tu_temp_dir(char *dir, size_t cap, const char *prefix)
{
    snprintf(dir, cap, "/tmp/%s_XXXXXX", prefix);
    assert_non_null(mkdtemp(dir));
}

void tu_remove_tree(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}
