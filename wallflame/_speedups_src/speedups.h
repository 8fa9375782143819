/* wallflame._speedups: the native module's shared declarations.  One file per concern:
 *
 *   intern.c       Interner (split, fold_plain): folded lines into a profile's stacks, each
 *                  distinct frame name one shared string.
 *   perf_folder.c  PerfFolder: perf script records in the common shape.
 *   switches.c     the scheduler capture: switch_lines, SwitchTracker, perf_switches, the
 *                  wake-up capture's wake_run, and finish's passes (wake_split, in_caps,
 *                  apply_lag, clip_log).
 *   tree.c         the passes over a profile's stacks for the report: grow, grow_stacks,
 *                  tree_rows, group_weights, frame_weights, frame_names, stacks_naming.
 *   timeline.c     span_rows (the interval log into the timeline) and ints_json (the page's
 *                  and the timeline's lists of ints).
 *   libdw.c        frame_callback: libdw's frame callback, without the interpreter.
 *   module.c       the module's table and initialisation.
 *
 * Each mirrors the Python code named at it, which gives the same results (the tests compare
 * the two).  Nothing here parses a whole format: the Python code decides what a line means,
 * these functions only do its per-frame or per-record work. */

#ifndef WALLFLAME_SPEEDUPS_H
#define WALLFLAME_SPEEDUPS_H

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

/* intern.c */
extern PyTypeObject InternerType;
extern int tuple_hash_ok;
int check_tuple_hash(void);
uint64_t hash_bytes(const char *p, Py_ssize_t n);
void *slots_rehash(const void *old, Py_ssize_t old_cap, Py_ssize_t cap, size_t size,
                   size_t hash_at, size_t obj_at);

/* perf_folder.c */
extern PyTypeObject PerfFolderType;

/* switches.c */
extern PyTypeObject SwitchTrackerType;
PyObject *switch_lines(PyObject *module, PyObject *arg);
PyObject *perf_switches(PyObject *module, PyObject *arg);
PyObject *wake_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *wake_split(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *in_caps(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *apply_lag(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *clip_log(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
int sk_buf(PyObject *o, Py_buffer *v, Py_ssize_t itemsize, int writable);

/* tree.c */
PyObject *grow(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *grow_stacks(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *tree_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *group_weights(PyObject *module, PyObject *stacks);
PyObject *frame_weights(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *frame_names(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *stacks_naming(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* timeline.c */
PyObject *span_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *ints_json(PyObject *module, PyObject *list);

/* libdw.c */
PyObject *frame_callback(PyObject *self, PyObject *unused);

/* A hash of a 64-bit key for the open-addressing tables of switches.c and timeline.c. */
static inline uint64_t sw_hash(int64_t k)
{
    uint64_t x = (uint64_t)k * 0x9E3779B97F4A7C15ULL;
    return x ^ (x >> 29);
}

#endif
