/* qkv translate: greedy translation of sentences from stdin or a file.
 * qkv eval: translate a held-out corpus and score it with BLEU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/figures.h"

int cmd_translate(int argc, char **argv)
{
    const char *model = NULL, *input = NULL, *attention = NULL;
    int max_len = 0, batch = 32, threads = 0;
    const opt_spec opts[] = {
        {"model", OPT_STRING, &model, "model directory"},
        {"input", OPT_STRING, &input, "sentences, one per line (default: stdin)"},
        {"attention", OPT_STRING, &attention, "draw every sentence's attention into this directory"},
        {"max-len", OPT_INT, &max_len, "longest translation in tokens (0: the training length)"},
        {"batch", OPT_INT, &batch, "sentences translated together"},
        {"threads", OPT_INT, &threads, "threads (0: all cores)"},
        {NULL, 0, NULL, NULL},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv translate --model DIR [--input FILE] [--attention OUTDIR]");
    if (rc) return rc > 0 ? 0 : 2;
    if (!model || batch < 1) {
        fprintf(stderr, "qkv translate: needs --model DIR (and --batch >= 1)\n");
        return 2;
    }
    cli_threads(threads);
    cli_model cm;
    if (cli_model_load(&cm, model)) return 1;
    int limit = qkv_transformer_get_config(cm.model)->max_len;
    if (max_len <= 0) max_len = cm.num_steps ? cm.num_steps : 100;
    if (max_len > limit) max_len = limit;
    size_t len;
    char *text = cli_read_all(input, &len);
    qkv_sentences src = {0};
    qkv_error err = {0};
    int *ids = NULL, *lens = NULL;
    rc = 1;
    if (!text) goto done;
    if (cli_tokenize(&cm, &src, text, len, input ? input : "stdin", &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        goto done;
    }
    ids = malloc((size_t)(src.count ? src.count : 1) * max_len * sizeof *ids);
    lens = malloc((size_t)(src.count ? src.count : 1) * sizeof *lens);
    if (!ids || !lens || cli_translate(&cm, &src, max_len, batch, ids, lens)) goto done;
    for (int i = 0; i < src.count; i++) {
        size_t need = qkv_vocab_decode(NULL, 0, &cm.tgt, ids + (size_t)i * max_len, lens[i]);
        char *line = malloc(need + 1);
        if (!line) goto done;
        qkv_vocab_decode(line, need + 1, &cm.tgt, ids + (size_t)i * max_len, lens[i]);
        puts(line);
        free(line);
    }
    if (fflush(stdout)) goto done;
    if (attention) { /* the weights behind each translation, from the same model */
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
                                qkv_sentence_len(&src, i), ids + (size_t)i * max_len, lens[i]);
        qkv_viz_close(viz);
        if (bad) goto done;
        fprintf(stderr, "qkv translate: attention figures of %d sentence%s in %s/\n", src.count,
                src.count == 1 ? "" : "s", attention);
    }
    rc = 0;
done:
    free(text), free(ids), free(lens);
    qkv_sentences_free(&src);
    cli_model_free(&cm);
    return rc;
}

/* Reference ids for BLEU: a word the vocabulary does not know must not match a predicted
 * <unk>, so it gets an id of its own below zero. */
static void reference_ids(int *ids, const qkv_vocab *v, const char *const *tok, int n)
{
    for (int i = 0; i < n; i++) {
        ids[i] = qkv_vocab_id(v, tok[i]);
        if (ids[i] == QKV_UNK && strcmp(tok[i], "<unk>")) ids[i] = -1 - i;
    }
}

int cmd_eval(int argc, char **argv)
{
    const char *model = NULL, *data = NULL, *src_path = NULL, *tgt_path = NULL;
    int max_len = 0, batch = 32, threads = 0, num_examples = 0, show = 0;
    const opt_spec opts[] = {
        {"model", OPT_STRING, &model, "model directory"},
        {"data", OPT_STRING, &data, "sentence pairs, source<TAB>target per line"},
        {"src", OPT_STRING, &src_path, "source sentences (with --tgt)"},
        {"tgt", OPT_STRING, &tgt_path, "reference translations, line-aligned with --src"},
        {"num-examples", OPT_INT, &num_examples, "use the first N pairs (0: all)"},
        {"max-len", OPT_INT, &max_len, "longest translation in tokens (0: the training length)"},
        {"batch", OPT_INT, &batch, "sentences translated together"},
        {"show", OPT_INT, &show, "print the first N translations with their BLEU"},
        {"threads", OPT_INT, &threads, "threads (0: all cores)"},
        {NULL, 0, NULL, NULL},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv eval --model DIR (--data FILE.tsv | --src F --tgt F)");
    if (rc) return rc > 0 ? 0 : 2;
    if (!model || (!data && !(src_path && tgt_path)) || batch < 1) {
        fprintf(stderr, "qkv eval: needs --model and --data (or --src and --tgt)\n");
        return 2;
    }
    cli_threads(threads);
    cli_model cm;
    if (cli_model_load(&cm, model)) return 1;
    int limit = qkv_transformer_get_config(cm.model)->max_len;
    if (max_len <= 0) max_len = cm.num_steps ? cm.num_steps : 100;
    if (max_len > limit) max_len = limit;
    qkv_corpus c = {0};
    qkv_error err = {0};
    int *ids = NULL, *lens = NULL, *ref = NULL;
    rc = 1;
    if (data ? qkv_corpus_read_tsv(&c, data, num_examples, &err)
             : qkv_corpus_read_aligned(&c, src_path, tgt_path, num_examples, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        goto done;
    }
    const int n = c.source.count;
    ids = malloc((size_t)n * max_len * sizeof *ids), lens = malloc((size_t)n * sizeof *lens);
    if (!ids || !lens || cli_translate(&cm, &c.source, max_len, batch, ids, lens)) goto done;
    qkv_bleu_stats stats = {0};
    double d2l_sum = 0.0;
    for (int i = 0; i < n; i++) {
        int rn = qkv_sentence_len(&c.target, i);
        free(ref);
        ref = malloc((size_t)(rn ? rn : 1) * sizeof *ref);
        if (!ref) goto done;
        reference_ids(ref, &cm.tgt, c.target.tokens + c.target.start[i], rn);
        const int *hyp = ids + (size_t)i * max_len;
        double b = 0.0;
        if (qkv_bleu_stats_add(&stats, hyp, lens[i], ref, rn, &err) ||
            qkv_bleu(&b, hyp, lens[i], ref, rn, 2, &err)) {
            fprintf(stderr, "qkv: %s\n", err.msg);
            goto done;
        }
        d2l_sum += b;
        if (i < show) {
            char line[4096];
            qkv_vocab_decode(line, sizeof line, &cm.tgt, hyp, lens[i]);
            for (int t = 0; t < qkv_sentence_len(&c.source, i); t++)
                printf("%s%s", t ? " " : "", c.source.tokens[c.source.start[i] + t]);
            printf(" => %s, bleu %.3f\n", line, b);
        }
    }
    printf("sentences: %d\ncorpus BLEU-4: %.2f\nmean d2l bleu (k=2): %.3f\n", n,
           100.0 * qkv_bleu_stats_score(&stats), n ? d2l_sum / n : 0.0);
    rc = 0;
done:
    free(ids), free(lens), free(ref);
    qkv_corpus_free(&c);
    cli_model_free(&cm);
    return rc;
}
