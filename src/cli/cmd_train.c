/* SPDX-License-Identifier: MIT */
/* qkv train: read a parallel corpus, build vocabularies, train, save the model directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/figures.h"
#include "cli/mpi_reducer.h"
#include "cli/resume.h"
#include "cli/run_dir.h"

typedef struct {
    int tty, quiet, every;
    double t0;
    qkv_train_progress last; /* how the run ended */
} progress_ctx;

static void show_progress(const qkv_train_progress *p, void *ctx)
{
    progress_ctx *pc = ctx;
    pc->last = *p;
    if (pc->quiet) return;
    double done = (double)(p->epoch - 1) + (double)p->batch / p->batches;
    double elapsed = qkv_now_s() - pc->t0, eta = done > 0 ? elapsed * (p->epochs - done) / done : 0;
    if (pc->tty) {
        char bar[21];
        int fill = (int)(20.0 * p->batch / p->batches);
        for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '.';
        bar[20] = '\0';
        fprintf(stderr, "\repoch %d/%d [%s] loss %.4f (d2l %.4f) %.0f tok/s ETA %dm%02ds  ",
                p->epoch, p->epochs, bar, p->loss, p->d2l_loss, p->tokens_per_s,
                (int)eta / 60, (int)eta % 60);
        if (p->end_of_epoch && p->epoch == p->epochs) fputc('\n', stderr);
    } else if (p->end_of_epoch && (p->epoch % pc->every == 0 || p->epoch == p->epochs)) {
        fprintf(stderr, "epoch %d/%d  loss %.4f  (d2l %.4f)  %.0f tok/s  step %lld  %.1fs\n",
                p->epoch, p->epochs, p->loss, p->d2l_loss, p->tokens_per_s, (long long)p->step,
                elapsed);
    }
    if (p->validated) {
        if (pc->tty) fputc('\n', stderr);
        fprintf(stderr, "epoch %d: validation loss %.4f", p->epoch, p->val_loss);
        if (p->bleu == p->bleu) fprintf(stderr, ", BLEU %.2f", p->bleu);
        fprintf(stderr, "%s%s\n", p->best ? " (best so far)" : "",
                p->stopping ? "; no better for --patience epochs: stopping" : "");
    }
}

/* How the model is trained: what the run reads, and the option table, whose recorded options
 * make train.json (the model directory alone then says how to train it again). data is the
 * TSV file, or the source file when tgt is set. */
typedef struct {
    int num_steps, num_examples, min_freq, vocab_size, joint_bpe, valid_bleu;
    const char *data, *tgt, *tokenizer, *valid, *valid_src, *valid_tgt;
    qkv_spm_type spm_type;
    const qkv_train_options *o;
    const opt_spec *opts;
    const cJSON *history; /* resumed runs: what changed when (NULL for a new run) */
    int writer;           /* this process writes the run directory (rank 0 under mpirun) */
} train_record;

/* train.json: every option the table records there, but those that do not apply to this run
 * (subword options of a word model, validation options without validation), and the history
 * of a resumed run. */
static int write_train_json(const char *dir, const train_record *r)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/train.json", dir);
    const int spm = !strcmp(r->tokenizer, "spm"), subwords = spm || !strcmp(r->tokenizer, "bpe");
    cJSON *j = cJSON_CreateObject();
    char *text = NULL;
    if (j && !resume_record_options(j, r->opts)) {
        if (!subwords) cJSON_DeleteItemFromObject(j, "vocab_size");
        if (!subwords) cJSON_DeleteItemFromObject(j, "joint_bpe");
        if (!spm) cJSON_DeleteItemFromObject(j, "spm_type");
        if (!r->valid && !r->valid_src) cJSON_DeleteItemFromObject(j, "valid_bleu");
        if (!r->valid && !r->valid_src) cJSON_DeleteItemFromObject(j, "patience");
        if (r->history) cJSON_AddItemToObject(j, "history", cJSON_Duplicate(r->history, 1));
        text = cJSON_Print(j);
    }
    cJSON_Delete(j);
    if (!text) return fprintf(stderr, "qkv: %s: out of memory\n", path), -1;
    const int rc = run_dir_write(path, text);
    free(text);
    return rc;
}

/* Learns the subword encodings of a new model (one for both languages with joint), writes
 * src_bpe.txt, tgt_bpe.txt and text.json, and makes the vocabularies from them. */
static int learn_subwords(qkv_tokenizer *tok, const qkv_corpus *c, int vocab_size, int joint,
                          const char *out, int writer)
{
    qkv_error err = {0};
    const qkv_sentences *both[2] = {&c->source, &c->target};
    char path[4096];
    if (qkv_bpe_learn(&tok->src_bpe, both, joint ? 2 : 1, vocab_size, &err) ||
        qkv_bpe_learn(&tok->tgt_bpe, joint ? both : both + 1, joint ? 2 : 1, vocab_size, &err) ||
        qkv_bpe_vocab(&tok->src, &tok->src_bpe, &err) ||
        qkv_bpe_vocab(&tok->tgt, &tok->tgt_bpe, &err))
        goto fail;
    tok->kind = QKV_TOKENIZER_BPE, tok->keep_case = 1;
    if (!writer) return 0;
    snprintf(path, sizeof path, "%s/src_bpe.txt", out);
    if (qkv_bpe_save(&tok->src_bpe, path, &err)) goto fail;
    snprintf(path, sizeof path, "%s/tgt_bpe.txt", out);
    if (qkv_bpe_save(&tok->tgt_bpe, path, &err)) goto fail;
    snprintf(path, sizeof path, "%s/text.json", out);
    if (run_dir_write(path, joint ? "{\"tokenizer\": \"bpe\", \"joint\": true, \"case\": \"keep\"}\n"
                                  : "{\"tokenizer\": \"bpe\", \"joint\": false, \"case\": \"keep\"}\n"))
        return -1;
    return 0;
fail:
    fprintf(stderr, "qkv: %s\n", err.msg);
    return -1;
}

/* Learns the SentencePiece models of a new model from the raw text (one for both languages
 * with joint, written under both names), writes source.spm, target.spm and text.json (the
 * writer only: other ranks learn the same models into temporary files), and makes the
 * vocabularies from their pieces. */
static int learn_spm(qkv_tokenizer *tok, const qkv_corpus *c, int vocab_size, int joint,
                     qkv_spm_type kind, const char *out, int writer)
{
    qkv_error err = {0};
    const qkv_sentences *both[2] = {&c->source, &c->target};
    char src[4096], tgt[4096];
    if (writer) {
        snprintf(src, sizeof src, "%s/source.spm", out);
        snprintf(tgt, sizeof tgt, "%s/target.spm", out);
    } else {
        const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(src, sizeof src, "%s/qkv-source.%ld.spm", tmp, (long)getpid());
        snprintf(tgt, sizeof tgt, "%s/qkv-target.%ld.spm", tmp, (long)getpid());
    }
    const int failed =
        qkv_spm_train(both, joint ? 2 : 1, src, vocab_size, kind, &err) ||
        qkv_spm_train(joint ? both : both + 1, joint ? 2 : 1, tgt, vocab_size, kind, &err) ||
        qkv_spm_load(&tok->src_spm, src, &err) || qkv_spm_load(&tok->tgt_spm, tgt, &err) ||
        qkv_spm_vocab(&tok->src, tok->src_spm, src, &err) ||
        qkv_spm_vocab(&tok->tgt, tok->tgt_spm, tgt, &err);
    if (!writer) remove(src), remove(tgt);
    if (failed) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        return -1;
    }
    tok->kind = QKV_TOKENIZER_SPM, tok->keep_case = 1;
    if (!writer) return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/text.json", out);
    return run_dir_write(path, "{\"tokenizer\": \"spm\", \"source_spm\": \"source.spm\", "
                               "\"target_spm\": \"target.spm\", \"case\": \"keep\"}\n");
}

/* Replaces word sentences by the model's tokens on one side; -1 (message printed) on
 * failure. */
static int to_tokens(const qkv_tokenizer *tok, qkv_sentences *s, int target)
{
    qkv_sentences tokens;
    qkv_error err = {0};
    if (qkv_tokenizer_tokens(tok, &tokens, s, target, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        return -1;
    }
    qkv_sentences_free(s);
    *s = tokens;
    return 0;
}

/* Encodes sentence pairs (the model's tokens) to num_steps (d2l's build_array_nmt) as a
 * qkv_dataset. */
static int build_dataset(qkv_dataset *d, int **bufs, const qkv_sentences *src,
                         const qkv_sentences *tgt, const qkv_tokenizer *tok, int num_steps)
{
    const size_t n = (size_t)src->count;
    bufs[0] = malloc(n * num_steps * sizeof(int)), bufs[1] = malloc(n * sizeof(int));
    bufs[2] = malloc(n * num_steps * sizeof(int)), bufs[3] = malloc(n * sizeof(int));
    qkv_error err = {0};
    if (!bufs[0] || !bufs[1] || !bufs[2] || !bufs[3] ||
        qkv_sentences_encode(bufs[0], bufs[1], src, &tok->src, num_steps, &err) ||
        qkv_sentences_encode(bufs[2], bufs[3], tgt, &tok->tgt, num_steps, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg[0] ? err.msg : "out of memory");
        return -1;
    }
    *d = (qkv_dataset){(int)n, num_steps, bufs[0], bufs[1], bufs[2], bufs[3]};
    return 0;
}

/* One line when --max-tokens cuts training sentences (with their <eos>): how many pairs. d2l
 * cuts on purpose (num_steps 10 on fra.txt); elsewhere it is most often a limit set too low. */
static void warn_truncated(const qkv_corpus *c, int max_tokens)
{
    int cut = 0;
    for (int i = 0; i < c->source.count; i++)
        cut += qkv_sentence_len(&c->source, i) + 1 > max_tokens ||
               qkv_sentence_len(&c->target, i) + 1 > max_tokens;
    if (cut)
        fprintf(stderr, "qkv train: warning: %d of %d sentence pairs are longer than "
                "--max-tokens %d (counting <eos>) and were cut to it\n", cut, c->source.count,
                max_tokens);
}

/* A new model in out: vocabularies (or subword encodings) learned from the corpus, the
 * parameters initialised from the seed; the vocabularies, config.json and train.json are
 * written to out, model.safetensors only once it is trained (its absence marks a run that
 * has not finished). NULL (message printed) on failure. */
static qkv_translator *new_model(qkv_transformer_config *cfg, const qkv_corpus *corpus,
                                 const char *out, const train_record *r)
{
    const int spm = !strcmp(r->tokenizer, "spm"), bpe = spm || !strcmp(r->tokenizer, "bpe");
    qkv_tokenizer tok = {0};
    qkv_transformer *m = NULL;
    qkv_translator *t = NULL;
    qkv_error err = {0};
    char path[4096], *json = NULL;
    if (spm) {
        if (learn_spm(&tok, corpus, r->vocab_size, r->joint_bpe, r->spm_type, out, r->writer))
            goto done;
    } else if (bpe) {
        if (learn_subwords(&tok, corpus, r->vocab_size, r->joint_bpe, out, r->writer)) goto done;
    } else if (qkv_vocab_build(&tok.src, corpus->source.tokens, corpus->source.n_tokens,
                               r->min_freq, &err) ||
               qkv_vocab_build(&tok.tgt, corpus->target.tokens, corpus->target.n_tokens,
                               r->min_freq, &err)) {
        goto fail;
    }
    if (!bpe && (tok.src.size <= QKV_N_RESERVED || tok.tgt.size <= QKV_N_RESERVED)) {
        fprintf(stderr, "qkv train: no %s word occurs --min-freq %d times: its vocabulary would "
                "be the %d reserved tokens alone; lower --min-freq\n",
                tok.src.size <= QKV_N_RESERVED ? "source" : "target", r->min_freq,
                QKV_N_RESERVED);
        goto done;
    }
    cfg->src_vocab = tok.src.size, cfg->tgt_vocab = tok.tgt.size;
    if (cfg->tie == QKV_TIE_ALL && (cfg->src_vocab != cfg->tgt_vocab || (bpe && !r->joint_bpe))) {
        fprintf(stderr, "qkv: --tie all needs one vocabulary for both languages (these have "
                "%d and %d tokens); use --tie output%s\n", cfg->src_vocab, cfg->tgt_vocab,
                bpe ? " or --joint-bpe" : "");
        goto done;
    }
    if (qkv_transformer_create(&m, cfg, r->o->seed, &err) ||
        qkv_config_to_json(qkv_transformer_get_config(m), &json, &err))
        goto fail;
    if (!r->writer) goto made; /* every rank builds the same model; rank 0 records it */
    snprintf(path, sizeof path, "%s/src_vocab.txt", out);
    if (qkv_vocab_save(&tok.src, path, &err)) goto fail;
    snprintf(path, sizeof path, "%s/tgt_vocab.txt", out);
    if (qkv_vocab_save(&tok.tgt, path, &err)) goto fail;
    snprintf(path, sizeof path, "%s/config.json", out);
    if (write_train_json(out, r) || run_dir_write(path, json)) goto done;
made:
    if (!qkv_translator_create(&t, m, &tok, r->num_steps, &err)) {
        free(json);
        return t;
    }
fail:
    fprintf(stderr, "qkv: %s\n", err.msg);
done:
    free(json);
    qkv_transformer_free(m);
    qkv_tokenizer_free(&tok);
    return NULL;
}

/* The run in out to resume: its configuration and tokenizer (the parameters come from the
 * checkpoint), and train.json rewritten with r's options and history. NULL (message printed)
 * on failure. */
static qkv_translator *resumed_model(const char *out, const train_record *r)
{
    qkv_transformer_config cfg;
    qkv_transformer *m = NULL;
    qkv_tokenizer tok = {0};
    qkv_translator *t = NULL;
    qkv_error err = {0};
    char path[4096], *json = NULL;
    snprintf(path, sizeof path, "%s/config.json", out);
    if (!(json = resume_config_text(out))) return NULL;
    if (qkv_config_from_json(&cfg, json, path, &err) ||
        qkv_transformer_create(&m, &cfg, r->o->seed, &err) ||
        qkv_tokenizer_load(&tok, out, &err) ||
        qkv_translator_create(&t, m, &tok, r->num_steps, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        qkv_transformer_free(m);
        qkv_tokenizer_free(&tok);
    } else if (r->writer && write_train_json(out, r)) {
        qkv_translator_free(t), t = NULL;
    }
    free(json);
    return t;
}

/* Whether a byte-pair model reads raw, cased text: a new one does; one being resumed does
 * as its text.json says (models of older qkv read d2l's lower-cased words). */
static int raw_bpe(const qkv_train_options *o)
{
    if (!o->resume) return 1;
    qkv_tokenizer tok = {0};
    qkv_error err = {0};
    const int keep = !qkv_tokenizer_load(&tok, o->out_dir, &err) && tok.keep_case;
    qkv_tokenizer_free(&tok);
    return keep;
}

/* The training pairs and the held-out ones (none without validation), read as the tokenizer
 * reads text. 0, or -1 after printing why. */
static int read_corpora(qkv_corpus *corpus, qkv_corpus *held_out, const train_record *r,
                        const qkv_train_options *o)
{
    qkv_error err = {0};
    /* SentencePiece reads text as people write it; d2l's words are lower-cased */
    qkv_status (*tsv)(qkv_corpus *, const char *, int, qkv_error *) = qkv_corpus_read_tsv;
    qkv_status (*aligned)(qkv_corpus *, const char *, const char *, int, qkv_error *) =
        qkv_corpus_read_aligned;
    /* and a cased byte-pair model reads it in NFC, as qkv_tokenizer_words gives it later */
    const int nfc = !strcmp(r->tokenizer, "bpe") && raw_bpe(o);
    if (!strcmp(r->tokenizer, "spm") || nfc)
        tsv = qkv_corpus_read_tsv_raw, aligned = qkv_corpus_read_aligned_raw;
    if ((r->tgt ? aligned(corpus, r->data, r->tgt, r->num_examples, &err)
                : tsv(corpus, r->data, r->num_examples, &err)) ||
        (nfc && qkv_corpus_nfc(corpus, &err)) ||
        ((r->valid || r->valid_src) &&
         ((r->valid ? tsv(held_out, r->valid, 0, &err)
                    : aligned(held_out, r->valid_src, r->valid_tgt, 0, &err)) ||
          (nfc && qkv_corpus_nfc(held_out, &err))))) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* Trains as r and o say (a new model in o->out_dir, or the one there with --resume): reads
 * the corpora, makes the model and its tokenizer, trains, draws the curves. The exit status. */
static int run(const train_record *r, qkv_train_options *o, qkv_transformer_config *cfg,
               qkv_precision prec, qkv_device device, int quiet, int every)
{
    qkv_error err = {0};
    qkv_corpus corpus = {0}, held_out = {0};
    qkv_sentences held_out_tgt = {0}; /* the held-out targets as the model's tokens */
    char *ref_text = NULL, **ref_lines = NULL; /* and as written, for sacreBLEU */
    qkv_translator *t = NULL;
    int *bufs[8] = {0};
    const char *out = o->out_dir;
    int rc = 1;
    if (read_corpora(&corpus, &held_out, r, o)) goto done;
    const int resuming = o->resume, T = r->num_steps;
    if (!(t = resuming ? resumed_model(out, r) : new_model(cfg, &corpus, out, r))) goto done;
    qkv_transformer *m = qkv_translator_model(t);
    const qkv_tokenizer *tok = qkv_translator_tokenizer(t);
    /* the model learns from its tokens, validation BLEU compares the references' words */
    if (held_out.source.count && r->valid_bleu) {
        int n = held_out.target.count;
        o->valid_bleu = 1, o->valid_tokenizer = tok, o->valid_references = &held_out.target;
        if (cli_read_lines(r->valid ? r->valid : r->valid_tgt, r->valid != NULL, &n, &ref_lines,
                           &ref_text))
            goto done;
        o->valid_reference_text = (const char *const *)ref_lines;
    }
    if (to_tokens(tok, &corpus.source, 0) || to_tokens(tok, &corpus.target, 1)) goto done;
    if (r->writer) warn_truncated(&corpus, T);
    qkv_dataset ds, vs;
    if (build_dataset(&ds, bufs, &corpus.source, &corpus.target, tok, T)) goto done;
    if (held_out.source.count) {
        if (to_tokens(tok, &held_out.source, 0)) goto done;
        if (qkv_tokenizer_tokens(tok, &held_out_tgt, &held_out.target, 1, &err)) goto fail;
        if (build_dataset(&vs, bufs + 4, &held_out.source, &held_out_tgt, tok, T)) goto done;
        o->valid = &vs;
    }
    if (qkv_transformer_set_device(m, device, &err) ||
        qkv_transformer_set_precision(m, prec, &err))
        goto fail;
    const qkv_transformer_config *mc = qkv_transformer_get_config(m);
    const int ranks = o->reducer ? o->reducer->size : 1;
    if (!quiet)
        fprintf(stderr, "qkv train: %d pairs%s, vocabularies %d/%d%s, %zu parameters, %d "
                "threads%s, %s%s\n", ds.n, o->valid ? " (+ validation)" : "", mc->src_vocab,
                mc->tgt_vocab, tok->kind == QKV_TOKENIZER_BPE ? " (subwords)"
                : tok->kind == QKV_TOKENIZER_SPM ? " (SentencePiece)" : "",
                qkv_transformer_num_params(m), qkv_get_threads(),
                ranks > 1 ? " per rank" : "", qkv_precision_name(prec),
                resuming ? ", resuming" : "");
    if (!quiet && ranks > 1)
        fprintf(stderr, "qkv train: data-parallel over %d ranks (MPI); each batch is split "
                "among them\n", ranks);
    progress_ctx pc = {isatty(2), quiet, every, qkv_now_s(), {0}};
    o->progress = show_progress, o->progress_ctx = &pc;
    if (qkv_train(m, &ds, o, &err)) goto fail;
    const qkv_train_progress *end = &pc.last;
    if (!quiet && o->stop_after_steps > 0 && end->step >= o->stop_after_steps &&
        !end->stopping && !(end->end_of_epoch && end->epoch == o->epochs))
        fprintf(stderr, "qkv train: stopped after step %d; continue with --resume\n",
                o->stop_after_steps);
    else if (!quiet)
        fprintf(stderr, "qkv train: wrote %s in %.1fs%s\n", out, qkv_now_s() - pc.t0,
                o->valid ? " (the best model by validation in DIR/best)" : "");
    if (r->writer && !fig_training_after_run(out) && !quiet) /* a failed figure is no failed run */
        fprintf(stderr, "qkv train: training curves in %s/training.png\n", out);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "qkv: %s\n", err.msg);
done:
    for (int i = 0; i < 8; i++) free(bufs[i]);
    qkv_corpus_free(&corpus);
    qkv_corpus_free(&held_out);
    qkv_sentences_free(&held_out_tgt);
    free(ref_lines), free(ref_text);
    qkv_translator_free(t);
    return rc;
}

/* Every option of qkv train, as parsed (on --resume: as recorded, then parsed over that). */
typedef struct {
    qkv_transformer_config cfg;
    qkv_train_options o;
    const char *data, *src, *tgt, *out, *valid, *valid_src, *valid_tgt;
    opt_choice tokenizer, spm_type, act, tie, schedule, loss, precision, device;
    int layers, enc_layers, dec_layers, num_steps, num_examples, min_freq, threads, quiet, every,
        vocab_size, joint_bpe, no_bleu, overwrite;
    float minutes;
} train_cli;

/* The command's own choices (the library's enums name the others). */
static const char *const TOKENIZERS[] = {"word", "bpe", "spm", NULL};
enum { TOKENIZER_WORD, TOKENIZER_BPE, TOKENIZER_SPM };
static const char *const LOSSES[] = {"token", "d2l", NULL};
enum { LOSS_TOKEN, LOSS_D2L };

static const char USAGE[] =
    "usage: qkv train (--data FILE | --src FILE --tgt FILE) --out DIR [options]\n"
    "Trains an encoder-decoder Transformer on sentence pairs and writes the model directory.";

enum { MAX_TRAIN_OPTIONS = 72 };

/* The defaults, and the option table over c (every option once: name, value, help, range and
 * what a run records of it). Long: one row per option. */
static void train_table(train_cli *c, opt_spec opts[MAX_TRAIN_OPTIONS])
{
    *c = (train_cli){.cfg = qkv_transformer_default_config(), .o = qkv_train_default_options(),
                     .tokenizer = {0, TOKENIZERS, TOKENIZER_WORD},
                     .spm_type = {QKV_ENUM_SPM_TYPE, NULL, QKV_SPM_UNIGRAM},
                     .act = {QKV_ENUM_ACTIVATION, NULL, QKV_ACT_RELU},
                     .tie = {QKV_ENUM_TIE, NULL, QKV_TIE_NONE},
                     .schedule = {QKV_ENUM_LR_SCHEDULE, NULL, QKV_LR_CONSTANT},
                     .loss = {0, LOSSES, LOSS_TOKEN},
                     .precision = {QKV_ENUM_PRECISION, NULL, QKV_PRECISION_FP32},
                     .device = {QKV_ENUM_DEVICE, NULL, QKV_DEVICE_CPU},
                     .layers = 2, .enc_layers = -1, .dec_layers = -1, .num_steps = 10,
                     .min_freq = 2, .every = 10, .vocab_size = 8000};
    c->o.seed = 0;
    const opt_spec table[] = {
        {"data", OPT_FILE, &c->data,
         "sentence pairs, source<TAB>target per line (d2l's fra.txt)", NULL, "data"},
        {"d", OPT_ALIAS, "data", NULL, NULL, NULL},
        {"src", OPT_FILE, &c->src, "source sentences, one per line (with --tgt)", NULL, "data"},
        {"tgt", OPT_FILE, &c->tgt, "target sentences, line-aligned with --src", NULL, "data"},
        {"out", OPT_DIR, &c->out, "model directory to write", NULL, NULL},
        {"o", OPT_ALIAS, "out", NULL, NULL, NULL},
        {"tokenizer", OPT_CHOICE, &c->tokenizer, "word: d2l's words; bpe: subwords of them; "
                                                 "spm: SentencePiece on raw, cased text", NULL,
         "data"},
        {"vocab-size", OPT_INT, &c->vocab_size,
         "bpe, spm: tokens per vocabulary, reserved ones included", "[5, 1048576]", "data"},
        {"joint-bpe", OPT_FLAG, &c->joint_bpe,
         "bpe, spm: one encoding and vocabulary for both languages", NULL, "data"},
        {"spm-type", OPT_CHOICE, &c->spm_type, "spm: SentencePiece's model type", NULL, "data"},
        {"d-model", OPT_INT, &c->cfg.d_model, "model width", ARG_D_MODEL, "model"},
        {"heads", OPT_INT, &c->cfg.heads, "attention heads", ARG_D_MODEL, "model"},
        {"ffn", OPT_INT, &c->cfg.ffn, "hidden size of the position-wise FFN", ARG_FFN,
         "model"},
        {"layers", OPT_INT, &c->layers, "encoder and decoder blocks", ARG_LAYERS,
         "model enc_layers"},
        {"enc-layers", OPT_INT, &c->enc_layers, "encoder blocks (overrides --layers)",
         ARG_LAYERS_GE0, "model"},
        {"dec-layers", OPT_INT, &c->dec_layers, "decoder blocks (overrides --layers)",
         ARG_LAYERS, "model"},
        {"dropout", OPT_FLOAT, &c->cfg.dropout, "dropout rate", ARG_RATE, "model"},
        {"max-len", OPT_INT, &c->cfg.max_len, "longest sequence the model accepts", ARG_MAX_LEN,
         "model"},
        {"bias", OPT_FLAG, &c->cfg.bias, "biases in the attention projections", NULL, "model"},
        {"pre-norm", OPT_FLAG, &c->cfg.pre_norm,
         "x + Sublayer(LayerNorm(x)) instead of post-norm", NULL, "model"},
        {"final-norm", OPT_FLAG, &c->cfg.final_norm, "a LayerNorm after each stack", NULL,
         "model"},
        {"act", OPT_CHOICE, &c->act, "FFN activation (silu: swish)", NULL, "model"},
        {"tie", OPT_CHOICE, &c->tie, "weight sharing: output (target embedding = output "
                                     "projection) or all (and the source embedding)", NULL,
         "model"},
        {"learned-pos", OPT_FLAG, &c->cfg.learned_pos,
         "learned instead of sinusoidal positions", NULL, "model"},
        {"batch", OPT_INT, &c->o.batch, "sentence pairs per batch", "[1, 65536]", "data"},
        {"batch-tokens", OPT_INT, &c->o.batch_tokens,
         "batches of similar length, pairs x longest <= N (0: --batch)", "[0, 16777216]", "data"},
        {"max-tokens", OPT_INT, &c->num_steps, "tokens per sentence, <eos> included: longer "
                                               "ones are cut (and counted in a warning), "
                                               "shorter ones padded", "[2, 65536]",
         "data num_steps"},
        {"num-steps", OPT_ALIAS, "max-tokens", "d2l's name", NULL, NULL},
        {"schedule", OPT_CHOICE, &c->schedule,
         "learning rate: constant (--lr) or noam (the paper's warmup)", NULL, "train"},
        {"lr", OPT_FLOAT, &c->o.lr, "Adam learning rate (constant schedule)", ARG_LR, "train"},
        {"warmup", OPT_INT, &c->o.warmup, "noam: warmup steps", ARG_GE1, "train"},
        {"lr-factor", OPT_FLOAT, &c->o.lr_factor,
         "noam: lr = F d_model^-0.5 min(step^-0.5, step warmup^-1.5)", ARG_LR_FACTOR, "train"},
        {"beta1", OPT_FLOAT, &c->o.beta1, "Adam's first-moment decay", ARG_RATE, "train"},
        {"beta2", OPT_FLOAT, &c->o.beta2, "Adam's second-moment decay", ARG_RATE, "train"},
        {"adam-eps", OPT_FLOAT, &c->o.adam_eps, "Adam's epsilon", ARG_ADAM_EPS, "train"},
        {"weight-decay", OPT_FLOAT, &c->o.weight_decay, "decoupled weight decay (AdamW)",
         ARG_WEIGHT_DECAY, "train"},
        {"clip", OPT_FLOAT, &c->o.clip, "clip the global gradient norm to this (0: off)",
         ARG_GE0, "train"},
        {"label-smoothing", OPT_FLOAT, &c->o.label_smoothing, "label smoothing epsilon",
         ARG_RATE, "train"},
        {"loss", OPT_CHOICE, &c->loss,
         "gradient of: token (per-token mean) or d2l (d2l's scaling)", NULL, "train"},
        {"epochs", OPT_INT, &c->o.epochs, "passes over the data", ARG_GE1, "train"},
        {"minutes", OPT_FLOAT, &c->minutes,
         "time budget: no epoch starts that would end after it (0: none)", ARG_GE0, "train"},
        {"num-examples", OPT_INT, &c->num_examples, "use the first N pairs (0: all)", ARG_GE0,
         "data"},
        {"min-freq", OPT_INT, &c->min_freq, "word: rarer tokens become <unk>", ARG_GE0, "data"},
        {"valid", OPT_FILE, &c->valid,
         "held-out pairs (TSV): loss and BLEU every epoch, best model", NULL, "data"},
        {"valid-src", OPT_FILE, &c->valid_src, "held-out source sentences (with --valid-tgt)",
         NULL, "data"},
        {"valid-tgt", OPT_FILE, &c->valid_tgt,
         "held-out references, line-aligned with --valid-src", NULL, "data"},
        {"no-bleu", OPT_FLAG, &c->no_bleu, "validation loss only (no decoding for BLEU)", NULL,
         "data !valid_bleu"},
        {"patience", OPT_INT, &c->o.patience,
         "stop after N validations without a new best (0: never)", ARG_GE0, "train"},
        {"keep-epochs", OPT_INT, &c->o.keep_epochs,
         "keep the last N epochs' models in DIR/epoch-NNN", ARG_GE0, "train"},
        {"seed", OPT_U64, &c->o.seed, "initialisation, data order and dropout", ARG_SEED, "data"},
        {"threads", OPT_INT, &c->threads, "threads per rank (0: all cores; under mpirun, shared "
                                          "among the ranks of a machine)", ARG_THREADS, NULL},
        {"t", OPT_ALIAS, "threads", NULL, NULL, NULL},
        {"precision", OPT_CHOICE, &c->precision, CLI_TRAIN_PRECISION_HELP, NULL, "train"},
        {"device", OPT_CHOICE, &c->device, CLI_DEVICE_HELP, NULL, NULL},
        {"checkpoint-every", OPT_INT, &c->o.checkpoint_every, "also checkpoint every N steps",
         ARG_GE0, "train"},
        {"skip-nonfinite", OPT_FLAG, &c->o.skip_nonfinite,
         "skip steps with NaN/Inf instead of stopping", NULL, "train"},
        {"resume", OPT_FLAG, &c->o.resume, "continue from DIR/checkpoint.safetensors, with the "
                                           "options it recorded (those defining the model or "
                                           "data cannot change)", NULL, NULL},
        {"overwrite", OPT_FLAG, &c->overwrite, "replace what DIR holds (a trained model, another "
                                               "run, files of a run's names)", NULL, NULL},
        {"stop-after-steps", OPT_INT, &c->o.stop_after_steps,
         "checkpoint and stop at this step (0: never)", ARG_GE0, NULL},
        {"log-every", OPT_INT, &c->every, "print a line every N epochs (without a terminal)",
         ARG_GE1, NULL},
        {"quiet", OPT_FLAG, &c->quiet, "no progress output", NULL, NULL},
        {"q", OPT_ALIAS, "quiet", NULL, NULL, NULL},
        {0},
    };
    _Static_assert(sizeof table <= MAX_TRAIN_OPTIONS * sizeof *table, "MAX_TRAIN_OPTIONS");
    memcpy(opts, table, sizeof table);
}

/* The combinations that cannot be meant: 0, or -1 after saying why. */
static int train_check(const train_cli *c, const opt_spec *opts, int argc, char **argv)
{
    const char *why = NULL;
    const int subwords = c->tokenizer.value != TOKENIZER_WORD;
    const int noam = c->schedule.value == QKV_LR_NOAM;
    if (!c->out || (!c->data && !(c->src && c->tgt)))
        why = "needs --out and either --data or --src with --tgt";
    else if (c->data && (c->src || c->tgt))
        why = "--data is the pairs in one file, --src with --tgt in two: give one";
    else if (c->num_steps > c->cfg.max_len)
        why = "--max-tokens must be in [2, --max-len]";
    else if ((c->valid_src != NULL) != (c->valid_tgt != NULL) || (c->valid && c->valid_src))
        why = "validation is --valid FILE or --valid-src with --valid-tgt";
    else if (!c->valid && !c->valid_src && (args_given(argc, argv, 2, opts, "patience") ||
                                            c->no_bleu))
        why = "--patience and --no-bleu need validation (--valid, or --valid-src with "
              "--valid-tgt)";
    else if (args_typed(argc, argv, 2, opts, noam ? "lr" : "warmup") ||
             (!noam && args_typed(argc, argv, 2, opts, "lr-factor")))
        why = noam ? "--lr sets the constant schedule's rate; --warmup and --lr-factor shape "
                     "the noam schedule's (this run's is noam)"
                   : "--lr sets the constant schedule's rate; --warmup and --lr-factor shape "
                     "the noam schedule's (this run's is constant)";
    else if (!subwords && (c->joint_bpe || args_given(argc, argv, 2, opts, "vocab-size")))
        why = "--joint-bpe and --vocab-size are for --tokenizer bpe or spm";
    else if (c->tokenizer.value != TOKENIZER_SPM && args_given(argc, argv, 2, opts, "spm-type"))
        why = "--spm-type is for --tokenizer spm";
    if (why) return fprintf(stderr, "qkv train: %s\n", why), -1;
    return cli_positions_fit("qkv train", "max-len", c->cfg.max_len, c->cfg.d_model);
}

static int train_main(int argc, char **argv, cli_ranks *job)
{
    train_cli c;
    opt_spec opts[MAX_TRAIN_OPTIONS];
    resume_record rec = {0};
    run_dir rd = {.lock_fd = -1};
    train_table(&c, opts);
    int rc = args_parse(argc, argv, 2, opts, USAGE);
    if (rc) return rc > 0 ? 0 : 2;
    const int writer = cli_ranks_writer(job, &c.quiet);
    c.o.reducer = &job->reducer;
    if (c.o.resume && c.overwrite) {
        fprintf(stderr, "qkv train: --resume continues the run in --out, --overwrite replaces "
                "it: give one\n");
        goto usage;
    }
    if (c.out && c.o.resume) { /* a resumed run claims its directory first: it reads it */
        rc = 1;
        if (run_dir_claim_writer(&rd, c.out, &RUN_TRANSFORMER, RUN_RESUME, writer, argc, argv) ||
            resume_start(&rec, c.out) ||
            (rc = resume_finish(&rec, opts, argc, argv, "qkv train")))
            goto end;
    }
    qkv_precision prec;
    if (train_check(&c, opts, argc, argv) ||
        cli_train_precision(prec = (qkv_precision)c.precision.value))
        goto usage;
    rc = 1;
    if (cli_device((qkv_device)c.device.value, "train")) goto end;
    c.o.minutes = c.minutes;
    c.cfg.enc_layers = c.enc_layers >= 0 ? c.enc_layers : c.layers;
    c.cfg.dec_layers = c.dec_layers >= 0 ? c.dec_layers : c.layers;
    c.cfg.act = (qkv_activation)c.act.value, c.cfg.tie = (qkv_tie)c.tie.value;
    c.o.d2l_loss_scale = c.loss.value == LOSS_D2L;
    c.o.schedule = (qkv_lr_schedule)c.schedule.value;
    c.o.out_dir = c.out;
    cli_threads(cli_ranks_threads(job, c.threads));
    train_record r = {c.num_steps, c.num_examples, c.min_freq, c.vocab_size, c.joint_bpe,
                      !c.no_bleu, c.data ? c.data : c.src, c.data ? NULL : c.tgt,
                      TOKENIZERS[c.tokenizer.value], c.valid, c.valid_src, c.valid_tgt,
                      (qkv_spm_type)c.spm_type.value, &c.o, opts, rec.history, writer};
    rc = 1;
    if (c.o.resume || !run_dir_claim_writer(&rd, c.out, &RUN_TRANSFORMER,
                                            c.overwrite ? RUN_OVERWRITE : RUN_NEW, writer, argc,
                                            argv))
        rc = run(&r, &c.o, &c.cfg, prec, (qkv_device)c.device.value, c.quiet, c.every);
    goto end;
usage:
    rc = 2;
end:
    run_dir_release(&rd);
    resume_record_free(&rec);
    return rc;
}

/* Under mpirun every rank runs this; rank 0 writes the run directory (mpi_reducer.h). */
int cmd_train(int argc, char **argv)
{
    return cli_ranks_run(argc, argv, train_main);
}
