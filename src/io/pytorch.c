/* SPDX-License-Identifier: MIT */
/* PyTorch checkpoints (pytorch_model.bin) without Python: torch.save's zip archive
 *
 *   PREFIX/data.pkl     a pickle (protocol 2) of the state dict
 *   PREFIX/data/KEY     the bytes of storage KEY, little-endian
 *   PREFIX/version, PREFIX/byteorder, ...
 *
 * read by a pickle machine that knows the documented subset of a state dict and nothing
 * else: an OrderedDict (collections.OrderedDict) or dict of names to tensors, each rebuilt by
 * torch._utils._rebuild_tensor_v2 (or _rebuild_tensor, _rebuild_parameter) from a storage
 * that a persistent id names ('storage', torch.FloatStorage, KEY, location, numel). No
 * other global is looked up and no code runs: a file that names os.system, or any class
 * beyond these, is refused with its name, where torch.load would call it. Tensors come out
 * dense and row-major (any strides and offsets into shared storages), float16 and bfloat16
 * widened to float32, small integers to int32. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/weights.h"

#define MAX_PICKLE_BYTES ((size_t)1 << 30) /* data.pkl of 100k tensors is a few MB */
#define MAX_DEPTH 100000                   /* stack entries and marks */

typedef enum {
    V_NONE,
    V_BOOL,
    V_INT,
    V_FLOAT,
    V_STR,
    V_TUPLE,
    V_LIST,
    V_DICT,
    V_GLOBAL,
    V_STORAGE,
    V_TENSOR
} vkind;

typedef struct value value;
struct value {
    vkind kind;
    int64_t i;     /* V_BOOL, V_INT; V_STORAGE: its numel */
    char *s;       /* V_STR; V_GLOBAL "module.name"; V_STORAGE its key */
    value **items; /* V_TUPLE, V_LIST: n items; V_DICT: n / 2 key, value pairs */
    int n, cap;
    stored_type type;  /* V_STORAGE, and the V_GLOBAL of a storage class */
    int storage_class; /* V_GLOBAL: a torch.*Storage */
    value *storage;    /* V_TENSOR */
    int64_t offset, shape[QKV_MAX_DIMS], stride[QKV_MAX_DIMS];
    int ndim;
    value *next; /* every value, for freeing */
};

typedef struct {
    const char *file;
    const unsigned char *begin, *p, *end;
    value *all;
    value **stack;
    int top, cap;
    int *marks;
    int n_marks, marks_cap;
    value **memo;
    size_t memo_cap, memo_count; /* memo_count: indices set (MEMOIZE's next) */
    qkv_error *err;
} machine;

static const struct {
    const char *name;
    stored_type type;
} STORAGES[] = {
    {"torch.FloatStorage", STORED_F32},     {"torch.HalfStorage", STORED_F16},
    {"torch.BFloat16Storage", STORED_BF16}, {"torch.DoubleStorage", STORED_F64},
    {"torch.LongStorage", STORED_I64},      {"torch.IntStorage", STORED_I32},
    {"torch.ShortStorage", STORED_I16},     {"torch.CharStorage", STORED_I8},
    {"torch.ByteStorage", STORED_U8},       {"torch.BoolStorage", STORED_BOOL},
};

/* The callables a state dict needs; every other global is refused. */
static const char *const CALLABLES[] = {
    "collections.OrderedDict",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_tensor",
    "torch._utils._rebuild_parameter",
};

static qkv_status bad(machine *m, const char *what)
{
    return qkv_fail(m->err, QKV_ERR_FORMAT, "%s: data.pkl (byte %ld): %s", m->file,
                    (long)(m->p - m->begin), what);
}

static value *make(machine *m, vkind kind)
{
    value *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->kind = kind, v->next = m->all, m->all = v;
    return v;
}

static void free_all(machine *m)
{
    for (value *v = m->all, *next; v; v = next) {
        next = v->next;
        free(v->s), free(v->items), free(v);
    }
    free(m->stack), free(m->marks), free(m->memo);
}

static qkv_status push(machine *m, value *v)
{
    if (!v) return qkv_fail(m->err, QKV_ERR_NOMEM, "%s: out of memory", m->file);
    if (m->top == m->cap) {
        if (m->cap >= MAX_DEPTH) return bad(m, "the pickle's stack grows past 100000 entries");
        const int cap = m->cap ? 2 * m->cap : 64;
        value **s = realloc(m->stack, (size_t)cap * sizeof *s);
        if (!s) return qkv_fail(m->err, QKV_ERR_NOMEM, "%s: out of memory", m->file);
        m->stack = s, m->cap = cap;
    }
    m->stack[m->top++] = v;
    return QKV_OK;
}

static value *pop(machine *m)
{
    const int floor = m->n_marks ? m->marks[m->n_marks - 1] : 0;
    return m->top > floor ? m->stack[--m->top] : NULL;
}

static value *peek(machine *m)
{
    const int floor = m->n_marks ? m->marks[m->n_marks - 1] : 0;
    return m->top > floor ? m->stack[m->top - 1] : NULL;
}

static qkv_status add_item(machine *m, value *to, value *item)
{
    if (to->n == to->cap) {
        if (to->cap > (1 << 28)) return bad(m, "a container too large");
        const int cap = to->cap ? 2 * to->cap : 8;
        value **items = realloc(to->items, (size_t)cap * sizeof *items);
        if (!items) return qkv_fail(m->err, QKV_ERR_NOMEM, "%s: out of memory", m->file);
        to->items = items, to->cap = cap;
    }
    to->items[to->n++] = item;
    return QKV_OK;
}

/* The values above the last mark, removed with it, as a new tuple (kind V_TUPLE) or list. */
static qkv_status pop_mark(machine *m, value **out, vkind kind)
{
    if (!m->n_marks) return bad(m, "no mark to pop to");
    const int from = m->marks[--m->n_marks];
    value *t = make(m, kind);
    if (!t) return qkv_fail(m->err, QKV_ERR_NOMEM, "%s: out of memory", m->file);
    for (int i = from; i < m->top; i++) {
        qkv_status st = add_item(m, t, m->stack[i]);
        if (st) return st;
    }
    m->top = from;
    *out = t;
    return QKV_OK;
}

static qkv_status need(machine *m, size_t n)
{
    return (size_t)(m->end - m->p) >= n ? QKV_OK : bad(m, "the pickle ends inside an opcode");
}

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n; i-- > 0;) v = v << 8 | p[i];
    return v;
}

static qkv_status push_int(machine *m, int64_t i)
{
    value *v = make(m, V_INT);
    if (v) v->i = i;
    return push(m, v);
}

static qkv_status push_str(machine *m, const unsigned char *s, uint64_t n)
{
    value *v = make(m, V_STR);
    if (v && !(v->s = malloc((size_t)n + 1))) v = NULL;
    if (v) memcpy(v->s, s, (size_t)n), v->s[n] = '\0';
    if (v && memchr(v->s, '\0', (size_t)n)) return bad(m, "a string holds a NUL byte");
    return push(m, v);
}

/* A global: one of the storage classes or callables above, else refused by name. */
static qkv_status push_global(machine *m, const char *module, size_t ml, const char *name,
                              size_t nl)
{
    char full[256];
    if (ml + nl + 2 > sizeof full) return bad(m, "a global's name is too long");
    memcpy(full, module, ml), full[ml] = '.';
    memcpy(full + ml + 1, name, nl), full[ml + 1 + nl] = '\0';
    value *v = make(m, V_GLOBAL);
    if (!v || !(v->s = strdup(full)))
        return qkv_fail(m->err, QKV_ERR_NOMEM, "%s: out of memory", m->file);
    for (size_t i = 0; i < sizeof STORAGES / sizeof *STORAGES; i++)
        if (!strcmp(full, STORAGES[i].name)) v->storage_class = 1, v->type = STORAGES[i].type;
    int known = v->storage_class;
    for (size_t i = 0; i < sizeof CALLABLES / sizeof *CALLABLES; i++)
        known |= !strcmp(full, CALLABLES[i]);
    if (!known)
        return qkv_fail(m->err, QKV_ERR_FORMAT,
                        "%s: data.pkl names '%s', which is not part of a "
                        "state dict (tensors, storages, an OrderedDict of names): refused, since "
                        "loading it would run code (torch.load would call it)",
                        m->file, printable(full).s);
    return push(m, v);
}

static int is(const value *v, vkind k) { return v && v->kind == k; }

/* ('storage', torch.XStorage, key, location, numel): the storage, its bytes read later. */
static qkv_status persistent_load(machine *m, value *pid)
{
    if (!is(pid, V_TUPLE) || pid->n != 5 || !is(pid->items[0], V_STR) ||
        strcmp(pid->items[0]->s, "storage") || !is(pid->items[1], V_GLOBAL) ||
        !pid->items[1]->storage_class || !is(pid->items[2], V_STR) || !is(pid->items[4], V_INT) ||
        pid->items[4]->i < 0)
        return bad(m, "a persistent id that is not ('storage', torch.*Storage, key, location, "
                      "numel)");
    const char *key = pid->items[2]->s;
    if (!*key || strchr(key, '/') || !strcmp(key, ".."))
        return bad(m, "a storage key that is not a plain name");
    value *s = make(m, V_STORAGE);
    if (!s || !(s->s = strdup(key))) return qkv_fail(m->err, QKV_ERR_NOMEM, "out of memory");
    s->type = pid->items[1]->type, s->i = pid->items[4]->i;
    return push(m, s);
}

/* A tuple of n ints >= 0 into out (n <= QKV_MAX_DIMS). */
static int int_tuple(const value *t, int64_t *out, int *n)
{
    if (!is(t, V_TUPLE) || t->n > QKV_MAX_DIMS) return 0;
    for (int i = 0; i < t->n; i++) {
        if (!is(t->items[i], V_INT) || t->items[i]->i < 0) return 0;
        out[i] = t->items[i]->i;
    }
    *n = t->n;
    return 1;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]) (or
 * _rebuild_tensor's first four): a view every element of which lies inside the storage. */
static qkv_status rebuild_tensor(machine *m, const value *args, value **out)
{
    value *t = make(m, V_TENSOR);
    if (!t) return qkv_fail(m->err, QKV_ERR_NOMEM, "%s: out of memory", m->file);
    int nstride = -1;
    if (args->n < 4 || args->n > 7 || !is(args->items[0], V_STORAGE) ||
        !is(args->items[1], V_INT) || args->items[1]->i < 0 ||
        !int_tuple(args->items[2], t->shape, &t->ndim) ||
        !int_tuple(args->items[3], t->stride, &nstride) || nstride != t->ndim)
        return bad(m, "a tensor not rebuilt from (storage, offset, size, stride)");
    t->storage = args->items[0], t->offset = args->items[1]->i;
    int64_t numel;
    if (!shape_numel(t->shape, t->ndim, &numel)) return bad(m, "a tensor's size overflows");
    if (numel) { /* the last element: offset + sum (size - 1) * stride < the storage's numel */
        uint64_t last = (uint64_t)t->offset;
        for (int d = 0; d < t->ndim; d++) {
            const uint64_t step = (uint64_t)(t->shape[d] - 1);
            if (t->stride[d] && step > (UINT64_MAX / 2 - last) / (uint64_t)t->stride[d])
                return bad(m, "a tensor's strides overflow");
            last += step * (uint64_t)t->stride[d];
        }
        if (last >= (uint64_t)t->storage->i)
            return bad(m, "a tensor reaches past the end of its storage");
    }
    *out = t;
    return QKV_OK;
}

static qkv_status reduce(machine *m)
{
    value *args = pop(m), *fn = pop(m), *out = NULL;
    if (!is(args, V_TUPLE) || !is(fn, V_GLOBAL) || fn->storage_class)
        return bad(m, "REDUCE of something other than a known callable and its arguments");
    qkv_status st = QKV_OK;
    if (!strcmp(fn->s, "collections.OrderedDict")) {
        if (args->n) return bad(m, "OrderedDict called with arguments");
        if (!(out = make(m, V_DICT))) st = qkv_fail(m->err, QKV_ERR_NOMEM, "out of memory");
    } else if (!strcmp(fn->s, "torch._utils._rebuild_parameter")) {
        if (args->n < 1 || !is(args->items[0], V_TENSOR))
            return bad(m, "a parameter rebuilt from something other than a tensor");
        out = args->items[0];
    } else {
        st = rebuild_tensor(m, args, &out);
    }
    return st ? st : push(m, out);
}

static qkv_status set_items(machine *m, value *dict, value *const *kv, int n)
{
    if (!is(dict, V_DICT)) return bad(m, "SETITEM(S) on something other than a dict");
    qkv_status st = QKV_OK;
    for (int i = 0; !st && i < n; i++) st = add_item(m, dict, kv[i]);
    return st;
}

static qkv_status memo_put(machine *m, uint64_t idx, value *v)
{
    if (!v) return bad(m, "a memo put with nothing on the stack");
    if (idx >= (uint64_t)(m->end - m->p) + m->memo_cap + 1024)
        return bad(m, "a memo index far beyond the pickle's size");
    if (idx >= m->memo_cap) {
        size_t cap = m->memo_cap ? m->memo_cap : 64;
        while (cap <= idx) cap *= 2;
        value **memo = realloc(m->memo, cap * sizeof *memo);
        if (!memo) return qkv_fail(m->err, QKV_ERR_NOMEM, "%s: out of memory", m->file);
        memset(memo + m->memo_cap, 0, (cap - m->memo_cap) * sizeof *memo);
        m->memo = memo, m->memo_cap = cap;
    }
    m->memo_count += !m->memo[idx];
    m->memo[idx] = v;
    return QKV_OK;
}

static qkv_status memo_get(machine *m, uint64_t idx)
{
    if (idx >= m->memo_cap || !m->memo[idx]) return bad(m, "a memo get of an unset index");
    return push(m, m->memo[idx]);
}

/* One opcode (the subset pickle protocols 2 and 4 use for a state dict). Long: one case per
 * opcode, the format's table read top to bottom; splitting it would scatter the table. */
static qkv_status step(machine *m, int *stop)
{
    const unsigned op = *m->p++;
    qkv_status st = QKV_OK;
    value *a, *b, *c;
    size_t n;
    switch (op) {
    case 0x80: /* PROTO */
        if (!(st = need(m, 1)) && *m->p++ > 5) st = bad(m, "a pickle protocol past 5");
        return st;
    case 0x95: /* FRAME: a length hint */
        if (!(st = need(m, 8))) m->p += 8;
        return st;
    case '}':
        return push(m, make(m, V_DICT));
    case ']':
        return push(m, make(m, V_LIST));
    case ')':
        return push(m, make(m, V_TUPLE));
    case 'N':
        return push(m, make(m, V_NONE));
    case 0x88:
    case 0x89: /* NEWTRUE, NEWFALSE */
        if ((a = make(m, V_BOOL))) a->i = op == 0x88;
        return push(m, a);
    case '(': /* MARK */
        if (m->n_marks == m->marks_cap) {
            if (m->marks_cap >= MAX_DEPTH) return bad(m, "marks nested too deep");
            const int cap = m->marks_cap ? 2 * m->marks_cap : 16;
            int *marks = realloc(m->marks, (size_t)cap * sizeof *marks);
            if (!marks) return qkv_fail(m->err, QKV_ERR_NOMEM, "%s: out of memory", m->file);
            m->marks = marks, m->marks_cap = cap;
        }
        m->marks[m->n_marks++] = m->top;
        return QKV_OK;
    case 'K': /* BININT1 */
        if ((st = need(m, 1))) return st;
        return push_int(m, *m->p++);
    case 'M': /* BININT2 */
        if ((st = need(m, 2))) return st;
        m->p += 2;
        return push_int(m, (int64_t)le(m->p - 2, 2));
    case 'J': /* BININT: signed 32 bits */
        if ((st = need(m, 4))) return st;
        m->p += 4;
        return push_int(m, (int32_t)(uint32_t)le(m->p - 4, 4));
    case 0x8a: /* LONG1: n bytes, two's complement */
        if ((st = need(m, 1))) return st;
        n = *m->p++;
        if (n > 8) return bad(m, "an integer wider than 64 bits");
        if ((st = need(m, n))) return st;
        {
            uint64_t v = n ? le(m->p, (int)n) : 0;
            if (n && n < 8 && (m->p[n - 1] & 0x80)) v |= ~(uint64_t)0 << (8 * n);
            m->p += n;
            return push_int(m, (int64_t)v);
        }
    case 'G': /* BINFLOAT: a big-endian double, kept as nothing a state dict uses */
        if ((st = need(m, 8))) return st;
        m->p += 8;
        return push(m, make(m, V_FLOAT));
    case 'X':
    case 'T':
    case 0x8c:
    case 'U':
    case 0x8d: /* unicode and byte strings */
        n = op == 0x8c || op == 'U' ? 1 : op == 0x8d ? 8 : 4;
        if ((st = need(m, n))) return st;
        {
            const uint64_t len = le(m->p, (int)n);
            m->p += n;
            if (len > (uint64_t)(m->end - m->p)) return bad(m, "a string passes the end");
            m->p += len;
            return push_str(m, m->p - len, len);
        }
    case 'c': { /* GLOBAL: "module\nname\n" */
        const unsigned char *nl1 = memchr(m->p, '\n', (size_t)(m->end - m->p));
        const unsigned char *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(m->end - nl1 - 1)) : NULL;
        if (!nl2) return bad(m, "a GLOBAL without its two lines");
        const unsigned char *mod = m->p;
        m->p = nl2 + 1;
        return push_global(m, (const char *)mod, (size_t)(nl1 - mod), (const char *)nl1 + 1,
                           (size_t)(nl2 - nl1 - 1));
    }
    case 0x93: /* STACK_GLOBAL */
        b = pop(m), a = pop(m);
        if (!is(a, V_STR) || !is(b, V_STR)) return bad(m, "STACK_GLOBAL without two strings");
        return push_global(m, a->s, strlen(a->s), b->s, strlen(b->s));
    case 'q':
    case 'r': /* BINPUT, LONG_BINPUT */
        n = op == 'q' ? 1 : 4;
        if ((st = need(m, n))) return st;
        m->p += n;
        return memo_put(m, le(m->p - n, (int)n), peek(m));
    case 0x94: /* MEMOIZE */
        return memo_put(m, m->memo_count, peek(m));
    case 'h':
    case 'j': /* BINGET, LONG_BINGET */
        n = op == 'h' ? 1 : 4;
        if ((st = need(m, n))) return st;
        m->p += n;
        return memo_get(m, le(m->p - n, (int)n));
    case 't': /* TUPLE */
        if ((st = pop_mark(m, &a, V_TUPLE))) return st;
        return push(m, a);
    case 'l': /* LIST */
        if ((st = pop_mark(m, &a, V_LIST))) return st;
        return push(m, a);
    case 0x85:
    case 0x86:
    case 0x87: /* TUPLE1, TUPLE2, TUPLE3 */
        n = op - 0x84;
        if (!(a = make(m, V_TUPLE))) return qkv_fail(m->err, QKV_ERR_NOMEM, "out of memory");
        {
            value *items[3];
            for (size_t i = n; i-- > 0;)
                if (!(items[i] = pop(m))) return bad(m, "a TUPLEn with too few values");
            for (size_t i = 0; !st && i < n; i++) st = add_item(m, a, items[i]);
        }
        return st ? st : push(m, a);
    case 'a': /* APPEND */
        b = pop(m), a = peek(m);
        if (!b || !is(a, V_LIST)) return bad(m, "APPEND to something other than a list");
        return add_item(m, a, b);
    case 'e': /* APPENDS */
        if ((st = pop_mark(m, &b, V_TUPLE))) return st;
        a = peek(m);
        if (!is(a, V_LIST)) return bad(m, "APPENDS to something other than a list");
        for (int i = 0; !st && i < b->n; i++) st = add_item(m, a, b->items[i]);
        return st;
    case 's': /* SETITEM */
        b = pop(m), a = pop(m);
        if (!a || !b) return bad(m, "SETITEM with too few values");
        {
            value *kv[2] = {a, b};
            return set_items(m, peek(m), kv, 2);
        }
    case 'u': /* SETITEMS */
        if ((st = pop_mark(m, &a, V_TUPLE))) return st;
        if (a->n % 2) return bad(m, "SETITEMS with a key and no value");
        return set_items(m, peek(m), a->items, a->n);
    case 'Q': /* BINPERSID */
        a = pop(m);
        return persistent_load(m, a);
    case 'R':
        return reduce(m);
    case 'b': /* BUILD: an OrderedDict's attributes (a state dict's _metadata), dropped */
        a = pop(m), c = peek(m);
        if (!a || !is(c, V_DICT)) return bad(m, "BUILD of something other than a dict");
        return QKV_OK;
    case '.': /* STOP */
        *stop = 1;
        return QKV_OK;
    default: {
        char what[64];
        snprintf(what, sizeof what, "opcode 0x%02x, which a state dict does not use", op);
        return bad(m, what);
    }
    }
}

/* ---- the archive -------------------------------------------------------------------- */

typedef struct {
    const char *name;
    const value *tensor;
} named;

static int by_storage(const void *a, const void *b)
{
    const named *x = a, *y = b;
    return strcmp(x->tensor->storage->s, y->tensor->storage->s);
}

/* PREFIX of PREFIX/data.pkl: the one entry of that name one folder down. */
static qkv_status find_pickle(const zip_archive *z, const char *file, char *prefix, size_t cap,
                              qkv_error *err)
{
    const zip_entry *found = NULL;
    for (int i = 0; i < z->count; i++) {
        const char *slash = strchr(z->entries[i].name, '/');
        if (!slash || strcmp(slash, "/data.pkl")) continue;
        if (found)
            return qkv_fail(err, QKV_ERR_FORMAT,
                            "%s: two pickles ('%s' and '%s'): not one "
                            "checkpoint",
                            file, printable(found->name).s, printable(z->entries[i].name).s);
        found = &z->entries[i];
    }
    if (!found)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: a zip archive without PREFIX/data.pkl: not a "
                        "PyTorch checkpoint",
                        file);
    const size_t n = (size_t)(strchr(found->name, '/') - found->name);
    if (n + 1 > cap) return qkv_fail(err, QKV_ERR_FORMAT, "%s: a folder name too long", file);
    memcpy(prefix, found->name, n), prefix[n] = '\0';
    char name[600];
    snprintf(name, sizeof name, "%s/constants.pkl", prefix);
    if (zip_find(z, name))
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: a TorchScript archive (it has constants.pkl), "
                        "not a state dict saved with torch.save",
                        file);
    snprintf(name, sizeof name, "%s/byteorder", prefix);
    const zip_entry *order = zip_find(z, name);
    char *text = NULL;
    qkv_status st = order ? zip_extract_alloc(z, order, 16, &text, err) : QKV_OK;
    if (!st && text && strcmp(text, "little"))
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: byteorder '%s': qkv reads little-endian "
                      "checkpoints",
                      file, printable(text).s);
    free(text);
    return st;
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The state dict: names (strings) to tensors, in the file's order. */
static qkv_status state_dict(machine *m, const value *root, named **out, int *count)
{
    if (!is(root, V_DICT))
        return qkv_fail(m->err, QKV_ERR_FORMAT,
                        "%s: the pickle is not a dict of tensors (a "
                        "state dict)",
                        m->file);
    const int n = root->n / 2;
    named *t = calloc((size_t)n + 1, sizeof *t);
    if (!t) return qkv_fail(m->err, QKV_ERR_NOMEM, "%s: out of memory", m->file);
    for (int i = 0; i < n; i++) {
        const value *k = root->items[2 * i], *v = root->items[2 * i + 1];
        if (!is(k, V_STR) || !is(v, V_TENSOR)) {
            free(t);
            return qkv_fail(m->err, QKV_ERR_FORMAT,
                            "%s: item %d of the state dict is not a name "
                            "and a tensor%s%s",
                            m->file, i, is(k, V_STR) ? ": " : "",
                            is(k, V_STR) ? printable(k->s).s : "");
        }
        t[i] = (named){k->s, v};
    }
    const char **names = malloc(((size_t)n + 1) * sizeof *names);
    if (!names) return free(t), qkv_fail(m->err, QKV_ERR_NOMEM, "%s: out of memory", m->file);
    for (int i = 0; i < n; i++) names[i] = t[i].name;
    qsort(names, (size_t)n, sizeof *names, compare_strings);
    for (int i = 1; i < n; i++)
        if (!strcmp(names[i], names[i - 1])) {
            qkv_status st = qkv_fail(m->err, QKV_ERR_FORMAT, "%s: tensor '%s' appears twice",
                                     m->file, printable(names[i]).s);
            free(names), free(t);
            return st;
        }
    free(names);
    *out = t, *count = n;
    return QKV_OK;
}

/* Every tensor's elements, storage by storage (each storage's bytes read once). */
static qkv_status fill(qkv_tensor_file *f, const zip_archive *z, const char *prefix, named *t,
                       int n, const char *file, qkv_error *err)
{
    named *order = malloc(((size_t)n + 1) * sizeof *order);
    if (!order) return qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", file);
    for (int i = 0; i < n; i++) {
        qkv_tensor *q = &f->tensors[i];
        q->dtype = stored_as(t[i].tensor->storage->type);
        q->ndim = t[i].tensor->ndim;
        memcpy(q->shape, t[i].tensor->shape, sizeof q->shape);
        shape_numel(q->shape, q->ndim, &q->numel);
        if (!(q->name = strdup(t[i].name))) {
            free(order);
            return qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", file);
        }
        order[i] = t[i];
        order[i].name = (const char *)q; /* its slot, through the sort */
    }
    qkv_status st = tensor_file_alloc_data(f, file, err);
    if (!st) qsort(order, (size_t)n, sizeof *order, by_storage);
    unsigned char *bytes = NULL;
    for (int i = 0; !st && i < n;) {
        const value *s = order[i].tensor->storage;
        char name[600];
        snprintf(name, sizeof name, "%s/data/%s", prefix, s->s);
        const zip_entry *e = zip_find(z, name);
        int j = i;
        uint64_t need = 0;
        for (; j < n && !strcmp(order[j].tensor->storage->s, s->s); j++) {
            const value *r = order[j].tensor->storage;
            const uint64_t b = (uint64_t)r->i * stored_size(r->type);
            if ((uint64_t)r->i > UINT64_MAX / 8) need = UINT64_MAX;
            else if (b > need) need = b;
        }
        if (!e)
            st = qkv_fail(err, QKV_ERR_FORMAT,
                          "%s: tensor '%s': its storage '%s' is not in the "
                          "archive",
                          file, printable(((const qkv_tensor *)order[i].name)->name).s,
                          printable(name).s);
        else if (e->usize < need)
            st = qkv_fail(err, QKV_ERR_FORMAT,
                          "%s: storage '%s' holds %llu bytes, its tensors "
                          "need %llu",
                          file, printable(name).s, (unsigned long long)e->usize,
                          (unsigned long long)need);
        else if (!(bytes = malloc(e->usize ? (size_t)e->usize : 1)))
            st = qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory for storage '%s'", file,
                          printable(name).s);
        if (!st) st = zip_extract(z, e, bytes, err);
        for (int k = i; !st && k < j; k++) {
            const value *v = order[k].tensor;
            qkv_tensor *q = (qkv_tensor *)order[k].name;
            stored_gather(q->data, bytes, v->storage->type, v->ndim, v->shape, v->stride,
                          v->offset);
        }
        free(bytes), bytes = NULL;
        i = j;
    }
    free(order);
    return st;
}

static qkv_status load_archive(qkv_tensor_file *out, const byte_source *src, qkv_error *err)
{
    memset(out, 0, sizeof *out);
    unsigned char head[16] = {0};
    const size_t hn = src->size < sizeof head ? (size_t)src->size : sizeof head;
    qkv_status st = byte_source_read(src, head, 0, hn, err);
    if (st) return st;
    /* torch < 1.6's format: a pickled magic number (LONG1 of 10 bytes) and no zip */
    if (hn >= 4 && head[0] == 0x80 && head[2] == 0x8a && head[3] == 0x0a)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: a PyTorch file in the legacy format of torch "
                        "before 1.6 (not a zip archive): save it again with a newer torch, or "
                        "as safetensors",
                        src->name);
    if (!zip_magic(head, hn))
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: not a PyTorch checkpoint (torch.save writes a "
                        "zip archive)",
                        src->name);
    zip_archive z;
    if ((st = zip_open(&z, src, err))) return st;
    char prefix[512], pkl_name[600], *pkl = NULL;
    st = find_pickle(&z, src->name, prefix, sizeof prefix, err);
    snprintf(pkl_name, sizeof pkl_name, "%s/data.pkl", prefix);
    if (!st) st = zip_extract_alloc(&z, zip_find(&z, pkl_name), MAX_PICKLE_BYTES, &pkl, err);
    machine m = {.file = src->name, .err = err};
    if (pkl)
        m.begin = m.p = (const unsigned char *)pkl, m.end = m.p + zip_find(&z, pkl_name)->usize;
    int stop = 0;
    while (!st && !stop) st = m.p < m.end ? step(&m, &stop) : bad(&m, "no STOP opcode");
    if (!st && (m.top != 1 || m.n_marks)) st = bad(&m, "the pickle does not end with one object");
    named *t = NULL;
    int n = 0;
    if (!st) st = state_dict(&m, m.stack[0], &t, &n);
    if (!st) st = tensor_file_alloc(out, n, src->name, err);
    if (!st) st = fill(out, &z, prefix, t, n, src->name, err);
    free(t);
    free_all(&m);
    free(pkl);
    zip_close(&z);
    if (st) qkv_tensor_file_free(out);
    return st;
}

TENSOR_FILE_CALLS(pytorch, load_archive)
