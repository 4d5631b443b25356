/* SPDX-License-Identifier: MIT */
/* Module functions over text: sacreBLEU's BLEU and chrF2 of translations, the Marian
 * importer, and a model directory's decoding defaults. */
#include <string.h>

#include "module.h"

/* sacrebleu(hyps, refs, per_sentence): the corpus statistics and scores of raw lines, as
 * `qkv eval --hyp` prints them, and with per_sentence each line's sentence BLEU and chrF2. */
static PyObject *sacrebleu(PyObject *module, PyObject *args)
{
    PyObject *hyp_obj, *ref_obj;
    int per_sentence;
    if (!PyArg_ParseTuple(args, "OOp", &hyp_obj, &ref_obj, &per_sentence)) return NULL;
    Py_ssize_t n, m;
    char **hyps = strings_of(hyp_obj, &n, "hypotheses"), **refs = NULL;
    if (!hyps) return NULL;
    if (!(refs = strings_of(ref_obj, &m, "references"))) {
        strings_free(hyps, n);
        return NULL;
    }
    if (n != m) {
        strings_free(hyps, n), strings_free(refs, m);
        return PyErr_Format(PyExc_ValueError, "%zd hypotheses but %zd references", n, m);
    }
    double *sentence = per_sentence ? malloc((size_t)(2 * n + 1) * sizeof *sentence) : NULL;
    if (per_sentence && !sentence) {
        strings_free(hyps, n), strings_free(refs, m);
        return PyErr_NoMemory();
    }
    qkv_sacrebleu_stats bleu = {0};
    qkv_chrf_stats chrf = {0};
    qkv_error err = {0};
    qkv_status s = QKV_OK;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !s; i++) {
        qkv_sacrebleu_stats sb = {0};
        qkv_chrf_stats sc = {0};
        if ((s = qkv_sacrebleu_add(&sb, hyps[i], refs[i], &err)) ||
            (s = qkv_chrf_add(&sc, hyps[i], refs[i], &err)))
            break;
        for (int k = 0; k < QKV_SACREBLEU_ORDER; k++)
            bleu.correct[k] += sb.correct[k], bleu.total[k] += sb.total[k];
        bleu.hyp_len += sb.hyp_len, bleu.ref_len += sb.ref_len;
        for (int k = 0; k < QKV_CHRF_ORDER; k++)
            chrf.hyp[k] += sc.hyp[k], chrf.ref[k] += sc.ref[k], chrf.match[k] += sc.match[k];
        if (sentence)
            sentence[2 * i] = qkv_sacrebleu_score(&sb, 1, NULL, NULL),
            sentence[2 * i + 1] = qkv_chrf_score(&sc);
    }
    Py_END_ALLOW_THREADS
    strings_free(hyps, n), strings_free(refs, m);
    if (s) {
        free(sentence);
        return raise_qkv(state_of(module), s, &err);
    }
    double precisions[QKV_SACREBLEU_ORDER], bp;
    const double score = qkv_sacrebleu_score(&bleu, 0, precisions, &bp);
    char line[512];
    qkv_sacrebleu_format(line, sizeof line, &bleu);
    PyObject *per = Py_None;
    Py_INCREF(per);
    if (sentence) {
        Py_DECREF(per);
        per = PyList_New(n);
        for (Py_ssize_t i = 0; per && i < n; i++) {
            PyObject *pair = Py_BuildValue("(dd)", sentence[2 * i], sentence[2 * i + 1]);
            if (!pair) Py_CLEAR(per);
            else PyList_SetItem(per, i, pair);
        }
        free(sentence);
        if (!per) return NULL;
    }
    PyObject *counts = Py_BuildValue("[LLLL]", (long long)bleu.correct[0],
                                     (long long)bleu.correct[1], (long long)bleu.correct[2],
                                     (long long)bleu.correct[3]);
    PyObject *totals = Py_BuildValue("[LLLL]", (long long)bleu.total[0], (long long)bleu.total[1],
                                     (long long)bleu.total[2], (long long)bleu.total[3]);
    PyObject *prec = Py_BuildValue("[dddd]", precisions[0], precisions[1], precisions[2],
                                   precisions[3]);
    return Py_BuildValue("{s:d,s:N,s:N,s:N,s:d,s:L,s:L,s:s,s:d,s:N}", "score", score, "counts",
                         counts, "totals", totals, "precisions", prec, "bp", bp, "sys_len",
                         (long long)bleu.hyp_len, "ref_len", (long long)bleu.ref_len, "line",
                         line, "chrf", qkv_chrf_score(&chrf), "sentences", per);
}

/* import_marian(hf_dir, out_dir): qkv_import_marian (out_dir exists). */
static PyObject *import_marian(PyObject *module, PyObject *args)
{
    PyObject *hf, *out;
    if (!PyArg_ParseTuple(args, "O&O&", PyUnicode_FSConverter, &hf, PyUnicode_FSConverter, &out))
        return NULL;
    qkv_error err = {0};
    qkv_status s;
    const char *hf_dir = PyBytes_AsString(hf), *out_dir = PyBytes_AsString(out);
    Py_BEGIN_ALLOW_THREADS
    s = qkv_import_marian(hf_dir, out_dir, &err);
    Py_END_ALLOW_THREADS
    Py_DECREF(hf), Py_DECREF(out);
    if (s) return raise_qkv(state_of(module), s, &err);
    Py_RETURN_NONE;
}

/* d[key] = v (a new reference, consumed); -1 with an exception set when either fails. */
static int put(PyObject *d, const char *key, PyObject *v)
{
    const int rc = v ? PyDict_SetItemString(d, key, v) : -1;
    Py_XDECREF(v);
    return rc;
}

/* generation_defaults(dir): the decoding defaults of dir's generation.json that it sets
 * (qkv_generation_defaults_read), as a dict of beam, length_penalty, beam_stop and max_len. */
static PyObject *generation_defaults(PyObject *module, PyObject *args)
{
    const char *dir;
    if (!PyArg_ParseTuple(args, "s", &dir)) return NULL;
    qkv_generation_defaults g;
    qkv_error err = {0};
    qkv_status st = qkv_generation_defaults_read(&g, dir, &err);
    if (st) return raise_qkv(state_of(module), st, &err);
    PyObject *d = PyDict_New();
    if (d && ((g.beam && put(d, "beam", PyLong_FromLong(g.beam))) ||
              (g.has_length_penalty &&
               put(d, "length_penalty", PyFloat_FromDouble(g.length_penalty))) ||
              (g.beam_stop >= 0 &&
               put(d, "beam_stop",
                   PyUnicode_FromString(qkv_enum_name(QKV_ENUM_BEAM_STOP, g.beam_stop)))) ||
              (g.max_len && put(d, "max_len", PyLong_FromLong(g.max_len)))))
        Py_CLEAR(d);
    return d;
}

PyMethodDef text_methods[] = {
    {"generation_defaults", generation_defaults, METH_VARARGS,
     "generation_defaults(dir): the decoding defaults of dir's generation.json, as a dict."},
    {"sacrebleu", sacrebleu, METH_VARARGS,
     "sacrebleu(hyps, refs, per_sentence): BLEU and chrF2 statistics of raw lines."},
    {"import_marian", import_marian, METH_VARARGS,
     "import_marian(hf_dir, out_dir): a Hugging Face MarianMT directory as a qkv model."},
    {NULL, NULL, 0, NULL},
};
