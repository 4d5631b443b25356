/* qkv translate: greedy or beam-search translation of sentences from stdin or a file.
 * qkv eval: translate a held-out corpus and score it with BLEU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/figures.h"

/* The decoding options both commands take; 0 on success, else a message was printed. */
static int check_beam(const char *cmd, const qkv_beam_options *o)
{
    if (o->beam < 1 || o->n_best < 1 || o->n_best > o->beam || !(o->alpha >= 0.0f)) {
        fprintf(stderr, "qkv %s: needs --beam >= 1, 1 <= --n-best <= --beam and --alpha >= 0\n",
                cmd);
        return -1;
    }
    return 0;
}

int cmd_translate(int argc, char **argv)
{
    const char *model = NULL, *input = NULL, *attention = NULL, *precision = "fp32";
    int max_len = 0, batch = 32, threads = 0;
    qkv_beam_options beam = {1, 1, 0, 0.0f};
    const opt_spec opts[] = {
        {"model", OPT_STRING, &model, "model directory"},
        {"input", OPT_STRING, &input, "sentences, one per line (default: stdin)"},
        {"attention", OPT_STRING, &attention, "draw every sentence's attention into this directory"},
        {"max-len", OPT_INT, &max_len, "longest translation in tokens (0: the training length)"},
        {"beam", OPT_INT, &beam.beam, "beam width K (1: greedy decoding)"},
        {"alpha", OPT_FLOAT, &beam.alpha, "length penalty ((5 + |Y|) / 6)^alpha of beam search"},
        {"n-best", OPT_INT, &beam.n_best, "print the M best hypotheses: i ||| text ||| score"},
        {"batch", OPT_INT, &batch, "sentences translated together"},
        {"threads", OPT_INT, &threads, "threads (0: all cores)"},
        {"precision", OPT_STRING, &precision, CLI_PRECISION_HELP},
        {NULL, 0, NULL, NULL},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv translate --model DIR [--input FILE] [--beam K [--alpha A] "
                        "[--n-best M]] [--attention OUTDIR]");
    if (rc) return rc > 0 ? 0 : 2;
    if (!model || batch < 1) {
        fprintf(stderr, "qkv translate: needs --model DIR (and --batch >= 1)\n");
        return 2;
    }
    if (check_beam("translate", &beam)) return 2;
    qkv_precision prec;
    if (cli_precision(precision, &prec)) return 2;
    cli_threads(threads);
    cli_model cm;
    if (cli_model_load(&cm, model)) return 1;
    qkv_error perr = {0};
    if (qkv_transformer_set_precision(cm.model, prec, &perr)) {
        fprintf(stderr, "qkv: %s\n", perr.msg);
        cli_model_free(&cm);
        return 1;
    }
    int limit = qkv_transformer_get_config(cm.model)->max_len;
    if (max_len <= 0) max_len = cm.num_steps ? cm.num_steps : 100;
    if (max_len > limit) max_len = limit;
    const int N = beam.n_best;
    size_t len;
    char *text = cli_read_all(input, &len);
    qkv_sentences src = {0};
    qkv_error err = {0};
    int *ids = NULL, *lens = NULL;
    double *scores = NULL;
    rc = 1;
    if (!text) goto done;
    if (cli_tokenize(&cm, &src, text, len, input ? input : "stdin", &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        goto done;
    }
    const size_t count = (size_t)(src.count ? src.count : 1) * N;
    ids = malloc(count * max_len * sizeof *ids), lens = malloc(count * sizeof *lens);
    scores = malloc(count * sizeof *scores);
    if (!ids || !lens || !scores ||
        cli_translate_beam(&cm, &src, max_len, batch, &beam, ids, lens, scores))
        goto done;
    for (int i = 0; i < src.count; i++)
        for (int k = 0; k < N; k++) {
            const size_t h = (size_t)i * N + k;
            if (lens[h] < 0) continue; /* fewer hypotheses than asked exist */
            char *line = cli_detokenize(&cm, ids + h * max_len, lens[h]);
            if (!line) goto done;
            if (N == 1) puts(line);
            else printf("%d ||| %s ||| %.6f\n", i, line, scores[h]);
            free(line);
        }
    if (fflush(stdout)) goto done;
    if (attention) { /* the weights behind each (best) translation, from the same model */
        qkv_viz *viz = NULL;
        qkv_error verr = {0};
        if (fig_mkdirs(attention)) goto done;
        if (qkv_viz_open(&viz, NULL, &verr)) {
            fprintf(stderr, "qkv: %s\n", verr.msg);
            goto done;
        }
        int bad = 0;
        for (int i = 0; i < src.count && !bad; i++)
            bad = fig_attention(viz, &cm, attention, i + 1, src.tokens + src.start[i],
                                qkv_sentence_len(&src, i), ids + (size_t)i * N * max_len,
                                lens[(size_t)i * N] > 0 ? lens[(size_t)i * N] : 0);
        qkv_viz_close(viz);
        if (bad) goto done;
        fprintf(stderr, "qkv translate: attention figures of %d sentence%s in %s/\n", src.count,
                src.count == 1 ? "" : "s", attention);
    }
    rc = 0;
done:
    free(text), free(ids), free(lens), free(scores);
    qkv_sentences_free(&src);
    cli_model_free(&cm);
    return rc;
}

int cmd_eval(int argc, char **argv)
{
    const char *model = NULL, *data = NULL, *src_path = NULL, *tgt_path = NULL,
               *precision = "fp32";
    int max_len = 0, batch = 32, threads = 0, num_examples = 0, show = 0;
    qkv_beam_options beam = {1, 1, 0, 0.0f};
    const opt_spec opts[] = {
        {"model", OPT_STRING, &model, "model directory"},
        {"data", OPT_STRING, &data, "sentence pairs, source<TAB>target per line"},
        {"src", OPT_STRING, &src_path, "source sentences (with --tgt)"},
        {"tgt", OPT_STRING, &tgt_path, "reference translations, line-aligned with --src"},
        {"num-examples", OPT_INT, &num_examples, "use the first N pairs (0: all)"},
        {"max-len", OPT_INT, &max_len, "longest translation in tokens (0: the training length)"},
        {"beam", OPT_INT, &beam.beam, "beam width K (1: greedy decoding)"},
        {"alpha", OPT_FLOAT, &beam.alpha, "length penalty ((5 + |Y|) / 6)^alpha of beam search"},
        {"batch", OPT_INT, &batch, "sentences translated together"},
        {"show", OPT_INT, &show, "print the first N translations with their BLEU"},
        {"threads", OPT_INT, &threads, "threads (0: all cores)"},
        {"precision", OPT_STRING, &precision, CLI_PRECISION_HELP},
        {NULL, 0, NULL, NULL},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv eval --model DIR (--data FILE.tsv | --src F --tgt F) [--beam K "
                        "[--alpha A]]");
    if (rc) return rc > 0 ? 0 : 2;
    if (!model || (!data && !(src_path && tgt_path)) || batch < 1) {
        fprintf(stderr, "qkv eval: needs --model and --data (or --src and --tgt)\n");
        return 2;
    }
    if (check_beam("eval", &beam)) return 2;
    qkv_precision prec;
    if (cli_precision(precision, &prec)) return 2;
    cli_threads(threads);
    cli_model cm;
    if (cli_model_load(&cm, model)) return 1;
    qkv_error perr = {0};
    if (qkv_transformer_set_precision(cm.model, prec, &perr)) {
        fprintf(stderr, "qkv: %s\n", perr.msg);
        cli_model_free(&cm);
        return 1;
    }
    int limit = qkv_transformer_get_config(cm.model)->max_len;
    if (max_len <= 0) max_len = cm.num_steps ? cm.num_steps : 100;
    if (max_len > limit) max_len = limit;
    qkv_corpus c = {0};
    qkv_sentences src = {0}; /* what the model reads: the source words or their pieces */
    qkv_vocab words = {0};  /* the reference words, so that BLEU compares words */
    qkv_error err = {0};
    int *ids = NULL, *lens = NULL, *ref = NULL, *hyp = NULL;
    rc = 1;
    if (data ? qkv_corpus_read_tsv(&c, data, num_examples, &err)
             : qkv_corpus_read_aligned(&c, src_path, tgt_path, num_examples, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        goto done;
    }
    if (cm.bpe && qkv_bpe_encode_sentences(&src, &cm.src_bpe, &c.source, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        goto done;
    }
    if (qkv_vocab_build(&words, c.target.tokens, c.target.n_tokens, 1, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        goto done;
    }
    const qkv_sentences *input = cm.bpe ? &src : &c.source;
    const int n = c.source.count;
    ids = malloc((size_t)n * max_len * sizeof *ids), lens = malloc((size_t)n * sizeof *lens);
    hyp = malloc(((size_t)max_len + 1) * sizeof *hyp);
    if (!ids || !lens || !hyp ||
        cli_translate_beam(&cm, input, max_len, batch, &beam, ids, lens, NULL))
        goto done;
    qkv_bleu_stats stats = {0};
    double d2l_sum = 0.0;
    for (int i = 0; i < n; i++) {
        /* BLEU over words: a reference word gets its id among the references' words, a
         * translated word the same id or, unknown to the references, one that matches nothing */
        int rn = qkv_sentence_len(&c.target, i);
        free(ref);
        ref = malloc((size_t)(rn ? rn : 1) * sizeof *ref);
        if (!ref) goto done;
        for (int k = 0; k < rn; k++)
            ref[k] = qkv_vocab_id(&words, c.target.tokens[c.target.start[i] + k]);
        int hn = cli_translation_words(&cm, &words, hyp, max_len + 1, ids + (size_t)i * max_len,
                                       lens[i]);
        double b = 0.0;
        if (qkv_bleu_stats_add(&stats, hyp, hn, ref, rn, &err) ||
            qkv_bleu(&b, hyp, hn, ref, rn, 2, &err)) {
            fprintf(stderr, "qkv: %s\n", err.msg);
            goto done;
        }
        d2l_sum += b;
        if (i < show) {
            char *line = cli_detokenize(&cm, ids + (size_t)i * max_len, lens[i]);
            if (!line) goto done;
            for (int t = 0; t < qkv_sentence_len(&c.source, i); t++)
                printf("%s%s", t ? " " : "", c.source.tokens[c.source.start[i] + t]);
            printf(" => %s, bleu %.3f\n", line, b);
            free(line);
        }
    }
    printf("sentences: %d\ncorpus BLEU-4: %.2f\nmean d2l bleu (k=2): %.3f\n", n,
           100.0 * qkv_bleu_stats_score(&stats), n ? d2l_sum / n : 0.0);
    rc = 0;
done:
    free(ids), free(lens), free(ref), free(hyp);
    qkv_corpus_free(&c);
    qkv_sentences_free(&src);
    qkv_vocab_free(&words);
    cli_model_free(&cm);
    return rc;
}
