/* Optional native versions of the hot loops of report generation.
 *
 * Each has a pure-Python equivalent (wallflame/speedups.py, wallflame/profile.py, report/)
 * that gives the same results; tests compare the two.  Nothing here parses a whole format:
 * the Python code decides what a line means, these functions only do its per-frame work.
 *
 *   Interner.split(s)  s.split(";") as a tuple whose items are shared: each distinct frame
 *                      name is one str object for the whole run, so a 500,000-frame profile
 *                      with 4,000 distinct names creates 4,000 strings, not 500,000, and
 *                      hashing a stack reuses each name's cached hash.
 *   Interner.fold_plain  plain folded lines straight into a profile's stacks.
 *   grow(...)          the flame tree of rows sorted by thread then frames (see _grow in
 *                      report/tree.py, which this mirrors statement by statement).
 *   tree_rows, group_weights, frame_weights, frame_names, stacks_naming
 *                      one pass each over a profile's stacks (report/tree.py build_tree,
 *                      Profile.grouped, report/summary.py stack_weights and on_cpu_in).
 *   ints_json          the page's and the timeline's embedded lists of ints.
 *   switch_lines       the scheduler capture's switch records read from perf script's text
 *                      (fold/perf/sampled_switches.py), the other lines left to Python.
 *   SwitchTracker      those records applied to each thread's state as well (the same
 *                      module's per-record methods), the other lines left to Python.
 *   wake_split, in_caps, apply_lag, clip_log
 *                      the passes of that module's finish over its intervals.
 *   wake_run           the wake-up capture's lines read from perf script's text (the same
 *                      module), the others left to Python.
 *   perf_switches      a scheduler chunk's switch records read from its perf.data, for
 *                      SwitchTracker.until (perf script then prints only the stack samples).
 *   span_rows          the interval log into the timeline's threads (wallflame/timebuild.py).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

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

static int tuple_hash_ok = 0;

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
static uint64_t hash_bytes(const char *p, Py_ssize_t n)
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
static void *slots_rehash(const void *old, Py_ssize_t old_cap, Py_ssize_t cap, size_t size,
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

static PyTypeObject InternerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wallflame._speedups.Interner",
    .tp_basicsize = sizeof(Interner),
    .tp_dealloc = (destructor)Interner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Splits folded stacks at ';' into shared frame names.",
    .tp_methods = Interner_methods,
    .tp_new = PyType_GenericNew,
};

/* ---- grow ----------------------------------------------------------------------------- */

/* list.append(PyLong(v)) */
static int append_int(PyObject *list, Py_ssize_t v)
{
    PyObject *o = PyLong_FromSsize_t(v);
    if (o == NULL)
        return -1;
    int r = PyList_Append(list, o);
    Py_DECREF(o);
    return r;
}

/* visible(x) appended to names; returns 0 or -1. */
static int append_visible(PyObject *names, PyObject *visible, PyObject *x)
{
    PyObject *v = PyObject_CallOneArg(visible, x);
    if (v == NULL)
        return -1;
    int r = PyList_Append(names, v);
    Py_DECREF(v);
    return r;
}

typedef struct {
    Py_ssize_t *items;
    Py_ssize_t len, cap;
} Path;

static int path_push(Path *p, Py_ssize_t v)
{
    if (p->len == p->cap) {
        Py_ssize_t cap = p->cap ? p->cap * 2 : 256;
        Py_ssize_t *items = PyMem_Realloc(p->items, (size_t)cap * sizeof(Py_ssize_t));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        p->items = items;
        p->cap = cap;
    }
    p->items[p->len++] = v;
    return 0;
}

/* ---- Passes over a profile's stacks ---------------------------------------------------- *
 * A stack key is a StackKey (a tuple): frames, tid, thread, pid, state, wait, lock, holder. */

enum { K_FRAMES, K_TID, K_THREAD, K_PID, K_STATE, K_WAIT, K_LOCK, K_HOLDER, K_FIELDS };

static int stack_key(PyObject *key)
{
    if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != K_FIELDS ||
        !PyTuple_Check(PyTuple_GET_ITEM(key, K_FRAMES))) {
        PyErr_SetString(PyExc_TypeError, "a stack's key is a StackKey");
        return -1;
    }
    return 0;
}

/* What report/tree.py's tree_rows makes of one stack (see tree_rows below). */
typedef struct {
    PyObject *thread_names, *on, *class_index, *wait_label, *zero; /* borrowed */
    Py_ssize_t other;
    PyObject *ident; /* the last row's (a strong reference), shared while the thread stays */
} Rows;

/* The row of stack ``key`` of weight ``w``: 1 with ``*frames`` (a new reference; an off-CPU
 * stack's end in its wait label) and ``*cls`` set and ``rows->ident`` its thread's, 0 for a
 * stack of no positive weight (left out), -1 on an error. */
static int stack_row(Rows *rows, PyObject *key, PyObject *w, PyObject **frames,
                     Py_ssize_t *cls)
{
    if (stack_key(key) < 0)
        return -1;
    int positive = PyObject_RichCompareBool(w, rows->zero, Py_GT);
    if (positive <= 0)
        return positive;
    PyObject *tid = PyTuple_GET_ITEM(key, K_TID), *thread = PyTuple_GET_ITEM(key, K_THREAD);
    int has_tid = PyObject_IsTrue(tid);
    if (has_tid < 0)
        return -1;
    PyObject *tname = thread; /* borrowed */
    if (has_tid) {
        tname = PyDict_GetItemWithError(rows->thread_names, tid);
        if (tname == NULL) {
            if (PyErr_Occurred())
                return -1;
            tname = thread;
        }
    }
    PyObject *ident = rows->ident; /* consecutive stacks of one thread share one ident */
    if (ident == NULL || PyTuple_GET_ITEM(ident, 0) != tid ||
        PyTuple_GET_ITEM(ident, 1) != tname) {
        Py_XSETREF(rows->ident, PyTuple_Pack(2, tid, tname));
        if (rows->ident == NULL)
            return -1;
    }
    PyObject *stack = PyTuple_GET_ITEM(key, K_FRAMES);
    int is_on = PyObject_RichCompareBool(PyTuple_GET_ITEM(key, K_STATE), rows->on, Py_EQ);
    if (is_on < 0)
        return -1;
    if (is_on) {
        Py_INCREF(stack);
        *frames = stack;
        *cls = 0;
        return 1;
    }
    PyObject *c = PyDict_GetItemWithError(rows->class_index, PyTuple_GET_ITEM(key, K_WAIT));
    *cls = c == NULL ? rows->other : PyLong_AsSsize_t(c);
    if ((c == NULL || *cls == -1) && PyErr_Occurred())
        return -1;
    PyObject *label = PyObject_CallOneArg(rows->wait_label, key);
    if (label == NULL)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(stack);
    PyObject *all = PyTuple_New(n + 1);
    if (all == NULL) {
        Py_DECREF(label);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *f = PyTuple_GET_ITEM(stack, i);
        Py_INCREF(f);
        PyTuple_SET_ITEM(all, i, f);
    }
    PyTuple_SET_ITEM(all, n, label);
    *frames = all;
    return 1;
}

/* The flame tree being grown: report/tree.py's _grow, whose loop body is grow_row. */
typedef struct {
    PyObject *names, *name, *parent, *selfs, *threads, *ids; /* the tree's fields (borrowed) */
    PyObject *visible, *thread_label;                       /* borrowed */
    Py_ssize_t width;
    int check;
    PyObject *last_ident; /* a strong reference, or NULL */
    PyObject *last;       /* the previous stack's frames: a strong reference */
    Path path;
    Py_ssize_t root;
} Grower;

static int grower_init(Grower *g, PyObject *const *fields, Py_ssize_t width, int check)
{
    g->names = fields[0];
    g->name = fields[1];
    g->parent = fields[2];
    g->selfs = fields[3];
    g->threads = fields[4];
    g->ids = fields[5];
    g->visible = fields[6];
    g->thread_label = fields[7];
    if (!PyList_Check(g->names) || !PyList_Check(g->name) || !PyList_Check(g->parent) ||
        !PyList_Check(g->selfs) || !PyList_Check(g->threads) || !PyDict_Check(g->ids)) {
        PyErr_SetString(PyExc_TypeError, "grow(): the tree's fields must be lists");
        return -1;
    }
    g->width = width;
    g->check = check;
    g->last_ident = NULL;
    g->last = PyTuple_New(0);
    g->path = (Path){NULL, 0, 0};
    g->root = 0;
    return g->last == NULL ? -1 : 0;
}

static void grower_done(Grower *g)
{
    Py_XDECREF(g->last_ident);
    Py_XDECREF(g->last);
    PyMem_Free(g->path.items);
}

/* One stack into the tree: 1, 0 when ``check`` finds it out of order, -1 on an error. */
static int grow_row(Grower *g, PyObject *ident, PyObject *frames, Py_ssize_t cls,
                    PyObject *weight)
{
    if (!PyTuple_Check(frames) || !PyTuple_Check(ident) || PyTuple_GET_SIZE(ident) != 2 ||
        cls < 0 || cls >= g->width) {
        PyErr_SetString(PyExc_TypeError, "grow(): bad row");
        return -1;
    }
    int same = g->last_ident == NULL ? 0 :
        ident == g->last_ident ? 1 : PyObject_RichCompareBool(ident, g->last_ident, Py_EQ);
    if (same < 0)
        return -1;
    if (!same) {
        if (g->check && g->last_ident != NULL) {
            int lt = PyObject_RichCompareBool(ident, g->last_ident, Py_LT);
            if (lt != 0)
                return lt < 0 ? -1 : 0;
        }
        Py_INCREF(ident);
        Py_XSETREF(g->last_ident, ident);
        Py_SETREF(g->last, PyTuple_New(0));
        if (g->last == NULL)
            return -1;
        g->path.len = 0;
        g->root = PyList_GET_SIZE(g->parent);
        if (append_int(g->parent, 0) < 0 || append_int(g->name, PyList_GET_SIZE(g->names)) < 0 ||
            PyList_Append(g->selfs, Py_None) < 0)
            return -1;
        PyObject *label = PyObject_Call(g->thread_label, ident, NULL);
        if (label == NULL)
            return -1;
        int err = append_visible(g->names, g->visible, label);
        Py_DECREF(label);
        if (err < 0)
            return -1;
        PyObject *tname = PyObject_CallOneArg(g->visible, PyTuple_GET_ITEM(ident, 1));
        if (tname == NULL)
            return -1;
        PyObject *entry = Py_BuildValue("(nON)", g->root, PyTuple_GET_ITEM(ident, 0), tname);
        if (entry == NULL)
            return -1;
        err = PyList_Append(g->threads, entry);
        Py_DECREF(entry);
        if (err < 0)
            return -1;
    }
    /* i: the length of the common prefix with the previous stack */
    PyObject *last = g->last;
    Py_ssize_t nf = PyTuple_GET_SIZE(frames), nl = PyTuple_GET_SIZE(last);
    Py_ssize_t n = nf < nl ? nf : nl, i = 0;
    for (; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(frames, i), *b = PyTuple_GET_ITEM(last, i);
        if (a == b)
            continue;
        int eq = PyObject_RichCompareBool(a, b, Py_EQ);
        if (eq < 0)
            return -1;
        if (!eq)
            break;
    }
    if (g->check) {
        int before = i < n ? PyObject_RichCompareBool(PyTuple_GET_ITEM(frames, i),
                                                      PyTuple_GET_ITEM(last, i), Py_LT)
                           : nf < nl;
        if (before != 0)
            return before < 0 ? -1 : 0;
    }
    if (g->path.len > i)
        g->path.len = i;
    Py_ssize_t node = g->path.len ? g->path.items[g->path.len - 1] : g->root;
    for (Py_ssize_t k = i; k < nf; k++) {
        PyObject *frame = PyTuple_GET_ITEM(frames, k);
        PyObject *nid = PyDict_GetItemWithError(g->ids, frame); /* borrowed */
        if (nid == NULL) {
            if (PyErr_Occurred())
                return -1;
            PyObject *fresh = PyLong_FromSsize_t(PyList_GET_SIZE(g->names));
            if (fresh == NULL)
                return -1;
            int err = PyDict_SetItem(g->ids, frame, fresh);
            Py_DECREF(fresh);
            if (err < 0 || append_visible(g->names, g->visible, frame) < 0)
                return -1;
            nid = PyDict_GetItemWithError(g->ids, frame);
            if (nid == NULL)
                return -1;
        }
        if (append_int(g->parent, node) < 0)
            return -1;
        node = PyList_GET_SIZE(g->name);
        if (PyList_Append(g->name, nid) < 0 || PyList_Append(g->selfs, Py_None) < 0 ||
            path_push(&g->path, node) < 0)
            return -1;
    }
    Py_INCREF(frames);
    Py_SETREF(g->last, frames);
    PyObject *s = PyList_GET_ITEM(g->selfs, node);
    if (s == Py_None) {
        s = PyList_New(g->width);
        if (s == NULL)
            return -1;
        for (Py_ssize_t c = 0; c < g->width; c++)
            PyList_SET_ITEM(s, c, PyLong_FromLong(0));
        if (PyList_SetItem(g->selfs, node, s) < 0) /* steals s */
            return -1;
    }
    PyObject *sum = PyNumber_Add(PyList_GET_ITEM(s, cls), weight);
    if (sum == NULL || PyList_SetItem(s, cls, sum) < 0)
        return -1;
    return 1;
}

/* grow(rows, names, name, parent, selfs, threads, ids, width, check, visible, thread_label)
 * -> bool.  Appends to the lists and ``ids`` as report/tree.py's _grow does; False when
 * ``check`` finds the rows out of order (the lists are then partly filled and discarded). */
static PyObject *grow(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "grow() takes 11 arguments");
        return NULL;
    }
    PyObject *rows = args[0];
    Py_ssize_t width = PyLong_AsSsize_t(args[7]);
    int check = PyObject_IsTrue(args[8]);
    if ((width < 0 || check < 0) && PyErr_Occurred())
        return NULL;
    if (!PyList_Check(rows)) {
        PyErr_SetString(PyExc_TypeError, "grow(): rows must be a list");
        return NULL;
    }
    PyObject *fields[8] = {args[1], args[2], args[3], args[4], args[5], args[6], args[9],
                           args[10]};
    Grower g;
    if (grower_init(&g, fields, width, check) < 0)
        return NULL;
    int r = 1;
    for (Py_ssize_t k = 0; r > 0 && k < PyList_GET_SIZE(rows); k++) {
        PyObject *row = PyList_GET_ITEM(rows, k);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 4) {
            PyErr_SetString(PyExc_TypeError, "grow(): a row is (ident, frames, cls, weight)");
            r = -1;
            break;
        }
        Py_ssize_t cls = PyLong_AsSsize_t(PyTuple_GET_ITEM(row, 2));
        if (cls == -1 && PyErr_Occurred()) {
            r = -1;
            break;
        }
        r = grow_row(&g, PyTuple_GET_ITEM(row, 0), PyTuple_GET_ITEM(row, 1), cls,
                     PyTuple_GET_ITEM(row, 3));
    }
    grower_done(&g);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}

/* grow_stacks(stacks, thread_names, on, class_index, other, wait_label, names, name, parent,
 * selfs, threads, ids, width, visible, thread_label) -> bool: grow(tree_rows(...), ...,
 * check=True) without making the rows (see report/tree.py's tree_rows). */
static PyObject *grow_stacks(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 15 || !PyDict_Check(args[0]) || !PyDict_Check(args[1]) ||
        !PyDict_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "grow_stacks() takes 15 arguments");
        return NULL;
    }
    Rows rows = {args[1], args[2], args[3], args[5], NULL, PyLong_AsSsize_t(args[4]), NULL};
    Py_ssize_t width = PyLong_AsSsize_t(args[12]);
    if ((width == -1 || rows.other == -1) && PyErr_Occurred())
        return NULL;
    PyObject *fields[8] = {args[6], args[7], args[8], args[9], args[10], args[11], args[13],
                           args[14]};
    Grower g;
    if (grower_init(&g, fields, width, 1) < 0)
        return NULL;
    rows.zero = PyLong_FromLong(0);
    int r = rows.zero == NULL ? -1 : 1;
    Py_ssize_t pos = 0;
    PyObject *key, *w;
    while (r > 0 && PyDict_Next(args[0], &pos, &key, &w)) {
        PyObject *frames;
        Py_ssize_t cls;
        r = stack_row(&rows, key, w, &frames, &cls);
        if (r <= 0) {
            r = r < 0 ? -1 : 1; /* a stack of no weight is left out */
            continue;
        }
        r = grow_row(&g, rows.ident, frames, cls, w);
        Py_DECREF(frames);
    }
    Py_XDECREF(rows.ident);
    Py_XDECREF(rows.zero);
    grower_done(&g);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}

/* a + b into *acc (a new reference replaces the old one); 0 or -1. */
static int add_into(PyObject **acc, PyObject *w)
{
    PyObject *sum = PyNumber_Add(*acc, w);
    if (sum == NULL)
        return -1;
    Py_SETREF(*acc, sum);
    return 0;
}

/* A running sum of weights from 0: in a C integer while they are ints that fit, else (from
 * the first that is not) in a Python object, so that it is exactly what ``+`` gives. */
typedef struct {
    long long small;
    PyObject *big;
} Sum;

static int sum_add(Sum *s, PyObject *w)
{
    if (s->big == NULL && PyLong_CheckExact(w)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(w, &overflow), t;
        if (!overflow && !__builtin_add_overflow(s->small, v, &t)) {
            s->small = t;
            return 0;
        }
    }
    if (s->big == NULL && (s->big = PyLong_FromLongLong(s->small)) == NULL)
        return -1;
    return add_into(&s->big, w);
}

/* The sum (a new reference); the Sum is then empty again. */
static PyObject *sum_take(Sum *s)
{
    PyObject *v = s->big != NULL ? s->big : PyLong_FromLongLong(s->small);
    s->big = NULL;
    s->small = 0;
    return v;
}

/* group_weights(stacks) -> dict: the weight of each (tid, thread, state, wait, lock), as
 * Profile.grouped does.  Sorted stacks come in runs of one group, summed before the lookup. */
static PyObject *group_weights(PyObject *module, PyObject *stacks)
{
    static const int fields[] = {K_TID, K_THREAD, K_STATE, K_WAIT, K_LOCK};
    if (!PyDict_Check(stacks)) {
        PyErr_SetString(PyExc_TypeError, "group_weights() takes a dict");
        return NULL;
    }
    PyObject *out = PyDict_New(), *prev = NULL; /* prev: the run's first key */
    Sum run = {0, NULL};
    if (out == NULL)
        return NULL;
    Py_ssize_t pos = 0;
    PyObject *key, *w;
    for (;;) {
        int more = PyDict_Next(stacks, &pos, &key, &w);
        int same = 0;
        if (more) {
            if (stack_key(key) < 0)
                goto fail;
            same = prev != NULL;
            for (int f = 0; same && f < 5; f++) {
                PyObject *a = PyTuple_GET_ITEM(key, fields[f]);
                PyObject *b = PyTuple_GET_ITEM(prev, fields[f]);
                /* exact types only: 1 == 1.0 == True would merge groups a dict keeps apart */
                same = a == b || (Py_TYPE(a) == Py_TYPE(b) &&
                                  (PyUnicode_CheckExact(a) || PyLong_CheckExact(a)) &&
                                  PyObject_RichCompareBool(a, b, Py_EQ) == 1);
            }
            if (same) {
                if (sum_add(&run, w) < 0)
                    goto fail;
                continue;
            }
        }
        if (prev != NULL) { /* flush the run */
            PyObject *g = PyTuple_New(5);
            if (g == NULL)
                goto fail;
            for (int f = 0; f < 5; f++) {
                PyObject *item = PyTuple_GET_ITEM(prev, fields[f]);
                Py_INCREF(item);
                PyTuple_SET_ITEM(g, f, item);
            }
            PyObject *total = sum_take(&run);
            PyObject *old = PyDict_GetItemWithError(out, g); /* borrowed */
            int err = total == NULL || (old == NULL && PyErr_Occurred());
            if (!err && old != NULL) /* another run of the group */
                err = add_into(&total, old) < 0;
            err = err || PyDict_SetItem(out, g, total) < 0;
            Py_XDECREF(total);
            Py_DECREF(g);
            Py_CLEAR(prev);
            if (err)
                goto fail;
        }
        if (!more)
            break;
        prev = key;
        Py_INCREF(prev);
        if (sum_add(&run, w) < 0)
            goto fail;
    }
    return out;
fail:
    Py_XDECREF(run.big);
    Py_XDECREF(prev);
    Py_DECREF(out);
    return NULL;
}

/* wallflame/names.py's is_unknown: a name in brackets without a space ("[unknown]",
 * "[libc.so.6]", a stripped "[app]"), a kernel frame's "_[k]" aside, other than the
 * "[unsampled]" marker.  tests/unit/hub/test_speedups.py checks it against the Python rule. */
static int is_unknown(PyObject *frame)
{
    if (!PyUnicode_Check(frame)) {
        PyErr_SetString(PyExc_TypeError, "a frame is a str");
        return -1;
    }
    static const char marker[] = "[unsampled]";
    int kind = PyUnicode_KIND(frame);
    const void *d = PyUnicode_DATA(frame);
    Py_ssize_t n = PyUnicode_GET_LENGTH(frame);
    if (n >= 4 && PyUnicode_READ(kind, d, n - 4) == '_' && PyUnicode_READ(kind, d, n - 3) == '['
            && PyUnicode_READ(kind, d, n - 2) == 'k' && PyUnicode_READ(kind, d, n - 1) == ']')
        n -= 4;
    if (n < 3 || PyUnicode_READ(kind, d, 0) != '[' || PyUnicode_READ(kind, d, n - 1) != ']')
        return 0;
    int is_marker = n == (Py_ssize_t)(sizeof marker - 1);
    for (Py_ssize_t i = 1; i < n - 1; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, d, i);
        if (c == ' ')
            return 0;
        if (is_marker && c != (Py_UCS4)(unsigned char)marker[i])
            is_marker = 0;
    }
    return !is_marker;
}

/* frame_weights(stacks, depth) -> (shallow, unknown): the weight of the stacks of at most
 * ``depth`` frames and of those holding an unknown frame (see report/summary.py). */
static PyObject *frame_weights(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyDict_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "frame_weights() takes a dict and a depth");
        return NULL;
    }
    PyObject *stacks = args[0];
    Py_ssize_t depth = PyLong_AsSsize_t(args[1]);
    if (depth == -1 && PyErr_Occurred())
        return NULL;
    Sum shallow = {0, NULL}, unknown = {0, NULL};
    Py_ssize_t pos = 0;
    PyObject *key, *w;
    while (PyDict_Next(stacks, &pos, &key, &w)) {
        if (stack_key(key) < 0)
            goto fail;
        PyObject *frames = PyTuple_GET_ITEM(key, K_FRAMES);
        Py_ssize_t n = PyTuple_GET_SIZE(frames);
        if (n <= depth && sum_add(&shallow, w) < 0)
            goto fail;
        for (Py_ssize_t i = 0; i < n; i++) {
            int u = is_unknown(PyTuple_GET_ITEM(frames, i));
            if (u < 0)
                goto fail;
            if (u) {
                if (sum_add(&unknown, w) < 0)
                    goto fail;
                break;
            }
        }
    }
    PyObject *a = sum_take(&shallow), *b = sum_take(&unknown);
    if (a == NULL || b == NULL) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        return NULL;
    }
    return Py_BuildValue("(NN)", a, b);
fail:
    Py_XDECREF(shallow.big);
    Py_XDECREF(unknown.big);
    return NULL;
}

/* The frames of the stack ``key`` when its state is not ``skip`` (borrowed), NULL with no
 * error set when it is, NULL with an error for a key that is not a StackKey. */
static PyObject *frames_unless(PyObject *key, PyObject *skip)
{
    if (stack_key(key) < 0)
        return NULL;
    int skipped = PyObject_RichCompareBool(PyTuple_GET_ITEM(key, K_STATE), skip, Py_EQ);
    if (skipped != 0)
        return NULL;
    return PyTuple_GET_ITEM(key, K_FRAMES);
}

/* How many first frames ``a`` and ``b`` share as the same objects (sorted stacks share long
 * prefixes, and an interned name is one object). */
static Py_ssize_t shared_prefix(PyObject *a, PyObject *b)
{
    if (b == NULL)
        return 0;
    Py_ssize_t n = Py_MIN(PyTuple_GET_SIZE(a), PyTuple_GET_SIZE(b)), i = 0;
    while (i < n && PyTuple_GET_ITEM(a, i) == PyTuple_GET_ITEM(b, i))
        i++;
    return i;
}

/* frame_names(stacks, skip) -> set: the distinct frame names of the stacks whose state is not
 * ``skip`` (report/summary.py on_cpu_in).  The frames a stack shares with the one before it
 * are not looked at again. */
static PyObject *frame_names(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyDict_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "frame_names() takes a dict and a state");
        return NULL;
    }
    PyObject *out = PySet_New(NULL);
    if (out == NULL)
        return NULL;
    PyObject *key, *w, *prev = NULL;
    Py_ssize_t pos = 0;
    while (PyDict_Next(args[0], &pos, &key, &w)) {
        PyObject *frames = frames_unless(key, args[1]);
        if (frames == NULL) {
            if (PyErr_Occurred())
                goto fail;
            continue;
        }
        for (Py_ssize_t i = shared_prefix(frames, prev); i < PyTuple_GET_SIZE(frames); i++)
            if (PySet_Add(out, PyTuple_GET_ITEM(frames, i)) < 0)
                goto fail;
        prev = frames;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* stacks_naming(stacks, skip, names) -> list: the (key, weight) pairs, in order, of the stacks
 * whose state is not ``skip`` and that hold a frame in the set ``names``. */
static PyObject *stacks_naming(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyDict_Check(args[0]) || !PyAnySet_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "stacks_naming() takes a dict, a state and a set");
        return NULL;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    PyObject *key, *w, *prev = NULL;
    Py_ssize_t pos = 0, prev_first = 0; /* the previous stack's first frame in names */
    while (PyDict_Next(args[0], &pos, &key, &w)) {
        PyObject *frames = frames_unless(key, args[1]);
        if (frames == NULL) {
            if (PyErr_Occurred())
                goto fail;
            continue;
        }
        Py_ssize_t shared = shared_prefix(frames, prev), n = PyTuple_GET_SIZE(frames);
        Py_ssize_t first = prev_first < shared ? prev_first : n;
        for (Py_ssize_t i = shared; first == n && i < n; i++) {
            int in = PySet_Contains(args[2], PyTuple_GET_ITEM(frames, i));
            if (in < 0)
                goto fail;
            if (in)
                first = i;
        }
        if (first < n) {
            PyObject *pair = PyTuple_Pack(2, key, w);
            if (pair == NULL || PyList_Append(out, pair) < 0) {
                Py_XDECREF(pair);
                goto fail;
            }
            Py_DECREF(pair);
        }
        prev = frames;
        prev_first = first;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* tree_rows(stacks, thread_names, on, class_index, other, wait_label) -> list: the rows
 * report/tree.py's build_tree makes of the stacks of positive weight. */
static PyObject *tree_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyDict_Check(args[0]) || !PyDict_Check(args[1]) ||
        !PyDict_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "tree_rows(stacks, thread_names, on, class_index, "
                                         "other, wait_label)");
        return NULL;
    }
    Rows rows = {args[1], args[2], args[3], args[5], NULL, PyLong_AsSsize_t(args[4]), NULL};
    if (rows.other == -1 && PyErr_Occurred())
        return NULL;
    PyObject *out = PyList_New(0);
    rows.zero = PyLong_FromLong(0);
    if (out == NULL || rows.zero == NULL)
        goto fail;
    Py_ssize_t pos = 0;
    PyObject *key, *w;
    while (PyDict_Next(args[0], &pos, &key, &w)) {
        PyObject *frames;
        Py_ssize_t cls;
        int r = stack_row(&rows, key, w, &frames, &cls);
        if (r < 0)
            goto fail;
        if (r == 0)
            continue;
        PyObject *row = Py_BuildValue("(ONnO)", rows.ident, frames, cls, w); /* steals frames */
        if (row == NULL)
            goto fail;
        int err = PyList_Append(out, row);
        Py_DECREF(row);
        if (err < 0)
            goto fail;
    }
    Py_XDECREF(rows.ident);
    Py_DECREF(rows.zero);
    return out;
fail:
    Py_XDECREF(rows.ident);
    Py_XDECREF(rows.zero);
    Py_XDECREF(out);
    return NULL;
}

static const char PAIRS[] = "00010203040506070809101112131415161718192021222324252627282930313233"
                            "34353637383940414243444546474849505152535455565758596061626364656667"
                            "6869707172737475767778798081828384858687888990919293949596979899";

/* Whether exact int ``v`` is held in one digit (most are), its value then in *x. */
static int small_int(PyObject *v, long long *x)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (!PyUnstable_Long_IsCompact((PyLongObject *)v))
        return 0;
    *x = (long long)PyUnstable_Long_CompactValue((PyLongObject *)v);
    return 1;
#else
    Py_ssize_t size = Py_SIZE(v);
    if (size < -1 || size > 1)
        return 0;
    *x = size * (long long)((PyLongObject *)v)->ob_digit[0];
    return 1;
#endif
}

/* ---- switch_lines ----------------------------------------------------------------------- */

/* switch_lines(block) -> list: the lines of ``block`` (bytes.split(b"\n")), each one either a
 * tuple ``(kind, pid, tid, t_ns, comm)`` when it is a scheduler switch record that
 * ``SampledSched._header`` (fold/perf/sampled_switches.py) reads as one, or the line decoded
 * as UTF-8 with "replace" (everything else, which the Python code reads as before).  kind: 1
 * OUT (else IN), 2 preempt, 4 on every CPU (``PERF_RECORD_SWITCH_CPU_WIDE``).
 *
 * The header is read as ``NS_HEADER_RE`` reads it: ``^(.{0,16}?) *(-?\d+)/(-?\d+)
 * +(\d+)\.(\d{9}): +(.*)$``, the shortest comm first.  Only lines of printable ASCII are
 * read here (so a character is a byte, and ``str.strip`` and ``str.split`` see only spaces),
 * with numbers of at most 18 digits (seconds: 9); any other line is left to Python. */

/* 1: a number (``-?\d+`` when neg_ok), 0: none here, -1: too long to read here. */
static int sw_int(const char **pp, const char *end, long long *v, int neg_ok, int max_digits)
{
    const char *p = *pp;
    int neg = 0;
    if (neg_ok && p < end && *p == '-') {
        neg = 1;
        p++;
    }
    const char *start = p;
    long long x = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        if (p - start >= max_digits)
            return -1;
        x = x * 10 + (*p - '0');
        p++;
    }
    if (p == start)
        return 0;
    *v = neg ? -x : x;
    *pp = p;
    return 1;
}

/* The header's fields after a comm that ends at p: 1 matched, 0 not, -1 leave it to Python. */
static int sw_header(const char *p, const char *end, long long *pid, long long *tid,
                     long long *t, const char **rest)
{
    long long sec = 0, ns = 0;
    int r;
    while (p < end && *p == ' ')
        p++;
    if ((r = sw_int(&p, end, pid, 1, 18)) != 1)
        return r;
    if (p >= end || *p != '/')
        return 0;
    p++;
    if ((r = sw_int(&p, end, tid, 1, 18)) != 1)
        return r;
    if (p >= end || *p != ' ')
        return 0;
    while (p < end && *p == ' ')
        p++;
    const char *digits = p;
    while (p < end && *p >= '0' && *p <= '9')
        p++;
    if (p == digits)
        return 0;
    if (p - digits > 9)
        return -1;
    for (const char *q = digits; q < p; q++)
        sec = sec * 10 + (*q - '0');
    if (p >= end || *p != '.')
        return 0;
    p++;
    for (int k = 0; k < 9; k++, p++) {
        if (p >= end || *p < '0' || *p > '9')
            return 0;
        ns = ns * 10 + (*p - '0');
    }
    if (p >= end || *p != ':')
        return 0;
    p++;
    if (p >= end || *p != ' ')
        return 0;
    while (p < end && *p == ' ')
        p++;
    *t = sec * 1000000000LL + ns;
    *rest = p;
    return 1;
}

/* The word at p (up to a space or the end) is w. */
static int sw_word(const char *p, const char *end, const char *w)
{
    size_t n = strlen(w);
    return (size_t)(end - p) >= n && memcmp(p, w, n) == 0 && (p + n == end || p[n] == ' ');
}

/* The record's kind (see above), or -1 when the line is not one read here. */
static int sw_line(const char *line, const char *end, long long *pid, long long *tid,
                   long long *t, const char **comm_end)
{
    for (const char *c = line; c < end; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
            return -1;
    const char *rest = NULL;
    int found = 0;
    for (Py_ssize_t i = 0; i <= 16 && line + i <= end; i++) {
        int r = sw_header(line + i, end, pid, tid, t, &rest);
        if (r < 0)
            return -1;
        if (r == 1) {
            *comm_end = line + i;
            found = 1;
            break;
        }
    }
    if (!found)
        return -1;
    static const char wide[] = "PERF_RECORD_SWITCH_CPU_WIDE", plain[] = "PERF_RECORD_SWITCH";
    int kind = 0;
    const char *p;
    if (sw_word(rest, end, wide)) {
        kind = 4;
        p = rest + sizeof(wide) - 1;
    } else if (sw_word(rest, end, plain)) {
        p = rest + sizeof(plain) - 1;
    } else {
        return -1;
    }
    while (p < end && *p == ' ')
        p++;
    if (sw_word(p, end, "IN"))
        return kind;
    if (!sw_word(p, end, "OUT"))
        return -1;
    p += 3;
    while (p < end && *p == ' ')
        p++;
    return kind | 1 | (sw_word(p, end, "preempt") ? 2 : 0);
}

static PyObject *switch_lines(PyObject *module, PyObject *arg)
{
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const char *data = view.buf, *end = data + view.len;
    PyObject *out = PyList_New(0);
    const char *line = data;
    while (out != NULL) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *stop = nl ? nl : end;
        long long pid = 0, tid = 0, t = 0;
        const char *comm_end = line;
        int kind = sw_line(line, stop, &pid, &tid, &t, &comm_end);
        PyObject *item;
        if (kind >= 0) {
            const char *a = line, *b = comm_end;
            while (a < b && *a == ' ')
                a++;
            while (b > a && b[-1] == ' ')
                b--;
            item = Py_BuildValue("(iLLLs#)", kind, pid, tid, t, a, (Py_ssize_t)(b - a));
        } else {
            item = PyUnicode_DecodeUTF8(line, stop - line, "replace");
        }
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(item);
        if (nl == NULL)
            break;
        line = nl + 1;
    }
    PyBuffer_Release(&view);
    return out;
}

/* ---- SwitchTracker ---------------------------------------------------------------------- */

/* The scheduler capture's switch records applied to each thread's state without a Python
 * call per record: ``SampledSched._switch`` and what it calls (``_record``, ``_target``,
 * ``_switch_out``, ``_switch_in``, ``_close``), statement by statement, on a table of
 * threads kept here.  ``run(sched, block, pos)`` reads the lines of ``block`` from ``pos``
 * while each is a switch record ``switch_lines`` reads as one, and returns where the first
 * other line starts (``len(block) + 1`` when none is left): Python reads that line as
 * before (stack samples, task events, lost records) and calls ``run`` again.  The capture's
 * counters and sets stay ``sched``'s attributes, read at each call's start and written back
 * at its end; a stack sample reaches a thread through ``pending``.  ``export()`` hands every
 * thread and interval over to Python (``SampledSched._handover``), which ``finish`` and the
 * tests read as the Python reader leaves them. */

typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} i64vec;

static int i64_push(i64vec *a, int64_t x)
{
    if (a->n == a->cap) {
        Py_ssize_t cap = a->cap ? a->cap * 2 : 16;
        int64_t *v = PyMem_Realloc(a->v, (size_t)cap * sizeof(int64_t));
        if (v == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

typedef struct {
    int64_t tid, pid;
    PyObject *comm;                 /* str */
    int64_t switches, samples, leading, lead_start, on_since;
    char has_on_since, seen, gone;
    /* an OUT without its IN yet */
    char has_open, open_runnable;
    int64_t open_start, open_period;
    PyObject *open_frames, *open_state;  /* NULL: no sample */
    /* a sample waiting for its OUT */
    char has_pending;
    int64_t pend_t, pend_period;
    PyObject *pend_frames, *pend_state;
    i64vec on_cpu, ins;
} SwThread;

typedef struct {
    PyObject_HEAD
    SwThread *th;
    Py_ssize_t nth, cap;
    int32_t *index;        /* open addressing: slot + 1, 0 empty */
    Py_ssize_t icap;
    /* the interval log's columns */
    i64vec ltid, lstart, ldur, lperiod, lsample;
    char *lkind;
    Py_ssize_t lkind_cap;
    PyObject *samples, *sindex;  /* IntervalLog.samples (list) and ._index (dict) */
    /* the capture's figures, as sched's attributes during a run */
    int64_t first_time, last_time, window_start;
    char has_first, has_window, every_cpu;
    int64_t foreign, lines, exact, inferred;
    PyObject *at_start, *targets;  /* borrowed during a run: a set or None; a set */
    int64_t last_target;           /* a pid found in targets (0: none) */
    /* records read from a chunk's perf.data (perf_switches), applied by ``until`` */
    PyObject *recs, *rcomms, *names;  /* bytes, list, {tid: comm} */
    Py_ssize_t rpos;
} SwitchTracker;

static uint64_t sw_hash(int64_t k)
{
    uint64_t x = (uint64_t)k * 0x9E3779B97F4A7C15ULL;
    return x ^ (x >> 29);
}

static int sw_reindex(SwitchTracker *s, Py_ssize_t icap)
{
    int32_t *ix = PyMem_Calloc((size_t)icap, sizeof(int32_t));
    if (ix == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < s->nth; i++) {
        uint64_t h = sw_hash(s->th[i].tid) & (uint64_t)(icap - 1);
        while (ix[h])
            h = (h + 1) & (uint64_t)(icap - 1);
        ix[h] = (int32_t)(i + 1);
    }
    PyMem_Free(s->index);
    s->index = ix;
    s->icap = icap;
    return 0;
}

/* The thread's slot, or -1 when it has none. */
static Py_ssize_t sw_find(SwitchTracker *s, int64_t tid)
{
    if (s->icap == 0)
        return -1;
    uint64_t h = sw_hash(tid) & (uint64_t)(s->icap - 1);
    while (s->index[h]) {
        Py_ssize_t i = s->index[h] - 1;
        if (s->th[i].tid == tid)
            return i;
        h = (h + 1) & (uint64_t)(s->icap - 1);
    }
    return -1;
}

/* 1 when the bytes are the str's UTF-8. */
static int sw_same(PyObject *str, const char *b, Py_ssize_t n)
{
    Py_ssize_t len;
    const char *u = PyUnicode_AsUTF8AndSize(str, &len);
    if (u == NULL) {
        PyErr_Clear();
        return 0;
    }
    return len == n && memcmp(u, b, (size_t)n) == 0;
}

/* ``SampledSched._thread``: the slot of tid (made with pid and comm when new); a non-empty
 * comm becomes the thread's.  comm is either ``str`` (then cb is NULL) or the bytes cb, cn. */
static Py_ssize_t sw_thread(SwitchTracker *s, int64_t tid, int64_t pid, PyObject *str,
                            const char *cb, Py_ssize_t cn)
{
    Py_ssize_t i = sw_find(s, tid);
    int nonempty = str != NULL ? PyUnicode_GET_LENGTH(str) > 0 : cn > 0;
    if (i >= 0) {
        SwThread *th = &s->th[i];
        if (nonempty) {
            if (str != NULL) {
                Py_INCREF(str);
                Py_SETREF(th->comm, str);
            } else if (!sw_same(th->comm, cb, cn)) {
                PyObject *c = PyUnicode_DecodeUTF8(cb, cn, "replace");
                if (c == NULL)
                    return -1;
                Py_SETREF(th->comm, c);
            }
        }
        return i;
    }
    if (s->nth == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 64;
        SwThread *t = PyMem_Realloc(s->th, (size_t)cap * sizeof(SwThread));
        if (t == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        s->th = t;
        s->cap = cap;
    }
    if ((s->nth + 1) * 2 > s->icap && sw_reindex(s, s->icap ? s->icap * 2 : 128) < 0)
        return -1;
    PyObject *c = str != NULL ? (Py_INCREF(str), str) : PyUnicode_DecodeUTF8(cb, cn, "replace");
    if (c == NULL)
        return -1;
    i = s->nth++;
    SwThread *th = &s->th[i];
    memset(th, 0, sizeof(*th));
    th->tid = tid;
    th->pid = pid;
    th->comm = c;
    uint64_t h = sw_hash(tid) & (uint64_t)(s->icap - 1);
    while (s->index[h])
        h = (h + 1) & (uint64_t)(s->icap - 1);
    s->index[h] = (int32_t)(i + 1);
    return i;
}

/* ``x in set`` for an int; -1 on an error. */
static int sw_in(PyObject *set, int64_t x)
{
    PyObject *k = PyLong_FromLongLong(x);
    if (k == NULL)
        return -1;
    int r = PySet_Contains(set, k);
    Py_DECREF(k);
    return r;
}

/* ``SampledSched._target``: 1, 0, -1 on an error. */
static int sw_target(SwitchTracker *s, int64_t pid, int64_t tid)
{
    if (tid <= 0 || pid <= 0)
        return 0;
    if (s->at_start == Py_None || pid == s->last_target)
        return 1;
    int r = sw_in(s->targets, pid);
    if (r != 0) {
        if (r > 0)
            s->last_target = pid;
        return r;
    }
    r = sw_in(s->at_start, tid);
    if (r <= 0)
        return r;
    PyObject *k = PyLong_FromLongLong(pid);
    if (k == NULL || PySet_Add(s->targets, k) < 0) {
        Py_XDECREF(k);
        return -1;
    }
    Py_DECREF(k);
    s->last_target = pid;
    return 1;
}

/* ``SampledSched._existed``. */
static int sw_existed(SwitchTracker *s, int64_t tid)
{
    return s->at_start == Py_None ? 1 : sw_in(s->at_start, tid);
}

/* ``IntervalLog.add`` (kind 0 blocked, 1 runnable, 2 leading); frames NULL: no sample. */
static int sw_log(SwitchTracker *s, int64_t tid, int64_t start, int64_t dur, int kind,
                  PyObject *frames, PyObject *state, int64_t period)
{
    int64_t si = -1;
    if (frames != NULL) {
        PyObject *st1 = PyUnicode_Substring(state, 0, 1);
        PyObject *key = st1 == NULL ? NULL : PyTuple_Pack(2, frames, st1);
        Py_XDECREF(st1);
        if (key == NULL)
            return -1;
        PyObject *found = PyDict_GetItemWithError(s->sindex, key);
        if (found != NULL) {
            si = PyLong_AsLongLong(found);
        } else if (PyErr_Occurred()) {
            si = -2;
        } else {
            si = PyList_GET_SIZE(s->samples);
            PyObject *n = PyLong_FromLongLong(si);
            if (n == NULL || PyDict_SetItem(s->sindex, key, n) < 0 ||
                    PyList_Append(s->samples, key) < 0)
                si = -2;
            Py_XDECREF(n);
        }
        Py_DECREF(key);
        if (si < -1 || (si == -1 && PyErr_Occurred()))
            return -1;
    } else {
        period = 0;
    }
    Py_ssize_t n = s->ltid.n;
    if (n == s->lkind_cap) {
        Py_ssize_t cap = s->lkind_cap ? s->lkind_cap * 2 : 1024;
        char *k = PyMem_Realloc(s->lkind, (size_t)cap);
        if (k == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        s->lkind = k;
        s->lkind_cap = cap;
    }
    if (i64_push(&s->ltid, tid) < 0 || i64_push(&s->lstart, start) < 0 ||
            i64_push(&s->ldur, dur) < 0 || i64_push(&s->lsample, si) < 0 ||
            i64_push(&s->lperiod, period) < 0)
        return -1;
    s->lkind[n] = (char)kind;
    return 0;
}

/* ``SampledSched._close``. */
static int sw_close(SwitchTracker *s, SwThread *th, int64_t t, int exact)
{
    th->has_open = 0;
    PyObject *frames = th->open_frames, *state = th->open_state;
    th->open_frames = th->open_state = NULL;
    int64_t d = t - th->open_start;
    int r = 0;
    if (d > 0) {
        if (exact)
            s->exact++;
        else
            s->inferred++;
        r = sw_log(s, th->tid, th->open_start, d, th->open_runnable ? 1 : 0, frames, state,
                   th->open_period);
    }
    Py_XDECREF(frames);
    Py_XDECREF(state);
    return r;
}

/* ``SampledSched._ran_until``: the thread stops running at ``t``. */
static int sw_ran_until(SwitchTracker *s, SwThread *th, int64_t t)
{
    int has = th->has_on_since;
    int64_t since = th->on_since;
    if (!has && !th->seen) {
        int e = sw_existed(s, th->tid);
        if (e < 0)
            return -1;
        if (e) {
            has = 1;
            since = s->has_window ? s->window_start
                                  : (s->has_first && s->first_time ? s->first_time : t);
        }
    }
    if (has && t > since && (i64_push(&th->on_cpu, since) < 0 || i64_push(&th->on_cpu, t) < 0))
        return -1;
    th->has_on_since = 0;
    th->seen = 1;
    if (th->has_open && sw_close(s, th, t, 0) < 0)
        return -1;
    return 0;
}

/* ``SampledSched._exit``. */
static int sw_exit(SwitchTracker *s, int64_t tid, int64_t pid, const char *cb, Py_ssize_t cn,
                   int64_t t)
{
    Py_ssize_t i = sw_thread(s, tid, pid, NULL, cb, cn);
    if (i < 0)
        return -1;
    SwThread *th = &s->th[i];
    if (sw_ran_until(s, th, t) < 0)
        return -1;
    if (th->has_pending) {
        th->has_pending = 0;
        Py_CLEAR(th->pend_frames);
        Py_CLEAR(th->pend_state);
    }
    th->gone = 1;
    return 0;
}

/* ``SampledSched._switch_out``. */
static int sw_out(SwitchTracker *s, int64_t tid, int64_t pid, const char *cb, Py_ssize_t cn,
                  int64_t t, int preempt)
{
    Py_ssize_t i = sw_thread(s, tid, pid, NULL, cb, cn);
    if (i < 0)
        return -1;
    SwThread *th = &s->th[i];
    if (th->gone)
        return 0;  /* the final switch-out after its exit */
    th->switches++;
    if (sw_ran_until(s, th, t) < 0)
        return -1;
    PyObject *frames = NULL, *state = NULL;
    int64_t period = 0;
    if (th->has_pending) {
        th->has_pending = 0;
        int64_t lead = t - th->pend_t;
        if (lead >= 0 && lead <= 10000000) {  /* MAX_SAMPLE_LEAD_NS */
            frames = th->pend_frames;
            state = th->pend_state;
            period = th->pend_period;
        } else {
            Py_DECREF(th->pend_frames);
            Py_DECREF(th->pend_state);
        }
        th->pend_frames = th->pend_state = NULL;
    }
    int runnable = preempt;
    if (!runnable && state != NULL) {
        runnable = PyUnicode_GET_LENGTH(state) > 0 && PyUnicode_READ_CHAR(state, 0) == 'R';
    }
    th->has_open = 1;
    th->open_start = t;
    th->open_runnable = (char)runnable;
    th->open_frames = frames;
    th->open_state = state;
    th->open_period = period;
    return 0;
}

/* ``SampledSched._switch_in``. */
static int sw_in_rec(SwitchTracker *s, int64_t tid, int64_t pid, const char *cb,
                     Py_ssize_t cn, int64_t t)
{
    Py_ssize_t i = sw_find(s, tid);
    if (i < 0 || !s->th[i].seen) {
        i = sw_thread(s, tid, pid, NULL, cb, cn);
        if (i < 0)
            return -1;
        SwThread *th = &s->th[i];
        if (i64_push(&th->ins, t) < 0)
            return -1;
        th->seen = 1;
        th->has_on_since = 1;
        th->on_since = t;
        if (s->has_first && t > s->first_time) {
            int e = sw_existed(s, tid);
            if (e < 0)
                return -1;
            if (e) {
                th->leading += t - s->first_time;
                th->lead_start = s->first_time;
                return sw_log(s, tid, s->first_time, t - s->first_time, 2, NULL, NULL, 0);
            }
        }
        return 0;
    }
    SwThread *th = &s->th[i];
    th->gone = 0;  /* its TID taken again by a new thread */
    if (i64_push(&th->ins, t) < 0)
        return -1;
    th->has_on_since = 1;
    th->on_since = t;
    if (th->has_open)
        return sw_close(s, th, t, 1);
    return 0;
}

/* ``SampledSched._end_sample`` when a sample is open (``_cur``): 1 if one was ended, 0 if none
 * was open, -1 on an error. */
static int sw_end_sample(PyObject *sched)
{
    PyObject *cur = PyObject_GetAttrString(sched, "_cur");
    if (cur == NULL)
        return -1;
    int open = cur != Py_None;
    Py_DECREF(cur);
    if (!open)
        return 0;
    PyObject *r = PyObject_CallMethod(sched, "_end_sample", NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 1;
}

/* One switch record, as ``SampledSched.feed_lines`` takes a tuple: 0 or -1 on an error. */
static int sw_apply(SwitchTracker *s, int kind, int64_t pid, int64_t tid, int64_t t,
                    const char *cb, Py_ssize_t cn)
{
    if (kind & 4) {
        s->every_cpu = 1;
        int r = sw_target(s, pid, tid);
        if (r < 0)
            return -1;
        if (!r) {
            s->foreign++;
            return 0;
        }
    }
    if (!s->has_first || t < s->first_time) {
        s->first_time = t;
        s->has_first = 1;
    }
    if (t > s->last_time)
        s->last_time = t;
    if (kind & 8)
        return sw_exit(s, tid, pid, cb, cn, t);
    if (kind & 1)
        return sw_out(s, tid, pid, cb, cn, t, (kind & 2) != 0);
    return sw_in_rec(s, tid, pid, cb, cn, t);
}

static int sw_get_i64(PyObject *o, const char *name, int64_t *v, char *has)
{
    PyObject *x = PyObject_GetAttrString(o, name);
    if (x == NULL)
        return -1;
    if (has != NULL)
        *has = x != Py_None;
    if (x != Py_None)
        *v = PyLong_AsLongLong(x);
    Py_DECREF(x);
    return PyErr_Occurred() ? -1 : 0;
}

static int sw_set_i64(PyObject *o, const char *name, int64_t v)
{
    PyObject *x = PyLong_FromLongLong(v);
    int r = x == NULL ? -1 : PyObject_SetAttrString(o, name, x);
    Py_XDECREF(x);
    return r;
}

/* Reads sched's figures before a run. */
static int sw_load(SwitchTracker *s, PyObject *sched)
{
    int64_t ft = 0;
    if (sw_get_i64(sched, "first_time", &ft, &s->has_first) < 0 ||
            sw_get_i64(sched, "last_time", &s->last_time, NULL) < 0 ||
            sw_get_i64(sched, "foreign", &s->foreign, NULL) < 0 ||
            sw_get_i64(sched, "lines", &s->lines, NULL) < 0 ||
            sw_get_i64(sched, "exact", &s->exact, NULL) < 0 ||
            sw_get_i64(sched, "inferred", &s->inferred, NULL) < 0)
        return -1;
    s->first_time = ft;
    PyObject *w = PyObject_GetAttrString(sched, "window");
    if (w == NULL)
        return -1;
    s->has_window = w != Py_None;
    if (s->has_window) {
        PyObject *w0 = PySequence_GetItem(w, 0);
        s->window_start = w0 == NULL ? 0 : PyLong_AsLongLong(w0);
        Py_XDECREF(w0);
    }
    Py_DECREF(w);
    if (PyErr_Occurred())
        return -1;
    PyObject *e = PyObject_GetAttrString(sched, "every_cpu");
    if (e == NULL)
        return -1;
    s->every_cpu = (char)PyObject_IsTrue(e);
    Py_DECREF(e);
    s->at_start = PyObject_GetAttrString(sched, "at_start");
    s->targets = PyObject_GetAttrString(sched, "target_pids");
    if (s->at_start == NULL || s->targets == NULL)
        return -1;
    if ((s->at_start != Py_None && !PyAnySet_Check(s->at_start)) || !PySet_Check(s->targets)) {
        PyErr_SetString(PyExc_TypeError, "at_start and target_pids must be sets");
        return -1;
    }
    s->last_target = 0;
    return 0;
}

/* Writes sched's figures back after a run (consumed: whether any record was read). */
static int sw_store(SwitchTracker *s, PyObject *sched, int consumed)
{
    int r = 0;
    if (s->has_first)
        r |= sw_set_i64(sched, "first_time", s->first_time);
    r |= sw_set_i64(sched, "last_time", s->last_time);
    r |= sw_set_i64(sched, "foreign", s->foreign);
    r |= sw_set_i64(sched, "lines", s->lines);
    r |= sw_set_i64(sched, "exact", s->exact);
    r |= sw_set_i64(sched, "inferred", s->inferred);
    r |= PyObject_SetAttrString(sched, "every_cpu", s->every_cpu ? Py_True : Py_False);
    if (consumed)
        r |= PyObject_SetAttrString(sched, "_skip", Py_False);
    return r ? -1 : 0;
}

static PyObject *SwitchTracker_run(SwitchTracker *s, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t pos;
    if (nargs != 3 || (pos = PyLong_AsSsize_t(args[2])) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "run(sched, block, pos)");
        return NULL;
    }
    PyObject *sched = args[0];
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const char *data = view.buf, *end = data + view.len;
    int err = sw_load(s, sched) < 0;
    int consumed = 0;
    const char *line = data + (pos < view.len ? pos : view.len);
    Py_ssize_t next = pos;
    while (!err && pos <= view.len) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *stop = nl ? nl : end;
        long long pid = 0, tid = 0, t = 0;
        const char *comm_end = line;
        int kind = sw_line(line, stop, &pid, &tid, &t, &comm_end);
        if (kind < 0)
            break;
        if (!consumed) {  /* feed_lines ends a sample before a switch record */
            if (sw_end_sample(sched) < 0) {
                err = 1;
                break;
            }
            consumed = 1;
        }
        const char *a = line, *b = comm_end;
        while (a < b && *a == ' ')
            a++;
        while (b > a && b[-1] == ' ')
            b--;
        s->lines++;
        if (sw_apply(s, kind, pid, tid, t, a, b - a) < 0) {
            err = 1;
            break;
        }
        if (nl == NULL) {
            next = view.len + 1;
            break;
        }
        line = nl + 1;
        next = line - data;
    }
    if (!err && sw_store(s, sched, consumed) < 0)
        err = 1;
    Py_CLEAR(s->at_start);
    Py_CLEAR(s->targets);
    PyBuffer_Release(&view);
    return err ? NULL : PyLong_FromSsize_t(next);
}

/* switch(sched, kind, pid, tid, t, comm): one switch record Python read
 * (``SampledSched._switch``: a line ``sw_line`` leaves to Python, such as a comm out of
 * printable ASCII). */
static PyObject *SwitchTracker_switch(SwitchTracker *s, PyObject *args)
{
    PyObject *sched, *comm;
    int kind;
    long long pid, tid, t;
    if (!PyArg_ParseTuple(args, "OiLLLU", &sched, &kind, &pid, &tid, &t, &comm))
        return NULL;
    Py_ssize_t cn;
    const char *cb = PyUnicode_AsUTF8AndSize(comm, &cn);
    if (cb == NULL)
        return NULL;
    int err = sw_load(s, sched) < 0 || sw_apply(s, kind, pid, tid, t, cb, cn) < 0;
    if (!err && sw_store(s, sched, 0) < 0)
        err = 1;
    Py_CLEAR(s->at_start);
    Py_CLEAR(s->targets);
    if (err)
        return NULL;
    Py_RETURN_NONE;
}

/* pending(tid, pid, comm, t, frames, state, period): a stack sample waiting for the thread's
 * next OUT (``SampledSched._end_sample``), the thread made or named as ``_thread`` does. */
static PyObject *SwitchTracker_pending(SwitchTracker *s, PyObject *args)
{
    long long tid, pid, t, period;
    PyObject *comm, *frames, *state;
    if (!PyArg_ParseTuple(args, "LLULO!UL", &tid, &pid, &comm, &t, &PyTuple_Type, &frames,
                          &state, &period))
        return NULL;
    Py_ssize_t i = sw_thread(s, tid, pid, comm, NULL, 0);
    if (i < 0)
        return NULL;
    SwThread *th = &s->th[i];
    if (th->has_pending) {
        Py_CLEAR(th->pend_frames);
        Py_CLEAR(th->pend_state);
    }
    Py_INCREF(frames);
    Py_INCREF(state);
    th->has_pending = 1;
    th->pend_t = t;
    th->pend_frames = frames;
    th->pend_state = state;
    th->pend_period = period;
    th->samples++;
    Py_RETURN_NONE;
}

static PyObject *sw_bytes(const void *v, Py_ssize_t n)
{
    return PyBytes_FromStringAndSize(n ? (const char *)v : "", n);
}

/* export() -> (threads, log): each thread as (tid, pid, comm, switches, samples, leading,
 * lead_start, on_since or None, seen, open or None, pending or None, on_cpu bytes, ins
 * bytes, gone), open as (start, runnable, (frames, state, period) or None), pending as (t,
 * frames, state, period); the log's columns as bytes of int64 (tid, start, dur, sample,
 * period) and int8 (kind). */
static PyObject *SwitchTracker_export(SwitchTracker *s, PyObject *unused)
{
    (void)unused;
    PyObject *threads = PyList_New(0);
    for (Py_ssize_t i = 0; threads != NULL && i < s->nth; i++) {
        SwThread *th = &s->th[i];
        PyObject *open = Py_None, *pending = Py_None, *sample = Py_None;
        Py_INCREF(Py_None);
        Py_INCREF(Py_None);
        if (th->has_open) {
            if (th->open_frames != NULL) {
                sample = Py_BuildValue("(OOL)", th->open_frames, th->open_state,
                                       (long long)th->open_period);
            } else {
                Py_INCREF(Py_None);
            }
            Py_DECREF(open);
            open = sample == NULL ? NULL :
                Py_BuildValue("(LON)", (long long)th->open_start,
                              th->open_runnable ? Py_True : Py_False, sample);
        }
        if (th->has_pending) {
            Py_DECREF(pending);
            pending = Py_BuildValue("(LOOL)", (long long)th->pend_t, th->pend_frames,
                                    th->pend_state, (long long)th->pend_period);
        }
        PyObject *since = th->has_on_since ? PyLong_FromLongLong(th->on_since)
                                           : (Py_INCREF(Py_None), Py_None);
        if (open == NULL || pending == NULL || since == NULL) {
            Py_XDECREF(open);
            Py_XDECREF(pending);
            Py_XDECREF(since);
            Py_CLEAR(threads);
            break;
        }
        /* Py_BuildValue takes the N references, whether it succeeds or not */
        PyObject *row = Py_BuildValue("(LLOLLLLNONNNNO)", (long long)th->tid,
                                      (long long)th->pid, th->comm, (long long)th->switches,
                                      (long long)th->samples, (long long)th->leading,
                                      (long long)th->lead_start, since,
                                      th->seen ? Py_True : Py_False, open, pending,
                                      sw_bytes(th->on_cpu.v, th->on_cpu.n * 8),
                                      sw_bytes(th->ins.v, th->ins.n * 8),
                                      th->gone ? Py_True : Py_False);
        if (row == NULL) {
            Py_CLEAR(threads);
            break;
        }
        if (PyList_Append(threads, row) < 0)
            Py_CLEAR(threads);
        Py_DECREF(row);
    }
    if (threads == NULL)
        return NULL;
    Py_ssize_t n = s->ltid.n;
    return Py_BuildValue("(N(NNNNNN))", threads, sw_bytes(s->ltid.v, n * 8),
                         sw_bytes(s->lstart.v, n * 8), sw_bytes(s->ldur.v, n * 8),
                         sw_bytes(s->lkind, n), sw_bytes(s->lsample.v, n * 8),
                         sw_bytes(s->lperiod.v, n * 8));
}

static int SwitchTracker_init(SwitchTracker *s, PyObject *args, PyObject *kw)
{
    PyObject *samples, *sindex;
    static char *names[] = {"samples", "index", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!", names, &PyList_Type, &samples,
                                     &PyDict_Type, &sindex))
        return -1;
    Py_INCREF(samples);
    Py_INCREF(sindex);
    Py_XSETREF(s->samples, samples);
    Py_XSETREF(s->sindex, sindex);
    return 0;
}

static void SwitchTracker_dealloc(SwitchTracker *s)
{
    for (Py_ssize_t i = 0; i < s->nth; i++) {
        SwThread *th = &s->th[i];
        Py_XDECREF(th->comm);
        Py_XDECREF(th->open_frames);
        Py_XDECREF(th->open_state);
        Py_XDECREF(th->pend_frames);
        Py_XDECREF(th->pend_state);
        PyMem_Free(th->on_cpu.v);
        PyMem_Free(th->ins.v);
    }
    PyMem_Free(s->th);
    PyMem_Free(s->index);
    PyMem_Free(s->ltid.v);
    PyMem_Free(s->lstart.v);
    PyMem_Free(s->ldur.v);
    PyMem_Free(s->lperiod.v);
    PyMem_Free(s->lsample.v);
    PyMem_Free(s->lkind);
    Py_XDECREF(s->samples);
    Py_XDECREF(s->sindex);
    Py_XDECREF(s->at_start);
    Py_XDECREF(s->targets);
    Py_XDECREF(s->recs);
    Py_XDECREF(s->rcomms);
    Py_XDECREF(s->names);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* ---- perf_switches ---------------------------------------------------------------------- */

/* perf_switches(path) -> None or (records, comms): the switch records of one chunk of the
 * scheduler's perf.data read from the file itself, not from ``perf script``'s text (which
 * costs perf about three quarters of its time on a busy server's chunk, and the folder the
 * parsing of every line).  records: bytes of ``SW_REC`` in time order (ties: the file's order,
 * as perf's ordered events keep it); comms: the names the records refer to.  Besides the
 * switches (kind 0-7, as ``switch_lines``), each ``PERF_RECORD_COMM`` (kind 8: comm[a] =
 * comms[b]) and ``PERF_RECORD_FORK`` (kind 16: comm[a] = comm[b], as perf names a new thread
 * after the one that created it), so that the tracker names each thread as perf script would.
 * None: a file this reader does not take (another byte order, no timestamps or thread ids in
 * its records, events whose records end differently, a truncated header): its text is read
 * as before. */

typedef struct {
    int64_t t;
    int64_t seq;
    int32_t kind, pid, tid, a, b, pad;
} SW_REC;

#define PR_COMM 3
#define PR_FORK 7
#define PR_SWITCH 14
#define PR_SWITCH_CPU_WIDE 15
#define PS_TID (1ULL << 1)
#define PS_TIME (1ULL << 2)
#define PS_ID (1ULL << 6)
#define PS_CPU (1ULL << 7)
#define PS_STREAM_ID (1ULL << 9)
#define PS_IDENTIFIER (1ULL << 16)
#define PS_ID_ALL (PS_TID | PS_TIME | PS_ID | PS_CPU | PS_STREAM_ID | PS_IDENTIFIER)

static int rec_cmp(const void *x, const void *y)
{
    const SW_REC *a = x, *b = y;
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    return a->seq < b->seq ? -1 : (a->seq > b->seq);
}

static uint64_t rd64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint32_t rd32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static PyObject *perf_switches(PyObject *module, PyObject *arg)
{
    (void)module;
    PyObject *path = NULL;
    if (!PyUnicode_FSConverter(arg, &path))
        return NULL;
    FILE *f = fopen(PyBytes_AS_STRING(path), "rb");
    Py_DECREF(path);
    if (f == NULL)
        return PyErr_SetFromErrno(PyExc_OSError);
    unsigned char *buf = NULL;
    void *map = NULL;
    size_t map_len = 0;
    SW_REC *recs = NULL;
    PyObject *comms = NULL, *index = NULL, *out = NULL;
    Py_ssize_t nrec = 0, rcap = 0;
    unsigned char head[104];
    int unsupported = 1;
    if (fread(head, 1, sizeof(head), f) != sizeof(head) || memcmp(head, "PERFILE2", 8) != 0)
        goto done;
    uint64_t attr_size = rd64(head + 16), attrs_off = rd64(head + 24),
             attrs_size = rd64(head + 32), data_off = rd64(head + 40), data_size = rd64(head + 48);
    if (attr_size < 16 + 48 || attr_size > 4096 || attrs_size == 0 || attrs_size % attr_size ||
            attrs_size / attr_size > 64 || data_size == 0 || data_size > ((uint64_t)1 << 40))
        goto done;
    /* every event's records end with the same fields (sample_id_all) */
    uint64_t id_bits = 0;
    unsigned char attr[4096];
    for (uint64_t k = 0; k < attrs_size / attr_size; k++) {
        if (fseeko(f, (off_t)(attrs_off + k * attr_size), SEEK_SET) != 0 ||
                fread(attr, 1, (size_t)attr_size, f) != attr_size)
            goto done;
        uint64_t sample_type = rd64(attr + 24), flags = rd64(attr + 40);
        if (!(flags & (1ULL << 18)))  /* sample_id_all */
            goto done;
        uint64_t bits = sample_type & PS_ID_ALL;
        if (k > 0 && bits != id_bits)
            goto done;
        id_bits = bits;
    }
    if ((id_bits & (PS_TID | PS_TIME)) != (PS_TID | PS_TIME))
        goto done;
    size_t trailer = 8 * (size_t)(1 + 1 + !!(id_bits & PS_ID) + !!(id_bits & PS_STREAM_ID) +
                                  !!(id_bits & PS_CPU) + !!(id_bits & PS_IDENTIFIER));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || (uint64_t)st.st_size <= data_off)
        goto done;
    size_t got = (size_t)((uint64_t)st.st_size - data_off < data_size
                          ? (uint64_t)st.st_size - data_off : data_size);
    map_len = (size_t)data_off + got;
    map = mmap(NULL, map_len, PROT_READ, MAP_PRIVATE, fileno(f), 0);
    if (map == MAP_FAILED) {
        map = NULL;
        goto done;
    }
    buf = (unsigned char *)map + data_off;
    comms = PyList_New(0);
    index = PyDict_New();
    if (comms == NULL || index == NULL)
        goto done;
    unsupported = 0;
    size_t pos = 0;
    int64_t seq = 0;
    while (pos + 8 <= got) {
        uint32_t type = rd32(buf + pos);
        uint16_t misc, size;
        memcpy(&misc, buf + pos + 4, 2);
        memcpy(&size, buf + pos + 6, 2);
        if (size < 8 || pos + size > got)
            break;  /* a chunk cut short: what was whole is kept, as perf script does */
        const unsigned char *r = buf + pos, *end = buf + pos + size;
        pos += size;
        if (type != PR_COMM && type != PR_FORK && type != PR_SWITCH &&
                type != PR_SWITCH_CPU_WIDE)
            continue;
        if ((size_t)(end - r) < 8 + trailer)
            continue;
        const unsigned char *id = end - trailer;
        SW_REC rec = {0};
        rec.pid = (int32_t)rd32(id);
        rec.tid = (int32_t)rd32(id + 4);
        rec.t = (int64_t)rd64(id + 8);
        rec.seq = seq++;
        if (type == PR_SWITCH || type == PR_SWITCH_CPU_WIDE) {
            rec.kind = (type == PR_SWITCH_CPU_WIDE ? 4 : 0) |
                       ((misc & (1 << 13)) ? 1 : 0) | ((misc & (1 << 14)) ? 2 : 0);
            if (!(rec.kind & 1))
                rec.kind &= ~2;  /* preempt is a switch-out's */
        } else if (type == PR_FORK) {
            if (id - r < 8 + 24)
                continue;
            rec.kind = 16;
            rec.a = (int32_t)rd32(r + 16);  /* tid */
            rec.b = (int32_t)rd32(r + 20);  /* ptid */
            rec.t = (int64_t)rd64(r + 24);
        } else {
            if (id - r < 8 + 8)
                continue;
            const unsigned char *name = r + 16;
            size_t n = 0;
            while (name + n < id && name[n])
                n++;
            PyObject *s = PyUnicode_DecodeUTF8((const char *)name, (Py_ssize_t)n, "replace");
            if (s == NULL)
                goto fail;
            PyObject *found = PyDict_GetItemWithError(index, s);
            Py_ssize_t ci;
            if (found != NULL) {
                ci = PyLong_AsSsize_t(found);
            } else if (PyErr_Occurred()) {
                Py_DECREF(s);
                goto fail;
            } else {
                ci = PyList_GET_SIZE(comms);
                PyObject *v = PyLong_FromSsize_t(ci);
                int bad = v == NULL || PyDict_SetItem(index, s, v) < 0 ||
                          PyList_Append(comms, s) < 0;
                Py_XDECREF(v);
                if (bad) {
                    Py_DECREF(s);
                    goto fail;
                }
            }
            Py_DECREF(s);
            rec.kind = 8;
            rec.a = (int32_t)rd32(r + 12);  /* tid */
            rec.b = (int32_t)ci;
        }
        if (nrec == rcap) {
            Py_ssize_t cap = rcap ? rcap * 2 : 4096;
            SW_REC *v = PyMem_Realloc(recs, (size_t)cap * sizeof(SW_REC));
            if (v == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            recs = v;
            rcap = cap;
        }
        recs[nrec++] = rec;
    }
    if (nrec) {
        /* the other threads of the collect (the samplers) run meanwhile */
        Py_BEGIN_ALLOW_THREADS
        qsort(recs, (size_t)nrec, sizeof(SW_REC), rec_cmp);
        Py_END_ALLOW_THREADS
    }
    out = Py_BuildValue("(NO)", sw_bytes(recs, nrec * (Py_ssize_t)sizeof(SW_REC)), comms);
    goto done;
fail:
    unsupported = 0;
done:
    if (map != NULL)
        munmap(map, map_len);
    fclose(f);
    PyMem_Free(recs);
    Py_XDECREF(comms);
    Py_XDECREF(index);
    if (out == NULL && unsupported && !PyErr_Occurred())
        Py_RETURN_NONE;
    return out;
}

/* load(records, comms): the records ``perf_switches`` read from the next chunk. */
static PyObject *SwitchTracker_load(SwitchTracker *s, PyObject *args)
{
    PyObject *recs, *comms;
    if (!PyArg_ParseTuple(args, "SO!", &recs, &PyList_Type, &comms))
        return NULL;
    if (PyBytes_GET_SIZE(recs) % (Py_ssize_t)sizeof(SW_REC)) {
        PyErr_SetString(PyExc_ValueError, "not records of perf_switches");
        return NULL;
    }
    Py_INCREF(recs);
    Py_XSETREF(s->recs, recs);
    Py_INCREF(comms);
    Py_XSETREF(s->rcomms, comms);
    s->rpos = 0;
    Py_RETURN_NONE;
}

/* The name perf gives thread tid now (NULL: none known; borrowed). */
static PyObject *sw_comm_of(SwitchTracker *s, int64_t tid)
{
    PyObject *k = PyLong_FromLongLong(tid);
    if (k == NULL)
        return NULL;
    PyObject *v = PyDict_GetItemWithError(s->names, k);
    Py_DECREF(k);
    return v;
}

static int sw_set_comm(SwitchTracker *s, int64_t tid, PyObject *name)
{
    PyObject *k = PyLong_FromLongLong(tid);
    int r = k == NULL ? -1 : PyDict_SetItem(s->names, k, name);
    Py_XDECREF(k);
    return r;
}

/* until(sched, t, most): the loaded records before time t applied (t None: all that are
 * left), at most ``most`` of them (so that the caller lets the collect's other threads run
 * between calls); returns how many records were read. */
static PyObject *SwitchTracker_until(SwitchTracker *s, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t most;
    if (nargs != 3 || (most = PyLong_AsSsize_t(args[2])) <= 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "until(sched, t, most): most > 0");
        return NULL;
    }
    int64_t limit = INT64_MAX;
    if (args[1] != Py_None) {
        limit = PyLong_AsLongLong(args[1]);
        if (limit == -1 && PyErr_Occurred())
            return NULL;
    }
    if (s->recs == NULL)
        return PyLong_FromLong(0);
    const SW_REC *recs = (const SW_REC *)PyBytes_AS_STRING(s->recs);
    Py_ssize_t n = PyBytes_GET_SIZE(s->recs) / (Py_ssize_t)sizeof(SW_REC);
    if (s->rpos >= n || recs[s->rpos].t >= limit)
        return PyLong_FromLong(0);
    PyObject *sched = args[0];
    if (s->names == NULL && (s->names = PyDict_New()) == NULL)
        return NULL;
    int err = sw_load(s, sched) < 0;
    long long read = 0;
    int consumed = 0;
    while (!err && s->rpos < n && recs[s->rpos].t < limit && read < most) {
        const SW_REC *r = &recs[s->rpos];
        read++;
        if (r->kind == 8) {
            if (r->b < 0 || r->b >= PyList_GET_SIZE(s->rcomms) ||
                    sw_set_comm(s, r->a, PyList_GET_ITEM(s->rcomms, r->b)) < 0)
                err = 1;
            s->rpos++;
            continue;
        }
        if (r->kind == 16) {
            PyObject *parent = sw_comm_of(s, r->b);
            if (parent == NULL && PyErr_Occurred())
                err = 1;
            else if (parent != NULL && sw_set_comm(s, r->a, parent) < 0)
                err = 1;
            s->rpos++;
            continue;
        }
        if (!consumed) {  /* a sample read before these records is ended first */
            int ended = sw_end_sample(sched);
            if (ended < 0) {
                err = 1;
                break;
            }
            if (ended) {
                recs = (const SW_REC *)PyBytes_AS_STRING(s->recs);
                r = &recs[s->rpos];
            }
            consumed = 1;
        }
        PyObject *name = sw_comm_of(s, r->tid);
        Py_ssize_t cn = 0;
        const char *cb = "";
        if (name != NULL) {
            cb = PyUnicode_AsUTF8AndSize(name, &cn);
            if (cb == NULL)
                err = 1;
        } else if (PyErr_Occurred()) {
            err = 1;
        }
        s->rpos++;
        if (!err && sw_apply(s, r->kind, r->pid, r->tid, r->t, cb, cn) < 0)
            err = 1;
    }
    if (!err && sw_store(s, sched, consumed) < 0)
        err = 1;
    Py_CLEAR(s->at_start);
    Py_CLEAR(s->targets);
    return err ? NULL : PyLong_FromLongLong(read);
}

static PyMethodDef SwitchTracker_methods[] = {
    {"run", (PyCFunction)(void (*)(void))SwitchTracker_run, METH_FASTCALL,
     "run(sched, block, pos) -> int: the switch records from pos applied; where the first "
     "other line starts (len(block) + 1: none)"},
    {"switch", (PyCFunction)SwitchTracker_switch, METH_VARARGS,
     "switch(sched, kind, pid, tid, t, comm): one switch record read by Python"},
    {"pending", (PyCFunction)SwitchTracker_pending, METH_VARARGS,
     "pending(tid, pid, comm, t, frames, state, period): a stack sample for the next OUT"},
    {"load", (PyCFunction)SwitchTracker_load, METH_VARARGS,
     "load(records, comms): the records perf_switches read from the next chunk"},
    {"until", (PyCFunction)(void (*)(void))SwitchTracker_until, METH_FASTCALL,
     "until(sched, t, most) -> int: at most most of the loaded records before t (None: "
     "all) applied; how many were read"},
    {"export", (PyCFunction)SwitchTracker_export, METH_NOARGS,
     "export() -> (threads, log columns)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SwitchTrackerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wallflame._speedups.SwitchTracker",
    .tp_basicsize = sizeof(SwitchTracker),
    .tp_dealloc = (destructor)SwitchTracker_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The scheduler's switch records applied per thread (fold/perf/sampled_switches.py).",
    .tp_methods = SwitchTracker_methods,
    .tp_init = (initproc)SwitchTracker_init,
    .tp_new = PyType_GenericNew,
};

/* ---- the scheduler's finish passes ------------------------------------------------------ */

/* Each mirrors a pass of ``SampledSched.finish`` (fold/perf/sampled_switches.py) over the
 * interval log's columns and each thread's switch-ins and on-CPU pairs, which the Python
 * code keeps as ``array`` objects; the tests hold each to the Python pass it stands for. */

/* A buffer of int64 (``array('q')``, or ``'l'`` where a long is 64-bit), or of int8 when
 * itemsize is 1; writable on request. */
static int sk_buf(PyObject *o, Py_buffer *v, Py_ssize_t itemsize, int writable)
{
    if (PyObject_GetBuffer(o, v, (writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) | PyBUF_FORMAT) < 0)
        return -1;
    if (v->itemsize != itemsize || v->len % itemsize) {
        PyBuffer_Release(v);
        PyErr_SetString(PyExc_TypeError, "an array of 64-bit (or 8-bit) integers expected");
        return -1;
    }
    return 0;
}

static Py_ssize_t sk_bisect_left(const int64_t *a, Py_ssize_t n, int64_t x)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static Py_ssize_t sk_bisect_right(const int64_t *a, Py_ssize_t n, int64_t x)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (x < a[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

typedef struct {
    int64_t start;
    int64_t i;
} sk_order;

static int sk_order_cmp(const void *a, const void *b)
{
    const sk_order *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

/* wake_split(tid, start, dur, kind, sample, period, wakes) -> None or (woken, tid, start,
 * dur, kind, sample, period): ``SampledSched._apply_wakes`` with ``_merge_log``.  wakes:
 * {tid: sorted list of wake-up times}.  Each blocked or leading interval ends at its thread's
 * last wake-up inside it; the rest becomes a runnable interval with the same sample; the
 * columns come back as bytes, every row in start order (ties: the log's rows first, in
 * their order, then the new ones in theirs).  None: no interval was woken. */
static PyObject *wake_split(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 7 || !PyDict_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "wake_split(tid, start, dur, kind, sample, period, "
                        "wakes)");
        return NULL;
    }
    Py_buffer b[6];
    int got = 0;
    for (; got < 6; got++)
        if (sk_buf(args[got], &b[got], got == 3 ? 1 : 8, 0) < 0)
            break;
    PyObject *out = NULL;
    int64_t *cols[6] = {NULL};
    int64_t *wv = NULL, *wt = NULL;
    int32_t *wix = NULL;
    sk_order *order = NULL;
    if (got < 6)
        goto done;
    Py_ssize_t n = b[0].len / 8;
    for (int k = 1; k < 6; k++)
        if ((k == 3 ? b[k].len : b[k].len / 8) != n) {
            PyErr_SetString(PyExc_ValueError, "columns of different lengths");
            goto done;
        }
    const int64_t *tid = b[0].buf, *start = b[1].buf, *dur = b[2].buf, *sample = b[4].buf,
                  *period = b[5].buf;
    const signed char *kind = b[3].buf;
    /* every row, then at most one new row per row */
    for (int k = 0; k < 6; k++) {
        cols[k] = PyMem_Malloc((size_t)(2 * n + 1) * sizeof(int64_t));
        if (cols[k] == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        cols[0][i] = tid[i];
        cols[1][i] = start[i];
        cols[2][i] = dur[i];
        cols[3][i] = kind[i];
        cols[4][i] = sample[i];
        cols[5][i] = period[i];
    }
    /* every thread's wake-ups as a C array, found by tid (wt: tid, offset, count) */
    Py_ssize_t nw = PyDict_GET_SIZE(args[6]), wcap = 16, wtotal = 0, wused = 0;
    while (wcap < 2 * nw + 2)
        wcap *= 2;
    wix = PyMem_Calloc((size_t)wcap, sizeof(int32_t));
    wt = PyMem_Malloc((size_t)(3 * nw + 3) * sizeof(int64_t));
    if (wix == NULL || wt == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *key, *list;
    Py_ssize_t it = 0;
    while (PyDict_Next(args[6], &it, &key, &list)) {
        Py_ssize_t len = PySequence_Size(list);
        if (len < 0)
            goto done;
        wtotal += len;
    }
    wv = PyMem_Malloc((size_t)(wtotal + 1) * sizeof(int64_t));
    if (wv == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    it = 0;
    Py_ssize_t nwt = 0;
    while (PyDict_Next(args[6], &it, &key, &list)) {
        int64_t t = PyLong_AsLongLong(key);
        PyObject *seq = PySequence_Fast(list, "wake-ups must be a sequence");
        if (seq == NULL || PyErr_Occurred()) {
            Py_XDECREF(seq);
            goto done;
        }
        Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
        if (wused + len > wtotal) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_RuntimeError, "wake-ups changed while read");
            goto done;
        }
        for (Py_ssize_t k = 0; k < len; k++)
            wv[wused + k] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, k));
        Py_DECREF(seq);
        if (PyErr_Occurred())
            goto done;
        wt[3 * nwt] = t;
        wt[3 * nwt + 1] = wused;
        wt[3 * nwt + 2] = len;
        uint64_t h = sw_hash(t) & (uint64_t)(wcap - 1);
        while (wix[h])
            h = (h + 1) & (uint64_t)(wcap - 1);
        wix[h] = (int32_t)(nwt + 1);
        nwt++;
        wused += len;
    }
    Py_ssize_t m = n;
    long long woken = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (kind[i] != 0 && kind[i] != 2)  /* LOG_BLOCKED, LOG_LEADING */
            continue;
        uint64_t h = sw_hash(tid[i]) & (uint64_t)(wcap - 1);
        Py_ssize_t r = -1;
        while (wix[h]) {
            if (wt[3 * (wix[h] - 1)] == tid[i]) {
                r = wix[h] - 1;
                break;
            }
            h = (h + 1) & (uint64_t)(wcap - 1);
        }
        if (r < 0 || !wt[3 * r + 2])
            continue;
        const int64_t *found = wv + wt[3 * r + 1];
        Py_ssize_t wn = wt[3 * r + 2];
        int64_t s = start[i], e = start[i] + dur[i];
        Py_ssize_t j = sk_bisect_right(found, wn, e);
        if (!j || found[j - 1] <= s || found[j - 1] >= e)
            continue;
        int64_t w = found[j - 1];
        cols[2][i] = w - s;
        cols[0][m] = tid[i];
        cols[1][m] = w;
        cols[2][m] = e - w;
        cols[3][m] = 1;  /* LOG_RUNNABLE */
        cols[4][m] = sample[i];
        cols[5][m] = period[i];
        m++;
        woken++;
    }
    if (!woken) {
        Py_INCREF(Py_None);
        out = Py_None;
        goto done;
    }
    order = PyMem_Malloc((size_t)m * sizeof(sk_order));
    if (order == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        order[i].start = cols[1][i];
        order[i].i = i;
    }
    qsort(order, (size_t)m, sizeof(sk_order), sk_order_cmp);
    PyObject *parts[6] = {NULL};
    for (int k = 0; k < 6; k++) {
        Py_ssize_t size = k == 3 ? 1 : 8;
        parts[k] = PyBytes_FromStringAndSize(NULL, m * size);
        if (parts[k] == NULL) {
            for (int q = 0; q < k; q++)
                Py_DECREF(parts[q]);
            goto done;
        }
        char *dst = PyBytes_AS_STRING(parts[k]);
        for (Py_ssize_t r = 0; r < m; r++) {
            if (k == 3)
                dst[r] = (char)cols[3][order[r].i];
            else
                memcpy(dst + r * 8, &cols[k][order[r].i], 8);
        }
    }
    out = Py_BuildValue("(LNNNNNN)", woken, parts[0], parts[1], parts[2], parts[3], parts[4],
                        parts[5]);
done:
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&b[k]);
    for (int k = 0; k < 6; k++)
        PyMem_Free(cols[k]);
    PyMem_Free(wv);
    PyMem_Free(wt);
    PyMem_Free(wix);
    PyMem_Free(order);
    return out;
}

/* in_caps(tids, ins, pairs, log_tid, log_start, log_dur) -> [(off, at, on, pair)]:
 * ``SampledSched._in_caps``, the four as bytes of int64 for each thread in the order of
 * tids.  ins[k]: thread tids[k]'s switch-ins in order; pairs[k]: its on-CPU (start, end)
 * pairs; the log's columns whole (a row of a thread not in tids is passed over). */
static PyObject *in_caps(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6 || !PyList_Check(args[0]) || !PyList_Check(args[1]) ||
            !PyList_Check(args[2]) || PyList_GET_SIZE(args[1]) != PyList_GET_SIZE(args[0]) ||
            PyList_GET_SIZE(args[2]) != PyList_GET_SIZE(args[0])) {
        PyErr_SetString(PyExc_TypeError, "in_caps(tids, ins, pairs, log_tid, log_start, "
                        "log_dur): three lists of one length, then three arrays");
        return NULL;
    }
    Py_ssize_t nt = PyList_GET_SIZE(args[0]);
    Py_buffer lb[3];
    int lgot = 0;
    for (; lgot < 3; lgot++)
        if (sk_buf(args[3 + lgot], &lb[lgot], 8, 0) < 0)
            break;
    Py_buffer *ib = PyMem_Calloc((size_t)(2 * nt + 1), sizeof(Py_buffer));
    int64_t **res = PyMem_Calloc((size_t)(4 * nt + 1), sizeof(int64_t *));
    PyObject *objs = PyList_New(0);  /* the result's bytes, four a thread */
    int32_t *ix = NULL;
    Py_ssize_t igot = 0, icap = 16;
    PyObject *out = NULL;
    if (lgot < 3 || ib == NULL || res == NULL || objs == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    for (; igot < 2 * nt; igot++)
        if (sk_buf(PyList_GET_ITEM(igot < nt ? args[1] : args[2], igot % nt), &ib[igot], 8,
                   0) < 0)
            goto done;
    while (icap < 2 * nt)
        icap *= 2;
    ix = PyMem_Calloc((size_t)icap, sizeof(int32_t));
    int64_t *tids = PyMem_Malloc((size_t)(nt + 1) * sizeof(int64_t));
    if (ix == NULL || tids == NULL) {
        PyMem_Free(tids);
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < nt; k++) {
        tids[k] = PyLong_AsLongLong(PyList_GET_ITEM(args[0], k));
        if (PyErr_Occurred()) {
            PyMem_Free(tids);
            goto done;
        }
        uint64_t h = sw_hash(tids[k]) & (uint64_t)(icap - 1);
        while (ix[h])
            h = (h + 1) & (uint64_t)(icap - 1);
        ix[h] = (int32_t)(k + 1);
    }
    for (Py_ssize_t k = 0; k < nt; k++) {
        Py_ssize_t n = ib[k].len / 8, np = ib[nt + k].len / 8;
        const int64_t *ins = ib[k].buf, *pairs = ib[nt + k].buf;
        for (int q = 0; q < 4; q++) {
            PyObject *o = PyBytes_FromStringAndSize(NULL, n * 8);
            if (o == NULL || PyList_Append(objs, o) < 0) {
                Py_XDECREF(o);
                PyMem_Free(tids);
                goto done;
            }
            Py_DECREF(o);
            res[4 * k + q] = (int64_t *)PyBytes_AS_STRING(o);
        }
        int64_t *off = res[4 * k], *at = res[4 * k + 1], *on = res[4 * k + 2],
                *pair = res[4 * k + 3];
        for (Py_ssize_t j = 0; j < n; j++) {
            off[j] = on[j] = 0;
            at[j] = pair[j] = -1;
        }
        for (Py_ssize_t q = 0; q + 1 < np; q += 2) {
            Py_ssize_t j = sk_bisect_left(ins, n, pairs[q]);
            if (j < n && ins[j] == pairs[q]) {
                on[j] = pairs[q + 1] - pairs[q];
                pair[j] = q;
            }
        }
    }
    const int64_t *lt = lb[0].buf, *ls = lb[1].buf, *ld = lb[2].buf;
    Py_ssize_t nl = lb[0].len / 8;
    if (lb[1].len / 8 != nl || lb[2].len / 8 != nl) {
        PyMem_Free(tids);
        PyErr_SetString(PyExc_ValueError, "columns of different lengths");
        goto done;
    }
    for (Py_ssize_t r = 0; r < nl; r++) {
        uint64_t h = sw_hash(lt[r]) & (uint64_t)(icap - 1);
        Py_ssize_t k = -1;
        while (ix[h]) {
            if (tids[ix[h] - 1] == lt[r]) {
                k = ix[h] - 1;
                break;
            }
            h = (h + 1) & (uint64_t)(icap - 1);
        }
        if (k < 0)
            continue;
        const int64_t *ins = ib[k].buf;
        Py_ssize_t n = ib[k].len / 8;
        int64_t e = ls[r] + ld[r];
        Py_ssize_t j = sk_bisect_left(ins, n, e);
        if (j < n && ins[j] == e) {
            res[4 * k][j] = ld[r];
            res[4 * k + 1][j] = r;
        }
    }
    PyMem_Free(tids);
    for (Py_ssize_t k = 0; k < nt; k++) {
        Py_ssize_t n = ib[k].len / 8;
        for (Py_ssize_t j = 0; j < n; j++)
            if (res[4 * k + 1][j] < 0 || res[4 * k + 3][j] < 0)
                res[4 * k][j] = res[4 * k + 2][j] = 0;
    }
    out = PyList_New(nt);
    for (Py_ssize_t k = 0; out != NULL && k < nt; k++) {
        PyObject *t = PyTuple_Pack(4, PyList_GET_ITEM(objs, 4 * k),
                                   PyList_GET_ITEM(objs, 4 * k + 1),
                                   PyList_GET_ITEM(objs, 4 * k + 2),
                                   PyList_GET_ITEM(objs, 4 * k + 3));
        if (t == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, k, t);
    }
done:
    for (int k = 0; k < lgot; k++)
        PyBuffer_Release(&lb[k]);
    for (Py_ssize_t k = 0; k < igot; k++)
        PyBuffer_Release(&ib[k]);
    PyMem_Free(ib);
    PyMem_Free(res);
    PyMem_Free(ix);
    Py_XDECREF(objs);
    return out;
}

/* apply_lag(lag, off, at, on, pair, dur, pairs) -> moved: the loop of
 * ``SampledSched._switch_in_lag`` that moves one thread's switch-ins (dur: the log's
 * column, pairs: the thread's on-CPU pairs, both changed in place). */
static PyObject *apply_lag(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    long long lag;
    if (nargs != 7 || ((lag = PyLong_AsLongLong(args[0])) == -1 && PyErr_Occurred())) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "apply_lag(lag, off, at, on, pair, dur, pairs)");
        return NULL;
    }
    Py_buffer b[6];
    int got = 0;
    for (; got < 6; got++)
        if (sk_buf(args[got + 1], &b[got], 8, got >= 4) < 0)
            break;
    PyObject *out = NULL;
    if (got < 6)
        goto done;
    const int64_t *off = b[0].buf, *at = b[1].buf, *on = b[2].buf, *pair = b[3].buf;
    int64_t *dur = b[4].buf, *pairs = b[5].buf;
    Py_ssize_t n = b[0].len / 8, nd = b[4].len / 8, np = b[5].len / 8;
    if (b[1].len / 8 != n || b[2].len / 8 != n || b[3].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "columns of different lengths");
        goto done;
    }
    long long moved = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t d = lag > 0 ? (lag < off[j] ? lag : off[j]) : -(-lag < on[j] ? -lag : on[j]);
        if (!d)
            continue;
        if (at[j] < 0 || at[j] >= nd || pair[j] < 0 || pair[j] >= np) {
            PyErr_SetString(PyExc_IndexError, "an interval or pair out of range");
            goto done;
        }
        dur[at[j]] -= d;
        pairs[pair[j]] -= d;
        moved += d;
    }
    out = PyLong_FromLongLong(moved);
done:
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&b[k]);
    return out;
}

/* Floor division, as Python's // on ints. */
static int64_t sk_floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* clip_log(tid, start, dur, kind, sample, lo, hi, bin_ns[, long_ns]) -> (outside, totals,
 * runnable bins, sampled): the part of ``SampledSched._clip`` that needs no stack.  totals:
 * [(tid, blocked, runnable, leading)] in order of each thread's first row; runnable bins:
 * [(bin, ns)]; sampled: bytes of int64, the rows with a sample and a part inside [lo, hi)
 * (their stacks and bins are Python's), and with long_ns > 0 the blocked rows without one
 * lasting at least long_ns (matched to the snapshots' stops in Python); strata: bytes of
 * int64, CLIP_STRATA per thread in the order of totals, each thread's blocked ns inside
 * [lo, hi) by its intervals' whole durations d (stratum (bit length of d) / 2: factors of 4). */
#define CLIP_STRATA 32
static PyObject *clip_log(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    long long lo, hi, bin_ns, long_ns = 0;
    if (nargs != 8 && nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "clip_log(tid, start, dur, kind, sample, lo, hi, "
                        "bin_ns[, long_ns])");
        return NULL;
    }
    lo = PyLong_AsLongLong(args[5]);
    hi = PyLong_AsLongLong(args[6]);
    bin_ns = PyLong_AsLongLong(args[7]);
    if (nargs == 9)
        long_ns = PyLong_AsLongLong(args[8]);
    if (PyErr_Occurred())
        return NULL;
    if (bin_ns <= 0) {
        PyErr_SetString(PyExc_ValueError, "bin_ns must be positive");
        return NULL;
    }
    Py_buffer b[5];
    int got = 0;
    for (; got < 5; got++)
        if (sk_buf(args[got], &b[got], got == 3 ? 1 : 8, 0) < 0)
            break;
    PyObject *out = NULL, *totals = NULL, *bins = NULL;
    i64vec sampled = {0}, tt = {0}, bb = {0};  /* sampled rows; (tid, b, r, l); (bin, ns) */
    i64vec st = {0};  /* CLIP_STRATA blocked ns per thread row */
    int32_t *ix = NULL;
    Py_ssize_t icap = 0;
    if (got < 5)
        goto done;
    const int64_t *tid = b[0].buf, *start = b[1].buf, *dur = b[2].buf, *sample = b[4].buf;
    const signed char *kind = b[3].buf;
    Py_ssize_t n = b[0].len / 8;
    if (b[1].len / 8 != n || b[2].len / 8 != n || b[3].len != n || b[4].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "columns of different lengths");
        goto done;
    }
    long long outside = 0;
    Py_ssize_t nt = 0, last = -1;
    int64_t bin_lo = 0, bin_hi = -1;  /* the runnable bins kept so far: [bin_lo, bin_hi] */
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = start[i], d = dur[i];
        int64_t a = s > lo ? s : lo, e = s + d < hi ? s + d : hi;
        int64_t c = e - a > 0 ? e - a : 0;
        outside += d - c;
        if (!c)
            continue;
        /* the thread's row */
        Py_ssize_t row;
        if (last >= 0 && tt.v[4 * last] == tid[i]) {
            row = last;
        } else {
            if ((nt + 1) * 2 > icap) {
                Py_ssize_t cap = icap ? icap * 2 : 256;
                int32_t *nix = PyMem_Calloc((size_t)cap, sizeof(int32_t));
                if (nix == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                for (Py_ssize_t r = 0; r < nt; r++) {
                    uint64_t h = sw_hash(tt.v[4 * r]) & (uint64_t)(cap - 1);
                    while (nix[h])
                        h = (h + 1) & (uint64_t)(cap - 1);
                    nix[h] = (int32_t)(r + 1);
                }
                PyMem_Free(ix);
                ix = nix;
                icap = cap;
            }
            uint64_t h = sw_hash(tid[i]) & (uint64_t)(icap - 1);
            row = -1;
            while (ix[h]) {
                if (tt.v[4 * (ix[h] - 1)] == tid[i]) {
                    row = ix[h] - 1;
                    break;
                }
                h = (h + 1) & (uint64_t)(icap - 1);
            }
            if (row < 0) {
                row = nt++;
                if (i64_push(&tt, tid[i]) < 0 || i64_push(&tt, 0) < 0 ||
                        i64_push(&tt, 0) < 0 || i64_push(&tt, 0) < 0)
                    goto done;
                for (int k = 0; k < CLIP_STRATA; k++)
                    if (i64_push(&st, 0) < 0)
                        goto done;
                ix[h] = (int32_t)(row + 1);
            }
            last = row;
        }
        if (kind[i] == 1) {  /* LOG_RUNNABLE */
            tt.v[4 * row + 2] += c;
            for (int64_t x = a; x < e;) {
                int64_t bin = sk_floordiv(x, bin_ns);
                int64_t edge = (bin + 1) * bin_ns < e ? (bin + 1) * bin_ns : e;
                if (bin_hi < bin_lo) {
                    bin_lo = bin_hi = bin;
                    if (i64_push(&bb, 0) < 0)
                        goto done;
                } else if (bin < bin_lo || bin > bin_hi) {
                    /* widen the dense range (the bins of one capture are few) */
                    int64_t nlo = bin < bin_lo ? bin : bin_lo, nhi = bin > bin_hi ? bin : bin_hi;
                    if (nhi - nlo > 100000000) {
                        PyErr_SetString(PyExc_ValueError, "a capture too long for its bins");
                        goto done;
                    }
                    i64vec nb = {0};
                    for (int64_t k = nlo; k <= nhi; k++)
                        if (i64_push(&nb, k >= bin_lo && k <= bin_hi ? bb.v[k - bin_lo] : 0) < 0) {
                            PyMem_Free(nb.v);
                            goto done;
                        }
                    PyMem_Free(bb.v);
                    bb = nb;
                    bin_lo = nlo;
                    bin_hi = nhi;
                }
                bb.v[bin - bin_lo] += edge - x;
                x = edge;
            }
            if (sample[i] >= 0 && i64_push(&sampled, i) < 0)
                goto done;
        } else if (kind[i] == 2) {  /* LOG_LEADING */
            tt.v[4 * row + 3] += c;
        } else {
            tt.v[4 * row + 1] += c;
            st.v[CLIP_STRATA * row + ((64 - __builtin_clzll((unsigned long long)d)) >> 1)] += c;
            if ((sample[i] >= 0 || (long_ns > 0 && d >= long_ns)) && i64_push(&sampled, i) < 0)
                goto done;
        }
    }
    totals = PyList_New(nt);
    if (totals == NULL)
        goto done;
    for (Py_ssize_t r = 0; r < nt; r++) {
        PyObject *t = Py_BuildValue("(LLLL)", (long long)tt.v[4 * r], (long long)tt.v[4 * r + 1],
                                    (long long)tt.v[4 * r + 2], (long long)tt.v[4 * r + 3]);
        if (t == NULL)
            goto done;
        PyList_SET_ITEM(totals, r, t);
    }
    bins = PyList_New(0);
    if (bins == NULL)
        goto done;
    for (int64_t k = bin_lo; k <= bin_hi; k++) {
        if (!bb.v[k - bin_lo])
            continue;
        PyObject *t = Py_BuildValue("(LL)", (long long)k, (long long)bb.v[k - bin_lo]);
        if (t == NULL || PyList_Append(bins, t) < 0) {
            Py_XDECREF(t);
            goto done;
        }
        Py_DECREF(t);
    }
    out = Py_BuildValue("(LOONN)", outside, totals, bins,
                        sw_bytes(sampled.v, sampled.n * 8), sw_bytes(st.v, st.n * 8));
done:
    Py_XDECREF(totals);
    Py_XDECREF(bins);
    PyMem_Free(sampled.v);
    PyMem_Free(tt.v);
    PyMem_Free(st.v);
    PyMem_Free(bb.v);
    PyMem_Free(ix);
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&b[k]);
    return out;
}

/* wake_run(block, pos, wakes) -> (next, records, unparsed): the wake-up capture's lines from
 * pos (``SampledSched.feed_wakes``: ``WAKE_HEADER_RE``, then ``_WAKEE`` on its fields), each
 * wake-up's time appended to wakes[wakee] (a dict of lists); stops at the first line it
 * leaves to Python (a byte out of printable ASCII, or numbers too long to read here) and
 * returns where it starts (len(block) + 1: none). */
static int wk_digits(const char **pp, const char *end, long long *v, int max)
{
    const char *p = *pp;
    long long x = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        if (p - *pp >= max)
            return -1;
        x = x * 10 + (*p - '0');
        p++;
    }
    if (p == *pp)
        return 0;
    *v = x;
    *pp = p;
    return 1;
}

/* _WAKEE matched at p to the end: 1 (wakee set), 0 no, -1 leave it to Python. */
static int wk_wakee_at(const char *p, const char *end, long long *wakee)
{
    int r;
    if (end - p < 4 || memcmp(p, "pid=", 4) != 0)
        return 0;
    p += 4;
    if ((r = wk_digits(&p, end, wakee, 18)) != 1)
        return r;
    if (end - p < 6 || memcmp(p, " prio=", 6) != 0)
        return 0;
    p += 6;
    if (p < end && *p == '-')
        p++;
    const char *q = p;
    while (q < end && *q >= '0' && *q <= '9')
        q++;
    if (q == p || q >= end || *q != ' ')
        return 0;
    p = q + 1;
    if (end - p >= 8 && memcmp(p, "success=", 8) == 0) {
        q = p + 8;
        const char *d = q;
        while (q < end && *q >= '0' && *q <= '9')
            q++;
        if (q > d && q < end && *q == ' ')
            p = q + 1;
    }
    if (end - p < 11 || memcmp(p, "target_cpu=", 11) != 0)
        return 0;
    p += 11;
    q = p;
    while (q < end && *q >= '0' && *q <= '9')
        q++;
    if (q == p)
        return 0;
    while (q < end && *q == ' ')
        q++;
    return q == end;
}

/* One line: 1 a wake-up (wakee, t), 2 unparsed, 0 not a header, -1 leave it to Python. */
static int wk_line(const char *p, const char *end, long long *wakee, long long *t)
{
    for (const char *c = p; c < end; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
            return -1;
    long long tid, sec, ns = 0;
    int r;
    while (p < end && *p == ' ')
        p++;
    if ((r = wk_digits(&p, end, &tid, 18)) != 1)
        return r;
    if (p >= end || *p != ' ')
        return 0;
    while (p < end && *p == ' ')
        p++;
    if ((r = wk_digits(&p, end, &sec, 9)) != 1)
        return r;
    if (p >= end || *p != '.')
        return 0;
    p++;
    for (int k = 0; k < 9; k++, p++) {
        if (p >= end || *p < '0' || *p > '9')
            return 0;
        ns = ns * 10 + (*p - '0');
    }
    if (p >= end || *p != ':')
        return 0;
    p++;
    if (p >= end || *p != ' ')
        return 0;
    while (p < end && *p == ' ')
        p++;
    static const char ev[] = "sched:sched_wakeup: ";
    if ((size_t)(end - p) < sizeof(ev) - 1 || memcmp(p, ev, sizeof(ev) - 1) != 0)
        return 0;
    p += sizeof(ev) - 1;
    for (; p < end; p++) {  /* _WAKEE.search: the first place it matches to the end */
        if (*p != 'p')
            continue;
        r = wk_wakee_at(p, end, wakee);
        if (r < 0)
            return -1;
        if (r == 1) {
            *t = sec * 1000000000LL + ns;
            return 1;
        }
    }
    return 2;
}

static PyObject *wake_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_ssize_t pos;
    if (nargs != 3 || !PyDict_Check(args[2]) || (pos = PyLong_AsSsize_t(args[1])) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "wake_run(block, pos, wakes)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const char *data = view.buf, *end = data + view.len;
    const char *line = data + (pos < view.len ? pos : view.len);
    Py_ssize_t next = line - data;
    long long records = 0, unparsed = 0;
    int err = 0;
    PyObject *last_key = NULL, *last_list = NULL;  /* the wakee of the line before */
    long long last_wakee = -1;
    for (;;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *stop = nl ? nl : end;
        long long wakee = 0, t = 0;
        int r = wk_line(line, stop, &wakee, &t);
        if (r < 0)
            break;
        if (r == 2) {
            unparsed++;
        } else if (r == 1) {
            records++;
            if (last_list == NULL || wakee != last_wakee) {
                Py_CLEAR(last_key);
                last_key = PyLong_FromLongLong(wakee);
                if (last_key == NULL) {
                    err = 1;
                    break;
                }
                last_list = PyDict_GetItemWithError(args[2], last_key);
                if (last_list == NULL) {
                    if (PyErr_Occurred() || (last_list = PyList_New(0)) == NULL) {
                        err = 1;
                        break;
                    }
                    int bad = PyDict_SetItem(args[2], last_key, last_list) < 0;
                    Py_DECREF(last_list);  /* the dict holds it */
                    if (bad) {
                        err = 1;
                        break;
                    }
                }
                if (!PyList_Check(last_list)) {
                    PyErr_SetString(PyExc_TypeError, "wake-ups must be lists");
                    err = 1;
                    break;
                }
                last_wakee = wakee;
            }
            PyObject *v = PyLong_FromLongLong(t);
            if (v == NULL || PyList_Append(last_list, v) < 0) {
                Py_XDECREF(v);
                err = 1;
                break;
            }
            Py_DECREF(v);
        }
        if (nl == NULL) {
            next = view.len + 1;
            break;
        }
        line = nl + 1;
        next = line - data;
    }
    Py_XDECREF(last_key);
    PyBuffer_Release(&view);
    if (err)
        return NULL;
    return Py_BuildValue("(nLL)", next, records, unparsed);
}

/* span_rows(thread, tid, start, dur, kind, sample, period, resolve, lock_kinds, ref_of,
 *           runnable, unsampled):
 * ``wallflame.timebuild.add_spans``'s loop over the interval log.  Each row goes to the
 * columns of ``thread(tid)`` (its ``p_start``, ``p_dur``, ``p_period``, ``p_kind``,
 * ``p_stack``, ``p_locks`` lists), in the log's order.  ``resolve(si, runnable) -> (kind,
 * stack id)`` is called the first time a row of sample si is met (runnable: as a runnable
 * row), so that stacks are interned in the order the Python loop interns them;
 * ``lock_kinds``: bytes, 1 at each kind that is a lock wait (empty: no lock evidence);
 * ``ref_of(tid, si)`` the lock set of a blocked row of such a kind; ``runnable`` and
 * ``unsampled``: the kinds of a runnable and a blocked row without a sample (stack 0). */
static PyObject *span_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    long long kind_runnable, kind_unsampled;
    if (nargs != 12 || !PyBytes_Check(args[8])) {
        PyErr_SetString(PyExc_TypeError, "span_rows(thread, tid, start, dur, kind, sample, "
                        "period, resolve, lock_kinds, ref_of, runnable, unsampled)");
        return NULL;
    }
    kind_runnable = PyLong_AsLongLong(args[10]);
    kind_unsampled = PyLong_AsLongLong(args[11]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *thread = args[0], *resolve = args[7], *ref_of = args[9];
    const unsigned char *lock_kinds = (const unsigned char *)PyBytes_AS_STRING(args[8]);
    Py_ssize_t nlk = PyBytes_GET_SIZE(args[8]);
    Py_buffer b[6];
    int got = 0;
    for (; got < 6; got++)
        if (sk_buf(args[got + 1], &b[got], got == 3 ? 1 : 8, 0) < 0)
            break;
    PyObject *out = NULL, *lines = NULL;
    int64_t *res = NULL;     /* per sample: blocked kind, sid, runnable kind, sid (-1: unset) */
    Py_ssize_t nres = 0;
    int32_t *ix = NULL;      /* tid -> line */
    int64_t *keys = NULL;
    Py_ssize_t icap = 0, nlines = 0;
    static const char *cols[6] = {"p_start", "p_dur", "p_period", "p_kind", "p_stack", "p_locks"};
    if (got < 6)
        goto done;
    const int64_t *tid = b[0].buf, *start = b[1].buf, *dur = b[2].buf, *sample = b[4].buf,
                  *period = b[5].buf;
    const signed char *kind = b[3].buf;
    Py_ssize_t n = b[0].len / 8;
    if (b[1].len / 8 != n || b[2].len / 8 != n || b[3].len != n || b[4].len / 8 != n ||
            b[5].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "columns of different lengths");
        goto done;
    }
    lines = PyList_New(0);  /* per thread: its six lists */
    if (lines == NULL)
        goto done;
    Py_ssize_t last = -1;
    int64_t last_tid = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        /* the thread's lists */
        Py_ssize_t li;
        if (last >= 0 && last_tid == tid[i]) {
            li = last;
        } else {
            li = -1;
            if (icap) {
                uint64_t h = sw_hash(tid[i]) & (uint64_t)(icap - 1);
                while (ix[h]) {
                    if (keys[ix[h] - 1] == tid[i]) {
                        li = ix[h] - 1;
                        break;
                    }
                    h = (h + 1) & (uint64_t)(icap - 1);
                }
            }
            if (li < 0) {
                PyObject *th = PyObject_CallFunction(thread, "L", (long long)tid[i]);
                if (th == NULL)
                    goto done;
                PyObject *six = PyTuple_New(6);
                for (int c = 0; six != NULL && c < 6; c++) {
                    PyObject *col = PyObject_GetAttrString(th, cols[c]);
                    if (col == NULL || !PyList_Check(col)) {
                        if (col != NULL)
                            PyErr_SetString(PyExc_TypeError, "a thread's columns are lists");
                        Py_XDECREF(col);
                        Py_CLEAR(six);
                        break;
                    }
                    PyTuple_SET_ITEM(six, c, col);
                }
                Py_DECREF(th);
                if (six == NULL || PyList_Append(lines, six) < 0) {
                    Py_XDECREF(six);
                    goto done;
                }
                Py_DECREF(six);
                li = nlines++;
                if (nlines * 2 > icap) {
                    Py_ssize_t cap = icap ? icap * 2 : 256;
                    int32_t *nix = PyMem_Calloc((size_t)cap, sizeof(int32_t));
                    int64_t *nk = PyMem_Realloc(keys, (size_t)cap * sizeof(int64_t));
                    if (nix == NULL || nk == NULL) {
                        PyMem_Free(nix);
                        if (nk != NULL)
                            keys = nk;
                        PyErr_NoMemory();
                        goto done;
                    }
                    keys = nk;
                    PyMem_Free(ix);
                    ix = nix;
                    icap = cap;
                    for (Py_ssize_t r = 0; r < li; r++) {
                        uint64_t h = sw_hash(keys[r]) & (uint64_t)(icap - 1);
                        while (ix[h])
                            h = (h + 1) & (uint64_t)(icap - 1);
                        ix[h] = (int32_t)(r + 1);
                    }
                }
                keys[li] = tid[i];
                uint64_t h = sw_hash(tid[i]) & (uint64_t)(icap - 1);
                while (ix[h])
                    h = (h + 1) & (uint64_t)(icap - 1);
                ix[h] = (int32_t)(li + 1);
            }
            last = li;
            last_tid = tid[i];
        }
        /* the row's kind and stack */
        int64_t si = sample[i], k, sid, ref = 0;
        int runnable = kind[i] == 1;
        if (si >= 0) {
            if (si >= nres) {
                Py_ssize_t m = nres ? nres : 64;
                while (m <= si)
                    m *= 2;
                int64_t *r = PyMem_Realloc(res, (size_t)m * 4 * sizeof(int64_t));
                if (r == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                for (Py_ssize_t q = 4 * nres; q < 4 * m; q++)
                    r[q] = -1;
                res = r;
                nres = m;
            }
            int64_t *slot = res + 4 * si + (runnable ? 2 : 0);
            if (slot[0] < 0) {
                PyObject *got_ = PyObject_CallFunction(resolve, "LO", (long long)si,
                                                       runnable ? Py_True : Py_False);
                long long gk, gs;
                if (got_ == NULL || !PyArg_ParseTuple(got_, "LL", &gk, &gs)) {
                    Py_XDECREF(got_);
                    goto done;
                }
                Py_DECREF(got_);
                if (gk < 0) {
                    PyErr_SetString(PyExc_ValueError, "a negative kind");
                    goto done;
                }
                slot[0] = gk;
                slot[1] = gs;
            }
            k = slot[0];
            sid = slot[1];
            if (!runnable && k < nlk && lock_kinds[k]) {
                PyObject *r = PyObject_CallFunction(ref_of, "LL", (long long)tid[i],
                                                    (long long)si);
                if (r == NULL)
                    goto done;
                ref = PyLong_AsLongLong(r);
                Py_DECREF(r);
                if (ref == -1 && PyErr_Occurred())
                    goto done;
            }
        } else {
            k = runnable ? kind_runnable : kind_unsampled;
            sid = 0;
        }
        int64_t vals[6] = {start[i], dur[i], period[i], k, sid, ref};
        PyObject *six = PyList_GET_ITEM(lines, li);
        for (int c = 0; c < 6; c++) {
            PyObject *v = PyLong_FromLongLong(vals[c]);
            if (v == NULL || PyList_Append(PyTuple_GET_ITEM(six, c), v) < 0) {
                Py_XDECREF(v);
                goto done;
            }
            Py_DECREF(v);
        }
    }
    Py_INCREF(Py_None);
    out = Py_None;
done:
    Py_XDECREF(lines);
    PyMem_Free(res);
    PyMem_Free(ix);
    PyMem_Free(keys);
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&b[k]);
    return out;
}

/* ints_json(list) -> str: json.dumps(list, separators=(",", ":")) for a list of ints (exact
 * ``int`` within 64 bits; anything else raises TypeError or OverflowError). */
static PyObject *ints_json(PyObject *module, PyObject *list)
{
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "ints_json() takes a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(list);
    size_t cap = 2 + (size_t)n * 21; /* "-9223372036854775808," is 21 characters */
    char *buf = PyMem_Malloc(cap), *p = buf;
    if (buf == NULL)
        return PyErr_NoMemory();
    *p++ = '[';
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(list, i);
        if (!PyLong_CheckExact(v)) {
            PyMem_Free(buf);
            PyErr_SetString(PyExc_TypeError, "ints_json(): not an int");
            return NULL;
        }
        long long x;
        if (!small_int(v, &x)) {
            int overflow;
            x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow) {
                PyMem_Free(buf);
                PyErr_SetString(PyExc_OverflowError, "ints_json(): beyond 64 bits");
                return NULL;
            }
        }
        if (i)
            *p++ = ',';
        char digits[24], *d = digits + sizeof digits;
        unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
        while (u >= 100) { /* two digits at a time */
            unsigned r = (unsigned)(u % 100);
            u /= 100;
            *--d = PAIRS[2 * r + 1];
            *--d = PAIRS[2 * r];
        }
        if (u >= 10) {
            *--d = PAIRS[2 * u + 1];
            *--d = PAIRS[2 * u];
        }
        else
            *--d = (char)('0' + u);
        if (x < 0)
            *--d = '-';
        size_t len = (size_t)(digits + sizeof digits - d);
        memcpy(p, d, len);
        p += len;
    }
    *p++ = ']';
    PyObject *out = PyUnicode_New(p - buf, 127);
    if (out != NULL)
        memcpy(PyUnicode_DATA(out), buf, (size_t)(p - buf));
    PyMem_Free(buf);
    return out;
}

/* ---- PerfFolder: perf script records in the common shape ----------------------------- */

/* A table of byte strings (copied) to an object and an integer. */
typedef struct {
    uint64_t hash;
    Py_ssize_t len;
    char *key;
    PyObject *obj; /* NULL: an empty slot */
    long long aux;
} BSlot;

typedef struct {
    BSlot *slots;
    Py_ssize_t cap, used; /* cap: a power of two, or 0 */
} BTable;

static void btable_clear(BTable *t)
{
    for (Py_ssize_t i = 0; i < t->cap; i++) {
        Py_XDECREF(t->slots[i].obj);
        PyMem_Free(t->slots[i].key);
    }
    PyMem_Free(t->slots);
    t->slots = NULL;
    t->cap = t->used = 0;
}

static BSlot *btable_find(BTable *t, const char *p, Py_ssize_t n, uint64_t h)
{
    if (t->cap == 0)
        return NULL;
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(t->cap - 1));
    for (;;) {
        BSlot *s = &t->slots[j];
        if (s->obj == NULL)
            return NULL;
        if (s->hash == h && s->len == n && memcmp(s->key, p, (size_t)n) == 0)
            return s;
        j = (j + 1) & (t->cap - 1);
    }
}

static int btable_put(BTable *t, const char *p, Py_ssize_t n, PyObject *obj, long long aux)
{
    if (2 * (t->used + 1) > t->cap) {
        Py_ssize_t cap = t->cap ? t->cap * 2 : 256;
        BSlot *slots = slots_rehash(t->slots, t->cap, cap, sizeof(BSlot),
                                    offsetof(BSlot, hash), offsetof(BSlot, obj));
        if (slots == NULL)
            return -1;
        PyMem_Free(t->slots);
        t->slots = slots;
        t->cap = cap;
    }
    uint64_t h = hash_bytes(p, n);
    BSlot *found = btable_find(t, p, n, h);
    if (found != NULL) {
        Py_INCREF(obj);
        Py_SETREF(found->obj, obj);
        found->aux = aux;
        return 0;
    }
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(t->cap - 1));
    while (t->slots[j].obj != NULL)
        j = (j + 1) & (t->cap - 1);
    char *key = PyMem_Malloc((size_t)n + 1);
    if (key == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(key, p, (size_t)n);
    BSlot *s = &t->slots[j];
    s->hash = h;
    s->len = n;
    s->key = key;
    Py_INCREF(obj);
    s->obj = obj;
    s->aux = aux;
    t->used++;
    return 0;
}

/* Stacks already seen, by the addresses of their names: a tuple (owned, so the names it
 * holds stay alive and their addresses are never reused) and its stack id. */
typedef struct {
    uint64_t hash;
    PyObject *tuple; /* NULL: an empty slot */
    PyObject *fid;
} SSlot;

typedef struct {
    const char *p;
    Py_ssize_t len;
    PyObject *name; /* borrowed from the names table; NULL: a frame without a name */
} PfLine;

typedef struct {
    PyObject *head; /* borrowed from the headers table */
    long long k;
    unsigned __int128 periods;
    unsigned long long n;
    uint64_t hash;
} PfCount;

typedef struct {
    PyObject_HEAD
    BTable names;   /* frame key -> name (str), or None: not a frame line */
    BTable headers; /* header with its time and period digits as 0 -> head (bytes) and event
                     * key, or None: not in the common shape */
    SSlot *stacks;
    Py_ssize_t scap, sused;
    PyObject **frames;
    Py_ssize_t fcap;
    char *buf;
    Py_ssize_t bcap;
    /* the lines of the record being folded and of the one before (within one call) */
    PfLine *cur, *prev;
    Py_ssize_t ccap, pcap, prev_n;
    /* weights counted since the call began, in the order first seen (flushed into the
     * Python dict before the call returns) */
    PfCount *counts;
    Py_ssize_t ncounts, counts_cap;
    Py_ssize_t *index; /* into counts, plus one; 0: empty */
    Py_ssize_t index_cap;
} PerfFolder;

#define PF_MAX_NAMES (1 << 18)
#define PF_LINE_BITS 20
#define PF_FID_BITS 24
#define PF_COUNT_BITS 40

static int pf_reserve(char **buf, Py_ssize_t *cap, Py_ssize_t n, size_t item)
{
    if (n <= *cap)
        return 0;
    Py_ssize_t c = *cap ? *cap : 64;
    while (c < n)
        c *= 2;
    void *b = PyMem_Realloc(*buf, (size_t)c * item);
    if (b == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *buf = b;
    *cap = c;
    return 0;
}

/* The stack id of the names frames[0:n] (root first): from the table, else from ``fids``
 * (``tuple -> id``), else a new one appended to ``stacks``.  A new reference, or NULL. */
static PyObject *pf_stack(PerfFolder *self, Py_ssize_t n, PyObject *fids, PyObject *stacks)
{
    uint64_t h = hash_bytes((const char *)self->frames, n * (Py_ssize_t)sizeof(PyObject *));
    if (self->scap) {
        Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(self->scap - 1));
        for (;;) {
            SSlot *s = &self->stacks[j];
            if (s->tuple == NULL)
                break;
            if (s->hash == h && PyTuple_GET_SIZE(s->tuple) == n &&
                memcmp(&PyTuple_GET_ITEM(s->tuple, 0), self->frames,
                       (size_t)n * sizeof(PyObject *)) == 0) {
                Py_INCREF(s->fid);
                return s->fid;
            }
            j = (j + 1) & (self->scap - 1);
        }
    }
    PyObject *t = PyTuple_New(n);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(self->frames[i]);
        PyTuple_SET_ITEM(t, i, self->frames[i]);
    }
    PyObject *fid = PyDict_GetItemWithError(fids, t);
    if (fid != NULL) {
        Py_INCREF(fid);
    } else {
        if (PyErr_Occurred() || (fid = PyLong_FromSsize_t(PyList_GET_SIZE(stacks))) == NULL ||
            PyDict_SetItem(fids, t, fid) < 0 || PyList_Append(stacks, t) < 0) {
            Py_XDECREF(fid);
            Py_DECREF(t);
            return NULL;
        }
    }
    if (2 * (self->sused + 1) > self->scap) {
        Py_ssize_t cap = self->scap ? self->scap * 2 : 1024;
        SSlot *slots = slots_rehash(self->stacks, self->scap, cap, sizeof(SSlot),
                                    offsetof(SSlot, hash), offsetof(SSlot, tuple));
        if (slots == NULL) {
            Py_DECREF(t);
            Py_DECREF(fid);
            return NULL;
        }
        PyMem_Free(self->stacks);
        self->stacks = slots;
        self->scap = cap;
    }
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(self->scap - 1));
    while (self->stacks[j].tuple != NULL)
        j = (j + 1) & (self->scap - 1);
    self->stacks[j].hash = h;
    self->stacks[j].tuple = t; /* the table's references */
    Py_INCREF(fid);
    self->stacks[j].fid = fid;
    self->sused++;
    return fid;
}

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

enum { PF_DONE, PF_SLOW, PF_HEADER, PF_NAME };

/* The first "\n\n" in [p, end), line by line (memchr is much faster than memmem for a
 * two-byte needle); NULL when there is none. */
static const char *blank_line(const char *p, const char *end)
{
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (nl == NULL || nl + 1 >= end)
            return NULL;
        if (nl[1] == '\n')
            return nl;
        p = nl + 1;
    }
    return NULL;
}

/* The key a frame line's name is cached by: what follows its address, with the symbol's
 * offset (``+0x1a`` before `` (dso)``) cut out where the Python code would drop it, so that
 * lines that differ only in address and offset share one entry.  ``E`` or ``R`` first keeps
 * keys with and without a cut apart.  Returns the key's length in self->buf, 0 when the
 * line is not ``\t[ ]*HEX REST``, -1 on an error. */
static Py_ssize_t pf_frame_key(PerfFolder *self, const char *l, Py_ssize_t n)
{
    Py_ssize_t i = 1;
    while (i < n && l[i] == ' ')
        i++;
    Py_ssize_t a = i;
    while (i < n && is_hex(l[i]))
        i++;
    if (i == a || i >= n || l[i] != ' ')
        return 0;
    Py_ssize_t r = i + 1, cut = -1, j = -1;
    unsigned char c0 = r < n ? (unsigned char)l[r] : 0;
    if (n - r >= 6 && l[n - 1] == ')' && c0 > ' ' && c0 < 0x7f) {
        for (Py_ssize_t x = n - 3; x >= r; x--) {
            if (l[x] == ' ' && l[x + 1] == '(') {
                j = x;
                break;
            }
        }
        if (j > r) {
            Py_ssize_t y = j;
            while (y > r && is_hex(l[y - 1]))
                y--;
            if (y < j && y - 3 >= r && l[y - 1] == 'x' && l[y - 2] == '0' && l[y - 3] == '+')
                cut = y - 3;
        }
    }
    Py_ssize_t len = cut >= 0 ? 1 + (cut - r) + (n - j) : 1 + (n - r);
    if (pf_reserve(&self->buf, &self->bcap, len, 1) < 0)
        return -1;
    if (cut >= 0) {
        self->buf[0] = 'E';
        memcpy(self->buf + 1, l + r, (size_t)(cut - r));
        memcpy(self->buf + 1 + (cut - r), l + j, (size_t)(n - j));
    } else {
        self->buf[0] = 'R';
        memcpy(self->buf + 1, l + r, (size_t)(n - r));
    }
    return len;
}

/* acc[head, k] += period << COUNT_BITS | 1, counted here until pf_flush. */
static int pf_count(PerfFolder *self, PyObject *head, long long k, long long period)
{
    uint64_t h = ((uint64_t)(uintptr_t)head * 0x9E3779B97F4A7C15ULL) ^
                 ((uint64_t)k * 0xC2B2AE3D27D4EB4FULL);
    h ^= h >> 29;
    if (2 * (self->ncounts + 1) > self->index_cap) {
        Py_ssize_t cap = self->index_cap ? self->index_cap * 2 : 1024;
        Py_ssize_t *index = PyMem_Calloc((size_t)cap, sizeof(Py_ssize_t));
        if (index == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t e = 0; e < self->ncounts; e++) {
            Py_ssize_t j = (Py_ssize_t)(self->counts[e].hash & (uint64_t)(cap - 1));
            while (index[j])
                j = (j + 1) & (cap - 1);
            index[j] = e + 1;
        }
        PyMem_Free(self->index);
        self->index = index;
        self->index_cap = cap;
    }
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(self->index_cap - 1));
    while (self->index[j]) {
        PfCount *c = &self->counts[self->index[j] - 1];
        if (c->hash == h && c->head == head && c->k == k) {
            c->periods += (unsigned long long)period;
            c->n++;
            return 0;
        }
        j = (j + 1) & (self->index_cap - 1);
    }
    if (pf_reserve((char **)&self->counts, &self->counts_cap, self->ncounts + 1,
                   sizeof(PfCount)) < 0)
        return -1;
    PfCount *c = &self->counts[self->ncounts++];
    c->head = head;
    c->k = k;
    c->periods = (unsigned long long)period;
    c->n = 1;
    c->hash = h;
    self->index[j] = self->ncounts;
    return 0;
}

/* The counts into ``acc`` (``(sum of periods) << COUNT_BITS + samples``: what adding each
 * sample's ``period << COUNT_BITS | 1`` gives), in the order first seen. */
static int pf_flush(PerfFolder *self, PyObject *acc)
{
    int rc = 0;
    for (Py_ssize_t e = 0; e < self->ncounts && rc == 0; e++) {
        PfCount *c = &self->counts[e];
        PyObject *k = PyLong_FromLongLong(c->k);
        PyObject *key = k ? PyTuple_Pack(2, c->head, k) : NULL;
        Py_XDECREF(k);
        PyObject *add = NULL;
        if (key != NULL) {
            if (c->periods < (1ULL << (64 - PF_COUNT_BITS)) && c->n < (1ULL << PF_COUNT_BITS)) {
                add = PyLong_FromUnsignedLongLong((unsigned long long)c->periods << PF_COUNT_BITS |
                                                  c->n);
            } else {
                unsigned char bytes[16];
                for (int b = 0; b < 16; b++)
                    bytes[b] = (unsigned char)(c->periods >> (8 * b));
                PyObject *ps = _PyLong_FromByteArray(bytes, 16, 1, 0);
                PyObject *sh = PyLong_FromLong(PF_COUNT_BITS);
                PyObject *nn = PyLong_FromUnsignedLongLong(c->n);
                PyObject *big = ps && sh && nn ? PyNumber_Lshift(ps, sh) : NULL;
                add = big ? PyNumber_Add(big, nn) : NULL;
                Py_XDECREF(ps);
                Py_XDECREF(sh);
                Py_XDECREF(nn);
                Py_XDECREF(big);
            }
        }
        PyObject *old = add ? PyDict_GetItemWithError(acc, key) : NULL;
        PyObject *sum = NULL;
        if (add != NULL && !PyErr_Occurred())
            sum = old ? PyNumber_Add(old, add) : Py_NewRef(add);
        rc = sum ? PyDict_SetItem(acc, key, sum) : -1;
        Py_XDECREF(sum);
        Py_XDECREF(add);
        Py_XDECREF(key);
    }
    self->ncounts = 0;
    if (self->index_cap)
        memset(self->index, 0, (size_t)self->index_cap * sizeof(Py_ssize_t));
    return rc;
}

static PyObject *pf_flush_fail(PerfFolder *self)
{
    self->ncounts = 0;
    if (self->index_cap)
        memset(self->index, 0, (size_t)self->index_cap * sizeof(Py_ssize_t));
    return NULL;
}

static PyObject *pf_result(int status, Py_ssize_t i, long long ln, Py_ssize_t first,
                           Py_ssize_t last, PyObject *extra)
{
    if (extra == NULL)
        return NULL;
    PyObject *out = Py_BuildValue("(inLnnO)", status, i, ln, first, last, extra);
    Py_DECREF(extra);
    return out;
}

/* fold(buf, pos, ln, acc, fids, stacks, max_stacks) -> (status, pos, ln, first, last, extra)
 *
 * Folds the records of buf[pos:] (each ended by a blank line: split at each leftmost
 * "\n\n", as bytes.split does) into ``acc`` exactly as the Python fast path does
 * (``acc[head, event | stack << 20 | lines] += period << 40 | 1``), until a record needs
 * Python: PF_SLOW (the record is not in the common shape: Python folds it), PF_HEADER
 * (extra: the unknown header key: Python judges it and calls add_header), PF_NAME (extra:
 * a list of (key, line) of the record's frame lines not named yet: Python names them and
 * calls add_name); pos is then where that record
 * starts.  PF_DONE: pos is where the text after the last blank line starts.  ``ln`` is the
 * line number at pos; first and last: where the first and last records folded here start
 * (-1: none). */
#define PF_RETURN(status, extra) do { \
        PyObject *x_ = (extra); \
        if (x_ == NULL || pf_flush(self, acc) < 0) { \
            Py_XDECREF(x_); \
            return pf_flush_fail(self); \
        } \
        return pf_result((status), i, ln, first, last, x_); \
    } while (0)

static PyObject *PerfFolder_fold(PerfFolder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyBytes_Check(args[0]) || !PyDict_Check(args[3]) ||
        !PyDict_Check(args[4]) || !PyList_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "fold(buf, pos, ln, acc, fids, stacks, max_stacks)");
        return NULL;
    }
    PyObject *acc = args[3], *fids = args[4], *stacks = args[5];
    const char *data = PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    long long ln = PyLong_AsLongLong(args[2]);
    Py_ssize_t max_stacks = PyLong_AsSsize_t(args[6]);
    if (PyErr_Occurred())
        return NULL;
    if (i < 0 || i > size) {
        PyErr_SetString(PyExc_ValueError, "pos out of range");
        return NULL;
    }
    Py_ssize_t first = -1, last = -1;
    self->prev_n = 0;
    for (;;) {
        const char *end = blank_line(data + i, data + size);
        if (end == NULL)
            break;
        const char *p = data + i;
        Py_ssize_t n = end - p;
        if (n == 0) {
            ln += 2;
            i += 2;
            continue;
        }
        const char *nl = memchr(p, '\n', (size_t)n);
        Py_ssize_t eol = nl ? nl - p : n;
        /* the header: HEAD ' ' TIME ': ' ' '* PERIOD ... */
        if ((unsigned char)p[0] <= ' ' || PyList_GET_SIZE(stacks) >= max_stacks)
            PF_RETURN(PF_SLOW, Py_NewRef(Py_None));
        Py_ssize_t colon = -1;
        for (Py_ssize_t x = 0; x + 1 < eol; x++) {
            if (p[x] == ':' && p[x + 1] == ' ') {
                colon = x;
                break;
            }
        }
        Py_ssize_t sp = -1;
        for (Py_ssize_t x = colon - 1; x >= 0; x--) {
            if (p[x] == ' ') {
                sp = x;
                break;
            }
        }
        if (colon < 0 || sp <= 0)
            PF_RETURN(PF_SLOW, Py_NewRef(Py_None));
        Py_ssize_t x = sp + 1, dots = 0, digits = 0;
        for (; x < colon; x++) {
            if (p[x] == '.' && digits && !dots)
                dots = x;
            else if (p[x] >= '0' && p[x] <= '9')
                digits++;
            else
                break;
        }
        Py_ssize_t q = colon + 2;
        while (q < eol && p[q] == ' ')
            q++;
        Py_ssize_t ps = q;
        long long period = 0;
        while (q < eol && p[q] >= '0' && p[q] <= '9' && q - ps < 18)
            period = period * 10 + (p[q++] - '0');
        if (x != colon || !dots || dots == colon - 1 || q == ps || q >= eol ||
            (p[q] >= '0' && p[q] <= '9'))
            PF_RETURN(PF_SLOW, Py_NewRef(Py_None));
        if (pf_reserve(&self->buf, &self->bcap, eol, 1) < 0)
            return pf_flush_fail(self);
        memcpy(self->buf, p, (size_t)eol);
        for (x = sp + 1; x < colon; x++)
            if (self->buf[x] != '.')
                self->buf[x] = '0';
        memset(self->buf + ps, '0', (size_t)(q - ps));
        BSlot *hs = btable_find(&self->headers, self->buf, eol, hash_bytes(self->buf, eol));
        if (hs == NULL)
            PF_RETURN(PF_HEADER, PyBytes_FromStringAndSize(self->buf, eol));
        if (hs->obj == Py_None)
            PF_RETURN(PF_SLOW, Py_NewRef(Py_None));
        PyObject *head = hs->obj;
        long long event = hs->aux;
        /* the frame lines */
        Py_ssize_t nl_count = 0, at = eol + 1;
        while (nl != NULL) {
            const char *l = p + at;
            nl = memchr(l, '\n', (size_t)(n - at));
            Py_ssize_t len = nl ? nl - l : n - at;
            at += len + 1;
            if (pf_reserve((char **)&self->cur, &self->ccap, nl_count + 1, sizeof(PfLine)) < 0)
                return pf_flush_fail(self);
            self->cur[nl_count].p = l;
            self->cur[nl_count].len = len;
            nl_count++;
        }
        Py_ssize_t lines = nl_count;
        if (lines + 2 >= (1 << PF_LINE_BITS))
            PF_RETURN(PF_SLOW, Py_NewRef(Py_None));
        /* root first; the lines the previous record ends with are named as it named them */
        Py_ssize_t nf = 0, same = 0;
        int slow = 0;
        PyObject *missing = NULL; /* (key, line) of the frame lines not named yet */
        if (pf_reserve((char **)&self->frames, &self->fcap, lines + 1, sizeof(PyObject *)) < 0)
            return pf_flush_fail(self);
        for (Py_ssize_t b = lines - 1; b >= 0; b--) {
            PfLine *ln_ = &self->cur[b];
            const char *l = ln_->p;
            Py_ssize_t len = ln_->len;
            Py_ssize_t pb = self->prev_n - (lines - b);
            if (same == lines - 1 - b && pb >= 0 && self->prev[pb].len == len &&
                memcmp(self->prev[pb].p, l, (size_t)len) == 0) {
                same++;
                ln_->name = self->prev[pb].name;
                if (ln_->name != NULL)
                    self->frames[nf++] = ln_->name;
                continue;
            }
            if (len == 0 || l[0] != '\t') {
                slow = 1;
                break;
            }
            Py_ssize_t klen = pf_frame_key(self, l, len);
            if (klen < 0) {
                Py_XDECREF(missing);
                return pf_flush_fail(self);
            }
            if (klen == 0) {
                slow = 1;
                break;
            }
            BSlot *s = btable_find(&self->names, self->buf, klen, hash_bytes(self->buf, klen));
            if (s == NULL) {
                PyObject *kl = Py_BuildValue("(y#y#)", self->buf, klen, l, len);
                if (missing == NULL && kl != NULL)
                    missing = PyList_New(0);
                if (kl == NULL || missing == NULL || PyList_Append(missing, kl) < 0) {
                    Py_XDECREF(kl);
                    Py_XDECREF(missing);
                    return pf_flush_fail(self);
                }
                Py_DECREF(kl);
                continue;
            }
            if (s->obj == Py_None) {
                slow = 1;
                break;
            }
            ln_->name = PyUnicode_GET_LENGTH(s->obj) == 0 ? NULL : s->obj;
            if (ln_->name != NULL)
                self->frames[nf++] = ln_->name;
        }
        if (missing != NULL) {
            if (!slow)
                PF_RETURN(PF_NAME, missing);
            Py_DECREF(missing);
        }
        if (slow)
            PF_RETURN(PF_SLOW, Py_NewRef(Py_None));
        PyObject *fid = pf_stack(self, nf, fids, stacks);
        if (fid == NULL)
            return pf_flush_fail(self);
        long long f = PyLong_AsLongLong(fid);
        Py_DECREF(fid);
        if (f == -1 && PyErr_Occurred())
            return pf_flush_fail(self);
        if (f >> PF_FID_BITS)
            PF_RETURN(PF_SLOW, Py_NewRef(Py_None));
        if (pf_count(self, head, event | f << PF_LINE_BITS | (lines + 2), period) < 0)
            return pf_flush_fail(self);
        PfLine *swap = self->prev;
        Py_ssize_t swap_cap = self->pcap;
        self->prev = self->cur;
        self->pcap = self->ccap;
        self->prev_n = lines;
        self->cur = swap;
        self->ccap = swap_cap;
        if (first < 0)
            first = i;
        last = i;
        ln += lines + 2;
        i += n + 2;
    }
    PF_RETURN(PF_DONE, Py_NewRef(Py_None));
}

/* add_header(key, head, event): head (bytes) and event key (int) for headers with this key,
 * or head None: not in the common shape. */
static PyObject *PerfFolder_add_header(PerfFolder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_Check(args[0]) || !(PyBytes_Check(args[1]) || args[1] == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "add_header(key, head, event)");
        return NULL;
    }
    int overflow = 0;
    long long event = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (event == -1 && PyErr_Occurred())
        return NULL;
    PyObject *head = overflow || event < 0 ? Py_None : args[1];
    if (btable_put(&self->headers, PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), head,
                   event) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* add_name(key, name): the name (str) of frame lines with this key, or None: not a frame. */
static PyObject *PerfFolder_add_name(PerfFolder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_Check(args[0]) ||
        !(PyUnicode_CheckExact(args[1]) || args[1] == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "add_name(key, name)");
        return NULL;
    }
    if (self->names.used >= PF_MAX_NAMES)
        btable_clear(&self->names);
    if (btable_put(&self->names, PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), args[1],
                   0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static void PerfFolder_dealloc(PerfFolder *self)
{
    btable_clear(&self->names);
    btable_clear(&self->headers);
    for (Py_ssize_t i = 0; i < self->scap; i++) {
        Py_XDECREF(self->stacks[i].tuple);
        Py_XDECREF(self->stacks[i].fid);
    }
    PyMem_Free(self->stacks);
    PyMem_Free(self->frames);
    PyMem_Free(self->cur);
    PyMem_Free(self->prev);
    PyMem_Free(self->counts);
    PyMem_Free(self->index);
    PyMem_Free(self->buf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef PerfFolder_methods[] = {
    {"fold", (PyCFunction)(void (*)(void))PerfFolder_fold, METH_FASTCALL,
     "fold(buf, pos, ln, acc, fids, stacks, max_stacks) -> (status, pos, ln, first, last, "
     "extra)"},
    {"add_header", (PyCFunction)(void (*)(void))PerfFolder_add_header, METH_FASTCALL,
     "add_header(key, head, event): what headers with this key are."},
    {"add_name", (PyCFunction)(void (*)(void))PerfFolder_add_name, METH_FASTCALL,
     "add_name(key, name): the name of frame lines with this key."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PerfFolderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wallflame._speedups.PerfFolder",
    .tp_basicsize = sizeof(PerfFolder),
    .tp_dealloc = (destructor)PerfFolder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Folds perf script records in the common shape (see fold/perf/reader.py).",
    .tp_methods = PerfFolder_methods,
    .tp_new = PyType_GenericNew,
};

/* The libdw frame callback of one thread's stop (wallflame.collect.libdw): each frame's pc
 * and kind go into a buffer, with the time of the first frame and of the last, without the
 * interpreter.  A callback written in Python takes the interpreter's lock for every frame,
 * while the thread is stopped: when another thread of the collect holds that lock (the
 * folding of perf's chunks, at SCHED_IDLE, preempted by the target), the target's thread
 * stays stopped until it is released. */
typedef int (*wf_frame_pc_fn)(void *frame, uint64_t *pc, unsigned char *isactivation);

struct wf_frames {
    wf_frame_pc_fn frame_pc; /* libdw's dwfl_frame_pc */
    int64_t t_first, t_last; /* CLOCK_MONOTONIC ns */
    int32_t n, max;
    uint64_t *pcs;
    unsigned char *act;
    /* Read once while the thread is stopped, at its first frame (the holder probe's evidence,
     * judged after the release: wallflame.collect.holders): mem_size bytes of the target's
     * memory at mem_addr through mem_fd (/proc/PID/mem), and the thread's
     * /proc/PID/task/TID/syscall through sys_fd.  A descriptor of -1 reads nothing; *_got is
     * what was read (-1: an error, errno in *_errno). */
    int32_t mem_fd, sys_fd;
    uint64_t mem_addr;
    int32_t mem_size, mem_got, sys_got, mem_errno, sys_errno, sys_size;
    unsigned char *mem_buf;
    unsigned char *sys_buf;
};

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int wf_frame_cb(void *frame, void *arg)
{
    struct wf_frames *s = arg;
    uint64_t pc = 0;
    unsigned char act = 0;
    if (s->n >= s->max || !s->frame_pc(frame, &pc, &act))
        return 1; /* DWARF_CB_ABORT */
    if (s->n == 0) {
        /* the thread is stopped (attached) from here until libdw lets it go */
        s->t_first = mono_ns();
        if (s->mem_fd >= 0 && s->mem_size > 0) {
            ssize_t got = pread(s->mem_fd, s->mem_buf, (size_t)s->mem_size, (off_t)s->mem_addr);
            s->mem_got = (int32_t)got;
            s->mem_errno = got < 0 ? errno : 0;
        }
        if (s->sys_fd >= 0 && s->sys_size > 0) {
            ssize_t got = pread(s->sys_fd, s->sys_buf, (size_t)s->sys_size, 0);
            s->sys_got = (int32_t)got;
            s->sys_errno = got < 0 ? errno : 0;
        }
    }
    int64_t now = mono_ns();
    s->pcs[s->n] = pc;
    s->act[s->n] = act ? 1 : 0;
    s->n++;
    s->t_last = now;
    return s->n < s->max ? 0 : 1; /* DWARF_CB_OK, or ABORT at the bound */
}

static PyObject *frame_callback(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromVoidPtr((void *)(uintptr_t)wf_frame_cb);
}

static PyMethodDef module_methods[] = {
    {"frame_callback", (PyCFunction)frame_callback, METH_NOARGS,
     "frame_callback() -> int: the address of the native libdw frame callback"},
    {"grow", (PyCFunction)(void (*)(void))grow, METH_FASTCALL,
     "grow(rows, names, name, parent, selfs, threads, ids, width, check, visible, "
     "thread_label) -> bool"},
    {"group_weights", (PyCFunction)group_weights, METH_O,
     "group_weights(stacks) -> dict: weight per (tid, thread, state, wait, lock)"},
    {"frame_weights", (PyCFunction)(void (*)(void))frame_weights, METH_FASTCALL,
     "frame_weights(stacks, depth) -> (shallow, unknown) weights"},
    {"frame_names", (PyCFunction)(void (*)(void))frame_names, METH_FASTCALL,
     "frame_names(stacks, skip) -> set of the frame names of the stacks not in state skip"},
    {"stacks_naming", (PyCFunction)(void (*)(void))stacks_naming, METH_FASTCALL,
     "stacks_naming(stacks, skip, names) -> list of (key, weight) of the stacks not in state "
     "skip holding a frame in names"},
    {"grow_stacks", (PyCFunction)(void (*)(void))grow_stacks, METH_FASTCALL,
     "grow_stacks(stacks, thread_names, on, class_index, other, wait_label, names, name, "
     "parent, selfs, threads, ids, width, visible, thread_label) -> bool"},
    {"tree_rows", (PyCFunction)(void (*)(void))tree_rows, METH_FASTCALL,
     "tree_rows(stacks, thread_names, on, class_index, other, wait_label) -> list of rows"},
    {"switch_lines", (PyCFunction)switch_lines, METH_O,
     "switch_lines(block) -> list: the block's lines, switch records read as (kind, pid, tid, "
     "t_ns, comm) tuples"},
    {"wake_split", (PyCFunction)(void (*)(void))wake_split, METH_FASTCALL,
     "wake_split(tid, start, dur, kind, sample, period, wakes) -> None or (woken, columns...)"},
    {"in_caps", (PyCFunction)(void (*)(void))in_caps, METH_FASTCALL,
     "in_caps(tids, ins, pairs, log_tid, log_start, log_dur) -> [(off, at, on, pair)]"},
    {"apply_lag", (PyCFunction)(void (*)(void))apply_lag, METH_FASTCALL,
     "apply_lag(lag, off, at, on, pair, dur, pairs) -> moved"},
    {"clip_log", (PyCFunction)(void (*)(void))clip_log, METH_FASTCALL,
     "clip_log(tid, start, dur, kind, sample, lo, hi, bin_ns[, long_ns]) -> (outside, totals, bins, "
     "sampled, strata)"},
    {"perf_switches", (PyCFunction)perf_switches, METH_O,
     "perf_switches(path) -> None or (records, comms): a scheduler chunk's switch records"},
    {"wake_run", (PyCFunction)(void (*)(void))wake_run, METH_FASTCALL,
     "wake_run(block, pos, wakes) -> (next, records, unparsed)"},
    {"span_rows", (PyCFunction)(void (*)(void))span_rows, METH_FASTCALL,
     "span_rows(thread, tid, start, dur, kind, sample, period, resolve, lock_kinds, ref_of, "
     "runnable, unsampled): the interval log into the timeline's threads"},
    {"ints_json", (PyCFunction)ints_json, METH_O,
     "ints_json(list) -> str: the JSON array of a list of 64-bit ints"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "wallflame._speedups",
    "Native versions of report generation's hot loops (optional).", -1, module_methods,
};

/* Whether hash_step and hash_end give the interpreter's tuple hash (checked on a key shaped
 * like those fold_plain makes); 1, 0, or -1 on an error. */
static int check_tuple_hash(void)
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

PyMODINIT_FUNC PyInit__speedups(void)
{
    tuple_hash_ok = check_tuple_hash();
    if (tuple_hash_ok < 0)
        return NULL;
    if (PyType_Ready(&InternerType) < 0)
        return NULL;
    if (PyType_Ready(&PerfFolderType) < 0)
        return NULL;
    if (PyType_Ready(&SwitchTrackerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "TUPLE_HASH", tuple_hash_ok) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&InternerType);
    if (PyModule_AddObject(m, "Interner", (PyObject *)&InternerType) < 0) {
        Py_DECREF(&InternerType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&PerfFolderType);
    if (PyModule_AddObject(m, "PerfFolder", (PyObject *)&PerfFolderType) < 0) {
        Py_DECREF(&PerfFolderType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&SwitchTrackerType);
    if (PyModule_AddObject(m, "SwitchTracker", (PyObject *)&SwitchTrackerType) < 0) {
        Py_DECREF(&SwitchTrackerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
