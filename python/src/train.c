/* SPDX-License-Identifier: MIT */
/* The training runs behind qkv.train and qkv.train_lm: the library's run (qkv/run.h), the one
 * `qkv train` and `qkv train-lm` drive, with the options qkv/_train.py gathered and checked for
 * their Python types. The library claims the run directory, compares a resumed run with its
 * record, reads the corpus, makes the tokenizer and the model, writes the files and trains; here
 * the options are handed over by name, and training runs with the GIL released.
 *
 * Between steps the library asks should_stop: with the GIL taken for a moment, Python's
 * signal handlers run there (Ctrl-C raises KeyboardInterrupt in the main thread), and an
 * exception from them or from the progress callback stops the run at that step, checkpointed
 * and resumable; the exception is raised once training has returned. */
#include <stdarg.h>
#include <string.h>

#include "module.h"

/* ---- progress and interruption ---------------------------------------------------------- */

typedef struct {
    PyObject *progress;       /* the callable, or NULL */
    PyObject *notice;         /* the callable given notices (warnings, a resumed run's
                               * changes), or NULL */
    PyObject *exc[3];         /* an exception to raise when training returns (type, value,
                               * traceback; type NULL: none) */
    PyThreadState *released;  /* the calling thread's state while the GIL is released; NULL
                               * while it is held */
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

/* The GIL around a call from the library: taken if this thread released it. */
static void take(hooks *h)
{
    if (h->released) PyEval_RestoreThread(h->released);
}
static void give(hooks *h, int was_released)
{
    if (was_released) h->released = PyEval_SaveThread();
}

static int should_stop(void *ctx)
{
    hooks *h = ctx;
    const int released = h->released != NULL;
    take(h);
    if (!h->exc[0] && PyErr_CheckSignals()) keep_exception(h);
    const int stop = h->exc[0] != NULL;
    give(h, released);
    return stop;
}

/* Calls the progress callable with a dict built from fmt and its values (the GIL taken). */
static void report(hooks *h, const char *fmt, ...)
{
    if (!h->progress || h->exc[0]) return;
    const int released = h->released != NULL;
    take(h);
    va_list ap;
    va_start(ap, fmt);
    PyObject *d = Py_VaBuildValue(fmt, ap);
    va_end(ap);
    PyObject *res = d ? PyObject_CallFunctionObjArgs(h->progress, d, NULL) : NULL;
    if (!res) keep_exception(h);
    Py_XDECREF(res), Py_XDECREF(d);
    give(h, released);
}

static void notice(const char *text, void *ctx)
{
    hooks *h = ctx;
    if (!h->notice || h->exc[0]) return;
    const int released = h->released != NULL;
    take(h);
    PyObject *res = PyObject_CallFunction(h->notice, "s", text);
    if (!res) keep_exception(h);
    Py_XDECREF(res);
    give(h, released);
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

/* ---- the options ------------------------------------------------------------------------- */

static int kind_of(const char *name, qkv_run_kind *kind)
{
    if (!strcmp(name, "train")) *kind = QKV_RUN_TRANSLATION;
    else if (!strcmp(name, "train_lm")) *kind = QKV_RUN_LM;
    else {
        PyErr_Format(PyExc_ValueError, "no run of kind '%s' (train or train_lm)", name);
        return -1;
    }
    return 0;
}

/* run_options(kind): the options of a run as qkv/_train.py checks them: a list of (name,
 * type, choices, record key or None, fixed), name with '_' for '-', type "int", "float",
 * "seed", "bool", "path", "str" or "choice". */
static PyObject *run_options(PyObject *module, PyObject *args)
{
    (void)module;
    const char *kind_name;
    qkv_run_kind kind;
    if (!PyArg_ParseTuple(args, "s", &kind_name) || kind_of(kind_name, &kind)) return NULL;
    static const char *const types[] = {[QKV_OPTION_INT] = "int", [QKV_OPTION_FLOAT] = "float",
                                        [QKV_OPTION_U64] = "seed", [QKV_OPTION_FLAG] = "bool",
                                        [QKV_OPTION_FILE] = "path", [QKV_OPTION_TEXT] = "str",
                                        [QKV_OPTION_CHOICE] = "choice"};
    int n;
    const qkv_option *o = qkv_run_options(kind, &n);
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i < n; i++) {
        char name[64], key[64] = "";
        snprintf(name, sizeof name, "%s", o[i].name);
        for (char *c = name; *c; c++)
            if (*c == '-') *c = '_';
        PyObject *names = PyList_New(0);
        for (int k = 0; names && qkv_option_choice(&o[i], k); k++) {
            PyObject *c = PyUnicode_FromString(qkv_option_choice(&o[i], k));
            if (!c || PyList_Append(names, c)) Py_CLEAR(names);
            Py_XDECREF(c);
        }
        PyObject *choices = names ? PyList_AsTuple(names) : NULL;
        Py_XDECREF(names);
        if (o[i].record) {
            const char *k = strchr(o[i].record, ' ');
            snprintf(key, sizeof key, "%s", k ? k + 1 : name);
        }
        const int fixed = o[i].record && strncmp(o[i].record, "train", 5);
        PyObject *row = choices ? Py_BuildValue("(ssOzO)", name, types[o[i].type], choices,
                                                *key ? key : NULL, fixed ? Py_True : Py_False)
                                : NULL;
        Py_XDECREF(choices);
        if (!row || PyList_Append(list, row)) Py_CLEAR(list);
        Py_XDECREF(row);
    }
    return list;
}

/* Sets one option from a Python value of the type qkv/_train.py checked; a preset (of a new
 * run: a resumed one compares it with its record) sets its values. */
static qkv_status set_option(qkv_run *r, qkv_run_kind kind, PyObject *key_obj, PyObject *value,
                             int resume, qkv_error *err)
{
    const char *key = utf8_of(key_obj, NULL, "option");
    if (!key) return QKV_ERR_ARG;
    int inverted;
    const int i = qkv_run_option_find(kind, key, &inverted);
    if (i < 0) {
        PyErr_Format(PyExc_TypeError, "unknown option '%s'", key);
        return QKV_ERR_ARG;
    }
    const qkv_option *o = &qkv_run_options(kind, NULL)[i];
    if (!strcmp(o->name, "preset") && value != Py_None && !resume) { /* before the others */
        const char *name = utf8_of(value, NULL, key);
        return name ? qkv_run_apply_preset(r, name, err) : QKV_ERR_ARG;
    }
    if (value == Py_None) return qkv_run_set_text(r, i, NULL, err);
    if (PyBool_Check(value)) return qkv_run_set_int(r, i, (value == Py_True) != inverted, err);
    if (PyLong_Check(value)) {
        if (o->type == QKV_OPTION_U64) {
            const unsigned long long u = PyLong_AsUnsignedLongLong(value);
            return u == (unsigned long long)-1 && PyErr_Occurred() ? QKV_ERR_ARG
                                                                  : qkv_run_set_u64(r, i, u, err);
        }
        if (o->type == QKV_OPTION_FLOAT) return qkv_run_set_float(r, i, PyLong_AsDouble(value), err);
        const long long v = PyLong_AsLongLong(value);
        if (v == -1 && PyErr_Occurred()) return QKV_ERR_ARG;
        return qkv_run_set_int(r, i, v, err);
    }
    if (PyFloat_Check(value)) return qkv_run_set_float(r, i, PyFloat_AsDouble(value), err);
    const char *s = utf8_of(value, NULL, key);
    return s ? qkv_run_set_text(r, i, s, err) : QKV_ERR_ARG;
}

/* ---- the run ------------------------------------------------------------------------------ */

/* The run once its options are set: claimed, checked, prepared and trained with the GIL
 * released. */
static qkv_status go(qkv_run *r, const char *out, int resume, int overwrite, const char *holder,
                     hooks *h, int threads, qkv_error *err)
{
    qkv_status st = qkv_run_check(r, err);
    if (!st && !resume)
        st = qkv_run_claim(r, out, overwrite ? QKV_RUN_OVERWRITE : QKV_RUN_NEW, holder, err);
    if (st || h->exc[0]) return st;
    h->released = PyEval_SaveThread();
    if (threads > 0) qkv_set_threads(threads);
    st = qkv_run_prepare(r, NULL, err);
    if (!st && !h->exc[0]) st = qkv_run_train(r, err);
    PyEval_RestoreThread(h->released);
    h->released = NULL;
    return st;
}

/* run(kind, out, options, resume, overwrite, progress, notice, holder, threads): the run of
 * kind in out with options, a list of (name, value) set in order. */
static PyObject *run(PyObject *module, PyObject *args)
{
    const char *kind_name, *out, *holder;
    PyObject *options, *progress, *notice_fn;
    int resume, overwrite, threads;
    qkv_run_kind kind;
    if (!PyArg_ParseTuple(args, "ssO!ppOOsi", &kind_name, &out, &PyList_Type, &options, &resume,
                          &overwrite, &progress, &notice_fn, &holder, &threads) ||
        kind_of(kind_name, &kind))
        return NULL;
    module_state *ms = state_of(module);
    hooks h = {progress == Py_None ? NULL : progress, notice_fn == Py_None ? NULL : notice_fn,
               {NULL, NULL, NULL}, NULL};
    qkv_error err = {0};
    qkv_run *r = NULL;
    qkv_status st = qkv_run_create(&r, kind, &err);
    if (st) return raise_qkv(ms, st, &err);
    qkv_run_set_naming(r, QKV_NAMING_KEYWORDS);
    qkv_run_set_hooks(r, &(qkv_run_hooks){transformer_progress, lm_progress, should_stop, notice,
                                          &h});
    /* a resumed run claims its directory first: its record gives the options not given */
    if (resume) st = qkv_run_claim(r, out, QKV_RUN_RESUME, holder, &err);
    for (Py_ssize_t i = 0; !st && !PyErr_Occurred() && i < PyList_Size(options); i++) {
        PyObject *item = PyList_GetItem(options, i);
        if (!PyTuple_Check(item) || PyTuple_Size(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "options must be (name, value) pairs");
            break;
        }
        st = set_option(r, kind, PyTuple_GetItem(item, 0), PyTuple_GetItem(item, 1), resume,
                        &err);
    }
    if (!st && !PyErr_Occurred()) {
        const int use = threads > 0 ? threads : ms->threads;
        st = go(r, out, resume, overwrite, holder, &h, use, &err);
    }
    qkv_run_free(r);
    if (raise_kept(&h)) return NULL;
    if (PyErr_Occurred()) return NULL;
    if (st) return raise_qkv(ms, st, &err);
    Py_RETURN_NONE;
}

PyMethodDef train_methods[] = {
    {"run_options", run_options, METH_VARARGS,
     "run_options(kind): the options of a run of kind 'train' or 'train_lm' (use qkv.train)."},
    {"run", run, METH_VARARGS,
     "run(kind, out, options, resume, overwrite, progress, notice, holder, threads): a "
     "training run (use qkv.train and qkv.train_lm)."},
    {NULL, NULL, 0, NULL},
};
