/* SPDX-License-Identifier: MIT */
/* What the libFuzzer harnesses share: a private directory in tmpfs for the readers that take
 * a path, the small configurations whose model files seed fuzz_checkpoint and fuzz_lm_model,
 * and a check that stops the run (as a crash libFuzzer records) when a property of a reader
 * does not hold. */
#ifndef QKV_FUZZ_COMMON_H
#define QKV_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "qkv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The one directory of this process, in /dev/shm (memory, so an iteration costs no disk I/O)
 * or $TMPDIR when there is no /dev/shm, and the files made in it: removed at exit. */
typedef struct {
    char dir[256];
    char files[8][320];
    int n_files;
} fuzz_scratch;

static inline fuzz_scratch *fuzz_scratch_state(void)
{
    static fuzz_scratch s;
    return &s;
}

static inline void fuzz_dir_remove(void)
{
    fuzz_scratch *s = fuzz_scratch_state();
    for (int i = 0; i < s->n_files; i++) unlink(s->files[i]);
    rmdir(s->dir);
}

static inline const char *fuzz_dir(const char *tag)
{
    fuzz_scratch *s = fuzz_scratch_state();
    if (s->dir[0]) return s->dir;
    struct stat sb;
    const char *root = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm" : NULL;
    if (!root) root = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(s->dir, sizeof s->dir, "%s/qkv-fuzz-%s-%ld", root, tag, (long)getpid());
    if (mkdir(s->dir, 0700) != 0 && stat(s->dir, &sb) != 0) {
        perror(s->dir);
        abort();
    }
    atexit(fuzz_dir_remove);
    return s->dir;
}

/* A broken property is reported like a crash, so libFuzzer saves the input (the scratch
 * directory is removed first: abort() skips atexit). */
#define FUZZ_CHECK(cond)                                                                \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond); \
            fuzz_dir_remove();                                                          \
            abort();                                                                    \
        }                                                                               \
    } while (0)

/* A refusal names its file once, first: "NAME: reason", never "NAME: NAME: reason" (a reader
 * and its caller both prefixing). The reason may quote the input, which may hold NAME. */
static inline int fuzz_named_once(const char *msg, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(msg, name, n) != 0) return 0;
    const char *rest = msg + n;
    while (*rest == ':' || *rest == ' ') rest++;
    return strncmp(rest, name, n) != 0;
}

/* fuzz_dir(tag)/name, remembered so that it is removed at exit. */
static inline const char *fuzz_path(const char *tag, const char *name)
{
    fuzz_scratch *s = fuzz_scratch_state();
    for (int i = 0; i < s->n_files; i++) {
        const char *slash = strrchr(s->files[i], '/');
        if (slash && !strcmp(slash + 1, name)) return s->files[i];
    }
    if (s->n_files == 8) abort();
    const char *dir = fuzz_dir(tag);
    char *p = s->files[s->n_files++];
    snprintf(p, sizeof s->files[0], "%s/%s", dir, name);
    return p;
}

/* Replaces the file at path with bytes[0..n). */
static inline void fuzz_write(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(bytes, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* The model of fuzz_checkpoint: every kind of tensor (biases, both stacks, a final norm)
 * at the smallest sizes, so that a whole model file is a few kilobytes. */
static inline qkv_transformer_config fuzz_small_config(void)
{
    qkv_transformer_config c = qkv_transformer_default_config();
    c.src_vocab = 6, c.tgt_vocab = 5;
    c.d_model = 4, c.heads = 2, c.ffn = 4, c.enc_layers = 1, c.dec_layers = 1, c.max_len = 4;
    c.bias = 1, c.final_norm = 1;
    return c;
}

/* The language model of fuzz_lm_model: learned positions, attention biases, a final norm and
 * an untied output, at the smallest sizes. */
static inline qkv_lm_config fuzz_lm_small_config(void)
{
    qkv_lm_config c = qkv_lm_default_config();
    c.vocab = 6, c.d_model = 4, c.heads = 2, c.ffn = 4, c.layers = 1, c.max_len = 4;
    c.bias = 1, c.final_norm = 1, c.learned_pos = 1, c.tie = 0;
    return c;
}

static inline void fuzz_put16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8);
}

static inline void fuzz_put32(unsigned char *p, uint32_t v)
{
    fuzz_put16(p, v & 0xffff), fuzz_put16(p + 2, v >> 16);
}

/* A stored zip of n (<= 8) entries with correct CRCs, into out (room for every entry and
 * 76 bytes + twice its name each): for the harnesses whose input is one entry of an
 * archive (fuzz_pytorch, fuzz_npz). */
static inline size_t fuzz_stored_zip(unsigned char *out, int n, const char *const *names,
                       const unsigned char *const *data, const size_t *len)
{
    size_t at = 0, offsets[8];
    for (int i = 0; i < n; i++) {
        const size_t nl = strlen(names[i]);
        const uint32_t crc = (uint32_t)crc32(0L, data[i], (uInt)len[i]);
        offsets[i] = at;
        memset(out + at, 0, 30);
        fuzz_put32(out + at, 0x04034b50u), fuzz_put32(out + at + 14, crc);
        fuzz_put32(out + at + 18, (uint32_t)len[i]);
        fuzz_put32(out + at + 22, (uint32_t)len[i]);
        fuzz_put16(out + at + 26, (unsigned)nl);
        memcpy(out + at + 30, names[i], nl);
        if (len[i]) memcpy(out + at + 30 + nl, data[i], len[i]);
        at += 30 + nl + len[i];
    }
    const size_t cd = at;
    for (int i = 0; i < n; i++) {
        const size_t nl = strlen(names[i]);
        memset(out + at, 0, 46);
        fuzz_put32(out + at, 0x02014b50u);
        fuzz_put32(out + at + 16, (uint32_t)crc32(0L, data[i], (uInt)len[i]));
        fuzz_put32(out + at + 20, (uint32_t)len[i]);
        fuzz_put32(out + at + 24, (uint32_t)len[i]);
        fuzz_put16(out + at + 28, (unsigned)nl), fuzz_put32(out + at + 42, (uint32_t)offsets[i]);
        memcpy(out + at + 46, names[i], nl);
        at += 46 + nl;
    }
    memset(out + at, 0, 22);
    fuzz_put32(out + at, 0x06054b50u);
    fuzz_put16(out + at + 8, (unsigned)n), fuzz_put16(out + at + 10, (unsigned)n);
    fuzz_put32(out + at + 12, (uint32_t)(at - cd)), fuzz_put32(out + at + 16, (uint32_t)cd);
    return at + 22;
}

#endif
