/* SPDX-License-Identifier: MIT */
/* qkv/io.h: files: model directories, training checkpoints, and safetensors tensor files. Part of
 * qkv.h, which includes every part; its opening comment is the tour. */
#ifndef QKV_API_IO_H
#define QKV_API_IO_H

#include "qkv/training.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------
 * Model directories and checkpoints
 * ------------------------------------------------------------------------------------- */

/* The configuration as JSON text (caller frees with free()), and back; from_json names file
 * and key in its errors and checks the configuration. */
QKV_API
qkv_status qkv_config_to_json(const qkv_transformer_config *c, char **json, qkv_error *err);
QKV_API
qkv_status qkv_config_from_json(qkv_transformer_config *c, const char *json, const char *file,
                                qkv_error *err);

/* Writes dir/config.json and dir/model.safetensors (each atomically; dir is created). */
QKV_API
qkv_status qkv_transformer_save(const qkv_transformer *m, const char *dir, qkv_error *err);
/* Reads a model written by qkv_transformer_save: every tensor must be present with the shape
 * the configuration implies, no unknown tensor, no NaN/Inf. */
QKV_API
qkv_status qkv_transformer_load(qkv_transformer **out, const char *dir, qkv_error *err);

/* Imports a Hugging Face MarianMT directory (an OPUS-MT model: config.json, weights as
 * model.safetensors or pytorch_model.bin (or shards of either with their index) in float32,
 * float16 or bfloat16, vocab.json (and target_vocab.json when the vocabularies are
 * separate), source.spm, target.spm) as the qkv model directory out_dir (which must exist):
 * config.json and model.safetensors (written last), src_vocab.txt and tgt_vocab.txt (qkv's
 * reserved ids first: Marian's </s> <unk> <pad> become <eos> <unk> <pad>, and a <bos> row
 * that is never used), the two .spm files, and text.json. hf_dir may also be a Marian
 * release, an OPUS-MT / Tatoeba-Challenge .zip or the directory it unpacks to (decoder.yml,
 * the .npz model with its special:model.yml, vocabulary .yml files, source.spm, target.spm):
 * read as transformers' convert_marian_to_pytorch reads it, and decoder.yml's beam-size and
 * normalize written as the decoding defaults (generation.json). What qkv cannot represent is
 * refused with QKV_ERR_FORMAT naming the file and the reason; nothing is written then. */
QKV_API
qkv_status qkv_import_marian(const char *hf_dir, const char *out_dir, qkv_error *err);

/* Imports a Hugging Face M2M100 or NLLB-200 directory (M2M100ForConditionalGeneration:
 * config.json, model.safetensors or pytorch_model.bin (or shards), sentencepiece.bpe.model,
 * tokenizer_config.json, and for M2M100 vocab.json) as the qkv model directory out_dir: the
 * pre-norm model with final LayerNorms, fairseq's positions, decoding from <eos>; the
 * vocabularies in Hugging Face's ids (the first four permuted to qkv's reserved ones);
 * the SentencePiece model as source.spm and target.spm; text.json with the language codes
 * and their tokens (a source starts with its language's token, the target's is forced as the
 * first generated one); generation.json from generation_config.json. _nllb reads the
 * NllbTokenizer's conventions (pieces at their SentencePiece id + 1, codes "deu_Latn"),
 * _m2m100 M2M100Tokenizer's (vocab.json, codes "de"). What qkv cannot represent is refused
 * with QKV_ERR_FORMAT naming the file and the reason. */
QKV_API
qkv_status qkv_import_nllb(const char *hf_dir, const char *out_dir, qkv_error *err);
QKV_API
qkv_status qkv_import_m2m100(const char *hf_dir, const char *out_dir, qkv_error *err);

/* Writes the qkv encoder-decoder in model_dir (trained or imported) as a CTranslate2 model
 * directory out_dir (created if need be): model.bin (ctranslate2.specs.TransformerSpec's
 * variables), config.json, shared_vocabulary.json (or source_ and target_vocabulary.json),
 * and the model's SentencePiece models, text.json and generation.json where it has them.
 * CTranslate2 then translates as qkv does (add_source_eos; the decoder starts from the
 * model's start token; a model that never generates <pad> has that logit at -1e9). int8
 * quantises the matrices row by row as CTranslate2's converters do. QKV_ERR_FORMAT for what
 * CTranslate2 cannot express (an encoder without layers); QKV_ERR_ARG for an out_dir that is,
 * lies inside or holds model_dir (CTranslate2's config.json would replace the model's). */
typedef enum { QKV_CT2_FLOAT32 = 0, QKV_CT2_INT8 = 1 } qkv_ct2_quantization;
/* "float32" or "int8" ("unknown" outside the enum), and back (QKV_ERR_ARG naming the choices
 * otherwise). */
QKV_API
const char *qkv_ct2_quantization_name(qkv_ct2_quantization q);
QKV_API
qkv_status qkv_ct2_quantization_parse(qkv_ct2_quantization *q, const char *name, qkv_error *err);
QKV_API
qkv_status qkv_export_ct2(const char *model_dir, const char *out_dir,
                          qkv_ct2_quantization quantization, qkv_error *err);

/* Writes the model of directory dir (a translation or a language model) as the directory
 * out_dir (created if need be; not dir itself) with its weight matrices stored at precision
 * p, which must be QKV_PRECISION_INT8: the attention projections, the FFN layers, the
 * embeddings and the output projection as int8 values (I8 tensors) with a float32 scale per
 * row ("NAME.scale"), exactly as QKV_PRECISION_INT8 quantises them; the biases, LayerNorms
 * and positions stay float32. The file is about a quarter of the float32 one, and
 * config.json says "weights": "int8". dir's other files (vocabularies, tokenizer models,
 * text.json, generation.json, train.json) are copied; checkpoints are not.
 * Loading out_dir takes the int8 weights as they are (nothing is quantised again) and sets
 * the model to QKV_PRECISION_INT8 where the CPU runs it (qkv_int8_supported), so it
 * decodes exactly as dir's model does at QKV_PRECISION_INT8. Its float32 parameters are the
 * weights dequantised, s * q: what QKV_PRECISION_FP32 and QKV_PRECISION_BF16 compute with,
 * what training starts from and what qkv_transformer_save writes (a float32 file). Once the
 * parameters change, int8 quantises them again. A dir holding an int8 file already is
 * refused (QKV_ERR_ARG). */
QKV_API
qkv_status qkv_model_quantize(const char *dir, const char *out_dir, qkv_precision p,
                              qkv_error *err);

/* Where training stands: enough to resume bit for bit. */
typedef struct {
    int epoch;           /* epochs completed */
    int batch;           /* batches of the current epoch completed */
    uint64_t seed;       /* the run's seed: data order and dropout derive from it */
    double epoch_loss;   /* loss summed over the current epoch so far */
    int64_t epoch_tokens;
} qkv_train_position;

/* A training checkpoint: parameters, Adam's moments and step, and the position, in one
 * safetensors file written atomically. Load validates everything before changing m or opt. */
QKV_API
qkv_status qkv_checkpoint_save(const char *path, const qkv_transformer *m, const qkv_adam *opt,
                               const qkv_train_position *pos, qkv_error *err);
QKV_API
qkv_status qkv_checkpoint_load(const char *path, qkv_transformer *m, qkv_adam *opt,
                               qkv_train_position *pos, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * Tensor files (safetensors): a JSON header naming each tensor's dtype, shape and byte range,
 * then the raw little-endian data. Every offset and shape is checked against the file.
 * ------------------------------------------------------------------------------------- */

/* I8: an int8 model file's weights (qkv_model_quantize). */
typedef enum { QKV_F32 = 0, QKV_I32 = 1, QKV_I64 = 2, QKV_F64 = 3, QKV_I8 = 4 } qkv_dtype;

/* Bytes per element of dt (0 outside the enum). */
QKV_API
size_t qkv_dtype_size(qkv_dtype dt);

#define QKV_MAX_DIMS 8

typedef struct {
    char *name;
    qkv_dtype dtype;
    int ndim;
    int64_t shape[QKV_MAX_DIMS];
    int64_t numel;
    void *data; /* points into the file's buffer, aligned for the dtype */
} qkv_tensor;

typedef struct {
    qkv_tensor *tensors;
    int count;
    char *metadata_json; /* the "__metadata__" object as JSON text, or NULL */
    void *buffer;        /* owned: the file's data section */
} qkv_tensor_file;

/* Read and validate a safetensors file. F16 and BF16 tensors are read as F32 (exactly: every
 * half-precision value is a float). On failure *out is empty and err names the file and the
 * offending tensor. */
QKV_API
qkv_status qkv_tensor_file_load(qkv_tensor_file *out, const char *path, qkv_error *err);
/* Parse an in-memory safetensors image (len bytes). */
QKV_API
qkv_status qkv_tensor_file_parse(qkv_tensor_file *out, const void *bytes, size_t len,
                                 const char *name_for_errors, qkv_error *err);
QKV_API
void qkv_tensor_file_free(qkv_tensor_file *f);
/* The tensor called name, or NULL. */
QKV_API
const qkv_tensor *qkv_tensor_file_get(const qkv_tensor_file *f, const char *name);
/* A metadata string value (owned by f until freed; NULL if absent). */
QKV_API
const char *qkv_tensor_file_meta(const qkv_tensor_file *f, const char *key);

/* A PyTorch checkpoint (pytorch_model.bin: torch.save's zip archive of a pickled state dict)
 * as a tensor file, read without Python. Only a state dict's documented subset is read (an
 * OrderedDict or dict of names to tensors rebuilt from typed storages); a pickle naming any
 * other global (a class, os.system, ...) is refused with QKV_ERR_FORMAT naming it, so that a
 * hostile file can never run code. Tensors are dense and row-major whatever their strides;
 * float16 and bfloat16 become float32 (exactly), int8/int16/uint8/bool int32. torch's
 * legacy (pre-1.6) format and TorchScript archives are refused with the reason. */
QKV_API
qkv_status qkv_tensor_file_load_pytorch(qkv_tensor_file *out, const char *path, qkv_error *err);
QKV_API
qkv_status qkv_tensor_file_parse_pytorch(qkv_tensor_file *out, const void *bytes, size_t len,
                                         const char *name_for_errors, qkv_error *err);

/* A numpy .npz archive (numpy.savez, Marian's model files) as a tensor file: each NAME.npy
 * becomes tensor NAME (float16 as float32, small integers as int32; Fortran order made
 * row-major); an array of bytes named "special:*" (Marian's "special:model.yml") becomes the
 * metadata string of that name instead. Stored and deflated entries are read. */
QKV_API
qkv_status qkv_tensor_file_load_npz(qkv_tensor_file *out, const char *path, qkv_error *err);
QKV_API
qkv_status qkv_tensor_file_parse_npz(qkv_tensor_file *out, const void *bytes, size_t len,
                                     const char *name_for_errors, qkv_error *err);

/* A tensor to be written: name, dtype, shape and data (numel * dtype size bytes). */
typedef struct {
    const char *name;
    qkv_dtype dtype;
    int ndim;
    int64_t shape[QKV_MAX_DIMS];
    const void *data;
} qkv_tensor_ref;

/* Write tensors (and optional metadata key/value string pairs, n_meta of them) to path
 * atomically: a temporary file in the same directory, flushed, then renamed over path, so
 * the previous file stays intact on any failure. */
QKV_API
qkv_status qkv_tensor_file_save(const char *path, const qkv_tensor_ref *tensors, int count,
                                const char *const *meta_kv, int n_meta, qkv_error *err);

#ifdef __cplusplus
}
#endif

#endif /* QKV_API_IO_H */
