/* SPDX-License-Identifier: MIT */
/* qkv translate: greedy or beam-search translation of sentences from stdin or a file.
 * qkv eval: translate a held-out corpus and score it with BLEU. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>


#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/figures.h"

/* What translate and eval share: the decoding options, parsed into o (and the choices
 * beside it), and the model they open. */
typedef struct {
    qkv_translate_options o;
    opt_choice stop, precision, device;
    const char *model;
    int threads;
} decode_cli;

static decode_cli decode_defaults(void)
{
    return (decode_cli){qkv_translate_default_options(),
                        {QKV_ENUM_BEAM_STOP, NULL, QKV_BEAM_STOP_BOUND},
                        {QKV_ENUM_PRECISION, NULL, QKV_PRECISION_FP32},
                        {QKV_ENUM_DEVICE, NULL, QKV_DEVICE_CPU}, NULL, 0};
}

#define DECODE_OPTIONS(c)                                                                      \
    {"model", OPT_DIR, &(c).model, "model directory", NULL, NULL},                             \
    {"m", OPT_ALIAS, "model", NULL, NULL, NULL},                                               \
    {"max-len", OPT_INT, &(c).o.max_len, "longest translation in tokens, a hard cap (0: the "  \
     "model's max_len)", "[0, 65536]", NULL},                                                  \
    {"max-len-a", OPT_FLOAT, &(c).o.max_len_a, "and each sentence's own limit, a * n + b "     \
     "tokens for a source of n tokens (a = b = 0: none)", "[0, 1000]", NULL},                  \
    {"max-len-b", OPT_INT, &(c).o.max_len_b, "b of --max-len-a", "[0, 65536]", NULL},          \
    {"beam", OPT_INT, &(c).o.beam, "beam width K (1: greedy decoding)", "[1, 256]", NULL},     \
    {"beam-stop", OPT_CHOICE, &(c).stop, "when beam search ends a sentence: bound (when no "   \
     "live hypothesis can beat the n best), count (when K have finished), or as "              \
     "transformers' BeamSearchScorer with lp = |Y|^alpha: hf (early_stopping=False), "         \
     "hf-early (True: when K have finished) or hf-never (\"never\")", NULL, NULL},             \
    {"length-penalty", OPT_FLOAT, &(c).o.alpha, "beam search scores log P / lp with lp = ((5 " \
     "+ |Y|) / 6)^alpha, or |Y|^alpha under the hf rules (where the default is 1, as "         \
     "transformers')", "[0, 100]", NULL},                                                      \
    {"alpha", OPT_ALIAS, "length-penalty", NULL, NULL, NULL},                                  \
    {"batch", OPT_INT, &(c).o.batch, "sentences translated together", "[1, 65536]", NULL},     \
    {"threads", OPT_INT, &(c).threads, "threads (0: all cores)", ARG_THREADS, NULL},           \
    {"t", OPT_ALIAS, "threads", NULL, NULL, NULL},                                             \
    {"precision", OPT_CHOICE, &(c).precision, CLI_PRECISION_HELP, NULL, NULL},                 \
    {"device", OPT_CHOICE, &(c).device, CLI_DEVICE_HELP, NULL, NULL}

/* The model directory's decoding defaults (generation.json, qkv_generation_defaults_read) for
 * each option the command line does not give. *alpha_set: whether it gave the length penalty.
 * 0, or 1 after printing why. */
static int generation_defaults(decode_cli *c, const opt_spec *opts, int argc, char **argv,
                               int *alpha_set)
{
    qkv_generation_defaults g;
    qkv_error err = {0};
    if (qkv_generation_defaults_read(&g, c->model, &err))
        return fprintf(stderr, "qkv: %s\n", err.msg), 1;
    if (g.beam && !args_given(argc, argv, 2, opts, "beam")) c->o.beam = g.beam;
    if (g.has_length_penalty && !args_given(argc, argv, 2, opts, "length-penalty"))
        c->o.alpha = (float)g.length_penalty, *alpha_set = 1;
    if (g.beam_stop >= 0 && !args_given(argc, argv, 2, opts, "beam-stop"))
        c->stop.value = g.beam_stop;
    if (g.max_len && !args_given(argc, argv, 2, opts, "max-len")) c->o.max_len = g.max_len;
    return 0;
}

/* What translate and eval do before reading their input: check the decoding options, set
 * the threads, open the model at the asked precision (refused here, before any input is
 * read, on a CPU without bf16), or without --precision at the model's own (fp32, or int8
 * for an int8 model file: qkv quantize). The length penalty's default, when no option (nor
 * the model's generation.json) set it, follows the stopping rule: GNMT's alpha 0 (none) for
 * qkv's rules, transformers' length_penalty 1.0 for the hf ones. Returns 0, or the exit
 * status after printing why. */
static int open_model(qkv_translator **t, decode_cli *c, const char *cmd, const opt_spec *opts,
                      int argc, char **argv)
{
    qkv_translate_options *o = &c->o;
    int alpha_set = args_given(argc, argv, 2, opts, "length-penalty");
    if (generation_defaults(c, opts, argc, argv, &alpha_set)) return 1;
    o->stop = (qkv_beam_stop)c->stop.value;
    const int hf = o->stop == QKV_BEAM_STOP_HF || o->stop == QKV_BEAM_STOP_HF_EARLY ||
                   o->stop == QKV_BEAM_STOP_HF_NEVER;
    if (!alpha_set) o->alpha = hf ? 1.0f : 0.0f;
    if (o->beam < 1 || o->n_best < 1 || o->n_best > o->beam || !(o->alpha >= 0.0f) ||
        !isfinite(o->alpha)) {
        fprintf(stderr, "qkv %s: needs --beam >= 1, 1 <= --n-best <= --beam and a finite "
                "--length-penalty >= 0\n", cmd);
        return 2;
    }
    if (o->max_len < 0 || !(o->max_len_a >= 0.0f) || o->max_len_a > 1e6f || o->max_len_b < 0) {
        fprintf(stderr, "qkv %s: needs --max-len >= 0, --max-len-a in [0, 1e6] and "
                "--max-len-b >= 0\n", cmd);
        return 2;
    }
    o->precision = (qkv_precision)c->precision.value;
    const qkv_device device = (qkv_device)c->device.value;
    if (cli_device(device, cmd)) return 1;
    cli_threads(c->threads);
    qkv_error err = {0};
    *t = NULL;
    if (!qkv_translator_open(t, c->model, &err) && !args_given(argc, argv, 2, opts, "precision"))
        o->precision = qkv_transformer_get_precision(qkv_translator_model(*t)); /* its own */
    if (!*t || qkv_transformer_set_device(qkv_translator_model(*t), device, &err) ||
        qkv_transformer_set_precision(qkv_translator_model(*t), o->precision, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        qkv_translator_free(*t);
        return 1;
    }
    return 0;
}

/* first: the number of r's first sentence (its line) less one. */
static void warn_truncated(qkv_translator *t, const qkv_translations *r, long first)
{
    if (!r->truncated) return;
    fprintf(stderr, "qkv: warning: sentence %ld has %d tokens with <eos>; the model accepts %d, "
            "so it is truncated (and others like it)\n", first + r->first_truncated + 1,
            r->first_truncated_len, qkv_transformer_get_config(qkv_translator_model(t))->max_len);
}

/* A source that is mostly tokens the model does not know is translated all the same (a
 * fluent sentence unrelated to it): say so, naming its line. */
static void warn_unknown(const qkv_translations *r, long first, const char *name)
{
    for (int i = 0; r->unknown && i < r->count; i++)
        if (r->src_len[i] > 0 && 2 * r->unknown[i] >= r->src_len[i]) /* half or more */
            fprintf(stderr, "qkv: warning: %s:%ld: %d of its %d tokens are unknown to the model "
                    "(<unk>); the translation is unreliable\n", name, first + i + 1,
                    r->unknown[i], r->src_len[i]);
}

/* Nonzero when a write fails (the reason in errno). */
static int print_translations(const qkv_translations *r, long first)
{
    int lost = 0;
    for (int h = 0; h < r->count * r->n_best && !lost; h++) {
        if (!r->text[h]) continue; /* fewer hypotheses than asked exist */
        if (r->n_best == 1) lost = puts(r->text[h]) == EOF;
        else lost = printf("%ld ||| %s ||| %.6f\n", first + h / r->n_best, r->text[h],
                           r->score[h]) < 0;
    }
    return lost;
}

/* One line in, its translation out and flushed, until the input ends: translate as a filter
 * in a pipe or at a terminal. The exit status. */
static int translate_stream(qkv_translator *t, FILE *in, const char *name,
                            const qkv_translate_options *o)
{
    char *line = NULL, where[300];
    size_t cap = 0, n;
    long number = 0;
    int rc = 0, got;
    while (!rc && (got = cli_read_line(in, name, number + 1, &line, &cap, &n)) != 0) {
        if (got < 0) {
            rc = 1;
            break;
        }
        qkv_sentences words = {0};
        qkv_translations r = {0};
        qkv_error err = {0};
        snprintf(where, sizeof where, "%s line %ld", name, ++number);
        if (qkv_tokenizer_words(qkv_translator_tokenizer(t), &words, line, n, where, &err) ||
            qkv_translate_words(&r, t, &words, o, &err)) {
            fprintf(stderr, "qkv: %s\n", err.msg);
            rc = 1;
        } else {
            if (!words.count) puts(""); /* an empty line: an empty translation */
            warn_truncated(t, &r, number - 1);
            warn_unknown(&r, number - 1, name);
            if (print_translations(&r, number - 1) || fflush(stdout)) {
                fprintf(stderr, "qkv: cannot write the translations (standard output): %s\n",
                        strerror(errno));
                rc = 1;
            }
        }
        qkv_sentences_free(&words);
        qkv_translations_free(&r);
    }
    free(line);
    return rc;
}

/* The attention behind each sentence's (best) translation, drawn from the model's tokens. */
static int draw_attention(qkv_translator *t, const qkv_sentences *words,
                          const qkv_translations *r, const char *dir)
{
    qkv_sentences src = {0};
    qkv_viz *viz = NULL;
    qkv_error err = {0};
    if (fig_mkdirs(dir)) return -1;
    if (qkv_tokenizer_tokens(qkv_translator_tokenizer(t), &src, words, 0, &err) ||
        qkv_viz_open(&viz, NULL, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        qkv_sentences_free(&src);
        return -1;
    }
    int bad = 0;
    for (int i = 0; i < src.count && !bad; i++) {
        const size_t best = (size_t)i * r->n_best;
        bad = fig_attention(viz, t, dir, i + 1, src.tokens + src.start[i],
                            qkv_sentence_len(&src, i), r->ids + best * r->max_len,
                            r->len[best] > 0 ? r->len[best] : 0);
    }
    qkv_viz_close(viz);
    if (!bad)
        fprintf(stderr, "qkv translate: attention figures of %d sentence%s in %s/\n", src.count,
                src.count == 1 ? "" : "s", dir);
    qkv_sentences_free(&src);
    return bad ? -1 : 0;
}

/* A whole file (or what stdin holds) translated in batches, with a progress line on a
 * terminal, and attention figures into the directory attention (NULL: none). The exit status. */
static int translate_file(qkv_translator *t, const char *input, const char *attention,
                          const qkv_translate_options *o)
{
    size_t len;
    char *text = cli_read_all(input, QKV_MAX_TEXT_BYTES, &len);
    qkv_sentences words = {0};
    qkv_translations r = {0};
    qkv_error err = {0};
    int rc = 1;
    if (!text) goto done;
    if (qkv_tokenizer_words(qkv_translator_tokenizer(t), &words, text, len,
                            input ? input : "stdin", &err) ||
        cli_translate_words(&r, t, &words, o, "qkv translate", &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        goto done;
    }
    warn_truncated(t, &r, 0);
    warn_unknown(&r, 0, input ? input : "stdin");
    if (print_translations(&r, 0) || fflush(stdout)) {
        fprintf(stderr, "qkv: cannot write the translations (standard output): %s\n",
                strerror(errno));
        goto done;
    }
    if (attention && draw_attention(t, &words, &r, attention)) goto done;
    rc = 0;
done:
    free(text);
    qkv_sentences_free(&words);
    qkv_translations_free(&r);
    return rc;
}

int cmd_translate(int argc, char **argv)
{
    const char *input = NULL, *attention = NULL, *source_lang = NULL, *target_lang = NULL;
    decode_cli c = decode_defaults();
    qkv_translate_options *const o = &c.o;
    const opt_spec opts[] = {
        {"input", OPT_FILE, &input, "sentences, one per line (default: stdin)", NULL, NULL},
        {"i", OPT_ALIAS, "input", NULL, NULL, NULL},
        {"source-lang", OPT_STRING, &source_lang,
         "a multilingual model's source language (NLLB's deu_Latn, M2M100's de)", NULL, NULL},
        {"target-lang", OPT_STRING, &target_lang,
         "its target language (NLLB's eng_Latn, M2M100's en, OPUS-MT's fra of >>fra<<)", NULL,
         NULL},
        {"attention", OPT_DIR, &attention,
         "draw every sentence's attention into this directory", NULL, NULL},
        DECODE_OPTIONS(c),
        {"n-best", OPT_INT, &o->n_best,
         "print the M best hypotheses: i ||| text ||| score", "[1, 256]", NULL},
        {0},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv translate --model DIR [--input FILE] [--beam N [--beam-stop "
                        "RULE] [--length-penalty FLOAT] [--n-best N]] [--attention DIR]\n"
                        "Translates sentences, one per line, from --input or standard input.");
    if (rc) return rc > 0 ? 0 : 2;
    if (!c.model) {
        fprintf(stderr, "qkv translate: needs --model DIR\n");
        return 2;
    }
    qkv_translator *t;
    if ((rc = open_model(&t, &c, "translate", opts, argc, argv))) return rc;
    qkv_error lerr = {0};
    if (qkv_translator_set_languages(t, source_lang, target_lang, &lerr)) {
        fprintf(stderr, "qkv translate: %s\n", lerr.msg);
        qkv_translator_free(t);
        return 2;
    }
    /* A file is translated in batches; a pipe or a terminal line by line, each translation
     * printed as soon as it is made (attention figures need the batch path) */
    struct stat st;
    qkv_error open_err = {0};
    FILE *in = input ? qkv_open_file(input, 0, &open_err) : stdin;
    if (!in) {
        fprintf(stderr, "qkv: %s\n", open_err.msg);
        qkv_translator_free(t);
        return 1;
    }
    if (!fstat(fileno(in), &st) && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "qkv: %s: is a directory\n", input ? input : "stdin");
        if (input) fclose(in);
        qkv_translator_free(t);
        return 1;
    }
    if (!attention && (fstat(fileno(in), &st) || !S_ISREG(st.st_mode))) {
        rc = translate_stream(t, in, input ? input : "stdin", o);
        if (input) fclose(in);
        qkv_translator_free(t);
        return rc;
    }
    if (input) fclose(in);
    rc = translate_file(t, input, attention, o);
    qkv_translator_free(t);
    return rc;
}

/* Corpus BLEU-4 and d2l's mean BLEU (k = 2) of the translations r against the references,
 * over words: a reference word gets its id among the references' words, a translated word
 * the same id or, unknown to the references, one that matches nothing. */
static int print_bleu(const qkv_translator *t, const qkv_corpus *c, const qkv_translations *r,
                      int show)
{
    qkv_vocab words = {0};
    qkv_error err = {0};
    qkv_bleu_stats stats = {0};
    double d2l_sum = 0.0;
    const int n = c->source.count;
    int *hyp = malloc(((size_t)r->max_len + 1) * sizeof *hyp);
    int *ref = malloc((c->target.n_tokens ? c->target.n_tokens : 1) * sizeof *ref), rc = -1;
    if (!hyp || !ref) {
        fprintf(stderr, "qkv: out of memory\n");
        goto done;
    }
    if (qkv_vocab_build(&words, c->target.tokens, c->target.n_tokens, 1, &err)) goto fail;
    for (size_t k = 0; k < c->target.n_tokens; k++)
        ref[k] = qkv_vocab_id(&words, c->target.tokens[k]);
    for (int i = 0; i < n; i++) {
        const int *ri = ref + c->target.start[i], rn = qkv_sentence_len(&c->target, i);
        int hn = qkv_tokenizer_word_ids(qkv_translator_tokenizer(t), &words, hyp, r->max_len + 1,
                                        r->ids + (size_t)i * r->max_len, r->len[i]);
        double b = 0.0;
        if (hn < 0) {
            fprintf(stderr, "qkv: out of memory\n");
            goto done;
        }
        if (qkv_bleu_stats_add(&stats, hyp, hn, ri, rn, &err) ||
            qkv_bleu(&b, hyp, hn, ri, rn, 2, &err))
            goto fail;
        d2l_sum += b;
        if (i >= show) continue;
        for (int k = 0; k < qkv_sentence_len(&c->source, i); k++)
            printf("%s%s", k ? " " : "", c->source.tokens[c->source.start[i] + k]);
        printf(" => %s, bleu %.3f\n", r->text[i] ? r->text[i] : "", b);
    }
    printf("sentences: %d\ncorpus BLEU-4: %.2f\nmean d2l bleu (k=2): %.3f\n", n,
           100.0 * qkv_bleu_stats_score(&stats), n ? d2l_sum / n : 0.0);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "qkv: %s\n", err.msg);
done:
    free(hyp), free(ref);
    qkv_vocab_free(&words);
    return rc;
}

/* sacreBLEU's BLEU and chrF2 of the n hypotheses (NULL: empty) against the raw reference
 * lines, with each sentence's scores when per_sentence. Returns 0, or -1 after printing why. */
static int print_sacrebleu(const char *const *hyps, char **refs, int n, int per_sentence)
{
    qkv_sacrebleu_stats bleu = {0};
    qkv_chrf_stats chrf = {0};
    qkv_error err = {0};
    int dotted = 0;
    for (int i = 0; i < n; i++) {
        const char *h = hyps[i] ? hyps[i] : "";
        const size_t len = strlen(h);
        dotted += len >= 2 && !strcmp(h + len - 2, " .");
        qkv_sacrebleu_stats sb = {0};
        qkv_chrf_stats sc = {0};
        if (qkv_sacrebleu_add(&sb, h, refs[i], &err) || qkv_chrf_add(&sc, h, refs[i], &err)) {
            fprintf(stderr, "qkv: %s\n", err.msg);
            return -1;
        }
        for (int k = 0; k < QKV_SACREBLEU_ORDER; k++)
            bleu.correct[k] += sb.correct[k], bleu.total[k] += sb.total[k];
        bleu.hyp_len += sb.hyp_len, bleu.ref_len += sb.ref_len;
        for (int k = 0; k < QKV_CHRF_ORDER; k++)
            chrf.hyp[k] += sc.hyp[k], chrf.ref[k] += sc.ref[k], chrf.match[k] += sc.match[k];
        if (per_sentence)
            printf("%d\t%.6f\t%.6f\n", i + 1, qkv_sacrebleu_score(&sb, 1, NULL, NULL),
                   qkv_chrf_score(&sc));
    }
    if (dotted >= 100) /* as sacreBLEU warns */
        fprintf(stderr, "qkv eval: warning: %d translations end in a tokenised period (' .'): "
                "sacreBLEU scores detokenised text\n", dotted);
    char line[512];
    qkv_sacrebleu_format(line, sizeof line, &bleu);
    printf("%s\nchrF2|%s = %.2f\n", line, qkv_chrf_signature(), qkv_chrf_score(&chrf));
    return 0;
}

/* qkv eval --hyp FILE: scores translations made elsewhere (one a line) against --tgt or the
 * target column of --data, as `sacrebleu REF -i HYP -m bleu chrf -f text -w 2` would. */
static int score_file(const char *hyp_path, const char *data, const char *tgt_path,
                      int num_examples, int per_sentence)
{
    char *hyp_text = NULL, *ref_text = NULL, **hyps = NULL, **refs = NULL;
    int n = num_examples > 0 ? num_examples : -1, m = n, rc = 1;
    const int read = !cli_read_lines(hyp_path, 0, &n, &hyps, &hyp_text) &&
                     !cli_read_lines(data ? data : tgt_path, data != NULL, &m, &refs, &ref_text);
    if (read && n != m)
        fprintf(stderr, "qkv eval: %s has %d lines, the references %d\n", hyp_path, n, m);
    else if (read) {
        printf("sentences: %d\n", n);
        rc = print_sacrebleu((const char *const *)hyps, refs, n, per_sentence) ? 1 : 0;
    }
    free(hyps), free(hyp_text), free(refs), free(ref_text);
    return rc;
}

/* sacreBLEU's scores of the n translations r against the references as written (sacreBLEU
 * scores raw text, not the corpus's words), from the file refs (tsv: its second column), and
 * the first `show` translations with their own BLEU. The exit status. */
static int eval_sacrebleu(const qkv_translations *r, const char *refs_path, int tsv, int n,
                          int per_sentence, int show)
{
    char *ref_text = NULL, **refs = NULL;
    int rc = cli_read_lines(refs_path, tsv, &n, &refs, &ref_text) ||
             print_sacrebleu((const char *const *)r->text, refs, n, per_sentence) ? 1 : 0;
    for (int i = 0; !rc && i < show && i < n; i++) {
        qkv_sacrebleu_stats sb = {0};
        qkv_sacrebleu_add(&sb, r->text[i] ? r->text[i] : "", refs[i], NULL);
        printf("%d: %s => BLEU %.2f\n", i + 1, r->text[i] ? r->text[i] : "",
               qkv_sacrebleu_score(&sb, 1, NULL, NULL));
    }
    free(refs), free(ref_text);
    return rc;
}

int cmd_eval(int argc, char **argv)
{
    static const char *const metrics[] = {"sacrebleu", "d2l", "all", NULL};
    enum { METRIC_SACREBLEU, METRIC_D2L, METRIC_ALL };
    const char *data = NULL, *src_path = NULL, *tgt_path = NULL, *hyp_path = NULL;
    int num_examples = 0, show = 0, per_sentence = 0;
    opt_choice metric = {0, metrics, METRIC_SACREBLEU};
    decode_cli c = decode_defaults();
    const opt_spec opts[] = {
        {"data", OPT_FILE, &data, "sentence pairs, source<TAB>target per line", NULL, NULL},
        {"d", OPT_ALIAS, "data", NULL, NULL, NULL},
        {"src", OPT_FILE, &src_path, "source sentences (with --tgt)", NULL, NULL},
        {"tgt", OPT_FILE, &tgt_path, "reference translations, line-aligned with --src", NULL,
         NULL},
        {"hyp", OPT_FILE, &hyp_path, "score these translations (one a line) against --tgt or "
         "--data's targets instead of translating (no --model)", NULL, NULL},
        {"num-examples", OPT_INT, &num_examples, "use the first N pairs (0: all)", ARG_GE0, NULL},
        {"metric", OPT_CHOICE, &metric, "sacrebleu: BLEU and chrF2 of the detokenised text as "
         "sacreBLEU's defaults score it; d2l: BLEU-4 over the model's words and d2l's mean "
         "BLEU; all: both", NULL, NULL},
        {"per-sentence", OPT_FLAG, &per_sentence, "also print each sentence's sacreBLEU "
         "(sentence_bleu: effective order) and chrF2: line<TAB>BLEU<TAB>chrF2", NULL, NULL},
        DECODE_OPTIONS(c),
        {"show", OPT_INT, &show, "print the first N translations with their BLEU", ARG_GE0, NULL},
        {0},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv eval --model DIR (--data FILE | --src FILE --tgt FILE) "
                        "[--beam N [--beam-stop RULE] [--length-penalty FLOAT]] [--metric "
                        "sacrebleu|d2l|all]\n"
                        "       qkv eval --hyp FILE (--tgt FILE | --data FILE)\n"
                        "Translates a held-out corpus and scores it, or scores translations "
                        "made elsewhere.");
    if (rc) return rc > 0 ? 0 : 2;
    const char *model = c.model;
    const int want_sacre = metric.value != METRIC_D2L, want_d2l = metric.value != METRIC_SACREBLEU;
    if (hyp_path) {
        if (model || src_path || !(data || tgt_path) || (data && tgt_path) || want_d2l) {
            fprintf(stderr, "qkv eval: --hyp scores a file of translations against --tgt (or "
                    "--data): no --model, --src or --metric d2l\n");
            return 2;
        }
        return score_file(hyp_path, data, tgt_path, num_examples, per_sentence);
    }
    if (!model || (!data && !(src_path && tgt_path)) || (data && (src_path || tgt_path))) {
        fprintf(stderr, "qkv eval: needs --model and either --data or --src with --tgt\n");
        return 2;
    }
    qkv_translator *t;
    if ((rc = open_model(&t, &c, "eval", opts, argc, argv))) return rc;
    qkv_corpus corpus = {0};
    qkv_translations r = {0};
    qkv_error err = {0};
    rc = 1;
    /* a model that reads raw text is scored on raw text, its references cased */
    const int raw = qkv_translator_tokenizer(t)->keep_case;
    /* in NFC for a cased byte-pair model, as its training corpus was (qkv_tokenizer_words) */
    const int nfc = raw && qkv_translator_tokenizer(t)->kind == QKV_TOKENIZER_BPE;
    if ((data ? (raw ? qkv_corpus_read_tsv_raw : qkv_corpus_read_tsv)(&corpus, data, num_examples,
                                                                      &err)
              : (raw ? qkv_corpus_read_aligned_raw : qkv_corpus_read_aligned)(
                    &corpus, src_path, tgt_path, num_examples, &err)) ||
        (nfc && qkv_corpus_nfc(&corpus, &err)) ||
        cli_translate_words(&r, t, &corpus.source, &c.o, "qkv eval", &err))
        fprintf(stderr, "qkv: %s\n", err.msg);
    else {
        warn_truncated(t, &r, 0);
        int n = corpus.source.count;
        rc = 0;
        if (want_d2l) rc = print_bleu(t, &corpus, &r, want_sacre ? 0 : show) ? 1 : 0;
        else printf("sentences: %d\n", n);
        if (!rc && want_sacre)
            rc = eval_sacrebleu(&r, data ? data : tgt_path, data != NULL, n, per_sentence, show);
    }
    qkv_corpus_free(&corpus);
    qkv_translations_free(&r);
    qkv_translator_free(t);
    return rc;
}
