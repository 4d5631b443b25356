/* SPDX-License-Identifier: MIT */
// libsentencepiece behind spm_shim.h: the C++ calls, with every status and exception turned
// into a return code and a message, so that C never sees either.
#include "text/spm_shim.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

struct spm_shim {
    sentencepiece::SentencePieceProcessor processor;
};

namespace {

int fail(char *why, size_t cap, const std::string &message)
{
    if (cap) std::snprintf(why, cap, "%s", message.c_str());
    return -1;
}

int fail(char *why, size_t cap, const sentencepiece::util::Status &status)
{
    return fail(why, cap, status.ToString());
}

// bytes[0..len) as a malloc'd NUL-terminated copy (NULL when memory runs out).
char *c_string(const std::string &s)
{
    char *out = static_cast<char *>(std::malloc(s.size() + 1));
    if (out) std::memcpy(out, s.data(), s.size() + 1);
    return out;
}

int decoded(const sentencepiece::util::Status &status, const std::string &out,
                   char **text, size_t *len, char *why, size_t cap)
{
    if (!status.ok()) return fail(why, cap, status);
    if (!(*text = c_string(out))) return fail(why, cap, "out of memory");
    *len = out.size();
    return 0;
}

// The trainer reads its sentences through this interface rather than from a file.
class Sentences : public sentencepiece::SentenceIterator {
  public:
    Sentences(const char *const *sentences, size_t count) : s_(sentences), n_(count)
    {
        if (n_) value_ = s_[0];
    }
    bool done() const override { return i_ >= n_; }
    void Next() override
    {
        if (++i_ < n_) value_ = s_[i_];
    }
    const std::string &value() const override { return value_; }
    sentencepiece::util::Status status() const override { return {}; }

  private:
    const char *const *s_;
    size_t n_, i_ = 0;
    std::string value_;
};

} // namespace

extern "C" {

spm_shim *spm_shim_load(const char *path, const void *bytes, size_t size, char *why,
                        size_t cap) noexcept
{
    try {
        spm_shim *s = new spm_shim;
        const auto status =
            path ? s->processor.Load(path)
                 : s->processor.LoadFromSerializedProto(
                       std::string_view(static_cast<const char *>(bytes), size));
        if (status.ok()) return s;
        fail(why, cap, status);
        delete s;
    } catch (const std::exception &e) {
        fail(why, cap, e.what());
    }
    return nullptr;
}

void spm_shim_free(spm_shim *s) noexcept { delete s; }

int spm_shim_size(const spm_shim *s) noexcept { return s->processor.GetPieceSize(); }

int spm_shim_piece_to_id(const spm_shim *s, const char *piece, size_t len) noexcept
{
    return s->processor.PieceToId(std::string_view(piece, len));
}

const char *spm_shim_id_to_piece(const spm_shim *s, int id) noexcept
{
    if (id < 0 || id >= s->processor.GetPieceSize()) return nullptr;
    return s->processor.IdToPiece(id).c_str();
}

void spm_shim_special_ids(const spm_shim *s, int ids[4]) noexcept
{
    ids[0] = s->processor.unk_id(), ids[1] = s->processor.bos_id();
    ids[2] = s->processor.eos_id(), ids[3] = s->processor.pad_id();
}

int spm_shim_is_control(const spm_shim *s, int id) noexcept
{
    return id >= 0 && id < s->processor.GetPieceSize() && s->processor.IsControl(id);
}

int spm_shim_encode_ids(const spm_shim *s, const char *text, size_t len, int **ids, int *n,
                        char *why, size_t cap) noexcept
{
    *ids = nullptr, *n = 0;
    try {
        std::vector<int> out;
        const auto status = s->processor.Encode(std::string_view(text, len), &out);
        if (!status.ok()) return fail(why, cap, status);
        *ids = static_cast<int *>(std::malloc((out.size() ? out.size() : 1) * sizeof(int)));
        if (!*ids) return fail(why, cap, "out of memory");
        if (!out.empty()) std::memcpy(*ids, out.data(), out.size() * sizeof(int));
        *n = static_cast<int>(out.size());
        return 0;
    } catch (const std::exception &e) {
        return fail(why, cap, e.what());
    }
}

int spm_shim_encode_pieces(const spm_shim *s, const char *text, size_t len, char **bytes,
                           int *n, char *why, size_t cap) noexcept
{
    *bytes = nullptr, *n = 0;
    try {
        std::vector<std::string> pieces;
        const auto status = s->processor.Encode(std::string_view(text, len), &pieces);
        if (!status.ok()) return fail(why, cap, status);
        std::string joined;
        for (const auto &p : pieces) joined.append(p.c_str(), p.size() + 1);
        *bytes = static_cast<char *>(std::malloc(joined.size() ? joined.size() : 1));
        if (!*bytes) return fail(why, cap, "out of memory");
        std::memcpy(*bytes, joined.data(), joined.size());
        *n = static_cast<int>(pieces.size());
        return 0;
    } catch (const std::exception &e) {
        return fail(why, cap, e.what());
    }
}

int spm_shim_decode_ids(const spm_shim *s, const int *ids, int n, char **text, size_t *len,
                        char *why, size_t cap) noexcept
{
    *text = nullptr, *len = 0;
    try {
        std::string out;
        const auto status = s->processor.Decode(std::vector<int>(ids, ids + n), &out);
        return decoded(status, out, text, len, why, cap);
    } catch (const std::exception &e) {
        return fail(why, cap, e.what());
    }
}

int spm_shim_decode_pieces(const spm_shim *s, const char *const *pieces, int n, char **text,
                           size_t *len, char *why, size_t cap) noexcept
{
    *text = nullptr, *len = 0;
    try {
        std::vector<std::string> in(pieces, pieces + n);
        std::string out;
        const auto status = s->processor.Decode(in, &out);
        return decoded(status, out, text, len, why, cap);
    } catch (const std::exception &e) {
        return fail(why, cap, e.what());
    }
}

int spm_shim_train(const char *const *keys, const char *const *values, int n,
                   const char *const *sentences, size_t count, char **model, size_t *size,
                   char *why, size_t cap) noexcept
{
    *model = nullptr, *size = 0;
    try {
        std::unordered_map<std::string, std::string> kwargs;
        for (int i = 0; i < n; i++) kwargs[keys[i]] = values[i];
        Sentences input(sentences, count);
        std::string serialized;
        const auto status =
            sentencepiece::SentencePieceTrainer::Train(kwargs, &input, &serialized);
        if (!status.ok()) return fail(why, cap, status);
        if (!(*model = static_cast<char *>(std::malloc(serialized.size() + 1))))
            return fail(why, cap, "out of memory");
        std::memcpy(*model, serialized.data(), serialized.size());
        *size = serialized.size();
        return 0;
    } catch (const std::exception &e) {
        return fail(why, cap, e.what());
    }
}

} // extern "C"
