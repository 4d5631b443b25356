/* SPDX-License-Identifier: MIT */
/* The training runs behind qkv.train and qkv.train_lm, as `qkv train` and `qkv train-lm` run
 * them (src/cli/cmd_train.c, cmd_lm.c): read the corpus, make the tokenizer and the model (or
 * open the run being resumed), write the vocabularies and config.json, train with the GIL
 * released, and save. qkv/_train.py does the rest in Python: the options, their defaults and
 * checks, the run directory's rules and train.json.
 *
 * Between steps the library asks should_stop: with the GIL taken for a moment, Python's
 * signal handlers run there (Ctrl-C raises KeyboardInterrupt in the main thread), and an
 * exception from them or from the progress callback stops the run at that step, checkpointed
 * and resumable; the exception is raised once qkv_train has returned. */
#include <stdarg.h>
#include <string.h>

#include "module.h"

/* ---- the options, from the dict qkv/_train.py made -------------------------------------- */

typedef struct {
    PyObject *spec;
    int failed; /* a key was missing or of the wrong type (exception set) */
} reader;

static PyObject *item(reader *r, const char *key)
{
    PyObject *v = PyDict_GetItemString(r->spec, key); /* borrowed */
    if (!v && !r->failed) {
        PyErr_Format(PyExc_KeyError, "training option '%s' is missing", key);
        r->failed = 1;
    }
    return v;
}

static long long get_int(reader *r, const char *key)
{
    PyObject *v = item(r, key);
    if (!v || r->failed) return 0;
    const long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) r->failed = 1;
    if (!r->failed && (x < INT_MIN || x > INT_MAX) && strcmp(key, "seed") && strcmp(key, "steps")) {
        PyErr_Format(PyExc_ValueError, "training option '%s' is out of range: %lld", key, x);
        r->failed = 1;
    }
    return x;
}

static double get_float(reader *r, const char *key)
{
    PyObject *v = item(r, key);
    if (!v || r->failed) return 0.0;
    const double x = PyFloat_AsDouble(v);
    if (x == -1.0 && PyErr_Occurred()) r->failed = 1;
    return x;
}

/* A str option (valid while the spec lives), NULL when it is None. */
static const char *get_str(reader *r, const char *key)
{
    PyObject *v = item(r, key);
    if (!v || r->failed || v == Py_None) return NULL;
    const char *s = utf8_of(v, NULL, key);
    if (!s) r->failed = 1;
    return s;
}

/* ---- progress and interruption ---------------------------------------------------------- */

typedef struct {
    PyObject *progress;      /* the callable, or NULL */
    PyObject *exc[3];        /* an exception to raise when qkv_train returns (type, value,
                              * traceback; type NULL: none) */
    PyThreadState *released; /* the calling thread's state while the GIL is released */
} hooks;

/* Keeps the exception now set (the first one) for after the run. */
static void keep_exception(hooks *h)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (!h->exc[0]) {
        h->exc[0] = type, h->exc[1] = value, h->exc[2] = tb;
    } else {
        Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(tb);
    }
}

/* Raises the kept exception, if any (1), with the GIL held. */
static int raise_kept(hooks *h)
{
    if (!h->exc[0]) return 0;
    PyErr_Restore(h->exc[0], h->exc[1], h->exc[2]);
    return 1;
}

/* Fills err as the library does and returns status. */
static qkv_status fail_msg(qkv_error *err, qkv_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->code = status;
    return status;
}

static int should_stop(void *ctx)
{
    hooks *h = ctx;
    PyEval_RestoreThread(h->released);
    if (!h->exc[0] && PyErr_CheckSignals()) keep_exception(h);
    const int stop = h->exc[0] != NULL;
    h->released = PyEval_SaveThread();
    return stop;
}

/* Calls the progress callable with a dict built from fmt and its values (the GIL taken). */
static void report(hooks *h, const char *fmt, ...)
{
    if (!h->progress || h->exc[0]) return;
    PyEval_RestoreThread(h->released);
    va_list ap;
    va_start(ap, fmt);
    PyObject *d = Py_VaBuildValue(fmt, ap);
    va_end(ap);
    PyObject *res = d ? PyObject_CallFunctionObjArgs(h->progress, d, NULL) : NULL;
    if (!res) keep_exception(h);
    Py_XDECREF(res), Py_XDECREF(d);
    h->released = PyEval_SaveThread();
}

static void transformer_progress(const qkv_train_progress *p, void *ctx)
{
    report(ctx, "{s:i,s:i,s:i,s:i,s:L,s:d,s:d,s:d,s:d,s:d,s:O,s:O,s:d,s:d,s:d,s:d,s:O,s:O}",
           "epoch", p->epoch, "epochs", p->epochs, "batch", p->batch, "batches", p->batches,
           "step", (long long)p->step, "loss", p->loss, "d2l_loss", p->d2l_loss, "tokens_per_s",
           p->tokens_per_s, "grad_norm", p->grad_norm, "lr", p->lr, "end_of_epoch",
           p->end_of_epoch ? Py_True : Py_False, "validated", p->validated ? Py_True : Py_False,
           "val_loss", p->val_loss, "bleu", p->bleu, "sacrebleu", p->sacrebleu, "chrf", p->chrf,
           "best", p->best ? Py_True : Py_False, "stopping", p->stopping ? Py_True : Py_False);
}

static void lm_progress(const qkv_lm_train_progress *p, void *ctx)
{
    report(ctx, "{s:L,s:L,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:O}", "step", (long long)p->step,
           "steps", (long long)p->steps, "epoch", p->epoch, "loss", p->loss, "val_loss",
           p->val_loss, "tokens_per_s", p->tokens_per_s, "grad_norm", p->grad_norm, "lr", p->lr,
           "elapsed_s", p->elapsed_s, "report", p->report ? Py_True : Py_False);
}

/* Calls ready(info) before training starts (qkv/_train.py writes train.json there). */
static int call_ready(PyObject *ready, PyObject *info)
{
    if (!info) return -1;
    PyObject *res = ready == Py_None ? (Py_INCREF(Py_None), Py_None)
                                     : PyObject_CallFunctionObjArgs(ready, info, NULL);
    Py_DECREF(info);
    Py_XDECREF(res);
    return res ? 0 : -1;
}

/* ---- the encoder-decoder: qkv train ----------------------------------------------------- */

/* What the encoder-decoder run reads, from the spec. */
typedef struct {
    const char *out, *data, *tgt, *tokenizer, *spm_type, *valid, *valid_src, *valid_tgt;
    int num_steps, num_examples, min_freq, vocab_size, joint, valid_bleu, resume;
    qkv_precision precision;
} run_spec;

/* Writes text to dir/name atomically. */
static qkv_status write_text(const char *dir, const char *name, const char *text,
                             qkv_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const void *chunks[1] = {text};
    const size_t lens[1] = {strlen(text)};
    return qkv_atomic_write(path, chunks, lens, 1, err);
}

/* The tokenizer of a new model, learned from the corpus as `qkv train` learns it, with its
 * files written to out (vocabularies, subword encodings or SentencePiece models, text.json). */
static qkv_status new_tokenizer(qkv_tokenizer *tok, const qkv_corpus *c, const run_spec *r,
                                qkv_error *err)
{
    const qkv_sentences *both[2] = {&c->source, &c->target};
    const int joint = r->joint, n = joint ? 2 : 1;
    char src[4096], tgt[4096];
    qkv_status s;
    if (!strcmp(r->tokenizer, "spm")) {
        snprintf(src, sizeof src, "%s/source.spm", r->out);
        snprintf(tgt, sizeof tgt, "%s/target.spm", r->out);
        const qkv_spm_type kind = !strcmp(r->spm_type, "bpe") ? QKV_SPM_BPE : QKV_SPM_UNIGRAM;
        if ((s = qkv_spm_train(both, n, src, r->vocab_size, kind, err)) ||
            (s = qkv_spm_train(joint ? both : both + 1, n, tgt, r->vocab_size, kind, err)) ||
            (s = qkv_spm_load(&tok->src_spm, src, err)) ||
            (s = qkv_spm_load(&tok->tgt_spm, tgt, err)) ||
            (s = qkv_spm_vocab(&tok->src, tok->src_spm, src, err)) ||
            (s = qkv_spm_vocab(&tok->tgt, tok->tgt_spm, tgt, err)))
            return s;
        tok->kind = QKV_TOKENIZER_SPM, tok->keep_case = 1;
        s = write_text(r->out, "text.json", "{\"tokenizer\": \"spm\", \"source_spm\": "
                       "\"source.spm\", \"target_spm\": \"target.spm\", \"case\": \"keep\"}\n", err);
    } else if (!strcmp(r->tokenizer, "bpe")) {
        if ((s = qkv_bpe_learn(&tok->src_bpe, both, n, r->vocab_size, err)) ||
            (s = qkv_bpe_learn(&tok->tgt_bpe, joint ? both : both + 1, n, r->vocab_size, err)) ||
            (s = qkv_bpe_vocab(&tok->src, &tok->src_bpe, err)) ||
            (s = qkv_bpe_vocab(&tok->tgt, &tok->tgt_bpe, err)))
            return s;
        tok->kind = QKV_TOKENIZER_BPE, tok->keep_case = 1;
        snprintf(src, sizeof src, "%s/src_bpe.txt", r->out);
        snprintf(tgt, sizeof tgt, "%s/tgt_bpe.txt", r->out);
        if ((s = qkv_bpe_save(&tok->src_bpe, src, err)) ||
            (s = qkv_bpe_save(&tok->tgt_bpe, tgt, err)))
            return s;
        s = write_text(r->out, "text.json", joint
                       ? "{\"tokenizer\": \"bpe\", \"joint\": true, \"case\": \"keep\"}\n"
                       : "{\"tokenizer\": \"bpe\", \"joint\": false, \"case\": \"keep\"}\n", err);
    } else {
        if ((s = qkv_vocab_build(&tok->src, c->source.tokens, c->source.n_tokens, r->min_freq,
                                 err)) ||
            (s = qkv_vocab_build(&tok->tgt, c->target.tokens, c->target.n_tokens, r->min_freq,
                                 err)))
            return s;
        if (tok->src.size <= QKV_N_RESERVED || tok->tgt.size <= QKV_N_RESERVED)
            return fail_msg(err, QKV_ERR_ARG, "no %s word occurs min_freq %d times: its "
                                "vocabulary would be the reserved tokens alone; lower min_freq",
                                tok->src.size <= QKV_N_RESERVED ? "source" : "target",
                                r->min_freq);
    }
    if (s) return s;
    snprintf(src, sizeof src, "%s/src_vocab.txt", r->out);
    snprintf(tgt, sizeof tgt, "%s/tgt_vocab.txt", r->out);
    if ((s = qkv_vocab_save(&tok->src, src, err))) return s;
    return qkv_vocab_save(&tok->tgt, tgt, err);
}

/* d2l's build_array_nmt of sentence pairs (the model's tokens) into bufs[0..4). */
static qkv_status dataset_of(qkv_dataset *d, int **bufs, const qkv_sentences *src,
                             const qkv_sentences *tgt, const qkv_tokenizer *tok, int T,
                             qkv_error *err)
{
    const size_t n = (size_t)src->count;
    bufs[0] = malloc((n ? n : 1) * T * sizeof(int)), bufs[1] = malloc((n ? n : 1) * sizeof(int));
    bufs[2] = malloc((n ? n : 1) * T * sizeof(int)), bufs[3] = malloc((n ? n : 1) * sizeof(int));
    if (!bufs[0] || !bufs[1] || !bufs[2] || !bufs[3])
        return fail_msg(err, QKV_ERR_NOMEM, "out of memory for %zu pairs", n);
    qkv_status s = qkv_sentences_encode(bufs[0], bufs[1], src, &tok->src, T, err);
    if (!s) s = qkv_sentences_encode(bufs[2], bufs[3], tgt, &tok->tgt, T, err);
    *d = (qkv_dataset){(int)n, T, bufs[0], bufs[1], bufs[2], bufs[3]};
    return s;
}

/* Replaces word sentences by the model's tokens on one side. */
static qkv_status to_tokens(const qkv_tokenizer *tok, qkv_sentences *s, int target,
                            qkv_error *err)
{
    qkv_sentences tokens;
    const qkv_status st = qkv_tokenizer_tokens(tok, &tokens, s, target, err);
    if (st) return st;
    qkv_sentences_free(s);
    *s = tokens;
    return QKV_OK;
}

/* The lines of a file (the target column of a TSV file when tsv): the references as
 * written, for sacreBLEU. *lines points into *text; both the caller's to free. */
static qkv_status reference_lines(const char *path, int tsv, int n, char ***lines, char **text,
                                  qkv_error *err)
{
    size_t len;
    qkv_status s = qkv_read_file(path, QKV_MAX_TEXT_BYTES, text, &len, err);
    if (s) return s;
    if (!(*lines = calloc((size_t)n + 1, sizeof **lines)))
        return fail_msg(err, QKV_ERR_NOMEM, "out of memory for %d references", n);
    char *at = *text;
    for (int i = 0; i < n; i++) {
        char *end = at ? strchr(at, '\n') : NULL;
        if (end) *end = '\0';
        if (at && end > at && end[-1] == '\r') end[-1] = '\0';
        char *line = at ? at : "";
        if (tsv && at) {
            char *tab = strchr(line, '\t');
            line = tab ? tab + 1 : line;
            char *tab2 = strchr(line, '\t');
            if (tab2) *tab2 = '\0';
        }
        (*lines)[i] = line;
        at = end ? end + 1 : NULL;
    }
    return QKV_OK;
}

static qkv_status read_corpus(qkv_corpus *c, const char *data, const char *tgt, int n, int raw,
                              int nfc, qkv_error *err)
{
    qkv_status s = tgt ? (raw ? qkv_corpus_read_aligned_raw : qkv_corpus_read_aligned)(
                             c, data, tgt, n, err)
                       : (raw ? qkv_corpus_read_tsv_raw : qkv_corpus_read_tsv)(c, data, n, err);
    if (!s && nfc) s = qkv_corpus_nfc(c, err);
    return s;
}

/* The run: like cmd_train.c's run(), without printing. */
static qkv_status transformer_run(const run_spec *r, qkv_transformer_config *cfg,
                                  qkv_train_options *o, hooks *h, PyObject *ready,
                                  qkv_error *err)
{
    qkv_corpus corpus = {0}, held = {0};
    qkv_sentences held_tgt = {0};
    qkv_tokenizer tok = {0};
    qkv_transformer *m = NULL;
    char *ref_text = NULL, **refs = NULL, *json = NULL, path[4096];
    int *bufs[8] = {0};
    qkv_status s = QKV_OK;
    const int spm = !strcmp(r->tokenizer, "spm"), bpe = !strcmp(r->tokenizer, "bpe");
    if (r->resume) { /* the run's tokenizer decides how its text is read */
        snprintf(path, sizeof path, "%s/config.json", r->out);
        if ((s = qkv_read_file(path, QKV_MAX_CONFIG_BYTES, &json, NULL, err)) ||
            (s = qkv_config_from_json(cfg, json, path, err)) ||
            (s = qkv_tokenizer_load(&tok, r->out, err)))
            goto done;
    }
    /* SentencePiece and (new) byte-pair models read raw text; byte-pair models in NFC */
    const int raw = spm || (bpe && (!r->resume || tok.keep_case)), nfc = bpe && raw;
    if ((s = read_corpus(&corpus, r->data, r->tgt, r->num_examples, raw, nfc, err))) goto done;
    if ((r->valid || r->valid_src) &&
        (s = read_corpus(&held, r->valid ? r->valid : r->valid_src, r->valid ? NULL : r->valid_tgt,
                         0, raw, nfc, err)))
        goto done;
    if (!r->resume) {
        if ((s = new_tokenizer(&tok, &corpus, r, err))) goto done;
        cfg->src_vocab = tok.src.size, cfg->tgt_vocab = tok.tgt.size;
        if (cfg->tie == QKV_TIE_ALL && (cfg->src_vocab != cfg->tgt_vocab || ((spm || bpe) && !r->joint))) {
            s = fail_msg(err, QKV_ERR_ARG, "tie 'all' needs one vocabulary for both languages "
                             "(these have %d and %d tokens); use tie 'output'%s", cfg->src_vocab,
                             cfg->tgt_vocab, spm || bpe ? " or joint_bpe" : "");
            goto done;
        }
    }
    if ((s = qkv_transformer_create(&m, cfg, o->seed, err))) goto done;
    if (!r->resume) {
        free(json), json = NULL;
        if ((s = qkv_config_to_json(qkv_transformer_get_config(m), &json, err)) ||
            (s = write_text(r->out, "config.json", json, err)))
            goto done;
    }
    if (held.source.count && r->valid_bleu) {
        o->valid_bleu = 1, o->valid_tokenizer = &tok, o->valid_references = &held.target;
        if ((s = reference_lines(r->valid ? r->valid : r->valid_tgt, r->valid != NULL,
                                 held.target.count, &refs, &ref_text, err)))
            goto done;
        o->valid_reference_text = (const char *const *)refs;
    }
    qkv_dataset ds, vs;
    if ((s = to_tokens(&tok, &corpus.source, 0, err)) ||
        (s = to_tokens(&tok, &corpus.target, 1, err)) ||
        (s = dataset_of(&ds, bufs, &corpus.source, &corpus.target, &tok, r->num_steps, err)))
        goto done;
    if (held.source.count) {
        if ((s = to_tokens(&tok, &held.source, 0, err)) ||
            (s = qkv_tokenizer_tokens(&tok, &held_tgt, &held.target, 1, err)) ||
            (s = dataset_of(&vs, bufs + 4, &held.source, &held_tgt, &tok, r->num_steps, err)))
            goto done;
        o->valid = &vs;
    }
    if ((s = qkv_transformer_set_precision(m, r->precision, err))) goto done;
    PyEval_RestoreThread(h->released);
    const int failed = call_ready(ready, Py_BuildValue(
        "{s:i,s:i,s:i,s:n}", "pairs", ds.n, "src_vocab", tok.src.size, "tgt_vocab", tok.tgt.size,
        "parameters", (Py_ssize_t)qkv_transformer_num_params(m)));
    if (failed) keep_exception(h);
    h->released = PyEval_SaveThread();
    if (failed) goto done;
    o->progress = transformer_progress, o->progress_ctx = h;
    o->should_stop = should_stop, o->should_stop_ctx = h;
    s = qkv_train(m, &ds, o, err);
done:
    for (int i = 0; i < 8; i++) free(bufs[i]);
    qkv_corpus_free(&corpus), qkv_corpus_free(&held);
    qkv_sentences_free(&held_tgt);
    qkv_tokenizer_free(&tok);
    qkv_transformer_free(m);
    free(refs), free(ref_text), free(json);
    return s;
}

/* train_transformer(spec, progress, ready): qkv train's run as spec says. */
static PyObject *train_transformer(PyObject *module, PyObject *args)
{
    PyObject *spec, *progress, *ready;
    if (!PyArg_ParseTuple(args, "O!OO", &PyDict_Type, &spec, &progress, &ready)) return NULL;
    reader rd = {spec, 0};
    run_spec r = {0};
    r.out = get_str(&rd, "out"), r.data = get_str(&rd, "data"), r.tgt = get_str(&rd, "tgt");
    r.tokenizer = get_str(&rd, "tokenizer"), r.spm_type = get_str(&rd, "spm_type");
    r.valid = get_str(&rd, "valid"), r.valid_src = get_str(&rd, "valid_src");
    r.valid_tgt = get_str(&rd, "valid_tgt");
    r.num_steps = (int)get_int(&rd, "num_steps"), r.num_examples = (int)get_int(&rd, "num_examples");
    r.min_freq = (int)get_int(&rd, "min_freq"), r.vocab_size = (int)get_int(&rd, "vocab_size");
    r.joint = (int)get_int(&rd, "joint_bpe"), r.valid_bleu = (int)get_int(&rd, "valid_bleu");
    r.resume = (int)get_int(&rd, "resume");
    const char *precision = get_str(&rd, "precision"), *act = get_str(&rd, "act"),
               *tie = get_str(&rd, "tie"), *loss = get_str(&rd, "loss"),
               *schedule = get_str(&rd, "schedule");
    qkv_transformer_config cfg = qkv_transformer_default_config();
    cfg.d_model = (int)get_int(&rd, "d_model"), cfg.heads = (int)get_int(&rd, "heads");
    cfg.ffn = (int)get_int(&rd, "ffn"), cfg.enc_layers = (int)get_int(&rd, "enc_layers");
    cfg.dec_layers = (int)get_int(&rd, "dec_layers"), cfg.dropout = (float)get_float(&rd, "dropout");
    cfg.max_len = (int)get_int(&rd, "max_len"), cfg.bias = (int)get_int(&rd, "bias");
    cfg.pre_norm = (int)get_int(&rd, "pre_norm"), cfg.final_norm = (int)get_int(&rd, "final_norm");
    cfg.learned_pos = (int)get_int(&rd, "learned_pos");
    qkv_train_options o = qkv_train_default_options();
    o.out_dir = r.out;
    o.batch = (int)get_int(&rd, "batch"), o.batch_tokens = (int)get_int(&rd, "batch_tokens");
    o.epochs = (int)get_int(&rd, "epochs"), o.lr = (float)get_float(&rd, "lr");
    o.beta1 = (float)get_float(&rd, "beta1"), o.beta2 = (float)get_float(&rd, "beta2");
    o.adam_eps = (float)get_float(&rd, "adam_eps");
    o.weight_decay = (float)get_float(&rd, "weight_decay"), o.clip = (float)get_float(&rd, "clip");
    o.label_smoothing = (float)get_float(&rd, "label_smoothing");
    o.seed = (uint64_t)get_int(&rd, "seed"), o.resume = r.resume;
    o.checkpoint_every = (int)get_int(&rd, "checkpoint_every");
    o.skip_nonfinite = (int)get_int(&rd, "skip_nonfinite");
    o.stop_after_steps = (int)get_int(&rd, "stop_after_steps");
    o.warmup = (int)get_int(&rd, "warmup"), o.lr_factor = (float)get_float(&rd, "lr_factor");
    o.minutes = get_float(&rd, "minutes"), o.patience = (int)get_int(&rd, "patience");
    o.keep_epochs = (int)get_int(&rd, "keep_epochs");
    const int threads = (int)get_int(&rd, "threads");
    if (rd.failed) return NULL;
    qkv_error err = {0};
    qkv_status s = qkv_precision_parse(&r.precision, precision ? precision : "", &err);
    if (s) return raise_qkv(state_of(module), s, &err);
    cfg.act = !strcmp(act, "gelu") ? QKV_ACT_GELU : !strcmp(act, "silu") ? QKV_ACT_SILU : QKV_ACT_RELU;
    cfg.tie = !strcmp(tie, "all") ? QKV_TIE_ALL : !strcmp(tie, "output") ? QKV_TIE_OUTPUT : QKV_TIE_NONE;
    o.d2l_loss_scale = !strcmp(loss, "d2l");
    o.schedule = !strcmp(schedule, "noam") ? QKV_LR_NOAM : QKV_LR_CONSTANT;
    hooks h = {progress == Py_None ? NULL : progress, {NULL, NULL, NULL}, NULL};
    const int use = threads > 0 ? threads : state_of(module)->threads;
    h.released = PyEval_SaveThread();
    if (use > 0) qkv_set_threads(use);
    s = transformer_run(&r, &cfg, &o, &h, ready, &err);
    PyEval_RestoreThread(h.released);
    if (raise_kept(&h)) return NULL;
    if (s) return raise_qkv(state_of(module), s, &err);
    Py_RETURN_NONE;
}

/* ---- the language model: qkv train-lm --------------------------------------------------- */

/* What the language model's run reads, from the spec. */
typedef struct {
    const char *out, *data;
    int byte_level;      /* a vocabulary of the 256 bytes, not of the text's characters */
    double val_fraction; /* the end of the text held out */
    qkv_precision precision;
} lm_spec;

/* The language model's vocabulary and model: the run's own when resuming (its parameters come
 * from the checkpoint), or new ones from the text, written to out. */
static qkv_status lm_model(qkv_lm **m, qkv_vocab *vocab, qkv_lm_config *cfg, const lm_spec *r,
                           const qkv_lm_train_options *o, const char *text, size_t len,
                           qkv_error *err)
{
    char path[4096], cpath[4096], *json = NULL;
    qkv_status s;
    snprintf(path, sizeof path, "%s/vocab.txt", r->out);
    snprintf(cpath, sizeof cpath, "%s/config.json", r->out);
    if (o->resume) {
        if ((s = qkv_read_file(cpath, QKV_MAX_CONFIG_BYTES, &json, NULL, err)) ||
            (s = qkv_lm_config_from_json(cfg, json, cpath, err)) ||
            (s = qkv_vocab_load(vocab, path, err)))
            goto done;
        if (vocab->size != cfg->vocab) {
            s = fail_msg(err, QKV_ERR_FORMAT, "%s: the vocabulary has %d tokens but the model "
                         "was built for %d", path, vocab->size, cfg->vocab);
            goto done;
        }
        s = qkv_lm_create(m, cfg, o->seed, err);
        goto done;
    }
    if ((s = qkv_lm_vocab_build(vocab, text, len, r->byte_level, err))) goto done;
    cfg->vocab = vocab->size;
    if ((s = qkv_lm_create(m, cfg, o->seed, err)) || (s = qkv_vocab_save(vocab, path, err)) ||
        (s = qkv_lm_config_to_json(cfg, &json, err)))
        goto done;
    s = write_text(r->out, "config.json", json, err);
done:
    free(json);
    return s;
}

/* The run: like cmd_lm.c's run(), without printing: the text, the model, the held-out end,
 * training. */
static qkv_status lm_run(const lm_spec *r, qkv_lm_config *cfg, qkv_lm_train_options *o,
                         hooks *h, PyObject *ready, qkv_error *err)
{
    qkv_lm *m = NULL;
    qkv_vocab vocab = {0};
    char *text = NULL;
    int *ids = NULL;
    size_t len = 0, n = 0, unknown = 0;
    qkv_status s;
    if ((s = qkv_read_file(r->data, QKV_MAX_TEXT_BYTES, &text, &len, err))) goto done;
    if (!len) {
        s = fail_msg(err, QKV_ERR_ARG, "%s is empty: there is nothing to learn from", r->data);
        goto done;
    }
    if ((s = lm_model(&m, &vocab, cfg, r, o, text, len, err))) goto done;
    if (!(ids = malloc(len * sizeof *ids))) {
        s = fail_msg(err, QKV_ERR_NOMEM, "out of memory for %zu tokens", len);
        goto done;
    }
    if ((s = qkv_lm_encode(ids, &n, &unknown, &vocab, text, len, err))) goto done;
    /* the last val_fraction of the tokens is held out, as train-lm holds it out */
    const size_t n_val = (size_t)((double)n * (double)(float)r->val_fraction), n_train = n - n_val;
    if (n_train < (size_t)o->context + 1) {
        s = fail_msg(err, QKV_ERR_ARG, "%s: %zu training tokens, but a context of %d needs at "
                     "least %d", r->data, n_train, o->context, o->context + 1);
        goto done;
    }
    if ((s = qkv_lm_set_precision(m, r->precision, err))) goto done;
    PyEval_RestoreThread(h->released);
    const int failed = call_ready(ready, Py_BuildValue(
        "{s:n,s:n,s:i,s:n,s:n}", "train_tokens", (Py_ssize_t)n_train, "val_tokens",
        (Py_ssize_t)n_val, "vocab", vocab.size, "parameters", (Py_ssize_t)qkv_lm_num_params(m),
        "unknown", (Py_ssize_t)unknown));
    if (failed) keep_exception(h);
    h->released = PyEval_SaveThread();
    if (failed) goto done;
    o->progress = lm_progress, o->progress_ctx = h;
    o->should_stop = should_stop, o->should_stop_ctx = h;
    s = qkv_lm_train(m, ids, n_train, ids + n_train, n_val, o, err);
done:
    free(text), free(ids);
    qkv_vocab_free(&vocab);
    qkv_lm_free(m);
    return s;
}

/* train_lm(spec, progress, ready): qkv train-lm's run as spec says. */
static PyObject *train_lm(PyObject *module, PyObject *args)
{
    PyObject *spec, *progress, *ready;
    if (!PyArg_ParseTuple(args, "O!OO", &PyDict_Type, &spec, &progress, &ready)) return NULL;
    reader rd = {spec, 0};
    lm_spec r = {get_str(&rd, "out"), get_str(&rd, "data"), 0, 0.0, QKV_PRECISION_FP32};
    const char *vocab_kind = get_str(&rd, "vocab"), *attention = get_str(&rd, "attention"),
               *act = get_str(&rd, "act"), *precision = get_str(&rd, "precision");
    qkv_lm_config cfg = qkv_lm_default_config();
    cfg.d_model = (int)get_int(&rd, "d_model"), cfg.heads = (int)get_int(&rd, "heads");
    cfg.ffn = (int)get_int(&rd, "ffn"), cfg.layers = (int)get_int(&rd, "layers");
    cfg.dropout = (float)get_float(&rd, "dropout"), cfg.pre_norm = (int)get_int(&rd, "pre_norm");
    cfg.tie = (int)get_int(&rd, "tie"), cfg.learned_pos = (int)get_int(&rd, "learned_pos");
    cfg.bias = !get_int(&rd, "no_bias");
    qkv_lm_train_options o = qkv_lm_train_default_options();
    o.out_dir = r.out;
    o.context = (int)get_int(&rd, "context"), o.batch = (int)get_int(&rd, "batch");
    o.lr = (float)get_float(&rd, "lr"), o.warmup = (int)get_int(&rd, "warmup");
    o.cosine = (int)get_int(&rd, "cosine"), o.beta2 = (float)get_float(&rd, "beta2");
    o.weight_decay = (float)get_float(&rd, "weight_decay"), o.clip = (float)get_float(&rd, "clip");
    o.steps = get_int(&rd, "steps"), o.minutes = get_float(&rd, "minutes");
    o.eval_every = (int)get_int(&rd, "eval_every"), o.eval_tokens = (int)get_int(&rd, "eval_tokens");
    o.log_every = (int)get_int(&rd, "log_every"), o.seed = (uint64_t)get_int(&rd, "seed");
    o.resume = (int)get_int(&rd, "resume");
    o.stop_after_steps = get_int(&rd, "stop_after_steps");
    r.val_fraction = get_float(&rd, "val_fraction");
    const int threads = (int)get_int(&rd, "threads");
    if (rd.failed) return NULL;
    module_state *st = state_of(module);
    qkv_error err = {0};
    qkv_status s = qkv_precision_parse(&r.precision, precision ? precision : "", &err);
    if (s) return raise_qkv(st, s, &err);
    cfg.attention = !strcmp(attention, "linear") ? QKV_ATTENTION_LINEAR : QKV_ATTENTION_SOFTMAX;
    cfg.act = !strcmp(act, "gelu") ? QKV_ACT_GELU : !strcmp(act, "silu") ? QKV_ACT_SILU : QKV_ACT_RELU;
    cfg.final_norm = cfg.pre_norm, cfg.max_len = o.context;
    r.byte_level = !strcmp(vocab_kind, "byte");
    hooks h = {progress == Py_None ? NULL : progress, {NULL, NULL, NULL}, NULL};
    const int use = threads > 0 ? threads : st->threads;
    h.released = PyEval_SaveThread();
    if (use > 0) qkv_set_threads(use);
    s = lm_run(&r, &cfg, &o, &h, ready, &err);
    PyEval_RestoreThread(h.released);
    if (raise_kept(&h)) return NULL;
    if (s) return raise_qkv(st, s, &err);
    Py_RETURN_NONE;
}

PyMethodDef train_methods[] = {
    {"train_transformer", train_transformer, METH_VARARGS,
     "train_transformer(spec, progress, ready): qkv train's run (use qkv.train)."},
    {"train_lm", train_lm, METH_VARARGS,
     "train_lm(spec, progress, ready): qkv train-lm's run (use qkv.train_lm)."},
    {NULL, NULL, 0, NULL},
};
