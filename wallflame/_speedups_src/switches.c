#include "speedups.h"

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

PyObject *switch_lines(PyObject *module, PyObject *arg)
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

PyObject *perf_switches(PyObject *module, PyObject *arg)
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

PyTypeObject SwitchTrackerType = {
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
int sk_buf(PyObject *o, Py_buffer *v, Py_ssize_t itemsize, int writable)
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
PyObject *wake_split(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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
PyObject *in_caps(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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
PyObject *apply_lag(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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
PyObject *clip_log(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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

/* wake_run(block, pos, wakes[, wakers[, last]]) -> (next, records, unparsed): the wake-up capture's
 * lines from pos (``SampledSched.feed_wakes``: ``WAKE_HEADER_RE``, then ``_WAKEE`` on its
 * fields), each wake-up's time appended to wakes[wakee] (a dict of lists), each waking's time
 * and waker (the line's tid: ``sched_waking`` fires in the waker's context) to
 * wakers[wakee] as a pair (ignored without wakers); stops at the first line it
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
    if (q < end) {  /* the tracepoint's address and symbol (``-F ...,ip,sym``) */
        const char *h = q;
        while (q < end && ((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f')))
            q++;
        if (q == h || q >= end || *q != ' ')
            return 0;
        while (q < end && *q == ' ')
            q++;
        if (q == end)
            return 0;
        while (q < end && *q != ' ')
            q++;
        while (q < end && *q == ' ')
            q++;
    }
    return q == end;
}

/* A frame line of a waking's kernel call chain (``\t<addr> <sym>``): 1 when the wake-up is
 * a timer's expiry (the waker becomes WAKER_TIMER), 2 when it runs in an interrupt or a
 * softirq (WAKER_IRQ), 0 for any other frame, -1 when the line is no frame.
 * ``WAKER_MARKS`` in ``sched_reader.py``. */
#define WAKER_TIMER (-1)
#define WAKER_IRQ (-2)
static int wk_frame(const char *p, const char *end)
{
    if (p >= end || *p != '\t')
        return -1;
    static const char *const timer[] = {"hrtimer_wakeup", "process_timeout"};
    static const char *const irq[] = {"asm_sysvec_", "asm_common_interrupt", "handle_softirqs",
                                      "__do_softirq"};
    size_t n = (size_t)(end - p);
    for (size_t k = 0; k < sizeof(timer) / sizeof(*timer); k++)
        if (memmem(p, n, timer[k], strlen(timer[k])))
            return 1;
    for (size_t k = 0; k < sizeof(irq) / sizeof(*irq); k++)
        if (memmem(p, n, irq[k], strlen(irq[k])))
            return 2;
    return 0;
}

/* One line: 1 a wake-up (wakee, t), 3 a waking (wakee, t, waker: the task the line's tid
 * names), 2 unparsed, 0 not a header, -1 leave it to Python. */
static int wk_line(const char *p, const char *end, long long *wakee, long long *t,
                   long long *waker)
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
    static const char ev[] = "sched:sched_wakeup: ", ev_waking[] = "sched:sched_waking: ";
    int found = 1;
    if ((size_t)(end - p) >= sizeof(ev) - 1 && memcmp(p, ev, sizeof(ev) - 1) == 0)
        p += sizeof(ev) - 1;
    else if ((size_t)(end - p) >= sizeof(ev_waking) - 1 &&
             memcmp(p, ev_waking, sizeof(ev_waking) - 1) == 0) {
        p += sizeof(ev_waking) - 1;
        found = 3;
    } else
        return 0;
    *waker = tid;
    for (; p < end; p++) {  /* _WAKEE.search: the first place it matches to the end */
        if (*p != 'p')
            continue;
        r = wk_wakee_at(p, end, wakee);
        if (r < 0)
            return -1;
        if (r == 1) {
            *t = sec * 1000000000LL + ns;
            return found;
        }
    }
    return 2;
}

/* wakers[wakee] += [t, waker] (a dict of flat lists). */
static int wk_waking(PyObject *wakers, long long wakee, long long t, long long waker)
{
    PyObject *key = PyLong_FromLongLong(wakee);
    if (key == NULL)
        return -1;
    PyObject *list = PyDict_GetItemWithError(wakers, key);
    if (list == NULL) {
        if (PyErr_Occurred() || (list = PyList_New(0)) == NULL ||
            PyDict_SetItem(wakers, key, list) < 0) {
            Py_XDECREF(list);
            Py_DECREF(key);
            return -1;
        }
        Py_DECREF(list);  /* the dict holds it */
    }
    Py_DECREF(key);
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "wakers must be lists");
        return -1;
    }
    PyObject *a = PyLong_FromLongLong(t), *b = PyLong_FromLongLong(waker);
    int bad = a == NULL || b == NULL || PyList_Append(list, a) < 0 || PyList_Append(list, b) < 0;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return bad ? -1 : 0;
}

static int wk_last(PyObject *last, long long wakee)
{
    PyObject *v = PyLong_FromLongLong(wakee);
    return v == NULL ? -1 : PyList_SetItem(last, 0, v);  /* steals v */
}

/* The last waking of last[0]: its waker becomes ``code`` (a timer wins over an interrupt). */
static int wk_mark(PyObject *wakers, PyObject *last, int code)
{
    PyObject *key = PyList_GET_ITEM(last, 0);
    long long wakee = PyLong_AsLongLong(key);
    if (wakee == -1 && PyErr_Occurred())
        return -1;
    if (wakee < 0)
        return 0;
    PyObject *list = PyDict_GetItemWithError(wakers, key);
    if (list == NULL)
        return PyErr_Occurred() ? -1 : 0;
    Py_ssize_t n = PyList_Check(list) ? PyList_GET_SIZE(list) : 0;
    if (n < 2)
        return 0;
    long long cur = PyLong_AsLongLong(PyList_GET_ITEM(list, n - 1));
    if (cur == -1 && PyErr_Occurred())
        return -1;
    if (cur == WAKER_TIMER || (cur == WAKER_IRQ && code != WAKER_TIMER))
        return 0;
    PyObject *v = PyLong_FromLong(code);
    return v == NULL ? -1 : PyList_SetItem(list, n - 1, v);
}

PyObject *wake_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_ssize_t pos;
    if (nargs < 3 || nargs > 5 || !PyDict_Check(args[2]) ||
        (nargs >= 4 && !PyDict_Check(args[3])) ||
        (nargs == 5 && (!PyList_Check(args[4]) || PyList_GET_SIZE(args[4]) != 1)) ||
        (pos = PyLong_AsSsize_t(args[1])) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "wake_run(block, pos, wakes[, wakers[, last]])");
        return NULL;
    }
    PyObject *wakers = nargs >= 4 ? args[3] : NULL;
    /* last[0]: the wakee of the waking whose call chain the next frame lines are (-1: none),
     * kept across calls (a record may straddle two blocks) */
    PyObject *last = nargs == 5 && PyList_Check(args[4]) && PyList_GET_SIZE(args[4]) == 1 ?
        args[4] : NULL;
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
        long long wakee = 0, t = 0, waker = 0;
        int frame = wk_frame(line, stop);  /* >= 0: a frame of the last waking's chain */
        int r = frame >= 0 ? 0 : wk_line(line, stop, &wakee, &t, &waker);
        if (r < 0)
            break;
        if (frame > 0 && wakers != NULL && last != NULL &&
            wk_mark(wakers, last, frame == 1 ? WAKER_TIMER : WAKER_IRQ) < 0) {
            err = 1;
            break;
        }
        if (frame < 0 && last != NULL && r != 3 && wk_last(last, -1) < 0) {
            err = 1;
            break;
        }
        if (r == 2) {
            unparsed++;
        } else if (r == 3) {
            if (wakers != NULL && wk_waking(wakers, wakee, t, waker) < 0) {
                err = 1;
                break;
            }
            if (last != NULL && wk_last(last, wakee) < 0) {
                err = 1;
                break;
            }
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
