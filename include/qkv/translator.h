/* SPDX-License-Identifier: MIT */
/* qkv/translator.h: model directories as objects: the translator (sentences in, translations
 * out), the generator (a language model's text) and qkv_model_open, which opens either. Part
 * of qkv.h, which includes every part; its opening comment is the tour. */
#ifndef QKV_API_TRANSLATOR_H
#define QKV_API_TRANSLATOR_H

#include "qkv/models.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------
 * The translator: a model directory as one object that turns sentences into translations
 * (the model, its tokenizer and the length it was trained for), with batching, truncation
 * of over-long sources, greedy or beam decoding, and the text of every hypothesis. It owns
 * the model's decoding buffers, so a translator serves one thread at a time; separate
 * translators share nothing.
 * ------------------------------------------------------------------------------------- */

typedef struct qkv_translator qkv_translator;

/* A model directory's decoding defaults: its generation.json (or its parent's, as for
 * DIR/best), which qkv import writes from a release's settings (Marian's decoder.yml, Hugging
 * Face's generation_config.json). A front end applies each to the option its user did not
 * give, as `qkv translate` does. Each is kept only where it is in range, else left unset. */
typedef struct {
    int beam;             /* "beam" in [1, 256]; 0: unset */
    int has_length_penalty;
    double length_penalty; /* "length_penalty" in [0, 100] */
    int beam_stop;        /* "beam_stop" (bound, count, hf, ...) as a qkv_beam_stop; -1: unset */
    int max_len;          /* "max_len" in [1, 65536]; 0: unset */
} qkv_generation_defaults;

/* Reads dir's generation.json into g (every field unset without one). Errors: the file's, as
 * qkv_json_load gives them, or QKV_ERR_FORMAT naming it when it is not a JSON object. */
QKV_API
qkv_status qkv_generation_defaults_read(qkv_generation_defaults *g, const char *dir,
                                        qkv_error *err);

/* Opens a model directory: config.json and model.safetensors (qkv_transformer_load), the
 * tokenizer's files (qkv_tokenizer_load, from dir or its parent, so dir/best and
 * dir/epoch-NNN open too) and train.json's num_steps (optional, from dir or its parent).
 * Errors name the file; vocabularies of other sizes than the model's are QKV_ERR_FORMAT. */
QKV_API
qkv_status qkv_translator_open(qkv_translator **out, const char *dir, qkv_error *err);
/* A translator around a model and tokenizer made in memory (e.g. while training one);
 * num_steps as train.json's (0: unknown). On success it owns m and what *tok held (*tok is
 * zeroed); on failure (vocabulary sizes other than the model's: QKV_ERR_ARG) the caller
 * still owns both. */
QKV_API
qkv_status qkv_translator_create(qkv_translator **out, qkv_transformer *m, qkv_tokenizer *tok,
                                 int num_steps, qkv_error *err);
QKV_API
void qkv_translator_free(qkv_translator *t);

QKV_API
qkv_transformer *qkv_translator_model(qkv_translator *t);
QKV_API
const qkv_tokenizer *qkv_translator_tokenizer(const qkv_translator *t);
/* The sentence length the model was trained with (train.json's num_steps), 0 if unknown. */
QKV_API
int qkv_translator_num_steps(const qkv_translator *t);

/* A multilingual model's source and target languages (qkv_tokenizer_set_languages): NLLB's and
 * M2M100's codes, or an OPUS-MT multi-target model's (>>fra<<: "fra"). */
QKV_API
qkv_status qkv_translator_set_languages(qkv_translator *t, const char *source,
                                        const char *target, qkv_error *err);

typedef struct {
    int beam;      /* K >= 1; K = 1 with n_best = 1 is greedy decoding */
    int n_best;    /* hypotheses per sentence, 1 .. beam */
    float alpha;   /* length penalty exponent of beam search >= 0 (qkv_beam_options) */
    qkv_beam_stop stop; /* beam search's stopping rule (0: QKV_BEAM_STOP_BOUND) */
    int max_len;   /* longest translation in tokens, <eos> not counted, a hard cap; 0: the
                    * model's max_len (and never more than it: longer is cut to it) */
    float max_len_a; /* and each sentence's own limit: floor(a * n + b) tokens for a source of */
    int max_len_b;   /* n tokens (the model's, without <eos>), at least 1; a = b = 0: none */
    int batch;     /* sentences decoded together, >= 1 (results do not depend on it) */
    qkv_precision precision; /* set on the model for this and later translations */
} qkv_translate_options;

/* Greedy decoding, each translation at most 1.5 n + 10 tokens for a source of n (every
 * reference of Multi30k and fra.txt, both ways, fits), batches of 32, float32. */
QKV_API
qkv_translate_options qkv_translate_default_options(void);

/* The translations of count sentences, hypothesis k of sentence i at h = i * n_best + k,
 * best first. Owned until qkv_translations_free. */
typedef struct {
    int count, n_best;
    int max_len;    /* the longest length decoding allowed a sentence: the row length of ids */
    char **text;    /* (count * n_best) the translations as text; NULL where beam search found
                     * fewer hypotheses than n_best (a tiny vocabulary) */
    int *ids;       /* (count * n_best, max_len) target ids without <bos> and <eos> */
    int *len;       /* (count * n_best) their counts; -1 where text is NULL */
    double *score;  /* (count * n_best) beam search's log P / lp; NaN from greedy decoding */
    int truncated;  /* sources longer than the model accepts, cut to its max_len (losing
                     * their <eos>, as d2l's truncate_pad) */
    int first_truncated, first_truncated_len; /* the first of them (0-based; -1 if none) and
                                               * its tokens, <eos> (and <bos>) included */
    int *src_len;   /* (count) tokens of each source (without <eos> and <bos>) */
    int *unknown;   /* (count) how many of them the source vocabulary lacks (<unk>): a source
                     * mostly of unknown tokens gets an unreliable translation */
} qkv_translations;

/* Translates sources[0..n), one sentence of raw UTF-8 text each (no line break inside), as
 * the model's tokenizer reads them; messages name a source "source:<i + 1>". On failure *out
 * is left empty. n = 0 gives zero translations. Text that spells a reserved token ("<pad>",
 * "<bos>", "<eos>", "<unk>") is text: it reaches the encoder as <unk>, never as the control
 * token (a typed "<pad>" used to be masked out with everything after it). */
QKV_API
qkv_status qkv_translate(qkv_translations *out, qkv_translator *t, const char *const *sources,
                         int n, const qkv_translate_options *o, qkv_error *err);
/* The same from sentences already split into words (qkv_tokenizer_words, or a corpus read
 * by qkv_corpus_read_*), which a subword model turns into pieces. */
QKV_API
qkv_status qkv_translate_words(qkv_translations *out, qkv_translator *t,
                               const qkv_sentences *words, const qkv_translate_options *o,
                               qkv_error *err);
/* The same from sentences already as the model's source tokens (its subword pieces, e.g.
 * what SentencePiece made of them elsewhere; a word model's words), looked up in the source
 * vocabulary as they are: a token it lacks, or one spelling a reserved token, is <unk>. */
QKV_API
qkv_status qkv_translate_tokens(qkv_translations *out, qkv_translator *t,
                                const qkv_sentences *tokens, const qkv_translate_options *o,
                                qkv_error *err);
QKV_API
void qkv_translations_free(qkv_translations *r);

/* ---------------------------------------------------------------------------------------
 * Continuous batching: sentences that arrive at different times decoded together (a server's
 * concurrent requests). The batch decoder has a fixed number of slots; a sentence joins a free
 * slot between two steps (its encoder runs then), each step advances every running sentence by
 * one token, each at its own position, and a sentence leaves as soon as it ends, freeing its
 * slot for the next. Greedy decoding and beam search: each sentence gets the translations
 * qkv_translate gives it alone with the same options (the same arithmetic up to float rounding
 * of the linear layers); a beam of K holds K slots while it runs, each step advancing its live
 * hypotheses beside the greedy sentences. It uses the translator's model: one thread at a time
 * for both.
 * ------------------------------------------------------------------------------------- */

typedef struct qkv_batch_decoder qkv_batch_decoder;

/* Buffers for `slots` sentences of the model's max_len (source and target) each. */
QKV_API
qkv_status qkv_batch_decoder_create(qkv_batch_decoder **out, qkv_translator *t, int slots,
                                    qkv_error *err);
QKV_API
void qkv_batch_decoder_free(qkv_batch_decoder *bd);
QKV_API
int qkv_batch_decoder_slots(const qkv_batch_decoder *bd);
QKV_API
int qkv_batch_decoder_free_slots(const qkv_batch_decoder *bd);
/* Slots whose sentence is still being decoded. */
QKV_API
int qkv_batch_decoder_running(const qkv_batch_decoder *bd);
/* Tokenises sources[0..n) (raw UTF-8, one sentence each, as qkv_translate), runs the encoder
 * on them together and puts each in a free slot: slots[i] receives source i's. max_len as
 * qkv_translate_options'. Fewer than n free slots: QKV_ERR_ARG, nothing added. */
QKV_API
qkv_status qkv_batch_decoder_add(qkv_batch_decoder *bd, const char *const *sources, int n,
                                 int max_len, int *slots, qkv_error *err);
/* qkv_batch_decoder_add with qkv_translate's options: greedy decoding where qkv_translate
 * decodes greedily, else beam search (beam, n_best, alpha, stop), each sentence limited as
 * qkv_translate limits it (max_len, max_len_a, max_len_b); batch and precision are not read
 * (the model's precision is the one set on it). A beam of K holds its slot and K - 1 free
 * others while it runs: fewer free slots than the sources need is QKV_ERR_ARG, nothing added. */
QKV_API
qkv_status qkv_batch_decoder_add_with(qkv_batch_decoder *bd, const char *const *sources, int n,
                                      const qkv_translate_options *o, int *slots,
                                      qkv_error *err);
/* One decoder step for every running sentence (nothing when none runs). */
QKV_API
qkv_status qkv_batch_decoder_step(qkv_batch_decoder *bd, qkv_error *err);
/* Whether the slot holds a finished translation, waiting for qkv_batch_decoder_take. */
QKV_API
int qkv_batch_decoder_finished(const qkv_batch_decoder *bd, int slot);
/* A finished slot's (best) translation as text (*text: malloc'd, the caller frees it) and its
 * token count (tokens may be NULL); the slot is free again. */
QKV_API
qkv_status qkv_batch_decoder_take(qkv_batch_decoder *bd, int slot, char **text, int *tokens,
                                  qkv_error *err);
/* A finished slot's translations as qkv_translate gives them for its one sentence: count 1,
 * its n_best hypotheses with their text, ids and scores (NaN from greedy decoding), the
 * source's length, its unknown tokens and whether it was cut to the model's max_len (*out:
 * the caller frees it with qkv_translations_free); the slot is free again. */
QKV_API
qkv_status qkv_batch_decoder_take_translations(qkv_batch_decoder *bd, int slot,
                                               qkv_translations *out, qkv_error *err);
/* Frees a slot, running or finished (a client that went away), and the slots its beam held. */
QKV_API
void qkv_batch_decoder_cancel(qkv_batch_decoder *bd, int slot);

/* ---------------------------------------------------------------------------------------
 * The generator: a language model's directory (qkv train-lm) as one object: the model, its
 * vocabulary (characters or bytes, qkv_lm_encode) and what train.json records of its
 * training. Generation itself is qkv_lm_generate / qkv_lm_batch on qkv_generator_model. One
 * thread at a time, as the model.
 * ------------------------------------------------------------------------------------- */

typedef struct qkv_generator qkv_generator;

/* What a language model's train.json records, as far as using the model needs it. */
typedef struct {
    int byte_level;     /* the vocabulary is bytes (<0x00> .. <0xFF>), not characters */
    int context, batch; /* the window and batch it was trained with; 0 if unknown */
    float val_fraction; /* the held-out share at the end of its text; 0.1 if unknown */
} qkv_lm_run_info;

/* Opens dir: config.json and model.safetensors (qkv_lm_load), vocab.txt (its size must be the
 * model's: QKV_ERR_FORMAT naming the file) and train.json (optional). */
QKV_API
qkv_status qkv_generator_open(qkv_generator **out, const char *dir, qkv_error *err);
/* A generator around a model and vocabulary made in memory; info may be NULL (unknown). On
 * success it owns m and what *v held (*v is zeroed); on failure (a vocabulary of another size
 * than the model's: QKV_ERR_ARG) the caller still owns both. */
QKV_API
qkv_status qkv_generator_create(qkv_generator **out, qkv_lm *m, qkv_vocab *v,
                                const qkv_lm_run_info *info, qkv_error *err);
QKV_API
void qkv_generator_free(qkv_generator *g);
QKV_API
qkv_lm *qkv_generator_model(qkv_generator *g);
QKV_API
const qkv_vocab *qkv_generator_vocab(const qkv_generator *g);
QKV_API
const qkv_lm_run_info *qkv_generator_run_info(const qkv_generator *g);
/* text[0..len) as the model's tokens: *ids (malloc'd, the caller frees it), *n of them;
 * unknown (may be NULL) counts the characters the vocabulary lacks (read as <unk>). Invalid
 * UTF-8 in a character model: QKV_ERR_FORMAT naming the byte offset. */
QKV_API
qkv_status qkv_generator_encode(const qkv_generator *g, const char *text, size_t len, int **ids,
                                size_t *n, size_t *unknown, qkv_error *err);
/* The text of ids[0..n) (qkv_lm_token_text of each), at most cap bytes with the NUL written
 * to out (NULL: only measure); returns the length needed, as snprintf. */
QKV_API
size_t qkv_generator_decode(const qkv_generator *g, char *out, size_t cap, const int *ids,
                            int n);

/* ---------------------------------------------------------------------------------------
 * Any model directory: config.json's "format" says whether it holds a translation model
 * (qkv-transformer, also imported ones) or a language model (qkv-lm).
 * ------------------------------------------------------------------------------------- */

typedef enum { QKV_MODEL_TRANSLATOR = 1, QKV_MODEL_GENERATOR = 2 } qkv_model_kind;

typedef struct {
    qkv_model_kind kind;
    qkv_translator *translator; /* the one of kind, the other NULL */
    qkv_generator *generator;
} qkv_model;

/* Opens dir as qkv_translator_open or qkv_generator_open would, whichever its config.json
 * names. On failure *out is empty. */
QKV_API
qkv_status qkv_model_open(qkv_model *out, const char *dir, qkv_error *err);
QKV_API
void qkv_model_close(qkv_model *m);

#ifdef __cplusplus
}
#endif

#endif /* QKV_API_TRANSLATOR_H */
