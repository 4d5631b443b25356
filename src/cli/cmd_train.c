/* qkv train: read a parallel corpus, build vocabularies, train, save the model directory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/figures.h"

typedef struct {
    int tty, quiet, every;
    double t0;
} progress_ctx;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void show_progress(const qkv_train_progress *p, void *ctx)
{
    progress_ctx *pc = ctx;
    if (pc->quiet) return;
    double done = (double)(p->epoch - 1) + (double)p->batch / p->batches;
    double elapsed = now_s() - pc->t0, eta = done > 0 ? elapsed * (p->epochs - done) / done : 0;
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
}

static int write_train_json(const char *dir, int num_steps, const char *data, int num_examples,
                            int min_freq)
{
    char path[4096], text[8192];
    snprintf(path, sizeof path, "%s/train.json", dir);
    snprintf(text, sizeof text, "{\n  \"num_steps\": %d,\n  \"num_examples\": %d,\n  "
             "\"min_freq\": %d,\n  \"data\": \"", num_steps, num_examples, min_freq);
    size_t n = strlen(text); /* the path, JSON-escaped */
    for (const char *c = data; *c && n + 8 < sizeof text; c++) {
        if (*c == '"' || *c == '\\') text[n++] = '\\';
        if ((unsigned char)*c >= 0x20) text[n++] = *c;
    }
    snprintf(text + n, sizeof text - n, "\"\n}\n");
    FILE *fp = fopen(path, "w");
    if (!fp || fputs(text, fp) == EOF || fclose(fp)) {
        fprintf(stderr, "qkv: %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Encodes the corpus to num_steps (d2l's build_array_nmt) as a qkv_dataset. */
static int build_dataset(qkv_dataset *d, int **bufs, const qkv_corpus *c, const qkv_vocab *sv,
                         const qkv_vocab *tv, int num_steps)
{
    const size_t n = (size_t)c->source.count;
    bufs[0] = malloc(n * num_steps * sizeof(int)), bufs[1] = malloc(n * sizeof(int));
    bufs[2] = malloc(n * num_steps * sizeof(int)), bufs[3] = malloc(n * sizeof(int));
    qkv_error err = {0};
    if (!bufs[0] || !bufs[1] || !bufs[2] || !bufs[3] ||
        qkv_sentences_encode(bufs[0], bufs[1], &c->source, sv, num_steps, &err) ||
        qkv_sentences_encode(bufs[2], bufs[3], &c->target, tv, num_steps, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg[0] ? err.msg : "out of memory");
        return -1;
    }
    *d = (qkv_dataset){(int)n, num_steps, bufs[0], bufs[1], bufs[2], bufs[3]};
    return 0;
}

int cmd_train(int argc, char **argv)
{
    qkv_transformer_config cfg = qkv_transformer_default_config();
    qkv_train_options o = qkv_train_default_options();
    const char *data = NULL, *src_path = NULL, *tgt_path = NULL, *out = NULL, *act = "relu",
               *tie = "none", *loss = "token";
    int layers = 2, enc_layers = -1, dec_layers = -1, num_steps = 10, num_examples = 0,
        min_freq = 2, threads = 0, quiet = 0, every = 10;
    o.seed = 0;
    const opt_spec opts[] = {
        {"data", OPT_STRING, &data, "sentence pairs, source<TAB>target per line (d2l's fra.txt)"},
        {"src", OPT_STRING, &src_path, "source sentences, one per line (with --tgt)"},
        {"tgt", OPT_STRING, &tgt_path, "target sentences, line-aligned with --src"},
        {"out", OPT_STRING, &out, "model directory to write"},
        {"d-model", OPT_INT, &cfg.d_model, "model width"},
        {"heads", OPT_INT, &cfg.heads, "attention heads"},
        {"ffn", OPT_INT, &cfg.ffn, "hidden size of the position-wise FFN"},
        {"layers", OPT_INT, &layers, "encoder and decoder blocks"},
        {"enc-layers", OPT_INT, &enc_layers, "encoder blocks (overrides --layers)"},
        {"dec-layers", OPT_INT, &dec_layers, "decoder blocks (overrides --layers)"},
        {"dropout", OPT_FLOAT, &cfg.dropout, "dropout rate"},
        {"max-len", OPT_INT, &cfg.max_len, "longest sequence the model accepts"},
        {"bias", OPT_FLAG, &cfg.bias, "biases in the attention projections"},
        {"pre-norm", OPT_FLAG, &cfg.pre_norm, "x + Sublayer(LayerNorm(x)) instead of post-norm"},
        {"final-norm", OPT_FLAG, &cfg.final_norm, "a LayerNorm after each stack"},
        {"act", OPT_STRING, &act, "FFN activation: relu or gelu"},
        {"tie", OPT_STRING, &tie, "weight sharing: none, output (target emb = output), all"},
        {"learned-pos", OPT_FLAG, &cfg.learned_pos, "learned instead of sinusoidal positions"},
        {"batch", OPT_INT, &o.batch, "sentence pairs per batch"},
        {"num-steps", OPT_INT, &num_steps, "tokens per sentence after truncation/padding"},
        {"lr", OPT_FLOAT, &o.lr, "Adam learning rate"},
        {"beta1", OPT_FLOAT, &o.beta1, "Adam's first-moment decay"},
        {"beta2", OPT_FLOAT, &o.beta2, "Adam's second-moment decay"},
        {"adam-eps", OPT_FLOAT, &o.adam_eps, "Adam's epsilon"},
        {"weight-decay", OPT_FLOAT, &o.weight_decay, "decoupled weight decay (AdamW)"},
        {"clip", OPT_FLOAT, &o.clip, "clip the global gradient norm to this (0: off)"},
        {"label-smoothing", OPT_FLOAT, &o.label_smoothing, "label smoothing epsilon"},
        {"loss", OPT_STRING, &loss, "gradient of: token (per-token mean) or d2l (d2l's scaling)"},
        {"epochs", OPT_INT, &o.epochs, "passes over the data"},
        {"num-examples", OPT_INT, &num_examples, "use the first N pairs (0: all)"},
        {"min-freq", OPT_INT, &min_freq, "rarer tokens become <unk>"},
        {"seed", OPT_U64, &o.seed, "initialisation, data order and dropout"},
        {"threads", OPT_INT, &threads, "threads (0: all cores)"},
        {"checkpoint-every", OPT_INT, &o.checkpoint_every, "also checkpoint every N steps"},
        {"skip-nonfinite", OPT_FLAG, &o.skip_nonfinite, "skip steps with NaN/Inf instead of stopping"},
        {"resume", OPT_FLAG, &o.resume, "continue from DIR/checkpoint.safetensors"},
        {"stop-after-steps", OPT_INT, &o.stop_after_steps, "checkpoint and stop at this step (0: never)"},
        {"log-every", OPT_INT, &every, "print a line every N epochs (without a terminal)"},
        {"quiet", OPT_FLAG, &quiet, "no progress output"},
        {NULL, 0, NULL, NULL},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv train (--data FILE.tsv | --src FILE --tgt FILE) --out DIR [options]");
    if (rc) return rc > 0 ? 0 : 2;
    if (!out || (!data && !(src_path && tgt_path))) {
        fprintf(stderr, "qkv train: needs --out and either --data or --src with --tgt\n");
        return 2;
    }
    if (num_steps < 2 || num_steps > cfg.max_len || every < 1) {
        fprintf(stderr, "qkv train: --num-steps must be in [2, --max-len] and --log-every >= 1\n");
        return 2;
    }
    cfg.enc_layers = enc_layers >= 0 ? enc_layers : layers;
    cfg.dec_layers = dec_layers >= 0 ? dec_layers : layers;
    cfg.act = !strcmp(act, "gelu") ? QKV_ACT_GELU : QKV_ACT_RELU;
    cfg.tie = !strcmp(tie, "all") ? QKV_TIE_ALL : !strcmp(tie, "output") ? QKV_TIE_OUTPUT : QKV_TIE_NONE;
    if ((strcmp(act, "relu") && strcmp(act, "gelu")) ||
        (strcmp(tie, "none") && strcmp(tie, "output") && strcmp(tie, "all")) ||
        (strcmp(loss, "token") && strcmp(loss, "d2l"))) {
        fprintf(stderr, "qkv train: --act is relu|gelu, --tie none|output|all, --loss token|d2l\n");
        return 2;
    }
    o.d2l_loss_scale = !strcmp(loss, "d2l");
    o.out_dir = out;
    cli_threads(threads);

    qkv_error err = {0};
    qkv_corpus corpus = {0};
    cli_model cm = {0};
    int *bufs[4] = {0};
    rc = 1;
    if (data ? qkv_corpus_read_tsv(&corpus, data, num_examples, &err)
             : qkv_corpus_read_aligned(&corpus, src_path, tgt_path, num_examples, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        goto done;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", out);
    int resuming = o.resume && access(path, R_OK) == 0;
    if (resuming) {
        if (cli_model_load(&cm, out)) goto done;
        if (cm.num_steps && cm.num_steps != num_steps) {
            fprintf(stderr, "qkv: %s was trained with --num-steps %d\n", out, cm.num_steps);
            goto done;
        }
    } else {
        qkv_tie t = cfg.tie;
        if (qkv_vocab_build(&cm.src, corpus.source.tokens, corpus.source.n_tokens, min_freq, &err) ||
            qkv_vocab_build(&cm.tgt, corpus.target.tokens, corpus.target.n_tokens, min_freq, &err)) {
            fprintf(stderr, "qkv: %s\n", err.msg);
            goto done;
        }
        cfg.src_vocab = cm.src.size, cfg.tgt_vocab = cm.tgt.size;
        if (t == QKV_TIE_ALL && cfg.src_vocab != cfg.tgt_vocab) {
            fprintf(stderr, "qkv: --tie all needs one vocabulary for both languages (these have "
                    "%d and %d tokens); use --tie output\n", cfg.src_vocab, cfg.tgt_vocab);
            goto done;
        }
        if (mkdir(out, 0777) && errno != EEXIST) {
            fprintf(stderr, "qkv: %s: %s\n", out, strerror(errno));
            goto done;
        }
        if (qkv_transformer_create(&cm.model, &cfg, o.seed, &err) ||
            qkv_transformer_save(cm.model, out, &err)) {
            fprintf(stderr, "qkv: %s\n", err.msg);
            goto done;
        }
        snprintf(path, sizeof path, "%s/src_vocab.txt", out);
        if (qkv_vocab_save(&cm.src, path, &err)) goto fail;
        snprintf(path, sizeof path, "%s/tgt_vocab.txt", out);
        if (qkv_vocab_save(&cm.tgt, path, &err)) goto fail;
        if (write_train_json(out, num_steps, data ? data : src_path, num_examples, min_freq))
            goto done;
    }
    qkv_dataset ds;
    if (build_dataset(&ds, bufs, &corpus, &cm.src, &cm.tgt, num_steps)) goto done;
    const qkv_transformer_config *mc = qkv_transformer_get_config(cm.model);
    if (!quiet)
        fprintf(stderr, "qkv train: %d pairs, vocabularies %d/%d, %zu parameters, %d threads%s\n",
                ds.n, mc->src_vocab, mc->tgt_vocab, qkv_transformer_num_params(cm.model),
                qkv_get_threads(), resuming ? ", resuming" : "");
    progress_ctx pc = {isatty(2), quiet, every, now_s()};
    o.progress = show_progress, o.progress_ctx = &pc;
    if (qkv_train(cm.model, &ds, &o, &err)) goto fail;
    const long total_steps = (long)o.epochs * ((ds.n + o.batch - 1) / o.batch);
    if (!quiet && o.stop_after_steps > 0 && o.stop_after_steps < total_steps)
        fprintf(stderr, "qkv train: stopped after step %d; continue with --resume\n",
                o.stop_after_steps);
    else if (!quiet)
        fprintf(stderr, "qkv train: wrote %s in %.1fs\n", out, now_s() - pc.t0);
    if (!fig_training(out, NULL) && !quiet) /* a figure that fails is not a failed training */
        fprintf(stderr, "qkv train: training curves in %s/training.png\n", out);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "qkv: %s\n", err.msg);
done:
    for (int i = 0; i < 4; i++) free(bufs[i]);
    qkv_corpus_free(&corpus);
    cli_model_free(&cm);
    return rc;
}
