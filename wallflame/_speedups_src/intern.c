#include "speedups.h"

/* ---- Interner ------------------------------------------------------------------------- */

typedef struct {
    uint64_t hash;
    Py_ssize_t len;
    char *key; /* the bytes looked up (a copy; not always ``str``'s UTF-8: see below) */
    PyObject *str;
} Slot;

/* The parts of the line split last: borrowed names (the table owns them) and where each
 * ends. */
typedef struct {
    PyObject **items;
    Py_ssize_t *ends;  /* the offset of the ';' (or of the end) after each part */
    Py_uhash_t *accs;  /* the tuple hash's state after the parts from the second to this one */
    Py_ssize_t count, cap;
} Parts;

/* CPython's tuple hash (Objects/tupleobject.c, xxHash-based, 64-bit), computed part by part so
 * that the parts a line shares with the previous one are not hashed again.  Checked against
 * the interpreter's own at import (``tuple_hash_ok``); when they differ it is not used. */
#define XXPRIME_1 ((Py_uhash_t)11400714785074694791ULL)
#define XXPRIME_2 ((Py_uhash_t)14029467366897019727ULL)
#define XXPRIME_5 ((Py_uhash_t)2870177450012600261ULL)

int tuple_hash_ok = 0;

static Py_uhash_t hash_step(Py_uhash_t acc, Py_uhash_t lane)
{
    acc += lane * XXPRIME_2;
    acc = (acc << 31) | (acc >> 33);
    return acc * XXPRIME_1;
}

static Py_hash_t hash_end(Py_uhash_t acc, Py_ssize_t len)
{
    acc += (Py_uhash_t)len ^ (XXPRIME_5 ^ 3527539UL);
    return acc == (Py_uhash_t)-1 ? 1546275796 : (Py_hash_t)acc;
}

typedef struct {
    PyObject_HEAD
    Slot *slots;
    Py_ssize_t cap; /* a power of two */
    Py_ssize_t used;
    /* The previous line split and its parts: sorted folded lines share long prefixes, whose
     * parts are taken from it without hashing them again. */
    char *prev;
    Py_ssize_t prev_len, prev_cap;
    Parts last;
} Interner;

/* A word-at-a-time hash (names average tens of bytes; equality is checked with memcmp). */
uint64_t hash_bytes(const char *p, Py_ssize_t n)
{
    const uint64_t k = 0x9E3779B97F4A7C15ULL;
    uint64_t h = (uint64_t)n * k;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * k;
        h ^= h >> 29;
    }
    if (n > 0) {
        uint64_t w = 0;
        memcpy(&w, p, (size_t)n);
        h = (h ^ w) * k;
    }
    h ^= h >> 32;
    return h;
}

/* The hash tables here (Slot, BSlot, SSlot) probe linearly from hash & (cap - 1) in a power
 * of two of slots; a slot holds its 64-bit hash at offset ``hash_at`` and is empty where the
 * object pointer at offset ``obj_at`` is NULL.  A new array of ``cap`` slots of ``size``
 * bytes holding the used slots of ``old`` (which has ``old_cap``), each where a lookup finds
 * it; the caller frees ``old``.  NULL with MemoryError. */
void *slots_rehash(const void *old, Py_ssize_t old_cap, Py_ssize_t cap, size_t size,
                          size_t hash_at, size_t obj_at)
{
    char *slots = PyMem_Calloc((size_t)cap, size);
    if (slots == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < old_cap; i++) {
        const char *s = (const char *)old + (size_t)i * size;
        if (*(PyObject *const *)(s + obj_at) == NULL)
            continue;
        Py_ssize_t j = (Py_ssize_t)(*(const uint64_t *)(s + hash_at) & (uint64_t)(cap - 1));
        while (*(PyObject **)(slots + (size_t)j * size + obj_at) != NULL)
            j = (j + 1) & (cap - 1);
        memcpy(slots + (size_t)j * size, s, size);
    }
    return slots;
}

static int interner_grow(Interner *self)
{
    Py_ssize_t cap = self->cap ? self->cap * 2 : 1024;
    Slot *slots = slots_rehash(self->slots, self->cap, cap, sizeof(Slot),
                               offsetof(Slot, hash), offsetof(Slot, str));
    if (slots == NULL)
        return -1;
    PyMem_Free(self->slots);
    self->slots = slots;
    self->cap = cap;
    return 0;
}

/* A borrowed reference to the one str object that the bytes p[0:n] decode to (UTF-8, with
 * U+FFFD for invalid sequences, as a folded file is read).  Two different invalid sequences
 * may give equal strings held as two objects: equal either way, never merged wrongly. */
static PyObject *intern_bytes(Interner *self, const char *p, Py_ssize_t n)
{
    if (2 * (self->used + 1) > self->cap && interner_grow(self) < 0)
        return NULL;
    uint64_t h = hash_bytes(p, n);
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(self->cap - 1));
    for (;;) {
        Slot *s = &self->slots[j];
        if (s->str == NULL)
            break;
        if (s->hash == h && s->len == n && memcmp(s->key, p, (size_t)n) == 0)
            return s->str;
        j = (j + 1) & (self->cap - 1);
    }
    char *key = PyMem_Malloc((size_t)n + 1);
    if (key == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(key, p, (size_t)n);
    PyObject *str = PyUnicode_DecodeUTF8(p, n, "replace");
    if (str == NULL) {
        PyMem_Free(key);
        return NULL;
    }
    Slot *s = &self->slots[j];
    s->hash = h;
    s->len = n;
    s->key = key;
    s->str = str; /* the table's reference */
    self->used++;
    return str;
}

/* The length of the longest common prefix of a[0:n] and b[0:n]. */
static Py_ssize_t common_prefix(const char *a, const char *b, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y)
            break;
    }
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

static int parts_push(Parts *ps, PyObject *item, Py_ssize_t end)
{
    if (ps->count == ps->cap) {
        Py_ssize_t cap = ps->cap ? ps->cap * 2 : 256;
        PyObject **items = PyMem_Realloc(ps->items, (size_t)cap * sizeof(PyObject *));
        if (items != NULL)
            ps->items = items;
        Py_ssize_t *ends = PyMem_Realloc(ps->ends, (size_t)cap * sizeof(Py_ssize_t));
        if (ends != NULL)
            ps->ends = ends;
        Py_uhash_t *accs = PyMem_Realloc(ps->accs, (size_t)cap * sizeof(Py_uhash_t));
        if (accs != NULL)
            ps->accs = accs;
        if (items == NULL || ends == NULL || accs == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        ps->cap = cap;
    }
    Py_uhash_t acc = XXPRIME_5; /* the first part (the thread) is not in the frames' tuple */
    if (ps->count > 0 && tuple_hash_ok) {
        Py_hash_t lane = PyObject_Hash(item); /* a str's: computed once, then cached */
        if (lane == -1)
            return -1;
        acc = hash_step(ps->accs[ps->count - 1], (Py_uhash_t)lane);
    }
    ps->items[ps->count] = item;
    ps->accs[ps->count] = acc;
    ps->ends[ps->count++] = end;
    return 0;
}

/* The ';'-separated parts of u[0:n] from the ``skip``-th on, as a tuple of shared strings;
 * with ``first``, the first part (borrowed) too, and with ``hash`` (only for ``skip`` 1, when
 * ``tuple_hash_ok``) the tuple's hash.  The leading parts equal to the previous line's (the
 * same bytes up to and including their ';') are that line's names. */
static PyObject *split_bytes(Interner *self, const char *u, Py_ssize_t n, Py_ssize_t skip,
                             PyObject **first, Py_hash_t *hash)
{
    Parts *last = &self->last;
    Py_ssize_t start = 0, keep = 0;
    if (last->count > 1) {
        Py_ssize_t same = common_prefix(u, self->prev, n < self->prev_len ? n : self->prev_len);
        /* the parts that end, with their ';', within the common prefix (the last part has
         * no ';') stay; the rest of the line is split after them */
        while (keep + 1 < last->count && last->ends[keep] < same)
            keep++;
        start = keep ? last->ends[keep - 1] + 1 : 0;
    }
    last->count = keep;
    const char *p = u + start, *end = u + n;
    for (;;) {
        const char *q = memchr(p, ';', (size_t)(end - p));
        if (q == NULL)
            q = end;
        PyObject *s = intern_bytes(self, p, q - p);
        if (s == NULL || parts_push(last, s, q - u) < 0) {
            last->count = 0; /* the line is not remembered */
            return NULL;
        }
        if (q == end)
            break;
        p = q + 1;
    }
    if (n > self->prev_cap) {
        char *prev = PyMem_Realloc(self->prev, (size_t)n);
        if (prev == NULL) {
            last->count = 0;
            return PyErr_NoMemory();
        }
        self->prev = prev;
        self->prev_cap = n;
    }
    memcpy(self->prev, u, (size_t)n);
    self->prev_len = n;
    Py_ssize_t count = last->count;
    if (first != NULL)
        *first = last->items[0];
    if (hash != NULL)
        *hash = hash_end(last->accs[count - 1], count - 1);
    if (skip > count)
        skip = count;
    PyObject *out = PyTuple_New(count - skip);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t k = skip; k < count; k++) {
        PyObject *item = last->items[k];
        Py_INCREF(item);
        PyTuple_SET_ITEM(out, k - skip, item);
    }
    return out;
}

static PyObject *Interner_split(Interner *self, PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "split() takes a str");
        return NULL;
    }
    Py_ssize_t n;
    /* Fails (UnicodeEncodeError) on a lone surrogate: the caller falls back to str.split. */
    const char *u = PyUnicode_AsUTF8AndSize(arg, &n);
    if (u == NULL)
        return NULL;
    return split_bytes(self, u, n, 0, NULL, NULL);
}

static int starts_with(const char *p, Py_ssize_t n, const char *prefix)
{
    size_t k = strlen(prefix);
    return (size_t)n >= k && memcmp(p, prefix, k) == 0;
}

/* Whether a line is one fold_plain takes: ``ROOT;FRAME;... COUNT`` with a plain root. */
static int plain_line(const char *p, Py_ssize_t n, const char **space, long long *count)
{
    /* Not empty, not a comment, not starting with a space of any kind (str.strip() would see
     * those; Python also counts \x1c-\x1f as spaces), ASCII first. */
    if (n == 0 || (unsigned char)p[0] <= 0x20 || (unsigned char)p[0] >= 0x7f || p[0] == '#')
        return 0;
    const char *sp = NULL;
    for (const char *q = p + n - 1; q >= p; q--)
        if (*q == ' ') {
            sp = q;
            break;
        }
    if (sp == NULL || sp == p)
        return 0;
    Py_ssize_t digits = p + n - (sp + 1);
    if (digits < 1 || digits > 18)
        return 0;
    long long v = 0;
    for (const char *q = sp + 1; q < p + n; q++) {
        if (*q < '0' || *q > '9')
            return 0;
        v = v * 10 + (*q - '0');
    }
    Py_ssize_t len = sp - p;
    if (memchr(p, '\\', (size_t)len) != NULL)
        return 0;
    const char *semi = memchr(p, ';', (size_t)len);
    Py_ssize_t root = semi ? semi - p : len;
    if (memchr(p, '/', (size_t)root) != NULL || starts_with(p, root, "process ") ||
        starts_with(p, root, "thread ("))
        return 0;
    *space = sp;
    *count = v;
    return 1;
}

/* hash(key_type(frames, 0, thread, 0, on, "", "", 0)) from hash(frames); -1 on an error. */
static Py_hash_t key_hash(Py_hash_t frames, PyObject *thread, PyObject *on, PyObject *empty)
{
    Py_hash_t t = PyObject_Hash(thread), o = PyObject_Hash(on), e = PyObject_Hash(empty);
    if (frames == -1 || t == -1 || o == -1 || e == -1)
        return -1;
    Py_uhash_t lanes[8] = {(Py_uhash_t)frames, 0, (Py_uhash_t)t, 0, (Py_uhash_t)o,
                           (Py_uhash_t)e, (Py_uhash_t)e, 0}; /* hash(0) is 0 */
    Py_uhash_t acc = XXPRIME_5;
    for (int i = 0; i < 8; i++)
        acc = hash_step(acc, lanes[i]);
    return hash_end(acc, 8);
}

/* key_type(frames, 0, thread, 0, on, "", "", 0) for a tuple subclass (a NamedTuple) made
 * as tuple.__new__ makes one, without its Python-level __new__; a new reference. */
static PyObject *new_key(PyTypeObject *key_type, PyObject *frames, PyObject *thread,
                         PyObject *on, PyObject *zero, PyObject *empty)
{
    if (!PyType_IsSubtype(key_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "fold_plain(): the key type is a tuple");
        return NULL;
    }
    PyObject *key = key_type->tp_alloc(key_type, 8);
    if (key == NULL)
        return NULL;
    PyObject *items[8] = {frames, zero, thread, zero, on, empty, empty, zero};
    for (int i = 0; i < 8; i++) {
        Py_INCREF(items[i]);
        PyTuple_SET_ITEM(key, i, items[i]);
    }
    return key;
}

/* fold_plain(data, pos, end, stacks, key_type, on, scale) -> (pos, lines)
 *
 * Adds the plain folded lines of ``data[:end]`` (lines separated by b"\n", a trailing b"\r"
 * ignored) from byte ``pos`` on into ``stacks``, as fold/foreign_folded.py's loop does for them:
 * key_type(frames[1:], 0, frames[0], 0, on, "", "", 0) += count * scale.  Stops at the first
 * line that is not plain and returns its position and the number of lines taken; a
 * position past the end means every line was taken. */
static PyObject *Interner_fold_plain(Interner *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !(PyBytes_Check(args[0]) || PyByteArray_Check(args[0])) ||
        !PyDict_Check(args[3]) || !PyType_Check(args[4]) || !PyUnicode_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "fold_plain(data: bytes | bytearray, pos, end, "
                                         "stacks: dict, key_type, on: str, scale)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]), size = PyLong_AsSsize_t(args[2]);
    if ((pos == -1 || size == -1) && PyErr_Occurred())
        return NULL;
    Py_buffer view; /* held until the end: a bytearray cannot be resized meanwhile */
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const char *data = view.buf;
    if (size < 0 || size > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "fold_plain(): end is outside the data");
        return NULL;
    }
    PyObject *stacks = args[3], *key_type = args[4], *on = args[5], *scale = args[6];
    PyObject *zero = PyLong_FromLong(0), *empty = PyUnicode_FromStringAndSize("", 0);
    Py_ssize_t lines = 0;
    PyObject *result = NULL;
    if (zero == NULL || empty == NULL)
        goto done;
    while (pos >= 0 && pos <= size) {
        const char *p = data + pos;
        const char *nl = memchr(p, '\n', (size_t)(size - pos));
        Py_ssize_t n = (nl ? nl : data + size) - p;
        Py_ssize_t next = pos + n + 1;
        if (n > 0 && p[n - 1] == '\r')
            n--;
        const char *sp;
        long long count;
        if (!plain_line(p, n, &sp, &count))
            break;
        PyObject *c = PyLong_FromLongLong(count);
        PyObject *weight = c ? PyNumber_Multiply(c, scale) : NULL;
        Py_XDECREF(c);
        if (weight == NULL)
            goto done;
        int nonzero = PyObject_IsTrue(weight);
        if (nonzero < 0) {
            Py_DECREF(weight);
            goto done;
        }
        if (nonzero) {
            PyObject *root = NULL;
            Py_hash_t frames_hash = -1;
            PyObject *frames = split_bytes(self, p, sp - p, 1, &root,
                                           tuple_hash_ok ? &frames_hash : NULL);
            PyObject *key = frames == NULL ? NULL :
                new_key((PyTypeObject *)key_type, frames, root, on, zero, empty);
            Py_XDECREF(frames);
            if (key == NULL) {
                Py_DECREF(weight);
                goto done;
            }
#if PY_VERSION_HEX < 0x030D0000
            /* once, for the lookup and the store: the key's fields' hashes are known */
            Py_hash_t hash = tuple_hash_ok ? key_hash(frames_hash, root, on, empty)
                                           : PyObject_Hash(key);
            PyObject *old = hash == -1 ? NULL : _PyDict_GetItem_KnownHash(stacks, key, hash);
#define STORE(d, k, v) _PyDict_SetItem_KnownHash(d, k, v, hash)
#else
            PyObject *old = PyDict_GetItemWithError(stacks, key);
#define STORE(d, k, v) PyDict_SetItem(d, k, v)
#endif
            PyObject *sum = old != NULL ? PyNumber_Add(old, weight) : (Py_INCREF(weight), weight);
            int err = sum == NULL || (old == NULL && PyErr_Occurred()) ? -1 :
                STORE(stacks, key, sum);
#undef STORE
            Py_XDECREF(sum);
            Py_DECREF(key);
            if (err < 0) {
                Py_DECREF(weight);
                goto done;
            }
        }
        Py_DECREF(weight);
        lines++;
        pos = next;
    }
    result = Py_BuildValue("(nn)", pos, lines);
done:
    Py_XDECREF(zero);
    Py_XDECREF(empty);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *Interner_len(Interner *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromSsize_t(self->used);
}

static void Interner_dealloc(Interner *self)
{
    for (Py_ssize_t i = 0; i < self->cap; i++) {
        Py_XDECREF(self->slots[i].str);
        PyMem_Free(self->slots[i].key);
    }
    PyMem_Free(self->slots);
    PyMem_Free(self->prev);
    PyMem_Free(self->last.items);
    PyMem_Free(self->last.ends);
    PyMem_Free(self->last.accs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Interner_methods[] = {
    {"split", (PyCFunction)Interner_split, METH_O,
     "split(s) -> tuple: s.split(';') with every item shared across calls."},
    {"size", (PyCFunction)Interner_len, METH_NOARGS, "size() -> int: distinct names held."},
    {"fold_plain", (PyCFunction)(void (*)(void))Interner_fold_plain, METH_FASTCALL,
     "fold_plain(data, pos, end, stacks, key_type, on, scale) -> (pos, lines)"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject InternerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wallflame._speedups.Interner",
    .tp_basicsize = sizeof(Interner),
    .tp_dealloc = (destructor)Interner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Splits folded stacks at ';' into shared frame names.",
    .tp_methods = Interner_methods,
    .tp_new = PyType_GenericNew,
};

/* Whether hash_step and hash_end give the interpreter's tuple hash (checked on a key shaped
 * like those fold_plain makes); 1, 0, or -1 on an error. */
int check_tuple_hash(void)
{
    if (sizeof(Py_uhash_t) != 8)
        return 0;
    PyObject *frames = Py_BuildValue("(sss)", "main", "f\xc3\xa9", "");
    PyObject *key = frames == NULL ? NULL :
        Py_BuildValue("(OisisssL)", frames, 0, "thread", -3, "on", "", "x", 1LL << 40);
    Py_hash_t expected = key == NULL ? -1 : PyObject_Hash(key);
    int ok = expected == -1 ? -1 : 1;
    if (ok == 1) {
        Py_uhash_t acc = XXPRIME_5;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(frames); i++)
            acc = hash_step(acc, (Py_uhash_t)PyObject_Hash(PyTuple_GET_ITEM(frames, i)));
        Py_uhash_t outer = hash_step(XXPRIME_5, (Py_uhash_t)hash_end(acc, 3));
        for (Py_ssize_t i = 1; i < PyTuple_GET_SIZE(key); i++)
            outer = hash_step(outer, (Py_uhash_t)PyObject_Hash(PyTuple_GET_ITEM(key, i)));
        ok = hash_end(outer, PyTuple_GET_SIZE(key)) == expected;
    }
    Py_XDECREF(frames);
    Py_XDECREF(key);
    return ok;
}
