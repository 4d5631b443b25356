/* SPDX-License-Identifier: MIT */
/* SentencePiece models through libsentencepiece (src/text/spm_shim.cc): loading, encoding to
 * ids and pieces, decoding, and training one with qkv's special pieces at qkv's ids. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/internal.h"
#include "text/spm_shim.h"

struct qkv_spm {
    spm_shim *shim;
};

static qkv_status loaded(qkv_spm **out, spm_shim *shim, const char *name, const char *why,
                         qkv_error *err)
{
    if (!shim)
        return qkv_fail(err, QKV_ERR_FORMAT, "%.400s: not a SentencePiece model: %.500s", name,
                        why);
    if (!(*out = malloc(sizeof **out))) {
        spm_shim_free(shim);
        return qkv_fail(err, QKV_ERR_NOMEM, "%.400s: out of memory", name);
    }
    (*out)->shim = shim;
    return QKV_OK;
}

qkv_status qkv_spm_load(qkv_spm **out, const char *path, qkv_error *err)
{
    *out = NULL;
    /* read here, not by libsentencepiece: it would wait on a FIFO, read a device until memory
     * runs out, and report a missing file as a generic "not found" */
    char *bytes = NULL;
    size_t len = 0;
    qkv_status st = qkv_read_regular_file(path, QKV_MAX_VOCAB_FILE_BYTES, &bytes, &len, err);
    if (!st) st = qkv_spm_load_bytes(out, bytes, len, path, err);
    free(bytes);
    return st;
}

qkv_status qkv_spm_load_bytes(qkv_spm **out, const void *bytes, size_t size,
                              const char *name, qkv_error *err)
{
    *out = NULL;
    char why[512] = "";
    return loaded(out, spm_shim_load(NULL, bytes, size, why, sizeof why),
                  name ? name : "SentencePiece model", why, err);
}

void qkv_spm_free(qkv_spm *s)
{
    if (!s) return;
    spm_shim_free(s->shim);
    free(s);
}

int qkv_spm_size(const qkv_spm *s) { return spm_shim_size(s->shim); }

int qkv_spm_piece_id(const qkv_spm *s, const char *piece)
{
    return spm_shim_piece_to_id(s->shim, piece, strlen(piece));
}

const char *qkv_spm_piece(const qkv_spm *s, int id) { return spm_shim_id_to_piece(s->shim, id); }

qkv_spm_specials qkv_spm_special_ids(const qkv_spm *s)
{
    int ids[4];
    spm_shim_special_ids(s->shim, ids);
    return (qkv_spm_specials){ids[0], ids[1], ids[2], ids[3]};
}

int qkv_spm_is_control(const qkv_spm *s, int id) { return spm_shim_is_control(s->shim, id); }

qkv_status qkv_spm_encode(const qkv_spm *s, const char *text, size_t len, int **ids, int *n,
                          qkv_error *err)
{
    char why[512] = "";
    if (spm_shim_encode_ids(s->shim, text, len, ids, n, why, sizeof why))
        return qkv_fail(err, QKV_ERR_FORMAT, "SentencePiece cannot encode the text: %s", why);
    return QKV_OK;
}

qkv_status qkv_spm_encode_pieces(const qkv_spm *s, const char *text, size_t len,
                                 qkv_sentences *out, qkv_error *err)
{
    memset(out, 0, sizeof *out);
    char why[512] = "", *bytes;
    int n;
    if (spm_shim_encode_pieces(s->shim, text, len, &bytes, &n, why, sizeof why))
        return qkv_fail(err, QKV_ERR_FORMAT, "SentencePiece cannot encode the text: %s", why);
    out->tokens = malloc((n ? (size_t)n : 1) * sizeof *out->tokens);
    out->start = malloc(2 * sizeof *out->start);
    if (!out->tokens || !out->start) {
        free(bytes);
        qkv_sentences_free(out);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d pieces", n);
    }
    const char *at = bytes;
    for (int i = 0; i < n; i++, at += strlen(at) + 1) out->tokens[i] = at;
    out->storage = bytes;
    out->count = 1, out->n_tokens = (size_t)n;
    out->start[0] = 0, out->start[1] = (size_t)n;
    return QKV_OK;
}

qkv_status qkv_spm_decode(const qkv_spm *s, const int *ids, int n, char **text,
                          qkv_error *err)
{
    *text = NULL;
    const int size = spm_shim_size(s->shim);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= size)
            return qkv_fail(err, QKV_ERR_ARG, "id %d (position %d) outside the SentencePiece "
                            "model's %d pieces", ids[i], i, size);
    char why[512] = "";
    size_t len;
    if (spm_shim_decode_ids(s->shim, ids, n, text, &len, why, sizeof why))
        return qkv_fail(err, QKV_ERR_FORMAT, "SentencePiece cannot decode: %s", why);
    return QKV_OK;
}

qkv_status qkv_spm_decode_pieces(const qkv_spm *s, const char *const *pieces, int n,
                                 char **text, qkv_error *err)
{
    char why[512] = "";
    size_t len;
    if (spm_shim_decode_pieces(s->shim, pieces, n, text, &len, why, sizeof why))
        return qkv_fail(err, QKV_ERR_FORMAT, "SentencePiece cannot decode: %s", why);
    return QKV_OK;
}

/* ---- training in a child process ----------------------------------------------------------
 * libsentencepiece's trainer ends the process it runs in on some inputs (a failed CHECK, such
 * as a text that normalisation leaves without a single character: lines of U+3000, of control
 * or of zero-width characters), printing "unrecoverable error" and calling exit(). No input
 * may end the caller of a library, and no test of the input can be sure to foresee every such
 * CHECK, so the trainer runs in a child process of its own: the model comes back through a
 * pipe, and the child's end, however it comes, is a status here. */

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        const ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}

/* The child: trains, writes the model to out (exit 0) or the trainer's message to log (exit
 * 1). Its standard output goes nowhere, its standard error (the trainer's own messages) to
 * log. */
static void train_child(int out, int log, const char *const *keys, const char *const *values,
                        int n, const char *const *lines, size_t count)
{
    const int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null < 0 || dup2(null, STDOUT_FILENO) < 0 || dup2(log, STDERR_FILENO) < 0) _exit(3);
    char *model = NULL, why[512] = "";
    size_t size = 0;
    if (spm_shim_train(keys, values, n, lines, count, &model, &size, why, sizeof why)) {
        write_all(log, why, strlen(why));
        _exit(1);
    }
    _exit(write_all(out, model, size) ? 2 : 0);
}

/* A growing byte buffer, bounded: bytes past max are dropped (and counted as dropped). */
typedef struct {
    char *p;
    size_t len, cap, max;
    int dropped, nomem;
} bytes_in;

static void bytes_add(bytes_in *b, const char *p, size_t n)
{
    if (b->len + n > b->max) {
        b->dropped = 1;
        n = b->max - b->len;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->nomem = 1;
            return;
        }
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* Reads the child's two pipes to their ends. */
static void drain(int out, int log, bytes_in *model, bytes_in *msg)
{
    struct pollfd fds[2] = {{out, POLLIN, 0}, {log, POLLIN, 0}};
    bytes_in *into[2] = {model, msg};
    int open_fds = 2;
    char buf[65536];
    while (open_fds > 0) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !fds[i].revents) continue;
            const ssize_t r = read(fds[i].fd, buf, sizeof buf);
            if (r < 0 && errno == EINTR) continue;
            if (r > 0) {
                bytes_add(into[i], buf, (size_t)r);
                continue;
            }
            fds[i].fd = -1, open_fds--; /* the end, or an error: nothing more comes */
        }
    }
}

static qkv_status train_isolated(const char *const *keys, const char *const *values, int n,
                                 const char *const *lines, size_t count, char **model,
                                 size_t *size, const char *name, qkv_error *err)
{
    int out[2], log[2];
    if (pipe(out)) return qkv_fail(err, QKV_ERR_IO, "%.400s: cannot make a pipe: %s", name,
                                   strerror(errno));
    if (pipe(log)) {
        close(out[0]), close(out[1]);
        return qkv_fail(err, QKV_ERR_IO, "%.400s: cannot make a pipe: %s", name,
                        strerror(errno));
    }
    fflush(NULL); /* else the child's exit() would write the caller's buffered output again */
    const pid_t pid = fork();
    if (pid == 0) {
        close(out[0]), close(log[0]);
        train_child(out[1], log[1], keys, values, n, lines, count);
    }
    const int fork_errno = errno;
    close(out[1]), close(log[1]);
    bytes_in got = {.max = QKV_MAX_VOCAB_FILE_BYTES}, msg = {.max = 2048};
    if (pid > 0) drain(out[0], log[0], &got, &msg);
    close(out[0]), close(log[0]);
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    qkv_status st = QKV_OK;
    /* the trainer's lines, as one */
    for (size_t i = 0; i < msg.len; i++)
        if (msg.p[i] == '\n' || msg.p[i] == '\r') msg.p[i] = ' ';
    while (msg.len > 0 && msg.p[msg.len - 1] == ' ') msg.p[--msg.len] = '\0';
    const char *why = msg.p ? msg.p : "";
    if (pid < 0)
        st = qkv_fail(err, QKV_ERR_NOMEM, "%.400s: cannot start SentencePiece's trainer in a "
                      "process of its own: %s", name, strerror(fork_errno));
    else if (got.nomem || msg.nomem)
        st = qkv_fail(err, QKV_ERR_NOMEM, "%.400s: out of memory for the trained model", name);
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 1)
        st = qkv_fail(err, QKV_ERR_ARG, "%.400s: SentencePiece training failed: %.500s", name,
                      why);
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got.dropped)
        st = qkv_fail(err, QKV_ERR_ARG, "%.300s: SentencePiece's trainer stopped on this text "
                      "(%s %d): %.300s", name, WIFEXITED(status) ? "exit status" : "signal",
                      WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                      *why ? why : "no message");
    free(msg.p);
    if (st) return free(got.p), st;
    *model = got.p, *size = got.len;
    return QKV_OK;
}

/* Each sentence of the texts as one line, its tokens joined by single spaces: *lines points
 * into *bytes (both malloc'd). */
static qkv_status join_sentences(char ***lines, char **bytes, size_t *count,
                                 const qkv_sentences *const *texts, int n_texts, qkv_error *err)
{
    size_t n = 0, total = 0;
    for (int t = 0; t < n_texts; t++) {
        n += (size_t)texts[t]->count;
        for (size_t k = 0; k < texts[t]->n_tokens; k++) total += strlen(texts[t]->tokens[k]) + 1;
        total += (size_t)texts[t]->count; /* an empty sentence still ends in NUL */
    }
    *lines = malloc((n ? n : 1) * sizeof **lines), *bytes = malloc(total ? total : 1);
    if (!*lines || !*bytes) {
        free(*lines), free(*bytes);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %zu sentences", n);
    }
    char *at = *bytes;
    size_t line = 0;
    for (int t = 0; t < n_texts; t++)
        for (int i = 0; i < texts[t]->count; i++) {
            (*lines)[line++] = at;
            for (size_t k = texts[t]->start[i]; k < texts[t]->start[i + 1]; k++) {
                if (k > texts[t]->start[i]) *at++ = ' ';
                const size_t len = strlen(texts[t]->tokens[k]);
                memcpy(at, texts[t]->tokens[k], len);
                at += len;
            }
            *at++ = '\0';
        }
    *count = n;
    return QKV_OK;
}

qkv_status qkv_spm_train(const qkv_sentences *const *texts, int n_texts,
                         const char *model_path, int vocab_size, qkv_spm_type type,
                         qkv_error *err)
{
    if (vocab_size <= QKV_N_RESERVED || n_texts < 1)
        return qkv_fail(err, QKV_ERR_ARG, "a SentencePiece model needs a text and more than "
                        "the %d reserved pieces (got %d texts, %d pieces)", QKV_N_RESERVED,
                        n_texts, vocab_size);
    char size[32];
    snprintf(size, sizeof size, "%d", vocab_size);
    /* qkv's reserved tokens at qkv's ids, so that piece ids are vocabulary ids; one thread,
     * so that the pieces learned do not depend on the machine; every sentence, in order */
    const char *const keys[] = {
        "vocab_size", "model_type", "character_coverage", "split_digits",
        "unk_id", "pad_id", "bos_id", "eos_id",
        "unk_piece", "pad_piece", "bos_piece", "eos_piece",
        "num_threads", "minloglevel", "input_sentence_size", "shuffle_input_sentence",
    };
    const char *const values[] = {
        size, qkv_spm_type_name(type), "1.0", "true", /* qkv's names are SentencePiece's */
        "0", "1", "2", "3",
        qkv_enum_name(QKV_ENUM_RESERVED, QKV_UNK), qkv_enum_name(QKV_ENUM_RESERVED, QKV_PAD),
        qkv_enum_name(QKV_ENUM_RESERVED, QKV_BOS), qkv_enum_name(QKV_ENUM_RESERVED, QKV_EOS),
        "1", "2", "0", "false",
    };
    char **lines, *bytes, *model = NULL;
    size_t count = 0, model_size = 0;
    qkv_status st = join_sentences(&lines, &bytes, &count, texts, n_texts, err);
    if (st) return st;
    st = train_isolated(keys, values, (int)(sizeof keys / sizeof *keys),
                        (const char *const *)lines, count, &model, &model_size, model_path, err);
    free(lines), free(bytes);
    if (st) return st;
    const void *chunk = model;
    st = qkv_atomic_write(model_path, &chunk, &model_size, 1, err);
    free(model);
    return st;
}

qkv_status qkv_spm_vocab(qkv_vocab *v, const qkv_spm *s, const char *name, qkv_error *err)
{
    memset(v, 0, sizeof *v);
    const int n = qkv_spm_size(s);
    for (int id = 0; id < QKV_N_RESERVED; id++) {
        const char *p = qkv_spm_piece(s, id);
        if (!p || strcmp(p, qkv_enum_name(QKV_ENUM_RESERVED, id)))
            return qkv_fail(err, QKV_ERR_FORMAT, "%.400s: piece %d is \"%.40s\", not %s: not a "
                            "model with qkv's reserved pieces (qkv_spm_train makes those)",
                            name, id, p ? p : "(none)", qkv_enum_name(QKV_ENUM_RESERVED, id));
    }
    const char **pieces = malloc((size_t)n * sizeof *pieces);
    if (!pieces) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d pieces", n);
    for (int id = 0; id < n; id++) pieces[id] = qkv_spm_piece(s, id);
    /* every piece once: d2l's frequency order keeps the order of first occurrence, and the
     * reserved four keep their ids */
    qkv_status st = qkv_vocab_build(v, pieces, (size_t)n, 1, err);
    free(pieces);
    if (!st && v->size != n)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%.400s: %d pieces make a vocabulary of %d", name, n,
                      v->size);
    if (st) qkv_vocab_free(v);
    return st;
}
