/* SPDX-License-Identifier: MIT */
/* qkv demo: the main job on a built-in task that needs attention — reversing a sequence of
 * symbols. The decoder must read the source from its end, so the encoder-decoder attention
 * learns an anti-diagonal; copying or a bag of words cannot solve it. Everything goes through
 * the same library calls as qkv train / translate / eval. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/figures.h"

/* n lines of random symbols (a..t, lengths 3..8) and their reversals, from seed. */
static void make_task(char **src, char **tgt, int n, uint64_t seed)
{
    *src = malloc((size_t)n * 20), *tgt = malloc((size_t)n * 20);
    char *s = *src, *t = *tgt;
    if (!s || !t) return;
    for (int i = 0; i < n; i++) {
        int len = 3 + (int)(qkv_random_u32(seed, 2 * (uint64_t)i) % 6);
        char sym[8];
        for (int k = 0; k < len; k++)
            sym[k] = (char)('a' + qkv_random_u32(seed + 1, (uint64_t)i * 8 + k) % 20);
        for (int k = 0; k < len; k++) *s++ = sym[k], *s++ = k + 1 < len ? ' ' : '\n';
        for (int k = len - 1; k >= 0; k--) *t++ = sym[k], *t++ = k ? ' ' : '\n';
    }
    *s = *t = '\0';
}

static void progress(const qkv_train_progress *p, void *ctx)
{
    (void)ctx;
    if (p->end_of_epoch && (p->epoch % 5 == 0 || p->epoch == 1))
        fprintf(stderr, "  epoch %2d/%d  loss %.4f  %.0f target tokens/s\n", p->epoch, p->epochs,
                p->loss, p->tokens_per_s);
}

/* The task's training and held-out pairs as sentences, and the vocabularies of the training
 * pairs. 0, or -1 with err set. */
static int make_corpora(qkv_corpus *train, qkv_corpus *test, qkv_tokenizer *tok, int n_train,
                        int n_test, uint64_t seed, qkv_error *err)
{
    char *text[4] = {NULL, NULL, NULL, NULL};
    make_task(&text[0], &text[1], n_train, seed * 2 + 1);
    make_task(&text[2], &text[3], n_test, seed * 2 + 2);
    qkv_sentences *to[4] = {&train->source, &train->target, &test->source, &test->target};
    int rc = 0;
    for (int k = 0; k < 4 && !rc; k++)
        rc = !text[k] ? (snprintf(err->msg, sizeof err->msg, "out of memory"), -1)
             : qkv_sentences_from_text(to[k], text[k], strlen(text[k]), "demo", err) ? -1 : 0;
    for (int k = 0; k < 4; k++) free(text[k]);
    if (rc || qkv_vocab_build(&tok->src, train->source.tokens, train->source.n_tokens, 1, err) ||
        qkv_vocab_build(&tok->tgt, train->target.tokens, train->target.n_tokens, 1, err))
        return -1;
    return 0;
}

/* The held-out pairs translated greedily: the first five shown, how many came out exactly
 * reversed, and corpus BLEU-4. 0, or -1 with err set. */
static int held_out(qkv_translator *tr, const qkv_corpus *test, int T, qkv_error *err)
{
    const qkv_tokenizer *vocab = qkv_translator_tokenizer(tr);
    qkv_translate_options to = qkv_translate_default_options();
    qkv_translations r = {0};
    int *ref = malloc(T * sizeof *ref), exact = 0;
    to.max_len = T, to.batch = 64;
    if (!ref) return snprintf(err->msg, sizeof err->msg, "out of memory"), -1;
    if (qkv_translate_words(&r, tr, &test->source, &to, err)) return free(ref), -1;
    qkv_bleu_stats stats = {0};
    const int n = test->source.count;
    for (int i = 0; i < n; i++) {
        int rn = qkv_sentence_len(&test->target, i);
        for (int k = 0; k < rn; k++)
            ref[k] = qkv_vocab_id(&vocab->tgt, test->target.tokens[test->target.start[i] + k]);
        const int *hyp = r.ids + (size_t)i * r.max_len;
        qkv_bleu_stats_add(&stats, hyp, r.len[i], ref, rn, NULL);
        exact += r.len[i] == rn && !memcmp(hyp, ref, rn * sizeof *ref);
        if (i < 5) {
            printf("  ");
            for (int k = 0; k < qkv_sentence_len(&test->source, i); k++)
                printf("%s ", test->source.tokens[test->source.start[i] + k]);
            printf("=> %s\n", r.text[i]);
        }
    }
    printf("\nheld-out: %d/%d exactly reversed, corpus BLEU-4 %.2f\n", exact, n,
           100.0 * qkv_bleu_stats_score(&stats));
    qkv_translations_free(&r);
    free(ref);
    return 0;
}

int cmd_demo(int argc, char **argv)
{
    const char *out = "qkv-demo-model";
    int epochs = 10, threads = 0, n_train = 20000, n_test = 200;
    uint64_t seed = 0;
    const opt_spec opts[] = {
        {"out", OPT_DIR, &out, "where to write the trained model", NULL, NULL},
        {"epochs", OPT_INT, &epochs, "training epochs", "[1, 100000]", NULL},
        {"train", OPT_INT, &n_train, "training sequences", "[1, 1000000]", NULL},
        {"seed", OPT_U64, &seed, "seed of the task and the model", ARG_SEED, NULL},
        {"threads", OPT_INT, &threads, "threads (0: all cores)", ARG_THREADS, NULL},
        {"t", OPT_ALIAS, "threads", NULL, NULL, NULL},
        {0},
    };
    int rc = args_parse(argc, argv, 2, opts, "usage: qkv demo [--out DIR]\n"
                                             "Trains on a built-in reversal task and translates "
                                             "(no downloads).");
    if (rc) return rc > 0 ? 0 : 2;
    cli_threads(threads);
    printf("qkv %s demo: learn to reverse sequences of symbols (a..t, 3 to 8 long).\n"
           "The decoder must attend to the source from its end, so this needs attention.\n",
           QKV_VERSION);
    qkv_corpus train = {0}, test = {0};
    qkv_tokenizer tok = {0};
    qkv_transformer *model = NULL;
    qkv_translator *tr = NULL;
    qkv_error err = {0};
    int *bufs[4] = {0};
    rc = 1;
    if (make_corpora(&train, &test, &tok, n_train, n_test, seed, &err)) goto fail;
    const int T = 10;
    qkv_transformer_config cfg = qkv_transformer_default_config();
    cfg.src_vocab = tok.src.size, cfg.tgt_vocab = tok.tgt.size, cfg.max_len = 64;
    cfg.d_model = 64, cfg.heads = 4, cfg.ffn = 128, cfg.dropout = 0.0f;
    if (qkv_transformer_create(&model, &cfg, seed, &err) ||
        qkv_translator_create(&tr, model, &tok, T, &err))
        goto fail;
    model = NULL; /* the translator's now, as are the vocabularies */
    const qkv_tokenizer *vocab = qkv_translator_tokenizer(tr);
    const size_t n = (size_t)n_train;
    for (int i = 0; i < 4; i++) bufs[i] = malloc(n * (i % 2 ? 1 : T) * sizeof(int));
    if (!bufs[0] || !bufs[1] || !bufs[2] || !bufs[3] ||
        qkv_sentences_encode(bufs[0], bufs[1], &train.source, &vocab->src, T, &err) ||
        qkv_sentences_encode(bufs[2], bufs[3], &train.target, &vocab->tgt, T, &err))
        goto fail;
    qkv_dataset ds = {n_train, T, bufs[0], bufs[1], bufs[2], bufs[3]};
    qkv_train_options o = qkv_train_default_options();
    o.out_dir = out, o.batch = 64, o.epochs = epochs, o.lr = 0.001f, o.seed = seed;
    o.progress = progress;
    printf("Training a %d+%d-layer Transformer (d_model %d, %d heads, %zu parameters) on %d "
           "pairs with %d threads...\n", cfg.enc_layers, cfg.dec_layers, cfg.d_model, cfg.heads,
           qkv_transformer_num_params(qkv_translator_model(tr)), n_train, qkv_get_threads());
    fflush(stdout);
    double t0 = qkv_now_s();
    if (qkv_train(qkv_translator_model(tr), &ds, &o, &err)) goto fail;
    char path[4096];
    snprintf(path, sizeof path, "%s/src_vocab.txt", out);
    if (qkv_vocab_save(&vocab->src, path, &err)) goto fail;
    snprintf(path, sizeof path, "%s/tgt_vocab.txt", out);
    if (qkv_vocab_save(&vocab->tgt, path, &err)) goto fail;
    printf("Trained in %.1fs; the model is in %s/.\n\nHeld-out sequences (greedy decoding with "
           "the KV cache):\n", qkv_now_s() - t0, out);
    if (held_out(tr, &test, T, &err)) goto fail;
    if (!fig_training(out, NULL)) printf("Training curves: %s/training.png\n", out);
    printf("Try: echo 'a b c d e' | qkv translate --model %s --attention %s/attention\n", out, out);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "qkv: %s\n", err.msg);
done:
    for (int i = 0; i < 4; i++) free(bufs[i]);
    qkv_corpus_free(&train), qkv_corpus_free(&test);
    qkv_translator_free(tr);
    qkv_transformer_free(model);
    qkv_tokenizer_free(&tok);
    return rc;
}
