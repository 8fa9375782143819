#include "speedups.h"

/* The module: its functions (declared in speedups.h, one file per concern) and types. */

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
     "wake_run(block, pos, wakes[, wakers]) -> (next, records, unparsed)"},
    {"span_rows", (PyCFunction)(void (*)(void))span_rows, METH_FASTCALL,
     "span_rows(thread, tid, start, dur, kind, sample, period, resolve, lock_kinds, ref_of, "
     "runnable, unsampled): the interval log into the timeline's threads"},
    {"ints_json", (PyCFunction)ints_json, METH_O,
     "ints_json(list) -> str: the JSON array of a list of 64-bit ints"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "wallflame._speedups",
    "Native versions of wallflame's hot paths (see wallflame/speedups.py).", -1, module_methods,
};

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
