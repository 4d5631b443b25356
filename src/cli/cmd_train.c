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

/* How the model is trained, every option: what the run reads, and train.json (the model
 * directory alone then says how to train it again). data is the TSV file, or the source
 * file when tgt is set. */
typedef struct {
    int num_steps, num_examples, min_freq, vocab_size, joint_bpe, valid_bleu;
    const char *data, *tgt, *tokenizer, *valid, *valid_src, *valid_tgt, *loss, *precision;
    const qkv_train_options *o;
    const cJSON *history; /* resumed runs: what changed when (NULL for a new run) */
    int writer;           /* this process writes the run directory (rank 0 under mpirun) */
    const char *spm_type; /* SentencePiece: unigram or bpe */
} train_record;

/* A float option as its shortest decimal (0.005, not 0.004999999888). */
static double decimal(float x)
{
    char text[32];
    snprintf(text, sizeof text, "%.7g", (double)x);
    return strtod(text, NULL);
}

static int write_train_json(const char *dir, const train_record *r)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/train.json", dir);
    const qkv_train_options *o = r->o;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "num_steps", r->num_steps);
    cJSON_AddNumberToObject(j, "num_examples", r->num_examples);
    cJSON_AddNumberToObject(j, "min_freq", r->min_freq);
    cJSON_AddStringToObject(j, "data", r->data);
    if (r->tgt) cJSON_AddStringToObject(j, "tgt", r->tgt);
    cJSON_AddStringToObject(j, "tokenizer", r->tokenizer);
    if (!strcmp(r->tokenizer, "bpe") || !strcmp(r->tokenizer, "spm")) {
        cJSON_AddNumberToObject(j, "vocab_size", r->vocab_size);
        cJSON_AddBoolToObject(j, "joint_bpe", r->joint_bpe);
    }
    if (!strcmp(r->tokenizer, "spm")) cJSON_AddStringToObject(j, "spm_type", r->spm_type);
    cJSON_AddNumberToObject(j, "batch", o->batch);
    cJSON_AddNumberToObject(j, "batch_tokens", o->batch_tokens);
    cJSON_AddNumberToObject(j, "epochs", o->epochs);
    cJSON_AddStringToObject(j, "schedule", o->schedule == QKV_LR_NOAM ? "noam" : "constant");
    cJSON_AddNumberToObject(j, "lr", decimal(o->lr));
    cJSON_AddNumberToObject(j, "warmup", o->warmup);
    cJSON_AddNumberToObject(j, "lr_factor", decimal(o->lr_factor));
    cJSON_AddNumberToObject(j, "beta1", decimal(o->beta1));
    cJSON_AddNumberToObject(j, "beta2", decimal(o->beta2));
    cJSON_AddNumberToObject(j, "adam_eps", decimal(o->adam_eps));
    cJSON_AddNumberToObject(j, "weight_decay", decimal(o->weight_decay));
    cJSON_AddNumberToObject(j, "clip", decimal(o->clip));
    cJSON_AddNumberToObject(j, "label_smoothing", decimal(o->label_smoothing));
    cJSON_AddStringToObject(j, "loss", r->loss);
    cJSON_AddItemToObject(j, "seed", resume_u64_json(o->seed));
    if (r->valid || r->valid_src) {
        if (r->valid) cJSON_AddStringToObject(j, "valid", r->valid);
        if (r->valid_src) cJSON_AddStringToObject(j, "valid_src", r->valid_src);
        if (r->valid_tgt) cJSON_AddStringToObject(j, "valid_tgt", r->valid_tgt);
        cJSON_AddBoolToObject(j, "valid_bleu", r->valid_bleu);
        cJSON_AddNumberToObject(j, "patience", o->patience);
    }
    cJSON_AddNumberToObject(j, "keep_epochs", o->keep_epochs);
    cJSON_AddNumberToObject(j, "minutes", decimal((float)o->minutes));
    cJSON_AddNumberToObject(j, "checkpoint_every", o->checkpoint_every);
    cJSON_AddBoolToObject(j, "skip_nonfinite", o->skip_nonfinite);
    cJSON_AddStringToObject(j, "precision", r->precision);
    if (r->history) cJSON_AddItemToObject(j, "history", cJSON_Duplicate(r->history, 1));
    char *text = cJSON_Print(j);
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
                     const char *type, const char *out, int writer)
{
    qkv_error err = {0};
    const qkv_sentences *both[2] = {&c->source, &c->target};
    const qkv_spm_type kind = !strcmp(type, "bpe") ? QKV_SPM_BPE : QKV_SPM_UNIGRAM;
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

/* Trains as r and o say (a new model in o->out_dir, or the one there with --resume): reads
 * the corpora, makes the model and its tokenizer, trains, draws the curves. The exit status. */
static int run(const train_record *r, qkv_train_options *o, qkv_transformer_config *cfg,
               qkv_precision prec, int quiet, int every)
{
    qkv_error err = {0};
    qkv_corpus corpus = {0}, held_out = {0};
    qkv_sentences held_out_tgt = {0}; /* the held-out targets as the model's tokens */
    char *ref_text = NULL, **ref_lines = NULL; /* and as written, for sacreBLEU */
    qkv_translator *t = NULL;
    int *bufs[8] = {0};
    const char *out = o->out_dir;
    int rc = 1;
    /* SentencePiece reads text as people write it; d2l's words are lower-cased */
    qkv_status (*tsv)(qkv_corpus *, const char *, int, qkv_error *) = qkv_corpus_read_tsv;
    qkv_status (*aligned)(qkv_corpus *, const char *, const char *, int, qkv_error *) =
        qkv_corpus_read_aligned;
    /* and a cased byte-pair model reads it in NFC, as qkv_tokenizer_words gives it later */
    const int nfc = !strcmp(r->tokenizer, "bpe") && raw_bpe(o);
    if (!strcmp(r->tokenizer, "spm") || nfc)
        tsv = qkv_corpus_read_tsv_raw, aligned = qkv_corpus_read_aligned_raw;
    if ((r->tgt ? aligned(&corpus, r->data, r->tgt, r->num_examples, &err)
                : tsv(&corpus, r->data, r->num_examples, &err)) ||
        (nfc && qkv_corpus_nfc(&corpus, &err))) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        goto done;
    }
    if ((r->valid || r->valid_src) &&
        ((r->valid ? tsv(&held_out, r->valid, 0, &err)
                   : aligned(&held_out, r->valid_src, r->valid_tgt, 0, &err)) ||
         (nfc && qkv_corpus_nfc(&held_out, &err)))) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        goto done;
    }
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
    qkv_dataset ds, vs;
    if (build_dataset(&ds, bufs, &corpus.source, &corpus.target, tok, T)) goto done;
    if (held_out.source.count) {
        if (to_tokens(tok, &held_out.source, 0)) goto done;
        if (qkv_tokenizer_tokens(tok, &held_out_tgt, &held_out.target, 1, &err)) goto fail;
        if (build_dataset(&vs, bufs + 4, &held_out.source, &held_out_tgt, tok, T)) goto done;
        o->valid = &vs;
    }
    if (qkv_transformer_set_precision(m, prec, &err)) goto fail;
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

/* What a resumed run compares with its directory (resume.h): config.json's model options,
 * then train.json's (the data files as the run named them: --data, or --src with --tgt). */
static const resume_option model_options[] = {
    {"d-model", "d_model", 1, 0}, {"heads", "heads", 1, 0}, {"ffn", "ffn", 1, 0},
    {"layers", "enc_layers", 1, 0}, {"enc-layers", "enc_layers", 1, 0},
    {"dec-layers", "dec_layers", 1, 0}, {"dropout", "dropout", 1, 0},
    {"max-len", "max_len", 1, 0}, {"bias", "bias", 1, 0}, {"pre-norm", "pre_norm", 1, 0},
    {"final-norm", "final_norm", 1, 0}, {"act", "act", 1, 0}, {"tie", "tie", 1, 0},
    {"learned-pos", "learned_pos", 1, 0},
};
static const resume_option tsv_data[] = {
    {"data", "data", 1, 0}, {"src", NULL, 1, 0}, {"tgt", "tgt", 1, 0},
};
static const resume_option aligned_data[] = {
    {"src", "data", 1, 0}, {"tgt", "tgt", 1, 0}, {"data", NULL, 1, 0},
};
static const resume_option train_options[] = {
    /* the data as the model sees it, and its order (the checkpoint's position counts batches) */
    {"num-steps", "num_steps", 1, 0}, {"num-examples", "num_examples", 1, 0},
    {"min-freq", "min_freq", 1, 0}, {"tokenizer", "tokenizer", 1, 0},
    {"vocab-size", "vocab_size", 1, 0}, {"joint-bpe", "joint_bpe", 1, 0},
    {"spm-type", "spm_type", 1, 0},
    {"batch", "batch", 1, 0}, {"batch-tokens", "batch_tokens", 1, 0}, {"seed", "seed", 1, 0},
    {"valid", "valid", 1, 0}, {"valid-src", "valid_src", 1, 0},
    {"valid-tgt", "valid_tgt", 1, 0}, {"no-bleu", "valid_bleu", 1, 1},
    /* how it learns from here on */
    {"epochs", "epochs", 0, 0}, {"schedule", "schedule", 0, 0}, {"lr", "lr", 0, 0},
    {"warmup", "warmup", 0, 0}, {"lr-factor", "lr_factor", 0, 0}, {"beta1", "beta1", 0, 0},
    {"beta2", "beta2", 0, 0}, {"adam-eps", "adam_eps", 0, 0},
    {"weight-decay", "weight_decay", 0, 0}, {"clip", "clip", 0, 0},
    {"label-smoothing", "label_smoothing", 0, 0}, {"loss", "loss", 0, 0},
    {"patience", "patience", 0, 0}, {"keep-epochs", "keep_epochs", 0, 0},
    {"minutes", "minutes", 0, 0}, {"checkpoint-every", "checkpoint_every", 0, 0},
    {"skip-nonfinite", "skip_nonfinite", 0, 0}, {"precision", "precision", 0, 0},
};
#define N_OF(a) (int)(sizeof a / sizeof *a)

/* --resume: out's recorded options become the defaults, the command line is parsed again
 * over them, and each difference is checked (resume.h). 0, or the exit status. */
static int resume_options(resume_record *rec, const char *out, const opt_spec *opts, int argc,
                          char **argv)
{
    if (resume_start(rec, out)) return 1;
    const int aligned = cJSON_GetObjectItemCaseSensitive(rec->train, "tgt") != NULL;
    const resume_table tables[] = {
        {0, model_options, N_OF(model_options)},
        {1, aligned ? aligned_data : tsv_data, N_OF(tsv_data)},
        {1, train_options, N_OF(train_options)},
    };
    return resume_finish(rec, tables, N_OF(tables), opts, argc, argv, "qkv train");
}

static int train_main(int argc, char **argv, cli_ranks *job)
{
    const qkv_reducer *ranks = &job->reducer;
    qkv_transformer_config cfg = qkv_transformer_default_config();
    qkv_train_options o = qkv_train_default_options();
    const char *data = NULL, *src_path = NULL, *tgt_path = NULL, *out = NULL, *act = "relu",
               *tie = "none", *loss = "token", *tokenizer = "word", *schedule = "constant",
               *valid = NULL, *valid_src = NULL, *valid_tgt = NULL, *precision = "fp32",
               *spm_type = NULL; /* unigram; NULL so that runs of other tokenizers record none */
    int layers = 2, enc_layers = -1, dec_layers = -1, num_steps = 10, num_examples = 0,
        min_freq = 2, threads = 0, quiet = 0, every = 10, vocab_size = 8000, joint_bpe = 0,
        no_bleu = 0, overwrite = 0;
    float minutes = 0.0f;
    o.seed = 0;
    resume_record rec = {0};
    run_dir rd = {.lock_fd = -1};
    const opt_spec opts[] = {
        {"data", OPT_STRING, &data,
         "sentence pairs, source<TAB>target per line (d2l's fra.txt)", NULL},
        {"src", OPT_STRING, &src_path, "source sentences, one per line (with --tgt)", NULL},
        {"tgt", OPT_STRING, &tgt_path, "target sentences, line-aligned with --src", NULL},
        {"out", OPT_STRING, &out, "model directory to write", NULL},
        {"tokenizer", OPT_STRING, &tokenizer, "word (d2l's words), bpe (subwords of them) or spm "
                                              "(SentencePiece on raw, cased text)", NULL},
        {"vocab-size", OPT_INT, &vocab_size,
         "bpe, spm: tokens per vocabulary, reserved ones included", "[5, 1048576]"},
        {"joint-bpe", OPT_FLAG, &joint_bpe,
         "bpe, spm: one encoding and vocabulary for both languages", NULL},
        {"spm-type", OPT_STRING, &spm_type,
         "spm: unigram (the default) or bpe, SentencePiece's model types", NULL},
        {"d-model", OPT_INT, &cfg.d_model, "model width", ARG_D_MODEL},
        {"heads", OPT_INT, &cfg.heads, "attention heads", ARG_D_MODEL},
        {"ffn", OPT_INT, &cfg.ffn, "hidden size of the position-wise FFN", ARG_FFN},
        {"layers", OPT_INT, &layers, "encoder and decoder blocks", ARG_LAYERS},
        {"enc-layers", OPT_INT, &enc_layers, "encoder blocks (overrides --layers)", ARG_LAYERS_GE0},
        {"dec-layers", OPT_INT, &dec_layers, "decoder blocks (overrides --layers)", ARG_LAYERS},
        {"dropout", OPT_FLOAT, &cfg.dropout, "dropout rate", ARG_RATE},
        {"max-len", OPT_INT, &cfg.max_len, "longest sequence the model accepts", ARG_MAX_LEN},
        {"bias", OPT_FLAG, &cfg.bias, "biases in the attention projections", NULL},
        {"pre-norm", OPT_FLAG, &cfg.pre_norm,
         "x + Sublayer(LayerNorm(x)) instead of post-norm", NULL},
        {"final-norm", OPT_FLAG, &cfg.final_norm, "a LayerNorm after each stack", NULL},
        {"act", OPT_STRING, &act, "FFN activation: relu, gelu or silu (swish)", NULL},
        {"tie", OPT_STRING, &tie, "weight sharing: none, output (target emb = output), all", NULL},
        {"learned-pos", OPT_FLAG, &cfg.learned_pos,
         "learned instead of sinusoidal positions", NULL},
        {"batch", OPT_INT, &o.batch, "sentence pairs per batch", "[1, 65536]"},
        {"batch-tokens", OPT_INT, &o.batch_tokens,
         "batches of similar length, pairs x longest <= N (0: --batch)", "[0, 16777216]"},
        {"num-steps", OPT_INT, &num_steps,
         "tokens per sentence after truncation/padding", "[2, 65536]"},
        {"schedule", OPT_STRING, &schedule,
         "learning rate: constant (--lr) or noam (the paper's warmup)", NULL},
        {"lr", OPT_FLOAT, &o.lr, "Adam learning rate (constant schedule)", ARG_LR},
        {"warmup", OPT_INT, &o.warmup, "noam: warmup steps", ARG_GE1},
        {"lr-factor", OPT_FLOAT, &o.lr_factor,
         "noam: lr = F d_model^-0.5 min(step^-0.5, step warmup^-1.5)", ARG_LR_FACTOR},
        {"beta1", OPT_FLOAT, &o.beta1, "Adam's first-moment decay", ARG_RATE},
        {"beta2", OPT_FLOAT, &o.beta2, "Adam's second-moment decay", ARG_RATE},
        {"adam-eps", OPT_FLOAT, &o.adam_eps, "Adam's epsilon", ARG_ADAM_EPS},
        {"weight-decay", OPT_FLOAT, &o.weight_decay, "decoupled weight decay (AdamW)", ARG_WEIGHT_DECAY},
        {"clip", OPT_FLOAT, &o.clip, "clip the global gradient norm to this (0: off)", ARG_GE0},
        {"label-smoothing", OPT_FLOAT, &o.label_smoothing, "label smoothing epsilon", ARG_RATE},
        {"loss", OPT_STRING, &loss,
         "gradient of: token (per-token mean) or d2l (d2l's scaling)", NULL},
        {"epochs", OPT_INT, &o.epochs, "passes over the data", ARG_GE1},
        {"minutes", OPT_FLOAT, &minutes,
         "time budget: no epoch starts that would end after it (0: none)", ARG_GE0},
        {"num-examples", OPT_INT, &num_examples, "use the first N pairs (0: all)", ARG_GE0},
        {"min-freq", OPT_INT, &min_freq, "word: rarer tokens become <unk>", ARG_GE0},
        {"valid", OPT_STRING, &valid,
         "held-out pairs (TSV): loss and BLEU every epoch, best model", NULL},
        {"valid-src", OPT_STRING, &valid_src, "held-out source sentences (with --valid-tgt)", NULL},
        {"valid-tgt", OPT_STRING, &valid_tgt,
         "held-out references, line-aligned with --valid-src", NULL},
        {"no-bleu", OPT_FLAG, &no_bleu, "validation loss only (no decoding for BLEU)", NULL},
        {"patience", OPT_INT, &o.patience,
         "stop after N validations without a new best (0: never)", ARG_GE0},
        {"keep-epochs", OPT_INT, &o.keep_epochs,
         "keep the last N epochs' models in DIR/epoch-NNN", ARG_GE0},
        {"seed", OPT_U64, &o.seed, "initialisation, data order and dropout", ARG_SEED},
        {"threads", OPT_INT, &threads, "threads per rank (0: all cores; under mpirun, shared among the ranks of a machine)", ARG_THREADS},
        {"precision", OPT_STRING, &precision, CLI_TRAIN_PRECISION_HELP, NULL},
        {"checkpoint-every", OPT_INT, &o.checkpoint_every,
         "also checkpoint every N steps", ARG_GE0},
        {"skip-nonfinite", OPT_FLAG, &o.skip_nonfinite,
         "skip steps with NaN/Inf instead of stopping", NULL},
        {"resume", OPT_FLAG, &o.resume, "continue from DIR/checkpoint.safetensors, with the "
                                        "options it recorded (those defining the model or data "
                                        "cannot change)", NULL},
        {"overwrite", OPT_FLAG, &overwrite, "replace what DIR holds (a trained model, another "
                                            "run, files of a run's names)", NULL},
        {"stop-after-steps", OPT_INT, &o.stop_after_steps,
         "checkpoint and stop at this step (0: never)", ARG_GE0},
        {"log-every", OPT_INT, &every, "print a line every N epochs (without a terminal)", ARG_GE1},
        {"quiet", OPT_FLAG, &quiet, "no progress output", NULL},
        {NULL, 0, NULL, NULL, NULL},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv train (--data FILE.tsv | --src FILE --tgt FILE) --out DIR [options]");
    if (rc) return rc > 0 ? 0 : 2;
    const int writer = cli_ranks_writer(job, &quiet);
    o.reducer = ranks;
    if (o.resume && overwrite) {
        fprintf(stderr, "qkv train: --resume continues the run in --out, --overwrite replaces "
                "it: give one\n");
        goto usage;
    }
    if (out && o.resume) { /* a resumed run claims its directory first: it reads it */
        rc = 1;
        if (run_dir_claim_writer(&rd, out, &RUN_TRANSFORMER, RUN_RESUME, writer, argc, argv) ||
            (rc = resume_options(&rec, out, opts, argc, argv)))
            goto end;
    }
    if (!out || (!data && !(src_path && tgt_path))) {
        fprintf(stderr, "qkv train: needs --out and either --data or --src with --tgt\n");
        goto usage;
    }
    if (data && (src_path || tgt_path)) {
        fprintf(stderr, "qkv train: --data is the pairs in one file, --src with --tgt in two: "
                "give one\n");
        goto usage;
    }
    o.minutes = minutes;
    if (num_steps < 2 || num_steps > cfg.max_len || every < 1) {
        fprintf(stderr, "qkv train: --num-steps must be in [2, --max-len] and --log-every >= 1\n");
        goto usage;
    }
    if ((valid_src != NULL) != (valid_tgt != NULL) || (valid && valid_src)) {
        fprintf(stderr, "qkv train: validation is --valid FILE.tsv or --valid-src with --valid-tgt\n");
        goto usage;
    }
    if (!valid && !valid_src && (args_given(argc, argv, 2, "patience") || no_bleu)) {
        fprintf(stderr, "qkv train: --patience and --no-bleu need validation (--valid, or "
                "--valid-src with --valid-tgt)\n");
        goto usage;
    }
    const int bpe = !strcmp(tokenizer, "bpe") || !strcmp(tokenizer, "spm");
    if ((strcmp(tokenizer, "word") && !bpe) ||
        (strcmp(schedule, "constant") && strcmp(schedule, "noam")) ||
        (spm_type && strcmp(spm_type, "unigram") && strcmp(spm_type, "bpe"))) {
        fprintf(stderr, "qkv train: --tokenizer is word|bpe|spm, --spm-type unigram|bpe, "
                "--schedule constant|noam\n");
        goto usage;
    }
    const int noam = !strcmp(schedule, "noam");
    if (args_typed(argc, argv, 2, noam ? "lr" : "warmup") ||
        (!noam && args_typed(argc, argv, 2, "lr-factor"))) {
        fprintf(stderr, "qkv train: --lr sets the constant schedule's rate; --warmup and "
                "--lr-factor shape the noam schedule's (this run's is %s)\n", schedule);
        goto usage;
    }
    if (!bpe && (joint_bpe || args_given(argc, argv, 2, "vocab-size"))) {
        fprintf(stderr, "qkv train: --joint-bpe and --vocab-size are for --tokenizer bpe\n");
        goto usage;
    }
    if (cli_positions_fit("qkv train", "max-len", cfg.max_len, cfg.d_model)) goto usage;
    if (bpe && vocab_size <= QKV_N_RESERVED) {
        fprintf(stderr, "qkv train: --vocab-size must exceed the %d reserved tokens\n",
                QKV_N_RESERVED);
        goto usage;
    }
    cfg.enc_layers = enc_layers >= 0 ? enc_layers : layers;
    cfg.dec_layers = dec_layers >= 0 ? dec_layers : layers;
    cfg.act = !strcmp(act, "gelu") ? QKV_ACT_GELU : !strcmp(act, "silu") ? QKV_ACT_SILU : QKV_ACT_RELU;
    cfg.tie = !strcmp(tie, "all") ? QKV_TIE_ALL : !strcmp(tie, "output") ? QKV_TIE_OUTPUT : QKV_TIE_NONE;
    if ((strcmp(act, "relu") && strcmp(act, "gelu") && strcmp(act, "silu")) ||
        (strcmp(tie, "none") && strcmp(tie, "output") && strcmp(tie, "all")) ||
        (strcmp(loss, "token") && strcmp(loss, "d2l"))) {
        fprintf(stderr, "qkv train: --act is relu|gelu|silu, --tie none|output|all, --loss token|d2l\n");
        goto usage;
    }
    qkv_precision prec;
    if (cli_train_precision(precision, &prec)) goto usage;
    o.d2l_loss_scale = !strcmp(loss, "d2l");
    o.schedule = !strcmp(schedule, "noam") ? QKV_LR_NOAM : QKV_LR_CONSTANT;
    o.out_dir = out;
    cli_threads(cli_ranks_threads(job, threads));

    train_record r = {num_steps, num_examples, min_freq, vocab_size, joint_bpe, !no_bleu,
                      data ? data : src_path, data ? NULL : tgt_path, bpe ? tokenizer : "word",
                      valid, valid_src, valid_tgt, loss, precision, &o, rec.history, writer,
                      spm_type ? spm_type : "unigram"};
    rc = 1;
    if (o.resume || !run_dir_claim_writer(&rd, out, &RUN_TRANSFORMER,
                                          overwrite ? RUN_OVERWRITE : RUN_NEW, writer, argc, argv))
        rc = run(&r, &o, &cfg, prec, quiet, every);
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
