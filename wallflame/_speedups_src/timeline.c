#include "speedups.h"

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
PyObject *span_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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
PyObject *ints_json(PyObject *module, PyObject *list)
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
