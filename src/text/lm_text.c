/* SPDX-License-Identifier: MIT */
/* Text as the language model's tokens: character- or byte-level vocabularies stored as
 * ordinary qkv_vocab files (one token per line), with the characters a line cannot hold
 * escaped (\n \r \t \s \\ \xHH) and bytes written <0x0A>. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

/* The code point of the UTF-8 character at s (already validated) and its length in bytes. */
static uint32_t utf8_decode(const unsigned char *s, int *len)
{
    if (s[0] < 0x80) return *len = 1, s[0];
    if (s[0] < 0xE0) return *len = 2, ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    if (s[0] < 0xF0)
        return *len = 3, ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) |
                         (s[2] & 0x3F);
    return *len = 4, ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
                     ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

/* The token of code point cp (a NUL-terminated string of at most 4 bytes + NUL). */
static void char_token(char out[8], uint32_t cp)
{
    switch (cp) {
    case '\n': strcpy(out, "\\n"); return;
    case '\r': strcpy(out, "\\r"); return;
    case '\t': strcpy(out, "\\t"); return;
    case ' ': strcpy(out, "\\s"); return;
    case '\\': strcpy(out, "\\\\"); return;
    default: break;
    }
    if (cp < 0x20 || cp == 0x7F) {
        snprintf(out, 8, "\\x%02X", (unsigned)cp);
    } else if (cp < 0x80) {
        out[0] = (char)cp, out[1] = '\0';
    } else if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = '\0';
    } else if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)), out[3] = '\0';
    } else {
        out[0] = (char)(0xF0 | cp >> 18), out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), out[3] = (char)(0x80 | (cp & 0x3F));
        out[4] = '\0';
    }
}

static void byte_token(char out[8], unsigned b) { snprintf(out, 8, "<0x%02X>", b); }

static qkv_status check_utf8(const char *text, size_t len, qkv_error *err)
{
    size_t ok = qkv_utf8_check(text, len);
    if (ok < len)
        return qkv_fail(err, QKV_ERR_FORMAT, "invalid UTF-8 (or a NUL byte) at byte %zu: a "
                        "character vocabulary needs UTF-8 text; use a byte vocabulary", ok);
    return QKV_OK;
}

qkv_status qkv_lm_vocab_build(qkv_vocab *v, const char *text, size_t len, int bytes,
                              qkv_error *err)
{
    memset(v, 0, sizeof *v);
    enum { N_CODE_POINTS = 0x110000 };
    qkv_status st = bytes ? QKV_OK : check_utf8(text, len, err);
    if (st) return st;
    /* which tokens occur: every byte, or the code points seen */
    unsigned char *seen = bytes ? NULL : calloc(N_CODE_POINTS / 8, 1);
    if (!bytes && !seen) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    size_t count = bytes ? 256 : 0;
    for (size_t i = 0; !bytes && i < len;) {
        int n;
        uint32_t cp = utf8_decode((const unsigned char *)text + i, &n);
        if (!(seen[cp >> 3] & (1u << (cp & 7)))) seen[cp >> 3] |= (unsigned char)(1u << (cp & 7)), count++;
        i += (size_t)n;
    }
    /* the tokens in id order, each once, so qkv_vocab_build keeps that order */
    char (*names)[8] = malloc((count ? count : 1) * sizeof *names);
    const char **tokens = malloc((count ? count : 1) * sizeof *tokens);
    if (!names || !tokens) {
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    } else {
        size_t k = 0;
        for (uint32_t cp = 0; k < count; cp++) {
            if (bytes) byte_token(names[k], cp);
            else if (seen[cp >> 3] & (1u << (cp & 7))) char_token(names[k], cp);
            else continue;
            tokens[k] = names[k], k++;
        }
        st = qkv_vocab_build(v, tokens, count, 1, err);
    }
    free(seen), free(names), free(tokens);
    return st;
}

static int is_byte_vocab(const qkv_vocab *v) { return qkv_vocab_id(v, "<0x00>") != QKV_UNK; }

qkv_status qkv_lm_encode(int *ids, size_t *n, size_t *unknown, const qkv_vocab *v,
                         const char *text, size_t len, qkv_error *err)
{
    char tok[8];
    int ascii[256]; /* ids of single bytes (byte vocabulary) or ASCII characters */
    const int bytes = is_byte_vocab(v);
    size_t unk = 0, count = 0;
    *n = 0;
    if (unknown) *unknown = 0;
    for (unsigned b = 0; b < (bytes ? 256u : 128u); b++) {
        if (bytes) byte_token(tok, b);
        else char_token(tok, b);
        ascii[b] = qkv_vocab_id(v, tok);
    }
    if (bytes) {
        /* a vocabulary file may lack some bytes: those are <unk>, and counted */
        for (size_t i = 0; i < len; i++) {
            ids[i] = ascii[(unsigned char)text[i]];
            unk += ids[i] == QKV_UNK;
        }
        *n = len;
        if (unknown) *unknown = unk;
        return QKV_OK;
    }
    qkv_status st = check_utf8(text, len, err);
    if (st) return st;
    for (size_t i = 0; i < len;) {
        int k;
        uint32_t cp = utf8_decode((const unsigned char *)text + i, &k);
        int id;
        if (cp < 128) {
            id = ascii[cp];
        } else {
            char_token(tok, cp);
            id = qkv_vocab_id(v, tok);
        }
        /* <unk> itself is a reserved token, never a character: any 0 here is unknown */
        unk += id == QKV_UNK;
        ids[count++] = id;
        i += (size_t)k;
    }
    *n = count;
    if (unknown) *unknown = unk;
    return QKV_OK;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                          : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

size_t qkv_lm_token_text(char *out, size_t cap, const qkv_vocab *v, int id)
{
    char buf[8] = "";
    size_t n = 0;
    const char *t = id >= QKV_N_RESERVED ? qkv_vocab_token(v, id) : NULL;
    size_t len = t ? strlen(t) : 0;
    if (len == 6 && !strncmp(t, "<0x", 3) && t[5] == '>' && hex_digit(t[3]) >= 0 &&
        hex_digit(t[4]) >= 0) {
        buf[n++] = (char)(hex_digit(t[3]) * 16 + hex_digit(t[4]));
    } else if (len >= 2 && t[0] == '\\') {
        switch (t[1]) {
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 's': buf[n++] = ' '; break;
        case '\\': buf[n++] = '\\'; break;
        case 'x':
            if (len == 4 && hex_digit(t[2]) >= 0 && hex_digit(t[3]) >= 0)
                buf[n++] = (char)(hex_digit(t[2]) * 16 + hex_digit(t[3]));
            break;
        default: break;
        }
    } else if (t && len < sizeof buf) {
        memcpy(buf, t, len);
        n = len;
    }
    if (cap > 0) {
        size_t w = n < cap - 1 ? n : cap - 1;
        memcpy(out, buf, w);
        out[w] = '\0';
    }
    return n;
}
