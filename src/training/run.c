/* SPDX-License-Identifier: MIT */
/* A training run from its options to its end (qkv/run.h): the directory claimed, the options
 * checked (and a resumed run's compared with its record), the corpus read, the tokenizer and
 * model made or loaded, the data encoded, the files written, training. What `qkv train` and
 * `qkv train-lm` do between parsing their options and printing, and what the Python package
 * does between its keyword arguments and its progress callback. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "training/run_internal.h"

#define V(i) (r->v[i])

static qkv_status write_text(const qkv_run *r, const char *name, const char *text,
                             qkv_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", r->out, name);
    const void *chunks[1] = {text};
    const size_t lens[1] = {strlen(text)};
    return qkv_atomic_write(path, chunks, lens, 1, err);
}

/* An error message with a prefix ("--resume: ", a file's name) put before it. */
static qkv_status prefixed(qkv_error *err, qkv_status st, const char *prefix)
{
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    return qkv_fail(err, st, "%s%s", prefix, why);
}

static void dir_notice(const char *text, void *ctx)
{
    const qkv_run *r = ctx;
    if (r->hooks.notice) r->hooks.notice(text, r->hooks.ctx);
}

qkv_status qkv_run_claim(qkv_run *r, const char *out, qkv_run_mode mode, const char *holder,
                         qkv_error *err)
{
    if (!out) return qkv_fail(err, QKV_ERR_ARG, "a run needs its directory (%s)",
                              r->naming ? "out" : "--out");
    if (r->out) return qkv_fail(err, QKV_ERR_ARG, "the run has claimed %s already", r->out);
    if (!(r->out = strdup(out))) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    r->resuming = mode == QKV_RUN_RESUME;
    const qkv_run_dir_kind k = r->kind == QKV_RUN_LM ? QKV_RUN_DIR_LM : QKV_RUN_DIR_TRANSLATION;
    qkv_status st = r->writer ? qkv_run_dir_claim(&r->dir, out, k, mode, holder, r->naming,
                                                  dir_notice, r, err)
                              : QKV_OK;
    if (!st && r->resuming) st = run_record_read(r, err);
    return st;
}

/* ---- checks ------------------------------------------------------------------------------- */

/* The combinations of qkv train's options that cannot be meant. */
static qkv_status translation_check(const qkv_run *r, qkv_error *err)
{
    const int kw = r->naming == QKV_NAMING_KEYWORDS;
    const char *data = V(T_DATA).s, *src = V(T_SRC).s, *tgt = V(T_TGT).s;
    const char *valid = V(T_VALID).s, *vsrc = V(T_VALID_SRC).s, *vtgt = V(T_VALID_TGT).s;
    const char *why = NULL;
    if (!data && !(src && tgt))
        why = kw ? "needs data (a TSV file of pairs), or src with tgt"
                 : "needs either --data or --src with --tgt";
    else if (data && (src || tgt))
        why = kw ? "data is the pairs in one file, src with tgt in two: give one"
                 : "--data is the pairs in one file, --src with --tgt in two: give one";
    else if (V(T_MAX_TOKENS).i > V(T_MAX_LEN).i)
        why = kw ? "num_steps (max_tokens) must be in [2, max_len]"
                 : "--max-tokens must be in [2, --max-len]";
    else if ((vsrc != NULL) != (vtgt != NULL) || (valid && vsrc))
        why = kw ? "validation is valid (a TSV file) or valid_src with valid_tgt"
                 : "validation is --valid FILE or --valid-src with --valid-tgt";
    else if (!valid && !vsrc && V(T_VALID_EVERY).i > 0)
        why = kw ? "valid_every needs validation (valid, or valid_src with valid_tgt)"
                 : "--valid-every needs validation (--valid, or --valid-src with --valid-tgt)";
    else if (V(T_KEEP_LAST).i > 0 && V(T_SAVE_EVERY).i == 0)
        why = kw ? "keep_last keeps the models of save_every: give both"
                 : "--keep-last keeps the models of --save-every: give both";
    else if (!valid && !vsrc && (V(T_PATIENCE).i > 0 || V(T_NO_BLEU).i))
        why = kw ? "patience and valid_bleu=False need validation (valid, or valid_src with "
                   "valid_tgt)"
                 : "--patience and --no-bleu need validation (--valid, or --valid-src with "
                   "--valid-tgt)";
    else if (V(T_PRECISION).i == QKV_PRECISION_INT8)
        why = kw ? "precision 'int8' is for inference only: train in 'fp32' or 'bf16'"
                 : "--precision int8 is for inference only: train in fp32 or bf16";
    return why ? qkv_fail(err, QKV_ERR_ARG, "%s", why) : QKV_OK;
}

static qkv_status lm_check(const qkv_run *r, qkv_error *err)
{
    const int kw = r->naming == QKV_NAMING_KEYWORDS;
    const char *why = NULL;
    if (!V(L_DATA).s) why = kw ? "needs data, a text file" : "needs --data FILE";
    else if (V(L_STEPS).i == 0 && V(L_MINUTES).f == 0.0f)
        why = kw ? "needs steps or minutes (or both)"
                 : "give --steps N or --minutes FLOAT (or both)";
    else if (V(L_PRECISION).i == QKV_PRECISION_INT8)
        why = kw ? "precision 'int8' is for inference only: train in 'fp32' or 'bf16'"
                 : "--precision int8 is for inference only: train in fp32 or bf16";
    return why ? qkv_fail(err, QKV_ERR_ARG, "%s", why) : QKV_OK;
}

qkv_status qkv_run_check(qkv_run *r, qkv_error *err)
{
    qkv_status st = r->kind == QKV_RUN_LM ? lm_check(r, err) : translation_check(r, err);
    if (!st && r->resuming) st = run_record_compare(r, err);
    return st;
}

/* ---- qkv train: the tokenizer ------------------------------------------------------------- */

/* Learns the subword encodings of a new model (one for both languages with joint), writes
 * src_bpe.txt, tgt_bpe.txt and text.json, and makes the vocabularies from them. */
static qkv_status learn_bpe(qkv_run *r, qkv_error *err)
{
    qkv_tokenizer *tok = &r->tok;
    const qkv_corpus *c = &r->corpus;
    const int joint = V(T_JOINT_BPE).i, size = V(T_VOCAB_SIZE).i;
    const qkv_sentences *both[2] = {&c->source, &c->target};
    char path[4200];
    qkv_status st;
    if ((st = qkv_bpe_learn(&tok->src_bpe, both, joint ? 2 : 1, size, err)) ||
        (st = qkv_bpe_learn(&tok->tgt_bpe, joint ? both : both + 1, joint ? 2 : 1, size, err)) ||
        (st = qkv_bpe_vocab(&tok->src, &tok->src_bpe, err)) ||
        (st = qkv_bpe_vocab(&tok->tgt, &tok->tgt_bpe, err)))
        return st;
    tok->kind = QKV_TOKENIZER_BPE, tok->keep_case = 1;
    if (!r->writer) return QKV_OK;
    snprintf(path, sizeof path, "%s/src_bpe.txt", r->out);
    if ((st = qkv_bpe_save(&tok->src_bpe, path, err))) return st;
    snprintf(path, sizeof path, "%s/tgt_bpe.txt", r->out);
    if ((st = qkv_bpe_save(&tok->tgt_bpe, path, err))) return st;
    return write_text(r, "text.json", joint
                      ? "{\"tokenizer\": \"bpe\", \"joint\": true, \"case\": \"keep\"}\n"
                      : "{\"tokenizer\": \"bpe\", \"joint\": false, \"case\": \"keep\"}\n", err);
}

/* Learns the SentencePiece models of a new model from the raw text (one for both languages
 * with joint, written under both names), writes source.spm, target.spm and text.json (the
 * writer only: other ranks learn the same models into temporary files), and makes the
 * vocabularies from their pieces. */
static qkv_status learn_spm(qkv_run *r, qkv_error *err)
{
    qkv_tokenizer *tok = &r->tok;
    const qkv_corpus *c = &r->corpus;
    const int joint = V(T_JOINT_BPE).i, size = V(T_VOCAB_SIZE).i;
    const qkv_spm_type kind = (qkv_spm_type)V(T_SPM_TYPE).i;
    const qkv_sentences *both[2] = {&c->source, &c->target};
    char src[4200], tgt[4200];
    if (r->writer) {
        snprintf(src, sizeof src, "%s/source.spm", r->out);
        snprintf(tgt, sizeof tgt, "%s/target.spm", r->out);
    } else {
        const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(src, sizeof src, "%s/qkv-source.%ld.spm", tmp, (long)getpid());
        snprintf(tgt, sizeof tgt, "%s/qkv-target.%ld.spm", tmp, (long)getpid());
    }
    qkv_status st;
    if (!(st = qkv_spm_train(both, joint ? 2 : 1, src, size, kind, err)) &&
        !(st = qkv_spm_train(joint ? both : both + 1, joint ? 2 : 1, tgt, size, kind, err)) &&
        !(st = qkv_spm_load(&tok->src_spm, src, err)) &&
        !(st = qkv_spm_load(&tok->tgt_spm, tgt, err)) &&
        !(st = qkv_spm_vocab(&tok->src, tok->src_spm, src, err)))
        st = qkv_spm_vocab(&tok->tgt, tok->tgt_spm, tgt, err);
    if (!r->writer) remove(src), remove(tgt);
    if (st) return st;
    tok->kind = QKV_TOKENIZER_SPM, tok->keep_case = 1;
    if (!r->writer) return QKV_OK;
    return write_text(r, "text.json", "{\"tokenizer\": \"spm\", \"source_spm\": \"source.spm\", "
                                      "\"target_spm\": \"target.spm\", \"case\": \"keep\"}\n", err);
}

/* The vocabularies of a new word model: d2l's words seen min-freq times. */
static qkv_status word_vocab(qkv_run *r, qkv_error *err)
{
    qkv_tokenizer *tok = &r->tok;
    const qkv_corpus *c = &r->corpus;
    const int min_freq = V(T_MIN_FREQ).i;
    qkv_status st;
    if ((st = qkv_vocab_build(&tok->src, c->source.tokens, c->source.n_tokens, min_freq, err)) ||
        (st = qkv_vocab_build(&tok->tgt, c->target.tokens, c->target.n_tokens, min_freq, err)))
        return st;
    if (tok->src.size > QKV_N_RESERVED && tok->tgt.size > QKV_N_RESERVED) return QKV_OK;
    char name[80];
    return qkv_fail(err, QKV_ERR_ARG, "no %s word occurs %s %d times: its vocabulary would be "
                    "the %d reserved tokens alone; lower %s",
                    tok->src.size <= QKV_N_RESERVED ? "source" : "target",
                    run_spelled(r, T_MIN_FREQ, name, sizeof name), min_freq, QKV_N_RESERVED,
                    name);
}

/* ---- qkv train: the model ------------------------------------------------------------------- */

static qkv_transformer_config translation_config(const qkv_run *r)
{
    qkv_transformer_config c = qkv_transformer_default_config();
    c.d_model = V(T_D_MODEL).i, c.heads = V(T_HEADS).i, c.ffn = V(T_FFN).i;
    c.enc_layers = V(T_ENC_LAYERS).i >= 0 ? V(T_ENC_LAYERS).i : V(T_LAYERS).i;
    c.dec_layers = V(T_DEC_LAYERS).i >= 0 ? V(T_DEC_LAYERS).i : V(T_LAYERS).i;
    c.dropout = V(T_DROPOUT).f, c.max_len = V(T_MAX_LEN).i, c.bias = V(T_BIAS).i;
    c.pre_norm = V(T_PRE_NORM).i, c.final_norm = V(T_FINAL_NORM).i;
    c.act = (qkv_activation)V(T_ACT).i, c.tie = (qkv_tie)V(T_TIE).i;
    c.learned_pos = V(T_LEARNED_POS).i;
    return c;
}

/* A new model: vocabularies (or subword encodings) learned from the corpus, the parameters
 * initialised from the seed; the vocabularies, train.json and config.json are written to out,
 * model.safetensors only once it is trained (its absence marks a run that has not finished). */
static qkv_status new_model(qkv_run *r, qkv_error *err)
{
    const int tokenizer = V(T_TOKENIZER).i, subwords = tokenizer != TOKENIZER_WORD;
    qkv_status st = tokenizer == TOKENIZER_SPM   ? learn_spm(r, err)
                    : tokenizer == TOKENIZER_BPE ? learn_bpe(r, err)
                                                 : word_vocab(r, err);
    if (st) return st;
    qkv_transformer_config cfg = translation_config(r);
    cfg.src_vocab = r->tok.src.size, cfg.tgt_vocab = r->tok.tgt.size;
    if (cfg.tie == QKV_TIE_ALL &&
        (cfg.src_vocab != cfg.tgt_vocab || (subwords && !V(T_JOINT_BPE).i))) {
        const int kw = r->naming == QKV_NAMING_KEYWORDS;
        return qkv_fail(err, QKV_ERR_ARG, "%s needs one vocabulary for both languages (these "
                        "have %d and %d tokens); use %s%s", kw ? "tie 'all'" : "--tie all",
                        cfg.src_vocab, cfg.tgt_vocab, kw ? "tie 'output'" : "--tie output",
                        !subwords ? "" : kw ? " or joint_bpe" : " or --joint-bpe");
    }
    char path[4200], *json = NULL;
    if ((st = qkv_transformer_create(&r->model, &cfg, V(T_SEED).u, err)) ||
        (st = qkv_config_to_json(qkv_transformer_get_config(r->model), &json, err)) ||
        !r->writer) /* every rank builds the same model; rank 0 records it */
        goto done;
    snprintf(path, sizeof path, "%s/src_vocab.txt", r->out);
    if ((st = qkv_vocab_save(&r->tok.src, path, err))) goto done;
    snprintf(path, sizeof path, "%s/tgt_vocab.txt", r->out);
    if ((st = qkv_vocab_save(&r->tok.tgt, path, err)) || (st = run_record_write(r, err)))
        goto done;
    st = write_text(r, "config.json", json, err);
done:
    free(json);
    return st;
}

/* The run being resumed: its configuration (the parameters come from the checkpoint; the
 * tokenizer was loaded to read the corpus), and train.json rewritten with the options in force
 * and the history. */
static qkv_status resumed_model(qkv_run *r, qkv_error *err)
{
    qkv_transformer_config cfg;
    char path[4200], *json = NULL;
    snprintf(path, sizeof path, "%s/config.json", r->out);
    qkv_status st = qkv_read_regular_file(path, QKV_MAX_CONFIG_BYTES, &json, NULL, err);
    if (!st) st = qkv_config_from_json(&cfg, json, path, err);
    if (!st && (r->tok.src.size != cfg.src_vocab || r->tok.tgt.size != cfg.tgt_vocab))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: the vocabularies have %d and %d tokens but the "
                      "model was built for %d and %d", r->out, r->tok.src.size, r->tok.tgt.size,
                      cfg.src_vocab, cfg.tgt_vocab);
    if (!st) st = qkv_transformer_create(&r->model, &cfg, V(T_SEED).u, err);
    if (!st && r->writer) st = run_record_write(r, err);
    free(json);
    return st;
}

/* ---- qkv train: the data ------------------------------------------------------------------- */

static qkv_status read_pairs(qkv_corpus *c, const char *data, const char *tgt, int n, int raw,
                             int nfc, qkv_error *err)
{
    qkv_status st = tgt ? (raw ? qkv_corpus_read_aligned_raw : qkv_corpus_read_aligned)(
                              c, data, tgt, n, err)
                        : (raw ? qkv_corpus_read_tsv_raw : qkv_corpus_read_tsv)(c, data, n, err);
    if (!st && nfc) st = qkv_corpus_nfc(c, err);
    return st;
}

/* The training pairs and the held-out ones, read as the tokenizer reads text: SentencePiece
 * reads text as people write it, and so does a byte-pair model (new, or one whose text.json
 * says so) in NFC, as qkv_tokenizer_words gives it later; d2l's words are lower-cased. A
 * resumed run's tokenizer is loaded here, to know that. */
static qkv_status read_corpora(qkv_run *r, qkv_error *err)
{
    const int tokenizer = V(T_TOKENIZER).i;
    qkv_status st = r->resuming ? qkv_tokenizer_load(&r->tok, r->out, err) : QKV_OK;
    if (st) return st;
    const int bpe = tokenizer == TOKENIZER_BPE && (!r->resuming || r->tok.keep_case);
    const int raw = tokenizer == TOKENIZER_SPM || bpe;
    const char *data = V(T_DATA).s ? V(T_DATA).s : V(T_SRC).s;
    const char *tgt = V(T_DATA).s ? NULL : V(T_TGT).s;
    const char *valid = V(T_VALID).s ? V(T_VALID).s : V(T_VALID_SRC).s;
    st = read_pairs(&r->corpus, data, tgt, V(T_NUM_EXAMPLES).i, raw, bpe, err);
    if (!st && valid)
        st = read_pairs(&r->held, valid, V(T_VALID).s ? NULL : V(T_VALID_TGT).s, 0, raw, bpe,
                        err);
    return st;
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

/* Sentence pairs (the model's tokens) encoded to T tokens (d2l's build_array_nmt) into
 * bufs[0..4). */
static qkv_status dataset_of(qkv_dataset *d, int **bufs, const qkv_sentences *src,
                             const qkv_sentences *tgt, const qkv_tokenizer *tok, int T,
                             qkv_error *err)
{
    const size_t n = (size_t)src->count, rows = n ? n : 1;
    bufs[0] = malloc(rows * T * sizeof(int)), bufs[1] = malloc(rows * sizeof(int));
    bufs[2] = malloc(rows * T * sizeof(int)), bufs[3] = malloc(rows * sizeof(int));
    if (!bufs[0] || !bufs[1] || !bufs[2] || !bufs[3])
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %zu pairs", n);
    qkv_status st = qkv_sentences_encode(bufs[0], bufs[1], src, &tok->src, T, err);
    if (!st) st = qkv_sentences_encode(bufs[2], bufs[3], tgt, &tok->tgt, T, err);
    *d = (qkv_dataset){(int)n, T, bufs[0], bufs[1], bufs[2], bufs[3]};
    return st;
}

/* A notice when --max-tokens cuts training sentences (with their <eos>): how many pairs. d2l
 * cuts on purpose (num_steps 10 on fra.txt); elsewhere it is most often a limit set too low. */
static void warn_truncated(const qkv_run *r)
{
    const qkv_corpus *c = &r->corpus;
    const int max_tokens = V(T_MAX_TOKENS).i;
    int cut = 0;
    for (int i = 0; i < c->source.count; i++)
        cut += qkv_sentence_len(&c->source, i) + 1 > max_tokens ||
               qkv_sentence_len(&c->target, i) + 1 > max_tokens;
    char name[80];
    if (cut)
        run_notice(r, "warning: %d of %d sentence pairs are longer than %s %d (counting <eos>) "
                   "and were cut to it", cut, c->source.count,
                   run_spelled(r, T_MAX_TOKENS, name, sizeof name), max_tokens);
}

/* The trainer's options from the run's. */
static void translation_options(qkv_run *r)
{
    qkv_train_options *o = &r->o;
    *o = qkv_train_default_options();
    o->out_dir = r->out, o->batch = V(T_BATCH).i, o->epochs = V(T_EPOCHS).i;
    o->lr = V(T_LR).f, o->beta1 = V(T_BETA1).f, o->beta2 = V(T_BETA2).f;
    o->adam_eps = V(T_ADAM_EPS).f, o->weight_decay = V(T_WEIGHT_DECAY).f, o->clip = V(T_CLIP).f;
    o->label_smoothing = V(T_LABEL_SMOOTHING).f, o->d2l_loss_scale = V(T_LOSS).i == LOSS_D2L;
    o->seed = V(T_SEED).u, o->resume = r->resuming;
    o->checkpoint_every = V(T_CHECKPOINT_EVERY).i, o->skip_nonfinite = V(T_SKIP_NONFINITE).i;
    o->stop_after_steps = V(T_STOP_AFTER_STEPS).i;
    o->schedule = (qkv_lr_schedule)V(T_SCHEDULE).i, o->warmup = V(T_WARMUP).i;
    o->lr_factor = V(T_LR_FACTOR).f, o->batch_tokens = V(T_BATCH_TOKENS).i;
    o->patience = V(T_PATIENCE).i, o->keep_epochs = V(T_KEEP_EPOCHS).i;
    o->minutes = V(T_MINUTES).f, o->reducer = r->reducer, o->accum = V(T_ACCUM).i;
    o->valid_every = V(T_VALID_EVERY).i, o->save_every = V(T_SAVE_EVERY).i;
    o->keep_last = V(T_KEEP_LAST).i;
}

/* The validation data, and its references for BLEU: the model learns from its tokens,
 * validation BLEU compares the references' words, sacreBLEU their text. */
static qkv_status held_out(qkv_run *r, qkv_error *err)
{
    const int T = V(T_MAX_TOKENS).i;
    qkv_status st = QKV_OK;
    if (!V(T_NO_BLEU).i) {
        const char *refs = V(T_VALID).s ? V(T_VALID).s : V(T_VALID_TGT).s;
        int n = r->held.target.count;
        r->o.valid_bleu = 1, r->o.valid_tokenizer = &r->tok;
        r->o.valid_references = &r->held.target;
        st = qkv_read_lines(refs, V(T_VALID).s != NULL, &n, &r->refs, &r->ref_text, err);
        r->o.valid_reference_text = (const char *const *)r->refs;
    }
    if (!st) st = to_tokens(&r->tok, &r->held.source, 0, err);
    if (!st) st = qkv_tokenizer_tokens(&r->tok, &r->held_tgt, &r->held.target, 1, err);
    if (!st) st = dataset_of(&r->vs, r->bufs + 4, &r->held.source, &r->held_tgt, &r->tok, T, err);
    r->o.valid = &r->vs;
    return st;
}

static qkv_status translation_prepare(qkv_run *r, qkv_run_info *info, qkv_error *err)
{
    qkv_status st = read_corpora(r, err);
    if (!st) st = r->resuming ? resumed_model(r, err) : new_model(r, err);
    if (st) return st;
    translation_options(r);
    const int T = V(T_MAX_TOKENS).i;
    if ((st = to_tokens(&r->tok, &r->corpus.source, 0, err)) ||
        (st = to_tokens(&r->tok, &r->corpus.target, 1, err)))
        return st;
    if (r->writer) warn_truncated(r);
    if ((st = dataset_of(&r->ds, r->bufs, &r->corpus.source, &r->corpus.target, &r->tok, T,
                         err)) ||
        (r->held.source.count && (st = held_out(r, err))) ||
        (st = qkv_transformer_set_device(r->model, (qkv_device)V(T_DEVICE).i, err)) ||
        (st = qkv_transformer_set_precision(r->model, (qkv_precision)V(T_PRECISION).i, err)))
        return st;
    if (info) {
        const qkv_transformer_config *mc = qkv_transformer_get_config(r->model);
        info->pairs = r->ds.n, info->valid_pairs = r->o.valid ? r->vs.n : 0;
        info->src_vocab = mc->src_vocab, info->tgt_vocab = mc->tgt_vocab;
        info->tokenizer = r->tok.kind, info->parameters = qkv_transformer_num_params(r->model);
    }
    return QKV_OK;
}

/* ---- qkv train-lm ------------------------------------------------------------------------- */

static qkv_lm_config lm_config(const qkv_run *r)
{
    qkv_lm_config c = qkv_lm_default_config();
    c.attention = (qkv_attention_kind)V(L_ATTENTION).i, c.act = (qkv_activation)V(L_ACT).i;
    c.d_model = V(L_D_MODEL).i, c.heads = V(L_HEADS).i, c.ffn = V(L_FFN).i;
    c.layers = V(L_LAYERS).i, c.dropout = V(L_DROPOUT).f, c.pre_norm = V(L_PRE_NORM).i;
    c.final_norm = c.pre_norm, c.tie = V(L_TIE).i, c.learned_pos = V(L_LEARNED_POS).i;
    c.bias = !V(L_NO_BIAS).i, c.max_len = V(L_CONTEXT).i;
    return c;
}

static void lm_options(qkv_run *r)
{
    qkv_lm_train_options *o = &r->lo;
    *o = qkv_lm_train_default_options();
    o->out_dir = r->out, o->context = V(L_CONTEXT).i, o->batch = V(L_BATCH).i;
    o->lr = V(L_LR).f, o->warmup = V(L_WARMUP).i, o->cosine = V(L_COSINE).i;
    o->beta2 = V(L_BETA2).f, o->weight_decay = V(L_WEIGHT_DECAY).f, o->clip = V(L_CLIP).f;
    o->steps = V(L_STEPS).i, o->minutes = V(L_MINUTES).f;
    o->eval_every = V(L_EVAL_EVERY).i, o->eval_tokens = V(L_EVAL_TOKENS).i;
    o->log_every = V(L_LOG_EVERY).i, o->seed = V(L_SEED).u, o->resume = r->resuming;
    o->stop_after_steps = V(L_STOP_AFTER_STEPS).i, o->reducer = r->reducer;
    o->accum = V(L_ACCUM).i;
}

/* The model to train: the one in out when resuming there (its config.json and vocabulary; the
 * parameters come from the checkpoint), or a new one with a vocabulary of text, whose
 * config.json and vocab.txt are written there (model.safetensors only once it is trained). */
static qkv_status lm_model(qkv_run *r, const char *text, size_t len, qkv_error *err)
{
    qkv_lm_config cfg;
    char path[4200], cpath[4200], *json = NULL;
    qkv_status st;
    snprintf(path, sizeof path, "%s/vocab.txt", r->out);
    snprintf(cpath, sizeof cpath, "%s/config.json", r->out);
    if (r->resuming) {
        if ((st = qkv_read_regular_file(cpath, QKV_MAX_CONFIG_BYTES, &json, NULL, err)) ||
            (st = qkv_lm_config_from_json(&cfg, json, cpath, err)) ||
            (st = qkv_vocab_load(&r->vocab, path, err)))
            goto done;
        if (r->vocab.size != cfg.vocab) {
            st = qkv_fail(err, QKV_ERR_FORMAT, "%s: the vocabulary has %d tokens but the model "
                          "was built for %d", path, r->vocab.size, cfg.vocab);
            goto done;
        }
        st = qkv_lm_create(&r->lm, &cfg, V(L_SEED).u, err);
        goto done;
    }
    cfg = lm_config(r);
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s: ", V(L_DATA).s);
    if ((st = qkv_lm_vocab_build(&r->vocab, text, len, V(L_VOCAB).i == VOCAB_BYTE, err))) {
        st = prefixed(err, st, prefix);
        goto done;
    }
    cfg.vocab = r->vocab.size;
    if ((st = qkv_lm_create(&r->lm, &cfg, V(L_SEED).u, err)) || !r->writer) goto done;
    if ((st = qkv_vocab_save(&r->vocab, path, err)) ||
        (st = qkv_lm_config_to_json(&cfg, &json, err)))
        goto done;
    st = write_text(r, "config.json", json, err);
done:
    free(json);
    return st;
}

static qkv_status lm_prepare(qkv_run *r, qkv_run_info *info, qkv_error *err)
{
    const char *data = V(L_DATA).s;
    char *text = NULL;
    size_t len = 0, n = 0, unknown = 0;
    qkv_status st = qkv_read_file(strcmp(data, "-") ? data : NULL, QKV_MAX_TEXT_BYTES, &text,
                                  &len, err);
    if (!st && !len)
        st = qkv_fail(err, QKV_ERR_ARG, "%s is empty: there is nothing to learn from", data);
    if (!st) st = lm_model(r, text, len, err);
    if (!st && !(r->ids = malloc(len * sizeof *r->ids)))
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %zu tokens", len);
    if (!st && (st = qkv_lm_encode(r->ids, &n, &unknown, &r->vocab, text, len, err))) {
        char prefix[4200];
        snprintf(prefix, sizeof prefix, "%s: ", data);
        st = prefixed(err, st, prefix);
    }
    free(text);
    if (st) return st;
    if (unknown && r->writer)
        run_notice(r, "warning: %s: %zu character%s not in the model's vocabulary (read as "
                   "<unk>)", data, unknown, unknown == 1 ? " is" : "s are");
    lm_options(r);
    /* the last val-fraction of the tokens is held out */
    r->n_val = (size_t)((double)n * V(L_VAL_FRACTION).f), r->n_train = n - r->n_val;
    if (r->n_train < (size_t)r->lo.context + 1) {
        char name[80];
        return qkv_fail(err, QKV_ERR_ARG, "%s: %zu training tokens, but %s %d needs at least %d",
                        data, r->n_train, run_spelled(r, L_CONTEXT, name, sizeof name),
                        r->lo.context, r->lo.context + 1);
    }
    if ((r->writer && (st = run_record_write(r, err))) ||
        (st = qkv_lm_set_precision(r->lm, (qkv_precision)V(L_PRECISION).i, err)))
        return st;
    if (info) {
        const qkv_lm_config *mc = qkv_lm_get_config(r->lm);
        info->tokens = n, info->train_tokens = r->n_train, info->val_tokens = r->n_val;
        info->unknown = unknown, info->vocab = mc->vocab, info->attention = mc->attention;
        info->parameters = qkv_lm_num_params(r->lm);
    }
    return QKV_OK;
}

/* ---- the run ------------------------------------------------------------------------------ */

qkv_status qkv_run_prepare(qkv_run *r, qkv_run_info *info, qkv_error *err)
{
    if (!r->out) return qkv_fail(err, QKV_ERR_ARG, "qkv_run_prepare: claim the directory first");
    if (r->prepared) return qkv_fail(err, QKV_ERR_ARG, "qkv_run_prepare: prepared already");
    if (info) memset(info, 0, sizeof *info);
    qkv_status st = r->kind == QKV_RUN_LM ? lm_prepare(r, info, err)
                                          : translation_prepare(r, info, err);
    if (st) return st;
    r->prepared = 1;
    if (info) {
        info->resuming = r->resuming;
        info->precision = (qkv_precision)V(r->kind == QKV_RUN_LM ? L_PRECISION : T_PRECISION).i;
    }
    return QKV_OK;
}

qkv_status qkv_run_train(qkv_run *r, qkv_error *err)
{
    if (!r->prepared) return qkv_fail(err, QKV_ERR_ARG, "qkv_run_train: prepare the run first");
    const qkv_run_hooks *h = &r->hooks;
    if (r->kind == QKV_RUN_LM) {
        r->lo.progress = h->lm_progress, r->lo.progress_ctx = h->ctx;
        r->lo.should_stop = h->should_stop, r->lo.should_stop_ctx = h->ctx;
        return qkv_lm_train(r->lm, r->ids, r->n_train, r->ids + r->n_train, r->n_val, &r->lo,
                            err);
    }
    r->o.progress = h->progress, r->o.progress_ctx = h->ctx;
    r->o.should_stop = h->should_stop, r->o.should_stop_ctx = h->ctx;
    return qkv_train(r->model, &r->ds, &r->o, err);
}

qkv_status qkv_run_held_out_loss(qkv_run *r, double *loss, int64_t *count, qkv_error *err)
{
    if (r->kind != QKV_RUN_LM || !r->prepared)
        return qkv_fail(err, QKV_ERR_ARG, "qkv_run_held_out_loss: a prepared language model's "
                        "run only");
    if (r->n_val < 2)
        return qkv_fail(err, QKV_ERR_ARG, "%zu tokens held out: at least 2 are needed", r->n_val);
    return qkv_lm_evaluate(r->lm, r->ids + r->n_train, r->n_val, r->lo.context, r->lo.batch,
                           loss, count, err);
}

void qkv_run_free(qkv_run *r)
{
    if (!r) return;
    for (int i = 0; i < r->n_opts; i++)
        if (r->opts[i].type == QKV_OPTION_FILE || r->opts[i].type == QKV_OPTION_TEXT)
            free(r->v[i].s);
    for (int i = 0; i < 8; i++) free(r->bufs[i]);
    qkv_corpus_free(&r->corpus), qkv_corpus_free(&r->held);
    qkv_sentences_free(&r->held_tgt);
    free(r->refs), free(r->ref_text);
    qkv_tokenizer_free(&r->tok);
    qkv_transformer_free(r->model);
    qkv_lm_free(r->lm);
    qkv_vocab_free(&r->vocab);
    free(r->ids);
    cJSON_Delete(r->config), cJSON_Delete(r->train), cJSON_Delete(r->history);
    qkv_run_dir_release(r->dir);
    free(r->out);
    free(r);
}
