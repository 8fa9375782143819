#include "speedups.h"

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
PyObject *grow(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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
PyObject *grow_stacks(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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
PyObject *group_weights(PyObject *module, PyObject *stacks)
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
PyObject *frame_weights(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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
PyObject *frame_names(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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
PyObject *stacks_naming(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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
PyObject *tree_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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
