// One mutex whose critical section is split between a spin in one named function and a sleep in
// another; everything else each worker does happens outside the lock. It is the reference for
// lock-holder attribution: a holder's stack taken while it holds `g_lock` can only be in
// `spin_under_lock` or `sleep_under_lock` (called from `critical_section`), never in
// `outside_work`, `outside_sleep`, the lock wait or the unlock.
//
//   worker_loop:  outside_work (spin, --outside-us)  ->  outside_sleep (--outside-sleep-us)
//                 -> lock g_lock -> critical_section: spin_under_lock (--spin-us) on odd turns,
//                    sleep_under_lock (--sleep-us) on even turns -> unlock
//
// Usage: critsec [--duration S] [--threads N] [--spin-us N] [--sleep-us N] [--outside-us N]
//                [--outside-sleep-us N] [--progress-ms MS]
// Output (one JSON line): {"sample":"critsec","variant":"mutex",...,"work":N,"unit":"sections",
//   "held_spin_s":..,"held_sleep_s":..,"wait_s":..,"wait_spin_s":..,"wait_sleep_s":..} where
//   held_* is the time spent in each half of the critical section, wait_s the workers' time
//   blocked in pthread_mutex_lock, and wait_spin_s/wait_sleep_s those waits split over the
//   sections that ran during them (what a critical path gives a waiter), each summed over the
//   workers (CLOCK_MONOTONIC). Every --progress-ms (250; 0: none) a progress line gives that
//   split so far: {"t_ns":..,"wait_spin_ns":..,"wait_sleep_ns":..}.
#include "../common/sample.h"

#include <pthread.h>

#include <thread>
#include <vector>

namespace {

const char* const kUsage =
    "usage: critsec [--duration SECONDS] [--threads N] [--spin-us N] [--sleep-us N]\n"
    "               [--outside-us N] [--outside-sleep-us N] [--progress-ms MS]\n"
    "  one mutex; its critical section spins in spin_under_lock or sleeps in sleep_under_lock\n"
    "  (alternately); workers spin in outside_work and sleep in outside_sleep outside the lock\n"
    "  --progress-ms  milliseconds between progress lines on stdout (default 250; 0: none)\n";

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
int64_t g_spin_ns = 10000000;
int64_t g_sleep_ns = 10000000;
int64_t g_outside_ns = 300000;
int64_t g_outside_sleep_ns = 1000000;
std::atomic<uint64_t> g_sink{0};

// Each section's phases: spinning from start to mid, sleeping from mid to end (a section
// does one or the other).
sample::SectionLog g_sections;

struct Totals {
    uint64_t sections = 0;
    int64_t spin_ns = 0, sleep_ns = 0, wait_ns = 0;
    int64_t wait_spin_ns = 0, wait_sleep_ns = 0;  // the waits split over those phases

    void merge(const Totals& t) {
        wait_spin_ns += t.wait_spin_ns;
        wait_sleep_ns += t.wait_sleep_ns;
        sections += t.sections;
        spin_ns += t.spin_ns;
        sleep_ns += t.sleep_ns;
        wait_ns += t.wait_ns;
    }
};

// Under the lock: on-CPU half.
__attribute__((noinline)) void spin_under_lock() {
    SAMPLE_FRAME();
    g_sink.fetch_add(spin_for(g_spin_ns), std::memory_order_relaxed);
}

// Under the lock: off-CPU half.
__attribute__((noinline)) void sleep_under_lock() {
    SAMPLE_FRAME();
    nap(g_sleep_ns);
}

__attribute__((noinline)) void critical_section(uint64_t turn, Totals& t) {
    SAMPLE_FRAME();
    int64_t t0 = sample::now_ns();
    if (turn & 1) {
        spin_under_lock();
        t.spin_ns += sample::now_ns() - t0;
    } else {
        sleep_under_lock();
        t.sleep_ns += sample::now_ns() - t0;
    }
}

// Outside the lock: on-CPU.
__attribute__((noinline)) void outside_work() {
    SAMPLE_FRAME();
    g_sink.fetch_add(spin_for(g_outside_ns), std::memory_order_relaxed);
}

// Outside the lock: off-CPU.
__attribute__((noinline)) void outside_sleep() {
    SAMPLE_FRAME();
    if (g_outside_sleep_ns > 0) nap(g_outside_sleep_ns);
}

__attribute__((noinline)) void worker_loop(int id, Totals& t) {
    SAMPLE_FRAME();
    sample::name_thread("worker-" + std::to_string(id));
    uint64_t turn = static_cast<uint64_t>(id);
    while (!sample::g_stop.load(std::memory_order_relaxed)) {
        outside_work();
        outside_sleep();
        uint64_t s0 = g_sections.begun();
        int64_t w0 = sample::now_ns();
        pthread_mutex_lock(&g_lock);
        int64_t h0 = sample::now_ns();
        t.wait_ns += h0 - w0;
        g_sections.split(w0, h0, s0, t.wait_spin_ns, t.wait_sleep_ns);
        sample::SectionLog::Entry& me = g_sections.begin(h0);
        bool spin = turn & 1;
        critical_section(turn++, t);
        me.end = sample::now_ns();
        me.mid = spin ? me.end : me.start;
        pthread_mutex_unlock(&g_lock);
        t.sections++;
    }
}

}  // namespace

int main(int argc, char** argv) {
    sample::Options opt(argc, argv, "critsec", kUsage);
    double duration = opt.number("duration", 10, 0.1, 86400);
    double progress_ms = opt.number("progress-ms", 250, 0, 60000);
    int threads = static_cast<int>(opt.number("threads", 3, 1, 64));
    g_spin_ns = static_cast<int64_t>(opt.number("spin-us", 10000, 0, 1e6) * 1000);
    g_sleep_ns = static_cast<int64_t>(opt.number("sleep-us", 10000, 0, 1e6) * 1000);
    g_outside_ns = static_cast<int64_t>(opt.number("outside-us", 300, 0, 1e6) * 1000);
    g_outside_sleep_ns = static_cast<int64_t>(opt.number("outside-sleep-us", 1000, 0, 1e6) * 1000);
    opt.done();
    sample::block_stop_signals();
    sample::Workers<Totals> workers(threads);
    workers.start(worker_loop);
    sample::wait_until_stop(duration, progress_ms / 1000, [&] {
        sample::print_split(g_sections, "wait_spin_ns", "wait_sleep_ns");
    });
    double seconds = workers.join();
    const Totals& all = workers.sum();
    sample::Result("critsec", "mutex", seconds, all.sections, "sections")
        .add("threads", threads)
        .add("held_spin_s", static_cast<double>(all.spin_ns) * 1e-9)
        .add("held_sleep_s", static_cast<double>(all.sleep_ns) * 1e-9)
        .add("wait_s", static_cast<double>(all.wait_ns) * 1e-9)
        .add("wait_spin_s", static_cast<double>(all.wait_spin_ns) * 1e-9)
        .add("wait_sleep_s", static_cast<double>(all.wait_sleep_ns) * 1e-9)
        .print();
    return 0;
}
