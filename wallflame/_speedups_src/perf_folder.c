#include "speedups.h"

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

PyTypeObject PerfFolderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wallflame._speedups.PerfFolder",
    .tp_basicsize = sizeof(PerfFolder),
    .tp_dealloc = (destructor)PerfFolder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Folds perf script records in the common shape (see fold/perf/reader.py).",
    .tp_methods = PerfFolder_methods,
    .tp_new = PyType_GenericNew,
};
