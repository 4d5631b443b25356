/* SPDX-License-Identifier: MIT */
/* An output directory belongs to one run (qkv train, train-lm, average, import): the command
 * claims it before writing anything, and nothing saved in it is lost by accident.
 *
 * Claiming a directory
 *   - creates it if needed and takes an exclusive lock on it (flock on DIR/.qkv.lock, which
 *     names the holder: its pid and command line) for as long as the run lasts: a second run
 *     on the same directory is refused, naming the first;
 *   - removes the temporaries (NAME.tmp.PID.K, the one name qkv gives them) that a killed run
 *     left, when PID is gone;
 *   - refuses what must not be written over: a directory holding anything but a run of the
 *     same kind (a file of another name, another kind's config.json, a symbolic link where a
 *     run writes a file) unless the caller overwrites, and a trained model or a run's
 *     checkpoint unless the caller resumes or overwrites;
 *   - resuming needs the same kind and a checkpoint; overwriting (or starting a new run over
 *     an unfinished one that has no checkpoint) removes the previous run's files first (every
 *     name a run of any kind writes, its best/ and epoch-NNN/ models, links themselves and
 *     never what they point at), so that no file of the old run (a checkpoint, a metrics
 *     log, a figure) is read as part of the new one or left beside it;
 *   - a run that ends without writing anything leaves nothing: releasing a directory that
 *     holds only the lock removes the lock, and the directory if the claim made it.
 * Files inside are then written atomically (qkv_atomic_write: a new file renamed into place,
 * which replaces a link rather than following it) or opened with O_NOFOLLOW. */
#ifndef QKV_CLI_RUN_DIR_H
#define QKV_CLI_RUN_DIR_H

/* What a kind of run writes in its directory. */
typedef struct {
    const char *format;        /* config.json's "format": "qkv-transformer", "qkv-lm" */
    const char *what;          /* in messages: "an encoder-decoder model" */
    const char *const *files;  /* the names it writes (NULL-terminated) */
    int model_dirs;            /* it also writes best/ and epoch-NNN/ (model directories) */
    int resumable;             /* it checkpoints and has --resume */
} run_kind;

extern const run_kind RUN_TRANSFORMER; /* qkv train */
extern const run_kind RUN_LM;          /* qkv train-lm */
extern const run_kind RUN_MODEL;       /* a model written whole: qkv average, an import */

typedef enum {
    RUN_NEW = 0,       /* refuse a trained model, a checkpoint or anything foreign */
    RUN_RESUME = 1,    /* needs a run of this kind with its checkpoint */
    RUN_OVERWRITE = 2, /* replace whatever run (or foreign file of a run's name) is there */
} run_mode;

/* A claimed directory: the lock, held until run_dir_release (or the process ends). */
typedef struct {
    int lock_fd;
    int created;    /* the claim made the directory */
    char dir[4096]; /* the directory claimed */
} run_dir;

/* Claims dir for a run of kind k in mode, recording argv (the command line, argc words) as
 * the lock's holder. Returns 0, or -1 after printing why (the directory is then released). */
int run_dir_claim(run_dir *rd, const char *dir, const run_kind *k, run_mode mode, int argc,
                  char **argv);
void run_dir_release(run_dir *rd);
/* run_dir_claim on the rank that writes the run (writer: rank 0 of an mpirun job, or the one
 * process); the other ranks claim nothing and get 0. Mode: a resumed run claims its directory
 * before reading it (RUN_RESUME), a new one before training (RUN_OVERWRITE or RUN_NEW). */
int run_dir_claim_writer(run_dir *rd, const char *dir, const run_kind *k, run_mode mode,
                         int writer, int argc, char **argv);

/* Writes text to path atomically (never through a link); -1 after printing why. */
int run_dir_write(const char *path, const char *text);

#endif
