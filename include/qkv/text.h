/* SPDX-License-Identifier: MIT */
/* qkv/text.h: text as tokens: d2l's preprocessing and words, corpora, vocabularies, batching to
 * num_steps, BLEU, byte-pair encoding, and a model's tokenizer. Part of qkv.h, which includes
 * every part; its opening comment is the tour. */
#ifndef QKV_API_TEXT_H
#define QKV_API_TEXT_H

#include "qkv/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* =======================================================================================
 * Text: the data side of translation as d2l.ai's "Machine Translation and the Dataset" does
 * it: preprocess raw sentence pairs, split them into word tokens, map tokens to ids with a
 * frequency-ordered vocabulary, pad every sentence to num_steps, and score with BLEU.
 * A struct filled by a *_read / *_build / *_load / *_from_text call owns its memory until
 * the matching *_free, which also zeroes it (freeing twice is harmless). On failure the
 * output struct is left zeroed and err names the file and line (1-based).
 * ===================================================================================== */

/* ---------------------------------------------------------------------------------------
 * Preprocessing (d2l's preprocess_nmt) and word tokens (d2l's tokenize_nmt)
 * ------------------------------------------------------------------------------------- */

/* Bytes qkv_preprocess may write for len input bytes, the NUL included: every input byte
 * yields at most two (a punctuation byte gains a space before it; 'İ', two bytes, becomes
 * the three bytes of "i" + U+0307). */
#define QKV_PREPROCESS_BOUND(len) (2 * (size_t)(len) + 1)

/* d2l's preprocess_nmt on one piece of UTF-8 text:
 *   1. U+202F (narrow no-break space) and U+00A0 (no-break space) become ' ';
 *   2. letters are lower-cased as Python's str.lower() does: Unicode's lower-case mapping
 *      (utf8proc's), 'İ' as "i" + U+0307, and Σ as ς where it ends a word (Final_Sigma),
 *      so Greek capitals lower like Latin and Cyrillic ones;
 *   3. a space is inserted before each of , . ! ? whose preceding character is not a space.
 * out (capacity >= QKV_PREPROCESS_BOUND(len)) receives the NUL-terminated result and
 * *out_len its length. Fails with QKV_ERR_FORMAT, naming the byte offset, on invalid UTF-8
 * or a NUL byte. */
QKV_API
qkv_status qkv_preprocess(char *out, size_t *out_len, const char *text, size_t len,
                          qkv_error *err);

/* The length of the longest prefix of text[0..len) that is well-formed UTF-8 without a NUL
 * byte: len when all of it is, else the offset of the first offending byte. */
QKV_API
size_t qkv_utf8_check(const char *text, size_t len);

/* Sentences of word tokens, stored flat: sentence i is
 * tokens[start[i] .. start[i + 1]), each token a NUL-terminated UTF-8 word. */
typedef struct {
    int count;           /* sentences */
    size_t n_tokens;     /* tokens over all sentences */
    const char **tokens; /* (n_tokens) pointers into storage */
    size_t *start;       /* (count + 1) where each sentence begins in tokens */
    char *storage;       /* owned: the bytes of every token */
} qkv_sentences;

/* Tokens in sentence i. */
static inline int qkv_sentence_len(const qkv_sentences *s, int i)
{
    return (int)(s->start[i + 1] - s->start[i]);
}

/* Parallel sentences: source.count == target.count, pair i is (source i, target i). */
typedef struct {
    qkv_sentences source;
    qkv_sentences target;
} qkv_corpus;

/* Each line of text (lines end in "\n" or "\r\n"; the last may lack it) preprocessed and
 * split into words on ' '. Unlike d2l's line.split(' '), the empty strings that a double
 * space produces are dropped, so a token is never "" (fra.txt's French side has 17 of
 * them, the only place where the two differ). name_for_errors labels the text in
 * messages ("<name>:<line>: ..."). */
QKV_API
qkv_status qkv_sentences_from_text(qkv_sentences *out, const char *text, size_t len,
                                   const char *name_for_errors, qkv_error *err);
/* Each line split on spaces and tabs with no other change (for models whose vocabulary was
 * made by another tokenizer, e.g. one converted from PyTorch). Invalid UTF-8 fails, naming
 * the line. */
QKV_API
qkv_status qkv_sentences_split(qkv_sentences *out, const char *text, size_t len,
                               const char *name_for_errors, qkv_error *err);
QKV_API
void qkv_sentences_free(qkv_sentences *s);

/* Pairs from a file of lines "source<TAB>target[<TAB>ignored...]" (fra.txt is
 * "English<TAB>French"), each line preprocessed and tokenised as qkv_sentences_from_text.
 * num_examples > 0 keeps the first num_examples lines; <= 0 keeps all. (d2l's
 * tokenize_nmt(text, 600) keeps 601 pairs, because it stops at i > num_examples; pass 601
 * to get d2l's load_data_nmt(num_examples=600) data.) A line without a tab, invalid UTF-8,
 * a NUL byte or a file with no lines fails with QKV_ERR_FORMAT naming file and line. */
QKV_API
qkv_status qkv_corpus_read_tsv(qkv_corpus *out, const char *path, int num_examples,
                               qkv_error *err);

/* Pairs from two line-aligned files (Multi30k: line i of train.de translates line i of
 * train.en), each line preprocessed and tokenised as qkv_sentences_from_text. num_examples
 * as above. Files of different line counts (within the first num_examples lines) fail with
 * QKV_ERR_FORMAT naming both files and the line where the shorter one ends. */
QKV_API
qkv_status qkv_corpus_read_aligned(qkv_corpus *out, const char *source_path,
                                   const char *target_path, int num_examples, qkv_error *err);
/* qkv_corpus_read_tsv and qkv_corpus_read_aligned for text as people write it: each line
 * as it is (no lower-casing, no spaces added before punctuation), split into words on spaces
 * as qkv_sentences_split (tabs too, in the aligned files). Invalid UTF-8 or a NUL byte fails
 * naming file and line. For a model that reads raw text (SentencePiece). */
QKV_API
qkv_status qkv_corpus_read_tsv_raw(qkv_corpus *out, const char *path, int num_examples,
                                   qkv_error *err);
QKV_API
qkv_status qkv_corpus_read_aligned_raw(qkv_corpus *out, const char *source_path,
                                       const char *target_path, int num_examples,
                                       qkv_error *err);
QKV_API
void qkv_corpus_free(qkv_corpus *c);
/* Every token in Unicode Normalization Form C (canonical composition, through utf8proc), in
 * place: "e" + U+0301 COMBINING ACUTE ACCENT (NFD, as macOS writes it) becomes the one
 * character U+00E9 "é", so text typed either way gives the same words. What qkv's cased
 * byte-pair models read (qkv_tokenizer_words; training and evaluation normalise their
 * corpora read by qkv_corpus_read_*_raw with qkv_corpus_nfc). d2l's words are never
 * normalised (d2l does not), nor SentencePiece's text (its model has its own normaliser).
 * Tokens must be valid UTF-8 (as every reader here checks); on failure s is unchanged. */
QKV_API
qkv_status qkv_sentences_nfc(qkv_sentences *s, qkv_error *err);
/* qkv_sentences_nfc of both sides. */
QKV_API
qkv_status qkv_corpus_nfc(qkv_corpus *c, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * Vocabulary (d2l's Vocab with reserved_tokens = ['<pad>', '<bos>', '<eos>'])
 * ------------------------------------------------------------------------------------- */

/* Every vocabulary starts with the reserved ids of qkv.h: QKV_UNK, QKV_PAD, QKV_BOS,
 * QKV_EOS (<unk> <pad> <bos> <eos>), then its words. */
enum { QKV_UNK = 0, QKV_PAD = 1, QKV_BOS = 2, QKV_EOS = 3, QKV_N_RESERVED = 4 };

/* idx_to_token and a hash table for the way back. Read-only for users. */
typedef struct {
    int size;                  /* tokens; ids are 0 .. size - 1 */
    const char **idx_to_token; /* (size) pointers into storage */
    char *storage;             /* owned: the bytes of every token */
    int *slots;                /* owned: open-addressing table of ids, -1 = empty */
    size_t n_slots;            /* a power of two, > 2 * size */
} qkv_vocab;

/* d2l's Vocab(tokens, min_freq, reserved_tokens=['<pad>', '<bos>', '<eos>']):
 * idx_to_token = ['<unk>', '<pad>', '<bos>', '<eos>'] + the distinct tokens with
 * frequency >= min_freq, most frequent first, ties in order of first occurrence (Python's
 * stable sort over a Counter built in corpus order); a token equal to a reserved one keeps
 * its reserved id. tokens (n_tokens): a flat list, e.g. qkv_sentences.tokens. */
QKV_API
qkv_status qkv_vocab_build(qkv_vocab *v, const char *const *tokens, size_t n_tokens,
                           int min_freq, qkv_error *err);
/* The id of token, QKV_UNK if it is not in the vocabulary. */
QKV_API
int qkv_vocab_id(const qkv_vocab *v, const char *token);
/* The token of id, NULL if id is outside [0, size). */
QKV_API
const char *qkv_vocab_token(const qkv_vocab *v, int id);

/* Writes the vocabulary as text, line i + 1 holding token i, atomically (a temporary file
 * in the same directory, flushed, then renamed over path). A token that is empty or holds
 * '\n' or '\r' cannot be a line: QKV_ERR_ARG. */
QKV_API
qkv_status qkv_vocab_save(const qkv_vocab *v, const char *path, qkv_error *err);
/* Reads a file written by qkv_vocab_save ("\r\n" endings accepted). Fails with
 * QKV_ERR_FORMAT, naming file and line, on an empty line, a duplicate token, invalid UTF-8,
 * or first four lines other than <unk> <pad> <bos> <eos>. */
QKV_API
qkv_status qkv_vocab_load(qkv_vocab *v, const char *path, qkv_error *err);
QKV_API
void qkv_vocab_free(qkv_vocab *v);

/* ---------------------------------------------------------------------------------------
 * Batching to num_steps (d2l's truncate_pad and build_array_nmt)
 * ------------------------------------------------------------------------------------- */

/* ids (num_steps) = truncate_pad(vocab[tokens] + [<eos>], num_steps, <pad>).  Returns
 * valid_len, the number of ids that are not <pad> (so a truncated sentence loses its
 * <eos>, as in d2l). num_steps <= 0 writes nothing and returns 0. */
QKV_API
int qkv_vocab_encode(int *ids, const qkv_vocab *v, const char *const *tokens, int n,
                     int num_steps);
/* Every sentence of s: ids (s->count, num_steps), valid_len (s->count).
 * num_steps < 1 fails with QKV_ERR_ARG. */
QKV_API
qkv_status qkv_sentences_encode(int *ids, int *valid_len, const qkv_sentences *s,
                                const qkv_vocab *v, int num_steps, qkv_error *err);
/* The tokens of ids[0..n) joined by single spaces, up to the first <eos> (d2l's
 * ' '.join(vocab.to_tokens(output_seq))); ids outside the vocabulary read as <unk>.
 * Writes at most cap bytes, NUL included (nothing if cap is 0), and returns the length the
 * whole text needs, as snprintf does. */
QKV_API
size_t qkv_vocab_decode(char *out, size_t cap, const qkv_vocab *v, const int *ids, int n);

/* ---------------------------------------------------------------------------------------
 * BLEU on token-id sequences (any int values; equal ids are equal tokens)
 * ------------------------------------------------------------------------------------- */

/* d2l's bleu(pred_seq, label_seq, k):
 *   exp(min(0, 1 - len_label / len_pred)) * prod_{n=1..k} p_n^(1 / 2^n),
 *   p_n = clipped n-gram matches / (len_pred - n + 1),
 * where clipped means a label n-gram matches at most as often as it occurs in the label.
 * d2l divides by zero when len_pred < k; here an order the prediction is too short for
 * has p_n = 0, so the score is 0 (as it already is in d2l whenever the label is the one
 * shorter than k); an empty prediction scores 0. k >= 1, else QKV_ERR_ARG. */
QKV_API
qkv_status qkv_bleu(double *score, const int *pred, int len_pred, const int *label,
                    int len_label, int k, qkv_error *err);

#define QKV_BLEU_ORDER 4

/* Corpus BLEU-4 statistics, summed over (hypothesis, reference) pairs. */
typedef struct {
    int64_t matches[QKV_BLEU_ORDER]; /* clipped matches of (index + 1)-grams */
    int64_t totals[QKV_BLEU_ORDER];  /* (index + 1)-grams in the hypotheses */
    int64_t hyp_len, ref_len;        /* tokens: c and r */
} qkv_bleu_stats;

/* Adds one pair to st (zero-initialise st first). */
QKV_API
qkv_status qkv_bleu_stats_add(qkv_bleu_stats *st, const int *hyp, int hyp_len,
                              const int *ref, int ref_len, qkv_error *err);
/* Standard corpus BLEU in [0, 1]:  BP * exp(mean_n log(matches_n / totals_n)),
 * BP = exp(1 - r / c) when c < r, else 1; 0 if any order has no match or c is 0.
 * sacreBLEU's score (tokenize='none', smooth_method='none') divided by 100. */
QKV_API
double qkv_bleu_stats_score(const qkv_bleu_stats *st);
/* The same over count pairs: hyps[i] (hyp_lens[i]) against refs[i] (ref_lens[i]). */
QKV_API
qkv_status qkv_corpus_bleu(double *score, const int *const *hyps, const int *hyp_lens,
                           const int *const *refs, const int *ref_lens, int count,
                           qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * Subwords: byte-pair encoding (Sennrich, Haddow & Birch 2016)
 * A word is the characters of a d2l word token after a word-start marker, U+2581 '▁' (as
 * SentencePiece), so "the cat" is the symbols ▁ t h e ▁ c a t before any merge. Learning
 * repeatedly merges the most frequent adjacent pair of symbols inside words into a new
 * symbol; encoding replays the merges, lowest rank first. The pieces of a text, joined,
 * with every ▁ read as a space and the first one dropped, give the text back exactly.
 * Vocabulary ids: the reserved four, then symbol i at QKV_N_RESERVED + i.
 * ------------------------------------------------------------------------------------- */

#define QKV_BPE_SPACE "\xe2\x96\x81" /* U+2581, the word-start marker */

/* A learned encoding. Read-only for users. */
typedef struct {
    int n_chars;     /* symbols 0 .. n_chars - 1 are single characters: the alphabet */
    int n_symbols;   /* the alphabet, then one symbol per merge that made a new string */
    int n_merges;    /* in the order learned: merge r has rank r */
    char **symbols;  /* owned: (n_symbols) NUL-terminated UTF-8 strings, all distinct */
    int *merges;     /* owned: (n_merges, 3) left symbol, right symbol, resulting symbol */
    int *symbol_slots; /* owned: open-addressing table string -> symbol, -1 = empty */
    size_t n_symbol_slots;
    int *merge_slots;  /* owned: open-addressing table (left, right) -> rank, -1 = empty */
    size_t n_merge_slots;
} qkv_bpe;

/* Learns from the word tokens of every sentence of texts[0..n_texts) (one text per language
 * for a per-language encoding, both for a joint one) a vocabulary of at most vocab_size ids,
 * the reserved four included:
 *   alphabet  every character of the words (and ▁), most frequent first, ties by UTF-8
 *             bytes; if they do not all fit, the rarest become unknown (<unk>). Characters
 *             that cannot be a line of a file ('\r') and a literal U+2581 are unknown.
 *   merges    while the vocabulary has room: the adjacent pair of symbols counted most often
 *             over all words (ties: the smaller left, then right, symbol string, compared
 *             bytewise) is merged everywhere, left to right; a pair seen fewer than twice is
 *             never merged, nor one that would spell a reserved token.
 * Pair counts are kept up to date incrementally (each merge touches only the words that
 * hold the pair): Multi30k (58,000 sentences, 10,000 symbols) learns in 0.1 s.
 * vocab_size > QKV_N_RESERVED. */
QKV_API
qkv_status qkv_bpe_learn(qkv_bpe *b, const qkv_sentences *const *texts, int n_texts,
                         int vocab_size, qkv_error *err);
QKV_API
void qkv_bpe_free(qkv_bpe *b);

/* The vocabulary of b: <unk> <pad> <bos> <eos>, then the symbols in order. */
QKV_API
qkv_status qkv_bpe_vocab(qkv_vocab *v, const qkv_bpe *b, qkv_error *err);

/* Ids of text[0..len): one line, words separated by single spaces (runs of spaces, and spaces
 * at either end, are kept: each extra space is a piece "▁" of its own). ids needs room for
 * len + 1 values; returns how many were written. A character outside the alphabet (or bytes
 * that are not UTF-8) becomes one QKV_UNK. */
QKV_API
int qkv_bpe_encode(int *ids, const qkv_bpe *b, const char *text, size_t len);

/* The text of ids[0..n), up to the first <eos>: pieces concatenated, ▁ read as a space, the
 * first ▁ of the text dropped; <pad> and <bos> are skipped, <unk> and ids outside the
 * vocabulary read "<unk>". qkv_bpe_decode(qkv_bpe_encode(text)) == text for every text
 * whose characters are all in the alphabet. Writes at most cap bytes, NUL included, and
 * returns the length the whole text needs, as snprintf. */
QKV_API
size_t qkv_bpe_decode(char *out, size_t cap, const qkv_bpe *b, const int *ids, int n);

/* Word sentences (qkv_sentences_from_text) as sentences of pieces, e.g. "▁the", "▁ca", "t";
 * an unknown character is the piece "<unk>". Words are looked up in a cache, so encoding a
 * corpus costs one encoding per distinct word. */
QKV_API
qkv_status qkv_bpe_encode_sentences(qkv_sentences *out, const qkv_bpe *b,
                                    const qkv_sentences *words, qkv_error *err);

/* A text file: "#qkv-bpe 1", "chars N" and the alphabet one character a line, then
 * "merges M" and the merges one "left right" a line, in rank order; written atomically. */
QKV_API
qkv_status qkv_bpe_save(const qkv_bpe *b, const char *path, qkv_error *err);
/* Reads qkv_bpe_save's file; QKV_ERR_FORMAT names file and line on anything else (unknown
 * symbol in a merge, duplicate character, a symbol spelling a reserved token...). */
QKV_API
qkv_status qkv_bpe_load(qkv_bpe *b, const char *path, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * SentencePiece (Kudo & Richardson 2018): .model / .spm files, unigram or BPE, read and
 * applied by Debian's libsentencepiece through a thin C++ shim, so the pieces are exactly the
 * reference library's. Text is raw UTF-8 (the model's own normaliser, nmt_nfkc by default,
 * runs inside); a piece is a string of the model's vocabulary, U+2581 '▁' standing for a
 * space, and its id is its row in the model. Typed text that spells a control piece
 * ("<s>", "<pad>") is text, never that control id: libsentencepiece only matches
 * user-defined pieces in input.
 * ------------------------------------------------------------------------------------- */

typedef struct qkv_spm qkv_spm;

/* Reads a SentencePiece model file (what spm_train writes as PREFIX.model, and Marian's
 * source.spm / target.spm). Errors name the file with libsentencepiece's reason. */
QKV_API
qkv_status qkv_spm_load(qkv_spm **out, const char *path, qkv_error *err);
/* The same from the file's bytes in memory; name labels them in messages. */
QKV_API
qkv_status qkv_spm_load_bytes(qkv_spm **out, const void *bytes, size_t size,
                              const char *name, qkv_error *err);
QKV_API
void qkv_spm_free(qkv_spm *s);

/* Pieces in the model: ids are 0 .. size - 1. */
QKV_API
int qkv_spm_size(const qkv_spm *s);
/* The id of a piece, the model's unknown id if it has no such piece. */
QKV_API
int qkv_spm_piece_id(const qkv_spm *s, const char *piece);
/* The piece of id (valid while s lives), NULL outside [0, size). */
QKV_API
const char *qkv_spm_piece(const qkv_spm *s, int id);

/* The ids the model gives its special pieces; -1 where it has none (spm_train's defaults:
 * unk 0, bos 1, eos 2, no pad). */
typedef struct {
    int unk, bos, eos, pad;
} qkv_spm_specials;
QKV_API
qkv_spm_specials qkv_spm_special_ids(const qkv_spm *s);
/* Whether id is a control piece (<s>, </s>, <pad>...), which decoding prints as nothing. */
QKV_API
int qkv_spm_is_control(const qkv_spm *s, int id);

/* The ids of text[0..len) (one line; bytes that are not UTF-8 are libsentencepiece's
 * business: it reads them as U+FFFD). *ids is malloc'd, *n of them (release with free()). */
QKV_API
qkv_status qkv_spm_encode(const qkv_spm *s, const char *text, size_t len, int **ids, int *n,
                          qkv_error *err);
/* The pieces of text[0..len) as one sentence of out (qkv_sentences_free): the surface
 * strings, so an unknown piece is the text it covers (as SentencePiece's EncodeAsPieces). */
QKV_API
qkv_status qkv_spm_encode_pieces(const qkv_spm *s, const char *text, size_t len,
                                 qkv_sentences *out, qkv_error *err);
/* The text of ids[0..n): pieces joined, ▁ read as a space, the leading one dropped, control
 * ids printed as nothing. *text is malloc'd and NUL-terminated (release with free()); an id
 * outside [0, size) is QKV_ERR_ARG. */
QKV_API
qkv_status qkv_spm_decode(const qkv_spm *s, const int *ids, int n, char **text,
                          qkv_error *err);
/* The same from pieces (unknown pieces are read as the unknown piece). */
QKV_API
qkv_status qkv_spm_decode_pieces(const qkv_spm *s, const char *const *pieces, int n,
                                 char **text, qkv_error *err);

/* What qkv_spm_train learns. */
typedef enum { QKV_SPM_UNIGRAM = 0, QKV_SPM_BPE = 1 } qkv_spm_type;
/* "unigram" or "bpe" ("unknown" outside the enum), and back (QKV_ERR_ARG naming the choices
 * otherwise). */
QKV_API
const char *qkv_spm_type_name(qkv_spm_type t);
QKV_API
qkv_status qkv_spm_type_parse(qkv_spm_type *t, const char *name, qkv_error *err);

/* Learns a model of vocab_size pieces with libsentencepiece's trainer from the sentences of
 * texts[0..n_texts) (each sentence its tokens joined by single spaces: raw text read with
 * qkv_sentences_split, say) and writes it to model_path atomically. The special pieces are
 * qkv's: <unk> <pad> <bos> <eos> at ids 0..3 (QKV_UNK..QKV_EOS), so the model's ids are those
 * of a qkv vocabulary of its pieces (qkv_spm_vocab). Every character of the text gets a piece
 * (character coverage 1.0), digits are split one by one, and one thread learns, so the same
 * text gives the same model anywhere. Errors (a vocabulary the text cannot fill, say) carry
 * the trainer's message. */
QKV_API
qkv_status qkv_spm_train(const qkv_sentences *const *texts, int n_texts,
                         const char *model_path, int vocab_size, qkv_spm_type type,
                         qkv_error *err);
/* The vocabulary of s's pieces in id order (qkv_vocab_id(piece) = the piece's id); s must
 * hold <unk> <pad> <bos> <eos> at ids 0..3, as qkv_spm_train's models do (QKV_ERR_FORMAT
 * naming name otherwise). */
QKV_API
qkv_status qkv_spm_vocab(qkv_vocab *v, const qkv_spm *s, const char *name, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * A model's tokenizer: how its text becomes tokens and ids, and ids text again
 * Lines become words (d2l's preprocessing and words, or plain whitespace-separated tokens
 * for a model whose vocabulary another tokenizer made), words become the model's tokens (the
 * words themselves, or their subword pieces), and tokens become ids through the side's
 * vocabulary. A model directory records the choice in text.json
 * ({"tokenizer": "d2l" | "whitespace" | "bpe" | "spm" (or "sentencepiece"), "source_bos":
 * false, "case": "keep"}; absent: d2l). "case": "keep" (a byte-pair model trained by this
 * qkv) reads raw text split on whitespace instead of d2l's lower-cased words.
 * A SentencePiece model ("spm") reads raw text: its words are the line split on whitespace
 * with nothing changed (case and punctuation kept), and its tokens are the pieces that
 * text.json's "source_spm" and "target_spm" files (default source.spm, target.spm) make of
 * each line, looked up in the side's vocabulary; its output is the pieces' detokenised text.
 * ------------------------------------------------------------------------------------- */

typedef enum {
    QKV_TOKENIZER_D2L = 0,        /* qkv_sentences_from_text's words */
    QKV_TOKENIZER_WHITESPACE = 1, /* qkv_sentences_split's tokens */
    QKV_TOKENIZER_BPE = 2,        /* d2l's words, then the pieces of src_bpe / tgt_bpe */
    QKV_TOKENIZER_SPM = 3         /* raw text, the pieces of src_spm / tgt_spm */
} qkv_tokenizer_kind;

/* How a SentencePiece model's output pieces become text (text.json "detokenize"). Imported
 * models decode as their Hugging Face tokenizer does with skip_special_tokens: <unk> is
 * dropped, every "▁" the SentencePiece model leaves (a piece it lacks: in a shared
 * vocabulary, one only the source model knows) becomes a space, and the text is stripped. */
typedef enum {
    QKV_DETOK_SPM = 0,    /* "sentencepiece": the target model's own decoding */
    QKV_DETOK_MARIAN = 1, /* "marian": MarianTokenizer (and OPUS-MT's postprocessing) */
    QKV_DETOK_M2M100 = 2, /* "m2m100": M2M100Tokenizer: SentencePiece's decoding, stripped */
    QKV_DETOK_NLLB = 3    /* "nllb": NllbTokenizer: the pieces joined, "▁" as spaces */
} qkv_detokenizer;

/* Filled by qkv_tokenizer_load, or by hand from vocabularies (and subword encodings) being
 * trained; qkv_tokenizer_free frees every member. */
typedef struct {
    qkv_tokenizer_kind kind;
    int source_bos;          /* sources start with <bos> (PyTorch's translation tutorial) */
    qkv_vocab src, tgt;
    qkv_bpe src_bpe, tgt_bpe; /* QKV_TOKENIZER_BPE (one file for both sides when joint) */
    qkv_spm *src_spm, *tgt_spm; /* QKV_TOKENIZER_SPM (owned; NULL otherwise) */
    int keep_case;           /* text.json "case": "keep": the model reads raw text (its words are
                              * qkv_sentences_split's, a corpus qkv_corpus_read_*_raw's); always
                              * so for SentencePiece, and for byte-pair models trained since,
                              * which also read it in NFC (qkv_sentences_nfc) */
    qkv_detokenizer detokenize; /* QKV_TOKENIZER_SPM: text.json "detokenize" */
    int clean_up_spaces;     /* text.json "clean_up_spaces": transformers'
                              * clean_up_tokenization (" ." -> ".", " n't" -> "n't", ...) */
    /* Languages (qkv_tokenizer_set_languages): the token ids a multilingual model needs, 0
     * (never a language's: <unk>) where none. */
    int src_prefix;          /* every source starts with it (after <bos>): its language's
                              * token (NLLB, M2M100), or the target's >>xxx<< (OPUS-MT's
                              * multi-target models) */
    int tgt_forced;          /* forced as the first output token: the target language's
                              * (NLLB, M2M100) */
    char *languages;         /* text.json "languages": "code\0token\0" pairs, then "\0"; or
                              * the >>xxx<< tokens of the source vocabulary; NULL: none */
    int forced_target;       /* 1: text.json "language_target": "forced" (the target is a
                              * forced first token); 0: a >>xxx<< source prefix */
    int prefixed_source;     /* 1: text.json "language_source": "prefix" */
} qkv_tokenizer;

/* The path of a model directory's file: dir/name, or dir/../name when dir lacks it and its
 * parent has it (training writes dir/best and dir/epoch-NNN with the model alone). Returns
 * whether the file exists (path is dir/name when it does not). */
QKV_API
int qkv_model_dir_file(char *path, size_t cap, const char *dir, const char *name);

/* Reads src_vocab.txt, tgt_vocab.txt, text.json (optional) and, for a subword model,
 * src_bpe.txt and tgt_bpe.txt (SentencePiece: text.json's source_spm and target_spm), each
 * from dir or its parent (qkv_model_dir_file). Errors name
 * the file: a vocabulary's own, text.json that is not JSON or names an unknown tokenizer, a
 * subword encoding whose symbols are not its vocabulary's tokens. */
QKV_API
qkv_status qkv_tokenizer_load(qkv_tokenizer *t, const char *dir, qkv_error *err);
QKV_API
void qkv_tokenizer_free(qkv_tokenizer *t);

/* The source and target languages of a multilingual model by their codes (NLLB's
 * "deu_Latn", M2M100's "de", OPUS-MT's "fra" of >>fra<<); NULL keeps text.json's default
 * ("source_lang", "target_lang") or none. QKV_ERR_ARG naming the code and a few of the
 * model's when the model lacks it, or when the model has no languages. */
QKV_API
qkv_status qkv_tokenizer_set_languages(qkv_tokenizer *t, const char *source, const char *target,
                                       qkv_error *err);

/* The lines of text as words the way the model's text was split (see qkv_tokenizer_kind);
 * name labels the text in messages, as in qkv_sentences_from_text. */
QKV_API
qkv_status qkv_tokenizer_words(const qkv_tokenizer *t, qkv_sentences *out, const char *text,
                               size_t len, const char *name, qkv_error *err);
/* Word sentences as the model's tokens on one side (target = 0: source, 1: target): their
 * subword pieces, or a copy of the words. */
QKV_API
qkv_status qkv_tokenizer_tokens(const qkv_tokenizer *t, qkv_sentences *out,
                                const qkv_sentences *words, int target, qkv_error *err);
/* The text of target ids[0..n) up to the first <eos>: tokens joined by spaces, or subword
 * pieces joined into words. snprintf's contract: at most cap bytes, NUL included; returns
 * the length of the whole text. */
QKV_API
size_t qkv_tokenizer_decode(const qkv_tokenizer *t, char *out, size_t cap, const int *ids,
                            int n);
/* The words of the text of target ids[0..n) as ids of `words` (a vocabulary of reference
 * words), for BLEU over words whatever the model's tokens: a word that vocabulary lacks gets
 * the id -1 - its position, so it matches nothing ("<unk>" itself is QKV_UNK). Writes at
 * most cap ids and returns their count, -1 when out of memory. */
QKV_API
int qkv_tokenizer_word_ids(const qkv_tokenizer *t, const qkv_vocab *words, int *out, int cap,
                           const int *ids, int n);

#ifdef __cplusplus
}
#endif

#endif /* QKV_API_TEXT_H */
