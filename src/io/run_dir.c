/* SPDX-License-Identifier: MIT */
/* Claiming an output directory for one run; see qkv/run.h, "Run directories". */
#define _DEFAULT_SOURCE /* flock, dirfd */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "core/internal.h"

#define LOCK_NAME ".qkv.lock"

/* What a kind of run writes in its directory. */
typedef struct {
    const char *format;       /* config.json's "format": "qkv-transformer", "qkv-lm" */
    const char *what;         /* in messages: "a qkv train run" */
    const char *const *files; /* the names it writes (NULL-terminated) */
    int model_dirs;           /* it also writes best/, epoch-NNN/ and step-NNNNNNN/ */
    int resumable;            /* it checkpoints and can be resumed */
} run_kind;

static const char *const transformer_files[] = {
    "config.json", "model.safetensors", "checkpoint.safetensors", "src_vocab.txt",
    "tgt_vocab.txt", "src_bpe.txt", "tgt_bpe.txt", "source.spm", "target.spm", "text.json",
    "train.json", "metrics.jsonl", "validation.json", "training.png", NULL};
static const char *const lm_files[] = {
    "config.json", "model.safetensors", "checkpoint.safetensors", "vocab.txt", "train.json",
    "metrics.jsonl", "training.png", NULL};
static const char *const model_files[] = {
    "config.json", "model.safetensors", "src_vocab.txt", "tgt_vocab.txt", "src_bpe.txt",
    "tgt_bpe.txt", "text.json", "train.json", "source.spm", "target.spm", "generation.json",
    NULL};

static const run_kind KINDS[] = {
    [QKV_RUN_DIR_TRANSLATION] = {"qkv-transformer", "a qkv train run", transformer_files, 1, 1},
    [QKV_RUN_DIR_LM] = {"qkv-lm", "a qkv train-lm run", lm_files, 0, 1},
    [QKV_RUN_DIR_MODEL] = {"qkv-transformer", "an encoder-decoder model directory",
                           model_files, 0, 0},
};

struct qkv_run_dir {
    int lock_fd;
    int created;     /* the claim made the directory */
    char dir[4096];  /* the directory claimed */
    void (*notice)(const char *text, void *ctx);
    void *ctx;
};

static void notify(const qkv_run_dir *rd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void notify(const qkv_run_dir *rd, const char *fmt, ...)
{
    if (!rd->notice) return;
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    rd->notice(text, rd->ctx);
}

/* ---- names ----------------------------------------------------------------------------- */

/* NAME.tmp.PID.K, as qkv_atomic_write names its temporary files, or NAME.tmp.PID, as an
 * older qkv's safetensors writer named a checkpoint's (checkpoint-sized, and a killed run left
 * one as often as not): the PID, or 0. */
static long temporary_pid(const char *name)
{
    const char *t = NULL;
    for (const char *p = strstr(name, ".tmp."); p; p = strstr(p + 1, ".tmp.")) t = p;
    if (!t || t == name || t[5] < '0' || t[5] > '9') return 0;
    char *end;
    long pid = strtol(t + 5, &end, 10);
    if (end == t + 5 || (*end != '.' && *end) || pid <= 0) return 0;
    if (!*end) return pid;
    const char *k = end + 1;
    if (!*k) return 0;
    while (*k >= '0' && *k <= '9') k++;
    return *k ? 0 : pid;
}

static int digits_after(const char *name, const char *prefix)
{
    const size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) || !name[n]) return 0;
    for (const char *c = name + n; *c; c++)
        if (*c < '0' || *c > '9') return 0;
    return 1;
}

/* best/, epoch-NNN/ or step-NNNNNNN/, which a run with validation, --keep-epochs or --keep-last
 * writes. */
static int is_model_dir_name(const char *name)
{
    return !strcmp(name, "best") || digits_after(name, "epoch-") || digits_after(name, "step-");
}

static int is_kind_file(const run_kind *k, const char *name)
{
    for (const char *const *f = k->files; *f; f++)
        if (!strcmp(*f, name)) return 1;
    return 0;
}

/* Every name a run of any kind writes: what overwriting removes. */
static const char *const *const all_files[] = {transformer_files, lm_files, model_files};

static int is_any_run_file(const char *name)
{
    for (size_t i = 0; i < sizeof all_files / sizeof *all_files; i++)
        for (const char *const *f = all_files[i]; *f; f++)
            if (!strcmp(*f, name)) return 1;
    return 0;
}

/* Whether name is a temporary file of one of the files: NAME.tmp.PID.K (the name every
 * writer of qkv gives its temporaries), NAME.tmp.PID (an older qkv's checkpoints) or
 * NAME.tmp-XXXXXX (an older qkv's figures). */
static int is_temporary_of(const char *const *files, const char *name)
{
    for (const char *const *f = files; *f; f++) {
        const size_t n = strlen(*f);
        if (!strncmp(name, *f, n) && ((!strncmp(name + n, ".tmp.", 5) && temporary_pid(name)) ||
                                      !strncmp(name + n, ".tmp-", 5)))
            return 1;
    }
    return 0;
}

static int is_any_temporary(const char *name)
{
    for (size_t i = 0; i < sizeof all_files / sizeof *all_files; i++)
        if (is_temporary_of(all_files[i], name)) return 1;
    return 0;
}

/* Whether name is something a run of kind k writes (type: the entry's lstat mode). */
static int is_run_entry(const run_kind *k, const char *name, mode_t type)
{
    if (S_ISREG(type) && (is_kind_file(k, name) || is_temporary_of(k->files, name))) return 1;
    return S_ISDIR(type) && k->model_dirs && is_model_dir_name(name);
}

/* ---- the lock -------------------------------------------------------------------------- */

/* The holder's line: "pid PID: holder". */
static void write_holder(int fd, const char *holder)
{
    char line[1024];
    int n = snprintf(line, sizeof line, "pid %ld: %s", (long)getpid(), holder ? holder : "");
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (ftruncate(fd, 0) == 0 && pwrite(fd, line, (size_t)n, 0) == n) return;
    /* the holder's name is a courtesy to a second run; the lock itself is what matters */
}

/* Whether fd is the file at path (a releasing run unlinks the lock it holds: one taken on the
 * old file is no lock). */
static int still_linked(int fd, const char *path)
{
    struct stat a, b;
    return !fstat(fd, &a) && !lstat(path, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static qkv_status take_lock_once(qkv_run_dir *rd, const char *path, const char *holder,
                                 qkv_error *err)
{
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot open the directory's lock: %s", path,
                        errno == ELOOP ? "it is a symbolic link" : strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        const int e = errno;
        char who[1024] = "";
        ssize_t n = e == EWOULDBLOCK ? pread(fd, who, sizeof who - 1, 0) : -1;
        if (n > 0) {
            who[n] = '\0';
            who[strcspn(who, "\n")] = '\0';
        }
        close(fd);
        if (e == EWOULDBLOCK)
            return qkv_fail(err, QKV_ERR_IO, "%s is in use by another run (%s); wait for it to "
                            "end, or write to another directory", rd->dir,
                            n > 0 ? who : "holder unknown");
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot lock: %s", path, strerror(e));
    }
    write_holder(fd, holder);
    rd->lock_fd = fd;
    return QKV_OK;
}

static qkv_status take_lock(qkv_run_dir *rd, const char *holder, qkv_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", rd->dir, LOCK_NAME);
    for (int tries = 0;; tries++) {
        const qkv_status st = take_lock_once(rd, path, holder, err);
        if (st || still_linked(rd->lock_fd, path)) return st;
        close(rd->lock_fd), rd->lock_fd = -1;
        if (tries == 100)
            return qkv_fail(err, QKV_ERR_IO, "%s: the directory's lock keeps being replaced",
                            path);
    }
}

/* Whether dir holds nothing but the lock. */
static int only_the_lock(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int other = 0;
    for (struct dirent *e; !other && (e = readdir(d));)
        other = strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, LOCK_NAME);
    closedir(d);
    return !other;
}

void qkv_run_dir_release(qkv_run_dir *rd)
{
    if (!rd) return;
    if (rd->lock_fd >= 0) {
        /* a run that wrote nothing (refused, or failed before its first file) leaves nothing;
         * the lock is unlinked while still held, so a run waiting for it finds it gone and
         * makes a new one (take_lock) */
        if (only_the_lock(rd->dir)) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", rd->dir, LOCK_NAME);
            unlink(path);
            if (rd->created) rmdir(rd->dir);
        }
        close(rd->lock_fd);
    }
    free(rd);
}

/* ---- what is there --------------------------------------------------------------------- */

/* Removes dir's temporaries (of any run's files) whose writer is gone (kill(pid, 0): no
 * such process). */
static void remove_stale_temporaries(const qkv_run_dir *rd, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        const long pid = temporary_pid(e->d_name);
        struct stat st;
        if (!pid || pid == (long)getpid() || !is_any_temporary(e->d_name)) continue;
        if (!kill((pid_t)pid, 0) || errno != ESRCH) continue; /* alive, or not ours to tell */
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
            continue;
        if (!unlinkat(dirfd(d), e->d_name, 0))
            notify(rd, "removed %s/%s, left by a run that ended (pid %ld)", dir, e->d_name, pid);
    }
    closedir(d);
}

/* What a directory holds, as far as claiming it goes. */
typedef struct {
    char foreign[256];   /* the first entry that is not part of a run of the kind, or "" */
    char link[256];      /* the first symbolic link among the names a run writes, or "" */
    char format[64];     /* config.json's "format"; "" without a config.json, "?" if it is
                          * not a JSON object with a "format" */
    int model, checkpoint, entries;
    int odd_checkpoint; /* checkpoint.safetensors is there but is not a file (a FIFO, ...) */
} survey;

static void read_format(char format[64], const char *dir)
{
    char path[4200];
    qkv_error err = {0};
    cJSON *o = NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(format, 64, "?");
    if (qkv_json_load(&o, path, QKV_MAX_CONFIG_BYTES, &err)) return;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "format");
    if (cJSON_IsString(f)) snprintf(format, 64, "%s", f->valuestring);
    cJSON_Delete(o);
}

static qkv_status survey_dir(survey *s, const char *dir, const run_kind *k, qkv_error *err)
{
    memset(s, 0, sizeof *s);
    DIR *d = opendir(dir);
    if (!d)
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot read the directory: %s", dir,
                        strerror(errno));
    for (struct dirent *e; (e = readdir(d));) {
        const char *name = e->d_name;
        struct stat st;
        if (!strcmp(name, ".") || !strcmp(name, "..") || !strcmp(name, LOCK_NAME)) continue;
        s->entries++;
        if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW)) continue;
        const int ours = is_kind_file(k, name) || (k->model_dirs && is_model_dir_name(name));
        if (S_ISLNK(st.st_mode) && ours && !s->link[0]) snprintf(s->link, sizeof s->link, "%s", name);
        if (!is_run_entry(k, name, st.st_mode) && !s->foreign[0])
            snprintf(s->foreign, sizeof s->foreign, "%s", name);
        if (!strcmp(name, "checkpoint.safetensors") && !S_ISREG(st.st_mode) &&
            !S_ISLNK(st.st_mode))
            s->odd_checkpoint = 1;
        if (!S_ISREG(st.st_mode)) continue;
        if (!strcmp(name, "config.json")) read_format(s->format, dir);
        s->model |= !strcmp(name, "model.safetensors");
        s->checkpoint |= !strcmp(name, "checkpoint.safetensors");
    }
    closedir(d);
    return QKV_OK;
}

/* Removes what a previous run of any kind left in dir (links themselves, never their
 * targets; in the model directories only the files a model directory holds). */
static qkv_status remove_run_files(const char *dir, qkv_error *err)
{
    DIR *d = opendir(dir);
    if (!d) return qkv_fail(err, QKV_ERR_IO, "%s: cannot read the directory: %s", dir,
                            strerror(errno));
    qkv_status st = QKV_OK;
    for (struct dirent *e; (e = readdir(d));) {
        const char *name = e->d_name;
        struct stat sb;
        if (fstatat(dirfd(d), name, &sb, AT_SYMLINK_NOFOLLOW) || !strcmp(name, LOCK_NAME))
            continue;
        if (S_ISDIR(sb.st_mode) && is_model_dir_name(name)) {
            int sub = openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) {
                unlinkat(sub, "config.json", 0), unlinkat(sub, "model.safetensors", 0);
                close(sub);
            }
            unlinkat(dirfd(d), name, AT_REMOVEDIR); /* stays if someone put more there */
        } else if ((S_ISREG(sb.st_mode) || S_ISLNK(sb.st_mode)) &&
                   (is_any_run_file(name) || is_any_temporary(name) ||
                    (S_ISLNK(sb.st_mode) && is_model_dir_name(name))) &&
                   unlinkat(dirfd(d), name, 0) && !st) {
            st = qkv_fail(err, QKV_ERR_IO, "%s/%s: cannot remove the previous run's file: %s",
                          dir, name, strerror(errno));
        }
    }
    closedir(d);
    return st;
}

/* ---- claiming -------------------------------------------------------------------------- */

/* The words of a message for the caller's options: "--resume" or "resume=True". */
static const char *word_resume(qkv_naming n) { return n ? "resume=True" : "--resume"; }
static const char *word_overwrite(qkv_naming n) { return n ? "overwrite=True" : "--overwrite"; }

/* Whether the survey allows a resumed run; QKV_ERR_IO saying why not. */
static qkv_status allowed_resume(const survey *s, const char *dir, const run_kind *k,
                                 const char *config, qkv_naming n, qkv_error *err)
{
    const char *r = word_resume(n);
    if (s->format[0] && strcmp(s->format, k->format))
        return qkv_fail(err, QKV_ERR_IO, "%s: %s/config.json is not %s's (%s): there is "
                        "nothing to resume", r, dir, k->what, config);
    if (s->odd_checkpoint)
        return qkv_fail(err, QKV_ERR_IO, "%s: %s/checkpoint.safetensors is not a regular file "
                        "(a FIFO, a device or a directory): there is no checkpoint to continue",
                        r, dir);
    if (!s->checkpoint)
        return qkv_fail(err, QKV_ERR_IO, "%s: %s/checkpoint.safetensors is missing: there is "
                        "no checkpoint, so no run to continue (start one without %s)", r, dir, r);
    if (s->link[0])
        return qkv_fail(err, QKV_ERR_IO, "%s/%s is a symbolic link: a run writes its files "
                        "itself, never through a link (remove it)", dir, s->link);
    return QKV_OK;
}

/* Whether the survey allows mode; QKV_ERR_IO saying why not. */
static qkv_status allowed(const survey *s, const char *dir, const run_kind *k,
                          qkv_run_mode mode, qkv_naming n, qkv_error *err)
{
    const int other_kind = s->format[0] && strcmp(s->format, k->format);
    char config[96];
    if (strcmp(s->format, "?")) snprintf(config, sizeof config, "format %s", s->format);
    else snprintf(config, sizeof config, "not a qkv configuration");
    if (mode == QKV_RUN_RESUME) return allowed_resume(s, dir, k, config, n, err);
    if (mode == QKV_RUN_OVERWRITE) return QKV_OK;
    const char *ow = word_overwrite(n);
    if (!other_kind && (s->model || s->checkpoint)) {
        const char *what = s->model ? "a trained model (model.safetensors)"
                                    : "a training run's checkpoint (checkpoint.safetensors)";
        const int resumable = k->resumable && s->checkpoint;
        if (n == QKV_NAMING_KEYWORDS)
            return qkv_fail(err, QKV_ERR_IO, "%s already holds %s; %s%s replaces it", dir, what,
                            resumable ? "resume=True continues it, " : "", ow);
        return qkv_fail(err, QKV_ERR_IO, "%s already holds %s; %s%s to replace it", dir, what,
                        resumable ? "continue it with --resume, or " : "", ow);
    }
    if (other_kind)
        return qkv_fail(err, QKV_ERR_IO, "%s holds a config.json that is not %s's (%s); use a "
                        "new or empty directory, or %s to write there anyway (files of other "
                        "names are left alone)", dir, k->what, config, ow);
    if (s->foreign[0])
        return qkv_fail(err, QKV_ERR_IO, "%s holds %s, which is not part of %s; use a new or "
                        "empty directory, or %s to write there anyway (files of other names "
                        "are left alone)", dir, s->foreign, k->what, ow);
    return QKV_OK;
}

/* Makes dir (remembering that the claim did) unless it is there; QKV_ERR_IO otherwise. */
static qkv_status make_dir(qkv_run_dir *rd, const char *dir, qkv_run_mode mode,
                           qkv_naming n, qkv_error *err)
{
    struct stat st;
    if (mode == QKV_RUN_RESUME && stat(dir, &st))
        return qkv_fail(err, QKV_ERR_IO, "%s: %s: %s: there is no checkpoint, so no run to "
                        "continue",
                        word_resume(n), dir, strerror(errno));
    if (!mkdir(dir, 0777)) rd->created = 1;
    else if (errno != EEXIST)
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot create the directory: %s", dir,
                        strerror(errno));
    if (stat(dir, &st) || !S_ISDIR(st.st_mode))
        return qkv_fail(err, QKV_ERR_IO, "%s: not a directory", dir);
    return QKV_OK;
}

/* The stale temporaries of dir and of its model directories (written atomically too). */
static void remove_all_stale(const qkv_run_dir *rd, const char *dir, const run_kind *k)
{
    remove_stale_temporaries(rd, dir);
    if (!k->model_dirs) return;
    DIR *d = opendir(dir);
    char sub[4400];
    struct stat st;
    for (struct dirent *e; d && (e = readdir(d));)
        if (is_model_dir_name(e->d_name) &&
            (size_t)snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name) < sizeof sub &&
            !lstat(sub, &st) && S_ISDIR(st.st_mode))
            remove_stale_temporaries(rd, sub);
    if (d) closedir(d);
}

qkv_status qkv_run_dir_claim(qkv_run_dir **out, const char *dir, qkv_run_dir_kind kind,
                             qkv_run_mode mode, const char *holder, qkv_naming naming,
                             void (*notice)(const char *text, void *ctx), void *ctx,
                             qkv_error *err)
{
    *out = NULL;
    if ((unsigned)kind > QKV_RUN_DIR_MODEL || (unsigned)mode > QKV_RUN_OVERWRITE || !dir)
        return qkv_fail(err, QKV_ERR_ARG, "qkv_run_dir_claim: no such kind or mode, or no "
                        "directory");
    const run_kind *k = &KINDS[kind];
    qkv_run_dir *rd = calloc(1, sizeof *rd);
    if (!rd) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    rd->lock_fd = -1, rd->notice = notice, rd->ctx = ctx;
    if (snprintf(rd->dir, sizeof rd->dir, "%s", dir) >= (int)sizeof rd->dir) {
        free(rd);
        return qkv_fail(err, QKV_ERR_IO, "%.200s...: the directory's name is too long", dir);
    }
    qkv_status st = make_dir(rd, dir, mode, naming, err);
    if (!st) st = take_lock(rd, holder, err);
    if (!st) remove_all_stale(rd, dir, k);
    survey s;
    if (!st) st = survey_dir(&s, dir, k, err);
    if (!st) st = allowed(&s, dir, k, mode, naming, err);
    if (!st && mode != QKV_RUN_RESUME && s.entries) st = remove_run_files(dir, err);
    if (st) {
        if (rd->lock_fd >= 0) qkv_run_dir_release(rd);
        else free(rd);
        return st;
    }
    *out = rd;
    return QKV_OK;
}
