#include "speedups.h"

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
     * judged after the release: wallflame.collect.locks.holders): mem_size bytes of the target's
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

PyObject *frame_callback(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromVoidPtr((void *)(uintptr_t)wf_frame_cb);
}
