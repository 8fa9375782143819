// A wait with a known chain behind it: the reference for critical-path ("who kept me waiting")
// attribution. Request threads queue on one mutex, `g_chain_lock`; its holder computes, then
// waits for a second thread, `io-thread`, which works and wakes it; only then does the holder
// let the lock go. A request thread's wait for the lock is therefore made of the holder's
// `holder_compute` and the io-thread's `io_work`, in proportions the program measures itself.
//
//   request_loop (request-N): lock g_chain_lock -> critical_section:
//                               holder_compute (spin, --compute-us)
//                               -> wait_for_io: sem_post(g_io_request), sem_wait(g_io_done)
//                             -> unlock -> request_outside (spin, --outside-us)
//   io_loop (io-thread):      sem_wait(g_io_request) -> io_work (spin, --io-us)
//                             -> sem_post(g_io_done)
//
// With --no-io the critical section is holder_compute alone and there is no io-thread.
//
// Usage: chain [--duration S] [--requests N] [--compute-us N] [--io-us N] [--outside-us N]
//              [--no-io]
// Output (one JSON line): {"sample":"chain","variant":"io"|"no-io",...,"work":N,
//   "unit":"sections",...,"wait_s":..,"held_s":..,"compute_s":..,"io_wait_s":..,"io_s":..,
//   "compute_cpu_s":..,"io_cpu_s":..,"compute_share":..,"io_share":..}: wall times summed over
//   the threads (CLOCK_MONOTONIC), CPU times from CLOCK_THREAD_CPUTIME_ID; "wait_compute_s",
//   "wait_io_s", "wait_compute_share": the request threads' waits split over the phases of
//   the sections that ran during them (what each wait was waiting for, as a critical path
//   attributes it).
#include "../common/sample.h"

#include <semaphore.h>

#include <mutex>
#include <thread>
#include <vector>

namespace {

const char* const kUsage =
    "usage: chain [--duration SECONDS] [--requests N] [--compute-us N] [--io-us N]\n"
    "             [--outside-us N] [--no-io]\n"
    "  request threads take one mutex; its holder spins in holder_compute, then waits for\n"
    "  io-thread (io_work) before unlocking; outside the lock they spin in request_outside\n";

std::mutex g_chain_lock;
sem_t g_io_request;  // holder -> io-thread: one request to serve
sem_t g_io_done;     // io-thread -> holder: the request is served
std::atomic<bool> g_io_quit{false};
bool g_with_io = true;
int64_t g_compute_ns = 200000;
int64_t g_io_ns = 100000;
int64_t g_outside_ns = 50000;
std::atomic<uint64_t> g_sink{0};

int64_t thread_cpu_ns() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// sem_wait that resumes after an interruption (a tracer's stop).
void sem_wait_fully(sem_t* s) {
    while (sem_wait(s) != 0 && errno == EINTR) {
    }
}

// Each section's phases (CLOCK_MONOTONIC), by section number: written by its holder under the
// lock, read by a request thread once it holds the lock (the lock orders the two), so that
// each wait can be split over the phases of the sections that ran during it.
struct Phases {
    int64_t start = 0, io = 0, end = 0;  // compute from start, io from io, unlocked at end
};
constexpr uint64_t kPhases = 4096;
Phases g_phases[kPhases];
uint64_t g_sections = 0;  // sections begun (under the lock)

struct Totals {
    uint64_t sections = 0;
    int64_t wait_ns = 0, held_ns = 0, compute_ns = 0, io_wait_ns = 0, compute_cpu_ns = 0;
    // the waits' overlap with the sections' compute and io phases
    int64_t wait_compute_ns = 0, wait_io_ns = 0;

    void merge(const Totals& t) {
        wait_compute_ns += t.wait_compute_ns;
        wait_io_ns += t.wait_io_ns;
        sections += t.sections;
        wait_ns += t.wait_ns;
        held_ns += t.held_ns;
        compute_ns += t.compute_ns;
        io_wait_ns += t.io_wait_ns;
        compute_cpu_ns += t.compute_cpu_ns;
    }
};

struct IoTotals {
    uint64_t served = 0;
    int64_t io_ns = 0, io_cpu_ns = 0;
};

// Under the lock, the holder's own part: on-CPU. It times itself, so that a preemption at one
// of its clock reads (reading the thread's CPU clock is a system call, and the scheduler may
// switch on its return) counts in compute_s, under this frame.
__attribute__((noinline)) void holder_compute(Totals& t) {
    SAMPLE_FRAME();
    int64_t c0 = sample::now_ns();
    int64_t cpu0 = thread_cpu_ns();
    g_sink.fetch_add(spin_for(g_compute_ns), std::memory_order_relaxed);
    t.compute_cpu_ns += thread_cpu_ns() - cpu0;
    t.compute_ns += sample::now_ns() - c0;
}

// Under the lock, the io-thread's part: the holder hands it a request and sleeps until it is
// served.
__attribute__((noinline)) void wait_for_io() {
    SAMPLE_FRAME();
    sem_post(&g_io_request);
    sem_wait_fully(&g_io_done);
}

__attribute__((noinline)) void critical_section(Totals& t, Phases& me) {
    SAMPLE_FRAME();
    holder_compute(t);
    if (g_with_io) {
        int64_t i0 = me.io = sample::now_ns();
        wait_for_io();
        t.io_wait_ns += sample::now_ns() - i0;
    }
}

// Outside the lock: on-CPU.
__attribute__((noinline)) void request_outside() {
    SAMPLE_FRAME();
    g_sink.fetch_add(spin_for(g_outside_ns), std::memory_order_relaxed);
}

int64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
    int64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0;
}

// Under the lock: the wait [w0, h0) split over the phases of the sections since s0 (those
// begun before the wait, the one then running included, to this one).
void split_wait(Totals& t, int64_t w0, int64_t h0, uint64_t s0) {
    uint64_t first = s0 > 0 ? s0 - 1 : 0;
    if (g_sections - first > kPhases)
        first = g_sections - kPhases;
    for (uint64_t k = first; k < g_sections; k++) {
        const Phases& p = g_phases[k % kPhases];
        int64_t io = g_with_io ? p.io : p.end;
        t.wait_compute_ns += overlap(w0, h0, p.start, io);
        t.wait_io_ns += overlap(w0, h0, io, p.end);
    }
}

__attribute__((noinline)) void request_loop(int id, Totals& t) {
    SAMPLE_FRAME();
    sample::name_thread("request-" + std::to_string(id));
    while (!sample::g_stop.load(std::memory_order_relaxed)) {
        uint64_t s0 = __atomic_load_n(&g_sections, __ATOMIC_RELAXED);
        int64_t w0 = sample::now_ns();
        g_chain_lock.lock();
        int64_t h0 = sample::now_ns();
        t.wait_ns += h0 - w0;
        split_wait(t, w0, h0, s0);
        Phases& me = g_phases[g_sections % kPhases];
        me.start = h0;
        __atomic_store_n(&g_sections, g_sections + 1, __ATOMIC_RELAXED);
        critical_section(t, me);
        me.end = sample::now_ns();
        t.held_ns += me.end - h0;
        g_chain_lock.unlock();
        t.sections++;
        request_outside();
    }
}

// The io-thread's work for one request: on-CPU, while the holder sleeps under the lock. Timed
// inside, like holder_compute.
__attribute__((noinline)) void io_work(IoTotals& t) {
    SAMPLE_FRAME();
    int64_t i0 = sample::now_ns();
    int64_t cpu0 = thread_cpu_ns();
    g_sink.fetch_add(spin_for(g_io_ns), std::memory_order_relaxed);
    t.io_cpu_ns += thread_cpu_ns() - cpu0;
    t.io_ns += sample::now_ns() - i0;
}

// Serves requests until g_io_quit (set once every request thread has ended).
__attribute__((noinline)) void io_loop(IoTotals& t) {
    SAMPLE_FRAME();
    sample::name_thread("io-thread");
    for (;;) {
        sem_wait_fully(&g_io_request);
        if (g_io_quit.load()) break;
        io_work(t);
        t.served++;
        sem_post(&g_io_done);
    }
}

double seconds_of(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

double share(int64_t part, int64_t whole) {
    return whole > 0 ? std::round(static_cast<double>(part) / static_cast<double>(whole) * 1e4) /
                           1e4
                     : 0.0;
}

}  // namespace

int main(int argc, char** argv) {
    sample::Options opt(argc, argv, "chain", kUsage);
    double duration = opt.number("duration", 10, 0.1, 86400);
    int requests = static_cast<int>(opt.number("requests", 4, 1, 64));
    g_compute_ns = static_cast<int64_t>(opt.number("compute-us", 200, 0, 1e6) * 1000);
    g_io_ns = static_cast<int64_t>(opt.number("io-us", 100, 0, 1e6) * 1000);
    g_outside_ns = static_cast<int64_t>(opt.number("outside-us", 50, 0, 1e6) * 1000);
    g_with_io = !opt.flag("no-io");
    opt.done();
    sem_init(&g_io_request, 0, 0);
    sem_init(&g_io_done, 0, 0);
    sample::block_stop_signals();
    IoTotals io;
    std::thread io_thread;
    if (g_with_io) io_thread = std::thread(io_loop, std::ref(io));
    sample::Workers<Totals> workers(requests);
    workers.start(request_loop);
    double seconds = workers.run_for(duration);
    if (g_with_io) {
        g_io_quit = true;
        sem_post(&g_io_request);
        io_thread.join();
    }
    const Totals& all = workers.sum();
    int64_t section_ns = all.compute_ns + all.io_wait_ns;
    sample::Result("chain", g_with_io ? "io" : "no-io", seconds, all.sections, "sections")
        .add("requests", requests)
        .add("compute_us", static_cast<double>(g_compute_ns) * 1e-3)
        .add("io_us", g_with_io ? static_cast<double>(g_io_ns) * 1e-3 : 0.0)
        .add("outside_us", static_cast<double>(g_outside_ns) * 1e-3)
        .add("io_served", io.served)
        .add("wait_s", seconds_of(all.wait_ns))
        .add("held_s", seconds_of(all.held_ns))
        .add("compute_s", seconds_of(all.compute_ns))
        .add("io_wait_s", seconds_of(all.io_wait_ns))
        .add("io_s", seconds_of(io.io_ns))
        .add("compute_cpu_s", seconds_of(all.compute_cpu_ns))
        .add("io_cpu_s", seconds_of(io.io_cpu_ns))
        .add("compute_share", share(all.compute_ns, section_ns))
        .add("io_share", share(all.io_wait_ns, section_ns))
        .add("wait_compute_s", seconds_of(all.wait_compute_ns))
        .add("wait_io_s", seconds_of(all.wait_io_ns))
        .add("wait_compute_share",
             share(all.wait_compute_ns, all.wait_compute_ns + all.wait_io_ns))
        .print();
    return 0;
}
