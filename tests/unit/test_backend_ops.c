/* SPDX-License-Identifier: MIT */
/* The backend-ops test (ggml's test-backend-ops, for qkv's seam: backend/backend.h).
 *
 * Every entry of every backend table runs on random shapes (odd sizes, sizes past the vector
 * widths and the flash tiles, one row and many; masks with lengths 0, causal, per query;
 * dropout 0 and > 0) and is compared with a plain reference written here (naive loops, double
 * sums), within a bound derived from the arithmetic of the table:
 *   float32  a sum of K terms errs by at most (K + c) u sum |terms|, u = 2^-24 (Higham's
 *            gamma_K; c covers the few roundings around the sum: bias, scale, exp);
 *   bf16     each product's two operands rounded to bf16 first: (2u' + u'^2) sum |x_k w_k|,
 *            u' = 2^-8, on top of the float32 sums;
 *   int8     ops/cpu/int8.h's bound, sum_k (|x_k| s_w / 2 + |W_k| s_x / 2 + s_x s_w / 4).
 * Backward entries: on a float32 table against central differences (in double) of a random
 * projection of the same table's forward; on the others against the float32 table's
 * backward, within both tables' bounds. Entries with a closed-form gradient are also compared
 * with it on every table.
 *
 * The op sees only memory the table gave: every buffer it reads or writes comes from the
 * table's alloc, is filled with upload and read back with download, and sits between two
 * guard regions of a known pattern (a NaN as float32 and as bf16) that must be intact after
 * the op; inputs must come back unchanged, every output must be finite, and a write-only
 * output starts as that NaN, so an element the op never writes is seen. Scratch and saved
 * buffers are exactly the size the table's *_floats entries ask for. A failure names the
 * op, the table, the shape, and the normalised error: the worst |got - want| as a multiple of
 * its bound, and sum (got - want)^2 / sum want^2.
 *
 * The checks, in the file's order, each beside its reference: the table (no NULL entry, every
 * entry listed and called; memory), linear (rows, GEMM, the output layer's fused choice,
 * backward), attention (choose_attention, forward and backward of the materialised, flash and
 * linear kernels, the first two against each other), decoding (cached_attention, kv_store, linear_attention_step), activations,
 * LayerNorm, AddNorm, residual and dropout, embedding, positions, the loss (cross-entropy and
 * its fused gradient), zero/copy/add/scale, and the optimizer's entries (Adam's step, the sum
 * of squares) and round_bf16. Every run ends with the table's finish reporting no failure.
 *
 * A new table plugs in as one row of TABLES below: its ops, the arithmetic of its products
 * (which sets the bounds), whether this machine runs it, and how to build its backend. The
 * same checks then run on it unchanged (tests/README.md says what they assume of it). */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/internal.h"
#include "models/precision.h"
#include "test_util.h"

#define U 0x1p-24       /* float32's unit roundoff */
#define U_BF16 0x1p-8   /* bf16's */
#define SLACK 2.0       /* on every derived bound: for the orders of roundings it leaves out */

/* ==== the tables under test ============================================================== */

typedef struct {
    const char *name;
    const backend_ops *ops;
    qkv_precision linear;    /* what the linear entries' products round to */
    qkv_precision attention; /* what attention's products round to (fp32 or bf16) */
    int (*supported)(void);  /* whether this machine runs it */
    const char *needs;       /* what a machine that does not lacks */
    /* the backend as the models build it, and its state (closed by close) */
    void (*open)(backend *be, void **state, qkv_precision linear);
    void (*close)(void *state);
} table_spec;

static int always(void) { return 1; }

/* A CPU backend as a model builds it: a precision set on a model_precision, then
 * precision_backend (the bf16 GEMM's workspace, the int8 activations' buffer, typed copies
 * current). The model here has no parameters of its own: the test types each weight as
 * precision_weight types a model's (typed_weight below). */
static void cpu_open(backend *be, void **state, qkv_precision linear)
{
    static const float no_params[1];
    model_precision *mp = calloc(1, sizeof *mp);
    qkv_error err = {0};
    assert_non_null(mp);
    if (precision_set(mp, linear, no_params, 1, NULL, 0, &err) != QKV_OK)
        fail_msg("precision_set(%s): %s", qkv_precision_name(linear), err.msg);
    *be = precision_backend(mp);
    *state = mp;
}

static void cpu_close(void *state)
{
    precision_free(state);
    free(state);
}

#ifdef QKV_CUDA
/* The CUDA device's tables (backend/cuda.c) on its first GPU, with the context a model on it
 * gives them and its bf16 copies current, as for decoding. Built with make CUDA=1 (on a GPU:
 * tests/device/check.sh), and over the CUDA stand-in of tests/cuda on any machine with the
 * toolkit's headers (test_backend_ops_cuda: the tables' host side, the stand-in's kernels). */
static int cuda_present(void)
{
    const device *d = device_cuda();
    void *ctx = NULL;
    qkv_error err = {0};
    if (!d || d->open(&ctx, &err) != QKV_OK) return 0;
    d->close(ctx);
    return 1;
}

static void cuda_open_table(backend *be, void **state, qkv_precision linear)
{
    const device *d = device_cuda();
    void *ctx = NULL;
    qkv_error err = {0};
    if (d->open(&ctx, &err) != QKV_OK) fail_msg("the CUDA device: %s", err.msg);
    *be = (backend){.ops = linear == QKV_PRECISION_BF16 ? d->bf16 : d->fp32,
                    .typed_current = 1, .device = ctx};
    *state = ctx;
}

static void cuda_close_table(void *state) { device_cuda()->close(state); }
#endif

static const table_spec TABLES[] = {
    {"cpu-fp32", &backend_cpu_fp32, QKV_PRECISION_FP32, QKV_PRECISION_FP32, always, "",
     cpu_open, cpu_close},
    {"cpu-bf16", &backend_cpu_bf16, QKV_PRECISION_BF16, QKV_PRECISION_FP32,
     gemm_bf16_supported, "AVX512-BF16", cpu_open, cpu_close},
    {"cpu-int8", &backend_cpu_int8, QKV_PRECISION_INT8, QKV_PRECISION_FP32,
     gemm_int8_supported, "AVX512-VNNI", cpu_open, cpu_close},
    /* A device's tables, one row each behind their build flag. The first row stays
     * cpu-fp32: the other tables' backward entries are compared with its. */
#ifdef QKV_CUDA
    {"cuda-fp32", &backend_cuda_fp32, QKV_PRECISION_FP32, QKV_PRECISION_FP32, cuda_present,
     "usable CUDA GPU", cuda_open_table, cuda_close_table},
    {"cuda-bf16", &backend_cuda_bf16, QKV_PRECISION_BF16, QKV_PRECISION_FP32, cuda_present,
     "usable CUDA GPU", cuda_open_table, cuda_close_table},
#endif
};
enum { N_TABLES = sizeof TABLES / sizeof *TABLES };

/* ==== every entry of backend_ops, and which a run exercised ============================== */

#define ENTRIES(X)                                                                            \
    X(linear_rows) X(linear_gemm) X(linear_best) X(linear_backward) X(choose_attention)      \
    X(attention_forward)                                                                      \
    X(attention_backward) X(attention_saved_floats) X(attention_scratch_floats)               \
    X(cached_attention) X(kv_store) X(linear_attention_step) X(activation_forward)            \
    X(activation_backward) X(layernorm_forward) X(layernorm_backward) X(addnorm_forward)      \
    X(addnorm_backward) X(residual_forward) X(residual_backward) X(embedding_forward)         \
    X(embedding_backward) X(positional_forward) X(positional_backward) X(dropout_forward)     \
    X(dropout_backward) X(cross_entropy_forward) X(cross_entropy_fused)                       \
    X(cross_entropy_scratch_floats) X(zero) X(copy) X(add) X(scale) X(adam_update)           \
    X(sum_squares) X(round_bf16) X(alloc) X(release) X(upload) X(download) X(finish)

#define ENTRY_ENUM(e) E_##e,
enum { ENTRIES(ENTRY_ENUM) E_COUNT };
#define ENTRY_NAME(e) #e,
static const char *const ENTRY_NAMES[] = {ENTRIES(ENTRY_NAME)};

/* ==== a table in the test: its backend, its buffers, and where it is ==================== */

enum { GUARD = 256, MAX_BUFS = 48, MAX_HOST = 160 };

/* The guard pattern, byte i of a region at offset i % 4: 0xffa5ffa5 as a float32, 0xffa5 as a
 * bf16, both NaN. Write-only outputs start as it too. */
static const uint8_t GUARD_BYTES[4] = {0xa5, 0xff, 0xa5, 0xff};

typedef struct {
    const char *name;
    uint8_t *base;  /* what alloc gave: GUARD bytes, the buffer, GUARD bytes */
    size_t bytes;   /* the buffer's own */
    uint8_t *image; /* an input's allocation as uploaded (it must stay so), else NULL */
} buffer;

typedef struct {
    const table_spec *spec;
    backend be;
    void *state;
    int typed_current;  /* be.typed_current as opened (a check may change it for a while) */
    uint64_t used;      /* bit E_x: entry x was called */
    int failed;         /* a check failed (and may have stopped before calling some entries) */
    char where[256];    /* the op and shape being checked: every failure names them */
    buffer buf[MAX_BUFS];
    int nbuf;
    void *host[MAX_HOST]; /* host arrays of the check, freed by tidy */
    int nhost;
} table;

typedef struct {
    table t[N_TABLES];
    int n; /* the tables this machine runs; t[0] is cpu-fp32 */
} suite;

#define EACH_TABLE(s, t) for (table *t = (s)->t; t < (s)->t + (s)->n; t++)

/* An entry of t's table, marked as exercised; a NULL entry fails the check instead of being
 * called. */
#define OP(t, e) (entry_called((t), E_##e, (t)->be.ops->e != NULL), (t)->be.ops->e)

static int is_fp32(const table *t)
{
    return t->spec->linear == QKV_PRECISION_FP32 && t->spec->attention == QKV_PRECISION_FP32;
}

/* Fails the running test, naming the check (op and shape) and the table. */
static void fail_at(table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_at(table *t, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    print_error("table %s, %s:\n    %s\n", t->spec->name, t->where, msg);
    t->failed = 1;
    fail();
}

static void entry_called(table *t, int e, int present)
{
    t->used |= 1ull << e;
    if (!present) fail_at(t, "entry %s is NULL", ENTRY_NAMES[e]);
}

static void *keep(table *t, void *p)
{
    assert_non_null(p);
    assert_true(t->nhost < MAX_HOST);
    return t->host[t->nhost++] = p;
}
static float *hf(table *t, size_t n) { return keep(t, calloc(n ? n : 1, sizeof(float))); }
static double *hd(table *t, size_t n) { return keep(t, calloc(n ? n : 1, sizeof(double))); }
static int *hi(table *t, size_t n) { return keep(t, calloc(n ? n : 1, sizeof(int))); }

/* n uniform values in [lo, hi) from seed */
static float *urand(table *t, size_t n, uint64_t seed, float lo, float hi)
{
    float *x = hf(t, n);
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * random_uniform(seed, i);
    return x;
}

/* How far into a region of n bytes (at offset from the allocation) the pattern is broken:
 * from its start, the first byte that differs (n: none); from its end, n less the last. */
static size_t pattern_break(const uint8_t *p, size_t n, size_t offset)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != GUARD_BYTES[(offset + i) % 4]) return i;
    return n;
}

static size_t pattern_break_from_end(const uint8_t *p, size_t n, size_t offset)
{
    for (size_t i = n; i > 0; i--)
        if (p[i - 1] != GUARD_BYTES[(offset + i - 1) % 4]) return n - i;
    return n;
}

typedef enum { IN, OUT, INOUT } role;

/* A buffer of `bytes` in t's memory between guards: an input (uploaded from host; it must
 * come back unchanged), a write-only output (NaN until the op writes it) or an accumulated
 * one (uploaded from host). */
static void *dev(table *t, const char *name, role r, const void *host, size_t bytes)
{
    const size_t total = bytes + 2 * GUARD;
    assert_true(t->nbuf < MAX_BUFS);
    uint8_t *base = OP(t, alloc)(total), *image = malloc(total);
    assert_non_null(image);
    if (!base) fail_at(t, "alloc(%zu) gave NULL for %s", total, name);
    if ((uintptr_t)base % 64) fail_at(t, "alloc gave %p for %s: not 64-byte aligned", base, name);
    for (size_t i = 0; i < total; i++) image[i] = GUARD_BYTES[i % 4];
    if (r != OUT && bytes) memcpy(image + GUARD, host, bytes);
    if (OP(t, upload)(base, image, total)) fail_at(t, "upload of %s (%zu bytes) failed", name, total);
    t->buf[t->nbuf++] = (buffer){name, base, bytes, r == IN ? image : NULL};
    if (r != IN) free(image);
    return base + GUARD;
}

static float *fin(table *t, const char *name, const float *x, size_t n)
{
    return dev(t, name, IN, x, n * sizeof *x);
}
static float *fout(table *t, const char *name, size_t n)
{
    return dev(t, name, OUT, NULL, n * sizeof(float));
}
static float *facc(table *t, const char *name, const float *x, size_t n)
{
    return dev(t, name, INOUT, x, n * sizeof *x);
}
static int *iin(table *t, const char *name, const int *x, size_t n)
{
    return dev(t, name, IN, x, n * sizeof *x);
}

static void fetch(table *t, void *host, const void *d, size_t bytes)
{
    if (OP(t, download)(host, d, bytes)) fail_at(t, "download of %zu bytes failed", bytes);
}
static void fetchf(table *t, float *host, const float *d, size_t n)
{
    fetch(t, host, d, n * sizeof *host);
}

/* Every buffer's guards intact, every input as it was uploaded. */
static void verify(table *t)
{
    for (int k = 0; k < t->nbuf; k++) {
        const buffer *b = &t->buf[k];
        const size_t total = b->bytes + 2 * GUARD;
        uint8_t *img = malloc(total);
        assert_non_null(img);
        fetch(t, img, b->base, total);
        const size_t before = pattern_break(img, GUARD, 0);
        const size_t after = GUARD - pattern_break_from_end(img + GUARD + b->bytes, GUARD,
                                                            GUARD + b->bytes);
        size_t changed = b->bytes;
        if (b->image)
            for (size_t i = 0; i < b->bytes; i++)
                if (img[GUARD + i] != b->image[GUARD + i]) {
                    changed = i;
                    break;
                }
        free(img);
        if (before < GUARD)
            fail_at(t, "%s (%zu bytes): written up to %zu bytes before its start", b->name,
                    b->bytes, GUARD - before);
        if (after > 0)
            fail_at(t, "%s (%zu bytes): written up to %zu bytes past its end", b->name, b->bytes,
                    after);
        if (changed < b->bytes)
            fail_at(t, "input %s changed (byte %zu of %zu)", b->name, changed, b->bytes);
    }
}

static void release_all(table *t)
{
    for (int k = 0; k < t->nbuf; k++) {
        OP(t, release)(t->buf[k].base);
        free(t->buf[k].image);
    }
    t->nbuf = 0;
}

/* The end of a run: no failure the table reports (a device's launches fail late), guards and
 * inputs checked, the table's memory given back. */
static void done(table *t)
{
    qkv_error err = {0};
    if (OP(t, finish)(&t->be, &err) != QKV_OK) fail_at(t, "finish: %s", err.msg);
    verify(t);
    release_all(t);
}

/* Frees the host arrays allocated since there were `mark` of them (a loss function's). */
static void untidy_to(table *t, int mark)
{
    while (t->nhost > mark) free(t->host[--t->nhost]);
}

static void tidy(table *t) { untidy_to(t, 0); }

/* A new check: what it is (printed with any failure); what a failed one left is freed. */
static void begin(table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void begin(table *t, const char *fmt, ...)
{
    release_all(t);
    tidy(t);
    t->be.typed_current = t->typed_current;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->where, sizeof t->where, fmt, ap);
    va_end(ap);
}

/* ==== comparisons ======================================================================== */

/* got (n values from the table) against want within bound, elementwise; an infinite want
 * must be met exactly, anything else finite. On failure: the worst element as a multiple of
 * its bound, and the normalised squared error of the whole. */
static void expect(table *t, const char *what, const float *got, const double *want,
                   const double *bound, size_t n)
{
    double worst = 0.0, se = 0.0, sw = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const double g = got[i], w = want[i];
        if (isinf(w)) {
            if (g != w)
                fail_at(t, "%s[%zu] = %.9g, want %g", what, i, g, w);
            continue;
        }
        if (!isfinite(g)) fail_at(t, "%s[%zu] = %g is not finite (want %.9g)", what, i, g, w);
        const double e = fabs(g - w), r = e == 0.0 ? 0.0 : bound[i] > 0 ? e / bound[i] : INFINITY;
        se += e * e, sw += w * w;
        if (r > worst) worst = r, at = i;
    }
    if (getenv("QKV_OPS_VERBOSE"))
        print_message("%-9s %-100.100s %-22s %.3g of its bound\n", t->spec->name, t->where,
                      what, worst);
    if (worst > 1.0)
        fail_at(t, "%s[%zu] = %.9g, want %.9g: the error is %.3g times its bound %.3g "
                "(normalised squared error of the %zu values %.3g)", what, at, (double)got[at],
                want[at], worst, bound[at], n, sw > 0 ? se / sw : se);
}

/* Rounding to nearest errs both ways, so the errors of products rounded to bf16 or int8
 * carry no scale: the least-squares slope of got - want on want must lie within 6 standard
 * errors of 0 (estimated from the residuals, which understates them: a row's rounded x is
 * shared by its outputs) or within one rounding unit of the type, 2^-8 (int8's half step is
 * 1/254). A wrong scale (s_x off by 1%) hides inside each element's worst-case bound, not
 * in the slope. */
static void expect_unscaled(table *t, const char *what, const float *got, const double *want,
                            size_t n, qkv_precision p)
{
    double ww = 0.0, ew = 0.0, rr = 0.0;
    for (size_t i = 0; i < n; i++) ww += want[i] * want[i], ew += (got[i] - want[i]) * want[i];
    if (n < 32 || ww == 0.0) return;
    const double slope = ew / ww;
    for (size_t i = 0; i < n; i++) {
        const double r = got[i] - want[i] - slope * want[i];
        rr += r * r;
    }
    const double se = sqrt(rr / (double)(n - 1) / ww);
    if (getenv("QKV_OPS_VERBOSE"))
        print_message("%-9s %-100.100s %-22s slope %.3g, %.3g standard errors\n", t->spec->name,
                      t->where, what, slope, se > 0 ? fabs(slope) / se : 0.0);
    if (fabs(slope) > fmax(6 * se, p == QKV_PRECISION_FP32 ? 0x1p-20 : U_BF16))
        fail_at(t, "%s: the errors scale with the values: got = want (1 + %.3g), %.3g standard "
                "errors from 1", what, slope, fabs(slope) / se);
}

/* got against want (another table's, or another kernel's, float results) within bound */
static void expect_same(table *t, const char *what, const float *got, const float *want,
                        const double *bound, size_t n)
{
    double *w = hd(t, n);
    for (size_t i = 0; i < n; i++) w[i] = want[i];
    expect(t, what, got, w, bound, n);
}

/* A bound of tol max |want| on every element: gradients through chains of sums, compared
 * across tables or kernels. */
static double *max_bound(table *t, const float *want, size_t n, double tol)
{
    double mx = 0.0, *b = hd(t, n);
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
    for (size_t i = 0; i < n; i++) b[i] = tol * mx;
    return b;
}

/* The bound of a sum of K products as a multiple of the sum of their magnitudes, at the
 * precision of a table's products (float32 sums; at bf16 the operands rounded first). */
static double dot_tol(qkv_precision p, int K)
{
    double tol = (K + 4) * U;
    if (p == QKV_PRECISION_BF16)
        tol = (K + 4) * U * (1 + 3 * U_BF16) + 2 * U_BF16 + U_BF16 * U_BF16;
    return SLACK * tol;
}

/* Gradients of a table compared with the float32 table's (or two kernels'): chains of sums
 * of about K terms each, a few deep, at the precision of the table's products. */
static double grad_tol(qkv_precision p, int K)
{
    return 4 * dot_tol(p, K);
}

/* ==== central differences ================================================================ */

/* A random projection of an op's output, sum r . out in double, as the op runs on t. */
typedef double (*loss_fn)(table *t, const void *ctx);

static double dot_d(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* Central differences of loss with respect to 16 elements spread over x (host values the
 * loss uploads each time), against grad, the backward entry's. The step TU_FD_STEP keeps
 * float32 rounding of the loss far below the difference (outputs that do not depend on the
 * element are computed identically both times), and the tolerance TU_FD_TOL is relative to
 * the largest gradient (tests/unit/test_gradcheck.c). */
static void expect_fd(table *t, const char *what, float *x, size_t n, const float *grad,
                      loss_fn loss, const void *ctx)
{
    double gmax = 1e-2;
    for (size_t i = 0; i < n; i++) gmax = fmax(gmax, fabs(grad[i]));
    const size_t stride = n > 16 ? n / 16 : 1;
    double worst = 0.0;
    for (size_t i = 0; i < n; i += stride) {
        const float saved = x[i], up = saved + TU_FD_STEP, down = saved - TU_FD_STEP;
        x[i] = up;
        const double lp = loss(t, ctx);
        x[i] = down;
        const double lm = loss(t, ctx);
        x[i] = saved;
        const double num = (lp - lm) / ((double)up - down), err = fabs(num - grad[i]) / gmax;
        worst = fmax(worst, err);
        if (!(err <= TU_FD_TOL))
            fail_at(t, "%s[%zu]: central differences give %.7g, the backward %.7g: error %.3g "
                    "of the largest gradient (tolerance %g)", what, i, num, (double)grad[i],
                    err, (double)TU_FD_TOL);
    }
    if (getenv("QKV_OPS_VERBOSE"))
        print_message("%-9s %-100.100s %-22s %.3g of the tolerance (central differences)\n",
                      t->spec->name, t->where, what, worst / TU_FD_TOL);
}

/* a - b elementwise: what a backward added to its accumulated output */
static float *minus(table *t, const float *a, const float *b, size_t n)
{
    float *d = hf(t, n);
    for (size_t i = 0; i < n; i++) d[i] = a[i] - b[i];
    return d;
}

/* The dropout rule (qkv_dropout): element i kept with the counter offset + i, scaled
 * 1 / (1 - p); the factor it multiplies by. */
static double dropout_factor(float p, uint64_t seed, uint64_t i)
{
    if (p <= 0.0f) return 1.0;
    return dropout_keep(p, seed, i) ? 1.0 / (1.0f - p) : 0.0;
}

/* ==== the table itself =================================================================== */

/* No entry is NULL, and ENTRIES names every entry of backend_ops (they follow name and
 * few_rows, all function pointers): a new entry needs its check here. */
static void test_no_entry_missing(void **state)
{
    suite *s = *state;
    const size_t entries = (sizeof(backend_ops) - offsetof(backend_ops, linear_rows)) /
                           sizeof(void (*)(void));
    if (entries != E_COUNT)
        fail_msg("backend_ops has %zu entries, ENTRIES lists %d: add the new entry to ENTRIES "
                 "and give it a check", entries, (int)E_COUNT);
    EACH_TABLE(s, t) {
        begin(t, "the table's entries");
        const backend_ops *o = t->be.ops;
        if (!o->name || strcmp(o->name, t->spec->name))
            fail_at(t, "the table is named %s", o->name ? o->name : "(NULL)");
        if (o->few_rows < 0) fail_at(t, "few_rows = %d", o->few_rows);
#define ENTRY_PRESENT(e) \
        if (!o->e) fail_at(t, "entry " #e " is NULL");
        ENTRIES(ENTRY_PRESENT)
#undef ENTRY_PRESENT
    }
}

/* alloc, upload, download and release on their own: odd sizes, bytes back as they went */
static void test_memory(void **state)
{
    suite *s = *state;
    static const size_t sizes[] = {1, 3, 64, 4097};
    EACH_TABLE(s, t)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            begin(t, "alloc/upload/download of %zu bytes", sizes[k]);
            uint8_t *a = keep(t, malloc(sizes[k])), *b = keep(t, malloc(sizes[k]));
            for (size_t i = 0; i < sizes[k]; i++) a[i] = (uint8_t)random_u32(k, i);
            uint8_t *d = dev(t, "bytes", INOUT, a, sizes[k]);
            if (OP(t, upload)(d, a, sizes[k])) /* again, into the buffer proper */
                fail_at(t, "upload failed");
            fetch(t, b, d, sizes[k]);
            if (memcmp(a, b, sizes[k])) fail_at(t, "download differs from what was uploaded");
            done(t);
            tidy(t);
        }
}

/* ==== linear: y (N, out) = x (N, in) W^T + b ============================================ */

typedef struct {
    int N, in, out, bias;
} linear_shape;

/* one row and many, around few_rows (12 on the CPU), widths past 8 and 16 lanes, the int8
 * kernel's 4-wide k and 64-wide channel padding; the last two past the kernels' thresholds
 * for threads (2^15 weights for few rows, 2^16 values for the int8 kernel and the bias) */
static const linear_shape LINEAR_SHAPES[] = {
    {1, 1, 1, 1},    {1, 67, 33, 1},   {2, 16, 16, 0},   {3, 17, 129, 1},  {12, 31, 64, 1},
    {13, 31, 65, 0}, {37, 130, 70, 1}, {64, 257, 48, 1}, {5, 3, 7, 1},     {100, 64, 10, 0},
    {4, 256, 130, 1}, {300, 260, 260, 1},
};

/* The arithmetic of a linear entry of t for weight w: int8 only for an int8 weight whose
 * copies are current (any other product is float32's on the int8 table), else the table's. */
static qkv_precision linear_arith(const table *t, const weight *w)
{
    if (t->spec->linear == QKV_PRECISION_INT8)
        return w->type == WEIGHT_INT8 && t->be.typed_current ? QKV_PRECISION_INT8
                                                             : QKV_PRECISION_FP32;
    return t->spec->linear;
}

/* y = x W^T + b in double, and each element's bound at precision p: dot_tol's, or for int8
 * ops/cpu/int8.h's, with s_x, s_w the row's and channel's max |.| / 127 (the half steps
 * widened by 2^-12 for the float32 reciprocal that quantises, and 8u for the scales'
 * roundings and the final multiply-add). */
static void linear_reference(double *y, double *bound, const float *x, const float *W,
                             const float *b, int N, int in, int out, qkv_precision p)
{
    for (int n = 0; n < N; n++)
        for (int o = 0; o < out; o++) {
            const float *xr = x + (size_t)n * in, *wr = W + (size_t)o * in;
            double sum = b ? b[o] : 0.0, mag = b ? fabs(b[o]) : 0.0, sx = 0.0, sw = 0.0, q = 0.0;
            for (int k = 0; k < in; k++) sx = fmax(sx, fabs(xr[k])), sw = fmax(sw, fabs(wr[k]));
            sx /= 127, sw /= 127;
            for (int k = 0; k < in; k++) {
                sum += (double)xr[k] * wr[k];
                mag += fabs((double)xr[k] * wr[k]);
                q += fabs(xr[k]) * sw / 2 + fabs(wr[k]) * sx / 2 + sx * sw / 4;
            }
            y[(size_t)n * out + o] = sum;
            bound[(size_t)n * out + o] = p == QKV_PRECISION_INT8
                                             ? SLACK * ((1 + 0x1p-12) * q + 8 * U * mag)
                                             : dot_tol(p, in) * mag;
        }
}

/* W (out, in) in t's memory, typed as precision_weight types a model's weight for t's
 * precision: float32, with a bf16 copy, or quantised per channel to int8 (the packed matrix
 * copied into t's memory, q its descriptor). The typed copy is made from `from`: another
 * matrix than W tests that a stale copy is never read. */
static weight typed_weight(table *t, weight_type type, const float *W, const float *from,
                           int out, int in, int8_matrix *q)
{
    const size_t n = (size_t)out * in;
    weight w = weight_f32(fin(t, "W", W, n));
    if (type == WEIGHT_BF16) {
        uint16_t *h = keep(t, malloc(n * sizeof *h));
        for (size_t i = 0; i < n; i++) h[i] = bf16_from_float(from[i]);
        w.type = WEIGHT_BF16, w.bf16 = dev(t, "W (bf16)", IN, h, n * sizeof *h);
    } else if (type == WEIGHT_INT8) {
        int8_matrix h;
        qkv_error err = {0};
        if (int8_matrix_quantise(&h, from, out, in, &err) != QKV_OK) fail_at(t, "%s", err.msg);
        *q = h;
        q->w = dev(t, "W (int8)", IN, h.w, (size_t)h.out_pad / INT8_BLOCK * h.k4 * 64);
        q->scale = dev(t, "W scales", IN, h.scale, (size_t)h.out_pad * sizeof *h.scale);
        q->comp = dev(t, "W sums", IN, h.comp, (size_t)h.out_pad * sizeof *h.comp);
        int8_matrix_free(&h);
        w.type = WEIGHT_INT8, w.int8 = q;
    }
    return w;
}

static const char *weight_name(weight_type w)
{
    return w == WEIGHT_BF16 ? "bf16" : w == WEIGHT_INT8 ? "int8" : "float32";
}

/* linear_rows, linear_gemm and op_linear_forward (which picks one by few_rows) on one shape
 * and weight; stale: the table told its typed copies are not current (a training pass), and
 * handed copies of another matrix, which it must not read. */
static void check_linear(table *t, const linear_shape *sh, weight_type type, int stale)
{
    const int N = sh->N, in = sh->in, out = sh->out;
    begin(t, "linear_rows / linear_gemm, %s weight%s, N %d in %d out %d%s", weight_name(type),
          stale ? " whose copy is stale" : "", N, in, out, sh->bias ? "" : ", no bias");
    const uint64_t seed = 1000003u * N + 1009u * in + out;
    const float *x = urand(t, (size_t)N * in, seed, -1, 1);
    const float *W = urand(t, (size_t)out * in, seed + 1, -1, 1);
    const float *b = sh->bias ? urand(t, out, seed + 2, -1, 1) : NULL;
    const float *other = urand(t, (size_t)out * in, seed + 3, -1, 1);
    if (type != WEIGHT_F32) t->be.typed_current = !stale;
    int8_matrix q;
    const weight w = typed_weight(t, type, W, stale ? other : W, out, in, &q);
    double *want = hd(t, (size_t)N * out), *bound = hd(t, (size_t)N * out);
    linear_reference(want, bound, x, W, b, N, in, out, linear_arith(t, &w));
    const float *xd = fin(t, "x", x, (size_t)N * in), *bd = b ? fin(t, "b", b, out) : NULL;
    float *y = hf(t, (size_t)N * out);
    static const char *const names[] = {"linear_rows y", "linear_gemm y", "op_linear_forward y"};
    for (int e = 0; e < 3; e++) {
        float *yd = fout(t, "y", (size_t)N * out);
        if (e == 0) OP(t, linear_rows)(&t->be, yd, xd, &w, bd, N, in, out);
        if (e == 1) OP(t, linear_gemm)(&t->be, yd, xd, &w, bd, N, in, out);
        if (e == 2) op_linear_forward(&t->be, yd, xd, &w, bd, N, in, out);
        fetchf(t, y, yd, (size_t)N * out);
        expect(t, names[e], y, want, bound, (size_t)N * out);
        expect_unscaled(t, names[e], y, want, (size_t)N * out, linear_arith(t, &w));
    }
    done(t);
    tidy(t);
    t->be.typed_current = t->typed_current;
}

static void test_linear(void **state)
{
    suite *s = *state;
    EACH_TABLE(s, t)
        for (size_t k = 0; k < sizeof LINEAR_SHAPES / sizeof *LINEAR_SHAPES; k++) {
            check_linear(t, &LINEAR_SHAPES[k], WEIGHT_F32, 0);
            const weight_type typed = t->spec->linear == QKV_PRECISION_BF16   ? WEIGHT_BF16
                                      : t->spec->linear == QKV_PRECISION_INT8 ? WEIGHT_INT8
                                                                              : WEIGHT_F32;
            if (typed == WEIGHT_F32) continue;
            check_linear(t, &LINEAR_SHAPES[k], typed, 0);
            check_linear(t, &LINEAR_SHAPES[k], typed, 1);
        }
}

/* ---- linear_best: each row's k best of y = x W^T + b and its log normaliser --------------- */

/* On one shape and the table's typed weight: the k best of each row are row_best's of the
 * logits the table's own linear entries write (op_linear_forward) (ids and values bit for bit), the normalisers
 * within ops/cpu/best.h's bound of log_normaliser of them (exactly, where the table writes
 * the logits out first), and nothing is reported as not finite; with one bias infinite, the
 * logits are reported. Ties, banned ids, chunks and threads: tests/unit/test_best.c. */
static void check_linear_best(table *t, const linear_shape *sh, weight_type type)
{
    const int N = sh->N, in = sh->in, out = sh->out, k = out < 4 ? out : 4;
    begin(t, "linear_best, %s weight, N %d in %d out %d", weight_name(type), N, in, out);
    const uint64_t seed = 7000003u * N + 1013u * in + out;
    const float *x = urand(t, (size_t)N * in, seed, -1, 1);
    const float *W = urand(t, (size_t)out * in, seed + 1, -1, 1);
    float *b = urand(t, out, seed + 2, -1, 1);
    int8_matrix q;
    const weight w = typed_weight(t, type, W, W, out, in, &q);
    const float *xd = fin(t, "x", x, (size_t)N * in);
    float *y = hf(t, (size_t)N * out), *yd = fout(t, "y", (size_t)N * out);
    op_linear_forward(&t->be, yd, xd, &w, fin(t, "b", b, out), N, in, out);
    fetchf(t, y, yd, (size_t)N * out);
    int *ids = hi(t, (size_t)N * k), *want_ids = hi(t, k), nonfinite = -1;
    float *vals = hf(t, (size_t)N * k), *want_vals = hf(t, k);
    double *lse = hd(t, N);
    const best_request rq = {k, 0, ids, vals, lse, &nonfinite};
    OP(t, linear_best)(&t->be, &rq, xd, &w, fin(t, "b", b, out), N, in, out,
                       fout(t, "scratch", (size_t)N * out));
    const int fused = linear_arith(t, &w) == QKV_PRECISION_INT8;
    const double tol = fused ? 0x1p-24 * (log((double)out) + 2) + 3e-7 : 0.0;
    for (int r = 0; r < N; r++) {
        const float *yr = y + (size_t)r * out;
        row_best(yr, out, k, 0, want_ids, want_vals);
        if (memcmp(ids + (size_t)r * k, want_ids, k * sizeof *ids) ||
            memcmp(vals + (size_t)r * k, want_vals, k * sizeof *vals))
            fail_at(t, "row %d: its best are not those of the logits the table writes", r);
        const double want = log_normaliser(yr, out);
        if (!(fabs(lse[r] - want) <= tol))
            fail_at(t, "row %d: log normaliser %.17g, of the logits %.17g (allowed %g)", r,
                    lse[r], want, tol);
    }
    if (nonfinite != 0) fail_at(t, "finite logits reported as not finite (%d)", nonfinite);
    b[out / 2] = INFINITY;
    OP(t, linear_best)(&t->be, &rq, xd, &w, fin(t, "b (one inf)", b, out), N, in, out,
                       fout(t, "scratch", (size_t)N * out));
    if (nonfinite != 1) fail_at(t, "an infinite logit not reported (%d)", nonfinite);
    done(t);
    tidy(t);
}

static void test_linear_best(void **state)
{
    suite *s = *state;
    EACH_TABLE(s, t)
        for (size_t k = 0; k < sizeof LINEAR_SHAPES / sizeof *LINEAR_SHAPES; k++) {
            check_linear_best(t, &LINEAR_SHAPES[k], WEIGHT_F32);
            if (t->spec->linear == QKV_PRECISION_INT8)
                check_linear_best(t, &LINEAR_SHAPES[k], WEIGHT_INT8);
            if (t->spec->linear == QKV_PRECISION_BF16)
                check_linear_best(t, &LINEAR_SHAPES[k], WEIGHT_BF16);
        }
}

/* ---- linear_backward: dx (N, in) += dy W, dW (out, in) += dy^T x, db (out) += sum_n dy ---- */

typedef struct {
    int N, in, out;
    int grads; /* 1 dx, 2 dW, 4 db: which are asked for (the others NULL) */
    float *x, *W, *b, *dy, *dx0, *dW0, *db0;
} linear_bwd;

typedef struct {
    float *dx, *dW, *db;
} linear_grads;

static void linear_backward_run(table *t, const linear_bwd *c, linear_grads *g)
{
    const size_t nx = (size_t)c->N * c->in, nw = (size_t)c->out * c->in;
    float *dx = c->grads & 1 ? facc(t, "dx", c->dx0, nx) : NULL;
    float *dW = c->grads & 2 ? facc(t, "dW", c->dW0, nw) : NULL;
    float *db = c->grads & 4 ? facc(t, "db", c->db0, c->out) : NULL;
    OP(t, linear_backward)(&t->be, dx, dW, db, fin(t, "dy", c->dy, (size_t)c->N * c->out),
                           fin(t, "x", c->x, nx), fin(t, "W", c->W, nw), c->N, c->in, c->out);
    if (dx) fetchf(t, g->dx, dx, nx);
    if (dW) fetchf(t, g->dW, dW, nw);
    if (db) fetchf(t, g->db, db, c->out);
    done(t);
}

/* the forward, for central differences: sum dy . (x W^T + b) */
static double linear_loss(table *t, const void *ctx)
{
    const linear_bwd *c = ctx;
    const size_t ny = (size_t)c->N * c->out;
    float *y = fout(t, "y", ny), *host = malloc(ny * sizeof *host);
    const weight w = weight_f32(fin(t, "W", c->W, (size_t)c->out * c->in));
    assert_non_null(host);
    op_linear_forward(&t->be, y, fin(t, "x", c->x, (size_t)c->N * c->in), &w,
                      fin(t, "b", c->b, c->out), c->N, c->in, c->out);
    fetchf(t, host, y, ny);
    done(t);
    const double L = dot_d(host, c->dy, ny);
    free(host);
    return L;
}

/* The gradients in double from their starting values, and the magnitudes of the sums
 * (sum |terms| + |start|) that bound them. */
static void linear_backward_reference(table *t, const linear_bwd *c, double *want[3],
                                      double *mag[3])
{
    const int N = c->N, in = c->in, out = c->out;
    for (int i = 0; i < 3; i++) {
        const size_t n = i == 0 ? (size_t)N * in : i == 1 ? (size_t)out * in : (size_t)out;
        const float *init = i == 0 ? c->dx0 : i == 1 ? c->dW0 : c->db0;
        want[i] = hd(t, n), mag[i] = hd(t, n);
        for (size_t e = 0; e < n; e++) want[i][e] = init[e], mag[i][e] = fabs(init[e]);
    }
    for (int n = 0; n < N; n++)
        for (int o = 0; o < out; o++) {
            const double g = c->dy[(size_t)n * out + o];
            want[2][o] += g, mag[2][o] += fabs(g);
            for (int k = 0; k < in; k++) {
                const double w = c->W[(size_t)o * in + k], x = c->x[(size_t)n * in + k];
                want[0][(size_t)n * in + k] += g * w, mag[0][(size_t)n * in + k] += fabs(g * w);
                want[1][(size_t)o * in + k] += g * x, mag[1][(size_t)o * in + k] += fabs(g * x);
            }
        }
}

/* On a float32 table against the reference and central differences of its forward; on the
 * others against the float32 table, within both bounds (the bias's sum is float32's on every
 * CPU table). Then the NULL combinations. */
static void check_linear_backward(suite *s, table *t, const linear_shape *sh)
{
    const int N = sh->N, in = sh->in, out = sh->out;
    const size_t nx = (size_t)N * in, nw = (size_t)out * in;
    begin(t, "linear_backward, N %d in %d out %d", N, in, out);
    const uint64_t seed = 7u * N + 31u * in + out;
    linear_bwd c = {N, in, out, 7, urand(t, nx, seed, -1, 1), urand(t, nw, seed + 1, -1, 1),
                    urand(t, out, seed + 2, -1, 1), urand(t, (size_t)N * out, seed + 3, -1, 1),
                    urand(t, nx, seed + 4, -1, 1), urand(t, nw, seed + 5, -1, 1),
                    urand(t, out, seed + 6, -1, 1)};
    linear_grads g = {hf(t, nx), hf(t, nw), hf(t, out)};
    linear_backward_run(t, &c, &g);
    double *want[3], *mag[3];
    linear_backward_reference(t, &c, want, mag);
    const size_t sizes[3] = {nx, nw, (size_t)out};
    const int K[3] = {out, N, N};
    const float *got[3] = {g.dx, g.dW, g.db};
    static const char *const names[3] = {"dx", "dW", "db"};
    const qkv_precision p = t->spec->linear == QKV_PRECISION_BF16 ? QKV_PRECISION_BF16
                                                                   : QKV_PRECISION_FP32;
    if (is_fp32(t)) {
        for (int i = 0; i < 3; i++) {
            double *bound = hd(t, sizes[i]);
            for (size_t e = 0; e < sizes[i]; e++) bound[e] = dot_tol(p, K[i]) * mag[i][e];
            expect(t, names[i], got[i], want[i], bound, sizes[i]);
        }
        expect_fd(t, "dx", c.x, nx, minus(t, g.dx, c.dx0, nx), linear_loss, &c);
        expect_fd(t, "dW", c.W, nw, minus(t, g.dW, c.dW0, nw), linear_loss, &c);
        expect_fd(t, "db", c.b, out, minus(t, g.db, c.db0, out), linear_loss, &c);
    } else {
        linear_grads f = {hf(t, nx), hf(t, nw), hf(t, out)};
        linear_backward_run(&s->t[0], &c, &f);
        const float *ref[3] = {f.dx, f.dW, f.db};
        for (int i = 0; i < 3; i++) {
            double *bound = hd(t, sizes[i]);
            const double tol = (i == 2 ? dot_tol(QKV_PRECISION_FP32, K[i]) : dot_tol(p, K[i])) +
                               dot_tol(QKV_PRECISION_FP32, K[i]);
            for (size_t e = 0; e < sizes[i]; e++) bound[e] = tol * mag[i][e];
            expect_same(t, names[i], got[i], ref[i], bound, sizes[i]);
        }
    }
    /* any gradient may be NULL: the others as with all three */
    static const int subsets[] = {1, 6, 2, 0};
    for (size_t k = 0; k < sizeof subsets / sizeof *subsets; k++) {
        linear_grads h = {hf(t, nx), hf(t, nw), hf(t, out)};
        c.grads = subsets[k];
        linear_backward_run(t, &c, &h);
        const float *part[3] = {h.dx, h.dW, h.db};
        for (int i = 0; i < 3; i++)
            if (c.grads >> i & 1 && memcmp(part[i], got[i], sizes[i] * sizeof(float)))
                fail_at(t, "%s differs when asked for with grads %d", names[i], c.grads);
    }
    tidy(t);
}

static void test_linear_backward(void **state)
{
    suite *s = *state;
    EACH_TABLE(s, t)
        for (size_t k = 0; k < sizeof LINEAR_SHAPES / sizeof *LINEAR_SHAPES; k++)
            check_linear_backward(s, t, &LINEAR_SHAPES[k]);
}

/* ==== attention: O (B, n, H, v) from Q (B, n, H, d), K (B, m, H, d), V (B, m, H, v) ===== */

static void test_choose_attention(void **state)
{
    suite *s = *state;
    /* linear whenever the model has it; else the flash kernel from flash_min_keys keys on,
     * unless the caller needs the weights */
    static const struct {
        qkv_attention_kind kind;
        int keys, need_weights, flash_min_keys;
        attention_kernel want;
    } rules[] = {
        {QKV_ATTENTION_LINEAR, 1, 0, 256, ATTENTION_LINEAR},
        {QKV_ATTENTION_LINEAR, 4096, 1, 1, ATTENTION_LINEAR},
        {QKV_ATTENTION_SOFTMAX, 255, 0, 256, ATTENTION_MATERIALISED},
        {QKV_ATTENTION_SOFTMAX, 256, 0, 256, ATTENTION_FLASH},
        {QKV_ATTENTION_SOFTMAX, 257, 0, 256, ATTENTION_FLASH},
        {QKV_ATTENTION_SOFTMAX, 257, 1, 256, ATTENTION_MATERIALISED},
        {QKV_ATTENTION_SOFTMAX, 1, 0, 1, ATTENTION_FLASH},
        {QKV_ATTENTION_SOFTMAX, 1, 0, 2, ATTENTION_MATERIALISED},
        {QKV_ATTENTION_SOFTMAX, 100000, 0, INT_MAX, ATTENTION_MATERIALISED},
    };
    EACH_TABLE(s, t)
        for (size_t k = 0; k < sizeof rules / sizeof *rules; k++) {
            begin(t, "choose_attention, rule %zu", k);
            const attention_options o = {.need_weights = rules[k].need_weights,
                                         .flash_min_keys = rules[k].flash_min_keys,
                                         .head_dim = 64};
            const attention_kernel got = OP(t, choose_attention)(rules[k].kind, rules[k].keys, &o);
            if (got != rules[k].want)
                fail_at(t, "%s attention over %d keys, need_weights %d, flash_min_keys %d: "
                        "kernel %d, want %d",
                        rules[k].kind == QKV_ATTENTION_LINEAR ? "linear" : "softmax",
                        rules[k].keys, o.need_weights, o.flash_min_keys, (int)got,
                        (int)rules[k].want);
        }
}

typedef struct {
    qkv_attention_shape s;
    int lens;   /* valid lengths: 0 none, 1 per sequence, 2 per query (softmax kernels) */
    int causal;
    float p;    /* dropout on the weights (the linear kernel has none) */
} attention_case;

static const attention_case ATTENTION_CASES[] = {
    {{1, 1, 1, 1, 1, 1}, 0, 0, 0.0f},
    {{2, 2, 5, 7, 6, 5}, 1, 0, 0.0f},      /* lengths; sequence 1 sees no key */
    {{2, 2, 5, 7, 6, 5}, 1, 1, 0.25f},     /* lengths, causal, dropout */
    {{3, 2, 5, 3, 4, 4}, 0, 1, 0.0f},      /* causal, more queries than keys: some see none */
    {{2, 3, 4, 6, 3, 7}, 2, 0, 0.1f},      /* per-query lengths, some 0 */
    {{1, 3, 1, 130, 17, 9}, 1, 0, 0.0f},   /* one query (a step) over more keys than a tile */
    {{2, 1, 130, 129, 8, 16}, 0, 1, 0.1f}, /* tiles with tails, causal */
    {{1, 2, 33, 33, 64, 64}, 0, 0, 0.0f},
};
enum { N_ATTENTION_CASES = sizeof ATTENTION_CASES / sizeof *ATTENTION_CASES };

static const char *kernel_name(attention_kernel k)
{
    return k == ATTENTION_MATERIALISED ? "materialised" : k == ATTENTION_FLASH ? "flash" : "linear";
}

/* The linear kernel takes per-sequence lengths only (backend.h). */
static int kernel_takes(attention_kernel k, const attention_case *c)
{
    return k != ATTENTION_LINEAR || c->lens != 2;
}

/* An attention's inputs on the host, the gradients' starting values included. */
typedef struct {
    const attention_case *c;
    attention_kernel k;
    float *Q, *K, *V, *dO, *dQ0, *dK0, *dV0;
    int *lens; /* NULL, B or B n values */
    qkv_dropout drop;
} attention_io;

typedef struct {
    float *O, *S, *dQ, *dK, *dV;
} attention_out;

typedef struct {
    size_t q, k, v, o;
} attention_sizes;

static attention_sizes sizes_of(const qkv_attention_shape *s)
{
    const size_t BH = (size_t)s->B * s->H;
    return (attention_sizes){BH * s->n * s->d, BH * s->m * s->d, BH * s->m * s->v,
                             BH * s->n * s->v};
}

static const char *lens_name(const attention_case *c)
{
    return c->lens == 2 ? "per query" : c->lens ? "per sequence" : "none";
}

static attention_io attention_inputs(table *t, const attention_case *c, attention_kernel k,
                                     uint64_t seed)
{
    const qkv_attention_shape *s = &c->s;
    const attention_sizes z = sizes_of(s);
    attention_io io = {c, k, urand(t, z.q, seed, -2, 2), urand(t, z.k, seed + 1, -2, 2),
                       urand(t, z.v, seed + 2, -1, 1), urand(t, z.o, seed + 3, -1, 1),
                       urand(t, z.q, seed + 4, -1, 1), urand(t, z.k, seed + 5, -1, 1),
                       urand(t, z.v, seed + 6, -1, 1), NULL,
                       (qkv_dropout){c->p, seed + 7, c->p > 0 ? 1000 : 0}};
    if (c->lens == 1) {
        io.lens = hi(t, s->B);
        for (int b = 0; b < s->B; b++) io.lens[b] = b == 0 ? s->m : b == 1 ? 0 : 1 + 5 * b % s->m;
    } else if (c->lens == 2) {
        io.lens = hi(t, (size_t)s->B * s->n);
        for (int i = 0; i < s->B * s->n; i++) io.lens[i] = (3 * i + 1) % (s->m + 1);
    }
    return io;
}

/* How many of the keys 0 .. m - 1 query i of sequence b sees (qkv_mask's rule: its length,
 * then causal: keys j <= i + (m - n)). */
static int visible(const attention_io *io, int b, int i)
{
    const qkv_attention_shape *s = &io->c->s;
    int len = s->m;
    if (io->lens) {
        const int l = io->c->lens == 2 ? io->lens[(size_t)b * s->n + i] : io->lens[b];
        if (l < len) len = l;
    }
    if (io->c->causal && i + (s->m - s->n) + 1 < len) len = i + (s->m - s->n) + 1;
    return len < 0 ? 0 : len;
}

/* Forward and, with grads (1 dQ, 2 dK, 4 dV), backward of io's kernel on t: O, what forward
 * saves (S, exactly attention_saved_floats) and the gradients come back in o; each pass
 * gets a fresh scratch of exactly attention_scratch_floats. Backward must leave O and S as
 * they were. */
static void attention_run(table *t, const attention_io *io, int grads, attention_out *o)
{
    const qkv_attention_shape *s = &io->c->s;
    const attention_sizes z = sizes_of(s);
    const size_t saved = OP(t, attention_saved_floats)(io->k, s);
    const size_t scratch = OP(t, attention_scratch_floats)(io->k, s);
    const qkv_attention_inputs x = {fin(t, "Q", io->Q, z.q), fin(t, "K", io->K, z.k),
                                    fin(t, "V", io->V, z.v)};
    const size_t nl = io->c->lens == 2 ? (size_t)s->B * s->n : (size_t)s->B;
    const qkv_mask mask = {io->lens ? iin(t, "valid_lens", io->lens, nl) : NULL,
                           io->c->lens == 2, io->c->causal};
    const qkv_mask *m = io->lens || io->c->causal ? &mask : NULL;
    float *O = fout(t, "O", z.o), *S = fout(t, "S (saved)", saved);
    OP(t, attention_forward)(io->k, O, S, &x, s, m, io->drop,
                             fout(t, "forward scratch", scratch));
    fetchf(t, o->O, O, z.o);
    if (o->S) fetchf(t, o->S, S, saved);
    if (grads) {
        qkv_attention_grads dx = {grads & 1 ? facc(t, "dQ", io->dQ0, z.q) : NULL,
                                  grads & 2 ? facc(t, "dK", io->dK0, z.k) : NULL,
                                  grads & 4 ? facc(t, "dV", io->dV0, z.v) : NULL};
        OP(t, attention_backward)(io->k, &dx, fin(t, "dO", io->dO, z.o), O, S, &x, s, m,
                                  io->drop, fout(t, "backward scratch", scratch));
        if (dx.dQ) fetchf(t, o->dQ, dx.dQ, z.q);
        if (dx.dK) fetchf(t, o->dK, dx.dK, z.k);
        if (dx.dV) fetchf(t, o->dV, dx.dV, z.v);
        float *again = malloc((z.o + saved + 1) * sizeof *again);
        assert_non_null(again);
        fetchf(t, again, O, z.o);
        fetchf(t, again + z.o, S, saved);
        const int same = !memcmp(again, o->O, z.o * sizeof *again) &&
                         (!o->S || !memcmp(again + z.o, o->S, saved * sizeof *again));
        free(again);
        if (!same) fail_at(t, "backward changed forward's O or S");
    }
    done(t);
}

/* Softmax attention, row by row: scores s_j = Q_i . K_j / sqrt d over the visible keys,
 * P = softmax(s) (which the materialised kernel saves), L = log sum_j e^(s_j) (which flash
 * saves; -inf when no key is seen), O = dropout(P) V, dropout's counter the flat index into
 * P (B, H, n, m) plus the offset. Bounds: a score errs by delta <= dot_tol(d) sum |q k| /
 * sqrt d, so P_j by P_j (2 delta + (l + 8) u) over l visible keys (the exponential, the sum,
 * the division), O by sum_j |P'_j V_j| (that + dot_tol(l)), L by delta + (l + 8) u. */
typedef struct {
    double *O, *Ob, *P, *Pb, *L, *Lb;
} attention_ref;

static attention_ref softmax_attention_reference(table *t, const attention_io *io)
{
    const qkv_attention_shape *s = &io->c->s;
    const int B = s->B, H = s->H, n = s->n, m = s->m, d = s->d, v = s->v;
    const size_t nP = (size_t)B * H * n * m, no = sizes_of(s).o;
    attention_ref r = {hd(t, no), hd(t, no), hd(t, nP), hd(t, nP), hd(t, (size_t)B * H * n),
                       hd(t, (size_t)B * H * n)};
    const qkv_precision p = t->spec->attention;
    double *sc = hd(t, m);
    const double scale = 1.0 / sqrt((double)d);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < n; i++) {
                const int l = visible(io, b, i);
                const size_t row = ((size_t)b * H + h) * n + i, prow = row * m;
                const float *q = io->Q + (((size_t)b * n + i) * H + h) * d;
                double mx = -INFINITY, sum = 0.0, delta = 0.0;
                for (int j = 0; j < l; j++) {
                    const float *k = io->K + (((size_t)b * m + j) * H + h) * d;
                    double dot = 0.0, mag = 0.0;
                    for (int c = 0; c < d; c++)
                        dot += (double)q[c] * k[c], mag += fabs((double)q[c] * k[c]);
                    sc[j] = dot * scale;
                    delta = fmax(delta, dot_tol(p, d) * mag * scale);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j < l; j++) sum += exp(sc[j] - mx);
                const double prel = SLACK * (2 * delta + (l + 8) * U);
                for (int j = 0; j < m; j++) {
                    r.P[prow + j] = j < l ? exp(sc[j] - mx) / sum : 0.0;
                    r.Pb[prow + j] = r.P[prow + j] * prel;
                }
                r.L[row] = l ? mx + log(sum) : -INFINITY;
                r.Lb[row] = SLACK * (delta + (l + 8) * U) + 2 * U * fabs(r.L[row]);
                for (int c = 0; c < v; c++) {
                    double o = 0.0, om = 0.0;
                    for (int j = 0; j < l; j++) {
                        const double pj =
                            r.P[prow + j] *
                            dropout_factor(io->drop.p, io->drop.seed, io->drop.offset + prow + j);
                        const double vj = io->V[(((size_t)b * m + j) * H + h) * v + c];
                        o += pj * vj, om += fabs(pj * vj);
                    }
                    const size_t at = (((size_t)b * n + i) * H + h) * v + c;
                    r.O[at] = o, r.Ob[at] = om * (prel + dot_tol(p, l));
                }
            }
    return r;
}

/* Linear attention (phi = elu + 1): O_i = sum_j a_j V_j / (sum_j a_j + eps), a_j = phi(Q_i)
 * . phi(K_j), over the visible keys (lengths per sequence, causal); no dropout. Every a_j is
 * > 0, so O errs by at most (sum_j a_j |V_j| / den + |O|) (d + l + 12) u (the phi's, the
 * products, the two sums, the division). */
static double phi_ref(double x) { return x > 0 ? x + 1 : exp(x); }

static attention_ref linear_attention_reference(table *t, const attention_io *io)
{
    const qkv_attention_shape *s = &io->c->s;
    const int B = s->B, H = s->H, n = s->n, m = s->m, d = s->d, v = s->v;
    attention_ref r = {hd(t, sizes_of(s).o), hd(t, sizes_of(s).o), NULL, NULL, NULL, NULL};
    double *a = hd(t, m);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < n; i++) {
                const int l = visible(io, b, i);
                const float *q = io->Q + (((size_t)b * n + i) * H + h) * d;
                double den = QKV_LINEAR_ATTENTION_EPS;
                for (int j = 0; j < l; j++) {
                    const float *k = io->K + (((size_t)b * m + j) * H + h) * d;
                    a[j] = 0.0;
                    for (int c = 0; c < d; c++) a[j] += phi_ref(q[c]) * phi_ref(k[c]);
                    den += a[j];
                }
                for (int c = 0; c < v; c++) {
                    double num = 0.0, mag = 0.0;
                    for (int j = 0; j < l; j++) {
                        const double vj = io->V[(((size_t)b * m + j) * H + h) * v + c];
                        num += a[j] * vj, mag += a[j] * fabs(vj);
                    }
                    const size_t at = (((size_t)b * n + i) * H + h) * v + c;
                    r.O[at] = num / den;
                    r.Ob[at] = SLACK * (mag / den + fabs(r.O[at])) * (d + l + 12) * U;
                }
            }
    return r;
}

static void check_attention_forward(table *t, const attention_case *c, attention_kernel k)
{
    const qkv_attention_shape *s = &c->s;
    begin(t, "attention_forward (%s), B %d H %d n %d m %d d %d v %d, lengths %s%s, dropout %g",
          kernel_name(k), s->B, s->H, s->n, s->m, s->d, s->v, lens_name(c),
          c->causal ? ", causal" : "", (double)c->p);
    const attention_io io = attention_inputs(t, c, k, 17u * s->n + s->m);
    attention_out o = {hf(t, sizes_of(s).o), hf(t, OP(t, attention_saved_floats)(k, s)), NULL,
                       NULL, NULL};
    attention_run(t, &io, 0, &o);
    if (k == ATTENTION_LINEAR) {
        const attention_ref r = linear_attention_reference(t, &io);
        expect(t, "O", o.O, r.O, r.Ob, sizes_of(s).o);
    } else {
        const attention_ref r = softmax_attention_reference(t, &io);
        expect(t, "O", o.O, r.O, r.Ob, sizes_of(s).o);
        if (k == ATTENTION_MATERIALISED)
            expect(t, "P (saved)", o.S, r.P, r.Pb, (size_t)s->B * s->H * s->n * s->m);
        else
            expect(t, "L (saved)", o.S, r.L, r.Lb, (size_t)s->B * s->H * s->n);
    }
    tidy(t);
}

static void test_attention_forward(void **state)
{
    suite *s = *state;
    EACH_TABLE(s, t)
        for (int c = 0; c < N_ATTENTION_CASES; c++)
            for (int k = ATTENTION_MATERIALISED; k <= ATTENTION_LINEAR; k++)
                if (kernel_takes(k, &ATTENTION_CASES[c]))
                    check_attention_forward(t, &ATTENTION_CASES[c], k);
}

/* the forward, for central differences: sum dO . O */
static double attention_loss(table *t, const void *ctx)
{
    const attention_io *io = ctx;
    const size_t no = sizes_of(&io->c->s).o;
    attention_out o = {malloc(no * sizeof(float)), NULL, NULL, NULL, NULL};
    assert_non_null(o.O);
    attention_run(t, io, 0, &o);
    const double L = dot_d(o.O, io->dO, no);
    free(o.O);
    return L;
}

/* On a float32 table against central differences of its forward; on the others against the
 * float32 table's gradients. Then one gradient asked for at a time. */
static void check_attention_backward(suite *su, table *t, const attention_case *c,
                                     attention_kernel k)
{
    const qkv_attention_shape *s = &c->s;
    const attention_sizes z = sizes_of(s);
    begin(t, "attention_backward (%s), B %d H %d n %d m %d d %d v %d, lengths %s%s, dropout %g",
          kernel_name(k), s->B, s->H, s->n, s->m, s->d, s->v, lens_name(c),
          c->causal ? ", causal" : "", (double)c->p);
    attention_io io = attention_inputs(t, c, k, 29u * s->n + s->m);
    attention_out o = {hf(t, z.o), NULL, hf(t, z.q), hf(t, z.k), hf(t, z.v)};
    attention_run(t, &io, 7, &o);
    if (is_fp32(t)) {
        expect_fd(t, "dQ", io.Q, z.q, minus(t, o.dQ, io.dQ0, z.q), attention_loss, &io);
        expect_fd(t, "dK", io.K, z.k, minus(t, o.dK, io.dK0, z.k), attention_loss, &io);
        expect_fd(t, "dV", io.V, z.v, minus(t, o.dV, io.dV0, z.v), attention_loss, &io);
    } else {
        attention_out f = {hf(t, z.o), NULL, hf(t, z.q), hf(t, z.k), hf(t, z.v)};
        attention_run(&su->t[0], &io, 7, &f);
        const double tol = grad_tol(t->spec->attention, s->m + s->n + s->d + s->v);
        expect_same(t, "dQ", o.dQ, f.dQ, max_bound(t, f.dQ, z.q, tol), z.q);
        expect_same(t, "dK", o.dK, f.dK, max_bound(t, f.dK, z.k, tol), z.k);
        expect_same(t, "dV", o.dV, f.dV, max_bound(t, f.dV, z.v, tol), z.v);
    }
    static const char *const names[] = {"dQ", "dK", "dV"};
    for (int i = 0; i < 3; i++) {
        attention_out one = {hf(t, z.o), NULL, hf(t, z.q), hf(t, z.k), hf(t, z.v)};
        attention_run(t, &io, 1 << i, &one);
        const float *a = i == 0 ? one.dQ : i == 1 ? one.dK : one.dV;
        const float *b = i == 0 ? o.dQ : i == 1 ? o.dK : o.dV;
        if (memcmp(a, b, (i == 0 ? z.q : i == 1 ? z.k : z.v) * sizeof *a))
            fail_at(t, "%s asked for alone differs from %s asked for with the others", names[i],
                    names[i]);
    }
    tidy(t);
}

static void test_attention_backward(void **state)
{
    suite *s = *state;
    EACH_TABLE(s, t)
        for (int c = 0; c < N_ATTENTION_CASES; c++)
            for (int k = ATTENTION_MATERIALISED; k <= ATTENTION_LINEAR; k++)
                if (kernel_takes(k, &ATTENTION_CASES[c]))
                    check_attention_backward(s, t, &ATTENTION_CASES[c], k);
}

/* The materialised and the flash kernel compute the same attention: O within the sum of
 * their bounds, the gradients within grad_tol of each other. (The linear kernel meets the
 * recurrent step in test_linear_attention_step.) */
static void test_attention_kernels_agree(void **state)
{
    suite *su = *state;
    EACH_TABLE(su, t)
        for (int ci = 0; ci < N_ATTENTION_CASES; ci++) {
            const attention_case *c = &ATTENTION_CASES[ci];
            const qkv_attention_shape *s = &c->s;
            const attention_sizes z = sizes_of(s);
            begin(t, "materialised against flash attention, B %d H %d n %d m %d d %d v %d, "
                  "lengths %s%s, dropout %g", s->B, s->H, s->n, s->m, s->d, s->v, lens_name(c),
                  c->causal ? ", causal" : "", (double)c->p);
            attention_io io = attention_inputs(t, c, ATTENTION_MATERIALISED, 41u * s->n + s->m);
            attention_out a = {hf(t, z.o), NULL, hf(t, z.q), hf(t, z.k), hf(t, z.v)};
            attention_out f = {hf(t, z.o), NULL, hf(t, z.q), hf(t, z.k), hf(t, z.v)};
            attention_run(t, &io, 7, &a);
            io.k = ATTENTION_FLASH;
            attention_run(t, &io, 7, &f);
            const attention_ref r = softmax_attention_reference(t, &io);
            for (size_t i = 0; i < z.o; i++) r.Ob[i] *= 2;
            expect_same(t, "flash O against materialised O", f.O, a.O, r.Ob, z.o);
            const double tol = grad_tol(t->spec->attention, s->m + s->n + s->d + s->v);
            expect_same(t, "flash dQ", f.dQ, a.dQ, max_bound(t, a.dQ, z.q, tol), z.q);
            expect_same(t, "flash dK", f.dK, a.dK, max_bound(t, a.dK, z.k, tol), z.k);
            expect_same(t, "flash dV", f.dV, a.dV, max_bound(t, a.dV, z.v, tol), z.v);
            tidy(t);
        }
}

/* ==== decoding: cached attention, the cache's store, linear attention's step ============= */

typedef struct {
    int B, H, d, m; /* queries, heads, head width (keys and values), keys at most */
    int cap, rows;  /* positions per cache row, cache rows */
    kv_walk walk;
} cached_case;

/* B >= 4 runs whole rows per item, fewer split the heads in halves or one by one; lengths
 * 0 .. m around the 4-key groups; widths 1, 16, 17, 33 (the bf16 kernel's 16 lanes and
 * tails); 4 x 4 x 64 x 32 keys x features is where threads start. */
static const cached_case CACHED_CASES[] = {
    {1, 1, 1, 1, 1, 1, KV_ROWS},      {1, 2, 16, 9, 12, 3, KV_ROWS},
    {3, 3, 17, 20, 20, 4, KV_ANCESTRY}, {5, 2, 33, 13, 16, 7, KV_ROWS},
    {5, 2, 33, 13, 16, 7, KV_ANCESTRY}, {4, 4, 32, 64, 64, 5, KV_ROWS},
    {2, 1, 7, 5, 6, 3, KV_ANCESTRY},
};

/* A cache and its queries on the host: lengths, rows or ancestries, and the cache's values
 * (float32, as the reference reads them, and as stored: bf16 at KV_BF16). Every value no
 * query may read is NaN (so is every position past a query's length), so reading one shows. */
typedef struct {
    const cached_case *c;
    kv_dtype type;
    int *len, *row, *anc; /* (B), (B), (B, cap) */
    float *K, *V, *Q;     /* the cache's values, (rows, cap, H, d); Q (B, H, d) */
    void *Ks, *Vs;        /* as stored */
    size_t stride, es;    /* values from one cache row to the next; bytes per stored value */
} cached_io;

/* Where query b finds key j: its own row, or its ancestry's row at j. */
static size_t cached_at(const cached_io *io, int b, int j)
{
    const cached_case *c = io->c;
    const int r = c->walk == KV_ROWS ? io->row[b] : io->anc[(size_t)b * c->cap + j];
    return (size_t)r * io->stride + (size_t)j * c->H * c->d;
}

static cached_io cached_inputs(table *t, const cached_case *c, kv_dtype type)
{
    const int B = c->B, C = c->H * c->d;
    cached_io io = {c, type, hi(t, B), hi(t, B), hi(t, (size_t)B * c->cap), NULL, NULL, NULL,
                    NULL, NULL, (size_t)c->cap * C, type == KV_BF16 ? 2 : 4};
    const size_t cache = (size_t)c->rows * io.stride;
    const uint64_t seed = 131u * B + 17u * c->d + c->m + type;
    for (int b = 0; b < B; b++) {
        static const int pattern[] = {-1, 0, 1, 3, 4, 5, -2}; /* -1: m, -2: m - 1 */
        const int l = pattern[b % 7];
        io.len[b] = l == -1 ? c->m : l == -2 ? c->m - 1 : l < c->m ? l : c->m;
        io.row[b] = (3 * b + 1) % c->rows;
        for (int j = 0; j < c->cap; j++)
            io.anc[(size_t)b * c->cap + j] =
                j < io.len[b] ? (int)(random_u32(seed, (uint64_t)b * 977 + j) % c->rows) : -1;
    }
    io.K = hf(t, cache), io.V = hf(t, cache);
    for (size_t i = 0; i < cache; i++) io.K[i] = io.V[i] = NAN;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < io.len[b]; j++)
            for (int e = 0; e < C; e++) {
                const size_t at = cached_at(&io, b, j) + e;
                io.K[at] = 2 * random_uniform(seed + 1, at) - 1;
                io.V[at] = 2 * random_uniform(seed + 2, at) - 1;
                if (type == KV_BF16) /* what the cache can hold: its values are the inputs */
                    io.K[at] = bf16_to_float(bf16_from_float(io.K[at])),
                    io.V[at] = bf16_to_float(bf16_from_float(io.V[at]));
            }
    io.Ks = io.K, io.Vs = io.V;
    if (type == KV_BF16) {
        uint16_t *k16 = keep(t, malloc(cache * 2)), *v16 = keep(t, malloc(cache * 2));
        for (size_t i = 0; i < cache; i++)
            k16[i] = bf16_from_float(io.K[i]), v16[i] = bf16_from_float(io.V[i]);
        io.Ks = k16, io.Vs = v16;
    }
    io.Q = urand(t, (size_t)B * C, seed + 3, -2, 2);
    return io;
}

/* Attention of each query over the len[b] keys it sees, bounded as softmax attention's
 * reference is (the cache's values are exact inputs); S its weights, 0 past them. */
static attention_ref cached_attention_reference(table *t, const cached_io *io)
{
    const int B = io->c->B, H = io->c->H, d = io->c->d, m = io->c->m, C = H * d;
    attention_ref r = {hd(t, (size_t)B * C), hd(t, (size_t)B * C), hd(t, (size_t)B * H * m),
                       hd(t, (size_t)B * H * m), NULL, NULL};
    const double scale = 1.0 / sqrt((double)d);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const float *q = io->Q + (size_t)b * C + (size_t)h * d;
            double *p = r.P + ((size_t)b * H + h) * m, *pb = r.Pb + ((size_t)b * H + h) * m;
            double mx = -INFINITY, sum = 0.0, delta = 0.0;
            const int l = io->len[b];
            for (int j = 0; j < l; j++) {
                const float *k = io->K + cached_at(io, b, j) + (size_t)h * d;
                double dot = 0.0, mag = 0.0;
                for (int e = 0; e < d; e++)
                    dot += (double)q[e] * k[e], mag += fabs((double)q[e] * k[e]);
                p[j] = dot * scale, mx = fmax(mx, p[j]);
                delta = fmax(delta, dot_tol(QKV_PRECISION_FP32, d) * mag * scale);
            }
            for (int j = 0; j < l; j++) sum += exp(p[j] - mx);
            const double prel = SLACK * (2 * delta + (l + 8) * U);
            for (int j = 0; j < m; j++) {
                p[j] = j < l ? exp(p[j] - mx) / sum : 0.0;
                pb[j] = p[j] * prel;
            }
            for (int e = 0; e < d; e++) {
                double o = 0.0, om = 0.0;
                for (int j = 0; j < l; j++) {
                    const double v = io->V[cached_at(io, b, j) + (size_t)h * d + e];
                    o += p[j] * v, om += fabs(p[j] * v);
                }
                r.O[(size_t)b * C + (size_t)h * d + e] = o;
                r.Ob[(size_t)b * C + (size_t)h * d + e] =
                    om * (prel + dot_tol(QKV_PRECISION_FP32, l));
            }
        }
    return r;
}

/* One query per row attends over the keys its row sees in the cache. */
static void check_cached_attention(table *t, const cached_case *c, kv_dtype type)
{
    const int B = c->B, H = c->H, d = c->d, m = c->m;
    const size_t nq = (size_t)B * H * d, nw = (size_t)B * H * m;
    begin(t, "cached_attention, %s cache walked by %s, B %d H %d d %d m %d",
          type == KV_BF16 ? "bf16" : "float32", c->walk == KV_ROWS ? "rows" : "ancestry", B, H,
          d, m);
    const cached_io io = cached_inputs(t, c, type);
    const size_t bytes = (size_t)c->rows * io.stride * io.es;
    const kv_view kv = {dev(t, "K cache", IN, io.Ks, bytes),
                        dev(t, "V cache", IN, io.Vs, bytes),
                        type,
                        io.stride,
                        c->walk,
                        c->walk == KV_ROWS ? iin(t, "row", io.row, B) : NULL,
                        c->walk == KV_ANCESTRY ? iin(t, "ancestry", io.anc, (size_t)B * c->cap)
                                               : NULL,
                        c->cap,
                        iin(t, "len", io.len, B)};
    float *O = fout(t, "O", nq), *S = fout(t, "S", nw);
    OP(t, cached_attention)(O, S, fin(t, "Q", io.Q, nq), &kv, B, H, d, m);
    float *got = hf(t, nq), *w = hf(t, nw);
    fetchf(t, got, O, nq);
    fetchf(t, w, S, nw);
    done(t);
    const attention_ref r = cached_attention_reference(t, &io);
    expect(t, "O", got, r.O, r.Ob, nq);
    expect(t, "S (weights)", w, r.P, r.Pb, nw);
    tidy(t);
}

static void test_cached_attention(void **state)
{
    suite *s = *state;
    EACH_TABLE(s, t)
        for (size_t k = 0; k < sizeof CACHED_CASES / sizeof *CACHED_CASES; k++) {
            check_cached_attention(t, &CACHED_CASES[k], KV_FP32);
            check_cached_attention(t, &CACHED_CASES[k], KV_BF16);
        }
}

/* x rounded to bf16 worked out on values, not on bits as the kernels do: the two bf16
 * numbers around |x| (8 significant bits) and the nearer, a tie to the even one; past the
 * largest bf16 by half an ulp or more, infinity. Denormals become zeros of their sign and
 * NaN stays NaN (ops/cpu/bf16.h). Returns the bits. */
static uint16_t bf16_round_reference(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    const uint16_t sign = (uint16_t)(bits >> 16 & 0x8000u);
    if (isnan(x)) return 0x7fc0;
    if (isinf(x)) return sign | 0x7f80;
    if (fabsf(x) < FLT_MIN) return sign;
    const double a = fabs((double)x);
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e): a bf16 there steps by 2^(e-8) */
    const double ulp = ldexp(1.0, e - 8), down = floor(a / ulp) * ulp, up = down + ulp;
    const double r = a - down < up - a   ? down
                     : up - a < a - down ? up
                     : fmod(down / ulp, 2.0) == 0.0 ? down : up;
    if (r >= 0x1p128) return sign | 0x7f80;
    const float f = (float)r;
    uint32_t fb;
    memcpy(&fb, &f, sizeof fb);
    return sign | (uint16_t)(fb >> 16);
}

/* Values whose rounding to bf16 is easy to get wrong: ties both ways, signs, the top of the
 * range, denormals, infinities, NaN. */
static const float BF16_SPECIAL[] = {
    1.0f + 0x1p-8f,            /* a tie: to 1, the even one */
    1.0f + 3 * 0x1p-8f,        /* a tie: to 1 + 2^-6 */
    -(1.0f + 0x1p-8f),         -(1.0f + 3 * 0x1p-8f),
    1.0f + 0x1p-8f + 0x1p-20f, /* just above a tie: up */
    1.0f + 0x1p-8f - 0x1p-20f, /* just below: down */
    0x1.ffp127f,               /* halfway between the largest bf16 and 2^128: infinity */
    FLT_MAX, -FLT_MAX,         0x1.fdp127f, FLT_MIN, 0x1p-130f, -0x1p-130f, -0.0f, 0.0f,
    INFINITY, -INFINITY,       NAN, 3.0f, -1e-20f, 65504.0f, 0.1f,
};
enum { N_BF16_SPECIAL = sizeof BF16_SPECIAL / sizeof *BF16_SPECIAL };

/* kv_store writes n values at `at` of a cache and nothing else: float32 as they are, bf16
 * rounded to nearest even (ties both ways, signs, the top of the range, denormals, NaN). */
static void test_kv_store(void **state)
{
    suite *s = *state;
    enum { N = 37, CAP = 64, AT = 9 };
    EACH_TABLE(s, t)
        for (kv_dtype type = KV_FP32; type <= KV_BF16; type++) {
            begin(t, "kv_store, %s cache, %d values at %d", type == KV_BF16 ? "bf16" : "float32",
                  N, AT);
            float *x = urand(t, N, 77, -3, 3);
            memcpy(x, BF16_SPECIAL, sizeof BF16_SPECIAL);
            const size_t es = type == KV_BF16 ? 2 : 4;
            uint8_t *before = keep(t, malloc(CAP * es)), *after = keep(t, malloc(CAP * es));
            for (size_t i = 0; i < CAP * es; i++) before[i] = (uint8_t)(i * 37 + 11);
            void *cache = dev(t, "cache", INOUT, before, CAP * es);
            OP(t, kv_store)(cache, type, AT, fin(t, "x", x, N), N);
            fetch(t, after, cache, CAP * es);
            done(t);
            for (int i = 0; i < CAP; i++) {
                const uint8_t *got = after + i * es, *was = before + i * es;
                if (i < AT || i >= AT + N) {
                    if (memcmp(got, was, es)) fail_at(t, "value %d, outside the store, changed", i);
                    continue;
                }
                const float xi = x[i - AT];
                if (type == KV_FP32) {
                    float g;
                    memcpy(&g, got, sizeof g);
                    if (isnan(xi) ? !isnan(g) : memcmp(&g, &xi, sizeof g))
                        fail_at(t, "value %d: stored %a, want %a", i, (double)g, (double)xi);
                    continue;
                }
                uint16_t g;
                memcpy(&g, got, sizeof g);
                const uint16_t want = bf16_round_reference(xi);
                if (isnan(xi) ? !isnan(bf16_to_float(g)) : g != want)
                    fail_at(t, "value %d: %a stored as bf16 0x%04x (%a), want 0x%04x (%a)", i,
                            (double)xi, g, (double)bf16_to_float(g), want,
                            (double)bf16_to_float(want));
            }
            tidy(t);
        }
}

/* Linear attention's recurrent step from an empty state (S, z and the step's work space in
 * the table's memory): after token t its output is row t of the causal reference, and row t
 * of the table's own causal attention_forward (the two kernels against each other). */
static void check_linear_attention_step(table *t, int H, int d, int v, int T)
{
    begin(t, "linear_attention_step, H %d d %d v %d, %d tokens", H, d, v, T);
    const attention_case c = {{1, H, T, T, d, v}, 0, 1, 0.0f};
    const attention_io io = attention_inputs(t, &c, ATTENTION_LINEAR, 19u * H + d);
    const size_t nq = (size_t)T * H * d, nv = (size_t)T * H * v;
    float *zeros = hf(t, (size_t)H * d * v);
    qkv_linear_attention_state st = {H, d, v, 0, facc(t, "state S", zeros, (size_t)H * d * v),
                                     facc(t, "state z", zeros, (size_t)H * d),
                                     fout(t, "state work space", 2 * (size_t)d)};
    const float *Q = fin(t, "q", io.Q, nq), *K = fin(t, "k", io.K, nq), *V = fin(t, "v", io.V, nv);
    float *O = fout(t, "o", nv);
    for (int i = 0; i < T; i++)
        OP(t, linear_attention_step)(O + (size_t)i * H * v, &st, Q + (size_t)i * H * d,
                                     K + (size_t)i * H * d, V + (size_t)i * H * v);
    float *got = hf(t, nv);
    fetchf(t, got, O, nv);
    done(t);
    if (st.t != T) fail_at(t, "the state counts %lld tokens, want %d", (long long)st.t, T);
    const attention_ref r = linear_attention_reference(t, &io);
    expect(t, "o", got, r.O, r.Ob, nv);
    attention_out f = {hf(t, nv), NULL, NULL, NULL, NULL};
    attention_run(t, &io, 0, &f);
    for (size_t i = 0; i < nv; i++) r.Ob[i] *= 2;
    expect_same(t, "o against the causal linear attention_forward", got, f.O, r.Ob, nv);
    tidy(t);
}

static void test_linear_attention_step(void **state)
{
    suite *s = *state;
    EACH_TABLE(s, t) {
        check_linear_attention_step(t, 1, 1, 1, 3);
        check_linear_attention_step(t, 2, 5, 3, 9);
        check_linear_attention_step(t, 3, 17, 16, 12);
    }
}

/* ==== position-wise: activations ========================================================= */

/* around the 32-value lanes and 1024-value chunks of GELU, and past the threads' threshold */
static const size_t ELEMENT_SIZES[] = {1, 7, 8, 33, 1025, 2049, 40000};
enum { N_ELEMENT_SIZES = sizeof ELEMENT_SIZES / sizeof *ELEMENT_SIZES };

static const char *act_name(qkv_activation a)
{
    return a == QKV_ACT_GELU ? "gelu" : a == QKV_ACT_SILU ? "silu" : "relu";
}

/* act(x) and act'(x) in double, with the magnitudes their float32 kernels err within (in
 * units of u): ReLU exactly; SiLU x s(x), s = 1 / (1 + e^-x), a few roundings of a libm
 * exponential; GELU x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2 by a fit of relative error
 * 1.2e-7 (2u) whose exponential (2u) has an argument of about x^2 / 2 evaluated by some ten
 * multiply-adds of terms up to 1.3 (so errs by about (x^2 / 2 + 13) u), then t, the
 * reciprocal and x Phi (4u): (x^2 / 2 + 24) u relative in all. The derivatives are sums of
 * two terms that may cancel: their magnitudes are the terms'. */
static void act_reference(qkv_activation a, double x, double *f, double *fmag, double *g,
                          double *gmag)
{
    if (a == QKV_ACT_RELU) {
        *f = x > 0 ? x : 0.0, *g = x > 0 ? 1.0 : 0.0, *fmag = *gmag = 0.0;
    } else if (a == QKV_ACT_SILU) {
        const double s = 1.0 / (1.0 + exp(-x));
        *f = x * s, *fmag = 16 * fabs(*f);
        *g = s * (1.0 + x * (1.0 - s)), *gmag = 16 * s * (1.0 + fabs(x) * (1.0 - s));
    } else {
        const double Phi = 0.5 * erfc(-x / sqrt(2.0)),
                     phi = exp(-x * x / 2) / 2.5066282746310002 /* sqrt(2 pi) */;
        *f = x * Phi, *fmag = (x * x / 2 + 24) * fabs(*f);
        *g = Phi + x * phi, *gmag = (x * x / 2 + 24) * (Phi + fabs(x) * phi);
    }
}

typedef struct {
    qkv_activation act;
    size_t n;
    float *x, *r;
} act_case;

/* the forward, for central differences: sum r . act(x) */
static double act_loss(table *t, const void *ctx)
{
    const act_case *c = ctx;
    float *y = fout(t, "h", c->n), *host = malloc(c->n * sizeof *host);
    assert_non_null(host);
    OP(t, activation_forward)(c->act, y, fin(t, "h_pre", c->x, c->n), c->n);
    fetchf(t, host, y, c->n);
    done(t);
    const double L = dot_d(host, c->r, c->n);
    free(host);
    return L;
}

/* activation_forward h = act(h_pre) and activation_backward dh *= act'(h_pre), in place,
 * against the reference; on a float32 table also against central differences. */
static void check_activation(table *t, qkv_activation a, size_t n)
{
    begin(t, "activation_forward / activation_backward (%s), %zu values", act_name(a), n);
    act_case c = {a, n, urand(t, n, n + a, -6, 6), urand(t, n, n + a + 100, -1, 1)};
    for (size_t i = 0; i < n; i += 97) c.x[i] = 0.0f; /* ReLU's corner: act'(0) = 0 */
    double *f = hd(t, n), *fb = hd(t, n), *g = hd(t, n), *gb = hd(t, n);
    for (size_t i = 0; i < n; i++) {
        double fm, gm;
        act_reference(a, c.x[i], &f[i], &fm, &g[i], &gm);
        g[i] *= c.r[i], fb[i] = SLACK * U * fm, gb[i] = SLACK * U * (gm + 1) * fabs(c.r[i]);
    }
    const float *x = fin(t, "h_pre", c.x, n);
    float *h = fout(t, "h", n), *dh = facc(t, "dh", c.r, n);
    OP(t, activation_forward)(a, h, x, n);
    OP(t, activation_backward)(a, dh, x, n);
    float *got = hf(t, n), *grad = hf(t, n);
    fetchf(t, got, h, n);
    fetchf(t, grad, dh, n);
    done(t);
    expect(t, "h", got, f, fb, n);
    expect(t, "dh", grad, g, gb, n);
    if (is_fp32(t) && n <= 64) {
        for (size_t i = 0; i < n; i++) /* ReLU's kink out of the step's reach */
            if (fabsf(c.x[i]) < 0.05f) c.x[i] = 0.5f;
        float *dx = facc(t, "dh", c.r, n);
        OP(t, activation_backward)(a, dx, fin(t, "h_pre", c.x, n), n);
        fetchf(t, grad, dx, n);
        done(t);
        expect_fd(t, "dh", c.x, n, grad, act_loss, &c);
    }
    tidy(t);
}

static void test_activations(void **state)
{
    suite *s = *state;
    EACH_TABLE(s, t)
        for (int a = QKV_ACT_RELU; a <= QKV_ACT_SILU; a++)
            for (int k = 0; k < N_ELEMENT_SIZES; k++)
                check_activation(t, (qkv_activation)a, ELEMENT_SIZES[k]);
}

/* ==== LayerNorm and AddNorm ============================================================== */

typedef struct {
    int N, C;
} norm_shape;

/* C = 1 (the variance 0), widths past the lanes, and past the threads' threshold */
static const norm_shape NORM_SHAPES[] = {{1, 1}, {1, 7}, {3, 16}, {5, 33}, {2, 1025}, {70, 512}};
enum { N_NORM_SHAPES = sizeof NORM_SHAPES / sizeof *NORM_SHAPES };

/* LayerNorm of rows x (N, C) in double: y = (x - mu) r gamma + beta, r = 1 / sqrt(var + eps).
 * Bounds (u): mu errs by (C + 2) mean |x|, r by r (C + 10), y by |gamma| r ((C + 14) |x - mu|
 * + (C + 2) mean |x|) + |beta| + |y|; xerr (NULL, or per element in u) is an error already
 * in x (AddNorm's sum), which moves mu, r and y further. */
static void layernorm_reference(double *y, double *yb, double *mean, double *mb, double *rstd,
                                double *rb, const float *x, const double *xerr,
                                const float *gamma, const float *beta, int N, int C, float eps)
{
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * C;
        double mu = 0.0, ax = 0.0, var = 0.0, ae = 0.0, dev = 0.0;
        for (int c = 0; c < C; c++) mu += xi[c], ax += fabs(xi[c]);
        mu /= C, ax /= C;
        for (int c = 0; c < C; c++)
            var += (xi[c] - mu) * (xi[c] - mu), dev = fmax(dev, fabs(xi[c] - mu));
        for (int c = 0; xerr && c < C; c++) ae += xerr[(size_t)i * C + c] / C;
        const double r = 1.0 / sqrt(var / C + eps);
        /* x's own error moves the variance by up to 2 max |x - mu| mean xerr u, r by r^3 / 2
         * that */
        const double dr = r * r * r * dev * ae * U;
        mean[i] = mu, mb[i] = SLACK * U * ((C + 2) * ax + ae);
        rstd[i] = r, rb[i] = SLACK * (U * r * (C + 10) + dr);
        for (int c = 0; c < C; c++) {
            const size_t e = (size_t)i * C + c;
            y[e] = (xi[c] - mu) * r * gamma[c] + beta[c];
            yb[e] = SLACK * U * (fabs(gamma[c]) * r * ((C + 14) * fabs(xi[c] - mu) + (C + 2) * ax) +
                                 fabs(beta[c]) + fabs(y[e]));
            if (xerr)
                yb[e] += SLACK * fabs(gamma[c]) * (U * r * (xerr[e] + ae) + fabs(xi[c] - mu) * dr);
        }
    }
}

/* A norm's inputs on the host: rows x shifted off 0 (the mean's cancellation), the gain and
 * bias, dy, the gradients' starting values; AddNorm's sublayer output s and dropout. */
typedef struct {
    int N, C;
    float *x, *s, *gamma, *beta, *dy, *dx0, *ds0, *dg0, *db0;
    qkv_dropout drop;
    int grads; /* 1 dx, 2 ds, 4 dgamma, 8 dbeta */
} norm_case;

static norm_case norm_inputs(table *t, const norm_shape *sh, float p, uint64_t seed)
{
    const size_t n = (size_t)sh->N * sh->C;
    return (norm_case){sh->N, sh->C, urand(t, n, seed, 2, 4), urand(t, n, seed + 1, -1, 1),
                       urand(t, sh->C, seed + 2, 0.5f, 1.5f), urand(t, sh->C, seed + 3, -1, 1),
                       urand(t, n, seed + 4, -1, 1), urand(t, n, seed + 5, -1, 1),
                       urand(t, n, seed + 6, -1, 1), urand(t, sh->C, seed + 7, -1, 1),
                       urand(t, sh->C, seed + 8, -1, 1), {p, seed + 9, p > 0 ? 4242 : 0}, 15};
}

typedef struct {
    float *y, *mean, *rstd, *z, *dx, *ds, *dg, *db;
} norm_out;

static const float EPS = 1e-5f;

/* layernorm_forward, then with c->grads layernorm_backward (dx, and the gain's and bias's
 * gradients as asked: dw NULL when neither is) */
static void layernorm_run(table *t, const norm_case *c, norm_out *o)
{
    const size_t n = (size_t)c->N * c->C;
    const float *x = fin(t, "x", c->x, n);
    qkv_layernorm_weights w = {fin(t, "gamma", c->gamma, c->C), fin(t, "beta", c->beta, c->C)};
    float *y = fout(t, "y", n), *mean = fout(t, "mean", c->N), *rstd = fout(t, "rstd", c->N);
    OP(t, layernorm_forward)(y, mean, rstd, x, &w, c->N, c->C, EPS);
    fetchf(t, o->y, y, n);
    fetchf(t, o->mean, mean, c->N);
    fetchf(t, o->rstd, rstd, c->N);
    if (c->grads) {
        qkv_layernorm_weights dw = {c->grads & 4 ? facc(t, "dgamma", c->dg0, c->C) : NULL,
                                    c->grads & 8 ? facc(t, "dbeta", c->db0, c->C) : NULL};
        float *dx = facc(t, "dx", c->dx0, n);
        OP(t, layernorm_backward)(dx, dw.gamma || dw.beta ? &dw : NULL,
                                  fin(t, "dy", c->dy, n), x, mean, rstd, &w, c->N, c->C);
        fetchf(t, o->dx, dx, n);
        if (dw.gamma) fetchf(t, o->dg, dw.gamma, c->C);
        if (dw.beta) fetchf(t, o->db, dw.beta, c->C);
    }
    done(t);
}

static norm_out norm_outputs(table *t, const norm_case *c)
{
    const size_t n = (size_t)c->N * c->C;
    return (norm_out){hf(t, n), hf(t, c->N), hf(t, c->N), hf(t, n), hf(t, n), hf(t, n),
                      hf(t, c->C), hf(t, c->C)};
}

static double layernorm_loss(table *t, const void *ctx)
{
    norm_case c = *(const norm_case *)ctx;
    c.grads = 0;
    const int mark = t->nhost;
    norm_out o = norm_outputs(t, &c);
    layernorm_run(t, &c, &o);
    const double L = dot_d(o.y, c.dy, (size_t)c.N * c.C);
    untidy_to(t, mark);
    return L;
}

/* The gradients of a norm: central differences on a float32 table, the float32 table's on
 * the others (chains of C-term and N-term sums). */
static void expect_norm_grads(table *t, const norm_case *c, const norm_out *o,
                              const norm_out *f, loss_fn loss, int addnorm)
{
    const size_t n = (size_t)c->N * c->C;
    if (is_fp32(t)) {
        norm_case v = *c; /* central differences perturb these */
        expect_fd(t, "dx", v.x, n, minus(t, o->dx, c->dx0, n), loss, &v);
        if (addnorm) expect_fd(t, "ds", v.s, n, minus(t, o->ds, c->ds0, n), loss, &v);
        expect_fd(t, "dgamma", v.gamma, c->C, minus(t, o->dg, c->dg0, c->C), loss, &v);
        expect_fd(t, "dbeta", v.beta, c->C, minus(t, o->db, c->db0, c->C), loss, &v);
        return;
    }
    const double tol = grad_tol(QKV_PRECISION_FP32, c->N + c->C);
    expect_same(t, "dx", o->dx, f->dx, max_bound(t, f->dx, n, tol), n);
    if (addnorm) expect_same(t, "ds", o->ds, f->ds, max_bound(t, f->ds, n, tol), n);
    expect_same(t, "dgamma", o->dg, f->dg, max_bound(t, f->dg, c->C, tol), c->C);
    expect_same(t, "dbeta", o->db, f->db, max_bound(t, f->db, c->C, tol), c->C);
}

static void check_layernorm(suite *su, table *t, const norm_shape *sh)
{
    begin(t, "layernorm_forward / layernorm_backward, N %d C %d", sh->N, sh->C);
    const norm_case c = norm_inputs(t, sh, 0.0f, 53u * sh->N + sh->C);
    const size_t n = (size_t)c.N * c.C;
    norm_out o = norm_outputs(t, &c), f = norm_outputs(t, &c);
    layernorm_run(t, &c, &o);
    double *y = hd(t, n), *yb = hd(t, n), *mean = hd(t, c.N), *mb = hd(t, c.N);
    double *rstd = hd(t, c.N), *rb = hd(t, c.N);
    layernorm_reference(y, yb, mean, mb, rstd, rb, c.x, NULL, c.gamma, c.beta, c.N, c.C, EPS);
    expect(t, "y", o.y, y, yb, n);
    expect(t, "mean", o.mean, mean, mb, c.N);
    expect(t, "rstd", o.rstd, rstd, rb, c.N);
    if (!is_fp32(t)) layernorm_run(&su->t[0], &c, &f);
    if (n <= 4096 || !is_fp32(t)) expect_norm_grads(t, &c, &o, &f, layernorm_loss, 0);
    /* dw NULL, or one of its gradients */
    static const int subsets[] = {1, 5, 9};
    for (int k = 0; k < 3; k++) {
        norm_case d = c;
        d.grads = subsets[k];
        norm_out p = norm_outputs(t, &d);
        layernorm_run(t, &d, &p);
        if (memcmp(p.dx, o.dx, n * sizeof *p.dx) ||
            (d.grads & 4 && memcmp(p.dg, o.dg, c.C * sizeof *p.dg)) ||
            (d.grads & 8 && memcmp(p.db, o.db, c.C * sizeof *p.db)))
            fail_at(t, "the gradients differ when asked for as %d", d.grads);
    }
    tidy(t);
}

static void test_layernorm(void **state)
{
    suite *s = *state;
    EACH_TABLE(s, t)
        for (int k = 0; k < N_NORM_SHAPES; k++) check_layernorm(s, t, &NORM_SHAPES[k]);
}

/* addnorm_forward y = LayerNorm(x + dropout(s)) (its cache: z = x + dropout(s), mean,
 * rstd), then with c->grads addnorm_backward with exactly N C floats of scratch */
static void addnorm_run(table *t, const norm_case *c, norm_out *o)
{
    const size_t n = (size_t)c->N * c->C;
    qkv_layernorm_weights w = {fin(t, "gamma", c->gamma, c->C), fin(t, "beta", c->beta, c->C)};
    float *y = fout(t, "y", n);
    qkv_addnorm_cache cache = {fout(t, "z", n), fout(t, "mean", c->N), fout(t, "rstd", c->N)};
    OP(t, addnorm_forward)(y, &cache, fin(t, "x", c->x, n), fin(t, "s", c->s, n), &w, c->N,
                           c->C, EPS, c->drop);
    fetchf(t, o->y, y, n);
    fetchf(t, o->z, cache.z, n);
    fetchf(t, o->mean, cache.mean, c->N);
    fetchf(t, o->rstd, cache.rstd, c->N);
    if (c->grads) {
        qkv_layernorm_weights dw = {c->grads & 4 ? facc(t, "dgamma", c->dg0, c->C) : NULL,
                                    c->grads & 8 ? facc(t, "dbeta", c->db0, c->C) : NULL};
        float *dx = c->grads & 1 ? facc(t, "dx", c->dx0, n) : NULL;
        float *ds = c->grads & 2 ? facc(t, "ds", c->ds0, n) : NULL;
        OP(t, addnorm_backward)(dx, ds, dw.gamma || dw.beta ? &dw : NULL,
                                fin(t, "dy", c->dy, n), &cache, &w, c->N, c->C, c->drop,
                                fout(t, "scratch", n));
        if (dx) fetchf(t, o->dx, dx, n);
        if (ds) fetchf(t, o->ds, ds, n);
        if (dw.gamma) fetchf(t, o->dg, dw.gamma, c->C);
        if (dw.beta) fetchf(t, o->db, dw.beta, c->C);
    }
    done(t);
}

static double addnorm_loss(table *t, const void *ctx)
{
    norm_case c = *(const norm_case *)ctx;
    c.grads = 0;
    const int mark = t->nhost;
    norm_out o = norm_outputs(t, &c);
    addnorm_run(t, &c, &o);
    const double L = dot_d(o.y, c.dy, (size_t)c.N * c.C);
    untidy_to(t, mark);
    return L;
}

static void check_addnorm(suite *su, table *t, const norm_shape *sh, float p)
{
    begin(t, "addnorm_forward / addnorm_backward, N %d C %d, dropout %g", sh->N, sh->C, (double)p);
    const norm_case c = norm_inputs(t, sh, p, 59u * sh->N + sh->C);
    const size_t n = (size_t)c.N * c.C;
    norm_out o = norm_outputs(t, &c), f = norm_outputs(t, &c);
    addnorm_run(t, &c, &o);
    /* z = x + dropout(s), one product and one sum: within 2u (|x| + 2 |s'|) */
    double *z = hd(t, n), *zb = hd(t, n), *zerr = hd(t, n);
    float *zf = hf(t, n);
    for (size_t e = 0; e < n; e++) {
        const double se = c.s[e] * dropout_factor(p, c.drop.seed, c.drop.offset + e);
        z[e] = c.x[e] + se, zf[e] = (float)z[e];
        zerr[e] = fabs(c.x[e]) + 2 * fabs(se), zb[e] = SLACK * U * zerr[e];
    }
    double *y = hd(t, n), *yb = hd(t, n), *mean = hd(t, c.N), *mb = hd(t, c.N);
    double *rstd = hd(t, c.N), *rb = hd(t, c.N);
    layernorm_reference(y, yb, mean, mb, rstd, rb, zf, zerr, c.gamma, c.beta, c.N, c.C, EPS);
    expect(t, "z (cache)", o.z, z, zb, n);
    expect(t, "y", o.y, y, yb, n);
    expect(t, "mean (cache)", o.mean, mean, mb, c.N);
    expect(t, "rstd (cache)", o.rstd, rstd, rb, c.N);
    if (!is_fp32(t)) addnorm_run(&su->t[0], &c, &f);
    if (n <= 4096 || !is_fp32(t)) expect_norm_grads(t, &c, &o, &f, addnorm_loss, 1);
    static const int subsets[] = {1, 2, 3, 6, 9};
    for (int k = 0; k < 5; k++) {
        norm_case d = c;
        d.grads = subsets[k];
        norm_out q = norm_outputs(t, &d);
        addnorm_run(t, &d, &q);
        if ((d.grads & 1 && memcmp(q.dx, o.dx, n * sizeof *q.dx)) ||
            (d.grads & 2 && memcmp(q.ds, o.ds, n * sizeof *q.ds)) ||
            (d.grads & 4 && memcmp(q.dg, o.dg, c.C * sizeof *q.dg)) ||
            (d.grads & 8 && memcmp(q.db, o.db, c.C * sizeof *q.db)))
            fail_at(t, "the gradients differ when asked for as %d", d.grads);
    }
    tidy(t);
}

static void test_addnorm(void **state)
{
    suite *s = *state;
    EACH_TABLE(s, t)
        for (int k = 0; k < N_NORM_SHAPES; k++) {
            check_addnorm(s, t, &NORM_SHAPES[k], 0.0f);
            check_addnorm(s, t, &NORM_SHAPES[k], 0.3f);
        }
}

/* ==== residual connections and dropout =================================================== */

/* An elementwise op's inputs: x, s (or dy) and the gradients' starting values. */
typedef struct {
    size_t n;
    float *x, *s, *dy, *dx0, *ds0;
    qkv_dropout drop;
    int grads; /* 1 dx, 2 ds */
} elem_case;

static elem_case elem_inputs(table *t, size_t n, float p, uint64_t seed)
{
    return (elem_case){n, urand(t, n, seed, -1, 1), urand(t, n, seed + 1, -1, 1),
                       urand(t, n, seed + 2, -1, 1), urand(t, n, seed + 3, -1, 1),
                       urand(t, n, seed + 4, -1, 1), {p, seed + 5, p > 0 ? 12345 : 0}, 3};
}

/* residual_forward y = x + dropout(s), then residual_backward dx += dy, ds += dropout'(dy) */
static void residual_run(table *t, const elem_case *c, float *y, float *dx, float *ds)
{
    float *yd = fout(t, "y", c->n);
    OP(t, residual_forward)(yd, fin(t, "x", c->x, c->n), fin(t, "s", c->s, c->n), c->n, c->drop);
    fetchf(t, y, yd, c->n);
    if (c->grads) {
        float *dxd = c->grads & 1 ? facc(t, "dx", c->dx0, c->n) : NULL;
        float *dsd = c->grads & 2 ? facc(t, "ds", c->ds0, c->n) : NULL;
        OP(t, residual_backward)(dxd, dsd, fin(t, "dy", c->dy, c->n), c->n, c->drop);
        if (dxd) fetchf(t, dx, dxd, c->n);
        if (dsd) fetchf(t, ds, dsd, c->n);
    }
    done(t);
}

static double residual_loss(table *t, const void *ctx)
{
    elem_case c = *(const elem_case *)ctx;
    c.grads = 0;
    float *y = malloc(c.n * sizeof *y);
    assert_non_null(y);
    residual_run(t, &c, y, NULL, NULL);
    const double L = dot_d(y, c.dy, c.n);
    free(y);
    return L;
}

static void check_residual(table *t, size_t n, float p)
{
    begin(t, "residual_forward / residual_backward, %zu values, dropout %g", n, (double)p);
    elem_case c = elem_inputs(t, n, p, n * 3 + 1);
    float *y = hf(t, n), *dx = hf(t, n), *ds = hf(t, n);
    residual_run(t, &c, y, dx, ds);
    double *yw = hd(t, n), *yb = hd(t, n), *dxw = hd(t, n), *dxb = hd(t, n), *dsw = hd(t, n),
           *dsb = hd(t, n);
    for (size_t i = 0; i < n; i++) {
        const double f = dropout_factor(p, c.drop.seed, c.drop.offset + i);
        yw[i] = c.x[i] + f * c.s[i], yb[i] = SLACK * U * (fabs(c.x[i]) + 2 * fabs(f * c.s[i]));
        dxw[i] = c.dx0[i] + c.dy[i], dxb[i] = U * fabs(dxw[i]);
        dsw[i] = c.ds0[i] + f * c.dy[i],
        dsb[i] = SLACK * U * (fabs(c.ds0[i]) + 2 * fabs(f * c.dy[i]));
    }
    expect(t, "y", y, yw, yb, n);
    expect(t, "dx", dx, dxw, dxb, n);
    expect(t, "ds", ds, dsw, dsb, n);
    if (is_fp32(t) && n <= 64) {
        expect_fd(t, "dx", c.x, n, minus(t, dx, c.dx0, n), residual_loss, &c);
        expect_fd(t, "ds", c.s, n, minus(t, ds, c.ds0, n), residual_loss, &c);
    }
    for (c.grads = 1; c.grads <= 2; c.grads++) { /* either gradient NULL */
        float *one = hf(t, n);
        residual_run(t, &c, y, c.grads == 1 ? one : NULL, c.grads == 2 ? one : NULL);
        if (memcmp(one, c.grads == 1 ? dx : ds, n * sizeof *one))
            fail_at(t, "%s alone differs", c.grads == 1 ? "dx" : "ds");
    }
    tidy(t);
}

/* dropout_forward y = dropout(x), dropout_backward dx += dropout'(dy) */
static void dropout_run(table *t, const elem_case *c, float *y, float *dx)
{
    const qkv_dropout d = c->drop;
    float *yd = fout(t, "y", c->n);
    OP(t, dropout_forward)(yd, fin(t, "x", c->x, c->n), c->n, d.p, d.seed, d.offset);
    fetchf(t, y, yd, c->n);
    if (c->grads) {
        float *dxd = facc(t, "dx", c->dx0, c->n);
        OP(t, dropout_backward)(dxd, fin(t, "dy", c->dy, c->n), c->n, d.p, d.seed, d.offset);
        fetchf(t, dx, dxd, c->n);
    }
    done(t);
}

static double dropout_loss(table *t, const void *ctx)
{
    elem_case c = *(const elem_case *)ctx;
    c.grads = 0;
    float *y = malloc(c.n * sizeof *y);
    assert_non_null(y);
    dropout_run(t, &c, y, NULL);
    const double L = dot_d(y, c.dy, c.n);
    free(y);
    return L;
}

static void check_dropout(table *t, size_t n, float p)
{
    begin(t, "dropout_forward / dropout_backward, %zu values, p %g", n, (double)p);
    elem_case c = elem_inputs(t, n, p, n * 5 + 2);
    float *y = hf(t, n), *dx = hf(t, n);
    dropout_run(t, &c, y, dx);
    double *yw = hd(t, n), *yb = hd(t, n), *dxw = hd(t, n), *dxb = hd(t, n);
    for (size_t i = 0; i < n; i++) {
        const double f = dropout_factor(p, c.drop.seed, c.drop.offset + i);
        yw[i] = f * c.x[i], yb[i] = SLACK * U * fabs(yw[i]);
        dxw[i] = c.dx0[i] + f * c.dy[i],
        dxb[i] = SLACK * U * (fabs(c.dx0[i]) + 2 * fabs(f * c.dy[i]));
    }
    expect(t, "y", y, yw, yb, n);
    expect(t, "dx", dx, dxw, dxb, n);
    if (is_fp32(t) && n <= 64) expect_fd(t, "dx", c.x, n, minus(t, dx, c.dx0, n), dropout_loss, &c);
    tidy(t);
}

static const size_t VECTOR_SIZES[] = {1, 17, 20000, 70000}; /* past both threads' thresholds */

static void test_residual_dropout(void **state)
{
    suite *s = *state;
    static const float rates[] = {0.0f, 0.1f, 0.5f};
    EACH_TABLE(s, t)
        for (size_t k = 0; k < sizeof VECTOR_SIZES / sizeof *VECTOR_SIZES; k++)
            for (int r = 0; r < 3; r++) {
                check_residual(t, VECTOR_SIZES[k], rates[r]);
                check_dropout(t, VECTOR_SIZES[k], rates[r]);
            }
}

/* ==== embedding and positions ============================================================ */

enum { VOCAB = 11 };

typedef struct {
    int N, C;
    const int *ids;
    float *E, *dy, *dE0;
} embed_case;

static void embedding_run(table *t, const embed_case *c, float *y, float *dE)
{
    const size_t ny = (size_t)c->N * c->C, ne = (size_t)VOCAB * c->C;
    const int *ids = iin(t, "ids", c->ids, c->N);
    float *yd = fout(t, "y", ny);
    qkv_error err = {0};
    const weight E = weight_f32(fin(t, "E", c->E, ne));
    const qkv_status st = OP(t, embedding_forward)(&t->be, yd, ids, &E, c->N, VOCAB, c->C, &err);
    if (st != QKV_OK) fail_at(t, "embedding_forward failed: %s", err.msg);
    fetchf(t, y, yd, ny);
    if (dE) {
        float *dEd = facc(t, "dE", c->dE0, ne);
        OP(t, embedding_backward)(dEd, fin(t, "dy", c->dy, ny), ids, c->N, c->C);
        fetchf(t, dE, dEd, ne);
    }
    done(t);
}

static double embedding_loss(table *t, const void *ctx)
{
    const embed_case *c = ctx;
    float *y = malloc((size_t)c->N * c->C * sizeof *y);
    assert_non_null(y);
    embedding_run(t, c, y, NULL);
    const double L = dot_d(y, c->dy, (size_t)c->N * c->C);
    free(y);
    return L;
}

/* embedding_forward y[i] = E[ids[i]] exactly; embedding_backward dE[ids[i]] += dy[i], a
 * repeated id receiving every row; an id outside [0, V) an error naming its position */
static void test_embedding(void **state)
{
    suite *s = *state;
    static const int ids[9] = {3, 0, 3, 10, 1, 3, 7, 0, 10};
    static const int shapes[][2] = {{1, 1}, {9, 5}, {9, 33}};
    EACH_TABLE(s, t) {
        for (int k = 0; k < 3; k++) {
            const int N = shapes[k][0], C = shapes[k][1];
            const size_t ny = (size_t)N * C, ne = (size_t)VOCAB * C;
            begin(t, "embedding_forward / embedding_backward, N %d V %d C %d", N, VOCAB, C);
            embed_case c = {N, C, ids, urand(t, ne, 61 + C, -1, 1), urand(t, ny, 62 + C, -1, 1),
                            urand(t, ne, 63 + C, -1, 1)};
            float *y = hf(t, ny), *dE = hf(t, ne);
            embedding_run(t, &c, y, dE);
            double *yw = hd(t, ny), *zero = hd(t, ny), *dw = hd(t, ne), *db = hd(t, ne);
            for (int i = 0; i < N; i++)
                for (int e = 0; e < C; e++) yw[(size_t)i * C + e] = c.E[(size_t)ids[i] * C + e];
            for (size_t e = 0; e < ne; e++) dw[e] = c.dE0[e], db[e] = fabs(c.dE0[e]);
            for (int i = 0; i < N; i++)
                for (int e = 0; e < C; e++) {
                    const double g = c.dy[(size_t)i * C + e];
                    dw[(size_t)ids[i] * C + e] += g, db[(size_t)ids[i] * C + e] += fabs(g);
                }
            for (size_t e = 0; e < ne; e++) db[e] *= dot_tol(QKV_PRECISION_FP32, N);
            expect(t, "y", y, yw, zero, ny);
            expect(t, "dE", dE, dw, db, ne);
            if (is_fp32(t))
                expect_fd(t, "dE", c.E, ne, minus(t, dE, c.dE0, ne), embedding_loss, &c);
            tidy(t);
        }
        static const int bad[2][4] = {{2, 5, 11, 1}, {-1, 0, 0, 0}}; /* V at 2; -1 at 0 */
        for (int k = 0; k < 2; k++) {
            begin(t, "embedding_forward with id %d at position %d", bad[k][k ? 0 : 2], k ? 0 : 2);
            const weight E = weight_f32(fin(t, "E", urand(t, VOCAB * 4, 64, -1, 1), VOCAB * 4));
            qkv_error err = {0};
            const qkv_status st = OP(t, embedding_forward)(&t->be, fout(t, "y", 16),
                                                           iin(t, "ids", bad[k], 4), &E, 4, VOCAB,
                                                           4, &err);
            done(t);
            char want[64];
            snprintf(want, sizeof want, "token id %d at position %d", bad[k][k ? 0 : 2], k ? 0 : 2);
            if (st != QKV_ERR_ARG || err.code != QKV_ERR_ARG || !strstr(err.msg, want))
                fail_at(t, "status %d, message \"%s\": want QKV_ERR_ARG naming \"%s\"", (int)st,
                        err.msg, want);
            tidy(t);
        }
    }
}

typedef struct {
    int B, T, C, pos0;
    float scale;
    float *x, *P, *dy, *dx0, *dP0;
    int grads; /* 1 dx, 2 dP */
} pos_case;

static size_t pos_rows(const pos_case *c) { return (size_t)c->pos0 + c->T + 2; }

static void positional_run(table *t, const pos_case *c, float *y, float *dx, float *dP)
{
    const size_t n = (size_t)c->B * c->T * c->C, np = pos_rows(c) * c->C;
    float *yd = fout(t, "y", n);
    OP(t, positional_forward)(yd, fin(t, "x", c->x, n), fin(t, "P", c->P, np), c->B, c->T, c->C,
                              c->pos0, c->scale);
    fetchf(t, y, yd, n);
    if (c->grads) {
        float *dxd = c->grads & 1 ? facc(t, "dx", c->dx0, n) : NULL;
        float *dPd = c->grads & 2 ? facc(t, "dP", c->dP0, np) : NULL;
        OP(t, positional_backward)(dxd, dPd, fin(t, "dy", c->dy, n), c->B, c->T, c->C, c->pos0,
                                   c->scale);
        if (dxd) fetchf(t, dx, dxd, n);
        if (dPd) fetchf(t, dP, dPd, np);
    }
    done(t);
}

static double positional_loss(table *t, const void *ctx)
{
    pos_case c = *(const pos_case *)ctx;
    const size_t n = (size_t)c.B * c.T * c.C;
    float *y = malloc(n * sizeof *y);
    assert_non_null(y);
    c.grads = 0;
    positional_run(t, &c, y, NULL, NULL);
    const double L = dot_d(y, c.dy, n);
    free(y);
    return L;
}

/* positional_forward y[b, t] = x[b, t] scale + P[pos0 + t]; positional_backward dx += dy
 * scale, dP[pos0 + t] += sum_b dy[b, t] (rows outside untouched); either NULL */
static void test_positional(void **state)
{
    suite *s = *state;
    static const pos_case shapes[] = {{.B = 1, .T = 1, .C = 1, .pos0 = 0, .scale = 1.0f},
                                      {.B = 2, .T = 5, .C = 7, .pos0 = 3, .scale = 2.6457513f},
                                      {.B = 3, .T = 17, .C = 33, .pos0 = 0, .scale = 1.0f},
                                      {.B = 2, .T = 130, .C = 130, .pos0 = 2, .scale = 11.401754f}};
    EACH_TABLE(s, t)
        for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
            pos_case c = shapes[k];
            const size_t n = (size_t)c.B * c.T * c.C, np = pos_rows(&c) * c.C;
            begin(t, "positional_forward / positional_backward, B %d T %d C %d, pos0 %d, scale %g",
                  c.B, c.T, c.C, c.pos0, (double)c.scale);
            c.x = urand(t, n, 71 + k, -1, 1), c.P = urand(t, np, 72 + k, -1, 1);
            c.dy = urand(t, n, 73 + k, -1, 1), c.dx0 = urand(t, n, 74 + k, -1, 1);
            c.dP0 = urand(t, np, 75 + k, -1, 1), c.grads = 3;
            float *y = hf(t, n), *dx = hf(t, n), *dP = hf(t, np);
            positional_run(t, &c, y, dx, dP);
            double *yw = hd(t, n), *yb = hd(t, n), *dxw = hd(t, n), *dxb = hd(t, n);
            double *dPw = hd(t, np), *dPb = hd(t, np);
            for (size_t e = 0; e < np; e++) dPw[e] = c.dP0[e], dPb[e] = fabs(c.dP0[e]);
            for (int b = 0; b < c.B; b++)
                for (int i = 0; i < c.T; i++)
                    for (int e = 0; e < c.C; e++) {
                        const size_t at = ((size_t)b * c.T + i) * c.C + e;
                        const size_t pe = (size_t)(c.pos0 + i) * c.C + e;
                        yw[at] = (double)c.x[at] * c.scale + c.P[pe];
                        yb[at] = SLACK * U * (2 * fabs((double)c.x[at] * c.scale) + fabs(c.P[pe]));
                        dxw[at] = c.dx0[at] + (double)c.dy[at] * c.scale;
                        dxb[at] =
                            SLACK * U * (fabs(c.dx0[at]) + 2 * fabs((double)c.dy[at] * c.scale));
                        dPw[pe] += c.dy[at], dPb[pe] += fabs(c.dy[at]);
                    }
            for (int i = 0; i < c.T; i++)
                for (int e = 0; e < c.C; e++)
                    dPb[(size_t)(c.pos0 + i) * c.C + e] *= dot_tol(QKV_PRECISION_FP32, c.B);
            for (size_t e = 0; e < np; e++)
                if (e / c.C < (size_t)c.pos0 || e / c.C >= (size_t)(c.pos0 + c.T)) dPb[e] = 0.0;
            expect(t, "y", y, yw, yb, n);
            expect(t, "dx", dx, dxw, dxb, n);
            expect(t, "dP", dP, dPw, dPb, np);
            if (is_fp32(t) && n <= 256) {
                expect_fd(t, "dx", c.x, n, minus(t, dx, c.dx0, n), positional_loss, &c);
                expect_fd(t, "dP", c.P, np, minus(t, dP, c.dP0, np), positional_loss, &c);
            }
            for (c.grads = 1; c.grads <= 2; c.grads++) {
                float *one = hf(t, c.grads == 1 ? n : np);
                positional_run(t, &c, y, c.grads == 1 ? one : NULL, c.grads == 2 ? one : NULL);
                if (memcmp(one, c.grads == 1 ? dx : dP, (c.grads == 1 ? n : np) * sizeof *one))
                    fail_at(t, "%s alone differs", c.grads == 1 ? "dx" : "dP");
            }
            tidy(t);
        }
}

/* ==== the loss: softmax cross-entropy ==================================================== */

typedef struct {
    int N, V, ignore_index;
    float smoothing, scale; /* scale <= 0: 1 over the counted rows */
    int db;                 /* whether the fused pass sums the bias gradient */
} ce_shape;

/* V = 1; rows past the fused kernel's 64-row chunks; an ignore_index inside the vocabulary
 * and one outside; past the threads' threshold */
static const ce_shape CE_SHAPES[] = {
    {1, 1, -100, 0.0f, 0.0f, 1}, {3, 7, 1, 0.1f, 0.37f, 1},    {70, 33, 0, 0.0f, 0.0f, 1},
    {5, 1030, 3, 0.1f, 0.0f, 0}, {130, 300, -100, 0.2f, 0.5f, 1},
};

typedef struct {
    const ce_shape *sh;
    float *z, *db0;
    int *targets;
} ce_case;

typedef struct {
    float *loss, *lse, *dz, *db;
    double sum;
    int count;
} ce_out;

/* cross_entropy_forward, or the fused pass (logits overwritten with their gradient, exactly
 * cross_entropy_scratch_floats of scratch when it sums db; none when it does not) */
static void ce_run(table *t, const ce_case *c, int fused, ce_out *o, qkv_error *err)
{
    const ce_shape *sh = c->sh;
    const size_t nz = (size_t)sh->N * sh->V;
    const int *targets = iin(t, "targets", c->targets, sh->N);
    float *loss = fout(t, "loss", sh->N), *lse = fout(t, "lse", sh->N);
    if (!fused) {
        o->count = OP(t, cross_entropy_forward)(loss, lse, &o->sum, fin(t, "logits", c->z, nz),
                                                targets, sh->N, sh->V, sh->ignore_index,
                                                sh->smoothing, err);
    } else {
        float *z = facc(t, "logits", c->z, nz), *db = sh->db ? facc(t, "db", c->db0, sh->V) : NULL;
        const size_t scratch = OP(t, cross_entropy_scratch_floats)(sh->N, sh->V);
        o->count = OP(t, cross_entropy_fused)(loss, lse, &o->sum, z, db, targets, sh->N, sh->V,
                                              sh->ignore_index, sh->smoothing, sh->scale,
                                              db ? fout(t, "scratch", scratch) : NULL, err);
        if (o->count >= 0) fetchf(t, o->dz, z, nz);
        if (db && o->count >= 0) fetchf(t, o->db, db, sh->V);
    }
    if (o->count >= 0) fetchf(t, o->loss, loss, sh->N), fetchf(t, o->lse, lse, sh->N);
    done(t);
}

static double ce_loss(table *t, const void *ctx)
{
    const ce_case *c = ctx;
    ce_out o = {malloc(c->sh->N * sizeof(float)), malloc(c->sh->N * sizeof(float)), NULL, NULL,
                0.0, 0};
    assert_true(o.loss && o.lse);
    ce_run(t, c, 0, &o, NULL);
    free(o.loss), free(o.lse);
    return o.sum;
}

/* The loss's reference: the counted rows, their loss and its sum, lse, dlogits and db, each
 * with its bound. */
typedef struct {
    int count;
    float scale; /* the gradient's: 1 over the counted rows unless given */
    double sum, sumb;
    double *loss, *lb, *lse, *lseb, *dz, *dzb, *db, *dbb;
} ce_ref;

/* Per row, with mx = max z and l = lse: loss = (1 - eps)(l - z_y) + eps (l - mean z), 0 for
 * an ignored row; dz = scale (softmax(z) - q), q = (1 - eps) onehot(y) + eps / V. Bounds (u):
 * l within |mx| + |l| + V + 8 (the exponentials' sum, its log); p_k relatively within
 * V + 8 + |z_k - mx|; db sums N rows of dz. */
static ce_ref ce_reference(table *t, const ce_case *c)
{
    const ce_shape *sh = c->sh;
    const int N = sh->N, V = sh->V;
    const size_t nz = (size_t)N * V;
    const double eps = sh->smoothing;
    ce_ref r = {0, 0.0f, 0.0, 0.0, hd(t, N), hd(t, N), hd(t, N), hd(t, N), hd(t, nz),
                hd(t, nz), hd(t, V), hd(t, V)};
    for (int i = 0; i < N; i++) r.count += c->targets[i] != sh->ignore_index;
    r.scale = sh->scale > 0 ? sh->scale : 1.0f / (float)(r.count ? r.count : 1);
    for (int k = 0; k < V; k++) r.db[k] = c->db0[k], r.dbb[k] = fabs(c->db0[k]);
    for (int i = 0; i < N; i++) {
        const float *z = c->z + (size_t)i * V;
        double mx = -INFINITY, s = 0.0, zs = 0.0, za = 0.0;
        for (int k = 0; k < V; k++) mx = fmax(mx, z[k]), zs += z[k], za += fabs(z[k]);
        for (int k = 0; k < V; k++) s += exp(z[k] - mx);
        const double l = mx + log(s);
        const int y = c->targets[i], ignored = y == sh->ignore_index;
        r.lse[i] = l, r.lseb[i] = SLACK * U * (fabs(mx) + fabs(l) + V + 8);
        r.loss[i] = ignored ? 0.0 : (1 - eps) * (l - z[y]) + eps * (l - zs / V);
        r.lb[i] = ignored ? 0.0
                          : r.lseb[i] + SLACK * U * (fabs(z[y]) + eps * (V + 2) * za / V +
                                                     2 * fabs(r.loss[i]));
        r.sum += r.loss[i], r.sumb += r.lb[i];
        if (ignored) continue; /* no gradient */
        for (int k = 0; k < V; k++) {
            const size_t e = (size_t)i * V + k;
            const double p = exp(z[k] - l), q = (1 - eps) * (k == y) + eps / V;
            const double mag = r.scale * (p * (V + 8 + fabs(z[k] - mx)) + 2 * q);
            r.dz[e] = r.scale * (p - q);
            r.dzb[e] = SLACK * U * (mag + 2 * fabs(r.dz[e]));
            r.db[k] += r.dz[e], r.dbb[k] += mag + (N + 4) * fabs(r.dz[e]);
        }
    }
    for (int k = 0; k < V; k++) r.dbb[k] *= SLACK * U;
    return r;
}

/* cross_entropy_forward and cross_entropy_fused against the reference; on a float32 table
 * the fused gradient against central differences of the forward's sum. */
static void check_cross_entropy(table *t, const ce_shape *sh)
{
    const int N = sh->N, V = sh->V;
    const size_t nz = (size_t)N * V;
    begin(t, "cross_entropy_forward / cross_entropy_fused, N %d V %d, ignore_index %d, label "
          "smoothing %g, scale %g%s", N, V, sh->ignore_index, (double)sh->smoothing,
          (double)sh->scale, sh->db ? "" : ", no bias gradient");
    ce_case c = {sh, urand(t, nz, 81u * N + V, -4, 4), urand(t, V, 82u * N + V, -1, 1), hi(t, N)};
    for (int i = 0; i < N; i++)
        c.targets[i] = i % 3 == 1 ? sh->ignore_index : (int)(random_u32(83, i) % V);
    const ce_ref r = ce_reference(t, &c);
    for (int fused = 0; fused < 2; fused++) {
        ce_out o = {hf(t, N), hf(t, N), hf(t, nz), hf(t, V), 0.0, 0};
        qkv_error err = {0};
        ce_run(t, &c, fused, &o, &err);
        const char *pass = fused ? "cross_entropy_fused" : "cross_entropy_forward";
        if (o.count != r.count)
            fail_at(t, "%s counted %d rows, want %d (%s)", pass, o.count, r.count, err.msg);
        if (!(fabs(o.sum - r.sum) <= r.sumb)) /* double sums of the rows' float32 losses */
            fail_at(t, "%s: sum %.9g, want %.9g (bound %.3g)", pass, o.sum, r.sum, r.sumb);
        expect(t, fused ? "loss (fused)" : "loss", o.loss, r.loss, r.lb, N);
        if (!fused) {
            expect(t, "lse", o.lse, r.lse, r.lseb, N);
            continue;
        }
        double *lf = hd(t, N); /* the fused pass leaves lse 0 on an ignored row */
        for (int i = 0; i < N; i++) lf[i] = c.targets[i] == sh->ignore_index ? 0.0 : r.lse[i];
        expect(t, "lse (fused)", o.lse, lf, r.lseb, N);
        expect(t, "dlogits", o.dz, r.dz, r.dzb, nz);
        if (sh->db) expect(t, "db", o.db, r.db, r.dbb, V);
        if (is_fp32(t)) { /* the gradient of scale * the sum of the counted losses */
            float *g = hf(t, nz);
            for (size_t e = 0; e < nz; e++) g[e] = o.dz[e] / r.scale;
            expect_fd(t, "dlogits / scale", c.z, nz, g, ce_loss, &c);
        }
    }
    /* a counted target outside [0, V): -1 and an error naming the row */
    const int row = N > 2 ? 2 : 0;
    c.targets[row] = V;
    for (int fused = 0; fused < 2; fused++) {
        ce_out o = {hf(t, N), hf(t, N), hf(t, nz), hf(t, V), 0.0, 0};
        qkv_error err = {0};
        ce_run(t, &c, fused, &o, &err);
        char want[64];
        snprintf(want, sizeof want, "target id %d at row %d", c.targets[row], row);
        if (o.count != -1 || err.code != QKV_ERR_ARG || !strstr(err.msg, want))
            fail_at(t, "%s with %s: returned %d, message \"%s\"",
                    fused ? "cross_entropy_fused" : "cross_entropy_forward", want, o.count,
                    err.msg);
    }
    tidy(t);
}

static void test_cross_entropy(void **state)
{
    suite *s = *state;
    EACH_TABLE(s, t)
        for (size_t k = 0; k < sizeof CE_SHAPES / sizeof *CE_SHAPES; k++)
            check_cross_entropy(t, &CE_SHAPES[k]);
}

/* ==== activation memory: zero, copy, add, scale ========================================== */

static void test_vector_ops(void **state)
{
    suite *s = *state;
    EACH_TABLE(s, t)
        for (size_t k = 0; k < sizeof VECTOR_SIZES / sizeof *VECTOR_SIZES; k++) {
            const size_t n = VECTOR_SIZES[k];
            begin(t, "zero / copy / add / scale, %zu values", n);
            const float *x = urand(t, n, 91 + k, -1, 1), *y0 = urand(t, n, 92 + k, -1, 1);
            const float a = -1.7f;
            float *z = fout(t, "zeroed", n), *c = fout(t, "copy", n), *y = facc(t, "y", y0, n);
            float *w = facc(t, "scaled", x, n);
            const float *xd = fin(t, "x", x, n);
            OP(t, zero)(z, n);
            OP(t, copy)(c, xd, n);
            OP(t, add)(y, xd, n);
            OP(t, scale)(w, n, a);
            float *gz = hf(t, n), *gc = hf(t, n), *gy = hf(t, n), *gw = hf(t, n);
            fetchf(t, gz, z, n);
            fetchf(t, gc, c, n);
            fetchf(t, gy, y, n);
            fetchf(t, gw, w, n);
            done(t);
            double *wz = hd(t, n), *wc = hd(t, n), *wy = hd(t, n), *wyb = hd(t, n), *ww = hd(t, n),
                   *wwb = hd(t, n), *exact = hd(t, n);
            for (size_t i = 0; i < n; i++) {
                wc[i] = x[i], wy[i] = (double)y0[i] + x[i], ww[i] = (double)x[i] * a;
                wyb[i] = U * fabs(wy[i]), wwb[i] = U * fabs(ww[i]);
            }
            expect(t, "zero", gz, wz, exact, n);
            expect(t, "copy", gc, wc, exact, n);
            expect(t, "add", gy, wy, wyb, n);
            expect(t, "scale", gw, ww, wwb, n);
            tidy(t);
        }
}

/* ==== the optimizer: Adam's step, clipping's sum of squares; the weights' bf16 copy ======= */

/* p, m, v after one Adam step (ops/cpu/optimizer.h) against the same float32 inputs and
 * constants in double. Each bound follows the float32 expression: a rounded product or sum
 * errs by at most u times its magnitude, a quotient carries its operands' relative errors,
 * a square root half of its operand's; the errors of m and v go on into the update. */
static void test_adam_update(void **state)
{
    suite *s = *state;
    const adam_hyper h = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
                          .lr = 1e-3f, .c1 = 3.69f, .c2 = 333.7f};
    const double b1 = h.beta1, a1 = 1.0f - h.beta1, b2 = h.beta2, a2 = 1.0f - h.beta2;
    const double c1 = h.c1, c2 = h.c2, eps = h.eps, wd = h.weight_decay, lr = h.lr;
    EACH_TABLE(s, t)
        for (size_t k = 0; k < sizeof VECTOR_SIZES / sizeof *VECTOR_SIZES; k++) {
            const size_t n = VECTOR_SIZES[k];
            begin(t, "adam_update, %zu values", n);
            const float *g = urand(t, n, 101 + k, -1, 1), *m0 = urand(t, n, 102 + k, -0.1f, 0.1f),
                        *v0 = urand(t, n, 103 + k, 0.01f, 1), *p0 = urand(t, n, 104 + k, -1, 1);
            float *pd = facc(t, "p", p0, n), *md = facc(t, "m", m0, n), *vd = facc(t, "v", v0, n);
            OP(t, adam_update)(pd, fin(t, "g", g, n), md, vd, n, &h);
            float *gp = hf(t, n), *gm = hf(t, n), *gv = hf(t, n);
            fetchf(t, gp, pd, n);
            fetchf(t, gm, md, n);
            fetchf(t, gv, vd, n);
            done(t);
            double *wp = hd(t, n), *wm = hd(t, n), *wv = hd(t, n), *bp = hd(t, n), *bm = hd(t, n),
                   *bv = hd(t, n);
            for (size_t i = 0; i < n; i++) {
                const double m = b1 * m0[i] + a1 * g[i], v = b2 * v0[i] + a2 * g[i] * g[i];
                const double em = 3 * U * (fabs(b1 * m0[i]) + fabs(a1 * g[i]));
                const double ev = 4 * U * (b2 * v0[i] + a2 * g[i] * g[i]);
                const double num = m * c1, r = sqrt(v * c2), den = r + eps, upd = num / den;
                const double en = c1 * em + U * fabs(num);
                const double ed = r * 0.5 * (ev / v + U) + U * r + U * den;
                const double eu = (en + fabs(upd) * ed) / den + U * fabs(upd);
                const double q = upd + wd * p0[i], sq = lr * q;
                const double eq = eu + U * fabs(wd * p0[i]) + U * (fabs(upd) + fabs(wd * p0[i]));
                const double es = lr * eq + U * fabs(sq);
                wm[i] = m, wv[i] = v, wp[i] = p0[i] - sq;
                bm[i] = SLACK * em, bv[i] = SLACK * ev;
                bp[i] = SLACK * (es + U * (fabs(p0[i]) + fabs(sq)));
            }
            expect(t, "m", gm, wm, bm, n);
            expect(t, "v", gv, wv, bv, n);
            expect(t, "p", gp, wp, bp, n);
            tidy(t);
        }
}

/* sum x_i^2, returned to the host, within a float32 sum's bound: (n + 2) u sum x_i^2. */
static void test_sum_squares(void **state)
{
    suite *s = *state;
    EACH_TABLE(s, t)
        for (size_t k = 0; k < sizeof VECTOR_SIZES / sizeof *VECTOR_SIZES; k++) {
            const size_t n = VECTOR_SIZES[k];
            begin(t, "sum_squares, %zu values", n);
            const float *x = urand(t, n, 111 + k, -2, 2);
            const double got = OP(t, sum_squares)(fin(t, "x", x, n), n);
            done(t);
            double want = 0.0;
            for (size_t i = 0; i < n; i++) want += (double)x[i] * x[i];
            const double bound = SLACK * (double)(n + 2) * U * want;
            if (!(fabs(got - want) <= bound))
                fail_at(t, "sum_squares = %.17g, want %.17g: the error is %.3g times its bound",
                        got, want, fabs(got - want) / bound);
            tidy(t);
        }
}

/* round_bf16 writes each value rounded to the nearest bf16, ties to even (as kv_store's bf16
 * cache does), and nothing past n. */
static void test_round_bf16(void **state)
{
    suite *s = *state;
    static const size_t sizes[] = {1, N_BF16_SPECIAL, 1025, 70000};
    EACH_TABLE(s, t)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            const size_t n = sizes[k];
            begin(t, "round_bf16, %zu values", n);
            float *x = urand(t, n, 121 + k, -3, 3);
            memcpy(x, BF16_SPECIAL, (n < N_BF16_SPECIAL ? n : N_BF16_SPECIAL) * sizeof *x);
            uint16_t *got = keep(t, calloc(n, sizeof *got));
            uint16_t *d = dev(t, "dst", OUT, NULL, n * sizeof *got);
            OP(t, round_bf16)(d, fin(t, "x", x, n), n);
            fetch(t, got, d, n * sizeof *got);
            done(t);
            for (size_t i = 0; i < n; i++) {
                const uint16_t want = bf16_round_reference(x[i]);
                if (isnan(x[i]) ? !isnan(bf16_to_float(got[i])) : got[i] != want) {
                    fail_at(t, "value %zu: %a as bf16 0x%04x, want 0x%04x", i, (double)x[i],
                            got[i], want);
                    break;
                }
            }
            tidy(t);
        }
}

/* ==== last: every entry of every table was exercised ===================================== */

static void test_every_entry_exercised(void **state)
{
    suite *s = *state;
    EACH_TABLE(s, t)
        if (t->failed) {
            print_message("table %s: a check failed, so some entries may not have been reached: "
                          "not counted\n", t->spec->name);
            skip();
        }
    EACH_TABLE(s, t) {
        begin(t, "the entries the checks called");
        for (int e = 0; e < E_COUNT; e++)
            if (!(t->used >> e & 1)) fail_at(t, "no check called entry %s", ENTRY_NAMES[e]);
    }
}

/* ==== the suite ========================================================================== */

static int setup(void **state)
{
    suite *s = calloc(1, sizeof *s);
    if (!s) return -1;
    for (int k = 0; k < N_TABLES; k++) {
        const table_spec *spec = &TABLES[k];
        if (!spec->supported()) {
            print_message("[ SKIPPED  ] table %s: this machine has no %s\n", spec->name,
                          spec->needs);
            continue;
        }
        table *t = &s->t[s->n++];
        t->spec = spec;
        spec->open(&t->be, &t->state, spec->linear);
        t->typed_current = t->be.typed_current;
        if (t->be.ops != spec->ops) {
            print_error("table %s: its backend runs table %s\n", spec->name, t->be.ops->name);
            return -1;
        }
    }
    *state = s;
    return s->n && !strcmp(s->t[0].spec->name, "cpu-fp32") ? 0 : -1;
}

static int teardown(void **state)
{
    suite *s = *state;
    for (int k = 0; k < s->n; k++) {
        release_all(&s->t[k]);
        tidy(&s->t[k]);
        s->t[k].spec->close(s->t[k].state);
    }
    free(s);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_entry_missing),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_linear_best),
        cmocka_unit_test(test_linear_backward),
        cmocka_unit_test(test_choose_attention),
        cmocka_unit_test(test_attention_forward),
        cmocka_unit_test(test_attention_backward),
        cmocka_unit_test(test_attention_kernels_agree),
        cmocka_unit_test(test_cached_attention),
        cmocka_unit_test(test_kv_store),
        cmocka_unit_test(test_linear_attention_step),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_addnorm),
        cmocka_unit_test(test_residual_dropout),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_positional),
        cmocka_unit_test(test_cross_entropy),
        cmocka_unit_test(test_vector_ops),
        cmocka_unit_test(test_adam_update),
        cmocka_unit_test(test_sum_squares),
        cmocka_unit_test(test_round_bf16),
        cmocka_unit_test(test_every_entry_exercised),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
