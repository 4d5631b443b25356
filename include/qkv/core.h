/* SPDX-License-Identifier: MIT */
/* qkv/core.h: the base of the library: its version, the export macro, errors, threads, files and
 * random numbers. Part of qkv.h, which includes every part; its opening comment is the tour. */
#ifndef QKV_API_CORE_H
#define QKV_API_CORE_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QKV_VERSION "0.1.0"

/* Marks what libqkv.so exports: every function declared in these headers, and nothing else
 * (the library is compiled with -fvisibility=hidden and linked with a version script that
 * keeps only qkv_* symbols; see the Makefile). */
#if defined(__GNUC__) || defined(__clang__)
#define QKV_API __attribute__((visibility("default")))
#else
#define QKV_API
#endif

/* ---------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------- */

typedef enum {
    QKV_OK = 0,
    QKV_ERR_NOMEM,   /* an allocation failed */
    QKV_ERR_ARG,     /* an argument is out of its documented range */
    QKV_ERR_IO,      /* a file could not be opened, read or written */
    QKV_ERR_FORMAT,  /* a file is malformed: truncated, hostile, wrong dtype or shape */
    QKV_ERR_NUMERIC, /* NaN or Inf where a finite number is required */
    QKV_ERR_DEVICE   /* a GPU failed a kernel, a transfer or a library call (the message says
                      * which); the model's state there is lost */
} qkv_status;

/* The reason for the last failure of a call that took this struct. */
typedef struct {
    qkv_status code;
    char msg[512];
} qkv_error;

/* A constant name for a status code ("ok", "out of memory", ...). */
QKV_API
const char *qkv_status_name(qkv_status s);

/* Threads used by kernels and by OpenBLAS (n <= 0: leave the runtime's default). */
QKV_API
void qkv_set_threads(int n);
QKV_API
int qkv_get_threads(void);
/* QKV_OK if the OpenBLAS loaded is its OpenMP build, the one qkv needs: its GEMMs share qkv's
 * OpenMP threads and run single-threaded inside qkv's parallel regions. With its pthreads build
 * two thread pools compete for the cores and results change with the thread count; with its
 * sequential build every GEMM runs on one core. For those, QKV_ERR_ARG and a message that names
 * the build and the file loaded, and how to get the OpenMP one. The qkv command checks this at
 * start-up and refuses to run without it. */
QKV_API
qkv_status qkv_blas_check(qkv_error *err);

/* Seconds on a monotonic clock, for timing: only the difference of two readings means
 * anything (it does not jump when the wall clock is set). */
QKV_API
double qkv_now_s(void);

/* ---------------------------------------------------------------------------------------
 * Names of the library's enums
 *
 * Every enum that a file (config.json, train.json) or a command line spells has one table of
 * names in the library, indexed by value. The typed calls beside each enum read it
 * (qkv_activation_name, qkv_tie_parse, ...), and so can generic code, an option parser or a
 * binding, through these two.
 * ------------------------------------------------------------------------------------- */

typedef enum {
    QKV_ENUM_ACTIVATION,  /* qkv_activation: relu, gelu, silu */
    QKV_ENUM_TIE,         /* qkv_tie: none, output, all */
    QKV_ENUM_POS_LAYOUT,  /* qkv_pos_layout: interleaved, sin_cos, fairseq */
    QKV_ENUM_ATTENTION,   /* qkv_attention_kind: softmax, linear */
    QKV_ENUM_BEAM_STOP,   /* qkv_beam_stop: bound, count, hf, hf-early, hf-never */
    QKV_ENUM_PRECISION,   /* qkv_precision: fp32, bf16, int8 */
    QKV_ENUM_KV_CACHE,    /* qkv_kv_cache: auto, fp32, bf16 */
    QKV_ENUM_LR_SCHEDULE, /* qkv_lr_schedule: constant, noam */
    QKV_ENUM_SPM_TYPE,    /* qkv_spm_type: unigram, bpe */
    QKV_ENUM_RESERVED,    /* the reserved tokens by id (QKV_UNK ..): <unk>, <pad>, <bos>, <eos> */
    QKV_ENUM_CT2_QUANTIZATION, /* qkv_ct2_quantization: float32, int8 */
    QKV_ENUM_DEVICE,      /* qkv_device: cpu, cuda */
    QKV_N_ENUMS
} qkv_enum;

/* The name of value v of enum e; NULL for a value (or an e) outside the table, so that
 * for (v = 0; qkv_enum_name(e, v); v++) lists the choices. */
QKV_API
const char *qkv_enum_name(qkv_enum e, int v);
/* *v from its name; QKV_ERR_ARG naming what was expected otherwise ("unknown activation 'x'
 * (relu, gelu or silu)"). */
QKV_API
qkv_status qkv_enum_parse(qkv_enum e, const char *name, int *v, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * Files
 * ------------------------------------------------------------------------------------- */

/* Limits on what qkv reads, so that no input (a huge file, /dev/zero, a pipe that never
 * ends) can take memory without bound: each reader refuses more, naming the file and the
 * limit. QKV_MAX_TEXT_BYTES: a text read whole (a language model's training text,
 * translate's input, a metrics log) and each file of a corpus; QKV_MAX_LINE_BYTES: one line
 * of a corpus; QKV_MAX_VOCAB_FILE_BYTES: a vocabulary or subword file;
 * QKV_MAX_CONFIG_BYTES: config.json, text.json, train.json. */
#define QKV_MAX_TEXT_BYTES ((size_t)1 << 28)       /* 256 MiB */
#define QKV_MAX_LINE_BYTES ((size_t)1 << 22)       /* 4 MiB */
#define QKV_MAX_VOCAB_FILE_BYTES ((size_t)1 << 26) /* 64 MiB */
#define QKV_MAX_CONFIG_BYTES ((size_t)1 << 20)     /* 1 MiB */

/* path opened for reading the way every reader of qkv opens a file: never waiting (a FIFO is
 * opened without blocking, and one that no process writes to is refused rather than waited
 * on), a directory refused, and with regular_only anything but a regular file refused too (a
 * FIFO, a device, a socket): the files of a model, a run or a configuration are regular
 * files, while a text to read (a corpus, translate's input) may also come through a pipe or
 * a device, which its reader then bounds. The stream is the caller's to fclose; NULL on
 * failure, with err (QKV_ERR_IO) naming path and the reason. */
QKV_API
FILE *qkv_open_file(const char *path, int regular_only, qkv_error *err);

/* The whole file at path (NULL: standard input, "stdin" in messages) in *text, with a NUL
 * after its *len bytes (len may be NULL; the text may hold NUL bytes of its own); *text is
 * the caller's to free, and NULL on failure. path is opened as qkv_open_file opens a text (a
 * pipe or a device is read; a FIFO without a writer is refused). A file of more than
 * max_bytes (SIZE_MAX: no limit) fails with QKV_ERR_FORMAT: a regular file before anything
 * is read, anything else (a pipe, a device that may never end) once max_bytes + 1 bytes have
 * come. A directory, or a file that cannot be opened or read: QKV_ERR_IO. */
QKV_API
qkv_status qkv_read_file(const char *path, size_t max_bytes, char **text, size_t *len,
                         qkv_error *err);
/* qkv_read_file for a file that must be a regular file (qkv_open_file with regular_only): a
 * model's, a run's or a configuration's. path may not be NULL. */
QKV_API
qkv_status qkv_read_regular_file(const char *path, size_t max_bytes, char **text, size_t *len,
                                 qkv_error *err);

/* Lines 1..*count of a file (NULL or "-": standard input) as sacreBLEU reads references (a
 * final \r dropped; *count < 0: every line, *count then receiving how many), or with tsv the
 * text between each line's first and second tab: *lines gets *count strings pointing into
 * *text (both the caller's to free; NULL on failure). QKV_ERR_FORMAT naming the file (and
 * line) for a file with fewer lines, a line without a tab, a NUL byte; qkv_read_file's errors
 * otherwise. */
QKV_API
qkv_status qkv_read_lines(const char *path, int tsv, int *count, char ***lines, char **text,
                          qkv_error *err);

/* How directory a lies to directory b, links and other spellings resolved (a need not exist
 * yet: its nearest existing parent is resolved): 0 apart, 1 the same, 2 a inside b, 3 a
 * holding b; -1 when b (or every parent of a) cannot be resolved. For refusing to write a
 * result into, above or below its input. */
QKV_API
int qkv_path_relation(const char *a, const char *b);

/* Replaces path atomically with the concatenation of n_chunks buffers: a temporary file next
 * to it (path.tmp.PID.K, created exclusively), fsync, rename. A crash leaves the old file or
 * the new one, and a symbolic link at path is replaced, never followed. On failure the
 * previous file is untouched and err names the path. */
QKV_API
qkv_status qkv_atomic_write(const char *path, const void *const *chunks, const size_t *lens,
                            int n_chunks, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * JSON
 * Every JSON text qkv reads (config.json, text.json, train.json, --config, a Hugging Face
 * directory's files, a server request) is read by qkv_json_parse, as cJSON's tree (cJSON.h).
 * ------------------------------------------------------------------------------------- */

struct cJSON;

/* text[0..len) as one JSON value in *out (the caller's, for cJSON_Delete), refusing what
 * cJSON alone would let through: anything but white space after the value (a second object,
 * a NUL byte, text), a NUL byte anywhere or a \u0000 escape in a string (cJSON ends the
 * string there), a control character between tokens (cJSON skips it as white space), and an
 * object that holds a key twice. Each number item keeps its text in valuestring, for
 * qkv_json_uint64. QKV_ERR_FORMAT naming name and the byte or the key; *out NULL on
 * failure. */
QKV_API
qkv_status qkv_json_parse(struct cJSON **out, const char *text, size_t len, const char *name,
                          qkv_error *err);
/* qkv_json_parse of the regular file at path (qkv_read_regular_file, at most max_bytes). */
QKV_API
qkv_status qkv_json_load(struct cJSON **out, const char *path, size_t max_bytes,
                         qkv_error *err);
/* 1 and *v when item is a number that is an integer in [0, 2^64 - 1], read exactly from its
 * text (a double holds integers exactly only up to 2^53); else 0. */
QKV_API
int qkv_json_uint64(const struct cJSON *item, uint64_t *v);

/* ---------------------------------------------------------------------------------------
 * Random numbers
 * A counter-based generator: the value at (seed, i) depends on nothing else, so dropout is
 * reproducible whatever the thread count, and its mask is recomputed in backward, not stored.
 * ------------------------------------------------------------------------------------- */

/* 32 random bits for counter i of stream seed. */
QKV_API
uint32_t qkv_random_u32(uint64_t seed, uint64_t i);
/* A uniform float in [0, 1) for counter i of stream seed. */
QKV_API
float qkv_random_uniform(uint64_t seed, uint64_t i);
/* A standard normal float (Box-Muller) for counter i of stream seed. */
QKV_API
float qkv_random_normal(uint64_t seed, uint64_t i);
/* Fill x[0..n) with uniform floats in [lo, hi) from stream seed. */
QKV_API
void qkv_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed);
/* Fill x[0..n) with normal floats N(mean, std^2) from stream seed. */
QKV_API
void qkv_fill_normal(float *x, size_t n, float mean, float std, uint64_t seed);
/* Xavier-uniform initialisation of a (fan_out, fan_in) matrix: U(-a, a), a = sqrt(6/(in+out)). */
QKV_API
void qkv_init_xavier_uniform(float *W, int fan_out, int fan_in, uint64_t seed);

#ifdef __cplusplus
}
#endif

#endif /* QKV_API_CORE_H */
