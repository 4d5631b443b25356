/* SPDX-License-Identifier: MIT */
/* Claiming an output directory for one run; see run_dir.h. */
#define _DEFAULT_SOURCE /* flock, dirfd */
#include "cli/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "qkv.h"

#define LOCK_NAME ".qkv.lock"

static const char *const transformer_files[] = {
    "config.json", "model.safetensors", "checkpoint.safetensors", "src_vocab.txt",
    "tgt_vocab.txt", "src_bpe.txt", "tgt_bpe.txt", "source.spm", "target.spm", "text.json",
    "train.json", "metrics.jsonl",
    "validation.json", "training.png", NULL};
static const char *const lm_files[] = {
    "config.json", "model.safetensors", "checkpoint.safetensors", "vocab.txt", "train.json",
    "metrics.jsonl", "training.png", NULL};
static const char *const model_files[] = {
    "config.json", "model.safetensors", "src_vocab.txt", "tgt_vocab.txt", "src_bpe.txt",
    "tgt_bpe.txt", "text.json", "train.json", "source.spm", "target.spm", "generation.json",
    NULL};

const run_kind RUN_TRANSFORMER = {"qkv-transformer", "a qkv train run", transformer_files, 1, 1};
const run_kind RUN_LM = {"qkv-lm", "a qkv train-lm run", lm_files, 0, 1};
const run_kind RUN_MODEL = {"qkv-transformer", "an encoder-decoder model directory",
                            model_files, 0, 0};

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

/* best/ or epoch-NNN/, which a run with validation or --keep-epochs writes. */
static int is_model_dir_name(const char *name)
{
    if (!strcmp(name, "best")) return 1;
    if (strncmp(name, "epoch-", 6) || !name[6]) return 0;
    for (const char *c = name + 6; *c; c++)
        if (*c < '0' || *c > '9') return 0;
    return 1;
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

static int is_kind_temporary(const run_kind *k, const char *name)
{
    return is_temporary_of(k->files, name);
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
    if (S_ISREG(type) && (is_kind_file(k, name) || is_kind_temporary(k, name))) return 1;
    return S_ISDIR(type) && k->model_dirs && is_model_dir_name(name);
}

/* ---- the lock -------------------------------------------------------------------------- */

/* The holder's line: "pid PID: the command line". */
static void write_holder(int fd, int argc, char **argv)
{
    char line[1024];
    int n = snprintf(line, sizeof line, "pid %ld:", (long)getpid());
    for (int i = 0; i < argc && n < (int)sizeof line - 1; i++)
        n += snprintf(line + n, sizeof line - (size_t)n, " %s", argv[i]);
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

static int take_lock_once(run_dir *rd, const char *path, const char *dir, int argc, char **argv)
{
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "qkv: %s: cannot open the directory's lock: %s\n", path,
                errno == ELOOP ? "it is a symbolic link" : strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        const int e = errno;
        char holder[1024] = "";
        ssize_t n = e == EWOULDBLOCK ? pread(fd, holder, sizeof holder - 1, 0) : -1;
        if (n > 0) {
            holder[n] = '\0';
            holder[strcspn(holder, "\n")] = '\0';
        }
        if (e == EWOULDBLOCK)
            fprintf(stderr, "qkv: %s is in use by another run (%s); wait for it to end, or "
                    "write to another directory\n", dir, n > 0 ? holder : "holder unknown");
        else
            fprintf(stderr, "qkv: %s: cannot lock: %s\n", path, strerror(e));
        close(fd);
        return -1;
    }
    write_holder(fd, argc, argv);
    rd->lock_fd = fd;
    return 0;
}

static int take_lock(run_dir *rd, const char *dir, int argc, char **argv)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, LOCK_NAME);
    for (int tries = 0;; tries++) {
        const int rc = take_lock_once(rd, path, dir, argc, argv);
        if (rc || still_linked(rd->lock_fd, path)) return rc;
        close(rd->lock_fd), rd->lock_fd = -1;
        if (tries == 100) {
            fprintf(stderr, "qkv: %s: the directory's lock keeps being replaced\n", path);
            return -1;
        }
    }
}

int run_dir_claim_writer(run_dir *rd, const char *dir, const run_kind *k, run_mode mode,
                         int writer, int argc, char **argv)
{
    return writer ? run_dir_claim(rd, dir, k, mode, argc, argv) : 0;
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

void run_dir_release(run_dir *rd)
{
    if (rd->lock_fd < 0) return;
    /* a run that wrote nothing (refused, or failed before its first file) leaves nothing;
     * the lock is unlinked while still held, so a run waiting for it finds it gone and makes
     * a new one (take_lock) */
    if (only_the_lock(rd->dir)) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", rd->dir, LOCK_NAME);
        unlink(path);
        if (rd->created) rmdir(rd->dir);
    }
    close(rd->lock_fd);
    rd->lock_fd = -1;
}

/* ---- what is there --------------------------------------------------------------------- */

/* Removes dir's temporaries (of any run's files) whose writer is gone (kill(pid, 0): no
 * such process). */
static void remove_stale_temporaries(const char *dir)
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
            fprintf(stderr, "qkv: removed %s/%s, left by a run that ended (pid %ld)\n", dir,
                    e->d_name, pid);
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
    char path[4096];
    qkv_error err = {0};
    cJSON *o = NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(format, 64, "?");
    if (qkv_json_load(&o, path, QKV_MAX_CONFIG_BYTES, &err)) return;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "format");
    if (cJSON_IsString(f)) snprintf(format, 64, "%s", f->valuestring);
    cJSON_Delete(o);
}

static int survey_dir(survey *s, const char *dir, const run_kind *k)
{
    memset(s, 0, sizeof *s);
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "qkv: %s: cannot read the directory: %s\n", dir, strerror(errno));
        return -1;
    }
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
    return 0;
}

/* Removes what a previous run of any kind left in dir (links themselves, never their
 * targets; in best/ and epoch-NNN/ only the files a model directory holds). */
static int remove_run_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int rc = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const char *name = e->d_name;
        struct stat st;
        if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) || !strcmp(name, LOCK_NAME))
            continue;
        if (S_ISDIR(st.st_mode) && is_model_dir_name(name)) {
            int sub = openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) {
                unlinkat(sub, "config.json", 0), unlinkat(sub, "model.safetensors", 0);
                close(sub);
            }
            unlinkat(dirfd(d), name, AT_REMOVEDIR); /* stays if someone put more there */
        } else if ((S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) &&
                   (is_any_run_file(name) || is_any_temporary(name) ||
                    (S_ISLNK(st.st_mode) && is_model_dir_name(name))) &&
                   unlinkat(dirfd(d), name, 0)) {
            fprintf(stderr, "qkv: %s/%s: cannot remove the previous run's file: %s\n", dir, name,
                    strerror(errno));
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

/* ---- claiming -------------------------------------------------------------------------- */

/* What config.json is, for a message: "format qkv-lm", "not a qkv configuration". */
static void describe_config(char *out, size_t cap, const survey *s)
{
    if (strcmp(s->format, "?")) snprintf(out, cap, "format %s", s->format);
    else snprintf(out, cap, "not a qkv configuration");
}

/* Whether the survey allows mode; prints why not. */
static int allowed(const survey *s, const char *dir, const run_kind *k, run_mode mode)
{
    const int other_kind = s->format[0] && strcmp(s->format, k->format);
    char config[96];
    describe_config(config, sizeof config, s);
    if (mode == RUN_RESUME) {
        if (other_kind) {
            fprintf(stderr, "qkv: --resume: %s/config.json is not %s's (%s): there is nothing "
                    "to resume\n", dir, k->what, config);
            return 0;
        }
        if (s->odd_checkpoint) {
            fprintf(stderr, "qkv: --resume: %s/checkpoint.safetensors is not a regular file (a "
                    "FIFO, a device or a directory): there is no checkpoint to continue\n", dir);
            return 0;
        }
        if (!s->checkpoint) {
            fprintf(stderr, "qkv: --resume: %s/checkpoint.safetensors is missing: there is no "
                    "run to continue (start one without --resume)\n", dir);
            return 0;
        }
        if (s->link[0]) {
            fprintf(stderr, "qkv: %s/%s is a symbolic link: a run writes its files itself, "
                    "never through a link (remove it)\n", dir, s->link);
            return 0;
        }
        return 1;
    }
    if (mode == RUN_OVERWRITE) return 1;
    if (!other_kind && (s->model || s->checkpoint)) {
        fprintf(stderr, "qkv: %s already holds %s; %s--overwrite to replace it\n", dir,
                s->model ? "a trained model (model.safetensors)"
                         : "a training run's checkpoint (checkpoint.safetensors)",
                k->resumable && s->checkpoint ? "continue it with --resume, or " : "");
        return 0;
    }
    if (other_kind || s->foreign[0]) {
        if (other_kind)
            fprintf(stderr, "qkv: %s holds a config.json that is not %s's (%s); ", dir, k->what,
                    config);
        else
            fprintf(stderr, "qkv: %s holds %s, which is not part of %s; ", dir, s->foreign,
                    k->what);
        fprintf(stderr, "use a new or empty directory, or --overwrite to write there anyway "
                "(files of other names are left alone)\n");
        return 0;
    }
    return 1;
}

int run_dir_claim(run_dir *rd, const char *dir, const run_kind *k, run_mode mode, int argc,
                  char **argv)
{
    struct stat st;
    rd->lock_fd = -1, rd->created = 0;
    if (snprintf(rd->dir, sizeof rd->dir, "%s", dir) >= (int)sizeof rd->dir) {
        fprintf(stderr, "qkv: %.200s...: the directory's name is too long\n", dir);
        return -1;
    }
    if (mode == RUN_RESUME && stat(dir, &st)) {
        fprintf(stderr, "qkv: --resume: %s: %s: there is no run to continue\n", dir,
                strerror(errno));
        return -1;
    }
    if (!mkdir(dir, 0777)) rd->created = 1;
    else if (errno != EEXIST) {
        fprintf(stderr, "qkv: %s: cannot create the directory: %s\n", dir, strerror(errno));
        return -1;
    }
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "qkv: %s: not a directory\n", dir);
        return -1;
    }
    if (take_lock(rd, dir, argc, argv)) return -1;
    remove_stale_temporaries(dir);
    char sub[4200];
    if (k->model_dirs) { /* best/ and epoch-NNN/ are written atomically too */
        DIR *d = opendir(dir);
        for (struct dirent *e; d && (e = readdir(d));)
            if (is_model_dir_name(e->d_name) &&
                (size_t)snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name) < sizeof sub &&
                !lstat(sub, &st) && S_ISDIR(st.st_mode))
                remove_stale_temporaries(sub);
        if (d) closedir(d);
    }
    survey s;
    if (survey_dir(&s, dir, k) || !allowed(&s, dir, k, mode) ||
        (mode != RUN_RESUME && s.entries && remove_run_files(dir))) {
        run_dir_release(rd);
        return -1;
    }
    return 0;
}

int run_dir_write(const char *path, const char *text)
{
    qkv_error err = {0};
    const void *chunks[1] = {text};
    const size_t lens[1] = {strlen(text)};
    if (!qkv_atomic_write(path, chunks, lens, 1, &err)) return 0;
    fprintf(stderr, "qkv: %s\n", err.msg);
    return -1;
}
